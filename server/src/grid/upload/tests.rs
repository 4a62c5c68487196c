//! Tests of uploads: summaries, link files, duplicates and frontiers.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::limits::{PACE_FREE_PAGES, PACE_TOLERANCE};
use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::scanstate::{state_sha256, ScanState};
use beebot_shared::scope::Scope;
use beebot_shared::sign::WorkUnit;

use crate::scheduler;
use beebot_shared::linkfile::LinkRecord;

#[test]
fn a_summary_claiming_more_pages_than_the_unit_allowed_is_rejected() {
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let mut sum = summary(3);
    sum.pages = u64::from(params(5).max_pages) + 1;
    let why = upload_with(&mut fx, a, &u, sum, &records(&u.site, 3), T0 + 1).unwrap();
    assert!(why.contains("unit allowed 50"), "{why}");
    // A continuation may take only what the earlier scans left.
    let u = fx.one(a, &[], T0 + 2);
    let (sum, file, state) = partial_for(&u, 3, 45);
    let mut sum45 = sum.clone();
    sum45.pages = 45;
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum45, &file, Some(&state), T0 + 3)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let v = fx.one(a, &[], T0 + 4);
    assert_eq!(v.job_id, u.job_id);
    let mut sum = summary(3);
    sum.pages = 6;
    let why = upload_with(&mut fx, a, &v, sum.clone(), &records(&v.site, 3), T0 + 5).unwrap();
    assert!(
        why.contains("unit allowed 5 (page cap 50, 45 done before)"),
        "{why}"
    );
    // What is left is fine.
    let w = fx.one(a, &[], T0 + 6);
    sum.pages = 5;
    assert_eq!(
        upload_with(&mut fx, a, &w, sum, &records(&w.site, 3), T0 + 7),
        None
    );
    // A frontier counting more pages than the cap is refused.
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let (sum, file, state) = partial_for(&u, 3, 51);
    match fx
        .grid
        .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 1)
        .unwrap()
    {
        UploadOutcome::Rejected(why) => assert!(why.contains("cap of 50"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_summary_faster_than_the_politeness_delay_is_rejected() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(4), T0).unwrap();
    let mut p = params(5);
    p.delay_ms = 1000;
    fx.grid.start_round(p, T0).unwrap();
    let a = fx.host();
    let one_source = |site: &str, n: usize| -> Vec<LinkRecord> {
        records(site, n)
            .into_iter()
            .map(|mut r| {
                r.source_url = format!("http://{site}/");
                r
            })
            .collect()
    };
    // Ten pages on one origin: nine delays, the first two pages free.
    let least = ((10 - PACE_FREE_PAGES) as f64 * 1000.0 * PACE_TOLERANCE) as u64;
    let u = fx.one(a, &[], T0);
    let mut sum = summary(3);
    sum.pages = 10;
    sum.elapsed_ms = 1000;
    let why = upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 1);
    assert!(why.unwrap().contains("faster than the round's delay"));
    let u = fx.one(a, &[], T0 + 2);
    sum.elapsed_ms = least - 1;
    assert!(upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 3).is_some());
    let u = fx.one(a, &[], T0 + 4);
    sum.elapsed_ms = least;
    assert_eq!(
        upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 5),
        None
    );
    // Two origins (http and https of the site) each keep their own pace.
    let u = fx.one(a, &[], T0 + 6);
    let mut recs = one_source(&u.site, 4);
    recs[2].source_url = format!("https://{}/", u.site);
    recs[3].source_url = format!("https://{}/", u.site);
    sum.links = 4;
    sum.distinct_target_hosts = 4;
    sum.elapsed_ms = ((5 - PACE_FREE_PAGES) as f64 * 1000.0 * PACE_TOLERANCE) as u64;
    assert_eq!(upload_with(&mut fx, a, &u, sum, &recs, T0 + 7), None);
}

#[test]
fn summary_counts_that_do_not_fit_the_file_are_rejected() {
    let (mut fx, _) = Fx::with_round(8, 5);
    let a = fx.host();
    let (units, _) = fx.ask(a, 8, &[], T0);
    type Change = fn(&mut ScanSummary);
    let cases: Vec<(Change, &str)> = vec![
        // Records exist, yet no page was scanned.
        (|s| s.pages = 0, "0 pages"),
        // Records of three pages (p0, p1, p2), two pages claimed.
        (|s| s.pages = 2, "more pages"),
        (|s| s.links += 1, "links"),
        (|s| s.distinct_target_hosts = s.links + 1, "target hosts"),
        (|s| s.link_capped_pages = s.pages + 1, "capped"),
        (|s| s.non_html = s.pages + 1, "non-HTML"),
        (|s| s.links = u64::MAX, "links"),
    ];
    for ((change, what), u) in cases.into_iter().zip(&units) {
        let mut sum = summary(6);
        change(&mut sum);
        let why = upload_with(&mut fx, a, u, sum, &records(&u.site, 6), T0 + 1)
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(why.contains(what), "{what}: {why}");
    }
    // The honest summary of the same file is accepted.
    let u = &units[7];
    assert_eq!(
        upload_with(&mut fx, a, u, summary(6), &records(&u.site, 6), T0 + 2),
        None
    );
}

