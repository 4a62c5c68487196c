//! The contracts of [`Store`], written once as functions over `&dyn Store`
//! and run against both implementations: [`MemoryStore`], and
//! [`SledStore`] in a fresh directory. Tests of what only a disk can show
//! (reopening) are at the end.

use super::*;

use crate::model::*;
use beebot_shared::proto::HostInfo;
use beebot_shared::scope::Exclusion;

fn site(host: &str, pages: Option<u64>) -> SiteRecord {
    SiteRecord {
        host: host.into(),
        added_ms: 1,
        last_scan: pages.map(|pages| SiteStats {
            pages,
            ..Default::default()
        }),
    }
}

fn invite(byte: u8, uses_left: u32) -> InviteRecord {
    InviteRecord {
        token_sha256: [byte; 32],
        uses_left,
        expires_ms: 9,
        created_ms: 1,
    }
}

fn excluded(host: &str) -> ExclusionRecord {
    ExclusionRecord {
        exclusion: Exclusion {
            host: host.into(),
            subdomains: false,
        },
        reason: "owner asked".into(),
        excluded_ms: 5,
    }
}

fn round(id: u64, job_ids: Vec<u64>) -> RoundRecord {
    RoundRecord {
        id,
        created_ms: 1,
        finished_ms: None,
        params: RoundParams::default(),
        state: RoundState::Running,
        job_ids,
        every_ms: None,
        next_round: None,
        folded: Vec::new(),
    }
}

fn job(id: u64, round_id: u64, site: &str) -> JobRecord {
    JobRecord {
        id,
        round_id,
        site: site.into(),
        state: JobState::Queued,
        attempts: Vec::new(),
        result: None,
        reasons: Vec::new(),
        est_pages: 10.0,
        size_known: false,
        batch_host: None,
        segments: Vec::new(),
        chain_sketch: Vec::new(),
        chain: 0,
        candidates: Vec::new(),
        validation: JobValidation::default(),
    }
}

fn host(id: u64, name: &str) -> HostRecord {
    let info = HostInfo {
        name: name.into(),
        os: "linux".into(),
        client_version: "0".into(),
        cores: 4,
    };
    HostRecord::new(id, [id as u8; 32], info, 1)
}

/// Sites, invites and exclusions: puts replace, removes say whether there
/// was a record, listings are in key order.
fn contract_keyed_records(s: &dyn Store) {
    s.put_site(&site("b.test", None)).unwrap();
    s.put_site(&site("a.test", Some(3))).unwrap();
    s.put_site(&site("a.test", Some(7))).unwrap();
    s.put_invite(&invite(5, 2)).unwrap();
    s.flush().unwrap();
    s.sync().unwrap();
    let sites = s.sites().unwrap();
    assert_eq!(
        sites.iter().map(|x| x.host.as_str()).collect::<Vec<_>>(),
        ["a.test", "b.test"]
    );
    assert_eq!(sites[0].last_scan.as_ref().map(|l| l.pages), Some(7));
    assert!(s.remove_site("b.test").unwrap());
    assert!(!s.remove_site("b.test").unwrap());
    assert_eq!(s.sites().unwrap(), [site("a.test", Some(7))]);
    s.put_invite(&invite(6, 1)).unwrap();
    assert!(s.remove_invite(&[6; 32]).unwrap());
    assert!(!s.remove_invite(&[6; 32]).unwrap());
    assert_eq!(s.invites().unwrap(), [invite(5, 2)]);
    s.put_exclusion(&excluded("b.x.test")).unwrap();
    s.put_exclusion(&excluded("x.test")).unwrap();
    s.put_exclusion(&excluded("y.test")).unwrap();
    assert!(s.remove_exclusion("y.test").unwrap());
    assert!(!s.remove_exclusion("y.test").unwrap());
    let kept: Vec<String> = s
        .exclusions()
        .unwrap()
        .into_iter()
        .map(|e| e.exclusion.host)
        .collect();
    // In the order of their reversed labels: a host before its subdomains.
    assert_eq!(kept, ["x.test", "b.x.test"]);
    assert!(s.failure().is_none());
}

