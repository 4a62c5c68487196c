//! The desktop client as an employee lives with it: pause and resume a real
//! running client mid-scan (no page lost, none fetched twice), status in both
//! forms, settings from the command line, leaving the project, and the
//! generated service file.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use beebot_tests::*;

fn join(g: &Grid, name: &str) {
    let code = last_line(&g.admin_ok(&["invite"]));
    let o = g.client(name, &["join", &code, "--name", name]);
    assert!(o.status.success(), "join: {}", stderr(&o));
}

#[test]
fn pause_and_resume_a_running_client_mid_scan() {
    let g = Grid::start(41, 3);
    join(&g, "a");
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "40"]));
    let mut child = spawn_on_one_slot(&g);
    pause_mid_scan_holds_and_checkpoints_the_scan(&g);

    let o = g.client("a", &["resume"]);
    assert!(o.status.success(), "resume: {}", stderr(&o));
    g.wait_round(&round, "120s");
    let status = child.wait().expect("client");
    assert!(status.success());

    nothing_is_lost_and_nothing_fetched_twice(&g, &round);
    not_running_status_comes_from_the_spool(&g);
}

/// A scan that ended leaves the client's status before its result reaches
/// the server (not a second later, after the upload): whenever the server
/// shows a site done, the status lists no scan of it. At a politeness
/// delay, and at none with slow answers.
#[test]
fn a_finished_scan_leaves_the_status_before_the_server_has_it() {
    for (politeness, answer_ms) in [("150", 0), ("0", 150)] {
        let g = Grid::of_sites(47, 3, 15, answer_ms);
        join(&g, "a");
        g.import_sites();
        let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", politeness]));
        let mut child = spawn_on_one_slot(&g);
        let mut checked = std::collections::BTreeSet::new();
        wait_for("every site done", Duration::from_secs(120), || {
            let d = g.round_json(&round);
            let done: Vec<String> = d["jobs"]
                .as_array()
                .expect("jobs")
                .iter()
                .filter(|j| j["state"] == "Done")
                .filter_map(|j| j["site"].as_str().map(str::to_string))
                .collect();
            let fresh: Vec<&String> = done.iter().filter(|s| !checked.contains(*s)).collect();
            if !fresh.is_empty() {
                let s = g.status_json("a");
                let scanning: Vec<&str> = s["scans"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x["site"].as_str())
                    .collect();
                for site in fresh {
                    assert!(
                        !scanning.contains(&site.as_str()),
                        "politeness {politeness}: {site} is done on the server and still scanning in {s:#}"
                    );
                    checked.insert(site.clone());
                }
            }
            checked.len() == 3
        });
        g.wait_round(&round, "60s");
        assert!(child.wait().expect("client").success());
    }
}

/// `beebot run --once --slots 1` for host `a`, its output discarded.
fn spawn_on_one_slot(g: &Grid) -> std::process::Child {
    let mut args = vec![
        "run".to_string(),
        "--once".into(),
        "--slots".into(),
        "1".into(),
    ];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    g.client_cmd("a", &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn")
}

/// Scan checkpoints (`*.ckpt`) in host `a`'s spool.
fn checkpoints(g: &Grid) -> usize {
    std::fs::read_dir(g.home("a").join("spool").join("scans"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "ckpt"))
                .count()
        })
        .unwrap_or(0)
}

