//! See `first_hour.rs`. The admin's first hour with `beebot-server`:
//! durations typed without a unit or out of range, waits that showed
//! nothing, hosts that could not be told apart, empty lists, a site added
//! twice under two names, an export into `head`, and a server log that did
//! not say what happened.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use beebot_server::cli_util::utc_minute;
use beebot_shared::proto::{Request, Response};
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_tests::hostile::{join_raw, upload_of_unknown_unit, Joined};
use beebot_tests::*;

/// Asserts a command failed and its stderr says each of `needles`.
fn refused(o: &Output, needles: &[&str]) -> String {
    let err = stderr(o);
    assert!(!o.status.success(), "should fail:\n{}\n{err}", stdout(o));
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`:\n{err}");
    }
    err
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).expect("json")
}

#[test]
fn durations_need_a_unit_and_a_sensible_range_and_are_echoed_in_words() {
    let g = Grid::start(41, 2);
    g.import_sites();

    // A bare number is refused by the parser (usage error), and nothing starts.
    let o = g.admin(&["round", "start", "--every", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    refused(&o, &["has no unit", "5s, 5m, 5h or 5d"]);
    let o = g.admin(&["round", "start", "--max-deadline", "2"]);
    refused(&o, &["has no unit"]);
    let o = g.admin(&["invite", "--expires", "14"]);
    refused(&o, &["has no unit"]);

    // Out of range: said in the words typed, with the way out.
    let o = g.admin(&["round", "start", "--every", "5m"]);
    refused(&o, &["--every 5m is shorter than 60m", "--force"]);
    let o = g.admin(&["round", "start", "--max-deadline", "2s"]);
    refused(&o, &["--max-deadline 2s is shorter than 60s", "--force"]);
    // Even forced, a maximum below the round's minimum (the config's 2m)
    // is refused, not clamped.
    let o = g.admin(&["round", "start", "--max-deadline", "90s", "--force"]);
    refused(
        &o,
        &["maximum deadline (1m 30s) is below the minimum deadline (2m)"],
    );
    let o = g.admin(&["round", "start", "--max-crawl-delay", "90s"]);
    let err = refused(&o, &["--max-crawl-delay 90s is longer than 60s"]);
    assert!(!err.contains("ms"), "{err}");
    let o = g.admin(&["invite", "--expires", "30s"]);
    refused(&o, &["--expires 30s is shorter than 60s"]);
    let o = g.admin(&["invite", "--expires", "400d"]);
    refused(&o, &["--expires 400d is longer than 365d"]);
    let o = g.admin(&["round", "list", "--json"]);
    assert_eq!(json(&o), serde_json::json!([]), "nothing was started");

    // Accepted values are echoed in human terms.
    let before = beebot_server::now_ms();
    let o = g.admin_ok(&["invite", "--uses", "25", "--expires", "14d"]);
    let after = beebot_server::now_ms();
    let first = stdout(&o).lines().next().unwrap_or("").to_string();
    const FORTNIGHT_MS: u64 = 14 * 24 * 3600 * 1000;
    let dates = [
        utc_minute(before + FORTNIGHT_MS),
        utc_minute(after + FORTNIGHT_MS),
    ];
    assert!(
        first.starts_with("invite for 25 host(s), expires in 14 days (")
            && dates.iter().any(|d| first.contains(d.as_str())),
        "{first} (expected one of {dates:?})"
    );
    let o = g.admin_ok(&["round", "start", "--every", "7d"]);
    let id = last_line(&o);
    assert_eq!(
        stdout(&o).lines().next(),
        Some(format!("round {id} started; repeats every 7 days").as_str())
    );
    let rounds = json(&g.admin_ok(&["round", "list", "--json"]));
    assert_eq!(rounds[0]["every_s"], 7 * 24 * 3600, "{rounds}");
    g.admin_ok(&["round", "cancel", &id]);
    // Deadlines as asked: the minimum lowered for this round only.
    let o = g.admin_ok(&[
        "round",
        "start",
        "--min-deadline",
        "90s",
        "--max-deadline",
        "1d",
    ]);
    let d = g.round_json(&last_line(&o));
    assert_eq!(d["round"]["params"]["deadline_min_s"], 90);
    assert_eq!(d["round"]["params"]["deadline_max_s"], 24 * 3600);
    g.admin_ok(&["round", "cancel", &last_line(&o)]);
}

#[test]
fn durations_in_the_config_file_take_a_unit_when_written_as_text() {
    let mut g = Grid::start(42, 1);
    g.import_sites();
    let config = g.data_dir().join("config.toml");
    let text = std::fs::read_to_string(&config).expect("config");
    let set = |line: &str| {
        let mut out = String::new();
        for l in text.lines() {
            if l.starts_with("deadline_max_s") {
                out.push_str(line);
            } else {
                out.push_str(l);
            }
            out.push('\n');
        }
        std::fs::write(&config, out).expect("write config");
    };
    g.kill_server();
    // A bare number in text is refused with the reason, and nothing serves.
    set("deadline_max_s = \"5\"");
    let o = g.admin(&["serve"]);
    refused(&o, &["config.toml", "has no unit"]);
    set("deadline_max_s = \"1d\"");
    g.start_server();
    let o = g.admin_ok(&["round", "start"]);
    let d = g.round_json(&last_line(&o));
    assert_eq!(d["round"]["params"]["deadline_max_s"], 24 * 3600);
}

#[test]
fn lists_say_when_empty_have_json_and_hosts_are_told_apart_by_name() {
    let g = Grid::start(43, 2);
    empty_lists_say_so_and_have_json(&g);
    hosts_are_joined_and_revoked_by_name(&g);

    // Lists with content: stable JSON fields.
    g.import_sites();
    let sites = json(&g.admin_ok(&["sites", "list", "--json"]));
    let first = &sites[0];
    for field in ["site", "added_ms", "last_round", "pages", "links"] {
        assert!(first.get(field).is_some(), "{field}: {sites}");
    }
    let id = last_line(&g.admin_ok(&["round", "start"]));
    let rounds = json(&g.admin_ok(&["round", "list", "--json"]));
    assert_eq!(rounds[0]["id"].to_string(), id);
    assert_eq!(rounds[0]["state"], "running");
    assert_eq!(rounds[0]["jobs"], 2);
    let o = g.admin_ok(&["round", "list"]);
    assert!(stdout(&o).starts_with("id\tstate"), "{}", stdout(&o));
}

/// Empty lists print no bare header, say so on stderr, give `[]` as JSON;
/// their help names `--json`.
fn empty_lists_say_so_and_have_json(g: &Grid) {
    for (args, note) in [
        (
            &["hosts", "list"][..],
            "no hosts yet: create an invite with `beebot-server invite`",
        ),
        (&["round", "list"][..], "no rounds yet"),
        (&["sites", "list"][..], "no sites yet"),
    ] {
        let o = g.admin_ok(args);
        assert_eq!(stdout(&o), "", "{args:?}: no bare header");
        assert!(stderr(&o).contains(note), "{args:?}: {}", stderr(&o));
        let mut with_json = args.to_vec();
        with_json.push("--json");
        assert_eq!(json(&g.admin_ok(&with_json)), serde_json::json!([]));
    }
    // Help says what each list is.
    for args in [["hosts", "list"], ["round", "list"], ["sites", "list"]] {
        let o = g.admin_ok(&[args[0], args[1], "--help"]);
        assert!(stdout(&o).contains("--json"), "{}", stdout(&o));
    }
}

/// A name taken by an enrolled host (in any case) gets a suffix at join,
/// so hosts stay told apart by name; hosts are revoked by name, even one
/// with a space and a plus sign; a revoked host's name may be taken again.
fn hosts_are_joined_and_revoked_by_name(g: &Grid) {
    let code = g.invite(3);
    let alice = g.join("alice", &code);
    let o = g.client("alice2", &["join", &code, "--name", "ALICE"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(ALICE-2)"), "{}", stdout(&o));
    let hosts = json(&g.admin_ok(&["hosts", "list", "--json"]));
    assert_eq!(hosts.as_array().map(Vec::len), Some(2), "{hosts}");
    let bob = g.join("bob", &code);
    assert_ne!(bob, alice);

    // Revoked by name; an unknown name is refused.
    let o = g.admin(&["hosts", "revoke", "carol"]);
    refused(&o, &["no host is named `carol`"]);
    let o = g.admin_ok(&["hosts", "revoke", "alice"]);
    assert_eq!(
        stdout(&o).trim(),
        format!("host {alice} (alice) revoked"),
        "{}",
        stdout(&o)
    );
    let o = g.admin_ok(&["hosts", "revoke", &bob.to_string()]);
    assert!(stdout(&o).contains("(bob) revoked"), "{}", stdout(&o));
    // A name with a space and a plus sign goes through the API intact.
    let lab = g.client("lab", &["join", &g.invite(1), "--name", "lab pc+1"]);
    assert!(lab.status.success(), "{}", stderr(&lab));
    let o = g.admin_ok(&["hosts", "revoke", "lab pc+1"]);
    assert!(stdout(&o).contains("(lab pc+1) revoked"), "{}", stdout(&o));
    // A revoked host's name may be taken again.
    let code = g.invite(1);
    let again = g.client("alice3", &["join", &code, "--name", "alice"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let hosts = json(&g.admin_ok(&["hosts", "list", "--json"]));
    let active: Vec<&serde_json::Value> = hosts
        .as_array()
        .expect("hosts")
        .iter()
        .filter(|h| h["revoked"] == false)
        .collect();
    // alice's name again, beside ALICE-2 (not revoked) that took the suffix.
    let names: Vec<&str> = active
        .iter()
        .filter_map(|h| h["info"]["name"].as_str())
        .collect();
    assert_eq!(names, ["ALICE-2", "alice"], "{hosts}");
}

#[test]
fn a_site_is_one_site_with_or_without_www_and_is_removed_by_url() {
    let g = Grid::start(44, 1);
    g.admin_ok(&["sites", "add", "www.attrs.test"]);
    let o = g.admin(&["sites", "add", "attrs.test"]);
    refused(&o, &["`attrs.test` is the same site as `www.attrs.test`"]);
    g.admin_ok(&["sites", "add", "https://plain.test/"]);
    let o = g.admin(&["sites", "add", "other.test", "www.plain.test"]);
    refused(&o, &["`www.plain.test` is the same site as `plain.test`"]);
    let sites = json(&g.admin_ok(&["sites", "list", "--json"]));
    let names: Vec<&str> = sites
        .as_array()
        .expect("sites")
        .iter()
        .filter_map(|s| s["site"].as_str())
        .collect();
    assert_eq!(
        names,
        ["plain.test", "www.attrs.test"],
        "nothing else added"
    );

    // A URL, or the other name of the site, removes it.
    let o = g.admin_ok(&["sites", "remove", "https://attrs.test/some/page?q=1"]);
    assert_eq!(stdout(&o).trim(), "removed www.attrs.test");
    let o = g.admin_ok(&["sites", "remove", "http://www.plain.test/"]);
    assert_eq!(stdout(&o).trim(), "removed plain.test");
    let o = g.admin(&["sites", "remove", "https://attrs.test/"]);
    refused(&o, &["no site attrs.test"]);
}

/// `round wait` with a terminal: run under `script`, which gives it one.
fn wait_on_a_terminal(g: &Grid, round: &str) -> std::process::Child {
    let cmd = format!(
        "{} round wait {round} --timeout 120s --data-dir {}",
        bin("beebot-server").display(),
        g.data_dir().display()
    );
    Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script (util-linux) runs round wait on a pseudo-terminal")
}

fn wait_output(mut child: std::process::Child) -> (Option<i32>, String) {
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut text).expect("read");
    }
    let status = child.wait().expect("wait");
    (status.code(), text)
}

/// The jobs-done counts of `round wait`'s progress lines.
fn done_counts(text: &str) -> Vec<u64> {
    text.split(['\n', '\r'])
        .filter_map(|l| l.split(": ").nth(1))
        .filter_map(|l| l.split_once(" jobs done").map(|(n, _)| n))
        .filter_map(|n| n.split('/').next()?.parse().ok())
        .collect()
}

/// `round wait` off a terminal: plain progress lines every second.
fn wait_piped(g: &Grid, round: &str) -> std::process::Child {
    Command::new(bin("beebot-server"))
        .args([
            "round",
            "wait",
            round,
            "--timeout",
            "120s",
            "--report-every",
            "1s",
        ])
        .arg("--data-dir")
        .arg(g.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("round wait")
}

#[test]
fn round_wait_shows_progress_round_show_names_hosts_and_status_counts_the_last_round() {
    // Four sites of 50 pages at 250 ms a page: scans long enough to report
    // progress (every 10 s) before they end.
    let web = SynthWeb::with_config(
        45,
        4,
        SynthConfig {
            min_pages_per_site: 50,
            max_pages_per_site: 50,
            crawl_delay_ms: None,
        },
    );
    let g = Grid::start_with(web);
    let code = g.invite(1);
    let host = g.join("alice", &code);
    g.import_sites();
    let total = g.web.site_hosts().len();

    // A polite round: long enough to watch.
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "250"]));
    let piped = wait_piped(&g, &round);
    let tty = wait_on_a_terminal(&g, &round);
    let started = Instant::now();
    let client = g.run_once("alice", 4, &[]);
    round_show_names_the_host_scanning_each_site(&g, &round, host, started);
    client.wait_ok("alice");
    round_wait_shows_progress_off_and_on_a_terminal(&round, total, started, piped, tty);
    status_counts_the_last_round_and_shows_the_dashboard(&g, &round, host, total);
    status_counts_a_round_without_delay_at_once(&g, total);
    round_wait_exits_3_on_timeout_and_4_for_a_cancelled_round(&g);
}

/// While `round` runs (started at `started`), `round show` names the host
/// scanning each site and its pages.
fn round_show_names_the_host_scanning_each_site(
    g: &Grid,
    round: &str,
    host: u64,
    started: Instant,
) {
    let seen = loop {
        let d = g.round_json(round);
        let running: Vec<serde_json::Value> = d["sites"]
            .as_array()
            .expect("sites")
            .iter()
            .flat_map(|s| s["running"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["pages"].as_u64().unwrap_or(0) > 0)
            .collect();
        if let Some(r) = running.first() {
            break r.clone();
        }
        assert!(
            d["round"]["state"] == "Running" && started.elapsed() < Duration::from_secs(60),
            "no running scan with pages seen: {d}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(seen["host_name"], "alice", "{seen}");
    assert_eq!(seen["host"], host);
    let text = stdout(&g.admin_ok(&["round", "show", round]));
    assert!(
        text.contains(&format!("alice#{host} (")) || text.contains(&format!("alice#{host}\t")),
        "{text}"
    );
}

/// `round wait` on `round` of `total` sites: `piped` printed plain lines,
/// one a second, jobs done never going back, then the summary; `tty` one
/// line updated in place, then the summary.
fn round_wait_shows_progress_off_and_on_a_terminal(
    round: &str,
    total: usize,
    started: Instant,
    piped: std::process::Child,
    tty: std::process::Child,
) {
    let (code_piped, text) = wait_output(piped);
    let took = started.elapsed();
    assert_eq!(code_piped, Some(0), "{text}");
    // Plain lines, one a second, jobs done never going back, then the summary.
    let counts = done_counts(&text);
    assert!(counts.len() >= 2, "progress lines in {took:?}:\n{text}");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{text}");
    assert!(!text.contains('\r'), "no in-place updates off a terminal");
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with(&format!(
            "round {round} done: {total} done, 0 failed of {total} jobs"
        )) && last.ends_with(&format!("all {total} sites complete")),
        "{text}"
    );
    // On a terminal: one line updated in place, then the summary.
    let (code_tty, text) = wait_output(tty);
    assert_eq!(code_tty, Some(0), "{text}");
    assert!(text.contains("\r\x1b[2Kround "), "{text:?}");
    assert!(!done_counts(&text).is_empty(), "{text:?}");
    assert!(
        text.contains(&format!("all {total} sites complete")),
        "{text:?}"
    );
    eprintln!("polite round of {total} sites: {took:?}");
}

/// Right after `round`, `status` counts that round's jobs, and shows the
/// dashboard; `round show` names the host of each scan.
fn status_counts_the_last_round_and_shows_the_dashboard(
    g: &Grid,
    round: &str,
    host: u64,
    total: usize,
) {
    let o = g.admin_ok(&["status"]);
    let text = stdout(&o);
    assert!(
        text.contains(&format!(
            "jobs         0 queued, 0 running, {total} done, 0 failed, 0 cancelled (round {round}, the last)"
        )),
        "{text}"
    );
    let admin = beebot_server::config::DataDir(g.data_dir())
        .load_runtime()
        .expect("serve.json")
        .admin_addr;
    assert!(
        text.contains(&format!("dashboard    http://{admin}/")),
        "{text}"
    );
    let text = stdout(&g.admin_ok(&["round", "show", round]));
    assert!(text.contains(&format!("\talice#{host}\t")), "{text}");
}

/// The same at a delay of 0: status counts that round at once.
fn status_counts_a_round_without_delay_at_once(g: &Grid, total: usize) {
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    g.run_once("alice", 4, &[]).wait_ok("alice");
    g.wait_round(&round, "120s");
    let s = json(&g.admin_ok(&["status", "--json"]));
    assert_eq!(s["grid"]["jobs_done"], total, "{s}");
    assert_eq!(
        s["grid"]["jobs_rounds"],
        serde_json::json!([round.parse::<u64>().expect("id")])
    );
}

/// The exit codes of `round wait`: 3 on timeout, 4 for a cancelled round.
fn round_wait_exits_3_on_timeout_and_4_for_a_cancelled_round(g: &Grid) {
    let round = last_line(&g.admin_ok(&["round", "start"]));
    let o = g.admin(&["round", "wait", &round, "--timeout", "1s"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("open job(s) after 1s"),
        "{}",
        stderr(&o)
    );
    g.admin_ok(&["round", "cancel", &round]);
    let o = g.admin(&["round", "wait", &round, "--timeout", "10s"]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
}

#[test]
fn export_into_head_exits_quietly_and_the_server_log_says_what_happened() {
    let g = Grid::start(46, 24);
    let code = g.invite(2);
    g.join("alice", &code);
    let mallory = join_raw(&g, "mallory", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    a_host_gives_units_back_and_uploads_for_one_it_never_had(&mallory);
    g.run_once("alice", 4, &[]).wait_ok("alice");
    g.wait_round(&round, "120s");
    export_into_head_exits_quietly(&g, &round);
    let id2 = last_line(&g.admin_ok(&["round", "start"]));
    g.admin_ok(&["round", "cancel", &id2]);
    g.admin_ok(&["hosts", "revoke", "mallory"]);
    the_server_log_says_what_happened(&g, &round, &id2, mallory.id);
}

/// `mallory` gives every unit it gets back (so the round can end), with a
/// reason that tries to forge a log line, and uploads for a unit it never
/// had.
fn a_host_gives_units_back_and_uploads_for_one_it_never_had(mallory: &Joined) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let link = mallory.hello().await.expect("hello");
        let work = link
            .request(&Request::RequestWork {
                want_seconds: 60,
                free_slots: 1,
                units_held: vec![],
                open_windows: None,
            })
            .await
            .expect("work");
        let Response::Work { units, .. } = work else {
            panic!("work: {work:?}");
        };
        assert!(!units.is_empty(), "no unit for mallory");
        // Every unit back, so the round can end.
        for signed in &units {
            let u = beebot_shared::sign::verify_unit(&mallory.project_key, signed).expect("unit");
            let r = link
                .request(&Request::Fail {
                    unit_id: u.unit_id,
                    // A reason that tries to forge a log line of its own.
                    reason: "disk on fire\nINFO forged: round cancelled".into(),
                })
                .await;
            assert!(matches!(r, Ok(Response::Ack)), "{r:?}");
        }
        let r = link.request(&upload_of_unknown_unit()).await;
        assert!(matches!(r, Ok(Response::Rejected { .. })), "{r:?}");
        link.close();
    });
}

/// `export | head`: status 0, nothing on stderr, though the export of
/// `round` is far larger than the pipe holds.
fn export_into_head_exits_quietly(g: &Grid, round: &str) {
    let rows = g.truth_rows();
    let bytes: usize = rows.iter().map(|r| r.join("\t").len() + 1).sum();
    // Four times a pipe's buffer (64 KiB): `head` is gone before it is written.
    assert!(
        bytes > 256 * 1024,
        "the export ({bytes} bytes) must outgrow the pipe"
    );
    let err_file = g.dir.path().join("export.stderr");
    let script = format!(
        "set -o pipefail; {} export --round {round} --data-dir {} 2>{} | head -n 1",
        bin("beebot-server").display(),
        g.data_dir().display(),
        err_file.display()
    );
    let o = run(
        Command::new("bash").args(["-c", &script]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("site\tsource_url\t"),
        "{}",
        stdout(&o)
    );
    let err = std::fs::read_to_string(&err_file).expect("export stderr");
    assert_eq!(err, "", "export into a closed pipe");
}

/// The server log has a line for each thing that happened (`round` started
/// and ended, `id2` cancelled, alice enrolled, mallory — host `mallory_id` —
/// gave a unit back, had an upload refused and was revoked), and none a
/// host's text forged.
fn the_server_log_says_what_happened(g: &Grid, round: &str, id2: &str, mallory_id: u64) {
    let log = g.server_log();
    let has = |needles: &[&str]| log.lines().any(|l| needles.iter().all(|n| l.contains(n)));
    assert!(
        !log.lines().any(|l| l.starts_with("INFO forged")),
        "a host's text forged a log line:\n{log}"
    );
    for (what, needles) in [
        (
            "round start",
            &[" INFO ", "round started", &format!("round={round}")][..],
        ),
        (
            "round end",
            &[
                " INFO ",
                "round over: 24 of 24 sites complete",
                &format!("round={round}"),
            ][..],
        ),
        (
            "round cancel",
            &[" INFO ", "round cancelled", &format!("round={id2}")][..],
        ),
        ("enrolment", &["host enrolled", "host=\"alice\""][..]),
        (
            "unit given back",
            &[
                "unit given back: \"disk on fire\\nINFO forged",
                "host=\"mallory\"",
                &format!("host_id={mallory_id}"),
            ][..],
        ),
        (
            "upload refused",
            &["upload refused: ", "unit=987654321", "host=\"mallory\""][..],
        ),
        ("revocation", &["host revoked", "host=\"mallory\""][..]),
    ] {
        assert!(has(needles), "no log line for {what} ({needles:?}):\n{log}");
    }
}