/// Rounds, jobs and hosts come back as stored, by id (numeric order, not
/// the order of their decimal digits), a put replacing the record of its id.
fn contract_records_by_id(s: &dyn Store) {
    assert!(s.rounds().unwrap().is_empty() && s.jobs().unwrap().is_empty());
    assert!(s.hosts().unwrap().is_empty());
    for id in [300, 2, 1000] {
        s.put_round(&round(id, vec![id + 1])).unwrap();
        s.put_job(&job(id, 7, "a.test")).unwrap();
        s.put_host(&host(id, "desk")).unwrap();
    }
    let mut done = job(300, 7, "a.test");
    done.state = JobState::Done;
    done.reasons.push("a reason: ünïcode".into());
    s.put_job(&done).unwrap();
    s.put_host(&host(2, "renamed")).unwrap();
    s.flush().unwrap();
    assert_eq!(
        s.rounds().unwrap(),
        [
            round(2, vec![3]),
            round(300, vec![301]),
            round(1000, vec![1001])
        ]
    );
    assert_eq!(
        s.jobs().unwrap(),
        [job(2, 7, "a.test"), done, job(1000, 7, "a.test")]
    );
    assert_eq!(
        s.hosts().unwrap(),
        [host(2, "renamed"), host(300, "desk"), host(1000, "desk")]
    );
}

/// Ids are unique and increasing, and 0 stays free.
fn contract_ids(s: &dyn Store) {
    // Each kind counts from 1 on its own, whatever the others drew.
    for n in 1..=300 {
        for kind in IdKind::ALL {
            assert_eq!(s.next_id(kind).unwrap(), n, "{kind:?}");
        }
    }
    assert_eq!(s.next_id(IdKind::Unit).unwrap(), 301);
    assert_eq!(s.next_id(IdKind::Round).unwrap(), 301);
}

/// A grid's writes are applied in their order (a record put then removed
/// is gone, put again is there), an id counter written by them is what
/// `last_id` reads and `next_id` goes on from, and what `records` reads
/// back is what they made.
fn contract_writes_apply_in_order(s: &dyn Store) {
    let writes = [
        Write::Site(site("a.test", None)),
        Write::Site(site("b.test", Some(3))),
        Write::SiteGone("a.test".into()),
        Write::Invite(invite(1, 2)),
        Write::InviteGone([1; 32]),
        Write::Invite(invite(2, 1)),
        Write::Exclusion(excluded("x.test")),
        Write::ExclusionGone("x.test".into()),
        Write::Exclusion(excluded("y.test")),
        Write::LastId(IdKind::Round, 4),
        Write::Round(round(4, vec![7])),
        Write::LastId(IdKind::Job, 7),
        Write::Job(job(7, 4, "b.test")),
        Write::LastId(IdKind::Host, 2),
        Write::Host(host(2, "desk")),
        Write::Host(host(2, "renamed")),
    ];
    s.apply(&writes).unwrap();
    s.flush().unwrap();
    let r = records(s).unwrap();
    assert_eq!(r.sites, [site("b.test", Some(3))]);
    assert_eq!(r.invites, [invite(2, 1)]);
    assert_eq!(r.exclusions, [excluded("y.test")]);
    assert_eq!(r.rounds, [round(4, vec![7])]);
    assert_eq!(r.jobs, [job(7, 4, "b.test")]);
    assert_eq!(r.hosts, [host(2, "renamed")]);
    assert_eq!(r.last_ids, [4, 7, 2, 0]);
    assert_eq!(s.next_id(IdKind::Round).unwrap(), 5);
    assert_eq!(s.last_id(IdKind::Round).unwrap(), 5);
    assert!(s.failure().is_none());
}

