//! The client's home: where each of its files is. What is in them is kept
//! by leaf modules, each given its paths by [`Home`] and using nothing of
//! the home's own beyond the one way to write a file (`files`):
//! [`Identity`] (host key, enrolment, revocation, leaving), [`Spool`]
//! (units, results, parts, checkpoints), [`Days`] (day totals), `runlock`
//! (one `beebot run` a home) and `invite` (an installer's invite code).
//!
//! ```text
//! CONFIG/host.key          ed25519 host key, hex (0600)
//! CONFIG/enrolment.json    server address, pinned certificate, project key, host id
//! DATA/spool/units/N.unit  signed work units as received (verified again on load)
//! DATA/spool/units/N.deadline  the unit's deadline as the server last extended it (ms)
//! DATA/spool/results/N.lf  finished link files waiting for upload, N.summary beside,
//!                          N.state beside when the scan stopped early (its frontier)
//! DATA/spool/scans/N.ckpt  a running scan's checkpoint head (state, summary, records mark)
//! DATA/spool/scans/N.records  its records log, appended as it checkpoints
//! DATA/run.lock            held (advisory lock) by the one `beebot run` of this home
//! DATA/run.pid             that runner's pid, removed when it exits (a file apart:
//!                          Windows lets no other process read a locked file)
//! DATA/revoked.json        the server refused this host as revoked (when, its words)
//! ```
//! Also the client's: `CONFIG/config.toml` (settings), `DATA/benchmark.json`,
//! `DATA/status.json`, `DATA/logs/`. `beebot leave`
//! removes every one of them ([`Home::remove_all`]).
//! With `--home DIR` (or `BEEBOT_HOME`) both CONFIG and DATA are DIR.
//!
//! Also kept: the day totals (`DATA/spool/days.json`: `DAYS_KEPT` days) and, read only,
//! the installer's invite code (`/etc/beebot/invite`; on Windows `HKLM`, then
//! `HKCU`, `Software\BeeBot`). The default home is the machine's own (Local
//! AppData on Windows, never the roaming profile).

mod days;
mod files;
mod identity;
mod invite;
mod runlock;
mod spool;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use days::{today_date, DayTotals, Days, DAYS_KEPT};
pub use files::{check_private, write_atomic};
pub use identity::{Enrolment, Identity, Revocation};
pub use invite::*;
pub use runlock::{runner_pid, RunLock, RunLockError, RUN_PID_FILE};
pub use spool::{PartsSent, Spool, SpooledPart, SpooledResult, SpooledUnit, MAX_SPOOLED_UNITS};

/// File in the data dir naming the running status page's port (and the
/// runner's pid).
pub const ADDR_FILE: &str = "ui.json";
/// File in the data dir `beebot open` gives the browser (owner-only): it
/// sends the browser on to the one-time link, which so never shows in a
/// process's arguments.
pub const OPEN_FILE: &str = "open.html";
/// File in the data dir holding the status page's per-install secret (hex,
/// owner-only).
pub const SECRET_FILE: &str = "ui.secret";
/// The file in the data dir that keeps what the concurrency controller
/// learned.
pub const LEARNED_FILE: &str = "learned.json";

/// Where `data`'s learned figures are kept.
pub fn learned_path(data: &Path) -> PathBuf {
    data.join(LEARNED_FILE)
}

/// The client's directories.
#[derive(Clone, Debug)]
pub struct Home {
    pub config: PathBuf,
    pub data: PathBuf,
}

impl Home {
    /// `--home DIR` (both config and data there), or the platform's directories.
    pub fn resolve(explicit: Option<PathBuf>) -> Result<Home> {
        if let Some(dir) = explicit {
            return Ok(Home {
                config: dir.clone(),
                data: dir,
            });
        }
        let dirs = directories::ProjectDirs::from("org", "BeeBot", "beebot")
            .context("cannot find a home directory; pass --home DIR")?;
        // The machine's own folders: on Windows Local AppData, never the
        // Roaming one a roaming profile copies at every logon (the spool
        // holds up to a gigabyte, and a host key copied to a second machine
        // would make two hosts one). Elsewhere the same as the plain ones.
        Ok(Home {
            config: dirs.config_local_dir().to_path_buf(),
            data: dirs.data_local_dir().to_path_buf(),
        })
    }

    /// Who this host is: its key, enrolment, revocation, and whether it left.
    pub fn identity(&self) -> Identity {
        Identity {
            key: self.config.join("host.key"),
            enrolment: self.config.join("enrolment.json"),
            revoked: self.data.join("revoked.json"),
            left: self.data.join("left.json"),
        }
    }

    /// The spool of units, results and scans.
    pub fn spool(&self) -> Spool {
        Spool {
            dir: self.data.join("spool"),
        }
    }

    /// The day totals, kept in the spool.
    pub fn days(&self) -> Days {
        Days {
            path: self.data.join("spool").join("days.json"),
        }
    }

    /// Take the home for `beebot run`, or say which process holds it.
    pub fn lock_runner(&self) -> Result<RunLock, RunLockError> {
        runlock::lock(&self.data, [&self.data, &self.config])
    }

    /// Every file and directory of this home the client makes, with what
    /// each is: keys and enrolment first (the home is no longer joined
    /// from the first removal), the lock last.
    fn own_files(&self) -> Vec<(&'static str, PathBuf)> {
        let id = self.identity();
        vec![
            ("enrolment", id.enrolment),
            ("host key", id.key),
            (
                "spool (units, results, checkpoints)",
                self.data.join("spool"),
            ),
            ("benchmark result", self.data.join("benchmark.json")),
            ("learned concurrency", learned_path(&self.data)),
            ("settings", self.config.join("config.toml")),
            ("revocation note", id.revoked),
            ("live status", self.data.join("status.json")),
            ("live status (temporary)", self.data.join("status.tmp")),
            ("status page secret", self.data.join(SECRET_FILE)),
            ("status page address", self.data.join(ADDR_FILE)),
            ("status page opener", self.data.join(OPEN_FILE)),
            ("note that it left", id.left),
            ("logs", self.data.join("logs")),
            ("runner's pid", self.data.join(RUN_PID_FILE)),
            ("run lock", self.data.join(runlock::RUN_LOCK_FILE)),
        ]
    }

    /// Forget the project: remove every file of the home the client made
    /// (see [`Home::own_files`]), then the home's directories when nothing
    /// else is left in them. Returns what was removed.
    pub fn remove_all(&self) -> Result<Vec<(&'static str, PathBuf)>> {
        let mut removed = Vec::new();
        self.remove_all_into(&mut removed)?;
        Ok(removed)
    }

    /// [`Home::remove_all`], adding what it removed to `removed` as it goes
    /// (so a second try after a failure reports the first's too).
    pub fn remove_all_into(&self, removed: &mut Vec<(&'static str, PathBuf)>) -> Result<()> {
        for (what, p) in self.own_files() {
            let gone = match fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
                Ok(_) => fs::remove_file(&p),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => Err(e),
            };
            gone.with_context(|| format!("cannot remove {}", p.display()))?;
            removed.push((what, p));
        }
        for dir in [&self.data, &self.config] {
            // Only when empty: the user's own files stay, and so does the dir.
            let _ = fs::remove_dir(dir);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
