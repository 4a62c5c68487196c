//! The client's local status page: what the running client does, and the
//! employee's controls (pause, crawl window, bandwidth, slots, battery,
//! joining and leaving), on `127.0.0.1` only. The command line's `pause`,
//! `resume`, `config set` (its reload) and `leave` (its stop) reach the
//! running client through the same API, with the per-install secret as a
//! bearer token, so control works the same on every platform.
//!
//! [`bind`] takes the port (the `ui_port` setting; 0, the default, a free
//! one) and writes it to [`ADDR_FILE`], where `beebot open` finds it;
//! [`Ui::serve`] answers on its own thread and runtime, so the page stays
//! up while the client waits to join, crawls and leaves.
//!
//! Invariants: every request passes [`auth::decide`] (Host, Origin, secret
//! or session token) before its body is read; bodies are bounded by
//! [`MAX_BODY_BYTES`] as they are read; settings change only through
//! [`crate::settings::set`], the one validated path of `beebot config set`;
//! the page's HTML, CSS and script are embedded (nothing is fetched from
//! elsewhere; CSP `default-src 'self'`), and text from a server or a site
//! is set as text, never as HTML.

pub mod auth;
pub mod client;
pub mod view;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::control::{self, Gate};
use crate::home::Home;

use auth::{Asked, Caller, Refused, Secret, Sessions};

pub use crate::home::{ADDR_FILE, OPEN_FILE};
/// Largest request body: a setting, an invite code, a command.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// What the page lets its clients hold (loopback only: one address, so
/// beyond the cap a connection waits in the backlog, never closed): a
/// browser's tabs and the command line use a few connections. A header
/// comes whole within 5 s (the command line waits [`client::CALL_TIMEOUT`]
/// for its answer, behind at most one batch of the cap). A request may
/// wait quietly for its answer up to [`LEAVE_WAIT`], so a connection is
/// idle only past it.
pub const LIMITS: beebot_shared::httpcap::Limits = beebot_shared::httpcap::Limits {
    connections: 128,
    per_address: 128,
    header: Duration::from_secs(5),
    idle: Duration::from_secs(90),
};
/// Longest a page's "leave" waits for the client to have left.
pub const LEAVE_WAIT: Duration = Duration::from_secs(60);
/// The page's content security policy: its own files only.
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const LOGIN_JS: &str = include_str!("assets/login.js");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Where the running page listens, as [`ADDR_FILE`] says.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PageAddr {
    pub port: u16,
    pub pid: u32,
}

/// The page's listener, bound before the runner starts (a port in use is
/// said at once), and its address written for `beebot open`.
pub struct Bound {
    listener: std::net::TcpListener,
    pub port: u16,
}

/// Bind the page on `127.0.0.1:port` (0: a free port).
pub fn bind(data_dir: &Path, port: u16) -> Result<Bound> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
        format!("cannot serve the status page on 127.0.0.1:{port} (setting ui_port): is another program using it?")
    })?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    // The secret exists before the address says the page is up: whoever
    // finds the address (`beebot open`) finds the secret too.
    auth::Secret::load_or_create(data_dir)?;
    let addr = PageAddr {
        port,
        pid: std::process::id(),
    };
    crate::home::write_atomic(
        &data_dir.join(ADDR_FILE),
        serde_json::to_string(&addr)?.as_bytes(),
        true,
    )?;
    Ok(Bound { listener, port })
}

