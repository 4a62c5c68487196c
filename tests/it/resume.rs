//! Desktops stop, sleep and get killed: the real client against a real server
//! and the synthetic web on loopback. `run --once` exits as soon as its work
//! is delivered; SIGTERM stops a client mid-scan within 5 s with the scan
//! checkpointed; after SIGTERM or SIGKILL a restarted client resumes each
//! scan from its checkpoint (the web's request log shows no page fetched
//! before the checkpoint fetched again) and the round's export is the truth.
//!
//! Rounds here get a long `--max-deadline` and the server's default first
//! deadline (minutes): nothing is reissued while a client is down, so what
//! these tests see is the client's own resume.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use beebot_client::checkpoint::Checkpoint;
use beebot_client::home::Home;
use beebot_shared::scanstate::url_digest;
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::LoggedRequest;
use beebot_tests::*;

/// How fast a client must stop or exit (the figure).
const EXIT_WITHIN: Duration = Duration::from_secs(5);
/// Longest a test waits for any one thing to happen.
const WAIT: Duration = Duration::from_secs(120);

fn invite(g: &Grid) -> String {
    last_line(&g.admin_ok(&["invite", "--uses", "1", "--expires", "1h"]))
}

fn join(g: &Grid, name: &str) {
    let o = g.client(name, &["join", &invite(g), "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
}

/// `beebot run [--once]` for `name`, its log appended to `log`.
fn spawn_client(g: &Grid, name: &str, log: &Path, once: bool) -> Child {
    let args: &[&str] = if once {
        &["--slots", "2", "--once"]
    } else {
        &["--slots", "2"]
    };
    g.spawn_run(name, args, log)
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Wait for `child` to exit, at most `within`; returns how long it took.
fn wait_exit(child: &mut Child, within: Duration, what: &str, log: &Path) -> Duration {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("status") {
            assert!(status.success(), "{what}: exit {status}\n{}", read(log));
            return start.elapsed();
        }
        if start.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {within:?}\n{}", read(log));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn poll(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn home(g: &Grid, name: &str) -> Home {
    Home {
        config: g.home(name),
        data: g.home(name),
    }
}

/// The checkpoints in a client's spool, by unit.
fn checkpoints(g: &Grid, name: &str) -> BTreeMap<u64, Checkpoint> {
    let h = home(g, name);
    let dir = g.home(name).join("spool").join("scans");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "ckpt") {
            continue;
        }
        let Some(id) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
        else {
            continue;
        };
        if let Ok(Some((c, _))) = h.spool().checkpoint(id) {
            out.insert(id, c);
        }
    }
    out
}

fn request_url(r: &LoggedRequest) -> String {
    format!("http://{}{}", r.host, r.path)
}

/// Pages of the sites with a checkpoint, requested before it: the seen
/// digests that are not queued.
fn fetched_before(c: &Checkpoint) -> HashSet<u64> {
    let queued: HashSet<u64> = c.state.queue.iter().map(|q| url_digest(&q.url)).collect();
    c.state
        .seen
        .iter()
        .copied()
        .filter(|d| !queued.contains(d))
        .collect()
}

/// Sites of `pages` pages each (within a few), so a scan lasts as long as
/// the test needs at its politeness delay.
fn web_of(seed: u64, sites: usize, pages: usize) -> SynthWeb {
    SynthWeb::with_config(
        seed,
        sites,
        SynthConfig {
            min_pages_per_site: pages,
            max_pages_per_site: pages + pages / 10,
            ..SynthConfig::default()
        },
    )
}

fn start_round(g: &Grid, delay_ms: u64) -> String {
    g.import_sites();
    last_line(&g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        &delay_ms.to_string(),
        "--max-deadline",
        "2h",
    ]))
}

