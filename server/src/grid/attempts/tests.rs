//! Tests of progress, failures, deadlines and continuations.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::limits::{LEASE_TAKEOVER_S, MAX_LINK_RECORDS, MAX_TEXT_LEN};
use beebot_shared::linkfile::{LinkRecord, ScanSummary};
use beebot_shared::scanstate::state_sha256;
use beebot_shared::sign::{self, WorkUnit};

#[test]
fn progress_counts_are_bounded_by_the_unit_and_never_go_back() {
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    fx.grid
        .progress(a, u.unit_id, u64::MAX, u64::MAX, T0 + 1000)
        .unwrap();
    let at = fx.attempt(u.unit_id);
    assert_eq!(at.pages, 50, "the page cap");
    assert_eq!(at.links, MAX_LINK_RECORDS as u64);
    assert!(fx.job(u.job_id).completeness().pages <= 50);
    // Backwards is not believed.
    fx.grid.progress(a, u.unit_id, 3, 2, T0 + 2000).unwrap();
    let at = fx.attempt(u.unit_id);
    assert_eq!((at.pages, at.links), (50, MAX_LINK_RECORDS as u64));
    // A continuation is bounded by what its job's earlier scans left.
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    fx.grid.progress(a, u.unit_id, 10, 5, T0 + 1000).unwrap();
    fx.grid.progress(a, u.unit_id, 7, 5, T0 + 2000).unwrap();
    assert_eq!(fx.attempt(u.unit_id).pages, 10);
    let (sum, file, state) = partial_for(&u, 3, 40);
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 3000)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let v = fx.one(a, &[], T0 + 4000);
    fx.grid.progress(a, v.unit_id, 1000, 5, T0 + 5000).unwrap();
    assert_eq!(fx.attempt(v.unit_id).pages, 10);
}

/// A running scan's bytes (`ScanProgressAll`) count in its job's bytes so far
/// until its result does; a host cannot report more than its pages could
/// have read, nor take bytes back, and a report without bytes keeps them.
#[test]
fn a_running_scans_bytes_count_until_its_result_does() {
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    assert_eq!(fx.job(u.job_id).bytes_so_far(), 0);
    fx.grid
        .report(a, u.unit_id, (4, 9, Some(40_000)), T0 + 1000)
        .unwrap();
    assert_eq!(fx.attempt(u.unit_id).bytes, 40_000);
    assert_eq!(fx.job(u.job_id).bytes_so_far(), 40_000);
    // Fewer bytes than before: not believed. No bytes (`Progress`): kept.
    fx.grid
        .report(a, u.unit_id, (5, 9, Some(10)), T0 + 2000)
        .unwrap();
    fx.grid.progress(a, u.unit_id, 6, 9, T0 + 3000).unwrap();
    assert_eq!(fx.attempt(u.unit_id).bytes, 40_000);
    // More than its pages could read: cut at full-size bodies.
    fx.grid
        .report(a, u.unit_id, (6, 9, Some(u64::MAX)), T0 + 4000)
        .unwrap();
    let most = 7 * 100_000 * MAX_BODIES_PER_PAGE;
    assert_eq!(fx.job(u.job_id).bytes_so_far(), most);
    // The result's own bytes replace the running count.
    assert_eq!(fx.upload(a, &u, 3, T0 + 5000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).bytes_so_far(), summary(3).bytes);
}

#[test]
fn an_expired_attempt_requeues_the_job_for_another_host() {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    assert_eq!(fx.grid.tick(u.deadline_ms - 1).unwrap(), 0);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Expired);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued);
    assert!(job
        .reasons
        .iter()
        .any(|r| r.contains("deadline") && r.contains(&a.to_string())));
    assert_eq!(fx.host_rec(a).deadlines_missed, 1);
    // Ticking again changes nothing and counts nothing twice.
    assert_eq!(fx.grid.tick(u.deadline_ms + 1).unwrap(), 0);
    assert_eq!(fx.host_rec(a).deadlines_missed, 1);

    let v = fx.one(b, &[], u.deadline_ms + 2);
    assert_eq!(v.job_id, u.job_id);
    assert_ne!(v.unit_id, u.unit_id);
    assert_eq!(v.host_id, b);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.attempts.len(), 2);
    assert_eq!(fx.host_rec(b).deadlines_missed, 0);
    // The job is running elsewhere: A gets nothing.
    let (none, r) = fx.ask(a, 1, &[], u.deadline_ms + 3);
    assert!(none.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
}

