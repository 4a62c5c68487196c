//! The Windows client as an organisation gets it: the per-user setup and
//! the per-machine MSI that `deploy/windows/build.sh` makes, installed
//! silently under Wine with an invite code, against a Linux server on
//! loopback; the setup's client takes part in a polite round beside a Linux
//! client, its results validate, and the export equals the truth.
//!
//! `deploy/windows/wine-e2e.sh` runs these (they are ignored otherwise:
//! they need the Windows build, Wine and a display). It names Wine
//! (`BEEBOT_WINE`), the build's directory (`BEEBOT_WINDOWS_DIR`) and a fresh
//! prefix with the harness's Wine 8 stand-in (`WINEPREFIX`), and runs them
//! under Xvfb. Each test adds what it checked to `BEEBOT_E2E_SUMMARY`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use std::time::Duration;

use beebot_tests::*;

/// Sites in the polite round.
const SITES: usize = 6;
/// The round's politeness delay.
const DELAY_MS: &str = "200";
/// Longest a Wine command may take (the first in a prefix starts Wine).
const WINE_TIMEOUT: Duration = Duration::from_secs(180);

/// Wine, its prefix, and the Windows build.
struct Wine {
    wine: PathBuf,
    prefix: PathBuf,
    build: PathBuf,
}

impl Wine {
    fn from_env() -> Wine {
        let var = |k: &str| {
            PathBuf::from(std::env::var_os(k).unwrap_or_else(|| {
                panic!("{k} is not set: run these through deploy/windows/wine-e2e.sh")
            }))
        };
        let w = Wine {
            wine: var("BEEBOT_WINE"),
            prefix: var("WINEPREFIX"),
            build: var("BEEBOT_WINDOWS_DIR"),
        };
        assert!(w.setup().is_file(), "no {}", w.setup().display());
        assert!(w.msi().is_file(), "no {}", w.msi().display());
        w
    }

    fn setup(&self) -> PathBuf {
        self.build
            .join(format!("beebot-setup-{}.exe", env!("CARGO_PKG_VERSION")))
    }

    fn msi(&self) -> PathBuf {
        self.build
            .join(format!("beebot-{}.msi", env!("CARGO_PKG_VERSION")))
    }

