//! [`MemoryStore`]: the server's records in maps in memory, for the
//! simulator and the unit tests. Records are keyed and encoded as on disk
//! (so listed in the same order, and refused alike when too large), and gone
//! when the last handle is dropped. Nothing is written anywhere: `flush` and
//! `sync` only do the bookkeeping; ids come from a counter.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{lock, Backend, Entry, Ledger, StoreError, Tree};

/// A store in memory: share it as a [`super::SharedStore`].
#[derive(Default)]
pub struct MemoryStore {
    /// One map per record kind, in the order of [`Tree::ALL`].
    trees: [Mutex<BTreeMap<Vec<u8>, Vec<u8>>>; Tree::ALL.len()],
    ledger: Ledger,
}

impl MemoryStore {
    /// A new, empty store.
    pub fn new() -> MemoryStore {
        let store = MemoryStore::default();
        super::format::prepare(&store).expect("an empty store in memory takes any format");
        store
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
        self.tree(tree).insert(key.to_vec(), value);
        Ok(())
    }

    fn remove(&self, tree: Tree, key: &[u8]) -> Result<bool, StoreError> {
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
        Ok(())
    }
}
