//! The spool: units as received, their deadlines, finished results,
//! parts of running scans, and running scans' checkpoints, so a restarted
//! client resumes. Every file is written durably and read back up to its
//! limit.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ed25519_dalek::VerifyingKey;
use serde::{Deserialize, Serialize};

use beebot_shared::codec;
use beebot_shared::durable::read_at_most;
use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_SCAN_STATE_BYTES, MAX_UNIT_BYTES};
use beebot_shared::linkfile::ScanSummary;
use beebot_shared::sign::{self, SignedUnit, WorkUnit};

use crate::checkpoint::{Checkpoint, CheckpointHead, MAX_CHECKPOINT_BYTES};
use crate::recordlog::{self, LogMark, RecordsLog};

use super::files::{read_spooled, write_atomic};

/// Most units kept in the spool: more than any buffer the client asks for.
pub const MAX_SPOOLED_UNITS: usize = 1024;

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
pub(super) const MAX_PARTS_SENT_BYTES: usize = 64 * 1024;

/// Largest spooled summary of a result (a few counts: a few hundred bytes).
pub(super) const MAX_SUMMARY_FILE_BYTES: usize = 64 * 1024;

/// Largest spooled part: a link file and a state at their limits.
const MAX_PART_FILE_BYTES: usize = MAX_LINK_FILE_BYTES + MAX_SCAN_STATE_BYTES + 64 * 1024;

/// A unit read back from the spool, verified.
#[derive(Clone, Debug)]
pub struct SpooledUnit {
    pub signed: SignedUnit,
    pub unit: WorkUnit,
}

/// The spool's directory (`DATA/spool`).
#[derive(Clone, Debug)]
pub struct Spool {
    pub(super) dir: PathBuf,
}

impl Spool {
    pub(super) fn units_dir(&self) -> PathBuf {
        self.dir.join("units")
    }
    pub(super) fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }
    pub(super) fn scans_dir(&self) -> PathBuf {
        self.dir.join("scans")
    }
    pub(super) fn checkpoint_path(&self, unit_id: u64) -> PathBuf {
        self.scans_dir().join(format!("{unit_id}.ckpt"))
    }
    pub(super) fn records_log_path(&self, unit_id: u64) -> PathBuf {
        self.scans_dir().join(format!("{unit_id}.records"))
    }

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

    pub(super) fn part_path(&self, unit_id: u64) -> PathBuf {
        self.results_dir().join(format!("{unit_id}.part"))
    }
    pub(super) fn parts_sent_path(&self, unit_id: u64) -> PathBuf {
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
    /// [`Spool::remove_unit`]). Call at startup, before any scan runs.
    /// Returns the files removed.
    pub fn sweep_spool(&self) -> usize {
        let spool = self.dir.clone();
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
}
