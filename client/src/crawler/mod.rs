//! The site crawler: breadth-first within a site's scope, polite (robots.txt,
//! Crawl-delay, one request at a time per host with a delay between), bounded by
//! the unit's limits, returning the site's outbound links and a scan summary.
//!
//! It knows nothing of the protocol: a work unit becomes a [`CrawlSpec`], the
//! result a [`CrawlOutput`]. Blocking code (ureq); run it on a thread of its own.
//!
//! - [`frontier`]: bounded queue, each canonical URL at most once;
//! - [`redirect`]: redirect decisions (pure);
//! - [`robots`]: robots.txt policy (pure);
//! - [`resolve`]: `--resolve` rules and the private-address guard (of the
//!   resolver, and of targets sent through a proxy);
//! - [`trap`]: crawler-trap rules (repeated path segments);
//! - [`fetch`]: the HTTP shell;
//! - `page`: one page of a crawl (its request, redirects, links taken);
//! - `polite`: robots.txt asked per origin, the wait between requests;
//! - `state`: the scan state of a crawl, fitted so that it always encodes;
//! - `parse`: below a delay of `PIPELINE_BELOW_DELAY` (10 ms), a page parsed
//!   on a helper thread while the next request is in flight;
//! - `ahead`: with `CrawlSpec::connections` above 1 (only `beebot crawl
//!   --connections N --delay-ms 0` sets it; at most 4 a site), N helpers
//!   make the requests, the next queued pages' ahead of their turn;
//! - `progress`: the live progress line and the summary a person reads.
//!
//! Every bound is explicit and counted in the summary when it bites: pages,
//! depth, bytes per page (the part read is still parsed), HTML content types
//! only, connect/read/whole-request timeouts, the time budget, URL
//! length, trap paths, links kept per page, frontier size, link records, and
//! robots.txt size. Character encodings other than UTF-8 are decoded
//! ([`beebot_shared::extract::extract_page_links`]).
//!
//! A crawl never stops at a unit's deadline (deadlines find dead hosts, they
//! do not cut live scans): the only early stops are a cancel and the time
//! budget. A crawl stopped early returns its [`ScanState`] (queue, digests of
//! the URLs seen, robots.txt answers, pages taken), and a crawl given one
//! ([`CrawlSpec::resume`]) goes on from there without requesting a URL twice.
//! At every page boundary the caller may take a [`Snapshot`] (a checkpoint).
//!
//! Counting: a *page* is one URL taken from the frontier and answered with any
//! HTTP status (its in-scope redirect hops included); the page cap counts those
//! and the URLs whose first request failed (`errors`). Bytes are the HTML bodies
//! read. robots.txt requests count in neither, but their failures are errors.
//!
//! https is fetched through rustls (ring) with the webpki root certificates.
//!
//! It never requests a host the unit excludes (robots.txt included), nor a
//! private, loopback or link-local address unless the spec allows them.

mod ahead;
pub mod fetch;
pub mod frontier;
mod kept;
mod page;
mod parse;
mod polite;
pub mod progress;
pub mod redirect;
pub mod resolve;
pub mod robots;
mod state;
pub mod trap;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use beebot_shared::limits::{MAX_DELAY_MS, MAX_PAGES_PER_SITE, MAX_URL_LEN};
use beebot_shared::linkfile::{LinkRecord, ScanSummary, StopReason};
use beebot_shared::scanstate::{url_digest, RobotsAnswer, ScanState};
use beebot_shared::scope::{canonical_url, seed_url, Exclusion, Scope, SiteScope};
use url::Url;

use ahead::Answer;
use fetch::{BodyWanted, FetchError, Fetcher};
use frontier::{Frontier, MAX_FRONTIER_URLS};
use robots::{Robots, MAX_CRAWL_DELAY};

pub use crate::cancel::Cancel;
pub use ahead::MAX_CONNECTIONS_PER_HOST;
pub use parse::PIPELINE_BELOW_DELAY;
pub use state::{encode_state, fit_state};

pub use resolve::{
    classify_address, AddressClass, AddressRefused, Lookup, ResolveRule, ResolveRuleError,
};

/// The User-Agent of BeeBot: product token (matched against robots.txt groups)
/// and a contact URL.
pub const DEFAULT_USER_AGENT: &str = concat!(
    "BeeBot/",
    env!("CARGO_PKG_VERSION"),
    " (+https://example.invalid/beebot-grid)"
);

