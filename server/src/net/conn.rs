//! Connections: the accept loop, each connection's authentication state and
//! deadline, and one request/response per bidirectional stream (frames read
//! within their size and time limits, charged to the in-flight budget).
//!
//! Invariants: a connection not authenticated within [`AUTH_TIMEOUT`] is
//! closed; a malformed frame gets an error answer, never a panic. It never
//! decides what a request means: `dispatch` does.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, Semaphore};

use beebot_shared::codec::{self, CodecError, FRAME_HEADER_BYTES};
use beebot_shared::limits::MAX_FRAME_BYTES;
use beebot_shared::proto::{ErrorCode, Request, Response};

use super::admission::{source_key, BudgetOwner, Limits, UnauthenticatedSlot};
use super::dispatch::{dispatch, ConnState};
use super::upload::read_payload;
use super::{
    error, AUTH_TIMEOUT, CLOSE_LIMIT, MAX_CONNECTIONS, MAX_UNAUTHENTICATED_FRAME_BYTES,
    PUSH_TIMEOUT, REQUEST_TIMEOUT, RETRY_ABOVE_UNVALIDATED_HANDSHAKES,
};
use crate::metrics::RequestKind;
use crate::Shared;

/// Serve connections until `shutdown` resolves.
pub async fn run(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let limits = Arc::new(Limits::new());
    let always_retry = shared.config.quic_retry;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            inc = endpoint.accept() => {
                let Some(inc) = inc else { break };
                // An address not yet validated may be spoofed: under a flood
                // of such handshakes (or always, when configured) it must
                // prove itself with a Retry before it is counted or served.
                let validated = inc.remote_address_validated();
                if !validated
                    && inc.may_retry()
                    && (always_retry
                        || limits.unvalidated_handshakes.load(Ordering::Relaxed)
                            >= RETRY_ABOVE_UNVALIDATED_HANDSHAKES)
                {
                    tracing::debug!(addr = %inc.remote_address(), "sent a Retry to validate the address");
                    if let Err(e) = inc.retry() {
                        e.into_incoming().refuse();
                    }
                    continue;
                }
                let ip = inc.remote_address().ip();
                let Some(slot) = limits.admit(ip) else {
                    tracing::debug!(%ip, "refused a connection: too many unauthenticated ones from this address");
                    inc.refuse();
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    inc.refuse();
                    continue;
                };
                let shared = shared.clone();
                let limits = limits.clone();
                let unvalidated = (!validated)
                    .then(|| Counted::new(limits.unvalidated_handshakes.clone()));
                tokio::spawn(async move {
                    let _permit = permit;
                    let handshake = tokio::time::timeout(AUTH_TIMEOUT, inc).await;
                    drop(unvalidated);
                    match handshake {
                        Ok(Ok(conn)) => handle_connection(conn, shared, limits, ip, slot).await,
                        Ok(Err(e)) => tracing::debug!("handshake failed: {e}"),
                        Err(_) => tracing::debug!("handshake timed out"),
                    }
                });
            }
        }
    }
    endpoint.close(0u32.into(), b"server shutting down");
    endpoint.wait_idle().await;
}

/// One in a count of things in progress, taken off on drop.
pub(super) struct Counted(Arc<AtomicUsize>);

impl Counted {
    pub(super) fn new(count: Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(super) async fn handle_connection(
    conn: quinn::Connection,
    shared: Arc<Shared>,
    limits: Arc<Limits>,
    ip: IpAddr,
    slot: UnauthenticatedSlot,
) {
    let state = Arc::new(Mutex::new(ConnState {
        conn: conn.clone(),
        nonce: None,
        host_id: None,
        host_name: String::new(),
        unauthenticated: Some(slot),
        budget: limits.budget(BudgetOwner::Source(source_key(ip))),
    }));
    let auth_deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    let mut authed = false;
    let mut hints = shared.work_hint.subscribe();
    loop {
        let accepted = tokio::select! {
            s = conn.accept_bi() => s,
            Ok(()) = hints.changed() => {
                if state.lock().await.host_id.is_some() {
                    tokio::spawn(push_work_hint(conn.clone()));
                }
                continue;
            }
            _ = tokio::time::sleep_until(auth_deadline), if !authed => {
                if state.lock().await.host_id.is_some() {
                    authed = true;
                    continue;
                }
                conn.close(CLOSE_LIMIT.into(), b"authenticate within 10 seconds");
                break;
            }
        };
        let (send, recv) = match accepted {
            Ok(s) => s,
            Err(_) => break,
        };
        let shared = shared.clone();
        let state = state.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                REQUEST_TIMEOUT,
                handle_stream(send, recv, shared, state, limits),
            )
            .await;
        });
    }
    let mut st = state.lock().await;
    if let Some(host_id) = st.host_id {
        limits.unregister_host(host_id, &conn);
    }
    st.unauthenticated = None;
}

