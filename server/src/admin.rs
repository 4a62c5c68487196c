//! The admin HTTP API (loopback only, bearer token) and the dashboard's
//! authentication (its pages are in [`crate::dashboard`]). The CLI's
//! commands other than init/serve/demo are calls to this API.
//!
//! Every request must name the admin address in its `Host` header (a page
//! on another site that rebinds its name to 127.0.0.1 is refused), and is
//! authenticated before its body is read. The CLI sends the token as a
//! bearer header; a browser posts it once from the login page (in a body,
//! never in a URL) and gets a session token that the page keeps in its
//! origin's `localStorage` and sends as `Authorization: Session …`. Never
//! a cookie: browsers send a cookie of 127.0.0.1 to every port of it (any
//! other program's page on loopback, or behind the admin's `ssh -L`), and
//! with every cross-site request. A session expires after [`SESSION_TTL`].
//! A request that changes something in a browser session (logout
//! included) must carry the dashboard's own `Origin`, or it is refused with
//! 403 and changes nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;

use beebot_shared::limits::MAX_SITES;
use beebot_shared::scope::{parse_site, Exclusion};

use crate::api::*;
use crate::grid::GridError;
use crate::hostcheck::{allowed_hosts, refuse_other_host};
use crate::validate::ValidateMode;
use crate::{now_ms, Shared};

/// What the admin API and the dashboard let their clients hold: the CLI
/// and a browser's tabs use a few connections; an export streams (bytes
/// move, so it is never idle). Half-sent headers are closed after 10 s.
/// Loopback only, so every client is one address: beyond the cap a new
/// connection waits in the backlog for a slot rather than being closed.
pub const LIMITS: beebot_shared::httpcap::Limits = beebot_shared::httpcap::Limits {
    connections: 64,
    per_address: 64,
    header: Duration::from_secs(10),
    idle: Duration::from_secs(60),
};

/// Largest admin request body (a big `sites import`).
const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Largest login form (a token of a few dozen characters, with room).
const MAX_LOGIN_BODY_BYTES: usize = 4 * 1024;
/// A dashboard session lasts this long after its login: a working day.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at once; the oldest goes first (logins need the token, so
/// only its holders make sessions, but nothing kept in memory is unbounded).
const MAX_SESSIONS: usize = 64;
/// The `Authorization` scheme of a browser's session token.
pub const SESSION_SCHEME: &str = "Session ";
/// Random bytes of a session token.
const SESSION_ID_BYTES: usize = 32;

type ApiResult<T> = Result<T, (StatusCode, Json<ApiError>)>;

fn fail(status: StatusCode, msg: impl Into<String>) -> (StatusCode, Json<ApiError>) {
    (status, Json(ApiError { error: msg.into() }))
}

fn grid_fail(e: GridError) -> (StatusCode, Json<ApiError>) {
    let status = match e {
        GridError::UnknownRound(_)
        | GridError::UnknownHost(_)
        | GridError::UnknownInvite(_)
        | GridError::UnknownHostName(_) => StatusCode::NOT_FOUND,
        GridError::Invalid(_)
        | GridError::BadInvite
        | GridError::KeyEnrolled(_)
        | GridError::NameTaken { .. }
        | GridError::AmbiguousHostName { .. }
        | GridError::SameSite { .. } => StatusCode::BAD_REQUEST,
        GridError::Revoked(_) => StatusCode::CONFLICT,
        GridError::Io(_) | GridError::Sign(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    fail(status, e.to_string())
}

/// Constant-time comparison of two tokens.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Dashboard sessions: random tokens with their expiry. Time is an
/// argument.
#[derive(Default)]
pub struct Sessions(Mutex<HashMap<String, Instant>>);

impl Sessions {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session valid until `now + SESSION_TTL`; returns its token.
    pub fn open(&self, now: Instant) -> String {
        let id = hex::encode(rand::random::<[u8; SESSION_ID_BYTES]>());
        let mut m = self.map();
        m.retain(|_, until| *until > now);
        while m.len() >= MAX_SESSIONS {
            let oldest = m
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => m.remove(&k),
                None => break,
            };
        }
        m.insert(id.clone(), now + SESSION_TTL);
        id
    }

    /// `id` names a session still open at `now`.
    pub fn valid(&self, id: &str, now: Instant) -> bool {
        let mut m = self.map();
        match m.get(id) {
            Some(until) if *until > now => true,
            Some(_) => {
                m.remove(id);
                false
            }
            None => false,
        }
    }

    pub fn close(&self, id: &str) {
        self.map().remove(id);
    }
}

/// What the admin routes share: the server, its sessions, and the `Host`
/// values a request may carry.
pub(crate) struct Admin {
    shared: Arc<Shared>,
    sessions: Sessions,
    hosts: Vec<String>,
}

/// The session token the request carries (`Authorization: Session …`).
fn session_token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix(SESSION_SCHEME))
}

