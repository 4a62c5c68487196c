//! Work units and their signatures, and the per-connection host proof.
//!
//! A unit is signed by the project key over its exact encoded bytes; receivers
//! run `verify_strict` on those bytes before decoding anything, and never
//! re-encode to verify.
//!
//! The project key signs one other thing: the enrolment proof, by which the
//! server shows a joining client that it holds the key named in the invite.
//! That message starts with [`ENROL_PROOF_CONTEXT`]; a unit's bytes never do
//! (`sign_unit` refuses to sign them, `verify_unit` to accept them), so a
//! proof can never pass for a unit, whatever nonce the client chose.
//!
//! `unit_bytes` meets every way signing a unit can fail, so the grid records a
//! unit once its bytes are made, and the server signs them later, outside the
//! grid's lock, with `sign_unit_bytes`, which cannot fail.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::limits::MAX_UNIT_BYTES;
use crate::scope::{Exclusion, Scope};

/// Limits of one scan, set by the round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitLimits {
    pub max_pages: u32,
    pub max_depth: u32,
    pub delay_ms: u64,
    pub max_page_bytes: u64,
    pub max_seconds: u64,
    /// Longest robots.txt Crawl-delay honoured, ms (a longer one is cut to this).
    pub max_crawl_delay_ms: u64,
}

/// One job as sent to one host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkUnit {
    pub unit_id: u64,
    pub round_id: u64,
    pub job_id: u64,
    /// The host this unit was issued to: another host cannot use it.
    pub host_id: u64,
    /// The site's host name.
    pub site: String,
    /// First URL to fetch.
    pub seed_url: String,
    pub scope: Scope,
    pub limits: UnitLimits,
    /// Server time, Unix milliseconds.
    pub issued_ms: u64,
    /// Server time, Unix milliseconds.
    pub deadline_ms: u64,
    pub user_agent: String,
    /// A continuation: the scan goes on from this frontier (fetched with
    /// `Request::FetchState` and checked against the hash signed here).
    pub resume: Option<ResumeFrom>,
    /// Hosts inside the unit's scope that are excluded from crawling (at
    /// most [`crate::limits::MAX_UNIT_EXCLUSIONS`]): no URL on them is
    /// requested, robots.txt included. Protocol version 4.
    pub exclusions: Vec<Exclusion>,
}

/// The frontier a continuation unit starts from: the scan state an earlier
/// scan of the job left, named by its SHA-256 and size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeFrom {
    pub state_sha256: [u8; 32],
    pub state_bytes: u64,
    /// Pages the job's earlier scans took (the page cap is the job's).
    pub pages_done: u64,
}

/// A work unit's exact encoded bytes and the project key's signature over them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedUnit {
    #[serde(with = "crate::codec::bytes")]
    pub bytes: Vec<u8>,
    pub signature: Vec<u8>,
}

/// Why a unit or proof was refused.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("bad signature")]
    BadSignature,
    #[error("malformed key or signature")]
    Malformed,
    #[error("unit is too large ({0} bytes)")]
    TooLarge(usize),
    #[error("signed unit does not decode: {0}")]
    Decode(String),
    #[error("unit bytes begin with a signing context reserved for proofs")]
    ReservedContext,
}

/// The fixed start of every enrolment proof the project key signs: no
/// unit's bytes may begin with it.
pub const ENROL_PROOF_CONTEXT: &[u8] = b"beebot-enrol-proof-v1";

/// Sign a unit with the project key.
pub fn sign_unit(key: &SigningKey, unit: &WorkUnit) -> Result<SignedUnit, SignError> {
    Ok(sign_unit_bytes(key, unit_bytes(unit)?))
}

/// `unit`'s bytes as they are signed: encoded, at most [`MAX_UNIT_BYTES`],
/// never beginning with the proofs' signing context. Every way signing a
/// unit can fail is here, so a caller may record a unit once its bytes are
/// made and sign them later ([`sign_unit_bytes`], which cannot fail).
pub fn unit_bytes(unit: &WorkUnit) -> Result<UnitBytes, SignError> {
    let bytes =
        codec::encode(unit, MAX_UNIT_BYTES).map_err(|e| SignError::Decode(e.to_string()))?;
    if bytes.starts_with(ENROL_PROOF_CONTEXT) {
        return Err(SignError::ReservedContext);
    }
    Ok(UnitBytes(bytes))
}

/// A unit's bytes made by [`unit_bytes`], not yet signed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitBytes(Vec<u8>);

/// Bytes made by [`unit_bytes`], signed.
pub fn sign_unit_bytes(key: &SigningKey, bytes: UnitBytes) -> SignedUnit {
    let signature = key.sign(&bytes.0).to_bytes().to_vec();
    SignedUnit {
        bytes: bytes.0,
        signature,
    }
}

