//! Crawler etiquette across the whole grid (issue 18): the round's politeness
//! delay holds for the grid as a whole, not per client. A copy of a running
//! job that the scheduler wants (a slow host's scan, a fast host idle) is a
//! hand-over: the running scan stops at a page boundary, uploads what it did
//! with its frontier, and the other host continues from there, never beside
//! it. Jobs whose sites share a host (domain scope) never run at once. The
//! synthetic web's request log shows no two requests to one host closer than
//! the delay, across all clients, and the export equals the truth.

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::LoggedRequest;
use beebot_tests::*;

/// Per-page pause of the slow client: its scans are far slower than the
/// fast client's, so the scheduler wants them on the fast one.
const SLOW_THROTTLE_MS: &str = "2000";
/// Pages of each site of the hand-over rounds: the slow client's scan runs
/// past its first progress reports (every 10 s), so there is a scan to hand
/// over.
const SITE_PAGES: usize = 50;
/// Longest a round of these tests may take.
const ROUND_TIMEOUT: &str = "240s";

/// The closest two requests to one host came, across every client, with
/// the two paths: `None` when the host got fewer than two requests.
fn closest_requests(log: &[LoggedRequest]) -> BTreeMap<String, (Duration, String, String)> {
    let mut by_host: BTreeMap<String, Vec<&LoggedRequest>> = BTreeMap::new();
    for r in log {
        let host = r.host.split(':').next().unwrap_or_default().to_string();
        by_host.entry(host).or_default().push(r);
    }
    let mut out = BTreeMap::new();
    for (host, mut reqs) in by_host {
        reqs.sort_by_key(|r| r.at);
        let closest = reqs
            .windows(2)
            .map(|w| {
                (
                    w[1].at.duration_since(w[0].at),
                    w[0].path.clone(),
                    w[1].path.clone(),
                )
            })
            .min_by_key(|(d, _, _)| *d);
        if let Some(c) = closest {
            out.insert(host, c);
        }
    }
    out
}

/// Every host's requests, across all clients, at least `delay` apart.
fn assert_spaced(log: &[LoggedRequest], delay: Duration) {
    let closest = closest_requests(log);
    assert!(!closest.is_empty(), "no host got two requests");
    for (host, (gap, a, b)) in &closest {
        assert!(
            *gap >= delay,
            "{host}: {a} then {b} only {gap:?} apart (delay {delay:?})"
        );
    }
}

/// `beebot run --once` for `name` on `slots` slots with `extra` flags.
fn run(g: &Grid, name: &str, slots: &str, extra: &[&str]) -> Child {
    let log = g.dir.path().join(format!("client-{name}.log"));
    let mut args = vec!["--once", "--slots", slots];
    args.extend(extra);
    g.spawn_run(name, &args, &log)
}

fn wait_ok(mut c: Child, what: &str) {
    let status = c.wait().expect("client");
    assert!(status.success(), "{what} exited {status}");
}

