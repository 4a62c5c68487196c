//! End-to-end tests of the crawler against the synthetic web served on loopback:
//! exact agreement with the generator's truth, limits, robots.txt, politeness,
//! the private-address guard and cancellation. Nothing here touches the internet.

use beebot_client::cancel::Cancel;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use beebot_client::crawler::{
    crawl, crawl_quiet_since, crawl_resumable, crawl_with_progress, CrawlOutput, CrawlProgress,
    CrawlSpec, CrawlerConfig, Lookup,
};
use beebot_shared::linkfile::{LinkRecord, StopReason};
use beebot_shared::scanstate::{url_digest, ScanState};
use beebot_shared::scope::Scope;
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::{LoggedRequest, ResponseDelay, SynthWebServer};

const USER_AGENT: &str = "BeeBot/0.1-test (+https://example.invalid/beebot-grid)";

fn start(web: &Arc<SynthWeb>) -> SynthWebServer {
    SynthWebServer::start(Arc::clone(web)).expect("start the synthetic web server")
}

/// Loopback allowed, every `*.synth.test` host sent to the server.
fn loopback_config(server: &SynthWebServer) -> CrawlerConfig {
    CrawlerConfig {
        allow_private: true,
        resolve: vec![format!("*.synth.test=127.0.0.1:{}", server.addr().port())
            .parse()
            .expect("resolve rule")],
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        proxy: None,
        // Names without a rule resolve to nothing: no DNS query leaves the machine.
        lookup: Lookup::Fixed(Vec::new()),
    }
}

/// A spec with no limit in the way and no delay.
fn open_spec(host: &str) -> CrawlSpec {
    CrawlSpec {
        max_pages: 100_000,
        max_depth: 1000,
        delay: Duration::ZERO,
        max_page_bytes: 1024 * 1024,
        max_duration: Duration::from_secs(120),
        user_agent: USER_AGENT.to_string(),
        ..CrawlSpec::new(host, Scope::Host)
    }
}

fn run(spec: &CrawlSpec, cfg: &CrawlerConfig) -> CrawlOutput {
    crawl(spec, cfg, &Cancel::new(), &mut |_, _| {})
}

fn requests_to(log: &[LoggedRequest], host: &str) -> Vec<LoggedRequest> {
    log.iter()
        .filter(|r| r.host.split(':').next() == Some(host))
        .cloned()
        .collect()
}

fn key(r: &LinkRecord) -> (String, String) {
    (r.source_url.clone(), r.target_url.clone())
}

/// Differences between crawled and true records, one line each (empty when equal).
fn differences(got: &[LinkRecord], want: &[LinkRecord]) -> Vec<String> {
    let got_map: BTreeMap<_, _> = got.iter().map(|r| (key(r), r)).collect();
    let want_map: BTreeMap<_, _> = want.iter().map(|r| (key(r), r)).collect();
    let mut out = Vec::new();
    if got_map.len() != got.len() {
        out.push(format!(
            "crawl returned {} duplicate (source, target) pairs",
            got.len() - got_map.len()
        ));
    }
    for (k, w) in &want_map {
        match got_map.get(k) {
            None => out.push(format!("missing: {w:?}")),
            Some(g) if g != w => out.push(format!("differs:\n    got  {g:?}\n    want {w:?}")),
            Some(_) => {}
        }
    }
    for (k, g) in &got_map {
        if !want_map.contains_key(k) {
            out.push(format!("extra:   {g:?}"));
        }
    }
    out
}

#[test]
fn crawl_of_every_site_equals_the_truth() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let cfg = loopback_config(&server);
    let mut failures = Vec::new();
    for host in web.site_hosts() {
        let spec = open_spec(&host);
        let out = run(&spec, &cfg);
        let truth = web.site_truth(&host).expect("known site");
        let diff = differences(&out.records, &truth);
        if !diff.is_empty() {
            failures.push(format!(
                "{host}: {} records, truth {}:\n  {}",
                out.records.len(),
                truth.len(),
                diff.join("\n  ")
            ));
        }
        let s = &out.summary;
        assert_eq!(s.stopped_by, None, "{host}: {s:?}");
        assert_eq!(s.links, out.records.len() as u64, "{host}");
        assert!(
            s.pages >= web.site_pages(&host).expect("pages") as u64,
            "{host}: {s:?}"
        );
        assert!(
            s.robots_disallowed >= 1,
            "{host}: the private page is skipped: {s:?}"
        );
        assert!(s.bytes > 0 && s.elapsed_ms < 60_000, "{host}: {s:?}");
        let hosts: std::collections::HashSet<_> = truth
            .iter()
            .filter_map(|r| {
                url::Url::parse(&r.target_url)
                    .ok()?
                    .host_str()
                    .map(str::to_string)
            })
            .collect();
        assert_eq!(s.distinct_target_hosts, hosts.len() as u64, "{host}");
        let status_total: u64 = s.status_counts.iter().map(|(_, n)| n).sum();
        assert!(status_total >= s.pages, "{host}: {s:?}");

        // Every URL once, robots.txt first, nothing forbidden, our User-Agent.
        let log = requests_to(&server.request_log(), &host);
        let urls = web.site_urls(&host).expect("urls");
        assert_eq!(
            log.len(),
            urls + 1,
            "{host}: requests {:?}",
            log.iter().map(|r| &r.path).collect::<Vec<_>>()
        );
        assert_eq!(log[0].path, "/robots.txt", "{host}");
        assert!(log.iter().all(|r| r.user_agent == USER_AGENT), "{host}");
        let mut paths: Vec<_> = log.iter().map(|r| r.path.clone()).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), log.len(), "{host}: a URL was requested twice");
        for path in web.site_disallowed_paths(&host).expect("paths") {
            assert!(
                !paths.contains(&path),
                "{host}: {path} requested despite robots.txt"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "crawl differs from the truth:\n{}",
        failures.join("\n")
    );
}