/// Verify a unit's signature over its exact bytes, then decode it.
pub fn verify_unit(project_key: &VerifyingKey, signed: &SignedUnit) -> Result<WorkUnit, SignError> {
    if signed.bytes.len() > MAX_UNIT_BYTES {
        return Err(SignError::TooLarge(signed.bytes.len()));
    }
    if signed.bytes.starts_with(ENROL_PROOF_CONTEXT) {
        return Err(SignError::ReservedContext);
    }
    let sig = Signature::from_slice(&signed.signature).map_err(|_| SignError::Malformed)?;
    project_key
        .verify_strict(&signed.bytes, &sig)
        .map_err(|_| SignError::BadSignature)?;
    codec::decode(&signed.bytes, MAX_UNIT_BYTES).map_err(|e| SignError::Decode(e.to_string()))
}

/// The bytes a host signs to prove its key on one connection.
fn proof_message(nonce: &[u8; 32], cert_fingerprint: &[u8; 32]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(16 + 64);
    msg.extend_from_slice(b"beebot-proof-v1");
    msg.extend_from_slice(nonce);
    msg.extend_from_slice(cert_fingerprint);
    msg
}

/// Sign nonce ‖ certificate fingerprint with the host key.
pub fn make_proof(host_key: &SigningKey, nonce: &[u8; 32], cert_fingerprint: &[u8; 32]) -> Vec<u8> {
    host_key
        .sign(&proof_message(nonce, cert_fingerprint))
        .to_bytes()
        .to_vec()
}

/// Check a host's proof for this connection's nonce and the server certificate.
pub fn check_proof(
    host_key: &[u8; 32],
    nonce: &[u8; 32],
    cert_fingerprint: &[u8; 32],
    proof: &[u8],
) -> Result<(), SignError> {
    let key = VerifyingKey::from_bytes(host_key).map_err(|_| SignError::Malformed)?;
    let sig = Signature::from_slice(proof).map_err(|_| SignError::Malformed)?;
    key.verify_strict(&proof_message(nonce, cert_fingerprint), &sig)
        .map_err(|_| SignError::BadSignature)
}

/// The bytes the project key signs to prove itself to a joining client:
/// the reserved context, the client's fresh nonce, the server certificate's
/// SHA-256 (so a proof made for one server is no proof for another).
fn enrol_proof_message(client_nonce: &[u8; 32], cert_fingerprint: &[u8; 32]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(ENROL_PROOF_CONTEXT.len() + 64);
    msg.extend_from_slice(ENROL_PROOF_CONTEXT);
    msg.extend_from_slice(client_nonce);
    msg.extend_from_slice(cert_fingerprint);
    msg
}

/// The server's enrolment proof: the project key's signature over the
/// reserved context ‖ the client's nonce ‖ the certificate fingerprint.
pub fn make_enrol_proof(
    project_key: &SigningKey,
    client_nonce: &[u8; 32],
    cert_fingerprint: &[u8; 32],
) -> Vec<u8> {
    project_key
        .sign(&enrol_proof_message(client_nonce, cert_fingerprint))
        .to_bytes()
        .to_vec()
}

/// Check the server's enrolment proof against the project key of the invite.
pub fn check_enrol_proof(
    project_key: &[u8; 32],
    client_nonce: &[u8; 32],
    cert_fingerprint: &[u8; 32],
    proof: &[u8],
) -> Result<(), SignError> {
    let key = VerifyingKey::from_bytes(project_key).map_err(|_| SignError::Malformed)?;
    let sig = Signature::from_slice(proof).map_err(|_| SignError::Malformed)?;
    key.verify_strict(&enrol_proof_message(client_nonce, cert_fingerprint), &sig)
        .map_err(|_| SignError::BadSignature)
}

