//! A running scan's records log: the link records it found, appended to the
//! spool in frames as the scan checkpoints, so a checkpoint writes only the
//! records found since the previous one and the scan holds only those in
//! memory.
//!
//! A frame is `[u32 LE length][link file]`: a link file of the unit
//! ([`linkfile::encode`]: zstd with its checksum, the record count in its
//! header, every decode bounded). A checkpoint names how far the log is
//! valid, a [`LogMark`] (records and bytes); the log is appended and synced
//! *before* the checkpoint that names the new mark is written, so every
//! checkpoint's log is whole. Bytes past the mark (a frame torn by a kill, or
//! one whose checkpoint never got written) are never read, and the next
//! append writes over them.
//!
//! Limits: at most [`MAX_RECORDS_LOG_BYTES`] of log and
//! [`MAX_LINK_RECORDS`] records; what would go past either is not appended
//! ([`LogFull`]) and is counted as dropped by the caller.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_LINK_RECORDS};
use beebot_shared::linkfile::{self, LinkFileHeader, LinkRecord, LINK_FILE_VERSION};

/// Largest records log: what a scan's whole link file may be, twice over
/// (frames compress less well than one file).
pub const MAX_RECORDS_LOG_BYTES: u64 = 2 * MAX_LINK_FILE_BYTES as u64;

/// Bytes of a frame's length prefix.
const FRAME_PREFIX: u64 = 4;

/// How far a records log is valid: what a checkpoint refers to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMark {
    /// Records in the frames up to `bytes`.
    pub records: u64,
    /// Bytes of whole frames from the start of the log.
    pub bytes: u64,
}

/// The log is at one of its limits: the records given were not appended
/// (the caller counts them as dropped).
#[derive(Debug, thiserror::Error)]
#[error("the records log is full ({0})")]
pub struct LogFull(pub String);

/// A scan's records log, open to append after its mark.
#[derive(Debug)]
pub struct RecordsLog {
    path: PathBuf,
    unit_id: u64,
    site: String,
    file: File,
    mark: LogMark,
    /// A frame was refused for the byte limit: every later one would be.
    full: bool,
    /// The limits: [`MAX_LINK_RECORDS`] and [`MAX_RECORDS_LOG_BYTES`]
    /// (lower in tests).
    max_records: u64,
    max_bytes: u64,
}

