//! What the grid is given from outside, and never reaches for itself:
//! link-file storage ([`LinkFiles`]), the project's signer
//! ([`ProjectSigner`]) and a source of secrets ([`SecretRng`]), grouped as
//! [`GridIo`] to open it with. The server gives it a directory, its project
//! key and the OS random source ([`GridIo::server`]); the simulator and unit
//! tests memory and a seeded generator ([`GridIo::in_memory`]), so one seed
//! reproduces a run.
//!
//! Invariants: secrets (invite tokens) come from a generator the type says
//! is cryptographically secure ([`rand::CryptoRng`]); a signature made
//! through [`ProjectSigner`] for a [`SigningKey`] is byte for byte what
//! [`beebot_shared::sign`] makes with the key.

use std::sync::Arc;

use ed25519_dalek::SigningKey;
use rand::{CryptoRng, RngCore, SeedableRng};

use beebot_shared::sign::{self, SignError, SignedUnit, WorkUnit};

use super::links::{LinkFiles, MemoryLinks};
use super::packs::LinkPacks;

/// What signs for the project: work units and the enrolment proof, with
/// the key's public half. A key held elsewhere (a signing service) could
/// sign through it; the grid never sees more than this.
pub trait ProjectSigner: Send + Sync {
    /// The project's public key, as invites carry it.
    fn public_key(&self) -> [u8; 32];
    /// `unit` encoded and signed ([`sign::sign_unit`]).
    fn sign_unit(&self, unit: &WorkUnit) -> Result<SignedUnit, SignError>;
    /// A unit's bytes ([`sign::unit_bytes`]) signed: it cannot fail, so
    /// `serve` records a unit under the grid's lock once its bytes are
    /// made and signs them outside it.
    fn sign_unit_bytes(&self, bytes: sign::UnitBytes) -> SignedUnit;
    /// The proof to a joining client that this server holds the key
    /// ([`sign::make_enrol_proof`]).
    fn enrol_proof(&self, client_nonce: &[u8; 32], cert_fingerprint: &[u8; 32]) -> Vec<u8>;
    /// A secret no host knows, the same after a restart, from which spot
    /// checks are drawn ([`crate::validate::spot_check`]).
    fn spot_check_secret(&self) -> [u8; 32];
}

impl ProjectSigner for SigningKey {
    fn public_key(&self) -> [u8; 32] {
        self.verifying_key().to_bytes()
    }

    fn sign_unit(&self, unit: &WorkUnit) -> Result<SignedUnit, SignError> {
        sign::sign_unit(self, unit)
    }

    fn sign_unit_bytes(&self, bytes: sign::UnitBytes) -> SignedUnit {
        sign::sign_unit_bytes(self, bytes)
    }

    fn enrol_proof(&self, client_nonce: &[u8; 32], cert_fingerprint: &[u8; 32]) -> Vec<u8> {
        sign::make_enrol_proof(self, client_nonce, cert_fingerprint)
    }

    /// The key's own bytes (as spot checks were always drawn).
    fn spot_check_secret(&self) -> [u8; 32] {
        self.to_bytes()
    }
}

/// A random generator fit for secrets: the grid draws invite tokens from it.
pub trait SecretRng: RngCore + CryptoRng + Send {}

impl<T: RngCore + CryptoRng + Send> SecretRng for T {}

/// Everything the grid is opened with besides its settings.
pub struct GridIo {
    pub links: Arc<dyn LinkFiles>,
    pub signer: Arc<dyn ProjectSigner>,
    pub rng: Box<dyn SecretRng>,
}

impl GridIo {
    /// The server's: link files in `links` (packed under the data dir's
    /// `links/`), signed with `key`, secrets from the operating system.
    pub fn server(links: LinkPacks, key: SigningKey) -> GridIo {
        GridIo {
            links: Arc::new(links),
            signer: Arc::new(key),
            rng: Box::new(rand::rngs::OsRng),
        }
    }

    /// No disk and no entropy: link files in `links`, secrets drawn from
    /// `seed` (the same seed, the same tokens), signed with `key`.
    pub fn in_memory(links: Arc<MemoryLinks>, key: SigningKey, seed: u64) -> GridIo {
        GridIo {
            links,
            signer: Arc::new(key),
            rng: Box::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_signs_through_the_trait_byte_for_byte() {
        let (mut fx, _) = crate::grid::testkit::Fx::with_round(1, 3);
        let host = fx.host();
        let unit = fx.one(host, &[], crate::grid::testkit::T0);
        let key = fx.key.clone();
        let signer: &dyn ProjectSigner = &key;
        assert_eq!(signer.public_key(), key.verifying_key().to_bytes());
        assert_eq!(signer.spot_check_secret(), key.to_bytes());
        assert_eq!(
            signer.sign_unit(&unit).unwrap(),
            sign::sign_unit(&key, &unit).unwrap()
        );
        assert_eq!(
            signer.enrol_proof(&[1; 32], &[2; 32]),
            sign::make_enrol_proof(&key, &[1; 32], &[2; 32])
        );
    }

    #[test]
    fn one_seed_draws_the_same_secrets() {
        let draw = |seed| {
            let io = GridIo::in_memory(Arc::new(MemoryLinks::new()), sign::generate_key(), seed);
            let mut rng = io.rng;
            let mut b = [0u8; 32];
            rng.fill_bytes(&mut b);
            b
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