/// The biggest site of the web, for tests that need many pages.
fn biggest_site(web: &SynthWeb) -> String {
    web.site_hosts()
        .into_iter()
        .max_by_key(|h| web.site_pages(h).unwrap_or(0))
        .expect("a site")
}

#[test]
fn page_cap_stops_at_exactly_n_pages() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        max_pages: 10,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 10, "{:?}", out.summary);
    assert_eq!(out.summary.stopped_by, Some(StopReason::MaxPages));
    let sources: std::collections::HashSet<_> = out.records.iter().map(|r| &r.source_url).collect();
    assert!(!sources.is_empty() && sources.len() <= 10);
}

#[test]
fn depth_zero_fetches_the_seed_only() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        max_depth: 0,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 1, "{:?}", out.summary);
    assert_eq!(out.summary.stopped_by, None);
    assert!(out.summary.beyond_depth > 0, "{:?}", out.summary);
    let home = format!("http://{host}/");
    assert!(!out.records.is_empty());
    assert!(out.records.iter().all(|r| r.source_url == home));
}

#[test]
fn page_bytes_are_capped_and_the_part_read_is_parsed() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        max_page_bytes: 1500,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert!(out.summary.pages >= 1);
    assert!(
        out.summary.bytes <= out.summary.pages * 1500,
        "{:?}",
        out.summary
    );
    // A 1500-byte prefix holds the head and navigation: the seed's links are found.
    assert!(out.summary.pages > 1, "{:?}", out.summary);
}

#[test]
fn robots_disallowed_pages_are_never_requested() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = "site0.synth.test";
    let out = run(&open_spec(host), &loopback_config(&server));
    assert!(out.summary.robots_disallowed >= 1, "{:?}", out.summary);
    let log = requests_to(&server.request_log(), host);
    assert_eq!(log.iter().filter(|r| r.path == "/robots.txt").count(), 1);
    assert!(
        log.iter().all(|r| !r.path.starts_with("/private/")),
        "{log:?}"
    );
    assert!(out
        .records
        .iter()
        .all(|r| !r.target_url.contains("private-ext")));
}

#[test]
fn private_addresses_are_refused_by_default() {
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let cfg = CrawlerConfig {
        allow_private: false,
        ..loopback_config(&server)
    };
    let out = run(&open_spec("site0.synth.test"), &cfg);
    assert!(out.summary.errors > 0, "{:?}", out.summary);
    assert_eq!(out.summary.refused_addresses, 1, "{:?}", out.summary);
    assert_eq!(out.summary.pages, 0);
    assert!(out.records.is_empty());
    assert_eq!(out.summary.stopped_by, Some(StopReason::PrivateAddress));

    // An address given literally is checked the same way.
    let literal = format!("127.0.0.1:{}", server.addr().port());
    let out = run(&open_spec(&literal), &CrawlerConfig::default());
    assert!(
        out.summary.errors > 0 && out.summary.pages == 0,
        "{:?}",
        out.summary
    );
    assert_eq!(server.requests(), 0, "nothing reached the server");
}

#[test]
fn https_fails_cleanly_without_tls() {
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let mut spec = open_spec("site0.synth.test");
    spec.seed = url::Url::parse("https://site0.synth.test/").expect("url");
    let out = run(&spec, &loopback_config(&server));
    assert!(
        out.summary.errors > 0 && out.summary.pages == 0,
        "{:?}",
        out.summary
    );
    assert!(out.summary.stopped_by.is_some());
    assert_eq!(server.requests(), 0);
}

/// Checks that consecutive requests to `host` are at least `gap` apart.
fn assert_spaced(log: &[LoggedRequest], gap: Duration) {
    for pair in log.windows(2) {
        let between = pair[1].at.duration_since(pair[0].at);
        assert!(
            between >= gap,
            "{} then {} only {between:?} apart",
            pair[0].path,
            pair[1].path
        );
    }
}

#[test]
fn politeness_delay_is_honoured() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let delay = Duration::from_millis(80);
    let pages = 5u32;
    let spec = CrawlSpec {
        max_pages: pages,
        delay,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, u64::from(pages));
    assert!(
        Duration::from_millis(out.summary.elapsed_ms) >= delay * (pages - 1),
        "{:?}",
        out.summary
    );
    let log = requests_to(&server.request_log(), &host);
    assert!(log.len() > usize::try_from(pages).expect("small"));
    assert_spaced(&log, delay);
}

#[test]
fn robots_crawl_delay_is_honoured() {
    let web = Arc::new(SynthWeb::with_config(
        7,
        12,
        SynthConfig {
            crawl_delay_ms: Some(120),
            ..SynthConfig::default()
        },
    ));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        max_pages: 4,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 4);
    let log = requests_to(&server.request_log(), &host);
    assert!(log.len() >= 5, "robots.txt and four pages");
    assert_spaced(&log, Duration::from_millis(120));
}

#[test]
fn cancel_stops_the_scan() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let cancel = Cancel::new();
    let mut calls = 0u64;
    let out = crawl(
        &open_spec(&host),
        &loopback_config(&server),
        &cancel,
        &mut |pages, _links| {
            calls += 1;
            if pages >= 3 {
                cancel.cancel();
            }
        },
    );
    assert_eq!(out.summary.stopped_by, Some(StopReason::Cancelled));
    assert_eq!(out.summary.pages, 3);
    assert_eq!(calls, 3);

    // Cancelled before it starts: nothing is requested.
    let before = server.requests();
    let out = crawl(
        &open_spec(&host),
        &loopback_config(&server),
        &Cancel::already(),
        &mut |_, _| {},
    );
    assert_eq!(out.summary.stopped_by, Some(StopReason::Cancelled));
    assert_eq!(server.requests(), before);
}

#[test]
fn time_limits_stop_the_scan() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        delay: Duration::from_millis(100),
        max_duration: Duration::from_millis(350),
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(
        out.summary.stopped_by,
        Some(StopReason::MaxTime),
        "{:?}",
        out.summary
    );
    assert!(
        out.summary.pages >= 1 && out.summary.pages <= 4,
        "{:?}",
        out.summary
    );
    assert!(out.summary.elapsed_ms < 2000);
    // Stopped early: its state comes back, so the scan can go on.
    let state = out.state.expect("a scan out of time returns its state");
    assert_eq!(state.pages_done, out.summary.pages);
    assert!(!state.queue.is_empty());
}

