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
//! The client's state while it runs is here: the [`Worker`] itself (its
//! link, its clock offset and backoff, its running averages) and the units
//! it holds ([`Held`]), each waiting, crawling, finished or aborted. Every
//! held unit is in the spool as well (dropping one removes it from both); a
//! crawling unit's scan thread holds the same `cancel`, counters and
//! checkpoint slot as its [`HeldState::Crawling`].
//!
//! Its rooms: `run` (the loop), `fetch`
//! (asking for work), `continuation` (fetched states), `scan` (scans in
//! flight), `finish` (a scan's end and stopping), `progress` (reports),
//! `parts` (parts of running scans), `upload` (results), `link` (the server link), `status` (the live status),
//! `sizing` (the concurrency: measured, stepped, applied) and `join`. This module keeps the buffer and backoff arithmetic.

mod continuation;
mod fetch;
mod finish;
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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::mpsc;

use crate::bandwidth::Bandwidth;
use crate::cancel::Cancel;
use crate::checkpoint::CheckpointSlot;
use crate::control::Gate;
use crate::crawler::CrawlerConfig;
use crate::home::{Enrolment, Home, PartsSent, SpooledUnit};
use crate::net::{Link, ServerId};

use scan::ScanDone;

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

/// A unit the client holds.
struct Held {
    unit: SpooledUnit,
    state: HeldState,
    /// The unit's deadline on the server's clock, as last extended (Unix ms).
    deadline_ms: u64,
    /// A continuation unit whose state is not fetched yet (`FetchState`).
    needs_state: bool,
    /// What the server holds of its scan: the parts it accepted.
    parts: PartsSent,
    /// When its next part is due (set when its scan starts).
    part_due: Option<Instant>,
}

enum HeldState {
    Waiting,
    Crawling {
        cancel: Arc<Cancel>,
        /// Set with `cancel` when the server wants the scan on another host
        /// ([`ABORT_HAND_OVER`]): it ends with a result and its frontier.
        hand_over: Arc<AtomicBool>,
        pages: Arc<AtomicU64>,
        links: Arc<AtomicU64>,
        /// Body bytes read, from the unit's start (its parts included).
        bytes: Arc<AtomicU64>,
        /// URLs its frontier holds.
        queued: Arc<AtomicU64>,
        last_progress: Instant,
        /// The scan's lease on its site, renewed by answered reports.
        lease: Arc<lease::Lease>,
        started: Instant,
        /// Its checkpoints, shared with its thread.
        slot: Arc<CheckpointSlot>,
    },
    /// Result spooled, waiting for the server's acknowledgement.
    Finished,
    /// The server said stop: drop it when its scan returns.
    Aborted,
}

/// The running client.
struct Worker {
    home: Home,
    enrolment: Enrolment,
    key: SigningKey,
    project_key: VerifyingKey,
    server: ServerId,
    opts: RunOptions,
    held: BTreeMap<u64, Held>,
    link: Option<Link>,
    clock_offset_ms: i64,
    failures: u32,
    /// Work answers in a row whose every unit was refused (their own backoff:
    /// those answers are network successes, which reset `failures`).
    refusals: u32,
    next_contact: Instant,
    next_request: Instant,
    server_idle: bool,
    stats: RunStats,
    done_tx: mpsc::Sender<ScanDone>,
    last_error: Option<String>,
    /// When the latest request the server answered was sent: a new scan's
    /// lease counts from it.
    last_answered: Option<lease::Sent>,
    /// The spool's size when last measured, and when (see [`SPOOL_RECHECK`]).
    spool_measured: Option<(Instant, u64)>,
    /// The last problems, for the status page.
    problems: Vec<crate::control::Problem>,
    status_written: Instant,
    /// Today's totals as this run last wrote or read them: the status
    /// reads the spool's days file again only on another date (this run
    /// is its only writer).
    today: Option<crate::home::DayTotals>,
    /// The units whose scans ended when the status was last written
    /// ([`Worker::write_status`] writes a change there at once).
    status_shape: Vec<(u64, bool)>,
    bandwidth: Option<Arc<Bandwidth>>,
    /// Running average of this client's scan time, seconds (buffer sizing).
    job_s: Option<f64>,
    /// Running average of a request's round trip, seconds (buffer sizing).
    round_trip_s: f64,
    /// The reference-site benchmark, run on first start and weekly.
    bench: crate::benchmark::Background,
    /// The client is stopping: cancelled scans stay in the spool, checkpointed.
    stopping: bool,
    /// Scans stopped offline in a row (the offline back-off's exponent).
    offline_stops: u32,
    /// No scan starts before this (a scan found its site offline).
    scans_resume_at: Option<Instant>,
    /// The server pushed `WorkAvailable`: ask for work at this moment.
    hinted_at: Option<Instant>,
    /// The server has heard this link's `Resources` (memory, bandwidth cap).
    resources_told: bool,
    /// The concurrency the server has heard on this link (`Concurrency`).
    concurrency_told: Option<u32>,
    /// The server does not take `ScanProgressAll` (0.1.0's): each scan
    /// reports on its own, as `Progress` without its bytes, until the next
    /// link.
    progress_all_refused: bool,
    /// When this run started: a run before it may have asked any of its
    /// sites a moment before.
    run_started: Instant,
    /// The concurrency controller and what it measures.
    sizing: sizing::Sizing,
    /// What every scan counts (pages, bytes, response times).
    meter: Arc<sizing::ScanMeter>,
}

