//! Scans in flight: which waiting units start on free slots and in what
//! order, the crawl each runs ([`crawl_spec`]) and the blocking scan thread
//! itself, which checkpoints as it goes and ends with a link file or a final
//! checkpoint, sent back as a [`ScanDone`].
//!
//! A unit's deadline never cuts its scan: only the round's time budget,
//! a cancel (abort, hand-over, the client stopping) or its site going
//! offline stop it early. Nothing here talks to the server.
//!
//! Why a blocking thread per scan. A client scans up to 64 sites at once
//! (`MAX_SLOTS`), each on a blocking thread of tokio's pool running ureq: one
//! request at a time per host is the crawler's rule anyway, so a scan's thread
//! mostly sleeps through the politeness delay. At 64 scans that is 64 small
//! stacks and a few tens of MB (`benches/concurrency.rs`), and the code of a
//! scan reads top to bottom. A thread sleeps its wait on its scan's `Cancel` (a
//! condition variable, woken by its time or by the cancel), never in slices:
//! polling every 20 ms made 64 scans wake 3,000 times a second, half the
//! client's CPU at 56 pages/s.
//!
//! This would change if a desktop scanned hundreds or thousands of hosts at
//! once (Heritrix's per-host queues): then an async fetcher (one task per host
//! on a few threads, with a shared connection pool) and the politeness delay as
//! a timer wheel, since threads' memory and switches would cost more than the
//! work. Not now: a desktop at the default 1 s delay reaches its target (about
//! 30 pages/s) with about 40 scans, bandwidth and the server's units per host
//! bound it before threads do, and an async crawler would mean a second HTTP
//! stack beside the benchmark's and checkpoints at page boundaries redone as
//! tasks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use beebot_shared::limits::MAX_SLOTS;
use beebot_shared::linkfile::{self, LinkFileHeader, StopReason};
use beebot_shared::scanstate::ScanState;
use beebot_shared::sign::WorkUnit;
use url::Url;

use crate::bandwidth::Bandwidth;
use crate::cancel::Cancel;
use crate::checkpoint::{Checkpoint, CheckpointHead, CheckpointSlot};
use crate::control::Gate;
use crate::crawler::{self, CrawlProgress, CrawlSpec, CrawlerConfig};
use crate::home::{Home, SpooledResult};
use crate::recordlog::{LogMark, RecordsLog};

use super::continuation::{start_from, StartFrom};
use super::lease::Lease;
use super::now_ms;
use super::sizing::ScanMeter;
use super::{HeldState, Worker};

/// A scan's end, sent from the crawl thread.
pub(super) struct ScanDone {
    pub(super) unit_id: u64,
    pub(super) result: ScanEnd,
}

/// How a scan thread ended.
pub(super) enum ScanEnd {
    /// A result to upload (the state beside it when it stopped early).
    Finished(Box<SpooledResult>),
    /// Cancelled (the client stops, or the server aborted): its checkpoint
    /// is in the spool.
    Checkpointed,
    /// The site stopped answering (this host is offline, or the site):
    /// its checkpoint is in the spool; it resumes after a back-off.
    Offline,
    /// The scan could not produce a result.
    Failed(String),
}

/// The order in which waiting units start: those whose deadline has not
/// passed first, then the expired ones (the server may well have issued
/// their job to another host, and aborts this copy at its first progress if
/// so), each group by unit id. `waiting` holds `(unit_id, deadline_ms)`, on
/// the server's clock like `server_now_ms`.
pub fn start_order(mut waiting: Vec<(u64, u64)>, server_now_ms: u64) -> Vec<u64> {
    waiting.sort_by_key(|&(id, deadline_ms)| (deadline_ms <= server_now_ms, id));
    waiting.into_iter().map(|(id, _)| id).collect()
}

/// Build the crawl of a unit: from `resume` (a checkpoint or the state of a
/// continuation unit) when given, with the round's time budget less the
/// `spent` time of the unit's earlier parts. No deadline: deadlines never
/// cut a live scan.
pub fn crawl_spec(
    unit: &WorkUnit,
    resume: Option<ScanState>,
    spent: Duration,
) -> Result<CrawlSpec> {
    let seed = Url::parse(&unit.seed_url).context("unit has a bad seed URL")?;
    Ok(CrawlSpec {
        site: unit.site.clone(),
        seed,
        scope: unit.scope,
        max_pages: unit.limits.max_pages,
        max_depth: unit.limits.max_depth,
        delay: Duration::from_millis(unit.limits.delay_ms),
        // The unit carries no Crawl-delay maximum yet: the crawler's own cap.
        max_crawl_delay: Duration::from_millis(unit.limits.max_crawl_delay_ms)
            .min(crawler::robots::MAX_CRAWL_DELAY),
        max_page_bytes: unit.limits.max_page_bytes,
        max_duration: Duration::from_secs(unit.limits.max_seconds).saturating_sub(spent),
        user_agent: unit.user_agent.clone(),
        resume,
        excluded: unit.exclusions.clone(),
        // One request at a time per host: the grid's politeness.
        connections: 1,
    })
}

