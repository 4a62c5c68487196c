//! `beebot-server export` as the field reads it: a round crawled by a real
//! server and a real client against the synthetic web (politeness delay on),
//! plus one site whose link file holds anchor text with tabs, quotes, line
//! breaks and non-ASCII text; exported in every format and compression, and
//! read back by an independent reader (DuckDB, [`beebot_tests::duckdb`]),
//! which must find exactly the rows of the TSV. The host graph is checked
//! against the TSV too: every host a vertex, sorted, every edge between
//! known vertices, sorted, without repeats or self-loops.

use std::collections::BTreeSet;
use std::path::Path;

use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::LinkRecord;
use beebot_shared::proto::{Request, Response};
use beebot_shared::sign;
use beebot_tests::duckdb::{self, sql_path};
use beebot_tests::hostile::{join_raw, link_file, upload, Joined};
use beebot_tests::*;

/// Sites of the synthetic web the round crawls.
const SITES: usize = 6;
/// The round's politeness delay between two fetches of a site.
const DELAY_MS: &str = "5";
/// The exports read back, each in the format and compression its name says.
const EXPORTS: [&str; 6] = [
    "links.tsv",
    "links.tsv.zst",
    "links.tsv.gz",
    "links.jsonl",
    "links.jsonl.gz",
    "links.parquet",
];
/// The columns, typed as the export means them.
const COLUMN_TYPES: &str = "{'site': 'VARCHAR', 'source_url': 'VARCHAR', \
    'target_url': 'VARCHAR', 'target_host': 'VARCHAR', 'tag': 'VARCHAR', \
    'nofollow': 'BOOLEAN', 'anchor_text': 'VARCHAR'}";

/// Anchor texts no TSV writer gets right by chance.
fn odd_records(site: &str) -> Vec<LinkRecord> {
    let anchors = [
        "tab\there, \"double\" and 'single' quotes",
        "line\nbreak; back\\slash, comma",
        "ünïcödé 蜂 🐝 — ∑",
        "",
    ];
    anchors
        .iter()
        .enumerate()
        .map(|(i, anchor)| LinkRecord {
            source_url: format!("http://{site}/"),
            target_url: match i {
                0 => "http://elsewhere.test/".to_string(),
                1 => "http://www.elsewhere.test/b".to_string(),
                // A link back into the site: a self-loop in the host graph.
                2 => format!("http://{site}/inner"),
                _ => "http://other.example/x".to_string(),
            },
            tag: if i == 3 { LinkTag::Area } else { LinkTag::A },
            nofollow: i % 2 == 1,
            anchor_text: anchor.to_string(),
        })
        .collect()
}

/// Host `j` takes one unit and uploads [`odd_records`] as its scan.
fn upload_odd_site(j: &Joined) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let link = j.hello().await.expect("hello");
        let ask = Request::RequestWork {
            want_seconds: 60,
            free_slots: 1,
            units_held: vec![],
            open_windows: None,
        };
        let Ok(Response::Work { units, .. }) = link.request(&ask).await else {
            panic!("no work for the odd site");
        };
        let signed = units.first().expect("a unit");
        let unit = sign::verify_unit(&j.project_key, signed).expect("signed unit");
        let records = odd_records(&unit.site);
        let file = link_file(&unit, &unit.site, &records);
        let answer = link
            .request(&upload(&unit, file, records.len() as u64))
            .await;
        assert!(matches!(answer, Ok(Response::Accepted)), "{answer:?}");
        link.close();
    });
}

/// A done round: one site with odd anchors, the others crawled for real.
fn crawled_round(g: &Grid) -> String {
    let code = g.invite(1);
    let a = join_raw(g, "a", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    upload_odd_site(&a);
    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "240s");
    round
}

/// A row as the TSV holds it: tabs and line breaks inside a field are spaces.
fn as_tsv(row: Vec<String>) -> Vec<String> {
    row.into_iter()
        .map(|f| f.replace(['\t', '\n', '\r'], " "))
        .collect()
}

