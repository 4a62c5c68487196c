//! The server's records: sites, rounds, jobs (with their attempts), hosts and
//! invites. Plain data, stored by [`crate::store`] and changed by [`crate::grid`].

use beebot_shared::linkfile::ScanSummary;
use beebot_shared::proto::HostInfo;
use serde::{Deserialize, Serialize};

pub use crate::scheduler::SiteStats;

/// One website of the target set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteRecord {
    pub host: String,
    pub added_ms: u64,
    pub last_scan: Option<SiteStats>,
}

/// A host excluded from crawling (`sites exclude`): never crawled again,
/// in any round or scope, until `sites include` lifts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExclusionRecord {
    pub exclusion: beebot_shared::scope::Exclusion,
    /// Why (a site owner's request, a ticket): whitespace collapsed.
    pub reason: String,
    /// When the server recorded it, Unix milliseconds.
    pub excluded_ms: u64,
}

/// Settings of one round, fixed when it starts (written once, in [`crate::params`]).
pub use crate::params::RoundParams;

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
    /// Sites of the target set that got no job of their own: a wider
    /// site's scope covers them, and its job crawls them once.
    pub folded: Vec<FoldedSite>,
}

/// A site folded into a wider one for a round ([`RoundRecord::folded`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedSite {
    pub site: String,
    /// The site whose job crawls it.
    pub into: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    Queued,
    Running,
    Done,
    Failed,
    /// Its round was cancelled before it finished: never issued again.
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
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
    /// The scan ended before its natural end (the round's time budget, a
    /// stop) and returned its records and frontier: the job continues from
    /// there in a continuation unit.
    Partial,
    /// The unit waited, not started, while its host was not heard from
    /// for [`LEASE_TAKEOVER_S`](beebot_shared::limits::LEASE_TAKEOVER_S):
    /// taken back so its job runs elsewhere. Charged to neither the host
    /// nor the job (a paused or sleeping desktop did no wrong); the host
    /// keeps it if it is back before another host took the job.
    Recalled,
}

impl AttemptState {
    /// The attempt ended without a result: its deadline passed, the host
    /// gave it back (or its result was refused), or the host no longer held
    /// it. What a job's `max_attempts` counts (a `Recalled` unit is not).
    pub fn ended_without_result(&self) -> bool {
        matches!(
            self,
            AttemptState::Expired | AttemptState::Failed(_) | AttemptState::Released
        )
    }
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
    /// Body bytes its latest report counted (0: none reported, or an
    /// older client's reports). Kept in memory only, like a live figure:
    /// not in the store, so 0 again after a restart until the next report.
    #[serde(skip)]
    pub bytes: u64,
    /// The copy (a hedge or a tail replica) the scheduler wanted of a job
    /// running elsewhere: the continuation after that scan was handed over.
    pub replica: bool,
    /// First and latest progress reports (0: none yet): the scan's pace.
    pub first_report_ms: u64,
    pub first_report_pages: u64,
    pub last_report_ms: u64,
    /// The job's scans this unit continues from: the number of its
    /// segments when it was issued (0: a scan from the seed).
    pub resume_seq: u32,
    /// The job's chain of scans this unit belongs to ([`JobRecord::chain`]
    /// when it was issued).
    pub chain: u32,
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

/// A scan that ended before its job's natural end: its records (a link
/// file) and its frontier (a scan state file), from which the job continues.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub unit_id: u64,
    pub host_id: u64,
    pub summary: ScanSummary,
    /// Link file path relative to the links dir.
    pub file: String,
    /// Scan state path relative to the links dir (removed once the job is done).
    pub state_file: String,
    pub state_sha256: [u8; 32],
    pub state_bytes: u64,
    /// Pages the job's scans took up to the end of this one.
    pub pages_done: u64,
    pub accepted_ms: u64,
}

/// Where a complete result of a job stands in its validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Waits for another host's scan to compare with.
    Pending,
    /// Taken without a check (validation off, or a trusted host's result
    /// not drawn for a spot check).
    Unchecked,
    /// Agrees with another host's result.
    Valid,
    /// Disagrees with the results that agree with each other (or its host
    /// was found lying elsewhere before it was compared).
    Invalid,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::Unchecked => "unchecked",
            Verdict::Valid => "valid",
            Verdict::Invalid => "invalid",
        }
    }
}

/// One complete result of a job (a chain of scans from the seed to the
/// site's natural end), as validation compares it with the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Its scans that ended early, in order.
    pub segments: Vec<Segment>,
    /// Its last scan.
    pub result: JobResult,
    /// Bottom-k digests of its link pairs ([`crate::validate`]); emptied
    /// once the job's validation is decided.
    pub sketch: Vec<u64>,
    pub verdict: Verdict,
    /// Similarity to the result the job kept, once decided.
    pub similarity: Option<f64>,
}

