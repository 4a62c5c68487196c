//! Tests of invites, enrolment, benchmarks, revocation, trust and names.

use super::*;
use crate::grid::testkit::*;
use crate::grid::*;
use std::fs;

use beebot_shared::limits::{
    INVITE_TOKEN_LEN, MAX_BENCHMARK_KB_PER_S, MAX_BENCHMARK_PAGES_PER_S, MAX_HOST_PAGES_PER_S,
    MAX_TEXT_LEN,
};
use beebot_shared::proto::HostInfo;
use beebot_shared::sign;
use beebot_shared::util::sha256;

use crate::scheduler;
use ed25519_dalek::VerifyingKey;

#[test]
fn enrol_with_a_valid_token() {
    let mut fx = Fx::new();
    let token = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
    assert_eq!(token.len(), INVITE_TOKEN_LEN);
    let key = sign::generate_key().verifying_key().to_bytes();
    let id = fx.grid.enrol(&token, key, info("pc-1"), T0 + 5).unwrap();
    assert!(id > 0);
    assert_eq!(fx.grid.enrolled_key(id), Some(key));
    let h = fx.host_rec(id);
    assert_eq!(h.info, info("pc-1"));
    assert_eq!(h.enrolled_ms, T0 + 5);
    assert!(!h.revoked);
    assert_eq!((h.jobs_done, h.deadlines_missed, h.failures), (0, 0, 0));
    assert_eq!(fx.grid.invites[&sha256(&token)].uses_left, 0);
    assert_eq!(fx.grid.status().hosts, 1);
    assert_eq!(fx.grid.enrolled_key(id + 1000), None);
    assert!(matches!(
        fx.grid.create_invite(0, T0 + HOUR_MS, T0),
        Err(GridError::Invalid(_))
    ));
}

#[test]
fn used_up_invite_is_bad() {
    let mut fx = Fx::new();
    let once = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
    let k1 = sign::generate_key().verifying_key().to_bytes();
    let k2 = sign::generate_key().verifying_key().to_bytes();
    fx.grid.enrol(&once, k1, info("a"), T0).unwrap();
    assert!(matches!(
        fx.grid.enrol(&once, k2, info("b"), T0 + 1),
        Err(GridError::BadInvite)
    ));
    assert_eq!(fx.grid.hosts().len(), 1);

    let twice = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
    let k3 = sign::generate_key().verifying_key().to_bytes();
    fx.grid.enrol(&twice, k2, info("b"), T0 + 2).unwrap();
    fx.grid.enrol(&twice, k3, info("c"), T0 + 3).unwrap();
    let k4 = sign::generate_key().verifying_key().to_bytes();
    assert!(matches!(
        fx.grid.enrol(&twice, k4, info("d"), T0 + 4),
        Err(GridError::BadInvite)
    ));
    assert_eq!(fx.grid.hosts().len(), 3);
}

#[test]
fn expired_or_unknown_invite_is_bad() {
    let mut fx = Fx::new();
    let tok = fx.grid.create_invite(5, T0 + 1000, T0).unwrap();
    let k = sign::generate_key().verifying_key().to_bytes();
    // Expiry is exclusive: at the expiry instant the token no longer works.
    assert!(matches!(
        fx.grid.enrol(&tok, k, info("a"), T0 + 1000),
        Err(GridError::BadInvite)
    ));
    assert!(matches!(
        fx.grid.enrol(&tok, k, info("a"), T0 + 50_000),
        Err(GridError::BadInvite)
    ));
    // A refused enrolment does not use the invite up.
    assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 5);
    assert!(fx.grid.hosts().is_empty());
    // One millisecond before expiry it still works.
    fx.grid.enrol(&tok, k, info("a"), T0 + 999).unwrap();

    let k2 = sign::generate_key().verifying_key().to_bytes();
    let mut forged = tok.clone();
    forged[0] ^= 1;
    assert!(matches!(
        fx.grid.enrol(&forged, k2, info("b"), T0),
        Err(GridError::BadInvite)
    ));
    assert!(matches!(
        fx.grid.enrol(&[], k2, info("b"), T0),
        Err(GridError::BadInvite)
    ));
}

