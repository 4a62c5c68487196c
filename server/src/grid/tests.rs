//! Tests of the grid as a whole: everything survives a reopen.

use super::*;
use crate::grid::testkit::*;

use beebot_shared::sign;

#[test]
fn everything_survives_a_reopen() {
    let (mut fx, round) = Fx::with_round(4, 3);
    let a = fx.host();
    let b = fx.host();
    fx.grid.benchmark(a, 20.0, 500.0, 3, T0).unwrap();
    let spare = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
    let (units, _) = fx.ask(a, 2, &[], T0 + 1);
    let (u1, u2) = (&units[0], &units[1]);
    // u1 done with a result; u2 expires; B takes u2's job and gives another back.
    assert_eq!(fx.upload(a, u1, 6, T0 + 2), UploadOutcome::Accepted);
    fx.grid.tick(u2.deadline_ms).unwrap();
    let (got, _) = fx.ask(b, 2, &[], u2.deadline_ms + 1);
    let v = got.iter().find(|g| g.job_id == u2.job_id).unwrap().clone();
    let w = got.iter().find(|g| g.job_id != u2.job_id).unwrap().clone();
    fx.grid
        .fail(b, w.unit_id, "seed unreachable", u2.deadline_ms + 2)
        .unwrap();
    // Persist every host's last word so last_seen_ms is on disk too.
    fx.grid.hello(a, u2.deadline_ms + 3).unwrap();
    fx.grid.hello(b, u2.deadline_ms + 3).unwrap();
    fx.grid.remove_site("s3.test").unwrap();

    let sites = fx.grid.sites();
    let rounds = fx.grid.rounds();
    let jobs = fx.grid.jobs.clone();
    let hosts = fx.grid.hosts();
    let invites = fx.grid.invites.clone();
    let unit_map = fx.grid.units.clone();
    let status = serde_json::to_string(&fx.grid.status()).unwrap();
    assert_eq!(sites.len(), 3);
    assert_eq!(invites.len(), 3);
    assert_eq!(unit_map.len(), 4);
    assert!(jobs[&u1.job_id].result.is_some());

    let Fx { dir, key, grid } = fx;
    drop(grid);
    let grid = open_grid(dir.path(), &key);
    let mut fx = Fx { dir, key, grid };
    assert!(fx.has_link(&lf_name(u1)));

    assert_eq!(fx.grid.sites(), sites);
    assert_eq!(fx.grid.rounds(), rounds);
    assert_eq!(fx.grid.jobs, jobs);
    assert_eq!(fx.grid.hosts(), hosts);
    assert_eq!(fx.grid.invites, invites);
    assert_eq!(fx.grid.units, unit_map);
    assert_eq!(serde_json::to_string(&fx.grid.status()).unwrap(), status);
    assert_eq!(fx.grid.round(round).unwrap().1.len(), 4);
    assert_eq!(
        fx.grid.project_public_key(),
        fx.key.verifying_key().to_bytes()
    );

    // And the grid carries on where it stopped.
    let k = sign::generate_key().verifying_key().to_bytes();
    let c = fx.grid.enrol(&spare, k, info("c"), T0 + 10).unwrap();
    assert_eq!(
        c,
        a.max(b) + 1,
        "host ids go on from the last, never repeat"
    );
    assert_eq!(
        fx.upload(b, &v, 2, u2.deadline_ms + 10),
        UploadOutcome::Accepted
    );
    assert_eq!(
        fx.upload(a, u1, 6, u2.deadline_ms + 11),
        UploadOutcome::Duplicate
    );
    assert_eq!(fx.read_link(&lf_name(u1)), result_for(u1, 6).1);
    assert_eq!(fx.host_rec(a).jobs_done, 1);
    assert_eq!(fx.host_rec(b).jobs_done, 1);
}

/// Ask `g` for one unit for `host`, verified with the project key.
fn one_unit(g: &mut Grid, host: u64, now: u64) -> sign::WorkUnit {
    let ask = WorkRequest {
        want_seconds: 3600,
        free_slots: 1,
        units_held: Vec::new(),
        open_windows: None,
    };
    let reply = g.request_work(host, &ask, now).unwrap();
    assert_eq!(reply.units.len(), 1, "one unit for host {host}");
    let pk = ed25519_dalek::VerifyingKey::from_bytes(&g.project_public_key()).unwrap();
    sign::verify_unit(&pk, &reply.units[0]).unwrap()
}

#[test]
fn a_round_runs_end_to_end_in_memory_with_no_disk() {
    let links = std::sync::Arc::new(MemoryLinks::new());
    let key = sign::generate_key();
    let io = GridIo::in_memory(links.clone(), key.clone(), 7);
    let mut g = Grid::open(Default::default(), io, settings()).unwrap();
    assert_eq!(g.project_public_key(), key.verifying_key().to_bytes());
    g.add_sites(&site_names(1), T0).unwrap();
    let round = g.start_round(params(2), T0).unwrap();
    let (a, b) = (enrol_host(&mut g, T0), enrol_host(&mut g, T0));
    // A scan cut by its time budget: its link file and frontier are kept.
    let u = one_unit(&mut g, a, T0);
    let (sum, file, state) = partial_for(&u, 3, 3);
    let outcome = g.upload(a, u.unit_id, sum, &file, Some(&state), T0 + 10);
    assert_eq!(outcome.unwrap(), UploadOutcome::Accepted);
    let lf = format!("{round}/{}-{}.lf", u.job_id, u.unit_id);
    let st = format!("{round}/{}-{}.state", u.job_id, u.unit_id);
    assert_eq!(links.names().unwrap(), vec![lf.clone(), st.clone()]);
    assert_eq!(links.read(&lf).unwrap(), file);
    // The continuation reads the frontier back from memory.
    let v = one_unit(&mut g, b, T0 + 20);
    assert_eq!(v.job_id, u.job_id);
    let StateAnswer::Read(kept) = g.state_of_unit(b, v.unit_id).unwrap() else {
        panic!("the continuation reads its state");
    };
    assert_eq!(kept.read().unwrap(), state);
    assert_eq!(kept.location(), format!("memory:{st}"));
    // It reaches the natural end: the job and round are done, the frontier
    // is removed and the export is both scans' union.
    let (sum, file) = result_for(&v, 4);
    let outcome = g.upload(b, v.unit_id, sum, &file, None, T0 + 30);
    assert_eq!(outcome.unwrap(), UploadOutcome::Accepted);
    let job = g.jobs[&u.job_id].clone();
    assert_eq!(job.state, JobState::Done);
    assert_eq!(g.rounds[&round].state, RoundState::Done);
    // The frontier goes once its driver applies the grid's link changes.
    assert_eq!(links.names().unwrap().len(), 3);
    g.take_link_changes().apply(links.as_ref());
    let names = links.names().unwrap();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!names.contains(&st));
    let mut pairs = 0;
    for_each_link(links.as_ref(), &job, |_| {
        pairs += 1;
        Ok::<(), std::io::Error>(())
    })
    .unwrap();
    assert_eq!(pairs, records(&u.site, 4).len());
}
