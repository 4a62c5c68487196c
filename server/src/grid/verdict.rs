//! Verdicts on results: a job's result concluded (kept at once, or checked
//! against another host's scan), the kept result and its files, a liar's
//! trust taken away and its other scans dropped, speeds learned from real
//! jobs.
//!
//! Invariants: a job keeps one result, and only the winner's files stay on
//! disk; a host loses its trust only when another host's scan disagrees
//! with its result and a third agrees with the other. Nothing here reads an
//! upload's bytes (see [`super::upload`]).
//!
//! It never exports a result not kept and never learns a speed from a pending
//! one. A kept result writes each host it changed once, after all of its
//! changes. A result every online host wrote part of is checked by a fresh scan
//! of its least author (`fallback_checker`), so a round never waits for a check
//! nobody may make.

use std::collections::BTreeMap;

use beebot_shared::linkfile::ScanSummary;

use super::{push_reason, Grid, GridError, PLAN_HOSTS_SEEN_WITHIN_MS};
use crate::model::*;
use crate::scheduler;
use crate::validate::{self, ValidateMode};

/// The verdicts once the result `w` of `candidates` is kept: the results
/// that agree with it are valid, the others (the minority) invalid; returns
/// the authors of results newly found invalid (sorted, once each).
fn judge_by(candidates: &mut [Candidate], w: usize) -> Vec<u64> {
    // Lent out for the comparisons (the kept result is not compared).
    let keep_sketch = std::mem::take(&mut candidates[w].sketch);
    let mut liars = Vec::new();
    for (i, c) in candidates.iter_mut().enumerate() {
        let sim = if i == w {
            1.0
        } else {
            validate::similarity(&c.sketch, &keep_sketch)
        };
        c.similarity = Some(sim);
        c.verdict = if i == w || (c.verdict != Verdict::Invalid && sim >= validate::MIN_SIMILARITY)
        {
            Verdict::Valid
        } else {
            if c.verdict != Verdict::Invalid {
                liars.extend(c.authors());
            }
            Verdict::Invalid
        };
    }
    candidates[w].sketch = keep_sketch;
    liars.sort_unstable();
    liars.dedup();
    liars
}

#[cfg(test)]
thread_local! {
    /// Set by a test to take [`fallback_checker`] out (this thread only):
    /// the fault schedule must find the round that never ended without it.
    pub(crate) static NO_FALLBACK_CHECKER: std::cell::Cell<bool> =
        const { std::cell::Cell::new(false) };
}

/// The host that scans a job under check afresh when no host online is
/// outside the authors of its results (after hand-overs every host online
/// wrote part of it, so no check could come): of the authors online with
/// no result of their own alone yet, the one whose scans make the least of
/// the job's results (the lowest id on a tie). Its fresh scan, one author
/// only, is compared with the others as any check is; when they disagree
/// and nobody else is left, the job fails with its reason. `None` while a
/// host online is outside the authors (it checks, as usual).
pub(super) fn fallback_checker(job: &JobRecord, hosts: &[scheduler::HostView]) -> Option<u64> {
    #[cfg(test)]
    if NO_FALLBACK_CHECKER.with(std::cell::Cell::get) {
        return None;
    }
    if job.candidates.is_empty() {
        return None;
    }
    let authors = job.authors();
    let online = || hosts.iter().filter(|h| h.online).map(|h| h.host_id);
    if online().any(|h| !authors.contains(&h)) {
        return None;
    }
    let mut pages: BTreeMap<u64, u64> = BTreeMap::new();
    for c in &job.candidates {
        let scans = c
            .segments
            .iter()
            .map(|s| (s.host_id, s.summary.pages))
            .chain([(c.result.host_id, c.result.summary.pages)]);
        for (host, n) in scans {
            *pages.entry(host).or_default() += n;
        }
    }
    let alone = |h: u64| job.candidates.iter().any(|c| c.authors() == [h]);
    online()
        .filter(|h| authors.contains(h) && !alone(*h))
        .min_by_key(|h| (pages.get(h).copied().unwrap_or(0), *h))
}

