//! The client's home: its host key, its enrolment, and the spool of units and
//! results that lets a restarted client resume.
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
//! Also kept: the day totals (`days`, `week`: `DAYS_KEPT` days) and, read only,
//! the installer's invite code (`/etc/beebot/invite`; on Windows `HKLM`, then
//! `HKCU`, `Software\BeeBot`). The default home is the machine's own (Local
//! AppData on Windows, never the roaming profile).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use beebot_shared::codec;
use beebot_shared::durable::read_at_most;
use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_SCAN_STATE_BYTES, MAX_UNIT_BYTES};
use beebot_shared::linkfile::ScanSummary;
use beebot_shared::sign::{self, SignedUnit, WorkUnit};

use crate::checkpoint::{Checkpoint, CheckpointHead, MAX_CHECKPOINT_BYTES};
use crate::recordlog::{self, LogMark, RecordsLog};

/// Most units kept in the spool: more than any buffer the client asks for.
pub const MAX_SPOOLED_UNITS: usize = 1024;

/// What joining a project left behind.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enrolment {
    pub server_addr: String,
    pub server_name: String,
    /// Hex SHA-256 of the server certificate.
    pub cert_sha256: String,
    /// Hex ed25519 project public key.
    pub project_key: String,
    pub host_id: u64,
    pub name: String,
    pub joined_ms: u64,
}

impl Enrolment {
    pub fn cert_fingerprint(&self) -> Result<[u8; 32]> {
        hex32(&self.cert_sha256).context("enrolment.json: bad certificate fingerprint")
    }
    /// Where the server is and its pinned certificate.
    pub fn server_id(&self) -> Result<crate::net::ServerId> {
        Ok(crate::net::ServerId {
            addr: self.server_addr.clone(),
            server_name: self.server_name.clone(),
            cert_sha256: self.cert_fingerprint()?,
        })
    }

    pub fn project_verifying_key(&self) -> Result<VerifyingKey> {
        let b = hex32(&self.project_key).context("enrolment.json: bad project key")?;
        VerifyingKey::from_bytes(&b).context("enrolment.json: bad project key")
    }
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    hex::decode(s).ok()?.try_into().ok()
}

/// Results delivered on one day.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotals {
    /// Local date, `YYYY-MM-DD`.
    pub date: String,
    pub results: u64,
    pub pages: u64,
    pub links: u64,
}

/// Days of totals kept for the week's (two weeks: a week back from any day).
pub const DAYS_KEPT: usize = 14;

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

/// Today's local date as `YYYY-MM-DD`.
pub fn today_date() -> String {
    crate::localtime::today()
}

/// Where an IT deployment leaves an invite code for every user of the
/// machine (the Debian package's postinst): a client that has not joined
/// yet joins with it by itself. On Windows the installers leave it in the
/// registry instead ([`WINDOWS_INVITE_KEY`]), so there is no file.
///
/// Only root can write it: it is under a root-owned directory, and a file
/// others than root could have written is refused
/// ([`deployment_file_trusted`]).
pub fn deployment_invite_path() -> Option<PathBuf> {
    if cfg!(windows) {
        None
    } else if cfg!(target_os = "macos") {
        Some(PathBuf::from("/Library/Application Support/BeeBot/invite"))
    } else {
        Some(PathBuf::from("/etc/beebot/invite"))
    }
}

/// The registry key where the Windows installers leave the invite code:
/// under `HKLM` by the per-machine MSI (only administrators can write
/// there), else under `HKCU` by a per-user install (only that user can).
/// Never a file in `%ProgramData%`, which every user may write: a code
/// there could send another user's client to a server of their choosing.
pub const WINDOWS_INVITE_KEY: &str = "Software\\BeeBot";
/// The value's name under [`WINDOWS_INVITE_KEY`].
pub const WINDOWS_INVITE_VALUE: &str = "Invite";

/// The code a Windows installer left: the machine's (`HKLM`), else this
/// user's (`HKCU`). Blank values count as none.
#[cfg(windows)]
fn windows_installed_invite() -> Option<String> {
    use beebot_win32::registry::{get_string, Root};
    [Root::LocalMachine, Root::CurrentUser]
        .into_iter()
        .filter_map(|root| {
            get_string(root, WINDOWS_INVITE_KEY, WINDOWS_INVITE_VALUE)
                .ok()
                .flatten()
        })
        .filter_map(|v| invite_code_in(v.as_bytes()).ok().flatten())
        .next()
}

/// The invite code this machine was installed with: `BEEBOT_INVITE`, else
/// the Windows installers' registry value, else the deployment's file.
pub fn installed_invite() -> Option<String> {
    let env = std::env::var("BEEBOT_INVITE").ok();
    #[cfg(windows)]
    {
        deployment_invite(env, None).or_else(windows_installed_invite)
    }
    #[cfg(not(windows))]
    {
        deployment_invite(env, deployment_invite_path().as_deref())
    }
}

/// Whether this machine has an installer's invite code (the environment's,
/// the registry's or a trusted file), which a home that left must not join
/// with again.
pub fn has_deployment_invite() -> bool {
    installed_invite().is_some()
}

/// Whether a deployment file could only have been written by root: it and
/// its directory are root's and writable by no one else (Unix; elsewhere
/// the install directory's own permissions decide).
pub fn deployment_file_trusted(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let root_only =
            |p: &Path| fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
        root_only(path) && path.parent().is_some_and(root_only)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// The deployment's invite code: `env` (`BEEBOT_INVITE`), else the first
/// non-blank line of `file` when [`deployment_file_trusted`] (at most an
/// invite code's length is read).
pub fn deployment_invite(env: Option<String>, file: Option<&Path>) -> Option<String> {
    if let Some(code) = env.map(|e| e.trim().to_string()).filter(|e| !e.is_empty()) {
        return Some(code);
    }
    let file = file?;
    if !deployment_file_trusted(file) {
        if file.exists() {
            tracing::warn!(
                "ignoring {}: an invite code must be root's and writable by no one else",
                file.display()
            );
        }
        return None;
    }
    invite_code_in(fs::File::open(file).ok()?).ok().flatten()
}

/// The first non-blank line of `input`, reading at most an invite code's
/// length (stdin of `beebot join -`, a deployment's file).
pub fn invite_code_in(input: impl std::io::Read) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let limit = beebot_shared::invite::MAX_INVITE_CODE_LEN as u64 + 2;
    let mut text = String::new();
    input.take(limit).read_to_string(&mut text)?;
    Ok(text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string))
}

/// A finished result waiting for upload.
#[derive(Clone, Debug, PartialEq)]
pub struct SpooledResult {
    pub link_file: Vec<u8>,
    pub summary: ScanSummary,
    /// The encoded scan state, when the scan stopped before its natural end.
    pub state: Option<Vec<u8>>,
}

/// What the server holds of a running scan: its parts accepted so far
/// (`Request::UploadPart`), up to which checkpoint (its records log's mark
/// and its summary then). The scan's next part, and its final upload,
/// start there.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PartsSent {
    pub count: u32,
    pub mark: LogMark,
    pub summary: ScanSummary,
}

/// A part of a running scan, spooled before it is sent: sent again
/// unchanged until the server answers it, so a part whose answer was lost
/// is never mistaken for a later one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpooledPart {
    pub unit_id: u64,
    /// Its index among the unit's parts (`PartsSent::count` when taken).
    pub index: u32,
    /// The checkpoint it ends at: its log mark and the scan's summary then.
    pub mark: LogMark,
    pub total: ScanSummary,
    /// What is sent: the part's own summary, link file and frontier.
    pub summary: ScanSummary,
    #[serde(with = "beebot_shared::codec::bytes")]
    pub link_file: Vec<u8>,
    #[serde(with = "beebot_shared::codec::bytes")]
    pub state: Vec<u8>,
}

