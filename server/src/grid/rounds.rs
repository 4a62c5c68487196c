//! Rounds: started over the target set (a site a wider site's scope covers
//! folded into that site's job), repeated, cancelled and found done.
//!
//! Invariants: a round's jobs are created once, at its start, in the
//! target set's order; a round is done when every job of it is final.
//! Nothing here issues or judges a unit.
//!
//! A round's parameters are checked (`RoundParams::check_values`) before it
//! starts, and a round whose record (its folded sites) would pass the store's
//! record limit (`store::format::check_round`) is refused before any job is
//! written. Its jobs are made one after another, so their ids are one run.
//! `rescan_sites` scans sites of a round again: a new chain for each, the files
//! its old result kept released, and a round that was over runs again.

use std::collections::{BTreeSet, HashMap};

use beebot_shared::scope::{Scope, SiteScope};

use super::{Grid, GridError, PLAN_HOSTS_SEEN_WITHIN_MS, REPEAT_SOON_MS};
use crate::model::*;
use crate::scheduler::{self, HostView, JobView};
use crate::store::IdKind;

/// Most sites one `round rescan` names (a round of a whole target set
/// re-scans its damaged sites in a few calls).
pub const MAX_RESCAN_SITES: usize = 10_000;

/// The sites of `targets` that a wider site's scope covers
/// ([`SiteScope::covers_site`]), each with the widest site covering it (of
/// sites with the same reach, the first in the target set's order keeps its
/// job): a round gives them no job of their own, so no host is crawled by two
/// jobs of one round. Linear in the sites and their names' labels.
pub(super) fn fold_covered_sites(targets: &[&SiteRecord], scope: Scope) -> Vec<FoldedSite> {
    let scopes: Vec<SiteScope> = targets
        .iter()
        .map(|s| SiteScope::new(&s.host, scope))
        .collect();
    // Sites that take every name under their root, by (root, port).
    let mut wide: HashMap<(&str, Option<u16>), Vec<usize>> = HashMap::new();
    for (i, sc) in scopes.iter().enumerate() {
        if let (root, true) = sc.reach() {
            wide.entry((root, sc.port())).or_default().push(i);
        }
    }
    let mut folded = Vec::new();
    for (i, sc) in scopes.iter().enumerate() {
        let (root, all) = sc.reach();
        // The root and each name above it, widest last.
        let mut name = Some(root);
        let mut into: Option<(usize, usize)> = None; // (labels, index)
        while let Some(n) = name {
            for &a in wide.get(&(n, sc.port())).into_iter().flatten() {
                // The same reach: the first listed keeps its job.
                let same = n == root && all;
                if a != i && (!same || a < i) {
                    let key = (n.split('.').count(), a);
                    if into.is_none_or(|k| key < k) {
                        into = Some(key);
                    }
                }
            }
            name = n.split_once('.').map(|(_, up)| up);
        }
        if let Some((_, a)) = into {
            folded.push(FoldedSite {
                site: targets[i].host.clone(),
                into: targets[a].host.clone(),
            });
        }
    }
    folded
}

impl Grid {
    /// Start a round over the whole target set.
    pub fn start_round(&mut self, params: RoundParams, now_ms: u64) -> Result<u64, GridError> {
        self.start_round_every(params, None, now_ms)
    }

