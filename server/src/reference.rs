//! The reference site: a deterministic synthetic site of [`REFERENCE_PAGES`]
//! HTML pages shaped like a typical target site (a tree of sections with
//! cross links, a few KB of text per page, outbound links), served on its own
//! HTTP port so every host can benchmark its crawler against the same thing
//! (`beebot benchmark`; the client also does it on first start and weekly).
//!
//! Links between its pages are relative or absolute-path, never absolute
//! URLs, so the site works under whatever host and port it is reached at.
//! Pure generation ([`respond`]) and a thin axum shell ([`serve`]).

use std::future::Future;
use std::io;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, Response, StatusCode};
use axum::Router;

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

/// splitmix64 step.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn below(state: &mut u64, n: usize) -> usize {
    (next(state) % n.max(1) as u64) as usize
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

fn render(index: usize) -> String {
    let mut rng = SEED ^ (index as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let title: Vec<&str> = (0..4)
        .map(|_| WORDS[below(&mut rng, WORDS.len())])
        .collect();
    let title = title.join(" ");
    let mut out = String::with_capacity(8 * 1024);
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
    let paragraphs = 3 + below(&mut rng, 4);
    for _ in 0..paragraphs {
        out.push_str("<p>");
        let words = 60 + below(&mut rng, 60);
        for w in 0..words {
            if w > 0 {
                out.push(' ');
            }
            match below(&mut rng, 40) {
                0 => {
                    let k = below(&mut rng, 200);
                    out.push_str(&format!(
                        "<a href=\"https://www.partner{k}.example.org/{}.html\">{}</a>",
                        WORDS[below(&mut rng, WORDS.len())],
                        WORDS[below(&mut rng, WORDS.len())]
                    ));
                }
                1 => {
                    let to = below(&mut rng, REFERENCE_PAGES);
                    out.push_str(&format!(
                        "<a href=\"{}\">{}</a>",
                        href(index, to),
                        WORDS[below(&mut rng, WORDS.len())]
                    ));
                }
                2 => out.push_str("<em>&amp;</em>"),
                _ => out.push_str(WORDS[below(&mut rng, WORDS.len())]),
            }
        }
        out.push_str("</p>\n");
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

/// Serve the reference site on `listener` (any `Host`) until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let app = Router::new().fallback(handle);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn handle(request: Request) -> Response<Body> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let mut r = Response::new(Body::from("GET only\n"));
        *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return r;
    }
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
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
}
