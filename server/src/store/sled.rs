//! [`SledStore`]: the server's records on disk, in a sled database (one tree
//! per record kind). The only module that knows sled.
//!
//! Ids are counters in the `ids` tree (increasing across restarts); `sync`
//! is sled's flush (an fsync). It never retries a failed write: the first
//! failure stops the store (see [`super::Store`]).

use std::path::Path;
use std::time::{Duration, Instant};

use super::{Backend, Entry, Ledger, StoreError, Tree};

/// sled page cache: enough for the working set of a grid of this size.
const CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;
/// How long opening waits for a lock held by a store that is closing.
const LOCK_RETRY: Duration = Duration::from_secs(3);
/// Pause between two attempts to take the lock.
const LOCK_POLL: Duration = Duration::from_millis(50);

/// The server's sled database: share it as a [`super::SharedStore`].
pub struct SledStore {
    db: sled::Db,
    /// One tree per record kind, in the order of [`Tree::ALL`].
    trees: Vec<sled::Tree>,
    ledger: Ledger,
}

impl SledStore {
    /// Open (or create) the store in `dir` at [`super::STORE_FORMAT`] (a
    /// newer format is refused).
    ///
    /// sled locks its directory; a store closed a moment ago (its flusher
    /// thread still stopping) is retried for up to [`LOCK_RETRY`] before the
    /// lock error is returned.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let store = Self::open_db(dir)?;
        super::format::prepare(&store)?;
        Ok(store)
    }

    /// Open sled in `dir`, waiting out a lock of a store that is closing.
    fn open_db(dir: &Path) -> Result<SledStore, StoreError> {
        let started = Instant::now();
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
                    std::thread::sleep(LOCK_POLL);
                }
                other => break other?,
            }
        };
        let trees = Tree::ALL
            .iter()
            .map(|t| db.open_tree(t.name()))
            .collect::<Result<_, _>>()?;
        Ok(SledStore {
            db,
            trees,
            ledger: Ledger::default(),
        })
    }

    /// Make the next write or sync fail, as a full disk would.
    #[cfg(test)]
    pub(crate) fn fail_next_write(&self) {
        self.ledger.fail_next();
    }

    fn tree(&self, tree: Tree) -> &sled::Tree {
        &self.trees[tree as usize]
    }
}

impl Backend for SledStore {
    fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn insert(&self, tree: Tree, key: &[u8], value: Vec<u8>) -> Result<(), StoreError> {
        self.tree(tree).insert(key, value)?;
        Ok(())
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<bool, StoreError> {
        Ok(self.tree(tree).remove(key)?.is_some())
    }

    fn entries(&self, tree: Tree) -> Result<Vec<Entry>, StoreError> {
        let entries = self
            .tree(tree)
            .iter()
            .map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()?;
        Ok(entries)
    }

    fn write_out(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }
}
