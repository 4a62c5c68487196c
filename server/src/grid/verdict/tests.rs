//! Tests of validation: checks, third copies, distrust.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::linkfile;
use beebot_shared::sign::WorkUnit;

use crate::validate::{self, ValidateMode};
use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::LinkRecord;

/// A grid with `sites` sites, `hosts` hosts and a round validating `mode`.
fn validating(sites: usize, hosts: usize, mode: ValidateMode) -> (Fx, Vec<u64>) {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(sites), T0).unwrap();
    let ids = (0..hosts).map(|_| fx.host()).collect();
    let p = RoundParams {
        validate: mode,
        ..params(3)
    };
    fx.grid.start_round(p, T0).unwrap();
    (fx, ids)
}

/// Upload a natural-end result of `records` for `unit`.
fn upload_records(
    fx: &mut Fx,
    host: u64,
    unit: &WorkUnit,
    records: &[LinkRecord],
    now: u64,
) -> UploadOutcome {
    let file = linkfile::encode(&header_for(unit, records.len()), records).unwrap();
    fx.grid
        .upload(host, unit.unit_id, summary(records.len()), &file, None, now)
        .unwrap()
}

/// What a liar returns for `site`: links that do not exist.
fn fabricated(site: &str, n: usize) -> Vec<LinkRecord> {
    (0..n)
        .map(|i| LinkRecord {
            source_url: format!("http://{site}/made-up{}", i % 3),
            target_url: format!("http://{site}/nowhere{i}"),
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: String::new(),
        })
        .collect()
}

