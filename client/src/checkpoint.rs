//! Checkpoints of running scans: where a scan stands (its [`ScanState`]), the
//! records it found and its summary counters so far, kept in the spool so a
//! client killed, rebooted or put to sleep resumes the scan instead of
//! starting over. Also the arithmetic of a scan in parts: the records of
//! the parts joined without duplicates, their summaries added up.
//!
//! A checkpoint is two files: its head (`N.ckpt`: state, summary and the
//! [`LogMark`] of its records) and the unit's records log (`N.records`,
//! [`crate::recordlog`]), which a checkpoint only appends to: a checkpoint
//! writes the records found since the previous one, never all of them again,
//! and a running scan holds only those in memory.
//!
//! A running scan shares a [`CheckpointSlot`] with the work loop: its thread
//! puts a snapshot there at page boundaries (at most every
//! [`SNAPSHOT_EVERY`]; a snapshot moves the crawl's new records into the
//! slot) and writes it to the spool every [`CHECKPOINT_INTERVAL`] and
//! whenever the gate holds it; the work loop, stopping, writes the newest
//! snapshot of a scan whose thread is stuck in a request, so a stop never
//! waits for a request to time out.
//!
//! A checkpoint is written every `CHECKPOINT_EVERY_PAGES` (50) pages or
//! `CHECKPOINT_INTERVAL` (30 s), whichever comes first; a head is written only
//! after the log it names is synced.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use beebot_shared::codec;
use beebot_shared::export::target_host;
use beebot_shared::limits::{MAX_LINK_RECORDS, MAX_SCAN_STATE_BYTES};
use beebot_shared::linkfile::{self, LinkRecord, ScanSummary, StopReason};
use beebot_shared::scanstate::ScanState;

use crate::crawler::Snapshot;
use crate::recordlog::{LogFull, LogMark, RecordsLog};

/// Longest a running scan goes without a checkpoint in the spool: what a
/// kill or a power cut may cost in time.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(30);

/// Most pages a running scan goes without a checkpoint in the spool: at a
/// short delay 30 s are hundreds of pages, which a kill would have the
/// scan request again (whichever of the two comes first writes one).
pub const CHECKPOINT_EVERY_PAGES: u64 = 50;

/// Longest a scan's in-memory snapshot lags its page boundaries: taking one
/// copies the queue and seen set, so not after every page. What it costs is
/// what a stop while a request hangs loses: the pages since the snapshot,
/// requested again when the scan resumes.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(5);

/// Largest checkpoint head: a state at its limit, plus the summary.
pub const MAX_CHECKPOINT_BYTES: usize = MAX_SCAN_STATE_BYTES + 64 * 1024;

/// A scan's checkpoint, read whole from the spool.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Where the scan stands.
    pub state: ScanState,
    /// Every record found so far, all parts of the unit's scan together.
    pub records: Vec<LinkRecord>,
    /// The summary so far, all parts added up.
    pub summary: ScanSummary,
}

/// Failures reading or writing a checkpoint head.
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

/// A checkpoint's head: where the scan stands, its summary, and how far its
/// records log holds its records.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointHead {
    pub state: ScanState,
    pub summary: ScanSummary,
    pub log: LogMark,
}

/// Writes a checkpoint head to the spool (after its records log is synced).
pub type WriteHead<'a> = &'a dyn Fn(&CheckpointHead) -> anyhow::Result<()>;

/// The head's file form: the state in its own bounded, checksummed encoding.
#[derive(Serialize, Deserialize)]
struct HeadFile {
    unit_id: u64,
    state: Vec<u8>,
    summary: ScanSummary,
    log: LogMark,
}

impl CheckpointHead {
    /// Encode for the spool.
    pub fn encode(&self, unit_id: u64) -> Result<Vec<u8>, CheckpointError> {
        // Fitted to its limits: a checkpoint is never lost for its size.
        let mut state = self.state.clone();
        let (state, cut) = crate::crawler::encode_state(&mut state)?;
        let mut summary = self.summary.clone();
        summary.frontier_dropped += cut;
        let file = HeadFile {
            unit_id,
            state,
            summary,
            log: self.log,
        };
        Ok(codec::encode(&file, MAX_CHECKPOINT_BYTES)?)
    }

