//! What the dashboard knows that the store does not: each component's last
//! successful turn (its liveness signal), a bounded time series of pages
//! and bytes per round (sampled by the ticker), and each host's crawl
//! windows as its last work request reported them.
//!
//! Invariants: everything here is in memory and bounded by a named
//! constant ([`MAX_SERIES_POINTS`] per round, [`MAX_SERIES_ROUNDS`] rounds,
//! [`MAX_WINDOW_HOSTS`] hosts); a restart starts it empty. It never takes
//! the grid lock and never reads a clock: time is an argument.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use beebot_shared::limits::PROGRESS_INTERVAL_S;
use serde::Serialize;

/// Most points kept of one round's series: when full, every other point
/// goes and samples are taken half as often, so the series always covers
/// the whole round.
pub const MAX_SERIES_POINTS: usize = 600;
/// Rounds whose series are kept; the oldest round's goes first.
pub const MAX_SERIES_ROUNDS: usize = 16;
/// Hosts whose reported windows are kept (more: the oldest report goes).
pub const MAX_WINDOW_HOSTS: usize = 100_000;
/// Pages/s and KB/s, "now" and at each point of the chart: the rate over
/// the last this long. Running scans' pages arrive in steps, one report
/// every [`PROGRESS_INTERVAL_S`] per scan, so a shorter window swings
/// between 0 and twice the true rate; over six intervals a steady scan
/// stays within a sixth of its rate, whatever the reports' phase.
pub const RATE_WINDOW_MS: u64 = 6 * PROGRESS_INTERVAL_S * 1000;

/// A component of the server the overview shows alive or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The QUIC endpoint: a request answered.
    Quic,
    /// The store: a group commit synced.
    Store,
    /// The ticker: a turn (deadlines, repeats) done.
    Ticker,
    /// The reference site: answered the dashboard's probe.
    Reference,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::Quic,
        Component::Store,
        Component::Ticker,
        Component::Reference,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Component::Quic => "QUIC endpoint",
            Component::Store => "store",
            Component::Ticker => "ticker",
            Component::Reference => "reference site",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One sample of a round: its pages and bytes so far (running scans'
/// reported pages included).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Point {
    pub ms: u64,
    pub pages: u64,
    pub bytes: u64,
}

/// One round's samples, thinned as it grows (see [`MAX_SERIES_POINTS`]).
#[derive(Clone, Debug, Default)]
pub struct Series {
    points: Vec<Point>,
    /// Keep one sample in `stride`.
    stride: u64,
    /// Samples offered since the last one kept.
    skipped: u64,
}

impl Series {
    /// Offer a sample: kept if it is its stride's turn.
    pub fn push(&mut self, p: Point) {
        self.stride = self.stride.max(1);
        if let Some(last) = self.points.last() {
            if p.ms <= last.ms {
                return;
            }
        }
        self.skipped += 1;
        if !self.points.is_empty() && self.skipped < self.stride {
            return;
        }
        self.skipped = 0;
        self.points.push(p);
        if self.points.len() >= MAX_SERIES_POINTS {
            let mut i = 0;
            self.points.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
    }

    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// Pages/s and KB/s over the last [`RATE_WINDOW_MS`] before the newest
    /// point (`None` with fewer than two points).
    pub fn rate_now(&self) -> Option<(f64, f64)> {
        self.rate_at(self.points.len().checked_sub(1)?)
    }

    /// Pages/s at each point but the first, as [`Series::rate_now`] gives
    /// it at that point: the chart and "now" are one figure.
    pub fn pages_per_s(&self) -> Vec<(u64, f64)> {
        (1..self.points.len())
            .filter_map(|i| Some((self.points[i].ms, self.rate_at(i)?.0)))
            .collect()
    }

    /// Pages/s and KB/s at point `i`: since the newest point at least
    /// [`RATE_WINDOW_MS`] before it, or since the first point when the
    /// series is younger (`None` for the first point).
    fn rate_at(&self, i: usize) -> Option<(f64, f64)> {
        let p = &self.points;
        let at = p.get(i)?;
        let edge = at.ms.checked_sub(RATE_WINDOW_MS);
        // Points up to `edge` (the series is in time order).
        let from = edge.map_or(0, |e| {
            p[..i].partition_point(|q| q.ms <= e).saturating_sub(1)
        });
        (from < i).then(|| rate(&p[from], at))
    }
}

/// Pages/s and KB/s from `a` to `b` (never negative: a count that went
/// back, e.g. a scan restarted, is no speed).
fn rate(a: &Point, b: &Point) -> (f64, f64) {
    let s = (b.ms.saturating_sub(a.ms) as f64 / 1000.0).max(f64::MIN_POSITIVE);
    (
        b.pages.saturating_sub(a.pages) as f64 / s,
        b.bytes.saturating_sub(a.bytes) as f64 / 1024.0 / s,
    )
}

/// A host's open windows as it last reported them: intervals in seconds
/// from `reported_ms` (`None`: always open).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Windows {
    pub reported_ms: u64,
    pub open: Option<Vec<(u64, u64)>>,
}