#[test]
fn an_untrusted_hosts_result_is_checked_by_another_hosts_scan() {
    let (mut fx, h) = validating(1, 2, ValidateMode::Adaptive);
    let u = fx.one(h[0], &[], T0);
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    // Not done: it waits for another host's scan, which the author may not make.
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.validation, JobValidation::Pending);
    assert!(job.result.is_none());
    assert_eq!(job.candidates.len(), 1);
    nothing_for(&mut fx, h[0], T0 + 2000);
    // Its speed is not learned from a result not yet validated.
    assert_eq!(fx.host_rec(h[0]).avg_pages_per_s, None);
    assert_eq!(fx.host_rec(h[0]).jobs_done, 0);
    let v = fx.one(h[1], &[], T0 + 3000);
    assert_eq!(v.job_id, u.job_id);
    assert!(v.resume.is_none(), "a check scans the site afresh");
    assert_eq!(fx.upload(h[1], &v, 6, T0 + 4000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    assert_eq!(job.validation, JobValidation::Valid);
    assert!(job.candidates.iter().all(|c| c.verdict == Verdict::Valid));
    // The first result is kept; the check's file is removed.
    assert_eq!(job.result.as_ref().unwrap().unit_id, u.unit_id);
    assert!(fx.has_link(&lf_name(&u)));
    assert!(!fx.has_link(&lf_name(&v)));
    for id in &h {
        let rec = fx.host_rec(*id);
        assert_eq!((rec.consecutive_valid, rec.valid_results), (1, 1));
        assert!(rec.avg_pages_per_s.is_some(), "learned once valid");
    }
    assert_eq!(fx.host_rec(h[0]).jobs_done, 1);
    assert_eq!(fx.round_state(job.round_id), RoundState::Done);
    // Trust and every figure learned are stored (each host written once,
    // after all of the result's changes to it).
    let learned = |r: &HostRecord| {
        (
            (r.jobs_done, r.pages_done, r.bytes_done, r.seconds_done),
            (r.avg_pages_per_s, r.avg_kb_per_s),
            (r.consecutive_valid, r.valid_results, r.invalid_results),
        )
    };
    let before: Vec<_> = h.iter().map(|id| learned(&fx.host_rec(*id))).collect();
    let (dir, key) = (fx.dir.path().to_path_buf(), fx.key.clone());
    drop(fx.grid);
    let g = open_grid(&dir, &key);
    assert_eq!(g.hosts[&h[1]].consecutive_valid, 1);
    let after: Vec<_> = h.iter().map(|id| learned(&g.hosts[id])).collect();
    assert_eq!(after, before);
}

#[test]
fn a_result_that_disagrees_gets_a_third_copy_and_the_liar_loses_its_trust() {
    let (mut fx, h) = validating(2, 3, ValidateMode::All);
    let (liar, honest, third) = (h[0], h[1], h[2]);
    // The liar earned some trust before.
    fx.grid.hosts.get_mut(&liar).unwrap().consecutive_valid = 5;
    let u = fx.one(liar, &[], T0);
    let u2 = fx.one(liar, &[u.unit_id], T0);
    let fake = fabricated(&u.site, 6);
    assert_eq!(
        upload_records(&mut fx, liar, &u, &fake, T0 + 1000),
        UploadOutcome::Accepted
    );
    // Its second result waits for its check too.
    assert_eq!(fx.upload(liar, &u2, 6, T0 + 1000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u2.job_id).validation, JobValidation::Pending);
    let v = fx.one(honest, &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
    assert_eq!(fx.upload(honest, &v, 6, T0 + 3000), UploadOutcome::Accepted);
    // They disagree: a third host scans the site.
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.candidates.len(), 2);
    nothing_for(&mut fx, liar, T0 + 3500);
    let w = fx.one(third, &[], T0 + 4000);
    assert_eq!(w.job_id, u.job_id);
    assert_eq!(fx.upload(third, &w, 6, T0 + 5000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    assert_eq!(job.validation, JobValidation::Valid);
    let verdicts: Vec<Verdict> = job.candidates.iter().map(|c| c.verdict).collect();
    assert_eq!(
        verdicts,
        [Verdict::Invalid, Verdict::Valid, Verdict::Valid],
        "the minority is invalid"
    );
    assert_eq!(job.candidates[0].similarity, Some(0.0));
    assert_eq!(job.result.as_ref().unwrap().unit_id, v.unit_id);
    assert!(!fx.has_link(&lf_name(&u)), "an invalid result's file goes");
    let rec = fx.host_rec(liar);
    assert_eq!(rec.consecutive_valid, 0);
    assert_eq!(rec.avg_pages_per_s, None, "nothing learned from a liar");
    // The liar's other result, not validated yet, is dropped and its
    // job scanned afresh by someone else.
    let job2 = fx.job(u2.job_id);
    let verdicts: Vec<Verdict> = job2.candidates.iter().map(|c| c.verdict).collect();
    assert_eq!(verdicts, [Verdict::Invalid]);
    assert_eq!(fx.host_rec(liar).invalid_results, 2);
    nothing_for(&mut fx, liar, T0 + 5500);
    assert_eq!(job2.state, JobState::Queued);
    assert_eq!(job2.validation, JobValidation::None);
    assert!(!fx.has_link(&lf_name(&u2)));
    assert!(job2.reasons.iter().any(|r| r.contains("found lying")));
}

#[test]
fn a_trusted_host_is_checked_only_when_drawn_for_a_spot_check() {
    // trust_after is 2 in these tests, spot checks 0%.
    let (mut fx, h) = validating(5, 2, ValidateMode::Adaptive);
    fx.grid.hosts.get_mut(&h[0]).unwrap().consecutive_valid = 2;
    assert!(fx.grid.is_trusted(h[0]));
    let u = fx.one(h[0], &[], T0);
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(
        (job.state, job.validation),
        (JobState::Done, JobValidation::Trusted)
    );
    assert_eq!(
        fx.host_rec(h[0]).jobs_done,
        1,
        "a trusted result is learned at once"
    );
    // Every result drawn: the trusted host's result waits for its check,
    // which goes to a host that is not its author.
    fx.grid.settings.spot_check_percent = 100;
    let u = fx.one(h[0], &[], T0 + 2000);
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 3000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).validation, JobValidation::Pending);
    let v = fx.one(h[1], &[], T0 + 4000);
    assert_eq!(v.job_id, u.job_id, "the check comes first in list order");
    // With validation off, nothing is ever checked.
    let (mut fx, h) = validating(1, 1, ValidateMode::Off);
    let u = fx.one(h[0], &[], T0);
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).validation, JobValidation::Off);
    assert_eq!(fx.job(u.job_id).state, JobState::Done);
}

