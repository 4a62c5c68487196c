//! `export`: a round's outbound links, as the admin API exports them
//! (TSV or JSON Lines), to stdout or a file. The rows stay rows: what the
//! admin should know (a cancelled round) is said on stderr.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use beebot_server::api::RoundSummary;
use beebot_server::cli_util::AdminClient;
use beebot_server::config::DataDir;
use beebot_server::model::RoundState;

use super::Report;

#[derive(Args)]
pub struct ExportArgs {
    #[arg(long)]
    round: u64,
    #[arg(long, value_enum, default_value_t = ExportFormat::Tsv)]
    format: ExportFormat,
    /// Write here instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// `export --format`: the admin API's names of [`beebot_shared::export::Format`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Tsv,
    Jsonl,
}

impl ExportFormat {
    /// Its name in the API's query (`format=tsv`).
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Tsv => "tsv",
            ExportFormat::Jsonl => "jsonl",
        }
    }
}

/// `beebot-server export --round ID`: the rows go to stdout (a reader that
/// stops early, `| head`, is no error) or to `--out`.
pub fn run(dir: &DataDir, a: ExportArgs) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    let round = a.round;
    let body = c.get_raw(&format!(
        "/api/rounds/{round}/export?format={}",
        a.format.name()
    ))?;
    let mut r = Report::default();
    match a.out {
        Some(path) => {
            super::write_out(&path, &body)?;
            r.warn(format!("wrote {} ({} bytes)", path.display(), body.len()));
        }
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&body).and_then(|()| out.flush()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other.context("cannot write the export to stdout")?,
            }
        }
    }
    let rounds: Vec<RoundSummary> = c.get("/api/rounds")?;
    if let Some(note) = cancelled_note(&rounds, round) {
        r.warn(note);
    }
    Ok(r)
}

/// What to say when `round` was cancelled: its export is partial.
fn cancelled_note(rounds: &[RoundSummary], round: u64) -> Option<String> {
    let r = rounds
        .iter()
        .find(|r| r.round.id == round && r.round.state == RoundState::Cancelled)?;
    Some(format!(
        "note: round {round} was cancelled: the export holds the {} sites done \
         before the cancel; {} sites were not scanned to the end",
        r.counts.done,
        r.counts.total - r.counts.done
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_as_the_api_parses_them() {
        for f in [ExportFormat::Tsv, ExportFormat::Jsonl] {
            assert!(f.name().parse::<beebot_shared::export::Format>().is_ok());
            let v = f.to_possible_value().expect("named");
            assert_eq!(v.get_name(), f.name());
        }
        assert_eq!(cancelled_note(&[], 1), None);
    }
}
