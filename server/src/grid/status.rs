//! `status`: counters of the target set, the hosts and the rounds' jobs, and
//! how completely the newest finished round scanned its sites.
//!
//! Invariants: it only reads; it counts the jobs of the running rounds, or
//! of the newest when none runs.

use super::Grid;
use crate::model::*;

/// Counters for `status`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GridStatus {
    pub sites: usize,
    pub hosts: usize,
    pub hosts_revoked: usize,
    /// Hosts that left by themselves (`beebot leave`); not in `hosts_revoked`.
    #[serde(default)]
    pub hosts_left: usize,
    pub rounds_running: usize,
    pub jobs_queued: usize,
    pub jobs_running: usize,
    pub jobs_done: usize,
    pub jobs_failed: usize,
    /// Jobs of a cancelled round that were not over when it was cancelled.
    #[serde(default)]
    pub jobs_cancelled: usize,
    /// Of the counted jobs, those whose result waits for a second to agree
    /// (validation pending).
    #[serde(default)]
    pub jobs_awaiting_validation: usize,
    /// The rounds whose jobs the counts are: the running ones, or when none
    /// runs, the newest.
    #[serde(default)]
    pub jobs_rounds: Vec<u64>,
    /// The newest round that is over, and how completely it scanned its sites.
    pub last_round: Option<RoundOutcome>,
}

/// How completely a finished round scanned its sites.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RoundOutcome {
    pub id: u64,
    pub state: String,
    pub sites: usize,
    /// Sites scanned to their natural end.
    pub complete: usize,
    /// Sites that were not (failed, robots unavailable, ...): `round show` says why.
    pub incomplete: usize,
    /// Of those, sites whose job failed (every attempt ended without a
    /// result: the name did not resolve, the connection was refused, ...).
    #[serde(default)]
    pub failed: usize,
}

impl Grid {
    pub fn status(&self) -> GridStatus {
        let mut s = GridStatus {
            sites: self.sites.len(),
            hosts: self.hosts.values().filter(|h| !h.revoked).count(),
            hosts_revoked: self
                .hosts
                .values()
                .filter(|h| h.state() == "revoked")
                .count(),
            hosts_left: self.hosts.values().filter(|h| h.state() == "left").count(),
            rounds_running: self
                .rounds
                .values()
                .filter(|r| r.state == RoundState::Running)
                .count(),
            ..Default::default()
        };
        // The running rounds' jobs; when none runs, the newest round's (a
        // status right after a round counts that round, not zeros).
        let mut counted: Vec<&RoundRecord> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .collect();
        if counted.is_empty() {
            counted.extend(self.rounds.values().next_back());
        }
        s.jobs_rounds = counted.iter().map(|r| r.id).collect();
        for r in counted {
            for j in r.job_ids.iter().filter_map(|j| self.jobs.get(j)) {
                match j.state {
                    JobState::Queued => s.jobs_queued += 1,
                    JobState::Running => s.jobs_running += 1,
                    JobState::Done => s.jobs_done += 1,
                    JobState::Failed => s.jobs_failed += 1,
                    JobState::Cancelled => s.jobs_cancelled += 1,
                }
                if j.validation == crate::model::JobValidation::Pending {
                    s.jobs_awaiting_validation += 1;
                }
            }
        }
        s.last_round = self
            .rounds
            .values()
            .rev()
            .find(|r| r.state != RoundState::Running)
            .map(|r| {
                let mut o = RoundOutcome {
                    id: r.id,
                    state: r.state.as_str().to_string(),
                    sites: r.job_ids.len(),
                    ..Default::default()
                };
                for j in r.job_ids.iter().filter_map(|j| self.jobs.get(j)) {
                    if j.completeness().natural_end {
                        o.complete += 1;
                    } else {
                        o.incomplete += 1;
                    }
                    o.failed += usize::from(j.state == JobState::Failed);
                }
                o
            });
        s
    }
}

impl Grid {
    /// Each running round's id with its jobs, borrowed (nothing copied):
    /// what the dashboard's sampler reads on every tick.
    pub fn running_rounds(&self) -> impl Iterator<Item = (u64, Vec<&JobRecord>)> + '_ {
        self.rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| {
                let jobs = r.job_ids.iter().filter_map(|j| self.jobs.get(j)).collect();
                (r.id, jobs)
            })
    }
}

#[cfg(test)]
mod tests {
    use crate::grid::testkit::*;

    #[test]
    fn status_right_after_a_round_counts_that_rounds_jobs() {
        let (mut fx, round) = Fx::with_round(2, 3);
        assert_eq!(fx.grid.status().jobs_queued, 2);
        fx.grid.cancel_round(round, T0 + 1).unwrap();
        let s = fx.grid.status();
        assert_eq!(s.rounds_running, 0);
        assert_eq!(s.jobs_rounds, vec![round]);
        assert_eq!(s.jobs_cancelled, 2);
        assert_eq!(
            s.jobs_queued + s.jobs_running + s.jobs_done + s.jobs_failed,
            0
        );
    }
}