/// The bearer token the request carries, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// The request carries the admin token as a bearer header, or an open
/// session's token. A cookie opens nothing.
pub(crate) fn authenticated(admin: &Admin, headers: &HeaderMap) -> bool {
    if let Some(given) = bearer(headers) {
        return same_token(given, &admin.shared.admin_token);
    }
    session_token(headers).is_some_and(|id| admin.sessions.valid(id, Instant::now()))
}

/// The request's `Origin` is the dashboard's own (one of the names of the
/// admin address, over `http`).
fn own_origin(admin: &Admin, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .is_some_and(|host| admin.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
}

/// A call that may change something comes from the CLI (bearer token: no
/// browser sends it) or from the dashboard's own page (its `Origin`).
fn change_allowed(admin: &Admin, request: &Request) -> bool {
    reads_only(request)
        || bearer(request.headers()).is_some()
        || own_origin(admin, request.headers())
}

/// The refusal of a change from a browser page that is not the dashboard's.
fn foreign_origin() -> (StatusCode, Json<ApiError>) {
    fail(
        StatusCode::FORBIDDEN,
        "a browser's login or change must come from the dashboard's own page \
         (its Origin): refused, nothing was changed",
    )
}

/// A read that goes on after a storage failure, to show it: the
/// dashboard's overview and `/metrics`. Every other read is refused then,
/// as every change is: the grid's memory may be ahead of its disk (a
/// round ended by a call whose writes failed), and `round wait` must not
/// report a round done that a restart finds running.
fn shows_a_failure(path: &str) -> bool {
    matches!(path, "/metrics" | "/api/dashboard/overview")
}

/// A request that changes nothing (`GET`, `HEAD`, `OPTIONS`).
fn reads_only(request: &Request) -> bool {
    matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    )
}

/// Outermost: a request whose `Host` is not the admin address is refused
/// (DNS rebinding: a page elsewhere whose name now resolves to 127.0.0.1).
async fn check_host(State(admin): State<Arc<Admin>>, request: Request, next: Next) -> Response {
    if let Some(refused) = refuse_other_host(&admin.hosts, &request, "the admin API") {
        return refused;
    }
    next.run(request).await
}

/// Around every API route: before its body is read, the token or a
/// session, and a store that still acknowledges; after it, the store
/// again (after a storage failure only the reads that show it go on:
/// [`shows_a_failure`]).
async fn require_auth(State(admin): State<Arc<Admin>>, request: Request, next: Next) -> Response {
    if !authenticated(&admin, request.headers()) {
        return fail(StatusCode::UNAUTHORIZED, "missing or wrong admin token").into_response();
    }
    if !change_allowed(&admin, &request) {
        return foreign_origin().into_response();
    }
    let must_be_durable = !reads_only(&request) || !shows_a_failure(request.uri().path());
    if must_be_durable {
        if let Err(e) = durable(&admin.shared) {
            return e.into_response();
        }
    }
    if let Some(refused) = too_long(request.headers(), MAX_ADMIN_BODY_BYTES) {
        return refused;
    }
    let response = next.run(request).await;
    // A store that failed while the call ran: its answer may rest on
    // memory the disk does not hold.
    if must_be_durable {
        if let Err(e) = durable(&admin.shared) {
            return e.into_response();
        }
    }
    response
}

