//! `status`: the grid at a glance: sites, hosts, the jobs of the running
//! rounds (or of the last one), and where the dashboard is.

use anyhow::Result;

use beebot_server::api::StatusResponse;
use beebot_server::cli_util::AdminClient;
use beebot_server::config::DataDir;
use beebot_server::grid::GridStatus;

use super::Report;

/// `beebot-server status [--json]`.
pub fn run(dir: &DataDir, json: bool) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    let s: StatusResponse = c.get("/api/status")?;
    if json {
        return Report::json(&s);
    }
    let mut out = summary(&s);
    out.push_str(&format!(
        "dashboard    {}/ (log in with the token in {})\n",
        c.base(),
        dir.admin_token().display()
    ));
    Ok(Report::out(out))
}

/// The status lines above the dashboard's.
fn summary(s: &StatusResponse) -> String {
    let g = &s.grid;
    let mut out = format!("server       {}\n", s.public_addr);
    out.push_str(&format!("certificate  sha256:{}\n", s.cert_sha256));
    out.push_str(&format!("sites        {}\n", g.sites));
    out.push_str(&format!(
        "hosts        {} active, {} revoked, {} left\n",
        g.hosts, g.hosts_revoked, g.hosts_left
    ));
    out.push_str(&format!("rounds       {} running\n", g.rounds_running));
    out.push_str(&format!(
        "jobs         {} queued, {} running, {} done, {} failed, {} cancelled{}\n",
        g.jobs_queued,
        g.jobs_running,
        g.jobs_done,
        g.jobs_failed,
        g.jobs_cancelled,
        jobs_of(g)
    ));
    if let Some(last) = &g.last_round {
        let incomplete = if last.incomplete > 0 {
            format!(", {} INCOMPLETE", last.incomplete)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "last round   {} {}: {} of {} sites complete{incomplete}\n",
            last.id, last.state, last.complete, last.sites
        ));
    }
    out
}

/// Which rounds the job counts are of.
fn jobs_of(g: &GridStatus) -> String {
    match (g.rounds_running, g.jobs_rounds.as_slice()) {
        (_, []) => String::new(),
        (0, [last]) => format!(" (round {last}, the last)"),
        (_, ids) => format!(
            " (round{} {})",
            if ids.len() > 1 { "s" } else { "" },
            ids.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_counts_say_which_rounds_they_are_of() {
        let mut g = GridStatus::default();
        assert_eq!(jobs_of(&g), "");
        g.jobs_rounds = vec![4];
        assert_eq!(jobs_of(&g), " (round 4, the last)");
        g.rounds_running = 2;
        g.jobs_rounds = vec![4, 5];
        assert_eq!(jobs_of(&g), " (rounds 4, 5)");
    }
}
