//! `beebot service install|uninstall|status`: run the client as a per-user
//! background service that starts at login or boot. A systemd user unit on
//! Linux, a launchd agent on macOS, the user's `Run` key on Windows. The
//! file contents and the command lines are pure functions (tested);
//! installing writes them and asks the platform to start them.
//!
//! On Windows the autostart is a value under
//! `HKCU\Software\Microsoft\Windows\CurrentVersion\Run`, as Dropbox,
//! OneDrive and Syncthing's tray wrappers do: any user may write their own
//! without administrator rights, it starts in the user's session (where the
//! notification-area icon belongs), and Group Policy and installers know
//! it. A scheduled task needs the user named (refused to non-admins
//! otherwise) and its XML in UTF-16; the Startup folder needs a `.lnk`
//! (COM) and is moved by folder redirection. It runs `beebotw.exe`, the
//! windowless launcher beside `beebot.exe`, so no console window opens.
//!
//! `service status` on Windows says where the autostart is registered (for this
//! user, for every user) and whether the runner runs.
//!
//! Windows command lines are quoted and split as `CommandLineToArgvW` does.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// systemd user unit name.
pub const SYSTEMD_UNIT: &str = "beebot.service";
/// launchd label.
pub const LAUNCHD_LABEL: &str = "org.beebot.client";

fn quote_systemd(arg: &str) -> String {
    if arg
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-=:+".contains(c))
    {
        arg.to_string()
    } else {
        format!("\"{}\"", arg.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The systemd user unit: runs `beebot run` at low priority, restarts on failure.
pub fn systemd_unit(exe: &Path, home: Option<&Path>) -> String {
    let mut cmd = vec![quote_systemd(&exe.to_string_lossy())];
    if let Some(h) = home {
        cmd.push("--home".into());
        cmd.push(quote_systemd(&h.to_string_lossy()));
    }
    cmd.push("run".into());
    format!(
        "# BeeBot grid client: crawls websites for a research link graph while the\n\
         # machine is idle. Installed by `beebot service install`.\n\
         [Unit]\n\
         Description=BeeBot grid client\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         ConditionUser=!@system\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={}\n\
         Restart=on-failure\n\
         RestartSec=60\n\
         Nice=10\n\
         IOSchedulingClass=idle\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=30\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        cmd.join(" ")
    )
}

/// The launchd agent (macOS).
pub fn launchd_plist(exe: &Path, home: Option<&Path>, log_dir: &Path) -> String {
    let mut args = vec![exe.to_string_lossy().into_owned()];
    if let Some(h) = home {
        args.push("--home".into());
        args.push(h.to_string_lossy().into_owned());
    }
    args.push("run".into());
    let args: String = args
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml_escape(a)))
        .collect();
    let log = xml_escape(&log_dir.join("service.log").to_string_lossy());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <plist version=\"1.0\">\n<dict>\n\
         \x20 <key>Label</key>\n  <string>{LAUNCHD_LABEL}</string>\n\
         \x20 <key>ProgramArguments</key>\n  <array>\n{args}  </array>\n\
         \x20 <key>RunAtLoad</key>\n  <true/>\n\
         \x20 <key>KeepAlive</key>\n  <dict><key>SuccessfulExit</key><false/></dict>\n\
         \x20 <key>ProcessType</key>\n  <string>Background</string>\n\
         \x20 <key>LowPriorityIO</key>\n  <true/>\n\
         \x20 <key>Nice</key>\n  <integer>10</integer>\n\
         \x20 <key>StandardErrorPath</key>\n  <string>{log}</string>\n\
         </dict>\n</plist>\n"
    )
}

/// The registry key of per-user (`HKCU`) and per-machine (`HKLM`) autostart
/// entries.
pub const WINDOWS_RUN_KEY: &str = "Software\\Microsoft\\Windows\\CurrentVersion\\Run";
/// The value's name there (the installers write the same).
pub const WINDOWS_RUN_VALUE: &str = "BeeBot";
/// The windowless launcher beside `beebot.exe` that the autostart runs.
pub const WINDOWS_LAUNCHER: &str = "beebotw.exe";

