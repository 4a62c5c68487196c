//! The running client's controls: a gate that holds scans at a page boundary
//! while paused or outside the time window, the control commands that
//! `beebot pause` / `resume` / `config set` (`reload`) / `leave` (`stop`)
//! send (through the status page's API, [`crate::ui`], with the owner's
//! secret), and the live status file `beebot status` and the page read.
//!
//! One parser (`apply_command`) for every command, whoever sends it. Recent
//! problems are kept with their plain words (`ProblemKind`), at most
//! `MAX_RECENT_PROBLEMS`. The scans' check at every page (`Gate::is_open`)
//! reads the window and the power supplies at most every `GATE_RECHECK` (1 s),
//! and a pause, a resume or new rules at once. A scan held by a pause or the
//! window looks at the gate again every `GATE_POLL` (200 ms): the gate has no
//! wake of its own yet.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cancel::Cancel;
use crate::settings;
use crate::window::Windows;

/// How often a held scan looks at the gate again.
const GATE_POLL: Duration = Duration::from_millis(200);
/// How long [`Gate::is_open`]'s reading of the window and the power supply
/// holds: every scan asks at every page, and a reading looks at the time
/// zone and the power supplies (a few file reads). A pause, a resume and
/// new rules take effect at once.
pub const GATE_RECHECK: Duration = Duration::from_secs(1);
/// The longest timed pause: a year (past it, a time would not be shown).
pub const MAX_PAUSE: Duration = Duration::from_secs(366 * 24 * 3600);
/// A status file older than this means the client is not running.
pub const STATUS_FRESH: Duration = Duration::from_secs(10);

/// Why scans are held, if they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hold {
    Open,
    /// Paused by the user until this time (`None`: until resumed).
    Paused(Option<SystemTime>),
    /// Outside the time window until this time (`None`: no window ahead in the horizon).
    OutsideWindow(Option<SystemTime>),
    /// Running on battery and the settings say not to.
    OnBattery,
}

/// Reads the settings again for a running client (`reload`): applies what
/// the gate holds itself and offers the rest to the work loop
/// ([`Gate::take_settings`]); returns the answer line for the user.
pub type Reloader = Box<dyn Fn(&Gate, Option<&str>) -> Result<String> + Send + Sync>;

/// The `reload` of a running client (`beebot run`): read the settings
/// again under the same environment and command line, give the gate its
/// window and battery rule and the work loop the rest, and say what changed.
pub fn reloader(
    home: crate::home::Home,
    cli: Vec<(&'static str, String)>,
    shown: Vec<settings::Shown>,
) -> Reloader {
    let last = std::sync::Mutex::new(shown);
    Box::new(move |gate, key| {
        let (s, now) = settings::load(&home, &|k| std::env::var(k).ok(), &cli)
            .context("the running client keeps its settings")?;
        gate.set_rules(s.window.clone(), !s.run_on_battery);
        gate.offer_settings(s);
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        let answer = settings::reload_answer(&last, &now, key);
        // A setting that needs a restart stays as the client started.
        for (l, n) in last.iter_mut().zip(now) {
            if !settings::NEEDS_RESTART.contains(&l.key) {
                *l = n;
            }
        }
        Ok(answer)
    })
}

/// Whether scans may run now.
pub struct Gate {
    windows: Mutex<Windows>,
    /// Hold while the machine runs on battery.
    stop_on_battery: AtomicBool,
    /// `Some(None)`: paused until resumed; `Some(Some(t))`: paused until t.
    paused: Mutex<Option<Option<SystemTime>>>,
    /// `beebot leave` asked the runner to stop.
    stop: tokio::sync::Notify,
    /// Settings read again, for the work loop to take.
    settings: Mutex<Option<crate::settings::Settings>>,
    reloader: Mutex<Option<Arc<Reloader>>>,
    /// The last reading for [`Gate::is_open`]: when, and whether open.
    reading: Mutex<Option<(std::time::Instant, bool)>>,
    /// The data dir whose live status a pause or resume rewrites at once
    /// ([`Gate::keep_status_in`]).
    status_dir: Mutex<Option<std::path::PathBuf>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("windows", &self.windows)
            .field("stop_on_battery", &self.stop_on_battery)
            .field("paused", &self.paused)
            .finish_non_exhaustive()
    }
}

