//! `beebot-demo`: the whole grid in one process on loopback. A
//! synthetic web of N sites, a fresh data dir, a server, M clients that join
//! with an invite, one round, live progress, a summary, and an export checked
//! against the synthetic web's truth.

use std::collections::BTreeSet;
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
use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::synth::SynthWeb;

use beebot_server::api::JobCounts;
use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::model::RoundState;
use beebot_server::{now_ms, Server, Shared};

/// The demo's operator contact: the demo crawls only its synthetic web on
/// loopback, so a name under the reserved `.test` domain.
pub const DEMO_CONTACT: &str = "https://beebot.test/contact";
/// The demo's synthetic web seed: the same web every run.
const DEMO_SEED: u64 = 2026;
/// The demo stops waiting after this long, plus the round's pages at its
/// politeness delay spread over the clients' slots, twice over.
const DEMO_TIMEOUT: Duration = Duration::from_secs(300);
/// Most sites and clients the demo runs (it is a demo, on one machine).
const MAX_DEMO_SITES: usize = 2000;
const MAX_DEMO_CLIENTS: usize = 64;
/// How often the live progress line is refreshed.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(1000);
/// Each client's buffer of work, seconds: small, so the sites spread over
/// the clients.
const CLIENT_BUFFER_S: u64 = 30;
/// How often each client reports its scans' progress.
const CLIENT_PROGRESS_INTERVAL: Duration = Duration::from_secs(2);
/// Pages a demo site may have (the synthetic web's sites are far smaller).
const DEMO_MAX_PAGES: u32 = 10_000;
/// The round's shortest unit deadline, seconds.
const DEMO_DEADLINE_MIN_S: u64 = 60;
/// Lifetime of the clients' invite, seconds.
const INVITE_TTL_S: u64 = 3600;

pub struct DemoOptions {
    pub sites: usize,
    pub clients: usize,
    pub keep: Option<PathBuf>,
    /// The round's politeness delay (0: as fast as loopback allows).
    pub delay_ms: u64,
    /// Sites each client scans at once.
    pub slots: u32,
    /// The round's scan time budget (a scan that reaches it continues in
    /// another unit), seconds; `None`: the server's default.
    pub max_scan_s: Option<u64>,
}

/// A client running in-process: its number, how long it ran, what it did.
type ClientTask = JoinHandle<(usize, Duration, Result<RunStats>)>;

/// Run the demo; returns the export path.
pub async fn run(opts: DemoOptions) -> Result<PathBuf> {
    check_options(&opts)?;
    let started = Instant::now();
    let (_tmp, root) = scratch_dir(opts.keep.as_deref())?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let (web, web_addr, web_task) = start_web(opts.sites, &stop_rx).await?;
    let (dir, shared, server_task) = start_server(&root, &stop_rx).await?;
    let (round_id, code) = start_round(&shared, &web, &opts).await?;

    let (clients_stop_tx, clients_stop) = watch::channel(false);
    let clients = start_clients(&root, &code, web_addr, &opts, &clients_stop).await?;
    watch_round(&shared, round_id, started, demo_timeout(&web, &opts)).await?;
    let _ = clients_stop_tx.send(true);
    report_clients(clients).await?;

    let (export_path, exported) = export_round(&shared, &dir, &root, round_id).await?;
    report_round(&shared, &web, round_id, started, &exported).await?;
    let _ = stop_tx.send(true);
    let _ = server_task.await;
    let _ = web_task.await;
    if opts.keep.is_some() {
        println!("export: {}", export_path.display());
    } else {
        let kept = std::env::temp_dir().join(format!("beebot-demo-round-{round_id}.tsv"));
        std::fs::copy(&export_path, &kept)?;
        println!("export: {}", kept.display());
        return Ok(kept);
    }
    Ok(export_path)
}

/// Refuse sizes the demo does not run.
fn check_options(opts: &DemoOptions) -> Result<()> {
    if opts.sites == 0 || opts.sites > MAX_DEMO_SITES {
        bail!("--sites must be between 1 and {MAX_DEMO_SITES}");
    }
    if opts.clients == 0 || opts.clients > MAX_DEMO_CLIENTS {
        bail!("--clients must be between 1 and {MAX_DEMO_CLIENTS}");
    }
    if opts.slots == 0 || opts.slots > beebot_shared::limits::MAX_SLOTS {
        bail!(
            "--slots must be between 1 and {}",
            beebot_shared::limits::MAX_SLOTS
        );
    }
    if opts.delay_ms > beebot_shared::limits::MAX_DELAY_MS {
        bail!(
            "--delay-ms must be at most {}",
            beebot_shared::limits::MAX_DELAY_MS
        );
    }
    Ok(())
}