/// A fresh ed25519 key from the OS random source.
pub fn generate_key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> WorkUnit {
        WorkUnit {
            unit_id: 1,
            round_id: 2,
            job_id: 3,
            host_id: 4,
            site: "a.test".into(),
            seed_url: "http://a.test/".into(),
            scope: Scope::Host,
            limits: UnitLimits {
                max_pages: 10,
                max_depth: 5,
                delay_ms: 0,
                max_page_bytes: 1000,
                max_seconds: 60,
                max_crawl_delay_ms: 10_000,
            },
            issued_ms: 1,
            deadline_ms: 2,
            user_agent: "BeeBot".into(),
            resume: None,
            exclusions: Vec::new(),
        }
    }

    /// The largest unit the server may issue (every text at its longest,
    /// the most exclusions, each of the longest host name) signs and verifies.
    #[test]
    fn a_unit_with_the_most_exclusions_fits_its_byte_limit() {
        use crate::limits::{MAX_HOST_LEN, MAX_UNIT_EXCLUSIONS};
        let long_host = |i: usize| {
            let mut h = format!("{i:03}");
            while h.len() + 2 <= MAX_HOST_LEN {
                h.push_str(".a");
            }
            h
        };
        let mut u = unit();
        u.site = long_host(999);
        u.seed_url = format!("http://{}/", u.site);
        u.user_agent = format!("BeeBot/0.1 (+https://{}/)", long_host(998));
        u.resume = Some(ResumeFrom {
            state_sha256: [7; 32],
            state_bytes: u64::MAX,
            pages_done: u64::MAX,
        });
        u.exclusions = (0..MAX_UNIT_EXCLUSIONS)
            .map(|i| Exclusion {
                host: long_host(i),
                subdomains: true,
            })
            .collect();
        assert!(u
            .exclusions
            .iter()
            .all(|e| e.host.len() >= MAX_HOST_LEN - 1));
        let k = generate_key();
        let s = sign_unit(&k, &u).expect("the largest unit signs");
        assert!(s.bytes.len() <= MAX_UNIT_BYTES, "{}", s.bytes.len());
        assert_eq!(verify_unit(&k.verifying_key(), &s).unwrap(), u);
        // Four times as many would not fit: the bound keeps units small.
        u.exclusions.extend(u.exclusions.clone());
        u.exclusions.extend(u.exclusions.clone());
        assert!(matches!(sign_unit(&k, &u), Err(SignError::Decode(_))));
    }

    #[test]
    fn signed_unit_verifies() {
        let k = generate_key();
        let s = sign_unit(&k, &unit()).unwrap();
        assert_eq!(verify_unit(&k.verifying_key(), &s).unwrap(), unit());
    }

    #[test]
    fn tampered_unit_or_other_key_refused() {
        let k = generate_key();
        let mut s = sign_unit(&k, &unit()).unwrap();
        let other = generate_key();
        assert!(matches!(
            verify_unit(&other.verifying_key(), &s),
            Err(SignError::BadSignature)
        ));
        let last = s.bytes.len() - 1;
        s.bytes[last] ^= 1;
        assert!(matches!(
            verify_unit(&k.verifying_key(), &s),
            Err(SignError::BadSignature)
        ));
        s.signature.truncate(10);
        assert!(matches!(
            verify_unit(&k.verifying_key(), &s),
            Err(SignError::Malformed)
        ));
    }

    #[test]
    fn proof_binds_nonce_and_certificate() {
        let k = generate_key();
        let pk = k.verifying_key().to_bytes();
        let n = [7u8; 32];
        let fp = [9u8; 32];
        let p = make_proof(&k, &n, &fp);
        assert!(check_proof(&pk, &n, &fp, &p).is_ok());
        assert!(check_proof(&pk, &[8u8; 32], &fp, &p).is_err());
        assert!(check_proof(&pk, &n, &[1u8; 32], &p).is_err());
    }

    #[test]
    fn the_enrol_proof_verifies_with_the_project_key_only() {
        let k = generate_key();
        let pk = k.verifying_key().to_bytes();
        let (n, fp) = ([3u8; 32], [5u8; 32]);
        let p = make_enrol_proof(&k, &n, &fp);
        assert!(check_enrol_proof(&pk, &n, &fp, &p).is_ok());
        // Another key (a code whose key was replaced), another nonce (a
        // replayed proof), another certificate (a proof for another server).
        let other = generate_key().verifying_key().to_bytes();
        assert!(matches!(
            check_enrol_proof(&other, &n, &fp, &p),
            Err(SignError::BadSignature)
        ));
        assert!(check_enrol_proof(&pk, &[4u8; 32], &fp, &p).is_err());
        assert!(check_enrol_proof(&pk, &n, &[6u8; 32], &p).is_err());
        assert!(matches!(
            check_enrol_proof(&pk, &n, &fp, &p[..10]),
            Err(SignError::Malformed)
        ));
        // Nor is a host's connection proof (another context) an enrol proof.
        let host = make_proof(&k, &n, &fp);
        assert!(check_enrol_proof(&pk, &n, &fp, &host).is_err());
    }

    #[test]
    fn an_enrol_proof_never_passes_for_a_unit() {
        let k = generate_key();
        for seed in 0..64u8 {
            let n = [seed; 32];
            let fp = [seed.wrapping_mul(7); 32];
            // Exactly what the server signed, offered as a unit.
            let forged = SignedUnit {
                bytes: enrol_proof_message(&n, &fp),
                signature: make_enrol_proof(&k, &n, &fp),
            };
            assert!(matches!(
                verify_unit(&k.verifying_key(), &forged),
                Err(SignError::ReservedContext)
            ));
            // And those bytes do not decode as a unit in any case.
            assert!(codec::decode::<WorkUnit>(&forged.bytes, MAX_UNIT_BYTES).is_err());
        }
        // A real unit's bytes never start with the context.
        let s = sign_unit(&k, &unit()).unwrap();
        assert!(!s.bytes.starts_with(ENROL_PROOF_CONTEXT));
    }
}
