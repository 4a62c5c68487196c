//! Invite codes: everything a new host needs to join, in one pasteable line.
//!
//! `beebot1-` followed by base64url (no padding) of the encoded [`Invite`]. The
//! token is secret; the server keeps only its SHA-256.

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::codec;

/// Prefix of every invite code of this format.
pub const INVITE_PREFIX: &str = "beebot1-";
/// An invite code is a few hundred characters; anything longer is not one.
pub const MAX_INVITE_CODE_LEN: usize = 4096;

/// The content of an invite code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invite {
    /// Server address for QUIC, `host:port`.
    pub addr: String,
    /// Name the server certificate is issued for (TLS server name).
    pub server_name: String,
    /// SHA-256 of the server certificate (DER): the client pins it.
    pub cert_sha256: [u8; 32],
    /// The project's ed25519 public key: work units must be signed by it.
    pub project_key: [u8; 32],
    /// The one-time (or N-use) secret.
    pub token: Vec<u8>,
    /// Unix milliseconds after which the token is refused.
    pub expires_ms: u64,
}

/// Why an invite code could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InviteError {
    #[error("not a BeeBot invite code (it should start with `{INVITE_PREFIX}`)")]
    Prefix,
    #[error("invite code is too long")]
    TooLong,
    #[error("invite code is damaged (check it was copied whole): {0}")]
    Damaged(String),
}

impl Invite {
    /// The pasteable code.
    pub fn to_code(&self) -> String {
        // Encoding a few fixed fields cannot exceed the limit.
        let bytes = codec::encode(self, MAX_INVITE_CODE_LEN).unwrap_or_default();
        format!(
            "{INVITE_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
        )
    }

    /// Read a code (surrounding whitespace ignored).
    pub fn from_code(code: &str) -> Result<Invite, InviteError> {
        let code = code.trim();
        if code.len() > MAX_INVITE_CODE_LEN {
            return Err(InviteError::TooLong);
        }
        let rest = code
            .strip_prefix(INVITE_PREFIX)
            .ok_or(InviteError::Prefix)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(rest)
            .map_err(|e| InviteError::Damaged(e.to_string()))?;
        codec::decode(&bytes, MAX_INVITE_CODE_LEN).map_err(|e| InviteError::Damaged(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let inv = Invite {
            addr: "127.0.0.1:4433".into(),
            server_name: "localhost".into(),
            cert_sha256: [1; 32],
            project_key: [2; 32],
            token: vec![3; 24],
            expires_ms: 99,
        };
        let code = inv.to_code();
        assert!(code.starts_with(INVITE_PREFIX));
        assert_eq!(Invite::from_code(&format!("  {code}\n")).unwrap(), inv);
        assert!(matches!(
            Invite::from_code("hello"),
            Err(InviteError::Prefix)
        ));
        let cut = &code[..code.len() - 5];
        assert!(matches!(
            Invite::from_code(cut),
            Err(InviteError::Damaged(_))
        ));
    }
}
