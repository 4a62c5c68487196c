//! A round's parameters, each written once: [`RoundParams`], what a round
//! runs with (stored with it, fixed when it starts, built-in defaults in
//! its `Default`), and [`RoundOverrides`], the same fields each optional:
//! the flags of `round start`, the admin API's body, and the config file's
//! `[round]` table (its keys are the field names). [`RoundParams::apply`]
//! lays overrides over defaults; [`RoundParams::validate`] holds every
//! check a round's parameters must pass. Nothing here does I/O.
//!
//! Invariant: `RoundParams`' serialised form is the store's (bincode, field
//! by field): its fields and their order never change here.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use beebot_shared::limits::{MAX_DELAY_MS, MAX_PAGES_PER_SITE};
use beebot_shared::scope::Scope;
use beebot_shared::util::human_duration;

use crate::durations::{
    opt_millis, opt_seconds, secs, typed_duration, DurationError, TypedDuration, CRAWL_DELAY,
    DEADLINE, REPEAT_PERIOD, SCAN_TIME,
};
use crate::scheduler;
use crate::validate::ValidateMode;

/// Settings of one round, fixed when it starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundParams {
    pub policy: String,
    pub max_pages: u32,
    pub max_depth: u32,
    pub delay_ms: u64,
    pub scope: Scope,
    pub max_page_bytes: u64,
    /// Longest one scan may run, seconds.
    pub max_seconds: u64,
    /// Deadlines are bounded to `[deadline_min_s, deadline_max_s]` after issue.
    pub deadline_min_s: u64,
    pub deadline_max_s: u64,
    /// Failed or expired attempts after which a job is marked failed.
    pub max_attempts: u32,
    /// Longest robots.txt Crawl-delay the round honours, ms.
    pub max_crawl_delay_ms: u64,
    /// How the round's results are validated.
    pub validate: ValidateMode,
}

impl Default for RoundParams {
    /// The built-in defaults (a config file's `[round]` overrides them).
    fn default() -> Self {
        RoundParams {
            policy: "adaptive".into(),
            max_pages: 1000,
            max_depth: 20,
            delay_ms: 1000,
            scope: Scope::Host,
            max_page_bytes: 2 * 1024 * 1024,
            max_seconds: 6 * 3600,
            deadline_min_s: 120,
            deadline_max_s: 2 * 24 * 3600,
            max_attempts: 5,
            max_crawl_delay_ms: 30_000,
            validate: ValidateMode::Adaptive,
        }
    }
}

/// Why a round's parameters were refused. Each message says what is allowed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoundParamsError {
    #[error(transparent)]
    Duration(#[from] DurationError),
    #[error("unknown policy `{policy}` (known: {known})")]
    UnknownPolicy { policy: String, known: String },
    #[error("max pages must be between 1 and {MAX_PAGES_PER_SITE}")]
    MaxPages,
    #[error("the Crawl-delay maximum must be at most {MAX_DELAY_MS} ms")]
    CrawlDelay,
    #[error("delay must be at most {MAX_DELAY_MS} ms")]
    Delay,
    #[error("the scan time budget (max scan time) must be positive")]
    ScanTime,
    #[error("max attempts and minimum deadline must be positive")]
    AttemptsOrDeadline,
    #[error("a repeat period must be positive")]
    RepeatPeriod,
    #[error("the largest page read (max_page_bytes) must be between {MIN_PAGE_BYTES} and {MAX_PAGE_BYTES} bytes")]
    PageBytes,
}

/// Smallest `max_page_bytes` a round may set: below it no page's links
/// are read (0 once gave a "complete" round with no link).
pub const MIN_PAGE_BYTES: u64 = 4 * 1024;
/// Largest `max_page_bytes` a round may set (a page read whole into the
/// client's memory, once per slot).
pub const MAX_PAGE_BYTES: u64 = 64 * 1024 * 1024;

impl RoundParams {
    /// The limits a unit of a round with these parameters carries.
    pub fn unit_limits(&self) -> beebot_shared::sign::UnitLimits {
        beebot_shared::sign::UnitLimits {
            max_pages: self.max_pages,
            max_depth: self.max_depth,
            delay_ms: self.delay_ms,
            max_page_bytes: self.max_page_bytes,
            max_seconds: self.max_seconds,
            max_crawl_delay_ms: self.max_crawl_delay_ms,
        }
    }