/// Attempts of every job of a round, as `round show --json` lists them.
fn attempts(d: &serde_json::Value) -> Vec<serde_json::Value> {
    d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .flat_map(|j| j["attempts"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// `n` sites of about [`SITE_PAGES`] pages.
fn sites(n: usize) -> SynthWeb {
    let config = SynthConfig {
        min_pages_per_site: SITE_PAGES,
        max_pages_per_site: SITE_PAGES + SITE_PAGES / 10,
        ..SynthConfig::default()
    };
    SynthWeb::with_config(18, n, config)
}

/// A slow client scans the site of a round; a fast one joins while the
/// slow one scans, and the adaptive policy wants copies of its scans.
/// Returns the round id and its `round show --json`.
fn slow_then_fast(g: &Grid, delay_ms: &str) -> (String, serde_json::Value) {
    let code = g.invite(2);
    g.join("slow", &code);
    g.join("fast", &code);
    g.import_sites();
    let o = g.admin_ok(&[
        "round",
        "start",
        "--policy",
        "adaptive",
        "--delay-ms",
        delay_ms,
        "--force",
    ]);
    let round = last_line(&o);
    let slow = run(g, "slow", "1", &["--throttle-ms", SLOW_THROTTLE_MS]);
    // The fast host starts once the slow one scans (its pages counted).
    wait_for(
        "the slow host's first scan",
        Duration::from_secs(60),
        || {
            attempts(&g.round_json(&round))
                .iter()
                .any(|a| a["pages"].as_u64().unwrap_or(0) > 0)
        },
    );
    let fast = run(g, "fast", "1", &[]);
    g.wait_round(&round, ROUND_TIMEOUT);
    wait_ok(slow, "slow client");
    wait_ok(fast, "fast client");
    let d = g.round_json(&round);
    assert_eq!(d["round"]["state"], "Done", "{:#}", d["round"]);
    (round, d)
}

#[test]
fn a_wanted_copy_is_handed_over_and_the_delay_holds_across_the_grid() {
    let delay = Duration::from_millis(300);
    let g = Grid::start_with(sites(1));
    let (round, d) = slow_then_fast(&g, "300");
    let all = attempts(&d);
    // A scan was handed over: the slow host's part kept as a segment, the
    // fast host's continuation counted as the copy the scheduler wanted.
    let handed = all
        .iter()
        .filter(|a| a["replica"] == true && a["resume_seq"].as_u64().unwrap_or(0) > 0)
        .count();
    let fast_log =
        std::fs::read_to_string(g.dir.path().join("client-fast.log")).unwrap_or_default();
    assert!(
        handed > 0,
        "no hand-over: {all:#?}\n{}\n{fast_log}",
        g.server_log()
    );
    // Never two running copies: no attempt was thrown away.
    assert!(
        all.iter().all(|a| a["state"] != "Aborted"),
        "a copy ran beside another: {all:#?}"
    );
    assert_spaced(&g.web_server.request_log(), delay);
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    let closest = closest_requests(&g.web_server.request_log());
    eprintln!("hand-overs: {handed}; closest requests per host: {closest:?}");
}

#[test]
fn without_a_delay_a_handed_over_round_still_ends_with_the_truth() {
    let g = Grid::start_with(sites(1));
    let (round, d) = slow_then_fast(&g, "0");
    assert_eq!(d["counts"]["complete"], 1, "{:#}", d["counts"]);
    assert!(attempts(&d).iter().all(|a| a["state"] != "Aborted"));
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

/// Two sites on one host (`site0.synth.test` and the same name on another
/// port, which the loopback rule sends to the same synthetic web) and a third
/// site: two clients with free slots, yet the two sites of the shared host
/// are never scanned at once.
#[test]
fn sites_that_share_a_host_are_never_scanned_at_once() {
    let delay = Duration::from_millis(200);
    let g = Grid::start_with(sites(2));
    let code = g.invite(2);
    g.join("a", &code);
    g.join("b", &code);
    let hosts = g.web.site_hosts();
    let shared = hosts[0].clone();
    let path = g.dir.path().join("shared-host.txt");
    let list = format!(
        "http://{shared}/\nhttp://{shared}:8080/\nhttp://{}/\n",
        hosts[1]
    );
    std::fs::write(&path, list).expect("sites file");
    g.admin_ok(&["sites", "import", path.to_str().expect("path")]);
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        "200",
        "--policy",
        "round-robin",
        "--force",
    ]);
    let round = last_line(&o);
    let a = run(&g, "a", "2", &[]);
    let b = run(&g, "b", "2", &[]);
    g.wait_round(&round, ROUND_TIMEOUT);
    wait_ok(a, "client a");
    wait_ok(b, "client b");
    let d = g.round_json(&round);
    assert_eq!(d["counts"]["complete"], 3, "{:#}", d["counts"]);
    // Each job of the shared host ran from its first issue to its result,
    // and the two spans do not overlap: one stream of requests at a time.
    let mut spans: Vec<(u64, u64)> = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["site"].as_str().is_some_and(|s| s.starts_with(&shared)))
        .map(|j| {
            let issued = j["attempts"]
                .as_array()
                .expect("attempts")
                .iter()
                .filter_map(|a| a["issued_ms"].as_u64())
                .min()
                .expect("issued");
            let done = j["result"]["accepted_ms"].as_u64().expect("result");
            (issued, done)
        })
        .collect();
    assert_eq!(spans.len(), 2, "{:#}", d["jobs"]);
    spans.sort_unstable();
    assert!(
        spans[0].1 <= spans[1].0,
        "two jobs of {shared} ran at once: {spans:?}"
    );
    // The request log, ports aside: the shared host's requests (both
    // sites') at least the delay apart.
    assert_spaced(&g.web_server.request_log(), delay);
    // The other site was scanned beside them, not after them.
    let other = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["site"] == hosts[1].as_str())
        .expect("other site");
    let other_issued = other["attempts"][0]["issued_ms"].as_u64().expect("issued");
    assert!(
        other_issued < spans[0].1,
        "the other site waited: {spans:?} {other_issued}"
    );
}

/// A client killed in the middle of a site's scan, before its first
/// checkpoint, and started again at once, waits the delay before it asks
/// that site again (the new run cannot know what the killed one asked):
/// no host gets two requests closer than the delay, and the round ends
/// with the truth.
#[test]
fn a_client_killed_and_started_at_once_waits_the_delay_before_asking_again() {
    // A delay longer than a client takes to start again.
    let delay = Duration::from_millis(2500);
    let g = Grid::of_sites(12, 3, 4, 0);
    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let o = g.admin_ok(&["round", "start", "--delay-ms", "2500", "--force"]);
    let round = last_line(&o);
    let mut first = run(&g, "a", "1", &[]);
    let robots_hosts = || {
        let log = g.web_server.request_log();
        let hosts: std::collections::BTreeSet<String> = log
            .iter()
            .filter(|r| r.path == "/robots.txt")
            .map(|r| r.host.clone())
            .collect();
        hosts.len()
    };
    // The first site scanned, the second one begun (not yet checkpointed).
    wait_for("the second site's scan", Duration::from_secs(60), || {
        robots_hosts() >= 2
    });
    first.kill().expect("kill the client");
    let _ = first.wait();
    let killed_at = std::time::Instant::now();
    let before = g.web_server.request_log().len();
    let again = run(&g, "a", "1", &[]);
    g.wait_round(&round, ROUND_TIMEOUT);
    wait_ok(again, "client a, started again");
    let log = g.web_server.request_log();
    eprintln!("closest requests per host: {:?}", closest_requests(&log));
    // The client came back soon enough for the check to mean something:
    // its first request within two delays of the kill (it waits one).
    let next = log[before..]
        .iter()
        .map(|r| r.at)
        .min()
        .expect("requests after the kill");
    let after = next.saturating_duration_since(killed_at);
    assert!(
        after < 2 * delay,
        "the client's first request came {after:?} after the kill"
    );
    assert_spaced(&log, delay);
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}
