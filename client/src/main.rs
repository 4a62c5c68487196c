//! `beebot`: the employee's command line. Join a project, run the work loop,
//! show status, or scan one site locally.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use url::Url;

use beebot_client::crawler::{self, CrawlSpec, CrawlerConfig, ResolveRule};
use beebot_client::home::Home;
use beebot_client::worker::{self, RunOptions};
use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::limits::MAX_SLOTS;
use beebot_shared::scope::Scope;

#[derive(Parser)]
#[command(
    name = "beebot",
    version,
    about = "BeeBot grid desktop client: crawl websites for a research link graph"
)]
struct Cli {
    /// Client home (keys, enrolment, spool). Default: the platform's config and data dirs.
    #[arg(long, global = true, env = "BEEBOT_HOME")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Join a project with the invite code from its admin.
    Join {
        code: String,
        /// Name shown to the admin (default: this machine's host name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Pull work, crawl, upload, repeat.
    Run {
        /// Exit when the server has no more work and every result is uploaded.
        #[arg(long)]
        once: bool,
        /// Sites scanned at once.
        #[arg(long, default_value_t = 2)]
        slots: u32,
        #[command(flatten)]
        net: NetArgs,
    },
    /// Enrolment, units held, uploads pending.
    Status,
    /// Scan one site locally, without a server.
    Crawl {
        url: String,
        #[arg(long, default_value_t = 100)]
        max_pages: u32,
        #[arg(long, default_value_t = 20)]
        max_depth: u32,
        #[arg(long, default_value_t = 1000)]
        delay_ms: u64,
        #[arg(long, default_value = "host", value_parser = ["host", "subdomains", "domain"])]
        scope: String,
        #[arg(long, default_value = "tsv", value_parser = ["tsv", "jsonl"])]
        format: String,
        /// Write here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        net: NetArgs,
    },
}

#[derive(clap::Args)]
struct NetArgs {
    /// Allow crawling loopback, private and link-local addresses.
    #[arg(long)]
    allow_private: bool,
    /// Map a host name for crawling, like curl: HOST=IP[:PORT] (HOST may be *.suffix).
    #[arg(long, value_name = "HOST=IP[:PORT]")]
    resolve: Vec<String>,
}

impl NetArgs {
    fn crawler_config(&self) -> Result<CrawlerConfig> {
        let mut resolve = Vec::new();
        for r in &self.resolve {
            resolve.push(
                r.parse::<ResolveRule>()
                    .map_err(|e| anyhow::anyhow!("--resolve {r}: {e}"))?,
            );
        }
        Ok(CrawlerConfig {
            allow_private: self.allow_private,
            resolve,
            ..CrawlerConfig::default()
        })
    }
}

fn main() {
    let cli = Cli::parse();
    let level = match cli.cmd {
        Cmd::Run { .. } => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn run(cli: Cli) -> Result<()> {
    let home = Home::resolve(cli.home)?;
    match cli.cmd {
        Cmd::Join { code, name } => {
            let e = runtime()?.block_on(worker::join(&home, &code, name))?;
            println!(
                "joined {} as host {} ({})",
                e.server_addr, e.host_id, e.name
            );
            println!("next: `beebot run`");
        }
        Cmd::Run { once, slots, net } => {
            anyhow::ensure!(
                (1..=MAX_SLOTS).contains(&slots),
                "--slots must be between 1 and {MAX_SLOTS}"
            );
            let opts = RunOptions {
                once,
                slots,
                crawler: net.crawler_config()?,
                ..RunOptions::default()
            };
            let stats = runtime()?.block_on(worker::run(home, opts, shutdown_signal()))?;
            println!(
                "scans finished {}, results accepted {}, duplicates {}, rejected {}, pages {}, links {}",
                stats.scans_finished,
                stats.uploads_accepted,
                stats.uploads_duplicate,
                stats.uploads_rejected,
                stats.pages,
                stats.links
            );
        }
        Cmd::Status => {
            let Some(e) = home.enrolment()? else {
                println!(
                    "not joined (home {}): run `beebot join CODE`",
                    home.config.display()
                );
                return Ok(());
            };
            println!(
                "project   {} (certificate sha256:{}…)",
                e.server_addr,
                &e.cert_sha256[..16]
            );
            println!("host      {} ({})", e.host_id, e.name);
            let (units, refused) = home.spooled_units(&e.project_verifying_key()?)?;
            let pending: Vec<u64> = units
                .iter()
                .map(|u| u.unit.unit_id)
                .filter(|id| matches!(home.result(*id), Ok(Some(_))))
                .collect();
            println!("units     {} held", units.len());
            for u in &units {
                let state = if pending.contains(&u.unit.unit_id) {
                    "finished, upload pending"
                } else {
                    "to scan"
                };
                println!("  unit {}  {}  {state}", u.unit.unit_id, u.unit.site);
            }
            println!("uploads   {} pending", pending.len());
            for r in refused {
                println!("refused   {r}");
            }
        }
        Cmd::Crawl {
            url,
            max_pages,
            max_depth,
            delay_ms,
            scope,
            format,
            out,
            net,
        } => {
            let seed = Url::parse(&url)
                .or_else(|_| Url::parse(&format!("http://{url}/")))
                .with_context(|| format!("`{url}` is not a URL"))?;
            let site = seed.host_str().context("the URL has no host")?.to_string();
            let scope: Scope = scope.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let format: Format = format.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            let spec = CrawlSpec {
                site: site.clone(),
                seed,
                scope,
                max_pages,
                max_depth,
                delay: Duration::from_millis(delay_ms),
                max_page_bytes: 2 * 1024 * 1024,
                max_duration: Duration::from_secs(24 * 3600),
                deadline: None,
                user_agent: format!(
                    "BeeBot/{} (+https://example.invalid/beebot)",
                    env!("CARGO_PKG_VERSION")
                ),
            };
            let cfg = net.crawler_config()?;
            let cancel = AtomicBool::new(false);
            let outcome = crawler::crawl(&spec, &cfg, &cancel, &mut |_, _| {});
            let sink: Box<dyn std::io::Write> = match &out {
                Some(p) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .with_context(|| format!("cannot write {}", p.display()))?,
                )),
                None => Box::new(std::io::stdout().lock()),
            };
            let mut w = ExportWriter::new(sink, format)?;
            for r in &outcome.records {
                w.write(&site, r)?;
            }
            w.finish()?;
            let s = &outcome.summary;
            eprintln!(
                "{site}: {} pages, {} bytes, {} outbound links to {} hosts, {} errors, {:.1}s{}",
                s.pages,
                s.bytes,
                outcome.records.len(),
                s.distinct_target_hosts,
                s.errors,
                s.elapsed_ms as f64 / 1000.0,
                s.stopped_by
                    .map(|r| format!(", stopped by {}", r.as_str()))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}
