//! The employee's first hour with `beebot` (issue 17): joining checks the
//! project key and leaves nothing behind when it fails; leaving stops the
//! runner, uninstalls its service, tells the server and removes every file;
//! settings reach a running client; status, pause and resume speak plainly.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use beebot_shared::invite::Invite;
use beebot_tests::*;

/// Every file under `dir` (none when it does not exist).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// `hosts list`'s state column for host `id`.
fn host_state(g: &Grid, id: u64) -> String {
    let out = stdout(&g.admin_ok(&["hosts", "list"]));
    out.lines()
        .find(|l| l.split('\t').next() == Some(&id.to_string()))
        .and_then(|l| l.split('\t').nth(2))
        .unwrap_or_else(|| panic!("host {id} not listed: {out}"))
        .to_string()
}

/// A `beebot join` that must fail with `expect` in its error and leave the
/// home without a single file.
fn join_fails_leaving_nothing(g: &Grid, name: &str, code: &str, expect: &str) {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(
        !o.status.success(),
        "join {name} should fail: {}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(err.contains(expect), "expected `{expect}` in: {err}");
    let left = files_under(&g.home(name));
    assert!(left.is_empty(), "a failed join left {left:?}");
}

/// Issue 17, item 2 and 12: a code whose project key was replaced by
/// another valid key (re-encoded, checksum correct) used to enrol; now the
/// server proves the invite's key during enrolment and the client refuses
/// it before anything is written or the token spent. No failed join (wrong
/// key, damaged code, server unreachable, invite used up) leaves a file.
#[test]
fn join_refuses_a_code_of_another_project_and_a_failed_join_leaves_nothing() {
    let g = Grid::start(171, 1);
    let code = g.invite(1);
    let mut forged = Invite::from_code(&code).expect("invite");
    let addr = forged.addr.clone();
    forged.project_key = beebot_shared::sign::generate_key()
        .verifying_key()
        .to_bytes();
    let forged = forged.to_code();
    assert_ne!(forged, code);
    join_fails_leaving_nothing(
        &g,
        "k",
        &forged,
        &format!("this invite code does not belong to the server at {addr}"),
    );

    // Damaged: one character changed.
    let mut damaged: Vec<char> = code.chars().collect();
    let i = damaged.len() / 2;
    damaged[i] = if damaged[i] == 'A' { 'B' } else { 'A' };
    let damaged: String = damaged.into_iter().collect();
    join_fails_leaving_nothing(&g, "k", &damaged, "damaged");

    // Unreachable: the right code, pointed at a port nobody serves.
    let mut away = Invite::from_code(&code).expect("invite");
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free port")
        .port();
    away.addr = format!("127.0.0.1:{port}");
    let started = Instant::now();
    join_fails_leaving_nothing(&g, "k", &away.to_code(), "cannot reach the server");
    eprintln!("unreachable server reported after {:?}", started.elapsed());

    // The refused code spent nothing: the real one still joins (one use).
    let id = g.join("k", &code);
    for f in ["host.key", "enrolment.json"] {
        assert!(g.home("k").join(f).exists(), "{f} after a join");
    }
    // Used up now: refused by the server, nothing written.
    join_fails_leaving_nothing(&g, "k2", &code, "enrolment refused");
    assert_eq!(host_state(&g, id), "active");
}

/// Issue 17, item 7 (and item 10's `service install --window`): `beebot
/// leave` while `beebot run` ran left it running until it died as
/// "revoked", left the service installed, the host listed as revoked and
/// `benchmark.json` behind (a rejoin never benchmarked). Now leave stops
/// the runner through its status page's API, uninstalls this home's service,
/// tells the server (the host is listed as `left`), and removes every file
/// it made, saying so; a rejoin benchmarks again.
#[test]
fn leave_stops_the_runner_and_its_service_tells_the_server_and_removes_every_file() {
    let g = Grid::start(172, 4);
    let id = g.join("l", &g.invite(2));
    let xdg = g.dir.path().join("xdg");
    let unit = xdg.join("systemd/user/beebot.service");
    service_install_says_how_the_window_changes(&g, &xdg, &unit);
    let (runner, round, bench) = a_runner_holding_units(&g);
    let out = leave_stops_the_runner_and_removes_its_service(&g, &xdg, &unit, runner);
    leave_tells_the_server_and_removes_every_file(&g, id, &round, &out);

    // Rejoined, nothing of the old membership is left: no benchmark result,
    // so the first start benchmarks again (`beebot_run_benchmarks_on_first_start`).
    let id2 = g.join("l", &g.invite(1));
    assert_ne!(id2, id);
    assert!(!bench.exists());
    assert_eq!(host_state(&g, id2), "active");
}

/// `service install --window` (with `XDG_CONFIG_HOME` at `xdg`) says the
/// window it had and the one it now has, and writes the `unit` file.
fn service_install_says_how_the_window_changes(g: &Grid, xdg: &Path, unit: &Path) {
    let o = run(
        g.client_cmd(
            "l",
            &["service", "install", "--no-start", "--window", "always"],
        )
        .env("XDG_CONFIG_HOME", xdg),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("window: always (default) → always"),
        "{}",
        stdout(&o)
    );
    let o = run(
        g.client_cmd(
            "l",
            &[
                "service",
                "install",
                "--no-start",
                "--window",
                "19:00-07:00",
            ],
        )
        .env("XDG_CONFIG_HOME", xdg),
        Duration::from_secs(30),
    );
    assert!(
        stdout(&o).contains("window: always → 19:00-07:00"),
        "{}",
        stdout(&o)
    );
    assert!(unit.exists());
}

/// The runner crawls always whatever the file says (command line), and
/// benchmarks on its first start; it holds units of a round. Returns the
/// runner, the round and the path of its benchmark result.
fn a_runner_holding_units(g: &Grid) -> (Child, String, PathBuf) {
    let log = g.dir.path().join("runner-l.stderr");
    let runner = g.spawn_run("l", &["--window", "always"], &log);
    let bench = g.home("l").join("benchmark.json");
    wait_for(
        "the first-start benchmark",
        Duration::from_secs(120),
        || bench.exists(),
    );
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "40"]));
    wait_for("units held", Duration::from_secs(60), || {
        g.status_json("l")["units_held"]
            .as_array()
            .is_some_and(|u| !u.is_empty())
    });
    (runner, round, bench)
}

