//! `beebotw`: `beebot` without a console window, for what Windows starts by
//! itself: the autostart entry (`beebotw run`), the Start-menu entry
//! (`beebotw open`) and the installers (`beebotw leave`).
//!
//! `beebot.exe` is a console program, so the command line keeps its
//! console; Windows gives every console program started outside a console a
//! window of its own, which closing would stop. This launcher is a GUI
//! program (no console of its own) that runs `beebot.exe` beside it with
//! the same arguments and no window (`CREATE_NO_WINDOW`), waits for it and
//! exits with its code. Elsewhere it does the same without the flag.

#![windows_subsystem = "windows"]

use std::process::Command;

/// The client's executable, beside this one.
const CLIENT: &str = if cfg!(windows) {
    "beebot.exe"
} else {
    "beebot"
};

fn main() {
    let Some(client) = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(CLIENT))
    else {
        std::process::exit(1);
    };
    let mut cmd = Command::new(&client);
    cmd.args(std::env::args_os().skip(1));
    #[cfg(windows)]
    {
        use std::os::windows::process::CommandExt;
        /// A console program's console without a window.
        const CREATE_NO_WINDOW: u32 = 0x0800_0000;
        cmd.creation_flags(CREATE_NO_WINDOW);
    }
    match cmd.status() {
        // A signal's end (Unix) has no code: a failure.
        Ok(status) => std::process::exit(status.code().unwrap_or(1)),
        Err(e) => {
            // Said on stderr where one is attached (none when Windows
            // started it).
            eprintln!("beebotw: cannot start {}: {e}", client.display());
            std::process::exit(127)
        }
    }
}
