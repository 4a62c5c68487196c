//! The invite code an installer left for this machine: the environment's,
//! the Windows installers' registry value, or the deployment's file.

use std::fs;
use std::path::{Path, PathBuf};

/// Where an IT deployment leaves an invite code for every user of the
/// machine (the Debian package's postinst): a client that has not joined
/// yet joins with it by itself. On Windows the installers leave it in the
/// registry instead ([`WINDOWS_INVITE_KEY`]), so there is no file.
///
/// Only root can write it: it is under a root-owned directory, and a file
/// others than root could have written is refused
/// ([`deployment_file_trusted`]).
pub fn deployment_invite_path() -> Option<PathBuf> {
    if cfg!(windows) {
        None
    } else if cfg!(target_os = "macos") {
        Some(PathBuf::from("/Library/Application Support/BeeBot/invite"))
    } else {
        Some(PathBuf::from("/etc/beebot/invite"))
    }
}

/// The registry key where the Windows installers leave the invite code:
/// under `HKLM` by the per-machine MSI (only administrators can write
/// there), else under `HKCU` by a per-user install (only that user can).
/// Never a file in `%ProgramData%`, which every user may write: a code
/// there could send another user's client to a server of their choosing.
pub const WINDOWS_INVITE_KEY: &str = "Software\\BeeBot";
/// The value's name under [`WINDOWS_INVITE_KEY`].
pub const WINDOWS_INVITE_VALUE: &str = "Invite";

/// The code a Windows installer left: the machine's (`HKLM`), else this
/// user's (`HKCU`). Blank values count as none.
#[cfg(windows)]
fn windows_installed_invite() -> Option<String> {
    use beebot_win32::registry::{get_string, Root};
    [Root::LocalMachine, Root::CurrentUser]
        .into_iter()
        .filter_map(|root| {
            get_string(root, WINDOWS_INVITE_KEY, WINDOWS_INVITE_VALUE)
                .ok()
                .flatten()
        })
        .filter_map(|v| invite_code_in(v.as_bytes()).ok().flatten())
        .next()
}

/// The invite code this machine was installed with: `BEEBOT_INVITE`, else
/// the Windows installers' registry value, else the deployment's file.
pub fn installed_invite() -> Option<String> {
    let env = std::env::var("BEEBOT_INVITE").ok();
    #[cfg(windows)]
    {
        deployment_invite(env, None).or_else(windows_installed_invite)
    }
    #[cfg(not(windows))]
    {
        deployment_invite(env, deployment_invite_path().as_deref())
    }
}

/// Whether this machine has an installer's invite code (the environment's,
/// the registry's or a trusted file), which a home that left must not join
/// with again.
pub fn has_deployment_invite() -> bool {
    installed_invite().is_some()
}

/// Whether a deployment file could only have been written by root: it and
/// its directory are root's and writable by no one else (Unix; elsewhere
/// the install directory's own permissions decide).
pub fn deployment_file_trusted(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let root_only =
            |p: &Path| fs::metadata(p).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0);
        root_only(path) && path.parent().is_some_and(root_only)
    }
    #[cfg(not(unix))]
    {
        path.is_file()
    }
}

/// The deployment's invite code: `env` (`BEEBOT_INVITE`), else the first
/// non-blank line of `file` when [`deployment_file_trusted`] (at most an
/// invite code's length is read).
pub fn deployment_invite(env: Option<String>, file: Option<&Path>) -> Option<String> {
    if let Some(code) = env.map(|e| e.trim().to_string()).filter(|e| !e.is_empty()) {
        return Some(code);
    }
    let file = file?;
    if !deployment_file_trusted(file) {
        if file.exists() {
            tracing::warn!(
                "ignoring {}: an invite code must be root's and writable by no one else",
                file.display()
            );
        }
        return None;
    }
    invite_code_in(fs::File::open(file).ok()?).ok().flatten()
}

/// The first non-blank line of `input`, reading at most an invite code's
/// length (stdin of `beebot join -`, a deployment's file).
pub fn invite_code_in(input: impl std::io::Read) -> std::io::Result<Option<String>> {
    use std::io::Read;
    let limit = beebot_shared::invite::MAX_INVITE_CODE_LEN as u64 + 2;
    let mut text = String::new();
    input.take(limit).read_to_string(&mut text)?;
    Ok(text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string))
}
