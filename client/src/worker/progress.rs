//! Progress reports of running scans: each reports its pages and links every
//! `progress_interval`; the answer extends the unit's deadline, aborts the
//! scan, or hands it over to another host.
//!
//! A deadline never stops a scan: an `Extend` only moves it (and spools it
//! for `beebot status`). An answered report renews the scan's lease on its
//! site ([`super::lease`]); a scan whose lease lapsed reports at once.
//! Nothing here uploads or asks for work.

use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result};
use beebot_shared::proto::{Request, Response, ABORT_HAND_OVER, ABORT_ROUND_CANCELLED};

use super::held::{HeldState, Worker};
use super::lease::Sent;

impl Worker {
    /// Report progress of running scans; stop the ones the server aborts.
    pub(super) async fn report_progress(&mut self) -> Result<bool> {
        for (unit_id, pages, links) in self.progress_due() {
            let sent = Sent::now();
            let r = self
                .request(&Request::Progress {
                    unit_id,
                    pages,
                    links,
                })
                .await;
            let Some(h) = self.held.get_mut(&unit_id) else {
                continue;
            };
            // Any answer but an abort keeps the scan's lease on its site.
            if let (Ok(a), HeldState::Crawling { lease, .. }) = (&r, &h.state) {
                if !matches!(a, Response::Abort { .. }) {
                    lease.renew(sent);
                }
            }
            match r {
                Ok(Response::Abort { reason }) if reason == ABORT_HAND_OVER => {
                    // Another host continues the scan: stop at a page
                    // boundary and upload what was done with the frontier.
                    tracing::info!(unit_id, "the scan is handed over to another host");
                    if let HeldState::Crawling {
                        cancel, hand_over, ..
                    } = &h.state
                    {
                        hand_over.store(true, Ordering::Relaxed);
                        cancel.cancel();
                    }
                }
                Ok(Response::Abort { reason }) => {
                    tracing::info!(unit_id, "server aborted the scan: {reason}");
                    if let HeldState::Crawling { cancel, .. } = &h.state {
                        cancel.cancel();
                    }
                    h.state = HeldState::Aborted;
                    if reason == ABORT_ROUND_CANCELLED {
                        let round_id = h.unit.unit.round_id;
                        let of_round = self.units_where_round(round_id);
                        self.drop_cancelled(&of_round);
                    }
                }
                Ok(Response::Extend { deadline_ms }) => {
                    // The host is alive: its deadline moves; the scan goes on.
                    h.deadline_ms = deadline_ms;
                    if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                        *last_progress = Instant::now();
                    }
                    tracing::debug!(unit_id, deadline_ms, "deadline extended");
                    if let Err(e) = self.home.save_deadline(unit_id, deadline_ms) {
                        tracing::warn!(unit_id, "cannot spool the extended deadline: {e:#}");
                    }
                }
                Ok(_) => {
                    if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                        *last_progress = Instant::now();
                    }
                }
                Err(e) if e.is_permanent() => {
                    return Err(e).context("the server refused this host")
                }
                Err(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// `(unit_id, pages, links)` of the running scans due to report.
    fn progress_due(&self) -> Vec<(u64, u64, u64)> {
        self.held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                // Due every interval, and at once for a scan held because
                // no report was answered within its lease.
                // Counted from the unit's start, its parts included.
                HeldState::Crawling {
                    pages,
                    links,
                    last_progress,
                    lease,
                    ..
                } if last_progress.elapsed() >= self.opts.progress_interval
                    || lease.is_lapsed() =>
                {
                    Some((
                        *id,
                        pages.load(Ordering::Relaxed),
                        links.load(Ordering::Relaxed),
                    ))
                }
                _ => None,
            })
            .collect()
    }
}
