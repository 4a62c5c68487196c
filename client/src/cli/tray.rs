//! The notification-area icon of `beebot run` on Windows: what
//! [`beebot_client::tray`] says it shows, through `beebot_win32::tray`.
//! Its commands go where the page's go: the gate's control commands, and
//! `open` for the page itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use beebot_client::control::{apply_command, Gate};
use beebot_client::home::Home;
use beebot_client::tray::{self, Entry};
use beebot_client::ui::view;
use beebot_win32::tray::{Handler, Item, Look, Tray};

/// How often the icon looks at the client's state.
pub const TRAY_REFRESH: Duration = Duration::from_secs(2);
/// Longest the icon's window holds a session's end for the run to stop
/// (its scans checkpoint in `SHUTDOWN_GRACE`, 3 s, and their writes in
/// 1.25 s): Windows ends a program that holds it much past 5 s.
pub const ENDING_WAIT: Duration = Duration::from_millis(4_800);

struct RunnerIcon {
    home: Home,
    home_flag: Option<PathBuf>,
    gate: Arc<Gate>,
    /// Set once the run has stopped.
    done: Arc<AtomicBool>,
}

impl Handler for RunnerIcon {
    fn look(&mut self) -> Look {
        let (state, words) = view::state_now(&self.home);
        let l = tray::look(state, &words);
        Look {
            colour: l.colour,
            tip: l.tip,
            menu: l
                .menu
                .into_iter()
                .map(|e| match e {
                    Entry::Command { id, label, enabled } => Item::Command {
                        id,
                        label: label.into(),
                        enabled,
                    },
                    Entry::Separator => Item::Separator,
                })
                .collect(),
            default: Some(l.default),
        }
    }

    fn chosen(&mut self, id: u16) {
        if id == tray::OPEN {
            // Opening waits for a browser: not on the icon's thread.
            let (home, flag) = (self.home.clone(), self.home_flag.clone());
            std::thread::spawn(move || {
                if let Err(e) = super::open::open(&home, flag.as_deref(), false) {
                    tracing::warn!("cannot open the status page: {e:#}");
                }
            });
        } else if let Some(command) = tray::control_command(id) {
            let said = apply_command(&self.gate, &command, SystemTime::now());
            tracing::info!("notification-area icon: {command}: {said}");
        }
    }

    fn ending(&mut self) {
        tracing::info!("the session ends or the client is asked to close: stopping");
        let _ = apply_command(&self.gate, "stop", SystemTime::now());
        let start = Instant::now();
        while !self.done.load(Ordering::Relaxed) && start.elapsed() < ENDING_WAIT {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Show the icon for this run; `None` (said in the log) where Windows has
/// no notification area to show it in.
pub fn show(
    home: &Home,
    home_flag: Option<&Path>,
    gate: Arc<Gate>,
    done: Arc<AtomicBool>,
) -> Option<Tray> {
    let icon = RunnerIcon {
        home: home.clone(),
        home_flag: home_flag.map(Path::to_path_buf),
        gate,
        done,
    };
    match Tray::start(Box::new(icon), TRAY_REFRESH) {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("no notification-area icon: {e}");
            None
        }
    }
}
