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
//! - [`fetch`]: the HTTP shell.
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

pub mod fetch;
pub mod frontier;
pub mod progress;
pub mod redirect;
pub mod resolve;
pub mod robots;
pub mod trap;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use beebot_shared::extract::{extract_page_links, LinkTag};
use beebot_shared::limits::MAX_SCAN_STATE_DECOMPRESSED_BYTES;
use beebot_shared::limits::{
    MAX_DELAY_MS, MAX_LINKS_PER_PAGE, MAX_LINK_RECORDS, MAX_PAGES_PER_SITE, MAX_STATE_ROBOTS,
    MAX_STATE_ROBOTS_BYTES, MAX_URL_LEN,
};
use beebot_shared::linkfile::{LinkRecord, ScanSummary, StopReason};
use beebot_shared::scanstate::{
    url_digest, RobotsAnswer, ScanState, ScanStateError, MAX_SEEN_DIGESTS, MAX_STATE_ROBOTS_BODY,
};
use beebot_shared::scope::{canonical_url, seed_url, Exclusion, Scope, SiteScope};
use url::Url;

use fetch::{BodyWanted, FetchError, Fetcher};
use frontier::{Frontier, Pushed, MAX_FRONTIER_URLS};
use redirect::{RedirectStep, MAX_REDIRECTS};
use robots::{Robots, MAX_CRAWL_DELAY, MAX_ROBOTS_BYTES};

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

/// Granularity of waits: cancel and time limits are checked this often.
const WAIT_SLICE: Duration = Duration::from_millis(20);

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
    /// Longest wait for the response head, and for each read of the body.
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
    /// the order found.
    pub records: Vec<LinkRecord>,
    pub summary: ScanSummary,
    /// Where the crawl stopped, when it stopped early (cancelled, or out of
    /// its time budget): another crawl resumes from it.
    pub state: Option<ScanState>,
}

/// Takes a [`Snapshot`] of the crawl at this page boundary, with the
/// records after the first `records_from`.
pub type TakeSnapshot<'a> = &'a dyn Fn(usize) -> Snapshot;

/// Called after each page with the progress and a way to take a snapshot.
pub type OnPage<'a> = &'a mut dyn FnMut(&CrawlProgress, TakeSnapshot<'_>);

/// A crawl at a page boundary: what a checkpoint keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Where the crawl stands (pages taken include the resumed state's).
    pub state: ScanState,
    /// The records found since the first `records_from` (see [`crawl_resumable`]).
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
}

/// Crawl one site. Checks `cancel` between requests and while waiting, and
/// calls `on_progress(pages, links)` after each page.
pub fn crawl(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &AtomicBool,
    on_progress: &mut dyn FnMut(u64, u64),
) -> CrawlOutput {
    crawl_with_progress(spec, cfg, cancel, &mut |p| on_progress(p.pages, p.links))
}

/// [`crawl`], reporting the whole [`CrawlProgress`] after each page.
pub fn crawl_with_progress(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &AtomicBool,
    on_progress: &mut dyn FnMut(&CrawlProgress),
) -> CrawlOutput {
    crawl_resumable(spec, cfg, cancel, &mut |p, _| on_progress(p))
}

/// [`crawl_with_progress`], also handing the caller, after each page, a way to
/// take a [`Snapshot`] of the crawl there: `snapshot(records_from)` returns
/// the state and the records after the first `records_from` (so a caller
/// that keeps them pays only for the new ones).
pub fn crawl_resumable(
    spec: &CrawlSpec,
    cfg: &CrawlerConfig,
    cancel: &AtomicBool,
    on_page: OnPage<'_>,
) -> CrawlOutput {
    let mut crawler = Crawler::new(spec, cfg, cancel);
    let stopped_by = crawler.run(on_page);
    crawler.finish(stopped_by)
}

