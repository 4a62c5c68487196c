//! The QUIC endpoint: TLS setup, connection handling, and one request/response
//! per bidirectional stream. The only server module that knows quinn.
//!
//! Each connection starts unauthenticated with a fresh nonce. `Enrol` and
//! `Hello` prove the host key over nonce ‖ certificate fingerprint; the nonce
//! is then spent. `ProveProject` (before `Enrol`, unauthenticated: answered from `Shared`'s copy of the key, without the grid lock or a store sync) answers a joining client's
//! nonce with the project key's enrolment proof, so the client knows its
//! invite's key is this server's. Anything malformed gets an error answer,
//! never a panic.
//!
//! Limits, each a named constant below: connections in all, unauthenticated
//! connections per source address (IPv4 address or IPv6 /64; a flood from one
//! address is refused at the door and cannot starve others), time to
//! authenticate, connections per host (a newer one closes the oldest), streams
//! per connection, frame size (small until the connection is authenticated),
//! bytes of requests held in memory at once (per host, per unauthenticated
//! source, and in all), the time a frame's body may take after its header,
//! and held units a work request may name. Under a flood of handshakes (or
//! always, with `quic_retry`) a client's address is validated with a QUIC
//! Retry before any state is kept for it. The endpoint's stateless-reset key is derived from the TLS
//! key, so a restarted server resets the connections of its previous life at
//! once instead of leaving clients to wait for an idle timeout.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::{Mutex, Semaphore};

use beebot_shared::codec::{self, CodecError, FRAME_HEADER_BYTES};
use beebot_shared::limits::{
    MAX_FRAME_BYTES, MAX_TEXT_LEN, MAX_UNITS_HELD, MAX_WANT_SECONDS, MAX_WINDOW_INTERVALS,
    NONCE_LEN,
};
use beebot_shared::linkfile::ScanSummary;
use beebot_shared::proto::{ErrorCode, PolicyHints, Request, Response, ALPN};
use beebot_shared::sign;

use crate::grid::{
    GridError, ProgressOutcome, StateAnswer, StateFile, UploadOutcome, UploadStep, WorkRequest,
};
use crate::{now_ms, Shared};

