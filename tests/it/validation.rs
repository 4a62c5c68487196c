//! Validation with honest hosts, end to end: every result of a first round
//! is checked by another host's scan, honest results agree (the similarity
//! of honest pairs on the synthetic web), hosts earn trust, and once they
//! are trusted their results are taken as they come. At a politeness delay
//! above zero and at zero.

use beebot_tests::*;

const SITES: usize = 10;

/// Two rounds over the synthetic web with three honest clients, under the
/// default policy (`adaptive`: its hedge copies meet the checks): the first
/// validates every result, the second is adaptive, with a host trusted
/// after one valid result and spot checks at 0% (so a trusted host's result
/// is never checked).
fn two_rounds(seed: u64, delay_ms: &str) {
    let g = a_grid_that_trusts_after_one_valid_result(seed);
    let truth = g.truth_rows();
    let mut check_pages = Vec::new();
    let mut names = vec!["a".to_string(), "b".to_string(), "c".to_string()];
    for (n, mode) in [(1, "all"), (2, "adaptive")] {
        let o = g.admin_ok(&["round", "start", "--validate", mode, "--delay-ms", delay_ms]);
        let round = last_line(&o);
        let clients: Vec<ClientProc> = names.iter().map(|name| g.run_once(name, 2, &[])).collect();
        g.wait_round(&round, "300s");
        for c in clients {
            c.wait_ok("client");
        }
        assert_same_rows(&g.export_rows(&round), &truth);
        let d = g.round_json(&round);
        let counts = &d["counts"];
        assert_eq!(counts["invalid"], 0, "round {n}: {counts:#}");
        assert_eq!(counts["pending"], 0, "round {n}: {counts:#}");
        assert_eq!(
            counts["valid"].as_u64().expect("valid") + counts["trusted"].as_u64().expect("trusted"),
            SITES as u64,
            "round {n}: {counts:#}"
        );
        honest_pairs_agree(&d, n, delay_ms);
        check_pages.push((
            counts["check_pages"].as_u64().expect("check pages"),
            counts["pages"].as_u64().expect("pages"),
        ));
        if n == 1 {
            names = every_site_was_checked_and_every_host_that_scanned_is_trusted(
                &g,
                counts,
                &check_pages,
            );
        } else {
            // Trusted hosts' results are taken as they come.
            assert_eq!(counts["trusted"], SITES as u64, "{counts:#}");
            assert_eq!(counts["check_pages"], 0, "{counts:#}");
        }
    }
}

/// A grid whose server trusts a host after one valid result and spot-checks
/// none, that said at the start of a validated round that it had too few
/// hosts, with three honest hosts joined since.
fn a_grid_that_trusts_after_one_valid_result(seed: u64) -> Grid {
    let mut g = Grid::start(seed, SITES);
    g.kill_server();
    let dir = beebot_server::config::DataDir(g.data_dir());
    let mut cfg = dir.load_config().expect("config");
    cfg.validation.trust_after = 1;
    cfg.validation.spot_check_percent = 0;
    dir.save_config(&cfg).expect("save config");
    g.start_server();
    g.import_sites();
    // A validated round with fewer than two hosts would never end: said at start.
    let o = g.admin_ok(&["round", "start", "--validate", "adaptive"]);
    assert!(
        stderr(&o).contains("validation is adaptive but 0 host(s) are enrolled"),
        "{}",
        stderr(&o)
    );
    g.admin_ok(&["round", "cancel", &last_line(&o)]);
    let code = g.invite(3);
    for name in ["a", "b", "c"] {
        g.join(name, &code);
    }
    g
}

/// Honest pairs agree: the similarity of every checked result (a trusted
/// site's results are not checked).
fn honest_pairs_agree(d: &serde_json::Value, n: u32, delay_ms: &str) {
    let counts = &d["counts"];
    let mut least = 1.0f64;
    for s in d["sites"].as_array().expect("sites") {
        for r in s["results"].as_array().expect("results") {
            if s["validation"] == "trusted" {
                assert_eq!(r["verdict"], "unchecked", "{s:#}");
                continue;
            }
            assert_eq!(r["verdict"], "valid", "{s:#}");
            least = least.min(r["similarity"].as_f64().expect("similarity"));
        }
    }
    eprintln!("delay {delay_ms} ms, round {n}: {counts}; least honest similarity {least}");
    assert!(least >= beebot_server::validate::MIN_SIMILARITY);
}