impl RecordsLog {
    /// Open (or create) the log at `path` of `unit_id` to append after
    /// `mark`, the one its checkpoint names (the default for a fresh scan).
    /// Bytes past the mark are cut. A log shorter than its mark is an error.
    pub fn open(path: &Path, unit_id: u64, site: &str, mark: LogMark) -> Result<RecordsLog> {
        if let Some(dir) = path.parent() {
            beebot_shared::util::create_private_dir(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // Its length by a seek to its end, not its metadata (on Windows
        // metadata also asks the volume; every write seeks to the mark).
        let len = (&file)
            .seek(SeekFrom::End(0))
            .with_context(|| format!("cannot read {}", path.display()))?;
        if len < mark.bytes {
            bail!(
                "{} holds {len} bytes, its checkpoint names {}",
                path.display(),
                mark.bytes
            );
        }
        if len > mark.bytes {
            file.set_len(mark.bytes)
                .with_context(|| format!("cannot cut {}", path.display()))?;
        }
        Ok(RecordsLog {
            path: path.to_path_buf(),
            unit_id,
            site: site.to_string(),
            file,
            mark,
            full: false,
            max_records: MAX_LINK_RECORDS as u64,
            max_bytes: MAX_RECORDS_LOG_BYTES,
        })
    }

    /// The log with lower limits, to test what happens at them.
    #[cfg(test)]
    pub fn with_limits(mut self, records: u64, bytes: u64) -> RecordsLog {
        self.max_records = records;
        self.max_bytes = bytes;
        self
    }

    /// How far the log is written and synced.
    pub fn mark(&self) -> LogMark {
        self.mark
    }

    /// Records the log may still take ([`MAX_LINK_RECORDS`] in all; none
    /// once a frame was refused for its bytes).
    pub fn room(&self) -> u64 {
        if self.full {
            return 0;
        }
        self.max_records.saturating_sub(self.mark.records)
    }

    /// Append `records` as one frame and sync it; the new mark. Nothing is
    /// appended past [`MAX_RECORDS_LOG_BYTES`] or [`MAX_LINK_RECORDS`], or
    /// when the frame cannot be encoded (the error is then [`LogFull`]); a
    /// failed write leaves the mark where it was.
    pub fn append(&mut self, records: &[LinkRecord]) -> Result<LogMark> {
        if records.is_empty() {
            return Ok(self.mark);
        }
        if records.len() as u64 > self.room() {
            return Err(LogFull(if self.full {
                format!("{} bytes", self.max_bytes)
            } else {
                format!("{} records", self.max_records)
            })
            .into());
        }
        let header = LinkFileHeader {
            format_version: LINK_FILE_VERSION,
            round_id: 0,
            unit_id: self.unit_id,
            site: self.site.clone(),
            pages: 0,
            records: records.len() as u64,
        };
        let frame = match linkfile::encode(&header, records) {
            Ok(f) => f,
            // A frame past a link file's own limits: never appendable.
            Err(e) => {
                return Err(LogFull(format!("a frame of {} records: {e}", records.len())).into())
            }
        };
        let len = frame.len() as u64;
        let end = self.mark.bytes + FRAME_PREFIX + len;
        if end > self.max_bytes {
            self.full = true;
            return Err(LogFull(format!("{} bytes", self.max_bytes)).into());
        }
        let mut bytes = Vec::with_capacity(frame.len() + FRAME_PREFIX as usize);
        bytes.extend_from_slice(&(len as u32).to_le_bytes());
        bytes.extend_from_slice(&frame);
        let written = (|| -> std::io::Result<()> {
            self.file.seek(SeekFrom::Start(self.mark.bytes))?;
            self.file.write_all(&bytes)?;
            self.file.sync_data()
        })();
        written.with_context(|| format!("cannot append to {}", self.path.display()))?;
        self.mark = LogMark {
            records: self.mark.records + records.len() as u64,
            bytes: end,
        };
        Ok(self.mark)
    }

    /// Every record up to the mark, in the order appended.
    pub fn read_all(&self) -> Result<Vec<LinkRecord>> {
        read(&self.path, self.unit_id, self.mark)
    }
}

/// The records of the log at `path` of `unit_id`, up to `mark`: every frame
/// whole, of the unit, and as many records as the mark says, or an error
/// naming the file.
pub fn read(path: &Path, unit_id: u64, mark: LogMark) -> Result<Vec<LinkRecord>> {
    read_between(path, unit_id, LogMark::default(), mark)
}

/// The records of the log at `path` of `unit_id` from mark `from` (a
/// frame's start: an earlier checkpoint's mark) up to `mark`, as [`read`]
/// checks them.
pub fn read_between(
    path: &Path,
    unit_id: u64,
    from: LogMark,
    mark: LogMark,
) -> Result<Vec<LinkRecord>> {
    let damaged = |why: String| anyhow::anyhow!("{} is damaged: {why}", path.display());
    if from.bytes > mark.bytes || from.records > mark.records {
        return Err(damaged(format!("{from:?} is past {mark:?}")));
    }
    if mark.bytes > MAX_RECORDS_LOG_BYTES || mark.records > MAX_LINK_RECORDS as u64 {
        return Err(damaged(format!(
            "its checkpoint names {mark:?}, past the limits"
        )));
    }
    if mark.bytes == from.bytes {
        return if mark.records == from.records {
            Ok(Vec::new())
        } else {
            Err(damaged(format!(
                "{} records in no bytes",
                mark.records - from.records
            )))
        };
    }
    let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    file.seek(SeekFrom::Start(from.bytes))
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut records = Vec::new();
    let mut at = from.bytes;
    let want = mark.records - from.records;
    while at < mark.bytes {
        if mark.bytes - at < FRAME_PREFIX {
            return Err(damaged(format!("a frame prefix cut at byte {at}")));
        }
        let mut prefix = [0u8; FRAME_PREFIX as usize];
        file.read_exact(&mut prefix)
            .map_err(|e| damaged(format!("at byte {at}: {e}")))?;
        let len = u64::from(u32::from_le_bytes(prefix));
        if len > MAX_LINK_FILE_BYTES as u64 || at + FRAME_PREFIX + len > mark.bytes {
            return Err(damaged(format!("a frame of {len} bytes at byte {at}")));
        }
        let mut frame = vec![0u8; len as usize];
        file.read_exact(&mut frame)
            .map_err(|e| damaged(format!("at byte {at}: {e}")))?;
        let (header, more) =
            linkfile::decode(&frame).map_err(|e| damaged(format!("at byte {at}: {e}")))?;
        if header.unit_id != unit_id {
            return Err(damaged(format!("a frame of unit {}", header.unit_id)));
        }
        if records.len() as u64 + more.len() as u64 > want {
            return Err(damaged(format!("more records than the {want} named")));
        }
        records.extend(more);
        at += FRAME_PREFIX + len;
    }
    if records.len() as u64 != want {
        return Err(damaged(format!(
            "{} records, its checkpoint names {want}",
            records.len()
        )));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::extract::LinkTag;

    fn rec(i: u32) -> LinkRecord {
        LinkRecord {
            source_url: format!("http://a.test/{i}"),
            target_url: format!("http://b{}.test/", i % 7),
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: String::new(),
        }
    }

    fn recs(r: std::ops::Range<u32>) -> Vec<LinkRecord> {
        r.map(rec).collect()
    }

    #[test]
    fn frames_append_and_read_back_up_to_the_mark() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("scans").join("5.records");
        let mut log = RecordsLog::open(&path, 5, "a.test", LogMark::default()).expect("open");
        assert!(log.read_all().expect("empty").is_empty());
        let first = log.append(&recs(0..3)).expect("append");
        assert_eq!(first.records, 3);
        assert_eq!(log.append(&[]).expect("nothing"), first);
        let second = log.append(&recs(3..10)).expect("append");
        assert_eq!(second.records, 10);
        assert_eq!(second.bytes, std::fs::metadata(&path).expect("len").len());
        assert_eq!(log.read_all().expect("read"), recs(0..10));
        // Read as an older checkpoint names it: its records only.
        assert_eq!(read(&path, 5, first).expect("first"), recs(0..3));
        // Another unit's log, or a mark the log does not hold, is refused.
        assert!(read(&path, 6, second).is_err());
        let more = LogMark {
            records: 11,
            ..second
        };
        assert!(read(&path, 5, more).is_err());
        let past = LogMark {
            bytes: second.bytes + 1,
            ..second
        };
        assert!(read(&path, 5, past).is_err());
        assert!(RecordsLog::open(&path, 5, "a.test", past).is_err());
        // A mark inside a frame is refused, not read short.
        let inside = LogMark {
            records: 3,
            bytes: first.bytes + 2,
        };
        assert!(read(&path, 5, inside).is_err());
        // From one checkpoint's mark to a later one's: a part's records.
        assert_eq!(
            read_between(&path, 5, first, second).expect("part"),
            recs(3..10)
        );
        assert!(read_between(&path, 5, second, second)
            .expect("none")
            .is_empty());
        assert!(read_between(&path, 5, second, first).is_err());
        // A start inside a frame is refused, not read as garbage.
        assert!(read_between(&path, 5, inside, second).is_err());
    }

    #[test]
    fn a_torn_frame_past_the_mark_is_cut_and_written_over() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("9.records");
        let mut log = RecordsLog::open(&path, 9, "a.test", LogMark::default()).expect("open");
        let mark = log.append(&recs(0..4)).expect("append");
        // A later frame, half written when the power went (no checkpoint
        // names it).
        log.append(&recs(4..8)).expect("append");
        let len = std::fs::metadata(&path).expect("len").len();
        let f = OpenOptions::new().write(true).open(&path).expect("open");
        f.set_len(len - 5).expect("tear");
        drop(f);
        drop(log);
        let mut log = RecordsLog::open(&path, 9, "a.test", mark).expect("reopen at the mark");
        assert_eq!(std::fs::metadata(&path).expect("len").len(), mark.bytes);
        assert_eq!(log.read_all().expect("read"), recs(0..4));
        let end = log.append(&recs(8..9)).expect("append");
        assert_eq!(end.records, 5);
        let mut want = recs(0..4);
        want.extend(recs(8..9));
        assert_eq!(read(&path, 9, end).expect("read"), want);
        // A flipped byte inside a frame is found by its checksum.
        let mut bytes = std::fs::read(&path).expect("read");
        let at = (mark.bytes + 10) as usize;
        bytes[at] ^= 0x5a;
        std::fs::write(&path, &bytes).expect("write");
        assert!(read(&path, 9, end).is_err());
    }
}
