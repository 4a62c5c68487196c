//! Hostile sites: one per way a site can try to hurt a crawler, each under
//! `*.hostile.test`, described as pure data so a server can serve them lazily
//! (a 50 MB page is generated while it is sent, never held whole).
//!
//! | host | what it does |
//! |---|---|
//! | `deep.hostile.test` | `/` nests 200,000 `<div>`s around one outbound link |
//! | `huge.hostile.test` | `/` is a 50 MB page, links at its start and all through it |
//! | `garbage.hostile.test` | `/garbage.html` is 1 MiB of random bytes served as `text/html` |
//! | `drip.hostile.test` | `/slow.html` sends one byte a second |
//! | `loop.hostile.test` | `/loop-a` ⇄ `/loop-b` redirect loop; `/chain-0` → … → `/chain-9` |
//! | `calendar.hostile.test` | endless calendars: `/calendar/Y/M/` with a relative "next" link that nests a level deeper each month, and `/events?month=N` linking to `N+1` |
//! | `bigrobots.hostile.test` | a 10 MB robots.txt: `Disallow: /secret/` first, `Disallow: /` after 500 KiB of comments |
//! | `latin1.hostile.test` | `/` in ISO-8859-1 by its `Content-Type` header, non-ASCII in a link's host, path and query |
//! | `ssrf.hostile.test` | `/` links to its subdomains [`SSRF_PRIVATE_NAMES`] (a test maps them to private addresses), to `/go-intranet` (a redirect to one of them), and to loopback IP addresses ([`SSRF_LOOPBACK_LINKS`]); the subdomains answer `/` and `/admin` |
//! | `offsiterobots.hostile.test` | robots.txt redirects to [`OFFSITE_ROBOTS`], another site |
//! | `movedrobots.hostile.test` | robots.txt redirects to `www.movedrobots.hostile.test` (the same site), which forbids `/private/`; `/` links to `/private/secret.html` and `/open.html` |
//!
//! Every home page also links to [`HOSTILE_OK_LINK`], an outbound link a crawl
//! must find whatever else happens. A site's other paths answer 404.

use std::time::Duration;

/// Domain of the hostile sites (`.test` is reserved, RFC 2606).
pub const HOSTILE_DOMAIN: &str = "hostile.test";

/// Outbound link on every hostile home page.
pub const HOSTILE_OK_LINK: &str = "http://survivor.example.org/";

/// Subdomains of `ssrf.hostile.test` its home page links to: names a test
/// maps to private addresses.
pub const SSRF_PRIVATE_NAMES: [&str; 2] = ["intranet.ssrf.hostile.test", "db.ssrf.hostile.test"];

/// Loopback IP addresses the home page of `ssrf.hostile.test` links to.
pub const SSRF_LOOPBACK_LINKS: [&str; 2] = ["http://127.0.0.1:9/", "http://[::ffff:127.0.0.1]:9/"];

/// Where the robots.txt of `offsiterobots.hostile.test` redirects: another site.
pub const OFFSITE_ROBOTS: &str = "http://elsewhere.hostile.test/robots.txt";

/// Nesting depth of the deep page.
pub const DEEP_NESTING: u64 = 200_000;

/// Size of the huge page, in bytes (at least; the last chunk may overshoot).
pub const HUGE_PAGE_BYTES: u64 = 50 * 1000 * 1000;

/// Size of the garbage page.
pub const GARBAGE_BYTES: usize = 1 << 20;

/// Size of the big robots.txt, in bytes (at least).
pub const BIG_ROBOTS_BYTES: u64 = 10 * 1000 * 1000;

/// Pause between two bytes of the drip-fed page.
pub const DRIP_EVERY: Duration = Duration::from_secs(1);

/// Hops of the long redirect chain (`/chain-0` … `/chain-{N}`, then a page).
pub const REDIRECT_CHAIN_HOPS: u32 = 10;

/// Outbound link in the deep page, after the 200,000 open `<div>`s.
pub const DEEP_LINK: &str = "http://deep-end.example.org/";

/// Outbound link at the start of the huge page.
pub const HUGE_FIRST_LINK: &str = "http://huge-start.example.org/";

/// Outbound link repeated all through the huge page.
pub const HUGE_REPEATED_LINK: &str = "http://huge-middle.example.org/";

