//! Request dispatch: the unauthenticated requests (challenge, project
//! proof, enrolment, hello) and, once a host is authenticated, its requests
//! to the grid, with grid errors turned into protocol error answers.
//!
//! Invariants: a host request is answered only on an authenticated
//! connection; a nonce serves one proof. It never touches the network
//! itself: it answers, `conn` writes.

use std::sync::Arc;

use tokio::sync::{Mutex, Semaphore};

use beebot_shared::limits::{
    MAX_REPORTS_PER_REQUEST, MAX_TEXT_LEN, MAX_UNITS_HELD, MAX_WANT_SECONDS, MAX_WINDOW_INTERVALS,
    NONCE_LEN,
};
use beebot_shared::proto::{
    ErrorCode, HostInfo, PolicyHints, Request, Response, ScanAnswer, ScanReport,
};
use beebot_shared::sign;

use super::admission::{BudgetOwner, Limits, UnauthenticatedSlot};
use super::error;
use super::upload::{read_state, upload};
use crate::grid::{GridError, ProgressOutcome, StateAnswer, WorkRequest};
use crate::{now_ms, Shared};

/// Per-connection authentication state.
pub(super) struct ConnState {
    pub(super) conn: quinn::Connection,
    pub(super) nonce: Option<[u8; NONCE_LEN]>,
    pub(super) host_id: Option<u64>,
    /// The host's name, for log lines.
    pub(super) host_name: String,
    /// Held while the connection is unauthenticated.
    pub(super) unauthenticated: Option<UnauthenticatedSlot>,
    /// The in-flight budget requests are charged to: the source's until the
    /// connection authenticates, then the host's.
    pub(super) budget: Arc<Semaphore>,
}

impl ConnState {
    /// The connection proved a host key: it no longer counts as unauthenticated.
    pub(super) fn authenticated(&mut self, host_id: u64, limits: &Limits) {
        self.host_id = Some(host_id);
        self.unauthenticated = None;
        self.budget = limits.budget(BudgetOwner::Host(host_id));
        limits.register_host(host_id, &self.conn);
    }
}

pub(super) fn grid_error(e: GridError) -> Response {
    match e {
        GridError::UnknownHost(_) => error(ErrorCode::UnknownHost, e.to_string()),
        GridError::Revoked(_) => error(ErrorCode::Revoked, e.to_string()),
        GridError::BadInvite => error(ErrorCode::BadInvite, e.to_string()),
        GridError::NameTaken { .. } => error(ErrorCode::NameTaken, e.to_string()),
        GridError::KeyEnrolled(_)
        | GridError::Invalid(_)
        | GridError::UnknownRound(_)
        | GridError::UnknownInvite(_)
        | GridError::UnknownHostName(_)
        | GridError::AmbiguousHostName { .. }
        | GridError::SameSite { .. } => error(ErrorCode::BadRequest, e.to_string()),
        GridError::Io(_) | GridError::Sign(_) => {
            tracing::error!("request failed: {e}");
            error(ErrorCode::Internal, format!("server error: {e}"))
        }
    }
}

pub(super) async fn dispatch(
    req: Request,
    shared: &Arc<Shared>,
    state: &Arc<Mutex<ConnState>>,
    limits: &Limits,
) -> Response {
    shared
        .live
        .beat(crate::dashboard::live::Component::Quic, now_ms());
    match req {
        Request::Challenge => {
            let nonce: [u8; NONCE_LEN] = rand::random();
            state.lock().await.nonce = Some(nonce);
            Response::Nonce { nonce }
        }
        Request::ProveProject { nonce } => {
            let signature = shared.enrol_proof(&nonce);
            Response::ProjectProof { signature }
        }
        Request::Enrol {
            token,
            host_key,
            host_info,
            proof,
        } => enrol(shared, state, limits, token, host_key, host_info, proof).await,
        Request::Hello { host_id, proof } => hello(shared, state, limits, host_id, proof).await,
        other => {
            let (host_id, name) = {
                let st = state.lock().await;
                (st.host_id, st.host_name.clone())
            };
            let Some(host_id) = host_id else {
                return error(ErrorCode::NotAuthenticated, "say Hello first");
            };
            authed(other, host_id, &name, shared).await
        }
    }
}

/// `Enrol`: the host key's proof over this connection's nonce, then the
/// invite; the connection is then authenticated as the new host.
async fn enrol(
    shared: &Arc<Shared>,
    state: &Arc<Mutex<ConnState>>,
    limits: &Limits,
    token: Vec<u8>,
    host_key: [u8; 32],
    host_info: HostInfo,
    proof: Vec<u8>,
) -> Response {
    let fp = shared.cert_fingerprint;
    let Some(nonce) = state.lock().await.nonce.take() else {
        return error(ErrorCode::NotAuthenticated, "ask for a challenge first");
    };
    if sign::check_proof(&host_key, &nonce, &fp, &proof).is_err() {
        return error(ErrorCode::UnknownHost, "the key proof does not verify");
    }
    let name = host_info.name.clone();
    let r = shared
        .with_grid(move |g| g.enrol(&token, host_key, host_info, now_ms()))
        .await;
    match r {
        Ok(host_id) => {
            tracing::info!(host_id, host = ?name, "host enrolled");
            let mut st = state.lock().await;
            st.authenticated(host_id, limits);
            st.host_name = name;
            drop(st);
            Response::Enrolled { host_id }
        }
        Err(e) => grid_error(e),
    }
}

