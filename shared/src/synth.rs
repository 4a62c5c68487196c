//! The synthetic web: many virtual sites generated from a seed, together with the
//! exact truth of every site's outbound links, so tests and the demo can check a
//! crawler and the link extractor against something that is known.
//!
//! Pure and deterministic: no I/O, no clock, and its own small PRNG (splitmix64)
//! rather than `rand`, so one seed gives the same bytes on every platform and
//! with every dependency version. `beebot_server::web` serves it over HTTP.
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

pub mod hostile;

use std::collections::{HashMap, HashSet, VecDeque};

use crate::extract::LinkTag;
use crate::limits::{MAX_ANCHOR_CHARS, MAX_URL_LEN};
use crate::linkfile::LinkRecord;
use crate::util::collapse_whitespace;

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

/// How many distinct external hosts pages link to.
const EXTERNAL_HOSTS: u64 = 40;

/// Directories pages live in (relative links need some depth to be interesting).
const DIRS: &[&str] = &[
    "",
    "news/",
    "docs/",
    "docs/guide/",
    "blog/",
    "about/",
    "products/2024/",
];

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

/// splitmix64: tiny, fast, and fixed forever, so a seed always means the same web.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    /// A generator for one purpose, derived from the web seed and two indices.
    fn derive(seed: u64, a: u64, b: u64) -> Rng {
        let mut r = Rng(seed ^ 0x5EED_BEEB_0700_0000);
        let x = r.next_u64() ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut r = Rng(x);
        let y = r.next_u64() ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        Rng(y)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
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

/// The plan of one site, made before any page links (pages link across sites).
struct SitePlan {
    host: String,
    paths: Vec<String>,
    parents: Vec<usize>,
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

    /// Answer a GET for `path_and_query` on `host` (which may carry `:port`).
    /// Unknown hosts and paths get a 404.
    pub fn respond(&self, host: &str, path_and_query: &str) -> SynthResponse {
        let Some(site) = self.site(host) else {
            return not_found();
        };
        if path_and_query == "/robots.txt" {
            return SynthResponse {
                status: 200,
                content_type: "text/plain; charset=utf-8".into(),
                location: None,
                body: site.robots_txt.clone().into_bytes(),
            };
        }
        let Some(resource) = site.paths.get(path_and_query) else {
            return not_found();
        };
        match *resource {
            Resource::Page(p) => html_response(200, site.pages[p].content_type, render_page(site, &site.pages[p])),
            Resource::Private => html_response(200, site.private.content_type, render_page(site, &site.private)),
            Resource::Redirect(r) => {
                let redirect = &site.redirects[r];
                SynthResponse {
                    status: redirect.status,
                    content_type: "text/html; charset=utf-8".into(),
                    location: Some(redirect.location.clone()),
                    body: format!(
                        "<html><body>Moved to <a href=\"{0}\">{0}</a></body></html>\n",
                        redirect.location
                    )
                    .into_bytes(),
                }
            }
            Resource::ServerError => html_response(
                500,
                "text/html; charset=utf-8",
                "<!DOCTYPE html><html><head><title>Error</title></head><body><h1>Internal error</h1>\
                 <p>Try <a href=\"http://fake-500.example.org/status\">the status page</a>.</p></body></html>\n"
                    .into(),
            ),
            Resource::Pdf => SynthResponse {
                status: 200,
                content_type: "application/pdf".into(),
                location: None,
                body: b"%PDF-1.4\n% not HTML: <a href=\"http://fake-pdf.example.org/\">no link</a>\n%%EOF\n"
                    .to_vec(),
            },
        }
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

fn not_found() -> SynthResponse {
    html_response(
        404,
        "text/html; charset=utf-8",
        "<!DOCTYPE html><html><head><title>Not found</title></head><body><h1>Not found</h1>\
         <p>See <a href=\"http://fake-404.example.org/help\">help</a>.</p></body></html>\n"
            .into(),
    )
}

fn html_response(status: u16, content_type: &str, body: String) -> SynthResponse {
    SynthResponse {
        status,
        content_type: content_type.into(),
        location: None,
        body: body.into_bytes(),
    }
}

/// What a complete crawl of a site yields, computed on the model.
struct SimulatedCrawl {
    records: Vec<LinkRecord>,
    urls_requested: usize,
}

/// Breadth-first over the model from `/`, obeying robots.txt, following
/// redirects, one record per distinct (source, target), first anchor wins.
fn simulate_crawl(site: &Site) -> SimulatedCrawl {
    let origin = format!("http://{}", site.host);
    let mut seen: HashSet<String> = HashSet::new();
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut records = Vec::new();
    let mut urls_requested = 0usize;
    let home = format!("{origin}/");
    seen.insert(home.clone());
    queue.push_back(home);
    // Every URL enters the queue once and the site is finite, so this ends.
    while let Some(url) = queue.pop_front() {
        let Some(path) = url.strip_prefix(&origin) else {
            continue;
        };
        if path.starts_with("/private/") {
            continue; // robots.txt: never requested
        }
        let mut path = path.to_string();
        let mut url = url.clone();
        let mut chain: Vec<String> = Vec::new();
        // Redirect chains in the model are at most two hops long.
        loop {
            urls_requested += 1;
            chain.push(url.clone());
            match site.paths.get(&path) {
                Some(Resource::Page(p)) => {
                    emit_page(&site.pages[*p], &url, &mut seen, &mut queue, &mut records);
                    break;
                }
                Some(Resource::Redirect(r)) => match &site.redirects[*r].target {
                    Target::Outbound(target) => {
                        records.push(LinkRecord {
                            source_url: url.clone(),
                            target_url: target.clone(),
                            tag: LinkTag::Redirect,
                            nofollow: false,
                            anchor_text: String::new(),
                        });
                        break;
                    }
                    Target::InScope(next) => {
                        if chain.contains(next) || !seen.insert(next.clone()) {
                            break; // loop, or already fetched or queued
                        }
                        let Some(next_path) = next.strip_prefix(&origin) else {
                            break;
                        };
                        path = next_path.to_string();
                        url = next.clone();
                    }
                    Target::Ignored => break,
                },
                _ => break,
            }
        }
    }
    records.sort_by(|a, b| (&a.source_url, &a.target_url).cmp(&(&b.source_url, &b.target_url)));
    SimulatedCrawl {
        records,
        urls_requested,
    }
}

/// The links of one page, in document order.
fn page_links(page: &Page) -> impl Iterator<Item = &Link> {
    page.blocks.iter().flat_map(|b| match b {
        Block::Nav(l)
        | Block::Paragraph(l)
        | Block::Related(l)
        | Block::Map(l)
        | Block::Footer(l) => l.as_slice(),
        Block::Script(_) | Block::Comment(_) => &[],
    })
}

fn emit_page(
    page: &Page,
    source: &str,
    seen: &mut HashSet<String>,
    queue: &mut VecDeque<String>,
    records: &mut Vec<LinkRecord>,
) {
    let mut targets: HashSet<&str> = HashSet::new();
    for link in page_links(page) {
        match &link.target {
            Target::InScope(url) => {
                if seen.insert(url.clone()) {
                    queue.push_back(url.clone());
                }
            }
            Target::Outbound(url) => {
                if targets.insert(url.as_str()) {
                    records.push(LinkRecord {
                        source_url: source.to_string(),
                        target_url: url.clone(),
                        tag: link.tag,
                        nofollow: link.nofollow,
                        anchor_text: link.anchor.clone(),
                    });
                }
            }
            Target::Ignored => {}
        }
    }
}

// ---------------------------------------------------------------------------
// Generation.

fn plan_site(seed: u64, index: usize, config: &SynthConfig) -> SitePlan {
    let mut rng = Rng::derive(seed, index as u64, 0);
    let n = pareto_size(
        &mut rng,
        config.min_pages_per_site,
        config.max_pages_per_site,
    );
    let mut paths = Vec::with_capacity(n);
    let mut parents = Vec::with_capacity(n);
    paths.push("/".to_string());
    parents.push(0);
    for p in 1..n {
        let dir = rng.pick(DIRS);
        let slug = rng.word();
        paths.push(format!("/{dir}{slug}-{p}.html"));
        parents.push(rng.below(p));
    }
    SitePlan {
        host: site_host(index),
        paths,
        parents,
    }
}

/// Which optional parts a site has: fixed by its index, so even a web of a
/// handful of sites has every kind.
struct Features {
    old_redirect: bool,
    go_redirect: bool,
    redirect_loop: bool,
    missing: bool,
    pdf: bool,
    server_error: bool,
    long_url: bool,
}

impl Features {
    fn of(index: usize, pages: usize) -> Features {
        Features {
            old_redirect: index % 3 != 1 && pages >= 2,
            go_redirect: index % 2 == 0,
            redirect_loop: index % 4 == 1,
            missing: index % 3 == 0,
            pdf: index % 3 == 2,
            server_error: index % 5 == 3,
            long_url: index % 4 == 3,
        }
    }
}

/// Links a page must carry besides its tree, nav, cross and outbound links.
#[derive(Default)]
struct Extras {
    internal_paths: Vec<String>,
    outbound: Vec<String>,
}

fn build_site(seed: u64, index: usize, plans: &[SitePlan], config: &SynthConfig) -> Site {
    let plan = &plans[index];
    let n = plan.paths.len();
    let host = plan.host.clone();
    let origin = format!("http://{host}");
    let mut rng = Rng::derive(seed, index as u64, 1);
    let features = Features::of(index, n);

    let mut paths: HashMap<String, Resource> = HashMap::new();
    for (p, path) in plan.paths.iter().enumerate() {
        paths.insert(path.clone(), Resource::Page(p));
    }
    let private_path = format!("/private/members-{index}.html");
    paths.insert(private_path.clone(), Resource::Private);

    let mut redirects = Vec::new();
    let mut extras: Vec<Extras> = (0..n).map(|_| Extras::default()).collect();
    // The tree link of this page goes through `/old-{index}` instead.
    let mut redirected_child: Option<(usize, String)> = None;
    if features.old_redirect {
        let child = 1 + rng.below(n - 1);
        let old_path = format!("/old-{index}");
        let target_path = &plan.paths[child];
        let location = if rng.chance(0.5) {
            format!("{origin}{target_path}")
        } else {
            target_path.clone()
        };
        paths.insert(old_path.clone(), Resource::Redirect(redirects.len()));
        redirects.push(Redirect {
            status: 301,
            location,
            target: Target::InScope(format!("{origin}{target_path}")),
        });
        redirected_child = Some((child, old_path));
    }
    if features.go_redirect {
        let go_path = format!("/go/{index}");
        let target = format!(
            "http://www.ext{}.example.org/landing?from=site{index}&id={}",
            rng.below(EXTERNAL_HOSTS as usize),
            rng.below(1000)
        );
        let location = match rng.below(3) {
            0 => target.clone(),
            1 => format!("{target}#welcome"),
            _ => upper_scheme_host(&target),
        };
        paths.insert(go_path.clone(), Resource::Redirect(redirects.len()));
        redirects.push(Redirect {
            status: 302,
            location,
            target: Target::Outbound(target),
        });
        extras[rng.below(n)].internal_paths.push(go_path);
    }
    if features.redirect_loop {
        paths.insert("/loop-a".into(), Resource::Redirect(redirects.len()));
        redirects.push(Redirect {
            status: 302,
            location: "/loop-b".into(),
            target: Target::InScope(format!("{origin}/loop-b")),
        });
        paths.insert("/loop-b".into(), Resource::Redirect(redirects.len()));
        redirects.push(Redirect {
            status: 302,
            location: format!("{origin}/loop-a"),
            target: Target::InScope(format!("{origin}/loop-a")),
        });
        extras[rng.below(n)].internal_paths.push("/loop-a".into());
    }
    if features.missing {
        // Linked but never served: a 404.
        let path = format!("/missing-{index}.html");
        extras[rng.below(n)].internal_paths.push(path);
    }
    if features.server_error {
        let path = format!("/error-{index}.html");
        paths.insert(path.clone(), Resource::ServerError);
        extras[rng.below(n)].internal_paths.push(path);
    }
    if features.pdf {
        let path = format!("/files/report-{index}.pdf");
        paths.insert(path.clone(), Resource::Pdf);
        extras[rng.below(n)].internal_paths.push(path);
    }
    if features.long_url {
        let url = format!(
            "http://www.ext{}.example.org/trap?data={}",
            rng.below(EXTERNAL_HOSTS as usize),
            "a".repeat(MAX_URL_LEN + 10)
        );
        extras[rng.below(n)].outbound.push(url);
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for p in 1..n {
        children[plan.parents[p]].push(p);
    }

    let mut pages = Vec::with_capacity(n);
    for p in 0..n {
        let mut page_rng = Rng::derive(seed, index as u64, 1000 + p as u64);
        let page = build_page(
            &mut page_rng,
            PageContext {
                site_index: index,
                page_index: p,
                plans,
                children: &children[p],
                redirected_child: redirected_child.as_ref(),
                extras: &extras[p],
                private_path: &private_path,
            },
        );
        pages.push(page);
    }
    let private = build_private_page(
        &mut Rng::derive(seed, index as u64, 2),
        index,
        &host,
        private_path,
    );

    let mut robots_txt = format!(
        "# robots.txt for {host} (BeeBot synthetic web)\n\
         User-agent: GreedyBot\n\
         Disallow: /\n\
         \n\
         User-agent: *\n\
         Disallow: /private/\n"
    );
    if let Some(ms) = config.crawl_delay_ms {
        robots_txt.push_str(&format!("Crawl-delay: {}.{:03}\n", ms / 1000, ms % 1000));
    }

    Site {
        host,
        pages,
        private,
        paths,
        redirects,
        robots_txt,
    }
}

/// Everything `build_page` needs to know about the page's surroundings.
struct PageContext<'a> {
    site_index: usize,
    page_index: usize,
    plans: &'a [SitePlan],
    children: &'a [usize],
    redirected_child: Option<&'a (usize, String)>,
    extras: &'a Extras,
    private_path: &'a str,
}

fn build_page(rng: &mut Rng, ctx: PageContext<'_>) -> Page {
    let plan = &ctx.plans[ctx.site_index];
    let n = plan.paths.len();
    let p = ctx.page_index;
    let index = ctx.site_index;
    let host = plan.host.as_str();
    let path = plan.paths[p].clone();
    let title = title_case(&format!("{} {} {}", rng.word(), rng.word(), rng.word()));

    // A few pages carry a <base href> pointing at another directory.
    let wants_base = p > 0 && ((index % 2 == 1 && p == n - 1) || rng.chance(0.05));
    let base = if wants_base {
        let dir = rng.pick(DIRS);
        Some(format!("http://{host}/{dir}"))
    } else {
        None
    };
    // The path relative links are written against.
    let base_path = match &base {
        Some(b) => b[format!("http://{host}").len()..].to_string(),
        None => path.clone(),
    };
    let content_type = if p == 1 && index % 4 == 2 {
        "application/xhtml+xml"
    } else if p == 1 && index % 4 == 0 {
        "Text/HTML; Charset=UTF-8"
    } else if rng.chance(0.5) {
        "text/html; charset=utf-8"
    } else {
        "text/html"
    };
    let w = LinkWriter {
        host,
        base_path: &base_path,
    };

    let mut blocks = Vec::new();

    // Navigation: home and the first few pages, on every page.
    let mut nav = Vec::new();
    for q in 0..n.min(4) {
        let label = if q == 0 {
            "Home".to_string()
        } else {
            title_case(&format!("{} {}", rng.word(), rng.word()))
        };
        nav.push(w.internal(rng, &plan.paths[q], &label));
    }
    blocks.push(Block::Nav(nav));

    if p == 0 || rng.chance(0.3) {
        blocks.push(Block::Script(format!(
            "http://fake-script{index}.example.org/p{p}"
        )));
    }

    // Links that go into paragraphs, shuffled.
    let mut inline: Vec<Link> = Vec::new();
    for &child in ctx.children {
        let label = format!("{} {}", rng.word(), rng.word());
        match ctx.redirected_child {
            Some((c, old_path)) if *c == child => inline.push(w.internal(rng, old_path, &label)),
            _ => inline.push(w.internal(rng, &plan.paths[child], &label)),
        }
    }
    for _ in 0..rng.below(4) {
        let q = rng.below(n);
        let label = format!("{} {}", rng.word(), rng.word());
        inline.push(w.internal(rng, &plan.paths[q], &label));
    }
    if p == 0 {
        inline.push(w.internal(rng, ctx.private_path, "Members area"));
    }
    for extra in &ctx.extras.internal_paths {
        let label = format!("{} {}", rng.word(), rng.word());
        inline.push(w.internal(rng, extra, &label));
    }
    let mut outbound_urls: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(6) {
        outbound_urls.push(external_url(rng));
    }
    if ctx.plans.len() > 1 {
        for _ in 0..rng.below(3) {
            let mut other = rng.below(ctx.plans.len() - 1);
            if other >= index {
                other += 1;
            }
            let other_plan = &ctx.plans[other];
            let page = rng.pick(&other_plan.paths);
            outbound_urls.push(format!("http://{}{}", other_plan.host, page));
        }
    }
    if rng.chance(0.1) {
        outbound_urls.push(format!("http://blog.{host}/post-{}.html", rng.below(100)));
    }
    outbound_urls.extend(ctx.extras.outbound.iter().cloned());
    let mut outbound_links = Vec::new();
    for url in &outbound_urls {
        let nofollow = rng.chance(0.2);
        let anchor = format!("{} {}", rng.word(), rng.word());
        outbound_links.push(w.outbound(rng, url, nofollow, &anchor));
    }
    // Duplicates: same target and rel, another form and anchor, later on the page.
    let mut duplicates = Vec::new();
    for link in &outbound_links {
        if let Target::Outbound(url) = &link.target {
            if rng.chance(0.25) {
                let anchor = format!("{} again", rng.word());
                duplicates.push(w.outbound(rng, url, link.nofollow, &anchor));
            }
        }
    }
    inline.extend(outbound_links);
    if rng.chance(0.3) && p != 0 && base.is_none() {
        inline.push(w.raw(
            rng,
            "#top",
            Target::InScope(format!("http://{host}{path}")),
            "Back to top",
        ));
    }
    shuffle(rng, &mut inline);

    let n_paragraphs = 3 + rng.below(3);
    let mut paragraphs: Vec<Vec<Link>> = vec![Vec::new(); n_paragraphs];
    for (i, link) in inline.into_iter().enumerate() {
        paragraphs[i % n_paragraphs].push(link);
    }
    for (i, links) in paragraphs.into_iter().enumerate() {
        blocks.push(Block::Paragraph(links));
        if i == 1 && (p == 0 || rng.chance(0.3)) {
            blocks.push(Block::Comment(format!(
                "http://fake-comment{index}.example.org/p{p}"
            )));
        }
    }

    let mut related = duplicates;
    for _ in 0..rng.below(3) {
        let url = external_url(rng);
        let anchor = format!("{} {}", rng.word(), rng.word());
        let nofollow = rng.chance(0.3);
        related.push(w.outbound(rng, &url, nofollow, &anchor));
    }
    if !related.is_empty() {
        blocks.push(Block::Related(related));
    }

    if rng.chance(0.15) {
        let mut areas = Vec::new();
        for _ in 0..1 + rng.below(2) {
            let url = external_url(rng);
            areas.push(w.area(rng, &url));
        }
        blocks.push(Block::Map(areas));
    }

    let mut footer = Vec::new();
    if rng.chance(0.4) {
        footer.push(w.raw(
            rng,
            &format!("mailto:webmaster@{host}"),
            Target::Ignored,
            "Write to us",
        ));
    }
    if rng.chance(0.3) {
        footer.push(w.raw(rng, "javascript:void(0)", Target::Ignored, "Print"));
    }
    blocks.push(Block::Footer(footer));

    Page {
        path,
        title,
        base,
        content_type,
        text_seed: rng.next_u64(),
        blocks,
    }
}

fn build_private_page(rng: &mut Rng, index: usize, host: &str, path: String) -> Page {
    let w = LinkWriter {
        host,
        base_path: &path,
    };
    let nav = vec![w.internal(rng, "/", "Home")];
    let mut links = Vec::new();
    for k in 0..3 {
        let url = format!("http://www.private-ext{index}.example.org/secret-{k}.html");
        links.push(w.outbound(rng, &url, false, "secret partner"));
    }
    Page {
        path,
        title: "Members only".into(),
        base: None,
        content_type: "text/html; charset=utf-8",
        text_seed: rng.next_u64(),
        blocks: vec![
            Block::Nav(nav),
            Block::Paragraph(links),
            Block::Footer(Vec::new()),
        ],
    }
}

fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
}

fn title_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for ch in s.chars() {
        if start {
            out.extend(ch.to_uppercase());
        } else {
            out.push(ch);
        }
        start = ch == ' ';
    }
    out
}

/// A canonical external URL (already in the form the `url` crate serialises).
fn external_url(rng: &mut Rng) -> String {
    let k = rng.below(EXTERNAL_HOSTS as usize);
    let word = rng.word();
    let n = rng.below(500);
    match rng.below(8) {
        0 => format!("http://www.ext{k}.example.org/"),
        1 => format!("https://www.ext{k}.example.org/"),
        2 => format!("https://www.ext{k}.example.org/search?q={word}&page={n}"),
        3 => format!("http://ext{k}.example.net/{}/Index.HTML", title_case(word)),
        4 => format!(
            "https://news.ext{k}.example.com/20{:02}/{:02}/story-{n}",
            rng.below(25),
            1 + rng.below(12)
        ),
        5 => format!(
            "http://www.ext{k}.example.org:8080/api/v{}",
            1 + rng.below(3)
        ),
        6 => format!("http://www.ext{k}.example.org/files/{word}%20list.html"),
        _ => format!("http://www.ext{k}.example.org/articles/{word}-{n}.html"),
    }
}

/// `http://host/path` → `HTTP://HOST/path`.
fn upper_scheme_host(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    format!(
        "{}://{}{}",
        scheme.to_ascii_uppercase(),
        host.to_ascii_uppercase(),
        path
    )
}

/// The href that reaches `target_path` from a document whose base path is `base_path`
/// (both absolute paths), with `../` where needed; `./` when it is the base directory.
fn relative_href(base_path: &str, target_path: &str) -> String {
    let base_dirs: Vec<&str> = {
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        dir.split('/').filter(|s| !s.is_empty()).collect()
    };
    let (target_dir, file) = match target_path.rfind('/') {
        Some(i) => (&target_path[..=i], &target_path[i + 1..]),
        None => ("/", target_path),
    };
    let target_dirs: Vec<&str> = target_dir.split('/').filter(|s| !s.is_empty()).collect();
    let common = base_dirs
        .iter()
        .zip(&target_dirs)
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = "../".repeat(base_dirs.len() - common);
    for dir in &target_dirs[common..] {
        out.push_str(dir);
        out.push('/');
    }
    out.push_str(file);
    if out.is_empty() {
        out.push_str("./");
    }
    out
}

/// Writes link elements of one page in varied but equivalent forms.
struct LinkWriter<'a> {
    host: &'a str,
    /// The path relative hrefs resolve against (the page's, or its `<base href>`'s).
    base_path: &'a str,
}