    /// Start a round; with `every_ms`, it repeats (see [`Grid::repeat_due_rounds`]).
    pub fn start_round_every(
        &mut self,
        params: RoundParams,
        every_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<u64, GridError> {
        self.check_round_params(&params, every_ms)?;
        let policy = scheduler::policy_by_name(&params.policy)
            .ok_or_else(|| GridError::Invalid(format!("unknown policy `{}`", params.policy)))?;
        let round_id = self.writes.next_id(IdKind::Round);
        let (jobs, folded) = self.new_jobs(round_id, &params)?;
        let round = RoundRecord {
            id: round_id,
            created_ms: now_ms,
            finished_ms: None,
            params,
            state: RoundState::Running,
            job_ids: jobs.iter().map(|j| j.id).collect(),
            every_ms,
            next_round: None,
            folded,
        };
        // The round's record lists the sites folded into wider ones: one
        // too large to store is refused before any job is written.
        if let Err(e) = crate::store::check_round(&round) {
            return Err(GridError::Invalid(format!(
                "a round folding {} sites into wider ones is more than one round can \
                 hold ({e}: its record lists every folded site); start it with a \
                 narrower scope or remove the folded sites from the target set",
                round.folded.len()
            )));
        }
        let plan = self.batch_plan(policy.as_ref(), &jobs, &round.params, now_ms);
        for mut job in jobs {
            job.batch_host = plan.get(&job.id).copied();
            self.writes.put_job(job.clone());
            self.jobs.insert(job.id, job);
        }
        self.writes.put_round(&round);
        let job_ids = round.job_ids.clone();
        self.rounds.insert(round_id, round);
        for id in job_ids {
            self.reindex(id);
        }
        self.rounds_changed += 1;
        Ok(round_id)
    }

    /// Refuse round parameters no round can run with.
    fn check_round_params(
        &self,
        params: &RoundParams,
        every_ms: Option<u64>,
    ) -> Result<(), GridError> {
        if self.sites.is_empty() {
            return Err(GridError::Invalid(
                "the target set is empty: add sites first (`sites add` or `sites import`)".into(),
            ));
        }
        params
            .check_values(every_ms)
            .map_err(|e| GridError::Invalid(e.to_string()))?;
        Ok(())
    }

    /// The jobs of a new round: one per site of the target set that no
    /// exclusion covers and no wider site's scope folds away, each sized
    /// from its site's last scan; and the sites folded.
    fn new_jobs(
        &mut self,
        round_id: u64,
        params: &RoundParams,
    ) -> Result<(Vec<JobRecord>, Vec<FoldedSite>), GridError> {
        // Each job's size is fixed now, from its site's last scan.
        let mut jobs = Vec::with_capacity(self.sites.len());
        // (An excluded host left the target set; one never gets a job.)
        let targets: Vec<&SiteRecord> = self
            .sites
            .values()
            .filter(|s| self.excluded_by(&s.host).is_none())
            .collect();
        let folded = fold_covered_sites(&targets, params.scope);
        let folded_away: BTreeSet<&str> = folded.iter().map(|f| f.site.as_str()).collect();
        for site in targets
            .iter()
            .filter(|s| !folded_away.contains(s.host.as_str()))
        {
            let id = self.writes.next_id(IdKind::Job);
            jobs.push(JobRecord {
                id,
                round_id,
                site: site.host.clone(),
                state: JobState::Queued,
                attempts: Vec::new(),
                result: None,
                reasons: Vec::new(),
                est_pages: scheduler::site_pages(site.last_scan.as_ref(), params.max_pages),
                size_known: site.last_scan.is_some(),
                batch_host: None,
                segments: Vec::new(),
                chain_sketch: Vec::new(),
                chain: 0,
                candidates: Vec::new(),
                validation: JobValidation::None,
            });
        }
        Ok((jobs, folded))
    }

    /// A round-start plan (batch) over the hosts heard from lately: job id
    /// → the host it is kept for.
    fn batch_plan(
        &self,
        policy: &dyn scheduler::Policy,
        jobs: &[JobRecord],
        params: &RoundParams,
        now_ms: u64,
    ) -> HashMap<u64, u64> {
        let views: Vec<JobView> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobView {
                job_id: j.id,
                order: i as u32,
                pages: j.est_pages,
                failed_here: false,
                barred_somewhere: false,
                barred: Vec::new(),
                size_known: j.size_known,
                assigned: None,
                under_check: false,
                pace_s: self.site_pace(j, params.delay_ms),
            })
            .collect();
        let hosts = self.host_views_now(now_ms).views;
        let recent: Vec<HostView> = hosts
            .into_iter()
            .filter(|h| now_ms.saturating_sub(h.last_seen_ms) <= PLAN_HOSTS_SEEN_WITHIN_MS)
            .collect();
        policy
            .plan(&views, &recent, params.delay_ms as f64 / 1000.0)
            .into_iter()
            .collect()
    }

