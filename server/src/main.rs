//! `beebot-server`: the admin's command line. `init` and `serve` work on the
//! data dir directly; every other command talks to the running server's
//! admin API on loopback with the token from the data dir.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use beebot_server::api::*;
use beebot_server::cli_util::{
    parse_duration, path_segment, typed_duration, utc_minute, AdminClient, TypedDuration,
};
use beebot_server::config::{self, DataDir, InitOptions};
use beebot_server::model::{JobState, RoundState, SiteRecord};
use beebot_server::{simulate, Server};
use beebot_shared::rt::{runtime, shutdown_signal};
use beebot_shared::scope::parse_site;
use beebot_shared::util::human_duration;

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
        /// TCP address of the reference site hosts benchmark against, or `off`
        /// (default: the --listen IP, port 4481; port 0 when --listen's is 0).
        #[arg(long, value_name = "ADDR:PORT|off")]
        reference_listen: Option<String>,
        /// Point the project at another reference site (a URL) instead of the
        /// one this server serves.
        #[arg(long, value_name = "URL")]
        reference_site: Option<String>,
        /// How site owners reach whoever runs this crawler: a web page
        /// (https://...) or an e-mail address. Shown on the about page the
        /// User-Agent links to. Asked for on a terminal when not given.
        #[arg(long, value_name = "URL|EMAIL")]
        contact: Option<String>,
        /// Who runs the crawler (an organisation or a person), shown on the
        /// about page.
        #[arg(long, value_name = "NAME", default_value = "")]
        operator: String,
    },
    /// Serve clients (QUIC) and the admin API until Ctrl-C or SIGTERM.
    Serve,
    /// Print an invite code (alone on the last line); `invite list` and
    /// `invite revoke ID` manage the invites made.
    #[command(args_conflicts_with_subcommands = true)]
    Invite {
        #[command(subcommand)]
        cmd: Option<InviteCmd>,
        /// How many hosts may join with it.
        #[arg(long, default_value_t = 1)]
        uses: u32,
        /// How long it stays valid, with a unit (e.g. 14d, 12h): a minute to a year.
        #[arg(long, default_value = "7d", value_parser = typed_duration)]
        expires: TypedDuration,
        /// Allow a lifetime under a minute (trials, tests).
        #[arg(long)]
        force: bool,
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
    /// The grid at a glance: sites, hosts, the jobs of the running rounds
    /// (or of the last one), and where the dashboard is.
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
    /// Run the real scheduler against simulated hosts on a virtual clock and
    /// print a table per policy (makespan, ratio to the lower bound, ...).
    Simulate {
        /// Sites file: `HOST [PAGES]` a line.
        #[arg(long, conflicts_with = "synthetic_sites")]
        sites: Option<PathBuf>,
        /// N synthetic sites with power-law sizes (the default: 99).
        #[arg(long)]
        synthetic_sites: Option<usize>,
        /// Hosts file: `NAME PAGES_PER_S [SLOTS]` a line.
        #[arg(long, conflicts_with = "synthetic_hosts")]
        hosts: Option<PathBuf>,
        /// M synthetic hosts with speeds over a factor of ten (the default: 3).
        #[arg(long)]
        synthetic_hosts: Option<usize>,
        /// A policy name, or `all`.
        #[arg(long, default_value = "all")]
        policy: String,
        /// Runs per policy, one a seed.
        #[arg(long, default_value_t = 20)]
        seeds: u32,
        /// The first seed (runs use seeds FIRST..FIRST+SEEDS).
        #[arg(long, default_value_t = 0)]
        first_seed: u64,
        /// True sizes of scanned sites are off their last scan by up to ± this share.
        #[arg(long, default_value_t = 0.3)]
        noise: f64,
        /// Benchmarks are off the true speeds by up to ± this share (default: a third of --noise).
        #[arg(long)]
        bench_noise: Option<f64>,
        /// Share of time a host spends in random offline spells (5 min to 4 h).
        #[arg(long, default_value_t = 0.05)]
        dropout: f64,
        /// Share of hosts that go away during the round and never come back.
        #[arg(long, default_value_t = 0.05)]
        vanish: f64,
        /// Share of synthetic sites never scanned before (size unknown to the grid).
        #[arg(long, default_value_t = 0.1)]
        unknown: f64,
        /// Share of scans that fail on their host (the unit is given back).
        #[arg(long, default_value_t = 0.01)]
        scan_failures: f64,
        /// `desktops` (a third of the hosts always on, a third in office
        /// hours, a third nights and weekends) or `always`.
        #[arg(long, default_value = "desktops", value_parser = ["desktops", "always"])]
        availability: String,
        /// The round's politeness delay (the server's default).
        #[arg(long, default_value_t = 1000)]
        delay_ms: u64,
        /// The round's page cap per site (the server's default).
        #[arg(long, default_value_t = 1000)]
        max_pages: u32,
        /// The round's time budget of one scan (the server's default); a scan
        /// that reaches it goes on in a continuation unit.
        #[arg(long, default_value = "6h", value_parser = parse_duration)]
        max_scan_time: Duration,
        /// The round's validation: off (the default here: policies compared
        /// alone), adaptive or all. The `checks` column is its cost.
        #[arg(long, default_value = "off", value_parser = ["off", "adaptive", "all"])]
        validate: String,
        /// Hosts start trusted (validation at steady state) instead of new.
        #[arg(long)]
        trusted: bool,
        /// Print every run as JSON instead of the table.
        #[arg(long)]
        json: bool,
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
    Import { file: PathBuf },
    /// Every site of the target set, with its last scan's pages and links.
    List {
        /// Print the sites as JSON (fields: site, added_ms, last_round, pages, links).
        #[arg(long)]
        json: bool,
    },
    /// Remove a site, by host or URL (`x.edu` removes `www.x.edu`: one site).
    Remove { site: String },
    /// Exclude a host from crawling for good (a site owner asked): it leaves
    /// the target set, its jobs stop, no round or scope requests it again,
    /// and adding or importing it is refused. `x.edu` covers `www.x.edu`;
    /// `.x.edu` or --subdomains covers every name under it too.
    Exclude {
        /// A host or URL (every port); `.x.edu`: with its subdomains.
        host: String,
        /// Why (recorded with the date): e.g. "owner asked, ticket 42".
        #[arg(long)]
        reason: String,
        /// Exclude every subdomain too.
        #[arg(long)]
        subdomains: bool,
    },
    /// Lift an exclusion (the site is not added back: `sites add` it).
    Include { host: String },
    /// Excluded hosts: host, reason, date (UTC).
    Exclusions {
        /// Print them as JSON (fields: host, subdomains, reason, excluded_at, excluded_ms).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Export: tsv (with a header row) or json.
        #[arg(long, value_parser = ["tsv", "json"])]
        format: Option<String>,
        /// Write the export to this file instead of stdout.
        #[arg(long, requires = "format")]
        out: Option<PathBuf>,
    },
}

// Parsed once per run: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum RoundCmd {
    /// Start a round over the target set; prints its id alone on the last line.
    Start {
        /// Scheduling policy: adaptive (default), round-robin, batch, level, pack, size-aware.
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
        /// Longest deadline a unit gets (e.g. 2d; at most 30d), not below the
        /// minimum deadline. Deadlines find hosts that went silent; a scan
        /// that reports progress is extended.
        #[arg(long, value_parser = typed_duration)]
        max_deadline: Option<TypedDuration>,
        /// Shortest deadline a unit gets (default: the config's, 2m; under
        /// 1m only with --force).
        #[arg(long, value_parser = typed_duration)]
        min_deadline: Option<TypedDuration>,
        /// Time budget of one scan (e.g. 2h; default 6h; 1m to 7d). A scan that reaches
        /// it returns its records and frontier, and its site continues from
        /// there in another scan: a site is never cut short by it.
        #[arg(long, value_parser = typed_duration)]
        max_scan_time: Option<TypedDuration>,
        /// Failed or expired attempts before a job is marked failed.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Longest robots.txt Crawl-delay to honour (e.g. 30s; at most 60s).
        #[arg(long, value_parser = typed_duration)]
        max_crawl_delay: Option<TypedDuration>,
        /// Repeat: start the next scan when this one is over and this long
        /// has passed since it started (e.g. 7d; at least 1h unless --force).
        #[arg(long, value_parser = typed_duration)]
        every: Option<TypedDuration>,
        /// Allow durations under their sensible minimum (--every under 1h,
        /// deadlines and scan time under 1m): trials and tests.
        #[arg(long)]
        force: bool,
        /// Result validation: `adaptive` (default: an untrusted host's
        /// results are checked by another host's scan, a trusted host's at
        /// random), `all` (every result checked) or `off`.
        #[arg(long, value_parser = ["off", "adaptive", "all"])]
        validate: Option<String>,
    },
    /// Every round: state, policy, jobs done and failed, pages, links.
    List {
        /// Print the rounds as JSON (fields: id, state, policy, started_ms,
        /// finished_ms, every_s, jobs, queued, running, done, failed,
        /// complete, incomplete, pages, links).
        #[arg(long)]
        json: bool,
    },
    /// One round: its counts, and each site's state, scans, pages, links,
    /// hosts (running copies with their pages so far) and completeness.
    Show {
        id: u64,
        #[arg(long)]
        json: bool,
    },
    /// Wait until every job of the round is done or failed, showing its
    /// progress (a line updated in place on a terminal, else a line every
    /// --report-every). Exit 0 when over, 3 on timeout, 4 if cancelled.
    Wait {
        id: u64,
        #[arg(long, default_value = "24h", value_parser = typed_duration)]
        timeout: TypedDuration,
        /// How often to print a progress line when stdout is not a terminal.
        #[arg(long, default_value = WAIT_REPORT_EVERY, value_parser = typed_duration)]
        report_every: TypedDuration,
    },
    Cancel {
        id: u64,
    },
}

