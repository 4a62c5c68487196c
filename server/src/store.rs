//! Durable state in sled, behind a small interface: the only module that knows sled.
//!
//! [`Store::memory`] gives the same interface over maps in memory (the
//! simulator runs the grid on it): nothing is written to disk, and `flush`
//! and `sync` have nothing to do.
//!
//! Every write method is followed by [`Store::flush`] before the caller
//! acknowledges anything, so nothing acknowledged is lost on a crash.
//!
//! Group commit: the server sets [`Store::defer_flushes`], which turns
//! `flush` into a no-op and makes the caller promise to call [`Store::sync`]
//! before it answers. `sync` runs outside the grid lock, so requests that
//! arrive during one fsync share the next one. A `sync` also covers writes
//! other requests made before it, so an answer computed from another
//! request's change (`Duplicate` after a concurrent `Accepted`) is never sent
//! before that change is durable.
//!
//! Fail-stop: after any storage error the store remembers it
//! ([`Store::failure`]); every later write fails, and the server answers every
//! request with an error until it is restarted and has reloaded what is on disk.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use beebot_shared::codec;
use serde::{de::DeserializeOwned, Serialize};

use crate::model::{ExclusionRecord, HostRecord, InviteRecord, JobRecord, RoundRecord, SiteRecord};

/// sled page cache: enough for the working set of a grid of this size.
const CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;
/// How long opening waits for a lock held by a store that is closing.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_secs(3);
/// Largest stored record (a job with its attempts and reasons).
const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// Storage failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {}", sled_message(.0))]
    Sled(#[from] sled::Error),
    #[error("stored record is unreadable ({tree}/{key}): {msg}")]
    Corrupt {
        tree: &'static str,
        key: String,
        msg: String,
    },
    #[error("cannot encode record: {0}")]
    Encode(String),
    #[error("storage failed earlier ({0}); restart the server")]
    Failed(String),
}

/// sled's error in words. sled wraps the OS error's debug form in its I/O
/// errors, so a known kind is named by the kind ("no storage space").
fn sled_message(e: &sled::Error) -> String {
    match e {
        sled::Error::Io(io) if io.raw_os_error().is_some() => io.to_string(),
        sled::Error::Io(io) if io.kind() != std::io::ErrorKind::Other => {
            format!("{} ({io})", io.kind())
        }
        other => other.to_string(),
    }
}

/// Write and durability bookkeeping, shared by every handle of one store.
#[derive(Default)]
struct Durability {
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
}

/// A stored record: its key and its encoded value.
type Entry = (Vec<u8>, Vec<u8>);

/// One tree of records: a sled tree, or a map in memory.
#[derive(Clone)]
enum Tree {
    Sled(sled::Tree),
    Memory(Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>>),
}

