//! Scheduling end to end: three real clients throttled to different speeds
//! scan the synthetic web, once under `round-robin` and once under `adaptive`
//! (the default), in one run. Adaptive, knowing the sites' sizes and the
//! hosts' speeds from the first round, must end its round clearly sooner.
//! Also: `round start --every` repeats a round, `simulate` prints its table,
//! and the release build's simulator keeps `adaptive` near the lower bound
//! on a round of 2,000 sites and 100 desktops.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use beebot_tests::*;

/// Per-page pauses of the three clients: fast, medium, slow.
const THROTTLES_MS: [(&str, u64); 3] = [("fast", 5), ("medium", 60), ("slow", 300)];
/// Adaptive must end its round in at most this share of round-robin's time
/// (the measured share is far lower; the margin absorbs a loaded machine).
const MAX_ADAPTIVE_SHARE: f64 = 0.8;
/// `adaptive`'s median makespan over [`SCALE_SEEDS`] seeds of 2,000 sites
/// on 100 desktops (the simulator's defaults) may be at most this many
/// times the lower bound, and its worst seed [`MAX_SCALE_WORST`].
const MAX_SCALE_MEDIAN: f64 = 1.10;
const MAX_SCALE_WORST: f64 = 1.5;
/// Seeds of the scale run (the simulator's clock is virtual: a seed gives
/// the same makespan on any machine).
const SCALE_SEEDS: &str = "5";

fn invite(g: &Grid, uses: u32) -> String {
    let o = g.admin_ok(&["invite", "--uses", &uses.to_string(), "--expires", "1h"]);
    last_line(&o)
}

fn join(g: &Grid, name: &str, code: &str) {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
}