#[derive(Subcommand)]
enum InviteCmd {
    /// Every invite: id, uses left, expiry, creation (never the code).
    List,
    /// Revoke an invite by its id from `invite list` (or a prefix naming one):
    /// nobody joins with it any more.
    Revoke { id: String },
}

#[derive(Subcommand)]
enum HostsCmd {
    /// Every host: state, trust (valid results in a row), results found
    /// valid and invalid, work done, speed.
    List {
        /// Print the hosts as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a host by its id or its name (an active host's, if only one
    /// has it): it can no longer connect, and its units go back to the queue.
    Revoke {
        #[arg(value_name = "ID|NAME")]
        host: String,
    },
}

/// Exit code of `round wait` on timeout.
const EXIT_TIMEOUT: i32 = 3;
/// `round wait` on a round that was cancelled.
const EXIT_CANCELLED: i32 = 4;
/// How often `round wait` prints a line when stdout is not a terminal.
const WAIT_REPORT_EVERY: &str = "30s";
/// How often `round wait` asks the server how the round stands.
const WAIT_POLL: Duration = Duration::from_millis(500);

fn main() {
    // `beebot-server ... | head`: a reader that stopped early is not an
    // error (Rust ignores SIGPIPE, so a print to a closed pipe panics).
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info)
    }));
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
        // Colours on a terminal only: not in a log file or the journal.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The operator contact for `init`: `--contact` checked, else asked for on
