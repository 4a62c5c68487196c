//! The scheduler's tests: the shared rules and every policy.

use super::SiteStats;
use super::*;

#[test]
fn windows_decide_what_fits_before_the_deadline() {
    let rule = DeadlineRule {
        slack: 3.0,
        grace_s: 0,
        min_s: 60,
        max_s: 3600,
    };
    // Open from 10 min to 20 min from now: 10 minutes of crawling.
    let w = [(600, 1200)];
    assert!(fits_windows(&w, 300.0, &rule)); // deadline 900 s: 300 s open
    assert!(!fits_windows(&w, 700.0, &rule)); // only 600 s open before any deadline
    assert!(!fits_windows(&[(3000, 9000)], 100.0, &rule)); // opens after the deadline
    assert!(fits_windows(&[(0, u64::MAX)], 1000.0, &rule));
    assert!(!fits_windows(&[], 1.0, &rule));
}

fn q(ids_pages: &[(u64, f64)]) -> Vec<JobView> {
    ids_pages
        .iter()
        .enumerate()
        .map(|(i, &(job_id, pages))| JobView {
            job_id,
            order: i as u32,
            pages,
            failed_here: false,
            barred_somewhere: false,
            barred: Vec::new(),
            size_known: true,
            assigned: None,
            under_check: false,
            pace_s: 0.0,
        })
        .collect()
}

fn host(id: u64, pps: f64) -> HostView {
    HostView {
        host_id: id,
        pages_per_s: Some(pps),
        slots: 1,
        busy: 0,
        free_at_s: 0.0,
        load_s: 0.0,
        online: true,
        availability: 1.0,
        last_seen_ms: 0,
        capacity: Capacity::UNBOUNDED,
        demand: Demand::default(),
        trusted: false,
    }
}

/// A context over `queue` (its index lives as long as the test: leaked).
fn ctx<'a>(queue: &[JobView], hosts: &'a [HostView], asker: usize) -> Ctx<'a> {
    let jobs: &'static JobQueue = Box::leak(Box::new(JobQueue::from_views(queue)));
    Ctx {
        now_ms: 1000,
        round_started_ms: 0,
        delay_s: 0.0,
        max_pages: 1000.0,
        queue: Queue::all(jobs),
        running: &NoRunning,
        hosts,
        asker,
    }
}

fn ask(want_seconds: u64, free_slots: u32) -> WorkAsk {
    WorkAsk {
        want_seconds,
        free_slots,
    }
}

#[test]
fn every_name_has_its_policy() {
    for name in POLICY_NAMES {
        assert_eq!(policy_by_name(name).map(|p| p.name()), Some(name));
    }
    assert!(policy_by_name("nope").is_none());
}

#[test]
fn size_aware_takes_longest_first_until_covered() {
    // Host at 1 page/s: pages are seconds.
    let queue = q(&[(1, 10.0), (2, 50.0), (3, 30.0), (4, 5.0)]);
    let hosts = [host(1, 1.0)];
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(SizeAware.choose(&c, &ask(60, 4)).jobs, vec![2, 3]);
    assert_eq!(SizeAware.choose(&c, &ask(1000, 3)).jobs, vec![2, 3, 1]);
    assert!(SizeAware.choose(&c, &ask(0, 0)).jobs.is_empty());
}

#[test]
fn failed_here_goes_last() {
    let mut queue = q(&[(1, 100.0), (2, 1.0)]);
    queue[0].failed_here = true;
    let hosts = [host(1, 1.0)];
    let c = ctx(&queue, &hosts, 0);
    for name in POLICY_NAMES {
        let p = policy_by_name(name).unwrap();
        assert_eq!(p.choose(&c, &ask(1, 1)).jobs, vec![2], "{name}");
    }
    // With nothing else, the failed job does come back.
    let queue = vec![queue[0].clone()];
    let c = ctx(&queue, &hosts, 0);
    for name in POLICY_NAMES {
        let p = policy_by_name(name).unwrap();
        assert_eq!(p.choose(&c, &ask(1, 1)).jobs, vec![1], "{name}");
    }
}

#[test]
fn round_robin_is_list_order_one_per_slot() {
    let queue = q(&[(7, 1.0), (3, 500.0), (9, 2.0)]);
    let hosts = [host(1, 1.0)];
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(RoundRobin.choose(&c, &ask(1, 2)).jobs, vec![7, 3]);
    assert_eq!(RoundRobin.choose(&c, &ask(10_000, 5)).jobs, vec![7, 3, 9]);
}

#[test]
fn estimate_respects_politeness_floor() {
    let stats = SiteStats {
        pages: 100,
        ..Default::default()
    };
    assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 0), 2.0);
    assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 500), 50.0);
    assert_eq!(expected_seconds(Some(&stats), 10, Some(5.0), 0), 2.0);
    assert_eq!(expected_seconds(None, 1000, None, 0), 10.0);
    // Nonsense speeds fall back to the default.
    assert_eq!(seconds_per_page(Some(f64::NAN), 0.0), 0.2);
    assert_eq!(seconds_per_page(Some(-3.0), 0.0), 0.2);
}

