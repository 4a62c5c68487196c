//! The crawler beside two others (`cargo bench -p beebot-tools --bench
//! compare`): one client scanning the 5 largest sites of a real
//! documentation corpus one after another at delay 0, then `wget --spider
//! -r` and spider_cli over the same sites, robots.txt obeyed by all three.
//! This crawler runs as the grid does (one request at a time per site) and
//! with 2 and 4 connections per site, as a site's operator may allow.
//! Prints one table: HTML pages fetched, requests, seconds (the median of
//! [`REPEATS`] runs taken in turn, and their range), pages/s, the time
//! against this crawler's, the most requests one site had at once, and
//! requests to paths robots.txt disallows.
//!
//! The corpus is HTML documentation as Debian ships it, each directory
//! served as its own site on loopback by a small static server here (keep-
//! alive, `index.html` or a listing for a directory, a `robots.txt`
//! disallowing Sphinx's `_sources/` and `_modules/`). By default the 5
//! largest of [`DEFAULT_SITES`] that are installed:
//! `apt-get install python3.11-doc postgresql-doc-15 python-django-doc
//! git-doc python-sqlalchemy-doc`; or `BEEBOT_COMPARE_SITES=DIR:DIR:...`.
//! The other crawlers: `wget` (Debian's) and `spider` from `cargo install
//! spider_cli --no-default-features --features status_code` (or
//! `BEEBOT_SPIDER=PATH`). A missing corpus or tool stops the bench with
//! what to install; nothing is skipped. Nothing here reaches past loopback.
//! `BEEBOT_COMPARE_LATENCY_MS=N` has the static server wait N ms before
//! each answer, as a site across a network does (0 by default).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use beebot_client::cancel::Cancel;
use beebot_client::crawler::{crawl, CrawlSpec, CrawlerConfig};
use beebot_shared::scope::Scope;

/// One crawler's scan of one site.
type Crawler = Box<dyn Fn(&Site)>;

/// Documentation directories looked for when `BEEBOT_COMPARE_SITES` is unset.
const DEFAULT_SITES: &[&str] = &[
    "/usr/share/doc/python3.11/html",
    "/usr/share/doc/postgresql-doc-15/html",
    "/usr/share/doc/python-django-doc/html",
    "/usr/share/doc/git-doc",
    "/usr/share/doc/python-sqlalchemy-doc/html",
];
/// Sites scanned, the largest first.
const SITES: usize = 5;
/// Runs of each crawler over all the sites (`BEEBOT_COMPARE_REPEATS`).
const REPEATS: usize = 5;
/// What every site's robots.txt says.
const ROBOTS: &str = "User-agent: *\nDisallow: /_sources/\nDisallow: /_modules/\n";
/// Path prefixes robots.txt disallows (counted when asked for anyway).
const DISALLOWED: &[&str] = &["/_sources/", "/_modules/"];
/// Longest request head the static server reads.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most connections the static server serves at once per site (more wait).
const MAX_CONNECTIONS: u64 = 256;
/// This crawler's rows: one request at a time per site (the grid's
/// politeness), then 2 and 4 connections as a site's operator may allow
/// (`beebot crawl --connections N --delay-ms 0`).
const OURS: usize = 3;
/// Longest one crawler may take over one site before the bench gives up.
const TOOL_TIMEOUT: Duration = Duration::from_secs(1800);

