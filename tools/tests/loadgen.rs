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
    let out = Command::new(env!("CARGO_BIN_EXE_beebot-loadgen"))
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
