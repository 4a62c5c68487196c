//! `beebot-server demo`: the whole grid in one process on loopback. A
//! synthetic web of N sites, a fresh data dir, a server, M clients that join
//! with an invite, one round, live progress, a summary, and an export checked
//! against the synthetic web's truth.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use beebot_client::crawler::{CrawlerConfig, ResolveRule};
use beebot_client::home::Home;
use beebot_client::worker::{self, RunOptions};
use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::synth::SynthWeb;

use beebot_server::api::JobCounts;
use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::model::RoundState;
use beebot_server::{now_ms, Server};

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

/// Run the demo; returns the export path.
pub async fn run(opts: DemoOptions) -> Result<PathBuf> {
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
    let started = Instant::now();
    let (_tmp, root) = match &opts.keep {
        Some(p) => {
            std::fs::create_dir_all(p)?;
            (None, p.clone())
        }
        None => {
            let t = tempfile::Builder::new().prefix("beebot-demo-").tempdir()?;
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    };

    // The synthetic web on loopback.
    let web = Arc::new(SynthWeb::generate(DEMO_SEED, opts.sites));
    let web_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let web_addr = web_listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let web_task = {
        let web = web.clone();
        let mut stop = stop_rx.clone();
        tokio::spawn(beebot_server::web::serve(web_listener, web, async move {
            let _ = stop.changed().await;
        }))
    };
    println!(
        "synthetic web: {} sites, {} pages, on http://{web_addr}",
        opts.sites,
        web.total_pages()
    );

    // The server.
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
        let mut stop = stop_rx.clone();
        tokio::spawn(server.run(async move {
            let _ = stop.changed().await;
        }))
    };

    // Target set and round.
    let hosts = web.site_hosts();
    let now = now_ms();
    let (delay_ms, max_scan_s) = (opts.delay_ms, opts.max_scan_s);
    // New hosts' results are scanned twice (validation).
    let timeout = DEMO_TIMEOUT
        + Duration::from_millis(
            4 * web.total_pages() as u64 * delay_ms
                / (opts.clients as u64 * u64::from(opts.slots.max(1))),
        );
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
            let mut p = config::RoundDefaults::default().params();
            p.validate = validate;
            p.delay_ms = delay_ms;
            p.max_pages = 10_000;
            p.deadline_min_s = 60;
            if let Some(s) = max_scan_s {
                p.max_seconds = s;
            }
            Ok(g.start_round(p, now)?)
        })
        .await?;
    let (code, _) = shared.make_invite(opts.clients as u32, 3600).await?;
    println!(
        "round {round_id} started; invite: {}…",
        &code[..24.min(code.len())]
    );

    // Clients: each joins with the invite and runs until the grid is idle.
    let resolve: ResolveRule = format!("*.synth.test={web_addr}")
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (clients_stop_tx, clients_stop) = tokio::sync::watch::channel(false);
    let mut clients = Vec::new();
    for i in 0..opts.clients {
        let home = Home {
            config: root.join(format!("client-{i}")),
            data: root.join(format!("client-{i}")),
        };
        worker::join(&home, &code, Some(format!("demo-client-{i}")))
            .await
            .with_context(|| format!("client {i} cannot join"))?;
        let run_opts = RunOptions {
            // The demo stops its clients when the round is over.
            once: false,
            slots: opts.slots,
            buffer_seconds: 30,
            progress_interval: Duration::from_secs(2),
            crawler: CrawlerConfig {
                allow_private: true,
                resolve: vec![resolve.clone()],
                ..CrawlerConfig::default()
            },
            ..RunOptions::default()
        };
        let mut stop = clients_stop.clone();
        clients.push(tokio::spawn(async move {
            let t = Instant::now();
            let r = worker::run(home, run_opts, async move {
                let _ = stop.changed().await;
            })
            .await;
            (i, t.elapsed(), r)
        }));
    }

    // Live progress until the round ends.
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
            break;
        }
        if started.elapsed() > timeout {
            bail!(
                "the demo round did not finish within {}s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }

    println!("\nclient        scans   pages   links  seconds  pages/hour");
    let _ = clients_stop_tx.send(true);
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

    // Export and check against the truth.
    let (_, jobs) = shared.with_grid(move |g| g.round(round_id)).await?;
    let export_path = root.join(format!("round-{round_id}.tsv"));
    let mut exported = BTreeSet::new();
    {
        let file = std::fs::File::create(&export_path)?;
        let mut w = ExportWriter::new(std::io::BufWriter::new(file), Format::Tsv)?;
        let mut jobs = jobs;
        jobs.sort_by(|a, b| a.site.cmp(&b.site));
        for job in &jobs {
            if job.result.is_none() {
                continue;
            }
            beebot_server::grid::for_each_job_link(&dir.links(), job, |r| {
                w.write(&job.site, r).map_err(|e| e.to_string())?;
                exported.insert((job.site.clone(), r.source_url.clone(), r.target_url.clone()));
                Ok(())
            })
            .map_err(|e| anyhow::anyhow!(e))?;
        }
        w.finish()?;
    }
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
    if exported == truth {
        println!(
            "export matches the synthetic web's truth exactly ({} links)",
            truth.len()
        );
    } else {
        println!(
            "export differs from the truth: {} exported, {} true, {} missing, {} extra",
            exported.len(),
            truth.len(),
            truth.difference(&exported).count(),
            exported.difference(&truth).count()
        );
    }
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
