//! Tests of rounds started, folded, repeated and cancelled.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::limits::MAX_DELAY_MS;
use beebot_shared::proto::ABORT_ROUND_CANCELLED;
use beebot_shared::scope::Scope;

#[test]
fn start_round_checks_its_parameters() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&site_names(1), T0).unwrap();
    let bad = [
        RoundParams {
            policy: "nope".into(),
            ..params(3)
        },
        RoundParams {
            max_pages: 0,
            ..params(3)
        },
        RoundParams {
            max_attempts: 0,
            ..params(3)
        },
        RoundParams {
            deadline_min_s: 0,
            ..params(3)
        },
        RoundParams {
            delay_ms: MAX_DELAY_MS + 1,
            ..params(3)
        },
    ];
    for p in bad {
        assert!(matches!(
            fx.grid.start_round(p, T0),
            Err(GridError::Invalid(_))
        ));
    }
    assert!(fx.grid.rounds().is_empty());
    assert!(fx.grid.jobs.is_empty());
}

#[test]
fn a_cancelled_round_stops_its_units() {
    let (mut fx, round) = Fx::with_round(2, 3);
    let a = fx.host();
    let b = fx.host();
    let u = fx.one(a, &[], T0);
    fx.grid.cancel_round(round, T0 + 10).unwrap();
    let r = &fx.grid.rounds[&round];
    assert_eq!(
        (r.state, r.finished_ms),
        (RoundState::Cancelled, Some(T0 + 10))
    );
    assert!(matches!(
        fx.grid.cancel_round(round, T0 + 11),
        Err(GridError::Invalid(_))
    ));
    assert!(matches!(
        fx.grid.cancel_round(round + 1000, T0 + 11),
        Err(GridError::UnknownRound(_))
    ));
    assert!(matches!(
        fx.grid.progress(a, u.unit_id, 1, 1, T0 + 12).unwrap(),
        ProgressOutcome::Abort(_)
    ));
    // A result that still arrives is dropped, and the host told why.
    assert_eq!(
        fx.upload(a, &u, 2, T0 + 13),
        UploadOutcome::Rejected(ABORT_ROUND_CANCELLED.into())
    );
    assert!(fx.link_names().is_empty());
    assert_eq!(fx.host_rec(a).jobs_done, 0);
    // Its queued job is not handed out; hosts idle.
    let (none, r) = fx.ask(b, 4, &[], T0 + 14);
    assert!(none.is_empty());
    assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
    assert!(!r.rounds_open);
    // The host was told to stop: the old deadline is not held against it.
    assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 0);
    assert_eq!(fx.host_rec(a).deadlines_missed, 0);
    assert_ne!(fx.attempt(u.unit_id).state, AttemptState::Running);
}

/// A cancelled round's unfinished jobs say so, and a host is told at
/// its next work request which of its held units to drop.
#[test]
fn a_cancelled_round_names_its_units_to_drop_and_its_jobs_cancelled() {
    let (mut fx, round) = Fx::with_round(3, 3);
    let changed = fx.grid.rounds_changed();
    let a = fx.host();
    let (units, _) = fx.ask(a, 3, &[], T0);
    assert_eq!(units.len(), 3);
    assert_eq!(fx.upload(a, &units[0], 1, T0 + 1), UploadOutcome::Accepted);
    let held = [units[1].unit_id, units[2].unit_id];
    let (_, before) = fx.ask(a, 0, &held, T0 + 2);
    assert!(before.cancelled_units.is_empty());
    fx.grid.cancel_round(round, T0 + 3).unwrap();
    let (none, after) = fx.ask(a, 4, &held, T0 + 4);
    assert!(none.is_empty());
    assert_eq!(after.cancelled_units, held.to_vec());
    let states: Vec<JobState> = fx
        .grid
        .round(round)
        .unwrap()
        .1
        .iter()
        .map(|j| j.state)
        .collect();
    assert_eq!(
        states,
        vec![JobState::Done, JobState::Cancelled, JobState::Cancelled]
    );
    assert_eq!(
        fx.job(units[1].job_id).completeness().why_not.as_deref(),
        Some("round cancelled")
    );
    assert_eq!(
        fx.grid.progress(a, units[2].unit_id, 1, 1, T0 + 5).unwrap(),
        ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into())
    );
    // The hosts are told of the cancel, and of a new round.
    assert_eq!(fx.grid.rounds_changed(), changed + 1);
    fx.grid.start_round(params(3), T0 + 6).unwrap();
    assert_eq!(fx.grid.rounds_changed(), changed + 2);
}

