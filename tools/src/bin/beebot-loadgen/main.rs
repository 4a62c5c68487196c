//! `beebot-loadgen`: plays N hosts over real QUIC against a real `beebot-server`
//! process on loopback, on the path a real round takes, and prints a table.
//!
//! The round (at the default politeness delay of 1 s) has more sites than the
//! run can hand out. Every host asks for work, uploads what it got and
//! reports progress, each on its own open-loop schedule (`play`): work
//! requests at `--rate` over all hosts, uploads at `--upload-rate`, progress
//! for every unit held at the server's interval. Link files are of
//! realistic size (`beebot_tools::loadfiles`: a median of 300 records, a tail
//! to 20,000). Latency is measured from when a request was due (HDR
//! histograms, `report`), so a server that falls behind shows as latency.
//! The table gives each kind's rate and p50/p99/p99.9, the server's CPU and
//! its memory. With `--herd N` it then kills the server, restarts it, and
//! shows how N hosts reconnecting with the client's backoff spread out
//! (`herd`). With `--null-server` the same load goes to a server that
//! only answers (`null`): the transport's own cost.
//!
//! Build with `--release` (it runs the `beebot-server` beside its own binary):
//! `cargo build --release -p beebot-server -p beebot-tools --bins`, then
//! `target/release/beebot-loadgen`.

mod herd;
mod null;
mod play;
mod report;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use tokio::sync::Semaphore;

use beebot_client::net::{Link, ServerId};
use beebot_client::usage::{self, Process};
use beebot_server::config::DataDir;
use beebot_shared::invite::Invite;
use beebot_shared::proto::{HostInfo, Request, Response};
use beebot_shared::rt::runtime;
use beebot_tools::loadfiles::LinkFileSizes;

use play::{Host, InFlight, Plan};
use report::{ServerUse, Sinks, Stats};

