//! The grid's state machine: sites, rounds, jobs, hosts and invites in memory,
//! written through to the [`Store`] and flushed before any answer leaves.
//!
//! Every method takes the time (`now_ms`, Unix milliseconds) as an argument.
//! The QUIC and admin layers call it under one lock (see [`crate::Shared`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use beebot_shared::limits::MAX_SCANS_PER_JOB;
use beebot_shared::limits::{
    INVITE_TOKEN_LEN, MAX_BENCHMARK_KB_PER_S, MAX_BENCHMARK_PAGES_PER_S, MAX_DELAY_MS,
    MAX_HOST_PAGES_PER_S, MAX_LINK_RECORDS, MAX_PAGES_PER_SITE, MAX_REASONS_PER_JOB, MAX_SITES,
    MAX_TEXT_LEN, MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_REPLY, MAX_UNITS_PER_SLOT,
    PACE_FREE_PAGES, PACE_TOLERANCE,
};
use beebot_shared::limits::{MAX_EXCLUSIONS, MAX_EXCLUSION_REASON_CHARS, MAX_UNIT_EXCLUSIONS};
use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::proto::{HostInfo, ABORT_HAND_OVER, ABORT_ROUND_CANCELLED};
use beebot_shared::scanstate::{state_sha256, ScanState};
use beebot_shared::scope::{reversed_labels, site_key, Exclusion, Scope, SiteScope};
use beebot_shared::sign::{self, ResumeFrom, SignedUnit, UnitLimits, WorkUnit};
use beebot_shared::util::{collapse_whitespace, sha256, truncate_on_char};

use crate::model::*;
use crate::scheduler::{self, DeadlineRule, HeldUnit, HostView, JobView, RunningView, WorkAsk};
use crate::store::{Store, StoreError};
use crate::validate::{self, SketchBuilder, ValidateMode};

/// How long a host with nothing to do waits before asking again while a round
/// is open (jobs may come back after a deadline, or wait for this host).
pub use crate::scheduler::RETRY_WHILE_ROUND_OPEN_S;
/// A repeating round whose next scan starts within this long counts as open.
pub const REPEAT_SOON_MS: u64 = 60_000;
/// How long a host waits when no round is open.
pub const RETRY_IDLE_S: u64 = 60;
/// A round-start plan (`batch`) covers the hosts heard from within this long.
pub const PLAN_HOSTS_SEEN_WITHIN_MS: u64 = 24 * 3600 * 1000;

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
    #[error("no invite has the id {0} (see `invite list`)")]
    UnknownInvite(String),
    #[error("this host key is already enrolled as host {0}")]
    KeyEnrolled(u64),
    #[error("unknown round {0}")]
    UnknownRound(u64),
    #[error("{0}")]
    Invalid(String),
    #[error("cannot sign unit: {0}")]
    Sign(String),
    #[error(
        "the name `{name}` is taken by host {host_id}: pick another with `beebot join --name NAME`"
    )]
    NameTaken { name: String, host_id: u64 },
    #[error("no host is named `{0}` (see `hosts list`)")]
    UnknownHostName(String),
    #[error("`{name}` names more than one host (ids {}): give the id", ids.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))]
    AmbiguousHostName { name: String, ids: Vec<u64> },
    #[error("`{given}` is the same site as `{existing}`, {where_}")]
    SameSite {
        given: String,
        existing: String,
        where_: &'static str,
    },
}

/// The reason a job taken out of its round by an exclusion fails with.
pub const EXCLUDED_REASON: &str = "excluded";

/// Why `site` may not be added: the exclusion that covers it.
pub fn excluded_message(site: &str, e: &ExclusionRecord) -> String {
    format!(
        "`{site}` is excluded from crawling ({}: {}); lift it with `sites include {}`",
        e.exclusion.display(),
        e.reason,
        e.exclusion.display()
    )
}

/// What [`Grid::exclude`] did.
#[derive(Clone, Debug)]
pub struct ExcludeOutcome {
    pub record: ExclusionRecord,
    /// The exclusion of the same host it replaced, if any.
    pub replaced: Option<ExclusionRecord>,
    /// Sites it took out of the target set.
    pub sites_removed: Vec<String>,
    /// Open jobs of running rounds it failed (their site is excluded).
    pub jobs_excluded: usize,
    /// Running copies of other jobs whose scope reaches the host, aborted
    /// (their jobs go on with units that carry the exclusion).
    pub copies_restarted: usize,
}

/// A work request as the grid sees it.
#[derive(Clone, Debug)]
pub struct WorkRequest {
    pub want_seconds: u64,
    pub free_slots: u32,
    pub units_held: Vec<u64>,
    /// The host's open crawling intervals, seconds from now (`None`: always open).
    pub open_windows: Option<Vec<(u64, u64)>>,
}

/// The answer to a work request.
#[derive(Clone, Debug)]
pub struct WorkReply {
    pub units: Vec<SignedUnit>,
    pub retry_after_s: Option<u64>,
    pub rounds_open: bool,
    /// Held units (named in the request) of cancelled rounds: the host drops them.
    pub cancelled_units: Vec<u64>,
}

/// The answer to an upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadOutcome {
    Accepted,
    Duplicate,
    Rejected(String),
}

/// What [`Grid::upload_begin`] decided.
#[derive(Debug)]
pub enum UploadStep {
    /// The answer, with nothing to verify or write.
    Answer(UploadOutcome),
    /// The link file is to be verified and written, then the upload finished.
    Plan(UploadPlan),
}

/// An upload the grid expects: what its link file must say, and where it goes.
#[derive(Clone, Debug)]
pub struct UploadPlan {
    host_id: u64,
    unit_id: u64,
    job_id: u64,
    round_id: u64,
    site: String,
    scope: Scope,
    /// The link file's path. One per unit: two copies of a job uploading at
    /// once never write the same file.
    path: PathBuf,
    /// The same, relative to the links directory (kept in the job's result).
    rel: String,
    /// Where the scan state goes when the scan ended early, and relative.
    state_path: PathBuf,
    state_rel: String,
    /// The job's scans this unit continued from (its attempt's `resume_seq`).
    resume_seq: u32,
    /// The job's chain of scans the unit belongs to (its attempt's `chain`).
    chain: u32,
    /// Pages the job's earlier scans took.
    pages_before: u64,
    /// The round's depth limit: a state's queue may not go deeper.
    max_depth: u32,
    /// The round's page cap (the job's, all its scans together).
    max_pages: u64,
    /// The round's politeness delay: a scan's elapsed time covers it.
    delay_ms: u64,
    /// Excluded hosts inside the scope: no record may come from a page on them.
    excluded: Vec<Exclusion>,
}

/// A verified scan state uploaded with a scan that ended early, as the
/// server keeps it: only queued URLs inside the site's scope and depth, and
/// no robots.txt answers (the next scan asks the site itself, rather than
/// trust what one host said of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub sha256: [u8; 32],
    pub bytes: u64,
    /// Pages the job's scans took up to this state.
    pub pages_done: u64,
    /// The state as stored and served to the continuation.
    pub encoded: Vec<u8>,
}

/// What [`UploadPlan::verify`] found in an upload it accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// The frontier of a scan that stopped early.
    pub state: Option<StateInfo>,
    /// Sketch of the link file's pairs, for validation.
    pub sketch: Vec<u64>,
}

/// What [`Grid::state_of_unit`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateAnswer {
    /// The state file to send, and the SHA-256 the unit names.
    Read(PathBuf, [u8; 32]),
    /// The unit is not wanted any more: the client drops it.
    Abort(String),
}

impl UploadPlan {
    /// Check the link file against the unit, outside the grid lock: it
    /// decodes (bounded), its header names this unit, round and site, every
    /// record's source is on the site, and the summary counts its links.
    /// The summary must fit what the unit allowed and the file holds (see
    /// [`UploadPlan::check_summary`]). `Err` holds the reason it is refused.
    ///
    /// A scan that stopped before its natural end must bring its frontier
    /// (`state`): it is decoded (bounded) and checked against the site and
    /// the pages the job already took; its digest comes back for the
    /// continuation unit to name.
    pub fn verify(
        &self,
        summary: &ScanSummary,
        link_file: &[u8],
        state: Option<&[u8]>,
    ) -> Result<Verified, String> {
        self.check_summary(summary)?;
        // Records are checked as they are decoded, one at a time: none is
        // kept, so a file's size in memory costs nothing here.
        let site_scope = beebot_shared::scope::SiteScope::new(&self.site, self.scope);
        let mut records = 0u64;
        let mut sketch = SketchBuilder::default();
        // A page's records come together: its source is checked once.
        let mut last_source = String::new();
        // Digests of the pages the records come from (one source per page,
        // so never more than the summary's pages: the set stops there) and
        // of their origins (each keeps its own politeness pace): 8 bytes
        // each, whatever the URLs' lengths.
        let mut sources: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut origins: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let header = linkfile::for_each_record(link_file, |r| {
            sketch.add(validate::pair_digest(&r.source_url, &r.target_url));
            if records > 0 && r.source_url == last_source {
                records += 1;
                return Ok(());
            }
            // A file claiming links from other sites lies about what was scanned.
            let Some(u) = url::Url::parse(&r.source_url).ok().filter(|u| {
                site_scope.contains(u) && !self.excluded.iter().any(|e| e.covers_url(u))
            }) else {
                return Err(linkfile::LinkFileError::Refused(format!(
                    "link file holds a record whose source {} is not on site {}",
                    r.source_url.chars().take(200).collect::<String>(),
                    self.site
                )));
            };
            if sources.insert(beebot_shared::scanstate::url_digest(&r.source_url))
                && sources.len() as u64 > summary.pages
            {
                return Err(linkfile::LinkFileError::Refused(format!(
                    "summary says {} pages but the link file holds records of more pages",
                    summary.pages
                )));
            }
            origins.insert(beebot_shared::scanstate::url_digest(
                &u.origin().ascii_serialization(),
            ));
            records += 1;
            last_source = r.source_url;
            Ok(())
        })
        .map_err(|e| match e {
            linkfile::LinkFileError::Refused(why) => why,
            e => format!("link file refused: {e}"),
        })?;
        if header.unit_id != self.unit_id
            || header.round_id != self.round_id
            || header.site != self.site
        {
            return Err("link file header does not match the unit".into());
        }
        if summary.links != records {
            return Err(format!(
                "summary says {} links but the link file holds {records}",
                summary.links,
            ));
        }
        self.check_pace(summary, origins.len() as u64)?;
        let sketch = sketch.finish();
        if !stopped_early(summary) {
            return Ok(Verified {
                state: None,
                sketch,
            });
        }
        let Some(bytes) = state else {
            return Err(format!(
                "the scan stopped early ({}) without its frontier, so the job cannot go on from it",
                summary.stopped_by.map_or("-", |s| s.as_str())
            ));
        };
        let mut st = ScanState::decode(bytes).map_err(|e| format!("scan state refused: {e}"))?;
        if st.site != self.site {
            return Err("scan state is of another site".into());
        }
        let least = self.pages_before.saturating_add(summary.pages);
        if st.pages_done < least {
            return Err(format!(
                "scan state counts {} pages done, fewer than the job's {} so far",
                st.pages_done, least
            ));
        }
        if st.pages_done > self.max_pages {
            return Err(format!(
                "scan state counts {} pages done, more than the round's cap of {}",
                st.pages_done, self.max_pages
            ));
        }
        // Another host continues from this: it gets only URLs of this site,
        // within the round's depth, and asks robots.txt itself.
        let site_scope = beebot_shared::scope::SiteScope::new(&self.site, self.scope);
        if let Some(q) = st.queue.iter().find(|q| {
            q.depth > self.max_depth
                || !url::Url::parse(&q.url).is_ok_and(|u| site_scope.contains(&u))
        }) {
            return Err(format!(
                "scan state queues {} (depth {}), outside site {} or its depth limit",
                q.url.chars().take(200).collect::<String>(),
                q.depth,
                self.site
            ));
        }
        st.robots.clear();
        let encoded = st
            .encode()
            .map_err(|e| format!("scan state refused: {e}"))?;
        Ok(Verified {
            state: Some(StateInfo {
                sha256: state_sha256(&encoded),
                bytes: encoded.len() as u64,
                pages_done: st.pages_done,
                encoded,
            }),
            sketch,
        })
    }

    /// The summary's counts against what the unit allowed and against each
    /// other, before the file is decoded: no more pages than the page cap
    /// leaves after the job's earlier scans, and no count that is a part of
    /// another larger than it.
    fn check_summary(&self, summary: &ScanSummary) -> Result<(), String> {
        let allowed = self.max_pages.saturating_sub(self.pages_before);
        if summary.pages > allowed {
            return Err(format!(
                "summary says {} pages but the unit allowed {allowed} (page cap {}, {} done before)",
                summary.pages, self.max_pages, self.pages_before
            ));
        }
        if summary.links > MAX_LINK_RECORDS as u64 {
            return Err(format!(
                "summary says {} links, more than a link file may hold ({MAX_LINK_RECORDS})",
                summary.links
            ));
        }
        if summary.distinct_target_hosts > summary.links {
            return Err(format!(
                "summary says {} target hosts but only {} links",
                summary.distinct_target_hosts, summary.links
            ));
        }
        // Counted once per page at most (a page's redirect hops are not pages).
        for (what, n) in [
            ("pages whose links were capped", summary.link_capped_pages),
            ("non-HTML pages", summary.non_html),
        ] {
            if n > summary.pages {
                return Err(format!(
                    "summary says {n} {what} but only {} pages",
                    summary.pages
                ));
            }
        }
        Ok(())
    }

    /// A scan waits the round's delay between two requests to one origin:
    /// its elapsed time covers the delays of its pages, spread over the
    /// `origins` its records come from (at least one), the first
    /// [`PACE_FREE_PAGES`] of each free, within [`PACE_TOLERANCE`]. A
    /// summary claiming more pages than that is a lie about the scan (or a
    /// host that ignored the politeness delay).
    fn check_pace(&self, summary: &ScanSummary, origins: u64) -> Result<(), String> {
        let per_origin = summary.pages.div_ceil(origins.max(1));
        let delays = per_origin.saturating_sub(PACE_FREE_PAGES);
        let least_ms = delays as f64 * self.delay_ms as f64 * PACE_TOLERANCE;
        if (summary.elapsed_ms as f64) < least_ms {
            return Err(format!(
                "summary says {} pages in {} ms, faster than the round's delay of {} ms allows (at least {} ms)",
                summary.pages, summary.elapsed_ms, self.delay_ms, least_ms as u64
            ));
        }
        Ok(())
    }

    /// Make the link file (and the scan state of a scan that ended early)
    /// durable at their places (outside the grid lock).
    pub fn write(&self, link_file: &[u8], state: Option<&StateInfo>) -> std::io::Result<()> {
        if let Some(st) = state {
            write_durable(&self.state_path, &st.encoded)?;
        }
        write_durable(&self.path, link_file)
    }

    /// Remove what [`UploadPlan::write`] wrote (a loser's or a refused file).
    fn remove_files(&self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_file(&self.state_path);
    }
}

/// The answer to an upload of `unit_id` whose attempt is no longer wanted,
/// given before anything of it is decoded: its result is in already
/// (`Done`, `Partial`) or another copy's went on (`Aborted`): `Duplicate`;
/// the host gave it back, its result was refused, or the host no longer
/// held it (`Failed`, `Released`): `Rejected`. A `Running` attempt is
/// wanted, and so is an `Expired` one: a late result for a job still open
/// (at the same position, which the caller checks) is accepted, so a host
/// that slept keeps its work.
fn unwanted_upload(job: &JobRecord, unit_id: u64) -> Option<UploadOutcome> {
    let a = job.attempts.iter().find(|a| a.unit_id == unit_id)?;
    match &a.state {
        AttemptState::Running | AttemptState::Expired => None,
        AttemptState::Done | AttemptState::Partial | AttemptState::Aborted => {
            Some(UploadOutcome::Duplicate)
        }
        AttemptState::Failed(_) => Some(UploadOutcome::Rejected(format!(
            "unit {unit_id} was given back or its result refused: it is not wanted any more"
        ))),
        AttemptState::Released => Some(UploadOutcome::Rejected(format!(
            "unit {unit_id} was released (the host no longer held it): it is not wanted any more"
        ))),
    }
}

/// A host's slots as learned: its benchmark's (bounded when stored), else
/// the default.
fn host_slots(h: &HostRecord) -> u32 {
    h.benchmark
        .as_ref()
        .map(|b| b.slots)
        .filter(|s| *s > 0)
        .unwrap_or(scheduler::DEFAULT_HOST_SLOTS)
}

/// Most units a host of `slots` (as learned: its benchmark's, bounded) may
/// hold at once: a scanning unit and a buffer per slot, at most
/// [`MAX_UNITS_HELD_PER_HOST`].
pub fn held_cap(slots: u32) -> usize {
    (slots.max(1) as usize)
        .saturating_mul(MAX_UNITS_PER_SLOT)
        .min(MAX_UNITS_HELD_PER_HOST)
}

/// Hex digits of an invite's id: the start of its token's SHA-256, enough to
/// tell invites apart and nothing of the token itself.
pub const INVITE_ID_LEN: usize = 16;
/// Fewest hex digits `invite revoke` takes (a prefix of the id).
pub const MIN_INVITE_ID_LEN: usize = 6;

/// An invite's id: the first [`INVITE_ID_LEN`] hex digits of its token's hash.
pub fn invite_id(token_sha256: &[u8; 32]) -> String {
    hex::encode(&token_sha256[..INVITE_ID_LEN / 2])
}

/// Whether a scan stopped before its natural end (so its job goes on).
pub fn stopped_early(summary: &ScanSummary) -> bool {
    summary.stopped_by.is_some_and(|s| !s.is_natural_end())
}

/// Expected seconds of a job's next scan on a host of `speed`: what is left
/// of its expected pages at the host's cost (never faster than the pace its
/// last scan showed, Crawl-delay included); for a site never scanned before,
/// what the round's limits allow (the page cap at that cost), not a guess.
/// Never more than the round's time budget, which ends any scan.
fn scan_expected_s(job: &JobRecord, p: &RoundParams, speed: Option<f64>) -> f64 {
    let mut cost = scheduler::seconds_per_page(speed, p.delay_ms as f64 / 1000.0);
    if let Some(seg) = job.segments.last().filter(|s| s.summary.pages > 0) {
        cost = cost.max(seg.summary.elapsed_ms as f64 / 1000.0 / seg.summary.pages as f64);
    }
    let pages = if job.size_known {
        job.est_pages
    } else {
        (f64::from(p.max_pages) - job.pages_done() as f64).max(1.0)
    };
    let s = pages * cost;
    if p.max_seconds > 0 {
        s.min(p.max_seconds as f64)
    } else {
        s
    }
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
    /// Consecutive valid results after which a host is trusted.
    pub trust_after: u32,
    /// Share of a trusted host's results still checked, percent.
    pub spot_check_percent: u32,
}

/// Counters for `status`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GridStatus {
    pub sites: usize,
    pub hosts: usize,
    pub hosts_revoked: usize,
    /// Hosts that left by themselves (`beebot leave`); not in `hosts_revoked`.
    #[serde(default)]
    pub hosts_left: usize,
    pub rounds_running: usize,
    pub jobs_queued: usize,
    pub jobs_running: usize,
    pub jobs_done: usize,
    pub jobs_failed: usize,
    /// Jobs of a cancelled round that were not over when it was cancelled.
    #[serde(default)]
    pub jobs_cancelled: usize,
    /// The rounds whose jobs the counts are: the running ones, or when none
    /// runs, the newest.
    #[serde(default)]
    pub jobs_rounds: Vec<u64>,
    /// The newest round that is over, and how completely it scanned its sites.
    pub last_round: Option<RoundOutcome>,
}

/// How completely a finished round scanned its sites.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RoundOutcome {
    pub id: u64,
    pub state: String,
    pub sites: usize,
    /// Sites scanned to their natural end.
    pub complete: usize,
    /// Sites that were not (failed, robots unavailable, ...): `round show` says why.
    pub incomplete: usize,
    /// Of those, sites whose job failed (every attempt ended without a
    /// result: the name did not resolve, the connection was refused, ...).
    #[serde(default)]
    pub failed: usize,
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
    /// Hosts excluded from crawling, keyed by the host's
    /// [`reversed_labels`] (the exclusions under a scope's root are a range).
    exclusions: BTreeMap<String, ExclusionRecord>,
    /// unit id → job id
    units: HashMap<u64, u64>,
    /// The open jobs of each running round, kept in step with `jobs` by
    /// [`Grid::reindex`].
    open: HashMap<u64, OpenJobs>,
    /// Rounds started or cancelled since the grid opened: the server tells
    /// connected hosts when it changes (see [`Grid::rounds_changed`]).
    rounds_changed: u64,
    /// Running units asked to hand their scan over (unit id → the host that
    /// wanted a copy): their next `Progress` is answered
    /// [`ABORT_HAND_OVER`]. Kept in memory only: after a restart the
    /// scheduler asks again.
    hand_overs: HashMap<u64, u64>,
    /// Jobs handed over (job id → the host that handed its scan over): the
    /// continuation goes to another host while one is online.
    handed_from: HashMap<u64, u64>,
    /// Reaches ([`reach_key`]) whose scan uploaded lately, with the time
    /// the round's delay has passed since: no job of a site that shares
    /// a host starts before (a continuation, or the next job of the host).
    settling: HashMap<(String, bool), u64>,
}

/// A running round's queued and running jobs, so that a work request, an
/// upload and a tick cost what is open now, not a walk over every job of
/// every round ever run.
#[derive(Clone, Debug, Default, PartialEq)]
struct OpenJobs {
    /// Queued jobs as the scheduler sees them, in list order (job ids grow
    /// with it), `failed_here` unset: it is filled in per asking host.
    queue: Vec<JobView>,
    /// Jobs with a running attempt.
    running: BTreeSet<u64>,
    /// Open jobs each host failed (an attempt expired or given back).
    failed_by: HashMap<u64, BTreeSet<u64>>,
    /// Open jobs whose results are being checked, with the hosts that may
    /// not take them (the results' authors).
    checks: BTreeMap<u64, Vec<u64>>,
    /// Queued jobs by their site's reach ([`reach_key`] → job id → whether
    /// every name under it is inside): a job whose reach meets a running
    /// job's waits, so no host is scanned by two jobs at once.
    reach: BTreeMap<String, BTreeMap<u64, bool>>,
}

