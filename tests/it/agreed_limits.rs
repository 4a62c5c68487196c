//! Limits the client and the server must agree on, each defined on its own
//! side: checked here, where both crates are in reach (the server does not
//! depend on the client).

use std::time::Duration;

use beebot_client::home::MAX_SPOOLED_UNITS;
use beebot_client::net::request_timeout;
use beebot_server::net::{BODY_GRACE, MIN_BODY_BYTES_PER_S};
use beebot_shared::limits::MAX_UNITS_HELD;

#[test]
fn the_client_waits_for_a_body_at_the_minimum_rate() {
    // The server's `body_deadline` lets a body take `BODY_GRACE` plus its
    // bytes at `MIN_BODY_BYTES_PER_S` (pinned by its test in
    // `server/src/net.rs`); the client waits for an answer at least as long.
    let mib = 1024 * 1024;
    let body_time = BODY_GRACE + Duration::from_secs_f64(mib as f64 / MIN_BODY_BYTES_PER_S as f64);
    assert!(request_timeout(mib) >= body_time);
}

#[test]
fn an_honest_client_never_names_more_held_units_than_allowed() {
    const { assert!(MAX_SPOOLED_UNITS <= MAX_UNITS_HELD) };
}
