//! The claim of `level` (water-filling) shown on the grid itself, through
//! `request_work` under the round's policy: hosts that join in the middle
//! of a round receive the next jobs before the hosts already loaded, and
//! after each request the expected finishing times of the hosts that have
//! asked (their load per slot, from the scheduler's own estimates) are
//! within the largest queued job of each other.
//!
//! The script is a round's tail: two hosts take work at the start, two
//! more join 20 s later, when what is queued would lift the joiners to
//! about the first hosts' line. The loaded hosts keep asking for more up
//! to four units a slot (a client whose buffer holds less than its
//! minimum seconds tops up so).
//! The same script under `round-robin` must break the claim, so the test
//! shows the policy, not the script.

use std::sync::Arc;

use beebot_shared::fetch_rules::{work_wanted, DEFAULT_BUFFER_MAX_S, DEFAULT_BUFFER_MIN_S};
use beebot_shared::sign;

use crate::grid::testkit::{enrol_host, params, settings, T0};
use crate::grid::*;
use crate::model::{JobState, SiteRecord, SiteStats};

/// The sites' last scans (pages), in list order: a spread of sizes, the
/// largest first.
const SITE_PAGES: [u64; 16] = [
    100, 95, 90, 85, 80, 78, 76, 74, 72, 70, 68, 66, 64, 62, 60, 58,
];

/// The script's figures.
struct Script {
    /// Every host: two slots (the client's default) at one page a second,
    /// in a round whose politeness delay (above zero) is below that time
    /// (the test runs at it and at delay 0).
    slots: u32,
    pages_per_s: f64,
    delay_ms: u64,
    /// When the joiners come (the first hosts are still online then), how
    /// far apart requests come, and how many times each host asks after.
    join_after_ms: u64,
    step_ms: u64,
    cycles: usize,
    /// The loaded hosts' average scan, seconds: their four units over two
    /// slots hold less than the client's minimum, so they ask for more.
    known_scan_s: f64,
    /// Kilobytes a page weighs (the benchmark's KB/s figure).
    page_kb: f64,
}

/// The one script this test runs.
const SCRIPT: Script = Script {
    slots: 2,
    pages_per_s: 1.0,
    delay_ms: 500,
    join_after_ms: 20_000,
    step_ms: 1_000,
    cycles: 3,
    known_scan_s: 90.0,
    page_kb: 30.0,
};
/// A request's round trip, seconds (the client's buffer rule), and the
/// slack of float comparisons.
const ROUND_TRIP_S: f64 = 0.05;
const EPSILON_S: f64 = 1e-6;

/// A simulated client: its host, the units it holds, its scan time.
struct Client {
    host_id: u64,
    held: Vec<u64>,
    scan_s: Option<f64>,
    asked: bool,
}

/// A grid in memory with the sites of [`SITE_PAGES`] and a running round
/// under `policy`.
fn grid_with_round(policy: &str, delay_ms: u64) -> (Grid, u64) {
    let store = crate::store::memory();
    for (i, pages) in SITE_PAGES.iter().enumerate() {
        let site = SiteRecord {
            host: format!("s{i:02}.test"),
            added_ms: T0,
            last_scan: Some(SiteStats {
                pages: *pages,
                ..Default::default()
            }),
        };
        store.put_site(&site).unwrap();
    }
    let io = GridIo::in_memory(Arc::new(MemoryLinks::new()), sign::generate_key(), 1);
    let records = crate::store::records(&*store).unwrap();
    let mut grid = Grid::open(records, io, settings()).unwrap();
    let p = RoundParams {
        policy: policy.into(),
        max_pages: 1000,
        delay_ms,
        ..params(3)
    };
    let round = grid.start_round(p, T0).unwrap();
    (grid, round)
}

/// Enrol a host with its benchmark.
fn join(grid: &mut Grid, now: u64, scan_s: Option<f64>) -> Client {
    let host_id = enrol_host(grid, now);
    grid.benchmark(
        host_id,
        SCRIPT.pages_per_s,
        SCRIPT.page_kb * SCRIPT.pages_per_s,
        SCRIPT.slots,
        now,
    )
    .unwrap();
    Client {
        host_id,
        held: Vec::new(),
        scan_s,
        asked: false,
    }
}

/// What one request came to: the jobs the asker got, the spread of the
/// finishing times after it, and the largest job queued before it.
struct Asked {
    got: usize,
    spread_s: f64,
    largest_s: f64,
}

impl Asked {
    /// `(spread, largest queued job)`: this request's, when its spread is
    /// the wider and jobs were queued, else `widest`.
    fn wider(&self, widest: (f64, f64)) -> (f64, f64) {
        if self.largest_s > 0.0 && self.spread_s > widest.0 {
            (self.spread_s, self.largest_s)
        } else {
            widest
        }
    }
}

