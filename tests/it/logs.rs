//! `--log-format`: the real binaries' log lines on a pipe. In `json` every
//! line is one JSON object with `timestamp`, `level` and `fields.message`
//! (the client's log file too); in `text` no line carries an ANSI escape,
//! since a pipe is not a terminal.

use std::process::{Command, Stdio};
use std::time::Duration;

use beebot_tests::{bin, last_line, run, stderr, wait_for, Grid, LOOPBACK_INIT};

/// How long a command here may take.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The synthetic web's seed and size for the client's rounds.
const SEED: u64 = 12;
const SITES: usize = 1;

/// Every line of `text` is a JSON log object; there is at least one.
fn assert_json_lines(what: &str, text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    assert!(!lines.is_empty(), "{what}: no log lines");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{what}: a line is not JSON ({e}): {line:?}"));
        assert!(v["timestamp"].is_string(), "{what}: no timestamp: {line}");
        let level = v["level"].as_str().unwrap_or_default();
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{what}: level {level:?}: {line}"
        );
        assert!(
            v["fields"]["message"].is_string(),
            "{what}: no fields.message: {line}"
        );
    }
}

/// Text lines, none with an escape byte; there is at least one.
fn assert_plain_text(what: &str, text: &str) {
    assert!(!text.trim().is_empty(), "{what}: no log lines");
    assert!(!text.contains('\x1b'), "{what}: ANSI escape in {text:?}");
    assert!(
        text.lines().all(|l| !l.starts_with('{')),
        "{what}: JSON in text mode: {text}"
    );
}

/// `beebot-server serve` with `format` until it has said it serves, then
/// SIGTERM: its stderr.
fn serve_log(format: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let o = run(
        Command::new(bin("beebot-server"))
            .args(LOOPBACK_INIT)
            .arg("--data-dir")
            .arg(&data),
        TIMEOUT,
    );
    assert!(o.status.success(), "init: {}", stderr(&o));
    let child = Command::new(bin("beebot-server"))
        .args(["serve", "--log-format", format, "--data-dir"])
        .arg(&data)
        .env_remove("RUST_LOG")
        .env_remove("BEEBOT_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let runtime = data.join("serve.json");
    wait_for("serve.json", TIMEOUT, || runtime.exists());
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(term.success(), "kill -TERM failed");
    let out = child.wait_with_output().expect("serve output");
    assert!(out.status.success(), "serve exited {:?}", out.status);
    String::from_utf8(out.stderr).expect("utf-8 log")
}

#[test]
fn server_json_log_is_one_object_per_line() {
    let log = serve_log("json");
    assert_json_lines("serve --log-format json", &log);
    assert!(log.contains("\"serving\""), "no serving line: {log}");
    assert!(log.contains("shutting down"), "no shutdown line: {log}");
}

#[test]
fn server_text_log_on_a_pipe_has_no_colours() {
    let log = serve_log("text");
    assert_plain_text("serve --log-format text", &log);
    assert!(log.contains("INFO") && log.contains("serving"), "{log}");
}

#[test]
fn an_unknown_log_format_is_refused_by_name() {
    let o = run(
        Command::new(bin("beebot-server")).args(["--log-format", "xml", "status"]),
        TIMEOUT,
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("xml") && err.contains("json"), "{err}");
}

/// Start a one-site round and let client `name` crawl it with `run --once`
/// and `format`: its stderr.
fn client_run_log(g: &Grid, name: &str, format: &str) -> String {
    let o = g.admin_ok(&["round", "start", "--delay-ms", "0", "--max-pages", "20"]);
    let round = last_line(&o);
    let mut args = vec!["run", "--once", "--slots", "1", "--log-format", format];
    let flags = g.crawl_flags();
    args.extend(flags.iter().map(String::as_str));
    let mut cmd = g.client_cmd(name, &args);
    cmd.env_remove("RUST_LOG").env_remove("BEEBOT_LOG_FORMAT");
    let o = run(&mut cmd, TIMEOUT);
    assert!(o.status.success(), "run --once: {}", stderr(&o));
    g.wait_round(&round, "120s");
    stderr(&o)
}

#[test]
fn client_logs_json_to_stderr_and_its_file_and_text_without_colours() {
    let g = Grid::start(SEED, SITES);
    g.import_sites();
    let code = g.invite(1);
    g.join("a", &code);
    let file = g.home("a").join("logs").join("beebot.log");

    let json = client_run_log(&g, "a", "json");
    assert_json_lines("beebot run --log-format json (stderr)", &json);
    let written = std::fs::read_to_string(&file).expect("client log file");
    assert_json_lines("beebot run --log-format json (file)", &written);

    let before = written.len();
    let text = client_run_log(&g, "a", "text");
    assert_plain_text("beebot run --log-format text (stderr)", &text);
    let written = std::fs::read_to_string(&file).expect("client log file");
    assert_plain_text("beebot run --log-format text (file)", &written[before..]);
}
