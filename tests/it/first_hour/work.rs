//! See `first_hour.rs`. What the grid does with work: sites that cannot be
//! reached are failed with their cause, a cancelled round stops on the
//! client, and a new round starts on connected idle clients within seconds.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_tests::{last_line, run, stderr, stdout, wait_for, Grid};

/// A new round reaches a connected idle client within this long (it asks
/// every `RETRY_IDLE_S`, 60 s, otherwise).
const WAKE_BOUND: Duration = Duration::from_secs(10);
/// A cancel reaches a connected client, and its running scan stops, within
/// this long (the push, the client's jitter, one page at the round's delay).
const CANCEL_BOUND: Duration = Duration::from_secs(6);
/// Longest wait for a client to come up, a round to run, a log line.
const WAIT: Duration = Duration::from_secs(120);

/// A `beebot run` killed when the test ends, whatever happens.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Spooled work units (`*.unit`) anywhere under `dir`.
fn spooled_units(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                spooled_units(&p)
            } else {
                usize::from(p.extension().is_some_and(|x| x == "unit"))
            }
        })
        .sum()
}

/// A port on loopback where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The synthetic web's first request at or after `t0`, how long after.
fn first_request_after(g: &Grid, t0: Instant) -> Option<Duration> {
    g.web_server
        .request_log()
        .iter()
        .find(|r| r.at >= t0)
        .map(|r| r.at - t0)
}

/// The `round show` table line of `site`.
fn show_line(show: &str, site: &str) -> String {
    show.lines()
        .find(|l| l.split('\t').next() == Some(site))
        .unwrap_or_else(|| panic!("no line for {site} in:\n{show}"))
        .to_string()
}

/// The `round show --json` entry of `site`.
fn site_json<'a>(round: &'a serde_json::Value, site: &str) -> &'a serde_json::Value {
    round["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .find(|s| s["site"] == site)
        .unwrap_or_else(|| panic!("no site {site} in {round}"))
}

/// Issue 17, item 5: a site whose name does not resolve was `done` with 0
/// pages and no reason; a refused connection and the private-address guard
/// were all "robots-unavailable". Now each is named, through the scan
/// summary and the server, in `round show` (table and `--json`) and
/// `status`, and a site without a page is failed after its attempts. Round
/// 1 (delay 0, private addresses allowed): a name that does not resolve, a
/// closed port, and a real site. Round 2 (delay 200 ms, the same client
/// without `--allow-private`): the guard refuses the loopback site.
#[test]
fn a_site_that_cannot_be_reached_fails_with_its_cause() {
    let g = Grid::start(171, 1);
    let code = g.invite(1);
    g.join("a", &code);
    let site = g.web.site_hosts()[0].clone();
    g.admin_ok(&["sites", "add", "gone.test", "closed.test", &site]);
    let web = format!("*.synth.test={}", g.web_server.addr());
    let closed = format!("closed.test=127.0.0.1:{}", closed_port());
    let resolve = [
        "--resolve",
        &web,
        "--resolve",
        "gone.test=none",
        "--resolve",
        &closed,
    ];
    a_round_fails_unreachable_sites_with_their_cause(&g, &site, &resolve);
    without_allow_private_the_guard_refusal_is_named(&g, &site, &resolve);
}

/// Round 1 (delay 0, private addresses allowed, names resolved by
/// `resolve`): the name that does not resolve and the closed port are
/// failed after their 2 attempts, each with its cause, in `round show`
/// (table and `--json`) and `status`; the real `site` is done.
fn a_round_fails_unreachable_sites_with_their_cause(g: &Grid, site: &str, resolve: &[&str]) {
    let round =
        last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0", "--max-attempts", "2"]));
    g.run_once("a", 2, resolve)
        .wait_ok("run --once, private allowed");
    g.wait_round(&round, "60s");
    let show = stdout(&g.admin_ok(&["round", "show", &round]));
    for (host, cause) in [
        ("gone.test", "dns-failed"),
        ("closed.test", "connection-refused"),
    ] {
        let line = show_line(&show, host);
        assert_eq!(line.split('\t').nth(1), Some("failed"), "{line}");
        assert!(line.contains(cause), "{host} should say {cause}: {line}");
        assert!(!line.contains("robots-unavailable"), "{line}");
    }
    let ok = show_line(&show, site);
    assert_eq!(ok.split('\t').nth(1), Some("done"), "{ok}");
    let json = g.round_json(&round);
    for (host, cause) in [
        ("gone.test", "dns-failed"),
        ("closed.test", "connection-refused"),
    ] {
        let s = site_json(&json, host);
        assert_eq!(s["state"], "Failed", "{s}");
        assert_eq!(s["attempts"], 2, "failed after its 2 attempts: {s}");
        assert_eq!(s["pages"], 0, "{s}");
        let why = s["why_not"].as_str().unwrap_or_default();
        assert!(why.contains(cause), "{host}: {why}");
    }
    assert_eq!(json["counts"]["failed"], 2, "{}", json["counts"]);
    assert_eq!(json["counts"]["done"], 1, "{}", json["counts"]);
    let status: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["status", "--json"]))).expect("status");
    let last = &status["grid"]["last_round"];
    assert_eq!(
        (&last["complete"], &last["incomplete"], &last["failed"]),
        (&1.into(), &2.into(), &2.into()),
        "{last}"
    );
}

