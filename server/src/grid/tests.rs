//! Tests of the grid as a whole: everything survives a reopen.

use super::*;
use crate::grid::testkit::*;
use std::fs;

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

    // A link file a crash interrupted mid-write: swept on reopen.
    let stray = fx.links().join(round.to_string()).join("9-9.1-0.tmp");
    fs::write(&stray, b"half").unwrap();
    let Fx { dir, key, grid } = fx;
    drop(grid);
    let grid = open_grid(dir.path(), &key);
    let mut fx = Fx { dir, key, grid };
    assert!(!stray.exists());
    assert!(lf_path(&fx, u1).exists());

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
    assert!(c > *unit_map.keys().max().unwrap(), "ids never repeat");
    assert_eq!(
        fx.upload(b, &v, 2, u2.deadline_ms + 10),
        UploadOutcome::Accepted
    );
    assert_eq!(
        fx.upload(a, u1, 6, u2.deadline_ms + 11),
        UploadOutcome::Duplicate
    );
    assert_eq!(fs::read(lf_path(&fx, u1)).unwrap(), result_for(u1, 6).1);
    assert_eq!(fx.host_rec(a).jobs_done, 1);
    assert_eq!(fx.host_rec(b).jobs_done, 1);
}
