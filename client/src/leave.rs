//! `beebot leave`: stop this home's runner, uninstall its service, tell the
//! server, and remove every file the client made in the home. Leaving
//! offline still cleans up, and says the server was not told.
//!
//! `stop_runner` is `beebot stop` (and the first step of `leave`);
//! `leave_holding_lock` is the page's leave from inside the runner, which
//! closes its own log file first. Nothing is removed while the runner still
//! runs; a file still held open (a runner still exiting) is tried again for
//! `REMOVE_RETRY` (10 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use beebot_shared::proto::{ErrorCode, Request};

use crate::home::{Home, RunLock, RunLockError};
use crate::net::{Link, NetError};
use crate::service;

/// Longest `leave` waits for a running `beebot run` to stop: its scans get
/// `SHUTDOWN_GRACE` (3 s) and their writes `SHUTDOWN_WRITES` (1.25 s), with
/// room to spare for a loaded machine.
pub const RUNNER_STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often `leave` looks whether the runner has exited.
const RUNNER_POLL: Duration = Duration::from_millis(100);
/// Longest `leave` tries to tell the server (connect, hello, `Leave`); past
/// it the host leaves offline.
pub const TELL_SERVER_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server heard of the leaving.
#[derive(Debug)]
pub enum ServerTold {
    /// The server released this host's units and lists it as left.
    Told,
    /// The server had revoked this host already.
    WasRevoked,
    /// The server could not be told (why); it will see the host as silent.
    NotTold(String),
    /// This home had not joined a project.
    NotJoined,
}

/// What `leave` did, for the user.
#[derive(Debug)]
pub struct LeaveReport {
    /// Lines from uninstalling this home's service, if it had one.
    pub service: Vec<String>,
    /// The pid of the runner that was stopped, if one ran.
    pub runner_stopped: Option<u32>,
    pub server: ServerTold,
    /// What was removed, with what each is.
    pub removed: Vec<(&'static str, PathBuf)>,
}

/// Leave the project from `home` (`home_flag`: the `--home` given, which
/// the service unit names).
pub async fn leave(home: &Home, home_flag: Option<&Path>) -> Result<LeaveReport> {
    let enrolment = home.identity().enrolment()?;
    // The service first: a service manager would start the runner again.
    let service = if service::installed_for(home_flag)? {
        service::uninstall()?
    } else {
        Vec::new()
    };
    let (runner_stopped, lock) = stop_runner(home).await?;
    let mut report = forget(home, enrolment, lock).await?;
    report.service = service;
    report.runner_stopped = runner_stopped;
    Ok(report)
}

/// Whether process `pid` still runs (Linux: `/proc`; Windows: its exit
/// code; elsewhere it is taken as gone).
pub fn process_alive(pid: u32) -> bool {
    #[cfg(windows)]
    {
        beebot_win32::process::alive(pid)
    }
    #[cfg(target_os = "linux")]
    {
        // A zombie has ended: its state is `Z`.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .map(|i| s[i + 1..].trim_start().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    }
    #[cfg(not(any(windows, target_os = "linux")))]
    {
        let _ = pid;
        false
    }
}

/// Longest `leave` tries again to remove the home's files while another
/// process still holds one open: Windows refuses to remove those, and a
/// runner that has just let go of the run lock is still exiting (a virus
/// scanner may hold a file for a moment too).
pub const REMOVE_RETRY: Duration = Duration::from_secs(10);
/// The wait between tries.
const REMOVE_RETRY_WAIT: Duration = Duration::from_millis(100);

/// Remove every file of the home, trying again for [`REMOVE_RETRY`] while
/// one cannot be removed yet; what every try removed.
async fn remove_all_retrying(home: &Home) -> Result<Vec<(&'static str, PathBuf)>> {
    let start = Instant::now();
    let mut removed = Vec::new();
    loop {
        match home.remove_all_into(&mut removed) {
            Ok(()) => return Ok(removed),
            Err(e) if start.elapsed() >= REMOVE_RETRY => {
                return Err(e.context(format!(
                    "still held open after {} (is a BeeBot still running?)",
                    beebot_shared::util::human_duration(REMOVE_RETRY)
                )))
            }
            Err(_) => tokio::time::sleep(REMOVE_RETRY_WAIT).await,
        }
    }
}

/// Leave from inside `beebot run` (the status page's "leave"): its work
/// loop has stopped and it holds the run lock. The server is told and the
/// files removed; uninstalling the service, which stops this very process,
/// is the runner's last step.
pub async fn leave_holding_lock(home: &Home, lock: RunLock) -> Result<LeaveReport> {
    // Its own log file would keep the log directory on Windows.
    crate::logging::close_files();
    forget(home, home.identity().enrolment()?, lock).await
}

/// Tell the server and remove the home's files, holding its run lock.
async fn forget(
    home: &Home,
    enrolment: Option<crate::home::Enrolment>,
    lock: RunLock,
) -> Result<LeaveReport> {
    let revoked = home.identity().revocation().is_some();
    let server = match &enrolment {
        None => ServerTold::NotJoined,
        Some(_) if revoked => ServerTold::WasRevoked,
        Some(e) => match tokio::time::timeout(TELL_SERVER_TIMEOUT, tell_server(home, e)).await {
            Ok(Ok(())) => ServerTold::Told,
            Ok(Err(e)) if is_revoked(&e) => ServerTold::WasRevoked,
            Ok(Err(e)) => ServerTold::NotTold(format!("{e:#}")),
            Err(_) => ServerTold::NotTold(format!(
                "no answer within {}",
                beebot_shared::util::human_duration(TELL_SERVER_TIMEOUT)
            )),
        },
    };
    // The lock is held until every file is gone: no runner starts meanwhile.
    let removed = remove_all_retrying(home).await?;
    if enrolment.is_some() && crate::home::has_deployment_invite() {
        // The installer's invite code must not join it again by itself.
        home.identity().mark_left();
    }
    drop(lock);
    let nothing = |w: &str| matches!(w, "run lock" | "runner's pid" | "note that it left");
    if enrolment.is_none() && removed.iter().all(|(w, _)| nothing(w)) {
        bail!(
            "this client has not joined a project (home {}): nothing to leave",
            home.config.display()
        );
    }
    Ok(LeaveReport {
        service: Vec::new(),
        runner_stopped: None,
        server,
        removed,
    })
}

/// Whether the server refused this host as revoked.
pub fn is_revoked(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<NetError>(),
            Some(NetError::Refused {
                code: ErrorCode::Revoked,
                ..
            })
        )
    })
}

