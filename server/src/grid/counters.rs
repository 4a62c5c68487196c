//! What the grid counts for the server's metrics: plain totals of units
//! issued, replicated, accepted, expired, recalled and aborted and of the pages and
//! links accepted ([`GridCounters`], kept as the grid changes), and a
//! [`GridSnapshot`] of the gauges (jobs by state, active hosts, a round's
//! progress) computed on demand.
//!
//! Invariants: counting never changes what the grid decides; the counters
//! only grow while the grid is open (they start at zero when it opens: a
//! scraper sees a counter reset, as after any restart). It never reads a
//! clock (the snapshot's time is an argument) and never formats anything:
//! `crate::metrics` turns these numbers into metric families.

use super::{Grid, GridStatus};
use crate::model::{JobState, RoundRecord, RoundState};

/// A host seen within this long counts as active in the last hour.
pub const ACTIVE_HOUR_MS: u64 = 3600 * 1000;
/// A host seen within this long counts as active in the last day.
pub const ACTIVE_DAY_MS: u64 = 24 * 3600 * 1000;

/// Totals since the grid opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GridCounters {
    /// Units signed and handed to a host (replicas included).
    pub units_issued: u64,
    /// Of those, copies of a job that was already running (hand-overs and
    /// replicas the scheduler asked for).
    pub units_replicated: u64,
    /// Uploads accepted (a segment or a complete result).
    pub units_accepted: u64,
    /// Parts of running scans accepted (each a segment its job goes on
    /// from, the unit still running).
    pub parts_accepted: u64,
    /// Units whose deadline passed before their host answered, or whose
    /// scan was taken back when its host stopped reporting.
    pub units_expired: u64,
    /// Units taken back, not started, while their host was not heard from
    /// (charged to neither host nor job).
    pub units_recalled: u64,
    /// Running units stopped by the grid (another copy went further, a
    /// cancelled round, an exclusion, a host found lying).
    pub units_aborted: u64,
    /// Pages of the accepted uploads.
    pub pages_accepted: u64,
    /// Links of the accepted uploads.
    pub links_accepted: u64,
}

/// Jobs by state, in [`JobState`]'s order, and those awaiting validation
/// (a count across states, not a state of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JobsByState {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub awaiting_validation: u64,
}

/// The grid's counters and gauges at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GridSnapshot {
    pub counters: GridCounters,
    /// Jobs of the rounds [`Grid::status`] counts (the running rounds, or
    /// the newest when none runs), by state.
    pub jobs: JobsByState,
    pub rounds_running: u64,
    /// Hosts (not revoked, not left) seen within [`ACTIVE_HOUR_MS`].
    pub hosts_active_hour: u64,
    /// Hosts (not revoked, not left) seen within [`ACTIVE_DAY_MS`].
    pub hosts_active_day: u64,
    /// Share of jobs over (done, failed or cancelled) of the oldest running
    /// round, or when none runs of the newest round; `None` before any round.
    pub round_progress: Option<f64>,
}

impl Grid {
    /// Totals since the grid opened.
    pub fn counters(&self) -> GridCounters {
        self.counters
    }

    /// The counters and gauges at `now_ms`: one pass over the hosts and the
    /// counted rounds' jobs (what [`Grid::status`] reads).
    pub fn metrics_snapshot(&self, now_ms: u64) -> GridSnapshot {
        self.metrics_snapshot_of(&self.status(), now_ms)
    }

