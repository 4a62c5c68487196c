//! The QUIC endpoint: TLS setup, connection handling, and one request/response
//! per bidirectional stream. The only server module that knows quinn.
//!
//! Each connection starts unauthenticated with a fresh nonce. `Enrol` and
//! `Hello` prove the host key over nonce ‖ certificate fingerprint; the nonce
//! is then spent. `ProveProject` (before `Enrol`, unauthenticated: answered from `Shared`'s copy of the key, without the grid lock or a store sync) answers a joining client's
//! nonce with the project key's enrolment proof, so the client knows its
//! invite's key is this server's. Anything malformed gets an error answer,
//! never a panic.
//!
//! Limits, each a named constant below: connections in all, unauthenticated
//! connections per source address (IPv4 address or IPv6 /64; a flood from one
//! address is refused at the door and cannot starve others), time to
//! authenticate, connections per host (a newer one closes the oldest), streams
//! per connection, frame size (small until the connection is authenticated),
//! bytes of requests held in memory at once (per host, per unauthenticated
//! source, and in all), the time a frame's body may take after its header,
//! and held units a work request may name. Under a flood of handshakes (or
//! always, with `quic_retry`) a client's address is validated with a QUIC
//! Retry before any state is kept for it. The endpoint's stateless-reset key is derived from the TLS
//! key, so a restarted server resets the connections of its previous life at
//! once instead of leaving clients to wait for an idle timeout.
//!
//! Its rooms: this module holds the limits; `tls` the certificate and the
//! endpoint; `admission` the per-source, per-host and in-flight budgets;
//! `conn` the accept loop, connections and streams; `dispatch` what each
//! request means; `upload` the upload steps and reading bodies and states.

use std::time::Duration;

use beebot_shared::limits::MAX_FRAME_BYTES;
use beebot_shared::proto::{ErrorCode, Response};

mod admission;
mod conn;
mod dispatch;
mod tls;
mod upload;

pub use conn::run;
pub use tls::{cert_fingerprint, endpoint, load_cert};