/// Largest page body read, whatever the unit asks: bounds memory per page.
pub const MAX_PAGE_BYTES_CAP: u64 = 64 * 1024 * 1024;

/// Hosts whose robots.txt one crawl keeps (scopes wider than a host): beyond
/// this, URLs on new hosts are skipped.
pub const MAX_ROBOTS_HOSTS: usize = 1024;

/// Connection-level failures in a row (no answer at all: connection refused
/// or reset, host not found, timeouts) after which the crawl asks whether the
/// site still answers at all (its robots.txt); if not, this host or the site
/// went offline, and the scan stops with [`StopReason::Offline`], the failed
/// URLs back at the head of its queue, instead of failing its whole queue.
pub const MAX_CONSECUTIVE_CONN_FAILURES: usize = 5;

/// How long a request sent within the crawl's time budget may run past it
/// (within the request timeout): cutting a request the site is answering
/// would make the continuing scan ask for that page again.
pub const REQUEST_GRACE: Duration = Duration::from_secs(5);

/// What to crawl and within which limits (from a work unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlSpec {
    /// The site's name (its host, maybe with a port), as in the target set.
    pub site: String,
    /// Where the crawl starts.
    pub seed: Url,
    pub scope: Scope,
    /// Pages fetched at most (capped at [`MAX_PAGES_PER_SITE`]).
    pub max_pages: u32,
    /// Links followed from the seed at most (the seed is depth 0).
    pub max_depth: u32,
    /// Pause between two requests to one host (capped at [`MAX_DELAY_MS`]);
    /// a longer robots.txt Crawl-delay wins, up to `max_crawl_delay`.
    pub delay: Duration,
    /// Longest robots.txt Crawl-delay honoured (capped at [`MAX_CRAWL_DELAY`]):
    /// a site asking for more is crawled at this pace.
    pub max_crawl_delay: Duration,
    /// Body bytes read per page; the rest is ignored, the part read still parsed.
    pub max_page_bytes: u64,
    /// Wall time of the whole crawl (the round's per-unit time budget).
    pub max_duration: Duration,
    pub user_agent: String,
    /// Where an earlier scan of the site stopped: the crawl starts from its
    /// queue (not the seed), skips what it saw, obeys its robots.txt answers
    /// without asking again, and counts its pages against `max_pages`.
    pub resume: Option<ScanState>,
    /// Hosts never requested (robots.txt included), though inside the scope:
    /// links to them are recorded as outbound links.
    pub excluded: Vec<Exclusion>,
    /// Requests a site may have unanswered at once, 1 to
    /// [`MAX_CONNECTIONS_PER_HOST`]: more than one only where the site's
    /// operator allows it (`beebot crawl --connections`), and then only to
    /// an origin with no delay at all. A grid unit is always crawled with 1.
    pub connections: u8,
}

impl CrawlSpec {
    /// A spec for `site` (as [`beebot_shared::scope::parse_site`] gives it) with
    /// the defaults of an interactive crawl: 1000 pages, depth 20, 1 s delay,
    /// 1 MiB pages, one hour, from the seed.
    pub fn new(site: &str, scope: Scope) -> CrawlSpec {
        CrawlSpec {
            site: site.to_string(),
            seed: seed_url(site),
            scope,
            max_pages: 1000,
            max_depth: 20,
            delay: Duration::from_secs(1),
            max_crawl_delay: MAX_CRAWL_DELAY,
            max_page_bytes: 1024 * 1024,
            max_duration: Duration::from_secs(3600),
            user_agent: DEFAULT_USER_AGENT.to_string(),
            resume: None,
            excluded: Vec::new(),
            connections: 1,
        }
    }
}

/// How this client crawls, whatever the unit (from the client's configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlerConfig {
    /// Allow loopback, private, link-local and other non-public addresses (tests, intranets).
    pub allow_private: bool,
    /// Fixed addresses for hosts, consulted before DNS.
    pub resolve: Vec<ResolveRule>,
    /// Longest wait for a TCP connection.
    pub connect_timeout: Duration,
    /// Longest wait for any one read (the response head's included) or
    /// write of a request.
    pub read_timeout: Duration,
    /// Longest one request may take in all.
    pub request_timeout: Duration,
    /// HTTP proxy for every request (`http://host:port`). The proxy's own
    /// address is trusted even when private; through a proxy the target names
    /// are resolved, and their addresses chosen, by the proxy, so unless
    /// `allow_private` each target is checked here first: IP addresses and
    /// names that resolve here (rules, `lookup`) to a non-public address are
    /// refused, names that do not resolve here go to the proxy.
    pub proxy: Option<String>,
    /// How names without a `--resolve` rule are looked up here: the system
    /// resolver, or a fixed table (tests).
    pub lookup: Lookup,
}

