//! Prometheus metrics as an admin and a Prometheus see them: a real server,
//! a synthetic web crawled at a politeness delay by a real client, and a
//! host that uploads a unit never issued. `/metrics` on `metrics_listen`
//! answers without a token, on the admin address only with it; the scrape
//! (parsed here: `# TYPE` before samples, `# EOF` last) counts the round's
//! requests, units and pages as the admin API does, and every metric the
//! Grafana dashboard and the Prometheus example name is in it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use beebot_server::config::DataDir;
use beebot_shared::proto::Response;
use beebot_tests::hostile::{join_raw, upload_of_unknown_unit};
use beebot_tests::*;

/// Politeness delay of the round: above zero, small enough for a quick round.
const DELAY_MS: &str = "20";
/// Sites of the synthetic web.
const SITES: usize = 4;
/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// The metric suffixes of a family's samples (OpenMetrics).
const SAMPLE_SUFFIXES: [&str; 6] = ["", "_total", "_bucket", "_count", "_sum", "_created"];

/// One sample: name, labels, value.
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, parsed: each family's type and every sample.
struct Scrape {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

impl Scrape {
    /// Parse OpenMetrics text, checking its shape: `# EOF` last, a sample
    /// only after its family's `# TYPE`, every value a number.
    fn parse(text: &str) -> Scrape {
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.pop(), Some("# EOF"), "the scrape ends with # EOF");
        assert!(text.ends_with("# EOF\n"));
        let mut s = Scrape {
            types: BTreeMap::new(),
            samples: Vec::new(),
        };
        for line in lines {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
                let known = ["counter", "gauge", "histogram", "info", "stateset"];
                assert!(known.contains(&kind), "{line}");
                s.types.insert(name.to_string(), kind.to_string());
            } else if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
                continue;
            } else {
                let sample = parse_sample(line);
                assert!(
                    s.family(&sample.name).is_some(),
                    "sample before its # TYPE: {line}"
                );
                s.samples.push(sample);
            }
        }
        s
    }

    fn family(&self, sample: &str) -> Option<&str> {
        SAMPLE_SUFFIXES.iter().find_map(|suffix| {
            let base = sample.strip_suffix(suffix)?;
            self.types.get_key_value(base).map(|(k, _)| k.as_str())
        })
    }

    /// The sum of the samples named `name` carrying `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(|s| s.value)
            .collect();
        assert!(!found.is_empty(), "no sample {name} {labels:?}");
        found.iter().sum()
    }

    fn names(&self) -> BTreeSet<&str> {
        self.samples.iter().map(|s| s.name.as_str()).collect()
    }

    /// The label names the samples of `name` carry.
    fn label_names(&self, name: &str) -> BTreeSet<&str> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .flat_map(|s| s.labels.keys().map(String::as_str))
            .collect()
    }
}

/// `name{k="v",...} value`.
fn parse_sample(line: &str) -> Sample {
    let (head, value) = line.rsplit_once(' ').expect("a sample and its value");
    let (name, labels) = match head.split_once('{') {
        None => (head, BTreeMap::new()),
        Some((name, rest)) => {
            let inner = rest.strip_suffix('}').expect("labels end with }");
            let labels = inner
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("label=value");
                    let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                    (k.to_string(), v.expect("a quoted value").to_string())
                })
                .collect();
            (name, labels)
        }
    };
    Sample {
        name: name.to_string(),
        labels,
        value: value.parse().unwrap_or_else(|_| panic!("value of {line}")),
    }
}

/// What Prometheus sends: OpenMetrics first, its text format after.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` on `addr` as Prometheus asks, with `token` as a bearer
/// header when given: the status, the content type and the body.
fn scrape(addr: SocketAddr, token: Option<&str>) -> (u16, String, String) {
    scrape_as(addr, token, PROMETHEUS_ACCEPT)
}

