//! The index of open jobs ([`OpenJobs`]): per running round, the queued
//! jobs as the scheduler sees them, the running ones, each host's failures,
//! the jobs under check and the queued jobs by their site's reach.
//!
//! Invariants: [`Grid::reindex`] is called after every change of a job of a
//! running round, so the index always equals one built afresh from the jobs
//! (debug builds check it: [`Grid::check_open`]). It is memory only, rebuilt
//! when the grid opens; it never writes to the store.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use beebot_shared::scope::{Scope, SiteScope};

use super::Grid;
use crate::model::*;
use crate::scheduler::JobView;

/// A running round's queued and running jobs, so that a work request, an
/// upload and a tick cost what is open now, not a walk over every job of
/// every round ever run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct OpenJobs {
    /// Queued jobs as the scheduler sees them, in list order (job ids grow
    /// with it), `failed_here` unset: it is filled in per asking host.
    pub(super) queue: Vec<JobView>,
    /// Jobs with a running attempt.
    pub(super) running: BTreeSet<u64>,
    /// Open jobs each host failed (an attempt expired or given back).
    pub(super) failed_by: HashMap<u64, BTreeSet<u64>>,
    /// Open jobs whose results are being checked, with the hosts that may
    /// not take them (the results' authors).
    pub(super) checks: BTreeMap<u64, Vec<u64>>,
    /// Queued jobs by their site's reach ([`reach_key`] → job id → whether
    /// every name under it is inside): a job whose reach meets a running
    /// job's waits, so no host is scanned by two jobs at once.
    pub(super) reach: BTreeMap<String, BTreeMap<u64, bool>>,
}

/// A site's reach ([`SiteScope::reach`]) as a key whose names under a root
/// sort right after it: labels reversed (`cs.example.edu` is
/// `edu.example.cs`), ports dropped.
pub(super) fn reach_key(site: &str, scope: Scope) -> (String, bool) {
    let s = SiteScope::new(site, scope);
    let (root, all_under) = s.reach();
    let key: Vec<&str> = root.rsplit('.').collect();
    (key.join("."), all_under)
}

/// Whether two reaches ([`reach_key`]) share a host name.
pub(super) fn reaches_meet(a: &(String, bool), b: &(String, bool)) -> bool {
    let under = |x: &str, root: &str| {
        x.len() > root.len() && x.starts_with(root) && x.as_bytes()[root.len()] == b'.'
    };
    a.0 == b.0 || (a.1 && under(&b.0, &a.0)) || (b.1 && under(&a.0, &b.0))
}

/// Queued jobs of `reach` (an index of [`OpenJobs::reach`]) whose reach
/// meets `busy`'s: O(labels × log n) plus the jobs found.
pub(super) fn queued_meeting(
    reach: &BTreeMap<String, BTreeMap<u64, bool>>,
    busy: &(String, bool),
    out: &mut BTreeSet<u64>,
) {
    let (root, all_under) = (busy.0.as_str(), busy.1);
    // The same root, and roots above it that reach every name under them.
    for (i, b) in root.bytes().enumerate().chain([(root.len(), b'.')]) {
        if b != b'.' {
            continue;
        }
        let above = &root[..i];
        for (id, tree) in reach.get(above).into_iter().flatten() {
            if *tree || i == root.len() {
                out.insert(*id);
            }
        }
    }
    // Roots under it, when it reaches every name under it.
    if all_under {
        let from = format!("{root}.");
        for (_, jobs) in reach
            .range(from.clone()..)
            .take_while(|(k, _)| k.starts_with(&from))
        {
            out.extend(jobs.keys().copied());
        }
    }
}

/// The host had an attempt of `job` that expired or failed.
pub(super) fn failed_by(job: &JobRecord, host_id: u64) -> bool {
    job.attempts
        .iter()
        .any(|a| a.host_id == host_id && a.state.ended_without_result())
}

