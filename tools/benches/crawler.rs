//! Crawler bench (`cargo bench -p beebot-tools --bench crawler`): prints one
//! table with link extraction in MB/s on one core (synthetic-web pages and a
//! real-looking portal page), whole-scan pages/s for one client scanning 16
//! synthetic sites with 16 slots and with 1 slot (delay 0, loopback), and the
//! client's peak memory during the 16-slot scan.
//!
//! The synthetic web is served by a child process (this binary re-run with
//! `BEEBOT_BENCH_ROLE=web`), so the peak memory measured is the crawler's alone.
//! Figures are compared within one run; nothing here asserts a speed.

use beebot_client::cancel::Cancel;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use beebot_client::crawler::{crawl, CrawlSpec, CrawlerConfig};
use beebot_shared::extract::extract_page_links;
use beebot_shared::scope::Scope;
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::SynthWebServer;
use url::Url;

/// Seed of the benched synthetic web.
const SEED: u64 = 2024;
/// Sites scanned at once, and in all.
const SITES: usize = 16;
/// Least time spent on each extraction figure.
const EXTRACT_MIN_TIME: Duration = Duration::from_secs(2);
/// Most rounds over the page set per extraction figure.
const EXTRACT_MAX_ROUNDS: usize = 100_000;
/// The header the synthetic web sends with pages (the crawler passes it on).
const CONTENT_TYPE: Option<&str> = Some("text/html; charset=utf-8");
/// Environment variable that turns this binary into the web server.
const ROLE_VAR: &str = "BEEBOT_BENCH_ROLE";

fn web() -> SynthWeb {
    SynthWeb::with_config(
        SEED,
        SITES,
        SynthConfig {
            min_pages_per_site: 200,
            max_pages_per_site: 600,
            crawl_delay_ms: None,
        },
    )
}