/// Ahead of the dashboard's pages: a body announced longer than a login
/// form is refused before any of it is read.
async fn small_body(request: Request, next: Next) -> Response {
    if let Some(refused) = too_long(request.headers(), MAX_LOGIN_BODY_BYTES) {
        return refused;
    }
    next.run(request).await
}

/// A 413 for a request whose `Content-Length` is over `limit` (a body
/// without one is cut at the limit as it is read).
fn too_long(headers: &HeaderMap, limit: usize) -> Option<Response> {
    let len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())?;
    (len > limit as u64).then(|| {
        fail(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a request body may be at most {limit} bytes"),
        )
        .into_response()
    })
}

/// After a storage failure the server stops acknowledging anything (fail-stop):
/// every admin call, including the one whose change could not be made durable,
/// is answered with the failure until the server is restarted.
fn durable(shared: &Shared) -> ApiResult<()> {
    match shared.store_failure() {
        None => Ok(()),
        Some(e) => Err(fail(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("storage failed ({e}); nothing more is acknowledged: fix the disk and restart the server"),
        )),
    }
}

/// The API's and the dashboard's routes, for the admin API bound at `addr`.
pub fn router(shared: Arc<Shared>, addr: SocketAddr) -> Router {
    let admin = Arc::new(Admin {
        shared: shared.clone(),
        sessions: Sessions::default(),
        hosts: allowed_hosts(addr),
    });
    let api = Router::new()
        .route("/api/status", get(status))
        .route("/api/invites", get(invites_list).post(invite))
        .route("/api/invites/{id}/revoke", post(invite_revoke))
        .route("/api/sites", get(sites_list).post(sites_add))
        .route("/api/sites/{host}", delete(sites_remove))
        .route("/api/exclusions", get(exclusions_list).post(exclude))
        .route("/api/exclusions/{host}", delete(include))
        .route("/api/rounds", get(rounds_list).post(round_start))
        .route("/api/rounds/{id}", get(round_show))
        .route("/api/rounds/{id}/cancel", post(round_cancel))
        .route("/api/rounds/{id}/rescan", post(round_rescan))
        .route("/api/rounds/{id}/export", get(round_export))
        .route("/api/rounds/{id}/damage", get(round_damage))
        .route("/api/check", post(check_links))
        .route("/api/hosts", get(hosts_list))
        .route("/api/hosts/{id}/revoke", post(host_revoke))
        .merge(crate::dashboard::api())
        .route("/metrics", get(crate::metrics::get_metrics))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_ADMIN_BODY_BYTES))
        .route_layer(middleware::from_fn_with_state(admin.clone(), require_auth))
        .with_state(shared);
    let pages = Router::new()
        .route("/login", get(crate::dashboard::login_page).post(login))
        .route("/logout", post(logout))
        .merge(crate::dashboard::pages())
        .layer(axum::extract::DefaultBodyLimit::max(MAX_LOGIN_BODY_BYTES))
        .route_layer(middleware::from_fn(small_body))
        .layer(middleware::map_response(crate::dashboard::security_headers))
        .with_state(admin.clone());
    api.merge(pages)
        .layer(middleware::from_fn_with_state(admin, check_host))
}

/// The grid's counters; after a storage failure, the failure instead (so
/// `beebot-server status` says it).
async fn status(State(s): State<Arc<Shared>>) -> ApiResult<Json<StatusResponse>> {
    durable(&s)?;
    let (grid, key) = s.with_grid(|g| (g.status(), g.project_public_key())).await;
    Ok(Json(StatusResponse {
        public_addr: s.public_addr.clone(),
        project_key: hex::encode(key),
        cert_sha256: hex::encode(s.cert_fingerprint),
        grid,
    }))
}

async fn invite(
    State(s): State<Arc<Shared>>,
    Json(req): Json<InviteRequest>,
) -> ApiResult<Json<InviteResponse>> {
    crate::config::INVITE_EXPIRY
        .check_value("--expires", Duration::from_secs(req.expires_s), req.force)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let (code, expires_ms) = s
        .make_invite(req.uses, req.expires_s)
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    Ok(Json(InviteResponse { code, expires_ms }))
}