/// Connections set up at once (enrolment, reconnection): stays under the
/// server's per-address limit of unauthenticated connections.
const SETUP_CONCURRENCY: usize = 32;
/// Longest the server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest the requests still in flight at the end are waited for.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// Slots each host says it runs (a new host's most until it is trusted).
const HOST_SLOTS: u32 = beebot_server::validate::UNTRUSTED_MAX_SLOTS;
/// The benchmark each host reports (a desktop on a fast office network).
const HOST_PAGES_PER_S: f64 = 20.0;
const HOST_KB_PER_S: f64 = 4_000.0;
/// Progress interval when the server's welcome names none.
const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(about = "Play N hosts against a real beebot-server on loopback, on a real round's path")]
struct Args {
    /// Hosts enrolled and held connected at once.
    #[arg(long, default_value_t = 2000)]
    hosts: usize,
    /// Work requests per second asked of the server, over all hosts.
    #[arg(long, default_value_t = 5000)]
    rate: u64,
    /// Uploads per second over all hosts (each of a unit the host holds;
    /// 0: none, the round's units stay handed out).
    #[arg(long, default_value_t = 2000)]
    upload_rate: u64,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
    /// Seconds of load before the measurement (not in the table).
    #[arg(long, default_value_t = 5)]
    warmup: u64,
    /// Sites in the round: more than the run hands out, so every stretch
    /// finds queued jobs (each is one unit to hand out and upload).
    #[arg(long, default_value_t = 100_000)]
    sites: usize,
    /// The round's politeness delay, ms; results claim the time it takes.
    #[arg(long, default_value_t = 1000)]
    delay_ms: u64,
    /// The round's policy (default: the server's).
    #[arg(long)]
    policy: Option<String>,
    /// Median records of an uploaded link file.
    #[arg(long, default_value_t = LinkFileSizes::default().median)]
    records_median: u64,
    /// Most records of an uploaded link file.
    #[arg(long, default_value_t = LinkFileSizes::default().most)]
    records_most: u64,
    /// Share of the hosts that lie (0 to 1): they upload made-up link files
    /// that pass every check an upload meets alone and disagree with an
    /// honest copy of the job (`loadfiles::made_up_result`).
    #[arg(long, default_value_t = 0.0)]
    liars: f64,
    /// After the load: kill and restart the server, and reconnect this many
    /// hosts with the client's backoff (0: skip).
    #[arg(long, default_value_t = 200)]
    herd: usize,
    /// The server binary (default: `beebot-server` beside this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Play the load against a null server instead: the server's QUIC
    /// endpoint and the protocol's framing answering every request at once
    /// with an answer of the real one's shape, with no grid behind them
    /// (no store, policy, signature or check). Its CPU is the transport's
    /// own share of a request. Hosts connect without enrolling; no herd.
    #[arg(long)]
    null_server: bool,
    /// Be the null server (what `--null-server` starts).
    #[arg(long, hide = true)]
    serve_null: bool,
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

async fn enrol(
    server: &ServerId,
    token: Vec<u8>,
    n: usize,
    liar: bool,
    stats: &Stats,
) -> Result<(Host, Option<Duration>)> {
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
    let welcome = link.hello(id, &key).await?;
    stats.hello.add(t.elapsed());
    // As a joined client does: its benchmark once, then the sites it
    // scans at once after every hello.
    for req in [
        Request::Benchmark {
            pages_per_s: HOST_PAGES_PER_S,
            kb_per_s: HOST_KB_PER_S,
            slots: HOST_SLOTS,
        },
        Request::Concurrency { slots: HOST_SLOTS },
    ] {
        match link.request(&req).await? {
            Response::Ack => {}
            other => bail!("{req:?} answered {other:?}"),
        }
    }
    let progress = match welcome {
        Response::Welcome { policy_hints, .. } if policy_hints.progress_interval_s > 0 => {
            Some(Duration::from_secs(policy_hints.progress_interval_s))
        }
        _ => None,
    };
    Ok((Host::new(id, key, link, liar), progress))
}

/// A fresh data dir in `tmp` and a server on it with its ports pinned (so a
/// restarted server is where the hosts look for it), a round of
/// `args.sites` sites at `args.delay_ms`, and an invite for `args.hosts` hosts.
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
        .map(|i| format!("site{i}.example.edu\n"))
        .collect();
    let sites_path = tmp.join("sites.txt");
    std::fs::write(&sites_path, sites)?;
    admin(
        bin,
        &dir,
        &["sites", "import", sites_path.to_str().context("path")?],
    )?;
    let delay = args.delay_ms.to_string();
    let mut start = vec!["round", "start", "--delay-ms", &delay];
    if let Some(p) = &args.policy {
        start.extend(["--policy", p]);
    }
    admin(bin, &dir, &start)?;
    let hosts = args.hosts.to_string();
    let code = admin(bin, &dir, &["invite", "--uses", &hosts, "--expires", "1h"])?;
    let invite = Invite::from_code(code.lines().last().unwrap_or_default())?;
    Ok((child, invite))
}

/// Enrol `count` hosts, [`SETUP_CONCURRENCY`] at a time; a failed
/// enrolment is printed and left out. Returns the hosts and the progress
/// interval the server's welcome named.
async fn enrol_all(
    count: usize,
    liars: usize,
    server: &ServerId,
    token: Option<&[u8]>,
    stats: &Arc<Stats>,
) -> Result<(Vec<Arc<Host>>, Duration)> {
    let gate = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut pending = Vec::new();
    for n in 0..count {
        let gate = gate.clone();
        let server = server.clone();
        let token = token.map(<[u8]>::to_vec);
        let stats = stats.clone();
        let liar = n < liars;
        pending.push(tokio::spawn(async move {
            let _g = gate.acquire_owned().await?;
            match token {
                Some(token) => enrol(&server, token, n, liar, &stats).await,
                // The null server: connected is ready.
                None => {
                    let link = Link::connect(&server).await?;
                    let key = beebot_shared::sign::generate_key();
                    Ok((Host::new(n as u64, key, link, liar), None))
                }
            }
        }));
    }
    let mut hosts = Vec::new();
    let mut progress = None;
    for p in pending {
        match p.await? {
            Ok((h, every)) => {
                hosts.push(Arc::new(h));
                progress = progress.or(every);
            }
            Err(e) => eprintln!("enrolment failed: {e:#}"),
        }
    }
    Ok((hosts, progress.unwrap_or(DEFAULT_PROGRESS_EVERY)))
}

