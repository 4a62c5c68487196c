//! A whole grid on loopback in one process: a synthetic web, a server in a
//! fresh data dir, and clients that join with an invite and run the real
//! work loop ([`beebot_client::worker::run`]) against the real server
//! ([`beebot_server::Server`]) over QUIC. The demo ([`crate::demo`]) and the
//! methods bench ([`crate::methods`]) drive it.
//!
//! Invariants: every address is on 127.0.0.1 (clients map every synthetic
//! host to the web's address); rounds start through [`Shared::with_grid`],
//! so connected clients hear `WorkAvailable` as they would from
//! `round start`. It never prints (callers say what they do), and keeps
//! nothing on disk once dropped unless given a dir to keep.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use beebot_client::crawler::{CrawlerConfig, ResolveRule};
use beebot_client::home::Home;
use beebot_client::worker::{self, RunOptions, RunStats};
use beebot_testkit::synth::SynthWeb;

use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::model::{JobRecord, RoundRecord, RoundState};
use beebot_server::params::RoundParams;
use beebot_server::{now_ms, Server, Shared};

/// The grid's operator contact: it crawls only its synthetic web on
/// loopback, so a name under the reserved `.test` domain.
pub const LOOPBACK_CONTACT: &str = "https://beebot.test/contact";
/// Each client's buffer of work, seconds: small, so the sites spread over
/// the clients.
const CLIENT_BUFFER_S: u64 = 30;
/// How often each client reports its scans' progress.
const CLIENT_PROGRESS_INTERVAL: Duration = Duration::from_secs(2);
/// Lifetime of the clients' invite, seconds.
const INVITE_TTL_S: u64 = 3600;

/// A client to run: its name, slots, and its pause after every page (a
/// deliberately slower machine; zero for a normal one).
#[derive(Clone, Debug)]
pub struct ClientSpec {
    pub name: String,
    pub slots: u32,
    pub throttle: Duration,
}

/// What a stopped client did: its name, how long it ran, its counts.
pub struct ClientReport {
    pub name: String,
    pub elapsed: Duration,
    pub stats: RunStats,
}

/// A client running in-process: its name, how long it ran, what it did.
type ClientTask = JoinHandle<(String, Duration, Result<RunStats>)>;

/// The running grid; [`LoopbackGrid::shutdown`] stops it.
pub struct LoopbackGrid {
    pub web: Arc<SynthWeb>,
    pub web_addr: SocketAddr,
    pub dir: DataDir,
    pub shared: Arc<Shared>,
    pub quic_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The dir everything lives under.
    pub root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    stop_tx: watch::Sender<bool>,
    clients_stop: watch::Sender<bool>,
    clients: Vec<ClientTask>,
    server_task: JoinHandle<Result<beebot_server::RunEnd>>,
    web_task: JoinHandle<std::io::Result<()>>,
}

impl LoopbackGrid {
    /// Serve `web` and start a server in a fresh data dir under `keep` (or
    /// a temporary dir removed when the grid is dropped).
    pub async fn start(web: SynthWeb, keep: Option<&Path>) -> Result<LoopbackGrid> {
        let (tmp, root) = scratch_dir(keep)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let web = Arc::new(web);
        let web_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let web_addr = web_listener.local_addr()?;
        let web_task = tokio::spawn(beebot_testkit::web::serve(
            web_listener,
            web.clone(),
            stopped(stop_rx.clone()),
        ));
        let dir = DataDir(root.join("server"));
        config::init(
            &dir,
            &InitOptions {
                public_addr: "127.0.0.1:0".into(),
                listen: "127.0.0.1:0".into(),
                admin_listen: "127.0.0.1:0".into(),
                cert_pem: None,
                key_pem: None,
                contact: LOOPBACK_CONTACT.into(),
                operator: "BeeBot on loopback (synthetic web only)".into(),
            },
        )?;
        let server = Server::bind(dir.clone()).await?;
        let shared = server.shared();
        let (quic_addr, admin_addr) = (server.runtime().quic_addr, server.runtime().admin_addr);
        let server_task = tokio::spawn(server.run(stopped(stop_rx)));
        Ok(LoopbackGrid {
            web,
            web_addr,
            dir,
            shared,
            quic_addr,
            admin_addr,
            root,
            _tmp: tmp,
            stop_tx,
            clients_stop: watch::Sender::new(false),
            clients: Vec::new(),
            server_task,
            web_task,
        })
    }

    /// Add every site of the web to the target set.
    pub async fn add_sites(&self) -> Result<()> {
        let hosts = self.web.site_hosts();
        let now = now_ms();
        self.shared
            .with_grid(move |g| g.add_sites(&hosts, now))
            .await?;
        Ok(())
    }