#[test]
fn crawl_delay_is_capped_by_the_round_maximum() {
    // robots.txt asks for 2 s between requests; the spec allows 30 ms at most.
    let web = Arc::new(SynthWeb::with_config(
        7,
        12,
        SynthConfig {
            crawl_delay_ms: Some(2000),
            ..SynthConfig::default()
        },
    ));
    let server = start(&web);
    let host = biggest_site(&web);
    let cap = Duration::from_millis(30);
    let spec = CrawlSpec {
        max_pages: 4,
        max_crawl_delay: cap,
        max_duration: Duration::from_millis(1500),
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 4, "{:?}", out.summary);
    assert_eq!(out.summary.stopped_by, Some(StopReason::MaxPages));
    assert_spaced(&requests_to(&server.request_log(), &host), cap);
}

#[test]
fn progress_reports_pages_queue_links_and_bytes() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let mut seen: Vec<CrawlProgress> = Vec::new();
    let out = crawl_with_progress(
        &open_spec(&host),
        &loopback_config(&server),
        &Cancel::new(),
        &mut |p| seen.push(*p),
    );
    let last = seen.last().expect("progress reported");
    assert_eq!(last.pages, out.summary.pages);
    assert_eq!(last.links, out.summary.links);
    assert_eq!(last.bytes, out.summary.bytes);
    assert_eq!(last.queued, 0, "the frontier ran dry");
    assert!(seen.iter().any(|p| p.queued > 0));
    assert!(seen.windows(2).all(|w| w[0].pages <= w[1].pages));
    assert!(seen.windows(2).all(|w| w[0].links <= w[1].links));
    assert!(
        seen.len() as u64 <= out.summary.pages + 1,
        "one report a page"
    );
}

/// At delay 0 a page is parsed on a helper while the next request is in
/// flight; at a delay the parse fits in the wait and runs in line. Both
/// request the same pages in the same order and find the same records.
#[test]
fn a_crawl_parsing_beside_its_requests_finds_what_one_parsing_in_line_does() {
    assert!(beebot_client::crawler::PIPELINE_BELOW_DELAY <= Duration::from_millis(10));
    let web = Arc::new(SynthWeb::with_config(
        11,
        2,
        SynthConfig {
            min_pages_per_site: 100,
            max_pages_per_site: 150,
            crawl_delay_ms: None,
        },
    ));
    let server = start(&web);
    let host = biggest_site(&web);
    let cfg = loopback_config(&server);
    let piped = run(&open_spec(&host), &cfg);
    let split = server.request_log().len();
    let in_line = run(
        &CrawlSpec {
            delay: Duration::from_millis(10),
            ..open_spec(&host)
        },
        &cfg,
    );
    assert!(piped.summary.pages >= 100, "{:?}", piped.summary);
    // The same records (a redirect's record is taken at its request, a
    // page's once parsed: the order of the two kinds may differ).
    let sorted = |out: &CrawlOutput| {
        let mut r = out.records.clone();
        r.sort_by_key(key);
        r
    };
    assert_eq!(sorted(&piped), sorted(&in_line));
    for (a, b) in [
        (piped.summary.pages, in_line.summary.pages),
        (piped.summary.links, in_line.summary.links),
        (piped.summary.bytes, in_line.summary.bytes),
    ] {
        assert_eq!(a, b);
    }
    let truth = web.site_truth(&host).expect("known site");
    assert!(differences(&piped.records, &truth).is_empty());
    // The same order of requests.
    let log = server.request_log();
    let pages = |from: usize, to: usize| -> Vec<String> {
        requests_to(&log[from..to], &host)
            .into_iter()
            .map(|r| r.path)
            .collect()
    };
    assert_eq!(pages(0, split), pages(split, log.len()));
}

#[test]
fn www_and_the_bare_host_are_one_site() {
    // The site is named `www.site0.synth.test`; its bare host is inside its
    // scope, so a scan from the bare host follows its pages and finds exactly
    // the site's truth (nothing of the bare host counts as outbound).
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let scope = beebot_shared::scope::SiteScope::new("www.site0.synth.test", Scope::Host);
    let bare = url::Url::parse("http://site0.synth.test/").expect("url");
    assert!(scope.contains(&bare));
    let mut spec = open_spec("www.site0.synth.test");
    spec.seed = bare;
    let out = run(&spec, &loopback_config(&server));
    let truth = web.site_truth("site0.synth.test").expect("site");
    assert_eq!(out.records.len(), truth.len(), "{:?}", out.summary);
}

