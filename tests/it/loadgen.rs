//! The load generator end to end, small: its hosts against the null
//! server (`--null-server`), both real processes over QUIC on loopback.

use std::process::Command;

/// The number on the line of the table that starts with `label`.
fn figure(out: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no line {label:?} in:\n{out}"));
    line[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

// The CPU figures are read from /proc.
#[cfg(target_os = "linux")]
#[test]
fn the_null_server_answers_every_request_of_a_small_load() {
    let out = Command::new(beebot_tests::bin("beebot-loadgen"))
        .args([
            "--null-server",
            "--hosts",
            "20",
            "--rate",
            "100",
            "--upload-rate",
            "40",
            "--warmup",
            "1",
            "--seconds",
            "3",
        ])
        .output()
        .expect("run the load generator");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("a null server"), "{text}");
    assert_eq!(figure(&text, "errors"), 0.0, "{text}");
    // Open loop: every request due in the 3 s measured was sent and answered.
    let work = figure(&text, "work, all");
    assert!(
        (250.0..=350.0).contains(&work),
        "work requests {work}:\n{text}"
    );
    let uploads = figure(&text, "uploads accepted");
    assert!(uploads >= 60.0, "uploads accepted {uploads}:\n{text}");
    assert_eq!(figure(&text, "uploads answered otherwise"), 0.0);
    assert!(figure(&text, "records per upload (mean)") >= 1.0);
    assert_eq!(figure(&text, "hosts held connected"), 20.0);
    let cpu = figure(&text, "server CPU, cores");
    assert!(
        cpu.is_finite() && (0.0..2.0).contains(&cpu),
        "null server CPU {cpu}"
    );
}

/// The processes whose parent is `pid`, with their command lines.
#[cfg(target_os = "linux")]
fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, so after ')'.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let ppid = after.split_whitespace().nth(1).and_then(|w| w.parse().ok());
        if ppid == Some(pid) {
            let cmd = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            out.push((child, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// Whether `pid` still runs (a zombie waiting for its reaper does not).
#[cfg(target_os = "linux")]
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        after.split_whitespace().next() != Some("Z")
    })
}

#[cfg(target_os = "linux")]
#[test]
fn the_null_server_goes_when_the_load_generator_is_killed() {
    use std::time::{Duration, Instant};
    let mut lg = Command::new(beebot_tests::bin("beebot-loadgen"))
        .args(["--null-server", "--hosts", "2", "--rate", "4"])
        .args(["--upload-rate", "1", "--warmup", "0", "--seconds", "600"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run the load generator");
    let started = Instant::now();
    let null = loop {
        let found = children_of(lg.id())
            .into_iter()
            .find(|(_, cmd)| cmd.contains("--serve-null"));
        if let Some((pid, _)) = found {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no null server started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(running(null));
    // SIGKILL: the load generator cannot stop it on its way out.
    lg.kill().expect("kill");
    lg.wait().expect("reaped");
    let killed = Instant::now();
    while running(null) {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the null server outlived the load generator"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
