//! Tests of the target set and of exclusions.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;

use beebot_shared::limits::MAX_UNIT_EXCLUSIONS;
use beebot_shared::scope::{Exclusion, Scope};

/// An excluded host leaves the target set and cannot come back by
/// `sites add` while the exclusion holds; the others are added.
#[test]
fn an_excluded_site_leaves_the_target_set_and_is_refused_again() {
    let mut fx = Fx::new();
    let sites = vec![
        "www.a.test".to_string(),
        "b.test".into(),
        "c.test:8080".into(),
    ];
    fx.grid.add_sites(&sites, T0).unwrap();
    let out = fx
        .grid
        .exclude(excl("a.test"), "  owner\n asked ", T0)
        .unwrap();
    assert_eq!(out.sites_removed, ["www.a.test"]);
    assert_eq!(out.record.reason, "owner asked");
    let out = fx
        .grid
        .exclude(excl("http://c.test/"), "ticket 7", T0)
        .unwrap();
    assert_eq!(out.sites_removed, ["c.test:8080"], "every port");
    let left: Vec<String> = fx.grid.sites().into_iter().map(|s| s.host).collect();
    assert_eq!(left, ["b.test"]);
    let (added, refused) = fx
        .grid
        .add_sites_except_excluded(&["a.test".into(), "d.test".into(), "www.c.test".into()], T0)
        .unwrap();
    assert_eq!(added, 1);
    let refused: Vec<(usize, String)> = refused.into_iter().map(|(i, h, _)| (i, h)).collect();
    assert_eq!(
        refused,
        [(0, "a.test".to_string()), (2, "www.c.test".into())]
    );
    assert!(matches!(
        fx.grid.add_sites(&["a.test".into()], T0),
        Err(GridError::Invalid(m)) if m.contains("excluded") && m.contains("owner asked")
    ));
    // Empty reasons are refused; excluding again replaces the reason.
    assert!(fx.grid.exclude(excl("e.test"), " \t", T0).is_err());
    let again = fx
        .grid
        .exclude(excl("www.a.test"), "new reason", T0 + 1)
        .unwrap();
    assert_eq!(
        again.replaced.map(|r| r.reason).as_deref(),
        Some("owner asked")
    );
    assert_eq!(fx.grid.exclusions().len(), 2);
    // Lifted: the site may be added again; it is not added by itself.
    let lifted = fx.grid.include(&excl("a.test")).unwrap();
    assert_eq!(lifted.reason, "new reason");
    assert!(fx.grid.include(&excl("a.test")).is_err());
    assert_eq!(fx.grid.sites().len(), 2);
    fx.grid.add_sites(&["a.test".into()], T0).unwrap();
    // The exclusions are durable.
    drop(fx.grid);
    let g = open_grid(fx.dir.path(), &fx.key);
    let kept: Vec<String> = g
        .exclusions()
        .iter()
        .map(|e| e.exclusion.display())
        .collect();
    assert_eq!(kept, ["c.test"]);
}

/// A subdomain exclusion covers every name under it; one of a name
/// covered by another cannot be lifted alone.
#[test]
fn subdomain_exclusions_cover_every_name_under_them() {
    let mut fx = Fx::new();
    fx.grid
        .add_sites(&["x.test".into(), "lab.x.test".into(), "y.test".into()], T0)
        .unwrap();
    let out = fx
        .grid
        .exclude(Exclusion::parse(".x.test", false).unwrap(), "all of it", T0)
        .unwrap();
    assert_eq!(out.sites_removed, ["lab.x.test", "x.test"]);
    assert!(fx.grid.excluded_by("a.b.lab.x.test").is_some());
    assert!(fx.grid.excluded_by("y.test").is_none());
    assert!(fx.grid.excluded_by("xx.test").is_none());
    let err = fx
        .grid
        .include(&excl("lab.x.test"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sites include .x.test"), "{err}");
}

/// Excluding a host mid-round fails its job with the reason `excluded`,
/// its running copy hears so, and its held unit is named to drop; a
/// job whose `domain` scope reaches the host is restarted with units
/// that carry the exclusion.
#[test]
fn an_exclusion_takes_jobs_out_of_running_rounds_and_rides_in_units() {
    let mut fx = Fx::new();
    fx.grid
        .add_sites(&["s0.test".into(), "s1.test".into(), "t.test".into()], T0)
        .unwrap();
    let mut p = params(3);
    p.scope = Scope::Domain;
    let round = fx.grid.start_round(p, T0).unwrap();
    let a = fx.host();
    let (units, _) = fx.ask(a, 3, &[], T0);
    assert_eq!(units.len(), 3);
    assert!(units.iter().all(|u| u.exclusions.is_empty()));
    let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
    let changed = fx.grid.rounds_changed();
    let of = |site: &str| units.iter().find(|u| u.site == site).unwrap().clone();
    let out = fx
        .grid
        .exclude(excl("s0.test"), "owner asked", T0 + 1)
        .unwrap();
    assert_eq!(out.jobs_excluded, 1);
    assert_eq!(fx.grid.rounds_changed(), changed + 1);
    let s0 = of("s0.test");
    assert_eq!(fx.job(s0.job_id).state, JobState::Failed);
    assert_eq!(
        fx.job(s0.job_id).completeness().why_not.as_deref(),
        Some("failed: excluded: owner asked")
    );
    assert_eq!(
        fx.grid.progress(a, s0.unit_id, 1, 1, T0 + 2).unwrap(),
        ProgressOutcome::Abort("site excluded".into())
    );
    // A subdomain of t.test, inside t.test's domain scope.
    let out = fx
        .grid
        .exclude(excl("lab.t.test"), "lab asked", T0 + 3)
        .unwrap();
    assert_eq!((out.jobs_excluded, out.copies_restarted), (0, 1));
    let t = of("t.test");
    assert_eq!(fx.job(t.job_id).state, JobState::Queued);
    let (again, reply) = fx.ask(a, 3, &held, T0 + 4);
    assert_eq!(reply.cancelled_units, vec![s0.unit_id, t.unit_id]);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].site, "t.test");
    assert_eq!(again[0].exclusions, vec![excl("lab.t.test")]);
    assert_eq!(again[0].scope, Scope::Domain);
    // s1.test's unit goes on: nothing inside its scope was excluded.
    assert_eq!(
        fx.grid
            .progress(a, of("s1.test").unit_id, 1, 1, T0 + 5)
            .unwrap(),
        ProgressOutcome::Continue
    );
    assert_eq!(fx.round_state(round), RoundState::Running);
    // A new round has no job for the excluded site.
    let mut p = params(3);
    p.scope = Scope::Domain;
    let next = fx.grid.start_round(p, T0 + 6).unwrap();
    let sites: Vec<String> = fx
        .grid
        .round(next)
        .unwrap()
        .1
        .into_iter()
        .map(|j| j.site)
        .collect();
    assert_eq!(sites, ["s1.test", "t.test"]);
}