/// One argument quoted for a Windows command line, as `CommandLineToArgvW`
/// splits it: in quotes when it has a space, a tab or a quote (or is
/// empty), backslashes doubled before a quote and at the end.
pub fn quote_windows(arg: &str) -> String {
    if !arg.is_empty() && !arg.contains([' ', '\t', '"']) {
        return arg.to_string();
    }
    let mut out = String::from("\"");
    let mut slashes = 0;
    for c in arg.chars() {
        match c {
            '\\' => slashes += 1,
            '"' => {
                out.push_str(&"\\".repeat(2 * slashes + 1));
                out.push('"');
                slashes = 0;
                continue;
            }
            _ => {}
        }
        if c != '\\' {
            out.push_str(&"\\".repeat(slashes));
            slashes = 0;
            out.push(c);
        }
    }
    out.push_str(&"\\".repeat(2 * slashes));
    out.push('"');
    out
}

/// A Windows command line split as `CommandLineToArgvW` splits it (the
/// program name by the same rules; enough for what [`quote_windows`] makes).
pub fn split_windows(line: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        if chars.peek().is_none() {
            return args;
        }
        let (mut arg, mut quoted, mut slashes) = (String::new(), false, 0usize);
        while let Some(&c) = chars.peek() {
            match c {
                '\\' => {
                    slashes += 1;
                    chars.next();
                    continue;
                }
                '"' => {
                    arg.push_str(&"\\".repeat(slashes / 2));
                    if slashes % 2 == 1 {
                        arg.push('"');
                    } else {
                        quoted = !quoted;
                    }
                    slashes = 0;
                    chars.next();
                    continue;
                }
                ' ' | '\t' if !quoted => break,
                _ => {}
            }
            arg.push_str(&"\\".repeat(slashes));
            slashes = 0;
            arg.push(c);
            chars.next();
        }
        arg.push_str(&"\\".repeat(slashes));
        args.push(arg);
    }
}

/// The autostart's command line: the launcher, `--home` when one was given,
/// then `run`.
pub fn windows_run_command(launcher: &Path, home: Option<&Path>) -> String {
    let mut args = vec![quote_windows(&launcher.to_string_lossy())];
    if let Some(h) = home {
        args.push("--home".into());
        args.push(quote_windows(&h.to_string_lossy()));
    }
    args.push("run".into());
    args.join(" ")
}

/// Whether an autostart command line runs this home (`--home HOME run`, or
/// `run` without `--home` for the default home).
pub fn windows_runs_home(command: &str, home: Option<&Path>) -> bool {
    let args = split_windows(command);
    let n = args.len();
    match home {
        Some(h) => {
            n >= 4
                && args[n - 1] == "run"
                // Windows paths are compared as Windows does: any case.
                && args[n - 2].to_lowercase() == h.to_string_lossy().to_lowercase()
                && args[n - 3] == "--home"
        }
        None => n >= 2 && args[n - 1] == "run" && !args.iter().any(|a| a == "--home"),
    }
}

/// The launcher beside `exe` (`beebotw.exe`), or `exe` itself when the
/// launcher is missing (a console window then shows at logon).
pub fn windows_launcher(exe: &Path) -> PathBuf {
    let launcher = exe.with_file_name(WINDOWS_LAUNCHER);
    if launcher.is_file() {
        launcher
    } else {
        exe.to_path_buf()
    }
}

/// Where the systemd user unit goes (`$XDG_CONFIG_HOME/systemd/user`).
pub fn systemd_unit_path() -> Result<PathBuf> {
    let base = directories::BaseDirs::new().context("cannot find the home directory")?;
    Ok(base
        .config_dir()
        .join("systemd")
        .join("user")
        .join(SYSTEMD_UNIT))
}

fn run_quiet(cmd: &mut Command) -> Option<String> {
    run_checked(cmd).ok()
}