/// Every invite: its id, uses left, expiry and creation (never the token,
/// which the server does not keep).
async fn invites_list(State(s): State<Arc<Shared>>) -> ApiResult<Json<InvitesList>> {
    let all = s.with_grid(|g| g.invites()).await;
    Ok(Json(
        all.into_iter()
            .map(|(id, i)| InviteListed {
                id,
                uses_left: i.uses_left,
                expires_ms: i.expires_ms,
                created_ms: i.created_ms,
            })
            .collect(),
    ))
}

/// Revoke an invite by its id (or a prefix naming one): nobody joins with it any more.
async fn invite_revoke(
    State(s): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> ApiResult<Json<InviteRevoked>> {
    let id = s
        .with_grid(move |g| g.revoke_invite(&id))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(invite = %id, "invite revoked");
    Ok(Json(InviteRevoked { id }))
}

async fn sites_list(State(s): State<Arc<Shared>>) -> ApiResult<Json<SitesList>> {
    Ok(Json(s.with_grid(|g| g.sites()).await))
}

async fn sites_add(
    State(s): State<Arc<Shared>>,
    Json(req): Json<SitesAdd>,
) -> ApiResult<Json<SitesAdded>> {
    if req.sites.len() > MAX_SITES {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!("at most {MAX_SITES} sites at once"),
        ));
    }
    // Validate everything first: a bad entry imports nothing.
    let mut hosts = Vec::with_capacity(req.sites.len());
    for (i, raw) in req.sites.iter().enumerate() {
        match parse_site(raw) {
            Ok(host) => hosts.push(host),
            Err(e) => {
                return Err(fail(
                    StatusCode::BAD_REQUEST,
                    format!("entry {} `{raw}`: {e}", i + 1),
                ))
            }
        }
    }
    let now = now_ms();
    // An excluded host is refused alone: the other entries are added.
    let (added, refused, total) = s
        .with_grid(move |g| {
            g.add_sites_except_excluded(&hosts, now)
                .map(|(a, r)| (a, r, g.sites().len()))
        })
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    let excluded = refused
        .into_iter()
        .map(|(i, site, e)| SiteRefused {
            entry: i + 1,
            site,
            excluded_by: e.exclusion.display(),
            reason: e.reason.clone(),
            excluded_at: iso_utc(e.excluded_ms),
        })
        .collect();
    Ok(Json(SitesAdded {
        added,
        total,
        excluded,
    }))
}

async fn exclusions_list(State(s): State<Arc<Shared>>) -> ApiResult<Json<Vec<ExclusionListed>>> {
    let all = s.with_grid(|g| g.exclusions()).await;
    Ok(Json(all.iter().map(ExclusionListed::of).collect()))
}

/// Exclude a host from crawling for good (see `Grid::exclude`).
async fn exclude(
    State(s): State<Arc<Shared>>,
    Json(req): Json<ExcludeRequest>,
) -> ApiResult<Json<Excluded>> {
    let exclusion = Exclusion::parse(&req.host, req.subdomains)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let now = now_ms();
    let out = s
        .with_grid(move |g| g.exclude(exclusion, &req.reason, now))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(
        host = %out.record.exclusion.display(),
        reason = %out.record.reason,
        "host excluded from crawling"
    );
    Ok(Json(Excluded {
        exclusion: ExclusionListed::of(&out.record),
        replaced: out.replaced.as_ref().map(ExclusionListed::of),
        sites_removed: out.sites_removed,
        jobs_excluded: out.jobs_excluded,
        copies_restarted: out.copies_restarted,
    }))
}

/// Lift an exclusion; answers the one lifted.
async fn include(
    State(s): State<Arc<Shared>>,
    Path(host): Path<String>,
) -> ApiResult<Json<ExclusionListed>> {
    let exclusion =
        Exclusion::parse(&host, false).map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let lifted = s
        .with_grid(move |g| g.include(&exclusion))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(host = %lifted.exclusion.display(), "exclusion lifted");
    Ok(Json(ExclusionListed::of(&lifted)))
}