impl Gate {
    pub fn new(windows: Windows, stop_on_battery: bool) -> Gate {
        Gate {
            windows: Mutex::new(windows),
            stop_on_battery: AtomicBool::new(stop_on_battery),
            paused: Mutex::new(None),
            stop: tokio::sync::Notify::new(),
            settings: Mutex::new(None),
            reloader: Mutex::new(None),
            reading: Mutex::new(None),
            status_dir: Mutex::new(None),
        }
    }

    /// Keep the live status in `data_dir` true at once when a pause or a
    /// resume changes the state, rather than at the runner's next write:
    /// `beebot status` and the page right after `beebot pause` say paused.
    pub fn keep_status_in(&self, data_dir: &Path) {
        *self.status_dir.lock().unwrap_or_else(|p| p.into_inner()) = Some(data_dir.to_path_buf());
    }

    /// Rewrite the live status's state from the hold now (a no-op without
    /// a status dir, or when no runner wrote a fresh status).
    fn restate(&self) {
        let Some(dir) = self
            .status_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return;
        };
        let _writing = status_lock();
        let Some(mut s) = read_live_status(&dir) else {
            return;
        };
        let (state, until) = match self.hold() {
            Hold::Paused(u) => ("paused", u.map(unix_ms)),
            Hold::OutsideWindow(u) => ("outside-window", u.map(unix_ms)),
            Hold::OnBattery => ("on-battery", None),
            Hold::Open if s.scans.is_empty() => ("idle", None),
            Hold::Open => ("running", None),
        };
        s.state = state.into();
        s.until_ms = until;
        write_status(&dir, &s);
    }

    /// Read the window and the power supply again at the next check.
    fn forget_reading(&self) {
        *self.reading.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn windows_now(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn windows(&self) -> Windows {
        self.windows_now().clone()
    }

    /// A new window and battery rule, from settings read again.
    pub fn set_rules(&self, windows: Windows, stop_on_battery: bool) {
        *self.windows_now() = windows;
        self.stop_on_battery
            .store(stop_on_battery, Ordering::Relaxed);
        self.forget_reading();
    }

    /// How `reload` reads the settings again (set by `beebot run`).
    pub fn set_reloader(&self, r: Reloader) {
        *self.reloader.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(r));
    }

    /// Offer settings read again to the work loop.
    pub fn offer_settings(&self, s: crate::settings::Settings) {
        *self.settings.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }

    /// Settings read again since the last call, if any.
    pub fn take_settings(&self) -> Option<crate::settings::Settings> {
        self.settings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Ask the runner to stop (as SIGTERM does).
    pub fn request_stop(&self) {
        self.stop.notify_one();
    }

    /// Resolves once a stop was asked for.
    pub async fn stopped(&self) {
        self.stop.notified().await
    }

    pub fn pause(&self, until: Option<SystemTime>) {
        *self.paused.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
        self.forget_reading();
        self.restate();
    }

    /// Resume; false when it was not paused.
    pub fn resume(&self) -> bool {
        let was = self
            .paused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some();
        self.forget_reading();
        self.restate();
        was
    }

    /// The hold at wall-clock `now` (local time for the window).
    pub fn hold_at(&self, now: SystemTime, local: chrono::NaiveDateTime) -> Hold {
        let mut paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        match *paused {
            Some(Some(until)) if until <= now => *paused = None,
            Some(until) => return Hold::Paused(until),
            None => {}
        }
        if self.stop_on_battery.load(Ordering::Relaxed) && machine_on_battery() {
            return Hold::OnBattery;
        }
        let windows = self.windows_now();
        if windows.is_open(local) {
            return Hold::Open;
        }
        // Exact: a time cut to whole seconds (or milliseconds) would print
        // as the minute before the window opens.
        let next = windows
            .next_change(local)
            .map(|t| now + (t - local).to_std().unwrap_or_default());
        Hold::OutsideWindow(next)
    }

    pub fn hold(&self) -> Hold {
        // One clock reading for both: two would put the opening of the
        // window a moment early (and print the minute before).
        let now = SystemTime::now();
        self.hold_at(now, crate::localtime::at(now).naive_local())
    }

    /// Whether scans may go on: [`Gate::hold`] read at most every
    /// [`GATE_RECHECK`] (a pause, a resume or new rules at once).
    pub fn is_open(&self) -> bool {
        let mut reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, open)) = *reading {
            if at.elapsed() < GATE_RECHECK {
                return open;
            }
        }
        let open = self.hold() == Hold::Open;
        *reading = Some((std::time::Instant::now(), open));
        open
    }

    /// Block (a scan thread, at a page boundary) while held, until open or cancelled.
    pub fn wait_open(&self, cancel: &Cancel) {
        while !cancel.is_set() && !self.is_open() {
            cancel.sleep(GATE_POLL);
        }
    }

    /// The open intervals ahead, for work requests (`None`: always open).
    pub fn open_intervals(&self) -> Option<Vec<(u64, u64)>> {
        self.windows_now().intervals(
            crate::localtime::now().naive_local(),
            beebot_shared::limits::MAX_WINDOW_INTERVALS,
        )
    }

    /// Seconds until the window closes (`None`: no window, or not open).
    pub fn seconds_left_open(&self) -> Option<u64> {
        self.windows_now()
            .seconds_left_open(crate::localtime::now().naive_local())
    }
}

