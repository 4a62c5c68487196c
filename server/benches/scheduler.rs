//! Scheduler bench (`cargo bench -p beebot-server --bench scheduler`): the cost
//! of one scheduling decision (`Policy::choose` over prebuilt views) for every
//! policy, with 10,000 queued jobs, 1,000 hosts and 2,000 running jobs, and
//! the cost of laying one host's units on its slots. Prints one table; the
//! figures are compared within one run and nothing here asserts a speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use beebot_server::scheduler::{
    self, Ctx, HeldUnit, HostView, JobQueue, JobView, NoRunning, Queue, RunningList, RunningView,
    WorkAsk, POLICY_NAMES,
};
use beebot_server::simulate::{synthetic_hosts, synthetic_sites, Rng};

/// Queued jobs, hosts and running jobs of the benched grid.
const QUEUED: usize = 10_000;
const HOSTS: usize = 1_000;
const RUNNING: usize = 2_000;
/// Least time spent measuring each figure.
const MIN_TIME: Duration = Duration::from_secs(1);
/// Most decisions measured per figure.
const MAX_ROUNDS: u32 = 1_000_000;
/// The target for one decision.
const TARGET_US: f64 = 100.0;

fn views(seed: u64) -> (Vec<JobView>, Vec<HostView>, Vec<RunningView>) {
    let mut rng = Rng::new(seed);
    let queue: Vec<JobView> = synthetic_sites(QUEUED, 0.0, seed)
        .into_iter()
        .enumerate()
        .map(|(i, s)| JobView {
            job_id: i as u64,
            order: i as u32,
            pages: s.pages.unwrap_or(scheduler::DEFAULT_SITE_PAGES),
            failed_here: rng.unit() < 0.01,
            barred_somewhere: false,
            barred: Vec::new(),
            size_known: s.pages.is_some(),
            assigned: Some(1 + (i % HOSTS) as u64),
            under_check: false,
            // Most sites answer within the delay; one in four is slower.
            pace_s: if rng.unit() < 0.25 {
                scheduler::class_pace(1 + (rng.unit() * 4.0) as u8)
            } else {
                0.0
            },
        })
        .collect();
    let hosts: Vec<HostView> = synthetic_hosts(HOSTS, seed)
        .into_iter()
        .enumerate()
        .map(|(i, h)| {
            let busy = (rng.unit() * 5.0) as u32;
            HostView {
                host_id: 1 + i as u64,
                pages_per_s: Some(h.pages_per_s),
                slots: h.slots,
                busy,
                free_at_s: if busy >= h.slots {
                    rng.unit() * 300.0
                } else {
                    0.0
                },
                load_s: busy as f64 * rng.unit() * 300.0,
                online: rng.unit() < 0.95,
                availability: 0.8 + 0.2 * rng.unit(),
                last_seen_ms: 1_000_000,
                // What clients report by default (1 GB), half of them with
                // a bandwidth cap, and what their held scans need of it:
                // `pack` fits on the path real hosts take.
                capacity: scheduler::Capacity {
                    memory_mb: 1024.0,
                    kbps: if i % 2 == 0 { 300.0 } else { f64::INFINITY },
                },
                demand: scheduler::Demand {
                    memory_mb: busy as f64 * scheduler::resources::scan_memory_mb(100.0),
                    kbps: busy as f64 * scheduler::resources::PAGE_KB,
                },
                trusted: i % 3 == 0,
            }
        })
        .collect();
    let running: Vec<RunningView> = (0..RUNNING)
        .map(|i| RunningView {
            job_id: (QUEUED + i) as u64,
            pages: 10.0 + rng.unit() * 1000.0,
            holder: None,
            copies: 1,
            on_asker: false,
            failed_here: false,
            finish_s: rng.unit() * 3000.0,
            pace_s: 0.0,
        })
        .collect();
    (queue, hosts, running)
}

/// Mean microseconds of `f` over at least [`MIN_TIME`].
fn time_us(mut f: impl FnMut(u32)) -> f64 {
    let start = Instant::now();
    let mut n = 0;
    while n < MAX_ROUNDS && (start.elapsed() < MIN_TIME || n < 10) {
        f(n);
        n += 1;
    }
    start.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn main() {
    let (queue, hosts, running) = views(7);
    let queue = JobQueue::from_views(&queue);
    let running = RunningList::new(running);
    println!(
        "one scheduling decision: {QUEUED} queued jobs, {HOSTS} hosts, {RUNNING} running jobs"
    );
    println!(
        "{:<28} {:>12} {:>10}",
        "policy / ask", "µs/decision", "target"
    );
    bench_policies(&queue, &hosts, &running);
    bench_tail(&hosts, &running);
    bench_slot_schedule();
}

/// Every policy over the full views, asked for one slot and for four.
fn bench_policies(queue: &JobQueue, hosts: &[HostView], running: &RunningList) {
    for name in POLICY_NAMES {
        let policy = scheduler::policy_by_name(name).expect("known policy");
        for (label, ask) in [
            (
                "1 slot",
                WorkAsk {
                    want_seconds: 600,
                    free_slots: 1,
                },
            ),
            (
                "4 slots",
                WorkAsk {
                    want_seconds: 3600,
                    free_slots: 4,
                },
            ),
        ] {
            let us = time_us(|n| {
                let ctx = Ctx {
                    now_ms: 1_000_000,
                    round_started_ms: 0,
                    delay_s: 0.0,
                    max_pages: 1000.0,
                    queue: Queue::all(queue),
                    running: if policy.replicates() {
                        running
                    } else {
                        &NoRunning
                    },
                    hosts,
                    asker: (n as usize * 7919) % HOSTS,
                };
                black_box(policy.choose(black_box(&ctx), black_box(&ask)));
            });
            let verdict = if us < TARGET_US { "ok" } else { "OVER" };
            println!(
                "{:<28} {:>12.1} {:>10}",
                format!("{name} ({label})"),
                us,
                verdict
            );
        }
    }
}

/// The tail case: nothing queued, replication over the running jobs.
fn bench_tail(hosts: &[HostView], running: &RunningList) {
    let policy = scheduler::policy_by_name("adaptive").expect("adaptive");
    let empty = JobQueue::default();
    let us = time_us(|n| {
        let ctx = Ctx {
            now_ms: 1_000_000,
            round_started_ms: 0,
            delay_s: 0.0,
            max_pages: 1000.0,
            queue: Queue::all(&empty),
            running,
            hosts,
            asker: (n as usize * 7919) % HOSTS,
        };
        black_box(policy.choose(
            &ctx,
            &WorkAsk {
                want_seconds: 600,
                free_slots: 2,
            },
        ));
    });
    println!(
        "{:<28} {:>12.1} {:>10}",
        "adaptive (tail, replicas)",
        us,
        if us < TARGET_US { "ok" } else { "OVER" }
    );
}

/// View building: one host's slot schedule (8 units on 4 slots).
fn bench_slot_schedule() {
    let units: Vec<HeldUnit> = (0..8)
        .map(|i| HeldUnit {
            issued_ms: 900_000 + i * 1000,
            expected_s: 100.0 + i as f64 * 10.0,
        })
        .collect();
    let us = time_us(|_| {
        black_box(scheduler::slot_schedule(black_box(&units), 4, 1_000_000));
    });
    println!("{:<28} {:>12.3} {:>10}", "slot_schedule (8 units)", us, "-");
}
