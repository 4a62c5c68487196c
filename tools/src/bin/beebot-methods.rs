//! `beebot-methods`: the methods bench. Runs the P-spider speed-up and
//! BeeBot-EDG's experiment on the whole grid on loopback and prints a table
//! each, with the simulator's figures beside EDG's. See
//! [`beebot_tools::methods`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, ValueEnum};

use beebot_shared::rt::runtime;
use beebot_tools::methods::{self, EdgOptions, SpeedupOptions};

/// Log level unless `RUST_LOG` says otherwise: the bench prints its
/// tables; the server's and clients' logs show only trouble.
const DEFAULT_LOG_LEVEL: &str = "warn";
/// Most client counts, or throttled clients, one run takes.
const MAX_CLIENTS: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Part {
    All,
    Speedup,
    Edg,
}

/// Measure the methods' claims end to end on loopback and print tables.
#[derive(Parser)]
#[command(name = "beebot-methods", version)]
struct Args {
    /// Which claims to run.
    #[arg(long, value_enum, default_value_t = Part::All)]
    part: Part,
    /// The synthetic web's seed.
    #[arg(long, default_value_t = 16)]
    seed: u64,
    /// The rounds' politeness delay.
    #[arg(long, default_value_t = 200)]
    delay_ms: u64,
    /// P-spider: sites, and their size bounds in HTML pages.
    #[arg(long, default_value_t = 96)]
    speedup_sites: usize,
    #[arg(long, default_value_t = 4)]
    speedup_min_pages: usize,
    #[arg(long, default_value_t = 8)]
    speedup_max_pages: usize,
    /// P-spider: client counts (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    clients: Vec<usize>,
    /// EDG: sites (the synthetic web's power-law sizes).
    #[arg(long, default_value_t = 99)]
    edg_sites: usize,
    /// EDG: each run's clients by their pause after every page, ms; one
    /// run per list, lists separated by `/`.
    #[arg(long, default_value = "0,300,900/0,200,400,800,1200")]
    throttles: String,
    /// EDG: simulator runs per policy (the median is shown).
    #[arg(long, default_value_t = 5)]
    sim_seeds: u32,
    /// EDG: write the simulator's sites and hosts files here.
    #[arg(long)]
    sim_files: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    beebot_tools::tool_main(DEFAULT_LOG_LEVEL, || run(args))
}

/// `0,300,900/0,200` as lists of throttles.
fn throttle_lists(text: &str) -> Result<Vec<Vec<u64>>> {
    let lists: Vec<Vec<u64>> = text
        .split('/')
        .map(|l| l.split(',').map(|t| t.trim().parse::<u64>()).collect())
        .collect::<Result<_, _>>()?;
    if lists.iter().any(|l| l.is_empty() || l.len() > MAX_CLIENTS) {
        bail!("each list of --throttles needs 1 to {MAX_CLIENTS} clients");
    }
    Ok(lists)
}

fn run(args: Args) -> Result<()> {
    if args.clients.len() > MAX_CLIENTS || args.clients.iter().any(|n| *n > MAX_CLIENTS) {
        bail!("--clients takes at most {MAX_CLIENTS} counts of at most {MAX_CLIENTS}");
    }
    let throttles = throttle_lists(&args.throttles)?;
    let rt = runtime()?;
    if args.part != Part::Edg {
        let opts = SpeedupOptions {
            seed: args.seed,
            sites: args.speedup_sites,
            min_pages: args.speedup_min_pages,
            max_pages: args.speedup_max_pages,
            delay_ms: args.delay_ms,
            clients: args.clients.clone(),
        };
        let rows = rt.block_on(methods::speedup(&opts))?;
        println!(
            "P-spider: {} sites of {}-{} pages, delay {} ms, {} slots a client, seed {}",
            opts.sites,
            opts.min_pages,
            opts.max_pages,
            opts.delay_ms,
            methods::DEFAULT_SLOTS,
            opts.seed
        );
        println!("{}", methods::speedup_table(&rows));
    }
    if args.part != Part::Speedup {
        for list in throttles {
            let opts = EdgOptions {
                seed: args.seed,
                sites: args.edg_sites,
                delay_ms: args.delay_ms,
                throttles_ms: list,
                sim_seeds: args.sim_seeds,
                sim_files: args.sim_files.clone(),
            };
            let rows = rt.block_on(methods::edg(&opts))?;
            let (measured, simulated) = methods::edg_ordering(&rows);
            println!(
                "BeeBot-EDG: {} sites, {} clients throttled {:?} ms a page, delay {} ms, seed {}; \
                 simulator: median of {} seeds",
                opts.sites,
                opts.throttles_ms.len(),
                opts.throttles_ms,
                opts.delay_ms,
                opts.seed,
                opts.sim_seeds
            );
            print!("{}", methods::edg_table(&rows));
            println!("simulated: {}", methods::sim_command(&opts));
            println!(
                "batch ahead of round-robin: measured {}, simulated {}; adaptive ahead of both: measured {}, simulated {}\n",
                measured[0], simulated[0], measured[1], simulated[1]
            );
        }
    }
    Ok(())
}