#[test]
fn uploads_of_attempts_no_longer_wanted_are_refused_before_decoding() {
    let (mut fx, _) = Fx::with_round(4, 3);
    let a = fx.host();
    let not_wanted = |step: UploadStep| matches!(step, UploadStep::Answer(UploadOutcome::Rejected(r)) if r.contains("not wanted"));
    // Given back (Failed).
    let u = fx.one(a, &[], T0);
    fx.grid.fail(a, u.unit_id, "gave up", T0 + 1).unwrap();
    assert!(matches!(
        fx.attempt(u.unit_id).state,
        AttemptState::Failed(_)
    ));
    assert!(not_wanted(
        fx.grid.upload_begin(a, u.unit_id, T0 + 2).unwrap()
    ));
    // Released: a work request that does not list it.
    let v = fx.one(a, &[], T0 + 3);
    let (w, _) = fx.ask(a, 1, &[], T0 + 4);
    assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Released);
    assert!(not_wanted(
        fx.grid.upload_begin(a, v.unit_id, T0 + 5).unwrap()
    ));
    // Expired, its job still open at the same place: a late result is wanted.
    let w = &w[0];
    fx.grid.tick(w.deadline_ms).unwrap();
    assert_eq!(fx.attempt(w.unit_id).state, AttemptState::Expired);
    assert!(matches!(
        fx.grid
            .upload_begin(a, w.unit_id, w.deadline_ms + 1)
            .unwrap(),
        UploadStep::Plan(_)
    ));
    assert_eq!(
        fx.upload(a, w, 2, w.deadline_ms + 2),
        UploadOutcome::Accepted
    );
    // Done: answered `Duplicate` at once.
    assert!(matches!(
        fx.grid
            .upload_begin(a, w.unit_id, w.deadline_ms + 3)
            .unwrap(),
        UploadStep::Answer(UploadOutcome::Duplicate)
    ));
    // A refused result fails the attempt: the next upload is not decoded.
    let x = fx.one(a, &[], w.deadline_ms + 4);
    let (sum, _) = result_for(&x, 2);
    assert!(matches!(
        fx.grid
            .upload(a, x.unit_id, sum.clone(), b"junk", None, w.deadline_ms + 5)
            .unwrap(),
        UploadOutcome::Rejected(_)
    ));
    assert!(not_wanted(
        fx.grid
            .upload_begin(a, x.unit_id, w.deadline_ms + 6)
            .unwrap()
    ));
}

#[test]
fn a_late_result_for_an_open_job_is_accepted_once() {
    // Two sites: the second job stays queued so the round stays open.
    let (mut fx, round) = Fx::with_round(2, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    fx.grid.tick(u.deadline_ms).unwrap();
    // Round-robin offers the expired job first to a host that did not miss it.
    let v = fx.one(b, &[], u.deadline_ms + 1);
    assert_eq!(v.job_id, u.job_id);

    // A's result arrives after its deadline while B is still on the job.
    let late = u.deadline_ms + 10;
    let (sum_a, file_a) = result_for(&u, 4);
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum_a.clone(), &file_a, None, late)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Done);
    assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Aborted);
    let result = job.result.clone().unwrap();
    assert_eq!((result.unit_id, result.host_id), (u.unit_id, a));
    assert_eq!(result.summary, sum_a);
    assert_eq!(result.accepted_ms, late);
    assert_eq!(
        result.file,
        format!("{}/{}-{}.lf", u.round_id, u.job_id, u.unit_id)
    );
    let ha = fx.host_rec(a);
    assert_eq!(
        (ha.jobs_done, ha.pages_done, ha.deadlines_missed),
        (1, 3, 1)
    );
    let site = fx.grid.sites[&u.site].last_scan.clone().unwrap();
    assert_eq!((site.round_id, site.pages, site.links), (round, 3, 4));
    let st = fx.grid.status();
    assert_eq!((st.jobs_done, st.jobs_queued, st.jobs_running), (1, 1, 0));

    // B is told to stop, and its own result is acknowledged and dropped.
    assert_eq!(
        fx.grid.progress(b, v.unit_id, 5, 5, late + 1).unwrap(),
        ProgressOutcome::Abort("job done elsewhere".into())
    );
    let (sum_b, file_b) = result_for(&v, 9);
    for t in [late + 2, late + 3] {
        assert_eq!(
            fx.grid
                .upload(b, v.unit_id, sum_b.clone(), &file_b, None, t)
                .unwrap(),
            UploadOutcome::Duplicate
        );
    }
    assert_eq!(fx.job(u.job_id), job);
    assert_eq!(fx.read_link(&lf_name(&u)), file_a);
    assert_eq!(fx.link_names().len(), 1);
    assert_eq!(fx.host_rec(a), ha);
    let hb = fx.host_rec(b);
    assert_eq!((hb.jobs_done, hb.pages_done, hb.failures), (0, 0, 0));
    assert_eq!(fx.grid.sites[&u.site].last_scan.as_ref(), Some(&site));
    let st = fx.grid.status();
    assert_eq!((st.jobs_done, st.jobs_queued, st.jobs_running), (1, 1, 0));
    assert_eq!(fx.round_state(round), RoundState::Running);
}

