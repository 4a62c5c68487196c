//! Availability: what each host can do over a run (on, gated by its window,
//! off in a spell, gone), drawn from its work window and the seed, and the
//! round's lower bound from the true sizes, speeds and those timelines.
//!
//! Invariants: a timeline starts at 0 and its changes are in time order;
//! `Gone` is final. It never touches the grid.

use chrono::{DateTime, NaiveDateTime};

use beebot_shared::window::Windows;

use super::{Rng, HORIZON_MS, SIM_START_MS, SPELL_MAX_MS, SPELL_MIN_MS};

// ---- availability ----

/// What a host can do at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Avail {
    /// On, and its window open: it scans and asks for work.
    On,
    /// On, its window closed: scans paused (checkpointed), progress still
    /// reported, no work asked for.
    Gated,
    /// Off, asleep or cut off: silent.
    Off,
    /// Gone for good.
    Gone,
}

/// One host's availability over the run: `(ms from the start, state, clean)`
/// changes, the first at 0. A clean change to `Off` is a shutdown (scans
/// checkpointed first); an unclean one (a spell, leaving) loses what was
/// scanned since the last checkpoint.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub changes: Vec<(u64, Avail, bool)>,
}

impl Timeline {
    /// Always on.
    pub fn always() -> Timeline {
        Timeline {
            changes: vec![(0, Avail::On, true)],
        }
    }

    /// Milliseconds `On` within `[0, t_ms)`.
    pub fn on_ms(&self, t_ms: u64) -> u64 {
        let mut total = 0;
        for (i, &(at, state, _)) in self.changes.iter().enumerate() {
            if at >= t_ms {
                break;
            }
            let end = self.changes.get(i + 1).map_or(u64::MAX, |c| c.0).min(t_ms);
            if state == Avail::On {
                total += end - at;
            }
        }
        total
    }

    /// The first moment by which the host was `On` for `need_ms` (`None`:
    /// never, within the timeline).
    pub fn reach_ms(&self, need_ms: f64) -> Option<f64> {
        let mut left = need_ms.max(0.0);
        if left == 0.0 {
            return Some(0.0);
        }
        for (i, &(at, state, _)) in self.changes.iter().enumerate() {
            let end = self.changes.get(i + 1).map_or(HORIZON_MS, |c| c.0);
            if state != Avail::On {
                continue;
            }
            let span = end.saturating_sub(at) as f64;
            if span >= left {
                return Some(at as f64 + left);
            }
            left -= span;
        }
        None
    }
}

/// Wall-clock time (taken as the hosts' local time) of a virtual moment.
pub(super) fn local_time(ms_from_start: u64) -> NaiveDateTime {
    let ms = SIM_START_MS.saturating_add(ms_from_start);
    DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .naive_utc()
}

/// A window's open intervals `[start, end)` over the horizon, ms from the start.
pub(super) fn window_intervals(w: &Windows) -> Vec<(u64, u64)> {
    let start = local_time(0);
    match w.intervals(start, usize::MAX) {
        None => vec![(0, HORIZON_MS)],
        Some(v) => v
            .into_iter()
            .map(|(a, b)| (a * 1000, (b * 1000).min(HORIZON_MS)))
            .filter(|(a, b)| a < b)
            .collect(),
    }
}

/// The availability of one host: `base` open intervals in which it is `On`
/// (outside them `closed`, changed into cleanly), random offline spells
/// covering a `dropout` share of the time, and a moment it leaves for good.
pub(super) fn timeline(
    base: &[(u64, u64)],
    closed: Avail,
    dropout: f64,
    gone_at: Option<u64>,
    rng: &mut Rng,
) -> Timeline {
    // Spells: log-uniform lengths, starts a Poisson process whose mean gap
    // makes them cover `dropout` of the time.
    let mut spells = Vec::new();
    if dropout > 0.0 {
        let mean_spell = (SPELL_MAX_MS - SPELL_MIN_MS) / (SPELL_MAX_MS / SPELL_MIN_MS).ln();
        let mean_gap = mean_spell * (1.0 - dropout) / dropout;
        let mut t = rng.exp(mean_gap);
        while (t as u64) < HORIZON_MS {
            let len = rng.log_uniform(SPELL_MIN_MS, SPELL_MAX_MS);
            spells.push((t as u64, (t + len) as u64));
            t += len + rng.exp(mean_gap);
        }
    }
    let mut cuts: Vec<u64> = vec![0];
    for &(a, b) in base.iter().chain(&spells) {
        cuts.push(a);
        cuts.push(b);
    }
    if let Some(g) = gone_at {
        cuts.push(g);
    }
    cuts.retain(|&c| c < HORIZON_MS);
    cuts.sort_unstable();
    cuts.dedup();
    let inside = |v: &[(u64, u64)], t: u64| v.iter().any(|&(a, b)| a <= t && t < b);
    let mut changes: Vec<(u64, Avail, bool)> = Vec::new();
    for t in cuts {
        let (state, clean) = if gone_at.is_some_and(|g| t >= g) {
            (Avail::Gone, false)
        } else if inside(&spells, t) {
            (Avail::Off, false)
        } else if inside(base, t) {
            (Avail::On, true)
        } else {
            (closed, true)
        };
        if changes.last().is_none_or(|c| c.1 != state) {
            changes.push((t, state, clean));
        }
    }
    Timeline { changes }
}

