//! `hosts`: the enrolled hosts (list) and revoking one (by id or name).

use anyhow::Result;
use clap::Subcommand;

use beebot_server::api::{HostLine, HostRevoked};
use beebot_server::cli_util::{path_segment, AdminClient};
use beebot_server::config::DataDir;

use super::Report;

#[derive(Subcommand)]
pub enum HostsCmd {
    /// Every host: state, trust (valid results in a row), results found
    /// valid and invalid, work done, speed.
    List {
        /// Print the hosts as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a host by its id or its name (an active host's, if only one
    /// has it): it can no longer connect, and its units go back to the queue.
    Revoke {
        /// The host's id or name (from `hosts list`).
        #[arg(value_name = "ID|NAME")]
        host: String,
    },
}

/// `hosts list`'s header row.
const HEADER: &str =
    "id\tname\tstate\ttrust\tvalid\tinvalid\tjobs\tpages\tmissed\tpages/s\tbenchmark\tlast seen";

/// `beebot-server hosts ...`.
pub fn run(dir: &DataDir, cmd: HostsCmd) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    match cmd {
        HostsCmd::List { json } => {
            let hosts: Vec<HostLine> = c.get("/api/hosts")?;
            if json {
                return Report::json(&hosts);
            }
            Ok(list(&hosts, beebot_server::now_ms()))
        }
        HostsCmd::Revoke { host } => {
            let path = path_segment(&host);
            let r: HostRevoked = c.post(&format!("/api/hosts/{path}/revoke"), &())?;
            Ok(Report::out(format!("host {} ({}) revoked\n", r.id, r.name)))
        }
    }
}

/// `hosts list` as a table at `now` (Unix ms).
fn list(hosts: &[HostLine], now: u64) -> Report {
    if hosts.is_empty() {
        return Report::note("no hosts yet: create an invite with `beebot-server invite`");
    }
    let mut r = Report::out(format!("{HEADER}\n"));
    for HostLine {
        host: h, trusted, ..
    } in hosts
    {
        let speed = if h.seconds_done > 0.0 {
            format!("{:.1}", h.pages_done as f64 / h.seconds_done)
        } else {
            h.benchmark
                .as_ref()
                .map(|b| format!("{:.1}", b.pages_per_s))
                .unwrap_or("-".into())
        };
        // The reference-site benchmark: pages/s and KB/s.
        let bench = h.benchmark.as_ref().map_or("-".into(), |b| {
            format!("{:.1} p/s {:.0} KB/s", b.pages_per_s, b.kb_per_s)
        });
        // Trust: its valid results in a row.
        let trust = format!(
            "{} ({} in a row)",
            if *trusted { "trusted" } else { "untrusted" },
            h.consecutive_valid
        );
        r.say(format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}s ago",
            h.id,
            h.info.name,
            h.state(),
            trust,
            h.valid_results,
            h.invalid_results,
            h.jobs_done,
            h.pages_done,
            h.deadlines_missed,
            speed,
            bench,
            now.saturating_sub(h.last_seen_ms) / 1000
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_says_how_to_get_hosts() {
        let r = list(&[], 0);
        assert_eq!(r.out, "");
        assert_eq!(
            r.err,
            "no hosts yet: create an invite with `beebot-server invite`\n"
        );
        assert_eq!(HEADER.split('\t').count(), 12);
    }
}
