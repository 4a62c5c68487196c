//! The QUIC endpoint: TLS setup, connection handling, and one request/response
//! per bidirectional stream. The only server module that knows quinn.
//!
//! Each connection starts unauthenticated with a fresh nonce. `Enrol` and
//! `Hello` prove the host key over nonce ‖ certificate fingerprint; the nonce
//! is then spent. Anything malformed gets an error answer, never a panic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::Mutex;

use beebot_shared::codec::{self, CodecError, FRAME_HEADER_BYTES};
use beebot_shared::limits::{MAX_FRAME_BYTES, MAX_TEXT_LEN, MAX_WANT_SECONDS, NONCE_LEN};
use beebot_shared::proto::{ErrorCode, PolicyHints, Request, Response, ALPN};
use beebot_shared::sign;

use crate::grid::{GridError, ProgressOutcome, UploadOutcome, WorkRequest};
use crate::{now_ms, Shared};

/// Streams one connection may have open at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 8;
/// A connection idle this long is closed (clients keep alive while busy).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 4096;
/// A request must arrive whole within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Load the certificate chain and key from PEM files.
pub fn load_cert(
    cert_path: &std::path::Path,
    key_path: &std::path::Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_path)
        .with_context(|| format!("cannot read {}", cert_path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} is not a PEM certificate", cert_path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "{} holds no certificate",
        cert_path.display()
    );
    let key = PrivateKeyDer::from_pem_file(key_path)
        .with_context(|| format!("{} is not a PEM private key", key_path.display()))?;
    Ok((certs, key))
}

/// SHA-256 of the end-entity certificate: what invites pin.
pub fn cert_fingerprint(certs: &[CertificateDer<'_>]) -> [u8; 32] {
    certs
        .first()
        .map(|c| beebot_shared::util::sha256(c.as_ref()))
        .unwrap_or_default()
}

/// Bind the QUIC endpoint.
pub fn endpoint(
    listen: SocketAddr,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<quinn::Endpoint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS setup")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and key do not match")?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(tls).context("TLS config unusable for QUIC")?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(MAX_STREAMS_PER_CONNECTION.into());
    transport.max_concurrent_uni_streams(0u32.into());
    transport.max_idle_timeout(Some(IDLE_TIMEOUT.try_into().context("idle timeout")?));
    cfg.transport_config(Arc::new(transport));
    quinn::Endpoint::server(cfg, listen).with_context(|| format!("cannot bind UDP {listen}"))
}

/// Serve connections until `shutdown` resolves.
pub async fn run(
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            inc = endpoint.accept() => {
                let Some(inc) = inc else { break };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    inc.refuse();
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match inc.await {
                        Ok(conn) => handle_connection(conn, shared).await,
                        Err(e) => tracing::debug!("handshake failed: {e}"),
                    }
                });
            }
        }
    }
    endpoint.close(0u32.into(), b"server shutting down");
    endpoint.wait_idle().await;
}

/// Per-connection authentication state.
#[derive(Default)]
struct ConnState {
    nonce: Option<[u8; NONCE_LEN]>,
    host_id: Option<u64>,
}

async fn handle_connection(conn: quinn::Connection, shared: Arc<Shared>) {
    let state = Arc::new(Mutex::new(ConnState::default()));
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(_) => return,
        };
        let shared = shared.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, handle_stream(send, recv, shared, state))
                .await;
        });
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

async fn write_response(send: &mut quinn::SendStream, resp: &Response) {
    match codec::encode_frame(resp) {
        Ok(frame) => {
            let _ = send.write_all(&frame).await;
        }
        Err(e) => tracing::error!("cannot encode response: {e}"),
    }
    let _ = send.finish();
}

async fn handle_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    shared: Arc<Shared>,
    state: Arc<Mutex<ConnState>>,
) {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    if recv.read_exact(&mut header).await.is_err() {
        return;
    }
    let len = match codec::frame_len(header, MAX_FRAME_BYTES) {
        Ok(l) => l,
        Err(e) => {
            write_response(&mut send, &error(ErrorCode::BadRequest, e.to_string())).await;
            let _ = recv.stop(1u32.into());
            return;
        }
    };
    let mut payload = vec![0u8; len];
    if recv.read_exact(&mut payload).await.is_err() {
        return;
    }
    let resp = match codec::decode_payload::<Request>(&payload) {
        Ok(req) => {
            drop(payload);
            dispatch(req, &shared, &state).await
        }
        Err(e @ CodecError::Version { .. }) => error(ErrorCode::Upgrade, e.to_string()),
        Err(e) => error(ErrorCode::BadRequest, e.to_string()),
    };
    write_response(&mut send, &resp).await;
}