    /// Rounds started (by `round start` or a repeat) or cancelled since the
    /// grid opened: when this changes, work may wait for idle hosts, or
    /// hosts hold units they must drop.
    pub fn rounds_changed(&self) -> u64 {
        self.rounds_changed
    }

    /// The units of `held` that belong to a cancelled round, or that an
    /// exclusion stopped (see [`Grid::stopped_by_exclusion`]).
    pub(super) fn cancelled_units(&self, held: &[u64]) -> Vec<u64> {
        held.iter()
            .copied()
            .filter(|u| {
                self.job_of_unit(*u)
                    .and_then(|j| self.rounds.get(&j.round_id))
                    .is_some_and(|r| r.state == RoundState::Cancelled)
                    || self.stopped_by_exclusion(*u)
            })
            .collect()
    }

    /// Unit `unit_id` must not run: its site is excluded, or it was aborted
    /// because a host inside its scope was excluded after it was issued.
    pub(super) fn stopped_by_exclusion(&self, unit_id: u64) -> bool {
        if self.exclusions.is_empty() {
            return false;
        }
        let Some(job) = self.job_of_unit(unit_id) else {
            return false;
        };
        if self.excluded_by(&job.site).is_some() {
            return true;
        }
        let Some(a) = job.attempts.iter().find(|a| a.unit_id == unit_id) else {
            return false;
        };
        let Some(round) = self.rounds.get(&job.round_id) else {
            return false;
        };
        a.state == AttemptState::Aborted
            && SiteScope::new(&job.site, round.params.scope)
                .root()
                .is_some_and(|root| {
                    self.exclusions_under(root)
                        .any(|e| e.excluded_ms >= a.issued_ms)
                })
    }

    pub fn cancel_round(&mut self, round_id: u64, now_ms: u64) -> Result<(), GridError> {
        let round = self
            .rounds
            .get_mut(&round_id)
            .ok_or(GridError::UnknownRound(round_id))?;
        if round.state != RoundState::Running {
            return Err(GridError::Invalid(format!(
                "round {round_id} is already {}",
                round.state.as_str()
            )));
        }
        round.state = RoundState::Cancelled;
        round.finished_ms = Some(now_ms);
        let round = round.clone();
        self.writes.put_round(&round);
        self.close_round_links(round_id);
        // Its running units are aborted (their hosts are told to stop), so a
        // deadline passing later is not held against the hosts, and its
        // unfinished jobs are cancelled: never issued again.
        for id in &round.job_ids {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            if !job.state.is_final() {
                for a in job.attempts.iter_mut() {
                    if a.state == AttemptState::Running {
                        a.state = AttemptState::Aborted;
                        self.counters.units_aborted += 1;
                        // Its host holds one unit less: its view changes.
                        self.stale_views.insert(a.host_id);
                    }
                }
                job.state = JobState::Cancelled;
                self.writes.put_job(job.clone());
            }
            self.scan_paces.remove(id);
            let job = job.clone();
            self.drop_states(&job);
        }
        self.open.remove(&round_id);
        self.rounds_changed += 1;
        Ok(())
    }