async fn sites_remove(
    State(s): State<Arc<Shared>>,
    Path(host): Path<String>,
) -> ApiResult<Json<SiteRemoved>> {
    let host = parse_site(&host).map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let h2 = host.clone();
    let removed = s
        .with_grid(move |g| g.remove_site(&h2))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    match removed {
        Some(site) => Ok(Json(SiteRemoved { site })),
        None => Err(fail(
            StatusCode::NOT_FOUND,
            format!("no site {host} in the target set (see `sites list`)"),
        )),
    }
}

async fn rounds_list(State(s): State<Arc<Shared>>) -> ApiResult<Json<Vec<RoundSummary>>> {
    let list = s
        .with_grid(|g| {
            g.rounds()
                .into_iter()
                .filter_map(|r| g.round(r.id).ok())
                .map(|(round, jobs)| RoundSummary {
                    counts: JobCounts::of_round(&round, &jobs),
                    round,
                })
                .collect()
        })
        .await;
    Ok(Json(list))
}

async fn round_start(
    State(s): State<Arc<Shared>>,
    Json(req): Json<RoundStart>,
) -> ApiResult<Json<RoundStarted>> {
    // Site owners must be able to reach whoever runs the crawler.
    if let Some(problem) = s.config.contact_problem() {
        return Err(fail(
            StatusCode::CONFLICT,
            format!(
                "round refused: {problem}. Set `contact = \"https://...\"` (or an e-mail \
                 address) in {} and restart `beebot-server serve`",
                s.data.config().display()
            ),
        ));
    }
    let p = s.config.round.clone().with(&req.params);
    // Out of range, or deadlines crossed: refused, never clamped.
    let every = req.every();
    p.validate(every, req.force)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let now = now_ms();
    let every_s = req.every_s.as_ref().map(|d| d.as_secs());
    let every_ms = every_s.map(|e| e.saturating_mul(1000));
    let validate = p.validate;
    let (id, hosts) = s
        .with_grid(move |g| {
            let id = g.start_round_every(p, every_ms, now)?;
            let hosts = g.hosts().iter().filter(|h| !h.revoked).count();
            Ok::<_, GridError>((id, hosts))
        })
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    s.refresh_about().await;
    tracing::info!(round = id, every_s, "round started");
    // A result is checked by another host's scan.
    let warning = (validate != ValidateMode::Off && hosts < 2).then(|| {
        format!(
            "validation is {} but {hosts} host(s) are enrolled: a result waits for a second \
             host's scan, so the round ends only once another host joins (or start it with \
             --validate off)",
            validate.as_str()
        )
    });
    if let Some(w) = &warning {
        tracing::warn!(round = id, "{w}");
    }
    Ok(Json(RoundStarted { id, warning }))
}

async fn round_show(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
) -> ApiResult<Json<RoundDetail>> {
    let (round, jobs, names, able) = s
        .with_grid(move |g| {
            g.round(id).map(|(round, jobs)| {
                let hosts = g.hosts();
                let able = hosts
                    .iter()
                    .filter(|h| !h.revoked && h.left_ms.is_none())
                    .count();
                let names: HashMap<u64, String> =
                    hosts.into_iter().map(|h| (h.id, h.info.name)).collect();
                (round, jobs, names, able)
            })
        })
        .await
        .map_err(grid_fail)?;
    let sites = jobs
        .iter()
        .map(|j| {
            let mut line = SiteLine::of(j);
            line.name_hosts(|h| names.get(&h).cloned());
            line
        })
        .collect();
    let counts = JobCounts::of_round(&round, &jobs);
    Ok(Json(RoundDetail {
        waiting: crate::api::waiting_note(&round, &counts, able),
        counts,
        sites,
        round,
        jobs,
    }))
}

async fn round_cancel(State(s): State<Arc<Shared>>, Path(id): Path<u64>) -> ApiResult<StatusCode> {
    s.with_grid(move |g| g.cancel_round(id, now_ms()))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(round = id, "round cancelled");
    Ok(StatusCode::NO_CONTENT)
}

