//! `beebot-loadgen`: plays N hosts over real QUIC against a real `beebot-server`
//! process on loopback (enrol, hello, request work, upload small results) and
//! prints a table: hosts held, requests per second, latency percentiles and
//! the server's memory. With `--herd N` it then kills the server, restarts it,
//! and shows how N hosts reconnecting with the client's backoff (exponential,
//! full jitter) spread over the backoff window instead of arriving at once.
//!
//! Build with `--release` (it runs the `beebot-server` beside its own binary):
//! `cargo build --release -p beebot-server -p beebot-tools --bins`, then
//! `target/release/beebot-loadgen --hosts 2000`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use tokio::sync::Semaphore;

use beebot_client::net::{Link, ServerId};
use beebot_server::config::DataDir;
use beebot_shared::fetch_rules::backoff_delay;
use beebot_shared::invite::Invite;
use beebot_shared::limits::MAX_UNIT_BYTES;
use beebot_shared::proto::{HostInfo, Request, Response};
use beebot_shared::rt::runtime;
use beebot_shared::sign::WorkUnit;

/// Connections set up at once (enrolment, reconnection): stays under the
/// server's per-address limit of unauthenticated connections.
const SETUP_CONCURRENCY: usize = 32;
/// Longest the server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Most latency samples kept per request kind.
const MAX_SAMPLES: usize = 2_000_000;
/// Backoff of the herd phase: the client's defaults.
const HERD_BACKOFF_BASE: Duration = Duration::from_secs(1);
const HERD_BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Reconnection attempts per host in the herd phase.
const HERD_MAX_ATTEMPTS: u32 = 8;
/// Width of one bar of the herd histogram.
const HERD_BUCKET: Duration = Duration::from_millis(250);

#[derive(Parser)]
#[command(about = "Play N hosts against a real beebot-server on loopback")]
struct Args {
    /// Hosts enrolled and held connected at once.
    #[arg(long, default_value_t = 2000)]
    hosts: usize,
    /// Work requests per second asked of the server, over all hosts.
    #[arg(long, default_value_t = 6000)]
    rate: u64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Seconds of load before the measurement (the round's units are handed
    /// out and uploaded in the first moments; this measures the steady state).
    #[arg(long, default_value_t = 0)]
    warmup: u64,
    /// Sites in the round (each is one unit to hand out and upload).
    #[arg(long, default_value_t = 2000)]
    sites: usize,
    /// After the load: kill and restart the server, and reconnect this many
    /// hosts with the client's backoff (0: skip).
    #[arg(long, default_value_t = 200)]
    herd: usize,
    /// The server binary (default: `beebot-server` beside this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
}

/// Latency samples of one request kind, in microseconds.
#[derive(Default)]
struct Samples(Mutex<Vec<u32>>);

impl Samples {
    fn add(&self, d: Duration) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() < MAX_SAMPLES {
            v.push(d.as_micros().min(u32::MAX as u128) as u32);
        }
    }
    fn sorted(&self) -> Vec<u32> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v.sort_unstable();
        v
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

#[derive(Default)]
struct Stats {
    work: Samples,
    upload: Samples,
    hello: Samples,
    errors: AtomicU64,
    units: AtomicU64,
    accepted: AtomicU64,
}

fn server_bin(args: &Args) -> Result<PathBuf> {
    if let Some(p) = &args.server_bin {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe().context("own path")?;
    let p = exe
        .parent()
        .context("own dir")?
        .join(format!("beebot-server{}", std::env::consts::EXE_SUFFIX));
    if !p.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p beebot-server) or pass --server-bin",
            p.display()
        );
    }
    Ok(p)
}