    /// Start a round over the target set with `params`; its id.
    pub async fn start_round(&self, params: RoundParams) -> Result<u64> {
        let now = now_ms();
        Ok(self
            .shared
            .with_grid(move |g| g.start_round(params, now))
            .await?)
    }

    /// Join a client per spec with one invite, and run each until
    /// [`LoopbackGrid::stop_clients`].
    pub async fn start_clients(&mut self, specs: &[ClientSpec]) -> Result<()> {
        let uses = u32::try_from(specs.len()).context("too many clients")?;
        let (code, _) = self.shared.make_invite(uses, INVITE_TTL_S).await?;
        let resolve: ResolveRule = format!("*.synth.test={}", self.web_addr)
            .parse()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for spec in specs {
            let home = Home {
                config: self.root.join(format!("client-{}", spec.name)),
                data: self.root.join(format!("client-{}", spec.name)),
            };
            worker::join(&home, &code, Some(spec.name.clone()))
                .await
                .with_context(|| format!("client {} cannot join", spec.name))?;
            let run_opts = RunOptions {
                // Clients run until stopped, across rounds.
                once: false,
                slots: spec.slots,
                throttle: spec.throttle,
                buffer_seconds: CLIENT_BUFFER_S,
                progress_interval: CLIENT_PROGRESS_INTERVAL,
                // Every client of this process would measure the whole
                // process's CPU (server, web and the other clients) against
                // its own budget: no budget here, a core each.
                cpu_percent: beebot_client::settings::MAX_CPU_PERCENT as u32,
                crawler: CrawlerConfig {
                    allow_private: true,
                    resolve: vec![resolve.clone()],
                    ..CrawlerConfig::default()
                },
                ..RunOptions::default()
            };
            let stop = stopped(self.clients_stop.subscribe());
            let name = spec.name.clone();
            self.clients.push(tokio::spawn(async move {
                let t = Instant::now();
                let r = worker::run(home, run_opts, stop).await;
                (name, t.elapsed(), r)
            }));
        }
        Ok(())
    }

    /// The round and its jobs.
    pub async fn round(&self, round_id: u64) -> Result<(RoundRecord, Vec<JobRecord>)> {
        Ok(self.shared.with_grid(move |g| g.round(round_id)).await?)
    }

    /// Wait until the round is over, looking every `poll` and calling
    /// `each` at every look; an error past `timeout`. Returns the round's
    /// time, start to end.
    pub async fn wait_round(
        &self,
        round_id: u64,
        timeout: Duration,
        poll: Duration,
        mut each: impl FnMut(&RoundRecord, &[JobRecord]),
    ) -> Result<Duration> {
        let started = Instant::now();
        loop {
            let (round, jobs) = self.round(round_id).await?;
            each(&round, &jobs);
            if round.state != RoundState::Running {
                let end = round.finished_ms.unwrap_or_else(now_ms);
                return Ok(Duration::from_millis(end.saturating_sub(round.created_ms)));
            }
            if started.elapsed() > timeout {
                bail!(
                    "round {round_id} did not finish within {}s",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Stop every client and wait for it; what each did.
    pub async fn stop_clients(&mut self) -> Result<Vec<ClientReport>> {
        let _ = self.clients_stop.send(true);
        let mut out = Vec::new();
        for c in self.clients.drain(..) {
            let (name, elapsed, r) = c.await?;
            let stats = r.with_context(|| format!("client {name} failed"))?;
            out.push(ClientReport {
                name,
                elapsed,
                stats,
            });
        }
        self.clients_stop = watch::Sender::new(false);
        Ok(out)
    }

    /// Stop the clients, the server and the web.
    pub async fn shutdown(mut self) -> Result<()> {
        self.stop_clients().await?;
        let _ = self.stop_tx.send(true);
        let _ = (&mut self.server_task).await;
        let _ = (&mut self.web_task).await;
        Ok(())
    }
}

/// A future that ends when `rx` changes (or its sender is gone).
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.changed().await;
}

/// The grid's root dir: `keep`, or a temporary dir removed when its guard
/// is dropped.
fn scratch_dir(keep: Option<&Path>) -> Result<(Option<tempfile::TempDir>, PathBuf)> {
    Ok(match keep {
        Some(p) => {
            std::fs::create_dir_all(p)?;
            (None, p.to_path_buf())
        }
        None => {
            let t = tempfile::Builder::new().prefix("beebot-grid-").tempdir()?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    })
}
