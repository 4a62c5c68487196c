//! Tests of work requests: units, caps, windows, retries and hand-overs.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::limits::{MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_REPLY};
use beebot_shared::proto::ABORT_HAND_OVER;
use beebot_shared::scope::Scope;
use beebot_shared::sign;

use crate::scheduler;
use crate::validate;

#[test]
fn request_work_gives_signed_units_bound_to_the_host() {
    let (mut fx, round) = Fx::with_round(5, 3);
    let a = fx.host();
    let now = T0 + 1000;
    let (units, reply) = fx.ask(a, 3, &[], now);
    assert_eq!(units.len(), 3);
    assert_eq!(reply.retry_after_s, None);
    assert!(reply.rounds_open);
    let p = params(3);
    let mut jobs = Vec::new();
    // Two slots: the third unit waits for one (10 s), and its deadline counts the wait.
    let waits_ms = [0, 0, 10_000];
    for (u, wait_ms) in units.iter().zip(waits_ms) {
        assert_eq!(u.host_id, a);
        assert_eq!(u.round_id, round);
        assert_eq!(u.issued_ms, now);
        let span = u.deadline_ms - u.issued_ms;
        assert!(span >= p.deadline_min_s * 1000 && span <= p.deadline_max_s * 1000);
        assert_eq!(span, WINDOW_MS + 3 * wait_ms);
        assert_eq!(u.user_agent, settings().user_agent);
        assert_eq!(u.scope, Scope::Host);
        assert_eq!(u.limits.max_pages, p.max_pages);
        assert_eq!(u.limits.max_depth, p.max_depth);
        assert_eq!(u.limits.max_seconds, p.max_seconds);
        assert_eq!(u.seed_url, format!("http://{}/", u.site));
        let job = fx.job(u.job_id);
        assert_eq!(job.site, u.site);
        assert_eq!(job.state, JobState::Running);
        let at = fx.attempt(u.unit_id);
        assert_eq!((at.host_id, at.deadline_ms), (a, u.deadline_ms));
        assert_eq!(at.state, AttemptState::Running);
        jobs.push(u.job_id);
    }
    jobs.sort();
    jobs.dedup();
    assert_eq!(jobs.len(), 3, "three distinct jobs");

    // Signed by the project key and by nothing else.
    let other = sign::generate_key().verifying_key();
    assert!(sign::verify_unit(&other, &reply.units[0]).is_err());

    // No free slot, no unit (and no retry hint needed beyond the open round).
    let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
    let (none, r) = fx.ask(a, 0, &held, now);
    assert!(none.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));

    // The rest of the queue, then nothing.
    let (more, _) = fx.ask(a, 10, &held, now + 1);
    assert_eq!(more.len(), 2);
    assert!(more.iter().all(|u| !jobs.contains(&u.job_id)));
    let held: Vec<u64> = units.iter().chain(&more).map(|u| u.unit_id).collect();
    let (none, r) = fx.ask(a, 10, &held, now + 2);
    assert!(none.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
    assert!(r.rounds_open);
    let st = fx.grid.status();
    assert_eq!((st.jobs_queued, st.jobs_running), (0, 5));
}

#[test]
fn a_reply_holds_at_most_the_unit_cap() {
    let (mut fx, _) = Fx::with_round(MAX_UNITS_PER_REPLY + 6, 3);
    let a = fx.host();
    let slots = beebot_shared::limits::MAX_SLOTS;
    fx.grid.benchmark(a, 5.0, 100.0, slots, T0).unwrap();
    fx.grid.set_trusted(a).unwrap();
    assert!(held_cap(slots) > MAX_UNITS_PER_REPLY);
    let (units, _) = fx.ask(a, u32::MAX, &[], T0);
    assert_eq!(units.len(), MAX_UNITS_PER_REPLY);
}

/// Units of `host` running now, across rounds.
fn running_units_of(fx: &Fx, host: u64) -> usize {
    fx.grid
        .jobs
        .values()
        .flat_map(|j| j.running_attempts())
        .filter(|a| a.host_id == host)
        .count()
}

