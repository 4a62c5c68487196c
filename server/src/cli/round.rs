//! `round`: start a round over the target set (its id alone on the last
//! line), list and show rounds, wait for one, cancel one, scan sites of
//! one again. `round start`'s
//! flags are the admin API's body ([`RoundStart`]), checked here first so a
//! refusal quotes the words typed.

use std::time::Duration;

use anyhow::Result;
use clap::Subcommand;

use beebot_server::api::{
    RoundDetail, RoundListed, RoundRescan, RoundRescanned, RoundStart, RoundStarted, RoundSummary,
    SiteLine,
};
use beebot_server::cli_util::{typed_duration, AdminClient, TypedDuration};
use beebot_server::config::DataDir;
use beebot_server::model::RoundState;
use beebot_shared::util::human_duration;

use super::Report;

/// How often `round wait` prints a line when stdout is not a terminal.
const WAIT_REPORT_EVERY: &str = "30s";

// Parsed once per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum RoundCmd {
    /// Start a round over the target set; prints its id alone on the last line.
    Start(RoundStart),
    /// Every round: state, policy, jobs done and failed, pages, links.
    List {
        /// Print the rounds as JSON (fields: id, state, policy, started_ms,
        /// finished_ms, every_s, jobs, queued, running, done, failed,
        /// complete, incomplete, pages, links).
        #[arg(long)]
        json: bool,
    },
    /// One round: its counts, and each site's state, scans, pages, links,
    /// hosts (running copies with their pages so far) and completeness.
    Show {
        /// The round's id (from `round list`).
        id: u64,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Wait until every job of the round is done or failed, showing its
    /// progress (a line updated in place on a terminal, else a line every
    /// --report-every). Exit 0 when over, 3 on timeout, 4 if cancelled.
    Wait {
        /// The round's id (from `round list`).
        id: u64,
        /// Give up after this long (`90s`, `2h`); exit 3.
        #[arg(long, default_value = "24h", value_parser = typed_duration)]
        timeout: TypedDuration,
        /// How often to print a progress line when stdout is not a terminal.
        #[arg(long, default_value = WAIT_REPORT_EVERY, value_parser = typed_duration)]
        report_every: TypedDuration,
    },
    /// Cancel a running round: its queued and running jobs stop, and
    /// clients drop its units.
    Cancel {
        /// The round's id (from `round list`).
        id: u64,
    },
    /// Scan sites of a round again (a damaged result, a site that failed):
    /// each goes back to the round's queue and is scanned from its start;
    /// a round that was over runs again until they are done, and its
    /// export then holds them. Prints each site queued again.
    Rescan {
        /// The round's id (from `round list`).
        id: u64,
        /// Sites to scan again (names as in `round show`).
        sites: Vec<String>,
        /// Every damaged site the server knows of in the round (found at
        /// start, by `check` or by an export).
        #[arg(long)]
        damaged: bool,
    },
}

/// `beebot-server round ...`.
pub fn run(dir: &DataDir, cmd: RoundCmd) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    match cmd {
        RoundCmd::Start(start) => {
            // Each duration within its range, said in the words typed.
            start.check_typed()?;
            let r: RoundStarted = c.post("/api/rounds", &start)?;
            Ok(started(&r, start.every()))
        }
        RoundCmd::List { json } => {
            let rounds: Vec<RoundSummary> = c.get("/api/rounds")?;
            list(&rounds, json)
        }
        RoundCmd::Show { id, json } => {
            let d: RoundDetail = c.get(&format!("/api/rounds/{id}"))?;
            if json {
                return Report::json(&d);
            }
            let mut r = Report::out(show(&d));
            let damaged: Vec<beebot_server::api::DamagedSite> =
                c.get(&format!("/api/rounds/{id}/damage"))?;
            for line in super::check::damaged_lines(&damaged) {
                r.warn(line);
            }
            Ok(r)
        }
        RoundCmd::Wait {
            id,
            timeout,
            report_every,
        } => super::wait::run(&c, id, &timeout, &report_every),
        RoundCmd::Cancel { id } => {
            c.post_empty(&format!("/api/rounds/{id}/cancel"))?;
            Ok(Report::out(format!("round {id} cancelled\n")))
        }
        RoundCmd::Rescan { id, sites, damaged } => {
            if sites.is_empty() && !damaged {
                anyhow::bail!("name the sites to scan again, or give --damaged");
            }
            let body = RoundRescan { sites, damaged };
            let r: RoundRescanned = c.post(&format!("/api/rounds/{id}/rescan"), &body)?;
            let mut report = Report::default();
            report.warn(format!(
                "round {id}: {} site(s) queued to be scanned again",
                r.sites.len()
            ));
            for s in r.sites {
                report.say(s);
            }
            Ok(report)
        }
    }
}