/// Tell an authenticated host that work may be waiting (`WorkAvailable` on a
/// uni stream of its own), within [`PUSH_TIMEOUT`]: a host that does not
/// read it asks at its `retry_after` as before.
pub(super) async fn push_work_hint(conn: quinn::Connection) {
    let push = async {
        let mut send = conn.open_uni().await.ok()?;
        let frame = codec::encode_frame(&Response::WorkAvailable).ok()?;
        send.write_all(&frame).await.ok()?;
        send.finish().ok()
    };
    if tokio::time::timeout(PUSH_TIMEOUT, push).await.is_err() {
        tracing::debug!("a work hint was not taken in time");
    }
}

pub(super) async fn write_response(send: &mut quinn::SendStream, resp: &Response) {
    match codec::encode_frame(resp) {
        Ok(frame) => {
            let _ = send.write_all(&frame).await;
        }
        Err(e) => tracing::error!("cannot encode response: {e}"),
    }
    let _ = send.finish();
}

pub(super) async fn handle_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    shared: Arc<Shared>,
    state: Arc<Mutex<ConnState>>,
    limits: Arc<Limits>,
) {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    if recv.read_exact(&mut header).await.is_err() {
        return;
    }
    let (limit, own, pool) = {
        let st = state.lock().await;
        match st.host_id {
            Some(_) => (
                MAX_FRAME_BYTES,
                st.budget.clone(),
                limits.inflight_bytes.clone(),
            ),
            None => (
                MAX_UNAUTHENTICATED_FRAME_BYTES,
                st.budget.clone(),
                limits.unauthenticated_bytes.clone(),
            ),
        }
    };
    let len = match codec::frame_len(header, limit) {
        Ok(l) => l,
        Err(e) => {
            let refused = error(ErrorCode::BadRequest, e.to_string());
            shared
                .metrics
                .answered(RequestKind::Undecodable, &refused, Duration::ZERO);
            write_response(&mut send, &refused).await;
            let _ = recv.stop(1u32.into());
            return;
        }
    };
    // Room in the sender's own budget first (a host waits behind its own
    // claims, holding none of the shared budget meanwhile), then in the
    // shared one, then the bytes as they arrive, at the minimum rate.
    let Ok(_own) = own.acquire_many_owned(len as u32).await else {
        return;
    };
    let Ok(_room) = pool.acquire_many_owned(len as u32).await else {
        return;
    };
    let payload = match read_payload(&mut recv, len).await {
        Ok(p) => p,
        Err(Some(e)) => {
            write_response(&mut send, &error(ErrorCode::BadRequest, e)).await;
            let _ = recv.stop(1u32.into());
            return;
        }
        Err(None) => return,
    };
    let started = Instant::now();
    let (kind, resp) = answer(payload, &shared, &state, &limits).await;
    let resp = match shared.store_failure() {
        // Fail-stop: after a storage failure nothing may be acknowledged,
        // also the answer of a call that was running when the store failed.
        Some(why) => stopped(&why),
        None => resp,
    };
    shared.metrics.answered(kind, &resp, started.elapsed());
    write_response(&mut send, &resp).await;
}

/// The answer to every request once the store has failed (fail-stop).
fn stopped(why: &str) -> Response {
    error(
        ErrorCode::Internal,
        format!("server storage failed ({why}); it must be restarted"),
    )
}

/// The answer to a frame's payload, and the kind of request it was (its
/// bytes counted when it is an upload).
async fn answer(
    payload: Vec<u8>,
    shared: &Arc<Shared>,
    state: &Arc<Mutex<ConnState>>,
    limits: &Arc<Limits>,
) -> (RequestKind, Response) {
    match codec::decode_payload::<Request>(&payload) {
        Ok(req) => {
            let kind = RequestKind::of(&req);
            if kind == RequestKind::Upload {
                shared.metrics.uploaded(FRAME_HEADER_BYTES + payload.len());
            }
            drop(payload);
            // After a storage failure no request reaches the grid: its
            // memory may be ahead of its disk (a call whose writes failed),
            // and nothing may move it further until a restart reloads it.
            if let Some(why) = shared.store_failure() {
                return (kind, stopped(&why));
            }
            (kind, dispatch(req, shared, state, limits).await)
        }
        Err(e @ CodecError::Version { .. }) => (
            RequestKind::Undecodable,
            error(ErrorCode::Upgrade, e.to_string()),
        ),
        Err(e) => (
            RequestKind::Undecodable,
            error(ErrorCode::BadRequest, e.to_string()),
        ),
    }
}