/// The sites of `targets` that a wider site's scope covers
/// ([`SiteScope::covers_site`]), each with the widest site covering it (of
/// sites with the same reach, the first in the target set's order keeps its
/// job): a round gives them no job of their own, so no host is crawled by two
/// jobs of one round. Linear in the sites and their names' labels.
fn fold_covered_sites(targets: &[&SiteRecord], scope: Scope) -> Vec<FoldedSite> {
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

/// A site's reach ([`SiteScope::reach`]) as a key whose names under a root
/// sort right after it: labels reversed (`cs.example.edu` is
/// `edu.example.cs`), ports dropped.
fn reach_key(site: &str, scope: Scope) -> (String, bool) {
    let s = SiteScope::new(site, scope);
    let (root, all_under) = s.reach();
    let key: Vec<&str> = root.rsplit('.').collect();
    (key.join("."), all_under)
}

/// The one running copy of `job` that could hand its scan over to `asker`:
/// on another host, scanning, with pages of its own taken (a unit still
/// waiting in a host's buffer crawls nothing, and one that stopped at once
/// would be a failed attempt).
fn hand_over_from(job: &JobRecord, asker: u64) -> Option<&Attempt> {
    let mut running = job.running_attempts();
    let (Some(a), None) = (running.next(), running.next()) else {
        return None;
    };
    // Pages of the scans it continues from (progress counts the unit's).
    let pages_before = (a.resume_seq as usize)
        .checked_sub(1)
        .and_then(|k| job.segments.get(k))
        .map_or(0, |s| s.pages_done);
    let scanning = a.first_report_ms != 0 && a.pages > pages_before;
    (a.host_id != asker && scanning && !job.is_behind(a)).then_some(a)
}

/// Whether two reaches ([`reach_key`]) share a host name.
fn reaches_meet(a: &(String, bool), b: &(String, bool)) -> bool {
    let under = |x: &str, root: &str| {
        x.len() > root.len() && x.starts_with(root) && x.as_bytes()[root.len()] == b'.'
    };
    a.0 == b.0 || (a.1 && under(&b.0, &a.0)) || (b.1 && under(&a.0, &b.0))
}

/// Queued jobs of `reach` (an index of [`OpenJobs::reach`]) whose reach
/// meets `busy`'s: O(labels × log n) plus the jobs found.
fn queued_meeting(
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
fn failed_by(job: &JobRecord, host_id: u64) -> bool {
    job.attempts
        .iter()
        .any(|a| a.host_id == host_id && a.state.ended_without_result())
}

fn push_reason(job: &mut JobRecord, reason: String) {
    let mut r = reason;
    truncate_on_char(&mut r, MAX_TEXT_LEN);
    if job.reasons.len() >= MAX_REASONS_PER_JOB {
        job.reasons.remove(0);
    }
    job.reasons.push(r);
}

/// Two host names are one (`Alice` and `alice ` would be told apart by
/// nobody reading `hosts list`).
fn same_name(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// Write `data` to `path` durably: temporary name, fsync, rename, fsync the
/// dir. Each call writes its own temporary file, so concurrent writers of
/// one path each rename a whole file into place.
pub fn write_durable(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("path has no parent"))?;
    beebot_shared::util::create_private_dir(dir)?;
    beebot_shared::durable::write(path, data)
}

/// Visit the link records of a job: the union of its scans' link files
/// (segments and the final scan), each (source, target) once, in scan order.
/// Records stream from each file (bounded by the link-file decoder), and the
/// pairs already seen are kept as 8-byte digests, not strings: a job of many
/// continuations costs its record count × 8 bytes, not its text.
pub fn for_each_job_link(
    links_dir: &Path,
    job: &JobRecord,
    mut f: impl FnMut(&linkfile::LinkRecord) -> Result<(), String>,
) -> Result<(), String> {
    let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for file in job.link_files() {
        let path = links_dir.join(file);
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut failed = None;
        let decoded = linkfile::for_each_record(&bytes, |r| {
            let key = sha256(format!("{}\n{}", r.source_url, r.target_url).as_bytes());
            let digest = u64::from_le_bytes([
                key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
            ]);
            if seen.insert(digest) {
                if let Err(e) = f(&r) {
                    failed = Some(e);
                    return Err(linkfile::LinkFileError::Refused(
                        "the export stopped".into(),
                    ));
                }
            }
            Ok(())
        });
        if let Some(e) = failed {
            return Err(e);
        }
        decoded.map_err(|e| format!("{}: {e}", path.display()))?;
    }
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
            exclusions: BTreeMap::new(),
            units: HashMap::new(),
            open: HashMap::new(),
            rounds_changed: 0,
            hand_overs: HashMap::new(),
            handed_from: HashMap::new(),
            settling: HashMap::new(),
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
        for e in g.store.exclusions()? {
            g.exclusions.insert(reversed_labels(&e.exclusion.host), e);
        }
        let running: Vec<u64> = g
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .flat_map(|r| r.job_ids.iter().copied())
            .collect();
        for id in running {
            g.reindex(id);
        }
        // Link files a crash interrupted mid-write (each write has its own
        // temporary name) are removed, so crashes cannot pile them up.
        let rounds: Vec<u64> = g
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| r.id)
            .collect();
        for round_id in rounds {
            let dir = g.links_dir.join(round_id.to_string());
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|x| x == "tmp") {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        Ok(g)
    }

    /// Bring the index of open jobs in step with job `job_id` after a change.
    fn reindex(&mut self, job_id: u64) {
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

    /// Debug builds check that the index of open jobs equals one built
    /// afresh from the jobs.
    fn check_open(&self) {
        #[cfg(debug_assertions)]
        assert_eq!(self.open, self.open_from_scratch(), "index of open jobs");
    }

    /// The index of open jobs, built afresh from the jobs.
    #[cfg(debug_assertions)]
    fn open_from_scratch(&self) -> HashMap<u64, OpenJobs> {
        let mut g = Grid {
            store: self.store.clone(),
            links_dir: PathBuf::new(),
            project_key: self.project_key.clone(),
            settings: self.settings.clone(),
            sites: BTreeMap::new(),
            rounds: self.rounds.clone(),
            jobs: self.jobs.clone(),
            hosts: BTreeMap::new(),
            invites: HashMap::new(),
            exclusions: BTreeMap::new(),
            units: HashMap::new(),
            open: HashMap::new(),
            rounds_changed: 0,
            hand_overs: HashMap::new(),
            handed_from: HashMap::new(),
            settling: HashMap::new(),
        };
        let ids: Vec<u64> = g.jobs.keys().copied().collect();
        for id in ids {
            g.reindex(id);
        }
        g.open
    }

    /// Ids of the running jobs of every running round, in id order.
    fn running_job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| o.running.iter().copied())
            .collect();
        ids.sort_unstable();
        ids
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
        if let Some((h, e)) = hosts
            .iter()
            .find_map(|h| self.excluded_by(h).map(|e| (h, e)))
        {
            return Err(GridError::Invalid(excluded_message(h, e)));
        }
        // `www.x.edu` and `x.edu` are one site: one of them is kept.
        let mut keys: HashMap<String, &str> = self
            .sites
            .keys()
            .map(|h| (site_key(h), h.as_str()))
            .collect();
        for h in hosts {
            match keys.get(&site_key(h)) {
                Some(existing) if *existing != h.as_str() => {
                    return Err(GridError::SameSite {
                        given: h.clone(),
                        existing: existing.to_string(),
                        where_: if self.sites.contains_key(*existing) {
                            "already in the target set"
                        } else {
                            "given before it"
                        },
                    })
                }
                _ => {}
            }
            keys.insert(site_key(h), h.as_str());
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

    /// Remove the site `host` names (`x.edu` removes `www.x.edu`: one
    /// site); returns the one removed.
    pub fn remove_site(&mut self, host: &str) -> Result<Option<String>, GridError> {
        let key = site_key(host);
        let Some(stored) = self.sites.keys().find(|h| site_key(h) == key).cloned() else {
            return Ok(None);
        };
        self.sites.remove(&stored);
        self.store.remove_site(&stored)?;
        self.store.flush()?;
        Ok(Some(stored))
    }

    pub fn sites(&self) -> Vec<SiteRecord> {
        self.sites.values().cloned().collect()
    }

    /// [`Grid::add_sites`] for the hosts no exclusion covers; the others are
    /// refused one by one: `(index in hosts, host, its exclusion)`.
    #[allow(clippy::type_complexity)]
    pub fn add_sites_except_excluded(
        &mut self,
        hosts: &[String],
        now_ms: u64,
    ) -> Result<(usize, Vec<(usize, String, ExclusionRecord)>), GridError> {
        let mut refused = Vec::new();
        let mut allowed = Vec::with_capacity(hosts.len());
        for (i, h) in hosts.iter().enumerate() {
            match self.excluded_by(h) {
                Some(e) => refused.push((i, h.clone(), e.clone())),
                None => allowed.push(h.clone()),
            }
        }
        let added = self.add_sites(&allowed, now_ms)?;
        Ok((added, refused))
    }

    // ---- exclusions ----

    /// The exclusion that covers `host` (a site, maybe with a port), if any:
    /// one for the host itself (`www.` and the bare host alike), or one
    /// with subdomains for a name above it.
    pub fn excluded_by(&self, host: &str) -> Option<&ExclusionRecord> {
        if self.exclusions.is_empty() {
            return None; // (round starts and imports parse no host then)
        }
        let e = Exclusion::parse(host, false).ok()?;
        if let Some(r) = self.exclusions.get(&reversed_labels(&e.host)) {
            return Some(r);
        }
        let mut rest = e.host.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(r) = self
                .exclusions
                .get(&reversed_labels(parent))
                .filter(|r| r.exclusion.subdomains)
            {
                return Some(r);
            }
            rest = parent;
        }
        None
    }

    /// The exclusions of hosts at or under `root`, in key order.
    fn exclusions_under<'a>(&'a self, root: &str) -> impl Iterator<Item = &'a ExclusionRecord> {
        let key = reversed_labels(root);
        let prefix = format!("{key}.");
        self.exclusions.get(&key).into_iter().chain(
            self.exclusions
                .range(prefix.clone()..)
                .take_while(move |(k, _)| k.starts_with(&prefix))
                .map(|(_, r)| r),
        )
    }

    /// The scope a unit of `site` is issued with and the exclusions it
    /// carries: the round's scope with the exclusions at or under its root,
    /// or `host` scope (which reaches no other host) when more than
    /// [`MAX_UNIT_EXCLUSIONS`] lie there.
    pub fn unit_scope(&self, site: &str, scope: Scope) -> (Scope, Vec<Exclusion>) {
        let site_scope = SiteScope::new(site, scope);
        let Some(root) = site_scope.root() else {
            return (scope, Vec::new());
        };
        let inside: Vec<Exclusion> = self
            .exclusions_under(root)
            .take(MAX_UNIT_EXCLUSIONS + 1)
            .map(|r| r.exclusion.clone())
            .collect();
        if inside.len() > MAX_UNIT_EXCLUSIONS {
            (Scope::Host, Vec::new())
        } else {
            (scope, inside)
        }
    }

    /// Every exclusion, a host before its subdomains.
    pub fn exclusions(&self) -> Vec<ExclusionRecord> {
        self.exclusions.values().cloned().collect()
    }

    /// Exclude a host from crawling (a site owner asked). The sites it
    /// covers leave the target set; their open jobs in running rounds fail
    /// with the reason `excluded` (running copies are aborted, and their
    /// hosts told to drop them); running copies of other jobs whose scope
    /// reaches the host are aborted and their jobs queued again, so they go
    /// on with units that carry the exclusion. Excluding a host again
    /// replaces its reason and date.
    pub fn exclude(
        &mut self,
        exclusion: Exclusion,
        reason: &str,
        now_ms: u64,
    ) -> Result<ExcludeOutcome, GridError> {
        if reason.chars().count() > MAX_EXCLUSION_REASON_CHARS {
            return Err(GridError::Invalid(format!(
                "the reason is {} characters long; at most {MAX_EXCLUSION_REASON_CHARS} are kept",
                reason.chars().count()
            )));
        }
        let reason = collapse_whitespace(reason, MAX_EXCLUSION_REASON_CHARS);
        if reason.is_empty() {
            return Err(GridError::Invalid(
                "say why the host is excluded (--reason, e.g. \"owner asked, ticket 42\")".into(),
            ));
        }
        let key = reversed_labels(&exclusion.host);
        let replaced = self.exclusions.get(&key).cloned();
        if replaced.is_none() && self.exclusions.len() >= MAX_EXCLUSIONS {
            return Err(GridError::Invalid(format!(
                "at most {MAX_EXCLUSIONS} hosts may be excluded"
            )));
        }
        let record = ExclusionRecord {
            exclusion,
            reason,
            excluded_ms: now_ms,
        };
        self.store.put_exclusion(&record)?;
        self.exclusions.insert(key, record.clone());
        let e = &record.exclusion;
        let sites_removed: Vec<String> = self
            .sites
            .keys()
            .filter(|h| e.covers_host(h))
            .cloned()
            .collect();
        for h in &sites_removed {
            self.sites.remove(h);
            self.store.remove_site(h)?;
        }
        let running: Vec<u64> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| r.id)
            .collect();
        let (mut jobs_excluded, mut copies_restarted) = (0, 0);
        for round_id in running {
            let Some(round) = self.rounds.get(&round_id) else {
                continue;
            };
            let scope = round.params.scope;
            let ids = round.job_ids.clone();
            for id in ids {
                let Some(job) = self.jobs.get_mut(&id) else {
                    continue;
                };
                if job.state.is_final() {
                    continue;
                }
                let covered = e.covers_host(&job.site);
                // A copy running with an older list of exclusions must not go on.
                let reached = !covered
                    && SiteScope::new(&job.site, scope).root().is_some_and(|root| {
                        Exclusion {
                            host: root.to_string(),
                            subdomains: true,
                        }
                        .covers_host(&e.host)
                    });
                if !covered && !reached {
                    continue;
                }
                let mut aborted = 0;
                for a in job.attempts.iter_mut() {
                    if a.state == AttemptState::Running {
                        a.state = AttemptState::Aborted;
                        aborted += 1;
                    }
                }
                if covered {
                    job.state = JobState::Failed;
                    push_reason(job, format!("{EXCLUDED_REASON}: {}", record.reason));
                    jobs_excluded += 1;
                } else if aborted > 0 {
                    job.state = JobState::Queued;
                    copies_restarted += aborted;
                } else {
                    continue;
                }
                let job = job.clone();
                self.store.put_job(&job)?;
                if job.state.is_final() {
                    self.drop_states(&job);
                }
                self.reindex(id);
            }
            self.check_round_done(round_id, now_ms)?;
        }
        if jobs_excluded + copies_restarted > 0 {
            // Connected hosts ask again at once and hear which units to drop.
            self.rounds_changed += 1;
        }
        self.store.flush()?;
        Ok(ExcludeOutcome {
            record,
            replaced,
            sites_removed,
            jobs_excluded,
            copies_restarted,
        })
    }

    /// Lift the exclusion of `exclusion.host` (with or without its
    /// subdomains); returns it. The host's sites are not added back.
    pub fn include(&mut self, exclusion: &Exclusion) -> Result<ExclusionRecord, GridError> {
        let key = reversed_labels(&exclusion.host);
        let Some(record) = self.exclusions.get(&key).cloned() else {
            return Err(match self.excluded_by(&exclusion.host) {
                Some(above) => GridError::Invalid(format!(
                    "{} is excluded as part of {} ({}): lift that with `sites include {}`",
                    exclusion.host,
                    above.exclusion.display(),
                    above.reason,
                    above.exclusion.display()
                )),
                None => GridError::Invalid(format!(
                    "{} is not excluded (see `sites exclusions`)",
                    exclusion.host
                )),
            });
        };
        self.store.remove_exclusion(&record.exclusion.host)?;
        self.exclusions.remove(&key);
        self.store.flush()?;
        Ok(record)
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

    /// Every invite, oldest first, each with its id (never the token: the
    /// grid keeps only the token's hash).
    pub fn invites(&self) -> Vec<(String, InviteRecord)> {
        let mut all: Vec<(String, InviteRecord)> = self
            .invites
            .values()
            .map(|i| (invite_id(&i.token_sha256), i.clone()))
            .collect();
        all.sort_by(|a, b| (a.1.created_ms, &a.0).cmp(&(b.1.created_ms, &b.0)));
        all
    }

    /// Revoke the invite whose id starts with `id` (at least
    /// [`MIN_INVITE_ID_LEN`] hex digits, naming one invite): it is deleted, so
    /// nobody joins with it any more. Returns the revoked invite's full id.
    pub fn revoke_invite(&mut self, id: &str) -> Result<String, GridError> {
        let id = id.trim().to_ascii_lowercase();
        if id.len() < MIN_INVITE_ID_LEN || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GridError::Invalid(format!(
                "an invite id is at least {MIN_INVITE_ID_LEN} hex digits (see `invite list`)"
            )));
        }
        let mut found = self
            .invites
            .keys()
            .filter(|h| invite_id(h).starts_with(&id))
            .copied();
        let hash = found.next().ok_or(GridError::UnknownInvite(id.clone()))?;
        if found.next().is_some() {
            return Err(GridError::Invalid(format!(
                "invite id {id} names more than one invite: give more digits"
            )));
        }
        self.store.remove_invite(&hash)?;
        self.store.flush()?;
        self.invites.remove(&hash);
        Ok(invite_id(&hash))
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
        // Names tell hosts apart (`hosts revoke NAME`); one that left or was
        // revoked gives its name up.
        if let Some(h) = self.hosts.values().find(|h| {
            !h.revoked && !info.name.trim().is_empty() && same_name(&h.info.name, &info.name)
        }) {
            return Err(GridError::NameTaken {
                name: info.name.clone(),
                host_id: h.id,
            });
        }
        let mut inv = inv.clone();
        inv.uses_left -= 1;
        truncate_on_char(&mut info.name, MAX_TEXT_LEN);
        truncate_on_char(&mut info.os, MAX_TEXT_LEN);
        truncate_on_char(&mut info.client_version, MAX_TEXT_LEN);
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
            avg_pages_per_s: None,
            avg_kb_per_s: None,
            bytes_done: 0,
            offline_ms: 0,
            last_missed_ms: 0,
            consecutive_valid: 0,
            valid_results: 0,
            invalid_results: 0,
            left_ms: None,
        };
        self.store.put_invite(&inv)?;
        self.store.put_host(&host)?;
        self.store.flush()?;
        self.invites.insert(hash, inv);
        self.hosts.insert(id, host);
        Ok(id)
    }

    /// A host's name, for log lines.
    pub fn host_name(&self, host_id: u64) -> Option<String> {
        self.hosts.get(&host_id).map(|h| h.info.name.clone())
    }

    /// The host `id_or_name` names: an id, else the one active host of that
    /// name (a name only revoked hosts had names the newest of them).
    pub fn find_host(&self, id_or_name: &str) -> Result<u64, GridError> {
        let given = id_or_name.trim();
        if let Ok(id) = given.parse::<u64>() {
            if self.hosts.contains_key(&id) {
                return Ok(id);
            }
        }
        let named: Vec<&HostRecord> = self
            .hosts
            .values()
            .filter(|h| same_name(&h.info.name, given))
            .collect();
        let active: Vec<u64> = named.iter().filter(|h| !h.revoked).map(|h| h.id).collect();
        match (active.as_slice(), named.last()) {
            ([id], _) => Ok(*id),
            ([], Some(h)) => Ok(h.id),
            ([], None) => match given.parse::<u64>() {
                Ok(id) => Err(GridError::UnknownHost(id)),
                Err(_) => Err(GridError::UnknownHostName(given.to_string())),
            },
            (ids, _) => Err(GridError::AmbiguousHostName {
                name: given.to_string(),
                ids: ids.to_vec(),
            }),
        }
    }

    /// The key of an active host, for checking its proof.
    /// The key a host enrolled with, revoked or not (`Hello` checks the
    /// proof before it says anything else about the host).
    pub fn enrolled_key(&self, host_id: u64) -> Option<[u8; 32]> {
        self.hosts.get(&host_id).map(|h| h.key)
    }

    fn active_host(&mut self, host_id: u64, now_ms: u64) -> Result<&mut HostRecord, GridError> {
        let h = self
            .hosts
            .get_mut(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        if h.revoked {
            return Err(GridError::Revoked(host_id));
        }
        // A silence longer than the online window was time away.
        let gap = now_ms.saturating_sub(h.last_seen_ms);
        if gap > scheduler::ONLINE_WINDOW_MS {
            h.offline_ms = h.offline_ms.saturating_add(gap);
        }
        h.last_seen_ms = h.last_seen_ms.max(now_ms);
        Ok(h)
    }

    /// Note a host's successful `Hello`.
    pub fn hello(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let h = self.active_host(host_id, now_ms)?.clone();
        self.store.put_host(&h)?;
        self.store.flush()?;
        Ok(())
    }

    /// Note a host's reference-site benchmark. Figures that are not finite
    /// or are negative are refused; figures past [`MAX_BENCHMARK_PAGES_PER_S`],
    /// [`MAX_BENCHMARK_KB_PER_S`] and [`MAX_SLOTS`](beebot_shared::limits::MAX_SLOTS)
    /// are clamped to them.
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
        // Claims past what any host reaches are clamped, not refused: an
        // honest fast host keeps its benchmark, a liar gains nothing beyond
        // the bounds.
        h.benchmark = Some(Benchmark {
            pages_per_s: pages_per_s.min(MAX_BENCHMARK_PAGES_PER_S),
            kb_per_s: kb_per_s.min(MAX_BENCHMARK_KB_PER_S),
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

    /// A host leaves: like a revocation (refused from now on, its units
    /// back in the queue), asked for by the host itself and recorded as left.
    pub fn leave(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let host = self.active_host(host_id, now_ms)?;
        host.left_ms = Some(now_ms);
        let name = host.info.name.clone();
        tracing::info!(host_id, host = ?name, "host left the project");
        self.revoke(host_id, now_ms)
    }

    /// Count a host as trusted from now on, as if it had returned enough
    /// valid results in a row (the simulator's steady state).
    pub fn set_trusted(&mut self, host_id: u64) -> Result<(), GridError> {
        let trust_after = self.settings.trust_after;
        if let Some(h) = self.hosts.get_mut(&host_id) {
            h.consecutive_valid = h.consecutive_valid.max(trust_after);
            let h = h.clone();
            self.store.put_host(&h)?;
        }
        Ok(())
    }

    /// Every host with whether it is trusted (`hosts list`).
    pub fn host_lines(&self) -> Vec<crate::api::HostLine> {
        self.hosts
            .values()
            .map(|h| crate::api::HostLine {
                host: h.clone(),
                trusted: h.consecutive_valid >= self.settings.trust_after,
            })
            .collect()
    }

    pub fn hosts(&self) -> Vec<HostRecord> {
        self.hosts.values().cloned().collect()
    }

    /// Release the host's running attempts not in `keep` (all when `None`).
    fn release_host_units(
        &mut self,
        host_id: u64,
        keep: Option<&[u64]>,
        now_ms: u64,
    ) -> Result<(), GridError> {
        let mut changed = Vec::new();
        for id in self.running_job_ids() {
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

    // ---- rounds ----

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
        if params.max_crawl_delay_ms > MAX_DELAY_MS {
            return Err(GridError::Invalid(format!(
                "the Crawl-delay maximum must be at most {MAX_DELAY_MS} ms"
            )));
        }
        if params.delay_ms > MAX_DELAY_MS {
            return Err(GridError::Invalid(format!(
                "delay must be at most {MAX_DELAY_MS} ms"
            )));
        }
        if params.max_seconds == 0 {
            return Err(GridError::Invalid(
                "the scan time budget (max scan time) must be positive".into(),
            ));
        }
        if params.max_attempts == 0 || params.deadline_min_s == 0 {
            return Err(GridError::Invalid(
                "max attempts and minimum deadline must be positive".into(),
            ));
        }
        if every_ms == Some(0) {
            return Err(GridError::Invalid(
                "a repeat period must be positive".into(),
            ));
        }
        let policy = scheduler::policy_by_name(&params.policy)
            .ok_or_else(|| GridError::Invalid(format!("unknown policy `{}`", params.policy)))?;
        let round_id = self.store.next_id()?;
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
            let id = self.store.next_id()?;
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
        // A round-start plan (batch) over the hosts heard from lately.
        let views: Vec<JobView> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobView {
                job_id: j.id,
                order: i as u32,
                pages: j.est_pages,
                failed_here: false,
                size_known: j.size_known,
                assigned: None,
            })
            .collect();
        let (hosts, _, _) = self.host_views(now_ms);
        let recent: Vec<HostView> = hosts
            .into_iter()
            .filter(|h| now_ms.saturating_sub(h.last_seen_ms) <= PLAN_HOSTS_SEEN_WITHIN_MS)
            .collect();
        let plan: HashMap<u64, u64> = policy
            .plan(&views, &recent, params.delay_ms as f64 / 1000.0)
            .into_iter()
            .collect();
        let mut job_ids = Vec::with_capacity(jobs.len());
        for mut job in jobs {
            job.batch_host = plan.get(&job.id).copied();
            self.store.put_job(&job)?;
            job_ids.push(job.id);
            self.jobs.insert(job.id, job);
        }
        let round = RoundRecord {
            id: round_id,
            created_ms: now_ms,
            finished_ms: None,
            params,
            state: RoundState::Running,
            job_ids,
            every_ms,
            next_round: None,
            folded,
        };
        self.store.put_round(&round)?;
        self.store.flush()?;
        let job_ids = round.job_ids.clone();
        self.rounds.insert(round_id, round);
        for id in job_ids {
            self.reindex(id);
        }
        self.rounds_changed += 1;
        Ok(round_id)
    }

    /// Rounds started (by `round start` or a repeat) or cancelled since the
    /// grid opened: when this changes, work may wait for idle hosts, or
    /// hosts hold units they must drop.
    pub fn rounds_changed(&self) -> u64 {
        self.rounds_changed
    }

    /// The units of `held` that belong to a cancelled round, or that an
    /// exclusion stopped (see [`Grid::stopped_by_exclusion`]).
    fn cancelled_units(&self, held: &[u64]) -> Vec<u64> {
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
    fn stopped_by_exclusion(&self, unit_id: u64) -> bool {
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
        self.store.put_round(&round)?;
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
                    }
                }
                job.state = JobState::Cancelled;
                self.store.put_job(job)?;
            }
            let job = job.clone();
            self.drop_states(&job);
        }
        self.open.remove(&round_id);
        self.rounds_changed += 1;
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
    fn rounds_open(&self, now_ms: u64) -> bool {
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
    fn check_round_done(&mut self, round_id: u64, now_ms: u64) -> Result<(), GridError> {
        let Some(round) = self.rounds.get(&round_id) else {
            return Ok(());
        };
        if round.state != RoundState::Running {
            return Ok(());
        }
        let all_final = self
            .open
            .get(&round_id)
            .is_none_or(|o| o.queue.is_empty() && o.running.is_empty());
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
            self.store.put_round(&r)?;
            self.rounds.insert(round_id, r);
        }
        Ok(())
    }

    /// A host's pages per second on one slot: the running average of its real
    /// jobs, else its reference-site benchmark.
    fn host_speed(&self, host_id: u64) -> Option<f64> {
        let h = self.hosts.get(&host_id)?;
        h.avg_pages_per_s
            .or_else(|| h.benchmark.as_ref().map(|b| b.pages_per_s))
            .filter(|s| s.is_finite() && *s > 0.0)
            // What a host says of itself is believed up to a bound.
            .map(|s| s.min(MAX_HOST_PAGES_PER_S))
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
                self.store.put_round(&r)?;
            }
            started.push(new);
        }
        if !started.is_empty() {
            self.store.flush()?;
        }
        Ok(started)
    }

    /// The scheduler's view of every active host (sorted by id), with the
    /// expected end (seconds from now) of every running unit, by unit id, and
    /// the units each host holds (in issue order).
    #[allow(clippy::type_complexity)]
    fn host_views(
        &self,
        now_ms: u64,
    ) -> (
        Vec<HostView>,
        HashMap<u64, f64>,
        HashMap<u64, Vec<HeldUnit>>,
    ) {
        // Running units per host, from the running rounds.
        let mut held: HashMap<u64, Vec<((bool, u64, u64), HeldUnit)>> = HashMap::new();
        for r in self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
        {
            let delay_s = r.params.delay_ms as f64 / 1000.0;
            let Some(open) = self.open.get(&r.id) else {
                continue;
            };
            for job in open.running.iter().filter_map(|id| self.jobs.get(id)) {
                for a in job.running_attempts() {
                    let cost = scheduler::seconds_per_page(self.host_speed(a.host_id), delay_s);
                    // A scan that reports progress is timed by its own pace.
                    let unit = match scheduler::remaining_s(
                        job.est_pages,
                        (a.first_report_ms, a.first_report_pages),
                        (a.last_report_ms, a.pages),
                        now_ms,
                    ) {
                        Some(left) => HeldUnit {
                            issued_ms: now_ms,
                            expected_s: left,
                        },
                        None => HeldUnit {
                            issued_ms: a.issued_ms,
                            expected_s: job.est_pages * cost,
                        },
                    };
                    // Scanning units first (their slots are taken), then in issue order.
                    let key = (a.first_report_ms == 0, a.issued_ms, a.unit_id);
                    held.entry(a.host_id).or_default().push((key, unit));
                }
            }
        }
        let mut ends = HashMap::new();
        let mut by_host = HashMap::new();
        let mut views = Vec::with_capacity(self.hosts.len());
        for h in self.hosts.values().filter(|h| !h.revoked) {
            let mut units = held.remove(&h.id).unwrap_or_default();
            units.sort_by_key(|(key, _)| *key);
            let slots = host_slots(h);
            let plain: Vec<HeldUnit> = units.iter().map(|(_, u)| *u).collect();
            let sched = scheduler::slot_schedule(&plain, slots, now_ms);
            let online =
                scheduler::is_online(h.last_seen_ms, h.last_missed_ms, !units.is_empty(), now_ms);
            for (((_, _, unit), _), end) in units.iter().zip(&sched.ends_s) {
                ends.insert(*unit, if online { *end } else { f64::INFINITY });
            }
            views.push(HostView {
                host_id: h.id,
                pages_per_s: self.host_speed(h.id),
                slots,
                busy: units.len() as u32,
                free_at_s: sched.free_at_s,
                load_s: sched.load_s,
                online,
                availability: scheduler::availability(h.enrolled_ms, h.offline_ms, now_ms),
                last_seen_ms: h.last_seen_ms,
            });
            by_host.insert(h.id, plain);
        }
        (views, ends, by_host)
    }

    // ---- work ----

    /// Answer a host's work request.
    pub fn request_work(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        now_ms: u64,
    ) -> Result<WorkReply, GridError> {
        let host = self.active_host(host_id, now_ms)?.clone();
        self.store.put_host(&host)?;
        // Units the host no longer holds go back to the queue at once.
        self.release_host_units(host_id, Some(&req.units_held), now_ms)?;
        let cancelled_units = self.cancelled_units(&req.units_held);

        let speed = self.host_speed(host_id);
        // (job, replica?) in issue order.
        let mut chosen: Vec<(u64, bool)> = Vec::new();
        // Rounds in start order; each with its own policy.
        let running: Vec<(u64, RoundParams, u64)> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| (r.id, r.params.clone(), r.created_ms))
            .collect();
        let mut free = req.free_slots.min(MAX_UNITS_PER_REPLY as u32);
        let mut want = req.want_seconds as f64;
        let (hosts, ends, mut held) = if running.is_empty() {
            (Vec::new(), HashMap::new(), HashMap::new())
        } else {
            self.host_views(now_ms)
        };
        let asker = hosts.iter().position(|h| h.host_id == host_id);
        // Never more units held at once than the host's slots keep busy
        // (and its buffer), whatever it says is free.
        if asker.is_some() {
            let holds = held.get(&host_id).map_or(0, Vec::len);
            let room = self.units_cap(host_id).saturating_sub(holds);
            free = free.min(u32::try_from(room).unwrap_or(u32::MAX));
        }
        // A result is checked by another host than its authors: a trusted
        // one, while one that is not among them is online.
        let trusted_online: Vec<u64> = hosts
            .iter()
            .filter(|h| h.online && self.is_trusted(h.host_id))
            .map(|h| h.host_id)
            .collect();
        let asker_trusted = self.is_trusted(host_id);
        let may_check = |authors: &[u64]| {
            !authors.contains(&host_id)
                && (asker_trusted || trusted_online.iter().all(|t| authors.contains(t)))
        };
        // Hand-overs and handed-over jobs of the past are forgotten.
        self.prune_hand_overs();
        // The reach of every running job: a queued job whose reach meets
        // one waits (the same host from two sites, or a site in
        // subdomains/domain scope over another's host), so no host gets
        // two request streams from the grid.
        let mut busy: Vec<(String, bool)> = Vec::new();
        for (round_id, params, _) in &running {
            for id in self.open.get(round_id).into_iter().flat_map(|o| &o.running) {
                if let Some(j) = self.jobs.get(id) {
                    busy.push(reach_key(&j.site, params.scope));
                }
            }
        }
        // And a host whose scan uploaded less than the round's delay ago
        // (its last request came before) gets no new stream yet.
        self.settling.retain(|_, until| *until > now_ms);
        busy.extend(self.settling.keys().cloned());
        let others_online = hosts.iter().any(|h| h.online && h.host_id != host_id);
        // Running jobs whose scan the asker wants a copy of: handed over.
        let mut hand_over: Vec<u64> = Vec::new();
        for (round_id, params, started_ms) in &running {
            let Some(asker) = asker else { break };
            if free == 0 {
                break;
            }
            let Some(policy) = scheduler::policy_by_name(&params.policy) else {
                continue;
            };
            let Some(open) = self.open.get(round_id) else {
                continue;
            };
            // The queue as the index keeps it, with this host's failures marked.
            // (Borrowed as it is, unless this host failed some of it or
            // keeps windows: a deep queue is not copied for every request.)
            let mut queue: Cow<[JobView]> = Cow::Borrowed(&open.queue);
            for id in open.failed_by.get(&host_id).into_iter().flatten() {
                if let Ok(p) = queue.binary_search_by_key(id, |v| v.job_id) {
                    queue.to_mut()[p].failed_here = true;
                }
            }
            let mut barred: BTreeSet<u64> = open
                .checks
                .iter()
                .filter(|(_, authors)| !may_check(authors))
                .map(|(id, _)| *id)
                .collect();
            // A job this host let expire or gave back goes to another host
            // while one that has not failed it is online (as BOINC sends a
            // host no second result of a job): a host that hoards cannot
            // keep the last sites of a round to itself.
            for id in open.failed_by.get(&host_id).into_iter().flatten() {
                // Failed where the job stands now (not before a segment).
                let here = self.jobs.get(id).is_some_and(|j| {
                    j.attempts.iter().any(|a| {
                        a.host_id == host_id && j.is_current(a) && a.state.ended_without_result()
                    })
                });
                let someone_else = here
                    && hosts.iter().any(|h| {
                        h.online
                            && h.host_id != host_id
                            && !open
                                .failed_by
                                .get(&h.host_id)
                                .is_some_and(|f| f.contains(id))
                    });
                if someone_else {
                    barred.insert(*id);
                }
            }
            // A job this host handed over goes to another host while one
            // is online (else the hand-over gained nothing).
            for (job, from) in &self.handed_from {
                if *from == host_id && others_online {
                    barred.insert(*job);
                }
            }
            for b in &busy {
                queued_meeting(&open.reach, b, &mut barred);
            }
            for id in &barred {
                if let Ok(p) = queue.binary_search_by_key(id, |v| v.job_id) {
                    queue.to_mut().remove(p);
                }
            }
            let mut running_jobs: Vec<RunningView> = Vec::new();
            if policy.replicates() {
                // Only scans that can be handed over: a copy is never run
                // beside another (one silent is replaced at its deadline).
                for j in open
                    .running
                    .iter()
                    .filter_map(|id| self.jobs.get(id))
                    .filter(|j| hand_over_from(j, host_id).is_some())
                {
                    let copies: Vec<&Attempt> = j.running_attempts().collect();
                    running_jobs.push(RunningView {
                        job_id: j.id,
                        pages: j.est_pages,
                        copies: copies.len() as u32,
                        on_asker: copies.iter().any(|a| a.host_id == host_id),
                        failed_here: failed_by(j, host_id),
                        finish_s: copies
                            .iter()
                            .map(|a| ends.get(&a.unit_id).copied().unwrap_or(f64::INFINITY))
                            .fold(f64::INFINITY, f64::min),
                    });
                }
            }
            // Only work whose deadline the host can meet inside its open windows.
            if let Some(windows) = &req.open_windows {
                let cost = scheduler::seconds_per_page(speed, params.delay_ms as f64 / 1000.0);
                let rule = DeadlineRule {
                    slack: self.settings.deadline_slack,
                    grace_s: self.settings.deadline_grace_s,
                    min_s: params.deadline_min_s,
                    max_s: params.deadline_max_s,
                };
                queue
                    .to_mut()
                    .retain(|v| scheduler::fits_windows(windows, v.pages * cost, &rule));
            }
            let ctx = scheduler::Ctx {
                now_ms,
                round_started_ms: *started_ms,
                delay_s: params.delay_ms as f64 / 1000.0,
                queue: &queue,
                running: &running_jobs,
                hosts: &hosts,
                asker,
            };
            let ask = WorkAsk {
                want_seconds: want.max(0.0) as u64,
                free_slots: free,
            };
            let decision = policy.choose(&ctx, &ask);
            let cost = scheduler::seconds_per_page(speed, ctx.delay_s);
            for id in decision.jobs {
                if free == 0 {
                    break;
                }
                if let Ok(p) = queue.binary_search_by_key(&id, |v| v.job_id) {
                    let v = &queue[p];
                    // Two jobs chosen at once whose sites share a host: the
                    // later one waits.
                    let reach = self.jobs.get(&id).map(|j| reach_key(&j.site, params.scope));
                    let meets = reach
                        .as_ref()
                        .is_some_and(|r| busy.iter().any(|b| reaches_meet(b, r)));
                    if chosen.iter().all(|c| c.0 != id) && !meets {
                        want -= v.pages * cost;
                        chosen.push((id, false));
                        busy.extend(reach);
                        free -= 1;
                    }
                }
            }
            // A copy of a running job is wanted (a hedge or a tail replica):
            // never a second stream of requests to its site, but a hand-over.
            // The running copy stops at a page boundary and uploads what it
            // did with its frontier, and another host continues from there.
            for id in decision.replicas {
                let ok = !barred.contains(&id)
                    && running_jobs
                        .iter()
                        .any(|r| r.job_id == id && r.copies < scheduler::MAX_COPIES && !r.on_asker);
                if ok && !hand_over.contains(&id) {
                    hand_over.push(id);
                }
            }
        }

        for job_id in hand_over {
            self.ask_hand_over(job_id, host_id);
        }
        // Each unit's deadline counts the wait for a slot behind what the host holds.
        let slots = asker.map(|i| hosts[i].slots).unwrap_or(1);
        let mut mine = held.remove(&host_id).unwrap_or_default();
        let mut units = Vec::with_capacity(chosen.len());
        for (job_id, _) in chosen {
            // The continuation of a handed-over scan counts as the copy
            // the scheduler wanted.
            let replica = self.handed_from.remove(&job_id).is_some();
            let wait_s = scheduler::slot_schedule(&mine, slots, now_ms).free_at_s;
            let (unit, expected_s) = self.issue(job_id, host_id, speed, replica, wait_s, now_ms)?;
            mine.push(HeldUnit {
                issued_ms: now_ms,
                expected_s,
            });
            units.push(unit);
        }
        self.store.flush()?;
        self.check_open();
        let rounds_open = self.rounds_open(now_ms);
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
            cancelled_units,
        })
    }

    /// Ask the one running copy of `job_id` to hand its scan over, for
    /// `asker` (who wanted a copy). Only a scan that has taken pages (a
    /// unit still waiting in a host's buffer crawls nothing, and one that
    /// stopped at once would be a failed attempt).
    fn ask_hand_over(&mut self, job_id: u64, asker: u64) {
        let Some((unit_id, host)) = self
            .jobs
            .get(&job_id)
            .and_then(|j| hand_over_from(j, asker))
            .map(|a| (a.unit_id, a.host_id))
        else {
            return;
        };
        self.hand_overs.insert(unit_id, asker);
        self.handed_from.insert(job_id, host);
    }

    /// Whether another running job's site shares a host with `job`'s.
    fn meets_running_job(&self, job: &JobRecord) -> bool {
        let scope_of = |j: &JobRecord| self.rounds.get(&j.round_id).map(|r| r.params.scope);
        let Some(reach) = scope_of(job).map(|sc| reach_key(&job.site, sc)) else {
            return false;
        };
        self.running_job_ids()
            .iter()
            .filter(|id| **id != job.id)
            .filter_map(|id| self.jobs.get(id))
            .filter_map(|j| scope_of(j).map(|sc| reach_key(&j.site, sc)))
            .any(|r| reaches_meet(&r, &reach))
    }

    /// Forget hand-overs of units no longer running and handed-over jobs
    /// no longer open (both maps stay as small as the scans running).
    fn prune_hand_overs(&mut self) {
        let jobs = &self.jobs;
        let units = &self.units;
        self.hand_overs.retain(|unit, _| {
            units
                .get(unit)
                .and_then(|j| jobs.get(j))
                .is_some_and(|j| j.running_attempts().any(|a| a.unit_id == *unit))
        });
        self.handed_from.retain(|job, _| {
            jobs.get(job)
                .is_some_and(|j| matches!(j.state, JobState::Queued | JobState::Running))
        });
    }

    /// Create, record and sign one unit of a job (queued, or running when
    /// `replica`); its deadline counts `wait_s` for a free slot. Returns the
    /// unit and its expected scan seconds.
    fn issue(
        &mut self,
        job_id: u64,
        host_id: u64,
        speed: Option<f64>,
        replica: bool,
        wait_s: f64,
        now_ms: u64,
    ) -> Result<(SignedUnit, f64), GridError> {
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
        // A job whose attempts ran out is failed, never issued again.
        assert!(
            job.failed_attempts() < p.max_attempts as usize,
            "job {job_id} issued with {} attempts ended without a result (limit {})",
            job.failed_attempts(),
            p.max_attempts
        );
        let expected = scan_expected_s(job, p, speed);
        let resume = job.segments.last().map(|seg| ResumeFrom {
            state_sha256: seg.state_sha256,
            state_bytes: seg.state_bytes,
            pages_done: seg.pages_done,
        });
        let resume_seq = job.segments.len() as u32;
        let rule = DeadlineRule {
            slack: self.settings.deadline_slack,
            grace_s: self.settings.deadline_grace_s,
            min_s: p.deadline_min_s,
            max_s: p.deadline_max_s,
        };
        let deadline = scheduler::deadline_ms(now_ms, wait_s.max(0.0) + expected, &rule);
        let (scope, exclusions) = self.unit_scope(&job.site, p.scope);
        let unit = WorkUnit {
            unit_id,
            round_id: job.round_id,
            job_id,
            host_id,
            site: job.site.clone(),
            seed_url: beebot_shared::scope::seed_url(&job.site).to_string(),
            scope,
            limits: UnitLimits {
                max_pages: p.max_pages,
                max_depth: p.max_depth,
                delay_ms: p.delay_ms,
                max_page_bytes: p.max_page_bytes,
                max_seconds: p.max_seconds,
                max_crawl_delay_ms: p.max_crawl_delay_ms,
            },
            issued_ms: now_ms,
            deadline_ms: deadline,
            user_agent: self.settings.user_agent.clone(),
            resume,
            exclusions,
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
            window_ms: deadline.saturating_sub(now_ms),
            state: AttemptState::Running,
            pages: 0,
            links: 0,
            replica,
            first_report_ms: 0,
            first_report_pages: 0,
            last_report_ms: 0,
            resume_seq,
            chain: job.chain,
        });
        job.state = JobState::Running;
        let job = job.clone();
        self.store.put_job(&job)?;
        self.units.insert(unit_id, job_id);
        self.reindex(job_id);
        Ok((signed, expected))
    }

    /// Running attempts of `host_id`, across rounds.
    fn running_units_of(&self, host_id: u64) -> usize {
        self.running_job_ids()
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .flat_map(|j| j.running_attempts())
            .filter(|a| a.host_id == host_id)
            .count()
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
        match self.rounds.get(&job.round_id).map(|r| r.state) {
            Some(RoundState::Running) => {}
            Some(RoundState::Cancelled) => {
                return Ok(ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into()))
            }
            _ => return Ok(ProgressOutcome::Abort("round ended".into())),
        }
        match job.state {
            JobState::Done => return Ok(ProgressOutcome::Abort("job done elsewhere".into())),
            JobState::Failed if self.excluded_by(&job.site).is_some() => {
                return Ok(ProgressOutcome::Abort("site excluded".into()))
            }
            JobState::Failed => return Ok(ProgressOutcome::Abort("job failed".into())),
            JobState::Cancelled => return Ok(ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into())),
            JobState::Queued | JobState::Running => {}
        }
        let job_id = job.id;
        let max_pages = self
            .rounds
            .get(&job.round_id)
            .map_or(0, |r| u64::from(r.params.max_pages));
        // A unit back from sleep runs again only within the host's cap.
        let asleep = job.attempts.iter().any(|a| {
            a.unit_id == unit_id
                && matches!(a.state, AttemptState::Expired | AttemptState::Released)
        });
        let at_cap = asleep
            && self
                .hosts
                .get(&host_id)
                .is_some_and(|_| self.running_units_of(host_id) >= self.units_cap(host_id));
        // Nor beside another job of a site that shares a host with this one.
        let shares_host = asleep && self.meets_running_job(job);
        let Some(job) = self.jobs.get_mut(&job_id) else {
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
        let (seq, chain) = (job.attempts[i].resume_seq, job.attempts[i].chain);
        let behind = job.is_behind(&job.attempts[i]);
        // What the host says is bounded by what the unit allows (the page
        // cap left after the scans it continues from), and a count going
        // backwards is not believed.
        let pages_before = (seq as usize)
            .checked_sub(1)
            .and_then(|k| job.segments.get(k))
            .map_or(0, |s| s.pages_done);
        let pages = pages
            .min(max_pages.saturating_sub(pages_before))
            .max(job.attempts[i].pages);
        let links = links
            .min(MAX_LINK_RECORDS as u64)
            .max(job.attempts[i].links);
        let other_copy = job.attempts.iter().enumerate().any(|(j, o)| {
            j != i && o.state == AttemptState::Running && o.resume_seq == seq && o.chain == chain
        });
        let a = &mut job.attempts[i];
        match &a.state {
            AttemptState::Aborted | AttemptState::Partial | AttemptState::Done => {
                return Ok(ProgressOutcome::Abort(
                    "another copy's scan went on further".into(),
                ))
            }
            AttemptState::Failed(_) => {
                return Ok(ProgressOutcome::Abort("the unit was given back".into()))
            }
            _ if behind => {
                // Another copy's scan already went on from where this one started.
                let was_running = a.state == AttemptState::Running;
                a.state = AttemptState::Aborted;
                let job = job.clone();
                self.store.put_job(&job)?;
                if was_running {
                    self.after_attempt_ended(job_id, now_ms)?;
                }
                self.reindex(job_id);
                self.store.flush()?;
                return Ok(ProgressOutcome::Abort(
                    "another copy's scan went on further".into(),
                ));
            }
            AttemptState::Expired | AttemptState::Released if other_copy => {
                // The job went to another host while this one was away: one
                // scan of a site at a time.
                return Ok(ProgressOutcome::Abort(
                    "the scan was given to another host while this one was away".into(),
                ));
            }
            AttemptState::Expired | AttemptState::Released if shares_host => {
                return Ok(ProgressOutcome::Abort(
                    "another scan of the site's host started while this one was away".into(),
                ));
            }
            AttemptState::Expired | AttemptState::Released if at_cap => {
                return Ok(ProgressOutcome::Abort(
                    "the host holds as many units as its slots allow: this one was given up".into(),
                ));
            }
            AttemptState::Expired | AttemptState::Released => {
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
                self.store.put_job(&job)?;
                self.reindex(job_id);
                self.store.flush()?;
                self.check_open();
                return Ok(ProgressOutcome::Extend(d));
            }
            AttemptState::Running => {}
        }
        if a.first_report_ms == 0 {
            a.first_report_ms = now_ms;
            a.first_report_pages = pages;
        }
        let progressed = pages > a.pages || a.last_report_ms == 0;
        a.last_report_ms = a.last_report_ms.max(now_ms);
        a.pages = pages;
        a.links = links;
        if self.hand_overs.contains_key(&unit_id) {
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
            if let Some(h) = self.hosts.get_mut(&host_id) {
                h.failures += 1;
                let h = h.clone();
                self.store.put_host(&h)?;
            }
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
        if job.state.is_final() {
            self.drop_states(&job);
        }
        self.reindex(job_id);
        self.check_round_done(round_id, now_ms)
    }

    /// Expire every unit whose deadline has passed. Returns how many expired.
    pub fn tick(&mut self, now_ms: u64) -> Result<usize, GridError> {
        let mut expired: Vec<(u64, u64)> = Vec::new(); // (job, host)
        for id in self.running_job_ids() {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
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
                h.last_missed_ms = h.last_missed_ms.max(now_ms);
                let h = h.clone();
                self.store.put_host(&h)?;
            }
            self.after_attempt_ended(job_id, now_ms)?;
        }
        if !expired.is_empty() {
            self.store.flush()?;
        }
        self.check_open();
        Ok(expired.len())
    }

    /// A host delivers a unit's result. The link file is durable before
    /// `Accepted`. The server runs the three steps apart, so that the link
    /// file is verified and written outside the grid lock:
    /// [`Grid::upload_begin`], [`UploadPlan::verify`] and
    /// [`UploadPlan::write`], then [`Grid::upload_finish`] (or
    /// [`Grid::upload_refused`] when the file is refused).
    pub fn upload(
        &mut self,
        host_id: u64,
        unit_id: u64,
        summary: ScanSummary,
        link_file: &[u8],
        state: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        let plan = match self.upload_begin(host_id, unit_id, now_ms)? {
            UploadStep::Answer(o) => return Ok(o),
            UploadStep::Plan(p) => p,
        };
        let verified = match plan.verify(&summary, link_file, state) {
            Ok(v) => v,
            Err(reason) => return self.upload_refused(&plan, reason, now_ms),
        };
        plan.write(link_file, verified.state.as_ref())?;
        self.upload_finish(&plan, summary, verified, now_ms)
    }

    /// First step of an upload: is this unit the host's, and is its job
    /// still open? Writes nothing.
    pub fn upload_begin(
        &mut self,
        host_id: u64,
        unit_id: u64,
        now_ms: u64,
    ) -> Result<UploadStep, GridError> {
        self.active_host(host_id, now_ms)?;
        let job = match self.open_job_of(host_id, unit_id) {
            Ok(job) => job,
            Err(o) => return Ok(UploadStep::Answer(o)),
        };
        let scope = self
            .rounds
            .get(&job.round_id)
            .map(|r| r.params.scope)
            .unwrap_or_default();
        if let Some(o) = unwanted_upload(job, unit_id) {
            // Refused before anything of it is decoded.
            return Ok(UploadStep::Answer(o));
        }
        let Some(attempt) = job.attempts.iter().find(|a| a.unit_id == unit_id) else {
            return Ok(UploadStep::Answer(UploadOutcome::Rejected(format!(
                "unknown unit {unit_id}"
            ))));
        };
        let resume_seq = attempt.resume_seq;
        if job.segments.iter().any(|s| s.unit_id == unit_id) || job.is_behind(attempt) {
            // Its segment is kept already, or another copy went further from
            // where it started: nothing of it is written again.
            return Ok(UploadStep::Answer(UploadOutcome::Duplicate));
        }
        let pages_before = job
            .segments
            .get((resume_seq as usize).wrapping_sub(1))
            .map_or(0, |s| s.pages_done);
        let (max_depth, max_pages, delay_ms) =
            self.rounds.get(&job.round_id).map_or((0, 0, 0), |r| {
                let p = &r.params;
                (p.max_depth, u64::from(p.max_pages), p.delay_ms)
            });
        let excluded = self.unit_scope(&job.site, scope).1;
        Ok(UploadStep::Plan(UploadPlan {
            host_id,
            unit_id,
            job_id: job.id,
            round_id: job.round_id,
            site: job.site.clone(),
            excluded,
            scope,
            path: self
                .links_dir
                .join(job.round_id.to_string())
                .join(format!("{}-{unit_id}.lf", job.id)),
            rel: format!("{}/{}-{unit_id}.lf", job.round_id, job.id),
            state_path: self
                .links_dir
                .join(job.round_id.to_string())
                .join(format!("{}-{unit_id}.state", job.id)),
            state_rel: format!("{}/{}-{unit_id}.state", job.round_id, job.id),
            resume_seq,
            chain: attempt.chain,
            pages_before,
            max_depth,
            max_pages,
            delay_ms,
        }))
    }

    /// The job `unit_id` of `host_id` works on, while it is open; otherwise
    /// the answer to give (`Duplicate` once the job or its round is over).
    fn open_job_of(&self, host_id: u64, unit_id: u64) -> Result<&JobRecord, UploadOutcome> {
        let unknown = || UploadOutcome::Rejected(format!("unknown unit {unit_id}"));
        let job_id = *self.units.get(&unit_id).ok_or_else(unknown)?;
        let job = self.jobs.get(&job_id).ok_or_else(unknown)?;
        if !job
            .attempts
            .iter()
            .any(|a| a.unit_id == unit_id && a.host_id == host_id)
        {
            return Err(UploadOutcome::Rejected(format!(
                "unit {unit_id} was not issued to host {host_id}"
            )));
        }
        let round_state = self.rounds.get(&job.round_id).map(|r| r.state);
        if round_state == Some(RoundState::Cancelled) {
            // Dropped, and the host drops the round's other units.
            return Err(UploadOutcome::Rejected(ABORT_ROUND_CANCELLED.into()));
        }
        if job.state.is_final() || round_state != Some(RoundState::Running) {
            // Acknowledged and dropped: the job is finished (or its round ended).
            return Err(UploadOutcome::Duplicate);
        }
        Ok(job)
    }

    /// Last step of a refused upload: the attempt fails with `reason`.
    pub fn upload_refused(
        &mut self,
        plan: &UploadPlan,
        reason: String,
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        if let Err(o) = self.open_job_of(plan.host_id, plan.unit_id) {
            return Ok(o);
        }
        self.fail(plan.host_id, plan.unit_id, &reason, now_ms)?;
        Ok(UploadOutcome::Rejected(reason))
    }

    /// Last step of an upload whose link file is verified and durable. A
    /// scan that reached its natural end finishes the job; one that stopped
    /// early (with its frontier, `state`) becomes a segment of the job,
    /// which goes back to the queue to continue from there. Unless another
    /// copy finished the job or went further meanwhile (or its round ended):
    /// then the files written for this one are removed.
    pub fn upload_finish(
        &mut self,
        plan: &UploadPlan,
        summary: ScanSummary,
        verified: Verified,
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        let (host_id, unit_id) = (plan.host_id, plan.unit_id);
        self.active_host(host_id, now_ms)?;
        if let Err(o) = self.open_job_of(host_id, unit_id) {
            // Unless it is the winner's own file (the same unit uploaded twice).
            let kept = self
                .jobs
                .get(&plan.job_id)
                .is_some_and(|j| j.link_files().any(|f| f == plan.rel));
            if !kept {
                plan.remove_files();
            }
            return Ok(o);
        }
        let (job_id, round_id) = (plan.job_id, plan.round_id);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(UploadOutcome::Rejected(format!("unknown unit {unit_id}")));
        };
        if let Some(o @ UploadOutcome::Rejected(_)) = unwanted_upload(job, unit_id) {
            // Given back or released while its file was checked.
            plan.remove_files();
            return Ok(o);
        }
        if job.segments.iter().any(|s| s.unit_id == unit_id) {
            // This unit's segment, uploaded again.
            return Ok(UploadOutcome::Duplicate);
        }
        if (plan.resume_seq as usize) < job.segments.len() || plan.chain != job.chain {
            // Another copy's scan went on from the same place first (or the
            // job started over).
            plan.remove_files();
            for a in job.attempts.iter_mut() {
                if a.unit_id == unit_id && a.state == AttemptState::Running {
                    a.state = AttemptState::Aborted;
                }
            }
            let job = job.clone();
            self.store.put_job(&job)?;
            self.reindex(job_id);
            self.after_attempt_ended(job_id, now_ms)?;
            self.store.flush()?;
            return Ok(UploadOutcome::Duplicate);
        }
        let Verified { state, sketch } = verified;
        let early = state.filter(|_| stopped_early(&summary));
        if early.is_some() && summary.pages == 0 {
            // Nothing gained: an attempt that failed, not a segment.
            plan.remove_files();
            let reason = format!(
                "scan stopped early ({}) without a page",
                summary.stopped_by.map_or("-", |s| s.as_str())
            );
            self.fail(host_id, unit_id, &reason, now_ms)?;
            return Ok(UploadOutcome::Rejected(reason));
        }
        let failed_site = summary.stopped_by.filter(|s| s.is_site_failure());
        if let (Some(stop), 0, 0) = (failed_site, summary.pages, plan.pages_before) {
            // No page of the site at all (its name, its address, its
            // robots.txt): a failed attempt, named by its cause, not a result.
            plan.remove_files();
            let reason = stop.as_str().to_string();
            self.fail(host_id, unit_id, &reason, now_ms)?;
            return Ok(UploadOutcome::Rejected(reason));
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(UploadOutcome::Rejected(format!("unknown unit {unit_id}")));
        };
        let mine = if early.is_some() {
            AttemptState::Partial
        } else {
            AttemptState::Done
        };
        for a in job.attempts.iter_mut() {
            if a.unit_id == unit_id {
                a.state = mine.clone();
                a.pages = summary.pages;
                a.links = summary.links;
            } else if a.state == AttemptState::Running {
                // A copy from the same start: it would redo what this one did.
                a.state = AttemptState::Aborted;
            }
        }
        let chain_sketch = validate::merge(&job.chain_sketch, &sketch);
        if let Some(info) = &early {
            let pages = summary.pages;
            job.segments.push(Segment {
                unit_id,
                host_id,
                summary,
                file: plan.rel.clone(),
                state_file: plan.state_rel.clone(),
                state_sha256: info.sha256,
                state_bytes: info.bytes,
                pages_done: info.pages_done,
                accepted_ms: now_ms,
            });
            job.chain_sketch = chain_sketch;
            job.est_pages = (job.est_pages - pages as f64).max(1.0);
            if job.segments.len() >= MAX_SCANS_PER_JOB {
                job.state = JobState::Failed;
                push_reason(
                    job,
                    format!("the site needed more than {MAX_SCANS_PER_JOB} scans"),
                );
            } else {
                job.state = JobState::Queued;
            }
            let job = job.clone();
            self.store.put_job(&job)?;
            if job.state.is_final() {
                // The frontiers are of no more use.
                self.drop_states(&job);
            }
        } else {
            // The chain reached the site's natural end: a complete result.
            let candidate = Candidate {
                segments: std::mem::take(&mut job.segments),
                result: JobResult {
                    unit_id,
                    host_id,
                    summary,
                    file: plan.rel.clone(),
                    accepted_ms: now_ms,
                },
                sketch: chain_sketch,
                verdict: Verdict::Pending,
                similarity: None,
            };
            job.chain_sketch = Vec::new();
            self.conclude(job_id, candidate)?;
        }
        if let Some((job, round)) = self
            .jobs
            .get(&job_id)
            .zip(self.rounds.get(&round_id))
            .filter(|(_, r)| r.params.delay_ms > 0)
        {
            let until = now_ms.saturating_add(round.params.delay_ms);
            self.settling
                .insert(reach_key(&job.site, round.params.scope), until);
        }
        self.reindex(job_id);
        self.check_round_done(round_id, now_ms)?;
        self.store.flush()?;
        self.check_open();
        Ok(UploadOutcome::Accepted)
    }

    /// Most units `host_id` may hold at once: its slots' worth
    /// ([`held_cap`]); a host not trusted yet is taken to have at most
    /// [`validate::UNTRUSTED_MAX_SLOTS`], whatever its benchmark claims.
    fn units_cap(&self, host_id: u64) -> usize {
        let slots = self
            .hosts
            .get(&host_id)
            .map_or(scheduler::DEFAULT_HOST_SLOTS, host_slots);
        if self.is_trusted(host_id) {
            held_cap(slots)
        } else {
            held_cap(slots.min(validate::UNTRUSTED_MAX_SLOTS))
        }
    }

    /// Whether a host is trusted: enough valid results in a row.
    pub fn is_trusted(&self, host_id: u64) -> bool {
        self.hosts
            .get(&host_id)
            .is_some_and(|h| h.consecutive_valid >= self.settings.trust_after)
    }

    /// A job's chain of scans reached its natural end with `candidate`:
    /// take it (validation off, or a trusted host not drawn for a spot
    /// check), or compare it with the job's other results, and decide.
    fn conclude(&mut self, job_id: u64, candidate: Candidate) -> Result<(), GridError> {
        let Some(job) = self.jobs.get(&job_id) else {
            return Ok(());
        };
        let mode = self
            .rounds
            .get(&job.round_id)
            .map_or(ValidateMode::Off, |r| r.params.validate);
        let authors = candidate.authors();
        let needs_check = match mode {
            ValidateMode::Off => false,
            ValidateMode::All => true,
            ValidateMode::Adaptive => {
                job.candidates.iter().any(|c| c.verdict != Verdict::Invalid)
                    || !authors.iter().all(|h| self.is_trusted(*h))
                    || validate::spot_check(
                        self.project_key.as_bytes(),
                        job_id,
                        candidate.result.unit_id,
                        self.settings.spot_check_percent,
                    )
            }
        };
        // Hosts heard from lately that could scan the site for a check:
        // none of its results' authors.
        let now_ms = candidate.result.accepted_ms;
        let mut all_authors = job.authors();
        all_authors.extend(authors.iter().copied());
        let checkers_left = self.hosts.values().any(|h| {
            !h.revoked
                && now_ms.saturating_sub(h.last_seen_ms) <= PLAN_HOSTS_SEEN_WITHIN_MS
                && !all_authors.contains(&h.id)
        });
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
            // The results that agree with the kept one are valid, the others
            // (the minority) invalid.
            let keep_sketch = job.candidates[w].sketch.clone();
            let mut liars = Vec::new();
            for (i, c) in job.candidates.iter_mut().enumerate() {
                let sim = if i == w {
                    1.0
                } else {
                    validate::similarity(&c.sketch, &keep_sketch)
                };
                c.similarity = Some(sim);
                c.verdict = if i == w
                    || (c.verdict != Verdict::Invalid && sim >= validate::MIN_SIMILARITY)
                {
                    Verdict::Valid
                } else {
                    if c.verdict != Verdict::Invalid {
                        liars.extend(c.authors());
                    }
                    Verdict::Invalid
                };
            }
            job.validation = JobValidation::Valid;
            liars.sort_unstable();
            liars.dedup();
            return self.keep_result(job_id, w, &liars);
        }
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
            self.store.put_job(&job)?;
            return Ok(());
        }
        // Another host scans the site afresh to compare with.
        job.validation = JobValidation::Pending;
        job.chain += 1;
        job.state = JobState::Queued;
        job.batch_host = None;
        job.est_pages = job.candidates[new].pages().max(1) as f64;
        let job = job.clone();
        self.store.put_job(&job)?;
        Ok(())
    }

    /// The job is done with its result `keep`: the figures of the result's
    /// scans are learned, hosts whose results were found valid gain trust,
    /// and `liars` (authors of invalid results) lose it.
    fn keep_result(&mut self, job_id: u64, keep: usize, liars: &[u64]) -> Result<(), GridError> {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(());
        };
        let kept = job.candidates[keep].clone();
        job.segments = kept.segments.clone();
        job.result = Some(kept.result.clone());
        job.state = JobState::Done;
        for c in job.candidates.iter_mut() {
            c.sketch = Vec::new();
        }
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
        self.store.put_job(&job)?;
        // The frontiers are of no more use.
        self.drop_states(&job);
        let delay_s = self
            .rounds
            .get(&round_id)
            .map(|r| r.params.delay_ms as f64 / 1000.0)
            .unwrap_or(0.0);
        // The site's figures for the next round: all of the kept result's scans.
        let pieces: Vec<(u64, &ScanSummary)> = kept
            .segments
            .iter()
            .map(|s| (s.host_id, &s.summary))
            .chain([(kept.result.host_id, &kept.result.summary)])
            .collect();
        if let Some(s) = self.sites.get_mut(&job.site) {
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
            self.store.put_site(&s)?;
        }
        // Speeds are learned from results found valid or taken from trusted
        // hosts only, never from a result that waits for its check.
        let last = pieces.len() - 1;
        for (i, (host, summary)) in pieces.iter().enumerate() {
            self.learn_from(*host, summary, delay_s, i == last)?;
        }
        // The checks found valid are real work of their hosts too.
        for c in valid
            .iter()
            .filter(|c| c.result.unit_id != kept.result.unit_id)
        {
            for seg in &c.segments {
                self.learn_from(seg.host_id, &seg.summary, delay_s, false)?;
            }
            self.learn_from(c.result.host_id, &c.result.summary, delay_s, false)?;
        }
        for c in &valid {
            for host in c.authors() {
                if let Some(h) = self.hosts.get_mut(&host) {
                    h.consecutive_valid = h.consecutive_valid.saturating_add(1);
                    h.valid_results += 1;
                    let h = h.clone();
                    self.store.put_host(&h)?;
                }
            }
        }
        self.reindex(job_id);
        for &host in liars {
            self.distrust(host)?;
        }
        Ok(())
    }

    /// Remove the link and state files of a job's results but `keep`.
    fn remove_candidate_files(&self, job: &JobRecord, keep: Option<usize>) {
        for (i, c) in job.candidates.iter().enumerate() {
            if Some(i) == keep {
                continue;
            }
            self.remove_chain_files(&c.segments, Some(&c.result));
        }
    }

    fn remove_chain_files(&self, segments: &[Segment], result: Option<&JobResult>) {
        for seg in segments {
            let _ = fs::remove_file(self.links_dir.join(&seg.file));
            let _ = fs::remove_file(self.links_dir.join(&seg.state_file));
        }
        if let Some(r) = result {
            let _ = fs::remove_file(self.links_dir.join(&r.file));
        }
    }

    /// A result of `host_id` was found invalid: its trust is reset, and
    /// every result of it not validated yet is invalid too: results waiting
    /// for their check (dropped, their job scanned again by others), and the
    /// scans of open jobs that continue from its segments (those jobs start
    /// over from their seed).
    fn distrust(&mut self, host_id: u64) -> Result<(), GridError> {
        if let Some(h) = self.hosts.get_mut(&host_id) {
            h.consecutive_valid = 0;
            h.invalid_results += 1;
            let h = h.clone();
            self.store.put_host(&h)?;
        }
        let open: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| {
                o.queue
                    .iter()
                    .map(|v| v.job_id)
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
                if let Some(h) = self.hosts.get_mut(&host_id) {
                    h.invalid_results += dropped;
                    let h = h.clone();
                    self.store.put_host(&h)?;
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
            self.store.put_job(&job)?;
            self.jobs.insert(job_id, job);
            self.reindex(job_id);
        }
        Ok(())
    }

    /// A host's figures from one of its scans, in a result taken.
    fn learn_from(
        &mut self,
        host_id: u64,
        summary: &ScanSummary,
        delay_s: f64,
        job_done: bool,
    ) -> Result<(), GridError> {
        let (pages, bytes) = (summary.pages, summary.bytes);
        let seconds = summary.elapsed_ms as f64 / 1000.0;
        if let Some(h) = self.hosts.get_mut(&host_id) {
            if job_done {
                h.jobs_done += 1;
            }
            h.pages_done += pages;
            h.seconds_done += seconds;
            h.bytes_done = h.bytes_done.saturating_add(bytes);
            h.avg_pages_per_s = scheduler::learn_speed(h.avg_pages_per_s, pages, seconds, delay_s);
            h.avg_kb_per_s = scheduler::learn_speed(h.avg_kb_per_s, bytes / 1024, seconds, 0.0);
            let h = h.clone();
            self.store.put_host(&h)?;
        }
        Ok(())
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
        Ok(StateAnswer::Read(
            self.links_dir.join(&seg.state_file),
            seg.state_sha256,
        ))
    }

    /// Remove the scan states a job kept (it is over: nothing continues).
    fn drop_states(&self, job: &JobRecord) {
        for seg in &job.segments {
            let _ = fs::remove_file(self.links_dir.join(&seg.state_file));
        }
    }

    pub fn status(&self) -> GridStatus {
        let mut s = GridStatus {
            sites: self.sites.len(),
            hosts: self.hosts.values().filter(|h| !h.revoked).count(),
            hosts_revoked: self
                .hosts
                .values()
                .filter(|h| h.state() == "revoked")
                .count(),
            hosts_left: self.hosts.values().filter(|h| h.state() == "left").count(),
            rounds_running: self
                .rounds
                .values()
                .filter(|r| r.state == RoundState::Running)
                .count(),
            ..Default::default()
        };
        // The running rounds' jobs; when none runs, the newest round's (a
        // status right after a round counts that round, not zeros).
        let mut counted: Vec<&RoundRecord> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .collect();
        if counted.is_empty() {
            counted.extend(self.rounds.values().next_back());
        }
        s.jobs_rounds = counted.iter().map(|r| r.id).collect();
        for r in counted {
            for j in r.job_ids.iter().filter_map(|j| self.jobs.get(j)) {
                match j.state {
                    JobState::Queued => s.jobs_queued += 1,
                    JobState::Running => s.jobs_running += 1,
                    JobState::Done => s.jobs_done += 1,
                    JobState::Failed => s.jobs_failed += 1,
                    JobState::Cancelled => s.jobs_cancelled += 1,
                }
            }
        }
        s.last_round = self
            .rounds
            .values()
            .rev()
            .find(|r| r.state != RoundState::Running)
            .map(|r| {
                let mut o = RoundOutcome {
                    id: r.id,
                    state: r.state.as_str().to_string(),
                    sites: r.job_ids.len(),
                    ..Default::default()
                };
                for j in r.job_ids.iter().filter_map(|j| self.jobs.get(j)) {
                    if j.completeness().natural_end {
                        o.complete += 1;
                    } else {
                        o.incomplete += 1;
                    }
                    o.failed += usize::from(j.state == JobState::Failed);
                }
                o
            });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use beebot_shared::extract::LinkTag;
    use beebot_shared::linkfile::{LinkFileHeader, LinkRecord};
    use beebot_shared::scope::Scope;
    use ed25519_dalek::VerifyingKey;
    use tempfile::TempDir;

    /// A fixed start time (Unix ms); every test drives time from here.
    const T0: u64 = 1_700_000_000_000;
    const HOUR_MS: u64 = 3_600_000;
    /// The deadline window of a never-scanned site on a host with no speed figure
    /// under [`params`]: what the round allows, its 50-page cap at 5 pages/s =
    /// 10 s, × slack 3 + grace 10 s = 40 s.
    const WINDOW_MS: u64 = 40_000;

    struct Fx {
        dir: TempDir,
        key: SigningKey,
        grid: Grid,
    }

    fn settings() -> GridSettings {
        GridSettings {
            user_agent: "BeeBot/test (+http://example.test/bot)".into(),
            deadline_slack: 3.0,
            deadline_grace_s: 10,
            trust_after: 2,
            spot_check_percent: 0,
        }
    }

    fn open_grid(dir: &Path, key: &SigningKey) -> Grid {
        let store = Store::open(&dir.join("db")).unwrap();
        Grid::open(store, dir.join("links"), key.clone(), settings()).unwrap()
    }

    impl Fx {
        fn new() -> Fx {
            let dir = tempfile::tempdir().unwrap();
            let key = sign::generate_key();
            let grid = open_grid(dir.path(), &key);
            Fx { dir, key, grid }
        }

        /// A grid with `sites` sites and one running round.
        fn with_round(sites: usize, max_attempts: u32) -> (Fx, u64) {
            let mut fx = Fx::new();
            fx.grid.add_sites(&site_names(sites), T0).unwrap();
            let round = fx.grid.start_round(params(max_attempts), T0).unwrap();
            (fx, round)
        }

        fn links(&self) -> PathBuf {
            self.dir.path().join("links")
        }

        fn host(&mut self) -> u64 {
            enrol_host(&mut self.grid, T0)
        }

        /// Ask for work and verify every unit with the project public key.
        fn ask(
            &mut self,
            host: u64,
            free: u32,
            held: &[u64],
            now: u64,
        ) -> (Vec<WorkUnit>, WorkReply) {
            let reply = self
                .grid
                .request_work(
                    host,
                    &WorkRequest {
                        want_seconds: 3600,
                        free_slots: free,
                        units_held: held.to_vec(),
                        open_windows: None,
                    },
                    now,
                )
                .unwrap();
            let pk = VerifyingKey::from_bytes(&self.grid.project_public_key()).unwrap();
            assert_eq!(pk, self.key.verifying_key());
            let units = reply
                .units
                .iter()
                .map(|s| sign::verify_unit(&pk, s).unwrap())
                .collect();
            (units, reply)
        }

        /// Ask for exactly one unit.
        fn one(&mut self, host: u64, held: &[u64], now: u64) -> WorkUnit {
            let (mut units, _) = self.ask(host, 1, held, now);
            assert_eq!(units.len(), 1, "expected one unit for host {host}");
            units.remove(0)
        }

        fn upload(&mut self, host: u64, unit: &WorkUnit, n: usize, now: u64) -> UploadOutcome {
            let (summary, file) = result_for(unit, n);
            self.grid
                .upload(host, unit.unit_id, summary, &file, None, now)
                .unwrap()
        }

        fn job(&self, job_id: u64) -> JobRecord {
            self.grid.jobs[&job_id].clone()
        }

        fn attempt(&self, unit_id: u64) -> Attempt {
            let job = &self.grid.jobs[&self.grid.units[&unit_id]];
            job.attempts
                .iter()
                .find(|a| a.unit_id == unit_id)
                .unwrap()
                .clone()
        }

        fn host_rec(&self, id: u64) -> HostRecord {
            self.grid.hosts[&id].clone()
        }

        fn round_state(&self, id: u64) -> RoundState {
            self.grid.rounds[&id].state
        }
    }

    fn params(max_attempts: u32) -> RoundParams {
        RoundParams {
            policy: "round-robin".into(),
            max_pages: 50,
            max_depth: 3,
            delay_ms: 0,
            scope: Scope::Host,
            max_page_bytes: 100_000,
            max_seconds: 600,
            deadline_min_s: 30,
            deadline_max_s: 600,
            max_attempts,
            max_crawl_delay_ms: 10_000,
            // Validation has its own tests: these take the first result.
            validate: ValidateMode::Off,
        }
    }

    fn site_names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i}.test")).collect()
    }

    fn info(name: &str) -> HostInfo {
        HostInfo {
            name: name.into(),
            os: "linux".into(),
            client_version: "0.1.0".into(),
            cores: 4,
        }
    }

    fn enrol_host(g: &mut Grid, now: u64) -> u64 {
        let token = g.create_invite(1, now + HOUR_MS, now).unwrap();
        let key = sign::generate_key().verifying_key().to_bytes();
        // Names are unique among active hosts.
        let name = format!("pc-{}", hex::encode(&key[..4]));
        g.enrol(&token, key, info(&name), now).unwrap()
    }

    fn records(site: &str, n: usize) -> Vec<LinkRecord> {
        (0..n)
            .map(|i| LinkRecord {
                source_url: format!("http://{site}/p{}", i % 3),
                target_url: format!("http://out{i}.test/"),
                tag: LinkTag::A,
                nofollow: i % 2 == 0,
                anchor_text: format!("link {i}"),
            })
            .collect()
    }

    fn header_for(unit: &WorkUnit, n: usize) -> LinkFileHeader {
        LinkFileHeader::of_unit(unit, 3, n as u64)
    }

    fn summary(n: usize) -> ScanSummary {
        ScanSummary {
            pages: 3,
            bytes: 3000,
            links: n as u64,
            distinct_target_hosts: n as u64,
            errors: 0,
            elapsed_ms: 1500,
            stopped_by: None,
            status_counts: vec![(200, 3)],
            robots_disallowed: 0,
            ..ScanSummary::default()
        }
    }

    /// A valid result for `unit`: a summary and a link file of `n` records.
    fn result_for(unit: &WorkUnit, n: usize) -> (ScanSummary, Vec<u8>) {
        let file = linkfile::encode(&header_for(unit, n), &records(&unit.site, n)).unwrap();
        (summary(n), file)
    }

    /// Every file under `dir` (none when it does not exist).
    fn files_under(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd {
                let p = e.unwrap().path();
                if p.is_dir() {
                    todo.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    fn lf_path(fx: &Fx, unit: &WorkUnit) -> PathBuf {
        fx.links()
            .join(unit.round_id.to_string())
            .join(format!("{}-{}.lf", unit.job_id, unit.unit_id))
    }

    // ---- invites ----

    #[test]
    fn enrol_with_a_valid_token() {
        let mut fx = Fx::new();
        let token = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
        assert_eq!(token.len(), INVITE_TOKEN_LEN);
        let key = sign::generate_key().verifying_key().to_bytes();
        let id = fx.grid.enrol(&token, key, info("pc-1"), T0 + 5).unwrap();
        assert!(id > 0);
        assert_eq!(fx.grid.enrolled_key(id), Some(key));
        let h = fx.host_rec(id);
        assert_eq!(h.info, info("pc-1"));
        assert_eq!(h.enrolled_ms, T0 + 5);
        assert!(!h.revoked);
        assert_eq!((h.jobs_done, h.deadlines_missed, h.failures), (0, 0, 0));
        assert_eq!(fx.grid.invites[&sha256(&token)].uses_left, 0);
        assert_eq!(fx.grid.status().hosts, 1);
        assert_eq!(fx.grid.enrolled_key(id + 1000), None);
        assert!(matches!(
            fx.grid.create_invite(0, T0 + HOUR_MS, T0),
            Err(GridError::Invalid(_))
        ));
    }

    #[test]
    fn used_up_invite_is_bad() {
        let mut fx = Fx::new();
        let once = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
        let k1 = sign::generate_key().verifying_key().to_bytes();
        let k2 = sign::generate_key().verifying_key().to_bytes();
        fx.grid.enrol(&once, k1, info("a"), T0).unwrap();
        assert!(matches!(
            fx.grid.enrol(&once, k2, info("b"), T0 + 1),
            Err(GridError::BadInvite)
        ));
        assert_eq!(fx.grid.hosts().len(), 1);

        let twice = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
        let k3 = sign::generate_key().verifying_key().to_bytes();
        fx.grid.enrol(&twice, k2, info("b"), T0 + 2).unwrap();
        fx.grid.enrol(&twice, k3, info("c"), T0 + 3).unwrap();
        let k4 = sign::generate_key().verifying_key().to_bytes();
        assert!(matches!(
            fx.grid.enrol(&twice, k4, info("d"), T0 + 4),
            Err(GridError::BadInvite)
        ));
        assert_eq!(fx.grid.hosts().len(), 3);
    }

    #[test]
    fn expired_or_unknown_invite_is_bad() {
        let mut fx = Fx::new();
        let tok = fx.grid.create_invite(5, T0 + 1000, T0).unwrap();
        let k = sign::generate_key().verifying_key().to_bytes();
        // Expiry is exclusive: at the expiry instant the token no longer works.
        assert!(matches!(
            fx.grid.enrol(&tok, k, info("a"), T0 + 1000),
            Err(GridError::BadInvite)
        ));
        assert!(matches!(
            fx.grid.enrol(&tok, k, info("a"), T0 + 50_000),
            Err(GridError::BadInvite)
        ));
        // A refused enrolment does not use the invite up.
        assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 5);
        assert!(fx.grid.hosts().is_empty());
        // One millisecond before expiry it still works.
        fx.grid.enrol(&tok, k, info("a"), T0 + 999).unwrap();

        let k2 = sign::generate_key().verifying_key().to_bytes();
        let mut forged = tok.clone();
        forged[0] ^= 1;
        assert!(matches!(
            fx.grid.enrol(&forged, k2, info("b"), T0),
            Err(GridError::BadInvite)
        ));
        assert!(matches!(
            fx.grid.enrol(&[], k2, info("b"), T0),
            Err(GridError::BadInvite)
        ));
    }

    #[test]
    fn invites_are_listed_without_their_tokens_and_a_revoked_one_cannot_be_used() {
        let mut fx = Fx::new();
        let t1 = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
        let t2 = fx.grid.create_invite(1, T0 + 2 * HOUR_MS, T0 + 5).unwrap();
        let listed = fx.grid.invites();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].0, invite_id(&sha256(&t1)));
        assert_eq!(listed[0].0.len(), INVITE_ID_LEN);
        assert_eq!(
            (
                listed[0].1.uses_left,
                listed[0].1.expires_ms,
                listed[0].1.created_ms
            ),
            (2, T0 + HOUR_MS, T0)
        );
        assert_eq!(listed[1].1.created_ms, T0 + 5);
        for (id, _) in &listed {
            for t in [&t1, &t2] {
                assert!(!id.contains(&hex::encode(t)), "an id never shows the token");
            }
        }
        // Revoked by a prefix of its id: it is gone, and joining with it fails.
        let id1 = listed[0].0.clone();
        assert_eq!(
            fx.grid.revoke_invite(&id1[..8].to_uppercase()).unwrap(),
            id1
        );
        assert_eq!(fx.grid.invites().len(), 1);
        let k = sign::generate_key().verifying_key().to_bytes();
        assert!(matches!(
            fx.grid.enrol(&t1, k, info("a"), T0 + 10),
            Err(GridError::BadInvite)
        ));
        assert!(matches!(
            fx.grid.revoke_invite(&id1),
            Err(GridError::UnknownInvite(_))
        ));
        // Ids too short or not hex are refused; the other invite still works.
        for bad in ["", "ab", "zzzzzzzz", &listed[1].0[..MIN_INVITE_ID_LEN - 1]] {
            assert!(matches!(
                fx.grid.revoke_invite(bad),
                Err(GridError::Invalid(_))
            ));
        }
        fx.grid.enrol(&t2, k, info("a"), T0 + 10).unwrap();
        // A revocation is durable.
        let dir = fx.dir;
        drop(fx.grid);
        let g = open_grid(dir.path(), &fx.key);
        assert_eq!(g.invites().len(), 1);
        assert_eq!(g.invites()[0].0, listed[1].0);
    }

    #[test]
    fn an_ambiguous_invite_id_revokes_nothing() {
        let mut fx = Fx::new();
        // Two invites whose hashes share their first four bytes.
        for last in [1u8, 2] {
            let mut h = [0xab; 32];
            h[4] = last;
            let rec = InviteRecord {
                token_sha256: h,
                uses_left: 1,
                expires_ms: T0 + HOUR_MS,
                created_ms: T0,
            };
            fx.grid.store.put_invite(&rec).unwrap();
            fx.grid.invites.insert(h, rec);
        }
        assert!(matches!(
            fx.grid.revoke_invite("abababab"),
            Err(GridError::Invalid(why)) if why.contains("more than one")
        ));
        assert_eq!(fx.grid.invites().len(), 2);
        // One more digit names one.
        assert_eq!(
            fx.grid.revoke_invite("abababab02").unwrap(),
            "abababab02ababab"
        );
        assert_eq!(fx.grid.invites().len(), 1);
    }

    #[test]
    fn key_enrolled_twice_is_refused() {
        let mut fx = Fx::new();
        let tok = fx.grid.create_invite(3, T0 + HOUR_MS, T0).unwrap();
        let k = sign::generate_key().verifying_key().to_bytes();
        let id = fx.grid.enrol(&tok, k, info("a"), T0).unwrap();
        match fx.grid.enrol(&tok, k, info("a-again"), T0 + 1) {
            Err(GridError::KeyEnrolled(got)) => assert_eq!(got, id),
            other => panic!("expected KeyEnrolled, got {other:?}"),
        }
        // The refusal did not consume a use nor add a host.
        assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 2);
        assert_eq!(fx.grid.hosts().len(), 1);
        // A revoked key cannot come back through a new invite either.
        fx.grid.revoke(id, T0 + 2).unwrap();
        let tok2 = fx.grid.create_invite(1, T0 + HOUR_MS, T0).unwrap();
        assert!(matches!(
            fx.grid.enrol(&tok2, k, info("a"), T0 + 3),
            Err(GridError::KeyEnrolled(got)) if got == id
        ));
    }

    #[test]
    fn only_the_token_hash_is_stored() {
        let mut fx = Fx::new();
        let tok = fx.grid.create_invite(2, T0 + HOUR_MS, T0 + 7).unwrap();
        // Exhaustive destructuring: the record has no other field that could hold the token.
        let InviteRecord {
            token_sha256,
            uses_left,
            expires_ms,
            created_ms,
        } = fx.grid.invites.values().next().unwrap().clone();
        assert_eq!(token_sha256, sha256(&tok));
        assert_ne!(&token_sha256[..tok.len()], &tok[..]);
        assert_eq!(
            (uses_left, expires_ms, created_ms),
            (2, T0 + HOUR_MS, T0 + 7)
        );
        assert_eq!(fx.grid.invites.len(), 1);

        // Nor do the token's bytes appear anywhere in the database files.
        let Fx { dir, grid, .. } = fx;
        drop(grid);
        let mut saw_hash = false;
        for f in files_under(&dir.path().join("db")) {
            let bytes = fs::read(&f).unwrap();
            assert!(
                !bytes.windows(tok.len()).any(|w| w == &tok[..]),
                "token bytes found in {}",
                f.display()
            );
            saw_hash |= bytes.windows(32).any(|w| w == &token_sha256[..]);
        }
        assert!(saw_hash, "the scan should at least find the stored hash");
    }

    // ---- work ----

    #[test]
    fn request_work_gives_signed_units_bound_to_the_host() {
        let (mut fx, round) = Fx::with_round(5, 3);
        let a = fx.host();
        let now = T0 + 1000;
        let (units, reply) = fx.ask(a, 3, &[], now);
        assert_eq!(units.len(), 3);
        assert_eq!(reply.retry_after_s, None);
        assert!(reply.rounds_open);
        let p = params(3);
        let mut jobs = Vec::new();
        // Two slots: the third unit waits for one (10 s), and its deadline counts the wait.
        let waits_ms = [0, 0, 10_000];
        for (u, wait_ms) in units.iter().zip(waits_ms) {
            assert_eq!(u.host_id, a);
            assert_eq!(u.round_id, round);
            assert_eq!(u.issued_ms, now);
            let span = u.deadline_ms - u.issued_ms;
            assert!(span >= p.deadline_min_s * 1000 && span <= p.deadline_max_s * 1000);
            assert_eq!(span, WINDOW_MS + 3 * wait_ms);
            assert_eq!(u.user_agent, settings().user_agent);
            assert_eq!(u.scope, Scope::Host);
            assert_eq!(u.limits.max_pages, p.max_pages);
            assert_eq!(u.limits.max_depth, p.max_depth);
            assert_eq!(u.limits.max_seconds, p.max_seconds);
            assert_eq!(u.seed_url, format!("http://{}/", u.site));
            let job = fx.job(u.job_id);
            assert_eq!(job.site, u.site);
            assert_eq!(job.state, JobState::Running);
            let at = fx.attempt(u.unit_id);
            assert_eq!((at.host_id, at.deadline_ms), (a, u.deadline_ms));
            assert_eq!(at.state, AttemptState::Running);
            jobs.push(u.job_id);
        }
        jobs.sort();
        jobs.dedup();
        assert_eq!(jobs.len(), 3, "three distinct jobs");

        // Signed by the project key and by nothing else.
        let other = sign::generate_key().verifying_key();
        assert!(sign::verify_unit(&other, &reply.units[0]).is_err());

        // No free slot, no unit (and no retry hint needed beyond the open round).
        let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
        let (none, r) = fx.ask(a, 0, &held, now);
        assert!(none.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));

        // The rest of the queue, then nothing.
        let (more, _) = fx.ask(a, 10, &held, now + 1);
        assert_eq!(more.len(), 2);
        assert!(more.iter().all(|u| !jobs.contains(&u.job_id)));
        let held: Vec<u64> = units.iter().chain(&more).map(|u| u.unit_id).collect();
        let (none, r) = fx.ask(a, 10, &held, now + 2);
        assert!(none.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
        assert!(r.rounds_open);
        let st = fx.grid.status();
        assert_eq!((st.jobs_queued, st.jobs_running), (0, 5));
    }

    #[test]
    fn a_reply_holds_at_most_the_unit_cap() {
        let (mut fx, _) = Fx::with_round(MAX_UNITS_PER_REPLY + 6, 3);
        let a = fx.host();
        let slots = beebot_shared::limits::MAX_SLOTS;
        fx.grid.benchmark(a, 5.0, 100.0, slots, T0).unwrap();
        fx.grid.set_trusted(a).unwrap();
        assert!(held_cap(slots) > MAX_UNITS_PER_REPLY);
        let (units, _) = fx.ask(a, u32::MAX, &[], T0);
        assert_eq!(units.len(), MAX_UNITS_PER_REPLY);
    }

    /// Units of `host` running now, across rounds.
    fn running_units_of(fx: &Fx, host: u64) -> usize {
        fx.grid
            .jobs
            .values()
            .flat_map(|j| j.running_attempts())
            .filter(|a| a.host_id == host)
            .count()
    }

    /// Ask with `free_slots` 64 over and over, holding everything and
    /// returning nothing; returns the units held in the end.
    fn hoard(fx: &mut Fx, host: u64, asks: u64) -> Vec<u64> {
        let mut held: Vec<u64> = Vec::new();
        for i in 0..asks {
            let (units, _) = fx.ask(host, 64, &held, T0 + i * 1000);
            held.extend(units.iter().map(|u| u.unit_id));
        }
        held
    }

    #[test]
    fn a_host_asking_for_every_slot_over_and_over_holds_at_most_its_cap() {
        let (mut fx, round) = Fx::with_round(3 * MAX_UNITS_HELD_PER_HOST, 3);
        // Without a benchmark: the default slots, a buffer each.
        let a = fx.host();
        let held = hoard(&mut fx, a, 10);
        let cap = held_cap(scheduler::DEFAULT_HOST_SLOTS);
        assert_eq!(held.len(), cap);
        assert_eq!(running_units_of(&fx, a), cap);
        // A second round does not raise it: the cap is across rounds.
        let second = fx.grid.start_round(params(3), T0 + 20_000).unwrap();
        assert_ne!(second, round);
        let (more, r) = fx.ask(a, 64, &held, T0 + 21_000);
        assert!(more.is_empty(), "nothing beyond the cap");
        assert!(r.rounds_open);
        // Claiming every slot there is (and more), not trusted yet: a few
        // slots' worth.
        let c = fx.host();
        fx.grid.benchmark(c, 5.0, 100.0, u32::MAX, T0).unwrap();
        let held = hoard(&mut fx, c, 10);
        assert_eq!(held.len(), held_cap(validate::UNTRUSTED_MAX_SLOTS));
        // Trusted: the named limit holds.
        let b = fx.host();
        fx.grid.benchmark(b, 5.0, 100.0, u32::MAX, T0).unwrap();
        fx.grid.set_trusted(b).unwrap();
        let held = hoard(&mut fx, b, 10);
        assert_eq!(held.len(), MAX_UNITS_HELD_PER_HOST);
        assert_eq!(running_units_of(&fx, b), MAX_UNITS_HELD_PER_HOST);
        // Returning one makes room for one.
        fx.grid
            .fail(b, held[0], "gave it back", T0 + 31_000)
            .unwrap();
        let (units, _) = fx.ask(b, 64, &held[1..], T0 + 32_000);
        assert_eq!(units.len(), 1);
        assert_eq!(running_units_of(&fx, b), MAX_UNITS_HELD_PER_HOST);
    }

    #[test]
    fn a_unit_back_from_sleep_does_not_run_past_the_hosts_cap() {
        let (mut fx, _) = Fx::with_round(3 * MAX_UNITS_HELD_PER_HOST, 3);
        let a = fx.host();
        let cap = held_cap(scheduler::DEFAULT_HOST_SLOTS);
        let old = hoard(&mut fx, a, 1);
        assert_eq!(old.len(), cap);
        // All expire; the host takes a full load again, then reports on an old one.
        let late = T0 + 10 * HOUR_MS;
        fx.grid.tick(late).unwrap();
        assert_eq!(running_units_of(&fx, a), 0);
        let (new, _) = fx.ask(a, 64, &old, late + 1);
        assert_eq!(new.len(), cap);
        let held: Vec<u64> = old
            .iter()
            .chain(new.iter().map(|u| &u.unit_id))
            .copied()
            .collect();
        let o = fx.grid.progress(a, old[0], 1, 1, late + 2).unwrap();
        assert!(matches!(o, ProgressOutcome::Abort(why) if why.contains("slots")));
        assert_eq!(running_units_of(&fx, a), cap);
        // Below the cap it runs again.
        fx.grid
            .fail(a, new[0].unit_id, "gave it back", late + 3)
            .unwrap();
        let o = fx.grid.progress(a, old[0], 1, 1, late + 4).unwrap();
        assert!(matches!(o, ProgressOutcome::Extend(_)), "{o:?}");
        assert_eq!(running_units_of(&fx, a), cap);
        let (none, _) = fx.ask(a, 64, &held, late + 5);
        assert!(none.is_empty());
    }

    #[test]
    fn absurd_benchmark_claims_are_clamped_and_broken_ones_refused() {
        let mut fx = Fx::new();
        let a = fx.host();
        fx.grid.benchmark(a, 1e300, f64::MAX, u32::MAX, T0).unwrap();
        let b = fx.host_rec(a).benchmark.unwrap();
        assert_eq!(b.pages_per_s, MAX_BENCHMARK_PAGES_PER_S);
        assert_eq!(b.kb_per_s, MAX_BENCHMARK_KB_PER_S);
        assert_eq!(b.slots, beebot_shared::limits::MAX_SLOTS);
        assert_eq!(fx.grid.host_speed(a), Some(MAX_HOST_PAGES_PER_S));
        for (p, k) in [
            (f64::NAN, 1.0),
            (1.0, f64::INFINITY),
            (-1.0, 1.0),
            (1.0, -0.5),
        ] {
            let e = fx.grid.benchmark(a, p, k, 4, T0).unwrap_err();
            assert!(matches!(e, GridError::Invalid(_)), "{e}");
        }
        // A learned speed past the bound is bounded too.
        fx.grid.hosts.get_mut(&a).unwrap().avg_pages_per_s = Some(1e12);
        assert_eq!(fx.grid.host_speed(a), Some(MAX_HOST_PAGES_PER_S));
        fx.grid.hosts.get_mut(&a).unwrap().avg_pages_per_s = Some(f64::NAN);
        assert_eq!(fx.grid.host_speed(a), None);
    }

    /// Upload `sum` with the link file of `records` for `unit`; the reason
    /// it is rejected (`None`: accepted).
    fn upload_with(
        fx: &mut Fx,
        host: u64,
        unit: &WorkUnit,
        sum: ScanSummary,
        recs: &[LinkRecord],
        now: u64,
    ) -> Option<String> {
        let mut h = header_for(unit, recs.len());
        h.pages = sum.pages;
        let file = linkfile::encode(&h, recs).unwrap();
        match fx
            .grid
            .upload(host, unit.unit_id, sum, &file, None, now)
            .unwrap()
        {
            UploadOutcome::Accepted => None,
            UploadOutcome::Rejected(why) => Some(why),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_summary_claiming_more_pages_than_the_unit_allowed_is_rejected() {
        let (mut fx, _) = Fx::with_round(1, 5);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let mut sum = summary(3);
        sum.pages = u64::from(params(5).max_pages) + 1;
        let why = upload_with(&mut fx, a, &u, sum, &records(&u.site, 3), T0 + 1).unwrap();
        assert!(why.contains("unit allowed 50"), "{why}");
        // A continuation may take only what the earlier scans left.
        let u = fx.one(a, &[], T0 + 2);
        let (sum, file, state) = partial_for(&u, 3, 45);
        let mut sum45 = sum.clone();
        sum45.pages = 45;
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum45, &file, Some(&state), T0 + 3)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let v = fx.one(a, &[], T0 + 4);
        assert_eq!(v.job_id, u.job_id);
        let mut sum = summary(3);
        sum.pages = 6;
        let why = upload_with(&mut fx, a, &v, sum.clone(), &records(&v.site, 3), T0 + 5).unwrap();
        assert!(
            why.contains("unit allowed 5 (page cap 50, 45 done before)"),
            "{why}"
        );
        // What is left is fine.
        let w = fx.one(a, &[], T0 + 6);
        sum.pages = 5;
        assert_eq!(
            upload_with(&mut fx, a, &w, sum, &records(&w.site, 3), T0 + 7),
            None
        );
        // A frontier counting more pages than the cap is refused.
        let (mut fx, _) = Fx::with_round(1, 5);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let (sum, file, state) = partial_for(&u, 3, 51);
        match fx
            .grid
            .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 1)
            .unwrap()
        {
            UploadOutcome::Rejected(why) => assert!(why.contains("cap of 50"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_summary_faster_than_the_politeness_delay_is_rejected() {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(4), T0).unwrap();
        let mut p = params(5);
        p.delay_ms = 1000;
        fx.grid.start_round(p, T0).unwrap();
        let a = fx.host();
        let one_source = |site: &str, n: usize| -> Vec<LinkRecord> {
            records(site, n)
                .into_iter()
                .map(|mut r| {
                    r.source_url = format!("http://{site}/");
                    r
                })
                .collect()
        };
        // Ten pages on one origin: nine delays, the first two pages free.
        let least = ((10 - PACE_FREE_PAGES) as f64 * 1000.0 * PACE_TOLERANCE) as u64;
        let u = fx.one(a, &[], T0);
        let mut sum = summary(3);
        sum.pages = 10;
        sum.elapsed_ms = 1000;
        let why = upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 1);
        assert!(why.unwrap().contains("faster than the round's delay"));
        let u = fx.one(a, &[], T0 + 2);
        sum.elapsed_ms = least - 1;
        assert!(
            upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 3).is_some()
        );
        let u = fx.one(a, &[], T0 + 4);
        sum.elapsed_ms = least;
        assert_eq!(
            upload_with(&mut fx, a, &u, sum.clone(), &one_source(&u.site, 3), T0 + 5),
            None
        );
        // Two origins (http and https of the site) each keep their own pace.
        let u = fx.one(a, &[], T0 + 6);
        let mut recs = one_source(&u.site, 4);
        recs[2].source_url = format!("https://{}/", u.site);
        recs[3].source_url = format!("https://{}/", u.site);
        sum.links = 4;
        sum.distinct_target_hosts = 4;
        sum.elapsed_ms = ((5 - PACE_FREE_PAGES) as f64 * 1000.0 * PACE_TOLERANCE) as u64;
        assert_eq!(upload_with(&mut fx, a, &u, sum, &recs, T0 + 7), None);
    }

    #[test]
    fn summary_counts_that_do_not_fit_the_file_are_rejected() {
        let (mut fx, _) = Fx::with_round(8, 5);
        let a = fx.host();
        let (units, _) = fx.ask(a, 8, &[], T0);
        type Change = fn(&mut ScanSummary);
        let cases: Vec<(Change, &str)> = vec![
            // Records exist, yet no page was scanned.
            (|s| s.pages = 0, "0 pages"),
            // Records of three pages (p0, p1, p2), two pages claimed.
            (|s| s.pages = 2, "more pages"),
            (|s| s.links += 1, "links"),
            (|s| s.distinct_target_hosts = s.links + 1, "target hosts"),
            (|s| s.link_capped_pages = s.pages + 1, "capped"),
            (|s| s.non_html = s.pages + 1, "non-HTML"),
            (|s| s.links = u64::MAX, "links"),
        ];
        for ((change, what), u) in cases.into_iter().zip(&units) {
            let mut sum = summary(6);
            change(&mut sum);
            let why = upload_with(&mut fx, a, u, sum, &records(&u.site, 6), T0 + 1)
                .unwrap_or_else(|| panic!("{what}: accepted"));
            assert!(why.contains(what), "{what}: {why}");
        }
        // The honest summary of the same file is accepted.
        let u = &units[7];
        assert_eq!(
            upload_with(&mut fx, a, u, summary(6), &records(&u.site, 6), T0 + 2),
            None
        );
    }

    /// One thing a host does, with arbitrary numbers.
    #[derive(Clone, Debug)]
    enum HostAct {
        Bench(usize, f64, f64, u32),
        /// Host, want_seconds, free_slots, units held (`None`: all it got), windows.
        Ask(usize, u64, u32, Option<Vec<u64>>, Option<Vec<(u64, u64)>>),
        /// Host, unit (an index into those issued), pages, links.
        Progress(usize, usize, u64, u64),
        /// Host, unit, summary, records in the file, the frontier's pages done.
        Upload(usize, usize, Box<ScanSummary>, usize, Option<u64>),
        Wait(u32),
    }

    /// A number a host might send: small (to reach the paths that accept)
    /// or anything.
    fn host_number() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![0u64..64, any::<u64>(), Just(u64::MAX)]
    }

    fn any_summary() -> impl proptest::strategy::Strategy<Value = ScanSummary> {
        use linkfile::StopReason as S;
        use proptest::prelude::*;
        let stop = prop_oneof![
            Just(None),
            proptest::sample::select(vec![
                S::MaxPages,
                S::MaxTime,
                S::Deadline,
                S::FrontierFull,
                S::Cancelled,
                S::RobotsUnavailable,
                S::SeedUnreachable,
                S::Offline,
                S::DnsFailed,
                S::ConnectionRefused,
                S::PrivateAddress,
            ])
            .prop_map(Some),
        ];
        (
            proptest::collection::vec(host_number(), 14),
            proptest::collection::vec((any::<u16>(), host_number()), 0..4),
            stop,
        )
            .prop_map(|(n, status_counts, stopped_by)| ScanSummary {
                pages: n[0],
                bytes: n[1],
                links: n[2],
                distinct_target_hosts: n[3],
                errors: n[4],
                elapsed_ms: n[5],
                stopped_by,
                status_counts,
                robots_disallowed: n[6],
                timeouts: n[7],
                truncated_pages: n[8],
                non_html: n[9],
                link_capped_pages: n[10],
                frontier_dropped: n[11],
                records_dropped: n[12],
                beyond_depth: n[13],
                ..ScanSummary::default()
            })
    }

    fn any_act() -> impl proptest::strategy::Strategy<Value = HostAct> {
        use proptest::prelude::*;
        let windows = proptest::option::of(proptest::collection::vec(
            (host_number(), host_number()),
            0..beebot_shared::limits::MAX_WINDOW_INTERVALS,
        ));
        let held = proptest::option::of(proptest::collection::vec(host_number(), 0..8));
        prop_oneof![
            (
                0usize..2,
                proptest::num::f64::ANY,
                proptest::num::f64::ANY,
                any::<u32>()
            )
                .prop_map(|(h, p, k, s)| HostAct::Bench(h, p, k, s)),
            (0usize..2, host_number(), any::<u32>(), held, windows)
                .prop_map(|(h, w, f, u, o)| HostAct::Ask(h, w, f, u, o)),
            (0usize..2, any::<usize>(), host_number(), host_number())
                .prop_map(|(h, u, p, l)| HostAct::Progress(h, u, p, l)),
            (
                0usize..2,
                any::<usize>(),
                any_summary(),
                0usize..6,
                proptest::option::of(host_number())
            )
                .prop_map(|(h, u, s, n, st)| HostAct::Upload(h, u, Box::new(s), n, st)),
            (0u32..4_000_000).prop_map(HostAct::Wait),
        ]
    }

    /// What must hold whatever the hosts sent: the open-job index matches
    /// the jobs, no host holds more than its cap (unless it held them
    /// before, e.g. its benchmark lowered its slots), every count is within
    /// the round's page cap, one copy of a job runs at a time (a wanted copy
    /// is a hand-over, never a second stream of requests), and speeds and
    /// benchmarks are within their bounds.
    fn check_consistent(g: &Grid, before: &HashMap<u64, usize>, max_pages: u64) {
        g.check_open();
        let mut running: HashMap<u64, usize> = HashMap::new();
        for job in g.jobs.values() {
            let copies = job.running_attempts().count();
            assert!(
                copies <= 1,
                "job {}: {copies} copies running at once",
                job.id
            );
            for a in job.running_attempts() {
                *running.entry(a.host_id).or_default() += 1;
            }
            for a in &job.attempts {
                assert!(
                    a.pages <= max_pages,
                    "attempt {} reports {} pages",
                    a.unit_id,
                    a.pages
                );
                assert!(a.links <= MAX_LINK_RECORDS as u64);
            }
            for seg in &job.segments {
                assert!(seg.pages_done <= max_pages && seg.summary.pages <= max_pages);
            }
            if let Some(r) = &job.result {
                assert!(r.summary.pages <= max_pages);
            }
            assert!(job.completeness().pages <= max_pages);
        }
        for h in g.hosts.values() {
            let n = running.get(&h.id).copied().unwrap_or(0);
            let was = before.get(&h.id).copied().unwrap_or(0);
            assert!(
                n <= held_cap(host_slots(h)).max(was),
                "host {} holds {n} units (cap {}, {was} before)",
                h.id,
                held_cap(host_slots(h))
            );
            if let Some(b) = &h.benchmark {
                assert!(
                    b.pages_per_s.is_finite()
                        && (0.0..=MAX_BENCHMARK_PAGES_PER_S).contains(&b.pages_per_s)
                );
                assert!(
                    b.kb_per_s.is_finite() && (0.0..=MAX_BENCHMARK_KB_PER_S).contains(&b.kb_per_s)
                );
                assert!(b.slots <= beebot_shared::limits::MAX_SLOTS);
            }
            if let Some(s) = g.host_speed(h.id) {
                assert!(
                    s.is_finite() && s > 0.0 && s <= MAX_HOST_PAGES_PER_S,
                    "speed {s}"
                );
            }
        }
    }

    fn running_by_host(g: &Grid) -> HashMap<u64, usize> {
        let mut running: HashMap<u64, usize> = HashMap::new();
        for a in g.jobs.values().flat_map(|j| j.running_attempts()) {
            *running.entry(a.host_id).or_default() += 1;
        }
        running
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Every number a host sends (benchmark figures, work requests,
        /// progress reports, scan summaries), arbitrary and in any order
        /// under every policy: no panic, and the grid stays consistent.
        #[test]
        fn every_number_a_host_sends_is_bounded_and_never_panics(
            policy in proptest::sample::select(vec![
                "adaptive", "round-robin", "batch", "level", "pack", "size-aware",
            ]),
            acts in proptest::collection::vec(any_act(), 1..40),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let key = sign::generate_key();
            let mut g = Grid::open(Store::memory(), dir.path().join("links"), key.clone(), settings())
                .unwrap();
            let pk = key.verifying_key();
            let hosts = [enrol_host(&mut g, T0), enrol_host(&mut g, T0)];
            g.add_sites(&site_names(12), T0).unwrap();
            let mut p = params(3);
            p.policy = policy.to_string();
            p.delay_ms = 100;
            let max_pages = u64::from(p.max_pages);
            g.start_round(p, T0).unwrap();
            let mut now = T0;
            let mut issued: Vec<(usize, WorkUnit)> = Vec::new();
            for act in acts {
                now += 1;
                let before = running_by_host(&g);
                let unit_of = |i: usize| (!issued.is_empty()).then(|| issued[i % issued.len()].1.clone());
                match act {
                    HostAct::Bench(h, p, k, s) => match g.benchmark(hosts[h], p, k, s, now) {
                        Ok(()) | Err(GridError::Invalid(_)) => {}
                        Err(e) => panic!("benchmark: {e}"),
                    },
                    HostAct::Ask(h, want_seconds, free_slots, held, open_windows) => {
                        let units_held = held.unwrap_or_else(|| {
                            issued.iter().filter(|(o, _)| *o == h).map(|(_, u)| u.unit_id).collect()
                        });
                        let req = WorkRequest { want_seconds, free_slots, units_held, open_windows };
                        let reply = g.request_work(hosts[h], &req, now).unwrap();
                        for su in &reply.units {
                            issued.push((h, sign::verify_unit(&pk, su).unwrap()));
                        }
                    }
                    HostAct::Progress(h, i, pages, links) => {
                        if let Some(u) = unit_of(i) {
                            g.progress(hosts[h], u.unit_id, pages, links, now).unwrap();
                        }
                    }
                    HostAct::Upload(h, i, summary, n, pages_done) => {
                        if let Some(u) = unit_of(i) {
                            let file = linkfile::encode(&header_for(&u, n), &records(&u.site, n)).unwrap();
                            let state = pages_done.map(|d| partial_for(&u, n, d).2);
                            g.upload(hosts[h], u.unit_id, *summary, &file, state.as_deref(), now)
                                .unwrap();
                        }
                    }
                    HostAct::Wait(ms) => {
                        now += u64::from(ms);
                        g.tick(now).unwrap();
                    }
                }
                check_consistent(&g, &before, max_pages);
            }
        }
    }

    #[test]
    fn progress_counts_are_bounded_by_the_unit_and_never_go_back() {
        let (mut fx, _) = Fx::with_round(1, 5);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid
            .progress(a, u.unit_id, u64::MAX, u64::MAX, T0 + 1000)
            .unwrap();
        let at = fx.attempt(u.unit_id);
        assert_eq!(at.pages, 50, "the page cap");
        assert_eq!(at.links, MAX_LINK_RECORDS as u64);
        assert!(fx.job(u.job_id).completeness().pages <= 50);
        // Backwards is not believed.
        fx.grid.progress(a, u.unit_id, 3, 2, T0 + 2000).unwrap();
        let at = fx.attempt(u.unit_id);
        assert_eq!((at.pages, at.links), (50, MAX_LINK_RECORDS as u64));
        // A continuation is bounded by what its job's earlier scans left.
        let (mut fx, _) = Fx::with_round(1, 5);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid.progress(a, u.unit_id, 10, 5, T0 + 1000).unwrap();
        fx.grid.progress(a, u.unit_id, 7, 5, T0 + 2000).unwrap();
        assert_eq!(fx.attempt(u.unit_id).pages, 10);
        let (sum, file, state) = partial_for(&u, 3, 40);
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 3000)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let v = fx.one(a, &[], T0 + 4000);
        fx.grid.progress(a, v.unit_id, 1000, 5, T0 + 5000).unwrap();
        assert_eq!(fx.attempt(v.unit_id).pages, 10);
    }

    #[test]
    fn size_aware_policy_sizes_the_reply_to_the_asked_seconds() {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(5), T0).unwrap();
        let mut p = params(3);
        p.policy = "size-aware".into();
        fx.grid.start_round(p, T0).unwrap();
        let a = fx.host();
        // Each job is expected to take 10 s on this host: 25 s asked → 3 jobs.
        let reply = fx
            .grid
            .request_work(
                a,
                &WorkRequest {
                    want_seconds: 25,
                    free_slots: 5,
                    units_held: vec![],
                    open_windows: None,
                },
                T0,
            )
            .unwrap();
        assert_eq!(reply.units.len(), 3);
        // Zero seconds asked with a free slot still gets one job.
        let reply = fx
            .grid
            .request_work(
                a,
                &WorkRequest {
                    want_seconds: 0,
                    free_slots: 5,
                    units_held: vec![],
                    open_windows: None,
                },
                T0,
            )
            .unwrap();
        assert_eq!(reply.units.len(), 1);
    }

    #[test]
    fn deadlines_stay_within_the_round_bounds() {
        let (mut fx, _) = Fx::with_round(3, 3);
        let slow = fx.host();
        let fast = fx.host();
        let plain = fx.host();
        fx.grid.benchmark(slow, 0.01, 1.0, 4, T0).unwrap();
        fx.grid.benchmark(fast, 1000.0, 1000.0, 4, T0).unwrap();
        let now = T0 + 10;
        // 50 pages at 0.01 pages/s = 5000 s × 3 + 10 → capped at 600 s.
        assert_eq!(fx.one(slow, &[], now).deadline_ms, now + 600_000);
        // 0.05 s × 3 + 10 = 10 s → raised to the 30 s minimum.
        assert_eq!(fx.one(fast, &[], now).deadline_ms, now + 30_000);
        assert_eq!(fx.one(plain, &[], now).deadline_ms, now + WINDOW_MS);
        assert!(matches!(
            fx.grid.benchmark(fast, f64::NAN, 1.0, 4, T0),
            Err(GridError::Invalid(_))
        ));
    }

    #[test]
    fn no_round_means_idle_retry() {
        let mut fx = Fx::new();
        let a = fx.host();
        let (units, r) = fx.ask(a, 4, &[], T0);
        assert!(units.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
        assert!(!r.rounds_open);
        assert!(matches!(
            fx.grid.start_round(params(3), T0),
            Err(GridError::Invalid(_))
        ));
        assert!(matches!(
            fx.grid.request_work(
                a + 1000,
                &WorkRequest {
                    want_seconds: 1,
                    free_slots: 1,
                    units_held: vec![],
                    open_windows: None,
                },
                T0
            ),
            Err(GridError::UnknownHost(_))
        ));
    }

    #[test]
    fn round_open_with_nothing_queued_means_short_retry() {
        let (mut fx, round) = Fx::with_round(1, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        let (units, r) = fx.ask(b, 4, &[], T0 + 1);
        assert!(units.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
        assert!(r.rounds_open);
        // Once the only job is done, the round ends and hosts idle.
        assert_eq!(fx.upload(a, &u, 2, T0 + 2), UploadOutcome::Accepted);
        assert_eq!(fx.round_state(round), RoundState::Done);
        let (units, r) = fx.ask(b, 4, &[], T0 + 3);
        assert!(units.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
        assert!(!r.rounds_open);
    }

    #[test]
    fn work_is_sent_only_when_it_fits_the_hosts_windows() {
        let (mut fx, _) = Fx::with_round(2, 3);
        let a = fx.host();
        let ask = |windows: Vec<(u64, u64)>| WorkRequest {
            want_seconds: 3600,
            free_slots: 2,
            units_held: vec![],
            open_windows: Some(windows),
        };
        // Deadlines here are at most 600 s: a window opening in an hour is too late.
        let r = fx
            .grid
            .request_work(a, &ask(vec![(3600, 7200)]), T0)
            .unwrap();
        assert!(
            r.units.is_empty(),
            "nothing fits a window after the deadline"
        );
        assert!(r.rounds_open);
        let r = fx
            .grid
            .request_work(a, &ask(vec![(0, 7200)]), T0 + 1)
            .unwrap();
        assert_eq!(r.units.len(), 2, "an open window takes the work");
    }

    #[test]
    fn start_round_checks_its_parameters() {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(1), T0).unwrap();
        let bad = [
            RoundParams {
                policy: "nope".into(),
                ..params(3)
            },
            RoundParams {
                max_pages: 0,
                ..params(3)
            },
            RoundParams {
                max_attempts: 0,
                ..params(3)
            },
            RoundParams {
                deadline_min_s: 0,
                ..params(3)
            },
            RoundParams {
                delay_ms: MAX_DELAY_MS + 1,
                ..params(3)
            },
        ];
        for p in bad {
            assert!(matches!(
                fx.grid.start_round(p, T0),
                Err(GridError::Invalid(_))
            ));
        }
        assert!(fx.grid.rounds().is_empty());
        assert!(fx.grid.jobs.is_empty());
    }

    // ---- deadlines ----

    #[test]
    fn an_expired_attempt_requeues_the_job_for_another_host() {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        assert_eq!(fx.grid.tick(u.deadline_ms - 1).unwrap(), 0);
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
        assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Expired);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued);
        assert!(job
            .reasons
            .iter()
            .any(|r| r.contains("deadline") && r.contains(&a.to_string())));
        assert_eq!(fx.host_rec(a).deadlines_missed, 1);
        // Ticking again changes nothing and counts nothing twice.
        assert_eq!(fx.grid.tick(u.deadline_ms + 1).unwrap(), 0);
        assert_eq!(fx.host_rec(a).deadlines_missed, 1);

        let v = fx.one(b, &[], u.deadline_ms + 2);
        assert_eq!(v.job_id, u.job_id);
        assert_ne!(v.unit_id, u.unit_id);
        assert_eq!(v.host_id, b);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Running);
        assert_eq!(job.attempts.len(), 2);
        assert_eq!(fx.host_rec(b).deadlines_missed, 0);
        // The job is running elsewhere: A gets nothing.
        let (none, r) = fx.ask(a, 1, &[], u.deadline_ms + 3);
        assert!(none.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_WHILE_ROUND_OPEN_S));
    }

    #[test]
    fn a_host_gets_other_jobs_before_one_it_missed() {
        for policy in scheduler::POLICY_NAMES {
            let mut fx = Fx::new();
            fx.grid.add_sites(&site_names(2), T0).unwrap();
            let p = RoundParams {
                policy: policy.into(),
                ..params(3)
            };
            fx.grid.start_round(p, T0).unwrap();
            let a = fx.host();
            let u = fx.one(a, &[], T0);
            fx.grid.tick(u.deadline_ms).unwrap();
            let v = fx.one(a, &[], u.deadline_ms + 1);
            assert_ne!(v.job_id, u.job_id, "policy {policy}");
            // With nothing else left it does get the missed job again.
            let w = fx.one(a, &[v.unit_id], u.deadline_ms + 2);
            assert_eq!(w.job_id, u.job_id, "policy {policy}");
        }
    }

    #[test]
    fn a_host_that_let_a_job_expire_does_not_get_it_again_while_another_host_is_online() {
        for policy in scheduler::POLICY_NAMES {
            let mut fx = Fx::new();
            fx.grid.add_sites(&site_names(1), T0).unwrap();
            let p = RoundParams {
                policy: policy.into(),
                ..params(5)
            };
            fx.grid.start_round(p, T0).unwrap();
            let (hoarder, other) = (fx.host(), fx.host());
            let u = fx.one(hoarder, &[], T0);
            let t = u.deadline_ms + 1;
            fx.grid.tick(u.deadline_ms).unwrap();
            // The other host was heard from lately: the hoarder waits.
            fx.grid.hello(other, t).unwrap();
            nothing_for(&mut fx, hoarder, t);
            let v = fx.one(other, &[], t + 1);
            assert_eq!(v.job_id, u.job_id, "policy {policy}");
            // Once every online host missed it, it goes to either again.
            fx.grid.tick(v.deadline_ms).unwrap();
            let w = fx.one(hoarder, &[], v.deadline_ms + 1);
            assert_eq!(w.job_id, u.job_id, "policy {policy}");
        }
    }

    #[test]
    fn a_job_fails_after_max_attempts_and_the_round_ends() {
        let (mut fx, round) = Fx::with_round(2, 2);
        let a = fx.host();
        let b = fx.host();
        let (units, _) = fx.ask(a, 2, &[], T0);
        let (u1, u2) = (&units[0], &units[1]);
        assert_eq!(fx.upload(a, u2, 3, T0 + 100), UploadOutcome::Accepted);
        assert_eq!(fx.round_state(round), RoundState::Running);

        // Attempt 1 expires; attempt 2 is given back by the host.
        fx.grid.tick(u1.deadline_ms).unwrap();
        assert_eq!(fx.job(u1.job_id).state, JobState::Queued);
        let v = fx.one(b, &[], u1.deadline_ms + 1);
        assert_eq!(v.job_id, u1.job_id);
        let t_end = u1.deadline_ms + 5;
        fx.grid
            .fail(b, v.unit_id, "robots.txt unavailable", t_end)
            .unwrap();
        let job = fx.job(u1.job_id);
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.failed_attempts(), 2);
        assert!(job.result.is_none());
        assert_eq!(job.reasons.len(), 2);
        assert!(job.reasons[0].contains("deadline"));
        assert!(job.reasons[1].contains("robots.txt unavailable"));
        assert!(job.reasons[1].contains(&b.to_string()));
        assert_eq!(
            fx.attempt(v.unit_id).state,
            AttemptState::Failed("robots.txt unavailable".into())
        );
        assert_eq!(fx.host_rec(b).failures, 1);
        assert_eq!(fx.host_rec(a).deadlines_missed, 1);

        // Every job is final: the round is done.
        let r = &fx.grid.rounds[&round];
        assert_eq!(r.state, RoundState::Done);
        assert_eq!(r.finished_ms, Some(t_end));
        assert_eq!(fx.grid.status().rounds_running, 0);
        let (none, reply) = fx.ask(b, 2, &[], t_end + 1);
        assert!(none.is_empty());
        assert_eq!(reply.retry_after_s, Some(RETRY_IDLE_S));
        assert!(!reply.rounds_open);
    }

    #[test]
    fn expiries_alone_fail_a_job_and_end_the_round() {
        let (mut fx, round) = Fx::with_round(1, 2);
        let a = fx.host();
        let b = fx.host();
        let c = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid.tick(u.deadline_ms).unwrap();
        let v = fx.one(b, &[], u.deadline_ms);
        assert_eq!(fx.grid.round(round).unwrap().0.state, RoundState::Running);
        assert_eq!(fx.grid.tick(v.deadline_ms).unwrap(), 1);
        assert_eq!(fx.job(u.job_id).state, JobState::Failed);
        assert_eq!(fx.round_state(round), RoundState::Done);
        assert_eq!(fx.grid.rounds[&round].finished_ms, Some(v.deadline_ms));
        assert_eq!(fx.host_rec(a).deadlines_missed, 1);
        assert_eq!(fx.host_rec(b).deadlines_missed, 1);
        let (none, _) = fx.ask(c, 1, &[], v.deadline_ms + 1);
        assert!(none.is_empty());
    }

    // ---- uploads ----

    #[test]
    fn uploads_of_attempts_no_longer_wanted_are_refused_before_decoding() {
        let (mut fx, _) = Fx::with_round(4, 3);
        let a = fx.host();
        let not_wanted = |step: UploadStep| matches!(step, UploadStep::Answer(UploadOutcome::Rejected(r)) if r.contains("not wanted"));
        // Given back (Failed).
        let u = fx.one(a, &[], T0);
        fx.grid.fail(a, u.unit_id, "gave up", T0 + 1).unwrap();
        assert!(matches!(
            fx.attempt(u.unit_id).state,
            AttemptState::Failed(_)
        ));
        assert!(not_wanted(
            fx.grid.upload_begin(a, u.unit_id, T0 + 2).unwrap()
        ));
        // Released: a work request that does not list it.
        let v = fx.one(a, &[], T0 + 3);
        let (w, _) = fx.ask(a, 1, &[], T0 + 4);
        assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Released);
        assert!(not_wanted(
            fx.grid.upload_begin(a, v.unit_id, T0 + 5).unwrap()
        ));
        // Expired, its job still open at the same place: a late result is wanted.
        let w = &w[0];
        fx.grid.tick(w.deadline_ms).unwrap();
        assert_eq!(fx.attempt(w.unit_id).state, AttemptState::Expired);
        assert!(matches!(
            fx.grid
                .upload_begin(a, w.unit_id, w.deadline_ms + 1)
                .unwrap(),
            UploadStep::Plan(_)
        ));
        assert_eq!(
            fx.upload(a, w, 2, w.deadline_ms + 2),
            UploadOutcome::Accepted
        );
        // Done: answered `Duplicate` at once.
        assert!(matches!(
            fx.grid
                .upload_begin(a, w.unit_id, w.deadline_ms + 3)
                .unwrap(),
            UploadStep::Answer(UploadOutcome::Duplicate)
        ));
        // A refused result fails the attempt: the next upload is not decoded.
        let x = fx.one(a, &[], w.deadline_ms + 4);
        let (sum, _) = result_for(&x, 2);
        assert!(matches!(
            fx.grid
                .upload(a, x.unit_id, sum.clone(), b"junk", None, w.deadline_ms + 5)
                .unwrap(),
            UploadOutcome::Rejected(_)
        ));
        assert!(not_wanted(
            fx.grid
                .upload_begin(a, x.unit_id, w.deadline_ms + 6)
                .unwrap()
        ));
    }

    #[test]
    fn a_late_result_for_an_open_job_is_accepted_once() {
        // Two sites: the second job stays queued so the round stays open.
        let (mut fx, round) = Fx::with_round(2, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid.tick(u.deadline_ms).unwrap();
        // Round-robin offers the expired job first to a host that did not miss it.
        let v = fx.one(b, &[], u.deadline_ms + 1);
        assert_eq!(v.job_id, u.job_id);

        // A's result arrives after its deadline while B is still on the job.
        let late = u.deadline_ms + 10;
        let (sum_a, file_a) = result_for(&u, 4);
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum_a.clone(), &file_a, None, late)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Done);
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Done);
        assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Aborted);
        let result = job.result.clone().unwrap();
        assert_eq!((result.unit_id, result.host_id), (u.unit_id, a));
        assert_eq!(result.summary, sum_a);
        assert_eq!(result.accepted_ms, late);
        assert_eq!(
            result.file,
            format!("{}/{}-{}.lf", u.round_id, u.job_id, u.unit_id)
        );
        let ha = fx.host_rec(a);
        assert_eq!(
            (ha.jobs_done, ha.pages_done, ha.deadlines_missed),
            (1, 3, 1)
        );
        let site = fx.grid.sites[&u.site].last_scan.clone().unwrap();
        assert_eq!((site.round_id, site.pages, site.links), (round, 3, 4));
        let st = fx.grid.status();
        assert_eq!((st.jobs_done, st.jobs_queued, st.jobs_running), (1, 1, 0));

        // B is told to stop, and its own result is acknowledged and dropped.
        assert_eq!(
            fx.grid.progress(b, v.unit_id, 5, 5, late + 1).unwrap(),
            ProgressOutcome::Abort("job done elsewhere".into())
        );
        let (sum_b, file_b) = result_for(&v, 9);
        for t in [late + 2, late + 3] {
            assert_eq!(
                fx.grid
                    .upload(b, v.unit_id, sum_b.clone(), &file_b, None, t)
                    .unwrap(),
                UploadOutcome::Duplicate
            );
        }
        assert_eq!(fx.job(u.job_id), job);
        assert_eq!(fs::read(lf_path(&fx, &u)).unwrap(), file_a);
        assert_eq!(files_under(&fx.links()).len(), 1);
        assert_eq!(fx.host_rec(a), ha);
        let hb = fx.host_rec(b);
        assert_eq!((hb.jobs_done, hb.pages_done, hb.failures), (0, 0, 0));
        assert_eq!(fx.grid.sites[&u.site].last_scan.as_ref(), Some(&site));
        let st = fx.grid.status();
        assert_eq!((st.jobs_done, st.jobs_queued, st.jobs_running), (1, 1, 0));
        assert_eq!(fx.round_state(round), RoundState::Running);
    }

    #[test]
    fn the_same_upload_again_is_a_duplicate() {
        let (mut fx, round) = Fx::with_round(2, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let (sum, file) = result_for(&u, 5);
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum.clone(), &file, None, T0 + 1)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let path = lf_path(&fx, &u);
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        let job = fx.job(u.job_id);
        let host = fx.host_rec(a);
        // The same upload again (a retry after a lost answer), then a different file
        // for the same unit: both acknowledged, neither changes anything.
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum, &file, None, T0 + 2)
                .unwrap(),
            UploadOutcome::Duplicate
        );
        assert_eq!(fx.upload(a, &u, 7, T0 + 3), UploadOutcome::Duplicate);
        assert_eq!(fs::read(&path).unwrap(), file);
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime);
        assert_eq!(files_under(&fx.links()), vec![path]);
        assert_eq!(fx.job(u.job_id), job);
        assert_eq!(fx.host_rec(a).jobs_done, 1);
        assert_eq!(fx.host_rec(a).pages_done, host.pages_done);
        assert_eq!(fx.grid.status().jobs_done, 1);
        assert_eq!(fx.round_state(round), RoundState::Running);
    }

    #[test]
    fn bad_uploads_are_rejected_and_write_nothing() {
        let (mut fx, _) = Fx::with_round(8, 5);
        let a = fx.host();
        let b = fx.host();
        let (units, _) = fx.ask(a, 8, &[], T0);
        assert_eq!(units.len(), 8);
        let now = T0 + 1000;
        let mut rejected = Vec::new();
        let mut expect_rejected =
            |fx: &mut Fx, host: u64, unit_id: u64, sum: ScanSummary, file: &[u8]| match fx
                .grid
                .upload(host, unit_id, sum, file, None, now)
                .unwrap()
            {
                UploadOutcome::Rejected(reason) => {
                    assert!(!reason.is_empty());
                    rejected.push(reason);
                }
                other => panic!("unit {unit_id}: expected Rejected, got {other:?}"),
            };

        // Not a link file at all.
        expect_rejected(&mut fx, a, units[0].unit_id, summary(0), b"not a link file");
        // A valid file with one byte flipped.
        let (sum, mut file) = result_for(&units[1], 20);
        let mid = file.len() / 2;
        file[mid] ^= 0x40;
        expect_rejected(&mut fx, a, units[1].unit_id, sum, &file);
        // A header for another unit, another round, another site.
        let (sum, file) = result_for(&units[3], 2);
        expect_rejected(&mut fx, a, units[2].unit_id, sum, &file);
        let mut h = header_for(&units[3], 2);
        h.round_id += 1000;
        let file = linkfile::encode(&h, &records(&units[3].site, 2)).unwrap();
        expect_rejected(&mut fx, a, units[3].unit_id, summary(2), &file);
        let mut h = header_for(&units[4], 2);
        h.site = "elsewhere.test".into();
        let file = linkfile::encode(&h, &records(&units[4].site, 2)).unwrap();
        expect_rejected(&mut fx, a, units[4].unit_id, summary(2), &file);
        // A summary whose link count disagrees with the file.
        let (_, file) = result_for(&units[5], 3);
        expect_rejected(&mut fx, a, units[5].unit_id, summary(4), &file);
        // A unit issued to another host, with an otherwise valid file.
        let (sum, file) = result_for(&units[6], 3);
        expect_rejected(&mut fx, b, units[6].unit_id, sum.clone(), &file);
        // A unit nobody issued.
        expect_rejected(&mut fx, a, 987_654_321, sum, &file);
        assert_eq!(rejected.len(), 8);
        assert!(rejected[5].contains("summary"));
        assert!(rejected[6].contains("not issued"));
        assert!(rejected[7].contains("unknown unit"));

        assert!(files_under(&fx.links()).is_empty(), "nothing under links/");
        // A refused result ends its attempt: the job goes back to the queue.
        for u in &units[..6] {
            assert!(matches!(
                fx.attempt(u.unit_id).state,
                AttemptState::Failed(_)
            ));
            let job = fx.job(u.job_id);
            assert_eq!(job.state, JobState::Queued);
            assert!(job.result.is_none());
            assert_eq!(job.reasons.len(), 1);
        }
        assert_eq!(fx.host_rec(a).failures, 6);
        assert_eq!(fx.host_rec(a).jobs_done, 0);
        // Another host's upload does not touch the owner's attempt nor count against it.
        assert_eq!(fx.attempt(units[6].unit_id).state, AttemptState::Running);
        assert_eq!(fx.job(units[6].job_id).state, JobState::Running);
        assert_eq!(fx.host_rec(b).failures, 0);
        assert_eq!(fx.grid.status().jobs_done, 0);
    }

    #[test]
    fn an_accepted_link_file_is_durable_and_decodes() {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let (sum, file) = result_for(&u, 12);
        assert!(!lf_path(&fx, &u).exists());
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum, &file, None, T0 + 1)
                .unwrap(),
            UploadOutcome::Accepted
        );
        assert_eq!(fx.grid.links_dir(), fx.links().as_path());
        let path = lf_path(&fx, &u);
        let on_disk = fs::read(&path).unwrap();
        assert_eq!(on_disk, file);
        let (h, recs) = linkfile::decode(&on_disk).unwrap();
        assert_eq!(h, header_for(&u, 12));
        assert_eq!(recs, records(&u.site, 12));
        let all = files_under(&fx.links());
        assert_eq!(all, vec![path.clone()]);
        assert!(all.iter().all(|p| p.extension().is_some_and(|e| e == "lf")));
        let job = fx.job(u.job_id);
        assert_eq!(
            fx.links().join(&job.result.unwrap().file),
            path,
            "the stored relative path names the file"
        );
    }

    #[test]
    fn write_durable_creates_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a").join("b").join("7.lf");
        write_durable(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_durable(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(files_under(dir.path()), vec![path]);
        assert!(write_durable(Path::new("/"), b"x").is_err());
    }

    // ---- progress ----

    #[test]
    fn progress_continues_then_extends_in_the_last_half() {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        assert_eq!(u.deadline_ms, T0 + WINDOW_MS);
        assert_eq!(
            fx.grid.progress(a, u.unit_id, 3, 7, T0 + 1000).unwrap(),
            ProgressOutcome::Continue
        );
        let at = fx.attempt(u.unit_id);
        assert_eq!((at.pages, at.links, at.deadline_ms), (3, 7, u.deadline_ms));
        // Exactly half-way is still the first half.
        let half = T0 + WINDOW_MS / 2;
        assert_eq!(
            fx.grid.progress(a, u.unit_id, 4, 8, half).unwrap(),
            ProgressOutcome::Continue
        );
        let now = half + 1;
        let d = match fx.grid.progress(a, u.unit_id, 5, 9, now).unwrap() {
            ProgressOutcome::Extend(d) => d,
            other => panic!("expected Extend, got {other:?}"),
        };
        assert_eq!(d, now + WINDOW_MS);
        assert!(d > u.deadline_ms && d <= u.issued_ms + 4 * WINDOW_MS);
        assert_eq!(fx.attempt(u.unit_id).deadline_ms, d);
        // The extension is stored, not only in memory.
        let stored = fx.grid.store.jobs().unwrap();
        let sj = stored.iter().find(|j| j.id == u.job_id).unwrap();
        assert_eq!(sj.attempts[0].deadline_ms, d);
        // The old deadline no longer expires it; the new one does.
        assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 0);
        assert_eq!(fx.grid.tick(d - 1).unwrap(), 0);
        assert_eq!(fx.grid.tick(d).unwrap(), 1);
        assert_eq!(fx.job(u.job_id).state, JobState::Queued);
        // Back from sleep, nobody took the job over: the scan goes on, its
        // attempt running again with a fresh deadline.
        let back = d + 1;
        assert_eq!(
            fx.grid.progress(a, u.unit_id, 6, 10, back).unwrap(),
            ProgressOutcome::Extend(back + WINDOW_MS)
        );
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Running);
        assert_eq!(fx.job(u.job_id).state, JobState::Running);
        assert_eq!(fx.job(u.job_id).failed_attempts(), 0);
    }

    #[test]
    fn a_host_back_from_sleep_is_told_to_stop_when_its_job_went_to_another() {
        let (mut fx, a, b, u, v) = two_copies();
        // a wakes up: one scan of a site at a time, so a stops.
        assert!(matches!(
            fx.grid.progress(a, u.unit_id, 9, 9, v.issued_ms + 5).unwrap(),
            ProgressOutcome::Abort(r) if r.contains("another host")
        ));
        assert_eq!(
            fx.grid
                .progress(b, v.unit_id, 1, 1, v.issued_ms + 6)
                .unwrap(),
            ProgressOutcome::Continue
        );
    }

    /// Regression: extensions once stopped four windows after issue, so a
    /// live polite scan of a large site expired (and was cut) while it still
    /// made progress. Now a scan is extended for as long as its pages grow,
    /// and one that stalls expires a window after its last extension.
    #[test]
    fn a_scan_that_makes_progress_is_extended_for_as_long_as_it_runs() {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let window = u.deadline_ms - u.issued_ms;
        let mut deadline = u.deadline_ms;
        // Twenty windows of a scan that keeps finding pages.
        for pages in 1..=20 {
            match fx
                .grid
                .progress(a, u.unit_id, pages, 1, deadline - 1)
                .unwrap()
            {
                ProgressOutcome::Extend(d) => {
                    assert_eq!(d, deadline - 1 + window);
                    deadline = d;
                }
                other => panic!("progress {pages}: expected Extend, got {other:?}"),
            }
            assert_eq!(fx.grid.tick(deadline - 1).unwrap(), 0);
        }
        assert!(deadline > u.issued_ms + 20 * window);
        // It stalls: the same page count is no progress, so no extension.
        assert_eq!(
            fx.grid.progress(a, u.unit_id, 20, 1, deadline - 1).unwrap(),
            ProgressOutcome::Continue
        );
        assert_eq!(fx.grid.tick(deadline).unwrap(), 1);
    }

    #[test]
    fn progress_aborts_what_is_not_wanted_any_more() {
        let (mut fx, round) = Fx::with_round(2, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        assert!(matches!(
            fx.grid.progress(a, 987_654_321, 1, 1, T0 + 1).unwrap(),
            ProgressOutcome::Abort(_)
        ));
        assert_eq!(
            fx.grid.progress(b, u.unit_id, 1, 1, T0 + 1).unwrap(),
            ProgressOutcome::Abort("unit belongs to another host".into())
        );
        // B's report did not touch A's attempt.
        assert_eq!(fx.attempt(u.unit_id).pages, 0);
        assert!(matches!(
            fx.grid.progress(a + 1000, u.unit_id, 1, 1, T0 + 1),
            Err(GridError::UnknownHost(_))
        ));
        fx.grid.cancel_round(round, T0 + 2).unwrap();
        assert_eq!(
            fx.grid.progress(a, u.unit_id, 1, 1, T0 + 3).unwrap(),
            ProgressOutcome::Abort("round cancelled".into())
        );
    }

    // ---- holding, revoking, cancelling ----

    #[test]
    fn a_unit_no_longer_held_goes_back_to_the_queue() {
        let (mut fx, _) = Fx::with_round(2, 3);
        let a = fx.host();
        let b = fx.host();
        let (units, _) = fx.ask(a, 2, &[], T0);
        let (u1, u2) = (units[0].clone(), units[1].clone());
        // Still holding both: nothing changes.
        let (none, _) = fx.ask(a, 0, &[u1.unit_id, u2.unit_id], T0 + 1);
        assert!(none.is_empty());
        assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Running);
        // A lost u2 (say, its spool was wiped).
        let (none, _) = fx.ask(a, 0, &[u1.unit_id], T0 + 2);
        assert!(none.is_empty());
        assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Released);
        assert_eq!(fx.attempt(u1.unit_id).state, AttemptState::Running);
        let job2 = fx.job(u2.job_id);
        assert_eq!(job2.state, JobState::Queued);
        // An attempt that ended without a result: it counts against the
        // job's attempts (a host that drops every unit it gets cannot keep
        // a job going round for ever).
        assert_eq!(job2.failed_attempts(), 1);
        assert!(job2.reasons.iter().any(|r| r.contains("no longer holds")));
        let ha = fx.host_rec(a);
        assert_eq!((ha.deadlines_missed, ha.failures), (0, 0));
        // Another host gets it at once, long before the old deadline.
        let v = fx.one(b, &[], T0 + 3);
        assert_eq!(v.job_id, u2.job_id);
        // The released unit never expires.
        assert_eq!(fx.grid.tick(u2.deadline_ms).unwrap(), 1); // u1 only
        assert_eq!(fx.attempt(u2.unit_id).state, AttemptState::Released);
        assert_eq!(fx.attempt(u1.unit_id).state, AttemptState::Expired);
        assert_eq!(fx.host_rec(a).deadlines_missed, 1);

        // A host that forgot everything can be handed a job again in the same reply.
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let again = fx.one(a, &[], T0 + 1);
        assert_eq!(again.job_id, u.job_id);
        assert_ne!(again.unit_id, u.unit_id);
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Released);
        assert_eq!(fx.attempt(again.unit_id).state, AttemptState::Running);
    }

    #[test]
    fn a_host_that_drops_every_unit_it_gets_fails_the_job_at_its_attempt_limit() {
        let (mut fx, round) = Fx::with_round(1, 3);
        let a = fx.host();
        let mut t = T0;
        for _ in 0..3 {
            // It refuses the unit (say, a bad signature) and never lists it.
            fx.one(a, &[], t);
            t += 1000;
        }
        fx.ask(a, 0, &[], t);
        let job = fx.job(fx.grid.jobs.keys().copied().next().unwrap());
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.attempts.len(), 3, "never more attempts than the limit");
        assert_eq!(fx.round_state(round), RoundState::Done);
    }

    #[test]
    fn a_revoked_host_loses_its_units_and_its_access() {
        let (mut fx, _) = Fx::with_round(3, 3);
        let a = fx.host();
        let b = fx.host();
        let (units, _) = fx.ask(a, 2, &[], T0);
        fx.grid.revoke(a, T0 + 5).unwrap();
        for u in &units {
            assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Released);
            assert_eq!(fx.job(u.job_id).state, JobState::Queued);
        }
        assert!(fx.host_rec(a).revoked);
        let st = fx.grid.status();
        assert_eq!((st.hosts, st.hosts_revoked, st.jobs_queued), (1, 1, 3));

        let req = WorkRequest {
            want_seconds: 60,
            free_slots: 4,
            units_held: units.iter().map(|u| u.unit_id).collect(),
            open_windows: None,
        };
        assert!(matches!(
            fx.grid.request_work(a, &req, T0 + 6),
            Err(GridError::Revoked(id)) if id == a
        ));
        assert!(fx.host_rec(a).revoked);
        assert!(matches!(
            fx.grid.hello(a, T0 + 6),
            Err(GridError::Revoked(_))
        ));
        assert!(matches!(
            fx.grid.progress(a, units[0].unit_id, 1, 1, T0 + 6),
            Err(GridError::Revoked(_))
        ));
        let (sum, file) = result_for(&units[0], 1);
        assert!(matches!(
            fx.grid
                .upload(a, units[0].unit_id, sum, &file, None, T0 + 6),
            Err(GridError::Revoked(_))
        ));
        assert!(files_under(&fx.links()).is_empty());
        assert!(!fx.host_rec(b).revoked);

        // The queue is whole again for the others; A's old deadlines do not count.
        let (got, _) = fx.ask(b, 4, &[], T0 + 7);
        assert_eq!(got.len(), 3);
        assert_eq!(fx.grid.tick(units[0].deadline_ms).unwrap(), 0);
        assert_eq!(fx.host_rec(a).deadlines_missed, 0);
        assert!(matches!(
            fx.grid.revoke(b + 1000, T0),
            Err(GridError::UnknownHost(_))
        ));

        assert_eq!(fx.host_rec(a).state(), "revoked");
        // A host that leaves is refused alike, but listed as left.
        fx.grid.leave(b, T0 + 9).unwrap();
        assert_eq!(fx.host_rec(b).state(), "left");
        assert!(fx.host_rec(b).revoked);
        assert!(matches!(
            fx.grid.hello(b, T0 + 10),
            Err(GridError::Revoked(_))
        ));
        let st = fx.grid.status();
        assert_eq!((st.hosts, st.hosts_revoked, st.hosts_left), (0, 1, 1));
    }

    #[test]
    fn a_cancelled_round_stops_its_units() {
        let (mut fx, round) = Fx::with_round(2, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        fx.grid.cancel_round(round, T0 + 10).unwrap();
        let r = &fx.grid.rounds[&round];
        assert_eq!(
            (r.state, r.finished_ms),
            (RoundState::Cancelled, Some(T0 + 10))
        );
        assert!(matches!(
            fx.grid.cancel_round(round, T0 + 11),
            Err(GridError::Invalid(_))
        ));
        assert!(matches!(
            fx.grid.cancel_round(round + 1000, T0 + 11),
            Err(GridError::UnknownRound(_))
        ));
        assert!(matches!(
            fx.grid.progress(a, u.unit_id, 1, 1, T0 + 12).unwrap(),
            ProgressOutcome::Abort(_)
        ));
        // A result that still arrives is dropped, and the host told why.
        assert_eq!(
            fx.upload(a, &u, 2, T0 + 13),
            UploadOutcome::Rejected(ABORT_ROUND_CANCELLED.into())
        );
        assert!(files_under(&fx.links()).is_empty());
        assert_eq!(fx.host_rec(a).jobs_done, 0);
        // Its queued job is not handed out; hosts idle.
        let (none, r) = fx.ask(b, 4, &[], T0 + 14);
        assert!(none.is_empty());
        assert_eq!(r.retry_after_s, Some(RETRY_IDLE_S));
        assert!(!r.rounds_open);
        // The host was told to stop: the old deadline is not held against it.
        assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 0);
        assert_eq!(fx.host_rec(a).deadlines_missed, 0);
        assert_ne!(fx.attempt(u.unit_id).state, AttemptState::Running);
    }

    /// A cancelled round's unfinished jobs say so, and a host is told at
    /// its next work request which of its held units to drop.
    #[test]
    fn a_cancelled_round_names_its_units_to_drop_and_its_jobs_cancelled() {
        let (mut fx, round) = Fx::with_round(3, 3);
        let changed = fx.grid.rounds_changed();
        let a = fx.host();
        let (units, _) = fx.ask(a, 3, &[], T0);
        assert_eq!(units.len(), 3);
        assert_eq!(fx.upload(a, &units[0], 1, T0 + 1), UploadOutcome::Accepted);
        let held = [units[1].unit_id, units[2].unit_id];
        let (_, before) = fx.ask(a, 0, &held, T0 + 2);
        assert!(before.cancelled_units.is_empty());
        fx.grid.cancel_round(round, T0 + 3).unwrap();
        let (none, after) = fx.ask(a, 4, &held, T0 + 4);
        assert!(none.is_empty());
        assert_eq!(after.cancelled_units, held.to_vec());
        let states: Vec<JobState> = fx
            .grid
            .round(round)
            .unwrap()
            .1
            .iter()
            .map(|j| j.state)
            .collect();
        assert_eq!(
            states,
            vec![JobState::Done, JobState::Cancelled, JobState::Cancelled]
        );
        assert_eq!(
            fx.job(units[1].job_id).completeness().why_not.as_deref(),
            Some("round cancelled")
        );
        assert_eq!(
            fx.grid.progress(a, units[2].unit_id, 1, 1, T0 + 5).unwrap(),
            ProgressOutcome::Abort(ABORT_ROUND_CANCELLED.into())
        );
        // The hosts are told of the cancel, and of a new round.
        assert_eq!(fx.grid.rounds_changed(), changed + 1);
        fx.grid.start_round(params(3), T0 + 6).unwrap();
        assert_eq!(fx.grid.rounds_changed(), changed + 2);
    }

    fn excl(host: &str) -> Exclusion {
        Exclusion::parse(host, false).unwrap()
    }

    /// An excluded host leaves the target set and cannot come back by
    /// `sites add` while the exclusion holds; the others are added.
    #[test]
    fn an_excluded_site_leaves_the_target_set_and_is_refused_again() {
        let mut fx = Fx::new();
        let sites = vec![
            "www.a.test".to_string(),
            "b.test".into(),
            "c.test:8080".into(),
        ];
        fx.grid.add_sites(&sites, T0).unwrap();
        let out = fx
            .grid
            .exclude(excl("a.test"), "  owner\n asked ", T0)
            .unwrap();
        assert_eq!(out.sites_removed, ["www.a.test"]);
        assert_eq!(out.record.reason, "owner asked");
        let out = fx
            .grid
            .exclude(excl("http://c.test/"), "ticket 7", T0)
            .unwrap();
        assert_eq!(out.sites_removed, ["c.test:8080"], "every port");
        let left: Vec<String> = fx.grid.sites().into_iter().map(|s| s.host).collect();
        assert_eq!(left, ["b.test"]);
        let (added, refused) = fx
            .grid
            .add_sites_except_excluded(&["a.test".into(), "d.test".into(), "www.c.test".into()], T0)
            .unwrap();
        assert_eq!(added, 1);
        let refused: Vec<(usize, String)> = refused.into_iter().map(|(i, h, _)| (i, h)).collect();
        assert_eq!(
            refused,
            [(0, "a.test".to_string()), (2, "www.c.test".into())]
        );
        assert!(matches!(
            fx.grid.add_sites(&["a.test".into()], T0),
            Err(GridError::Invalid(m)) if m.contains("excluded") && m.contains("owner asked")
        ));
        // Empty reasons are refused; excluding again replaces the reason.
        assert!(fx.grid.exclude(excl("e.test"), " \t", T0).is_err());
        let again = fx
            .grid
            .exclude(excl("www.a.test"), "new reason", T0 + 1)
            .unwrap();
        assert_eq!(
            again.replaced.map(|r| r.reason).as_deref(),
            Some("owner asked")
        );
        assert_eq!(fx.grid.exclusions().len(), 2);
        // Lifted: the site may be added again; it is not added by itself.
        let lifted = fx.grid.include(&excl("a.test")).unwrap();
        assert_eq!(lifted.reason, "new reason");
        assert!(fx.grid.include(&excl("a.test")).is_err());
        assert_eq!(fx.grid.sites().len(), 2);
        fx.grid.add_sites(&["a.test".into()], T0).unwrap();
        // The exclusions are durable.
        drop(fx.grid);
        let g = open_grid(fx.dir.path(), &fx.key);
        let kept: Vec<String> = g
            .exclusions()
            .iter()
            .map(|e| e.exclusion.display())
            .collect();
        assert_eq!(kept, ["c.test"]);
    }

    /// A subdomain exclusion covers every name under it; one of a name
    /// covered by another cannot be lifted alone.
    #[test]
    fn subdomain_exclusions_cover_every_name_under_them() {
        let mut fx = Fx::new();
        fx.grid
            .add_sites(&["x.test".into(), "lab.x.test".into(), "y.test".into()], T0)
            .unwrap();
        let out = fx
            .grid
            .exclude(Exclusion::parse(".x.test", false).unwrap(), "all of it", T0)
            .unwrap();
        assert_eq!(out.sites_removed, ["lab.x.test", "x.test"]);
        assert!(fx.grid.excluded_by("a.b.lab.x.test").is_some());
        assert!(fx.grid.excluded_by("y.test").is_none());
        assert!(fx.grid.excluded_by("xx.test").is_none());
        let err = fx
            .grid
            .include(&excl("lab.x.test"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("sites include .x.test"), "{err}");
    }

    /// Excluding a host mid-round fails its job with the reason `excluded`,
    /// its running copy hears so, and its held unit is named to drop; a
    /// job whose `domain` scope reaches the host is restarted with units
    /// that carry the exclusion.
    #[test]
    fn an_exclusion_takes_jobs_out_of_running_rounds_and_rides_in_units() {
        let mut fx = Fx::new();
        fx.grid
            .add_sites(&["s0.test".into(), "s1.test".into(), "t.test".into()], T0)
            .unwrap();
        let mut p = params(3);
        p.scope = Scope::Domain;
        let round = fx.grid.start_round(p, T0).unwrap();
        let a = fx.host();
        let (units, _) = fx.ask(a, 3, &[], T0);
        assert_eq!(units.len(), 3);
        assert!(units.iter().all(|u| u.exclusions.is_empty()));
        let held: Vec<u64> = units.iter().map(|u| u.unit_id).collect();
        let changed = fx.grid.rounds_changed();
        let of = |site: &str| units.iter().find(|u| u.site == site).unwrap().clone();
        let out = fx
            .grid
            .exclude(excl("s0.test"), "owner asked", T0 + 1)
            .unwrap();
        assert_eq!(out.jobs_excluded, 1);
        assert_eq!(fx.grid.rounds_changed(), changed + 1);
        let s0 = of("s0.test");
        assert_eq!(fx.job(s0.job_id).state, JobState::Failed);
        assert_eq!(
            fx.job(s0.job_id).completeness().why_not.as_deref(),
            Some("failed: excluded: owner asked")
        );
        assert_eq!(
            fx.grid.progress(a, s0.unit_id, 1, 1, T0 + 2).unwrap(),
            ProgressOutcome::Abort("site excluded".into())
        );
        // A subdomain of t.test, inside t.test's domain scope.
        let out = fx
            .grid
            .exclude(excl("lab.t.test"), "lab asked", T0 + 3)
            .unwrap();
        assert_eq!((out.jobs_excluded, out.copies_restarted), (0, 1));
        let t = of("t.test");
        assert_eq!(fx.job(t.job_id).state, JobState::Queued);
        let (again, reply) = fx.ask(a, 3, &held, T0 + 4);
        assert_eq!(reply.cancelled_units, vec![s0.unit_id, t.unit_id]);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].site, "t.test");
        assert_eq!(again[0].exclusions, vec![excl("lab.t.test")]);
        assert_eq!(again[0].scope, Scope::Domain);
        // s1.test's unit goes on: nothing inside its scope was excluded.
        assert_eq!(
            fx.grid
                .progress(a, of("s1.test").unit_id, 1, 1, T0 + 5)
                .unwrap(),
            ProgressOutcome::Continue
        );
        assert_eq!(fx.round_state(round), RoundState::Running);
        // A new round has no job for the excluded site.
        let mut p = params(3);
        p.scope = Scope::Domain;
        let next = fx.grid.start_round(p, T0 + 6).unwrap();
        let sites: Vec<String> = fx
            .grid
            .round(next)
            .unwrap()
            .1
            .into_iter()
            .map(|j| j.site)
            .collect();
        assert_eq!(sites, ["s1.test", "t.test"]);
    }

    /// A result with a record from a page on an excluded host inside the
    /// scope is refused: a crawl never requests such a page.
    #[test]
    fn a_record_from_an_excluded_host_is_refused() {
        let mut fx = Fx::new();
        fx.grid.add_sites(&["t.test".into()], T0).unwrap();
        fx.grid
            .exclude(excl("lab.t.test"), "lab asked", T0)
            .unwrap();
        let mut p = params(3);
        p.scope = Scope::Domain;
        fx.grid.start_round(p, T0).unwrap();
        let a = fx.host();
        let unit = fx.one(a, &[], T0);
        assert_eq!(unit.exclusions, vec![excl("lab.t.test")]);
        let mut recs = records("t.test", 3);
        recs[2].source_url = "http://www.lab.t.test/p".into();
        let file = linkfile::encode(&header_for(&unit, 3), &recs).unwrap();
        let out = fx
            .grid
            .upload(a, unit.unit_id, summary(3), &file, None, T0 + 1)
            .unwrap();
        assert!(
            matches!(&out, UploadOutcome::Rejected(m) if m.contains("www.lab.t.test")),
            "{out:?}"
        );
        // The job goes on; the same result without that record is taken
        // (the source is inside the domain scope: only the exclusion refused it).
        let again = fx.one(a, &[], T0 + 2);
        let file = linkfile::encode(&header_for(&again, 2), &recs[..2]).unwrap();
        let out = fx
            .grid
            .upload(a, again.unit_id, summary(2), &file, None, T0 + 3)
            .unwrap();
        assert_eq!(out, UploadOutcome::Accepted);
    }

    /// A unit carries only the exclusions inside its scope, at most
    /// MAX_UNIT_EXCLUSIONS; past that its site is scanned with scope host.
    #[test]
    fn a_unit_carries_the_exclusions_inside_its_scope_bounded() {
        let mut fx = Fx::new();
        fx.grid.exclude(excl("a.x.test"), "r", T0).unwrap();
        fx.grid.exclude(excl("b.x.test"), "r", T0).unwrap();
        fx.grid.exclude(excl("x-y.test"), "r", T0).unwrap();
        fx.grid.exclude(excl("y.test"), "r", T0).unwrap();
        let hosts = |v: Vec<Exclusion>| v.into_iter().map(|e| e.host).collect::<Vec<_>>();
        let (scope, inside) = fx.grid.unit_scope("www.x.test", Scope::Subdomains);
        assert_eq!(scope, Scope::Subdomains);
        assert_eq!(hosts(inside), ["a.x.test", "b.x.test"]);
        assert_eq!(
            fx.grid.unit_scope("x.test", Scope::Host),
            (Scope::Host, Vec::new())
        );
        let (_, none) = fx.grid.unit_scope("z.test", Scope::Domain);
        assert!(none.is_empty());
        for i in 0..MAX_UNIT_EXCLUSIONS - 2 {
            fx.grid
                .exclude(excl(&format!("h{i}.x.test")), "r", T0)
                .unwrap();
        }
        let (scope, inside) = fx.grid.unit_scope("x.test", Scope::Domain);
        assert_eq!((scope, inside.len()), (Scope::Domain, MAX_UNIT_EXCLUSIONS));
        fx.grid.exclude(excl("one-more.x.test"), "r", T0).unwrap();
        assert_eq!(
            fx.grid.unit_scope("x.test", Scope::Domain),
            (Scope::Host, Vec::new())
        );
    }

    /// A scan that fetched no page because its site could not be reached
    /// is a failed attempt named by its cause; at the attempt limit the job
    /// fails with that reason, never done.
    #[test]
    fn a_site_never_reached_fails_its_job_with_the_cause() {
        use beebot_shared::linkfile::StopReason as S;
        let (mut fx, round) = Fx::with_round(1, 2);
        let a = fx.host();
        for (i, stop) in [S::DnsFailed, S::ConnectionRefused].into_iter().enumerate() {
            let now = T0 + 10 * i as u64;
            let u = fx.one(a, &[], now);
            let sum = ScanSummary {
                stopped_by: Some(stop),
                errors: 1,
                ..ScanSummary::default()
            };
            let why = upload_with(&mut fx, a, &u, sum, &[], now + 1);
            assert_eq!(why.as_deref(), Some(stop.as_str()));
            assert_eq!(
                fx.attempt(u.unit_id).state,
                AttemptState::Failed(stop.as_str().into())
            );
        }
        let (_, jobs) = fx.grid.round(round).unwrap();
        assert_eq!(jobs[0].state, JobState::Failed);
        let why = jobs[0].completeness().why_not.unwrap_or_default();
        assert!(why.contains("connection-refused"), "{why}");
        assert_eq!(fx.round_state(round), RoundState::Done);
        assert!(files_under(&fx.links()).is_empty());
    }

    // ---- persistence ----

    #[test]
    fn everything_survives_a_reopen() {
        let (mut fx, round) = Fx::with_round(4, 3);
        let a = fx.host();
        let b = fx.host();
        fx.grid.benchmark(a, 20.0, 500.0, 3, T0).unwrap();
        let spare = fx.grid.create_invite(2, T0 + HOUR_MS, T0).unwrap();
        let (units, _) = fx.ask(a, 2, &[], T0 + 1);
        let (u1, u2) = (&units[0], &units[1]);
        // u1 done with a result; u2 expires; B takes u2's job and gives another back.
        assert_eq!(fx.upload(a, u1, 6, T0 + 2), UploadOutcome::Accepted);
        fx.grid.tick(u2.deadline_ms).unwrap();
        let (got, _) = fx.ask(b, 2, &[], u2.deadline_ms + 1);
        let v = got.iter().find(|g| g.job_id == u2.job_id).unwrap().clone();
        let w = got.iter().find(|g| g.job_id != u2.job_id).unwrap().clone();
        fx.grid
            .fail(b, w.unit_id, "seed unreachable", u2.deadline_ms + 2)
            .unwrap();
        // Persist every host's last word so last_seen_ms is on disk too.
        fx.grid.hello(a, u2.deadline_ms + 3).unwrap();
        fx.grid.hello(b, u2.deadline_ms + 3).unwrap();
        fx.grid.remove_site("s3.test").unwrap();

        let sites = fx.grid.sites();
        let rounds = fx.grid.rounds();
        let jobs = fx.grid.jobs.clone();
        let hosts = fx.grid.hosts();
        let invites = fx.grid.invites.clone();
        let unit_map = fx.grid.units.clone();
        let status = serde_json::to_string(&fx.grid.status()).unwrap();
        assert_eq!(sites.len(), 3);
        assert_eq!(invites.len(), 3);
        assert_eq!(unit_map.len(), 4);
        assert!(jobs[&u1.job_id].result.is_some());

        // A link file a crash interrupted mid-write: swept on reopen.
        let stray = fx.links().join(round.to_string()).join("9-9.1-0.tmp");
        fs::write(&stray, b"half").unwrap();
        let Fx { dir, key, grid } = fx;
        drop(grid);
        let grid = open_grid(dir.path(), &key);
        let mut fx = Fx { dir, key, grid };
        assert!(!stray.exists());
        assert!(lf_path(&fx, u1).exists());

        assert_eq!(fx.grid.sites(), sites);
        assert_eq!(fx.grid.rounds(), rounds);
        assert_eq!(fx.grid.jobs, jobs);
        assert_eq!(fx.grid.hosts(), hosts);
        assert_eq!(fx.grid.invites, invites);
        assert_eq!(fx.grid.units, unit_map);
        assert_eq!(serde_json::to_string(&fx.grid.status()).unwrap(), status);
        assert_eq!(fx.grid.round(round).unwrap().1.len(), 4);
        assert_eq!(
            fx.grid.project_public_key(),
            fx.key.verifying_key().to_bytes()
        );

        // And the grid carries on where it stopped.
        let k = sign::generate_key().verifying_key().to_bytes();
        let c = fx.grid.enrol(&spare, k, info("c"), T0 + 10).unwrap();
        assert!(c > *unit_map.keys().max().unwrap(), "ids never repeat");
        assert_eq!(
            fx.upload(b, &v, 2, u2.deadline_ms + 10),
            UploadOutcome::Accepted
        );
        assert_eq!(
            fx.upload(a, u1, 6, u2.deadline_ms + 11),
            UploadOutcome::Duplicate
        );
        assert_eq!(fs::read(lf_path(&fx, u1)).unwrap(), result_for(u1, 6).1);
        assert_eq!(fx.host_rec(a).jobs_done, 1);
        assert_eq!(fx.host_rec(b).jobs_done, 1);
    }

    #[test]
    fn sites_are_added_once_and_removed() {
        let mut fx = Fx::new();
        assert_eq!(fx.grid.add_sites(&site_names(3), T0).unwrap(), 3);
        assert_eq!(fx.grid.add_sites(&site_names(4), T0 + 1).unwrap(), 1);
        let sites = fx.grid.sites();
        assert_eq!(sites.len(), 4);
        assert_eq!(sites[0].added_ms, T0);
        assert_eq!(sites[3].added_ms, T0 + 1);
        assert_eq!(
            fx.grid.remove_site("s0.test").unwrap().as_deref(),
            Some("s0.test")
        );
        assert_eq!(fx.grid.remove_site("s0.test").unwrap(), None);
        assert_eq!(fx.grid.status().sites, 3);
    }

    #[test]
    fn www_and_the_bare_host_are_one_site_in_either_order() {
        let mut fx = Fx::new();
        fx.grid.add_sites(&["www.attrs.test".into()], T0).unwrap();
        match fx
            .grid
            .add_sites(&["b.test".into(), "attrs.test".into()], T0)
        {
            Err(GridError::SameSite {
                given, existing, ..
            }) => {
                assert_eq!(
                    (given.as_str(), existing.as_str()),
                    ("attrs.test", "www.attrs.test")
                );
            }
            other => panic!("the bare host of a site: {other:?}"),
        }
        assert_eq!(fx.grid.sites().len(), 1, "a refused batch adds nothing");
        fx.grid.add_sites(&["x.test".into()], T0).unwrap();
        assert!(matches!(
            fx.grid.add_sites(&["www.x.test".into()], T0),
            Err(GridError::SameSite { .. })
        ));
        // Both in one batch.
        assert!(matches!(
            fx.grid
                .add_sites(&["y.test".into(), "www.y.test".into()], T0),
            Err(GridError::SameSite {
                where_: "given before it",
                ..
            })
        ));
        // Another port is another site; the same host again is no change.
        assert_eq!(
            fx.grid
                .add_sites(&["x.test:8080".into(), "x.test".into()], T0)
                .unwrap(),
            1
        );
        // Removing either name removes the one site.
        assert_eq!(
            fx.grid.remove_site("attrs.test").unwrap().as_deref(),
            Some("www.attrs.test")
        );
        assert_eq!(fx.grid.sites().len(), 2);
    }

    #[test]
    fn a_name_in_use_is_refused_until_its_host_is_gone_and_names_find_hosts() {
        let mut fx = Fx::new();
        let tok = fx.grid.create_invite(5, T0 + HOUR_MS, T0).unwrap();
        let key = || sign::generate_key().verifying_key().to_bytes();
        let alice = fx.grid.enrol(&tok, key(), info("alice"), T0).unwrap();
        match fx.grid.enrol(&tok, key(), info("Alice "), T0 + 1) {
            Err(GridError::NameTaken { host_id, .. }) => assert_eq!(host_id, alice),
            other => panic!("a taken name: {other:?}"),
        }
        let e = fx
            .grid
            .enrol(&tok, key(), info("alice"), T0 + 1)
            .unwrap_err();
        assert!(e.to_string().contains("--name"), "{e}");
        assert_eq!(fx.grid.invites[&sha256(&tok)].uses_left, 4, "no use spent");
        assert_eq!(fx.grid.find_host("alice").unwrap(), alice);
        assert_eq!(fx.grid.find_host(&alice.to_string()).unwrap(), alice);
        assert!(matches!(
            fx.grid.find_host("bob"),
            Err(GridError::UnknownHostName(_))
        ));
        // Once alice is revoked, her name is free again.
        fx.grid.revoke(alice, T0 + 2).unwrap();
        let alice2 = fx.grid.enrol(&tok, key(), info("alice"), T0 + 3).unwrap();
        assert_eq!(
            fx.grid.find_host("alice").unwrap(),
            alice2,
            "the active one"
        );
        // Two active hosts of one name (enrolled before names were unique)
        // are ambiguous: the error lists their ids.
        let mut other = fx.grid.hosts[&alice].clone();
        other.id = alice2 + 100;
        other.revoked = false;
        fx.grid.hosts.insert(other.id, other);
        match fx.grid.find_host("alice") {
            Err(GridError::AmbiguousHostName { ids, .. }) => {
                assert_eq!(ids, vec![alice2, alice2 + 100]);
            }
            other => panic!("ambiguous: {other:?}"),
        }
    }

    #[test]
    fn a_site_a_wider_sites_scope_covers_is_folded_into_it_for_the_round() {
        let sites: Vec<String> = [
            "example.edu",
            "cs.example.edu",
            "lab.cs.example.edu",
            "other.org",
            "example.edu:8080",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let jobs_and_folds = |scope: Scope| {
            let mut fx = Fx::new();
            fx.grid.add_sites(&sites, T0).unwrap();
            let p = RoundParams { scope, ..params(3) };
            let round = fx.grid.start_round(p, T0).unwrap();
            let r = fx.grid.rounds[&round].clone();
            let mut jobs: Vec<String> = r
                .job_ids
                .iter()
                .map(|j| fx.grid.jobs[j].site.clone())
                .collect();
            jobs.sort();
            let mut folds: Vec<(String, String)> = r
                .folded
                .iter()
                .map(|f| (f.site.clone(), f.into.clone()))
                .collect();
            folds.sort();
            (jobs, folds)
        };
        // Host scope: every site crawls its own host; none folded.
        let (jobs, folds) = jobs_and_folds(Scope::Host);
        assert_eq!(jobs.len(), 5, "{jobs:?}");
        assert!(folds.is_empty(), "{folds:?}");
        // Subdomains: example.edu covers every name under it (its port only).
        let (jobs, folds) = jobs_and_folds(Scope::Subdomains);
        let want = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            let mut v: Vec<_> = v
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            folds,
            want(&[
                ("cs.example.edu", "example.edu"),
                ("lab.cs.example.edu", "example.edu")
            ])
        );
        assert_eq!(jobs, ["example.edu", "example.edu:8080", "other.org"]);
        // Domain: one registrable domain, one job (the first listed).
        let (jobs, folds) = jobs_and_folds(Scope::Domain);
        assert_eq!(jobs, ["cs.example.edu", "example.edu:8080", "other.org"]);
        assert_eq!(
            folds,
            want(&[
                ("example.edu", "cs.example.edu"),
                ("lab.cs.example.edu", "cs.example.edu")
            ])
        );
    }

    #[test]
    fn status_right_after_a_round_counts_that_rounds_jobs() {
        let (mut fx, round) = Fx::with_round(2, 3);
        assert_eq!(fx.grid.status().jobs_queued, 2);
        fx.grid.cancel_round(round, T0 + 1).unwrap();
        let s = fx.grid.status();
        assert_eq!(s.rounds_running, 0);
        assert_eq!(s.jobs_rounds, vec![round]);
        assert_eq!(s.jobs_cancelled, 2);
        assert_eq!(
            s.jobs_queued + s.jobs_running + s.jobs_done + s.jobs_failed,
            0
        );
    }

    // ---- scheduling (issue 4) ----

    /// Two hosts and `sites` sites.
    fn two_hosts(sites: usize) -> (Fx, Vec<u64>) {
        let mut fx = Fx::new();
        let hosts = vec![fx.host(), fx.host()];
        fx.grid.add_sites(&site_names(sites), T0).unwrap();
        (fx, hosts)
    }

    fn start(fx: &mut Fx, policy: &str, now: u64) -> u64 {
        let p = RoundParams {
            policy: policy.into(),
            ..params(3)
        };
        fx.grid.start_round(p, now).unwrap()
    }

    #[test]
    fn adaptive_hands_the_stragglers_scan_over_to_a_faster_host_never_beside_it() {
        let (mut fx, hosts) = two_hosts(1);
        let (slow, fast) = (hosts[0], hosts[1]);
        let idle = fx.host();
        fx.grid.benchmark(slow, 0.1, 10.0, 1, T0).unwrap();
        fx.grid.benchmark(fast, 100.0, 1000.0, 1, T0).unwrap();
        start(&mut fx, "adaptive", T0);
        // While the fast host is online the slow one leaves the job to it.
        let (none, _) = fx.ask(slow, 1, &[], T0 + 1);
        assert!(none.is_empty());
        // Once the others have been silent a while, the slow host takes the
        // only job (500 s expected).
        let t = T0 + scheduler::ONLINE_WINDOW_MS + 1;
        let u = fx.one(slow, &[], t);
        // A unit still waiting in its host's buffer is not handed over.
        let (none, _) = fx.ask(fast, 1, &[], t + 500);
        assert!(none.is_empty());
        assert_eq!(
            fx.grid.progress(slow, u.unit_id, 2, 2, t + 600).unwrap(),
            ProgressOutcome::Continue
        );
        // The fast host, idle, wants a copy: it gets none (two copies
        // would crawl the site at twice the round's rate), and the running
        // scan is asked to hand over at its next report.
        let (none, _) = fx.ask(fast, 1, &[], t + 1000);
        assert!(none.is_empty(), "no second copy beside a running scan");
        assert_eq!(fx.job(u.job_id).running_attempts().count(), 1);
        let (none, _) = fx.ask(idle, 2, &[], t + 1100);
        assert!(none.is_empty());
        assert_eq!(
            fx.grid.progress(slow, u.unit_id, 3, 3, t + 1500).unwrap(),
            ProgressOutcome::Abort(ABORT_HAND_OVER.into())
        );
        // The scan stops at a page boundary and uploads its part with its
        // frontier: a segment, and the job back in the queue.
        let (sum, file, state) = partial_for(&u, 3, 3);
        assert_eq!(
            fx.grid
                .upload(slow, u.unit_id, sum, &file, Some(&state), t + 2000)
                .unwrap(),
            UploadOutcome::Accepted
        );
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Partial);
        // The host that handed it over does not take it back while another
        // is online; the fast host continues from the frontier.
        let (none, _) = fx.ask(slow, 1, &[], t + 2100);
        assert!(none.is_empty(), "the continuation is for another host");
        let v = fx.one(fast, &[], t + 2200);
        assert_eq!(v.job_id, u.job_id);
        assert_eq!(v.resume.as_ref().map(|r| r.pages_done), Some(3));
        assert!(fx.attempt(v.unit_id).replica, "counted as the copy wanted");
        assert_eq!(fx.upload(fast, &v, 2, t + 3000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Done);
        assert_eq!(
            job.attempts
                .iter()
                .filter(|a| a.state == AttemptState::Aborted)
                .count(),
            0,
            "no scan was thrown away"
        );
    }

    #[test]
    fn reaches_meet_where_two_sites_share_a_host_name() {
        let meet = |a: &str, b: &str, scope: Scope| {
            reaches_meet(&reach_key(a, scope), &reach_key(b, scope))
        };
        // Domain scope: the registrable domain covers every host under it.
        assert!(meet("example.edu", "cs.example.edu", Scope::Domain));
        assert!(meet("cs.example.edu", "math.example.edu", Scope::Domain));
        assert!(!meet("example.edu", "example.org", Scope::Domain));
        // Subdomains scope: a host covers the names under it, not beside it.
        assert!(meet("example.edu", "cs.example.edu", Scope::Subdomains));
        assert!(meet("cs.example.edu", "example.edu", Scope::Subdomains));
        assert!(!meet(
            "cs.example.edu",
            "math.example.edu",
            Scope::Subdomains
        ));
        assert!(!meet("ample.edu", "example.edu", Scope::Subdomains));
        // Host scope: only the same host, on any port.
        assert!(!meet("example.edu", "cs.example.edu", Scope::Host));
        assert!(meet("example.edu:8080", "example.edu", Scope::Host));
        // Across rounds of other scopes: a host inside a domain-scope site.
        assert!(reaches_meet(
            &reach_key("cs.example.edu", Scope::Host),
            &reach_key("example.edu", Scope::Domain)
        ));
        // The index finds the queued jobs a running one meets, above and under it.
        let mut index: BTreeMap<String, BTreeMap<u64, bool>> = BTreeMap::new();
        for (id, site, scope) in [
            (1, "example.edu", Scope::Subdomains),
            (2, "a.cs.example.edu", Scope::Host),
            (3, "math.example.edu", Scope::Subdomains),
            (4, "example.org", Scope::Subdomains),
            (5, "edu", Scope::Host),
        ] {
            let (k, tree) = reach_key(site, scope);
            index.entry(k).or_default().insert(id, tree);
        }
        let found = |site: &str, scope: Scope| {
            let mut out = BTreeSet::new();
            queued_meeting(&index, &reach_key(site, scope), &mut out);
            out.into_iter().collect::<Vec<u64>>()
        };
        assert_eq!(found("cs.example.edu", Scope::Subdomains), vec![1, 2]);
        assert_eq!(found("cs.example.edu", Scope::Host), vec![1]);
        assert_eq!(found("example.edu", Scope::Subdomains), vec![1, 2, 3]);
        assert_eq!(found("example.net", Scope::Subdomains), Vec::<u64>::new());
    }

    /// A round over `sites` in `scope`, and two hosts.
    fn round_of(sites: &[&str], scope: Scope, policy: &str) -> (Fx, Vec<u64>) {
        let mut fx = Fx::new();
        let names: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
        fx.grid.add_sites(&names, T0).unwrap();
        let hosts = vec![fx.host(), fx.host()];
        let p = RoundParams {
            scope,
            policy: policy.into(),
            ..params(3)
        };
        fx.grid.start_round(p, T0).unwrap();
        (fx, hosts)
    }

    #[test]
    fn jobs_whose_sites_share_a_host_never_run_at_once() {
        // A site inside another's reach is folded into its job: one job
        // crawls both (domain scope: the first listed of one registrable
        // domain; subdomains: the wider site), and nothing else waits.
        for (scope, kept) in [
            (Scope::Domain, "cs.example.edu"),
            (Scope::Subdomains, "example.edu"),
        ] {
            let (mut fx, h) = round_of(
                &["example.edu", "cs.example.edu", "other.edu"],
                scope,
                "round-robin",
            );
            let (mine, _) = fx.ask(h[0], 3, &[], T0 + 1);
            let sites: BTreeSet<String> = mine.iter().map(|u| u.site.clone()).collect();
            let want: BTreeSet<String> = [kept, "other.edu"].map(String::from).into();
            assert_eq!(sites, want, "{scope:?}");
            let (none, _) = fx.ask(h[1], 3, &[], T0 + 2);
            assert!(none.is_empty(), "{scope:?}: {none:?}");
        }
        // The same host from two sites (two ports): one at a time too; in
        // host scope, a host and its subdomain are not the same host.
        let (mut fx, h) = round_of(
            &["example.edu", "example.edu:8080", "cs.example.edu"],
            Scope::Host,
            "round-robin",
        );
        let (mine, _) = fx.ask(h[0], 3, &[], T0 + 1);
        let sites: BTreeSet<String> = mine.iter().map(|u| u.site.clone()).collect();
        assert_eq!(mine.len(), 2, "{sites:?}");
        assert!(sites.contains("cs.example.edu"));
    }

    /// Under every policy, with hosts of different speeds asking, reporting
    /// and uploading in turn: a job never has two running copies (its checks
    /// included), and two jobs whose sites share a host never run at once.
    #[test]
    fn under_every_policy_one_stream_of_requests_per_host() {
        for policy in scheduler::POLICY_NAMES {
            for validate in [ValidateMode::Off, ValidateMode::All] {
                let mut fx = Fx::new();
                // Two ports of one host: their reaches meet, neither covers
                // the other (a site is folded only on its own port).
                let sites = ["example.edu", "example.edu:8080", "a.test", "b.test"];
                let names: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
                fx.grid.add_sites(&names, T0).unwrap();
                let hosts: Vec<u64> = (0..3).map(|_| fx.host()).collect();
                for (i, h) in hosts.iter().enumerate() {
                    let speed = [0.2, 5.0, 50.0][i];
                    fx.grid.benchmark(*h, speed, speed * 10.0, 2, T0).unwrap();
                }
                let p = RoundParams {
                    scope: Scope::Domain,
                    policy: policy.into(),
                    validate,
                    ..params(5)
                };
                let round = fx.grid.start_round(p, T0).unwrap();
                let mut held: HashMap<u64, Vec<WorkUnit>> = HashMap::new();
                let mut hand_overs = 0;
                for step in 0..200u64 {
                    let now = T0 + step * 5_000;
                    let h = hosts[(step % 3) as usize];
                    let ids: Vec<u64> = held
                        .get(&h)
                        .into_iter()
                        .flatten()
                        .map(|u| u.unit_id)
                        .collect();
                    let (got, _) = fx.ask(h, 2, &ids, now);
                    held.entry(h).or_default().extend(got);
                    // Each held unit reports progress; every third step the
                    // oldest finishes.
                    let mine = held.remove(&h).unwrap_or_default();
                    let mut keep = Vec::new();
                    for (k, u) in mine.into_iter().enumerate() {
                        let pages = 1 + step / 3;
                        match fx
                            .grid
                            .progress(h, u.unit_id, pages, pages, now + 1)
                            .unwrap()
                        {
                            ProgressOutcome::Abort(r) if r == ABORT_HAND_OVER => {
                                hand_overs += 1;
                                let (sum, file, state) = partial_for(&u, 2, pages.min(49));
                                fx.grid
                                    .upload(h, u.unit_id, sum, &file, Some(&state), now + 2)
                                    .unwrap();
                            }
                            ProgressOutcome::Abort(_) => {}
                            _ if k == 0 && step % 3 == 2 => {
                                fx.upload(h, &u, 3, now + 2);
                            }
                            _ => keep.push(u),
                        }
                    }
                    held.insert(h, keep);
                    fx.grid.tick(now + 3).unwrap();
                    let (_, jobs) = fx.grid.round(round).unwrap();
                    let running: Vec<&JobRecord> = jobs
                        .iter()
                        .filter(|j| j.running_attempts().next().is_some())
                        .collect();
                    for j in &running {
                        assert_eq!(j.running_attempts().count(), 1, "{policy}: job {}", j.id);
                    }
                    let shared = running
                        .iter()
                        .filter(|j| j.site.starts_with("example.edu"))
                        .count();
                    assert!(
                        shared <= 1,
                        "{policy}: two jobs on the host example.edu at once"
                    );
                }
                // The policy that wants copies got them as hand-overs.
                let replicates = scheduler::policy_by_name(policy).unwrap().replicates();
                if replicates && validate == ValidateMode::Off {
                    assert!(hand_overs > 0, "{policy}: no hand-over");
                }
            }
        }
    }

    /// The steps the server runs apart (the link file is verified and
    /// written outside the grid lock), interleaved: two copies of a job and
    /// the same unit twice each write a whole file of their own; the first
    /// to finish wins, a loser's file is removed, the winner's stays.
    #[test]
    fn interleaved_uploads_keep_exactly_the_winners_file() {
        let (mut fx, hosts) = two_hosts(1);
        let (slow, fast) = (hosts[0], hosts[1]);
        fx.grid.benchmark(slow, 0.1, 10.0, 1, T0).unwrap();
        fx.grid.benchmark(fast, 100.0, 1000.0, 1, T0).unwrap();
        start(&mut fx, "adaptive", T0);
        let t = T0 + scheduler::ONLINE_WINDOW_MS + 1;
        let u = fx.one(slow, &[], t);
        // Two copies run at once only when one passed its deadline (a host
        // asleep, which may wake up and upload late).
        let t = u.deadline_ms;
        assert_eq!(fx.grid.tick(t).unwrap(), 1);
        let v = fx.one(fast, &[], t + 1000);
        assert_eq!(v.job_id, u.job_id);
        let begin = |fx: &mut Fx, host: u64, unit: &WorkUnit| match fx
            .grid
            .upload_begin(host, unit.unit_id, t + 2000)
            .unwrap()
        {
            UploadStep::Plan(p) => p,
            UploadStep::Answer(o) => panic!("{o:?}"),
        };
        let (sum_u, file_u) = result_for(&u, 3);
        let (sum_v, file_v) = result_for(&v, 4);
        // Both copies, and the fast copy a second time (a retry in flight).
        let pu = begin(&mut fx, slow, &u);
        let pv = begin(&mut fx, fast, &v);
        let pv2 = begin(&mut fx, fast, &v);
        for (p, sum, file) in [
            (&pu, &sum_u, &file_u),
            (&pv, &sum_v, &file_v),
            (&pv2, &sum_v, &file_v),
        ] {
            p.verify(sum, file, None).unwrap();
            p.write(file, None).unwrap();
        }
        // A file that lies is refused by `verify`, before anything is written.
        assert!(pu.verify(&sum_v, &file_v, None).is_err());
        let done = |fx: &mut Fx, p: &UploadPlan, sum: &ScanSummary| {
            fx.grid
                .upload_finish(p, sum.clone(), Verified::default(), t + 3000)
                .unwrap()
        };
        assert_eq!(done(&mut fx, &pv, &sum_v), UploadOutcome::Accepted);
        assert_eq!(done(&mut fx, &pu, &sum_u), UploadOutcome::Duplicate);
        assert_eq!(done(&mut fx, &pv2, &sum_v), UploadOutcome::Duplicate);
        let path = lf_path(&fx, &v);
        assert_eq!(files_under(&fx.links()), vec![path.clone()]);
        assert_eq!(fs::read(&path).unwrap(), file_v);
        let job = fx.job(v.job_id);
        assert_eq!(job.result.as_ref().map(|r| r.unit_id), Some(v.unit_id));
        assert_eq!(fx.host_rec(fast).jobs_done, 1);
        assert_eq!(fx.host_rec(slow).jobs_done, 0);
    }

    #[test]
    fn batch_plans_at_round_start_and_each_host_pulls_its_own() {
        let (mut fx, hosts) = two_hosts(4);
        let (fast, slow) = (hosts[0], hosts[1]);
        fx.grid.benchmark(fast, 10.0, 100.0, 1, T0).unwrap();
        fx.grid.benchmark(slow, 1.0, 10.0, 1, T0).unwrap();
        let round = start(&mut fx, "batch", T0);
        // Four sites of 50 pages; speeds 10:1 → the fast host's share is 181.8
        // pages (three sites), the slow one's 18.2 (none); the fourth is dealt
        // to the slowest host first.
        let (_, jobs) = fx.grid.round(round).unwrap();
        let of = |h: u64| jobs.iter().filter(|j| j.batch_host == Some(h)).count();
        assert_eq!((of(fast), of(slow)), (3, 1));
        let (s, _) = fx.ask(slow, 4, &[], T0 + 1);
        assert_eq!(s.len(), 1);
        assert_eq!(fx.job(s[0].job_id).batch_host, Some(slow));
        let (f, _) = fx.ask(fast, 4, &[], T0 + 2);
        assert_eq!(f.len(), 3);
        assert!(f.iter().all(|u| fx.job(u.job_id).batch_host == Some(fast)));
    }

    #[test]
    fn a_batch_is_released_when_its_host_stays_silent() {
        let (mut fx, hosts) = two_hosts(2);
        let (fast, slow) = (hosts[0], hosts[1]);
        fx.grid.benchmark(fast, 10.0, 100.0, 1, T0).unwrap();
        fx.grid.benchmark(slow, 10.0, 100.0, 1, T0).unwrap();
        start(&mut fx, "batch", T0);
        let (mine, _) = fx.ask(fast, 4, &[], T0 + 1);
        assert_eq!(mine.len(), 1, "only its own batch");
        let held: Vec<u64> = mine.iter().map(|u| u.unit_id).collect();
        let grace = scheduler::BATCH_GRACE_MS;
        let (none, _) = fx.ask(fast, 4, &held, T0 + grace - 1);
        assert!(
            none.is_empty(),
            "the other batch is kept during the grace period"
        );
        let (other, _) = fx.ask(fast, 4, &held, T0 + grace + 1);
        assert_eq!(other.len(), 1, "the silent host's batch is released");
    }

    #[test]
    fn speeds_are_learned_from_real_jobs_and_size_deadlines() {
        let mut fx = Fx::new();
        let a = fx.host();
        fx.grid.add_sites(&site_names(2), T0).unwrap();
        start(&mut fx, "adaptive", T0);
        let u = fx.one(a, &[], T0);
        // 3 pages in 1.5 s: 2 pages/s.
        assert_eq!(fx.upload(a, &u, 2, T0 + 1), UploadOutcome::Accepted);
        let h = fx.host_rec(a);
        assert_eq!(h.avg_pages_per_s, Some(2.0));
        assert_eq!(h.bytes_done, 3000);
        // 50 pages at 2 pages/s = 25 s × 3 + 10 s grace.
        let v = fx.one(a, &[], T0 + 2);
        assert_eq!(v.deadline_ms - v.issued_ms, 85_000);
    }

    #[test]
    fn a_long_silence_counts_as_time_away() {
        let mut fx = Fx::new();
        let a = fx.host();
        fx.grid.hello(a, T0 + scheduler::ONLINE_WINDOW_MS).unwrap();
        assert_eq!(fx.host_rec(a).offline_ms, 0);
        let later = T0 + 3 * scheduler::ONLINE_WINDOW_MS;
        fx.grid.hello(a, later).unwrap();
        assert_eq!(fx.host_rec(a).offline_ms, 2 * scheduler::ONLINE_WINDOW_MS);
        assert_eq!(fx.host_rec(a).last_seen_ms, later);
    }

    #[test]
    fn a_repeating_round_starts_once_over_and_its_period_passed() {
        let mut fx = Fx::new();
        let a = fx.host();
        fx.grid.add_sites(&site_names(1), T0).unwrap();
        assert!(matches!(
            fx.grid.start_round_every(params(3), Some(0), T0),
            Err(GridError::Invalid(_))
        ));
        let r1 = fx
            .grid
            .start_round_every(params(3), Some(60_000), T0)
            .unwrap();
        // Not over yet: nothing starts, whatever the time.
        assert!(fx.grid.repeat_due_rounds(T0 + HOUR_MS).unwrap().is_empty());
        let u = fx.one(a, &[], T0);
        assert_eq!(fx.upload(a, &u, 2, T0 + 1000), UploadOutcome::Accepted);
        assert_eq!(fx.round_state(r1), RoundState::Done);
        // Over, but the period has not passed.
        assert!(fx.grid.repeat_due_rounds(T0 + 59_999).unwrap().is_empty());
        let started = fx.grid.repeat_due_rounds(T0 + 60_000).unwrap();
        assert_eq!(started.len(), 1);
        let r2 = started[0];
        assert_eq!(fx.grid.rounds[&r1].next_round, Some(r2));
        let (round2, jobs) = fx.grid.round(r2).unwrap();
        assert_eq!(
            (round2.every_ms, round2.params.clone()),
            (Some(60_000), params(3))
        );
        // Its jobs use the figures of the last scan (3 pages).
        assert_eq!(jobs[0].est_pages, 3.0);
        // Once only.
        assert!(fx.grid.repeat_due_rounds(T0 + 61_000).unwrap().is_empty());
        // A cancelled round does not repeat.
        fx.grid.cancel_round(r2, T0 + 70_000).unwrap();
        assert!(fx
            .grid
            .repeat_due_rounds(T0 + 10 * HOUR_MS)
            .unwrap()
            .is_empty());
    }

    // ---- continuations ----

    /// One site, two hosts, and two copies of its job from the same start:
    /// `a`'s unit `u` passed its deadline (a host asleep) and went to `b` as `v`.
    fn two_copies() -> (Fx, u64, u64, WorkUnit, WorkUnit) {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
        let v = fx.one(b, &[], u.deadline_ms + 1);
        assert_eq!(v.job_id, u.job_id);
        (fx, a, b, u, v)
    }

    /// A scan that stopped early: `n` records, its summary saying why, and
    /// its frontier with `pages_done` pages of the job behind it.
    fn partial_for(unit: &WorkUnit, n: usize, pages_done: u64) -> (ScanSummary, Vec<u8>, Vec<u8>) {
        let (mut sum, file) = result_for(unit, n);
        sum.stopped_by = Some(linkfile::StopReason::MaxTime);
        let state = ScanState {
            site: unit.site.clone(),
            pages_done,
            queue: vec![beebot_shared::scanstate::QueuedUrl {
                url: format!("http://{}/next", unit.site),
                depth: 1,
            }],
            seen: vec![1, 2, 3],
            robots: Vec::new(),
        }
        .encode()
        .unwrap();
        (sum, file, state)
    }

    #[test]
    fn a_scan_cut_by_the_time_budget_continues_from_its_frontier_until_the_natural_end() {
        let (mut fx, round) = Fx::with_round(1, 2);
        let a = fx.host();
        let b = fx.host();
        let u = fx.one(a, &[], T0);
        assert!(u.resume.is_none(), "the first scan starts from the seed");
        // Cut by the budget after 3 pages (summary(3) counts 3 pages).
        let (sum, file, state) = partial_for(&u, 3, 3);
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum.clone(), &file, Some(&state), T0 + 10)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued, "a cut scan never ends its job");
        assert_eq!(job.segments.len(), 1);
        assert!(job.result.is_none());
        assert_eq!(fx.attempt(u.unit_id).state, AttemptState::Partial);
        assert_eq!(fx.round_state(round), RoundState::Running);
        let state_path = fx.links().join(&job.segments[0].state_file);
        assert_eq!(fs::read(&state_path).unwrap(), state);
        // The same upload again is a duplicate, not a second segment.
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum, &file, Some(&state), T0 + 11)
                .unwrap(),
            UploadOutcome::Duplicate
        );
        assert_eq!(fx.job(u.job_id).segments.len(), 1);
        // The continuation goes to any host, and names the frontier by its hash.
        let v = fx.one(b, &[], T0 + 20);
        assert_eq!(v.job_id, u.job_id);
        let r = v.resume.clone().expect("a continuation unit");
        assert_eq!(r.state_sha256, state_sha256(&state));
        assert_eq!(r.state_bytes, state.len() as u64);
        assert_eq!(r.pages_done, 3);
        assert_eq!(
            fx.grid.state_of_unit(b, v.unit_id).unwrap(),
            StateAnswer::Read(state_path.clone(), r.state_sha256)
        );
        assert!(matches!(
            fx.grid.state_of_unit(a, v.unit_id).unwrap(),
            StateAnswer::Abort(_)
        ));
        assert!(matches!(
            fx.grid.state_of_unit(a, u.unit_id).unwrap(),
            StateAnswer::Abort(_)
        ));
        // The continuation reaches the natural end: the job is done, the
        // export is both link files, and the frontier is removed.
        assert_eq!(fx.upload(b, &v, 4, T0 + 30), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Done);
        let files: Vec<&str> = job.link_files().collect();
        assert_eq!(files.len(), 2);
        assert!(files.iter().all(|f| fx.links().join(f).exists()));
        // The export's union: the two scans' files share three pairs (the
        // fixture's records repeat), and each pair comes once.
        let mut pairs = Vec::new();
        for_each_job_link(&fx.links(), &job, |r| {
            pairs.push((r.source_url.clone(), r.target_url.clone()));
            Ok(())
        })
        .unwrap();
        let expected: Vec<(String, String)> = records(&u.site, 4)
            .into_iter()
            .map(|r| (r.source_url, r.target_url))
            .collect();
        assert_eq!(pairs, expected);
        // A visitor's error stops the export and comes back as it is.
        assert_eq!(
            for_each_job_link(&fx.links(), &job, |_| Err("disk full".into())),
            Err("disk full".to_string())
        );
        assert!(!state_path.exists());
        let c = job.completeness();
        // (`summary` counts 3 pages a scan.)
        assert_eq!((c.pages, c.links, c.scans), (3 + 3, 3 + 4, 2));
        assert!(c.natural_end && c.why_not.is_none());
        assert_eq!(fx.round_state(round), RoundState::Done);
        // The site's size for the next round is the whole job's.
        assert_eq!(fx.grid.sites()[0].last_scan.as_ref().unwrap().pages, 6);
        // Segments are no failures: the budget is a choice, not a fault.
        assert_eq!(job.failed_attempts(), 0);
        assert_eq!(fx.host_rec(a).failures, 0);
    }

    #[test]
    fn a_scan_that_stops_early_without_its_frontier_or_a_page_is_refused() {
        let (mut fx, _) = Fx::with_round(1, 5);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let (sum, file, _) = partial_for(&u, 3, 3);
        let o = fx
            .grid
            .upload(a, u.unit_id, sum, &file, None, T0 + 1)
            .unwrap();
        assert!(
            matches!(&o, UploadOutcome::Rejected(r) if r.contains("without its frontier")),
            "{o:?}"
        );
        assert!(files_under(&fx.links()).is_empty(), "nothing kept");
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued);
        assert!(job.segments.is_empty() && job.result.is_none());
        // A frontier with no page gained is a failed attempt, not a segment.
        let v = fx.one(a, &[], T0 + 2);
        let (mut sum, file, state) = partial_for(&v, 0, 0);
        sum.pages = 0;
        let o = fx
            .grid
            .upload(a, v.unit_id, sum, &file, Some(&state), T0 + 3)
            .unwrap();
        assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("without a page")));
        assert!(files_under(&fx.links()).is_empty());
        assert_eq!(fx.job(u.job_id).failed_attempts(), 2);
        // A frontier of another site, or one that counts fewer pages than
        // the job already took, is refused.
        let w = fx.one(a, &[], T0 + 4);
        let (sum, file, _) = partial_for(&w, 3, 3);
        let mut other = ScanState::decode(&partial_for(&w, 3, 3).2).unwrap();
        other.site = "elsewhere.test".into();
        let o = fx
            .grid
            .upload(
                a,
                w.unit_id,
                sum.clone(),
                &file,
                Some(&other.encode().unwrap()),
                T0 + 5,
            )
            .unwrap();
        assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("another site")));
        let x = fx.one(a, &[], T0 + 6);
        let (sum, file, state) = partial_for(&x, 3, 2);
        let o = fx
            .grid
            .upload(a, x.unit_id, sum, &file, Some(&state), T0 + 7)
            .unwrap();
        assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("fewer than")));
    }

    #[test]
    fn a_copy_overtaken_by_another_copys_segment_is_aborted_and_dropped() {
        let (mut fx, a, b, u, v) = two_copies();
        let t = v.issued_ms + 10;
        // b's scan is cut first: a's running scan would redo it.
        let (sum, file, state) = partial_for(&v, 2, 3);
        assert_eq!(
            fx.grid
                .upload(b, v.unit_id, sum, &file, Some(&state), t)
                .unwrap(),
            UploadOutcome::Accepted
        );
        // a's late complete result from the seed is acknowledged and dropped.
        assert_eq!(fx.upload(a, &u, 5, t + 1), UploadOutcome::Duplicate);
        assert!(!lf_path(&fx, &u).exists());
        let job = fx.job(u.job_id);
        assert_eq!(job.segments.len(), 1);
        assert!(job.result.is_none());
        // The continuation finishes it.
        let w = fx.one(a, &[], t + 2);
        assert_eq!(w.resume.as_ref().unwrap().pages_done, 3);
        assert_eq!(fx.upload(a, &w, 1, t + 3), UploadOutcome::Accepted);
        assert_eq!(fx.job(u.job_id).state, JobState::Done);
    }

    #[test]
    fn a_running_copy_hears_abort_once_another_copy_went_further() {
        let (mut fx, a, b, u, v) = two_copies();
        let t = v.issued_ms + 10;
        let (sum, file, state) = partial_for(&u, 2, 3);
        // a's late cut scan is still welcome: the job is open at its start.
        assert_eq!(
            fx.grid
                .upload(a, u.unit_id, sum, &file, Some(&state), t)
                .unwrap(),
            UploadOutcome::Accepted
        );
        assert!(matches!(
            fx.grid.progress(b, v.unit_id, 3, 3, t + 1).unwrap(),
            ProgressOutcome::Abort(_)
        ));
        assert_eq!(fx.attempt(v.unit_id).state, AttemptState::Aborted);
    }

    #[test]
    fn a_kept_frontier_holds_only_the_sites_urls_and_no_robots_answers() {
        let (mut fx, _) = Fx::with_round(1, 3);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        let (sum, file, state) = partial_for(&u, 2, 3);
        // A frontier sending the next host elsewhere is refused.
        let mut st = ScanState::decode(&state).unwrap();
        st.queue.push(beebot_shared::scanstate::QueuedUrl {
            url: "http://victim.test/".into(),
            depth: 1,
        });
        let o = fx
            .grid
            .upload(
                a,
                u.unit_id,
                sum.clone(),
                &file,
                Some(&st.encode().unwrap()),
                T0 + 1,
            )
            .unwrap();
        assert!(
            matches!(&o, UploadOutcome::Rejected(r) if r.contains("victim.test")),
            "{o:?}"
        );
        // So is one deeper than the round allows (params: depth 3).
        let v = fx.one(a, &[], T0 + 2);
        let (sum, file, state) = partial_for(&v, 2, 3);
        let mut st = ScanState::decode(&state).unwrap();
        st.queue[0].depth = 4;
        let o = fx
            .grid
            .upload(
                a,
                v.unit_id,
                sum,
                &file,
                Some(&st.encode().unwrap()),
                T0 + 3,
            )
            .unwrap();
        assert!(matches!(&o, UploadOutcome::Rejected(r) if r.contains("depth")));
        // A host's robots.txt answers are not passed on: the next scan asks.
        let w = fx.one(a, &[], T0 + 4);
        let (sum, file, state) = partial_for(&w, 2, 3);
        let mut st = ScanState::decode(&state).unwrap();
        st.robots.push(beebot_shared::scanstate::RobotsAnswer {
            origin: format!("http://{}", w.site),
            status: 404,
            body: Vec::new(),
        });
        assert_eq!(
            fx.grid
                .upload(
                    a,
                    w.unit_id,
                    sum,
                    &file,
                    Some(&st.encode().unwrap()),
                    T0 + 5
                )
                .unwrap(),
            UploadOutcome::Accepted
        );
        let job = fx.job(w.job_id);
        let kept = fs::read(fx.links().join(&job.segments[0].state_file)).unwrap();
        let kept = ScanState::decode(&kept).unwrap();
        assert!(kept.robots.is_empty());
        assert_eq!(kept.queue, st.queue);
        assert_eq!(
            job.segments[0].state_sha256,
            state_sha256(&kept.encode().unwrap())
        );
        // Sent again, the unit's segment is acknowledged before anything is
        // written: its stored files stay as they were.
        let before = fs::read(fx.links().join(&job.segments[0].file)).unwrap();
        assert!(matches!(
            fx.grid.upload_begin(a, w.unit_id, T0 + 6).unwrap(),
            UploadStep::Answer(UploadOutcome::Duplicate)
        ));
        assert_eq!(
            fs::read(fx.links().join(&job.segments[0].file)).unwrap(),
            before
        );
    }

    #[test]
    fn attempts_are_counted_since_the_last_segment_and_a_failed_job_keeps_no_frontier() {
        let (mut fx, round) = Fx::with_round(1, 2);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        // One deadline missed before the first segment...
        assert_eq!(fx.grid.tick(u.deadline_ms).unwrap(), 1);
        let v = fx.one(a, &[], u.deadline_ms + 1);
        let (sum, file, state) = partial_for(&v, 2, 3);
        let t = v.issued_ms + 10;
        assert_eq!(
            fx.grid
                .upload(a, v.unit_id, sum, &file, Some(&state), t)
                .unwrap(),
            UploadOutcome::Accepted
        );
        let seg_state = fx.links().join(&fx.job(u.job_id).segments[0].state_file);
        assert!(seg_state.exists());
        // ...and one after it: two in all, but one since the segment, so the
        // job (at most 2 attempts) goes on.
        let w = fx.one(a, &[], t + 1);
        fx.grid.fail(a, w.unit_id, "boom", t + 2).unwrap();
        assert_eq!(fx.job(u.job_id).state, JobState::Queued);
        assert_eq!(fx.job(u.job_id).failed_attempts(), 1);
        // A second failure since the segment fails it; its frontier goes.
        let x = fx.one(a, &[], t + 3);
        fx.grid.fail(a, x.unit_id, "boom again", t + 4).unwrap();
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Failed);
        assert!(!seg_state.exists());
        assert_eq!(fx.round_state(round), RoundState::Done);
        let c = job.completeness();
        assert!(!c.natural_end);
        assert!(c.why_not.unwrap().starts_with("failed"));
        let counts = crate::api::JobCounts::of_round(&fx.grid.rounds[&round], &[job]);
        assert_eq!((counts.complete, counts.incomplete), (0, 1));
        assert!(counts.verdict().contains("INCOMPLETE"));
    }

    #[test]
    fn a_cancelled_round_counts_its_open_sites_incomplete() {
        let (mut fx, round) = Fx::with_round(3, 2);
        let a = fx.host();
        let u = fx.one(a, &[], T0);
        assert_eq!(fx.upload(a, &u, 1, T0 + 1), UploadOutcome::Accepted);
        fx.grid.cancel_round(round, T0 + 2).unwrap();
        let (r, jobs) = fx.grid.round(round).unwrap();
        let c = crate::api::JobCounts::of_round(&r, &jobs);
        assert_eq!((c.complete, c.incomplete), (1, 2));
        assert_eq!(fx.grid.status().last_round.unwrap().incomplete, 2);
    }

    /// Regression: a failure reason of multi-byte characters was cut inside
    /// a character, which panicked after the attempt failed in memory but
    /// before it was stored, wedging the job until a restart.
    #[test]
    fn a_reason_of_multi_byte_characters_is_kept_whole() {
        let (mut fx, _) = Fx::with_round(1, 10);
        let a = fx.host();
        // Whatever the prefix, some cut falls inside a character.
        for (i, lead) in ["", "x", "xy"].into_iter().enumerate() {
            let u = fx.one(a, &[], T0 + 10 * i as u64);
            let reason = format!("{lead}{}", "é".repeat(MAX_TEXT_LEN));
            fx.grid
                .fail(a, u.unit_id, &reason, T0 + 10 * i as u64 + 1)
                .unwrap();
            let job = fx.job(u.job_id);
            assert_eq!(job.state, JobState::Queued);
            let kept = job.reasons.last().unwrap();
            assert!(kept.len() <= MAX_TEXT_LEN && kept.starts_with("host "));
            assert_eq!(fx.grid.store.jobs().unwrap()[0].reasons, job.reasons);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Every text a host sends (its name, OS and version at enrolment, a
        /// failure reason) in arbitrary Unicode: no panic, stored whole
        /// characters within the text limit.
        #[test]
        fn every_text_a_host_sends_is_bounded_and_never_panics(
            name in ".{0,700}",
            os in ".{0,700}",
            version in ".{0,700}",
            reason in ".{0,1200}",
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut g = Grid::open(
                Store::memory(),
                dir.path().join("links"),
                sign::generate_key(),
                settings(),
            )
            .unwrap();
            let token = g.create_invite(1, T0 + HOUR_MS, T0).unwrap();
            let key = sign::generate_key();
            let info = HostInfo {
                name: name.clone(),
                os,
                client_version: version,
                cores: 4,
            };
            let h = g.enrol(&token, key.verifying_key().to_bytes(), info, T0).unwrap();
            let rec = g.hosts()[0].clone();
            for text in [&rec.info.name, &rec.info.os, &rec.info.client_version] {
                proptest::prop_assert!(text.len() <= MAX_TEXT_LEN);
            }
            proptest::prop_assert!(name.starts_with(&rec.info.name));
            g.add_sites(&site_names(1), T0).unwrap();
            g.start_round(params(3), T0).unwrap();
            let reply = g
                .request_work(
                    h,
                    &WorkRequest {
                        want_seconds: 60,
                        free_slots: 1,
                        units_held: vec![],
                        open_windows: None,
                    },
                    T0,
                )
                .unwrap();
            let pk = VerifyingKey::from_bytes(&g.project_public_key()).unwrap();
            let u = sign::verify_unit(&pk, &reply.units[0]).unwrap();
            g.fail(h, u.unit_id, &reason, T0 + 1).unwrap();
            let job = g.round(u.round_id).unwrap().1.remove(0);
            proptest::prop_assert_eq!(job.state, JobState::Queued);
            for r in &job.reasons {
                proptest::prop_assert!(r.len() <= MAX_TEXT_LEN);
            }
        }
    }

    // ---- validation ----

    /// A grid with `sites` sites, `hosts` hosts and a round validating `mode`.
    fn validating(sites: usize, hosts: usize, mode: ValidateMode) -> (Fx, Vec<u64>) {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(sites), T0).unwrap();
        let ids = (0..hosts).map(|_| fx.host()).collect();
        let p = RoundParams {
            validate: mode,
            ..params(3)
        };
        fx.grid.start_round(p, T0).unwrap();
        (fx, ids)
    }

    /// Upload a natural-end result of `records` for `unit`.
    fn upload_records(
        fx: &mut Fx,
        host: u64,
        unit: &WorkUnit,
        records: &[LinkRecord],
        now: u64,
    ) -> UploadOutcome {
        let file = linkfile::encode(&header_for(unit, records.len()), records).unwrap();
        fx.grid
            .upload(host, unit.unit_id, summary(records.len()), &file, None, now)
            .unwrap()
    }

    /// What a liar returns for `site`: links that do not exist.
    fn fabricated(site: &str, n: usize) -> Vec<LinkRecord> {
        (0..n)
            .map(|i| LinkRecord {
                source_url: format!("http://{site}/made-up{}", i % 3),
                target_url: format!("http://{site}/nowhere{i}"),
                tag: LinkTag::A,
                nofollow: false,
                anchor_text: String::new(),
            })
            .collect()
    }

    /// No unit for `host` now.
    fn nothing_for(fx: &mut Fx, host: u64, now: u64) {
        let (units, _) = fx.ask(host, 4, &[], now);
        assert!(units.is_empty(), "host {host} got {units:?}");
    }

    #[test]
    fn an_untrusted_hosts_result_is_checked_by_another_hosts_scan() {
        let (mut fx, h) = validating(1, 2, ValidateMode::Adaptive);
        let u = fx.one(h[0], &[], T0);
        assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        // Not done: it waits for another host's scan, which the author may not make.
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.validation, JobValidation::Pending);
        assert!(job.result.is_none());
        assert_eq!(job.candidates.len(), 1);
        nothing_for(&mut fx, h[0], T0 + 2000);
        // Its speed is not learned from a result not yet validated.
        assert_eq!(fx.host_rec(h[0]).avg_pages_per_s, None);
        assert_eq!(fx.host_rec(h[0]).jobs_done, 0);
        let v = fx.one(h[1], &[], T0 + 3000);
        assert_eq!(v.job_id, u.job_id);
        assert!(v.resume.is_none(), "a check scans the site afresh");
        assert_eq!(fx.upload(h[1], &v, 6, T0 + 4000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Done);
        assert_eq!(job.validation, JobValidation::Valid);
        assert!(job.candidates.iter().all(|c| c.verdict == Verdict::Valid));
        // The first result is kept; the check's file is removed.
        assert_eq!(job.result.as_ref().unwrap().unit_id, u.unit_id);
        assert!(lf_path(&fx, &u).exists());
        assert!(!lf_path(&fx, &v).exists());
        for id in &h {
            let rec = fx.host_rec(*id);
            assert_eq!((rec.consecutive_valid, rec.valid_results), (1, 1));
            assert!(rec.avg_pages_per_s.is_some(), "learned once valid");
        }
        assert_eq!(fx.host_rec(h[0]).jobs_done, 1);
        assert_eq!(fx.round_state(job.round_id), RoundState::Done);
        // Trust is stored.
        let (dir, key) = (fx.dir.path().to_path_buf(), fx.key.clone());
        drop(fx.grid);
        let g = open_grid(&dir, &key);
        assert_eq!(g.hosts[&h[1]].consecutive_valid, 1);
    }

    #[test]
    fn a_result_that_disagrees_gets_a_third_copy_and_the_liar_loses_its_trust() {
        let (mut fx, h) = validating(2, 3, ValidateMode::All);
        let (liar, honest, third) = (h[0], h[1], h[2]);
        // The liar earned some trust before.
        fx.grid.hosts.get_mut(&liar).unwrap().consecutive_valid = 5;
        let u = fx.one(liar, &[], T0);
        let u2 = fx.one(liar, &[u.unit_id], T0);
        let fake = fabricated(&u.site, 6);
        assert_eq!(
            upload_records(&mut fx, liar, &u, &fake, T0 + 1000),
            UploadOutcome::Accepted
        );
        // Its second result waits for its check too.
        assert_eq!(fx.upload(liar, &u2, 6, T0 + 1000), UploadOutcome::Accepted);
        assert_eq!(fx.job(u2.job_id).validation, JobValidation::Pending);
        let v = fx.one(honest, &[], T0 + 2000);
        assert_eq!(v.job_id, u.job_id);
        assert_eq!(fx.upload(honest, &v, 6, T0 + 3000), UploadOutcome::Accepted);
        // They disagree: a third host scans the site.
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.candidates.len(), 2);
        nothing_for(&mut fx, liar, T0 + 3500);
        let w = fx.one(third, &[], T0 + 4000);
        assert_eq!(w.job_id, u.job_id);
        assert_eq!(fx.upload(third, &w, 6, T0 + 5000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(job.state, JobState::Done);
        assert_eq!(job.validation, JobValidation::Valid);
        let verdicts: Vec<Verdict> = job.candidates.iter().map(|c| c.verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Invalid, Verdict::Valid, Verdict::Valid],
            "the minority is invalid"
        );
        assert_eq!(job.candidates[0].similarity, Some(0.0));
        assert_eq!(job.result.as_ref().unwrap().unit_id, v.unit_id);
        assert!(!lf_path(&fx, &u).exists(), "an invalid result's file goes");
        let rec = fx.host_rec(liar);
        assert_eq!(rec.consecutive_valid, 0);
        assert_eq!(rec.avg_pages_per_s, None, "nothing learned from a liar");
        // The liar's other result, not validated yet, is dropped and its
        // job scanned afresh by someone else.
        let job2 = fx.job(u2.job_id);
        let verdicts: Vec<Verdict> = job2.candidates.iter().map(|c| c.verdict).collect();
        assert_eq!(verdicts, [Verdict::Invalid]);
        assert_eq!(fx.host_rec(liar).invalid_results, 2);
        nothing_for(&mut fx, liar, T0 + 5500);
        assert_eq!(job2.state, JobState::Queued);
        assert_eq!(job2.validation, JobValidation::None);
        assert!(!lf_path(&fx, &u2).exists());
        assert!(job2.reasons.iter().any(|r| r.contains("found lying")));
    }

    #[test]
    fn a_trusted_host_is_checked_only_when_drawn_for_a_spot_check() {
        // trust_after is 2 in these tests, spot checks 0%.
        let (mut fx, h) = validating(5, 2, ValidateMode::Adaptive);
        fx.grid.hosts.get_mut(&h[0]).unwrap().consecutive_valid = 2;
        assert!(fx.grid.is_trusted(h[0]));
        let u = fx.one(h[0], &[], T0);
        assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(
            (job.state, job.validation),
            (JobState::Done, JobValidation::Trusted)
        );
        assert_eq!(
            fx.host_rec(h[0]).jobs_done,
            1,
            "a trusted result is learned at once"
        );
        // Every result drawn: the trusted host's result waits for its check,
        // which goes to a host that is not its author.
        fx.grid.settings.spot_check_percent = 100;
        let u = fx.one(h[0], &[], T0 + 2000);
        assert_eq!(fx.upload(h[0], &u, 6, T0 + 3000), UploadOutcome::Accepted);
        assert_eq!(fx.job(u.job_id).validation, JobValidation::Pending);
        let v = fx.one(h[1], &[], T0 + 4000);
        assert_eq!(v.job_id, u.job_id, "the check comes first in list order");
        // With validation off, nothing is ever checked.
        let (mut fx, h) = validating(1, 1, ValidateMode::Off);
        let u = fx.one(h[0], &[], T0);
        assert_eq!(fx.upload(h[0], &u, 6, T0 + 1000), UploadOutcome::Accepted);
        assert_eq!(fx.job(u.job_id).validation, JobValidation::Off);
        assert_eq!(fx.job(u.job_id).state, JobState::Done);
    }

    #[test]
    fn a_check_goes_to_a_trusted_host_while_one_is_online() {
        let (mut fx, h) = validating(2, 3, ValidateMode::Adaptive);
        let (author, untrusted, trusted) = (h[0], h[1], h[2]);
        fx.grid.hosts.get_mut(&trusted).unwrap().consecutive_valid = 2;
        let u = fx.one(author, &[], T0);
        assert_eq!(fx.upload(author, &u, 6, T0 + 1000), UploadOutcome::Accepted);
        // The untrusted host gets the other site, not the check.
        let (units, _) = fx.ask(untrusted, 4, &[], T0 + 1500);
        assert!(units.iter().all(|x| x.job_id != u.job_id), "{units:?}");
        let v = fx.one(trusted, &[], T0 + 2000);
        assert_eq!(v.job_id, u.job_id);
    }

    #[test]
    fn results_that_never_agree_fail_the_job_and_nobody_loses_trust() {
        let (mut fx, h) = validating(1, validate::MAX_RESULTS_PER_JOB, ValidateMode::All);
        let mut t = T0;
        for (i, host) in h.iter().enumerate() {
            let u = fx.one(*host, &[], t);
            let mine = fabricated(&format!("{}/{i}", u.site), 5);
            let mine: Vec<LinkRecord> = mine
                .into_iter()
                .map(|mut r| {
                    r.source_url = format!("http://{}/p{i}", u.site);
                    r
                })
                .collect();
            assert_eq!(
                upload_records(&mut fx, *host, &u, &mine, t + 500),
                UploadOutcome::Accepted
            );
            t += 1000;
        }
        let job = fx.job(fx.grid.jobs.keys().copied().next().unwrap());
        assert_eq!(
            (job.state, job.validation),
            (JobState::Failed, JobValidation::Invalid)
        );
        assert!(
            job.reasons.last().unwrap().contains("never agreed"),
            "{:?}",
            job.reasons
        );
        assert!(h.iter().all(|id| fx.host_rec(*id).invalid_results == 0));
        assert_eq!(fx.round_state(job.round_id), RoundState::Done);
    }

    #[test]
    fn a_liars_scans_that_others_continue_are_dropped_and_the_site_starts_over() {
        let (mut fx, h) = validating(2, 3, ValidateMode::All);
        let (liar, honest, third) = (h[0], h[1], h[2]);
        let u = fx.one(liar, &[], T0);
        let u2 = fx.one(liar, &[u.unit_id], T0);
        // The liar's scan of the second site stops early: a segment the job
        // continues from.
        let (sum, file, state) = partial_for(&u2, 6, 3);
        assert_eq!(
            fx.grid
                .upload(liar, u2.unit_id, sum, &file, Some(&state), T0 + 500)
                .unwrap(),
            UploadOutcome::Accepted
        );
        assert_eq!(fx.job(u2.job_id).segments.len(), 1);
        let fake = fabricated(&u.site, 6);
        assert_eq!(
            upload_records(&mut fx, liar, &u, &fake, T0 + 1000),
            UploadOutcome::Accepted
        );
        // An honest host continues the second site from the liar's frontier.
        let (units, _) = fx.ask(honest, 2, &[], T0 + 2000);
        let cont = units
            .iter()
            .find(|x| x.job_id == u2.job_id)
            .unwrap()
            .clone();
        assert!(cont.resume.is_some());
        let check = units.iter().find(|x| x.job_id == u.job_id).unwrap().clone();
        assert_eq!(
            fx.upload(honest, &check, 6, T0 + 3000),
            UploadOutcome::Accepted
        );
        let w = fx.one(third, &[], T0 + 4000);
        assert_eq!(w.job_id, u.job_id);
        assert_eq!(fx.upload(third, &w, 6, T0 + 5000), UploadOutcome::Accepted);
        assert_eq!(fx.host_rec(liar).invalid_results, 1);
        // The second site starts over from its seed: the liar's segment is
        // dropped, and the continuation built on it is stopped.
        let job2 = fx.job(u2.job_id);
        assert!(job2.segments.is_empty());
        assert_eq!(job2.chain, 1);
        assert_eq!(job2.state, JobState::Queued);
        assert!(!lf_path(&fx, &u2).exists());
        assert!(matches!(
            fx.grid
                .progress(honest, cont.unit_id, 5, 5, T0 + 6000)
                .unwrap(),
            ProgressOutcome::Abort(_)
        ));
        assert_eq!(
            fx.upload(honest, &cont, 6, T0 + 6500),
            UploadOutcome::Duplicate,
            "a result built on a dropped frontier is not kept"
        );
        let fresh = fx.one(honest, &[], T0 + 7000);
        assert_eq!(fresh.job_id, u2.job_id);
        assert!(fresh.resume.is_none());
    }

    #[test]
    fn results_that_disagree_with_no_other_host_to_scan_again_fail_the_job() {
        let (mut fx, h) = validating(1, 2, ValidateMode::All);
        let u = fx.one(h[0], &[], T0);
        let fake = fabricated(&u.site, 6);
        assert_eq!(
            upload_records(&mut fx, h[0], &u, &fake, T0 + 500),
            UploadOutcome::Accepted
        );
        let v = fx.one(h[1], &[], T0 + 1000);
        assert_eq!(fx.upload(h[1], &v, 6, T0 + 2000), UploadOutcome::Accepted);
        let job = fx.job(u.job_id);
        assert_eq!(
            (job.state, job.validation),
            (JobState::Failed, JobValidation::Invalid)
        );
        assert!(
            job.reasons.last().unwrap().contains("no other host"),
            "{:?}",
            job.reasons
        );
        assert_eq!(fx.round_state(job.round_id), RoundState::Done);
    }
}
