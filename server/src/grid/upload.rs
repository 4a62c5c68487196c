//! The three-step upload: [`Grid::upload_begin`] decides under the grid lock
//! whether the upload is wanted and plans it ([`UploadPlan`]); the plan
//! verifies and writes the link file (and the scan state of a scan that
//! stopped early) outside the lock; [`Grid::upload_finish`] records it.
//!
//! Invariants: a refused upload writes nothing and keeps nothing; every
//! record's source is on the unit's site and no excluded host; a summary
//! fits the unit's limits and the file; an upload of an attempt no longer
//! wanted is refused before its file is decoded.
//!
//! Before anything is kept an upload is checked against its unit, its header,
//! the scope, the exclusions, the page cap and the pace (the elapsed time
//! covers the politeness delay between pages). A part of a running scan
//! (`upload_part_begin`) becomes a segment of its job and its unit goes on from
//! it; a part is kept once (sent again: `Duplicate`), and only from the job's
//! running scan. Each unit and each part has a file of its own.

use std::sync::Arc;

use beebot_shared::limits::{MAX_LINK_RECORDS, PACE_FREE_PAGES, PACE_TOLERANCE};
use beebot_shared::limits::{MAX_PARTS_PER_JOB, MAX_SCANS_PER_JOB};
use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::proto::ABORT_ROUND_CANCELLED;
use beebot_shared::scanstate::{state_sha256, ScanState};
use beebot_shared::scope::{Exclusion, Scope};

use crate::model::*;
use crate::validate::{self, SketchBuilder};

use super::index::*;
use super::links::*;
use super::{push_reason, Grid, GridError};

/// The answer to an upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UploadOutcome {
    Accepted,
    Duplicate,
    Rejected(String),
    /// A part not kept: its job holds [`MAX_PARTS_PER_JOB`] segments; the
    /// scan goes on and uploads the rest at its end.
    NotKept,
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
    /// Where the files go: the grid's link-file storage, written outside
    /// the grid lock.
    files: Arc<dyn LinkFiles>,
    /// The link file's name (kept in the job's result). One per unit: two
    /// copies of a job uploading at once never write the same file.
    rel: String,
    /// The name of the scan state, kept when the scan ended early.
    state_rel: String,
    /// The job's scans this unit continued from (its attempt's `resume_seq`).
    resume_seq: u32,
    /// The job's chain of scans the unit belongs to (its attempt's `chain`).
    chain: u32,
    /// A part of a scan that goes on ([`Grid::upload_part_begin`]): the
    /// records and frontier up to a checkpoint, uploaded while the scan
    /// runs, so that a host taking the job over starts there (its index
    /// among the unit's parts).
    part: Option<u32>,
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

/// Why a scan's summary is refused before its link file is read, or once
/// its pace is known: its counts do not fit what the unit allowed, each
/// other, or the round's politeness delay. The text reaches the host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error(
        "summary says {pages} pages but the unit allowed {allowed} (page cap {max_pages}, {pages_before} done before)"
    )]
    PagesOverCap {
        pages: u64,
        allowed: u64,
        max_pages: u64,
        pages_before: u64,
    },
    #[error("summary says {links} links, more than a link file may hold ({MAX_LINK_RECORDS})")]
    LinksOverFile { links: u64 },
    #[error("summary says {hosts} target hosts but only {links} links")]
    HostsOverLinks { hosts: u64, links: u64 },
    /// A count of pages of a kind (`what`) above the pages scanned.
    #[error("summary says {n} {what} but only {pages} pages")]
    PartOverPages {
        n: u64,
        what: &'static str,
        pages: u64,
    },
    #[error(
        "summary says {pages} pages in {elapsed_ms} ms, faster than the round's delay of {delay_ms} ms allows (at least {least_ms} ms)"
    )]
    FasterThanDelay {
        pages: u64,
        elapsed_ms: u64,
        delay_ms: u64,
        least_ms: u64,
    },
}

