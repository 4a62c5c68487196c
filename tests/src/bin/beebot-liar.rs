//! `beebot-liar`: the lying client of the tests (never shipped). Join first
//! with the real `beebot join CODE --home DIR`, then run
//! `beebot-liar --home DIR [--modes all] [--allow-private] [--resolve RULE]...`;
//! it takes work and lies (see `beebot_tests::liar`) until the grid has no
//! open round, and prints what it did and what the server answered as one
//! JSON line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use beebot_client::crawler::resolve::ResolveRule;
use beebot_client::crawler::CrawlerConfig;
use beebot_tests::liar::{self, LiarOptions, Modes};
use clap::Parser;

#[derive(Parser)]
#[command(name = "beebot-liar", about = "A lying BeeBot client, for the tests")]
struct Args {
    /// The home a real `beebot join` left.
    #[arg(long)]
    home: PathBuf,
    /// Lies to tell: all, or a comma-separated list of boast, hoard,
    /// fabricate, drop, bomb, repeat, fail.
    #[arg(long, default_value = "all")]
    modes: String,
    /// Crawl loopback and private addresses (the synthetic web).
    #[arg(long)]
    allow_private: bool,
    /// `HOST=IP[:PORT]` (`*.` for subdomains), consulted before DNS.
    #[arg(long)]
    resolve: Vec<String>,
    /// Longest run, seconds.
    #[arg(long, default_value_t = 600)]
    run_for_s: u64,
    /// With hoard, one unit in this many is given back.
    #[arg(long, default_value_t = 3)]
    return_every: usize,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let resolve = args
        .resolve
        .iter()
        .map(|r| {
            r.parse::<ResolveRule>()
                .with_context(|| format!("--resolve {r}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = LiarOptions {
        home: args.home,
        modes: Modes::parse(&args.modes)?,
        crawler: CrawlerConfig {
            allow_private: args.allow_private,
            resolve,
            ..CrawlerConfig::default()
        },
        run_for: Duration::from_secs(args.run_for_s),
        return_every: args.return_every,
    };
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    let report = rt.block_on(liar::run(&opts))?;
    println!("{}", report.to_json());
    Ok(())
}
