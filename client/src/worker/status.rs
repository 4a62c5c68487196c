//! The live status `beebot status` reads: what the client is doing (running,
//! paused, offline, backing off), its scans with their pages and deadlines,
//! today's totals and the last error, written at most once a second.
//!
//! Deadlines are kept on the server's clock and shown on the local one
//! ([`local_deadline`]). Nothing here changes the units held.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::control::{self, Hold, LiveStatus, ScanStatus};
use crate::home::today_date;

use super::{HeldState, Worker};

/// The live status is written at most this often unless a scan ended or
/// its unit went.
const STATUS_EVERY: Duration = Duration::from_secs(1);

/// A unit's deadline (server clock, Unix ms) on the local clock.
/// `clock_offset_ms` = server time − local time.
pub fn local_deadline(deadline_ms: u64, clock_offset_ms: i64) -> SystemTime {
    let local_ms = (deadline_ms as i64 - clock_offset_ms).max(0) as u64;
    UNIX_EPOCH + Duration::from_millis(local_ms)
}

impl Worker {
    /// Note a problem for the status page (and as the last error).
    pub(super) fn problem(&mut self, kind: control::ProblemKind, detail: String) {
        control::note_problem(
            &mut self.problems,
            control::Problem {
                at_ms: control::unix_ms(SystemTime::now()),
                kind,
                detail: detail.clone(),
                times: 1,
            },
        );
        self.last_error = Some(detail);
    }

    /// Write the live status for `beebot status`: at once when a scan
    /// ended or the unit of an ended scan went (its result taken, or
    /// dropped), so that the status never lists a scan the server has done
    /// and its pending uploads agree with today's totals; else at most
    /// once a second ([`STATUS_EVERY`]: pages, rates, units that came or
    /// went unstarted, scans that started). A write replaces a file
    /// durably (about a dozen wineserver round trips under Wine): a write
    /// for every unit that came and every scan that started cost one more
    /// a second on a busy desktop.
    pub(super) fn write_status(&mut self) {
        if self.status_written.elapsed() < STATUS_EVERY && self.ended_shape() == self.status_shape {
            return;
        }
        self.write_status_now();
    }

    /// Today's totals, read from the spool only when the date is not the
    /// one last read or written; a read that failed is not kept (the next
    /// status reads again).
    fn today_totals(&mut self) -> crate::home::DayTotals {
        let date = today_date();
        match &self.today {
            Some(d) if d.date == date => d.clone(),
            _ => match self.home.days().today_read(&date) {
                Some(d) => {
                    self.today = Some(d.clone());
                    d
                }
                None => self.home.days().today(&date),
            },
        }
    }

    /// Count an accepted result (or part) in today's totals.
    pub(super) fn add_to_today(&mut self, pages: u64, links: u64) {
        match self.home.days().add_to_today(&today_date(), pages, links) {
            Ok(d) => self.today = Some(d),
            Err(e) => {
                // Read again at the next status: the file may hold it.
                self.today = None;
                tracing::warn!("cannot update today's totals: {e:#}");
            }
        }
    }

    /// The units held whose scans ended (their results waiting to upload,
    /// or aborted), in id order: a unit leaving it or joining it is
    /// written at once.
    fn ended_shape(&self) -> Vec<(u64, bool)> {
        let mut shape: Vec<(u64, bool)> = self
            .held
            .iter()
            .filter_map(|(id, h)| match h.state {
                HeldState::Waiting | HeldState::Crawling { .. } => None,
                HeldState::Finished => Some((*id, true)),
                HeldState::Aborted => Some((*id, false)),
            })
            .collect();
        shape.sort_unstable();
        shape
    }

