//! Work-request bench (`cargo bench -p beebot-server --bench request_work`):
//! the cost of one whole `Grid::request_work_unsigned` as `serve` runs it
//! on the grid's thread (the asker's view, every host's view, the policy's
//! choice, issuing the units, and handing the grid's writes to the store;
//! `serve` signs them outside, timed apart in the `sign µs` column), on the path a real round
//! takes: every request asks for a unit, and each host keeps [`HELD`]
//! units running as a client with two slots and a buffer does: the two it
//! scans report progress (so their scans could be handed over), and it
//! uploads its oldest before it asks again once it holds [`HELD`] (reports
//! and uploads untimed; its host verifies each unit outside the timing), so
//! thousands of jobs run while the queue drains. 2,000
//! enrolled hosts against a round of 1,000 to 1,000,000 queued sites, per
//! policy, as a round after the first finds them: [`UNKNOWN`] of them never
//! scanned, the others of known, power-law sizes (the simulator's sites).
//! A policy may answer a request with none (`adaptive`: a slower host may
//! lose every size to a faster one): the `units` column counts the
//! requests that handed one out. Speed work keeps its figures only where
//! the decisions are the same: `decisions` is a digest of the first
//! [`DIGEST_REQUESTS`] answers (which host got which job, in order) and
//! `hand-overs` the scans the policy moved, so two builds compare only
//! where both columns agree; and beside them `× LB` is the quality of the
//! policy's decisions on a whole round: the median over [`QUALITY_SEEDS`]
//! seeds of the simulator's round length over its lower bound at
//! [`QUALITY_SITES`] sites and [`QUALITY_HOSTS`] hosts at its defaults (the
//! same build's grid and policy; lower is better), so a faster request
//! that made rounds longer shows in the same row. Prints one table;
//! figures are compared within one run and nothing here asserts a speed.
//!
//! `BEEBOT_BENCH_QUEUES=1000,100000` picks the queue sizes,
//! `BEEBOT_BENCH_POLICIES=adaptive,level` the policies,
//! `BEEBOT_BENCH_STEP_MS=1` the virtual time between two requests (5 ms:
//! 200 requests a second).

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::VerifyingKey;

use beebot_server::grid::{
    Grid, GridIo, GridSettings, MemoryLinks, ProgressOutcome, UploadOutcome, UploadStep,
    WorkRequest,
};
use beebot_server::model::{SiteRecord, SiteStats};
use beebot_server::params::RoundParams;
use beebot_server::simulate;
use beebot_server::store::SharedStore;
use beebot_server::validate::ValidateMode;
use beebot_shared::proto::HostInfo;
use beebot_shared::sign::{self, SignedUnit, UnitBytes, WorkUnit};

/// Hosts enrolled, each asking in turn.
const HOSTS: usize = 2_000;
/// Units each host keeps running: it uploads its oldest before asking
/// once it holds this many (two slots and a buffer).
const HELD: usize = 3;
/// Units each host scans at once (its oldest), reporting progress on each
/// of its turns; the others wait in its buffer.
const SCANNING: usize = 2;
/// Queue sizes measured by default.
const QUEUES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];
/// Policies measured by default.
const POLICIES: [&str; 3] = ["adaptive", "level", "round-robin"];
/// Least time spent measuring each figure, and most requests.
const MIN_TIME: Duration = Duration::from_secs(2);
const MAX_REQUESTS: usize = 20_000;
/// Requests whose answers the `decisions` digest covers (every row makes
/// at least this many, so the digest does not depend on the machine's speed;
/// the smallest queue, 1,000, makes 500).
const DIGEST_REQUESTS: usize = 500;
/// The simulated rounds behind the `× LB` column: sites, hosts and seeds
/// (`simulate --synthetic-sites 2000 --synthetic-hosts 100 --seeds 3`).
const QUALITY_SITES: usize = 2_000;
const QUALITY_HOSTS: usize = 100;
const QUALITY_SEEDS: u32 = 3;
/// The target for one whole request.
const TARGET_US: f64 = 100.0;
/// Share of the sites never scanned before (the simulator's default).
const UNKNOWN: f64 = 0.1;
/// Seconds a page took in the sites' last scans (the 1 s delay and a
/// response).
const LAST_PAGE_S: f64 = 1.2;
/// Start of the bench's clock (Unix ms); each request moves it on by this.
const T0: u64 = 1_750_000_000_000;
const STEP_MS: u64 = 5;
/// What `BEEBOT_BENCH_STEP_MS` sets instead of [`STEP_MS`]: the requests a
/// second the grid sees (200 at 5 ms). Views not marked are rebuilt
/// `hosts × elapsed / VIEW_REFRESH_MS` a request, so their share of a
/// request falls as requests come faster.
fn step_ms() -> u64 {
    std::env::var("BEEBOT_BENCH_STEP_MS")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("BEEBOT_BENCH_STEP_MS: `{v}` is not a number"))
        })
        .unwrap_or(STEP_MS)
}