/// Run a command; its standard output when it succeeds, else what it
/// said on standard error (or why it could not run).
fn run_checked(cmd: &mut Command) -> std::result::Result<String, String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(if said.is_empty() {
            format!("`{program}` failed ({})", out.status)
        } else {
            said
        })
    }
}

/// Install the service for this platform; `start` asks the service manager to
/// enable and start it now. Returns lines to show the user.
pub fn install(
    exe: &Path,
    home: Option<&Path>,
    log_dir: &Path,
    start: bool,
) -> Result<Vec<String>> {
    if cfg!(target_os = "linux") {
        install_systemd(exe, home, start)
    } else if cfg!(target_os = "macos") {
        install_launchd(exe, home, log_dir, start)
    } else if cfg!(windows) {
        let _ = log_dir;
        install_windows_run(exe, home, start)
    } else {
        bail!(
            "no service support on this platform: run `beebot run` from your session's autostart"
        );
    }
}

/// Write a service file durably; the note says where.
fn write_service_file(path: &Path, text: &str) -> Result<Vec<String>> {
    crate::home::write_atomic(path, text.as_bytes(), false)?;
    Ok(vec![format!("wrote {}", path.display())])
}

/// The systemd user unit; started, lingering is suggested when off.
fn install_systemd(exe: &Path, home: Option<&Path>, start: bool) -> Result<Vec<String>> {
    let path = systemd_unit_path()?;
    let mut notes = write_service_file(&path, &systemd_unit(exe, home))?;
    if !start {
        return Ok(notes);
    }
    let started = run_checked(Command::new("systemctl").args(["--user", "daemon-reload"]))
        .and_then(|_| {
            run_checked(Command::new("systemctl").args(["--user", "enable", "--now", SYSTEMD_UNIT]))
        });
    if let Err(why) = started {
        bail!(
            "wrote {}, but `systemctl --user` could not start it: {why}\n\
             (no user session? log in graphically or over ssh, then run \
             `systemctl --user enable --now {SYSTEMD_UNIT}`)",
            path.display()
        );
    }
    notes.push(format!("started: systemctl --user status {SYSTEMD_UNIT}"));
    // loginctl names a user by uid too; $USER may be unset under sudo or cron.
    let uid = current_uid();
    let linger =
        run_quiet(Command::new("loginctl").args(["show-user", &uid, "-p", "Linger", "--value"]));
    if linger.as_deref() != Some("yes") {
        notes.push(
            "to run while you are logged out, enable lingering once: `loginctl enable-linger`"
                .to_string(),
        );
    }
    Ok(notes)
}

/// This user's numeric id, as loginctl takes it.
#[cfg(unix)]
fn current_uid() -> String {
    rustix::process::getuid().as_raw().to_string()
}

#[cfg(not(unix))]
fn current_uid() -> String {
    String::new()
}

/// The launchd agent of this user.
fn install_launchd(
    exe: &Path,
    home: Option<&Path>,
    log_dir: &Path,
    start: bool,
) -> Result<Vec<String>> {
    let base = directories::BaseDirs::new().context("cannot find the home directory")?;
    let path = base
        .home_dir()
        .join("Library/LaunchAgents")
        .join(format!("{LAUNCHD_LABEL}.plist"));
    let mut notes = write_service_file(&path, &launchd_plist(exe, home, log_dir))?;
    if start {
        if let Err(why) = run_checked(Command::new("launchctl").arg("load").arg("-w").arg(&path)) {
            bail!(
                "wrote {p}, but `launchctl` could not load it: {why}\n\
                 (run `launchctl load -w {p}` in your login session)",
                p = path.display()
            );
        }
        notes.push(format!("started: launchctl list {LAUNCHD_LABEL}"));
    }
    Ok(notes)
}

