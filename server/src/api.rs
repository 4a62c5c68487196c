//! JSON bodies of the admin HTTP API, shared by the handlers and the CLI.

use serde::{Deserialize, Serialize};

use crate::grid::GridStatus;
use crate::model::{HostRecord, JobRecord, RoundRecord, SiteRecord};

#[derive(Debug, Serialize, Deserialize)]
pub struct InviteRequest {
    pub uses: u32,
    pub expires_s: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct InviteResponse {
    pub code: String,
    pub expires_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SitesAdd {
    pub sites: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SitesAdded {
    pub added: usize,
    pub total: usize,
}

/// `round start` options; unset ones take the config's defaults.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RoundStart {
    pub policy: Option<String>,
    pub max_pages: Option<u32>,
    pub max_depth: Option<u32>,
    pub delay_ms: Option<u64>,
    pub scope: Option<String>,
    pub max_seconds: Option<u64>,
    pub deadline_min_s: Option<u64>,
    pub deadline_max_s: Option<u64>,
    pub max_attempts: Option<u32>,
    /// Longest robots.txt Crawl-delay honoured, ms.
    #[serde(default)]
    pub max_crawl_delay_ms: Option<u64>,
    /// Repeat period, seconds (`round start --every`).
    #[serde(default)]
    pub every_s: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RoundStarted {
    pub id: u64,
}

/// Job counts of a round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobCounts {
    pub total: usize,
    pub queued: usize,
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    pub pages: u64,
    pub links: u64,
}

impl JobCounts {
    pub fn of(jobs: &[JobRecord]) -> JobCounts {
        use crate::model::JobState::*;
        let mut c = JobCounts {
            total: jobs.len(),
            ..Default::default()
        };
        for j in jobs {
            match j.state {
                Queued => c.queued += 1,
                Running => c.running += 1,
                Done => c.done += 1,
                Failed => c.failed += 1,
            }
            if let Some(r) = &j.result {
                c.pages += r.summary.pages;
                c.links += r.summary.links;
            }
        }
        c
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RoundSummary {
    pub round: RoundRecord,
    pub counts: JobCounts,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RoundDetail {
    pub round: RoundRecord,
    pub counts: JobCounts,
    pub jobs: Vec<JobRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct StatusResponse {
    pub public_addr: String,
    pub project_key: String,
    pub cert_sha256: String,
    pub grid: GridStatus,
}

pub type SitesList = Vec<SiteRecord>;
pub type HostsList = Vec<HostRecord>;

/// Error body of every failed admin call.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}
