//! Durable state behind one interface, the [`Store`] trait: the grid and the
//! server read and write records through it and never see how they are kept.
//!
//! Two implementations: [`SledStore`] on disk (the server's) and
//! [`MemoryStore`] in memory (the simulator's and the unit tests'). sled is
//! named nowhere outside this module and its `sled` child. Both keep every
//! record kind in a tree of its own, keyed and encoded alike, so both list
//! records in the same order and refuse the same records; what they share
//! (keys, encodings, ids handed out, group commit, fail-stop) is written
//! once here, over the few primitives each one provides (`Backend`).
//! `conformance` holds the contract tests both pass.
//!
//! Invariants, for every implementation (the contracts of [`Store`]):
//! - every write is followed by [`Store::flush`] (or, with flushes deferred,
//!   by [`Store::sync`]) before the caller acknowledges anything, so nothing
//!   acknowledged is lost on a crash;
//! - ids are unique, increasing and never reused, across restarts: rounds,
//!   jobs, hosts and units each count from 1 on their own; 0 is never handed
//!   out ("none");
//! - group commit: each fsync is told to a `SyncObserver` with its whole
//!   group when the next one begins;
//! - fail-stop: after the first failed write or sync every later write and
//!   sync fails, naming that first error, until the server restarts and
//!   reloads what is on disk (`serve` does so itself once the disk takes
//!   writes again: [`crate::RunEnd`]). Reads still answer.
//!
//! A store never decides anything about the grid: it keeps the records it is
//! given, and checks only that they encode within [`MAX_RECORD_BYTES`].

mod format;
mod memory;
mod sled;

#[cfg(test)]
mod conformance;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use beebot_shared::codec;
use serde::{de::DeserializeOwned, Serialize};

pub use crate::model::IdKind;
use crate::model::{
    ExclusionRecord, HostRecord, InviteRecord, JobRecord, Records, RoundRecord, SiteRecord, Write,
};

pub use self::format::{check_round, STORE_FORMAT};
pub use self::memory::{MemoryDisk, MemoryStore};
pub use self::sled::SledStore;

/// Largest stored record (a job with its attempts and reasons).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {}", sled_message(.0))]
    Sled(#[from] ::sled::Error),
    #[error("stored record is unreadable ({tree}/{key}): {msg}")]
    Corrupt {
        tree: &'static str,
        key: String,
        msg: String,
    },
    #[error("cannot encode record: {0}")]
    Encode(String),
    /// The data directory was written by a newer server.
    #[error(
        "the data directory holds store format {found}, newer than this server reads \
         (up to {supported}): run the beebot-server that wrote it, or a newer one"
    )]
    Format { found: u32, supported: u32 },
    /// The data directory holds records and no format number: a store of
    /// a build before 0.1.0 that 0.1.0 never opened (it migrated them).
    #[error(
        "the data directory holds a store from before 0.1.0 (records, and no format number): \
         open it once with beebot-server 0.1.0, which brings it to format {supported}"
    )]
    Unnumbered { supported: u32 },
    #[error("storage failed earlier ({0}); restart the server")]
    Failed(String),
    /// A failure asked for by [`MemoryStore::fail_next_write`] (tests, what-ifs).
    #[error("storage error: injected failure")]
    Injected,
}

/// sled's error in words. sled wraps the OS error's debug form in its I/O
/// errors, so a known kind is named by the kind ("no storage space").
fn sled_message(e: &::sled::Error) -> String {
    match e {
        ::sled::Error::Io(io) if io.raw_os_error().is_some() => io.to_string(),
        ::sled::Error::Io(io) if io.kind() != std::io::ErrorKind::Other => {
            format!("{} ({io})", io.kind())
        }
        other => other.to_string(),
    }
}

