//! Who may use the status page: the per-install secret (a file only the
//! owner reads), one-time login codes made with it, the browser sessions
//! they open, and the `Host` and `Origin` checks of every request.
//!
//! A browser's session is a token the page keeps in `sessionStorage` and
//! sends in `Authorization: Session …`: never a cookie, which browsers
//! would also send to every other port of 127.0.0.1 (another local user's
//! server), and which would make every cross-site request carry it.
//!
//! Pure: no I/O but [`Secret::load_or_create`]; time is an argument.
//! Invariants: a login code works once and only for [`LOGIN_CODE_TTL`];
//! the secret never appears in a URL, a cookie or a page; a browser's
//! change carries the page's own `Origin`; everything kept has a named
//! bound.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

pub use crate::home::SECRET_FILE;
/// Random bytes of the secret, a login code, a session id and a CSRF token.
const TOKEN_BYTES: usize = 32;
/// A login link works this long after `beebot open` made it.
pub const LOGIN_CODE_TTL: Duration = Duration::from_secs(120);
/// Login links kept unused at once; the oldest goes first.
pub const MAX_LOGIN_CODES: usize = 8;
/// Browser sessions kept at once; the oldest goes first.
pub const MAX_SESSIONS: usize = 16;
/// A session lasts this long after its login (a tab left open for a week).
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The `Authorization` scheme of a browser's session token.
pub const SESSION_SCHEME: &str = "Session ";
/// The `Authorization` scheme of the owner's secret (the command line).
pub const OWNER_SCHEME: &str = "Bearer ";

/// A fresh random token, hex.
pub fn random_token() -> String {
    let b: [u8; TOKEN_BYTES] = rand::random();
    hex::encode(b)
}

/// Equal in time that does not depend on where they differ.
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The per-install secret: whoever can read it (the owner) drives the client.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// Read the secret of `data_dir`, making it on first use (owner-only).
    /// A secret file others can read is refused, not used.
    pub fn load_or_create(data_dir: &Path) -> Result<Secret> {
        let path = data_dir.join(SECRET_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                beebot_shared::util::check_private(&path)?;
                let t = text.trim();
                if t.len() != 2 * TOKEN_BYTES || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
                    anyhow::bail!(
                        "{} is damaged: remove it and start the client again",
                        path.display()
                    );
                }
                Ok(Secret(t.to_string()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let s = random_token();
                crate::home::write_atomic(&path, s.as_bytes(), true)?;
                Ok(Secret(s))
            }
            Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Read the secret of a running client's home (the CLI's side).
    pub fn read(data_dir: &Path) -> Result<Secret> {
        let path = data_dir.join(SECRET_FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Secret(text.trim().to_string()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, given: &str) -> bool {
        same(&self.0, given)
    }
}

/// A browser's session.
#[derive(Clone, Debug)]
pub struct Session {
    pub token: String,
    opened: Instant,
}

/// The login codes and sessions of one running client (in memory: a
/// restart ends every session).
#[derive(Debug, Default)]
pub struct Sessions {
    codes: Vec<(String, Instant)>,
    sessions: Vec<Session>,
}

impl Sessions {
    /// A one-time login code.
    pub fn new_code(&mut self, now: Instant) -> String {
        self.codes
            .retain(|(_, made)| now.duration_since(*made) < LOGIN_CODE_TTL);
        if self.codes.len() >= MAX_LOGIN_CODES {
            self.codes.remove(0);
        }
        let code = random_token();
        self.codes.push((code.clone(), now));
        code
    }

    /// Spend a login code: a new session if it is known and young enough.
    pub fn redeem(&mut self, code: &str, now: Instant) -> Option<Session> {
        let i = self.codes.iter().position(|(c, _)| same(c, code))?;
        let (_, made) = self.codes.remove(i);
        if now.duration_since(made) >= LOGIN_CODE_TTL {
            return None;
        }
        self.sessions
            .retain(|s| now.duration_since(s.opened) < SESSION_TTL);
        if self.sessions.len() >= MAX_SESSIONS {
            self.sessions.remove(0);
        }
        let s = Session {
            token: random_token(),
            opened: now,
        };
        self.sessions.push(s.clone());
        Some(s)
    }

    /// The live session of a token.
    pub fn session(&self, token: &str, now: Instant) -> Option<&Session> {
        self.sessions
            .iter()
            .find(|s| same(&s.token, token) && now.duration_since(s.opened) < SESSION_TTL)
    }
}

/// The names this page answers to: `127.0.0.1:PORT` and `localhost:PORT`.
pub fn host_ok(host: Option<&str>, port: u16) -> bool {
    host.is_some_and(|h| h == format!("127.0.0.1:{port}") || h == format!("localhost:{port}"))
}

/// The page's own origin.
pub fn origin_ok(origin: Option<&str>, port: u16) -> bool {
    origin.is_some_and(|o| {
        o == format!("http://127.0.0.1:{port}") || o == format!("http://localhost:{port}")
    })
}

/// What a request asks of the page, for [`decide`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked<'a> {
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub authorization: Option<&'a str>,
    /// It changes something (every method but GET and HEAD).
    pub changes: bool,
}

/// Who is asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The owner's command line, with the secret.
    Owner,
    /// A logged-in browser (the page, with its session token).
    Browser,
}

