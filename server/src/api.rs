//! JSON bodies of the admin HTTP API, shared by the handlers and the CLI.

use serde::{Deserialize, Serialize};

use crate::durations::{opt_seconds, typed_duration, DurationError, TypedDuration, REPEAT_PERIOD};
use crate::grid::GridStatus;
pub use crate::grid::HostLine;
use crate::model::{
    Completeness, JobRecord, JobState, JobValidation, RoundRecord, SiteRecord, Verdict,
};
use crate::params::RoundOverrides;

#[derive(Debug, Serialize, Deserialize)]
pub struct InviteRequest {
    pub uses: u32,
    pub expires_s: u64,
    /// A lifetime under a minute is meant (`invite --force`).
    #[serde(default)]
    pub force: bool,
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

/// `sites remove`: the site removed (`x.edu` removes `www.x.edu`).
#[derive(Debug, Serialize, Deserialize)]
pub struct SiteRemoved {
    pub site: String,
}

/// `hosts revoke`: the host revoked.
#[derive(Debug, Serialize, Deserialize)]
pub struct HostRevoked {
    pub id: u64,
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SitesAdded {
    pub added: usize,
    pub total: usize,
    /// Entries refused because an exclusion covers them (nothing else of
    /// the request is lost).
    #[serde(default)]
    pub excluded: Vec<SiteRefused>,
}

/// An entry of `sites add`/`sites import` an exclusion covers.
#[derive(Debug, Serialize, Deserialize)]
pub struct SiteRefused {
    /// 1-based position of the entry in the request.
    pub entry: usize,
    pub site: String,
    /// The exclusion that covers it, as listed (`.x.edu`: with subdomains).
    pub excluded_by: String,
    pub reason: String,
    pub excluded_at: String,
}

/// `sites exclude`: the host, whether its subdomains go with it, and why.
#[derive(Debug, Serialize, Deserialize)]
pub struct ExcludeRequest {
    pub host: String,
    #[serde(default)]
    pub subdomains: bool,
    pub reason: String,
}

/// One exclusion as `sites exclusions --json` and its export print it:
/// stable field names, the date in UTC as ISO 8601.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExclusionListed {
    pub host: String,
    pub subdomains: bool,
    pub reason: String,
    /// `2026-11-30T22:20:05Z`.
    pub excluded_at: String,
    pub excluded_ms: u64,
}

impl ExclusionListed {
    pub fn of(e: &crate::model::ExclusionRecord) -> ExclusionListed {
        ExclusionListed {
            host: e.exclusion.host.clone(),
            subdomains: e.exclusion.subdomains,
            reason: e.reason.clone(),
            excluded_at: iso_utc(e.excluded_ms),
            excluded_ms: e.excluded_ms,
        }
    }

    /// As typed and listed: `x.edu`, or `.x.edu` with its subdomains.
    pub fn display(&self) -> String {
        if self.subdomains {
            format!(".{}", self.host)
        } else {
            self.host.clone()
        }
    }
}

/// What `sites exclude` did.
#[derive(Debug, Serialize, Deserialize)]
pub struct Excluded {
    pub exclusion: ExclusionListed,
    /// The earlier exclusion of the same host it replaced.
    pub replaced: Option<ExclusionListed>,
    /// Sites taken out of the target set.
    pub sites_removed: Vec<String>,
    /// Open jobs of running rounds failed with the reason `excluded`.
    pub jobs_excluded: usize,
    /// Running copies of other jobs whose scope reaches the host, restarted
    /// with units that carry the exclusion.
    pub copies_restarted: usize,
}

/// `ms` (Unix time) in UTC as ISO 8601 to the second: `2026-11-30T22:20:05Z`.
pub fn iso_utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
        .map_or_else(
            || "out-of-range".to_string(),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        )
}

/// `round start`: its flags and the admin API's body (one type). Unset
/// parameters take the config's defaults.
#[derive(Clone, Debug, Default, clap::Args, Serialize, Deserialize)]
pub struct RoundStart {
    #[command(flatten)]
    #[serde(flatten)]
    pub params: RoundOverrides,
    /// Repeat: start the next scan when this one is over and this long
    /// has passed since it started (e.g. 7d; at least 1h unless --force).
    #[arg(long = "every", value_parser = typed_duration)]
    #[serde(default, with = "opt_seconds")]
    pub every_s: Option<TypedDuration>,
    /// Allow durations under their sensible minimum (--every under 1h,
    /// deadlines and scan time under 1m): trials and tests.
    #[arg(long)]
    #[serde(default)]
    pub force: bool,
}