/// Round 2 (delay 200 ms): the same client without `--allow-private`; the
/// guard's refusal of the loopback `site` and closed port is named.
fn without_allow_private_the_guard_refusal_is_named(g: &Grid, site: &str, resolve: &[&str]) {
    let round =
        last_line(&g.admin_ok(&["round", "start", "--delay-ms", "200", "--max-attempts", "2"]));
    let mut args = vec!["run", "--once", "--slots", "2"];
    args.extend_from_slice(resolve);
    let o = run(&mut g.client_cmd("a", &args), WAIT);
    assert!(o.status.success(), "run --once: {}", stderr(&o));
    g.wait_round(&round, "60s");
    let json = g.round_json(&round);
    for (host, cause) in [
        (site, "private-address"),
        ("closed.test", "private-address"),
        ("gone.test", "dns-failed"),
    ] {
        let s = site_json(&json, host);
        assert_eq!(s["state"], "Failed", "{s}");
        let why = s["why_not"].as_str().unwrap_or_default();
        assert!(why.contains(cause), "{host}: {why}");
    }
    let show = stdout(&g.admin_ok(&["round", "show", &round]));
    assert!(show_line(&show, site).contains("private-address"), "{show}");
}

/// Issue 17, item 5: `beebot crawl` of a site on a private address said
/// nothing useful and exited 0. It now names `--allow-private` and exits
/// non-zero when nothing was fetched; a name that does not resolve says so.
#[test]
fn a_local_crawl_that_fetches_nothing_says_why_and_fails() {
    let g = Grid::start(172, 1);
    let site = g.web.site_hosts()[0].clone();
    let url = format!("http://{site}/");
    let web = format!("*.synth.test={}", g.web_server.addr());
    let crawl = |extra: &[&str]| {
        let mut args = vec!["crawl", url.as_str(), "--resolve", web.as_str()];
        args.extend(extra);
        run(&mut g.client_cmd("a", &args), WAIT)
    };

    let refused = crawl(&[]);
    assert!(!refused.status.success(), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains("error: nothing fetched") && err.contains("--allow-private"),
        "{err}"
    );
    assert_eq!(g.web_server.requests(), 0, "nothing reached the site");

    let allowed = crawl(&["--allow-private"]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert!(stdout(&allowed).lines().count() > 1, "rows exported");

    let o = run(
        &mut g.client_cmd(
            "a",
            &[
                "crawl",
                "http://gone.test/",
                "--allow-private",
                "--resolve",
                "gone.test=none",
            ],
        ),
        WAIT,
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("dns-failed"), "{}", stderr(&o));
}

/// Cancel `round` once the client (one slot) scans its first site and holds
/// more units of it; assert that no site it had not started is requested
/// after the cancel, that the running scan stops within [`CANCEL_BOUND`],
/// and that its spool holds no unit. Returns how long after the cancel the
/// running scan made its last request.
fn cancel_mid_round(g: &Grid, round: &str, since: Instant, log: &Path) -> Duration {
    let requests = || {
        g.web_server
            .request_log()
            .into_iter()
            .filter(|r| r.at >= since)
            .collect::<Vec<_>>()
    };
    // Some pages of the first scan in, and the slot's other units held.
    wait_for("the first scan", WAIT, || requests().len() >= 4);
    wait_for("several units held", WAIT, || {
        g.round_json(round)["counts"]["running"]
            .as_u64()
            .is_some_and(|n| n >= 2)
    });
    g.admin_ok(&["round", "cancel", round]);
    let cancelled_at = Instant::now();
    let before: std::collections::BTreeSet<String> = requests()
        .iter()
        .filter(|r| r.at < cancelled_at)
        .map(|r| r.host.clone())
        .collect();
    assert_eq!(before.len(), 1, "one scan at a time: {before:?}");
    wait_for("the client to drop the round's units", WAIT, || {
        spooled_units(&g.home("a")) == 0
    });
    // Long enough for any held unit to have started, had it been kept.
    std::thread::sleep(CANCEL_BOUND);
    let after: Vec<_> = requests()
        .into_iter()
        .filter(|r| r.at >= cancelled_at)
        .collect();
    let started: Vec<&str> = after
        .iter()
        .filter(|r| !before.contains(&r.host))
        .map(|r| r.host.as_str())
        .collect();
    assert!(
        started.is_empty(),
        "scans started after the cancel: {started:?}\n{}",
        read(log)
    );
    let last = after
        .iter()
        .map(|r| r.at - cancelled_at)
        .max()
        .unwrap_or_default();
    assert!(
        last < CANCEL_BOUND,
        "the running scan went on {last:?} after the cancel"
    );
    let show = stdout(&g.admin_ok(&["round", "show", round]));
    for host in g.web.site_hosts() {
        let line = show_line(&show, &host);
        assert_eq!(line.split('\t').nth(1), Some("cancelled"), "{line}");
    }
    last
}

/// Issue 17, item 6: after `round cancel`, the client aborted the running
/// scan but started the round's held units in the same millisecond and
/// crawled them. Now the server tells connected clients at once; they stop
/// the scan and drop the round's units without starting one. A client with
/// one slot (pages slowed to 150 ms by `--throttle-ms`) holds several units
/// of a round at a 300 ms delay, then of one at delay 0, and each is
/// cancelled mid-scan: no site it had not started is requested after the
/// cancel, the running scan stops within moments, its spool holds no unit,
/// `round show` says `cancelled` per unfinished site and the export says the
/// round was cancelled. The same client then runs a third round to its end.
#[test]
fn a_cancelled_round_starts_nothing_more_on_the_client() {
    let web = SynthWeb::with_config(
        173,
        4,
        SynthConfig {
            min_pages_per_site: 25,
            max_pages_per_site: 30,
            crawl_delay_ms: None,
        },
    );
    let g = Grid::start_with(web);
    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let log = g.dir.path().join("a.log");
    let _client = Running(g.spawn_run("a", &["--slots", "1", "--throttle-ms", "150"], &log));
    for delay in ["300", "0"] {
        let since = Instant::now();
        let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", delay]));
        let last = cancel_mid_round(&g, &round, since, &log);
        println!("delay {delay} ms: the running scan's last request {last:?} after the cancel; nothing else started");
        let o = g.admin_ok(&["export", "--round", &round, "--format", "jsonl"]);
        assert!(stdout(&o).is_empty(), "no site was done: {}", stdout(&o));
        assert!(
            stderr(&o).contains(&format!("round {round} was cancelled")),
            "{}",
            stderr(&o)
        );
    }
    let text = read(&log);
    assert!(text.contains("round cancelled"), "{text}");
    assert!(!text.contains("job finished elsewhere"), "{text}");

    // The client goes on with the next round, to its end.
    let next = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    g.wait_round(&next, "120s");
    beebot_tests::assert_same_rows(&g.export_rows(&next), &g.truth_rows());
}

/// Issue 17, item 8: new rounds sat queued for up to a minute, because an
/// idle client asks every 60 s. The server now pushes `WorkAvailable` on
/// the connections it holds, so a connected idle client asks at once: its
/// first request of a new round's site arrives within seconds, for a round
/// at delay 0 and for the next at 300 ms.
#[test]
fn a_new_round_starts_on_an_idle_connected_client_within_seconds() {
    const {
        assert!(beebot_server::grid::RETRY_IDLE_S >= 3 * WAKE_BOUND.as_secs());
    }
    let g = Grid::start(174, 2);
    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let log = g.dir.path().join("a.log");
    let _client = Running(g.spawn_run("a", &[], &log));
    // Connected and told there is nothing to do (come back in 60 s): the
    // live status is written after the first contact.
    wait_for("the client's first contact", WAIT, || {
        let o = g.client("a", &["status", "--json"]);
        serde_json::from_str::<serde_json::Value>(&stdout(&o)).is_ok_and(|s| s["state"] == "idle")
    });
    let mut waits = Vec::new();
    for delay in ["0", "300"] {
        std::thread::sleep(Duration::from_secs(2));
        let t0 = Instant::now();
        let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", delay]));
        let mut first = None;
        wait_for("the round's first request", WAKE_BOUND, || {
            first = first_request_after(&g, t0);
            first.is_some()
        });
        let first = first.unwrap_or_default();
        println!("delay {delay} ms: first request {first:?} after `round start`");
        assert!(first < WAKE_BOUND, "{first:?}");
        waits.push(first);
        g.wait_round(&round, "120s");
    }
    assert!(read(&log).contains("scan started"), "{}", read(&log));
}
