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
    /// Open (or create) the store in `dir`, brought to
    /// [`super::STORE_FORMAT`] (a newer format is refused).
    ///
    /// sled locks its directory; a store closed a moment ago (its flusher
    /// thread still stopping) is retried for up to [`LOCK_RETRY`] before the
    /// lock error is returned.
    pub fn open(dir: &Path) -> Result<SledStore, StoreError> {
        let store = Self::open_db(dir)?;
        if !super::format::migrates(&store)? {
            super::format::prepare(&store)?;
            return Ok(store);
        }
        // The store as it was is kept aside before a record is rewritten:
        // closed (what opening wrote flushed first), copied under a name of
        // its own, then renamed (a copy cut short never takes the name).
        store.db.flush()?;
        drop(store);
        let backup = backup_dir(dir)?;
        let mut partial = backup.clone().into_os_string();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        let copied = (|| {
            if partial.exists() {
                std::fs::remove_dir_all(&partial)?;
            }
            copy_dir(dir, &partial)?;
            std::fs::rename(&partial, &backup)?;
            let parent = backup.parent().unwrap_or(Path::new("."));
            std::fs::File::open(parent)?.sync_all()
        })();
        copied.map_err(|e| {
            StoreError::Sled(sled::Error::Io(std::io::Error::new(
                e.kind(),
                format!(
                    "copying the store to {} before migrating it: {e}",
                    backup.display()
                ),
            )))
        })?;
        tracing::warn!(
            "the store is brought to format {}; the store as it was is kept in {} \
             (remove it once the server runs well)",
            super::STORE_FORMAT,
            backup.display()
        );
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

/// Where the store in `dir` is copied before a migration: beside it,
/// `NAME.before-format-N` (then `.2`, `.3`, ... when that is taken).
fn backup_dir(dir: &Path) -> Result<std::path::PathBuf, StoreError> {
    let name = dir
        .file_name()
        .map_or_else(|| "store".into(), |n| n.to_string_lossy().into_owned());
    let base = format!("{name}.before-format-{}", super::STORE_FORMAT);
    let parent = dir.parent().unwrap_or(Path::new("."));
    (1..=MAX_BACKUPS)
        .map(|i| match i {
            1 => parent.join(&base),
            i => parent.join(format!("{base}.{i}")),
        })
        .find(|p| !p.exists())
        .ok_or_else(|| {
            StoreError::Sled(sled::Error::Io(std::io::Error::other(format!(
                "{MAX_BACKUPS} copies of the store before migrating it are already beside it \
                 ({}): remove the ones not needed",
                parent.join(&base).display()
            ))))
        })
}

/// Most copies of the store kept aside by migrations before one is refused.
const MAX_BACKUPS: u32 = 20;

/// Copy `from` to `to` (created), files synced, then `to` itself.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
            std::fs::File::open(&dst)?.sync_all()?;
        }
    }
    std::fs::File::open(to)?.sync_all()
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