/// Why a request is refused (its status and words).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not this page's name (DNS rebinding) or not its origin: 403.
    Forbidden(&'static str),
    /// Not logged in: 401.
    NotLoggedIn,
}

/// Decide who asks, or why not: `Host` first, then a foreign `Origin`,
/// then the secret (`Bearer`) or a session token (`Session`); a browser's
/// change must carry the page's own `Origin`.
pub fn decide(
    a: &Asked<'_>,
    port: u16,
    secret: &Secret,
    sessions: &Sessions,
    now: Instant,
) -> Result<Caller, Refused> {
    if !host_ok(a.host, port) {
        return Err(Refused::Forbidden(
            "this page answers only as 127.0.0.1 or localhost",
        ));
    }
    if a.origin.is_some() && !origin_ok(a.origin, port) {
        return Err(Refused::Forbidden("another site may not use this page"));
    }
    let auth = a.authorization.unwrap_or("");
    if let Some(token) = auth.strip_prefix(OWNER_SCHEME) {
        return if secret.matches(token.trim()) {
            Ok(Caller::Owner)
        } else {
            Err(Refused::NotLoggedIn)
        };
    }
    let Some(token) = auth.strip_prefix(SESSION_SCHEME) else {
        return Err(Refused::NotLoggedIn);
    };
    if sessions.session(token.trim(), now).is_none() {
        return Err(Refused::NotLoggedIn);
    }
    if a.changes && !origin_ok(a.origin, port) {
        return Err(Refused::Forbidden("a change must come from this page"));
    }
    Ok(Caller::Browser)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: u16 = 4711;

    fn setup() -> (Secret, Sessions, Instant) {
        (Secret("ab".repeat(32)), Sessions::default(), Instant::now())
    }

    fn asked(authorization: Option<&str>, changes: bool) -> Asked<'_> {
        Asked {
            host: Some("127.0.0.1:4711"),
            origin: changes.then_some("http://127.0.0.1:4711"),
            authorization,
            changes,
        }
    }

    #[test]
    fn a_login_code_works_once_and_only_while_young() {
        let (_, mut s, now) = setup();
        let code = s.new_code(now);
        assert!(s.redeem("not-a-code", now).is_none());
        let opened = now + Duration::from_secs(5);
        let session = s.redeem(&code, opened).expect("fresh");
        assert!(s.session(&session.token, opened).is_some());
        assert!(s.redeem(&code, now).is_none(), "used");
        let old = s.new_code(now);
        assert!(s.redeem(&old, now + LOGIN_CODE_TTL).is_none(), "too old");
        // Bounded: the oldest codes and sessions go first.
        let first = s.new_code(now);
        for _ in 0..MAX_LOGIN_CODES {
            s.new_code(now);
        }
        assert!(s.redeem(&first, now).is_none());
        assert!(
            s.session(&session.token, opened + SESSION_TTL).is_none(),
            "expired"
        );
        let tokens: Vec<String> = (0..=MAX_SESSIONS)
            .map(|_| {
                let c = s.new_code(now);
                s.redeem(&c, now).unwrap().token
            })
            .collect();
        assert!(s.session(&tokens[0], now).is_none());
        assert!(s.session(&tokens[MAX_SESSIONS], now).is_some());
    }

    #[test]
    fn the_owner_uses_the_secret_and_a_browser_its_session() {
        let (secret, mut s, now) = setup();
        let code = s.new_code(now);
        let session = s.redeem(&code, now).unwrap();
        let browser = format!("{SESSION_SCHEME}{}", session.token);
        let bearer = format!("{OWNER_SCHEME}{}", secret.expose());
        let owner = Asked {
            host: Some("localhost:4711"),
            authorization: Some(&bearer),
            changes: true,
            origin: None,
        };
        assert_eq!(decide(&owner, PORT, &secret, &s, now), Ok(Caller::Owner));
        let wrong = Asked {
            authorization: Some("Bearer abab"),
            ..owner
        };
        assert_eq!(
            decide(&wrong, PORT, &secret, &s, now),
            Err(Refused::NotLoggedIn)
        );
        // A browser reads and changes with its session token.
        let read = asked(Some(&browser), false);
        assert_eq!(decide(&read, PORT, &secret, &s, now), Ok(Caller::Browser));
        let change = asked(Some(&browser), true);
        assert_eq!(decide(&change, PORT, &secret, &s, now), Ok(Caller::Browser));
        for nobody in [None, Some("Session 00"), Some("Basic abc")] {
            assert_eq!(
                decide(&asked(nobody, false), PORT, &secret, &s, now),
                Err(Refused::NotLoggedIn),
                "{nobody:?}"
            );
        }
    }

    #[test]
    fn other_pages_names_and_origins_are_refused() {
        let (secret, mut s, now) = setup();
        let code = s.new_code(now);
        let session = s.redeem(&code, now).unwrap();
        let browser = format!("{SESSION_SCHEME}{}", session.token);
        let ok = asked(Some(&browser), true);
        assert!(decide(&ok, PORT, &secret, &s, now).is_ok());
        let refused = |a: Asked<'_>| decide(&a, PORT, &secret, &s, now).is_err();
        // DNS rebinding: the browser sends the attacker's name.
        assert!(refused(Asked {
            host: Some("evil.example:4711"),
            ..ok
        }));
        assert!(refused(Asked {
            host: Some("127.0.0.1:4712"),
            ..ok
        }));
        assert!(refused(Asked { host: None, ..ok }));
        // Another local page (same site, other port), or an opaque origin.
        assert!(refused(Asked {
            origin: Some("http://127.0.0.1:9999"),
            ..ok
        }));
        assert!(refused(Asked {
            origin: Some("null"),
            ..ok
        }));
        // A browser's change without its origin.
        assert!(refused(Asked { origin: None, ..ok }));
        // Even the secret does not pass another site's origin.
        let bearer = format!("{OWNER_SCHEME}{}", secret.expose());
        assert!(refused(Asked {
            authorization: Some(&bearer),
            origin: Some("http://evil.example"),
            ..ok
        }));
    }

    #[test]
    fn comparison_takes_the_whole_token() {
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn the_secret_is_made_once_and_kept_private() {
        let d = tempfile::tempdir().unwrap();
        let a = Secret::load_or_create(d.path()).unwrap();
        let b = Secret::load_or_create(d.path()).unwrap();
        assert!(a.matches(b.expose()));
        assert_eq!(a.expose().len(), 64);
        assert_eq!(format!("{a:?}"), "Secret(…)");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let p = d.path().join(SECRET_FILE);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(
                Secret::load_or_create(d.path()).is_err(),
                "others can read it"
            );
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::write(&p, "short").unwrap();
            assert!(Secret::load_or_create(d.path()).is_err(), "damaged");
        }
    }
}
