//! `beebot crawl`: scan one site locally, without a server, and write its
//! links (TSV or JSON lines) to stdout or `--out`; its summary goes to
//! stderr.
//!
//! A scan that fetched nothing is an error that names why, after the
//! summary. The crawler's settings (`allow_private`, `proxy`) come from
//! the config file, the environment and the flags, as for `run`. Nothing
//! here talks to a server or writes the home.

use beebot_client::cancel::Cancel;
use std::time::Duration;

use anyhow::{Context, Result};
use url::Url;

use beebot_client::crawler::{self, progress, CrawlSpec};
use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::scope::Scope;

use beebot_client::home::Home;
use beebot_client::settings;

use super::args::{CrawlFlags, NetArgs};
use super::Said;

/// Longest page read by a local crawl, bytes.
const MAX_PAGE_BYTES: u64 = 2 * 1024 * 1024;
/// Time budget of a local crawl.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// Crawl the site and write its links.
pub fn crawl(home: &Home, flags: CrawlFlags, net: &NetArgs) -> Result<Said> {
    let spec = crawl_spec(&flags)?;
    let site = spec.site.clone();
    let format: Format = flags.format.parse()?;
    let (settings, _) = settings::load(home, &|k| std::env::var(k).ok(), &net.overrides())?;
    let mut cfg = net.crawler_config()?;
    cfg.allow_private = settings.allow_private;
    cfg.proxy = settings.proxy;
    let cancel = Cancel::new();
    // A live line on stderr when it is a terminal; nothing when piped.
    let mut line = progress::ProgressLine::stderr();
    let outcome = crawler::crawl_with_progress(&spec, &cfg, &cancel, &mut |p| line.update(p));
    line.finish();
    let sink: Box<dyn std::io::Write> = match &flags.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut w = ExportWriter::new(sink, format)?;
    for r in &outcome.records {
        w.write(&site, r)?;
    }
    w.finish()?;
    Ok(Said {
        warn: format!("{}\n", progress::summary_line(&site, &outcome.summary)),
        failed: progress::nothing_fetched(&site, &outcome.summary).map(anyhow::Error::msg),
        ..Said::default()
    })
}

/// The crawl the flags ask for: the URL (a bare host is taken as
/// `http://host/`), its scope and limits.
fn crawl_spec(flags: &CrawlFlags) -> Result<CrawlSpec> {
    let url = &flags.url;
    let seed = Url::parse(url)
        .or_else(|_| Url::parse(&format!("http://{url}/")))
        .with_context(|| format!("`{url}` is not a URL"))?;
    let site = seed.host_str().context("the URL has no host")?.to_string();
    let scope: Scope = flags.scope.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let max = crawler::MAX_CONNECTIONS_PER_HOST;
    if !(1..=max).contains(&flags.connections) {
        anyhow::bail!("--connections must be from 1 to {max}");
    }
    if flags.connections > 1 && flags.delay_ms > 0 {
        anyhow::bail!(
            "--connections above 1 needs --delay-ms 0: at a politeness delay a site gets one request at a time"
        );
    }
    Ok(CrawlSpec {
        site,
        seed,
        scope,
        max_pages: flags.max_pages,
        max_depth: flags.max_depth,
        delay: Duration::from_millis(flags.delay_ms),
        max_crawl_delay: crawler::robots::MAX_CRAWL_DELAY,
        max_page_bytes: MAX_PAGE_BYTES,
        max_duration: MAX_DURATION,
        user_agent: format!(
            "BeeBot/{} (+https://example.invalid/beebot)",
            env!("CARGO_PKG_VERSION")
        ),
        resume: None,
        excluded: Vec::new(),
        connections: flags.connections,
    })
}
