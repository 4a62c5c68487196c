//! The work loop of `beebot run`: keep a buffer of signed units, crawl up to
//! `slots` of them at once on threads, spool each result, upload it until the
//! server acknowledges it, and report progress. Network trouble never stops
//! the scans in hand: the loop reconnects with exponential backoff and full
//! jitter, honouring the server's `retry_after`.
//!
//! A unit's deadline never stops its scan: the server's `Extend` moves it
//! (shown by `beebot status`); the scan stops early only on the server's
//! `Abort`, the round's time budget, or the client stopping. Each running
//! scan checkpoints to the spool (see [`crate::checkpoint`]); a restarted
//! client resumes from there, and a continuation unit (`resume`) starts from
//! the state the server keeps (`FetchState`), checked against its signed
//! digest. A scan that stopped early uploads its state with its records.
//! On SIGTERM or Ctrl-C every scan is checkpointed and the loop returns
//! within [`SHUTDOWN_GRACE`] plus the writes, whatever requests are in flight.
//!
//! Its rooms: `run` (the loop), `held` (the units held), `fetch`
//! (asking for work), `continuation` (fetched states), `scan` (scans in
//! flight), `finish` (a scan's end and stopping), `progress` (reports),
//! `upload` (results), `link` (the server link), `status` (the live status)
//! and `join`. This module keeps the buffer and backoff arithmetic.

mod continuation;
mod fetch;
mod finish;
mod held;
mod join;
mod link;
mod progress;
mod run;
mod scan;
mod status;
mod upload;

use std::sync::Arc;
use std::time::Duration;

use beebot_shared::limits::MAX_SLOTS;

use crate::control::Gate;
use crate::crawler::CrawlerConfig;

pub use continuation::{
    check_state, start_from, state_answer, StartFrom, StateAnswer, StateRefused,
};
pub use fetch::WORK_HINT_JITTER;
pub use finish::{OFFLINE_BACKOFF_BASE, OFFLINE_BACKOFF_CAP, SHUTDOWN_GRACE, SHUTDOWN_WRITES};
pub use join::join;
pub use run::run;
pub use scan::{crawl_spec, start_order};
pub use status::local_deadline;

/// Settings of the work loop.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Exit once the server has no more work and every result is delivered.
    pub once: bool,
    /// Sites scanned at once.
    pub slots: u32,
    /// Most seconds of work to hold (BOINC's "up to" buffer): the request's `want_seconds`.
    pub buffer_seconds: u64,
    /// Least seconds of work to hold (BOINC's "at least" buffer): below it the
    /// client asks for one more unit even when every slot has its reserve.
    pub buffer_min_s: u64,
    /// Extra pause after every page: makes this client slower on purpose
    /// (tests and demos of scheduling; zero in real use).
    pub throttle: Duration,
    /// Backoff bounds for reconnecting.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How often a running unit reports progress.
    pub progress_interval: Duration,
    pub crawler: CrawlerConfig,
    /// Holds scans while paused or outside the time window (`None`: always run).
    /// With a gate, the control socket for `beebot pause`/`resume` is served.
    pub gate: Option<Arc<Gate>>,
    /// Download cap over all scans, KB/s (0: none).
    pub bandwidth_kbps: u64,
    /// Disk the spool may use before no new work is taken, bytes (0: no cap).
    pub spool_cap_bytes: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            once: false,
            slots: 2,
            buffer_seconds: DEFAULT_BUFFER_MAX_S,
            buffer_min_s: DEFAULT_BUFFER_MIN_S,
            throttle: Duration::ZERO,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            progress_interval: Duration::from_secs(10),
            crawler: CrawlerConfig::default(),
            gate: None,
            bandwidth_kbps: 0,
            spool_cap_bytes: 0,
        }
    }
}

/// Default least seconds of work held, like BOINC's "store at least", scaled
/// to rounds that last hours rather than days.
pub const DEFAULT_BUFFER_MIN_S: u64 = 600;
/// Default most seconds of work held (BOINC's "store up to an additional").
pub const DEFAULT_BUFFER_MAX_S: u64 = 3600;
/// Most units held per slot, whatever the buffer asks: a hoarding host makes
/// the round wait for it (the server gives no more either).
pub use beebot_shared::limits::MAX_UNITS_PER_SLOT;
/// Weight of the newest figure in the client's running averages (scan time, round trip).
const AVERAGE_WEIGHT: f64 = 0.3;

/// Units to hold per slot: the one scanning plus enough to cover a round
/// trip to the server, `ceil(round_trip / job_time) + 1`, at least two.
pub fn units_per_slot(round_trip_s: f64, job_s: Option<f64>) -> usize {
    let cover = match job_s {
        Some(j) if j > 0.0 && round_trip_s.is_finite() => {
            (round_trip_s.max(0.0) / j)
                .ceil()
                .min(MAX_UNITS_PER_SLOT as f64) as usize
                + 1
        }
        _ => 2,
    };
    cover.clamp(2, MAX_UNITS_PER_SLOT)
}

