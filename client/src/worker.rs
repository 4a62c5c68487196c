//! The work loop of `beebot run`: keep a buffer of signed units, crawl up to
//! `slots` of them at once on threads, spool each result, upload it until the
//! server acknowledges it, and report progress. Network trouble never stops
//! the scans in hand: the loop reconnects with exponential backoff and full
//! jitter, honouring the server's `retry_after`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::mpsc;
use url::Url;

use beebot_shared::limits::{MAX_RETRY_AFTER_SECS, MAX_SLOTS};
use beebot_shared::linkfile::{self, LinkFileHeader, ScanSummary, LINK_FILE_VERSION};
use beebot_shared::proto::{Request, Response};
use beebot_shared::sign::{self, WorkUnit};

use crate::control::{self, Gate, Hold, LiveStatus, ScanStatus};
use crate::crawler::{self, CrawlSpec, CrawlerConfig};
use crate::home::{Enrolment, Home, SpooledUnit, MAX_SPOOLED_UNITS};
use crate::net::{Link, NetError, ServerId};

/// Settings of the work loop.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Exit once the server has no more work and every result is delivered.
    pub once: bool,
    /// Sites scanned at once.
    pub slots: u32,
    /// Seconds of work to hold beyond the running scans (BOINC's buffer).
    pub buffer_seconds: u64,
    /// Backoff bounds for reconnecting.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How often a running unit reports progress.
    pub progress_interval: Duration,
    pub crawler: CrawlerConfig,
    /// Holds scans while paused or outside the time window (`None`: always run).
    /// With a gate, the control socket for `beebot pause`/`resume` is served.
    pub gate: Option<Arc<Gate>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            once: false,
            slots: 2,
            buffer_seconds: 600,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(300),
            progress_interval: Duration::from_secs(10),
            crawler: CrawlerConfig::default(),
            gate: None,
        }
    }
}

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

/// Exponential backoff with full jitter: a random wait in `[0, min(cap, base·2^n)]`.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration, unit_random: f64) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(20));
    let bound = exp.min(cap);
    bound.mul_f64(unit_random.clamp(0.0, 1.0))
}

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
}

enum HeldState {
    Waiting,
    Crawling {
        cancel: Arc<AtomicBool>,
        pages: Arc<AtomicU64>,
        links: Arc<AtomicU64>,
        last_progress: Instant,
        started: Instant,
    },
    /// Result spooled, waiting for the server's acknowledgement.
    Finished,
    /// The server said stop: drop it when its scan returns.
    Aborted,
}

/// A scan's end, sent from the crawl thread.
struct ScanDone {
    unit_id: u64,
    result: Result<(Vec<u8>, ScanSummary), String>,
}

/// Build the crawl of a unit. `clock_offset_ms` = server time − local time.
pub fn crawl_spec(unit: &WorkUnit, clock_offset_ms: i64) -> Result<CrawlSpec> {
    let seed = Url::parse(&unit.seed_url).context("unit has a bad seed URL")?;
    let local_deadline_ms = (unit.deadline_ms as i64 - clock_offset_ms).max(0) as u64;
    Ok(CrawlSpec {
        site: unit.site.clone(),
        seed,
        scope: unit.scope,
        max_pages: unit.limits.max_pages,
        max_depth: unit.limits.max_depth,
        delay: Duration::from_millis(unit.limits.delay_ms),
        max_page_bytes: unit.limits.max_page_bytes,
        max_duration: Duration::from_secs(unit.limits.max_seconds),
        deadline: Some(UNIX_EPOCH + Duration::from_millis(local_deadline_ms)),
        user_agent: unit.user_agent.clone(),
    })
}