/// `Hello`: an enrolled host proves its key over this connection's nonce;
/// the connection is then authenticated as that host.
async fn hello(
    shared: &Arc<Shared>,
    state: &Arc<Mutex<ConnState>>,
    limits: &Limits,
    host_id: u64,
    proof: Vec<u8>,
) -> Response {
    let fp = shared.cert_fingerprint;
    let Some(nonce) = state.lock().await.nonce.take() else {
        return error(ErrorCode::NotAuthenticated, "ask for a challenge first");
    };
    // An unknown id and a bad proof get the same answer, and only a
    // host that proves its key hears that it is revoked: ids cannot
    // be enumerated before authentication.
    let unknown = || {
        error(
            ErrorCode::UnknownHost,
            format!("unknown host {host_id}, or the host proof does not verify"),
        )
    };
    let Some(key) = shared.with_grid(move |g| g.enrolled_key(host_id)).await else {
        return unknown();
    };
    if sign::check_proof(&key, &nonce, &fp, &proof).is_err() {
        return unknown();
    }
    let name = match shared
        .with_grid(move |g| g.hello(host_id, now_ms()).map(|()| g.host_name(host_id)))
        .await
    {
        Ok(name) => name.unwrap_or_default(),
        Err(e) => return grid_error(e),
    };
    let mut st = state.lock().await;
    st.authenticated(host_id, limits);
    st.host_name = name;
    drop(st);
    Response::Welcome {
        server_time_ms: now_ms(),
        reference_site: shared.reference_site.clone(),
        policy_hints: PolicyHints {
            request_interval_s: 30,
            progress_interval_s: beebot_shared::limits::PROGRESS_INTERVAL_S,
        },
    }
}