/// The rows of an export file, read by DuckDB, as strings in TSV's spelling.
fn read_back(py: &Path, path: &Path) -> Vec<Vec<String>> {
    let p = sql_path(path);
    let name = path.display().to_string();
    let source = if name.contains(".parquet") {
        format!("read_parquet({p})")
    } else if name.contains(".jsonl") {
        format!("read_json({p}, format = 'newline_delimited', columns = {COLUMN_TYPES})")
    } else {
        format!(
            "read_csv({p}, delim = '\t', header = true, quote = '', escape = '', \
             auto_detect = false, columns = {})",
            COLUMN_TYPES.replace("'BOOLEAN'", "'VARCHAR'")
        )
    };
    let sql = format!(
        "SELECT coalesce(site, ''), coalesce(source_url, ''), coalesce(target_url, ''), \
         coalesce(target_host, ''), coalesce(tag, ''), lower(CAST(nofollow AS VARCHAR)), \
         coalesce(anchor_text, '') FROM {source}"
    );
    duckdb::query(py, &sql)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|v| v.as_str().expect("a string").to_string())
                .collect()
        })
        .collect()
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

/// `beebot-server export --round R --out DIR/NAME` (format from the name).
fn export_to(g: &Grid, round: &str, path: &Path) -> std::process::Output {
    g.admin(&[
        "export",
        "--round",
        round,
        "--out",
        path.to_str().expect("path"),
    ])
}

#[test]
fn every_format_reads_back_in_duckdb_as_the_rows_of_the_tsv() {
    let Some(py) = duckdb::python() else { return };
    let g = Grid::start(41, SITES);
    let round = crawled_round(&g);
    let tsv = sorted(g.export_rows(&round));
    assert!(tsv.len() > 50, "{} rows", tsv.len());
    let dir = g.dir.path().join("exports");
    std::fs::create_dir_all(&dir).expect("dir");
    for name in EXPORTS {
        let path = dir.join(name);
        let o = export_to(&g, &round, &path);
        assert!(o.status.success(), "export {name}: {}", stderr(&o));
        let raw = read_back(&py, &path);
        if name.contains("jsonl") || name.contains("parquet") {
            let anchors: Vec<&String> = raw.iter().map(|r| &r[6]).collect();
            assert!(
                anchors.iter().any(|a| a.contains('\t') && a.contains('"')),
                "{name}"
            );
            assert!(anchors.iter().any(|a| a.contains('\n')), "{name}");
        }
        let got = sorted(raw.into_iter().map(as_tsv).collect());
        assert_eq!(got.len(), tsv.len(), "{name}: rows");
        assert_eq!(got, tsv, "{name}: the rows differ from the TSV's");
        assert!(got.iter().any(|r| r[6] == "ünïcödé 蜂 🐝 — ∑"), "{name}");
    }
    parquet_columns_are_typed(&py, &dir.join("links.parquet"));
    host_graph_matches_the_tsv(&g, &py, &round, &tsv);
    bad_requests_leave_no_file(&g, &round);
}

/// nofollow is BOOLEAN, the strings UTF-8, tag dictionary-encoded, pages zstd.
fn parquet_columns_are_typed(py: &Path, path: &Path) {
    let p = sql_path(path);
    let schema = duckdb::query(
        py,
        &format!("SELECT name, type, CAST(logical_type AS VARCHAR) FROM parquet_schema({p}) WHERE name <> 'link'"),
    );
    let types: Vec<(String, String)> = schema
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or("").into(),
                r[1].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let columns: Vec<&str> = types.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(columns, beebot_shared::export::COLUMNS, "{schema:?}");
    for (name, ty) in &types {
        let want = if name == "nofollow" {
            "BOOLEAN"
        } else {
            "BYTE_ARRAY"
        };
        assert_eq!(ty, want, "{name}: {schema:?}");
    }
    assert!(
        schema
            .iter()
            .filter(|r| r[0] != "nofollow")
            .all(|r| r[2].as_str().is_some_and(|t| t.contains("String"))),
        "strings are UTF-8: {schema:?}"
    );
    let meta = duckdb::query(
        py,
        &format!("SELECT path_in_schema, encodings, compression FROM parquet_metadata({p})"),
    );
    let tag = meta
        .iter()
        .find(|r| r[0] == "tag")
        .expect("tag column chunk");
    assert!(
        tag[1].as_str().is_some_and(|e| e.contains("DICTIONARY")),
        "{tag:?}"
    );
    assert!(meta.iter().all(|r| r[2] == "ZSTD"), "{meta:?}");
}

