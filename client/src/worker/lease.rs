//! A scan's lease on its site: the host crawls a unit's site only while
//! the server answered one of the scan's progress reports within
//! [`LEASE_S`]. A host that cannot report (the server is away, the network
//! is down, the machine slept) holds the scan at its next page boundary
//! until a report is answered; the server takes a scan back only
//! [`LEASE_TAKEOVER_S`] after its last report, so the grid never has two
//! scans of one site running at once, and a host that was away for long
//! does not hold its site for the whole of its deadline.
//!
//! Invariants: a lease is renewed only from the moment a report that the
//! server answered was *sent* (never from when its answer came), and it
//! lapses when either the monotonic clock or the wall clock says so (a
//! monotonic clock may not count the time a machine slept).
//!
//! [`LEASE_TAKEOVER_S`]: beebot_shared::limits::LEASE_TAKEOVER_S

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use beebot_shared::limits::LEASE_S;

use crate::cancel::Cancel;

/// How often a held scan looks at its lease again.
const LEASE_POLL: Duration = Duration::from_millis(500);

/// When a report was sent, on both clocks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sent {
    mono: Instant,
    wall: SystemTime,
}

impl Sent {
    pub(super) fn now() -> Sent {
        Sent {
            mono: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

/// One scan's lease (shared by the work loop, which renews it, and the
/// scan's thread, which holds at a page boundary while it lapsed).
#[derive(Debug)]
pub(super) struct Lease {
    /// The send time of the latest answered report (`None`: none yet, and
    /// the lease starts lapsed).
    renewed: Mutex<Option<Sent>>,
    span: Duration,
}

impl Lease {
    /// A lease held from `sent`, when the host's latest answered request
    /// was sent (a new scan: the server gave it lately).
    pub(super) fn held_from(sent: Sent) -> Lease {
        Lease::with_span(Some(sent), Duration::from_secs(LEASE_S))
    }

    /// A lease not held until a report is answered: a scan resumed from
    /// its checkpoint (after a restart) may have been taken back while
    /// this host was away.
    pub(super) fn lapsed() -> Lease {
        Lease::with_span(None, Duration::from_secs(LEASE_S))
    }

    fn with_span(renewed: Option<Sent>, span: Duration) -> Lease {
        Lease {
            renewed: Mutex::new(renewed),
            span,
        }
    }

    /// The server answered a report sent at `sent`.
    pub(super) fn renew(&self, sent: Sent) {
        let mut r = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        // Answers may come back out of order: keep the latest send.
        if r.is_none_or(|old| sent.mono > old.mono) {
            *r = Some(sent);
        }
    }

    /// Whether the scan may not fetch now.
    pub(super) fn is_lapsed(&self) -> bool {
        let r = *self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sent) = r else {
            return true;
        };
        let wall = SystemTime::now()
            .duration_since(sent.wall)
            .is_ok_and(|d| d >= self.span);
        sent.mono.elapsed() >= self.span || wall
    }

    /// Hold (on the scan's thread) while the lease lapsed, or until `cancel`.
    pub(super) fn wait_held(&self, cancel: &Cancel) {
        while !cancel.is_set() && self.is_lapsed() {
            cancel.sleep(LEASE_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_lease_is_held_and_lapses_after_its_span() {
        let l = Lease::with_span(Some(Sent::now()), Duration::from_millis(200));
        assert!(!l.is_lapsed());
        std::thread::sleep(Duration::from_millis(250));
        assert!(l.is_lapsed());
        l.renew(Sent::now());
        assert!(!l.is_lapsed());
    }

    #[test]
    fn a_resumed_scan_holds_until_a_report_is_answered() {
        let l = Lease::lapsed();
        assert!(l.is_lapsed());
        l.renew(Sent::now());
        assert!(!l.is_lapsed());
    }

    #[test]
    fn a_late_answer_to_an_older_report_does_not_move_the_lease_back() {
        let l = Lease::with_span(None, Duration::from_millis(300));
        let old = Sent::now();
        std::thread::sleep(Duration::from_millis(200));
        l.renew(Sent::now());
        l.renew(old);
        std::thread::sleep(Duration::from_millis(150));
        // From the old send it would have lapsed (350 ms); from the new, not.
        assert!(!l.is_lapsed());
    }

    #[test]
    fn the_wall_clock_lapses_a_lease_the_monotonic_clock_missed() {
        // A machine that slept: its wall clock moved on, its monotonic
        // clock (on Linux) did not.
        let l = Lease::with_span(None, Duration::from_secs(60));
        l.renew(Sent {
            mono: Instant::now(),
            wall: SystemTime::now() - Duration::from_secs(61),
        });
        assert!(l.is_lapsed());
    }

    #[test]
    fn a_held_scan_waits_until_renewed_or_cancelled() {
        let l = std::sync::Arc::new(Lease::lapsed());
        let cancel = std::sync::Arc::new(Cancel::new());
        let (l2, c2) = (l.clone(), cancel.clone());
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            l2.wait_held(&c2);
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(!t.is_finished(), "the scan went on without a lease");
        l.renew(Sent::now());
        let waited = t.join().expect("thread");
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        // And a cancel ends the wait of a lapsed lease.
        let l = Lease::lapsed();
        let c = Cancel::new();
        c.cancel();
        l.wait_held(&c);
    }
}