/// Every host plays `plan` into `sinks`; returns once every request due
/// before `plan.until` is answered (or [`DRAIN_TIMEOUT`] passed).
async fn load(hosts: &[Arc<Host>], plan: &Arc<Plan>, sinks: &Arc<Sinks>) {
    let flying = Arc::new(InFlight::default());
    let tasks: Vec<_> = hosts
        .iter()
        .map(|h| {
            tokio::spawn(play::play(
                h.clone(),
                plan.clone(),
                sinks.clone(),
                flying.clone(),
            ))
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let drained = Instant::now();
    while flying.now() > 0 && drained.elapsed() < DRAIN_TIMEOUT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if flying.now() > 0 {
        eprintln!(
            "{} requests still unanswered {}s after the load",
            flying.now(),
            DRAIN_TIMEOUT.as_secs()
        );
    }
}

fn mb(kb: Option<u64>) -> f64 {
    kb.map_or(f64::NAN, |kb| kb as f64 / 1024.0)
}

/// Enrol the hosts (connect them, with the null server: `token` `None`),
/// warm up, measure, print the table, then the herd.
async fn run_load(
    args: &Args,
    bin: &Path,
    tmp: &Path,
    server: &ServerId,
    token: Option<&[u8]>,
    mut child: Child,
) -> Result<Child> {
    let server = server.clone();
    let setup = Arc::new(Stats::default());
    let enrol_start = Instant::now();
    let liars = (args.hosts as f64 * args.liars).round() as usize;
    let (hosts, progress_every) = enrol_all(args.hosts, liars, &server, token, &setup).await?;
    let enrol_secs = enrol_start.elapsed().as_secs_f64();
    let pid = Process::Pid(child.id());
    let rss_idle_mb = mb(usage::rss_kb(pid));

    let n = hosts.len().max(1) as f64;
    let every = |rate: u64| Duration::from_secs_f64(n / rate.max(1) as f64);
    let sizes = LinkFileSizes {
        median: args.records_median,
        most: args.records_most,
        ..LinkFileSizes::default()
    };
    let secs = args.seconds.max(1);
    let from = tokio::time::Instant::now() + Duration::from_secs(args.warmup);
    let plan = Arc::new(Plan {
        work_every: every(args.rate),
        upload_every: (args.upload_rate > 0).then(|| every(args.upload_rate)),
        progress_every,
        slots: HOST_SLOTS,
        sizes,
        until: from + Duration::from_secs(secs),
    });
    println!(
        "beebot-loadgen: {} hosts over QUIC on loopback against {}",
        hosts.len(),
        if token.is_none() {
            "a null server (QUIC and framing only, no grid)".to_string()
        } else {
            bin.display().to_string()
        }
    );
    println!(
        "round of {} sites at a {} ms delay{}; asked {} work requests/s and {} uploads/s; \
         link files of median {} records, at most {}; progress every {}s",
        args.sites,
        args.delay_ms,
        args.policy
            .as_deref()
            .map(|p| format!(", policy {p}"))
            .unwrap_or_default(),
        args.rate,
        args.upload_rate,
        sizes.median,
        sizes.most,
        progress_every.as_secs()
    );
    let lying = hosts.iter().filter(|h| h.liar).count();
    if lying > 0 {
        println!(
            "{lying} of {} hosts lie: their link files are made up",
            hosts.len()
        );
    }
    println!(
        "{} enrolled in {:.1}s (hello p50 {:.1} ms); {}s of warm-up then {}s measured, one \
         schedule; latency from when each request was due",
        hosts.len(),
        enrol_secs,
        setup.hello.ms_at(0.5),
        args.warmup,
        secs
    );
    println!();
    let sinks = Arc::new(Sinks {
        warm: Stats::default(),
        measured: Stats::default(),
        from,
    });
    // CPU over the measured stretch of the schedule (answers still coming
    // after it are the backlog of a server that fell behind).
    let until = plan.until;
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(from).await;
        let at_from = (
            usage::cpu_seconds(pid).unwrap_or(f64::NAN),
            usage::cpu_seconds(Process::This).unwrap_or(f64::NAN),
        );
        tokio::time::sleep_until(until).await;
        (
            usage::cpu_seconds(pid).unwrap_or(f64::NAN) - at_from.0,
            usage::cpu_seconds(Process::This).unwrap_or(f64::NAN) - at_from.1,
        )
    });
    load(&hosts, &plan, &sinks).await;
    let drained = tokio::time::Instant::now().saturating_duration_since(until);
    let (cpu_s, own) = cpu.await.unwrap_or((f64::NAN, f64::NAN));
    let server_use = ServerUse {
        cpu_s,
        rss_idle_mb,
        rss_mb: mb(usage::rss_kb(pid)),
        peak_mb: mb(usage::peak_rss_kb(pid)),
    };
    println!(
        "warm-up: {} work requests, {} uploads accepted (not in the table)",
        sinks.warm.work_requests(),
        sinks
            .warm
            .accepted
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    let stats = &sinks.measured;
    let secs = secs as f64;
    report::print_table(stats, secs, &server_use, own);
    let held = hosts.iter().filter(|h| h.link.is_open()).count();
    println!("{:<34} {:>12}", "hosts held connected", held);
    println!(
        "{:<34} {:>12.1}",
        "last answers after the end, s",
        drained.as_secs_f64()
    );

    if args.herd > 0 && token.is_some() {
        let n = args.herd.min(hosts.len());
        let (dir, log) = (tmp.join("server"), tmp.join("server.log"));
        child = herd::herd(&hosts[..n], &server, bin, &dir, &log, &mut child).await?;
    }
    for h in &hosts {
        h.link.close();
    }
    Ok(child)
}

/// Start the null server (this binary with `--serve-null`) and read where
/// it listens and its certificate's fingerprint.
fn start_null_server() -> Result<(Child, ServerId)> {
    let exe = std::env::current_exe().context("own path")?;
    // Its stdin stays open while this process lives: it exits when this
    // one does, whatever way.
    let mut child = Command::new(exe)
        .arg("--serve-null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("start the null server")?;
    let out = child.stdout.take().context("null server's stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .context("null server's first line")?;
    let mut words = line.split_whitespace();
    let (Some(null::READY), Some(addr), Some(fp)) = (words.next(), words.next(), words.next())
    else {
        let _ = child.kill();
        bail!("the null server did not start: {line:?}");
    };
    let cert_sha256 = hex::decode(fp)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .context("null server's fingerprint")?;
    let server = ServerId {
        addr: addr.to_string(),
        server_name: "localhost".into(),
        cert_sha256,
    };
    Ok((child, server))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(0.0..=1.0).contains(&args.liars) {
        bail!(
            "--liars is a share of the hosts, from 0 to 1: {}",
            args.liars
        );
    }
    if args.serve_null {
        // Its warnings (a socket buffer smaller than asked) on stderr.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
            .with_writer(std::io::stderr)
            .init();
        let listen = "127.0.0.1:0".parse().context("address")?;
        return runtime()?.block_on(null::serve(listen, HOST_SLOTS));
    }
    let tmp = tempfile::tempdir().context("temp dir")?;
    let mut child = if args.null_server {
        let (child, server) = start_null_server()?;
        let bin = std::env::current_exe().context("own path")?;
        runtime()?.block_on(run_load(&args, &bin, tmp.path(), &server, None, child))?
    } else {
        let bin = server_bin(&args)?;
        let (child, invite) = setup_server(&args, &bin, tmp.path())?;
        let server = ServerId {
            addr: invite.addr.clone(),
            server_name: invite.server_name.clone(),
            cert_sha256: invite.cert_sha256,
        };
        let token = Some(invite.token.as_slice());
        let child =
            runtime()?.block_on(run_load(&args, &bin, tmp.path(), &server, token, child))?;
        // What the grid made of the load: jobs settled, hosts.
        match admin(&bin, &tmp.path().join("server"), &["status"]) {
            Ok(status) => {
                for line in status.lines() {
                    if line.starts_with("jobs") || line.starts_with("hosts") {
                        println!("server's {line}");
                    }
                }
            }
            Err(e) => eprintln!("the server's status: {e:#}"),
        }
        child
    };
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}
