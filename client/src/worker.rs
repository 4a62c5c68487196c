//! The work loop of `beebot run`: keep a buffer of signed units, crawl up to
//! `slots` of them at once on threads, spool each result, upload it until the
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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::mpsc;
use url::Url;

use beebot_shared::limits::{MAX_RETRY_AFTER_SECS, MAX_SLOTS};
use beebot_shared::linkfile::{self, LinkFileHeader, StopReason};
use beebot_shared::proto::{ErrorCode, Request, Response, ABORT_HAND_OVER, ABORT_ROUND_CANCELLED};
use beebot_shared::scanstate::{state_sha256, ScanState, ScanStateError};
use beebot_shared::sign::{self, ResumeFrom, WorkUnit};

use crate::bandwidth::Bandwidth;
use crate::checkpoint::{Checkpoint, CheckpointSlot};
use crate::control::{self, Gate, Hold, LiveStatus, ScanStatus};
use crate::crawler::{self, CrawlSpec, CrawlerConfig};
use crate::home::{today_date, Enrolment, Home, SpooledResult, SpooledUnit, MAX_SPOOLED_UNITS};
use crate::net::{Link, NetError, ServerId};

/// Settings of the work loop.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Exit once the server has no more work and every result is delivered.
    pub once: bool,
    /// Sites scanned at once.
    pub slots: u32,
    /// Most seconds of work to hold (BOINC's "up to" buffer): the request's `want_seconds`.
    pub buffer_seconds: u64,
    /// Least seconds of work to hold (BOINC's "at least" buffer): below it the
    /// client asks for one more unit even when every slot has its reserve.
    pub buffer_min_s: u64,
    /// Extra pause after every page: makes this client slower on purpose
    /// (tests and demos of scheduling; zero in real use).
    pub throttle: Duration,
    /// Backoff bounds for reconnecting.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How often a running unit reports progress.
    pub progress_interval: Duration,
    pub crawler: CrawlerConfig,
    /// Holds scans while paused or outside the time window (`None`: always run).
    /// With a gate, the control socket for `beebot pause`/`resume` is served.
    pub gate: Option<Arc<Gate>>,
    /// Download cap over all scans, KB/s (0: none).
    pub bandwidth_kbps: u64,
    /// Disk the spool may use before no new work is taken, bytes (0: no cap).
    pub spool_cap_bytes: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            once: false,
            slots: 2,
            buffer_seconds: DEFAULT_BUFFER_MAX_S,
            buffer_min_s: DEFAULT_BUFFER_MIN_S,
            throttle: Duration::ZERO,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            progress_interval: Duration::from_secs(10),
            crawler: CrawlerConfig::default(),
            gate: None,
            bandwidth_kbps: 0,
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
/// Longest a stopping client waits for its scans to reach a page boundary
/// and checkpoint there; a scan still in a request (timeouts up to 60 s) is
/// checkpointed from its last snapshot instead. Well inside the 5 s a stop
/// may take (systemd's stop timeout is far longer).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// Longest a stopping client then spends writing checkpoints (in parallel)
/// and waiting for scans writing their own end: with the grace and the
/// runtime's exit wait, a stop stays under 5 s.
pub const SHUTDOWN_WRITES: Duration = Duration::from_millis(1250);
/// Back-off after a scan stopped because its site stopped answering
/// ([`StopReason::Offline`]): no scan starts (or resumes) for a random wait
/// up to this base doubled per offline stop in a row, at most
/// [`OFFLINE_BACKOFF_CAP`]. A scan that ends reachable resets it.
pub const OFFLINE_BACKOFF_BASE: Duration = Duration::from_secs(5);
pub const OFFLINE_BACKOFF_CAP: Duration = Duration::from_secs(600);

/// A host told that work is available (`WorkAvailable`) asks within a
/// random wait of up to this long, so connected hosts do not ask in lockstep.
pub const WORK_HINT_JITTER: Duration = Duration::from_secs(1);

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

/// What the status says while the spool is over its cap.
const SPOOL_FULL: &str =
    "the spool is over its disk cap (spool_cap_mb): no new work until results are uploaded";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A unit the client holds.
struct Held {
    unit: SpooledUnit,
    state: HeldState,
    /// The unit's deadline on the server's clock, as last extended (Unix ms).
    deadline_ms: u64,
    /// A continuation unit whose state is not fetched yet (`FetchState`).
    needs_state: bool,
}

enum HeldState {
    Waiting,
    Crawling {
        cancel: Arc<AtomicBool>,
        /// Set with `cancel` when the server wants the scan on another host
        /// ([`ABORT_HAND_OVER`]): it ends with a result and its frontier.
        hand_over: Arc<AtomicBool>,
        pages: Arc<AtomicU64>,
        links: Arc<AtomicU64>,
        last_progress: Instant,
        started: Instant,
        /// Its checkpoints, shared with its thread.
        slot: Arc<CheckpointSlot>,
    },
    /// Result spooled, waiting for the server's acknowledgement.
    Finished,
    /// The server said stop: drop it when its scan returns.
    Aborted,
}

/// A scan's end, sent from the crawl thread.
struct ScanDone {
    unit_id: u64,
    result: ScanEnd,
}

/// How a scan thread ended.
enum ScanEnd {
    /// A result to upload (the state beside it when it stopped early).
    Finished(Box<SpooledResult>),
    /// Cancelled (the client stops, or the server aborted): its checkpoint
    /// is in the spool.
    Checkpointed,
    /// The site stopped answering (this host is offline, or the site):
    /// its checkpoint is in the spool; it resumes after a back-off.
    Offline,
    /// The scan could not produce a result.
    Failed(String),
}

/// A unit's deadline (server clock, Unix ms) on the local clock.
/// `clock_offset_ms` = server time − local time.
pub fn local_deadline(deadline_ms: u64, clock_offset_ms: i64) -> SystemTime {
    let local_ms = (deadline_ms as i64 - clock_offset_ms).max(0) as u64;
    UNIX_EPOCH + Duration::from_millis(local_ms)
}

/// Why the state a continuation unit names was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateRefused {
    #[error("the state is {got} bytes, the unit names {want}")]
    Length { got: u64, want: u64 },
    #[error("the state's SHA-256 is not the one the unit names")]
    Digest,
    #[error("the state cannot be read: {0}")]
    Decode(#[from] ScanStateError),
    #[error("the state is of site {got:?}, the unit of {want:?}")]
    Site { got: String, want: String },
}

/// Check the state the server sent for a continuation unit against what the
/// unit names (signed: length and SHA-256), then decode it. The pages the
/// job took are the signed figure.
pub fn check_state(
    unit: &WorkUnit,
    resume: &ResumeFrom,
    bytes: &[u8],
) -> Result<ScanState, StateRefused> {
    if bytes.len() as u64 != resume.state_bytes {
        return Err(StateRefused::Length {
            got: bytes.len() as u64,
            want: resume.state_bytes,
        });
    }
    if state_sha256(bytes) != resume.state_sha256 {
        return Err(StateRefused::Digest);
    }
    let mut state = ScanState::decode(bytes)?;
    if state.site != unit.site {
        return Err(StateRefused::Site {
            got: state.site,
            want: unit.site.clone(),
        });
    }
    state.pages_done = resume.pages_done;
    Ok(state)
}

