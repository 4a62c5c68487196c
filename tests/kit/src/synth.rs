//! The synthetic web: many virtual sites generated from a seed, together with the
//! exact truth of every site's outbound links, so tests and the demo can check a
//! crawler and the link extractor against something that is known.
//!
//! Pure and deterministic: no I/O, no clock, and its own small PRNG (splitmix64)
//! rather than `rand`, so one seed gives the same bytes on every platform and
//! with every dependency version. `beebot_testkit::web` serves it over HTTP.
//!
//! # Model of one site
//! Site `i` is the host `site{i}.synth.test`. Its size (HTML pages) follows a
//! bounded Pareto law between [`SynthConfig::min_pages_per_site`] and
//! [`SynthConfig::max_pages_per_site`]. Page 0 is `/`; every other page hangs off a
//! parent page (a random tree from `/`), and pages carry random cross links, so
//! every page is reachable from `/`. Beside the pages a site may serve:
//! - `/robots.txt`, always: `User-agent: *` / `Disallow: /private/` (and a group for
//!   another robot that disallows everything, which a crawler must not apply to us);
//! - `/private/members-{i}.html`, linked from `/`, with outbound links that are not
//!   in the truth (robots forbids fetching the page);
//! - `/old-{n}`: 301 to an internal page, which replaces that page's tree link;
//! - `/go/{n}`: 302 to an external URL, in the truth as a [`LinkTag::Redirect`]
//!   record whose source is `http://site{i}.synth.test/go/{n}`;
//! - `/loop-a` ⇄ `/loop-b` (a redirect loop), `/missing-{i}.html` (404),
//!   `/error-{i}.html` (500), `/files/report-{i}.pdf` (not HTML). Error and PDF
//!   bodies contain links that are not in the truth.
//!
//! Pages are HTML of a few KB written the way real pages are: links absolute and
//! relative (`../`, `./`, protocol-relative, upper-case scheme and host, default
//! port, fragments), quoted and unquoted, `&amp;` in queries, upper-case tags,
//! `rel` with `nofollow` among other tokens, anchor text with nested tags,
//! entities and odd whitespace, duplicate links, `<area>` links, a `<base href>`
//! on some pages, `mailto:`/`javascript:` links, over-long URLs, and fake links
//! inside `<script>` and comments.
//!
//! # The truth
//! [`SynthWeb::truth`] is what a correct crawl exports with scope `host`, a page
//! cap at least the site's size, no depth limit in effect and robots obeyed: one
//! [`LinkRecord`] per distinct (source page, canonical target) over the pages
//! reachable from `/`, the first anchor of a target on a page giving its anchor
//! text, tag and `rel`. It is computed from the generator's model, never by
//! parsing the HTML, so it checks the extractor and the crawler independently.

//!
//! # Where things live
//! This file holds the public API, the model the generator builds (sites, pages,
//! links) and the PRNG; `generate` builds the model from a seed, `links` writes
//! one link element in its many equivalent forms, `render` turns a page of the
//! model into HTML, `serve` answers requests, and `truth` computes the records a
//! correct crawl exports by walking the model. `hostile` is apart: sites built
//! to hurt a crawler, described as data.

mod generate;
pub mod hostile;
mod links;
mod render;
mod serve;
#[cfg(test)]
mod tests;
mod truth;

use std::collections::HashMap;

use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::LinkRecord;
use beebot_shared::rng::{SplitMix64, GOLDEN_GAMMA};

use generate::{build_site, plan_site, SitePlan};
use truth::simulate_crawl;

/// Domain under which every synthetic site lives (`.test` is reserved, RFC 2606).
pub const SYNTH_DOMAIN: &str = "synth.test";

/// Default smallest site, in HTML pages.
pub const DEFAULT_MIN_PAGES_PER_SITE: usize = 3;

/// Default largest site, in HTML pages: big enough for a long tail, small enough
/// that tests crawling a dozen sites on loopback stay fast.
pub const DEFAULT_MAX_PAGES_PER_SITE: usize = 120;

/// Most sites one synthetic web holds: the model costs roughly 1 KB per page.
pub const MAX_SYNTH_SITES: usize = 100_000;

/// Most pages one synthetic site holds, whatever the configuration says.
pub const MAX_SYNTH_PAGES_PER_SITE: usize = 10_000;

/// Longest `Crawl-delay` the generator writes into robots.txt.
pub const MAX_SYNTH_CRAWL_DELAY_MS: u64 = 60_000;

/// Filler words for titles, anchors and paragraphs.
const WORDS: &[&str] = &[
    "honey", "hive", "comb", "pollen", "nectar", "queen", "worker", "drone", "swarm", "meadow",
    "clover", "garden", "orchard", "forage", "flight", "dance", "colony", "season", "spring",
    "summer", "autumn", "winter", "report", "annual", "research", "project", "network", "grid",
    "survey", "method", "result", "figure", "table", "archive", "library", "member", "contact",
    "events", "program", "course", "lecture", "campus", "faculty", "student", "history", "museum",
    "gallery", "press", "release", "policy", "guide", "manual", "install", "download", "support",
    "forum", "topic", "answer", "question", "review", "product", "catalog", "order", "service",
    "partner", "region", "local", "global", "market", "future", "science", "nature", "climate",
    "river", "forest", "valley", "harbour", "bridge", "station",
];