/// One crawl in progress.
struct Crawler<'a> {
    spec: &'a CrawlSpec,
    cancel: &'a AtomicBool,
    scope: SiteScope,
    fetcher: Fetcher,
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
    records: Vec<LinkRecord>,
    target_hosts: HashSet<String>,
    status_counts: BTreeMap<u16, u64>,
    /// Frontier entries answered with some HTTP status.
    pages: u64,
    /// Frontier entries whose first request failed.
    failed_pages: u64,
    bytes: u64,
    errors: u64,
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
    fn new(spec: &'a CrawlSpec, cfg: &CrawlerConfig, cancel: &'a AtomicBool) -> Crawler<'a> {
        // Groups are matched by our product token, whatever the User-Agent says.
        let agent_token = robots::ROBOTS_TOKEN.to_string();
        let mut frontier = Frontier::new(MAX_FRONTIER_URLS);
        let mut fetched = HashSet::new();
        let mut robots = HashMap::new();
        let mut robots_answers = Vec::new();
        let mut robots_answer_bytes = 0;
        let mut pages_before = 0;
        if let Some(state) = &spec.resume {
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
        Crawler {
            spec,
            cancel,
            scope: SiteScope::new(&spec.site, spec.scope),
            fetcher: Fetcher::new(cfg, &spec.user_agent),
            agent_token,
            started: Instant::now(),
            frontier,
            fetched,
            robots,
            robots_answers,
            robots_answer_bytes,
            pages_before,
            last_request: HashMap::new(),
            records: Vec::new(),
            target_hosts: HashSet::new(),
            status_counts: BTreeMap::new(),
            pages: 0,
            failed_pages: 0,
            bytes: 0,
            errors: 0,
            robots_disallowed: 0,
            records_dropped: 0,
            bounds: ScanSummary::default(),
            unanswered: Vec::new(),
            robots_unanswered: false,
            robots_failure: None,
            max_pages: u64::from(spec.max_pages.min(MAX_PAGES_PER_SITE)),
            delay: spec.delay.min(Duration::from_millis(MAX_DELAY_MS)),
            max_crawl_delay: spec.max_crawl_delay.min(MAX_CRAWL_DELAY),
            max_page_bytes: spec.max_page_bytes.min(MAX_PAGE_BYTES_CAP),
            request_timeout: cfg.request_timeout,
        }
    }

    /// Frontier entries taken by this crawl and the scans it resumes.
    fn pages_taken(&self) -> u64 {
        self.pages_before + self.pages + self.failed_pages
    }

    /// The crawl loop; returns the limit that stopped it, if any.
    fn run(&mut self, on_page: OnPage<'_>) -> Option<StopReason> {
        let seed = canonical_url(&self.spec.seed);
        if !matches!(seed.scheme(), "http" | "https") || seed.as_str().len() > MAX_URL_LEN {
            self.errors += 1;
            return Some(StopReason::SeedUnreachable);
        }
        // A fresh crawl starts at the seed; a resumed one where it stopped
        // (its first page is the seed when it stopped before any).
        let mut first = self.pages_before == 0;
        if self.spec.resume.is_none() {
            self.frontier.push(seed.clone(), 0);
        }
        if let Some(stop) = self.limit_reached() {
            return Some(stop);
        }
        if self.is_excluded(&seed) {
            // Never issued by the server: nothing of the site is requested.
            tracing::warn!(site = %self.spec.site, "the site is excluded from crawling");
            return Some(StopReason::SeedUnreachable);
        }
        // robots.txt of the seed's host decides whether we crawl at all.
        if let Err(stop) = self.ensure_robots(&seed) {
            return Some(stop);
        }
        if self.robots_for(&seed).is_none_or(Robots::is_unavailable) {
            if self.spec.resume.is_some() && self.robots_unanswered {
                // The site answered the scans this one resumes: no answer
                // now means it (or this host) is offline, not that its
                // robots.txt forbids a scan. The queue waits.
                self.robots.remove(&origin(&seed));
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
        // Each turn takes one URL off the bounded frontier, which never hands out
        // a URL twice; the page cap bounds the turns that fetch. A turn that
        // stops before its request puts its URL back, so the state keeps it.
        while let Some((url, depth)) = self.frontier.pop() {
            if let Some(stop) = self.limit_reached() {
                self.frontier.unpop(url, depth);
                return Some(stop);
            }
            if self.fetched.contains(&url_digest(url.as_str())) {
                continue; // already reached through a redirect
            }
            if self.is_excluded(&url) || (url != seed && !self.scope.contains(&url)) {
                // Queued by an earlier scan before the host was excluded, or
                // under a wider scope than this unit's.
                continue;
            }
            if self.pages_taken() >= self.max_pages {
                self.frontier.unpop(url, depth);
                return Some(StopReason::MaxPages);
            }
            if let Err(stop) = self.ensure_robots(&url) {
                self.frontier.unpop(url, depth);
                return Some(stop);
            }
            match self.robots_for(&url) {
                Some(robots) if robots.allowed(&url) => {}
                Some(robots) if !robots.is_unavailable() => {
                    self.robots_disallowed += 1;
                    continue;
                }
                // Another host of the scope without usable robots.txt.
                _ => continue,
            }
            let mut result = self.fetch_page(url, depth);
            if self.unanswered.len() >= MAX_CONSECUTIVE_CONN_FAILURES {
                match self.still_online(&seed) {
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
            let progress = CrawlProgress {
                pages: self.pages,
                links: self.records.len() as u64,
                queued: self.frontier.len() as u64,
                bytes: self.bytes,
                errors: self.errors,
            };
            on_page(&progress, &|from| self.snapshot(from));
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

    /// The summary so far.
    fn summary(&self, stopped_by: Option<StopReason>) -> ScanSummary {
        ScanSummary {
            pages: self.pages,
            bytes: self.bytes,
            links: self.records.len() as u64,
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

    /// Whether the site answers at all (any HTTP status for its robots.txt),
    /// after [`MAX_CONSECUTIVE_CONN_FAILURES`] requests got no answer.
    fn still_online(&mut self, seed: &Url) -> Result<bool, StopReason> {
        let Ok(probe) = seed.join("/robots.txt") else {
            return Ok(false);
        };
        self.wait_turn(&probe)?;
        let timeout = self.request_timeout();
        let result = self
            .fetcher
            .get(&probe, MAX_ROBOTS_BYTES, BodyWanted::Any2xx, timeout);
        self.last_request.insert(origin(&probe), Instant::now());
        match result {
            Ok(_) => Ok(true),
            Err(e) => {
                self.count_error(&probe, &e);
                if self.cut_by_budget(&Err(e)) {
                    return Err(StopReason::MaxTime);
                }
                Ok(false)
            }
        }
    }

    /// Put the requests that got no answer back at the head of the queue,
    /// in their order, no longer counted as taken: the scan that continues
    /// this one requests them.
    fn put_back_unanswered(&mut self) {
        for (url, depth, counted) in std::mem::take(&mut self.unanswered).into_iter().rev() {
            self.fetched.remove(&url_digest(url.as_str()));
            if counted {
                self.failed_pages = self.failed_pages.saturating_sub(1);
            }
            self.frontier.unpop(url, depth);
        }
    }

    /// Where the crawl stands, between two pages, fitted to what a state
    /// may hold ([`fit_state`]), and the queued URLs the fit cut.
    fn state(&self) -> (ScanState, u64) {
        let mut state = ScanState {
            site: self.spec.site.clone(),
            pages_done: self.pages_taken(),
            // A queued URL requested already (reached by a redirect) is not
            // queued in the state: the resumed scan would request it again.
            queue: self
                .frontier
                .queued()
                .into_iter()
                .filter(|q| !self.fetched.contains(&url_digest(&q.url)))
                .collect(),
            seen: self.frontier.seen_digests(),
            robots: self
                .robots_answers
                .iter()
                .take(MAX_STATE_ROBOTS)
                .cloned()
                .collect(),
        };
        let cut = fit_state(&mut state, Some(&self.fetched));
        (state, cut)
    }

    fn snapshot(&self, records_from: usize) -> Snapshot {
        let (state, cut) = self.state();
        let mut summary = self.summary(None);
        summary.frontier_dropped += cut;
        Snapshot {
            state,
            new_records: self
                .records
                .get(records_from..)
                .map(<[LinkRecord]>::to_vec)
                .unwrap_or_default(),
            summary,
        }
    }

    fn finish(self, stopped_by: Option<StopReason>) -> CrawlOutput {
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

    /// Fetch one frontier entry, following in-scope redirects, and take its links.
    fn fetch_page(&mut self, url: Url, depth: u32) -> PageResult {
        self.fetched.insert(url_digest(url.as_str()));
        let mut chain = vec![url.clone()];
        let mut current = url;
        // One request per turn: the entry, then at most MAX_REDIRECTS hops
        // (`redirect::next_step` refuses the hop after that).
        for hop in 0..=MAX_REDIRECTS {
            if let Err(stop) = self.wait_turn(&current) {
                // Not requested: the state keeps it queued (a redirect's
                // target as a page of its own).
                self.fetched.remove(&url_digest(current.as_str()));
                self.frontier.unpop(current, depth);
                return PageResult::Stopped(stop);
            }
            let timeout = self.request_timeout();
            let result = self
                .fetcher
                .get(&current, self.max_page_bytes, BodyWanted::Html, timeout);
            self.last_request.insert(origin(&current), Instant::now());
            if self.cut_by_budget(&result) {
                // Not the page's answer: it goes back to the queue, for the
                // scan that continues this one.
                self.fetched.remove(&url_digest(current.as_str()));
                self.frontier.unpop(current, depth);
                return PageResult::Stopped(StopReason::MaxTime);
            }
            let response = match result {
                Ok(response) => {
                    self.unanswered.clear();
                    response
                }
                Err(e) => {
                    self.count_error(&current, &e);
                    if is_unanswered(&e) {
                        self.unanswered.push((current.clone(), depth, hop == 0));
                    }
                    if hop > 0 {
                        return PageResult::Answered;
                    }
                    self.failed_pages += 1;
                    return PageResult::Failed;
                }
            };
            if hop == 0 {
                self.pages += 1;
            }
            *self.status_counts.entry(response.status).or_insert(0) += 1;
            self.bytes += response.body.len() as u64;
            if response.truncated {
                self.bounds.truncated_pages += 1;
            }
            if response.timed_out {
                self.errors += 1;
                self.bounds.timeouts += 1;
                tracing::debug!(url = %current, "body timed out; the part read is parsed");
            }
            if redirect::is_redirect(response.status) {
                let Some(location) = &response.location else {
                    return PageResult::Answered;
                };
                let step = match redirect::next_step(&current, location, &chain, &self.scope) {
                    // An excluded host is left like one outside the scope.
                    RedirectStep::Follow(next) if self.is_excluded(&next) => {
                        RedirectStep::Outbound(next)
                    }
                    step => step,
                };
                match step {
                    RedirectStep::Follow(next) => {
                        if self.fetched.contains(&url_digest(next.as_str())) {
                            return PageResult::Answered;
                        }
                        if let Err(stop) = self.ensure_robots(&next) {
                            // The target is a page of its own for the next scan.
                            self.frontier.unpop(next, depth);
                            return PageResult::Stopped(stop);
                        }
                        match self.robots_for(&next) {
                            Some(robots) if robots.allowed(&next) => {}
                            Some(robots) if !robots.is_unavailable() => {
                                self.robots_disallowed += 1;
                                return PageResult::Answered;
                            }
                            _ => return PageResult::Answered,
                        }
                        self.fetched.insert(url_digest(next.as_str()));
                        self.frontier.mark_seen(&next);
                        chain.push(next.clone());
                        current = next;
                        continue;
                    }
                    RedirectStep::Outbound(target) => {
                        self.add_record(&current, target, LinkTag::Redirect, false, String::new());
                    }
                    RedirectStep::Fail(e) => {
                        self.errors += 1;
                        self.bounds.redirect_errors += 1;
                        tracing::debug!(url = %current, error = %e, "redirect not followed");
                    }
                }
                return PageResult::Answered;
            }
            if (200..300).contains(&response.status) {
                if response.is_html() {
                    self.take_links(&current, depth, &response);
                } else {
                    self.bounds.non_html += 1;
                }
            }
            return PageResult::Answered;
        }
        PageResult::Answered
    }

    /// Queue the page's in-scope links and record the others.
    fn take_links(&mut self, page: &Url, depth: u32, response: &fetch::Fetched) {
        let mut targets: HashSet<String> = HashSet::new();
        // At most MAX_LINKS_PER_PAGE links come back.
        let links = extract_page_links(&response.body, page, response.content_type.as_deref());
        if links.len() >= MAX_LINKS_PER_PAGE {
            self.bounds.link_capped_pages += 1;
        }
        for link in links {
            if !matches!(link.url.scheme(), "http" | "https") {
                continue;
            }
            let target = canonical_url(&link.url);
            if target.as_str().len() > MAX_URL_LEN {
                self.bounds.long_urls += 1;
                continue;
            }
            if self.scope.contains(&target) && !self.is_excluded(&target) {
                if depth >= self.spec.max_depth {
                    self.bounds.beyond_depth += 1;
                } else if self.frontier.is_seen(&target) {
                    // Queued or fetched already.
                } else if let Err(e) = trap::check(&target) {
                    self.bounds.trap_urls += 1;
                    tracing::debug!(url = %target, error = %e, "trap URL skipped");
                } else if let Pushed::Full = self.frontier.push(target, depth + 1) {
                    tracing::debug!(site = %self.spec.site, "frontier full, link dropped");
                }
            } else if targets.insert(target.as_str().to_string()) {
                self.add_record(page, target, link.tag, link.nofollow, link.anchor_text);
            }
        }
    }

    fn add_record(
        &mut self,
        source: &Url,
        target: Url,
        tag: LinkTag,
        nofollow: bool,
        anchor_text: String,
    ) {
        if self.records.len() >= MAX_LINK_RECORDS {
            self.records_dropped += 1;
            return;
        }
        if let Some(host) = target.host_str() {
            if !self.target_hosts.contains(host) {
                self.target_hosts.insert(host.to_string());
            }
        }
        self.records.push(LinkRecord {
            source_url: source.as_str().to_string(),
            target_url: target.into(),
            tag,
            nofollow,
            anchor_text,
        });
    }

    fn count_error(&mut self, url: &Url, error: &FetchError) {
        self.errors += 1;
        match error {
            FetchError::Timeout(_) => self.bounds.timeouts += 1,
            FetchError::Refused(_) => self.bounds.refused_addresses += 1,
            _ => {}
        }
        tracing::debug!(url = %url, error = %error, "request failed");
    }

    /// Cancel, or the crawl's time budget (the only early stops).
    fn limit_reached(&self) -> Option<StopReason> {
        if self.cancel.load(Ordering::Relaxed) {
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

    /// Wait until `url`'s host may get another request: the spec's delay, or the
    /// robots.txt Crawl-delay when longer, after the previous request finished.
    fn wait_turn(&self, url: &Url) -> Result<(), StopReason> {
        if let Some(stop) = self.limit_reached() {
            return Err(stop);
        }
        let key = origin(url);
        let Some(last) = self.last_request.get(&key) else {
            return Ok(());
        };
        let crawl_delay = self
            .robots
            .get(&key)
            .and_then(Robots::crawl_delay)
            .unwrap_or(Duration::ZERO)
            .min(self.max_crawl_delay);
        let ready = *last + self.delay.max(crawl_delay);
        let now = Instant::now();
        if ready <= now {
            return Ok(());
        }
        if ready - now > self.time_left() {
            return Err(StopReason::MaxTime); // the wait alone would outlast the crawl
        }
        // The delay is at most a minute, so this is at most MAX_WAIT_SLICES turns.
        for _ in 0..MAX_WAIT_SLICES {
            if let Some(stop) = self.limit_reached() {
                return Err(stop);
            }
            let now = Instant::now();
            if now >= ready {
                break;
            }
            std::thread::sleep((ready - now).min(WAIT_SLICE));
        }
        Ok(())
    }

    /// Whether `url` is on a host excluded from crawling.
    fn is_excluded(&self, url: &Url) -> bool {
        self.spec.excluded.iter().any(|e| e.covers_url(url))
    }

    fn robots_for(&self, url: &Url) -> Option<&Robots> {
        self.robots.get(&origin(url))
    }

    /// Fetch robots.txt of `url`'s origin if not known yet. A host beyond
    /// [`MAX_ROBOTS_HOSTS`] gets no entry (its URLs are skipped).
    fn ensure_robots(&mut self, url: &Url) -> Result<(), StopReason> {
        let key = origin(url);
        if self.robots.contains_key(&key) || self.robots.len() >= MAX_ROBOTS_HOSTS {
            return Ok(());
        }
        let Ok(mut current) = url.join("/robots.txt") else {
            self.robots.insert(key, Robots::Unavailable);
            return Ok(());
        };
        let mut chain: Vec<Url> = Vec::new();
        let mut policy = Robots::Unavailable;
        // The final answer (status 0: no answer), kept for the scan state
        // unless `keep` is cleared.
        let mut answer: (u16, Vec<u8>) = (0, Vec::new());
        let mut keep = true;
        // robots.txt redirects are followed within the site's scope, at most
        // MAX_REDIRECTS hops (RFC 9309 asks for at least five); when the hops
        // run out it counts as missing. A redirect out of the scope is not
        // followed: the site would have us request a host that is not its own
        // (anyone's, or a private one the guard cannot see behind a proxy),
        // and its rules for us would come from there. RFC 9309 lets a crawler
        // treat a robots.txt it cannot reach as unavailable, so it is: nothing
        // is crawled on that origin, the safe side when we cannot read the
        // rules (allowing all could crawl what the site forbids).
        for _ in 0..=MAX_REDIRECTS {
            self.wait_turn(&current)?;
            let timeout = self.request_timeout();
            let result = self
                .fetcher
                .get(&current, MAX_ROBOTS_BYTES, BodyWanted::Any2xx, timeout);
            self.last_request.insert(origin(&current), Instant::now());
            if self.cut_by_budget(&result) {
                return Err(StopReason::MaxTime); // asked again by the next scan
            }
            chain.push(current.clone());
            let response = match result {
                Ok(response) => response,
                Err(e) => {
                    self.count_error(&current, &e);
                    self.robots_failure = Some(unreachable_cause(&e));
                    policy = Robots::Unavailable;
                    break;
                }
            };
            let next = match (&response.location, redirect::is_redirect(response.status)) {
                (Some(location), true) => current
                    .join(location.trim())
                    .ok()
                    .map(|u| canonical_url(&u))
                    .filter(|u| matches!(u.scheme(), "http" | "https") && !chain.contains(u)),
                _ => None,
            };
            match next {
                Some(next) if !self.scope.contains(&next) || self.is_excluded(&next) => {
                    tracing::debug!(url = %current, to = %next, "robots.txt redirect out of the scope: unavailable");
                    policy = Robots::Unavailable;
                    // Answered, but not kept: a resumed scan asks again.
                    answer = (response.status, Vec::new());
                    keep = false;
                    break;
                }
                Some(next) => {
                    policy = Robots::AllowAll;
                    answer = (response.status, Vec::new());
                    current = next;
                }
                None => {
                    if response.truncated {
                        self.bounds.robots_truncated += 1;
                    }
                    policy =
                        Robots::from_response(response.status, &response.body, &self.agent_token);
                    answer = (response.status, response.body);
                    break;
                }
            }
        }
        self.robots.insert(key.clone(), policy);
        self.robots_unanswered = answer.0 == 0;
        // No answer at all is not kept for the state: the next scan asks.
        if keep
            && answer.0 != 0
            && self.robots_answer_bytes + answer.1.len() <= MAX_STATE_ROBOTS_BYTES
        {
            self.robots_answer_bytes += answer.1.len();
            self.robots_answers.push(RobotsAnswer {
                origin: key,
                status: answer.0,
                body: answer.1,
            });
        }
        Ok(())
    }
}

/// Turns of one politeness wait: the longest delay in [`WAIT_SLICE`]s, plus slack.
const MAX_WAIT_SLICES: u64 =
    2 + robots::MAX_CRAWL_DELAY.as_millis() as u64 / WAIT_SLICE.as_millis() as u64;

/// Fit a state within what its encoding allows, so that encoding it never
/// fails and a stopped scan never loses its work for being too large: URLs
/// longer than [`MAX_URL_LEN`] and the queue beyond [`MAX_FRONTIER_URLS`] are
/// cut; a seen set over [`MAX_SEEN_DIGESTS`] keeps only the digests in `keep`
/// (the URLs requested: the others, robots-disallowed or queued, need not be
/// kept), then the first ones; and the queue's tail is cut until the state's
/// raw bytes fit [`MAX_SCAN_STATE_DECOMPRESSED_BYTES`]. Returns the queued
/// URLs cut (to be counted in `frontier_dropped`).
pub fn fit_state(state: &mut ScanState, keep: Option<&HashSet<u64>>) -> u64 {
    let queued = state.queue.len();
    state.queue.retain(|q| q.url.len() <= MAX_URL_LEN);
    state.queue.truncate(MAX_FRONTIER_URLS);
    if state.seen.len() > MAX_SEEN_DIGESTS {
        if let Some(keep) = keep {
            state.seen.retain(|d| keep.contains(d));
        }
        state.seen.truncate(MAX_SEEN_DIGESTS);
    }
    // The encoding's bytes, robots answers over-counted (see `ScanState::encode`).
    let robots: usize = state
        .robots
        .iter()
        .take(MAX_STATE_ROBOTS)
        .map(|r| 8 + r.origin.len() + r.body.len().min(MAX_STATE_ROBOTS_BODY))
        .sum();
    let fixed = 8 + 2 + 2 + state.site.len() + 8 + 4 + robots + 4 + 4 + 8 * state.seen.len();
    let budget = MAX_SCAN_STATE_DECOMPRESSED_BYTES.saturating_sub(fixed);
    let mut used = 0usize;
    let mut fits = 0usize;
    for q in &state.queue {
        used += 6 + q.url.len();
        if used > budget {
            break;
        }
        fits += 1;
    }
    state.queue.truncate(fits);
    (queued - state.queue.len()) as u64
}

/// Encode a state, fitted first ([`fit_state`]); should the compressed
/// bytes still be over their limit, the queue's tail is halved until they
/// fit. Returns the bytes and the queued URLs cut.
pub fn encode_state(state: &mut ScanState) -> Result<(Vec<u8>, u64), ScanStateError> {
    let mut cut = fit_state(state, None);
    loop {
        match state.encode() {
            Ok(bytes) => return Ok((bytes, cut)),
            Err(_) if !state.queue.is_empty() => {
                let keep = state.queue.len() / 2;
                cut += (state.queue.len() - keep) as u64;
                state.queue.truncate(keep);
            }
            Err(_) if !state.robots.is_empty() => state.robots.clear(),
            Err(e) => return Err(e),
        }
    }
}

/// Whether a request failed without any answer from the site (the network,
/// DNS, or the site's host being down), as opposed to an address refused by
/// policy.
fn is_unanswered(e: &FetchError) -> bool {
    matches!(
        e,
        FetchError::Timeout(_)
            | FetchError::HostNotFound
            | FetchError::ConnectionRefused
            | FetchError::Network(_)
            | FetchError::Body(_)
    )
}

/// Why a site whose robots.txt got no answer at all could not be scanned.
fn unreachable_cause(e: &FetchError) -> StopReason {
    match e {
        FetchError::HostNotFound => StopReason::DnsFailed,
        FetchError::ConnectionRefused => StopReason::ConnectionRefused,
        FetchError::Refused(_) => StopReason::PrivateAddress,
        FetchError::Timeout(_) | FetchError::Body(_) | FetchError::Network(_) => {
            StopReason::RobotsUnavailable
        }
    }
}

/// `http://host:port` of a URL: politeness and robots.txt are per origin.
fn origin(url: &Url) -> String {
    url.origin().ascii_serialization()
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::scanstate::QueuedUrl;

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
                &AtomicBool::new(false),
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
    fn an_oversized_state_is_cut_to_fit_and_always_encodes() {
        // A queue whose URLs pass the raw bytes a state may hold, and a
        // seen set past its count limit.
        let long = "x".repeat(1900);
        let queue: Vec<QueuedUrl> = (0..40_000)
            .map(|i| QueuedUrl {
                url: format!("http://a.test/{i}/{long}"),
                depth: 3,
            })
            .collect();
        let fetched: HashSet<u64> = (0..1000u64).collect();
        let mut state = ScanState {
            site: "a.test".into(),
            pages_done: 1000,
            queue: queue.clone(),
            seen: (0..MAX_SEEN_DIGESTS as u64 + 10).collect(),
            robots: Vec::new(),
        };
        assert!(state.encode().is_err(), "over its limits as it is");
        let cut = fit_state(&mut state, Some(&fetched));
        assert!(cut > 0 && cut < 40_000, "{cut}");
        assert_eq!(state.queue.len() as u64 + cut, 40_000);
        // The head of the queue is kept, the tail cut.
        assert_eq!(state.queue[..], queue[..state.queue.len()]);
        // Only the URLs requested are kept in the seen set.
        assert_eq!(state.seen.len(), 1000);
        let bytes = state.encode().expect("fits");
        let back = ScanState::decode(&bytes).expect("decodes");
        assert_eq!(back.queue.len(), state.queue.len());
        // Without a set to keep, encoding still always succeeds.
        let mut state = ScanState {
            site: "a.test".into(),
            pages_done: 1000,
            queue,
            seen: (0..MAX_SEEN_DIGESTS as u64 + 10).collect(),
            robots: Vec::new(),
        };
        let (bytes, cut) = encode_state(&mut state).expect("always encodes");
        assert!(cut > 0);
        assert_eq!(state.seen.len(), MAX_SEEN_DIGESTS);
        assert!(ScanState::decode(&bytes).is_ok());
    }

    #[test]
    fn robots_groups_are_matched_by_our_token_whatever_the_user_agent() {
        let spec = CrawlSpec {
            user_agent: "Mozilla/5.0 (compatible; Crawler/2; +https://x.test/)".into(),
            ..CrawlSpec::new("a.test", Scope::Host)
        };
        let cfg = CrawlerConfig::default();
        let cancel = AtomicBool::new(false);
        assert_eq!(Crawler::new(&spec, &cfg, &cancel).agent_token, "BeeBot");
    }

    #[test]
    fn excluded_hosts_are_not_queued_and_a_queued_one_is_skipped() {
        let spec = CrawlSpec {
            excluded: vec![Exclusion::parse("b.a.test", false).expect("valid")],
            ..CrawlSpec::new("a.test", Scope::Subdomains)
        };
        let cfg = CrawlerConfig::default();
        let cancel = AtomicBool::new(false);
        let c = Crawler::new(&spec, &cfg, &cancel);
        assert!(c.is_excluded(&url("http://www.b.a.test:8080/x")));
        assert!(!c.is_excluded(&url("http://c.a.test/")));
        assert!(!c.is_excluded(&url("http://a.test/")));
    }

    #[test]
    fn a_page_reached_by_a_redirect_is_not_queued_in_the_state() {
        let spec = CrawlSpec::new("a.test", Scope::Host);
        let cfg = CrawlerConfig::default();
        let cancel = AtomicBool::new(false);
        let mut c = Crawler::new(&spec, &cfg, &cancel);
        for u in ["http://a.test/", "http://a.test/b", "http://a.test/c"] {
            c.frontier.push(url(u), 1);
        }
        c.frontier.pop();
        c.fetched.insert(url_digest("http://a.test/"));
        // /b was requested as the target of a redirect while still queued.
        c.fetched.insert(url_digest("http://a.test/b"));
        let (state, cut) = c.state();
        assert_eq!(cut, 0);
        let queued: Vec<&str> = state.queue.iter().map(|q| q.url.as_str()).collect();
        assert_eq!(queued, vec!["http://a.test/c"]);
        // The resumed crawl knows /b was requested: it never requests it again.
        let resumed = CrawlSpec {
            resume: Some(state),
            ..spec.clone()
        };
        let r = Crawler::new(&resumed, &cfg, &cancel);
        assert!(r.fetched.contains(&url_digest("http://a.test/b")));
        assert!(!r.fetched.contains(&url_digest("http://a.test/c")));
        assert_eq!(r.frontier.len(), 1);
    }
}
