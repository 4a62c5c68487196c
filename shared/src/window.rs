//! Time windows: when a client may crawl. Pure code over local wall-clock
//! times (`NaiveDateTime`), so the rules are tested on a virtual clock; the
//! client keeps to them and the server's simulator plays them.
//!
//! Syntax: `always`, or comma-separated rules `[DAYS] HH:MM-HH:MM`, where DAYS is
//! a day (`mon`) or range (`mon-fri`, `sat-sun`) or list (`sat+sun`); without
//! DAYS a rule holds every day. A rule whose end is not after its start crosses
//! midnight: `mon-fri 19:00-07:00` runs from Monday 19:00 to Tuesday 07:00, and
//! so on to Saturday 07:00. `24:00` is allowed as an end.

use chrono::{Datelike, Duration, NaiveDateTime, Timelike};

/// How far ahead window computations look (two weeks covers every weekly pattern).
pub const HORIZON_MINUTES: i64 = 14 * 24 * 60;
/// Most rules in one window setting.
const MAX_RULES: usize = 32;

const DAY_NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// What is wrong with a window setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad time window `{input}`: {reason} (examples: `always`, `19:00-07:00`, `mon-fri 19:00-07:00, sat-sun 00:00-24:00`)")]
pub struct WindowError {
    input: String,
    reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    /// Monday = 0.
    days: [bool; 7],
    start_min: u32,
    end_min: u32,
}

impl Rule {
    fn crosses_midnight(&self) -> bool {
        self.end_min <= self.start_min
    }
}

/// A parsed window setting. No rules: always open.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Windows {
    rules: Vec<Rule>,
    text: String,
}

fn parse_day(s: &str) -> Option<usize> {
    DAY_NAMES.iter().position(|d| *d == s)
}

fn parse_days(s: &str) -> Option<[bool; 7]> {
    let mut days = [false; 7];
    for part in s.split('+') {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b) = (parse_day(a)?, parse_day(b)?);
            let mut d = a;
            loop {
                days[d] = true;
                if d == b {
                    break;
                }
                d = (d + 1) % 7;
            }
        } else {
            days[parse_day(part)?] = true;
        }
    }
    Some(days)
}

fn parse_hhmm(s: &str, allow_24: bool) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    if m >= 60 {
        return None;
    }
    match (h, m) {
        (24, 0) if allow_24 => Some(1440),
        (0..=23, _) => Some(h * 60 + m),
        _ => None,
    }
}

impl Windows {
    /// Always open.
    pub fn always() -> Windows {
        Windows {
            rules: Vec::new(),
            text: "always".into(),
        }
    }