/// Ask with `free_slots` 64 over and over, holding everything and
/// returning nothing; returns the units held in the end.
fn hoard(fx: &mut Fx, host: u64, asks: u64) -> Vec<u64> {
    let mut held: Vec<u64> = Vec::new();
    for i in 0..asks {
        let (units, _) = fx.ask(host, 64, &held, T0 + i * 1000);
        held.extend(units.iter().map(|u| u.unit_id));
    }
    held
}

#[test]
fn a_host_asking_for_every_slot_over_and_over_holds_at_most_its_cap() {
    let (mut fx, round) = Fx::with_round(3 * MAX_UNITS_HELD_PER_HOST, 3);
    // Without a benchmark: the default slots, a buffer each.
    let a = fx.host();
    let held = hoard(&mut fx, a, 10);
    let cap = held_cap(scheduler::DEFAULT_HOST_SLOTS);
    assert_eq!(held.len(), cap);
    assert_eq!(running_units_of(&fx, a), cap);
    // A second round does not raise it: the cap is across rounds.
    let second = fx.grid.start_round(params(3), T0 + 20_000).unwrap();
    assert_ne!(second, round);
    let (more, r) = fx.ask(a, 64, &held, T0 + 21_000);
    assert!(more.is_empty(), "nothing beyond the cap");
    assert!(r.rounds_open);
    // Claiming every slot there is (and more), not trusted yet: a few
    // slots' worth.
    let c = fx.host();
    fx.grid.benchmark(c, 5.0, 100.0, u32::MAX, T0).unwrap();
    let held = hoard(&mut fx, c, 10);
    assert_eq!(held.len(), held_cap(validate::UNTRUSTED_MAX_SLOTS));
    // Trusted: the named limit holds.
    let b = fx.host();
    fx.grid.benchmark(b, 5.0, 100.0, u32::MAX, T0).unwrap();
    fx.grid.set_trusted(b).unwrap();
    let held = hoard(&mut fx, b, 10);
    assert_eq!(held.len(), MAX_UNITS_HELD_PER_HOST);
    assert_eq!(running_units_of(&fx, b), MAX_UNITS_HELD_PER_HOST);
    // Returning one makes room for one.
    fx.grid
        .fail(b, held[0], "gave it back", T0 + 31_000)
        .unwrap();
    let (units, _) = fx.ask(b, 64, &held[1..], T0 + 32_000);
    assert_eq!(units.len(), 1);
    assert_eq!(running_units_of(&fx, b), MAX_UNITS_HELD_PER_HOST);
}

#[test]
fn a_unit_back_from_sleep_does_not_run_past_the_hosts_cap() {
    let (mut fx, _) = Fx::with_round(3 * MAX_UNITS_HELD_PER_HOST, 3);
    let a = fx.host();
    let cap = held_cap(scheduler::DEFAULT_HOST_SLOTS);
    let old = hoard(&mut fx, a, 1);
    assert_eq!(old.len(), cap);
    // All expire; the host takes a full load again, then reports on an old one.
    let late = T0 + 10 * HOUR_MS;
    fx.grid.tick(late).unwrap();
    assert_eq!(running_units_of(&fx, a), 0);
    let (new, _) = fx.ask(a, 64, &old, late + 1);
    assert_eq!(new.len(), cap);
    let held: Vec<u64> = old
        .iter()
        .chain(new.iter().map(|u| &u.unit_id))
        .copied()
        .collect();
    let o = fx.grid.progress(a, old[0], 1, 1, late + 2).unwrap();
    assert!(matches!(o, ProgressOutcome::Abort(why) if why.contains("slots")));
    assert_eq!(running_units_of(&fx, a), cap);
    // Below the cap it runs again.
    fx.grid
        .fail(a, new[0].unit_id, "gave it back", late + 3)
        .unwrap();
    let o = fx.grid.progress(a, old[0], 1, 1, late + 4).unwrap();
    assert!(matches!(o, ProgressOutcome::Extend(_)), "{o:?}");
    assert_eq!(running_units_of(&fx, a), cap);
    let (none, _) = fx.ask(a, 64, &held, late + 5);
    assert!(none.is_empty());
}

