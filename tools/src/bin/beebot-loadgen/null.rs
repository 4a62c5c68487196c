//! `--null-server`: the transport's own cost. A process that answers the
//! load over the server's own QUIC endpoint (`beebot_server::net::endpoint`:
//! its TLS, transport limits and socket buffers) and the protocol's framing,
//! and does nothing else: no store, no grid, no policy, no signature, no
//! link-file check. Its CPU at a load is what any server of this protocol
//! pays before its first line of work, on the same machine beside the same
//! load generator.
//!
//! Its answers have the real ones' shapes: a work request holding fewer
//! than the host's slots gets one unit (unsigned, a real unit's fields and
//! size, a default round's limits), any other an empty answer; an upload
//! is `Accepted`, a progress report `Continue`, anything else `Ack`. Its
//! streams are bounded as the server's are (the endpoint's streams per
//! connection and the QUIC frame limit).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

use beebot_shared::codec::{self, FRAME_HEADER_BYTES};
use beebot_shared::limits::MAX_FRAME_BYTES;
use beebot_shared::proto::{Request, Response};
use beebot_shared::scope::Scope;
use beebot_shared::sign::{SignedUnit, WorkUnit};

/// The line the null server prints when it listens: its address and its
/// certificate's SHA-256 in hex. Its only line on stdout (the load
/// generator stops reading after it); its log goes to stderr.
pub const READY: &str = "null-server";

/// When an empty answer tells a host to ask again, seconds (the hosts of
/// the load ask on their own schedule).
const RETRY_AFTER_S: u64 = 1;
/// How long a unit gives its host, ms (a default round's longest).
const DEADLINE_MS: u64 = 24 * 3600 * 1000;

/// Serve on `listen` until killed or until stdin closes (the load
/// generator that started it is gone); print [`READY`], the bound address
/// and the fingerprint on stdout once listening.
pub async fn serve(listen: SocketAddr, slots: u32) -> Result<()> {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .context("self-signed certificate")?;
    let cert = made.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(made.key_pair.serialize_der())
        .map_err(|e| anyhow::anyhow!("key: {e}"))?;
    let fingerprint = beebot_server::net::cert_fingerprint(std::slice::from_ref(&cert));
    let endpoint = beebot_server::net::endpoint(listen, vec![cert], key)?;
    println!(
        "{READY} {} {}",
        endpoint.local_addr()?,
        hex::encode(fingerprint)
    );
    let units = Arc::new(AtomicU64::new(0));
    while let Some(incoming) = endpoint.accept().await {
        let units = units.clone();
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            while let Ok((send, recv)) = conn.accept_bi().await {
                tokio::spawn(answer(send, recv, slots, units.clone()));
            }
        });
    }
    Ok(())
}

async fn answer(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    slots: u32,
    units: Arc<AtomicU64>,
) {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    if recv.read_exact(&mut header).await.is_err() {
        return;
    }
    let Ok(len) = codec::frame_len(header, MAX_FRAME_BYTES) else {
        return;
    };
    let mut payload = vec![0u8; len];
    if recv.read_exact(&mut payload).await.is_err() {
        return;
    }
    let resp = match codec::decode_payload::<Request>(&payload) {
        Ok(Request::RequestWork { units_held, .. }) => {
            let give = units_held.len() < slots as usize;
            Response::Work {
                units: if give {
                    vec![unit(units.fetch_add(1, Ordering::Relaxed))]
                } else {
                    Vec::new()
                },
                retry_after_s: (!give).then_some(RETRY_AFTER_S),
                rounds_open: true,
                cancelled_units: Vec::new(),
            }
        }
        Ok(Request::Upload { .. }) => Response::Accepted,
        Ok(Request::Progress { .. }) => Response::Continue,
        Ok(_) => Response::Ack,
        Err(_) => return,
    };
    if let Ok(frame) = codec::encode_frame(&resp) {
        let _ = send.write_all(&frame).await;
    }
    let _ = send.finish();
}

/// Unit `n`: a real unit's fields (a default round's limits) for site
/// `n`, with a signature of zeros.
fn unit(n: u64) -> SignedUnit {
    let site = format!("site{n}.example.edu");
    let now = beebot_shared::clock::now_ms();
    let unit = WorkUnit {
        unit_id: n + 1,
        round_id: 1,
        job_id: n + 1,
        host_id: 0,
        seed_url: format!("https://{site}/"),
        site,
        scope: Scope::Host,
        limits: beebot_server::params::RoundParams::default().unit_limits(),
        issued_ms: now,
        deadline_ms: now + DEADLINE_MS,
        user_agent: "BeeBot/0.1 (+https://example.invalid/beebot-grid)".into(),
        resume: None,
        exclusions: Vec::new(),
    };
    SignedUnit {
        bytes: codec::encode(&unit, beebot_shared::limits::MAX_UNIT_BYTES).unwrap_or_default(),
        signature: vec![0; 64],
    }
}