fn main() {
    let dirs = corpus();
    let spider = spider_bin();
    require_tool("wget", &["--version"], "apt-get install wget");
    require_tool(
        &spider,
        &["--version"],
        "cargo install spider_cli --no-default-features --features status_code",
    );
    let sites: Vec<Site> = dirs.iter().map(|d| Site::serve(d)).collect();
    println!("sites (HTML files under each):");
    for s in &sites {
        println!(
            "  http://127.0.0.1:{}/  {}  ({} HTML files)",
            s.port,
            s.root.display(),
            html_files(&s.root)
        );
    }
    // `BEEBOT_COMPARE_ONLY=beebot` runs this crawler alone (for a profile),
    // at 1, 2 and 4 connections per site.
    let only_ours = std::env::var("BEEBOT_COMPARE_ONLY").as_deref() == Ok("beebot");
    let spider_sync = spider.clone();
    let tools: Vec<(&str, Crawler)> = vec![
        (
            "beebot (1 request at a time per host)",
            Box::new(|s: &Site| beebot(s, 1)),
        ),
        (
            "beebot, 2 connections (if allowed)",
            Box::new(|s: &Site| beebot(s, 2)),
        ),
        (
            "beebot, 4 connections (if allowed)",
            Box::new(|s: &Site| beebot(s, 4)),
        ),
        ("wget --spider -r", Box::new(wget)),
        (
            "spider_cli crawl --sync (1 at a time)",
            Box::new(move |s: &Site| spider_cli(&spider_sync, s, true)),
        ),
        (
            "spider_cli crawl (concurrent)",
            Box::new(move |s: &Site| spider_cli(&spider, s, false)),
        ),
    ];
    let tools = if only_ours {
        tools.into_iter().take(OURS).collect()
    } else {
        tools
    };
    let repeats: usize = std::env::var("BEEBOT_COMPARE_REPEATS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(REPEATS)
        .max(1);
    // Each repeat runs every crawler in turn, so a noisy stretch of the
    // machine touches them alike; each crawler's median is reported.
    let mut runs: Vec<(Vec<Counts>, Vec<f64>)> =
        tools.iter().map(|_| (Vec::new(), Vec::new())).collect();
    for _ in 0..repeats {
        for ((_, run), (counts, seconds)) in tools.iter().zip(runs.iter_mut()) {
            for s in &sites {
                s.stats.take();
            }
            let started = Instant::now();
            for s in &sites {
                run(s);
            }
            seconds.push(started.elapsed().as_secs_f64());
            let mut total = Counts::default();
            for s in &sites {
                total.add(&s.stats.take());
            }
            counts.push(total);
        }
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ours = median(&runs[0].1);
    println!(
        "\n{:38} {:>11} {:>8} {:>11} {:>15} {:>8} {:>9} {:>7} {:>10}",
        "crawler",
        "pages",
        "requests",
        "connections",
        "seconds (range)",
        "pages/s",
        "time/ours",
        "at once",
        "disallowed"
    );
    for ((name, _), (counts, seconds)) in tools.iter().zip(&runs) {
        let m = median(seconds);
        let lo = seconds.iter().copied().fold(f64::MAX, f64::min);
        let hi = seconds.iter().copied().fold(0.0, f64::max);
        let pages: Vec<f64> = counts.iter().map(|c| c.html as f64).collect();
        let (p_lo, p_hi) = (
            pages.iter().copied().fold(f64::MAX, f64::min),
            pages.iter().copied().fold(0.0, f64::max),
        );
        let pages_shown = if p_lo == p_hi {
            format!("{p_hi}")
        } else {
            format!("{p_lo}-{p_hi}")
        };
        let requests = counts.iter().map(|c| c.requests).max().unwrap_or(0);
        let opened = counts.iter().map(|c| c.opened).max().unwrap_or(0);
        let at_once = counts.iter().map(|c| c.most_at_once).max().unwrap_or(0);
        let disallowed: u64 = counts.iter().map(|c| c.disallowed).sum();
        println!(
            "{:38} {:>11} {:>8} {:>11} {:>15} {:>8.0} {:>9.2} {:>7} {:>10}",
            name,
            pages_shown,
            requests,
            opened,
            format!("{m:.2} ({lo:.2}-{hi:.2})"),
            median(&pages) / m.max(1e-9),
            m / ours.max(1e-9),
            at_once,
            disallowed
        );
    }
    println!(
        "\n{repeats} runs of each crawler, in turn; seconds and time/ours are medians; \
         each answer took {} ms more (BEEBOT_COMPARE_LATENCY_MS).",
        latency().as_millis()
    );
    println!(
        "pages: HTML answers (200) served to the crawler in a run (a range when runs differ); \
         requests, connections: the most of a run (all sites); at once: the most requests one site had \
         unanswered together; disallowed: requests for paths robots.txt disallows, all runs."
    );
}

/// The documentation directories to serve, the largest [`SITES`] first.
fn corpus() -> Vec<PathBuf> {
    let given = std::env::var("BEEBOT_COMPARE_SITES").ok();
    let dirs: Vec<PathBuf> = match &given {
        Some(list) => list
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        None => DEFAULT_SITES
            .iter()
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .collect(),
    };
    for d in &dirs {
        assert!(
            d.is_dir(),
            "BEEBOT_COMPARE_SITES names {}, not a directory",
            d.display()
        );
    }
    assert!(
        !dirs.is_empty(),
        "no documentation corpus: apt-get install python3.11-doc postgresql-doc-15 \
         python-django-doc git-doc python-sqlalchemy-doc, or set BEEBOT_COMPARE_SITES=DIR:DIR"
    );
    let mut sized: Vec<(usize, PathBuf)> = dirs.into_iter().map(|d| (html_files(&d), d)).collect();
    sized.sort_by_key(|s| std::cmp::Reverse(s.0));
    sized.into_iter().take(SITES).map(|(_, d)| d).collect()
}

fn html_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "html" || x == "htm") {
                n += 1;
            }
        }
    }
    n
}

