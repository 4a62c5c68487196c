//! Link-file storage: where link files and scan states go. The grid reaches
//! it only through [`LinkFiles`], so the server keeps them in pack files
//! ([`LinkPacks`](super::LinkPacks)) and the simulator and unit tests in memory
//! ([`MemoryLinks`]), both driving the same grid code. Also here: the
//! durable write ([`write_durable`]), the read of a job's records
//! ([`for_each_link`]) and the grid's removal of
//! files no result keeps.
//!
//! The contract of every [`LinkFiles`]: a file is named by a relative name,
//! `ROUND/JOB-UNIT.lf` (or `.state`), never a path outside its storage (a
//! name with an empty, `.` or `..` part, or a character outside
//! `[A-Za-z0-9._-]` besides the `/`, is refused); a write is whole and
//! durable before it returns, never seen half-written; removing a file that
//! is gone already is no error. Nothing here touches the store.
//!
//! The grid's removals and the rounds it closes (`remove_link`,
//! `close_round_links`) never act at once: they are kept as `LinkChanges`
//! for its driver (`take_link_changes`), which applies them, removals first,
//! once the writes that stopped naming the files are durable.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use beebot_shared::linkfile;

use super::Grid;
use crate::model::*;
use crate::store::MemoryDisk;

/// Where the grid keeps link files and scan states. See the module docs for
/// the contract every implementation keeps.
pub trait LinkFiles: Send + Sync + fmt::Debug {
    /// Store `bytes` as `name`, replacing what was there: whole and durable
    /// when this returns. Concurrent writers of one name each put a whole
    /// file in place.
    fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()>;
    /// The bytes stored as `name`.
    fn read(&self, name: &str) -> std::io::Result<Vec<u8>>;
    /// Forget `name`; a file that is gone already (or a name refused) is
    /// no error: nothing is reported.
    fn remove(&self, name: &str);
    /// Remove what writes a crash interrupted among round `round_id`'s
    /// files (called when the grid opens).
    fn sweep_temporaries(&self, round_id: u64);
    /// Round `round_id` is over: what is kept open for its writes may be
    /// closed (its files stay readable).
    fn forget_round(&self, _round_id: u64) {}
    /// Round `round_id` ended before (a check at start or on demand): its
    /// storage may be compacted now, in the caller's thread.
    fn compact_ended(&self, _round_id: u64) {}
    /// Where `name` is, for messages (a path for a directory).
    fn location(&self, name: &str) -> String;
    /// Every name held, in order (for checks and tests: it reads the whole
    /// storage's index).
    fn names(&self) -> std::io::Result<Vec<String>>;
}

/// Whether `name` is a relative name the contract allows (see the module
/// docs): `Err` says why not.
pub fn check_name(name: &str) -> std::io::Result<()> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    if name.split('/').all(part_ok) {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not a link file name"),
        ))
    }
}

/// Link files in memory, for the simulator and unit tests: a write is in
/// place whole under a lock (so there is never a temporary to sweep), and
/// "durable" for as long as the value lives. Holds every byte written and
/// not removed. On a full [`MemoryDisk`] a write fails as on disk.
#[derive(Debug, Default)]
pub struct MemoryLinks {
    files: Mutex<BTreeMap<String, Vec<u8>>>,
    disk: Arc<MemoryDisk>,
}

impl MemoryLinks {
    pub fn new() -> MemoryLinks {
        MemoryLinks::default()
    }

    /// Link files on `disk` (the store's, for a full disk of both).
    pub fn on_disk(disk: Arc<MemoryDisk>) -> MemoryLinks {
        MemoryLinks {
            disk,
            ..MemoryLinks::default()
        }
    }

    /// Bytes held, all files together.
    pub fn bytes(&self) -> u64 {
        self.lock().values().map(|b| b.len() as u64).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // A panic elsewhere while the lock was held leaves whole files only.
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LinkFiles for MemoryLinks {
    fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        check_name(name)?;
        self.disk.take()?;
        self.lock().insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
        check_name(name)?;
        self.lock().get(name).cloned().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("no file {name}"))
        })
    }

    fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    fn sweep_temporaries(&self, _round_id: u64) {}

    fn location(&self, name: &str) -> String {
        format!("memory:{name}")
    }

    fn names(&self) -> std::io::Result<Vec<String>> {
        Ok(self.lock().keys().cloned().collect())
    }
}

