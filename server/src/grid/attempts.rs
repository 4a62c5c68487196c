//! Attempts: a running unit's progress (continue, extend, abort), a failure
//! reported, deadlines passed at a tick, an attempt that ended without a
//! result, and the scan state a continuation fetches.
//!
//! Invariants: an attempt's page and link counts are bounded by its unit
//! and never go back; a job whose attempts run out fails; a job whose
//! attempt ended is queued again while it has attempts left. Results are
//! not judged here ([`super::upload`], [`super::verdict`]).
//!
//! Leases: a scan not heard from for `LEASE_TAKEOVER_S` since its last report
//! (or since the grid's first tick, so a restart takes nothing away) is taken
//! back, never sooner. A unit not started is recalled once its host is silent
//! as long, charged to nobody (no missed deadline, no attempt counted).

use std::sync::Arc;

use beebot_shared::limits::{LEASE_TAKEOVER_S, MAX_LINK_RECORDS, MAX_TEXT_LEN};
use beebot_shared::proto::{ABORT_HAND_OVER, ABORT_ROUND_CANCELLED};

use super::links::LinkFiles;
use super::{push_reason, Grid, GridError};
use crate::model::*;
use crate::scheduler;

/// A kept scan state a continuation fetches, with the SHA-256 its unit
/// names: read from the grid's link-file storage outside the grid lock.
/// Two are equal when they name one file and one digest.
#[derive(Clone, Debug)]
pub struct StateFile {
    files: Arc<dyn LinkFiles>,
    /// The state's name in the link-file storage.
    pub name: String,
    /// The SHA-256 the unit names: what is read must have it.
    pub sha256: [u8; 32],
}

impl StateFile {
    /// The state's bytes as stored (not checked against [`Self::sha256`]).
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        self.files.read(&self.name)
    }

    /// Where the state is, for messages.
    pub fn location(&self) -> String {
        self.files.location(&self.name)
    }
}

impl PartialEq for StateFile {
    fn eq(&self, other: &StateFile) -> bool {
        (&self.name, self.sha256) == (&other.name, other.sha256)
    }
}

impl Eq for StateFile {}

/// What [`Grid::state_of_unit`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateAnswer {
    /// The state file to send.
    Read(StateFile),
    /// The unit is not wanted any more: the client drops it.
    Abort(String),
}

/// The answer to a progress report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressOutcome {
    Continue,
    Abort(String),
    Extend(u64),
}

/// What keeps a unit back from sleep from running again (see
/// [`Grid::progress`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct AwayBars {
    /// The host holds as many units as its slots allow.
    at_cap: bool,
    /// Another job of a site that shares a host with this one runs.
    shares_host: bool,
}

/// A progress report's `(pages, links)` of attempt `i`, bounded by what the
/// unit allows (the page cap left after the scans it continues from, at
/// most [`MAX_LINK_RECORDS`] links); a count going backwards is not
/// believed.
fn bounded_report(
    job: &JobRecord,
    i: usize,
    (pages, links): (u64, u64),
    max_pages: u64,
) -> (u64, u64) {
    let a = &job.attempts[i];
    // Pages before the unit started (its parts are its own pages).
    let own_parts = job
        .segments
        .iter()
        .filter(|s| s.unit_id == a.unit_id)
        .count();
    let pages_before = (a.resume_seq as usize)
        .saturating_sub(own_parts)
        .checked_sub(1)
        .and_then(|k| job.segments.get(k))
        .map_or(0, |s| s.pages_done);
    let pages = pages
        .min(max_pages.saturating_sub(pages_before))
        .max(a.pages);
    let links = links.min(MAX_LINK_RECORDS as u64).max(a.links);
    (pages, links)
}

/// Bodies a reported page may have read at most, full size: its own and
/// its redirect hops' (the client follows at most 5), with room for
/// robots.txt. A report of more bytes is not believed beyond it.
const MAX_BODIES_PER_PAGE: u64 = 16;

/// A progress report's bytes for attempt `i`: never fewer than it reported
/// before, never more than `pages` (already bounded) could have read.
fn bounded_bytes(job: &JobRecord, i: usize, bytes: u64, pages: u64, max_page_bytes: u64) -> u64 {
    let most = pages
        .saturating_add(1)
        .saturating_mul(max_page_bytes)
        .saturating_mul(MAX_BODIES_PER_PAGE);
    bytes.min(most).max(job.attempts[i].bytes)
}

