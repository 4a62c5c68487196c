//! Crashes, inflicted on the real binaries: the server SIGKILLed twenty times
//! during a round (some kills aimed at the moment a link file lands, i.e. mid
//! upload), clients SIGKILLed during scans and uploads. After every restart the
//! store opens, every result a client saw `Accepted` is present and readable,
//! and in the end the round equals the synthetic web's truth with each job
//! counted once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use beebot_server::grid::{pack_files, LinkFiles, LinkPacks, MAX_TORN_TAIL_BYTES};
use beebot_tests::*;

/// Server kills in the server crash test (the issue asks for at least 20).
const SERVER_KILLS: usize = 20;
/// Client kills in the client crash test.
const CLIENT_KILLS: usize = 8;
/// Longest a test waits for any one thing to happen.
const WAIT: Duration = Duration::from_secs(60);

fn invite(g: &Grid, uses: u32) -> String {
    last_line(&g.admin_ok(&["invite", "--uses", &uses.to_string(), "--expires", "1h"]))
}

fn join(g: &Grid, name: &str, code: &str) {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
}

/// Start `beebot run --once` for `name`, logging to `log` (appended).
fn spawn_client(g: &Grid, name: &str, log: &Path, slots: &str) -> Child {
    g.spawn_run(name, &["--once", "--slots", slots], log)
}

/// Strip ANSI escapes, should a log have them anyway.
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Unit ids a client log says the server answered `Accepted` for.
fn accepted_units(log: &Path) -> BTreeSet<u64> {
    let text = plain(&std::fs::read_to_string(log).unwrap_or_default());
    text.lines()
        .filter(|l| l.contains("result uploaded"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("unit_id="))
                .and_then(|n| n.parse().ok())
        })
        .collect()
}

fn round_json(g: &Grid, id: &str) -> serde_json::Value {
    let o = g.admin_ok(&["round", "show", id, "--json"]);
    serde_json::from_str(&stdout(&o)).expect("round json")
}

fn jobs(d: &serde_json::Value) -> &Vec<serde_json::Value> {
    d["jobs"].as_array().expect("jobs")
}

/// Every accepted unit is the result of its job, and its link file is in
/// the server's link packs and decodes to the job's site.
fn assert_accepted_present(g: &Grid, round: &str, accepted: &BTreeSet<u64>, when: &str) {
    let d = round_json(g, round);
    let by_unit: BTreeMap<u64, &serde_json::Value> = jobs(&d)
        .iter()
        .filter_map(|j| Some((j["result"]["unit_id"].as_u64()?, j)))
        .collect();
    for unit in accepted {
        let Some(job) = by_unit.get(unit) else {
            panic!(
                "{when}: unit {unit} was answered Accepted but its job has no such result:\n{d}"
            );
        };
        assert_eq!(job["state"], "Done", "{when}: job of unit {unit}: {job}");
        let file = job["result"]["file"].as_str().expect("result file");
        let bytes = LinkPacks::new(g.data_dir().join("links"))
            .read(file)
            .unwrap_or_else(|e| panic!("{when}: link file {file} of unit {unit}: {e}"));
        let (header, _) = beebot_shared::linkfile::decode(&bytes)
            .unwrap_or_else(|e| panic!("{when}: link file {file} of unit {unit} unreadable: {e}"));
        assert_eq!(header.unit_id, *unit, "{when}");
        assert_eq!(Some(header.site.as_str()), job["site"].as_str(), "{when}");
    }
}