/// Streams one connection may have open at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 8;
/// A connection idle this long is closed (clients keep alive while busy).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 4096;
/// A request must arrive whole within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections from one address that have not (yet) authenticated, handshakes
/// included. Hosts behind one NAT authenticate within a round trip or two, so
/// only a flood comes near this.
pub const MAX_UNAUTHENTICATED_PER_ADDRESS: u32 = 64;
/// A `WorkAvailable` push that the host does not take within this time is
/// given up (the host asks at its `retry_after` anyway).
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that has not said `Hello` (or enrolled) within this time is closed.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one enrolled host may hold; a newer one closes the oldest (a
/// client that lost its network leaves a connection behind until it idles out).
pub const MAX_CONNECTIONS_PER_HOST: usize = 4;
/// Largest frame an unauthenticated connection may send (`Enrol` is the
/// largest such request: a key, a token, a proof and a few short texts).
pub const MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 16 * 1024;
/// Bytes of request frames held in memory at once, over all connections:
/// uploads wait for room rather than grow the heap (five of the largest
/// uploads, link file and scan state; typical ones are a few hundred KB).
pub const MAX_INFLIGHT_REQUEST_BYTES: usize = 256 * 1024 * 1024;
/// Bytes of request frames one authenticated host may hold in memory at once,
/// over all its connections: two of the largest uploads, so a host that
/// claims large frames and sends nothing holds at most this share of
/// [`MAX_INFLIGHT_REQUEST_BYTES`] and the other hosts keep uploading.
pub const MAX_HOST_INFLIGHT_REQUEST_BYTES: usize = 2 * MAX_FRAME_BYTES;
/// Bytes of request frames held at once by the unauthenticated connections of
/// one source (address or /64): its connections' streams of challenges and
/// proofs, a few hundred bytes each, with room.
pub const MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE: usize = 1024 * 1024;
/// Bytes of request frames held at once by all unauthenticated connections:
/// a pool apart from the hosts', so strangers never delay an upload.
pub const MAX_UNAUTHENTICATED_INFLIGHT_BYTES: usize = 64 * 1024 * 1024;
/// Time a frame's body may take after its header (once there is room for it)
/// before [`MIN_BODY_BYTES_PER_S`] applies: a few round trips and a slow start.
pub const BODY_GRACE: Duration = Duration::from_secs(10);
/// Slowest a body may arrive after [`BODY_GRACE`]: the slowest uplink the
/// client allows for in its own request timeout. A silent or dripping body is
/// cut and its budget freed; a large upload on a slow link still arrives.
pub const MIN_BODY_BYTES_PER_S: u64 = 16 * 1024;
/// Handshakes from unvalidated addresses in progress at once beyond which new
/// ones must first prove their address with a QUIC Retry (one round trip
/// more): honest handshakes take a round trip or two, so only a flood (maybe
/// from spoofed addresses) keeps this many open.
pub const RETRY_ABOVE_UNVALIDATED_HANDSHAKES: usize = 128;
/// Application close code for a connection closed by a limit.
const CLOSE_LIMIT: u32 = 2;

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
    crate::config::check_private(key_path)?;
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
    let reset_key = reset_key(&key);
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
    let socket =
        std::net::UdpSocket::bind(listen).with_context(|| format!("cannot bind UDP {listen}"))?;
    let mut endpoint_cfg = quinn::EndpointConfig::new(Arc::new(reset_key));
    // quinn's default connection ids carry a hash under a per-process key and
    // packets whose ids fail it are dropped silently; plain random ids let the
    // restarted server answer its previous life's connections with a reset
    // (quinn rate-limits resets).
    endpoint_cfg.cid_generator(|| Box::new(RandomIds));
    quinn::Endpoint::new(
        endpoint_cfg,
        Some(cfg),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .with_context(|| format!("cannot serve QUIC on {listen}"))
}

/// The stateless-reset key: an HMAC key derived from the TLS private key, so
/// it is the same after a restart (and secret as long as the TLS key is).
fn reset_key(tls_key: &PrivateKeyDer<'_>) -> ring::hmac::Key {
    let mut material = b"beebot stateless reset v1".to_vec();
    material.extend_from_slice(tls_key.secret_der());
    let digest = beebot_shared::util::sha256(&material);
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &digest)
}

/// Random connection ids of [`CID_LEN`] bytes, with no per-process check.
struct RandomIds;

/// Connection id length: 8 random bytes, as quinn's default.
const CID_LEN: usize = 8;

impl quinn::ConnectionIdGenerator for RandomIds {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let bytes: [u8; CID_LEN] = rand::random();
        quinn::ConnectionId::new(&bytes)
    }
    fn cid_len(&self) -> usize {
        CID_LEN
    }
    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The source a connection is counted against before it authenticates: an
/// IPv4 address, or an IPv6 /64 (one subscriber's prefix: a host given a /64
/// may use any of its 2^64 addresses, so counting addresses counts nothing).
fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Whose in-flight budget a request is charged to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum BudgetOwner {
    /// An unauthenticated connection's source ([`source_key`]).
    Source(IpAddr),
    /// An authenticated host, over all its connections.
    Host(u64),
}

/// Limits shared by every connection.
struct Limits {
    /// Unauthenticated connections per source ([`source_key`]).
    unauthenticated: std::sync::Mutex<HashMap<IpAddr, u32>>,
    /// Live authenticated connections per host, oldest first.
    hosts: std::sync::Mutex<HashMap<u64, Vec<quinn::Connection>>>,
    /// Bytes of request frames in memory, authenticated connections.
    inflight_bytes: Arc<Semaphore>,
    /// Bytes of request frames in memory, unauthenticated connections.
    unauthenticated_bytes: Arc<Semaphore>,
    /// Each host's and source's own in-flight budget; an entry lives while a
    /// connection or a request holds it.
    budgets: std::sync::Mutex<HashMap<BudgetOwner, Weak<Semaphore>>>,
    /// Handshakes from unvalidated addresses in progress.
    unvalidated_handshakes: Arc<AtomicUsize>,
}