#[test]
fn speed_is_learned_as_a_running_average() {
    assert_eq!(learn_speed(None, 100, 10.0, 0.0), Some(10.0));
    let s = learn_speed(Some(10.0), 200, 10.0, 0.0).unwrap();
    assert!((s - (10.0 + SPEED_WEIGHT * 10.0)).abs() < 1e-9);
    // Nothing learned from an empty or instant job.
    assert_eq!(learn_speed(Some(4.0), 0, 10.0, 0.0), Some(4.0));
    assert_eq!(learn_speed(Some(4.0), 10, 0.0, 0.0), Some(4.0));
    // A politeness-bound job only raises the figure.
    assert_eq!(learn_speed(Some(4.0), 10, 10.0, 1.0), Some(4.0));
    assert_eq!(learn_speed(Some(0.5), 10, 10.0, 1.0), Some(1.0));
}

#[test]
fn availability_and_online() {
    assert_eq!(availability(0, 0, 0), 1.0);
    assert_eq!(availability(0, 250, 1000), 0.75);
    assert_eq!(availability(0, 1000, 1000), MIN_AVAILABILITY);
    assert!(is_online(1000, 0, false, 1000 + ONLINE_WINDOW_MS));
    assert!(!is_online(1000, 0, false, 1001 + ONLINE_WINDOW_MS));
    // A busy host reports progress: a shorter silence is enough.
    assert!(is_online(1000, 0, true, 1000 + BUSY_ONLINE_WINDOW_MS));
    assert!(!is_online(1000, 0, true, 1001 + BUSY_ONLINE_WINDOW_MS));
    // A deadline missed after it was last heard from: offline.
    assert!(!is_online(1000, 1001, false, 1002));
}

#[test]
fn slot_schedule_is_first_come_first_served() {
    let now = 100_000;
    let u = |issued_ms, expected_s| HeldUnit {
        issued_ms,
        expected_s,
    };
    // Two slots, three units of 10 s issued now: the third waits for a slot.
    let s = slot_schedule(&[u(now, 10.0), u(now, 10.0), u(now, 10.0)], 2, now);
    assert_eq!(s.ends_s, vec![10.0, 10.0, 20.0]);
    assert_eq!(s.free_at_s, 10.0);
    assert_eq!(s.load_s, 30.0);
    // One unit on two slots: a slot is idle.
    let s = slot_schedule(&[u(now - 4000, 10.0)], 2, now);
    assert_eq!((s.ends_s[0], s.free_at_s, s.load_s), (6.0, 0.0, 6.0));
    // An overdue unit is assumed to need a share of its time more.
    let s = slot_schedule(&[u(now - 40_000, 10.0)], 1, now);
    assert_eq!(s.ends_s[0], 10.0 * OVERDUE_SHARE);
    let s = slot_schedule(&[], 3, now);
    assert_eq!((s.free_at_s, s.load_s), (0.0, 0.0));
}

#[test]
fn deadline_is_bounded() {
    let rule = DeadlineRule {
        slack: 3.0,
        grace_s: 10,
        min_s: 60,
        max_s: 600,
    };
    assert_eq!(deadline_ms(1000, 1.0, &rule), 1000 + 60_000);
    assert_eq!(deadline_ms(1000, 100.0, &rule), 1000 + 310_000);
    assert_eq!(deadline_ms(1000, 1e9, &rule), 1000 + 600_000);
    // A host claiming a speed near zero: an expected time past u64 (found
    // by the grid's property test: the sum overflowed).
    assert_eq!(deadline_ms(1000, 1e300, &rule), 1000 + 600_000);
    assert_eq!(deadline_ms(1000, f64::INFINITY, &rule), 1000 + 600_000);
    assert!(!fits_windows(&[(0, u64::MAX)], 1e300, &rule));
}

#[test]
fn extensions_come_in_the_last_half_while_the_scan_progresses() {
    // Window 100, deadline 100.
    assert_eq!(extended_deadline(100, 100, 50, true), None);
    assert_eq!(extended_deadline(100, 100, 51, true), Some(151));
    // No cap: a scan that goes on is extended again and again.
    assert_eq!(extended_deadline(390, 100, 380, true), Some(480));
    assert_eq!(extended_deadline(10_000, 100, 9_990, true), Some(10_090));
    // A scan that made no page since its last report is not.
    assert_eq!(extended_deadline(100, 100, 99, false), None);
    assert_eq!(extended_deadline(100, 0, 99, true), None);
}

