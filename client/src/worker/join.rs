//! Joining a project with an invite code: check the code, make the host
//! key, have the server prove its project, enrol, and save.
//!
//! Nothing is written before the server has enrolled this host.

use anyhow::{bail, Context, Result};
use beebot_shared::sign;

use crate::home::{Enrolment, Home};
use crate::net::{Link, NetError, ServerId};
use beebot_shared::proto::ErrorCode;

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
    if let Some(e) = home.identity().enrolment()? {
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
    let asked = name.unwrap_or_else(default_host_name);
    let info = beebot_shared::proto::HostInfo {
        name: asked,
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
    let (host_id, name) = enrol_under_a_free_name(&link, &invite.token, &key, info).await?;
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
    home.identity().save_joined(&key, &e)?;
    // Joined again: an installer's code may join this home again after a leave.
    home.identity().clear_left();
    Ok(e)
}

/// Names tried at most when the one asked for is taken: `NAME`, then
/// `NAME-2` up to `NAME-{MAX_NAME_TRIES}`; each try is two round trips on
/// one connection, all well within the server's `AUTH_TIMEOUT`.
pub const MAX_NAME_TRIES: u32 = 10;

/// The name asked for, or the one after it while the server says the
/// last was taken by another host (a second desktop or user with the
/// same machine name): never a dead end at a silent install.
fn name_try(asked: &str, n: u32) -> String {
    if n <= 1 {
        asked.to_string()
    } else {
        format!("{asked}-{n}")
    }
}

/// Enrol as `info.name`, or as the first of its suffixed names that is
/// free; the host id and the name it got. A taken name spends nothing.
async fn enrol_under_a_free_name(
    link: &Link,
    token: &[u8],
    key: &ed25519_dalek::SigningKey,
    mut info: beebot_shared::proto::HostInfo,
) -> Result<(u64, String)> {
    let asked = info.name.clone();
    for n in 1..=MAX_NAME_TRIES {
        info.name = name_try(&asked, n);
        match link.enrol(token.to_vec(), key, info.clone()).await {
            Ok(id) => return Ok((id, info.name)),
            Err(NetError::Refused {
                code: ErrorCode::NameTaken,
                ..
            }) => continue,
            Err(e) => return Err(anyhow::Error::new(e).context("enrolment refused")),
        }
    }
    bail!(
        "the names {asked} to {} are all taken by other hosts: join with another name (`beebot join --name NAME`)",
        name_try(&asked, MAX_NAME_TRIES)
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_name_is_tried_again_with_a_suffix() {
        assert_eq!(name_try("desk", 1), "desk");
        assert_eq!(name_try("desk", 2), "desk-2");
        assert_eq!(name_try("desk", MAX_NAME_TRIES), "desk-10");
    }
}
