//! A client sizes its concurrency itself: `beebot run` against the synthetic
//! web on loopback, answering like real servers (50–300 ms a page), ramps
//! above the sites it starts with, never past its `slots` ceiling, and
//! never sends a host two requests closer than the round's delay (at
//! delay 0: never two at once); when responses get much slower it backs off.
//! Concurrency is read from the client's live status and checked on the
//! web server's side too (requests in flight at once, gaps per host).

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::{LoggedRequest, ResponseDelay};
use beebot_tests::*;

/// What the client starts at before it measures anything.
const START: u64 = beebot_client::concurrency::START_SLOTS as u64;

/// The ceiling the tests set (`--slots`): above the start, below the cap
/// an untrusted host may hold units for.
const CEILING: u64 = 6;

/// How often the clients size their concurrency again (10 s by default):
/// short, so a test sees several steps in seconds.
const ADJUST_EVERY_MS: &str = "500";

/// Realistic answers: 50–300 ms a page, drawn per page.
const REALISTIC: ResponseDelay = ResponseDelay {
    min_ms: 50,
    max_ms: 300,
    seed: 14,
};

/// Longest a test's client may take for its round.
const ROUND_TIMEOUT: Duration = Duration::from_secs(180);

/// How often the client's live status is read.
const POLL: Duration = Duration::from_millis(250);

/// A web of `sites` sites of `pages` pages each, answering at `delay`.
fn grid(seed: u64, sites: usize, pages: (usize, usize), delay: ResponseDelay) -> Grid {
    let web = SynthWeb::with_config(
        seed,
        sites,
        SynthConfig {
            min_pages_per_site: pages.0,
            max_pages_per_site: pages.1,
            crawl_delay_ms: None,
        },
    );
    let g = Grid::start_with(web);
    g.web_server.set_response_delay(Some(delay));
    g
}

/// 40 sites of 40–60 pages answering in 20–40 ms (drawn from `answers`),
/// host `a` joined and the sites imported.
fn quick_grid(seed: u64, answers: u64) -> Grid {
    let quick = ResponseDelay {
        min_ms: 20,
        max_ms: 40,
        seed: answers,
    };
    let g = grid(seed, 40, (40, 60), quick);
    g.join("a", &g.invite(1));
    g.import_sites();
    g
}

/// The client's effective concurrency, as its live status says (`None`
/// while it writes none).
fn concurrency(g: &Grid, name: &str) -> Option<u64> {
    g.status_json(name)["concurrency"].as_u64()
}

/// Run `beebot run --once` for `name` with the ceiling until it exits,
/// reading its concurrency all along; the concurrencies seen.
fn run_round_watching(g: &Grid, name: &str, log: &std::path::Path) -> Vec<u64> {
    let ceiling = CEILING.to_string();
    let mut child = g.spawn_run(
        name,
        &[
            "--once",
            "--slots",
            &ceiling,
            "--adjust-every-ms",
            ADJUST_EVERY_MS,
        ],
        log,
    );
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        if let Some(status) = child.try_wait().expect("client") {
            assert!(
                status.success(),
                "client failed: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            return seen;
        }
        assert!(
            started.elapsed() < ROUND_TIMEOUT,
            "the round did not end in {ROUND_TIMEOUT:?}; concurrency seen {seen:?}"
        );
        seen.extend(concurrency(g, name));
        std::thread::sleep(POLL);
    }
}

/// The first request to a host that came less than `delay` after the one
/// before it, or while the one before it was still unanswered.
fn impolite(log: &[LoggedRequest], delay: Duration) -> Option<String> {
    let mut by_host: BTreeMap<&str, Vec<&LoggedRequest>> = BTreeMap::new();
    for r in log {
        by_host.entry(r.host.as_str()).or_default().push(r);
    }
    for (host, mut reqs) in by_host {
        reqs.sort_by_key(|r| r.at);
        for w in reqs.windows(2) {
            let gap = w[1].at.duration_since(w[0].at);
            if gap < delay || w[1].at < w[0].answered {
                return Some(format!(
                    "{host}: {} then {} after {gap:?} (delay {delay:?}, the first answered {:?} after it came)",
                    w[0].path,
                    w[1].path,
                    w[0].answered.duration_since(w[0].at)
                ));
            }
        }
    }
    None
}

/// The most requests the web server held at once (arrived, not yet answered).
fn most_in_flight(log: &[LoggedRequest]) -> usize {
    let mut events: Vec<(Instant, i64)> = log
        .iter()
        .flat_map(|r| [(r.at, 1), (r.answered, -1)])
        .collect();
    // An answer before an arrival at the same instant.
    events.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, e) in events {
        now += e;
        most = most.max(now);
    }
    most as usize
}