/// What to do with the server's answer to a continuation unit's `FetchState`.
#[derive(Debug)]
pub enum StateAnswer {
    /// The state, checked: the unit's first checkpoint.
    Use(ScanState),
    /// The server ended the unit (`Abort`, `Rejected`): forget it.
    Drop(String),
    /// No usable state (refused by the server, or by the signed digest):
    /// give the unit back (`Fail`) and forget it.
    GiveBack(String),
    /// The network failed: back off and ask again.
    Retry(NetError),
    /// This host may not talk to the server any more.
    Fatal(NetError),
}

/// Decide what a `FetchState` answer means for the unit. Only a network
/// failure keeps the unit waiting for its state: a unit whose state the
/// server will not give (its job is over, the state is gone or does not
/// match) is forgotten, so it never holds the client.
pub fn state_answer(
    unit: &WorkUnit,
    resume: &ResumeFrom,
    answer: Result<Response, NetError>,
) -> StateAnswer {
    match answer {
        Ok(Response::State { bytes }) => match check_state(unit, resume, &bytes) {
            Ok(state) => StateAnswer::Use(state),
            Err(e) => {
                StateAnswer::GiveBack(format!("refused the state of the continuation unit: {e}"))
            }
        },
        Ok(Response::Abort { reason }) | Ok(Response::Rejected { reason }) => {
            StateAnswer::Drop(reason)
        }
        Ok(other) => StateAnswer::GiveBack(format!(
            "the server gave no state for the continuation unit: {other:?}"
        )),
        Err(e) if e.is_permanent() => StateAnswer::Fatal(e),
        Err(NetError::Refused { code, message })
            if matches!(code, ErrorCode::BadRequest | ErrorCode::Internal) =>
        {
            StateAnswer::GiveBack(format!(
                "the server refused the continuation unit's state ({code:?}): {message}"
            ))
        }
        Err(e) => StateAnswer::Retry(e),
    }
}

/// Where a unit's scan starts.
#[derive(Debug)]
pub enum StartFrom {
    /// A fresh scan, from the seed.
    Seed,
    /// The unit's checkpoint (its own earlier run, or a continuation's state).
    Checkpoint(Box<Checkpoint>),
    /// A continuation unit without a usable state: fetch it (`FetchState`).
    FetchState,
}

/// Where a unit starts, given what reading its checkpoint gave. A damaged
/// checkpoint starts a unit over from the seed; a continuation unit never
/// starts from the seed (that would scan its job's earlier segments again):
/// without its checkpoint it fetches its state again.
pub fn start_from(continuation: bool, read: Result<Option<Checkpoint>>) -> StartFrom {
    match read {
        Ok(Some(c)) => StartFrom::Checkpoint(Box::new(c)),
        _ if continuation => StartFrom::FetchState,
        _ => StartFrom::Seed,
    }
}

/// The order in which waiting units start: those whose deadline has not
/// passed first, then the expired ones (the server may well have issued
/// their job to another host, and aborts this copy at its first progress if
/// so), each group by unit id. `waiting` holds `(unit_id, deadline_ms)`, on
/// the server's clock like `server_now_ms`.
pub fn start_order(mut waiting: Vec<(u64, u64)>, server_now_ms: u64) -> Vec<u64> {
    waiting.sort_by_key(|&(id, deadline_ms)| (deadline_ms <= server_now_ms, id));
    waiting.into_iter().map(|(id, _)| id).collect()
}

/// Build the crawl of a unit: from `resume` (a checkpoint or the state of a
/// continuation unit) when given, with the round's time budget less the
/// `spent` time of the unit's earlier parts. No deadline: deadlines never
/// cut a live scan.
pub fn crawl_spec(
    unit: &WorkUnit,
    resume: Option<ScanState>,
    spent: Duration,
) -> Result<CrawlSpec> {
    let seed = Url::parse(&unit.seed_url).context("unit has a bad seed URL")?;
    Ok(CrawlSpec {
        site: unit.site.clone(),
        seed,
        scope: unit.scope,
        max_pages: unit.limits.max_pages,
        max_depth: unit.limits.max_depth,
        delay: Duration::from_millis(unit.limits.delay_ms),
        // The unit carries no Crawl-delay maximum yet: the crawler's own cap.
        max_crawl_delay: Duration::from_millis(unit.limits.max_crawl_delay_ms)
            .min(crawler::robots::MAX_CRAWL_DELAY),
        max_page_bytes: unit.limits.max_page_bytes,
        max_duration: Duration::from_secs(unit.limits.max_seconds).saturating_sub(spent),
        user_agent: unit.user_agent.clone(),
        resume,
        excluded: unit.exclusions.clone(),
    })
}

/// What a running scan shares with the work loop.
struct ScanHooks {
    cancel: Arc<AtomicBool>,
    /// The cancel is a hand-over: upload what was done, with the frontier.
    hand_over: Arc<AtomicBool>,
    pages: Arc<AtomicU64>,
    links: Arc<AtomicU64>,
    /// Holds the scan at a page boundary while paused or outside the window.
    gate: Option<Arc<Gate>>,
    /// Extra pause after every page (a deliberately slow host).
    throttle: Duration,
    /// The client's shared bandwidth cap.
    bandwidth: Option<Arc<Bandwidth>>,
    /// The scan's checkpoints.
    slot: Arc<CheckpointSlot>,
    /// Pages and links of the unit's earlier parts (progress counts the unit's).
    pages_before: u64,
    links_before: u64,
    home: Home,
}

/// Run a unit's scan (blocking): checkpoint it as it goes, and end with its
/// link file (all parts together) or, when cancelled, a final checkpoint.
fn scan(unit: &WorkUnit, spec: &CrawlSpec, cfg: &CrawlerConfig, hooks: &ScanHooks) -> ScanEnd {
    let cancel = &*hooks.cancel;
    let slot = &*hooks.slot;
    let write = |c: &Checkpoint| hooks.home.save_checkpoint(unit.unit_id, c);
    let mut paid_bytes = 0u64;
    let out = crawler::crawl_resumable(spec, cfg, cancel, &mut |p, snapshot| {
        hooks
            .pages
            .store(hooks.pages_before + p.pages, Ordering::Relaxed);
        hooks
            .links
            .store(hooks.links_before + p.links, Ordering::Relaxed);
        // A page boundary: pay for the bytes read, keep a snapshot (written
        // to the spool every CHECKPOINT_INTERVAL and before the gate holds
        // the scan), then hold while paused or outside the window.
        if let Some(b) = &hooks.bandwidth {
            b.pay(p.bytes.saturating_sub(paid_bytes), cancel);
            paid_bytes = p.bytes;
        }
        if !hooks.throttle.is_zero() && !cancel.load(Ordering::Relaxed) {
            std::thread::sleep(hooks.throttle);
        }
        let held = hooks.gate.as_ref().is_some_and(|g| !g.is_open());
        let write_now = held || slot.write_due();
        if write_now || cancel.load(Ordering::Relaxed) || slot.snapshot_due() {
            slot.keep(snapshot(slot.records_from()));
        }
        if write_now {
            if let Err(e) = slot.write_latest(&write) {
                tracing::warn!(unit_id = unit.unit_id, "cannot write a checkpoint: {e:#}");
            }
        }
        if let Some(g) = &hooks.gate {
            g.wait_open(cancel);
        }
    });
    let stopped_by = out.summary.stopped_by;
    let state = out.state;
    let mut whole = slot.close(out.records, &out.summary);
    let handed_over =
        stopped_by == Some(StopReason::Cancelled) && hooks.hand_over.load(Ordering::Relaxed);
    if let Some(stop @ (StopReason::Cancelled | StopReason::Offline)) =
        stopped_by.filter(|_| !handed_over)
    {
        // Kept, to go on from its checkpoint: after the client restarts,
        // or once the site answers again.
        whole.state = state.unwrap_or_default();
        return match hooks.home.save_checkpoint(unit.unit_id, &whole) {
            Ok(()) if stop == StopReason::Offline => ScanEnd::Offline,
            Ok(()) => ScanEnd::Checkpointed,
            Err(e) => ScanEnd::Failed(format!("cannot write the checkpoint: {e:#}")),
        };
    }
    let header = LinkFileHeader::of_unit(unit, whole.summary.pages, whole.records.len() as u64);
    let link_file = match linkfile::encode(&header, &whole.records) {
        Ok(b) => b,
        Err(e) => return ScanEnd::Failed(e.to_string()),
    };
    let state = match state.map(|mut s| crawler::encode_state(&mut s)).transpose() {
        Ok(Some((bytes, cut))) => {
            whole.summary.frontier_dropped += cut;
            Some(bytes)
        }
        Ok(None) => None,
        Err(e) => return ScanEnd::Failed(format!("cannot encode the scan state: {e}")),
    };
    ScanEnd::Finished(Box::new(SpooledResult {
        link_file,
        summary: whole.summary,
        state,
    }))
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
    status_written: Instant,
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
}

