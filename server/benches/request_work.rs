//! Work-request bench (`cargo bench -p beebot-server --bench request_work`):
//! the cost of one whole `Grid::request_work` as `serve` runs it under the
//! grid lock (the asker's view, every host's view, the policy's choice,
//! issuing, signing), on the path a real round takes: every request asks
//! for a unit, and every unit handed out is uploaded (untimed) before its
//! host asks again (its host verifies it outside the timing). 2,000
//! enrolled hosts against a round of 1,000 to 1,000,000 queued sites, per
//! policy. `adaptive` answers most requests here with none (a slower host
//! loses every size to a faster one): the `units` column counts the
//! requests that handed one out. Prints one table; figures are compared
//! within one run and nothing here asserts a speed.
//!
//! `BEEBOT_BENCH_QUEUES=1000,100000` picks the queue sizes,
//! `BEEBOT_BENCH_POLICIES=adaptive,level` the policies,
//! `BEEBOT_BENCH_STEP_MS=1` the virtual time between two requests (5 ms:
//! 200 requests a second).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::VerifyingKey;

use beebot_server::grid::{
    Grid, GridIo, GridSettings, MemoryLinks, UploadOutcome, UploadStep, WorkRequest,
};
use beebot_server::params::RoundParams;
use beebot_server::simulate;
use beebot_server::validate::ValidateMode;
use beebot_shared::proto::HostInfo;
use beebot_shared::sign::{self, SignedUnit, WorkUnit};

/// Hosts enrolled, each asking in turn.
const HOSTS: usize = 2_000;
/// Queue sizes measured by default.
const QUEUES: [usize; 4] = [1_000, 10_000, 100_000, 1_000_000];
/// Policies measured by default.
const POLICIES: [&str; 3] = ["adaptive", "level", "round-robin"];
/// Least time spent measuring each figure, and most requests.
const MIN_TIME: Duration = Duration::from_secs(2);
const MAX_REQUESTS: usize = 20_000;
/// The target for one whole request.
const TARGET_US: f64 = 100.0;
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
        "one whole request_work (views, policy, issue, sign) with {HOSTS} hosts each holding a unit;"
    );
    println!(
        "every unit handed out is uploaded (untimed) before its host asks again; {} ms between requests",
        step_ms()
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "policy",
        "queued",
        "requests",
        "units",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "target"
    );
    for policy in &policies {
        for &queued in &queues {
            let m = measure(policy, queued);
            println!(
                "{:<14} {:>10} {:>10} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>8}",
                policy,
                queued,
                m.requests,
                m.units,
                m.mean_us,
                m.p50_us,
                m.p99_us,
                m.p999_us,
                if m.p99_us < TARGET_US { "ok" } else { "OVER" }
            );
        }
    }
}

struct Measured {
    requests: usize,
    /// Requests that handed out a unit (the others were answered "none").
    units: usize,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

/// A grid in memory with `queued` sites in a running round under `policy`
/// and [`HOSTS`] benchmarked hosts, each asked once (so each holds a unit).
/// What [`grid`] sets up: the grid, the project's public key, the hosts,
/// the unit each holds, and the clock.
type Bench = (Grid, VerifyingKey, Vec<u64>, Vec<Option<WorkUnit>>, u64);

fn grid(policy: &str, queued: usize) -> Bench {
    let key = sign::generate_key();
    let io = GridIo::in_memory(
        beebot_server::store::memory(),
        Arc::new(MemoryLinks::default()),
        key.clone(),
        7,
    );
    let settings = GridSettings {
        user_agent: "BeeBot/bench (+http://example.test/bot)".into(),
        deadline_slack: 3.0,
        deadline_grace_s: 600,
        trust_after: 3,
        spot_check_percent: 5,
    };
    let mut g = Grid::open(io, settings).expect("grid");
    let sites: Vec<String> = (0..queued).map(|i| format!("s{i}.bench.test")).collect();
    g.add_sites(&sites, T0).expect("sites");
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
    let mut held = vec![None; HOSTS];
    let mut now = T0;
    for (i, &h) in hosts.iter().enumerate() {
        now += 1;
        held[i] = ask(&mut g, &key.verifying_key(), h, None, now);
    }
    (g, key.verifying_key(), hosts, held, now)
}

/// One work request of host `h` holding `held`: the reply's first unit,
/// signed (the server's whole work; the host verifies it).
fn request(g: &mut Grid, h: u64, held: Option<u64>, now: u64) -> Option<SignedUnit> {
    let req = WorkRequest {
        want_seconds: 3600,
        free_slots: 1,
        units_held: held.into_iter().collect(),
        open_windows: None,
    };
    let reply = g.request_work(h, &req, now).expect("request_work");
    reply.units.into_iter().next()
}

/// The unit of a reply, verified as its host does.
fn verified(key: &VerifyingKey, unit: Option<SignedUnit>) -> Option<WorkUnit> {
    unit.map(|s| sign::verify_unit(key, &s).expect("signed"))
}

/// One work request of host `h` holding `held`; the unit it got, verified.
fn ask(g: &mut Grid, key: &VerifyingKey, h: u64, held: Option<u64>, now: u64) -> Option<WorkUnit> {
    verified(key, request(g, h, held, now))
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
    let (mut g, key, hosts, mut held, mut now) = grid(policy, queued);
    let step = step_ms();
    let mut times = Vec::new();
    let mut units = 0;
    let start = Instant::now();
    let most = MAX_REQUESTS.min(queued / 2);
    let mut i = 0;
    while times.len() < most && (start.elapsed() < MIN_TIME || times.len() < 100) {
        let k = (i * 7919) % HOSTS;
        i += 1;
        let h = hosts[k];
        now += step;
        // The unit it held is scanned: uploaded before it asks again.
        if let Some(u) = held[k].take() {
            upload(&mut g, h, &u, now);
        }
        let t = Instant::now();
        let unit = black_box(request(&mut g, h, None, now));
        times.push(t.elapsed());
        units += usize::from(unit.is_some());
        held[k] = verified(&key, unit);
    }
    times.sort();
    let n = times.len().max(1);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Measured {
        requests: times.len(),
        units,
        mean_us: times.iter().map(|d| us(*d)).sum::<f64>() / n as f64,
        p50_us: us(times[n / 2]),
        p99_us: us(times[(n * 99 / 100).min(n - 1)]),
        p999_us: us(times[(n * 999 / 1000).min(n - 1)]),
    }
}
