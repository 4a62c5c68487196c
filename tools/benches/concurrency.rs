//! Concurrency bench (`cargo bench -p beebot-tools --bench concurrency`): one
//! client running the real work loop at the default politeness (1 s per
//! host) against 1,000 synthetic sites that answer like real servers (50–300
//! ms a page, log-uniform, drawn per page from a seed), for 10 minutes.
//! Prints the client's concurrency, pages/s and CPU over time, then one table:
//! pages/s (and per desktop-hour), the client's CPU share of one core, its
//! peak memory, the bytes it wrote, and the politeness check measured on the
//! web server's side (no host ever got two requests less than the delay
//! apart).
//!
//! Three processes, so the client's figures are its own: this binary runs the
//! grid server and measures; it re-runs itself with `BEEBOT_BENCH_ROLE=web`
//! (the synthetic web, which logs every request) and `=client` (the work
//! loop, [`beebot_client::worker::run`], in a home joined beforehand). The
//! client is a new desktop in a round without validation, as in a trial:
//! not trusted, so it earns its slots as its results come back
//! (`validate::untrusted_slots`); `--trusted` trusts it from the start, as
//! a desktop is after ten valid results.
//!
//! `--set NAME` (or `BEEBOT_BENCH_SET`) chooses the target set: `power`
//! (the default: sizes by a power law, 20-120 pages, 50-300 ms answers),
//! `small` (every site 60 pages, 100 ms answers: scans end within about a
//! minute) or `mixed` (a power law from 20 to 5,000 pages: a few large
//! sites among many small ones).
//!
//! `--warm S` (or `BEEBOT_BENCH_WARM`) runs the client S seconds first,
//! stops it and measures its next run, as a desktop that ran before starts
//! (what its client learned, the results the server kept of it).
//!
//! `--seconds N` (after `--`) or `BEEBOT_BENCH_SECONDS=N` shortens the run;
//! `--slots N` (or `BEEBOT_BENCH_SLOTS`) gives the client a `slots` ceiling
//! below `auto` (64); `--cpu-percent N` (or `BEEBOT_BENCH_CPU_PERCENT`) a
//! CPU budget other than the default 2% of a core. `--binary` (or `BEEBOT_BENCH_BINARY=1`) runs the
//! shipped program instead, as an employee's machine does: the release
//! `beebot run` with the default settings (low priority included), its
//! status page read every 2 s as an open tab does; the table then adds the
//! binary's size and the bytes written per hour (`--seconds 3600` for the
//! the hour in docs/measurements.md). `BEEBOT_BENCH_CLIENT_BIN=PATH` runs that program
//! instead of building one (two builds side by side, each in a bench of
//! its own; with `--wine`, a Windows build). `--wine` runs the shipped Windows program
//! (`target/windows/beebot.exe`, from `deploy/windows/build.sh`) under
//! Wine in the harness's prefix, and adds the CPU of Wine's wineserver,
//! which serves it, to the table.
//! Nothing here asserts a figure: it reports them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use beebot_client::control::{self, LiveStatus};
use beebot_client::crawler::{CrawlerConfig, ResolveRule};
use beebot_client::home::Home;
use beebot_client::settings;
use beebot_client::usage::{self, Process};
use beebot_client::worker::{self, RunOptions};
use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::params::RoundParams;
use beebot_server::validate::ValidateMode;
use beebot_server::{now_ms, Server};
use beebot_shared::limits::MAX_SLOTS;
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::{DelaySetting, RequestLog, ResponseDelay};
use beebot_tools::wine;

/// Seed of the benched synthetic web and of its response times.
const SEED: u64 = 1414;
/// Sites in the target set.
const SITES: usize = 1000;
/// A target set: its sites' sizes for each ten minutes of the run (Pareto
/// between the bounds; a longer run gets larger sites, never more of them)
/// and its response times (log-uniform between the bounds, ms).
struct TargetSet {
    name: &'static str,
    min_pages: usize,
    max_pages: usize,
    response: (u64, u64),
}