async fn tell_server(home: &Home, e: &crate::home::Enrolment) -> Result<()> {
    let key = home.identity().host_key(false)?;
    let link = Link::connect(&e.server_id()?).await?;
    link.hello(e.host_id, &key).await?;
    link.request(&Request::Leave).await?;
    link.close();
    Ok(())
}

/// Take the home's run lock, first asking a running `beebot run` to stop
/// (through its status page's API) and waiting for it to exit, at most
/// [`RUNNER_STOP_TIMEOUT`]. Returns the stopped runner's pid and the lock.
pub async fn stop_runner(home: &Home) -> Result<(Option<u32>, RunLock)> {
    let pid = match home.lock_runner() {
        Ok(lock) => return Ok((None, lock)),
        Err(RunLockError::Held { pid, .. }) => pid,
        Err(e) => return Err(e.into()),
    };
    let who = pid.map_or("the running client".to_string(), |p| {
        format!("the running client (pid {p})")
    });
    // A runner the service manager is stopping may be gone already.
    let asked = crate::ui::client::command(&home.data, "stop");
    let start = Instant::now();
    loop {
        tokio::time::sleep(RUNNER_POLL).await;
        match home.lock_runner() {
            Ok(lock) => {
                // The lock goes before the process does: wait for it to
                // end too (bounded), so its files (its program, on
                // Windows) are free for an installer.
                if let Some(pid) = pid {
                    while process_alive(pid) && start.elapsed() < RUNNER_STOP_TIMEOUT {
                        tokio::time::sleep(RUNNER_POLL).await;
                    }
                }
                return Ok((pid, lock));
            }
            Err(RunLockError::Held { .. }) if start.elapsed() < RUNNER_STOP_TIMEOUT => {}
            Err(RunLockError::Held { .. }) => bail!(
                "{who} did not stop within {}{}; nothing was removed: stop it, then run `beebot leave` again",
                beebot_shared::util::human_duration(RUNNER_STOP_TIMEOUT),
                asked
                    .err()
                    .map(|e| format!(" (asking it to stop failed: {e:#})"))
                    .unwrap_or_default()
            ),
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_alive_until_it_ends() {
        assert!(process_alive(std::process::id()));
        let mut child = if cfg!(windows) {
            std::process::Command::new("cmd")
                .args(["/C", "exit"])
                .spawn()
        } else {
            std::process::Command::new("true").spawn()
        }
        .expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        if cfg!(any(windows, target_os = "linux")) {
            assert!(!process_alive(pid), "{pid} taken as alive");
        }
    }
}