/// Paused mid-scan: at most the page in flight finishes, then nothing is
/// fetched; the held scan is checkpointed at once and status shows it
/// paused, with its deadline.
fn pause_mid_scan_holds_and_checkpoints_the_scan(g: &Grid) {
    // Mid-scan: the live status shows a scan with pages.
    wait_for("a scan in progress", Duration::from_secs(60), || {
        let s = g.status_json("a");
        s["state"] == "running" && s["scans"][0]["pages"].as_u64().unwrap_or(0) >= 2
    });
    let o = g.client("a", &["pause", "--for", "2h"]);
    assert!(o.status.success(), "pause: {}", stderr(&o));
    assert!(stdout(&o).contains("paused"));
    // Said at once, not at the runner's next write: right after the
    // command, status says paused, until when.
    let s = g.status_json("a");
    assert_eq!(s["state"], "paused", "right after `pause`: {s}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    let left = s["until_ms"].as_u64().expect("until") as i64 - now_ms;
    assert!((7_000_000..=7_200_000).contains(&left), "{s}");
    // At most the page in flight finishes; then nothing is fetched.
    std::thread::sleep(Duration::from_millis(400));
    let before = g.web_server.requests();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(g.web_server.requests(), before, "no request while paused");
    // Held at the gate, the scan is checkpointed at once (not in 30 s).
    wait_for(
        "the held scan's checkpoint",
        Duration::from_secs(10),
        || checkpoints(g) == 1,
    );
    wait_for("paused state", Duration::from_secs(10), || {
        g.status_json("a")["state"] == "paused"
    });
    // The scan's deadline is shown (it finds dead hosts, it stops nothing).
    assert!(
        g.status_json("a")["scans"][0]["deadline_ms"]
            .as_u64()
            .is_some(),
        "{}",
        g.status_json("a")
    );
    let text = stdout(&g.client("a", &["status"]));
    assert!(text.contains("state     paused"), "{text}");
    assert!(text.contains("scanning site"), "{text}");
}

/// Nothing lost: the export of `round` is the truth. Nothing fetched twice,
/// and the checkpoints went with their units.
fn nothing_is_lost_and_nothing_fetched_twice(g: &Grid, round: &str) {
    assert_same_rows(&g.export_rows(round), &g.truth_rows());
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in g.web_server.request_log() {
        *seen.entry((r.host, r.path)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "fetched more than once: {twice:?}");
    assert_eq!(checkpoints(g), 0, "checkpoints go with their units");
}

/// Not running: status comes from the spool; as a service (no terminal) it
/// logged to a file in the data dir; `pause` finds no running client.
fn not_running_status_comes_from_the_spool(g: &Grid) {
    let s = g.status_json("a");
    assert_eq!(s["state"], "not running");
    assert_eq!(s["pending_uploads"], 0);
    assert_eq!(s["today"]["results"], 3, "{s}");
    // As a service (no terminal) it logged to a file in the data dir.
    let log =
        std::fs::read_to_string(g.home("a").join("logs").join("beebot.log")).expect("log file");
    assert!(log.contains("result uploaded"), "{log}");
    let o = g.client("a", &["pause"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no running client"), "{}", stderr(&o));
}

#[test]
fn settings_show_where_values_come_from() {
    let g = Grid::start(43, 1);
    let o = g.client("s", &["config", "set", "slots", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = g.client("s", &["config", "set", "slots", "0"]);
    assert!(!o.status.success());
    let o = g.client("s", &["config", "set", "colour", "blue"]);
    assert!(stderr(&o).contains("unknown setting"), "{}", stderr(&o));
    let o = run(
        g.client_cmd("s", &["config", "show", "--json"])
            .env("BEEBOT_BANDWIDTH_KBPS", "250"),
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let find = |k: &str| {
        v.as_array()
            .expect("array")
            .iter()
            .find(|x| x["key"] == k)
            .cloned()
            .expect("key")
    };
    assert_eq!(find("slots")["value"], "3");
    assert_eq!(find("slots")["source"], "file");
    assert_eq!(find("bandwidth_kbps")["value"], "250");
    assert_eq!(find("bandwidth_kbps")["source"], "environment");
    assert_eq!(find("window")["source"], "default");
    let text = stdout(&g.client("s", &["config", "show"]));
    assert!(text.contains("slots") && text.contains("(file)"), "{text}");
}

#[test]
fn leaving_releases_units_at_once_and_removes_local_files() {
    let g = Grid::start(47, 4);
    join(&g, "l");
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "50"]));
    let mut args = vec!["run".to_string()];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = g
        .client_cmd("l", &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for("units held", Duration::from_secs(60), || {
        g.status_json("l")["units_held"]
            .as_array()
            .is_some_and(|u| !u.is_empty())
    });
    let _ = child.kill();
    let _ = child.wait();
    let o = g.client("l", &["leave"]);
    assert!(o.status.success(), "leave: {}", stderr(&o));
    assert!(!g.home("l").join("host.key").exists());
    assert!(!g.home("l").join("spool").exists());
    let o = g.admin_ok(&["round", "show", &round, "--json"]);
    let d: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let running = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter(|j| j["state"] == "Running")
        .count();
    assert_eq!(running, 0, "every unit went back to the queue: {d}");
    // Left by its owner, not revoked by the admin.
    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    assert!(
        hosts.contains("\tleft\t") && !hosts.contains("revoked"),
        "{hosts}"
    );
}

#[test]
fn service_install_writes_a_unit_that_runs_this_client() {
    let g = Grid::start(53, 1);
    let xdg = g.dir.path().join("xdg");
    let o = run(
        g.client_cmd(
            "svc",
            &[
                "service",
                "install",
                "--no-start",
                "--window",
                "19:00-07:00",
            ],
        )
        .env("XDG_CONFIG_HOME", &xdg),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let unit = std::fs::read_to_string(xdg.join("systemd/user/beebot.service")).expect("unit");
    assert!(
        unit.contains(&format!("--home {} run", g.home("svc").display())),
        "{unit}"
    );
    assert!(unit.contains(bin("beebot").to_str().expect("path")));
    let o = g.client("svc", &["config", "show", "--json"]);
    assert!(stdout(&o).contains("19:00-07:00"));
    let o = run(
        g.client_cmd("svc", &["service", "uninstall"])
            .env("XDG_CONFIG_HOME", &xdg),
        Duration::from_secs(30),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!xdg.join("systemd/user/beebot.service").exists());
}

/// A directory holding fake `systemctl` and `loginctl` scripts: each
/// logs its arguments to `calls`; systemctl fails saying `systemctl_says`
/// when given, loginctl answers `Linger` with `linger`.
#[cfg(target_os = "linux")]
fn fake_service_manager(dir: &std::path::Path, systemctl_says: Option<&str>, linger: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("dir");
    let calls = dir.join("calls");
    let systemctl = match systemctl_says {
        Some(msg) => format!("echo \"{msg}\" >&2\nexit 1\n"),
        None => "exit 0\n".to_string(),
    };
    for (name, body) in [
        ("systemctl", systemctl),
        ("loginctl", format!("echo {linger}\n")),
    ] {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}",
                calls.display()
            ),
        )
        .expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// `service install` whose start fails exits non-zero, says why and what
/// to run, and keeps the unit it wrote; one that starts names lingering
/// by the calling user (no name needed), asked for by uid.
#[cfg(target_os = "linux")]
#[test]
fn service_install_says_when_the_service_did_not_start() {
    let g = Grid::start(54, 1);
    let xdg = g.dir.path().join("xdg");
    let fake = g.dir.path().join("fake-bin");
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    fake_service_manager(
        &fake,
        Some("Failed to connect to bus: No medium found"),
        "no",
    );
    let o = run(
        g.client_cmd("svc", &["service", "install"])
            .env("XDG_CONFIG_HOME", &xdg)
            .env("PATH", &path),
        Duration::from_secs(30),
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "a failed start must fail: {err}");
    assert!(err.contains("No medium found"), "{err}");
    assert!(
        err.contains("systemctl --user enable --now beebot.service"),
        "{err}"
    );
    assert!(xdg.join("systemd/user/beebot.service").exists());

    std::fs::remove_dir_all(&fake).expect("rm");
    fake_service_manager(&fake, None, "no");
    let o = run(
        g.client_cmd("svc", &["service", "install"])
            .env("XDG_CONFIG_HOME", &xdg)
            .env_remove("USER")
            .env("PATH", &path),
        Duration::from_secs(30),
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains("`loginctl enable-linger`"), "{out}");
    let calls = std::fs::read_to_string(fake.join("calls")).expect("calls");
    let uid = std::process::Command::new("id")
        .arg("-u")
        .output()
        .expect("id");
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    assert!(
        calls.contains(&format!("loginctl show-user {uid} -p Linger --value")),
        "{calls}"
    );
    assert!(
        calls.contains("systemctl --user enable --now beebot.service"),
        "{calls}"
    );
}

#[test]
fn the_bandwidth_cap_holds_on_loopback() {
    const CAP_KBPS: u64 = 150;
    let g = Grid::start(59, 16);
    join(&g, "bw");
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    let mut args = vec![
        "run".to_string(),
        "--once".into(),
        "--slots".into(),
        "4".into(),
    ];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(
        g.client_cmd("bw", &args)
            .env("BEEBOT_BANDWIDTH_KBPS", CAP_KBPS.to_string()),
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["round", "show", &round, "--json"])))
            .expect("json");
    let bytes: u64 = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["result"]["summary"]["bytes"].as_u64().unwrap_or(0))
        .sum();
    let log = g.web_server.request_log();
    let first = log.iter().map(|r| r.at).min().expect("requests");
    let last = log.iter().map(|r| r.at).max().expect("requests");
    let secs = (last - first).as_secs_f64();
    let rate_kbps = bytes as f64 / 1000.0 / secs;
    eprintln!("{bytes} bytes in {secs:.2}s: {rate_kbps:.1} kB/s against a cap of {CAP_KBPS}");
    assert!(bytes > 500_000, "enough bytes to measure: {bytes}");
    let ratio = rate_kbps / CAP_KBPS as f64;
    assert!(
        (0.8..=1.2).contains(&ratio),
        "rate {rate_kbps:.1} kB/s is not within 20% of {CAP_KBPS}"
    );
}

#[test]
fn a_full_spool_takes_no_new_work() {
    let g = Grid::start(61, 2);
    join(&g, "full");
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    // 17 MB of something else in the spool, over a 16 MB cap.
    let results = g.home("full").join("spool").join("results");
    std::fs::create_dir_all(&results).expect("mkdir");
    std::fs::write(results.join("ballast.bin"), vec![0u8; 17 * 1024 * 1024]).expect("ballast");
    let mut args = vec!["run".to_string()];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = g
        .client_cmd("full", &args)
        .env("BEEBOT_SPOOL_CAP_MB", "16")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let log = g.home("full").join("logs").join("beebot.log");
    wait_for(
        "the spool-cap warning in the log",
        Duration::from_secs(90),
        || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("spool_cap_mb")),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let s = g.status_json("full");
    assert_eq!(s["units_held"].as_array().map(Vec::len), Some(0), "{s}");
    let d: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["round", "show", &round, "--json"])))
            .expect("json");
    assert_eq!(d["counts"]["queued"], 2, "no work was taken: {d}");
    // Room again: work flows and the round completes.
    std::fs::remove_file(results.join("ballast.bin")).expect("rm");
    g.wait_round(&round, "120s");
    let _ = child.kill();
    let _ = child.wait();
}

