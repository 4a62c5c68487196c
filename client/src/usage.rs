//! What a process uses of the machine: its CPU time, its resident memory
//! (now and at its peak) and the bytes it wrote. Read from `/proc` on Linux
//! and through `beebot-win32` on Windows (`GetProcessTimes`,
//! `K32GetProcessMemoryInfo`, `GetProcessIoCounters`). The concurrency
//! controller reads its own process; the concurrency bench reads a client's
//! by pid.
//!
//! Elsewhere (macOS) every figure is `None`: the controller there sizes by
//! the response times, pages/s, memory budget and bandwidth cap alone. The
//! `/proc` parsers are pure and tested on sample text.

use std::path::PathBuf;

/// Clock ticks per second of the CPU times in `/proc/PID/stat` (`USER_HZ`,
/// fixed at 100 by the kernel's user-space ABI on every architecture Linux
/// runs desktops on, whatever the kernel's own tick rate).
pub const CLOCK_TICKS_PER_S: f64 = 100.0;

/// Whose figures: this process, or another by pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    This,
    Pid(u32),
}

impl Process {
    #[cfg(windows)]
    fn pid(self) -> Option<u32> {
        match self {
            Process::This => None,
            Process::Pid(pid) => Some(pid),
        }
    }

    #[cfg_attr(windows, allow(dead_code))]
    fn proc_file(self, name: &str) -> PathBuf {
        match self {
            Process::This => PathBuf::from("/proc/self").join(name),
            Process::Pid(pid) => PathBuf::from(format!("/proc/{pid}")).join(name),
        }
    }
}

/// CPU time the process used so far (user and system, every thread), seconds.
pub fn cpu_seconds(p: Process) -> Option<f64> {
    #[cfg(windows)]
    {
        beebot_win32::process::cpu_seconds(p.pid())
    }
    #[cfg(not(windows))]
    {
        let stat = std::fs::read_to_string(p.proc_file("stat")).ok()?;
        cpu_ticks(&stat).map(|t| t as f64 / CLOCK_TICKS_PER_S)
    }
}

/// Resident memory now (`VmRSS`; the working set on Windows), KB.
pub fn rss_kb(p: Process) -> Option<u64> {
    #[cfg(windows)]
    {
        beebot_win32::process::memory_kb(p.pid()).map(|(now, _)| now)
    }
    #[cfg(not(windows))]
    {
        status_kb(
            &std::fs::read_to_string(p.proc_file("status")).ok()?,
            "VmRSS",
        )
    }
}

/// Peak resident memory so far (`VmHWM`; the peak working set), KB.
pub fn peak_rss_kb(p: Process) -> Option<u64> {
    #[cfg(windows)]
    {
        beebot_win32::process::memory_kb(p.pid()).map(|(_, peak)| peak)
    }
    #[cfg(not(windows))]
    {
        status_kb(
            &std::fs::read_to_string(p.proc_file("status")).ok()?,
            "VmHWM",
        )
    }
}

/// Bytes written: `(wchar, write_bytes)` of `/proc/PID/io`, what the process
/// passed to write calls and what reached the block layer (0 on tmpfs). On
/// Windows both are the process's write transfer count.
pub fn written_bytes(p: Process) -> Option<(u64, u64)> {
    #[cfg(windows)]
    {
        beebot_win32::process::written_bytes(p.pid()).map(|b| (b, b))
    }
    #[cfg(not(windows))]
    {
        let io = std::fs::read_to_string(p.proc_file("io")).ok()?;
        Some((io_field(&io, "wchar")?, io_field(&io, "write_bytes")?))
    }
}

/// utime + stime of a `/proc/PID/stat` line, in clock ticks. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses, so
/// the fields are counted after its last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `Key:   1234 kB` line of `/proc/PID/status`, KB.
pub fn status_kb(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.split(':').next() == Some(key))?;
    line.split(':')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A `key: 1234` line of `/proc/PID/io`.
#[cfg_attr(windows, allow(dead_code))]
fn io_field(io: &str, key: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_the_last_parenthesis() {
        let stat = "4242 (beebot (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    123 45 0 0 30 10 9 0 100 2000000 500 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(168));
        assert_eq!(cpu_ticks("4242 (cut short) S 1 2"), None);
        assert_eq!(cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn status_and_io_fields_are_read_by_name() {
        let status = "Name:\tbeebot\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kb(status, "VmRSS"), Some(10240));
        assert_eq!(status_kb(status, "VmHWM"), Some(20480));
        assert_eq!(status_kb(status, "VmSwap"), None);
        let io = "rchar: 10\nwchar: 2048\nsyscr: 1\nwrite_bytes: 4096\ncancelled_write_bytes: 0\n";
        assert_eq!(io_field(io, "wchar"), Some(2048));
        assert_eq!(io_field(io, "write_bytes"), Some(4096));
    }

    #[test]
    fn this_process_is_measured_on_linux_and_windows() {
        if cfg!(any(target_os = "linux", windows)) {
            let cpu0 = cpu_seconds(Process::This).expect("cpu time");
            let start = std::time::Instant::now();
            let mut x = 1u64;
            while start.elapsed() < std::time::Duration::from_millis(200) {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
            std::hint::black_box(x);
            let cpu1 = cpu_seconds(Process::This).expect("cpu time");
            assert!(cpu1 - cpu0 > 0.05, "{cpu0} -> {cpu1}");
            let rss = rss_kb(Process::This);
            assert!(rss.is_some_and(|k| k > 0));
            assert!(peak_rss_kb(Process::This) >= rss);
            let pid = Process::Pid(std::process::id());
            assert!(cpu_seconds(pid).is_some_and(|c| c >= cpu1));
            assert!(written_bytes(pid).is_some());
        }
    }
}