pub(super) async fn authed(
    req: Request,
    host_id: u64,
    name: &str,
    shared: &Arc<Shared>,
) -> Response {
    let r = match req {
        Request::Benchmark {
            pages_per_s,
            kb_per_s,
            slots,
        } => shared
            .with_grid(move |g| g.benchmark(host_id, pages_per_s, kb_per_s, slots, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::Resources(r) => shared
            .with_grid(move |g| g.set_resources(host_id, r, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::Concurrency { slots } => shared
            .with_grid(move |g| g.set_concurrency(host_id, slots, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::RequestWork {
            want_seconds,
            free_slots,
            units_held,
            open_windows,
        } => {
            if units_held.len() > MAX_UNITS_HELD {
                return too_many_held_units(units_held.len());
            }
            let req = work_request(want_seconds, free_slots, units_held, open_windows);
            let windows = crate::dashboard::live::Windows {
                reported_ms: now_ms(),
                open: req.open_windows.clone(),
            };
            shared.live.report_windows(host_id, windows);
            request_work(shared, host_id, req).await
        }
        Request::Progress {
            unit_id,
            pages,
            links,
        } => progress(shared, host_id, unit_id, (pages, links, None)).await,
        Request::ScanProgressAll { reports } => progress_all(shared, host_id, reports).await,
        Request::Upload {
            unit_id,
            summary,
            link_file,
            state,
        } => {
            let r = upload(shared, host_id, unit_id, None, summary, link_file, state).await;
            if let Ok(Response::Rejected { reason }) = &r {
                tracing::warn!(host_id, host = ?name, unit = unit_id, "upload refused: {reason:?}");
            }
            r
        }
        Request::UploadPart {
            unit_id,
            index,
            summary,
            link_file,
            state,
        } => {
            let part = Some(index);
            let r = upload(
                shared,
                host_id,
                unit_id,
                part,
                summary,
                link_file,
                Some(state),
            )
            .await;
            if let Ok(Response::Rejected { reason }) = &r {
                tracing::info!(host_id, host = ?name, unit = unit_id, "part refused: {reason:?}");
            }
            r
        }
        Request::Fail { unit_id, reason } => {
            let reason: String = reason.chars().take(MAX_TEXT_LEN).collect();
            tracing::info!(host_id, host = ?name, unit = unit_id, "unit given back: {reason:?}");
            shared
                .with_grid(move |g| g.fail(host_id, unit_id, &reason, now_ms()))
                .await
                .map(|_| Response::Ack)
        }
        Request::Leave => shared
            .with_grid(move |g| g.leave(host_id, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::FetchState { unit_id } => fetch_state(shared, host_id, unit_id).await,
        Request::Challenge
        | Request::Enrol { .. }
        | Request::Hello { .. }
        | Request::ProveProject { .. } => {
            return error(ErrorCode::BadRequest, "already authenticated");
        }
    };
    r.unwrap_or_else(|e| refused(e, host_id, name))
}

/// A grid error as the host's answer, logged as a refusal unless the
/// server itself failed (those are logged as errors by [`grid_error`]).
fn refused(e: GridError, host_id: u64, name: &str) -> Response {
    if !matches!(e, GridError::Io(_) | GridError::Sign(_)) {
        tracing::warn!(host_id, host = ?name, "request refused: {:?}", e.to_string());
    }
    grid_error(e)
}

/// The answer to a work request naming more held units than allowed.
fn too_many_held_units(named: usize) -> Response {
    error(
        ErrorCode::BadRequest,
        format!(
            "a work request may name at most {MAX_UNITS_HELD} held units; this one names {named}"
        ),
    )
}

/// The grid's work request from the host's, its wish and windows capped.
fn work_request(
    want_seconds: u64,
    free_slots: u32,
    units_held: Vec<u64>,
    open_windows: Option<Vec<(u64, u64)>>,
) -> WorkRequest {
    WorkRequest {
        want_seconds: want_seconds.min(MAX_WANT_SECONDS),
        free_slots,
        units_held,
        open_windows: open_windows.map(|mut w| {
            w.truncate(MAX_WINDOW_INTERVALS);
            w
        }),
    }
}

/// `RequestWork`: the units the grid issues to this host.
async fn request_work(
    shared: &Arc<Shared>,
    host_id: u64,
    req: WorkRequest,
) -> Result<Response, GridError> {
    let reply = shared
        .with_grid(move |g| g.request_work_unsigned(host_id, &req, now_ms()))
        .await?;
    let w = shared.sign_work(reply);
    Ok(Response::Work {
        units: w.units,
        retry_after_s: w.retry_after_s,
        rounds_open: w.rounds_open,
        cancelled_units: w.cancelled_units,
    })
}

/// A progress report (`(pages, links, bytes)`, bytes `None` from
/// `Progress`): go on, stop, or a later deadline.
async fn progress(
    shared: &Arc<Shared>,
    host_id: u64,
    unit_id: u64,
    report: (u64, u64, Option<u64>),
) -> Result<Response, GridError> {
    shared
        .with_grid(move |g| g.report(host_id, unit_id, report, now_ms()))
        .await
        .map(|p| scan_answer(p).into())
}

fn scan_answer(p: ProgressOutcome) -> ScanAnswer {
    match p {
        ProgressOutcome::Continue => ScanAnswer::Continue,
        ProgressOutcome::Abort(reason) => ScanAnswer::Abort { reason },
        ProgressOutcome::Extend(deadline_ms) => ScanAnswer::Extend { deadline_ms },
    }
}

/// `ScanProgressAll`: each report answered as its own `Progress` would
/// be, in one turn of the grid. A list longer than
/// [`MAX_REPORTS_PER_REQUEST`] or naming a unit twice is refused whole.
async fn progress_all(
    shared: &Arc<Shared>,
    host_id: u64,
    reports: Vec<ScanReport>,
) -> Result<Response, GridError> {
    if reports.len() > MAX_REPORTS_PER_REQUEST {
        return Ok(error(
            ErrorCode::BadRequest,
            format!(
                "{} progress reports in one request; at most {MAX_REPORTS_PER_REQUEST}",
                reports.len()
            ),
        ));
    }
    let mut units: Vec<u64> = reports.iter().map(|r| r.unit_id).collect();
    units.sort_unstable();
    if units.windows(2).any(|w| w[0] == w[1]) {
        return Ok(error(
            ErrorCode::BadRequest,
            "a unit reported twice in one request",
        ));
    }
    // A report fails only for the whole host (unknown or revoked) or a
    // store that refuses every write: the request fails whole, as each of
    // its reports would alone, and the client sends them again.
    shared
        .with_grid(move |g| {
            let now = now_ms();
            let answers = reports
                .iter()
                .map(|r| {
                    let report = (r.pages, r.links, Some(r.bytes));
                    g.report(host_id, r.unit_id, report, now).map(scan_answer)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Response::Progressed { answers })
        })
        .await
}

/// `FetchState`: a continuation's scan state, or why the unit must go.
async fn fetch_state(
    shared: &Arc<Shared>,
    host_id: u64,
    unit_id: u64,
) -> Result<Response, GridError> {
    match shared
        .with_grid(move |g| g.state_of_unit(host_id, unit_id))
        .await
    {
        Ok(StateAnswer::Read(file)) => read_state(file).await,
        Ok(StateAnswer::Abort(reason)) => Ok(Response::Abort { reason }),
        Err(e) => Err(e),
    }
}
