//! BeeBot grid tools that run the server and the client together, kept out of
//! both so the server never depends on the client: the in-process demo
//! ([`demo`], binary `beebot-demo`), the load generator (binary
//! `beebot-loadgen`) and the crawler bench (`benches/crawler.rs`). Nothing
//! here is part of a deployed grid; the tools only drive the real crates on
//! loopback.

pub mod demo;