/// The target sets `--set NAME` chooses from (the first unless told).
const SETS: [TargetSet; 3] = [
    // The synthetic web's power-law sizes: most sites of tens of pages.
    TargetSet {
        name: "power",
        min_pages: 20,
        max_pages: 120,
        response: (50, 300),
    },
    // Small sites only: every scan ends within about a minute.
    TargetSet {
        name: "small",
        min_pages: 60,
        max_pages: 60,
        response: (100, 100),
    },
    // A few sites of thousands of pages among many small ones.
    TargetSet {
        name: "mixed",
        min_pages: 20,
        max_pages: 5000,
        response: (50, 300),
    },
];
/// The stretch of run the pages per site above are for.
const PAGES_FOR_S: u64 = 600;
/// Environment variable that names the target set (as `--set`).
const SET_VAR: &str = "BEEBOT_BENCH_SET";
/// The round's politeness delay: the default of `round start`.
const DELAY_MS: u64 = 1000;
/// Length of a run unless told otherwise.
const DEFAULT_SECONDS: u64 = 600;
/// How often the client is sampled for the table over time.
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// How often its live status is read for the busy share (scans running
/// over the sites it scans at once), averaged over each row.
const BUSY_EVERY: Duration = Duration::from_secs(1);
/// What is left out of the steady-state figure: the ramp-up.
const RAMP_S: f64 = 120.0;
/// Pages/s a desktop is to reach at the default delay: 100,000 pages an hour.
const TARGET_PAGES_PER_S: f64 = 28.0;
/// Environment variable that gives this binary its role.
const ROLE_VAR: &str = "BEEBOT_BENCH_ROLE";
/// The client's home, and the web's address, for the client role.
const HOME_VAR: &str = "BEEBOT_BENCH_HOME";
const WEB_VAR: &str = "BEEBOT_BENCH_WEB";
/// The client's `slots` ceiling.
const SLOTS_VAR: &str = "BEEBOT_BENCH_SLOTS";
/// The program a `--binary` run starts instead of building `beebot`.
const CLIENT_BIN_VAR: &str = "BEEBOT_BENCH_CLIENT_BIN";
/// The client's CPU budget (`cpu_percent`).
const CPU_VAR: &str = "BEEBOT_BENCH_CPU_PERCENT";
/// The operator contact of the bench's server (it crawls only loopback).
const CONTACT: &str = "https://beebot.test/contact";

/// The synthetic web of `set` for a run of `seconds` (the same sites,
/// larger for a longer run: 43,967 pages for ten minutes of `power`).
fn web(set: &TargetSet, seconds: u64) -> SynthWeb {
    let scale = seconds.div_ceil(PAGES_FOR_S).max(1) as usize;
    SynthWeb::with_config(
        SEED,
        SITES,
        SynthConfig {
            min_pages_per_site: set.min_pages * scale,
            max_pages_per_site: set.max_pages * scale,
            crawl_delay_ms: None,
        },
    )
}

/// The target set `--set NAME` (or `BEEBOT_BENCH_SET`) names: the first
/// unless told.
fn target_set() -> Result<&'static TargetSet> {
    let args: Vec<String> = std::env::args().collect();
    let name = match args.iter().position(|a| a == "--set") {
        Some(i) => Some(args.get(i + 1).context("--set needs a name")?.clone()),
        None => std::env::var(SET_VAR).ok(),
    };
    match name {
        None => Ok(&SETS[0]),
        Some(n) => SETS.iter().find(|s| s.name == n).with_context(|| {
            let names: Vec<&str> = SETS.iter().map(|s| s.name).collect();
            format!("no target set `{n}`: one of {}", names.join(", "))
        }),
    }
}

fn main() -> Result<()> {
    match std::env::var(ROLE_VAR).as_deref() {
        Ok("web") => serve_web(),
        Ok("client") => run_client(),
        _ => drive(),
    }
}

/// A number given as `--FLAG N` (after `--`), else in `VAR`, else `default`.
fn number(flag: &str, var: &str, default: u64) -> Result<u64> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == flag) {
        let v = args
            .get(i + 1)
            .with_context(|| format!("{flag} needs a number"))?;
        return v.parse().with_context(|| format!("{flag} {v}"));
    }
    match std::env::var(var) {
        Ok(v) => v.parse().with_context(|| format!("{var}={v}")),
        Err(_) => Ok(default),
    }
}