/// Why an upload's files are refused (the text reaches the host, and the
/// attempt fails with it).
#[derive(Debug, thiserror::Error)]
pub enum UploadRefusal {
    #[error(transparent)]
    Summary(#[from] SummaryError),
    #[error("link file holds a record whose source {source_url} is not on site {site}")]
    SourceOffSite { source_url: String, site: String },
    #[error("summary says {pages} pages but the link file holds records of more pages")]
    RecordsOfMorePages { pages: u64 },
    #[error("link file refused: {0}")]
    LinkFile(linkfile::LinkFileError),
    #[error("link file header does not match the unit")]
    HeaderMismatch,
    #[error("summary says {said} links but the link file holds {held}")]
    LinkCount { said: u64, held: u64 },
    #[error(
        "the scan stopped early ({stopped_by}) without its frontier, so the job cannot go on from it"
    )]
    NoFrontier { stopped_by: &'static str },
    #[error("scan state refused: {0}")]
    State(#[from] beebot_shared::scanstate::ScanStateError),
    #[error("scan state is of another site")]
    StateOfAnotherSite,
    #[error("scan state counts {done} pages done, fewer than the job's {least} so far")]
    StateBehind { done: u64, least: u64 },
    #[error("scan state counts {done} pages done, more than the round's cap of {cap}")]
    StateOverCap { done: u64, cap: u64 },
    #[error("scan state queues {url} (depth {depth}), outside site {site} or its depth limit")]
    StateOutOfScope {
        url: String,
        depth: u32,
        site: String,
    },
    #[error("a part of a scan that goes on names no stop, but this one says {stopped_by}")]
    PartStopped { stopped_by: &'static str },
    #[error("a part of a scan holds at least one page")]
    PartWithoutPages,
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
    ) -> Result<Verified, UploadRefusal> {
        self.check_summary(summary)?;
        if self.part.is_some() {
            if let Some(stop) = summary.stopped_by {
                return Err(UploadRefusal::PartStopped {
                    stopped_by: stop.as_str(),
                });
            }
            if summary.pages == 0 {
                return Err(UploadRefusal::PartWithoutPages);
            }
        }
        let (sketch, origins) = self.check_records(summary, link_file)?;
        self.check_pace(summary, origins)?;
        if self.part.is_none() && !stopped_early(summary) {
            return Ok(Verified {
                state: None,
                sketch,
            });
        }
        Ok(Verified {
            state: Some(self.check_state(summary, state)?),
            sketch,
        })
    }

    /// The link file's records, checked as they are decoded (see
    /// [`UploadPlan::verify`]): its pairs' sketch, and how many origins its
    /// records come from.
    fn check_records(
        &self,
        summary: &ScanSummary,
        link_file: &[u8],
    ) -> Result<(Vec<u64>, u64), UploadRefusal> {
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
        // A record this upload refuses stops the decoding; the reason is kept here.
        let mut refused: Option<UploadRefusal> = None;
        let mut refuse = |why: UploadRefusal| {
            refused = Some(why);
            linkfile::LinkFileError::Refused("refused".into())
        };
        let header = linkfile::for_each_record_ref(link_file, |r| {
            sketch.add(validate::pair_digest(&r.source_url, &r.target_url));
            if records > 0 && r.source_url == last_source {
                records += 1;
                return Ok(());
            }
            // A file claiming links from other sites lies about what was scanned.
            let Some(u) = url::Url::parse(&r.source_url).ok().filter(|u| {
                site_scope.contains(u) && !self.excluded.iter().any(|e| e.covers_url(u))
            }) else {
                return Err(refuse(UploadRefusal::SourceOffSite {
                    source_url: r.source_url.chars().take(200).collect(),
                    site: self.site.clone(),
                }));
            };
            if sources.insert(beebot_shared::scanstate::url_digest(&r.source_url))
                && sources.len() as u64 > summary.pages
            {
                return Err(refuse(UploadRefusal::RecordsOfMorePages {
                    pages: summary.pages,
                }));
            }
            origins.insert(beebot_shared::scanstate::url_digest(
                &u.origin().ascii_serialization(),
            ));
            records += 1;
            last_source.clone_from(&r.source_url);
            Ok(())
        })
        .map_err(|e| refused.take().unwrap_or(UploadRefusal::LinkFile(e)))?;
        if header.unit_id != self.unit_id
            || header.round_id != self.round_id
            || header.site != self.site
        {
            return Err(UploadRefusal::HeaderMismatch);
        }
        if summary.links != records {
            return Err(UploadRefusal::LinkCount {
                said: summary.links,
                held: records,
            });
        }
        Ok((sketch.finish(), origins.len() as u64))
    }

    /// The frontier a scan that stopped early must bring (see
    /// [`UploadPlan::verify`]), as the server keeps it.
    fn check_state(
        &self,
        summary: &ScanSummary,
        state: Option<&[u8]>,
    ) -> Result<StateInfo, UploadRefusal> {
        let Some(bytes) = state else {
            return Err(UploadRefusal::NoFrontier {
                stopped_by: summary.stopped_by.map_or("-", |s| s.as_str()),
            });
        };
        let mut st = ScanState::decode(bytes)?;
        if st.site != self.site {
            return Err(UploadRefusal::StateOfAnotherSite);
        }
        let least = self.pages_before.saturating_add(summary.pages);
        if st.pages_done < least {
            return Err(UploadRefusal::StateBehind {
                done: st.pages_done,
                least,
            });
        }
        if st.pages_done > self.max_pages {
            return Err(UploadRefusal::StateOverCap {
                done: st.pages_done,
                cap: self.max_pages,
            });
        }
        // Another host continues from this: it gets only URLs of this site,
        // within the round's depth, and asks robots.txt itself.
        let site_scope = beebot_shared::scope::SiteScope::new(&self.site, self.scope);
        if let Some(q) = st.queue.iter().find(|q| {
            q.depth > self.max_depth
                || !url::Url::parse(&q.url).is_ok_and(|u| site_scope.contains(&u))
        }) {
            return Err(UploadRefusal::StateOutOfScope {
                url: q.url.chars().take(200).collect(),
                depth: q.depth,
                site: self.site.clone(),
            });
        }
        st.robots.clear();
        let encoded = st.encode()?;
        Ok(StateInfo {
            sha256: state_sha256(&encoded),
            bytes: encoded.len() as u64,
            pages_done: st.pages_done,
            encoded,
        })
    }

    /// The summary's counts against what the unit allowed and against each
    /// other, before the file is decoded: no more pages than the page cap
    /// leaves after the job's earlier scans, and no count that is a part of
    /// another larger than it.
    fn check_summary(&self, summary: &ScanSummary) -> Result<(), SummaryError> {
        let allowed = self.max_pages.saturating_sub(self.pages_before);
        if summary.pages > allowed {
            return Err(SummaryError::PagesOverCap {
                pages: summary.pages,
                allowed,
                max_pages: self.max_pages,
                pages_before: self.pages_before,
            });
        }
        if summary.links > MAX_LINK_RECORDS as u64 {
            return Err(SummaryError::LinksOverFile {
                links: summary.links,
            });
        }
        if summary.distinct_target_hosts > summary.links {
            return Err(SummaryError::HostsOverLinks {
                hosts: summary.distinct_target_hosts,
                links: summary.links,
            });
        }
        // Counted once per page at most (a page's redirect hops are not pages).
        for (what, n) in [
            ("pages whose links were capped", summary.link_capped_pages),
            ("non-HTML pages", summary.non_html),
        ] {
            if n > summary.pages {
                return Err(SummaryError::PartOverPages {
                    n,
                    what,
                    pages: summary.pages,
                });
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
    fn check_pace(&self, summary: &ScanSummary, origins: u64) -> Result<(), SummaryError> {
        let per_origin = summary.pages.div_ceil(origins.max(1));
        let delays = per_origin.saturating_sub(PACE_FREE_PAGES);
        let least_ms = delays as f64 * self.delay_ms as f64 * PACE_TOLERANCE;
        if (summary.elapsed_ms as f64) < least_ms {
            return Err(SummaryError::FasterThanDelay {
                pages: summary.pages,
                elapsed_ms: summary.elapsed_ms,
                delay_ms: self.delay_ms,
                least_ms: least_ms as u64,
            });
        }
        Ok(())
    }

    /// Make the link file (and the scan state of a scan that ended early)
    /// durable at their places (outside the grid lock).
    pub fn write(&self, link_file: &[u8], state: Option<&StateInfo>) -> std::io::Result<()> {
        if let Some(st) = state {
            self.files.write(&self.state_rel, &st.encoded)?;
        }
        self.files.write(&self.rel, link_file)
    }

    /// Remove what [`UploadPlan::write`] wrote (a loser's or a refused file).
    fn remove_files(&self) {
        self.files.remove(&self.rel);
        self.files.remove(&self.state_rel);
    }
}

/// The answer to an upload of `unit_id` whose attempt is no longer wanted,
/// given before anything of it is decoded: its result is in already
/// (`Done`, `Partial`) or another copy's went on (`Aborted`): `Duplicate`;
/// the host gave it back, its result was refused, or the host no longer
/// held it (`Failed`, `Released`): `Rejected`. A `Running` attempt is
/// wanted, and so is an `Expired` or `Recalled` one: a late result for a job still open
/// (at the same position, which the caller checks) is accepted, so a host
/// that slept keeps its work.
pub(super) fn unwanted_upload(job: &JobRecord, unit_id: u64) -> Option<UploadOutcome> {
    let a = job.attempts.iter().find(|a| a.unit_id == unit_id)?;
    match &a.state {
        AttemptState::Running | AttemptState::Expired | AttemptState::Recalled => None,
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

/// The name of an upload's file (`ext`: `lf` or `state`) under the links
/// dir: one per unit, and one per part of a unit, so no two uploads ever
/// write the same file.
fn file_name(job: &JobRecord, unit_id: u64, part: Option<u32>, ext: &str) -> String {
    match part {
        None => format!("{}/{}-{unit_id}.{ext}", job.round_id, job.id),
        Some(index) => format!("{}/{}-{unit_id}-p{index}.{ext}", job.round_id, job.id),
    }
}

/// The unit's segment from `from_seq` on is kept already: its last upload
/// was accepted before (its answer lost).
fn kept_already(job: &JobRecord, unit_id: u64, from_seq: u32) -> bool {
    job.segments
        .get(from_seq as usize)
        .is_some_and(|s| s.unit_id == unit_id)
}

/// The answer to part `index` of a unit, of `pages` pages (see
/// [`Grid::upload_part_begin`]) when it is not wanted: kept already
/// (`Duplicate`), or its scan is not the job's running one, or the host's
/// parts are not those kept (`Rejected`).
fn part_unwanted(job: &JobRecord, a: &Attempt, index: u32, pages: u64) -> Option<UploadOutcome> {
    let mut mine = job.segments.iter().filter(|s| s.unit_id == a.unit_id);
    let kept = mine.clone().count();
    let same = mine.nth(index as usize).map(|s| s.summary.pages == pages);
    let why = if same == Some(true) {
        return Some(UploadOutcome::Duplicate);
    } else if same == Some(false) {
        "the server kept a part of that index with other pages"
    } else if a.state != AttemptState::Running {
        "its scan was taken back"
    } else if job.is_behind(a) {
        "another copy's scan went on further"
    } else if index as usize != kept {
        // The host counts parts the server does not hold.
        "the server holds fewer of its parts"
    } else {
        return None;
    };
    Some(UploadOutcome::Rejected(format!(
        "part {index} of unit {} is not wanted: {why}",
        a.unit_id
    )))
}

/// Keep `summary` with its frontier `info` as `job`'s next segment, its
/// expected pages lowered by what it took. Past [`MAX_SCANS_PER_JOB`]
/// scans the job fails (true).
fn push_segment(
    job: &mut JobRecord,
    plan: &UploadPlan,
    summary: ScanSummary,
    info: &StateInfo,
    now_ms: u64,
) -> bool {
    job.est_pages = (job.est_pages - summary.pages as f64).max(1.0);
    job.segments.push(Segment {
        unit_id: plan.unit_id,
        host_id: plan.host_id,
        summary,
        file: plan.rel.clone(),
        state_file: plan.state_rel.clone(),
        state_sha256: info.sha256,
        state_bytes: info.bytes,
        pages_done: info.pages_done,
        accepted_ms: now_ms,
    });
    if job.segments.len() < MAX_SCANS_PER_JOB {
        return false;
    }
    job.state = JobState::Failed;
    push_reason(
        job,
        format!("the site needed more than {MAX_SCANS_PER_JOB} scans"),
    );
    true
}

/// Whether a scan stopped before its natural end (so its job goes on).
pub fn stopped_early(summary: &ScanSummary) -> bool {
    summary.stopped_by.is_some_and(|s| !s.is_natural_end())
}

impl Grid {
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

    /// A host delivers part `index` of a running scan of `unit_id` (see
    /// [`Grid::upload_part_begin`]), in the three steps of [`Grid::upload`].
    #[allow(clippy::too_many_arguments)]
    pub fn upload_part(
        &mut self,
        host_id: u64,
        unit_id: u64,
        index: u32,
        summary: ScanSummary,
        link_file: &[u8],
        state: &[u8],
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        let step = self.upload_part_begin(host_id, unit_id, (index, summary.pages), now_ms)?;
        let plan = match step {
            UploadStep::Answer(o) => return Ok(o),
            UploadStep::Plan(p) => p,
        };
        let verified = match plan.verify(&summary, link_file, Some(state)) {
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
        self.begin(host_id, unit_id, None, now_ms)
    }

    /// First step of the upload of a part of a scan that goes on: the
    /// unit's part `index` (0 for its first), its records and frontier
    /// from its previous part (or its start) up to a checkpoint, of
    /// `pages` pages. Accepted, the part becomes a segment of the job and
    /// the unit goes on from it; sent again (its answer lost, the same
    /// pages), it is a `Duplicate`. `Rejected` when the unit does not run
    /// on this host now, another copy went further, or the host's parts
    /// do not match those kept: the host stops the scan and drops the
    /// unit.
    pub fn upload_part_begin(
        &mut self,
        host_id: u64,
        unit_id: u64,
        (index, pages): (u32, u64),
        now_ms: u64,
    ) -> Result<UploadStep, GridError> {
        self.begin(host_id, unit_id, Some((index, pages)), now_ms)
    }

    fn begin(
        &mut self,
        host_id: u64,
        unit_id: u64,
        part: Option<(u32, u64)>,
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
        let Some(attempt) = job.attempts.iter().find(|a| a.unit_id == unit_id) else {
            return Ok(UploadStep::Answer(UploadOutcome::Rejected(format!(
                "unknown unit {unit_id}"
            ))));
        };
        if let Some(o) = part.map_or_else(
            || unwanted_upload(job, unit_id),
            |(index, pages)| part_unwanted(job, attempt, index, pages),
        ) {
            // Refused before anything of it is decoded.
            return Ok(UploadStep::Answer(o));
        }
        let resume_seq = attempt.resume_seq;
        if part.is_some() && job.segments.len() >= MAX_PARTS_PER_JOB {
            return Ok(UploadStep::Answer(UploadOutcome::NotKept));
        }
        if part.is_none() && (kept_already(job, unit_id, resume_seq) || job.is_behind(attempt)) {
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
            files: self.links.clone(),
            rel: file_name(job, unit_id, part.map(|p| p.0), "lf"),
            state_rel: file_name(job, unit_id, part.map(|p| p.0), "state"),
            resume_seq,
            chain: attempt.chain,
            part: part.map(|p| p.0),
            pages_before,
            max_depth,
            max_pages,
            delay_ms,
        }))
    }

    /// The job `unit_id` of `host_id` works on, while it is open; otherwise
    /// the answer to give (`Duplicate` once the job or its round is over).
    pub(super) fn open_job_of(
        &self,
        host_id: u64,
        unit_id: u64,
    ) -> Result<&JobRecord, UploadOutcome> {
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
        reason: UploadRefusal,
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        if let Err(o) = self.open_job_of(plan.host_id, plan.unit_id) {
            return Ok(o);
        }
        let reason = reason.to_string();
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
        self.active_host(plan.host_id, now_ms)?;
        if let Some(o) = self.finish_unwanted(plan, summary.pages, now_ms)? {
            return Ok(o);
        }
        let Verified { state, sketch } = verified;
        if plan.part.is_some() {
            let Some(info) = state else {
                return Ok(UploadOutcome::Rejected(
                    "a part without its frontier".into(),
                ));
            };
            return self.finish_part(plan, summary, &info, sketch, now_ms);
        }
        let early = state.filter(|_| stopped_early(&summary));
        if early.is_some() && summary.pages == 0 {
            if let Some(o) = self.stopped_at_last_part(plan, now_ms)? {
                return Ok(o);
            }
        }
        if let Some(o) = self.finish_without_pages(plan, &summary, early.is_some(), now_ms)? {
            return Ok(o);
        }
        let (job_id, round_id) = (plan.job_id, plan.round_id);
        let (pages, links) = (summary.pages, summary.links);
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(UploadOutcome::Rejected(format!(
                "unknown unit {}",
                plan.unit_id
            )));
        };
        let mine = if early.is_some() {
            AttemptState::Partial
        } else {
            AttemptState::Done
        };
        for a in job.attempts.iter_mut() {
            if a.unit_id == plan.unit_id {
                a.state = mine.clone();
                a.pages = summary.pages;
                a.links = summary.links;
            } else if a.state == AttemptState::Running {
                // A copy from the same start: it would redo what this one did.
                a.state = AttemptState::Aborted;
                self.counters.units_aborted += 1;
            }
        }
        let chain_sketch = validate::merge(&job.chain_sketch, &sketch);
        match &early {
            Some(info) => self.keep_segment(plan, summary, info, chain_sketch, now_ms)?,
            None => {
                // The chain reached the site's natural end: a complete result.
                let candidate = Candidate {
                    segments: std::mem::take(&mut job.segments),
                    result: JobResult {
                        unit_id: plan.unit_id,
                        host_id: plan.host_id,
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
        }
        self.settle(job_id, round_id, now_ms);
        self.reindex(job_id);
        self.check_round_done(round_id, now_ms)?;
        self.check_derived();
        self.counters.units_accepted += 1;
        self.counters.pages_accepted += pages;
        self.counters.links_accepted += links;
        Ok(UploadOutcome::Accepted)
    }

    /// The answer to an upload whose unit is not wanted any more now that
    /// its file is written (its files removed, unless they are the winner's
    /// own), or that another copy's scan overtook (aborted, a duplicate).
    /// `None` when the upload is still wanted.
    fn finish_unwanted(
        &mut self,
        plan: &UploadPlan,
        pages: u64,
        now_ms: u64,
    ) -> Result<Option<UploadOutcome>, GridError> {
        let (host_id, unit_id, job_id) = (plan.host_id, plan.unit_id, plan.job_id);
        if let Err(o) = self.open_job_of(host_id, unit_id) {
            // Unless it is the winner's own file (the same unit uploaded twice).
            let kept = self
                .jobs
                .get(&job_id)
                .is_some_and(|j| j.link_files().any(|f| f == plan.rel));
            if !kept {
                plan.remove_files();
            }
            return Ok(Some(o));
        }
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return Ok(Some(UploadOutcome::Rejected(format!(
                "unknown unit {unit_id}"
            ))));
        };
        if let Some(o @ UploadOutcome::Rejected(_)) = unwanted_upload(job, unit_id) {
            // Given back or released while its file was checked.
            plan.remove_files();
            return Ok(Some(o));
        }
        if kept_already(job, unit_id, plan.resume_seq) {
            // This unit's segment, uploaded again.
            return Ok(Some(UploadOutcome::Duplicate));
        }
        if let Some(index) = plan.part {
            let a = job.attempts.iter().find(|a| a.unit_id == unit_id);
            if let Some(o) = a.and_then(|a| part_unwanted(job, a, index, pages)) {
                // Taken back, or overtaken, while its files were checked.
                plan.remove_files();
                return Ok(Some(o));
            }
        }
        if (plan.resume_seq as usize) < job.segments.len() || plan.chain != job.chain {
            // Another copy's scan went on from the same place first (or the
            // job started over).
            plan.remove_files();
            for a in job.attempts.iter_mut() {
                if a.unit_id == unit_id && a.state == AttemptState::Running {
                    a.state = AttemptState::Aborted;
                    self.counters.units_aborted += 1;
                }
            }
            let job = job.clone();
            self.writes.put_job(job);
            self.reindex(job_id);
            self.after_attempt_ended(job_id, now_ms)?;
            return Ok(Some(UploadOutcome::Duplicate));
        }
        Ok(None)
    }

    /// A scan that stopped early (handed over, its time budget, a stop)
    /// with no page since its last part: it ends there, its job goes on
    /// from that part (no new segment; a scan without a part that took no
    /// page is a failed attempt instead: `None`).
    fn stopped_at_last_part(
        &mut self,
        plan: &UploadPlan,
        now_ms: u64,
    ) -> Result<Option<UploadOutcome>, GridError> {
        let Some(job) = self.jobs.get_mut(&plan.job_id) else {
            return Ok(None);
        };
        if !job.segments.iter().any(|s| s.unit_id == plan.unit_id) {
            return Ok(None);
        }
        plan.remove_files();
        for a in job.attempts.iter_mut() {
            if a.unit_id == plan.unit_id {
                a.state = AttemptState::Partial;
            }
        }
        if job.running_attempts().next().is_none() {
            job.state = JobState::Queued;
        }
        let job = job.clone();
        self.writes.put_job(job);
        self.settle(plan.job_id, plan.round_id, now_ms);
        self.reindex(plan.job_id);
        self.check_derived();
        self.counters.units_accepted += 1;
        Ok(Some(UploadOutcome::Accepted))
    }

    /// An upload that gained nothing is a failed attempt, not a result: a
    /// scan that stopped `early` without a page, or one that reached no page
    /// of the site at all (its name, its address, its robots.txt), named by
    /// its cause. Its files are removed. `None` when it took pages.
    fn finish_without_pages(
        &mut self,
        plan: &UploadPlan,
        summary: &ScanSummary,
        early: bool,
        now_ms: u64,
    ) -> Result<Option<UploadOutcome>, GridError> {
        let failed_site = summary.stopped_by.filter(|s| s.is_site_failure());
        let reason = if early && summary.pages == 0 {
            format!(
                "scan stopped early ({}) without a page",
                summary.stopped_by.map_or("-", |s| s.as_str())
            )
        } else if let (Some(stop), 0, 0) = (failed_site, summary.pages, plan.pages_before) {
            stop.as_str().to_string()
        } else {
            return Ok(None);
        };
        plan.remove_files();
        self.fail(plan.host_id, plan.unit_id, &reason, now_ms)?;
        Ok(Some(UploadOutcome::Rejected(reason)))
    }

    /// Keep a part of a scan that goes on (its frontier `info`) as the job's
    /// next segment: the unit goes on from there (its `resume_seq` one
    /// further; its reports still count from its start), and a
    /// host that takes the job over starts there. Another copy from the
    /// same start is aborted (it would redo what this one did).
    fn finish_part(
        &mut self,
        plan: &UploadPlan,
        summary: ScanSummary,
        info: &StateInfo,
        sketch: Vec<u64>,
        now_ms: u64,
    ) -> Result<UploadOutcome, GridError> {
        let (pages, links) = (summary.pages, summary.links);
        let Some(job) = self.jobs.get_mut(&plan.job_id) else {
            return Ok(UploadOutcome::Rejected(format!(
                "unknown unit {}",
                plan.unit_id
            )));
        };
        for a in job.attempts.iter_mut() {
            if a.unit_id == plan.unit_id {
                // Its reports go on counting every page since its start.
                a.resume_seq += 1;
            } else if a.state == AttemptState::Running {
                a.state = AttemptState::Aborted;
                self.counters.units_aborted += 1;
            }
        }
        job.chain_sketch = validate::merge(&job.chain_sketch, &sketch);
        push_segment(job, plan, summary, info, now_ms);
        let job = job.clone();
        if job.state.is_final() {
            self.drop_states(&job);
        }
        self.writes.put_job(job);
        self.reindex(plan.job_id);
        self.check_round_done(plan.round_id, now_ms)?;
        self.check_derived();
        self.counters.parts_accepted += 1;
        self.counters.pages_accepted += pages;
        self.counters.links_accepted += links;
        Ok(UploadOutcome::Accepted)
    }

    /// Keep a scan that stopped early as the job's next segment (its frontier
    /// `info`), and queue the job for its continuation, or fail it past
    /// [`MAX_SCANS_PER_JOB`] scans.
    fn keep_segment(
        &mut self,
        plan: &UploadPlan,
        summary: ScanSummary,
        info: &StateInfo,
        chain_sketch: Vec<u64>,
        now_ms: u64,
    ) -> Result<(), GridError> {
        let job = self.job_mut(plan.job_id)?;
        job.chain_sketch = chain_sketch;
        if !push_segment(job, plan, summary, info, now_ms) {
            job.state = JobState::Queued;
        }
        let job = job.clone();
        if job.state.is_final() {
            // The frontiers are of no more use.
            self.drop_states(&job);
        }
        self.writes.put_job(job);
        Ok(())
    }

    /// A scan of the job's site just uploaded: no job of a site that shares a
    /// host starts before the round's delay has passed.
    fn settle(&mut self, job_id: u64, round_id: u64, now_ms: u64) {
        if let Some((job, round)) = self
            .jobs
            .get(&job_id)
            .zip(self.rounds.get(&round_id))
            .filter(|(_, r)| r.params.delay_ms > 0)
        {
            let until = now_ms.saturating_add(round.params.delay_ms);
            let (key, all_under) = reach_key(&job.site, round.params.scope);
            self.settling.insert(key, all_under, job_id, until);
        }
    }
}

#[cfg(test)]
mod tests;
