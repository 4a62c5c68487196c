//! A process's CPU time, memory and bytes written, and this process's
//! priority: what `/proc` gives on Linux.

use std::mem::size_of;

use windows_sys::Win32::Foundation::{CloseHandle, FILETIME, HANDLE, STILL_ACTIVE};
use windows_sys::Win32::System::ProcessStatus::{K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetExitCodeProcess, GetProcessIoCounters, GetProcessTimes, OpenProcess,
    SetPriorityClass, BELOW_NORMAL_PRIORITY_CLASS, IO_COUNTERS, PROCESS_QUERY_LIMITED_INFORMATION,
};

/// `FILETIME` counts 100-ns intervals.
const FILETIME_TICKS_PER_S: f64 = 10_000_000.0;

/// A process handle that may read its times and counters: this process's
/// pseudo-handle, or another's opened by pid (closed on drop).
struct Process {
    handle: HANDLE,
    owned: bool,
}

impl Process {
    fn this() -> Process {
        Process {
            // SAFETY: no arguments; returns a pseudo-handle that needs no closing.
            handle: unsafe { GetCurrentProcess() },
            owned: false,
        }
    }

    fn open(pid: u32) -> Option<Process> {
        // SAFETY: plain values in; a null handle on failure, checked below.
        let handle = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
        (!handle.is_null()).then_some(Process {
            handle,
            owned: true,
        })
    }

    fn of(pid: Option<u32>) -> Option<Process> {
        match pid {
            None => Some(Process::this()),
            Some(pid) => Process::open(pid),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the handle was opened by `OpenProcess` and is closed once.
            unsafe { CloseHandle(self.handle) };
        }
    }
}

fn seconds(t: FILETIME) -> f64 {
    ((u64::from(t.dwHighDateTime) << 32) | u64::from(t.dwLowDateTime)) as f64 / FILETIME_TICKS_PER_S
}

/// CPU time (user and kernel, every thread) of this process (`None`) or
/// another by pid, in seconds.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let p = Process::of(pid)?;
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: a valid process handle and four FILETIMEs owned here, which
    // the call only writes.
    let ok =
        unsafe { GetProcessTimes(p.handle, &mut created, &mut exited, &mut kernel, &mut user) };
    (ok != 0).then(|| seconds(kernel) + seconds(user))
}

/// Resident memory now and at its peak (working set), KB.
pub fn memory_kb(pid: Option<u32>) -> Option<(u64, u64)> {
    let p = Process::of(pid)?;
    // SAFETY: PROCESS_MEMORY_COUNTERS is plain integers: all zeroes is valid.
    let mut m: PROCESS_MEMORY_COUNTERS = unsafe { std::mem::zeroed() };
    let cb = size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    m.cb = cb;
    // SAFETY: a valid process handle and a counters struct of `cb` bytes
    // owned here, which the call only writes.
    let ok = unsafe { K32GetProcessMemoryInfo(p.handle, &mut m, cb) };
    (ok != 0).then(|| {
        (
            m.WorkingSetSize as u64 / 1024,
            m.PeakWorkingSetSize as u64 / 1024,
        )
    })
}

/// Bytes the process wrote so far (files, pipes and devices together).
pub fn written_bytes(pid: Option<u32>) -> Option<u64> {
    let p = Process::of(pid)?;
    // SAFETY: IO_COUNTERS is plain integers: all zeroes is valid.
    let mut io: IO_COUNTERS = unsafe { std::mem::zeroed() };
    // SAFETY: a valid process handle and an IO_COUNTERS owned here, which the
    // call only writes.
    let ok = unsafe { GetProcessIoCounters(p.handle, &mut io) };
    (ok != 0).then_some(io.WriteTransferCount)
}

/// Whether process `pid` is running (not ended, whoever still holds it).
pub fn alive(pid: u32) -> bool {
    let Some(p) = Process::open(pid) else {
        return false;
    };
    let mut code = 0u32;
    // SAFETY: a valid process handle and a u32 owned here, only written.
    let ok = unsafe { GetExitCodeProcess(p.handle, &mut code) };
    ok != 0 && code == STILL_ACTIVE as u32
}