#[test]
fn beebot_crawl_piped_prints_records_and_one_summary_line() {
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let home = tempfile::tempdir().expect("tempdir");
    let beebot = |args: &[&str]| {
        beebot_tests::run(
            std::process::Command::new(beebot_tests::bin("beebot"))
                .args(args)
                .arg("--home")
                .arg(home.path()),
            Duration::from_secs(120),
        )
    };
    let resolve = format!("*.synth.test={}", server.addr());
    let crawl = [
        "crawl",
        "http://site0.synth.test/",
        "--delay-ms",
        "0",
        "--resolve",
        &resolve,
    ];
    // The site is on loopback: refused unless allowed...
    let o = beebot(&crawl);
    assert!(!o.status.success(), "{}", beebot_tests::stderr(&o));
    assert!(
        beebot_tests::stderr(&o).contains("--allow-private"),
        "{}",
        beebot_tests::stderr(&o)
    );
    // ...as the config file allows it, without the flag.
    let o = beebot(&["config", "set", "allow_private", "true"]);
    assert!(o.status.success(), "{}", beebot_tests::stderr(&o));
    let o = beebot(&crawl);
    assert!(o.status.success(), "{}", beebot_tests::stderr(&o));
    let truth = web.site_truth("site0.synth.test").expect("site");
    // A header row, then one row per record.
    assert_eq!(
        beebot_tests::stdout(&o).lines().count(),
        truth.len() + 1,
        "{}",
        beebot_tests::stdout(&o)
    );
    // Piped: no progress line (no carriage returns), just the summary.
    let err = beebot_tests::stderr(&o);
    assert!(!err.contains('\r'), "{err:?}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("site0.synth.test: "), "{err}");
    assert!(err.contains("[HTTP 200×"), "{err}");
}

#[test]
fn beebot_crawl_takes_more_connections_only_at_delay_0() {
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let home = tempfile::tempdir().expect("tempdir");
    let crawl = |extra: &[&str]| {
        beebot_tests::run(
            std::process::Command::new(beebot_tests::bin("beebot"))
                .args([
                    "crawl",
                    "http://site0.synth.test/",
                    "--allow-private",
                    "--resolve",
                    &format!("*.synth.test={}", server.addr()),
                    "--home",
                ])
                .arg(home.path())
                .args(extra),
            Duration::from_secs(120),
        )
    };
    let o = crawl(&["--delay-ms", "0", "--connections", "3"]);
    assert!(o.status.success(), "{}", beebot_tests::stderr(&o));
    let truth = web.site_truth("site0.synth.test").expect("site");
    assert_eq!(beebot_tests::stdout(&o).lines().count(), truth.len() + 1);
    let asked = server.requests();
    // At a politeness delay (the default 1 s here), or beyond the named
    // maximum: refused before any request, saying why.
    for (args, says) in [
        (&["--connections", "2"][..], "needs --delay-ms 0"),
        (
            &["--delay-ms", "0", "--connections", "5"][..],
            "from 1 to 4",
        ),
        (
            &["--delay-ms", "0", "--connections", "0"][..],
            "from 1 to 4",
        ),
    ] {
        let o = crawl(args);
        assert!(!o.status.success(), "{args:?}");
        let err = beebot_tests::stderr(&o);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert_eq!(server.requests(), asked, "nothing requested when refused");
}

/// What a test proxy did: the tunnels it opened, and the target (`host:port`
/// of the CONNECT line) of every request it got.
#[derive(Default)]
struct ProxyLog {
    tunnels: std::sync::atomic::AtomicUsize,
    asked: std::sync::Mutex<Vec<String>>,
}

impl ProxyLog {
    fn tunnels(&self) -> usize {
        self.tunnels.load(Ordering::SeqCst)
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("proxy log").clone()
    }
}

/// A minimal HTTP CONNECT proxy on loopback that sends every tunnel to `target`
/// (whatever it is asked for) and logs what it did (bounded: it serves `max`
/// connections).
fn connect_proxy(
    target: std::net::SocketAddr,
    max: usize,
) -> (std::net::SocketAddr, Arc<ProxyLog>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    let log = Arc::new(ProxyLog::default());
    let shared = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max) {
            let Ok(client) = stream else { continue };
            let log = shared.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(client.try_clone().expect("clone"));
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() || !line.starts_with("CONNECT ") {
                    return;
                }
                let asked = line.split_whitespace().nth(1).unwrap_or("").to_string();
                log.asked.lock().expect("proxy log").push(asked);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                }
                let Ok(upstream) = std::net::TcpStream::connect(target) else {
                    return;
                };
                log.tunnels.fetch_add(1, Ordering::SeqCst);
                let mut c = client;
                if c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .is_err()
                {
                    return;
                }
                let (mut c2, mut u2) = (
                    c.try_clone().expect("clone"),
                    upstream.try_clone().expect("clone"),
                );
                let mut upstream = upstream;
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut reader, &mut u2);
                    let _ = u2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut upstream, &mut c2);
                let _ = c.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (addr, log)
}

#[test]
fn a_proxy_carries_the_crawl_and_is_trusted_on_a_private_address() {
    let web = Arc::new(SynthWeb::generate(7, 2));
    let server = start(&web);
    let (proxy, proxy_log) = connect_proxy(server.addr(), 1000);
    let host = web.site_hosts()[0].clone();
    // No --allow-private and no --resolve: the proxy (on loopback) is trusted
    // and resolves the target itself.
    let cfg = CrawlerConfig {
        proxy: Some(format!("http://{proxy}")),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        // The site's name does not resolve here: it goes to the proxy (and no
        // DNS query leaves the machine).
        lookup: Lookup::Fixed(Vec::new()),
        ..CrawlerConfig::default()
    };
    let mut spec = CrawlSpec::new(&host, Scope::Host);
    spec.delay = Duration::ZERO;
    let out = crawl(&spec, &cfg, &Cancel::new(), &mut |_, _| {});
    let mut got = out.records.clone();
    let mut want = web.site_truth(&host).expect("truth");
    got.sort_by(|a, b| (&a.source_url, &a.target_url).cmp(&(&b.source_url, &b.target_url)));
    want.sort_by(|a, b| (&a.source_url, &a.target_url).cmp(&(&b.source_url, &b.target_url)));
    assert_eq!(got, want, "summary: {:?}", out.summary);
    assert!(proxy_log.tunnels() >= 1);
}

/// Through a proxy, with `hostile.test` names unknown here (they go to the
/// proxy, which sends every tunnel to `server`), `names` mapped to private
/// addresses by `--resolve` rules and `db.ssrf.hostile.test` by the lookup.
fn proxied_config(proxy: std::net::SocketAddr, allow_private: bool) -> CrawlerConfig {
    CrawlerConfig {
        allow_private,
        proxy: Some(format!("http://{proxy}")),
        resolve: vec!["intranet.ssrf.hostile.test=10.0.0.5".parse().expect("rule")],
        lookup: Lookup::Fixed(vec![(
            "db.ssrf.hostile.test".into(),
            vec!["192.168.7.7".parse().expect("ip")],
        )]),
        connect_timeout: Duration::from_secs(5),
        read_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
    }
}