#[test]
fn a_job_fails_after_max_attempts_and_the_round_ends() {
    let (mut fx, round) = Fx::with_round(2, 2);
    let a = fx.host();
    let b = fx.host();
    let (units, _) = fx.ask(a, 2, &[], T0);
    let (u1, u2) = (&units[0], &units[1]);
    assert_eq!(fx.upload(a, u2, 3, T0 + 100), UploadOutcome::Accepted);
    assert_eq!(fx.round_state(round), RoundState::Running);

    // Attempt 1 expires; attempt 2 is given back by the host.
    fx.grid.tick(u1.deadline_ms).unwrap();
    assert_eq!(fx.job(u1.job_id).state, JobState::Queued);
    let v = fx.one(b, &[], u1.deadline_ms + 1);
    assert_eq!(v.job_id, u1.job_id);
    let t_end = u1.deadline_ms + 5;
    fx.grid
        .fail(b, v.unit_id, "robots.txt unavailable", t_end)
        .unwrap();
    let job = fx.job(u1.job_id);
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.failed_attempts(), 2);
    assert!(job.result.is_none());
    assert_eq!(job.reasons.len(), 2);
    assert!(job.reasons[0].contains("deadline"));
    assert!(job.reasons[1].contains("robots.txt unavailable"));
    assert!(job.reasons[1].contains(&b.to_string()));
    assert_eq!(
        fx.attempt(v.unit_id).state,
        AttemptState::Failed("robots.txt unavailable".into())
    );
    assert_eq!(fx.host_rec(b).failures, 1);
    assert_eq!(fx.host_rec(a).deadlines_missed, 1);

    // Every job is final: the round is done.
    let r = &fx.grid.rounds[&round];
    assert_eq!(r.state, RoundState::Done);
    assert_eq!(r.finished_ms, Some(t_end));
    assert_eq!(fx.grid.status().rounds_running, 0);
    let (none, reply) = fx.ask(b, 2, &[], t_end + 1);
    assert!(none.is_empty());
    assert_eq!(reply.retry_after_s, Some(RETRY_IDLE_S));
    assert!(!reply.rounds_open);
}

#[test]
fn expiries_alone_fail_a_job_and_end_the_round() {
    let (mut fx, round) = Fx::with_round(1, 2);
    let a = fx.host();
    let b = fx.host();
    let c = fx.host();
    let u = fx.one(a, &[], T0);
    fx.grid.tick(u.deadline_ms).unwrap();
    let v = fx.one(b, &[], u.deadline_ms);
    assert_eq!(fx.grid.round(round).unwrap().0.state, RoundState::Running);
    assert_eq!(fx.grid.tick(v.deadline_ms).unwrap(), 1);
    assert_eq!(fx.job(u.job_id).state, JobState::Failed);
    assert_eq!(fx.round_state(round), RoundState::Done);
    assert_eq!(fx.grid.rounds[&round].finished_ms, Some(v.deadline_ms));
    assert_eq!(fx.host_rec(a).deadlines_missed, 1);
    assert_eq!(fx.host_rec(b).deadlines_missed, 1);
    let (none, _) = fx.ask(c, 1, &[], v.deadline_ms + 1);
    assert!(none.is_empty());
}

#[test]
fn progress_continues_then_extends_in_the_last_half() {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    assert_eq!(u.deadline_ms, T0 + WINDOW_MS);
    assert_eq!(
        fx.grid.progress(a, u.unit_id, 3, 7, T0 + 1000).unwrap(),
        ProgressOutcome::Continue
    );
    let at = fx.attempt(u.unit_id);
    assert_eq!((at.pages, at.links, at.deadline_ms), (3, 7, u.deadline_ms));
    // Exactly half-way is still the first half.
    let half = T0 + WINDOW_MS / 2;
    assert_eq!(
        fx.grid.progress(a, u.unit_id, 4, 8, half).unwrap(),
        ProgressOutcome::Continue
    );
    let now = half + 1;
    let d = match fx.grid.progress(a, u.unit_id, 5, 9, now).unwrap() {
        ProgressOutcome::Extend(d) => d,
        other => panic!("expected Extend, got {other:?}"),
    };
    assert_eq!(d, now + WINDOW_MS);
    assert!(d > u.deadline_ms && d <= u.issued_ms + 4 * WINDOW_MS);
    assert_eq!(fx.attempt(u.unit_id).deadline_ms, d);
    // The extension is stored, not only in memory.
    fx.grid.persist().unwrap();
    let stored = fx.grid.store.jobs().unwrap();
    let sj = stored.iter().find(|j| j.id == u.job_id).unwrap();
    assert_eq!(sj.attempts[0].deadline_ms, d);
    // The old deadline no longer expires it; the new one does.
    assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 0);
    assert_eq!(fx.grid.tick(d - 1).unwrap(), 0);
    assert_eq!(fx.grid.tick(d).unwrap(), 1);
    assert_eq!(fx.job(u.job_id).state, JobState::Queued);
    // Back from sleep, nobody took the job over: the scan goes on, its
    // attempt running again with a fresh deadline.
    let back = d + 1;
    assert_eq!(
        fx.grid.progress(a, u.unit_id, 6, 10, back).unwrap(),
        ProgressOutcome::Extend(back + WINDOW_MS)
    );
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    assert_eq!(fx.job(u.job_id).state, JobState::Running);
    assert_eq!(fx.job(u.job_id).failed_attempts(), 0);
}