/// What `round start` says: a warning, the round started, its id alone.
fn started(r: &RoundStarted, every: Option<Duration>) -> Report {
    let mut report = Report::default();
    if let Some(w) = &r.warning {
        report.warn(format!("warning: {w}"));
    }
    match every {
        Some(every) => report.say(format!(
            "round {} started; repeats every {}",
            r.id,
            human_duration(every)
        )),
        None => report.say(format!("round {} started", r.id)),
    }
    report.say(r.id);
    report
}

/// `round list`: JSON, or a table (said on stderr when empty).
fn list(rounds: &[RoundSummary], json: bool) -> Result<Report> {
    if json {
        let listed: Vec<RoundListed> = rounds.iter().map(RoundListed::of).collect();
        return Report::json(&listed);
    }
    if rounds.is_empty() {
        return Ok(Report::note(
            "no rounds yet: start one with `beebot-server round start`",
        ));
    }
    let mut report = Report::out("id\tstate\tpolicy\tjobs\tdone\tfailed\tpages\tlinks\n");
    for r in rounds {
        report.say(format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.round.id,
            r.round.state.as_str(),
            r.round.params.policy,
            r.counts.total,
            r.counts.done,
            r.counts.failed,
            r.counts.pages,
            r.counts.links
        ));
    }
    Ok(report)
}

/// `round show`: the round's settings and counts, then a line a site.
fn show(d: &RoundDetail) -> String {
    let p = &d.round.params;
    let n = &d.counts;
    let mut out = format!(
        "round {} ({}), policy {}, scope {:?}, max {} pages, delay {} ms, validation {}\n",
        d.round.id,
        d.round.state.as_str(),
        p.policy,
        p.scope,
        p.max_pages,
        p.delay_ms,
        p.validate.as_str()
    );
    out.push_str(&format!(
        "jobs: {} total, {} queued, {} running, {} done, {} failed, {} cancelled; {} pages, {} links\n",
        n.total, n.queued, n.running, n.done, n.failed, n.cancelled, n.pages, n.links
    ));
    out.push_str(&format!(
        "validation: {} pending, {} valid, {} trusted; {} results invalid; {} pages scanned to check\n",
        n.pending, n.valid, n.trusted, n.invalid, n.check_pages
    ));
    out.push_str(
        "site\tstate\tattempts\tscans\tpages\tlinks\thosts\tvalidation\tcomplete\treasons\n",
    );
    for (line, j) in d.sites.iter().zip(&d.jobs) {
        out.push_str(&site_row(line, &j.reasons));
    }
    for f in &d.round.folded {
        out.push_str(&format!(
            "{}\tfolded into {}: its {:?} scope covers it, one job crawls both\n",
            f.site, f.into, p.scope
        ));
    }
    if let Some(w) = &d.waiting {
        out.push_str(&format!("round {}: {w}\n", d.round.id));
    }
    if d.round.state != RoundState::Running {
        out.push_str(&format!("round {}: {}\n", d.round.id, n.verdict()));
    }
    out
}