    /// Write the live status now: a scan that ended leaves the list at
    /// once, not after the upload that follows.
    pub(super) fn write_status_now(&mut self) {
        self.status_written = Instant::now();
        self.status_shape = self.ended_shape();
        // The gate's hold is read and written under the lock a pause's own
        // rewrite takes: the file ends with the newer of the two.
        let _writing = control::status_lock();
        let now = SystemTime::now();
        let (state, until) = match self.opts.gate.as_ref().map(|g| g.hold()) {
            Some(Hold::Paused(u)) => ("paused", u),
            Some(Hold::OutsideWindow(u)) => ("outside-window", u),
            Some(Hold::OnBattery) => ("on-battery", None),
            _ if self.scans_resume_at.is_some_and(|t| Instant::now() < t) => {
                let wait = self
                    .scans_resume_at
                    .map_or(Duration::ZERO, |t| t - Instant::now());
                ("offline", Some(now + wait))
            }
            _ if Instant::now() < self.next_contact => {
                let wait = self.next_contact - Instant::now();
                ("backing-off", Some(now + wait))
            }
            _ if self.link.is_none() && self.failures > 0 => ("offline", None),
            _ if self.crawling() > 0 => ("running", None),
            _ => ("idle", None),
        };
        let scans = self
            .held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                HeldState::Crawling {
                    pages,
                    links,
                    queued,
                    started,
                    ..
                } => {
                    let p = pages.load(Ordering::Relaxed);
                    Some(ScanStatus {
                        unit_id: *id,
                        site: h.unit.unit.site.clone(),
                        pages: p,
                        links: links.load(Ordering::Relaxed),
                        pages_per_s: p as f64 / started.elapsed().as_secs_f64().max(0.001),
                        deadline_ms: Some(control::unix_ms(local_deadline(
                            h.deadline_ms,
                            self.clock_offset_ms,
                        ))),
                        queued: Some(queued.load(Ordering::Relaxed)),
                        page_cap: Some(u64::from(h.unit.unit.limits.max_pages)),
                    })
                }
                _ => None,
            })
            .collect();
        let today = self.today_totals();
        let s = LiveStatus {
            pid: std::process::id(),
            updated_ms: control::unix_ms(now),
            state: state.into(),
            until_ms: until.map(control::unix_ms),
            scans,
            today_pages: today.pages,
            today_links: today.links,
            today_results: today.results,
            pending_uploads: self
                .held
                .values()
                .filter(|h| matches!(h.state, HeldState::Finished))
                .count() as u64,
            last_error: self.last_error.clone(),
            started_ms: Some(control::process_started_ms()),
            concurrency: Some(self.concurrency()),
            slots_ceiling: Some(self.opts.slots),
            problems: self.problems.clone(),
        };
        control::write_status(&self.home.data, &s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::tests::unit;

    #[test]
    fn todays_totals_are_kept_from_what_was_written_and_a_failed_read_is_not() {
        let (dir, mut w) = crate::worker::tests::worker();
        let days = dir.path().join("spool").join("days.json");
        assert_eq!(w.today_totals().pages, 0);
        // A result accepted: the totals written are the ones shown.
        w.add_to_today(12, 120);
        assert_eq!(w.today_totals().pages, 12);
        // Kept: the file is not read again while the date holds.
        std::fs::write(&days, b"not json").unwrap();
        assert_eq!(w.today_totals().pages, 12);
        // A reading that fails is shown as nothing, not kept: the next
        // status reads the file again.
        w.today = None;
        assert_eq!(w.today_totals().pages, 0);
        assert!(w.today.is_none(), "a failed read is not kept");
        let date = today_date();
        std::fs::write(
            &days,
            format!(r#"[{{"date":"{date}","results":3,"pages":40,"links":400}}]"#),
        )
        .unwrap();
        assert_eq!(w.today_totals().pages, 40);
        // Another date: read again.
        w.today.as_mut().unwrap().date = "2000-01-01".into();
        assert_eq!(w.today_totals().pages, 40);
        assert_eq!(w.today.as_ref().unwrap().date, date);
    }

    #[test]
    fn the_status_is_written_once_a_second_and_at_once_when_a_scan_ended() {
        let (dir, mut w) = crate::worker::tests::worker();
        let path = control::status_path(dir.path());
        let written = |w: &mut Worker| {
            let _ = std::fs::remove_file(&path);
            w.write_status();
            path.exists()
        };
        assert!(written(&mut w), "the first pass writes");
        // A unit came and its scan is about to start: not within the second.
        let unit = unit();
        let key = beebot_shared::sign::generate_key();
        let signed = beebot_shared::sign::sign_unit(&key, &unit).unwrap();
        let held = crate::worker::Held {
            deadline_ms: unit.deadline_ms,
            needs_state: false,
            unit: crate::home::SpooledUnit { signed, unit },
            state: HeldState::Waiting,
            parts: Default::default(),
            part_due: None,
        };
        w.held.insert(1, held);
        assert!(!written(&mut w), "a unit that came waits for the second");
        // Its scan ended: at once.
        w.held.get_mut(&1).unwrap().state = HeldState::Finished;
        assert!(written(&mut w), "an ended scan is written at once");
        assert!(!written(&mut w));
        // Its result was taken: at once.
        w.held.remove(&1);
        assert!(written(&mut w), "a unit that went is written at once");
        assert!(!written(&mut w));
        // After the second, whatever changed.
        w.status_written -= STATUS_EVERY;
        assert!(written(&mut w));
    }

    #[test]
    fn deadlines_follow_the_server_clock_whatever_the_skew() {
        let unit = unit();
        const HOUR_MS: i64 = 3_600_000;
        // offset = server clock − client clock, learned from `Welcome`.
        for skew_hours in [-7i64, -1, 0, 2, 9] {
            let offset = -skew_hours * HOUR_MS;
            let local = local_deadline(unit.deadline_ms, offset);
            let want = UNIX_EPOCH
                + Duration::from_millis((unit.deadline_ms as i64 + skew_hours * HOUR_MS) as u64);
            assert_eq!(local, want, "client clock {skew_hours} h off");
            // The time left is the same on both clocks: ten minutes.
            let issued_local = unit.issued_ms as i64 + skew_hours * HOUR_MS;
            let left = local
                .duration_since(UNIX_EPOCH + Duration::from_millis(issued_local as u64))
                .expect("after issue");
            assert_eq!(left, Duration::from_secs(600));
        }
    }
}
