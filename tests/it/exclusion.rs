//! Exclusion that sticks (issue 18): `sites exclude HOST --reason` lists and
//! exports the host with its reason and date, refuses it on `sites add` and
//! `sites import` (the rest of the file is imported), and no round, at a
//! politeness delay or none, in `host` or `domain` scope, requests anything
//! of it (robots.txt included), as the synthetic web's request log shows;
//! `sites include` lifts it. A host excluded mid-round stops being crawled
//! within seconds. robots.txt groups for `BeeBot` are obeyed by that token.

use std::time::{Duration, Instant};

use beebot_testkit::synth::hostile::SSRF_PRIVATE_NAMES;
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::LoggedRequest;
use beebot_tests::{last_line, stderr, stdout, wait_for, Grid};

/// Small sites, so rounds at a politeness delay stay quick.
fn small_web(seed: u64, sites: usize, max_pages: usize) -> SynthWeb {
    SynthWeb::with_config(
        seed,
        sites,
        SynthConfig {
            min_pages_per_site: 3,
            max_pages_per_site: max_pages,
            crawl_delay_ms: None,
        },
    )
}

/// The `Host` header without its port.
fn host_of(r: &LoggedRequest) -> &str {
    r.host.rsplit_once(':').map_or(r.host.as_str(), |(h, _)| h)
}

fn requests_to<'a>(log: &'a [LoggedRequest], host: &str) -> Vec<&'a LoggedRequest> {
    log.iter().filter(|r| host_of(r) == host).collect()
}

/// Start a round with `args`, run one client to its end, and wait for the round.
fn run_round(g: &Grid, client: &str, args: &[&str]) -> String {
    let mut start = vec!["round", "start", "--max-pages", "200"];
    start.extend(args);
    let round = last_line(&g.admin_ok(&start));
    let resolve = format!("*.hostile.test={}", g.web_server.addr());
    let c = g.run_once(client, 2, &["--resolve", &resolve]);
    g.wait_round(&round, "120s");
    c.wait_ok(client);
    round
}

