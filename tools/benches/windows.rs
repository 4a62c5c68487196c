//! Windows bench (`cargo bench -p beebot-tools --bench windows`): the
//! shipped Windows client under Wine beside the Linux client on the same
//! work, one polite scan each (`beebot crawl`, one site of the synthetic
//! web on loopback, a 200 ms delay), and the sizes of what is shipped.
//! Prints one table: exe and installer sizes, pages, seconds, CPU seconds
//! and share of a core, and peak memory (the process's high-water mark; on
//! Wine the process that runs the program, Wine's own libraries included,
//! and the wineserver's CPU beside it).
//!
//! Needs `deploy/windows/build.sh` run first (it reads `target/windows/`)
//! and Wine (`deploy/windows/env.sh` installs it); the prefix is the
//! harness's (`target/wine-prefix`, with its Wine 8 stand-in DLL).
//! `--pages N` (after `--`) changes the scan's length (default 150).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use beebot_client::settings::DEFAULT_CPU_PERCENT;
use beebot_client::usage::{self, Process};
use beebot_testkit::synth::{SynthConfig, SynthWeb};
use beebot_testkit::web::SynthWebServer;
use beebot_tools::wine;

const SEED: u64 = 77;
/// The scan's politeness delay, ms.
const DELAY_MS: u64 = 200;
/// Pages of the scan unless `--pages` says otherwise.
const DEFAULT_PAGES: u64 = 150;
/// How often the running client's CPU and memory are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The target of a shipped client's peak memory (its CPU's is the default
/// budget, `cpu_percent`).
const TARGET_MEMORY_MB: f64 = 50.0;

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = root.join("target/windows");
    let version = env!("CARGO_PKG_VERSION");
    let exe = wine::built_exe()?;
    let pages = pages_flag()?;
    let linux = beebot_tools::build_release_client()?;
    let prefix = wine::prefix()?;

    let web = SynthWeb::with_config(
        SEED,
        1,
        SynthConfig {
            min_pages_per_site: pages as usize + 50,
            max_pages_per_site: pages as usize + 100,
            crawl_delay_ms: None,
        },
    );
    let host = web.site_hosts()[0].clone();
    let server = SynthWebServer::start(Arc::new(web)).context("synthetic web")?;
    let resolve = format!("*.synth.test={}", server.addr());
    let url = format!("http://{host}/");
    let crawl_args = |out: &str| {
        vec![
            "crawl".to_string(),
            url.clone(),
            "--max-pages".into(),
            pages.to_string(),
            "--delay-ms".into(),
            DELAY_MS.to_string(),
            "--allow-private".into(),
            "--resolve".into(),
            resolve.clone(),
            "--out".into(),
            out.to_string(),
        ]
    };

    let tmp = tempfile::tempdir()?;
    let linux_out = tmp.path().join("linux.tsv");
    let mut rows = Vec::new();
    let l = measure(
        Command::new(&linux).args(crawl_args(&linux_out.to_string_lossy())),
        None,
    )?;
    rows.push(("Linux", l, std::fs::read_to_string(&linux_out)?));
    let win_out = tmp.path().join("windows.tsv");
    let mut cmd = wine::command(&exe, &prefix);
    cmd.args(crawl_args(&wine::path(&win_out)));
    let w = measure(&mut cmd, Some(&prefix))?;
    rows.push(("Windows (Wine 8)", w, std::fs::read_to_string(&win_out)?));

    let size_mb = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.len() as f64 / 1e6)
            .unwrap_or(f64::NAN)
    };
    println!("\nsizes");
    println!("{:<34} {:>8}", "file", "MB");
    for (name, path) in [
        ("beebot (Linux, release)".to_string(), linux.clone()),
        ("beebot.exe".to_string(), exe.clone()),
        ("beebotw.exe".to_string(), out.join("beebotw.exe")),
        (
            format!("beebot-setup-{version}.exe"),
            out.join(format!("beebot-setup-{version}.exe")),
        ),
        (
            format!("beebot-{version}.msi"),
            out.join(format!("beebot-{version}.msi")),
        ),
    ] {
        println!("{name:<34} {:>8.1}", size_mb(&path));
    }
    println!(
        "\none polite scan each: {pages} pages asked, delay {DELAY_MS} ms, one site of the synthetic web on loopback"
    );
    println!(
        "{:<18} {:>9} {:>7} {:>8} {:>8} {:>9} {:>12} {:>9}",
        "client", "link rows", "s", "CPU s", "CPU %", "peak MB", "wineserver s", "same rows"
    );
    let linux_rows = rows[0].2.clone();
    for (name, m, text) in &rows {
        let lines = text.lines().count();
        println!(
            "{name:<18} {:>9} {:>7.1} {:>8.2} {:>8.2} {:>9.1} {:>12} {:>9}",
            lines.saturating_sub(1),
            m.seconds,
            m.cpu_s,
            100.0 * m.cpu_s / m.seconds,
            m.peak_kb as f64 / 1024.0,
            m.wineserver_cpu_s
                .map_or("-".to_string(), |s| format!("{s:.2}")),
            if *text == linux_rows { "yes" } else { "NO" }
        );
    }
    let win = &rows[1].1;
    println!(
        "\ntarget: peak memory under {TARGET_MEMORY_MB} MB: Windows {:.1} MB ({})",
        win.peak_kb as f64 / 1024.0,
        if (win.peak_kb as f64 / 1024.0) < TARGET_MEMORY_MB {
            "met"
        } else {
            "NOT met"
        }
    );
    let budget = f64::from(DEFAULT_CPU_PERCENT);
    let program = 100.0 * win.cpu_s / win.seconds;
    let with_server = 100.0 * (win.cpu_s + win.wineserver_cpu_s.unwrap_or(0.0)) / win.seconds;
    println!(
        "target: CPU within the default budget ({budget}% of a core): Windows {program:.2}% ({}), {with_server:.2}% with Wine's wineserver",
        if program <= budget { "met" } else { "NOT met" }
    );
    Ok(())
}

