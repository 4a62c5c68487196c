//! BeeBot grid server library: the QUIC endpoint ([`net`]), the grid state
//! machine ([`grid`]) over the [`store`], the pure [`scheduler`], the admin
//! HTTP API ([`admin`]). `main.rs` is the CLI over these. The synthetic
//! web is in the `beebot-testkit` package; the demo, the load generator and
//! the crawler bench are in `beebot-tools`.
//!
//! This module holds what the running server shares ([`Shared`]: the grid
//! behind one lock, reached through [`Shared::with_grid`], which makes every
//! store write durable before it returns) and [`Server`], bound by
//! [`Server::bind`] and served by [`Server::run`]: the QUIC endpoint, the
//! admin API, the reference site and the ticker, stopped together.
//! `serve.json` is written when serving starts and removed at shutdown. It never parses command
//! lines: `main.rs` does.
//!
//! `GridStage`: the grid's own thread runs every `with_grid` call in turn and
//! hands their answers over after each stretch (at most `GRID_STRETCH`, 5 ms,
//! while calls are queued). A second thread syncs the store once for every
//! answer waiting and only then delivers them, then removes the link files
//! those calls stopped naming and closes the rounds that ended, in that order.
//! Its queues are bounded by what may ask (admission's connections × streams).
//! So an answer leaves only after the sync it depends on; a link file goes only
//! after the record that stopped naming it is durable (never after a failed
//! sync: its bytes stay, unnamed); the grid never waits for a disk or a lock;
//! and a panic in a call is raised in its caller.

pub mod about;
pub mod admin;
pub mod api;
pub mod cli_util;
pub mod config;
pub mod damage;
pub mod dashboard;
pub mod durations;
pub mod export;
pub mod grid;
mod hostcheck;
pub mod metrics;
pub mod model;
pub mod net;
pub mod params;
#[cfg(test)]
mod refdocs;
pub mod reference;
pub mod scheduler;
pub mod simulate;
pub mod store;
pub mod validate;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::config::{DataDir, Runtime, ServerConfig};
use crate::grid::{Grid, GridIo, GridSettings, ProjectSigner};

/// How often deadlines are checked.
const TICK_INTERVAL: Duration = Duration::from_secs(1);

/// How often a server whose store failed tries whether its disk takes
/// writes again ([`store_writable_again`]).
pub const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// Bytes the probe writes and syncs beside the store: room for the
/// store's next log segments and a few results, not just one block.
pub const STORE_PROBE_BYTES: usize = 4 << 20;

/// How [`Server::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Its `shutdown` future resolved.
    Stopped,
    /// The store had failed (fail-stop) and its disk takes writes again:
    /// the caller starts the server afresh, from what the store holds
    /// durably. The process is not trusted to go on in place: after a
    /// failed write or fsync what its memory holds may be ahead of the
    /// disk, and what the kernel kept of the failed writes is unknown.
    StoreWritable,
}

/// Whether the disk of the store in `store_dir` takes writes again: a
/// probe file of [`STORE_PROBE_BYTES`] is written, synced and removed.
pub fn store_writable_again(store_dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let probe = store_dir.join(".space-probe");
    let written = (|| {
        let mut f = std::fs::File::create(&probe)?;
        f.write_all(&vec![0u8; STORE_PROBE_BYTES])?;
        f.sync_all()
    })();
    let removed = std::fs::remove_file(&probe);
    written?;
    removed
}

pub use beebot_shared::clock::now_ms;

/// What the QUIC and admin layers share: the grid behind one lock, and the
/// server's identity.
pub struct Shared {
    /// The grid's own thread takes the work of [`Shared::with_grid`] from
    /// here ([`GridStage`]).
    grid: std::sync::mpsc::Sender<GridJob>,
    pub cert_fingerprint: [u8; 32],
    /// The grid's signer, to answer `ProveProject` (a joining client's check)
    /// without the grid lock or a store sync (anyone may ask,
    /// unauthenticated), and to sign the units a work request got outside
    /// the grid's thread ([`Shared::sign_work`]).
    enrol_key: Arc<dyn ProjectSigner>,
    pub reference_site: String,
    pub config: ServerConfig,
    pub data: DataDir,
    pub admin_token: String,
    /// `host:port` clients reach the server at (port filled in when configured as 0).
    pub public_addr: String,
    /// A handle to the grid's store, with flushes deferred: [`Shared::with_grid`]
    /// syncs it after releasing the grid lock (group commit).
    store: store::SharedStore,
    /// Units with an upload being verified or written: one at a time each.
    uploads: Arc<UploadsInFlight>,
    /// [`Grid::rounds_changed`] as last seen by [`Shared::with_grid`]: each
    /// authenticated connection watches it and pushes `WorkAvailable` when it
    /// changes, so hosts ask at once (for a new round's work, or to hear
    /// which units of a cancelled round to drop).
    pub work_hint: tokio::sync::watch::Sender<u64>,
    /// The User-Agent the crawlers send (links to the about page).
    pub user_agent: String,
    /// The about page the reference site serves at `/about`, rendered again
    /// by [`Shared::refresh_about`] when what it shows changes.
    pub about_page: tokio::sync::watch::Sender<Arc<String>>,
    /// The snapshot `about_page` was rendered from.
    about_shown: Mutex<Option<about::AboutInfo>>,
    /// What the dashboard shows that the store does not: liveness, series.
    pub live: Arc<dashboard::live::Live>,
    /// The server's Prometheus metrics (`GET /metrics`).
    pub metrics: Arc<metrics::Metrics>,
    /// Done sites whose kept link files cannot be read whole.
    pub damage: Arc<damage::Damage>,
}