/// A record too large to store, among a grid's writes, stops the store:
/// the grid is already past it. The writes before it were made.
fn contract_an_oversized_write_stops_the_store(s: &dyn Store) {
    let huge = SiteRecord {
        host: "x".repeat(MAX_RECORD_BYTES + 1),
        added_ms: 0,
        last_scan: None,
    };
    let writes = [
        Write::Site(site("a.test", None)),
        Write::Site(huge),
        Write::Site(site("c.test", None)),
    ];
    assert!(matches!(s.apply(&writes), Err(StoreError::Encode(_))));
    assert!(s.failure().is_some());
    assert!(matches!(s.flush(), Err(StoreError::Failed(_))));
    assert_eq!(s.sites().unwrap(), [site("a.test", None)]);
}

/// With flushes deferred, `flush` succeeds without syncing and `sync`
/// succeeds, then again with nothing new; the records are all there.
fn contract_group_commit(s: &dyn Store) {
    s.defer_flushes();
    s.put_site(&site("d.test", None)).unwrap();
    s.flush().unwrap();
    s.put_site(&site("e.test", None)).unwrap();
    s.sync().unwrap();
    s.sync().unwrap();
    s.flush().unwrap();
    assert_eq!(s.sites().unwrap().len(), 2);
    assert!(s.failure().is_none());
}

/// A record too large to store is refused, and the store goes on.
fn contract_oversized_records_are_refused(s: &dyn Store) {
    let huge = SiteRecord {
        host: "x".repeat(MAX_RECORD_BYTES + 1),
        added_ms: 0,
        last_scan: None,
    };
    assert!(matches!(s.put_site(&huge), Err(StoreError::Encode(_))));
    assert!(s.sites().unwrap().is_empty());
    assert!(s.failure().is_none());
    s.put_site(&site("a.test", None)).unwrap();
    s.flush().unwrap();
}

/// After a failed write every write, flush and sync fails naming the first
/// error, `failure` names it, and what was stored before is still there.
/// `fail_next_write` makes the store's next write fail.
fn contract_fail_stop(s: &dyn Store, fail_next_write: &dyn Fn()) {
    s.put_site(&site("a.test", None)).unwrap();
    s.sync().unwrap();
    fail_next_write();
    let first = s.put_site(&site("b.test", None)).unwrap_err();
    assert!(matches!(first, StoreError::Injected), "{first}");
    assert_eq!(s.failure(), Some(first.to_string()));
    let same = |r: Result<(), StoreError>| match r {
        Err(StoreError::Failed(f)) => assert_eq!(f, first.to_string()),
        other => panic!("a write after the failure: {other:?}"),
    };
    same(s.put_site(&site("c.test", None)));
    same(s.put_job(&job(1, 1, "c.test")));
    same(s.remove_site("a.test").map(|_| ()));
    same(s.remove_invite(&[1; 32]).map(|_| ()));
    same(s.remove_exclusion("a.test").map(|_| ()));
    same(s.next_id(IdKind::Job).map(|_| ()));
    same(s.flush());
    same(s.sync());
    assert_eq!(s.sites().unwrap(), [site("a.test", None)]);
}

/// A sync that fails stops the store like a failed write.
fn contract_a_failed_sync_stops_the_store(s: &dyn Store, fail_next_write: &dyn Fn()) {
    s.defer_flushes();
    s.put_site(&site("a.test", None)).unwrap();
    s.flush().unwrap();
    fail_next_write();
    let first = s.sync().unwrap_err();
    assert_eq!(s.failure(), Some(first.to_string()));
    assert!(matches!(s.sync(), Err(StoreError::Failed(_))));
    assert!(matches!(
        s.put_site(&site("b.test", None)),
        Err(StoreError::Failed(_))
    ));
}

/// One `#[test]` per contract and implementation.
macro_rules! on_both_stores {
    ($($contract:ident),* $(,)?) => {
        mod memory {
            $(#[test]
            fn $contract() {
                super::$contract(&super::MemoryStore::new());
            })*
        }
        mod sled {
            $(#[test]
            fn $contract() {
                let dir = tempfile::tempdir().unwrap();
                super::$contract(&super::SledStore::open(dir.path()).unwrap());
            })*
        }
    };
}

