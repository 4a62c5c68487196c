//! The methods bench (binary `beebot-methods`): two claims of the methods
//! the grid is built on, measured end to end on the whole grid on loopback
//! ([`crate::grid`]: the real server and the real client's work loop over
//! QUIC, against the synthetic web, with a politeness delay), each printed
//! as a table.
//!
//! - Coordinator and workers (P-spider): N clients do close to N times the
//!   work of one. The same round on 1, 2, 4… clients at the default slots;
//!   the table gives the round time, T1/TN against the target 0.8 N, and
//!   the lower bounds beside it (the largest site alone at the delay, and
//!   all the fetches spread over every slot).
//! - BeeBot-EDG's experiment: clients of different speeds (throttled) scan
//!   99 sites under `round-robin`, `batch` and `adaptive` in one run, in
//!   that order: round-robin uses no sizes or speeds, and its round teaches
//!   the grid both for the two after it; beside each time, the simulator's
//!   makespan for the same sites and hosts (`beebot-server simulate`'s
//!   code) and simulated/measured.
//!
//! Invariants: every figure is a measured round (round start to its last
//! job, the server's own times) or a simulated one, never derived from a
//! model; each N or policy runs the same synthetic web. It never reaches
//! beyond loopback and never asserts (the tests in `tests/it/methods.rs`
//! keep a small version of each claim).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use beebot_server::params::RoundParams;
use beebot_server::simulate::{self, Availability, Input, SimHost, SimOptions, SimSite};
use beebot_server::validate::ValidateMode;
use beebot_testkit::synth::{SynthConfig, SynthWeb};

use crate::grid::{ClientSpec, LoopbackGrid};

/// Share of N that N clients must reach in speed-up (T1/TN).
pub const SPEEDUP_TARGET: f64 = 0.8;
/// The policies of BeeBot-EDG's experiment, in the order they run: the
/// first uses no sizes or speeds, and teaches the grid both.
pub const EDG_POLICIES: [&str; 3] = ["round-robin", "batch", "adaptive"];
/// The clients' `slots` ceiling: two sites at once, as every client ran
/// before it sized its concurrency itself; the claims are about how the grid
/// shares work among clients, so each client's concurrency is held small
/// and alike.
pub const DEFAULT_SLOTS: u32 = 2;
/// A synthetic page's fetch and parse on loopback, ms, beyond the
/// throttle: what makes a throttled client's speed for the simulator.
const PAGE_WORK_MS: f64 = 5.0;
/// The synthetic web's mean response time on loopback, ms (the
/// simulator's `--response-ms`).
pub const LOOPBACK_RESPONSE_MS: u64 = 1;
/// Time for started clients to connect before a round starts: they then
/// hear of it at once (`WorkAvailable`), as idle clients do.
const CLIENT_SETTLE: Duration = Duration::from_secs(3);
/// A round waits at most this long plus its fetches at the delay on one slot.
const ROUND_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a running round is looked at.
const ROUND_POLL: Duration = Duration::from_millis(100);
/// The round's shortest unit deadline, seconds (as in the demo).
const DEADLINE_MIN_S: u64 = 60;

/// The P-spider run's settings.
#[derive(Clone, Debug)]
pub struct SpeedupOptions {
    pub seed: u64,
    pub sites: usize,
    /// Site sizes, HTML pages (equal bounds: sites of one size).
    pub min_pages: usize,
    pub max_pages: usize,
    pub delay_ms: u64,
    /// Client counts, the first the baseline (normally 1).
    pub clients: Vec<usize>,
}

/// One row of the P-spider table.
#[derive(Clone, Debug)]
pub struct SpeedupRow {
    pub clients: usize,
    pub round_s: f64,
    /// T1/TN.
    pub speedup: f64,
    /// The delays between the largest site's fetches: no round ends sooner.
    pub largest_site_s: f64,
    /// The delays between every site's fetches over all the clients'
    /// slots: no round ends sooner.
    pub spread_s: f64,
    /// The units the round issued.
    pub units: Units,
}

/// What a round issued: units, and of them copies of running jobs
/// (hedges and tail replicas) and continuations of a scan handed over or cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Units {
    pub issued: usize,
    pub copies: usize,
    pub continued: usize,
}

impl Units {
    fn of(jobs: &[beebot_server::model::JobRecord]) -> Units {
        let mut u = Units::default();
        for j in jobs {
            for a in &j.attempts {
                u.issued += 1;
                u.copies += usize::from(a.replica);
                u.continued += usize::from(a.resume_seq > 0);
            }
        }
        u
    }
}

