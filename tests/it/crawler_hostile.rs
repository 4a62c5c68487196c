//! The crawler against hostile sites served on loopback (see
//! `beebot_testkit::synth::hostile`): each scan ends, bounded, with the reason
//! in its summary, and nothing crashes. Caps and timeouts are small so every
//! test ends in a few seconds.

use beebot_client::cancel::Cancel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use beebot_client::crawler::{crawl, CrawlOutput, CrawlSpec, CrawlerConfig, Lookup};
use beebot_shared::linkfile::StopReason;
use beebot_shared::scope::Scope;
use beebot_testkit::synth::hostile::{
    DEEP_LINK, HOSTILE_OK_LINK, HUGE_FIRST_LINK, HUGE_REPEATED_LINK,
};
use beebot_testkit::synth::SynthWeb;
use beebot_testkit::web::{LoggedRequest, SynthWebServer};

/// Body bytes read per page in these tests.
const PAGE_CAP: u64 = 1024 * 1024;

fn server() -> SynthWebServer {
    SynthWebServer::start(Arc::new(SynthWeb::generate(1, 1))).expect("start the web server")
}

/// Loopback allowed, `*.hostile.test` sent to the server, short timeouts.
fn config(server: &SynthWebServer) -> CrawlerConfig {
    CrawlerConfig {
        allow_private: true,
        resolve: vec![format!("*.hostile.test=127.0.0.1:{}", server.addr().port())
            .parse()
            .expect("resolve rule")],
        connect_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(2),
        proxy: None,
        // Names without a rule resolve to nothing: no DNS query leaves the machine.
        lookup: Lookup::Fixed(Vec::new()),
    }
}

fn spec(host: &str) -> CrawlSpec {
    CrawlSpec {
        max_pages: 100,
        max_depth: 50,
        delay: Duration::ZERO,
        max_page_bytes: PAGE_CAP,
        max_duration: Duration::from_secs(30),
        ..CrawlSpec::new(host, Scope::Host)
    }
}

fn run(spec: &CrawlSpec, server: &SynthWebServer) -> CrawlOutput {
    crawl(spec, &config(server), &Cancel::new(), &mut |_, _| {})
}

fn targets(out: &CrawlOutput) -> Vec<&str> {
    out.records.iter().map(|r| r.target_url.as_str()).collect()
}

fn paths(log: &[LoggedRequest], host: &str) -> Vec<String> {
    log.iter()
        .filter(|r| r.host.split(':').next() == Some(host))
        .map(|r| r.path.clone())
        .collect()
}

#[test]
fn deep_nesting_page_is_parsed_to_its_end() {
    let server = server();
    let out = run(&spec("deep.hostile.test"), &server);
    assert_eq!(out.summary.stopped_by, None, "{:?}", out.summary);
    assert_eq!(out.summary.pages, 1);
    assert!(targets(&out).contains(&HOSTILE_OK_LINK));
    assert!(targets(&out).contains(&DEEP_LINK), "{:?}", targets(&out));
}

