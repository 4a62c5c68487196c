//! The admin HTTP API (loopback only, bearer token) and a small dashboard.
//! The CLI's commands other than init/serve/demo are calls to this API.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;

use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::limits::MAX_SITES;
use beebot_shared::scope::{parse_site, Scope};

use crate::api::*;
use crate::grid::GridError;
use crate::model::JobState;
use crate::validate::ValidateMode;
use crate::{now_ms, Shared};

/// Largest admin request body (a big `sites import`).
const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Longest invite lifetime.
const MAX_INVITE_SECONDS: u64 = 366 * 24 * 3600;

type ApiResult<T> = Result<T, (StatusCode, Json<ApiError>)>;

fn fail(status: StatusCode, msg: impl Into<String>) -> (StatusCode, Json<ApiError>) {
    (status, Json(ApiError { error: msg.into() }))
}

fn grid_fail(e: GridError) -> (StatusCode, Json<ApiError>) {
    let status = match e {
        GridError::UnknownRound(_) | GridError::UnknownHost(_) | GridError::UnknownInvite(_) => {
            StatusCode::NOT_FOUND
        }
        GridError::Invalid(_) | GridError::BadInvite | GridError::KeyEnrolled(_) => {
            StatusCode::BAD_REQUEST
        }
        GridError::Revoked(_) => StatusCode::CONFLICT,
        GridError::Store(_) | GridError::Io(_) | GridError::Sign(_) => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
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

fn authorized(shared: &Shared, headers: &HeaderMap) -> ApiResult<()> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !same_token(given, &shared.admin_token) {
        return Err(fail(
            StatusCode::UNAUTHORIZED,
            "missing or wrong admin token",
        ));
    }
    durable(shared)
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

/// The API's routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/api/status", get(status))
        .route("/api/invites", get(invites_list).post(invite))
        .route("/api/invites/{id}/revoke", post(invite_revoke))
        .route("/api/sites", get(sites_list).post(sites_add))
        .route("/api/sites/{host}", delete(sites_remove))
        .route("/api/rounds", get(rounds_list).post(round_start))
        .route("/api/rounds/{id}", get(round_show))
        .route("/api/rounds/{id}/cancel", post(round_cancel))
        .route("/api/rounds/{id}/export", get(round_export))
        .route("/api/hosts", get(hosts_list))
        .route("/api/hosts/{id}/revoke", post(host_revoke))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_ADMIN_BODY_BYTES))
        .with_state(shared)
}

async fn status(State(s): State<Arc<Shared>>, h: HeaderMap) -> ApiResult<Json<StatusResponse>> {
    authorized(&s, &h)?;
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
    h: HeaderMap,
    Json(req): Json<InviteRequest>,
) -> ApiResult<Json<InviteResponse>> {
    authorized(&s, &h)?;
    if req.expires_s == 0 || req.expires_s > MAX_INVITE_SECONDS {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!("expiry must be between 1 s and {MAX_INVITE_SECONDS} s"),
        ));
    }
    let (code, expires_ms) = s
        .make_invite(req.uses, req.expires_s)
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    Ok(Json(InviteResponse { code, expires_ms }))
}