#[test]
fn a_site_a_wider_sites_scope_covers_is_folded_into_it_for_the_round() {
    let sites: Vec<String> = [
        "example.edu",
        "cs.example.edu",
        "lab.cs.example.edu",
        "other.org",
        "example.edu:8080",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let jobs_and_folds = |scope: Scope| {
        let mut fx = Fx::new();
        fx.grid.add_sites(&sites, T0).unwrap();
        let p = RoundParams { scope, ..params(3) };
        let round = fx.grid.start_round(p, T0).unwrap();
        let r = fx.grid.rounds[&round].clone();
        let mut jobs: Vec<String> = r
            .job_ids
            .iter()
            .map(|j| fx.grid.jobs[j].site.clone())
            .collect();
        jobs.sort();
        let mut folds: Vec<(String, String)> = r
            .folded
            .iter()
            .map(|f| (f.site.clone(), f.into.clone()))
            .collect();
        folds.sort();
        (jobs, folds)
    };
    // Host scope: every site crawls its own host; none folded.
    let (jobs, folds) = jobs_and_folds(Scope::Host);
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    assert!(folds.is_empty(), "{folds:?}");
    // Subdomains: example.edu covers every name under it (its port only).
    let (jobs, folds) = jobs_and_folds(Scope::Subdomains);
    let want = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut v: Vec<_> = v
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        folds,
        want(&[
            ("cs.example.edu", "example.edu"),
            ("lab.cs.example.edu", "example.edu")
        ])
    );
    assert_eq!(jobs, ["example.edu", "example.edu:8080", "other.org"]);
    // Domain: one registrable domain, one job (the first listed).
    let (jobs, folds) = jobs_and_folds(Scope::Domain);
    assert_eq!(jobs, ["cs.example.edu", "example.edu:8080", "other.org"]);
    assert_eq!(
        folds,
        want(&[
            ("example.edu", "cs.example.edu"),
            ("lab.cs.example.edu", "cs.example.edu")
        ])
    );
}

#[test]
fn a_repeating_round_starts_once_over_and_its_period_passed() {
    let mut fx = Fx::new();
    let a = fx.host();
    fx.grid.add_sites(&site_names(1), T0).unwrap();
    assert!(matches!(
        fx.grid.start_round_every(params(3), Some(0), T0),
        Err(GridError::Invalid(_))
    ));
    let r1 = fx
        .grid
        .start_round_every(params(3), Some(60_000), T0)
        .unwrap();
    // Not over yet: nothing starts, whatever the time.
    assert!(fx.grid.repeat_due_rounds(T0 + HOUR_MS).unwrap().is_empty());
    let u = fx.one(a, &[], T0);
    assert_eq!(fx.upload(a, &u, 2, T0 + 1000), UploadOutcome::Accepted);
    assert_eq!(fx.round_state(r1), RoundState::Done);
    // Over, but the period has not passed.
    assert!(fx.grid.repeat_due_rounds(T0 + 59_999).unwrap().is_empty());
    let started = fx.grid.repeat_due_rounds(T0 + 60_000).unwrap();
    assert_eq!(started.len(), 1);
    let r2 = started[0];
    assert_eq!(fx.grid.rounds[&r1].next_round, Some(r2));
    let (round2, jobs) = fx.grid.round(r2).unwrap();
    assert_eq!(
        (round2.every_ms, round2.params.clone()),
        (Some(60_000), params(3))
    );
    // Its jobs use the figures of the last scan (3 pages).
    assert_eq!(jobs[0].est_pages, 3.0);
    // Once only.
    assert!(fx.grid.repeat_due_rounds(T0 + 61_000).unwrap().is_empty());
    // A cancelled round does not repeat.
    fx.grid.cancel_round(r2, T0 + 70_000).unwrap();
    assert!(fx
        .grid
        .repeat_due_rounds(T0 + 10 * HOUR_MS)
        .unwrap()
        .is_empty());
}

