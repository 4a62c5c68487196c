//! The methods the grid is built on, each claim small and fast, end to end:
//! the real server and clients against the synthetic web on loopback, with
//! a politeness delay. The long runs and the README's figures are
//! `beebot-methods` (`tools/src/methods.rs`).
//!
//! - Coordinator and workers (P-spider): two clients end the same round in
//!   at most 1/(0.8 × 2) of one client's time, on a round that its largest
//!   site does not bound.
//! - BeeBot-EDG's experiment: with clients of different speeds, `adaptive`
//!   is not behind `round-robin` (run first: it uses no sizes or speeds,
//!   and its round teaches the grid both).
//! - First fit (`pack`) over what a machine offers: a client whose
//!   bandwidth cap fits one scan at the round's delay holds one unit at a
//!   time, though its two slots would hold more.

use beebot_shared::synth::{SynthConfig, SynthWeb};
use beebot_tests::*;

/// The rounds' politeness delay.
const DELAY_MS: u64 = 150;
/// N clients must end a round at least this share of N times sooner.
const SPEEDUP_TARGET: f64 = 0.8;
/// P-spider's web: sites of one size, enough of them that one client's
/// slots scan each several times over.
const SPEEDUP_SEED: u64 = 16;
const SPEEDUP_SITES: usize = 32;
const SPEEDUP_PAGES: usize = 5;
/// The client's default slots.
const SLOTS: u32 = 2;
/// A round time within this factor of the largest site's scan counts as
/// bounded by it (then no speed-up is owed).
const LARGEST_SITE_SLACK: f64 = 1.25;
/// EDG's web: power-law sizes up to a largest site that keeps a round
/// short even on the slowest client.
const EDG_SEED: u64 = 4242;
const EDG_SITES: usize = 15;
const EDG_MAX_PAGES: usize = 40;
/// The clients' pauses after every page: fast (the delay paces it),
/// medium, slow.
const EDG_THROTTLES_MS: [(&str, u64); 3] = [("fast", 0), ("medium", 150), ("slow", 450)];
/// `adaptive` may take at most this share of round-robin's time (timing
/// noise on a loaded machine; it is measured well ahead).
const ADAPTIVE_SLACK: f64 = 1.1;
/// Longest wait for one round.
const ROUND_TIMEOUT: &str = "240s";

/// Start a round under `policy`, run `clients` (name, throttle ms) with
/// `run --once` until it is over; its time, start to end, in seconds.
fn timed_round(g: &Grid, policy: &str, clients: &[(&str, u64)]) -> f64 {
    let delay = DELAY_MS.to_string();
    let o = g.admin_ok(&["round", "start", "--policy", policy, "--delay-ms", &delay]);
    let round = last_line(&o);
    let procs: Vec<ClientProc> = clients
        .iter()
        .map(|(name, t)| g.run_once(name, SLOTS, &["--throttle-ms", &t.to_string()]))
        .collect();
    g.wait_round(&round, ROUND_TIMEOUT);
    for (p, (name, _)) in procs.into_iter().zip(clients) {
        p.wait_ok(name);
    }
    let d = g.round_json(&round);
    assert_eq!(d["round"]["state"], "Done", "{d}");
    assert_eq!(d["counts"]["done"], d["counts"]["total"], "{d}");
    let created = d["round"]["created_ms"].as_u64().expect("created");
    let finished = d["round"]["finished_ms"].as_u64().expect("finished");
    (finished - created) as f64 / 1000.0
}

/// Every site's fetches (its URLs and robots.txt) at the delay: the
/// largest is the least any round can take.
fn largest_site_s(web: &SynthWeb) -> f64 {
    let largest = web
        .site_hosts()
        .iter()
        .filter_map(|h| web.site_urls(h))
        .max()
        .expect("sites");
    (largest + 1) as f64 * DELAY_MS as f64 / 1000.0
}

