//! `serve`: serve clients (QUIC) and the admin API until Ctrl-C or SIGTERM.
//! It says where it listens as soon as it is bound, then runs. When its
//! store failed (a full disk) and the disk takes writes again, it starts
//! afresh in the same process (the same pid, so a service manager sees
//! one server): the program is executed again with its own arguments.

use anyhow::{Context, Result};
use beebot_shared::rt::{runtime, shutdown_signal};

use beebot_server::config::{DataDir, Runtime};
use beebot_server::{RunEnd, Server};

use super::Report;

/// `beebot-server serve`: the banner is printed once bound.
pub fn run(dir: DataDir) -> Result<Report> {
    let rt = runtime()?;
    let end = rt.block_on(async {
        let server = Server::bind(dir).await?;
        print!("{}", banner(server.runtime()));
        server.run(shutdown_signal()).await
    })?;
    if end == RunEnd::StoreWritable {
        // Its threads hold the failed store: nothing of them is kept.
        rt.shutdown_timeout(std::time::Duration::from_secs(5));
        start_afresh()?;
    }
    Ok(Report::default())
}

/// Execute this program again with the same arguments, in this process
/// (returns only on failure). Every file and socket it holds is closed
/// on exec, so the new server takes the store's lock and the addresses.
#[cfg(unix)]
fn start_afresh() -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find this program to start it again")?;
    let e = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(e).with_context(|| format!("cannot start {} again: restart the server", exe.display()))
}

/// Elsewhere the process ends with an error, for its service manager to
/// start it again.
#[cfg(not(unix))]
fn start_afresh() -> Result<()> {
    anyhow::bail!("space is back on the store's disk: restart the server")
}

/// Where the bound server listens.
fn banner(r: &Runtime) -> String {
    let mut out = format!(
        "serving QUIC on {} (public {}), admin API on http://{}\n",
        r.quic_addr, r.public_addr, r.admin_addr
    );
    if let Some(addr) = r.reference_addr {
        out.push_str(&format!("reference site on http://{addr}/\n"));
    }
    if let Some(addr) = r.metrics_addr {
        out.push_str(&format!("metrics on http://{addr}/metrics\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_banner_names_every_address() {
        let mut r = Runtime {
            quic_addr: "0.0.0.0:4433".parse().unwrap(),
            admin_addr: "127.0.0.1:4480".parse().unwrap(),
            reference_addr: None,
            metrics_addr: None,
            public_addr: "grid.example.edu:4433".into(),
            pid: 1,
        };
        assert_eq!(
            banner(&r),
            "serving QUIC on 0.0.0.0:4433 (public grid.example.edu:4433), admin API on http://127.0.0.1:4480\n"
        );
        r.reference_addr = Some("0.0.0.0:4481".parse().unwrap());
        assert!(banner(&r).ends_with("reference site on http://0.0.0.0:4481/\n"));
        r.metrics_addr = Some("127.0.0.1:9464".parse().unwrap());
        assert!(banner(&r).ends_with("metrics on http://127.0.0.1:9464/metrics\n"));
    }
}