/// The run's length: 10 minutes unless told.
fn seconds() -> Result<u64> {
    number("--seconds", "BEEBOT_BENCH_SECONDS", DEFAULT_SECONDS)
}

/// Whether the client is the shipped `beebot run` under Wine (`--wine`).
fn under_wine() -> bool {
    std::env::args().any(|a| a == "--wine")
}

/// Whether the client is the shipped `beebot run` (`--binary`, `--wine`).
fn binary() -> bool {
    under_wine()
        || std::env::args().any(|a| a == "--binary")
        || std::env::var("BEEBOT_BENCH_BINARY").is_ok_and(|v| v == "1")
}

/// How often the `--binary` run reads the status page, as an open tab does.
const PAGE_POLL: Duration = Duration::from_secs(2);

/// Build the release `beebot` and give its path (next to this bench's
/// target dir: `target/release/beebot`), or the program
/// `BEEBOT_BENCH_CLIENT_BIN` names (another build, to set two side by side;
/// under `--wine`, a Windows build).
fn release_beebot() -> Result<PathBuf> {
    if let Some(given) = std::env::var_os(CLIENT_BIN_VAR) {
        let given = PathBuf::from(given);
        anyhow::ensure!(
            given.is_file(),
            "{CLIENT_BIN_VAR} names {}, not a file",
            given.display()
        );
        return Ok(given);
    }
    beebot_tools::build_release_client()
}

/// The client's CPU budget, percent of one core: the default unless told.
fn cpu_percent() -> Result<u32> {
    let n = number(
        "--cpu-percent",
        CPU_VAR,
        u64::from(settings::DEFAULT_CPU_PERCENT),
    )?;
    match u32::try_from(n) {
        Ok(n) if (1..=settings::MAX_CPU_PERCENT as u32).contains(&n) => Ok(n),
        _ => bail!("--cpu-percent must be from 1 to 100, not {n}"),
    }
}

/// The client's `slots` ceiling: `auto` (64) unless told.
fn slots() -> Result<u32> {
    let n = number("--slots", SLOTS_VAR, u64::from(MAX_SLOTS))?;
    match u32::try_from(n) {
        Ok(n) if (1..=MAX_SLOTS).contains(&n) => Ok(n),
        _ => bail!("--slots must be from 1 to {MAX_SLOTS}, not {n}"),
    }
}

/// The web child: serve the synthetic web with response delays, print the
/// port, then answer `count` (requests so far) and `report` (the politeness
/// check, then exit) on stdin.
fn serve_web() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let log = Arc::new(RequestLog::default());
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    println!("{}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let set = target_set()?;
    let delay = Arc::new(DelaySetting::new(Some(ResponseDelay {
        min_ms: set.response.0,
        max_ms: set.response.1,
        seed: SEED,
    })));
    let served = Arc::clone(&log);
    let site = Arc::new(web(set, seconds()?));
    // Every request, taken from the log as it comes (the log itself keeps
    // at most MAX_LOGGED_REQUESTS): arrival times by host.
    let seen = Arc::new(std::sync::Mutex::new(Arrivals::default()));
    {
        let (log, seen) = (Arc::clone(&log), Arc::clone(&seen));
        std::thread::spawn(move || loop {
            let taken = log.take();
            seen.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .add(taken);
            std::thread::sleep(Duration::from_millis(500));
        });
    }
    // Everything up to now, under the lock (no copy of the arrivals).
    let up_to_now = |f: &dyn Fn(&mut Arrivals) -> String| {
        let mut a = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        a.add(log.take());
        f(&mut a)
    };
    std::thread::spawn(move || {
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            beebot_testkit::web::serve_delayed(
                listener,
                site,
                served,
                delay,
                std::future::pending(),
            )
            .await
        })
    });
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "count" => println!("{}", up_to_now(&|a| a.pages.to_string())),
            "report" => {
                println!("{}", up_to_now(&|a| politeness(a, log.count())));
                std::io::stdout().flush()?;
                return Ok(());
            }
            _ => println!("?"),
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// Every request the web answered: when each arrived, by host, and the
/// page requests among them (robots.txt not counted).
#[derive(Debug, Default)]
struct Arrivals {
    by_host: BTreeMap<String, Vec<Instant>>,
    pages: u64,
}