#[test]
fn the_same_upload_again_is_a_duplicate() {
    let (mut fx, round) = Fx::with_round(2, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let (sum, file) = result_for(&u, 5);
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum.clone(), &file, None, T0 + 1)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let name = lf_name(&u);
    let held = fx.link_names();
    let packs = pack_files(&fx.links().join(u.round_id.to_string())).unwrap();
    let job = fx.job(u.job_id);
    let host = fx.host_rec(a);
    // The same upload again (a retry after a lost answer), then a different file
    // for the same unit: both acknowledged, neither changes anything.
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &file, None, T0 + 2)
            .unwrap(),
        UploadOutcome::Duplicate
    );
    assert_eq!(fx.upload(a, &u, 7, T0 + 3), UploadOutcome::Duplicate);
    assert_eq!(fx.read_link(&name), file);
    assert_eq!(fx.link_names(), held);
    assert_eq!(held, vec![name]);
    let packed = fx.links().join(u.round_id.to_string());
    assert_eq!(pack_files(&packed).unwrap(), packs, "nothing written again");
    assert_eq!(fx.job(u.job_id), job);
    assert_eq!(fx.host_rec(a).jobs_done, 1);
    assert_eq!(fx.host_rec(a).pages_done, host.pages_done);
    assert_eq!(fx.grid.status().jobs_done, 1);
    assert_eq!(fx.round_state(round), RoundState::Running);
}

#[test]
fn bad_uploads_are_rejected_and_write_nothing() {
    let (mut fx, _) = Fx::with_round(8, 5);
    let a = fx.host();
    let b = fx.host();
    let (units, _) = fx.ask(a, 8, &[], T0);
    assert_eq!(units.len(), 8);
    let now = T0 + 1000;
    let mut rejected = Vec::new();
    let mut expect_rejected =
        |fx: &mut Fx, host: u64, unit_id: u64, sum: ScanSummary, file: &[u8]| match fx
            .grid
            .upload(host, unit_id, sum, file, None, now)
            .unwrap()
        {
            UploadOutcome::Rejected(reason) => {
                assert!(!reason.is_empty());
                rejected.push(reason);
            }
            other => panic!("unit {unit_id}: expected Rejected, got {other:?}"),
        };

    // Not a link file at all.
    expect_rejected(&mut fx, a, units[0].unit_id, summary(0), b"not a link file");
    // A valid file with one byte flipped.
    let (sum, mut file) = result_for(&units[1], 20);
    let mid = file.len() / 2;
    file[mid] ^= 0x40;
    expect_rejected(&mut fx, a, units[1].unit_id, sum, &file);
    // A header for another unit, another round, another site.
    let (sum, file) = result_for(&units[3], 2);
    expect_rejected(&mut fx, a, units[2].unit_id, sum, &file);
    let mut h = header_for(&units[3], 2);
    h.round_id += 1000;
    let file = linkfile::encode(&h, &records(&units[3].site, 2)).unwrap();
    expect_rejected(&mut fx, a, units[3].unit_id, summary(2), &file);
    let mut h = header_for(&units[4], 2);
    h.site = "elsewhere.test".into();
    let file = linkfile::encode(&h, &records(&units[4].site, 2)).unwrap();
    expect_rejected(&mut fx, a, units[4].unit_id, summary(2), &file);
    // A summary whose link count disagrees with the file.
    let (_, file) = result_for(&units[5], 3);
    expect_rejected(&mut fx, a, units[5].unit_id, summary(4), &file);
    // A unit issued to another host, with an otherwise valid file.
    let (sum, file) = result_for(&units[6], 3);
    expect_rejected(&mut fx, b, units[6].unit_id, sum.clone(), &file);
    // A unit nobody issued.
    expect_rejected(&mut fx, a, 987_654_321, sum, &file);
    assert_eq!(rejected.len(), 8);
    assert!(rejected[5].contains("summary"));
    assert!(rejected[6].contains("not issued"));
    assert!(rejected[7].contains("unknown unit"));

    assert!(fx.link_names().is_empty(), "nothing stored");
    // A refused result ends its attempt: the job goes back to the queue.
    for u in &units[..6] {
        assert!(matches!(
            fx.attempt(u.unit_id).state,
            AttemptState::Failed(_)
        ));
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued);
        assert!(job.result.is_none());
        assert_eq!(job.reasons.len(), 1);
    }
    assert_eq!(fx.host_rec(a).failures, 6);
    assert_eq!(fx.host_rec(a).jobs_done, 0);
    // Another host's upload does not touch the owner's attempt nor count against it.
    assert_eq!(fx.attempt(units[6].unit_id).state, AttemptState::Running);
    assert_eq!(fx.job(units[6].job_id).state, JobState::Running);
    assert_eq!(fx.host_rec(b).failures, 0);
    assert_eq!(fx.grid.status().jobs_done, 0);
}

