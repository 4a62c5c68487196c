//! The test kit: what tests, benches and tools need and nothing shipped
//! does. [`synth`] is the synthetic web (sites generated from a seed, with
//! their truth: the link rows a complete, polite crawl must export) and its
//! hostile sites; [`web`] serves it over HTTP on loopback, choosing the site
//! by the `Host` header.

pub mod synth;
pub mod web;
