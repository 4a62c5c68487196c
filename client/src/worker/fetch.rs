//! Asking for work: when the buffer runs low (see [`super::work_wanted`]),
//! or the server hinted that work is available, request units, verify each
//! against the project key and spool it before holding it.
//!
//! A unit signed with another key or issued to another host is refused and
//! never held; answers whose every unit is refused back off like failures.
//! A full spool takes no new work. Nothing here starts a scan.
//!
//! A `retry_after` holds back only while no work comes: units received, or a
//! slot freed, and the buffer rule decides at once.

use crate::control::ProblemKind;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use beebot_shared::limits::MAX_RETRY_AFTER_SECS;
use beebot_shared::proto::{Request, Response};
use beebot_shared::sign::{self, SignedUnit};

use crate::home::{SpooledUnit, MAX_SPOOLED_UNITS};

use super::{backoff_bound, work_wanted};
use super::{Held, HeldState, Worker};

/// What the status says while the spool is over its cap.
const SPOOL_FULL: &str =
    "the spool is over its disk cap (spool_cap_mb): no new work until results are uploaded";

/// A host told that work is available (`WorkAvailable`) asks within a
/// random wait of up to this long, so connected hosts do not ask in lockstep.
pub const WORK_HINT_JITTER: Duration = Duration::from_secs(1);

/// How long a measure of the spool's size holds for [`Worker::spool_full`]
/// once the spool is at least half its cap: the work loop looks only when
/// a work request is due, and a measure lists the spool's files. A result
/// uploaded then has it measured again at the next due request; a scan's
/// own writes show within this.
pub const SPOOL_RECHECK: Duration = Duration::from_secs(1);

/// How long a measure holds while the spool is under half its cap. Units
/// spooled are added to it as they come, and a continuation's state or a
/// part written has it measured again; what it misses meanwhile is the
/// scans' own records logs and checkpoints, some MB a minute at most, far
/// from half the smallest cap (16 MB). Listing the spool costs every file a
/// question to the disk (under Wine, tens of wineserver round trips), so
/// a roomy spool is not listed at every unit that comes and result that
/// goes.
pub const SPOOL_RECHECK_ROOMY: Duration = Duration::from_secs(30);

/// How long a measure of `bytes` holds against a cap of `cap` bytes.
fn spool_recheck(bytes: u64, cap: u64) -> Duration {
    if bytes < cap / 2 {
        SPOOL_RECHECK_ROOMY
    } else {
        SPOOL_RECHECK
    }
}

/// Seconds before asking again when the server gave no work and no
/// `retry_after`, or answered something unexpected.
const DEFAULT_RETRY_AFTER_S: u64 = 30;

