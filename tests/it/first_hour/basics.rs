//! What lost work in the first hour and is now refused: a second runner on
//! one home, a damaged invite code, and a host that takes units and drops
//! them (the broken host of a damaged code) taking a job past its limit.

use std::time::{Duration, Instant};

use beebot_shared::proto::{Request, Response};
use beebot_shared::sign;
use beebot_tests::hostile::join_raw;
use beebot_tests::*;

/// The attempt limit the rounds of this test run with.
const MAX_ATTEMPTS: u32 = 3;

/// Work requests the dropping host makes: well past the limit.
const REQUESTS: usize = 12;

/// A host that asks for work and then lists none of it as held (it dropped
/// every unit: a refused signature, a lost spool) fails the job at its
/// attempt limit, every attempt named released; no job gets a unit past the
/// limit. At a politeness delay and without one.
#[test]
fn a_host_that_drops_its_units_never_takes_a_job_past_its_attempt_limit() {
    for delay_ms in ["1000", "0"] {
        let g = Grid::start(74, 1);
        let code = g.invite(1);
        let dropper = join_raw(&g, "dropper", &code);
        g.import_sites();
        let round = last_line(&g.admin_ok(&[
            "round",
            "start",
            "--delay-ms",
            delay_ms,
            "--max-attempts",
            &MAX_ATTEMPTS.to_string(),
        ]));
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let units = rt.block_on(async {
            let link = dropper.hello().await.expect("hello");
            let mut units = Vec::new();
            for _ in 0..REQUESTS {
                let req = Request::RequestWork {
                    want_seconds: 60,
                    free_slots: 1,
                    units_held: vec![],
                    open_windows: None,
                };
                match link.request(&req).await {
                    Ok(Response::Work { units: got, .. }) => {
                        for s in got {
                            let u = sign::verify_unit(&dropper.project_key, &s).expect("signed");
                            units.push(u.unit_id);
                        }
                    }
                    other => panic!("work request: {other:?}"),
                }
            }
            link.close();
            units
        });
        assert_eq!(
            units.len(),
            MAX_ATTEMPTS as usize,
            "delay {delay_ms}: units issued for the one job: {units:?}"
        );
        let detail = g.round_json(&round);
        let site = &detail["sites"][0];
        assert_eq!(site["state"], "Failed", "delay {delay_ms}: {site}");
        assert_eq!(site["attempts"], MAX_ATTEMPTS, "delay {delay_ms}: {site}");
        let attempts = detail["jobs"][0]["attempts"].as_array().expect("attempts");
        assert!(
            attempts.iter().all(|a| a["state"] == "Released"),
            "delay {delay_ms}: {attempts:?}"
        );
        let over = last_line(&g.admin(&["round", "wait", &round, "--timeout", "10s"]));
        assert!(over.contains("INCOMPLETE"), "delay {delay_ms}: {over}");
    }
}