on_both_stores!(
    contract_keyed_records,
    contract_records_by_id,
    contract_ids,
    contract_group_commit,
    contract_oversized_records_are_refused,
    contract_writes_apply_in_order,
    contract_an_oversized_write_stops_the_store,
);

#[test]
fn the_memory_store_stops_after_a_failure() {
    let s = MemoryStore::new();
    contract_fail_stop(&s, &|| s.fail_next_write());
    let s = MemoryStore::new();
    contract_a_failed_sync_stops_the_store(&s, &|| s.fail_next_write());
}

#[test]
fn the_sled_store_stops_after_a_failure_and_keeps_what_was_synced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        contract_fail_stop(&s, &|| s.fail_next_write());
    }
    // Reopened (the server restarted): what was acknowledged is there.
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.sites().unwrap(), [site("a.test", None)]);
    assert!(s.failure().is_none());
    s.put_site(&site("b.test", None)).unwrap();
    s.sync().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    contract_a_failed_sync_stops_the_store(&s, &|| s.fail_next_write());
}

#[test]
fn records_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let s = SledStore::open(dir.path()).unwrap();
        let before = s.next_id(IdKind::Unit).unwrap();
        contract_keyed_records(&s);
        contract_records_by_id(&s);
        s.sync().unwrap();
        before
    };
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.sites().unwrap().len(), 1);
    assert_eq!(s.exclusions().unwrap().len(), 2);
    assert_eq!(s.invites().unwrap()[0].uses_left, 2);
    assert_eq!(s.jobs().unwrap().len(), 3);
    assert_eq!(s.hosts().unwrap()[0].info.name, "renamed");
    assert!(s.remove_site("a.test").unwrap());
    assert!(s.sites().unwrap().is_empty());
    // Ids stay unique across a reopen.
    assert!(s.next_id(IdKind::Unit).unwrap() > before);
}

#[test]
fn ids_grow_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let s = SledStore::open(dir.path()).unwrap();
        for _ in 0..10 {
            let id = s.next_id(IdKind::Round).unwrap();
            assert_eq!(id, last + 1, "{last} then {id}");
            last = id;
        }
        s.sync().unwrap();
    }
}

#[test]
fn shared_handles_see_the_same_records_and_a_new_store_none() {
    let s = memory();
    let other = s.clone();
    other.put_site(&site("c.test", None)).unwrap();
    assert_eq!(s.sites().unwrap().len(), 1);
    assert!(memory().sites().unwrap().is_empty());
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path()).unwrap();
    let other = s.clone();
    other.put_site(&site("c.test", None)).unwrap();
    assert_eq!(s.sites().unwrap().len(), 1);
}

/// Write straight into the sled database in `dir`, as an older (or newer)
/// server would have left it.
fn raw_sled(dir: &Path, write: impl FnOnce(&::sled::Db)) {
    let db = raw_open(dir);
    write(&db);
    db.flush().unwrap();
}

/// sled opened in `dir` as it is, waiting out the lock of a store just
/// dropped (its flusher thread still stopping), as `SledStore::open` does.
fn raw_open(dir: &Path) -> ::sled::Db {
    let started = std::time::Instant::now();
    loop {
        match ::sled::open(dir) {
            Err(::sled::Error::Io(e))
                if e.to_string().contains("lock")
                    && started.elapsed() < std::time::Duration::from_secs(10) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.unwrap(),
        }
    }
}

fn meta_format(dir: &Path) -> Option<Vec<u8>> {
    let db = raw_open(dir);
    let v = db.open_tree("meta").unwrap().get(b"format").unwrap();
    v.map(|v| v.to_vec())
}

