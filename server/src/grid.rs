//! The grid's state machine: sites, rounds, jobs, hosts and invites in memory,
//! written through to the [`Store`] and flushed before any answer leaves.
//!
//! Every method takes the time (`now_ms`, Unix milliseconds) as an argument.
//! The QUIC and admin layers call it under one lock (see [`crate::Shared`]).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use beebot_shared::limits::{
    INVITE_TOKEN_LEN, MAX_DELAY_MS, MAX_PAGES_PER_SITE, MAX_REASONS_PER_JOB, MAX_SITES,
    MAX_TEXT_LEN, MAX_UNITS_PER_REPLY,
};
use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::proto::HostInfo;
use beebot_shared::sign::{self, SignedUnit, UnitLimits, WorkUnit};
use beebot_shared::util::sha256;

use crate::model::*;
use crate::scheduler::{self, DeadlineRule, JobView, WorkAsk};
use crate::store::{Store, StoreError};

/// How long a host with nothing to do waits before asking again while a round
/// still has jobs running elsewhere (they may come back after a deadline).
pub const RETRY_WHILE_ROUND_OPEN_S: u64 = 5;
/// How long a host waits when no round is open.
pub const RETRY_IDLE_S: u64 = 60;

/// Errors of grid operations, each one a clear answer to the caller.
#[derive(Debug, thiserror::Error)]
pub enum GridError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot write link file: {0}")]
    Io(#[from] std::io::Error),
    #[error("unknown host {0}")]
    UnknownHost(u64),
    #[error("host {0} is revoked")]
    Revoked(u64),
    #[error("invite is unknown, expired or used up")]
    BadInvite,
    #[error("this host key is already enrolled as host {0}")]
    KeyEnrolled(u64),
    #[error("unknown round {0}")]
    UnknownRound(u64),
    #[error("{0}")]
    Invalid(String),
    #[error("cannot sign unit: {0}")]
    Sign(String),
}

/// A work request as the grid sees it.
#[derive(Clone, Debug)]
pub struct WorkRequest {
    pub want_seconds: u64,
    pub free_slots: u32,
    pub units_held: Vec<u64>,
}

/// The answer to a work request.
#[derive(Clone, Debug)]
pub struct WorkReply {
    pub units: Vec<SignedUnit>,
    pub retry_after_s: Option<u64>,
    pub rounds_open: bool,
}

/// The answer to an upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadOutcome {
    Accepted,
    Duplicate,
    Rejected(String),
}

/// The answer to a progress report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressOutcome {
    Continue,
    Abort(String),
    Extend(u64),
}

/// Settings the grid needs from the config.
#[derive(Clone, Debug)]
pub struct GridSettings {
    pub user_agent: String,
    pub deadline_slack: f64,
    pub deadline_grace_s: u64,
}

/// Counters for `status`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GridStatus {
    pub sites: usize,
    pub hosts: usize,
    pub hosts_revoked: usize,
    pub rounds_running: usize,
    pub jobs_queued: usize,
    pub jobs_running: usize,
    pub jobs_done: usize,
    pub jobs_failed: usize,
}

/// The grid: all state, written through to the store.
pub struct Grid {
    store: Store,
    links_dir: PathBuf,
    project_key: SigningKey,
    settings: GridSettings,
    sites: BTreeMap<String, SiteRecord>,
    rounds: BTreeMap<u64, RoundRecord>,
    jobs: BTreeMap<u64, JobRecord>,
    hosts: BTreeMap<u64, HostRecord>,
    invites: HashMap<[u8; 32], InviteRecord>,
    /// unit id → job id
    units: HashMap<u64, u64>,
}

fn push_reason(job: &mut JobRecord, reason: String) {
    let mut r = reason;
    r.truncate(MAX_TEXT_LEN);
    if job.reasons.len() >= MAX_REASONS_PER_JOB {
        job.reasons.remove(0);
    }
    job.reasons.push(r);
}

/// Write `data` to `path` durably: temporary name, fsync, rename, fsync the dir.
pub fn write_durable(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent"))?;
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    fs::File::open(dir)?.sync_all()?;
    Ok(())
}