    /// A Windows program (a Unix path or a Windows one) under Wine.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut c = Command::new(&self.wine);
        c.arg(program)
            .args(args)
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .env_remove("BEEBOT_HOME");
        c
    }

    fn run(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
        run(&mut self.cmd(program, args), WINE_TIMEOUT)
    }

    /// This user's profile in the prefix (`C:\users\NAME`).
    fn profile(&self) -> PathBuf {
        let users = self.prefix.join("drive_c/users");
        std::fs::read_dir(&users)
            .expect("users")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n != "Public") && p.join("AppData").is_dir())
            .unwrap_or_else(|| panic!("no user profile in {}", users.display()))
    }

    fn local_app_data(&self) -> PathBuf {
        self.profile().join("AppData/Local")
    }

    /// Where the per-user setup installs.
    fn user_program(&self) -> PathBuf {
        self.local_app_data().join("Programs/BeeBot")
    }

    /// The client's home of this user (config and data).
    fn home(&self) -> PathBuf {
        self.local_app_data().join("BeeBot/beebot")
    }

    /// A registry string (`reg query KEY /v NAME`), `None` when missing.
    fn reg(&self, key: &str, name: &str) -> Option<String> {
        let o = self.run("reg", &["query", key, "/v", name]);
        if !o.status.success() {
            return None;
        }
        stdout(&o).lines().find_map(|l| {
            let mut parts = l.trim().splitn(3, "    ");
            match (parts.next(), parts.next(), parts.next()) {
                (Some(n), Some("REG_SZ"), value) if n == name => {
                    Some(value.unwrap_or("").trim().to_string())
                }
                _ => None,
            }
        })
    }

    /// `beebot.exe` of an install with `args`, asserting success.
    fn client_ok(&self, exe: &Path, args: &[&str]) -> String {
        let o = self.run(exe, args);
        assert!(
            o.status.success(),
            "beebot {args:?}: {}\n{}",
            stdout(&o),
            stderr(&o)
        );
        stdout(&o)
    }

    /// The runner's pid, from its pid file.
    /// Start from no home: what an earlier test in the prefix left goes.
    fn forget_home(&self) {
        let _ = std::fs::remove_dir_all(self.local_app_data().join("BeeBot"));
    }

    fn runner_pid(&self) -> Option<String> {
        std::fs::read_to_string(self.home().join("data/run.pid"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }
}

/// Run `cmd` to its end with its output in files, not pipes: a client an
/// installer starts keeps its parent's output open for as long as it runs
/// (Wine's processes inherit the Unix descriptors), so a pipe would never
/// end. Its exit status, and its output.
fn run_detached(
    cmd: &mut Command,
    dir: &Path,
    timeout: Duration,
) -> (std::process::ExitStatus, String) {
    let path = dir.join(format!("wine-{}.out", std::process::id()));
    let out = std::fs::File::create(&path).expect("output file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("output file"))
        .stderr(out)
        .spawn()
        .expect("spawn");
    let status = wait_or_kill(&mut child, timeout);
    let said = std::fs::read_to_string(&path).unwrap_or_default();
    match status {
        Some(status) => (status, said),
        None => panic!("timed out after {timeout:?}: {cmd:?}\n{said}"),
    }
}

/// Add a line to the run's summary (the harness prints it last).
fn summary(line: &str) {
    eprintln!("checked: {line}");
    if let Some(path) = std::env::var_os("BEEBOT_E2E_SUMMARY") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("summary file");
        writeln!(f, "{line}").expect("summary");
    }
}

/// `code` with one character of its body changed: damaged, not another code.
fn damaged(code: &str) -> String {
    let mut chars: Vec<char> = code.chars().collect();
    let i = chars.len() / 2;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

const RUN_KEY: &str = r"HKCU\Software\Microsoft\Windows\CurrentVersion\Run";
const MACHINE_RUN_KEY: &str = r"HKLM\Software\Microsoft\Windows\CurrentVersion\Run";

#[test]
#[ignore = "needs the Windows build, Wine and a display: deploy/windows/wine-e2e.sh"]
fn a_windows_desktop_installed_by_its_setup_takes_part_in_a_polite_round() {
    let w = Wine::from_env();
    let g = Grid::start(41, SITES);
    g.import_sites();
    let truth = g.truth_rows();
    let code = g.invite(4);
    let program = w.user_program();
    w.forget_home();

    // A damaged code stops the setup before anything is written.
    let (status, said) = run_detached(
        w.cmd(w.setup(), &["/S", &format!("/INVITE={}", damaged(&code))])
            .env("BEEBOT_ALLOW_PRIVATE", "true"),
        g.dir.path(),
        WINE_TIMEOUT,
    );
    assert_eq!(status.code(), Some(2), "damaged invite: {said}");
    assert!(!program.exists(), "installed with a damaged code");
    assert_eq!(w.reg(RUN_KEY, "BeeBot"), None);
    summary("per-user setup: a damaged invite code stops it with exit code 2, nothing written");

    // Installed silently with the code: the program, its Start-menu entry,
    // its autostart and the code where only this user can write; its
    // client started and joined by itself.
    let resolve = format!("*.synth.test={}", g.web_server.addr());
    let install = |args: &[&str]| {
        let (status, said) = run_detached(
            w.cmd(w.setup(), args)
                .env("BEEBOT_ALLOW_PRIVATE", "true")
                .env("BEEBOT_RESOLVE", &resolve)
                .env("RUST_LOG", "info"),
            g.dir.path(),
            WINE_TIMEOUT,
        );
        assert!(status.success(), "setup {args:?}: {said}");
    };
    install(&["/S", &format!("/INVITE={code}")]);
    for f in ["beebot.exe", "beebotw.exe", "README.txt", "uninstall.exe"] {
        assert!(program.join(f).is_file(), "{f} not installed");
    }
    let start_menu = w
        .profile()
        .join("AppData/Roaming/Microsoft/Windows/Start Menu/Programs/BeeBot.lnk");
    assert!(start_menu.is_file(), "no {}", start_menu.display());
    let autostart = w.reg(RUN_KEY, "BeeBot").expect("autostart");
    let words = beebot_client::service::split_windows(&autostart);
    assert!(
        words.len() == 2
            && words[0].ends_with(r"\Programs\BeeBot\beebotw.exe")
            && words[1] == "run",
        "{autostart}"
    );
    assert_eq!(
        w.reg(r"HKCU\Software\BeeBot", "Invite").as_deref(),
        Some(code.as_str())
    );
    let enrolment = w.home().join("config/enrolment.json");
    wait_for(
        "the Windows client to join",
        Duration::from_secs(90),
        || enrolment.is_file(),
    );
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&enrolment).expect("enrolment"))
            .expect("enrolment json");
    let windows_host = e["host_id"].as_u64().expect("host id");
    let exe = program.join("beebot.exe");
    let said = w.client_ok(&exe, &["service", "status"]);
    assert!(
        said.contains("autostart: registered for this user")
            && said.contains("runner: running (pid"),
        "{said}"
    );
    summary("per-user setup /S /INVITE=: program, Start-menu entry, HKCU Run autostart (beebotw.exe run), invite in HKCU; client started and joined by itself; `service status` says so");

    // A Linux client beside it, and a polite round every result of which
    // another host's scan checks.
    g.join("linux", &code);
    let log = g.dir.path().join("client-linux.log");
    let mut linux = g.spawn_run("linux", &[], &log);
    let round = last_line(&g.admin_ok(&[
        "round",
        "start",
        "--validate",
        "all",
        "--delay-ms",
        DELAY_MS,
    ]));

    // The page's API pauses and resumes it (`beebot pause` and `resume`
    // find the runner by its pid file and go through its page).
    let said = w.client_ok(&exe, &["pause"]);
    assert!(said.contains("paused"), "{said}");
    let status: serde_json::Value =
        serde_json::from_str(&w.client_ok(&exe, &["status", "--json"])).expect("status json");
    wait_for(
        "the Windows client to say it is paused",
        Duration::from_secs(30),
        || {
            let s: serde_json::Value =
                serde_json::from_str(&w.client_ok(&exe, &["status", "--json"])).expect("status");
            s["state"] == "paused"
        },
    );
    let said = w.client_ok(&exe, &["resume"]);
    assert!(said.contains("resumed"), "{said} (status was {status})");
    wait_for(
        "the Windows client to say it is no longer paused",
        Duration::from_secs(30),
        || {
            let s: serde_json::Value =
                serde_json::from_str(&w.client_ok(&exe, &["status", "--json"])).expect("status");
            s["state"] != "paused"
        },
    );
    summary("the local page's API paused and resumed the installed client");

    g.wait_round(&round, "600s");
    assert_same_rows(&g.export_rows(&round), &truth);
    let d = g.round_json(&round);
    let counts = &d["counts"];
    assert_eq!(counts["invalid"], 0, "{counts:#}");
    assert_eq!(counts["valid"], SITES as u64, "{counts:#}");
    let mut windows_results = 0;
    for s in d["sites"].as_array().expect("sites") {
        for r in s["results"].as_array().expect("results") {
            assert_eq!(r["verdict"], "valid", "{s:#}");
            if r["hosts"]
                .as_array()
                .expect("hosts")
                .iter()
                .any(|h| h.as_u64() == Some(windows_host))
            {
                windows_results += 1;
            }
        }
    }
    assert!(
        windows_results > 0,
        "no result of the Windows host {windows_host}: {d:#}"
    );
    summary(&format!(
        "polite round (delay {DELAY_MS} ms, every result checked) beside a Linux client: {windows_results} results of the Windows host valid, the export equals the truth of {SITES} sites"
    ));

    // Installed again over the running client: it is stopped, replaced and
    // started again.
    let before = w.runner_pid().expect("runner pid");
    install(&["/S"]);
    wait_for("the client to start again", Duration::from_secs(60), || {
        w.runner_pid().is_some_and(|p| p != before)
    });
    summary("installed again over the running client: it was stopped, the setup ran through and a new runner started");

    // Uninstalled while it scans: it leaves (its unit goes back to the
    // server) and the round ends with the Linux client alone.
    let round2 = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "400"]));
    wait_for(
        "the Windows client to scan",
        Duration::from_secs(120),
        || {
            let s: serde_json::Value =
                serde_json::from_str(&w.client_ok(&exe, &["status", "--json"])).expect("status");
            s["scans"].as_array().is_some_and(|a| !a.is_empty())
        },
    );
    let uninstall = program.join("uninstall.exe");
    let (status, said) = run_detached(&mut w.cmd(&uninstall, &["/S"]), g.dir.path(), WINE_TIMEOUT);
    assert!(status.success(), "uninstall: {said}");
    // The uninstaller runs a copy of itself from the temporary folder.
    wait_for(
        "the uninstaller to finish",
        Duration::from_secs(120),
        || !program.exists(),
    );
    assert!(!start_menu.exists(), "Start-menu entry left");
    assert_eq!(w.reg(RUN_KEY, "BeeBot"), None, "autostart left");
    assert_eq!(
        w.reg(r"HKCU\Software\BeeBot", "Invite"),
        None,
        "invite left"
    );
    for d in ["config/enrolment.json", "config/host.key", "data/spool"] {
        assert!(!w.home().join(d).exists(), "{d} left");
    }
    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    assert!(
        hosts
            .lines()
            .any(|l| l.starts_with(&format!("{windows_host}\t")) && l.contains("\tleft\t")),
        "{hosts}"
    );
    // Its units went back at once, not at their deadlines.
    let d = g.round_json(&round2);
    let held: Vec<&serde_json::Value> = d["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .flat_map(|s| s["running"].as_array().into_iter().flatten())
        .filter(|c| c["host"].as_u64() == Some(windows_host))
        .collect();
    assert!(held.is_empty(), "the Windows host still holds {held:?}");
    g.wait_round(&round2, "600s");
    assert_same_rows(&g.export_rows(&round2), &truth);
    let _ = linux.kill();
    let _ = linux.wait();
    summary("uninstalled while it scanned: left the project (its unit went back; the round ended with the Linux client, export equal to the truth), program, Start-menu entry, autostart, invite and data removed");
}