impl LinkWriter<'_> {
    /// A link to a path of this site (in scope).
    fn internal(&self, rng: &mut Rng, target_path: &str, label: &str) -> Link {
        let host = self.host;
        let absolute = format!("http://{host}{target_path}");
        let relative = relative_href(self.base_path, target_path);
        let href = match rng.below(7) {
            0 => absolute.clone(),
            1 => target_path.to_string(),
            2 | 3 => relative.clone(),
            4 if !relative.starts_with('.') => format!("./{relative}"),
            5 => upper_scheme_host(&absolute),
            _ => format!("{relative}#section-{}", rng.below(5)),
        };
        let nofollow = rng.chance(0.05);
        self.anchor(rng, &href, Target::InScope(absolute), nofollow, label)
    }

    /// A link leaving the site (or ignored, when the URL is too long to keep).
    fn outbound(&self, rng: &mut Rng, url: &str, nofollow: bool, label: &str) -> Link {
        let href = outbound_form(rng, url);
        let target = if url.len() > MAX_URL_LEN {
            Target::Ignored
        } else {
            Target::Outbound(url.to_string())
        };
        self.anchor(rng, &href, target, nofollow, label)
    }

    /// A link whose href is written exactly as given.
    fn raw(&self, rng: &mut Rng, href: &str, target: Target, label: &str) -> Link {
        self.anchor(rng, href, target, false, label)
    }

    /// An `<area>` link without alt text (anchor text empty).
    fn area(&self, rng: &mut Rng, url: &str) -> Link {
        let href = outbound_form(rng, url);
        let x = rng.below(200);
        let markup = format!(
            "<area shape=\"rect\" coords=\"{x},0,{},40\" href=\"{}\">",
            x + 40,
            escape_href(rng, &href)
        );
        Link {
            target: Target::Outbound(url.to_string()),
            href,
            markup,
            anchor: String::new(),
            nofollow: false,
            tag: LinkTag::Area,
        }
    }

    fn anchor(
        &self,
        rng: &mut Rng,
        href: &str,
        target: Target,
        nofollow: bool,
        label: &str,
    ) -> Link {
        let (inner_html, text) = anchor_text(rng, label);
        let upper = rng.chance(0.1);
        let escaped = escape_href(rng, href);
        let needs_quotes = escaped.is_empty()
            || escaped
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '=' | '<' | '>' | '`'));
        let href_attr = match rng.below(5) {
            0 if !needs_quotes => format!("{}={escaped}", if upper { "HREF" } else { "href" }),
            1 => format!("{}='{escaped}'", if upper { "HREF" } else { "href" }),
            _ => format!("{}=\"{escaped}\"", if upper { "HREF" } else { "href" }),
        };
        let rel = if nofollow {
            Some(*rng.pick(&[
                "rel=\"nofollow\"",
                "rel=\"noopener nofollow\"",
                "rel=NoFollow",
                "rel=\"external nofollow ugc\"",
            ]))
        } else {
            match rng.below(6) {
                0 => Some("rel=\"noopener\""),
                1 => Some("rel=\"external\""),
                _ => None,
            }
        };
        let mut attrs = vec![href_attr];
        if let Some(rel) = rel {
            attrs.push(rel.to_string());
        }
        if rng.chance(0.2) {
            attrs.push("class=\"link\"".into());
        }
        if rng.chance(0.1) {
            attrs.push("title=\"next &gt; page\"".into());
        }
        shuffle(rng, &mut attrs);
        let tag = if upper { "A" } else { "a" };
        let markup = format!("<{tag} {}>{inner_html}</{tag}>", attrs.join(" "));
        Link {
            target,
            href: href.to_string(),
            markup,
            anchor: collapse_whitespace(&text, MAX_ANCHOR_CHARS),
            nofollow,
            tag: LinkTag::A,
        }
    }
}

