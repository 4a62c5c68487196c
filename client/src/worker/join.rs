//! Joining a project with an invite code: check the code, make the host
//! key, have the server prove its project, enrol, and save.
//!
//! Nothing is written before the server has enrolled this host.

use anyhow::{bail, Context, Result};
use beebot_shared::sign;

use crate::home::{Enrolment, Home};
use crate::net::{Link, ServerId};

use super::now_ms;

/// Join a project with an invite code: make the host key, enrol, save.
///
/// Nothing is written before the server has enrolled this host: the code's
/// checksum is checked before anything is sent, the server must prove it
/// holds the invite's project key (`ProveProject`, checked with the key from
/// the code) before the token is spent, and the host key lives in memory
/// until the enrolment is in. Any failure leaves the home as it was.
pub async fn join(home: &Home, code: &str, name: Option<String>) -> Result<Enrolment> {
    let invite = beebot_shared::invite::Invite::from_code(code)?;
    if invite.expires_ms <= now_ms() {
        bail!("this invite code has expired; ask the admin for a new one");
    }
    if let Some(e) = home.enrolment()? {
        bail!(
            "this client already joined {} as host {} (use another --home, or `beebot leave` first)",
            e.server_addr,
            e.host_id
        );
    }
    let key = sign::generate_key();
    let server = ServerId {
        addr: invite.addr.clone(),
        server_name: invite.server_name.clone(),
        cert_sha256: invite.cert_sha256,
    };
    let name = name.unwrap_or_else(default_host_name);
    let info = beebot_shared::proto::HostInfo {
        name: name.clone(),
        os: std::env::consts::OS.to_string(),
        client_version: env!("CARGO_PKG_VERSION").to_string(),
        cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    };
    let link = Link::connect(&server)
        .await
        .with_context(|| format!("cannot reach the server at {}", invite.addr))?;
    let proven = link
        .proves_project(&invite.project_key)
        .await
        .with_context(|| format!("the server at {} did not prove its project", invite.addr))?;
    if !proven {
        link.close();
        bail!(
            "this invite code does not belong to the server at {}: its project key is not the server's; ask the admin for a new code",
            invite.addr
        );
    }
    let host_id = link
        .enrol(invite.token.clone(), &key, info)
        .await
        .context("enrolment refused")?;
    link.close();
    let e = Enrolment {
        server_addr: invite.addr,
        server_name: invite.server_name,
        cert_sha256: hex::encode(invite.cert_sha256),
        project_key: hex::encode(invite.project_key),
        host_id,
        name,
        joined_ms: now_ms(),
    };
    home.save_joined(&key, &e)?;
    // Joined again: an installer's code may join this home again after a leave.
    home.clear_left();
    Ok(e)
}

/// This machine's host name (`HOSTNAME`, else `/etc/hostname`), else a
/// stand-in: the name shown to the admin unless `--name` says otherwise.
fn default_host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "beebot-host".into())
}