#[test]
fn an_accepted_link_file_is_durable_and_decodes() {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let (sum, file) = result_for(&u, 12);
    assert!(!fx.has_link(&lf_name(&u)));
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &file, None, T0 + 1)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let name = lf_name(&u);
    let location = fx.grid.link_files().location(&name);
    assert!(
        location.starts_with(&fx.links().display().to_string()) && location.contains(&name),
        "{location}"
    );
    let on_disk = fx.read_link(&name);
    assert_eq!(on_disk, file);
    let (h, recs) = linkfile::decode(&on_disk).unwrap();
    assert_eq!(h, header_for(&u, 12));
    assert_eq!(recs, records(&u.site, 12));
    assert_eq!(fx.link_names(), vec![name.clone()]);
    let job = fx.job(u.job_id);
    assert_eq!(
        job.result.unwrap().file,
        name,
        "the stored relative name names the file"
    );
}

/// A result with a record from a page on an excluded host inside the
/// scope is refused: a crawl never requests such a page.
#[test]
fn a_record_from_an_excluded_host_is_refused() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&["t.test".into()], T0).unwrap();
    fx.grid
        .exclude(excl("lab.t.test"), "lab asked", T0)
        .unwrap();
    let mut p = params(3);
    p.scope = Scope::Domain;
    fx.grid.start_round(p, T0).unwrap();
    let a = fx.host();
    let unit = fx.one(a, &[], T0);
    assert_eq!(unit.exclusions, vec![excl("lab.t.test")]);
    let mut recs = records("t.test", 3);
    recs[2].source_url = "http://www.lab.t.test/p".into();
    let file = linkfile::encode(&header_for(&unit, 3), &recs).unwrap();
    let out = fx
        .grid
        .upload(a, unit.unit_id, summary(3), &file, None, T0 + 1)
        .unwrap();
    assert!(
        matches!(&out, UploadOutcome::Rejected(m) if m.contains("www.lab.t.test")),
        "{out:?}"
    );
    // The job goes on; the same result without that record is taken
    // (the source is inside the domain scope: only the exclusion refused it).
    let again = fx.one(a, &[], T0 + 2);
    let file = linkfile::encode(&header_for(&again, 2), &recs[..2]).unwrap();
    let out = fx
        .grid
        .upload(a, again.unit_id, summary(2), &file, None, T0 + 3)
        .unwrap();
    assert_eq!(out, UploadOutcome::Accepted);
}

/// The steps the server runs apart (the link file is verified and
/// written outside the grid lock), interleaved: two copies of a job and
/// the same unit twice each write a whole file of their own; the first
/// to finish wins, a loser's file is removed, the winner's stays.
#[test]
fn interleaved_uploads_keep_exactly_the_winners_file() {
    let (mut fx, hosts) = two_hosts(1);
    let (slow, fast) = (hosts[0], hosts[1]);
    fx.grid.benchmark(slow, 0.1, 10.0, 1, T0).unwrap();
    fx.grid.benchmark(fast, 100.0, 1000.0, 1, T0).unwrap();
    start(&mut fx, "adaptive", T0);
    let t = T0 + scheduler::ONLINE_WINDOW_MS + 1;
    let u = fx.one(slow, &[], t);
    // Two copies run at once only when one passed its deadline (a host
    // asleep, which may wake up and upload late).
    let t = u.deadline_ms;
    assert_eq!(fx.grid.tick(t).unwrap(), 1);
    let v = fx.one(fast, &[], t + 1000);
    assert_eq!(v.job_id, u.job_id);
    let begin = |fx: &mut Fx, host: u64, unit: &WorkUnit| match fx
        .grid
        .upload_begin(host, unit.unit_id, t + 2000)
        .unwrap()
    {
        UploadStep::Plan(p) => p,
        UploadStep::Answer(o) => panic!("{o:?}"),
    };
    let (sum_u, file_u) = result_for(&u, 3);
    let (sum_v, file_v) = result_for(&v, 4);
    // Both copies, and the fast copy a second time (a retry in flight).
    let pu = begin(&mut fx, slow, &u);
    let pv = begin(&mut fx, fast, &v);
    let pv2 = begin(&mut fx, fast, &v);
    for (p, sum, file) in [
        (&pu, &sum_u, &file_u),
        (&pv, &sum_v, &file_v),
        (&pv2, &sum_v, &file_v),
    ] {
        p.verify(sum, file, None).unwrap();
        p.write(file, None).unwrap();
    }
    // A file that lies is refused by `verify`, before anything is written.
    let refused = pu.verify(&sum_v, &file_v, None);
    assert!(
        matches!(refused, Err(UploadRefusal::HeaderMismatch)),
        "{refused:?}"
    );
    let done = |fx: &mut Fx, p: &UploadPlan, sum: &ScanSummary| {
        fx.grid
            .upload_finish(p, sum.clone(), Verified::default(), t + 3000)
            .unwrap()
    };
    assert_eq!(done(&mut fx, &pv, &sum_v), UploadOutcome::Accepted);
    assert_eq!(done(&mut fx, &pu, &sum_u), UploadOutcome::Duplicate);
    assert_eq!(done(&mut fx, &pv2, &sum_v), UploadOutcome::Duplicate);
    let name = lf_name(&v);
    assert_eq!(fx.link_names(), vec![name.clone()]);
    assert_eq!(fx.read_link(&name), file_v);
    let job = fx.job(v.job_id);
    assert_eq!(job.result.as_ref().map(|r| r.unit_id), Some(v.unit_id));
    assert_eq!(fx.host_rec(fast).jobs_done, 1);
    assert_eq!(fx.host_rec(slow).jobs_done, 0);
}

