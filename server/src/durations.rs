//! Durations the admin types (`7d`, `90s`) and the ranges they must fall
//! in: the flags of `round start`, `invite` and `round wait`, the admin
//! API's numbers, and the config file's durations (a number in the field's
//! unit, or text with a unit).
//!
//! A duration out of range is refused, never clamped, and the refusal
//! speaks the unit the admin typed (`--every 5m is shorter than 60m`).
//! Below a bound's sensible minimum only with `--force`; never below its
//! floor nor above its maximum.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use beebot_shared::limits::MAX_DELAY_MS;
use beebot_shared::util::{human_duration, parse_duration};

/// A duration as the admin typed it: its value and its text (errors quote
/// the text and speak its unit). One that came as a number (the admin API,
/// the config file) has its value in words as its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedDuration {
    pub text: String,
    pub value: Duration,
}

/// The text is not a duration with a unit (the message says why).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadDuration(String);

/// Clap's parser of a duration flag: a unit is required (`90s`, `15m`,
/// `12h`, `7d`).
pub fn typed_duration(s: &str) -> Result<TypedDuration, BadDuration> {
    let value = parse_duration(s).map_err(|e| BadDuration(e.to_string()))?;
    Ok(TypedDuration {
        text: s.trim().to_string(),
        value,
    })
}

impl TypedDuration {
    /// A duration that came as a value: its text is the value in words.
    pub fn of(value: Duration) -> TypedDuration {
        TypedDuration {
            text: human_duration(value),
            value,
        }
    }

    /// The value within `bounds`, or an error naming `flag` and the text typed.
    pub fn within(
        &self,
        flag: &str,
        bounds: &DurationBounds,
        force: bool,
    ) -> Result<Duration, DurationError> {
        bounds.check(flag, &self.text, self.value, force)
    }

    /// Whole seconds.
    pub fn as_secs(&self) -> u64 {
        self.value.as_secs()
    }

    /// Whole milliseconds (`u64::MAX` past half a billion years).
    pub fn as_millis(&self) -> u64 {
        u64::try_from(self.value.as_millis()).unwrap_or(u64::MAX)
    }
}

/// The range a duration the admin types must fall in: below `min` only with
/// `--force` (never below `floor`), never above `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationBounds {
    /// What the duration is, in the admin's words.
    pub what: &'static str,
    /// Nothing shorter works at all.
    pub floor: Duration,
    /// Shorter than this needs `--force` (tests, trials).
    pub min: Duration,
    pub max: Duration,
}

/// `s` seconds, in a `const`.
pub const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
/// Seconds of a minute, an hour, a day.
pub const MINUTE: u64 = 60;
pub const HOUR: u64 = 3600;
pub const DAY: u64 = 24 * HOUR;

