//! `beebot run`: load the settings (file, environment, flags), set up the
//! gate (window, battery, pause) and the terminal display, and run the work
//! loop until stopped; then say what the run did.
//!
//! The status page ([`beebot_client::ui`]) is served for the whole run,
//! from before the home joined to after it left.
//!
//! A host the project revoked is remembered in the home (for `beebot
//! status`) and said plainly. Scan threads stuck in a request are not
//! waited for: their scans are checkpointed already.
//!
//! `run` takes the run lock, binds the page, waits for a join when needed, runs
//! the loop and, when the page asked, leaves (the service last: it stops the
//! process). On glibc it starts itself again with `MALLOC_ARENA_MAX=2`: one
//! arena per scan thread kept what each freed.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use beebot_client::control::{self, Gate};
use beebot_client::home::{installed_invite, Home};
use beebot_client::rt::{block_on_then_exit, shutdown_signal};
use beebot_client::service;
use beebot_client::settings::{self, Settings};
use beebot_client::ui::{self, Ui};
use beebot_client::worker::{self, RunOptions, RunStats};
use beebot_client::{display, net::NetError};
use beebot_shared::proto::ErrorCode;

use super::args::{NetArgs, RunFlags};
use super::REVOKED_ADVICE;

/// Run the work loop until SIGTERM, Ctrl-C or `beebot leave` (or, with
/// `--once`, until the work is done), and say what it did. The status page
/// listens from the start: a home not joined yet waits for an invite code
/// pasted there (or `beebot join`), and a "leave" there ends the run.
pub fn run(
    home: &Home,
    flags: RunFlags,
    net: &NetArgs,
    home_flag: Option<&Path>,
) -> Result<String> {
    limit_malloc_arenas();
    let mut cli = net.overrides();
    if let Some(s) = flags.slots.clone() {
        cli.push(("slots", s));
    }
    if let Some(w) = flags.window.clone() {
        cli.push(("window", w));
    }
    control::process_started_ms();
    let (settings, shown) = settings::load(home, &|k| std::env::var(k).ok(), &cli)?;
    if flags.once {
        // `--once` is for scripts: there is no one to paste a code.
        home.identity().require_enrolment()?;
    }
    if settings.low_priority {
        lower_priority();
    }
    // One runner per home, taken before the page listens: a second runner
    // must not take over the page's address.
    let lock = home.lock_runner()?;
    if let Some(pid) = lock.stale_pid {
        tracing::info!("taking over the home from pid {pid}, which is no longer running");
    }
    let gate = Arc::new(Gate::new(settings.window.clone(), !settings.run_on_battery));
    gate.keep_status_in(&home.data);
    gate.set_reloader(control::reloader(home.clone(), cli.clone(), shown));
    let bound = ui::bind(&home.data, settings.ui_port)?;
    let page = Ui::new(home.clone(), &bound, gate.clone(), cli)?;
    page.serve(bound)?;
    tracing::info!("status page on {} (`beebot open`)", page.url());
    // The notification-area icon, for as long as the run lasts; its window
    // also hears the session end (log off, shut down), and stops the run.
    let run_done = Arc::new(AtomicBool::new(false));
    #[cfg(windows)]
    let _tray = (!flags.no_tray)
        .then(|| super::tray::show(home, home_flag, gate.clone(), run_done.clone()))
        .flatten();
    let mut opts = run_options(&settings, flags.once, flags.throttle_ms, net, gate.clone())?;
    opts.adjust_every = Duration::from_millis(flags.adjust_every_ms);
    opts.part_every = Duration::from_secs(flags.part_every_s);
    let stop_display = Arc::new(AtomicBool::new(false));
    let display = std::io::stderr().is_terminal().then(|| {
        let (dir, stop) = (home.data.clone(), stop_display.clone());
        std::thread::spawn(move || display::run(dir, stop))
    });
    // SIGTERM, Ctrl-C, or a stop through the page's API (`beebot leave`, the page's leave).
    let stop = || {
        let gate = gate.clone();
        async move {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = gate.stopped() => {}
            }
        }
    };
    let outcome = block_on_then_exit(async {
        let ran: Result<Option<RunStats>> = async {
            if home.identity().enrolment()?.is_none() {
                join_by_itself(home, &page).await;
            }
            if home.identity().enrolment()?.is_none() {
                eprintln!(
                    "not joined yet: paste the invite code on the status page (`beebot open`), or run `beebot join`"
                );
                if !page.wait_joined(stop()).await {
                    return Ok(None);
                }
            }
            worker::run_locked(home.clone(), &lock, opts, stop())
                .await
                .map(Some)
        }
        .await;
        // Revoked: the page stays up (it says so, and offers to leave)
        // until the client is stopped, instead of a service restarting it.
        let ran = match ran {
            Err(e)
                if beebot_client::leave::is_revoked(&e) && !page.leave_asked() && !flags.once =>
            {
                let e = revoked_in_words(home, e);
                eprintln!("{e:#}");
                keep_saying_revoked(&home.data, stop()).await;
                Err(e)
            }
            other => other,
        };
        if page.leave_asked() {
            // Asked on the page: leave whatever stopped the loop, and answer.
            let mut report = match &ran {
                Err(e) => format!("the client stopped ({e:#}); leaving all the same\n"),
                Ok(_) => String::new(),
            };
            match beebot_client::leave::leave_holding_lock(home, lock).await {
                Ok(r) => report.push_str(&super::leave::report(&r)),
                Err(e) => report.push_str(&format!("leaving failed: {e:#}\n")),
            }
            return Ok(Outcome::Left(report));
        }
        ran.map(|stats| stats.map_or(Outcome::StoppedBeforeJoining, Outcome::Ran))
    })?;
    run_done.store(true, Ordering::Relaxed);
    stop_display.store(true, Ordering::Relaxed);
    if let Some(d) = display {
        let _ = d.join();
    }
    ui::forget_addr(&home.data);
    match outcome.map_err(|e| revoked_in_words(home, e))? {
        Outcome::Ran(stats) => Ok(stats_line(&stats)),
        Outcome::StoppedBeforeJoining => Ok("stopped before joining a project\n".into()),
        Outcome::Left(report) => {
            page.left(report.clone());
            // The page's answer leaves before the service goes, which stops this process.
            std::thread::sleep(LEFT_ANSWER_GRACE);
            let mut out = report;
            if service::installed_for(home_flag).unwrap_or(false) {
                for line in service::uninstall().unwrap_or_default() {
                    out.push_str(&format!("service: {line}\n"));
                }
            }
            Ok(out)
        }
    }
}

