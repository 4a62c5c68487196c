//! A scan's cancel: a flag its thread checks between requests, and waits
//! (politeness, the bandwidth cap, a pause) that end at their time or the
//! moment the flag is set. A waiting thread sleeps on a condition variable:
//! it is woken once, when its wait ends or by the cancel, never to poll, so
//! 64 scans waiting out their politeness delays cost the processor nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Longest single wait: every caller's wait is far shorter (a Crawl-delay
/// is capped at a minute); a longer one is cut here, so adding it to the
/// clock can never overflow.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The cancel of one scan (or benchmark): set once, seen by every wait.
#[derive(Debug, Default)]
pub struct Cancel {
    set: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Cancel {
    /// A cancel not set.
    pub const fn new() -> Cancel {
        Cancel {
            set: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// A cancel set from the start (a scan that must not request anything).
    pub fn already() -> Cancel {
        let c = Cancel::new();
        c.cancel();
        c
    }

    /// Set the cancel and wake every wait on it.
    pub fn cancel(&self) {
        self.set.store(true, Ordering::SeqCst);
        // Taken so that a wait between its check and its sleep cannot miss
        // the wake: it holds the lock across both.
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.wake.notify_all();
    }

    pub fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    /// Sleep until `until` or the cancel, whichever comes first; true when
    /// cancelled.
    pub fn sleep_until(&self, until: Instant) -> bool {
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.is_set() {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            // A spurious wake goes round again.
            guard = self
                .wake
                .wait_timeout(guard, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Sleep for `d` (at most [`MAX_WAIT`]) or until the cancel; true when
    /// cancelled.
    pub fn sleep(&self, d: Duration) -> bool {
        self.sleep_until(Instant::now() + d.min(MAX_WAIT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_wait_ends_at_its_time_when_nothing_cancels_it() {
        let c = Cancel::new();
        let start = Instant::now();
        assert!(!c.sleep(Duration::from_millis(60)));
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(60), "{took:?}");
        assert!(!c.is_set());
    }

    #[test]
    fn a_cancel_ends_a_long_wait_at_once() {
        let c = Arc::new(Cancel::new());
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                (c.sleep(Duration::from_secs(60)), start.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        c.cancel();
        let (cancelled, took) = waiter.join().expect("waiter");
        assert!(cancelled);
        assert!(took < Duration::from_secs(10), "{took:?}");
        // Set stays set: the next wait returns at once.
        let start = Instant::now();
        assert!(c.sleep(Duration::from_secs(60)));
        assert!(Cancel::already().sleep(Duration::MAX));
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