/// The state and why-not of `site` in round `round`.
fn site_line(g: &Grid, round: &str, site: &str) -> serde_json::Value {
    let json = g.round_json(round);
    json["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .find(|s| s["site"] == site)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn an_excluded_host_is_listed_refused_never_requested_in_any_scope_and_lifted() {
    let web = small_web(181, 3, 8);
    let g = Grid::start_with(web);
    g.import_sites();
    g.admin_ok(&["sites", "add", "ssrf.hostile.test"]);
    let excluded = "site1.synth.test";
    let sub = SSRF_PRIVATE_NAMES[0]; // inside ssrf.hostile.test's domain scope
    let other_sub = SSRF_PRIVATE_NAMES[1];

    exclusion_needs_a_reason_and_says_what_it_did(&g, excluded, sub);
    let at = exclusions_are_listed_with_reason_and_date(&g, excluded);
    exclusions_are_exported_as_tsv_and_json(&g, excluded, &at);
    an_excluded_host_is_refused_on_import_and_add(&g, excluded);
    let seen = rounds_in_domain_scope_never_request_excluded_hosts(&g, excluded, sub, other_sub);
    a_lifted_exclusion_is_crawled_again(&g, excluded, seen);
}

/// A reason is required, in the user's terms; excluding says what it did.
fn exclusion_needs_a_reason_and_says_what_it_did(g: &Grid, excluded: &str, sub: &str) {
    let o = g.admin(&["sites", "exclude", excluded]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--reason"), "{}", stderr(&o));
    let o = g.admin(&["sites", "exclude", excluded, "--reason", "  "]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("say why"), "{}", stderr(&o));

    let o = g.admin_ok(&[
        "sites",
        "exclude",
        &format!("http://www.{excluded}/any/page"),
        "--reason",
        "owner asked, ticket 42",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("removed {excluded} from the target set")),
        "{out}"
    );
    assert!(out.contains(&format!("excluded {excluded} on ")), "{out}");
    g.admin_ok(&["sites", "exclude", sub, "--reason", "intranet, not public"]);
}

/// The exclusions are listed as JSON with reason and date; returns the date of
/// `excluded` as listed.
fn exclusions_are_listed_with_reason_and_date(g: &Grid, excluded: &str) -> String {
    let o = g.admin_ok(&["sites", "exclusions", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), 2, "{list:?}");
    let e = list.iter().find(|e| e["host"] == excluded).expect("listed");
    assert_eq!(e["reason"], "owner asked, ticket 42");
    assert_eq!(e["subdomains"], false);
    let at = e["excluded_at"].as_str().expect("date");
    let ms = e["excluded_ms"].as_u64().expect("ms");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(now_ms.abs_diff(ms) < 120_000, "recorded now: {ms}");
    // `2026-11-30T22:20:05Z`: ISO 8601 in UTC, to the second.
    assert_eq!(at, beebot_server::api::iso_utc(ms));
    let shape: String = at
        .chars()
        .map(|c| if c.is_ascii_digit() { 'd' } else { c })
        .collect();
    assert_eq!(shape, "dddd-dd-ddTdd:dd:ddZ", "{at}");
    at.to_string()
}

/// The exclusions are exported as TSV (`excluded` dated `at`) and JSON.
fn exclusions_are_exported_as_tsv_and_json(g: &Grid, excluded: &str, at: &str) {
    let tsv = g.dir.path().join("exclusions.tsv");
    g.admin_ok(&[
        "sites",
        "exclusions",
        "--format",
        "tsv",
        "--out",
        tsv.to_str().expect("path"),
    ]);
    let text = std::fs::read_to_string(&tsv).expect("export");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("host\tsubdomains\texcluded_at\treason"));
    assert!(
        text.contains(&format!(
            "{excluded}\tfalse\t{at}\towner asked, ticket 42\n"
        )),
        "{text}"
    );
    let o = g.admin_ok(&["sites", "exclusions", "--format", "json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout(&o))
            .expect("json")
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

/// Re-importing the list skips the excluded host, naming the line; the rest
/// is there. `sites add` refuses it.
fn an_excluded_host_is_refused_on_import_and_add(g: &Grid, excluded: &str) {
    let list_file = g.dir.path().join("sites.txt");
    let o = g.admin_ok(&["sites", "import", list_file.to_str().expect("path")]);
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(out.contains("1 line(s) skipped as excluded"), "{out}");
    assert!(out.contains("3 in the target set"), "{out}");
    // Line 4: the comment, the blank line, site0, then site1.
    assert!(
        err.contains(&format!("line 4: skipped {excluded}: excluded")),
        "{err}"
    );
    assert!(err.contains("owner asked, ticket 42"), "{err}");
    let o = g.admin(&["sites", "add", "site0.synth.test", excluded]);
    assert_eq!(o.status.code(), Some(1), "a refused site fails `sites add`");
    assert!(
        stderr(&o).contains(&format!("refused {excluded}: excluded")),
        "{}",
        stderr(&o)
    );
    let o = g.admin_ok(&["sites", "list", "--json"]);
    let sites: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let names: Vec<&str> = sites
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["site"].as_str())
        .collect();
    assert!(!names.contains(&excluded) && names.len() == 3, "{names:?}");
}

/// Rounds in domain scope, at a delay and at none: the excluded hosts are
/// never asked for anything; the domain scope reaches the other subdomain,
/// so it would have reached this one. Returns how many requests the web
/// server has logged.
fn rounds_in_domain_scope_never_request_excluded_hosts(
    g: &Grid,
    excluded: &str,
    sub: &str,
    other_sub: &str,
) -> usize {
    let code = g.invite(1);
    g.join("a", &code);
    let mut seen = 0;
    for delay in ["40", "0"] {
        let round = run_round(g, "a", &["--scope", "domain", "--delay-ms", delay]);
        let log = g.web_server.request_log();
        let new = &log[seen..];
        seen = log.len();
        assert!(
            requests_to(new, excluded).is_empty(),
            "delay {delay}: {:?}",
            requests_to(new, excluded)
        );
        assert!(requests_to(new, &format!("www.{excluded}")).is_empty());
        assert!(
            requests_to(new, sub).is_empty(),
            "delay {delay}: {:?}",
            requests_to(new, sub)
        );
        assert!(
            !requests_to(new, other_sub).is_empty(),
            "delay {delay}: the domain scope reaches subdomains"
        );
        for site in ["site0.synth.test", "site2.synth.test", "ssrf.hostile.test"] {
            assert!(
                !requests_to(new, site).is_empty(),
                "delay {delay}: {site} crawled"
            );
            let line = site_line(g, &round, site);
            assert_eq!(line["state"], "Done", "delay {delay}: {line}");
        }
        assert!(
            site_line(g, &round, excluded).is_null(),
            "no job for an excluded site"
        );
    }
    seen
}

/// Lifted: said what it lifts; the site is added again and crawled (its
/// requests after the first `seen` of the web server's log).
fn a_lifted_exclusion_is_crawled_again(g: &Grid, excluded: &str, seen: usize) {
    let o = g.admin_ok(&["sites", "include", excluded]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("lifted the exclusion of {excluded}")),
        "{out}"
    );
    assert!(out.contains("owner asked, ticket 42"), "{out}");
    let o = g.admin(&["sites", "include", excluded]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not excluded"), "{}", stderr(&o));
    g.admin_ok(&["sites", "add", excluded]);
    run_round(g, "a", &["--delay-ms", "0"]);
    let log = g.web_server.request_log();
    assert!(
        !requests_to(&log[seen..], excluded).is_empty(),
        "crawled once lifted"
    );
    let o = g.admin_ok(&["sites", "exclusions", "--json"]);
    assert!(!stdout(&o).contains(excluded), "{}", stdout(&o));
}

/// A host excluded while its scan runs stops being requested within
/// seconds (its unit is dropped at the client's next contact), and its job
/// fails with the reason `excluded`; the rest of the round goes on.
#[test]
fn a_host_excluded_mid_scan_stops_being_crawled_and_its_job_fails_excluded() {
    // site0 has 40 pages: 8 s and more at 200 ms a request.
    let web = SynthWeb::with_config(
        77,
        2,
        SynthConfig {
            min_pages_per_site: 40,
            max_pages_per_site: 40,
            crawl_delay_ms: None,
        },
    );
    let g = Grid::start_with(web);
    g.import_sites();
    let code = g.invite(1);
    g.join("a", &code);
    let round =
        last_line(&g.admin_ok(&["round", "start", "--delay-ms", "200", "--max-pages", "200"]));
    let c = g.run_once("a", 2, &[]);
    let site = "site0.synth.test";
    wait_for(
        "the scan of site0 under way",
        Duration::from_secs(60),
        || requests_to(&g.web_server.request_log(), site).len() >= 3,
    );
    let o = g.admin_ok(&["sites", "exclude", site, "--reason", "owner asked mid-scan"]);
    let excluded_at = Instant::now();
    assert!(
        stdout(&o).contains("stopped 1 job(s) of running rounds"),
        "{}",
        stdout(&o)
    );
    g.wait_round(&round, "120s");
    c.wait_ok("client a");
    // Told at its next contact (a pushed hint, then a work request): a
    // request or two may still be under way right after the exclusion.
    let grace = excluded_at + Duration::from_secs(3);
    let late: Vec<_> = requests_to(&g.web_server.request_log(), site)
        .into_iter()
        .filter(|r| r.at > grace)
        .cloned()
        .collect();
    assert!(late.is_empty(), "requested after the exclusion: {late:?}");
    let log = g.web_server.request_log();
    let crawled = requests_to(&log, site).len();
    let last = requests_to(&log, site).iter().map(|r| r.at).max();
    eprintln!(
        "site0: {crawled} requests; the last {:?} after the exclusion",
        last.map(|t| t.saturating_duration_since(excluded_at))
    );
    assert!(
        crawled < 40,
        "the scan was stopped early: {crawled} requests"
    );
    let line = site_line(&g, &round, site);
    assert_eq!(line["state"], "Failed", "{line}");
    assert_eq!(
        line["why_not"], "failed: excluded: owner asked mid-scan",
        "{line}"
    );
    let other = site_line(&g, &round, "site1.synth.test");
    assert_eq!(other["state"], "Done", "{other}");
}

/// robots.txt that disallows `BeeBot` only: nothing but robots.txt is
/// requested; one that disallows another robot only: the site is crawled.
/// At a politeness delay and at none.
#[test]
fn a_robots_txt_group_for_beebot_stops_the_crawl_and_another_robots_does_not() {
    let mut web = small_web(5, 2, 8);
    assert!(web.set_robots_txt("site0.synth.test", "User-agent: BeeBot\nDisallow: /\n"));
    assert!(web.set_robots_txt(
        "site1.synth.test",
        "User-agent: OtherBot\nDisallow: /\n\nUser-agent: *\nDisallow: /private/\n"
    ));
    let pages1 = web.site_urls("site1.synth.test").expect("site1");
    let g = Grid::start_with(web);
    g.import_sites();
    let code = g.invite(1);
    g.join("a", &code);
    let mut seen = 0;
    for delay in ["30", "0"] {
        let round = run_round(&g, "a", &["--delay-ms", delay]);
        let log = g.web_server.request_log();
        let new = &log[seen..];
        seen = log.len();
        let paths: Vec<&str> = requests_to(new, "site0.synth.test")
            .iter()
            .map(|r| r.path.as_str())
            .collect();
        assert_eq!(paths, ["/robots.txt"], "delay {delay}");
        let line = site_line(&g, &round, "site0.synth.test");
        assert_eq!(line["pages"], 0, "delay {delay}: {line}");
        let crawled = requests_to(new, "site1.synth.test");
        assert_eq!(
            crawled.len(),
            pages1 + 1,
            "delay {delay}: every URL and robots.txt"
        );
        assert!(crawled.iter().all(|r| r.user_agent.starts_with("BeeBot/")));
        let line = site_line(&g, &round, "site1.synth.test");
        assert_eq!(line["state"], "Done", "{line}");
    }
}