#[test]
fn a_host_back_from_sleep_is_told_to_stop_when_its_job_went_to_another() {
    let (mut fx, a, b, u, v) = two_copies();
    // a wakes up: one scan of a site at a time, so a stops.
    assert!(matches!(
        fx.grid.progress(a, u.unit_id, 9, 9, v.issued_ms + 5).unwrap(),
        ProgressOutcome::Abort(r) if r.contains("another host")
    ));
    assert_eq!(
        fx.grid
            .progress(b, v.unit_id, 1, 1, v.issued_ms + 6)
            .unwrap(),
        ProgressOutcome::Continue
    );
}

/// Regression: extensions once stopped four windows after issue, so a
/// live polite scan of a large site expired (and was cut) while it still
/// made progress. Now a scan is extended for as long as its pages grow,
/// and one that stalls expires a window after its last extension.
#[test]
fn a_scan_that_makes_progress_is_extended_for_as_long_as_it_runs() {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let window = u.deadline_ms - u.issued_ms;
    let mut deadline = u.deadline_ms;
    // Twenty windows of a scan that keeps finding pages.
    for pages in 1..=20 {
        match fx
            .grid
            .progress(a, u.unit_id, pages, 1, deadline - 1)
            .unwrap()
        {
            ProgressOutcome::Extend(d) => {
                assert_eq!(d, deadline - 1 + window);
                deadline = d;
            }
            other => panic!("progress {pages}: expected Extend, got {other:?}"),
        }
        assert_eq!(fx.grid.tick(deadline - 1).unwrap(), 0);
    }
    assert!(deadline > u.issued_ms + 20 * window);
    // It stalls: the same page count is no progress, so no extension.
    assert_eq!(
        fx.grid.progress(a, u.unit_id, 20, 1, deadline - 1).unwrap(),
        ProgressOutcome::Continue
    );
    assert_eq!(fx.grid.tick(deadline).unwrap(), 1);
}