/// Every invite: its id, uses left, expiry and creation (never the token,
/// which the server does not keep).
async fn invites_list(State(s): State<Arc<Shared>>, h: HeaderMap) -> ApiResult<Json<InvitesList>> {
    authorized(&s, &h)?;
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
    h: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<InviteRevoked>> {
    authorized(&s, &h)?;
    let id = s
        .with_grid(move |g| g.revoke_invite(&id))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(invite = %id, "invite revoked");
    Ok(Json(InviteRevoked { id }))
}

async fn sites_list(State(s): State<Arc<Shared>>, h: HeaderMap) -> ApiResult<Json<SitesList>> {
    authorized(&s, &h)?;
    Ok(Json(s.with_grid(|g| g.sites()).await))
}

async fn sites_add(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Json(req): Json<SitesAdd>,
) -> ApiResult<Json<SitesAdded>> {
    authorized(&s, &h)?;
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
    let (added, total) = s
        .with_grid(move |g| g.add_sites(&hosts, now).map(|a| (a, g.sites().len())))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    Ok(Json(SitesAdded { added, total }))
}

async fn sites_remove(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Path(host): Path<String>,
) -> ApiResult<StatusCode> {
    authorized(&s, &h)?;
    let host = parse_site(&host).map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    let h2 = host.clone();
    let removed = s
        .with_grid(move |g| g.remove_site(&h2))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    if removed {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(fail(StatusCode::NOT_FOUND, format!("no site {host}")))
    }
}

async fn rounds_list(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
) -> ApiResult<Json<Vec<RoundSummary>>> {
    authorized(&s, &h)?;
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
    h: HeaderMap,
    Json(req): Json<RoundStart>,
) -> ApiResult<Json<RoundStarted>> {
    authorized(&s, &h)?;
    let mut p = s.config.round.params();
    if let Some(v) = req.policy {
        p.policy = v;
    }
    if let Some(v) = req.max_pages {
        p.max_pages = v;
    }
    if let Some(v) = req.max_depth {
        p.max_depth = v;
    }
    if let Some(v) = req.delay_ms {
        p.delay_ms = v;
    }
    if let Some(v) = req.scope {
        p.scope = v
            .parse::<Scope>()
            .map_err(|e| fail(StatusCode::BAD_REQUEST, e.to_string()))?;
    }
    if let Some(v) = req.max_crawl_delay_ms {
        p.max_crawl_delay_ms = v;
    }
    if let Some(v) = req.validate {
        p.validate = v
            .parse::<ValidateMode>()
            .map_err(|e| fail(StatusCode::BAD_REQUEST, e))?;
    }
    if let Some(v) = req.max_seconds {
        p.max_seconds = v;
    }
    if let Some(v) = req.deadline_min_s {
        p.deadline_min_s = v;
    }
    if let Some(v) = req.deadline_max_s {
        p.deadline_max_s = v;
    }
    if let Some(v) = req.max_attempts {
        p.max_attempts = v;
    }
    if p.deadline_max_s < p.deadline_min_s {
        p.deadline_min_s = p.deadline_max_s;
    }
    let now = now_ms();
    let every_ms = req.every_s.map(|e| e.saturating_mul(1000));
    let id = s
        .with_grid(move |g| g.start_round_every(p, every_ms, now))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(round = id, "round started");
    Ok(Json(RoundStarted { id }))
}

async fn round_show(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Path(id): Path<u64>,
) -> ApiResult<Json<RoundDetail>> {
    authorized(&s, &h)?;
    let (round, jobs) = s.with_grid(move |g| g.round(id)).await.map_err(grid_fail)?;
    Ok(Json(RoundDetail {
        counts: JobCounts::of_round(&round, &jobs),
        sites: jobs.iter().map(SiteLine::of).collect(),
        round,
        jobs,
    }))
}

async fn round_cancel(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Path(id): Path<u64>,
) -> ApiResult<StatusCode> {
    authorized(&s, &h)?;
    s.with_grid(move |g| g.cancel_round(id, now_ms()))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct ExportQuery {
    format: Option<String>,
}

async fn round_export(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Path(id): Path<u64>,
    Query(q): Query<ExportQuery>,
) -> ApiResult<Response> {
    authorized(&s, &h)?;
    let format: Format = q
        .format
        .as_deref()
        .unwrap_or("tsv")
        .parse()
        .map_err(|e: String| fail(StatusCode::BAD_REQUEST, e))?;
    let (_, jobs) = s.with_grid(move |g| g.round(id)).await.map_err(grid_fail)?;
    let links_dir = s.data.links();
    let body = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let mut w = ExportWriter::new(Vec::new(), format).map_err(|e| e.to_string())?;
        let mut done: Vec<_> = jobs
            .iter()
            .filter(|j| j.state == JobState::Done && j.result.is_some())
            .collect();
        done.sort_by(|a, b| a.site.cmp(&b.site));
        for job in done {
            // A site scanned in several scans (continuations) is their union.
            crate::grid::for_each_job_link(&links_dir, job, |r| {
                w.write(&job.site, r).map_err(|e| e.to_string())
            })?;
        }
        w.finish().map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let ctype = match format {
        Format::Tsv => "text/tab-separated-values; charset=utf-8",
        Format::Jsonl => "application/jsonl; charset=utf-8",
    };
    Ok(([(header::CONTENT_TYPE, ctype)], body).into_response())
}

async fn hosts_list(State(s): State<Arc<Shared>>, h: HeaderMap) -> ApiResult<Json<HostsList>> {
    authorized(&s, &h)?;
    Ok(Json(s.with_grid(|g| g.host_lines()).await))
}

async fn host_revoke(
    State(s): State<Arc<Shared>>,
    h: HeaderMap,
    Path(id): Path<u64>,
) -> ApiResult<StatusCode> {
    authorized(&s, &h)?;
    s.with_grid(move |g| g.revoke(id, now_ms()))
        .await
        .map_err(grid_fail)?;
    durable(&s)?;
    tracing::info!(host = id, "host revoked");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct DashQuery {
    token: Option<String>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A plain HTML overview: `/?token=ADMIN_TOKEN`.
async fn dashboard(State(s): State<Arc<Shared>>, Query(q): Query<DashQuery>) -> Response {
    if !same_token(q.token.as_deref().unwrap_or(""), &s.admin_token) {
        return (
            StatusCode::UNAUTHORIZED,
            Html("<p>Open this page as <code>/?token=ADMIN_TOKEN</code> (the token is in the data dir's admin.token).</p>".to_string()),
        )
            .into_response();
    }
    let (status, rounds, hosts) = s
        .with_grid(|g| {
            let rounds: Vec<_> = g
                .rounds()
                .into_iter()
                .rev()
                .take(20)
                .filter_map(|r| g.round(r.id).ok())
                .collect();
            (g.status(), rounds, g.hosts())
        })
        .await;
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=utf-8><meta http-equiv=refresh content=5>\
         <title>BeeBot grid</title><style>body{font-family:sans-serif;margin:2em}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}\
         th{background:#f4f4f4}</style></head><body><h1>BeeBot grid</h1>",
    );
    html.push_str(&format!(
        "<p>{} sites · {} hosts ({} revoked) · {} rounds running · jobs: {} queued, {} running, {} done, {} failed</p>",
        status.sites, status.hosts, status.hosts_revoked, status.rounds_running,
        status.jobs_queued, status.jobs_running, status.jobs_done, status.jobs_failed
    ));
    html.push_str("<h2>Rounds</h2><table><tr><th>id</th><th>state</th><th>policy</th><th>jobs</th><th>done</th><th>failed</th><th>running</th><th>complete</th><th>incomplete</th><th>pages</th><th>links</th></tr>");
    for (r, jobs) in &rounds {
        let c = JobCounts::of_round(r, jobs);
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.id, r.state.as_str(), esc(&r.params.policy), c.total, c.done, c.failed, c.running, c.complete, c.incomplete, c.pages, c.links
        ));
    }
    html.push_str("</table><h2>Hosts</h2><table><tr><th>id</th><th>name</th><th>last seen (s ago)</th><th>jobs</th><th>pages</th><th>missed deadlines</th><th>revoked</th></tr>");
    let now = now_ms();
    for h in &hosts {
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            h.id,
            esc(&h.info.name),
            now.saturating_sub(h.last_seen_ms) / 1000,
            h.jobs_done,
            h.pages_done,
            h.deadlines_missed,
            h.revoked
        ));
    }
    html.push_str("</table></body></html>");
    Html(html).into_response()
}
