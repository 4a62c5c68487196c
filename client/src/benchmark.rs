//! The reference-site benchmark: scan the project's reference site (a
//! synthetic site of about 1,000 pages the server serves) with the real
//! crawler, no politeness delay, and report pages/s and KB/s. `beebot
//! benchmark` runs it by hand; `beebot run` runs it in the background on first
//! start and again every [`BENCHMARK_EVERY`], at a moment it holds no work
//! (so a benchmark never competes with real scans, and `--once` runs that
//! find work are not slowed), and sends the result to the server
//! (`Benchmark`), which sizes this host's work with it until real jobs tell
//! it more.
//!
//! The reference site is named by the project's server over the pinned
//! connection and usually lives beside it inside the company network, so the
//! background benchmark may reach private addresses (scope `host`: it never
//! leaves that one host). It obeys the client's bandwidth cap, and the work
//! loop cancels it when it exits (a `--once` run never waits for it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use url::Url;

use beebot_shared::proto::{Request, Response};
use beebot_shared::scope::Scope;

use crate::bandwidth::Bandwidth;
use crate::crawler::{self, CrawlProgress, CrawlSpec, CrawlerConfig};
use crate::home::{write_atomic, Home};
use crate::net::{Link, ServerId};

/// How often a running client benchmarks again.
pub const BENCHMARK_EVERY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Wait after a failed background benchmark before the next try.
pub const BENCHMARK_RETRY: Duration = Duration::from_secs(3600);

/// Pages scanned at most (the reference site has about 1,000).
pub const BENCHMARK_MAX_PAGES: u32 = 2_000;

/// Longest a benchmark runs.
pub const BENCHMARK_MAX_TIME: Duration = Duration::from_secs(120);

/// Bytes read per page at most.
const BENCHMARK_PAGE_BYTES: u64 = 2 * 1024 * 1024;

/// Largest `benchmark.json` read back.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// File in the client's data dir holding the last result sent.
const RECORD_FILE: &str = "benchmark.json";

/// One benchmark's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkRecord {
    /// When it ran, Unix milliseconds.
    pub at_ms: u64,
    /// The reference site scanned.
    pub url: String,
    pub pages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub pages_per_s: f64,
    pub kb_per_s: f64,
}

/// Why a benchmark gave no figures.
#[derive(Debug, thiserror::Error)]
pub enum BenchmarkError {
    #[error("the reference site {0:?} is not an http(s) URL")]
    BadUrl(String),
    #[error("the reference site gave no pages: {0}")]
    NoPages(String),
}

use beebot_shared::clock::now_ms;

use crate::cancel::Cancel;