#[test]
fn a_scan_that_stops_early_without_its_frontier_or_a_page_is_refused() {
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let (sum, file, _) = partial_for(&u, 3, 3);
    let o = fx
        .grid
        .upload(a, u.unit_id, sum, &file, None, T0 + 1)
        .unwrap();
    assert!(
        matches!(&o, UploadOutcome::Rejected(r) if r.contains("without its frontier")),
        "{o:?}"
    );
    assert!(fx.link_names().is_empty(), "nothing kept");
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Queued);
    assert!(job.segments.is_empty() && job.result.is_none());
    // A frontier with no page gained is a failed attempt, not a segment.
    let v = fx.one(a, &[], T0 + 2);
    let (mut sum, file, state) = partial_for(&v, 0, 0);
    sum.pages = 0;
    let o = fx
        .grid
        .upload(a, v.unit_id, sum, &file, Some(&state), T0 + 3)
        .unwrap();
    assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("without a page")));
    assert!(fx.link_names().is_empty());
    assert_eq!(fx.job(u.job_id).failed_attempts(), 2);
    // A frontier of another site, or one that counts fewer pages than
    // the job already took, is refused.
    let w = fx.one(a, &[], T0 + 4);
    let (sum, file, _) = partial_for(&w, 3, 3);
    let mut other = ScanState::decode(&partial_for(&w, 3, 3).2).unwrap();
    other.site = "elsewhere.test".into();
    let o = fx
        .grid
        .upload(
            a,
            w.unit_id,
            sum.clone(),
            &file,
            Some(&other.encode().unwrap()),
            T0 + 5,
        )
        .unwrap();
    assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("another site")));
    let x = fx.one(a, &[], T0 + 6);
    let (sum, file, state) = partial_for(&x, 3, 2);
    let o = fx
        .grid
        .upload(a, x.unit_id, sum, &file, Some(&state), T0 + 7)
        .unwrap();
    assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("fewer than")));
}

/// Upload a cut scan of `unit` (2 records, 3 pages done) whose frontier
/// `edit` changed; returns the answer and the frontier sent.
fn upload_edited_state(
    fx: &mut Fx,
    host: u64,
    unit: &WorkUnit,
    edit: impl FnOnce(&mut ScanState),
    now: u64,
) -> (UploadOutcome, ScanState) {
    let (sum, file, state) = partial_for(unit, 2, 3);
    let mut st = ScanState::decode(&state).unwrap();
    edit(&mut st);
    let o = fx
        .grid
        .upload(
            host,
            unit.unit_id,
            sum,
            &file,
            Some(&st.encode().unwrap()),
            now,
        )
        .unwrap();
    (o, st)
}

#[test]
fn a_kept_frontier_holds_only_the_sites_urls_and_no_robots_answers() {
    let (mut fx, _) = Fx::with_round(1, 3);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    // A frontier sending the next host elsewhere is refused.
    let (o, _) = upload_edited_state(
        &mut fx,
        a,
        &u,
        |st| {
            st.queue.push(beebot_shared::scanstate::QueuedUrl {
                url: "http://victim.test/".into(),
                depth: 1,
            })
        },
        T0 + 1,
    );
    assert!(
        matches!(&o, UploadOutcome::Rejected(r) if r.contains("victim.test")),
        "{o:?}"
    );
    // So is one deeper than the round allows (params: depth 3).
    let v = fx.one(a, &[], T0 + 2);
    let (o, _) = upload_edited_state(&mut fx, a, &v, |st| st.queue[0].depth = 4, T0 + 3);
    assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("depth")));
    // A host's robots.txt answers are not passed on: the next scan asks.
    let w = fx.one(a, &[], T0 + 4);
    let origin = format!("http://{}", w.site);
    let (o, st) = upload_edited_state(
        &mut fx,
        a,
        &w,
        |st| {
            st.robots.push(beebot_shared::scanstate::RobotsAnswer {
                origin,
                status: 404,
                body: Vec::new(),
            })
        },
        T0 + 5,
    );
    assert_eq!(o, UploadOutcome::Accepted);
    let job = fx.job(w.job_id);
    let kept = fx.read_link(&job.segments[0].state_file);
    let kept = ScanState::decode(&kept).unwrap();
    assert!(kept.robots.is_empty());
    assert_eq!(kept.queue, st.queue);
    assert_eq!(
        job.segments[0].state_sha256,
        state_sha256(&kept.encode().unwrap())
    );
    // Sent again, the unit's segment is acknowledged before anything is
    // written: its stored files stay as they were.
    let before = fx.read_link(&job.segments[0].file);
    assert!(matches!(
        fx.grid.upload_begin(a, w.unit_id, T0 + 6).unwrap(),
        UploadStep::Answer(UploadOutcome::Duplicate)
    ));
    assert_eq!(fx.read_link(&job.segments[0].file), before);
}