impl Default for CrawlerConfig {
    fn default() -> Self {
        CrawlerConfig {
            allow_private: false,
            resolve: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(20),
            request_timeout: Duration::from_secs(60),
            proxy: None,
            lookup: Lookup::System,
        }
    }
}

/// What a crawl found.
#[derive(Clone, Debug, PartialEq)]
pub struct CrawlOutput {
    /// One record per distinct (source page, target URL) leaving the scope, in
    /// the order found: those not taken by a snapshot (all of them when
    /// none was taken).
    pub records: Vec<LinkRecord>,
    pub summary: ScanSummary,
    /// Where the crawl stopped, when it stopped early (cancelled, or out of
    /// its time budget): another crawl resumes from it.
    pub state: Option<ScanState>,
}

/// Takes a [`Snapshot`] of the crawl at this page boundary: its state, and
/// the records found since the previous snapshot, taken out of the crawl.
pub type TakeSnapshot<'a> = &'a mut dyn FnMut() -> Snapshot;

/// Called after each page with the progress and a way to take a snapshot.
/// Below [`PIPELINE_BELOW_DELAY`] a page's links may come in with the next
/// page's report (they are being parsed meanwhile); a snapshot and the
/// summary always hold them, and so does the report of a page after which
/// the frontier was empty.
pub type OnPage<'a> = &'a mut dyn FnMut(&CrawlProgress, TakeSnapshot<'_>);

/// A crawl at a page boundary: what a checkpoint keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Where the crawl stands (pages taken include the resumed state's).
    pub state: ScanState,
    /// The records found since the previous snapshot (see [`crawl_resumable`]).
    pub new_records: Vec<LinkRecord>,
    /// This crawl's summary so far (`stopped_by` empty).
    pub summary: ScanSummary,
}

/// Where a crawl stands, reported after each page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrawlProgress {
    /// Pages answered so far.
    pub pages: u64,
    /// Outbound link records so far.
    pub links: u64,
    /// URLs waiting in the frontier.
    pub queued: u64,
    /// Body bytes read so far.
    pub bytes: u64,
    /// Failed requests so far.
    pub errors: u64,
    /// Page requests answered (redirect hops included, robots.txt not) and
    /// their response times summed, ms: request sent to body read.
    pub responses: u64,
    pub response_ms: u64,
}

/// Crawl one site. Checks `cancel` between requests and while waiting, and
/// calls `on_progress(pages, links)` after each page.
pub fn crawl(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &Cancel,
    on_progress: &mut dyn FnMut(u64, u64),
) -> CrawlOutput {
    crawl_with_progress(spec, cfg, cancel, &mut |p| on_progress(p.pages, p.links))
}

/// [`crawl`], reporting the whole [`CrawlProgress`] after each page.
pub fn crawl_with_progress(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &Cancel,
    on_progress: &mut dyn FnMut(&CrawlProgress),
) -> CrawlOutput {
    crawl_resumable(spec, cfg, cancel, &mut |p, _| on_progress(p))
}

/// [`crawl_with_progress`], also handing the caller, after each page, a way to
/// take a [`Snapshot`] of the crawl there: `snapshot()` returns the state
/// and the records found since the previous snapshot, which leave the crawl
/// (a caller that keeps them holds the only copy, and the output's
/// `records` are only those after the last snapshot).
pub fn crawl_resumable(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &Cancel,
    on_page: OnPage<'_>,
) -> CrawlOutput {
    crawl_quiet_since(spec, None, cfg, cancel, on_page)
}

/// [`crawl_resumable`], where any origin may have been asked at
/// `quiet_since` by a run of this client before this one (stopped and
/// started again at once, or killed): the first request to each waits a
/// delay from then (`None`: as [`crawl_resumable`]).
pub fn crawl_quiet_since(
    spec: &CrawlSpec,
    quiet_since: Option<Instant>,
    cfg: &CrawlerConfig,
    cancel: &Cancel,
    on_page: OnPage<'_>,
) -> CrawlOutput {
    let mut crawler = Crawler::new(spec, cfg, cancel);
    crawler.quiet_since = crawler.quiet_since.max(quiet_since);
    let stopped_by = crawler.run(on_page);
    crawler.finish(stopped_by)
}