/// How a hostile body is produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostileBody {
    /// These bytes.
    Bytes(Vec<u8>),
    /// Each chunk sent its number of times, in order (generated while sent).
    Repeat(Vec<(Vec<u8>, u64)>),
    /// These bytes, one at a time, `every` apart.
    Drip { bytes: Vec<u8>, every: Duration },
}

impl HostileBody {
    /// Total length of the body in bytes.
    pub fn len(&self) -> u64 {
        match self {
            HostileBody::Bytes(b) | HostileBody::Drip { bytes: b, .. } => b.len() as u64,
            HostileBody::Repeat(parts) => parts
                .iter()
                .map(|(chunk, n)| (chunk.len() as u64).saturating_mul(*n))
                .fold(0u64, u64::saturating_add),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One answer of a hostile site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostileResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub location: Option<String>,
    pub body: HostileBody,
}

/// The host names of every hostile site.
pub fn hostile_hosts() -> Vec<String> {
    [
        "deep",
        "huge",
        "garbage",
        "drip",
        "loop",
        "calendar",
        "bigrobots",
        "latin1",
        "ssrf",
        "offsiterobots",
        "movedrobots",
    ]
    .iter()
    .map(|name| format!("{name}.{HOSTILE_DOMAIN}"))
    .collect()
}

/// Whether `host` (maybe with `:port`) is under [`HOSTILE_DOMAIN`].
pub fn is_hostile_host(host: &str) -> bool {
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host.trim_end_matches('.')
        .to_ascii_lowercase()
        .ends_with(&format!(".{HOSTILE_DOMAIN}"))
}

/// The answer of hostile `host` (maybe with `:port`) for `path_and_query`, or
/// `None` when the host is not a hostile site.
pub fn respond(host: &str, path_and_query: &str) -> Option<HostileResponse> {
    if !is_hostile_host(host) {
        return None;
    }
    let name = site_name(host);
    if path_and_query == "/robots.txt" {
        return Some(robots_txt(&name));
    }
    Some(answer(&name, path_and_query))
}

/// `deep.hostile.test:8080` → `deep`: the host without port, trailing dot and
/// [`HOSTILE_DOMAIN`], lower-cased.
fn site_name(host: &str) -> String {
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    host.trim_end_matches('.')
        .to_ascii_lowercase()
        .strip_suffix(&format!(".{HOSTILE_DOMAIN}"))
        .unwrap_or("")
        .to_string()
}

/// The robots.txt of site `name`.
fn robots_txt(name: &str) -> HostileResponse {
    match name {
        "bigrobots" => big_robots(),
        "offsiterobots" => redirect(OFFSITE_ROBOTS),
        "movedrobots" => redirect("http://www.movedrobots.hostile.test/robots.txt"),
        _ => text(200, "text/plain", "User-agent: *\nDisallow: /private/\n"),
    }
}

/// The answer of site `name` for `path_and_query` (not robots.txt).
fn answer(name: &str, path_and_query: &str) -> HostileResponse {
    match (name, path_and_query) {
        ("deep", "/") => deep_page(),
        ("huge", "/") => huge_page(),
        ("garbage", "/") => home(&["/garbage.html"]),
        ("garbage", "/garbage.html") => HostileResponse {
            status: 200,
            content_type: "text/html",
            location: None,
            body: HostileBody::Bytes(garbage(GARBAGE_BYTES)),
        },
        ("drip", "/") => home(&["/slow.html"]),
        ("drip", "/slow.html") => drip_page(),
        ("loop", path) => loop_answer(path),
        ("calendar", "/") => home(&["/calendar/2024/01/", "/events?month=0"]),
        ("calendar", path) if path.starts_with("/calendar/") => calendar_page(path),
        ("calendar", path) if path.starts_with("/events?month=") => events_page(path),
        ("latin1", "/") => latin1_page(),
        ("ssrf", "/") => ssrf_home(),
        ("ssrf", "/go-intranet") => redirect(&format!("http://{}/admin", SSRF_PRIVATE_NAMES[0])),
        (sub, "/" | "/admin")
            if SSRF_PRIVATE_NAMES.contains(&format!("{sub}.{HOSTILE_DOMAIN}").as_str()) =>
        {
            text(200, "text/html", "<p>an intranet page</p>")
        }
        ("offsiterobots", "/") => home(&["/page.html"]),
        ("offsiterobots", "/page.html") => text(200, "text/html", "<p>a page</p>"),
        ("movedrobots" | "www.movedrobots", "/") => home(&["/private/secret.html", "/open.html"]),
        ("movedrobots" | "www.movedrobots", "/open.html" | "/private/secret.html") => {
            text(200, "text/html", "<p>a page</p>")
        }
        ("bigrobots", "/") => home(&["/secret/members.html", "/open.html"]),
        ("bigrobots", "/open.html" | "/secret/members.html") => {
            text(200, "text/html", "<p>a page</p>")
        }
        _ => not_found(),
    }
}

/// The drip-fed page: a link it never reaches in time.
fn drip_page() -> HostileResponse {
    HostileResponse {
        status: 200,
        content_type: "text/html",
        location: None,
        body: HostileBody::Drip {
            bytes: b"<html><body><a href=\"http://drip-end.example.org/\">never reached</a>"
                .to_vec(),
            every: DRIP_EVERY,
        },
    }
}

/// `loop.hostile.test`: its home, the two-path loop and the long chain.
fn loop_answer(path: &str) -> HostileResponse {
    match path {
        "/" => home(&["/loop-a", "/chain-0"]),
        "/loop-a" => redirect("/loop-b"),
        "/loop-b" => redirect("/loop-a"),
        path => match path
            .strip_prefix("/chain-")
            .and_then(|n| n.parse::<u32>().ok())
        {
            Some(n) if n < REDIRECT_CHAIN_HOPS => redirect(&format!("/chain-{}", n + 1)),
            Some(_) => text(200, "text/html", "<p>end of the chain</p>"),
            None => not_found(),
        },
    }
}

/// `/events?month=N`: links to month `N+1` (and back), forever.
fn events_page(path: &str) -> HostileResponse {
    match path["/events?month=".len()..].parse::<u64>() {
        Ok(n) => text(
            200,
            "text/html",
            &format!(
                "<h1>Events, month {n}</h1><a href=\"?month={}\">next month</a> \
                 <a href=\"?month={}\">previous month</a>",
                n + 1,
                n.saturating_sub(1)
            ),
        ),
        Err(_) => not_found(),
    }
}

/// A page in ISO-8859-1 with non-ASCII in a link's host, path and query.
fn latin1_page() -> HostileResponse {
    HostileResponse {
        status: 200,
        content_type: "text/html; charset=ISO-8859-1",
        location: None,
        body: HostileBody::Bytes(
            [
                format!("<a href=\"{HOSTILE_OK_LINK}\">ok</a>").as_bytes(),
                b"<a href=\"http://caf\xe9.example.org/cr\xe8me?q=cr\xe8me\">Cr\xe8me</a>",
            ]
            .concat(),
        ),
    }
}

/// The home of `ssrf.hostile.test`: private names, a redirect to one, loopback IPs.
fn ssrf_home() -> HostileResponse {
    let mut links: Vec<String> = SSRF_PRIVATE_NAMES
        .iter()
        .map(|n| format!("http://{n}/"))
        .collect();
    links.push("/go-intranet".into());
    links.extend(SSRF_LOOPBACK_LINKS.iter().map(|l| l.to_string()));
    home(&links.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A small answer of `status` with `body`.
fn text(status: u16, content_type: &'static str, body: &str) -> HostileResponse {
    HostileResponse {
        status,
        content_type,
        location: None,
        body: HostileBody::Bytes(body.as_bytes().to_vec()),
    }
}

/// The 404 of every path a hostile site does not serve.
fn not_found() -> HostileResponse {
    text(404, "text/html", "<h1>Not found</h1>")
}

/// A 302 to `location`.
fn redirect(location: &str) -> HostileResponse {
    HostileResponse {
        status: 302,
        content_type: "text/html",
        location: Some(location.to_string()),
        body: HostileBody::Bytes(Vec::new()),
    }
}

/// A home page linking to `paths` and to [`HOSTILE_OK_LINK`].
fn home(paths: &[&str]) -> HostileResponse {
    let mut html = format!("<html><body><a href=\"{HOSTILE_OK_LINK}\">ok</a>\n");
    for p in paths {
        html.push_str(&format!("<a href=\"{p}\">{p}</a>\n"));
    }
    text(200, "text/html; charset=utf-8", &html)
}

/// [`DEEP_NESTING`] open `<div>`s around [`DEEP_LINK`].
fn deep_page() -> HostileResponse {
    let head = format!("<html><body><a href=\"{HOSTILE_OK_LINK}\">ok</a>");
    HostileResponse {
        status: 200,
        content_type: "text/html",
        location: None,
        body: HostileBody::Repeat(vec![
            (head.into_bytes(), 1),
            (b"<div>".to_vec(), DEEP_NESTING),
            (format!("<a href=\"{DEEP_LINK}\">deep</a>").into_bytes(), 1),
            (b"</div>".to_vec(), DEEP_NESTING),
        ]),
    }
}

/// A page of at least [`HUGE_PAGE_BYTES`], generated while sent.
fn huge_page() -> HostileResponse {
    let head = format!(
        "<html><body><a href=\"{HOSTILE_OK_LINK}\">ok</a><a href=\"{HUGE_FIRST_LINK}\">start</a>\n"
    );
    let chunk = format!(
        "<p>Filler text of a page that never ends, with a link to \
         <a href=\"{HUGE_REPEATED_LINK}\">the middle</a> and an internal \
         <a href=\"/huge-{{n}}.html\">page</a> in every paragraph.</p>\n"
    )
    .into_bytes();
    let repeats = HUGE_PAGE_BYTES.div_ceil(chunk.len() as u64);
    HostileResponse {
        status: 200,
        content_type: "text/html",
        location: None,
        body: HostileBody::Repeat(vec![(head.into_bytes(), 1), (chunk, repeats)]),
    }
}

/// `/calendar/Y/M/…`: the last two numeric segments are the month shown; the
/// "next month" link is relative without `../`, so every month nests deeper.
fn calendar_page(path: &str) -> HostileResponse {
    let numbers: Vec<u64> = path
        .split('/')
        .filter_map(|s| s.parse::<u64>().ok())
        .collect();
    let (year, month) = match numbers.as_slice() {
        [.., y, m] => (*y, *m),
        _ => return not_found(),
    };
    let (next_year, next_month) = if month >= 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    text(
        200,
        "text/html",
        &format!(
            "<h1>Calendar {year}-{month:02}</h1>\
             <a href=\"{next_year}/{next_month:02}/\">next month</a>"
        ),
    )
}

/// A robots.txt of at least [`BIG_ROBOTS_BYTES`]: `Disallow: /secret/` first,
/// `Disallow: /` after the comments that fill it.
fn big_robots() -> HostileResponse {
    let padding = b"# padding to make this file far larger than any crawler should read\n";
    HostileResponse {
        status: 200,
        content_type: "text/plain",
        location: None,
        body: HostileBody::Repeat(vec![
            (b"User-agent: *\nDisallow: /secret/\n".to_vec(), 1),
            (
                padding.to_vec(),
                BIG_ROBOTS_BYTES.div_ceil(padding.len() as u64),
            ),
            (b"Disallow: /\n".to_vec(), 1),
        ]),
    }
}

/// `len` pseudo-random bytes ([`SplitMix64`](beebot_shared::rng::SplitMix64), fixed
/// seed: the same on every run).
fn garbage(len: usize) -> Vec<u8> {
    let mut rng = beebot_shared::rng::SplitMix64::new(GARBAGE_SEED);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The seed of [`garbage`].
const GARBAGE_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hostile_site_answers_its_home_and_robots() {
        for host in hostile_hosts() {
            let home = respond(&format!("{host}:8080"), "/").expect("hostile host");
            assert_eq!(home.status, 200, "{host}");
            assert!(respond(&host, "/robots.txt").is_some());
            assert_eq!(respond(&host, "/nowhere").map(|r| r.status), Some(404));
        }
        assert!(respond("site0.synth.test", "/").is_none());
        assert!(respond("hostile.test.example", "/").is_none());
    }

    #[test]
    fn sizes_are_as_documented() {
        let huge = respond("huge.hostile.test", "/").expect("huge");
        assert!(huge.body.len() >= HUGE_PAGE_BYTES);
        let robots = respond("bigrobots.hostile.test", "/robots.txt").expect("robots");
        assert!(robots.body.len() >= BIG_ROBOTS_BYTES);
        let deep = respond("deep.hostile.test", "/").expect("deep");
        assert!(deep.body.len() > DEEP_NESTING * 11);
        let garbage = respond("garbage.hostile.test", "/garbage.html").expect("garbage");
        assert_eq!(garbage.body.len(), GARBAGE_BYTES as u64);
    }

    #[test]
    fn redirects_loop_and_chain() {
        let a = respond("loop.hostile.test", "/loop-a").expect("loop");
        assert_eq!(a.location.as_deref(), Some("/loop-b"));
        let b = respond("loop.hostile.test", "/loop-b").expect("loop");
        assert_eq!(b.location.as_deref(), Some("/loop-a"));
        let last = respond(
            "loop.hostile.test",
            &format!("/chain-{}", REDIRECT_CHAIN_HOPS),
        )
        .expect("end");
        assert_eq!(last.status, 200);
    }

    #[test]
    fn ssrf_and_robots_redirects() {
        let HostileBody::Bytes(body) = respond("ssrf.hostile.test", "/").expect("ssrf").body else {
            panic!("small page");
        };
        let body = String::from_utf8(body).expect("utf-8");
        for link in SSRF_LOOPBACK_LINKS {
            assert!(body.contains(link), "{body}");
        }
        for name in SSRF_PRIVATE_NAMES {
            assert!(body.contains(&format!("http://{name}/")), "{body}");
            assert_eq!(respond(name, "/admin").map(|r| r.status), Some(200));
        }
        let go = respond("ssrf.hostile.test", "/go-intranet").expect("redirect");
        assert_eq!(
            go.location.as_deref(),
            Some("http://intranet.ssrf.hostile.test/admin")
        );
        let away = respond("offsiterobots.hostile.test", "/robots.txt").expect("robots");
        assert_eq!(away.location.as_deref(), Some(OFFSITE_ROBOTS));
        let moved = respond("movedrobots.hostile.test", "/robots.txt").expect("robots");
        assert_eq!(moved.status, 302);
        let there = respond("www.movedrobots.hostile.test", "/robots.txt").expect("robots");
        assert_eq!(there.status, 200);
    }

    #[test]
    fn calendar_nests_forever() {
        let page = respond("calendar.hostile.test", "/calendar/2024/12/").expect("cal");
        let HostileBody::Bytes(body) = page.body else {
            panic!("calendar pages are small");
        };
        let body = String::from_utf8(body).expect("utf-8");
        assert!(body.contains("href=\"2025/01/\""), "{body}");
        let deeper = respond("calendar.hostile.test", "/calendar/2024/12/2025/01/").expect("cal");
        assert_eq!(deeper.status, 200);
    }

    /// Every listed answer of every hostile site, hashed (FNV-1a over
    /// length-prefixed parts, bodies described rather than expanded).
    #[test]
    fn golden_answers_never_change() {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        let mut feed = |bytes: &[u8]| {
            for b in (bytes.len() as u64).to_le_bytes().iter().chain(bytes) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01B3);
            }
        };
        let paths = [
            "/",
            "/robots.txt",
            "/nowhere",
            "/garbage.html",
            "/slow.html",
            "/loop-a",
            "/loop-b",
            "/chain-0",
            "/chain-9",
            "/chain-10",
            "/chain-11",
            "/chain-x",
            "/calendar/2024/01/",
            "/calendar/2024/12/",
            "/calendar/2024/12/2025/01/",
            "/calendar/x/",
            "/events?month=0",
            "/events?month=7",
            "/events?month=x",
            "/go-intranet",
            "/admin",
            "/page.html",
            "/open.html",
            "/private/secret.html",
            "/secret/members.html",
        ];
        let mut hosts = hostile_hosts();
        hosts.extend(SSRF_PRIVATE_NAMES.iter().map(|n| n.to_string()));
        hosts.extend([
            "www.movedrobots.hostile.test".into(),
            "site0.synth.test".into(),
        ]);
        for host in &hosts {
            for path in paths {
                let Some(r) = respond(&format!("{host}:80"), path) else {
                    feed(b"none");
                    continue;
                };
                feed(&r.status.to_le_bytes());
                feed(r.content_type.as_bytes());
                feed(format!("{:?}", r.location).as_bytes());
                match &r.body {
                    HostileBody::Bytes(b) => feed(b),
                    HostileBody::Repeat(parts) => {
                        for (chunk, n) in parts {
                            feed(chunk);
                            feed(&n.to_le_bytes());
                        }
                    }
                    HostileBody::Drip { bytes, every } => {
                        feed(bytes);
                        feed(&every.as_millis().to_le_bytes());
                    }
                }
            }
        }
        assert_eq!(h, 8095410495571749209, "the hostile sites' answers changed");
    }
}