#[test]
fn invites_are_listed_without_their_tokens_and_a_revoked_one_cannot_be_used() {
    let mut fx = Fx::new();
    let t1 = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
    let t2 = fx.grid.create_invite(1, T0 + 2 * HOUR_MS, T0 + 5).unwrap();
    let listed = fx.grid.invites();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].0, invite_id(&sha256(&t1)));
    assert_eq!(listed[0].0.len(), INVITE_ID_LEN);
    assert_eq!(
        (
            listed[0].1.uses_left,
            listed[0].1.expires_ms,
            listed[0].1.created_ms
        ),
        (2, T0 + HOUR_MS, T0)
    );
    assert_eq!(listed[1].1.created_ms, T0 + 5);
    for (id, _) in &listed {
        for t in [&t1, &t2] {
            assert!(!id.contains(&hex::encode(t)), "an id never shows the token");
        }
    }
    // Revoked by a prefix of its id: it is gone, and joining with it fails.
    let id1 = listed[0].0.clone();
    assert_eq!(
        fx.grid.revoke_invite(&id1[..8].to_uppercase()).unwrap(),
        id1
    );
    assert_eq!(fx.grid.invites().len(), 1);
    let k = sign::generate_key().verifying_key().to_bytes();
    assert!(matches!(
        fx.grid.enrol(&t1, k, info("a"), T0 + 10),
        Err(GridError::BadInvite)
    ));
    assert!(matches!(
        fx.grid.revoke_invite(&id1),
        Err(GridError::UnknownInvite(_))
    ));
    // Ids too short or not hex are refused; the other invite still works.
    for bad in ["", "ab", "zzzzzzzz", &listed[1].0[..MIN_INVITE_ID_LEN - 1]] {
        assert!(matches!(
            fx.grid.revoke_invite(bad),
            Err(GridError::Invalid(_))
        ));
    }
    fx.grid.enrol(&t2, k, info("a"), T0 + 10).unwrap();
    // A revocation is durable.
    let dir = fx.dir;
    drop(fx.grid);
    let g = open_grid(dir.path(), &fx.key);
    assert_eq!(g.invites().len(), 1);
    assert_eq!(g.invites()[0].0, listed[1].0);
}

#[test]
fn an_ambiguous_invite_id_revokes_nothing() {
    let mut fx = Fx::new();
    // Two invites whose hashes share their first four bytes.
    for last in [1u8, 2] {
        let mut h = [0xab; 32];
        h[4] = last;
        let rec = InviteRecord {
            token_sha256: h,
            uses_left: 1,
            expires_ms: T0 + HOUR_MS,
            created_ms: T0,
        };
        fx.grid.store.put_invite(&rec).unwrap();
        fx.grid.invites.insert(h, rec);
    }
    assert!(matches!(
        fx.grid.revoke_invite("abababab"),
        Err(GridError::Invalid(why)) if why.contains("more than one")
    ));
    assert_eq!(fx.grid.invites().len(), 2);
    // One more digit names one.
    assert_eq!(
        fx.grid.revoke_invite("abababab02").unwrap(),
        "abababab02ababab"
    );
    assert_eq!(fx.grid.invites().len(), 1);
}

#[test]
fn key_enrolled_twice_is_refused() {
    let mut fx = Fx::new();
    let tok = fx.grid.create_invite(3, T0 + HOUR_MS, T0).unwrap();
    let k = sign::generate_key().verifying_key().to_bytes();
    let id = fx.grid.enrol(&tok, k, info("a"), T0).unwrap();
    match fx.grid.enrol(&tok, k, info("a-again"), T0 + 1) {
        Err(GridError::KeyEnrolled(got)) => assert_eq!(got, id),
        other => panic!("expected KeyEnrolled, got {other:?}"),
    }
    // The refusal did not consume a use nor add a host.
    assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 2);
    assert_eq!(fx.grid.hosts().len(), 1);
    // A revoked key cannot come back through a new invite either.
    fx.grid.revoke(id, T0 + 2).unwrap();
    let tok2 = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
    assert!(matches!(
        fx.grid.enrol(&tok2, k, info("a"), T0 + 3),
        Err(GridError::KeyEnrolled(got)) if got == id
    ));
}

