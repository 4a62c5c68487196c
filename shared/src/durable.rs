//! Durable file writes: a file is replaced whole or not at all, and once a
//! write returns the new content survives a crash or a power cut.
//!
//! The data goes to a temporary file with a name of its own (the process id
//! and a counter) in the target's directory, is fsynced, is renamed over the
//! target, and the directory is fsynced so the rename itself is on disk.
//! Invariants: a reader sees the old file or the new one, never a mix; a
//! failed write (disk full, read-only) leaves no temporary file behind; two
//! writers in one process never share a temporary name. This module never
//! creates directories: callers make the parent first.
//!
//! [`read_at_most`] reads such a file back up to a limit without asking its
//! size first.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Permissions of a file only its owner may read and write (Unix).
pub const PRIVATE_MODE: u32 = 0o600;

/// Who may read the file written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// The process's umask decides (usually readable by everyone).
    #[default]
    Default,
    /// Readable by its owner only ([`PRIVATE_MODE`] on Unix; no change
    /// elsewhere).
    Private,
}

/// Temporary files made by this process so far: part of each one's name.
static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// The bytes of the file at `path`, `None` when it holds more than `max`.
///
/// The file is read to its end (at most `max` + 1 bytes) without asking its
/// size first: `std::fs::read` and a file's metadata ask the volume for its
/// serial number on Windows, and under Wine that is some ten round trips
/// to the wineserver and its mount manager.
pub fn read_at_most(path: &Path, max: usize) -> io::Result<Option<Vec<u8>>> {
    let file = fs::File::open(path)?;
    let mut bytes = Vec::new();
    // `Take` reads by `read` alone: no size hint, so no metadata.
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= max).then_some(bytes))
}

/// Replace `path` with `data` durably (see the module docs).
pub fn write(path: &Path, data: &[u8]) -> io::Result<()> {
    write_with(path, data, Access::Default)
}

/// [`write`] for a file readable by its owner only (keys, tokens).
pub fn write_private(path: &Path, data: &[u8]) -> io::Result<()> {
    write_with(path, data, Access::Private)
}

/// Replace `path` with `data` durably, the new file made with `access`.
pub fn write_with(path: &Path, data: &[u8], access: Access) -> io::Result<()> {
    let dir = parent(path)?;
    let tmp = temporary_name(path)?;
    if let Err(e) = write_synced(&tmp, data, access) {
        // Disk full or read-only: leave no half-written file behind.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// The directory `path` is in (`.` for a bare file name).
fn parent(path: &Path) -> io::Result<&Path> {
    match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Ok(Path::new(".")),
        Some(p) => Ok(p),
        None => Err(io::Error::other(format!(
            "{} has no parent directory",
            path.display()
        ))),
    }
}

/// A temporary name beside `path` no other write of this process uses:
/// `NAME.PID-N.tmp`.
fn temporary_name(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} names no file", path.display())))?;
    let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
    let mut tmp = name.to_os_string();
    tmp.push(format!(".{}-{n}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// Create `tmp` (never reusing an existing file), write and fsync it.
fn write_synced(tmp: &Path, data: &[u8], access: Access) -> io::Result<()> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if access == Access::Private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(PRIVATE_MODE);
    }
    #[cfg(not(unix))]
    let _ = access;
    let mut f = opts.open(tmp)?;
    f.write_all(data)?;
    f.sync_all()
}

/// Fsync a directory so a rename in it is durable. Its errors are returned;
/// only a platform that cannot open a directory as a file (Windows) skips it.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("beebot-durable-{}-{n}", std::process::id()));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn creates_replaces_and_leaves_no_temporary() {
        let dir = TempDir::new();
        let path = dir.path().join("state.json");
        write(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        write(&path, b"3").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"3");
        assert_eq!(names(dir.path()), vec!["state.json".to_string()]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = TempDir::new();
        let path = dir.path().join("missing").join("x");
        assert!(write(&path, b"x").is_err());
        assert!(write(Path::new("/"), b"x").is_err());
        // The target is a directory: the rename fails, the temporary goes.
        let target = dir.path().join("d");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"kept").unwrap();
        assert!(write(&target, b"x").is_err());
        assert_eq!(names(dir.path()), vec!["d".to_string()]);
    }

    #[test]
    fn temporary_names_are_unique_and_beside_the_target() {
        let a = temporary_name(Path::new("/d/f.lf")).unwrap();
        let b = temporary_name(Path::new("/d/f.lf")).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.parent(), Some(Path::new("/d")));
        assert!(a.to_string_lossy().ends_with(".tmp"), "{}", a.display());
    }

    #[cfg(unix)]
    #[test]
    fn private_files_are_for_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new();
        let path = dir.path().join("token");
        write_private(&path, b"secret").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, PRIVATE_MODE);
        // Replacing a file that was readable by all makes it private too.
        let open = dir.path().join("open");
        fs::write(&open, b"old").unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&open, b"new").unwrap();
        let mode = fs::metadata(&open).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, PRIVATE_MODE);
        assert_eq!(fs::read(&open).unwrap(), b"new");
    }

    #[test]
    fn a_file_is_read_up_to_its_limit_and_one_longer_is_not() {
        let dir = TempDir::new();
        let path = dir.path().join("f");
        write(&path, b"12345").unwrap();
        assert_eq!(
            read_at_most(&path, 5).unwrap().as_deref(),
            Some(&b"12345"[..])
        );
        assert_eq!(
            read_at_most(&path, 6).unwrap().as_deref(),
            Some(&b"12345"[..])
        );
        assert_eq!(read_at_most(&path, 4).unwrap(), None);
        write(&path, b"").unwrap();
        assert_eq!(read_at_most(&path, 0).unwrap(), Some(Vec::new()));
        let missing = read_at_most(&dir.path().join("none"), 5).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
