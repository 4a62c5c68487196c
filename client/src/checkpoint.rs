//! Checkpoints of running scans: where a scan stands (its [`ScanState`]), the
//! records it found and its summary counters so far, kept in the spool so a
//! client killed, rebooted or put to sleep resumes the scan instead of
//! starting over. Also the arithmetic of a scan in parts: the records of
//! the parts joined without duplicates, their summaries added up.
//!
//! A running scan shares a [`CheckpointSlot`] with the work loop: its thread
//! puts a snapshot there at page boundaries (at most every
//! [`SNAPSHOT_EVERY`]; a snapshot moves the crawl's new records into the
//! slot, which holds the scan's only copy) and writes it to the spool every
//! [`CHECKPOINT_INTERVAL`] and whenever the gate holds it; the work loop,
//! stopping, writes the newest snapshot of a scan whose thread is stuck in a
//! request, so a stop never waits for a request to time out.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use beebot_shared::codec;
use beebot_shared::export::target_host;
use beebot_shared::limits::{MAX_LINK_FILE_BYTES, MAX_LINK_RECORDS, MAX_SCAN_STATE_BYTES};
use beebot_shared::linkfile::{
    self, LinkFileHeader, LinkRecord, ScanSummary, StopReason, LINK_FILE_VERSION,
};
use beebot_shared::scanstate::ScanState;

use crate::crawler::Snapshot;

/// Longest a running scan goes without a checkpoint in the spool: what a
/// kill or a power cut may cost (the issue asks for at least every 30 s).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(30);

/// Longest a scan's in-memory snapshot lags its page boundaries: taking one
/// copies the queue and seen set, so not after every page of a fast scan;
/// at a politeness delay of 1 s or more every page boundary is kept.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

/// Largest checkpoint file: a state and a link file at their limits, plus
/// the summary.
pub const MAX_CHECKPOINT_BYTES: usize = MAX_SCAN_STATE_BYTES + MAX_LINK_FILE_BYTES + 64 * 1024;

/// A scan's checkpoint, as the spool keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Where the scan stands.
    pub state: ScanState,
    /// Every record found so far, all parts of the unit's scan together.
    pub records: Vec<LinkRecord>,
    /// The summary so far, all parts added up.
    pub summary: ScanSummary,
}