    /// [`Grid::metrics_snapshot`] with the [`Grid::status`] already taken
    /// (one pass over the jobs, not two).
    pub fn metrics_snapshot_of(&self, status: &GridStatus, now_ms: u64) -> GridSnapshot {
        let seen_within = |ms: u64| {
            self.hosts
                .values()
                .filter(|h| h.state() == "active" && now_ms.saturating_sub(h.last_seen_ms) <= ms)
                .count() as u64
        };
        let progress_of = self
            .rounds
            .values()
            .find(|r| r.state == RoundState::Running)
            .or_else(|| self.rounds.values().next_back());
        GridSnapshot {
            counters: self.counters,
            jobs: JobsByState {
                queued: status.jobs_queued as u64,
                running: status.jobs_running as u64,
                done: status.jobs_done as u64,
                failed: status.jobs_failed as u64,
                cancelled: status.jobs_cancelled as u64,
                awaiting_validation: status.jobs_awaiting_validation as u64,
            },
            rounds_running: status.rounds_running as u64,
            hosts_active_hour: seen_within(ACTIVE_HOUR_MS),
            hosts_active_day: seen_within(ACTIVE_DAY_MS),
            round_progress: progress_of.map(|r| self.progress_of(r)),
        }
    }

    /// Share of `round`'s jobs that are over; a round without jobs is whole.
    fn progress_of(&self, round: &RoundRecord) -> f64 {
        let total = round.job_ids.len();
        if total == 0 {
            return 1.0;
        }
        let over = round
            .job_ids
            .iter()
            .filter_map(|j| self.jobs.get(j))
            .filter(|j| {
                matches!(
                    j.state,
                    JobState::Done | JobState::Failed | JobState::Cancelled
                )
            })
            .count();
        over as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use crate::grid::testkit::*;

    #[test]
    fn a_fresh_round_is_counted_as_queued_and_not_begun() {
        let (fx, _round) = Fx::with_round(3, 2);
        let s = fx.grid.metrics_snapshot(T0);
        assert_eq!(s.jobs.queued, 3);
        assert_eq!(s.rounds_running, 1);
        assert_eq!(s.round_progress, Some(0.0));
        assert_eq!(s.counters, super::GridCounters::default());
    }

    #[test]
    fn issued_accepted_and_expired_units_are_counted_with_their_pages() {
        let (mut fx, round) = Fx::with_round(2, 3);
        let host = fx.host();
        let (units, _) = fx.ask(host, 2, &[], T0 + 1);
        assert_eq!(units.len(), 2);
        let c = fx.grid.counters();
        assert_eq!((c.units_issued, c.units_replicated), (2, 0));
        fx.upload(host, &units[0], 5, T0 + 2);
        let c = fx.grid.counters();
        assert_eq!(c.units_accepted, 1);
        assert_eq!((c.pages_accepted, c.links_accepted), (3, 5));
        // The second unit's deadline passes: expired, then issued again.
        let late = fx.attempt(units[1].unit_id).deadline_ms + 1;
        assert_eq!(fx.grid.tick(late).expect("tick"), 1);
        assert_eq!(fx.grid.counters().units_expired, 1);
        let again = fx.one(host, &[], late + 1);
        fx.upload(host, &again, 1, late + 2);
        let s = fx.grid.metrics_snapshot(late + 3);
        assert_eq!(s.counters.units_issued, 3);
        assert_eq!(s.counters.units_accepted, 2);
        assert_eq!(s.round_progress, Some(1.0));
        assert_eq!(s.jobs.done, 2);
        assert_eq!((s.hosts_active_hour, s.hosts_active_day), (1, 1));
        assert_eq!(fx.round_state(round), crate::model::RoundState::Done);
        // Over an hour later the host is active in the last day only.
        let s = fx.grid.metrics_snapshot(late + super::ACTIVE_HOUR_MS + 10);
        assert_eq!((s.hosts_active_hour, s.hosts_active_day), (0, 1));
    }

    #[test]
    fn a_cancelled_round_is_over_and_its_jobs_cancelled() {
        let (mut fx, round) = Fx::with_round(2, 3);
        fx.grid.cancel_round(round, T0 + 1).expect("cancel");
        let s = fx.grid.metrics_snapshot(T0 + 2);
        assert_eq!(s.jobs.cancelled, 2);
        assert_eq!(s.rounds_running, 0);
        assert_eq!(s.round_progress, Some(1.0));
    }
}
