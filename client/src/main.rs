//! `beebot`: the employee's command line. Join a project, run the work loop,
//! show status, or scan one site locally.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use beebot_client::rt::{runtime, shutdown_signal};
use clap::{Parser, Subcommand};
use url::Url;

use std::sync::Arc;

use beebot_client::control::{self, Gate};
use beebot_client::crawler::{self, CrawlSpec, CrawlerConfig, ResolveRule};
use beebot_client::home::Home;
use beebot_client::worker::{self, RunOptions};
use beebot_client::{display, logging, service, settings};
use beebot_shared::export::{ExportWriter, Format};
use beebot_shared::limits::MAX_SLOTS;
use beebot_shared::scope::Scope;

#[derive(Parser)]
#[command(
    name = "beebot",
    version,
    about = "BeeBot grid desktop client: crawl websites for a research link graph"
)]
struct Cli {
    /// Client home (keys, enrolment, spool). Default: the platform's config and data dirs.
    #[arg(long, global = true, env = "BEEBOT_HOME")]
    home: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Join a project with the invite code from its admin. The code is
    /// secret: rather than on the command line (shell history, `ps`), give
    /// `-` and pipe it in, or set BEEBOT_INVITE; with no code and stdin not a
    /// terminal, it is read from stdin.
    Join {
        /// The invite code, or `-` to read it from stdin.
        code: Option<String>,
        /// Name shown to the admin (default: this machine's host name).
        #[arg(long)]
        name: Option<String>,
    },
    /// Pull work, crawl, upload, repeat.
    Run {
        /// Exit when the server has no more work and every result is uploaded.
        #[arg(long)]
        once: bool,
        /// Sites scanned at once (setting `slots`).
        #[arg(long)]
        slots: Option<u32>,
        /// When to crawl (setting `window`), e.g. `mon-fri 19:00-07:00`.
        #[arg(long)]
        window: Option<String>,
        /// Pause this many ms after every page: a deliberately slower client
        /// (tests and demos of scheduling; 0 in real use).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
        throttle_ms: u64,
        #[command(flatten)]
        net: NetArgs,
    },
    /// What the client is doing: state, scans, totals, pending uploads.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Settings (a TOML file in the config dir, under environment and flags).
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Pause the running client's scans at a page boundary.
    Pause {
        /// Resume by itself after this long (e.g. 2h); default: until `beebot resume`.
        #[arg(long = "for", value_parser = beebot_shared::util::parse_duration)]
        duration: Option<Duration>,
    },
    /// Resume a paused client.
    Resume,
    /// Leave the project: stop this home's client and its service, tell the
    /// server (it releases this host's units and lists it as left), and
    /// remove every file the client made here. Offline, the files are
    /// removed all the same and the server is not told.
    Leave {
        /// Kept for old scripts: leaving always cleans up, reachable or not.
        #[arg(long, hide = true)]
        force: bool,
    },
    /// Run the client as a background service that starts at login.
    Service {
        #[command(subcommand)]
        cmd: ServiceCmd,
    },
    /// Scan the project's reference site and report pages/s and KB/s (the
    /// result goes to the server, as `beebot run` does on first start and weekly).
    Benchmark {
        /// Benchmark against this URL instead; nothing is sent to the server.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        net: NetArgs,
    },
    /// Scan one site locally, without a server.
    Crawl {
        url: String,
        #[arg(long, default_value_t = 100)]
        max_pages: u32,
        #[arg(long, default_value_t = 20)]
        max_depth: u32,
        #[arg(long, default_value_t = 1000)]
        delay_ms: u64,
        #[arg(long, default_value = "host", value_parser = ["host", "subdomains", "domain"])]
        scope: String,
        #[arg(long, default_value = "tsv", value_parser = ["tsv", "jsonl"])]
        format: String,
        /// Write here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        net: NetArgs,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Every setting, its value, and where the value came from.
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Validate and write one setting; a running client applies it at once.
    /// The rest of the line is the value: `config set window mon-fri 19:00-07:00`.
    Set {
        key: String,
        #[arg(required = true, num_args = 1..)]
        value: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ServiceCmd {
    /// Install and start the per-user service.
    Install {
        /// Crawl only in this window (saved as the `window` setting).
        #[arg(long)]
        window: Option<String>,
        /// Write the service files without starting them.
        #[arg(long)]
        no_start: bool,
    },
    Uninstall,
    Status,
}

#[derive(clap::Args)]
struct NetArgs {
    /// Allow crawling loopback, private and link-local addresses.
    #[arg(long)]
    allow_private: bool,
    /// HTTP proxy for crawling (setting `proxy`), e.g. http://proxy.corp:3128.
    #[arg(long, value_name = "URL")]
    proxy: Option<String>,
    /// Map a host name for crawling, like curl: HOST=IP[:PORT] (HOST may be *.suffix).
    #[arg(long, value_name = "HOST=IP[:PORT]")]
    resolve: Vec<String>,
}

impl NetArgs {
    /// The settings these flags override.
    fn overrides(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if self.allow_private {
            v.push(("allow_private", "true".to_string()));
        }
        if let Some(p) = &self.proxy {
            v.push(("proxy", p.clone()));
        }
        v
    }

    fn crawler_config(&self) -> Result<CrawlerConfig> {
        let mut resolve = Vec::new();
        for r in &self.resolve {
            resolve.push(
                r.parse::<ResolveRule>()
                    .map_err(|e| anyhow::anyhow!("--resolve {r}: {e}"))?,
            );
        }
        if let Some(p) = &self.proxy {
            settings::Settings::default()
                .apply("proxy", p)
                .map_err(|e| anyhow::anyhow!("--proxy: {e}"))?;
        }
        Ok(CrawlerConfig {
            allow_private: self.allow_private,
            resolve,
            proxy: self.proxy.clone(),
            ..CrawlerConfig::default()
        })
    }
}

fn main() {
    let cli = Cli::parse();
    let is_run = matches!(cli.cmd, Cmd::Run { .. });
    let terminal = std::io::stderr().is_terminal();
    // `run` on a terminal draws progress bars (warnings only in the log); as a
    // service it logs at info to stderr (the journal) and a rotating file.
    let (level, file) = match (is_run, terminal) {
        (true, true) => ("warn", None),
        (true, false) => {
            let file = Home::resolve(cli.home.clone()).ok().and_then(|h| {
                logging::RotatingFile::open(
                    &h.data.join("logs").join("beebot.log"),
                    logging::MAX_LOG_BYTES,
                    logging::KEEP_LOGS,
                )
                .ok()
            });
            ("info", file)
        }
        _ => ("warn", None),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_ansi(terminal)
        .with_writer(logging::LogWriter::new(file))
        .init();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The environment variable `beebot join` takes the invite code from.
const INVITE_ENV: &str = "BEEBOT_INVITE";

/// The invite code `beebot join` uses: the argument (`-`: stdin), else
/// [`INVITE_ENV`], else stdin when it is not a terminal. What is read from
/// stdin is bounded and its first non-blank line is the code.
fn invite_code(
    arg: Option<&str>,
    env: Option<String>,
    stdin_is_terminal: bool,
    stdin: impl std::io::Read,
) -> Result<String> {
    match arg {
        Some("-") => invite_from(stdin),
        Some(code) => Ok(code.to_string()),
        None => match env.map(|e| e.trim().to_string()).filter(|e| !e.is_empty()) {
            Some(code) => Ok(code),
            None if !stdin_is_terminal => invite_from(stdin),
            None => {
                anyhow::bail!("no invite code: pipe it in (`beebot join -`), or set {INVITE_ENV}")
            }
        },
    }
}

/// The first non-blank line of `input`, of at most an invite code's length
/// (what is read is bounded).
fn invite_from(input: impl std::io::Read) -> Result<String> {
    use std::io::Read;
    let limit = beebot_shared::invite::MAX_INVITE_CODE_LEN as u64 + 2;
    let mut text = String::new();
    input
        .take(limit)
        .read_to_string(&mut text)
        .context("cannot read the invite code from stdin")?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
        .context("no invite code on stdin")
}

fn run(cli: Cli) -> Result<()> {
    let home_flag = cli.home.clone();
    let home = Home::resolve(cli.home)?;
    match cli.cmd {
        Cmd::Join { code, name } => {
            let stdin = std::io::stdin();
            let code = invite_code(
                code.as_deref(),
                std::env::var(INVITE_ENV).ok(),
                stdin.is_terminal(),
                stdin.lock(),
            )?;
            let e = runtime()?.block_on(worker::join(&home, &code, name))?;
            println!(
                "joined {} as host {} ({})",
                e.server_addr, e.host_id, e.name
            );
            println!("next: `beebot run`");
        }
        Cmd::Run {
            once,
            slots,
            window,
            throttle_ms,
            net,
        } => {
            let mut cli = net.overrides();
            if let Some(s) = slots {
                anyhow::ensure!(
                    (1..=MAX_SLOTS).contains(&s),
                    "--slots must be between 1 and {MAX_SLOTS}"
                );
                cli.push(("slots", s.to_string()));
            }
            if let Some(w) = window {
                cli.push(("window", w));
            }
            control::process_started_ms();
            let (settings, shown) = settings::load(&home, &|k| std::env::var(k).ok(), &cli)?;
            if settings.low_priority {
                lower_priority();
            }
            let gate = Arc::new(Gate::new(settings.window.clone(), !settings.run_on_battery));
            gate.set_reloader(settings::reloader(home.clone(), cli, shown));
            let mut crawler = net.crawler_config()?;
            crawler.allow_private = settings.allow_private;
            crawler.proxy = settings.proxy.clone();
            let opts = RunOptions {
                once,
                slots: settings.slots,
                buffer_seconds: settings.buffer_max_s,
                buffer_min_s: settings.buffer_min_s,
                throttle: Duration::from_millis(throttle_ms),
                crawler,
                bandwidth_kbps: settings.bandwidth_kbps,
                spool_cap_bytes: settings.spool_cap_mb.saturating_mul(1024 * 1024),
                gate: Some(gate.clone()),
                ..RunOptions::default()
            };
            let stop_display = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let display = std::io::stderr().is_terminal().then(|| {
                let (dir, stop) = (home.data.clone(), stop_display.clone());
                std::thread::spawn(move || display::run(dir, stop))
            });
            // Scan threads stuck in a request are not waited for: their
            // scans are checkpointed already.
            // SIGTERM, Ctrl-C, or `beebot leave` through the control socket.
            let stop = async move {
                tokio::select! {
                    _ = shutdown_signal() => {}
                    _ = gate.stopped() => {}
                }
            };
            let stats =
                beebot_client::rt::block_on_then_exit(worker::run(home.clone(), opts, stop))?;
            stop_display.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(d) = display {
                let _ = d.join();
            }
            let stats = stats.map_err(|e| revoked_in_words(&home, e))?;
            println!(
                "scans finished {}, results accepted {}, duplicates {}, rejected {}, pages {}, links {}",
                stats.scans_finished,
                stats.uploads_accepted,
                stats.uploads_duplicate,
                stats.uploads_rejected,
                stats.pages,
                stats.links
            );
        }
        Cmd::Status { json } => status(&home, json)?,
        Cmd::Config { cmd } => match cmd {
            ConfigCmd::Show { json } => {
                let (_, shown) = settings::load(&home, &|k| std::env::var(k).ok(), &[])?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&shown)?);
                } else {
                    println!("# {}", settings::file_path(&home).display());
                    print!("{}", settings::show_table(&shown));
                }
            }
            ConfigCmd::Set { key, value } => {
                let value = value.join(" ");
                settings::check_key(&key)?;
                let old = settings::set(&home, &key, &value)?;
                let old = old.map(|o| format!(" (was {o})")).unwrap_or_default();
                println!(
                    "{key} = {value}{old} in {}",
                    settings::file_path(&home).display()
                );
                // A running client reads its settings again.
                match control::send(&home.data, &format!("reload {key}")) {
                    Ok(answer) => println!("{}", answer.trim_start_matches("ok ")),
                    Err(_) if control::read_live_status(&home.data).is_none() => {
                        println!("no client is running here: `beebot run` uses it when it starts")
                    }
                    Err(e) => eprintln!("warning: the running client did not take it: {e:#}"),
                }
            }
        },
        Cmd::Pause { duration } => {
            let cmd = match duration {
                Some(d) => format!("pause {}", d.as_secs().max(1)),
                None => "pause".to_string(),
            };
            println!(
                "{}",
                control::send(&home.data, &cmd)?.trim_start_matches("ok ")
            );
        }
        Cmd::Resume => println!(
            "{}",
            control::send(&home.data, "resume")?.trim_start_matches("ok ")
        ),
        Cmd::Leave { force: _ } => {
            let r =
                runtime()?.block_on(beebot_client::leave::leave(&home, home_flag.as_deref()))?;
            for line in &r.service {
                println!("service: {line}");
            }
            if let Some(pid) = r.runner_stopped {
                println!("stopped the running client (pid {pid})");
            }
            use beebot_client::leave::ServerTold;
            match &r.server {
                ServerTold::Told => println!("told the server: this host left the project"),
                ServerTold::WasRevoked => {
                    println!("the server had revoked this host already")
                }
                ServerTold::NotTold(why) => println!(
                    "the server was NOT told ({why}); it will see this host as gone once its units' deadlines pass"
                ),
                ServerTold::NotJoined => {}
            }
            for (what, path) in &r.removed {
                println!("removed {what}: {}", path.display());
            }
            println!("left the project");
        }
        Cmd::Service { cmd } => match cmd {
            ServiceCmd::Install { window, no_start } => {
                if let Some(w) = window {
                    let old = settings::set(&home, "window", &w)?;
                    println!(
                        "window: {} → {w} (setting in {})",
                        old.unwrap_or_else(|| "always (default)".into()),
                        settings::file_path(&home).display()
                    );
                }
                let exe = std::env::current_exe().context("cannot find this program's path")?;
                for line in service::install(&exe, home_flag.as_deref(), &home.data, !no_start)? {
                    println!("{line}");
                }
            }
            ServiceCmd::Uninstall => {
                for line in service::uninstall()? {
                    println!("{line}");
                }
            }
            ServiceCmd::Status => println!("{}", service::status()?),
        },
        Cmd::Benchmark { url, net } => {
            let mut cfg = net.crawler_config()?;
            let (settings, _) = settings::load(&home, &|k| std::env::var(k).ok(), &[])?;
            let rt = runtime()?;
            let from_project = url.is_none();
            let url = match url {
                Some(url) => url,
                None => {
                    let url =
                        rt.block_on(beebot_client::benchmark::project_reference_site(&home))?;
                    anyhow::ensure!(
                        !url.is_empty(),
                        "the project names no reference site; pass --url URL"
                    );
                    // Named by the project's own server over the pinned link.
                    cfg.allow_private = true;
                    url
                }
            };
            let mut progress = crawler::progress::ProgressLine::stderr();
            let record =
                beebot_client::benchmark::run(&url, &cfg, &AtomicBool::new(false), &mut |p| {
                    progress.update(p)
                });
            progress.finish();
            let record = record?;
            println!(
                "{}: {} pages, {:.1} MB in {:.1}s: {:.1} pages/s, {:.0} KB/s",
                record.url,
                record.pages,
                record.bytes as f64 / 1e6,
                record.seconds,
                record.pages_per_s,
                record.kb_per_s
            );
            if from_project {
                rt.block_on(beebot_client::benchmark::send(
                    &home,
                    &record,
                    settings.slots,
                ))?;
                println!("sent to the project");
            }
        }
        Cmd::Crawl {
            url,
            max_pages,
            max_depth,
            delay_ms,
            scope,
            format,
            out,
            net,
        } => {
            let seed = Url::parse(&url)
                .or_else(|_| Url::parse(&format!("http://{url}/")))
                .with_context(|| format!("`{url}` is not a URL"))?;
            let site = seed.host_str().context("the URL has no host")?.to_string();
            let scope: Scope = scope.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let format: Format = format.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            let spec = CrawlSpec {
                site: site.clone(),
                seed,
                scope,
                max_pages,
                max_depth,
                delay: Duration::from_millis(delay_ms),
                max_crawl_delay: crawler::robots::MAX_CRAWL_DELAY,
                max_page_bytes: 2 * 1024 * 1024,
                max_duration: Duration::from_secs(24 * 3600),
                user_agent: format!(
                    "BeeBot/{} (+https://example.invalid/beebot)",
                    env!("CARGO_PKG_VERSION")
                ),
                resume: None,
                excluded: Vec::new(),
            };
            let cfg = net.crawler_config()?;
            let cancel = AtomicBool::new(false);
            // A live line on stderr when it is a terminal; nothing when piped.
            let mut progress = crawler::progress::ProgressLine::stderr();
            let outcome =
                crawler::crawl_with_progress(&spec, &cfg, &cancel, &mut |p| progress.update(p));
            progress.finish();
            let sink: Box<dyn std::io::Write> = match &out {
                Some(p) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(p)
                        .with_context(|| format!("cannot write {}", p.display()))?,
                )),
                None => Box::new(std::io::stdout().lock()),
            };
            let mut w = ExportWriter::new(sink, format)?;
            for r in &outcome.records {
                w.write(&site, r)?;
            }
            w.finish()?;
            eprintln!(
                "{}",
                crawler::progress::summary_line(&site, &outcome.summary)
            );
            if let Some(why) = crawler::progress::nothing_fetched(&site, &outcome.summary) {
                anyhow::bail!(why);
            }
        }
    }
    Ok(())
}