/// Failures reading or writing a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint: {0}")]
    Codec(#[from] codec::CodecError),
    #[error("checkpoint state: {0}")]
    State(#[from] beebot_shared::scanstate::ScanStateError),
    #[error("checkpoint records: {0}")]
    Records(#[from] linkfile::LinkFileError),
    #[error("checkpoint is of unit {got}, not {want}")]
    OtherUnit { got: u64, want: u64 },
}

/// The file form: each part in its own bounded, checksummed encoding.
#[derive(Serialize, Deserialize)]
struct CheckpointFile {
    unit_id: u64,
    state: Vec<u8>,
    link_file: Vec<u8>,
    summary: ScanSummary,
}

impl Checkpoint {
    /// Encode for the spool (the records as a link file of `unit_id`).
    pub fn encode(&self, unit_id: u64) -> Result<Vec<u8>, CheckpointError> {
        let header = LinkFileHeader {
            format_version: LINK_FILE_VERSION,
            round_id: 0,
            unit_id,
            site: self.state.site.clone(),
            pages: self.summary.pages,
            records: self.records.len() as u64,
        };
        // Fitted to its limits: a checkpoint is never lost for its size.
        let mut state = self.state.clone();
        let (state, cut) = crate::crawler::encode_state(&mut state)?;
        let mut summary = self.summary.clone();
        summary.frontier_dropped += cut;
        let file = CheckpointFile {
            unit_id,
            state,
            link_file: linkfile::encode(&header, &self.records)?,
            summary,
        };
        Ok(codec::encode(&file, MAX_CHECKPOINT_BYTES)?)
    }

    /// Decode a spooled checkpoint of `unit_id`, every part bounded.
    pub fn decode(bytes: &[u8], unit_id: u64) -> Result<Checkpoint, CheckpointError> {
        let file: CheckpointFile = codec::decode(bytes, MAX_CHECKPOINT_BYTES)?;
        if file.unit_id != unit_id {
            return Err(CheckpointError::OtherUnit {
                got: file.unit_id,
                want: unit_id,
            });
        }
        let (_, records) = linkfile::decode(&file.link_file)?;
        Ok(Checkpoint {
            state: ScanState::decode(&file.state)?,
            records,
            summary: file.summary,
        })
    }
}

/// Join the records of a scan's parts, in order, without a duplicate
/// (source, target) pair, at most [`MAX_LINK_RECORDS`] (the rest counted in
/// `dropped`).
pub fn join_records(parts: &mut Vec<LinkRecord>, more: Vec<LinkRecord>, dropped: &mut u64) {
    let mut pairs: HashSet<(String, String)> = parts
        .iter()
        .map(|r| (r.source_url.clone(), r.target_url.clone()))
        .collect();
    for r in more {
        if !pairs.insert((r.source_url.clone(), r.target_url.clone())) {
            continue;
        }
        if parts.len() >= MAX_LINK_RECORDS {
            *dropped += 1;
            continue;
        }
        parts.push(r);
    }
}

/// The summary of two consecutive parts of one scan: counters added up, the
/// stop of the later part, the links and target hosts of `records` (the
/// joined records).
pub fn add_summaries(
    earlier: &ScanSummary,
    later: &ScanSummary,
    records: &[LinkRecord],
) -> ScanSummary {
    let mut status: BTreeMap<u16, u64> = BTreeMap::new();
    for (code, n) in earlier.status_counts.iter().chain(&later.status_counts) {
        *status.entry(*code).or_insert(0) += n;
    }
    let hosts: HashSet<String> = records.iter().map(|r| target_host(&r.target_url)).collect();
    ScanSummary {
        pages: earlier.pages + later.pages,
        bytes: earlier.bytes + later.bytes,
        links: records.len() as u64,
        distinct_target_hosts: hosts.len() as u64,
        errors: earlier.errors + later.errors,
        elapsed_ms: earlier.elapsed_ms.saturating_add(later.elapsed_ms),
        stopped_by: later.stopped_by,
        status_counts: status.into_iter().collect(),
        robots_disallowed: earlier.robots_disallowed + later.robots_disallowed,
        timeouts: earlier.timeouts + later.timeouts,
        refused_addresses: earlier.refused_addresses + later.refused_addresses,
        truncated_pages: earlier.truncated_pages + later.truncated_pages,
        non_html: earlier.non_html + later.non_html,
        redirect_errors: earlier.redirect_errors + later.redirect_errors,
        trap_urls: earlier.trap_urls + later.trap_urls,
        long_urls: earlier.long_urls + later.long_urls,
        beyond_depth: earlier.beyond_depth + later.beyond_depth,
        link_capped_pages: earlier.link_capped_pages + later.link_capped_pages,
        frontier_dropped: earlier.frontier_dropped + later.frontier_dropped,
        records_dropped: earlier.records_dropped + later.records_dropped,
        robots_truncated: earlier.robots_truncated + later.robots_truncated,
    }
}

/// One running scan's checkpoints, shared by its thread and the work loop.
#[derive(Debug)]
pub struct CheckpointSlot {
    inner: Mutex<SlotInner>,
}

#[derive(Debug)]
struct SlotInner {
    /// Records of the earlier parts, then of this part up to the newest snapshot.
    records: Vec<LinkRecord>,
    /// Summary of the earlier parts.
    earlier: ScanSummary,
    /// The newest snapshot's state and summary (this part only).
    latest: Option<(ScanState, ScanSummary)>,
    taken_at: Option<Instant>,
    /// Whether `latest` is in the spool.
    written: bool,
    written_at: Instant,
    /// The scan's own end was written (final checkpoint or result): the
    /// work loop writes nothing more.
    closed: bool,
}

impl CheckpointSlot {
    /// A slot for a scan that resumes `earlier` (none: a fresh scan).
    pub fn new(earlier: Option<&Checkpoint>) -> CheckpointSlot {
        let (records, summary) = earlier
            .map(|c| (c.records.clone(), c.summary.clone()))
            .unwrap_or_default();
        CheckpointSlot {
            inner: Mutex::new(SlotInner {
                records,
                earlier: summary,
                latest: None,
                taken_at: None,
                written: true,
                written_at: Instant::now(),
                closed: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the scan closed the slot (it is writing, or wrote, its end).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Whether a snapshot is due at this page boundary.
    pub fn snapshot_due(&self) -> bool {
        self.lock()
            .taken_at
            .is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY)
    }

    /// Whether the spool's checkpoint is older than [`CHECKPOINT_INTERVAL`].
    pub fn write_due(&self) -> bool {
        let s = self.lock();
        !s.written && s.written_at.elapsed() >= CHECKPOINT_INTERVAL
    }

    /// Keep `snap` as the newest. Its records are those found since the
    /// previous snapshot, and new (a part requests each page once, and
    /// never one an earlier part's checkpoint had), so they are appended as
    /// they are: the cost is theirs alone; [`CheckpointSlot::close`] joins
    /// the parts without duplicates all the same.
    pub fn keep(&self, snap: Snapshot) {
        let mut s = self.lock();
        s.records.extend(snap.new_records);
        s.latest = Some((snap.state, snap.summary));
        s.taken_at = Some(Instant::now());
        s.written = false;
    }

    /// Write the newest snapshot with `write` (unless written, or the scan
    /// closed the slot). Errors are the caller's to report.
    pub fn write_latest(
        &self,
        write: &dyn Fn(&Checkpoint) -> anyhow::Result<()>,
    ) -> anyhow::Result<bool> {
        let mut s = self.lock();
        if s.written || s.closed {
            return Ok(false);
        }
        let Some((state, summary)) = s.latest.clone() else {
            return Ok(false);
        };
        let c = Checkpoint {
            summary: add_summaries(&s.earlier, &summary, &s.records),
            records: s.records.clone(),
            state,
        };
        write(&c)?;
        s.written = true;
        s.written_at = Instant::now();
        Ok(true)
    }

    /// The scan ended: the whole unit's records and summary, from this
    /// part's final output (`records`: those its last snapshot did not
    /// take). Closes the slot: the work loop writes no older snapshot over
    /// what the scan writes now.
    pub fn close(&self, records: Vec<LinkRecord>, summary: &ScanSummary) -> Checkpoint {
        let mut s = self.lock();
        s.closed = true;
        let kept = std::mem::take(&mut s.records);
        let mut all = Vec::with_capacity(kept.len() + records.len());
        let mut dropped = 0;
        join_records(&mut all, kept, &mut dropped);
        join_records(&mut all, records, &mut dropped);
        let mut summary = add_summaries(&s.earlier, summary, &all);
        summary.records_dropped += dropped;
        if summary.stopped_by.is_none() && summary.frontier_dropped > 0 {
            // An earlier part's frontier dropped URLs: the whole unit's scan
            // did not reach every page, though this part's queue ran out.
            summary.stopped_by = Some(StopReason::FrontierFull);
        }
        Checkpoint {
            state: ScanState::default(),
            records: all,
            summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::extract::LinkTag;
    use beebot_shared::scanstate::{url_digest, QueuedUrl, RobotsAnswer};

    fn rec(source: &str, target: &str) -> LinkRecord {
        LinkRecord {
            source_url: source.into(),
            target_url: target.into(),
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: String::new(),
        }
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            state: ScanState {
                site: "a.test".into(),
                pages_done: 3,
                queue: vec![QueuedUrl {
                    url: "http://a.test/4".into(),
                    depth: 2,
                }],
                seen: vec![url_digest("http://a.test/"), url_digest("http://a.test/4")],
                robots: vec![RobotsAnswer {
                    origin: "http://a.test".into(),
                    status: 404,
                    body: Vec::new(),
                }],
            },
            records: vec![rec("http://a.test/", "http://b.test/")],
            summary: ScanSummary {
                pages: 3,
                links: 1,
                status_counts: vec![(200, 3)],
                ..ScanSummary::default()
            },
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let c = checkpoint();
        let bytes = c.encode(7).expect("encode");
        assert_eq!(Checkpoint::decode(&bytes, 7).expect("decode"), c);
        assert!(matches!(
            Checkpoint::decode(&bytes, 8),
            Err(CheckpointError::OtherUnit { .. })
        ));
        let mut bad = bytes.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x5a;
        assert!(Checkpoint::decode(&bad, 7).is_err());
        assert!(Checkpoint::decode(&bytes[..bytes.len() / 2], 7).is_err());
    }

    #[test]
    fn parts_add_up_without_duplicates() {
        let mut all = vec![rec("http://a.test/", "http://b.test/")];
        let mut dropped = 0;
        join_records(
            &mut all,
            vec![
                rec("http://a.test/", "http://b.test/"),
                rec("http://a.test/2", "http://c.test/x"),
            ],
            &mut dropped,
        );
        assert_eq!(all.len(), 2);
        let earlier = ScanSummary {
            pages: 3,
            errors: 1,
            elapsed_ms: 1000,
            status_counts: vec![(200, 3)],
            stopped_by: Some(StopReason::Cancelled),
            ..ScanSummary::default()
        };
        let later = ScanSummary {
            pages: 2,
            elapsed_ms: 500,
            status_counts: vec![(200, 1), (404, 1)],
            ..ScanSummary::default()
        };
        let s = add_summaries(&earlier, &later, &all);
        assert_eq!(s.pages, 5);
        assert_eq!(s.errors, 1);
        assert_eq!(s.elapsed_ms, 1500);
        assert_eq!(s.links, 2);
        assert_eq!(s.distinct_target_hosts, 2);
        assert_eq!(s.stopped_by, None);
        assert_eq!(s.status_counts, vec![(200, 4), (404, 1)]);
    }

    #[test]
    fn a_slot_writes_its_newest_snapshot_once_and_never_after_close() {
        let earlier = checkpoint();
        let slot = CheckpointSlot::new(Some(&earlier));
        let written = std::cell::RefCell::new(Vec::new());
        let write = |c: &Checkpoint| {
            written.borrow_mut().push(c.clone());
            Ok(())
        };
        assert!(!slot.write_latest(&write).expect("nothing yet"));
        slot.keep(Snapshot {
            state: ScanState {
                pages_done: 4,
                ..earlier.state.clone()
            },
            new_records: vec![rec("http://a.test/4", "http://d.test/")],
            summary: ScanSummary {
                pages: 1,
                status_counts: vec![(200, 1)],
                ..ScanSummary::default()
            },
        });
        assert!(slot.write_latest(&write).expect("written"));
        assert!(!slot.write_latest(&write).expect("once"));
        let w = written.borrow()[0].clone();
        assert_eq!(w.records.len(), 2);
        assert_eq!(w.summary.pages, 4);
        assert_eq!(w.state.pages_done, 4);
        // The part's output holds what its last snapshot did not take (a
        // record given twice is still kept once).
        let end = slot.close(
            vec![
                rec("http://a.test/4", "http://d.test/"),
                rec("http://a.test/5", "http://e.test/"),
            ],
            &ScanSummary {
                pages: 2,
                ..ScanSummary::default()
            },
        );
        assert_eq!(end.records.len(), 3);
        assert_eq!(end.summary.pages, 5);
        slot.keep(Snapshot {
            state: earlier.state.clone(),
            new_records: Vec::new(),
            summary: ScanSummary::default(),
        });
        assert!(!slot.write_latest(&write).expect("closed"));
    }

    #[test]
    fn urls_an_earlier_part_dropped_make_the_unit_end_frontier_full() {
        // The first part's frontier was full (its state could not keep
        // every URL); the resumed part's queue runs out: the unit did not
        // reach its natural end.
        let mut earlier = checkpoint();
        earlier.summary.frontier_dropped = 7;
        let slot = CheckpointSlot::new(Some(&earlier));
        let end = slot.close(
            Vec::new(),
            &ScanSummary {
                pages: 2,
                stopped_by: None,
                ..ScanSummary::default()
            },
        );
        assert_eq!(end.summary.frontier_dropped, 7);
        assert_eq!(end.summary.stopped_by, Some(StopReason::FrontierFull));
        // A later part's own stop stands; nothing dropped, a natural end.
        let slot = CheckpointSlot::new(Some(&earlier));
        let end = slot.close(
            Vec::new(),
            &ScanSummary {
                stopped_by: Some(StopReason::MaxPages),
                frontier_dropped: 1,
                ..ScanSummary::default()
            },
        );
        assert_eq!(end.summary.frontier_dropped, 8);
        assert_eq!(end.summary.stopped_by, Some(StopReason::MaxPages));
        let slot = CheckpointSlot::new(Some(&checkpoint()));
        let end = slot.close(Vec::new(), &ScanSummary::default());
        assert_eq!(end.summary.stopped_by, None);
    }
}
