//! The client's settings: one documented TOML file in the config dir, with
//! environment variables and command-line flags above it. Local settings
//! always win; nothing the server sends changes them.
//!
//! Precedence, lowest first: default, file (`CONFIG/config.toml`), environment
//! (`BEEBOT_<KEY>`, e.g. `BEEBOT_SLOTS=4`), command line.
//!
//! `slots` is a ceiling (`auto`, the default, is 64: the client sizes its
//! concurrency below it). Every key and value is checked by one function
//! (`SettingError`), whoever sets it.

use std::fmt;
use std::path::PathBuf;

use anyhow::{Context, Result};

use beebot_shared::limits::{MAX_HOST_MEMORY_MB, MAX_SLOTS};

use crate::home::{write_atomic, Home};
use crate::window::{WindowError, Windows};

/// Largest bandwidth cap accepted (10 GB/s is no cap).
const MAX_BANDWIDTH_KBPS: u64 = 10_000_000;
/// Least memory the scans may be given, MB: one scan of a large site.
const MIN_MEMORY_MB: u64 = 64;
/// Most CPU a client may be given, percent of one core: one core is more
/// than 64 polite scans need.
pub const MAX_CPU_PERCENT: u64 = 100;
/// The default CPU budget, percent of one core: a background program an
/// employee never notices.
pub const DEFAULT_CPU_PERCENT: u32 = 2;
/// Longest work buffer (two days, as the server's limit).
const MAX_BUFFER_S: u64 = beebot_shared::limits::MAX_WANT_SECONDS;

/// Every setting: name, default, what it means.
pub const KEYS: [(&str, &str, &str); 13] = [
    (
        "window",
        "always",
        "when to crawl: `always`, or rules like `mon-fri 19:00-07:00, sat-sun 00:00-24:00`",
    ),
    (
        "bandwidth_kbps",
        "0",
        "download cap over all scans, KB/s (0: no cap)",
    ),
    (
        "slots",
        "auto",
        "most sites scanned at once: `auto` (the client sizes it, up to 64) or a ceiling 1-64",
    ),
    (
        "memory_mb",
        "1024",
        "memory the scans may hold together, MB; the server fits scans into it by their expected size",
    ),
    (
        "cpu_percent",
        "2",
        "most CPU the client uses, percent of one core (1-100): it scans fewer sites at once to stay under it (measured on Linux and Windows; not on macOS)",
    ),
    ("low_priority", "true", "run at low CPU priority"),
    (
        "buffer_min_s",
        "600",
        "ask for more work when less than this many seconds are held",
    ),
    (
        "buffer_max_s",
        "3600",
        "hold at most this many seconds of work",
    ),
    (
        "spool_cap_mb",
        "1024",
        "disk the spool may use, MB; no new work beyond it",
    ),
    (
        "run_on_battery",
        "false",
        "crawl while the machine runs on battery",
    ),
    (
        "allow_private",
        "false",
        "allow crawling loopback, private and link-local addresses",
    ),
    (
        "proxy",
        "",
        "HTTP proxy for crawling (`http://host:port`); empty: none",
    ),
    (
        "ui_port",
        "0",
        "port of the status page on 127.0.0.1 (`beebot open`); 0: a free one each start",
    ),
];

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Default,
    File,
    Environment,
    CommandLine,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Default => "default",
            Source::File => "file",
            Source::Environment => "environment",
            Source::CommandLine => "command line",
        })
    }
}

/// The typed settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub window: Windows,
    pub bandwidth_kbps: u64,
    pub slots: u32,
    pub memory_mb: u32,
    /// CPU budget, percent of one core.
    pub cpu_percent: u32,
    pub low_priority: bool,
    pub buffer_min_s: u64,
    pub buffer_max_s: u64,
    pub spool_cap_mb: u64,
    pub run_on_battery: bool,
    pub allow_private: bool,
    pub proxy: Option<String>,
    /// The status page's port (0: a free one).
    pub ui_port: u16,
}

/// One setting as shown by `beebot config show`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Shown {
    pub key: &'static str,
    pub value: String,
    pub source: Source,
}