impl Limits {
    fn new() -> Limits {
        Limits {
            unauthenticated: std::sync::Mutex::new(HashMap::new()),
            hosts: std::sync::Mutex::new(HashMap::new()),
            inflight_bytes: Arc::new(Semaphore::new(MAX_INFLIGHT_REQUEST_BYTES)),
            unauthenticated_bytes: Arc::new(Semaphore::new(MAX_UNAUTHENTICATED_INFLIGHT_BYTES)),
            budgets: std::sync::Mutex::new(HashMap::new()),
            unvalidated_handshakes: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// `owner`'s own in-flight budget (made on first use).
    fn budget(&self, owner: BudgetOwner) -> Arc<Semaphore> {
        let mut m = self.budgets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = m.get(&owner).and_then(Weak::upgrade) {
            return b;
        }
        // Entries of owners gone: dropped once they could outnumber the
        // connections that may hold one.
        if m.len() >= MAX_CONNECTIONS {
            m.retain(|_, b| b.strong_count() > 0);
        }
        let bytes = match owner {
            BudgetOwner::Source(_) => MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE,
            BudgetOwner::Host(_) => MAX_HOST_INFLIGHT_REQUEST_BYTES,
        };
        let b = Arc::new(Semaphore::new(bytes));
        m.insert(owner, Arc::downgrade(&b));
        b
    }

    /// Count a new unauthenticated connection from `ip`'s source, or refuse it.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<UnauthenticatedSlot> {
        let ip = source_key(ip);
        let mut m = self
            .unauthenticated
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_UNAUTHENTICATED_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(UnauthenticatedSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// Note an authenticated connection of `host_id`; close its oldest ones
    /// beyond [`MAX_CONNECTIONS_PER_HOST`].
    fn register_host(&self, host_id: u64, conn: &quinn::Connection) {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let conns = m.entry(host_id).or_default();
        conns.retain(|c| c.close_reason().is_none() && c.stable_id() != conn.stable_id());
        conns.push(conn.clone());
        while conns.len() > MAX_CONNECTIONS_PER_HOST {
            let old = conns.remove(0);
            old.close(
                CLOSE_LIMIT.into(),
                b"too many connections from this host; closing the oldest",
            );
        }
    }

    fn unregister_host(&self, host_id: u64, conn: &quinn::Connection) {
        let mut m = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conns) = m.get_mut(&host_id) {
            conns.retain(|c| c.stable_id() != conn.stable_id());
            if conns.is_empty() {
                m.remove(&host_id);
            }
        }
    }
}

/// One unauthenticated connection counted against its source; released on
/// drop (authentication or close).
struct UnauthenticatedSlot {
    limits: Arc<Limits>,
    ip: IpAddr,
}

impl Drop for UnauthenticatedSlot {
    fn drop(&mut self) {
        let mut m = self
            .limits
            .unauthenticated
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

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
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Per-connection authentication state.
struct ConnState {
    conn: quinn::Connection,
    nonce: Option<[u8; NONCE_LEN]>,
    host_id: Option<u64>,
    /// The host's name, for log lines.
    host_name: String,
    /// Held while the connection is unauthenticated.
    unauthenticated: Option<UnauthenticatedSlot>,
    /// The in-flight budget requests are charged to: the source's until the
    /// connection authenticates, then the host's.
    budget: Arc<Semaphore>,
}

impl ConnState {
    /// The connection proved a host key: it no longer counts as unauthenticated.
    fn authenticated(&mut self, host_id: u64, limits: &Limits) {
        self.host_id = Some(host_id);
        self.unauthenticated = None;
        self.budget = limits.budget(BudgetOwner::Host(host_id));
        limits.register_host(host_id, &self.conn);
    }
}

async fn handle_connection(
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
async fn push_work_hint(conn: quinn::Connection) {
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
            write_response(&mut send, &error(ErrorCode::BadRequest, e.to_string())).await;
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
    let resp = match codec::decode_payload::<Request>(&payload) {
        Ok(req) => {
            drop(payload);
            dispatch(req, &shared, &state, &limits).await
        }
        Err(e @ CodecError::Version { .. }) => error(ErrorCode::Upgrade, e.to_string()),
        Err(e) => error(ErrorCode::BadRequest, e.to_string()),
    };
    let resp = match shared.store_failure() {
        // Fail-stop: after a storage failure nothing may be acknowledged.
        Some(why) => error(
            ErrorCode::Internal,
            format!("server storage failed ({why}); it must be restarted"),
        ),
        None => resp,
    };
    write_response(&mut send, &resp).await;
}

/// An upload in three steps, so that decoding the link file and making it
/// durable (two fsyncs) run outside the grid lock and concurrent uploads
/// share the disk instead of queueing behind one another.
async fn upload(
    shared: &Arc<Shared>,
    host_id: u64,
    unit_id: u64,
    summary: ScanSummary,
    link_file: Vec<u8>,
    state: Option<Vec<u8>>,
) -> Result<Response, GridError> {
    let plan = match shared
        .with_grid(move |g| g.upload_begin(host_id, unit_id, now_ms()))
        .await?
    {
        UploadStep::Answer(o) => return Ok(upload_response(o)),
        UploadStep::Plan(p) => p,
    };
    // One upload of a unit in flight: a repeat (a flood, or a client that
    // timed out and sent it again) is answered at once, undecoded, with an
    // answer the client retries later (by then the first one has decided).
    let Some(slot) = shared.upload_slot(unit_id) else {
        return Ok(error(
            ErrorCode::Internal,
            format!("an upload of unit {unit_id} is in progress: try again later"),
        ));
    };
    // Held by the blocking work too: a request dropped mid-way frees the
    // unit only once its decoding has stopped.
    let slot = Arc::new(slot);
    let held = slot.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let checked = match plan.verify(&summary, &link_file, state.as_deref()) {
            Ok(info) => plan
                .write(&link_file, info.state.as_ref())
                .map(|()| Ok(info)),
            Err(reason) => Ok(Err(reason)),
        };
        drop(held);
        (plan, summary, checked)
    })
    .await;
    let (plan, summary, checked) = match checked {
        Ok(x) => x,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let outcome = match checked? {
        Ok(info) => {
            shared
                .with_grid(move |g| g.upload_finish(&plan, summary, info, now_ms()))
                .await
        }
        Err(reason) => {
            shared
                .with_grid(move |g| g.upload_refused(&plan, reason, now_ms()))
                .await
        }
    };
    drop(slot);
    outcome.map(upload_response)
}

fn upload_response(o: UploadOutcome) -> Response {
    match o {
        UploadOutcome::Accepted => Response::Accepted,
        UploadOutcome::Duplicate => Response::Duplicate,
        UploadOutcome::Rejected(reason) => Response::Rejected { reason },
    }
}

/// A continuation's scan state, read outside the grid lock and checked
/// against the digest its unit names. A state that is gone or damaged
/// cannot be continued from: the host is told to drop the unit (and the
/// server's log says why).
async fn read_state(file: StateFile) -> Result<Response, GridError> {
    let (shown, sha) = (file.location(), file.sha256);
    let read = tokio::task::spawn_blocking(move || file.read())
        .await
        .map_err(|e| GridError::Io(std::io::Error::other(e.to_string())))?;
    let reason = match read {
        Ok(bytes) if beebot_shared::scanstate::state_sha256(&bytes) == sha => {
            return Ok(Response::State { bytes })
        }
        Ok(_) => "the stored scan state does not match its unit".to_string(),
        Err(e) => format!("the stored scan state cannot be read: {e}"),
    };
    tracing::error!(state = %shown, "{reason}");
    Ok(Response::Abort { reason })
}

/// When the body must be whole by, given `received` bytes of it so far:
/// [`BODY_GRACE`] after it was let in, plus its bytes so far at
/// [`MIN_BODY_BYTES_PER_S`]. A body arriving at least that fast never meets it.
fn body_deadline(start: tokio::time::Instant, received: usize) -> tokio::time::Instant {
    start + BODY_GRACE + Duration::from_secs_f64(received as f64 / MIN_BODY_BYTES_PER_S as f64)
}

/// Read exactly `len` payload bytes, growing the buffer as data arrives, at
/// least as fast as [`body_deadline`] requires.
/// `Err(Some(_))`: the peer ended the stream early or sent too slowly
/// (answerable); `Err(None)`: the stream broke.
async fn read_payload(recv: &mut quinn::RecvStream, len: usize) -> Result<Vec<u8>, Option<String>> {
    /// Most bytes preallocated before they arrive.
    const PREALLOCATE: usize = 64 * 1024;
    let start = tokio::time::Instant::now();
    let mut payload = Vec::with_capacity(len.min(PREALLOCATE));
    while payload.len() < len {
        let deadline = body_deadline(start, payload.len());
        let chunk = tokio::time::timeout_at(deadline, recv.read_chunk(len - payload.len(), true));
        match chunk.await {
            Ok(Ok(Some(chunk))) => payload.extend_from_slice(&chunk.bytes),
            Ok(Ok(None)) => {
                return Err(Some(format!(
                    "truncated frame: {} of {len} bytes before the stream ended",
                    payload.len()
                )))
            }
            Ok(Err(_)) => return Err(None),
            Err(_) => {
                return Err(Some(format!(
                    "the frame's body came too slowly: {} of {len} bytes in {:.0} s \
                     (a body may take {} s, then must keep up {} KiB/s)",
                    payload.len(),
                    start.elapsed().as_secs_f64(),
                    BODY_GRACE.as_secs(),
                    MIN_BODY_BYTES_PER_S / 1024
                )))
            }
        }
    }
    Ok(payload)
}

fn grid_error(e: GridError) -> Response {
    match e {
        GridError::UnknownHost(_) => error(ErrorCode::UnknownHost, e.to_string()),
        GridError::Revoked(_) => error(ErrorCode::Revoked, e.to_string()),
        GridError::BadInvite => error(ErrorCode::BadInvite, e.to_string()),
        GridError::KeyEnrolled(_)
        | GridError::Invalid(_)
        | GridError::UnknownRound(_)
        | GridError::UnknownInvite(_)
        | GridError::NameTaken { .. }
        | GridError::UnknownHostName(_)
        | GridError::AmbiguousHostName { .. }
        | GridError::SameSite { .. } => error(ErrorCode::BadRequest, e.to_string()),
        GridError::Store(_) | GridError::Io(_) | GridError::Sign(_) => {
            tracing::error!("request failed: {e}");
            error(ErrorCode::Internal, format!("server error: {e}"))
        }
    }
}

async fn dispatch(
    req: Request,
    shared: &Arc<Shared>,
    state: &Arc<Mutex<ConnState>>,
    limits: &Limits,
) -> Response {
    let fp = shared.cert_fingerprint;
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
        } => {
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
        Request::Hello { host_id, proof } => {
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
                    progress_interval_s: 10,
                },
            }
        }
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

async fn authed(req: Request, host_id: u64, name: &str, shared: &Arc<Shared>) -> Response {
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
            open_windows,
        } => {
            if units_held.len() > MAX_UNITS_HELD {
                return error(
                    ErrorCode::BadRequest,
                    format!(
                        "a work request may name at most {MAX_UNITS_HELD} held units; this one names {}",
                        units_held.len()
                    ),
                );
            }
            let req = WorkRequest {
                want_seconds: want_seconds.min(MAX_WANT_SECONDS),
                free_slots,
                units_held,
                open_windows: open_windows.map(|mut w| {
                    w.truncate(MAX_WINDOW_INTERVALS);
                    w
                }),
            };
            shared
                .with_grid(move |g| g.request_work(host_id, &req, now_ms()))
                .await
                .map(|w| Response::Work {
                    units: w.units,
                    retry_after_s: w.retry_after_s,
                    rounds_open: w.rounds_open,
                    cancelled_units: w.cancelled_units,
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
            state,
        } => {
            let r = upload(shared, host_id, unit_id, summary, link_file, state).await;
            if let Ok(Response::Rejected { reason }) = &r {
                tracing::warn!(host_id, host = ?name, unit = unit_id, "upload refused: {reason:?}");
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
        Request::FetchState { unit_id } => {
            match shared
                .with_grid(move |g| g.state_of_unit(host_id, unit_id))
                .await
            {
                Ok(StateAnswer::Read(file)) => read_state(file).await,
                Ok(StateAnswer::Abort(reason)) => Ok(Response::Abort { reason }),
                Err(e) => Err(e),
            }
        }
        Request::Challenge
        | Request::Enrol { .. }
        | Request::Hello { .. }
        | Request::ProveProject { .. } => {
            return error(ErrorCode::BadRequest, "already authenticated");
        }
    };
    r.unwrap_or_else(|e| {
        if !matches!(
            e,
            GridError::Store(_) | GridError::Io(_) | GridError::Sign(_)
        ) {
            tracing::warn!(host_id, host = ?name, "request refused: {:?}", e.to_string());
        }
        grid_error(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_prefixes_of_64_bits() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // IPv4: each address its own source.
        assert_eq!(source_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(source_key(ip("192.0.2.7")), source_key(ip("192.0.2.8")));
        // IPv6: every address of one /64 is one source...
        let a = source_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"));
        assert_eq!(a, ip("2001:db8:1:2::"));
        assert_eq!(a, source_key(ip("2001:db8:1:2::1")));
        assert_eq!(a, source_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
        // ...and the next /64 another.
        assert_ne!(a, source_key(ip("2001:db8:1:3::1")));
        assert_ne!(a, source_key(ip("2001:db8:1:1:ffff:ffff:ffff:ffff")));
        // An IPv4-mapped address is its IPv4 source, not the ::ffff:0:0/64.
        assert_eq!(source_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(
            source_key(ip("::ffff:192.0.2.7")),
            source_key(ip("::ffff:192.0.2.8"))
        );
    }

    #[test]
    fn a_flood_from_one_ipv6_prefix_is_counted_as_one_source() {
        let limits = Arc::new(Limits::new());
        let mut held = Vec::new();
        for i in 0..MAX_UNAUTHENTICATED_PER_ADDRESS {
            let addr = Ipv6Addr::from(
                0x2001_0db8_0000_0001_0000_0000_0000_0000u128 + u128::from(i) * 7919,
            );
            held.push(limits.admit(IpAddr::V6(addr)).expect("under the cap"));
        }
        let next = IpAddr::V6("2001:db8:0:1:dead:beef::1".parse().expect("ip"));
        assert!(limits.admit(next).is_none(), "the /64 is full");
        let other = IpAddr::V6("2001:db8:0:2::1".parse().expect("ip"));
        assert!(limits.admit(other).is_some(), "another /64 is not");
        held.pop();
        assert!(limits.admit(next).is_some(), "a slot freed is free again");
    }

    #[test]
    fn budgets_are_per_owner_and_within_the_shared_one() {
        const { assert!(MAX_HOST_INFLIGHT_REQUEST_BYTES >= MAX_FRAME_BYTES) };
        const { assert!(MAX_HOST_INFLIGHT_REQUEST_BYTES < MAX_INFLIGHT_REQUEST_BYTES) };
        const { assert!(MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE >= MAX_UNAUTHENTICATED_FRAME_BYTES) };
        const { assert!(MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE < MAX_UNAUTHENTICATED_INFLIGHT_BYTES) };
        let limits = Limits::new();
        let a = limits.budget(BudgetOwner::Host(1));
        assert!(Arc::ptr_eq(&a, &limits.budget(BudgetOwner::Host(1))));
        assert!(!Arc::ptr_eq(&a, &limits.budget(BudgetOwner::Host(2))));
        assert_eq!(a.available_permits(), MAX_HOST_INFLIGHT_REQUEST_BYTES);
        drop(a);
        // Gone with its last holder: a fresh one is full.
        assert_eq!(
            limits.budget(BudgetOwner::Host(1)).available_permits(),
            MAX_HOST_INFLIGHT_REQUEST_BYTES
        );
    }

    #[test]
    fn a_body_at_the_minimum_rate_never_meets_its_deadline() {
        let start = tokio::time::Instant::now();
        assert_eq!(body_deadline(start, 0), start + BODY_GRACE);
        let mib = 1024 * 1024;
        assert_eq!(
            body_deadline(start, mib),
            start + BODY_GRACE + Duration::from_secs(mib as u64 / MIN_BODY_BYTES_PER_S)
        );
        // The client's side of this limit (it waits at least this long) is
        // checked in `tools/tests/agreed_limits.rs`.
    }
}
