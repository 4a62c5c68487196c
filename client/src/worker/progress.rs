//! Progress reports of running scans: each reports its pages, links and
//! bytes every `progress_interval` (`ScanProgress`; `Progress`, without
//! bytes, to a server that does not take it); the answer extends the
//! unit's deadline, aborts the scan, or hands it over to another host.
//!
//! A deadline never stops a scan: an `Extend` only moves it (and spools it
//! for `beebot status`). An answered report renews the scan's lease on its
//! site ([`super::lease`]); a scan whose lease lapsed reports at once.
//! Nothing here uploads or asks for work.

use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result};
use beebot_shared::proto::{ErrorCode, Request, Response, ABORT_HAND_OVER, ABORT_ROUND_CANCELLED};

use crate::net::NetError;

use super::held::{HeldState, Worker};
use super::lease::Sent;

/// A running scan's progress from its unit's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Report {
    unit_id: u64,
    pages: u64,
    links: u64,
    bytes: u64,
}

impl Report {
    /// The request that carries it: `ScanProgress`, or `Progress` (without
    /// the bytes) to a server that refused `ScanProgress`.
    fn request(&self, without_bytes: bool) -> Request {
        let Report {
            unit_id,
            pages,
            links,
            bytes,
        } = *self;
        if without_bytes {
            Request::Progress {
                unit_id,
                pages,
                links,
            }
        } else {
            Request::ScanProgress {
                unit_id,
                pages,
                links,
                bytes,
            }
        }
    }
}

impl Worker {
    /// Report progress of running scans; stop the ones the server aborts.
    pub(super) async fn report_progress(&mut self) -> Result<bool> {
        for report in self.progress_due() {
            let unit_id = report.unit_id;
            let sent = Sent::now();
            let mut r = self
                .request(&report.request(self.scan_progress_refused))
                .await;
            if let Err(NetError::Refused {
                code: ErrorCode::BadRequest,
                message,
            }) = &r
            {
                if !self.scan_progress_refused {
                    // An older server: this report and the next ones go
                    // as `Progress`, without their bytes.
                    tracing::info!("the server does not take reports with bytes: {message}");
                    self.scan_progress_refused = true;
                    r = self.request(&report.request(true)).await;
                }
            }
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

    /// The reports of the running scans due to report.
    fn progress_due(&self) -> Vec<Report> {
        self.held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                // Due every interval, and at once for a scan held because
                // no report was answered within its lease.
                // Counted from the unit's start, its parts included.
                HeldState::Crawling {
                    pages,
                    links,
                    bytes,
                    last_progress,
                    lease,
                    ..
                } if last_progress.elapsed() >= self.opts.progress_interval
                    || lease.is_lapsed() =>
                {
                    Some(Report {
                        unit_id: *id,
                        pages: pages.load(Ordering::Relaxed),
                        links: links.load(Ordering::Relaxed),
                        bytes: bytes.load(Ordering::Relaxed),
                    })
                }
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_carries_its_bytes_unless_the_server_refused_them() {
        let r = Report {
            unit_id: 7,
            pages: 12,
            links: 40,
            bytes: 300_000,
        };
        assert_eq!(
            r.request(false),
            Request::ScanProgress {
                unit_id: 7,
                pages: 12,
                links: 40,
                bytes: 300_000
            }
        );
        assert_eq!(
            r.request(true),
            Request::Progress {
                unit_id: 7,
                pages: 12,
                links: 40
            }
        );
    }
}