    /// Lay `o` over these parameters: each field given replaces its own.
    pub fn apply(&mut self, o: &RoundOverrides) {
        fn set<T: Clone>(field: &mut T, v: &Option<T>) {
            if let Some(v) = v {
                *field = v.clone();
            }
        }
        let secs_of = |d: &Option<TypedDuration>| d.as_ref().map(TypedDuration::as_secs);
        set(&mut self.policy, &o.policy.map(|p| p.as_str().to_string()));
        set(&mut self.max_pages, &o.max_pages);
        set(&mut self.max_depth, &o.max_depth);
        set(&mut self.delay_ms, &o.delay_ms);
        set(&mut self.scope, &o.scope);
        set(&mut self.max_page_bytes, &o.max_page_bytes);
        set(&mut self.max_seconds, &secs_of(&o.max_seconds));
        set(&mut self.deadline_min_s, &secs_of(&o.deadline_min_s));
        set(&mut self.deadline_max_s, &secs_of(&o.deadline_max_s));
        set(&mut self.max_attempts, &o.max_attempts);
        let crawl_delay = o.max_crawl_delay_ms.as_ref().map(TypedDuration::as_millis);
        set(&mut self.max_crawl_delay_ms, &crawl_delay);
        set(&mut self.validate, &o.validate);
    }

    /// These parameters with `o` laid over them.
    pub fn with(mut self, o: &RoundOverrides) -> RoundParams {
        self.apply(o);
        self
    }

    /// The durations within their bounds (`force`: the short ends allowed)
    /// and the deadlines not crossed; `every`, a repeat period, too.
    pub fn check_durations(
        &self,
        every: Option<Duration>,
        force: bool,
    ) -> Result<(), DurationError> {
        DEADLINE.check_value("--min-deadline", secs(self.deadline_min_s), force)?;
        DEADLINE.check_value("--max-deadline", secs(self.deadline_max_s), force)?;
        if self.deadline_max_s < self.deadline_min_s {
            return Err(DurationError::DeadlinesCrossed {
                min: human_duration(secs(self.deadline_min_s)),
                max: human_duration(secs(self.deadline_max_s)),
            });
        }
        SCAN_TIME.check_value("--max-scan-time", secs(self.max_seconds), force)?;
        let crawl_delay = Duration::from_millis(self.max_crawl_delay_ms);
        CRAWL_DELAY.check_value("--max-crawl-delay", crawl_delay, force)?;
        if let Some(every) = every {
            REPEAT_PERIOD.check_value("--every", every, force)?;
        }
        Ok(())
    }

    /// Every check a round's parameters must pass before it starts (out of
    /// range is refused, never clamped): [`RoundParams::check_durations`]
    /// (the admin's bounds), then [`RoundParams::check_values`].
    pub fn validate(&self, every: Option<Duration>, force: bool) -> Result<(), RoundParamsError> {
        self.check_durations(every, force)?;
        self.check_values(every.map(|e| e.as_millis() as u64))
    }

    /// The checks the grid itself makes at every round start, whoever
    /// asks (the admin API, the simulator, tests): the policy, page cap,
    /// delays, scan time, attempts and repeat period (`every_ms`).
    pub fn check_values(&self, every_ms: Option<u64>) -> Result<(), RoundParamsError> {
        if scheduler::policy_by_name(&self.policy).is_none() {
            return Err(RoundParamsError::UnknownPolicy {
                policy: self.policy.clone(),
                known: scheduler::POLICY_NAMES.join(", "),
            });
        }
        if self.max_pages == 0 || self.max_pages > MAX_PAGES_PER_SITE {
            return Err(RoundParamsError::MaxPages);
        }
        if self.max_crawl_delay_ms > MAX_DELAY_MS {
            return Err(RoundParamsError::CrawlDelay);
        }
        if self.delay_ms > MAX_DELAY_MS {
            return Err(RoundParamsError::Delay);
        }
        if self.max_seconds == 0 {
            return Err(RoundParamsError::ScanTime);
        }
        if self.max_attempts == 0 || self.deadline_min_s == 0 {
            return Err(RoundParamsError::AttemptsOrDeadline);
        }
        if every_ms == Some(0) {
            return Err(RoundParamsError::RepeatPeriod);
        }
        if !(MIN_PAGE_BYTES..=MAX_PAGE_BYTES).contains(&self.max_page_bytes) {
            return Err(RoundParamsError::PageBytes);
        }
        Ok(())
    }
}