impl Candidate {
    /// Each of its scans in order (segments, then the last) with its host.
    pub fn pieces(&self) -> Vec<(u64, &ScanSummary)> {
        self.segments
            .iter()
            .map(|s| (s.host_id, &s.summary))
            .chain([(self.result.host_id, &self.result.summary)])
            .collect()
    }

    /// The hosts whose scans make this result.
    pub fn authors(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .segments
            .iter()
            .map(|s| s.host_id)
            .chain([self.result.host_id])
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
    pub fn pages(&self) -> u64 {
        self.result.summary.pages + self.segments.iter().map(|s| s.summary.pages).sum::<u64>()
    }
    pub fn links(&self) -> u64 {
        self.result.summary.links + self.segments.iter().map(|s| s.summary.links).sum::<u64>()
    }
    pub fn bytes(&self) -> u64 {
        self.segments
            .iter()
            .fold(self.result.summary.bytes, |b, s| {
                b.saturating_add(s.summary.bytes)
            })
    }
}

/// A site scanned whose result waits for another host's scan to compare with.
pub const WAITING_FOR_CHECK: &str = "scanned, waiting for a check by another host";
/// A site scanned whose check by another host runs now.
pub const BEING_CHECKED: &str = "scanned, being checked by another host";

/// Where a job stands in validation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobValidation {
    /// No complete result yet.
    #[default]
    None,
    /// A result waits for another host's scan.
    Pending,
    /// Two hosts' results agree: the job keeps one of them.
    Valid,
    /// Taken unchecked from a trusted host (not drawn for a spot check).
    Trusted,
    /// The round does not validate.
    Off,
    /// The results never agreed: the job failed.
    Invalid,
}

impl JobValidation {
    pub fn as_str(self) -> &'static str {
        match self {
            JobValidation::None | JobValidation::Pending => "pending",
            JobValidation::Valid => "valid",
            JobValidation::Trusted => "trusted",
            JobValidation::Off => "off",
            JobValidation::Invalid => "invalid",
        }
    }
}

/// How much of a site a job scanned, and why not all of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completeness {
    /// Pages the job's accepted scans fetched (the running scan's last report included).
    pub pages: u64,
    /// Link records of the accepted scans.
    pub links: u64,
    /// Scans accepted (the first and its continuations).
    pub scans: u32,
    /// The scans together reached the site's natural end (frontier empty or the page cap).
    pub natural_end: bool,
    /// Why the site is not complete (`None` when it is, or while it runs).
    pub why_not: Option<String>,
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
    /// Expected pages, fixed at round start from the site's last scan (and
    /// lowered by what continuations already did).
    pub est_pages: f64,
    /// The site had been scanned before this round: without that, a scan's
    /// length is bounded only by the round's page cap and delay.
    pub size_known: bool,
    /// `batch` policy: the host whose batch holds this job.
    pub batch_host: Option<u64>,
    /// Scans that ended early, in order: the job continues from the last one's frontier.
    pub segments: Vec<Segment>,
    /// Sketch of the link pairs of `segments` (what validation compares).
    pub chain_sketch: Vec<u64>,
    /// The chain of scans running now: 0 for the first, one more each time
    /// the job starts over from its seed (a check of a complete result, or a
    /// chain dropped because a host in it lied).
    pub chain: u32,
    /// Complete results compared by validation (the kept one included).
    pub candidates: Vec<Candidate>,
    pub validation: JobValidation,
}