impl Grid {
    /// A job's chain of scans reached its natural end with `candidate`:
    /// take it (validation off, or a trusted host not drawn for a spot
    /// check), or compare it with the job's other results, and decide.
    pub(super) fn conclude(&mut self, job_id: u64, candidate: Candidate) -> Result<(), GridError> {
        let Some(job) = self.jobs.get(&job_id) else {
            return Ok(());
        };
        let mode = self
            .rounds
            .get(&job.round_id)
            .map_or(ValidateMode::Off, |r| r.params.validate);
        let needs_check = self.needs_check(job, mode, &candidate);
        let checkers_left = self.checkers_left(job, &candidate);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(());
        };
        job.candidates.push(candidate);
        let new = job.candidates.len() - 1;
        if !needs_check {
            job.candidates[new].verdict = Verdict::Unchecked;
            job.validation = if mode == ValidateMode::Off {
                JobValidation::Off
            } else {
                JobValidation::Trusted
            };
            return self.keep_result(job_id, new, &[]);
        }
        // The first earlier result this one agrees with (results found
        // invalid are not compared again).
        let agree = job.candidates[..new].iter().position(|c| {
            c.verdict != Verdict::Invalid
                && validate::similarity(&c.sketch, &job.candidates[new].sketch)
                    >= validate::MIN_SIMILARITY
        });
        if let Some(w) = agree {
            let liars = judge_by(&mut job.candidates, w);
            job.validation = JobValidation::Valid;
            return self.keep_result(job_id, w, &liars);
        }
        self.disagreed(job_id, new, checkers_left)
    }

    /// Whether a job's new result `candidate` is checked under `mode`: all
    /// are, or (adaptive) one beside other results, of an untrusted author,
    /// or drawn for a spot check.
    fn needs_check(&self, job: &JobRecord, mode: ValidateMode, candidate: &Candidate) -> bool {
        match mode {
            ValidateMode::Off => false,
            ValidateMode::All => true,
            ValidateMode::Adaptive => {
                job.candidates.iter().any(|c| c.verdict != Verdict::Invalid)
                    || !candidate.authors().iter().all(|h| self.is_trusted(*h))
                    || validate::spot_check(
                        &self.signer.spot_check_secret(),
                        job.id,
                        candidate.result.unit_id,
                        self.settings.spot_check_percent,
                    )
            }
        }
    }

    /// Whether a host heard from lately could scan the site for a check:
    /// none of the authors of the job's results or of `candidate`.
    fn checkers_left(&self, job: &JobRecord, candidate: &Candidate) -> bool {
        let now_ms = candidate.result.accepted_ms;
        let mut all_authors = job.authors();
        all_authors.extend(candidate.authors());
        self.hosts.values().any(|h| {
            !h.revoked
                && now_ms.saturating_sub(h.last_seen_ms) <= PLAN_HOSTS_SEEN_WITHIN_MS
                && !all_authors.contains(&h.id)
        })
    }

    /// The new result `new` of a job agrees with none before it: the job
    /// fails once enough results never agreed (or no host is left to scan
    /// again), else another host scans the site afresh to compare with.
    fn disagreed(&mut self, job_id: u64, new: usize, checkers_left: bool) -> Result<(), GridError> {
        let job = self.job_mut(job_id)?;
        let compared = job
            .candidates
            .iter()
            .filter(|c| c.verdict != Verdict::Invalid)
            .count();
        // (A first result waits for a host to check it, however long: the
        // admin was told at round start when there was none.)
        if compared >= validate::MAX_RESULTS_PER_JOB || (compared >= 2 && !checkers_left) {
            let n = compared;
            job.state = JobState::Failed;
            job.validation = JobValidation::Invalid;
            let why = if compared >= validate::MAX_RESULTS_PER_JOB {
                format!("the results of {n} scans by different hosts never agreed")
            } else {
                format!(
                    "the results of {n} scans by different hosts disagree, and no other \
                     host to scan it again has been heard from in a day"
                )
            };
            push_reason(job, why);
            let job = job.clone();
            self.remove_candidate_files(&job, None);
            self.writes.put_job(job.clone());
            return Ok(());
        }
        // Another host scans the site afresh to compare with.
        job.validation = JobValidation::Pending;
        job.chain += 1;
        job.state = JobState::Queued;
        job.batch_host = None;
        job.est_pages = job.candidates[new].pages().max(1) as f64;
        let job = job.clone();
        self.writes.put_job(job);
        Ok(())
    }

    /// The job is done with its result `keep`: the figures of the result's
    /// scans are learned, hosts whose results were found valid gain trust,
    /// and `liars` (authors of invalid results) lose it.
    pub(super) fn keep_result(
        &mut self,
        job_id: u64,
        keep: usize,
        liars: &[u64],
    ) -> Result<(), GridError> {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(());
        };
        // Sketches are of no more use once a result is kept (dropped
        // before anything is copied).
        for c in job.candidates.iter_mut() {
            c.sketch = Vec::new();
        }
        let kept = job.candidates[keep].clone();
        job.segments = kept.segments.clone();
        job.result = Some(kept.result.clone());
        job.state = JobState::Done;
        let round_id = job.round_id;
        let valid: Vec<Candidate> = if job.validation == JobValidation::Valid {
            job.candidates
                .iter()
                .filter(|c| c.verdict == Verdict::Valid)
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let job = job.clone();
        self.remove_candidate_files(&job, Some(keep));
        self.writes.put_job(job.clone());
        // The frontiers are of no more use.
        self.drop_states(&job);
        let delay_s = self
            .rounds
            .get(&round_id)
            .map(|r| r.params.delay_ms as f64 / 1000.0)
            .unwrap_or(0.0);
        // The site's figures for the next round: all of the kept result's scans.
        let pieces = kept.pieces();
        // (Never over a later round's: a site scanned again in an older
        // round, `round rescan`, leaves the newer figures.)
        let newer = |s: &SiteRecord| s.last_scan.as_ref().is_some_and(|l| l.round_id > round_id);
        if let Some(s) = self.sites.get_mut(&job.site).filter(|s| !newer(s)) {
            s.last_scan = Some(SiteStats {
                round_id,
                pages: pieces.iter().map(|(_, p)| p.pages).sum(),
                bytes: pieces.iter().map(|(_, p)| p.bytes).sum(),
                links: pieces.iter().map(|(_, p)| p.links).sum(),
                seconds: pieces
                    .iter()
                    .map(|(_, p)| p.elapsed_ms as f64 / 1000.0)
                    .sum(),
            });
            let s = s.clone();
            self.writes.put_site(&s);
            self.reindex_site_elsewhere(&job.site, round_id);
        }
        // Speeds are learned from results found valid or taken from trusted
        // hosts only, never from a result that waits for its check. Each
        // host changed is written once, after all of it.
        let mut changed = Vec::new();
        self.learn_from_pieces(&pieces, delay_s, true, &mut changed);
        self.credit_valid(&valid, &kept, delay_s, &mut changed);
        changed.sort_unstable();
        changed.dedup();
        for host in changed {
            if let Some(h) = self.hosts.get(&host) {
                self.writes.put_host(h);
            }
        }
        self.reindex(job_id);
        for &host in liars {
            self.distrust(host)?;
        }
        Ok(())
    }

    /// The results found `valid` are real work of their hosts (the checks
    /// beside the `kept` one teach their speeds too), and each author gains
    /// trust. The hosts changed are added to `changed`, for the caller to
    /// write.
    fn credit_valid(
        &mut self,
        valid: &[Candidate],
        kept: &Candidate,
        delay_s: f64,
        changed: &mut Vec<u64>,
    ) {
        for c in valid
            .iter()
            .filter(|c| c.result.unit_id != kept.result.unit_id)
        {
            self.learn_from_pieces(&c.pieces(), delay_s, false, changed);
        }
        for c in valid {
            for host in c.authors() {
                self.host_changed(host);
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.consecutive_valid = h.consecutive_valid.saturating_add(1);
                    h.valid_results += 1;
                    changed.push(host);
                }
            }
        }
    }

    /// A result of `host_id` was found invalid: its trust is reset, and
    /// every result of it not validated yet is invalid too: results waiting
    /// for their check (dropped, their job scanned again by others), and the
    /// scans of open jobs that continue from its segments (those jobs start
    /// over from their seed).
    pub(super) fn distrust(&mut self, host_id: u64) -> Result<(), GridError> {
        self.host_changed(host_id);
        if let Some(h) = self.hosts.get_mut(&host_id) {
            h.consecutive_valid = 0;
            h.invalid_results += 1;
            let h = h.clone();
            self.writes.put_host(&h);
        }
        let open: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| {
                o.queue
                    .iter()
                    .map(|v| v.job_id)
                    .chain(o.settling.iter().copied())
                    .chain(o.running.iter().copied())
            })
            .collect();
        for job_id in open {
            let Some(job) = self.jobs.get(&job_id) else {
                continue;
            };
            let pending_by_host = job
                .candidates
                .iter()
                .any(|c| c.verdict == Verdict::Pending && c.authors().contains(&host_id));
            let chain_by_host = job.segments.iter().any(|s| s.host_id == host_id);
            if !pending_by_host && !chain_by_host {
                continue;
            }
            let mut job = job.clone();
            if pending_by_host {
                let mut dropped = 0;
                for c in job.candidates.iter_mut() {
                    if c.verdict == Verdict::Pending && c.authors().contains(&host_id) {
                        self.remove_chain_files(&c.segments, Some(&c.result));
                        c.verdict = Verdict::Invalid;
                        c.sketch = Vec::new();
                        dropped += 1;
                    }
                }
                self.host_changed(host_id);
                if let Some(h) = self.hosts.get_mut(&host_id) {
                    h.invalid_results += dropped;
                    let h = h.clone();
                    self.writes.put_host(&h);
                }
                push_reason(
                    &mut job,
                    format!("host {host_id} was found lying: its result here is dropped"),
                );
            }
            if chain_by_host {
                self.remove_chain_files(&job.segments, None);
                job.segments.clear();
                job.chain_sketch.clear();
                job.chain += 1;
                for a in job.attempts.iter_mut() {
                    if a.state == AttemptState::Running {
                        a.state = AttemptState::Aborted;
                        self.counters.units_aborted += 1;
                    }
                }
                job.state = JobState::Queued;
                push_reason(
                    &mut job,
                    format!("host {host_id} was found lying: the scan starts over"),
                );
            }
            if job.validation == JobValidation::Pending
                && job.candidates.iter().all(|c| c.verdict == Verdict::Invalid)
            {
                job.validation = JobValidation::None;
            }
            self.writes.put_job(job.clone());
            self.jobs.insert(job_id, job);
            self.reindex(job_id);
        }
        Ok(())
    }

    /// The site's last scan changed: its queued jobs in the other running
    /// rounds are indexed again (their pace comes from it). Only when more
    /// than one round runs: O(the other rounds' open jobs).
    fn reindex_site_elsewhere(&mut self, site: &str, round_id: u64) {
        if self.open.len() < 2 {
            return;
        }
        let same: Vec<u64> = self
            .open
            .iter()
            .filter(|(r, _)| **r != round_id)
            .flat_map(|(_, o)| o.reach_of.keys().copied())
            .filter(|id| self.jobs.get(id).is_some_and(|j| j.site == site))
            .collect();
        for id in same {
            self.reindex(id);
        }
    }

    /// The hosts' figures from the scans of a result taken (`pieces`, in
    /// order: the last one's host finished the job when `job_done`). Each
    /// host learns once, from all of its pieces together: a piece ends at
    /// a part or a hand-over, whose page in flight belongs to the next, so
    /// one piece may be a page in a tenth of a second, a pace no host has.
    fn learn_from_pieces(
        &mut self,
        pieces: &[(u64, &ScanSummary)],
        delay_s: f64,
        job_done: bool,
        changed: &mut Vec<u64>,
    ) {
        let mut by_host: Vec<(u64, ScanSummary)> = Vec::new();
        for (host, s) in pieces {
            let i = match by_host.iter().position(|(h, _)| h == host) {
                Some(i) => i,
                None => {
                    by_host.push((*host, ScanSummary::default()));
                    by_host.len() - 1
                }
            };
            let sum = &mut by_host[i].1;
            sum.pages = sum.pages.saturating_add(s.pages);
            sum.bytes = sum.bytes.saturating_add(s.bytes);
            sum.elapsed_ms = sum.elapsed_ms.saturating_add(s.elapsed_ms);
        }
        let last = pieces.last().map(|(h, _)| *h);
        for (host, sum) in &by_host {
            let done = job_done && Some(*host) == last;
            self.learn_from(*host, sum, delay_s, done, changed);
        }
    }

    /// A host's figures from its scans of one result; the host is added to
    /// `changed`, for the caller to write.
    fn learn_from(
        &mut self,
        host_id: u64,
        summary: &ScanSummary,
        delay_s: f64,
        job_done: bool,
        changed: &mut Vec<u64>,
    ) {
        let (pages, bytes) = (summary.pages, summary.bytes);
        let seconds = summary.elapsed_ms as f64 / 1000.0;
        self.host_changed(host_id);
        if let Some(h) = self.hosts.get_mut(&host_id) {
            if job_done {
                h.jobs_done += 1;
            }
            h.pages_done += pages;
            h.seconds_done += seconds;
            h.bytes_done = h.bytes_done.saturating_add(bytes);
            h.avg_pages_per_s = scheduler::learn_speed(h.avg_pages_per_s, pages, seconds, delay_s);
            h.avg_kb_per_s = scheduler::learn_speed(h.avg_kb_per_s, bytes / 1024, seconds, 0.0);
            changed.push(host_id);
        }
    }
}

#[cfg(test)]
mod tests;