fn admin(bin: &Path, dir: &Path, args: &[&str]) -> Result<String> {
    let o = Command::new(bin)
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .with_context(|| format!("run {}", bin.display()))?;
    if !o.status.success() {
        bail!(
            "beebot-server {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn start_server(bin: &Path, dir: &Path, log: &Path) -> Result<Child> {
    let data = DataDir(dir.to_path_buf());
    let _ = std::fs::remove_file(data.runtime());
    let log = std::fs::File::create(log).context("server log")?;
    let child = Command::new(bin)
        .args(["serve", "--data-dir"])
        .arg(dir)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("start the server")?;
    let started = Instant::now();
    while data.load_runtime().is_none() {
        if started.elapsed() > START_TIMEOUT {
            bail!("the server did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// (VmRSS, VmHWM) of a process, in MB.
fn memory_mb(pid: u32) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A host of the load: its key and its connection.
struct Host {
    id: u64,
    key: ed25519_dalek::SigningKey,
    link: Link,
}

async fn enrol(server: &ServerId, token: Vec<u8>, n: usize, stats: &Stats) -> Result<Host> {
    let key = beebot_shared::sign::generate_key();
    let link = Link::connect(server).await?;
    let info = HostInfo {
        name: format!("load-{n}"),
        os: "loadgen".into(),
        client_version: env!("CARGO_PKG_VERSION").into(),
        cores: 1,
    };
    let id = link.enrol(token, &key, info).await?;
    let t = Instant::now();
    link.hello(id, &key).await?;
    stats.hello.add(t.elapsed());
    Ok(Host { id, key, link })
}

/// One host's share of the load: a work request every `interval`, and an
/// upload for every unit it gets.
async fn play(host: Arc<Host>, interval: Duration, until: Instant, stats: Arc<Stats>) {
    let phase = interval.mul_f64(rand::random::<f64>());
    tokio::time::sleep(phase).await;
    let mut next = tokio::time::Instant::now();
    while Instant::now() < until {
        next += interval;
        let t = Instant::now();
        let r = host
            .link
            .request(&Request::RequestWork {
                want_seconds: 60,
                free_slots: 1,
                units_held: vec![],
                open_windows: None,
            })
            .await;
        stats.work.add(t.elapsed());
        match r {
            Ok(Response::Work { units, .. }) => {
                for signed in units {
                    stats.units.fetch_add(1, Ordering::Relaxed);
                    let Ok(unit) =
                        beebot_shared::codec::decode::<WorkUnit>(&signed.bytes, MAX_UNIT_BYTES)
                    else {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let Ok((summary, link_file)) =
                        beebot_server::simulate::one_page_result(&unit, 10)
                    else {
                        stats.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let t = Instant::now();
                    let r = host
                        .link
                        .request(&Request::Upload {
                            unit_id: unit.unit_id,
                            summary,
                            link_file,
                            state: None,
                        })
                        .await;
                    stats.upload.add(t.elapsed());
                    match r {
                        Ok(Response::Accepted) => {
                            stats.accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            _ => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep_until(next).await;
    }
}

fn row(name: &str, count: usize, secs: f64, s: &[u32]) {
    println!(
        "{name:<16} {count:>9} {:>10.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
        count as f64 / secs,
        pct(s, 0.50),
        pct(s, 0.90),
        pct(s, 0.99),
        pct(s, 1.0)
    );
}

/// Kill the server, restart it, and reconnect `hosts` with the client's
/// backoff; prints when they came back. Returns the new server process.
async fn herd(
    hosts: &[Arc<Host>],
    server: &ServerId,
    bin: &Path,
    dir: &Path,
    log: &Path,
    child: &mut Child,
) -> Result<Child> {
    println!();
    println!(
        "herd: {} hosts connected; server SIGKILLed and restarted; each host reconnects",
        hosts.len()
    );
    println!(
        "after backoff_delay(attempt, {:?}, {:?}) (exponential, full jitter), as `beebot run` does",
        HERD_BACKOFF_BASE, HERD_BACKOFF_CAP
    );
    child.kill().context("kill the server")?;
    let _ = child.wait();
    let killed = Instant::now();
    let new_child = start_server(bin, dir, log)?;
    let restarted = killed.elapsed();
    let (times, failed) = reconnect_all(hosts, server, killed).await;
    print_herd(&times, restarted, failed);
    Ok(new_child)
}

/// Each host reconnects (and says hello) after the client's backoff from
/// `killed`; returns the sorted times since `killed` of those that came
/// back, and how many gave up.
async fn reconnect_all(
    hosts: &[Arc<Host>],
    server: &ServerId,
    killed: Instant,
) -> (Vec<Duration>, u64) {
    let times: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for h in hosts {
        let h = h.clone();
        let server = server.clone();
        let times = times.clone();
        let failed = failed.clone();
        tasks.push(tokio::spawn(async move {
            for attempt in 1..=HERD_MAX_ATTEMPTS {
                let wait = backoff_delay(
                    attempt,
                    HERD_BACKOFF_BASE,
                    HERD_BACKOFF_CAP,
                    rand::random::<f64>(),
                );
                tokio::time::sleep_until(tokio::time::Instant::from_std(killed + wait)).await;
                let ok = async {
                    let link = Link::connect(&server).await?;
                    link.hello(h.id, &h.key).await?;
                    Ok::<_, beebot_client::net::NetError>(link)
                }
                .await;
                if let Ok(link) = ok {
                    times
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(killed.elapsed());
                    link.close();
                    return;
                }
            }
            failed.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut v = times.lock().unwrap_or_else(|p| p.into_inner()).clone();
    v.sort();
    (v, failed.load(Ordering::Relaxed))
}

/// When the herd came back: first and last, and a histogram of
/// [`HERD_BUCKET`] windows.
fn print_herd(v: &[Duration], restarted: Duration, failed: u64) {
    println!(
        "server back after {:.2}s; {} reconnected, {} gave up",
        restarted.as_secs_f64(),
        v.len(),
        failed
    );
    if let (Some(first), Some(last)) = (v.first(), v.last()) {
        println!(
            "reconnections from {:.2}s to {:.2}s after the kill",
            first.as_secs_f64(),
            last.as_secs_f64()
        );
    }
    let buckets = v
        .last()
        .map(|l| (l.as_millis() / HERD_BUCKET.as_millis()) as usize + 1)
        .unwrap_or(0);
    let mut counts = vec![0usize; buckets];
    for t in v {
        counts[(t.as_millis() / HERD_BUCKET.as_millis()) as usize] += 1;
    }
    let busiest = counts.iter().copied().max().unwrap_or(0);
    for (i, c) in counts.iter().enumerate() {
        let from = i as f64 * HERD_BUCKET.as_secs_f64();
        println!(
            "  {from:>5.2}s {c:>5} {}",
            "#".repeat((c * 50).div_ceil(busiest.max(1)))
        );
    }
    println!(
        "busiest {}ms window: {} of {} hosts ({:.0}%)",
        HERD_BUCKET.as_millis(),
        busiest,
        v.len(),
        100.0 * busiest as f64 / v.len().max(1) as f64
    );
}

/// A fresh data dir in `tmp` and a server on it with its ports pinned (so a
/// restarted server is where the hosts look for it), a round of
/// `args.sites` one-page sites, and an invite for `args.hosts` hosts.
fn setup_server(args: &Args, bin: &Path, tmp: &Path) -> Result<(Child, Invite)> {
    let dir = tmp.join("server");
    let log = tmp.join("server.log");
    admin(
        bin,
        &dir,
        &[
            "init",
            "--public-addr",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--contact",
            beebot_tools::demo::DEMO_CONTACT,
        ],
    )?;
    let child = start_server(bin, &dir, &log)?;
    let data = DataDir(dir.clone());
    let rt_info = data.load_runtime().context("serve.json")?;
    let mut cfg = data.load_config()?;
    cfg.listen = rt_info.quic_addr.to_string();
    cfg.public_addr = rt_info.public_addr.clone();
    cfg.admin_listen = rt_info.admin_addr.to_string();
    data.save_config(&cfg)?;

    let sites: String = (0..args.sites)
        .map(|i| format!("load{i}.synth.test\n"))
        .collect();
    let sites_path = tmp.join("sites.txt");
    std::fs::write(&sites_path, sites)?;
    admin(
        bin,
        &dir,
        &["sites", "import", sites_path.to_str().context("path")?],
    )?;
    admin(
        bin,
        &dir,
        &["round", "start", "--delay-ms", "0", "--max-pages", "1"],
    )?;
    let hosts = args.hosts.to_string();
    let code = admin(bin, &dir, &["invite", "--uses", &hosts, "--expires", "1h"])?;
    let invite = Invite::from_code(code.lines().last().unwrap_or_default())?;
    Ok((child, invite))
}

/// Enrol `count` hosts, [`SETUP_CONCURRENCY`] at a time; a failed
/// enrolment is printed and left out.
async fn enrol_all(
    count: usize,
    server: &ServerId,
    token: &[u8],
    stats: &Arc<Stats>,
) -> Result<Vec<Arc<Host>>> {
    let gate = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut pending = Vec::new();
    for n in 0..count {
        let gate = gate.clone();
        let server = server.clone();
        let token = token.to_vec();
        let stats = stats.clone();
        pending.push(tokio::spawn(async move {
            let _g = gate.acquire_owned().await?;
            enrol(&server, token, n, &stats).await
        }));
    }
    let mut hosts = Vec::new();
    for p in pending {
        match p.await? {
            Ok(h) => hosts.push(Arc::new(h)),
            Err(e) => eprintln!("enrolment failed: {e:#}"),
        }
    }
    Ok(hosts)
}

/// Every host plays the load until `until`, into `stats`.
async fn load(hosts: &[Arc<Host>], interval: Duration, until: Instant, stats: &Arc<Stats>) {
    let tasks: Vec<_> = hosts
        .iter()
        .map(|h| tokio::spawn(play(h.clone(), interval, until, stats.clone())))
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// What the measured load did, for the table.
struct Measured {
    enrol_secs: f64,
    secs: f64,
    held: usize,
    enrolled: usize,
    rss_idle: f64,
    rss: f64,
    hwm: f64,
}

/// The table: requests, their rates and latencies, hosts held, memory.
fn print_table(args: &Args, bin: &Path, stats: &Stats, m: &Measured) {
    println!(
        "beebot-loadgen: {} hosts over QUIC on loopback against {}",
        args.hosts,
        bin.display()
    );
    println!(
        "round of {} sites; asked {} work requests/s for {}s; {} enrolled in {:.1}s",
        args.sites, args.rate, args.seconds, m.enrolled, m.enrol_secs
    );
    println!();
    println!(
        "{:<16} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8}",
        "request", "count", "per s", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    let work = stats.work.sorted();
    let upload = stats.upload.sorted();
    let hello = stats.hello.sorted();
    row("hello (setup)", hello.len(), m.enrol_secs, &hello);
    row("request work", work.len(), m.secs, &work);
    row("upload", upload.len(), m.secs, &upload);
    println!();
    println!("{:<28} {:>10}", "hosts held connected", m.held);
    println!(
        "{:<28} {:>10}",
        "units handed out",
        stats.units.load(Ordering::Relaxed)
    );
    println!(
        "{:<28} {:>10}",
        "uploads accepted",
        stats.accepted.load(Ordering::Relaxed)
    );
    println!(
        "{:<28} {:>10}",
        "errors",
        stats.errors.load(Ordering::Relaxed)
    );
    println!("{:<28} {:>10.0}", "server RSS idle, MB", m.rss_idle);
    println!("{:<28} {:>10.0}", "server RSS after load, MB", m.rss);
    println!("{:<28} {:>10.0}", "server peak RSS, MB", m.hwm);
}

/// Enrol the hosts, warm up, measure, print the table, then the herd.
async fn run_load(
    args: &Args,
    bin: &Path,
    tmp: &Path,
    invite: &Invite,
    mut child: Child,
) -> Result<Child> {
    let server = ServerId {
        addr: invite.addr.clone(),
        server_name: invite.server_name.clone(),
        cert_sha256: invite.cert_sha256,
    };
    let stats = Arc::new(Stats::default());
    let enrol_start = Instant::now();
    let hosts = enrol_all(args.hosts, &server, &invite.token, &stats).await?;
    let enrol_secs = enrol_start.elapsed().as_secs_f64();
    let (rss_idle, _) = memory_mb(child.id());

    let interval = Duration::from_secs_f64(hosts.len() as f64 / args.rate.max(1) as f64);
    if args.warmup > 0 {
        let warm = Arc::new(Stats::default());
        let until = Instant::now() + Duration::from_secs(args.warmup);
        load(&hosts, interval, until, &warm).await;
        println!(
            "warm-up: {}s, {} work requests, {} uploads accepted (not in the table)",
            args.warmup,
            warm.work.sorted().len(),
            warm.accepted.load(Ordering::Relaxed)
        );
    }
    let start = Instant::now();
    load(
        &hosts,
        interval,
        start + Duration::from_secs(args.seconds),
        &stats,
    )
    .await;
    let secs = start.elapsed().as_secs_f64();
    let (rss, hwm) = memory_mb(child.id());
    let held = hosts.iter().filter(|h| h.link.is_open()).count();
    let measured = Measured {
        enrol_secs,
        secs,
        held,
        enrolled: hosts.len(),
        rss_idle,
        rss,
        hwm,
    };
    print_table(args, bin, &stats, &measured);

    if args.herd > 0 {
        let n = args.herd.min(hosts.len());
        let (dir, log) = (tmp.join("server"), tmp.join("server.log"));
        child = herd(&hosts[..n], &server, bin, &dir, &log, &mut child).await?;
    }
    for h in &hosts {
        h.link.close();
    }
    Ok(child)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let bin = server_bin(&args)?;
    let tmp = tempfile::tempdir().context("temp dir")?;
    let (child, invite) = setup_server(&args, &bin, tmp.path())?;
    let mut child = runtime()?.block_on(run_load(&args, &bin, tmp.path(), &invite, child))?;
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}