/// What a running scan shares with the work loop.
struct ScanHooks {
    cancel: Arc<Cancel>,
    /// The cancel is a hand-over: upload what was done, with the frontier.
    hand_over: Arc<AtomicBool>,
    pages: Arc<AtomicU64>,
    links: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    queued: Arc<AtomicU64>,
    /// Holds the scan at a page boundary while paused or outside the window.
    gate: Option<Arc<Gate>>,
    /// Holds the scan at a page boundary while no report was answered
    /// within the lease.
    lease: Arc<Lease>,
    /// Extra pause after every page (a deliberately slow host).
    throttle: Duration,
    /// The client's shared bandwidth cap.
    bandwidth: Option<Arc<Bandwidth>>,
    /// The scan's checkpoints.
    slot: Arc<CheckpointSlot>,
    /// The client's totals over every scan (the concurrency controller's).
    meter: Arc<ScanMeter>,
    /// Pages, links and bytes of the unit's earlier parts (progress counts
    /// the unit's).
    pages_before: u64,
    links_before: u64,
    bytes_before: u64,
    home: Home,
    /// When this run of the client started.
    run_started: Instant,
}

/// Hold the scan while its lease lapsed (see [`Lease`]), saying so once.
fn hold_for_lease(unit_id: u64, lease: &Lease, cancel: &Cancel) {
    if lease.is_lapsed() && !cancel.is_set() {
        tracing::info!(
            unit_id,
            "no progress report answered lately: the scan waits at a page boundary"
        );
        lease.wait_held(cancel);
        if !cancel.is_set() {
            tracing::info!(unit_id, "report answered: the scan goes on");
        }
    }
}

/// Run a unit's scan (blocking): checkpoint it as it goes, and end with its
/// link file (all parts together) or, when cancelled, a final checkpoint.
fn scan(unit: &WorkUnit, spec: &CrawlSpec, cfg: &CrawlerConfig, hooks: &ScanHooks) -> ScanEnd {
    let cancel = &*hooks.cancel;
    let slot = &*hooks.slot;
    let write = |h: &CheckpointHead| hooks.home.spool().save_checkpoint_head(unit.unit_id, h);
    let mut paid_bytes = 0u64;
    let mut counted = CrawlProgress::default();
    // No request before the lease is held (a scan resumed after a restart
    // waits for its first answered report).
    hold_for_lease(unit.unit_id, &hooks.lease, cancel);
    // The run before this one may have asked the site a moment before it
    // stopped (or was killed): a delay from this run's start first.
    let quiet_since = Some(hooks.run_started);
    let out = crawler::crawl_quiet_since(spec, quiet_since, cfg, cancel, &mut |p, snapshot| {
        hooks.meter.count(p, &mut counted);
        hooks
            .pages
            .store(hooks.pages_before + p.pages, Ordering::Relaxed);
        hooks
            .links
            .store(hooks.links_before + p.links, Ordering::Relaxed);
        hooks
            .bytes
            .store(hooks.bytes_before + p.bytes, Ordering::Relaxed);
        hooks.queued.store(p.queued, Ordering::Relaxed);
        // A page boundary: pay for the bytes read, keep a snapshot (written
        // to the spool every CHECKPOINT_INTERVAL and before the gate holds
        // the scan), then hold while paused or outside the window.
        if let Some(b) = &hooks.bandwidth {
            b.pay(p.bytes.saturating_sub(paid_bytes), cancel);
            paid_bytes = p.bytes;
        }
        if !hooks.throttle.is_zero() {
            cancel.sleep(hooks.throttle);
        }
        let held = hooks.gate.as_ref().is_some_and(|g| !g.is_open()) || hooks.lease.is_lapsed();
        let write_now = held || slot.write_due(p.pages);
        if write_now || cancel.is_set() || slot.snapshot_due() {
            slot.keep(snapshot());
        }
        if write_now {
            if let Err(e) = slot.write_latest(&write) {
                tracing::warn!(unit_id = unit.unit_id, "cannot write a checkpoint: {e:#}");
            }
        }
        if let Some(g) = &hooks.gate {
            g.wait_open(cancel);
        }
        hold_for_lease(unit.unit_id, &hooks.lease, cancel);
    });
    let stopped_by = out.summary.stopped_by;
    let state = out.state;
    let handed_over =
        stopped_by == Some(StopReason::Cancelled) && hooks.hand_over.load(Ordering::Relaxed);
    if let Some(stop @ (StopReason::Cancelled | StopReason::Offline)) =
        stopped_by.filter(|_| !handed_over)
    {
        // Kept, to go on from its checkpoint: after the client restarts,
        // or once the site answers again.
        let state = state.unwrap_or_default();
        return match slot.suspend(state, out.records, &out.summary, &write) {
            Ok(()) if stop == StopReason::Offline => ScanEnd::Offline,
            Ok(()) => ScanEnd::Checkpointed,
            Err(e) => ScanEnd::Failed(format!("cannot write the checkpoint: {e:#}")),
        };
    }
    let mut whole = match slot.finish(out.records, &out.summary) {
        Ok(w) => w,
        Err(e) => return ScanEnd::Failed(format!("cannot read the scan's records: {e:#}")),
    };
    let header = LinkFileHeader::of_unit(unit, whole.summary.pages, whole.records.len() as u64);
    let link_file = match linkfile::encode(&header, &whole.records) {
        Ok(b) => b,
        Err(e) => return ScanEnd::Failed(e.to_string()),
    };
    let state = match state.map(|mut s| crawler::encode_state(&mut s)).transpose() {
        Ok(Some((bytes, cut))) => {
            whole.summary.frontier_dropped += cut;
            Some(bytes)
        }
        Ok(None) => None,
        Err(e) => return ScanEnd::Failed(format!("cannot encode the scan state: {e}")),
    };
    ScanEnd::Finished(Box::new(SpooledResult {
        link_file,
        summary: whole.summary,
        state,
    }))
}

