//! `beebot leave`: stop this home's client and its service, tell the server,
//! and remove every file the client made here; then say what was done.
//!
//! Offline, the files are removed all the same and the server is not told
//! (its units' deadlines tell it). Nothing here decides what to remove: that
//! is [`beebot_client::leave`].

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use beebot_client::home::Home;
use beebot_client::leave::{LeaveReport, ServerTold};
use beebot_client::rt::runtime;

/// Leave the project from `home` (`home_flag`: the `--home` given).
pub fn leave(home: &Home, home_flag: Option<&Path>) -> Result<String> {
    let r = runtime()?.block_on(beebot_client::leave::leave(home, home_flag))?;
    Ok(report(&r))
}

/// What leaving did, line by line.
pub(super) fn report(r: &LeaveReport) -> String {
    let mut out = String::new();
    for line in &r.service {
        let _ = writeln!(out, "service: {line}");
    }
    if let Some(pid) = r.runner_stopped {
        let _ = writeln!(out, "stopped the running client (pid {pid})");
    }
    match &r.server {
        ServerTold::Told => out.push_str("told the server: this host left the project\n"),
        ServerTold::WasRevoked => out.push_str("the server had revoked this host already\n"),
        ServerTold::NotTold(why) => {
            let _ = writeln!(
                out,
                "the server was NOT told ({why}); it will see this host as gone once its units' deadlines pass"
            );
        }
        ServerTold::NotJoined => {}
    }
    for (what, path) in &r.removed {
        let _ = writeln!(out, "removed {what}: {}", path.display());
    }
    out.push_str("left the project\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn leaving_says_what_was_stopped_told_and_removed() {
        let r = LeaveReport {
            service: vec!["stopped beebot.service".into()],
            runner_stopped: Some(42),
            server: ServerTold::NotTold("unreachable".into()),
            removed: vec![("enrolment", PathBuf::from("/h/enrolment.json"))],
        };
        assert_eq!(
            report(&r),
            "service: stopped beebot.service\n\
             stopped the running client (pid 42)\n\
             the server was NOT told (unreachable); it will see this host as gone once its units' deadlines pass\n\
             removed enrolment: /h/enrolment.json\n\
             left the project\n"
        );
        let quiet = LeaveReport {
            service: Vec::new(),
            runner_stopped: None,
            server: ServerTold::NotJoined,
            removed: Vec::new(),
        };
        assert_eq!(report(&quiet), "left the project\n");
    }
}