/// One site's row of `round show`.
fn site_row(line: &SiteLine, reasons: &[String]) -> String {
    let c = &line.completeness;
    let complete = match (&c.why_not, c.natural_end) {
        (_, true) => "yes".to_string(),
        (Some(why), false) => format!("no: {why}"),
        (None, false) => "-".to_string(),
    };
    // Each result compared: its hosts and verdict.
    let results: Vec<String> = line
        .results
        .iter()
        .map(|r| {
            let hosts: Vec<String> = r.hosts.iter().map(|h| h.to_string()).collect();
            format!("{} by {}", r.verdict.as_str(), hosts.join("+"))
        })
        .collect();
    let validation = if results.is_empty() {
        line.validation.clone()
    } else {
        format!("{} ({})", line.validation, results.join(", "))
    };
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
        line.site,
        line.waits.as_deref().unwrap_or(line.state.as_str()),
        line.attempts,
        c.scans,
        c.pages,
        c.links,
        hosts_column(line),
        validation,
        complete,
        reasons.join("; ")
    )
}

/// `round show`'s hosts column: the copies running now (name#id and
/// pages so far), else the host of the last accepted scan.
fn hosts_column(line: &SiteLine) -> String {
    let named = |id: u64, name: &str| {
        if name.is_empty() {
            format!("#{id}")
        } else {
            format!("{name}#{id}")
        }
    };
    if !line.running.is_empty() {
        return line
            .running
            .iter()
            .map(|r| format!("{} ({} pages)", named(r.host, &r.host_name), r.pages))
            .collect::<Vec<_>>()
            .join(", ");
    }
    line.host.map_or("-".into(), |h| {
        named(h, line.host_name.as_deref().unwrap_or(""))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn round_start_says_the_id_alone_on_the_last_line() {
        let r = RoundStarted {
            id: 7,
            warning: Some("one host".into()),
        };
        let report = started(&r, Some(Duration::from_secs(7 * 24 * 3600)));
        assert_eq!(report.out, "round 7 started; repeats every 7 days\n7\n");
        assert_eq!(report.err, "warning: one host\n");
        assert_eq!(started(&r, None).out, "round 7 started\n7\n");
    }

    /// `round ...` parsed as the CLI does.
    #[derive(Parser)]
    struct Round {
        #[command(subcommand)]
        cmd: RoundCmd,
    }

    #[test]
    fn round_start_refuses_durations_in_the_words_typed() {
        let parse = |args: &[&str]| {
            let mut all = vec!["round", "start"];
            all.extend_from_slice(args);
            match Round::try_parse_from(all).expect("flags").cmd {
                RoundCmd::Start(s) => s,
                _ => unreachable!("start"),
            }
        };
        let e = parse(&["--every", "5m"]).check_typed().unwrap_err();
        assert_eq!(
            e.to_string(),
            "--every 5m is shorter than 60m, the shortest repeat period (add --force if you mean it)"
        );
        assert!(parse(&["--every", "5m", "--force"]).check_typed().is_ok());
        let e = parse(&["--max-crawl-delay", "90s"])
            .check_typed()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--max-crawl-delay 90s is longer than 60s"),
            "{e}"
        );
        let s = parse(&[
            "--min-deadline",
            "90s",
            "--max-deadline",
            "1d",
            "--every",
            "7d",
        ]);
        let json = serde_json::to_value(&s).expect("encode");
        assert_eq!(json["deadline_min_s"], 90);
        assert_eq!(json["deadline_max_s"], 24 * 3600);
        assert_eq!(json["every_s"], 7 * 24 * 3600);
        assert_eq!(json["force"], false);
    }

    #[test]
    fn an_empty_round_list_says_how_to_start_one() {
        let r = list(&[], false).unwrap();
        assert_eq!(r.out, "");
        assert!(r.err.starts_with("no rounds yet"), "{}", r.err);
        assert_eq!(list(&[], true).unwrap().out, "[]\n");
    }
}