/// a terminal, else refused with the flag to pass.
fn init_contact(given: Option<String>) -> Result<String> {
    if let Some(c) = given {
        return config::check_contact(&c).context("--contact");
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "no operator contact: pass --contact URL|EMAIL (a web page or an e-mail address \
             where site owners can reach whoever runs this crawler; it goes into the \
             User-Agent's about page)"
        );
    }
    config::ask_contact(std::io::stdin().lock(), std::io::stderr())
        .context("no usable operator contact")
}

fn data_dir(explicit: Option<PathBuf>) -> Result<DataDir> {
    if let Some(d) = explicit {
        return Ok(DataDir(d));
    }
    let dirs = directories::ProjectDirs::from("org", "BeeBot", "beebot-server")
        .context("cannot find a data dir; pass --data-dir DIR")?;
    Ok(DataDir(dirs.data_dir().to_path_buf()))
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
            reference_listen,
            reference_site,
            contact,
            operator,
        } => {
            // Checked before anything is written: a refused init leaves no file.
            let contact = init_contact(contact)?;
            let operator = config::check_operator(&operator).context("--operator")?;
            if let Some(addr) = reference_listen.as_deref().filter(|a| *a != "off") {
                addr.parse::<std::net::SocketAddr>().with_context(|| {
                    format!("--reference-listen `{addr}` is not ADDR:PORT or off")
                })?;
            }
            if let Some(url) = &reference_site {
                let parsed = url::Url::parse(url)
                    .with_context(|| format!("--reference-site `{url}` is not a URL"))?;
                anyhow::ensure!(
                    matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
                    "--reference-site `{url}` is not an http(s) URL"
                );
            }
            let mut cfg = config::init(
                &dir,
                &InitOptions {
                    public_addr,
                    listen,
                    admin_listen,
                    cert_pem: cert,
                    key_pem: key,
                    contact,
                    operator,
                },
            )?;
            if reference_listen.is_some() || reference_site.is_some() {
                if let Some(addr) = reference_listen {
                    cfg.reference_listen = if addr == "off" { String::new() } else { addr };
                }
                if let Some(url) = reference_site {
                    cfg.reference_site = url;
                }
                dir.save_config(&cfg)?;
            }
            println!("initialised {}", dir.0.display());
            println!("  QUIC listen  {}", cfg.listen);
            println!("  public addr  {}", cfg.public_addr);
            println!("  admin API    {}", cfg.admin_listen);
            println!("  contact      {}", cfg.contact);
            if !cfg.operator.is_empty() {
                println!("  operator     {}", cfg.operator);
            }
            match (cfg.reference_site.as_str(), cfg.reference_listen.as_str()) {
                ("", "") => println!("  reference    none (hosts will not benchmark)"),
                ("", addr) => println!("  reference    served on http://{addr}/"),
                (url, _) => println!("  reference    {url}"),
            }
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
                if let Some(addr) = r.reference_addr {
                    println!("reference site on http://{addr}/");
                }
                server.run(shutdown_signal()).await
            })?;
        }
        Cmd::Invite {
            cmd: Some(InviteCmd::List),
            ..
        } => {
            let c = AdminClient::new(&dir)?;
            let invites: InvitesList = c.get("/api/invites")?;
            if invites.is_empty() {
                eprintln!("no invites yet: create one with `beebot-server invite`");
                return Ok(0);
            }
            let now = beebot_server::now_ms();
            println!("id\tuses left\texpires\tcreated");
            for i in invites {
                let expires = if i.expires_ms <= now {
                    "expired".to_string()
                } else {
                    format!(
                        "in {} ({})",
                        human_duration(Duration::from_millis(i.expires_ms - now)),
                        utc_minute(i.expires_ms)
                    )
                };
                println!(
                    "{}\t{}\t{}\t{} ago",
                    i.id,
                    i.uses_left,
                    expires,
                    human_duration(Duration::from_millis(now.saturating_sub(i.created_ms)))
                );
            }
        }
        Cmd::Invite {
            cmd: Some(InviteCmd::Revoke { id }),
            ..
        } => {
            let c = AdminClient::new(&dir)?;
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("`{id}` is not an invite id: use an id from `beebot-server invite list`");
            }
            let r: InviteRevoked = c.post(&format!("/api/invites/{id}/revoke"), &())?;
            println!("invite {} revoked", r.id);
        }
        Cmd::Invite {
            cmd: None,
            uses,
            expires,
            force,
        } => {
            let expires = expires.within("--expires", &config::INVITE_EXPIRY, force)?;
            let c = AdminClient::new(&dir)?;
            let r: InviteResponse = c.post(
                "/api/invites",
                &InviteRequest {
                    uses,
                    expires_s: expires.as_secs(),
                    force,
                },
            )?;
            println!(
                "invite for {uses} host(s), expires in {} ({}); send this line to the employee:",
                human_duration(expires),
                utc_minute(r.expires_ms)
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
                    for x in &r.excluded {
                        eprintln!("refused {}", refused_line(x));
                    }
                    println!("added {} site(s); {} in the target set", r.added, r.total);
                    if !r.excluded.is_empty() {
                        return Ok(1);
                    }
                }
                SitesCmd::Import { file } => {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("cannot read {}", file.display()))?;
                    let lines = parse_site_file(&text)
                        .with_context(|| format!("{}: nothing imported", file.display()))?;
                    let sites = lines.iter().map(|(_, s)| s.clone()).collect();
                    let r: SitesAdded = c.post("/api/sites", &SitesAdd { sites })?;
                    for x in &r.excluded {
                        let line = lines.get(x.entry.wrapping_sub(1)).map_or(0, |l| l.0);
                        eprintln!("line {line}: skipped {}", refused_line(x));
                    }
                    let skipped = if r.excluded.is_empty() {
                        String::new()
                    } else {
                        format!("; {} line(s) skipped as excluded", r.excluded.len())
                    };
                    println!(
                        "imported {} new site(s); {} in the target set{skipped}",
                        r.added, r.total
                    );
                }
                SitesCmd::Exclude {
                    host,
                    reason,
                    subdomains,
                } => {
                    let e = beebot_shared::scope::Exclusion::parse(&host, subdomains)
                        .with_context(|| format!("`{host}`"))?;
                    if reason.trim().is_empty() {
                        bail!("say why {host} is excluded: --reason \"owner asked, ticket 42\"");
                    }
                    let r: Excluded = c.post(
                        "/api/exclusions",
                        &ExcludeRequest {
                            host: e.display(),
                            subdomains: e.subdomains,
                            reason,
                        },
                    )?;
                    let x = &r.exclusion;
                    if let Some(old) = &r.replaced {
                        println!(
                            "{} was excluded since {} ({}): reason and date replaced",
                            old.display(),
                            old.excluded_at,
                            old.reason
                        );
                    }
                    for site in &r.sites_removed {
                        println!("removed {site} from the target set");
                    }
                    if r.jobs_excluded > 0 {
                        println!(
                            "stopped {} job(s) of running rounds (failed: excluded)",
                            r.jobs_excluded
                        );
                    }
                    if r.copies_restarted > 0 {
                        println!(
                            "restarted {} running scan(s) whose scope reaches it",
                            r.copies_restarted
                        );
                    }
                    println!(
                        "excluded {}{} on {}: {}",
                        x.display(),
                        if x.subdomains {
                            " and its subdomains"
                        } else {
                            ""
                        },
                        x.excluded_at,
                        x.reason
                    );
                }
                SitesCmd::Include { host } => {
                    let e = beebot_shared::scope::Exclusion::parse(&host, false)
                        .with_context(|| format!("`{host}`"))?;
                    let path = path_segment(&e.host);
                    let r: ExclusionListed = c.delete_json(&format!("/api/exclusions/{path}"))?;
                    println!(
                        "lifted the exclusion of {} (excluded on {}: {}); `sites add {}` to crawl it again",
                        r.display(),
                        r.excluded_at,
                        r.reason,
                        r.host
                    );
                }
                SitesCmd::Exclusions { json, format, out } => {
                    let list: Vec<ExclusionListed> = c.get("/api/exclusions")?;
                    let text = match (json, format.as_deref()) {
                        (true, _) | (_, Some("json")) => {
                            format!("{}\n", serde_json::to_string_pretty(&list)?)
                        }
                        (_, Some(_)) => exclusions_tsv(&list),
                        _ => {
                            if list.is_empty() {
                                eprintln!("no host is excluded");
                            }
                            list.iter()
                                .map(|x| {
                                    format!("{}\t{}\t{}\n", x.display(), x.excluded_at, x.reason)
                                })
                                .collect()
                        }
                    };
                    match out {
                        Some(p) => std::fs::write(&p, text)
                            .with_context(|| format!("cannot write {}", p.display()))?,
                        None => print!("{text}"),
                    }
                }
                SitesCmd::List { json } => {
                    let sites: Vec<SiteRecord> = c.get("/api/sites")?;
                    if json {
                        let listed: Vec<SiteListed> = sites.iter().map(SiteListed::of).collect();
                        println!("{}", serde_json::to_string_pretty(&listed)?);
                        return Ok(0);
                    }
                    if sites.is_empty() {
                        eprintln!("no sites yet: add some with `beebot-server sites add HOST` or `sites import FILE`");
                    }
                    for s in sites {
                        match s.last_scan {
                            Some(l) => println!("{}\t{} pages\t{} links", s.host, l.pages, l.links),
                            None => println!("{}\tnever scanned", s.host),
                        }
                    }
                }
                SitesCmd::Remove { site } => {
                    // A URL names its site as its host does.
                    let host = parse_site(&site).with_context(|| format!("`{site}`"))?;
                    let path = path_segment(&host);
                    let r: SiteRemoved = c.delete_json(&format!("/api/sites/{path}"))?;
                    println!("removed {}", r.site);
                }
            }
        }
        Cmd::Round { cmd } => return round(&dir, cmd),
        Cmd::Hosts { cmd } => {
            let c = AdminClient::new(&dir)?;
            match cmd {
                HostsCmd::List { json } => {
                    let hosts: Vec<HostLine> = c.get("/api/hosts")?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&hosts)?);
                        return Ok(0);
                    }
                    if hosts.is_empty() {
                        eprintln!("no hosts yet: create an invite with `beebot-server invite`");
                        return Ok(0);
                    }
                    println!("id\tname\tstate\ttrust\tvalid\tinvalid\tjobs\tpages\tmissed\tpages/s\tbenchmark\tlast seen");
                    let now = beebot_server::now_ms();
                    for HostLine { host: h, trusted } in hosts {
                        let speed = if h.seconds_done > 0.0 {
                            format!("{:.1}", h.pages_done as f64 / h.seconds_done)
                        } else {
                            h.benchmark
                                .as_ref()
                                .map(|b| format!("{:.1}", b.pages_per_s))
                                .unwrap_or("-".into())
                        };
                        // The reference-site benchmark: pages/s and KB/s.
                        let bench = h.benchmark.as_ref().map_or("-".into(), |b| {
                            format!("{:.1} p/s {:.0} KB/s", b.pages_per_s, b.kb_per_s)
                        });
                        // Trust: its valid results in a row.
                        let trust = format!(
                            "{} ({} in a row)",
                            if trusted { "trusted" } else { "untrusted" },
                            h.consecutive_valid
                        );
                        println!(
                            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}s ago",
                            h.id,
                            h.info.name,
                            h.state(),
                            trust,
                            h.valid_results,
                            h.invalid_results,
                            h.jobs_done,
                            h.pages_done,
                            h.deadlines_missed,
                            speed,
                            bench,
                            now.saturating_sub(h.last_seen_ms) / 1000
                        );
                    }
                }
                HostsCmd::Revoke { host } => {
                    let path = path_segment(&host);
                    let r: HostRevoked = c.post(&format!("/api/hosts/{path}/revoke"), &())?;
                    println!("host {} ({}) revoked", r.id, r.name);
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
                    "hosts        {} active, {} revoked, {} left",
                    s.grid.hosts, s.grid.hosts_revoked, s.grid.hosts_left
                );
                println!("rounds       {} running", s.grid.rounds_running);
                let of = match (s.grid.rounds_running, s.grid.jobs_rounds.as_slice()) {
                    (_, []) => String::new(),
                    (0, [last]) => format!(" (round {last}, the last)"),
                    (_, ids) => format!(
                        " (round{} {})",
                        if ids.len() > 1 { "s" } else { "" },
                        ids.iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                println!(
                    "jobs         {} queued, {} running, {} done, {} failed, {} cancelled{of}",
                    s.grid.jobs_queued,
                    s.grid.jobs_running,
                    s.grid.jobs_done,
                    s.grid.jobs_failed,
                    s.grid.jobs_cancelled
                );
                if let Some(last) = &s.grid.last_round {
                    println!(
                        "last round   {} {}: {} of {} sites complete{}",
                        last.id,
                        last.state,
                        last.complete,
                        last.sites,
                        if last.incomplete > 0 {
                            format!(", {} INCOMPLETE", last.incomplete)
                        } else {
                            String::new()
                        }
                    );
                }
                println!(
                    "dashboard    {}/ (log in with the token in {})",
                    c.base(),
                    dir.admin_token().display()
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
                None => {
                    // A reader that stopped (`| head`) is not an error.
                    let mut out = std::io::stdout().lock();
                    match out.write_all(&body).and_then(|()| out.flush()) {
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                        other => other.context("cannot write the export to stdout")?,
                    }
                }
            }
            // The rows stay rows (no comment line a parser would trip on):
            // a cancelled round is said on stderr.
            let rounds: Vec<RoundSummary> = c.get("/api/rounds")?;
            if let Some(r) = rounds
                .iter()
                .find(|r| r.round.id == round && r.round.state == RoundState::Cancelled)
            {
                eprintln!(
                    "note: round {round} was cancelled: the export holds the {} sites done \
                     before the cancel; {} sites were not scanned to the end",
                    r.counts.done,
                    r.counts.total - r.counts.done
                );
            }
        }
        Cmd::Simulate {
            sites,
            synthetic_sites,
            hosts,
            synthetic_hosts,
            policy,
            seeds,
            first_seed,
            noise,
            bench_noise,
            dropout,
            vanish,
            unknown,
            scan_failures,
            availability,
            delay_ms,
            max_pages,
            max_scan_time,
            validate,
            trusted,
            json,
        } => simulate_cmd(
            sites,
            synthetic_sites,
            hosts,
            synthetic_hosts,
            &policy,
            seeds,
            simulate::SimOptions {
                noise,
                benchmark_noise: bench_noise.unwrap_or(noise / 3.0),
                dropout,
                vanish,
                unknown,
                scan_failures,
                availability: simulate::Availability::parse(&availability)
                    .unwrap_or(simulate::Availability::Desktops),
                delay_ms,
                max_pages,
                max_seconds: max_scan_time.as_secs(),
                first_seed,
                validate: validate.parse().map_err(anyhow::Error::msg)?,
                trusted,
                ..Default::default()
            },
            json,
        )?,
    }
    Ok(0)
}