/// Every file and directory under `root` is its owner's alone; returns
/// how many were looked at.
#[cfg(unix)]
fn owner_only(root: &std::path::Path) -> usize {
    use std::os::unix::fs::PermissionsExt;
    let mut seen = 0;
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p).expect("stat");
        let mode = meta.permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", p.display());
        seen += 1;
        if meta.is_dir() {
            todo.extend(
                std::fs::read_dir(&p)
                    .expect("dir")
                    .map(|e| e.expect("entry").path()),
            );
        }
    }
    seen
}

/// The client's home (keys, spool, log, status, benchmark) and the
/// server's data dir (store, packs, token) are their user's alone, though
/// both were started with the usual umask (022), which once left the
/// client's data dir 0755 and its log, `status.json` and `benchmark.json`
/// 0644 for every local user to read. A home an older version left open
/// is closed when the client runs.
#[cfg(unix)]
#[test]
fn what_the_client_and_server_write_is_their_users_alone() {
    use std::os::unix::fs::PermissionsExt;
    let g = Grid::start(45, 2);
    join(&g, "a");
    let home = g.home("a");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "5"]));
    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "120s");
    let client = owner_only(&home);
    let server = owner_only(&g.data_dir());
    assert!(client > 5 && server > 5, "{client} / {server} files");
}
