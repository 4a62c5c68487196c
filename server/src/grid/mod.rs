//! The grid's state machine: sites, rounds, jobs, hosts and invites in memory.
//! It never writes a record itself: each change is a [`Write`] its driver
//! takes ([`Grid::take_writes`]) and persists in order before any answer
//! that rests on it leaves ([`writes`]).
//!
//! Sans-I/O, like a protocol state machine: the grid never reads a clock
//! (every method takes the time, `now_ms` in Unix milliseconds, as an
//! argument), never draws from the operating system's random source, never
//! holds the project key itself and never names a file: it opens from
//! [`Records`] read by its driver, and its link-file storage, signer and
//! random generator come in as one [`GridIo`]. So the server and the simulator drive the same code. The QUIC and
//! admin layers call it under one lock (see [`crate::Shared`]).
//!
//! This module holds the [`Grid`] itself, its settings and errors; its
//! methods live in one room per concern, each an `impl Grid` block:
//! [`hosts`] (invites, enrolment, trust), [`sites`] (target set and
//! exclusions), [`rounds`], [`index`] (the open jobs), [`work`] (requests
//! and issuing), [`attempts`] (progress, failures, deadlines), [`upload`],
//! [`verdict`] (validation), [`links`] (link-file storage) and [`status`];
//! [`io`] holds what the grid is given, [`writes`] what it gives back.
//! The fields are private to this module tree: only the rooms change them.

mod attempts;
mod counters;
mod hosts;
mod index;
mod io;
mod links;
mod packs;
mod rounds;
mod sites;
mod status;
mod upload;
mod verdict;
#[cfg(test)]
pub(crate) use verdict::NO_FALLBACK_CHECKER;
mod views;
mod work;
mod writes;

#[cfg(test)]
pub(crate) mod testkit;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use beebot_shared::limits::{MAX_REASONS_PER_JOB, MAX_TEXT_LEN};
use beebot_shared::proto::HostResources;
use beebot_shared::scope::reversed_labels;
use beebot_shared::util::truncate_on_char;

use crate::model::*;

pub use attempts::{ProgressOutcome, StateAnswer, StateFile};
pub use counters::{GridCounters, GridSnapshot, JobsByState, ACTIVE_DAY_MS, ACTIVE_HOUR_MS};
pub use hosts::{invite_id, HostLine, INVITE_ID_LEN, MIN_INVITE_ID_LEN};
use index::OpenJobs;
pub use io::{GridIo, ProjectSigner, SecretRng};
pub use links::{
    check_name, for_each_link, write_durable, LinkChanges, LinkFiles, LinkReadError, MemoryLinks,
};
pub use packs::{
    for_each_job_link, pack_files, LinkPacks, SyncCounts, MAX_KEY_BYTES, MAX_PACK_BYTES,
    MAX_TORN_TAIL_BYTES,
};
pub use sites::{excluded_message, ExcludeOutcome, EXCLUDED_REASON};
pub use status::{GridStatus, RoundOutcome};
pub use upload::{
    stopped_early, StateInfo, SummaryError, UploadOutcome, UploadPlan, UploadRefusal, UploadStep,
    Verified,
};
pub use views::VIEW_REFRESH_MS;
pub use work::{held_cap, WorkReply, WorkRequest};

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