/// What to ask the server for, or `None` when the buffer is full enough:
/// `(want_seconds, free_slots)`. `unfinished` counts units held and not yet
/// scanned to the end; `job_s` is this client's average scan time.
pub fn work_wanted(
    slots: u32,
    unfinished: usize,
    job_s: Option<f64>,
    round_trip_s: f64,
    min_s: u64,
    max_s: u64,
) -> Option<(u64, u32)> {
    let slots = slots.clamp(1, MAX_SLOTS) as usize;
    let target = slots * units_per_slot(round_trip_s, job_s);
    // Seconds of work held: the units spread over the slots.
    let held_s = job_s.map(|j| unfinished as f64 * j / slots as f64);
    let units = if unfinished < target {
        target - unfinished
    } else if held_s.is_some_and(|h| h < min_s as f64) && unfinished < slots * MAX_UNITS_PER_SLOT {
        1
    } else {
        0
    };
    if units == 0 {
        return None;
    }
    let want = (max_s.max(min_s) as f64 - held_s.unwrap_or(0.0)).max(0.0) as u64;
    Some((want, units as u32))
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub units_received: u64,
    pub units_refused: u64,
    pub scans_finished: u64,
    pub uploads_accepted: u64,
    pub uploads_duplicate: u64,
    pub uploads_rejected: u64,
    pub pages: u64,
    pub links: u64,
}

/// Exponential backoff with full jitter: a random wait in `[0, min(cap, base·2^n)]`.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration, unit_random: f64) -> Duration {
    backoff_bound(attempt, base, cap).mul_f64(unit_random.clamp(0.0, 1.0))
}

/// The longest wait of backoff attempt `attempt`: `min(cap, base·2^n)`.
pub fn backoff_bound(attempt: u32, base: Duration, cap: Duration) -> Duration {
    base.saturating_mul(1u32 << attempt.min(20)).min(cap)
}

use beebot_shared::clock::now_ms;

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::sign::WorkUnit;

    /// A unit of one page, for the tests of the worker's modules.
    pub(super) fn unit() -> WorkUnit {
        WorkUnit {
            unit_id: 1,
            round_id: 1,
            job_id: 1,
            host_id: 1,
            site: "a.test".into(),
            seed_url: "http://a.test/".into(),
            scope: beebot_shared::scope::Scope::Host,
            limits: beebot_shared::sign::UnitLimits {
                max_pages: 1,
                max_depth: 1,
                delay_ms: 0,
                max_page_bytes: 1,
                max_seconds: 60,
                max_crawl_delay_ms: 1000,
            },
            issued_ms: 1_700_000_000_000,
            deadline_ms: 1_700_000_600_000,
            user_agent: "t".into(),
            resume: None,
            exclusions: Vec::new(),
        }
    }

    #[test]
    fn the_buffer_covers_a_round_trip_and_its_seconds() {
        // Unknown scan time: two units per slot.
        assert_eq!(units_per_slot(0.05, None), 2);
        // Scans far longer than a round trip: one scanning, one in reserve.
        assert_eq!(units_per_slot(0.05, Some(30.0)), 2);
        // Scans shorter than a round trip: enough to cover it, bounded.
        assert_eq!(units_per_slot(1.0, Some(0.4)), 4);
        assert_eq!(units_per_slot(100.0, Some(0.1)), MAX_UNITS_PER_SLOT);
        // Empty client, two slots: four units, the whole buffer's seconds.
        assert_eq!(work_wanted(2, 0, None, 0.05, 600, 3600), Some((3600, 4)));
        // Three held of four: one more; the seconds held are taken off.
        assert_eq!(
            work_wanted(2, 3, Some(100.0), 0.05, 600, 3600),
            Some((3450, 1))
        );
        // Reserve full and 10 min held: nothing.
        assert_eq!(work_wanted(2, 4, Some(300.0), 0.05, 600, 3600), None);
        // Reserve full but short scans leave less than the minimum: one more,
        // up to the per-slot cap.
        assert_eq!(
            work_wanted(2, 4, Some(10.0), 0.05, 600, 3600),
            Some((3580, 1))
        );
        assert_eq!(
            work_wanted(2, 2 * MAX_UNITS_PER_SLOT, Some(10.0), 0.05, 600, 3600),
            None
        );
    }

    #[test]
    fn full_jitter_spreads_a_herd_over_the_window() {
        // 200 hosts after one failure: waits spread over [0, 2 s], not bunched.
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(300);
        let mut buckets = [0usize; 8];
        for i in 0..200u32 {
            let r = (f64::from(i) + 0.5) / 200.0;
            let d = backoff_delay(1, base, cap, r);
            assert!(d <= Duration::from_secs(2));
            buckets[(d.as_secs_f64() / 0.25) as usize % 8] += 1;
        }
        assert!(buckets.iter().all(|&b| b == 25), "{buckets:?}");
    }

    #[test]
    fn backoff_is_bounded_and_grows() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(60);
        assert_eq!(backoff_delay(0, base, cap, 1.0), Duration::from_secs(1));
        assert_eq!(backoff_delay(3, base, cap, 1.0), Duration::from_secs(8));
        assert_eq!(backoff_delay(30, base, cap, 1.0), cap);
        assert_eq!(backoff_delay(5, base, cap, 0.0), Duration::ZERO);
        assert!(backoff_delay(5, base, cap, 0.5) <= Duration::from_secs(16));
    }
}
