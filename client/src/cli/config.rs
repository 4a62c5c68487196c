//! `beebot config show` and `beebot config set`: the settings file in the
//! config dir, under the environment and flags.
//!
//! A value is validated before it is written; a running client is told to
//! read its settings again and says what it applied. Nothing here starts a
//! client.

use anyhow::Result;

use beebot_client::home::Home;
use beebot_client::settings;
use beebot_client::{control, ui};

use super::Said;

/// Every setting, its value, and where the value came from.
pub fn show(home: &Home, json: bool) -> Result<String> {
    let (_, shown) = settings::load(home, &|k| std::env::var(k).ok(), &[])?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&shown)?));
    }
    Ok(format!(
        "# {}\n{}",
        settings::file_path(home).display(),
        settings::show_table(&shown)
    ))
}

/// Validate and write one setting, and have a running client apply it.
pub fn set(home: &Home, key: &str, value: &str) -> Result<Said> {
    settings::check_key(key)?;
    let old = settings::set(home, key, value)?;
    let mut said = Said::from(written(key, value, old.as_deref(), home));
    // A running client reads its settings again.
    match ui::client::command(&home.data, &format!("reload {key}")) {
        Ok(answer) => said
            .out
            .push_str(&format!("{}\n", answer.trim_start_matches("ok "))),
        Err(_) if control::read_live_status(&home.data).is_none() => said
            .out
            .push_str("no client is running here: `beebot run` uses it when it starts\n"),
        Err(e) => said.warn = format!("warning: the running client did not take it: {e:#}\n"),
    }
    Ok(said)
}

/// The line saying what was written where, and the value it replaced.
fn written(key: &str, value: &str, old: Option<&str>, home: &Home) -> String {
    let old = old.map(|o| format!(" (was {o})")).unwrap_or_default();
    format!(
        "{key} = {value}{old} in {}\n",
        settings::file_path(home).display()
    )
}