/// Why a setting's value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("`{0}` is not true or false")]
    NotBool(String),
    #[error("`{0}` is not a whole number")]
    NotNumber(String),
    #[error("{value} is outside {min}..={max}")]
    OutOfRange { value: u64, min: u64, max: u64 },
    #[error(transparent)]
    Window(#[from] WindowError),
    #[error("`{value}` is not a URL: {error}")]
    NotUrl {
        value: String,
        error: url::ParseError,
    },
    #[error("`{0}` is not an http proxy URL")]
    NotHttpProxy(String),
    #[error("unknown setting `{0}` (known: {known})", known = KEYS.map(|k| k.0).join(", "))]
    UnknownKey(String),
    #[error("`{value}` is neither `auto` nor a whole number from 1 to {max}")]
    NotSlots { value: String, max: u32 },
    #[error("buffer_min_s ({min}) is above buffer_max_s ({max})")]
    BufferMinAboveMax { min: u64, max: u64 },
}

fn parse_bool(v: &str) -> Result<bool, SettingError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(SettingError::NotBool(v.to_string())),
    }
}

/// The `slots` ceiling: `auto` is [`MAX_SLOTS`] (the client sizes its
/// concurrency under it), a number from 1 to [`MAX_SLOTS`] a lower ceiling.
fn parse_slots(v: &str) -> Result<u32, SettingError> {
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok(MAX_SLOTS);
    }
    match parse_num(v, 1, u64::from(MAX_SLOTS)) {
        Ok(n) => Ok(n as u32),
        Err(SettingError::NotNumber(_)) => Err(SettingError::NotSlots {
            value: v.to_string(),
            max: MAX_SLOTS,
        }),
        Err(e) => Err(e),
    }
}

fn parse_num(v: &str, min: u64, max: u64) -> Result<u64, SettingError> {
    let n: u64 = v
        .trim()
        .parse()
        .map_err(|_| SettingError::NotNumber(v.to_string()))?;
    if n < min || n > max {
        return Err(SettingError::OutOfRange { value: n, min, max });
    }
    Ok(n)
}

impl Default for Settings {
    fn default() -> Self {
        let mut s = Settings {
            window: Windows::always(),
            bandwidth_kbps: 0,
            slots: MAX_SLOTS,
            memory_mb: 1024,
            cpu_percent: DEFAULT_CPU_PERCENT,
            low_priority: true,
            buffer_min_s: 600,
            buffer_max_s: 3600,
            spool_cap_mb: 1024,
            run_on_battery: false,
            allow_private: false,
            proxy: None,
            ui_port: 0,
        };
        for (k, v, _) in KEYS {
            // The defaults in KEYS are valid by construction (tested).
            let _ = s.apply(k, v);
        }
        s
    }
}

impl Settings {
    /// Set one key from its text form, validating it.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), SettingError> {
        match key {
            "window" => self.window = Windows::parse(value)?,
            "bandwidth_kbps" => self.bandwidth_kbps = parse_num(value, 0, MAX_BANDWIDTH_KBPS)?,
            "slots" => self.slots = parse_slots(value)?,
            "memory_mb" => {
                self.memory_mb = parse_num(value, MIN_MEMORY_MB, MAX_HOST_MEMORY_MB as u64)? as u32
            }
            "cpu_percent" => self.cpu_percent = parse_num(value, 1, MAX_CPU_PERCENT)? as u32,
            "low_priority" => self.low_priority = parse_bool(value)?,
            "buffer_min_s" => self.buffer_min_s = parse_num(value, 0, MAX_BUFFER_S)?,
            "buffer_max_s" => self.buffer_max_s = parse_num(value, 60, MAX_BUFFER_S)?,
            "spool_cap_mb" => self.spool_cap_mb = parse_num(value, 16, 1 << 30)?,
            "run_on_battery" => self.run_on_battery = parse_bool(value)?,
            "allow_private" => self.allow_private = parse_bool(value)?,
            "ui_port" => self.ui_port = parse_num(value, 0, u64::from(u16::MAX))? as u16,
            "proxy" => {
                let v = value.trim();
                self.proxy = if v.is_empty() {
                    None
                } else {
                    let u = url::Url::parse(v).map_err(|error| SettingError::NotUrl {
                        value: v.to_string(),
                        error,
                    })?;
                    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
                        return Err(SettingError::NotHttpProxy(v.to_string()));
                    }
                    Some(v.to_string())
                }
            }
            other => return Err(SettingError::UnknownKey(other.to_string())),
        }
        Ok(())
    }

    fn check(&self) -> Result<(), SettingError> {
        if self.buffer_min_s > self.buffer_max_s {
            return Err(SettingError::BufferMinAboveMax {
                min: self.buffer_min_s,
                max: self.buffer_max_s,
            });
        }
        Ok(())
    }
}