/// Write `data` to `path` durably: temporary name, fsync, rename, fsync the
/// dir. Each call writes its own temporary file, so concurrent writers of
/// one path each rename a whole file into place.
pub fn write_durable(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent"))?;
    beebot_shared::util::create_private_dir(dir)?;
    beebot_shared::durable::write(path, data)
}

/// Why a job's link records could not all be visited: a file could not be
/// read or decoded, or the visitor stopped with its own error `E`.
#[derive(Debug, thiserror::Error)]
pub enum LinkReadError<E: std::error::Error + 'static> {
    #[error("cannot read {location}: {source}")]
    Read {
        location: String,
        source: std::io::Error,
    },
    #[error("{location}: {source}")]
    Decode {
        location: String,
        source: linkfile::LinkFileError,
    },
    /// The visitor's error, as it gave it.
    #[error(transparent)]
    Visit(E),
}

/// Visit the link records of a job: the union of its scans' link files
/// (segments and the final scan), each (source, target) once, in scan order.
/// Records stream from each file (bounded by the link-file decoder), and the
/// pairs already seen are kept as 8-byte digests, not strings: a job of many
/// continuations costs its record count × 8 bytes, not its text. The first
/// error of the visitor stops the visit and comes back as
/// [`LinkReadError::Visit`].
pub fn for_each_link<E: std::error::Error + 'static>(
    files: &dyn LinkFiles,
    job: &JobRecord,
    mut f: impl FnMut(&linkfile::LinkRecord) -> Result<(), E>,
) -> Result<(), LinkReadError<E>> {
    let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for file in job.link_files() {
        let bytes = files.read(file).map_err(|source| LinkReadError::Read {
            location: files.location(file),
            source,
        })?;
        let mut failed = None;
        let decoded = linkfile::for_each_record_ref(&bytes, |r| {
            // The pair's key, as the sketches digest it.
            if seen.insert(crate::validate::pair_digest(&r.source_url, &r.target_url)) {
                if let Err(e) = f(r) {
                    failed = Some(e);
                    return Err(linkfile::LinkFileError::Refused("the visit stopped".into()));
                }
            }
            Ok(())
        });
        if let Some(e) = failed {
            return Err(LinkReadError::Visit(e));
        }
        decoded.map_err(|source| LinkReadError::Decode {
            location: files.location(file),
            source,
        })?;
    }
    Ok(())
}

impl Grid {
    /// Remove the link files a crash interrupted mid-write in the running
    /// rounds' directories (each write has its own temporary name), so
    /// crashes cannot pile them up.
    pub(super) fn sweep_temporaries(&self) {
        for round_id in self.running_round_ids() {
            self.links.sweep_temporaries(round_id);
        }
    }

    /// Where the grid keeps link files and scan states.
    pub fn link_files(&self) -> &dyn LinkFiles {
        self.links.as_ref()
    }

    /// The same, to read from outside the grid (an export).
    pub fn link_files_shared(&self) -> std::sync::Arc<dyn LinkFiles> {
        self.links.clone()
    }

    /// The link-file changes made since the last call: a file or scan state
    /// a record stopped naming, and the rounds that ended. The driver
    /// applies them ([`LinkChanges::apply`]) once the writes taken with them
    /// ([`Grid::take_writes`]) are durable, so no record left on disk names
    /// a file that is gone.
    pub fn take_link_changes(&mut self) -> LinkChanges {
        std::mem::take(&mut self.link_changes)
    }

    /// Remove `name`, which no record will name once the change being made
    /// is stored: after the store's sync.
    pub(crate) fn remove_link(&mut self, name: &str) {
        self.link_changes.removals.push(name.to_owned());
    }

    /// A round ended: its link files are closed after the removals (a
    /// removal after the close would open the round's packs again, for
    /// good).
    pub(crate) fn close_round_links(&mut self, round_id: u64) {
        self.link_changes.ended_rounds.push(round_id);
    }

    /// Remove the link and state files of a job's results but `keep`.
    pub(super) fn remove_candidate_files(&mut self, job: &JobRecord, keep: Option<usize>) {
        for (i, c) in job.candidates.iter().enumerate() {
            if Some(i) == keep {
                continue;
            }
            self.remove_chain_files(&c.segments, Some(&c.result));
        }
    }