/// `round start --every`: a round repeated more often than hourly keeps the
/// sites busy for nothing; at most a year apart.
pub const REPEAT_PERIOD: DurationBounds = DurationBounds {
    what: "repeat period",
    floor: secs(1),
    min: secs(HOUR),
    max: secs(366 * DAY),
};
/// `invite --expires`: between a minute and a year.
pub const INVITE_EXPIRY: DurationBounds = DurationBounds {
    what: "invite lifetime",
    floor: secs(1),
    min: secs(MINUTE),
    max: secs(365 * DAY),
};
/// `round start --min-deadline`/`--max-deadline`: a unit's deadline finds a
/// silent host; under a minute it would also take units from live ones
/// (they report progress every 10 s), beyond a month it finds nothing.
pub const DEADLINE: DurationBounds = DurationBounds {
    what: "deadline",
    floor: secs(1),
    min: secs(MINUTE),
    max: secs(30 * DAY),
};
/// `round start --max-scan-time`: one scan's time budget (a scan that
/// reaches it continues in another: nothing is cut, only split).
pub const SCAN_TIME: DurationBounds = DurationBounds {
    what: "scan time budget",
    floor: secs(1),
    min: secs(MINUTE),
    max: secs(7 * DAY),
};
/// `round start --max-crawl-delay`: the longest robots.txt Crawl-delay a
/// round honours ([`MAX_DELAY_MS`]); 0 honours none.
pub const CRAWL_DELAY: DurationBounds = DurationBounds {
    what: "Crawl-delay a round honours",
    floor: secs(0),
    min: secs(0),
    max: Duration::from_millis(MAX_DELAY_MS),
};
/// `round wait --timeout`.
pub const WAIT_TIMEOUT: DurationBounds = DurationBounds {
    what: "wait",
    floor: secs(1),
    min: secs(1),
    max: secs(366 * DAY),
};
/// `round wait --report-every`: how often a wait not on a terminal prints a line.
pub const REPORT_EVERY: DurationBounds = DurationBounds {
    what: "report interval",
    floor: secs(1),
    min: secs(1),
    max: secs(DAY),
};
/// `deadline_grace_s` in `config.toml`: added to every deadline.
pub const DEADLINE_GRACE: DurationBounds = DurationBounds {
    what: "deadline grace",
    floor: secs(0),
    min: secs(0),
    max: secs(DAY),
};

/// A duration outside its [`DurationBounds`], said with the text the admin
/// typed and the limit in the unit they typed it in.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error(
        "{flag} {typed} is shorter than {min}, the shortest {what} (add --force if you mean it)"
    )]
    ShortUnlessForced {
        flag: String,
        typed: String,
        min: String,
        what: &'static str,
    },
    #[error("{flag} {typed} is shorter than {min}, the shortest {what}")]
    TooShort {
        flag: String,
        typed: String,
        min: String,
        what: &'static str,
    },
    #[error("{flag} {typed} is longer than {max}, the longest {what}")]
    TooLong {
        flag: String,
        typed: String,
        max: String,
        what: &'static str,
    },
    #[error(
        "the maximum deadline ({max}) is below the minimum deadline ({min}): lower the minimum \
         with --min-deadline (and --force under a minute), or raise --max-deadline"
    )]
    DeadlinesCrossed { min: String, max: String },
}

/// `d` in the unit of `typed` (`90s` → seconds) when it is a whole number
/// of it, else in words ([`human_duration`]).
pub fn in_unit_of(typed: &str, d: Duration) -> String {
    let s = d.as_secs();
    let unit = match typed.trim().chars().last() {
        Some('s') => 1,
        Some('m') => MINUTE,
        Some('h') => HOUR,
        Some('d') => DAY,
        _ => 0,
    };
    if d.subsec_nanos() == 0 && unit > 0 && s % unit == 0 {
        let suffix = typed.trim().chars().last().unwrap_or('s');
        format!("{}{suffix}", s / unit)
    } else {
        human_duration(d)
    }
}

impl DurationBounds {
    /// `value` (typed as `typed` after `flag`) within these bounds.
    pub fn check(
        &self,
        flag: &str,
        typed: &str,
        value: Duration,
        force: bool,
    ) -> Result<Duration, DurationError> {
        let (flag, typed_s, what) = (flag.to_string(), typed.trim().to_string(), self.what);
        if value < self.floor {
            return Err(DurationError::TooShort {
                flag,
                typed: typed_s,
                min: in_unit_of(typed, self.floor),
                what,
            });
        }
        if value < self.min && !force {
            return Err(DurationError::ShortUnlessForced {
                flag,
                typed: typed_s,
                min: in_unit_of(typed, self.min),
                what,
            });
        }
        if value > self.max {
            return Err(DurationError::TooLong {
                flag,
                typed: typed_s,
                max: in_unit_of(typed, self.max),
                what,
            });
        }
        Ok(value)
    }

    /// [`DurationBounds::check`] of a value that came as a number (the API,
    /// the config file): said in words.
    pub fn check_value(
        &self,
        name: &str,
        value: Duration,
        force: bool,
    ) -> Result<Duration, DurationError> {
        self.check(name, &human_duration(value), value, force)
    }
}