/// Join with the deployment's invite code (`BEEBOT_INVITE`, else what an
/// installer left), if there is one; a failure is logged and shown on the
/// page, which then asks for a code.
async fn join_by_itself(home: &Home, page: &Ui) {
    let Some(code) = installed_invite() else {
        return;
    };
    if home.identity().has_left() {
        tracing::info!(
            "this computer left its project: it joins again only with a code pasted on the page or `beebot join`"
        );
        return;
    }
    match page.join(&code, None).await {
        Ok(e) => tracing::info!(
            "joined {} as host {} ({}) with the deployment's invite code",
            e.server_addr,
            e.host_id,
            e.name
        ),
        Err(e) => {
            let why =
                format!("the invite code this computer was installed with did not join: {e:#}");
            tracing::warn!("{why}");
            page.join_failed(why);
        }
    }
}

/// How long a runner that left waits for the page to have its answer.
const LEFT_ANSWER_GRACE: Duration = Duration::from_secs(1);

/// How a run ended.
enum Outcome {
    Ran(RunStats),
    StoppedBeforeJoining,
    /// The page asked to leave: what leaving did.
    Left(String),
}

/// The work loop's options from the settings and flags.
fn run_options(
    settings: &Settings,
    once: bool,
    throttle_ms: u64,
    net: &NetArgs,
    gate: Arc<Gate>,
) -> Result<RunOptions> {
    let mut crawler = net.crawler_config()?;
    crawler.allow_private = settings.allow_private;
    crawler.proxy = settings.proxy.clone();
    Ok(RunOptions {
        once,
        slots: settings.slots,
        buffer_seconds: settings.buffer_max_s,
        buffer_min_s: settings.buffer_min_s,
        throttle: Duration::from_millis(throttle_ms),
        crawler,
        bandwidth_kbps: settings.bandwidth_kbps,
        memory_mb: settings.memory_mb,
        cpu_percent: settings.cpu_percent,
        spool_cap_bytes: settings.spool_cap_mb.saturating_mul(1024 * 1024),
        gate: Some(gate),
        ..RunOptions::default()
    })
}

