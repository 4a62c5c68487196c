//! The endpoint and its TLS: the certificate and key loaded from PEM, the
//! certificate's fingerprint (what host proofs bind to), and the QUIC
//! endpoint with its limits, stateless-reset key and connection ids.
//!
//! Invariants: the stateless-reset key is derived from the TLS key, so it
//! survives a restart. It never handles a connection.
//!
//! The one UDP socket asks for `UDP_BUFFER_BYTES` (4 MiB) both ways and warns,
//! with the `sysctl` to run, when the kernel grants less: a full receive buffer
//! drops packets, each a QUIC loss timeout.

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
/// (hundreds of ms at p99). With 4 MiB the load generator's default load
/// dropped none. Linux grants at most `net.core.rmem_max` (`wmem_max` for
/// sending).
pub const UDP_BUFFER_BYTES: usize = 4 * 1024 * 1024;

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
    let recv = granted(socket.recv_buffer_size().unwrap_or(0));
    let send = granted(socket.send_buffer_size().unwrap_or(0));
    for (way, got, sysctl) in [("receive", recv, "rmem_max"), ("send", send, "wmem_max")] {
        if got < UDP_BUFFER_BYTES {
            tracing::warn!(
                asked = UDP_BUFFER_BYTES,
                got,
                "the kernel gave the QUIC socket a smaller {way} buffer than asked: \
                 under load, packets can be dropped and requests wait for QUIC's loss \
                 timer (raise it with: sysctl -w net.core.{sysctl}={UDP_BUFFER_BYTES})"
            );
        }
    }
    tracing::debug!(
        receive_buffer = recv,
        send_buffer = send,
        "QUIC socket ready"
    );
    Ok(socket.into())
}

/// The buffer a socket got, from what `getsockopt` says: Linux reports
/// twice what it granted (the other half is its bookkeeping).
fn granted(reported: usize) -> usize {
    if cfg!(target_os = "linux") {
        reported / 2
    } else {
        reported
    }
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

    /// A cap of the kernel's, when this network namespace shows it.
    fn sysctl(name: &str) -> Option<usize> {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    #[test]
    fn the_quic_socket_gets_the_buffers_it_asks_for_within_the_kernels_cap() {
        let socket = udp_socket("127.0.0.1:0".parse().expect("addr")).expect("socket");
        assert!(socket.local_addr().expect("bound").port() > 0);
        let s = socket2::SockRef::from(&socket);
        let recv = granted(s.recv_buffer_size().expect("recv size"));
        let send = granted(s.send_buffer_size().expect("send size"));
        // Each way: what was asked, or the kernel's cap when lower. (A
        // container's own network namespace does not show the caps: the
        // buffers are then at least Linux's smallest default.)
        match (sysctl("rmem_max"), sysctl("wmem_max")) {
            (Some(rmem), Some(wmem)) => {
                assert_eq!(recv, UDP_BUFFER_BYTES.min(rmem), "receive buffer");
                assert_eq!(send, UDP_BUFFER_BYTES.min(wmem), "send buffer");
            }
            _ => assert!(recv >= 4096 && send >= 4096, "{recv} {send}"),
        }
    }

    #[test]
    fn a_grant_is_half_what_linux_reports() {
        assert_eq!(granted(2 * UDP_BUFFER_BYTES), UDP_BUFFER_BYTES);
        assert!(granted(2 * UDP_BUFFER_BYTES - 2) < UDP_BUFFER_BYTES);
    }
}
