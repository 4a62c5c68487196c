//! BeeBot grid shared code: wire messages and codec, signing, limits, link files,
//! URL scope rules, link extraction and the synthetic web. Pure code: no tokio,
//! quinn or sled here.

pub mod clock;
pub mod codec;
pub mod durable;
pub mod export;
pub mod extract;
pub mod invite;
pub mod limits;
pub mod linkfile;
pub mod proto;
pub mod rng;
pub mod scanstate;
pub mod scope;
pub mod sign;
pub mod synth;
pub mod util;