fn host_of(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default()
}

/// A host as Common Crawl's host graph names it: lower case, `www.` of a
/// name of three labels or more dropped, reversed; no vertex for a one-label
/// name or an IP address.
fn cc_name(host: &str) -> Option<String> {
    let host = host.to_ascii_lowercase();
    let mut labels: Vec<&str> = host.split('.').collect();
    let numeric = |l: &&str| l.chars().all(|c| c.is_ascii_digit());
    if labels.len() <= 1 || labels.iter().all(numeric) {
        return None;
    }
    if labels.len() > 2 && labels[0] == "www" {
        labels.remove(0);
    }
    labels.reverse();
    Some(labels.join("."))
}

/// `--graph host`: vertices and edges as Common Crawl lays them out, the
/// same hosts and host links as the TSV.
fn host_graph_matches_the_tsv(g: &Grid, py: &Path, round: &str, tsv: &[Vec<String>]) {
    let dir = g.dir.path().join("graph");
    let out = dir.to_str().expect("path");
    g.admin_ok(&["export", "--round", round, "--graph", "host", "--out", out]);
    let read = |file: &str, columns: &str| -> Vec<Vec<serde_json::Value>> {
        let p = sql_path(&dir.join(file));
        duckdb::query(
            py,
            &format!("SELECT * FROM read_csv({p}, delim = '\t', header = false, quote = '', auto_detect = false, columns = {columns})"),
        )
    };
    let vertices = read("vertices.txt.gz", "{'id': 'BIGINT', 'name': 'VARCHAR'}");
    let names: Vec<String> = vertices
        .iter()
        .enumerate()
        .map(|(i, v)| {
            assert_eq!(v[0].as_u64(), Some(i as u64), "ids 0..n in file order");
            v[1].as_str().expect("name").to_string()
        })
        .collect();
    assert!(
        names.windows(2).all(|w| w[0] < w[1]),
        "sorted, distinct: {names:?}"
    );
    let edges: Vec<(usize, usize)> = read("edges.txt.gz", "{'s': 'BIGINT', 't': 'BIGINT'}")
        .iter()
        .map(|e| {
            (
                e[0].as_u64().expect("s") as usize,
                e[1].as_u64().expect("t") as usize,
            )
        })
        .collect();
    assert!(edges.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    assert!(edges
        .iter()
        .all(|&(s, t)| s != t && s < names.len() && t < names.len()));
    let pairs: Vec<(String, String)> = tsv
        .iter()
        .filter_map(|r| Some((cc_name(&host_of(&r[1]))?, cc_name(&r[3])?)))
        .collect();
    let want_hosts: BTreeSet<String> = pairs
        .iter()
        .flat_map(|(s, t)| [s.clone(), t.clone()])
        .collect();
    let want_edges: BTreeSet<(String, String)> =
        pairs.into_iter().filter(|(s, t)| s != t).collect();
    assert_eq!(names.iter().cloned().collect::<BTreeSet<_>>(), want_hosts);
    let got_edges: BTreeSet<(String, String)> = edges
        .iter()
        .map(|&(s, t)| (names[s].clone(), names[t].clone()))
        .collect();
    assert_eq!(got_edges, want_edges);
    assert!(
        names.contains(&"test.elsewhere".to_string())
            && !names.contains(&"test.elsewhere.www".to_string()),
        "www.elsewhere.test is elsewhere.test: {names:?}"
    );
}

/// A format the name contradicts, a compressed Parquet file and an unknown
/// round are refused with their reason, and no file appears.
fn bad_requests_leave_no_file(g: &Grid, round: &str) {
    let dir = g.dir.path().join("refused");
    std::fs::create_dir_all(&dir).expect("dir");
    let cases: [(&[&str], &str, &str); 3] = [
        (
            &["--round", round, "--format", "parquet"],
            "links.tsv",
            "--format parquet but",
        ),
        (
            &["--round", round],
            "links.parquet.zst",
            "not compressed again",
        ),
        (&["--round", "999"], "links.tsv.gz", "999"),
    ];
    for (args, name, says) in cases {
        let path = dir.join(name);
        let mut all = vec!["export", "--out", path.to_str().expect("path")];
        all.extend(args);
        let o = g.admin(&all);
        assert!(!o.status.success(), "{all:?} succeeded");
        assert!(stderr(&o).contains(says), "{all:?}: {}", stderr(&o));
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert!(left.is_empty(), "{all:?} left {left:?}");
    }
}

/// `GET path` of the admin API with the bearer token: the body.
fn admin_get(g: &Grid, path: &str) -> String {
    let token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
    let addr = beebot_server::config::DataDir(g.data_dir())
        .load_runtime()
        .expect("serve.json")
        .admin_addr;
    let agent: ureq::Agent = ureq::Agent::config_builder().proxy(None).build().into();
    agent
        .get(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {}", token.trim()))
        .call()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .body_mut()
        .read_to_string()
        .expect("body")
}

/// The first put frame of a link file (`.lf`) in round `round`'s packs
/// under `links`: its pack and the offset and length of its data (the
/// frame layout of `beebot_server::grid::packs`).
fn first_link_file_frame(links: &Path, round: &str) -> (std::path::PathBuf, usize, usize) {
    let dir = links.join(round);
    let mut packs: Vec<_> = std::fs::read_dir(&dir)
        .expect("packs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "lfp"))
        .collect();
    packs.sort();
    for pack in packs {
        let b = std::fs::read(&pack).expect("pack");
        let mut at = 0;
        while at + 19 <= b.len() && &b[at..at + 4] == b"BBLP" {
            let kind = b[at + 4];
            let key_len = u16::from_le_bytes([b[at + 5], b[at + 6]]) as usize;
            let data_len =
                u32::from_le_bytes([b[at + 7], b[at + 8], b[at + 9], b[at + 10]]) as usize;
            let key = &b[at + 19..at + 19 + key_len];
            let data_at = at + 19 + key_len;
            if kind == 1 && key.ends_with(b".lf") {
                return (pack, data_at, data_len);
            }
            at = data_at + if kind == 1 { data_len } else { 0 };
        }
    }
    panic!("no link file in the packs of round {round}");
}

/// A site whose kept link file is damaged on disk (a byte flipped under
/// the server): `check` names it with its cause and exits 5; the export
/// leaves that site out whole, holds every row of every other site, names
/// the site and exits 5 (it once failed for the whole round with "Peer
/// disconnected"); a restarted server finds it at start (the metric);
/// `round rescan --damaged` scans it again and the export is whole.
#[test]
fn a_damaged_site_is_found_named_and_left_out_of_the_export_alone() {
    let mut g = Grid::start(43, 4);
    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "240s");
    let before = sorted(g.export_rows(&round));
    let ok = g.admin(&["check"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("0 damaged"), "{}", stdout(&ok));

    let (pack, data_at, len) = first_link_file_frame(&g.data_dir().join("links"), &round);
    assert!(len > 8, "{len}");
    let mut bytes = std::fs::read(&pack).expect("pack");
    bytes[data_at + len / 2] ^= 0xff;
    std::fs::write(&pack, bytes).expect("damage the pack");

    let o = g.admin(&["check", "--json"]);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let damaged = report["damaged"].as_array().expect("damaged").clone();
    assert_eq!(damaged.len(), 1, "{report:#}");
    let site = damaged[0]["site"].as_str().expect("site").to_string();
    let why = damaged[0]["why"].as_str().expect("why");
    assert!(why.contains("checksum") || why.contains("CRC"), "{why}");

    let path = g.dir.path().join("after.tsv");
    let o = export_to(&g, &round, &path);
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("site {site}:")),
        "{}",
        stderr(&o)
    );
    let text = std::fs::read_to_string(&path).expect("the export is written");
    let after: Vec<Vec<String>> = sorted(
        text.lines()
            .skip(1)
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect(),
    );
    let others: Vec<Vec<String>> = before.iter().filter(|r| r[0] != site).cloned().collect();
    assert!(others.len() < before.len(), "the damaged site had rows");
    assert!(!others.is_empty(), "other sites have rows");
    assert_eq!(after, others, "every other site's rows, none of {site}'s");

    // `round show` and the dashboard's round page name it too.
    let o = g.admin_ok(&["round", "show", &round]);
    assert!(
        stderr(&o).contains(&format!("site {site}:")),
        "{}",
        stderr(&o)
    );
    let page: serde_json::Value =
        serde_json::from_str(&admin_get(&g, &format!("/api/dashboard/rounds/{round}")))
            .expect("json");
    let shown = page["damaged"].as_array().expect("damaged").clone();
    assert_eq!(shown.len(), 1, "{page:#}");
    assert_eq!(shown[0]["site"], site.as_str());

    // Found again at start, without a check: the metric says so.
    g.kill_server();
    g.start_server();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let text = admin_get(&g, "/metrics");
        if text.lines().any(|l| l == "beebot_damaged_sites 1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // `round rescan --damaged` queues it again; scanned again, the round's
    // export holds every site whole and nothing is damaged.
    let o = g.admin(&["round", "rescan", &round]);
    assert!(!o.status.success(), "nothing named is refused");
    assert!(stderr(&o).contains("--damaged"), "{}", stderr(&o));
    let o = g.admin_ok(&["round", "rescan", &round, "--damaged"]);
    assert_eq!(stdout(&o).trim(), site, "{}", stderr(&o));
    let o = g.admin(&["round", "rescan", &round, "--damaged"]);
    assert!(!o.status.success(), "no damage is known any more");
    assert!(stderr(&o).contains("check --round"), "{}", stderr(&o));
    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "240s");
    assert_eq!(
        sorted(g.export_rows(&round)),
        before,
        "every site whole again"
    );
    let o = g.admin(&["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("0 damaged"), "{}", stdout(&o));
    assert!(admin_get(&g, "/metrics")
        .lines()
        .any(|l| l == "beebot_damaged_sites 0"));
}

/// A data dir the previous release left (`tests/fixtures/`, see
/// `beebot_tests::old_release`) opens with this build as it is: its round
/// shows done and exports the same rows that release exported, `check`
/// reads every result whole, and a new round on it runs to its end with a
/// client that joins now.
#[test]
fn a_data_dir_of_the_previous_release_opens_and_exports_the_same() {
    use beebot_tests::old_release;
    let fixture = old_release::fixture();
    let web = beebot_testkit::synth::SynthWeb::generate(old_release::SEED, old_release::SITES);
    let g = Grid::adopt(&fixture.join("server"), web);
    let rounds: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["round", "list", "--json"]))).expect("json");
    let rounds = rounds.as_array().expect("rounds").clone();
    assert_eq!(rounds.len(), 1, "{rounds:?}");
    assert_eq!(rounds[0]["state"], "done", "{rounds:?}");
    assert_eq!(rounds[0]["done"], old_release::SITES as u64, "{rounds:?}");

    let then = std::fs::read_to_string(fixture.join("round-1.tsv")).expect("fixture export");
    let path = g.dir.path().join("now.tsv");
    let o = export_to(&g, "1", &path);
    assert!(o.status.success(), "{}", stderr(&o));
    let now = std::fs::read_to_string(&path).expect("export");
    assert!(then.lines().count() > 1, "the fixture has rows");
    assert_eq!(now, then, "the same rows, in the same order");
    let o = g.admin(&["check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("0 damaged"), "{}", stdout(&o));

    let code = g.invite(1);
    g.join("b", &code);
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    assert_eq!(round, "2");
    g.run_once("b", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "240s");
    assert!(!g.export_rows(&round).is_empty());
}
