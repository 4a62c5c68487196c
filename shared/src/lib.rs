//! BeeBot grid shared code: wire messages and codec, signing, limits, link files,
//! URL scope rules, link extraction, and what client and
//! server both play: the work-fetch rules and the crawl time windows. Pure
//! code: no tokio, quinn or sled here, except the process plumbing of `rt`
//! (the `rt` feature), the log set-up of `logfmt` (the `logs` feature)
//! that the command lines share, and the bounded HTTP listener of
//! `httpcap` (the `http` feature) that the server and the client serve on.

#[cfg(feature = "clap")]
pub mod clihelp;
pub mod clock;
pub mod codec;
pub mod docpage;
pub mod durable;
pub mod export;
pub mod extract;
pub mod fetch_rules;
#[cfg(feature = "http")]
pub mod httpcap;
pub mod invite;
pub mod limits;
pub mod linkfile;
#[cfg(feature = "logs")]
pub mod logfmt;
pub mod proto;
pub mod rng;
#[cfg(feature = "rt")]
pub mod rt;
pub mod scanstate;
pub mod scope;
pub mod sign;
pub mod util;
pub mod window;

#[cfg(test)]
mod tests;

/// The project's icon, served as `/favicon.svg` by the dashboard and the
/// client's page (both link it, so browsers ask for nothing missing).
pub const FAVICON_SVG: &str = include_str!("../assets/favicon.svg");
