//! Who this host is to its project: its key, its enrolment, and what the
//! server said of it (revoked) or the user did (left). Paths are given by
//! the home; nothing here knows the home's layout.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

use beebot_shared::sign;

use super::files::{check_private, read_spooled, write_atomic};

/// What joining a project left behind.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enrolment {
    pub server_addr: String,
    pub server_name: String,
    /// Hex SHA-256 of the server certificate.
    pub cert_sha256: String,
    /// Hex ed25519 project public key.
    pub project_key: String,
    pub host_id: u64,
    pub name: String,
    pub joined_ms: u64,
}

impl Enrolment {
    pub fn cert_fingerprint(&self) -> Result<[u8; 32]> {
        hex32(&self.cert_sha256).context("enrolment.json: bad certificate fingerprint")
    }
    /// Where the server is and its pinned certificate.
    pub fn server_id(&self) -> Result<crate::net::ServerId> {
        Ok(crate::net::ServerId {
            addr: self.server_addr.clone(),
            server_name: self.server_name.clone(),
            cert_sha256: self.cert_fingerprint()?,
        })
    }

    pub fn project_verifying_key(&self) -> Result<VerifyingKey> {
        let b = hex32(&self.project_key).context("enrolment.json: bad project key")?;
        VerifyingKey::from_bytes(&b).context("enrolment.json: bad project key")
    }
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    hex::decode(s).ok()?.try_into().ok()
}

/// Largest enrolment record (the project's address, names and keys: a
/// few hundred bytes).
pub(super) const MAX_ENROLMENT_FILE_BYTES: usize = 64 * 1024;

/// This host's identity files.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The host key (hex, owner-only).
    pub(super) key: PathBuf,
    /// What joining left (`enrolment.json`).
    pub(super) enrolment: PathBuf,
    /// The server's revocation, when it was heard.
    pub(super) revoked: PathBuf,
    /// The note that this home left its project.
    pub(super) left: PathBuf,
}

impl Identity {
    /// The host key, made (mode 0600) when there is none. A key file other
    /// users can read is refused: whoever reads it can act as this host.
    pub fn host_key(&self, create: bool) -> Result<SigningKey> {
        let path = &self.key;
        match fs::read_to_string(path) {
            Ok(text) => {
                check_private(path)?;
                let b = hex32(text.trim())
                    .with_context(|| format!("{} is not a host key", path.display()))?;
                Ok(SigningKey::from_bytes(&b))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let key = sign::generate_key();
                write_atomic(path, hex::encode(key.to_bytes()).as_bytes(), true)?;
                Ok(key)
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    pub fn enrolment(&self) -> Result<Option<Enrolment>> {
        let path = &self.enrolment;
        let Some(text) = read_spooled(path, MAX_ENROLMENT_FILE_BYTES, "an enrolment")? else {
            return Ok(None);
        };
        let e = serde_json::from_slice(&text)
            .with_context(|| format!("{} is damaged", path.display()))?;
        Ok(Some(e))
    }

    /// The enrolment, or a clear error telling the user to join.
    pub fn require_enrolment(&self) -> Result<Enrolment> {
        self.enrolment()?.with_context(|| {
            format!(
                "this client has not joined a project (no {}): run `beebot join -` and paste the invite code",
                self.enrolment.display()
            )
        })
    }

    /// Keep what a successful `join` brought: the host key (0600), then the
    /// enrolment. If either cannot be written, neither stays.
    pub fn save_joined(&self, key: &SigningKey, e: &Enrolment) -> Result<()> {
        let saved = write_atomic(&self.key, hex::encode(key.to_bytes()).as_bytes(), true)
            .and_then(|()| self.save_enrolment(e));
        if saved.is_err() {
            let _ = fs::remove_file(&self.key);
            let _ = fs::remove_file(&self.enrolment);
        }
        saved
    }

    pub fn save_enrolment(&self, e: &Enrolment) -> Result<()> {
        write_atomic(
            &self.enrolment,
            serde_json::to_string_pretty(e)?.as_bytes(),
            true,
        )
    }

    /// Remember that the server refused this host as revoked, for `status`.
    pub fn mark_revoked(&self, message: &str) -> Result<()> {
        let r = Revocation {
            at_ms: beebot_shared::clock::now_ms(),
            message: message.chars().take(MAX_REVOCATION_TEXT).collect(),
        };
        write_atomic(&self.revoked, serde_json::to_string(&r)?.as_bytes(), false)
    }

    /// The server's revocation of this host, if it was heard.
    pub fn revocation(&self) -> Option<Revocation> {
        let text = fs::read_to_string(&self.revoked).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Note that this home left its project (kept by a leave, so an
    /// installer's invite code does not join it again by itself).
    pub fn mark_left(&self) {
        let note = serde_json::json!({ "left_ms": beebot_shared::clock::now_ms() });
        if let Some(dir) = self.left.parent() {
            let _ = beebot_shared::util::create_private_dir(dir);
        }
        let _ = write_atomic(&self.left, note.to_string().as_bytes(), false);
    }

    /// Whether this home left a project and has not joined one since.
    pub fn has_left(&self) -> bool {
        self.left.exists()
    }

    /// Forget that this home left (it joined again).
    pub fn clear_left(&self) {
        let _ = fs::remove_file(&self.left);
    }
}

/// Longest revocation message kept.
const MAX_REVOCATION_TEXT: usize = 512;

/// The server refused this host as revoked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Revocation {
    /// When the client heard it, Unix ms.
    pub at_ms: u64,
    /// The server's words.
    pub message: String,
}