/// A number in a field's own unit, or a duration as text (unit required).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(u64),
    Text(String),
}

fn duration_field<'de, D: serde::Deserializer<'de>>(d: D, unit_ms: u64) -> Result<u64, D::Error> {
    match NumberOrText::deserialize(d)? {
        NumberOrText::Number(n) => Ok(n),
        NumberOrText::Text(t) => {
            let value = parse_duration(&t).map_err(serde::de::Error::custom)?;
            let ms = u64::try_from(value.as_millis()).map_err(serde::de::Error::custom)?;
            Ok(ms / unit_ms)
        }
    }
}

/// A `*_s` field: seconds, or a duration as text.
pub fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    duration_field(d, UNIT_SECONDS_MS)
}

/// An optional duration field in seconds (serde `with`): written as a
/// number of seconds, read from a number of seconds or text with a unit.
pub mod opt_seconds {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        v: &Option<TypedDuration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.as_ref().map(TypedDuration::as_secs).serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<TypedDuration>, D::Error> {
        typed_field(d, UNIT_SECONDS_MS)
    }
}

/// An optional duration field in milliseconds (serde `with`): written as a
/// number of milliseconds, read from one or from text with a unit.
pub mod opt_millis {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        v: &Option<TypedDuration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.as_ref().map(TypedDuration::as_millis).serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<TypedDuration>, D::Error> {
        typed_field(d, UNIT_MILLIS_MS)
    }
}

/// Milliseconds of a field's unit: seconds, milliseconds.
const UNIT_SECONDS_MS: u64 = 1000;
const UNIT_MILLIS_MS: u64 = 1;

/// An optional number in a field's unit, or text with a unit.
fn typed_field<'de, D: serde::Deserializer<'de>>(
    d: D,
    unit_ms: u64,
) -> Result<Option<TypedDuration>, D::Error> {
    Ok(match Option::<NumberOrText>::deserialize(d)? {
        None => None,
        Some(NumberOrText::Number(n)) => Some(TypedDuration::of(Duration::from_millis(
            n.saturating_mul(unit_ms),
        ))),
        Some(NumberOrText::Text(t)) => Some(typed_duration(&t).map_err(serde::de::Error::custom)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_refuse_in_the_unit_typed_and_force_lowers_only_the_sensible_end() {
        let e = REPEAT_PERIOD
            .check("--every", "5m", secs(300), false)
            .unwrap_err();
        assert!(matches!(e, DurationError::ShortUnlessForced { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "--every 5m is shorter than 60m, the shortest repeat period (add --force if you mean it)"
        );
        assert_eq!(
            REPEAT_PERIOD.check("--every", "5m", secs(300), true),
            Ok(secs(300))
        );
        assert_eq!(
            REPEAT_PERIOD.check("--every", "7d", secs(7 * DAY), false),
            Ok(secs(7 * DAY))
        );
        let e = CRAWL_DELAY
            .check("--max-crawl-delay", "90s", secs(90), false)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--max-crawl-delay 90s is longer than 60s, the longest Crawl-delay a round honours"
        );
        assert!(!e.to_string().contains("ms"), "{e}");
        let e = INVITE_EXPIRY
            .check("--expires", "400d", secs(400 * DAY), true)
            .unwrap_err();
        assert!(matches!(e, DurationError::TooLong { .. }), "{e}");
        assert!(e.to_string().contains("365d"), "{e}");
        let e = DEADLINE
            .check("--min-deadline", "0s", secs(0), true)
            .unwrap_err();
        assert!(matches!(e, DurationError::TooShort { .. }), "{e}");
        // A limit not whole in the typed unit is said in words.
        assert_eq!(in_unit_of("2h", secs(90)), "1m 30s");
        assert_eq!(in_unit_of("1d", secs(366 * DAY)), "366d");
    }
}