fn main() {
    if std::env::var(ROLE_VAR).as_deref() == Ok("web") {
        serve_web();
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let web = web();
    let mut rows: Vec<(String, String)> = Vec::new();

    // `BEEBOT_BENCH_ONLY=extract` skips the scans (for profiling the extractor).
    let scans = std::env::var("BEEBOT_BENCH_ONLY").as_deref() != Ok("extract");
    let (mut scan16, mut scan1, mut peak_kb) = (ScanFigures::default(), ScanFigures::default(), 0);
    if scans {
        let (child_port, mut child) = spawn_web();
        scan16 = scan(&web, child_port, SITES);
        peak_kb = peak_rss_kb();
        scan1 = scan(&web, child_port, 1);
        drop(child.stdin.take());
        let _ = child.wait();
    }

    let synth_pages = synth_pages(&web);
    let synth_mb = extraction_mb_per_s(&synth_pages);
    let portal = vec![(portal_page(), page_url())];
    let portal_mb = extraction_mb_per_s(&portal);

    let avg_kb = synth_pages.iter().map(|(b, _)| b.len()).sum::<usize>() as f64
        / synth_pages.len().max(1) as f64
        / 1024.0;
    rows.push((
        format!(
            "extraction, synthetic-web pages ({} pages, {avg_kb:.1} KB avg)",
            synth_pages.len()
        ),
        format!("{synth_mb:.0} MB/s per core"),
    ));
    rows.push((
        format!(
            "extraction, portal page ({} KB, scripts, menus, attributes)",
            portal[0].0.len() / 1024
        ),
        format!("{portal_mb:.0} MB/s per core"),
    ));
    rows.push((
        format!(
            "scan, {SITES} sites, {SITES} slots ({} pages, {:.1} MB)",
            scan16.pages,
            scan16.bytes as f64 / 1e6
        ),
        format!("{:.0} pages/s", scan16.pages_per_s()),
    ));
    rows.push((
        format!("scan, {SITES} sites, 1 slot ({} pages)", scan1.pages),
        format!("{:.0} pages/s", scan1.pages_per_s()),
    ));
    rows.push((
        format!("peak memory of the client, {SITES}-slot scan"),
        format!("{:.1} MB", peak_kb as f64 / 1024.0),
    ));
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!("\n{:width$}  result", "measure");
    println!("{}  {}", "-".repeat(width), "-".repeat(20));
    for (k, v) in rows {
        println!("{k:width$}  {v}");
    }
}

/// The child's job: serve the synthetic web, print the port, run until stdin closes.
fn serve_web() {
    let server = SynthWebServer::start(Arc::new(web())).expect("start the synthetic web");
    println!("{}", server.addr().port());
    let _ = std::io::stdout().flush();
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
}

fn spawn_web() -> (u16, std::process::Child) {
    let exe = std::env::current_exe().expect("bench path");
    let mut child = Command::new(exe)
        .env(ROLE_VAR, "web")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the web server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("port line");
    (line.trim().parse().expect("port"), child)
}

#[derive(Default)]
struct ScanFigures {
    pages: u64,
    bytes: u64,
    elapsed: Duration,
}

impl ScanFigures {
    fn pages_per_s(&self) -> f64 {
        self.pages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Scan every site, `slots` at once (each slot a thread, as `beebot run` does).
fn scan(web: &SynthWeb, port: u16, slots: usize) -> ScanFigures {
    let cfg = CrawlerConfig {
        allow_private: true,
        resolve: vec![format!("*.synth.test=127.0.0.1:{port}")
            .parse()
            .expect("resolve rule")],
        ..CrawlerConfig::default()
    };
    let hosts = Arc::new(std::sync::Mutex::new(web.site_hosts()));
    let started = Instant::now();
    let threads: Vec<_> = (0..slots)
        .map(|_| {
            let hosts = Arc::clone(&hosts);
            let cfg = cfg.clone();
            std::thread::spawn(move || {
                let (mut pages, mut bytes) = (0u64, 0u64);
                loop {
                    let next = hosts.lock().map(|mut h| h.pop()).unwrap_or(None);
                    let Some(host) = next else { break };
                    let spec = CrawlSpec {
                        max_pages: 100_000,
                        max_depth: 1000,
                        delay: Duration::ZERO,
                        ..CrawlSpec::new(&host, Scope::Host)
                    };
                    let out = crawl(&spec, &cfg, &Cancel::new(), &mut |_, _| {});
                    assert!(out.summary.stopped_by.is_none(), "{:?}", out.summary);
                    pages += out.summary.pages;
                    bytes += out.summary.bytes;
                }
                (pages, bytes)
            })
        })
        .collect();
    let (mut pages, mut bytes) = (0, 0);
    for t in threads {
        let (p, b) = t.join().expect("scan thread");
        pages += p;
        bytes += b;
    }
    ScanFigures {
        pages,
        bytes,
        elapsed: started.elapsed(),
    }
}

/// Peak resident memory of this process, in KiB (Linux; 0 elsewhere).
fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn page_url() -> Url {
    Url::parse("http://www.portal.example.edu/news/2024/index.html").expect("URL")
}

/// Every page of the synthetic web, as served.
fn synth_pages(web: &SynthWeb) -> Vec<(Vec<u8>, Url)> {
    let mut out = Vec::new();
    for host in web.site_hosts() {
        for path in web.site_page_paths(&host).unwrap_or_default() {
            let body = web.respond(&host, &path).body;
            let url = Url::parse(&format!("http://{host}{path}")).expect("page URL");
            out.push((body, url));
        }
    }
    out
}

/// Single-thread extraction speed over `pages`, in MB/s.
fn extraction_mb_per_s(pages: &[(Vec<u8>, Url)]) -> f64 {
    let total: usize = pages.iter().map(|(b, _)| b.len()).sum();
    let mut links = 0usize;
    // Warm up once.
    for (body, url) in pages {
        links += extract_page_links(body, url, CONTENT_TYPE).len();
    }
    let started = Instant::now();
    let mut rounds = 0usize;
    while started.elapsed() < EXTRACT_MIN_TIME && rounds < EXTRACT_MAX_ROUNDS {
        for (body, url) in pages {
            links += std::hint::black_box(extract_page_links(
                std::hint::black_box(body),
                url,
                CONTENT_TYPE,
            ))
            .len();
        }
        rounds += 1;
    }
    std::hint::black_box(links);
    (total * rounds) as f64 / started.elapsed().as_secs_f64() / 1e6
}

/// A page shaped like a university or news portal's front page: a long head of
/// meta, link and script tags, inline JSON-LD and CSS, mega-menus of nested
/// lists with class attributes, article teasers, an inline analytics script,
/// comments and a footer of links.
fn portal_page() -> Vec<u8> {
    let mut s = String::with_capacity(128 * 1024);
    s.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\" class=\"no-js\">\n<head>\n<meta charset=\"utf-8\">\n",
    );
    s.push_str("<title>News and events | Example University</title>\n");
    for i in 0..20 {
        s.push_str(&format!(
            "<meta property=\"og:tag{i}\" content=\"Example University news, research and events {i}\">\n\
             <link rel=\"preload\" href=\"/assets/fonts/font-{i}.woff2\" as=\"font\" type=\"font/woff2\" crossorigin>\n"
        ));
    }
    s.push_str("<script type=\"application/ld+json\">{\"@context\":\"https://schema.org\",\"@type\":\"CollegeOrUniversity\",\"name\":\"Example University\",\"url\":\"https://www.portal.example.edu/\",\"sameAs\":[\"https://twitter.com/example\",\"https://www.facebook.com/example\"]}</script>\n");
    s.push_str("<style>\n");
    for i in 0..120 {
        s.push_str(&format!(
            ".c-menu__item--{i} > a:hover {{ color: #0a3d62; background: linear-gradient(90deg, #fff 0%, #eee 100%); }}\n"
        ));
    }
    s.push_str("</style>\n<script src=\"/assets/js/vendor.min.js\" defer></script>\n</head>\n");
    s.push_str("<body class=\"page page--news has-sidebar\" data-section=\"news\">\n<!-- Google Tag Manager (noscript) -->\n<noscript><iframe src=\"https://www.googletagmanager.com/ns.html?id=GTM-XXXX\" height=\"0\" width=\"0\"></iframe></noscript>\n");
    s.push_str("<header class=\"site-header\" role=\"banner\"><div class=\"container\"><a class=\"logo\" href=\"/\"><img src=\"/assets/logo.svg\" alt=\"Example University\" width=\"180\" height=\"48\"></a>\n<nav class=\"c-menu\" aria-label=\"Main\"><ul class=\"c-menu__list\">\n");
    for i in 0..12 {
        s.push_str(&format!(
            "<li class=\"c-menu__item c-menu__item--{i} has-children\"><a href=\"/section-{i}/\" class=\"c-menu__link\" aria-expanded=\"false\">Section {i}</a>\n<div class=\"c-menu__panel\"><ul class=\"c-menu__sub\">\n"
        ));
        for j in 0..10 {
            s.push_str(&format!(
                "<li class=\"c-menu__subitem\"><a href=\"/section-{i}/topic-{j}.html\" class=\"c-menu__sublink\" data-track=\"menu-{i}-{j}\">Topic {j} of section {i}</a></li>\n"
            ));
        }
        s.push_str("</ul></div></li>\n");
    }
    s.push_str("</ul></nav></div></header>\n<main id=\"content\" class=\"container\">\n");
    for i in 0..40 {
        s.push_str(&format!(
            "<article class=\"teaser teaser--{i}\" itemscope itemtype=\"https://schema.org/NewsArticle\">\n\
             <h2 class=\"teaser__title\" itemprop=\"headline\"><a href=\"/news/2024/story-{i}.html\">Researchers find new evidence in study {i}</a></h2>\n\
             <p class=\"teaser__meta\"><time datetime=\"2024-05-{d:02}\">{d} May 2024</time> &middot; <span class=\"teaser__tag\">Research</span></p>\n\
             <p class=\"teaser__body\">The team at the Faculty of Science &amp; Engineering published results that change how we think about pollination in cities. \
             Their work, funded by the <a href=\"https://www.research-council{i}.example.org/grants/{i}\" rel=\"noopener\">national research council</a>, \
             followed bees across <em>twelve</em> urban gardens for three seasons and found that diversity of plants matters more than area. \
             Read the <a href=\"https://doi.example.org/10.1000/{i}\">paper</a> or contact the <strong>press office</strong>.</p>\n</article>\n",
            d = i % 28 + 1
        ));
    }
    s.push_str("</main>\n<script>\nwindow.dataLayer = window.dataLayer || [];\nfunction gtag(){dataLayer.push(arguments);}\n");
    for i in 0..30 {
        s.push_str(&format!(
            "if (document.querySelector('.teaser--{i}') && x < {i}) {{ gtag('event', 'view', {{ id: {i} }}); var s = '<a href=\"/fake\">'; }}\n"
        ));
    }
    s.push_str("</script>\n<footer class=\"site-footer\"><div class=\"container\"><ul class=\"footer-links\">\n");
    for i in 0..60 {
        s.push_str(&format!(
            "<li><a href=\"https://partner{i}.example.com/?ref=portal&amp;utm_source=footer\" target=\"_blank\" rel=\"noopener nofollow\">Partner {i}</a></li>\n"
        ));
    }
    s.push_str("</ul><p>&copy; 2024 Example University &middot; <a href=\"/privacy\">Privacy</a> &middot; <a href=\"/accessibility\">Accessibility</a></p></div></footer>\n</body>\n</html>\n");
    s.into_bytes()
}