impl SpeedupRow {
    /// Whether the claim holds: T1/TN at least [`SPEEDUP_TARGET`] × N
    /// over the baseline's clients.
    pub fn holds(&self, base_clients: usize) -> bool {
        self.speedup >= SPEEDUP_TARGET * self.clients as f64 / base_clients as f64
    }
}

/// The politeness delays a site's `fetches` wait at least: one between
/// each two requests to its host.
fn delay_gaps(fetches: u64) -> u64 {
    fetches.saturating_sub(1)
}

/// A synthetic web's fetches per site: its URLs and its robots.txt.
fn site_fetches(web: &SynthWeb) -> Vec<(String, u64)> {
    web.site_hosts()
        .into_iter()
        .map(|h| {
            let urls = web.site_urls(&h).unwrap_or(0) as u64;
            (h, urls + 1)
        })
        .collect()
}

/// The round's parameters: `policy`, the delay, no validation (policies
/// compared alone, as the simulator does).
fn round_params(policy: &str, delay_ms: u64) -> RoundParams {
    RoundParams {
        policy: policy.to_string(),
        delay_ms,
        validate: ValidateMode::Off,
        deadline_min_s: DEADLINE_MIN_S,
        ..RoundParams::default()
    }
}

/// How long to wait for a round of `fetches` at `delay_ms`.
fn round_timeout(fetches: u64, delay_ms: u64) -> Duration {
    ROUND_TIMEOUT + Duration::from_millis(fetches * delay_ms)
}

/// Run the P-spider rounds (the default policy, sizes unknown as in a
/// first round), one fresh grid per client count.
pub async fn speedup(opts: &SpeedupOptions) -> Result<Vec<SpeedupRow>> {
    if opts.clients.is_empty() || opts.clients.contains(&0) {
        bail!("client counts must be at least 1");
    }
    let config = SynthConfig {
        min_pages_per_site: opts.min_pages,
        max_pages_per_site: opts.max_pages,
        crawl_delay_ms: None,
    };
    let mut rows: Vec<SpeedupRow> = Vec::new();
    for &n in &opts.clients {
        let web = SynthWeb::with_config(opts.seed, opts.sites, config.clone());
        let fetches = site_fetches(&web);
        let gaps: u64 = fetches.iter().map(|(_, f)| delay_gaps(*f)).sum();
        let largest = fetches
            .iter()
            .map(|(_, f)| delay_gaps(*f))
            .max()
            .unwrap_or(0);
        let specs: Vec<ClientSpec> = (0..n)
            .map(|i| ClientSpec {
                name: format!("worker-{i}"),
                slots: DEFAULT_SLOTS,
                throttle: Duration::ZERO,
            })
            .collect();
        let policy = RoundParams::default().policy;
        let (round_s, units) = timed_rounds(web, &specs, opts.delay_ms, &[policy.as_str()])
            .await?
            .remove(0);
        let base = rows.first().map_or(round_s, |r| r.round_s);
        let delay_s = opts.delay_ms as f64 / 1000.0;
        rows.push(SpeedupRow {
            clients: n,
            round_s,
            speedup: base / round_s,
            largest_site_s: largest as f64 * delay_s,
            spread_s: gaps as f64 * delay_s / (n as f64 * f64::from(DEFAULT_SLOTS)),
            units,
        });
    }
    Ok(rows)
}

/// Start a grid on `web` with `clients`, and time a round under each of
/// `policies` in turn; seconds each, and the units each issued.
async fn timed_rounds(
    web: SynthWeb,
    clients: &[ClientSpec],
    delay_ms: u64,
    policies: &[&str],
) -> Result<Vec<(f64, Units)>> {
    let total: u64 = site_fetches(&web).iter().map(|(_, f)| f).sum();
    let timeout = round_timeout(total, delay_ms);
    let mut grid = LoopbackGrid::start(web, None).await?;
    grid.add_sites().await?;
    grid.start_clients(clients).await?;
    tokio::time::sleep(CLIENT_SETTLE).await;
    let mut times = Vec::new();
    for policy in policies {
        let id = grid.start_round(round_params(policy, delay_ms)).await?;
        let t = grid.wait_round(id, timeout, ROUND_POLL, |_, _| {}).await?;
        let (round, jobs) = grid.round(id).await?;
        let counts = beebot_server::api::JobCounts::of_round(&round, &jobs);
        if counts.done != counts.total {
            bail!("round {id} ({policy}) ended with {counts:?}");
        }
        times.push((t.as_secs_f64(), Units::of(&jobs)));
    }
    grid.shutdown().await?;
    Ok(times)
}