#[test]
fn a_check_goes_to_a_trusted_host_while_one_is_online() {
    let (mut fx, h) = validating(2, 3, ValidateMode::Adaptive);
    let (author, untrusted, trusted) = (h[0], h[1], h[2]);
    fx.grid.hosts.get_mut(&trusted).unwrap().consecutive_valid = 2;
    let u = fx.one(author, &[], T0);
    assert_eq!(fx.upload(author, &u, 6, T0 + 1000), UploadOutcome::Accepted);
    // The untrusted host gets the other site, not the check.
    let (units, _) = fx.ask(untrusted, 4, &[], T0 + 1500);
    assert!(units.iter().all(|x| x.job_id != u.job_id), "{units:?}");
    let v = fx.one(trusted, &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
}

/// A host not trusted checks a trusted host's result only while no
/// other trusted host is online (the queue shows it that one result, not
/// the round's results under check).
#[test]
fn an_untrusted_host_checks_a_result_only_when_no_other_trusted_host_is_online() {
    for other_trusted_online in [false, true] {
        let (mut fx, h) = validating(1, 3, ValidateMode::All);
        let (author, untrusted, other) = (h[0], h[1], h[2]);
        fx.grid.hosts.get_mut(&author).unwrap().consecutive_valid = 2;
        if other_trusted_online {
            fx.grid.hosts.get_mut(&other).unwrap().consecutive_valid = 2;
        }
        let u = fx.one(author, &[], T0);
        // The other host is heard from (and gets nothing: one site).
        let (none, _) = fx.ask(other, 2, &[], T0 + 100);
        assert!(none.is_empty());
        assert_eq!(fx.upload(author, &u, 6, T0 + 1000), UploadOutcome::Accepted);
        assert_eq!(fx.grid.open[&u.round_id].queue.checks_len(), 1);
        let (units, _) = fx.ask(untrusted, 2, &[], T0 + 1500);
        let got: Vec<u64> = units.iter().map(|x| x.job_id).collect();
        if other_trusted_online {
            assert!(got.is_empty(), "{got:?}");
            assert_eq!(fx.one(other, &[], T0 + 2000).job_id, u.job_id);
        } else {
            assert_eq!(got, vec![u.job_id]);
        }
    }
}

#[test]
fn results_that_never_agree_fail_the_job_and_nobody_loses_trust() {
    let (mut fx, h) = validating(1, validate::MAX_RESULTS_PER_JOB, ValidateMode::All);
    let mut t = T0;
    for (i, host) in h.iter().enumerate() {
        let u = fx.one(*host, &[], t);
        let mine = fabricated(&format!("{}/{i}", u.site), 5);
        let mine: Vec<LinkRecord> = mine
            .into_iter()
            .map(|mut r| {
                r.source_url = format!("http://{}/p{i}", u.site);
                r
            })
            .collect();
        assert_eq!(
            upload_records(&mut fx, *host, &u, &mine, t + 500),
            UploadOutcome::Accepted
        );
        t += 1000;
    }
    let job = fx.job(fx.grid.jobs.keys().copied().next().unwrap());
    assert_eq!(
        (job.state, job.validation),
        (JobState::Failed, JobValidation::Invalid)
    );
    assert!(
        job.reasons.last().unwrap().contains("never agreed"),
        "{:?}",
        job.reasons
    );
    assert!(h.iter().all(|id| fx.host_rec(*id).invalid_results == 0));
    assert_eq!(fx.round_state(job.round_id), RoundState::Done);
}

#[test]
fn a_liars_scans_that_others_continue_are_dropped_and_the_site_starts_over() {
    let (mut fx, h) = validating(2, 3, ValidateMode::All);
    let (liar, honest, third) = (h[0], h[1], h[2]);
    let u = fx.one(liar, &[], T0);
    let u2 = fx.one(liar, &[u.unit_id], T0);
    // The liar's scan of the second site stops early: a segment the job
    // continues from.
    assert_eq!(
        fx.upload_partial(liar, &u2, 6, 3, T0 + 500),
        UploadOutcome::Accepted
    );
    assert_eq!(fx.job(u2.job_id).segments.len(), 1);
    let fake = fabricated(&u.site, 6);
    assert_eq!(
        upload_records(&mut fx, liar, &u, &fake, T0 + 1000),
        UploadOutcome::Accepted
    );
    // An honest host continues the second site from the liar's frontier.
    let (units, _) = fx.ask(honest, 2, &[], T0 + 2000);
    let cont = units
        .iter()
        .find(|x| x.job_id == u2.job_id)
        .unwrap()
        .clone();
    assert!(cont.resume.is_some());
    let check = units.iter().find(|x| x.job_id == u.job_id).unwrap().clone();
    assert_eq!(
        fx.upload(honest, &check, 6, T0 + 3000),
        UploadOutcome::Accepted
    );
    let w = fx.one(third, &[], T0 + 4000);
    assert_eq!(w.job_id, u.job_id);
    assert_eq!(fx.upload(third, &w, 6, T0 + 5000), UploadOutcome::Accepted);
    assert_eq!(fx.host_rec(liar).invalid_results, 1);
    // The second site starts over from its seed: the liar's segment is
    // dropped, and the continuation built on it is stopped.
    let job2 = fx.job(u2.job_id);
    assert!(job2.segments.is_empty());
    assert_eq!(job2.chain, 1);
    assert_eq!(job2.state, JobState::Queued);
    assert!(!fx.has_link(&lf_name(&u2)));
    assert!(matches!(
        fx.grid
            .progress(honest, cont.unit_id, 5, 5, T0 + 6000)
            .unwrap(),
        ProgressOutcome::Abort(_)
    ));
    assert_eq!(
        fx.upload(honest, &cont, 6, T0 + 6500),
        UploadOutcome::Duplicate,
        "a result built on a dropped frontier is not kept"
    );
    let fresh = fx.one(honest, &[], T0 + 7000);
    assert_eq!(fresh.job_id, u2.job_id);
    assert!(fresh.resume.is_none());
}

#[test]
fn results_that_disagree_with_no_other_host_to_scan_again_fail_the_job() {
    let (mut fx, h) = validating(1, 2, ValidateMode::All);
    let u = fx.one(h[0], &[], T0);
    let fake = fabricated(&u.site, 6);
    assert_eq!(
        upload_records(&mut fx, h[0], &u, &fake, T0 + 500),
        UploadOutcome::Accepted
    );
    let v = fx.one(h[1], &[], T0 + 1000);
    assert_eq!(fx.upload(h[1], &v, 6, T0 + 2000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(
        (job.state, job.validation),
        (JobState::Failed, JobValidation::Invalid)
    );
    assert!(
        job.reasons.last().unwrap().contains("no other host"),
        "{:?}",
        job.reasons
    );
    assert_eq!(fx.round_state(job.round_id), RoundState::Done);
}

/// At a delay above 0: the liar's other result, uploaded just before its
/// lie is found and still settling outside the queue, is dropped with the
/// others.
#[test]
fn a_liars_result_still_settling_is_dropped_when_its_lie_is_found() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(2), T0).unwrap();
    let h: Vec<u64> = (0..3).map(|_| fx.host()).collect();
    let p = RoundParams {
        validate: ValidateMode::All,
        delay_ms: 1000,
        ..params(3)
    };
    let round = fx.grid.start_round(p, T0).unwrap();
    let (liar, honest, third) = (h[0], h[1], h[2]);
    let u = fx.one(liar, &[], T0);
    let u2 = fx.one(liar, &[u.unit_id], T0);
    let fake = fabricated(&u.site, 6);
    assert_eq!(
        upload_records(&mut fx, liar, &u, &fake, T0 + 1000),
        UploadOutcome::Accepted
    );
    let v = fx.one(honest, &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
    assert_eq!(fx.upload(honest, &v, 6, T0 + 3000), UploadOutcome::Accepted);
    let w = fx.one(third, &[], T0 + 4000);
    assert_eq!(w.job_id, u.job_id);
    assert_eq!(fx.upload(liar, &u2, 6, T0 + 4900), UploadOutcome::Accepted);
    assert!(fx.grid.open[&round].settling.contains(&u2.job_id));
    assert_eq!(fx.upload(third, &w, 6, T0 + 5000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).validation, JobValidation::Valid);
    let job2 = fx.job(u2.job_id);
    let verdicts: Vec<Verdict> = job2.candidates.iter().map(|c| c.verdict).collect();
    assert_eq!(verdicts, [Verdict::Invalid]);
    assert_eq!(fx.host_rec(liar).invalid_results, 2);
}

/// The check's file stays until its driver takes the changes (after the
/// sync), and the round the verdict ended is closed after that removal,
/// never before it.
#[test]
fn the_checks_file_goes_after_the_sync_and_its_round_closes_after_it() {
    let (mut fx, h) = validating(1, 2, ValidateMode::Adaptive);
    let u = fx.one(h[0], &[], T0);
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let v = fx.one(h[1], &[], T0 + 3000);
    assert_eq!(fx.upload(h[1], &v, 6, T0 + 4000), UploadOutcome::Accepted);
    let round = fx.job(u.job_id).round_id;
    assert_eq!(fx.round_state(round), RoundState::Done);
    let held = fx.grid.link_files().names().unwrap();
    assert!(held.contains(&lf_name(&v)), "removed before the sync");
    let changes = fx.grid.take_link_changes();
    assert_eq!(changes.removals, vec![lf_name(&v)]);
    assert_eq!(changes.ended_rounds, vec![round]);
    changes.apply(fx.grid.link_files());
    assert!(!fx.has_link(&lf_name(&v)));
    assert!(fx.has_link(&lf_name(&u)), "the kept result's file stays");
    let none = fx.grid.take_link_changes();
    assert!(none.removals.is_empty() && none.ended_rounds.is_empty());
}

/// A result in two scans (a segment by one host, its continuation by
/// another) kept at once: both hosts learn from their own scan, and every
/// figure is stored (each host written once, after all of its changes).
#[test]
fn both_hosts_of_a_kept_chain_learn_and_their_figures_are_stored() {
    let (mut fx, h) = validating(1, 2, ValidateMode::Off);
    let u = fx.one(h[0], &[], T0);
    assert_eq!(
        fx.upload_partial(h[0], &u, 3, 3, T0 + 1000),
        UploadOutcome::Accepted
    );
    let v = fx.one(h[1], &[], T0 + 3000);
    assert_eq!(v.job_id, u.job_id, "the continuation");
    assert_eq!(fx.upload(h[1], &v, 6, T0 + 4000), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).state, JobState::Done);
    let learned = |r: &HostRecord| {
        (
            (r.jobs_done, r.pages_done, r.bytes_done, r.seconds_done),
            (r.avg_pages_per_s, r.avg_kb_per_s),
        )
    };
    let before: Vec<_> = h.iter().map(|id| learned(&fx.host_rec(*id))).collect();
    // Each host learned from its own scan; the job counts for the last.
    assert!(before.iter().all(|(_, (speed, _))| speed.is_some()));
    assert_eq!((before[0].0 .0, before[1].0 .0), (0, 1));
    let (dir, key) = (fx.dir.path().to_path_buf(), fx.key.clone());
    drop(fx.grid);
    let g = open_grid(&dir, &key);
    let after: Vec<_> = h.iter().map(|id| learned(&g.hosts[id])).collect();
    assert_eq!(after, before);
}

/// A result pieced together by both hosts of a grid of two (a scan handed
/// over from `h[0]` to `h[1]`): no host outside its authors is left to
/// check it. Returns the job and its two units.
fn pieced_by_both(fx: &mut Fx, h: &[u64]) -> (u64, WorkUnit, WorkUnit) {
    let u = fx.one(h[0], &[], T0);
    assert_eq!(
        fx.upload_partial(h[0], &u, 3, 3, T0 + 1000),
        UploadOutcome::Accepted
    );
    let v = fx.one(h[1], &[], T0 + 2000);
    assert_eq!((v.job_id, v.resume.is_some()), (u.job_id, true));
    assert_eq!(fx.upload(h[1], &v, 6, T0 + 3000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.validation, JobValidation::Pending);
    assert_eq!(job.authors(), h.to_vec());
    (u.job_id, u, v)
}

/// Regression: a result pieced together by every host of the grid could
/// never be checked (its authors may not), and the round hung with idle
/// hosts. The author whose scans made the least of it scans the site
/// afresh; its result, agreeing, ends the job.
#[test]
fn a_result_every_host_wrote_part_of_is_checked_by_a_fresh_scan_of_one_of_them() {
    let (mut fx, h) = validating(1, 2, ValidateMode::Adaptive);
    let (job_id, ..) = pieced_by_both(&mut fx, &h);
    // h[1] wrote most of it: the fresh scan is h[0]'s.
    nothing_for(&mut fx, h[1], T0 + 4000);
    let w = fx.one(h[0], &[], T0 + 5000);
    assert_eq!(w.job_id, job_id);
    assert!(
        w.resume.is_none(),
        "the fallback check scans the site afresh"
    );
    assert_eq!(fx.upload(h[0], &w, 6, T0 + 6000), UploadOutcome::Accepted);
    let job = fx.job(job_id);
    assert_eq!(job.state, JobState::Done);
    assert_eq!(job.validation, JobValidation::Valid);
    let round = job.round_id;
    assert_eq!(fx.round_state(round), RoundState::Done);
}

#[test]
fn a_fresh_scan_that_disagrees_with_a_result_nobody_else_can_check_fails_the_job() {
    let (mut fx, h) = validating(1, 2, ValidateMode::Adaptive);
    let (job_id, ..) = pieced_by_both(&mut fx, &h);
    let w = fx.one(h[0], &[], T0 + 5000);
    let lie = fabricated(&w.site, 6);
    assert_eq!(
        upload_records(&mut fx, h[0], &w, &lie, T0 + 6000),
        UploadOutcome::Accepted
    );
    // The round ends: the job failed, and says why.
    let job = fx.job(job_id);
    assert_eq!(job.state, JobState::Failed);
    assert!(
        job.reasons.iter().any(|r| r.contains("disagree")),
        "{:?}",
        job.reasons
    );
    assert_eq!(fx.round_state(job.round_id), RoundState::Done);
    // Nobody is asked to scan it again.
    nothing_for(&mut fx, h[0], T0 + 7000);
    nothing_for(&mut fx, h[1], T0 + 7000);
}

/// A site in two running rounds: when its scan in the one is kept, the
/// site's pace that scan showed reaches its job queued in the other (the
/// index of open jobs stays equal to one built afresh).
#[test]
fn a_sites_new_pace_reaches_its_job_in_another_running_round() {
    let (mut fx, h) = validating(1, 1, ValidateMode::Off);
    let u = fx.one(h[0], &[], T0);
    let second = fx.grid.start_round(params(3), T0 + 10).unwrap();
    assert_ne!(u.round_id, second);
    let queued = |fx: &Fx| {
        let v: Vec<_> = fx.grid.open[&second].queue.iter().cloned().collect();
        assert_eq!(v.len(), 1);
        v[0].pace_s
    };
    assert_eq!(queued(&fx), 0.0, "the site was never scanned");
    // 3 pages in 1.5 s at delay 0: the site adds 0.5 s a page.
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let want = crate::scheduler::class_pace(crate::scheduler::pace_class(0.5));
    assert!(want > 0.0);
    assert_eq!(queued(&fx), want);
    fx.grid.check_derived();
}

/// A job's pace from its last scan in the round is kept as first indexed:
/// its host's speed changing later moves neither the job's place in the
/// queue nor the index away from one built afresh.
#[test]
fn a_scans_pace_is_kept_when_its_hosts_speed_changes() {
    let (mut fx, h) = validating(1, 1, ValidateMode::Off);
    let u = fx.one(h[0], &[], T0);
    // 3 pages in 1.5 s at delay 0, by a host of 5 pages/s (0.2 s its own).
    fx.grid.benchmark(h[0], 5.0, 500.0, 2, T0).unwrap();
    assert_eq!(
        fx.upload_partial(h[0], &u, 3, 3, T0 + 1000),
        UploadOutcome::Accepted
    );
    let pace = |fx: &Fx| {
        let open = &fx.grid.open[&u.round_id];
        open.queue.get(u.job_id).expect("queued again").pace_s
    };
    let first = pace(&fx);
    let want = crate::scheduler::class_pace(crate::scheduler::pace_class(0.3));
    assert_eq!(first, want);
    // At 100 pages/s the same scan would show 0.49 s: another class.
    fx.grid.benchmark(h[0], 100.0, 500.0, 2, T0 + 2000).unwrap();
    assert_ne!(
        crate::scheduler::pace_class(0.49),
        crate::scheduler::pace_class(0.3)
    );
    // Indexed again (as any change to the job does), the job keeps it.
    fx.grid.reindex(u.job_id);
    assert_eq!(pace(&fx), first);
    fx.grid.check_derived();
}

/// Over 20 rounds in which every result is checked by a second host's
/// scan (the check's file removed once the two agree), the link packs hold
/// only what the kept results need: each round's packs are compacted when
/// it ends (the check files and the removals' own frames go), byte for
/// byte the kept files' frames.
#[test]
fn twenty_checked_rounds_grow_the_packs_only_by_the_kept_results() {
    let dir = tempfile::tempdir().unwrap();
    let key = beebot_shared::sign::generate_key();
    let packs = std::sync::Arc::new(LinkPacks::writer(dir.path().join("links")));
    let io = GridIo {
        links: packs.clone(),
        signer: std::sync::Arc::new(key.clone()),
        rng: Box::new(rand::rngs::OsRng),
    };
    let store = crate::store::open(&dir.path().join("db")).unwrap();
    let grid = Stored::open(store, io, settings());
    let mut fx = Fx { dir, key, grid };
    fx.grid.add_sites(&site_names(3), T0).unwrap();
    let h = [fx.host(), fx.host()];
    let mut now = T0;
    for _ in 0..20 {
        let p = RoundParams {
            validate: ValidateMode::All,
            ..params(3)
        };
        let round = fx.grid.start_round(p, now).unwrap();
        for step in 0.. {
            assert!(step < 40, "the round does not end");
            if fx.round_state(round) == RoundState::Done {
                break;
            }
            now += 1000;
            let host = h[step % 2];
            let (units, _) = fx.ask(host, 1, &[], now);
            for u in units {
                assert_eq!(fx.upload(host, &u, 6, now + 500), UploadOutcome::Accepted);
            }
        }
        let jobs = fx.grid.rounds[&round].job_ids.clone();
        assert!(jobs.iter().all(|j| fx.job(*j).state == JobState::Done));
        assert!(jobs.iter().all(|j| fx.job(*j).candidates.len() == 2));
    }
    packs.wait_compactions();
    // Rounds that ended while MAX_COMPACTIONS were running are compacted
    // by the check at the next start, as here.
    for round in fx.grid.rounds.keys() {
        packs.compact_ended(*round);
    }
    let mut live = 0u64;
    for name in packs.names().unwrap() {
        let key = name.rsplit_once('/').map_or(name.as_str(), |(_, k)| k);
        live += (super::super::packs::HEAD_BYTES + key.len()) as u64
            + packs.read(&name).unwrap().len() as u64;
    }
    let mut held = 0u64;
    for round in std::fs::read_dir(packs.dir()).unwrap() {
        for (_, len, whole) in super::super::packs::pack_files(&round.unwrap().path()).unwrap() {
            assert_eq!(len, whole);
            held += len;
        }
    }
    assert_eq!(
        held, live,
        "the packs hold the kept results' frames, no more"
    );
    // Every kept result reads whole.
    for j in fx.grid.jobs.values() {
        let r = j.result.as_ref().expect("kept");
        assert!(!packs.read(&r.file).unwrap().is_empty());
    }
}

/// One site, hosts of `speeds` pages/s (in order), and an `adaptive`
/// round checking every result at politeness delay `delay_ms`.
fn checked_round(speeds: &[f64], delay_ms: u64) -> (Fx, Vec<u64>) {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(1), T0).unwrap();
    let h: Vec<u64> = speeds.iter().map(|_| fx.host()).collect();
    for (&id, &pps) in h.iter().zip(speeds) {
        fx.grid.benchmark(id, pps, pps * 100.0, 2, T0).unwrap();
    }
    let p = RoundParams {
        validate: ValidateMode::All,
        policy: "adaptive".into(),
        delay_ms,
        ..params(3)
    };
    fx.grid.start_round(p, T0).unwrap();
    (fx, h)
}

/// A result under check goes to a host that may check it even when its
/// author is far faster and online: the adaptive policy defers to a
/// faster host only among those that may take the job, so the round
/// never waits for a host that may not. With a politeness delay and
/// without.
#[test]
fn a_check_is_not_kept_for_its_faster_author() {
    for delay_ms in [0, 1000] {
        let (mut fx, h) = checked_round(&[50.0, 1.0], delay_ms);
        let (fast, slow) = (h[0], h[1]);
        let u = fx.one(fast, &[], T0);
        assert_eq!(fx.upload(fast, &u, 6, T0 + 10_000), UploadOutcome::Accepted);
        // The author, online, may not check its own result.
        nothing_for(&mut fx, fast, T0 + 15_000);
        let v = fx.one(slow, &[], T0 + 20_000);
        assert_eq!(v.job_id, u.job_id, "delay {delay_ms} ms");
    }
}

/// A trusted host checks a result even when a faster host that is not
/// trusted is online: that host may not check it while the trusted one
/// is, so the check is not kept for it (the trusted host is idle with
/// nothing else to take). With a politeness delay and without.
#[test]
fn a_check_is_not_kept_for_a_faster_host_not_trusted() {
    for delay_ms in [0, 1000] {
        let (mut fx, h) = checked_round(&[100.0, 50.0, 1.0], delay_ms);
        let (author, fast, trusted) = (h[0], h[1], h[2]);
        fx.grid.hosts.get_mut(&trusted).unwrap().consecutive_valid = 2;
        let u = fx.one(author, &[], T0);
        assert_eq!(
            fx.upload(author, &u, 6, T0 + 10_000),
            UploadOutcome::Accepted
        );
        // The fast host, not trusted, is online and may not check it.
        nothing_for(&mut fx, fast, T0 + 15_000);
        let v = fx.one(trusted, &[], T0 + 20_000);
        assert_eq!(v.job_id, u.job_id, "delay {delay_ms} ms");
    }
}

/// A host that gave a check back gets it again while the only other host
/// online is the result's author (who may not check it).
#[test]
fn a_check_given_back_comes_back_when_only_its_author_is_online() {
    let (mut fx, h) = validating(1, 2, ValidateMode::All);
    let (author, checker) = (h[0], h[1]);
    let u = fx.one(author, &[], T0);
    assert_eq!(fx.upload(author, &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let v = fx.one(checker, &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
    fx.grid
        .fail(checker, v.unit_id, "robots.txt unavailable", T0 + 3000)
        .unwrap();
    nothing_for(&mut fx, author, T0 + 3500);
    let again = fx.one(checker, &[], T0 + 4000);
    assert_eq!(again.job_id, u.job_id);
}

/// A trusted host that gave a check back gets it again while the only
/// other host online that is not its author is not trusted (and so may
/// not check it while a trusted host is online).
#[test]
fn a_check_given_back_comes_back_when_only_untrusted_hosts_are_left() {
    let (mut fx, h) = validating(1, 3, ValidateMode::All);
    let (author, trusted, untrusted) = (h[0], h[1], h[2]);
    fx.grid.hosts.get_mut(&trusted).unwrap().consecutive_valid = 2;
    let u = fx.one(author, &[], T0);
    assert_eq!(fx.upload(author, &u, 6, T0 + 1000), UploadOutcome::Accepted);
    nothing_for(&mut fx, untrusted, T0 + 1500);
    let v = fx.one(trusted, &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
    fx.grid
        .fail(trusted, v.unit_id, "robots.txt unavailable", T0 + 3000)
        .unwrap();
    nothing_for(&mut fx, author, T0 + 3500);
    nothing_for(&mut fx, untrusted, T0 + 3600);
    let again = fx.one(trusted, &[], T0 + 4000);
    assert_eq!(again.job_id, u.job_id);
}

/// A site scanned whose result waits for its check is counted as scanned
/// on every screen: its pages stay in the round's count (they never drop
/// when the check starts), the site says what it waits for, progress
/// counts it as half, and with one host the round says it cannot end and
/// names `--validate off`.
#[test]
fn a_result_waiting_for_its_check_counts_and_says_what_it_waits_for() {
    use crate::api::{waiting_note, JobCounts};
    let (mut fx, h) = validating(2, 2, ValidateMode::All);
    let u = fx.one(h[0], &[], T0);
    fx.grid.progress(h[0], u.unit_id, 3, 6, T0 + 500).unwrap();
    let scanning = JobCounts::of(&[fx.job(u.job_id)]).pages;
    assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued, "it waits for its check");
    assert_eq!(job.check_wait(), Some(crate::model::WAITING_FOR_CHECK));
    let counts = JobCounts::of(std::slice::from_ref(&job));
    assert_eq!(counts.pages, 3, "the scanned pages still count");
    assert!(counts.pages >= scanning);
    assert_eq!(counts.links, 6);
    assert_eq!(counts.scanned_to_check, 1);
    assert_eq!(counts.progress(), 0.5, "one scan of the two it needs");

    let (round, jobs) = fx.grid.round(job.round_id).unwrap();
    let all = JobCounts::of_round(&round, &jobs);
    let one_host = waiting_note(&round, &all, 1).expect("one host cannot check");
    assert!(one_host.contains("--validate off"), "{one_host}");
    assert_eq!(waiting_note(&round, &all, 2), None, "a second host can");

    // The check runs: the site says so, and its pages do not drop to the
    // checker's first report.
    let v = fx.one(h[1], &[], T0 + 2000);
    assert_eq!(v.job_id, u.job_id);
    fx.grid.progress(h[1], v.unit_id, 1, 1, T0 + 2500).unwrap();
    let job = fx.job(u.job_id);
    assert_eq!(job.check_wait(), Some(crate::model::BEING_CHECKED));
    assert_eq!(JobCounts::of(&[job]).pages, 3);
}