impl Grid {
    /// Load the grid from its store.
    pub fn open(
        store: Store,
        links_dir: PathBuf,
        project_key: SigningKey,
        settings: GridSettings,
    ) -> Result<Grid, GridError> {
        let mut g = Grid {
            links_dir,
            project_key,
            settings,
            sites: BTreeMap::new(),
            rounds: BTreeMap::new(),
            jobs: BTreeMap::new(),
            hosts: BTreeMap::new(),
            invites: HashMap::new(),
            units: HashMap::new(),
            store,
        };
        for s in g.store.sites()? {
            g.sites.insert(s.host.clone(), s);
        }
        for r in g.store.rounds()? {
            g.rounds.insert(r.id, r);
        }
        for j in g.store.jobs()? {
            for a in &j.attempts {
                g.units.insert(a.unit_id, j.id);
            }
            g.jobs.insert(j.id, j);
        }
        for h in g.store.hosts()? {
            g.hosts.insert(h.id, h);
        }
        for i in g.store.invites()? {
            g.invites.insert(i.token_sha256, i);
        }
        Ok(g)
    }

    pub fn project_public_key(&self) -> [u8; 32] {
        self.project_key.verifying_key().to_bytes()
    }

    // ---- sites ----

    /// Add sites (already parsed to hosts). Returns how many were new.
    pub fn add_sites(&mut self, hosts: &[String], now_ms: u64) -> Result<usize, GridError> {
        if self.sites.len() + hosts.len() > MAX_SITES {
            return Err(GridError::Invalid(format!(
                "the target set may hold at most {MAX_SITES} sites"
            )));
        }
        let mut added = 0;
        for h in hosts {
            if self.sites.contains_key(h) {
                continue;
            }
            let rec = SiteRecord {
                host: h.clone(),
                added_ms: now_ms,
                last_scan: None,
            };
            self.store.put_site(&rec)?;
            self.sites.insert(h.clone(), rec);
            added += 1;
        }
        self.store.flush()?;
        Ok(added)
    }

    pub fn remove_site(&mut self, host: &str) -> Result<bool, GridError> {
        let removed = self.sites.remove(host).is_some();
        if removed {
            self.store.remove_site(host)?;
            self.store.flush()?;
        }
        Ok(removed)
    }

    pub fn sites(&self) -> Vec<SiteRecord> {
        self.sites.values().cloned().collect()
    }

    // ---- invites and hosts ----

