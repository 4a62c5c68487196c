//! Invite codes: everything a new host needs to join, in one pasteable line.
//!
//! `beebot2-` followed by base64url (no padding) of the encoded [`Invite`] and
//! its CRC-32 (4 bytes, little-endian). The token is secret; the server keeps
//! only its SHA-256.
//!
//! The checksum is there because codes are copied by hand, through mail and
//! chat: a code with one character changed used to decode to another invite
//! (a wrong project key stored, every unit refused forever). CRC-32 finds every
//! burst of up to 32 bits, and one base64 character is 6 bits, so any single
//! changed character is refused, always; a character missing or the tail cut
//! off shifts the rest and is refused too (the checksum and the exact decode
//! must both agree, a chance of 2^-32 at most). Every such code reads as
//! [`InviteError::Damaged`], never as another invite or an "expired" one.

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::codec;

/// Prefix of every invite code of this format.
pub const INVITE_PREFIX: &str = "beebot2-";
/// An invite code is a few hundred characters; anything longer is not one.
pub const MAX_INVITE_CODE_LEN: usize = 4096;
/// Bytes of the checksum after the encoded invite.
const CHECKSUM_BYTES: usize = 4;

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

/// Why an invite code could not be read. The messages are for the person
/// who pasted the code: no decoder's wording reaches them.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InviteError {
    #[error("not a BeeBot invite code (it should start with `{INVITE_PREFIX}`)")]
    Prefix,
    #[error("invite code is too long")]
    TooLong,
    #[error("this invite code is damaged (a character changed or missing): copy it again")]
    Damaged,
}

/// CRC-32 (IEEE 802.3, reflected), bit by bit: invite codes are short.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Whether `code` starts with the prefix damaged: one character changed or
/// missing, or the code cut off inside it. A damaged code rather than
/// something else pasted.
fn near_prefix(code: &str) -> bool {
    let want: Vec<char> = INVITE_PREFIX.chars().collect();
    let head: Vec<char> = code.chars().take(want.len()).collect();
    if head.len() < want.len() {
        return !head.is_empty() && want.starts_with(&head);
    }
    let changed = head.iter().zip(&want).filter(|(a, b)| a != b).count();
    let missing = (0..want.len()).any(|i| {
        let mut short = want.clone();
        short.remove(i);
        head.starts_with(&short)
    });
    changed <= 1 || missing
}

impl Invite {
    /// The pasteable code.
    pub fn to_code(&self) -> String {
        // Encoding a few fixed fields cannot exceed the limit.
        let mut bytes = codec::encode(self, MAX_INVITE_CODE_LEN).unwrap_or_default();
        let sum = crc32(&bytes);
        bytes.extend_from_slice(&sum.to_le_bytes());
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
        if let Some(rest) = code.strip_prefix(INVITE_PREFIX) {
            return Self::from_payload(rest).ok_or(InviteError::Damaged);
        }
        if near_prefix(code) {
            return Err(InviteError::Damaged);
        }
        Err(InviteError::Prefix)
    }

    /// The invite in the base64 after the prefix, if its checksum holds and it
    /// decodes exactly.
    fn from_payload(rest: &str) -> Option<Invite> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(rest)
            .ok()?;
        let split = bytes.len().checked_sub(CHECKSUM_BYTES)?;
        let (body, sum) = bytes.split_at(split);
        if crc32(body).to_le_bytes() != sum {
            return None;
        }
        codec::decode(body, MAX_INVITE_CODE_LEN).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite() -> Invite {
        Invite {
            addr: "127.0.0.1:4433".into(),
            server_name: "localhost".into(),
            cert_sha256: [1; 32],
            project_key: [2; 32],
            token: vec![3; 24],
            expires_ms: 99,
        }
    }

    #[test]
    fn crc32_is_the_ieee_one() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn round_trip_and_damage() {
        let inv = invite();
        let code = inv.to_code();
        assert!(code.starts_with(INVITE_PREFIX));
        assert_eq!(Invite::from_code(&format!("  {code}\n")).unwrap(), inv);
        assert_eq!(Invite::from_code("hello"), Err(InviteError::Prefix));
        assert_eq!(Invite::from_code(""), Err(InviteError::Prefix));
        // The tail cut off: damaged, whatever is left.
        for cut in 1..code.len() {
            assert_eq!(
                Invite::from_code(&code[..cut]),
                Err(InviteError::Damaged),
                "cut at {cut}"
            );
        }
        // A character missing in the middle.
        let mid = code.len() / 2;
        let missing = format!("{}{}", &code[..mid], &code[mid + 1..]);
        assert_eq!(Invite::from_code(&missing), Err(InviteError::Damaged));
        // Not base64 at all after the prefix.
        assert_eq!(
            Invite::from_code(&format!("{INVITE_PREFIX}!!!!")),
            Err(InviteError::Damaged)
        );
        assert_eq!(
            Invite::from_code(&"x".repeat(MAX_INVITE_CODE_LEN + 1)),
            Err(InviteError::TooLong)
        );
    }

    #[test]
    fn the_messages_say_what_to_do() {
        let damaged = InviteError::Damaged.to_string();
        assert_eq!(
            damaged,
            "this invite code is damaged (a character changed or missing): copy it again"
        );
        assert!(!damaged.contains("expired"));
        assert!(InviteError::Prefix.to_string().contains(INVITE_PREFIX));
        // No decoder's wording: a bad base64 character reads as damage.
        let code = invite().to_code();
        let bad = format!("{}*{}", &code[..20], &code[21..]);
        let e = Invite::from_code(&bad).unwrap_err().to_string();
        assert_eq!(e, damaged);
    }

    #[test]
    fn a_changed_version_is_damaged() {
        let code = invite().to_code();
        let one = code.replacen(INVITE_PREFIX, "beebot1-", 1);
        assert_eq!(Invite::from_code(&one), Err(InviteError::Damaged));
        let three = code.replacen(INVITE_PREFIX, "beebot3-", 1);
        assert_eq!(Invite::from_code(&three), Err(InviteError::Damaged));
    }

    #[test]
    fn damage_at_the_tail_is_not_expiry() {
        // The expiry is the last field: changing its last characters must not
        // give a readable invite that has merely expired.
        let code = invite().to_code();
        let bytes = code.as_bytes();
        for i in code.len() - 12..code.len() {
            for c in b"AQgw_-09az".iter().copied() {
                if bytes[i] == c {
                    continue;
                }
                let mut b = bytes.to_vec();
                b[i] = c;
                let s = String::from_utf8(b).unwrap();
                assert_eq!(Invite::from_code(&s), Err(InviteError::Damaged), "{s}");
            }
        }
    }
}
