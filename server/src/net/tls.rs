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