/// `beebot-server simulate`: read or make the inputs, run, print.
#[allow(clippy::too_many_arguments)]
fn simulate_cmd(
    sites: Option<PathBuf>,
    synthetic_sites: Option<usize>,
    hosts: Option<PathBuf>,
    synthetic_hosts: Option<usize>,
    policy: &str,
    seeds: u32,
    opts: simulate::SimOptions,
    json: bool,
) -> Result<()> {
    use simulate::Input;
    if !(0.0..=0.95).contains(&opts.noise)
        || !(0.0..=0.95).contains(&opts.benchmark_noise)
        || !(0.0..=0.9).contains(&opts.dropout)
        || !(0.0..=1.0).contains(&opts.vanish)
        || !(0.0..=1.0).contains(&opts.unknown)
        || !(0.0..=0.5).contains(&opts.scan_failures)
    {
        bail!(
            "--noise and --bench-noise must be within 0..0.95, --dropout within 0..0.9, \
             --vanish and --unknown within 0..1, --scan-failures within 0..0.5"
        );
    }
    if opts.max_pages == 0 || opts.max_seconds == 0 {
        bail!("--max-pages and --max-scan-time must be positive");
    }
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let site_input = match sites {
        Some(p) => Input::Given(
            simulate::parse_sites(&read(&p)?).with_context(|| p.display().to_string())?,
        ),
        None => Input::Synthetic(synthetic_sites.unwrap_or(99)),
    };
    let host_input = match hosts {
        Some(p) => Input::Given(
            simulate::parse_hosts(&read(&p)?).with_context(|| p.display().to_string())?,
        ),
        None => Input::Synthetic(synthetic_hosts.unwrap_or(3)),
    };
    let names: Vec<&str> = if policy == "all" {
        beebot_server::scheduler::POLICY_NAMES
            .iter()
            .copied()
            .filter(|p| *p != "size-aware")
            .collect()
    } else {
        vec![policy]
    };
    let started = Instant::now();
    let results = simulate::run_all(&site_input, &host_input, &names, seeds, &opts)?;
    if json {
        let out: Vec<serde_json::Value> = results
            .iter()
            .map(|(p, runs)| {
                serde_json::json!({
                    "policy": p,
                    "summary": simulate::summarise(p, runs),
                    "runs": runs,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let describe = |n: Option<usize>, file: bool, what: &str| match (file, n) {
        (true, _) => format!("{what} from file"),
        (false, n) => format!("{} synthetic {what}", n.unwrap_or(0)),
    };
    let (ns, nh) = (
        match &site_input {
            Input::Given(v) => Some(v.len()),
            Input::Synthetic(n) => Some(*n),
        },
        match &host_input {
            Input::Given(v) => Some(v.len()),
            Input::Synthetic(n) => Some(*n),
        },
    );
    println!(
        "{}, {}; {seeds} seeds{}, noise {}, benchmark noise {:.2}, dropout {}, vanish {}, unknown {}, \
         scan failures {}, {} hosts, delay {} ms, max pages {}, max scan time {} s ({:.1}s)",
        describe(ns, matches!(site_input, Input::Given(_)), "sites"),
        describe(nh, matches!(host_input, Input::Given(_)), "hosts"),
        if opts.first_seed > 0 {
            format!(" from {}", opts.first_seed)
        } else {
            String::new()
        },
        opts.noise,
        opts.benchmark_noise,
        opts.dropout,
        opts.vanish,
        opts.unknown,
        opts.scan_failures,
        opts.availability.as_str(),
        opts.delay_ms,
        opts.max_pages,
        opts.max_seconds,
        started.elapsed().as_secs_f64()
    );
    let rows: Vec<_> = results
        .iter()
        .map(|(p, runs)| simulate::summarise(p, runs))
        .collect();
    print!("{}", simulate::table(&rows));
    Ok(())
}

/// An entry an exclusion refused, in words.
fn refused_line(x: &SiteRefused) -> String {
    format!(
        "{}: excluded ({} since {}: {}); lift it with `sites include {}`",
        x.site, x.excluded_by, x.excluded_at, x.reason, x.excluded_by
    )
}

/// Exclusions as TSV with a header row (reasons hold no tabs or newlines:
/// their whitespace is collapsed when recorded).
fn exclusions_tsv(list: &[ExclusionListed]) -> String {
    let mut out = String::from("host\tsubdomains\texcluded_at\treason\n");
    for x in list {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            x.host, x.subdomains, x.excluded_at, x.reason
        ));
    }
    out
}

/// Parse a `sites import` file into (line number, entry); the first bad
/// line fails the whole file.
fn parse_site_file(text: &str) -> Result<Vec<(usize, String)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match parse_site(line) {
            Ok(_) => out.push((i + 1, line.to_string())),
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
            min_deadline,
            max_scan_time,
            max_attempts,
            max_crawl_delay,
            every,
            validate,
            force,
        } => {
            // Each duration within its range, said in the words typed.
            let check = |d: Option<TypedDuration>, flag: &str, b: &config::DurationBounds| {
                d.map(|d| d.within(flag, b, force)).transpose()
            };
            let max_deadline = check(max_deadline, "--max-deadline", &config::DEADLINE)?;
            let min_deadline = check(min_deadline, "--min-deadline", &config::DEADLINE)?;
            let max_scan_time = check(max_scan_time, "--max-scan-time", &config::SCAN_TIME)?;
            let max_crawl_delay =
                check(max_crawl_delay, "--max-crawl-delay", &config::CRAWL_DELAY)?;
            let every = check(every, "--every", &config::REPEAT_PERIOD)?;
            let r: RoundStarted = c.post(
                "/api/rounds",
                &RoundStart {
                    policy,
                    max_pages,
                    max_depth,
                    delay_ms,
                    scope,
                    deadline_max_s: max_deadline.map(|d| d.as_secs()),
                    deadline_min_s: min_deadline.map(|d| d.as_secs()),
                    max_seconds: max_scan_time.map(|d| d.as_secs()),
                    max_attempts,
                    max_crawl_delay_ms: max_crawl_delay
                        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    every_s: every.map(|d| d.as_secs()),
                    validate,
                    force,
                },
            )?;
            if let Some(w) = &r.warning {
                eprintln!("warning: {w}");
            }
            match every {
                Some(every) => println!(
                    "round {} started; repeats every {}",
                    r.id,
                    human_duration(every)
                ),
                None => println!("round {} started", r.id),
            }
            println!("{}", r.id);
        }
        RoundCmd::List { json } => {
            let rounds: Vec<RoundSummary> = c.get("/api/rounds")?;
            if json {
                let listed: Vec<RoundListed> = rounds.iter().map(RoundListed::of).collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
                return Ok(0);
            }
            if rounds.is_empty() {
                eprintln!("no rounds yet: start one with `beebot-server round start`");
                return Ok(0);
            }
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
                    "round {} ({}), policy {}, scope {:?}, max {} pages, delay {} ms, validation {}",
                    d.round.id,
                    d.round.state.as_str(),
                    p.policy,
                    p.scope,
                    p.max_pages,
                    p.delay_ms,
                    p.validate.as_str()
                );
                println!(
                    "jobs: {} total, {} queued, {} running, {} done, {} failed, {} cancelled; {} pages, {} links",
                    d.counts.total,
                    d.counts.queued,
                    d.counts.running,
                    d.counts.done,
                    d.counts.failed,
                    d.counts.cancelled,
                    d.counts.pages,
                    d.counts.links
                );
                println!(
                    "validation: {} pending, {} valid, {} trusted; {} results invalid; {} pages scanned to check",
                    d.counts.pending,
                    d.counts.valid,
                    d.counts.trusted,
                    d.counts.invalid,
                    d.counts.check_pages
                );
                println!("site\tstate\tattempts\tscans\tpages\tlinks\thosts\tvalidation\tcomplete\treasons");
                for (line, j) in d.sites.iter().zip(&d.jobs) {
                    let c = &line.completeness;
                    let complete = match (&c.why_not, c.natural_end) {
                        (_, true) => "yes".to_string(),
                        (Some(why), false) => format!("no: {why}"),
                        (None, false) => "-".to_string(),
                    };
                    // Each result compared: its hosts and verdict.
                    let results: Vec<String> = line
                        .results
                        .iter()
                        .map(|r| {
                            let hosts: Vec<String> =
                                r.hosts.iter().map(|h| h.to_string()).collect();
                            format!("{} by {}", r.verdict.as_str(), hosts.join("+"))
                        })
                        .collect();
                    let validation = if results.is_empty() {
                        line.validation.clone()
                    } else {
                        format!("{} ({})", line.validation, results.join(", "))
                    };
                    println!(
                        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                        line.site,
                        line.state.as_str(),
                        line.attempts,
                        c.scans,
                        c.pages,
                        c.links,
                        hosts_column(line),
                        validation,
                        complete,
                        j.reasons.join("; ")
                    );
                }
                for f in &d.round.folded {
                    println!(
                        "{}\tfolded into {}: its {:?} scope covers it, one job crawls both",
                        f.site, f.into, p.scope
                    );
                }
                if d.round.state != RoundState::Running {
                    println!("round {}: {}", d.round.id, d.counts.verdict());
                }
            }
        }
        RoundCmd::Wait {
            id,
            timeout,
            report_every,
        } => {
            let timeout = timeout.within("--timeout", &config::WAIT_TIMEOUT, false)?;
            let report_every =
                report_every.within("--report-every", &config::REPORT_EVERY, false)?;
            let start = Instant::now();
            let terminal = std::io::stdout().is_terminal();
            let mut last_report: Option<Instant> = None;
            let mut out = std::io::stdout();
            loop {
                let d: RoundDetail = c.get(&format!("/api/rounds/{id}"))?;
                let line =
                    beebot_server::cli_util::Progress::of(&d, beebot_server::now_ms()).line();
                if d.round.state != RoundState::Running {
                    if terminal && last_report.is_some() {
                        // The line updated in place gives way to the summary.
                        let _ = write!(out, "\r\x1b[2K");
                    }
                    println!(
                        "round {id} {}: {} done, {} failed of {} jobs; {}",
                        d.round.state.as_str(),
                        d.counts.done,
                        d.counts.failed,
                        d.counts.total,
                        d.counts.verdict()
                    );
                    // A cancelled round did not end: its open jobs never will.
                    return Ok(if d.round.state == RoundState::Cancelled {
                        EXIT_CANCELLED
                    } else {
                        0
                    });
                }
                if start.elapsed() >= timeout {
                    let open = d
                        .jobs
                        .iter()
                        .filter(|j| !matches!(j.state, JobState::Done | JobState::Failed))
                        .count();
                    if terminal && last_report.is_some() {
                        let _ = writeln!(out);
                    }
                    eprintln!(
                        "error: round {id} still has {open} open job(s) after {}",
                        human_duration(timeout)
                    );
                    return Ok(EXIT_TIMEOUT);
                }
                if terminal {
                    let _ = write!(out, "\r\x1b[2K{line}");
                    let _ = out.flush();
                    last_report = Some(Instant::now());
                } else if last_report.is_none_or(|t| t.elapsed() >= report_every) {
                    println!("{line}");
                    last_report = Some(Instant::now());
                }
                std::thread::sleep(WAIT_POLL);
            }
        }
        RoundCmd::Cancel { id } => {
            c.post_empty(&format!("/api/rounds/{id}/cancel"))?;
            println!("round {id} cancelled");
        }
    }
    Ok(0)
}

