//! The Windows system calls the desktop client needs, each behind a safe
//! function: its own CPU time, memory and I/O (`GetProcessTimes`,
//! `K32GetProcessMemoryInfo`, `GetProcessIoCounters`), whether the machine
//! runs on battery (`GetSystemPowerStatus`), a lower priority
//! (`SetPriorityClass`), string values in the registry (the autostart
//! entry, an installer's invite code), a notification-area icon with its
//! menu (`Shell_NotifyIconW`), and whether a kept connection has news
//! (`WSAPoll`).
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
pub mod socket;
#[cfg(windows)]
pub mod tray;

#[cfg(windows)]
mod wide;

/// Whether this program runs under Wine (its ntdll has
/// `wine_get_version`): for the tests, where Wine keeps a count Windows
/// keeps or has no display.
#[cfg(windows)]
pub fn under_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
    let ntdll = wide::wide("ntdll.dll");
    // SAFETY: a NUL-terminated name owned here; ntdll is in every process,
    // and a missing export is a null result, checked.
    unsafe {
        let module = GetModuleHandleW(ntdll.as_ptr());
        !module.is_null() && GetProcAddress(module, c"wine_get_version".as_ptr().cast()).is_some()
    }
}
