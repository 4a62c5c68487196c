//! `simulate`: run the real scheduler against simulated hosts on a virtual
//! clock and print a table per policy (makespan, ratio to the lower bound,
//! ...), or every run as JSON. Nothing touches a data dir or the network.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::builder::PossibleValuesParser;
use clap::Args;

use beebot_server::cli_util::parse_duration;
use beebot_server::scheduler::POLICY_NAMES;
use beebot_server::simulate::{self, Availability, Input, SimOptions};
use beebot_server::validate::ValidateMode;

use super::Report;

/// `--policy all`: every policy but size-aware.
const ALL_POLICIES: &str = "all";
/// The policy `--policy all` leaves out.
const NOT_IN_ALL: &str = "size-aware";
/// Synthetic sites and hosts when none are given.
const DEFAULT_SITES: usize = 99;
const DEFAULT_HOSTS: usize = 3;

#[derive(Args)]
pub struct SimulateArgs {
    /// Sites file: `HOST [PAGES]` a line.
    #[arg(long, conflicts_with = "synthetic_sites")]
    sites: Option<PathBuf>,
    /// N synthetic sites with power-law sizes (the default: 99).
    #[arg(long)]
    synthetic_sites: Option<usize>,
    /// Hosts file: `NAME PAGES_PER_S [SLOTS [MEMORY_MB BANDWIDTH_KBPS]]` a line.
    #[arg(long, conflicts_with = "synthetic_hosts")]
    hosts: Option<PathBuf>,
    /// M synthetic hosts with speeds over a factor of ten (the default: 3).
    #[arg(long)]
    synthetic_hosts: Option<usize>,
    /// A policy name, or `all`.
    #[arg(long, default_value = ALL_POLICIES, value_parser = policy_or_all())]
    policy: String,
    /// Runs per policy, one a seed.
    #[arg(long, default_value_t = 20)]
    seeds: u32,
    /// The first seed (runs use seeds FIRST..FIRST+SEEDS).
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// True sizes of scanned sites are off their last scan by up to ± this share.
    #[arg(long, default_value_t = 0.3)]
    noise: f64,
    /// Benchmarks are off the true speeds by up to ± this share (default: a third of --noise).
    #[arg(long)]
    bench_noise: Option<f64>,
    /// Share of time a host spends in random offline spells (5 min to 4 h).
    #[arg(long, default_value_t = 0.05)]
    dropout: f64,
    /// Share of hosts that go away during the round and never come back.
    #[arg(long, default_value_t = 0.05)]
    vanish: f64,
    /// Share of synthetic sites never scanned before (size unknown to the grid).
    #[arg(long, default_value_t = 0.1)]
    unknown: f64,
    /// Share of scans that fail on their host (the unit is given back).
    #[arg(long, default_value_t = 0.01)]
    scan_failures: f64,
    /// `desktops` (a third of the hosts always on, a third in office
    /// hours, a third nights and weekends) or `always`.
    #[arg(long, value_enum, default_value_t = Availability::Desktops)]
    availability: Availability,
    /// Median of the sites' mean response times, ms (e.g. 1 for the
    /// synthetic web on loopback).
    #[arg(long, default_value_t = 250)]
    response_ms: u64,
    /// The round's politeness delay (the server's default).
    #[arg(long, default_value_t = 1000)]
    delay_ms: u64,
    /// The round's page cap per site (the server's default).
    #[arg(long, default_value_t = 1000)]
    max_pages: u32,
    /// The round's time budget of one scan (the server's default); a scan
    /// that reaches it goes on in a continuation unit.
    #[arg(long, default_value = "6h", value_parser = parse_duration)]
    max_scan_time: Duration,
    /// The round's validation: off (the default here: policies compared
    /// alone), adaptive or all. The `checks` column is its cost.
    #[arg(long, value_enum, default_value_t = ValidateMode::Off)]
    validate: ValidateMode,
    /// Hosts start trusted (validation at steady state) instead of new.
    #[arg(long)]
    trusted: bool,
    /// Fault schedule: server restarts an hour on average (the grid opened
    /// again from its store; 0 to MAX_RESTARTS_PER_HOUR).
    #[arg(long, default_value_t = 0.0)]
    restarts_per_hour: f64,
    /// Fault schedule: share of accepted uploads whose answer is lost (the
    /// client sends it again), 0..1.
    #[arg(long, default_value_t = 0.0)]
    upload_loss: f64,
    /// Fault schedule: jumps of the server's clock an hour on average (back
    /// up to 5 minutes or on up to 15; 0 to MAX_RESTARTS_PER_HOUR).
    #[arg(long, default_value_t = 0.0)]
    clock_jumps_per_hour: f64,
    /// Fault schedule: times the server's disk fills up an hour on average
    /// (for 2 minutes on average; the server starts afresh once space is
    /// back; 0 to MAX_RESTARTS_PER_HOUR).
    #[arg(long, default_value_t = 0.0)]
    disk_fulls_per_hour: f64,
    /// Print every run as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// Most server restarts (and clock jumps) an hour the fault schedule takes
/// (one a minute).
const MAX_RESTARTS_PER_HOUR: f64 = 60.0;

/// Parser of `--policy`: a policy name or `all`.
fn policy_or_all() -> PossibleValuesParser {
    PossibleValuesParser::new(POLICY_NAMES.into_iter().chain([ALL_POLICIES]))
}

impl SimulateArgs {
    /// The simulator's options, each share within its range.
    fn options(&self) -> Result<SimOptions> {
        let opts = SimOptions {
            noise: self.noise,
            benchmark_noise: self.bench_noise.unwrap_or(self.noise / 3.0),
            dropout: self.dropout,
            vanish: self.vanish,
            unknown: self.unknown,
            scan_failures: self.scan_failures,
            availability: self.availability,
            response_median_s: self.response_ms as f64 / 1000.0,
            delay_ms: self.delay_ms,
            max_pages: self.max_pages,
            max_seconds: self.max_scan_time.as_secs(),
            first_seed: self.first_seed,
            validate: self.validate,
            trusted: self.trusted,
            restarts_per_hour: self.restarts_per_hour,
            upload_loss: self.upload_loss,
            clock_jumps_per_hour: self.clock_jumps_per_hour,
            disk_fulls_per_hour: self.disk_fulls_per_hour,
            ..Default::default()
        };
        if !(0.0..=MAX_RESTARTS_PER_HOUR).contains(&opts.restarts_per_hour)
            || !(0.0..=MAX_RESTARTS_PER_HOUR).contains(&opts.clock_jumps_per_hour)
            || !(0.0..=MAX_RESTARTS_PER_HOUR).contains(&opts.disk_fulls_per_hour)
            || !(0.0..=1.0).contains(&opts.upload_loss)
        {
            bail!(
                "--restarts-per-hour, --clock-jumps-per-hour and --disk-fulls-per-hour must be \
                 within 0..{MAX_RESTARTS_PER_HOUR}, --upload-loss within 0..1"
            );
        }
        if !(0.0..=0.95).contains(&opts.noise)
            || !(0.0..=0.95).contains(&opts.benchmark_noise)
            || !(0.0..=0.9).contains(&opts.dropout)
            || !(0.0..=1.0).contains(&opts.vanish)
            || !(0.0..=1.0).contains(&opts.unknown)
            || !(0.0..=0.5).contains(&opts.scan_failures)
        {
            bail!(
                "--noise and --bench-noise must be within 0..0.95, --dropout within 0..0.9, \
                 --vanish and --unknown within 0..1, --scan-failures within 0..0.5"
            );
        }
        if opts.max_pages == 0 || opts.max_seconds == 0 {
            bail!("--max-pages and --max-scan-time must be positive");
        }
        Ok(opts)
    }
}

/// `beebot-server simulate`: read or make the inputs, run, report.
pub fn run(a: SimulateArgs) -> Result<Report> {
    let opts = a.options()?;
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let site_input = match &a.sites {
        Some(p) => {
            Input::Given(simulate::parse_sites(&read(p)?).with_context(|| p.display().to_string())?)
        }
        None => Input::Synthetic(a.synthetic_sites.unwrap_or(DEFAULT_SITES)),
    };
    let host_input = match &a.hosts {
        Some(p) => {
            Input::Given(simulate::parse_hosts(&read(p)?).with_context(|| p.display().to_string())?)
        }
        None => Input::Synthetic(a.synthetic_hosts.unwrap_or(DEFAULT_HOSTS)),
    };
    let names: Vec<&str> = if a.policy == ALL_POLICIES {
        POLICY_NAMES
            .into_iter()
            .filter(|p| *p != NOT_IN_ALL)
            .collect()
    } else {
        vec![a.policy.as_str()]
    };
    let started = Instant::now();
    let results = simulate::run_all(&site_input, &host_input, &names, a.seeds, &opts)?;
    if a.json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .map(|(p, runs)| {
                serde_json::json!({
                    "policy": p,
                    "summary": simulate::summarise(p, runs),
                    "runs": runs,
                })
            })
            .collect();
        return Report::json(&out);
    }
    let mut out = format!(
        "{}, {}; {}{:.1}s)\n",
        input_words(&site_input, "sites"),
        input_words(&host_input, "hosts"),
        settings(a.seeds, &opts),
        started.elapsed().as_secs_f64()
    );
    let rows: Vec<_> = results
        .iter()
        .map(|(p, runs)| simulate::summarise(p, runs))
        .collect();
    out.push_str(&simulate::table(&rows));
    Ok(Report::out(out))
}