/// `round rescan`: the sites named, and with `damaged` every damaged site
/// known of the round, go back to its queue ([`Grid::rescan_sites`]); they
/// are no longer listed as damaged.
async fn round_rescan(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
    Json(req): Json<crate::api::RoundRescan>,
) -> ApiResult<Json<crate::api::RoundRescanned>> {
    let mut sites = req.sites;
    if s.with_grid(move |g| g.round_state(id)).await.is_none() {
        return Err(grid_fail(GridError::UnknownRound(id)));
    }
    if req.damaged {
        let known = s.damage.of_round(id);
        if known.is_empty() && sites.is_empty() {
            return Err(fail(
                StatusCode::BAD_REQUEST,
                format!(
                    "no damaged site of round {id} is known: `beebot-server check --round {id}` \
                     reads its results"
                ),
            ));
        }
        sites.extend(known.into_iter().map(|d| d.site));
    }
    let why = if req.damaged {
        "its kept result could not be read whole"
    } else {
        "named by the admin"
    };
    let again = s
        .with_grid(move |g| g.rescan_sites(id, &sites, why, now_ms()))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    s.damage.cleared(id, &again);
    s.metrics.set_damaged_sites(s.damage.count());
    tracing::info!(
        round = id,
        sites = again.len(),
        "sites queued to be scanned again"
    );
    s.refresh_about().await;
    Ok(Json(crate::api::RoundRescanned { sites: again }))
}

#[derive(Deserialize)]
struct ExportQuery {
    format: Option<String>,
}

/// A round's export, streamed ([`crate::export::stream`]): the rows leave
/// as they are read, and a client that goes away stops the writer.
async fn round_export(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
    Query(q): Query<ExportQuery>,
) -> ApiResult<Response> {
    let format: crate::export::Format =
        q.format.as_deref().unwrap_or("tsv").parse().map_err(
            |e: crate::export::UnknownFormat| fail(StatusCode::BAD_REQUEST, e.to_string()),
        )?;
    let (round, jobs, files) = s
        .with_grid(move |g| g.round(id).map(|(r, j)| (r, j, g.link_files_shared())))
        .await
        .map_err(grid_fail)?;
    // The damaged sites of this export replace those known of the round
    // before the last byte goes, so the CLI asks for them after it.
    s.damage.checked(id, &[]);
    let (damage, metrics) = (s.damage.clone(), s.metrics.clone());
    let body = crate::export::stream::spawn(format!("export of round {id}"), move |out| {
        crate::export::export_to(files.as_ref(), &jobs, format, out, |site, why| {
            tracing::warn!(
                round = id,
                site,
                why,
                "damaged result left out of the export"
            );
            damage.found(id, site, why);
            metrics.set_damaged_sites(damage.count());
        })
        .map(|_| ())
    });
    // The round's state beside the rows (a cancelled round's export holds
    // only the sites done before the cancel).
    let state = (
        header::HeaderName::from_static(crate::api::ROUND_STATE_HEADER),
        round.state.as_str(),
    );
    Ok(([(header::CONTENT_TYPE, format.content_type()), state], body).into_response())
}

/// The damaged sites of round `id` known now (found at start, by a check
/// or by an export).
async fn round_damage(
    State(s): State<Arc<Shared>>,
    Path(id): Path<u64>,
) -> ApiResult<Json<Vec<DamagedSite>>> {
    s.with_grid(move |g| g.round_refs(id).map(|_| ()))
        .await
        .ok_or_else(|| grid_fail(GridError::UnknownRound(id)))?;
    Ok(Json(s.damage.of_round(id)))
}

/// Read every done site's kept files (of one round, or all): the damaged
/// ones, as `beebot-server check` shows them.
async fn check_links(
    State(s): State<Arc<Shared>>,
    Json(req): Json<CheckRequest>,
) -> ApiResult<Json<CheckReport>> {
    if let Some(id) = req.round {
        s.with_grid(move |g| g.round_refs(id).map(|_| ()))
            .await
            .ok_or_else(|| grid_fail(GridError::UnknownRound(id)))?;
    }
    Ok(Json(s.check_links(req.round).await))
}

