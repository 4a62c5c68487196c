//! The server's records: sites, rounds, jobs (with their attempts), hosts and
//! invites. Plain data, stored by [`crate::store`] and changed by [`crate::grid`].

use beebot_shared::linkfile::ScanSummary;
use beebot_shared::proto::HostInfo;
use beebot_shared::scope::Scope;
use serde::{Deserialize, Serialize};

/// Figures of a site's last finished scan: the scheduler's size estimate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteStats {
    pub round_id: u64,
    pub pages: u64,
    pub bytes: u64,
    pub links: u64,
    pub seconds: f64,
}

/// One website of the target set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteRecord {
    pub host: String,
    pub added_ms: u64,
    pub last_scan: Option<SiteStats>,
}

/// Settings of one round, fixed when it starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundParams {
    pub policy: String,
    pub max_pages: u32,
    pub max_depth: u32,
    pub delay_ms: u64,
    pub scope: Scope,
    pub max_page_bytes: u64,
    /// Longest one scan may run, seconds.
    pub max_seconds: u64,
    /// Deadlines are bounded to `[deadline_min_s, deadline_max_s]` after issue.
    pub deadline_min_s: u64,
    pub deadline_max_s: u64,
    /// Failed or expired attempts after which a job is marked failed.
    pub max_attempts: u32,
    /// Longest robots.txt Crawl-delay the round honours, ms.
    pub max_crawl_delay_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RoundState {
    Running,
    Done,
    Cancelled,
}

impl RoundState {
    pub fn as_str(self) -> &'static str {
        match self {
            RoundState::Running => "running",
            RoundState::Done => "done",
            RoundState::Cancelled => "cancelled",
        }
    }
}

/// One scan of the target set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    pub id: u64,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    pub params: RoundParams,
    pub state: RoundState,
    pub job_ids: Vec<u64>,
    /// `round start --every`: the next scan starts once this one is over and
    /// this long has passed since it started.
    pub every_ms: Option<u64>,
    /// The round started as this one's repetition.
    pub next_round: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptState {
    Running,
    /// The deadline passed without a result.
    Expired,
    Done,
    /// The host gave the unit back or its result was refused.
    Failed(String),
    /// The host no longer holds the unit (revoked, left, or lost it).
    Released,
    /// Another copy finished first, or the round was cancelled.
    Aborted,
}

/// One work unit: a job as sent to one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub unit_id: u64,
    pub host_id: u64,
    pub issued_ms: u64,
    pub deadline_ms: u64,
    /// The first deadline's distance from issue: extensions add this much, up
    /// to four windows after issue in all.
    pub window_ms: u64,
    pub state: AttemptState,
    pub pages: u64,
    pub links: u64,
    /// A copy (a hedge or a tail replica) of a job already running elsewhere.
    pub replica: bool,
    /// First and latest progress reports (0: none yet): the scan's pace.
    pub first_report_ms: u64,
    pub first_report_pages: u64,
    pub last_report_ms: u64,
}

/// The accepted result of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub unit_id: u64,
    pub host_id: u64,
    pub summary: ScanSummary,
    /// Link file path relative to the data dir.
    pub file: String,
    pub accepted_ms: u64,
}

/// One site in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub round_id: u64,
    pub site: String,
    pub state: JobState,
    pub attempts: Vec<Attempt>,
    pub result: Option<JobResult>,
    /// Why attempts failed, newest last (bounded).
    pub reasons: Vec<String>,
    /// Expected pages, fixed at round start from the site's last scan.
    pub est_pages: f64,
    /// `batch` policy: the host whose batch holds this job.
    pub batch_host: Option<u64>,
}

impl JobRecord {
    pub fn running_attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts
            .iter()
            .filter(|a| a.state == AttemptState::Running)
    }
    /// Attempts that ended without a result.
    pub fn failed_attempts(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| matches!(a.state, AttemptState::Expired | AttemptState::Failed(_)))
            .count()
    }
}

/// A reference-site benchmark result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Benchmark {
    pub pages_per_s: f64,
    pub kb_per_s: f64,
    pub slots: u32,
    pub measured_ms: u64,
}

/// One enrolled client machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    pub id: u64,
    pub key: [u8; 32],
    pub info: HostInfo,
    pub enrolled_ms: u64,
    pub last_seen_ms: u64,
    pub revoked: bool,
    pub benchmark: Option<Benchmark>,
    pub jobs_done: u64,
    pub pages_done: u64,
    pub seconds_done: f64,
    pub deadlines_missed: u64,
    pub failures: u64,
    /// Running averages over real jobs (the scheduler's speed once set).
    pub avg_pages_per_s: Option<f64>,
    pub avg_kb_per_s: Option<f64>,
    pub bytes_done: u64,
    /// Time it was away (gaps between contacts longer than the online window).
    pub offline_ms: u64,
    /// When one of its units last passed its deadline.
    pub last_missed_ms: u64,
}

/// An invite: only the token's SHA-256 is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InviteRecord {
    pub token_sha256: [u8; 32],
    pub uses_left: u32,
    pub expires_ms: u64,
    pub created_ms: u64,
}
