//! BeeBot grid tools that run the server and the client together, kept out of
//! both so the server never depends on the client: the whole grid on
//! loopback in one process ([`grid`]), the demo on it ([`demo`], binary
//! `beebot-demo`), the methods bench on it ([`methods`], binary
//! `beebot-methods`), the load generator (binary `beebot-loadgen`) and the
//! crawler bench (`benches/crawler.rs`). Nothing here is part of a deployed
//! grid; the tools only drive the real crates on loopback.

pub mod demo;
pub mod grid;
pub mod loadfiles;
pub mod methods;

/// Build the release `beebot` (`cargo build --release -p beebot-client`)
/// and give its path, beside the running bench's own target dir
/// (`target/release/beebot`).
pub fn build_release_client() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "beebot-client",
            "--bin",
            "beebot",
        ])
        .status()
        .context("run cargo build")?;
    anyhow::ensure!(status.success(), "cargo build of beebot failed");
    let exe = std::env::current_exe()?;
    let release = exe
        .parent()
        .and_then(std::path::Path::parent)
        .context("target dir")?
        .to_path_buf();
    Ok(release.join(format!("beebot{}", std::env::consts::EXE_SUFFIX)))
}

/// The Windows client under Wine (the benches that run it): the build of
/// `deploy/windows/build.sh`, the harness's prefix, and its wineserver.
pub mod wine {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use anyhow::Context;
    use beebot_client::usage::{self, Process};

    /// Wine's 64-bit loader (Debian's `wine64`).
    pub const WINE64: &str = "/usr/lib/wine/wine64";

    /// The repository's root.
    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// `beebot.exe` as `deploy/windows/build.sh` left it (an error naming
    /// the script when it is not there).
    pub fn built_exe() -> anyhow::Result<PathBuf> {
        let exe = root().join("target/windows/beebot.exe");
        anyhow::ensure!(
            exe.is_file(),
            "no {}: run deploy/windows/build.sh first",
            exe.display()
        );
        Ok(exe)
    }

    /// Make the harness's Wine prefix (`target/wine-prefix`, with its Wine 8
    /// stand-in DLL; `deploy/windows/wine.sh`) when missing, and give it.
    pub fn prefix() -> anyhow::Result<PathBuf> {
        let root = root();
        let prefix = root.join("target/wine-prefix");
        let prepared = Command::new("bash")
            .arg("-c")
            .arg(
                "source deploy/windows/env.sh && source deploy/windows/wine.sh \
                 && win_install_missing && wine_prefix",
            )
            .current_dir(&root)
            .env("WINEPREFIX", &prefix)
            .status()
            .context("prepare the Wine prefix")?;
        anyhow::ensure!(prepared.success(), "cannot prepare the Wine prefix");
        Ok(prefix)
    }

    /// A command that runs `exe` under Wine in `prefix`, quietly.
    pub fn command(exe: &Path, prefix: &Path) -> Command {
        let mut cmd = Command::new(WINE64);
        cmd.arg(exe)
            .env("WINEPREFIX", prefix)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=");
        cmd
    }

    /// `path` as a Windows program under Wine names it (`Z:\...`).
    pub fn path(path: &Path) -> String {
        format!("Z:{}", path.to_string_lossy().replace('/', "\\"))
    }

    /// CPU seconds of the wineserver serving `prefix`, if one runs.
    pub fn wineserver_cpu(prefix: &Path) -> Option<f64> {
        let want = std::fs::canonicalize(prefix).ok()?;
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmd = std::fs::read_to_string(e.path().join("cmdline")).ok()?;
            if !cmd.contains("wineserver") {
                return None;
            }
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let ours = env.split(|b| *b == 0).any(|kv| {
                kv == format!("WINEPREFIX={}", want.display()).as_bytes()
                    || kv == format!("WINEPREFIX={}", prefix.display()).as_bytes()
            });
            ours.then(|| usage::cpu_seconds(Process::Pid(pid)))?
        })
    }
}

/// The tools' `main`: logs on stderr at `default_level` unless `RUST_LOG`
/// says otherwise (colours only on a terminal), then `run`; an error is
/// printed and exits with status 1.
pub fn tool_main(
    default_level: &str,
    run: impl FnOnce() -> anyhow::Result<()>,
) -> std::process::ExitCode {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