/// Path of the settings file.
pub fn file_path(home: &Home) -> PathBuf {
    home.config.join("config.toml")
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Largest settings file read: thirteen keys take a few hundred bytes.
pub const MAX_SETTINGS_FILE_BYTES: usize = 64 * 1024;

/// The settings file's table (empty when there is none). Read to its
/// limit without asking its size: the page reads it every two seconds
/// while it is open.
pub fn read_file(home: &Home) -> Result<toml::Table> {
    let path = file_path(home);
    match beebot_shared::durable::read_at_most(&path, MAX_SETTINGS_FILE_BYTES) {
        Ok(Some(bytes)) => std::str::from_utf8(&bytes)
            .map_err(anyhow::Error::from)
            .and_then(|text| text.parse::<toml::Table>().map_err(anyhow::Error::from))
            .with_context(|| format!("{} is not valid TOML", path.display())),
        Ok(None) => anyhow::bail!(
            "{} is larger than a settings file may be ({MAX_SETTINGS_FILE_BYTES} bytes)",
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(toml::Table::new()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Load the settings: defaults, then the file, the environment (`env` gives a
/// variable's value), then `cli` (key, value) pairs.
pub fn load(
    home: &Home,
    env: &dyn Fn(&str) -> Option<String>,
    cli: &[(&str, String)],
) -> Result<(Settings, Vec<Shown>)> {
    let mut s = Settings::default();
    let mut shown: Vec<Shown> = KEYS
        .iter()
        .map(|(k, v, _)| Shown {
            key: k,
            value: v.to_string(),
            source: Source::Default,
        })
        .collect();
    let mut set = |s: &mut Settings, key: &str, value: String, source: Source| -> Result<()> {
        s.apply(key, &value)
            .map_err(|e| anyhow::anyhow!("setting `{key}` from the {source}: {e}"))?;
        if let Some(entry) = shown.iter_mut().find(|x| x.key == key) {
            entry.value = value;
            entry.source = source;
        }
        Ok(())
    };
    for (k, v) in read_file(home)? {
        set(&mut s, &k, value_text(&v), Source::File)
            .with_context(|| format!("in {}", file_path(home).display()))?;
    }
    for (k, _, _) in KEYS {
        if let Some(v) = env(&format!("BEEBOT_{}", k.to_ascii_uppercase())) {
            set(&mut s, k, v, Source::Environment)?;
        }
    }
    for (k, v) in cli {
        set(&mut s, k, v.clone(), Source::CommandLine)?;
    }
    s.check()?;
    Ok((s, shown))
}

/// `beebot config set KEY VALUE`: validate, then write the file. Returns
/// the value the file held before, if it held one.
pub fn set(home: &Home, key: &str, value: &str) -> Result<Option<String>> {
    let mut table = read_file(home)?;
    let old = table.get(key).map(value_text);
    // Validate against the file's other settings, too.
    let mut s = Settings::default();
    for (k, v) in &table {
        if k != key {
            let _ = s.apply(k, &value_text(v));
        }
    }
    s.apply(key, value)?;
    s.check()?;
    let typed = match key {
        "window" | "proxy" => toml::Value::String(value.trim().to_string()),
        "slots" if value.trim().eq_ignore_ascii_case("auto") => toml::Value::String("auto".into()),
        "low_priority" | "run_on_battery" | "allow_private" => {
            toml::Value::Boolean(parse_bool(value)?)
        }
        _ => toml::Value::Integer(
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| anyhow::anyhow!("`{value}` is not a whole number"))?,
        ),
    };
    table.insert(key.to_string(), typed);
    let mut text =
        String::from("# BeeBot client settings (`beebot config show` lists them all).\n");
    text.push_str(&toml::to_string(&table).context("cannot encode settings")?);
    write_atomic(&file_path(home), text.as_bytes(), true)?;
    Ok(old)
}

/// Settings a running client cannot change without a restart (the process
/// priority can be lowered, not raised back; the page listens where it
/// started).
pub const NEEDS_RESTART: &[&str] = &["low_priority", "ui_port"];

/// A value as the user typed it (`""` for an empty one).
fn typed(v: &str) -> &str {
    if v.is_empty() {
        "\"\""
    } else {
        v
    }
}

/// `beebot config show`: one line a setting, columns aligned: key, value as
/// typed, where it came from, what it means.
pub fn show_table(shown: &[Shown]) -> String {
    let kw = shown.iter().map(|s| s.key.len()).max().unwrap_or(0);
    let vw = shown
        .iter()
        .map(|s| typed(&s.value).chars().count())
        .max()
        .unwrap_or(0);
    let sources: Vec<String> = shown.iter().map(|s| format!("({})", s.source)).collect();
    let sw = sources.iter().map(String::len).max().unwrap_or(0);
    let mut out = String::new();
    for (s, src) in shown.iter().zip(&sources) {
        let doc = KEYS.iter().find(|k| k.0 == s.key).map_or("", |k| k.2);
        out.push_str(&format!(
            "{:<kw$}  {:<vw$}  {:<sw$}  {doc}\n",
            s.key,
            typed(&s.value),
            src
        ));
    }
    out
}

/// What `reload` answers about `key` after settings went from `before` to
/// `after` in a running client.
pub fn reload_answer(before: &[Shown], after: &[Shown], key: Option<&str>) -> String {
    let changed: Vec<String> = before
        .iter()
        .zip(after)
        .filter(|(b, a)| b.value != a.value)
        .map(|(b, a)| {
            let note = if NEEDS_RESTART.contains(&a.key) {
                " (takes effect when the client restarts)"
            } else {
                ""
            };
            format!("{} {} → {}{note}", a.key, typed(&b.value), typed(&a.value))
        })
        .collect();
    let Some(key) = key else {
        return if changed.is_empty() {
            "the running client's settings are unchanged".into()
        } else {
            format!("the running client applied: {}", changed.join(", "))
        };
    };
    let Some(a) = after.iter().find(|s| s.key == key) else {
        return format!("unknown setting `{key}`");
    };
    match before.iter().find(|s| s.key == key) {
        Some(b) if b.value != a.value && NEEDS_RESTART.contains(&key) => format!(
            "the running client keeps {key} = {} until it restarts: this setting needs a restart",
            typed(&b.value)
        ),
        Some(b) if b.value != a.value => format!(
            "the running client now uses {key} = {} (was {})",
            typed(&a.value),
            typed(&b.value)
        ),
        _ if matches!(a.source, Source::Environment | Source::CommandLine) => format!(
            "the running client keeps {key} = {}: its {} sets it, above the file",
            typed(&a.value),
            a.source
        ),
        _ => format!(
            "the running client already uses {key} = {}",
            typed(&a.value)
        ),
    }
}

/// Reject an unknown key early, with the list of known ones.
pub fn check_key(key: &str) -> Result<()> {
    if KEYS.iter().any(|k| k.0 == key) {
        Ok(())
    } else {
        Err(SettingError::UnknownKey(key.to_string()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Home) {
        let d = tempfile::tempdir().unwrap();
        let h = Home {
            config: d.path().to_path_buf(),
            data: d.path().to_path_buf(),
        };
        (d, h)
    }

    #[test]
    fn defaults_are_valid() {
        for (k, v, _) in KEYS {
            Settings::default().apply(k, v).unwrap();
        }
        let s = Settings::default();
        // `auto`: the client sizes its concurrency, up to the named maximum.
        assert_eq!(s.slots, MAX_SLOTS);
        assert!(s.low_priority && !s.allow_private && s.window.is_always());
    }

    #[test]
    fn precedence_default_file_env_cli() {
        let (_d, h) = home();
        set(&h, "slots", "3").unwrap();
        set(&h, "bandwidth_kbps", "500").unwrap();
        set(&h, "window", "19:00-07:00").unwrap();
        let env = |k: &str| (k == "BEEBOT_BANDWIDTH_KBPS").then(|| "700".to_string());
        let (s, shown) = load(&h, &env, &[("slots", "5".into())]).unwrap();
        assert_eq!(s.slots, 5);
        assert_eq!(s.bandwidth_kbps, 700);
        assert!(!s.window.is_always());
        let src = |k: &str| shown.iter().find(|x| x.key == k).unwrap().source;
        assert_eq!(src("slots"), Source::CommandLine);
        assert_eq!(src("bandwidth_kbps"), Source::Environment);
        assert_eq!(src("window"), Source::File);
        assert_eq!(src("proxy"), Source::Default);
    }

    #[test]
    fn set_validates_before_writing() {
        let (_d, h) = home();
        assert!(set(&h, "slots", "0").is_err());
        assert!(set(&h, "slots", "many").is_err());
        assert!(set(&h, "slots", "65").is_err());
        assert!(set(&h, "window", "25:00-01:00").is_err());
        assert!(set(&h, "nonsense", "1").is_err());
        assert!(set(&h, "proxy", "ftp://x").is_err());
        assert!(!file_path(&h).exists(), "nothing written for bad values");
        // `auto` is written as text and read back as the maximum ceiling.
        set(&h, "slots", "7").unwrap();
        set(&h, "slots", "AUTO").unwrap();
        let (s, shown) = load(&h, &|_| None, &[]).unwrap();
        assert_eq!(s.slots, MAX_SLOTS);
        let slots = shown.iter().find(|x| x.key == "slots").unwrap();
        assert_eq!((slots.value.as_str(), slots.source), ("auto", Source::File));
        set(&h, "buffer_max_s", "600").unwrap();
        assert!(set(&h, "buffer_min_s", "900").is_err(), "min above max");
        set(&h, "proxy", "http://proxy.corp:3128").unwrap();
        let (s, _) = load(&h, &|_| None, &[]).unwrap();
        assert_eq!(s.proxy.as_deref(), Some("http://proxy.corp:3128"));
        assert_eq!(s.buffer_max_s, 600);
    }

    #[test]
    fn show_prints_values_as_typed_in_aligned_columns() {
        let (_d, h) = home();
        set(&h, "window", "mon-fri 19:00-07:00").unwrap();
        let (_, shown) = load(&h, &|_| None, &[]).unwrap();
        let t = show_table(&shown);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), KEYS.len());
        let w = lines.iter().find(|l| l.starts_with("window ")).unwrap();
        assert!(w.contains("  mon-fri 19:00-07:00  (file)"), "{t}");
        assert!(!t.contains("\"mon-fri"), "values as typed, not quoted: {t}");
        // Every value starts in one column, every origin in another.
        let col = |needle: &str| {
            let cols: Vec<usize> = lines.iter().map(|l| l.find(needle).unwrap()).collect();
            assert!(cols.windows(2).all(|p| p[0] == p[1]), "{needle}: {t}");
        };
        col(" (");
        let value_col: Vec<usize> = lines
            .iter()
            .map(|l| l.find("  ").unwrap() + l[l.find("  ").unwrap()..].find(|c| c != ' ').unwrap())
            .collect();
        assert!(value_col.windows(2).all(|p| p[0] == p[1]), "{t}");
        assert!(t.contains("proxy ") && t.contains("\"\""), "{t}");
    }

    #[test]
    fn reload_says_what_the_running_client_does_with_a_setting() {
        let (_d, h) = home();
        let (_, before) = load(&h, &|_| None, &[("bandwidth_kbps", "100".into())]).unwrap();
        set(&h, "slots", "3").unwrap();
        set(&h, "bandwidth_kbps", "500").unwrap();
        set(&h, "low_priority", "false").unwrap();
        let (_, after) = load(&h, &|_| None, &[("bandwidth_kbps", "100".into())]).unwrap();
        assert_eq!(
            reload_answer(&before, &after, Some("slots")),
            "the running client now uses slots = 3 (was auto)"
        );
        let a = reload_answer(&before, &after, Some("bandwidth_kbps"));
        assert!(
            a.contains("keeps bandwidth_kbps = 100") && a.contains("command line"),
            "{a}"
        );
        let a = reload_answer(&before, &after, Some("low_priority"));
        assert!(a.contains("needs a restart"), "{a}");
        assert_eq!(
            reload_answer(&before, &after, Some("window")),
            "the running client already uses window = always"
        );
        let a = reload_answer(&before, &after, None);
        assert!(
            a.contains("slots auto → 3") && a.contains("restarts"),
            "{a}"
        );
    }

    #[test]
    fn a_refused_value_is_named_by_its_cause() {
        let apply = |k: &str, v: &str| Settings::default().apply(k, v);
        assert_eq!(
            apply("slots", "0"),
            Err(SettingError::OutOfRange {
                value: 0,
                min: 1,
                max: MAX_SLOTS as u64
            })
        );
        assert_eq!(
            apply("slots", "many"),
            Err(SettingError::NotSlots {
                value: "many".into(),
                max: MAX_SLOTS
            })
        );
        assert_eq!(
            apply("low_priority", "perhaps"),
            Err(SettingError::NotBool("perhaps".into()))
        );
        assert!(matches!(
            apply("window", "25:00-01:00"),
            Err(SettingError::Window(_))
        ));
        assert!(matches!(
            apply("proxy", "not a url"),
            Err(SettingError::NotUrl { .. })
        ));
        assert_eq!(
            apply("proxy", "ftp://x"),
            Err(SettingError::NotHttpProxy("ftp://x".into()))
        );
        assert_eq!(
            apply("nonsense", "1"),
            Err(SettingError::UnknownKey("nonsense".into()))
        );
        let mut s = Settings::default();
        s.apply("buffer_min_s", "900").unwrap();
        s.apply("buffer_max_s", "600").unwrap();
        assert_eq!(
            s.check(),
            Err(SettingError::BufferMinAboveMax { min: 900, max: 600 })
        );
    }

    #[test]
    fn a_refused_value_says_why_in_words() {
        let says = |k: &str, v: &str| Settings::default().apply(k, v).unwrap_err().to_string();
        assert_eq!(says("slots", "0"), format!("0 is outside 1..={MAX_SLOTS}"));
        assert_eq!(
            says("slots", "many"),
            format!("`many` is neither `auto` nor a whole number from 1 to {MAX_SLOTS}")
        );
        assert_eq!(
            says("run_on_battery", "perhaps"),
            "`perhaps` is not true or false"
        );
        assert_eq!(
            says("proxy", "ftp://x"),
            "`ftp://x` is not an http proxy URL"
        );
        assert_eq!(
            says("proxy", "nope"),
            "`nope` is not a URL: relative URL without a base"
        );
        assert!(says("window", "25:00-01:00").starts_with("bad time window `25:00-01:00`"));
        assert_eq!(
            says("nonsense", "1"),
            format!(
                "unknown setting `nonsense` (known: {})",
                KEYS.map(|k| k.0).join(", ")
            )
        );
        assert_eq!(
            SettingError::BufferMinAboveMax { min: 900, max: 600 }.to_string(),
            "buffer_min_s (900) is above buffer_max_s (600)"
        );
    }

    #[test]
    fn bad_file_or_env_is_a_clear_error() {
        let (_d, h) = home();
        std::fs::write(file_path(&h), "slots = 0\n").unwrap();
        let e = load(&h, &|_| None, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("slots"), "{e:#}");
        std::fs::write(file_path(&h), "").unwrap();
        let env = |k: &str| (k == "BEEBOT_LOW_PRIORITY").then(|| "perhaps".to_string());
        let e = load(&h, &env, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("environment"), "{e:#}");
        // Not text, or longer than a settings file may be: said, not read whole.
        std::fs::write(file_path(&h), [0xff, 0xfe]).unwrap();
        let e = load(&h, &|_| None, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("not valid TOML"), "{e:#}");
        let long = format!("slots = 4\n{}", "#\n".repeat(MAX_SETTINGS_FILE_BYTES));
        std::fs::write(file_path(&h), long).unwrap();
        let e = load(&h, &|_| None, &[]).unwrap_err();
        assert!(
            format!("{e:#}").contains("larger than a settings file may be"),
            "{e:#}"
        );
        std::fs::write(file_path(&h), "slots = 4\n").unwrap();
        assert_eq!(load(&h, &|_| None, &[]).expect("loads").0.slots, 4);
    }
}
