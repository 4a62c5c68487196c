//! `serve`: serve clients (QUIC) and the admin API until Ctrl-C or SIGTERM.
//! It says where it listens as soon as it is bound, then runs.

use anyhow::Result;
use beebot_shared::rt::{runtime, shutdown_signal};

use beebot_server::config::{DataDir, Runtime};
use beebot_server::Server;

use super::Report;

/// `beebot-server serve`: the banner is printed once bound.
pub fn run(dir: DataDir) -> Result<Report> {
    let rt = runtime()?;
    rt.block_on(async {
        let server = Server::bind(dir).await?;
        print!("{}", banner(server.runtime()));
        server.run(shutdown_signal()).await
    })?;
    Ok(Report::default())
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