#[test]
fn through_a_proxy_private_targets_are_refused_and_never_asked_for() {
    let web = Arc::new(SynthWeb::generate(1, 1));
    let server = start(&web);
    let (proxy, proxy_log) = connect_proxy(server.addr(), 1000);
    let ssrf = CrawlSpec {
        delay: Duration::ZERO,
        max_duration: Duration::from_secs(60),
        ..CrawlSpec::new("ssrf.hostile.test", Scope::Subdomains)
    };
    // A loopback port nothing should reach: the proxy sends it to the server.
    let literals = [
        format!("127.0.0.1:{}", server.addr().port()),
        format!("[::ffff:127.0.0.1]:{}", server.addr().port()),
    ];
    private_targets_are_refused_before_the_proxy_is_asked(
        &server, proxy, &proxy_log, &ssrf, &literals,
    );
    private_targets_allowed_are_asked_of_the_proxy_and_fetched(
        &server, proxy, &proxy_log, &ssrf, &literals,
    );
}

/// An IP-literal site of the proxy test, crawled alone.
fn literal_spec(site: &str) -> CrawlSpec {
    CrawlSpec {
        delay: Duration::ZERO,
        max_duration: Duration::from_secs(60),
        ..CrawlSpec::new(site, Scope::Host)
    }
}

/// Private addresses not allowed: the site's own pages go through the
/// proxy; its private subdomains (a rule, the lookup) and IP-literal sites
/// on loopback are refused before the proxy is asked.
fn private_targets_are_refused_before_the_proxy_is_asked(
    server: &SynthWebServer,
    proxy: std::net::SocketAddr,
    proxy_log: &ProxyLog,
    ssrf: &CrawlSpec,
    literals: &[String],
) {
    use beebot_testkit::synth::hostile::SSRF_LOOPBACK_LINKS;
    let cfg = proxied_config(proxy, false);
    let out = run(ssrf, &cfg);
    let s = &out.summary;
    // The robots.txt of each private subdomain, refused: its pages (linked,
    // and the target of /go-intranet) are not asked for after that.
    assert_eq!(s.refused_addresses, 2, "{s:?}");
    assert_eq!(s.pages, 2, "/ and /go-intranet: {s:?}");
    assert_eq!(s.stopped_by, None, "{s:?}");
    let targets: Vec<&str> = out.records.iter().map(|r| r.target_url.as_str()).collect();
    assert!(targets.contains(&SSRF_LOOPBACK_LINKS[0]), "{targets:?}");
    assert!(
        targets.contains(&"http://[::ffff:7f00:1]:9/"),
        "{targets:?}"
    );
    for site in literals {
        let out = run(&literal_spec(site), &cfg);
        assert_eq!(
            out.summary.refused_addresses, 1,
            "{site}: {:?}",
            out.summary
        );
        assert_eq!(out.summary.pages, 0, "{site}: {:?}", out.summary);
        assert_eq!(
            out.summary.stopped_by,
            Some(StopReason::PrivateAddress),
            "{site}"
        );
    }
    let asked = proxy_log.asked();
    assert!(!asked.is_empty());
    assert!(
        asked.iter().all(|a| a == "ssrf.hostile.test:80"),
        "the proxy was asked for {asked:?}"
    );
    let log = server.request_log();
    assert!(
        log.iter().all(|r| r.host == "ssrf.hostile.test"),
        "{:?}",
        log.iter().map(|r| (&r.host, &r.path)).collect::<Vec<_>>()
    );
}

/// Private addresses allowed: the same targets are asked of the proxy and
/// fetched.
fn private_targets_allowed_are_asked_of_the_proxy_and_fetched(
    server: &SynthWebServer,
    proxy: std::net::SocketAddr,
    proxy_log: &ProxyLog,
    ssrf: &CrawlSpec,
    literals: &[String],
) {
    use beebot_testkit::synth::hostile::SSRF_PRIVATE_NAMES;
    let open = proxied_config(proxy, true);
    let out = run(ssrf, &open);
    assert_eq!(out.summary.refused_addresses, 0, "{:?}", out.summary);
    assert_eq!(
        out.summary.pages, 4,
        "/, /go-intranet, two subdomains: {:?}",
        out.summary
    );
    for site in literals {
        let out = run(&literal_spec(site), &open);
        assert_eq!(
            out.summary.refused_addresses, 0,
            "{site}: {:?}",
            out.summary
        );
        assert_eq!(out.summary.pages, 1, "{site}: {:?}", out.summary);
    }
    let asked = proxy_log.asked();
    for name in SSRF_PRIVATE_NAMES {
        assert!(asked.contains(&format!("{name}:80")), "{name}: {asked:?}");
    }
    let port = server.addr().port();
    for literal in [
        format!("127.0.0.1:{port}"),
        format!("[::ffff:7f00:1]:{port}"),
    ] {
        assert!(asked.contains(&literal), "{literal}: {asked:?}");
    }
    let log = server.request_log();
    let fetched = |host: &str, path: &str| log.iter().any(|r| r.host == host && r.path == path);
    assert!(fetched("intranet.ssrf.hostile.test", "/admin"));
    assert!(fetched("intranet.ssrf.hostile.test", "/"));
    assert!(fetched("db.ssrf.hostile.test", "/"));
}

/// Loopback allowed, every `*.hostile.test` host sent to the server.
fn hostile_config(server: &SynthWebServer) -> CrawlerConfig {
    CrawlerConfig {
        resolve: vec![format!("*.hostile.test=127.0.0.1:{}", server.addr().port())
            .parse()
            .expect("resolve rule")],
        ..loopback_config(server)
    }
}

