//! `check`: read every done site's kept link files (like a scrub) and name
//! the damaged ones, with their causes. It goes through the running
//! server (which holds the store), reads off its grid lock, and leaves the
//! files as they are.

use anyhow::Result;
use clap::Args;

use beebot_server::api::{CheckReport, CheckRequest, DamagedSite};
use beebot_server::cli_util::AdminClient;
use beebot_server::config::DataDir;
use beebot_server::damage::EXIT_DAMAGED;

use super::Report;

#[derive(Args)]
pub struct CheckArgs {
    /// Check this round only (default: every round).
    #[arg(long)]
    round: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// `beebot-server check [--round ID] [--json]`: exit code 0 when every
/// result reads whole, [`EXIT_DAMAGED`] when a site is damaged.
pub fn run(dir: &DataDir, a: CheckArgs) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    let report: CheckReport = c.post("/api/check", &CheckRequest { round: a.round })?;
    let code = if report.damaged.is_empty() {
        0
    } else {
        EXIT_DAMAGED
    };
    let mut r = if a.json {
        Report::json(&report)?
    } else {
        Report::out(format!(
            "read {} done sites of {} rounds: {} damaged\n",
            report.sites_read,
            report.rounds,
            report.damaged.len()
        ))
    };
    if !a.json {
        for line in damaged_lines(&report.damaged) {
            r.warn(line);
        }
    }
    r.code = code;
    Ok(r)
}

/// One line per damaged site, then what to do.
pub fn damaged_lines(damaged: &[DamagedSite]) -> Vec<String> {
    if damaged.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<String> = damaged
        .iter()
        .map(|d| format!("damaged: round {} site {}: {}", d.round, d.site, d.why))
        .collect();
    lines.push(format!(
        "{} damaged site(s): their links are in no export until a new round \
         (`beebot-server round start`) scans them again",
        damaged.len()
    ));
    lines
}