/// Run a unit's scan and encode its link file (blocking).
fn scan(
    unit: &WorkUnit,
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &AtomicBool,
    pages: &AtomicU64,
    links: &AtomicU64,
    gate: Option<&Gate>,
) -> Result<(Vec<u8>, ScanSummary), String> {
    let out = crawler::crawl(spec, cfg, cancel, &mut |p, l| {
        pages.store(p, Ordering::Relaxed);
        links.store(l, Ordering::Relaxed);
        // A page boundary: hold here while paused or outside the window.
        if let Some(g) = gate {
            g.wait_open(cancel);
        }
    });
    let mut summary = out.summary;
    summary.links = out.records.len() as u64;
    let header = LinkFileHeader {
        format_version: LINK_FILE_VERSION,
        round_id: unit.round_id,
        unit_id: unit.unit_id,
        site: unit.site.clone(),
        pages: summary.pages,
        records: out.records.len() as u64,
    };
    let bytes = linkfile::encode(&header, &out.records).map_err(|e| e.to_string())?;
    Ok((bytes, summary))
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
    next_contact: Instant,
    next_request: Instant,
    server_idle: bool,
    stats: RunStats,
    done_tx: mpsc::Sender<ScanDone>,
    last_error: Option<String>,
    status_written: Instant,
}

