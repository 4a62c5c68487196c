//! What the status page shows, read from the home and the runner's live
//! status and put in a person's words: the state, each scan's progress,
//! today's and this week's totals, uploads pending, the last problems, and
//! every setting with where its value comes from.
//!
//! Read-only; the words are made here so the page's script only places
//! them (as text).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;

use crate::control::{self, LiveStatus, ScanStatus};
use crate::home::{today_date, DayTotals, Home};
use crate::settings::{self, Source};
use beebot_shared::util::human_duration;

/// One scan as the page shows it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ScanView {
    pub site: String,
    pub pages: u64,
    pub links: u64,
    pub pages_per_s: f64,
    /// Pages done of the pages known so far (fetched + queued, at most the
    /// unit's cap), 0–100; `None` before the first page.
    pub progress_pct: Option<f64>,
    /// "120 of about 400 pages".
    pub progress_text: String,
}

/// One problem, in words and in detail.
#[derive(Clone, Debug, Serialize)]
pub struct ProblemView {
    pub at_ms: u64,
    pub at_text: String,
    pub plain: &'static str,
    pub detail: String,
    pub times: u32,
}

/// One setting: its value, where it comes from, what it means.
#[derive(Clone, Debug, Serialize)]
pub struct SettingView {
    pub key: &'static str,
    pub value: String,
    pub source: Source,
    /// "set here", "default", "set by the environment (BEEBOT_SLOTS)", …
    pub source_text: String,
    pub doc: &'static str,
    /// The file's value is overridden: a change here waits for the client
    /// to start without the override.
    pub overridden: bool,
}

/// Everything the page shows.
#[derive(Clone, Debug, Serialize)]
pub struct PageView {
    pub enrolled: bool,
    pub project: Option<String>,
    pub host_id: Option<u64>,
    pub name: Option<String>,
    /// crawling, paused, outside-window, on-battery, offline,
    /// waiting-for-work, starting, not-joined, revoked
    pub state: &'static str,
    pub state_text: String,
    pub until_ms: Option<u64>,
    pub scans: Vec<ScanView>,
    pub concurrency: Option<u32>,
    pub slots_ceiling: Option<u32>,
    pub today: DayTotals,
    pub week: DayTotals,
    pub pending_uploads: u64,
    pub problems: Vec<ProblemView>,
    pub settings: Vec<SettingView>,
    pub settings_error: Option<String>,
    /// The crawl window's rules by the weekday they start on (Monday
    /// first, minutes of the day); `None`: always.
    pub window_days: Option<[Vec<(u32, u32)>; 7]>,
    pub revoked: Option<String>,
    /// Why the deployment's invite code did not join (not joined yet).
    pub join_problem: Option<String>,
}

