//! One lying client among honest ones (`beebot-liar`, see
//! `beebot_tests::liar`): it boasts a hundredfold speed, hoards units, uploads
//! made-up and truncated link lists claiming a natural end, uploads them again
//! and again, sends record bombs and multi-byte failure reasons. The server
//! keeps serving with bounded memory, the honest clients finish the round,
//! the liar holds no more than a host may, and with every result validated
//! the export is the truth, every result of the liar is invalid and it has
//! no trust.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use beebot_shared::limits::{MAX_TEXT_LEN, MAX_UNITS_PER_SLOT};
use beebot_tests::hostile::{join_raw, peak_rss};
use beebot_tests::*;

/// Sites of the synthetic web: more than one reply may carry, so a server
/// that let a host hoard across replies would let the liar pass [`HELD_CAP`].
const SITES: usize = 72;
/// Honest clients, each with two slots.
const HONEST: [&str; 3] = ["a", "b", "c"];
const HONEST_SLOTS: u32 = 2;
/// The server's peak memory under the liar.
const PEAK_LIMIT: u64 = 300 * 1000 * 1000;
/// A hoarded unit comes back to the queue after this.
const MAX_DEADLINE: &str = "15s";
/// The liar's failures and hoards count against a job's attempts: enough
/// that they never fail a job the honest clients can scan.
const MAX_ATTEMPTS: &str = "50";
/// Longest the whole round may take.
const ROUND_TIMEOUT: Duration = Duration::from_secs(480);
/// The most units the liar may hold at once: a host not trusted is taken
/// to have a few slots, whatever it claims.
const HELD_CAP: usize = MAX_UNITS_PER_SLOT * beebot_server::validate::UNTRUSTED_MAX_SLOTS as usize;

/// The liar's process; killed when dropped.
struct Liar {
    child: Option<Child>,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

impl Liar {
    fn start(g: &Grid) -> Liar {
        let out = g.dir.path().join("liar.stdout");
        let err = g.dir.path().join("liar.stderr");
        let child = Command::new(env!("CARGO_BIN_EXE_beebot-liar"))
            .arg("--home")
            .arg(g.home("liar"))
            .args(g.crawl_flags())
            .stdout(std::fs::File::create(&out).expect("liar stdout"))
            .stderr(std::fs::File::create(&err).expect("liar stderr"))
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the liar");
        Liar {
            child: Some(child),
            out,
            err,
        }
    }

