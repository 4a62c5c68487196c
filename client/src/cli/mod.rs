//! The commands of `beebot`, one module each: [`join`], [`run`], [`status`],
//! [`config`], [`control`] (pause, resume), [`open`] (the status page),
//! [`leave`], [`stop`], [`service`],
//! [`benchmark`] and [`crawl`]; their flags are in [`args`]. On Windows,
//! `tray` shows the notification-area icon inside `run`.
//!
//! Each command returns what it prints on stdout (text ending in a newline,
//! or nothing), so its output can be tested; [`dispatch`] prints it. Errors
//! go back to `main`, which prints them and exits with status 1. Nothing
//! here does a command's work: that is the client library's.

mod args;
mod benchmark;
mod config;
mod control;
mod crawl;
mod join;
mod leave;
mod open;
mod run;
mod service;
mod status;
mod stop;
#[cfg(windows)]
mod tray;

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Result;

use beebot_client::home::Home;
use beebot_client::logging;

pub use args::Cli;
use args::{Cmd, ConfigCmd, ServiceCmd};

/// What the client says once the project revoked this host.
const REVOKED_ADVICE: &str =
    "ask the admin for a new invite code, then `beebot leave` and `beebot join` with it";

/// Set up logging: `run` on a terminal draws progress bars (warnings only in
/// the log); as a service it logs at info to stderr (the journal) and a
/// rotating file. Other commands log warnings to stderr. `--log-format`
/// shapes the lines in both places.
pub fn init_logging(cli: &Cli) {
    let is_run = matches!(cli.cmd, Cmd::Run { .. });
    let terminal = std::io::stderr().is_terminal();
    let (level, file) = match (is_run, terminal) {
        (true, true) => ("warn", None),
        (true, false) => {
            let file = Home::resolve(cli.home.clone()).ok().and_then(|h| {
                logging::RotatingFile::open(
                    &h.data.join("logs").join("beebot.log"),
                    logging::MAX_LOG_BYTES,
                    logging::KEEP_LOGS,
                )
                .ok()
            });
            ("info", file)
        }
        _ => ("warn", None),
    };
    beebot_shared::logfmt::init(
        cli.log_format,
        level,
        terminal,
        logging::LogWriter::new(file),
    );
}

/// What a command says, in order: its output on stdout, then warnings on
/// stderr, then the error it ended with after saying them (a benchmark
/// measured but not sent still shows its figures).
#[derive(Debug, Default)]
pub struct Said {
    pub out: String,
    pub warn: String,
    pub failed: Option<anyhow::Error>,
}

impl From<String> for Said {
    fn from(out: String) -> Said {
        Said {
            out,
            ..Said::default()
        }
    }
}

/// Run the command and print what it says.
pub fn dispatch(cli: Cli) -> Result<()> {
    let home_flag = cli.home.clone();
    let home = Home::resolve(cli.home)?;
    let said = command(cli.cmd, &home, home_flag.as_deref())?;
    print!("{}", said.out);
    eprint!("{}", said.warn);
    match said.failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Run one command (`home_flag`: the `--home` given, which the service
/// names).
fn command(cmd: Cmd, home: &Home, home_flag: Option<&Path>) -> Result<Said> {
    Ok(match cmd {
        Cmd::Join {
            code, check: true, ..
        } => join::check(code.as_deref())?.into(),
        Cmd::Join { code, name, .. } => join::join(home, code.as_deref(), name)?.into(),
        Cmd::Run { flags, net } => run::run(home, flags, &net, home_flag)?.into(),
        Cmd::Status { json } => status::status(home, json)?.into(),
        Cmd::Config { cmd } => match cmd {
            ConfigCmd::Show { json } => config::show(home, json)?.into(),
            ConfigCmd::Set { key, value } => config::set(home, &key, &value.join(" "))?,
        },
        Cmd::Pause { duration } => control::pause(home, duration)?.into(),
        Cmd::Resume => control::resume(home)?.into(),
        Cmd::Stop => stop::stop(home)?.into(),
        Cmd::Open { print } => open::open(home, home_flag, print)?.into(),
        Cmd::Leave { force: _ } => leave::leave(home, home_flag)?.into(),
        Cmd::Service { cmd } => match cmd {
            ServiceCmd::Install { window, no_start } => {
                service::install(home, home_flag, window, no_start)?
            }
            ServiceCmd::Uninstall => service::uninstall()?.into(),
            ServiceCmd::Status => service::status(home)?.into(),
        },
        Cmd::Benchmark { url, net } => benchmark::benchmark(home, url, &net)?,
        Cmd::Crawl { flags, net } => crawl::crawl(home, flags, &net)?,
    })
}