#[test]
fn batch_plan_follows_the_beebot_edg_steps() {
    // Sizes 10, 8, 6, 4, 2, 1 (total 31); speeds 2 and 1: shares 20.67 and 10.33.
    let jobs = [(1, 10.0), (2, 8.0), (3, 6.0), (4, 4.0), (5, 2.0), (6, 1.0)];
    let hosts = [(100, 1.0), (200, 2.0)];
    let mut plan = batch_plan(&jobs, &hosts);
    plan.sort();
    // Fast host 200: 10 + 8 = 18 (6 would overflow 20.67). Slow host 100:
    // next largest 6 + 4 = 10 ≤ 10.33 (2 would overflow). The rest (2, 1)
    // smallest first in reverse host order: 1 → slow, 2 → fast.
    assert_eq!(
        plan,
        vec![(1, 200), (2, 200), (3, 100), (4, 100), (5, 200), (6, 100)]
    );
    assert!(batch_plan(&jobs, &[]).is_empty());
    // Every job is planned exactly once.
    let many: Vec<(u64, f64)> = (0..50).map(|i| (i, (i % 7 + 1) as f64)).collect();
    let plan = batch_plan(&many, &[(1, 3.0), (2, 1.0), (3, 0.5)]);
    let mut ids: Vec<u64> = plan.iter().map(|p| p.0).collect();
    ids.sort();
    assert_eq!(ids, (0..50).collect::<Vec<_>>());
}

#[test]
fn batch_hosts_pull_their_own_then_released_batches() {
    let mut queue = q(&[(1, 10.0), (2, 20.0), (3, 5.0), (4, 7.0)]);
    queue[0].assigned = Some(1);
    queue[1].assigned = Some(2);
    queue[2].assigned = Some(1);
    queue[3].assigned = None;
    let mut hosts = [host(1, 1.0), host(2, 1.0)];
    hosts[0].last_seen_ms = 1000;
    hosts[1].last_seen_ms = 0;
    let c = ctx(&queue, &hosts, 0);
    // Own batch largest first, then what is free; not host 2's batch (grace not over).
    assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 4]);
    // After the grace period host 2 (silent since 0) loses its batch.
    let mut c = ctx(&queue, &hosts, 0);
    c.now_ms = BATCH_GRACE_MS + 1;
    assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 2, 4]);
    // A host heard from recently keeps its batch.
    hosts[1].last_seen_ms = BATCH_GRACE_MS;
    let mut c = ctx(&queue, &hosts, 0);
    c.now_ms = BATCH_GRACE_MS + 1;
    assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 4]);
}

#[test]
fn water_level_excludes_hosts_above_the_line() {
    // Loads 0, 0, 100 s; rates 1 page/s each; 60 pages: level 30, third host above it.
    let mut b = vec![(100.0, 1.0), (0.0, 1.0), (0.0, 1.0)];
    assert_eq!(water_level(&mut b, 60.0), 30.0);
    // 300 pages: all three under the line: (300 + 100) / 3.
    let mut b = vec![(100.0, 1.0), (0.0, 1.0), (0.0, 1.0)];
    assert!((water_level(&mut b, 300.0) - 400.0 / 3.0).abs() < 1e-9);
    assert_eq!(water_level(&mut [], 10.0), 0.0);
}

#[test]
fn level_fills_empty_hosts_first_and_evenly() {
    let queue = q(&[
        (1, 10.0),
        (2, 10.0),
        (3, 10.0),
        (4, 10.0),
        (5, 10.0),
        (6, 10.0),
    ]);
    let mut hosts = [host(1, 1.0), host(2, 1.0), host(3, 1.0)];
    hosts[2].busy = 1;
    hosts[2].load_s = 100.0;
    hosts[2].free_at_s = 100.0;
    // 60 pages over two empty hosts: level 30 s → 30 pages each = three jobs.
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Level.choose(&c, &ask(0, 10)).jobs, vec![1, 2, 3]);
    // The loaded host is above the line: nothing.
    let c = ctx(&queue, &hosts, 2);
    assert!(Level.choose(&c, &ask(0, 10)).jobs.is_empty());
}

#[test]
fn pack_fits_memory_and_bandwidth_first_fit_and_an_empty_host_takes_one_job() {
    use resources::{scan_kbps, scan_memory_mb};
    // Sites of 5,000, 100 and 100 pages, at delay 1 s.
    let queue = q(&[(1, 5000.0), (2, 100.0), (3, 100.0)]);
    let mut hosts = [host(1, 5.0), host(2, 5.0)];
    hosts[0].slots = 4;
    let small = scan_memory_mb(100.0);
    let large = scan_memory_mb(5000.0);
    // Memory for two small scans, less than the large one needs.
    assert!(large > 2.0 * small);
    hosts[0].capacity = Capacity {
        memory_mb: 2.0 * small,
        kbps: f64::INFINITY,
    };
    let mut c = ctx(&queue, &hosts, 0);
    c.delay_s = 1.0;
    // Empty: the first job whatever it needs; nothing else fits beside it.
    assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1]);
    // Holding a small scan: the large job is passed over for the other small one.
    hosts[0].busy = 1;
    hosts[0].demand = Demand::of_scan(100.0, 1.0);
    let mut c = ctx(&queue, &hosts, 0);
    c.delay_s = 1.0;
    assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![2]);
    // Bandwidth for two scans at the delay: one more beside the one held.
    hosts[0].capacity = Capacity {
        memory_mb: f64::INFINITY,
        kbps: 2.0 * scan_kbps(1.0),
    };
    let mut c = ctx(&queue, &hosts, 0);
    c.delay_s = 1.0;
    assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1]);
    // The idle host is woken: the busy one can hold one of the three.
    let mut c = ctx(&queue, &hosts, 1);
    c.delay_s = 1.0;
    assert_eq!(Pack.choose(&c, &ask(0, 2)).jobs, vec![1, 2]);
    // At delay 0 a scan draws at the host's own pace: five pages a second.
    let mut c = ctx(&queue, &hosts, 0);
    c.delay_s = 0.0;
    assert!(scan_kbps(0.2) > 2.0 * scan_kbps(1.0));
    assert!(Pack.choose(&c, &ask(0, 8)).jobs.is_empty());
}

