//! The reference site: a deterministic synthetic site of [`REFERENCE_PAGES`]
//! HTML pages shaped like a typical target site (a tree of sections with
//! cross links, a few KB of text per page, outbound links), served on its own
//! HTTP port so every host can benchmark its crawler against the same thing
//! (`beebot benchmark`; the client also does it on first start and weekly).
//!
//! Links between its pages are relative or absolute-path, never absolute
//! URLs, so the site works under whatever host and port it is reached at.
//! Pure generation ([`respond`]) and a thin hyper shell ([`serve`]) that
//! anyone on the internet may reach, so it bounds what a client may hold:
//! connections in all and per address, the time to send a request's header,
//! and the time a connection may sit idle.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Response, StatusCode};
use beebot_shared::httpcap::{self, Limits};

use crate::about::AboutPage;

/// Where the crawler's about page is served (the User-Agent links to it).
/// No reference page has this path.
pub const ABOUT_PATH: &str = "/about";

/// Connections served at once; more wait in the kernel's listen backlog,
/// holding no file descriptor of the server's (the systemd unit's
/// `LimitNOFILE` leaves room for these, the QUIC endpoint, store and files).
pub const MAX_CONNECTIONS: usize = 256;
/// Connections from one IP address at once; more are closed as they are
/// accepted. A benchmark uses one or two; a campus NAT of hosts a few more.
pub const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;
/// A request's header must arrive whole within this time of the server
/// waiting for it, which is also how long a kept-alive connection may wait
/// for its next request (a benchmark sends its next one at once).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection on which no byte moved either way for this long is closed
/// (say, a client that stopped reading its answer).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// HTML pages of the reference site, `/` included.
pub const REFERENCE_PAGES: usize = 1000;

/// Children of each page in the site's tree (every page is reachable from `/`).
const FAN_OUT: usize = 8;

/// Seed of the site's text and cross links: fixed, so every server serves the
/// same bytes and benchmarks compare.
const SEED: u64 = 0x5EED_BEEB_07EF_0001;

/// Sections pages live in.
const SECTIONS: &[&str] = &["news", "research", "study", "about", "library", "events"];

/// Filler words.
const WORDS: &[&str] = &[
    "university",
    "research",
    "faculty",
    "student",
    "campus",
    "library",
    "archive",
    "project",
    "science",
    "history",
    "lecture",
    "seminar",
    "grant",
    "study",
    "report",
    "network",
    "survey",
    "method",
    "result",
    "figure",
    "museum",
    "gallery",
    "press",
    "policy",
    "guide",
    "service",
    "region",
    "climate",
    "river",
    "forest",
    "harbour",
    "station",
    "garden",
    "honey",
    "meadow",
];

/// The robots.txt of the reference site: everything allowed.
pub const REFERENCE_ROBOTS: &str = "User-agent: *\nAllow: /\n";

/// The path of page `index`.
pub fn page_path(index: usize) -> String {
    if index == 0 {
        "/".to_string()
    } else {
        format!("/{}/page-{index}.html", SECTIONS[index % SECTIONS.len()])
    }
}

/// The page index a path names, if it names one.
fn page_index(path: &str) -> Option<usize> {
    if path == "/" {
        return Some(0);
    }
    let (section, file) = path.strip_prefix('/')?.split_once('/')?;
    let index: usize = file
        .strip_prefix("page-")?
        .strip_suffix(".html")?
        .parse()
        .ok()?;
    (index > 0 && index < REFERENCE_PAGES && SECTIONS[index % SECTIONS.len()] == section)
        .then_some(index)
}

/// One answer: status, content type, body.
pub fn respond(path_and_query: &str) -> (u16, &'static str, Vec<u8>) {
    if path_and_query == "/robots.txt" {
        return (200, "text/plain", REFERENCE_ROBOTS.as_bytes().to_vec());
    }
    match page_index(path_and_query) {
        Some(index) => (200, "text/html; charset=utf-8", render(index).into_bytes()),
        None => (
            404,
            "text/html; charset=utf-8",
            b"<!DOCTYPE html><title>Not found</title><h1>Not found</h1>".to_vec(),
        ),
    }
}

fn below(state: &mut u64, n: usize) -> usize {
    (beebot_shared::rng::SplitMix64::step(state) % n.max(1) as u64) as usize
}