/// What a run did, in one line.
fn stats_line(stats: &RunStats) -> String {
    format!(
        "scans finished {}, results uploaded {}, duplicates {}, rejected {}, pages {}, links {}\n",
        stats.scans_finished,
        stats.uploads_accepted,
        stats.uploads_duplicate,
        stats.uploads_rejected,
        stats.pages,
        stats.links
    )
}

/// The malloc arenas a runner may use (glibc): by default glibc gives each
/// of up to eight threads a core an arena of its own, and each arena keeps
/// what its thread freed; the 64 scan threads then hold about 12 MB more
/// resident memory than with two arenas, for no speed a polite crawl needs.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub const MALLOC_ARENAS: &str = "2";

/// Start `beebot run` again (the same process, `exec`) with glibc's malloc
/// limited to [`MALLOC_ARENAS`] arenas, which glibc reads from the
/// environment at start only; a run started with `MALLOC_ARENA_MAX` set
/// keeps it. Elsewhere (macOS, Windows, musl) nothing is done.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        // Returns only when the exec failed (the binary replaced by an
        // upgrade, say): the run goes on with glibc's default.
        let err = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env("MALLOC_ARENA_MAX", MALLOC_ARENAS)
            .exec();
        tracing::warn!("cannot restart with malloc limited to {MALLOC_ARENAS} arenas: {err}");
    }
}

/// Run at low CPU priority (nice 10; below normal on Windows), so the
/// employee's own work comes first.
fn lower_priority() {
    #[cfg(windows)]
    if let Err(e) = beebot_win32::process::lower_priority() {
        tracing::warn!("cannot lower this process's priority: {e}");
    }
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

/// How often a revoked runner, kept for its page, says so in its live
/// status (well within [`control::STATUS_FRESH`]).
const REVOKED_STATUS_EVERY: Duration = Duration::from_secs(2);

/// Until `stop`: keep the live status saying `revoked`, so `beebot status`
/// and the page tell a revoked runner that still runs (its page offers to
/// leave) from one that is not running.
async fn keep_saying_revoked(data: &Path, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(REVOKED_STATUS_EVERY);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {
                let _writing = control::status_lock();
                let mut s = control::read_live_status(data).unwrap_or_default();
                s.pid = std::process::id();
                s.updated_ms = control::unix_ms(std::time::SystemTime::now());
                s.started_ms = Some(control::process_started_ms());
                s.state = "revoked".into();
                s.until_ms = None;
                s.scans.clear();
                s.concurrency = None;
                control::write_status(data, &s);
            }
        }
    }
}

/// A runner's error in the user's terms: the server refused this host as
/// revoked is remembered in the home (for `beebot status`) and said plainly.
fn revoked_in_words(home: &Home, e: anyhow::Error) -> anyhow::Error {
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
    if let Err(w) = home.identity().mark_revoked(&message) {
        eprintln!("warning: {w:#}");
    }
    anyhow::anyhow!("this host was revoked by the project ({message}): {REVOKED_ADVICE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_says_what_it_did_in_one_line() {
        let stats = RunStats {
            scans_finished: 3,
            uploads_accepted: 2,
            uploads_duplicate: 1,
            uploads_rejected: 0,
            pages: 40,
            links: 900,
            ..RunStats::default()
        };
        assert_eq!(
            stats_line(&stats),
            "scans finished 3, results uploaded 2, duplicates 1, rejected 0, pages 40, links 900\n"
        );
    }
}