// ---- the lower bound ----

/// The lower bound of a round, from the true sizes and speeds and the
/// realised availability: the larger of (a) the first moment by which the
/// hosts' slots, on for the time their timelines say, could have done all
/// the work (each host's work rate being its mean over every page), and (b)
/// the first moment by which some host could have scanned the longest-lasting
/// site on one slot. `seconds[h][s]` is site `s` on one slot of host `h`.
pub fn lower_bound_s(seconds: &[Vec<f64>], slots: &[u32], timelines: &[Timeline]) -> f64 {
    // (a) Σ_h slots_h × on_h(T) / work_h ≥ 1, found by bisection.
    let work: Vec<f64> = seconds.iter().map(|s| s.iter().sum()).collect();
    let share = |t_ms: u64| -> f64 {
        work.iter()
            .zip(slots)
            .zip(timelines)
            .filter(|((w, _), _)| **w > 0.0)
            .map(|((w, n), tl)| f64::from((*n).max(1)) * tl.on_ms(t_ms) as f64 / 1000.0 / w)
            .sum()
    };
    let all_work = work.iter().any(|w| *w > 0.0);
    let mut bound_ms = 0.0f64;
    if all_work {
        let (mut lo, mut hi) = (0u64, HORIZON_MS);
        if share(hi) >= 1.0 {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if share(mid) >= 1.0 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            bound_ms = hi as f64;
        } else {
            bound_ms = HORIZON_MS as f64;
        }
    }
    // (b) every site on the host that could finish it first, alone.
    let sites = seconds.first().map_or(0, Vec::len);
    for s in 0..sites {
        let best = seconds
            .iter()
            .zip(timelines)
            .filter_map(|(sec, tl)| tl.reach_ms(sec[s] * 1000.0))
            .fold(f64::INFINITY, f64::min);
        if best.is_finite() {
            bound_ms = bound_ms.max(best);
        }
    }
    bound_ms / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::OFFICE_HOURS;

    fn always_on(m: usize) -> Vec<Timeline> {
        (0..m).map(|_| Timeline::always()).collect()
    }

    #[test]
    fn the_lower_bound_is_the_larger_of_its_two_parts() {
        // Host a: 1 slot, 0.5 s a page; host b: 2 slots, 1 s a page.
        let per_page = [0.5, 1.0];
        let slots = [1, 2];
        let secs = |pages: &[f64]| -> Vec<Vec<f64>> {
            per_page
                .iter()
                .map(|c| pages.iter().map(|p| p * c).collect())
                .collect()
        };
        // Rate 4 pages/s: 400 pages → 100 s; the largest (100) on the fastest: 50 s.
        let lb = lower_bound_s(&secs(&[100.0; 4]), &slots, &always_on(2));
        assert!((lb - 100.0).abs() < 0.01, "{lb}");
        // The largest (300) alone takes 150 s on the fastest host.
        let lb = lower_bound_s(&secs(&[100.0, 300.0]), &slots, &always_on(2));
        assert!((lb - 150.0).abs() < 0.01, "{lb}");
        // A host that is on only from 60 s on adds its wait.
        let late = Timeline {
            changes: vec![(0, Avail::Off, true), (60_000, Avail::On, true)],
        };
        let lb = lower_bound_s(&secs(&[1000.0]), &slots, &[late, Timeline::always()]);
        assert!((lb - 560.0).abs() < 0.01, "{lb}");
    }

    #[test]
    fn timelines_mix_windows_spells_and_leaving() {
        let office = window_intervals(&Windows::parse(OFFICE_HOURS).unwrap());
        // Monday 09:00 start: open until 18:00, then from Tuesday 08:00.
        assert_eq!(office[0], (0, 9 * 3_600_000));
        assert_eq!(office[1].0, 23 * 3_600_000);
        let mut rng = Rng::new(3);
        let t = timeline(&office, Avail::Off, 0.2, Some(30 * 3_600_000), &mut rng);
        assert_eq!(t.changes[0].0, 0);
        assert_eq!(t.changes.last().map(|c| c.1), Some(Avail::Gone));
        assert!(
            t.changes.iter().any(|c| c.1 == Avail::Off && !c.2),
            "a spell"
        );
        assert!(t.on_ms(HORIZON_MS) <= 9 * 3_600_000 + 10 * 3_600_000);
        let back = t.reach_ms(3_600_000.0).unwrap();
        assert!(back >= 3_600_000.0);
        assert_eq!(Timeline::always().reach_ms(5.0), Some(5.0));
    }
}
