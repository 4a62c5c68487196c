//! The scheduler's shared rules: the cost model (seconds per page,
//! expected sizes and times, learned speeds, availability and being online),
//! what a host's held units leave free (its slot schedule), and deadlines
//! (issued, extended, and whether a job fits a host's open windows).
//!
//! Invariants: pure functions of their arguments; time is always an
//! argument. They never look at a queue or decide anything: the policies do.

use serde::{Deserialize, Serialize};

use super::{
    BUSY_ONLINE_WINDOW_MS, DEFAULT_HOST_PAGES_PER_S, DEFAULT_SITE_PAGES, MIN_AVAILABILITY,
    ONLINE_WINDOW_MS, OVERDUE_SHARE, SPEED_WEIGHT,
};

/// Figures of a site's last finished scan: the scheduler's size estimate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteStats {
    pub round_id: u64,
    pub pages: u64,
    pub bytes: u64,
    pub links: u64,
    pub seconds: f64,
}

// ---- estimates ----

/// Seconds one slot of a host needs per page: its speed, never faster than
/// the politeness delay allows.
pub fn seconds_per_page(pages_per_s: Option<f64>, delay_s: f64) -> f64 {
    let speed = pages_per_s
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_HOST_PAGES_PER_S);
    (1.0 / speed).max(delay_s.max(0.0))
}

/// Seconds one slot of a host needs per page of a site whose responses
/// take `pace_s` on average ([`site_pace_s`]), spread as an exponential
/// does: each page the host's own time plus the response, or the delay
/// when that is longer, on average. A slow site costs a slow host more
/// than a fast one, and a fast host under the delay a little more than
/// the delay (the responses that outlast it).
pub fn seconds_per_page_at(pages_per_s: Option<f64>, delay_s: f64, pace_s: f64) -> f64 {
    let own = seconds_per_page(pages_per_s, 0.0);
    polite_page_s(own, delay_s.max(0.0), pace_s.clamp(0.0, MAX_SITE_PACE_S))
}

/// E[max(delay, own + R)] for R exponential of mean `pace`.
fn polite_page_s(own: f64, delay: f64, pace: f64) -> f64 {
    if pace <= 0.0 {
        own.max(delay)
    } else if own >= delay {
        own + pace
    } else {
        delay + pace * (-(delay - own) / pace).exp()
    }
}

/// Longest a site's responses are taken to last on average
/// ([`site_pace_s`]): past it, a site is as slow as the crawler's timeouts
/// let it be.
pub const MAX_SITE_PACE_S: f64 = 30.0;

