//! The home's one way to write a file (durably, in place) and to read a
//! spool file up to a limit. Uses nothing of the home's own.

use std::path::Path;

use anyhow::{bail, Context, Result};

use beebot_shared::durable::read_at_most;

pub use beebot_shared::util::check_private;

/// A spool file read up to `max` bytes: `None` when there is none; an
/// error naming the file when it is longer than `what` may be, or cannot
/// be read.
pub(super) fn read_spooled(path: &Path, max: usize, what: &str) -> Result<Option<Vec<u8>>> {
    match read_at_most(path, max) {
        Ok(Some(bytes)) => Ok(Some(bytes)),
        Ok(None) => bail!(
            "{} is larger than {what} may be ({max} bytes)",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Write a file durably ([`beebot_shared::durable`]): a temporary name of its
/// own, fsync, rename, fsync the directory. On failure (disk full,
/// read-only) the temporary file is removed: nothing half-written stays.
///
/// The directory is made only when the write finds it missing: making an
/// existing one asks for its metadata, which on Windows is a question to
/// the volume (under Wine, some ten round trips to its mount manager), at
/// every write of the spool.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> Result<()> {
    use beebot_shared::durable::{self, Access};
    let dir = path.parent().context("path without parent")?;
    let access = if private {
        Access::Private
    } else {
        Access::Default
    };
    let written = match durable::write_with(path, data, access) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            beebot_shared::util::create_private_dir(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            durable::write_with(path, data, access)
        }
        other => other,
    };
    written.with_context(|| format!("cannot write {}", path.display()))
}