#[test]
fn progress_aborts_what_is_not_wanted_any_more() {
    let (mut fx, round) = Fx::with_round(2, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    assert!(matches!(
        fx.grid.progress(a, 987_654_321, 1, 1, T0 + 1).unwrap(),
        ProgressOutcome::Abort(_)
    ));
    assert_eq!(
        fx.grid.progress(b, u.unit_id, 1, 1, T0 + 1).unwrap(),
        ProgressOutcome::Abort("unit belongs to another host".into())
    );
    // B's report did not touch A's attempt.
    assert_eq!(fx.attempt(u.unit_id).pages, 0);
    assert!(matches!(
        fx.grid.progress(a + 1000, u.unit_id, 1, 1, T0 + 1),
        Err(GridError::UnknownHost(_))
    ));
    fx.grid.cancel_round(round, T0 + 2).unwrap();
    assert_eq!(
        fx.grid.progress(a, u.unit_id, 1, 1, T0 + 3).unwrap(),
        ProgressOutcome::Abort("round cancelled".into())
    );
}

#[test]
fn a_unit_no_longer_held_goes_back_to_the_queue() {
    let (mut fx, _) = Fx::with_round(2, 3);
    let a = fx.host();
    let b = fx.host();
    let (units, _) = fx.ask(a, 2, &[], T0);
    let (u1, u2) = (units[0].clone(), units[1].clone());
    // Still holding both: nothing changes.
    let (none, _) = fx.ask(a, 0, &[u1.unit_id, u2.unit_id], T0 + 1);
    assert!(none.is_empty());
    assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Running);
    // A lost u2 (say, its spool was wiped).
    let (none, _) = fx.ask(a, 0, &[u1.unit_id], T0 + 2);
    assert!(none.is_empty());
    assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Released);
    assert_eq!(fx.attempt(u1.unit_id).state, AttemptState::Running);
    let job2 = fx.job(u2.job_id);
    assert_eq!(job2.state, JobState::Queued);
    // An attempt that ended without a result: it counts against the
    // job's attempts (a host that drops every unit it gets cannot keep
    // a job going round for ever).
    assert_eq!(job2.failed_attempts(), 1);
    assert!(job2.reasons.iter().any(|r| r.contains("no longer holds")));
    let ha = fx.host_rec(a);
    assert_eq!((ha.deadlines_missed, ha.failures), (0, 0));
    // Another host gets it at once, long before the old deadline.
    let v = fx.one(b, &[], T0 + 3);
    assert_eq!(v.job_id, u2.job_id);
    // The released unit never expires.
    assert_eq!(fx.grid.tick(u2.deadline_ms).unwrap(), 1); // u1 only
    assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Released);
    assert_eq!(fx.attempt(u1.unit_id).state, AttemptState::Expired);
    assert_eq!(fx.host_rec(a).deadlines_missed, 1);

    // A host that forgot everything can be handed a job again in the same reply.
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let again = fx.one(a, &[], T0 + 1);
    assert_eq!(again.job_id, u.job_id);
    assert_ne!(again.unit_id, u.unit_id);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Released);
    assert_eq!(fx.attempt(again.unit_id).state, AttemptState::Running);
}

#[test]
fn a_host_that_drops_every_unit_it_gets_fails_the_job_at_its_attempt_limit() {
    let (mut fx, round) = Fx::with_round(1, 3);
    let a = fx.host();
    let mut t = T0;
    for _ in 0..3 {
        // It refuses the unit (say, a bad signature) and never lists it.
        fx.one(a, &[], t);
        t += 1000;
    }
    fx.ask(a, 0, &[], t);
    let job = fx.job(fx.grid.jobs.keys().copied().next().unwrap());
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.attempts.len(), 3, "never more attempts than the limit");
    assert_eq!(fx.round_state(round), RoundState::Done);
}

/// A scan that fetched no page because its site could not be reached
/// is a failed attempt named by its cause; at the attempt limit the job
/// fails with that reason, never done.
#[test]
fn a_site_never_reached_fails_its_job_with_the_cause() {
    use beebot_shared::linkfile::StopReason as S;
    let (mut fx, round) = Fx::with_round(1, 2);
    let a = fx.host();
    for (i, stop) in [S::DnsFailed, S::ConnectionRefused].into_iter().enumerate() {
        let now = T0 + 10 * i as u64;
        let u = fx.one(a, &[], now);
        let sum = ScanSummary {
            stopped_by: Some(stop),
            errors: 1,
            ..ScanSummary::default()
        };
        let why = upload_with(&mut fx, a, &u, sum, &[], now + 1);
        assert_eq!(why.as_deref(), Some(stop.as_str()));
        assert_eq!(
            fx.attempt(u.unit_id).state,
            AttemptState::Failed(stop.as_str().into())
        );
    }
    let (_, jobs) = fx.grid.round(round).unwrap();
    assert_eq!(jobs[0].state, JobState::Failed);
    let why = jobs[0].completeness().why_not.unwrap_or_default();
    assert!(why.contains("connection-refused"), "{why}");
    assert_eq!(fx.round_state(round), RoundState::Done);
    assert!(fx.link_names().is_empty());
}

/// One site, two hosts, and two copies of its job from the same start:
/// `a`'s unit `u` passed its deadline (a host asleep) and went to `b` as `v`.
fn two_copies() -> (Fx, u64, u64, WorkUnit, WorkUnit) {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
    let v = fx.one(b, &[], u.deadline_ms + 1);
    assert_eq!(v.job_id, u.job_id);
    (fx, a, b, u, v)
}