/// What the generator is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthConfig {
    /// Smallest site in HTML pages (at least 1: every site has `/`).
    pub min_pages_per_site: usize,
    /// Largest site in HTML pages (clamped to [`MAX_SYNTH_PAGES_PER_SITE`]).
    pub max_pages_per_site: usize,
    /// `Crawl-delay` written into every robots.txt, if any (clamped to
    /// [`MAX_SYNTH_CRAWL_DELAY_MS`]).
    pub crawl_delay_ms: Option<u64>,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            min_pages_per_site: DEFAULT_MIN_PAGES_PER_SITE,
            max_pages_per_site: DEFAULT_MAX_PAGES_PER_SITE,
            crawl_delay_ms: None,
        }
    }
}

impl SynthConfig {
    /// The configuration with every bound brought into its valid range.
    fn clamped(&self) -> SynthConfig {
        let max = self.max_pages_per_site.clamp(1, MAX_SYNTH_PAGES_PER_SITE);
        SynthConfig {
            min_pages_per_site: self.min_pages_per_site.clamp(1, max),
            max_pages_per_site: max,
            crawl_delay_ms: self.crawl_delay_ms.map(|d| d.min(MAX_SYNTH_CRAWL_DELAY_MS)),
        }
    }
}

/// One HTTP answer of the synthetic web.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthResponse {
    pub status: u16,
    pub content_type: String,
    /// The `Location` header of a redirect.
    pub location: Option<String>,
    pub body: Vec<u8>,
}

/// A whole synthetic web: sites, pages, and the truth of their outbound links.
#[derive(Clone, Debug)]
pub struct SynthWeb {
    seed: u64,
    config: SynthConfig,
    sites: Vec<Site>,
}

/// One site: its pages and everything else it serves.
#[derive(Clone, Debug)]
struct Site {
    host: String,
    pages: Vec<Page>,
    /// The robots-forbidden page linked from `/`.
    private: Page,
    /// Every path the site serves, to what.
    paths: HashMap<String, Resource>,
    /// `/old-{n}` and `/go/{n}` redirects, indexed by [`Resource`].
    redirects: Vec<Redirect>,
    robots_txt: String,
}

/// What a served path is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    Page(usize),
    Private,
    /// Index into [`Site::redirects`].
    Redirect(usize),
    ServerError,
    Pdf,
}

/// An HTTP redirect the site answers with.
#[derive(Clone, Debug)]
struct Redirect {
    status: u16,
    /// The `Location` header exactly as sent.
    location: String,
    /// Where it leads, canonical.
    target: Target,
}

/// One HTML page of the model.
#[derive(Clone, Debug)]
struct Page {
    path: String,
    title: String,
    /// Absolute `<base href>`, if the page has one.
    base: Option<String>,
    content_type: &'static str,
    /// Seeds the filler text, so rendering needs no stored prose.
    text_seed: u64,
    blocks: Vec<Block>,
}

/// A part of a page body, in document order.
#[derive(Clone, Debug)]
enum Block {
    Nav(Vec<Link>),
    Paragraph(Vec<Link>),
    Related(Vec<Link>),
    /// An image map of `<area>` links.
    Map(Vec<Link>),
    /// A `<script>` holding a fake anchor to this URL (not a link).
    Script(String),
    /// An HTML comment holding a fake anchor to this URL (not a link).
    Comment(String),
    Footer(Vec<Link>),
}

/// One link element of a page.
#[derive(Clone, Debug)]
struct Link {
    target: Target,
    /// The href as an HTML parser hands it over (entities decoded), for self-checks.
    #[cfg_attr(not(test), allow(dead_code))]
    href: String,
    /// The whole element as written into the page.
    markup: String,
    /// Anchor text as the truth has it (whitespace collapsed and capped).
    anchor: String,
    nofollow: bool,
    tag: LinkTag,
}

/// Where a link leads, canonical (as the `url` crate serialises it, no fragment).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// Inside the site's host scope.
    InScope(String),
    /// Outside the site's host scope: a record of the truth.
    Outbound(String),
    /// Not a followable http(s) link (mailto:, javascript:, over-long URL).
    Ignored,
}

/// The web's generator ([`SplitMix64`]: fixed forever, so a seed always
/// means the same web), with the draws the pages are made of.
#[derive(Clone, Debug)]
struct Rng(SplitMix64);

impl Rng {
    /// A generator starting at `state`.
    fn new(state: u64) -> Rng {
        Rng(SplitMix64::new(state))
    }

