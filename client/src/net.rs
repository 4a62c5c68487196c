//! The client's QUIC link to the server: a pinned-certificate TLS verifier, one
//! frame per stream, and the challenge/proof handshake. The only client module
//! that knows quinn.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use beebot_shared::codec::{self, FRAME_HEADER_BYTES};
use beebot_shared::limits::MAX_FRAME_BYTES;
use beebot_shared::proto::{ErrorCode, Request, Response, ALPN};
use beebot_shared::sign;

/// Connecting (handshake included) must finish within this time.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// A request and its answer must finish within this time, plus the time to
/// send its bytes at [`SLOWEST_UPLOAD_BYTES_PER_S`]: a server that hangs holds
/// the work loop (and the slots it would refill) no longer than this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The slowest upload rate waited for before an upload is given up and retried.
const SLOWEST_UPLOAD_BYTES_PER_S: u64 = 16 * 1024;
/// No request waits longer than this, however large.
const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a request of `bytes` may take, answer included.
pub fn request_timeout(bytes: usize) -> Duration {
    (REQUEST_TIMEOUT + Duration::from_secs(bytes as u64 / SLOWEST_UPLOAD_BYTES_PER_S))
        .min(MAX_REQUEST_TIMEOUT)
}
/// Keep-alive so an idle connection survives between work requests.
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// A connection that hears nothing for this long is dead (a server that
/// vanished without a reset, a network that went away): the request fails and
/// the work loop reconnects with backoff.
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// Streams the server may push at once (`WorkAvailable` hints, one each).
const MAX_PUSHED_STREAMS: u32 = 4;
/// Largest pushed frame read: a hint is a few bytes.
const MAX_PUSHED_FRAME_BYTES: usize = 64;

/// Failures talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot resolve server address {0}")]
    Resolve(String),
    #[error("cannot reach the server: {0}")]
    Connect(String),
    #[error("connection lost: {0}")]
    Lost(String),
    #[error("the server took too long to answer")]
    Timeout,
    #[error("bad answer from the server: {0}")]
    Protocol(String),
    #[error("server refused ({code:?}): {message}")]
    Refused { code: ErrorCode, message: String },
    #[error(
        "the server at this address presented another certificate (SHA-256 {got}) than the \
         one this client was invited to trust ({expected}): refusing to talk to it"
    )]
    PinMismatch { expected: String, got: String },
}

impl NetError {
    /// Errors that will not go away by retrying.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            NetError::Refused {
                code: ErrorCode::Revoked
                    | ErrorCode::UnknownHost
                    | ErrorCode::Upgrade
                    | ErrorCode::BadInvite,
                ..
            } | NetError::PinMismatch { .. }
        )
    }
}

