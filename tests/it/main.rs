//! The integration tests, in one binary so they link once: end to end (the
//! real binaries against a synthetic web on loopback), the limits client
//! and server agree on, the module layers, and the load generator.
//! Run one group with a filter: `cargo test -p beebot-tests --test it crash::`.

mod admin;
mod agreed_limits;
mod benchmark;
mod concurrency;
mod crash;
mod crawler;
mod crawler_hostile;
mod dashboard;
mod desktop;
mod etiquette;
mod exclusion;
mod export;
mod first_hour;
mod grid;
mod guides;
mod hostile_input;
mod invites;
mod layering;
mod liar;
mod loadgen;
mod logs;
mod methods;
mod metrics;
mod network;
mod operator;
mod packaging;
mod polite;
mod refusals;
mod resume;
mod scheduling;
mod status_page;
mod untrusted;
mod validation;
mod windows;
