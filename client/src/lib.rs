//! BeeBot grid desktop client library: the [`crawler`] (knows nothing of the
//! protocol), the [`home`] (keys, enrolment, spool), the QUIC [`net`] link and
//! the [`worker`] loop of `beebot run`. `main.rs` is the CLI over these.

pub mod bandwidth;
pub mod benchmark;
pub mod cancel;
pub mod checkpoint;
pub mod concurrency;
pub mod control;
pub mod crawler;
pub mod display;
pub mod home;
pub mod leave;
pub mod localtime;
pub mod logging;
pub mod net;
pub mod recordlog;
pub mod rt;
pub mod service;
pub mod settings;
pub mod tray;
pub mod ui;
pub mod usage;
pub mod window;
pub mod worker;