    pub(super) fn remove_chain_files(&mut self, segments: &[Segment], result: Option<&JobResult>) {
        for seg in segments {
            self.remove_link(&seg.file);
            self.remove_link(&seg.state_file);
        }
        if let Some(r) = result {
            self.remove_link(&r.file);
        }
    }

    /// Remove the scan states a job kept (it is over: nothing continues).
    pub(super) fn drop_states(&mut self, job: &JobRecord) {
        for seg in &job.segments {
            self.remove_link(&seg.state_file);
        }
    }
}

/// What a stretch of grid calls asks of the link files once the records
/// they wrote are durable ([`Grid::take_link_changes`]).
#[derive(Debug, Default)]
pub struct LinkChanges {
    /// Files no record names any more.
    pub removals: Vec<String>,
    /// Rounds that ended: their packs are closed, after the removals.
    pub ended_rounds: Vec<u64>,
}

impl LinkChanges {
    /// `more`'s changes after these.
    pub fn extend(&mut self, more: LinkChanges) {
        self.removals.extend(more.removals);
        self.ended_rounds.extend(more.ended_rounds);
    }

    /// Make the removals, then close the rounds that ended (every removal
    /// first, whatever order the calls made them in: a removal in a round
    /// closed before it would open its packs again).
    pub fn apply(self, links: &dyn LinkFiles) {
        for name in &self.removals {
            links.remove(name);
        }
        self.close_rounds(links);
    }

    /// Close the rounds that ended, removing nothing (after a failed sync).
    pub fn close_rounds(self, links: &dyn LinkFiles) {
        for round_id in self.ended_rounds {
            links.forget_round(round_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::testkit::*;
    use std::fs;
    use std::path::Path;

    #[test]
    fn write_durable_creates_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b").join("7.lf");
        write_durable(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_durable(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(files_under(dir.path()), vec![path]);
        assert!(write_durable(Path::new("/"), b"x").is_err());
    }

    /// The contract every [`LinkFiles`] keeps, run on each implementation.
    fn keeps_the_contract(files: &dyn LinkFiles) {
        let name = "7/3-12.lf";
        assert_eq!(
            files.read(name).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        files.write(name, b"first").unwrap();
        assert_eq!(files.read(name).unwrap(), b"first");
        files.write(name, b"second").unwrap();
        assert_eq!(files.read(name).unwrap(), b"second", "a write replaces");
        files.write("7/3-12.state", b"state").unwrap();
        files.sweep_temporaries(7);
        files.sweep_temporaries(8);
        assert_eq!(files.read(name).unwrap(), b"second", "a sweep keeps files");
        assert_eq!(files.read("7/3-12.state").unwrap(), b"state");
        files.remove(name);
        files.remove(name);
        files.remove("8/1-1.lf");
        assert!(files.read(name).is_err(), "removed");
        assert_eq!(files.read("7/3-12.state").unwrap(), b"state");
        for bad in [
            "/etc/passwd",
            "../x.lf",
            "7/../../x.lf",
            "7//x.lf",
            "",
            "7/x y.lf",
            "./x",
        ] {
            assert_eq!(
                files.write(bad, b"x").unwrap_err().kind(),
                std::io::ErrorKind::InvalidInput,
                "{bad:?}"
            );
            assert!(files.read(bad).is_err(), "{bad:?}");
            files.remove(bad);
        }
        assert!(files.location(name).contains(name));
    }

    #[test]
    fn packs_keep_the_contract_and_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let links = crate::grid::LinkPacks::new(dir.path().join("links"));
        keeps_the_contract(&links);
        assert_eq!(links.names().unwrap(), vec!["7/3-12.state".to_string()]);
        let files = files_under(dir.path());
        assert!(
            files
                .iter()
                .all(|f| f.starts_with(dir.path().join("links").join("7"))),
            "{files:?}"
        );
        assert_eq!(links.dir(), dir.path().join("links"));
    }

    #[test]
    fn memory_keeps_the_contract() {
        let links = MemoryLinks::new();
        keeps_the_contract(&links);
        assert_eq!(links.names().unwrap(), vec!["7/3-12.state".to_string()]);
        assert_eq!(links.bytes(), 5);
    }
}