#[test]
fn verify_names_why_it_refuses_by_variant() {
    let (mut fx, _) = Fx::with_round(1, 5);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let plan = match fx.grid.upload_begin(a, u.unit_id, T0 + 1).unwrap() {
        UploadStep::Plan(p) => p,
        UploadStep::Answer(o) => panic!("{o:?}"),
    };
    let (sum, file) = result_for(&u, 3);
    // More pages than the unit allowed: refused from the summary alone.
    let mut over = sum.clone();
    over.pages = u64::from(params(5).max_pages) + 1;
    let r = plan.verify(&over, &file, None);
    assert!(
        matches!(
            r,
            Err(UploadRefusal::Summary(SummaryError::PagesOverCap { .. }))
        ),
        "{r:?}"
    );
    // A link count the file does not hold.
    let mut miscounted = sum.clone();
    miscounted.links += 1;
    miscounted.distinct_target_hosts = 0;
    let r = plan.verify(&miscounted, &file, None);
    assert!(
        matches!(r, Err(UploadRefusal::LinkCount { said: 4, held: 3 })),
        "{r:?}"
    );
    // A record of another site.
    let mut h = header_for(&u, 1);
    h.pages = sum.pages;
    let foreign = linkfile::encode(&h, &records("elsewhere.test", 1)).unwrap();
    let mut one = sum.clone();
    one.links = 1;
    one.distinct_target_hosts = 1;
    let r = plan.verify(&one, &foreign, None);
    assert!(
        matches!(&r, Err(UploadRefusal::SourceOffSite { site, .. }) if *site == u.site),
        "{r:?}"
    );
    // Bytes that are no link file.
    let r = plan.verify(&sum, b"not a link file", None);
    assert!(matches!(r, Err(UploadRefusal::LinkFile(_))), "{r:?}");
    // A scan that stopped early without its frontier.
    let mut early = sum.clone();
    early.stopped_by = Some(linkfile::StopReason::MaxTime);
    let r = plan.verify(&early, &file, None);
    assert!(
        matches!(r, Err(UploadRefusal::NoFrontier { stopped_by }) if stopped_by == "max-time"),
        "{r:?}"
    );
    // The one that fits is taken.
    assert!(plan.verify(&sum, &file, None).is_ok());
}

/// Part `index` of `unit`'s running scan: `n` records from page `from`
/// on, 3 pages, its frontier at `pages_done`.
fn part_for(unit: &WorkUnit, n: usize, pages_done: u64) -> (ScanSummary, Vec<u8>, Vec<u8>) {
    let (_, file, state) = partial_for(unit, n, pages_done);
    (summary(n), file, state)
}

#[test]
fn a_part_is_kept_as_a_segment_and_the_scan_goes_on_from_it() {
    let (mut fx, hosts) = two_hosts(1);
    let (a, b) = (hosts[0], hosts[1]);
    start(&mut fx, "round-robin", T0);
    let u = fx.one(a, &[], T0);
    assert!(matches!(
        fx.grid.progress(a, u.unit_id, 5, 5, T0 + 1).unwrap(),
        crate::grid::ProgressOutcome::Continue | crate::grid::ProgressOutcome::Extend(_)
    ));
    let (sum, file, state) = part_for(&u, 4, 3);
    let up = |fx: &mut Fx, index, sum: ScanSummary, t| {
        fx.grid
            .upload_part(a, u.unit_id, index, sum, &file, &state, t)
            .unwrap()
    };
    assert_eq!(up(&mut fx, 0, sum.clone(), T0 + 2), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.segments.len(), 1);
    assert_eq!(job.segments[0].pages_done, 3);
    assert_eq!(
        job.segments[0].file,
        format!("{}/{}-{}-p0.lf", u.round_id, u.job_id, u.unit_id)
    );
    assert_eq!(job.state, JobState::Running);
    let att = fx.attempt(u.unit_id);
    assert_eq!(att.state, AttemptState::Running);
    assert_eq!(att.resume_seq, 1, "the unit goes on from its part");
    assert_eq!(att.pages, 5, "its reports count from its start");
    assert_eq!(fx.job(u.job_id).pages_so_far(), 5, "the part counted once");
    assert_eq!(fx.grid.counters().parts_accepted, 1);
    // Sent again (its answer lost): a duplicate, nothing kept twice; with
    // other pages under that index, refused; one ahead, refused.
    assert_eq!(
        up(&mut fx, 0, sum.clone(), T0 + 3),
        UploadOutcome::Duplicate
    );
    let mut other = sum.clone();
    other.pages = 2;
    assert!(
        matches!(up(&mut fx, 0, other, T0 + 3), UploadOutcome::Rejected(w) if w.contains("other pages"))
    );
    assert!(
        matches!(up(&mut fx, 2, sum.clone(), T0 + 3), UploadOutcome::Rejected(w) if w.contains("fewer of its parts"))
    );
    assert_eq!(fx.job(u.job_id).segments.len(), 1);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    // The final upload holds what came after the part: the result is the
    // chain of both, and the other host never got the job.
    nothing_for(&mut fx, b, T0 + 4);
    assert_eq!(fx.upload(a, &u, 2, T0 + 5), UploadOutcome::Accepted);
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Done);
    let files: Vec<&str> = job.link_files().collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(job.completeness().pages, 6);
}