/// Where Linux describes power supplies.
#[cfg(not(windows))]
const POWER_SUPPLY_DIR: &str = "/sys/class/power_supply";
/// Power supplies looked at, at most.
const MAX_POWER_SUPPLIES: usize = 32;

/// Whether this machine runs on battery now: Linux's power supplies in
/// sysfs, Windows' `GetSystemPowerStatus`; elsewhere (macOS), never.
pub fn machine_on_battery() -> bool {
    #[cfg(windows)]
    {
        beebot_win32::power::status().is_some_and(|s| s.on_battery())
    }
    #[cfg(not(windows))]
    {
        on_battery(Path::new(POWER_SUPPLY_DIR))
    }
}

/// Whether the machine runs on battery: it has a battery and no mains supply
/// is online (Linux sysfs layout).
pub fn on_battery(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut battery = false;
    let mut mains_online = false;
    for e in entries.flatten().take(MAX_POWER_SUPPLIES) {
        let p = e.path();
        let kind = std::fs::read_to_string(p.join("type")).unwrap_or_default();
        match kind.trim() {
            "Battery" => battery = true,
            "Mains" | "USB" => {
                mains_online |=
                    std::fs::read_to_string(p.join("online")).is_ok_and(|v| v.trim() == "1")
            }
            _ => {}
        }
    }
    battery && !mains_online
}

/// Path of the live status file.
pub fn status_path(data_dir: &Path) -> PathBuf {
    data_dir.join("status.json")
}

/// One scan in progress, for `beebot status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScanStatus {
    pub unit_id: u64,
    pub site: String,
    pub pages: u64,
    pub links: u64,
    pub pages_per_s: f64,
    /// The unit's deadline on the local clock (Unix ms), as the server last
    /// extended it: it finds dead hosts, it does not stop the scan.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// URLs found and not yet fetched (its progress: pages of pages + queued).
    #[serde(default)]
    pub queued: Option<u64>,
    /// The most pages the unit may take.
    #[serde(default)]
    pub page_cap: Option<u64>,
}

/// Recent problems kept for the status page.
pub const MAX_RECENT_PROBLEMS: usize = 5;

/// What went wrong, as the status page tells a person who is not an engineer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    ServerUnreachable,
    SiteUnreachable,
    ScanFailed,
    WorkRefused,
    SpoolFull,
}