/// One polite round (delay `delay_ms`) by client `a`: its concurrency rises
/// above the start and stays within the ceiling, on its status and on the
/// web server's side, and every host is crawled politely.
fn a_round_ramps_within_the_ceiling(g: &Grid, delay_ms: u64) {
    let from = g.web_server.request_log().len();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", &delay_ms.to_string()]));
    let log = g.dir.path().join(format!("client-a-{delay_ms}.stderr"));
    let seen = run_round_watching(g, "a", &log);
    let d = g.round_json(&round);
    assert_eq!(d["counts"]["done"], d["counts"]["total"], "{d}");
    let most = seen.iter().copied().max().unwrap_or(0);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    eprintln!("delay {delay_ms} ms: concurrency seen {seen:?}");
    assert!(
        most > START,
        "delay {delay_ms} ms: the client never ran more than {START} sites at once: {seen:?}\n{text}"
    );
    assert!(
        seen.iter().all(|&c| (1..=CEILING).contains(&c)),
        "delay {delay_ms} ms: past the ceiling {CEILING}: {seen:?}"
    );
    assert!(text.contains("sites scanned at once"), "{text}");
    let requests = &g.web_server.request_log()[from..];
    let in_flight = most_in_flight(requests);
    assert!(
        in_flight <= CEILING as usize,
        "delay {delay_ms} ms: the web server held {in_flight} requests at once, ceiling {CEILING}"
    );
    if let Some(v) = impolite(requests, Duration::from_millis(delay_ms)) {
        panic!("delay {delay_ms} ms: impolite: {v}");
    }
}

#[test]
fn a_client_ramps_above_its_start_never_past_its_ceiling_and_stays_polite() {
    let g = grid(141, 16, (10, 20), REALISTIC);
    g.join("a", &g.invite(1));
    g.import_sites();
    // At a 200 ms delay, and at none (then never two requests to a host at once).
    a_round_ramps_within_the_ceiling(&g, 200);
    a_round_ramps_within_the_ceiling(&g, 0);
}

/// A running client (`beebot run`, not `--once`), killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn responses_getting_much_slower_make_the_client_back_off() {
    // Quick answers while it ramps: 20–40 ms a page.
    let g = quick_grid(151, 15);
    let log = g.dir.path().join("client-a.stderr");
    let _client = Running(g.spawn_run(
        "a",
        &[
            "--slots",
            &CEILING.to_string(),
            "--adjust-every-ms",
            ADJUST_EVERY_MS,
        ],
        &log,
    ));
    last_line(&g.admin_ok(&["round", "start", "--delay-ms", "100"]));
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the client to ramp up", Duration::from_secs(90), || {
        concurrency(&g, "a").is_some_and(|c| c >= CEILING - 1)
    });
    let peak = concurrency(&g, "a").expect("concurrency");
    // Every page now takes 0.8–1.2 s: twenty times as long.
    g.web_server.set_response_delay(Some(ResponseDelay {
        min_ms: 800,
        max_ms: 1200,
        seed: 16,
    }));
    let slowed = Instant::now();
    let mut seen = Vec::new();
    while slowed.elapsed() < Duration::from_secs(60) {
        seen.extend(concurrency(&g, "a"));
        if seen.last().is_some_and(|&c| c <= peak / 2) {
            break;
        }
        std::thread::sleep(POLL);
    }
    let low = seen.iter().copied().min().unwrap_or(peak);
    assert!(
        low <= peak / 2,
        "from {peak} sites at once, slower answers brought it only to {low}: {seen:?}\n{}",
        text()
    );
    assert!(text().contains("responses got slower"), "{}", text());
}

#[test]
fn the_cpu_budget_keeps_the_client_below_it_and_a_raised_one_applies_while_running() {
    // Quick answers at a 30 ms delay: a debug build's scans cost far more
    // than 1% of a core (at 100 ms, three of them fitted 1% on a fast day).
    let g = quick_grid(171, 17);
    // The budget from the settings file (not the tests' whole core).
    let o = g.client("a", &["config", "set", "cpu_percent", "1"]);
    assert!(o.status.success(), "config set: {}", stderr(&o));
    let log = g.dir.path().join("client-a.stderr");
    let file = std::fs::File::create(&log).expect("log");
    let mut args = vec![
        "run".to_string(),
        "--slots".into(),
        CEILING.to_string(),
        "--adjust-every-ms".into(),
        ADJUST_EVERY_MS.into(),
    ];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _client = Running(
        g.client_cmd("a", &args)
            .env_remove("BEEBOT_CPU_PERCENT")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn"),
    );
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "30"]));
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for(
        "a step over the CPU budget",
        Duration::from_secs(60),
        || text().contains("CPU over its budget"),
    );
    // Held below its start while the budget is 1%: it never grows back.
    wait_for("the status to show it", Duration::from_secs(10), || {
        concurrency(&g, "a").is_some_and(|c| c < START)
    });
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        seen.extend(concurrency(&g, "a"));
        std::thread::sleep(POLL);
    }
    assert!(
        !seen.is_empty() && seen.iter().all(|&c| c < START),
        "at 1% of a core: {seen:?}\n{}",
        text()
    );
    // Raised while running: it grows past its start, and the round ends
    // with every job done (a budget slows a scan, never cuts it).
    let o = g.client("a", &["config", "set", "cpu_percent", "100"]);
    assert!(o.status.success(), "config set: {}", stderr(&o));
    wait_for(
        "growth under the raised budget",
        Duration::from_secs(90),
        || concurrency(&g, "a").is_some_and(|c| c > START),
    );
    g.wait_round(&round, "300s");
    let d = g.round_json(&round);
    assert_eq!(d["counts"]["done"], d["counts"]["total"], "{d}");
    assert!(text().contains("cpu_percent=100"), "{}", text());
}