/// The export of `job` gives the pairs of `expected` (in order, each once),
/// and a visitor's error stops it and comes back as it is.
fn assert_export_is_the_union(fx: &Fx, job: &JobRecord, expected: &[LinkRecord]) {
    let mut pairs = Vec::new();
    for_each_job_link(&fx.links(), job, |r| {
        pairs.push((r.source_url.clone(), r.target_url.clone()));
        Ok::<(), std::io::Error>(())
    })
    .unwrap();
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|r| (r.source_url.clone(), r.target_url.clone()))
        .collect();
    assert_eq!(pairs, expected);
    let stopped = for_each_job_link(&fx.links(), job, |_| {
        Err(std::io::Error::other("disk full"))
    });
    assert!(
        matches!(&stopped, Err(LinkReadError::Visit(e)) if e.to_string() == "disk full"),
        "{stopped:?}"
    );
}

#[test]
fn a_scan_cut_by_the_time_budget_continues_from_its_frontier_until_the_natural_end() {
    let (mut fx, round) = Fx::with_round(1, 2);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    assert!(u.resume.is_none(), "the first scan starts from the seed");
    // Cut by the budget after 3 pages (summary(3) counts 3 pages).
    let (sum, file, state) = partial_for(&u, 3, 3);
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum.clone(), &file, Some(&state), T0 + 10)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued, "a cut scan never ends its job");
    assert_eq!(job.segments.len(), 1);
    assert!(job.result.is_none());
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Partial);
    assert_eq!(fx.round_state(round), RoundState::Running);
    let state_name = job.segments[0].state_file.clone();
    assert_eq!(fx.read_link(&state_name), state);
    // The same upload again is a duplicate, not a second segment.
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 11)
            .unwrap(),
        UploadOutcome::Duplicate
    );
    assert_eq!(fx.job(u.job_id).segments.len(), 1);
    // The continuation goes to any host, and names the frontier by its hash.
    let v = fx.one(b, &[], T0 + 20);
    assert_eq!(v.job_id, u.job_id);
    let r = v.resume.clone().expect("a continuation unit");
    assert_eq!(r.state_sha256, state_sha256(&state));
    assert_eq!(r.state_bytes, state.len() as u64);
    assert_eq!(r.pages_done, 3);
    let StateAnswer::Read(file) = fx.grid.state_of_unit(b, v.unit_id).unwrap() else {
        panic!("the continuation reads its state");
    };
    assert_eq!(file.name, job.segments[0].state_file);
    assert_eq!(file.sha256, r.state_sha256);
    assert_eq!(file.location(), fx.grid.link_files().location(&state_name));
    assert_eq!(file.read().unwrap(), state);
    // Not to another host, nor for the unit that was cut.
    for (host, unit) in [(a, v.unit_id), (a, u.unit_id)] {
        assert!(matches!(
            fx.grid.state_of_unit(host, unit).unwrap(),
            StateAnswer::Abort(_)
        ));
    }
    // The continuation reaches the natural end: the job is done, the
    // export is both link files, and the frontier is removed.
    assert_eq!(fx.upload(b, &v, 4, T0 + 30), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    let files: Vec<&str> = job.link_files().collect();
    assert_eq!(files.len(), 2);
    assert!(files.iter().all(|f| fx.has_link(f)));
    // The export's union: the two scans' files share three pairs (the
    // fixture's records repeat), and each pair comes once.
    assert_export_is_the_union(&fx, &job, &records(&u.site, 4));
    assert!(!fx.has_link(&state_name));
    let c = job.completeness();
    // (`summary` counts 3 pages a scan.)
    assert_eq!((c.pages, c.links, c.scans), (3 + 3, 3 + 4, 2));
    assert!(c.natural_end && c.why_not.is_none());
    assert_eq!(fx.round_state(round), RoundState::Done);
    // The site's size for the next round is the whole job's.
    assert_eq!(fx.grid.sites()[0].last_scan.as_ref().unwrap().pages, 6);
    // Segments are no failures: the budget is a choice, not a fault.
    assert_eq!(job.failed_attempts(), 0);
    assert_eq!(fx.host_rec(a).failures, 0);
}

