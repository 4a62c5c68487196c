//! The admin's web dashboard: an overview (components alive, work by state,
//! speeds, hosts active, rounds), a page per round (progress and ETA, every
//! site sortable and filterable, failures by reason, pages/s over time) and
//! the hosts (with a revoke button). The pages are files embedded in the
//! binary (`assets/`); they fill themselves by polling the JSON endpoints
//! under `/api/dashboard/` every [`data::POLL_INTERVAL_MS`].
//!
//! Invariants: every response of the pages carries a Content-Security-Policy
//! that allows nothing from outside (`default-src 'self'`, no inline script
//! or style), so a host name like `<img src=x onerror=...>` is text (the
//! script sets every value with `textContent`). The pages hold no data:
//! their script sends the session token the login page got (kept in the
//! origin's `localStorage`) with every call, and goes to the login page
//! when it has none or the server refuses it. It never holds the grid lock
//! while it probes the reference site or renders.
//!
//! `admin.rs` keeps authentication (login, sessions, `Origin` checks) and
//! wires these routes in; [`live`] holds what the store does not
//! (liveness, series).

pub mod data;
pub mod live;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::api::ApiError;
use crate::grid::GridError;
use crate::model::HostRecord;
use crate::{now_ms, Shared};
use data::{RoundJobRefs, MAX_ROUNDS_LISTED, POLL_INTERVAL_MS};
use live::{Component, Point};

/// What a dashboard page may load: only its own files; nothing inline,
/// nothing from elsewhere; no framing; forms post only here.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/// How long the overview waits for the reference site's answer.
pub const REFERENCE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of the reference site's answer read by the probe (its status line).
const PROBE_READ_BYTES: usize = 64;

const PAGE: &str = include_str!("assets/page.html");
const OVERVIEW: &str = include_str!("assets/overview.html");
const ROUND: &str = include_str!("assets/round.html");
const HOSTS: &str = include_str!("assets/hosts.html");
const LOGIN: &str = include_str!("assets/login.html");
const CSS: &str = include_str!("assets/dashboard.css");
const JS: &str = include_str!("assets/dashboard.js");
const LOGIN_JS: &str = include_str!("assets/login.js");

type JsonResult<T> = Result<Json<T>, (StatusCode, Json<ApiError>)>;

/// The pages and their files, for `admin.rs` to serve beside the login.
pub(crate) fn pages<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(overview_page))
        .route("/rounds/{id}", get(round_page))
        .route("/hosts", get(hosts_page))
        .route("/assets/dashboard.css", get(css))
        .route("/assets/dashboard.js", get(js))
        .route("/assets/login.js", get(login_js))
        .route("/favicon.svg", get(favicon))
}

/// The JSON the pages poll, for `admin.rs` to put behind its authentication.
pub(crate) fn api() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/dashboard/overview", get(overview_json))
        .route("/api/dashboard/rounds/{id}", get(round_json))
        .route("/api/dashboard/hosts", get(hosts_json))
}

/// Added to every response of the pages: the CSP and its companions.
pub(crate) async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    r
}

/// HTML-escape a text for an element or a quoted attribute.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The login page: its script posts the token and keeps the session.
pub async fn login_page() -> Response {
    Html(LOGIN).into_response()
}

/// Which page, for [`render`].
#[derive(Clone, Copy)]
enum Page {
    Overview,
    Round(u64),
    Hosts,
}

/// A page in its frame (no data: its script fetches it).
fn render(page: Page) -> String {
    let (name, title, body, round) = match page {
        Page::Overview => ("overview", "Overview".to_string(), OVERVIEW, String::new()),
        Page::Round(id) => ("round", format!("Round {id}"), ROUND, id.to_string()),
        Page::Hosts => ("hosts", "Hosts".to_string(), HOSTS, String::new()),
    };
    PAGE.replace("{{BODY}}", body)
        .replace("{{TITLE}}", &esc(&title))
        .replace("{{PAGE}}", name)
        .replace("{{ROUND}}", &round)
        .replace("{{POLL_MS}}", &POLL_INTERVAL_MS.to_string())
}

async fn overview_page() -> Response {
    Html(render(Page::Overview)).into_response()
}

async fn round_page(Path(id): Path<u64>) -> Response {
    Html(render(Page::Round(id))).into_response()
}

async fn hosts_page() -> Response {
    Html(render(Page::Hosts)).into_response()
}

async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
}

async fn favicon() -> Response {
    (
        [(header::CONTENT_TYPE, "image/svg+xml")],
        beebot_shared::FAVICON_SVG,
    )
        .into_response()
}

async fn login_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        LOGIN_JS,
    )
        .into_response()
}

async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        JS,
    )
        .into_response()
}