async fn hosts_list(State(s): State<Arc<Shared>>) -> ApiResult<Json<HostsList>> {
    Ok(Json(s.with_grid(|g| g.host_lines()).await))
}

/// Revoke a host by its id or its name (one active host's).
async fn host_revoke(
    State(s): State<Arc<Shared>>,
    Path(given): Path<String>,
) -> ApiResult<Json<HostRevoked>> {
    let (id, name) = s
        .with_grid(move |g| {
            let id = g.find_host(&given)?;
            g.revoke(id, now_ms())?;
            Ok::<_, GridError>((id, g.host_name(id).unwrap_or_default()))
        })
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(host_id = id, host = ?name, "host revoked");
    Ok(Json(HostRevoked { id, name }))
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

/// The token, posted once from the dashboard's own login page, opens a
/// session: its token comes back in the body (never a cookie).
async fn login(
    State(admin): State<Arc<Admin>>,
    headers: HeaderMap,
    Json(form): Json<LoginForm>,
) -> ApiResult<Json<LoginOk>> {
    if !own_origin(&admin, &headers) {
        return Err(foreign_origin());
    }
    if !same_token(form.token.trim(), &admin.shared.admin_token) {
        return Err(fail(
            StatusCode::UNAUTHORIZED,
            "That is not the admin token.",
        ));
    }
    Ok(Json(LoginOk {
        session: admin.sessions.open(Instant::now()),
        expires_s: SESSION_TTL.as_secs(),
    }))
}

/// The session of the request ends; only from the dashboard's own page.
async fn logout(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> ApiResult<StatusCode> {
    let Some(id) = session_token(&headers).filter(|id| admin.sessions.valid(id, Instant::now()))
    else {
        return Err(fail(StatusCode::UNAUTHORIZED, "no session to end"));
    };
    if !own_origin(&admin, &headers) {
        return Err(foreign_origin());
    }
    admin.sessions.close(id);
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_closed_and_are_bounded() {
        let sessions = Sessions::default();
        let t0 = Instant::now();
        let id = sessions.open(t0);
        assert_eq!(id.len(), 2 * SESSION_ID_BYTES);
        assert!(sessions.valid(&id, t0 + SESSION_TTL - Duration::from_secs(1)));
        assert!(!sessions.valid(&id, t0 + SESSION_TTL), "expired");
        assert!(!sessions.valid(&id, t0), "an expired session is gone");
        assert!(!sessions.valid("", t0) && !sessions.valid("nope", t0));
        let id = sessions.open(t0);
        assert_ne!(sessions.open(t0), id, "ids are random");
        sessions.close(&id);
        assert!(!sessions.valid(&id, t0), "logged out");
        // At most MAX_SESSIONS: the oldest goes first.
        let first = sessions.open(t0);
        for i in 1..=MAX_SESSIONS as u64 {
            sessions.open(t0 + Duration::from_secs(i));
        }
        assert!(sessions.map().len() <= MAX_SESSIONS);
        assert!(!sessions.valid(&first, t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_session_is_its_authorization_header_never_a_cookie() {
        use axum::http::HeaderValue;
        let mut h = HeaderMap::new();
        assert_eq!(session_token(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("beebot_session=abc"),
        );
        assert_eq!(session_token(&h), None, "a cookie opens nothing");
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Session abc"),
        );
        assert_eq!(session_token(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(session_token(&h), None);
    }

    #[test]
    fn hosts_allowed_are_the_admin_address_and_localhost() {
        let hosts = allowed_hosts("127.0.0.1:4480".parse().expect("addr"));
        for ok in ["127.0.0.1:4480", "localhost:4480", "[::1]:4480"] {
            assert!(hosts.contains(&ok.to_string()), "{ok}");
        }
        for refused in ["127.0.0.1", "localhost", "evil.test:4480", "127.0.0.1:80"] {
            assert!(!hosts.contains(&refused.to_string()), "{refused}");
        }
    }
}