impl Grid {
    /// Release the host's running attempts not in `keep` (all when `None`).
    pub(super) fn release_host_units(
        &mut self,
        host_id: u64,
        keep: Option<&[u64]>,
        now_ms: u64,
    ) -> Result<(), GridError> {
        let mut changed = Vec::new();
        let mut mine: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| o.jobs_on(host_id))
            .collect();
        mine.sort_unstable();
        for id in mine {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            let mut released = Vec::new();
            for a in job.attempts.iter_mut() {
                if a.host_id == host_id
                    && a.state == AttemptState::Running
                    && !keep.is_some_and(|k| k.contains(&a.unit_id))
                {
                    a.state = AttemptState::Released;
                    released.push(a.unit_id);
                }
            }
            for unit in &released {
                push_reason(job, format!("host {host_id} no longer holds unit {unit}"));
            }
            if !released.is_empty() {
                changed.push(job.id);
            }
        }
        // Each ended without a result: requeued, or failed once its
        // attempts ran out.
        for id in changed {
            self.after_attempt_ended(id, now_ms)?;
        }
        Ok(())
    }

    /// A running unit reports progress without its bytes (`Progress`).
    pub fn progress(
        &mut self,
        host_id: u64,
        unit_id: u64,
        pages: u64,
        links: u64,
        now_ms: u64,
    ) -> Result<ProgressOutcome, GridError> {
        self.report(host_id, unit_id, (pages, links, None), now_ms)
    }

    /// A running unit reports progress: `(pages, links, bytes)` from its
    /// start (`bytes` `None`: a client that does not count them).
    pub fn report(
        &mut self,
        host_id: u64,
        unit_id: u64,
        (pages, links, bytes): (u64, u64, Option<u64>),
        now_ms: u64,
    ) -> Result<ProgressOutcome, GridError> {
        self.active_host(host_id, now_ms)?;
        let Some(job) = self.job_of_unit(unit_id) else {
            return Ok(ProgressOutcome::Abort("unknown unit".into()));
        };
        if let Some(abort) = self.progress_unwanted(job) {
            return Ok(abort);
        }
        let job_id = job.id;
        let (max_pages, max_page_bytes) = self.rounds.get(&job.round_id).map_or((0, 0), |r| {
            (u64::from(r.params.max_pages), r.params.max_page_bytes)
        });
        let away = self.away_bars(job, unit_id, host_id);
        let Some(job) = self.jobs.get(&job_id) else {
            return Ok(ProgressOutcome::Abort("unknown unit".into()));
        };
        let Some(i) = job
            .attempts
            .iter()
            .position(|a| a.unit_id == unit_id && a.host_id == host_id)
        else {
            return Ok(ProgressOutcome::Abort(
                "unit belongs to another host".into(),
            ));
        };
        let report = bounded_report(job, i, (pages, links), max_pages);
        let bytes = bytes.map(|b| bounded_bytes(job, i, b, report.0, max_page_bytes));
        if let Some(answer) = self.progress_of_stopped(job_id, i, report, away, now_ms)? {
            return Ok(answer);
        }
        if let Some(b) = bytes {
            // A live figure (the dashboard's KB/s), not a record: kept in
            // memory, written with the job when something else is.
            self.job_mut(job_id)?.attempts[i].bytes = b;
        }
        let handed_over = self.hand_overs.contains_key(&unit_id);
        self.progress_of_running(job_id, i, report, handed_over, now_ms)
    }

    /// The abort a progress report of `job` hears when its round or the job
    /// is over (cancelled, ended, done elsewhere, failed or excluded).
    fn progress_unwanted(&self, job: &JobRecord) -> Option<ProgressOutcome> {
        match self.rounds.get(&job.round_id).map(|r| r.state) {
            Some(RoundState::Running) => {}
            Some(RoundState::Cancelled) => {
                return Some(ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into()))
            }
            _ => return Some(ProgressOutcome::Abort("round ended".into())),
        }
        match job.state {
            JobState::Done => Some(ProgressOutcome::Abort("job done elsewhere".into())),
            JobState::Failed if self.excluded_by(&job.site).is_some() => {
                Some(ProgressOutcome::Abort("site excluded".into()))
            }
            JobState::Failed => Some(ProgressOutcome::Abort("job failed".into())),
            JobState::Cancelled => Some(ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into())),
            JobState::Queued | JobState::Running => None,
        }
    }

    /// What keeps a unit back from sleep (its attempt expired or released)
    /// from running again: the host holds its cap of units, or another
    /// job of a site that shares a host with this one runs.
    fn away_bars(&self, job: &JobRecord, unit_id: u64, host_id: u64) -> AwayBars {
        let asleep = job.attempts.iter().any(|a| {
            a.unit_id == unit_id
                && matches!(
                    a.state,
                    AttemptState::Expired | AttemptState::Released | AttemptState::Recalled
                )
        });
        AwayBars {
            at_cap: asleep
                && self
                    .hosts
                    .get(&host_id)
                    .is_some_and(|_| self.running_units_of(host_id) >= self.units_cap(host_id)),
            shares_host: asleep && self.meets_running_job(job),
        }
    }

    /// A progress report of attempt `i` of a job that is not running: the
    /// abort it hears, or the scan going on with a fresh deadline when it
    /// is back from sleep and nobody took the job over. `None` when the
    /// attempt runs.
    fn progress_of_stopped(
        &mut self,
        job_id: u64,
        i: usize,
        (pages, links): (u64, u64),
        away: AwayBars,
        now_ms: u64,
    ) -> Result<Option<ProgressOutcome>, GridError> {
        let job = self.job_mut(job_id)?;
        let (seq, chain) = (job.attempts[i].resume_seq, job.attempts[i].chain);
        let behind = job.is_behind(&job.attempts[i]);
        let other_copy = job.attempts.iter().enumerate().any(|(j, o)| {
            j != i && o.state == AttemptState::Running && o.resume_seq == seq && o.chain == chain
        });
        let a = &mut job.attempts[i];
        let abort = |why: &str| Ok(Some(ProgressOutcome::Abort(why.into())));
        match &a.state {
            AttemptState::Aborted | AttemptState::Partial | AttemptState::Done => {
                abort("another copy's scan went on further")
            }
            AttemptState::Failed(_) => abort("the unit was given back"),
            _ if behind => {
                // Another copy's scan already went on from where this one started.
                let was_running = a.state == AttemptState::Running;
                a.state = AttemptState::Aborted;
                let job = job.clone();
                self.counters.units_aborted += u64::from(was_running);
                self.writes.put_job(job.clone());
                if was_running {
                    self.after_attempt_ended(job_id, now_ms)?;
                }
                self.reindex(job_id);
                abort("another copy's scan went on further")
            }
            // The job went to another host while this one was away: one
            // scan of a site at a time.
            AttemptState::Expired | AttemptState::Released | AttemptState::Recalled
                if other_copy =>
            {
                abort("the scan was given to another host while this one was away")
            }
            AttemptState::Expired | AttemptState::Released | AttemptState::Recalled
                if away.shares_host =>
            {
                abort("another scan of the site's host started while this one was away")
            }
            AttemptState::Expired | AttemptState::Released | AttemptState::Recalled
                if away.at_cap =>
            {
                abort("the host holds as many units as its slots allow: this one was given up")
            }
            AttemptState::Expired | AttemptState::Released | AttemptState::Recalled => {
                // Back from sleep or a lost connection, and nobody took the
                // job over: the scan goes on, with a fresh deadline.
                a.state = AttemptState::Running;
                a.pages = pages;
                a.links = links;
                a.last_report_ms = now_ms;
                let d = now_ms.saturating_add(a.window_ms).max(a.deadline_ms);
                a.deadline_ms = d;
                job.state = JobState::Running;
                let job = job.clone();
                self.writes.put_job(job);
                self.reindex(job_id);
                self.check_derived();
                Ok(Some(ProgressOutcome::Extend(d)))
            }
            AttemptState::Running => Ok(None),
        }
    }

    /// A progress report of running attempt `i`: its counts noted, the
    /// hand-over asked of it (`handed_over`), or its deadline extended while
    /// its scan makes progress.
    fn progress_of_running(
        &mut self,
        job_id: u64,
        i: usize,
        (pages, links): (u64, u64),
        handed_over: bool,
        now_ms: u64,
    ) -> Result<ProgressOutcome, GridError> {
        let job = self.job_mut(job_id)?;
        let a = &mut job.attempts[i];
        if a.first_report_ms == 0 {
            a.first_report_ms = now_ms;
            a.first_report_pages = pages;
        }
        let progressed = pages > a.pages || a.last_report_ms == 0;
        a.last_report_ms = a.last_report_ms.max(now_ms);
        a.pages = pages;
        a.links = links;
        // Whether its scan could be handed over follows its pages.
        self.reindex(job_id);
        let job = self.job_mut(job_id)?;
        let a = &mut job.attempts[i];
        if handed_over {
            // Another host takes the scan over from its frontier: this one
            // stops at a page boundary and uploads what it did.
            return Ok(ProgressOutcome::Abort(ABORT_HAND_OVER.into()));
        }
        // Extend a unit whose scan still makes progress in the last half of its
        // window: deadlines find silent hosts, they never cut a live scan.
        if let Some(d) =
            scheduler::extended_deadline(a.deadline_ms, a.window_ms, now_ms, progressed)
        {
            a.deadline_ms = d;
            let job = job.clone();
            self.writes.put_job(job);
            return Ok(ProgressOutcome::Extend(d));
        }
        Ok(ProgressOutcome::Continue)
    }

    /// A host gives a unit back without result.
    pub fn fail(
        &mut self,
        host_id: u64,
        unit_id: u64,
        reason: &str,
        now_ms: u64,
    ) -> Result<(), GridError> {
        self.active_host(host_id, now_ms)?;
        let Some(&job_id) = self.units.get(&unit_id) else {
            return Ok(());
        };
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(());
        };
        let mut found = false;
        for a in job.attempts.iter_mut() {
            if a.unit_id == unit_id && a.host_id == host_id && a.state == AttemptState::Running {
                a.state = AttemptState::Failed(reason.chars().take(MAX_TEXT_LEN).collect());
                found = true;
            }
        }
        if found {
            push_reason(job, format!("host {host_id}: {reason}"));
            self.after_attempt_ended(job_id, now_ms)?;
            self.host_changed(host_id);
            if let Some(h) = self.hosts.get_mut(&host_id) {
                h.failures += 1;
                let h = h.clone();
                self.writes.put_host(&h);
            }
        }
        Ok(())
    }

    /// After an attempt ended without result: requeue, or fail the job.
    pub(super) fn after_attempt_ended(
        &mut self,
        job_id: u64,
        now_ms: u64,
    ) -> Result<(), GridError> {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(());
        };
        if job.state.is_final() {
            return Ok(());
        }
        let max_attempts = self
            .rounds
            .get(&job.round_id)
            .map(|r| r.params.max_attempts)
            .unwrap_or(1);
        if job.running_attempts().next().is_none() {
            if job.failed_attempts() >= max_attempts as usize {
                job.state = JobState::Failed;
            } else {
                job.state = JobState::Queued;
            }
        }
        let round_id = job.round_id;
        let job = job.clone();
        if job.state.is_final() {
            self.drop_states(&job);
        }
        self.writes.put_job(job);
        self.reindex(job_id);
        self.check_round_done(round_id, now_ms)
    }

    /// Expire every unit whose deadline has passed, take back every scan
    /// whose lease lapsed (not heard from for [`LEASE_TAKEOVER_S`] since
    /// its last progress report), and recall every unit not started whose
    /// host was not heard from for as long (both counted from the grid's
    /// first tick at the earliest, so a restart takes nothing away). Its
    /// job goes on elsewhere (from its last uploaded part), and a host that
    /// is back before another took it goes on. Returns how many.
    pub fn tick(&mut self, now_ms: u64) -> Result<usize, GridError> {
        let mut expired: Vec<(u64, u64, &str)> = Vec::new(); // (job, host, why)
        let mut recalled: Vec<(u64, u64)> = Vec::new(); // (job, host)
        let leases_from = *self.leases_from_ms.get_or_insert(now_ms);
        let takeover_ms = LEASE_TAKEOVER_S * 1000;
        let hosts = &self.hosts;
        for id in self.running_job_ids() {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            for a in job.attempts.iter_mut() {
                if a.state != AttemptState::Running {
                    continue;
                }
                if a.deadline_ms <= now_ms {
                    a.state = AttemptState::Expired;
                    self.counters.units_expired += 1;
                    expired.push((job.id, a.host_id, "deadline passed"));
                    continue;
                }
                // A scan that reported holds its site only while it goes
                // on reporting (its host stops crawling at LEASE_S); a unit
                // not started, while its host is heard from (its client
                // starts none without an answer within LEASE_S).
                let started = a.first_report_ms != 0;
                let heard_ms = if started {
                    a.last_report_ms
                } else {
                    let seen = hosts.get(&a.host_id).map_or(0, |h| h.last_seen_ms);
                    seen.max(a.issued_ms)
                };
                if now_ms < heard_ms.max(leases_from).saturating_add(takeover_ms) {
                    continue;
                }
                if started {
                    a.state = AttemptState::Expired;
                    self.counters.units_expired += 1;
                    expired.push((job.id, a.host_id, "not heard from: its scan was taken back"));
                } else {
                    a.state = AttemptState::Recalled;
                    self.counters.units_recalled += 1;
                    recalled.push((job.id, a.host_id));
                }
            }
        }
        for &(job_id, host_id, why) in &expired {
            if let Some(job) = self.jobs.get_mut(&job_id) {
                push_reason(job, format!("host {host_id}: {why}"));
            }
            self.host_changed(host_id);
            if let Some(h) = self.hosts.get_mut(&host_id) {
                h.deadlines_missed += 1;
                h.last_missed_ms = h.last_missed_ms.max(now_ms);
                let h = h.clone();
                self.writes.put_host(&h);
            }
            self.after_attempt_ended(job_id, now_ms)?;
        }
        for &(job_id, host_id) in &recalled {
            if let Some(job) = self.jobs.get_mut(&job_id) {
                push_reason(
                    job,
                    format!("host {host_id}: not heard from: its unit, not started, was recalled"),
                );
            }
            self.host_changed(host_id);
            self.after_attempt_ended(job_id, now_ms)?;
        }
        self.end_finished_rounds(now_ms)?;
        self.check_derived();
        Ok(expired.len() + recalled.len())
    }

    /// End every running round whose jobs are all final: one whose last
    /// job's record was written while the write of the round's end failed
    /// (a full disk, a kill between the two) is still running on disk and
    /// would otherwise wait for ever, nothing left to hand out or take.
    fn end_finished_rounds(&mut self, now_ms: u64) -> Result<(), GridError> {
        let over: Vec<u64> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .filter(|r| {
                self.open.get(&r.id).is_none_or(|o| {
                    o.queue.is_empty() && o.settling.is_empty() && o.running.is_empty()
                })
            })
            .map(|r| r.id)
            .collect();
        for round_id in over {
            self.check_round_done(round_id, now_ms)?;
        }
        Ok(())
    }

    /// The units of `held` (named in a work request of `host_id`) that were
    /// recalled while the host was away: each goes on as the host's again
    /// when nobody took its job meanwhile, else the host drops it
    /// (returned).
    pub(super) fn reclaim_recalled(
        &mut self,
        host_id: u64,
        held: &[u64],
        now_ms: u64,
    ) -> Result<Vec<u64>, GridError> {
        let mut dropped = Vec::new();
        for &unit_id in held {
            let Some(job) = self.job_of_unit(unit_id) else {
                continue;
            };
            let Some(i) = job.attempts.iter().position(|a| {
                a.unit_id == unit_id && a.host_id == host_id && a.state == AttemptState::Recalled
            }) else {
                continue;
            };
            let job_id = job.id;
            let away = self.away_bars(job, unit_id, host_id);
            let outcome = match self.progress_unwanted(job) {
                Some(abort) => abort,
                None => {
                    let (pages, links) = (job.attempts[i].pages, job.attempts[i].links);
                    self.progress_of_stopped(job_id, i, (pages, links), away, now_ms)?
                        .unwrap_or(ProgressOutcome::Continue)
                }
            };
            if matches!(outcome, ProgressOutcome::Abort(_)) {
                dropped.push(unit_id);
            }
        }
        Ok(dropped)
    }

    /// Where the scan state a continuation unit of `host_id` starts from
    /// is (read outside the grid lock), with its expected SHA-256; or why
    /// the unit is not wanted any more (its job is over, or went on from
    /// another copy), so the host drops it.
    pub fn state_of_unit(&self, host_id: u64, unit_id: u64) -> Result<StateAnswer, GridError> {
        let Some(job) = self.job_of_unit(unit_id) else {
            return Ok(StateAnswer::Abort(format!("unknown unit {unit_id}")));
        };
        let Some(a) = job
            .attempts
            .iter()
            .find(|a| a.unit_id == unit_id && a.host_id == host_id)
        else {
            return Ok(StateAnswer::Abort(format!(
                "unit {unit_id} was not issued to host {host_id}"
            )));
        };
        if self.rounds.get(&job.round_id).map(|r| r.state) == Some(RoundState::Cancelled) {
            return Ok(StateAnswer::Abort(ABORT_ROUND_CANCELLED.into()));
        }
        if job.state.is_final()
            || self.rounds.get(&job.round_id).map(|r| r.state) != Some(RoundState::Running)
        {
            return Ok(StateAnswer::Abort(format!(
                "the job of unit {unit_id} is over"
            )));
        }
        if job.is_behind(a) || a.state == AttemptState::Aborted {
            return Ok(StateAnswer::Abort(
                "another copy's scan went on further".into(),
            ));
        }
        let Some(seg) = (a.resume_seq as usize)
            .checked_sub(1)
            .and_then(|i| job.segments.get(i))
        else {
            return Ok(StateAnswer::Abort(format!(
                "unit {unit_id} starts from the seed, not a scan state"
            )));
        };
        Ok(StateAnswer::Read(StateFile {
            files: self.links.clone(),
            name: seg.state_file.clone(),
            sha256: seg.state_sha256,
        }))
    }
}

#[cfg(test)]
mod tests;