/// Read what the page shows (`cli`: the runner's settings above the file;
/// `join_problem`: why joining by itself failed).
pub fn read(
    home: &Home,
    cli: &[(&'static str, String)],
    join_problem: Option<String>,
) -> Result<PageView> {
    let enrolment = home.identity().enrolment()?;
    let live = control::read_live_status(&home.data);
    let (shown, settings_error) = match settings::load(home, &|k| std::env::var(k).ok(), cli) {
        Ok((s, shown)) => (Some((s, shown)), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let today = today_date();
    let revoked = home.identity().revocation().map(|r| r.message);
    let now_ms = control::unix_ms(SystemTime::now());
    let (state, state_text) = home_state(
        enrolment.is_some(),
        revoked.as_deref(),
        live.as_ref(),
        now_ms,
    );
    let file_values = settings_file_values(home);
    let (today, week) = home.days().today_and_week(&today);
    Ok(PageView {
        enrolled: enrolment.is_some(),
        project: enrolment.as_ref().map(|e| e.server_addr.clone()),
        host_id: enrolment.as_ref().map(|e| e.host_id),
        name: enrolment.as_ref().map(|e| e.name.clone()),
        state,
        state_text,
        until_ms: live.as_ref().and_then(|l| l.until_ms),
        scans: live
            .as_ref()
            .map(|l| l.scans.iter().map(scan_view).collect())
            .unwrap_or_default(),
        concurrency: live.as_ref().and_then(|l| l.concurrency),
        slots_ceiling: live.as_ref().and_then(|l| l.slots_ceiling),
        today,
        week,
        pending_uploads: live.as_ref().map_or(0, |l| l.pending_uploads),
        problems: live
            .as_ref()
            .map(|l| {
                l.problems
                    .iter()
                    .rev()
                    .map(|p| ProblemView {
                        at_ms: p.at_ms,
                        at_text: control::local_time(UNIX_EPOCH + Duration::from_millis(p.at_ms)),
                        plain: p.kind.plain(),
                        detail: p.detail.clone(),
                        times: p.times,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        window_days: shown.as_ref().and_then(|(s, _)| s.window.by_start_day()),
        settings: shown
            .map(|(_, shown)| {
                shown
                    .into_iter()
                    .map(|s| {
                        let doc = settings::KEYS
                            .iter()
                            .find(|k| k.0 == s.key)
                            .map_or("", |k| k.2);
                        let overridden =
                            matches!(s.source, Source::Environment | Source::CommandLine)
                                && file_values.iter().any(|k| k == s.key);
                        SettingView {
                            source_text: source_words(s.key, s.source),
                            key: s.key,
                            value: s.value,
                            source: s.source,
                            doc,
                            overridden,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
        settings_error,
        join_problem: join_problem.filter(|_| enrolment.is_none()),
        revoked,
    })
}

/// Keys the settings file sets.
fn settings_file_values(home: &Home) -> Vec<String> {
    settings::read_file(home)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

/// Where a value comes from, in words.
pub fn source_words(key: &str, source: Source) -> String {
    match source {
        Source::Default => "default".into(),
        Source::File => "set here (or with `beebot config set`)".into(),
        Source::Environment => format!(
            "set by the environment (BEEBOT_{}): a change here applies once it is gone",
            key.to_ascii_uppercase()
        ),
        Source::CommandLine => {
            "set by the command that started BeeBot: a change here applies once it is gone".into()
        }
    }
}

/// The client's state and its words, as the page and the notification-area
/// icon show them: not joined, revoked, starting (no live status yet), or
/// the runner's live state ([`state_words`]).
pub fn home_state(
    joined: bool,
    revoked: Option<&str>,
    live: Option<&LiveStatus>,
    now_ms: u64,
) -> (&'static str, String) {
    match (joined, revoked, live) {
        (false, _, _) => (
            "not-joined",
            "Not joined yet: paste the invite code from your IT team below.".to_string(),
        ),
        (true, Some(m), _) => (
            "revoked",
            format!("The project removed this computer ({m}). Ask your IT team for a new invite code, then leave and join again."),
        ),
        (true, None, None) => ("starting", "Starting…".to_string()),
        (true, None, Some(l)) => state_words(l, now_ms),
    }
}

/// The state of `home` now ([`home_state`] from its files).
pub fn state_now(home: &Home) -> (&'static str, String) {
    let joined = home.identity().enrolment().ok().flatten().is_some();
    let revoked = home.identity().revocation().map(|r| r.message);
    let live = control::read_live_status(&home.data);
    let now_ms = control::unix_ms(SystemTime::now());
    home_state(joined, revoked.as_deref(), live.as_ref(), now_ms)
}

/// The live state in a person's words.
pub fn state_words(l: &LiveStatus, now_ms: u64) -> (&'static str, String) {
    let left = |until: u64| human_duration(Duration::from_millis(until.saturating_sub(now_ms)));
    let at = |until: u64| control::local_time(UNIX_EPOCH + Duration::from_millis(until));
    match (l.state.as_str(), l.until_ms) {
        ("running", _) => {
            let n = l.scans.len();
            (
                "crawling",
                format!("Crawling {n} site{}.", if n == 1 { "" } else { "s" }),
            )
        }
        ("paused", Some(u)) => (
            "paused",
            format!("Paused for {} more (until {}).", left(u), at(u)),
        ),
        ("paused", None) => ("paused", "Paused until you resume.".into()),
        ("outside-window", Some(u)) => (
            "outside-window",
            format!(
                "Outside the crawl window: starts again in {} (at {}).",
                left(u),
                at(u)
            ),
        ),
        ("outside-window", None) => (
            "outside-window",
            "Outside the crawl window (no window opens in the next two weeks).".into(),
        ),
        ("on-battery", _) => (
            "on-battery",
            "On battery: BeeBot waits until the computer is plugged in (setting run_on_battery)."
                .into(),
        ),
        ("offline", Some(u)) => ("offline", format!("Offline: tries again in {}.", left(u))),
        ("offline", None) => (
            "offline",
            "Offline: trying to reach the project's server.".into(),
        ),
        ("backing-off", Some(u)) => (
            "waiting-for-work",
            format!("Waiting for work: asks again in {}.", left(u)),
        ),
        _ => (
            "waiting-for-work",
            "Waiting for work from the project.".into(),
        ),
    }
}

fn scan_view(s: &ScanStatus) -> ScanView {
    let known = s
        .queued
        .map(|q| s.pages + q)
        .map(|k| s.page_cap.map_or(k, |cap| k.min(cap)).max(s.pages));
    let progress_pct = known
        .filter(|k| *k > 0)
        .map(|k| (s.pages as f64 * 100.0 / k as f64).min(100.0));
    let progress_text = match known {
        Some(k) if k > s.pages => format!("{} of about {k} pages", s.pages),
        _ => format!("{} pages", s.pages),
    };
    ScanView {
        site: s.site.clone(),
        pages: s.pages,
        links: s.links,
        pages_per_s: s.pages_per_s,
        progress_pct,
        progress_text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(pages: u64, queued: Option<u64>, cap: Option<u64>) -> ScanStatus {
        ScanStatus {
            unit_id: 1,
            site: "a.test".into(),
            pages,
            links: 0,
            pages_per_s: 1.0,
            deadline_ms: None,
            queued,
            page_cap: cap,
        }
    }

    #[test]
    fn a_scans_progress_is_its_pages_of_the_pages_known() {
        let v = scan_view(&scan(120, Some(280), Some(1000)));
        assert_eq!(v.progress_pct, Some(30.0));
        assert_eq!(v.progress_text, "120 of about 400 pages");
        // The cap bounds what is known.
        let v = scan_view(&scan(100, Some(900), Some(200)));
        assert_eq!(v.progress_pct, Some(50.0));
        // Nothing queued: done as far as anyone knows.
        let v = scan_view(&scan(40, Some(0), None));
        assert_eq!(
            (v.progress_pct, v.progress_text.as_str()),
            (Some(100.0), "40 pages")
        );
        // An old runner that does not say its queue.
        assert_eq!(scan_view(&scan(5, None, None)).progress_pct, None);
        assert_eq!(scan_view(&scan(0, Some(0), None)).progress_pct, None);
    }

    #[test]
    fn every_live_state_reads_as_words() {
        let now = 1_000_000_000u64;
        let l = |state: &str, until: Option<u64>| LiveStatus {
            state: state.into(),
            until_ms: until,
            ..Default::default()
        };
        let cases = [
            (l("running", None), "crawling", "Crawling 0 sites."),
            (l("paused", None), "paused", "Paused until you resume."),
            (
                l("paused", Some(now + 3_600_000)),
                "paused",
                "Paused for 1h more",
            ),
            (
                l("outside-window", Some(now + 60_000)),
                "outside-window",
                "starts again in 1m",
            ),
            (l("on-battery", None), "on-battery", "plugged in"),
            (
                l("offline", Some(now + 30_000)),
                "offline",
                "tries again in 30s",
            ),
            (
                l("backing-off", Some(now + 30_000)),
                "waiting-for-work",
                "asks again in 30s",
            ),
            (l("idle", None), "waiting-for-work", "Waiting for work"),
        ];
        for (live, state, words) in cases {
            let (s, t) = state_words(&live, now);
            assert_eq!(s, state, "{}", live.state);
            assert!(t.contains(words), "{}: {t}", live.state);
        }
    }

    #[test]
    fn a_home_not_joined_asks_for_the_invite_code() {
        let d = tempfile::tempdir().unwrap();
        let h = Home {
            config: d.path().to_path_buf(),
            data: d.path().to_path_buf(),
        };
        crate::settings::set(&h, "slots", "8").unwrap();
        let v = read(
            &h,
            &[("bandwidth_kbps", "100".into())],
            Some("damaged".into()),
        )
        .unwrap();
        assert_eq!(v.join_problem.as_deref(), Some("damaged"));
        assert!(!v.enrolled);
        assert_eq!(v.state, "not-joined");
        let slots = v.settings.iter().find(|s| s.key == "slots").unwrap();
        assert_eq!((slots.value.as_str(), slots.source), ("8", Source::File));
        let bw = v
            .settings
            .iter()
            .find(|s| s.key == "bandwidth_kbps")
            .unwrap();
        assert_eq!(bw.source, Source::CommandLine);
        assert!(!bw.overridden, "the file does not set it");
        assert!(v.window_days.is_none());
    }
}
