//! The client's home: its host key, its enrolment, and the spool of units and
//! results that lets a restarted client resume.
//!
//! ```text
//! CONFIG/host.key          ed25519 host key, hex (0600)
//! CONFIG/enrolment.json    server address, pinned certificate, project key, host id
//! DATA/spool/units/N.unit  signed work units as received (verified again on load)
//! DATA/spool/results/N.lf  finished link files waiting for upload, N.summary beside
//! ```
//! With `--home DIR` (or `BEEBOT_HOME`) both CONFIG and DATA are DIR.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use beebot_shared::codec;
use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_UNIT_BYTES};
use beebot_shared::linkfile::ScanSummary;
use beebot_shared::sign::{self, SignedUnit, WorkUnit};

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
    pub fn project_verifying_key(&self) -> Result<VerifyingKey> {
        let b = hex32(&self.project_key).context("enrolment.json: bad project key")?;
        VerifyingKey::from_bytes(&b).context("enrolment.json: bad project key")
    }
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    hex::decode(s).ok()?.try_into().ok()
}

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

/// Write a file durably: temporary name, fsync, rename.
pub fn write_atomic(path: &Path, data: &[u8], private: bool) -> Result<()> {
    let dir = path.parent().context("path without parent")?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = path.with_extension("tmp");
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = private;
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(data)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
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
        Ok(Home {
            config: dirs.config_dir().to_path_buf(),
            data: dirs.data_dir().to_path_buf(),
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

    /// The host key, made (mode 0600) when there is none.
    pub fn host_key(&self, create: bool) -> Result<SigningKey> {
        let path = self.key_path();
        match fs::read_to_string(&path) {
            Ok(text) => {
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
        match fs::read_to_string(self.enrolment_path()) {
            Ok(text) => Ok(Some(serde_json::from_str(&text).with_context(|| {
                format!("{} is damaged", self.enrolment_path().display())
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).context("cannot read the enrolment"),
        }
    }

    /// The enrolment, or a clear error telling the user to join.
    pub fn require_enrolment(&self) -> Result<Enrolment> {
        self.enrolment()?.with_context(|| {
            format!(
                "this client has not joined a project (no {}): run `beebot join CODE`",
                self.enrolment_path().display()
            )
        })
    }

    pub fn save_enrolment(&self, e: &Enrolment) -> Result<()> {
        write_atomic(
            &self.enrolment_path(),
            serde_json::to_string_pretty(e)?.as_bytes(),
            true,
        )
    }

    // ---- spool ----

    pub fn spool_unit(&self, s: &SpooledUnit) -> Result<()> {
        let bytes = codec::encode(&s.signed, MAX_UNIT_BYTES * 2)?;
        write_atomic(
            &self.units_dir().join(format!("{}.unit", s.unit.unit_id)),
            &bytes,
            false,
        )
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
        let _ = fs::remove_file(self.results_dir().join(format!("{unit_id}.lf")));
        let _ = fs::remove_file(self.results_dir().join(format!("{unit_id}.summary")));
    }

    /// Keep a finished result until the server acknowledges it. The summary is
    /// written last: a result counts as present only when both files are.
    pub fn save_result(&self, unit_id: u64, link_file: &[u8], summary: &ScanSummary) -> Result<()> {
        let dir = self.results_dir();
        write_atomic(&dir.join(format!("{unit_id}.lf")), link_file, false)?;
        write_atomic(
            &dir.join(format!("{unit_id}.summary")),
            serde_json::to_string(summary)?.as_bytes(),
            false,
        )
    }

    /// A finished result of a unit, if one is spooled.
    pub fn result(&self, unit_id: u64) -> Result<Option<(Vec<u8>, ScanSummary)>> {
        let dir = self.results_dir();
        let spath = dir.join(format!("{unit_id}.summary"));
        let summary = match fs::read_to_string(&spath) {
            Ok(t) => serde_json::from_str(&t)
                .with_context(|| format!("{} is damaged", spath.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", spath.display())),
        };
        let lpath = dir.join(format!("{unit_id}.lf"));
        let meta =
            fs::metadata(&lpath).with_context(|| format!("cannot read {}", lpath.display()))?;
        if meta.len() > MAX_LINK_FILE_BYTES as u64 {
            bail!("{} is larger than a link file may be", lpath.display());
        }
        let bytes = fs::read(&lpath).with_context(|| format!("cannot read {}", lpath.display()))?;
        Ok(Some((bytes, summary)))
    }

    /// Forget the project: keys, enrolment and spool.
    pub fn wipe(&self) -> Result<()> {
        for p in [self.key_path(), self.enrolment_path()] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot remove {}", p.display())),
            }
        }
        let spool = self.data.join("spool");
        if spool.exists() {
            fs::remove_dir_all(&spool)
                .with_context(|| format!("cannot remove {}", spool.display()))?;
        }
        Ok(())
    }
}