    /// Wait (bounded) for it to exit; its report.
    fn report(mut self, timeout: Duration) -> serde_json::Value {
        let mut child = self.child.take().expect("running liar");
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the liar did not stop once the round was over:\n{}",
                    std::fs::read_to_string(&self.err).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        assert!(status.success(), "the liar failed ({status}): {err}");
        let out = std::fs::read_to_string(&self.out).expect("liar report");
        let line = out.lines().last().unwrap_or("");
        serde_json::from_str(line).unwrap_or_else(|e| panic!("liar report {line:?}: {e}"))
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Units each host holds now, as the server sees them (running attempts).
fn held_by_host(d: &serde_json::Value) -> BTreeMap<u64, usize> {
    let mut held = BTreeMap::new();
    for job in d["jobs"].as_array().into_iter().flatten() {
        for a in job["attempts"].as_array().into_iter().flatten() {
            if a["state"] == "Running" {
                *held.entry(a["host_id"].as_u64().unwrap_or(0)).or_default() += 1;
            }
        }
    }
    held
}

fn as_u64(v: &serde_json::Value, what: &str) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{what}: {v}"))
}

fn a_round_with_a_liar(seed: u64, delay_ms: u64) {
    let started = Instant::now();
    let mut g = Grid::start(seed, SITES);
    let code = g.invite(HONEST.len() as u32 + 1);
    let honest_ids: Vec<u64> = HONEST.iter().map(|n| g.join(n, &code)).collect();
    let liar_id = join_raw(&g, "liar", &code).id;
    g.import_sites();
    let round = start_round(&g, delay_ms);
    let pid = g.server.as_ref().expect("server").id();

    // The liar asks first: it gets what a boast and every free slot get.
    let liar = Liar::start(&g);
    let start = Instant::now();
    let mut most_held = wait_for_the_liar_to_take_work(&g, &round, &liar, liar_id, start);
    let honest: Vec<ClientProc> = HONEST
        .iter()
        .map(|n| g.run_once(n, HONEST_SLOTS, &[]))
        .collect();
    most_held = watch_until_the_round_is_over(&g, &round, liar_id, start, most_held);
    let o = g.admin_ok(&["round", "wait", &round, "--timeout", "10s"]);
    let verdict = last_line(&o);
    assert!(
        verdict.contains(&format!("all {SITES} sites complete")),
        "{verdict}"
    );
    for (p, n) in honest.into_iter().zip(HONEST) {
        p.wait_ok(&format!("honest client {n}"));
    }
    let report = liar.report(Duration::from_secs(30));
    let took = started.elapsed();

    let peak = the_server_kept_serving_with_bounded_memory(&mut g, pid);
    every_lie_was_told_and_answered(&report, liar_id);

    // It held no more than a host may: as the server showed it, and as
    // the liar counted (its hoard before their deadlines, and each reply).
    let liar_held = as_u64(&report["most_held"], "most held") as usize;
    assert!(
        most_held.max(liar_held) <= HELD_CAP,
        "the liar held {most_held} units at once by the server's round, {liar_held} by its \
         own count (cap {HELD_CAP})"
    );

    let d = g.round_json(&round);
    failure_reasons_are_kept_cut_on_a_character_boundary(&d);
    validation_found_the_liar_out(&g, &round, &d, &report, liar_id, &honest_ids);

    eprintln!(
        "liar round: {SITES} sites, delay {delay_ms} ms, {:.0} s; server peak RSS {:.1} MB; \
         the liar held at most {most_held} units ({liar_held} by its count)",
        took.as_secs_f64(),
        peak as f64 / 1e6
    );
}

/// Start the round every result of which is validated, with no hedge copies;
/// its id.
fn start_round(g: &Grid, delay_ms: u64) -> String {
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        &delay_ms.to_string(),
        "--min-deadline",
        MAX_DEADLINE,
        "--max-deadline",
        MAX_DEADLINE,
        "--force",
        "--max-attempts",
        MAX_ATTEMPTS,
        "--validate",
        "all",
        // No hedge copies: a lie overtaken by an honest copy is not a lie
        // the server took.
        "--policy",
        "round-robin",
    ]);
    last_line(&o)
}

/// The liar takes work before any honest client runs; the most it held
/// meanwhile, as the server's round shows it.
fn wait_for_the_liar_to_take_work(
    g: &Grid,
    round: &str,
    liar: &Liar,
    liar_id: u64,
    start: Instant,
) -> usize {
    let mut most_held = 0usize;
    while most_held == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the liar took no work:\n{}",
            std::fs::read_to_string(&liar.err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
        let held = held_by_host(&g.round_json(round));
        most_held = most_held.max(held.get(&liar_id).copied().unwrap_or(0));
    }
    most_held
}

