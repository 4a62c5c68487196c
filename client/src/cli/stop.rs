//! `beebot stop`: stop this home's running client, as `leave` does first,
//! and nothing more: its scans are checkpointed and go on at its next start.
//! What the Windows installers run before they replace the program.

use anyhow::Result;

use beebot_client::home::{runner_pid, Home};
use beebot_client::rt::runtime;

/// Stop the running client of `home` and wait until it has exited; no
/// client running is not an error (an installer asks either way).
pub fn stop(home: &Home) -> Result<String> {
    if runner_pid(&home.data).is_none() {
        return Ok("no client is running\n".into());
    }
    let (pid, lock) = runtime()?.block_on(beebot_client::leave::stop_runner(home))?;
    drop(lock);
    Ok(match pid {
        Some(pid) => {
            format!("stopped the running client (pid {pid}); its scans go on at its next start\n")
        }
        None => "no client is running\n".into(),
    })
}