/// The address file a running page wrote, if there is one.
pub fn read_addr(data_dir: &Path) -> Option<PageAddr> {
    let text = std::fs::read_to_string(data_dir.join(ADDR_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Remove the address file (the runner exits).
pub fn forget_addr(data_dir: &Path) {
    if read_addr(data_dir).is_some_and(|a| a.pid == std::process::id()) {
        let _ = std::fs::remove_file(data_dir.join(ADDR_FILE));
    }
}

/// What the page asks of the runner beyond the gate: a join, a leave.
#[derive(Default)]
struct Asks {
    /// Someone joined (from the page): the runner starts its work loop.
    joined: tokio::sync::Notify,
    /// The page asked to leave; the runner answers here once it has.
    leave_reply: Mutex<Option<std::sync::mpsc::Sender<String>>>,
    leave_asked: AtomicBool,
    /// Why the deployment's invite code did not join, for the page.
    join_problem: Mutex<Option<String>>,
    /// One join at a time (the page's, the deployment's).
    join_lock: tokio::sync::Mutex<()>,
}

/// The running page's state.
pub struct Ui {
    home: Home,
    port: u16,
    secret: Secret,
    sessions: Mutex<Sessions>,
    gate: Arc<Gate>,
    /// The settings the runner was started with above the file (for origins).
    cli: Vec<(&'static str, String)>,
    asks: Asks,
}

impl std::fmt::Debug for Ui {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ui")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Ui {
    /// The page of `home`, answering through `bound`.
    pub fn new(
        home: Home,
        bound: &Bound,
        gate: Arc<Gate>,
        cli: Vec<(&'static str, String)>,
    ) -> Result<Arc<Ui>> {
        let secret = Secret::load_or_create(&home.data)?;
        Ok(Arc::new(Ui {
            home,
            port: bound.port,
            secret,
            sessions: Mutex::new(Sessions::default()),
            gate,
            cli,
            asks: Asks::default(),
        }))
    }

    /// Answer on a thread of its own until the process ends.
    pub fn serve(self: &Arc<Ui>, bound: Bound) -> Result<()> {
        let ui = self.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the status page's runtime")?;
        std::thread::Builder::new()
            .name("beebot-ui".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(bound.listener) {
                        Ok(l) => l,
                        Err(e) => return tracing::warn!("status page unavailable: {e}"),
                    };
                    beebot_shared::httpcap::serve(
                        listener,
                        LIMITS,
                        router(ui),
                        std::future::pending(),
                    )
                    .await;
                    tracing::warn!("status page stopped");
                })
            })
            .context("cannot start the status page's thread")?;
        Ok(())
    }

    /// Wait until this home has joined (from the page or `beebot join`),
    /// or `stop` resolves (false).
    pub async fn wait_joined(&self, stop: impl std::future::Future<Output = ()>) -> bool {
        tokio::pin!(stop);
        loop {
            if matches!(self.home.identity().enrolment(), Ok(Some(_))) {
                return true;
            }
            tokio::select! {
                _ = &mut stop => return false,
                _ = self.asks.joined.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Join with `code`, one join at a time; the runner hears of it.
    pub async fn join(&self, code: &str, name: Option<String>) -> Result<crate::home::Enrolment> {
        let _one = self.asks.join_lock.lock().await;
        let e = crate::worker::join(&self.home, code, name).await?;
        self.asks.joined.notify_one();
        Ok(e)
    }

    /// Say on the page why joining by itself failed.
    pub fn join_failed(&self, why: String) {
        *self
            .asks
            .join_problem
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    /// Whether the page asked the runner to leave the project.
    pub fn leave_asked(&self) -> bool {
        self.asks.leave_asked.load(Ordering::Relaxed)
    }

    /// Tell the page's "leave" what leaving did.
    pub fn left(&self, report: String) {
        if let Some(tx) = self
            .asks
            .leave_reply
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = tx.send(report);
        }
    }

    /// The page's address, for the log.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

fn router(ui: Arc<Ui>) -> Router {
    let file = |kind: &'static str, body: &'static str| get(move || asset(kind, body));
    Router::new()
        .route("/", file("text/html; charset=utf-8", INDEX_HTML))
        .route("/login", file("text/html; charset=utf-8", LOGIN_HTML))
        .route(
            "/login.js",
            file("text/javascript; charset=utf-8", LOGIN_JS),
        )
        .route("/app.js", file("text/javascript; charset=utf-8", APP_JS))
        .route("/app.css", file("text/css; charset=utf-8", APP_CSS))
        .route(
            "/favicon.svg",
            file("image/svg+xml", beebot_shared::FAVICON_SVG),
        )
        .route("/api/session", post(open_session))
        .route("/api/status", get(status))
        .route("/api/pause", post(pause))
        .route("/api/resume", post(resume))
        .route("/api/settings", post(set_setting))
        .route("/api/join", post(join))
        .route("/api/leave", post(leave))
        .route("/api/control", post(command))
        .route("/api/login-link", post(login_link))
        .layer(middleware::from_fn_with_state(ui.clone(), guard))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::map_response(security_headers))
        .with_state(ui)
}

/// Every answer's headers: nothing cached, framed or sniffed.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    for (k, v) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    r
}

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Paths anyone who passes the Host check may fetch: the page's own files
/// (they hold no data) and the exchange of a login code for a session.
fn public(path: &str) -> bool {
    matches!(
        path,
        "/" | "/login" | "/login.js" | "/app.js" | "/app.css" | "/favicon.svg" | "/api/session"
    )
}

/// Decide who asks before anything else runs; the caller rides along.
async fn guard(State(ui): State<Arc<Ui>>, mut req: Request, next: Next) -> Response {
    let h = req.headers();
    let asked = Asked {
        host: header_str(h, "host"),
        origin: header_str(h, "origin"),
        authorization: header_str(h, "authorization"),
        changes: !matches!(*req.method(), Method::GET | Method::HEAD),
    };
    let decided = {
        let sessions = ui.sessions.lock().unwrap_or_else(|p| p.into_inner());
        auth::decide(&asked, ui.port, &ui.secret, &sessions, Instant::now())
    };
    match decided {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(Refused::NotLoggedIn) if public(req.uri().path()) && asked.authorization.is_none() => {
            next.run(req).await
        }
        Err(Refused::Forbidden(why)) => refuse(StatusCode::FORBIDDEN, why),
        Err(Refused::NotLoggedIn) => refuse(
            StatusCode::UNAUTHORIZED,
            "not signed in: open BeeBot again (its menu entry, or `beebot open`)",
        ),
    }
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, Json(json!({ "error": why }))).into_response()
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[derive(Deserialize)]
struct SessionBody {
    code: String,
}

/// Spend a one-time login code (from the link's fragment, sent by the
/// login page's script) for a session token the page keeps in
/// `sessionStorage`. Only the page itself may ask: its `Origin` is required.
async fn open_session(State(ui): State<Arc<Ui>>, headers: HeaderMap, b: Bytes) -> Response {
    if !auth::origin_ok(header_str(&headers, "origin"), ui.port) {
        return refuse(StatusCode::FORBIDDEN, "a login must come from this page");
    }
    let s: SessionBody = match body(&b) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let session = ui
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .redeem(&s.code, Instant::now());
    match session {
        Some(s) => Json(json!({ "token": s.token })).into_response(),
        None => refuse(
            StatusCode::UNAUTHORIZED,
            "this link was used already or is too old: open BeeBot again (its menu entry, or `beebot open`)",
        ),
    }
}

/// A request refused with its status and words.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.0, &self.1)
    }
}

/// A JSON body of at most [`MAX_BODY_BYTES`], or a clear refusal.
fn body<T: serde::de::DeserializeOwned>(b: &Bytes) -> Result<T, Refusal> {
    if b.len() > MAX_BODY_BYTES {
        return Err(Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    serde_json::from_slice(b)
        .map_err(|e| Refusal(StatusCode::BAD_REQUEST, format!("bad request: {e}")))
}

fn said(message: String) -> Response {
    Json(json!({ "message": message })).into_response()
}

/// An answer line of the control commands: `ok …` or `error: …`.
fn answered(line: String) -> Response {
    match line.strip_prefix("error: ") {
        Some(e) => refuse(StatusCode::BAD_REQUEST, e),
        None => said(line.trim_start_matches("ok ").to_string()),
    }
}

async fn status(State(ui): State<Arc<Ui>>) -> Response {
    let ui2 = ui.clone();
    let join_problem = ui
        .asks
        .join_problem
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    match tokio::task::spawn_blocking(move || view::read(&ui2.home, &ui2.cli, join_problem)).await {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(e)) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
struct PauseBody {
    /// Pause this many seconds.
    #[serde(default)]
    seconds: Option<u64>,
    /// `"tomorrow"`: until the next local midnight.
    #[serde(default)]
    until: Option<String>,
}

/// Seconds from `now` to the next local midnight.
pub fn seconds_to_tomorrow(now: chrono::DateTime<chrono::Local>) -> u64 {
    let next = now
        .date_naive()
        .succ_opt()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|t| t.and_local_timezone(chrono::Local).earliest());
    next.map_or(24 * 3600, |t| (t - now).num_seconds().max(1) as u64)
}

async fn pause(State(ui): State<Arc<Ui>>, b: Bytes) -> Response {
    let p: PauseBody = match body(&b) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let cmd = match (p.seconds, p.until.as_deref()) {
        (Some(s), None) => format!("pause {s}"),
        (None, Some("tomorrow")) => format!("pause {}", seconds_to_tomorrow(chrono::Local::now())),
        (None, None) => "pause".to_string(),
        _ => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "give `seconds`, or `until: \"tomorrow\"`, or neither",
            )
        }
    };
    answered(control::apply_command(&ui.gate, &cmd, SystemTime::now()))
}

async fn resume(State(ui): State<Arc<Ui>>) -> Response {
    answered(control::apply_command(
        &ui.gate,
        "resume",
        SystemTime::now(),
    ))
}

#[derive(Deserialize)]
struct SettingBody {
    key: String,
    value: String,
}

/// Change one setting as `beebot config set` does: validated, written to
/// the file, then read again by the running client.
async fn set_setting(State(ui): State<Arc<Ui>>, b: Bytes) -> Response {
    let s: SettingBody = match body(&b) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let ui2 = ui.clone();
    let done = tokio::task::spawn_blocking(move || -> Result<String> {
        crate::settings::check_key(&s.key)?;
        crate::settings::set(&ui2.home, &s.key, &s.value)?;
        let answer =
            control::apply_command(&ui2.gate, &format!("reload {}", s.key), SystemTime::now());
        Ok(answer.trim_start_matches("ok ").to_string())
    })
    .await;
    match done {
        Ok(Ok(m)) => said(m),
        Ok(Err(e)) => refuse(StatusCode::BAD_REQUEST, &format!("{e:#}")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

#[derive(Deserialize)]
struct JoinBody {
    code: String,
    #[serde(default)]
    name: Option<String>,
}

/// Join with an invite code pasted into the page.
async fn join(State(ui): State<Arc<Ui>>, b: Bytes) -> Response {
    let j: JoinBody = match body(&b) {
        Ok(j) => j,
        Err(r) => return r.into_response(),
    };
    let name = j
        .name
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    match ui.join(j.code.trim(), name).await {
        Ok(e) => {
            ui.asks
                .join_problem
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            said(format!(
                "joined {} as host {} ({})",
                e.server_addr, e.host_id, e.name
            ))
        }
        Err(e) => refuse(StatusCode::BAD_REQUEST, &format!("{e:#}")),
    }
}

#[derive(Deserialize)]
struct LeaveBody {
    /// Must be `true`: the page asked the person first.
    confirm: bool,
}

/// Leave the project: the runner stops, tells the server, removes its
/// files, and answers with what it did.
async fn leave(State(ui): State<Arc<Ui>>, b: Bytes) -> Response {
    let l: LeaveBody = match body(&b) {
        Ok(l) => l,
        Err(r) => return r.into_response(),
    };
    if !l.confirm {
        return refuse(StatusCode::BAD_REQUEST, "leaving needs `confirm: true`");
    }
    if !matches!(ui.home.identity().enrolment(), Ok(Some(_))) {
        return refuse(StatusCode::CONFLICT, "this client has not joined a project");
    }
    if ui.asks.leave_asked.swap(true, Ordering::Relaxed) {
        return refuse(StatusCode::CONFLICT, "the client is leaving already");
    }
    let (tx, rx) = std::sync::mpsc::channel();
    *ui.asks
        .leave_reply
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some(tx);
    ui.gate.request_stop();
    match tokio::task::spawn_blocking(move || rx.recv_timeout(LEAVE_WAIT)).await {
        Ok(Ok(report)) => said(report),
        _ => refuse(
            StatusCode::GATEWAY_TIMEOUT,
            "the client did not finish leaving in time: run `beebot leave`",
        ),
    }
}

#[derive(Deserialize)]
struct CommandBody {
    command: String,
}

/// One control command of the command line (`pause 60`, `resume`,
/// `reload KEY`, `stop`), answered with its line.
async fn command(
    State(ui): State<Arc<Ui>>,
    caller: Option<axum::Extension<Caller>>,
    b: Bytes,
) -> Response {
    if !matches!(caller.map(|c| c.0), Some(Caller::Owner)) {
        return refuse(StatusCode::FORBIDDEN, "commands need the client's secret");
    }
    let c: CommandBody = match body(&b) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    let g = ui.gate.clone();
    let line = c.command.clone();
    let answer =
        tokio::task::spawn_blocking(move || control::apply_command(&g, &line, SystemTime::now()))
            .await
            .unwrap_or_else(|e| format!("error: {e}"));
    tracing::info!("control: {} → {answer}", c.command.trim());
    Json(json!({ "answer": answer })).into_response()
}

/// A one-time login link for a browser (`beebot open`).
async fn login_link(
    State(ui): State<Arc<Ui>>,
    caller: Option<axum::Extension<Caller>>,
) -> Response {
    if !matches!(caller.map(|c| c.0), Some(Caller::Owner)) {
        return refuse(
            StatusCode::FORBIDDEN,
            "login links need the client's secret",
        );
    }
    let code = ui
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .new_code(Instant::now());
    Json(json!({ "url": login_url(ui.port, &code) })).into_response()
}

/// The one-time login link of a page on `port`: the code rides in the
/// fragment, which browsers send neither to a server nor in a `Referer`.
pub fn login_url(port: u16, code: &str) -> String {
    format!("http://127.0.0.1:{port}/login#code={code}")
}

/// The page's files, for tests and checks.
pub fn assets() -> [(&'static str, &'static str); 5] {
    [
        ("index.html", INDEX_HTML),
        ("app.js", APP_JS),
        ("app.css", APP_CSS),
        ("login.html", LOGIN_HTML),
        ("login.js", LOGIN_JS),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tomorrow_is_the_next_local_midnight() {
        use chrono::TimeZone;
        let t = chrono::Local
            .with_ymd_and_hms(2026, 12, 1, 22, 30, 0)
            .earliest()
            .unwrap();
        let s = seconds_to_tomorrow(t);
        // 1h30m, give or take a DST change (none in December).
        assert_eq!(s, 90 * 60);
    }

    #[test]
    fn the_page_has_no_inline_code_and_fetches_nothing_from_elsewhere() {
        for (name, text) in assets() {
            assert!(
                !text.contains("http://") && !text.contains("https://"),
                "{name} names another site"
            );
            assert!(!text.contains("innerHTML"), "{name}: text is set as text");
        }
        for html in [INDEX_HTML, LOGIN_HTML] {
            assert!(
                !html.contains("<script>") && !html.contains("onclick="),
                "inline script"
            );
            assert!(!html.contains("style="), "inline style");
        }
        // The login code never goes to a server in a URL: the fragment holds it.
        assert!(login_url(4711, "c0de").ends_with("/login#code=c0de"));
    }

    /// `beebot open` reads the address, then the secret: once the address
    /// is there, so is the secret.
    #[test]
    fn the_secret_is_there_before_the_address() {
        let d = tempfile::tempdir().unwrap();
        let bound = bind(d.path(), 0).unwrap();
        assert_eq!(read_addr(d.path()).map(|a| a.port), Some(bound.port));
        assert!(auth::Secret::read(d.path()).is_ok());
    }
}
