//! `round wait`: poll the round until every job is over, showing its
//! progress: a line updated in place on a terminal, else a line every
//! `--report-every`. Exit 0 when the round is over, [`EXIT_TIMEOUT`] on
//! timeout, [`EXIT_CANCELLED`] when it was cancelled. The progress streams
//! to stdout as it comes; the last word is the returned report's.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Result;

use beebot_server::api::RoundDetail;
use beebot_server::cli_util::{AdminClient, Progress, TypedDuration};
use beebot_server::config;
use beebot_server::model::{JobState, RoundState};
use beebot_shared::util::human_duration;

use super::Report;

/// Exit code of `round wait` on timeout.
pub const EXIT_TIMEOUT: i32 = 3;
/// `round wait` on a round that was cancelled.
pub const EXIT_CANCELLED: i32 = 4;
/// How often `round wait` asks the server how the round stands.
const WAIT_POLL: Duration = Duration::from_millis(500);
/// Erase the terminal's current line (the progress updated in place).
const ERASE_LINE: &str = "\r\x1b[2K";

/// `round wait ID`.
pub fn run(
    c: &AdminClient,
    id: u64,
    timeout: &TypedDuration,
    report_every: &TypedDuration,
) -> Result<Report> {
    let timeout = timeout.within("--timeout", &config::WAIT_TIMEOUT, false)?;
    let report_every = report_every.within("--report-every", &config::REPORT_EVERY, false)?;
    let start = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let mut last_report: Option<Instant> = None;
    let mut out = std::io::stdout();
    loop {
        let d: RoundDetail = c.get(&format!("/api/rounds/{id}"))?;
        let line = Progress::of(&d, beebot_server::now_ms()).line();
        if d.round.state != RoundState::Running {
            if terminal && last_report.is_some() {
                // The line updated in place gives way to the summary.
                let _ = write!(out, "{ERASE_LINE}");
            }
            return Ok(over(id, &d));
        }
        if start.elapsed() >= timeout {
            if terminal && last_report.is_some() {
                let _ = writeln!(out);
            }
            return Ok(timed_out(id, &d, timeout));
        }
        if terminal {
            let _ = write!(out, "{ERASE_LINE}{line}");
            let _ = out.flush();
            last_report = Some(Instant::now());
        } else if last_report.is_none_or(|t| t.elapsed() >= report_every) {
            println!("{line}");
            last_report = Some(Instant::now());
        }
        std::thread::sleep(WAIT_POLL);
    }
}

/// The round is over (done or cancelled): its summary and exit code.
fn over(id: u64, d: &RoundDetail) -> Report {
    let mut r = Report::out(format!(
        "round {id} {}: {} done, {} failed of {} jobs; {}\n",
        d.round.state.as_str(),
        d.counts.done,
        d.counts.failed,
        d.counts.total,
        d.counts.verdict()
    ));
    // A cancelled round did not end: its open jobs never will.
    if d.round.state == RoundState::Cancelled {
        r.code = EXIT_CANCELLED;
    }
    r
}

/// The wait ran out of time: the open jobs said, exit [`EXIT_TIMEOUT`].
fn timed_out(id: u64, d: &RoundDetail, timeout: Duration) -> Report {
    let open = d
        .jobs
        .iter()
        .filter(|j| !matches!(j.state, JobState::Done | JobState::Failed))
        .count();
    let mut r = Report::note(format!(
        "error: round {id} still has {open} open job(s) after {}{}",
        human_duration(timeout),
        d.waiting
            .as_ref()
            .map_or(String::new(), |w| format!(": {w}"))
    ));
    r.code = EXIT_TIMEOUT;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_server::api::JobCounts;
    use beebot_server::model::{RoundParams, RoundRecord};

    fn detail(state: RoundState) -> RoundDetail {
        RoundDetail {
            round: RoundRecord {
                id: 9,
                created_ms: 0,
                finished_ms: None,
                params: RoundParams::default(),
                state,
                job_ids: Vec::new(),
                every_ms: None,
                next_round: None,
                folded: Vec::new(),
            },
            counts: JobCounts {
                total: 3,
                done: 2,
                failed: 1,
                complete: 2,
                incomplete: 1,
                ..JobCounts::default()
            },
            waiting: None,
            sites: Vec::new(),
            jobs: Vec::new(),
        }
    }

    #[test]
    fn the_wait_ends_with_a_summary_and_says_cancelled_and_timeout_by_exit_code() {
        let r = over(9, &detail(RoundState::Done));
        assert_eq!(
            r.out,
            "round 9 done: 2 done, 1 failed of 3 jobs; 1 of 3 sites INCOMPLETE (see `round show`)\n"
        );
        assert_eq!(r.code, 0);
        assert_eq!(over(9, &detail(RoundState::Cancelled)).code, EXIT_CANCELLED);
        let r = timed_out(9, &detail(RoundState::Running), Duration::from_secs(60));
        assert_eq!(r.code, EXIT_TIMEOUT);
        assert_eq!(r.err, "error: round 9 still has 0 open job(s) after 1m\n");
        assert_eq!(r.out, "");
        let mut waits = detail(RoundState::Running);
        waits.waiting = Some("start rounds with --validate off".into());
        let r = timed_out(9, &waits, Duration::from_secs(60));
        assert!(
            r.err
                .ends_with("after 1m: start rounds with --validate off\n"),
            "{}",
            r.err
        );
    }
}
