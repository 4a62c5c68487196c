//! Real conditions: a first round at a politeness delay above zero, where the
//! largest sites need several times their first deadline and several scans
//! of the round's time budget, with a host that vanishes mid-round. Every
//! site must be scanned to its natural end and the export must equal the
//! synthetic web's truth, with no row twice.

use std::time::{Duration, Instant};

use beebot_tests::*;

/// Politeness delay of the round: the largest synthetic site (about 120
/// pages) takes a minute.
const DELAY_MS: &str = "500";
/// First deadline: a third of the largest site's scan, so only extensions
/// keep it alive (progress comes every 10 s).
const MAX_DEADLINE: &str = "20s";
/// Time budget of one scan: the largest sites need four scans.
const MAX_SCAN_TIME: &str = "15s";

#[test]
fn a_polite_first_round_scans_every_site_to_its_end_even_when_a_host_vanishes() {
    let g = Grid::start(7, 8);
    let code = g.invite(3);
    for name in ["a", "b", "gone"] {
        g.join(name, &code);
    }
    g.import_sites();
    let largest = g
        .web
        .site_hosts()
        .iter()
        .filter_map(|h| g.web.site_pages(h))
        .max()
        .expect("sites");
    let round = start_polite_round(&g);
    let started = Instant::now();
    // A host that takes work and vanishes for good in the middle of its scans.
    let gone = g.run_once("gone", 2, &[]);
    std::thread::sleep(Duration::from_secs(8));
    gone.kill();
    let a = g.run_once("a", 3, &[]);
    let b = g.run_once("b", 3, &[]);
    let o = g.admin(&["round", "wait", &round, "--timeout", "400s"]);
    assert!(
        o.status.success(),
        "round wait: {}\n{}",
        stderr(&o),
        g.server_log()
    );
    let took = started.elapsed();
    let verdict = last_line(&o);
    assert!(verdict.contains("all 8 sites complete"), "{verdict}");
    a.wait_ok("client a");
    b.wait_ok("client b");

    let d = g.round_json(&round);
    every_site_ended_naturally_over_several_scans(&d, largest);
    a_live_scan_was_extended_not_cut(&d);

    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    let o = g.admin_ok(&["status"]);
    assert!(
        stdout(&o).contains("8 of 8 sites complete"),
        "{}",
        stdout(&o)
    );
    eprintln!(
        "polite round: 8 sites, largest {largest} pages, delay {DELAY_MS} ms, {:.0} s",
        took.as_secs_f64()
    );
}

/// Start the round at the politeness delay, with the short first deadline
/// and scan time budget; its id.
fn start_polite_round(g: &Grid) -> String {
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        DELAY_MS,
        "--min-deadline",
        MAX_DEADLINE,
        "--max-deadline",
        MAX_DEADLINE,
        "--force",
        "--max-scan-time",
        MAX_SCAN_TIME,
        "--policy",
        "round-robin",
    ]);
    last_line(&o)
}

/// Every site is complete at its natural end, and the time budget split the
/// largest sites into several scans, the job going on from each scan's
/// frontier.
fn every_site_ended_naturally_over_several_scans(d: &serde_json::Value, largest: usize) {
    assert_eq!(d["counts"]["complete"], 8, "{:#}", d["counts"]);
    assert_eq!(d["counts"]["incomplete"], 0);
    let sites = d["sites"].as_array().expect("sites");
    for s in sites {
        assert_eq!(s["natural_end"], true, "{s:#}");
        assert!(s["why_not"].is_null(), "{s:#}");
    }
    // The time budget split the largest sites into several scans, and the
    // job went on from each scan's frontier.
    let most_scans = sites
        .iter()
        .filter_map(|s| s["scans"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(
        most_scans >= 3,
        "largest site ({largest} pages) took {most_scans} scans"
    );
}

/// A live scan outlived its first deadline: it was extended, not cut.
fn a_live_scan_was_extended_not_cut(d: &serde_json::Value) {
    let extended = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .flat_map(|j| j["attempts"].as_array().cloned().unwrap_or_default())
        .any(|a| {
            let issued = a["issued_ms"].as_u64().unwrap_or(0);
            let deadline = a["deadline_ms"].as_u64().unwrap_or(0);
            let window = a["window_ms"].as_u64().unwrap_or(u64::MAX);
            deadline > issued + window
        });
    assert!(extended, "no scan was extended past its first deadline");
}