/// Streams one connection may have open at once.
const MAX_STREAMS_PER_CONNECTION: u32 = 8;
/// A connection idle this long is closed (clients keep alive while busy).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 4096;
/// A request must arrive whole within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections from one address that have not (yet) authenticated, handshakes
/// included. Hosts behind one NAT authenticate within a round trip or two, so
/// only a flood comes near this.
pub const MAX_UNAUTHENTICATED_PER_ADDRESS: u32 = 64;
/// A `WorkAvailable` push that the host does not take within this time is
/// given up (the host asks at its `retry_after` anyway).
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that has not said `Hello` (or enrolled) within this time is closed.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one enrolled host may hold; a newer one closes the oldest (a
/// client that lost its network leaves a connection behind until it idles out).
pub const MAX_CONNECTIONS_PER_HOST: usize = 4;
/// Largest frame an unauthenticated connection may send (`Enrol` is the
/// largest such request: a key, a token, a proof and a few short texts).
pub const MAX_UNAUTHENTICATED_FRAME_BYTES: usize = 16 * 1024;
/// Bytes of request frames held in memory at once, over all connections:
/// uploads wait for room rather than grow the heap (five of the largest
/// uploads, link file and scan state; typical ones are a few hundred KB).
pub const MAX_INFLIGHT_REQUEST_BYTES: usize = 256 * 1024 * 1024;
/// Bytes of request frames one authenticated host may hold in memory at once,
/// over all its connections: two of the largest uploads, so a host that
/// claims large frames and sends nothing holds at most this share of
/// [`MAX_INFLIGHT_REQUEST_BYTES`] and the other hosts keep uploading.
pub const MAX_HOST_INFLIGHT_REQUEST_BYTES: usize = 2 * MAX_FRAME_BYTES;
/// Bytes of request frames held at once by the unauthenticated connections of
/// one source (address or /64): its connections' streams of challenges and
/// proofs, a few hundred bytes each, with room.
pub const MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE: usize = 1024 * 1024;
/// Bytes of request frames held at once by all unauthenticated connections:
/// a pool apart from the hosts', so strangers never delay an upload.
pub const MAX_UNAUTHENTICATED_INFLIGHT_BYTES: usize = 64 * 1024 * 1024;
/// Time a frame's body may take after its header (once there is room for it)
/// before [`MIN_BODY_BYTES_PER_S`] applies: a few round trips and a slow start.
pub const BODY_GRACE: Duration = Duration::from_secs(10);
/// Slowest a body may arrive after [`BODY_GRACE`]: the slowest uplink the
/// client allows for in its own request timeout. A silent or dripping body is
/// cut and its budget freed; a large upload on a slow link still arrives.
pub const MIN_BODY_BYTES_PER_S: u64 = 16 * 1024;
/// Handshakes from unvalidated addresses in progress at once beyond which new
/// ones must first prove their address with a QUIC Retry (one round trip
/// more): honest handshakes take a round trip or two, so only a flood (maybe
/// from spoofed addresses) keeps this many open.
pub const RETRY_ABOVE_UNVALIDATED_HANDSHAKES: usize = 128;
/// Application close code for a connection closed by a limit.
const CLOSE_LIMIT: u32 = 2;

/// An error answer of `code`, saying `message`.
fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    Response::Error {
        code,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv6Addr};
    use std::sync::Arc;

    use super::admission::{source_key, BudgetOwner, Limits};
    use super::upload::body_deadline;
    use super::*;

    #[test]
    fn sources_are_ipv4_addresses_and_ipv6_prefixes_of_64_bits() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // IPv4: each address its own source.
        assert_eq!(source_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(source_key(ip("192.0.2.7")), source_key(ip("192.0.2.8")));
        // IPv6: every address of one /64 is one source...
        let a = source_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"));
        assert_eq!(a, ip("2001:db8:1:2::"));
        assert_eq!(a, source_key(ip("2001:db8:1:2::1")));
        assert_eq!(a, source_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")));
        // ...and the next /64 another.
        assert_ne!(a, source_key(ip("2001:db8:1:3::1")));
        assert_ne!(a, source_key(ip("2001:db8:1:1:ffff:ffff:ffff:ffff")));
        // An IPv4-mapped address is its IPv4 source, not the ::ffff:0:0/64.
        assert_eq!(source_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(
            source_key(ip("::ffff:192.0.2.7")),
            source_key(ip("::ffff:192.0.2.8"))
        );
    }

    #[test]
    fn a_flood_from_one_ipv6_prefix_is_counted_as_one_source() {
        let limits = Arc::new(Limits::new());
        let mut held = Vec::new();
        for i in 0..MAX_UNAUTHENTICATED_PER_ADDRESS {
            let addr = Ipv6Addr::from(
                0x2001_0db8_0000_0001_0000_0000_0000_0000u128 + u128::from(i) * 7919,
            );
            held.push(limits.admit(IpAddr::V6(addr)).expect("under the cap"));
        }
        let next = IpAddr::V6("2001:db8:0:1:dead:beef::1".parse().expect("ip"));
        assert!(limits.admit(next).is_none(), "the /64 is full");
        let other = IpAddr::V6("2001:db8:0:2::1".parse().expect("ip"));
        assert!(limits.admit(other).is_some(), "another /64 is not");
        held.pop();
        assert!(limits.admit(next).is_some(), "a slot freed is free again");
    }

    #[test]
    fn budgets_are_per_owner_and_within_the_shared_one() {
        const { assert!(MAX_HOST_INFLIGHT_REQUEST_BYTES >= MAX_FRAME_BYTES) };
        const { assert!(MAX_HOST_INFLIGHT_REQUEST_BYTES < MAX_INFLIGHT_REQUEST_BYTES) };
        const { assert!(MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE >= MAX_UNAUTHENTICATED_FRAME_BYTES) };
        const { assert!(MAX_UNAUTHENTICATED_INFLIGHT_PER_SOURCE < MAX_UNAUTHENTICATED_INFLIGHT_BYTES) };
        let limits = Limits::new();
        let a = limits.budget(BudgetOwner::Host(1));
        assert!(Arc::ptr_eq(&a, &limits.budget(BudgetOwner::Host(1))));
        assert!(!Arc::ptr_eq(&a, &limits.budget(BudgetOwner::Host(2))));
        assert_eq!(a.available_permits(), MAX_HOST_INFLIGHT_REQUEST_BYTES);
        drop(a);
        // Gone with its last holder: a fresh one is full.
        assert_eq!(
            limits.budget(BudgetOwner::Host(1)).available_permits(),
            MAX_HOST_INFLIGHT_REQUEST_BYTES
        );
    }

    #[test]
    fn a_body_at_the_minimum_rate_never_meets_its_deadline() {
        let start = tokio::time::Instant::now();
        assert_eq!(body_deadline(start, 0), start + BODY_GRACE);
        let mib = 1024 * 1024;
        assert_eq!(
            body_deadline(start, mib),
            start + BODY_GRACE + Duration::from_secs(mib as u64 / MIN_BODY_BYTES_PER_S)
        );
        // The client's side of this limit (it waits at least this long) is
        // checked in `tests/it/agreed_limits.rs`.
    }
}
