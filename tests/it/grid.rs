//! End to end with the real binaries: a server, clients and a synthetic web on
//! loopback. The exported link graph must equal the synthetic web's truth.

use std::time::{Duration, Instant};

use beebot_tests::*;

fn join(g: &Grid, name: &str, code: &str) -> String {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name} failed: {}", stderr(&o));
    let out = stdout(&o);
    // "joined ADDR as host N (NAME)"
    out.split(" as host ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("host id in join output")
        .to_string()
}

fn invite(g: &Grid, uses: u32) -> String {
    let o = g.admin_ok(&["invite", "--uses", &uses.to_string(), "--expires", "1h"]);
    let code = last_line(&o);
    assert!(code.starts_with("beebot2-"), "invite code: {code}");
    code
}

/// Start `beebot run --once` for client `name`; its stderr goes to a file in the
/// grid's dir (a pipe nobody reads could fill and stall it).
fn run_once(g: &Grid, name: &str) -> (std::process::Child, std::path::PathBuf) {
    run_once_slots(g, name, "3")
}

fn run_once_slots(g: &Grid, name: &str, slots: &str) -> (std::process::Child, std::path::PathBuf) {
    let mut args = vec!["run", "--once", "--slots", slots];
    let flags = g.crawl_flags();
    args.extend(flags.iter().map(String::as_str));
    let log = g.dir.path().join(format!("client-{name}.stderr"));
    let child = g
        .client_cmd(name, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn client");
    (child, log)
}

fn wait_ok((mut child, log): (std::process::Child, std::path::PathBuf), what: &str) {
    let status = child.wait().expect("client");
    assert!(
        status.success(),
        "{what} failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

fn round_json(g: &Grid, id: &str) -> serde_json::Value {
    let o = g.admin_ok(&["round", "show", id, "--json"]);
    serde_json::from_str(&stdout(&o)).expect("round json")
}

#[test]
fn three_clients_scan_twenty_sites_and_export_the_exact_truth() {
    let g = Grid::start(11, 20);
    let code = invite(&g, 3);
    // Hosts and rounds each count from 1 on a fresh server.
    let hosts: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|name| join(&g, name, &code))
        .collect();
    assert_eq!(hosts, ["1", "2", "3"]);
    g.import_sites();
    let o = g.admin_ok(&["sites", "list"]);
    assert_eq!(stdout(&o).lines().count(), 20);
    // A politeness delay, as in real use: at zero a round of twenty small
    // sites can end before a second client has asked, and then nothing is
    // spread (the grid promises no host work in a round that short).
    let o = g.admin_ok(&["round", "start", "--delay-ms", "20", "--max-pages", "1000"]);
    let round = last_line(&o);
    assert_eq!(round, "1", "the first round's id");

    let clients: Vec<_> = ["a", "b", "c"].iter().map(|n| run_once(&g, n)).collect();
    g.wait_round(&round, "240s");
    for (c, n) in clients.into_iter().zip(["a", "b", "c"]) {
        wait_ok(c, n);
    }

    let detail = round_json(&g, &round);
    assert_eq!(detail["round"]["state"], "Done");
    assert_eq!(detail["counts"]["done"], 20);
    let hosts_used: std::collections::BTreeSet<_> = detail["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["result"]["host_id"].as_u64().expect("host"))
        .collect();
    assert!(
        hosts_used.len() >= 2,
        "work was spread over hosts: {hosts_used:?}"
    );

    assert_same_rows(&g.export_rows(&round), &g.truth_rows());

    // JSONL carries the same rows.
    let o = g.admin_ok(&["export", "--round", &round, "--format", "jsonl"]);
    assert_eq!(stdout(&o).lines().count(), g.truth_rows().len());

    // Status answers in both forms.
    let o = g.admin_ok(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("status json");
    assert_eq!(s["grid"]["sites"], 20);
    assert_eq!(s["grid"]["hosts"], 3);
    let o = g.admin_ok(&["hosts", "list"]);
    assert_eq!(stdout(&o).lines().count(), 4, "{}", stdout(&o));
}

#[test]
fn killed_client_jobs_are_reissued_after_their_deadline() {
    let g = Grid::start(23, 12);
    let code = invite(&g, 3);
    let victim = join(&g, "victim", &code);
    join(&g, "b", &code);
    join(&g, "c", &code);
    g.import_sites();
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        "10",
        // Deadlines this short find the dead host within the test (and are
        // allowed only with --force).
        "--min-deadline",
        "3s",
        "--max-deadline",
        "3s",
        "--force",
        "--max-attempts",
        "50",
        // No tail replicas: the victim's units must come back through their deadline.
        "--policy",
        "round-robin",
    ]);
    let round = last_line(&o);

    // The victim takes units, then dies without a word.
    // One slot: the victim holds a second unit it has not started when it dies.
    let (mut victim_proc, _) = run_once_slots(&g, "victim", "1");
    let start = Instant::now();
    loop {
        let d = round_json(&g, &round);
        let held =
            d["jobs"]
                .as_array()
                .expect("jobs")
                .iter()
                .filter(|j| {
                    j["attempts"].as_array().expect("attempts").iter().any(|a| {
                        a["host_id"].as_u64().map(|h| h.to_string()) == Some(victim.clone())
                    })
                })
                .count();
        if held > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "victim never got work"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    victim_proc.kill().expect("kill victim");
    let _ = victim_proc.wait();

    let b = run_once(&g, "b");
    let c = run_once(&g, "c");
    g.wait_round(&round, "240s");
    wait_ok(b, "b");
    wait_ok(c, "c");

    let d = round_json(&g, &round);
    assert_eq!(d["counts"]["done"], 12, "{d}");
    let expired_of_victim = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .flat_map(|j| j["attempts"].as_array().expect("attempts").iter())
        .filter(|a| {
            a["host_id"].as_u64().map(|h| h.to_string()) == Some(victim.clone())
                && a["state"] == "Expired"
        })
        .count();
    assert!(expired_of_victim > 0, "the victim's units expired: {d}");
    let o = g.admin_ok(&["hosts", "list"]);
    assert!(stdout(&o).lines().count() == 4);
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

fn spool_files(g: &Grid, name: &str, sub: &str, ext: &str) -> Vec<u64> {
    let dir = g.home(name).join("spool").join(sub);
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .filter_map(|p| p.file_stem()?.to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

#[test]
fn restarted_client_resumes_its_units_and_pending_uploads() {
    let mut g = Grid::start(37, 6);
    let code = invite(&g, 1);
    let host = join(&g, "a", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "20"]));

    // The client takes units; then the server goes away while it scans.
    let (mut client, _) = run_once(&g, "a");
    let start = Instant::now();
    while spool_files(&g, "a", "units", "unit").is_empty() {
        assert!(start.elapsed() < Duration::from_secs(60), "no units");
        std::thread::sleep(Duration::from_millis(5));
    }
    g.kill_server();
    // Scans go on without the server; their results wait in the spool.
    let start = Instant::now();
    while spool_files(&g, "a", "results", "summary").is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no result spooled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    client.kill().expect("kill client");
    let _ = client.wait();
    let held = spool_files(&g, "a", "units", "unit");
    let pending = spool_files(&g, "a", "results", "summary");
    assert!(!pending.is_empty());
    let o = g.client("a", &["status"]);
    assert!(
        stdout(&o).contains(&format!("uploads   {} pending", pending.len())),
        "{}",
        stdout(&o)
    );

    // Server back, client restarted: the held units finish under their own
    // ids, the pending results are delivered, the round completes.
    g.start_server();
    let c = run_once(&g, "a");
    g.wait_round(&round, "120s");
    wait_ok(c, "a");
    let d = round_json(&g, &round);
    for unit in &held {
        let done = d["jobs"].as_array().expect("jobs").iter().any(|j| {
            j["result"]["unit_id"].as_u64() == Some(*unit)
                && j["result"]["host_id"].as_u64().map(|h| h.to_string()) == Some(host.clone())
        });
        assert!(
            done,
            "unit {unit} held at the kill was resumed and accepted: {d}"
        );
    }
    assert!(spool_files(&g, "a", "units", "unit").is_empty());
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}
