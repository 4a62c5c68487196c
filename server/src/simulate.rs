//! `beebot-server simulate`: the grid's own state machine against simulated
//! desktop hosts on a virtual clock.
//!
//! The simulator runs the code `serve` runs: a [`Grid`] over an in-memory
//! [`Store`](crate::store::Store), asked for work ([`Grid::request_work`]: views, policy, issuing,
//! signing, deadlines), told of progress ([`Grid::progress`], extensions and
//! aborts), of failures ([`Grid::fail`]) and of results
//! ([`Grid::upload_begin`], [`UploadPlan::verify`], [`UploadPlan::write`],
//! [`Grid::upload_finish`]; link files and states are kept in memory,
//! [`MemoryLinks`]), and ticked at deadlines ([`Grid::tick`]). Only the
//! network, the disk and the crawling are replaced by events; invite tokens
//! are drawn from the run's seed.
//!
//! The hosts model the real client: its buffer rule
//! ([`beebot_shared::fetch_rules::work_wanted`]), its time windows
//! ([`beebot_shared::window::Windows`], sent as open intervals), units
//! verified with the project key, progress every 10 s while scanning,
//! `Extend` followed, `Abort` obeyed, `retry_after` honoured, elapsed time
//! reported as wall time (pauses included), checkpoints every 30 s (a host
//! that goes away mid-scan resumes from its last checkpoint and uploads
//! late), and the round's time budget (`max_seconds`), after which a scan
//! uploads what it did with its frontier.
//!
//! What varies, from one seed: each site's true size (off its last scan by
//! up to ± `noise`; a share of sites was never scanned), each page's
//! response time (a page takes the politeness delay or its response time
//! plus the host's own time per page, whichever is longer), each host's
//! benchmark error, its availability (a work window, random offline spells
//! of minutes to hours, a share of hosts that never come back), and the rare
//! scan that fails.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::Serialize;

use beebot_shared::fetch_rules::{work_wanted, DEFAULT_BUFFER_MAX_S, DEFAULT_BUFFER_MIN_S};
use beebot_shared::limits::MAX_WINDOW_INTERVALS;
use beebot_shared::linkfile::{self, LinkFileHeader, ScanSummary, StopReason};
use beebot_shared::proto::{HostInfo, ABORT_HAND_OVER};
use beebot_shared::scanstate::ScanState;
use beebot_shared::sign::{self, WorkUnit};
use beebot_shared::window::Windows;

use crate::config::RoundDefaults;
use crate::grid::{
    Grid, GridError, GridIo, GridSettings, MemoryLinks, ProgressOutcome, UploadOutcome, UploadPlan,
    UploadStep, WorkRequest,
};
use crate::model::{RoundState, SiteRecord, SiteStats};
use crate::scheduler;
use crate::validate::ValidateMode;

/// Most sites one simulation takes.
pub const MAX_SIM_SITES: usize = 200_000;
/// Most hosts one simulation takes.
pub const MAX_SIM_HOSTS: usize = 20_000;
/// Largest first seed (seeds are numbered from it).
pub const MAX_FIRST_SEED: u64 = 1_000_000_000;
/// Most seeds per policy.
pub const MAX_SEEDS: u32 = 1000;
/// Synthetic sites: the smallest size, the power-law exponent and the cap.
/// Sizes of thematic web spaces follow a power law; α = 1.2 gives a few sites
/// a hundred times the median.
pub const SYNTH_MIN_PAGES: f64 = 10.0;
pub const SYNTH_PARETO_ALPHA: f64 = 1.2;
pub const SYNTH_MAX_PAGES: f64 = 10_000.0;
/// Synthetic hosts: pages per second on one slot, spread over a factor of ten.
pub const SYNTH_MIN_SPEED: f64 = 0.5;
pub const SYNTH_MAX_SPEED: f64 = 5.0;
pub const SYNTH_SLOTS: u32 = 2;
/// Median of a site's mean response time, seconds: most sites answer well
/// inside the politeness delay.
const RESPONSE_MEDIAN_S: f64 = 0.25;
/// Log-normal spread of sites' mean response times: one site in twenty is
/// about three times slower than the median.
const RESPONSE_SIGMA: f64 = 0.7;
/// Events one run may process per job and per host, before it is stopped as
/// runaway (a healthy run needs well under a tenth of this).
const EVENTS_PER_JOB: u64 = 5_000;
const EVENTS_PER_HOST: u64 = 400_000;
/// The client's loop turns this often: the next request after a reply with work.
const CLIENT_TICK_MS: u64 = 500;
/// The client reports a running scan's progress this often (`RunOptions`).
const PROGRESS_INTERVAL_MS: u64 = 10_000;
/// The client checkpoints a running scan at least this often (and at every pause).
const CHECKPOINT_INTERVAL_MS: u64 = 30_000;
/// Random offline spells last from five minutes (a reboot) to four hours
/// (a laptop shut in a bag), log-uniformly.
const SPELL_MIN_MS: f64 = 5.0 * 60_000.0;
const SPELL_MAX_MS: f64 = 4.0 * 3_600_000.0;
/// How far ahead hosts' availability is laid out: a run longer than this is
/// stopped unfinished.
const HORIZON_MS: u64 = 28 * 24 * 3_600_000;
/// The virtual clock starts on Monday 1 January 2024, 09:00 (UTC, taken as
/// the hosts' local time): an admin starts the round in the morning.
pub const SIM_START_MS: u64 = 1_704_099_600_000;
/// Office machines are on (and crawling) in office hours, and off otherwise.
pub const OFFICE_HOURS: &str = "mon-fri 08:00-18:00";
/// Night machines stay on; their client crawls only outside office hours.
pub const NIGHTS_AND_WEEKENDS: &str = "mon-fri 19:00-07:00, sat-sun 00:00-24:00";
/// Bytes a simulated page weighs (only the grid's KB/s figure uses it).
const PAGE_BYTES: u64 = 30 * 1024;

/// Errors of the simulator's inputs and runs.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("line {line}: {msg}")]
    BadLine { line: usize, msg: String },
    #[error("{0}")]
    Invalid(String),
    #[error("the simulated grid failed: {0}")]
    Grid(#[from] GridError),
}

/// A site: its expected pages (its last scan; `None`: never scanned).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimSite {
    pub name: String,
    pub pages: Option<f64>,
}

/// A host: its true pages per second on one slot, and its slots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimHost {
    pub name: String,
    pub pages_per_s: f64,
    pub slots: u32,
}

/// When the hosts may crawl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Always on, but for random offline spells.
    Always,
    /// Each host at random, one chance in three each: always on, on in
    /// office hours ([`OFFICE_HOURS`]), or crawling nights and weekends
    /// ([`NIGHTS_AND_WEEKENDS`]); random offline spells on top.
    Desktops,
}

impl Availability {
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Always => "always",
            Availability::Desktops => "desktops",
        }
    }

    pub fn parse(s: &str) -> Option<Availability> {
        match s {
            "always" => Some(Availability::Always),
            "desktops" => Some(Availability::Desktops),
            _ => None,
        }
    }
}

