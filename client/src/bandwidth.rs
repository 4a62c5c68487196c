//! The bandwidth cap shared by all of a client's scans: each scan pays for the
//! bytes it has read at a page boundary, and waits until the shared budget
//! allows them. Over any stretch longer than the burst, the scans together
//! read at most `kb_per_s`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cancel::Cancel;

/// Bytes the scans may read ahead of the budget: a quarter second at the cap,
/// at least 16 KiB (a page or two).
const MIN_BURST_BYTES: u64 = 16 * 1024;
const BURST_FRACTION_OF_SECOND: f64 = 0.25;

/// A shared byte budget (virtual-time scheduling). Its rate may change while
/// scans run ([`Bandwidth::set_kb_per_s`]; 0: no cap).
#[derive(Debug)]
pub struct Bandwidth {
    state: Mutex<Budget>,
}

#[derive(Debug)]
struct Budget {
    /// 0: no cap.
    bytes_per_s: f64,
    burst: Duration,
    /// The time at which everything paid for so far will have been "sent".
    next_free: Instant,
}

fn rate(kb_per_s: u64) -> (f64, Duration) {
    let bytes_per_s = kb_per_s as f64 * 1000.0;
    if kb_per_s == 0 {
        return (0.0, Duration::ZERO);
    }
    let burst_bytes = ((bytes_per_s * BURST_FRACTION_OF_SECOND) as u64).max(MIN_BURST_BYTES);
    (
        bytes_per_s,
        Duration::from_secs_f64(burst_bytes as f64 / bytes_per_s),
    )
}

impl Bandwidth {
    /// A cap of `kb_per_s` kilobytes (1000 bytes) per second; `None` for 0.
    pub fn new(kb_per_s: u64) -> Option<Bandwidth> {
        (kb_per_s > 0).then(|| Bandwidth::adjustable(kb_per_s))
    }

    /// A cap of `kb_per_s` (0: none for now) that may be changed later.
    pub fn adjustable(kb_per_s: u64) -> Bandwidth {
        let (bytes_per_s, burst) = rate(kb_per_s);
        Bandwidth {
            state: Mutex::new(Budget {
                bytes_per_s,
                burst,
                next_free: Instant::now(),
            }),
        }
    }

    /// Change the cap (0: none); what was booked before stays booked.
    pub fn set_kb_per_s(&self, kb_per_s: u64) {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (b.bytes_per_s, b.burst) = rate(kb_per_s);
        if kb_per_s == 0 {
            b.next_free = Instant::now();
        }
    }

    /// Book `bytes` at `now`; returns how long the caller must wait.
    pub fn book(&self, bytes: u64, now: Instant) -> Duration {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if b.bytes_per_s <= 0.0 {
            return Duration::ZERO;
        }
        let cost = Duration::from_secs_f64(bytes as f64 / b.bytes_per_s);
        // Idle time earns at most one burst of credit.
        let floor = now.checked_sub(b.burst).unwrap_or(now);
        let start = b.next_free.max(floor);
        b.next_free = start + cost;
        b.next_free.saturating_duration_since(now + b.burst)
    }

    /// Pay for `bytes`, sleeping as long as the budget needs (stops early on cancel).
    pub fn pay(&self, bytes: u64, cancel: &Cancel) {
        let wait = self.book(bytes, Instant::now());
        if !wait.is_zero() {
            cancel.sleep(wait);
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

    #[test]
    fn the_cap_can_change_while_scans_run() {
        let b = Bandwidth::adjustable(0);
        let t0 = Instant::now();
        assert_eq!(b.book(10_000_000, t0), Duration::ZERO, "no cap");
        b.set_kb_per_s(100);
        let _ = b.book(25_000, t0);
        let w = b.book(100_000, t0);
        assert!(w >= Duration::from_millis(990), "{w:?}");
        b.set_kb_per_s(0);
        assert_eq!(b.book(10_000_000, t0), Duration::ZERO, "cap lifted");
    }
}
