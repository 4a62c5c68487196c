//! A scan's end: spool its result (or give the unit back), keep a unit
//! whose site went offline waiting behind a back-off, and on shutdown
//! stop every scan with a checkpoint within [`SHUTDOWN_GRACE`] and
//! [`SHUTDOWN_WRITES`].
//!
//! A cancelled scan loses nothing: it waits in the spool with its
//! checkpoint. Nothing here waits for the network while the client stops.

use crate::control::ProblemKind;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::mpsc;

use crate::checkpoint::CheckpointHead;

use super::scan::{ScanDone, ScanEnd};
use super::{backoff_delay, AVERAGE_WEIGHT};
use super::{HeldState, Worker};

/// Longest a stopping client waits for its scans to reach a page boundary
/// and checkpoint there; a scan still in a request (timeouts up to 60 s) is
/// checkpointed from its last snapshot instead. Well inside the 5 s a stop
/// may take (systemd's stop timeout is far longer).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// Longest a stopping client then spends writing checkpoints (in parallel)
/// and waiting for scans writing their own end: with the grace and the
/// runtime's exit wait, a stop stays under 5 s.
pub const SHUTDOWN_WRITES: Duration = Duration::from_millis(1250);

/// Back-off after a scan stopped because its site stopped answering
/// ([`StopReason::Offline`]): no scan starts (or resumes) for a random wait
/// up to this base doubled per offline stop in a row, at most
/// [`OFFLINE_BACKOFF_CAP`]. A scan that ends reachable resets it.
pub const OFFLINE_BACKOFF_BASE: Duration = Duration::from_secs(5);
pub const OFFLINE_BACKOFF_CAP: Duration = Duration::from_secs(600);

impl Worker {
    /// A scan ended: spool its result (or give the unit back).
    pub(super) async fn scan_done(&mut self, done: ScanDone) -> Result<()> {
        let Some(h) = self.held.get_mut(&done.unit_id) else {
            return Ok(());
        };
        if matches!(h.state, HeldState::Aborted) {
            self.held.remove(&done.unit_id);
            self.home.spool().remove_unit(done.unit_id);
            return Ok(());
        }
        match done.result {
            ScanEnd::Checkpointed => {
                // Cancelled without an abort: the client stops; it resumes
                // from the checkpoint next time.
                h.state = HeldState::Waiting;
            }
            ScanEnd::Offline => {
                // Nothing lost: the unit waits with its checkpoint, and no
                // scan starts until the back-off has passed.
                h.state = HeldState::Waiting;
                self.offline_stops = self.offline_stops.saturating_add(1);
                let wait = backoff_delay(
                    self.offline_stops,
                    OFFLINE_BACKOFF_BASE,
                    OFFLINE_BACKOFF_CAP,
                    rand::random::<f64>(),
                );
                tracing::warn!(
                    unit_id = done.unit_id,
                    "the site stopped answering (offline?); scans resume in {:.1}s",
                    wait.as_secs_f64()
                );
                self.problem(
                    ProblemKind::SiteUnreachable,
                    format!(
                        "unit {}: the site stopped answering (offline?)",
                        done.unit_id
                    ),
                );
                self.scans_resume_at = Some(Instant::now() + wait);
            }
            ScanEnd::Finished(result) if self.stopping => {
                // Finished as the client stops: uploaded next time.
                self.home.spool().save_result(done.unit_id, &result)?;
                // The slot (its log's open file) goes first: Windows
                // removes an open file only once it is closed.
                h.state = HeldState::Finished;
                self.home.spool().remove_checkpoint(done.unit_id);
            }
            ScanEnd::Failed(_) if self.stopping => h.state = HeldState::Waiting,
            ScanEnd::Finished(result) => {
                let summary = &result.summary;
                self.stats.scans_finished += 1;
                self.offline_stops = 0;
                let took = summary.elapsed_ms as f64 / 1000.0;
                self.job_s = Some(match self.job_s {
                    None => took,
                    Some(a) => a + AVERAGE_WEIGHT * (took - a),
                });
                tracing::info!(
                    unit_id = done.unit_id,
                    pages = summary.pages,
                    links = summary.links,
                    stopped_by = summary.stopped_by.map(|s| s.as_str()).unwrap_or("-"),
                    early = result.state.is_some(),
                    "scan finished"
                );
                self.home.spool().save_result(done.unit_id, &result)?;
                // The slot (its log's open file) goes first: Windows
                // removes an open file only once it is closed.
                h.state = HeldState::Finished;
                self.home.spool().remove_checkpoint(done.unit_id);
            }
            ScanEnd::Failed(reason) => {
                tracing::warn!(unit_id = done.unit_id, "scan failed: {reason}");
                self.problem(
                    ProblemKind::ScanFailed,
                    format!("scan of unit {} failed: {reason}", done.unit_id),
                );
                self.give_back(done.unit_id, reason).await?;
            }
        }
        Ok(())
    }