/// A link to page `to` from page `from`: relative within a section, absolute
/// path across sections.
fn href(from: usize, to: usize) -> String {
    let target = page_path(to);
    if from != 0 && to != 0 && SECTIONS[from % SECTIONS.len()] == SECTIONS[to % SECTIONS.len()] {
        format!("page-{to}.html")
    } else if from != 0 && to != 0 {
        format!("..{target}")
    } else {
        target
    }
}

/// Page `index`: its head and menu, a title, paragraphs of words and links,
/// links to its children and a footer. The same page for the same index,
/// every time (its words are drawn from a seed and the index).
fn render(index: usize) -> String {
    let mut rng = SEED ^ (index as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let title: Vec<&str> = (0..4)
        .map(|_| WORDS[below(&mut rng, WORDS.len())])
        .collect();
    let title = title.join(" ");
    let mut out = String::with_capacity(8 * 1024);
    push_head_and_menu(&mut out, index, &title);
    let paragraphs = 3 + below(&mut rng, 4);
    for _ in 0..paragraphs {
        push_paragraph(&mut out, index, &mut rng);
    }
    let first_child = index * FAN_OUT + 1;
    if first_child < REFERENCE_PAGES {
        out.push_str("<ul class=\"children\">\n");
        for child in first_child..(first_child + FAN_OUT).min(REFERENCE_PAGES) {
            out.push_str(&format!(
                "<li><a href=\"{}\">Page {child}</a></li>\n",
                href(index, child)
            ));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</main>\n<footer><ul class=\"footer-links\">\n");
    for _ in 0..5 {
        let k = below(&mut rng, 50);
        out.push_str(&format!(
            "<li><a href=\"https://funder{k}.example.net/\" rel=\"noopener\">Funder {k}</a></li>\n"
        ));
    }
    out.push_str("</ul></footer>\n</body>\n</html>\n");
    out
}

/// The page's head, its menu (home and the first page of each section),
/// the link up (but on the home page) and its title.
fn push_head_and_menu(out: &mut String, index: usize, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(&format!("<title>{title} | Reference University</title>\n"));
    out.push_str(
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"stylesheet\" href=\"/assets/site.css\">\n\
         <script src=\"/assets/site.js\" defer></script>\n</head>\n<body class=\"page\">\n\
         <header class=\"site-header\"><nav class=\"menu\"><ul>\n",
    );
    out.push_str(&format!(
        "<li><a href=\"{}\">Home</a></li>\n",
        href(index, 0)
    ));
    for (s, section) in SECTIONS.iter().enumerate() {
        // The first page of each section (pages 1..=6 cover them all).
        let first = if s == 0 { SECTIONS.len() } else { s };
        out.push_str(&format!(
            "<li class=\"menu-item\"><a href=\"{}\">{section}</a></li>\n",
            href(index, first)
        ));
    }
    out.push_str("</ul></nav></header>\n<main>\n");
    if index > 0 {
        let parent = (index - 1) / FAN_OUT;
        out.push_str(&format!(
            "<p class=\"breadcrumb\"><a href=\"{}\">Up</a></p>\n",
            href(index, parent)
        ));
    }
    out.push_str(&format!("<h1>{title}</h1>\n"));
}

/// One paragraph: words, now and then a link to a partner site or to
/// another page, or an entity.
fn push_paragraph(out: &mut String, index: usize, rng: &mut u64) {
    out.push_str("<p>");
    let words = 60 + below(rng, 60);
    for w in 0..words {
        if w > 0 {
            out.push(' ');
        }
        match below(rng, 40) {
            0 => {
                let k = below(rng, 200);
                out.push_str(&format!(
                    "<a href=\"https://www.partner{k}.example.org/{}.html\">{}</a>",
                    WORDS[below(rng, WORDS.len())],
                    WORDS[below(rng, WORDS.len())]
                ));
            }
            1 => {
                let to = below(rng, REFERENCE_PAGES);
                out.push_str(&format!(
                    "<a href=\"{}\">{}</a>",
                    href(index, to),
                    WORDS[below(rng, WORDS.len())]
                ));
            }
            2 => out.push_str("<em>&amp;</em>"),
            _ => out.push_str(WORDS[below(rng, WORDS.len())]),
        }
    }
    out.push_str("</p>\n");
}

/// What the reference site lets a client hold.
pub const LIMITS: Limits = Limits {
    connections: MAX_CONNECTIONS,
    per_address: MAX_CONNECTIONS_PER_ADDRESS,
    header: HEADER_READ_TIMEOUT,
    idle: IDLE_TIMEOUT,
};

/// Serve the reference site on `listener` (any `Host`) until `shutdown`,
/// within [`LIMITS`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with_about(listener, None, shutdown).await
}

/// [`serve`], and the crawler's about page at [`ABOUT_PATH`] when `about`
/// is given (read from the watch channel per request: no grid lock).
pub async fn serve_with_about(
    listener: tokio::net::TcpListener,
    about: Option<AboutPage>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    httpcap::serve_with(listener, LIMITS, shutdown, move |request| {
        // The page as rendered now: an `Arc` cloned under the channel's read lock.
        let page = about.as_ref().map(|a| a.borrow().clone());
        async move { Ok::<_, Infallible>(handle(request.method(), request.uri(), page)) }
    })
    .await;
    Ok(())
}

fn handle(method: &Method, uri: &axum::http::Uri, about: Option<Arc<String>>) -> Response<Body> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        let mut r = Response::new(Body::from("GET only\n"));
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return r;
    }
    let path = uri
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    if let Some(page) = about.filter(|_| uri.path() == ABOUT_PATH) {
        return Response::builder()
            .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
            .body(Body::from(page.as_bytes().to_vec()))
            .unwrap_or_else(|_| Response::new(Body::from("error\n")));
    }
    // Generating a page is a few microseconds: no need for a blocking thread.
    let (status, content_type, body) = respond(&path);
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::from("error\n")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashSet, VecDeque};

    #[test]
    fn every_page_is_reachable_and_paths_round_trip() {
        for i in 0..REFERENCE_PAGES {
            assert_eq!(page_index(&page_path(i)), Some(i), "{i}");
        }
        assert_eq!(page_index("/news/page-1000.html"), None);
        assert_eq!(page_index("/about/page-1.html"), None, "wrong section");
        assert_eq!(page_index("/news/page-0.html"), None);
        // Breadth-first over the children lists reaches every page.
        let mut seen = HashSet::from([0usize]);
        let mut queue = VecDeque::from([0usize]);
        while let Some(i) = queue.pop_front() {
            for child in (i * FAN_OUT + 1)..(i * FAN_OUT + 1 + FAN_OUT).min(REFERENCE_PAGES) {
                if seen.insert(child) {
                    queue.push_back(child);
                }
            }
        }
        assert_eq!(seen.len(), REFERENCE_PAGES);
    }

    #[test]
    fn pages_are_deterministic_and_typical() {
        let (status, ct, a) = respond("/research/page-7.html");
        assert_eq!((status, ct), (200, "text/html; charset=utf-8"));
        assert_eq!(a, respond("/research/page-7.html").2);
        assert!(a.len() > 2_000 && a.len() < 20_000, "{} bytes", a.len());
        let text = String::from_utf8(a).expect("utf-8");
        assert!(text.contains("page-57.html"), "children link relatively");
        assert!(!text.contains("http://"), "no absolute internal links");
        assert_eq!(respond("/nope").0, 404);
        assert_eq!(respond("/robots.txt").2, REFERENCE_ROBOTS.as_bytes());
    }

    /// A TCP connection to `server` from `ip` (a loopback address).
    async fn connect_from(ip: &str, server: std::net::SocketAddr) -> tokio::net::TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(format!("{ip}:0").parse().expect("addr"))
            .expect("bind");
        socket.connect(server).await.expect("connect")
    }

    /// How long until `stream` is closed by the server (`None`: not within `limit`).
    async fn closed_within(
        stream: &mut tokio::net::TcpStream,
        limit: Duration,
    ) -> Option<Duration> {
        use tokio::io::AsyncReadExt;
        let start = tokio::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout_at(start + limit, stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// `GET /` on a fresh connection from `ip`; the status line.
    async fn get_home(ip: &str, server: std::net::SocketAddr) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = connect_from(ip, server).await;
        s.write_all(b"GET / HTTP/1.1\r\nHost: ref.test\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.expect("answer");
        String::from_utf8_lossy(&answer)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    async fn start() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, async move {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    /// `GET path` on a fresh connection: the whole answer as text.
    async fn get(server: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = connect_from("127.0.0.1", server).await;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: ref.test\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("request");
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.expect("answer");
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_about_page_is_served_as_last_published_and_only_when_given() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (page, about) = tokio::sync::watch::channel(Arc::new("<p>first</p>".to_string()));
        let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve_with_about(listener, Some(about), async move {
            let _ = stopped.await;
        }));
        let answer = get(addr, ABOUT_PATH).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.contains("text/html; charset=utf-8"));
        assert!(answer.ends_with("<p>first</p>"), "{answer}");
        page.send_replace(Arc::new("<p>second</p>".to_string()));
        assert!(get(addr, "/about?x=1").await.ends_with("<p>second</p>"));
        // The reference site is unchanged beside it.
        assert!(get(addr, "/").await.starts_with("HTTP/1.1 200 OK"));
        assert!(get(addr, "/about/").await.starts_with("HTTP/1.1 404"));
        // Without a page (the benchmark's own server), /about is not found.
        let (plain, _stop_plain) = start().await;
        assert!(get(plain, ABOUT_PATH).await.starts_with("HTTP/1.1 404"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_and_slow_connections_are_capped_and_closed_and_others_served() {
        use tokio::io::AsyncWriteExt;
        let (addr, _stop) = start().await;
        // More idle connections from one address than it may hold: the
        // extra ones are closed at once.
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_ADDRESS + 8 {
            idle.push(connect_from("127.0.0.1", addr).await);
        }
        let mut closed_at_once = 0;
        for s in idle.iter_mut() {
            if closed_within(s, Duration::from_millis(300)).await.is_some() {
                closed_at_once += 1;
            }
        }
        assert_eq!(closed_at_once, 8, "connections beyond the per-address cap");
        // A header dripped a byte a second, and a kept-alive connection
        // that asks once and then says nothing.
        let mut slow = connect_from("127.0.0.4", addr).await;
        slow.write_all(b"GET / HTTP/1.1\r\n").await.expect("write");
        let dripper = tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            while slow.write_all(b"X").await.is_ok() && start.elapsed() < 3 * HEADER_READ_TIMEOUT {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            start.elapsed()
        });
        let mut kept = connect_from("127.0.0.5", addr).await;
        kept.write_all(b"GET /robots.txt HTTP/1.1\r\nHost: ref.test\r\n\r\n")
            .await
            .expect("request");
        // Another client is served at once meanwhile.
        let started = tokio::time::Instant::now();
        assert_eq!(get_home("127.0.0.2", addr).await, "HTTP/1.1 200 OK");
        assert!(started.elapsed() < Duration::from_secs(2));
        // The idle connections, the dripped header and the kept-alive one
        // are closed within the header timeout.
        let limit = HEADER_READ_TIMEOUT + Duration::from_secs(3);
        for s in idle.iter_mut() {
            let after = closed_within(s, limit).await;
            assert!(
                after.is_some(),
                "an idle connection was held past {limit:?}"
            );
        }
        let after = closed_within(&mut kept, limit).await;
        assert!(
            after.is_some(),
            "a kept-alive idle connection held past {limit:?}"
        );
        let dripped = dripper.await.expect("dripper");
        assert!(
            dripped < limit + Duration::from_secs(2),
            "a dripped header was read for {dripped:?}"
        );
        // And the address that held idle connections is served again.
        assert_eq!(get_home("127.0.0.1", addr).await, "HTTP/1.1 200 OK");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn beyond_the_connection_cap_a_request_waits_for_a_slot_and_is_served() {
        let (addr, _stop) = start().await;
        // The cap in idle connections, from enough addresses that none is
        // over its own limit, and more.
        let addresses = MAX_CONNECTIONS.div_ceil(MAX_CONNECTIONS_PER_ADDRESS) + 1;
        let mut idle = Vec::new();
        for a in 0..addresses {
            for _ in 0..MAX_CONNECTIONS_PER_ADDRESS {
                idle.push(connect_from(&format!("127.0.1.{}", a + 1), addr).await);
            }
        }
        assert!(idle.len() > MAX_CONNECTIONS);
        // A normal request still gets its answer, once the idle ones time out.
        let started = tokio::time::Instant::now();
        let status = tokio::time::timeout(
            HEADER_READ_TIMEOUT * 2 + Duration::from_secs(5),
            get_home("127.0.0.3", addr),
        )
        .await
        .expect("a request was not served while idle connections held the cap");
        assert_eq!(status, "HTTP/1.1 200 OK");
        eprintln!(
            "served after {:?} behind {} idle connections",
            started.elapsed(),
            idle.len()
        );
    }
}