/// One crawl in progress.
struct Crawler<'a> {
    spec: &'a CrawlSpec,
    cancel: &'a Cancel,
    scope: SiteScope,
    fetcher: Arc<Fetcher>,
    /// Helpers asking for the next pages on connections of their own
    /// (`spec.connections` above 1).
    ahead: Option<ahead::Ahead>,
    /// robots.txt group name of our User-Agent.
    agent_token: String,
    started: Instant,
    frontier: Frontier,
    /// Digests of the URLs requested (as page or redirect hop), by this crawl
    /// or the one it resumes: never requested again.
    fetched: HashSet<u64>,
    /// robots.txt policy per origin (`http://host:port`).
    robots: HashMap<String, Robots>,
    /// The robots.txt answers behind `robots`, for the scan state (bodies up
    /// to [`MAX_STATE_ROBOTS_BYTES`] in all; beyond, a resumed scan asks again).
    robots_answers: Vec<RobotsAnswer>,
    robots_answer_bytes: usize,
    /// Pages the resumed state had taken already (they count against the cap).
    pages_before: u64,
    /// When the last request to each origin finished.
    last_request: HashMap<String, Instant>,
    /// An origin not in `last_request` may have been asked at this moment
    /// (by the scan this one resumes, or a run of the client before this
    /// one): its first request waits a delay from it.
    quiet_since: Option<Instant>,
    /// Records not yet taken by a snapshot.
    records: Vec<LinkRecord>,
    /// Records found by this crawl, those taken by snapshots included.
    links: u64,
    target_hosts: HashSet<String>,
    status_counts: BTreeMap<u16, u64>,
    /// Frontier entries answered with some HTTP status.
    pages: u64,
    /// Frontier entries whose first request failed.
    failed_pages: u64,
    bytes: u64,
    errors: u64,
    /// Page requests answered and their response times summed (progress).
    responses: u64,
    response_time: Duration,
    robots_disallowed: u64,
    records_dropped: u64,
    /// What the bounds did: the summary's bound counters (`timeouts` and on).
    bounds: ScanSummary,
    /// The requests that got no answer since the last one that did: URL,
    /// depth, and whether it counted as a failed page (a frontier entry,
    /// not a redirect hop). Put back in the queue when the site is offline.
    unanswered: Vec<(Url, u32, bool)>,
    /// Whether the last robots.txt fetch got no answer at all.
    robots_unanswered: bool,
    /// Why the last robots.txt fetch that got no answer failed (the name,
    /// the connection, the address guard): the scan's stop when it was the seed's.
    robots_failure: Option<StopReason>,
    /// The helper parsing pages while the next request is in flight (a
    /// delay below [`PIPELINE_BELOW_DELAY`]), and the page it is parsing
    /// (URL, depth), whose links are taken before anything reads the crawl.
    parser: Option<parse::Parser>,
    pending: Option<(Url, u32)>,
    /// The spec's limits, capped.
    max_pages: u64,
    delay: Duration,
    max_crawl_delay: Duration,
    max_page_bytes: u64,
    request_timeout: Duration,
}

/// How one page (frontier entry) went.
enum PageResult {
    /// A response came back (any status).
    Answered,
    /// The first request failed.
    Failed,
    /// Cancelled or out of time while waiting to send.
    Stopped(StopReason),
}