#[test]
fn pack_fills_busy_hosts_up_to_their_capacity_before_waking_idle_ones() {
    // A slot holds a scanning unit and a buffer, up to the grid's cap.
    assert_eq!(host_capacity(2), 8);
    assert_eq!(
        host_capacity(beebot_shared::limits::MAX_SLOTS),
        beebot_shared::limits::MAX_UNITS_HELD_PER_HOST as u64
    );
    let queue = q(&[(1, 1.0), (2, 1.0), (3, 1.0)]);
    let mut hosts = [host(1, 1.0), host(2, 1.0)];
    hosts[0].busy = 1;
    // The busy host (one slot) could hold three more: it takes the queue,
    // the idle one nothing.
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1, 2, 3]);
    let c = ctx(&queue, &hosts, 1);
    assert!(Pack.choose(&c, &ask(0, 8)).jobs.is_empty());
    // Only two more fit on the busy host: the idle host is woken, and takes
    // what it asks for up to its own capacity.
    hosts[0].busy = 2;
    let c = ctx(&queue, &hosts, 1);
    assert_eq!(Pack.choose(&c, &ask(0, 2)).jobs, vec![1, 2]);
    // A full busy host gets nothing more.
    hosts[0].busy = 4;
    let c = ctx(&queue, &hosts, 0);
    assert!(Pack.choose(&c, &ask(0, 8)).jobs.is_empty());
    // A busy host that went silent holds nothing for the queue.
    hosts[0].busy = 1;
    hosts[0].online = false;
    let c = ctx(&queue, &hosts, 1);
    assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1, 2, 3]);
}

#[test]
fn adaptive_gives_big_jobs_to_fast_hosts_and_small_ones_to_slow_hosts() {
    let queue = q(&[(1, 2.0), (2, 1000.0), (3, 20.0), (4, 500.0)]);
    // Host 1 does 10 pages/s, host 2 one page/s.
    let hosts = [host(1, 10.0), host(2, 1.0)];
    // The fast host takes the largest job.
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
    // The slow host would take 1000 s for it (the fast one 105 s): it takes
    // the largest job it finishes no later than the fast host would (the
    // fast one would start it after a retry interval: 2 s against 2.2 s).
    let c = ctx(&queue, &hosts, 1);
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![1]);
    // The fast host, busy for 2000 s, leaves the big one... to nobody faster:
    // the slow host now wins the 500-page job.
    let mut hosts2 = hosts.clone();
    hosts2[0].busy = 1;
    hosts2[0].free_at_s = 2000.0;
    hosts2[0].load_s = 2000.0;
    let c = ctx(&queue, &hosts2, 1);
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
    // An offline fast host does not count.
    let mut hosts3 = hosts.clone();
    hosts3[0].online = false;
    let c = ctx(&queue, &hosts3, 1);
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
}

#[test]
fn adaptive_gives_an_idle_slow_host_a_job_that_ends_before_the_queue_drains() {
    // 40 jobs of 20 pages; host 1 does 10 pages/s. Host 2 does one page/s
    // with no delay, or a page in 4 s under a 1 s delay (host 1 then pays
    // the delay: 1 s a page).
    let jobs: Vec<(u64, f64)> = (1..=40).map(|id| (id, 20.0)).collect();
    for (delay_s, slow_pps) in [(0.0, 1.0), (1.0, 0.25)] {
        let hosts = [host(1, 10.0), host(2, slow_pps)];
        let choose = |queue: &[JobView], hosts: &[HostView], want: u64| {
            let mut c = ctx(queue, hosts, 1);
            c.delay_s = delay_s;
            Adaptive.choose(&c, &ask(want, 1)).jobs
        };
        // Alone, each job ends sooner on the fast host (2 s after its next
        // ask, against 20 s or 80 s); but the queue needs 800 / 11 = 73 s
        // (800 / 1.25 = 640 s) over both hosts, so the slow host's job
        // costs the round nothing.
        let queue = q(&jobs);
        assert_eq!(choose(&queue, &hosts, 0), vec![1], "delay {delay_s}");
        // Its buffer goes only to jobs it wins: with its slot busy, nothing.
        let mut busy = hosts.clone();
        busy[1].busy = 1;
        busy[1].free_at_s = 5.0;
        busy[1].load_s = 5.0;
        assert!(choose(&queue, &busy, 60).is_empty(), "delay {delay_s}");
        // Two jobs left drain sooner than the slow host ends one: they
        // wait for the fast host.
        assert!(
            choose(&q(&jobs[..2]), &hosts, 0).is_empty(),
            "delay {delay_s}"
        );
        // A job of a site never scanned may be as large as the cap: not one.
        let mut unknown = q(&jobs);
        for j in &mut unknown {
            j.size_known = false;
        }
        assert!(choose(&unknown, &hosts, 0).is_empty(), "delay {delay_s}");
    }
}

