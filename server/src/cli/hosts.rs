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
        // The speed the scheduler plans with, as the dashboard shows it.
        let speed = h.speed().map_or("-".into(), |s| format!("{s:.2}"));
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

    /// `hosts list` shows the speed the scheduler plans with and the
    /// dashboard shows (not a lifetime mean of its own), and the
    /// benchmark's for a host with no job done.
    #[test]
    fn the_speed_is_the_one_the_dashboard_shows() {
        use beebot_server::api::HostLine;
        use beebot_server::dashboard::{data, live::Live};
        use beebot_server::model::{Benchmark, HostRecord};
        let info = beebot_shared::proto::HostInfo {
            name: "desk".into(),
            os: "linux".into(),
            client_version: "0".into(),
            cores: 4,
        };
        let mut worked = HostRecord::new(1, [1; 32], info.clone(), 0);
        (worked.pages_done, worked.seconds_done) = (140, 100.0);
        worked.avg_pages_per_s = Some(3.86);
        let mut fresh = HostRecord::new(2, [2; 32], info, 0);
        fresh.benchmark = Some(Benchmark {
            pages_per_s: 5.0,
            kb_per_s: 300.0,
            slots: 1,
            measured_ms: 0,
        });
        let lines: Vec<HostLine> = [worked, fresh]
            .into_iter()
            .map(|host| HostLine {
                host,
                trusted: false,
                resources: None,
            })
            .collect();
        let cli = list(&lines, 0).out;
        let page = data::hosts_page(&lines, &Live::new(0, None), 0);
        for (row, want) in [(1, "3.86"), (2, "5.00")] {
            let line = cli.lines().nth(row).expect("a row");
            assert_eq!(line.split('\t').nth(9), Some(want), "{cli}");
            let shown = page.hosts[row - 1].speed_pages_per_s.expect("a speed");
            assert_eq!(format!("{shown:.2}"), want);
        }
    }
}