/// An href form that resolves to the canonical `url` from any http page.
fn outbound_form(rng: &mut Rng, url: &str) -> String {
    let is_http = url.starts_with("http://");
    let is_root = url.matches('/').count() == 3 && url.ends_with('/');
    match rng.below(8) {
        0 => format!("{url}#frag-{}", rng.below(9)),
        1 => upper_scheme_host(url),
        2 if is_http => url["http:".len()..].to_string(),
        3 if is_http
            && !url["http://".len()..]
                .split('/')
                .next()
                .unwrap_or("")
                .contains(':') =>
        {
            let rest = &url["http://".len()..];
            match rest.find('/') {
                Some(i) => format!("http://{}:80{}", &rest[..i], &rest[i..]),
                None => url.to_string(),
            }
        }
        4 if is_root => url.trim_end_matches('/').to_string(),
        5 => format!("  {url} "),
        6 if url.contains("%20") => url.replace("%20", " "),
        _ => url.to_string(),
    }
}

/// Write an href into an attribute: `&` always escaped (as `&amp;` or `&#38;`).
fn escape_href(rng: &mut Rng, href: &str) -> String {
    if !href.contains('&') {
        return href.to_string();
    }
    let entity = if rng.chance(0.8) { "&amp;" } else { "&#38;" };
    href.replace('&', entity)
}

