//! `beebot pause` and `beebot resume`: ask the running client, through its
//! status page's API, to hold its scans at a page boundary or go on.
//!
//! No client running is an error (the socket cannot be reached). Nothing
//! here touches the spool.

use std::time::Duration;

use anyhow::Result;

use beebot_client::home::Home;
use beebot_client::ui;

/// Pause the running client, for `duration` or until `beebot resume`.
pub fn pause(home: &Home, duration: Option<Duration>) -> Result<String> {
    let cmd = match duration {
        Some(d) => format!("pause {}", d.as_secs().max(1)),
        None => "pause".to_string(),
    };
    Ok(answer(&ui::client::command(&home.data, &cmd)?))
}

/// Resume a paused client.
pub fn resume(home: &Home) -> Result<String> {
    Ok(answer(&ui::client::command(&home.data, "resume")?))
}

/// The client's answer as the user reads it: without its `ok `.
fn answer(said: &str) -> String {
    format!("{}\n", said.trim_start_matches("ok "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_shown_without_its_ok() {
        assert_eq!(answer("ok paused for 2h"), "paused for 2h\n");
        assert_eq!(answer("resumed"), "resumed\n");
    }
}