impl Worker {
    /// Settings read again while running (`beebot config set`): slots,
    /// buffers, the spool cap and the crawler's rules apply from the next
    /// scan and request, the CPU budget from the controller's next step,
    /// the bandwidth cap at once (the window and battery
    /// rule are the gate's).
    fn apply_settings(&mut self, s: &crate::settings::Settings) {
        self.opts.slots = s.slots;
        self.opts.buffer_seconds = s.buffer_max_s;
        self.opts.buffer_min_s = s.buffer_min_s;
        self.opts.spool_cap_bytes = s.spool_cap_mb.saturating_mul(1024 * 1024);
        self.opts.crawler.allow_private = s.allow_private;
        self.opts.crawler.proxy = s.proxy.clone();
        let offer_changed =
            (self.opts.bandwidth_kbps, self.opts.memory_mb) != (s.bandwidth_kbps, s.memory_mb);
        self.opts.bandwidth_kbps = s.bandwidth_kbps;
        self.opts.memory_mb = s.memory_mb;
        self.opts.cpu_percent = s.cpu_percent;
        if offer_changed {
            self.resources_told = false;
        }
        if let Some(b) = &self.bandwidth {
            b.set_kb_per_s(s.bandwidth_kbps);
        }
        self.bound_concurrency();
        // Ask again now: free slots, buffers and open windows may differ.
        self.next_request = Instant::now();
        tracing::info!(
            slots = s.slots,
            bandwidth_kbps = s.bandwidth_kbps,
            cpu_percent = s.cpu_percent,
            "settings applied"
        );
    }

    /// The wait of reconnect attempt `attempt`: full jitter within this
    /// run's backoff bounds.
    fn backoff(&self, attempt: u32) -> Duration {
        backoff_delay(
            attempt,
            self.opts.backoff_base,
            self.opts.backoff_cap,
            rand::random::<f64>(),
        )
    }

    /// Whether scans may run now (not paused, inside the window, on power
    /// when the battery rule says so).
    fn gate_open(&self) -> bool {
        self.opts.gate.as_ref().is_none_or(|g| g.is_open())
    }

    /// Ids of the held units whose state matches.
    fn units_where(&self, f: impl Fn(&HeldState) -> bool) -> Vec<u64> {
        self.held
            .iter()
            .filter(|(_, h)| f(&h.state))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Ids of the held units of `round_id`.
    fn units_where_round(&self, round_id: u64) -> Vec<u64> {
        self.held
            .iter()
            .filter(|(_, h)| h.unit.unit.round_id == round_id)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The server no longer wants these units (their round was cancelled,
    /// their site excluded, or they went to another host while this one
    /// was away): a running scan is stopped (dropped when it returns), the
    /// others are dropped now and never started.
    fn drop_cancelled(&mut self, unit_ids: &[u64]) {
        for unit_id in unit_ids {
            let Some(h) = self.held.get_mut(unit_id) else {
                continue;
            };
            match &h.state {
                HeldState::Crawling { cancel, .. } => {
                    cancel.cancel();
                    h.state = HeldState::Aborted;
                }
                HeldState::Aborted => {}
                HeldState::Waiting | HeldState::Finished => {
                    let round_id = h.unit.unit.round_id;
                    tracing::info!(
                        unit_id,
                        round_id,
                        "unit dropped: the server no longer wants it (round cancelled, \
                         site excluded, or given to another host while this one was away)"
                    );
                    self.held.remove(unit_id);
                    self.home.spool().remove_unit(*unit_id);
                }
            }
        }
    }

    /// Ids of every held unit (told to the server with each work request).
    fn units_held(&self) -> Vec<u64> {
        self.held.keys().copied().collect()
    }

    /// Scans whose thread still runs (aborted ones until they return).
    fn crawling(&self) -> usize {
        self.held
            .values()
            .filter(|h| matches!(h.state, HeldState::Crawling { .. } | HeldState::Aborted))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use beebot_shared::sign::WorkUnit;

    /// A worker in a home of its own in a temporary directory (kept while
    /// the directory lives), joined to a project that is nowhere (it is
    /// never contacted), holding nothing.
    pub(super) fn worker() -> (tempfile::TempDir, super::Worker) {
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
        home.identity().host_key(true).expect("host key");
        let (done_tx, _) = tokio::sync::mpsc::channel(1);
        let w = super::Worker::open(home, enrolment, super::RunOptions::default(), done_tx)
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