/// A scan uploaded in pieces (a part, then the rest) teaches its host's
/// speed once, from all of them: the piece after a part may be one page
/// in a tenth of a second (the page in flight at the part), a pace no
/// host has, and alone it would make a slow host look ten times faster.
#[test]
fn a_hosts_pieces_of_one_scan_teach_its_speed_together() {
    let (mut fx, hosts) = two_hosts(1);
    let a = hosts[0];
    start(&mut fx, "round-robin", T0);
    let u = fx.one(a, &[], T0);
    fx.grid.progress(a, u.unit_id, 3, 3, T0 + 1).unwrap();
    let (mut sum, file, state) = part_for(&u, 4, 3);
    sum.elapsed_ms = 6_000;
    let part = fx
        .grid
        .upload_part(a, u.unit_id, 0, sum, &file, &state, T0 + 6_000)
        .unwrap();
    assert_eq!(part, UploadOutcome::Accepted);
    let (mut last, file) = result_for(&u, 1);
    last.pages = 1;
    last.elapsed_ms = 100;
    let done = fx
        .grid
        .upload(a, u.unit_id, last, &file, None, T0 + 6_100)
        .unwrap();
    assert_eq!(done, UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).state, JobState::Done);
    let r = fx.host_rec(a);
    assert_eq!((r.pages_done, r.jobs_done), (4, 1));
    let speed = r.avg_pages_per_s.expect("learned");
    assert!((speed - 4.0 / 6.1).abs() < 1e-9, "{speed}");
}

#[test]
fn a_scan_taken_back_after_its_lease_goes_on_from_its_last_part() {
    use beebot_shared::limits::LEASE_TAKEOVER_S;
    let (mut fx, hosts) = two_hosts(1);
    let (away, other) = (hosts[0], hosts[1]);
    let u = issued(&mut fx, away);
    fx.grid.progress(away, u.unit_id, 3, 3, T0 + 1).unwrap();
    let (sum, file, state) = part_for(&u, 4, 3);
    let t = T0 + 2;
    assert_eq!(
        fx.grid
            .upload_part(away, u.unit_id, 0, sum.clone(), &file, &state, t)
            .unwrap(),
        UploadOutcome::Accepted
    );
    let (sum1, file1, state1) = part_for(&u, 4, 6);
    assert_eq!(
        fx.grid
            .upload_part(away, u.unit_id, 1, sum1, &file1, &state1, t + 1)
            .unwrap(),
        UploadOutcome::Accepted
    );
    // The host goes silent: past the lease the job goes to another host,
    // from the last part's frontier (not from the seed).
    assert_eq!(fx.grid.tick(t + 1 + LEASE_TAKEOVER_S * 1000).unwrap(), 1);
    let v = fx.one(other, &[], t + 2 + LEASE_TAKEOVER_S * 1000);
    assert_eq!(v.job_id, u.job_id);
    let resume = v.resume.expect("a continuation");
    assert_eq!(resume.pages_done, 6);
    // The silent host's parts are refused from now on: its scan stops.
    let late = fx
        .grid
        .upload_part(
            away,
            u.unit_id,
            2,
            sum,
            &file,
            &state,
            t + 3 + LEASE_TAKEOVER_S * 1000,
        )
        .unwrap();
    assert!(matches!(late, UploadOutcome::Rejected(_)), "{late:?}");
    assert_eq!(fx.job(u.job_id).segments.len(), 2);
}

#[test]
fn a_part_without_its_frontier_or_naming_a_stop_is_refused() {
    let (mut fx, _) = Fx::with_round(2, 5);
    let a = fx.host();
    let (units, _) = fx.ask(a, 2, &[], T0);
    let (sum, file, _) = part_for(&units[0], 3, 3);
    let refused = fx
        .grid
        .upload_part(a, units[0].unit_id, 0, sum, &file, b"junk", T0 + 1)
        .unwrap();
    assert!(matches!(refused, UploadOutcome::Rejected(w) if w.contains("scan state")));
    let (mut sum, file, state) = part_for(&units[1], 3, 3);
    sum.stopped_by = Some(linkfile::StopReason::MaxTime);
    let refused = fx
        .grid
        .upload_part(a, units[1].unit_id, 0, sum, &file, &state, T0 + 1)
        .unwrap();
    assert!(matches!(refused, UploadOutcome::Rejected(w) if w.contains("names no stop")));
    assert!(fx.job(units[1].job_id).segments.is_empty());
}