#[test]
fn a_copy_overtaken_by_another_copys_segment_is_aborted_and_dropped() {
    let (mut fx, a, b, u, v) = two_copies();
    let t = v.issued_ms + 10;
    // b's scan is cut first: a's running scan would redo it.
    let (sum, file, state) = partial_for(&v, 2, 3);
    assert_eq!(
        fx.grid
            .upload(b, v.unit_id, sum, &file, Some(&state), t)
            .unwrap(),
        UploadOutcome::Accepted
    );
    // a's late complete result from the seed is acknowledged and dropped.
    assert_eq!(fx.upload(a, &u, 5, t + 1), UploadOutcome::Duplicate);
    assert!(!fx.has_link(&lf_name(&u)));
    let job = fx.job(u.job_id);
    assert_eq!(job.segments.len(), 1);
    assert!(job.result.is_none());
    // The continuation finishes it.
    let w = fx.one(a, &[], t + 2);
    assert_eq!(w.resume.as_ref().unwrap().pages_done, 3);
    assert_eq!(fx.upload(a, &w, 1, t + 3), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).state, JobState::Done);
}

#[test]
fn a_running_copy_hears_abort_once_another_copy_went_further() {
    let (mut fx, a, b, u, v) = two_copies();
    let t = v.issued_ms + 10;
    let (sum, file, state) = partial_for(&u, 2, 3);
    // a's late cut scan is still welcome: the job is open at its start.
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &file, Some(&state), t)
            .unwrap(),
        UploadOutcome::Accepted
    );
    assert!(matches!(
        fx.grid.progress(b, v.unit_id, 3, 3, t + 1).unwrap(),
        ProgressOutcome::Abort(_)
    ));
    assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Aborted);
}

#[test]
fn attempts_are_counted_since_the_last_segment_and_a_failed_job_keeps_no_frontier() {
    let (mut fx, round) = Fx::with_round(1, 2);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    // One deadline missed before the first segment...
    assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
    let v = fx.one(a, &[], u.deadline_ms + 1);
    let (sum, file, state) = partial_for(&v, 2, 3);
    let t = v.issued_ms + 10;
    assert_eq!(
        fx.grid
            .upload(a, v.unit_id, sum, &file, Some(&state), t)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let seg_state = fx.job(u.job_id).segments[0].state_file.clone();
    assert!(fx.has_link(&seg_state));
    // ...and one after it: two in all, but one since the segment, so the
    // job (at most 2 attempts) goes on.
    let w = fx.one(a, &[], t + 1);
    fx.grid.fail(a, w.unit_id, "boom", t + 2).unwrap();
    assert_eq!(fx.job(u.job_id).state, JobState::Queued);
    assert_eq!(fx.job(u.job_id).failed_attempts(), 1);
    // A second failure since the segment fails it; its frontier goes.
    let x = fx.one(a, &[], t + 3);
    fx.grid.fail(a, x.unit_id, "boom again", t + 4).unwrap();
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Failed);
    assert!(!fx.has_link(&seg_state));
    assert_eq!(fx.round_state(round), RoundState::Done);
    let c = job.completeness();
    assert!(!c.natural_end);
    assert!(c.why_not.unwrap().starts_with("failed"));
    let counts = crate::api::JobCounts::of_round(&fx.grid.rounds[&round], &[job]);
    assert_eq!((counts.complete, counts.incomplete), (0, 1));
    assert!(counts.verdict().contains("INCOMPLETE"));
}

/// Regression: a failure reason of multi-byte characters was cut inside
/// a character, which panicked after the attempt failed in memory but
/// before it was stored, wedging the job until a restart.
#[test]
fn a_reason_of_multi_byte_characters_is_kept_whole() {
    let (mut fx, _) = Fx::with_round(1, 10);
    let a = fx.host();
    // Whatever the prefix, some cut falls inside a character.
    for (i, lead) in ["", "x", "xy"].into_iter().enumerate() {
        let u = fx.one(a, &[], T0 + 10 * i as u64);
        let reason = format!("{lead}{}", "é".repeat(MAX_TEXT_LEN));
        fx.grid
            .fail(a, u.unit_id, &reason, T0 + 10 * i as u64 + 1)
            .unwrap();
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued);
        let kept = job.reasons.last().unwrap();
        assert!(kept.len() <= MAX_TEXT_LEN && kept.starts_with("host "));
        fx.grid.persist().unwrap();
        assert_eq!(fx.grid.store.jobs().unwrap()[0].reasons, job.reasons);
    }
}

/// [`issued`], and a scan of it on `away` that reported once at the
/// returned time.
fn reported_once(fx: &mut Fx, away: u64) -> (WorkUnit, u64) {
    let u = issued(fx, away);
    let t = T0 + 10_000;
    let out = fx.grid.progress(away, u.unit_id, 5, 5, t).unwrap();
    assert!(!matches!(out, ProgressOutcome::Abort(_)), "{out:?}");
    (u, t)
}