/// Anchor inner HTML and its text content, in one of several realistic shapes.
fn anchor_text(rng: &mut Rng, label: &str) -> (String, String) {
    let (first, rest) = label.split_once(' ').unwrap_or((label, ""));
    match rng.below(10) {
        0 => (
            format!("\n      {first}\t{rest}  \n   "),
            format!("\n {first}\t{rest} \n"),
        ),
        1 => (
            format!("<em>{first}</em> {rest}"),
            format!("{first} {rest}"),
        ),
        2 => (format!("{first} &amp; {rest}"), format!("{first} & {rest}")),
        3 => (
            format!("<span class=\"x\">{first}</span>\r\n<b>{rest}</b>"),
            format!("{first}\n{rest}"),
        ),
        4 if rng.chance(0.2) => {
            let long = format!("{label} ").repeat(20);
            (long.clone(), long)
        }
        _ => (label.to_string(), label.to_string()),
    }
}

// ---------------------------------------------------------------------------
// Rendering.

fn render_page(site: &Site, page: &Page) -> String {
    let mut rng = Rng(page.text_seed);
    let mut out = String::with_capacity(6 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{} | {}</title>\n", page.title, site.host));
    if let Some(base) = &page.base {
        out.push_str(&format!("<base href=\"{base}\">\n"));
    }
    out.push_str(
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"stylesheet\" href=\"https://cdn.ext-static.example.net/style.css\">\n\
         <style>body { font-family: sans-serif; max-width: 50em } nav a { margin: 0 .5em }</style>\n\
         </head>\n<body>\n",
    );
    for (b, block) in page.blocks.iter().enumerate() {
        match block {
            Block::Nav(links) => {
                out.push_str("<header><nav class=\"menu\">\n");
                for link in links {
                    out.push_str(&link.markup);
                    out.push('\n');
                }
                out.push_str(&format!(
                    "</nav></header>\n<main>\n<h1>{}</h1>\n",
                    page.title
                ));
            }
            Block::Paragraph(links) => {
                out.push_str("<p>");
                let words = 40 + rng.below(60);
                let gap = words / (links.len() + 1);
                let mut next_link = 0;
                for i in 0..words {
                    if i > 0 {
                        out.push(' ');
                    }
                    if gap > 0 && i > 0 && i % gap == 0 && next_link < links.len() {
                        out.push_str(&links[next_link].markup);
                        out.push(' ');
                        next_link += 1;
                    }
                    out.push_str(rng.word());
                    if rng.chance(0.02) {
                        out.push_str(" R&amp;D");
                    }
                    if rng.chance(0.02) {
                        out.push_str(&format!(" <a name=\"n{b}-{i}\">here</a>"));
                    }
                }
                for link in &links[next_link..] {
                    out.push(' ');
                    out.push_str(&link.markup);
                }
                out.push_str(".</p>\n");
            }
            Block::Related(links) => {
                out.push_str("<h2>Related</h2>\n<ul class=\"related\">\n");
                for link in links {
                    out.push_str(&format!("  <li>{}</li>\n", link.markup));
                }
                out.push_str("</ul>\n");
            }
            Block::Map(links) => {
                out.push_str(&format!(
                    "<img src=\"/static/map-{b}.png\" usemap=\"#map{b}\" alt=\"map\">\n<map name=\"map{b}\">\n"
                ));
                for link in links {
                    out.push_str(&link.markup);
                    out.push('\n');
                }
                out.push_str("</map>\n");
            }
            Block::Script(url) => {
                out.push_str(&format!(
                    "<script>\n  var promo = '<a href=\"{url}\">promo</a>';\n  if (1 < 2 && promo) {{ document.title += ''; }}\n</script>\n"
                ));
            }
            Block::Comment(url) => {
                out.push_str(&format!("<!-- old menu: <a href=\"{url}\">gone</a> -->\n"));
            }
            Block::Footer(links) => {
                out.push_str("</main>\n<footer>\n<p>&copy; ");
                out.push_str(&site.host);
                out.push_str(" &middot; <img src=\"/static/logo.png\" alt=\"logo\">");
                for link in links {
                    out.push(' ');
                    out.push_str(&link.markup);
                }
                out.push_str("</p>\n</footer>\n");
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use url::Url;

    /// Decode the entities `escape_href` writes.
    fn unescape(s: &str) -> String {
        s.replace("&#38;", "&").replace("&amp;", "&")
    }

    fn all_pages(site: &Site) -> impl Iterator<Item = &Page> {
        site.pages.iter().chain(std::iter::once(&site.private))
    }

    #[test]
    fn same_seed_same_bytes() {
        let a = SynthWeb::generate(42, 20);
        let b = SynthWeb::generate(42, 20);
        assert_eq!(a.site_hosts(), b.site_hosts());
        for site in &a.sites {
            for page in all_pages(site) {
                let ra = a.respond(&site.host, &page.path);
                let rb = b.respond(&site.host, &page.path);
                assert_eq!(ra, rb);
                assert_eq!(ra.status, 200);
            }
        }
        assert_eq!(a.truth(), b.truth());
        let c = SynthWeb::generate(43, 20);
        assert_ne!(a.truth(), c.truth());
    }

    #[test]
    fn sizes_are_bounded_and_heavy_tailed() {
        let cfg = SynthConfig::default();
        let web = SynthWeb::generate(9, 500);
        let mut sizes: Vec<usize> = web
            .site_hosts()
            .iter()
            .map(|h| web.site_pages(h).unwrap())
            .collect();
        assert!(sizes
            .iter()
            .all(|&s| s >= cfg.min_pages_per_site && s <= cfg.max_pages_per_site));
        sizes.sort_unstable();
        let median = sizes[sizes.len() / 2];
        let mean = web.total_pages() as f64 / sizes.len() as f64;
        let small = sizes
            .iter()
            .filter(|&&s| s <= 2 * cfg.min_pages_per_site)
            .count();
        assert!(small * 3 > sizes.len(), "{small} small of {}", sizes.len());
        assert!(mean > 1.5 * median as f64, "mean {mean} median {median}");
        assert!(*sizes.last().unwrap() >= cfg.max_pages_per_site / 2);
    }

    #[test]
    fn config_is_clamped() {
        let web = SynthWeb::with_config(
            1,
            5,
            SynthConfig {
                min_pages_per_site: 0,
                max_pages_per_site: 1,
                crawl_delay_ms: Some(10 * MAX_SYNTH_CRAWL_DELAY_MS),
            },
        );
        for h in web.site_hosts() {
            assert_eq!(web.site_pages(&h), Some(1));
            assert!(!web.site_truth(&h).unwrap().is_empty());
        }
        let robots = web.respond("site0.synth.test", "/robots.txt");
        assert!(String::from_utf8(robots.body)
            .unwrap()
            .contains("Crawl-delay: 60.000"));
    }

    #[test]
    fn canonical_strings_are_what_url_serialises() {
        let web = SynthWeb::generate(5, 30);
        for site in &web.sites {
            for page in all_pages(site) {
                for link in page_links(page) {
                    if let Target::InScope(u) | Target::Outbound(u) = &link.target {
                        assert_eq!(Url::parse(u).unwrap().as_str(), u);
                    }
                }
            }
            for r in &site.redirects {
                if let Target::InScope(u) | Target::Outbound(u) = &r.target {
                    assert_eq!(Url::parse(u).unwrap().as_str(), u);
                }
            }
        }
    }

    #[test]
    fn every_href_resolves_to_its_target() {
        let web = SynthWeb::generate(11, 30);
        for site in &web.sites {
            for page in all_pages(site) {
                let page_url = Url::parse(&format!("http://{}{}", site.host, page.path)).unwrap();
                let base = match &page.base {
                    Some(b) => Url::parse(b).unwrap(),
                    None => page_url.clone(),
                };
                for link in page_links(page) {
                    let mut resolved = base.join(&unescape(&link.href)).unwrap();
                    resolved.set_fragment(None);
                    match &link.target {
                        Target::InScope(u) => {
                            assert_eq!(resolved.as_str(), u, "{}", link.markup);
                            assert_eq!(resolved.host_str(), Some(site.host.as_str()));
                        }
                        Target::Outbound(u) => {
                            assert_eq!(resolved.as_str(), u, "{}", link.markup);
                            assert_ne!(resolved.host_str(), Some(site.host.as_str()));
                        }
                        Target::Ignored => {
                            assert!(
                                !matches!(resolved.scheme(), "http" | "https")
                                    || resolved.as_str().len() > MAX_URL_LEN
                            );
                        }
                    }
                    assert!(page_url.scheme() == "http");
                }
            }
            for r in &site.redirects {
                let resolved = Url::parse(&format!("http://{}/", site.host))
                    .unwrap()
                    .join(&r.location)
                    .unwrap();
                let mut resolved = resolved;
                resolved.set_fragment(None);
                match &r.target {
                    Target::InScope(u) | Target::Outbound(u) => assert_eq!(resolved.as_str(), u),
                    Target::Ignored => panic!("redirects always lead somewhere"),
                }
            }
        }
    }

    #[test]
    fn truth_is_nonempty_and_excludes_private_pages() {
        let web = SynthWeb::generate(7, 12);
        let truth = web.truth();
        assert!(!truth.is_empty());
        for (site, r) in &truth {
            assert!(r.source_url.starts_with(&format!("http://{site}/")));
            assert!(!r.source_url.contains("/private/"));
            assert!(!r.target_url.contains("private-ext"));
            assert!(!r.target_url.contains("fake-"));
            assert!(!r.target_url.starts_with(&format!("http://{site}/")));
            assert!(r.target_url.len() <= MAX_URL_LEN);
        }
        // The private pages exist, are served, and are linked from home.
        for host in web.site_hosts() {
            let private = &web.site_disallowed_paths(&host).unwrap()[0];
            assert_eq!(web.respond(&host, private).status, 200);
            let home = String::from_utf8(web.respond(&host, "/").body).unwrap();
            assert!(home.contains("/private/") || home.contains("private/members"));
        }
        // Distinct (source, target) pairs.
        let mut pairs: Vec<_> = truth
            .iter()
            .map(|(_, r)| (r.source_url.clone(), r.target_url.clone()))
            .collect();
        let n = pairs.len();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), n);
        // The truth covers every page of every site (all reachable from `/`) and
        // includes redirect records.
        assert!(truth.iter().any(|(_, r)| r.tag == LinkTag::Redirect));
        assert!(truth.iter().any(|(_, r)| r.tag == LinkTag::Area));
        assert!(truth.iter().any(|(_, r)| r.nofollow));
        assert!(truth
            .iter()
            .any(|(_, r)| r.target_url.starts_with("https://")));
        assert!(truth
            .iter()
            .any(|(_, r)| r.target_url.contains(".synth.test/")));
    }

    #[test]
    fn redirects_and_errors_are_served() {
        let web = SynthWeb::generate(7, 12);
        let go = web.respond("site0.synth.test:8080", "/go/0");
        assert_eq!(go.status, 302);
        assert!(go
            .location
            .unwrap()
            .to_ascii_lowercase()
            .contains("landing"));
        let old = web.respond("site0.synth.test", "/old-0");
        assert_eq!(old.status, 301);
        assert_eq!(web.respond("site1.synth.test", "/loop-a").status, 302);
        assert_eq!(
            web.respond("site0.synth.test", "/missing-0.html").status,
            404
        );
        assert_eq!(web.respond("site3.synth.test", "/error-3.html").status, 500);
        assert_eq!(
            web.respond("site2.synth.test", "/files/report-2.pdf")
                .content_type,
            "application/pdf"
        );
        assert_eq!(web.respond("site99.synth.test", "/").status, 404);
        assert_eq!(web.respond("other.test", "/").status, 404);
        assert_eq!(web.respond("site0.synth.test", "/nope").status, 404);
        assert_eq!(web.respond("SITE0.Synth.Test.", "/").status, 200);
        let robots =
            String::from_utf8(web.respond("site0.synth.test", "/robots.txt").body).unwrap();
        assert!(robots.contains("Disallow: /private/"));
    }

    #[test]
    fn pages_are_a_few_kb() {
        let web = SynthWeb::generate(3, 10);
        let mut total = 0usize;
        let mut count = 0usize;
        for site in &web.sites {
            for page in &site.pages {
                let body = web.respond(&site.host, &page.path).body;
                assert!(
                    body.len() > 1000 && body.len() < 64 * 1024,
                    "{}",
                    body.len()
                );
                total += body.len();
                count += 1;
            }
        }
        let mean = total / count;
        assert!((2000..12_000).contains(&mean), "mean page {mean} bytes");
    }

    #[test]
    fn site_urls_count_every_request_once() {
        let web = SynthWeb::generate(7, 12);
        for host in web.site_hosts() {
            let pages = web.site_pages(&host).unwrap();
            let urls = web.site_urls(&host).unwrap();
            assert!(urls >= pages, "{host}: {urls} < {pages}");
            assert!(urls <= pages + 6, "{host}: {urls} vs {pages}");
        }
    }

    #[test]
    fn relative_hrefs() {
        assert_eq!(relative_href("/news/a.html", "/"), "../");
        assert_eq!(relative_href("/news/a.html", "/news/b.html"), "b.html");
        assert_eq!(
            relative_href("/news/a.html", "/docs/guide/c.html"),
            "../docs/guide/c.html"
        );
        assert_eq!(relative_href("/", "/"), "./");
        assert_eq!(relative_href("/", "/docs/x.html"), "docs/x.html");
        assert_eq!(relative_href("/docs/guide/", "/docs/y.html"), "../y.html");
    }

    #[test]
    fn site_index_parses_hosts() {
        assert_eq!(site_index("site0.synth.test"), Some(0));
        assert_eq!(site_index("site12.synth.test:443"), Some(12));
        assert_eq!(site_index("Site7.SYNTH.test."), Some(7));
        assert_eq!(site_index("site01.synth.test"), None);
        assert_eq!(site_index("site.synth.test"), None);
        assert_eq!(site_index("blog.site1.synth.test"), None);
        assert_eq!(site_index("site1xsynth.test"), None);
    }

    #[test]
    fn one_site_may_serve_its_own_robots_txt() {
        let mut web = SynthWeb::generate(3, 2);
        let generated = web.respond("site1.synth.test", "/robots.txt").body;
        let ours = "User-agent: BeeBot\nDisallow: /\n";
        assert!(web.set_robots_txt("site0.synth.test", ours));
        assert!(!web.set_robots_txt("site2.synth.test", ours));
        assert_eq!(
            web.respond("site0.synth.test", "/robots.txt").body,
            ours.as_bytes()
        );
        assert_eq!(
            web.respond("site1.synth.test", "/robots.txt").body,
            generated
        );
    }

    /// FNV-1a over length-prefixed parts: a hash that is the same on every
    /// platform and Rust version, for the golden-bytes test below.
    struct Fnv(u64);

    impl Fnv {
        fn new() -> Fnv {
            Fnv(0xCBF2_9CE4_8422_2325)
        }

        fn bytes(&mut self, bytes: &[u8]) {
            for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
                self.0 ^= u64::from(*b);
                self.0 = self.0.wrapping_mul(0x0000_0100_0000_01B3);
            }
        }

        fn str(&mut self, s: &str) {
            self.bytes(s.as_bytes());
        }
    }

    /// Every answer and the truth of a few fixed webs, through the public API.
    fn web_hash(web: &SynthWeb) -> u64 {
        let mut h = Fnv::new();
        for (i, host) in web.site_hosts().iter().enumerate() {
            h.str(host);
            h.str(&format!("{:?}", web.site_urls(host)));
            let mut paths = web.site_page_paths(host).unwrap();
            paths.extend(web.site_disallowed_paths(host).unwrap());
            for extra in [
                "/robots.txt".to_string(),
                format!("/old-{i}"),
                format!("/go/{i}"),
                "/loop-a".into(),
                "/loop-b".into(),
                format!("/missing-{i}.html"),
                format!("/error-{i}.html"),
                format!("/files/report-{i}.pdf"),
                "/nowhere".into(),
            ] {
                paths.push(extra);
            }
            for path in &paths {
                let r = web.respond(&format!("{host}:8080"), path);
                h.str(path);
                h.str(&r.status.to_string());
                h.str(&r.content_type);
                h.str(&format!("{:?}", r.location));
                h.bytes(&r.body);
            }
        }
        for (host, record) in web.truth() {
            h.str(&host);
            h.str(&record.source_url);
            h.str(&record.target_url);
            h.str(record.tag.as_str());
            h.str(&record.nofollow.to_string());
            h.str(&record.anchor_text);
        }
        h.0
    }

    #[test]
    fn golden_bytes_never_change() {
        let mut h = Fnv::new();
        for (seed, sites) in [(0u64, 1usize), (1, 7), (42, 20), (0xDEAD_BEEF, 33)] {
            h.bytes(&web_hash(&SynthWeb::generate(seed, sites)).to_le_bytes());
        }
        let small = SynthConfig {
            min_pages_per_site: 1,
            max_pages_per_site: 9,
            crawl_delay_ms: Some(1_250),
        };
        h.bytes(&web_hash(&SynthWeb::with_config(5, 12, small)).to_le_bytes());
        let big = SynthConfig {
            min_pages_per_site: 200,
            max_pages_per_site: 400,
            crawl_delay_ms: Some(u64::MAX),
        };
        h.bytes(&web_hash(&SynthWeb::with_config(7, 3, big)).to_le_bytes());
        assert_eq!(
            h.0, 11188824895636413028,
            "the synthetic web's bytes changed"
        );
    }
}