    /// Parse a window setting.
    pub fn parse(input: &str) -> Result<Windows, WindowError> {
        let err = |reason: &str| WindowError {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let text = input.trim().to_ascii_lowercase();
        if text.is_empty() || text == "always" {
            return Ok(Windows::always());
        }
        let mut rules = Vec::new();
        for part in text.split(',') {
            let part = part.trim();
            let (days, range) = match part.rsplit_once(' ') {
                Some((d, r)) => (
                    parse_days(d.trim())
                        .ok_or_else(|| err(&format!("unknown days `{}`", d.trim())))?,
                    r,
                ),
                None => ([true; 7], part),
            };
            let (a, b) = range
                .split_once('-')
                .ok_or_else(|| err(&format!("`{range}` is not HH:MM-HH:MM")))?;
            let start_min =
                parse_hhmm(a, false).ok_or_else(|| err(&format!("`{a}` is not a time")))?;
            let end_min =
                parse_hhmm(b, true).ok_or_else(|| err(&format!("`{b}` is not a time")))?;
            if start_min == end_min {
                return Err(err("a window must not start and end at the same time"));
            }
            rules.push(Rule {
                days,
                start_min,
                end_min: end_min.min(1440),
            });
            if rules.len() > MAX_RULES {
                return Err(err(&format!("at most {MAX_RULES} rules")));
            }
        }
        Ok(Windows { rules, text })
    }

    /// The rules by the weekday they start on (Monday first), as
    /// `(start, end)` in minutes of the day (an end not after its start
    /// crosses midnight); `None` when always open. For editors that show a
    /// window day by day.
    pub fn by_start_day(&self) -> Option<[Vec<(u32, u32)>; 7]> {
        if self.rules.is_empty() {
            return None;
        }
        let mut days: [Vec<(u32, u32)>; 7] = Default::default();
        for r in &self.rules {
            for (d, on) in r.days.iter().enumerate() {
                if *on {
                    days[d].push((r.start_min, r.end_min));
                }
            }
        }
        for d in &mut days {
            d.sort_unstable();
        }
        Some(days)
    }

    pub fn is_always(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether crawling is allowed at `t`.
    pub fn is_open(&self, t: NaiveDateTime) -> bool {
        if self.rules.is_empty() {
            return true;
        }
        let day = t.weekday().num_days_from_monday() as usize;
        let prev = (day + 6) % 7;
        let m = t.hour() * 60 + t.minute();
        self.rules.iter().any(|r| {
            if r.crosses_midnight() {
                (r.days[day] && m >= r.start_min) || (r.days[prev] && m < r.end_min)
            } else {
                r.days[day] && m >= r.start_min && m < r.end_min
            }
        })
    }

    /// The next minute boundary after `t` where openness changes, within the horizon.
    pub fn next_change(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        if self.rules.is_empty() {
            return None;
        }
        let now = self.is_open(t);
        let mut m = minute_floor(t);
        for _ in 0..HORIZON_MINUTES {
            m += Duration::minutes(1);
            if self.is_open(m) != now {
                return Some(m);
            }
        }
        None
    }

    /// Seconds of open time between `from` and `to` (bounded by the horizon).
    pub fn open_seconds(&self, from: NaiveDateTime, to: NaiveDateTime) -> u64 {
        if to <= from {
            return 0;
        }
        if self.rules.is_empty() {
            return (to - from).num_seconds().max(0) as u64;
        }
        let mut total = 0i64;
        let mut t = from;
        for _ in 0..=HORIZON_MINUTES {
            if t >= to {
                break;
            }
            let next = (minute_floor(t) + Duration::minutes(1)).min(to);
            if self.is_open(t) {
                total += (next - t).num_seconds();
            }
            t = next;
        }
        total.max(0) as u64
    }

    /// Whether `work_s` seconds of crawling fit in the open time before `deadline`.
    pub fn fits(&self, now: NaiveDateTime, work_s: u64, deadline: NaiveDateTime) -> bool {
        self.open_seconds(now, deadline) >= work_s
    }

    /// Open intervals `[start, end)` in seconds from `now`, over the horizon,
    /// at most `max` of them (`None`: always open).
    pub fn intervals(&self, now: NaiveDateTime, max: usize) -> Option<Vec<(u64, u64)>> {
        if self.rules.is_empty() {
            return None;
        }
        let end = now + Duration::minutes(HORIZON_MINUTES);
        let secs = |t: NaiveDateTime| (t - now).num_seconds().max(0) as u64;
        let mut out = Vec::new();
        let mut t = now;
        let mut open = self.is_open(now);
        while t < end && out.len() < max {
            let next = self.next_change(t).unwrap_or(end).min(end);
            if open {
                out.push((secs(t), secs(next)));
            }
            t = next;
            open = !open;
        }
        Some(out)
    }

    /// Seconds until the current window closes (`None`: always open, or closed now).
    pub fn seconds_left_open(&self, now: NaiveDateTime) -> Option<u64> {
        if self.rules.is_empty() || !self.is_open(now) {
            return None;
        }
        Some(match self.next_change(now) {
            Some(c) => (c - now).num_seconds().max(0) as u64,
            None => (HORIZON_MINUTES * 60) as u64,
        })
    }
}

impl std::fmt::Display for Windows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn minute_floor(t: NaiveDateTime) -> NaiveDateTime {
    t.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    /// 2026-11-30 is a Monday.
    fn at(day: u32, h: u32, m: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 30)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            + Duration::days(day as i64)
            + Duration::hours(h as i64)
            + Duration::minutes(m as i64)
    }

    #[test]
    fn always_is_open() {
        let w = Windows::parse("always").unwrap();
        assert!(w.is_open(at(0, 12, 0)));
        assert_eq!(w.next_change(at(0, 0, 0)), None);
        assert_eq!(w.open_seconds(at(0, 0, 0), at(1, 0, 0)), 86400);
    }

    #[test]
    fn crossing_midnight_every_day() {
        let w = Windows::parse("19:00-07:00").unwrap();
        assert!(!w.is_open(at(0, 12, 0)));
        assert!(w.is_open(at(0, 19, 0)));
        assert!(w.is_open(at(1, 6, 59)));
        assert!(!w.is_open(at(1, 7, 0)));
        assert_eq!(w.next_change(at(0, 12, 0)), Some(at(0, 19, 0)));
        assert_eq!(w.next_change(at(0, 23, 30)), Some(at(1, 7, 0)));
        assert_eq!(w.open_seconds(at(0, 0, 0), at(1, 0, 0)), (7 + 5) * 3600);
    }

    #[test]
    fn per_weekday_rules() {
        let w = Windows::parse("mon-fri 19:00-07:00, sat-sun 00:00-24:00").unwrap();
        // Friday night runs into Saturday, then all weekend.
        assert!(w.is_open(at(4, 23, 0)));
        assert!(w.is_open(at(5, 12, 0)));
        assert!(w.is_open(at(6, 23, 59)));
        // Monday daytime closed; Sunday night → Monday 07:00 is not covered by mon-fri
        // (it starts Monday 19:00) but Sunday's full day ends at midnight.
        assert!(!w.is_open(at(7, 3, 0)));
        assert!(!w.is_open(at(0, 10, 0)));
        assert!(w.is_open(at(0, 20, 0)));
        // Friday 19:00 rule: Saturday 06:00 open by both rules.
        assert!(w.is_open(at(5, 6, 0)));
        let w = Windows::parse("sat+sun 10:00-12:00").unwrap();
        assert!(w.is_open(at(5, 11, 0)) && w.is_open(at(6, 10, 0)));
        assert!(!w.is_open(at(4, 11, 0)));
        let w = Windows::parse("fri-mon 22:00-23:00").unwrap();
        assert!(w.is_open(at(4, 22, 30)) && w.is_open(at(7, 22, 30)));
        assert!(!w.is_open(at(1, 22, 30)));
    }

    #[test]
    fn deadlines_that_fit_or_not() {
        let w = Windows::parse("19:00-07:00").unwrap();
        // At noon, a 2-hour job due at 20:00 does not fit (1 open hour), due at 22:00 it does.
        assert!(!w.fits(at(0, 12, 0), 7200, at(0, 20, 0)));
        assert!(w.fits(at(0, 12, 0), 7200, at(0, 22, 0)));
        // A 13-hour job due next evening does not fit one 12-hour night.
        assert!(!w.fits(at(0, 19, 0), 13 * 3600, at(1, 18, 0)));
        assert!(w.fits(at(0, 19, 0), 13 * 3600, at(1, 20, 0)));
        assert_eq!(w.seconds_left_open(at(1, 6, 0)), Some(3600));
        assert_eq!(w.seconds_left_open(at(1, 8, 0)), None);
        // Seconds within a minute count exactly.
        assert_eq!(
            w.open_seconds(
                at(0, 18, 59) + Duration::seconds(30),
                at(0, 19, 0) + Duration::seconds(10)
            ),
            10
        );
    }

    #[test]
    fn intervals_list_the_open_time_ahead() {
        let w = Windows::parse("19:00-07:00").unwrap();
        let iv = w.intervals(at(0, 12, 0), 64).unwrap();
        assert_eq!(iv[0], (7 * 3600, 19 * 3600));
        assert_eq!(iv[1], (31 * 3600, 43 * 3600));
        assert_eq!(iv.len(), 14);
        let iv = w.intervals(at(0, 20, 0), 3).unwrap();
        assert_eq!(iv[0], (0, 11 * 3600));
        assert_eq!(iv.len(), 3);
        assert!(Windows::always().intervals(at(0, 0, 0), 64).is_none());
    }

    #[test]
    fn bad_settings_are_explained() {
        for bad in [
            "19-07",
            "25:00-01:00",
            "mon-xyz 10:00-11:00",
            "10:00-10:00",
            "10:60-11:00",
            "10:00",
        ] {
            let e = Windows::parse(bad).unwrap_err();
            assert!(e.to_string().contains("examples"), "{e}");
        }
        assert!(Windows::parse("00:00-24:00")
            .unwrap()
            .is_open(at(2, 23, 59)));
    }

    #[test]
    fn rules_read_back_by_the_day_they_start() {
        assert_eq!(Windows::always().by_start_day(), None);
        let w =
            Windows::parse("mon-fri 19:00-07:00, sat+sun 00:00-24:00, wed 12:00-13:00").unwrap();
        let d = w.by_start_day().unwrap();
        assert_eq!(d[0], vec![(19 * 60, 7 * 60)]);
        assert_eq!(d[2], vec![(12 * 60, 13 * 60), (19 * 60, 7 * 60)]);
        assert_eq!(d[5], vec![(0, 1440)]);
        assert_eq!(d[6], vec![(0, 1440)]);
    }
}
