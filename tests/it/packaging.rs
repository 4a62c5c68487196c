//! The server's packaging, checked without installing anything: the systemd
//! unit (`deploy/beebot-server.service`, shipped by the Debian package and
//! used by hand) passes `systemd-analyze verify` and keeps its exposure
//! score low; the Containerfile runs the package's binary path as a
//! non-root user with the data dir as a volume and QUIC on UDP. The .deb
//! itself is built and checked by `deploy/check-deb.sh`, the image by
//! `deploy/check-container.sh` (both CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use beebot_tests::{bin, tool_missing};

/// The highest `systemd-analyze security` exposure the unit may have
/// (0 = locked down, 10 = unprotected; it measured 1.2 when written).
const MAX_EXPOSURE: f64 = 2.0;
/// The data dir every install uses.
const DATA_DIR: &str = "/var/lib/beebot-server";
/// Where the package installs the binary (`usr/bin/` asset in
/// `server/Cargo.toml`).
const BINARY: &str = "/usr/bin/beebot-server";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The unit's `Key=value` lines (comments and sections left out).
fn settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn has(unit: &str, key: &str, value: &str) -> bool {
    settings(unit).iter().any(|(k, v)| k == key && v == value)
}

#[test]
fn server_unit_runs_the_packaged_binary_hardened_once_initialised() {
    let unit = read("deploy/beebot-server.service");
    for (key, value) in [
        ("ExecStart", &*format!("{BINARY} serve")),
        ("User", "beebot-server"),
        ("Environment", &*format!("BEEBOT_SERVER_DIR={DATA_DIR}")),
        ("ConditionPathExists", &*format!("{DATA_DIR}/config.toml")),
        ("StateDirectory", "beebot-server"),
        ("ReadWritePaths", DATA_DIR),
        ("NoNewPrivileges", "true"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "true"),
        ("PrivateTmp", "true"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("SystemCallFilter", "@system-service"),
        ("LimitNOFILE", "8192"),
        ("WantedBy", "multi-user.target"),
    ] {
        assert!(has(&unit, key, value), "the unit lacks {key}={value}");
    }
}

/// The unit with its binary at `exe` (verify checks the file exists).
fn unit_at(dir: &Path, exe: &Path) -> PathBuf {
    let unit = read("deploy/beebot-server.service").replace(
        &format!("ExecStart={BINARY} "),
        &format!("ExecStart={} ", exe.display()),
    );
    let path = dir.join("beebot-server.service");
    std::fs::write(&path, unit).expect("write unit");
    path
}

#[test]
fn server_unit_verifies_and_its_exposure_is_low() {
    let found = Command::new("systemd-analyze").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        return tool_missing("systemd-analyze", "verify the server's systemd unit");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = unit_at(dir.path(), &bin("beebot-server"));
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze verify");
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("beebot-server.service"))
        .collect();
    assert!(ours.is_empty(), "systemd-analyze verify: {err}");

    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .expect("systemd-analyze security");
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for beebot-server.service:"))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure score in: {text}"));
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{text}"
    );
}

/// The instruction lines of the Containerfile starting with `word`.
fn instructions<'a>(file: &'a str, word: &str) -> Vec<&'a str> {
    file.lines()
        .filter_map(|l| l.strip_prefix(word)?.strip_prefix(' '))
        .map(str::trim)
        .collect()
}

#[test]
fn containerfile_runs_the_package_binary_as_non_root_with_a_data_volume() {
    let file = read("deploy/Containerfile");
    // One stage on a Debian base given as BASE (made offline by debootstrap
    // in deploy/check-container.sh), copying the binary built on the host:
    // nothing is compiled in the image.
    assert_eq!(instructions(&file, "FROM"), ["${BASE}"]);
    let base = instructions(&file, "ARG");
    assert_eq!(base, ["BASE=localhost/beebot-base:bookworm"], "{base:?}");
    let run = instructions(&file, "RUN");
    assert!(run.iter().all(|r| !r.contains("cargo")), "{run:?}");

    let user = instructions(&file, "USER");
    assert_eq!(user, ["beebot-server"], "runs as the non-root user");
    assert_eq!(instructions(&file, "VOLUME"), [DATA_DIR]);
    assert!(instructions(&file, "ENV").contains(&&*format!("BEEBOT_SERVER_DIR={DATA_DIR}")));
    assert_eq!(
        instructions(&file, "ENTRYPOINT"),
        [format!("[\"{BINARY}\"]")]
    );
    assert_eq!(instructions(&file, "CMD"), ["[\"serve\"]"]);
    assert!(
        instructions(&file, "COPY")
            .iter()
            .any(|c| c.ends_with(&format!("target/release/beebot-server {BINARY}"))),
        "the binary is copied to {BINARY}"
    );
    // The build context leaves target/ out but for that binary.
    let ignore = read(".dockerignore");
    let ignored: Vec<&str> = ignore.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(ignored.contains(&"target/"), "{ignored:?}");
    assert!(
        ignored.contains(&"!target/release/beebot-server"),
        "{ignored:?}"
    );

    // QUIC's port is the example config's (and init's default) listen port, on UDP.
    let example = read("deploy/server.example.toml");
    let listen = example
        .lines()
        .find_map(|l| l.strip_prefix("listen = "))
        .expect("listen in the example config");
    let port = listen.trim_matches('"').rsplit(':').next().expect("port");
    let expose = instructions(&file, "EXPOSE");
    assert!(expose.contains(&&*format!("{port}/udp")), "{expose:?}");
    assert!(
        expose.contains(&"4481/tcp"),
        "the reference site: {expose:?}"
    );
}

#[test]
fn the_package_installs_the_binary_where_the_unit_and_container_run_it() {
    let manifest = read("server/Cargo.toml");
    let (dir, name) = BINARY.rsplit_once('/').expect("a path");
    let dir = dir.trim_start_matches('/');
    let asset = format!("[\"target/release/{name}\", \"{dir}/\", \"755\"]");
    assert!(manifest.contains(&asset), "the binary asset: {asset}");
    assert!(manifest.contains("unit-scripts = \"../deploy/\""));
    assert!(manifest.contains("maintainer-scripts = \"../deploy/debian/\""));
    for script in ["postinst", "postrm"] {
        let path = repo().join("deploy/debian").join(script);
        let text = std::fs::read_to_string(&path).expect("maintainer script");
        assert!(text.contains("#DEBHELPER#"), "{script}: no #DEBHELPER#");
        assert!(text.contains(DATA_DIR), "{script}: not about {DATA_DIR}");
        let out = Command::new("sh")
            .arg("-n")
            .arg(&path)
            .output()
            .expect("sh -n");
        assert!(out.status.success(), "{script} is not valid sh");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
            assert_eq!(mode & 0o111, 0o111, "{script} is not executable");
        }
    }
}