#[test]
fn a_robots_txt_redirect_is_followed_only_within_the_site() {
    let web = Arc::new(SynthWeb::generate(1, 1));
    let server = start(&web);
    let cfg = hostile_config(&server);
    // Off the site: robots.txt counts as unavailable, nothing is crawled,
    // and the other site is never asked.
    let out = run(&open_spec("offsiterobots.hostile.test"), &cfg);
    assert_eq!(
        out.summary.stopped_by,
        Some(StopReason::RobotsUnavailable),
        "{:?}",
        out.summary
    );
    assert_eq!(out.summary.pages, 0, "{:?}", out.summary);
    let log = server.request_log();
    let requested: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.host.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        requested,
        vec![("offsiterobots.hostile.test", "/robots.txt")],
        "only the site's own robots.txt"
    );
    // Within the site (to its www. host): followed, and its rules obeyed.
    let out = run(&open_spec("movedrobots.hostile.test"), &cfg);
    assert_eq!(out.summary.stopped_by, None, "{:?}", out.summary);
    assert_eq!(out.summary.robots_disallowed, 1, "{:?}", out.summary);
    assert_eq!(out.summary.pages, 2, "/ and /open.html: {:?}", out.summary);
    let log = server.request_log();
    let requested: Vec<(&str, &str)> = log[1..]
        .iter()
        .map(|r| (r.host.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        requested,
        vec![
            ("movedrobots.hostile.test", "/robots.txt"),
            ("www.movedrobots.hostile.test", "/robots.txt"),
            ("movedrobots.hostile.test", "/"),
            ("movedrobots.hostile.test", "/open.html"),
        ]
    );
}

// ---- resuming a scan from its state ----

/// Crawl `host` in parts: each part is cancelled after `stop_after[i]` pages
/// of its own (the last part runs to its end) and the next resumes from the
/// state the previous returned. Returns every part's output.
fn crawl_in_parts(spec: &CrawlSpec, cfg: &CrawlerConfig, stop_after: &[u64]) -> Vec<CrawlOutput> {
    let mut outs: Vec<CrawlOutput> = Vec::new();
    let mut resume: Option<ScanState> = None;
    for i in 0..=stop_after.len() {
        let cancel = Cancel::new();
        let spec = CrawlSpec {
            resume: resume.clone(),
            ..spec.clone()
        };
        let out = crawl(&spec, cfg, &cancel, &mut |pages, _| {
            if stop_after.get(i).is_some_and(|&n| pages >= n) {
                cancel.cancel();
            }
        });
        let stopped_early = out.summary.stopped_by == Some(StopReason::Cancelled);
        assert_eq!(
            stopped_early,
            out.state.is_some(),
            "a state comes back exactly when the scan stopped early: {:?}",
            out.summary
        );
        resume = out.state.clone();
        outs.push(out);
        if resume.is_none() {
            break;
        }
    }
    outs
}

/// No URL of `host` requested twice (robots.txt included), per the server's log.
fn assert_nothing_requested_twice(server: &SynthWebServer, host: &str) -> usize {
    let log = requests_to(&server.request_log(), host);
    let mut paths: Vec<_> = log.iter().map(|r| r.path.clone()).collect();
    paths.sort();
    let n = paths.len();
    let twice: Vec<_> = paths
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| &w[0])
        .collect();
    assert!(twice.is_empty(), "{host}: requested twice: {twice:?}");
    n
}

#[test]
fn a_scan_cancelled_and_resumed_equals_one_scan_and_requests_nothing_twice() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let truth = web.site_truth(&host).expect("known site");
    let pages = web.site_pages(&host).expect("pages") as u64;
    assert!(pages >= 20, "the biggest site is big enough: {pages}");
    // Stop after the seed, early, midway, and in three parts.
    for stops in [vec![1], vec![3], vec![pages / 2], vec![2, 5, pages / 3]] {
        let server = start(&web);
        let cfg = loopback_config(&server);
        let outs = crawl_in_parts(&open_spec(&host), &cfg, &stops);
        assert_eq!(outs.len(), stops.len() + 1, "{stops:?}: parts");
        let last = outs.last().expect("a part");
        assert_eq!(
            last.summary.stopped_by, None,
            "{stops:?}: {:?}",
            last.summary
        );
        let records: Vec<LinkRecord> = outs.iter().flat_map(|o| o.records.clone()).collect();
        let diff = differences(&records, &truth);
        assert!(diff.is_empty(), "{stops:?}:\n  {}", diff.join("\n  "));
        let requested = assert_nothing_requested_twice(&server, &host);
        assert_eq!(
            requested,
            web.site_urls(&host).expect("urls") + 1,
            "{stops:?}: every URL and robots.txt once"
        );
        let total: u64 = outs.iter().map(|o| o.summary.pages).sum();
        assert!(total >= pages, "{stops:?}: {total} pages");
    }
}

#[test]
fn a_scan_out_of_budget_resumes_at_its_politeness_pace_to_the_same_records() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let server = start(&web);
    let cfg = loopback_config(&server);
    let spec = CrawlSpec {
        delay: Duration::from_millis(20),
        max_duration: Duration::from_millis(150),
        ..open_spec(&host)
    };
    let mut records = Vec::new();
    let mut resume = None;
    let mut parts = 0;
    loop {
        parts += 1;
        assert!(parts < 500, "the scan ends");
        let out = run(
            &CrawlSpec {
                resume: resume.take(),
                ..spec.clone()
            },
            &cfg,
        );
        records.extend(out.records);
        match out.state {
            Some(state) => {
                assert_eq!(out.summary.stopped_by, Some(StopReason::MaxTime));
                resume = Some(state);
            }
            None => {
                assert_eq!(out.summary.stopped_by, None, "{:?}", out.summary);
                break;
            }
        }
    }
    assert!(parts >= 2, "the budget cut the scan at least once");
    let diff = differences(&records, &web.site_truth(&host).expect("truth"));
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    let requested = assert_nothing_requested_twice(&server, &host);
    assert_eq!(requested, web.site_urls(&host).expect("urls") + 1);
}