impl Worker {
    /// Ask for work when the buffer runs low. Returns false when the
    /// network failed.
    pub(super) async fn fetch_work(&mut self) -> Result<bool> {
        let Some(req) = self.work_request() else {
            return Ok(true);
        };
        match self.request(&req).await {
            Ok(Response::Work {
                units,
                retry_after_s,
                rounds_open,
                cancelled_units,
            }) => {
                self.drop_cancelled(&cancelled_units);
                self.server_idle = units.is_empty() && !rounds_open;
                if units.is_empty() {
                    let wait = retry_after_s
                        .unwrap_or(DEFAULT_RETRY_AFTER_S)
                        .min(MAX_RETRY_AFTER_SECS);
                    // A little jitter so hosts do not ask in lockstep.
                    let jitter = 1.0 + rand::random::<f64>() * 0.2;
                    self.next_request = Instant::now() + Duration::from_secs(wait).mul_f64(jitter);
                } else {
                    // Work again: a `retry_after` heard while the grid was
                    // idle no longer holds (the buffer rule decides).
                    self.next_request = Instant::now();
                }
                self.hold_offered(units)?;
                Ok(true)
            }
            Ok(other) => {
                tracing::warn!("unexpected answer to a work request: {other:?}");
                self.next_request = Instant::now() + Duration::from_secs(DEFAULT_RETRY_AFTER_S);
                Ok(true)
            }
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(false)
            }
        }
    }

    /// A full spool takes no new work until uploads free it (said once in
    /// the log and the status).
    fn spool_full(&mut self) -> bool {
        if self.opts.spool_cap_bytes == 0 {
            return false;
        }
        let cap = self.opts.spool_cap_bytes;
        let bytes = match self.spool_measured {
            Some((at, bytes)) if at.elapsed() < spool_recheck(bytes, cap) => bytes,
            _ => {
                let bytes = self.home.spool().spool_bytes();
                self.spool_measured = Some((Instant::now(), bytes));
                bytes
            }
        };
        if bytes < cap {
            return false;
        }
        if self.last_error.as_deref() != Some(SPOOL_FULL) {
            tracing::warn!("{SPOOL_FULL}");
            self.problem(ProblemKind::SpoolFull, SPOOL_FULL.into());
        }
        true
    }

    /// `bytes` were spooled: the measure counts them at once.
    fn spool_grew(&mut self, bytes: u64) {
        if let Some((_, measured)) = &mut self.spool_measured {
            *measured = measured.saturating_add(bytes);
        }
    }

    /// Files left the spool: a spool at least half full is measured again
    /// before the next work request (the room may be what it waits for); a
    /// roomy one keeps its measure, now more than it holds.
    pub(super) fn spool_shrank(&mut self) {
        let cap = self.opts.spool_cap_bytes;
        if self.spool_measured.is_some_and(|(_, b)| b >= cap / 2) {
            self.spool_measured = None;
        }
    }

    /// The work request to send now, or `None` when the buffer holds enough
    /// (or it is too early to ask again) and no hint came.
    fn work_request(&mut self) -> Option<Request> {
        // The server pushed `WorkAvailable` (a round started or was
        // cancelled): ask within a moment, whatever the buffer holds.
        if self.link.as_ref().is_some_and(|l| l.take_work_hint()) {
            let wait = WORK_HINT_JITTER.mul_f64(rand::random::<f64>());
            self.hinted_at = Some(Instant::now() + wait);
        }
        let hinted = self.hinted_at.is_some_and(|t| Instant::now() >= t);
        let unfinished = self
            .held
            .values()
            .filter(|h| matches!(h.state, HeldState::Waiting | HeldState::Crawling { .. }))
            .count();
        // Hold enough units per slot that no slot idles for a round trip, and
        // the buffer's seconds of work (see `work_wanted`), for the slots
        // the controller runs now.
        let wanted = work_wanted(
            self.concurrency(),
            unfinished,
            self.job_s,
            self.round_trip_s,
            self.opts.buffer_min_s,
            self.opts.buffer_seconds,
        )
        .filter(|_| self.held.len() < MAX_SPOOLED_UNITS && self.gate_open());
        if !hinted && (wanted.is_none() || Instant::now() < self.next_request) {
            return None;
        }
        // Measured only when a request is due (a measure lists the spool);
        // a full spool keeps the hint for when it frees.
        if self.spool_full() {
            return None;
        }
        // Hinted with a full buffer (or the gate shut): nothing asked for,
        // but the answer names the held units of a cancelled round.
        let (want_seconds, free_slots) = wanted.unwrap_or((0, 0));
        self.hinted_at = None;
        // Near the end of a window, ask only for work that fits in it.
        let want_seconds = match self.opts.gate.as_ref().and_then(|g| g.seconds_left_open()) {
            Some(left) => want_seconds.min(left),
            None => want_seconds,
        };
        Some(Request::RequestWork {
            want_seconds,
            free_slots,
            units_held: self.units_held(),
            open_windows: self.opts.gate.as_ref().and_then(|g| g.open_intervals()),
        })
    }

    /// Verify each offered unit, spool and hold the ones signed by the
    /// project for this host; refuse the others. An answer whose every unit
    /// is refused backs off.
    fn hold_offered(&mut self, units: Vec<SignedUnit>) -> Result<()> {
        let offered = units.len();
        let refused_before = self.stats.units_refused;
        for signed in units {
            match sign::verify_unit(&self.project_key, &signed) {
                Ok(unit) if unit.host_id == self.enrolment.host_id => {
                    let s = SpooledUnit { signed, unit };
                    let written = self.home.spool().spool_unit(&s)?;
                    self.spool_grew(written);
                    self.stats.units_received += 1;
                    self.refusals = 0;
                    self.held.insert(
                        s.unit.unit_id,
                        Held {
                            deadline_ms: s.unit.deadline_ms,
                            needs_state: s.unit.resume.is_some(),
                            unit: s,
                            state: HeldState::Waiting,
                            parts: Default::default(),
                            part_due: None,
                        },
                    );
                }
                Ok(unit) => {
                    self.stats.units_refused += 1;
                    tracing::error!(
                        unit_id = unit.unit_id,
                        "refused a unit issued to another host"
                    );
                }
                Err(e) => {
                    self.stats.units_refused += 1;
                    tracing::error!("refused a work unit: {e}");
                }
            }
        }
        if offered > 0 && self.stats.units_refused - refused_before == offered as u64 {
            self.back_off_refusals();
        }
        Ok(())
    }

    /// Nothing usable (a server signing with another key than the one
    /// joined, or sending others' units): back off like a failure instead of
    /// asking again at once, longer each time until a usable unit arrives.
    fn back_off_refusals(&mut self) {
        self.refusals = self.refusals.saturating_add(1);
        let wait = self.backoff(self.refusals);
        tracing::warn!(
            "every unit offered was refused; asking again in {:.1}s (backoff bound {}s)",
            wait.as_secs_f64(),
            backoff_bound(self.refusals, self.opts.backoff_base, self.opts.backoff_cap).as_secs()
        );
        self.next_request = Instant::now() + wait;
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    #[test]
    fn a_full_spool_asks_for_no_work_and_is_measured_only_when_asking() {
        let (dir, mut w) = super::super::tests::worker();
        w.opts.spool_cap_bytes = 4096;
        // Room in the spool: the request goes, measured on the way.
        assert!(w.work_request().is_some());
        assert!(w.spool_measured.is_some(), "measured before asking");

        // Nothing due (asked a moment ago): the spool is not listed.
        w.spool_measured = None;
        w.next_request = Instant::now() + Duration::from_secs(60);
        assert!(w.work_request().is_none());
        assert!(w.spool_measured.is_none(), "listed with no request due");

        // Results waiting for upload fill it: due, but not asked.
        let results = dir.path().join("spool").join("results");
        std::fs::create_dir_all(&results).unwrap();
        std::fs::write(results.join("7.result"), vec![0u8; 5000]).unwrap();
        w.next_request = Instant::now();
        assert!(w.work_request().is_none(), "a full spool asks for nothing");
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(5000));
        // A hint (a round started) waits for room, not lost.
        w.hinted_at = Some(Instant::now());
        assert!(w.work_request().is_none());
        assert!(w.hinted_at.is_some(), "the hint is kept while full");

        // Uploaded: room again, and the hinted request goes.
        std::fs::remove_file(results.join("7.result")).unwrap();
        w.spool_measured = None;
        assert!(w.work_request().is_some());
        assert!(w.hinted_at.is_none());
    }

    #[test]
    fn a_roomy_spool_is_listed_every_half_minute_and_a_half_full_one_every_second() {
        let (dir, mut w) = super::super::tests::worker();
        w.opts.spool_cap_bytes = 100_000;
        let results = dir.path().join("spool").join("results");
        std::fs::create_dir_all(&results).unwrap();
        std::fs::write(results.join("1.lf"), vec![0u8; 10_000]).unwrap();
        assert!(w.work_request().is_some());
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(10_000));

        // Roomy: files written since are not listed, units spooled are added,
        // and a result that leaves keeps the measure (more than it holds).
        std::fs::write(results.join("2.lf"), vec![0u8; 30_000]).unwrap();
        w.spool_grew(2_000);
        w.spool_shrank();
        assert!(w.work_request().is_some());
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(12_000));

        // Half a minute on, listed again: now half full.
        w.spool_measured = Some((Instant::now() - super::SPOOL_RECHECK_ROOMY, 12_000));
        assert!(w.work_request().is_some());
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(40_000));
        std::fs::write(results.join("3.lf"), vec![0u8; 10_000]).unwrap();
        w.spool_measured = Some((Instant::now() - super::SPOOL_RECHECK, 40_000));
        assert!(w.work_request().is_some());
        assert_eq!(
            w.spool_measured.map(|(_, b)| b),
            Some(40_000),
            "roomy: held"
        );
        w.spool_measured = Some((Instant::now() - super::SPOOL_RECHECK_ROOMY, 40_000));
        assert!(w.work_request().is_some());
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(50_000), "half full");
        std::fs::write(results.join("3.lf"), vec![0u8; 50_000]).unwrap();
        w.spool_measured = Some((Instant::now(), 50_000));
        assert!(w.work_request().is_some());
        assert_eq!(
            w.spool_measured.map(|(_, b)| b),
            Some(50_000),
            "within a second"
        );
        w.spool_measured = Some((Instant::now() - super::SPOOL_RECHECK, 50_000));
        assert!(w.work_request().is_some());
        assert_eq!(
            w.spool_measured.map(|(_, b)| b),
            Some(90_000),
            "a second later"
        );

        // At least half full: a second later it is listed again, a unit
        // past the cap stops the asking, and a result leaving has it listed
        // again at once.
        w.spool_measured = Some((Instant::now(), 90_000));
        w.spool_grew(20_000);
        assert!(
            w.work_request().is_none(),
            "over the cap by the units spooled"
        );
        std::fs::remove_file(results.join("3.lf")).unwrap();
        w.spool_shrank();
        assert!(w.spool_measured.is_none());
        assert!(w.work_request().is_some());
        assert_eq!(w.spool_measured.map(|(_, b)| b), Some(40_000));
    }
}