#[test]
fn size_aware_policy_sizes_the_reply_to_the_asked_seconds() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(5), T0).unwrap();
    let mut p = params(3);
    p.policy = "size-aware".into();
    fx.grid.start_round(p, T0).unwrap();
    let a = fx.host();
    // Each job is expected to take 10 s on this host: 25 s asked → 3 jobs.
    let reply = fx
        .grid
        .request_work(
            a,
            &WorkRequest {
                want_seconds: 25,
                free_slots: 5,
                units_held: vec![],
                open_windows: None,
            },
            T0,
        )
        .unwrap();
    assert_eq!(reply.units.len(), 3);
    // Zero seconds asked with a free slot still gets one job.
    let reply = fx
        .grid
        .request_work(
            a,
            &WorkRequest {
                want_seconds: 0,
                free_slots: 5,
                units_held: vec![],
                open_windows: None,
            },
            T0,
        )
        .unwrap();
    assert_eq!(reply.units.len(), 1);
}

#[test]
fn deadlines_stay_within_the_round_bounds() {
    let (mut fx, _) = Fx::with_round(3, 3);
    let slow = fx.host();
    let fast = fx.host();
    let plain = fx.host();
    fx.grid.benchmark(slow, 0.01, 1.0, 4, T0).unwrap();
    fx.grid.benchmark(fast, 1000.0, 1000.0, 4, T0).unwrap();
    let now = T0 + 10;
    // 50 pages at 0.01 pages/s = 5000 s × 3 + 10 → capped at 600 s.
    assert_eq!(fx.one(slow, &[], now).deadline_ms, now + 600_000);
    // 0.05 s × 3 + 10 = 10 s → raised to the 30 s minimum.
    assert_eq!(fx.one(fast, &[], now).deadline_ms, now + 30_000);
    assert_eq!(fx.one(plain, &[], now).deadline_ms, now + WINDOW_MS);
    assert!(matches!(
        fx.grid.benchmark(fast, f64::NAN, 1.0, 4, T0),
        Err(GridError::Invalid(_))
    ));
}