/// The server's records, kept durably.
///
/// Contracts every implementation keeps (`conformance` tests them on each):
///
/// - **Records.** `put_*` stores a record under its key (a site by host, an
///   invite by token hash, an exclusion by the host's reversed labels, the
///   others by id), replacing the one stored there; `remove_*` removes it and
///   says whether there was one; the listing methods return every record of
///   a kind in key order. A record that does not encode within
///   [`MAX_RECORD_BYTES`] is refused with [`StoreError::Encode`] (not a
///   storage failure: the store goes on).
/// - **Ids.** [`Store::next_id`] hands out ids of one [`IdKind`] that are
///   unique and increasing, never 0 and never reused, also after a restart:
///   rounds, jobs, hosts and units each count from 1 on their own. An id is
///   written like a record (its counter in the `ids` tree), so it is durable
///   with the next sync.
/// - **Group commit.** [`Store::flush`] makes every write so far durable,
///   unless [`Store::defer_flushes`] was called: then it only notes that a
///   sync is due, and the caller promises to call [`Store::sync`] before it
///   acknowledges anything. `sync` makes every write made before the call
///   durable (also other callers' writes), sharing one fsync with concurrent
///   callers; it returns at once when there is nothing new to sync.
/// - **Fail-stop.** The first write or sync that fails is remembered
///   ([`Store::failure`] names it from then on), and every later write,
///   `flush` and `sync` fails with [`StoreError::Failed`] naming it. Nothing
///   acknowledged is lost: what was synced before the failure stays stored.
pub trait Store: Send + Sync {
    /// From now on [`Store::flush`] only notes that a sync is due: the caller
    /// promises to call [`Store::sync`] before acknowledging anything.
    fn defer_flushes(&self);
    /// The storage error that stopped this store, if one did.
    fn failure(&self) -> Option<String>;
    /// A new unique id of `kind` (1 first, increasing, never reused across
    /// restarts). Not for a store a grid runs on: the grid hands out its
    /// own ids and writes them as [`Write::LastId`].
    fn next_id(&self, kind: IdKind) -> Result<u64, StoreError>;
    /// The last id handed out of `kind` (0: none yet).
    fn last_id(&self, kind: IdKind) -> Result<u64, StoreError>;
    /// Persist a grid's writes in their order ([`Write`]). Any error,
    /// [`StoreError::Encode`] too, is the store's failure (fail-stop): the
    /// grid has already made the change in memory, so nothing may be
    /// acknowledged until a restart reloads what the disk holds.
    fn apply(&self, writes: &[Write]) -> Result<(), StoreError>;
    /// Make every write so far durable (deferred: see [`Store::defer_flushes`]).
    fn flush(&self) -> Result<(), StoreError>;
    /// Make every write made before this call durable, sharing one fsync with
    /// concurrent callers.
    fn sync(&self) -> Result<(), StoreError>;
    /// Tell `observer` of every fsync from now on (the first observer set
    /// stays: a store has one server).
    fn observe_syncs(&self, observer: Arc<dyn SyncObserver>);

    fn put_site(&self, site: &SiteRecord) -> Result<(), StoreError>;
    fn remove_site(&self, host: &str) -> Result<bool, StoreError>;
    fn sites(&self) -> Result<Vec<SiteRecord>, StoreError>;

    fn put_round(&self, round: &RoundRecord) -> Result<(), StoreError>;
    fn rounds(&self) -> Result<Vec<RoundRecord>, StoreError>;

    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError>;
    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError>;

    fn put_host(&self, host: &HostRecord) -> Result<(), StoreError>;
    fn hosts(&self) -> Result<Vec<HostRecord>, StoreError>;

    fn put_invite(&self, invite: &InviteRecord) -> Result<(), StoreError>;
    fn remove_invite(&self, token_sha256: &[u8; 32]) -> Result<bool, StoreError>;
    fn invites(&self) -> Result<Vec<InviteRecord>, StoreError>;

    fn put_exclusion(&self, e: &ExclusionRecord) -> Result<(), StoreError>;
    fn remove_exclusion(&self, host: &str) -> Result<bool, StoreError>;
    fn exclusions(&self) -> Result<Vec<ExclusionRecord>, StoreError>;
}

/// A handle to a store, shared by the grid and the server: cloning gives
/// another handle to the same records.
pub type SharedStore = Arc<dyn Store>;

/// Every record `store` holds, to open a grid with.
pub fn records(store: &dyn Store) -> Result<Records, StoreError> {
    let mut last_ids = [0; 4];
    for (last, kind) in last_ids.iter_mut().zip(IdKind::ALL) {
        *last = store.last_id(kind)?;
    }
    Ok(Records {
        sites: store.sites()?,
        rounds: store.rounds()?,
        jobs: store.jobs()?,
        hosts: store.hosts()?,
        invites: store.invites()?,
        exclusions: store.exclusions()?,
        last_ids,
    })
}

