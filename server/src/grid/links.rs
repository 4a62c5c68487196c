//! The link-file directory: where link files and scan states go, how they
//! are written durably ([`write_durable`]) and read back per job
//! ([`for_each_job_link`]), temporaries a crash left swept at open, and files
//! no result keeps removed.
//!
//! Invariants: a file is renamed into place whole, never written in place;
//! removing a file that is gone already is no error. Nothing here touches
//! the store.

use std::fs;
use std::path::Path;

use beebot_shared::linkfile;
use beebot_shared::util::sha256;

use super::Grid;
use crate::model::*;

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

/// Visit the link records of a job: the union of its scans' link files
/// (segments and the final scan), each (source, target) once, in scan order.
/// Records stream from each file (bounded by the link-file decoder), and the
/// pairs already seen are kept as 8-byte digests, not strings: a job of many
/// continuations costs its record count × 8 bytes, not its text.
pub fn for_each_job_link(
    links_dir: &Path,
    job: &JobRecord,
    mut f: impl FnMut(&linkfile::LinkRecord) -> Result<(), String>,
) -> Result<(), String> {
    let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for file in job.link_files() {
        let path = links_dir.join(file);
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut failed = None;
        let decoded = linkfile::for_each_record(&bytes, |r| {
            let key = sha256(format!("{}\n{}", r.source_url, r.target_url).as_bytes());
            let digest = u64::from_le_bytes([
                key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
            ]);
            if seen.insert(digest) {
                if let Err(e) = f(&r) {
                    failed = Some(e);
                    return Err(linkfile::LinkFileError::Refused(
                        "the export stopped".into(),
                    ));
                }
            }
            Ok(())
        });
        if let Some(e) = failed {
            return Err(e);
        }
        decoded.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

impl Grid {
    /// Remove the link files a crash interrupted mid-write in the running
    /// rounds' directories (each write has its own temporary name), so
    /// crashes cannot pile them up.
    pub(super) fn sweep_temporaries(&self) {
        let rounds = self.running_round_ids();
        for round_id in rounds {
            let dir = self.links_dir.join(round_id.to_string());
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|x| x == "tmp") {
                    let _ = fs::remove_file(&path);
                }
            }
        }
    }

    pub fn links_dir(&self) -> &Path {
        &self.links_dir
    }

    /// Remove the link and state files of a job's results but `keep`.
    pub(super) fn remove_candidate_files(&self, job: &JobRecord, keep: Option<usize>) {
        for (i, c) in job.candidates.iter().enumerate() {
            if Some(i) == keep {
                continue;
            }
            self.remove_chain_files(&c.segments, Some(&c.result));
        }
    }

    pub(super) fn remove_chain_files(&self, segments: &[Segment], result: Option<&JobResult>) {
        for seg in segments {
            let _ = fs::remove_file(self.links_dir.join(&seg.file));
            let _ = fs::remove_file(self.links_dir.join(&seg.state_file));
        }
        if let Some(r) = result {
            let _ = fs::remove_file(self.links_dir.join(&r.file));
        }
    }

    /// Remove the scan states a job kept (it is over: nothing continues).
    pub(super) fn drop_states(&self, job: &JobRecord) {
        for seg in &job.segments {
            let _ = fs::remove_file(self.links_dir.join(&seg.state_file));
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
}