/// Accepts exactly one server certificate, by SHA-256, and still checks the
/// handshake signatures made with it.
#[derive(Debug)]
struct PinnedCert {
    fingerprint: [u8; 32],
    provider: Arc<CryptoProvider>,
    /// The fingerprint of a certificate refused, for the error message.
    refused: std::sync::Mutex<Option<[u8; 32]>>,
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = beebot_shared::util::sha256(end_entity.as_ref());
        if got == self.fingerprint {
            Ok(ServerCertVerified::assertion())
        } else {
            *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(got);
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The QUIC client configuration of a connection to the server whose
/// certificate has SHA-256 `cert_sha256`: TLS 1.3, the project's ALPN, the
/// certificate pinned (signatures still checked), keep-alives and the idle
/// timeout. Also returns the verifier, which remembers a refused certificate.
fn pinned_config(
    cert_sha256: [u8; 32],
) -> Result<(quinn::ClientConfig, Arc<PinnedCert>), NetError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pinned = Arc::new(PinnedCert {
        fingerprint: cert_sha256,
        provider: provider.clone(),
        refused: std::sync::Mutex::new(None),
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| NetError::Connect(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(pinned.clone())
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| NetError::Connect(e.to_string()))?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.keep_alive_interval(Some(KEEP_ALIVE));
    transport.max_concurrent_uni_streams(MAX_PUSHED_STREAMS.into());
    transport.max_idle_timeout(Some(
        IDLE_TIMEOUT
            .try_into()
            .map_err(|_| NetError::Connect("idle timeout".into()))?,
    ));
    cfg.transport_config(Arc::new(transport));
    Ok((cfg, pinned))
}

/// The QUIC client configuration `Link` connects with, for tools that
/// speak to the server stream by stream (the tests' hostile clients): the
/// server's certificate pinned by its SHA-256.
pub fn pinned_client_config(cert_sha256: [u8; 32]) -> Result<quinn::ClientConfig, NetError> {
    pinned_config(cert_sha256).map(|(cfg, _)| cfg)
}

/// Where the server is and how to recognise it.
#[derive(Clone, Debug)]
pub struct ServerId {
    pub addr: String,
    pub server_name: String,
    pub cert_sha256: [u8; 32],
}

/// One QUIC connection to the server.
pub struct Link {
    conn: quinn::Connection,
    _endpoint: quinn::Endpoint,
    fingerprint: [u8; 32],
    /// Set when the server pushes `WorkAvailable` (see [`Link::take_work_hint`]).
    work_hint: Arc<std::sync::atomic::AtomicBool>,
    /// Reads the server's pushed streams; ends with the connection or the link.
    pushes: tokio::task::JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.pushes.abort();
    }
}

/// Read the streams the server pushes on `conn` (each one frame, at most
/// [`MAX_PUSHED_FRAME_BYTES`]) until it closes; a `WorkAvailable` sets `hint`.
async fn read_pushes(conn: quinn::Connection, hint: Arc<std::sync::atomic::AtomicBool>) {
    while let Ok(mut recv) = conn.accept_uni().await {
        let Ok(frame) = recv.read_to_end(MAX_PUSHED_FRAME_BYTES).await else {
            continue;
        };
        match codec::decode_frame::<Response>(&frame) {
            Ok(Response::WorkAvailable) => {
                hint.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(other) => tracing::debug!("ignored a pushed message: {other:?}"),
            Err(e) => tracing::debug!("ignored a pushed frame: {e}"),
        }
    }
}

impl Link {
    /// Connect, pinning the certificate.
    pub async fn connect(server: &ServerId) -> Result<Link, NetError> {
        Link::connect_from(server, None).await
    }

    /// Connect from a given local address (tests and the load generator play
    /// hosts on several loopback addresses); `None`: any.
    pub async fn connect_from(
        server: &ServerId,
        local: Option<SocketAddr>,
    ) -> Result<Link, NetError> {
        let addr: SocketAddr = tokio::net::lookup_host(&server.addr)
            .await
            .map_err(|e| NetError::Resolve(format!("{}: {e}", server.addr)))?
            .next()
            .ok_or_else(|| NetError::Resolve(server.addr.clone()))?;
        let (cfg, pinned) = pinned_config(server.cert_sha256)?;
        let bind: SocketAddr = if let Some(local) = local {
            local
        } else if addr.is_ipv6() {
            "[::]:0"
                .parse()
                .map_err(|_| NetError::Connect("bind".into()))?
        } else {
            "0.0.0.0:0"
                .parse()
                .map_err(|_| NetError::Connect("bind".into()))?
        };
        let mut endpoint =
            quinn::Endpoint::client(bind).map_err(|e| NetError::Connect(e.to_string()))?;
        endpoint.set_default_client_config(cfg);
        let connecting = endpoint
            .connect(addr, &server.server_name)
            .map_err(|e| NetError::Connect(e.to_string()))?;
        let conn = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| NetError::Timeout)?
            .map_err(
                |e| match *pinned.refused.lock().unwrap_or_else(|p| p.into_inner()) {
                    Some(got) => NetError::PinMismatch {
                        expected: hex::encode(server.cert_sha256),
                        got: hex::encode(got),
                    },
                    None => NetError::Connect(e.to_string()),
                },
            )?;
        let work_hint = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pushes = tokio::spawn(read_pushes(conn.clone(), work_hint.clone()));
        Ok(Link {
            conn,
            _endpoint: endpoint,
            fingerprint: server.cert_sha256,
            work_hint,
            pushes,
        })
    }

    /// Send raw bytes as one request and read one framed response.
    pub async fn raw_request(&self, frame: &[u8]) -> Result<Response, NetError> {
        tokio::time::timeout(request_timeout(frame.len()), async {
            let (mut send, mut recv) = self
                .conn
                .open_bi()
                .await
                .map_err(|e| NetError::Lost(e.to_string()))?;
            send.write_all(frame)
                .await
                .map_err(|e| NetError::Lost(e.to_string()))?;
            let _ = send.finish();
            let mut header = [0u8; FRAME_HEADER_BYTES];
            recv.read_exact(&mut header)
                .await
                .map_err(|e| NetError::Lost(e.to_string()))?;
            let len = codec::frame_len(header, MAX_FRAME_BYTES)
                .map_err(|e| NetError::Protocol(e.to_string()))?;
            let mut payload = vec![0u8; len];
            recv.read_exact(&mut payload)
                .await
                .map_err(|e| NetError::Lost(e.to_string()))?;
            codec::decode_payload::<Response>(&payload)
                .map_err(|e| NetError::Protocol(e.to_string()))
        })
        .await
        .map_err(|_| NetError::Timeout)?
    }

    /// One request, one response. A server `Error` becomes [`NetError::Refused`].
    pub async fn request(&self, req: &Request) -> Result<Response, NetError> {
        let frame = codec::encode_frame(req).map_err(|e| NetError::Protocol(e.to_string()))?;
        match self.raw_request(&frame).await? {
            Response::Error { code, message } => Err(NetError::Refused { code, message }),
            other => Ok(other),
        }
    }

    async fn challenge(&self) -> Result<[u8; 32], NetError> {
        match self.request(&Request::Challenge).await? {
            Response::Nonce { nonce } => Ok(nonce),
            other => Err(NetError::Protocol(format!(
                "expected a nonce, got {other:?}"
            ))),
        }
    }

    /// Ask the server to prove it holds `project_key` (the invite's) for a
    /// fresh nonce of ours and this connection's pinned certificate.
    /// `Ok(false)`: it answered with a proof that key does not verify.
    pub async fn proves_project(&self, project_key: &[u8; 32]) -> Result<bool, NetError> {
        let nonce: [u8; 32] = rand::random();
        match self.request(&Request::ProveProject { nonce }).await? {
            Response::ProjectProof { signature } => {
                Ok(
                    sign::check_enrol_proof(project_key, &nonce, &self.fingerprint, &signature)
                        .is_ok(),
                )
            }
            other => Err(NetError::Protocol(format!(
                "expected a project proof, got {other:?}"
            ))),
        }
    }

    /// Enrol with an invite token; returns the new host id.
    pub async fn enrol(
        &self,
        token: Vec<u8>,
        key: &ed25519_dalek::SigningKey,
        host_info: beebot_shared::proto::HostInfo,
    ) -> Result<u64, NetError> {
        let nonce = self.challenge().await?;
        let proof = sign::make_proof(key, &nonce, &self.fingerprint);
        match self
            .request(&Request::Enrol {
                token,
                host_key: key.verifying_key().to_bytes(),
                host_info,
                proof,
            })
            .await?
        {
            Response::Enrolled { host_id } => Ok(host_id),
            other => Err(NetError::Protocol(format!(
                "expected Enrolled, got {other:?}"
            ))),
        }
    }

    /// Authenticate as an enrolled host; returns the server's `Welcome`.
    pub async fn hello(
        &self,
        host_id: u64,
        key: &ed25519_dalek::SigningKey,
    ) -> Result<Response, NetError> {
        let nonce = self.challenge().await?;
        let proof = sign::make_proof(key, &nonce, &self.fingerprint);
        match self.request(&Request::Hello { host_id, proof }).await? {
            w @ Response::Welcome { .. } => Ok(w),
            other => Err(NetError::Protocol(format!(
                "expected Welcome, got {other:?}"
            ))),
        }
    }

    /// Whether the server said work is available since the last call.
    pub fn take_work_hint(&self) -> bool {
        self.work_hint
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// The connection is still up (not closed by either side, not timed out).
    pub fn is_open(&self) -> bool {
        self.conn.close_reason().is_none()
    }

    pub fn close(&self) {
        self.conn.close(0u32.into(), b"bye");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeouts_grow_with_the_bytes_and_are_capped() {
        assert_eq!(request_timeout(200), REQUEST_TIMEOUT);
        assert_eq!(
            request_timeout(1024 * 1024),
            REQUEST_TIMEOUT + Duration::from_secs(64)
        );
        assert_eq!(request_timeout(usize::MAX), MAX_REQUEST_TIMEOUT);
        assert!(request_timeout(MAX_FRAME_BYTES) <= MAX_REQUEST_TIMEOUT);
    }

    /// The client's QUIC endpoint is made on an IPv4 socket and its first
    /// packet (an Initial, padded to 1,200 bytes) reaches an IPv4 server:
    /// quinn-udp's socket set-up, on every platform the tests run on
    /// (Windows under Wine included).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_client_endpoint_reaches_an_ipv4_server() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let to = server.local_addr().unwrap();
        let endpoint = quinn::Endpoint::client("0.0.0.0:0".parse().unwrap()).expect("endpoint");
        let (cfg, _) = pinned_config([0; 32]).unwrap();
        let _connecting = endpoint.connect_with(cfg, to, "beebot").unwrap();
        let (n, from) = tokio::task::spawn_blocking(move || {
            let mut buf = [0u8; 2048];
            server.recv_from(&mut buf)
        })
        .await
        .unwrap()
        .expect("no packet reached the server");
        assert!(n >= 1200, "{n} bytes");
        assert!(from.ip().is_loopback(), "{from}");
    }
}