/// A scan resumed at once after its previous part stopped (a client
/// stopped and started again, a scan handed over) waits a whole delay
/// before its first request: its site never gets two requests closer than
/// the delay across the two parts.
#[test]
fn a_scan_resumed_at_once_waits_the_delay_before_its_first_request() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let server = start(&web);
    let cfg = loopback_config(&server);
    let delay = Duration::from_millis(300);
    let spec = CrawlSpec {
        delay,
        max_duration: Duration::from_millis(1000),
        ..open_spec(&host)
    };
    let first = run(&spec, &cfg);
    assert_eq!(first.summary.stopped_by, Some(StopReason::MaxTime));
    let state = first.state.expect("a state to resume from");
    let second = run(
        &CrawlSpec {
            resume: Some(state),
            ..spec.clone()
        },
        &cfg,
    );
    assert!(second.summary.pages > 0, "{:?}", second.summary);
    let log = requests_to(&server.request_log(), &host);
    assert!(log.len() > first.summary.pages as usize, "both parts asked");
    assert_spaced(&log, delay);
}

#[test]
fn a_crawl_whose_sites_were_asked_a_moment_ago_waits_the_delay_first() {
    // A client started again at once: the run before may have asked the
    // site a moment ago, so the first request (its robots.txt) waits a
    // delay from the new run's start, and the rest keep the delay.
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let server = start(&web);
    let cfg = loopback_config(&server);
    let delay = Duration::from_millis(400);
    let spec = CrawlSpec {
        delay,
        max_pages: 3,
        ..open_spec(&host)
    };
    let run_started = Instant::now();
    let out = crawl_quiet_since(
        &spec,
        Some(run_started),
        &cfg,
        &Cancel::new(),
        &mut |_, _| {},
    );
    assert_eq!(out.summary.pages, 3, "{:?}", out.summary);
    let log = requests_to(&server.request_log(), &host);
    assert_eq!(log[0].path, "/robots.txt");
    let first = log[0].at.saturating_duration_since(run_started);
    assert!(
        first >= delay,
        "the first request came {first:?} after the start"
    );
    assert_spaced(&log, delay);
}

#[test]
fn the_page_cap_is_the_jobs_across_resumed_parts() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        max_pages: 12,
        ..open_spec(&host)
    };
    let outs = crawl_in_parts(&spec, &loopback_config(&server), &[5]);
    assert_eq!(outs.len(), 2);
    assert_eq!(outs[0].summary.pages, 5);
    assert_eq!(outs[1].summary.pages, 7, "{:?}", outs[1].summary);
    assert_eq!(outs[1].summary.stopped_by, Some(StopReason::MaxPages));
    assert_nothing_requested_twice(&server, &host);
}

#[test]
fn a_snapshot_at_a_page_boundary_resumes_like_the_final_state() {
    // A checkpoint taken mid-scan (then the process "dies"): resuming from
    // it fetches only what the snapshot had not, and the records of the
    // snapshot plus those of the resumed scan are the site's.
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let server = start(&web);
    let cfg = loopback_config(&server);
    let cancel = Cancel::new();
    let mut snap = None;
    let first = crawl_resumable(&open_spec(&host), &cfg, &cancel, &mut |p, take| {
        if p.pages == 6 {
            snap = Some(take());
        }
        if p.pages >= 9 {
            cancel.cancel();
        }
    });
    assert_eq!(first.summary.pages, 9);
    let snap = snap.expect("a snapshot at page 6");
    assert_eq!(snap.summary.pages, 6);
    assert_eq!(snap.state.pages_done, 6);
    let before: std::collections::HashSet<u64> = snap.state.seen.iter().copied().collect();
    let queued: std::collections::HashSet<u64> = snap
        .state
        .queue
        .iter()
        .map(|q| url_digest(&q.url))
        .collect();
    assert!(queued.is_subset(&before));
    let log_len = server.request_log().len();
    let second = run(
        &CrawlSpec {
            resume: Some(snap.state.clone()),
            ..open_spec(&host)
        },
        &cfg,
    );
    assert_eq!(second.summary.stopped_by, None);
    // Pages 7 to 9 are fetched again (after the checkpoint), nothing before it.
    let fetched_before: Vec<u64> = before.difference(&queued).copied().collect();
    for r in &server.request_log()[log_len..] {
        let url = format!("http://{}{}", r.host, r.path);
        assert!(
            !fetched_before.contains(&url_digest(&url)),
            "{url} was fetched before the checkpoint and again after it"
        );
        assert_ne!(r.path, "/robots.txt", "robots.txt comes from the state");
    }
    let mut records = snap.new_records.clone();
    records.extend(second.records);
    let diff = differences(&records, &web.site_truth(&host).expect("truth"));
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

#[test]
fn a_site_that_stops_answering_mid_scan_stops_it_offline_and_loses_nothing() {
    // The host goes offline (here: the web server stops) in the middle of
    // a scan: the scan does not fail its whole queue and end as if at its
    // natural end; it stops `Offline` with the unanswered URLs back in its
    // queue, and a resume once the site answers again ends at the truth.
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let truth = web.site_truth(&host).expect("truth");
    let server = std::sync::Mutex::new(Some(start(&web)));
    let cfg = loopback_config(server.lock().unwrap().as_ref().expect("server"));
    let first_log = std::sync::Mutex::new(Vec::new());
    let cancel = Cancel::new();
    let first = crawl_with_progress(&open_spec(&host), &cfg, &cancel, &mut |p| {
        if p.pages == 5 {
            if let Some(s) = server.lock().unwrap().take() {
                *first_log.lock().unwrap() = s.request_log();
                s.stop().expect("stop the web");
            }
        }
    });
    assert_eq!(
        first.summary.stopped_by,
        Some(StopReason::Offline),
        "{:?}",
        first.summary
    );
    assert!(!StopReason::Offline.is_natural_end());
    assert_eq!(first.summary.pages, 5);
    let state = first
        .state
        .clone()
        .expect("an offline scan returns its state");
    assert_eq!(
        state.pages_done, 5,
        "unanswered URLs are not counted as taken"
    );
    assert!(
        !state.queue.is_empty(),
        "the unanswered URLs wait in the queue"
    );
    // The site answers again (at another port): the scan resumes there.
    let server = start(&web);
    let cfg = loopback_config(&server);
    let second = run(
        &CrawlSpec {
            resume: Some(state),
            ..open_spec(&host)
        },
        &cfg,
    );
    assert_eq!(second.summary.stopped_by, None, "{:?}", second.summary);
    let whole = run(&open_spec(&host), &loopback_config(&start(&web)));
    assert_eq!(
        first.summary.pages + second.summary.pages,
        whole.summary.pages,
        "every page once"
    );
    let mut records = first.records.clone();
    records.extend(second.records);
    let diff = differences(&records, &truth);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    // Nothing answered before is requested again.
    let before: Vec<String> = first_log
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.path != "/robots.txt")
        .map(|r| r.path.clone())
        .collect();
    for r in requests_to(&server.request_log(), &host) {
        assert!(!before.contains(&r.path), "{} requested again", r.path);
    }
}