impl JobRecord {
    pub fn running_attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts
            .iter()
            .filter(|a| a.state == AttemptState::Running)
    }
    /// Attempts that ended without a result since the job's last segment
    /// (what `max_attempts` counts: a site scanned over many nights in many
    /// continuations may see a host go quiet now and then).
    pub fn failed_attempts(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| self.is_current(a))
            .filter(|a| a.state.ended_without_result())
            .count()
    }

    /// The attempt starts where the job stands now (its chain, after its
    /// last segment).
    pub fn is_current(&self, a: &Attempt) -> bool {
        a.chain == self.chain && a.resume_seq as usize == self.segments.len()
    }

    /// The job went on without this attempt: another copy added a segment
    /// from where it started, or the job started a new chain.
    pub fn is_behind(&self, a: &Attempt) -> bool {
        a.chain != self.chain || (a.resume_seq as usize) < self.segments.len()
    }

    /// Hosts that may not scan this job now: the authors of its results
    /// under comparison (a check is another host's scan).
    pub fn authors(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.candidates.iter().flat_map(|c| c.authors()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Pages and links of the parts of running attempt `a` the job keeps
    /// (segments it uploaded while its scan goes on): its progress reports
    /// count them, as they count every page since the unit started.
    pub fn parts_of(&self, a: &Attempt) -> (u64, u64) {
        self.segments
            .iter()
            .filter(|s| s.unit_id == a.unit_id)
            .fold((0, 0), |(p, l), s| {
                (p + s.summary.pages, l + s.summary.links)
            })
    }

    /// Pages expected of running attempt `a` from its unit's start: what is
    /// left of the job (`est_pages`) and what its parts took. What its
    /// progress reports are measured against.
    pub fn expected_of(&self, a: &Attempt) -> f64 {
        self.est_pages + self.parts_of(a).0 as f64
    }

    /// Pages the job's accepted scans took so far (what the page cap counts).
    pub fn pages_done(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.pages_done)
    }

    /// Link files of the job's accepted scans, in order (segments, then the final scan).
    pub fn link_files(&self) -> impl Iterator<Item = &str> {
        self.segments
            .iter()
            .map(|s| s.file.as_str())
            .chain(self.result.iter().map(|r| r.file.as_str()))
    }

    /// Pages scanned so far: accepted scans, and without a result the
    /// running scan's last report, or a whole result that waits for its
    /// check when that is more (what [`JobRecord::completeness`] counts,
    /// without building the rest). It never drops when a scanned result
    /// goes to be checked: `round wait` and the dashboard count on.
    pub fn pages_so_far(&self) -> u64 {
        let accepted: u64 = self.segments.iter().map(|s| s.summary.pages).sum();
        match &self.result {
            Some(r) => accepted + r.summary.pages,
            None => {
                let running = self
                    .running_attempts()
                    .filter(|a| self.is_current(a))
                    .map(|a| a.pages.saturating_sub(self.parts_of(a).0))
                    .max()
                    .unwrap_or(0);
                (accepted + running).max(self.awaiting_check().map_or(0, Candidate::pages))
            }
        }
    }

    /// Body bytes read so far, counted as [`JobRecord::pages_so_far`]
    /// counts pages: accepted scans, and without a result the running
    /// scan's last report (the one with the most pages), or a whole result
    /// waiting for its check when that read more.
    pub fn bytes_so_far(&self) -> u64 {
        let accepted: u64 = self
            .segments
            .iter()
            .fold(0, |b, s| b.saturating_add(s.summary.bytes));
        match &self.result {
            Some(r) => accepted.saturating_add(r.summary.bytes),
            None => {
                let running = self
                    .running_attempts()
                    .filter(|a| self.is_current(a))
                    .max_by_key(|a| a.pages)
                    .map_or(0, |a| a.bytes.saturating_sub(self.parts_bytes(a)));
                let pending = self.awaiting_check().map_or(0, Candidate::bytes);
                accepted.saturating_add(running).max(pending)
            }
        }
    }

    /// Bytes of running attempt `a`'s accepted parts (its reports count them).
    fn parts_bytes(&self, a: &Attempt) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.unit_id == a.unit_id)
            .fold(0, |b, s| b.saturating_add(s.summary.bytes))
    }

    /// What a site whose scan is over but not yet checked waits for, in the
    /// words every screen shows (`round show`, the round page, `round
    /// wait`); `None` for any other site.
    pub fn check_wait(&self) -> Option<&'static str> {
        self.awaiting_check()?;
        Some(if self.running_attempts().any(|a| self.is_current(a)) {
            BEING_CHECKED
        } else {
            WAITING_FOR_CHECK
        })
    }

    /// The largest whole result that waits for another host's check, while
    /// the job has no result: the site is scanned, the round waits for a
    /// second host.
    pub fn awaiting_check(&self) -> Option<&Candidate> {
        if self.result.is_some() || self.state.is_final() {
            return None;
        }
        self.candidates
            .iter()
            .filter(|c| c.verdict == Verdict::Pending)
            .max_by_key(|c| c.pages())
    }

    /// How much of its site the job scanned, and why not all of it.
    pub fn completeness(&self) -> Completeness {
        let pages = self.pages_so_far();
        let mut links: u64 = self.segments.iter().map(|s| s.summary.links).sum();
        let mut scans = self.segments.len() as u32;
        if let Some(r) = &self.result {
            links += r.summary.links;
            scans += 1;
        }
        if let Some(c) = self.awaiting_check().filter(|c| c.links() > links) {
            links = c.links();
            scans = c.segments.len() as u32 + 1;
        }
        let stop = self.result.as_ref().and_then(|r| r.summary.stopped_by);
        let natural_end = self.state == JobState::Done
            && matches!(
                stop,
                None | Some(beebot_shared::linkfile::StopReason::MaxPages)
            );
        let why_not = match self.state {
            JobState::Done if natural_end => None,
            JobState::Done => Some(stop.map_or("unknown", |s| s.as_str()).to_string()),
            JobState::Failed => Some(format!(
                "failed: {}",
                self.reasons
                    .last()
                    .map_or("attempts ran out", |r| r.as_str())
            )),
            JobState::Cancelled => Some("round cancelled".to_string()),
            JobState::Queued | JobState::Running => None,
        };
        Completeness {
            pages,
            links,
            scans,
            natural_end,
            why_not,
        }
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
    /// Results found valid in a row (reset by an invalid one): trusted from
    /// the grid's `trust_after` on.
    pub consecutive_valid: u32,
    pub valid_results: u64,
    pub invalid_results: u64,
    /// When the host left the project by itself (`beebot leave`), server
    /// ms: it is then `revoked` too (refused from now on), but listed as left.
    #[serde(default)]
    pub left_ms: Option<u64>,
    /// The sites its client last said it scans at once
    /// (`Request::Concurrency`, bounded by `MAX_SLOTS`): what it may hold
    /// follows it. Kept in memory only, never stored (`serde(skip)`, so
    /// stored records keep their encoding): the client says it again after
    /// every `Hello`, so after a restart as soon as it reconnects.
    #[serde(skip)]
    pub concurrency: Option<u32>,
}