/// Open (or create) the store on disk in `dir` (see [`SledStore::open`]).
pub fn open(dir: &Path) -> Result<SharedStore, StoreError> {
    Ok(Arc::new(SledStore::open(dir)?))
}

/// Why the store in `store` did not open, in one message that tells the
/// cause apart and what to do: another server holds it, no permission, a
/// read-only file system, a full disk, a damaged store, a newer format.
pub fn open_failure(store: &Path, e: &StoreError) -> String {
    let at = store.display();
    let damaged = |why: &str| {
        format!(
            "the store in {at} is damaged ({why}): restore the data dir from its backup \
             (see the admin guide), or move it away and `init` a new one"
        )
    };
    match e {
        StoreError::Sled(sled_err @ ::sled::Error::Io(io)) => {
            let text = io.to_string();
            if text.contains("could not acquire lock")
                || io.kind() == std::io::ErrorKind::WouldBlock
            {
                format!(
                    "another beebot-server holds the store in {at} (its lock is taken): \
                     stop that server first, or give this one another --data-dir"
                )
            } else if io.kind() == std::io::ErrorKind::PermissionDenied {
                format!(
                    "no permission to open the store in {at} ({text}): run the server as \
                     the user that owns the data dir"
                )
            } else if io.kind() == std::io::ErrorKind::ReadOnlyFilesystem
                || io.raw_os_error() == Some(30)
            {
                format!(
                    "the store in {at} is on a read-only file system: the server writes \
                     its records there, so mount it writable"
                )
            } else if io.kind() == std::io::ErrorKind::StorageFull || io.raw_os_error() == Some(28)
            {
                format!("no space left on the disk of {at}: free some and start again")
            } else {
                format!("cannot open the store in {at}: {}", sled_message(sled_err))
            }
        }
        StoreError::Sled(
            bad @ (::sled::Error::Corruption { .. }
            | ::sled::Error::Unsupported(_)
            | ::sled::Error::ReportableBug(_)),
        ) => damaged(&bad.to_string()),
        StoreError::Corrupt { .. } => damaged(&e.to_string()),
        StoreError::Format { .. } | StoreError::Unnumbered { .. } => e.to_string(),
        other => format!("cannot open the store in {at}: {other}"),
    }
}

/// A new, empty store in memory (see [`MemoryStore`]).
pub fn memory() -> SharedStore {
    Arc::new(MemoryStore::new())
}

/// The record kinds, each kept in a tree of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tree {
    /// The last id handed out of each [`IdKind`], keyed by its name.
    Ids,
    /// The store's format ([`STORE_FORMAT`]), under `format`.
    Meta,
    Sites,
    /// Rounds, their job ids as runs of consecutive ids (format 2).
    Rounds,
    Jobs,
    Hosts,
    Invites,
    /// Excluded hosts, keyed by [`beebot_shared::scope::reversed_labels`] of the host.
    Exclusions,
}

impl Tree {
    const ALL: [Tree; 8] = [
        Tree::Ids,
        Tree::Meta,
        Tree::Sites,
        Tree::Rounds,
        Tree::Jobs,
        Tree::Hosts,
        Tree::Invites,
        Tree::Exclusions,
    ];

    /// The tree's name on disk (and in errors).
    fn name(self) -> &'static str {
        match self {
            Tree::Ids => "ids",
            Tree::Meta => "meta",
            Tree::Sites => "sites",
            Tree::Rounds => "rounds.v2",
            Tree::Jobs => "jobs",
            Tree::Hosts => "hosts",
            Tree::Invites => "invites",
            Tree::Exclusions => "exclusions",
        }
    }
}

/// A stored record: its key and its encoded value.
/// The key of an id kind's counter in the `ids` tree.
fn id_name(kind: IdKind) -> &'static str {
    match kind {
        IdKind::Round => "round",
        IdKind::Job => "job",
        IdKind::Host => "host",
        IdKind::Unit => "unit",
    }
}

type Entry = (Vec<u8>, Vec<u8>);