/// Largest record of what the server holds of a scan (a few numbers and
/// a summary: a few hundred bytes).
const MAX_PARTS_SENT_BYTES: usize = 64 * 1024;

/// Largest spooled summary of a result (a few counts: a few hundred bytes).
const MAX_SUMMARY_FILE_BYTES: usize = 64 * 1024;

/// Largest enrolment record (the project's address, names and keys: a
/// few hundred bytes).
const MAX_ENROLMENT_FILE_BYTES: usize = 64 * 1024;

/// Largest file of day totals (a line a day, the last weeks kept).
const MAX_DAYS_FILE_BYTES: usize = 1 << 20;

/// Largest spooled part: a link file and a state at their limits.
const MAX_PART_FILE_BYTES: usize = MAX_LINK_FILE_BYTES + MAX_SCAN_STATE_BYTES + 64 * 1024;

/// A unit read back from the spool, verified.
#[derive(Clone, Debug)]
pub struct SpooledUnit {
    pub signed: SignedUnit,
    pub unit: WorkUnit,
}

/// The client's directories.
#[derive(Clone, Debug)]
pub struct Home {
    pub config: PathBuf,
    pub data: PathBuf,
}

pub use beebot_shared::util::check_private;

/// A spool file read up to `max` bytes: `None` when there is none; an
/// error naming the file when it is longer than `what` may be, or cannot
/// be read.
fn read_spooled(path: &Path, max: usize, what: &str) -> Result<Option<Vec<u8>>> {
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

/// The totals among `days` of the seven days ending on `today`
/// (`YYYY-MM-DD`).
fn week_in(days: &[DayTotals], today: &str) -> DayTotals {
    let first = chrono::NaiveDate::parse_from_str(today, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.checked_sub_days(chrono::Days::new(6)))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| today.to_string());
    let mut w = DayTotals {
        date: first.clone(),
        ..Default::default()
    };
    for d in days {
        if d.date.as_str() >= first.as_str() && d.date.as_str() <= today {
            w.results += d.results;
            w.pages += d.pages;
            w.links += d.links;
        }
    }
    w
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

    fn key_path(&self) -> PathBuf {
        self.config.join("host.key")
    }
    fn enrolment_path(&self) -> PathBuf {
        self.config.join("enrolment.json")
    }
    fn units_dir(&self) -> PathBuf {
        self.data.join("spool").join("units")
    }
    fn results_dir(&self) -> PathBuf {
        self.data.join("spool").join("results")
    }
    fn scans_dir(&self) -> PathBuf {
        self.data.join("spool").join("scans")
    }
    fn checkpoint_path(&self, unit_id: u64) -> PathBuf {
        self.scans_dir().join(format!("{unit_id}.ckpt"))
    }
    fn records_log_path(&self, unit_id: u64) -> PathBuf {
        self.scans_dir().join(format!("{unit_id}.records"))
    }

    /// The host key, made (mode 0600) when there is none. A key file other
    /// users can read is refused: whoever reads it can act as this host.
    pub fn host_key(&self, create: bool) -> Result<SigningKey> {
        let path = self.key_path();
        match fs::read_to_string(&path) {
            Ok(text) => {
                check_private(&path)?;
                let b = hex32(text.trim())
                    .with_context(|| format!("{} is not a host key", path.display()))?;
                Ok(SigningKey::from_bytes(&b))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let key = sign::generate_key();
                write_atomic(&path, hex::encode(key.to_bytes()).as_bytes(), true)?;
                Ok(key)
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn enrolment(&self) -> Result<Option<Enrolment>> {
        let path = self.enrolment_path();
        let Some(text) = read_spooled(&path, MAX_ENROLMENT_FILE_BYTES, "an enrolment")? else {
            return Ok(None);
        };
        let e = serde_json::from_slice(&text)
            .with_context(|| format!("{} is damaged", path.display()))?;
        Ok(Some(e))
    }

    /// The enrolment, or a clear error telling the user to join.
    pub fn require_enrolment(&self) -> Result<Enrolment> {
        self.enrolment()?.with_context(|| {
            format!(
                "this client has not joined a project (no {}): run `beebot join -` and paste the invite code",
                self.enrolment_path().display()
            )
        })
    }

    /// Keep what a successful `join` brought: the host key (0600), then the
    /// enrolment. If either cannot be written, neither stays.
    pub fn save_joined(&self, key: &SigningKey, e: &Enrolment) -> Result<()> {
        let saved = write_atomic(
            &self.key_path(),
            hex::encode(key.to_bytes()).as_bytes(),
            true,
        )
        .and_then(|()| self.save_enrolment(e));
        if saved.is_err() {
            let _ = fs::remove_file(self.key_path());
            let _ = fs::remove_file(self.enrolment_path());
        }
        saved
    }

    pub fn save_enrolment(&self, e: &Enrolment) -> Result<()> {
        write_atomic(
            &self.enrolment_path(),
            serde_json::to_string_pretty(e)?.as_bytes(),
            true,
        )
    }

    // ---- spool ----

    /// Spool a unit; returns the bytes its file takes.
    pub fn spool_unit(&self, s: &SpooledUnit) -> Result<u64> {
        let bytes = codec::encode(&s.signed, MAX_UNIT_BYTES * 2)?;
        write_atomic(
            &self.units_dir().join(format!("{}.unit", s.unit.unit_id)),
            &bytes,
            false,
        )?;
        Ok(bytes.len() as u64)
    }

    /// Units in the spool, each verified again against the project key. Units
    /// that fail verification are moved aside (`.bad`) and reported.
    pub fn spooled_units(
        &self,
        project_key: &VerifyingKey,
    ) -> Result<(Vec<SpooledUnit>, Vec<String>)> {
        let mut units = Vec::new();
        let mut refused = Vec::new();
        let dir = self.units_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((units, refused)),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
        };
        for entry in entries.take(MAX_SPOOLED_UNITS * 2) {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("unit") {
                continue;
            }
            let checked = fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    codec::decode::<SignedUnit>(&b, MAX_UNIT_BYTES * 2).map_err(|e| e.to_string())
                })
                .and_then(|s| {
                    sign::verify_unit(project_key, &s)
                        .map(|unit| SpooledUnit { signed: s, unit })
                        .map_err(|e| e.to_string())
                });
            match checked {
                Ok(u) => units.push(u),
                Err(e) => {
                    refused.push(format!("{}: {e}", path.display()));
                    let _ = fs::rename(&path, path.with_extension("bad"));
                }
            }
        }
        units.sort_by_key(|u| u.unit.unit_id);
        Ok((units, refused))
    }

    pub fn remove_unit(&self, unit_id: u64) {
        let _ = fs::remove_file(self.units_dir().join(format!("{unit_id}.unit")));
        let _ = fs::remove_file(self.units_dir().join(format!("{unit_id}.deadline")));
        let _ = fs::remove_file(self.results_dir().join(format!("{unit_id}.lf")));
        let _ = fs::remove_file(self.results_dir().join(format!("{unit_id}.summary")));
        let _ = fs::remove_file(self.results_dir().join(format!("{unit_id}.state")));
        let _ = fs::remove_file(self.part_path(unit_id));
        let _ = fs::remove_file(self.parts_sent_path(unit_id));
        self.remove_checkpoint(unit_id);
    }

    fn part_path(&self, unit_id: u64) -> PathBuf {
        self.results_dir().join(format!("{unit_id}.part"))
    }
    fn parts_sent_path(&self, unit_id: u64) -> PathBuf {
        self.units_dir().join(format!("{unit_id}.parts"))
    }

    /// What the server holds of a unit's scan (none of it when nothing
    /// was recorded). A damaged record is an error naming the file: the
    /// scan cannot know where its next upload starts.
    pub fn parts_sent(&self, unit_id: u64) -> Result<PartsSent> {
        let path = self.parts_sent_path(unit_id);
        match read_spooled(&path, MAX_PARTS_SENT_BYTES, "the record")? {
            Some(t) => {
                serde_json::from_slice(&t).with_context(|| format!("{} is damaged", path.display()))
            }
            None => Ok(PartsSent::default()),
        }
    }

    /// Record a part the server accepted (or already held), and drop it
    /// from the spool: the record first, so a kill between the two sends
    /// the part again (a duplicate), never skips it.
    pub fn part_accepted(&self, part: &SpooledPart) -> Result<PartsSent> {
        let sent = PartsSent {
            count: part.index + 1,
            mark: part.mark,
            summary: part.total.clone(),
        };
        write_atomic(
            &self.parts_sent_path(part.unit_id),
            serde_json::to_string(&sent)?.as_bytes(),
            false,
        )?;
        let _ = fs::remove_file(self.part_path(part.unit_id));
        Ok(sent)
    }

    /// Spool a part before it is sent.
    pub fn save_part(&self, part: &SpooledPart) -> Result<()> {
        let bytes = codec::encode(part, MAX_PART_FILE_BYTES).with_context(|| {
            format!("cannot encode part {} of unit {}", part.index, part.unit_id)
        })?;
        write_atomic(&self.part_path(part.unit_id), &bytes, false)
    }

    /// A unit's part spooled and not answered yet. A damaged one is
    /// dropped (it is taken again from the checkpoint).
    pub fn part(&self, unit_id: u64) -> Option<SpooledPart> {
        let path = self.part_path(unit_id);
        let bytes = match read_at_most(&path, MAX_PART_FILE_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => Vec::new(),
            Err(_) => return None,
        };
        match codec::decode::<SpooledPart>(&bytes, MAX_PART_FILE_BYTES) {
            Ok(p) if p.unit_id == unit_id => Some(p),
            _ => {
                tracing::warn!(file = %path.display(), "a spooled part is damaged: dropped");
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// A part of the unit is spooled, not answered yet.
    pub fn has_part(&self, unit_id: u64) -> bool {
        self.part_path(unit_id).is_file()
    }

    /// Drop a unit's spooled part (the server answered it, or the scan
    /// is not wanted).
    pub fn remove_part(&self, unit_id: u64) {
        let _ = fs::remove_file(self.part_path(unit_id));
    }

    /// Remember a unit's deadline as the server extended it (Unix ms).
    pub fn save_deadline(&self, unit_id: u64, deadline_ms: u64) -> Result<()> {
        write_atomic(
            &self.units_dir().join(format!("{unit_id}.deadline")),
            deadline_ms.to_string().as_bytes(),
            false,
        )
    }

    /// A unit's extended deadline, if the server extended it (an unreadable
    /// file counts as none: the signed deadline stands).
    pub fn deadline(&self, unit_id: u64) -> Option<u64> {
        let text = fs::read_to_string(self.units_dir().join(format!("{unit_id}.deadline"))).ok()?;
        text.trim().parse().ok()
    }

    /// Keep a checkpoint whole (a continuation unit's state, say): its
    /// records as a new records log, then its head. The old head goes
    /// first, so a death between leaves no head naming the wrong log.
    pub fn save_checkpoint(&self, unit_id: u64, c: &Checkpoint) -> Result<()> {
        let _ = fs::remove_file(self.checkpoint_path(unit_id));
        let mut log = self.records_log(unit_id, &c.state.site, LogMark::default())?;
        let log = log.append(&c.records)?;
        self.save_checkpoint_head(
            unit_id,
            &CheckpointHead {
                state: c.state.clone(),
                summary: c.summary.clone(),
                log,
            },
        )
    }

    /// Keep a running scan's checkpoint head (durably: temporary name,
    /// fsync, rename), its records log synced up to `head.log` before.
    pub fn save_checkpoint_head(&self, unit_id: u64, head: &CheckpointHead) -> Result<()> {
        let bytes = head
            .encode(unit_id)
            .with_context(|| format!("cannot encode the checkpoint of unit {unit_id}"))?;
        write_atomic(&self.checkpoint_path(unit_id), &bytes, false)
    }

    /// The records log of a unit's scan, open to append after `mark` (its
    /// checkpoint's; the default for a fresh scan, which empties it).
    pub fn records_log(&self, unit_id: u64, site: &str, mark: LogMark) -> Result<RecordsLog> {
        RecordsLog::open(&self.records_log_path(unit_id), unit_id, site, mark)
    }

    /// The records of a unit's records log between two of its
    /// checkpoints' marks (a part of its scan).
    pub fn records_between(
        &self,
        unit_id: u64,
        from: LogMark,
        to: LogMark,
    ) -> Result<Vec<beebot_shared::linkfile::LinkRecord>> {
        recordlog::read_between(&self.records_log_path(unit_id), unit_id, from, to)
    }

    /// A unit's checkpoint head, if one is spooled. A damaged one is an
    /// error naming the file.
    pub fn checkpoint_head(&self, unit_id: u64) -> Result<Option<CheckpointHead>> {
        let path = self.checkpoint_path(unit_id);
        let Some(bytes) = read_spooled(&path, MAX_CHECKPOINT_BYTES, "a checkpoint")? else {
            return Ok(None);
        };
        let head = CheckpointHead::decode(&bytes, unit_id)
            .with_context(|| format!("{} is damaged", path.display()))?;
        Ok(Some(head))
    }

    /// A unit's checkpoint, if one is spooled, with its records, and the
    /// mark of its records log. A damaged head or log is an error naming
    /// the file (the caller starts the scan over).
    pub fn checkpoint(&self, unit_id: u64) -> Result<Option<(Checkpoint, LogMark)>> {
        let Some(head) = self.checkpoint_head(unit_id)? else {
            return Ok(None);
        };
        let records = recordlog::read(&self.records_log_path(unit_id), unit_id, head.log)?;
        Ok(Some((
            Checkpoint {
                state: head.state,
                records,
                summary: head.summary,
            },
            head.log,
        )))
    }

    pub fn has_checkpoint(&self, unit_id: u64) -> bool {
        self.checkpoint_path(unit_id).exists()
    }

    /// Remove a unit's checkpoint: its head, then its records log.
    pub fn remove_checkpoint(&self, unit_id: u64) {
        let _ = fs::remove_file(self.checkpoint_path(unit_id));
        let _ = fs::remove_file(self.records_log_path(unit_id));
    }

    /// Keep a finished result until the server acknowledges it. The summary is
    /// written last: a result counts as present only when all its files are.
    pub fn save_result(&self, unit_id: u64, result: &SpooledResult) -> Result<()> {
        let dir = self.results_dir();
        write_atomic(&dir.join(format!("{unit_id}.lf")), &result.link_file, false)?;
        let state_path = dir.join(format!("{unit_id}.state"));
        match &result.state {
            Some(state) => write_atomic(&state_path, state, false)?,
            None => {
                let _ = fs::remove_file(&state_path);
            }
        }
        write_atomic(
            &dir.join(format!("{unit_id}.summary")),
            serde_json::to_string(&result.summary)?.as_bytes(),
            false,
        )
    }

    /// A finished result of a unit, if one is spooled.
    pub fn result(&self, unit_id: u64) -> Result<Option<SpooledResult>> {
        let dir = self.results_dir();
        let spath = dir.join(format!("{unit_id}.summary"));
        let Some(text) = read_spooled(&spath, MAX_SUMMARY_FILE_BYTES, "a summary")? else {
            return Ok(None);
        };
        let summary = serde_json::from_slice(&text)
            .with_context(|| format!("{} is damaged", spath.display()))?;
        let lpath = dir.join(format!("{unit_id}.lf"));
        let bytes = read_spooled(&lpath, MAX_LINK_FILE_BYTES, "a link file")?
            .with_context(|| format!("{} is missing beside its summary", lpath.display()))?;
        let spath = dir.join(format!("{unit_id}.state"));
        let state = read_spooled(&spath, MAX_SCAN_STATE_BYTES, "a scan state")?;
        Ok(Some(SpooledResult {
            link_file: bytes,
            summary,
            state,
        }))
    }

    /// Remove what a kill or a power cut can leave behind: temporary files
    /// (`*.tmp`, never complete) anywhere in the spool, and checkpoints,
    /// results and deadlines whose unit is gone (a death inside
    /// [`Home::remove_unit`]). Call at startup, before any scan runs.
    /// Returns the files removed.
    pub fn sweep_spool(&self) -> usize {
        let spool = self.data.join("spool");
        let listing = |dir: &Path| -> Vec<PathBuf> {
            fs::read_dir(dir)
                .map(|es| {
                    es.flatten()
                        .take(MAX_SPOOLED_UNITS * 8)
                        .map(|e| e.path())
                        .collect()
                })
                .unwrap_or_default()
        };
        let id_of = |p: &Path| -> Option<u64> { p.file_stem()?.to_str()?.parse().ok() };
        let ext_of = |p: &Path| p.extension().and_then(|e| e.to_str()).map(str::to_string);
        let units: std::collections::HashSet<u64> = listing(&self.units_dir())
            .iter()
            .filter(|p| ext_of(p).as_deref() == Some("unit"))
            .filter_map(|p| id_of(p))
            .collect();
        let mut removed = 0;
        for dir in [
            spool,
            self.units_dir(),
            self.results_dir(),
            self.scans_dir(),
        ] {
            for path in listing(&dir) {
                if !path.is_file() {
                    continue;
                }
                let orphan = match ext_of(&path).as_deref() {
                    Some("tmp") => true,
                    Some(
                        "ckpt" | "records" | "lf" | "summary" | "state" | "deadline" | "part"
                        | "parts",
                    ) => id_of(&path).is_some_and(|id| !units.contains(&id)),
                    _ => false,
                };
                if orphan && fs::remove_file(&path).is_ok() {
                    tracing::info!(file = %path.display(), "removed a leftover spool file");
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Bytes the spool's units and results take (bounded listing).
    pub fn spool_bytes(&self) -> u64 {
        let mut total = 0u64;
        for dir in [self.units_dir(), self.results_dir(), self.scans_dir()] {
            if let Ok(entries) = fs::read_dir(&dir) {
                for e in entries.flatten().take(MAX_SPOOLED_UNITS * 4) {
                    total += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
            }
        }
        total
    }

    /// Today's totals (local date), kept in the spool across restarts.
    pub fn today(&self, date: &str) -> DayTotals {
        self.day_in(&self.days(), date)
    }

    /// Today's totals, or `None` when the days' file could not be read or
    /// does not parse (the zeros [`Home::today`] gives then are no reading
    /// to keep).
    pub fn today_read(&self, date: &str) -> Option<DayTotals> {
        let days = self.read_days().ok()?.ok()?;
        Some(self.day_in(&days, date))
    }

    /// `date`'s totals among `days`, else nothing yet.
    fn day_in(&self, days: &[DayTotals], date: &str) -> DayTotals {
        days.iter()
            .rfind(|d| d.date == date)
            .cloned()
            .unwrap_or_else(|| DayTotals {
                date: date.to_string(),
                ..Default::default()
            })
    }

    /// Add one accepted result to today's totals, kept with the days kept
    /// for the week's ([`Home::days`]): one read and one write a result.
    pub fn add_to_today(&self, date: &str, pages: u64, links: u64) -> Result<DayTotals> {
        let mut days = match self.read_days()? {
            Ok(days) => days,
            Err(why) => {
                // Not overwritten: the history that does not parse is kept
                // aside, under a name of its own.
                let aside = self.days_path().with_extension(format!(
                    "json.unreadable-{}",
                    beebot_shared::clock::now_ms()
                ));
                fs::rename(self.days_path(), &aside)
                    .with_context(|| format!("cannot keep {} aside", self.days_path().display()))?;
                tracing::warn!(
                    "{} could not be read ({why}): kept as {}, the days start again",
                    self.days_path().display(),
                    aside.display()
                );
                Vec::new()
            }
        };
        let mut d = self.day_in(&days, date);
        d.results += 1;
        d.pages += pages;
        d.links += links;
        days.retain(|x| x.date != d.date);
        days.sort_by(|a, b| a.date.cmp(&b.date));
        // The oldest other days go; today's stays, even on a clock set
        // back behind the days kept.
        let extra = (days.len() + 1).saturating_sub(DAYS_KEPT);
        days.drain(..extra.min(days.len()));
        let at = days.partition_point(|x| x.date < d.date);
        days.insert(at, d.clone());
        write_atomic(
            &self.days_path(),
            serde_json::to_string(&days)?.as_bytes(),
            false,
        )?;
        Ok(d)
    }

    fn days_path(&self) -> PathBuf {
        self.data.join("spool").join("days.json")
    }

    /// The totals of the last [`DAYS_KEPT`] days with results, oldest first
    /// (none while the file cannot be read).
    pub fn days(&self) -> Vec<DayTotals> {
        self.read_days()
            .ok()
            .and_then(|d| d.ok())
            .unwrap_or_default()
    }

    /// The days kept, none when there is no file yet; the inner `Err`
    /// says why a file that was read does not parse (bytes no reader can
    /// use), the outer one why it could not be read (which may pass).
    fn read_days(&self) -> Result<std::result::Result<Vec<DayTotals>, String>> {
        match read_at_most(&self.days_path(), MAX_DAYS_FILE_BYTES) {
            Ok(Some(bytes)) => Ok(serde_json::from_slice(&bytes).map_err(|e| e.to_string())),
            Ok(None) => Ok(Err(format!(
                "larger than a days file may be ({MAX_DAYS_FILE_BYTES} bytes)"
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ok(Vec::new())),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", self.days_path().display())),
        }
    }

    /// Today's totals and the week's, from one reading of the days' file
    /// (the page asks for both every two seconds while it is open).
    pub fn today_and_week(&self, today: &str) -> (DayTotals, DayTotals) {
        let days = self.days();
        (self.day_in(&days, today), week_in(&days, today))
    }

    fn revoked_path(&self) -> PathBuf {
        self.data.join("revoked.json")
    }

    /// Remember that the server refused this host as revoked, for `status`.
    pub fn mark_revoked(&self, message: &str) -> Result<()> {
        let r = Revocation {
            at_ms: beebot_shared::clock::now_ms(),
            message: message.chars().take(MAX_REVOCATION_TEXT).collect(),
        };
        write_atomic(
            &self.revoked_path(),
            serde_json::to_string(&r)?.as_bytes(),
            false,
        )
    }

    /// The server's revocation of this host, if it was heard.
    pub fn revocation(&self) -> Option<Revocation> {
        let text = fs::read_to_string(self.revoked_path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn left_path(&self) -> PathBuf {
        self.data.join("left.json")
    }

    /// Note that this home left its project (kept by a leave, so an
    /// installer's invite code does not join it again by itself).
    pub fn mark_left(&self) {
        let note = serde_json::json!({ "left_ms": beebot_shared::clock::now_ms() });
        let _ = beebot_shared::util::create_private_dir(&self.data);
        let _ = write_atomic(&self.left_path(), note.to_string().as_bytes(), false);
    }

    /// Whether this home left a project and has not joined one since.
    pub fn has_left(&self) -> bool {
        self.left_path().exists()
    }

    /// Forget that this home left (it joined again).
    pub fn clear_left(&self) {
        let _ = fs::remove_file(self.left_path());
    }

    /// Every file and directory of this home the client makes, with what
    /// each is: keys and enrolment first (the home is no longer joined
    /// from the first removal), the lock last.
    fn own_files(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("enrolment", self.enrolment_path()),
            ("host key", self.key_path()),
            (
                "spool (units, results, checkpoints)",
                self.data.join("spool"),
            ),
            ("benchmark result", self.data.join("benchmark.json")),
            ("learned concurrency", learned_path(&self.data)),
            ("settings", self.config.join("config.toml")),
            ("revocation note", self.revoked_path()),
            ("live status", self.data.join("status.json")),
            ("live status (temporary)", self.data.join("status.tmp")),
            ("status page secret", self.data.join(SECRET_FILE)),
            ("status page address", self.data.join(ADDR_FILE)),
            ("status page opener", self.data.join(OPEN_FILE)),
            ("note that it left", self.left_path()),
            ("logs", self.data.join("logs")),
            ("runner's pid", self.data.join(RUN_PID_FILE)),
            ("run lock", self.run_lock_path()),
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

/// Longest revocation message kept.
const MAX_REVOCATION_TEXT: usize = 512;

/// The server refused this host as revoked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Revocation {
    /// When the client heard it, Unix ms.
    pub at_ms: u64,
    /// The server's words.
    pub message: String,
}

/// Why `beebot run` could not take the home.
#[derive(Debug, thiserror::Error)]
pub enum RunLockError {
    #[error(
        "another `beebot run` ({}) is already running with this home ({}): stop it first, or use another --home",
        .pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "pid unknown".into()),
        .home.display()
    )]
    Held { pid: Option<u32>, home: PathBuf },
    #[error("cannot lock {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The home held by one `beebot run`: an exclusive advisory lock (`flock` on
/// Unix, `LockFileEx` on Windows) on `DATA/run.lock`, and its pid in
/// `DATA/run.pid` for other processes to find it. The pid is a file apart
/// because Windows lets no other process read a range another holds
/// locked. The operating system drops the lock when the process ends,
/// however it ends, so a lock left by a killed runner (its pid file still
/// there) is taken over by the next. The lock file itself is never removed
/// (removing it while another runner opens it would let two lock different
/// files); on drop the pid file goes, then the lock.
#[derive(Debug)]
pub struct RunLock {
    /// Held open for the lock; dropped after the pid file is removed.
    _lock: fs::File,
    pid_path: PathBuf,
    /// The pid a runner that died left behind, if one did.
    pub stale_pid: Option<u32>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.pid_path);
    }
}

/// The runner's pid beside its lock.
pub const RUN_PID_FILE: &str = "run.pid";

/// The pid in a file of the home, if it holds one.
fn pid_in(path: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    Read::take(fs::File::open(path).ok()?, 64)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

/// The pid recorded for the home's runner: `run.pid`, else the lock file
/// itself, where runners before `run.pid` wrote it.
fn recorded_pid(data: &Path) -> Option<u32> {
    pid_in(&data.join(RUN_PID_FILE)).or_else(|| pid_in(&data.join("run.lock")))
}

/// Tries of the run lock before another holder is reported, and the wait
/// between them.
const LOCK_RETRIES: usize = 3;
const LOCK_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(30);

/// The pid of the `beebot run` holding the home at `data`, if one does.
/// Only looks: the lock file is neither taken over nor changed (a dead
/// runner's pid stays for the next runner to report).
pub fn runner_pid(data: &Path) -> Option<u32> {
    use fs2::FileExt;
    let file = fs::File::open(data.join("run.lock")).ok()?;
    match FileExt::try_lock_shared(&file) {
        // Nobody holds it exclusively: no runner.
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            None
        }
        Err(_) => recorded_pid(data),
    }
}

impl Home {
    fn run_lock_path(&self) -> PathBuf {
        self.data.join("run.lock")
    }

    /// Take the home for `beebot run`, or say which process holds it.
    pub fn lock_runner(&self) -> Result<RunLock, RunLockError> {
        use fs2::FileExt;
        let path = self.run_lock_path();
        let io = |source| RunLockError::Io {
            path: path.clone(),
            source,
        };
        beebot_shared::util::create_private_dir(&self.data).map_err(io)?;
        // A home an older version made readable by others is made private.
        for dir in [&self.data, &self.config] {
            if dir.is_dir() {
                beebot_shared::util::make_dir_private(dir).map_err(io)?;
            }
        }
        let mut opts = fs::OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(&path).map_err(io)?;
        let contended = |e: &std::io::Error| {
            e.kind() == std::io::ErrorKind::WouldBlock
                || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
        };
        let mut locked = FileExt::try_lock_exclusive(&file);
        // A command that only looks ([`runner_pid`]) holds a shared lock for
        // a moment: try again before saying another runner holds the home.
        for _ in 0..LOCK_RETRIES {
            match &locked {
                Err(e) if contended(e) => {
                    std::thread::sleep(LOCK_RETRY_WAIT);
                    locked = FileExt::try_lock_exclusive(&file);
                }
                _ => break,
            }
        }
        if let Err(e) = locked {
            if !contended(&e) {
                return Err(io(e));
            }
            // The holder writes its pid right after locking: give it a moment.
            let mut pid = recorded_pid(&self.data);
            if pid.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(200));
                pid = recorded_pid(&self.data);
            }
            return Err(RunLockError::Held {
                pid,
                home: self.data.clone(),
            });
        }
        let stale_pid = recorded_pid(&self.data).filter(|p| *p != std::process::id());
        // What a runner before `run.pid` left in the lock file goes.
        file.set_len(0).map_err(io)?;
        let pid_path = self.data.join(RUN_PID_FILE);
        let pid_io = |source| RunLockError::Io {
            path: pid_path.clone(),
            source,
        };
        beebot_shared::durable::write_with(
            &pid_path,
            format!("{}\n", std::process::id()).as_bytes(),
            beebot_shared::durable::Access::Private,
        )
        .map_err(pid_io)?;
        Ok(RunLock {
            _lock: file,
            pid_path,
            stale_pid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::scope::Scope;
    use beebot_shared::sign::UnitLimits;
    use proptest::prelude::*;

    /// Cases per property in CI.
    const CASES: u32 = 64;

    fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = Home {
            config: dir.path().to_path_buf(),
            data: dir.path().to_path_buf(),
        };
        (dir, h)
    }

    /// A spool file longer than its kind may be is refused by name, and
    /// one at the limit is read.
    #[test]
    fn spool_files_longer_than_their_limit_are_refused_by_name() {
        let (_d, h) = home();
        fs::create_dir_all(h.units_dir()).unwrap();
        fs::create_dir_all(h.results_dir()).unwrap();
        let pad = |json: &str, len: usize| {
            let mut t = json.to_string();
            t.push_str(&" ".repeat(len - json.len()));
            t
        };
        // What the server holds of a scan.
        let sent = serde_json::to_string(&PartsSent::default()).unwrap();
        let path = h.parts_sent_path(7);
        fs::write(&path, pad(&sent, MAX_PARTS_SENT_BYTES)).unwrap();
        assert_eq!(h.parts_sent(7).unwrap(), PartsSent::default());
        fs::write(&path, pad(&sent, MAX_PARTS_SENT_BYTES + 1)).unwrap();
        let e = h.parts_sent(7).unwrap_err().to_string();
        assert!(e.contains("larger than the record may be"), "{e}");
        // A result's summary.
        let summary = serde_json::to_string(&ScanSummary::default()).unwrap();
        fs::write(h.results_dir().join("8.lf"), b"").unwrap();
        let spath = h.results_dir().join("8.summary");
        fs::write(&spath, pad(&summary, MAX_SUMMARY_FILE_BYTES)).unwrap();
        assert!(h.result(8).unwrap().is_some());
        fs::write(&spath, pad(&summary, MAX_SUMMARY_FILE_BYTES + 1)).unwrap();
        let e = format!("{:#}", h.result(8).unwrap_err());
        assert!(
            e.contains("8.summary is larger than a summary may be"),
            "{e}"
        );
        // The day totals: shown as unreadable, not read whole.
        fs::write(h.days_path(), pad("[]", MAX_DAYS_FILE_BYTES + 1)).unwrap();
        let e = h.read_days().unwrap().unwrap_err();
        assert!(e.contains("larger than a days file may be"), "{e}");
        // The enrolment.
        fs::write(h.enrolment_path(), pad("{}", MAX_ENROLMENT_FILE_BYTES + 1)).unwrap();
        let e = format!("{:#}", h.enrolment().unwrap_err());
        assert!(e.contains("larger than an enrolment may be"), "{e}");
    }

    #[test]
    fn a_part_is_spooled_until_answered_and_what_the_server_holds_is_kept() {
        let (_d, h) = home();
        fs::create_dir_all(h.units_dir()).unwrap();
        fs::create_dir_all(h.results_dir()).unwrap();
        assert_eq!(h.parts_sent(7).unwrap(), PartsSent::default());
        assert!(h.part(7).is_none() && !h.has_part(7));
        let part = SpooledPart {
            unit_id: 7,
            index: 0,
            mark: LogMark {
                records: 4,
                bytes: 100,
            },
            total: ScanSummary {
                pages: 9,
                ..ScanSummary::default()
            },
            summary: ScanSummary {
                pages: 9,
                links: 4,
                ..ScanSummary::default()
            },
            link_file: vec![1, 2, 3],
            state: vec![4, 5],
        };
        h.save_part(&part).unwrap();
        assert!(h.has_part(7));
        assert_eq!(h.part(7).as_ref(), Some(&part));
        let sent = h.part_accepted(&part).unwrap();
        assert_eq!(
            (sent.count, sent.mark.records, sent.summary.pages),
            (1, 4, 9)
        );
        assert!(h.part(7).is_none(), "an answered part leaves the spool");
        assert_eq!(h.parts_sent(7).unwrap(), sent);
        // A damaged spooled part is dropped (taken again from the
        // checkpoint); a damaged record of what the server holds is an error.
        fs::write(h.part_path(7), b"junk").unwrap();
        assert!(h.part(7).is_none() && !h.has_part(7));
        fs::write(h.parts_sent_path(7), b"{").unwrap();
        assert!(format!("{:#}", h.parts_sent(7).unwrap_err()).contains("damaged"));
        // One past its bound is not read whole.
        fs::write(h.parts_sent_path(7), vec![b' '; 64 * 1024 + 1]).unwrap();
        assert!(format!("{:#}", h.parts_sent(7).unwrap_err()).contains("larger"));
        // Both are the unit's: they go with it.
        h.save_part(&part).unwrap();
        h.remove_unit(7);
        assert!(!h.has_part(7) && !h.parts_sent_path(7).exists());
    }

    #[test]
    fn an_unreadable_days_file_is_kept_aside_not_overwritten() {
        let (_d, h) = home();
        fs::create_dir_all(h.days_path().parent().unwrap()).unwrap();
        let garbage = b"[{\"date\": \"2026-11-30\", \"results\": 4,";
        fs::write(h.days_path(), garbage).unwrap();
        assert!(h.days().is_empty(), "nothing to show while unreadable");
        let d = h.add_to_today("2026-12-01", 3, 30).unwrap();
        assert_eq!((d.results, d.pages, d.links), (1, 3, 30));
        let kept = |h: &Home| -> Vec<Vec<u8>> {
            let mut names: Vec<PathBuf> = fs::read_dir(h.days_path().parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().contains("days.json.unreadable-"))
                .collect();
            names.sort();
            names.iter().map(|p| fs::read(p).unwrap()).collect()
        };
        assert_eq!(kept(&h), vec![garbage.to_vec()], "the old bytes, whole");
        assert_eq!(h.days(), vec![d.clone()], "the days start again");
        // The next result adds to them, and leaves the kept file alone.
        h.add_to_today("2026-12-01", 1, 0).unwrap();
        assert_eq!(h.days()[0].results, 2);
        // A second bad file is kept beside the first, not over it.
        std::thread::sleep(std::time::Duration::from_millis(2));
        fs::write(h.days_path(), b"not json").unwrap();
        h.add_to_today("2026-12-02", 1, 0).unwrap();
        let mut both = kept(&h);
        both.sort();
        assert_eq!(both, vec![garbage.to_vec(), b"not json".to_vec()]);
    }

    #[test]
    fn a_days_file_that_cannot_be_read_now_is_left_where_it_is() {
        let (_d, h) = home();
        // A directory where the file should be: reading fails, not parsing.
        fs::create_dir_all(h.days_path()).unwrap();
        let err = h.add_to_today("2026-12-01", 1, 1).unwrap_err();
        assert!(format!("{err:#}").contains("cannot read"), "{err:#}");
        assert!(h.days_path().is_dir(), "left as it was");
        assert!(h.days().is_empty());
    }

    #[test]
    fn the_week_sums_the_last_seven_days_kept() {
        let (_d, h) = home();
        std::fs::create_dir_all(h.data.join("spool")).unwrap();
        for (date, pages) in [
            ("2026-11-20", 1000),
            ("2026-11-25", 10),
            ("2026-11-30", 20),
            ("2026-12-01", 30),
        ] {
            h.add_to_today(date, pages, pages * 10).unwrap();
        }
        h.add_to_today("2026-12-01", 5, 0).unwrap();
        assert_eq!(h.today("2026-12-01").pages, 35);
        let (today, w) = h.today_and_week("2026-12-01");
        assert_eq!(today, h.today("2026-12-01"));
        assert_eq!((w.date.as_str(), w.results, w.pages), ("2026-11-25", 4, 65));
        assert_eq!(w.links, 600);
        // Bounded: the oldest days go first.
        for day in 1..=(DAYS_KEPT as u32 + 3) {
            h.add_to_today(&format!("2027-01-{day:02}"), 1, 1).unwrap();
        }
        let days = h.days();
        assert_eq!(days.len(), DAYS_KEPT);
        // A clock set back behind every day kept: today's count still adds up.
        h.add_to_today("2026-01-01", 2, 0).unwrap();
        h.add_to_today("2026-01-01", 3, 0).unwrap();
        assert_eq!(h.today("2026-01-01").pages, 5);
        assert_eq!(h.days().len(), DAYS_KEPT);
        assert_eq!(
            days.last().unwrap().date,
            format!("2027-01-{:02}", DAYS_KEPT + 3)
        );
    }

    #[test]
    fn a_deployment_invite_comes_from_the_environment_or_its_file() {
        let (d, _h) = home();
        let dir = d.path().join("etc");
        std::fs::create_dir(&dir).unwrap();
        let file = dir.join("invite");
        assert_eq!(deployment_invite(None, Some(&file)), None, "no file");
        std::fs::write(&file, "\n  beebot2-file \r\nmore\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path, m| {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
            };
            mode(&dir, 0o755);
            mode(&file, 0o666);
            assert_eq!(
                deployment_invite(None, Some(&file)),
                None,
                "others may write it"
            );
            mode(&file, 0o644);
            mode(&dir, 0o777);
            assert_eq!(
                deployment_invite(None, Some(&file)),
                None,
                "others may replace it"
            );
            mode(&dir, 0o755);
            if !is_root() {
                assert_eq!(deployment_invite(None, Some(&file)), None, "not root's");
                return;
            }
        }
        assert_eq!(
            deployment_invite(None, Some(&file)).as_deref(),
            Some("beebot2-file")
        );
        assert_eq!(
            deployment_invite(Some(" beebot2-env\n".into()), Some(&file)).as_deref(),
            Some("beebot2-env")
        );
        assert_eq!(
            deployment_invite(Some(String::new()), Some(&file)).as_deref(),
            Some("beebot2-file")
        );
        // What is read is bounded.
        std::fs::write(&file, "x".repeat(1 << 20)).unwrap();
        let long = deployment_invite(None, Some(&file)).unwrap();
        assert!(long.len() <= beebot_shared::invite::MAX_INVITE_CODE_LEN + 2);
    }

    /// Whether the tests run as root (files they make are root's).
    #[cfg(unix)]
    fn is_root() -> bool {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::metadata(d.path()).unwrap().uid() == 0
    }

    /// An installer's code is read from this user's registry (the MSI's
    /// machine-wide value comes first; under Wine in CI).
    #[cfg(windows)]
    #[test]
    fn a_windows_installers_invite_is_read_from_the_registry() {
        use beebot_win32::registry::{delete_value, set_string, Root};
        if std::env::var_os("BEEBOT_INVITE").is_some() {
            return;
        }
        assert_eq!(installed_invite(), None);
        set_string(
            Root::CurrentUser,
            WINDOWS_INVITE_KEY,
            WINDOWS_INVITE_VALUE,
            "  \r\n",
        )
        .unwrap();
        assert_eq!(installed_invite(), None, "a blank value is none");
        set_string(
            Root::CurrentUser,
            WINDOWS_INVITE_KEY,
            WINDOWS_INVITE_VALUE,
            " beebot2-abc \r\n",
        )
        .unwrap();
        assert_eq!(installed_invite().as_deref(), Some("beebot2-abc"));
        assert!(has_deployment_invite());
        delete_value(Root::CurrentUser, WINDOWS_INVITE_KEY, WINDOWS_INVITE_VALUE).unwrap();
        assert_eq!(installed_invite(), None);
    }

    #[cfg(windows)]
    #[test]
    fn the_default_home_is_in_local_app_data() {
        let local = std::env::var_os("LOCALAPPDATA").expect("LOCALAPPDATA");
        let roaming = std::env::var_os("APPDATA").expect("APPDATA");
        let h = Home::resolve(None).unwrap();
        for dir in [&h.config, &h.data] {
            assert!(
                dir.starts_with(&local),
                "{} not under {local:?}",
                dir.display()
            );
            assert!(
                !dir.starts_with(&roaming),
                "{} under {roaming:?}",
                dir.display()
            );
        }
        assert_ne!(h.config, h.data);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_default_home_follows_xdg() {
        let h = Home::resolve(None).unwrap();
        let base = directories::BaseDirs::new().unwrap();
        assert!(h.config.starts_with(base.config_dir()));
        assert!(h.data.starts_with(base.data_dir()));
    }

    #[test]
    fn looking_for_the_runner_changes_nothing() {
        let (_d, h) = home();
        assert_eq!(runner_pid(&h.data), None);
        // A dead runner's pid stays for the next runner to report.
        std::fs::write(h.data.join(RUN_PID_FILE), "4242\n").unwrap();
        std::fs::write(h.data.join("run.lock"), "").unwrap();
        assert_eq!(runner_pid(&h.data), None);
        assert_eq!(
            std::fs::read_to_string(h.data.join(RUN_PID_FILE)).unwrap(),
            "4242\n"
        );
        let lock = h.lock_runner().unwrap();
        assert_eq!(lock.stale_pid, Some(4242));
        assert_eq!(runner_pid(&h.data), Some(std::process::id()));
    }

    #[test]
    fn a_home_that_left_remembers_it_until_it_joins_again() {
        let (_d, h) = home();
        assert!(!h.has_left());
        h.mark_left();
        assert!(h.has_left());
        h.clear_left();
        assert!(!h.has_left());
    }

    fn unit(id: u64) -> WorkUnit {
        WorkUnit {
            unit_id: id,
            round_id: 1,
            job_id: 2,
            host_id: 3,
            site: "a.test".into(),
            seed_url: "http://a.test/".into(),
            scope: Scope::Host,
            limits: UnitLimits {
                max_pages: 1,
                max_depth: 1,
                delay_ms: 0,
                max_page_bytes: 1,
                max_seconds: 1,
                max_crawl_delay_ms: 1000,
            },
            issued_ms: 1,
            deadline_ms: 2,
            user_agent: "t".into(),
            resume: None,
            exclusions: Vec::new(),
        }
    }

    #[test]
    fn one_runner_holds_the_home_and_a_dead_ones_lock_is_taken_over() {
        let (_d, h) = home();
        let lock = h.lock_runner().expect("first runner");
        assert_eq!(lock.stale_pid, None);
        // The pid is in a file of its own, readable while the lock is held
        // (Windows refuses reads of a locked range to other handles).
        let text = fs::read_to_string(h.data.join(RUN_PID_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        assert_eq!(runner_pid(&h.data), Some(std::process::id()));
        // A second lock on another open file is refused and names the holder.
        let e = h.lock_runner().expect_err("second runner");
        assert!(
            matches!(e, RunLockError::Held { pid: Some(p), .. } if p == std::process::id()),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())) && msg.contains("already running"),
            "{msg}"
        );
        // Released on drop, the pid file gone.
        drop(lock);
        assert!(!h.data.join(RUN_PID_FILE).exists());
        assert_eq!(runner_pid(&h.data), None);
        let lock = h.lock_runner().expect("after the first exits");
        assert_eq!(lock.stale_pid, None);
        drop(lock);
        // A runner killed leaves its pid but no lock: taken over.
        fs::write(h.data.join(RUN_PID_FILE), "4000000\n").unwrap();
        let lock = h.lock_runner().expect("stale lock");
        assert_eq!(lock.stale_pid, Some(4_000_000));
        drop(lock);
        // So does a runner from before `run.pid`, which wrote it in the lock.
        fs::write(h.data.join("run.lock"), "4000004\n").unwrap();
        let lock = h.lock_runner().expect("stale lock of an older runner");
        assert_eq!(lock.stale_pid, Some(4_000_004));
        assert_eq!(fs::read_to_string(h.data.join("run.lock")).unwrap(), "");
    }

    #[test]
    fn units_signed_by_another_key_are_moved_aside() {
        let (_d, h) = home();
        let project = sign::generate_key();
        let stranger = sign::generate_key();
        for (id, key) in [(1, &project), (2, &stranger)] {
            let signed = sign::sign_unit(key, &unit(id)).expect("sign");
            h.spool_unit(&SpooledUnit {
                signed,
                unit: unit(id),
            })
            .expect("spool");
        }
        let (units, refused) = h.spooled_units(&project.verifying_key()).expect("read");
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].unit.unit_id, 1);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].contains("bad signature"), "{refused:?}");
        assert!(h.units_dir().join("2.bad").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_host_key_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, h) = home();
        h.host_key(true).expect("made");
        let mode = fs::metadata(h.key_path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        fs::set_permissions(h.key_path(), fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = h.host_key(false).expect_err("refused");
        assert!(format!("{e:#}").contains("chmod 600"), "{e:#}");
        fs::set_permissions(h.key_path(), fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(h.host_key(false).is_ok());
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let (d, _h) = home();
        // The target is a directory: writing the temporary file works, the
        // rename over a non-empty directory fails.
        let target = d.path().join("busy");
        fs::create_dir_all(target.join("inside")).expect("mkdir");
        assert!(write_atomic(&target, b"x", false).is_err());
        assert!(!target.with_extension("tmp").exists());
    }

    #[test]
    fn a_write_makes_its_missing_directories_and_then_writes_beside_them() {
        let (d, _h) = home();
        let path = d.path().join("a/b/c.json");
        write_atomic(&path, b"one", false).expect("into missing directories");
        assert_eq!(fs::read(&path).expect("read"), b"one");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(d.path().join("a/b"))
                .expect("dir")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        }
        write_atomic(&path, b"two", false).expect("over it");
        write_atomic(&path.with_file_name("d.json"), b"three", true).expect("beside it");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert_eq!(
            fs::read(path.with_file_name("d.json")).expect("read"),
            b"three"
        );
        // A parent that is a file: refused, and the file is left as it was.
        let blocked = path.join("e.json");
        assert!(write_atomic(&blocked, b"x", false).is_err());
        assert_eq!(fs::read(&path).expect("still a file"), b"two");
        // A directory removed since is made again.
        fs::remove_dir_all(d.path().join("a")).expect("remove");
        write_atomic(&path, b"four", false).expect("made again");
        assert_eq!(fs::read(&path).expect("read"), b"four");
    }

    #[test]
    fn checkpoints_results_and_deadlines_round_trip_through_the_spool() {
        use beebot_shared::extract::LinkTag;
        use beebot_shared::linkfile::LinkRecord;
        use beebot_shared::scanstate::{url_digest, QueuedUrl, ScanState};
        let (_d, h) = home();
        assert!(h.checkpoint(9).expect("none").is_none());
        let c = Checkpoint {
            state: ScanState {
                site: "a.test".into(),
                pages_done: 2,
                queue: vec![QueuedUrl {
                    url: "http://a.test/b".into(),
                    depth: 1,
                }],
                seen: vec![url_digest("http://a.test/"), url_digest("http://a.test/b")],
                robots: Vec::new(),
            },
            records: vec![LinkRecord {
                source_url: "http://a.test/".into(),
                target_url: "http://c.test/".into(),
                tag: LinkTag::A,
                nofollow: true,
                anchor_text: "c".into(),
            }],
            summary: ScanSummary {
                pages: 2,
                links: 1,
                ..ScanSummary::default()
            },
        };
        h.save_checkpoint(9, &c).expect("save");
        assert!(h.has_checkpoint(9));
        let (read, mark) = h.checkpoint(9).expect("read").expect("some");
        assert_eq!(read, c);
        assert_eq!(mark.records, 1);
        // A checkpoint of another unit under this name is refused, not used;
        // so is one whose records log is gone or shorter than it names.
        fs::copy(h.checkpoint_path(9), h.checkpoint_path(10)).expect("copy");
        fs::copy(h.records_log_path(9), h.records_log_path(10)).expect("copy");
        assert!(h.checkpoint(10).is_err());
        fs::copy(h.records_log_path(9), h.records_log_path(11)).expect("copy");
        let log = fs::read(h.records_log_path(9)).expect("log");
        fs::write(h.records_log_path(9), &log[..log.len() - 1]).expect("cut");
        assert!(h.checkpoint(9).is_err());
        fs::remove_file(h.records_log_path(9)).expect("rm");
        assert!(h.checkpoint(9).is_err());
        fs::rename(h.records_log_path(11), h.records_log_path(9)).expect("back");
        assert_eq!(h.checkpoint(9).expect("read").expect("some").0, c);
        // Saved whole again: the log is written anew, not appended to.
        h.save_checkpoint(9, &c).expect("save");
        assert_eq!(
            h.checkpoint(9).expect("read").expect("some"),
            (c.clone(), mark)
        );
        h.save_deadline(9, 1_700_000_000_123).expect("deadline");
        assert_eq!(h.deadline(9), Some(1_700_000_000_123));
        let r = SpooledResult {
            link_file: vec![1, 2, 3],
            summary: ScanSummary::default(),
            state: Some(vec![4, 5]),
        };
        h.save_result(9, &r).expect("result");
        assert_eq!(h.result(9).expect("read"), Some(r.clone()));
        let r2 = SpooledResult { state: None, ..r };
        h.save_result(9, &r2).expect("result");
        assert_eq!(h.result(9).expect("read"), Some(r2));
        h.remove_unit(9);
        assert!(!h.has_checkpoint(9));
        assert!(!h.records_log_path(9).exists());
        assert_eq!(h.deadline(9), None);
        assert!(h.result(9).expect("read").is_none());
    }

    #[test]
    fn leftovers_of_a_kill_are_swept_at_startup() {
        let (_d, h) = home();
        let key = sign::generate_key();
        let signed = sign::sign_unit(&key, &unit(4)).expect("sign");
        h.spool_unit(&SpooledUnit {
            signed,
            unit: unit(4),
        })
        .expect("spool");
        fs::create_dir_all(h.scans_dir()).expect("mkdir");
        fs::create_dir_all(h.results_dir()).expect("mkdir");
        let kept = [
            h.units_dir().join("4.unit"),
            h.scans_dir().join("4.ckpt"),
            h.scans_dir().join("4.records"),
            h.results_dir().join("4.lf"),
            h.units_dir().join("4.deadline"),
            h.data.join("spool").join("days.json"),
        ];
        let swept = [
            // A checkpoint being written when the power went.
            h.scans_dir().join("4.tmp"),
            h.results_dir().join("9.tmp"),
            h.data.join("spool").join("days.tmp"),
            // A unit removed, its checkpoint and result not yet.
            h.scans_dir().join("7.ckpt"),
            h.scans_dir().join("7.records"),
            h.results_dir().join("7.lf"),
            h.results_dir().join("7.summary"),
            h.results_dir().join("7.state"),
            h.units_dir().join("7.deadline"),
        ];
        for p in kept.iter().chain(&swept) {
            if !p.exists() {
                fs::write(p, b"x").expect("write");
            }
        }
        let before = h.spool_bytes();
        assert_eq!(h.sweep_spool(), swept.len());
        for p in &kept {
            assert!(p.exists(), "{} kept", p.display());
        }
        for p in &swept {
            assert!(!p.exists(), "{} swept", p.display());
        }
        assert!(h.spool_bytes() < before);
        assert_eq!(h.sweep_spool(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(CASES))]

        #[test]
        fn arbitrary_spool_files_are_refused_not_fatal(
            unit_bytes in proptest::collection::vec(any::<u8>(), 0..400),
            summary_bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let (_d, h) = home();
            let key = sign::generate_key();
            fs::create_dir_all(h.units_dir()).expect("mkdir");
            fs::write(h.units_dir().join("5.unit"), &unit_bytes).expect("write");
            let (units, refused) = h.spooled_units(&key.verifying_key()).expect("read");
            prop_assert!(units.is_empty());
            prop_assert_eq!(refused.len(), 1);
            prop_assert!(h.units_dir().join("5.bad").exists());
            fs::create_dir_all(h.results_dir()).expect("mkdir");
            fs::write(h.results_dir().join("5.summary"), &summary_bytes).expect("write");
            fs::write(h.results_dir().join("5.lf"), &unit_bytes).expect("write");
            // A damaged summary is an error naming the file, never a panic.
            if let Err(e) = h.result(5) {
                let msg = format!("{e:#}");
                prop_assert!(msg.contains("5.summary"), "{}", msg);
            }
        }
    }
}
