//! `beebot-demo`: the whole grid in one process on loopback. A
//! synthetic web of N sites, a fresh data dir, a server, M clients that join
//! with an invite, one round, live progress, a summary, and an export checked
//! against the synthetic web's truth. The grid itself is
//! [`crate::grid::LoopbackGrid`]; this module says what it does.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use beebot_shared::export::{ExportWriter, Format};
use beebot_testkit::synth::SynthWeb;

use beebot_server::api::JobCounts;
use beebot_server::model::JobRecord;
use beebot_server::params::RoundParams;

use crate::grid::{ClientReport, ClientSpec, LoopbackGrid};

/// The demo's operator contact (the loopback grid's).
pub const DEMO_CONTACT: &str = crate::grid::LOOPBACK_CONTACT;
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
/// Pages a demo site may have (the synthetic web's sites are far smaller).
const DEMO_MAX_PAGES: u32 = 10_000;
/// The round's shortest unit deadline, seconds.
const DEMO_DEADLINE_MIN_S: u64 = 60;

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
    check_options(&opts)?;
    let started = Instant::now();
    let web = SynthWeb::generate(DEMO_SEED, opts.sites);
    let mut grid = LoopbackGrid::start(web, opts.keep.as_deref()).await?;
    println!(
        "synthetic web: {} sites, {} pages, on http://{}",
        opts.sites,
        grid.web.total_pages(),
        grid.web_addr
    );
    println!(
        "server: QUIC {} · admin http://{} · data {}",
        grid.quic_addr,
        grid.admin_addr,
        grid.dir.0.display()
    );
    grid.add_sites().await?;
    let round_id = grid.start_round(round_params(&opts)).await?;
    println!("round {round_id} started");
    let clients: Vec<ClientSpec> = (0..opts.clients)
        .map(|i| ClientSpec {
            name: format!("demo-client-{i}"),
            slots: opts.slots,
            throttle: Duration::ZERO,
        })
        .collect();
    grid.start_clients(&clients).await?;
    let mut last_line = String::new();
    let timeout = demo_timeout(&grid.web, &opts);
    grid.wait_round(round_id, timeout, PROGRESS_INTERVAL, |_, jobs| {
        let line = progress_line(started, jobs);
        if line != last_line {
            println!("{line}");
            last_line = line;
        }
    })
    .await?;
    report_clients(grid.stop_clients().await?);

    let (export_path, exported) = export_round(&grid, round_id).await?;
    report_round(&grid, round_id, started, &exported).await?;
    let keep = opts.keep.is_some();
    let kept = std::env::temp_dir().join(format!("beebot-demo-round-{round_id}.tsv"));
    if !keep {
        std::fs::copy(&export_path, &kept)?;
    }
    grid.shutdown().await?;
    let path = if keep { export_path } else { kept };
    println!("export: {}", path.display());
    Ok(path)
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

/// The demo round's parameters.
fn round_params(opts: &DemoOptions) -> RoundParams {
    // Every result of a new host is checked by another host's scan: one
    // client alone has nobody to check it.
    let validate = if opts.clients >= 2 {
        beebot_server::validate::ValidateMode::Adaptive
    } else {
        println!("one client: results are not validated (that takes two hosts)");
        beebot_server::validate::ValidateMode::Off
    };
    let defaults = RoundParams::default();
    RoundParams {
        validate,
        delay_ms: opts.delay_ms,
        max_pages: DEMO_MAX_PAGES,
        deadline_min_s: DEMO_DEADLINE_MIN_S,
        max_seconds: opts.max_scan_s.unwrap_or(defaults.max_seconds),
        ..defaults
    }
}

/// The live progress line.
fn progress_line(started: Instant, jobs: &[JobRecord]) -> String {
    let c = JobCounts::of(jobs);
    format!(
        "[{:>5.1}s] jobs {}/{} done, {} running, {} queued, {} failed · {} pages · {} links",
        started.elapsed().as_secs_f64(),
        c.done,
        c.total,
        c.running,
        c.queued,
        c.failed,
        c.pages,
        c.links
    )
}

/// Print what each stopped client did.
fn report_clients(clients: Vec<ClientReport>) {
    println!("\nclient          scans   pages   links  seconds  pages/hour");
    for c in clients {
        let secs = c.elapsed.as_secs_f64();
        println!(
            "{:<14} {:>6} {:>7} {:>7} {:>8.1} {:>11.0}",
            c.name,
            c.stats.uploads_accepted,
            c.stats.pages,
            c.stats.links,
            secs,
            c.stats.pages as f64 * 3600.0 / secs.max(0.001)
        );
    }
}

/// A link as the export and the truth name it: (site, source, target).
type LinkKey = (String, String, String);

/// Export the round's links as TSV under `root`; returns the file and the
/// links written.
async fn export_round(grid: &LoopbackGrid, round_id: u64) -> Result<(PathBuf, BTreeSet<LinkKey>)> {
    let (_, jobs) = grid.round(round_id).await?;
    let export_path = grid.root.join(format!("round-{round_id}.tsv"));
    let mut exported = BTreeSet::new();
    let file = std::fs::File::create(&export_path)?;
    let mut w = ExportWriter::new(std::io::BufWriter::new(file), Format::Tsv)?;
    let files = beebot_server::grid::LinkPacks::new(grid.dir.links());
    let mut damaged = Vec::new();
    beebot_server::export::export_round(
        &files,
        &jobs,
        &mut w,
        |site, r| {
            exported.insert((site.to_string(), r.source_url.clone(), r.target_url.clone()));
        },
        |site, why| damaged.push(format!("{site}: {why}")),
    )?;
    w.finish()?;
    if !damaged.is_empty() {
        anyhow::bail!(
            "damaged results left out of the export: {}",
            damaged.join("; ")
        );
    }
    Ok((export_path, exported))
}

/// Print the round's summary, its validation, and the export against the
/// synthetic web's truth.
async fn report_round(
    grid: &LoopbackGrid,
    round_id: u64,
    started: Instant,
    exported: &BTreeSet<LinkKey>,
) -> Result<()> {
    let truth: BTreeSet<_> = grid
        .web
        .truth()
        .into_iter()
        .map(|(site, r)| (site, r.source_url, r.target_url))
        .collect();
    let (round, jobs) = grid.round(round_id).await?;
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