/// The demo's root dir: `keep`, or a temporary dir removed when its guard
/// is dropped.
fn scratch_dir(keep: Option<&Path>) -> Result<(Option<tempfile::TempDir>, PathBuf)> {
    Ok(match keep {
        Some(p) => {
            std::fs::create_dir_all(p)?;
            (None, p.to_path_buf())
        }
        None => {
            let t = tempfile::Builder::new().prefix("beebot-demo-").tempdir()?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    })
}

/// The synthetic web on loopback, served until `stop` changes.
async fn start_web(
    sites: usize,
    stop: &watch::Receiver<bool>,
) -> Result<(Arc<SynthWeb>, SocketAddr, JoinHandle<std::io::Result<()>>)> {
    let web = Arc::new(SynthWeb::generate(DEMO_SEED, sites));
    let web_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let web_addr = web_listener.local_addr()?;
    let web_task = {
        let web = web.clone();
        let mut stop = stop.clone();
        tokio::spawn(beebot_server::web::serve(web_listener, web, async move {
            let _ = stop.changed().await;
        }))
    };
    println!(
        "synthetic web: {} sites, {} pages, on http://{web_addr}",
        sites,
        web.total_pages()
    );
    Ok((web, web_addr, web_task))
}

/// A fresh server data dir under `root` and the server on it, run until
/// `stop` changes.
async fn start_server(
    root: &Path,
    stop: &watch::Receiver<bool>,
) -> Result<(DataDir, Arc<Shared>, JoinHandle<Result<()>>)> {
    let dir = DataDir(root.join("server"));
    config::init(
        &dir,
        &InitOptions {
            public_addr: "127.0.0.1:0".into(),
            listen: "127.0.0.1:0".into(),
            admin_listen: "127.0.0.1:0".into(),
            cert_pem: None,
            key_pem: None,
            contact: DEMO_CONTACT.into(),
            operator: "BeeBot demo (loopback only)".into(),
        },
    )?;
    let server = Server::bind(dir.clone()).await?;
    let shared = server.shared();
    println!(
        "server: QUIC {} · admin http://{} · data {}",
        server.runtime().quic_addr,
        server.runtime().admin_addr,
        dir.0.display()
    );
    let server_task = {
        let mut stop = stop.clone();
        tokio::spawn(server.run(async move {
            let _ = stop.changed().await;
        }))
    };
    Ok((dir, shared, server_task))
}

/// How long the demo waits for its round: [`DEMO_TIMEOUT`] plus the round's
/// pages at its politeness delay over the clients' slots, twice over (new
/// hosts' results are scanned twice, for validation).
fn demo_timeout(web: &SynthWeb, opts: &DemoOptions) -> Duration {
    DEMO_TIMEOUT
        + Duration::from_millis(
            4 * web.total_pages() as u64 * opts.delay_ms
                / (opts.clients as u64 * u64::from(opts.slots.max(1))),
        )
}

/// The target set and the round over it; returns the round and an invite
/// code for the clients.
async fn start_round(
    shared: &Arc<Shared>,
    web: &SynthWeb,
    opts: &DemoOptions,
) -> Result<(u64, String)> {
    let hosts = web.site_hosts();
    let now = now_ms();
    let (delay_ms, max_scan_s) = (opts.delay_ms, opts.max_scan_s);
    // Every result of a new host is checked by another host's scan: one
    // client alone has nobody to check it.
    let validate = if opts.clients >= 2 {
        beebot_server::validate::ValidateMode::Adaptive
    } else {
        println!("one client: results are not validated (that takes two hosts)");
        beebot_server::validate::ValidateMode::Off
    };
    let round_id = shared
        .with_grid(move |g| -> Result<u64> {
            g.add_sites(&hosts, now)?;
            let defaults = beebot_server::params::RoundParams::default();
            let p = beebot_server::params::RoundParams {
                validate,
                delay_ms,
                max_pages: DEMO_MAX_PAGES,
                deadline_min_s: DEMO_DEADLINE_MIN_S,
                max_seconds: max_scan_s.unwrap_or(defaults.max_seconds),
                ..defaults
            };
            Ok(g.start_round(p, now)?)
        })
        .await?;
    let (code, _) = shared
        .make_invite(opts.clients as u32, INVITE_TTL_S)
        .await?;
    println!(
        "round {round_id} started; invite: {}…",
        &code[..24.min(code.len())]
    );
    Ok((round_id, code))
}

/// Clients: each joins with the invite and runs until `stop` changes.
async fn start_clients(
    root: &Path,
    code: &str,
    web_addr: SocketAddr,
    opts: &DemoOptions,
    stop: &watch::Receiver<bool>,
) -> Result<Vec<ClientTask>> {
    let resolve: ResolveRule = format!("*.synth.test={web_addr}")
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut clients = Vec::new();
    for i in 0..opts.clients {
        let home = Home {
            config: root.join(format!("client-{i}")),
            data: root.join(format!("client-{i}")),
        };
        worker::join(&home, code, Some(format!("demo-client-{i}")))
            .await
            .with_context(|| format!("client {i} cannot join"))?;
        let run_opts = RunOptions {
            // The demo stops its clients when the round is over.
            once: false,
            slots: opts.slots,
            buffer_seconds: CLIENT_BUFFER_S,
            progress_interval: CLIENT_PROGRESS_INTERVAL,
            crawler: CrawlerConfig {
                allow_private: true,
                resolve: vec![resolve.clone()],
                ..CrawlerConfig::default()
            },
            ..RunOptions::default()
        };
        let mut stop = stop.clone();
        clients.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = worker::run(home, run_opts, async move {
                let _ = stop.changed().await;
            })
            .await;
            (i, t.elapsed(), r)
        }));
    }
    Ok(clients)
}