#[test]
fn huge_page_is_cut_at_the_cap_and_the_part_read_parsed() {
    let server = server();
    let started = Instant::now();
    let out = run(&spec("huge.hostile.test"), &server);
    let s = &out.summary;
    assert_eq!(s.truncated_pages, 1, "{s:?}");
    assert!(s.bytes <= PAGE_CAP + 64 * 1024, "{s:?}");
    let found = targets(&out);
    assert!(found.contains(&HUGE_FIRST_LINK), "{found:?}");
    assert!(found.contains(&HUGE_REPEATED_LINK), "{found:?}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn binary_garbage_served_as_html_yields_nothing_and_no_crash() {
    let server = server();
    let out = run(&spec("garbage.hostile.test"), &server);
    let s = &out.summary;
    assert_eq!(s.stopped_by, None, "{s:?}");
    assert_eq!(s.pages, 2, "{s:?}");
    assert!(s.bytes >= 1 << 20, "{s:?}");
    assert_eq!(targets(&out), [HOSTILE_OK_LINK]);
}

#[test]
fn drip_fed_page_times_out_and_the_scan_goes_on() {
    let server = server();
    let started = Instant::now();
    let out = run(&spec("drip.hostile.test"), &server);
    let s = &out.summary;
    assert_eq!(s.timeouts, 1, "{s:?}");
    assert!(s.errors >= 1, "{s:?}");
    assert_eq!(s.pages, 2, "{s:?}");
    assert_eq!(s.stopped_by, None, "{s:?}");
    assert_eq!(targets(&out), [HOSTILE_OK_LINK]);
    assert!(started.elapsed() < Duration::from_secs(8), "{s:?}");
}

#[test]
fn redirect_loop_and_long_chain_are_not_followed_forever() {
    let server = server();
    let out = run(&spec("loop.hostile.test"), &server);
    let s = &out.summary;
    assert_eq!(s.redirect_errors, 2, "{s:?}");
    assert_eq!(s.stopped_by, None, "{s:?}");
    let log = paths(&server.request_log(), "loop.hostile.test");
    assert_eq!(log.iter().filter(|p| p.starts_with("/loop-")).count(), 2);
    // The entry and five hops; the sixth hop is refused.
    assert_eq!(log.iter().filter(|p| p.starts_with("/chain-")).count(), 6);
}

#[test]
fn endless_calendars_are_cut_by_the_trap_rule_and_the_page_cap() {
    let server = server();
    let spec = CrawlSpec {
        max_pages: 30,
        ..spec("calendar.hostile.test")
    };
    let out = run(&spec, &server);
    let s = &out.summary;
    assert_eq!(s.stopped_by, Some(StopReason::MaxPages), "{s:?}");
    assert_eq!(s.pages, 30);
    assert_eq!(s.trap_urls, 1, "{s:?}");
    let log = paths(&server.request_log(), "calendar.hostile.test");
    let nested: Vec<_> = log.iter().filter(|p| p.starts_with("/calendar/")).collect();
    // 2024/01, then two nested months; the fourth "2024" is a trap.
    assert_eq!(nested.len(), 3, "{nested:?}");
    assert!(log.iter().all(|p| p.matches("/2024").count() <= 3));
}

#[test]
fn ten_megabyte_robots_txt_is_read_to_its_cap_and_obeyed() {
    let server = server();
    let out = run(&spec("bigrobots.hostile.test"), &server);
    let s = &out.summary;
    assert_eq!(s.robots_truncated, 1, "{s:?}");
    assert_eq!(s.robots_disallowed, 1, "{s:?}");
    assert_eq!(s.stopped_by, None, "{s:?}");
    let log = paths(&server.request_log(), "bigrobots.hostile.test");
    assert!(log.contains(&"/open.html".to_string()), "{log:?}");
    assert!(log.iter().all(|p| !p.starts_with("/secret/")), "{log:?}");
}

#[test]
fn legacy_encoding_gives_the_urls_a_browser_requests() {
    let server = server();
    let out = run(&spec("latin1.hostile.test"), &server);
    let rec = out
        .records
        .iter()
        .find(|r| r.target_url != HOSTILE_OK_LINK)
        .expect("the non-ASCII link");
    assert_eq!(
        rec.target_url,
        "http://xn--caf-dma.example.org/cr%C3%A8me?q=cr%E8me"
    );
    assert_eq!(rec.anchor_text, "Crème");
}

/// The request paths the server logged for `host` from `from` on, once it
/// has gone quiet (nothing new for 300 ms): a request still being answered
/// or sent after the crawl returned is counted. A crawl still requesting
/// 10 s after it returned fails the test.
fn quiet_paths(server: &SynthWebServer, host: &str, from: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = server.request_log().len();
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = server.request_log().len();
        if now == seen {
            break;
        }
        assert!(
            Instant::now() < until,
            "{host} still requested after the crawl ended"
        );
        seen = now;
    }
    let mut p = paths(&server.request_log()[from..], host);
    p.sort();
    p
}

#[test]
fn connections_an_operator_allows_end_hostile_sites_as_one_connection_does() {
    // With 4 requests at once to a site (allowed only at delay 0), a page
    // dripped a byte a second, redirect loops and an endless calendar end
    // the scan as one connection ends it: the same counts, the same
    // requests (none sent ahead past a cap or after the end), in bounded
    // time. (The dripping site's home links to the dripped page alone, so
    // there the helpers make the crawl's own requests; the calendar's
    // pages link to several, asked for ahead.)
    let server = server();
    for (host, pages, bound) in [
        ("drip.hostile.test", 100, Duration::from_secs(8)),
        ("loop.hostile.test", 100, Duration::from_secs(8)),
        ("calendar.hostile.test", 30, Duration::from_secs(15)),
    ] {
        let ends = |connections: u8| {
            let from = server.request_log().len();
            let spec = CrawlSpec {
                connections,
                max_pages: pages,
                ..spec(host)
            };
            let started = Instant::now();
            let out = run(&spec, &server);
            let took = started.elapsed();
            assert!(took < bound, "{host}, {connections} connections: {took:?}");
            let s = out.summary;
            // (Not the bytes: how much of the dripped page arrives before
            // its timeout is a matter of timing.)
            let counts = (
                (s.pages, s.links, s.errors, s.timeouts),
                (s.redirect_errors, s.trap_urls, s.stopped_by),
                s.status_counts,
            );
            (counts, quiet_paths(&server, host, from))
        };
        let (one, one_paths) = ends(1);
        let (four, four_paths) = ends(4);
        assert_eq!(four, one, "{host}");
        assert_eq!(four_paths, one_paths, "{host}");
    }
}