#[test]
fn no_round_means_idle_retry() {
    let mut fx = Fx::new();
    let a = fx.host();
    let (units, r) = fx.ask(a, 4, &[], T0);
    assert!(units.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
    assert!(!r.rounds_open);
    assert!(matches!(
        fx.grid.start_round(params(3), T0),
        Err(GridError::Invalid(_))
    ));
    assert!(matches!(
        fx.grid.request_work(
            a + 1000,
            &WorkRequest {
                want_seconds: 1,
                free_slots: 1,
                units_held: vec![],
                open_windows: None,
            },
            T0
        ),
        Err(GridError::UnknownHost(_))
    ));
}

#[test]
fn round_open_with_nothing_queued_means_short_retry() {
    let (mut fx, round) = Fx::with_round(1, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    let (units, r) = fx.ask(b, 4, &[], T0 + 1);
    assert!(units.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
    assert!(r.rounds_open);
    // Once the only job is done, the round ends and hosts idle.
    assert_eq!(fx.upload(a, &u, 2, T0 + 2), UploadOutcome::Accepted);
    assert_eq!(fx.round_state(round), RoundState::Done);
    let (units, r) = fx.ask(b, 4, &[], T0 + 3);
    assert!(units.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
    assert!(!r.rounds_open);
}

#[test]
fn work_is_sent_only_when_it_fits_the_hosts_windows() {
    let (mut fx, _) = Fx::with_round(2, 3);
    let a = fx.host();
    let ask = |windows: Vec<(u64, u64)>| WorkRequest {
        want_seconds: 3600,
        free_slots: 2,
        units_held: vec![],
        open_windows: Some(windows),
    };
    // Deadlines here are at most 600 s: a window opening in an hour is too late.
    let r = fx
        .grid
        .request_work(a, &ask(vec![(3600, 7200)]), T0)
        .unwrap();
    assert!(
        r.units.is_empty(),
        "nothing fits a window after the deadline"
    );
    assert!(r.rounds_open);
    let r = fx
        .grid
        .request_work(a, &ask(vec![(0, 7200)]), T0 + 1)
        .unwrap();
    assert_eq!(r.units.len(), 2, "an open window takes the work");
}

#[test]
fn a_host_gets_other_jobs_before_one_it_missed() {
    for policy in scheduler::POLICY_NAMES {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(2), T0).unwrap();
        let p = RoundParams {
            policy: policy.into(),
            ..params(3)
        };
        fx.grid.start_round(p, T0).unwrap();
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid.tick(u.deadline_ms).unwrap();
        let v = fx.one(a, &[], u.deadline_ms + 1);
        assert_ne!(v.job_id, u.job_id, "policy {policy}");
        // With nothing else left it does get the missed job again.
        let w = fx.one(a, &[v.unit_id], u.deadline_ms + 2);
        assert_eq!(w.job_id, u.job_id, "policy {policy}");
    }
}

#[test]
fn a_host_that_let_a_job_expire_does_not_get_it_again_while_another_host_is_online() {
    for policy in scheduler::POLICY_NAMES {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(1), T0).unwrap();
        let p = RoundParams {
            policy: policy.into(),
            ..params(5)
        };
        fx.grid.start_round(p, T0).unwrap();
        let (hoarder, other) = (fx.host(), fx.host());
        let u = fx.one(hoarder, &[], T0);
        let t = u.deadline_ms + 1;
        fx.grid.tick(u.deadline_ms).unwrap();
        // The other host was heard from lately: the hoarder waits.
        fx.grid.hello(other, t).unwrap();
        nothing_for(&mut fx, hoarder, t);
        let v = fx.one(other, &[], t + 1);
        assert_eq!(v.job_id, u.job_id, "policy {policy}");
        // Once every online host missed it, it goes to either again.
        fx.grid.tick(v.deadline_ms).unwrap();
        let w = fx.one(hoarder, &[], v.deadline_ms + 1);
        assert_eq!(w.job_id, u.job_id, "policy {policy}");
    }
}

#[test]
fn adaptive_hands_the_stragglers_scan_over_to_a_faster_host_never_beside_it() {
    let (mut fx, hosts) = two_hosts(1);
    let (slow, fast) = (hosts[0], hosts[1]);
    let idle = fx.host();
    fx.grid.benchmark(slow, 0.1, 10.0, 1, T0).unwrap();
    fx.grid.benchmark(fast, 100.0, 1000.0, 1, T0).unwrap();
    start(&mut fx, "adaptive", T0);
    // While the fast host is online the slow one leaves the job to it.
    let (none, _) = fx.ask(slow, 1, &[], T0 + 1);
    assert!(none.is_empty());
    // Once the others have been silent a while, the slow host takes the
    // only job (500 s expected).
    let t = T0 + scheduler::ONLINE_WINDOW_MS + 1;
    let u = fx.one(slow, &[], t);
    // A unit still waiting in its host's buffer is not handed over.
    let (none, _) = fx.ask(fast, 1, &[], t + 500);
    assert!(none.is_empty());
    assert_eq!(
        fx.grid.progress(slow, u.unit_id, 2, 2, t + 600).unwrap(),
        ProgressOutcome::Continue
    );
    // The fast host, idle, wants a copy: it gets none (two copies
    // would crawl the site at twice the round's rate), and the running
    // scan is asked to hand over at its next report.
    let (none, _) = fx.ask(fast, 1, &[], t + 1000);
    assert!(none.is_empty(), "no second copy beside a running scan");
    assert_eq!(fx.job(u.job_id).running_attempts().count(), 1);
    let (none, _) = fx.ask(idle, 2, &[], t + 1100);
    assert!(none.is_empty());
    assert_eq!(
        fx.grid.progress(slow, u.unit_id, 3, 3, t + 1500).unwrap(),
        ProgressOutcome::Abort(ABORT_HAND_OVER.into())
    );
    // The scan stops at a page boundary and uploads its part with its
    // frontier: a segment, and the job back in the queue.
    let (sum, file, state) = partial_for(&u, 3, 3);
    assert_eq!(
        fx.grid
            .upload(slow, u.unit_id, sum, &file, Some(&state), t + 2000)
            .unwrap(),
        UploadOutcome::Accepted
    );
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Partial);
    // The host that handed it over does not take it back while another
    // is online; the fast host continues from the frontier.
    let (none, _) = fx.ask(slow, 1, &[], t + 2100);
    assert!(none.is_empty(), "the continuation is for another host");
    let v = fx.one(fast, &[], t + 2200);
    assert_eq!(v.job_id, u.job_id);
    assert_eq!(v.resume.as_ref().map(|r| r.pages_done), Some(3));
    assert!(fx.attempt(v.unit_id).replica, "counted as the copy wanted");
    // Its progress counts its own pages (not the 3 before it): with one
    // taken, it is a scan that could be handed over in turn.
    assert_eq!(
        fx.grid.progress(fast, v.unit_id, 1, 1, t + 2500).unwrap(),
        ProgressOutcome::Continue
    );
    let job = fx.job(u.job_id);
    let handable = crate::grid::index::hand_over_from(&job, slow).map(|a| a.unit_id);
    assert_eq!(handable, Some(v.unit_id));
    assert_eq!(fx.upload(fast, &v, 2, t + 3000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    assert_eq!(
        job.attempts
            .iter()
            .filter(|a| a.state == AttemptState::Aborted)
            .count(),
        0,
        "no scan was thrown away"
    );
}

#[test]
fn batch_plans_at_round_start_and_each_host_pulls_its_own() {
    let (mut fx, hosts) = two_hosts(4);
    let (fast, slow) = (hosts[0], hosts[1]);
    fx.grid.benchmark(fast, 10.0, 100.0, 1, T0).unwrap();
    fx.grid.benchmark(slow, 1.0, 10.0, 1, T0).unwrap();
    let round = start(&mut fx, "batch", T0);
    // Four sites of 50 pages; speeds 10:1 → the fast host's share is 181.8
    // pages (three sites), the slow one's 18.2 (none); the fourth is dealt
    // to the slowest host first.
    let (_, jobs) = fx.grid.round(round).unwrap();
    let of = |h: u64| jobs.iter().filter(|j| j.batch_host == Some(h)).count();
    assert_eq!((of(fast), of(slow)), (3, 1));
    let (s, _) = fx.ask(slow, 4, &[], T0 + 1);
    assert_eq!(s.len(), 1);
    assert_eq!(fx.job(s[0].job_id).batch_host, Some(slow));
    let (f, _) = fx.ask(fast, 4, &[], T0 + 2);
    assert_eq!(f.len(), 3);
    assert!(f.iter().all(|u| fx.job(u.job_id).batch_host == Some(fast)));
}

#[test]
fn a_batch_is_released_when_its_host_stays_silent() {
    let (mut fx, hosts) = two_hosts(2);
    let (fast, slow) = (hosts[0], hosts[1]);
    fx.grid.benchmark(fast, 10.0, 100.0, 1, T0).unwrap();
    fx.grid.benchmark(slow, 10.0, 100.0, 1, T0).unwrap();
    start(&mut fx, "batch", T0);
    let (mine, _) = fx.ask(fast, 4, &[], T0 + 1);
    assert_eq!(mine.len(), 1, "only its own batch");
    let held: Vec<u64> = mine.iter().map(|u| u.unit_id).collect();
    let grace = scheduler::BATCH_GRACE_MS;
    let (none, _) = fx.ask(fast, 4, &held, T0 + grace - 1);
    assert!(
        none.is_empty(),
        "the other batch is kept during the grace period"
    );
    let (other, _) = fx.ask(fast, 4, &held, T0 + grace + 1);
    assert_eq!(other.len(), 1, "the silent host's batch is released");
}

#[test]
fn speeds_are_learned_from_real_jobs_and_size_deadlines() {
    let mut fx = Fx::new();
    let a = fx.host();
    fx.grid.add_sites(&site_names(2), T0).unwrap();
    start(&mut fx, "adaptive", T0);
    let u = fx.one(a, &[], T0);
    // 3 pages in 1.5 s: 2 pages/s.
    assert_eq!(fx.upload(a, &u, 2, T0 + 1), UploadOutcome::Accepted);
    let h = fx.host_rec(a);
    assert_eq!(h.avg_pages_per_s, Some(2.0));
    assert_eq!(h.bytes_done, 3000);
    // 50 pages at 2 pages/s = 25 s × 3 + 10 s grace.
    let v = fx.one(a, &[], T0 + 2);
    assert_eq!(v.deadline_ms - v.issued_ms, 85_000);
}

/// `pack` fits the scans a host holds into the bandwidth it offers: at the
/// round's delay (or the host's pace at delay 0) each scan draws a page's
/// weight per page time. A host that offers three scans' worth holds
/// three; a host that offered nothing is woken for the rest; what a host
/// says is clamped, and a revoked host is not heard.
#[test]
fn pack_fits_a_hosts_units_into_the_bandwidth_it_offers() {
    use beebot_shared::proto::HostResources;
    use scheduler::resources::{scan_kbps, PAGE_KB};
    const SCANS_OFFERED: u64 = 3;
    for delay_ms in [0u64, 1000] {
        let (mut fx, hosts) = two_hosts(12);
        let (capped, open) = (hosts[0], hosts[1]);
        let p = RoundParams {
            policy: "pack".into(),
            delay_ms,
            ..params(3)
        };
        fx.grid.start_round(p, T0).unwrap();
        // A host with no benchmark paces at the default speed.
        let spp = scheduler::seconds_per_page(None, delay_ms as f64 / 1000.0);
        let per_scan = scan_kbps(spp);
        assert_eq!(per_scan, PAGE_KB / spp);
        let offer = HostResources {
            memory_mb: 4096,
            bandwidth_kbps: (SCANS_OFFERED as f64 * per_scan).ceil() as u64,
        };
        fx.grid.set_resources(capped, offer, T0).unwrap();
        assert_eq!(fx.grid.host_resources(capped), Some(&offer));
        let (units, _) = fx.ask(capped, 8, &[], T0 + 1);
        assert_eq!(units.len() as u64, SCANS_OFFERED, "delay {delay_ms} ms");
        // Full: it asks again and gets nothing more.
        let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
        let (more, _) = fx.ask(capped, 8, &held, T0 + 2);
        assert!(more.is_empty(), "delay {delay_ms} ms: {more:?}");
        // The working host cannot hold the queue: the idle one is woken and
        // takes what its slots may hold (it said nothing beyond them).
        let (woken, _) = fx.ask(open, 8, &[], T0 + 3);
        assert_eq!(
            woken.len() as u64,
            scheduler::host_capacity(scheduler::DEFAULT_HOST_SLOTS),
            "delay {delay_ms} ms"
        );
        // Figures past the bounds are clamped.
        fx.grid
            .set_resources(
                open,
                HostResources {
                    memory_mb: u32::MAX,
                    bandwidth_kbps: u64::MAX,
                },
                T0 + 4,
            )
            .unwrap();
        let r = *fx.grid.host_resources(open).unwrap();
        assert_eq!(
            (r.memory_mb, r.bandwidth_kbps),
            (
                beebot_shared::limits::MAX_HOST_MEMORY_MB,
                beebot_shared::limits::MAX_BENCHMARK_KB_PER_S as u64
            )
        );
        fx.grid.revoke(open, T0 + 5).unwrap();
        assert_eq!(
            fx.grid.host_resources(open),
            None,
            "forgotten with the host"
        );
        assert!(fx.grid.set_resources(open, offer, T0 + 6).is_err());
    }
}

/// The hosts' views are kept between requests: a change of another host
/// (units issued, given back, uploaded, progress) is in the next request's
/// views at once, and within [`VIEW_REFRESH_MS`] the kept views are used
/// (debug builds also check them against views built afresh whenever a
/// request comes at the moment they were built).
#[test]
fn kept_host_views_follow_every_change_of_another_host() {
    let (mut fx, _) = Fx::with_round(12, 3);
    let (a, b) = (fx.host(), fx.host());
    let now = T0 + 1000;
    let busy = |fx: &Fx, h: u64| {
        fx.grid
            .views
            .views
            .iter()
            .find(|v| v.host_id == h)
            .map(|v| v.busy)
    };
    let got_a = fx.ask(a, 2, &[], now).0;
    assert_eq!(got_a.len(), 2);
    // b's request at the same moment sees a's two units.
    let got_b = fx.one(b, &[], now);
    assert_eq!(busy(&fx, a), Some(2));
    // a gives one back and uploads the other: b's next request sees a idle.
    fx.upload(a, &got_a[0], 3, now);
    fx.ask(a, 0, &[got_a[0].unit_id], now);
    fx.one(b, &[got_b.unit_id], now);
    assert_eq!(busy(&fx, a), Some(0));
    // Progress of b's scan: a's request sees b's units timed by their pace.
    fx.grid.progress(b, got_b.unit_id, 4, 9, now + 200).unwrap();
    fx.ask(a, 1, &[], now + 200);
    // A refresh interval after the last request every view is due: all
    // are built afresh.
    let later = now + 200 + VIEW_REFRESH_MS;
    fx.ask(b, 0, &[got_b.unit_id], later);
    assert_eq!(fx.grid.views.built_ms, Some(later));
}

/// Between requests close together the views not marked are built again
/// a share at a time, oldest first (never all at once): every view is read
/// less than [`VIEW_REFRESH_MS`] old, and a request builds about
/// `hosts × elapsed / VIEW_REFRESH_MS` of them beside its own.
#[test]
fn kept_host_views_are_built_again_a_share_at_a_time() {
    let (mut fx, _) = Fx::with_round(400, 3);
    let hosts: Vec<u64> = (0..100).map(|_| fx.host()).collect();
    let mut now = T0 + 1000;
    fx.ask(hosts[0], 0, &[], now);
    let full = fx.grid.views.built_ms;
    assert_eq!(full, Some(now));
    let mut most_built = 0;
    for i in 1..=400 {
        now += 10;
        let before = fx.grid.views.built.clone();
        fx.ask(hosts[(i * 7) % 100], 0, &[], now);
        let built = fx
            .grid
            .views
            .built
            .iter()
            .filter(|(id, b)| before.get(id) != Some(b))
            .count();
        most_built = most_built.max(built);
        for (id, b) in &fx.grid.views.built {
            assert!(
                now - b < VIEW_REFRESH_MS,
                "host {id} built at {b}, now {now}"
            );
        }
    }
    // 100 hosts × 10 ms / 1,000 ms = 1 a request, the asker's beside it,
    // never the whole set again.
    assert!(most_built <= 3, "{most_built} views built by one request");
    assert_eq!(fx.grid.views.built_ms, full, "never all at once");
}

#[test]
fn an_empty_answer_writes_its_host_only_when_more_than_its_last_contact_changed() {
    let (mut fx, _round) = Fx::with_round(3, 3);
    let a = fx.host();
    let stored = |fx: &mut Fx| {
        fx.grid.persist().unwrap();
        fx.grid
            .store
            .hosts()
            .unwrap()
            .into_iter()
            .find(|h| h.id == a)
            .unwrap()
    };
    let t1 = T0 + 1_000;
    let (units, _) = fx.ask(a, 3, &[], t1);
    let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
    assert_eq!(
        stored(&mut fx).last_seen_ms,
        t1,
        "the first contact is written"
    );
    // Asking again with nothing free: only its last contact changed, kept in memory.
    let t2 = t1 + 5_000;
    let (none, _) = fx.ask(a, 0, &held, t2);
    assert!(none.is_empty());
    assert_eq!(fx.host_rec(a).last_seen_ms, t2);
    assert_eq!(stored(&mut fx).last_seen_ms, t1);
    // Once the stored contact is LAST_SEEN_STORED_EVERY_MS old, it is written.
    let t3 = t1 + hosts::LAST_SEEN_STORED_EVERY_MS;
    fx.ask(a, 0, &held, t3);
    assert_eq!(stored(&mut fx).last_seen_ms, t3);
    // Time away (a silence past the online window) is written at once.
    let t4 = t3 + scheduler::ONLINE_WINDOW_MS + 1;
    fx.ask(a, 0, &held, t4);
    let s = stored(&mut fx);
    assert_eq!(s.last_seen_ms, t4);
    assert!(s.offline_ms > scheduler::ONLINE_WINDOW_MS);
    assert_eq!(s.offline_ms, fx.host_rec(a).offline_ms);
}

/// A cancelled round's units leave their hosts' views at once: a request
/// at the same moment (debug builds check each kept view against a fresh
/// one) sees the host idle.
#[test]
fn a_cancelled_rounds_units_leave_their_hosts_views_at_once() {
    let (mut fx, first) = Fx::with_round(4, 3);
    let (a, b, c) = (fx.host(), fx.host(), fx.host());
    let now = T0 + 1000;
    let got = fx.ask(a, 1, &[], now).0;
    assert_eq!(got.len(), 1);
    // b's request builds a's view again, with its unit.
    fx.ask(b, 0, &[], now);
    fx.grid.start_round(params(3), now).unwrap();
    fx.grid.cancel_round(first, now).unwrap();
    fx.ask(c, 0, &[], now);
    let busy = fx
        .grid
        .views
        .views
        .iter()
        .find(|v| v.host_id == a)
        .map(|v| v.busy);
    assert_eq!(busy, Some(0));
}

#[test]
fn a_unit_that_cannot_be_signed_is_refused_before_it_is_recorded() {
    // A user agent past a unit's size limit: no unit of this grid can be
    // signed. Signing happens outside the grid's lock, so every way it can
    // fail is met when the unit's bytes are made, before anything is kept.
    let dir = tempfile::tempdir().unwrap();
    let key = sign::generate_key();
    let io = GridIo::server(LinkPacks::writer(dir.path().join("links")), key.clone());
    let huge = GridSettings {
        user_agent: "x".repeat(beebot_shared::limits::MAX_UNIT_BYTES + 1),
        ..settings()
    };
    let mut g = Grid::open(Default::default(), io, huge).unwrap();
    g.add_sites(&site_names(3), T0).unwrap();
    g.start_round(params(3), T0).unwrap();
    let h = enrol_host(&mut g, T0);
    let req = WorkRequest {
        want_seconds: 600,
        free_slots: 2,
        units_held: vec![],
        open_windows: None,
    };
    for _ in 0..2 {
        assert!(matches!(
            g.request_work_unsigned(h, &req, T0 + 1000),
            Err(GridError::Sign(_))
        ));
        assert!(matches!(
            g.request_work(h, &req, T0 + 1000),
            Err(GridError::Sign(_))
        ));
    }
    // Nothing was issued: every job is queued, none running or failed.
    let s = g.status();
    assert_eq!(
        (s.jobs_queued, s.jobs_running, s.jobs_failed),
        (3, 0, 0),
        "{s:?}"
    );
}