/// The parameters of a round that differ from the defaults: `round start`'s
/// flags, the admin API's body and the config file's `[round]` table. The
/// durations are said with a unit on the command line and in the config
/// file (`"6h"`), and go over the API as numbers in the field's unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args, Serialize, Deserialize)]
#[serde(default)]
pub struct RoundOverrides {
    /// Scheduling policy: adaptive (default), round-robin, batch, level, pack, size-aware.
    #[arg(long)]
    pub policy: Option<scheduler::PolicyName>,
    /// Most pages fetched per site.
    #[arg(long)]
    pub max_pages: Option<u32>,
    /// Most links followed from a site's front page to reach a page.
    #[arg(long)]
    pub max_depth: Option<u32>,
    /// Politeness delay between requests to one host.
    #[arg(long)]
    pub delay_ms: Option<u64>,
    /// What a scan follows: links on the site's host, or also on its
    /// subdomains or its registrable domain.
    #[arg(long)]
    pub scope: Option<Scope>,
    /// Largest page read, bytes (the config file only).
    #[arg(skip)]
    pub max_page_bytes: Option<u64>,
    /// Longest deadline a unit gets (e.g. 2d; at most 30d), not below the
    /// minimum deadline. Deadlines find hosts that went silent; a scan
    /// that reports progress is extended.
    #[arg(long = "max-deadline", value_parser = typed_duration)]
    #[serde(with = "opt_seconds")]
    pub deadline_max_s: Option<TypedDuration>,
    /// Shortest deadline a unit gets (default: the config's, 2m; under
    /// 1m only with --force).
    #[arg(long = "min-deadline", value_parser = typed_duration)]
    #[serde(with = "opt_seconds")]
    pub deadline_min_s: Option<TypedDuration>,
    /// Time budget of one scan (e.g. 2h; default 6h; 1m to 7d). A scan that reaches
    /// it returns its records and frontier, and its site continues from
    /// there in another scan: a site is never cut short by it.
    #[arg(long = "max-scan-time", value_parser = typed_duration)]
    #[serde(with = "opt_seconds")]
    pub max_seconds: Option<TypedDuration>,
    /// Failed or expired attempts before a job is marked failed.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Longest robots.txt Crawl-delay to honour (e.g. 30s; at most 60s).
    #[arg(long = "max-crawl-delay", value_parser = typed_duration)]
    #[serde(with = "opt_millis")]
    pub max_crawl_delay_ms: Option<TypedDuration>,
    /// Result validation: `adaptive` (default: an untrusted host's
    /// results are checked by another host's scan, a trusted host's at
    /// random), `all` (every result checked) or `off`.
    #[arg(long)]
    pub validate: Option<ValidateMode>,
}

impl RoundOverrides {
    /// Each duration given within its bounds, refused in the words typed
    /// after its flag (`force`: the short ends allowed).
    pub fn check_typed(&self, force: bool) -> Result<(), DurationError> {
        for (flag, bounds, d) in [
            ("--max-deadline", &DEADLINE, &self.deadline_max_s),
            ("--min-deadline", &DEADLINE, &self.deadline_min_s),
            ("--max-scan-time", &SCAN_TIME, &self.max_seconds),
            ("--max-crawl-delay", &CRAWL_DELAY, &self.max_crawl_delay_ms),
        ] {
            if let Some(d) = d {
                d.within(flag, bounds, force)?;
            }
        }
        Ok(())
    }
}

