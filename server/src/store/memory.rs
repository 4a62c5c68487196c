//! [`MemoryStore`]: the server's records in maps in memory, for the
//! simulator and the unit tests. Records are keyed and encoded as on disk
//! (so listed in the same order, and refused alike when too large), and gone
//! when the last handle is dropped. Nothing is written anywhere: `flush` and
//! `sync` only do the bookkeeping; ids come from a counter.
//!
//! Its [`MemoryDisk`] can fill up (the simulator's full disk): writes and
//! syncs then fail as on a full disk, and the store stops as on disk.
//! [`MemoryStore::reopen`] is what a new process opening the same disk sees.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{lock, Backend, Entry, Ledger, StoreError, Tree};

/// One map per record kind, in the order of [`Tree::ALL`].
type Trees = [Mutex<BTreeMap<Vec<u8>, Vec<u8>>>; Tree::ALL.len()];

/// A store in memory: share it as a [`super::SharedStore`].
#[derive(Default)]
pub struct MemoryStore {
    trees: Arc<Trees>,
    disk: Arc<MemoryDisk>,
    ledger: Ledger,
}

/// The space of a disk in memory, shared by a [`MemoryStore`] and the
/// link files beside it ([`crate::grid::MemoryLinks`]): unlimited until
/// [`MemoryDisk::fill_after`]; then each write takes one place, and once
/// none is left every write (and a store's sync) fails with
/// [`std::io::ErrorKind::StorageFull`] until [`MemoryDisk::free`].
#[derive(Debug)]
pub struct MemoryDisk {
    /// Writes it still takes ([`UNLIMITED`]: any number).
    writes_left: AtomicU64,
}

const UNLIMITED: u64 = u64::MAX;

impl Default for MemoryDisk {
    fn default() -> Self {
        MemoryDisk {
            writes_left: AtomicU64::new(UNLIMITED),
        }
    }
}

impl MemoryDisk {
    /// The disk takes `writes` more writes, then is full.
    pub fn fill_after(&self, writes: u64) {
        self.writes_left
            .store(writes.min(UNLIMITED - 1), Ordering::SeqCst);
    }

    /// Space is back: every write is taken again.
    pub fn free(&self) {
        self.writes_left.store(UNLIMITED, Ordering::SeqCst);
    }

    pub fn is_full(&self) -> bool {
        self.writes_left.load(Ordering::SeqCst) == 0
    }

    /// Take the place of one write, or fail as a full disk does.
    pub fn take(&self) -> std::io::Result<()> {
        self.writes_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| match w {
                UNLIMITED => Some(w),
                0 => None,
                n => Some(n - 1),
            })
            .map(drop)
            .map_err(|_| full())
    }
}

fn full() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        "no space left on the disk (in memory)",
    )
}

fn full_store() -> StoreError {
    StoreError::Sled(::sled::Error::Io(full()))
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::on_disk(Arc::default())
    }

    /// A new, empty store on `disk`.
    pub fn on_disk(disk: Arc<MemoryDisk>) -> MemoryStore {
        let store = MemoryStore {
            disk,
            ..MemoryStore::default()
        };
        super::format::prepare(&store).expect("an empty store in memory takes any format");
        store
    }

    /// The same records on the same disk, as a new process opens them:
    /// every write made so far is there (synced or not, as a crash may
    /// leave them), and a failure of this handle is not (see
    /// [`super::Store::failure`]).
    pub fn reopen(&self) -> MemoryStore {
        MemoryStore {
            trees: self.trees.clone(),
            disk: self.disk.clone(),
            ledger: Ledger::default(),
        }
    }

    /// The disk under it.
    pub fn disk(&self) -> &Arc<MemoryDisk> {
        &self.disk
    }

    /// Make the next write or sync fail ([`StoreError::Injected`]), as a
    /// full disk would: the store then stops, as on disk.
    pub fn fail_next_write(&self) {
        self.ledger.fail_next();
    }

    fn tree(&self, tree: Tree) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        lock(&self.trees[tree as usize])
    }
}

impl Backend for MemoryStore {
    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn insert(&self, tree: Tree, key: &[u8], value: Vec<u8>) -> Result<(), StoreError> {
        self.disk.take().map_err(|_| full_store())?;
        self.tree(tree).insert(key.to_vec(), value);
        Ok(())
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<bool, StoreError> {
        self.disk.take().map_err(|_| full_store())?;
        Ok(self.tree(tree).remove(key).is_some())
    }

    fn entries(&self, tree: Tree) -> Result<Vec<Entry>, StoreError> {
        Ok(self
            .tree(tree)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn write_out(&self) -> Result<(), StoreError> {
        if self.disk.is_full() {
            return Err(full_store());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SiteRecord;
    use crate::store::Store;

    fn site(host: &str) -> SiteRecord {
        SiteRecord {
            host: host.into(),
            added_ms: 1,
            last_scan: None,
        }
    }

    #[test]
    fn a_full_disk_stops_the_store_and_a_reopened_one_keeps_what_was_written() {
        let store = MemoryStore::new();
        store.put_site(&site("a.example")).unwrap();
        store.disk().fill_after(1);
        store.put_site(&site("b.example")).unwrap();
        let e = store.put_site(&site("c.example")).unwrap_err();
        assert!(e.to_string().contains("no space left"), "{e}");
        // Failed: refused from now on, even once space is back.
        store.disk().free();
        assert!(store.failure().is_some());
        assert!(store.put_site(&site("d.example")).is_err());
        // A new process on the same disk: what was written, no failure.
        let again = store.reopen();
        assert!(again.failure().is_none());
        let hosts: Vec<String> = again.sites().unwrap().into_iter().map(|s| s.host).collect();
        assert_eq!(hosts, ["a.example", "b.example"]);
        again.put_site(&site("d.example")).unwrap();
        again.sync().unwrap();
        // Full again after one more write: its sync fails.
        again.disk().fill_after(1);
        again.put_site(&site("e.example")).unwrap();
        assert!(again.sync().is_err());
        assert!(again.failure().is_some());
    }
}