/// The dashboard's live state, one per server (in `Shared`).
pub struct Live {
    /// When the server started (Unix ms).
    pub started_ms: u64,
    /// The reference site's address, when this server serves it.
    pub reference_addr: Option<SocketAddr>,
    beats: [AtomicU64; 4],
    series: Mutex<BTreeMap<u64, Series>>,
    windows: Mutex<HashMap<u64, Windows>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Live {
    pub fn new(started_ms: u64, reference_addr: Option<SocketAddr>) -> Live {
        Live {
            started_ms,
            reference_addr,
            beats: Default::default(),
            series: Mutex::default(),
            windows: Mutex::default(),
        }
    }

    /// `c` did a successful turn at `now_ms`.
    pub fn beat(&self, c: Component, now_ms: u64) {
        self.beats[c.index()].fetch_max(now_ms, Ordering::Relaxed);
    }

    /// When `c` last did a successful turn (`None`: never since start).
    pub fn last_beat(&self, c: Component) -> Option<u64> {
        Some(self.beats[c.index()].load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// Offer each running round's sample (`round id`, point). Past
    /// [`MAX_SERIES_ROUNDS`], the series of rounds that are over go first
    /// (oldest first), then those of the oldest running rounds.
    pub fn sample(&self, samples: impl IntoIterator<Item = (u64, Point)>) {
        let mut all = lock(&self.series);
        let mut running = std::collections::BTreeSet::new();
        for (round, p) in samples {
            all.entry(round).or_default().push(p);
            running.insert(round);
        }
        while all.len() > MAX_SERIES_ROUNDS {
            let over = all.keys().copied().find(|id| !running.contains(id));
            match over {
                Some(id) => all.remove(&id),
                None => all.pop_first().map(|(_, s)| s),
            };
        }
    }

    /// A copy of round `id`'s series (empty if none is kept).
    pub fn series(&self, id: u64) -> Series {
        lock(&self.series).get(&id).cloned().unwrap_or_default()
    }

    /// Host `host_id` reported its open windows.
    pub fn report_windows(&self, host_id: u64, w: Windows) {
        let mut all = lock(&self.windows);
        if all.len() >= MAX_WINDOW_HOSTS && !all.contains_key(&host_id) {
            let oldest = all
                .iter()
                .min_by_key(|(_, w)| w.reported_ms)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                all.remove(&id);
            }
        }
        all.insert(host_id, w);
    }

    /// Host `host_id`'s last reported windows.
    pub fn windows(&self, host_id: u64) -> Option<Windows> {
        lock(&self.windows).get(&host_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(ms: u64, pages: u64) -> Point {
        Point {
            ms,
            pages,
            bytes: pages * 2048,
        }
    }

    #[test]
    fn a_series_stays_bounded_and_covers_the_whole_round() {
        let mut s = Series::default();
        for i in 0..10 * MAX_SERIES_POINTS as u64 {
            s.push(p(1000 * (i + 1), i));
        }
        let pts = s.points();
        assert!(pts.len() < MAX_SERIES_POINTS, "{}", pts.len());
        assert!(pts.len() > MAX_SERIES_POINTS / 4, "{}", pts.len());
        assert_eq!(pts[0].ms, 1000, "the start of the round is kept");
        assert!(pts.windows(2).all(|w| w[0].ms < w[1].ms));
        let newest = pts.last().map_or(0, |p| p.ms);
        assert!(newest > 1000 * 9 * MAX_SERIES_POINTS as u64, "{newest}");
        // A sample not after the newest is ignored.
        let before = s.points().len();
        s.push(p(500, 1));
        assert_eq!(s.points().len(), before);
    }

    #[test]
    fn rates_are_over_the_rate_window_and_never_negative() {
        let mut s = Series::default();
        assert_eq!(s.rate_now(), None);
        s.push(p(1_000, 0));
        assert_eq!(s.rate_now(), None, "one point is no rate");
        s.push(p(3_000, 10));
        assert_eq!(s.rate_now(), Some((5.0, 10.0)));
        // 2 pages/s up to 100 s, then 8 pages/s, one sample a second.
        let pages_at = |t: u64| if t <= 100 { 2 * t } else { 200 + 8 * (t - 100) };
        for t in 4..=200u64 {
            s.push(p(1000 * t, pages_at(t)));
        }
        let (pages_s, kb_s) = s.rate_now().expect("rate");
        assert!((pages_s - 8.0).abs() < 1e-9, "{pages_s}");
        assert!((kb_s - 16.0).abs() < 1e-9, "{kb_s}");
        let mut back = Series::default();
        back.push(p(1_000, 10));
        back.push(p(2_000, 4));
        assert_eq!(back.rate_now(), Some((0.0, 0.0)));
        assert_eq!(back.pages_per_s(), vec![(2_000, 0.0)]);
        // The chart: each point's rate over the window before it (since
        // the first point while the series is younger), "now" its last.
        let chart = s.pages_per_s();
        assert_eq!(chart.len(), s.points().len() - 1);
        assert_eq!(chart[0], (3_000, 5.0));
        assert_eq!(chart.last(), Some(&(200_000, pages_s)));
        let at = |ms: u64| chart.iter().find(|c| c.0 == ms).expect("point").1;
        assert!((at(90_000) - 2.0).abs() < 0.1, "{}", at(90_000));
        // 20 s of 8 pages/s in a 60 s window.
        let mixed = (2.0 * 40.0 + 8.0 * 20.0) / 60.0;
        assert!((at(120_000) - mixed).abs() < 1e-9, "{}", at(120_000));
    }

    /// A steady scan whose pages arrive in steps (one report every
    /// progress interval, a little late each time, as a client's do) is
    /// drawn as a steady line, not as a square wave between 0 and twice its
    /// rate.
    #[test]
    fn pages_reported_in_steps_draw_a_steady_rate() {
        let interval_ms = PROGRESS_INTERVAL_S * 1000;
        for (phase, late_ms) in [(0u64, 0u64), (400, 350), (9_000, 900), (3_700, 120)] {
            let mut s = Series::default();
            // 3 pages/s, reported as it stands every interval plus `late_ms`.
            let mut reported = 0u64;
            let mut next_report = phase + interval_ms;
            for t in 0..=900u64 {
                let ms = t * 1000;
                while next_report <= ms {
                    reported = 3 * next_report / 1000;
                    next_report += interval_ms + late_ms;
                }
                s.push(p(ms + 1, reported));
            }
            let window = RATE_WINDOW_MS / 1000;
            for (ms, rate) in s.pages_per_s() {
                // Past the first window the line stays within a sixth of 3.
                if ms > (window + 2 * PROGRESS_INTERVAL_S) * 1000 {
                    assert!(
                        (2.5..=3.5).contains(&rate),
                        "{rate} at {ms} ms (phase {phase})"
                    );
                }
            }
            let (now, _) = s.rate_now().expect("rate");
            assert!((2.5..=3.5).contains(&now), "{now}");
        }
    }

    #[test]
    fn beats_rounds_and_windows_are_kept_within_bounds() {
        let live = Live::new(5, None);
        assert_eq!(live.last_beat(Component::Ticker), None);
        live.beat(Component::Ticker, 20);
        live.beat(Component::Ticker, 10);
        assert_eq!(live.last_beat(Component::Ticker), Some(20), "never back");
        assert_eq!(live.last_beat(Component::Store), None);
        for round in 1..=(MAX_SERIES_ROUNDS as u64 + 3) {
            live.sample([(round, p(1000, 1))]);
        }
        assert!(live.series(1).points().is_empty(), "oldest round dropped");
        assert_eq!(live.series(MAX_SERIES_ROUNDS as u64 + 3).points().len(), 1);
        // Rounds that are over (no longer sampled) go before running ones,
        // however old the running ones are.
        let many = MAX_SERIES_ROUNDS as u64 + 3;
        let running: Vec<u64> = (4..4 + MAX_SERIES_ROUNDS as u64).collect();
        live.sample([(many + 1, p(2000, 1))]);
        live.sample(running.iter().map(|&r| (r, p(3000, 2))));
        for r in &running {
            assert!(
                !live.series(*r).points().is_empty(),
                "running round {r} kept"
            );
        }
        assert!(
            live.series(many + 1).points().is_empty(),
            "a round that is over went first"
        );
        let w = Windows {
            reported_ms: 7,
            open: Some(vec![(0, 60)]),
        };
        live.report_windows(3, w.clone());
        assert_eq!(live.windows(3), Some(w));
        assert_eq!(live.windows(4), None);
    }
}