impl Shared {
    /// Read the kept link files of every done site of round `round` (every
    /// round when `None`), off the grid's thread and lock, one round at a
    /// time; the damaged sites found replace those known of each round.
    pub async fn check_links(self: &Arc<Self>, round: Option<u64>) -> api::CheckReport {
        let ids: Vec<u64> = match round {
            Some(id) => vec![id],
            None => {
                self.with_grid(|g| g.rounds().iter().map(|r| r.id).collect::<Vec<u64>>())
                    .await
            }
        };
        let mut report = api::CheckReport::default();
        for id in ids {
            let Ok((over, jobs, files)) = self
                .with_grid(move |g| {
                    g.round(id).map(|(r, j)| {
                        (
                            r.state != model::RoundState::Running,
                            j,
                            g.link_files_shared(),
                        )
                    })
                })
                .await
            else {
                continue;
            };
            // A round over is compacted after its check, if it was not
            // when it ended (the server stopped first).
            let checked = tokio::task::spawn_blocking(move || {
                let checked = damage::check_round(files.as_ref(), id, &jobs);
                if over {
                    files.compact_ended(id);
                }
                checked
            })
            .await;
            let Ok((read, damaged)) = checked else {
                continue;
            };
            for d in &damaged {
                tracing::warn!(round = id, site = %d.site, why = %d.why, "damaged result");
            }
            self.damage.checked(id, &damaged);
            report.rounds += 1;
            report.sites_read += read;
            report.damaged.extend(damaged);
        }
        self.metrics.set_damaged_sites(self.damage.count());
        report
    }
}

/// The units with an upload being verified or written.
#[derive(Default)]
pub struct UploadsInFlight(Mutex<HashSet<u64>>);

impl UploadsInFlight {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take `unit_id`'s slot; `None` while another upload of it is in flight.
    pub fn take(self: &Arc<Self>, unit_id: u64) -> Option<UploadSlot> {
        self.set().insert(unit_id).then(|| UploadSlot {
            uploads: self.clone(),
            unit_id,
        })
    }