    /// Make an invite; returns the secret token (only its hash is kept).
    pub fn create_invite(
        &mut self,
        uses: u32,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<u8>, GridError> {
        if uses == 0 {
            return Err(GridError::Invalid(
                "an invite needs at least one use".into(),
            ));
        }
        let token: Vec<u8> = (0..INVITE_TOKEN_LEN)
            .map(|_| rand::random::<u8>())
            .collect();
        let rec = InviteRecord {
            token_sha256: sha256(&token),
            uses_left: uses,
            expires_ms,
            created_ms: now_ms,
        };
        self.store.put_invite(&rec)?;
        self.store.flush()?;
        self.invites.insert(rec.token_sha256, rec);
        Ok(token)
    }

    /// Enrol a host whose key proof was already checked by the caller.
    pub fn enrol(
        &mut self,
        token: &[u8],
        host_key: [u8; 32],
        mut info: HostInfo,
        now_ms: u64,
    ) -> Result<u64, GridError> {
        let hash = sha256(token);
        let inv = self.invites.get(&hash).ok_or(GridError::BadInvite)?;
        if inv.uses_left == 0 || inv.expires_ms <= now_ms {
            return Err(GridError::BadInvite);
        }
        if let Some(h) = self.hosts.values().find(|h| h.key == host_key) {
            return Err(GridError::KeyEnrolled(h.id));
        }
        let mut inv = inv.clone();
        inv.uses_left -= 1;
        info.name.truncate(MAX_TEXT_LEN);
        info.os.truncate(MAX_TEXT_LEN);
        info.client_version.truncate(MAX_TEXT_LEN);
        let id = self.store.next_id()?;
        let host = HostRecord {
            id,
            key: host_key,
            info,
            enrolled_ms: now_ms,
            last_seen_ms: now_ms,
            revoked: false,
            benchmark: None,
            jobs_done: 0,
            pages_done: 0,
            seconds_done: 0.0,
            deadlines_missed: 0,
            failures: 0,
        };
        self.store.put_invite(&inv)?;
        self.store.put_host(&host)?;
        self.store.flush()?;
        self.invites.insert(hash, inv);
        self.hosts.insert(id, host);
        Ok(id)
    }

    /// The key of an active host, for checking its proof.
    pub fn host_key(&self, host_id: u64) -> Result<[u8; 32], GridError> {
        let h = self
            .hosts
            .get(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        if h.revoked {
            return Err(GridError::Revoked(host_id));
        }
        Ok(h.key)
    }

    fn active_host(&mut self, host_id: u64, now_ms: u64) -> Result<&mut HostRecord, GridError> {
        let h = self
            .hosts
            .get_mut(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        if h.revoked {
            return Err(GridError::Revoked(host_id));
        }
        h.last_seen_ms = now_ms;
        Ok(h)
    }

    /// Note a host's successful `Hello`.
    pub fn hello(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let h = self.active_host(host_id, now_ms)?.clone();
        self.store.put_host(&h)?;
        self.store.flush()?;
        Ok(())
    }

    pub fn benchmark(
        &mut self,
        host_id: u64,
        pages_per_s: f64,
        kb_per_s: f64,
        slots: u32,
        now_ms: u64,
    ) -> Result<(), GridError> {
        if !(pages_per_s.is_finite()
            && kb_per_s.is_finite()
            && pages_per_s >= 0.0
            && kb_per_s >= 0.0)
        {
            return Err(GridError::Invalid(
                "benchmark figures must be finite and positive".into(),
            ));
        }
        let h = self.active_host(host_id, now_ms)?;
        h.benchmark = Some(Benchmark {
            pages_per_s,
            kb_per_s,
            slots: slots.min(beebot_shared::limits::MAX_SLOTS),
            measured_ms: now_ms,
        });
        let h = h.clone();
        self.store.put_host(&h)?;
        self.store.flush()?;
        Ok(())
    }

    /// Revoke a host: it can no longer connect; its running units go back to the queue.
    pub fn revoke(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let h = self
            .hosts
            .get_mut(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        h.revoked = true;
        let h = h.clone();
        self.store.put_host(&h)?;
        self.release_host_units(host_id, None, now_ms)?;
        self.store.flush()?;
        Ok(())
    }

    pub fn hosts(&self) -> Vec<HostRecord> {
        self.hosts.values().cloned().collect()
    }

    /// Release the host's running attempts not in `keep` (all when `None`).
    fn release_host_units(
        &mut self,
        host_id: u64,
        keep: Option<&[u64]>,
        _now_ms: u64,
    ) -> Result<(), GridError> {
        let mut changed = Vec::new();
        for job in self.jobs.values_mut() {
            if job.state != JobState::Running {
                continue;
            }
            let mut touched = false;
            for a in job.attempts.iter_mut() {
                if a.host_id == host_id
                    && a.state == AttemptState::Running
                    && !keep.is_some_and(|k| k.contains(&a.unit_id))
                {
                    a.state = AttemptState::Released;
                    touched = true;
                }
            }
            if touched {
                if job.running_attempts().next().is_none() {
                    job.state = JobState::Queued;
                }
                changed.push(job.id);
            }
        }
        for id in changed {
            if let Some(job) = self.jobs.get(&id) {
                self.store.put_job(job)?;
            }
        }
        Ok(())
    }

    // ---- rounds ----

    /// Start a round over the whole target set.
    pub fn start_round(&mut self, params: RoundParams, now_ms: u64) -> Result<u64, GridError> {
        if self.sites.is_empty() {
            return Err(GridError::Invalid(
                "the target set is empty: add sites first (`sites add` or `sites import`)".into(),
            ));
        }
        if scheduler::policy_by_name(&params.policy).is_none() {
            return Err(GridError::Invalid(format!(
                "unknown policy `{}` (known: {})",
                params.policy,
                scheduler::POLICY_NAMES.join(", ")
            )));
        }
        if params.max_pages == 0 || params.max_pages > MAX_PAGES_PER_SITE {
            return Err(GridError::Invalid(format!(
                "max pages must be between 1 and {MAX_PAGES_PER_SITE}"
            )));
        }
        if params.delay_ms > MAX_DELAY_MS {
            return Err(GridError::Invalid(format!(
                "delay must be at most {MAX_DELAY_MS} ms"
            )));
        }
        if params.max_attempts == 0 || params.deadline_min_s == 0 {
            return Err(GridError::Invalid(
                "max attempts and minimum deadline must be positive".into(),
            ));
        }
        let round_id = self.store.next_id()?;
        let mut job_ids = Vec::with_capacity(self.sites.len());
        for site in self.sites.keys() {
            let id = self.store.next_id()?;
            let job = JobRecord {
                id,
                round_id,
                site: site.clone(),
                state: JobState::Queued,
                attempts: Vec::new(),
                result: None,
                reasons: Vec::new(),
            };
            self.store.put_job(&job)?;
            self.jobs.insert(id, job);
            job_ids.push(id);
        }
        let round = RoundRecord {
            id: round_id,
            created_ms: now_ms,
            finished_ms: None,
            params,
            state: RoundState::Running,
            job_ids,
        };
        self.store.put_round(&round)?;
        self.store.flush()?;
        self.rounds.insert(round_id, round);
        Ok(round_id)
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
        self.store.put_round(&round)?;
        self.store.flush()?;
        Ok(())
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

    pub fn links_dir(&self) -> &Path {
        &self.links_dir
    }

    fn rounds_open(&self) -> bool {
        self.rounds.values().any(|r| r.state == RoundState::Running)
    }

    /// Mark the round done once every job is final.
    fn check_round_done(&mut self, round_id: u64, now_ms: u64) -> Result<(), GridError> {
        let Some(round) = self.rounds.get(&round_id) else {
            return Ok(());
        };
        if round.state != RoundState::Running {
            return Ok(());
        }
        let all_final = round
            .job_ids
            .iter()
            .all(|j| self.jobs.get(j).is_none_or(|j| j.state.is_final()));
        if all_final {
            let mut r = round.clone();
            r.state = RoundState::Done;
            r.finished_ms = Some(now_ms);
            self.store.put_round(&r)?;
            self.rounds.insert(round_id, r);
        }
        Ok(())
    }

    fn host_speed(&self, host_id: u64) -> Option<f64> {
        let h = self.hosts.get(&host_id)?;
        if h.jobs_done > 0 && h.seconds_done > 0.0 {
            Some(h.pages_done as f64 / h.seconds_done)
        } else {
            h.benchmark.as_ref().map(|b| b.pages_per_s)
        }
    }

    // ---- work ----

    /// Answer a host's work request.
    pub fn request_work(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        now_ms: u64,
    ) -> Result<WorkReply, GridError> {
        self.active_host(host_id, now_ms)?;
        // Units the host no longer holds go back to the queue at once.
        self.release_host_units(host_id, Some(&req.units_held), now_ms)?;

        let speed = self.host_speed(host_id);
        let mut chosen: Vec<u64> = Vec::new();
        // Rounds in start order; each with its own policy.
        let running: Vec<(u64, RoundParams)> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| (r.id, r.params.clone()))
            .collect();
        let mut free = req.free_slots.min(MAX_UNITS_PER_REPLY as u32);
        let mut want = req.want_seconds as f64;
        for (round_id, params) in &running {
            if free == 0 {
                break;
            }
            let Some(round) = self.rounds.get(round_id) else {
                continue;
            };
            let queue: Vec<JobView> = round
                .job_ids
                .iter()
                .filter_map(|id| self.jobs.get(id))
                .filter(|j| j.state == JobState::Queued)
                .map(|j| JobView {
                    job_id: j.id,
                    expected_s: scheduler::expected_seconds(
                        self.sites.get(&j.site).and_then(|s| s.last_scan.as_ref()),
                        params.max_pages,
                        speed,
                        params.delay_ms,
                    ),
                    failed_here: j.attempts.iter().any(|a| {
                        a.host_id == host_id
                            && matches!(a.state, AttemptState::Expired | AttemptState::Failed(_))
                    }),
                })
                .collect();
            let Some(policy) = scheduler::policy_by_name(&params.policy) else {
                continue;
            };
            let ask = WorkAsk {
                want_seconds: want.max(0.0) as u64,
                free_slots: free,
            };
            let picks = policy.choose(&queue, &ask, now_ms);
            for id in picks.into_iter().take(free as usize) {
                if let Some(v) = queue.iter().find(|v| v.job_id == id) {
                    want -= v.expected_s;
                    chosen.push(id);
                    free -= 1;
                }
            }
        }

        let mut units = Vec::with_capacity(chosen.len());
        for job_id in chosen {
            units.push(self.issue(job_id, host_id, speed, now_ms)?);
        }
        self.store.flush()?;
        let rounds_open = self.rounds_open();
        let retry_after_s = if !units.is_empty() {
            None
        } else if rounds_open {
            Some(RETRY_WHILE_ROUND_OPEN_S)
        } else {
            Some(RETRY_IDLE_S)
        };
        Ok(WorkReply {
            units,
            retry_after_s,
            rounds_open,
        })
    }

    /// Create, record and sign one unit of a queued job.
    fn issue(
        &mut self,
        job_id: u64,
        host_id: u64,
        speed: Option<f64>,
        now_ms: u64,
    ) -> Result<SignedUnit, GridError> {
        let unit_id = self.store.next_id()?;
        let job = self
            .jobs
            .get(&job_id)
            .ok_or_else(|| GridError::Invalid(format!("job {job_id} vanished")))?;
        let round = self
            .rounds
            .get(&job.round_id)
            .ok_or(GridError::UnknownRound(job.round_id))?;
        let p = &round.params;
        let expected = scheduler::expected_seconds(
            self.sites.get(&job.site).and_then(|s| s.last_scan.as_ref()),
            p.max_pages,
            speed,
            p.delay_ms,
        );
        let rule = DeadlineRule {
            slack: self.settings.deadline_slack,
            grace_s: self.settings.deadline_grace_s,
            min_s: p.deadline_min_s,
            max_s: p.deadline_max_s,
        };
        let deadline = scheduler::deadline_ms(now_ms, expected, &rule);
        let unit = WorkUnit {
            unit_id,
            round_id: job.round_id,
            job_id,
            host_id,
            site: job.site.clone(),
            seed_url: beebot_shared::scope::seed_url(&job.site).to_string(),
            scope: p.scope,
            limits: UnitLimits {
                max_pages: p.max_pages,
                max_depth: p.max_depth,
                delay_ms: p.delay_ms,
                max_page_bytes: p.max_page_bytes,
                max_seconds: p.max_seconds,
            },
            issued_ms: now_ms,
            deadline_ms: deadline,
            user_agent: self.settings.user_agent.clone(),
        };
        let signed = sign::sign_unit(&self.project_key, &unit)
            .map_err(|e| GridError::Sign(e.to_string()))?;
        let job = self
            .jobs
            .get_mut(&job_id)
            .ok_or_else(|| GridError::Invalid(format!("job {job_id} vanished")))?;
        job.attempts.push(Attempt {
            unit_id,
            host_id,
            issued_ms: now_ms,
            deadline_ms: deadline,
            state: AttemptState::Running,
            pages: 0,
            links: 0,
        });
        job.state = JobState::Running;
        let job = job.clone();
        self.store.put_job(&job)?;
        self.units.insert(unit_id, job_id);
        Ok(signed)
    }

    fn job_of_unit(&self, unit_id: u64) -> Option<&JobRecord> {
        self.units.get(&unit_id).and_then(|j| self.jobs.get(j))
    }

    /// A running unit reports progress.
    pub fn progress(
        &mut self,
        host_id: u64,
        unit_id: u64,
        pages: u64,
        links: u64,
        now_ms: u64,
    ) -> Result<ProgressOutcome, GridError> {
        self.active_host(host_id, now_ms)?;
        let Some(job) = self.job_of_unit(unit_id) else {
            return Ok(ProgressOutcome::Abort("unknown unit".into()));
        };
        let round_state = self.rounds.get(&job.round_id).map(|r| r.state);
        if round_state != Some(RoundState::Running) {
            return Ok(ProgressOutcome::Abort("round cancelled".into()));
        }
        if job.state == JobState::Done {
            return Ok(ProgressOutcome::Abort("job done elsewhere".into()));
        }
        let job_id = job.id;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(ProgressOutcome::Abort("unknown unit".into()));
        };
        let Some(a) = job
            .attempts
            .iter_mut()
            .find(|a| a.unit_id == unit_id && a.host_id == host_id)
        else {
            return Ok(ProgressOutcome::Abort(
                "unit belongs to another host".into(),
            ));
        };
        a.pages = pages;
        a.links = links;
        if a.state != AttemptState::Running {
            // Expired or released, but the job is still open: a late result is welcome.
            return Ok(ProgressOutcome::Continue);
        }
        // Extend a unit that is still making progress in the last half of its window,
        // up to four windows in all.
        let window = a.deadline_ms.saturating_sub(a.issued_ms);
        let cap = a.issued_ms.saturating_add(window.saturating_mul(4));
        if now_ms > a.deadline_ms.saturating_sub(window / 2) && a.deadline_ms < cap {
            a.deadline_ms = now_ms.saturating_add(window).min(cap);
            let d = a.deadline_ms;
            let job = job.clone();
            self.store.put_job(&job)?;
            self.store.flush()?;
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
        self.active_host(host_id, now_ms)?.failures += 1;
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
        }
        if let Some(h) = self.hosts.get(&host_id) {
            self.store.put_host(h)?;
        }
        self.store.flush()?;
        Ok(())
    }

    /// After an attempt ended without result: requeue, or fail the job.
    fn after_attempt_ended(&mut self, job_id: u64, now_ms: u64) -> Result<(), GridError> {
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
        self.store.put_job(&job)?;
        self.check_round_done(round_id, now_ms)
    }

    /// Expire every unit whose deadline has passed. Returns how many expired.
    pub fn tick(&mut self, now_ms: u64) -> Result<usize, GridError> {
        let mut expired: Vec<(u64, u64)> = Vec::new(); // (job, host)
        for job in self.jobs.values_mut() {
            if job.state != JobState::Running {
                continue;
            }
            for a in job.attempts.iter_mut() {
                if a.state == AttemptState::Running && a.deadline_ms <= now_ms {
                    a.state = AttemptState::Expired;
                    expired.push((job.id, a.host_id));
                }
            }
        }
        for &(job_id, host_id) in &expired {
            if let Some(job) = self.jobs.get_mut(&job_id) {
                push_reason(job, format!("host {host_id}: deadline passed"));
            }
            if let Some(h) = self.hosts.get_mut(&host_id) {
                h.deadlines_missed += 1;
                let h = h.clone();
                self.store.put_host(&h)?;
            }
            self.after_attempt_ended(job_id, now_ms)?;
        }
        if !expired.is_empty() {
            self.store.flush()?;
        }
        Ok(expired.len())
    }

    /// A host delivers a unit's result. The link file is durable before `Accepted`.
    pub fn upload(
        &mut self,
        host_id: u64,
        unit_id: u64,
        summary: ScanSummary,
        link_file: &[u8],
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        self.active_host(host_id, now_ms)?;
        let Some(&job_id) = self.units.get(&unit_id) else {
            return Ok(UploadOutcome::Rejected(format!("unknown unit {unit_id}")));
        };
        let Some(job) = self.jobs.get(&job_id) else {
            return Ok(UploadOutcome::Rejected(format!("unknown unit {unit_id}")));
        };
        if !job
            .attempts
            .iter()
            .any(|a| a.unit_id == unit_id && a.host_id == host_id)
        {
            return Ok(UploadOutcome::Rejected(format!(
                "unit {unit_id} was not issued to host {host_id}"
            )));
        }
        let round_state = self.rounds.get(&job.round_id).map(|r| r.state);
        if job.state == JobState::Done || round_state != Some(RoundState::Running) {
            // Acknowledged and dropped: the job is finished (or its round cancelled).
            return Ok(UploadOutcome::Duplicate);
        }
        let (header, records) = match linkfile::decode(link_file) {
            Ok(x) => x,
            Err(e) => {
                let reason = format!("link file refused: {e}");
                self.fail(host_id, unit_id, &reason, now_ms)?;
                return Ok(UploadOutcome::Rejected(reason));
            }
        };
        if header.unit_id != unit_id || header.round_id != job.round_id || header.site != job.site {
            let reason = "link file header does not match the unit".to_string();
            self.fail(host_id, unit_id, &reason, now_ms)?;
            return Ok(UploadOutcome::Rejected(reason));
        }
        if summary.links != records.len() as u64 {
            let reason = format!(
                "summary says {} links but the link file holds {}",
                summary.links,
                records.len()
            );
            self.fail(host_id, unit_id, &reason, now_ms)?;
            return Ok(UploadOutcome::Rejected(reason));
        }
        let rel = format!("{}/{}.lf", job.round_id, job.id);
        write_durable(&self.links_dir.join(&rel), link_file)?;

        let site = job.site.clone();
        let round_id = job.round_id;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(UploadOutcome::Rejected(format!("unknown unit {unit_id}")));
        };
        for a in job.attempts.iter_mut() {
            if a.unit_id == unit_id {
                a.state = AttemptState::Done;
                a.pages = summary.pages;
                a.links = summary.links;
            } else if a.state == AttemptState::Running {
                a.state = AttemptState::Aborted;
            }
        }
        job.state = JobState::Done;
        let seconds = summary.elapsed_ms as f64 / 1000.0;
        let stats = SiteStats {
            round_id,
            pages: summary.pages,
            bytes: summary.bytes,
            links: summary.links,
            seconds,
        };
        let pages = summary.pages;
        job.result = Some(JobResult {
            unit_id,
            host_id,
            summary,
            file: rel,
            accepted_ms: now_ms,
        });
        let job = job.clone();
        self.store.put_job(&job)?;
        if let Some(s) = self.sites.get_mut(&site) {
            s.last_scan = Some(stats);
            let s = s.clone();
            self.store.put_site(&s)?;
        }
        if let Some(h) = self.hosts.get_mut(&host_id) {
            h.jobs_done += 1;
            h.pages_done += pages;
            h.seconds_done += seconds;
            let h = h.clone();
            self.store.put_host(&h)?;
        }
        self.check_round_done(round_id, now_ms)?;
        self.store.flush()?;
        Ok(UploadOutcome::Accepted)
    }

    pub fn status(&self) -> GridStatus {
        let mut s = GridStatus {
            sites: self.sites.len(),
            hosts: self.hosts.values().filter(|h| !h.revoked).count(),
            hosts_revoked: self.hosts.values().filter(|h| h.revoked).count(),
            rounds_running: self
                .rounds
                .values()
                .filter(|r| r.state == RoundState::Running)
                .count(),
            ..Default::default()
        };
        for r in self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
        {
            for j in r.job_ids.iter().filter_map(|j| self.jobs.get(j)) {
                match j.state {
                    JobState::Queued => s.jobs_queued += 1,
                    JobState::Running => s.jobs_running += 1,
                    JobState::Done => s.jobs_done += 1,
                    JobState::Failed => s.jobs_failed += 1,
                }
            }
        }
        s
    }
}