/// Settings of a simulation.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// True sizes of scanned sites are off their last scan by up to ± this share.
    pub noise: f64,
    /// Reference-site benchmarks are off the true speeds by up to ± this share.
    pub benchmark_noise: f64,
    /// Share of time a host spends in random offline spells.
    pub dropout: f64,
    /// Share of hosts that go away during the round and never come back.
    pub vanish: f64,
    /// Share of synthetic sites never scanned before (size unknown to the grid).
    pub unknown: f64,
    /// Share of scans that fail (the client gives the unit back).
    pub scan_failures: f64,
    pub availability: Availability,
    /// The round's parameters: the server's defaults.
    pub delay_ms: u64,
    pub max_pages: u32,
    pub max_seconds: u64,
    pub max_attempts: u32,
    pub deadline_min_s: u64,
    pub deadline_max_s: u64,
    /// The server's deadline slack and grace (`config.toml`'s defaults).
    pub deadline_slack: f64,
    pub deadline_grace_s: u64,
    /// A request's round trip, seconds (the client's buffer rule uses it).
    pub round_trip_s: f64,
    pub buffer_min_s: u64,
    pub buffer_max_s: u64,
    /// The first seed: runs use seeds `first_seed..first_seed + seeds`.
    pub first_seed: u64,
    /// The round's validation (`off` compares policies alone).
    pub validate: ValidateMode,
    /// Hosts start trusted (validation at steady state: spot checks only),
    /// rather than new (every result checked until trusted).
    pub trusted: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        let round = RoundDefaults::default();
        let server = crate::config::ServerConfig::new("127.0.0.1:4480", "0.0.0.0:4480", "");
        SimOptions {
            noise: 0.3,
            benchmark_noise: 0.1,
            dropout: 0.05,
            vanish: 0.05,
            unknown: 0.1,
            scan_failures: 0.01,
            availability: Availability::Desktops,
            delay_ms: round.delay_ms,
            max_pages: round.max_pages,
            max_seconds: round.max_seconds,
            max_attempts: round.max_attempts,
            deadline_min_s: round.deadline_min_s,
            deadline_max_s: round.deadline_max_s,
            deadline_slack: server.deadline_slack,
            deadline_grace_s: server.deadline_grace_s,
            round_trip_s: 0.05,
            buffer_min_s: DEFAULT_BUFFER_MIN_S,
            buffer_max_s: DEFAULT_BUFFER_MAX_S,
            first_seed: 0,
            validate: ValidateMode::Off,
            trusted: false,
        }
    }
}

/// One run of one policy with one seed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunResult {
    pub seed: u64,
    pub makespan_s: f64,
    pub lower_bound_s: f64,
    /// Slot time spent scanning (useful or not) over slots × makespan.
    pub utilisation: f64,
    /// Pages of the sites' true sizes (up to the page cap) that no accepted
    /// scan covered.
    pub pages_lost: u64,
    /// Pages to scan: every site's true size up to the page cap.
    pub pages_total: u64,
    /// Units that continued a job from an earlier scan's frontier.
    pub continuations: u64,
    /// Attempts issued again after a deadline passed or a host gave up.
    pub reissued: u64,
    /// Replicas issued (hedges and tail replicas).
    pub replicated: u64,
    /// Jobs failed after their attempts ran out.
    pub failed: u64,
    /// Slot seconds spent on scans whose result was dropped, aborted or lost
    /// past a checkpoint.
    pub wasted_s: f64,
    /// False when the run hit its event bound or horizon before the round ended.
    pub finished: bool,
    /// Pages of the results kept, and pages scanned to check results.
    pub result_pages: u64,
    pub check_pages: u64,
}

/// A policy's runs over the seeds, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    pub runs: usize,
    pub makespan_median_s: f64,
    pub makespan_worst_s: f64,
    pub ratio_median: f64,
    pub ratio_worst: f64,
    pub utilisation_median: f64,
    pub pages_lost_total: u64,
    pub continuations_mean: f64,
    pub reissued_mean: f64,
    pub replicated_mean: f64,
    pub failed_total: u64,
    pub unfinished: usize,
    /// Pages scanned to check results over the pages of the results kept.
    pub check_overhead: f64,
}

// ---- inputs ----

/// A small, stable random generator (SplitMix64): the same seed gives the same
/// run on every platform and every version of the `rand` crate.
#[derive(Clone, Debug)]
pub struct Rng(beebot_shared::rng::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        use beebot_shared::rng::{SplitMix64, GOLDEN_GAMMA};
        Rng(SplitMix64::new(seed ^ GOLDEN_GAMMA))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0.unit()
    }
    /// Uniform in `[1 - f, 1 + f]`.
    pub fn around_one(&mut self, f: f64) -> f64 {
        1.0 + f * (2.0 * self.unit() - 1.0)
    }
    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    /// Log-uniform in `[lo, hi]`.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }
    /// A power-law size (Pareto α [`SYNTH_PARETO_ALPHA`]) in the synthetic range.
    fn pareto_pages(&mut self) -> f64 {
        let u = 1.0 - self.unit(); // (0, 1]
        (SYNTH_MIN_PAGES * u.powf(-1.0 / SYNTH_PARETO_ALPHA))
            .min(SYNTH_MAX_PAGES)
            .round()
    }
}

/// `n` sites with power-law sizes; a share `unknown` of them never scanned.
pub fn synthetic_sites(n: usize, unknown: f64, seed: u64) -> Vec<SimSite> {
    let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(1));
    (0..n)
        .map(|i| {
            let pages = rng.pareto_pages();
            let known = rng.unit() >= unknown;
            SimSite {
                name: format!("site{i}.synth.test"),
                pages: known.then_some(pages),
            }
        })
        .collect()
}

/// `m` hosts with speeds spread log-uniformly over a factor of ten.
pub fn synthetic_hosts(m: usize, seed: u64) -> Vec<SimHost> {
    let mut rng = Rng::new(seed.wrapping_mul(37).wrapping_add(2));
    (0..m)
        .map(|i| SimHost {
            name: format!("host{i}"),
            pages_per_s: rng.log_uniform(SYNTH_MIN_SPEED, SYNTH_MAX_SPEED),
            slots: SYNTH_SLOTS,
        })
        .collect()
}

fn data_lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or("").trim();
        (!l.is_empty()).then(|| (i + 1, l.split_whitespace().collect()))
    })
}

fn number(line: usize, what: &str, v: &str) -> Result<f64, SimError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| SimError::BadLine {
            line,
            msg: format!("{what} `{v}` is not a positive number"),
        })
}

/// A sites file: `HOST [PAGES]` a line (`#` comments); a site without pages
/// was never scanned (the grid sizes it from the round's bounds; its true
/// size is drawn from the synthetic power law).
pub fn parse_sites(text: &str) -> Result<Vec<SimSite>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if f.len() > 2 {
            return Err(SimError::BadLine {
                line,
                msg: "expected `HOST [PAGES]`".into(),
            });
        }
        let pages = match f.get(1) {
            Some(p) => Some(number(line, "pages", p)?),
            None => None,
        };
        out.push(SimSite {
            name: f[0].to_string(),
            pages,
        });
        if out.len() > MAX_SIM_SITES {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_SITES} sites")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no sites in the file".into()));
    }
    Ok(out)
}

