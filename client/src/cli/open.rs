//! `beebot open`: open the status page in the default browser with a
//! one-time login link, starting the client first when it is not running
//! (its service when one is installed for this home, else `beebot run` in
//! the background). What the desktop entry "BeeBot" runs.
//!
//! The link works once, for two minutes; the secret it is made with never
//! leaves the home. The browser is given a page in the data dir (owner-only)
//! that sends it on to the link, so the link never shows in a process's
//! arguments (`ps`) for other users to take first. Nothing here changes the
//! client's settings.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use beebot_client::home::Home;
use beebot_client::service;
use beebot_client::ui::client::login_link;

/// Longest `open` waits for a client it started to serve its page.
pub const START_WAIT: Duration = Duration::from_secs(20);
/// How often it looks.
const START_POLL: Duration = Duration::from_millis(200);

/// Open the page (`print`: print the link instead).
pub fn open(home: &Home, home_flag: Option<&Path>, print: bool) -> Result<String> {
    let (url, started) = match login_link(&home.data) {
        Ok(url) => (url, None),
        Err(_) => {
            // A runner that holds the home is starting (or its page is
            // busy): wait for it rather than start a second.
            let how = match beebot_client::home::runner_pid(&home.data) {
                Some(pid) => format!("already running, pid {pid}"),
                None => start_client(home_flag)?,
            };
            let t = Instant::now();
            let url = loop {
                match login_link(&home.data) {
                    Ok(url) => break url,
                    Err(e) if t.elapsed() > START_WAIT => {
                        return Err(e).context(format!(
                            "started the client ({how}), but its page did not answer within {}",
                            beebot_shared::util::human_duration(START_WAIT)
                        ))
                    }
                    Err(_) => std::thread::sleep(START_POLL),
                }
            };
            (url, Some(how))
        }
    };
    let mut out = String::new();
    if let Some(how) = started.filter(|h| !h.starts_with("already")) {
        out.push_str(&format!("started the client ({how})\n"));
    }
    if print {
        out.push_str(&format!("{url}\n"));
        return Ok(out);
    }
    let opener = home.data.join(beebot_client::ui::OPEN_FILE);
    let page = format!(
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>BeeBot</title><p><a href=\"{url}\">Open BeeBot</a></p>\n"
    );
    beebot_client::home::write_atomic(&opener, page.as_bytes(), true)?;
    match open_browser(&opener.to_string_lossy()) {
        Ok(()) => out.push_str("opened the status page in your browser\n"),
        Err(e) => out.push_str(&format!(
            "could not open a browser ({e:#}); open this link (it works once, for two minutes):\n{url}\n"
        )),
    }
    Ok(out)
}

/// Start the client: its service when one runs this home (the packaged
/// unit runs the default home), else `beebot run` in the background. Says
/// which.
fn start_client(home_flag: Option<&Path>) -> Result<String> {
    #[cfg(windows)]
    {
        // The autostart is a registry entry, not a manager to ask: start
        // what it starts, the windowless launcher, in the background.
        let exe = std::env::current_exe().context("cannot find this program")?;
        let launcher = service::windows_launcher(&exe);
        let pid = service::spawn_windowless(&launcher, home_flag)?;
        Ok(format!("`beebot run` in the background, pid {pid}"))
    }
    #[cfg(not(windows))]
    {
        let service_runs_it =
            home_flag.is_none() || service::installed_for(home_flag).unwrap_or(false);
        if service_runs_it {
            let (program, args): (&str, Vec<&str>) = if cfg!(target_os = "macos") {
                ("launchctl", vec!["start", service::LAUNCHD_LABEL])
            } else {
                ("systemctl", vec!["--user", "start", service::SYSTEMD_UNIT])
            };
            let ok = Command::new(program)
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(format!("{program} {}", args.join(" ")));
            }
        }
        let exe = std::env::current_exe().context("cannot find this program")?;
        let mut cmd = Command::new(exe);
        if let Some(h) = home_flag {
            cmd.arg("--home").arg(h);
        }
        cmd.arg("run")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group: closing the terminal does not stop it.
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let child = cmd.spawn().context("cannot start `beebot run`")?;
        Ok(format!(
            "`beebot run` in the background, pid {}",
            child.id()
        ))
    }
}

/// Open `url` (a link or a file) in the default browser.
fn open_browser(url: &str) -> Result<()> {
    let mut cmd = if cfg!(target_os = "macos") {
        let mut c = Command::new("open");
        c.arg(url);
        c
    } else if cfg!(windows) {
        let mut c = Command::new("explorer");
        c.arg(url);
        c
    } else {
        let mut c = Command::new("xdg-open");
        c.arg(url);
        c
    };
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("no browser opener found")?;
    // explorer exits 1 even when it opened the page.
    anyhow::ensure!(
        status.success() || cfg!(windows),
        "the browser opener failed ({status})"
    );
    Ok(())
}
