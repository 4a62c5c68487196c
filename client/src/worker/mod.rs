//! The work loop of `beebot run`: keep a buffer of signed units, crawl as
//! many of them at once as the concurrency controller says (up to the
//! `slots` ceiling; see [`crate::concurrency`]) on threads, spool each result, upload it until the
//! server acknowledges it, and report progress. Network trouble never stops
//! the scans in hand: the loop reconnects with exponential backoff and full
//! jitter, honouring the server's `retry_after`.
//!
//! A unit's deadline never stops its scan: the server's `Extend` moves it
//! (shown by `beebot status`); the scan stops early only on the server's
//! `Abort`, the round's time budget, or the client stopping. Each running
//! scan checkpoints to the spool (see [`crate::checkpoint`]); a restarted
//! client resumes from there, and a continuation unit (`resume`) starts from
//! the state the server keeps (`FetchState`), checked against its signed
//! digest. A scan that stopped early uploads its state with its records.
//! On SIGTERM or Ctrl-C every scan is checkpointed and the loop returns
//! within [`SHUTDOWN_GRACE`] plus the writes, whatever requests are in flight.
//!
//! Its rooms: `run` (the loop), `held` (the units held), `fetch`
//! (asking for work), `continuation` (fetched states), `scan` (scans in
//! flight), `finish` (a scan's end and stopping), `progress` (reports),
//! `parts` (parts of running scans), `upload` (results), `link` (the server link), `status` (the live status),
//! `sizing` (the concurrency: measured, stepped, applied) and `join`. This module keeps the buffer and backoff arithmetic.

mod continuation;
mod fetch;
mod finish;
mod held;
mod join;
mod lease;
mod link;
mod parts;
mod progress;
mod run;
mod scan;
pub mod sizing;
mod status;
mod upload;

use std::sync::Arc;
use std::time::Duration;

use crate::control::Gate;
use crate::crawler::CrawlerConfig;

pub use continuation::{
    check_state, start_from, state_answer, StartFrom, StateAnswer, StateRefused,
};
pub use fetch::WORK_HINT_JITTER;
pub use finish::{OFFLINE_BACKOFF_BASE, OFFLINE_BACKOFF_CAP, SHUTDOWN_GRACE, SHUTDOWN_WRITES};
pub use join::join;
pub use run::{run, run_locked};
pub use scan::{crawl_spec, start_order};
pub use sizing::ADJUST_EVERY;
pub use status::local_deadline;

/// Settings of the work loop.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Exit once the server has no more work and every result is delivered.
    pub once: bool,
    /// Most sites scanned at once (the `slots` setting): a ceiling; the
    /// controller sizes the concurrency under it.
    pub slots: u32,
    /// How often the concurrency controller steps ([`ADJUST_EVERY`]).
    pub adjust_every: Duration,
    /// Most seconds of work to hold (BOINC's "up to" buffer): the request's `want_seconds`.
    pub buffer_seconds: u64,
    /// Least seconds of work to hold (BOINC's "at least" buffer): below it the
    /// client tops its units up toward four a slot even when every slot has
    /// its reserve, once a quarter of its slots' worth of units is missing
    /// (`fetch_rules::top_up_batch`).
    pub buffer_min_s: u64,
    /// Extra pause after every page: makes this client slower on purpose
    /// (tests and demos of scheduling; zero in real use).
    pub throttle: Duration,
    /// Backoff bounds for reconnecting.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How often a running unit reports progress.
    pub progress_interval: Duration,
    /// How often a running scan uploads a part ([`PART_INTERVAL_S`]).
    ///
    /// [`PART_INTERVAL_S`]: beebot_shared::limits::PART_INTERVAL_S
    pub part_every: Duration,
    pub crawler: CrawlerConfig,
    /// Holds scans while paused or outside the time window (`None`: always run).
    pub gate: Option<Arc<Gate>>,
    /// Download cap over all scans, KB/s (0: none).
    pub bandwidth_kbps: u64,
    /// Memory the scans may hold together, MB (told to the server, whose
    /// `pack` policy fits scans into it).
    pub memory_mb: u32,
    /// CPU the process may use, percent of one core (the controller scans
    /// fewer sites at once to stay under it).
    pub cpu_percent: u32,
    /// Disk the spool may use before no new work is taken, bytes (0: no cap).
    pub spool_cap_bytes: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            once: false,
            slots: beebot_shared::limits::MAX_SLOTS,
            adjust_every: ADJUST_EVERY,
            buffer_seconds: DEFAULT_BUFFER_MAX_S,
            buffer_min_s: DEFAULT_BUFFER_MIN_S,
            throttle: Duration::ZERO,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            progress_interval: Duration::from_secs(beebot_shared::limits::PROGRESS_INTERVAL_S),
            part_every: Duration::from_secs(beebot_shared::limits::PART_INTERVAL_S),
            crawler: CrawlerConfig::default(),
            gate: None,
            bandwidth_kbps: 0,
            memory_mb: 1024,
            cpu_percent: crate::settings::DEFAULT_CPU_PERCENT,
            spool_cap_bytes: 0,
        }
    }
}

