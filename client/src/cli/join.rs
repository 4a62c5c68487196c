//! `beebot join`: join a project with the invite code from its admin. The
//! code is secret, so it is best piped in (`-`) or given in
//! [`INVITE_ENV`]; what is read from stdin is bounded.
//!
//! Nothing is written to the home before the server has enrolled this host
//! (see [`beebot_client::worker::join`]).

use std::fmt::Write as _;
use std::io::IsTerminal;

use anyhow::{Context, Result};

use beebot_client::home::{Enrolment, Home};
use beebot_client::rt::runtime;
use beebot_client::worker;

/// The environment variable `beebot join` takes the invite code from.
const INVITE_ENV: &str = "BEEBOT_INVITE";

/// Join with the code given (`-`: stdin), from the environment, or piped in.
pub fn join(home: &Home, code: Option<&str>, name: Option<String>) -> Result<String> {
    let code = given_code(code)?;
    let e = runtime()?.block_on(worker::join(home, &code, name))?;
    Ok(joined(&e))
}

/// `beebot join --check`: whether the code (as `join` would take it) is a
/// whole invite code; offline, nothing written.
pub fn check(code: Option<&str>) -> Result<String> {
    Ok(checked(&given_code(code)?)?)
}

/// The code this process was given ([`invite_code`] of its argument,
/// environment and stdin).
fn given_code(arg: Option<&str>) -> Result<String> {
    let stdin = std::io::stdin();
    invite_code(
        arg,
        std::env::var(INVITE_ENV).ok(),
        stdin.is_terminal(),
        stdin.lock(),
    )
}

/// What `--check` says of a code.
fn checked(code: &str) -> Result<String, beebot_shared::invite::InviteError> {
    let invite = beebot_shared::invite::Invite::from_code(code.trim())?;
    Ok(format!(
        "the invite code is whole: it joins the project at {}\n",
        invite.addr
    ))
}

/// What `beebot join` says once joined.
fn joined(e: &Enrolment) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "joined {} as host {} ({})",
        e.server_addr, e.host_id, e.name
    );
    out.push_str("next: `beebot run`\n");
    out
}

/// The invite code `beebot join` uses: the argument (`-`: stdin), else
/// [`INVITE_ENV`], else stdin when it is not a terminal. What is read from
/// stdin is bounded and its first non-blank line is the code.
fn invite_code(
    arg: Option<&str>,
    env: Option<String>,
    stdin_is_terminal: bool,
    stdin: impl std::io::Read,
) -> Result<String> {
    match arg {
        Some("-") => invite_from(stdin),
        Some(code) => Ok(code.to_string()),
        None => match env.map(|e| e.trim().to_string()).filter(|e| !e.is_empty()) {
            Some(code) => Ok(code),
            None if !stdin_is_terminal => invite_from(stdin),
            None => {
                anyhow::bail!("no invite code: pipe it in (`beebot join -`), or set {INVITE_ENV}")
            }
        },
    }
}

/// The first non-blank line of `input`, of at most an invite code's length
/// (what is read is bounded).
fn invite_from(input: impl std::io::Read) -> Result<String> {
    beebot_client::home::invite_code_in(input)
        .context("cannot read the invite code from stdin")?
        .context("no invite code on stdin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_tells_a_whole_code_from_a_damaged_one() {
        let code = beebot_shared::invite::Invite {
            addr: "grid.example.org:4433".into(),
            server_name: "grid.example.org".into(),
            cert_sha256: [7; 32],
            project_key: [9; 32],
            token: vec![1, 2, 3],
            expires_ms: u64::MAX,
        }
        .to_code();
        assert_eq!(
            checked(&format!(" {code}\r\n")).unwrap(),
            "the invite code is whole: it joins the project at grid.example.org:4433\n"
        );
        let damaged = format!("{}x{}", &code[..20], &code[21..]);
        let e = checked(&damaged).unwrap_err().to_string();
        assert!(e.contains("damaged"), "{e}");
        assert!(checked("hello")
            .unwrap_err()
            .to_string()
            .contains("not a BeeBot invite"));
    }

    #[test]
    fn the_invite_code_comes_from_the_argument_stdin_or_the_environment() {
        let code = |arg: Option<&str>, env: Option<&str>, tty: bool, input: &str| {
            invite_code(arg, env.map(str::to_string), tty, input.as_bytes())
        };
        assert_eq!(
            code(Some("beebot2-a"), Some("beebot2-e"), true, "").unwrap(),
            "beebot2-a"
        );
        assert_eq!(
            code(Some("-"), Some("beebot2-e"), true, "\n  beebot2-s \nx\n").unwrap(),
            "beebot2-s"
        );
        assert_eq!(
            code(None, Some(" beebot2-e\n"), false, "beebot2-s").unwrap(),
            "beebot2-e"
        );
        assert_eq!(
            code(None, Some(""), false, "beebot2-s\r\n").unwrap(),
            "beebot2-s"
        );
        assert_eq!(code(None, None, false, "beebot2-s").unwrap(), "beebot2-s");
        let e = code(None, None, true, "beebot2-s").unwrap_err().to_string();
        assert!(e.contains("BEEBOT_INVITE") && e.contains("join -"), "{e}");
        assert!(code(Some("-"), None, true, " \n\n").is_err());
        // What is read is bounded.
        let long = "x".repeat(10 * beebot_shared::invite::MAX_INVITE_CODE_LEN);
        let got = code(Some("-"), None, false, &long).unwrap();
        assert!(got.len() <= beebot_shared::invite::MAX_INVITE_CODE_LEN + 2);
    }

    #[test]
    fn joining_names_the_project_the_host_and_what_comes_next() {
        let e = Enrolment {
            server_addr: "grid.test:4433".into(),
            server_name: "grid.test".into(),
            cert_sha256: "ab".repeat(32),
            project_key: "cd".repeat(32),
            host_id: 7,
            name: "desk-7".into(),
            joined_ms: 1,
        };
        assert_eq!(
            joined(&e),
            "joined grid.test:4433 as host 7 (desk-7)\nnext: `beebot run`\n"
        );
    }
}