impl Worker {
    /// Settings read again while running (`beebot config set`): slots,
    /// buffers, the spool cap and the crawler's rules apply from the next
    /// scan and request, the bandwidth cap at once (the window and battery
    /// rule are the gate's).
    fn apply_settings(&mut self, s: &crate::settings::Settings) {
        self.opts.slots = s.slots;
        self.opts.buffer_seconds = s.buffer_max_s;
        self.opts.buffer_min_s = s.buffer_min_s;
        self.opts.spool_cap_bytes = s.spool_cap_mb.saturating_mul(1024 * 1024);
        self.opts.crawler.allow_private = s.allow_private;
        self.opts.crawler.proxy = s.proxy.clone();
        self.opts.bandwidth_kbps = s.bandwidth_kbps;
        if let Some(b) = &self.bandwidth {
            b.set_kb_per_s(s.bandwidth_kbps);
        }
        // Ask again now: free slots, buffers and open windows may differ.
        self.next_request = Instant::now();
        tracing::info!(
            slots = s.slots,
            bandwidth_kbps = s.bandwidth_kbps,
            "settings applied"
        );
    }

    fn gate_open(&self) -> bool {
        self.opts.gate.as_ref().is_none_or(|g| g.is_open())
    }

    /// Write the live status for `beebot status` (at most once a second).
    fn write_status(&mut self) {
        if self.status_written.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.status_written = Instant::now();
        let now = SystemTime::now();
        let (state, until) = match self.opts.gate.as_ref().map(|g| g.hold()) {
            Some(Hold::Paused(u)) => ("paused", u),
            Some(Hold::OutsideWindow(u)) => ("outside-window", u),
            Some(Hold::OnBattery) => ("on-battery", None),
            _ if self.scans_resume_at.is_some_and(|t| Instant::now() < t) => {
                let wait = self
                    .scans_resume_at
                    .map_or(Duration::ZERO, |t| t - Instant::now());
                ("offline", Some(now + wait))
            }
            _ if Instant::now() < self.next_contact => {
                let wait = self.next_contact - Instant::now();
                ("backing-off", Some(now + wait))
            }
            _ if self.link.is_none() && self.failures > 0 => ("offline", None),
            _ if self.crawling() > 0 => ("running", None),
            _ => ("idle", None),
        };
        let scans = self
            .held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                HeldState::Crawling {
                    pages,
                    links,
                    started,
                    ..
                } => {
                    let p = pages.load(Ordering::Relaxed);
                    Some(ScanStatus {
                        unit_id: *id,
                        site: h.unit.unit.site.clone(),
                        pages: p,
                        links: links.load(Ordering::Relaxed),
                        pages_per_s: p as f64 / started.elapsed().as_secs_f64().max(0.001),
                        deadline_ms: Some(control::unix_ms(local_deadline(
                            h.deadline_ms,
                            self.clock_offset_ms,
                        ))),
                    })
                }
                _ => None,
            })
            .collect();
        let today = self.home.today(&today_date());
        let s = LiveStatus {
            pid: std::process::id(),
            updated_ms: control::unix_ms(now),
            state: state.into(),
            until_ms: until.map(control::unix_ms),
            scans,
            today_pages: today.pages,
            today_links: today.links,
            today_results: today.results,
            pending_uploads: self
                .held
                .values()
                .filter(|h| matches!(h.state, HeldState::Finished))
                .count() as u64,
            last_error: self.last_error.clone(),
            started_ms: Some(control::process_started_ms()),
        };
        control::write_status(&self.home.data, &s);
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

    /// The server cancelled the round of these units: a running scan is
    /// stopped (dropped when it returns), the others are dropped now and
    /// never started.
    fn drop_cancelled(&mut self, unit_ids: &[u64]) {
        for unit_id in unit_ids {
            let Some(h) = self.held.get_mut(unit_id) else {
                continue;
            };
            match &h.state {
                HeldState::Crawling { cancel, .. } => {
                    cancel.store(true, Ordering::Relaxed);
                    h.state = HeldState::Aborted;
                }
                HeldState::Aborted => {}
                HeldState::Waiting | HeldState::Finished => {
                    let round_id = h.unit.unit.round_id;
                    tracing::info!(unit_id, round_id, "unit dropped: round cancelled");
                    self.held.remove(unit_id);
                    self.home.remove_unit(*unit_id);
                }
            }
        }
    }

    fn units_held(&self) -> Vec<u64> {
        self.held.keys().copied().collect()
    }

    fn crawling(&self) -> usize {
        self.held
            .values()
            .filter(|h| matches!(h.state, HeldState::Crawling { .. } | HeldState::Aborted))
            .count()
    }

    /// Connect and say hello when not connected; errors start the backoff.
    async fn ensure_link(&mut self) -> Result<(), NetError> {
        if self.link.is_some() {
            return Ok(());
        }
        let link = Link::connect(&self.server).await?;
        if let Response::Welcome {
            server_time_ms,
            reference_site,
            ..
        } = link.hello(self.enrolment.host_id, &self.key).await?
        {
            self.clock_offset_ms = server_time_ms as i64 - now_ms() as i64;
            self.bench.reference_site = reference_site;
        }
        self.link = Some(link);
        Ok(())
    }

    fn net_failed(&mut self, e: &NetError) {
        if let Some(l) = self.link.take() {
            l.close();
        }
        self.failures = self.failures.saturating_add(1);
        let wait = backoff_delay(
            self.failures,
            self.opts.backoff_base,
            self.opts.backoff_cap,
            rand::random::<f64>(),
        );
        tracing::warn!(
            "server unreachable ({e}); retrying in {:.1}s",
            wait.as_secs_f64()
        );
        self.last_error = Some(e.to_string());
        self.next_contact = Instant::now() + wait;
    }

    async fn request(&mut self, req: &Request) -> Result<Response, NetError> {
        self.ensure_link().await?;
        let link = self.link.as_ref().ok_or(NetError::Lost("no link".into()))?;
        let sent = Instant::now();
        let r = link.request(req).await;
        if r.is_ok() {
            self.failures = 0;
            let rtt = sent.elapsed().as_secs_f64();
            self.round_trip_s += AVERAGE_WEIGHT * (rtt - self.round_trip_s);
        }
        r
    }

    /// Upload every finished result. Returns false when the network failed.
    async fn upload_finished(&mut self) -> Result<bool> {
        let ids = self.units_where(|s| matches!(s, HeldState::Finished));
        for unit_id in ids {
            let Some(SpooledResult {
                link_file,
                summary,
                state,
            }) = self.home.result(unit_id)?
            else {
                // Lost its result file: scan again.
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.state = HeldState::Waiting;
                }
                continue;
            };
            let pages = summary.pages;
            let links = summary.links;
            let req = Request::Upload {
                unit_id,
                summary,
                link_file,
                state,
            };
            match self.request(&req).await {
                Ok(Response::Accepted) => {
                    self.stats.uploads_accepted += 1;
                    self.stats.pages += pages;
                    self.stats.links += links;
                    if let Err(e) = self.home.add_to_today(&today_date(), pages, links) {
                        tracing::warn!("cannot update today's totals: {e:#}");
                    }
                    tracing::info!(unit_id, pages, links, "result accepted");
                }
                Ok(Response::Duplicate) => {
                    self.stats.uploads_duplicate += 1;
                    tracing::info!(unit_id, "result was a duplicate (job finished elsewhere)");
                }
                Ok(Response::Rejected { reason }) if reason == ABORT_ROUND_CANCELLED => {
                    self.stats.uploads_rejected += 1;
                    tracing::info!(unit_id, "result dropped: {reason}");
                    if let Some(round_id) = self.held.get(&unit_id).map(|h| h.unit.unit.round_id) {
                        let of_round = self.units_where_round(round_id);
                        self.drop_cancelled(&of_round);
                    }
                }
                Ok(Response::Rejected { reason }) => {
                    self.stats.uploads_rejected += 1;
                    tracing::warn!(unit_id, "result rejected: {reason}");
                }
                Ok(other) => {
                    tracing::warn!(unit_id, "unexpected answer to upload: {other:?}");
                    continue;
                }
                Err(e) if e.is_permanent() => {
                    return Err(e).context("the server refused this host")
                }
                Err(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
            }
            self.held.remove(&unit_id);
            self.home.remove_unit(unit_id);
            if self.opts.once {
                // This result may have ended the round: ask at once rather
                // than after a `retry_after` heard while scanning, so
                // `--once` exits as soon as its work is delivered.
                self.next_request = Instant::now();
            }
        }
        Ok(true)
    }

    /// Report progress of running scans; stop the ones the server aborts.
    async fn report_progress(&mut self) -> Result<bool> {
        let due: Vec<(u64, u64, u64)> = self
            .held
            .iter()
            .filter_map(|(id, h)| match &h.state {
                HeldState::Crawling {
                    pages,
                    links,
                    last_progress,
                    ..
                } if last_progress.elapsed() >= self.opts.progress_interval => Some((
                    *id,
                    pages.load(Ordering::Relaxed),
                    links.load(Ordering::Relaxed),
                )),
                _ => None,
            })
            .collect();
        for (unit_id, pages, links) in due {
            let r = self
                .request(&Request::Progress {
                    unit_id,
                    pages,
                    links,
                })
                .await;
            let Some(h) = self.held.get_mut(&unit_id) else {
                continue;
            };
            match r {
                Ok(Response::Abort { reason }) if reason == ABORT_HAND_OVER => {
                    // Another host continues the scan: stop at a page
                    // boundary and upload what was done with the frontier.
                    tracing::info!(unit_id, "the scan is handed over to another host");
                    if let HeldState::Crawling {
                        cancel, hand_over, ..
                    } = &h.state
                    {
                        hand_over.store(true, Ordering::Relaxed);
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
                Ok(Response::Abort { reason }) => {
                    tracing::info!(unit_id, "server aborted the scan: {reason}");
                    if let HeldState::Crawling { cancel, .. } = &h.state {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    h.state = HeldState::Aborted;
                    if reason == ABORT_ROUND_CANCELLED {
                        let round_id = h.unit.unit.round_id;
                        let of_round = self.units_where_round(round_id);
                        self.drop_cancelled(&of_round);
                    }
                }
                Ok(Response::Extend { deadline_ms }) => {
                    // The host is alive: its deadline moves; the scan goes on.
                    h.deadline_ms = deadline_ms;
                    if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                        *last_progress = Instant::now();
                    }
                    tracing::debug!(unit_id, deadline_ms, "deadline extended");
                    if let Err(e) = self.home.save_deadline(unit_id, deadline_ms) {
                        tracing::warn!(unit_id, "cannot spool the extended deadline: {e:#}");
                    }
                }
                Ok(_) => {
                    if let HeldState::Crawling { last_progress, .. } = &mut h.state {
                        *last_progress = Instant::now();
                    }
                }
                Err(e) if e.is_permanent() => {
                    return Err(e).context("the server refused this host")
                }
                Err(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Ask for work when the buffer runs low.
    async fn fetch_work(&mut self) -> Result<bool> {
        // A full spool takes no new work until uploads free it.
        if self.opts.spool_cap_bytes > 0 && self.home.spool_bytes() >= self.opts.spool_cap_bytes {
            if self.last_error.as_deref() != Some(SPOOL_FULL) {
                tracing::warn!("{SPOOL_FULL}");
                self.last_error = Some(SPOOL_FULL.into());
            }
            return Ok(true);
        }
        // The server pushed `WorkAvailable` (a round started or was
        // cancelled): ask within a moment, whatever the buffer holds.
        if self.link.as_ref().is_some_and(|l| l.take_work_hint()) {
            let wait = WORK_HINT_JITTER.mul_f64(rand::random::<f64>());
            self.hinted_at = Some(Instant::now() + wait);
        }
        let hinted = self.hinted_at.is_some_and(|t| Instant::now() >= t);
        let unfinished = self
            .held
            .values()
            .filter(|h| matches!(h.state, HeldState::Waiting | HeldState::Crawling { .. }))
            .count();
        // Hold enough units per slot that no slot idles for a round trip, and
        // the buffer's seconds of work (see `work_wanted`).
        let wanted = work_wanted(
            self.opts.slots,
            unfinished,
            self.job_s,
            self.round_trip_s,
            self.opts.buffer_min_s,
            self.opts.buffer_seconds,
        )
        .filter(|_| self.held.len() < MAX_SPOOLED_UNITS && self.gate_open());
        if !hinted && (wanted.is_none() || Instant::now() < self.next_request) {
            return Ok(true);
        }
        // Hinted with a full buffer (or the gate shut): nothing asked for,
        // but the answer names the held units of a cancelled round.
        let (want_seconds, free_slots) = wanted.unwrap_or((0, 0));
        self.hinted_at = None;
        // Near the end of a window, ask only for work that fits in it.
        let want_seconds = match self.opts.gate.as_ref().and_then(|g| g.seconds_left_open()) {
            Some(left) => want_seconds.min(left),
            None => want_seconds,
        };
        let req = Request::RequestWork {
            want_seconds,
            free_slots,
            units_held: self.units_held(),
            open_windows: self.opts.gate.as_ref().and_then(|g| g.open_intervals()),
        };
        match self.request(&req).await {
            Ok(Response::Work {
                units,
                retry_after_s,
                rounds_open,
                cancelled_units,
            }) => {
                self.drop_cancelled(&cancelled_units);
                self.server_idle = units.is_empty() && !rounds_open;
                if units.is_empty() {
                    let wait = retry_after_s.unwrap_or(30).min(MAX_RETRY_AFTER_SECS);
                    // A little jitter so hosts do not ask in lockstep.
                    let jitter = 1.0 + rand::random::<f64>() * 0.2;
                    self.next_request = Instant::now() + Duration::from_secs(wait).mul_f64(jitter);
                }
                let offered = units.len();
                let refused_before = self.stats.units_refused;
                for signed in units {
                    match sign::verify_unit(&self.project_key, &signed) {
                        Ok(unit) if unit.host_id == self.enrolment.host_id => {
                            let s = SpooledUnit { signed, unit };
                            self.home.spool_unit(&s)?;
                            self.stats.units_received += 1;
                            self.refusals = 0;
                            self.held.insert(
                                s.unit.unit_id,
                                Held {
                                    deadline_ms: s.unit.deadline_ms,
                                    needs_state: s.unit.resume.is_some(),
                                    unit: s,
                                    state: HeldState::Waiting,
                                },
                            );
                        }
                        Ok(unit) => {
                            self.stats.units_refused += 1;
                            tracing::error!(
                                unit_id = unit.unit_id,
                                "refused a unit issued to another host"
                            );
                        }
                        Err(e) => {
                            self.stats.units_refused += 1;
                            tracing::error!("refused a work unit: {e}");
                        }
                    }
                }
                if offered > 0 && self.stats.units_refused - refused_before == offered as u64 {
                    // Nothing usable (a server signing with another key than
                    // the one joined, or sending others' units): back off
                    // like a failure instead of asking again at once, longer
                    // each time until a usable unit arrives.
                    self.refusals = self.refusals.saturating_add(1);
                    let wait = backoff_delay(
                        self.refusals,
                        self.opts.backoff_base,
                        self.opts.backoff_cap,
                        rand::random::<f64>(),
                    );
                    tracing::warn!(
                        "every unit offered was refused; asking again in {:.1}s (backoff bound {}s)",
                        wait.as_secs_f64(),
                        backoff_bound(self.refusals, self.opts.backoff_base, self.opts.backoff_cap)
                            .as_secs()
                    );
                    self.next_request = Instant::now() + wait;
                }
                Ok(true)
            }
            Ok(other) => {
                tracing::warn!("unexpected answer to a work request: {other:?}");
                self.next_request = Instant::now() + Duration::from_secs(30);
                Ok(true)
            }
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(false)
            }
        }
    }

    /// Start scans on free slots.
    fn start_scans(&mut self) {
        if !self.gate_open() {
            return;
        }
        if self.scans_resume_at.is_some_and(|t| Instant::now() < t) {
            return; // offline: the back-off first
        }
        let slots = self.opts.slots.clamp(1, MAX_SLOTS) as usize;
        let mut running = self.crawling();
        let waiting: Vec<(u64, u64)> = self
            .held
            .iter()
            .filter(|(_, h)| matches!(h.state, HeldState::Waiting))
            .map(|(id, h)| (*id, h.deadline_ms))
            .collect();
        let server_now_ms = (now_ms() as i64 + self.clock_offset_ms).max(0) as u64;
        for unit_id in start_order(waiting, server_now_ms) {
            if running >= slots {
                break;
            }
            let Some(h) = self.held.get_mut(&unit_id) else {
                continue;
            };
            if h.needs_state {
                continue; // its state comes first (`fetch_states`)
            }
            // The unit's checkpoint: its own earlier run, or the state of a
            // continuation unit. A damaged one starts the scan over (a
            // continuation unit fetches its state again).
            let read = self.home.checkpoint(unit_id);
            if let Err(e) = &read {
                tracing::warn!(unit_id, "checkpoint unreadable, not used: {e:#}");
                self.home.remove_checkpoint(unit_id);
            }
            let checkpoint = match start_from(h.unit.unit.resume.is_some(), read) {
                StartFrom::Seed => None,
                StartFrom::Checkpoint(c) => Some(*c),
                StartFrom::FetchState => {
                    tracing::warn!(unit_id, "continuation unit without its state: fetching it");
                    h.needs_state = true;
                    continue;
                }
            };
            let unit = h.unit.unit.clone();
            let spent =
                Duration::from_millis(checkpoint.as_ref().map_or(0, |c| c.summary.elapsed_ms));
            let spec = match crawl_spec(&unit, checkpoint.as_ref().map(|c| c.state.clone()), spent)
            {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.done_tx.try_send(ScanDone {
                        unit_id,
                        result: ScanEnd::Failed(e.to_string()),
                    });
                    h.state = HeldState::Aborted;
                    continue;
                }
            };
            let (pages_before, links_before) = checkpoint
                .as_ref()
                .map_or((0, 0), |c| (c.summary.pages, c.records.len() as u64));
            let cancel = Arc::new(AtomicBool::new(false));
            let hand_over = Arc::new(AtomicBool::new(false));
            let pages = Arc::new(AtomicU64::new(pages_before));
            let links = Arc::new(AtomicU64::new(links_before));
            let slot = Arc::new(CheckpointSlot::new(checkpoint.as_ref()));
            h.state = HeldState::Crawling {
                cancel: cancel.clone(),
                hand_over: hand_over.clone(),
                pages: pages.clone(),
                links: links.clone(),
                last_progress: Instant::now(),
                started: Instant::now(),
                slot: slot.clone(),
            };
            let cfg = self.opts.crawler.clone();
            let hooks = ScanHooks {
                cancel,
                hand_over,
                pages,
                links,
                gate: self.opts.gate.clone(),
                throttle: self.opts.throttle,
                bandwidth: self.bandwidth.clone(),
                slot,
                pages_before,
                links_before,
                home: self.home.clone(),
            };
            let tx = self.done_tx.clone();
            match &checkpoint {
                Some(c) => tracing::info!(
                    unit_id,
                    site = %unit.site,
                    pages_done = c.state.pages_done,
                    queued = c.state.queue.len(),
                    "scan resumed from its checkpoint"
                ),
                None => tracing::info!(unit_id, site = %unit.site, "scan started"),
            }
            tokio::task::spawn_blocking(move || {
                let result = scan(&unit, &spec, &cfg, &hooks);
                let _ = tx.blocking_send(ScanDone { unit_id, result });
            });
            running += 1;
        }
    }

    /// Fetch the state of each continuation unit not started yet, check it
    /// against the unit's signed digest and length, and keep it as the
    /// unit's checkpoint; a state refused gives the unit back (`Fail`).
    /// Returns false when the network failed.
    async fn fetch_states(&mut self) -> Result<bool> {
        let due: Vec<(u64, WorkUnit, ResumeFrom)> = self
            .held
            .iter()
            .filter(|(_, h)| h.needs_state && matches!(h.state, HeldState::Waiting))
            .filter_map(|(id, h)| {
                let unit = h.unit.unit.clone();
                unit.resume.clone().map(|r| (*id, unit, r))
            })
            .collect();
        for (unit_id, unit, resume) in due {
            if self.home.has_checkpoint(unit_id) {
                // Resumed after a restart: its own checkpoint is newer.
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.needs_state = false;
                }
                continue;
            }
            let answer = self.request(&Request::FetchState { unit_id }).await;
            let refused = match state_answer(&unit, &resume, answer) {
                StateAnswer::Use(state) => {
                    let c = Checkpoint {
                        state,
                        records: Vec::new(),
                        summary: Default::default(),
                    };
                    self.home.save_checkpoint(unit_id, &c)?;
                    if let Some(h) = self.held.get_mut(&unit_id) {
                        h.needs_state = false;
                    }
                    tracing::info!(
                        unit_id,
                        pages_done = resume.pages_done,
                        "continuation state fetched"
                    );
                    continue;
                }
                StateAnswer::Drop(reason) => {
                    // The job is over (or the unit no longer this host's):
                    // nothing to give back, nothing to scan.
                    tracing::info!(unit_id, "continuation unit dropped: {reason}");
                    self.held.remove(&unit_id);
                    self.home.remove_unit(unit_id);
                    if reason == ABORT_ROUND_CANCELLED {
                        let of_round = self.units_where_round(unit.round_id);
                        self.drop_cancelled(&of_round);
                    }
                    continue;
                }
                StateAnswer::GiveBack(reason) => reason,
                StateAnswer::Retry(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
                StateAnswer::Fatal(e) => return Err(e).context("the server refused this host"),
            };
            tracing::error!(unit_id, "{refused}");
            self.last_error = Some(format!("unit {unit_id}: {refused}"));
            self.give_back(unit_id, refused).await?;
        }
        Ok(true)
    }

    /// Give a unit back without a result (`Fail`) and forget it.
    async fn give_back(&mut self, unit_id: u64, reason: String) -> Result<()> {
        let req = Request::Fail { unit_id, reason };
        let r = self.request(&req).await;
        // Forgotten either way: unanswered, the unit goes back when the
        // server sees this host no longer holds it.
        self.held.remove(&unit_id);
        self.home.remove_unit(unit_id);
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(())
            }
        }
    }

    /// A scan ended: spool its result (or give the unit back).
    async fn scan_done(&mut self, done: ScanDone) -> Result<()> {
        let Some(h) = self.held.get_mut(&done.unit_id) else {
            return Ok(());
        };
        if matches!(h.state, HeldState::Aborted) {
            self.held.remove(&done.unit_id);
            self.home.remove_unit(done.unit_id);
            return Ok(());
        }
        match done.result {
            ScanEnd::Checkpointed => {
                // Cancelled without an abort: the client stops; it resumes
                // from the checkpoint next time.
                h.state = HeldState::Waiting;
            }
            ScanEnd::Offline => {
                // Nothing lost: the unit waits with its checkpoint, and no
                // scan starts until the back-off has passed.
                h.state = HeldState::Waiting;
                self.offline_stops = self.offline_stops.saturating_add(1);
                let wait = backoff_delay(
                    self.offline_stops,
                    OFFLINE_BACKOFF_BASE,
                    OFFLINE_BACKOFF_CAP,
                    rand::random::<f64>(),
                );
                tracing::warn!(
                    unit_id = done.unit_id,
                    "the site stopped answering (offline?); scans resume in {:.1}s",
                    wait.as_secs_f64()
                );
                self.last_error = Some(format!(
                    "unit {}: the site stopped answering (offline?)",
                    done.unit_id
                ));
                self.scans_resume_at = Some(Instant::now() + wait);
            }
            ScanEnd::Finished(result) if self.stopping => {
                // Finished as the client stops: uploaded next time.
                self.home.save_result(done.unit_id, &result)?;
                self.home.remove_checkpoint(done.unit_id);
                h.state = HeldState::Finished;
            }
            ScanEnd::Failed(_) if self.stopping => h.state = HeldState::Waiting,
            ScanEnd::Finished(result) => {
                let summary = &result.summary;
                self.stats.scans_finished += 1;
                self.offline_stops = 0;
                let took = summary.elapsed_ms as f64 / 1000.0;
                self.job_s = Some(match self.job_s {
                    None => took,
                    Some(a) => a + AVERAGE_WEIGHT * (took - a),
                });
                tracing::info!(
                    unit_id = done.unit_id,
                    pages = summary.pages,
                    links = summary.links,
                    stopped_by = summary.stopped_by.map(|s| s.as_str()).unwrap_or("-"),
                    early = result.state.is_some(),
                    "scan finished"
                );
                self.home.save_result(done.unit_id, &result)?;
                self.home.remove_checkpoint(done.unit_id);
                h.state = HeldState::Finished;
            }
            ScanEnd::Failed(reason) => {
                tracing::warn!(unit_id = done.unit_id, "scan failed: {reason}");
                self.last_error = Some(format!("scan of unit {} failed: {reason}", done.unit_id));
                self.give_back(done.unit_id, reason).await?;
            }
        }
        Ok(())
    }

    /// Stop every scan with a checkpoint: cancel them, give them
    /// [`SHUTDOWN_GRACE`] to reach a page boundary (their threads write the
    /// checkpoint there), and write the newest snapshot of those still in a
    /// request. Nothing here waits for the network.
    async fn stop_scans(&mut self, done_rx: &mut mpsc::Receiver<ScanDone>) {
        self.stopping = true;
        for h in self.held.values() {
            if let HeldState::Crawling { cancel, .. } = &h.state {
                cancel.store(true, Ordering::Relaxed);
            }
        }
        let until = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        while self.crawling() > 0 {
            match tokio::time::timeout_at(until, done_rx.recv()).await {
                Ok(Some(done)) => {
                    let unit_id = done.unit_id;
                    if let Err(e) = self.scan_done(done).await {
                        tracing::warn!(unit_id, "cannot keep the scan's end: {e:#}");
                        if let Some(h) = self.held.get_mut(&unit_id) {
                            h.state = HeldState::Waiting;
                        }
                    }
                }
                _ => break,
            }
        }
        // Scans still in a request: their newest snapshots, written at once
        // on blocking threads (each encodes and fsyncs its own file), while
        // scans that reached their end finish writing theirs; all of it
        // within SHUTDOWN_WRITES.
        let until = tokio::time::Instant::now() + SHUTDOWN_WRITES;
        let mut writers = tokio::task::JoinSet::new();
        for (unit_id, h) in &self.held {
            if let HeldState::Crawling { slot, .. } = &h.state {
                let (unit_id, slot, home) = (*unit_id, slot.clone(), self.home.clone());
                writers.spawn_blocking(move || {
                    let write = |c: &Checkpoint| home.save_checkpoint(unit_id, c);
                    (unit_id, slot.write_latest(&write))
                });
            }
        }
        loop {
            // A scan whose slot is closed is writing its own end.
            let closing = self
                .held
                .values()
                .any(|h| matches!(&h.state, HeldState::Crawling { slot, .. } if slot.is_closed()));
            if writers.is_empty() && !closing {
                break;
            }
            tokio::select! {
                Some(joined) = writers.join_next(), if !writers.is_empty() => match joined {
                    Ok((unit_id, Ok(true))) => tracing::info!(
                        unit_id,
                        "checkpointed at its last snapshot (a request was in flight)"
                    ),
                    Ok((_, Ok(false))) => {}
                    Ok((unit_id, Err(e))) => {
                        tracing::warn!(unit_id, "cannot write a checkpoint: {e:#}")
                    }
                    Err(e) => tracing::warn!("a checkpoint writer failed: {e}"),
                },
                done = done_rx.recv(), if closing => {
                    let Some(done) = done else { break };
                    let unit_id = done.unit_id;
                    if let Err(e) = self.scan_done(done).await {
                        tracing::warn!(unit_id, "cannot keep the scan's end: {e:#}");
                        if let Some(h) = self.held.get_mut(&unit_id) {
                            h.state = HeldState::Waiting;
                        }
                    }
                }
                _ = tokio::time::sleep_until(until) => {
                    tracing::warn!("checkpoints not all written within {SHUTDOWN_WRITES:?}");
                    break;
                }
            }
        }
    }

    /// One pass of talking to the server, when the backoff allows.
    async fn contact(&mut self) -> Result<()> {
        if Instant::now() < self.next_contact {
            return Ok(());
        }
        if !self.upload_finished().await? {
            return Ok(());
        }
        if !self.report_progress().await? {
            return Ok(());
        }
        if !self.fetch_states().await? {
            return Ok(());
        }
        self.fetch_work().await?;
        self.send_benchmark().await;
        Ok(())
    }

    /// Start the reference-site benchmark when due and the client holds no
    /// work (and is not paused), and send its result once in; a failed send
    /// is retried next contact.
    async fn send_benchmark(&mut self) {
        // Never when `--once` is about to exit.
        let exiting = self.opts.once && self.server_idle;
        let idle = self.held.is_empty() && self.gate_open() && !exiting;
        let Some(record) = self
            .bench
            .poll(
                &self.home,
                &self.opts.crawler,
                idle,
                self.opts.throttle,
                self.bandwidth.clone(),
            )
            .await
        else {
            return;
        };
        let req = Request::Benchmark {
            pages_per_s: record.pages_per_s,
            kb_per_s: record.kb_per_s,
            slots: self.opts.slots,
        };
        match self.request(&req).await {
            Ok(Response::Ack) => self.bench.sent(&self.home, &record),
            Ok(other) => {
                // Not retried before next week: the server would answer the same.
                tracing::warn!("benchmark not taken: {other:?}");
                self.bench.sent(&self.home, &record);
            }
            Err(e) => self.net_failed(&e),
        }
    }
}

/// Run the work loop until `shutdown` resolves (or, with `once`, until the
/// server is idle and every result is delivered).
pub async fn run(
    home: Home,
    opts: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<RunStats> {
    let enrolment = home.require_enrolment()?;
    // One runner per home: a second would take over the control socket and
    // share the host key and the spool. Held until this function returns.
    let run_lock = home.lock_runner()?;
    if let Some(pid) = run_lock.stale_pid {
        tracing::info!("taking over the home from pid {pid}, which is no longer running");
    }
    let key = home.host_key(false)?;
    let project_key = enrolment.project_verifying_key()?;
    let server = enrolment.server_id()?;
    let (done_tx, mut done_rx) = mpsc::channel::<ScanDone>(MAX_SPOOLED_UNITS);
    // Adjustable: `beebot config set bandwidth_kbps` reaches running scans.
    let w_bandwidth = Some(Arc::new(Bandwidth::adjustable(opts.bandwidth_kbps)));
    let mut w = Worker {
        home,
        enrolment,
        key,
        project_key,
        server,
        opts,
        held: BTreeMap::new(),
        link: None,
        clock_offset_ms: 0,
        failures: 0,
        refusals: 0,
        next_contact: Instant::now(),
        next_request: Instant::now(),
        server_idle: false,
        stats: RunStats::default(),
        done_tx,
        last_error: None,
        status_written: Instant::now() - Duration::from_secs(60),
        bandwidth: w_bandwidth,
        job_s: None,
        round_trip_s: 0.0,
        bench: Default::default(),
        stopping: false,
        offline_stops: 0,
        scans_resume_at: None,
        hinted_at: None,
    };
    // The control socket, for `beebot pause` / `beebot resume`.
    let control_task = w.opts.gate.clone().map(|gate| {
        let dir = w.home.data.clone();
        tokio::spawn(async move {
            if let Err(e) = control::serve(dir, gate).await {
                tracing::warn!("control socket unavailable: {e:#}");
            }
        })
    });
    // Resume from the spool: units verified again, finished results queued
    // for upload; what a kill left half-written or orphaned swept first.
    w.home.sweep_spool();
    let (units, refused) = w.home.spooled_units(&w.project_key)?;
    for r in refused {
        tracing::error!("refused a spooled unit: {r}");
        w.stats.units_refused += 1;
    }
    for u in units {
        if u.unit.host_id != w.enrolment.host_id {
            w.home.remove_unit(u.unit.unit_id);
            continue;
        }
        let id = u.unit.unit_id;
        let state = if w.home.result(id)?.is_some() {
            HeldState::Finished
        } else {
            HeldState::Waiting
        };
        tracing::info!(
            unit_id = id,
            checkpoint = w.home.has_checkpoint(id),
            "resuming spooled unit"
        );
        let held = Held {
            deadline_ms: w.home.deadline(id).unwrap_or(u.unit.deadline_ms),
            needs_state: u.unit.resume.is_some() && !w.home.has_checkpoint(id),
            unit: u,
            state,
        };
        w.held.insert(id, held);
    }

    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    // A stop (SIGTERM, Ctrl-C) is heard even while a request is in flight.
    let stopped = loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break true,
            r = w.contact() => r?,
        }
        if let Some(s) = w.opts.gate.as_ref().and_then(|g| g.take_settings()) {
            w.apply_settings(&s);
        }
        w.start_scans();
        w.write_status();
        if w.opts.once && w.server_idle && w.held.is_empty() {
            break false;
        }
        tokio::select! {
            biased;
            _ = &mut shutdown => break true,
            r = async {
                match done_rx.recv().await {
                    Some(done) => w.scan_done(done).await,
                    None => Ok(()),
                }
            } => r?,
            _ = tick.tick() => {}
        }
    };
    w.bench.stop();
    if stopped {
        tracing::info!("stopping; scans are checkpointed, unfinished units stay in the spool");
        w.stop_scans(&mut done_rx).await;
    }
    if let Some(l) = w.link.take() {
        l.close();
    }
    if let Some(t) = control_task {
        t.abort();
        let _ = std::fs::remove_file(control::socket_path(&w.home.data));
    }
    let _ = std::fs::remove_file(control::status_path(&w.home.data));
    drop(run_lock);
    Ok(w.stats)
}