/// Watch what the liar holds until the round is over; the most it held.
fn watch_until_the_round_is_over(
    g: &Grid,
    round: &str,
    liar_id: u64,
    start: Instant,
    mut most_held: usize,
) -> usize {
    loop {
        let d = g.round_json(round);
        let held = held_by_host(&d);
        most_held = most_held.max(held.get(&liar_id).copied().unwrap_or(0));
        if d["round"]["state"] != "Running" {
            return most_held;
        }
        if start.elapsed() >= ROUND_TIMEOUT {
            let open: Vec<&serde_json::Value> = d["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|j| j["state"] != "Done" && j["state"] != "Failed")
                .collect();
            let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
            panic!(
                "round {round} not over after {ROUND_TIMEOUT:?}: {:#}\nopen jobs: {open:#?}\n{hosts}\n{}",
                d["counts"],
                g.server_log()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The server kept serving with bounded memory; its peak RSS.
fn the_server_kept_serving_with_bounded_memory(g: &mut Grid, pid: u32) -> u64 {
    let peak = peak_rss(pid);
    let server = g.server.as_mut().expect("server");
    assert!(
        server.try_wait().expect("server status").is_none(),
        "the server died:\n{}",
        g.server_log()
    );
    assert!(
        peak < PEAK_LIMIT,
        "server peak RSS {peak} bytes:\n{}",
        g.server_log()
    );
    let o = g.admin_ok(&["status"]);
    assert!(stdout(&o).contains("sites"), "{}", stdout(&o));
    peak
}

/// The liar told every lie, and the server answered each as it should.
fn every_lie_was_told_and_answered(report: &serde_json::Value, liar_id: u64) {
    eprintln!("liar report: {report:#}");
    assert_eq!(as_u64(&report["host_id"], "host id"), liar_id);
    assert_eq!(report["benchmark_acked"], true, "{report:#}");
    assert!(
        report["unexpected"].as_array().is_some_and(Vec::is_empty),
        "unexpected answers: {report:#}"
    );
    assert!(
        as_u64(&report["most_in_one_reply"], "most in one reply") > 1,
        "{report:#}"
    );
    assert!(as_u64(&report["hoarded"], "hoarded") > 0, "{report:#}");
    let lies = as_u64(&report["lies"], "lies");
    assert!(lies > 0, "{report:#}");
    assert!(as_u64(&report["fabricated_links"], "fabricated") > 0);
    assert!(as_u64(&report["dropped_links"], "dropped") > 0);
    assert!(
        as_u64(&report["lies_accepted"], "lies accepted") > 0,
        "{report:#}"
    );
    let repeats = as_u64(&report["repeats"], "repeats");
    assert!(repeats > 0, "{report:#}");
    assert_eq!(
        as_u64(&report["repeats_duplicate"], "duplicates"),
        repeats,
        "a result uploaded again is a duplicate: {report:#}"
    );
    let bombs = as_u64(&report["bombs"], "bombs");
    assert!(bombs > 0, "{report:#}");
    assert_eq!(as_u64(&report["bombs_refused"], "bombs refused"), bombs);
    let fails = as_u64(&report["fails"], "fails");
    assert!(fails > 0, "{report:#}");
    assert_eq!(as_u64(&report["fails_acked"], "fails acked"), fails);
}

/// Its multi-byte failure reasons are kept, cut on a character boundary.
fn failure_reasons_are_kept_cut_on_a_character_boundary(d: &serde_json::Value) {
    let jobs = d["jobs"].as_array().expect("jobs");
    let reasons: Vec<&str> = jobs
        .iter()
        .flat_map(|j| j["reasons"].as_array().into_iter().flatten())
        .filter_map(|r| r.as_str())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("💥")),
        "the liar's reasons: {reasons:?}"
    );
    assert!(
        reasons.iter().all(|r| r.len() <= MAX_TEXT_LEN),
        "{reasons:?}"
    );
}

/// Validation: every result was checked, the liar's were all invalid, it
/// has no trust, and the export is the truth.
fn validation_found_the_liar_out(
    g: &Grid,
    round: &str,
    d: &serde_json::Value,
    report: &serde_json::Value,
    liar_id: u64,
    honest_ids: &[u64],
) {
    let jobs = d["jobs"].as_array().expect("jobs");
    assert_eq!(d["round"]["params"]["validate"], "all", "{:#}", d["round"]);
    for j in jobs {
        assert_eq!(j["validation"], "valid", "{j:#}");
        assert_ne!(
            j["result"]["host_id"].as_u64(),
            Some(liar_id),
            "a result of the liar stands: {j:#}"
        );
    }
    let o = g.admin_ok(&["hosts", "list", "--json"]);
    let hosts: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("hosts json");
    let hosts = hosts.as_array().expect("hosts");
    let host = |id: u64| {
        hosts
            .iter()
            .find(|h| h["id"].as_u64() == Some(id))
            .unwrap_or_else(|| panic!("host {id} in {hosts:#?}"))
    };
    let l = host(liar_id);
    assert_eq!(as_u64(&l["valid_results"], "valid"), 0, "{l:#}");
    assert!(
        as_u64(&l["invalid_results"], "invalid") >= as_u64(&report["lies_accepted"], "lies"),
        "every lie the server took is invalid: {l:#}"
    );
    assert_eq!(as_u64(&l["consecutive_valid"], "consecutive"), 0, "{l:#}");
    assert_eq!(l["trusted"], false, "{l:#}");
    for id in honest_ids {
        let h = host(*id);
        assert_eq!(as_u64(&h["invalid_results"], "invalid"), 0, "{h:#}");
    }
    assert_same_rows(&g.export_rows(round), &g.truth_rows());
}

#[test]
fn a_liar_among_honest_clients_at_a_polite_delay_is_found_out() {
    a_round_with_a_liar(83, 30);
}

#[test]
fn a_liar_among_honest_clients_at_no_delay_is_found_out() {
    a_round_with_a_liar(89, 0);
}