#[test]
fn only_the_token_hash_is_stored() {
    let mut fx = Fx::new();
    let tok = fx.grid.create_invite(2, T0 + HOUR_MS, T0 + 7).unwrap();
    // Exhaustive destructuring: the record has no other field that could hold the token.
    let InviteRecord {
        token_sha256,
        uses_left,
        expires_ms,
        created_ms,
    } = fx.grid.invites.values().next().unwrap().clone();
    assert_eq!(token_sha256, sha256(&tok));
    assert_ne!(&token_sha256[..tok.len()], &tok[..]);
    assert_eq!(
        (uses_left, expires_ms, created_ms),
        (2, T0 + HOUR_MS, T0 + 7)
    );
    assert_eq!(fx.grid.invites.len(), 1);

    // Nor do the token's bytes appear anywhere in the database files.
    let Fx { dir, grid, .. } = fx;
    drop(grid);
    let mut saw_hash = false;
    for f in files_under(&dir.path().join("db")) {
        let bytes = fs::read(&f).unwrap();
        assert!(
            !bytes.windows(tok.len()).any(|w| w == &tok[..]),
            "token bytes found in {}",
            f.display()
        );
        saw_hash |= bytes.windows(32).any(|w| w == &token_sha256[..]);
    }
    assert!(saw_hash, "the scan should at least find the stored hash");
}

#[test]
fn absurd_benchmark_claims_are_clamped_and_broken_ones_refused() {
    let mut fx = Fx::new();
    let a = fx.host();
    fx.grid.benchmark(a, 1e300, f64::MAX, u32::MAX, T0).unwrap();
    let b = fx.host_rec(a).benchmark.unwrap();
    assert_eq!(b.pages_per_s, MAX_BENCHMARK_PAGES_PER_S);
    assert_eq!(b.kb_per_s, MAX_BENCHMARK_KB_PER_S);
    assert_eq!(b.slots, beebot_shared::limits::MAX_SLOTS);
    assert_eq!(fx.grid.host_speed(a), Some(MAX_HOST_PAGES_PER_S));
    for (p, k) in [
        (f64::NAN, 1.0),
        (1.0, f64::INFINITY),
        (-1.0, 1.0),
        (1.0, -0.5),
    ] {
        let e = fx.grid.benchmark(a, p, k, 4, T0).unwrap_err();
        assert!(matches!(e, GridError::Invalid(_)), "{e}");
    }
    // A learned speed past the bound is bounded too.
    fx.grid.hosts.get_mut(&a).unwrap().avg_pages_per_s = Some(1e12);
    assert_eq!(fx.grid.host_speed(a), Some(MAX_HOST_PAGES_PER_S));
    fx.grid.hosts.get_mut(&a).unwrap().avg_pages_per_s = Some(f64::NAN);
    assert_eq!(fx.grid.host_speed(a), None);
}