/// Join a project with an invite code: make the host key, enrol, save.
///
/// Nothing is written before the server has enrolled this host: the code's
/// checksum is checked before anything is sent, the server must prove it
/// holds the invite's project key (`ProveProject`, checked with the key from
/// the code) before the token is spent, and the host key lives in memory
/// until the enrolment is in. Any failure leaves the home as it was.
pub async fn join(home: &Home, code: &str, name: Option<String>) -> Result<Enrolment> {
    let invite = beebot_shared::invite::Invite::from_code(code)?;
    if invite.expires_ms <= now_ms() {
        bail!("this invite code has expired; ask the admin for a new one");
    }
    if let Some(e) = home.enrolment()? {
        bail!(
            "this client already joined {} as host {} (use another --home, or `beebot leave` first)",
            e.server_addr,
            e.host_id
        );
    }
    let key = sign::generate_key();
    let server = ServerId {
        addr: invite.addr.clone(),
        server_name: invite.server_name.clone(),
        cert_sha256: invite.cert_sha256,
    };
    let name = name.unwrap_or_else(default_host_name);
    let info = beebot_shared::proto::HostInfo {
        name: name.clone(),
        os: std::env::consts::OS.to_string(),
        client_version: env!("CARGO_PKG_VERSION").to_string(),
        cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    };
    let link = Link::connect(&server)
        .await
        .with_context(|| format!("cannot reach the server at {}", invite.addr))?;
    let proven = link
        .proves_project(&invite.project_key)
        .await
        .with_context(|| format!("the server at {} did not prove its project", invite.addr))?;
    if !proven {
        link.close();
        bail!(
            "this invite code does not belong to the server at {}: its project key is not the server's; ask the admin for a new code",
            invite.addr
        );
    }
    let host_id = link
        .enrol(invite.token.clone(), &key, info)
        .await
        .context("enrolment refused")?;
    link.close();
    let e = Enrolment {
        server_addr: invite.addr,
        server_name: invite.server_name,
        cert_sha256: hex::encode(invite.cert_sha256),
        project_key: hex::encode(invite.project_key),
        host_id,
        name,
        joined_ms: now_ms(),
    };
    home.save_joined(&key, &e)?;
    Ok(e)
}