impl Tree {
    fn memory() -> Tree {
        Tree::Memory(Arc::default())
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> Result<(), sled::Error> {
        match self {
            Tree::Sled(t) => t.insert(key, value).map(|_| ()),
            Tree::Memory(m) => {
                lock(m).insert(key.to_vec(), value);
                Ok(())
            }
        }
    }

    fn remove(&self, key: &[u8]) -> Result<bool, sled::Error> {
        match self {
            Tree::Sled(t) => t.remove(key).map(|old| old.is_some()),
            Tree::Memory(m) => Ok(lock(m).remove(key).is_some()),
        }
    }

    /// Every `(key, value)`, in key order.
    fn entries(&self) -> Result<Vec<Entry>, sled::Error> {
        match self {
            Tree::Sled(t) => t
                .iter()
                .map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect(),
            Tree::Memory(m) => Ok(lock(m)
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where ids and durability come from: sled, or memory (ids from a counter,
/// nothing to flush).
#[derive(Clone)]
enum Backend {
    Sled(sled::Db),
    Memory(Arc<AtomicU64>),
}

/// The server's sled database (or its stand-in in memory). Cloning gives
/// another handle to the same store.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    sites: Tree,
    rounds: Tree,
    jobs: Tree,
    hosts: Tree,
    invites: Tree,
    /// Excluded hosts, keyed by [`beebot_shared::scope::reversed_labels`] of the host.
    exclusions: Tree,
    durability: Arc<Durability>,
}

fn id_key(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

impl Store {
    /// Open (or create) the store in `dir`.
    ///
    /// sled locks its directory; a store closed a moment ago (its flusher
    /// thread still stopping) is retried for up to [`LOCK_RETRY`] before the
    /// lock error is returned.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let started = std::time::Instant::now();
        let db = loop {
            let r = sled::Config::new()
                .path(dir)
                .cache_capacity(CACHE_CAPACITY_BYTES)
                .mode(sled::Mode::HighThroughput)
                .open();
            match r {
                Err(sled::Error::Io(e))
                    if e.to_string().contains("lock") && started.elapsed() < LOCK_RETRY =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                other => break other?,
            }
        };
        Ok(Store {
            sites: Tree::Sled(db.open_tree("sites")?),
            rounds: Tree::Sled(db.open_tree("rounds")?),
            jobs: Tree::Sled(db.open_tree("jobs")?),
            hosts: Tree::Sled(db.open_tree("hosts")?),
            invites: Tree::Sled(db.open_tree("invites")?),
            exclusions: Tree::Sled(db.open_tree("exclusions")?),
            backend: Backend::Sled(db),
            durability: Arc::new(Durability::default()),
        })
    }

    /// A new, empty store in memory: the same records and checks as on
    /// disk, gone when the last handle is dropped. `flush` and `sync` have
    /// nothing to do.
    pub fn memory() -> Store {
        Store {
            backend: Backend::Memory(Arc::default()),
            sites: Tree::memory(),
            rounds: Tree::memory(),
            jobs: Tree::memory(),
            hosts: Tree::memory(),
            invites: Tree::memory(),
            exclusions: Tree::memory(),
            durability: Arc::new(Durability::default()),
        }
    }

    /// From now on [`Store::flush`] only notes that a sync is due: the caller
    /// promises to call [`Store::sync`] before acknowledging anything.
    pub fn defer_flushes(&self) {
        self.durability.deferred.store(true, Ordering::SeqCst);
    }

    /// The storage error that stopped this store, if one did.
    pub fn failure(&self) -> Option<String> {
        self.durability
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn check(&self) -> Result<(), StoreError> {
        match self.failure() {
            Some(f) => Err(StoreError::Failed(f)),
            None => Ok(()),
        }
    }

    /// Remember the first storage error (fail-stop) and pass it on.
    fn failed<T>(&self, e: impl Into<StoreError>) -> Result<T, StoreError> {
        let e = e.into();
        let mut f = self
            .durability
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            tracing::error!("storage failed: {e}; answering errors until restarted");
            *f = Some(e.to_string());
        }
        Err(e)
    }

    /// A new unique id (monotonic across restarts).
    pub fn next_id(&self) -> Result<u64, StoreError> {
        self.check()?;
        // Ids start at 0; keep 0 free as "none".
        let generated = match &self.backend {
            Backend::Sled(db) => db.generate_id(),
            Backend::Memory(next) => Ok(next.fetch_add(1, Ordering::SeqCst)),
        };
        match generated {
            Ok(id) => {
                self.durability.written.fetch_add(1, Ordering::SeqCst);
                Ok(id + 1)
            }
            Err(e) => self.failed(e),
        }
    }

    /// Make every write so far durable (deferred: see [`Store::defer_flushes`]).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.check()?;
        if self.durability.deferred.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.sync()
    }

    /// Make every write made before this call durable, sharing one fsync with
    /// concurrent callers.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.check()?;
        let d = &self.durability;
        let target = d.written.load(Ordering::SeqCst);
        if d.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let _one = d.syncing.lock().unwrap_or_else(|p| p.into_inner());
        if d.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        // Everything written up to here is covered by this flush.
        let covered = d.written.load(Ordering::SeqCst);
        if let Backend::Sled(db) = &self.backend {
            if let Err(e) = db.flush() {
                return self.failed(e);
            }
        }
        d.durable.fetch_max(covered, Ordering::SeqCst);
        Ok(())
    }

    fn put<T: Serialize>(&self, tree: &Tree, key: &[u8], value: &T) -> Result<(), StoreError> {
        self.check()?;
        let bytes = codec::encode(value, MAX_RECORD_BYTES)
            .map_err(|e| StoreError::Encode(e.to_string()))?;
        self.durability.written.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = tree.insert(key, bytes) {
            return self.failed(e);
        }
        Ok(())
    }

    fn all<T: DeserializeOwned>(tree: &Tree, name: &'static str) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        for (k, v) in tree.entries()? {
            out.push(
                codec::decode(&v, MAX_RECORD_BYTES).map_err(|e| StoreError::Corrupt {
                    tree: name,
                    key: hex::encode(&k),
                    msg: e.to_string(),
                })?,
            );
        }
        Ok(out)
    }

    pub fn put_site(&self, site: &SiteRecord) -> Result<(), StoreError> {
        self.put(&self.sites, site.host.as_bytes(), site)
    }
    pub fn remove_site(&self, host: &str) -> Result<bool, StoreError> {
        self.check()?;
        self.durability.written.fetch_add(1, Ordering::SeqCst);
        match self.sites.remove(host.as_bytes()) {
            Ok(removed) => Ok(removed),
            Err(e) => self.failed(e),
        }
    }
    pub fn sites(&self) -> Result<Vec<SiteRecord>, StoreError> {
        Self::all(&self.sites, "sites")
    }

    pub fn put_round(&self, round: &RoundRecord) -> Result<(), StoreError> {
        self.put(&self.rounds, &id_key(round.id), round)
    }
    pub fn rounds(&self) -> Result<Vec<RoundRecord>, StoreError> {
        Self::all(&self.rounds, "rounds")
    }

    pub fn put_job(&self, job: &JobRecord) -> Result<(), StoreError> {
        self.put(&self.jobs, &id_key(job.id), job)
    }
    pub fn jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        Self::all(&self.jobs, "jobs")
    }

    pub fn put_host(&self, host: &HostRecord) -> Result<(), StoreError> {
        self.put(&self.hosts, &id_key(host.id), host)
    }
    pub fn hosts(&self) -> Result<Vec<HostRecord>, StoreError> {
        Self::all(&self.hosts, "hosts")
    }

    pub fn put_invite(&self, invite: &InviteRecord) -> Result<(), StoreError> {
        self.put(&self.invites, &invite.token_sha256, invite)
    }
    pub fn invites(&self) -> Result<Vec<InviteRecord>, StoreError> {
        Self::all(&self.invites, "invites")
    }
    pub fn put_exclusion(&self, e: &ExclusionRecord) -> Result<(), StoreError> {
        let key = beebot_shared::scope::reversed_labels(&e.exclusion.host);
        self.put(&self.exclusions, key.as_bytes(), e)
    }
    pub fn exclusions(&self) -> Result<Vec<ExclusionRecord>, StoreError> {
        Self::all(&self.exclusions, "exclusions")
    }
    pub fn remove_exclusion(&self, host: &str) -> Result<bool, StoreError> {
        self.check()?;
        self.durability.written.fetch_add(1, Ordering::SeqCst);
        let key = beebot_shared::scope::reversed_labels(host);
        match self.exclusions.remove(key.as_bytes()) {
            Ok(removed) => Ok(removed),
            Err(e) => self.failed(e),
        }
    }
    pub fn remove_invite(&self, token_sha256: &[u8; 32]) -> Result<bool, StoreError> {
        self.check()?;
        self.durability.written.fetch_add(1, Ordering::SeqCst);
        match self.invites.remove(token_sha256) {
            Ok(removed) => Ok(removed),
            Err(e) => self.failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

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

    /// What both backends must do alike: ids, puts, replacing, removing, listing in key order.
    fn exercise(s: &Store) {
        let a = s.next_id().unwrap();
        let b = s.next_id().unwrap();
        assert!(a > 0 && b > a, "ids grow and 0 stays free: {a} {b}");
        s.put_site(&site("b.test", None)).unwrap();
        s.put_site(&site("a.test", Some(3))).unwrap();
        s.put_site(&site("a.test", Some(7))).unwrap();
        s.put_invite(&InviteRecord {
            token_sha256: [5; 32],
            uses_left: 2,
            expires_ms: 9,
            created_ms: 1,
        })
        .unwrap();
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
        assert_eq!(s.sites().unwrap().len(), 1);
        assert_eq!(s.invites().unwrap()[0].uses_left, 2);
        s.put_invite(&InviteRecord {
            token_sha256: [6; 32],
            uses_left: 1,
            expires_ms: 9,
            created_ms: 1,
        })
        .unwrap();
        assert!(s.remove_invite(&[6; 32]).unwrap());
        assert!(!s.remove_invite(&[6; 32]).unwrap());
        assert_eq!(s.invites().unwrap().len(), 1);
        assert!(s.rounds().unwrap().is_empty() && s.jobs().unwrap().is_empty());
        let excluded = |host: &str| ExclusionRecord {
            exclusion: beebot_shared::scope::Exclusion {
                host: host.into(),
                subdomains: false,
            },
            reason: "owner asked".into(),
            excluded_ms: 5,
        };
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

    #[test]
    fn records_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = Store::open(dir.path()).unwrap();
            exercise(&s);
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(s.sites().unwrap().len(), 1);
        assert_eq!(s.exclusions().unwrap().len(), 2);
        assert_eq!(s.invites().unwrap()[0].uses_left, 2);
        assert!(s.remove_site("a.test").unwrap());
        assert!(s.sites().unwrap().is_empty());
        // Ids stay unique across a reopen.
        assert!(s.next_id().unwrap() > 2);
    }

    #[test]
    fn the_memory_store_behaves_like_sled() {
        let s = Store::memory();
        exercise(&s);
        // Another handle sees the same records; a new store sees none.
        let other = s.clone();
        other.put_site(&site("c.test", None)).unwrap();
        assert_eq!(s.sites().unwrap().len(), 2);
        assert!(Store::memory().sites().unwrap().is_empty());
        // Deferred flushes and syncs are no-ops that never fail.
        s.defer_flushes();
        s.put_site(&site("d.test", None)).unwrap();
        s.flush().unwrap();
        s.sync().unwrap();
        assert_eq!(s.sites().unwrap().len(), 3);
    }

    #[test]
    fn the_memory_store_refuses_oversized_records() {
        let s = Store::memory();
        let huge = SiteRecord {
            host: "x".repeat(MAX_RECORD_BYTES + 1),
            added_ms: 0,
            last_scan: None,
        };
        assert!(matches!(s.put_site(&huge), Err(StoreError::Encode(_))));
        assert!(s.sites().unwrap().is_empty());
    }
}