fn run_throttled(g: &Grid, name: &str, throttle_ms: u64) -> Child {
    let throttle = throttle_ms.to_string();
    let mut args = vec!["run", "--once", "--slots", "2", "--throttle-ms", &throttle];
    let flags = g.crawl_flags();
    args.extend(flags.iter().map(String::as_str));
    g.client_cmd(name, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn client")
}

fn round_json(g: &Grid, id: &str) -> serde_json::Value {
    let o = g.admin_ok(&["round", "show", id, "--json"]);
    serde_json::from_str(&stdout(&o)).expect("round json")
}

/// Run one round under `policy` with all three clients; its duration in ms.
fn timed_round(g: &Grid, policy: &str) -> (u64, serde_json::Value) {
    let o = g.admin_ok(&[
        "round",
        "start",
        "--policy",
        policy,
        "--delay-ms",
        "0",
        "--max-pages",
        "1000",
    ]);
    let round = last_line(&o);
    let clients: Vec<Child> = THROTTLES_MS
        .iter()
        .map(|(name, t)| run_throttled(g, name, *t))
        .collect();
    g.wait_round(&round, "180s");
    for c in clients {
        let out = c.wait_with_output().expect("client");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let d = round_json(g, &round);
    assert_eq!(d["round"]["state"], "Done", "{d}");
    let created = d["round"]["created_ms"].as_u64().expect("created");
    let finished = d["round"]["finished_ms"].as_u64().expect("finished");
    (finished - created, d)
}

#[test]
fn adaptive_ends_a_round_of_unequal_hosts_sooner_than_round_robin() {
    let g = Grid::start(4242, 15);
    let code = invite(&g, 3);
    for (name, _) in THROTTLES_MS {
        join(&g, name, &code);
    }
    g.import_sites();
    let truth = g.truth_rows();

    let (rr_ms, rr) = timed_round(&g, "round-robin");
    let (ad_ms, ad) = timed_round(&g, "adaptive");
    eprintln!("round-robin {rr_ms} ms, adaptive {ad_ms} ms");
    assert!(
        (ad_ms as f64) <= MAX_ADAPTIVE_SHARE * rr_ms as f64,
        "adaptive took {ad_ms} ms, round-robin {rr_ms} ms\nadaptive round: {ad}\nround-robin round: {rr}"
    );
    // Both rounds found the whole truth.
    for r in [&rr, &ad] {
        let id = r["round"]["id"].as_u64().expect("id").to_string();
        assert_same_rows(&g.export_rows(&id), &truth);
    }
    // Hosts learned their speeds from real jobs: the fast one measures faster.
    let o = g.admin_ok(&["hosts", "list"]);
    let out = stdout(&o);
    let column = out
        .lines()
        .next()
        .and_then(|h| h.split('\t').position(|c| c == "pages/s"))
        .unwrap_or_else(|| panic!("no pages/s column in:\n{out}"));
    let speed = |name: &str| -> f64 {
        out.lines()
            .find(|l| l.split('\t').nth(1) == Some(name))
            .and_then(|l| l.split('\t').nth(column))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("speed of {name} in:\n{out}"))
    };
    assert!(speed("fast") > 2.0 * speed("slow"), "{out}");
}

#[test]
fn a_repeating_round_starts_its_next_scan_when_over() {
    let g = Grid::start(77, 3);
    let code = invite(&g, 1);
    join(&g, "a", &code);
    g.import_sites();
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        "0",
        "--every",
        "2s",
        "--force",
    ]);
    let first = last_line(&o);
    let mut client = run_throttled(&g, "a", 0);
    // The first round ends, and a second one starts by itself.
    let start = Instant::now();
    let next = loop {
        let d = round_json(&g, &first);
        if let Some(n) = d["round"]["next_round"].as_u64() {
            break n.to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no repetition: {d}\n{}",
            g.server_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let d1 = round_json(&g, &first);
    assert_eq!(d1["round"]["state"], "Done");
    g.wait_round(&next, "120s");
    let d2 = round_json(&g, &next);
    assert_eq!(d2["counts"]["done"], 3, "{d2}");
    assert_eq!(d2["round"]["every_ms"], 2000);
    let started = d2["round"]["created_ms"].as_u64().expect("created");
    let first_started = d1["round"]["created_ms"].as_u64().expect("created");
    let first_ended = d1["round"]["finished_ms"].as_u64().expect("finished");
    assert!(started >= first_started + 2000 && started >= first_ended);
    // The chain goes on until cancelled; stop it and the client.
    let third = loop {
        let d = round_json(&g, &next);
        if let Some(n) = d["round"]["next_round"].as_u64() {
            break n.to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(180), "no third round");
        std::thread::sleep(Duration::from_millis(200));
    };
    g.admin_ok(&["round", "cancel", &third]);
    let _ = client.kill();
    let _ = client.wait();
}

#[test]
fn simulate_prints_a_table_per_policy_and_json() {
    let g = Grid::start(1, 1);
    let o = g.admin_ok(&[
        "simulate",
        "--synthetic-sites",
        "30",
        "--synthetic-hosts",
        "3",
        "--seeds",
        "2",
    ]);
    let out = stdout(&o);
    for p in ["adaptive", "round-robin", "batch", "level", "pack"] {
        assert!(out.lines().any(|l| l.starts_with(p)), "{p} missing:\n{out}");
    }
    let o = g.admin_ok(&[
        "simulate",
        "--policy",
        "batch",
        "--seeds",
        "2",
        "--json",
        "--dropout",
        "0",
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(v[0]["policy"], "batch");
    assert_eq!(v[0]["runs"].as_array().map(Vec::len), Some(2));
    // Files, and clear refusals.
    let dir = g.dir.path();
    std::fs::write(dir.join("s.txt"), "a.edu 100\nb.edu 20\n# c\nc.edu\n").expect("write");
    std::fs::write(dir.join("h.txt"), "pc1 2.0 2\npc2 0.5\n").expect("write");
    let o = g.admin_ok(&[
        "simulate",
        "--sites",
        dir.join("s.txt").to_str().expect("path"),
        "--hosts",
        dir.join("h.txt").to_str().expect("path"),
        "--policy",
        "adaptive",
        "--seeds",
        "3",
    ]);
    assert!(stdout(&o).contains("sites from file"), "{}", stdout(&o));
    std::fs::write(dir.join("bad.txt"), "pc1 fast\n").expect("write");
    let o = g.admin(&[
        "simulate",
        "--hosts",
        dir.join("bad.txt").to_str().expect("path"),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));
    // The fault schedule: a run with server restarts, lost answers, clock
    // jumps and full disks ends with nothing accepted lost; a rate past
    // its limit is refused.
    let o = g.admin_ok(&[
        "simulate",
        "--synthetic-sites",
        "12",
        "--synthetic-hosts",
        "3",
        "--seeds",
        "3",
        "--policy",
        "adaptive",
        "--validate",
        "adaptive",
        "--restarts-per-hour",
        "6",
        "--upload-loss",
        "0.3",
        "--clock-jumps-per-hour",
        "2",
        "--disk-fulls-per-hour",
        "6",
        "--json",
    ]);
    let runs: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let text = runs.to_string();
    assert!(text.contains("\"restarts\""), "{text}");
    assert!(text.contains("\"acknowledged_lost_total\":0"), "{text}");
    let total = |field: &str| -> u64 {
        runs[0]["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r[field].as_u64().expect(field))
            .sum()
    };
    assert!(
        total("restarts") > 0,
        "the schedule restarted the server: {text}"
    );
    assert!(
        total("disk_fulls") > 0,
        "the schedule filled the disk: {text}"
    );
    for flag in ["--restarts-per-hour", "--disk-fulls-per-hour"] {
        let o = g.admin(&["simulate", flag, "61", "--seeds", "1"]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(flag), "{}", stderr(&o));
    }
    // An unknown policy is a usage error naming the known ones.
    let o = g.admin(&["simulate", "--policy", "nope", "--seeds", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("'nope'") && err.contains("round-robin") && err.contains("all"),
        "{err}"
    );
}

/// The release build of `beebot-server` (the simulator at 2,000 sites is
/// minutes slower in a test build, whose debug checks walk the grid's
/// indexes at every request).
fn release_server() -> std::path::PathBuf {
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "beebot-server",
            "--bin",
            "beebot-server",
        ])
        .status()
        .expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --release of beebot-server failed"
    );
    let exe = std::env::current_exe().expect("test exe");
    // target/debug/deps/scheduling-… → target/release/beebot-server
    let target = exe
        .parent()
        .and_then(std::path::Path::parent)
        .and_then(std::path::Path::parent)
        .expect("target dir");
    target
        .join("release")
        .join(format!("beebot-server{}", std::env::consts::EXE_SUFFIX))
}

/// Rounds of thousands of sites end near their lower bound: hosts that
/// vanish, sleep or keep office hours hand nothing over for ever (their
/// scans are taken back when their lease lapses), and scans are not moved
/// between hosts no faster than each other. Fails when `adaptive` drifts
/// past the bounds, or behind another policy.
#[test]
fn adaptive_ends_rounds_of_thousands_of_sites_near_their_lower_bound() {
    let exe = release_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(&exe)
        .args([
            "simulate",
            "--synthetic-sites",
            "2000",
            "--synthetic-hosts",
            "100",
            "--seeds",
            SCALE_SEEDS,
            "--json",
        ])
        .env("BEEBOT_SERVER_DIR", dir.path())
        .output()
        .expect("run simulate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let summary = |policy: &str| {
        let p = v
            .as_array()
            .and_then(|a| a.iter().find(|p| p["policy"] == policy))
            .unwrap_or_else(|| panic!("{policy} missing"));
        let s = &p["summary"];
        let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{policy}: no {k}"));
        (
            f("ratio_median"),
            f("ratio_worst"),
            s["pages_lost_total"].as_u64(),
        )
    };
    let (median, worst, lost) = summary("adaptive");
    assert_eq!(lost, Some(0), "adaptive lost pages");
    assert!(
        median <= MAX_SCALE_MEDIAN && worst <= MAX_SCALE_WORST,
        "adaptive at 2,000 x 100: median {median:.3}, worst {worst:.3} x the lower bound"
    );
    for other in ["round-robin", "batch", "level", "pack"] {
        let (m, _, _) = summary(other);
        assert!(median < m, "adaptive ({median:.3}) behind {other} ({m:.3})");
    }
}
