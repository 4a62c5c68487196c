//! `beebot-server`: the admin's command line. It parses the command line,
//! runs the command (each group in its own module of [`cli`]) and prints
//! the command's report. `init`, `serve` and `simulate` work on
//! their own; every other command talks to the running server's admin API
//! on loopback with the token from the data dir.

mod cli;

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use beebot_shared::logfmt::{self, LogFormat, LOG_FORMAT_ENV};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "beebot-server",
    version,
    about = "BeeBot grid server: sites, rounds, hosts and link graphs"
)]
struct Cli {
    /// Server data dir (default: /var/lib/beebot-server when the package made
    /// it, else the platform data dir).
    #[arg(long, global = true, env = "BEEBOT_SERVER_DIR")]
    data_dir: Option<PathBuf>,
    /// Log lines on stderr: `text`, or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t, env = LOG_FORMAT_ENV)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a data dir: project key, certificate, admin token, config.
    Init(cli::init::InitArgs),
    /// Serve clients (QUIC) and the admin API until Ctrl-C or SIGTERM.
    Serve,
    /// Print an invite code (alone on the last line); `invite list` and
    /// `invite revoke ID` manage the invites made.
    Invite(cli::invite::InviteArgs),
    /// The target set.
    Sites {
        #[command(subcommand)]
        cmd: cli::sites::SitesCmd,
    },
    /// Scan rounds.
    Round {
        #[command(subcommand)]
        cmd: cli::round::RoundCmd,
    },
    /// Enrolled hosts.
    Hosts {
        #[command(subcommand)]
        cmd: cli::hosts::HostsCmd,
    },
    /// The grid at a glance: sites, hosts, the jobs of the running rounds
    /// (or of the last one), and where the dashboard is.
    Status {
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Export a round's outbound links.
    Export(cli::export::ExportArgs),
    /// Read every done site's kept link files and name the damaged ones
    /// (exit code 5 when one is).
    Check(cli::check::CheckArgs),
    /// Run the real scheduler against simulated hosts on a virtual clock and
    /// print a table per policy (makespan, ratio to the lower bound, ...).
    Simulate(cli::simulate::SimulateArgs),
}

fn main() {
    // `beebot-server ... | head`: a reader that stopped early is not an
    // error (Rust ignores SIGPIPE, so a print to a closed pipe panics).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info)
    }));
    // Everything the server writes (store, packs, token, keys) is its
    // user's alone, whatever the umask it was started with (the packaged
    // unit sets UMask=0077 too).
    #[cfg(target_os = "linux")]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    let default_level = match cli.cmd {
        Cmd::Serve => "info",
        _ => "warn",
    };
    // Colours on a terminal only: not in a log file or the journal.
    logfmt::init(
        cli.log_format,
        default_level,
        std::io::stderr().is_terminal(),
        std::io::stderr,
    );
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Run the command; its exit code.
fn run(cli: Cli) -> Result<i32> {
    let dir = cli::data_dir(cli.data_dir)?;
    if matches!(cli.cmd, Cmd::Init(_) | Cmd::Serve) {
        cli::owned_by_me(&dir)?;
    }
    let report = match cli.cmd {
        Cmd::Init(a) => cli::init::run(&dir, a)?,
        Cmd::Serve => cli::serve::run(dir)?,
        Cmd::Invite(a) => cli::invite::run(&dir, a)?,
        Cmd::Sites { cmd } => cli::sites::run(&dir, cmd)?,
        Cmd::Round { cmd } => cli::round::run(&dir, cmd)?,
        Cmd::Hosts { cmd } => cli::hosts::run(&dir, cmd)?,
        Cmd::Status { json } => cli::status::run(&dir, json)?,
        Cmd::Export(a) => cli::export::run(&dir, a)?,
        Cmd::Check(a) => cli::check::run(&dir, a)?,
        Cmd::Simulate(a) => cli::simulate::run(a)?,
    };
    Ok(report.print())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_command_and_argument_says_what_it_is_for() {
        let missing = beebot_shared::clihelp::without_help(&Cli::command());
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    /// `docs/reference/server.md` is every command's `--help` as it is now.
    #[test]
    fn the_commands_reference_page_is_current() {
        let intro = "Each command's `--help`, as `beebot-server` prints it (`beebot-server \
                     help COMMAND` prints the same). The [admin guide](../admin.md) shows them \
                     at work; the [config file](server-config.md) holds what the commands do \
                     not set.";
        let page = beebot_shared::clihelp::reference_page(Cli::command(), intro)
            .unwrap_or_else(|e| panic!("{e}"));
        beebot_shared::docpage::assert_reference_current(
            env!("CARGO_MANIFEST_DIR"),
            "server.md",
            &page,
        );
    }
}