/// The user's autostart entry; with `start`, the runner started now too
/// (windowless, in the background) unless one runs already.
#[cfg(windows)]
fn install_windows_run(exe: &Path, home: Option<&Path>, start: bool) -> Result<Vec<String>> {
    use beebot_win32::registry::{self, Root};
    let launcher = windows_launcher(exe);
    let command = windows_run_command(&launcher, home);
    registry::set_string(
        Root::CurrentUser,
        WINDOWS_RUN_KEY,
        WINDOWS_RUN_VALUE,
        &command,
    )
    .with_context(|| {
        format!("cannot register the autostart (HKCU\\{WINDOWS_RUN_KEY}\\{WINDOWS_RUN_VALUE})")
    })?;
    let mut notes = vec![format!(
        "autostart registered for this user (HKCU\\{WINDOWS_RUN_KEY}\\{WINDOWS_RUN_VALUE}): {command}"
    )];
    if start {
        let data = match home {
            Some(h) => h.to_path_buf(),
            None => crate::home::Home::resolve(None)?.data,
        };
        match crate::home::runner_pid(&data) {
            Some(pid) => notes.push(format!("already running (pid {pid})")),
            None => {
                let pid = spawn_windowless(&launcher, home)?;
                notes.push(format!("started (pid {pid})"));
            }
        }
    }
    Ok(notes)
}

#[cfg(not(windows))]
fn install_windows_run(_exe: &Path, _home: Option<&Path>, _start: bool) -> Result<Vec<String>> {
    bail!("the Windows autostart is made on Windows only")
}

/// `PROGRAM [--home HOME] run` with no console window and no console of its
/// caller's, in a process group of its own; its pid.
#[cfg(windows)]
pub fn spawn_windowless(program: &Path, home: Option<&Path>) -> Result<u32> {
    use std::os::windows::process::CommandExt;
    use std::process::Stdio;
    /// No console window of its own, and none shared with the caller's.
    const DETACHED_PROCESS: u32 = 0x0000_0008;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    // Not the caller's output pipe (a script reading `service install`'s
    // output to its end would wait for the runner), nor its folder (the
    // install folder would stay in use): the home's data folder.
    beebot_win32::process::keep_std_handles_from_children();
    let data = crate::home::Home::resolve(home.map(Path::to_path_buf))?.data;
    beebot_shared::util::create_private_dir(&data)
        .with_context(|| format!("cannot create {}", data.display()))?;
    let mut cmd = Command::new(program);
    if let Some(h) = home {
        cmd.arg("--home").arg(h);
    }
    let child = cmd
        .current_dir(&data)
        .arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .creation_flags(DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))?;
    Ok(child.id())
}