impl RoundStart {
    /// Each duration given within its bounds, refused in the words typed
    /// after its flag (what the CLI checks before it asks the server).
    pub fn check_typed(&self) -> Result<(), DurationError> {
        self.params.check_typed(self.force)?;
        if let Some(every) = &self.every_s {
            every.within("--every", &REPEAT_PERIOD, self.force)?;
        }
        Ok(())
    }

    /// The repeat period asked for.
    pub fn every(&self) -> Option<std::time::Duration> {
        self.every_s.as_ref().map(|d| d.value)
    }
}

/// `round rescan`: the sites of a round to scan again (its body).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RoundRescan {
    /// Sites named.
    #[serde(default)]
    pub sites: Vec<String>,
    /// And every damaged site of the round the server knows of (found at
    /// start, by `check` or by an export).
    #[serde(default)]
    pub damaged: bool,
}

/// The sites `round rescan` queued again, each once.
#[derive(Debug, Serialize, Deserialize)]
pub struct RoundRescanned {
    pub sites: Vec<String>,
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
    /// Open jobs whose site is scanned and whose result waits for (or is
    /// in) another host's check: work done that the round is not over for.
    #[serde(default)]
    pub scanned_to_check: usize,
}

impl JobCounts {
    /// Counts of a round's jobs; once the round is over (done or
    /// cancelled), a job that did not reach its site's natural end is
    /// incomplete, whatever its state.
    pub fn of_round(round: &RoundRecord, jobs: &[JobRecord]) -> JobCounts {
        JobCounts::of_round_iter(round, jobs.iter())
    }

    /// [`JobCounts::of_round`] of borrowed jobs (counted where they are
    /// kept, without copying them).
    pub fn of_round_iter<'a>(
        round: &RoundRecord,
        jobs: impl Iterator<Item = &'a JobRecord>,
    ) -> JobCounts {
        let mut c = JobCounts::of_iter(jobs);
        if round.state != crate::model::RoundState::Running {
            c.incomplete = c.total - c.complete;
        }
        c
    }

    pub fn of(jobs: &[JobRecord]) -> JobCounts {
        JobCounts::of_iter(jobs.iter())
    }

    /// [`JobCounts::of`] of borrowed jobs.
    pub fn of_iter<'a>(jobs: impl Iterator<Item = &'a JobRecord>) -> JobCounts {
        use crate::model::JobState::*;
        let mut c = JobCounts::default();
        for j in jobs {
            c.total += 1;
            match j.state {
                Queued => c.queued += 1,
                Running => c.running += 1,
                Done => c.done += 1,
                Failed => c.failed += 1,
                Cancelled => c.cancelled += 1,
            }
            if j.check_wait().is_some() {
                c.scanned_to_check += 1;
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

    /// How far the round is, 0 to 1: sites over, and a site scanned whose
    /// check is still to come as half (one scan of the two it needs). The
    /// one figure the round page, `round wait` and the overview show.
    pub fn progress(&self) -> f64 {
        if self.total == 0 {
            return 1.0;
        }
        let over = (self.done + self.failed + self.cancelled) as f64;
        ((over + 0.5 * self.scanned_to_check as f64) / self.total as f64).min(1.0)
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
    /// Its name (filled in by the server, which knows the hosts).
    #[serde(default)]
    pub host_name: Option<String>,
    /// The copies scanning the site now: their hosts and pages so far.
    #[serde(default)]
    pub running: Vec<RunningCopy>,
    /// pending, valid, trusted, off or invalid.
    pub validation: String,
    /// What a scanned site waits for ([`JobRecord::check_wait`]).
    #[serde(default)]
    pub waits: Option<String>,
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
            host_name: None,
            running: j
                .running_attempts()
                .map(|a| RunningCopy {
                    unit: a.unit_id,
                    host: a.host_id,
                    host_name: String::new(),
                    pages: a.pages,
                })
                .collect(),
            validation: j.validation.as_str().to_string(),
            waits: j.check_wait().map(str::to_string),
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

/// A unit scanning a site now.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunningCopy {
    pub unit: u64,
    pub host: u64,
    pub host_name: String,
    /// Pages of its last progress report.
    pub pages: u64,
}

impl SiteLine {
    /// Fill in host names from `name_of` (host id → name).
    pub fn name_hosts(&mut self, name_of: impl Fn(u64) -> Option<String>) {
        self.host_name = self.host.and_then(&name_of);
        for r in &mut self.running {
            r.host_name = name_of(r.host).unwrap_or_default();
        }
    }
}

/// One round as `round list --json` prints it: stable field names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundListed {
    pub id: u64,
    /// running, done or cancelled.
    pub state: String,
    pub policy: String,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    /// `--every`, seconds.
    pub every_s: Option<u64>,
    pub jobs: usize,
    pub queued: usize,
    pub running: usize,
    pub done: usize,
    pub failed: usize,
    pub complete: usize,
    pub incomplete: usize,
    pub pages: u64,
    pub links: u64,
}

/// A round and its counts, borrowed.
struct RoundSummaryRef<'a> {
    round: &'a RoundRecord,
    counts: &'a JobCounts,
}

impl RoundListed {
    pub fn of(r: &RoundSummary) -> RoundListed {
        RoundListed::of_parts(&r.round, &r.counts)
    }

    /// A round's line from the round and its counts (no copy of either).
    pub fn of_parts(round: &RoundRecord, counts: &JobCounts) -> RoundListed {
        let r = RoundSummaryRef { round, counts };
        RoundListed {
            id: r.round.id,
            state: r.round.state.as_str().to_string(),
            policy: r.round.params.policy.clone(),
            started_ms: r.round.created_ms,
            finished_ms: r.round.finished_ms,
            every_s: r.round.every_ms.map(|e| e / 1000),
            jobs: r.counts.total,
            queued: r.counts.queued,
            running: r.counts.running,
            done: r.counts.done,
            failed: r.counts.failed,
            complete: r.counts.complete,
            incomplete: r.counts.incomplete,
            pages: r.counts.pages,
            links: r.counts.links,
        }
    }
}

/// One site as `sites list --json` prints it: stable field names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteListed {
    pub site: String,
    pub added_ms: u64,
    /// Its last finished scan, if any.
    pub last_round: Option<u64>,
    pub pages: Option<u64>,
    pub links: Option<u64>,
}