/// The work-fetch rules (buffer defaults, units per slot, backoff), shared
/// with the server's simulator and the load generator.
pub use beebot_shared::fetch_rules::{
    backoff_bound, backoff_delay, units_per_slot, work_wanted, DEFAULT_BUFFER_MAX_S,
    DEFAULT_BUFFER_MIN_S,
};
/// Most units held per slot, whatever the buffer asks: a hoarding host makes
/// the round wait for it (the server gives no more either).
pub use beebot_shared::limits::MAX_UNITS_PER_SLOT;
/// Weight of the newest figure in the client's running averages (scan time, round trip).
const AVERAGE_WEIGHT: f64 = 0.3;

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub units_received: u64,
    pub units_refused: u64,
    pub scans_finished: u64,
    pub uploads_accepted: u64,
    pub uploads_duplicate: u64,
    pub uploads_rejected: u64,
    pub pages: u64,
    pub links: u64,
}

use beebot_shared::clock::now_ms;

#[cfg(test)]
mod tests {
    use beebot_shared::sign::WorkUnit;

    /// A worker in a home of its own in a temporary directory (kept while
    /// the directory lives), joined to a project that is nowhere (it is
    /// never contacted), holding nothing.
    pub(super) fn worker() -> (tempfile::TempDir, super::held::Worker) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let home = crate::home::Home::resolve(Some(dir.path().to_path_buf())).expect("home");
        let project = beebot_shared::sign::generate_key();
        let enrolment = crate::home::Enrolment {
            server_addr: "127.0.0.1:9".into(),
            server_name: "beebot.test".into(),
            cert_sha256: "00".repeat(32),
            project_key: hex::encode(project.verifying_key().to_bytes()),
            host_id: 1,
            name: "test".into(),
            joined_ms: 0,
        };
        home.host_key(true).expect("host key");
        let (done_tx, _) = tokio::sync::mpsc::channel(1);
        let w = super::held::Worker::open(home, enrolment, super::RunOptions::default(), done_tx)
            .expect("worker");
        (dir, w)
    }

    /// A unit of one page, for the tests of the worker's modules.
    pub(super) fn unit() -> WorkUnit {
        WorkUnit {
            unit_id: 1,
            round_id: 1,
            job_id: 1,
            host_id: 1,
            site: "a.test".into(),
            seed_url: "http://a.test/".into(),
            scope: beebot_shared::scope::Scope::Host,
            limits: beebot_shared::sign::UnitLimits {
                max_pages: 1,
                max_depth: 1,
                delay_ms: 0,
                max_page_bytes: 1,
                max_seconds: 60,
                max_crawl_delay_ms: 1000,
            },
            issued_ms: 1_700_000_000_000,
            deadline_ms: 1_700_000_600_000,
            user_agent: "t".into(),
            resume: None,
            exclusions: Vec::new(),
        }
    }
}
