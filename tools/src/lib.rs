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