#[test]
fn adaptive_places_a_site_never_scanned_at_the_page_cap() {
    // Job 3 was never scanned: 50 pages expected, but it may be as large
    // as the page cap (1,000 here), twice the largest known job.
    let mut queue = q(&[(1, 500.0), (2, 100.0), (3, 50.0)]);
    queue[2].size_known = false;
    let mut hosts = [host(1, 10.0), host(2, 1.0)];
    hosts[0].slots = 2;
    // The fast host takes the unknown one first, then the largest, not job 2.
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Adaptive.choose(&c, &ask(10_000, 2)).jobs, vec![3, 1]);
    // The slow host, which wins only small jobs, does not get it.
    let c = ctx(&queue, &hosts, 1);
    assert!(!Adaptive.choose(&c, &ask(10_000, 1)).jobs.contains(&3));
    // Known, the same job would come last.
    queue[2].size_known = true;
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Adaptive.choose(&c, &ask(10_000, 2)).jobs, vec![1, 2]);
}

#[test]
fn adaptive_sizes_the_reply_to_the_asked_seconds() {
    let queue = q(&[(1, 10.0), (2, 10.0), (3, 10.0), (4, 10.0), (5, 10.0)]);
    let mut hosts = [host(1, 1.0)];
    hosts[0].slots = 8;
    let c = ctx(&queue, &hosts, 0);
    // Alone, 10 s a job: 25 s asked → three jobs; nothing asked → one.
    assert_eq!(Adaptive.choose(&c, &ask(25, 8)).jobs.len(), 3);
    assert_eq!(Adaptive.choose(&c, &ask(0, 8)).jobs.len(), 1);
    assert_eq!(Adaptive.choose(&c, &ask(1000, 2)).jobs.len(), 2);
}

/// A running job of one copy on another host than the asker.
fn run(job_id: u64, pages: f64, finish_s: f64) -> RunningView {
    RunningView {
        job_id,
        pages,
        holder: None,
        copies: 1,
        on_asker: false,
        failed_here: false,
        finish_s,
        pace_s: 0.0,
    }
}

#[test]
fn adaptive_gives_a_job_that_failed_elsewhere_to_the_next_host_that_asks() {
    // A small job the faster host failed: the grid does not give it to
    // that host again while the slower one is online, so the slower one
    // must not keep deferring to it.
    let mut queue = q(&[(1, 10.0)]);
    let hosts = [host(1, 1.0), host(2, 20.0)];
    let c = ctx(&queue, &hosts, 0);
    assert!(
        Adaptive.choose(&c, &ask(3600, 2)).jobs.is_empty(),
        "the faster host would finish it sooner: the slower one waits"
    );
    // Failed on a host that is gone: the faster host still gets it.
    queue[0].barred_somewhere = true;
    queue[0].barred = vec![3];
    let c = ctx(&queue, &hosts, 0);
    assert!(Adaptive.choose(&c, &ask(3600, 2)).jobs.is_empty());
    // Failed on the faster host: the slower one takes it.
    queue[0].barred = vec![2];
    let c = ctx(&queue, &hosts, 0);
    assert_eq!(Adaptive.choose(&c, &ask(3600, 2)).jobs, vec![1]);
    // The host that failed it still takes it only when nothing else is left.
    queue[0].failed_here = true;
    let more = q(&[(1, 10.0), (2, 5.0)]);
    let mut both = more.clone();
    both[0].failed_here = true;
    both[0].barred_somewhere = true;
    both[0].barred = vec![2];
    let c = ctx(&both, &hosts, 1);
    assert_eq!(Adaptive.choose(&c, &ask(3600, 1)).jobs, vec![2]);
}