impl Arrivals {
    fn add(&mut self, taken: Vec<beebot_testkit::web::LoggedRequest>) {
        for r in taken {
            if r.path != "/robots.txt" {
                self.pages += 1;
            }
            self.by_host.entry(r.host).or_default().push(r.at);
        }
    }
}

/// The politeness check: `requests hosts violations shortest_gap_ms`.
fn politeness(arrivals: &mut Arrivals, count: u64) -> String {
    let by_host = &mut arrivals.by_host;
    let delay = Duration::from_millis(DELAY_MS);
    let (mut violations, mut shortest) = (0u64, Duration::MAX);
    for times in by_host.values_mut() {
        times.sort();
        for w in times.windows(2) {
            let gap = w[1] - w[0];
            shortest = shortest.min(gap);
            if gap < delay {
                violations += 1;
            }
        }
    }
    format!(
        "{count} {} {violations} {}",
        by_host.len(),
        if shortest == Duration::MAX {
            0
        } else {
            shortest.as_millis()
        }
    )
}

/// The client child: the real work loop in the joined home, every name
/// mapped to the web's address, until stdin closes.
fn run_client() -> Result<()> {
    let home = PathBuf::from(std::env::var(HOME_VAR).context(HOME_VAR)?);
    let web = std::env::var(WEB_VAR).context(WEB_VAR)?;
    let resolve: ResolveRule = format!("*.synth.test={web}")
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = RunOptions {
        // As `beebot run` with the default settings (`slots = auto`) or
        // the ceiling given.
        slots: slots()?,
        cpu_percent: cpu_percent()?,
        crawler: CrawlerConfig {
            allow_private: true,
            resolve: vec![resolve],
            ..CrawlerConfig::default()
        },
        ..RunOptions::default()
    };
    let home = Home {
        config: home.clone(),
        data: home,
    };
    let rt = beebot_shared::rt::runtime()?;
    let stop = async {
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            let _ = std::io::stdin().read_line(&mut sink);
        })
        .await;
    };
    rt.block_on(worker::run(home, opts, stop))?;
    Ok(())
}

/// How the measured client is started: the shipped program or the work
/// loop in a child of this binary.
struct ClientHow {
    shipped: Option<PathBuf>,
    /// The Wine prefix the shipped program runs in (`--wine`).
    wine: Option<PathBuf>,
    home: PathBuf,
    web: SocketAddr,
    ceiling: u32,
    budget: u32,
}

impl ClientHow {
    /// Start the client; its stdin, when closing it stops the client.
    fn start(&self) -> Result<(Child, Option<ChildStdin>)> {
        match &self.shipped {
            Some(exe) => {
                let mut cmd = match &self.wine {
                    Some(prefix) => {
                        let mut cmd = wine::command(exe, prefix);
                        cmd.arg("--home").arg(wine::path(&self.home));
                        cmd
                    }
                    None => {
                        let mut cmd = Command::new(exe);
                        cmd.arg("--home").arg(&self.home);
                        cmd
                    }
                };
                cmd.args([
                    "run",
                    "--allow-private",
                    "--resolve",
                    &format!("*.synth.test={}", self.web),
                ]);
                if self.ceiling < MAX_SLOTS {
                    cmd.args(["--slots", &self.ceiling.to_string()]);
                }
                if self.budget != settings::DEFAULT_CPU_PERCENT {
                    cmd.env("BEEBOT_CPU_PERCENT", self.budget.to_string());
                }
                let child = cmd
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("spawn beebot run")?;
                Ok((child, None))
            }
            None => {
                let (child, stdin, _) = spawn(
                    "client",
                    &[
                        (HOME_VAR, self.home.display().to_string()),
                        (WEB_VAR, self.web.to_string()),
                        (SLOTS_VAR, self.ceiling.to_string()),
                        (CPU_VAR, self.budget.to_string()),
                    ],
                )?;
                Ok((child, Some(stdin)))
            }
        }
    }
}