/// Live progress until the round ends; an error past `timeout`.
async fn watch_round(
    shared: &Arc<Shared>,
    round_id: u64,
    started: Instant,
    timeout: Duration,
) -> Result<()> {
    let mut last_line = String::new();
    loop {
        let (round, jobs) = shared.with_grid(move |g| g.round(round_id)).await?;
        let c = JobCounts::of(&jobs);
        let line = format!(
            "[{:>5.1}s] jobs {}/{} done, {} running, {} queued, {} failed · {} pages · {} links",
            started.elapsed().as_secs_f64(),
            c.done,
            c.total,
            c.running,
            c.queued,
            c.failed,
            c.pages,
            c.links
        );
        if line != last_line {
            println!("{line}");
            last_line = line;
        }
        if round.state != RoundState::Running {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!(
                "the demo round did not finish within {}s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(PROGRESS_INTERVAL).await;
    }
}

/// Wait for the stopped clients and print what each did.
async fn report_clients(clients: Vec<ClientTask>) -> Result<()> {
    println!("\nclient        scans   pages   links  seconds  pages/hour");
    for c in clients {
        let (i, elapsed, r) = c.await?;
        let stats = r.with_context(|| format!("client {i} failed"))?;
        println!(
            "demo-client-{i:<2} {:>5} {:>7} {:>7} {:>8.1} {:>11.0}",
            stats.uploads_accepted,
            stats.pages,
            stats.links,
            elapsed.as_secs_f64(),
            stats.pages as f64 * 3600.0 / elapsed.as_secs_f64().max(0.001)
        );
    }
    Ok(())
}

/// A link as the export and the truth name it: (site, source, target).
type LinkKey = (String, String, String);

/// Export the round's links as TSV under `root`; returns the file and the
/// links written.
async fn export_round(
    shared: &Arc<Shared>,
    dir: &DataDir,
    root: &Path,
    round_id: u64,
) -> Result<(PathBuf, BTreeSet<LinkKey>)> {
    let (_, jobs) = shared.with_grid(move |g| g.round(round_id)).await?;
    let export_path = root.join(format!("round-{round_id}.tsv"));
    let mut exported = BTreeSet::new();
    let file = std::fs::File::create(&export_path)?;
    let mut w = ExportWriter::new(std::io::BufWriter::new(file), Format::Tsv)?;
    beebot_server::export::export_round(&dir.links(), &jobs, &mut w, |site, r| {
        exported.insert((site.to_string(), r.source_url.clone(), r.target_url.clone()));
    })?;
    w.finish()?;
    Ok((export_path, exported))
}

/// Print the round's summary, its validation, and the export against the
/// synthetic web's truth.
async fn report_round(
    shared: &Arc<Shared>,
    web: &SynthWeb,
    round_id: u64,
    started: Instant,
    exported: &BTreeSet<LinkKey>,
) -> Result<()> {
    let truth: BTreeSet<_> = web
        .truth()
        .into_iter()
        .map(|(site, r)| (site, r.source_url, r.target_url))
        .collect();
    let (round, jobs) = shared.with_grid(move |g| g.round(round_id)).await?;
    let c = JobCounts::of_round(&round, &jobs);
    println!(
        "\nround {round_id}: {} jobs ({} done, {} failed), {} pages, {} outbound links in {:.1}s; {}",
        c.total,
        c.done,
        c.failed,
        c.pages,
        c.links,
        started.elapsed().as_secs_f64(),
        c.verdict()
    );
    println!(
        "validation: {} sites valid (two hosts agree), {} taken from trusted hosts, {} results invalid, {} pages scanned to check",
        c.valid, c.trusted, c.invalid, c.check_pages
    );
    if *exported == truth {
        println!(
            "export matches the synthetic web's truth exactly ({} links)",
            truth.len()
        );
    } else {
        println!(
            "export differs from the truth: {} exported, {} true, {} missing, {} extra",
            exported.len(),
            truth.len(),
            truth.difference(exported).count(),
            exported.difference(&truth).count()
        );
    }
    Ok(())
}