#[test]
fn a_cancelled_round_counts_its_open_sites_incomplete() {
    let (mut fx, round) = Fx::with_round(3, 2);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    assert_eq!(fx.upload(a, &u, 1, T0 + 1), UploadOutcome::Accepted);
    fx.grid.cancel_round(round, T0 + 2).unwrap();
    let (r, jobs) = fx.grid.round(round).unwrap();
    let c = crate::api::JobCounts::of_round(&r, &jobs);
    assert_eq!((c.complete, c.incomplete), (1, 2));
    assert_eq!(fx.grid.status().last_round.unwrap().incomplete, 2);
}

/// A round of more sites than format 1's record could list (about
/// 210,000 job ids) starts, and its record comes back whole from the store.
#[test]
fn a_round_of_250000_sites_starts_and_its_record_comes_back_whole() {
    let store = crate::store::memory();
    let links = std::sync::Arc::new(crate::grid::links::MemoryLinks::new());
    let key = beebot_shared::sign::generate_key();
    let io = GridIo::in_memory(links.clone(), key.clone(), 7);
    let mut g = Stored::open(store.clone(), io, settings());
    let sites: Vec<String> = (0..250_000).map(|i| format!("s{i}.big.test")).collect();
    g.add_sites(&sites, T0).unwrap();
    let round = g.start_round(params(3), T0).unwrap();
    let ids = g.rounds[&round].job_ids.clone();
    assert_eq!(ids.len(), 250_000);
    g.persist().unwrap();
    let stored = store.rounds().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0], g.rounds[&round]);
    drop(g);
    let reopened = Stored::open(store, GridIo::in_memory(links, key, 7), settings());
    assert_eq!(reopened.rounds[&round].job_ids, ids);
    assert_eq!(reopened.jobs.len(), 250_000);
}

/// A round whose record would pass the store's record limit (the sites
/// folded into wider ones are listed in it) is refused with a clear error
/// before any job is written: the grid and the store keep no half-made round.
#[test]
fn a_round_too_large_for_its_record_is_refused_before_any_job_is_written() {
    let store = crate::store::memory();
    let io = GridIo::in_memory(
        std::sync::Arc::new(crate::grid::links::MemoryLinks::new()),
        beebot_shared::sign::generate_key(),
        7,
    );
    let mut g = Stored::open(store.clone(), io, settings());
    // About 46 bytes a folded site: 25,000 of them are past 1 MiB.
    let mut sites = vec!["big.test".to_string()];
    sites.extend((0..25_000).map(|i| format!("a-rather-long-department-name-{i}.big.test")));
    g.add_sites(&sites, T0).unwrap();
    let p = RoundParams {
        scope: Scope::Subdomains,
        ..params(3)
    };
    let err = g.start_round(p, T0).unwrap_err().to_string();
    assert!(
        err.contains("a round folding 25000 sites into wider ones is more than one round can hold"),
        "{err}"
    );
    assert!(g.jobs.is_empty() && g.rounds.is_empty());
    assert!(err.contains("limit of 1048576 bytes"), "{err}");
    g.persist().unwrap();
    assert!(store.jobs().unwrap().is_empty() && store.rounds().unwrap().is_empty());
    // In host scope nothing is folded: the same target set starts.
    g.start_round(params(3), T0).unwrap();
}

