//! The work-fetch rules of a client: how much work to hold (BOINC-style
//! buffer of seconds, bounded units per slot) and how long to wait between
//! failed attempts (exponential backoff with full jitter). Pure functions of
//! their arguments, so the client's work loop, the server's simulator and the
//! load generator all play the same rules; nothing here keeps time or state.
//!
//! The client passes its effective concurrency (the sites its controller scans
//! at once now, not its `slots` ceiling) as the slots.

use std::time::Duration;

use crate::limits::{MAX_SLOTS, MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_SLOT};

/// Default least seconds of work held, like BOINC's "store at least", scaled
/// to rounds that last hours rather than days.
pub const DEFAULT_BUFFER_MIN_S: u64 = 600;
/// Default most seconds of work held (BOINC's "store up to an additional").
pub const DEFAULT_BUFFER_MAX_S: u64 = 3600;

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

/// A top-up (the reserve covered, the buffer's seconds short of the
/// least) waits until it can ask for one unit per this many slots at
/// once: topping up one unit at every scan's end cost a work request a
/// unit on a desktop scanning many short sites.
pub const TOP_UP_SLOTS_PER_UNIT: usize = 4;

/// Units a top-up asks for at least: a quarter of the slots, at least one.
pub fn top_up_batch(slots: usize) -> usize {
    slots.div_ceil(TOP_UP_SLOTS_PER_UNIT).max(1)
}

/// What to ask the server for, or `None` when the buffer is full enough:
/// `(want_seconds, free_slots)`. `unfinished` counts units held and not yet
/// scanned to the end; `job_s` is this client's average scan time. A
/// reserve short of a unit per slot's round trip is asked for at once; a
/// top-up toward [`MAX_UNITS_PER_SLOT`] a slot (at most
/// [`MAX_UNITS_HELD_PER_HOST`], what the server lets a host hold) only
/// when it is at least [`top_up_batch`] units, and then for all of it.
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
    // As many as the server lets a host hold: asking past it gets nothing.
    let most = (slots * MAX_UNITS_PER_SLOT).min(MAX_UNITS_HELD_PER_HOST);
    let target = target.min(most);
    let units = if unfinished < target {
        target - unfinished
    } else if held_s.is_some_and(|h| h < min_s as f64)
        && most.saturating_sub(unfinished) >= top_up_batch(slots)
    {
        most - unfinished
    } else {
        0
    };
    if units == 0 {
        return None;
    }
    let want = (max_s.max(min_s) as f64 - held_s.unwrap_or(0.0)).max(0.0) as u64;
    Some((want, units as u32))
}

/// Exponential backoff with full jitter: a random wait in `[0, min(cap, base·2^n)]`.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration, unit_random: f64) -> Duration {
    backoff_bound(attempt, base, cap).mul_f64(unit_random.clamp(0.0, 1.0))
}

/// The longest wait of backoff attempt `attempt`: `min(cap, base·2^n)`.
pub fn backoff_bound(attempt: u32, base: Duration, cap: Duration) -> Duration {
    base.saturating_mul(1u32 << attempt.min(20)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Reserve full but short scans leave less than the minimum: up to
        // the per-slot cap.
        assert_eq!(
            work_wanted(2, 4, Some(10.0), 0.05, 600, 3600),
            Some((3580, 4))
        );
        assert_eq!(
            work_wanted(2, 2 * MAX_UNITS_PER_SLOT, Some(10.0), 0.05, 600, 3600),
            None
        );
    }

    #[test]
    fn a_buffer_of_short_scans_is_topped_up_in_batches_not_a_unit_a_scan() {
        // 40 sites at once, 45 s scans: a reserve of 80, up to 128 held
        // (160 would be 4 a slot; the server lets a host hold 128).
        let (slots, job) = (40u32, Some(45.0));
        let most = MAX_UNITS_HELD_PER_HOST;
        assert_eq!(most, 128);
        assert_eq!(top_up_batch(40), 10);
        // Full: nothing. Scans end one by one: nothing until ten ended.
        for ended in 0..10 {
            assert_eq!(
                work_wanted(slots, most - ended, job, 0.05, 600, 3600),
                None,
                "{ended} ended"
            );
        }
        // Ten ended: all ten at once.
        assert_eq!(
            work_wanted(slots, most - 10, job, 0.05, 600, 3600).map(|w| w.1),
            Some(10)
        );
        // Short of the reserve: asked at once, whatever the batch.
        assert_eq!(
            work_wanted(slots, 79, job, 0.05, 600, 3600).map(|w| w.1),
            Some(1)
        );
        // Over a thousand scans' ends: a request every tenth.
        let (mut held, mut requests) = (most, 0);
        for _ in 0..1000 {
            held -= 1;
            if let Some((_, units)) = work_wanted(slots, held, job, 0.05, 600, 3600) {
                requests += 1;
                held += units as usize;
            }
        }
        assert_eq!(requests, 100);
        // One slot: a unit is a batch.
        assert_eq!(top_up_batch(1), 1);
        assert_eq!(
            work_wanted(1, 3, Some(10.0), 0.05, 600, 3600).map(|w| w.1),
            Some(1)
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