/// What an implementation provides: trees of encoded records, an id
/// sequence, and a way to make writes durable. Errors are passed on as they
/// are; [`Store`]'s implementation over a backend turns them into fail-stop.
trait Backend: Send + Sync {
    /// The write and durability bookkeeping of this store.
    fn ledger(&self) -> &Ledger;
    fn insert(&self, tree: Tree, key: &[u8], value: Vec<u8>) -> Result<(), StoreError>;
    fn remove(&self, tree: Tree, key: &[u8]) -> Result<bool, StoreError>;
    /// Every `(key, value)` of `tree`, in key order.
    fn entries(&self, tree: Tree) -> Result<Vec<Entry>, StoreError>;
    /// Make every write so far durable (one fsync).
    fn write_out(&self) -> Result<(), StoreError>;
}

/// Write and durability bookkeeping, one per store.
#[derive(Default)]
struct Ledger {
    /// `flush` defers to the caller's `sync`.
    deferred: AtomicBool,
    /// Writes made so far.
    written: AtomicU64,
    /// Writes known to be durable.
    durable: AtomicU64,
    /// One fsync at a time; the others wait and usually find their writes covered.
    syncing: Mutex<()>,
    /// The first storage error, once there was one.
    failure: Mutex<Option<String>>,
    /// The next write or sync fails ([`StoreError::Injected`]).
    fail_next: AtomicBool,
    /// One id handed out at a time.
    ids: Mutex<()>,
    /// Sync calls that waited for the last fsync and found themselves
    /// covered by it: with its own caller, that fsync's group, told to the
    /// observer when the next fsync begins (only then is it known).
    rode_along: AtomicU64,
    /// The last fsync's time, not yet told to the observer.
    untold: Mutex<Option<Duration>>,
    /// Told of every fsync ([`Store::observe_syncs`]).
    observer: OnceLock<Arc<dyn SyncObserver>>,
}