/// The EDG run's settings.
#[derive(Clone, Debug)]
pub struct EdgOptions {
    pub seed: u64,
    pub sites: usize,
    pub delay_ms: u64,
    /// Each client's pause after every page, ms: one client each.
    pub throttles_ms: Vec<u64>,
    /// Simulator runs (seeds) per policy; the median is reported.
    pub sim_seeds: u32,
    /// Write the simulator's sites and hosts files here (`sites-N.txt`,
    /// `hosts-N.txt` for N clients), for `beebot-server simulate`.
    pub sim_files: Option<PathBuf>,
}

/// One row of the EDG table.
#[derive(Clone, Debug)]
pub struct EdgRow {
    pub clients: usize,
    pub policy: String,
    pub measured_s: f64,
    pub simulated_s: f64,
    /// The delays between the largest site's fetches: no round ends sooner.
    pub largest_site_s: f64,
    /// The units the measured round issued.
    pub units: Units,
}

/// Run BeeBot-EDG's experiment on one grid, and the simulator beside it.
pub async fn edg(opts: &EdgOptions) -> Result<Vec<EdgRow>> {
    if opts.throttles_ms.is_empty() {
        bail!("EDG needs at least one client");
    }
    let web = SynthWeb::generate(opts.seed, opts.sites);
    let (sim_sites, sim_hosts) = sim_inputs(&web, &opts.throttles_ms);
    if let Some(dir) = &opts.sim_files {
        write_sim_files(dir, &sim_sites, &sim_hosts)?;
    }
    let specs: Vec<ClientSpec> = opts
        .throttles_ms
        .iter()
        .enumerate()
        .map(|(i, t)| ClientSpec {
            name: format!("pc{i}"),
            slots: DEFAULT_SLOTS,
            throttle: Duration::from_millis(*t),
        })
        .collect();
    // No round ends before its largest site is fetched at the delay.
    let largest_site_s = site_fetches(&web)
        .iter()
        .map(|(_, f)| delay_gaps(*f))
        .max()
        .unwrap_or(0) as f64
        * opts.delay_ms as f64
        / 1000.0;
    let measured = timed_rounds(web, &specs, opts.delay_ms, &EDG_POLICIES).await?;
    let sim = simulate::run_all(
        &Input::Given(sim_sites),
        &Input::Given(sim_hosts),
        &EDG_POLICIES,
        opts.sim_seeds,
        &sim_options(opts.delay_ms),
    )?;
    Ok(EDG_POLICIES
        .iter()
        .zip(measured)
        .map(|(p, m)| EdgRow {
            clients: specs.len(),
            policy: p.to_string(),
            measured_s: m.0,
            units: m.1,
            largest_site_s,
            simulated_s: sim
                .iter()
                .find(|(name, _)| name == p)
                .map_or(f64::NAN, |(name, runs)| {
                    simulate::summarise(name, runs).makespan_median_s
                }),
        })
        .collect())
}

/// The simulator's sites (each site's fetches, known: the first round
/// taught the grid its size) and hosts (a throttled client's pages per
/// second on one slot).
pub fn sim_inputs(web: &SynthWeb, throttles_ms: &[u64]) -> (Vec<SimSite>, Vec<SimHost>) {
    let sites = site_fetches(web)
        .into_iter()
        .map(|(name, f)| SimSite {
            name,
            pages: Some(f as f64),
        })
        .collect();
    let hosts = throttles_ms
        .iter()
        .enumerate()
        .map(|(i, t)| SimHost {
            name: format!("pc{i}"),
            pages_per_s: 1000.0 / (*t as f64 + PAGE_WORK_MS),
            slots: DEFAULT_SLOTS,
            resources: Some(simulate::SYNTH_RESOURCES),
        })
        .collect();
    (sites, hosts)
}