impl<'a> Crawler<'a> {
    /// A crawl of `spec`, from its seed or from the state it resumes.
    fn new(spec: &'a CrawlSpec, cfg: &CrawlerConfig, cancel: &'a Cancel) -> Crawler<'a> {
        // Groups are matched by our product token, whatever the User-Agent says.
        let agent_token = robots::ROBOTS_TOKEN.to_string();
        let mut frontier = Frontier::new(MAX_FRONTIER_URLS);
        let mut fetched = HashSet::new();
        let mut robots = HashMap::new();
        let mut robots_answers = Vec::new();
        let mut robots_answer_bytes = 0;
        let mut pages_before = 0;
        // A resumed scan's sites may have had a request from the scan it
        // continues a moment ago (the client stopped and started again
        // at once, or another host handed it over): each origin it asks,
        // the seed's and those reached by redirects included, waits a
        // whole delay before its first request.
        let mut quiet_since = None;
        if let Some(state) = &spec.resume {
            quiet_since = Some(Instant::now());
            frontier = Frontier::resume(MAX_FRONTIER_URLS, &state.queue, &state.seen);
            // Seen and not queued: requested by an earlier scan (or skipped
            // by its robots.txt rules, which still hold).
            let queued: HashSet<u64> = state.queue.iter().map(|q| url_digest(&q.url)).collect();
            fetched = state
                .seen
                .iter()
                .copied()
                .filter(|d| !queued.contains(d))
                .collect();
            for a in state.robots.iter().take(MAX_ROBOTS_HOSTS) {
                robots.insert(
                    a.origin.clone(),
                    Robots::from_response(a.status, &a.body, &agent_token),
                );
                robots_answer_bytes += a.body.len();
                robots_answers.push(a.clone());
            }
            pages_before = state.pages_done;
        }
        let connections = spec.connections.clamp(1, MAX_CONNECTIONS_PER_HOST);
        let fetcher = Arc::new(Fetcher::new(cfg, &spec.user_agent, connections));
        // Nothing could be asked for ahead at a politeness delay.
        let ahead = if spec.delay.is_zero() {
            ahead::Ahead::start(&fetcher, connections)
        } else {
            None
        };
        Crawler {
            spec,
            cancel,
            scope: SiteScope::new(&spec.site, spec.scope),
            fetcher,
            ahead,
            agent_token,
            started: Instant::now(),
            frontier,
            fetched,
            robots,
            robots_answers,
            robots_answer_bytes,
            pages_before,
            last_request: HashMap::new(),
            quiet_since,
            records: Vec::new(),
            links: 0,
            target_hosts: HashSet::new(),
            status_counts: BTreeMap::new(),
            pages: 0,
            failed_pages: 0,
            bytes: 0,
            errors: 0,
            responses: 0,
            response_time: Duration::ZERO,
            robots_disallowed: 0,
            records_dropped: 0,
            bounds: ScanSummary::default(),
            unanswered: Vec::new(),
            robots_unanswered: false,
            robots_failure: None,
            parser: if spec.delay < PIPELINE_BELOW_DELAY {
                parse::Parser::start()
            } else {
                None
            },
            pending: None,
            max_pages: u64::from(spec.max_pages.min(MAX_PAGES_PER_SITE)),
            delay: spec.delay.min(Duration::from_millis(MAX_DELAY_MS)),
            max_crawl_delay: spec.max_crawl_delay.min(MAX_CRAWL_DELAY),
            max_page_bytes: spec.max_page_bytes.min(MAX_PAGE_BYTES_CAP),
            request_timeout: cfg.request_timeout,
        }
    }

    /// The next frontier entry; when the frontier is empty, the links of
    /// the page being parsed are taken first (they may queue more).
    fn next_in_frontier(&mut self) -> Option<(Url, u32)> {
        if let Some(next) = self.frontier.pop() {
            return Some(next);
        }
        self.take_pending_links();
        self.frontier.pop()
    }

    /// Frontier entries taken by this crawl and the scans it resumes.
    fn pages_taken(&self) -> u64 {
        self.pages_before + self.pages + self.failed_pages
    }

    /// The crawl loop; returns the limit that stopped it, if any.
    fn run(&mut self, on_page: OnPage<'_>) -> Option<StopReason> {
        let seed = canonical_url(&self.spec.seed);
        if let Some(stop) = self.begin(&seed) {
            return Some(stop);
        }
        // A fresh crawl starts at the seed; a resumed one where it stopped
        // (its first page is the seed when it stopped before any).
        let mut first = self.pages_before == 0;
        // Each turn takes one URL off the bounded frontier, which never hands out
        // a URL twice; the page cap bounds the turns that fetch. A turn that
        // stops before its request puts its URL back, so the state keeps it.
        while let Some((url, depth)) = self.next_in_frontier() {
            let result = match self.take_turn(url, depth, &seed) {
                Ok(Some(result)) => result,
                Ok(None) => continue,
                Err(stop) => return Some(stop),
            };
            if self.frontier.is_empty() {
                // Nothing else to fetch meanwhile: the page's own links
                // come in before its report (so the last report is whole).
                self.take_pending_links();
            }
            let progress = self.progress();
            on_page(&progress, &mut || self.snapshot());
            match result {
                PageResult::Answered => {}
                PageResult::Failed if first => return Some(StopReason::SeedUnreachable),
                PageResult::Failed => {}
                PageResult::Stopped(stop) => return Some(stop),
            }
            first = false;
        }
        if self.frontier.dropped() > 0 {
            return Some(StopReason::FrontierFull);
        }
        None
    }

    /// Where the crawl stands (its pages' links taken so far).
    fn progress(&self) -> CrawlProgress {
        CrawlProgress {
            pages: self.pages,
            links: self.links,
            queued: self.frontier.len() as u64,
            bytes: self.bytes,
            errors: self.errors,
            responses: self.responses,
            response_ms: u64::try_from(self.response_time.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Check the seed and queue it (a fresh crawl), and ask its host's
    /// robots.txt, which decides whether we crawl at all. `Some` is why the
    /// crawl stops before its first page.
    fn begin(&mut self, seed: &Url) -> Option<StopReason> {
        if !matches!(seed.scheme(), "http" | "https") || seed.as_str().len() > MAX_URL_LEN {
            self.errors += 1;
            return Some(StopReason::SeedUnreachable);
        }
        if self.spec.resume.is_none() {
            self.frontier.push(seed.clone(), 0);
        }
        if let Some(stop) = self.limit_reached() {
            return Some(stop);
        }
        if self.is_excluded(seed) {
            // Never issued by the server: nothing of the site is requested.
            tracing::warn!(site = %self.spec.site, "the site is excluded from crawling");
            return Some(StopReason::SeedUnreachable);
        }
        // robots.txt of the seed's host decides whether we crawl at all.
        if let Err(stop) = self.ensure_robots(seed) {
            return Some(stop);
        }
        if self.robots_for(seed).is_none_or(Robots::is_unavailable) {
            if self.spec.resume.is_some() && self.robots_unanswered {
                // The site answered the scans this one resumes: no answer
                // now means it (or this host) is offline, not that its
                // robots.txt forbids a scan. The queue waits.
                self.robots.remove(&origin(seed));
                return Some(StopReason::Offline);
            }
            // Why the site could not be asked: its name, its address, its
            // answer (robots.txt 5xx, a timeout: `RobotsUnavailable`).
            return Some(
                self.robots_failure
                    .take()
                    .unwrap_or(StopReason::RobotsUnavailable),
            );
        }
        None
    }

    /// One turn with a URL off the frontier: `Ok(None)` when it is skipped
    /// (requested already, out of the scope or excluded, disallowed), the
    /// page's result when fetched, `Err` when the crawl stops before its
    /// request (the URL put back).
    fn take_turn(
        &mut self,
        url: Url,
        depth: u32,
        seed: &Url,
    ) -> Result<Option<PageResult>, StopReason> {
        if let Some(stop) = self.limit_reached() {
            self.frontier.unpop(url, depth);
            return Err(stop);
        }
        if self.fetched.contains(&url_digest(url.as_str())) {
            self.forget_ahead(&url);
            return Ok(None); // already reached through a redirect
        }
        if self.is_excluded(&url) || (url != *seed && !self.scope.contains(&url)) {
            // Queued by an earlier scan before the host was excluded, or
            // under a wider scope than this unit's.
            self.forget_ahead(&url);
            return Ok(None);
        }
        if self.pages_taken() >= self.max_pages {
            self.frontier.unpop(url, depth);
            return Err(StopReason::MaxPages);
        }
        if let Err(stop) = self.ensure_robots(&url) {
            self.frontier.unpop(url, depth);
            return Err(stop);
        }
        match self.robots_for(&url) {
            Some(robots) if robots.allowed(&url) => {}
            Some(robots) if !robots.is_unavailable() => {
                self.robots_disallowed += 1;
                return Ok(None);
            }
            // Another host of the scope without usable robots.txt.
            _ => return Ok(None),
        }
        // (Never asked for ahead: a URL is only asked for ahead once its
        // robots.txt allows it.)
        let mut result = self.fetch_page(url, depth);
        if self.unanswered.len() >= MAX_CONSECUTIVE_CONN_FAILURES {
            match self.still_online(seed) {
                Ok(true) => self.unanswered.clear(), // those pages fail alone
                Ok(false) => {
                    self.put_back_unanswered();
                    result = PageResult::Stopped(StopReason::Offline);
                }
                Err(stop) => {
                    self.put_back_unanswered();
                    result = PageResult::Stopped(stop);
                }
            }
        }
        Ok(Some(result))
    }

    /// The summary so far.
    fn summary(&self, stopped_by: Option<StopReason>) -> ScanSummary {
        ScanSummary {
            pages: self.pages,
            bytes: self.bytes,
            links: self.links,
            distinct_target_hosts: self.target_hosts.len() as u64,
            errors: self.errors,
            elapsed_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            stopped_by,
            status_counts: self.status_counts.iter().map(|(k, v)| (*k, *v)).collect(),
            robots_disallowed: self.robots_disallowed,
            frontier_dropped: self.frontier.dropped(),
            records_dropped: self.records_dropped,
            ..self.bounds.clone()
        }
    }

    /// The crawl's output: its records, summary, and its state when it
    /// stopped before its natural end.
    fn finish(mut self, stopped_by: Option<StopReason>) -> CrawlOutput {
        self.take_pending_links();
        if self.records_dropped > 0 {
            tracing::warn!(
                site = %self.spec.site,
                dropped = self.records_dropped,
                "link records beyond the link-file limit were dropped"
            );
        }
        let mut summary = self.summary(stopped_by);
        let state = stopped_by
            .filter(|s| !s.is_natural_end())
            .map(|_| self.state())
            .map(|(state, cut)| {
                summary.frontier_dropped += cut;
                state
            });
        CrawlOutput {
            records: self.records,
            summary,
            state,
        }
    }

    /// Cancel, or the crawl's time budget (the only early stops).
    fn limit_reached(&self) -> Option<StopReason> {
        if self.cancel.is_set() {
            return Some(StopReason::Cancelled);
        }
        if self.time_left().is_zero() {
            return Some(StopReason::MaxTime);
        }
        None
    }

    /// Time left before the budget runs out.
    fn time_left(&self) -> Duration {
        self.spec
            .max_duration
            .saturating_sub(self.started.elapsed())
    }

    /// Whether a request timed out because the crawl's time budget ran out
    /// (its timeout was cut to the time left), not because of the site.
    fn cut_by_budget(&self, result: &Result<fetch::Fetched, FetchError>) -> bool {
        let timed_out = match result {
            Err(FetchError::Timeout(_)) => true,
            Ok(r) => r.timed_out,
            Err(_) => false,
        };
        timed_out && self.time_left().is_zero()
    }

    /// Timeout of the next request: the configured one, or less when the
    /// crawl's time runs out sooner, plus [`REQUEST_GRACE`]: a request sent
    /// within the budget may finish, since one cut after the site answered
    /// is asked again by the scan that continues.
    fn request_timeout(&self) -> Duration {
        self.request_timeout
            .min(self.time_left() + REQUEST_GRACE)
            .max(Duration::from_millis(1))
    }

    /// One request of the crawl, and how long it took: made by the
    /// helpers when there are (see [`ahead`]), else here. A page's first
    /// request (`page`) sends the pages queued after it ahead, as far as
    /// helpers are free.
    fn get(&mut self, url: &Url, body: BodyWanted, max_bytes: u64, page: bool) -> Answer {
        let timeout = self.request_timeout();
        let pending = match &mut self.ahead {
            Some(ahead) => ahead.request(url, body, max_bytes, timeout),
            None => None,
        };
        if page && pending.is_some() {
            self.ask_ahead();
        }
        if let Some(answer) = pending.and_then(ahead::Pending::wait) {
            return answer;
        }
        let sent = Instant::now();
        let result = self.fetcher.get(url, max_bytes, body, timeout);
        (result, sent.elapsed())
    }

    /// Ask for the pages queued next ahead, as far as helpers are free:
    /// only those the crawl's next turns would request now, within the
    /// page cap.
    fn ask_ahead(&mut self) {
        let Some(ahead) = &self.ahead else { return };
        let mut free = ahead.free();
        // Pages the cap leaves after the current one and those ahead.
        let mut cap = self.max_pages.saturating_sub(
            self.pages_taken()
                .saturating_add(1)
                .saturating_add(ahead.pending() as u64),
        );
        let mut wanted = Vec::new();
        for url in self.frontier.peek(ahead.look_ahead()) {
            if free == 0 || cap == 0 {
                break;
            }
            if ahead.has(url) || self.turn_skips(url) {
                continue; // counted already, or never a page of the cap
            }
            // A page the crawl will take, whether asked for now or at its turn.
            cap -= 1;
            if self.no_wait_for(url) {
                wanted.push(url.clone());
                free -= 1;
            }
        }
        let (max_bytes, timeout) = (self.max_page_bytes, self.request_timeout());
        if let Some(ahead) = &mut self.ahead {
            for url in &wanted {
                ahead.ask_ahead(url, max_bytes, timeout);
            }
        }
    }

    /// Whether the turn of queued `url` would skip it as things stand:
    /// requested already, excluded, out of the scope, or its robots.txt read
    /// and not allowing it.
    fn turn_skips(&self, url: &Url) -> bool {
        self.fetched.contains(&url_digest(url.as_str()))
            || self.is_excluded(url)
            || !self.scope.contains(url)
            || self
                .robots_for(url)
                .is_some_and(|r| r.is_unavailable() || !r.allowed(url))
    }

    /// Whether a turn of `url` not skipped would request it at once: no
    /// politeness delay, and its robots.txt read and asking for no
    /// Crawl-delay.
    fn no_wait_for(&self, url: &Url) -> bool {
        self.delay.is_zero()
            && self
                .robots_for(url)
                .is_some_and(|r| r.crawl_delay().is_none_or(|d| d.is_zero()))
    }

    /// Throw away the answer to `url` if it was asked for ahead.
    fn forget_ahead(&mut self, url: &Url) {
        if let Some(ahead) = &mut self.ahead {
            ahead.forget(url);
        }
    }

    /// Whether `url` is on a host excluded from crawling.
    fn is_excluded(&self, url: &Url) -> bool {
        self.spec.excluded.iter().any(|e| e.covers_url(url))
    }
}

/// `http://host:port` of a URL: politeness and robots.txt are per origin.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

#[cfg(test)]
mod tests {
    use super::polite::unreachable_cause;
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    /// A site that cannot be asked at all is named by its cause: its name,
    /// its port, the address guard; only an answer that is no use (or no
    /// answer in time) is `robots-unavailable`.
    #[test]
    fn a_site_never_reached_is_named_by_its_cause() {
        // A port where nothing listens: bound, then dropped.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let cfg = |allow_private| CrawlerConfig {
            allow_private,
            resolve: vec![
                "gone.test=none".parse().expect("rule"),
                format!("closed.test=127.0.0.1:{port}")
                    .parse()
                    .expect("rule"),
            ],
            lookup: Lookup::Fixed(Vec::new()),
            ..CrawlerConfig::default()
        };
        let stop = |site: &str, allow_private| {
            let out = crawl(
                &CrawlSpec::new(site, Scope::Host),
                &cfg(allow_private),
                &Cancel::new(),
                &mut |_, _| {},
            );
            assert_eq!(out.summary.pages, 0, "{site}: {:?}", out.summary);
            out.summary.stopped_by
        };
        assert_eq!(stop("gone.test", true), Some(StopReason::DnsFailed));
        assert_eq!(
            stop("closed.test", true),
            Some(StopReason::ConnectionRefused)
        );
        assert_eq!(stop("closed.test", false), Some(StopReason::PrivateAddress));
        assert_eq!(
            unreachable_cause(&FetchError::Timeout("slow".into())),
            StopReason::RobotsUnavailable
        );
    }

    #[test]
    fn only_a_crawl_below_the_pipeline_delay_parses_beside_its_requests() {
        let cfg = CrawlerConfig::default();
        let cancel = Cancel::new();
        let at = |delay| {
            let spec = CrawlSpec {
                delay,
                ..CrawlSpec::new("a.test", Scope::Host)
            };
            Crawler::new(&spec, &cfg, &cancel).parser.is_some()
        };
        assert!(PIPELINE_BELOW_DELAY > Duration::ZERO);
        assert!(at(Duration::ZERO));
        assert!(at(PIPELINE_BELOW_DELAY - Duration::from_millis(1)));
        assert!(!at(PIPELINE_BELOW_DELAY));
        assert!(!at(Duration::from_secs(1)));
    }

    #[test]
    fn robots_groups_are_matched_by_our_token_whatever_the_user_agent() {
        let spec = CrawlSpec {
            user_agent: "Mozilla/5.0 (compatible; Crawler/2; +https://x.test/)".into(),
            ..CrawlSpec::new("a.test", Scope::Host)
        };
        let cfg = CrawlerConfig::default();
        let cancel = Cancel::new();
        assert_eq!(Crawler::new(&spec, &cfg, &cancel).agent_token, "BeeBot");
    }

    #[test]
    fn excluded_hosts_are_not_queued_and_a_queued_one_is_skipped() {
        let spec = CrawlSpec {
            excluded: vec![Exclusion::parse("b.a.test", false).expect("valid")],
            ..CrawlSpec::new("a.test", Scope::Subdomains)
        };
        let cfg = CrawlerConfig::default();
        let cancel = Cancel::new();
        let c = Crawler::new(&spec, &cfg, &cancel);
        assert!(c.is_excluded(&url("http://www.b.a.test:8080/x")));
        assert!(!c.is_excluded(&url("http://c.a.test/")));
        assert!(!c.is_excluded(&url("http://a.test/")));
    }
}