/// What one run measured.
struct Measured {
    seconds: f64,
    cpu_s: f64,
    peak_kb: u64,
    wineserver_cpu_s: Option<f64>,
}

/// Run `cmd` to its end, reading its CPU time and memory as it runs (the
/// last reading before it exits); with a Wine prefix, the CPU of the
/// wineserver serving it too (started with the program, gone with it).
fn measure(cmd: &mut Command, prefix: Option<&Path>) -> Result<Measured> {
    let server_before = prefix.and_then(wine::wineserver_cpu);
    let mut server_last = None;
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("start the client")?;
    let pid = Process::Pid(child.id());
    let stderr = child.stderr.take().context("stderr")?;
    let said = std::thread::spawn(move || {
        let mut text = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let (mut cpu_s, mut peak_kb) = (0.0, 0);
    let status = loop {
        if let Some(c) = usage::cpu_seconds(pid) {
            cpu_s = c;
        }
        if let Some(k) = usage::peak_rss_kb(pid) {
            peak_kb = k;
        }
        if let Some(c) = prefix.and_then(wine::wineserver_cpu) {
            server_last = Some(c);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(SAMPLE_EVERY);
    };
    let seconds = start.elapsed().as_secs_f64();
    let said = said.join().unwrap_or_default();
    if !status.success() {
        bail!("the client failed ({status}): {said}");
    }
    let wineserver_cpu_s = match (server_before, server_last) {
        (Some(a), Some(b)) => Some(b - a),
        (None, Some(b)) => Some(b),
        _ => None,
    };
    Ok(Measured {
        seconds,
        cpu_s,
        peak_kb,
        wineserver_cpu_s,
    })
}

/// `--pages N` after `--`, else the default.
fn pages_flag() -> Result<u64> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--pages") {
        None => Ok(DEFAULT_PAGES),
        Some(i) => match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(n) if (1..=10_000).contains(&n) => Ok(n),
            _ => bail!("--pages needs a number from 1 to 10000"),
        },
    }
}
