//! The bandwidth cap shared by all of a client's scans: each scan pays for the
//! bytes it has read at a page boundary, and waits until the shared budget
//! allows them. Over any stretch longer than the burst, the scans together
//! read at most `kb_per_s`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes the scans may read ahead of the budget: a quarter second at the cap,
/// at least 16 KiB (a page or two).
const MIN_BURST_BYTES: u64 = 16 * 1024;
const BURST_FRACTION_OF_SECOND: f64 = 0.25;
/// Longest single wait, so a cancelled scan is noticed.
const MAX_WAIT_STEP: Duration = Duration::from_millis(200);

/// A shared byte budget (virtual-time scheduling).
#[derive(Debug)]
pub struct Bandwidth {
    bytes_per_s: f64,
    burst: Duration,
    /// The time at which everything paid for so far will have been "sent".
    next_free: Mutex<Instant>,
}

impl Bandwidth {
    /// A cap of `kb_per_s` kilobytes (1000 bytes) per second; `None` for 0.
    pub fn new(kb_per_s: u64) -> Option<Bandwidth> {
        if kb_per_s == 0 {
            return None;
        }
        let bytes_per_s = kb_per_s as f64 * 1000.0;
        let burst_bytes = ((bytes_per_s * BURST_FRACTION_OF_SECOND) as u64).max(MIN_BURST_BYTES);
        Some(Bandwidth {
            bytes_per_s,
            burst: Duration::from_secs_f64(burst_bytes as f64 / bytes_per_s),
            next_free: Mutex::new(Instant::now()),
        })
    }

    /// Book `bytes` at `now`; returns how long the caller must wait.
    pub fn book(&self, bytes: u64, now: Instant) -> Duration {
        let cost = Duration::from_secs_f64(bytes as f64 / self.bytes_per_s);
        let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
        // Idle time earns at most one burst of credit.
        let floor = now.checked_sub(self.burst).unwrap_or(now);
        let start = (*next).max(floor);
        *next = start + cost;
        next.saturating_duration_since(now + self.burst)
    }

    /// Pay for `bytes`, sleeping as long as the budget needs (stops early on cancel).
    pub fn pay(&self, bytes: u64, cancel: &std::sync::atomic::AtomicBool) {
        let mut wait = self.book(bytes, Instant::now());
        while !wait.is_zero() && !cancel.load(std::sync::atomic::Ordering::Relaxed) {
            let step = wait.min(MAX_WAIT_STEP);
            std::thread::sleep(step);
            wait -= step;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_keep_the_average_at_the_cap() {
        let b = Bandwidth::new(100).unwrap(); // 100 kB/s, burst 0.25 s
        let t0 = Instant::now();
        // 1 MB booked at once: a quarter second is burst, the rest waits.
        let mut last = Duration::ZERO;
        for _ in 0..100 {
            last = b.book(10_000, t0);
        }
        assert!((last.as_secs_f64() - 9.75).abs() < 0.01, "{last:?}");
        // After a long idle spell only one burst of credit is left.
        let later = t0 + Duration::from_secs(100);
        assert_eq!(b.book(25_000, later), Duration::ZERO);
        // The next 100 kB waits its full second less the burst.
        let w = b.book(100_000, later);
        assert!((w.as_secs_f64() - 0.75).abs() < 0.01, "{w:?}");
        assert!(Bandwidth::new(0).is_none());
    }
}
