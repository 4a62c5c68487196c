//! `beebot service install|uninstall|status`: the per-user background
//! service that runs `beebot run` at login.
//!
//! Installing with `--window` saves the `window` setting first. Nothing
//! here runs the work loop.

use std::path::Path;

use anyhow::{Context, Result};

use beebot_client::home::Home;
use beebot_client::{service, settings};

use super::Said;

/// Install (and with `start`, start) the service for this home; the
/// window line stays said should the install fail.
pub fn install(
    home: &Home,
    home_flag: Option<&Path>,
    window: Option<String>,
    no_start: bool,
) -> Result<Said> {
    let mut said = Said::default();
    if let Some(w) = window {
        let old = settings::set(home, "window", &w)?;
        said.out = format!(
            "window: {} → {w} (setting in {})\n",
            old.unwrap_or_else(|| "always (default)".into()),
            settings::file_path(home).display()
        );
    }
    let installed = std::env::current_exe()
        .context("cannot find this program's path")
        .and_then(|exe| service::install(&exe, home_flag, &home.data, !no_start));
    match installed {
        Ok(lines) => said.out.push_str(&lines_of(&lines)),
        Err(e) => said.failed = Some(e),
    }
    Ok(said)
}

/// Stop and remove the service.
pub fn uninstall() -> Result<String> {
    Ok(lines_of(&service::uninstall()?))
}

/// Whether the service is installed and running (on Windows, whether the
/// autostart is registered and this home's runner runs).
pub fn status(home: &Home) -> Result<String> {
    Ok(format!("{}\n", service::status(&home.data)?))
}

/// Lines, each ended.
fn lines_of(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}