    /// Decode a spooled head of `unit_id`, every part bounded.
    pub fn decode(bytes: &[u8], unit_id: u64) -> Result<CheckpointHead, CheckpointError> {
        let file: HeadFile = codec::decode(bytes, MAX_CHECKPOINT_BYTES)?;
        if file.unit_id != unit_id {
            return Err(CheckpointError::OtherUnit {
                got: file.unit_id,
                want: unit_id,
            });
        }
        Ok(CheckpointHead {
            state: ScanState::decode(&file.state)?,
            summary: file.summary,
            log: file.log,
        })
    }
}

/// Join the records of a scan's parts, in order, without a duplicate
/// (source, target) pair, at most [`MAX_LINK_RECORDS`] (the rest counted in
/// `dropped`). The pairs are compared in place, not copied.
pub fn join_records(
    parts: impl IntoIterator<Item = Vec<LinkRecord>>,
    dropped: &mut u64,
) -> Vec<LinkRecord> {
    let mut all: Vec<LinkRecord> = parts.into_iter().flatten().collect();
    let first: Vec<bool> = {
        let mut pairs: HashSet<(&str, &str)> = HashSet::with_capacity(all.len());
        all.iter()
            .map(|r| pairs.insert((r.source_url.as_str(), r.target_url.as_str())))
            .collect()
    };
    let mut first = first.into_iter();
    all.retain(|_| first.next().unwrap_or(false));
    if all.len() > MAX_LINK_RECORDS {
        *dropped += (all.len() - MAX_LINK_RECORDS) as u64;
        all.truncate(MAX_LINK_RECORDS);
    }
    all
}