#[test]
fn a_resumed_scan_whose_site_does_not_answer_stays_offline_with_its_queue() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let host = biggest_site(&web);
    let server = start(&web);
    let cfg = loopback_config(&server);
    let outs = crawl_in_parts(&open_spec(&host), &cfg, &[3]);
    let state = outs[0].state.clone().expect("a state");
    drop(outs);
    server.stop().expect("stop");
    // The state's robots.txt answer is not used: a server's continuation
    // state carries none, so the robots.txt request gets no answer.
    let out = run(
        &CrawlSpec {
            resume: Some(ScanState {
                robots: Vec::new(),
                ..state.clone()
            }),
            ..open_spec(&host)
        },
        &cfg,
    );
    assert_eq!(
        out.summary.stopped_by,
        Some(StopReason::Offline),
        "{:?}",
        out.summary
    );
    let back = out.state.expect("its state");
    assert_eq!(back.queue, state.queue);
    assert_eq!(back.pages_done, state.pages_done);
}

/// Most of `log`'s requests unanswered at once: for each request, those
/// that had arrived and were not answered yet when it arrived, itself included.
fn most_unanswered_at_once(log: &[LoggedRequest]) -> usize {
    log.iter()
        .map(|r| {
            log.iter()
                .filter(|o| o.at <= r.at && r.at < o.answered)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Paths requested, each with how often.
fn paths(log: &[LoggedRequest]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in log {
        *out.entry(r.path.clone()).or_insert(0) += 1;
    }
    out
}

#[test]
fn connections_an_operator_allows_overlap_requests_and_crawl_the_same_pages() {
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    // Answers take 2–20 ms, so requests on several connections overlap.
    server.set_response_delay(Some(ResponseDelay {
        min_ms: 2,
        max_ms: 20,
        seed: 3,
    }));
    let cfg = loopback_config(&server);
    let host = biggest_site(&web);
    let truth = web.site_truth(&host).expect("known site");
    let one = run(&open_spec(&host), &cfg);
    let one_log = requests_to(&server.request_log(), &host);
    assert_eq!(most_unanswered_at_once(&one_log), 1);
    assert!(differences(&one.records, &truth).is_empty());
    for n in [2u8, 4] {
        let before = server.request_log().len();
        let spec = CrawlSpec {
            connections: n,
            ..open_spec(&host)
        };
        let out = run(&spec, &cfg);
        let log = requests_to(&server.request_log()[before..], &host);
        let diff = differences(&out.records, &truth);
        assert!(diff.is_empty(), "{n} connections:\n{}", diff.join("\n"));
        let (a, b) = (&out.summary, &one.summary);
        assert_eq!(
            (a.pages, a.links, a.errors, &a.status_counts, a.stopped_by),
            (b.pages, b.links, b.errors, &b.status_counts, b.stopped_by),
            "{n} connections"
        );
        // The same requests, none twice (a redirect to a page asked for
        // ahead takes its answer), and more than one at a time.
        assert_eq!(paths(&log), paths(&one_log), "{n} connections");
        let at_once = most_unanswered_at_once(&log);
        assert!(
            (2..=usize::from(n)).contains(&at_once),
            "{n} connections: {at_once} unanswered at once"
        );
    }
    // Within the page cap: the same requests as one connection makes,
    // none ahead beyond the cap (read once the server has gone quiet, so a
    // request still being answered would be counted).
    let capped = |connections: u8| {
        let before = server.request_log().len();
        let spec = CrawlSpec {
            connections,
            max_pages: 4,
            ..open_spec(&host)
        };
        let out = run(&spec, &cfg);
        assert_eq!(out.summary.pages, 4, "{connections} connections");
        let mut seen = server.requests();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = server.requests();
            if now == seen {
                break;
            }
            seen = now;
        }
        paths(&requests_to(&server.request_log()[before..], &host))
    };
    assert_eq!(capped(4), capped(1));
}

#[test]
fn connections_are_one_at_a_time_at_any_delay() {
    // A politeness delay, or a robots.txt Crawl-delay at delay 0: the site
    // gets one request at a time, spaced, however many connections.
    let web = Arc::new(SynthWeb::generate(7, 12));
    let server = start(&web);
    let host = biggest_site(&web);
    let delay = Duration::from_millis(30);
    let spec = CrawlSpec {
        connections: 4,
        max_pages: 6,
        delay,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 6);
    let log = requests_to(&server.request_log(), &host);
    assert_eq!(most_unanswered_at_once(&log), 1);
    assert_spaced(&log, delay);

    let web = Arc::new(SynthWeb::with_config(
        7,
        12,
        SynthConfig {
            crawl_delay_ms: Some(60),
            ..SynthConfig::default()
        },
    ));
    let server = start(&web);
    let host = biggest_site(&web);
    let spec = CrawlSpec {
        connections: 4,
        max_pages: 4,
        ..open_spec(&host)
    };
    let out = run(&spec, &loopback_config(&server));
    assert_eq!(out.summary.pages, 4);
    let log = requests_to(&server.request_log(), &host);
    assert_eq!(most_unanswered_at_once(&log), 1);
    assert_spaced(&log, Duration::from_millis(60));
}