/// A store of a build before 0.1.0 (records, no `meta` tree; its rounds
/// in the `rounds` tree) is refused and left as it is: 0.1.0 migrates it.
#[test]
fn a_store_from_before_formats_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    raw_sled(dir.path(), |db| {
        let r = codec::encode(&round(1, vec![5]), MAX_RECORD_BYTES).unwrap();
        db.open_tree("rounds")
            .unwrap()
            .insert(id_key(1), r)
            .unwrap();
        let j = codec::encode(&job(5, 1, "a.test"), MAX_RECORD_BYTES).unwrap();
        db.open_tree("jobs").unwrap().insert(id_key(5), j).unwrap();
    });
    let err = refused(dir.path());
    assert!(
        err.contains("a store from before 0.1.0") && err.contains("beebot-server 0.1.0"),
        "{err}"
    );
    assert_eq!(meta_format(dir.path()), None, "nothing written");
    let db = raw_open(dir.path());
    assert_eq!(db.open_tree("jobs").unwrap().len(), 1);
    assert_eq!(db.open_tree("rounds").unwrap().len(), 1);
}

#[test]
fn a_new_store_has_its_format_written_at_opening() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    assert_eq!(meta_format(dir.path()), Some(2u32.to_le_bytes().to_vec()));
    let s = SledStore::open(dir.path()).unwrap();
    assert!(s.rounds().unwrap().is_empty());
}

/// Why opening the store in `dir` is refused.
fn refused(dir: &Path) -> String {
    SledStore::open(dir).err().expect("refused").to_string()
}

#[test]
fn a_newer_format_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let a = round(1, vec![1]);
    raw_sled(dir.path(), |db| {
        db.open_tree("meta")
            .unwrap()
            .insert(b"format", 3u32.to_le_bytes().to_vec())
            .unwrap();
        let stored = codec::encode(&format::StoredRound::from(&a), MAX_RECORD_BYTES).unwrap();
        db.open_tree("rounds.v2")
            .unwrap()
            .insert(id_key(1), stored)
            .unwrap();
    });
    let err = refused(dir.path());
    assert!(
        err.contains("store format 3, newer than this server reads (up to 2)"),
        "{err}"
    );
    assert_eq!(meta_format(dir.path()), Some(3u32.to_le_bytes().to_vec()));
    let db = raw_open(dir.path());
    assert_eq!(db.open_tree("rounds.v2").unwrap().len(), 1);
    drop(db);
    // A format no release wrote is damage, named as such.
    raw_sled(dir.path(), |db| {
        db.open_tree("meta")
            .unwrap()
            .insert(b"format", 1u32.to_le_bytes().to_vec())
            .unwrap();
    });
    let err = refused(dir.path());
    assert!(err.contains("format 1, which no release wrote"), "{err}");
    // A format that is not a number is damage too.
    raw_sled(dir.path(), |db| {
        db.open_tree("meta")
            .unwrap()
            .insert(b"format", vec![1, 2, 3])
            .unwrap();
    });
    let err = refused(dir.path());
    assert!(
        err.contains("stored record is unreadable (meta/format)"),
        "{err}"
    );
}

#[test]
fn a_damaged_run_of_job_ids_is_an_error_not_an_allocation() {
    let s = MemoryStore::new();
    let mut r = format::StoredRound::from(&round(4, vec![1, 2, 3]));
    r.damage_runs(u64::MAX / 2);
    s.insert(
        Tree::Rounds,
        &id_key(4),
        codec::encode(&r, MAX_RECORD_BYTES).unwrap(),
    )
    .unwrap();
    let err = s.rounds().unwrap_err().to_string();
    assert!(
        err.contains("stored record is unreadable (rounds.v2/"),
        "{err}"
    );
    assert!(err.contains("job id runs pass 1000000 ids"), "{err}");
    // Runs out of order would give unsorted ids: damage too.
    let r = format::StoredRound::from(&round(5, vec![5, 6, 1, 2]));
    let s = MemoryStore::new();
    s.insert(
        Tree::Rounds,
        &id_key(5),
        codec::encode(&r, MAX_RECORD_BYTES).unwrap(),
    )
    .unwrap();
    let err = s.rounds().unwrap_err().to_string();
    assert!(err.contains("job id runs out of order"), "{err}");
}