fn grid_error(e: GridError) -> Response {
    match e {
        GridError::UnknownHost(_) => error(ErrorCode::UnknownHost, e.to_string()),
        GridError::Revoked(_) => error(ErrorCode::Revoked, e.to_string()),
        GridError::BadInvite => error(ErrorCode::BadInvite, e.to_string()),
        GridError::KeyEnrolled(_) | GridError::Invalid(_) | GridError::UnknownRound(_) => {
            error(ErrorCode::BadRequest, e.to_string())
        }
        GridError::Store(_) | GridError::Io(_) | GridError::Sign(_) => {
            tracing::error!("request failed: {e}");
            error(ErrorCode::Internal, format!("server error: {e}"))
        }
    }
}

async fn dispatch(req: Request, shared: &Arc<Shared>, state: &Arc<Mutex<ConnState>>) -> Response {
    let fp = shared.cert_fingerprint;
    match req {
        Request::Challenge => {
            let nonce: [u8; NONCE_LEN] = rand::random();
            state.lock().await.nonce = Some(nonce);
            Response::Nonce { nonce }
        }
        Request::Enrol {
            token,
            host_key,
            host_info,
            proof,
        } => {
            let Some(nonce) = state.lock().await.nonce.take() else {
                return error(ErrorCode::NotAuthenticated, "ask for a challenge first");
            };
            if sign::check_proof(&host_key, &nonce, &fp, &proof).is_err() {
                return error(ErrorCode::UnknownHost, "the key proof does not verify");
            }
            let r = shared
                .with_grid(move |g| g.enrol(&token, host_key, host_info, now_ms()))
                .await;
            match r {
                Ok(host_id) => {
                    tracing::info!(host_id, "host enrolled");
                    state.lock().await.host_id = Some(host_id);
                    Response::Enrolled { host_id }
                }
                Err(e) => grid_error(e),
            }
        }
        Request::Hello { host_id, proof } => {
            let Some(nonce) = state.lock().await.nonce.take() else {
                return error(ErrorCode::NotAuthenticated, "ask for a challenge first");
            };
            let key = match shared.with_grid(move |g| g.host_key(host_id)).await {
                Ok(k) => k,
                Err(e) => return grid_error(e),
            };
            if sign::check_proof(&key, &nonce, &fp, &proof).is_err() {
                return error(ErrorCode::UnknownHost, "the host proof does not verify");
            }
            if let Err(e) = shared.with_grid(move |g| g.hello(host_id, now_ms())).await {
                return grid_error(e);
            }
            state.lock().await.host_id = Some(host_id);
            Response::Welcome {
                server_time_ms: now_ms(),
                reference_site: shared.reference_site.clone(),
                policy_hints: PolicyHints {
                    request_interval_s: 30,
                    progress_interval_s: 10,
                },
            }
        }
        other => {
            let Some(host_id) = state.lock().await.host_id else {
                return error(ErrorCode::NotAuthenticated, "say Hello first");
            };
            authed(other, host_id, shared).await
        }
    }
}

async fn authed(req: Request, host_id: u64, shared: &Arc<Shared>) -> Response {
    let r = match req {
        Request::Benchmark {
            pages_per_s,
            kb_per_s,
            slots,
        } => shared
            .with_grid(move |g| g.benchmark(host_id, pages_per_s, kb_per_s, slots, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::RequestWork {
            want_seconds,
            free_slots,
            units_held,
        } => {
            let req = WorkRequest {
                want_seconds: want_seconds.min(MAX_WANT_SECONDS),
                free_slots,
                units_held,
            };
            shared
                .with_grid(move |g| g.request_work(host_id, &req, now_ms()))
                .await
                .map(|w| Response::Work {
                    units: w.units,
                    retry_after_s: w.retry_after_s,
                    rounds_open: w.rounds_open,
                })
        }
        Request::Progress {
            unit_id,
            pages,
            links,
        } => shared
            .with_grid(move |g| g.progress(host_id, unit_id, pages, links, now_ms()))
            .await
            .map(|p| match p {
                ProgressOutcome::Continue => Response::Continue,
                ProgressOutcome::Abort(reason) => Response::Abort { reason },
                ProgressOutcome::Extend(deadline_ms) => Response::Extend { deadline_ms },
            }),
        Request::Upload {
            unit_id,
            summary,
            link_file,
        } => shared
            .with_grid(move |g| g.upload(host_id, unit_id, summary, &link_file, now_ms()))
            .await
            .map(|o| match o {
                UploadOutcome::Accepted => Response::Accepted,
                UploadOutcome::Duplicate => Response::Duplicate,
                UploadOutcome::Rejected(reason) => Response::Rejected { reason },
            }),
        Request::Fail { unit_id, reason } => {
            let reason: String = reason.chars().take(MAX_TEXT_LEN).collect();
            shared
                .with_grid(move |g| g.fail(host_id, unit_id, &reason, now_ms()))
                .await
                .map(|_| Response::Ack)
        }
        Request::Leave => shared
            .with_grid(move |g| g.leave(host_id, now_ms()))
            .await
            .map(|_| Response::Ack),
        Request::Challenge | Request::Enrol { .. } | Request::Hello { .. } => {
            return error(ErrorCode::BadRequest, "already authenticated");
        }
    };
    r.unwrap_or_else(grid_error)
}