#[test]
fn adaptive_replicates_the_job_expected_to_finish_last() {
    let hosts = [host(1, 10.0), host(2, 1.0)];
    let list = vec![run(1, 100.0, 50.0), run(2, 100.0, 90.0), run(3, 100.0, 5.0)];
    let running = RunningList::new(list.clone());
    let mut c = ctx(&[], &hosts, 0);
    c.running = &running;
    // The fast host would do 100 pages in 10 s: copy job 2 (ends in 90 s).
    assert_eq!(
        Adaptive.choose(&c, &ask(0, 1)),
        Decision {
            jobs: vec![],
            replicas: vec![2]
        }
    );
    // With two free slots, the next latest too.
    assert_eq!(Adaptive.choose(&c, &ask(0, 2)).replicas, vec![2]);
    let mut two = hosts.clone();
    two[0].slots = 2;
    let mut c2 = ctx(&[], &two, 0);
    c2.running = &running;
    assert_eq!(Adaptive.choose(&c2, &ask(0, 2)).replicas, vec![2, 1]);
    // The slow host would not finish sooner: no copy.
    let mut c = ctx(&[], &hosts, 1);
    c.running = &running;
    assert!(Adaptive.choose(&c, &ask(0, 1)).replicas.is_empty());
    // Never a third copy, never a copy on a holder or on a host that failed it.
    let mut full = list.clone();
    full[1].copies = MAX_COPIES;
    full[0].on_asker = true;
    let mut c = ctx(&[], &hosts, 0);
    let full = RunningList::new(full);
    c.running = &full;
    assert!(Adaptive.choose(&c, &ask(0, 1)).replicas.is_empty());
    // Nothing is copied while the queue keeps the hosts busy past every
    // running job (2000 pages at 1 page/s without the asker's slot).
    let queue = q(&[(9, 2000.0)]);
    let mut c = ctx(&queue, &hosts, 0);
    c.running = &running;
    assert_eq!(
        Adaptive.choose(&c, &ask(0, 1)),
        Decision {
            jobs: vec![9],
            replicas: vec![]
        }
    );
}

/// A copy of a running job is a hand-over (its scan moves; it is not
/// raced), so while jobs are queued adaptive asks for one only for a job
/// on the critical path whose holder is clearly slower than the asker.
#[test]
fn adaptive_hands_over_the_critical_job_only_from_a_slower_host() {
    // Host 1 does one page a second, hosts 2 and 4 ten, host 3 one. Host 1
    // runs job 1 (100 pages left, 100 s); host 2 asks.
    let mut hosts = [host(1, 1.0), host(2, 10.0), host(3, 1.0), host(4, 10.0)];
    hosts[0].busy = 1;
    hosts[0].free_at_s = 100.0;
    hosts[0].load_s = 100.0;
    let on = |holder: u64| {
        RunningList::new(vec![RunningView {
            holder: Some(holder),
            ..run(1, 100.0, 100.0)
        }])
    };
    let slow = on(1);
    let with = |queue: &[JobView], hosts: &[HostView], asker: usize, running: &RunningList| {
        let mut c = ctx(queue, hosts, asker);
        c.running = running;
        Adaptive.choose(&c, &ask(0, 1))
    };
    // Five small jobs: without host 2's slot the rest drain in
    // (50 + 100) / 12 = 12.5 s, job 1 ends in 100 s: it sets the makespan,
    // and host 2 would scan what is left in 10 s (15 s for the hand-over):
    // a hand-over, before the queue.
    let small = q(&[(11, 10.0), (12, 10.0), (13, 10.0), (14, 10.0), (15, 10.0)]);
    assert_eq!(
        with(&small, &hosts, 1, &slow),
        Decision {
            jobs: vec![],
            replicas: vec![1]
        }
    );
    // The same job on a host as fast as the asker: moving it gains
    // nothing, so it stays (no scan hops from host to host).
    let mut even = hosts.clone();
    even[0].pages_per_s = Some(10.0);
    let d = with(&small, &even, 1, &on(1));
    assert!(d.replicas.is_empty() && !d.jobs.is_empty(), "{d:?}");
    // A holder never measured: its scan's pace (100 pages in 100 s) is all
    // there is, and host 2 would do them in 10 s.
    let mut unmeasured = even.clone();
    unmeasured[0].pages_per_s = None;
    assert_eq!(with(&small, &unmeasured, 1, &on(1)).replicas, vec![1]);
    // No slack: 2000 queued pages keep the hosts busy for 160 s.
    let busy: Vec<(u64, f64)> = (21..41).map(|id| (id, 100.0)).collect();
    let busy = q(&busy);
    let d = with(&busy, &hosts, 1, &slow);
    assert!(d.replicas.is_empty() && !d.jobs.is_empty(), "{d:?}");
    // A queued job that could last as long (900 pages: 90 s on a fast
    // host, within the reach of 100 s) is placed first.
    let long = q(&[(11, 10.0), (31, 900.0), (12, 10.0)]);
    assert_eq!(
        with(&long, &hosts, 1, &slow),
        Decision {
            jobs: vec![31],
            replicas: vec![]
        }
    );
    // The other slow host would take as long as the holder: no hand-over
    // (and the small jobs are the fast hosts' too).
    assert_eq!(with(&small, &hosts, 2, &slow), Decision::default());
    // A job well short of the longest one does not set the makespan: job 2
    // (300 s left, already two copies) is the critical one, not job 1.
    let mut running2 = vec![RunningView {
        holder: Some(1),
        ..run(1, 100.0, 100.0)
    }];
    running2.push(RunningView {
        copies: MAX_COPIES,
        ..run(2, 3000.0, 300.0)
    });
    let mut c = ctx(&small, &hosts, 1);
    let running2 = RunningList::new(running2);
    c.running = &running2;
    let d = Adaptive.choose(&c, &ask(0, 1));
    assert!(d.replicas.is_empty() && d.jobs.len() == 1, "{d:?}");
}