    /// Units with an upload in flight now.
    pub fn len(&self) -> usize {
        self.set().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A unit's upload in flight: while it lives, another upload of the unit is
/// answered at once without being decoded. Dropped on every path (answer,
/// refusal, error, panic, a cancelled request), which frees the unit.
pub struct UploadSlot {
    uploads: Arc<UploadsInFlight>,
    unit_id: u64,
}

impl Drop for UploadSlot {
    fn drop(&mut self) {
        self.uploads.set().remove(&self.unit_id);
    }
}

impl Shared {
    /// The project key's enrolment proof over a joining client's nonce and
    /// this server's certificate ([`beebot_shared::sign::make_enrol_proof`]).
    pub fn enrol_proof(&self, client_nonce: &[u8; 32]) -> Vec<u8> {
        self.enrol_key
            .enrol_proof(client_nonce, &self.cert_fingerprint)
    }

    /// A work reply's units signed with the project key, on the caller's
    /// thread: the grid's thread only decides and records them.
    pub fn sign_work(
        &self,
        reply: grid::WorkReply<beebot_shared::sign::UnitBytes>,
    ) -> grid::WorkReply {
        reply.sign(&*self.enrol_key)
    }

    /// Take `unit_id`'s upload slot; `None` while another upload of it is
    /// in flight.
    pub fn upload_slot(&self, unit_id: u64) -> Option<UploadSlot> {
        self.uploads.take(unit_id)
    }
}

/// Makes every store write so far durable ([`store::Store::sync`]).
type SyncStore = Box<dyn FnMut() -> Result<(), store::StoreError> + Send>;

/// One call of [`Shared::with_grid`] on the grid's thread: it runs on the
/// grid and gives back what delivers its answer once the store is synced.
type GridJob = Box<dyn FnOnce(&mut Grid) -> Deliver + Send>;
/// Sends one answer (run after the sync its writes need).
type Deliver = Box<dyn FnOnce() + Send>;
/// What one stretch of the grid's thread hands to the sync: its answers,
/// and the link files its calls stopped naming and the rounds that ended
/// (applied after the sync).
struct Stretch {
    answers: Vec<Deliver>,
    links: grid::LinkChanges,
}

/// Longest the grid's thread runs calls before it hands their answers to
/// the sync: under load, calls that queued meanwhile share one sync (one
/// fsync a stretch, not one a call), and no answer waits longer than this
/// for the calls after it.
pub const GRID_STRETCH: std::time::Duration = std::time::Duration::from_millis(5);

/// The grid's two threads. `grid` owns the [`Grid`] and runs the calls of
/// [`Shared::with_grid`] one after another, handing each call's writes to
/// the store in the order the grid made them ([`Grid::take_writes`]): while
/// calls are queued, for at most [`GRID_STRETCH`], then it hands the
/// stretch's answers to `grid-sync`. That one takes every answer waiting, makes the store's
/// writes so far durable (one fsync for all of them: group commit), and
/// only then delivers them, then removes the link files the stretch's
/// calls stopped naming and closes the rounds that ended
/// ([`Grid::take_link_changes`]). So the grid never
/// waits for a disk, a call never waits for a lock or a blocking thread, no
/// answer leaves before the writes it depends on are durable, and no file
/// goes before the record that stopped naming it is durable.
///
/// The queues hold one call per request being answered, so they are bound
/// by what may ask: QUIC requests by admission (`MAX_CONNECTIONS` ×
/// `MAX_STREAMS_PER_CONNECTION`), the admin API and the ticker by their
/// callers.
struct GridStage;

impl GridStage {
    /// Start both threads; returns where `with_grid` sends its calls. They
    /// end when every sender is gone.
    fn start(
        mut grid: Grid,
        store: store::SharedStore,
        mut sync: SyncStore,
        work_hint: tokio::sync::watch::Sender<u64>,
        metrics: Arc<metrics::Metrics>,
        live: Arc<dashboard::live::Live>,
    ) -> std::io::Result<std::sync::mpsc::Sender<GridJob>> {
        let (jobs, rx) = std::sync::mpsc::channel::<GridJob>();
        let (to_sync, synced) = std::sync::mpsc::channel::<Stretch>();
        let links = grid.link_files_shared();
        std::thread::Builder::new()
            .name("grid".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let stretch = std::time::Instant::now();
                    let mut answers = Vec::new();
                    let mut next = Some(first);
                    while let Some(job) = next {
                        let started = std::time::Instant::now();
                        answers.push(job(&mut grid));
                        // A write that fails stops the store (fail-stop):
                        // no answer is acknowledged from then on, and the
                        // restart reloads what the disk holds.
                        let _ = store.apply(&grid.take_writes());
                        metrics.lock_held(started.elapsed());
                        next = if stretch.elapsed() < GRID_STRETCH {
                            rx.try_recv().ok()
                        } else {
                            None
                        };
                    }
                    let now = grid.rounds_changed();
                    work_hint.send_if_modified(|seen| {
                        let changed = *seen != now;
                        *seen = now;
                        changed
                    });
                    let links = grid.take_link_changes();
                    if to_sync.send(Stretch { answers, links }).is_err() {
                        break;
                    }
                }
            })?;
        std::thread::Builder::new()
            .name("grid-sync".into())
            .spawn(move || {
                while let Ok(mut stretch) = synced.recv() {
                    // Every stretch that queued meanwhile rides on this sync.
                    for more in synced.try_iter() {
                        stretch.answers.extend(more.answers);
                        stretch.links.extend(more.links);
                    }
                    let durable = sync().is_ok();
                    if durable {
                        live.beat(dashboard::live::Component::Store, now_ms());
                    }
                    for deliver in stretch.answers {
                        deliver();
                    }
                    if durable {
                        stretch.links.apply(links.as_ref());
                    } else {
                        // The files stay: their records may still name
                        // them after a restart (their bytes stay unnamed
                        // if not: packs are never compacted).
                        stretch.links.close_rounds(links.as_ref());
                    }
                }
            })?;
        Ok(jobs)
    }
}