/// `N synthetic sites` or `sites from file`.
fn input_words<T>(input: &Input<T>, what: &str) -> String {
    match input {
        Input::Given(_) => format!("{what} from file"),
        Input::Synthetic(n) => format!("{n} synthetic {what}"),
    }
}

/// The settings line's middle: seeds, shares, the round's limits.
fn settings(seeds: u32, opts: &SimOptions) -> String {
    let from = if opts.first_seed > 0 {
        format!(" from {}", opts.first_seed)
    } else {
        String::new()
    };
    format!(
        "{seeds} seeds{from}, noise {}, benchmark noise {:.2}, dropout {}, vanish {}, unknown {}, \
         scan failures {}, restarts/h {}, upload loss {}, clock jumps/h {}, disk fulls/h {}, {} hosts, delay {} ms, max pages {}, \
         max scan time {} s (",
        opts.noise,
        opts.benchmark_noise,
        opts.dropout,
        opts.vanish,
        opts.unknown,
        opts.scan_failures,
        opts.restarts_per_hour,
        opts.upload_loss,
        opts.clock_jumps_per_hour,
        opts.disk_fulls_per_hour,
        opts.availability.as_str(),
        opts.delay_ms,
        opts.max_pages,
        opts.max_seconds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_named_by_where_they_come_from() {
        assert_eq!(
            input_words::<()>(&Input::Synthetic(99), "sites"),
            "99 synthetic sites"
        );
        assert_eq!(
            input_words::<()>(&Input::Given(vec![()]), "hosts"),
            "hosts from file"
        );
        let opts = SimOptions {
            first_seed: 5,
            ..Default::default()
        };
        assert!(settings(20, &opts).starts_with("20 seeds from 5, noise "));
    }
}