#[test]
fn two_clients_end_a_polite_round_close_to_twice_as_fast_as_one() {
    let web = SynthWeb::with_config(
        SPEEDUP_SEED,
        SPEEDUP_SITES,
        SynthConfig {
            min_pages_per_site: SPEEDUP_PAGES,
            max_pages_per_site: SPEEDUP_PAGES,
            crawl_delay_ms: None,
        },
    );
    let g = Grid::start_with(web);
    let code = g.invite(2);
    g.join("a", &code);
    g.join("b", &code);
    g.import_sites();
    let t1 = timed_round(&g, "adaptive", &[("a", 0)]);
    let t2 = timed_round(&g, "adaptive", &[("a", 0), ("b", 0)]);
    let largest = largest_site_s(&g.web);
    let speedup = t1 / t2;
    eprintln!(
        "1 client {t1:.1} s, 2 clients {t2:.1} s: T1/T2 {speedup:.2}; largest site {largest:.1} s"
    );
    // The round is built so its largest site does not bound it: the claim
    // is owed.
    assert!(
        t2 > LARGEST_SITE_SLACK * largest,
        "the round is bounded by its largest site ({largest:.1} s): make it larger"
    );
    assert!(
        speedup >= SPEEDUP_TARGET * 2.0,
        "two clients took {t2:.1} s, one {t1:.1} s: T1/T2 {speedup:.2} < {:.2}",
        SPEEDUP_TARGET * 2.0
    );
}

#[test]
fn adaptive_is_not_behind_round_robin_with_clients_of_different_speeds() {
    let g = Grid::start_with(SynthWeb::with_config(
        EDG_SEED,
        EDG_SITES,
        SynthConfig {
            max_pages_per_site: EDG_MAX_PAGES,
            ..SynthConfig::default()
        },
    ));
    let code = g.invite(EDG_THROTTLES_MS.len() as u32);
    for (name, _) in EDG_THROTTLES_MS {
        g.join(name, &code);
    }
    g.import_sites();
    let rr = timed_round(&g, "round-robin", &EDG_THROTTLES_MS);
    let adaptive = timed_round(&g, "adaptive", &EDG_THROTTLES_MS);
    eprintln!("round-robin {rr:.1} s, adaptive {adaptive:.1} s");
    assert!(
        adaptive <= ADAPTIVE_SLACK * rr,
        "adaptive took {adaptive:.1} s, round-robin {rr:.1} s"
    );
}

/// `pack`'s round: the delay, and a cap between one scan's draw at it
/// (a page's weight each page time: 150 to 200 KB/s) and two scans'.
const PACK_DELAY_MS: u64 = 150;
const PACK_BANDWIDTH_KBPS: u64 = 250;
const PACK_MEMORY_MB: u64 = 256;
const PACK_SITES: usize = 6;
const PACK_PAGES: usize = 3;

#[test]
fn pack_holds_a_machine_to_the_bandwidth_it_offers() {
    let g = Grid::start_with(SynthWeb::with_config(
        EDG_SEED,
        PACK_SITES,
        SynthConfig {
            min_pages_per_site: PACK_PAGES,
            max_pages_per_site: PACK_PAGES,
            crawl_delay_ms: None,
        },
    ));
    let code = g.invite(1);
    let host = g.join("capped", &code);
    for (k, v) in [
        ("bandwidth_kbps", PACK_BANDWIDTH_KBPS),
        ("memory_mb", PACK_MEMORY_MB),
    ] {
        let o = g.client("capped", &["config", "set", k, &v.to_string()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    g.import_sites();
    let delay = PACK_DELAY_MS.to_string();
    let round =
        last_line(&g.admin_ok(&["round", "start", "--policy", "pack", "--delay-ms", &delay]));
    let p = g.run_once("capped", SLOTS, &[]);
    g.wait_round(&round, ROUND_TIMEOUT);
    p.wait_ok("capped");
    // The server heard what the machine offers.
    let hosts: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["hosts", "list", "--json"]))).expect("json");
    let h = hosts
        .as_array()
        .expect("hosts")
        .iter()
        .find(|h| h["id"] == host)
        .expect("host");
    assert_eq!(h["resources"]["bandwidth_kbps"], PACK_BANDWIDTH_KBPS, "{h}");
    assert_eq!(h["resources"]["memory_mb"], PACK_MEMORY_MB, "{h}");
    // Each unit was issued after the one before had its result: one at a time.
    let d = g.round_json(&round);
    let mut spans: Vec<(u64, u64)> = d["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            let r = &j["result"];
            let unit = r["unit_id"].as_u64().expect("a result");
            let a = j["attempts"]
                .as_array()
                .expect("attempts")
                .iter()
                .find(|a| a["unit_id"] == unit)
                .expect("its attempt");
            (
                a["issued_ms"].as_u64().expect("issued"),
                r["accepted_ms"].as_u64().expect("accepted"),
            )
        })
        .collect();
    assert_eq!(spans.len(), PACK_SITES, "{d}");
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[1].0 >= w[0].1, "two units held at once: {spans:?}");
    }
}