/// `round show`'s hosts column: the copies running now (name#id and
/// pages so far), else the host of the last accepted scan.
fn hosts_column(line: &SiteLine) -> String {
    let named = |id: u64, name: &str| {
        if name.is_empty() {
            format!("#{id}")
        } else {
            format!("{name}#{id}")
        }
    };
    if !line.running.is_empty() {
        return line
            .running
            .iter()
            .map(|r| format!("{} ({} pages)", named(r.host, &r.host_name), r.pages))
            .collect::<Vec<_>>()
            .join(", ");
    }
    line.host.map_or("-".into(), |h| {
        named(h, line.host_name.as_deref().unwrap_or(""))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_file_reports_the_bad_line() {
        let ok = parse_site_file("# list\n\nwww.a.edu\nhttps://b.org/x  # trailing\n").unwrap();
        assert_eq!(
            ok,
            vec![(3, "www.a.edu".to_string()), (4, "https://b.org/x".into())]
        );
        let err = parse_site_file("a.edu\nnot a host\nb.edu\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        assert!(parse_site_file("# only comments\n").is_err());
    }

    #[test]
    fn exclusions_export_as_tsv_with_a_header() {
        let tsv = exclusions_tsv(&[ExclusionListed {
            host: "x.edu".into(),
            subdomains: true,
            reason: "owner asked".into(),
            excluded_at: "2026-11-30T22:20:05Z".into(),
            excluded_ms: 1,
        }]);
        assert_eq!(
            tsv,
            "host\tsubdomains\texcluded_at\treason\nx.edu\ttrue\t2026-11-30T22:20:05Z\towner asked\n"
        );
    }
}