/// A hosts file: `NAME PAGES_PER_S [SLOTS]` a line (`#` comments).
pub fn parse_hosts(text: &str) -> Result<Vec<SimHost>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if !(2..=3).contains(&f.len()) {
            return Err(SimError::BadLine {
                line,
                msg: "expected `NAME PAGES_PER_S [SLOTS]`".into(),
            });
        }
        let slots = match f.get(2) {
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|s| (1..=beebot_shared::limits::MAX_SLOTS).contains(s))
                .ok_or_else(|| SimError::BadLine {
                    line,
                    msg: format!(
                        "slots `{s}` must be 1 to {}",
                        beebot_shared::limits::MAX_SLOTS
                    ),
                })?,
            None => SYNTH_SLOTS,
        };
        out.push(SimHost {
            name: f[0].to_string(),
            pages_per_s: number(line, "speed", f[1])?,
            slots,
        });
        if out.len() > MAX_SIM_HOSTS {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_HOSTS} hosts")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no hosts in the file".into()));
    }
    Ok(out)
}

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
fn local_time(ms_from_start: u64) -> NaiveDateTime {
    let ms = SIM_START_MS.saturating_add(ms_from_start);
    DateTime::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .naive_utc()
}

/// A window's open intervals `[start, end)` over the horizon, ms from the start.
fn window_intervals(w: &Windows) -> Vec<(u64, u64)> {
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
fn timeline(
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

// ---- the simulation ----

/// A site as it truly is.
struct SiteTruth {
    /// Pages to its natural end: its true size, up to the page cap.
    natural: u64,
    /// Its true size is over the page cap (a scan to the end stops at `MaxPages`).
    capped: bool,
    /// Each page's response time, seconds.
    response_s: Vec<f32>,
}

impl SiteTruth {
    /// Seconds one slot of a host of `pages_per_s` needs for pages `from..`:
    /// each page the politeness delay or its response time plus the host's
    /// own time, whichever is longer. Cumulative, one entry a page.
    fn page_ends(&self, from: u64, pages_per_s: f64, delay_s: f64) -> Vec<f64> {
        let own = 1.0 / pages_per_s.max(1e-6);
        let mut t = 0.0;
        self.response_s
            .iter()
            .skip(from as usize)
            .map(|r| {
                t += (f64::from(*r) + own).max(delay_s);
                t
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The client's loop asks for work.
    Ask(usize),
    /// A running scan reaches its end or its time budget (host, unit, epoch).
    ScanEnd(usize, u64, u64),
    /// A scan reports progress (host, unit, epoch).
    Report(usize, u64, u64),
    /// A deadline passes: the server's ticker runs.
    Tick,
    /// A host's availability changes (host, index into its timeline).
    Avail(usize, usize),
}

/// A scan in a client.
struct Scan {
    /// Pages the job's earlier scans did (the unit's `resume`).
    start_page: u64,
    /// Cumulative seconds of scanning at which each page of this scan ends.
    page_ends: Vec<f64>,
    /// Seconds of scanning done up to `since_ms` (or up to the pause).
    done_s: f64,
    /// Scanning since (`None`: paused).
    since_ms: Option<u64>,
    /// When it started: elapsed time and the time budget count from here,
    /// pauses included, as the client's crawler counts them.
    started_ms: u64,
    /// Seconds of scanning at its last checkpoint.
    checkpoint_s: f64,
}

impl Scan {
    fn done_at(&self, now: u64) -> f64 {
        let run = self
            .since_ms
            .map_or(0.0, |s| now.saturating_sub(s) as f64 / 1000.0);
        let total = self.page_ends.last().copied().unwrap_or(0.0);
        (self.done_s + run).min(total)
    }
    fn pages_at(&self, now: u64) -> u64 {
        let done = self.done_at(now) + 1e-9;
        self.page_ends.partition_point(|&e| e <= done) as u64
    }
    fn pause(&mut self, now: u64) {
        self.done_s = self.done_at(now);
        self.since_ms = None;
    }
}

enum HeldState {
    Waiting,
    Scanning(Scan),
}

/// A unit the client holds.
struct Held {
    unit: WorkUnit,
    site: usize,
    state: HeldState,
}

/// The client of one host.
struct Client {
    host_id: u64,
    avail: Avail,
    /// Its window's open intervals (ms from the start), sent with work
    /// requests; `None`: it keeps no window.
    window: Option<Vec<(u64, u64)>>,
    held: Vec<Held>,
    job_s: Option<f64>,
    next_request_ms: u64,
    ask_at: Option<u64>,
    /// Bumped at every change of availability: events of earlier epochs are stale.
    epoch: u64,
}

struct Sim<'a> {
    opts: &'a SimOptions,
    hosts: &'a [SimHost],
    sites: Vec<SiteTruth>,
    timelines: Vec<Timeline>,
    grid: Grid,
    project_key: VerifyingKey,
    round_id: u64,
    /// Grid job id → site index.
    job_site: HashMap<u64, usize>,
    rng: Rng,
    /// Milliseconds since the start (the grid sees `SIM_START_MS + now`).
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    clients: Vec<Client>,
    /// Page ranges of each site that accepted scans covered.
    covered: Vec<Vec<(u64, u64)>>,
    busy_s: f64,
    wasted_s: f64,
    continuations: u64,
    round_over: bool,
}

impl Sim<'_> {
    /// Schedule an event (never in the past).
    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t.max(self.now), self.seq, ev)));
    }

    fn grid_now(&self) -> u64 {
        SIM_START_MS + self.now
    }

    fn ask_soon(&mut self, h: usize, t: u64) {
        let c = &mut self.clients[h];
        if c.ask_at.is_some_and(|a| a <= t) {
            return;
        }
        c.ask_at = Some(t);
        self.at(t, Ev::Ask(h));
    }

    fn check_round(&mut self) {
        self.round_over = self.grid.status().rounds_running == 0;
    }

    /// The open intervals a client sends, seconds from now (as
    /// `Gate::open_intervals`), and the seconds left in the open one.
    fn open_windows(&self, h: usize) -> (Option<Vec<(u64, u64)>>, Option<u64>) {
        let Some(w) = &self.clients[h].window else {
            return (None, None);
        };
        let now = self.now;
        let v: Vec<(u64, u64)> = w
            .iter()
            .filter(|&&(_, b)| b > now)
            .take(MAX_WINDOW_INTERVALS)
            .map(|&(a, b)| (a.saturating_sub(now) / 1000, (b - now) / 1000))
            .collect();
        let left = v.first().filter(|x| x.0 == 0).map(|x| x.1);
        (Some(v), left)
    }

    /// The client asks for work when its buffer runs low (`fetch_work`).
    fn on_ask(&mut self, h: usize) -> Result<(), SimError> {
        if self.clients[h].ask_at != Some(self.now) {
            return Ok(());
        }
        self.clients[h].ask_at = None;
        let c = &self.clients[h];
        if c.avail != Avail::On {
            return Ok(());
        }
        if self.now < c.next_request_ms {
            let t = c.next_request_ms;
            self.ask_soon(h, t);
            return Ok(());
        }
        let unfinished = c.held.len();
        let Some((want, free)) = work_wanted(
            self.hosts[h].slots,
            unfinished,
            c.job_s,
            self.opts.round_trip_s,
            self.opts.buffer_min_s,
            self.opts.buffer_max_s,
        ) else {
            return Ok(()); // asks again when a scan ends
        };
        let (open_windows, left) = self.open_windows(h);
        let req = WorkRequest {
            want_seconds: left.map_or(want, |l| want.min(l)),
            free_slots: free,
            units_held: c.held.iter().map(|u| u.unit.unit_id).collect(),
            open_windows,
        };
        let host_id = c.host_id;
        let reply = self.grid.request_work(host_id, &req, self.grid_now())?;
        let mut got = 0;
        for signed in &reply.units {
            // As the client: verified with the project key, and ours.
            let Ok(unit) = sign::verify_unit(&self.project_key, signed) else {
                continue;
            };
            let Some(&site) = self.job_site.get(&unit.job_id) else {
                continue;
            };
            if unit.host_id != host_id {
                continue;
            }
            if unit.resume.is_some() {
                self.continuations += 1;
            }
            self.at(unit.deadline_ms.saturating_sub(SIM_START_MS) + 1, Ev::Tick);
            self.clients[h].held.push(Held {
                unit,
                site,
                state: HeldState::Waiting,
            });
            got += 1;
        }
        if got > 0 {
            self.start_scans(h)?;
            self.ask_soon(h, self.now + CLIENT_TICK_MS);
        } else {
            let wait_s = reply.retry_after_s.unwrap_or(30);
            let jitter = 1.0 + 0.2 * self.rng.unit();
            let t = self.now + (wait_s as f64 * 1000.0 * jitter) as u64;
            self.clients[h].next_request_ms = t;
            self.ask_soon(h, t);
        }
        Ok(())
    }

    /// Start waiting units on free slots, first come first served.
    fn start_scans(&mut self, h: usize) -> Result<(), SimError> {
        if self.clients[h].avail != Avail::On {
            return Ok(());
        }
        let slots = self.hosts[h].slots.max(1) as usize;
        loop {
            let c = &self.clients[h];
            let scanning = c
                .held
                .iter()
                .filter(|u| matches!(u.state, HeldState::Scanning(_)))
                .count();
            let Some(i) = c
                .held
                .iter()
                .position(|u| matches!(u.state, HeldState::Waiting))
            else {
                return Ok(());
            };
            if scanning >= slots {
                return Ok(());
            }
            if self.rng.unit() < self.opts.scan_failures {
                // The scan cannot run here: the client gives the unit back.
                let unit_id = c.held[i].unit.unit_id;
                let host_id = c.host_id;
                self.clients[h].held.remove(i);
                self.grid
                    .fail(host_id, unit_id, "simulated scan failure", self.grid_now())?;
                self.check_round();
                continue;
            }
            let held = &self.clients[h].held[i];
            let from = held.unit.resume.as_ref().map_or(0, |r| r.pages_done);
            let delay_s = held.unit.limits.delay_ms as f64 / 1000.0;
            let page_ends =
                self.sites[held.site].page_ends(from, self.hosts[h].pages_per_s, delay_s);
            let unit_id = held.unit.unit_id;
            self.clients[h].held[i].state = HeldState::Scanning(Scan {
                start_page: from,
                page_ends,
                done_s: 0.0,
                since_ms: Some(self.now),
                started_ms: self.now,
                checkpoint_s: 0.0,
            });
            self.schedule_scan(h, unit_id);
        }
    }

    /// Schedule a scan's end (when running) and its next progress report.
    fn schedule_scan(&mut self, h: usize, unit_id: u64) {
        let c = &self.clients[h];
        let epoch = c.epoch;
        let Some(Held {
            state: HeldState::Scanning(s),
            unit,
            ..
        }) = c.held.iter().find(|u| u.unit.unit_id == unit_id)
        else {
            return;
        };
        let end = s.since_ms.map(|since| {
            let left = s.page_ends.last().copied().unwrap_or(0.0) - s.done_s;
            let natural = since + (left.max(0.0) * 1000.0).ceil() as u64;
            let budget = s.started_ms + unit.limits.max_seconds.saturating_mul(1000);
            natural.min(budget)
        });
        let reports = matches!(c.avail, Avail::On | Avail::Gated);
        if let Some(end) = end {
            self.at(end, Ev::ScanEnd(h, unit_id, epoch));
        }
        if reports {
            self.at(
                self.now + PROGRESS_INTERVAL_MS,
                Ev::Report(h, unit_id, epoch),
            );
        }
    }

    fn scan_of(&self, h: usize, unit_id: u64) -> Option<(usize, &Scan)> {
        self.clients[h]
            .held
            .iter()
            .enumerate()
            .find_map(|(i, u)| match &u.state {
                HeldState::Scanning(s) if u.unit.unit_id == unit_id => Some((i, s)),
                _ => None,
            })
    }

    /// A scan ends: at its natural end, or at its time budget with its frontier.
    fn on_scan_end(&mut self, h: usize, unit_id: u64, epoch: u64) -> Result<(), SimError> {
        if self.clients[h].epoch != epoch || self.clients[h].avail != Avail::On {
            return Ok(());
        }
        self.end_scan(h, unit_id, false)
    }

    /// End a running scan now: at its natural end or its time budget, or
    /// handed over ([`ABORT_HAND_OVER`]: what it did, with its frontier).
    fn end_scan(&mut self, h: usize, unit_id: u64, hand_over: bool) -> Result<(), SimError> {
        let Some((i, scan)) = self.scan_of(h, unit_id) else {
            return Ok(());
        };
        let pages = scan.pages_at(self.now);
        let natural = pages as usize >= scan.page_ends.len();
        let (start_page, started_ms, done_s) =
            (scan.start_page, scan.started_ms, scan.done_at(self.now));
        let held = self.clients[h].held.remove(i);
        let site = held.site;
        let stopped_by = if !natural && hand_over {
            Some(StopReason::Cancelled)
        } else if !natural {
            Some(StopReason::MaxTime)
        } else if self.sites[site].capped {
            Some(StopReason::MaxPages)
        } else {
            None
        };
        let elapsed_ms = self.now - started_ms;
        let c = &mut self.clients[h];
        let took = elapsed_ms as f64 / 1000.0;
        c.job_s = Some(match c.job_s {
            None => took,
            Some(a) => a + 0.3 * (took - a),
        });
        self.busy_s += done_s;
        let summary = ScanSummary {
            pages,
            bytes: pages * PAGE_BYTES,
            elapsed_ms,
            stopped_by,
            ..Default::default()
        };
        let state = (!natural).then(|| ScanState {
            site: held.unit.site.clone(),
            pages_done: start_page + pages,
            ..Default::default()
        });
        let outcome = self.upload(h, &held.unit, summary, state)?;
        if outcome == UploadOutcome::Accepted {
            self.covered[site].push((start_page, start_page + pages));
            self.check_round();
        } else {
            self.wasted_s += done_s;
        }
        self.start_scans(h)?;
        self.ask_soon(h, self.now);
        Ok(())
    }

    /// The server's three upload steps, the link file verified and never written.
    fn upload(
        &mut self,
        h: usize,
        unit: &WorkUnit,
        summary: ScanSummary,
        state: Option<ScanState>,
    ) -> Result<UploadOutcome, SimError> {
        let header = LinkFileHeader::of_unit(unit, summary.pages, 0);
        let link_file =
            linkfile::encode(&header, &[]).map_err(|e| SimError::Invalid(e.to_string()))?;
        let state = state
            .map(|s| s.encode())
            .transpose()
            .map_err(|e| SimError::Invalid(e.to_string()))?;
        let host_id = self.clients[h].host_id;
        let now = self.grid_now();
        let plan = match self.grid.upload_begin(host_id, unit.unit_id, now)? {
            UploadStep::Answer(o) => return Ok(o),
            UploadStep::Plan(p) => p,
        };
        finish_upload(&mut self.grid, &plan, summary, &link_file, state, now)
    }

    /// A scan's progress report: `Extend` is followed, `Abort` stops it.
    fn on_report(&mut self, h: usize, unit_id: u64, epoch: u64) -> Result<(), SimError> {
        let c = &self.clients[h];
        if c.epoch != epoch || !matches!(c.avail, Avail::On | Avail::Gated) {
            return Ok(());
        }
        let Some((i, scan)) = self.scan_of(h, unit_id) else {
            return Ok(());
        };
        let pages = scan.start_page + scan.pages_at(self.now);
        let host_id = c.host_id;
        match self
            .grid
            .progress(host_id, unit_id, pages, 0, self.grid_now())?
        {
            ProgressOutcome::Abort(r) if r == ABORT_HAND_OVER => {
                return self.end_scan(h, unit_id, true);
            }
            ProgressOutcome::Abort(_) => {
                let held = self.clients[h].held.remove(i);
                if let HeldState::Scanning(s) = held.state {
                    let done = s.done_at(self.now);
                    self.busy_s += done;
                    self.wasted_s += done;
                }
                self.start_scans(h)?;
                self.ask_soon(h, self.now);
                return Ok(());
            }
            ProgressOutcome::Extend(d) => {
                self.clients[h].held[i].unit.deadline_ms = d;
                self.at(d.saturating_sub(SIM_START_MS) + 1, Ev::Tick);
            }
            ProgressOutcome::Continue => {}
        }
        self.at(
            self.now + PROGRESS_INTERVAL_MS,
            Ev::Report(h, unit_id, epoch),
        );
        Ok(())
    }

    /// A host's availability changes: scans pause (checkpointed), stop (lost
    /// back to the last checkpoint) or resume.
    fn on_avail(&mut self, h: usize, idx: usize) -> Result<(), SimError> {
        let Some(&(_, to, clean)) = self.timelines[h].changes.get(idx) else {
            return Ok(());
        };
        if let Some(&(t, _, _)) = self.timelines[h].changes.get(idx + 1) {
            self.at(t, Ev::Avail(h, idx + 1));
        }
        let now = self.now;
        let c = &mut self.clients[h];
        let from = c.avail;
        if from == to || from == Avail::Gone {
            return Ok(());
        }
        c.avail = to;
        c.epoch += 1;
        let mut lost = 0.0;
        for u in c.held.iter_mut() {
            let HeldState::Scanning(s) = &mut u.state else {
                continue;
            };
            if s.since_ms.is_some() {
                s.pause(now);
                if clean {
                    s.checkpoint_s = s.done_s;
                }
            }
            if matches!(to, Avail::Off | Avail::Gone) {
                // Back to the last checkpoint: at least every 30 s of scanning.
                let every = CHECKPOINT_INTERVAL_MS as f64 / 1000.0;
                let kept = s.checkpoint_s.max((s.done_s / every).floor() * every);
                lost += s.done_s - kept;
                s.done_s = kept;
                s.checkpoint_s = kept;
            }
            if to == Avail::On {
                s.since_ms = Some(now);
            }
        }
        self.busy_s += lost;
        self.wasted_s += lost;
        if to == Avail::Gone {
            return Ok(());
        }
        let ids: Vec<u64> = self.clients[h]
            .held
            .iter()
            .filter(|u| matches!(u.state, HeldState::Scanning(_)))
            .map(|u| u.unit.unit_id)
            .collect();
        for id in ids {
            self.schedule_scan(h, id);
        }
        if to == Avail::On {
            self.start_scans(h)?;
            self.ask_soon(h, now);
        }
        Ok(())
    }

    fn on_tick(&mut self) -> Result<(), SimError> {
        if self.grid.tick(self.grid_now())? > 0 {
            self.check_round();
        }
        Ok(())
    }

    /// Pages of the sites' natural ends no accepted scan covered.
    fn pages_lost(&self) -> u64 {
        self.sites
            .iter()
            .zip(&self.covered)
            .map(|(site, ranges)| {
                let mut r = ranges.clone();
                r.sort_unstable();
                let (mut covered, mut reach) = (0, 0);
                for (a, b) in r {
                    let (a, b) = (a.max(reach), b.min(site.natural));
                    if b > a {
                        covered += b - a;
                        reach = b;
                    }
                }
                site.natural - covered.min(site.natural)
            })
            .sum()
    }
}