impl Worker {
    /// Start scans on free slots.
    pub(super) fn start_scans(&mut self) {
        if !self.gate_open() {
            return;
        }
        if self.scans_resume_at.is_some_and(|t| Instant::now() < t) {
            return; // offline: the back-off first
        }
        // Up to the effective concurrency (never past the ceiling).
        let slots = self.concurrency().clamp(1, MAX_SLOTS) as usize;
        let mut running = self.crawling();
        let waiting: Vec<(u64, u64)> = self
            .held
            .iter()
            .filter(|(_, h)| matches!(h.state, HeldState::Waiting))
            .map(|(id, h)| (*id, h.deadline_ms))
            .collect();
        let server_now_ms = (now_ms() as i64 + self.clock_offset_ms).max(0) as u64;
        for unit_id in start_order(waiting, server_now_ms) {
            if running >= slots {
                break;
            }
            if self.start_scan(unit_id) {
                running += 1;
            }
        }
    }

    /// Start the scan of a waiting unit, from its checkpoint or its seed.
    /// False when it did not start: its state comes first, or its crawl
    /// cannot be built (then it ends as failed).
    fn start_scan(&mut self, unit_id: u64) -> bool {
        let Some(h) = self.held.get_mut(&unit_id) else {
            return false;
        };
        if h.needs_state {
            return false; // its state comes first (`fetch_states`)
        }
        // The unit's checkpoint: its own earlier run, or the state of a
        // continuation unit. A damaged one starts the scan over (a
        // continuation unit fetches its state again).
        let read = self.home.spool().checkpoint(unit_id);
        if let Err(e) = &read {
            tracing::warn!(unit_id, "checkpoint unreadable, not used: {e:#}");
            self.home.spool().remove_checkpoint(unit_id);
        }
        let checkpoint = match start_from(h.unit.unit.resume.is_some(), read) {
            StartFrom::Seed => None,
            StartFrom::Checkpoint(c) => Some(*c),
            StartFrom::FetchState => {
                tracing::warn!(unit_id, "continuation unit without its state: fetching it");
                h.needs_state = true;
                return false;
            }
        };
        let unit = h.unit.unit.clone();
        let spent =
            Duration::from_millis(checkpoint.as_ref().map_or(0, |(c, _)| c.summary.elapsed_ms));
        let spec = match crawl_spec(
            &unit,
            checkpoint.as_ref().map(|(c, _)| c.state.clone()),
            spent,
        ) {
            Ok(s) => s,
            Err(e) => {
                let _ = self.done_tx.try_send(ScanDone {
                    unit_id,
                    result: ScanEnd::Failed(e.to_string()),
                });
                h.state = HeldState::Aborted;
                return false;
            }
        };
        // The records log, after the checkpoint's mark (emptied for a
        // fresh scan).
        let mark = checkpoint.as_ref().map_or(LogMark::default(), |(_, m)| *m);
        let log = match self.home.spool().records_log(unit_id, &unit.site, mark) {
            Ok(log) => log,
            Err(e) => {
                let _ = self.done_tx.try_send(ScanDone {
                    unit_id,
                    result: ScanEnd::Failed(format!("cannot open the scan's records log: {e:#}")),
                });
                h.state = HeldState::Aborted;
                return false;
            }
        };
        self.spawn_scan(unit, spec, checkpoint.map(|(c, _)| c), log);
        true
    }

