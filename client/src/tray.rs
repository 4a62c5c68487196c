//! What the notification-area icon shows on Windows, and what its menu
//! does: a colour for the state at a glance, the page's own words as its
//! tooltip, and four commands (open the page, pause for an hour, resume,
//! quit). Thin on purpose: the page stays the one place for settings.
//!
//! Pure (tested everywhere); `cli/tray.rs` shows it through
//! `beebot_win32::tray` inside `beebot run` on Windows.

/// The menu's commands, by id.
pub const OPEN: u16 = 1;
pub const PAUSE_HOUR: u16 = 2;
pub const RESUME: u16 = 3;
pub const QUIT: u16 = 4;

/// How long "Pause for an hour" pauses.
pub const TRAY_PAUSE_SECS: u64 = 3600;

/// Longest tooltip, in characters (the notification area keeps 127).
pub const MAX_TIP_CHARS: usize = 127;

/// One entry of the menu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Command {
        id: u16,
        label: &'static str,
        enabled: bool,
    },
    Separator,
}

/// What the icon shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrayLook {
    /// Red, green, blue.
    pub colour: [u8; 3],
    pub tip: String,
    pub menu: Vec<Entry>,
    /// What a double click does.
    pub default: u16,
}

/// Green: crawling.
pub const CRAWLING: [u8; 3] = [0x1a, 0x7f, 0x37];
/// Amber: held (paused, outside the window, on battery).
pub const HELD: [u8; 3] = [0xd4, 0x8a, 0x00];
/// Blue: joined and waiting (starting, waiting for work).
pub const WAITING: [u8; 3] = [0x21, 0x6e, 0xc8];
/// Grey: offline.
pub const OFFLINE: [u8; 3] = [0x80, 0x80, 0x80];
/// Red: needs the employee (not joined, revoked).
pub const NEEDS_YOU: [u8; 3] = [0xcf, 0x22, 0x2e];

/// The look for a state and its words (`ui::view::state_now`).
pub fn look(state: &str, words: &str) -> TrayLook {
    let colour = match state {
        "crawling" => CRAWLING,
        "paused" | "outside-window" | "on-battery" => HELD,
        "offline" => OFFLINE,
        "not-joined" | "revoked" => NEEDS_YOU,
        _ => WAITING,
    };
    let paused = state == "paused";
    let joined = !matches!(state, "not-joined" | "revoked");
    let mut tip = format!("BeeBot: {words}");
    if tip.chars().count() > MAX_TIP_CHARS {
        tip = tip.chars().take(MAX_TIP_CHARS - 1).collect();
        tip.push('…');
    }
    let command = |id, label, enabled| Entry::Command { id, label, enabled };
    TrayLook {
        colour,
        tip,
        menu: vec![
            command(OPEN, "Open BeeBot", true),
            Entry::Separator,
            command(PAUSE_HOUR, "Pause for an hour", joined && !paused),
            command(RESUME, "Resume", paused),
            Entry::Separator,
            command(QUIT, "Quit BeeBot", true),
        ],
        default: OPEN,
    }
}

/// The control command a menu item sends the runner (`control::apply_command`);
/// `None` for "Open", which is not one.
pub fn control_command(id: u16) -> Option<String> {
    match id {
        PAUSE_HOUR => Some(format!("pause {TRAY_PAUSE_SECS}")),
        RESUME => Some("resume".into()),
        QUIT => Some("stop".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{apply_command, Gate};
    use crate::window::Windows;
    use std::time::SystemTime;

    fn enabled(l: &TrayLook, id: u16) -> bool {
        l.menu
            .iter()
            .any(|e| matches!(e, Entry::Command { id: i, enabled: true, .. } if *i == id))
    }

    #[test]
    fn each_state_has_its_colour_and_commands() {
        let crawling = look("crawling", "Crawling 3 sites.");
        assert_eq!(crawling.colour, CRAWLING);
        assert_eq!(crawling.tip, "BeeBot: Crawling 3 sites.");
        assert!(enabled(&crawling, PAUSE_HOUR) && !enabled(&crawling, RESUME));
        assert!(enabled(&crawling, OPEN) && enabled(&crawling, QUIT));
        assert_eq!(crawling.default, OPEN);
        let paused = look("paused", "Paused for 59 min more (until 15:02).");
        assert_eq!(paused.colour, HELD);
        assert!(!enabled(&paused, PAUSE_HOUR) && enabled(&paused, RESUME));
        assert_eq!(look("outside-window", "x").colour, HELD);
        assert_eq!(look("on-battery", "x").colour, HELD);
        assert_eq!(look("offline", "x").colour, OFFLINE);
        assert_eq!(look("waiting-for-work", "x").colour, WAITING);
        assert_eq!(look("starting", "x").colour, WAITING);
        let not_joined = look("not-joined", "x");
        assert_eq!(not_joined.colour, NEEDS_YOU);
        assert!(!enabled(&not_joined, PAUSE_HOUR) && enabled(&not_joined, OPEN));
    }

    #[test]
    fn a_long_tip_is_cut_to_what_the_area_keeps() {
        let l = look("revoked", &"é".repeat(300));
        assert_eq!(l.tip.chars().count(), MAX_TIP_CHARS);
        assert!(l.tip.ends_with('…'));
    }

    #[test]
    fn the_menu_pauses_for_an_hour_resumes_and_quits_the_runner() {
        let gate = Gate::new(Windows::always(), false);
        let now = SystemTime::now();
        let said = apply_command(&gate, &control_command(PAUSE_HOUR).unwrap(), now);
        assert!(said.starts_with("ok paused for 1h"), "{said}");
        assert!(matches!(
            gate.hold_at(now, chrono::Local::now().naive_local()),
            crate::control::Hold::Paused(Some(until)) if until == now + std::time::Duration::from_secs(3600)
        ));
        let said = apply_command(&gate, &control_command(RESUME).unwrap(), now);
        assert_eq!(said, "ok resumed");
        let said = apply_command(&gate, &control_command(QUIT).unwrap(), now);
        assert_eq!(said, "ok stopping");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let stopped = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(5), gate.stopped()).await
        });
        assert!(stopped.is_ok(), "the runner was not asked to stop");
        assert_eq!(control_command(OPEN), None);
    }
}