/// The grid: all state, its changes given back as [`Write`]s.
pub struct Grid {
    /// The writes not yet taken, and the last id of each kind.
    writes: writes::Writes,
    links: Arc<dyn LinkFiles>,
    signer: Arc<dyn ProjectSigner>,
    /// Where invite tokens are drawn from.
    rng: Box<dyn SecretRng>,
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
    /// When leases began to count (the first tick after opening): a scan
    /// not heard from since is taken back [`LEASE_TAKEOVER_S`] after this
    /// at the earliest, so a restart of the server takes no lease away
    /// (its hosts report again within seconds).
    ///
    /// [`LEASE_TAKEOVER_S`]: beebot_shared::limits::LEASE_TAKEOVER_S
    leases_from_ms: Option<u64>,
    /// Jobs handed over (job id → the host that handed its scan over): the
    /// continuation goes to another host while one is online.
    handed_from: HashMap<u64, u64>,
    /// Reaches ([`reach_key`]) whose scan uploaded lately, with the time
    /// the round's delay has passed since: no job of a site that shares
    /// a host starts before (a continuation, or the next job of the host).
    settling: index::Settling,
    /// Each open job's pace (job id → its segments then, the pace): its
    /// last scan in its round's as first indexed (the host's own time in
    /// it is the host's speed at that moment, so later changes of that
    /// speed never leave the index behind), else, for a running job, its
    /// site's from an earlier round, worked out at each indexing (so a view
    /// need not look the site up by name). Memory only; an entry goes when
    /// its job closes.
    scan_paces: HashMap<u64, index::ScanPace>,
    /// What each host offers its scans beyond slots (`Request::Resources`),
    /// bounded. Kept in memory only: a host says it again after every
    /// `Hello`, so after a restart as soon as it reconnects.
    resources: HashMap<u64, HostResources>,
    /// Totals for the server's metrics (see [`counters`]).
    counters: GridCounters,
    /// Link files and scan states no record names any more, and rounds
    /// that ended, for the driver to apply once the store is synced (see
    /// [`Grid::take_link_changes`]).
    link_changes: LinkChanges,
    /// The scheduler's views of the hosts, kept between requests
    /// (see [`views`]).
    views: views::HostViews,
    /// Hosts whose view must be built again before it is read.
    stale_views: HashSet<u64>,
    /// Each host's last contact as last written to the store (see
    /// [`hosts::LAST_SEEN_STORED_EVERY_MS`]).
    seen_stored: HashMap<u64, u64>,
}

fn push_reason(job: &mut JobRecord, reason: String) {
    let mut r = reason;
    truncate_on_char(&mut r, MAX_TEXT_LEN);
    if job.reasons.len() >= MAX_REASONS_PER_JOB {
        job.reasons.remove(0);
    }
    job.reasons.push(r);
}

impl Grid {
    /// A grid holding nothing yet, over `io`.
    fn empty(io: GridIo, settings: GridSettings, last_ids: [u64; 4]) -> Grid {
        let GridIo { links, signer, rng } = io;
        Grid {
            writes: writes::Writes::from_last_ids(last_ids),
            links,
            signer,
            rng,
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
            leases_from_ms: None,
            handed_from: HashMap::new(),
            settling: index::Settling::default(),
            scan_paces: HashMap::new(),
            resources: HashMap::new(),
            counters: GridCounters::default(),
            link_changes: LinkChanges::default(),
            views: views::HostViews::default(),
            stale_views: HashSet::new(),
            seen_stored: HashMap::new(),
        }
    }

    /// The job `job_id`, to change.
    fn job_mut(&mut self, job_id: u64) -> Result<&mut JobRecord, GridError> {
        self.jobs
            .get_mut(&job_id)
            .ok_or_else(|| GridError::Invalid(format!("job {job_id} vanished")))
    }

    /// Ids of the running rounds, in id order.
    fn running_round_ids(&self) -> Vec<u64> {
        self.rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| r.id)
            .collect()
    }

    /// The grid over `records` (as [`crate::store::records`] reads them
    /// from a store), with `io` to work with.
    pub fn open(records: Records, io: GridIo, settings: GridSettings) -> Result<Grid, GridError> {
        let g = Grid::from_records(records, io, settings);
        g.sweep_temporaries();
        Ok(g)
    }

    /// The grid over `records`, its indexes built from them.
    fn from_records(records: Records, io: GridIo, settings: GridSettings) -> Grid {
        let Records {
            sites,
            rounds,
            jobs,
            hosts,
            invites,
            exclusions,
            last_ids,
        } = records;
        let mut g = Grid::empty(io, settings, last_ids);
        for s in sites {
            g.sites.insert(s.host.clone(), s);
        }
        for r in rounds {
            g.rounds.insert(r.id, r);
        }
        for j in jobs {
            for a in &j.attempts {
                g.units.insert(a.unit_id, j.id);
            }
            g.jobs.insert(j.id, j);
        }
        for h in hosts {
            g.hosts.insert(h.id, h);
        }
        for i in invites {
            g.invites.insert(i.token_sha256, i);
        }
        for e in exclusions {
            g.exclusions.insert(reversed_labels(&e.exclusion.host), e);
        }
        g.rebuild_open();
        g
    }

    pub fn project_public_key(&self) -> [u8; 32] {
        self.signer.public_key()
    }

    /// What signs for the project (units, and the enrolment proof).
    pub fn signer(&self) -> Arc<dyn ProjectSigner> {
        self.signer.clone()
    }
}