/// The last upload steps as `serve` runs them: verify, write (to memory),
/// then finish or refuse.
fn finish_upload(
    grid: &mut Grid,
    plan: &UploadPlan,
    summary: ScanSummary,
    link_file: &[u8],
    state: Option<Vec<u8>>,
    now: u64,
) -> Result<UploadOutcome, SimError> {
    match plan.verify(&summary, link_file, state.as_deref()) {
        Ok(info) => {
            plan.write(link_file, info.state.as_ref())
                .map_err(GridError::from)?;
            Ok(grid.upload_finish(plan, summary, info, now)?)
        }
        Err(reason) => Ok(grid.upload_refused(plan, reason, now)?),
    }
}

/// Derive 32 key bytes from a seed.
fn key_bytes(rng: &mut Rng) -> [u8; 32] {
    let mut k = [0u8; 32];
    for chunk in k.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    k
}

/// Run one round of `sites` on `hosts` under `policy` with one seed.
pub fn run(
    sites: &[SimSite],
    hosts: &[SimHost],
    policy: &str,
    seed: u64,
    opts: &SimOptions,
) -> Result<RunResult, SimError> {
    if scheduler::policy_by_name(policy).is_none() {
        return Err(SimError::Invalid(format!("unknown policy `{policy}`")));
    }
    let mut rng = Rng::new(seed);
    let delay_s = opts.delay_ms as f64 / 1000.0;
    let noise = opts.noise.clamp(0.0, 0.95);
    let max_pages = u64::from(opts.max_pages.max(1));
    // The truth: sizes and response times.
    let truths: Vec<SiteTruth> = sites
        .iter()
        .map(|s| {
            let size = match s.pages {
                Some(p) => (p * rng.around_one(noise)).round().max(1.0),
                None => rng.pareto_pages(),
            } as u64;
            let natural = size.min(max_pages);
            let mean = RESPONSE_MEDIAN_S * (RESPONSE_SIGMA * rng.normal()).exp();
            SiteTruth {
                natural,
                capped: size > max_pages,
                response_s: (0..natural).map(|_| rng.exp(mean) as f32).collect(),
            }
        })
        .collect();
    // Availability, the same for every policy under one seed.
    let office = window_intervals(&Windows::parse(OFFICE_HOURS).map_err(invalid)?);
    let nights_window = Windows::parse(NIGHTS_AND_WEEKENDS).map_err(invalid)?;
    let nights = window_intervals(&nights_window);
    let seconds: Vec<Vec<f64>> = hosts
        .iter()
        .map(|h| {
            truths
                .iter()
                .map(|t| {
                    t.page_ends(0, h.pages_per_s, delay_s)
                        .last()
                        .copied()
                        .unwrap_or(0.0)
                })
                .collect()
        })
        .collect();
    let slots: Vec<u32> = hosts.iter().map(|h| h.slots).collect();
    let always: Vec<Timeline> = hosts.iter().map(|_| Timeline::always()).collect();
    let vanish_within_ms = lower_bound_s(&seconds, &slots, &always) * 1000.0;
    let mut windows = Vec::with_capacity(hosts.len());
    let timelines: Vec<Timeline> = (0..hosts.len())
        .map(|i| {
            let kind = match opts.availability {
                Availability::Always => 0,
                Availability::Desktops => (rng.unit() * 3.0) as usize,
            };
            let (base, closed, window) = match kind {
                1 => (office.as_slice(), Avail::Off, None),
                2 => (nights.as_slice(), Avail::Gated, Some(nights.clone())),
                _ => (&[(0, HORIZON_MS)][..], Avail::Off, None),
            };
            windows.push(window);
            // The first host stays, so that every round can end.
            let gone =
                (i > 0 && rng.unit() < opts.vanish).then(|| (rng.unit() * vanish_within_ms) as u64);
            timeline(base, closed, opts.dropout.clamp(0.0, 0.9), gone, &mut rng)
        })
        .collect();
    let lower = lower_bound_s(&seconds, &slots, &timelines);

    // The grid, over a store in memory: the sites with their last scans.
    let store = crate::store::memory();
    for (s, _) in sites.iter().zip(&truths) {
        store
            .put_site(&SiteRecord {
                host: s.name.clone(),
                added_ms: SIM_START_MS,
                last_scan: s.pages.map(|p| SiteStats {
                    pages: p.round() as u64,
                    ..Default::default()
                }),
            })
            .map_err(GridError::from)?;
    }
    let key = SigningKey::from_bytes(&key_bytes(&mut rng));
    let settings = GridSettings {
        user_agent: "BeeBot/simulated (+https://example.invalid/beebot)".into(),
        deadline_slack: opts.deadline_slack,
        deadline_grace_s: opts.deadline_grace_s,
        trust_after: crate::validate::DEFAULT_TRUST_AFTER,
        spot_check_percent: crate::validate::DEFAULT_SPOT_CHECK_PERCENT,
    };
    // In memory: a simulated link file holds a header and no records (about
    // 50 bytes a site once the round is done), and the files and states no
    // result keeps are removed as on disk.
    let io = GridIo::in_memory(store, Arc::new(MemoryLinks::new()), key.clone(), seed);
    let mut grid = Grid::open(io, settings)?;
    let token = grid.create_invite(hosts.len() as u32, SIM_START_MS + HORIZON_MS, SIM_START_MS)?;
    let mut clients = Vec::with_capacity(hosts.len());
    for ((h, window), tl) in hosts.iter().zip(windows).zip(&timelines) {
        // A host that is not on at the start was last heard from before it
        // (the grid counts it offline until it asks); the others just enrolled.
        let seen = if tl.changes.first().is_some_and(|c| c.1 == Avail::On) {
            SIM_START_MS
        } else {
            SIM_START_MS - scheduler::ONLINE_WINDOW_MS - 1000
        };
        let host_key = SigningKey::from_bytes(&key_bytes(&mut rng));
        let info = HostInfo {
            name: h.name.clone(),
            os: "simulated".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            cores: h.slots,
        };
        let id = grid.enrol(&token, host_key.verifying_key().to_bytes(), info, seen)?;
        if opts.trusted {
            grid.set_trusted(id)?;
        }
        // The first-start benchmark: the reference site at delay 0.
        let bench = h.pages_per_s * rng.around_one(opts.benchmark_noise.clamp(0.0, 0.95));
        grid.benchmark(id, bench, bench * (PAGE_BYTES / 1024) as f64, h.slots, seen)?;
        clients.push(Client {
            host_id: id,
            avail: Avail::Off,
            window,
            held: Vec::new(),
            job_s: None,
            next_request_ms: 0,
            ask_at: None,
            epoch: 0,
        });
    }
    let defaults = RoundDefaults::default();
    let params = crate::model::RoundParams {
        validate: opts.validate,
        policy: policy.to_string(),
        max_pages: opts.max_pages,
        delay_ms: opts.delay_ms,
        max_seconds: opts.max_seconds,
        max_attempts: opts.max_attempts,
        deadline_min_s: opts.deadline_min_s,
        deadline_max_s: opts.deadline_max_s,
        ..defaults.params()
    };
    let round_id = grid.start_round(params, SIM_START_MS)?;
    let (_, jobs) = grid.round(round_id)?;
    let index: HashMap<&str, usize> = sites
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let job_site: HashMap<u64, usize> = jobs
        .iter()
        .filter_map(|j| index.get(j.site.as_str()).map(|&i| (j.id, i)))
        .collect();
    if job_site.len() != sites.len() {
        return Err(SimError::Invalid(
            "site names must be distinct and valid hosts".into(),
        ));
    }
    let mut sim = Sim {
        opts,
        hosts,
        covered: vec![Vec::new(); truths.len()],
        sites: truths,
        timelines,
        project_key: key.verifying_key(),
        grid,
        round_id,
        job_site,
        rng,
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        clients,
        busy_s: 0.0,
        wasted_s: 0.0,
        continuations: 0,
        round_over: false,
    };
    for h in 0..hosts.len() {
        // Clients start within a second of each other.
        let t = (sim.rng.unit() * 1000.0) as u64;
        sim.at(t, Ev::Avail(h, 0));
    }
    let bound = EVENTS_PER_JOB * sites.len() as u64 + EVENTS_PER_HOST * hosts.len() as u64;
    let mut processed = 0u64;
    while !sim.round_over && processed < bound {
        let Some(Reverse((t, _, ev))) = sim.events.pop() else {
            break;
        };
        if t >= HORIZON_MS {
            break;
        }
        processed += 1;
        sim.now = t;
        match ev {
            Ev::Ask(h) => sim.on_ask(h)?,
            Ev::ScanEnd(h, u, e) => sim.on_scan_end(h, u, e)?,
            Ev::Report(h, u, e) => sim.on_report(h, u, e)?,
            Ev::Tick => sim.on_tick()?,
            Ev::Avail(h, i) => sim.on_avail(h, i)?,
        }
    }
    // Scans still running at the end count as busy (their copies now useless).
    let now = sim.now;
    for c in &sim.clients {
        for u in &c.held {
            if let HeldState::Scanning(s) = &u.state {
                let done = s.done_at(now);
                sim.busy_s += done;
                sim.wasted_s += done;
            }
        }
    }
    let (round, jobs) = sim.grid.round(sim.round_id)?;
    let finished = round.state == RoundState::Done;
    let makespan_s = round
        .finished_ms
        .unwrap_or(SIM_START_MS + now)
        .saturating_sub(SIM_START_MS) as f64
        / 1000.0;
    let mut reissued = 0;
    let mut replicated = 0;
    let mut failed = 0;
    for j in &jobs {
        let copies = j.attempts.iter().filter(|a| a.replica).count() as u64;
        replicated += copies;
        // Checks of a result (later chains) are not reissues.
        let checks = j
            .attempts
            .iter()
            .filter(|a| a.chain > 0 && !a.replica)
            .count() as u64;
        reissued += (j.attempts.len() as u64 - copies - checks).saturating_sub(1);
        failed += u64::from(j.state == crate::model::JobState::Failed);
    }
    let counts = crate::api::JobCounts::of(&jobs);
    let slot_total: f64 = hosts.iter().map(|h| f64::from(h.slots.max(1))).sum();
    Ok(RunResult {
        seed,
        makespan_s,
        lower_bound_s: lower,
        utilisation: if makespan_s > 0.0 {
            sim.busy_s / (slot_total * makespan_s)
        } else {
            0.0
        },
        pages_lost: sim.pages_lost(),
        pages_total: sim.sites.iter().map(|s| s.natural).sum(),
        continuations: sim.continuations,
        // Continuation units are new attempts too, but not reissues.
        reissued: reissued.saturating_sub(sim.continuations),
        replicated,
        failed,
        wasted_s: sim.wasted_s,
        finished,
        result_pages: counts.pages,
        check_pages: counts.check_pages,
    })
}

