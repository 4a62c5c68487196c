//! `beebot-server`: the admin's command line. `init`, `serve` and `demo` work on
//! the data dir directly; every other command talks to the running server's
//! admin API on loopback with the token from the data dir.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use beebot_server::api::*;
use beebot_server::cli_util::{parse_duration, AdminClient};
use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::model::{HostRecord, JobState, RoundState, SiteRecord};
use beebot_server::{demo, Server};
use beebot_shared::scope::parse_site;

#[derive(Parser)]
#[command(
    name = "beebot-server",
    version,
    about = "BeeBot grid server: sites, rounds, hosts and link graphs"
)]
struct Cli {
    /// Server data dir (default: the platform data dir).
    #[arg(long, global = true, env = "BEEBOT_SERVER_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a data dir: project key, certificate, admin token, config.
    Init {
        /// HOST:PORT that clients use to reach this server (goes into invites).
        #[arg(long, default_value = "127.0.0.1:4433")]
        public_addr: String,
        /// UDP address the QUIC endpoint binds.
        #[arg(long, default_value = "0.0.0.0:4433")]
        listen: String,
        /// Admin API address (loopback only).
        #[arg(long, default_value = "127.0.0.1:4480")]
        admin_listen: String,
        /// Use this PEM certificate instead of a self-signed one (with --key).
        #[arg(long)]
        cert: Option<PathBuf>,
        /// PEM private key of --cert.
        #[arg(long)]
        key: Option<PathBuf>,
    },
    /// Serve clients (QUIC) and the admin API until Ctrl-C or SIGTERM.
    Serve,
    /// Print an invite code (alone on the last line).
    Invite {
        /// How many hosts may join with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// How long it stays valid (e.g. 7d, 12h).
        #[arg(long, default_value = "7d", value_parser = parse_duration)]
        expires: Duration,
    },
    /// The target set.
    Sites {
        #[command(subcommand)]
        cmd: SitesCmd,
    },
    /// Scan rounds.
    Round {
        #[command(subcommand)]
        cmd: RoundCmd,
    },
    /// Enrolled hosts.
    Hosts {
        #[command(subcommand)]
        cmd: HostsCmd,
    },
    /// The grid at a glance.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Export a round's outbound links.
    Export {
        #[arg(long)]
        round: u64,
        #[arg(long, default_value = "tsv", value_parser = ["tsv", "jsonl"])]
        format: String,
        /// Write here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run the whole grid on loopback: synthetic web, server, clients, one round.
    Demo {
        #[arg(long, default_value_t = 40)]
        sites: usize,
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Keep the demo's data dir here instead of a temporary one.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SitesCmd {
    /// Add sites by host or URL.
    Add {
        #[arg(required = true)]
        sites: Vec<String>,
    },
    /// Import a file: one host or URL a line, `#` comments, blank lines ignored.
    Import {
        file: PathBuf,
    },
    List,
    Remove {
        host: String,
    },
}

#[derive(Subcommand)]
enum RoundCmd {
    /// Start a round over the target set; prints its id alone on the last line.
    Start {
        /// Scheduling policy (size-aware, round-robin).
        #[arg(long)]
        policy: Option<String>,
        #[arg(long)]
        max_pages: Option<u32>,
        #[arg(long)]
        max_depth: Option<u32>,
        /// Politeness delay between requests to one host.
        #[arg(long)]
        delay_ms: Option<u64>,
        #[arg(long, value_parser = ["host", "subdomains", "domain"])]
        scope: Option<String>,
        /// Longest deadline a unit gets (e.g. 2h).
        #[arg(long, value_parser = parse_duration)]
        max_deadline: Option<Duration>,
        /// Failed or expired attempts before a job is marked failed.
        #[arg(long)]
        max_attempts: Option<u32>,
    },
    List,
    Show {
        id: u64,
        #[arg(long)]
        json: bool,
    },
    /// Wait until every job of the round is done or failed.
    Wait {
        id: u64,
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        timeout: Duration,
    },
    Cancel {
        id: u64,
    },
}

#[derive(Subcommand)]
enum HostsCmd {
    List,
    Revoke { id: u64 },
}

/// Exit code of `round wait` on timeout.
const EXIT_TIMEOUT: i32 = 3;

fn main() {
    let cli = Cli::parse();
    let default_level = match cli.cmd {
        Cmd::Serve => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

fn data_dir(explicit: Option<PathBuf>) -> Result<DataDir> {
    if let Some(d) = explicit {
        return Ok(DataDir(d));
    }
    let dirs = directories::ProjectDirs::from("org", "BeeBot", "beebot-server")
        .context("cannot find a data dir; pass --data-dir DIR")?;
    Ok(DataDir(dirs.data_dir().to_path_buf()))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn run(cli: Cli) -> Result<i32> {
    let dir = data_dir(cli.data_dir)?;
    match cli.cmd {
        Cmd::Init {
            public_addr,
            listen,
            admin_listen,
            cert,
            key,
        } => {
            let cfg = config::init(
                &dir,
                &InitOptions {
                    public_addr,
                    listen,
                    admin_listen,
                    cert_pem: cert,
                    key_pem: key,
                },
            )?;
            println!("initialised {}", dir.0.display());
            println!("  QUIC listen  {}", cfg.listen);
            println!("  public addr  {}", cfg.public_addr);
            println!("  admin API    {}", cfg.admin_listen);
            println!("next: `beebot-server serve`, then `beebot-server invite`");
        }
        Cmd::Serve => {
            let rt = runtime()?;
            rt.block_on(async {
                let server = Server::bind(dir).await?;
                let r = server.runtime();
                println!(
                    "serving QUIC on {} (public {}), admin API on http://{}",
                    r.quic_addr, r.public_addr, r.admin_addr
                );
                server.run(shutdown_signal()).await
            })?;
        }
        Cmd::Invite { uses, expires } => {
            let c = AdminClient::new(&dir)?;
            let r: InviteResponse = c.post(
                "/api/invites",
                &InviteRequest {
                    uses,
                    expires_s: expires.as_secs(),
                },
            )?;
            println!(
                "invite for {uses} host(s), valid for {}s; send this line to the employee:",
                expires.as_secs()
            );
            println!("{}", r.code);
        }
        Cmd::Sites { cmd } => {
            let c = AdminClient::new(&dir)?;
            match cmd {
                SitesCmd::Add { sites } => {
                    for s in &sites {
                        parse_site(s).with_context(|| format!("`{s}`"))?;
                    }
                    let r: SitesAdded = c.post("/api/sites", &SitesAdd { sites })?;
                    println!("added {} site(s); {} in the target set", r.added, r.total);
                }
                SitesCmd::Import { file } => {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    let sites = parse_site_file(&text)
                        .with_context(|| format!("{}: nothing imported", file.display()))?;
                    let r: SitesAdded = c.post("/api/sites", &SitesAdd { sites })?;
                    println!(
                        "imported {} new site(s); {} in the target set",
                        r.added, r.total
                    );
                }
                SitesCmd::List => {
                    let sites: Vec<SiteRecord> = c.get("/api/sites")?;
                    for s in sites {
                        match s.last_scan {
                            Some(l) => println!("{}\t{} pages\t{} links", s.host, l.pages, l.links),
                            None => println!("{}\tnever scanned", s.host),
                        }
                    }
                }
                SitesCmd::Remove { host } => {
                    c.delete(&format!("/api/sites/{host}"))?;
                    println!("removed {host}");
                }
            }
        }
        Cmd::Round { cmd } => return round(&dir, cmd),
        Cmd::Hosts { cmd } => {
            let c = AdminClient::new(&dir)?;
            match cmd {
                HostsCmd::List => {
                    let hosts: Vec<HostRecord> = c.get("/api/hosts")?;
                    println!("id\tname\tstate\tjobs\tpages\tmissed\tpages/s\tlast seen");
                    let now = beebot_server::now_ms();
                    for h in hosts {
                        let speed = if h.seconds_done > 0.0 {
                            format!("{:.1}", h.pages_done as f64 / h.seconds_done)
                        } else {
                            h.benchmark
                                .map(|b| format!("{:.1}", b.pages_per_s))
                                .unwrap_or("-".into())
                        };
                        println!(
                            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}s ago",
                            h.id,
                            h.info.name,
                            if h.revoked { "revoked" } else { "active" },
                            h.jobs_done,
                            h.pages_done,
                            h.deadlines_missed,
                            speed,
                            now.saturating_sub(h.last_seen_ms) / 1000
                        );
                    }
                }
                HostsCmd::Revoke { id } => {
                    c.post_empty(&format!("/api/hosts/{id}/revoke"))?;
                    println!("host {id} revoked");
                }
            }
        }
        Cmd::Status { json } => {
            let c = AdminClient::new(&dir)?;
            let s: StatusResponse = c.get("/api/status")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                println!("server       {}", s.public_addr);
                println!("certificate  sha256:{}", s.cert_sha256);
                println!("sites        {}", s.grid.sites);
                println!(
                    "hosts        {} active, {} revoked",
                    s.grid.hosts, s.grid.hosts_revoked
                );
                println!("rounds       {} running", s.grid.rounds_running);
                println!(
                    "jobs         {} queued, {} running, {} done, {} failed",
                    s.grid.jobs_queued, s.grid.jobs_running, s.grid.jobs_done, s.grid.jobs_failed
                );
            }
        }
        Cmd::Export { round, format, out } => {
            let c = AdminClient::new(&dir)?;
            let body = c.get_raw(&format!("/api/rounds/{round}/export?format={format}"))?;
            match out {
                Some(path) => {
                    std::fs::write(&path, &body)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    eprintln!("wrote {} ({} bytes)", path.display(), body.len());
                }
                None => std::io::stdout().write_all(&body)?,
            }
        }
        Cmd::Demo {
            sites,
            clients,
            keep,
        } => {
            let rt = runtime()?;
            rt.block_on(demo::run(demo::DemoOptions {
                sites,
                clients,
                keep,
            }))?;
        }
    }
    Ok(0)
}

/// Parse a `sites import` file; the first bad line fails the whole file.
fn parse_site_file(text: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match parse_site(line) {
            Ok(_) => out.push(line.to_string()),
            Err(e) => bail!("line {}: `{line}`: {e}", i + 1),
        }
    }
    if out.is_empty() {
        bail!("no sites in the file");
    }
    Ok(out)
}

fn round(dir: &DataDir, cmd: RoundCmd) -> Result<i32> {
    let c = AdminClient::new(dir)?;
    match cmd {
        RoundCmd::Start {
            policy,
            max_pages,
            max_depth,
            delay_ms,
            scope,
            max_deadline,
            max_attempts,
        } => {
            let r: RoundStarted = c.post(
                "/api/rounds",
                &RoundStart {
                    policy,
                    max_pages,
                    max_depth,
                    delay_ms,
                    scope,
                    deadline_max_s: max_deadline.map(|d| d.as_secs()),
                    max_attempts,
                    ..Default::default()
                },
            )?;
            println!("round started");
            println!("{}", r.id);
        }
        RoundCmd::List => {
            let rounds: Vec<RoundSummary> = c.get("/api/rounds")?;
            println!("id\tstate\tpolicy\tjobs\tdone\tfailed\tpages\tlinks");
            for r in rounds {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    r.round.id,
                    r.round.state.as_str(),
                    r.round.params.policy,
                    r.counts.total,
                    r.counts.done,
                    r.counts.failed,
                    r.counts.pages,
                    r.counts.links
                );
            }
        }
        RoundCmd::Show { id, json } => {
            let d: RoundDetail = c.get(&format!("/api/rounds/{id}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                let p = &d.round.params;
                println!(
                    "round {} ({}), policy {}, scope {:?}, max {} pages, delay {} ms",
                    d.round.id,
                    d.round.state.as_str(),
                    p.policy,
                    p.scope,
                    p.max_pages,
                    p.delay_ms
                );
                println!(
                    "jobs: {} total, {} queued, {} running, {} done, {} failed; {} pages, {} links",
                    d.counts.total,
                    d.counts.queued,
                    d.counts.running,
                    d.counts.done,
                    d.counts.failed,
                    d.counts.pages,
                    d.counts.links
                );
                println!("site\tstate\tattempts\tpages\tlinks\thost\treasons");
                for j in &d.jobs {
                    let (pages, links, host) = j
                        .result
                        .as_ref()
                        .map(|r| {
                            (
                                r.summary.pages.to_string(),
                                r.summary.links.to_string(),
                                r.host_id.to_string(),
                            )
                        })
                        .unwrap_or(("-".into(), "-".into(), "-".into()));
                    println!(
                        "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                        j.site,
                        j.state.as_str(),
                        j.attempts.len(),
                        pages,
                        links,
                        host,
                        j.reasons.join("; ")
                    );
                }
            }
        }
        RoundCmd::Wait { id, timeout } => {
            let start = Instant::now();
            loop {
                let d: RoundDetail = c.get(&format!("/api/rounds/{id}"))?;
                if d.round.state != RoundState::Running {
                    println!(
                        "round {id} {}: {} done, {} failed of {} jobs",
                        d.round.state.as_str(),
                        d.counts.done,
                        d.counts.failed,
                        d.counts.total
                    );
                    return Ok(0);
                }
                if start.elapsed() >= timeout {
                    let open = d
                        .jobs
                        .iter()
                        .filter(|j| !matches!(j.state, JobState::Done | JobState::Failed))
                        .count();
                    eprintln!(
                        "error: round {id} still has {open} open job(s) after {}s",
                        timeout.as_secs()
                    );
                    return Ok(EXIT_TIMEOUT);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        RoundCmd::Cancel { id } => {
            c.post_empty(&format!("/api/rounds/{id}/cancel"))?;
            println!("round {id} cancelled");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_file_reports_the_bad_line() {
        let ok = parse_site_file("# list\n\nwww.a.edu\nhttps://b.org/x  # trailing\n").unwrap();
        assert_eq!(ok, vec!["www.a.edu", "https://b.org/x"]);
        let err = parse_site_file("a.edu\nnot a host\nb.edu\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        assert!(parse_site_file("# only comments\n").is_err());
    }
}
