//! BeeBot grid tools that run the server and the client together, kept out of
//! both so the server never depends on the client: the whole grid on
//! loopback in one process ([`grid`]), the demo on it ([`demo`], binary
//! `beebot-demo`), the methods bench on it ([`methods`], binary
//! `beebot-methods`), the load generator (binary `beebot-loadgen`) and the
//! crawler bench (`benches/crawler.rs`). Nothing here is part of a deployed
//! grid; the tools only drive the real crates on loopback.

pub mod demo;
pub mod grid;
pub mod methods;
