//! Local wall-clock time, read without asking the system's time zone at
//! every reading: the UTC offset is asked at most once every
//! [`OFFSET_RECHECK`]. On Windows each ask reads the zone's registry keys
//! and its names' resource DLL (under Wine, dozens of round trips to the
//! wineserver), and the work loop, the status and the run gate read local
//! time several times a second.
//!
//! Invariant: a change of the UTC offset (daylight saving time, the user
//! choosing another zone) shows within [`OFFSET_RECHECK`]; until then local
//! times are off by the change. Times to show a person (`control::local_time`)
//! still convert exactly.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, FixedOffset, Utc};

/// How long a reading of the local UTC offset holds.
pub const OFFSET_RECHECK: Duration = Duration::from_secs(60);

/// The offset last read, and when.
static READ: Mutex<Option<(Instant, FixedOffset)>> = Mutex::new(None);

/// Local time now.
pub fn now() -> DateTime<FixedOffset> {
    at(SystemTime::now())
}

/// `t` in local time, at the offset of now.
pub fn at(t: SystemTime) -> DateTime<FixedOffset> {
    DateTime::<Utc>::from(t).with_timezone(&offset())
}

/// Today's local date as `YYYY-MM-DD`.
pub fn today() -> String {
    now().format("%Y-%m-%d").to_string()
}

/// The local UTC offset, asked of the system at most once every
/// [`OFFSET_RECHECK`].
fn offset() -> FixedOffset {
    let mut read = READ.lock().unwrap_or_else(|p| p.into_inner());
    offset_in(&mut read, Instant::now(), || *chrono::Local::now().offset())
}

/// The offset `read` holds when younger than [`OFFSET_RECHECK`] at `now`,
/// else the one `ask` gives (then kept).
fn offset_in(
    read: &mut Option<(Instant, FixedOffset)>,
    now: Instant,
    ask: impl FnOnce() -> FixedOffset,
) -> FixedOffset {
    match *read {
        Some((at, offset)) if now.saturating_duration_since(at) < OFFSET_RECHECK => offset,
        _ => {
            let offset = ask();
            *read = Some((now, offset));
            offset
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn local_time_agrees_with_the_system_zone() {
        let system = chrono::Local::now();
        let ours = now();
        assert_eq!(ours.offset(), system.offset());
        let apart = (ours.naive_local() - system.naive_local())
            .num_seconds()
            .abs();
        assert!(apart <= 1, "{ours} against {system}");
        assert_eq!(today(), system.format("%Y-%m-%d").to_string());
    }

    #[test]
    fn the_zone_is_asked_once_a_recheck_and_a_change_shows_after_it() {
        let asked = Cell::new(0);
        let winter = FixedOffset::east_opt(3600).unwrap();
        let summer = FixedOffset::east_opt(7200).unwrap();
        let zone = Cell::new(winter);
        let ask = || {
            asked.set(asked.get() + 1);
            zone.get()
        };
        let mut read = None;
        let t0 = Instant::now();
        assert_eq!(offset_in(&mut read, t0, ask), winter);
        // Daylight saving time begins: not seen until the reading is old.
        zone.set(summer);
        for s in [1, 30, 59] {
            assert_eq!(
                offset_in(&mut read, t0 + Duration::from_secs(s), ask),
                winter
            );
        }
        assert_eq!(asked.get(), 1, "the zone asked once within a recheck");
        assert_eq!(offset_in(&mut read, t0 + OFFSET_RECHECK, ask), summer);
        assert_eq!(asked.get(), 2);
    }
}