fn invalid(e: impl std::fmt::Display) -> SimError {
    SimError::Invalid(e.to_string())
}
/// Where the sites and hosts of a simulation come from.
#[derive(Clone, Debug)]
pub enum Input<T> {
    /// Fixed (from a file).
    Given(Vec<T>),
    /// Generated from each seed.
    Synthetic(usize),
}

/// Run `policies` over `seeds` seeds (seed numbers `first_seed..` of
/// `opts`), in parallel
/// over the machine's cores. Results are per policy, in seed order.
pub fn run_all(
    sites: &Input<SimSite>,
    hosts: &Input<SimHost>,
    policies: &[&str],
    seeds: u32,
    opts: &SimOptions,
) -> Result<Vec<(String, Vec<RunResult>)>, SimError> {
    if seeds == 0 || seeds > MAX_SEEDS {
        return Err(SimError::Invalid(format!("seeds must be 1 to {MAX_SEEDS}")));
    }
    if opts.first_seed > MAX_FIRST_SEED {
        return Err(SimError::Invalid(format!(
            "the first seed must be at most {MAX_FIRST_SEED}"
        )));
    }
    let first = opts.first_seed;
    for (n, max, what) in [
        (
            matches!(sites, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_SITES),
            MAX_SIM_SITES,
            "sites",
        ),
        (
            matches!(hosts, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_HOSTS),
            MAX_SIM_HOSTS,
            "hosts",
        ),
    ] {
        if n {
            return Err(SimError::Invalid(format!(
                "synthetic {what} must be 1 to {max}"
            )));
        }
    }
    for name in policies {
        if scheduler::policy_by_name(name).is_none() {
            return Err(SimError::Invalid(format!(
                "unknown policy `{name}` (known: {})",
                scheduler::POLICY_NAMES.join(", ")
            )));
        }
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, seeds as usize);
    let mut out = Vec::new();
    for name in policies {
        let mut results: Vec<RunResult> = Vec::with_capacity(seeds as usize);
        let mut error = None;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || {
                        (first..first + seeds as u64)
                            .filter(|seed| (*seed - first) as usize % threads == t)
                            .map(|seed| {
                                let ss = match sites {
                                    Input::Given(v) => v.clone(),
                                    Input::Synthetic(n) => synthetic_sites(*n, opts.unknown, seed),
                                };
                                let hs = match hosts {
                                    Input::Given(v) => v.clone(),
                                    Input::Synthetic(m) => synthetic_hosts(*m, seed),
                                };
                                run(&ss, &hs, name, seed, opts)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                match h.join() {
                    Ok(runs) => {
                        for r in runs {
                            match r {
                                Ok(r) => results.push(r),
                                Err(e) => error = Some(e),
                            }
                        }
                    }
                    Err(_) => {
                        error = Some(SimError::Invalid("a simulation thread panicked".into()))
                    }
                }
            }
        });
        if let Some(e) = error {
            return Err(e);
        }
        results.sort_by_key(|r| r.seed);
        out.push((name.to_string(), results));
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarise one policy's runs.
pub fn summarise(policy: &str, runs: &[RunResult]) -> PolicySummary {
    let ratio = |r: &RunResult| {
        if r.lower_bound_s > 0.0 {
            r.makespan_s / r.lower_bound_s
        } else {
            f64::INFINITY
        }
    };
    let n = runs.len().max(1) as f64;
    PolicySummary {
        policy: policy.to_string(),
        runs: runs.len(),
        makespan_median_s: median(runs.iter().map(|r| r.makespan_s).collect()),
        makespan_worst_s: runs.iter().map(|r| r.makespan_s).fold(0.0, f64::max),
        ratio_median: median(runs.iter().map(ratio).collect()),
        ratio_worst: runs.iter().map(ratio).fold(0.0, f64::max),
        utilisation_median: median(runs.iter().map(|r| r.utilisation).collect()),
        pages_lost_total: runs.iter().map(|r| r.pages_lost).sum(),
        continuations_mean: runs.iter().map(|r| r.continuations as f64).sum::<f64>() / n,
        reissued_mean: runs.iter().map(|r| r.reissued as f64).sum::<f64>() / n,
        replicated_mean: runs.iter().map(|r| r.replicated as f64).sum::<f64>() / n,
        failed_total: runs.iter().map(|r| r.failed).sum(),
        unfinished: runs.iter().filter(|r| !r.finished).count(),
        check_overhead: runs.iter().map(|r| r.check_pages).sum::<u64>() as f64
            / runs.iter().map(|r| r.result_pages).sum::<u64>().max(1) as f64,
    }
}

/// The table printed by `simulate`.
pub fn table(rows: &[PolicySummary]) -> String {
    let mut s = String::from(
        "policy        makespan med    worst   /LB med   worst   util  lost  continued  reissued  replicated  failed  checks\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{:<12} {:>11.0}s {:>8.0}s {:>9.3} {:>7.3} {:>5.0}% {:>5} {:>10.1} {:>9.1} {:>11.1} {:>7} {:>6.1}%{}\n",
            r.policy,
            r.makespan_median_s,
            r.makespan_worst_s,
            r.ratio_median,
            r.ratio_worst,
            r.utilisation_median * 100.0,
            r.pages_lost_total,
            r.continuations_mean,
            r.reissued_mean,
            r.replicated_mean,
            r.failed_total,
            r.check_overhead * 100.0,
            if r.unfinished > 0 {
                format!("  ({} runs unfinished)", r.unfinished)
            } else {
                String::new()
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small runs for the debug-built suite: few pages per site.
    fn small() -> SimOptions {
        SimOptions {
            max_pages: 120,
            ..SimOptions::default()
        }
    }

    fn always_on(m: usize) -> Vec<Timeline> {
        (0..m).map(|_| Timeline::always()).collect()
    }

    #[test]
    fn the_generator_is_stable_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
            let y = a.around_one(0.3);
            b.around_one(0.3);
            assert!((0.7..=1.3).contains(&y));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn synthetic_inputs_follow_their_laws() {
        let sites = synthetic_sites(2000, 0.1, 1);
        let known: Vec<f64> = sites.iter().filter_map(|s| s.pages).collect();
        assert!(known
            .iter()
            .all(|p| (SYNTH_MIN_PAGES..=SYNTH_MAX_PAGES).contains(p)));
        let unknown = sites.len() - known.len();
        assert!((100..300).contains(&unknown), "{unknown} unknown");
        let mut p = known;
        p.sort_by(f64::total_cmp);
        // A heavy tail: the largest site is far above the median.
        assert!(
            p[p.len() - 1] > 30.0 * p[p.len() / 2],
            "{:?}",
            (p[p.len() / 2], p[p.len() - 1])
        );
        let hosts = synthetic_hosts(500, 1);
        let (lo, hi) = hosts.iter().fold((f64::MAX, 0.0f64), |(l, h), x| {
            (l.min(x.pages_per_s), h.max(x.pages_per_s))
        });
        assert!(lo >= SYNTH_MIN_SPEED && hi <= SYNTH_MAX_SPEED && hi / lo > 8.0);
        assert_eq!(synthetic_sites(5, 0.5, 3), synthetic_sites(5, 0.5, 3));
    }

    #[test]
    fn files_parse_and_refuse_bad_lines() {
        let s = parse_sites("# sites\nwww.a.edu 120\nwww.b.edu\n\n").unwrap();
        assert_eq!(s[0].pages, Some(120.0));
        assert_eq!(s[1].pages, None);
        assert!(matches!(
            parse_sites("a 1 2\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_sites("a -4\n"),
            Err(SimError::BadLine { .. })
        ));
        assert!(parse_sites("# none\n").is_err());
        let h = parse_hosts("pc1 2.5 4\npc2 1\n").unwrap();
        assert_eq!(
            (h[0].pages_per_s, h[0].slots, h[1].slots),
            (2.5, 4, SYNTH_SLOTS)
        );
        assert!(matches!(
            parse_hosts("pc1\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_hosts("x\npc 1 0\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
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

    /// Every policy scans every page of every site: with the politeness
    /// delay and without, with desktops coming and going.
    fn no_page_is_lost(o: &SimOptions, sites: usize, hosts: usize, seeds: std::ops::Range<u64>) {
        for name in scheduler::POLICY_NAMES {
            for seed in seeds.clone() {
                let s = synthetic_sites(sites, o.unknown, seed);
                let h = synthetic_hosts(hosts, seed);
                let r = run(&s, &h, name, seed, o).unwrap();
                assert!(r.finished, "{name} seed {seed}: {r:?}");
                assert_eq!(r.pages_lost, 0, "{name} seed {seed}: {r:?}");
                assert_eq!(r.failed, 0, "{name} seed {seed}: {r:?}");
                assert!(
                    r.makespan_s >= r.lower_bound_s * 0.999,
                    "{name} seed {seed} beat the lower bound: {r:?}"
                );
                assert!(
                    r.utilisation > 0.0 && r.utilisation <= 1.0 + 1e-9,
                    "{name}: {r:?}"
                );
            }
        }
    }

    #[test]
    fn no_page_is_lost_at_the_default_delay() {
        no_page_is_lost(&small(), 30, 3, 0..2);
    }

    #[test]
    fn no_page_is_lost_without_a_delay() {
        let o = SimOptions {
            delay_ms: 0,
            ..small()
        };
        no_page_is_lost(&o, 30, 3, 0..2);
    }

    #[test]
    fn no_page_is_lost_when_hosts_vanish_mid_scan_or_never_return() {
        let o = SimOptions {
            dropout: 0.3,
            vanish: 0.5,
            scan_failures: 0.05,
            ..small()
        };
        no_page_is_lost(&o, 24, 4, 0..2);
    }

    #[test]
    fn a_run_is_reproduced_by_its_seed() {
        let s = synthetic_sites(20, 0.1, 4);
        let h = synthetic_hosts(3, 4);
        let a = run(&s, &h, "adaptive", 4, &small()).unwrap();
        assert_eq!(run(&s, &h, "adaptive", 4, &small()).unwrap(), a);
    }

    #[test]
    fn a_time_budget_cuts_scans_and_continuations_finish_them() {
        // Scans longer than 60 s stop at the budget and go on from their frontier.
        let o = SimOptions {
            max_seconds: 60,
            availability: Availability::Always,
            ..small()
        };
        let s = synthetic_sites(12, 0.0, 2);
        let h = synthetic_hosts(2, 2);
        for name in ["adaptive", "round-robin"] {
            let r = run(&s, &h, name, 2, &o).unwrap();
            assert!(r.finished, "{name}: {r:?}");
            assert!(r.continuations > 0, "{name}: {r:?}");
            assert_eq!(r.pages_lost, 0, "{name}: {r:?}");
        }
    }

    #[test]
    fn adaptive_beats_round_robin_on_a_small_case() {
        let o = SimOptions {
            first_seed: 0,
            ..small()
        };
        let res = run_all(
            &Input::Synthetic(40),
            &Input::Synthetic(3),
            &["adaptive", "round-robin"],
            6,
            &o,
        )
        .unwrap();
        let rows: Vec<PolicySummary> = res.iter().map(|(p, r)| summarise(p, r)).collect();
        let t = table(&rows);
        assert!(
            rows[0].makespan_median_s < rows[1].makespan_median_s,
            "seeds 0..6\n{t}"
        );
        assert_eq!(rows[0].pages_lost_total, 0, "{t}");
    }

    #[test]
    fn run_all_checks_its_arguments() {
        let o = small();
        let s = Input::Synthetic(5);
        let h = Input::Synthetic(2);
        assert!(run_all(&s, &h, &["nope"], 1, &o).is_err());
        assert!(run_all(&s, &h, &["adaptive"], 0, &o).is_err());
        assert!(run_all(&Input::Synthetic(0), &h, &["adaptive"], 1, &o).is_err());
        let r = run_all(&s, &Input::Given(synthetic_hosts(2, 0)), &["pack"], 3, &o).unwrap();
        assert_eq!(
            r[0].1.iter().map(|r| r.seed).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        // Seeds from another first seed: the same runs as in a longer series.
        let later = SimOptions {
            first_seed: 2,
            ..o.clone()
        };
        let r2 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 2, &later).unwrap();
        let r4 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 4, &o).unwrap();
        assert_eq!(r2[0].1, r4[0].1[2..]);
        let too_far = SimOptions {
            first_seed: MAX_FIRST_SEED + 1,
            ..o.clone()
        };
        assert!(run_all(&s, &h, &["adaptive"], 1, &too_far).is_err());
    }
}
