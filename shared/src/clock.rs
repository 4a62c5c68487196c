//! The wall clock of the grid: Unix milliseconds. Server and client stamp
//! records, deadlines and reports with it; code that must be testable takes
//! the time as an argument instead of calling this.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix milliseconds now (0 if the clock is set before 1970; `u64::MAX`
/// past the year 584 million).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_2020_and_does_not_go_back() {
        const JAN_2020_MS: u64 = 1_577_836_800_000;
        let a = now_ms();
        assert!(a > JAN_2020_MS, "{a}");
        assert!(now_ms() >= a);
    }
}
