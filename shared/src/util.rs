//! Small helpers shared by both sides: text clean-up, hashing, private
//! directories, and durations as people type and read them.
//!
//! `Kept`: values kept between uses, at most a named number (the compression
//! contexts of link files).

use sha2::{Digest, Sha256};

/// Collapse runs of whitespace to one space, trim, and cap at `max_chars` characters.
pub fn collapse_whitespace(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut count = 0usize;
    let mut pending_space = false;
    for ch in text.chars() {
        if ch.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            if count + 1 >= max_chars {
                break;
            }
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        if count >= max_chars {
            break;
        }
        out.push(ch);
        count += 1;
    }
    out
}

/// Examples of durations, for the messages of [`ParseDurationError`].
const DURATION_EXAMPLES: &str = "90s, 15m, 12h or 7d";

/// Why a text is not a duration; each message quotes the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationError {
    /// A bare number: its unit is asked for.
    #[error("`{0}` has no unit: write it with one, e.g. {0}s, {0}m, {0}h or {0}d")]
    NoUnit(String),
    /// Not a whole number and a unit.
    #[error("`{0}` is not a duration (examples: {DURATION_EXAMPLES})")]
    NotADuration(String),
    /// More seconds than a duration holds.
    #[error("`{0}` is too long")]
    TooLong(String),
}

/// Parse a typed duration: a whole number and a unit, `s`, `m`, `h` or `d`
/// (`90s`, `15m`, `12h`, `7d`). A bare number is refused: `--every 5` once
/// meant five seconds to the program and five days to its user.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, ParseDurationError> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3600),
        Some((i, 'd')) => (&s[..i], 86400),
        Some(_) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(ParseDurationError::NoUnit(s.to_string()))
        }
        _ => return Err(ParseDurationError::NotADuration(s.to_string())),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| ParseDurationError::NotADuration(s.to_string()))?;
    n.checked_mul(mult)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| ParseDurationError::TooLong(s.to_string()))
}

/// A duration in words a person reads at a glance: `45s`, `4m 5s`,
/// `4h 21m`, `7 days`, `2 days 3h`; the two largest units, no zeros.
pub fn human_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    let day_word = |n: u64| {
        if n == 1 {
            "1 day".to_string()
        } else {
            format!("{n} days")
        }
    };
    match (days, h, m, sec) {
        (0, 0, 0, sec) => format!("{sec}s"),
        (0, 0, m, 0) => format!("{m}m"),
        (0, 0, m, sec) => format!("{m}m {sec}s"),
        (0, h, 0, _) => format!("{h}h"),
        (0, h, m, _) => format!("{h}h {m}m"),
        (days, 0, _, _) => day_word(days),
        (days, h, _, _) => format!("{} {h}h", day_word(days)),
    }
}