/// A unit carries only the exclusions inside its scope, at most
/// MAX_UNIT_EXCLUSIONS; past that its site is scanned with scope host.
#[test]
fn a_unit_carries_the_exclusions_inside_its_scope_bounded() {
    let mut fx = Fx::new();
    fx.grid.exclude(excl("a.x.test"), "r", T0).unwrap();
    fx.grid.exclude(excl("b.x.test"), "r", T0).unwrap();
    fx.grid.exclude(excl("x-y.test"), "r", T0).unwrap();
    fx.grid.exclude(excl("y.test"), "r", T0).unwrap();
    let hosts = |v: Vec<Exclusion>| v.into_iter().map(|e| e.host).collect::<Vec<_>>();
    let (scope, inside) = fx.grid.unit_scope("www.x.test", Scope::Subdomains);
    assert_eq!(scope, Scope::Subdomains);
    assert_eq!(hosts(inside), ["a.x.test", "b.x.test"]);
    assert_eq!(
        fx.grid.unit_scope("x.test", Scope::Host),
        (Scope::Host, Vec::new())
    );
    let (_, none) = fx.grid.unit_scope("z.test", Scope::Domain);
    assert!(none.is_empty());
    for i in 0..MAX_UNIT_EXCLUSIONS - 2 {
        fx.grid
            .exclude(excl(&format!("h{i}.x.test")), "r", T0)
            .unwrap();
    }
    let (scope, inside) = fx.grid.unit_scope("x.test", Scope::Domain);
    assert_eq!((scope, inside.len()), (Scope::Domain, MAX_UNIT_EXCLUSIONS));
    fx.grid.exclude(excl("one-more.x.test"), "r", T0).unwrap();
    assert_eq!(
        fx.grid.unit_scope("x.test", Scope::Domain),
        (Scope::Host, Vec::new())
    );
}

#[test]
fn sites_are_added_once_and_removed() {
    let mut fx = Fx::new();
    assert_eq!(fx.grid.add_sites(&site_names(3), T0).unwrap(), 3);
    assert_eq!(fx.grid.add_sites(&site_names(4), T0 + 1).unwrap(), 1);
    let sites = fx.grid.sites();
    assert_eq!(sites.len(), 4);
    assert_eq!(sites[0].added_ms, T0);
    assert_eq!(sites[3].added_ms, T0 + 1);
    assert_eq!(
        fx.grid.remove_site("s0.test").unwrap().as_deref(),
        Some("s0.test")
    );
    assert_eq!(fx.grid.remove_site("s0.test").unwrap(), None);
    assert_eq!(fx.grid.status().sites, 3);
}

#[test]
fn www_and_the_bare_host_are_one_site_in_either_order() {
    let mut fx = Fx::new();
    fx.grid.add_sites(&["www.attrs.test".into()], T0).unwrap();
    match fx
        .grid
        .add_sites(&["b.test".into(), "attrs.test".into()], T0)
    {
        Err(GridError::SameSite {
            given, existing, ..
        }) => {
            assert_eq!(
                (given.as_str(), existing.as_str()),
                ("attrs.test", "www.attrs.test")
            );
        }
        other => panic!("the bare host of a site: {other:?}"),
    }
    assert_eq!(fx.grid.sites().len(), 1, "a refused batch adds nothing");
    fx.grid.add_sites(&["x.test".into()], T0).unwrap();
    assert!(matches!(
        fx.grid.add_sites(&["www.x.test".into()], T0),
        Err(GridError::SameSite { .. })
    ));
    // Both in one batch.
    assert!(matches!(
        fx.grid
            .add_sites(&["y.test".into(), "www.y.test".into()], T0),
        Err(GridError::SameSite {
            where_: "given before it",
            ..
        })
    ));
    // Another port is another site; the same host again is no change.
    assert_eq!(
        fx.grid
            .add_sites(&["x.test:8080".into(), "x.test".into()], T0)
            .unwrap(),
        1
    );
    // Removing either name removes the one site.
    assert_eq!(
        fx.grid.remove_site("attrs.test").unwrap().as_deref(),
        Some("www.attrs.test")
    );
    assert_eq!(fx.grid.sites().len(), 2);
}