/// The queue's indexes answer what a walk over the queue would: the
/// largest job under a size and the smallest (the asker's failures last,
/// ties in list order), the largest scanned between two sizes, the first
/// never scanned, list order and the jobs failed somewhere, skipping
/// hidden and taken jobs and the results under check the asker may not
/// see (all, none or some), after inserts and removals in any order.
#[test]
fn the_queue_index_answers_as_a_walk_over_the_queue() {
    use proptest::prelude::*;
    let job = (
        1u64..60,
        0u32..6,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    );
    proptest!(|(jobs in proptest::collection::vec(job, 0..40),
                gone in proptest::collection::vec(1u64..60, 0..10),
                failed in proptest::collection::btree_set(1u64..60, 0..8),
                hidden in proptest::collection::btree_set(1u64..60, 0..8),
                taken in proptest::collection::vec(1u64..60, 0..4),
                mode in 0u8..3,
                some in proptest::collection::btree_set(1u64..60, 0..20),
                most in 0u32..7,
                lo in 0u32..7)| {
        let mut q = JobQueue::default();
        // What the queue holds, by id (list order: `order` is the id).
        let mut truth = std::collections::BTreeMap::new();
        for (id, pages, known, flagged, checked, barred_somewhere) in &jobs {
            let v = JobView {
                job_id: *id,
                order: *id as u32,
                pages: f64::from(*pages),
                failed_here: *flagged,
                barred_somewhere: *barred_somewhere,
                barred: if *barred_somewhere { vec![99] } else { Vec::new() },
                size_known: *known,
                assigned: None,
                under_check: *checked,
                // Three pace classes, by id.
                pace_s: class_pace((*id % 3) as u8),
            };
            truth.insert(*id, v.clone());
            q.insert(v);
        }
        for id in &gone {
            prop_assert_eq!(q.remove(*id), truth.remove(id));
        }
        q.check();
        let hide = |v: &JobView| hidden.contains(&v.job_id);
        let only = q.checks_among(some.iter().copied());
        let checks = match mode {
            0 => Checks::All,
            1 => Checks::None,
            _ => Checks::Only(&only),
        };
        let may_see = |v: &JobView| !v.under_check || match mode {
            0 => true,
            1 => false,
            _ => some.contains(&v.job_id),
        };
        let view = Queue::for_asker(&q, Some(&failed), &hide, checks);
        // The walk: every visible job, failures marked.
        let all: Vec<JobView> = truth
            .values()
            .filter(|v| !hidden.contains(&v.job_id) && may_see(v))
            .map(|v| JobView { failed_here: v.failed_here || failed.contains(&v.job_id), ..v.clone() })
            .collect();
        let ids = |vs: Vec<JobView>| vs.into_iter().map(|v| v.job_id).collect::<Vec<_>>();
        prop_assert_eq!(ids(view.iter().collect()), ids(all.clone()));
        let somewhere: Vec<JobView> = all.iter().filter(|v| v.barred_somewhere).cloned().collect();
        prop_assert_eq!(ids(view.barred_somewhere().collect()), ids(somewhere));
        let largest_pages = all.iter().map(|v| v.pages).fold(0.0, f64::max);
        prop_assert_eq!(view.largest_pages(), largest_pages);
        let seen: Vec<&JobView> = all.iter().filter(|v| !taken.contains(&v.job_id)).collect();
        let most = f64::from(most);
        let key = |v: &JobView| (v.failed_here, std::cmp::Reverse((v.pages * 10.0) as i64), v.order);
        let largest = seen.iter().filter(|v| v.pages <= most).min_by_key(|v| key(v)).map(|v| v.job_id);
        prop_assert_eq!(view.largest(&taken, most).map(|v| v.job_id), largest);
        let small = |v: &JobView| (v.failed_here, (v.pages * 10.0) as i64, v.order);
        let smallest = seen.iter().min_by_key(|v| small(v)).map(|v| v.job_id);
        prop_assert_eq!(view.smallest(&taken).map(|v| v.job_id), smallest);
        let mine: Vec<&&JobView> = seen.iter().filter(|v| !v.failed_here).collect();
        let lo = f64::from(lo);
        // The classes of the parts it looks at (hidden jobs included).
        let mut classes: Vec<u8> = truth
            .values()
            .filter(|v| v.size_known && may_see(v))
            .map(|v| pace_class(v.pace_s))
            .collect();
        classes.sort_unstable();
        classes.dedup();
        prop_assert_eq!(view.known_classes(), classes);
        for class in 0..3 {
            let known = mine
                .iter()
                .filter(|v| v.size_known && pace_class(v.pace_s) == class)
                .filter(|v| v.pages >= lo && v.pages <= most)
                .min_by_key(|v| key(v))
                .map(|v| v.job_id);
            let got = view.largest_known_between(class, (lo, most), &taken);
            prop_assert_eq!(got.map(|v| v.job_id), known);
        }
        let unknown = mine.iter().find(|v| !v.size_known).map(|v| v.job_id);
        prop_assert_eq!(view.first_unknown(&taken).map(|v| v.job_id), unknown);
        prop_assert_eq!(ids(q.iter().cloned().collect()), truth.keys().copied().collect::<Vec<_>>());
        prop_assert_eq!(q.len(), truth.len());
    });
}