impl Grid {
    /// Bring the index of open jobs in step with job `job_id` after a change.
    pub(super) fn reindex(&mut self, job_id: u64) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        let Some(round) = self
            .rounds
            .get(&job.round_id)
            .filter(|r| r.state == RoundState::Running)
        else {
            return;
        };
        let open = self.open.entry(job.round_id).or_default();
        if let Ok(p) = open.queue.binary_search_by_key(&job_id, |v| v.job_id) {
            open.queue.remove(p);
        }
        let reach = reach_key(&job.site, round.params.scope);
        if let Some(jobs) = open.reach.get_mut(&reach.0) {
            jobs.remove(&job_id);
            if jobs.is_empty() {
                open.reach.remove(&reach.0);
            }
        }
        if job.state == JobState::Queued {
            open.reach
                .entry(reach.0)
                .or_default()
                .insert(job_id, reach.1);
        }
        if job.state == JobState::Queued {
            let order = round.job_ids.binary_search(&job_id).unwrap_or(0) as u32;
            let view = JobView {
                job_id,
                order,
                pages: job.est_pages,
                failed_here: false,
                failed_somewhere: job.attempts.iter().any(|a| a.state.ended_without_result()),
                size_known: job.size_known,
                // A batch stays with its host unless that host failed the job.
                assigned: job.batch_host.filter(|h| !failed_by(job, *h)),
            };
            if let Err(p) = open.queue.binary_search_by_key(&job_id, |v| v.job_id) {
                open.queue.insert(p, view);
            }
        }
        if job.state == JobState::Running {
            open.running.insert(job_id);
        } else {
            open.running.remove(&job_id);
        }
        // An attempt's state may change back (an expired scan's late result
        // is accepted), so this job's failures are counted afresh.
        for jobs in open.failed_by.values_mut() {
            jobs.remove(&job_id);
        }
        if !job.state.is_final() {
            for a in &job.attempts {
                if a.state.ended_without_result() {
                    open.failed_by.entry(a.host_id).or_default().insert(job_id);
                }
            }
        }
        open.failed_by.retain(|_, jobs| !jobs.is_empty());
        if job.state.is_final() || job.candidates.is_empty() {
            open.checks.remove(&job_id);
        } else {
            open.checks.insert(job_id, job.authors());
        }
    }

    /// Build the index of open jobs afresh from the jobs of the running
    /// rounds.
    pub(super) fn rebuild_open(&mut self) {
        self.open.clear();
        let running: Vec<u64> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .flat_map(|r| r.job_ids.iter().copied())
            .collect();
        for id in running {
            self.reindex(id);
        }
    }

    /// After the store failed, a change may have stopped between changing
    /// a job in memory and indexing it (its write failed first): the index
    /// is built afresh, so what reads go on showing stays consistent.
    /// Nothing is acknowledged from then on (fail-stop), so no decision
    /// rests on the half-made change. Does nothing while the store is well.
    pub fn repair_after_store_failure(&mut self) {
        if self.store.failure().is_some() {
            self.rebuild_open();
        }
    }

    /// Debug builds check that the index of open jobs equals one built
    /// afresh from the jobs.
    pub(super) fn check_open(&self) {
        #[cfg(debug_assertions)]
        assert_eq!(self.open, self.open_from_scratch(), "index of open jobs");
    }

    /// The index of open jobs, built afresh from the jobs.
    #[cfg(debug_assertions)]
    pub(super) fn open_from_scratch(&self) -> HashMap<u64, OpenJobs> {
        let io = super::GridIo {
            store: self.store.clone(),
            links: self.links.clone(),
            signer: self.signer.clone(),
            // Never drawn from: this grid only builds an index.
            rng: Box::new(rand::rngs::OsRng),
        };
        let mut g = Grid::empty(io, self.settings.clone());
        g.rounds = self.rounds.clone();
        g.jobs = self.jobs.clone();
        let ids: Vec<u64> = g.jobs.keys().copied().collect();
        for id in ids {
            g.reindex(id);
        }
        g.open
    }

    /// Ids of the running jobs of every running round, in id order.
    pub(super) fn running_job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| o.running.iter().copied())
            .collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests;
