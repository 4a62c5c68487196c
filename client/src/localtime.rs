//! Local wall-clock time, read without asking the system's time zone at
//! every reading: the UTC offset is asked at most once every
//! [`OFFSET_RECHECK`]. On Windows each ask reads the zone's registry keys
//! and its names' resource DLL (under Wine, dozens of round trips to the
//! wineserver), and the work loop, the status and the run gate read local
//! time several times a second.
//!
//! Invariant: a reading holds only within one quarter of an hour of UTC
//! (every daylight-saving change falls on one's start, so those show at
//! once, and a machine woken from sleep asks again) and for at most
//! [`OFFSET_RECHECK`] (the user choosing another zone shows within it).
//! Times to show a person (`control::local_time`) still convert exactly.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, FixedOffset, Utc};

/// How long a reading of the local UTC offset holds at most.
pub const OFFSET_RECHECK: Duration = Duration::from_secs(60);

/// Seconds of UTC within which a reading holds: a quarter of an hour, the
/// step every zone's offset changes on.
const OFFSET_SPAN_S: i64 = 900;

/// The offset last read: when, for which quarter of an hour of UTC.
static READ: Mutex<Option<Reading>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Reading {
    at: Instant,
    span: i64,
    offset: FixedOffset,
}

/// Local time now.
pub fn now() -> DateTime<FixedOffset> {
    at(SystemTime::now())
}

/// `t`, a reading of the clock now, in local time.
pub fn at(t: SystemTime) -> DateTime<FixedOffset> {
    let utc = DateTime::<Utc>::from(t);
    let span = utc.timestamp().div_euclid(OFFSET_SPAN_S);
    let mut read = READ.lock().unwrap_or_else(|p| p.into_inner());
    let offset = offset_in(&mut read, Instant::now(), span, || {
        *utc.with_timezone(&chrono::Local).offset()
    });
    utc.with_timezone(&offset)
}

/// Today's local date as `YYYY-MM-DD`.
pub fn today() -> String {
    now().format("%Y-%m-%d").to_string()
}

/// The offset `read` holds when it is of quarter-hour `span` and younger
/// than [`OFFSET_RECHECK`] at `now`, else the one `ask` gives (then kept).
fn offset_in(
    read: &mut Option<Reading>,
    now: Instant,
    span: i64,
    ask: impl FnOnce() -> FixedOffset,
) -> FixedOffset {
    match *read {
        Some(r) if r.span == span && now.saturating_duration_since(r.at) < OFFSET_RECHECK => {
            r.offset
        }
        _ => {
            let offset = ask();
            *read = Some(Reading {
                at: now,
                span,
                offset,
            });
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
    fn the_zone_is_asked_once_a_quarter_hour_and_recheck_and_a_change_shows() {
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
        let span = 2_000_000;
        assert_eq!(offset_in(&mut read, t0, span, ask), winter);
        // The user chooses another zone: seen once the reading is old.
        zone.set(summer);
        for s in [1, 30, 59] {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(offset_in(&mut read, at, span, ask), winter);
        }
        assert_eq!(asked.get(), 1, "the zone asked once within a recheck");
        assert_eq!(offset_in(&mut read, t0 + OFFSET_RECHECK, span, ask), summer);
        assert_eq!(asked.get(), 2);
        // Daylight saving time ends on a quarter hour: seen at once.
        zone.set(winter);
        let at = t0 + OFFSET_RECHECK + Duration::from_secs(1);
        assert_eq!(offset_in(&mut read, at, span + 1, ask), winter);
        assert_eq!(asked.get(), 3);
    }

    #[test]
    fn a_reading_converts_at_the_zone_offset_of_its_instant() {
        let t = SystemTime::now();
        assert_eq!(
            at(t).offset(),
            DateTime::<Utc>::from(t)
                .with_timezone(&chrono::Local)
                .offset()
        );
    }
}