impl SiteListed {
    pub fn of(s: &SiteRecord) -> SiteListed {
        SiteListed {
            site: s.host.clone(),
            added_ms: s.added_ms,
            last_round: s.last_scan.as_ref().map(|l| l.round_id),
            pages: s.last_scan.as_ref().map(|l| l.pages),
            links: s.last_scan.as_ref().map(|l| l.links),
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
    /// Why the running round cannot end as things are ([`waiting_note`]).
    #[serde(default)]
    pub waiting: Option<String>,
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

pub type HostsList = Vec<HostLine>;

/// A done site whose kept link files cannot be read whole, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DamagedSite {
    pub round: u64,
    pub site: String,
    pub why: String,
}

/// `POST /api/check`: the round to check (every round when `None`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckRequest {
    #[serde(default)]
    pub round: Option<u64>,
}

/// What `POST /api/check` read and found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckReport {
    pub rounds: u64,
    /// Done sites whose files were read.
    pub sites_read: u64,
    pub damaged: Vec<DamagedSite>,
}

/// A dashboard login's answer: the session token its page sends as
/// `Authorization: Session …`, and how long the session lasts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LoginOk {
    pub session: String,
    pub expires_s: u64,
}

/// Error body of every failed admin call.
#[derive(Debug, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}

/// The header beside an export's rows that names its round's state
/// (`running`, `done`, `cancelled`): a running or cancelled round's export
/// holds only the sites done so far.
pub const ROUND_STATE_HEADER: &str = "x-beebot-round-state";

/// Why a running round cannot end as things are: results wait for a check
/// that no other host can make, because fewer hosts than validation needs
/// are enrolled (`hosts`: enrolled, not revoked, not left). The words the
/// round page, `round show` and `round wait` say, naming `--validate off`
/// for a trial.
pub fn waiting_note(round: &RoundRecord, counts: &JobCounts, hosts: usize) -> Option<String> {
    let needs = round.state == crate::model::RoundState::Running
        && round.params.validate != crate::validate::ValidateMode::Off
        && counts.scanned_to_check > 0
        && hosts < 2;
    needs.then(|| {
        format!(
            "{} site(s) scanned wait for a check by a second host, and {hosts} host(s) are \
             enrolled: the round ends once another host joins (for a trial with one \
             desktop, start rounds with --validate off)",
            counts.scanned_to_check
        )
    })
}

#[cfg(test)]
mod exclusion_tests {
    use super::*;

    #[test]
    fn exclusion_dates_are_iso_8601_in_utc() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(1_796_134_805_999), "2026-12-01T14:20:05Z");
        assert_eq!(iso_utc(u64::MAX), "out-of-range");
    }
}