/// The config file's `[round]` table: the built-in defaults with the keys
/// given laid over them (serde `deserialize_with`).
pub fn round_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RoundParams, D::Error> {
    Ok(RoundParams::default().with(&RoundOverrides::deserialize(d)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durations::DAY;
    use clap::Parser;

    #[test]
    fn round_deadlines_may_not_cross() {
        let mut p = RoundParams::default();
        assert_eq!(p.check_durations(None, false), Ok(()));
        p.deadline_max_s = 2;
        // Below the sensible minimum first...
        assert!(matches!(
            p.check_durations(None, false),
            Err(DurationError::ShortUnlessForced { .. })
        ));
        // ...and with --force, below the round's minimum deadline: refused,
        // not clamped.
        let e = p.check_durations(None, true).unwrap_err();
        assert_eq!(
            e,
            DurationError::DeadlinesCrossed {
                min: "2m".into(),
                max: "2s".into()
            }
        );
        p.deadline_min_s = 2;
        assert_eq!(p.check_durations(None, true), Ok(()));
        assert!(p.check_durations(Some(secs(5)), false).is_err());
    }

    #[test]
    fn overrides_replace_only_the_fields_given() {
        let o = RoundOverrides {
            max_pages: Some(7),
            scope: Some(Scope::Domain),
            deadline_max_s: Some(TypedDuration::of(secs(DAY))),
            max_crawl_delay_ms: typed_duration("2s").ok(),
            validate: Some(ValidateMode::Off),
            ..RoundOverrides::default()
        };
        let p = RoundParams::default().with(&o);
        assert_eq!(
            p,
            RoundParams {
                max_pages: 7,
                scope: Scope::Domain,
                deadline_max_s: DAY,
                max_crawl_delay_ms: 2000,
                validate: ValidateMode::Off,
                ..RoundParams::default()
            }
        );
        assert_eq!(
            RoundParams::default().with(&RoundOverrides::default()),
            RoundParams::default()
        );
    }

    /// `round start`'s flags, parsed as the CLI does.
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        o: RoundOverrides,
    }

    #[test]
    fn flags_the_api_and_the_config_file_say_the_same_overrides() {
        let flags = Flags::try_parse_from([
            "x",
            "--policy",
            "batch",
            "--scope",
            "subdomains",
            "--max-scan-time",
            "2h",
            "--max-crawl-delay",
            "30s",
            "--validate",
            "all",
        ])
        .expect("flags");
        let o = flags.o;
        assert_eq!(o.policy, Some(scheduler::PolicyName::Batch));
        assert_eq!(o.max_seconds.as_ref().map(|d| d.text.as_str()), Some("2h"));
        // Over the API: numbers in each field's unit, the same field names.
        let json = serde_json::to_value(&o).expect("encode");
        assert_eq!(json["max_seconds"], 7200);
        assert_eq!(json["max_crawl_delay_ms"], 30_000);
        assert_eq!(json["scope"], "subdomains");
        assert_eq!(json["validate"], "all");
        let back: RoundOverrides = serde_json::from_value(json).expect("decode");
        assert_eq!(
            RoundParams::default().with(&back),
            RoundParams::default().with(&o)
        );
        // The config file: numbers or text with a unit, keys missing are None.
        let toml_o: RoundOverrides = toml::from_str(
            "max_seconds = \"2h\"\nmax_crawl_delay_ms = 30000\npolicy = \"batch\"\n",
        )
        .expect("toml");
        assert_eq!(toml_o.max_pages, None);
        let p = RoundParams::default().with(&toml_o);
        assert_eq!((p.max_seconds, p.max_crawl_delay_ms), (7200, 30_000));
        // Names outside the lists are refused by the parser.
        for bad in [
            ["--policy", "fastest"],
            ["--scope", "web"],
            ["--validate", "some"],
        ] {
            assert!(
                Flags::try_parse_from(["x", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn validate_keeps_each_check_and_its_message() {
        let ok = RoundParams::default();
        assert_eq!(ok.validate(None, false), Ok(()));
        let refused = |p: RoundParams, every: Option<Duration>| {
            p.validate(every, true).unwrap_err().to_string()
        };
        let e = refused(
            RoundParams {
                policy: "x".into(),
                ..ok.clone()
            },
            None,
        );
        assert!(
            e.starts_with("unknown policy `x` (known: adaptive, "),
            "{e}"
        );
        let e = refused(
            RoundParams {
                max_pages: 0,
                ..ok.clone()
            },
            None,
        );
        assert_eq!(
            e,
            format!("max pages must be between 1 and {MAX_PAGES_PER_SITE}")
        );
        let e = refused(
            RoundParams {
                delay_ms: MAX_DELAY_MS + 1,
                ..ok.clone()
            },
            None,
        );
        assert_eq!(e, format!("delay must be at most {MAX_DELAY_MS} ms"));
        let e = refused(
            RoundParams {
                max_attempts: 0,
                ..ok.clone()
            },
            None,
        );
        assert_eq!(e, "max attempts and minimum deadline must be positive");
        let e = refused(ok.clone(), Some(secs(0)));
        assert!(e.starts_with("--every "), "{e}");
    }
}