/// The summary of two consecutive parts of one scan: counters added up, the
/// stop of the later part, `links` records to `hosts` distinct target hosts
/// (those of the joined records).
pub fn add_summaries(
    earlier: &ScanSummary,
    later: &ScanSummary,
    links: u64,
    hosts: u64,
) -> ScanSummary {
    let mut status: BTreeMap<u16, u64> = BTreeMap::new();
    for (code, n) in earlier.status_counts.iter().chain(&later.status_counts) {
        *status.entry(*code).or_insert(0) += n;
    }
    ScanSummary {
        pages: earlier.pages + later.pages,
        bytes: earlier.bytes + later.bytes,
        links,
        distinct_target_hosts: hosts,
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

/// The summary of a scan's part from `earlier` (its summary when its
/// previous part was taken) to `total` (its summary now): counters
/// subtracted, no stop (the scan goes on unless `total` says it stopped),
/// `links` records to `hosts` distinct target hosts (those of the part's
/// records).
pub fn sub_summaries(
    total: &ScanSummary,
    earlier: &ScanSummary,
    links: u64,
    hosts: u64,
) -> ScanSummary {
    let mut status: BTreeMap<u16, u64> = total.status_counts.iter().copied().collect();
    for (code, n) in &earlier.status_counts {
        if let Some(v) = status.get_mut(code) {
            *v = v.saturating_sub(*n);
        }
    }
    status.retain(|_, n| *n > 0);
    let sub = |a: u64, b: u64| a.saturating_sub(b);
    ScanSummary {
        pages: sub(total.pages, earlier.pages),
        bytes: sub(total.bytes, earlier.bytes),
        links,
        distinct_target_hosts: hosts,
        errors: sub(total.errors, earlier.errors),
        elapsed_ms: sub(total.elapsed_ms, earlier.elapsed_ms),
        stopped_by: total.stopped_by,
        status_counts: status.into_iter().collect(),
        robots_disallowed: sub(total.robots_disallowed, earlier.robots_disallowed),
        timeouts: sub(total.timeouts, earlier.timeouts),
        refused_addresses: sub(total.refused_addresses, earlier.refused_addresses),
        truncated_pages: sub(total.truncated_pages, earlier.truncated_pages),
        non_html: sub(total.non_html, earlier.non_html),
        redirect_errors: sub(total.redirect_errors, earlier.redirect_errors),
        trap_urls: sub(total.trap_urls, earlier.trap_urls),
        long_urls: sub(total.long_urls, earlier.long_urls),
        beyond_depth: sub(total.beyond_depth, earlier.beyond_depth),
        link_capped_pages: sub(total.link_capped_pages, earlier.link_capped_pages),
        frontier_dropped: sub(total.frontier_dropped, earlier.frontier_dropped),
        records_dropped: sub(total.records_dropped, earlier.records_dropped),
        robots_truncated: sub(total.robots_truncated, earlier.robots_truncated),
    }
}

/// Distinct target hosts of `records`.
pub fn distinct_hosts(records: &[LinkRecord]) -> u64 {
    let hosts: HashSet<String> = records.iter().map(|r| target_host(&r.target_url)).collect();
    hosts.len() as u64
}

/// One running scan's checkpoints, shared by its thread and the work loop.
#[derive(Debug)]
pub struct CheckpointSlot {
    inner: Mutex<SlotInner>,
    /// The scan's own end is being written, or was (final checkpoint or
    /// result): the work loop writes nothing more. Outside the lock, so
    /// the work loop never waits on the scan's last write to read it.
    closed: AtomicBool,
}

#[derive(Debug)]
struct SlotInner {
    /// The unit's records log: every record up to the last write.
    log: RecordsLog,
    /// Records kept since the last write (not yet in the log).
    pending: Vec<LinkRecord>,
    /// Records the log could not take (at its limits).
    dropped: u64,
    /// Summary of the earlier parts.
    earlier: ScanSummary,
    /// The newest snapshot's state and summary (this part only).
    latest: Option<(ScanState, ScanSummary)>,
    taken_at: Option<Instant>,
    /// Whether `latest` is in the spool.
    written: bool,
    written_at: Instant,
    /// This part's pages when the last checkpoint was written.
    written_pages: u64,
}

impl SlotInner {
    /// Move the pending records into the log; those it cannot take are
    /// counted as dropped (a write that failed keeps them for the next).
    fn flush(&mut self) -> anyhow::Result<()> {
        // What the log has room for goes in; the rest is dropped, counted.
        let room = usize::try_from(self.log.room()).unwrap_or(usize::MAX);
        if self.pending.len() > room {
            let over = self.pending.len() - room;
            tracing::warn!("{over} records not kept: the scan's records log is full");
            self.dropped += over as u64;
            self.pending.truncate(room);
        }
        match self.log.append(&self.pending) {
            Ok(_) => {}
            Err(e) if e.is::<LogFull>() => {
                tracing::warn!("{} records not kept: {e:#}", self.pending.len());
                self.dropped += self.pending.len() as u64;
            }
            Err(e) => return Err(e),
        }
        self.pending.clear();
        Ok(())
    }

    /// The whole unit's summary so far, with this part's `later`. Its
    /// distinct target hosts are the most of any part's: a lower bound,
    /// counted exactly over every record when the scan ends (a head's is
    /// never read back; counting them here cost a URL parse a record).
    fn summary(&self, later: &ScanSummary) -> ScanSummary {
        let links = self.log.mark().records + self.pending.len() as u64;
        let hosts = self
            .earlier
            .distinct_target_hosts
            .max(later.distinct_target_hosts);
        let mut s = add_summaries(&self.earlier, later, links, hosts);
        s.records_dropped += self.dropped;
        s
    }
}

impl CheckpointSlot {
    /// A slot for a scan whose records go to `log` (holding the earlier
    /// parts' records up to its mark), resuming after `earlier`, the
    /// summary of those parts (none: a fresh scan).
    pub fn new(log: RecordsLog, earlier: Option<ScanSummary>) -> CheckpointSlot {
        CheckpointSlot {
            inner: Mutex::new(SlotInner {
                log,
                pending: Vec::new(),
                dropped: 0,
                earlier: earlier.unwrap_or_default(),
                latest: None,
                taken_at: None,
                written: true,
                written_at: Instant::now(),
                written_pages: 0,
            }),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the scan closed the slot (it is writing, or wrote, its end).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether a snapshot is due at this page boundary.
    pub fn snapshot_due(&self) -> bool {
        self.lock()
            .taken_at
            .is_none_or(|t| t.elapsed() >= SNAPSHOT_EVERY)
    }

    /// Whether a checkpoint is due with this part at `pages`: the spool's
    /// is older than [`CHECKPOINT_INTERVAL`] (and a newer snapshot waits),
    /// or [`CHECKPOINT_EVERY_PAGES`] pages behind (the caller takes a
    /// snapshot for it).
    pub fn write_due(&self, pages: u64) -> bool {
        let s = self.lock();
        let by_time = !s.written && s.written_at.elapsed() >= CHECKPOINT_INTERVAL;
        let by_pages = pages.saturating_sub(s.written_pages) >= CHECKPOINT_EVERY_PAGES;
        by_time || by_pages
    }

    /// Keep `snap` as the newest. Its records are those found since the
    /// previous snapshot, and new (a part requests each page once, and
    /// never one an earlier part's checkpoint had), so they are kept as
    /// they are: the cost is theirs alone; [`CheckpointSlot::finish`] joins
    /// the parts without duplicates all the same.
    pub fn keep(&self, snap: Snapshot) {
        let mut s = self.lock();
        s.pending.extend(snap.new_records);
        s.latest = Some((snap.state, snap.summary));
        s.taken_at = Some(Instant::now());
        s.written = false;
    }

    /// Write the newest snapshot (unless written, or the scan closed the
    /// slot): its new records appended to the log, then the head with
    /// `write`. Errors are the caller's to report.
    pub fn write_latest(&self, write: WriteHead<'_>) -> anyhow::Result<bool> {
        let mut s = self.lock();
        if s.written || self.is_closed() {
            return Ok(false);
        }
        let Some((state, later)) = s.latest.clone() else {
            return Ok(false);
        };
        // A failed write is tried again a CHECKPOINT_INTERVAL (or
        // CHECKPOINT_EVERY_PAGES) later, not at every page boundary.
        s.written_at = Instant::now();
        s.written_pages = later.pages;
        s.flush()?;
        let head = CheckpointHead {
            summary: s.summary(&later),
            state,
            log: s.log.mark(),
        };
        write(&head)?;
        s.written = true;
        Ok(true)
    }

    /// The scan stopped to go on later: its final checkpoint, at `state`,
    /// with this part's final output (`records`: those its last snapshot
    /// did not take, and `summary`). Closes the slot.
    pub fn suspend(
        &self,
        state: ScanState,
        records: Vec<LinkRecord>,
        summary: &ScanSummary,
        write: WriteHead<'_>,
    ) -> anyhow::Result<()> {
        self.closed.store(true, Ordering::Release);
        let mut s = self.lock();
        s.pending.extend(records);
        s.flush()?;
        let head = CheckpointHead {
            summary: s.summary(summary),
            state,
            log: s.log.mark(),
        };
        write(&head)
    }

    /// The scan ended: the whole unit's records (the log's, then this
    /// part's final output, `records`: those its last snapshot did not
    /// take) and summary. Closes the slot: the work loop writes no older
    /// snapshot over what the scan writes now.
    pub fn finish(
        &self,
        records: Vec<LinkRecord>,
        summary: &ScanSummary,
    ) -> anyhow::Result<Checkpoint> {
        self.closed.store(true, Ordering::Release);
        let mut s = self.lock();
        let logged = s.log.read_all()?;
        let pending = std::mem::take(&mut s.pending);
        let mut dropped = s.dropped;
        let all = join_records([logged, pending, records], &mut dropped);
        let mut summary =
            add_summaries(&s.earlier, summary, all.len() as u64, distinct_hosts(&all));
        summary.records_dropped += dropped;
        if summary.stopped_by.is_none() && summary.frontier_dropped > 0 {
            // An earlier part's frontier dropped URLs: the whole unit's scan
            // did not reach every page, though this part's queue ran out.
            summary.stopped_by = Some(StopReason::FrontierFull);
        }
        Ok(Checkpoint {
            state: ScanState::default(),
            records: all,
            summary,
        })
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

    /// A records log holding `c`'s records, in a fresh directory.
    fn log_of(dir: &tempfile::TempDir, c: Option<&Checkpoint>) -> RecordsLog {
        let mut log = RecordsLog::open(
            &dir.path().join("7.records"),
            7,
            "a.test",
            LogMark::default(),
        )
        .expect("log");
        if let Some(c) = c {
            log.append(&c.records).expect("append");
        }
        log
    }

    #[test]
    fn heads_round_trip_and_are_refused_when_damaged_or_of_another_unit() {
        let c = checkpoint();
        let head = CheckpointHead {
            state: c.state.clone(),
            summary: c.summary.clone(),
            log: LogMark {
                records: 1,
                bytes: 90,
            },
        };
        let bytes = head.encode(7).expect("encode");
        assert_eq!(CheckpointHead::decode(&bytes, 7).expect("decode"), head);
        assert!(matches!(
            CheckpointHead::decode(&bytes, 8),
            Err(CheckpointError::OtherUnit { .. })
        ));
        let mut bad = bytes.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x5a;
        assert!(CheckpointHead::decode(&bad, 7).is_err());
        assert!(CheckpointHead::decode(&bytes[..bytes.len() / 2], 7).is_err());
    }

    #[test]
    fn parts_add_up_without_duplicates() {
        let mut dropped = 0;
        let all = join_records(
            [
                vec![rec("http://a.test/", "http://b.test/")],
                vec![
                    rec("http://a.test/", "http://b.test/"),
                    rec("http://a.test/2", "http://c.test/x"),
                ],
            ],
            &mut dropped,
        );
        assert_eq!(
            all,
            vec![
                rec("http://a.test/", "http://b.test/"),
                rec("http://a.test/2", "http://c.test/x")
            ]
        );
        assert_eq!(dropped, 0);
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
        let s = add_summaries(&earlier, &later, all.len() as u64, distinct_hosts(&all));
        assert_eq!(s.pages, 5);
        assert_eq!(s.errors, 1);
        assert_eq!(s.elapsed_ms, 1500);
        assert_eq!(s.links, 2);
        assert_eq!(s.distinct_target_hosts, 2);
        assert_eq!(s.stopped_by, None);
        assert_eq!(s.status_counts, vec![(200, 4), (404, 1)]);
    }

    fn snapshot(state: &ScanState, records: Vec<LinkRecord>, pages: u64) -> Snapshot {
        let records_hosts = distinct_hosts(&records);
        Snapshot {
            state: ScanState {
                pages_done: state.pages_done + pages,
                ..state.clone()
            },
            new_records: records,
            summary: ScanSummary {
                pages,
                status_counts: vec![(200, pages)],
                // The part's own count (the crawler's).
                distinct_target_hosts: records_hosts,
                ..ScanSummary::default()
            },
        }
    }

    #[test]
    fn a_slot_appends_only_new_records_and_writes_its_newest_snapshot_once() {
        let dir = tempfile::tempdir().expect("dir");
        let earlier = checkpoint();
        let slot = CheckpointSlot::new(log_of(&dir, Some(&earlier)), Some(earlier.summary.clone()));
        let written = std::cell::RefCell::new(Vec::new());
        let write = |h: &CheckpointHead| {
            written.borrow_mut().push(h.clone());
            Ok(())
        };
        assert!(!slot.write_latest(&write).expect("nothing yet"));
        let path = dir.path().join("7.records");
        let before = std::fs::metadata(&path).expect("log").len();
        slot.keep(snapshot(
            &earlier.state,
            vec![rec("http://a.test/4", "http://d.test/")],
            1,
        ));
        // Kept in memory until written: the log is as it was.
        assert_eq!(std::fs::metadata(&path).expect("log").len(), before);
        assert!(slot.write_latest(&write).expect("written"));
        assert!(!slot.write_latest(&write).expect("once"));
        let h = written.borrow()[0].clone();
        assert_eq!(h.log.records, 2);
        assert_eq!(h.log.bytes, std::fs::metadata(&path).expect("log").len());
        assert_eq!(h.summary.links, 2);
        // A head's target hosts: the most of any part's (exact at the end).
        assert_eq!(h.summary.distinct_target_hosts, 1);
        assert_eq!(h.summary.pages, 4);
        assert_eq!(h.state.pages_done, 4);
        // What the head names is what the log holds, the earlier record first.
        assert_eq!(
            crate::recordlog::read(&path, 7, h.log).expect("read"),
            vec![
                rec("http://a.test/", "http://b.test/"),
                rec("http://a.test/4", "http://d.test/")
            ]
        );
        // A second write appends the records kept since, not all of them.
        slot.keep(snapshot(
            &earlier.state,
            vec![rec("http://a.test/6", "http://d.test/")],
            2,
        ));
        assert!(slot.write_latest(&write).expect("written"));
        let h2 = written.borrow()[1].clone();
        assert_eq!(h2.log.records, 3);
        assert_eq!(h2.summary.distinct_target_hosts, 1);
        assert!(h2.log.bytes - h.log.bytes < h.log.bytes, "{h:?} {h2:?}");
        // The part's output holds what its last snapshot did not take (a
        // record given twice is still kept once).
        let end = slot
            .finish(
                vec![
                    rec("http://a.test/4", "http://d.test/"),
                    rec("http://a.test/5", "http://e.test/"),
                ],
                &ScanSummary {
                    pages: 3,
                    ..ScanSummary::default()
                },
            )
            .expect("finish");
        assert_eq!(end.records.len(), 4);
        assert_eq!(end.summary.links, 4);
        assert_eq!(end.summary.distinct_target_hosts, 3);
        assert_eq!(end.summary.pages, 6);
        slot.keep(snapshot(&earlier.state, Vec::new(), 0));
        assert!(!slot.write_latest(&write).expect("closed"));
    }

    #[test]
    fn a_checkpoint_is_due_every_so_many_pages_as_well_as_every_interval() {
        let dir = tempfile::tempdir().expect("dir");
        let home = crate::home::Home::resolve(Some(dir.path().to_path_buf())).expect("home");
        let log = home
            .spool()
            .records_log(9, "a.test", LogMark::default())
            .expect("log");
        let slot = CheckpointSlot::new(log, None);
        let state = checkpoint().state;
        // A fresh slot: nothing due before the pages or the interval.
        assert!(!slot.write_due(CHECKPOINT_EVERY_PAGES - 1));
        assert!(slot.write_due(CHECKPOINT_EVERY_PAGES));
        let write = |h: &CheckpointHead| home.spool().save_checkpoint_head(9, h);
        slot.keep(snapshot(&state, Vec::new(), CHECKPOINT_EVERY_PAGES));
        assert!(slot.write_latest(&write).expect("write"));
        // Counted from the pages of the last checkpoint written.
        assert!(!slot.write_due(2 * CHECKPOINT_EVERY_PAGES - 1));
        assert!(slot.write_due(2 * CHECKPOINT_EVERY_PAGES));
    }

    #[test]
    fn a_suspended_slot_leaves_a_head_and_log_that_read_back_whole() {
        let dir = tempfile::tempdir().expect("dir");
        let home = crate::home::Home::resolve(Some(dir.path().to_path_buf())).expect("home");
        let earlier = checkpoint();
        home.spool().save_checkpoint(7, &earlier).expect("save");
        let (read, mark) = home.spool().checkpoint(7).expect("read").expect("some");
        assert_eq!(read, earlier);
        let log = home.spool().records_log(7, "a.test", mark).expect("log");
        let slot = CheckpointSlot::new(log, Some(read.summary.clone()));
        slot.keep(snapshot(
            &earlier.state,
            vec![rec("http://a.test/4", "http://d.test/")],
            1,
        ));
        let write = |h: &CheckpointHead| home.spool().save_checkpoint_head(7, h);
        slot.suspend(
            ScanState {
                pages_done: 5,
                ..earlier.state.clone()
            },
            vec![rec("http://a.test/5", "http://e.test/")],
            &ScanSummary {
                pages: 2,
                stopped_by: Some(StopReason::Cancelled),
                ..ScanSummary::default()
            },
            &write,
        )
        .expect("suspend");
        assert!(slot.is_closed());
        let (again, _) = home.spool().checkpoint(7).expect("read").expect("some");
        assert_eq!(again.state.pages_done, 5);
        assert_eq!(again.summary.pages, 5);
        assert_eq!(again.summary.links, 3);
        assert_eq!(
            again.records,
            vec![
                rec("http://a.test/", "http://b.test/"),
                rec("http://a.test/4", "http://d.test/"),
                rec("http://a.test/5", "http://e.test/")
            ]
        );
        // Closed first (Windows removes an open file only once closed).
        drop(slot);
        home.spool().remove_checkpoint(7);
        assert!(!home.spool().has_checkpoint(7));
        assert!(!dir.path().join("spool/scans/7.records").exists());
    }

    #[test]
    fn records_past_the_logs_limits_are_dropped_and_counted_and_the_rest_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let recs = |from: u32, to: u32| -> Vec<LinkRecord> {
            (from..to)
                .map(|i| rec(&format!("http://a.test/{i}"), "http://b.test/"))
                .collect()
        };
        let write = |_: &CheckpointHead| Ok(());
        // Room for 3 records: of 5 kept, 3 go in and 2 are dropped.
        let slot = CheckpointSlot::new(log_of(&dir, None).with_limits(3, 1 << 20), None);
        slot.keep(snapshot(&ScanState::default(), recs(0, 5), 5));
        assert!(slot.write_latest(&write).expect("written"));
        let end = slot
            .finish(recs(5, 6), &ScanSummary::default())
            .expect("finish");
        assert_eq!(
            end.records,
            recs(0, 3).into_iter().chain(recs(5, 6)).collect::<Vec<_>>()
        );
        assert_eq!(end.summary.records_dropped, 2);
        // A log past its bytes refuses the frame: its records are dropped,
        // counted, and the head is written all the same.
        let dir = tempfile::tempdir().expect("dir");
        let heads = std::cell::RefCell::new(Vec::new());
        let keep_head = |h: &CheckpointHead| {
            heads.borrow_mut().push(h.clone());
            Ok(())
        };
        let slot = CheckpointSlot::new(log_of(&dir, None).with_limits(100, 16), None);
        slot.keep(snapshot(&ScanState::default(), recs(0, 4), 4));
        assert!(slot.write_latest(&keep_head).expect("written"));
        slot.suspend(
            ScanState::default(),
            recs(4, 6),
            &ScanSummary::default(),
            &keep_head,
        )
        .expect("suspend");
        let last = heads.borrow().last().cloned().expect("a head");
        assert_eq!(last.log, LogMark::default());
        assert_eq!(last.summary.records_dropped, 6);
        assert_eq!(last.summary.links, 0);
    }

    #[test]
    fn urls_an_earlier_part_dropped_make_the_unit_end_frontier_full() {
        // The first part's frontier was full (its state could not keep
        // every URL); the resumed part's queue runs out: the unit did not
        // reach its natural end.
        let dir = tempfile::tempdir().expect("dir");
        let mut earlier = checkpoint();
        earlier.summary.frontier_dropped = 7;
        let slot = CheckpointSlot::new(log_of(&dir, Some(&earlier)), Some(earlier.summary.clone()));
        let end = slot
            .finish(
                Vec::new(),
                &ScanSummary {
                    pages: 2,
                    stopped_by: None,
                    ..ScanSummary::default()
                },
            )
            .expect("finish");
        assert_eq!(end.summary.frontier_dropped, 7);
        assert_eq!(end.summary.stopped_by, Some(StopReason::FrontierFull));
        // A later part's own stop stands; nothing dropped, a natural end.
        let slot = CheckpointSlot::new(log_of(&dir, Some(&earlier)), Some(earlier.summary.clone()));
        let end = slot
            .finish(
                Vec::new(),
                &ScanSummary {
                    stopped_by: Some(StopReason::MaxPages),
                    frontier_dropped: 1,
                    ..ScanSummary::default()
                },
            )
            .expect("finish");
        assert_eq!(end.summary.frontier_dropped, 8);
        assert_eq!(end.summary.stopped_by, Some(StopReason::MaxPages));
        let slot = CheckpointSlot::new(
            log_of(&dir, Some(&checkpoint())),
            Some(checkpoint().summary),
        );
        let end = slot
            .finish(Vec::new(), &ScanSummary::default())
            .expect("finish");
        assert_eq!(end.summary.stopped_by, None);
        assert_eq!(end.records, checkpoint().records);
    }
}