#[test]
fn run_once_on_a_fresh_home_exits_within_5s_of_its_last_upload() {
    // A fresh home: the reference-site benchmark is due, and must neither
    // start when the loop is about to exit nor hold the exit.
    let g = Grid::start(5, 3);
    join(&g, "a");
    let round = start_round(&g, 0);
    let log = g.dir.path().join("client-a.log");
    let mut c = spawn_client(&g, "a", &log, true);
    let mut last_upload = None;
    poll("three accepted results", || {
        let n = read(&log).matches("result uploaded").count();
        if n >= 3 && last_upload.is_none() {
            last_upload = Some(Instant::now());
        }
        last_upload.is_some() || c.try_wait().expect("status").is_some()
    });
    let last_upload = last_upload.expect("uploads seen before the exit");
    wait_exit(
        &mut c,
        EXIT_WITHIN + Duration::from_secs(1),
        "run --once",
        &log,
    );
    let after = last_upload.elapsed();
    assert!(
        after < EXIT_WITHIN,
        "exited {after:?} after its last upload:\n{}",
        read(&log)
    );
    g.wait_round(&round, "10s");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

/// Stop a client mid-scan with `signal`, restart it, and check the resume.
/// `wait_checkpoint`: kill only once a checkpoint is in the spool (SIGKILL
/// leaves no time to write one).
fn stop_mid_scan_and_resume(signal: &str, delay_ms: u64, pages: usize, wait_checkpoint: bool) {
    let mut g = Grid::start_with(web_of(31, 2, pages));
    join(&g, "a");
    let round = start_round(&g, delay_ms);
    let log = g.dir.path().join("client-a.log");
    let mut c = spawn_client(&g, "a", &log, false);
    wait_until_mid_scan(&g, wait_checkpoint);
    let stop_took = stop_with(&mut c, signal, &log);
    let stopped_at = g.web_server.request_log().len();
    let ckpts = checkpoints(&g, "a");
    let before =
        what_the_checkpoints_say_was_fetched(&g, &ckpts, stopped_at, signal, stop_took, &log);

    // Second life: resume, finish, deliver.
    let mut c = spawn_client(&g, "a", &log, true);
    g.wait_round(&round, "240s");
    wait_exit(&mut c, WAIT, "second life", &log);
    let text = read(&log);
    assert!(
        text.contains("scan resumed from its checkpoint"),
        "the restarted client resumed its scans:\n{text}"
    );
    let after = nothing_fetched_before_the_checkpoint_is_fetched_again(&g, &before, stopped_at);
    eprintln!(
        "{signal}: stopped in {stop_took:?}; {} checkpoints ({} pages before them); \
         {stopped_at} requests before the stop, {after} after",
        before.len(),
        ckpts.values().map(|c| c.state.pages_done).sum::<u64>(),
    );
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    assert!(
        checkpoints(&g, "a").is_empty(),
        "checkpoints go with their units"
    );
    g.kill_server();
}

/// Wait until client `a` is mid-scan: with `wait_checkpoint`, a periodic
/// checkpoint in its spool and a few pages past it (which the restarted
/// client fetches again); otherwise a dozen requests.
fn wait_until_mid_scan(g: &Grid, wait_checkpoint: bool) {
    let web_log = || g.web_server.request_log();
    if wait_checkpoint {
        poll("a periodic checkpoint", || !checkpoints(g, "a").is_empty());
        // A few pages past it, which the restarted client fetches again.
        let n = web_log().len();
        poll("pages past the checkpoint", || web_log().len() >= n + 3);
    } else {
        poll("a scan under way", || web_log().len() >= 12);
    }
}

/// Send `signal` to the client; anything but SIGKILL must stop it within
/// [`EXIT_WITHIN`]. How long the stop took.
fn stop_with(c: &mut Child, signal: &str, log: &Path) -> Duration {
    let pid = c.id().to_string();
    let sent = Instant::now();
    let o = run(
        std::process::Command::new("kill").args([signal, &pid]),
        Duration::from_secs(10),
    );
    assert!(o.status.success(), "kill {signal}: {}", stderr(&o));
    if signal == "-KILL" {
        let _ = c.wait();
    } else {
        let took = wait_exit(c, EXIT_WITHIN + Duration::from_secs(5), signal, log);
        assert!(
            took < EXIT_WITHIN,
            "stopped {took:?} after {signal}:\n{}",
            read(log)
        );
    }
    sent.elapsed()
}

/// A scan was checkpointed; what each checkpoint says was fetched, by site,
/// and a positive control: the requests before the stop do map onto those
/// digests.
fn what_the_checkpoints_say_was_fetched(
    g: &Grid,
    ckpts: &BTreeMap<u64, Checkpoint>,
    stopped_at: usize,
    signal: &str,
    stop_took: Duration,
    log: &Path,
) -> BTreeMap<String, HashSet<u64>> {
    assert!(
        !ckpts.is_empty(),
        "a scan was checkpointed ({signal}, {stop_took:?}):\n{}",
        read(log)
    );
    let mut before: BTreeMap<String, HashSet<u64>> = BTreeMap::new();
    for c in ckpts.values() {
        assert!(c.state.pages_done > 0, "{:?}", c.summary);
        assert_eq!(c.summary.links, c.records.len() as u64);
        before.insert(c.state.site.clone(), fetched_before(c));
    }
    let matched = g.web_server.request_log()[..stopped_at]
        .iter()
        .filter(|r| {
            before
                .get(&r.host)
                .is_some_and(|d| d.contains(&url_digest(&request_url(r))))
        })
        .count();
    assert!(matched > 0, "the checkpoints name pages the web served");
    before
}

/// After the restart no page a checkpoint names as fetched (nor its
/// robots.txt) is asked for again. How many requests came after the stop.
fn nothing_fetched_before_the_checkpoint_is_fetched_again(
    g: &Grid,
    before: &BTreeMap<String, HashSet<u64>>,
    stopped_at: usize,
) -> usize {
    let log = g.web_server.request_log();
    let after = &log[stopped_at..];
    for r in after {
        let Some(done) = before.get(&r.host) else {
            continue;
        };
        assert_ne!(
            r.path, "/robots.txt",
            "{}: robots.txt is in the checkpoint",
            r.host
        );
        assert!(
            !done.contains(&url_digest(&request_url(r))),
            "{} was fetched before the checkpoint and again after the restart",
            request_url(r)
        );
    }
    after.len()
}

#[test]
fn a_client_stopped_by_sigterm_mid_scan_exits_within_5s_and_resumes_from_its_checkpoint() {
    stop_mid_scan_and_resume("-TERM", 100, 60, false);
}

#[test]
fn a_client_sigkilled_mid_scan_resumes_from_its_last_periodic_checkpoint() {
    // Scans long enough (about 40 s at this delay) for the 30 s checkpoint.
    stop_mid_scan_and_resume("-KILL", 250, 160, true);
}

#[test]
fn a_request_in_flight_does_not_hold_a_sigterm() {
    // A page that drips a byte a second holds its request for a minute (the
    // request timeout): a stop must not wait for it, and the checkpoint is
    // the scan at its last page boundary, the dripping page still queued.
    let g = Grid::start(3, 1);
    join(&g, "a");
    g.admin_ok(&["sites", "add", "drip.hostile.test"]);
    g.admin_ok(&["round", "start", "--delay-ms", "0", "--max-deadline", "2h"]);
    let log = g.dir.path().join("client-a.log");
    let mut args = vec!["run", "--slots", "1"];
    let mut flags = g.crawl_flags();
    flags.push("--resolve".into());
    flags.push(format!("*.hostile.test={}", g.web_server.addr()));
    args.extend(flags.iter().map(String::as_str));
    let file = std::fs::File::create(&log).expect("client log");
    let mut c = g
        .client_cmd("a", &args)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("spawn client");
    poll("the dripping page requested", || {
        g.web_server
            .request_log()
            .iter()
            .any(|r| r.path == "/slow.html")
    });
    // Well inside the drip: the request is in flight.
    std::thread::sleep(Duration::from_millis(500));
    let o = run(
        std::process::Command::new("kill").args(["-TERM", &c.id().to_string()]),
        Duration::from_secs(10),
    );
    assert!(o.status.success());
    let took = wait_exit(&mut c, EXIT_WITHIN + Duration::from_secs(5), "-TERM", &log);
    assert!(
        took < EXIT_WITHIN,
        "stopped {took:?} after SIGTERM with a request in flight:\n{}",
        read(&log)
    );
    let ckpts = checkpoints(&g, "a");
    let drip = ckpts
        .values()
        .find(|c| c.state.site == "drip.hostile.test")
        .unwrap_or_else(|| panic!("the drip scan was checkpointed:\n{}", read(&log)));
    assert_eq!(drip.state.pages_done, 1, "{:?}", drip.state);
    assert!(
        drip.state
            .queue
            .iter()
            .any(|q| q.url == "http://drip.hostile.test/slow.html"),
        "the page in flight stays queued: {:?}",
        drip.state.queue
    );
}

#[test]
fn a_continuation_unit_whose_state_is_refused_does_not_hold_run_once() {
    // A continuation unit (signed by the project's key, issued to this
    // host) whose state the server does not give: its job is over, or the
    // state is gone. The client forgets it and goes on with its work;
    // `run --once` ends instead of asking for that state forever.
    use beebot_client::home::SpooledUnit;
    use beebot_shared::sign::{self, ResumeFrom, UnitLimits, WorkUnit};
    let g = Grid::start(5, 2);
    join(&g, "a");
    let round = start_round(&g, 0);
    let h = home(&g, "a");
    let host_id = h.identity().require_enrolment().expect("enrolled").host_id;
    let key = beebot_server::config::DataDir(g.data_dir())
        .load_project_key()
        .expect("project key");
    let site = g.web.site_hosts()[0].clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let unit = WorkUnit {
        unit_id: 987_654,
        round_id: 1,
        job_id: 1,
        host_id,
        seed_url: format!("http://{site}/"),
        site,
        scope: beebot_shared::scope::Scope::Host,
        limits: UnitLimits {
            max_pages: 100,
            max_depth: 10,
            delay_ms: 0,
            max_page_bytes: 1 << 20,
            max_seconds: 600,
            max_crawl_delay_ms: 1000,
        },
        issued_ms: now,
        deadline_ms: now + 3_600_000,
        user_agent: "BeeBot/test".into(),
        resume: Some(ResumeFrom {
            state_sha256: [7; 32],
            state_bytes: 100,
            pages_done: 3,
        }),
        exclusions: Vec::new(),
    };
    let signed = sign::sign_unit(&key, &unit).expect("sign");
    h.spool()
        .spool_unit(&SpooledUnit { signed, unit })
        .expect("spool the unit");
    let log = g.dir.path().join("client-a.log");
    let mut c = spawn_client(&g, "a", &log, true);
    wait_exit(&mut c, WAIT, "run --once", &log);
    let text = read(&log);
    assert!(text.contains("987654"), "the unit was seen:\n{text}");
    let spooled = g.home("a").join("spool").join("units").join("987654.unit");
    assert!(!spooled.exists(), "the unit is forgotten:\n{text}");
    g.wait_round(&round, "10s");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

/// A client SIGKILLed every few seconds mid-scan (the fault campaign's
/// schedule, at a 100 ms delay) repeats at most about
/// `CHECKPOINT_EVERY_PAGES` pages a kill: checkpoints come every so many
/// pages as well as every 30 s. With the 30 s interval alone no
/// checkpoint was ever written between such kills, and each life scanned
/// the site again from its first page.
#[test]
fn a_client_killed_again_and_again_repeats_at_most_a_checkpoints_pages_a_kill() {
    const KILLS: usize = 3;
    const LIFE: Duration = Duration::from_secs(8);
    let mut g = Grid::start_with(web_of(33, 1, 300));
    join(&g, "a");
    let round = start_round(&g, 100);
    let log = g.dir.path().join("client-a.log");
    for _ in 0..KILLS {
        let mut c = spawn_client(&g, "a", &log, false);
        std::thread::sleep(LIFE);
        stop_with(&mut c, "-KILL", &log);
    }
    let mut c = spawn_client(&g, "a", &log, true);
    g.wait_round(&round, "240s");
    wait_exit(&mut c, WAIT, "last life", &log);
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    let requests = g.web_server.request_log();
    let mut seen = HashSet::new();
    let pages: Vec<String> = requests
        .iter()
        .filter(|r| r.path != "/robots.txt")
        .map(request_url)
        .collect();
    let repeated = pages.iter().filter(|u| !seen.insert(u.as_str())).count();
    // Pages a kill may cost: a checkpoint's worth and the few in flight
    // (fixed here, so a longer checkpoint spacing fails the test).
    const MAX_REPEATED_PER_KILL: usize = 60;
    let every = beebot_client::checkpoint::CHECKPOINT_EVERY_PAGES as usize;
    assert!(
        every + 10 <= MAX_REPEATED_PER_KILL,
        "checkpoint every {every} pages"
    );
    eprintln!(
        "{KILLS} kills {LIFE:?} apart at 100 ms: {} page requests for {} pages, {repeated} repeated",
        pages.len(),
        seen.len()
    );
    assert!(
        repeated <= KILLS * MAX_REPEATED_PER_KILL,
        "{repeated} pages requested again over {KILLS} kills (checkpoint every {every} pages)"
    );
    g.kill_server();
}

/// Parts of the only job's running scan the server holds now.
fn parts_held(g: &Grid, round: &str) -> usize {
    g.round_json(round)["jobs"][0]["segments"]
        .as_array()
        .map_or(0, Vec::len)
}

/// `beebot run` for `name` on one slot, a part every second.
fn spawn_with_parts(g: &Grid, name: &str, log: &Path, extra: &[&str]) -> Child {
    let mut args = vec!["--slots", "1", "--part-every-s", "1"];
    args.extend(extra);
    g.spawn_run(name, &args, log)
}

/// One site of about 200 pages at `delay_ms` (`throttle` ms more a page):
/// a checkpoint, so a part, every 50 pages while it runs; the client is
/// killed once the server holds one, and restarted.
fn parts_survive_a_kill(delay_ms: u64, throttle: &str) {
    let g = Grid::start_with(web_of(41, 1, 200));
    join(&g, "a");
    let round = start_round(&g, delay_ms);
    let log = g.dir.path().join("client-a.log");
    let mut c = spawn_with_parts(&g, "a", &log, &["--throttle-ms", throttle]);
    poll("a part held by the server", || parts_held(&g, &round) >= 1);
    stop_with(&mut c, "-KILL", &log);
    let held = parts_held(&g, &round);
    // Second life: the scan resumes from its checkpoint, sends its next
    // parts after those the server holds, and its result after them.
    let mut c = spawn_with_parts(&g, "a", &log, &["--once", "--throttle-ms", throttle]);
    g.wait_round(&round, "240s");
    wait_exit(&mut c, WAIT, "second life", &log);
    let text = read(&log);
    assert!(text.contains("part accepted"), "{text}");
    assert!(!text.contains("part refused"), "{text}");
    let d = g.round_json(&round);
    let job = &d["jobs"][0];
    assert_eq!(job["state"], "Done", "{job:#}");
    let scans = job["candidates"][0]["segments"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(
        scans >= held.max(2),
        "its parts are the result's segments ({held} held at the kill): {job:#}"
    );
    // Every page's links once: no part held twice, none lost.
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

#[test]
fn a_scan_uploads_parts_as_it_goes_and_a_kill_between_them_loses_nothing() {
    parts_survive_a_kill(100, "0");
}

#[test]
fn without_a_delay_parts_survive_a_kill_as_well() {
    parts_survive_a_kill(0, "100");
}

#[test]
fn a_host_that_leaves_mid_scan_hands_its_site_on_from_its_last_part() {
    let g = Grid::start_with(web_of(43, 1, 200));
    join(&g, "a");
    let round = start_round(&g, 100);
    let log_a = g.dir.path().join("client-a.log");
    let mut a = spawn_with_parts(&g, "a", &log_a, &[]);
    poll("a part held by the server", || parts_held(&g, &round) >= 1);
    stop_with(&mut a, "-KILL", &log_a);
    let o = g.client("a", &["leave"]);
    assert!(o.status.success(), "leave: {}", stderr(&o));
    let left_at = g.web_server.request_log().len();
    let d = g.round_json(&round);
    let part_pages: u64 = d["jobs"][0]["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| s["summary"]["pages"].as_u64().unwrap_or(0))
        .sum();
    assert!(part_pages > 0, "{d:#}");
    // Another desktop takes the site over from the part, not the seed.
    join(&g, "b");
    let log_b = g.dir.path().join("client-b.log");
    let mut b = spawn_with_parts(&g, "b", &log_b, &["--once"]);
    g.wait_round(&round, "240s");
    wait_exit(&mut b, WAIT, "the second desktop", &log_b);
    let after = &g.web_server.request_log()[left_at..];
    let pages_after = after.iter().filter(|r| r.path != "/robots.txt").count();
    assert!(
        after.iter().all(|r| r.path != "/"),
        "the seed page was fetched again after the hand-on"
    );
    let total = g
        .web
        .truth()
        .iter()
        .map(|(_, r)| r.source_url.clone())
        .collect::<HashSet<_>>()
        .len();
    assert!(
        (pages_after as u64) + part_pages <= total as u64 + 60,
        "{pages_after} pages after the leave, {part_pages} in the parts, {total} sources in all"
    );
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}
