//! Progress reports of running scans: each reports its pages, links and
//! bytes every `progress_interval`, all running scans in one request
//! (`ScanProgressAll`; to 0.1.0's server `Progress` a scan, without the
//! bytes); the answer extends the unit's deadline,
//! aborts the scan, or hands it over to another host.
//!
//! A deadline never stops a scan: an `Extend` only moves it (and spools it
//! for `beebot status`). An answered report renews the scan's lease on its
//! site ([`super::lease`]); a scan whose lease lapsed reports at once.
//! Nothing here uploads or asks for work.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use beebot_shared::limits::MAX_REPORTS_PER_REQUEST;
use beebot_shared::proto::{
    ErrorCode, Request, Response, ScanReport, ABORT_HAND_OVER, ABORT_ROUND_CANCELLED,
};

use crate::net::NetError;

use super::lease::Sent;
use super::{HeldState, Worker};

impl Worker {
    /// Report progress of running scans; stop the ones the server aborts.
    /// One `ScanProgressAll` carries every report (see [`batch`]); to a
    /// server that does not take it, each due scan reports on its own.
    pub(super) async fn report_progress(&mut self) -> Result<bool> {
        let scans = self.running_reports();
        let interval = self.opts.progress_interval;
        let reports = batch(&scans, interval);
        if reports.is_empty() {
            return Ok(true);
        }
        if !self.progress_all_refused {
            let sent = Sent::now();
            let request = Request::ScanProgressAll {
                reports: reports.clone(),
            };
            match self.request(&request).await {
                Err(NetError::Refused {
                    code: ErrorCode::BadRequest,
                    message,
                }) => {
                    // 0.1.0's server: reports go scan by scan.
                    tracing::info!("the server does not take reports together: {message}");
                    self.progress_all_refused = true;
                }
                Ok(Response::Progressed { answers }) if answers.len() == reports.len() => {
                    for (report, answer) in reports.iter().zip(answers) {
                        self.heard(report.unit_id, sent, answer.into());
                    }
                    return Ok(true);
                }
                Ok(other) => {
                    let e = NetError::Protocol(format!(
                        "{} progress reports answered with {other:?}",
                        reports.len()
                    ));
                    return self.report_failed(e);
                }
                Err(e) => return self.report_failed(e),
            }
        }
        // Scan by scan, only the ones due.
        let due = scans.iter().filter(|s| s.is_due(interval));
        for report in due.map(|s| s.report).collect::<Vec<_>>() {
            let sent = Sent::now();
            let request = Request::Progress {
                unit_id: report.unit_id,
                pages: report.pages,
                links: report.links,
            };
            match self.request(&request).await {
                Ok(answer) => self.heard(report.unit_id, sent, answer),
                Err(e) => return self.report_failed(e),
            }
        }
        Ok(true)
    }

    /// A report that was not answered: a refusal that lasts ends the
    /// run; anything else waits for the link to come back.
    fn report_failed(&mut self, e: NetError) -> Result<bool> {
        if e.is_permanent() {
            return Err(e).context("the server refused this host");
        }
        self.net_failed(&e);
        Ok(false)
    }

