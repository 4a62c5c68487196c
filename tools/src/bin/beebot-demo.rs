//! `beebot-demo`: the whole grid on loopback in one process (synthetic web,
//! server, clients, one round, an export checked against the truth). See
//! [`beebot_tools::demo`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Parser;

use beebot_shared::rt::runtime;
use beebot_shared::util::parse_duration;
use beebot_tools::demo::{self, DemoOptions};

/// Log level unless `RUST_LOG` says otherwise: the demo prints its own
/// progress; the server's and clients' logs show only trouble.
const DEFAULT_LOG_LEVEL: &str = "warn";

/// Run the whole grid on loopback: synthetic web, server, clients, one round.
#[derive(Parser)]
#[command(name = "beebot-demo", version)]
struct Args {
    #[arg(long, default_value_t = 40)]
    sites: usize,
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Keep the demo's data dir here instead of a temporary one.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Politeness delay between two requests to one site (1000 is what a
    /// real round uses; 0 runs as fast as loopback allows).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Most sites each client scans at once (its `slots` ceiling; the
    /// client sizes its concurrency under it).
    #[arg(long, default_value_t = 4)]
    slots: u32,
    /// Time budget of one scan (e.g. 30s): longer sites continue in
    /// further scans from their frontier.
    #[arg(long, value_parser = parse_duration)]
    max_scan_time: Option<Duration>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    beebot_tools::tool_main(DEFAULT_LOG_LEVEL, || run(args))
}

fn run(args: Args) -> Result<()> {
    runtime()?.block_on(demo::run(DemoOptions {
        sites: args.sites,
        clients: args.clients,
        keep: args.keep,
        delay_ms: args.delay_ms,
        slots: args.slots,
        max_scan_s: args.max_scan_time.map(|d| d.as_secs()),
    }))?;
    Ok(())
}
