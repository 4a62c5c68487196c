//! `invite`: make an invite code; `invite list` and `invite revoke ID`
//! manage the invites made. The code is printed alone on the last line.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use beebot_server::api::{InviteListed, InviteRequest, InviteResponse, InviteRevoked, InvitesList};
use beebot_server::cli_util::{typed_duration, utc_minute, AdminClient, TypedDuration};
use beebot_server::config::{self, DataDir};
use beebot_shared::util::human_duration;

use super::Report;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct InviteArgs {
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
}

#[derive(Subcommand)]
enum InviteCmd {
    /// Every invite: id, uses left, expiry, creation (never the code).
    List,
    /// Revoke an invite by its id from `invite list` (or a prefix naming one):
    /// nobody joins with it any more.
    Revoke {
        /// The invite's id (or a prefix naming one).
        id: String,
    },
}

/// `beebot-server invite [list | revoke ID]`.
pub fn run(dir: &DataDir, a: InviteArgs) -> Result<Report> {
    match a.cmd {
        Some(InviteCmd::List) => {
            let invites: InvitesList = AdminClient::new(dir)?.get("/api/invites")?;
            Ok(list(&invites, beebot_server::now_ms()))
        }
        Some(InviteCmd::Revoke { id }) => {
            let c = AdminClient::new(dir)?;
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("`{id}` is not an invite id: use an id from `beebot-server invite list`");
            }
            let r: InviteRevoked = c.post(&format!("/api/invites/{id}/revoke"), &())?;
            Ok(Report::out(format!("invite {} revoked\n", r.id)))
        }
        None => create(dir, a.uses, &a.expires, a.force),
    }
}

/// Make an invite for `uses` hosts.
fn create(dir: &DataDir, uses: u32, expires: &TypedDuration, force: bool) -> Result<Report> {
    let expires = expires.within("--expires", &config::INVITE_EXPIRY, force)?;
    let c = AdminClient::new(dir)?;
    let r: InviteResponse = c.post(
        "/api/invites",
        &InviteRequest {
            uses,
            expires_s: expires.as_secs(),
            force,
        },
    )?;
    Ok(Report::out(format!(
        "invite for {uses} host(s), expires in {} ({}); send this line to the employee:\n{}\n",
        human_duration(expires),
        utc_minute(r.expires_ms),
        r.code
    )))
}

/// `invite list` at `now` (Unix ms).
fn list(invites: &[InviteListed], now: u64) -> Report {
    if invites.is_empty() {
        return Report::note("no invites yet: create one with `beebot-server invite`");
    }
    let mut r = Report::out("id\tuses left\texpires\tcreated\n");
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
        r.say(format!(
            "{}\t{}\t{}\t{} ago",
            i.id,
            i.uses_left,
            expires,
            human_duration(Duration::from_millis(now.saturating_sub(i.created_ms)))
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invites_list_says_expired_or_when() {
        const HOUR_MS: u64 = 3600 * 1000;
        let now = 100 * HOUR_MS;
        let listed = |id: &str, expires_ms| InviteListed {
            id: id.into(),
            uses_left: 2,
            expires_ms,
            created_ms: now - HOUR_MS,
        };
        let r = list(
            &[listed("ab12", now - 1), listed("cd34", now + HOUR_MS)],
            now,
        );
        let lines: Vec<&str> = r.out.lines().collect();
        assert_eq!(lines[0], "id\tuses left\texpires\tcreated");
        assert!(lines[1].starts_with("ab12\t2\texpired\t"), "{}", lines[1]);
        assert!(lines[2].starts_with("cd34\t2\tin "), "{}", lines[2]);
        assert!(list(&[], now).err.starts_with("no invites yet"));
    }
}