    /// A generator for one purpose, derived from the web seed and two indices.
    fn derive(seed: u64, a: u64, b: u64) -> Rng {
        let mut r = Rng::new(seed ^ 0x5EED_BEEB_0700_0000);
        let x = r.next_u64() ^ a.wrapping_mul(GOLDEN_GAMMA);
        let mut r = Rng::new(x);
        let y = r.next_u64() ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        Rng::new(y)
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        self.0.unit()
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.below(WORDS.len())]
    }
}

/// Bounded Pareto with shape 1 on `[min, max]` by inverse transform (no `powf`,
/// so the result is bit-identical everywhere).
fn pareto_size(rng: &mut Rng, min: usize, max: usize) -> usize {
    if min >= max {
        return min;
    }
    let low = min as f64;
    let high = (max + 1) as f64;
    let u = rng.unit();
    let x = low / (1.0 - u * (1.0 - low / high));
    (x as usize).clamp(min, max)
}

/// The host of site `index`.
pub fn site_host(index: usize) -> String {
    format!("site{index}.{SYNTH_DOMAIN}")
}

/// The site index of a host such as `site3.synth.test` or `SITE3.synth.test.:8080`.
pub fn site_index(host: &str) -> Option<usize> {
    let host = strip_port(host).trim_end_matches('.').to_ascii_lowercase();
    let rest = host.strip_prefix("site")?;
    let digits = rest.strip_suffix(SYNTH_DOMAIN)?.strip_suffix('.')?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `host:port` → `host` (IPv6 literals keep their brackets).
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

impl SynthWeb {
    /// A web of `n_sites` sites with the default configuration.
    pub fn generate(seed: u64, n_sites: usize) -> SynthWeb {
        SynthWeb::with_config(seed, n_sites, SynthConfig::default())
    }

    /// A web of `n_sites` sites (at most [`MAX_SYNTH_SITES`]); out-of-range
    /// configuration values are clamped.
    pub fn with_config(seed: u64, n_sites: usize, config: SynthConfig) -> SynthWeb {
        let config = config.clamped();
        let n_sites = n_sites.min(MAX_SYNTH_SITES);
        let plans: Vec<SitePlan> = (0..n_sites).map(|i| plan_site(seed, i, &config)).collect();
        let sites = (0..n_sites)
            .map(|i| build_site(seed, i, &plans, &config))
            .collect();
        SynthWeb {
            seed,
            config,
            sites,
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The configuration in effect (after clamping).
    pub fn config(&self) -> &SynthConfig {
        &self.config
    }

    /// Every site's host, in index order.
    pub fn site_hosts(&self) -> Vec<String> {
        self.sites.iter().map(|s| s.host.clone()).collect()
    }

    /// HTML pages of a site reachable from `/` (its size), or `None` for an unknown host.
    pub fn site_pages(&self, host: &str) -> Option<usize> {
        self.site(host).map(|s| s.pages.len())
    }

    /// HTML pages of all sites.
    pub fn total_pages(&self) -> usize {
        self.sites.iter().map(|s| s.pages.len()).sum()
    }

    /// Distinct URLs a complete, robots-obeying crawl of the site requests, robots.txt
    /// not included: every page, redirect and error URL, each once.
    pub fn site_urls(&self, host: &str) -> Option<usize> {
        self.site(host).map(|s| simulate_crawl(s).urls_requested)
    }

    /// The paths of a site's HTML pages (`/` first), or `None` for an unknown host:
    /// what benches feed the extractor.
    pub fn site_page_paths(&self, host: &str) -> Option<Vec<String>> {
        self.site(host)
            .map(|s| s.pages.iter().map(|p| p.path.clone()).collect())
    }

    /// The paths of a site that robots.txt forbids and that the site links to.
    pub fn site_disallowed_paths(&self, host: &str) -> Option<Vec<String>> {
        self.site(host).map(|s| vec![s.private.path.clone()])
    }

    fn site(&self, host: &str) -> Option<&Site> {
        self.sites.get(site_index(host)?)
    }

    /// Serve `robots_txt` as the robots.txt of site `host` instead of the
    /// generated one (e.g. rules for one robot only). The truth is not
    /// recomputed: it stays what obeying the generated robots.txt gives.
    /// Returns whether `host` is a site of this web.
    pub fn set_robots_txt(&mut self, host: &str, robots_txt: &str) -> bool {
        let Some(i) = site_index(host).filter(|i| *i < self.sites.len()) else {
            return false;
        };
        self.sites[i].robots_txt = robots_txt.to_string();
        true
    }

    /// Every site's truth: `(site host, record)`, sorted by site, source, target.
    pub fn truth(&self) -> Vec<(String, LinkRecord)> {
        let mut all = Vec::new();
        for site in &self.sites {
            for record in simulate_crawl(site).records {
                all.push((site.host.clone(), record));
            }
        }
        all
    }

    /// One site's truth sorted by source then target, or `None` for an unknown host.
    pub fn site_truth(&self, host: &str) -> Option<Vec<LinkRecord>> {
        self.site(host).map(|s| simulate_crawl(s).records)
    }
}