    /// Scan `sites` of round `round_id` again (`round rescan`: a damaged
    /// result, a site that failed): each one's job goes back to the
    /// round's queue as a new chain from its seed, the files it kept are
    /// released, and a round that was over runs again until they are done
    /// (its export then holds them whole). Returns the sites queued again,
    /// in the order given, each once. A cancelled round, a site with no job
    /// of its own in the round, or a job not over yet (queued or running)
    /// is refused with nothing changed; at most [`MAX_RESCAN_SITES`] sites.
    pub fn rescan_sites(
        &mut self,
        round_id: u64,
        sites: &[String],
        why: &str,
        now_ms: u64,
    ) -> Result<Vec<String>, GridError> {
        let round = self
            .rounds
            .get(&round_id)
            .ok_or(GridError::UnknownRound(round_id))?;
        if round.state == RoundState::Cancelled {
            return Err(GridError::Invalid(format!(
                "round {round_id} was cancelled: start a new round instead"
            )));
        }
        if sites.is_empty() {
            return Err(GridError::Invalid("no site named to scan again".into()));
        }
        if sites.len() > MAX_RESCAN_SITES {
            return Err(GridError::Invalid(format!(
                "{} sites named; at most {MAX_RESCAN_SITES} are scanned again at once",
                sites.len()
            )));
        }
        let by_site: HashMap<&str, u64> = round
            .job_ids
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .map(|j| (j.site.as_str(), j.id))
            .collect();
        let mut picked: Vec<(String, u64)> = Vec::with_capacity(sites.len());
        for site in sites {
            let name = site.trim().to_ascii_lowercase();
            if picked.iter().any(|(s, _)| *s == name) {
                continue;
            }
            let Some(&id) = by_site.get(name.as_str()) else {
                let folded = round.folded.iter().find(|f| f.site == name);
                return Err(GridError::Invalid(match folded {
                    Some(f) => format!(
                        "site {name} has no job of its own in round {round_id}: {} crawls it",
                        f.into
                    ),
                    None => format!("site {name} is not in round {round_id}"),
                }));
            };
            if let Some(e) = self.excluded_by(&name) {
                return Err(GridError::Invalid(super::sites::excluded_message(&name, e)));
            }
            let state = self.jobs[&id].state;
            if !state.is_final() {
                return Err(GridError::Invalid(format!(
                    "site {name} of round {round_id} is {} already",
                    state.as_str()
                )));
            }
            picked.push((name, id));
        }
        if round.state == RoundState::Done {
            let mut r = round.clone();
            r.state = RoundState::Running;
            r.finished_ms = None;
            self.writes.put_round(&r);
            self.rounds.insert(round_id, r);
        }
        // Hosts are told work is waiting (`Shared::work_hint`).
        self.rounds_changed += 1;
        for (_, id) in &picked {
            let Some(job) = self.jobs.get_mut(id) else {
                continue;
            };
            let old = job.clone();
            // Sized afresh from its seed: what the kept result scanned, or
            // (a job that failed) what was left plus its parts.
            let parts: u64 = old.segments.iter().map(|s| s.summary.pages).sum();
            job.est_pages = match &old.result {
                Some(r) => {
                    job.size_known = true;
                    (parts + r.summary.pages).max(1) as f64
                }
                None => (old.est_pages + parts as f64).max(1.0),
            };
            job.state = JobState::Queued;
            job.result = None;
            job.segments.clear();
            job.chain_sketch.clear();
            job.candidates.clear();
            job.chain += 1;
            job.validation = JobValidation::None;
            job.batch_host = None;
            super::push_reason(job, format!("scanned again at the admin's request: {why}"));
            let job = job.clone();
            self.writes.put_job(job);
            self.handed_from.remove(id);
            // The kept result's files (other candidates' went when it was
            // kept, or when the job failed).
            self.remove_chain_files(&old.segments, old.result.as_ref());
            self.reindex(*id);
        }
        self.check_derived();
        tracing::info!(
            round = round_id,
            now_ms,
            "{} sites queued to be scanned again: {why}",
            picked.len()
        );
        Ok(picked.into_iter().map(|(s, _)| s).collect())
    }

    /// The state of round `id` (`None`: no such round), without copying it.
    pub fn round_state(&self, id: u64) -> Option<RoundState> {
        self.rounds.get(&id).map(|r| r.state)
    }

    pub fn rounds(&self) -> Vec<RoundRecord> {
        self.rounds.values().cloned().collect()
    }

