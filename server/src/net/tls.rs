//! The endpoint and its TLS: the certificate and key loaded from PEM, the
//! certificate's fingerprint (what host proofs bind to), and the QUIC
//! endpoint with its limits, stateless-reset key and connection ids.
//!
//! Invariants: the stateless-reset key is derived from the TLS key, so it
//! survives a restart. It never handles a connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use beebot_shared::proto::ALPN;

use super::{IDLE_TIMEOUT, MAX_STREAMS_PER_CONNECTION};

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
    let socket = udp_socket(listen)?;
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

/// Receive and send buffer the server's UDP socket asks the kernel for.
/// Every host's packets arrive on this one socket: with Linux's default
/// (about 208 KiB) a burst of uploads overflowed it while the runtime was
/// busy, and each dropped packet cost its request a QUIC loss timeout
/// (hundreds of ms at p99). 7 MiB is what quic-go asks for; Linux grants at
/// most `net.core.rmem_max` (`wmem_max` for sending), doubled.
pub const UDP_BUFFER_BYTES: usize = 7 * 1024 * 1024;

/// A UDP socket bound to `listen` with [`UDP_BUFFER_BYTES`] asked for both
/// ways. A kernel that grants less is not an error: the server runs, and
/// says what it got and how to raise it.
fn udp_socket(listen: SocketAddr) -> Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(listen),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .with_context(|| format!("cannot open a UDP socket for {listen}"))?;
    // Asked before binding, so no packet arrives to the smaller buffer.
    let _ = socket.set_recv_buffer_size(UDP_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(UDP_BUFFER_BYTES);
    socket
        .bind(&listen.into())
        .with_context(|| format!("cannot bind UDP {listen}"))?;
    let got = socket.recv_buffer_size().unwrap_or(0);
    if got < UDP_BUFFER_BYTES {
        tracing::warn!(
            asked = UDP_BUFFER_BYTES,
            got,
            "the kernel gave the QUIC socket a smaller receive buffer than asked: \
             under load, packets can be dropped and requests wait for QUIC's loss timer \
             (raise it with: sysctl -w net.core.rmem_max={UDP_BUFFER_BYTES})"
        );
    } else {
        tracing::debug!(receive_buffer = got, "QUIC socket ready");
    }
    Ok(socket.into())
}

/// The stateless-reset key: an HMAC key derived from the TLS private key, so
/// it is the same after a restart (and secret as long as the TLS key is).
pub(super) fn reset_key(tls_key: &PrivateKeyDer<'_>) -> ring::hmac::Key {
    let mut material = b"beebot stateless reset v1".to_vec();
    material.extend_from_slice(tls_key.secret_der());
    let digest = beebot_shared::util::sha256(&material);
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &digest)
}

/// Random connection ids of [`CID_LEN`] bytes, with no per-process check.
pub(super) struct RandomIds;

/// Connection id length: 8 random bytes, as quinn's default.
pub(super) const CID_LEN: usize = 8;

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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn sysctl(name: &str) -> usize {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .expect("read sysctl")
            .trim()
            .parse()
            .expect("a number")
    }

    #[test]
    fn the_quic_socket_gets_the_buffers_it_asks_for_within_the_kernels_cap() {
        let socket = udp_socket("127.0.0.1:0".parse().expect("addr")).expect("socket");
        let s = socket2::SockRef::from(&socket);
        // Linux grants min(asked, cap), doubled for its bookkeeping.
        let recv = s.recv_buffer_size().expect("recv size");
        let send = s.send_buffer_size().expect("send size");
        let rmem = (2 * sysctl("rmem_max")).min(2 * UDP_BUFFER_BYTES);
        let wmem = (2 * sysctl("wmem_max")).min(2 * UDP_BUFFER_BYTES);
        assert_eq!(recv, rmem, "receive buffer");
        assert_eq!(send, wmem, "send buffer");
        assert!(
            recv > 2 * sysctl("rmem_default") || sysctl("rmem_max") <= sysctl("rmem_default"),
            "more than the default whenever the kernel allows it: {recv}"
        );
        assert!(socket.local_addr().expect("bound").port() > 0);
    }
}