impl Worker {
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
                    })
                }
                _ => None,
            })
            .collect();
        let s = LiveStatus {
            pid: std::process::id(),
            updated_ms: control::unix_ms(now),
            state: state.into(),
            until_ms: until.map(control::unix_ms),
            scans,
            today_pages: self.stats.pages,
            today_links: self.stats.links,
            today_results: self.stats.uploads_accepted,
            pending_uploads: self
                .held
                .values()
                .filter(|h| matches!(h.state, HeldState::Finished))
                .count() as u64,
            last_error: self.last_error.clone(),
        };
        control::write_status(&self.home.data, &s);
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
        if let Response::Welcome { server_time_ms, .. } =
            link.hello(self.enrolment.host_id, &self.key).await?
        {
            self.clock_offset_ms = server_time_ms as i64 - now_ms() as i64;
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
        let r = link.request(req).await;
        if r.is_ok() {
            self.failures = 0;
        }
        r
    }

    /// Upload every finished result. Returns false when the network failed.
    async fn upload_finished(&mut self) -> Result<bool> {
        let ids: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| matches!(h.state, HeldState::Finished))
            .map(|(id, _)| *id)
            .collect();
        for unit_id in ids {
            let Some((link_file, summary)) = self.home.result(unit_id)? else {
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
            };
            match self.request(&req).await {
                Ok(Response::Accepted) => {
                    self.stats.uploads_accepted += 1;
                    self.stats.pages += pages;
                    self.stats.links += links;
                    tracing::info!(unit_id, pages, links, "result accepted");
                }
                Ok(Response::Duplicate) => {
                    self.stats.uploads_duplicate += 1;
                    tracing::info!(unit_id, "result was a duplicate (job finished elsewhere)");
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
                Ok(Response::Abort { reason }) => {
                    tracing::info!(unit_id, "server aborted the scan: {reason}");
                    if let HeldState::Crawling { cancel, .. } = &h.state {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    h.state = HeldState::Aborted;
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
        let slots = self.opts.slots.clamp(1, MAX_SLOTS);
        // Hold one unit in reserve per slot, so no slot idles for a round trip.
        let target = (slots as usize) * 2;
        let unfinished = self
            .held
            .values()
            .filter(|h| matches!(h.state, HeldState::Waiting | HeldState::Crawling { .. }))
            .count();
        if unfinished >= target
            || self.held.len() >= MAX_SPOOLED_UNITS
            || Instant::now() < self.next_request
        {
            return Ok(true);
        }
        if !self.gate_open() {
            return Ok(true);
        }
        let free_slots = (target - unfinished) as u32;
        // Near the end of a window, ask only for work that fits in it.
        let want_seconds = match self.opts.gate.as_ref().and_then(|g| g.seconds_left_open()) {
            Some(left) => self.opts.buffer_seconds.min(left),
            None => self.opts.buffer_seconds,
        };
        let req = Request::RequestWork {
            want_seconds,
            free_slots,
            units_held: self.units_held(),
        };
        match self.request(&req).await {
            Ok(Response::Work {
                units,
                retry_after_s,
                rounds_open,
            }) => {
                self.server_idle = units.is_empty() && !rounds_open;
                if units.is_empty() {
                    let wait = retry_after_s.unwrap_or(30).min(MAX_RETRY_AFTER_SECS);
                    // A little jitter so hosts do not ask in lockstep.
                    let jitter = 1.0 + rand::random::<f64>() * 0.2;
                    self.next_request = Instant::now() + Duration::from_secs(wait).mul_f64(jitter);
                }
                for signed in units {
                    match sign::verify_unit(&self.project_key, &signed) {
                        Ok(unit) if unit.host_id == self.enrolment.host_id => {
                            let s = SpooledUnit { signed, unit };
                            self.home.spool_unit(&s)?;
                            self.stats.units_received += 1;
                            self.held.insert(
                                s.unit.unit_id,
                                Held {
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
        let slots = self.opts.slots.clamp(1, MAX_SLOTS) as usize;
        let mut running = self.crawling();
        let waiting: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| matches!(h.state, HeldState::Waiting))
            .map(|(id, _)| *id)
            .collect();
        for unit_id in waiting {
            if running >= slots {
                break;
            }
            let Some(h) = self.held.get_mut(&unit_id) else {
                continue;
            };
            let unit = h.unit.unit.clone();
            let spec = match crawl_spec(&unit, self.clock_offset_ms) {
                Ok(s) => s,
                Err(e) => {
                    let _ = self.done_tx.try_send(ScanDone {
                        unit_id,
                        result: Err(e.to_string()),
                    });
                    h.state = HeldState::Aborted;
                    continue;
                }
            };
            let cancel = Arc::new(AtomicBool::new(false));
            let pages = Arc::new(AtomicU64::new(0));
            let links = Arc::new(AtomicU64::new(0));
            h.state = HeldState::Crawling {
                cancel: cancel.clone(),
                pages: pages.clone(),
                links: links.clone(),
                last_progress: Instant::now(),
                started: Instant::now(),
            };
            let cfg = self.opts.crawler.clone();
            let gate = self.opts.gate.clone();
            let tx = self.done_tx.clone();
            tracing::info!(unit_id, site = %unit.site, "scan started");
            tokio::task::spawn_blocking(move || {
                let result = scan(&unit, &spec, &cfg, &cancel, &pages, &links, gate.as_deref());
                let _ = tx.blocking_send(ScanDone { unit_id, result });
            });
            running += 1;
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
            Ok((bytes, summary)) => {
                self.stats.scans_finished += 1;
                tracing::info!(
                    unit_id = done.unit_id,
                    pages = summary.pages,
                    links = summary.links,
                    stopped_by = summary.stopped_by.map(|s| s.as_str()).unwrap_or("-"),
                    "scan finished"
                );
                self.home.save_result(done.unit_id, &bytes, &summary)?;
                h.state = HeldState::Finished;
            }
            Err(reason) => {
                tracing::warn!(unit_id = done.unit_id, "scan failed: {reason}");
                self.last_error = Some(format!("scan of unit {} failed: {reason}", done.unit_id));
                let req = Request::Fail {
                    unit_id: done.unit_id,
                    reason,
                };
                match self.request(&req).await {
                    Ok(_) => {
                        self.held.remove(&done.unit_id);
                        self.home.remove_unit(done.unit_id);
                    }
                    Err(e) if e.is_permanent() => {
                        return Err(e).context("the server refused this host")
                    }
                    Err(e) => {
                        // Keep it: the unit goes back when the server sees we no longer hold it.
                        self.held.remove(&done.unit_id);
                        self.home.remove_unit(done.unit_id);
                        self.net_failed(&e);
                    }
                }
            }
        }
        Ok(())
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
        self.fetch_work().await?;
        Ok(())
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
    let key = home.host_key(false)?;
    let project_key = enrolment.project_verifying_key()?;
    let server = ServerId {
        addr: enrolment.server_addr.clone(),
        server_name: enrolment.server_name.clone(),
        cert_sha256: enrolment.cert_fingerprint()?,
    };
    let (done_tx, mut done_rx) = mpsc::channel::<ScanDone>(MAX_SPOOLED_UNITS);
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
        next_contact: Instant::now(),
        next_request: Instant::now(),
        server_idle: false,
        stats: RunStats::default(),
        done_tx,
        last_error: None,
        status_written: Instant::now() - Duration::from_secs(60),
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
    // Resume from the spool: units verified again, finished results queued for upload.
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
        let state = if w.home.result(u.unit.unit_id)?.is_some() {
            HeldState::Finished
        } else {
            HeldState::Waiting
        };
        if !w.held.is_empty() || matches!(state, HeldState::Waiting | HeldState::Finished) {
            tracing::info!(unit_id = u.unit.unit_id, "resuming spooled unit");
        }
        w.held.insert(u.unit.unit_id, Held { unit: u, state });
    }

    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        w.contact().await?;
        w.start_scans();
        w.write_status();
        if w.opts.once && w.server_idle && w.held.is_empty() {
            break;
        }
        tokio::select! {
            _ = &mut shutdown => {
                tracing::info!("stopping; unfinished units stay in the spool");
                for h in w.held.values() {
                    if let HeldState::Crawling { cancel, .. } = &h.state {
                        cancel.store(true, Ordering::Relaxed);
                    }
                }
                break;
            }
            Some(done) = done_rx.recv() => w.scan_done(done).await?,
            _ = tick.tick() => {}
        }
    }
    if let Some(l) = w.link.take() {
        l.close();
    }
    if let Some(t) = control_task {
        t.abort();
        let _ = std::fs::remove_file(control::socket_path(&w.home.data));
    }
    let _ = std::fs::remove_file(control::status_path(&w.home.data));
    Ok(w.stats)
}

/// Join a project with an invite code: make the host key, enrol, save.
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
    let key = home.host_key(true)?;
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
        .context("cannot reach the server")?;
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
    home.save_enrolment(&e)?;
    Ok(e)
}

/// Leave the project: tell the server (its held units go back to the queue at
/// once), then remove the host key, enrolment and spool. With `force`, an
/// unreachable server does not stop the local clean-up.
pub async fn leave(home: &Home, force: bool) -> Result<()> {
    let enrolment = home.require_enrolment()?;
    let told = async {
        let key = home.host_key(false)?;
        let server = ServerId {
            addr: enrolment.server_addr.clone(),
            server_name: enrolment.server_name.clone(),
            cert_sha256: enrolment.cert_fingerprint()?,
        };
        let link = Link::connect(&server).await?;
        link.hello(enrolment.host_id, &key).await?;
        link.request(&Request::Leave).await?;
        link.close();
        anyhow::Ok(())
    }
    .await;
    match told {
        Ok(()) => {}
        Err(e) if force => tracing::warn!("could not tell the server ({e:#}); leaving anyway"),
        Err(e) => {
            return Err(e).context(
                "could not tell the server; nothing was removed (use --force to leave anyway)",
            )
        }
    }
    home.wipe()
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

    #[test]
    fn backoff_is_bounded_and_grows() {
        let base = Duration::from_secs(1);
        let cap = Duration::from_secs(60);
        assert_eq!(backoff_delay(0, base, cap, 1.0), Duration::from_secs(1));
        assert_eq!(backoff_delay(3, base, cap, 1.0), Duration::from_secs(8));
        assert_eq!(backoff_delay(30, base, cap, 1.0), cap);
        assert_eq!(backoff_delay(5, base, cap, 0.0), Duration::ZERO);
        assert!(backoff_delay(5, base, cap, 0.5) <= Duration::from_secs(16));
    }
}
