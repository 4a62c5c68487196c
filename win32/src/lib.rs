//! The Windows system calls the desktop client needs, each behind a safe
//! function: its own CPU time, memory and I/O (`GetProcessTimes`,
//! `K32GetProcessMemoryInfo`, `GetProcessIoCounters`), whether the machine
//! runs on battery (`GetSystemPowerStatus`), a lower priority
//! (`SetPriorityClass`), string values in the registry (the autostart
//! entry, an installer's invite code), and a notification-area icon with
//! its menu (`Shell_NotifyIconW`).
//!
//! This is the workspace's one crate with `unsafe` code (every other crate
//! forbids it): each block calls one Win32 function with values and buffers
//! the block owns, and says why that is sound. On other platforms the crate
//! is empty.

#[cfg(windows)]
pub mod power;
#[cfg(windows)]
pub mod process;
#[cfg(windows)]
pub mod registry;
#[cfg(windows)]
pub mod tray;

#[cfg(windows)]
mod wide;