/// New hosts: every site was checked by a second host, and after one valid
/// result each every host that returned one is trusted; a host that got no
/// work (at zero delay the round can end before the third host asks) is
/// not. Returns the names of the trusted hosts, at least two.
fn every_site_was_checked_and_every_host_that_scanned_is_trusted(
    g: &Grid,
    counts: &serde_json::Value,
    check_pages: &[(u64, u64)],
) -> Vec<String> {
    assert_eq!(counts["valid"], SITES as u64, "{counts:#}");
    assert!(check_pages[0].0 >= check_pages[0].1 / 2, "{check_pages:?}");
    let hosts: serde_json::Value =
        serde_json::from_str(&stdout(&g.admin_ok(&["hosts", "list", "--json"])))
            .expect("hosts json");
    let hosts = hosts.as_array().expect("hosts");
    assert_eq!(hosts.len(), 3, "{hosts:#?}");
    let mut trusted = Vec::new();
    for h in hosts {
        let scanned = h["valid_results"].as_u64().expect("valid results") >= 1;
        assert_eq!(h["trusted"], scanned, "{h:#}");
        if scanned {
            assert!(h["consecutive_valid"].as_u64() >= Some(1), "{h:#}");
            trusted.push(h["info"]["name"].as_str().expect("name").to_string());
        }
    }
    assert!(trusted.len() >= 2, "{hosts:#?}");
    trusted
}

#[test]
fn honest_results_agree_and_trusted_hosts_cost_few_checks_at_a_polite_delay() {
    two_rounds(41, "20");
}

#[test]
fn honest_results_agree_and_trusted_hosts_cost_few_checks_at_delay_zero() {
    two_rounds(42, "0");
}

/// One desktop and a round that validates: its scans wait for a second
/// host. `round show` says so per site (not "queued, 0 pages"), `round
/// wait` gives up naming `--validate off`, and the round page's JSON says
/// the same; its progress counts the scans done. At a delay above zero and
/// at zero.
fn one_desktop_waits_for_a_second_host(seed: u64, delay_ms: &str) {
    let g = Grid::start(seed, 2);
    g.import_sites();
    g.join("solo", &g.invite(1));
    let round = last_line(&g.admin_ok(&[
        "round",
        "start",
        "--validate",
        "adaptive",
        "--delay-ms",
        delay_ms,
    ]));
    // The client stays for work to come (the round is open); it is
    // stopped once both sites are scanned.
    let client = g.run_once("solo", 2, &[]);
    wait_for(
        "both sites scanned",
        std::time::Duration::from_secs(240),
        || g.round_json(&round)["counts"]["scanned_to_check"] == 2,
    );
    client.kill();
    let show = stdout(&g.admin_ok(&["round", "show", &round]));
    assert_eq!(
        show.matches("scanned, waiting for a check by another host")
            .count(),
        2,
        "{show}"
    );
    assert!(show.contains("--validate off"), "{show}");
    let d = g.round_json(&round);
    assert_eq!(d["counts"]["scanned_to_check"], 2, "{d}");
    assert!(d["counts"]["pages"].as_u64().expect("pages") > 2, "{d}");
    let o = g.admin(&["round", "wait", &round, "--timeout", "2s"]);
    assert_eq!(o.status.code(), Some(3), "a timeout: {}", stderr(&o));
    assert!(stderr(&o).contains("--validate off"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("2 scanned waiting for a check"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn one_desktop_waits_for_a_second_host_at_a_delay() {
    one_desktop_waits_for_a_second_host(71, "300");
}

#[test]
fn one_desktop_waits_for_a_second_host_at_zero_delay() {
    one_desktop_waits_for_a_second_host(72, "0");
}