/// Stop a client as its user does (closing the work loop's stdin, or
/// SIGTERM to the shipped program, as a service manager sends) and wait.
fn stop_client(client: &mut Child, stdin: Option<ChildStdin>) {
    match stdin {
        Some(stdin) => drop(stdin),
        None => {
            let _ = Command::new("kill")
                .args(["-TERM", &client.id().to_string()])
                .status();
        }
    }
    let _ = client.wait();
}

/// A child process of this binary in `role`, with its stdin and stdout.
fn spawn(
    role: &str,
    env: &[(&str, String)],
) -> Result<(Child, ChildStdin, BufReader<ChildStdout>)> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().with_context(|| format!("spawn the {role}"))?;
    let stdin = child.stdin.take().context("stdin")?;
    let stdout = BufReader::new(child.stdout.take().context("stdout")?);
    Ok((child, stdin, stdout))
}

/// Ask the web child one line, read one line back.
fn ask(stdin: &mut ChildStdin, stdout: &mut BufReader<ChildStdout>, q: &str) -> Result<String> {
    writeln!(stdin, "{q}")?;
    stdin.flush()?;
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    Ok(line.trim().to_string())
}

/// The client's live status (its effective concurrency).
fn live(home: &Path) -> Option<LiveStatus> {
    control::read_live_status(home)
}

/// One row of the table over time.
struct Row {
    t_s: f64,
    concurrency: Option<u32>,
    /// Scans running over the sites at once, averaged over the row.
    busy: Option<f64>,
    pages_per_s: f64,
    cpu_percent: Option<f64>,
    rss_mb: Option<f64>,
}