    /// Run a unit's scan on a blocking thread, the unit crawling meanwhile;
    /// its end comes back on `done_tx`.
    fn spawn_scan(
        &mut self,
        unit: WorkUnit,
        spec: CrawlSpec,
        checkpoint: Option<Checkpoint>,
        log: RecordsLog,
    ) {
        let unit_id = unit.unit_id;
        let (pages_before, links_before, bytes_before) =
            checkpoint.as_ref().map_or((0, 0, 0), |c| {
                (c.summary.pages, c.records.len() as u64, c.summary.bytes)
            });
        let cancel = Arc::new(Cancel::new());
        let hand_over = Arc::new(AtomicBool::new(false));
        // A scan resumed from its checkpoint may have reported before (and
        // been taken back while this host was away): it waits for an
        // answered report. A new one holds its lease from the host's last
        // answered request, and reports at once (a unit that waited in the
        // buffer past its deadline, or while its host was away, may have
        // gone to another host).
        let lease = Arc::new(match (&checkpoint, self.last_answered) {
            (None, Some(sent)) => Lease::held_from(sent),
            _ => Lease::lapsed(),
        });
        let first_report_due = Instant::now()
            .checked_sub(self.opts.progress_interval)
            .unwrap_or_else(Instant::now);
        let pages = Arc::new(AtomicU64::new(pages_before));
        let links = Arc::new(AtomicU64::new(links_before));
        let bytes = Arc::new(AtomicU64::new(bytes_before));
        let queued = Arc::new(AtomicU64::new(0));
        let slot = Arc::new(CheckpointSlot::new(
            log,
            checkpoint.as_ref().map(|c| c.summary.clone()),
        ));
        let crawling = HeldState::Crawling {
            cancel: cancel.clone(),
            hand_over: hand_over.clone(),
            pages: pages.clone(),
            links: links.clone(),
            bytes: bytes.clone(),
            queued: queued.clone(),
            last_progress: first_report_due,
            lease: lease.clone(),
            started: Instant::now(),
            slot: slot.clone(),
        };
        if let Some(h) = self.held.get_mut(&unit_id) {
            h.state = crawling;
            // A part spooled and not answered (the client stopped) goes first.
            let wait = if self.home.spool().has_part(unit_id) {
                Duration::ZERO
            } else {
                self.opts.part_every
            };
            h.part_due = Some(Instant::now() + wait);
        }
        let cfg = self.opts.crawler.clone();
        let hooks = ScanHooks {
            cancel,
            hand_over,
            pages,
            links,
            bytes,
            queued,
            gate: self.opts.gate.clone(),
            lease,
            throttle: self.opts.throttle,
            bandwidth: self.bandwidth.clone(),
            slot,
            meter: self.meter.clone(),
            pages_before,
            links_before,
            bytes_before,
            home: self.home.clone(),
            run_started: self.run_started,
        };
        let tx = self.done_tx.clone();
        match &checkpoint {
            Some(c) => tracing::info!(
                unit_id,
                site = %unit.site,
                pages_done = c.state.pages_done,
                queued = c.state.queue.len(),
                "scan resumed from its checkpoint"
            ),
            None => tracing::info!(unit_id, site = %unit.site, "scan started"),
        }
        tokio::task::spawn_blocking(move || {
            let result = scan(&unit, &spec, &cfg, &hooks);
            // Its slot's log closed before the loop removes it.
            drop(hooks);
            let _ = tx.blocking_send(ScanDone { unit_id, result });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::tests::unit;

    #[test]
    fn a_crawl_has_no_deadline_only_the_budget_left() {
        let spec = crawl_spec(&unit(), None, Duration::from_secs(15)).expect("spec");
        assert_eq!(spec.max_duration, Duration::from_secs(45));
        assert!(spec.resume.is_none());
        let spec =
            crawl_spec(&unit(), Some(ScanState::default()), Duration::from_secs(90)).expect("spec");
        assert_eq!(spec.max_duration, Duration::ZERO);
        assert!(spec.resume.is_some());
    }

    #[test]
    fn units_past_their_deadline_start_last() {
        let now = 1_700_000_000_000;
        let waiting = vec![(1, now - 1), (2, now + 60_000), (3, now), (4, now + 1)];
        assert_eq!(start_order(waiting, now), vec![2, 4, 1, 3]);
        // Nothing else waits: an expired unit still starts.
        assert_eq!(start_order(vec![(5, now - 10)], now), vec![5]);
    }
}