async fn overview_json(State(s): State<Arc<Shared>>) -> JsonResult<data::Overview> {
    let reference = match s.live.reference_addr {
        Some(addr) => Some(probe_reference(addr).await),
        None => None,
    };
    if reference == Some(Ok(())) {
        s.live.beat(Component::Reference, now_ms());
    }
    let failure = s.store_failure();
    let shared = s.clone();
    let overview = s
        .with_grid(move |g| {
            let mut ids: Vec<u64> = g.rounds().iter().map(|r| r.id).collect();
            ids.sort_unstable_by(|a, b| b.cmp(a));
            ids.truncate(MAX_ROUNDS_LISTED);
            let rounds: Vec<RoundJobRefs> =
                ids.into_iter().filter_map(|id| g.round_refs(id)).collect();
            let now = now_ms();
            let status = g.status();
            let snapshot = g.metrics_snapshot_of(&status, now);
            data::overview(
                &rounds,
                (&status, &snapshot),
                &shared.live,
                failure,
                reference,
                now,
            )
        })
        .await;
    Ok(Json(overview))
}

async fn round_json(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
) -> JsonResult<data::RoundPage> {
    let series = s.live.series(id);
    let page = s
        .with_grid(move |g| {
            let (round, jobs) = g.round_refs(id).ok_or(GridError::UnknownRound(id))?;
            let hosts: Vec<&HostRecord> = g.host_records().collect();
            Ok(data::round_page((round, &jobs), &hosts, &series, now_ms()))
        })
        .await
        .map(|mut page| {
            page.damaged = s.damage.of_round(id);
            page
        });
    page.map(Json).map_err(|e: GridError| {
        (
            StatusCode::NOT_FOUND,
            Json(ApiError {
                error: e.to_string(),
            }),
        )
    })
}

async fn hosts_json(State(s): State<Arc<Shared>>) -> JsonResult<data::HostsPage> {
    let lines = s.with_grid(|g| g.host_lines()).await;
    Ok(Json(data::hosts_page(&lines, &s.live, now_ms())))
}

/// Ask the reference site for its `robots.txt`: alive if it answers with
/// an HTTP status line within [`REFERENCE_PROBE_TIMEOUT`].
async fn probe_reference(addr: std::net::SocketAddr) -> Result<(), String> {
    let ask = async {
        let mut conn = tokio::net::TcpStream::connect(addr).await?;
        let head = format!("GET /robots.txt HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        conn.write_all(head.as_bytes()).await?;
        let mut buf = [0u8; PROBE_READ_BYTES];
        let mut got = 0;
        while got < 12 {
            match conn.read(&mut buf[got..]).await? {
                0 => break,
                n => got += n,
            }
        }
        Ok::<_, std::io::Error>(buf[..got].to_vec())
    };
    match tokio::time::timeout(REFERENCE_PROBE_TIMEOUT, ask).await {
        Err(_) => Err(format!("no answer within {REFERENCE_PROBE_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("cannot reach {addr}: {e}")),
        Ok(Ok(b)) if b.starts_with(b"HTTP/1.1 200") || b.starts_with(b"HTTP/1.0 200") => Ok(()),
        Ok(Ok(b)) => Err(format!(
            "answered `{}`",
            String::from_utf8_lossy(&b).lines().next().unwrap_or("")
        )),
    }
}

/// The ticker's turn: the ticker is alive, and each running round's pages
/// and bytes so far go into its series (read under the lock, no copies).
pub async fn sample(shared: &Arc<Shared>) {
    let samples = shared
        .with_grid(|g| {
            g.running_rounds()
                .map(|(id, jobs)| (id, data::round_totals(&jobs)))
                .collect::<Vec<_>>()
        })
        .await;
    let now = now_ms();
    shared
        .live
        .sample(samples.into_iter().map(|(id, (pages, bytes))| {
            (
                id,
                Point {
                    ms: now,
                    pages,
                    bytes,
                },
            )
        }));
    shared.live.beat(Component::Ticker, now);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_carry_no_inline_code_and_their_placeholders_are_filled() {
        for page in [Page::Overview, Page::Round(7), Page::Hosts] {
            let html = render(page);
            assert!(!html.contains("{{"), "unfilled placeholder");
            assert!(
                !html.contains("<script>") && !html.contains("style="),
                "inline"
            );
            assert!(!html.contains("http-equiv"), "no meta refresh");
            assert!(!html.contains("http://") && !html.contains("https://"));
        }
        assert!(render(Page::Round(7)).contains("data-round=\"7\""));
        assert!(!LOGIN.contains("<script>") && !LOGIN.contains("style="));
        for asset in [CSS, JS, LOGIN_JS] {
            let asset = asset.replace("http://www.w3.org/2000/svg", "");
            assert!(!asset.contains("http://") && !asset.contains("https://"));
        }
        for js in [JS, LOGIN_JS] {
            assert!(js.contains("textContent") && !js.contains("innerHTML"));
            assert!(!js.contains("document.cookie"), "no cookie");
        }
    }

    #[test]
    fn the_login_note_is_escaped() {
        assert_eq!(
            esc("<img src=x onerror=\"a('1')\">&"),
            "&lt;img src=x onerror=&quot;a(&#39;1&#39;)&quot;&gt;&amp;"
        );
    }
}