#[test]
fn a_revoked_host_loses_its_units_and_its_access() {
    let (mut fx, _) = Fx::with_round(3, 3);
    let a = fx.host();
    let b = fx.host();
    let (units, _) = fx.ask(a, 2, &[], T0);
    fx.grid.revoke(a, T0 + 5).unwrap();
    for u in &units {
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Released);
        assert_eq!(fx.job(u.job_id).state, JobState::Queued);
    }
    assert!(fx.host_rec(a).revoked);
    let st = fx.grid.status();
    assert_eq!((st.hosts, st.hosts_revoked, st.jobs_queued), (1, 1, 3));

    let req = WorkRequest {
        want_seconds: 60,
        free_slots: 4,
        units_held: units.iter().map(|u| u.unit_id).collect(),
        open_windows: None,
    };
    assert!(matches!(
        fx.grid.request_work(a, &req, T0 + 6),
        Err(GridError::Revoked(id)) if id == a
    ));
    assert!(fx.host_rec(a).revoked);
    assert!(matches!(
        fx.grid.hello(a, T0 + 6),
        Err(GridError::Revoked(_))
    ));
    assert!(matches!(
        fx.grid.progress(a, units[0].unit_id, 1, 1, T0 + 6),
        Err(GridError::Revoked(_))
    ));
    let (sum, file) = result_for(&units[0], 1);
    assert!(matches!(
        fx.grid
            .upload(a, units[0].unit_id, sum, &file, None, T0 + 6),
        Err(GridError::Revoked(_))
    ));
    assert!(fx.link_names().is_empty());
    assert!(!fx.host_rec(b).revoked);

    // The queue is whole again for the others; A's old deadlines do not count.
    let (got, _) = fx.ask(b, 4, &[], T0 + 7);
    assert_eq!(got.len(), 3);
    assert_eq!(fx.grid.tick(units[0].deadline_ms).unwrap(), 0);
    assert_eq!(fx.host_rec(a).deadlines_missed, 0);
    assert!(matches!(
        fx.grid.revoke(b + 1000, T0),
        Err(GridError::UnknownHost(_))
    ));

    assert_eq!(fx.host_rec(a).state(), "revoked");
    // A host that leaves is refused alike, but listed as left.
    fx.grid.leave(b, T0 + 9).unwrap();
    assert_eq!(fx.host_rec(b).state(), "left");
    assert!(fx.host_rec(b).revoked);
    assert!(matches!(
        fx.grid.hello(b, T0 + 10),
        Err(GridError::Revoked(_))
    ));
    let st = fx.grid.status();
    assert_eq!((st.hosts, st.hosts_revoked, st.hosts_left), (0, 1, 1));
}

#[test]
fn a_name_in_use_is_refused_until_its_host_is_gone_and_names_find_hosts() {
    let mut fx = Fx::new();
    let tok = fx.grid.create_invite(5, T0 + HOUR_MS, T0).unwrap();
    let key = || sign::generate_key().verifying_key().to_bytes();
    let alice = fx.grid.enrol(&tok, key(), info("alice"), T0).unwrap();
    match fx.grid.enrol(&tok, key(), info("Alice "), T0 + 1) {
        Err(GridError::NameTaken { host_id, .. }) => assert_eq!(host_id, alice),
        other => panic!("a taken name: {other:?}"),
    }
    let e = fx
        .grid
        .enrol(&tok, key(), info("alice"), T0 + 1)
        .unwrap_err();
    assert!(e.to_string().contains("--name"), "{e}");
    assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 4, "no use spent");
    assert_eq!(fx.grid.find_host("alice").unwrap(), alice);
    assert_eq!(fx.grid.find_host(&alice.to_string()).unwrap(), alice);
    assert!(matches!(
        fx.grid.find_host("bob"),
        Err(GridError::UnknownHostName(_))
    ));
    // Once alice is revoked, her name is free again.
    fx.grid.revoke(alice, T0 + 2).unwrap();
    let alice2 = fx.grid.enrol(&tok, key(), info("alice"), T0 + 3).unwrap();
    assert_eq!(
        fx.grid.find_host("alice").unwrap(),
        alice2,
        "the active one"
    );
    // Two active hosts of one name (enrolled before names were unique)
    // are ambiguous: the error lists their ids.
    let mut other = fx.grid.hosts[&alice].clone();
    other.id = alice2 + 100;
    other.revoked = false;
    fx.grid.hosts.insert(other.id, other);
    match fx.grid.find_host("alice") {
        Err(GridError::AmbiguousHostName { ids, .. }) => {
            assert_eq!(ids, vec![alice2, alice2 + 100]);
        }
        other => panic!("ambiguous: {other:?}"),
    }
}