/// Refuse a secret file (a key, a token) that its group or other users can
/// read or write: the error says which file and how to mend it.
pub fn check_private(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()))
            })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is readable by other users (mode {:o}); it holds a secret: run `chmod 600 {}`",
                    path.display(),
                    mode & 0o777,
                    path.display()
                ),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Create `dir` and its missing parents readable by the owner only (0700 on
/// Unix, whatever the umask): data dirs hold results, keys and spools.
pub fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// Make an existing directory its owner's alone (`0700` on Unix) when
/// others may enter or read it (a data dir an older version made with the
/// umask's `0755`); nothing elsewhere.
pub fn make_dir_private(dir: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700 | 0o700))?;
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// Cut `s` to at most `max_bytes` bytes, on a character boundary (a
/// `String::truncate` inside a multi-byte character panics).
pub fn truncate_on_char(s: &mut String, max_bytes: usize) {
    if s.len() <= max_bytes {
        return;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
}

/// Values kept between uses (compression contexts, whose tables and
/// buffers cost more to build than to reuse), at most a named number: a
/// user takes one (`None`: make a new one) and puts it back after.
pub struct Kept<T> {
    values: std::sync::Mutex<Vec<T>>,
    most: usize,
}

impl<T> Kept<T> {
    /// At most `most` kept.
    pub const fn new(most: usize) -> Kept<T> {
        Kept {
            values: std::sync::Mutex::new(Vec::new()),
            most,
        }
    }

    /// A kept value, if one is free.
    pub fn take(&self) -> Option<T> {
        self.values.lock().unwrap_or_else(|p| p.into_inner()).pop()
    }

    /// Keep `value` for the next user, unless as many as allowed are kept.
    pub fn put_back(&self, value: T) {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        if values.len() < self.most {
            values.push(value);
        }
    }

    /// How many are kept now.
    pub fn len(&self) -> usize {
        self.values.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_values_are_handed_out_again_and_never_past_their_most() {
        let kept = Kept::new(2);
        assert_eq!(kept.take(), None::<u32>);
        for v in [1, 2, 3] {
            kept.put_back(v);
        }
        assert_eq!(kept.len(), 2);
        assert_eq!(
            (kept.take(), kept.take(), kept.take()),
            (Some(2), Some(1), None)
        );
        assert!(kept.is_empty());
    }

    #[test]
    fn truncation_never_splits_a_character() {
        for text in [
            "",
            "abc",
            "é",
            "日本語のテキスト",
            "a😀b😀c",
            "ß".repeat(600).as_str(),
        ] {
            for max in 0..text.len() + 2 {
                let mut s = text.to_string();
                truncate_on_char(&mut s, max);
                assert!(s.len() <= max && text.starts_with(&s), "{text:?} at {max}");
                assert!(
                    s.len() + 4 > max.min(text.len()),
                    "cut too much: {text:?} at {max}"
                );
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn an_open_dir_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("beebot-open-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        make_dir_private(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn private_dirs_are_the_owners_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("beebot-private-{}", std::process::id()));
        let d = root.join("a").join("b");
        create_private_dir(&d).unwrap();
        for p in [root.join("a"), d.clone()] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", p.display());
        }
        create_private_dir(&d).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(
            parse_duration("90"),
            Err(ParseDurationError::NoUnit("90".into()))
        );
        for bad in ["x", "", "s", "1.5h", "-3m", "3 w"] {
            assert!(
                matches!(
                    parse_duration(bad),
                    Err(ParseDurationError::NotADuration(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_duration("99999999999999999999d"),
            Err(ParseDurationError::NotADuration(_))
        ));
        assert_eq!(
            parse_duration("99999999999999999d"),
            Err(ParseDurationError::TooLong("99999999999999999d".into()))
        );
    }

    #[test]
    fn a_duration_refused_says_why_in_words() {
        let says = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert_eq!(
            says("90"),
            "`90` has no unit: write it with one, e.g. 90s, 90m, 90h or 90d"
        );
        assert_eq!(
            says(" 1.5h "),
            "`1.5h` is not a duration (examples: 90s, 15m, 12h or 7d)"
        );
        assert_eq!(
            says("99999999999999999d"),
            "`99999999999999999d` is too long"
        );
    }

    #[test]
    fn durations_read_as_words() {
        use std::time::Duration;
        let w = |s| human_duration(Duration::from_secs(s));
        assert_eq!(w(0), "0s");
        assert_eq!(w(45), "45s");
        assert_eq!(w(245), "4m 5s");
        assert_eq!(w(300), "5m");
        assert_eq!(w(3600), "1h");
        assert_eq!(w(4 * 3600 + 21 * 60 + 9), "4h 21m");
        assert_eq!(w(86400), "1 day");
        assert_eq!(w(7 * 86400), "7 days");
        assert_eq!(w(2 * 86400 + 3 * 3600 + 59), "2 days 3h");
        for s in [1, 59, 61, 3599, 3601, 86399, 86401, 10 * 86400] {
            assert_eq!(parse_duration(&format!("{s}s")).map(|d| d.as_secs()), Ok(s));
        }
    }

    #[test]
    fn collapses_and_caps() {
        assert_eq!(collapse_whitespace("  a \n\t b  ", 128), "a b");
        assert_eq!(collapse_whitespace("abcdef", 3), "abc");
        assert_eq!(collapse_whitespace("ab cd", 3), "ab");
        assert_eq!(collapse_whitespace("", 3), "");
        let long = "x".repeat(500);
        assert_eq!(collapse_whitespace(&long, 128).chars().count(), 128);
    }
}