fn spider_bin() -> String {
    std::env::var("BEEBOT_SPIDER").unwrap_or_else(|_| "spider".to_string())
}

fn require_tool(bin: &str, args: &[&str], install: &str) {
    let ok = Command::new(bin)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "{bin} is needed for this bench: {install}");
}

/// This crawler over `site` at delay 0 with `connections` per site.
fn beebot(site: &Site, connections: u8) {
    let host = site.host();
    let cfg = CrawlerConfig {
        allow_private: true,
        resolve: vec![format!("{host}=127.0.0.1:{}", site.port)
            .parse()
            .expect("resolve rule")],
        ..CrawlerConfig::default()
    };
    let spec = CrawlSpec {
        max_pages: 1_000_000,
        max_depth: 1000,
        delay: Duration::ZERO,
        max_duration: TOOL_TIMEOUT,
        connections,
        ..CrawlSpec::new(&host, Scope::Host)
    };
    let out = crawl(&spec, &cfg, &Cancel::new(), &mut |_, _| {});
    assert!(out.summary.stopped_by.is_none(), "{:?}", out.summary);
}

fn wget(site: &Site) {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new("wget")
        .args([
            "--spider",
            "-r",
            "-l",
            "inf",
            "-np",
            "-nv",
            "-e",
            "robots=on",
        ])
        .args(["--no-proxy", "-P"])
        .arg(dir.path())
        .arg(site.url())
        .output()
        .expect("wget");
    // The corpus has broken links (exit 8) and links to other ports of
    // 127.0.0.1, which wget takes for the same host and finds closed
    // (exit 4): a crawl that ran to its end all the same.
    assert!(
        matches!(out.status.code(), Some(0 | 4 | 8)),
        "wget: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn spider_cli(bin: &str, site: &Site, one_at_a_time: bool) {
    let out = Command::new(bin)
        .args([
            "--url",
            &site.url(),
            "--respect-robots-txt",
            "--depth",
            "1000",
        ])
        // Without `--output-links` this spider_cli crawls nothing.
        .args(["crawl", "--output-links"])
        .args(one_at_a_time.then_some("--sync"))
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .output()
        .expect("spider");
    assert!(
        out.status.success(),
        "spider: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What one site served.
#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    html: AtomicU64,
    disallowed: AtomicU64,
    in_flight: AtomicU64,
    most_at_once: AtomicU64,
    /// Connections open now (bounded by [`MAX_CONNECTIONS`]), and opened.
    connections: AtomicU64,
    opened: AtomicU64,
}

#[derive(Default)]
struct Counts {
    opened: u64,
    requests: u64,
    html: u64,
    disallowed: u64,
    most_at_once: u64,
}

impl Counts {
    fn add(&mut self, c: &Counts) {
        self.opened += c.opened;
        self.requests += c.requests;
        self.html += c.html;
        self.disallowed += c.disallowed;
        self.most_at_once = self.most_at_once.max(c.most_at_once);
    }
}

impl Stats {
    /// The counts so far, and zero again.
    fn take(&self) -> Counts {
        Counts {
            opened: self.opened.swap(0, Ordering::SeqCst),
            requests: self.requests.swap(0, Ordering::SeqCst),
            html: self.html.swap(0, Ordering::SeqCst),
            disallowed: self.disallowed.swap(0, Ordering::SeqCst),
            most_at_once: self.most_at_once.swap(0, Ordering::SeqCst),
        }
    }
}

/// One documentation directory served on loopback.
struct Site {
    root: PathBuf,
    port: u16,
    stats: Arc<Stats>,
}

impl Site {
    fn serve(root: &Path) -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let stats = Arc::new(Stats::default());
        let (root2, stats2) = (root.to_path_buf(), stats.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                while stats2.connections.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    std::thread::sleep(Duration::from_millis(1));
                }
                stats2.connections.fetch_add(1, Ordering::SeqCst);
                stats2.opened.fetch_add(1, Ordering::SeqCst);
                let (root, stats) = (root2.clone(), stats2.clone());
                std::thread::spawn(move || {
                    let _ = serve_connection(conn, &root, &stats);
                    stats.connections.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Site {
            root: root.to_path_buf(),
            port,
            stats,
        }
    }

    /// The name this crawler knows the site by (resolved to its port).
    fn host(&self) -> String {
        format!("docs-{}.compare.test", self.port)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

/// How long the static server takes to answer each request
/// (`BEEBOT_COMPARE_LATENCY_MS`, 0 by default: at once), as a site across a
/// network does.
fn latency() -> Duration {
    static LATENCY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LATENCY.get_or_init(|| {
        let ms = std::env::var("BEEBOT_COMPARE_LATENCY_MS").map_or(0, |v| {
            v.parse()
                .expect("BEEBOT_COMPARE_LATENCY_MS is a number of milliseconds")
        });
        Duration::from_millis(ms)
    })
}

fn serve_connection(conn: TcpStream, root: &Path, stats: &Stats) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let Some(head) = read_head(&mut reader)? else {
            return Ok(());
        };
        let mut lines = head.lines();
        let request = lines.next().unwrap_or_default();
        let mut words = request.split_whitespace();
        let (method, target, version) = (
            words.next().unwrap_or_default(),
            words.next().unwrap_or("/"),
            words.next().unwrap_or("HTTP/1.0"),
        );
        let close = lines.any(|l| {
            l.to_ascii_lowercase().starts_with("connection:")
                && l.to_ascii_lowercase().contains("close")
        }) || version == "HTTP/1.0";
        let now = stats.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        stats.most_at_once.fetch_max(now, Ordering::SeqCst);
        stats.requests.fetch_add(1, Ordering::SeqCst);
        let latency = latency();
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        let path = percent_decode(target.split(['?', '#']).next().unwrap_or("/"));
        if DISALLOWED.iter().any(|d| path.starts_with(d)) {
            stats.disallowed.fetch_add(1, Ordering::SeqCst);
        }
        let (status, content_type, body, location) = answer(root, &path);
        if status == 200 && content_type.starts_with("text/html") && method == "GET" {
            stats.html.fetch_add(1, Ordering::SeqCst);
        }
        let mut response = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n",
            if status == 200 {
                "OK"
            } else if status == 301 {
                "Moved Permanently"
            } else {
                "Not Found"
            },
            body.len()
        );
        if let Some(l) = location {
            response.push_str(&format!("Location: {l}\r\n"));
        }
        response.push_str(if close {
            "Connection: close\r\n\r\n"
        } else {
            "\r\n"
        });
        let mut bytes = response.into_bytes();
        if method != "HEAD" {
            bytes.extend_from_slice(&body);
        }
        // Answered once its answer is whole and about to be sent: a client
        // that waits for each answer can only send its next request after
        // this, so it never counts twice (counting after the send would race
        // the client's next request on another connection).
        stats.in_flight.fetch_sub(1, Ordering::SeqCst);
        out.write_all(&bytes)?;
        if close {
            return Ok(());
        }
    }
}

/// The next request head (up to the empty line), or `None` at the end.
fn read_head(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<String>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = r
            .by_ref()
            .take(MAX_HEAD_BYTES as u64)
            .read_line(&mut line)?;
        if n == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            return Ok(Some(head));
        }
        head.push_str(&line);
        if head.len() > MAX_HEAD_BYTES {
            return Ok(None);
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // Hex digits read as bytes: a `%` before a multi-byte character
        // stays as it is (slicing the text there would panic).
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

type Answer = (u16, &'static str, Vec<u8>, Option<String>);

fn answer(root: &Path, path: &str) -> Answer {
    let not_found = || {
        (
            404,
            "text/html; charset=utf-8",
            b"<h1>not found</h1>".to_vec(),
            None,
        )
    };
    if path == "/robots.txt" {
        return (200, "text/plain", ROBOTS.as_bytes().to_vec(), None);
    }
    if !path.starts_with('/') || path.split('/').any(|p| p == "..") {
        return not_found();
    }
    let file = root.join(path.trim_start_matches('/'));
    if file.is_dir() {
        if !path.ends_with('/') {
            return (301, "text/html", Vec::new(), Some(format!("{path}/")));
        }
        let index = file.join("index.html");
        if index.is_file() {
            return read(&index).unwrap_or_else(not_found);
        }
        return (200, "text/html; charset=utf-8", listing(&file), None);
    }
    read(&file).unwrap_or_else(not_found)
}

fn read(file: &Path) -> Option<Answer> {
    let body = std::fs::read(file).ok()?;
    let ext = file.extension().and_then(|x| x.to_str()).unwrap_or("");
    let content_type = match ext {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" => "application/javascript",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "txt" => "text/plain",
        _ => "application/octet-stream",
    };
    Some((200, content_type, body, None))
}

/// A directory without an index: a page linking to what it holds.
fn listing(dir: &Path) -> Vec<u8> {
    let mut names: BTreeMap<String, bool> = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Some(n) = e.file_name().to_str() {
            names.insert(n.to_string(), e.path().is_dir());
        }
    }
    let mut page = String::from("<!doctype html><title>index</title><ul>\n");
    for (n, is_dir) in names {
        let slash = if is_dir { "/" } else { "" };
        let n = n
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('"', "&quot;");
        page.push_str(&format!("<li><a href=\"{n}{slash}\">{n}{slash}</a>\n"));
    }
    page.push_str("</ul>\n");
    page.into_bytes()
}