/// `round rescan`: a site of a round that is over goes back to the
/// round's queue as a new chain, the file it kept is released, and the
/// round runs again until the site is done again, the other site's result
/// untouched. A site not over, a site not in the round and a cancelled
/// round are refused with nothing changed.
#[test]
fn a_rescanned_site_runs_its_round_again_and_releases_its_file() {
    let (mut fx, round) = Fx::with_round(2, 3);
    let (a, b) = (fx.host(), fx.host());
    let ua = fx.one(a, &[], T0);
    let ub = fx.one(b, &[], T0);
    assert_eq!(fx.upload(a, &ua, 3, T0 + 100), UploadOutcome::Accepted);
    assert_eq!(fx.upload(b, &ub, 4, T0 + 100), UploadOutcome::Accepted);
    assert_eq!(fx.round_state(round), RoundState::Done);
    let old = fx.job(ua.job_id).result.expect("kept").file;
    let other = fx.job(ub.job_id).result.expect("kept").file;
    assert!(fx.has_link(&old) && fx.has_link(&other));

    let refused = |fx: &mut Fx, round: u64, sites: &[&str]| {
        let sites: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
        match fx.grid.rescan_sites(round, &sites, "test", T0 + 200) {
            Err(GridError::Invalid(why)) => why,
            other => panic!("{other:?}"),
        }
    };
    let why = refused(&mut fx, round, &["nowhere.example"]);
    assert!(why.contains("not in round"), "{why}");
    assert!(refused(&mut fx, round, &[]).contains("no site"));
    assert_eq!(fx.round_state(round), RoundState::Done, "nothing changed");

    // Named twice, in another case: scanned again once.
    let named = [ua.site.to_uppercase(), ua.site.clone()];
    let again = fx
        .grid
        .rescan_sites(round, &named, "damaged", T0 + 200)
        .unwrap();
    assert_eq!(again, vec![ua.site.clone()]);
    let r = &fx.grid.rounds[&round];
    assert_eq!((r.state, r.finished_ms), (RoundState::Running, None));
    let job = fx.job(ua.job_id);
    assert_eq!(job.state, JobState::Queued);
    assert!(job.result.is_none() && job.segments.is_empty() && job.candidates.is_empty());
    assert_eq!(job.chain, 1);
    assert!(job.size_known && job.est_pages >= 1.0);
    assert!(job.reasons.last().is_some_and(|r| r.contains("damaged")));
    assert!(!fx.has_link(&old), "the kept file is released");
    assert!(fx.has_link(&other), "the other site's result stays");
    let why = refused(&mut fx, round, &[ua.site.as_str()]);
    assert!(why.contains("queued already"), "{why}");

    // Scanned again by another host, the round is over again.
    let u = fx.one(b, &[], T0 + 300);
    assert_eq!(u.job_id, ua.job_id);
    assert_eq!(fx.upload(b, &u, 5, T0 + 400), UploadOutcome::Accepted);
    assert_eq!(fx.round_state(round), RoundState::Done);
    let job = fx.job(ua.job_id);
    assert_eq!(job.state, JobState::Done);
    assert!(fx.has_link(&job.result.expect("kept").file));

    // A cancelled round is not run again, and its jobs leave no pace kept
    // (a queued job keeps none, a running one does).
    let second = fx.grid.start_round(params(3), T0 + 500).unwrap();
    let jobs = fx.grid.rounds[&second].job_ids.clone();
    assert!(jobs.iter().all(|j| !fx.grid.scan_paces.contains_key(j)));
    let running = fx.one(a, &[], T0 + 550);
    assert!(fx.grid.scan_paces.contains_key(&running.job_id));
    fx.grid.cancel_round(second, T0 + 600).unwrap();
    assert!(jobs.iter().all(|j| !fx.grid.scan_paces.contains_key(j)));
    let why = refused(&mut fx, second, &[ua.site.as_str()]);
    assert!(why.contains("cancelled"), "{why}");

    // An excluded site is not scanned again.
    fx.grid
        .exclude(excl(&ub.site), "owner asked", T0 + 700)
        .unwrap();
    let why = refused(&mut fx, round, &[ub.site.as_str()]);
    assert!(why.contains("excluded"), "{why}");
}

/// A site that failed after parts of it were uploaded is scanned again
/// from its seed, sized for the whole site again (what was left and the
/// parts), not for what was left.
#[test]
fn a_failed_site_rescanned_is_sized_for_the_whole_site() {
    let (mut fx, round) = Fx::with_round(1, 1);
    let a = fx.host();
    let u = fx.one(a, &[], T0);
    let before = fx.job(u.job_id).est_pages;
    assert_eq!(
        fx.upload_partial(a, &u, 2, 3, T0 + 100),
        UploadOutcome::Accepted
    );
    let job = fx.job(u.job_id);
    assert_eq!(job.segments.len(), 1);
    let left = job.est_pages;
    // Its continuation fails for good (one attempt allowed).
    let c = fx.one(a, &[], T0 + 200);
    fx.grid.fail(a, c.unit_id, "gave up", T0 + 300).unwrap();
    let job = fx.job(u.job_id);
    assert_eq!(job.state, JobState::Failed, "{:?}", job.reasons);
    assert_eq!(fx.round_state(round), RoundState::Done);
    fx.grid
        .rescan_sites(round, std::slice::from_ref(&u.site), "test", T0 + 400)
        .unwrap();
    let job = fx.job(u.job_id);
    assert_eq!(job.est_pages, left + 3.0);
    assert_eq!(job.est_pages, before.max(left + 3.0));
    assert!(job.segments.is_empty());
    assert_eq!(fx.round_state(round), RoundState::Running);
}