fn default_host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "beebot-host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> WorkUnit {
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

    #[test]
    fn deadlines_follow_the_server_clock_whatever_the_skew() {
        let unit = unit();
        const HOUR_MS: i64 = 3_600_000;
        // offset = server clock − client clock, learned from `Welcome`.
        for skew_hours in [-7i64, -1, 0, 2, 9] {
            let offset = -skew_hours * HOUR_MS;
            let local = local_deadline(unit.deadline_ms, offset);
            let want = UNIX_EPOCH
                + Duration::from_millis((unit.deadline_ms as i64 + skew_hours * HOUR_MS) as u64);
            assert_eq!(local, want, "client clock {skew_hours} h off");
            // The time left is the same on both clocks: ten minutes.
            let issued_local = unit.issued_ms as i64 + skew_hours * HOUR_MS;
            let left = local
                .duration_since(UNIX_EPOCH + Duration::from_millis(issued_local as u64))
                .expect("after issue");
            assert_eq!(left, Duration::from_secs(600));
        }
    }

    #[test]
    fn a_crawl_has_no_deadline_only_the_budget_left() {
        let spec = crawl_spec(&unit(), None, Duration::from_secs(15)).expect("spec");
        assert_eq!(spec.max_duration, Duration::from_secs(45));
        assert!(spec.resume.is_none());
        let spec =
            crawl_spec(&unit(), Some(ScanState::default()), Duration::from_secs(90)).expect("spec");
        assert_eq!(spec.max_duration, Duration::ZERO);
        assert!(spec.resume.is_some());
    }

    #[test]
    fn a_continuation_state_is_checked_against_the_signed_unit() {
        let state = ScanState {
            site: "a.test".into(),
            pages_done: 12,
            queue: vec![beebot_shared::scanstate::QueuedUrl {
                url: "http://a.test/x".into(),
                depth: 1,
            }],
            seen: vec![1, 2, 3],
            robots: Vec::new(),
        };
        let bytes = state.encode().expect("encode");
        let resume = ResumeFrom {
            state_sha256: state_sha256(&bytes),
            state_bytes: bytes.len() as u64,
            pages_done: 12,
        };
        let u = unit();
        assert_eq!(check_state(&u, &resume, &bytes), Ok(state.clone()));
        // Another length, another digest, bytes that do not decode, another site.
        let longer = ResumeFrom {
            state_bytes: resume.state_bytes + 1,
            ..resume.clone()
        };
        assert!(matches!(
            check_state(&u, &longer, &bytes),
            Err(StateRefused::Length { .. })
        ));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            check_state(&u, &resume, &flipped),
            Err(StateRefused::Digest)
        );
        let junk = vec![7u8; 40];
        let junk_resume = ResumeFrom {
            state_sha256: state_sha256(&junk),
            state_bytes: 40,
            pages_done: 0,
        };
        assert!(matches!(
            check_state(&u, &junk_resume, &junk),
            Err(StateRefused::Decode(_))
        ));
        let other = WorkUnit {
            site: "b.test".into(),
            ..u
        };
        assert!(matches!(
            check_state(&other, &resume, &bytes),
            Err(StateRefused::Site { .. })
        ));
    }

    #[test]
    fn a_refused_state_never_holds_the_client() {
        let state = ScanState {
            site: "a.test".into(),
            pages_done: 3,
            ..ScanState::default()
        };
        let bytes = state.encode().expect("encode");
        let resume = ResumeFrom {
            state_sha256: state_sha256(&bytes),
            state_bytes: bytes.len() as u64,
            pages_done: 3,
        };
        let u = unit();
        let ok = state_answer(&u, &resume, Ok(Response::State { bytes }));
        assert!(matches!(ok, StateAnswer::Use(s) if s.pages_done == 3));
        // The job is over: the unit is dropped, not retried.
        for r in [
            Response::Abort {
                reason: "job done".into(),
            },
            Response::Rejected {
                reason: "no such unit".into(),
            },
        ] {
            assert!(matches!(
                state_answer(&u, &resume, Ok(r)),
                StateAnswer::Drop(_)
            ));
        }
        // Refusals of the request (the server before `Abort`, a state gone,
        // a failing store) and a state that does not match: given back.
        for code in [ErrorCode::BadRequest, ErrorCode::Internal] {
            let e = NetError::Refused {
                code,
                message: "no state".into(),
            };
            assert!(matches!(
                state_answer(&u, &resume, Err(e)),
                StateAnswer::GiveBack(_)
            ));
        }
        let wrong = Response::State {
            bytes: vec![1, 2, 3],
        };
        assert!(matches!(
            state_answer(&u, &resume, Ok(wrong)),
            StateAnswer::GiveBack(_)
        ));
        assert!(matches!(
            state_answer(&u, &resume, Ok(Response::Ack)),
            StateAnswer::GiveBack(_)
        ));
        // Only the network backs off; a revoked host stops.
        for e in [NetError::Timeout, NetError::Lost("reset".into())] {
            assert!(matches!(
                state_answer(&u, &resume, Err(e)),
                StateAnswer::Retry(_)
            ));
        }
        let revoked = NetError::Refused {
            code: ErrorCode::Revoked,
            message: String::new(),
        };
        assert!(matches!(
            state_answer(&u, &resume, Err(revoked)),
            StateAnswer::Fatal(_)
        ));
    }

    #[test]
    fn a_continuation_unit_without_its_checkpoint_fetches_its_state() {
        let c = Checkpoint {
            state: ScanState::default(),
            records: Vec::new(),
            summary: Default::default(),
        };
        assert!(matches!(start_from(false, Ok(None)), StartFrom::Seed));
        assert!(matches!(start_from(true, Ok(None)), StartFrom::FetchState));
        assert!(matches!(
            start_from(true, Err(anyhow::anyhow!("damaged"))),
            StartFrom::FetchState
        ));
        assert!(matches!(
            start_from(false, Err(anyhow::anyhow!("damaged"))),
            StartFrom::Seed
        ));
        assert!(matches!(
            start_from(true, Ok(Some(c.clone()))),
            StartFrom::Checkpoint(_)
        ));
        assert!(matches!(
            start_from(false, Ok(Some(c))),
            StartFrom::Checkpoint(_)
        ));
    }

    #[test]
    fn units_past_their_deadline_start_last() {
        let now = 1_700_000_000_000;
        let waiting = vec![(1, now - 1), (2, now + 60_000), (3, now), (4, now + 1)];
        assert_eq!(start_order(waiting, now), vec![2, 4, 1, 3]);
        // Nothing else waits: an expired unit still starts.
        assert_eq!(start_order(vec![(5, now - 10)], now), vec![5]);
    }
}