/// Run `f` on the grid's thread ([`GridStage`]) and wait for its answer,
/// delivered once the store is synced; a panic in `f` comes back as `Err`.
async fn on_grid<T: Send + 'static>(
    jobs: &std::sync::mpsc::Sender<GridJob>,
    f: impl FnOnce(&mut Grid) -> T + Send + 'static,
) -> std::thread::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: GridJob = Box::new(move |g: &mut Grid| {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(g)));
        Box::new(move || {
            let _ = tx.send(out);
        })
    });
    if jobs.send(job).is_err() {
        panic!("the grid's thread is gone");
    }
    rx.await
        .unwrap_or_else(|_| panic!("the grid's thread is gone"))
}

impl Shared {
    /// Run `f` on the grid (on its own thread, after the calls before it),
    /// then make every store write so far durable before returning (one
    /// fsync shared by every call that waited: see [`GridStage`]). A failed
    /// sync is remembered: see [`Shared::store_failure`]. A panic in `f`
    /// is raised again here.
    pub async fn with_grid<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Grid) -> T + Send + 'static,
    ) -> T {
        match on_grid(&self.grid, f).await {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Shared {
    /// Render the about page again if the rounds in effect changed (a
    /// snapshot of a few fields under the grid lock; rendering outside it).
    pub async fn refresh_about(self: &Arc<Self>) {
        let s = self.clone();
        let info = self
            .with_grid(move |g| about::AboutInfo::of(&s.config, &s.user_agent, g))
            .await;
        let mut shown = self.about_shown.lock().unwrap_or_else(|p| p.into_inner());
        about::publish(&self.about_page, &mut shown, info);
    }
}

impl Shared {
    /// The storage error that stopped the store, if any: then nothing may be
    /// acknowledged until the server starts afresh ([`RunEnd::StoreWritable`]).
    pub fn store_failure(&self) -> Option<String> {
        self.store.failure()
    }

    /// Make an invite for `uses` hosts valid `expires_s` seconds; returns the code
    /// and its expiry (Unix ms).
    pub async fn make_invite(
        self: &Arc<Self>,
        uses: u32,
        expires_s: u64,
    ) -> Result<(String, u64), grid::GridError> {
        let now = now_ms();
        let expires_ms = now.saturating_add(expires_s.saturating_mul(1000));
        let (token, key) = self
            .with_grid(move |g| {
                g.create_invite(uses, expires_ms, now)
                    .map(|t| (t, g.project_public_key()))
            })
            .await?;
        let inv = beebot_shared::invite::Invite {
            addr: self.public_addr.clone(),
            server_name: self.config.server_name.clone(),
            cert_sha256: self.cert_fingerprint,
            project_key: key,
            token,
            expires_ms,
        };
        Ok((inv.to_code(), expires_ms))
    }
}

/// A server that is bound and ready; [`Server::run`] serves it.
pub struct Server {
    shared: Arc<Shared>,
    endpoint: quinn::Endpoint,
    admin: tokio::net::TcpListener,
    /// The reference site's listener, when this server serves it.
    reference: Option<tokio::net::TcpListener>,
    /// The `metrics_listen` listener, when configured.
    metrics: Option<tokio::net::TcpListener>,
    runtime: Runtime,
}

impl Server {
    /// Open the data dir and bind the QUIC and admin addresses.
    pub async fn bind(dir: DataDir) -> Result<Server> {
        let config = dir.load_config()?;
        let key = dir.load_project_key()?;
        let token = dir.load_admin_token()?;
        let (certs, cert_key) = net::load_cert(&dir.cert(), &dir.cert_key())?;
        let fingerprint = net::cert_fingerprint(&certs);
        let store = store::open(&dir.store())
            .map_err(|e| anyhow::anyhow!(store::open_failure(&dir.store(), &e)))?;
        let reference = bind_reference(&config.reference_listen).await?;
        let reference_addr = reference.as_ref().map(|l| l.local_addr()).transpose()?;
        // The User-Agent links to the about page served beside the reference site.
        let user_agent = config.user_agent(&config.about_link(&config.public_addr, reference_addr));
        let settings = GridSettings {
            user_agent: user_agent.clone(),
            deadline_slack: config.deadline_slack,
            deadline_grace_s: config.deadline_grace_s,
            trust_after: config.validation.trust_after,
            spot_check_percent: config.validation.spot_check_percent,
        };
        let store_handle = store.clone();
        store_handle.defer_flushes();
        let metrics = Arc::new(metrics::Metrics::new(now_ms()));
        store_handle.observe_syncs(metrics.clone());
        let links = grid::LinkPacks::writer(dir.links()).observed(metrics.link_syncs());
        let records = store::records(&*store)?;
        let grid = Grid::open(records, GridIo::server(links, key), settings)?;
        let enrol_key = grid.signer();
        let endpoint = bind_quic(&config.listen, certs, cert_key)?;
        let quic_addr = endpoint.local_addr()?;
        let admin = bind_admin(&config.admin_listen).await?;
        let admin_addr = admin.local_addr()?;
        let metrics_listener = bind_metrics(&config.metrics_listen).await?;
        let metrics_addr = metrics_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?;
        let public_addr = public_addr(&config.public_addr, quic_addr.port());
        let reference_site =
            config::reference_url(&config.reference_site, &public_addr, reference_addr);
        let about = about::AboutInfo::of(&config, &user_agent, &grid);
        let about_page = tokio::sync::watch::Sender::new(Arc::new(about::render(&about)));
        let runtime = Runtime {
            quic_addr,
            admin_addr,
            reference_addr,
            metrics_addr,
            public_addr: public_addr.clone(),
            pid: std::process::id(),
        };
        let work_hint = tokio::sync::watch::Sender::new(0);
        let live = Arc::new(dashboard::live::Live::new(now_ms(), reference_addr));
        let syncing = store_handle.clone();
        let grid = GridStage::start(
            grid,
            store_handle.clone(),
            Box::new(move || syncing.sync()),
            work_hint.clone(),
            metrics.clone(),
            live.clone(),
        )
        .context("cannot start the grid's threads")?;
        let shared = Arc::new(Shared {
            grid,
            cert_fingerprint: fingerprint,
            enrol_key,
            reference_site,
            config,
            data: dir,
            admin_token: token,
            public_addr,
            store: store_handle,
            uploads: Arc::default(),
            work_hint,
            user_agent,
            about_page,
            about_shown: Mutex::new(Some(about)),
            live,
            metrics,
            damage: Arc::default(),
        });
        Ok(Server {
            shared,
            endpoint,
            admin,
            reference,
            metrics: metrics_listener,
            runtime,
        })
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Serve until `shutdown` resolves, or until the store, failed, can
    /// be written again ([`RunEnd`]); writes `serve.json` while running.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<RunEnd> {
        let Server {
            shared,
            endpoint,
            admin,
            reference,
            metrics,
            runtime,
        } = self;
        let rt_path = shared.data.runtime();
        grid::write_durable(&rt_path, serde_json::to_string_pretty(&runtime)?.as_bytes())
            .with_context(|| format!("cannot write {}", rt_path.display()))?;
        tracing::info!(
            quic = %runtime.quic_addr,
            admin = %runtime.admin_addr,
            public = %runtime.public_addr,
            metrics = ?runtime.metrics_addr,
            "serving"
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let ticker = spawn_ticker(shared.clone(), stop_rx.clone());
        // Damage is looked for at once, beside the work (reads only).
        tokio::spawn({
            let shared = shared.clone();
            async move {
                let report = shared.check_links(None).await;
                let damaged = report.damaged.len();
                if damaged > 0 {
                    tracing::warn!(
                        sites = report.sites_read,
                        damaged,
                        "damaged results found: `beebot-server check` names them"
                    );
                } else {
                    tracing::info!(sites = report.sites_read, "every kept result reads whole");
                }
            }
        });
        let reference_task = reference.map(|listener| {
            let mut stop = stop_rx.clone();
            let about = shared.about_page.subscribe();
            tokio::spawn(reference::serve_with_about(
                listener,
                Some(about),
                async move {
                    let _ = stop.changed().await;
                },
            ))
        });
        let admin_task = spawn_admin(admin, shared.clone(), runtime.admin_addr, stop_rx.clone());
        let metrics_task = metrics.zip(runtime.metrics_addr).map(|(l, addr)| {
            let app = metrics::router(shared.clone(), addr);
            spawn_http(l, metrics::LIMITS, app, stop_rx.clone())
        });
        let quic = {
            let shared = shared.clone();
            let mut stop = stop_rx.clone();
            tokio::spawn(net::run(endpoint, shared, async move {
                let _ = stop.changed().await;
            }))
        };
        let writable = store_watch(shared.clone(), stop_rx.clone());
        let end = tokio::select! {
            _ = shutdown => RunEnd::Stopped,
            _ = writable => RunEnd::StoreWritable,
        };
        match end {
            RunEnd::Stopped => tracing::info!("shutting down"),
            RunEnd::StoreWritable => tracing::warn!(
                "space is back on the store's disk: the server starts again from its store"
            ),
        }
        let _ = stop_tx.send(true);
        let _ = ticker.await;
        let _ = admin_task.await;
        if let Some(task) = reference_task {
            let _ = task.await;
        }
        if let Some(task) = metrics_task {
            let _ = task.await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), quic).await;
        let _ = std::fs::remove_file(&rt_path);
        Ok(end)
    }
}

/// Resolves once the store has failed and its disk takes writes again
/// (tried every [`STORE_PROBE_INTERVAL`]); never while it is well, or
/// once `stop` changes.
async fn store_watch(shared: Arc<Shared>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut every = tokio::time::interval(STORE_PROBE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.changed() => std::future::pending::<()>().await,
        }
        if shared.store_failure().is_none() {
            continue;
        }
        let dir = shared.data.store();
        let probe = tokio::task::spawn_blocking(move || store_writable_again(&dir)).await;
        match probe {
            Ok(Ok(())) => return,
            Ok(Err(e)) => tracing::debug!("the store's disk takes no writes yet: {e}"),
            Err(e) => tracing::error!("the store probe stopped: {e}"),
        }
    }
}

/// Bind the reference site's listener (`reference_listen`; empty: none).
async fn bind_reference(listen: &str) -> Result<Option<tokio::net::TcpListener>> {
    Ok(match listen.trim() {
        "" => None,
        addr => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!("cannot bind the reference site on {addr} (reference_listen)")
        })?),
    })
}