/// Told of every fsync a store makes (the server's metrics): how long it
/// took and the group it served: its own sync call and the calls that
/// waited for it and were covered by it (group commit: one fsync, many
/// callers). An fsync is told when the next one begins, once its group is
/// whole.
pub trait SyncObserver: Send + Sync {
    fn synced(&self, took: Duration, group: u64);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ledger {
    fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    fn check(&self) -> Result<(), StoreError> {
        match self.failure() {
            Some(f) => Err(StoreError::Failed(f)),
            None => Ok(()),
        }
    }

    /// Remember the first storage error (fail-stop) and pass it on.
    fn failed<T>(&self, e: StoreError) -> Result<T, StoreError> {
        let mut f = lock(&self.failure);
        if f.is_none() {
            tracing::error!(
                "storage failed: {e}; answering errors until its disk takes writes again"
            );
            *f = Some(e.to_string());
        }
        Err(e)
    }

    /// Make the next write or sync fail.
    fn fail_next(&self) {
        self.fail_next.store(true, Ordering::SeqCst);
    }

    /// Run `op`, a storage operation: refused once the store failed, its
    /// error made the store's failure.
    fn attempt<T>(&self, op: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.check()?;
        let outcome = if self.fail_next.swap(false, Ordering::SeqCst) {
            Err(StoreError::Injected)
        } else {
            op()
        };
        outcome.or_else(|e| self.failed(e))
    }

    /// Run `op`, one write, counting it for [`Ledger::sync`].
    fn write<T>(&self, op: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.check()?;
        self.written.fetch_add(1, Ordering::SeqCst);
        self.attempt(op)
    }

    /// Make every write counted before this call durable with `write_out`,
    /// unless a concurrent call already did.
    fn sync(&self, write_out: impl FnOnce() -> Result<(), StoreError>) -> Result<(), StoreError> {
        self.check()?;
        let target = self.written.load(Ordering::SeqCst);
        if self.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let _one = lock(&self.syncing);
        if self.durable.load(Ordering::SeqCst) >= target {
            self.rode_along.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let riders = self.rode_along.swap(0, Ordering::SeqCst);
        if let (Some(observer), Some(took)) = (self.observer.get(), lock(&self.untold).take()) {
            observer.synced(took, 1 + riders);
        }
        // Everything written up to here is covered by this write-out.
        let covered = self.written.load(Ordering::SeqCst);
        let started = Instant::now();
        self.attempt(write_out)?;
        *lock(&self.untold) = Some(started.elapsed());
        self.durable.fetch_max(covered, Ordering::SeqCst);
        Ok(())
    }
}

fn id_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

fn exclusion_key(host: &str) -> String {
    beebot_shared::scope::reversed_labels(host)
}

/// Encode `value` and store it under `key` in `tree`.
fn put<T: Serialize>(
    b: &impl Backend,
    tree: Tree,
    key: &[u8],
    value: &T,
) -> Result<(), StoreError> {
    b.ledger().check()?;
    let bytes =
        codec::encode(value, MAX_RECORD_BYTES).map_err(|e| StoreError::Encode(e.to_string()))?;
    b.ledger().write(|| b.insert(tree, key, bytes))
}

fn remove(b: &impl Backend, tree: Tree, key: &[u8]) -> Result<bool, StoreError> {
    b.ledger().write(|| b.remove(tree, key))
}

/// Every record of `tree`, decoded, in key order.
fn all<T: DeserializeOwned>(b: &impl Backend, tree: Tree) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for (k, v) in b.entries(tree)? {
        out.push(
            codec::decode(&v, MAX_RECORD_BYTES).map_err(|e| StoreError::Corrupt {
                tree: tree.name(),
                key: hex::encode(&k),
                msg: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

impl<B: Backend> Store for B {
    fn defer_flushes(&self) {
        self.ledger().deferred.store(true, Ordering::SeqCst);
    }

    fn failure(&self) -> Option<String> {
        self.ledger().failure()
    }

    fn next_id(&self, kind: IdKind) -> Result<u64, StoreError> {
        // One id at a time: read, add one, write back.
        let _one = lock(&self.ledger().ids);
        let id = self.last_id(kind)? + 1;
        self.ledger().write(|| {
            self.insert(
                Tree::Ids,
                id_name(kind).as_bytes(),
                id.to_le_bytes().to_vec(),
            )
        })?;
        Ok(id)
    }

    fn last_id(&self, kind: IdKind) -> Result<u64, StoreError> {
        let key = id_name(kind).as_bytes();
        Ok(self
            .entries(Tree::Ids)?
            .into_iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map_or(0, u64::from_le_bytes))
    }

    fn apply(&self, writes: &[Write]) -> Result<(), StoreError> {
        for w in writes {
            let done = match w {
                Write::Site(r) => self.put_site(r),
                Write::SiteGone(host) => self.remove_site(host).map(drop),
                Write::Round(r) => self.put_round(r),
                Write::Job(r) => self.put_job(r),
                Write::Host(r) => self.put_host(r),
                Write::Invite(r) => self.put_invite(r),
                Write::InviteGone(hash) => self.remove_invite(hash).map(drop),
                Write::Exclusion(r) => self.put_exclusion(r),
                Write::ExclusionGone(host) => self.remove_exclusion(host).map(drop),
                Write::LastId(kind, id) => self.ledger().write(|| {
                    self.insert(
                        Tree::Ids,
                        id_name(*kind).as_bytes(),
                        id.to_le_bytes().to_vec(),
                    )
                }),
            };
            // A record that does not encode was refused before the write:
            // here it fails the store too, as the grid is already past it.
            done.or_else(|e| self.ledger().failed(e))?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StoreError> {
        self.ledger().check()?;
        if self.ledger().deferred.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.sync()
    }

    fn sync(&self) -> Result<(), StoreError> {
        self.ledger().sync(|| self.write_out())
    }

    fn observe_syncs(&self, observer: Arc<dyn SyncObserver>) {
        let _ = self.ledger().observer.set(observer);
    }

    fn put_site(&self, site: &SiteRecord) -> Result<(), StoreError> {
        put(self, Tree::Sites, site.host.as_bytes(), site)
    }
    fn remove_site(&self, host: &str) -> Result<bool, StoreError> {
        remove(self, Tree::Sites, host.as_bytes())
    }
    fn sites(&self) -> Result<Vec<SiteRecord>, StoreError> {
        all(self, Tree::Sites)
    }

    fn put_round(&self, round: &RoundRecord) -> Result<(), StoreError> {
        put(
            self,
            Tree::Rounds,
            &id_key(round.id),
            &format::StoredRound::from(round),
        )
    }
    fn rounds(&self) -> Result<Vec<RoundRecord>, StoreError> {
        all::<format::StoredRound>(self, Tree::Rounds)?
            .into_iter()
            .map(format::StoredRound::into_record)
            .collect()
    }

    fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        put(self, Tree::Jobs, &id_key(job.id), job)
    }
    fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        all(self, Tree::Jobs)
    }

    fn put_host(&self, host: &HostRecord) -> Result<(), StoreError> {
        put(self, Tree::Hosts, &id_key(host.id), host)
    }
    fn hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        all(self, Tree::Hosts)
    }

    fn put_invite(&self, invite: &InviteRecord) -> Result<(), StoreError> {
        put(self, Tree::Invites, &invite.token_sha256, invite)
    }
    fn remove_invite(&self, token_sha256: &[u8; 32]) -> Result<bool, StoreError> {
        remove(self, Tree::Invites, token_sha256)
    }
    fn invites(&self) -> Result<Vec<InviteRecord>, StoreError> {
        all(self, Tree::Invites)
    }

    fn put_exclusion(&self, e: &ExclusionRecord) -> Result<(), StoreError> {
        let key = exclusion_key(&e.exclusion.host);
        put(self, Tree::Exclusions, key.as_bytes(), e)
    }
    fn remove_exclusion(&self, host: &str) -> Result<bool, StoreError> {
        remove(self, Tree::Exclusions, exclusion_key(host).as_bytes())
    }
    fn exclusions(&self) -> Result<Vec<ExclusionRecord>, StoreError> {
        all(self, Tree::Exclusions)
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;
    use std::sync::mpsc;

    #[derive(Default)]
    struct Groups(Mutex<Vec<u64>>);
    impl SyncObserver for Groups {
        fn synced(&self, _took: Duration, group: u64) {
            lock(&self.0).push(group);
        }
    }

    /// A sync call that waits for another's fsync and is covered by it
    /// counts in that fsync's group, not the next one's.
    #[test]
    fn a_call_covered_by_another_fsync_counts_in_its_group() {
        let ledger = Arc::new(Ledger::default());
        let groups = Arc::new(Groups::default());
        let _ = ledger.observer.set(groups.clone());
        ledger.written.fetch_add(2, Ordering::SeqCst);
        let (asking, asked) = mpsc::channel();
        let rider = {
            let ledger = ledger.clone();
            std::thread::spawn(move || {
                asked.recv().expect("the first fsync began");
                ledger.sync(|| panic!("covered by the first fsync"))
            })
        };
        ledger
            .sync(|| {
                asking.send(()).expect("rider");
                // The rider is now waiting for this fsync.
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .expect("first fsync");
        rider.join().expect("rider").expect("covered");
        assert!(lock(&groups.0).is_empty(), "told when the next one begins");
        ledger.written.fetch_add(1, Ordering::SeqCst);
        ledger.sync(|| Ok(())).expect("second fsync");
        assert_eq!(
            *lock(&groups.0),
            vec![2],
            "the first fsync served two calls"
        );
    }
}

#[cfg(test)]
mod open_failure_tests {
    use super::*;

    fn io(e: std::io::Error) -> StoreError {
        StoreError::Sled(::sled::Error::Io(e))
    }

    #[test]
    fn each_cause_of_a_store_that_does_not_open_is_told_apart_once() {
        let at = Path::new("/srv/beebot/store");
        let lock = std::io::Error::other(
            "could not acquire lock on \"/srv/beebot/store/db\": Os { code: 11 }",
        );
        for (e, says) in [
            (io(lock), "another beebot-server holds the store"),
            (io(std::io::Error::from_raw_os_error(13)), "no permission"),
            (
                io(std::io::Error::from_raw_os_error(30)),
                "read-only file system",
            ),
            (io(std::io::Error::from_raw_os_error(28)), "no space left"),
            (
                StoreError::Sled(::sled::Error::Unsupported("an older sled".into())),
                "is damaged",
            ),
            (
                StoreError::Corrupt {
                    tree: "jobs",
                    key: "7".into(),
                    msg: "bad varint".into(),
                },
                "is damaged",
            ),
            (
                StoreError::Format {
                    found: 9,
                    supported: 2,
                },
                "newer than this server reads",
            ),
        ] {
            let m = open_failure(at, &e);
            assert!(m.contains(says), "{m}");
            let hints = [
                "another beebot-server",
                "permission",
                "read-only",
                "space",
                "damaged",
            ];
            let told = hints.iter().filter(|h| m.contains(**h)).count();
            assert!(told <= 1, "one cause only: {m}");
            assert!(!m.contains("another server running"), "{m}");
            // The cause's text appears once.
            let first = m.find("could not acquire").map(|i| &m[i..]);
            assert!(first.is_none_or(|rest| rest.matches("could not acquire").count() == 1));
        }
    }
}