fn drive() -> Result<()> {
    let seconds = seconds()?;
    let ceiling = slots()?;
    let budget = cpu_percent()?;
    let set = target_set()?;
    let trusted = std::env::args().any(|a| a == "--trusted");
    let warm = number("--warm", "BEEBOT_BENCH_WARM", 0)?;
    // The web is sized for the warm run and the measured one together.
    let sized_for = seconds + warm;
    let (web_pages, largest) = {
        let w = web(set, sized_for);
        let largest = w.site_hosts().iter().filter_map(|h| w.site_pages(h)).max();
        (w.total_pages(), largest.unwrap_or(0))
    };
    let (mut web_child, mut web_in, mut web_out) = spawn(
        "web",
        &[
            ("BEEBOT_BENCH_SECONDS", sized_for.to_string()),
            (SET_VAR, set.name.to_string()),
        ],
    )?;
    let mut port = String::new();
    web_out.read_line(&mut port)?;
    let web_addr: SocketAddr = format!("127.0.0.1:{}", port.trim()).parse()?;

    let tmp = tempfile::Builder::new().prefix("beebot-conc-").tempdir()?;
    let rt = beebot_shared::rt::runtime()?;
    let home_dir = tmp.path().join("client");
    let (shared, stop_server, server_task) = rt.block_on(async {
        let dir = DataDir(tmp.path().join("server"));
        config::init(
            &dir,
            &InitOptions {
                public_addr: "127.0.0.1:0".into(),
                listen: "127.0.0.1:0".into(),
                admin_listen: "127.0.0.1:0".into(),
                cert_pem: None,
                key_pem: None,
                contact: CONTACT.into(),
                operator: "BeeBot concurrency bench (synthetic web only)".into(),
            },
        )?;
        let server = Server::bind(dir).await?;
        let shared = server.shared();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        let (code, _) = shared.make_invite(1, 3600).await?;
        let home = Home {
            config: home_dir.clone(),
            data: home_dir.clone(),
        };
        worker::join(&home, &code, Some("desktop".into())).await?;
        let host_id = home.identity().require_enrolment()?.host_id;
        let hosts = web(set, sized_for).site_hosts();
        let now = now_ms();
        shared
            .with_grid(move |g| {
                if trusted {
                    g.set_trusted(host_id)?;
                }
                g.add_sites(&hosts, now)?;
                g.start_round(
                    RoundParams {
                        delay_ms: DELAY_MS,
                        validate: ValidateMode::Off,
                        ..RoundParams::default()
                    },
                    now,
                )
            })
            .await?;
        anyhow::Ok((shared, tx, task))
    })?;

    let wine_prefix = if under_wine() {
        Some(wine::prefix()?)
    } else {
        None
    };
    // `--wine` is a `--binary` run: the Windows build unless another is named.
    let shipped = if !binary() {
        None
    } else if under_wine() && std::env::var_os(CLIENT_BIN_VAR).is_none() {
        Some(wine::built_exe()?)
    } else {
        Some(release_beebot()?)
    };
    let how = ClientHow {
        shipped: shipped.clone(),
        wine: wine_prefix.clone(),
        home: home_dir.clone(),
        web: web_addr,
        ceiling,
        budget,
    };
    // A run before the measured one (`--warm S`): the measured run starts
    // where a desktop that ran before does (what its client learned, the
    // results the server kept of it).
    if warm > 0 {
        let (mut c, i) = how.start()?;
        eprintln!("warm run of {warm} s (not measured)");
        std::thread::sleep(Duration::from_secs(warm));
        stop_client(&mut c, i);
    }
    let pages_before: usize = ask(&mut web_in, &mut web_out, "count")?.parse()?;
    let (mut client, client_in) = how.start()?;
    let pid = client.id();
    // An open tab of the status page (the shipped program only).
    let tab_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tab = shipped.as_ref().map(|_| {
        let (dir, stop) = (home_dir.clone(), tab_stop.clone());
        // Under Wine the run lock is Wine's own: the address file is taken
        // at its word.
        let find = if wine_prefix.is_some() {
            beebot_client::ui::client::named_by_file
        } else {
            beebot_client::ui::client::find
        };
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match find(&dir).and_then(|r| r.get("/api/status")) {
                    Ok(_) => ok += 1,
                    Err(_) => failed += 1,
                }
                std::thread::sleep(PAGE_POLL);
            }
            (ok, failed)
        })
    });
    eprintln!(
        "client pid {pid}: set {}: {SITES} sites ({web_pages} pages, largest {largest}), delay \
         {DELAY_MS} ms, responses {}-{} ms, slots {ceiling}, cpu_percent {budget}, {seconds} s",
        set.name, set.response.0, set.response.1
    );
    let started = Instant::now();
    let cpu0 = usage::cpu_seconds(Process::Pid(pid)).unwrap_or(0.0);
    let wineserver0 = wine_prefix.as_deref().and_then(wine::wineserver_cpu);
    let (mut last_t, mut last_pages, mut last_cpu) = (0.0, pages_before, cpu0);
    let mut rows = Vec::new();
    let mut steady_from: Option<(f64, usize)> = None;
    let end = Duration::from_secs(seconds);
    // Scans running and sites at once summed over the row's reads.
    let (mut running_sum, mut at_once_sum) = (0u64, 0u64);
    let (mut all_running, mut all_at_once) = (0u64, 0u64);
    while started.elapsed() < end {
        let row_end = (last_t + SAMPLE_EVERY.as_secs_f64()).min(end.as_secs_f64());
        while started.elapsed().as_secs_f64() < row_end {
            let left = row_end - started.elapsed().as_secs_f64();
            std::thread::sleep(BUSY_EVERY.min(Duration::from_secs_f64(left.max(0.0))));
            if let Some(l) = live(&home_dir) {
                if let Some(c) = l.concurrency {
                    running_sum += l.scans.len() as u64;
                    at_once_sum += u64::from(c);
                    if started.elapsed().as_secs_f64() >= RAMP_S {
                        all_running += l.scans.len() as u64;
                        all_at_once += u64::from(c);
                    }
                }
            }
        }
        let t = started.elapsed().as_secs_f64();
        let pages: usize = ask(&mut web_in, &mut web_out, "count")?.parse()?;
        let cpu = usage::cpu_seconds(Process::Pid(pid));
        if steady_from.is_none() && t >= RAMP_S {
            steady_from = Some((t, pages.saturating_sub(pages_before)));
        }
        let dt = (t - last_t).max(0.001);
        let row = Row {
            t_s: t,
            concurrency: live(&home_dir).and_then(|l| l.concurrency),
            busy: (at_once_sum > 0).then(|| running_sum as f64 / at_once_sum as f64),
            pages_per_s: (pages - last_pages) as f64 / dt,
            cpu_percent: cpu.map(|c| (c - last_cpu) / dt * 100.0),
            rss_mb: usage::rss_kb(Process::Pid(pid)).map(|k| k as f64 / 1024.0),
        };
        (running_sum, at_once_sum) = (0, 0);
        eprintln!(
            "{:>6.0} s  {:>3} at once  busy {:>4}  {:>5.1} pages/s  CPU {:>5}  RSS {:>6}",
            row.t_s,
            row.concurrency.map_or("?".into(), |c| c.to_string()),
            row.busy
                .map_or("?".into(), |b| format!("{:.0}%", b * 100.0)),
            row.pages_per_s,
            row.cpu_percent.map_or("?".into(), |c| format!("{c:.1}%")),
            row.rss_mb.map_or("?".into(), |m| format!("{m:.1} MB")),
        );
        rows.push(row);
        (last_t, last_pages) = (t, pages);
        last_cpu = cpu.unwrap_or(last_cpu);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = usage::cpu_seconds(Process::Pid(pid)).map(|c| c - cpu0);
    let wineserver = wine_prefix
        .as_deref()
        .and_then(wine::wineserver_cpu)
        .map(|c| c - wineserver0.unwrap_or(0.0));
    let peak_kb = usage::peak_rss_kb(Process::Pid(pid));
    let written = usage::written_bytes(Process::Pid(pid));
    let pages: usize = ask(&mut web_in, &mut web_out, "count")?
        .parse::<usize>()?
        .saturating_sub(pages_before);
    tab_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let page_reads = tab.and_then(|t| t.join().ok());
    stop_client(&mut client, client_in);
    let report = ask(&mut web_in, &mut web_out, "report")?;
    let _ = web_child.wait();
    let _ = stop_server.send(());
    let _ = rt.block_on(server_task);
    drop(shared);

    let fields: Vec<u64> = report
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("web report `{report}`"))?;
    let [requests, hosts, violations, shortest_ms] = fields[..] else {
        bail!("web report `{report}`");
    };

    println!(
        "\nconcurrency over time (every {} s)",
        SAMPLE_EVERY.as_secs()
    );
    println!(
        "{:>7}  {:>8}  {:>6}  {:>8}  {:>6}  {:>8}",
        "t s", "at once", "busy %", "pages/s", "CPU %", "RSS MB"
    );
    for r in &rows {
        println!(
            "{:>7.0}  {:>8}  {:>6}  {:>8.1}  {:>6}  {:>8}",
            r.t_s,
            r.concurrency.map_or("?".into(), |c| c.to_string()),
            r.busy.map_or("?".into(), |b| format!("{:.0}", b * 100.0)),
            r.pages_per_s,
            r.cpu_percent.map_or("?".into(), |c| format!("{c:.1}")),
            r.rss_mb.map_or("?".into(), |m| format!("{m:.1}")),
        );
    }
    let overall = pages as f64 / wall;
    let steady = steady_from.map(|(t, p)| (pages - p) as f64 / (wall - t).max(0.001));
    let first = steady_from.map(|(t, p)| p as f64 / t.max(0.001));
    let reached = rows
        .iter()
        .find(|r| r.pages_per_s >= TARGET_PAGES_PER_S)
        .map(|r| r.t_s);
    let after: Vec<&Row> = rows.iter().filter(|r| r.t_s > RAMP_S + 1.0).collect();
    let under = after
        .iter()
        .filter(|r| r.pages_per_s < TARGET_PAGES_PER_S)
        .count();
    let most = rows.iter().filter_map(|r| r.concurrency).max();
    let mut table: Vec<(String, String)> = vec![
        (
            "run before the measured one (--warm)".into(),
            if warm > 0 {
                format!("{warm} s, then stopped and started again")
            } else {
                "none: the client's first run".into()
            },
        ),
        (
            "client trusted from the start".into(),
            if trusted { "yes (--trusted)" } else { "no: a new desktop" }.into(),
        ),
        (
            "target set".into(),
            format!(
                "{}: {SITES} sites, {web_pages} pages (largest {largest}), answers {}-{} ms",
                set.name, set.response.0, set.response.1
            ),
        ),
        (
            format!("pages/s over the whole run ({pages} pages in {wall:.0} s)"),
            format!("{overall:.1} ({:.0} pages per desktop-hour)", overall * 3600.0),
        ),
        (
            format!("pages/s after the first {RAMP_S:.0} s (ramp-up)"),
            steady.map_or("run too short".into(), |s| {
                format!("{s:.1} ({:.0} pages per desktop-hour)", s * 3600.0)
            }),
        ),
        (
            format!("pages/s in the first {RAMP_S:.0} s"),
            first.map_or("run too short".into(), |f| format!("{f:.1}")),
        ),
        (
            format!(
                "first {} s row at {TARGET_PAGES_PER_S:.0} pages/s or more (ends at)",
                SAMPLE_EVERY.as_secs()
            ),
            reached.map_or("none".into(), |t| format!("{t:.0} s")),
        ),
        (
            format!(
                "{} s rows under {TARGET_PAGES_PER_S:.0} pages/s after the first {RAMP_S:.0} s",
                SAMPLE_EVERY.as_secs()
            ),
            format!("{under} of {}", after.len()),
        ),
        (
            format!("most sites at once (slots ceiling {ceiling})"),
            most.map_or("?".into(), |m| m.to_string()),
        ),
        (
            format!("busy share after the first {RAMP_S:.0} s (scans running / sites at once)"),
            if all_at_once > 0 {
                format!("{:.0}%", all_running as f64 / all_at_once as f64 * 100.0)
            } else {
                "?".into()
            },
        ),
        (
            format!("client CPU, share of one core (budget: cpu_percent {budget})"),
            cpu.map_or("not measurable here".into(), |c| {
                format!("{:.2}% ({c:.1} s in {wall:.0} s)", c / wall * 100.0)
            }),
        ),
        (
            "client peak memory (VmHWM)".into(),
            peak_kb.map_or("?".into(), |k| format!("{:.1} MB", k as f64 / 1024.0)),
        ),
        (
            "client bytes written (write calls; reaching the disk)".into(),
            written.map_or("?".into(), |(w, d)| {
                format!("{:.1} MB; {:.1} MB", w as f64 / 1e6, d as f64 / 1e6)
            }),
        ),
        (
            format!("politeness: requests to one host < {DELAY_MS} ms apart"),
            format!(
                "{violations} of {requests} requests to {hosts} hosts (shortest gap {shortest_ms} ms)"
            ),
        ),
    ];
    if let Some(exe) = &shipped {
        table.insert(
            0,
            (
                "client: the shipped program".into(),
                format!(
                    "{} run, default settings{}",
                    exe.display(),
                    if wine_prefix.is_some() {
                        ", under Wine"
                    } else {
                        ""
                    }
                ),
            ),
        );
        if wine_prefix.is_some() {
            table.push((
                "Wine's wineserver CPU beside it, share of one core".into(),
                wineserver.map_or("?".into(), |c| {
                    format!("{:.2}% ({c:.1} s in {wall:.0} s)", c / wall * 100.0)
                }),
            ));
        }
        table.push((
            if wine_prefix.is_some() {
                "client binary (Windows, release)".into()
            } else if std::env::var_os(CLIENT_BIN_VAR).is_some() {
                "client binary (as given)".into()
            } else {
                "client binary (release, stripped)".into()
            },
            std::fs::metadata(exe).map_or("?".into(), |m| {
                format!("{:.1} MB", m.len() as f64 / (1024.0 * 1024.0))
            }),
        ));
        table.push((
            "client bytes written per hour (write calls; reaching the disk)".into(),
            written.map_or("?".into(), |(w, d)| {
                let per_hour = 3600.0 / wall / 1e6;
                format!(
                    "{:.1} MB; {:.1} MB",
                    w as f64 * per_hour,
                    d as f64 * per_hour
                )
            }),
        ));
        if let Some((ok, failed)) = page_reads {
            table.push((
                format!(
                    "status page reads (an open tab, every {} s)",
                    PAGE_POLL.as_secs()
                ),
                format!("{ok} answered, {failed} failed"),
            ));
        }
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        table.push((
            "machine load (1, 5, 15 min) at the end".into(),
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        ));
    }
    let width = table.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!("\n{:width$}  result", "measure");
    println!("{}  {}", "-".repeat(width), "-".repeat(24));
    for (k, v) in table {
        println!("{k:width$}  {v}");
    }
    Ok(())
}