/// The metrics listener (`metrics_listen`; empty or `off`: none). A
/// non-loopback address is served as configured, with a warning: anyone
/// who reaches it reads the metrics without a token.
async fn bind_metrics(listen: &str) -> Result<Option<tokio::net::TcpListener>> {
    let Some(addr) = config::metrics_addr(listen)? else {
        return Ok(None);
    };
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "metrics_listen is not on loopback: anyone who reaches {addr} reads /metrics without a token"
        );
    }
    Ok(Some(
        tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind the metrics address {addr} (metrics_listen)"))?,
    ))
}

/// The QUIC endpoint on the `listen` address.
fn bind_quic(
    listen: &str,
    certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    cert_key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<quinn::Endpoint> {
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("listen address `{listen}` is not ADDR:PORT"))?;
    net::endpoint(addr, certs, cert_key)
}

/// The admin API's listener, on a checked (loopback) address.
async fn bind_admin(listen: &str) -> Result<tokio::net::TcpListener> {
    let admin_addr = config::check_admin_addr(listen)?;
    tokio::net::TcpListener::bind(admin_addr)
        .await
        .with_context(|| format!("cannot bind the admin API on {admin_addr}"))
}

/// The address hosts are told to reach: `public_addr`, its port `0`
/// replaced by the QUIC endpoint's.
fn public_addr(configured: &str, quic_port: u16) -> String {
    match configured.rsplit_once(':') {
        Some((host, "0")) => format!("{host}:{quic_port}"),
        _ => configured.to_string(),
    }
}