    /// The server's answer to unit `unit_id`'s report sent at `sent`.
    fn heard(&mut self, unit_id: u64, sent: Sent, answer: Response) {
        let Some(h) = self.held.get_mut(&unit_id) else {
            return;
        };
        // Any answer but an abort keeps the scan's lease on its site.
        if let HeldState::Crawling { lease, .. } = &h.state {
            if !matches!(answer, Response::Abort { .. }) {
                lease.renew(sent);
            }
        }
        match answer {
            Response::Abort { reason } if reason == ABORT_HAND_OVER => {
                // Another host continues the scan: stop at a page
                // boundary and upload what was done with the frontier.
                tracing::info!(unit_id, "the scan is handed over to another host");
                if let HeldState::Crawling {
                    cancel,
                    hand_over,
                    last_progress,
                    ..
                } = &mut h.state
                {
                    hand_over.store(true, Ordering::Relaxed);
                    cancel.cancel();
                    // Heard: not due again while it stops at a page
                    // boundary (each report would bring every other
                    // scan's with it).
                    *last_progress = Instant::now();
                }
            }
            Response::Abort { reason } => {
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
            Response::Extend { deadline_ms } => {
                // The host is alive: its deadline moves; the scan goes on.
                h.deadline_ms = deadline_ms;
                if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                    *last_progress = Instant::now();
                }
                tracing::debug!(unit_id, deadline_ms, "deadline extended");
                if let Err(e) = self.home.spool().save_deadline(unit_id, deadline_ms) {
                    tracing::warn!(unit_id, "cannot spool the extended deadline: {e:#}");
                }
            }
            _ => {
                if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                    *last_progress = Instant::now();
                }
            }
        }
    }

    /// Every running scan's report, with how long since it last reported
    /// and whether its lease lapsed. Counted from the unit's start, its
    /// parts included.
    fn running_reports(&self) -> Vec<Running> {
        self.held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                HeldState::Crawling {
                    pages,
                    links,
                    bytes,
                    last_progress,
                    lease,
                    ..
                } => Some(Running {
                    report: ScanReport {
                        unit_id: *id,
                        pages: pages.load(Ordering::Relaxed),
                        links: links.load(Ordering::Relaxed),
                        bytes: bytes.load(Ordering::Relaxed),
                    },
                    since_report: last_progress.elapsed(),
                    lapsed: lease.is_lapsed(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// A running scan as its next report sees it.
#[derive(Clone, Copy, Debug)]
struct Running {
    report: ScanReport,
    /// Since its last answered report (a new scan: the interval, so it
    /// reports at once).
    since_report: Duration,
    lapsed: bool,
}

impl Running {
    /// Due every interval, and at once for a scan held because no report
    /// was answered within its lease.
    fn is_due(&self, interval: Duration) -> bool {
        self.since_report >= interval || self.lapsed
    }
}

/// The reports one `ScanProgressAll` carries: none until a scan is due;
/// then every scan due and every one that reported at least half an
/// interval ago (at most [`MAX_REPORTS_PER_REQUEST`]), so that the reports
/// of scans that started at different times fall due together and one
/// request carries them. A scan reports at most once a half interval and
/// at least once an interval, as before; the requests go from one a scan
/// an interval to about one a new scan.
fn batch(scans: &[Running], interval: Duration) -> Vec<ScanReport> {
    if !scans.iter().any(|s| s.is_due(interval)) {
        return Vec::new();
    }
    let mut joining: Vec<&Running> = scans
        .iter()
        .filter(|s| s.is_due(interval) || s.since_report >= interval / 2)
        .collect();
    // The most overdue first, should there be more than a request takes.
    joining.sort_by_key(|s| (!s.lapsed, std::cmp::Reverse(s.since_report)));
    joining.truncate(MAX_REPORTS_PER_REQUEST);
    joining.iter().map(|s| s.report).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(unit_id: u64, since_report_s: u64, lapsed: bool) -> Running {
        Running {
            report: ScanReport {
                unit_id,
                pages: unit_id,
                links: 0,
                bytes: 0,
            },
            since_report: Duration::from_secs(since_report_s),
            lapsed,
        }
    }

    fn units(reports: &[ScanReport]) -> Vec<u64> {
        reports.iter().map(|r| r.unit_id).collect()
    }

    #[test]
    fn reports_go_together_once_one_is_due() {
        let every = Duration::from_secs(10);
        // None due: no request.
        let scans = [running(1, 9, false), running(2, 3, false)];
        assert!(batch(&scans, every).is_empty());
        // One due: it and every scan half an interval old go, the most
        // overdue first; a scan that reported lately waits.
        let scans = [
            running(1, 10, false),
            running(2, 5, false),
            running(3, 4, false),
            running(4, 12, false),
        ];
        assert_eq!(units(&batch(&scans, every)), [4, 1, 2]);
        // A lapsed lease is due at once, and goes first.
        let scans = [running(1, 6, false), running(2, 1, true)];
        assert_eq!(units(&batch(&scans, every)), [2, 1]);
        // A new scan (reported an interval ago) reports at once.
        let scans = [running(1, 10, false), running(2, 2, false)];
        assert_eq!(units(&batch(&scans, every)), [1]);
        // A request carries at most its limit.
        let many: Vec<Running> = (0..MAX_REPORTS_PER_REQUEST as u64 + 5)
            .map(|i| running(i, 10 + i, false))
            .collect();
        let b = batch(&many, every);
        assert_eq!(b.len(), MAX_REPORTS_PER_REQUEST);
        assert!(!units(&b).contains(&0), "the least overdue wait");
    }

    /// Scans starting one every two seconds, each reporting as its batch
    /// says: every scan reports within each interval and at most once a
    /// half interval, in a fraction of the requests one a report takes.
    #[test]
    fn together_a_scan_reports_every_interval_in_few_requests() {
        let every = Duration::from_secs(10);
        // (unit, started at s, last report at s)
        let mut scans: Vec<(u64, u64, Option<u64>)> = Vec::new();
        let (mut requests, mut reports) = (0u32, 0u32);
        for t in 0..600u64 {
            if t % 2 == 0 {
                scans.push((t, t, None));
            }
            // Scans run 60 s.
            scans.retain(|s| t < s.1 + 60);
            let view: Vec<Running> = scans
                .iter()
                .map(|&(id, _, last)| running(id, last.map_or(10, |l| t - l), false))
                .collect();
            let b = batch(&view, every);
            if b.is_empty() {
                continue;
            }
            requests += 1;
            for r in b {
                reports += 1;
                let s = scans.iter_mut().find(|s| s.0 == r.unit_id).unwrap();
                if let Some(last) = s.2 {
                    assert!(
                        t - last >= 5,
                        "unit {} reported again after {} s",
                        s.0,
                        t - last
                    );
                }
                s.2 = Some(t);
            }
            for s in &scans {
                assert!(
                    s.2.is_some_and(|l| t - l < 10),
                    "unit {} overdue at {t}",
                    s.0
                );
            }
        }
        // One a report: 300 scans × (1 at start + 5 more in 60 s).
        assert!(reports >= 1_800, "{reports} reports");
        assert!(requests <= 320, "{requests} requests for {reports} reports");
    }
}