#[test]
fn a_scan_not_heard_from_is_taken_back_after_its_lease_and_never_runs_twice() {
    let (mut fx, hosts) = two_hosts(1);
    let (away, other) = (hosts[0], hosts[1]);
    let (u, t) = reported_once(&mut fx, away);
    let lease = LEASE_TAKEOVER_S * 1000;
    // Within the lease the site stays with its scan, reports or not.
    assert_eq!(fx.grid.tick(t + lease - 1).unwrap(), 0);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    // Past it, the scan is taken back long before its deadline, and the
    // job goes on on another host.
    assert_eq!(fx.grid.tick(t + lease).unwrap(), 1);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Expired);
    assert!(fx
        .job(u.job_id)
        .reasons
        .iter()
        .any(|r| r.contains("not heard from")));
    let v = fx.one(other, &[], t + lease + 1);
    assert_eq!(v.job_id, u.job_id);
    // The host that was away comes back: its scan is no longer the
    // job's (it stops: one scan of the site at a time).
    let back = fx.grid.progress(away, u.unit_id, 6, 6, t + lease + 2);
    assert!(
        matches!(back.unwrap(), ProgressOutcome::Abort(_)),
        "the old scan must stop"
    );
    assert_eq!(fx.job(u.job_id).running_attempts().count(), 1);
}

#[test]
fn a_scan_back_before_another_host_took_its_job_goes_on() {
    let (mut fx, hosts) = two_hosts(1);
    let away = hosts[0];
    let (u, t) = reported_once(&mut fx, away);
    let lease = LEASE_TAKEOVER_S * 1000;
    assert_eq!(fx.grid.tick(t + lease).unwrap(), 1);
    let back = fx
        .grid
        .progress(away, u.unit_id, 6, 6, t + lease + 5)
        .unwrap();
    assert!(matches!(back, ProgressOutcome::Extend(_)), "{back:?}");
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
}

#[test]
fn a_restarted_server_counts_leases_from_its_first_tick() {
    let (mut fx, hosts) = two_hosts(1);
    let (u, t) = reported_once(&mut fx, hosts[0]);
    let lease = LEASE_TAKEOVER_S * 1000;
    // The server was down far longer than the lease.
    let (dir, key) = (fx.dir.path().to_path_buf(), fx.key.clone());
    drop(fx.grid);
    let mut g = open_grid(&dir, &key);
    let up = t + 10 * lease;
    assert_eq!(
        g.tick(up).unwrap(),
        0,
        "no lease lapsed while the server was down"
    );
    // A report after the restart holds the lease again; silence after it
    // lapses it.
    let out = g.progress(hosts[0], u.unit_id, 7, 7, up + 1000).unwrap();
    assert!(!matches!(out, ProgressOutcome::Abort(_)), "{out:?}");
    assert_eq!(g.tick(up + 1000 + lease - 1).unwrap(), 0);
    assert_eq!(g.tick(up + 1000 + lease).unwrap(), 1);
    let job = g.jobs[&u.job_id].clone();
    assert!(job
        .attempts
        .iter()
        .all(|a| a.state != AttemptState::Running));
}

/// A unit waiting in the buffer of a host not heard from since `t`
/// (after it asked at `t`), recalled at `t` + the lease.
fn recalled(fx: &mut Fx, host: u64) -> (WorkUnit, u64) {
    let u = issued(fx, host);
    let lease = LEASE_TAKEOVER_S * 1000;
    // It waits in its host's buffer; the host is heard from (it asks).
    let t = T0 + lease;
    let (none, _) = fx.ask(host, 1, &[u.unit_id], t);
    assert!(none.is_empty());
    assert_eq!(
        fx.grid.tick(t + lease - 1).unwrap(),
        0,
        "its host is heard from"
    );
    // Then nothing from the host for the lease: the unit is recalled.
    assert_eq!(fx.grid.tick(t + lease).unwrap(), 1);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Recalled);
    (u, t + lease)
}