/// Two `beebot run` on one home: the second used to take the control socket
/// (now the status page's API) over and leave the first unreachable. Now it is refused naming the first,
/// which stays reachable; a runner killed leaves a stale lock that the next
/// takes over, and one that exits leaves the home free.
#[test]
fn a_second_runner_on_one_home_is_refused_and_the_first_stays_reachable() {
    let g = Grid::start(47, 1);
    let code = g.invite(1);
    g.join("a", &code);
    let log = g.home("a").join("runs.stderr");
    let mut first = g.spawn_run("a", &[], &log);
    let first_pid = first.id();
    wait_for(
        "the first runner's control API",
        Duration::from_secs(30),
        || g.client("a", &["resume"]).status.success(),
    );

    let flags = g.crawl_flags();
    a_second_runner_is_refused_naming_the_first(&g, &flags, first_pid);
    the_first_runner_still_answers(&g, first_pid);

    // Killed: its pid file stays, and the next runner takes over.
    first.kill().expect("kill");
    first.wait().expect("wait");
    let pid_file = g.home("a").join("run.pid");
    assert_eq!(
        std::fs::read_to_string(&pid_file).expect("pid file").trim(),
        first_pid.to_string()
    );
    let mut second = g.spawn_run("a", &[], &log);
    let second_pid = second.id();
    wait_for(
        "the second runner's control API",
        Duration::from_secs(30),
        || g.client("a", &["pause"]).status.success(),
    );
    wait_for(
        "the second runner's status",
        Duration::from_secs(10),
        || stdout(&g.client("a", &["status"])).contains(&format!("(pid {second_pid})")),
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains(&format!("taking over the home from pid {first_pid}")),
        "{text}"
    );

    // Stopped: the pid file goes and a new runner starts.
    let term = std::process::Command::new("kill")
        .args(["-TERM", &second_pid.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success());
    let status = second.wait().expect("wait");
    assert!(status.success(), "{status}");
    assert!(!pid_file.exists(), "{} left behind", pid_file.display());
    let mut once = vec!["run", "--once"];
    once.extend(flags.iter().map(String::as_str));
    let o = g.client("a", &once);
    assert!(o.status.success(), "run --once: {}", stderr(&o));
}

/// A second `beebot run` on the home (with `flags`) is refused quickly,
/// naming the first runner's pid, as an `error: ` line.
fn a_second_runner_is_refused_naming_the_first(g: &Grid, flags: &[String], first_pid: u32) {
    let mut args = vec!["run"];
    args.extend(flags.iter().map(String::as_str));
    let started = Instant::now();
    let o = g.client("a", &args);
    assert!(!o.status.success(), "the second runner should be refused");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused quickly, not after {:?}",
        started.elapsed()
    );
    let err = stderr(&o);
    assert!(
        err.contains(&format!("pid {first_pid}")) && err.contains("already running"),
        "{err}"
    );
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
}

/// The first runner (pid `first_pid`) is still the one that answers: it
/// pauses, says its pid in `status`, and resumes.
fn the_first_runner_still_answers(g: &Grid, first_pid: u32) {
    let o = g.client("a", &["pause"]);
    assert!(o.status.success(), "pause: {}", stderr(&o));
    wait_for("paused state", Duration::from_secs(10), || {
        g.status_json("a")["state"] == "paused"
    });
    let text = stdout(&g.client("a", &["status"]));
    assert!(text.contains(&format!("(pid {first_pid})")), "{text}");
    assert!(g.client("a", &["resume"]).status.success());
}

/// A code copied with a character changed in the middle, or its tail cut
/// off, is refused before anything is made: no host key, no enrolment, no
/// token spent, and the intact code still joins.
#[test]
fn a_damaged_invite_code_joins_nothing() {
    let g = Grid::start(37, 1);
    let code = g.invite(1);
    let mid = code.len() / 2;
    let swap = if code.as_bytes()[mid] == b'A' {
        "B"
    } else {
        "A"
    };
    let changed = format!("{}{swap}{}", &code[..mid], &code[mid + 1..]);
    let cut = &code[..code.len() - 2];
    for (name, bad) in [("changed", changed.as_str()), ("cut", cut)] {
        let o = g.client(name, &["join", bad]);
        assert!(!o.status.success(), "{name}: joined with a damaged code");
        let err = stderr(&o);
        assert!(
            err.contains(
                "this invite code is damaged (a character changed or missing): copy it again"
            ),
            "{err}"
        );
        assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
        assert!(!err.contains("expired"), "{err}");
        assert!(!err.to_lowercase().contains("base64"), "{err}");
        assert!(!g.home(name).join("host.key").exists(), "{name}: host key");
        assert!(
            !g.home(name).join("enrolment.json").exists(),
            "{name}: enrolment"
        );
    }
    assert!(!stdout(&g.admin_ok(&["hosts", "list"])).contains("changed"));
    g.join("intact", &code);
}