    pub fn round(&self, id: u64) -> Result<(RoundRecord, Vec<JobRecord>), GridError> {
        let r = self.rounds.get(&id).ok_or(GridError::UnknownRound(id))?;
        let jobs = r
            .job_ids
            .iter()
            .filter_map(|j| self.jobs.get(j).cloned())
            .collect();
        Ok((r.clone(), jobs))
    }

    /// A round and its jobs, borrowed where they are kept (no copy): for
    /// summaries built under the lock.
    pub fn round_refs(&self, id: u64) -> Option<(&RoundRecord, Vec<&JobRecord>)> {
        let r = self.rounds.get(&id)?;
        let jobs = r.job_ids.iter().filter_map(|j| self.jobs.get(j)).collect();
        Some((r, jobs))
    }

    /// The rounds in effect, for the about page: running ones, and
    /// repeating ones waiting for their next scan.
    pub fn rounds_in_effect(&self) -> impl Iterator<Item = &RoundRecord> {
        self.rounds.values().filter(|r| {
            r.state == RoundState::Running
                || (r.state == RoundState::Done && r.every_ms.is_some() && r.next_round.is_none())
        })
    }

    /// Whether more work may come soon: a round is running, or a repeating
    /// round's next scan starts within [`REPEAT_SOON_MS`] (so `run --once`
    /// clients stay for it instead of leaving between two scans).
    pub(super) fn rounds_open(&self, now_ms: u64) -> bool {
        self.rounds.values().any(|r| {
            r.state == RoundState::Running
                || (r.state == RoundState::Done
                    && r.next_round.is_none()
                    && r.every_ms.is_some_and(|every| {
                        r.created_ms.saturating_add(every) <= now_ms.saturating_add(REPEAT_SOON_MS)
                    }))
        })
    }

    /// Mark the round done once every job is final.
    pub(super) fn check_round_done(&mut self, round_id: u64, now_ms: u64) -> Result<(), GridError> {
        let Some(round) = self.rounds.get(&round_id) else {
            return Ok(());
        };
        if round.state != RoundState::Running {
            return Ok(());
        }
        let all_final = self
            .open
            .get(&round_id)
            .is_none_or(|o| o.queue.is_empty() && o.settling.is_empty() && o.running.is_empty());
        if all_final {
            self.open.remove(&round_id);
            let mut r = round.clone();
            r.state = RoundState::Done;
            r.finished_ms = Some(now_ms);
            let complete = r
                .job_ids
                .iter()
                .filter_map(|j| self.jobs.get(j))
                .filter(|j| j.completeness().natural_end)
                .count();
            tracing::info!(
                round = round_id,
                "round over: {complete} of {} sites complete",
                r.job_ids.len()
            );
            self.writes.put_round(&r);
            self.rounds.insert(round_id, r);
            self.close_round_links(round_id);
        }
        Ok(())
    }

    /// Start the next scan of every repeating round that is over and whose
    /// period has passed. Returns the new rounds' ids.
    pub fn repeat_due_rounds(&mut self, now_ms: u64) -> Result<Vec<u64>, GridError> {
        if self.sites.is_empty() {
            return Ok(Vec::new());
        }
        let due: Vec<(u64, RoundParams, u64)> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Done && r.next_round.is_none())
            .filter_map(|r| {
                let every = r.every_ms?;
                (now_ms >= r.created_ms.saturating_add(every))
                    .then(|| (r.id, r.params.clone(), every))
            })
            .collect();
        let mut started = Vec::with_capacity(due.len());
        for (id, params, every) in due {
            let new = self.start_round_every(params, Some(every), now_ms)?;
            if let Some(r) = self.rounds.get_mut(&id) {
                r.next_round = Some(new);
                let r = r.clone();
                self.writes.put_round(&r);
            }
            started.push(new);
        }
        Ok(started)
    }
}

#[cfg(test)]
mod tests;