fn list<T: std::str::FromStr + Clone>(var: &str, default: &[T]) -> Vec<T> {
    match std::env::var(var) {
        Ok(v) => v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{var}: `{s}` is not a number"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

fn main() {
    let queues = list("BEEBOT_BENCH_QUEUES", &QUEUES);
    let policies: Vec<String> = match std::env::var("BEEBOT_BENCH_POLICIES") {
        Ok(v) => v.split(',').map(|s| s.trim().to_string()).collect(),
        Err(_) => POLICIES.iter().map(|s| s.to_string()).collect(),
    };
    println!(
        "request_work on the grid's thread as serve runs it (views, policy, issue, its writes to the store) with {HOSTS} hosts each keeping up to {HELD} units running;"
    );
    println!(
        "its {SCANNING} oldest report progress and it uploads its oldest before asking once it holds {HELD} (untimed); {} ms between requests",
        step_ms()
    );
    println!("`sign µs`: signing a unit handed out, outside the lock (serve's connection task)");
    println!(
        "`× LB`: median round over its lower bound, simulated at {QUALITY_SITES} sites x {QUALITY_HOSTS} hosts, {QUALITY_SEEDS} seeds (lower is better)"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "policy",
        "queued",
        "requests",
        "units",
        "running",
        "hand-overs",
        "decisions",
        "× LB",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "target",
        "sign µs"
    );
    for policy in &policies {
        let quality = quality(policy);
        for &queued in &queues {
            let m = measure(policy, queued);
            println!(
                "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7.3} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8} {:>8.1}",
                policy,
                queued,
                m.requests,
                m.units,
                m.running,
                m.hand_overs,
                format!("{:08x}", m.decisions as u32),
                quality,
                m.mean_us,
                m.p50_us,
                m.p99_us,
                m.p999_us,
                if m.p99_us < TARGET_US { "ok" } else { "OVER" },
                m.sign_us
            );
        }
    }
}

/// The quality of `policy`'s decisions on whole rounds: the simulator's
/// median round over its lower bound (see the `× LB` column).
fn quality(policy: &str) -> f64 {
    let runs = simulate::run_all(
        &simulate::Input::Synthetic(QUALITY_SITES),
        &simulate::Input::Synthetic(QUALITY_HOSTS),
        &[policy],
        QUALITY_SEEDS,
        &simulate::SimOptions::default(),
    )
    .expect("simulate");
    let (name, runs) = &runs[0];
    simulate::summarise(name, runs).ratio_median
}

struct Measured {
    requests: usize,
    /// Requests that handed out a unit (the others were answered "none").
    units: usize,
    /// Units held by the hosts at the end (running jobs).
    running: usize,
    /// Scans the grid asked to hand over (progress answered with an abort).
    hand_overs: usize,
    /// FNV-1a digest of the first [`DIGEST_REQUESTS`] answers.
    decisions: u64,
    mean_us: f64,
    /// Mean signing time of a unit handed out (outside the lock).
    sign_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

/// A grid in memory with `queued` sites in a running round under `policy`
/// and [`HOSTS`] benchmarked hosts, each asked once (so each holds a unit).
/// What [`grid`] sets up: the grid, the project's public key, the hosts,
/// the unit each holds, and the clock.
type Bench = (
    Grid,
    SharedStore,
    VerifyingKey,
    Vec<u64>,
    Vec<VecDeque<WorkUnit>>,
    u64,
);

fn grid(policy: &str, queued: usize) -> Bench {
    let key = sign::generate_key();
    // The target set as a second round finds it: most sites scanned
    // before (power-law sizes), a share never scanned.
    let store = beebot_server::store::memory();
    for site in simulate::synthetic_sites(queued, UNKNOWN, 7) {
        let last_scan = site.pages.map(|p| SiteStats {
            pages: p.round() as u64,
            seconds: p.round() * LAST_PAGE_S,
            ..SiteStats::default()
        });
        store
            .put_site(&SiteRecord {
                host: site.name,
                added_ms: T0,
                last_scan,
            })
            .expect("site");
    }
    let io = GridIo::in_memory(Arc::new(MemoryLinks::default()), key.clone(), 7);
    let settings = GridSettings {
        user_agent: "BeeBot/bench (+http://example.test/bot)".into(),
        deadline_slack: 3.0,
        deadline_grace_s: 600,
        trust_after: 3,
        spot_check_percent: 5,
    };
    let records = beebot_server::store::records(&*store).expect("records");
    let mut g = Grid::open(records, io, settings).expect("grid");
    let params = RoundParams {
        policy: policy.to_string(),
        validate: ValidateMode::Adaptive,
        ..RoundParams::default()
    };
    g.start_round(params, T0).expect("round");
    let token = g
        .create_invite(HOSTS as u32, T0 + 86_400_000, T0)
        .expect("invite");
    let mut hosts = Vec::with_capacity(HOSTS);
    for i in 0..HOSTS {
        let hk = sign::generate_key();
        let info = HostInfo {
            name: format!("h{i}"),
            os: "bench".into(),
            client_version: "0".into(),
            cores: 2,
        };
        let id = g
            .enrol(&token, hk.verifying_key().to_bytes(), info, T0)
            .expect("enrol");
        let speed = 1.0 + (i % 5) as f64;
        g.benchmark(id, speed, speed * 40.0, 2, T0).expect("bench");
        hosts.push(id);
    }
    store.apply(&g.take_writes()).expect("writes");
    let mut held = vec![VecDeque::new(); HOSTS];
    let mut now = T0;
    // Each call's writes are applied after it, as serve's grid thread does.
    for (i, &h) in hosts.iter().enumerate() {
        now += 1;
        held[i].extend(ask(&mut g, &key.verifying_key(), h, &[], now));
        store.apply(&g.take_writes()).expect("writes");
    }
    (g, store, key.verifying_key(), hosts, held, now)
}

/// One work request of host `h` holding `held`: the reply's first unit,
/// signed (the server's whole work; the host verifies it).
fn request(g: &mut Grid, h: u64, held: &[u64], now: u64) -> Option<SignedUnit> {
    let signer = g.signer();
    request_unsigned(g, h, held, now).map(|u| signer.sign_unit_bytes(u))
}

/// What `serve` runs under the grid lock for one work request of host `h`
/// holding `held`: the reply's first unit, recorded as issued, its bytes
/// made but not signed (`serve` signs them outside the lock).
fn request_unsigned(g: &mut Grid, h: u64, held: &[u64], now: u64) -> Option<UnitBytes> {
    let req = WorkRequest {
        want_seconds: 3600,
        free_slots: 1,
        units_held: held.to_vec(),
        open_windows: None,
    };
    let reply = g.request_work_unsigned(h, &req, now).expect("request_work");
    reply.units.into_iter().next()
}

/// The unit of a reply, verified as its host does.
fn verified(key: &VerifyingKey, unit: Option<SignedUnit>) -> Option<WorkUnit> {
    unit.map(|s| sign::verify_unit(key, &s).expect("signed"))
}

/// One work request of host `h` holding `held`; the unit it got, verified.
fn ask(g: &mut Grid, key: &VerifyingKey, h: u64, held: &[u64], now: u64) -> Option<WorkUnit> {
    verified(key, request(g, h, held, now))
}

/// A progress report of `unit` (one its host is scanning): false when the
/// host is told to stop it.
fn progress(g: &mut Grid, h: u64, unit: &WorkUnit, now: u64, aborts: &mut usize) -> bool {
    let pages = now.saturating_sub(unit.issued_ms) / 1000 + 1;
    let outcome = g
        .progress(h, unit.unit_id, pages, pages * 10, now)
        .expect("progress");
    let abort = matches!(outcome, ProgressOutcome::Abort(_));
    *aborts += usize::from(abort);
    !abort
}

/// Fold `x` into an FNV-1a digest.
fn fold(digest: &mut u64, x: u64) {
    for b in x.to_le_bytes() {
        *digest ^= u64::from(b);
        *digest = digest.wrapping_mul(0x100_0000_01b3);
    }
}

/// Upload a one-page result of `unit` as `serve` does (verify, write, finish).
fn upload(g: &mut Grid, h: u64, unit: &WorkUnit, now: u64) {
    let elapsed = now.saturating_sub(unit.issued_ms).max(1000);
    let (summary, file) = simulate::one_page_result(unit, elapsed).expect("link file");
    let plan = match g.upload_begin(h, unit.unit_id, now).expect("upload") {
        UploadStep::Answer(_) => return,
        UploadStep::Plan(p) => p,
    };
    let outcome = simulate::finish_upload(g, &plan, summary, &file, None, now).expect("finish");
    black_box(matches!(outcome, UploadOutcome::Accepted));
}

fn measure(policy: &str, queued: usize) -> Measured {
    let (mut g, store, key, hosts, mut held, mut now) = grid(policy, queued);
    let step = step_ms();
    let mut times = Vec::new();
    let mut units = 0;
    let (mut hand_overs, mut decisions) = (0, 0xcbf2_9ce4_8422_2325u64);
    let signer = g.signer();
    let mut signing = Duration::ZERO;
    let start = Instant::now();
    let most = MAX_REQUESTS.min(queued / 2);
    let mut i = 0;
    while times.len() < most && (start.elapsed() < MIN_TIME || times.len() < DIGEST_REQUESTS) {
        let k = (i * 7919) % HOSTS;
        i += 1;
        let h = hosts[k];
        now += step;
        // Its scanning units report progress (untimed), as a client's do.
        let mut i = 0;
        held[k].retain(|u| {
            i += 1;
            i > SCANNING || progress(&mut g, h, u, now, &mut hand_overs)
        });
        // Its oldest unit is scanned: uploaded before it asks again.
        if held[k].len() >= HELD {
            if let Some(u) = held[k].pop_front() {
                upload(&mut g, h, &u, now);
            }
        }
        store.apply(&g.take_writes()).expect("writes");
        g.take_link_changes().apply(g.link_files());
        let ids: Vec<u64> = held[k].iter().map(|u| u.unit_id).collect();
        let t = Instant::now();
        let unit = black_box(request_unsigned(&mut g, h, &ids, now));
        store.apply(&g.take_writes()).expect("writes");
        times.push(t.elapsed());
        units += usize::from(unit.is_some());
        // Signed as `serve` signs it, outside the lock (timed apart).
        let t = Instant::now();
        let signed = unit.map(|u| signer.sign_unit_bytes(u));
        signing += t.elapsed();
        let got = verified(&key, signed);
        if times.len() <= DIGEST_REQUESTS {
            fold(&mut decisions, h);
            fold(&mut decisions, got.as_ref().map_or(0, |u| u.job_id));
        }
        held[k].extend(got);
    }
    times.sort();
    let n = times.len().max(1);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Measured {
        requests: times.len(),
        units,
        running: held.iter().map(VecDeque::len).sum(),
        hand_overs,
        decisions,
        mean_us: times.iter().map(|d| us(*d)).sum::<f64>() / n as f64,
        sign_us: us(signing) / units.max(1) as f64,
        p50_us: us(times[n / 2]),
        p99_us: us(times[(n * 99 / 100).min(n - 1)]),
        p999_us: us(times[(n * 999 / 1000).min(n - 1)]),
    }
}