/// The grid's turn of the ticker: expire units past their deadline, end
/// rounds whose end a failed write missed, start repeating rounds whose
/// time has come.
async fn tick_grid(shared: &Arc<Shared>) {
    match shared.with_grid(|g| g.tick(now_ms())).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(expired = n, "units expired and requeued"),
        Err(e) => tracing::error!("deadline check failed: {e}"),
    }
    // Repeating rounds (`round start --every`) whose time has come.
    match shared.with_grid(|g| g.repeat_due_rounds(now_ms())).await {
        Ok(started) => {
            for id in started {
                tracing::info!(round = id, "repeating round started");
            }
        }
        Err(e) => tracing::error!("cannot start a repeating round: {e}"),
    }
}

/// The ticker: every [`TICK_INTERVAL`] until `stop`, the grid's turn
/// ([`tick_grid`]) while the store is well, then the about page and the
/// dashboard's sample.
fn spawn_ticker(
    shared: Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TICK_INTERVAL);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = stop.changed() => break,
            }
            // Once the store has failed nothing can be written (its
            // failure is logged once, and `store_watch` starts the server
            // afresh when the disk takes writes): deadlines and repeating
            // rounds wait for that, rather than failing every second.
            if shared.store_failure().is_none() {
                tick_grid(&shared).await;
            }
            shared.refresh_about().await;
            dashboard::sample(&shared).await;
        }
    })
}

/// The admin API on its listener until `stop`.
fn spawn_admin(
    admin: tokio::net::TcpListener,
    shared: Arc<Shared>,
    admin_addr: SocketAddr,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    spawn_http(
        admin,
        admin::LIMITS,
        admin::router(shared, admin_addr),
        stop,
    )
}

