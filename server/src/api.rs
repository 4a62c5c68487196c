//! JSON bodies of the admin HTTP API, shared by the handlers and the CLI.

use serde::{Deserialize, Serialize};

use crate::grid::GridStatus;
use crate::model::{
    Completeness, HostRecord, JobRecord, JobState, JobValidation, RoundRecord, SiteRecord, Verdict,
};

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

/// One invite as `invite list` shows it: never its token.
#[derive(Debug, Serialize, Deserialize)]
pub struct InviteListed {
    /// The start of the token's SHA-256, in hex (what `invite revoke` takes).
    pub id: String,
    pub uses_left: u32,
    pub expires_ms: u64,
    pub created_ms: u64,
}

pub type InvitesList = Vec<InviteListed>;

#[derive(Debug, Serialize, Deserialize)]
pub struct InviteRevoked {
    pub id: String,
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
    /// Validation: off, adaptive or all.
    #[serde(default)]
    pub validate: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RoundStarted {
    pub id: u64,
    /// What the admin should know about the round as started (e.g. a
    /// validated round with fewer than two hosts never ends).
    #[serde(default)]
    pub warning: Option<String>,
}

/// Job counts of a round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobCounts {
    pub total: usize,
    pub queued: usize,
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    /// Jobs of a cancelled round that had not finished.
    #[serde(default)]
    pub cancelled: usize,
    /// Done jobs whose scans reached the site's natural end.
    pub complete: usize,
    /// Jobs over (done or failed) that did not: failed, robots unavailable,
    /// seed unreachable, frontier full.
    pub incomplete: usize,
    /// Pages and links of every accepted scan (continuations included).
    pub pages: u64,
    pub links: u64,
    /// Jobs whose result waits for another host's scan to compare with.
    pub pending: usize,
    /// Jobs whose result agreed with another host's.
    pub valid: usize,
    /// Jobs whose result was taken unchecked from a trusted host.
    pub trusted: usize,
    /// Results found invalid (disagreeing with the ones that agree).
    pub invalid: usize,
    /// Pages of results scanned to check others (the cost of validation).
    pub check_pages: u64,
}

impl JobCounts {
    /// Counts of a round's jobs; once the round is over (done or
    /// cancelled), a job that did not reach its site's natural end is
    /// incomplete, whatever its state.
    pub fn of_round(round: &RoundRecord, jobs: &[JobRecord]) -> JobCounts {
        let mut c = JobCounts::of(jobs);
        if round.state != crate::model::RoundState::Running {
            c.incomplete = c.total - c.complete;
        }
        c
    }

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
                Cancelled => c.cancelled += 1,
            }
            let done = j.completeness();
            c.pages += done.pages;
            c.links += done.links;
            match j.validation {
                JobValidation::Pending => c.pending += 1,
                JobValidation::Valid => c.valid += 1,
                JobValidation::Trusted => c.trusted += 1,
                _ => {}
            }
            c.invalid += j
                .candidates
                .iter()
                .filter(|r| r.verdict == Verdict::Invalid)
                .count();
            let all: u64 = j.candidates.iter().map(|r| r.pages()).sum();
            // What the job would have cost unchecked: the result it kept,
            // or while it waits, its first.
            let kept = j
                .candidates
                .iter()
                .find(|r| Some(r.result.unit_id) == j.result.as_ref().map(|k| k.unit_id))
                .or(j.candidates.first())
                .map_or(0, |r| r.pages());
            c.check_pages += all.saturating_sub(kept);
            if done.natural_end {
                c.complete += 1;
            } else if j.state.is_final() {
                c.incomplete += 1;
            }
        }
        c
    }

    /// The line a finished round ends with: counts, and whether every site
    /// was scanned to its natural end.
    pub fn verdict(&self) -> String {
        if self.incomplete == 0 {
            format!("all {} sites complete", self.complete)
        } else {
            format!(
                "{} of {} sites INCOMPLETE (see `round show`)",
                self.incomplete, self.total
            )
        }
    }
}

/// One complete result of a site, as validation judged it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResultLine {
    pub hosts: Vec<u64>,
    pub pages: u64,
    pub links: u64,
    pub verdict: Verdict,
    /// Similarity to the result kept (Jaccard of link pairs), once decided.
    pub similarity: Option<f64>,
}

/// One site of a round: its job's state and how much of it was scanned.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SiteLine {
    pub site: String,
    pub state: JobState,
    pub attempts: usize,
    /// The host of the last accepted scan, if any.
    pub host: Option<u64>,
    /// pending, valid, trusted, off or invalid.
    pub validation: String,
    /// Its complete results compared by validation.
    pub results: Vec<ResultLine>,
    #[serde(flatten)]
    pub completeness: Completeness,
}

impl SiteLine {
    pub fn of(j: &JobRecord) -> SiteLine {
        SiteLine {
            site: j.site.clone(),
            state: j.state,
            attempts: j.attempts.len(),
            host: j
                .result
                .as_ref()
                .map(|r| r.host_id)
                .or_else(|| j.segments.last().map(|s| s.host_id)),
            validation: j.validation.as_str().to_string(),
            results: j
                .candidates
                .iter()
                .map(|c| ResultLine {
                    hosts: c.authors(),
                    pages: c.pages(),
                    links: c.links(),
                    verdict: c.verdict,
                    similarity: c.similarity,
                })
                .collect(),
            completeness: j.completeness(),
        }
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
    /// Each site's completeness, in the round's order.
    pub sites: Vec<SiteLine>,
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
/// One host as `hosts list` shows it: its record and whether it is trusted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostLine {
    #[serde(flatten)]
    pub host: HostRecord,
    /// Enough valid results in a row: only spot checks of its results.
    pub trusted: bool,
}

pub type HostsList = Vec<HostLine>;

/// Error body of every failed admin call.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}