    /// Stop every scan with a checkpoint: cancel them, give them
    /// [`SHUTDOWN_GRACE`] to reach a page boundary (their threads write the
    /// checkpoint there), and write the newest snapshot of those still in a
    /// request. Nothing here waits for the network.
    pub(super) async fn stop_scans(&mut self, done_rx: &mut mpsc::Receiver<ScanDone>) {
        self.stopping = true;
        for h in self.held.values() {
            if let HeldState::Crawling { cancel, .. } = &h.state {
                cancel.cancel();
            }
        }
        let until = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while self.crawling() > 0 {
            match tokio::time::timeout_at(until, done_rx.recv()).await {
                Ok(Some(done)) => {
                    let unit_id = done.unit_id;
                    if let Err(e) = self.scan_done(done).await {
                        tracing::warn!(unit_id, "cannot keep the scan's end: {e:#}");
                        if let Some(h) = self.held.get_mut(&unit_id) {
                            h.state = HeldState::Waiting;
                        }
                    }
                }
                _ => break,
            }
        }
        // Scans still in a request: their newest snapshots, written at once
        // on blocking threads (each encodes and fsyncs its own file), while
        // scans that reached their end finish writing theirs; all of it
        // within SHUTDOWN_WRITES.
        let until = tokio::time::Instant::now() + SHUTDOWN_WRITES;
        let mut writers = tokio::task::JoinSet::new();
        for (unit_id, h) in &self.held {
            if let HeldState::Crawling { slot, .. } = &h.state {
                let (unit_id, slot, home) = (*unit_id, slot.clone(), self.home.clone());
                writers.spawn_blocking(move || {
                    let write = |h: &CheckpointHead| home.spool().save_checkpoint_head(unit_id, h);
                    (unit_id, slot.write_latest(&write))
                });
            }
        }
        loop {
            // A scan whose slot is closed is writing its own end.
            let closing = self
                .held
                .values()
                .any(|h| matches!(&h.state, HeldState::Crawling { slot, .. } if slot.is_closed()));
            if writers.is_empty() && !closing {
                break;
            }
            tokio::select! {
                Some(joined) = writers.join_next(), if !writers.is_empty() => match joined {
                    Ok((unit_id, Ok(true))) => tracing::info!(
                        unit_id,
                        "checkpointed at its last snapshot (a request was in flight)"
                    ),
                    Ok((_, Ok(false))) => {}
                    Ok((unit_id, Err(e))) => {
                        tracing::warn!(unit_id, "cannot write a checkpoint: {e:#}")
                    }
                    Err(e) => tracing::warn!("a checkpoint writer failed: {e}"),
                },
                done = done_rx.recv(), if closing => {
                    let Some(done) = done else { break };
                    let unit_id = done.unit_id;
                    if let Err(e) = self.scan_done(done).await {
                        tracing::warn!(unit_id, "cannot keep the scan's end: {e:#}");
                        if let Some(h) = self.held.get_mut(&unit_id) {
                            h.state = HeldState::Waiting;
                        }
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    tracing::warn!("checkpoints not all written within {SHUTDOWN_WRITES:?}");
                    break;
                }
            }
        }
    }
}