/// Keep this process's standard handles from the processes it starts:
/// Rust's `Command` starts them inheriting every inheritable handle, so a
/// background runner started from `beebot service install` would hold the
/// caller's output pipe open (a script reading it to its end would wait
/// until the runner ends). The handles a `Command` gives its child are its
/// own copies, which this does not touch.
pub fn keep_std_handles_from_children() {
    use windows_sys::Win32::Foundation::{SetHandleInformation, HANDLE_FLAG_INHERIT};
    use windows_sys::Win32::System::Console::{
        GetStdHandle, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
    };
    for which in [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE] {
        // SAFETY: a constant in; the handle out is this process's own (or
        // null/invalid, which SetHandleInformation refuses harmlessly).
        unsafe {
            let h = GetStdHandle(which);
            if !h.is_null() {
                SetHandleInformation(h, HANDLE_FLAG_INHERIT, 0);
            }
        }
    }
}

/// Whether standard handle `which` (0 input, 1 output, 2 error) is
/// inheritable (for the tests).
pub fn std_handle_inheritable(which: u32) -> bool {
    use windows_sys::Win32::Foundation::{GetHandleInformation, HANDLE_FLAG_INHERIT};
    use windows_sys::Win32::System::Console::{
        GetStdHandle, STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
    };
    let which = [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE][which.min(2) as usize];
    let mut flags = 0u32;
    // SAFETY: a constant in; a u32 owned here, only written.
    unsafe {
        let h = GetStdHandle(which);
        !h.is_null() && GetHandleInformation(h, &mut flags) != 0 && flags & HANDLE_FLAG_INHERIT != 0
    }
}

/// Run this process at below-normal priority, so the employee's own work
/// comes first (the `Nice=10` of the Linux service).
pub fn lower_priority() -> std::io::Result<()> {
    // SAFETY: this process's pseudo-handle and a priority class constant.
    let ok = unsafe { SetPriorityClass(GetCurrentProcess(), BELOW_NORMAL_PRIORITY_CLASS) };
    if ok == 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// This process's priority class (for tests and `status`).
pub fn priority_class() -> u32 {
    // SAFETY: this process's pseudo-handle; 0 on failure.
    unsafe { windows_sys::Win32::System::Threading::GetPriorityClass(GetCurrentProcess()) }
}

/// `BELOW_NORMAL_PRIORITY_CLASS`, as [`priority_class`] reports it.
pub const BELOW_NORMAL: u32 = BELOW_NORMAL_PRIORITY_CLASS;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_cpu_time_grows_with_work() {
        let before = cpu_seconds(None).expect("cpu time");
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < 300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = cpu_seconds(None).expect("cpu time");
        assert!(after - before > 0.1, "{before} -> {after}");
        // By pid, the same process.
        let by_pid = cpu_seconds(Some(std::process::id())).expect("by pid");
        assert!(by_pid >= after, "{by_pid} < {after}");
    }

    #[test]
    fn memory_counts_what_is_touched() {
        let (rss, peak) = memory_kb(None).expect("memory");
        assert!(rss > 0 && peak >= rss, "{rss} {peak}");
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        let (_, peak2) = memory_kb(None).expect("memory");
        assert!(peak2 >= peak + 60 * 1024, "{peak} -> {peak2}");
    }

    /// Windows counts the bytes; Wine 8 answers the call but counts none.
    #[test]
    fn writes_are_counted() {
        let before = written_bytes(None).expect("io counters");
        let path = std::env::temp_dir().join(format!("beebot-win32-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 1 << 20]).expect("write");
        let after = written_bytes(None).expect("io counters");
        let _ = std::fs::remove_file(&path);
        if crate::under_wine() {
            assert!(after >= before, "{before} -> {after}");
        } else {
            assert!(after >= before + (1 << 20), "{before} -> {after}");
        }
    }

    #[test]
    fn a_process_that_ended_has_no_figures() {
        let mut child = std::process::Command::new("cmd")
            .args(["/C", "exit"])
            .spawn()
            .expect("cmd");
        let pid = child.id();
        child.wait().expect("wait");
        drop(child);
        assert!(!alive(pid), "{pid} still alive");
        assert!(alive(std::process::id()));
    }

    #[test]
    fn standard_handles_are_kept_from_children() {
        keep_std_handles_from_children();
        for which in 0..3 {
            assert!(!std_handle_inheritable(which), "handle {which}");
        }
    }

    #[test]
    fn priority_is_lowered() {
        lower_priority().expect("SetPriorityClass");
        assert_eq!(priority_class(), BELOW_NORMAL);
    }
}