/// Write `sites-N.txt` (`HOST PAGES`) and `hosts-N.txt` (`NAME
/// PAGES_PER_S SLOTS MEMORY_MB BANDWIDTH_KBPS`) under `dir`, N the hosts.
fn write_sim_files(dir: &std::path::Path, sites: &[SimSite], hosts: &[SimHost]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut s = String::new();
    for site in sites {
        writeln!(s, "{} {}", site.name, site.pages.unwrap_or(0.0))?;
    }
    let mut h = String::new();
    for host in hosts {
        write!(h, "{} {:.4} {}", host.name, host.pages_per_s, host.slots)?;
        if let Some(r) = host.resources {
            write!(h, " {} {}", r.memory_mb, r.bandwidth_kbps)?;
        }
        writeln!(h)?;
    }
    let n = hosts.len();
    std::fs::write(dir.join(format!("sites-{n}.txt")), s)?;
    std::fs::write(dir.join(format!("hosts-{n}.txt")), h)?;
    Ok(())
}

/// The `beebot-server simulate` command that gives the EDG table's
/// simulated column for `clients` clients, from [`EdgOptions::sim_files`].
pub fn sim_command(opts: &EdgOptions) -> String {
    let n = opts.throttles_ms.len();
    let dir = opts
        .sim_files
        .as_ref()
        .map_or_else(|| "DIR".to_string(), |d| d.display().to_string());
    format!(
        "beebot-server simulate --sites {dir}/sites-{n}.txt --hosts {dir}/hosts-{n}.txt \
         --seeds {} --delay-ms {} --response-ms {LOOPBACK_RESPONSE_MS} --availability always \
         --noise 0 --bench-noise 0 --dropout 0 --vanish 0 --unknown 0 --scan-failures 0",
        opts.sim_seeds, opts.delay_ms
    )
}

/// The simulator's settings for the loopback grid: every host always on,
/// nothing failing or vanishing, sizes and speeds exact, loopback's
/// response times, the round's delay.
pub fn sim_options(delay_ms: u64) -> SimOptions {
    SimOptions {
        noise: 0.0,
        benchmark_noise: 0.0,
        dropout: 0.0,
        vanish: 0.0,
        unknown: 0.0,
        scan_failures: 0.0,
        availability: Availability::Always,
        response_median_s: LOOPBACK_RESPONSE_MS as f64 / 1000.0,
        delay_ms,
        ..SimOptions::default()
    }
}

/// The P-spider table.
pub fn speedup_table(rows: &[SpeedupRow]) -> String {
    let base = rows.first().map_or(1, |r| r.clients);
    let mut out = String::from(
        "clients  round s  T1/TN  target  claim    largest site s  all fetches / slots s  units  copies  continued\n",
    );
    for r in rows {
        let target = SPEEDUP_TARGET * r.clients as f64 / base as f64;
        out.push_str(&format!(
            "{:>7}  {:>7.1}  {:>5.2}  {:>6.2}  {:<7}  {:>14.1}  {:>21.1}  {:>5}  {:>6}  {:>9}\n",
            r.clients,
            r.round_s,
            r.speedup,
            target,
            if r.holds(base) { "holds" } else { "misses" },
            r.largest_site_s,
            r.spread_s,
            r.units.issued,
            r.units.copies,
            r.units.continued
        ));
    }
    out
}

/// The EDG table: measured, simulated, simulated/measured, and whether
/// the ordering (batch ahead of round-robin, adaptive ahead of both) holds.
pub fn edg_table(rows: &[EdgRow]) -> String {
    let mut out = String::from(
        "clients  policy        measured s  simulated s  simulated/measured  largest site s  units  copies  continued\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{:>7}  {:<12}  {:>10.1}  {:>11.1}  {:>18.2}  {:>14.1}  {:>5}  {:>6}  {:>9}\n",
            r.clients,
            r.policy,
            r.measured_s,
            r.simulated_s,
            r.simulated_s / r.measured_s,
            r.largest_site_s,
            r.units.issued,
            r.units.copies,
            r.units.continued
        ));
    }
    out
}

/// The ordering each table shows for one client count: (batch ahead of
/// round-robin, adaptive ahead of both), measured and simulated.
pub fn edg_ordering(rows: &[EdgRow]) -> ([bool; 2], [bool; 2]) {
    let time = |p: &str, sim: bool| {
        rows.iter().find(|r| r.policy == p).map_or(f64::NAN, |r| {
            if sim {
                r.simulated_s
            } else {
                r.measured_s
            }
        })
    };
    let check = |sim: bool| {
        let (b, rr, ad) = (
            time("batch", sim),
            time("round-robin", sim),
            time("adaptive", sim),
        );
        [b < rr, ad < b && ad < rr]
    };
    (check(false), check(true))
}