/// Scan the reference site at `url` and measure. `on_progress` sees the crawl.
pub fn run(
    url: &str,
    cfg: &CrawlerConfig,
    cancel: &Cancel,
    on_progress: &mut dyn FnMut(&CrawlProgress),
) -> Result<BenchmarkRecord, BenchmarkError> {
    let seed = Url::parse(url.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https"))
        .ok_or_else(|| BenchmarkError::BadUrl(url.to_string()))?;
    let host = seed
        .host_str()
        .ok_or_else(|| BenchmarkError::BadUrl(url.to_string()))?;
    let site = match seed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let spec = CrawlSpec {
        seed: seed.clone(),
        max_pages: BENCHMARK_MAX_PAGES,
        max_depth: 1000,
        delay: Duration::ZERO,
        max_page_bytes: BENCHMARK_PAGE_BYTES,
        max_duration: BENCHMARK_MAX_TIME,
        ..CrawlSpec::new(&site, Scope::Host)
    };
    let out = crawler::crawl_with_progress(&spec, cfg, cancel, on_progress);
    let s = out.summary;
    if s.pages == 0 {
        return Err(BenchmarkError::NoPages(crawler::progress::summary_line(
            &site, &s,
        )));
    }
    let seconds = (s.elapsed_ms as f64 / 1000.0).max(0.001);
    Ok(BenchmarkRecord {
        at_ms: now_ms(),
        url: seed.to_string(),
        pages: s.pages,
        bytes: s.bytes,
        seconds,
        pages_per_s: s.pages as f64 / seconds,
        kb_per_s: s.bytes as f64 / 1024.0 / seconds,
    })
}

/// Whether a client whose last benchmark is `last` should benchmark at `now_ms`.
pub fn due(last: Option<&BenchmarkRecord>, now_ms: u64) -> bool {
    let every_ms = u64::try_from(BENCHMARK_EVERY.as_millis()).unwrap_or(u64::MAX);
    last.is_none_or(|r| now_ms.saturating_sub(r.at_ms) >= every_ms || r.at_ms > now_ms)
}

fn record_path(home: &Home) -> PathBuf {
    home.data.join(RECORD_FILE)
}

/// The last benchmark sent to the server, if any (an unreadable file is none).
pub fn load(home: &Home) -> Option<BenchmarkRecord> {
    use std::io::Read;
    let file = std::fs::File::open(record_path(home)).ok()?;
    let mut text = String::new();
    file.take(MAX_RECORD_BYTES).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Remember `record` as the last benchmark sent.
pub fn save(home: &Home, record: &BenchmarkRecord) -> anyhow::Result<()> {
    let text = serde_json::to_vec_pretty(record)?;
    write_atomic(&record_path(home), &text, false)
}

/// Connect to the enrolled project's server and say hello.
async fn hello(home: &Home) -> anyhow::Result<(Link, String)> {
    let enrolment = home.identity().require_enrolment()?;
    let key = home.identity().host_key(false)?;
    let server = ServerId {
        addr: enrolment.server_addr.clone(),
        server_name: enrolment.server_name.clone(),
        cert_sha256: enrolment.cert_fingerprint()?,
    };
    let link = Link::connect(&server).await?;
    match link.hello(enrolment.host_id, &key).await? {
        Response::Welcome { reference_site, .. } => Ok((link, reference_site)),
        other => anyhow::bail!("unexpected answer to hello: {other:?}"),
    }
}

/// The reference site the enrolled project's server names (empty: none).
pub async fn project_reference_site(home: &Home) -> anyhow::Result<String> {
    let (link, url) = hello(home).await?;
    link.close();
    Ok(url)
}

/// Send `record` to the enrolled project's server and remember it.
pub async fn send(home: &Home, record: &BenchmarkRecord, slots: u32) -> anyhow::Result<()> {
    let (link, _) = hello(home).await?;
    let answer = link
        .request(&Request::Benchmark {
            pages_per_s: record.pages_per_s,
            kb_per_s: record.kb_per_s,
            slots,
        })
        .await;
    link.close();
    match answer? {
        Response::Ack => save(home, record),
        other => anyhow::bail!("the server did not take the benchmark: {other:?}"),
    }
}

/// The background benchmark of `beebot run`: started when due and the
/// server has named a reference site, its result held until sent.
#[derive(Debug, Default)]
pub struct Background {
    /// The reference site the server named in `Welcome` (empty: none).
    pub reference_site: String,
    task: Option<tokio::task::JoinHandle<Result<BenchmarkRecord, BenchmarkError>>>,
    /// Stops the running benchmark (at its next request or wait).
    cancel: Arc<Cancel>,
    /// A result not yet acknowledged by the server.
    pending: Option<BenchmarkRecord>,
    /// No new try before this, after a failure.
    not_before: Option<std::time::Instant>,
}

impl Background {
    /// Start a benchmark if `may_start`, one is due and none runs; return a
    /// finished result to send, if there is one. `cfg` is the client's crawler
    /// configuration (private addresses are allowed for the reference site);
    /// `throttle` is the pause the client makes after every page of its
    /// scans, made here too so the figures are what the host delivers;
    /// `bandwidth` is the client's cap, which the benchmark obeys too.
    pub async fn poll(
        &mut self,
        home: &Home,
        cfg: &CrawlerConfig,
        may_start: bool,
        throttle: Duration,
        bandwidth: Option<Arc<Bandwidth>>,
    ) -> Option<BenchmarkRecord> {
        if let Some(task) = &self.task {
            if !task.is_finished() {
                return None;
            }
            if let Some(task) = self.task.take() {
                match task.await {
                    Ok(Ok(record)) => {
                        tracing::info!(
                            pages = record.pages,
                            pages_per_s = format!("{:.1}", record.pages_per_s),
                            kb_per_s = format!("{:.1}", record.kb_per_s),
                            "reference-site benchmark done"
                        );
                        self.pending = Some(record);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!("reference-site benchmark failed: {e}");
                        self.not_before = Some(std::time::Instant::now() + BENCHMARK_RETRY);
                    }
                    Err(e) => {
                        tracing::warn!("reference-site benchmark stopped: {e}");
                        self.not_before = Some(std::time::Instant::now() + BENCHMARK_RETRY);
                    }
                }
            }
        }
        if may_start
            && self.pending.is_none()
            && self.task.is_none()
            && !self.reference_site.is_empty()
            && self
                .not_before
                .is_none_or(|t| std::time::Instant::now() >= t)
            && due(load(home).as_ref(), now_ms())
        {
            let url = self.reference_site.clone();
            let cfg = CrawlerConfig {
                allow_private: true,
                ..cfg.clone()
            };
            tracing::info!(%url, "benchmarking against the reference site");
            self.cancel = Arc::new(Cancel::new());
            let cancel = self.cancel.clone();
            self.task = Some(tokio::task::spawn_blocking(move || {
                let mut paid = 0u64;
                run(&url, &cfg, &cancel, &mut |p| {
                    if let Some(b) = &bandwidth {
                        b.pay(p.bytes.saturating_sub(paid), &cancel);
                        paid = p.bytes;
                    }
                    if !throttle.is_zero() {
                        cancel.sleep(throttle);
                    }
                })
            }));
        }
        self.pending.clone()
    }

    /// Cancel a running benchmark (the work loop exits): its thread stops
    /// at its next request or wait, and nobody waits for it.
    pub fn stop(&mut self) {
        self.cancel.cancel();
        self.task = None;
    }

    /// The server acknowledged `record`: remember it, so the next is a week away.
    pub fn sent(&mut self, home: &Home, record: &BenchmarkRecord) {
        self.pending = None;
        if let Err(e) = save(home, record) {
            tracing::warn!("cannot save the benchmark result: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at_ms: u64) -> BenchmarkRecord {
        BenchmarkRecord {
            at_ms,
            url: "http://ref.test:4481/".into(),
            pages: 1000,
            bytes: 5_000_000,
            seconds: 2.0,
            pages_per_s: 500.0,
            kb_per_s: 2441.4,
        }
    }

    #[test]
    fn due_on_first_start_and_weekly() {
        let week = BENCHMARK_EVERY.as_millis() as u64;
        let t0 = 1_700_000_000_000;
        assert!(due(None, t0));
        assert!(!due(Some(&record(t0)), t0 + 1000));
        assert!(!due(Some(&record(t0)), t0 + week - 1));
        assert!(due(Some(&record(t0)), t0 + week));
        // A record from the future (clock moved back) is not trusted.
        assert!(due(Some(&record(t0 + 10_000)), t0));
    }

    #[test]
    fn records_are_saved_and_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home {
            config: dir.path().join("config"),
            data: dir.path().join("data"),
        };
        assert_eq!(load(&home), None);
        save(&home, &record(5)).expect("save");
        assert_eq!(load(&home), Some(record(5)));
        std::fs::write(record_path(&home), b"{ not json").expect("write");
        assert_eq!(load(&home), None);
    }

    #[tokio::test]
    async fn a_failed_background_benchmark_waits_before_the_next_try() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = Home {
            config: dir.path().join("config"),
            data: dir.path().join("data"),
        };
        // Nothing listens on port 1: the scan gets no page.
        let mut bg = Background {
            reference_site: "http://127.0.0.1:1/".into(),
            ..Background::default()
        };
        let cfg = CrawlerConfig {
            connect_timeout: Duration::from_millis(500),
            ..CrawlerConfig::default()
        };
        assert_eq!(
            bg.poll(&home, &cfg, false, Duration::ZERO, None).await,
            None
        );
        assert!(bg.task.is_none(), "not started while busy");
        assert_eq!(bg.poll(&home, &cfg, true, Duration::ZERO, None).await, None);
        assert!(bg.task.is_some(), "started when idle");
        for _ in 0..200 {
            if bg.task.as_ref().is_some_and(|t| t.is_finished()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(bg.poll(&home, &cfg, true, Duration::ZERO, None).await, None);
        assert!(bg.task.is_none(), "no new try right after a failure");
        assert!(bg.not_before.is_some());
        assert_eq!(load(&home), None);
    }

    #[test]
    fn bad_urls_are_refused() {
        let cancel = Cancel::new();
        for url in ["", "ftp://x.test/", "not a url"] {
            assert!(matches!(
                run(url, &CrawlerConfig::default(), &cancel, &mut |_| {}),
                Err(BenchmarkError::BadUrl(_))
            ));
        }
    }
}