/// `leave` asks the runner to stop, which exits cleanly, and removes the
/// service's `unit`. Returns what `leave` printed.
fn leave_stops_the_runner_and_removes_its_service(
    g: &Grid,
    xdg: &Path,
    unit: &Path,
    mut runner: Child,
) -> String {
    let started = Instant::now();
    let o = run(
        g.client_cmd("l", &["leave"]).env("XDG_CONFIG_HOME", xdg),
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert!(o.status.success(), "leave: {}", stderr(&o));
    let out = stdout(&o);
    eprintln!("leave took {took:?}:\n{out}");
    // The runner was asked to stop and has exited, cleanly.
    assert!(
        out.contains(&format!("stopped the running client (pid {})", runner.id())),
        "{out}"
    );
    let status = runner.try_wait().expect("wait");
    assert!(status.is_some_and(|s| s.success()), "runner: {status:?}");
    // Its service is gone.
    assert!(out.contains("service: removed"), "{out}");
    assert!(!unit.exists());
    out
}

/// After `leave` (which printed `out`), host `id` is listed as left, its
/// units of `round` are back in the queue, and every file the client made
/// is gone, named in the output.
fn leave_tells_the_server_and_removes_every_file(g: &Grid, id: u64, round: &str, out: &str) {
    // The server was told: listed as left, its units back in the queue.
    assert!(out.contains("told the server"), "{out}");
    assert_eq!(host_state(g, id), "left");
    let running = g.round_json(round)["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["state"] == "Running")
        .count();
    assert_eq!(running, 0);
    // Every file the client made is gone, and the output names them.
    for what in [
        "host key",
        "enrolment",
        "spool",
        "benchmark result",
        "settings",
        "run lock",
    ] {
        assert!(out.contains(&format!("removed {what}")), "{what}: {out}");
    }
    let left = files_under(&g.home("l"));
    assert!(left.is_empty(), "leave left {left:?}");
    let o = g.client("l", &["status"]);
    assert!(stdout(&o).contains("not joined"), "{}", stdout(&o));
}

/// Issue 17, items 7 and 12: a revoked host's `beebot status` said nothing
/// of it, and leaving offline used to remove nothing. Now the runner's
/// refusal is said in the user's terms and remembered, `status` says the
/// project revoked the host and what to do; `leave` then cleans up; and a
/// host leaving while the server is down cleans up and says the server was
/// not told.
#[test]
fn a_revoked_host_is_told_so_and_leaving_offline_still_cleans_up() {
    let mut g = Grid::start(173, 1);
    let code = g.invite(2);
    let revoked = g.join("r", &code);
    g.join("o", &code);
    g.admin_ok(&["hosts", "revoke", &revoked.to_string()]);
    let mut args = vec!["run", "--once"];
    let flags = g.crawl_flags();
    args.extend(flags.iter().map(String::as_str));
    let o = g.client("r", &args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("this host was revoked by the project") && err.contains("new invite"),
        "{err}"
    );
    let text = stdout(&g.client("r", &["status"]));
    assert!(
        text.contains("REVOKED   this host was revoked by the project")
            && text.contains("ask the admin for a new invite code"),
        "{text}"
    );
    assert!(g.status_json("r")["revoked"]["message"].is_string());
    let o = g.client("r", &["leave"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("the server had revoked this host already"),
        "{}",
        stdout(&o)
    );
    assert!(files_under(&g.home("r")).is_empty());
    assert_eq!(host_state(&g, revoked), "revoked", "revoked stays revoked");

    // Offline: the server is down.
    g.kill_server();
    let started = Instant::now();
    let o = g.client("o", &["leave"]);
    eprintln!("offline leave took {:?}", started.elapsed());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("the server was NOT told"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("removed host key"), "{}", stdout(&o));
    assert!(files_under(&g.home("o")).is_empty());
}

/// Issue 17, items 10 and 12: settings changed with `config set` did not
/// reach a running client; `config set window mon-fri 19:00-07:00` needed
/// quotes; times printed as raw seconds; `resume` when not paused said
/// nothing useful; `config show` quoted values in ragged columns. Run with
/// a politeness delay (60 ms): the running client takes slots, window and
/// bandwidth at once and says which setting needs a restart.
#[test]
fn settings_reach_the_running_client_and_times_read_as_words() {
    let g = Grid::start(174, 10);
    g.join("s", &g.invite(1));
    g.import_sites();
    let (round, log, runner) = a_runner_on_one_slot(&g);
    slots_reach_the_running_client(&g);
    let window = a_closed_window_typed_without_quotes_holds_the_scans(&g);
    bandwidth_applies_at_once_and_low_priority_needs_a_restart(&g);
    pause_and_resume_in_words(&g);
    config_show_has_values_as_typed_in_aligned_columns(&g, &window);
    the_open_window_lets_the_round_complete(&g, &round, &log, runner);
}

/// How many scans host `s`'s running client has going.
fn scans(g: &Grid) -> usize {
    g.status_json("s")["scans"].as_array().map_or(0, Vec::len)
}

/// `slots = 1` set while no client runs, then a round (60 ms delay) and a
/// runner that holds to one scan. Returns the round, the runner's log and
/// the runner.
fn a_runner_on_one_slot(g: &Grid) -> (String, PathBuf, Child) {
    let o = g.client("s", &["config", "set", "slots", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("no client is running here"),
        "{}",
        stdout(&o)
    );
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "60"]));
    let log = g.dir.path().join("runner-s.stderr");
    let runner = g.spawn_run("s", &["--once"], &log);
    wait_for("one scan", Duration::from_secs(60), || scans(g) == 1);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(scans(g), 1, "slots = 1 holds");
    (round, log, runner)
}

/// Slots: the running client scans three sites at once.
fn slots_reach_the_running_client(g: &Grid) {
    let o = g.client("s", &["config", "set", "slots", "3"]);
    assert!(
        stdout(&o).contains("the running client now uses slots = 3 (was 1)"),
        "{}",
        stdout(&o)
    );
    wait_for("three scans at once", Duration::from_secs(60), || {
        scans(g) == 3
    });
}

/// The local time `minutes` from now, as `HH:MM`.
fn local_in(minutes: u32) -> String {
    let o = std::process::Command::new("date")
        .args(["-d", &format!("+{minutes} min"), "+%H:%M"])
        .output()
        .expect("date");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A closed window, typed without quotes: the scans are held, and status
/// says when it opens in hours and minutes; no request is made. Returns the
/// window as typed (`HH:MM-HH:MM`).
fn a_closed_window_typed_without_quotes_holds_the_scans(g: &Grid) -> String {
    let (opens, shut) = (local_in(150), local_in(151));
    let window = format!("{opens}-{shut}");
    let o = g.client("s", &["config", "set", "window", "mon-sun", &window]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(&format!("window = mon-sun {window}"))
            && text.contains(&format!("now uses window = mon-sun {window}")),
        "{text}"
    );
    let held = |g: &Grid| {
        let t = stdout(&g.client("s", &["status"]));
        t.contains("state     outside the window, opens in 2h 2")
            .then_some(t)
    };
    wait_for("outside the window", Duration::from_secs(30), || {
        held(g).is_some()
    });
    let text = held(g).expect("status");
    // The opening time, with its day when that is not today.
    assert!(
        text.contains(&format!("(at {opens})")) || text.contains(&format!(" {opens}) (pid")),
        "opens at {opens}: {text}"
    );
    assert!(text.lines().any(|l| l.starts_with("up        ")), "{text}");
    assert!(!text.contains("s more"), "no raw seconds: {text}");
    std::thread::sleep(Duration::from_millis(600));
    let before = g.web_server.requests();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        g.web_server.requests(),
        before,
        "no request outside the window"
    );
    window
}

/// Bandwidth applies at once; low_priority needs a restart, and says so.
fn bandwidth_applies_at_once_and_low_priority_needs_a_restart(g: &Grid) {
    let o = g.client("s", &["config", "set", "bandwidth_kbps", "5000"]);
    assert!(
        stdout(&o).contains("now uses bandwidth_kbps = 5000 (was 0)"),
        "{}",
        stdout(&o)
    );
    let o = g.client("s", &["config", "set", "low_priority", "false"]);
    assert!(stdout(&o).contains("needs a restart"), "{}", stdout(&o));
}

/// Pause and resume in words; `resume` when not paused says so.
fn pause_and_resume_in_words(g: &Grid) {
    let o = g.client("s", &["pause", "--for", "90m"]);
    assert!(
        stdout(&o).starts_with("paused for 1h 30m, until "),
        "{}",
        stdout(&o)
    );
    wait_for("paused for 1h 29m more", Duration::from_secs(10), || {
        stdout(&g.client("s", &["status"])).contains("state     paused for 1h 29m more (until ")
    });
    assert_eq!(stdout(&g.client("s", &["resume"])).trim(), "resumed");
    let o = g.client("s", &["resume"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).trim(), "not paused");
}

/// `config show`: values as typed (the `window` set), columns aligned, with
/// their origin.
fn config_show_has_values_as_typed_in_aligned_columns(g: &Grid, window: &str) {
    let show = stdout(&g.client("s", &["config", "show"]));
    let line = |k: &str| {
        show.lines()
            .find(|l| l.starts_with(&format!("{k} ")))
            .unwrap_or_else(|| panic!("{k} in {show}"))
            .to_string()
    };
    let w = line("window");
    assert!(
        w.contains(&format!(" mon-sun {window}  ")) && w.contains("(file)"),
        "{show}"
    );
    assert!(
        !show.contains('"') || line("proxy").contains("\"\""),
        "{show}"
    );
    let origin_col: Vec<Option<usize>> = show.lines().skip(1).map(|l| l.find(" (")).collect();
    assert!(
        origin_col
            .windows(2)
            .all(|p| p[0] == p[1] && p[0].is_some()),
        "{show}"
    );
}

/// The window open again: the round completes with three slots, the runner
/// exits cleanly and its `log` says the settings it applied.
fn the_open_window_lets_the_round_complete(g: &Grid, round: &str, log: &Path, mut runner: Child) {
    let o = g.client("s", &["config", "set", "window", "always"]);
    assert!(
        stdout(&o).contains("now uses window = always"),
        "{}",
        stdout(&o)
    );
    g.wait_round(round, "120s");
    let status = runner.wait().expect("runner");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert_same_rows(&g.export_rows(round), &g.truth_rows());
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(text.contains("settings applied"), "{text}");
    assert!(text.contains("bandwidth_kbps=5000"), "{text}");
}