/// A site's mean response time, from a scan that took `page_s` a page on
/// a host of `own_s` seconds a page (`0` when unknown) under a delay of
/// `delay_s`: the pace that [`seconds_per_page_at`] turns back into
/// `page_s` on that host, at most [`MAX_SITE_PACE_S`]. A scan no slower
/// than the delay or the host says nothing of the site, which is taken as
/// adding nothing.
pub fn site_pace_s(page_s: f64, delay_s: f64, own_s: f64) -> f64 {
    let (delay, own) = (delay_s.max(0.0), own_s.max(0.0));
    if !page_s.is_finite() || page_s <= delay.max(own) {
        return 0.0;
    }
    if own >= delay {
        return (page_s - own).min(MAX_SITE_PACE_S);
    }
    // Increasing in the pace, from the delay at 0 to page_s at most at
    // page_s - own (the expectation is at least own + pace).
    let (mut lo, mut hi) = (0.0f64, (page_s - own).min(MAX_SITE_PACE_S));
    if polite_page_s(own, delay, hi) <= page_s {
        return hi;
    }
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if polite_page_s(own, delay, mid) < page_s {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Expected pages of a site: its last scan, bounded by the round's page cap.
pub fn site_pages(last: Option<&SiteStats>, max_pages: u32) -> f64 {
    last.map(|s| s.pages as f64)
        .unwrap_or(DEFAULT_SITE_PAGES)
        .clamp(1.0, max_pages.max(1) as f64)
}

/// Expected seconds of a site on a host: pages over the host's speed, never
/// below pages × the politeness delay.
pub fn expected_seconds(
    last: Option<&SiteStats>,
    max_pages: u32,
    host_pages_per_s: Option<f64>,
    delay_ms: u64,
) -> f64 {
    site_pages(last, max_pages) * seconds_per_page(host_pages_per_s, delay_ms as f64 / 1000.0)
}

/// A host's running speed average after a finished job of `pages` in
/// `seconds`. A job held back by the politeness delay says only that the host
/// is at least that fast, so it raises the figure but never lowers it.
pub fn learn_speed(prev: Option<f64>, pages: u64, seconds: f64, delay_s: f64) -> Option<f64> {
    if pages == 0 || !(seconds.is_finite() && seconds > 0.0) {
        return prev;
    }
    let observed = pages as f64 / seconds;
    let polite_bound = delay_s > 0.0 && seconds / pages as f64 <= delay_s * 1.1;
    Some(match prev {
        None => observed,
        Some(p) if polite_bound => p.max(observed),
        Some(p) => p + SPEED_WEIGHT * (observed - p),
    })
}

/// Share of time a host was online since it enrolled, bounded below.
pub fn availability(enrolled_ms: u64, offline_ms: u64, now_ms: u64) -> f64 {
    let span = now_ms.saturating_sub(enrolled_ms);
    if span == 0 {
        return 1.0;
    }
    (1.0 - offline_ms as f64 / span as f64).clamp(MIN_AVAILABILITY, 1.0)
}

/// Whether a host counts as online for scheduling: heard from lately (a busy
/// host, whose scans report progress, within [`BUSY_ONLINE_WINDOW_MS`]), and
/// no deadline missed since.
pub fn is_online(last_seen_ms: u64, last_missed_ms: u64, busy: bool, now_ms: u64) -> bool {
    let window = if busy {
        BUSY_ONLINE_WINDOW_MS
    } else {
        ONLINE_WINDOW_MS
    };
    now_ms.saturating_sub(last_seen_ms) <= window && last_missed_ms <= last_seen_ms
}

/// Share of a job assumed still to do when its scan has passed its expected pages.
pub const MIN_LEFT_SHARE: f64 = 0.05;

/// Pages a running job is expected to have left after `done` of its
/// expected `est_pages` (at least [`MIN_LEFT_SHARE`] of them: a site may be
/// larger than its last scan).
pub fn left_pages(est_pages: f64, done: u64) -> f64 {
    (est_pages - done as f64).max(est_pages * MIN_LEFT_SHARE)
}

/// Seconds left of a scan, from the pace between its first and latest
/// progress reports (`(ms, pages)`; `None` without two distinct reports).
pub fn remaining_s(
    est_pages: f64,
    first: (u64, u64),
    last: (u64, u64),
    now_ms: u64,
) -> Option<f64> {
    if first.0 == 0 || last.0 <= first.0 || last.1 <= first.1 {
        return None;
    }
    let pace = (last.1 - first.1) as f64 / ((last.0 - first.0) as f64 / 1000.0);
    let left = left_pages(est_pages, last.1);
    Some((left / pace - now_ms.saturating_sub(last.0) as f64 / 1000.0).max(0.0))
}

/// A unit a host holds, for [`slot_schedule`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldUnit {
    pub issued_ms: u64,
    /// Expected seconds on this host.
    pub expected_s: f64,
}

/// When a host's slots free up, assuming it runs its units first come first
/// served (as the client does).
#[derive(Clone, Debug, PartialEq)]
pub struct SlotSchedule {
    /// Seconds from now until each unit (in the order given) is expected to end.
    pub ends_s: Vec<f64>,
    /// Seconds from now until a slot is free (0: one is idle).
    pub free_at_s: f64,
    /// Expected slot-seconds of work left.
    pub load_s: f64,
}

/// Lay a host's held units (in issue order) on its slots.
pub fn slot_schedule(units: &[HeldUnit], slots: u32, now_ms: u64) -> SlotSchedule {
    let slots = slots.clamp(1, beebot_shared::limits::MAX_SLOTS) as usize;
    // Absolute seconds (relative to now) at which each slot is free; idle = 0.
    let mut free = vec![f64::NEG_INFINITY; slots];
    let mut ends_s = Vec::with_capacity(units.len());
    for u in units {
        let issued = (u.issued_ms as f64 - now_ms as f64) / 1000.0;
        let (i, _) = free
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .unwrap_or((0, &0.0));
        let start = free[i].max(issued);
        let mut end = start + u.expected_s.max(0.0);
        if end < 0.0 {
            end = OVERDUE_SHARE * u.expected_s.max(0.0);
        }
        free[i] = end;
        ends_s.push(end);
    }
    let free_at_s = free.iter().copied().fold(f64::INFINITY, f64::min).max(0.0);
    let load_s = free.iter().map(|f| f.max(0.0)).sum();
    SlotSchedule {
        ends_s,
        free_at_s,
        load_s,
    }
}

/// Deadline bounds and slack.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadlineRule {
    pub slack: f64,
    pub grace_s: u64,
    pub min_s: u64,
    pub max_s: u64,
}

/// `issued + expected × slack + grace`, bounded to `[min, max]` after issue.
pub fn deadline_ms(issued_ms: u64, expected_s: f64, rule: &DeadlineRule) -> u64 {
    // A host's speed is its own claim: a tiny one makes `expected_s` vast
    // (the cast saturates, and so does the sum).
    let span = ((expected_s.max(0.0) * rule.slack) as u64).saturating_add(rule.grace_s);
    let span = span.clamp(rule.min_s, rule.max_s.max(rule.min_s));
    issued_ms.saturating_add(span.saturating_mul(1000))
}

/// Whether a job of `expected_s` seconds fits in a host's open `windows`
/// (`[start, end)` seconds from now) before the deadline `rule` would give it.
pub fn fits_windows(windows: &[(u64, u64)], expected_s: f64, rule: &DeadlineRule) -> bool {
    let span = deadline_ms(0, expected_s, rule) / 1000;
    let open: u64 = windows
        .iter()
        .map(|&(a, b)| b.min(span).saturating_sub(a.min(span)))
        .sum();
    open as f64 >= expected_s
}

/// The new deadline of a unit whose scan is still making progress (its
/// pages grew since the last report) in the last half of its window: one
/// window from now (`None`: keep the deadline). A deadline finds a host that
/// went silent or stalled; it never cuts a scan that goes on, so there is no
/// cap here: the scan itself is bounded by the round's time budget.
pub fn extended_deadline(
    deadline_ms: u64,
    window_ms: u64,
    now_ms: u64,
    progressed: bool,
) -> Option<u64> {
    if progressed && window_ms > 0 && now_ms > deadline_ms.saturating_sub(window_ms / 2) {
        Some(now_ms.saturating_add(window_ms).max(deadline_ms))
    } else {
        None
    }
}