/// Stop and remove the service.
pub fn uninstall() -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if cfg!(target_os = "linux") {
        let path = systemd_unit_path()?;
        let _ =
            run_quiet(Command::new("systemctl").args(["--user", "disable", "--now", SYSTEMD_UNIT]));
        match std::fs::remove_file(&path) {
            Ok(()) => notes.push(format!("removed {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push("no service was installed".into())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
        }
        let _ = run_quiet(Command::new("systemctl").args(["--user", "daemon-reload"]));
    } else if cfg!(target_os = "macos") {
        let base = directories::BaseDirs::new().context("cannot find the home directory")?;
        let path = base
            .home_dir()
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist"));
        let _ = run_quiet(Command::new("launchctl").arg("unload").arg(&path));
        let _ = std::fs::remove_file(&path);
        notes.push(format!("removed {}", path.display()));
    } else if cfg!(windows) {
        notes.push(uninstall_windows_run()?);
    }
    Ok(notes)
}

/// Remove this user's autostart entry.
#[cfg(windows)]
fn uninstall_windows_run() -> Result<String> {
    use beebot_win32::registry::{self, Root};
    let had = registry::get_string(Root::CurrentUser, WINDOWS_RUN_KEY, WINDOWS_RUN_VALUE)
        .ok()
        .flatten()
        .is_some();
    registry::delete_value(Root::CurrentUser, WINDOWS_RUN_KEY, WINDOWS_RUN_VALUE).with_context(
        || format!("cannot remove the autostart (HKCU\\{WINDOWS_RUN_KEY}\\{WINDOWS_RUN_VALUE})"),
    )?;
    Ok(if had {
        format!("removed the autostart (HKCU\\{WINDOWS_RUN_KEY}\\{WINDOWS_RUN_VALUE})")
    } else {
        "no autostart was registered for this user".into()
    })
}

#[cfg(not(windows))]
fn uninstall_windows_run() -> Result<String> {
    bail!("the Windows autostart is removed on Windows only")
}

/// The autostart entries that start the client: this user's, then the
/// machine's (a per-machine installer's, for every user), each with its
/// command line.
#[cfg(windows)]
pub fn windows_autostarts() -> Vec<(&'static str, String)> {
    use beebot_win32::registry::{self, Root};
    [(Root::CurrentUser, "HKCU"), (Root::LocalMachine, "HKLM")]
        .into_iter()
        .filter_map(|(root, name)| {
            registry::get_string(root, WINDOWS_RUN_KEY, WINDOWS_RUN_VALUE)
                .ok()
                .flatten()
                .map(|cmd| (name, cmd))
        })
        .collect()
}

/// Whether a service file runs this home: `ExecStart` (systemd) or the
/// program arguments (launchd) end in `--home HOME run`, or in `run`
/// without `--home` for the default home.
pub fn runs_home(service_file: &str, home: Option<&Path>) -> bool {
    if service_file.contains("<plist") {
        let array = service_file
            .split("<key>ProgramArguments</key>")
            .nth(1)
            .and_then(|rest| rest.split("</array>").next())
            .unwrap_or("");
        let args: Vec<&str> = array
            .split("<string>")
            .skip(1)
            .filter_map(|s| s.split("</string>").next())
            .collect();
        let n = args.len();
        return match home {
            Some(h) => {
                n >= 3
                    && args[n - 1] == "run"
                    && args[n - 2] == xml_escape(&h.to_string_lossy())
                    && args[n - 3] == "--home"
            }
            None => args.last() == Some(&"run") && !args.contains(&"--home"),
        };
    }
    service_file
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .any(|cmd| match home {
            Some(h) => cmd.ends_with(&format!(
                " --home {} run",
                quote_systemd(&h.to_string_lossy())
            )),
            None => cmd.ends_with(" run") && !cmd.contains(" --home "),
        })
}

/// Whether this platform's service is installed and runs this home (`home`:
/// the `--home` given, as `service install` wrote it).
pub fn installed_for(home: Option<&Path>) -> Result<bool> {
    let path = if cfg!(target_os = "linux") {
        systemd_unit_path()?
    } else if cfg!(target_os = "macos") {
        let base = directories::BaseDirs::new().context("cannot find the home directory")?;
        base.home_dir()
            .join("Library/LaunchAgents")
            .join(format!("{LAUNCHD_LABEL}.plist"))
    } else if cfg!(windows) {
        #[cfg(windows)]
        return Ok(windows_autostarts()
            .iter()
            .any(|(_, cmd)| windows_runs_home(cmd, home)));
        #[cfg(not(windows))]
        return Ok(false);
    } else {
        return Ok(false);
    };
    Ok(std::fs::read_to_string(&path).is_ok_and(|text| runs_home(&text, home)))
}

/// Whether the service is installed, and what the service manager says;
/// on Windows, whether the autostart is registered and the runner of
/// `data` runs.
pub fn status(data: &Path) -> Result<String> {
    if cfg!(target_os = "linux") {
        let _ = data;
        let path = systemd_unit_path()?;
        if !path.exists() {
            return Ok("not installed (`beebot service install`)".into());
        }
        let state =
            run_quiet(Command::new("systemctl").args(["--user", "is-active", SYSTEMD_UNIT]))
                .unwrap_or_else(|| "unknown (no user systemd session)".into());
        Ok(format!("installed ({}), {state}", path.display()))
    } else if cfg!(windows) {
        #[cfg(windows)]
        let autostarts = windows_autostarts();
        #[cfg(not(windows))]
        let autostarts: Vec<(&str, String)> = Vec::new();
        Ok(windows_status(&autostarts, crate::home::runner_pid(data)))
    } else {
        let _ = data;
        Ok("see your platform's service manager".into())
    }
}

/// What `service status` says on Windows, from the autostart entries found
/// (hive, command) and the runner's pid.
pub fn windows_status(autostarts: &[(&str, String)], runner: Option<u32>) -> String {
    let mut out = if autostarts.is_empty() {
        "autostart: not registered (`beebot service install`)".to_string()
    } else {
        autostarts
            .iter()
            .map(|(hive, cmd)| {
                let whom = if *hive == "HKLM" {
                    "every user of this machine"
                } else {
                    "this user"
                };
                format!("autostart: registered for {whom} ({hive}\\{WINDOWS_RUN_KEY}\\{WINDOWS_RUN_VALUE}): {cmd}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    out.push('\n');
    out.push_str(&match runner {
        Some(pid) => format!("runner: running (pid {pid})"),
        None => "runner: not running".into(),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_unit_runs_the_client_at_low_priority() {
        let u = systemd_unit(
            Path::new("/opt/bee bot/beebot"),
            Some(Path::new("/home/a/.bb")),
        );
        assert!(
            u.contains("ExecStart=\"/opt/bee bot/beebot\" --home /home/a/.bb run\n"),
            "{u}"
        );
        assert!(u.contains("Nice=10") && u.contains("WantedBy=default.target"));
        assert!(u.contains("Restart=on-failure"));
    }

    #[test]
    fn a_service_file_is_known_by_the_home_it_runs() {
        let exe = Path::new("/opt/bee bot/beebot");
        let a = Path::new("/home/a/bee home");
        let b = Path::new("/home/a/other");
        for text in [
            systemd_unit(exe, Some(a)),
            launchd_plist(exe, Some(a), Path::new("/tmp")),
        ] {
            assert!(runs_home(&text, Some(a)), "{text}");
            assert!(!runs_home(&text, Some(b)), "{text}");
            assert!(!runs_home(&text, None), "{text}");
        }
        for text in [
            systemd_unit(exe, None),
            launchd_plist(exe, None, Path::new("/tmp")),
        ] {
            assert!(runs_home(&text, None), "{text}");
            assert!(!runs_home(&text, Some(a)), "{text}");
        }
        assert!(!runs_home("", None));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn systemd_unit_verifies_where_systemd_analyze_exists() {
        let found = Command::new("systemd-analyze").arg("--version").output();
        if !found.is_ok_and(|out| out.status.success()) {
            // CI has it: only an explicit BEEBOT_ALLOW_MISSING_TOOLS=1 skips.
            let allowed = std::env::var("BEEBOT_ALLOW_MISSING_TOOLS").is_ok_and(|v| v == "1");
            assert!(
                allowed,
                "systemd-analyze is not available to verify the unit: install it, \
                 or set BEEBOT_ALLOW_MISSING_TOOLS=1 to check the content only"
            );
            eprintln!("systemd-analyze not available: content checked above only");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let path = dir.path().join(SYSTEMD_UNIT);
        std::fs::write(&path, systemd_unit(&exe, Some(dir.path()))).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // System mode checks the syntax without a user manager; complaints
        // name the file.
        let ours: Vec<&str> = err.lines().filter(|l| l.contains(SYSTEMD_UNIT)).collect();
        assert!(ours.is_empty(), "systemd-analyze verify: {err}");
    }

    #[test]
    fn launchd_plist_is_well_formed_and_escaped() {
        let p = launchd_plist(
            Path::new("/Applications/Bee&Bot/beebot"),
            None,
            Path::new("/tmp/l"),
        );
        assert!(p.contains("<string>/Applications/Bee&amp;Bot/beebot</string>"));
        assert!(p.contains("<key>RunAtLoad</key>") && p.contains(LAUNCHD_LABEL));
        assert_eq!(p.matches("<dict>").count(), p.matches("</dict>").count());
        assert_eq!(p.matches("<array>").count(), p.matches("</array>").count());
    }

    /// The templates in `deploy/` are what the generators write for the
    /// default install paths (kept in step by this test).
    #[test]
    fn deploy_templates_match_the_generators() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let unit = std::fs::read_to_string(deploy.join("beebot.service")).unwrap();
        let generated = systemd_unit(Path::new("/usr/local/bin/beebot"), None);
        let body = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(body(&unit), body(&generated));
        // The Debian package's user unit is the generator's for /usr/bin.
        let packaged = std::fs::read_to_string(deploy.join("client-deb/beebot.service")).unwrap();
        let generated = systemd_unit(Path::new("/usr/bin/beebot"), None);
        assert_eq!(body(&packaged), body(&generated));
        // The Windows installers name the registry keys and values the
        // client reads and the commands it has: the per-user setup HKCU's
        // (through `service install`), the MSI HKLM's.
        let (invite_key, invite_value) = (
            crate::home::WINDOWS_INVITE_KEY,
            crate::home::WINDOWS_INVITE_VALUE,
        );
        let nsi = std::fs::read_to_string(deploy.join("windows/beebot.nsi")).unwrap();
        for want in [
            "RequestExecutionLevel user".to_string(),
            "Target amd64-unicode".to_string(),
            "\"$PLUGINSDIR\\beebot.exe\" join --check'".to_string(),
            "\"$INSTDIR\\beebot.exe\" service install'".to_string(),
            "\"$INSTDIR\\beebot.exe\" stop'".to_string(),
            "\"$INSTDIR\\beebot.exe\" leave'".to_string(),
            format!("!define INVITE_KEY \"{invite_key}\""),
            format!("WriteRegStr HKCU \"${{INVITE_KEY}}\" \"{invite_value}\" \"$Invite\""),
            format!("DeleteRegValue HKCU \"{WINDOWS_RUN_KEY}\" \"{WINDOWS_RUN_VALUE}\""),
            format!("\"$INSTDIR\\{WINDOWS_LAUNCHER}\" \"open\""),
        ] {
            assert!(nsi.contains(&want), "beebot.nsi lacks {want}");
        }
        let wxs = std::fs::read_to_string(deploy.join("windows/beebot.wxs")).unwrap();
        for want in [
            "InstallScope=\"perMachine\"".to_string(),
            format!("Root=\"HKLM\" Key=\"{WINDOWS_RUN_KEY}\"\n                           Name=\"{WINDOWS_RUN_VALUE}\""),
            format!("Value=\"&quot;[INSTALLDIR]{WINDOWS_LAUNCHER}&quot; run\""),
            format!("Root=\"HKLM\" Key=\"{invite_key}\" Name=\"{invite_value}\""),
            "ExeCommand=\"join --check [INVITE]\"".to_string(),
            "ExeCommand=\"stop\"".to_string(),
            "ExeCommand=\"leave\"".to_string(),
            format!("Target=\"[INSTALLDIR]{WINDOWS_LAUNCHER}\" Arguments=\"open\""),
        ] {
            assert!(wxs.contains(&want), "beebot.wxs lacks {want}");
        }
        let plist = std::fs::read_to_string(deploy.join("org.beebot.client.plist")).unwrap();
        for key in [
            "<string>org.beebot.client</string>",
            "<string>/usr/local/bin/beebot</string>",
            "<key>RunAtLoad</key>",
            "<integer>10</integer>",
        ] {
            assert!(plist.contains(key), "{key}");
        }
    }

    #[test]
    fn windows_arguments_are_quoted_as_windows_splits_them() {
        for (arg, quoted) in [
            ("run", "run"),
            (
                "C:\\Program Files\\BeeBot\\beebotw.exe",
                "\"C:\\Program Files\\BeeBot\\beebotw.exe\"",
            ),
            ("D:\\bee home\\", "\"D:\\bee home\\\\\""),
            ("a\"b", "\"a\\\"b\""),
            ("", "\"\""),
            ("C:\\no\\spaces", "C:\\no\\spaces"),
        ] {
            assert_eq!(quote_windows(arg), quoted, "{arg}");
            assert_eq!(split_windows(quoted), vec![arg.to_string()], "{quoted}");
        }
        // Backslashes are plain unless a quote follows them.
        assert_eq!(
            split_windows(r#"a\\b "c d" e\\\\"f g" h\"i"#),
            vec!["a\\\\b", "c d", "e\\\\f g", "h\"i"]
        );
        assert_eq!(split_windows("  "), Vec::<String>::new());
    }

    #[test]
    fn the_windows_autostart_runs_the_launcher_for_its_home() {
        let launcher =
            Path::new("C:\\Users\\Ann Lee\\AppData\\Local\\Programs\\BeeBot\\beebotw.exe");
        let a = Path::new("D:\\bee home");
        let cmd = windows_run_command(launcher, Some(a));
        assert_eq!(
            cmd,
            "\"C:\\Users\\Ann Lee\\AppData\\Local\\Programs\\BeeBot\\beebotw.exe\" --home \"D:\\bee home\" run"
        );
        assert!(windows_runs_home(&cmd, Some(a)));
        assert!(!windows_runs_home(&cmd, Some(Path::new("D:\\other"))));
        assert!(windows_runs_home(&cmd, Some(Path::new("d:\\BEE HOME"))));
        assert!(!windows_runs_home(&cmd, None));
        let default = windows_run_command(launcher, None);
        assert!(windows_runs_home(&default, None));
        assert!(!windows_runs_home(&default, Some(a)));
        assert!(!windows_runs_home("", None));
        assert!(!windows_runs_home("beebotw.exe leave", None));
        // No launcher beside the exe: the exe itself.
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("beebot.exe");
        assert_eq!(windows_launcher(&exe), exe);
        std::fs::write(d.path().join(WINDOWS_LAUNCHER), b"").unwrap();
        assert_eq!(windows_launcher(&exe), d.path().join(WINDOWS_LAUNCHER));
    }

    #[test]
    fn windows_status_says_where_the_autostart_is_and_whether_it_runs() {
        let none = windows_status(&[], None);
        assert_eq!(
            none,
            "autostart: not registered (`beebot service install`)\nrunner: not running"
        );
        let both = windows_status(
            &[
                ("HKCU", "\"C:\\b\\beebotw.exe\" run".into()),
                ("HKLM", "x run".into()),
            ],
            Some(4242),
        );
        assert!(both.contains("registered for this user (HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run\\BeeBot): \"C:\\b\\beebotw.exe\" run"), "{both}");
        assert!(
            both.contains("registered for every user of this machine (HKLM\\"),
            "{both}"
        );
        assert!(both.ends_with("\nrunner: running (pid 4242)"), "{both}");
    }

    /// The autostart really written to and removed from this user's
    /// registry (under Wine in CI).
    #[cfg(windows)]
    #[test]
    fn the_windows_autostart_is_registered_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("bee home");
        let exe = std::env::current_exe().unwrap();
        let notes = install(&exe, Some(&home), d.path(), false).unwrap();
        assert!(
            notes[0].starts_with("autostart registered for this user"),
            "{notes:?}"
        );
        assert!(installed_for(Some(&home)).unwrap());
        assert!(!installed_for(Some(&d.path().join("other"))).unwrap());
        let said = status(&home).unwrap();
        assert!(
            said.contains("registered for this user") && said.contains("runner: not running"),
            "{said}"
        );
        let notes = uninstall().unwrap();
        assert!(notes[0].starts_with("removed the autostart"), "{notes:?}");
        assert!(!installed_for(Some(&home)).unwrap());
        assert_eq!(
            uninstall().unwrap(),
            vec!["no autostart was registered for this user".to_string()]
        );
    }
}