#[test]
fn a_part_leaves_the_scans_pace_as_it_was_so_no_hand_over_is_wanted() {
    use crate::grid::ProgressOutcome;
    let (mut fx, hosts) = two_hosts(1);
    let (a, b) = (hosts[0], hosts[1]);
    fx.grid.benchmark(a, 10.0, 100.0, 1, T0).unwrap();
    fx.grid.benchmark(b, 10.0, 100.0, 1, T0).unwrap();
    let mut p = params(3);
    p.policy = "adaptive".into();
    p.max_pages = 1000;
    fx.grid.start_round(p, T0).unwrap();
    let u = fx.one(a, &[], T0);
    let (_, file, state) = partial_for(&u, 4, 100);
    let mut sum = summary(4);
    sum.pages = 100;
    sum.elapsed_ms = 200_000;
    // Two pages a second, steady: a copy on a host as fast never ends sooner.
    let report = |fx: &mut Fx, pages, t| fx.grid.progress(a, u.unit_id, pages, pages, t).unwrap();
    assert!(!matches!(
        report(&mut fx, 10, T0 + 5_000),
        ProgressOutcome::Abort(_)
    ));
    assert!(!matches!(
        report(&mut fx, 210, T0 + 105_000),
        ProgressOutcome::Abort(_)
    ));
    let before = fx.attempt(u.unit_id);
    assert_eq!(
        fx.grid
            .upload_part(a, u.unit_id, 0, sum, &file, &state, T0 + 106_000)
            .unwrap(),
        UploadOutcome::Accepted
    );
    // Its pace (first and latest reports) is what it was.
    let after = fx.attempt(u.unit_id);
    assert_eq!(
        (
            after.first_report_ms,
            after.first_report_pages,
            after.last_report_ms,
            after.pages
        ),
        (
            before.first_report_ms,
            before.first_report_pages,
            before.last_report_ms,
            before.pages
        )
    );
    let t = T0 + 115_000;
    assert!(!matches!(
        report(&mut fx, 230, t),
        ProgressOutcome::Abort(_)
    ));
    let (none, _) = fx.ask(b, 1, &[], t + 1);
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(
        report(&mut fx, 250, t + 10_000),
        ProgressOutcome::Continue,
        "no hand-over asked of a steady scan after its part"
    );
}

#[test]
fn a_scan_that_stops_right_after_its_part_ends_there_and_is_not_failed() {
    let (mut fx, hosts) = two_hosts(1);
    let (a, b) = (hosts[0], hosts[1]);
    start(&mut fx, "round-robin", T0);
    let u = fx.one(a, &[], T0);
    fx.grid.progress(a, u.unit_id, 3, 3, T0 + 1).unwrap();
    let (sum, file, state) = part_for(&u, 4, 3);
    assert_eq!(
        fx.grid
            .upload_part(a, u.unit_id, 0, sum, &file, &state, T0 + 2)
            .unwrap(),
        UploadOutcome::Accepted
    );
    // Stopped (its time budget, a hand-over) before another page: nothing
    // new, and the job goes on from the part.
    let (mut sum, _, state) = partial_for(&u, 0, 3);
    sum.pages = 0;
    let empty = linkfile::encode(&header_for(&u, 0), &[]).unwrap();
    assert_eq!(
        fx.grid
            .upload(a, u.unit_id, sum, &empty, Some(&state), T0 + 3)
            .unwrap(),
        UploadOutcome::Accepted
    );
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Partial);
    let job = fx.job(u.job_id);
    assert_eq!((job.state, job.segments.len()), (JobState::Queued, 1));
    assert_eq!(job.failed_attempts(), 0);
    let v = fx.one(b, &[], T0 + 4);
    assert_eq!(v.resume.map(|r| r.pages_done), Some(3));
}

#[test]
fn a_job_keeps_at_most_its_parts_limit_and_its_scan_goes_on() {
    use beebot_shared::limits::MAX_PARTS_PER_JOB;
    let (mut fx, hosts) = two_hosts(1);
    let a = hosts[0];
    start(&mut fx, "round-robin", T0);
    let u = fx.one(a, &[], T0);
    let (sum, file, state) = part_for(&u, 4, 3);
    assert_eq!(
        fx.grid
            .upload_part(a, u.unit_id, 0, sum.clone(), &file, &state, T0 + 1)
            .unwrap(),
        UploadOutcome::Accepted
    );
    // A very long site: its job holds as many segments as parts may take.
    let job = fx.grid.jobs.get_mut(&u.job_id).unwrap();
    let mut other = job.segments[0].clone();
    other.unit_id = 0;
    job.segments.resize(MAX_PARTS_PER_JOB, other);
    job.attempts[0].resume_seq = MAX_PARTS_PER_JOB as u32;
    let (sum1, file1, state1) = part_for(&u, 4, 6);
    assert_eq!(
        fx.grid
            .upload_part(a, u.unit_id, 1, sum1, &file1, &state1, T0 + 2)
            .unwrap(),
        UploadOutcome::NotKept
    );
    // Not kept, not failed: the scan goes on and its end is its result.
    let job = fx.job(u.job_id);
    assert_eq!(job.segments.len(), MAX_PARTS_PER_JOB);
    assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
    assert_ne!(job.state, JobState::Failed);
    assert_eq!(fx.upload(a, &u, 2, T0 + 3), UploadOutcome::Accepted);
    assert_eq!(fx.job(u.job_id).state, JobState::Done);
}