/// One request of client `c` as the client's buffer rule makes it; the
/// jobs it got, or why the claim broke: the expected finishing times of
/// the hosts that asked spread wider than the largest job queued before it.
fn ask(
    grid: &mut Grid,
    round: u64,
    clients: &mut [Client],
    c: usize,
    now: u64,
    delay_ms: u64,
) -> Result<Asked, String> {
    let cl = &clients[c];
    let Some((want, free)) = work_wanted(
        SCRIPT.slots,
        cl.held.len(),
        cl.scan_s,
        ROUND_TRIP_S,
        DEFAULT_BUFFER_MIN_S,
        DEFAULT_BUFFER_MAX_S,
    ) else {
        return Ok(Asked {
            got: 0,
            spread_s: 0.0,
            largest_s: 0.0,
        });
    };
    let views = grid.host_views_now(now).views;
    let cost = views
        .iter()
        .map(|h| h.cost(delay_ms as f64 / 1000.0))
        .fold(0.0, f64::max);
    let (_, jobs) = grid.round(round).unwrap();
    let largest_s = jobs
        .iter()
        .filter(|j| j.state == JobState::Queued)
        .map(|j| j.est_pages * cost)
        .fold(0.0, f64::max);
    let req = WorkRequest {
        want_seconds: want,
        free_slots: free,
        units_held: cl.held.clone(),
        open_windows: None,
    };
    let reply = grid.request_work(cl.host_id, &req, now).unwrap();
    let got = reply.units.len();
    let cl = &mut clients[c];
    cl.asked = true;
    let pk = ed25519_dalek::VerifyingKey::from_bytes(&grid.project_public_key()).unwrap();
    cl.held.extend(
        reply
            .units
            .iter()
            .map(|s| sign::verify_unit(&pk, s).unwrap().unit_id),
    );
    // Load per slot: when the host's slots are done, by the scheduler's estimates.
    let views = grid.host_views_now(now).views;
    let finish: Vec<(u64, f64)> = clients
        .iter()
        .filter(|c| c.asked)
        .filter_map(|c| views.iter().find(|v| v.host_id == c.host_id))
        .map(|v| (v.host_id, v.load_s / f64::from(v.slots.max(1))))
        .collect();
    let hi = finish.iter().map(|f| f.1).fold(f64::MIN, f64::max);
    let lo = finish.iter().map(|f| f.1).fold(f64::MAX, f64::min);
    if largest_s > 0.0 && hi - lo > largest_s + EPSILON_S {
        return Err(format!(
            "after host {} asked: finishing times {finish:?} spread {:.0} s, \
             wider than the largest queued job ({largest_s:.0} s)",
            clients[c].host_id,
            hi - lo
        ));
    }
    Ok(Asked {
        got,
        spread_s: hi - lo,
        largest_s,
    })
}

/// Run the script under `policy`: `Ok` when the claim held at every
/// request, with the widest spread after a request while jobs were
/// queued, and the largest queued job it was held to.
fn claim_holds(policy: &str, delay_ms: u64) -> Result<(f64, f64), String> {
    let (mut grid, round) = grid_with_round(policy, delay_ms);
    let mut clients = vec![
        join(&mut grid, T0, Some(SCRIPT.known_scan_s)),
        join(&mut grid, T0, Some(SCRIPT.known_scan_s)),
    ];
    let loaded = clients.len();
    let mut widest = (0.0, 0.0);
    let mut now = T0;
    for c in 0..loaded {
        let a = ask(&mut grid, round, &mut clients, c, now, delay_ms)?;
        widest = a.wider(widest);
        now += SCRIPT.step_ms;
    }
    now = T0 + SCRIPT.join_after_ms;
    for _ in 0..2 {
        clients.push(join(&mut grid, now, None));
    }
    for _ in 0..SCRIPT.cycles {
        for c in 0..clients.len() {
            now += SCRIPT.step_ms;
            let a = ask(&mut grid, round, &mut clients, c, now, delay_ms)?;
            widest = a.wider(widest);
            let got = a.got;
            let joiner_empty = clients[loaded..].iter().any(|j| j.held.is_empty());
            if c < loaded && got > 0 && joiner_empty {
                return Err(format!(
                    "loaded host {} got {got} jobs before every joiner had one",
                    clients[c].host_id
                ));
            }
            if c >= loaded && clients[c].held.is_empty() {
                return Err(format!("joiner {} got nothing", clients[c].host_id));
            }
        }
    }
    Ok(widest)
}

#[test]
fn level_gives_joiners_the_next_jobs_and_keeps_hosts_within_one_job() {
    // At the script's delay and at none: the hosts' own pace is the same.
    for delay_ms in [SCRIPT.delay_ms, 0] {
        match claim_holds("level", delay_ms) {
            Ok((spread, largest)) => eprintln!(
                "level, delay {delay_ms} ms: widest spread {spread:.0} s, \
                 largest queued job then {largest:.0} s"
            ),
            Err(why) => panic!("level, delay {delay_ms} ms: {why}"),
        }
        match claim_holds("round-robin", delay_ms) {
            Ok(_) => panic!(
                "round-robin keeps the claim too at delay {delay_ms} ms: \
                 the script shows nothing of `level`"
            ),
            Err(why) => eprintln!("round-robin, delay {delay_ms} ms, breaks it: {why}"),
        }
    }
}