/// [`scrape`] with an `Accept` header of `accept`.
fn scrape_as(addr: SocketAddr, token: Option<&str>, accept: &str) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(SCRAPE_TIMEOUT))
        .build()
        .into();
    let mut req = agent
        .get(format!("http://{addr}/metrics"))
        .header("Accept", accept);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().expect("scrape");
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.body_mut().read_to_string().expect("body");
    (resp.status().as_u16(), kind, body)
}

/// The status of `GET /metrics` on `addr` sent with `Host: host` (written
/// by hand: an HTTP client sets the Host from the URL).
fn status_for_host(addr: SocketAddr, host: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(SCRAPE_TIMEOUT)).expect("timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

#[test]
fn a_round_and_a_hostile_host_are_counted_and_both_addresses_serve_the_metrics() {
    let g = Grid::start(61, SITES);
    let code = g.invite(2);
    g.join("a", &code);
    let hostile = join_raw(&g, "m", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    let a = g.run_once("a", 3, &[]);
    g.wait_round(&round, "240s");
    a.wait_ok("client a");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let answer = rt.block_on(async {
        let link = hostile.hello().await.expect("hello");
        link.request(&upload_of_unknown_unit()).await
    });
    assert!(
        matches!(answer, Ok(Response::Rejected { .. })),
        "{answer:?}"
    );

    let runtime = DataDir(g.data_dir()).load_runtime().expect("serve.json");
    let open = runtime
        .metrics_addr
        .expect("init serves metrics on loopback");
    assert!(open.ip().is_loopback());
    let (status, kind, text) = scrape(open, None);
    assert_eq!(status, 200, "{text}");
    // A page whose name was rebound to 127.0.0.1 reads nothing.
    assert_eq!(status_for_host(open, "rebound.example:80"), 421);
    assert_eq!(
        status_for_host(open, &format!("localhost:{}", open.port())),
        200
    );
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let m = Scrape::parse(&text);
    eprintln!(
        "scrape after the round: {} bytes, {} families, {} samples",
        text.len(),
        m.types.len(),
        m.samples.len()
    );
    the_round_is_counted_as_the_admin_api_counts_it(&m, &g.round_json(&round));
    the_hostile_upload_is_not_ok(&m);
    the_server_internals_are_measured(&m);
    the_dashboard_and_the_example_name_only_real_metrics(&m);
    a_scraper_of_the_text_format_gets_what_promtool_takes(open, &m);

    let token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
    let (status, _, body) = scrape(runtime.admin_addr, None);
    assert_eq!(status, 401, "the admin address wants the token: {body}");
    let (status, _, body) = scrape(runtime.admin_addr, Some("wrong"));
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = scrape(runtime.admin_addr, Some(token.trim()));
    assert_eq!(status, 200, "{body}");
    let admin = Scrape::parse(&body);
    assert_eq!(
        admin.types, m.types,
        "both addresses serve the same families"
    );
}

/// A scraper that does not ask for OpenMetrics (curl, an older agent)
/// gets Prometheus's text format, with the same samples, which
/// `promtool check metrics` takes without a word.
fn a_scraper_of_the_text_format_gets_what_promtool_takes(addr: SocketAddr, m: &Scrape) {
    for accept in ["text/plain;version=0.0.4", "*/*"] {
        let (status, kind, text) = scrape_as(addr, None, accept);
        assert_eq!(status, 200, "{text}");
        assert!(
            kind.starts_with("text/plain; version=0.0.4"),
            "{accept}: {kind}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        let samples: BTreeSet<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        assert_eq!(samples, m.samples.iter().map(|s| s.name.as_str()).collect());
    }
    let (_, _, text) = scrape_as(addr, None, "text/plain");
    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = promtool else {
        return tool_missing("promtool", "check the scrape (Debian's `prometheus`)");
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

/// Units issued and accepted are the round's jobs (one scan each), pages
/// and links its counts, the round whole.
fn the_round_is_counted_as_the_admin_api_counts_it(m: &Scrape, d: &serde_json::Value) {
    let counts = &d["counts"];
    let jobs = counts["total"].as_u64().expect("jobs") as f64;
    assert_eq!(jobs, SITES as f64);
    assert_eq!(counts["done"].as_u64(), Some(SITES as u64), "{counts:#}");
    let units = |event| m.sum("beebot_units_total", &[("event", event)]);
    assert_eq!(units("issued"), jobs);
    assert_eq!(units("accepted"), jobs);
    assert_eq!(units("expired"), 0.0);
    let pages = counts["pages"].as_u64().expect("pages") as f64;
    assert!(pages > jobs, "every site has pages: {counts:#}");
    assert_eq!(m.sum("beebot_pages_accepted_total", &[]), pages);
    let links = counts["links"].as_u64().expect("links") as f64;
    assert_eq!(m.sum("beebot_links_accepted_total", &[]), links);
    assert_eq!(m.sum("beebot_round_progress_ratio", &[]), 1.0);
    assert_eq!(m.sum("beebot_jobs", &[("state", "done")]), jobs);
    assert_eq!(m.sum("beebot_jobs", &[("state", "queued")]), 0.0);
    assert_eq!(m.sum("beebot_rounds_running", &[]), 0.0);
    // The crawling host and the hostile one were both seen just now.
    assert_eq!(m.sum("beebot_hosts_active", &[("within", "1h")]), 2.0);
    let ok = |kind| {
        m.sum(
            "beebot_requests_total",
            &[("kind", kind), ("outcome", "ok")],
        )
    };
    assert!(ok("request_work") >= 1.0);
    assert!(ok("upload") >= jobs);
    assert!(ok("hello") >= 2.0);
}

/// The upload of a unit never issued is counted as `rejected`, with its bytes.
fn the_hostile_upload_is_not_ok(m: &Scrape) {
    let rejected = m.sum(
        "beebot_requests_total",
        &[("kind", "upload"), ("outcome", "rejected")],
    );
    assert_eq!(rejected, 1.0);
    assert!(m.sum("beebot_upload_bytes_total", &[]) > 0.0);
}

/// fsyncs, their groups, the lock, latency, memory and start time.
fn the_server_internals_are_measured(m: &Scrape) {
    let fsyncs = m.sum("beebot_store_fsync_duration_seconds_count", &[]);
    assert!(fsyncs > 0.0);
    assert_eq!(m.sum("beebot_store_sync_group_size_count", &[]), fsyncs);
    assert!(m.sum("beebot_store_sync_group_size_sum", &[]) >= fsyncs);
    assert!(m.sum("beebot_grid_lock_hold_duration_seconds_count", &[]) > fsyncs);
    // Every accepted link file rode one link pack fsync or shared one.
    let link_syncs = m.sum("beebot_link_fsync_duration_seconds_count", &[]);
    assert!(link_syncs > 0.0);
    assert_eq!(m.sum("beebot_link_sync_group_size_count", &[]), link_syncs);
    assert!(m.sum("beebot_link_sync_group_size_sum", &[]) >= SITES as f64);
    let uploads = m.sum(
        "beebot_request_duration_seconds_count",
        &[("kind", "upload")],
    );
    assert!(uploads >= SITES as f64 + 1.0);
    let inf = m.sum(
        "beebot_request_duration_seconds_bucket",
        &[("kind", "upload"), ("le", "+Inf")],
    );
    assert_eq!(inf, uploads);
    assert!(m.sum("beebot_process_resident_memory_bytes", &[]) > 1e6);
    let started = m.sum("beebot_process_start_time_seconds", &[]);
    let now = beebot_shared::clock::now_ms() as f64 / 1000.0;
    assert!(
        started <= now && now - started < 3600.0,
        "{started} vs {now}"
    );
    for (name, kind) in &m.types {
        assert!(name.starts_with("beebot_"), "{name}");
        if kind == "counter" {
            assert!(m.names().contains(format!("{name}_total").as_str()));
        }
    }
}

/// Every `beebot_…` name in the Grafana dashboard and the Prometheus
/// example is a sample of the scrape, with the labels it selects on; the
/// dashboard imports with its data source as an input.
fn the_dashboard_and_the_example_name_only_real_metrics(m: &Scrape) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard = std::fs::read_to_string(root.join("deploy/grafana-dashboard.json"))
        .expect("deploy/grafana-dashboard.json");
    let example =
        std::fs::read_to_string(root.join("deploy/prometheus.yml")).expect("deploy/prometheus.yml");
    let names = m.names();
    let mut used = 0;
    for text in [&dashboard, &example] {
        for (name, labels) in metric_references(text) {
            assert!(names.contains(name.as_str()), "{name} is in no scrape");
            let carried = m.label_names(&name);
            for l in labels {
                assert!(carried.contains(l.as_str()), "{name} has no label {l}");
            }
            used += 1;
        }
    }
    assert!(used >= 20, "the dashboard names the metrics ({used})");
    let d: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    assert_eq!(d["__inputs"][0]["name"], "DS_PROMETHEUS");
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 12);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "panel ids are unique"
        );
        assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
        for t in p["targets"].as_array().expect("targets") {
            assert!(t["expr"].as_str().is_some_and(|e| e.contains("beebot_")));
        }
    }
}

/// Every `beebot_…` metric name in `text`, with the label names of the
/// selector that follows it (`name{k="v",…}`).
fn metric_references(text: &str) -> Vec<(String, Vec<String>)> {
    let is_name = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("beebot_") {
        let tail = &rest[at..];
        let end = tail.find(|c| !is_name(c)).unwrap_or(tail.len());
        let name = &tail[..end];
        let after = &tail[end..];
        let labels = match after.strip_prefix('{') {
            Some(sel) => sel[..sel.find('}').unwrap_or(0)]
                .split(',')
                .filter_map(|kv| kv.split_once(['=', '!']).map(|(k, _)| k.trim().to_string()))
                .filter(|k| !k.is_empty())
                .collect(),
            None => Vec::new(),
        };
        out.push((name.to_string(), labels));
        rest = &tail[end..];
    }
    out
}

#[test]
fn metrics_listen_may_be_off_or_elsewhere_with_a_warning_and_a_bad_one_is_refused() {
    let mut g = Grid::start(62, 1);
    let dir = DataDir(g.data_dir());
    let reconfigure = |g: &mut Grid, listen: &str| {
        let mut cfg = dir.load_config().expect("config");
        cfg.metrics_listen = listen.to_string();
        dir.save_config(&cfg).expect("save config");
        g.kill_server();
    };
    // Off: nothing bound, the admin address still serves it with the token.
    reconfigure(&mut g, "off");
    g.start_server();
    let runtime = dir.load_runtime().expect("serve.json");
    assert_eq!(runtime.metrics_addr, None);
    let token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
    let (status, _, body) = scrape(runtime.admin_addr, Some(token.trim()));
    assert_eq!(status, 200);
    Scrape::parse(&body);
    // Every address: served, and the log says who can read it.
    reconfigure(&mut g, "0.0.0.0:0");
    g.start_server();
    let bound = dir.load_runtime().expect("serve.json").metrics_addr;
    let port = bound.expect("served on every address").port();
    let (status, _, body) = scrape(SocketAddr::from(([127, 0, 0, 1], port)), None);
    assert_eq!(status, 200);
    Scrape::parse(&body);
    let log = g.server_log();
    assert!(
        log.contains("metrics_listen is not on loopback"),
        "a warning: {log}"
    );
    // Not an address: `serve` refuses to start, saying which setting.
    reconfigure(&mut g, "localhost");
    let o = g.admin(&["serve"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("metrics_listen `localhost` is not ADDR:PORT"),
        "{}",
        stderr(&o)
    );
}