/// Run at low CPU priority (nice 10), so the employee's own work comes first.
fn lower_priority() {
    #[cfg(unix)]
    {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("renice")
            .args(["-n", "10", "-p", &pid])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// What to do once the project revoked this host.
const REVOKED_ADVICE: &str =
    "ask the admin for a new invite code, then `beebot leave` and `beebot join` with it";

/// A runner's error in the user's terms: the server refused this host as
/// revoked is remembered in the home (for `beebot status`) and said plainly.
fn revoked_in_words(home: &Home, e: anyhow::Error) -> anyhow::Error {
    use beebot_client::net::NetError;
    use beebot_shared::proto::ErrorCode;
    let revoked = e.chain().find_map(|c| match c.downcast_ref::<NetError>() {
        Some(NetError::Refused {
            code: ErrorCode::Revoked,
            message,
        }) => Some(message.clone()),
        _ => None,
    });
    let Some(message) = revoked else {
        return e;
    };
    if let Err(w) = home.mark_revoked(&message) {
        eprintln!("warning: {w:#}");
    }
    anyhow::anyhow!("this host was revoked by the project ({message}): {REVOKED_ADVICE}")
}

/// `beebot status`: the running client's live status, or the spool's.
fn status(home: &Home, json: bool) -> Result<()> {
    let Some(e) = home.enrolment()? else {
        if json {
            println!("{}", serde_json::json!({ "enrolled": false }));
        } else {
            println!(
                "not joined (home {}): run `beebot join CODE`",
                home.config.display()
            );
        }
        return Ok(());
    };
    let (units, refused) = home.spooled_units(&e.project_verifying_key()?)?;
    let pending: Vec<u64> = units
        .iter()
        .map(|u| u.unit.unit_id)
        .filter(|id| matches!(home.result(*id), Ok(Some(_))))
        .collect();
    let live = control::read_live_status(&home.data);
    let revocation = home.revocation();
    if json {
        let v = serde_json::json!({
            "enrolled": true,
            "project": e.server_addr,
            "host_id": e.host_id,
            "name": e.name,
            "state": live.as_ref().map(|l| l.state.as_str()).unwrap_or("not running"),
            "until_ms": live.as_ref().and_then(|l| l.until_ms),
            "scans": live.as_ref().map(|l| l.scans.clone()).unwrap_or_default(),
            "today": home.today(&beebot_client::home::today_date()),
            "units_held": units.iter().map(|u| serde_json::json!({
                "unit_id": u.unit.unit_id, "site": u.unit.site,
                "finished": pending.contains(&u.unit.unit_id),
                // Server clock, as last extended.
                "deadline_ms": home.deadline(u.unit.unit_id).unwrap_or(u.unit.deadline_ms),
                "checkpoint": home.has_checkpoint(u.unit.unit_id),
            })).collect::<Vec<_>>(),
            "pending_uploads": pending.len(),
            "last_error": live.as_ref().and_then(|l| l.last_error.clone()),
            "refused": refused,
            "revoked": revocation.as_ref().map(|r| serde_json::json!({
                "at_ms": r.at_ms, "message": r.message, "advice": REVOKED_ADVICE,
            })),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "project   {} (certificate sha256:{}…)",
        e.server_addr,
        &e.cert_sha256[..16.min(e.cert_sha256.len())]
    );
    println!("host      {} ({})", e.host_id, e.name);
    if let Some(r) = &revocation {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(r.at_ms);
        println!(
            "REVOKED   this host was revoked by the project (heard {}: {}): {REVOKED_ADVICE}",
            control::local_time(at),
            r.message
        );
    }
    let human_ms = |ms: u64| beebot_shared::util::human_duration(Duration::from_millis(ms));
    match &live {
        Some(l) => {
            let now = control::unix_ms(std::time::SystemTime::now());
            println!("state     {} (pid {})", control::state_text(l, now), l.pid);
            if let Some(t) = l.started_ms {
                println!("up        {}", human_ms(now.saturating_sub(t)));
            }
            for s in &l.scans {
                // The deadline only says when the server would think this
                // host gone; the server moves it while the scan reports.
                let deadline = s
                    .deadline_ms
                    .map(|d| format!("  deadline in {}", human_ms(d.saturating_sub(now))))
                    .unwrap_or_default();
                println!(
                    "  scanning {}  {} pages  {} links  {:.1} pages/s{deadline}",
                    s.site, s.pages, s.links, s.pages_per_s
                );
            }
            if let Some(err) = &l.last_error {
                println!("last error {err}");
            }
        }
        None => println!("state     not running"),
    }
    let today = home.today(&beebot_client::home::today_date());
    println!(
        "today     {} results, {} pages, {} links",
        today.results, today.pages, today.links
    );
    println!("units     {} held", units.len());
    for u in &units {
        let state = if pending.contains(&u.unit.unit_id) {
            "finished, upload pending"
        } else {
            "to scan"
        };
        println!("  unit {}  {}  {state}", u.unit.unit_id, u.unit.site);
    }
    println!("uploads   {} pending", pending.len());
    for r in refused {
        println!("refused   {r}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_set_takes_the_rest_of_the_line_as_the_value() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| (c.cmd, c.home)) {
            Ok((
                Cmd::Config {
                    cmd: ConfigCmd::Set { key, value },
                },
                home,
            )) => (key, value.join(" "), home),
            _ => panic!("not a config set: {args:?}"),
        };
        let (k, v, home) = parse(&[
            "beebot",
            "config",
            "set",
            "window",
            "mon-fri",
            "19:00-07:00,",
            "sat-sun",
            "00:00-24:00",
        ]);
        assert_eq!(
            (k.as_str(), v.as_str()),
            ("window", "mon-fri 19:00-07:00, sat-sun 00:00-24:00")
        );
        assert!(home.is_none());
        // A global flag after the value is still the flag.
        let (_, v, home) = parse(&[
            "beebot",
            "config",
            "set",
            "window",
            "mon-fri",
            "19:00-07:00",
            "--home",
            "/h",
        ]);
        assert_eq!(v, "mon-fri 19:00-07:00");
        assert_eq!(home, Some(PathBuf::from("/h")));
        let (_, v, _) = parse(&["beebot", "config", "set", "window", "mon-fri 19:00-07:00"]);
        assert_eq!(v, "mon-fri 19:00-07:00");
        assert!(Cli::try_parse_from(["beebot", "config", "set", "slots"]).is_err());
    }

    #[test]
    fn the_invite_code_comes_from_the_argument_stdin_or_the_environment() {
        let code = |arg: Option<&str>, env: Option<&str>, tty: bool, input: &str| {
            invite_code(arg, env.map(str::to_string), tty, input.as_bytes())
        };
        assert_eq!(
            code(Some("beebot2-a"), Some("beebot2-e"), true, "").unwrap(),
            "beebot2-a"
        );
        assert_eq!(
            code(Some("-"), Some("beebot2-e"), true, "\n  beebot2-s \nx\n").unwrap(),
            "beebot2-s"
        );
        assert_eq!(
            code(None, Some(" beebot2-e\n"), false, "beebot2-s").unwrap(),
            "beebot2-e"
        );
        assert_eq!(
            code(None, Some(""), false, "beebot2-s\r\n").unwrap(),
            "beebot2-s"
        );
        assert_eq!(code(None, None, false, "beebot2-s").unwrap(), "beebot2-s");
        let e = code(None, None, true, "beebot2-s").unwrap_err().to_string();
        assert!(e.contains("BEEBOT_INVITE") && e.contains("join -"), "{e}");
        assert!(code(Some("-"), None, true, " \n\n").is_err());
        // What is read is bounded.
        let long = "x".repeat(10 * beebot_shared::invite::MAX_INVITE_CODE_LEN);
        let got = code(Some("-"), None, false, &long).unwrap();
        assert!(got.len() <= beebot_shared::invite::MAX_INVITE_CODE_LEN + 2);
    }
}