/// A site that adds to each page (its response times) costs a slow host
/// more than a fast one, even where the delay hides their difference:
/// asked first by a slow host, `adaptive` keeps the slow site for the
/// fast host and gives the slow host the site that costs both the same.
#[test]
fn adaptive_keeps_a_slow_site_for_a_fast_host() {
    let slow_site = class_pace(pace_class(0.6));
    assert!(slow_site > 0.4 && slow_site < 0.8, "{slow_site}");
    let mut queue = q(&[(1, 1000.0), (2, 1000.0)]);
    queue[0].pace_s = slow_site;
    // 1 page/s and 5 pages/s: both at the delay on a site that adds nothing.
    let hosts = [host(1, 1.0), host(2, 5.0)];
    let mut c = ctx(&queue, &hosts, 0);
    c.delay_s = 1.0;
    assert_eq!(hosts[0].cost(1.0), hosts[1].cost(1.0));
    assert!(hosts[0].cost_at(1.0, slow_site) > 1.3 * hosts[1].cost_at(1.0, slow_site));
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
    // The fast host wins both and takes the one longer on it first.
    let mut c = ctx(&queue, &hosts, 1);
    c.delay_s = 1.0;
    assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![1]);
}

/// A site's pace is the mean response time that turns the host's own
/// time and the delay back into the pace its scan showed, and its class
/// stands for it within a factor of √2.
#[test]
fn a_sites_pace_is_what_it_adds_beyond_the_delay_and_the_host() {
    // No slower than the delay or the host: nothing of the site's shows.
    assert_eq!(site_pace_s(1.0, 1.0, 0.2), 0.0);
    assert_eq!(site_pace_s(0.9, 0.0, 1.2), 0.0);
    // Without a delay, or a host slower than it, the rest is the site's.
    assert!((site_pace_s(1.6, 0.0, 1.2) - 0.4).abs() < 1e-12);
    assert!((site_pace_s(1.6, 0.5, 1.2) - 0.4).abs() < 1e-12);
    // Under the delay only the responses that outlast it show, so the
    // mean behind them is more than what the pace shows beyond the delay.
    let pace = site_pace_s(1.6, 1.0, 0.2);
    assert!(pace > 0.6 && pace < 1.4, "{pace}");
    for (page_s, delay_s, own_s) in [(1.6, 1.0, 0.2), (1.05, 1.0, 0.0), (3.0, 2.0, 1.0)] {
        let pace = site_pace_s(page_s, delay_s, own_s);
        let back = seconds_per_page_at(Some(1.0 / own_s.max(1e-6)), delay_s, pace);
        assert!(
            (back - page_s).abs() < 1e-6,
            "{page_s} {delay_s} {own_s}: {back}"
        );
    }
    assert_eq!(site_pace_s(f64::NAN, 1.0, 0.0), 0.0);
    assert_eq!(site_pace_s(1e9, 0.0, 0.0), MAX_SITE_PACE_S);
    assert_eq!(pace_class(0.0), 0);
    assert_eq!(pace_class(PACE_STEP_S * 0.99), 0);
    assert_eq!(pace_class(f64::NAN), 0);
    assert_eq!(pace_class(1e9), PACE_CLASSES - 1);
    for pace in [0.1, 0.15, 0.3, 0.6, 1.0, 2.5, 5.0] {
        let v = class_pace(pace_class(pace));
        assert!(
            v / pace <= std::f64::consts::SQRT_2 + 1e-9
                && pace / v <= std::f64::consts::SQRT_2 + 1e-9,
            "{pace} -> {v}"
        );
    }
    // The cost on a host: its own time plus the site's, or the delay,
    // whichever is longer, page by page: a host under the delay pays the
    // responses that outlast what the delay leaves (0.6·e^(-0.8/0.6)).
    assert_eq!(seconds_per_page_at(Some(5.0), 1.0, 0.0), 1.0);
    let fast = seconds_per_page_at(Some(5.0), 1.0, 0.6);
    assert!(
        (fast - (1.0 + 0.6 * (-0.8f64 / 0.6).exp())).abs() < 1e-12,
        "{fast}"
    );
    assert!((seconds_per_page_at(Some(1.0), 1.0, 0.6) - 1.6).abs() < 1e-12);
}