impl HostRecord {
    /// The host's speed, pages per second on one slot: the running average
    /// of its real jobs ([`crate::scheduler::estimates::learn_speed`]), else
    /// its reference-site benchmark, believed up to
    /// [`MAX_HOST_PAGES_PER_S`](beebot_shared::limits::MAX_HOST_PAGES_PER_S).
    /// The one figure the scheduler plans with and `hosts list`, the
    /// dashboard and its ETA show.
    pub fn speed(&self) -> Option<f64> {
        self.avg_pages_per_s
            .or_else(|| self.benchmark.as_ref().map(|b| b.pages_per_s))
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| s.min(beebot_shared::limits::MAX_HOST_PAGES_PER_S))
    }

    /// A host enrolled at `now_ms` with key `key`: nothing done yet.
    pub fn new(id: u64, key: [u8; 32], info: HostInfo, now_ms: u64) -> HostRecord {
        HostRecord {
            id,
            key,
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
            avg_pages_per_s: None,
            avg_kb_per_s: None,
            bytes_done: 0,
            offline_ms: 0,
            last_missed_ms: 0,
            consecutive_valid: 0,
            valid_results: 0,
            invalid_results: 0,
            left_ms: None,
            concurrency: None,
        }
    }

    /// `active`, `revoked` (by the admin) or `left` (by its owner).
    pub fn state(&self) -> &'static str {
        match (self.revoked, self.left_ms) {
            (true, Some(_)) => "left",
            (true, None) => "revoked",
            (false, _) => "active",
        }
    }
}

/// An invite: only the token's SHA-256 is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InviteRecord {
    pub token_sha256: [u8; 32],
    pub uses_left: u32,
    pub expires_ms: u64,
    pub created_ms: u64,
}

/// What an id numbers: each kind has its own sequence from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Round,
    Job,
    Host,
    Unit,
}

impl IdKind {
    /// Every kind.
    pub const ALL: [IdKind; 4] = [IdKind::Round, IdKind::Job, IdKind::Host, IdKind::Unit];
}

/// One change to the stored records, as the grid makes it: the grid
/// collects them in order and its driver persists them in that order
/// ([`crate::store::Store::apply`]) before anything that rests on them is
/// answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    Site(SiteRecord),
    /// The site of this host left the target set.
    SiteGone(String),
    Round(RoundRecord),
    Job(JobRecord),
    Host(HostRecord),
    Invite(InviteRecord),
    /// The invite with this token hash is gone.
    InviteGone([u8; 32]),
    Exclusion(ExclusionRecord),
    /// The exclusion of this host is lifted.
    ExclusionGone(String),
    /// The last id handed out of a kind: the next is one more, also after
    /// a restart.
    LastId(IdKind, u64),
}

/// Every record a grid is opened with, as its store holds them.
#[derive(Clone, Debug, Default)]
pub struct Records {
    pub sites: Vec<SiteRecord>,
    pub rounds: Vec<RoundRecord>,
    pub jobs: Vec<JobRecord>,
    pub hosts: Vec<HostRecord>,
    pub invites: Vec<InviteRecord>,
    pub exclusions: Vec<ExclusionRecord>,
    /// The last id handed out of each kind, in [`IdKind::ALL`]'s order (0:
    /// none yet).
    pub last_ids: [u64; 4],
}