impl ProblemKind {
    /// The words the page shows.
    pub fn plain(self) -> &'static str {
        match self {
            ProblemKind::ServerUnreachable => {
                "BeeBot cannot reach the project's server. It keeps trying by itself; \
                 finished work waits safely on this computer."
            }
            ProblemKind::SiteUnreachable => {
                "A website stopped answering (is this computer offline?). Scans wait \
                 and go on by themselves."
            }
            ProblemKind::ScanFailed => {
                "A scan could not be finished here. It was handed back to the project, \
                 which gives it to another computer."
            }
            ProblemKind::WorkRefused => {
                "The project's server refused a piece of work from this computer; it \
                 was handed back."
            }
            ProblemKind::SpoolFull => {
                "The disk space BeeBot may use is full. It takes no new work until its \
                 results are uploaded (setting spool_cap_mb)."
            }
        }
    }
}

/// One problem the client met, with the technical detail beside the words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Last seen, Unix ms.
    pub at_ms: u64,
    pub kind: ProblemKind,
    pub detail: String,
    /// Times seen in a row.
    #[serde(default = "one")]
    pub times: u32,
}

fn one() -> u32 {
    1
}

/// Add `p` to `recent` (newest last): a repeat of the newest counts up,
/// the oldest goes past [`MAX_RECENT_PROBLEMS`].
pub fn note_problem(recent: &mut Vec<Problem>, p: Problem) {
    if let Some(last) = recent.last_mut() {
        if last.kind == p.kind && last.detail == p.detail {
            last.at_ms = p.at_ms;
            last.times = last.times.saturating_add(1);
            return;
        }
    }
    recent.push(p);
    let extra = recent.len().saturating_sub(MAX_RECENT_PROBLEMS);
    recent.drain(..extra);
}

/// What the running client writes for `beebot status`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LiveStatus {
    pub pid: u32,
    pub updated_ms: u64,
    /// running, paused, outside-window, backing-off, offline, idle
    pub state: String,
    /// Unix ms the state lasts until, when known.
    pub until_ms: Option<u64>,
    pub scans: Vec<ScanStatus>,
    pub today_pages: u64,
    pub today_links: u64,
    pub today_results: u64,
    pub pending_uploads: u64,
    pub last_error: Option<String>,
    /// When this runner started, Unix ms (its uptime).
    #[serde(default)]
    pub started_ms: Option<u64>,
    /// Sites it scans at once now, as its concurrency controller sized it.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// The most it may scan at once (the `slots` setting).
    #[serde(default)]
    pub slots_ceiling: Option<u32>,
    /// The last problems, newest last (at most [`MAX_RECENT_PROBLEMS`]).
    #[serde(default)]
    pub problems: Vec<Problem>,
}

/// When this process started, as far as the live status tells (first asked).
pub fn process_started_ms() -> u64 {
    static STARTED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STARTED.get_or_init(|| unix_ms(SystemTime::now()))
}

pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Held while the live status is read from the gate and written, so a
/// pause's rewrite and the runner's own write never cross: the later one
/// read the newer hold.
pub fn status_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Write the live status (not fsynced: it is rewritten every second).
pub fn write_status(data_dir: &Path, s: &LiveStatus) {
    let path = status_path(data_dir);
    let tmp = path.with_extension("tmp");
    // Compact: it is written every second while running.
    if let Ok(text) = serde_json::to_vec(s) {
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
}

/// Largest live status read back (64 scans and the last problems: tens
/// of KB).
const MAX_STATUS_FILE_BYTES: usize = 1 << 20;

/// The live status, if a running client wrote it recently.
pub fn read_live_status(data_dir: &Path) -> Option<LiveStatus> {
    let text = beebot_shared::durable::read_at_most(&status_path(data_dir), MAX_STATUS_FILE_BYTES)
        .ok()??;
    let s: LiveStatus = serde_json::from_slice(&text).ok()?;
    let age = unix_ms(SystemTime::now()).saturating_sub(s.updated_ms);
    (age <= STATUS_FRESH.as_millis() as u64).then_some(s)
}

/// A moment as the user reads it: local time of day, with the date when it
/// is not today.
pub fn local_time(t: SystemTime) -> String {
    let t: chrono::DateTime<chrono::Local> = t.into();
    if t.date_naive() == chrono::Local::now().date_naive() {
        t.format("%H:%M").to_string()
    } else {
        t.format("%a %d %b %H:%M").to_string()
    }
}

/// A live state as a person reads it: `paused for 1h 30m more (until
/// 23:10)`, `outside the window, opens in 4h 21m (at 19:00)`, `running`.
pub fn state_text(s: &LiveStatus, now_ms: u64) -> String {
    let Some(until) = s.until_ms else {
        return match s.state.as_str() {
            "paused" => "paused until `beebot resume`".into(),
            "outside-window" => "outside the window (none opens in the next two weeks)".into(),
            other => other.into(),
        };
    };
    let left =
        beebot_shared::util::human_duration(Duration::from_millis(until.saturating_sub(now_ms)));
    let at = local_time(UNIX_EPOCH + Duration::from_millis(until));
    match s.state.as_str() {
        "paused" => format!("paused for {left} more (until {at})"),
        "outside-window" => format!("outside the window, opens in {left} (at {at})"),
        other => format!("{other} for {left} more"),
    }
}

/// Parse and apply one control command; returns the answer line.
pub fn apply_command(gate: &Gate, line: &str, now: SystemTime) -> String {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("pause"), None, _) => {
            gate.pause(None);
            "ok paused until `beebot resume`".into()
        }
        (Some("pause"), Some(secs), None) => match secs.parse::<u64>() {
            Ok(s) if s > MAX_PAUSE.as_secs() => format!(
                "error: a pause lasts at most {} (pause without a time to pause until resumed)",
                beebot_shared::util::human_duration(MAX_PAUSE)
            ),
            Ok(s) if s > 0 => {
                let d = Duration::from_secs(s);
                gate.pause(Some(now + d));
                format!(
                    "ok paused for {}, until {}",
                    beebot_shared::util::human_duration(d),
                    local_time(now + d)
                )
            }
            _ => format!("error: `{secs}` is not a number of seconds"),
        },
        (Some("resume"), None, _) => {
            if gate.resume() {
                "ok resumed".into()
            } else {
                "ok not paused".into()
            }
        }
        (Some("stop"), None, _) => {
            gate.request_stop();
            "ok stopping".into()
        }
        (Some("reload"), key, None) => {
            let r = gate
                .reloader
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            match r {
                Some(r) => match r(gate, key) {
                    Ok(answer) => format!("ok {answer}"),
                    Err(e) => format!("error: {e:#}"),
                },
                None => "error: this client cannot read its settings again".into(),
            }
        }
        _ => format!("error: unknown command `{}`", line.trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn local(h: u32) -> chrono::NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 30)
            .unwrap()
            .and_hms_opt(h, 0, 0)
            .unwrap()
    }

    #[test]
    fn pause_resume_and_window_holds() {
        let g = Gate::new(Windows::parse("19:00-07:00").unwrap(), false);
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(g.hold_at(now, local(20)), Hold::Open);
        assert_eq!(
            g.hold_at(now, local(12)),
            Hold::OutsideWindow(Some(now + Duration::from_secs(7 * 3600)))
        );
        // Mid-second, the opening is still on the minute.
        let late = local(12) + chrono::Duration::milliseconds(40_700);
        assert_eq!(
            g.hold_at(now, late),
            Hold::OutsideWindow(Some(
                now + Duration::from_secs(7 * 3600) - Duration::from_millis(40_700)
            ))
        );
        assert!(apply_command(&g, "pause 60", now).starts_with("ok"));
        assert_eq!(
            g.hold_at(now, local(20)),
            Hold::Paused(Some(now + Duration::from_secs(60)))
        );
        // The pause ends by itself.
        assert_eq!(
            g.hold_at(now + Duration::from_secs(61), local(20)),
            Hold::Open
        );
        apply_command(&g, "pause", now);
        assert_eq!(g.hold_at(now, local(20)), Hold::Paused(None));
        assert_eq!(apply_command(&g, "resume", now), "ok resumed");
        assert_eq!(g.hold_at(now, local(20)), Hold::Open);
        assert_eq!(apply_command(&g, "resume", now), "ok not paused");
        let answer = apply_command(&g, "pause 5400", now);
        assert!(
            answer.starts_with("ok paused for 1h 30m, until "),
            "{answer}"
        );
        assert!(apply_command(&g, "pause soon", now).starts_with("error"));
        let forever = format!("pause {}", u64::MAX);
        assert!(apply_command(&g, &forever, now).starts_with("error: a pause lasts at most"));
        assert!(apply_command(&g, "explode", now).starts_with("error"));
    }

    #[test]
    fn the_scans_check_sees_a_pause_a_resume_and_new_rules_at_once() {
        use chrono::Timelike;
        let g = Gate::new(Windows::always(), false);
        assert!(g.is_open());
        // Within GATE_RECHECK of the reading above, every change shows.
        g.pause(None);
        assert!(!g.is_open());
        assert!(g.resume());
        assert!(g.is_open());
        // A window that opens two hours from now: closed now.
        let h = (chrono::Local::now().hour() + 2) % 24;
        let later = Windows::parse(&format!("{h:02}:00-{:02}:00", (h + 1) % 24)).unwrap();
        g.set_rules(later, false);
        assert!(!g.is_open());
        g.set_rules(Windows::always(), false);
        assert!(g.is_open());
    }

    #[test]
    fn states_read_in_human_durations() {
        let now = 1_000_000_000u64;
        let s = |state: &str, until: Option<u64>| LiveStatus {
            state: state.into(),
            until_ms: until,
            ..Default::default()
        };
        let hours = (4 * 3600 + 21 * 60) * 1000;
        let t = state_text(&s("outside-window", Some(now + hours)), now);
        assert!(
            t.starts_with("outside the window, opens in 4h 21m (at "),
            "{t}"
        );
        let t = state_text(&s("paused", Some(now + 90_000)), now);
        assert!(t.starts_with("paused for 1m 30s more (until "), "{t}");
        assert_eq!(
            state_text(&s("paused", None), now),
            "paused until `beebot resume`"
        );
        assert_eq!(
            state_text(&s("backing-off", Some(now + 12_000)), now),
            "backing-off for 12s more"
        );
        assert_eq!(state_text(&s("running", None), now), "running");
    }

    #[test]
    fn problems_are_kept_few_and_repeats_counted() {
        let p = |at_ms, kind, detail: &str| Problem {
            at_ms,
            kind,
            detail: detail.into(),
            times: 1,
        };
        let mut recent = Vec::new();
        note_problem(&mut recent, p(1, ProblemKind::ServerUnreachable, "timeout"));
        note_problem(&mut recent, p(2, ProblemKind::ServerUnreachable, "timeout"));
        assert_eq!(recent.len(), 1);
        assert_eq!((recent[0].at_ms, recent[0].times), (2, 2));
        for i in 0..10 {
            note_problem(
                &mut recent,
                p(10 + i, ProblemKind::ScanFailed, &format!("unit {i}")),
            );
        }
        assert_eq!(recent.len(), MAX_RECENT_PROBLEMS);
        assert_eq!(recent.last().unwrap().detail, "unit 9");
        assert!(!ProblemKind::SpoolFull.plain().contains("unit"));
    }

    #[test]
    fn battery_is_read_from_sysfs() {
        let d = tempfile::tempdir().unwrap();
        let add = |name: &str, kind: &str, online: Option<&str>| {
            let p = d.path().join(name);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("type"), format!("{kind}\n")).unwrap();
            if let Some(o) = online {
                std::fs::write(p.join("online"), o).unwrap();
            }
        };
        assert!(!on_battery(d.path()), "no supplies: a desktop");
        add("BAT0", "Battery", None);
        assert!(on_battery(d.path()));
        add("AC", "Mains", Some("0\n"));
        assert!(on_battery(d.path()));
        add("AC", "Mains", Some("1\n"));
        assert!(!on_battery(d.path()));
        assert!(!on_battery(Path::new("/nonexistent/dir")));
    }

    #[test]
    fn wait_open_returns_on_cancel() {
        let g = Gate::new(Windows::always(), false);
        g.pause(None);
        let cancel = Cancel::already();
        g.wait_open(&cancel);
    }
}