/// Every job done by exactly one attempt, and the hosts' done counters sum to the jobs.
fn assert_each_job_counted_once(g: &Grid, d: &serde_json::Value, n_jobs: usize) {
    for j in jobs(d) {
        let done = j["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .filter(|a| a["state"] == "Done")
            .count();
        assert_eq!(done, 1, "job done by exactly one attempt: {j}");
    }
    assert_eq!(jobs(d).len(), n_jobs);
    // `hosts list`: its `jobs` column, jobs done.
    let o = g.admin_ok(&["hosts", "list"]);
    let out = stdout(&o);
    let column = out
        .lines()
        .next()
        .and_then(|h| h.split('\t').position(|c| c == "jobs"))
        .expect("jobs column");
    let done: u64 = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').nth(column)?.parse::<u64>().ok())
        .sum();
    assert_eq!(done, n_jobs as u64, "hosts' done counters: {}", stdout(&o));
}

/// Link files whole in the packs under `dir` (read as an export beside the
/// server reads them: up to the first frame that is not whole).
fn link_files(dir: &Path) -> usize {
    LinkPacks::new(dir)
        .names()
        .map_or(0, |n| n.iter().filter(|n| n.ends_with(".lf")).count())
}

/// The project's seeded generator, seeded per test; the seed is printed.
struct Rng(beebot_shared::rng::SplitMix64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(beebot_shared::rng::SplitMix64::new(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
}

fn seed() -> u64 {
    std::env::var("BEEBOT_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(0x9e37_79b9)
        })
}

#[test]
fn server_killed_twenty_times_mid_round_loses_nothing_acknowledged() {
    let seed = seed();
    eprintln!("crash seed {seed} (rerun with BEEBOT_CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let mut g = Grid::start(41, 48);
    let code = invite(&g, 2);
    let names = ["a", "b"];
    for n in names {
        join(&g, n, &code);
    }
    g.import_sites();
    let round = last_line(&g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        "50",
        "--max-attempts",
        "100",
    ]));
    let logs: Vec<PathBuf> = names
        .iter()
        .map(|n| g.dir.path().join(format!("client-{n}.log")))
        .collect();
    let mut clients: Vec<Child> = names
        .iter()
        .zip(&logs)
        .map(|(n, l)| spawn_client(&g, n, l, "2"))
        .collect();
    let links_dir = g.data_dir().join("links");
    let mut aimed_hits = 0;
    for kill in 0..SERVER_KILLS {
        // Half the kills land the moment a new link file appears (the upload is
        // written but not yet answered); the others at a random moment.
        let aimed = kill % 2 == 1;
        let before = link_files(&links_dir);
        let start = Instant::now();
        let budget = Duration::from_millis(100 + rng.below(900));
        if wait_for_the_moment_to_kill(&links_dir, aimed, before, start, budget) {
            aimed_hits += 1;
        }
        eprintln!(
            "kill {}: aimed {aimed}, waited {:?}, link files {}",
            kill + 1,
            start.elapsed(),
            link_files(&links_dir)
        );
        g.kill_server();
        let accepted: BTreeSet<u64> = logs.iter().flat_map(|l| accepted_units(l)).collect();
        g.start_server();
        assert_accepted_present(&g, &round, &accepted, &format!("after kill {}", kill + 1));
        for (c, n) in clients.iter_mut().zip(names) {
            if let Some(status) = c.try_wait().expect("client status") {
                assert!(status.success(), "client {n} died: {status}");
            }
        }
    }
    assert!(aimed_hits > 0, "no aimed kill hit a link file landing");
    g.wait_round(&round, "240s");
    for mut c in clients {
        let status = c.wait().expect("client");
        assert!(status.success(), "client: {status}");
    }
    assert_link_packs_torn_by_one_append_at_most(&links_dir.join(&round));
    let accepted: BTreeSet<u64> = logs.iter().flat_map(|l| accepted_units(l)).collect();
    assert_accepted_present(&g, &round, &accepted, "at the end");
    let d = round_json(&g, &round);
    assert_eq!(d["round"]["state"], "Done");
    assert_each_job_counted_once(&g, &d, 48);
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

/// Wait for the moment of one server kill: with `aimed`, a link file landing
/// (more than `before` under `links_dir`), otherwise `budget` after `start`;
/// never longer than [`WAIT`]. Whether an aimed kill hit a link file landing.
fn wait_for_the_moment_to_kill(
    links_dir: &Path,
    aimed: bool,
    before: usize,
    start: Instant,
    budget: Duration,
) -> bool {
    loop {
        if aimed && link_files(links_dir) > before {
            return true;
        }
        if !aimed && start.elapsed() >= budget {
            return false;
        }
        if start.elapsed() > WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What a kill interrupted mid-append is at most one frame at the end of a
/// pack (never appended to again), and no temporary is left. Read once the
/// writes are over.
fn assert_link_packs_torn_by_one_append_at_most(round_links: &Path) {
    let packs = pack_files(round_links).expect("round's link packs");
    assert!(!packs.is_empty(), "the round's link files are packed");
    let torn: Vec<_> = packs
        .iter()
        .filter(|(_, len, whole)| len - whole > MAX_TORN_TAIL_BYTES)
        .collect();
    assert!(torn.is_empty(), "link packs torn past one append: {torn:?}");
    let stray: Vec<_> = std::fs::read_dir(round_links)
        .expect("round's links")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
        .collect();
    assert!(stray.is_empty(), "temporary link files left: {stray:?}");
}

fn spool_files(g: &Grid, name: &str, sub: &str, ext: &str) -> BTreeSet<PathBuf> {
    std::fs::read_dir(g.home(name).join("spool").join(sub))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect()
        })
        .unwrap_or_default()
}

fn spool_count(g: &Grid, name: &str, sub: &str, ext: &str) -> usize {
    spool_files(g, name, sub, ext).len()
}

#[test]
fn client_killed_during_scans_and_uploads_resumes_and_each_job_counts_once() {
    let seed = seed();
    eprintln!("crash seed {seed} (rerun with BEEBOT_CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let g = Grid::start(43, 24);
    join(&g, "a", &invite(&g, 1));
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "15"]));
    let log = g.dir.path().join("client-a.log");
    let mut during_upload = 0;
    for kill in 0..CLIENT_KILLS {
        let mut c = spawn_client(&g, "a", &log, "2");
        let start = Instant::now();
        // Odd kills: the moment a finished result is spooled (its upload is
        // next or under way); even kills: a random moment (mostly mid-scan).
        let aimed = kill % 2 == 1;
        let results_before = spool_files(&g, "a", "results", "summary");
        let budget = Duration::from_millis(200 + rng.below(1300));
        loop {
            if aimed && !spool_files(&g, "a", "results", "summary").is_subset(&results_before) {
                during_upload += 1;
                break;
            }
            if (!aimed && start.elapsed() >= budget) || start.elapsed() > WAIT {
                break;
            }
            if c.try_wait().expect("status").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
    eprintln!("{CLIENT_KILLS} client kills, {during_upload} with a result waiting for upload");
    // Last life: run to the end.
    let c = spawn_client(&g, "a", &log, "2");
    g.wait_round(&round, "240s");
    let out = c.wait_with_output().expect("client");
    assert!(out.status.success(), "client: {}", out.status);
    let text = plain(&std::fs::read_to_string(&log).unwrap_or_default());
    assert!(
        text.contains("resuming spooled unit"),
        "a restarted client resumed from its spool:\n{text}"
    );
    assert!(!text.contains("refused a spooled unit"), "{text}");
    let d = round_json(&g, &round);
    assert_eq!(d["round"]["state"], "Done");
    assert_each_job_counted_once(&g, &d, 24);
    // Every accepted unit is the one its job holds, each once.
    let accepted = accepted_units(&log);
    assert_accepted_present(&g, &round, &accepted, "at the end");
    assert_eq!(spool_count(&g, "a", "units", "unit"), 0, "spool emptied");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
}

/// Whether this machine lets a test mount a small filesystem in its own
/// namespace (`unshare -rm`: user and mount namespaces, no privileges needed).
fn namespaces_available() -> bool {
    std::process::Command::new("unshare")
        .args(["-rm", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Processes a test started outside the harness (a server in its own
/// namespace, clients): when the test fails they are killed with it, so
/// nothing outlives a failed test.
struct KillOnPanic {
    pids: Vec<u32>,
    /// A data dir whose running server (by `serve.json`) is killed too.
    data: PathBuf,
}

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let server = beebot_server::config::DataDir(self.data.clone())
            .load_runtime()
            .map(|r| r.pid);
        for pid in server.iter().chain(&self.pids) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// Wait until the log at `path` says `needle`; fail saying `what` otherwise.
fn wait_for_log(path: &Path, needle: &str, what: &str) {
    let start = Instant::now();
    while !plain(&std::fs::read_to_string(path).unwrap_or_default()).contains(needle) {
        assert!(
            start.elapsed() < WAIT,
            "{what}:\n{}",
            std::fs::read_to_string(path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A grid with host "a" joined and a round started, its server stopped so a
/// test can start it its own way. Where this machine cannot mount a small
/// filesystem the test fails, or with [`beebot_tests::ALLOW_MISSING_TOOLS`]
/// is skipped (`None`).
fn grid_for_disk_tests(seed: u64, sites: usize, delay_ms: &str) -> Option<(Grid, String)> {
    if !namespaces_available() {
        beebot_tests::tool_missing(
            "unshare -rm",
            "mount a small filesystem (user and mount namespaces)",
        );
        return None;
    }
    let mut g = Grid::start(seed, sites);
    join(&g, "a", &invite(&g, 1));
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", delay_ms]));
    g.kill_server();
    Some((g, round))
}

/// Run `script` (which starts the server on `data`) in its own user and
/// mount namespace, its output to `log`; returns once the server is up.
fn start_in_namespace(script: &str, data: &Path, log: &Path) -> (Child, KillOnPanic) {
    let _ = std::fs::remove_file(data.join("serve.json"));
    let mut shell = Command::new("unshare")
        .args(["-rm", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("spawn server");
    let reap = KillOnPanic {
        pids: vec![shell.id()],
        data: data.to_path_buf(),
    };
    let start = Instant::now();
    while !data.join("serve.json").exists() {
        assert!(
            start.elapsed() < WAIT && shell.try_wait().expect("shell").is_none(),
            "server in its namespace did not start:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (shell, reap)
}

/// A shell line that mounts a full filesystem (one 4 KiB page, filled) on `dir`.
fn full_fs(dir: &Path) -> String {
    format!(
        "mkdir -p '{d}' && mount -t tmpfs -o size=4k tmpfs '{d}' && \
         dd if=/dev/zero of='{d}/filler' bs=4096 count=1 2>/dev/null; ",
        d = dir.display()
    )
}

/// A shell line that makes `dir` read-only (a read-only bind mount of itself).
fn read_only_fs(dir: &Path) -> String {
    format!(
        "mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}' && ",
        d = dir.display()
    )
}

fn assert_clear_error(o: &std::process::Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "should have failed:\n{err}");
    assert!(!err.contains("panicked"), "a panic:\n{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: ") && l.contains(needle)),
        "one clear `error:` line saying `{needle}`:\n{err}"
    );
}

#[test]
fn full_or_read_only_disks_give_clear_errors_and_lose_nothing() {
    let Some((mut g, round)) = grid_for_disk_tests(47, 5, "0") else {
        return;
    };
    let data = g.data_dir();
    a_read_only_data_dir_keeps_the_server_from_starting(&data);
    let listing = g.dir.path().join("links-listing.txt");
    let client_log = g.dir.path().join("client-a.log");
    let (mut client, mut reap) =
        a_full_links_disk_acknowledges_nothing(&g, &data, &listing, &client_log);

    // Space again: the client delivers everything and the round is exact.
    g.start_server();
    g.wait_round(&round, "240s");
    let status = client.wait().expect("client");
    assert!(status.success(), "client: {status}");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());

    a_full_spool_gives_a_clear_error_then_resumes(&g, &listing, &client_log, &mut reap);
}

/// Read-only data dir: the server refuses to start, with a clear error.
fn a_read_only_data_dir_keeps_the_server_from_starting(data: &Path) {
    let o = run(
        Command::new("unshare")
            .env("BEEBOT_CPU_PERCENT", LAB_CPU_PERCENT)
            .args(["-rm", "sh", "-c"])
            .arg(format!(
                "{}exec '{}' serve --data-dir '{}'",
                read_only_fs(data),
                bin("beebot-server").display(),
                data.display()
            )),
        WAIT,
    );
    assert_clear_error(&o, "");
    assert!(
        stderr(&o).to_lowercase().contains("read-only"),
        "{}",
        stderr(&o)
    );
}

/// Full disk under links/: uploads are answered with an error, nothing is
/// acknowledged, no half-written file is left, and the server keeps serving
/// (until it is stopped). The client still running, and what reaps it.
fn a_full_links_disk_acknowledges_nothing(
    g: &Grid,
    data: &Path,
    listing: &Path,
    client_log: &Path,
) -> (Child, KillOnPanic) {
    let links = data.join("links");
    let full_log = g.dir.path().join("server-full.log");
    let (mut full_server, mut reap) = start_in_namespace(
        &format!(
            "{}'{}' serve --data-dir '{}'; find '{}' -type f -printf '%p %s\\n' > '{}'",
            full_fs(&links),
            bin("beebot-server").display(),
            data.display(),
            links.display(),
            listing.display()
        ),
        data,
        &full_log,
    );
    let mut client = spawn_client(g, "a", client_log, "2");
    reap.pids.push(client.id());
    wait_for_log(
        &full_log,
        "cannot write link file",
        "no upload failed on the full disk",
    );
    assert!(
        client.try_wait().expect("client").is_none(),
        "client keeps going"
    );
    let text = plain_log(client_log);
    assert!(
        !text.contains("result uploaded"),
        "nothing acknowledged: {text}"
    );
    // Stop the server politely so the shell lists what it left under links/.
    let pid = beebot_server::config::DataDir(data.to_path_buf())
        .load_runtime()
        .expect("serve.json")
        .pid;
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = full_server.wait();
    // Besides the filler, at most packs the failed appends were cut from:
    // empty, no frame of them left.
    let left = std::fs::read_to_string(listing).expect("listing");
    assert!(
        left.lines()
            .all(|l| l.contains("/filler ") || (l.contains("/pack-") && l.ends_with(".lfp 0"))),
        "no half-written link file: {left}"
    );
    let server_text = plain_log(&full_log);
    assert!(!server_text.contains("panicked"), "{server_text}");
    (client, reap)
}

/// The client's spool on a full disk: a clear error, nothing half-written;
/// with space again the spooled units resume and a new round completes.
fn a_full_spool_gives_a_clear_error_then_resumes(
    g: &Grid,
    listing: &Path,
    client_log: &Path,
    reap: &mut KillOnPanic,
) {
    let round2 = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    let results = g.home("a").join("spool").join("results");
    let mut args = vec!["run".to_string(), "--once".into()];
    args.extend(g.crawl_flags());
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let o = run(
        Command::new("unshare")
            .env("BEEBOT_CPU_PERCENT", LAB_CPU_PERCENT)
            .args(["-rm", "sh", "-c"])
            .arg(format!(
                "{}'{}' {} --home '{}'; rc=$?; find '{}' -type f > '{}'; exit $rc",
                full_fs(&results),
                bin("beebot").display(),
                quoted.join(" "),
                g.home("a").display(),
                results.display(),
                listing.display()
            )),
        WAIT,
    );
    assert_clear_error(&o, "cannot write");
    let left = std::fs::read_to_string(listing).expect("listing");
    assert!(
        left.lines().all(|l| l.ends_with("/filler")),
        "no half-written result: {left}"
    );
    // Space again: the spooled units resume and the round completes.
    let c = spawn_client(g, "a", client_log, "2");
    reap.pids.push(c.id());
    g.wait_round(&round2, "240s");
    let status = c.wait_with_output().expect("client").status;
    assert!(status.success());
    assert_same_rows(&g.export_rows(&round2), &g.truth_rows());
}

/// A log file's text, ANSI escapes stripped (empty if it cannot be read).
fn plain_log(path: &Path) -> String {
    plain(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Where the store-disk test keeps its files: the store copied out before
/// the full disk, and the files that trigger and report the fill and the
/// space freed again.
struct StoreDisk {
    store: PathBuf,
    keep: PathBuf,
    trigger: PathBuf,
    filled: PathBuf,
    free: PathBuf,
    freed: PathBuf,
}

impl StoreDisk {
    /// The paths for grid `g`, the work dir made.
    fn new(g: &Grid) -> StoreDisk {
        let work = g.dir.path().join("store-disk");
        let disk = StoreDisk {
            store: g.data_dir().join("store"),
            keep: work.join("keep"),
            trigger: work.join("fill-now"),
            filled: work.join("filled"),
            free: work.join("free-now"),
            freed: work.join("freed"),
        };
        std::fs::create_dir_all(&disk.keep).expect("work dir");
        disk
    }

    /// In its own mount namespace: the store moves onto a 128 MiB tmpfs, the
    /// server starts, on the first trigger the tmpfs is filled to the last
    /// byte, and on the second the filler goes again.
    fn script(&self, data: &Path) -> String {
        format!(
            "cp -a '{s}/.' '{keep}/' && mount -t tmpfs -o size=128m tmpfs '{s}' && \
             cp -a '{keep}/.' '{s}/' || exit 1; \
             '{server}' serve --data-dir '{data}' & pid=$!; \
             while [ ! -e '{trigger}' ]; do sleep 0.05; done; \
             dd if=/dev/zero of='{s}/filler' bs=65536 2>/dev/null; touch '{filled}'; \
             while [ ! -e '{free}' ]; do sleep 0.05; done; \
             rm -f '{s}/filler'; touch '{freed}'; wait $pid",
            s = self.store.display(),
            keep = self.keep.display(),
            server = bin("beebot-server").display(),
            data = data.display(),
            trigger = self.trigger.display(),
            filled = self.filled.display(),
            free = self.free.display(),
            freed = self.freed.display(),
        )
    }

    /// A few results accepted, then the disk fills.
    fn fill_after_a_few_results(&self, client_log: &Path, server_log: &Path) {
        let start = Instant::now();
        while accepted_units(client_log).len() < 3 {
            assert!(
                start.elapsed() < WAIT,
                "no result uploaded:\n{}",
                plain_log(server_log)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::write(&self.trigger, b"").expect("trigger");
        let start = Instant::now();
        while !self.filled.exists() {
            assert!(start.elapsed() < WAIT, "the disk was not filled");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The filler goes: the disk takes writes again.
    fn free_the_space(&self) {
        std::fs::write(&self.free, b"").expect("trigger");
        let start = Instant::now();
        while !self.freed.exists() {
            assert!(start.elapsed() < WAIT, "the disk was not freed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The disk under the sled store itself fills up mid-round: the server stops
/// acknowledging (fail-stop, one clear error, its metric at 1), clients
/// keep their results, and once space is back the server starts afresh by
/// itself (the same process: nobody restarts it), every result answered
/// `Accepted` before is there and the round completes with the exact truth.
#[test]
fn a_full_disk_under_the_store_stops_acknowledging_and_recovers_with_space() {
    let Some((g, round)) = grid_for_disk_tests(53, 60, "50") else {
        return;
    };
    let data = g.data_dir();
    let disk = StoreDisk::new(&g);
    let server_log = g.dir.path().join("server-store-full.log");
    let (mut shell, mut reap) = start_in_namespace(&disk.script(&data), &data, &server_log);
    let client_log = g.dir.path().join("client-a.log");
    let mut client = spawn_client(&g, "a", &client_log, "2");
    reap.pids.push(client.id());
    disk.fill_after_a_few_results(&client_log, &server_log);
    a_large_import_fails_on_the_full_store(&g);
    let accepted =
        the_store_fails_once_and_the_client_keeps_going(&server_log, &client_log, &mut client);
    reads_go_on_and_show_the_failure(&g, &round);
    let dir = beebot_server::config::DataDir(data.clone());
    let pid = dir.load_runtime().expect("serve.json").pid;
    disk.free_the_space();

    // Space again: the same process serves afresh from its store; everything
    // acknowledged is there, and the round completes exact.
    wait_for_log(
        &server_log,
        "space is back",
        "the server never saw the space come back",
    );
    let start = Instant::now();
    let serving = |text: &str| {
        text.lines()
            .filter(|l| l.contains("serving") && l.contains("quic="))
            .count()
    };
    while serving(&plain_log(&server_log)) < 2 {
        assert!(
            start.elapsed() < WAIT && shell.try_wait().expect("shell").is_none(),
            "the server did not serve again:\n{}",
            plain_log(&server_log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        dir.load_runtime().expect("serve.json again").pid,
        pid,
        "the same process serves again"
    );
    assert_accepted_present(&g, &round, &accepted, "after the full disk");
    g.wait_round(&round, "240s");
    let status = client.wait().expect("client");
    assert!(status.success(), "client: {status}");
    let d = round_json(&g, &round);
    assert_each_job_counted_once(&g, &d, 60);
    let accepted = accepted_units(&client_log);
    assert_accepted_present(&g, &round, &accepted, "at the end");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    let store_failed = scrape_line(&g, "beebot_store_failed ");
    assert_eq!(store_failed, "beebot_store_failed 0", "after the recovery");
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let status = shell.wait().expect("shell");
    assert!(status.success(), "{status}\n{}", plain_log(&server_log));
}

/// The body of `GET path` on the admin API, with its token (200 asserted).
fn admin_get(g: &Grid, path: &str) -> String {
    let (status, body) = admin_answer(g, path);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// The status and body of `GET path` on the admin API, with its token.
fn admin_answer(g: &Grid, path: &str) -> (u16, String) {
    let dir = beebot_server::config::DataDir(g.data_dir());
    let admin = dir.load_runtime().expect("serve.json").admin_addr;
    let token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut answer = agent
        .get(format!("http://{admin}{path}"))
        .header("Authorization", format!("Bearer {}", token.trim()))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let body = answer.body_mut().read_to_string().expect("body");
    (answer.status().as_u16(), body)
}

/// The line of the admin API's metrics that starts with `prefix`.
fn scrape_line(g: &Grid, prefix: &str) -> String {
    let body = admin_get(g, "/metrics");
    body.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in:\n{body}"))
        .to_string()
}

/// After the failure nothing is acknowledged, but the reads that show it go
/// on: `status` says the failure, and the dashboard's overview shows the
/// store down (it would show nothing if reads were refused too). A read
/// that rests on the grid's memory, which may be ahead of its disk (the
/// round `round wait` polls), is refused with the failure.
fn reads_go_on_and_show_the_failure(g: &Grid, round: &str) {
    let o = g.admin(&["status"]);
    assert!(!o.status.success(), "status after the failure succeeded");
    assert!(stderr(&o).contains("storage failed"), "{}", stderr(&o));
    let body = admin_get(g, "/api/dashboard/overview");
    let overview: serde_json::Value = serde_json::from_str(&body).expect("json");
    let store = overview["components"]
        .as_array()
        .expect("components")
        .iter()
        .find(|c| c["name"] == "store")
        .unwrap_or_else(|| panic!("no store component: {overview:#}"));
    assert_eq!(store["state"], "down", "{store:#}");
    let store_failed = scrape_line(g, "beebot_store_failed ");
    assert_eq!(store_failed, "beebot_store_failed 1", "on the full disk");
    for path in [format!("/api/rounds/{round}"), "/api/rounds".into()] {
        let (status, body) = admin_answer(g, &path);
        assert_eq!(status, 503, "{path}: {body}");
        assert!(body.contains("storage failed"), "{path}: {body}");
    }
}

/// sled writes inside the log segment it already holds until it needs a
/// new one: a large import makes it need one now. The import fails with a
/// clear error and from then on nothing is acknowledged.
fn a_large_import_fails_on_the_full_store(g: &Grid) {
    let many = g.dir.path().join("many-sites.txt");
    let list: String = (0..20_000)
        .map(|i| format!("http://site-{i}.filler.test/\n"))
        .collect();
    std::fs::write(&many, list).expect("site list");
    let o = g.admin(&["sites", "import", many.to_str().expect("path")]);
    assert!(!o.status.success(), "import on a full disk succeeded");
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .lines()
            .any(|l| l.starts_with("error: ") && l.contains("storage")),
        "one clear error about storage: {}",
        stderr(&o)
    );
}

/// The server says once that its storage failed; the client is told so and
/// keeps going with what it holds. The units accepted before.
fn the_store_fails_once_and_the_client_keeps_going(
    server_log: &Path,
    client_log: &Path,
    client: &mut Child,
) -> BTreeSet<u64> {
    wait_for_log(
        server_log,
        "storage failed",
        "the store never failed on a full disk",
    );
    // The client is told so, and keeps going with what it holds.
    wait_for_log(
        client_log,
        "server storage failed",
        "the client was never told",
    );
    assert!(
        client.try_wait().expect("client").is_none(),
        "client keeps going"
    );
    let accepted = accepted_units(client_log);
    let text = plain_log(server_log);
    eprintln!(
        "{} results accepted before the store failed: {}",
        accepted.len(),
        text.lines()
            .find(|l| l.contains("storage failed"))
            .unwrap_or("")
    );
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("storage failed:"))
            .count(),
        1,
        "one clear error, not one per request:\n{text}"
    );
    accepted
}