#[test]
fn a_unit_not_started_is_recalled_when_its_host_is_silent_and_charges_nobody() {
    let (mut fx, hosts) = two_hosts(1);
    let (away, other) = (hosts[0], hosts[1]);
    let (u, t) = recalled(&mut fx, away);
    // Neither the host (a paused desktop did no wrong) nor the job is
    // charged: the job is queued with no failed attempt.
    assert_eq!(fx.host_rec(away).deadlines_missed, 0);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.failed_attempts(), 0);
    assert_eq!(fx.grid.counters().units_recalled, 1);
    assert_eq!(fx.grid.counters().units_expired, 0);
    // Another host takes the job; the one that was away, back, is told to
    // drop its unit and never runs it beside the other.
    let v = fx.one(other, &[], t + 1);
    assert_eq!(v.job_id, u.job_id);
    let (_, reply) = fx.ask(away, 1, &[u.unit_id], t + 2);
    assert_eq!(reply.cancelled_units, vec![u.unit_id]);
    let back = fx.grid.progress(away, u.unit_id, 1, 1, t + 3).unwrap();
    assert!(matches!(back, ProgressOutcome::Abort(_)), "{back:?}");
    assert_eq!(fx.job(u.job_id).running_attempts().count(), 1);
    // And the host may still scan the job later (it is not barred).
    assert!(!super::super::index::failed_by(&fx.job(u.job_id), away));
}

#[test]
fn a_recalled_unit_is_its_hosts_again_when_it_is_back_first() {
    let (mut fx, hosts) = two_hosts(1);
    let (away, other) = (hosts[0], hosts[1]);
    let (u, t) = recalled(&mut fx, away);
    // Back before another host took the job: the unit is its own again.
    let (none, reply) = fx.ask(away, 1, &[u.unit_id], t + 1);
    assert!(none.is_empty() && reply.cancelled_units.is_empty());
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    assert_eq!(fx.job(u.job_id).state, JobState::Running);
    // So nobody else gets the site.
    let (units, _) = fx.ask(other, 1, &[], t + 2);
    assert!(units.is_empty(), "one scan of a site at a time");
    // A unit recalled again and started before its host asks goes on
    // from its first report.
    assert_eq!(fx.grid.tick(t + 1 + LEASE_TAKEOVER_S * 1000).unwrap(), 1);
    let out = fx
        .grid
        .progress(away, u.unit_id, 1, 1, t + 2 + LEASE_TAKEOVER_S * 1000)
        .unwrap();
    assert!(matches!(out, ProgressOutcome::Extend(_)), "{out:?}");
}

/// A round whose last result was written while the write of the round's
/// end failed (a full disk, a kill between the two) is still running on
/// disk with nothing left to hand out: it ends at the first tick after
/// the restart, whichever write the disk stopped at.
#[test]
fn a_round_whose_end_was_not_written_ends_at_the_first_tick() {
    use crate::store::MemoryStore;
    let key = sign::generate_key();
    let pk = key.verifying_key();
    let mut ended_on_disk_only_by_the_tick = 0;
    for writes in 0..30 {
        let store = Arc::new(MemoryStore::new());
        let links = Arc::new(MemoryLinks::on_disk(store.disk().clone()));
        let open = |s: Arc<MemoryStore>| {
            let io = GridIo::in_memory(links.clone(), key.clone(), 1);
            Stored::open(s, io, settings())
        };
        let mut g = open(store.clone());
        g.add_sites(&site_names(1), T0).unwrap();
        let round = g.start_round(params(3), T0).unwrap();
        let host = enrol_host(&mut g, T0);
        let req = WorkRequest {
            want_seconds: 3600,
            free_slots: 1,
            units_held: vec![],
            open_windows: None,
        };
        let reply = g.request_work(host, &req, T0).unwrap();
        let unit = sign::verify_unit(&pk, &reply.units[0]).unwrap();
        let (summary, file) = result_for(&unit, 2);
        g.persist().unwrap();
        store.disk().fill_after(writes);
        let uploaded = g
            .upload(host, unit.unit_id, summary, &file, None, T0 + 100)
            .is_ok()
            && g.persist().is_ok();
        store.disk().free();
        // A new process on what the disk holds.
        let mut g = open(Arc::new(store.reopen()));
        let job_final = g.jobs[&unit.job_id].state.is_final();
        let running = g.round_state(round) == Some(RoundState::Running);
        g.tick(T0 + 200).unwrap();
        let after = g.round_state(round);
        if uploaded || job_final {
            assert_eq!(after, Some(RoundState::Done), "{writes} writes");
            ended_on_disk_only_by_the_tick += usize::from(running);
        } else {
            assert_eq!(after, Some(RoundState::Running), "{writes} writes");
        }
    }
    assert!(
        ended_on_disk_only_by_the_tick > 0,
        "some write stopped between the job's end and the round's"
    );
}