#[test]
#[ignore = "needs the Windows build, Wine and a display: deploy/windows/wine-e2e.sh"]
fn an_it_departments_msi_deploys_for_every_user_and_uninstalls_cleanly() {
    let w = Wine::from_env();
    let g = Grid::start(43, 1);
    let code = g.invite(2);
    let program = w.prefix.join("drive_c/Program Files/BeeBot");
    w.forget_home();
    let msi = w.msi();
    let msi = msi.to_str().expect("path");

    // A damaged code fails the installation and rolls it back.
    let (status, said) = run_detached(
        &mut w.cmd(
            "msiexec",
            &["/i", msi, &format!("INVITE={}", damaged(&code)), "/qn"],
        ),
        g.dir.path(),
        WINE_TIMEOUT,
    );
    // Windows answers 1603 (a fatal error); Wine's msiexec another code,
    // and passes the check's own words through (Windows keeps them).
    assert!(!status.success(), "installed with a damaged code: {said}");
    assert!(said.contains("damaged"), "the check's words: {said}");
    assert!(
        !program.join("beebot.exe").exists(),
        "installed with a damaged code"
    );
    assert_eq!(w.reg(MACHINE_RUN_KEY, "BeeBot"), None);
    summary("MSI: a damaged INVITE fails the installation and rolls it back");

    let (status, said) = run_detached(
        &mut w.cmd("msiexec", &["/i", msi, &format!("INVITE={code}"), "/qn"]),
        g.dir.path(),
        WINE_TIMEOUT,
    );
    assert!(status.success(), "msiexec /i: {said}");
    for f in ["beebot.exe", "beebotw.exe", "README.txt"] {
        assert!(program.join(f).is_file(), "{f} not installed");
    }
    let autostart = w.reg(MACHINE_RUN_KEY, "BeeBot").expect("machine autostart");
    assert_eq!(
        beebot_client::service::split_windows(&autostart),
        [r"C:\Program Files\BeeBot\beebotw.exe", "run"]
    );
    assert_eq!(
        w.reg(r"HKLM\Software\BeeBot", "Invite").as_deref(),
        Some(code.as_str())
    );
    // Every user's menu on Windows (ProgramData); Wine 8 makes it in the
    // installing user's.
    let menus = [
        w.prefix
            .join("drive_c/ProgramData/Microsoft/Windows/Start Menu/Programs/BeeBot.lnk"),
        w.profile()
            .join("AppData/Roaming/Microsoft/Windows/Start Menu/Programs/BeeBot.lnk"),
    ];
    assert!(
        menus.iter().any(|m| m.is_file()),
        "no Start-menu entry: {menus:?}"
    );

    // A user logs on: the autostart's command runs the client, which joins
    // with the machine's code by itself.
    let mut logon: Child = w
        .cmd(r"C:\Program Files\BeeBot\beebotw.exe", &["run"])
        .env("BEEBOT_ALLOW_PRIVATE", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("autostart");
    let enrolment = w.home().join("config/enrolment.json");
    wait_for(
        "the client to join with the machine's code",
        Duration::from_secs(90),
        || enrolment.is_file(),
    );
    let exe = program.join("beebot.exe");
    let said = w.client_ok(&exe, &["service", "status"]);
    assert!(
        said.contains("registered for every user of this machine")
            && said.contains("runner: running"),
        "{said}"
    );
    // Asked to close by another program (`taskkill` without `/F`, as the
    // Restart Manager does), the client stops through its window.
    let pid = w.runner_pid().expect("runner pid");
    let o = w.run("taskkill", &["/PID", &pid]);
    assert!(o.status.success(), "taskkill: {}", stderr(&o));
    wait_for(
        "the client to stop when asked to close",
        Duration::from_secs(30),
        || logon.try_wait().ok().flatten().is_some(),
    );
    assert_eq!(w.runner_pid(), None, "its pid file stays");
    summary("MSI /qn INVITE=: Program Files, HKLM Run autostart, invite in HKLM, Start-menu entry for every user; the logon's client joined by itself, and stopped itself when taskkill (no /F) asked it to close");

    let (status, said) = run_detached(
        &mut w.cmd("msiexec", &["/x", msi, "/qn"]),
        g.dir.path(),
        WINE_TIMEOUT,
    );
    assert!(status.success(), "msiexec /x: {said}");
    let _ = logon.wait();
    assert!(!program.join("beebot.exe").exists(), "program left");
    assert!(menus.iter().all(|m| !m.exists()), "Start-menu entry left");
    assert_eq!(w.reg(MACHINE_RUN_KEY, "BeeBot"), None, "autostart left");
    assert_eq!(
        w.reg(r"HKLM\Software\BeeBot", "Invite"),
        None,
        "invite left"
    );
    assert!(
        !enrolment.exists(),
        "the uninstalling user's enrolment left"
    );
    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    assert!(hosts.contains("\tleft\t"), "{hosts}");
    summary("MSI /x: the uninstalling user's client left the project; program, autostart, invite and Start-menu entry removed");
}