/// Serve `app` on `listener` within `limits` until `stop`.
fn spawn_http(
    listener: tokio::net::TcpListener,
    limits: beebot_shared::httpcap::Limits,
    app: axum::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(beebot_shared::httpcap::serve(
        listener,
        limits,
        app,
        async move {
            let _ = stop.changed().await;
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_upload_in_flight_per_unit_freed_on_every_path() {
        let uploads = Arc::new(UploadsInFlight::default());
        let first = uploads.take(7).expect("free");
        assert!(uploads.take(7).is_none(), "a second upload of unit 7");
        let other = uploads.take(8).expect("another unit is free");
        assert_eq!(uploads.len(), 2);
        drop(first);
        drop(other);
        assert!(uploads.is_empty());
        // Shared with blocking work: freed when the last holder ends.
        let slot = Arc::new(uploads.take(7).expect("free again"));
        let held = slot.clone();
        drop(slot);
        assert!(uploads.take(7).is_none());
        drop(held);
        // A panic while it is held frees it too.
        let u = uploads.clone();
        let r = std::thread::spawn(move || {
            let _slot = u.take(7).expect("free");
            panic!("decoding blew up");
        })
        .join();
        assert!(r.is_err());
        assert!(uploads.take(7).is_some());
    }

    /// The grid's two threads alone, on a grid in memory, their sync
    /// counted (and slow, so an answer delivered before it would show).
    fn stage() -> (
        std::sync::mpsc::Sender<GridJob>,
        Arc<std::sync::atomic::AtomicU64>,
        tokio::sync::watch::Receiver<u64>,
    ) {
        let store = store::memory();
        let io = GridIo::in_memory(
            Arc::new(grid::MemoryLinks::default()),
            beebot_shared::sign::generate_key(),
            7,
        );
        let g = Grid::open(Default::default(), io, grid::testkit::settings()).expect("grid");
        let applied = store.clone();
        let syncs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = syncs.clone();
        let sync: SyncStore = Box::new(move || {
            std::thread::sleep(Duration::from_millis(2));
            let r = store.sync();
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            r
        });
        let hint = tokio::sync::watch::Sender::new(0);
        let seen = hint.subscribe();
        let jobs = GridStage::start(
            g,
            applied,
            sync,
            hint,
            Arc::new(metrics::Metrics::new(0)),
            Arc::new(dashboard::live::Live::new(0, None)),
        )
        .expect("threads");
        (jobs, syncs, seen)
    }

    #[tokio::test]
    async fn the_grid_stage_answers_in_order_after_the_sync_and_survives_a_panic() {
        use std::sync::atomic::Ordering::SeqCst;
        let (jobs, syncs, mut seen) = stage();
        // Many calls at once: each answered after a sync that began after
        // it ran, in the order sent, each seeing every write before it.
        let mut pending = Vec::new();
        for i in 0..300u64 {
            let (jobs, syncs) = (jobs.clone(), syncs.clone());
            pending.push(tokio::spawn(async move {
                let (sites, syncs_then) = on_grid(&jobs, {
                    let syncs = syncs.clone();
                    move |g| {
                        g.add_sites(&[format!("s{i}.example.edu")], 1_000)
                            .expect("site");
                        (g.status().sites, syncs.load(SeqCst))
                    }
                })
                .await
                .expect("no panic");
                assert!(
                    syncs.load(SeqCst) > syncs_then,
                    "an answer left before the sync after its call"
                );
                sites
            }));
        }
        let mut counts = Vec::new();
        for p in pending {
            counts.push(p.await.expect("answered after its sync"));
        }
        assert_eq!(*counts.iter().max().expect("some"), 300);
        let mut sorted = counts.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 300, "each call saw one more site");
        // Syncs are shared: far fewer than calls.
        assert!(syncs.load(SeqCst) < 300, "{} syncs", syncs.load(SeqCst));
        // A panic is the caller's, and the next call is served.
        let r = on_grid(&jobs, |_g| -> u64 { panic!("a bug in one request") }).await;
        assert!(r.is_err());
        let sites = on_grid(&jobs, |g| g.status().sites).await.expect("served");
        assert_eq!(sites, 300);
        // A round started tells the connections (the work hint).
        on_grid(&jobs, |g| {
            g.start_round(params::RoundParams::default(), 2_000)
                .expect("round")
        })
        .await
        .expect("started");
        tokio::time::timeout(Duration::from_secs(5), seen.changed())
            .await
            .expect("hint in time")
            .expect("hint");
    }

    /// Link files kept in memory, every removal and round closed noted in
    /// order.
    #[derive(Debug, Default)]
    struct Noted {
        files: grid::MemoryLinks,
        log: std::sync::Mutex<Vec<String>>,
    }

    impl Noted {
        fn note(&self, what: String) {
            self.log.lock().expect("log").push(what);
        }
        fn log(&self) -> Vec<String> {
            self.log.lock().expect("log").clone()
        }
        /// Wait (at most 2 s) until `what` is noted.
        async fn noted(&self, what: &str) -> bool {
            for _ in 0..200 {
                if self.log().iter().any(|l| l == what) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    }

    impl grid::LinkFiles for Noted {
        fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
            self.files.write(name, bytes)
        }
        fn read(&self, name: &str) -> std::io::Result<Vec<u8>> {
            self.files.read(name)
        }
        fn remove(&self, name: &str) {
            self.note(format!("remove {name}"));
            self.files.remove(name);
        }
        fn sweep_temporaries(&self, round_id: u64) {
            self.files.sweep_temporaries(round_id);
        }
        fn forget_round(&self, round_id: u64) {
            self.note(format!("close {round_id}"));
        }
        fn location(&self, name: &str) -> String {
            self.files.location(name)
        }
        fn names(&self) -> std::io::Result<Vec<String>> {
            self.files.names()
        }
    }

    /// A link file a record stops naming is removed by the sync thread
    /// once the store is synced, never by the call (the record saying so
    /// could be lost in a crash before it), and a round that ended is
    /// closed after every removal (one after the close would open its
    /// packs again); after a failed sync the files stay.
    #[tokio::test]
    async fn a_link_file_a_record_stops_naming_is_removed_after_the_sync() {
        use grid::LinkFiles;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
        let store = store::memory();
        let links = Arc::new(Noted::default());
        let mut io = GridIo::in_memory(
            Arc::new(grid::MemoryLinks::default()),
            beebot_shared::sign::generate_key(),
            7,
        );
        io.links = links.clone();
        let g = Grid::open(Default::default(), io, grid::testkit::settings()).expect("grid");
        for name in ["1/a.lf", "1/b.lf", "1/c.lf"] {
            links.write(name, b"links").expect("write");
        }
        // Each sync notes whether the files were still there; syncs fail
        // once `fail` is set.
        let (seen, syncs, fail) = (
            Arc::new(std::sync::Mutex::new(Vec::new())),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let applied = store.clone();
        let sync: SyncStore = {
            let (seen, syncs, fail, links) =
                (seen.clone(), syncs.clone(), fail.clone(), links.clone());
            Box::new(move || {
                let there = |n: &str| links.read(n).is_ok();
                seen.lock()
                    .expect("lock")
                    .push((there("1/a.lf"), there("1/c.lf")));
                syncs.fetch_add(1, SeqCst);
                if fail.load(SeqCst) {
                    Err(store::StoreError::Injected)
                } else {
                    store.sync()
                }
            })
        };
        let jobs = GridStage::start(
            g,
            applied,
            sync,
            tokio::sync::watch::Sender::new(0),
            Arc::new(metrics::Metrics::new(0)),
            Arc::new(dashboard::live::Live::new(0, None)),
        )
        .expect("threads");
        // One call stops naming a file, closes its round, and stops naming
        // another (as a cancelled round's call does): nothing goes while it
        // runs or at the sync; after it, both removals, then the close.
        let during = on_grid(&jobs, {
            let links = links.clone();
            move |g| {
                g.add_sites(&["s1.example.edu".to_string()], 1_000)
                    .expect("site");
                g.remove_link("1/a.lf");
                g.close_round_links(1);
                g.remove_link("1/c.lf");
                (links.read("1/a.lf").is_ok(), links.log())
            }
        })
        .await
        .expect("answered");
        assert_eq!(during, (true, Vec::new()), "changed by the call itself");
        assert!(links.noted("close 1").await, "the round was not closed");
        assert_eq!(links.log(), ["remove 1/a.lf", "remove 1/c.lf", "close 1"]);
        assert_eq!(seen.lock().expect("lock")[0], (true, true));
        assert!(links.read("1/a.lf").is_err() && links.read("1/c.lf").is_err());
        // A failed sync removes nothing (its round is still closed).
        fail.store(true, SeqCst);
        on_grid(&jobs, |g| {
            g.add_sites(&["s2.example.edu".to_string()], 1_000)
                .expect("site");
            g.remove_link("1/b.lf");
            g.close_round_links(2);
        })
        .await
        .expect("answered");
        assert!(links.noted("close 2").await, "the round was not closed");
        assert!(syncs.load(SeqCst) >= 2);
        assert!(!links.log().contains(&"remove 1/b.lf".to_string()));
        assert!(links.read("1/b.lf").is_ok(), "removed after a failed sync");
    }
}