#[test]
fn a_long_silence_counts_as_time_away() {
    let mut fx = Fx::new();
    let a = fx.host();
    fx.grid.hello(a, T0 + scheduler::ONLINE_WINDOW_MS).unwrap();
    assert_eq!(fx.host_rec(a).offline_ms, 0);
    let later = T0 + 3 * scheduler::ONLINE_WINDOW_MS;
    fx.grid.hello(a, later).unwrap();
    assert_eq!(fx.host_rec(a).offline_ms, 2 * scheduler::ONLINE_WINDOW_MS);
    assert_eq!(fx.host_rec(a).last_seen_ms, later);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Every text a host sends (its name, OS and version at enrolment, a
    /// failure reason) in arbitrary Unicode: no panic, stored whole
    /// characters within the text limit.
    #[test]
    fn every_text_a_host_sends_is_bounded_and_never_panics(
        name in ".{0,700}",
        os in ".{0,700}",
        version in ".{0,700}",
        reason in ".{0,1200}",
    ) {
        let dir = tempfile::tempdir().unwrap();
        let io = GridIo::server(
            LinkPacks::new(dir.path().join("links")),
            sign::generate_key(),
        );
        let mut g = Grid::open(Default::default(), io, settings()).unwrap();
        let token = g.create_invite(1, T0 + HOUR_MS, T0).unwrap();
        let key = sign::generate_key();
        let info = HostInfo {
            name: name.clone(),
            os,
            client_version: version,
            cores: 4,
        };
        let h = g.enrol(&token, key.verifying_key().to_bytes(), info, T0).unwrap();
        let rec = g.hosts()[0].clone();
        for text in [&rec.info.name, &rec.info.os, &rec.info.client_version] {
            proptest::prop_assert!(text.len() <= MAX_TEXT_LEN);
        }
        proptest::prop_assert!(name.starts_with(&rec.info.name));
        g.add_sites(&site_names(1), T0).unwrap();
        g.start_round(params(3), T0).unwrap();
        let reply = g
            .request_work(
                h,
                &WorkRequest {
                    want_seconds: 60,
                    free_slots: 1,
                    units_held: vec![],
                    open_windows: None,
                },
                T0,
            )
            .unwrap();
        let pk = VerifyingKey::from_bytes(&g.project_public_key()).unwrap();
        let u = sign::verify_unit(&pk, &reply.units[0]).unwrap();
        g.fail(h, u.unit_id, &reason, T0 + 1).unwrap();
        let job = g.round(u.round_id).unwrap().1.remove(0);
        proptest::prop_assert_eq!(job.state, JobState::Queued);
        for r in &job.reasons {
            proptest::prop_assert!(r.len() <= MAX_TEXT_LEN);
        }
    }
}

/// Units a host holds after asking for every slot `asks` times (from `at`).
fn hold_all(fx: &mut Fx, host: u64, asks: u64, at: u64) -> Vec<u64> {
    let mut held: Vec<u64> = Vec::new();
    for i in 0..asks {
        let (units, _) = fx.ask(host, 64, &held, at + i * 1000);
        held.extend(units.iter().map(|u| u.unit_id));
    }
    held
}

#[test]
fn what_a_host_holds_follows_the_concurrency_its_client_reports() {
    let (mut fx, _round) = Fx::with_round(400, 3);
    // A trusted host whose benchmark said 2 slots, whose client now scans
    // 20 sites at once: it may hold units for 20 slots.
    let a = fx.host();
    fx.grid.benchmark(a, 5.0, 100.0, 2, T0).unwrap();
    fx.grid.set_trusted(a).unwrap();
    fx.grid.set_concurrency(a, 20, T0).unwrap();
    assert_eq!(fx.grid.host_concurrency(a), Some(20));
    let held = hold_all(&mut fx, a, 10, T0);
    assert_eq!(held.len(), held_cap(20));
    // Backing off to 3: no new unit until it holds fewer than 3 slots' worth.
    fx.grid.set_concurrency(a, 3, T0 + 20_000).unwrap();
    let (more, _) = fx.ask(a, 64, &held, T0 + 21_000);
    assert!(more.is_empty(), "{} units past the cap", more.len());
    // Claims outside 1..=MAX_SLOTS are clamped into it.
    fx.grid.set_concurrency(a, 0, T0 + 22_000).unwrap();
    assert_eq!(fx.grid.host_concurrency(a), Some(1));
    fx.grid.set_concurrency(a, u32::MAX, T0 + 22_000).unwrap();
    assert_eq!(
        fx.grid.host_concurrency(a),
        Some(beebot_shared::limits::MAX_SLOTS)
    );
    // Not trusted yet: at most the untrusted slots' worth, whatever it says.
    let b = fx.host();
    fx.grid.set_concurrency(b, 40, T0).unwrap();
    let held = hold_all(&mut fx, b, 10, T0 + 30_000);
    assert_eq!(held.len(), held_cap(crate::validate::UNTRUSTED_MAX_SLOTS));
    // Kept in memory only: the stored record does not carry it.
    fx.grid.persist().unwrap();
    let stored = fx.grid.store.hosts().unwrap();
    let stored = stored.iter().find(|h| h.id == a).unwrap();
    assert_eq!(stored.concurrency, None);
    // A revoked host is refused.
    fx.grid.revoke(b, T0 + 40_000).unwrap();
    assert!(fx.grid.set_concurrency(b, 4, T0 + 40_001).is_err());
}

/// A host not trusted yet (a new desktop, or every desktop of a trial with
/// validation off) earns a slot for each result kept, so its client's
/// concurrency is not held at four slots' worth of units for ever; a
/// result found invalid takes it back to four.
#[test]
fn a_host_not_trusted_earns_a_slot_per_result_kept() {
    use crate::validate::{untrusted_slots, UNTRUSTED_MAX_SLOTS};
    let (mut fx, _round) = Fx::with_round(200, 3);
    let b = fx.host();
    fx.grid.set_concurrency(b, 30, T0).unwrap();
    let (first, _) = fx.ask(b, 64, &[], T0);
    assert_eq!(first.len(), held_cap(UNTRUSTED_MAX_SLOTS));
    // Ten results kept (validation off): ten slots more.
    for (i, u) in first.iter().take(10).enumerate() {
        let at = T0 + 1000 + i as u64;
        assert_eq!(fx.upload(b, u, 2, at), UploadOutcome::Accepted);
    }
    assert_eq!(fx.grid.hosts[&b].jobs_done, 10);
    let held: Vec<u64> = first.iter().skip(10).map(|u| u.unit_id).collect();
    let (more, _) = fx.ask(b, 64, &held, T0 + 5000);
    assert_eq!(
        held.len() + more.len(),
        held_cap(UNTRUSTED_MAX_SLOTS + 10),
        "four slots and one per result kept"
    );
    // Never past what its client says it scans at once.
    assert_eq!(untrusted_slots(1000, 0, 0), UNTRUSTED_MAX_SLOTS + 1000);
    fx.grid.hosts.get_mut(&b).unwrap().jobs_done = 1000;
    assert_eq!(fx.grid.units_cap(b), held_cap(30));
    // Units let pass their deadline or given back take earned slots away:
    // a hoarder's past results do not cover what it drops.
    let h = fx.grid.hosts.get_mut(&b).unwrap();
    (h.deadlines_missed, h.failures) = (990, 4);
    assert_eq!(fx.grid.units_cap(b), held_cap(UNTRUSTED_MAX_SLOTS + 6));
    let h = fx.grid.hosts.get_mut(&b).unwrap();
    (h.deadlines_missed, h.failures) = (0, 0);
    // A result found invalid: four slots again, whatever it did before.
    fx.grid.hosts.get_mut(&b).unwrap().invalid_results = 1;
    assert_eq!(fx.grid.units_cap(b), held_cap(UNTRUSTED_MAX_SLOTS));
}
