//! `beebot-server simulate`: the grid's own state machine against simulated
//! desktop hosts on a virtual clock.
//!
//! The simulator runs the code `serve` runs: a [`Grid`] over an in-memory
//! [`Store`](crate::store::Store), asked for work ([`Grid::request_work`]: views, policy, issuing,
//! signing, deadlines), told of progress ([`Grid::progress`], extensions and
//! aborts), of failures ([`Grid::fail`]) and of results
//! ([`Grid::upload_begin`], [`UploadPlan::verify`], [`UploadPlan::write`],
//! [`Grid::upload_finish`]; link files and states are kept in memory,
//! [`MemoryLinks`](crate::grid::MemoryLinks)), and ticked at deadlines
//! ([`Grid::tick`]). Only the network, the disk and the crawling are
//! replaced by events; invite tokens are drawn from the run's seed.
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
//!
//! Its rooms: `inputs` (the synthetic and file-given sites and hosts),
//! `timeline` (each host's availability and the round's lower bound),
//! `host` (the simulated client: its units, its scans and what a site
//! truly is), `engine` (the event loop's handlers driving the grid),
//! `run` (one seeded round, set up step by step) and `results` (many
//! seeds in parallel, summaries and the table).
//!
//! Invariants: one seed gives one run, byte for byte, on every platform
//! (every random draw comes from one [`Rng`], in a fixed order); the
//! simulator never writes a file, never opens a socket and never reads the
//! wall clock inside a run.

use beebot_shared::fetch_rules::{DEFAULT_BUFFER_MAX_S, DEFAULT_BUFFER_MIN_S};

use crate::grid::GridError;
use crate::params::RoundParams;
use crate::validate::ValidateMode;

mod engine;
mod host;
mod inputs;
mod results;
mod run;
mod timeline;

pub use engine::{finish_upload, one_page_result};
pub use inputs::{
    parse_hosts, parse_sites, synthetic_hosts, synthetic_sites, SimHost, SimSite, SYNTH_RESOURCES,
};
pub use results::{run_all, summarise, table, Input, PolicySummary};
pub use run::{run, RunResult};
pub use timeline::{lower_bound_s, Avail, Timeline};

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
/// inside the politeness delay (the default of `--response-ms`).
pub const RESPONSE_MEDIAN_S: f64 = 0.25;
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
/// Milliseconds in an hour (host-hours are reported in hours).
const MS_PER_HOUR: f64 = 3_600_000.0;
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
    #[error("the simulated store failed: {0}")]
    Store(#[from] crate::store::StoreError),
}

/// When the hosts may crawl.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
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
    /// Median of the sites' mean response times, seconds (each site's mean
    /// is drawn log-normally around it).
    pub response_median_s: f64,
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
    /// The fault schedule (all 0: none), drawn from a stream of its own so
    /// a seed's other draws stay as they are. Server restarts an hour on
    /// average: the grid is opened again from its store (what it keeps in
    /// memory only is lost; the clients reconnect and say their resources
    /// again).
    pub restarts_per_hour: f64,
    /// Share of accepted uploads whose answer is lost: the client sends the
    /// same upload again, which must not be taken twice.
    pub upload_loss: f64,
    /// Jumps of the server's clock an hour on average (back up to 5
    /// minutes or on up to 15, never more than an hour off).
    pub clock_jumps_per_hour: f64,
    /// Times an hour on average the server's disk fills up (for 2 minutes
    /// on average): writes of the store and link files fail, the store
    /// stops, and the server starts afresh once its probe finds space.
    pub disk_fulls_per_hour: f64,
}

impl Default for SimOptions {
    fn default() -> Self {
        let round = RoundParams::default();
        let server = crate::config::ServerConfig::new("127.0.0.1:4480", "0.0.0.0:4480", "");
        SimOptions {
            noise: 0.3,
            benchmark_noise: 0.1,
            dropout: 0.05,
            vanish: 0.05,
            unknown: 0.1,
            scan_failures: 0.01,
            availability: Availability::Desktops,
            response_median_s: RESPONSE_MEDIAN_S,
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
            restarts_per_hour: 0.0,
            upload_loss: 0.0,
            clock_jumps_per_hour: 0.0,
            disk_fulls_per_hour: 0.0,
        }
    }
}

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

fn invalid(e: impl std::fmt::Display) -> SimError {
    SimError::Invalid(e.to_string())
}

#[cfg(test)]
/// Small runs for the debug-built suite: few pages per site.
fn small() -> SimOptions {
    SimOptions {
        max_pages: 120,
        ..SimOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
