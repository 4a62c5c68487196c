//! Refusals, each a clear error while the server keeps serving others: a used
//! invite, a wrong certificate pin, an unknown host, a revoked host, oversized
//! and malformed frames, another protocol version, and a work unit whose
//! signature does not verify.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use beebot_client::home::Home;
use beebot_client::net::{Link, NetError, ServerId};
use beebot_shared::codec;
use beebot_shared::invite::Invite;
use beebot_shared::proto::{ErrorCode, Request, Response};
use beebot_tests::*;

fn invite(g: &Grid, uses: u32) -> String {
    last_line(&g.admin_ok(&["invite", "--uses", &uses.to_string()]))
}

fn join_ok(g: &Grid, name: &str, code: &str) -> u64 {
    // Hosts on one machine need names of their own (the default is the
    // machine's name, and an enrolled host's name is not taken twice).
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
    Home {
        config: g.home(name),
        data: g.home(name),
    }
    .identity()
    .require_enrolment()
    .expect("enrolment")
    .host_id
}

fn assert_fails_with(o: &std::process::Output, needle: &str) {
    assert!(!o.status.success(), "should have failed: {}", stdout(o));
    let err = stderr(o);
    assert!(err.contains(needle), "stderr should say `{needle}`:\n{err}");
    assert!(
        err.lines().any(|l| l.starts_with("error: ")),
        "one clear error line:\n{err}"
    );
}

fn run_once_args(g: &Grid) -> Vec<String> {
    let mut a = vec!["run".to_string(), "--once".into()];
    a.extend(g.crawl_flags());
    a
}

fn server_id(home: &Path) -> ServerId {
    let e = Home {
        config: home.to_path_buf(),
        data: home.to_path_buf(),
    }
    .identity()
    .require_enrolment()
    .expect("enrolment");
    ServerId {
        addr: e.server_addr.clone(),
        server_name: e.server_name.clone(),
        cert_sha256: e.cert_fingerprint().expect("fingerprint"),
    }
}

#[test]
fn refusals_are_clear_and_the_server_keeps_serving() {
    let g = Grid::start(31, 5);
    let a = bad_invites_are_refused(&g);
    let args = run_once_args(&g);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    an_unknown_host_is_refused(&g, a, &args);
    a_revoked_host_is_refused_and_only_it_learns_so(&g, &args);
    bad_frames_are_refused_and_the_connection_still_works(&g);
    a_tampered_unit_is_refused_and_the_round_completes(&g, &args);
}

/// A one-use invite works once, a code whose certificate pin is wrong never
/// reaches the server's TLS, and garbage is not a code; the id of the host
/// that joined.
fn bad_invites_are_refused(g: &Grid) -> u64 {
    // A one-use invite works once.
    let code = invite(g, 1);
    let a = join_ok(g, "a", &code);
    let o = g.client("b", &["join", &code]);
    assert_fails_with(&o, "invite is unknown, expired or used up");

    // A code whose certificate pin is wrong never reaches the server's TLS.
    let mut inv = Invite::from_code(&invite(g, 1)).expect("invite");
    inv.cert_sha256[0] ^= 0xff;
    let o = g.client("pin", &["join", &inv.to_code()]);
    assert_fails_with(&o, "cannot reach the server");
    assert!(!g.home("pin").join("enrolment.json").exists());

    // Garbage instead of a code.
    let o = g.client("junk", &["join", "hello"]);
    assert_fails_with(&o, "not a BeeBot invite code");
    a
}

/// An unknown host id (host `a`'s key and enrolment, another id) is refused.
fn an_unknown_host_is_refused(g: &Grid, a: u64, args: &[&str]) {
    let ghost = g.home("ghost");
    std::fs::create_dir_all(&ghost).expect("mkdir");
    for f in ["host.key", "enrolment.json"] {
        std::fs::copy(g.home("a").join(f), ghost.join(f)).expect("copy");
    }
    let e = std::fs::read_to_string(ghost.join("enrolment.json")).expect("read");
    let e = e.replace(&format!("\"host_id\": {a}"), "\"host_id\": 999999");
    std::fs::write(ghost.join("enrolment.json"), e).expect("write");
    let o = g.client("ghost", args);
    assert_fails_with(&o, "unknown host 999999");
}

/// A revoked host is told so; another key claiming its id hears what an
/// unknown id hears, so ids cannot be enumerated.
fn a_revoked_host_is_refused_and_only_it_learns_so(g: &Grid, args: &[&str]) {
    let r = join_ok(g, "r", &invite(g, 1));
    g.admin_ok(&["hosts", "revoke", &r.to_string()]);
    let o = g.client("r", args);
    assert_fails_with(&o, "revoked");
    // Only the host itself learns that: another key claiming its id hears
    // what an unknown id hears, so ids cannot be enumerated.
    let impostor = g.home("impostor");
    std::fs::create_dir_all(&impostor).expect("mkdir");
    std::fs::copy(g.home("a").join("host.key"), impostor.join("host.key")).expect("copy");
    std::fs::copy(
        g.home("r").join("enrolment.json"),
        impostor.join("enrolment.json"),
    )
    .expect("copy");
    let o = g.client("impostor", args);
    assert_fails_with(
        &o,
        &format!("unknown host {r}, or the host proof does not verify"),
    );
    assert!(stdout(&g.admin_ok(&["hosts", "list"])).contains("revoked"));
}

/// Frames: oversized, malformed, another version, unauthenticated; each
/// refused, and the same connection still works for a proper request.
fn bad_frames_are_refused_and_the_connection_still_works(g: &Grid) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let link = Link::connect(&server_id(&g.home("a")))
            .await
            .expect("connect");
        let huge = u32::MAX.to_le_bytes();
        match link.raw_request(&huge).await {
            Ok(Response::Error {
                code: ErrorCode::BadRequest,
                message,
            }) => {
                assert!(message.contains("exceeds the limit"), "{message}")
            }
            other => panic!("oversized frame: {other:?}"),
        }
        // This build's version, then a body that does not decode.
        let mut junk = 6u32.to_le_bytes().to_vec();
        junk.extend_from_slice(&codec::PROTOCOL_VERSION.to_le_bytes());
        junk.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        match link.raw_request(&junk).await {
            Ok(Response::Error {
                code: ErrorCode::BadRequest,
                ..
            }) => {}
            other => panic!("malformed frame: {other:?}"),
        }
        let mut old = codec::encode_frame(&Request::Challenge).expect("frame");
        old[4] = 0;
        old[5] = 0;
        match link.raw_request(&old).await {
            Ok(Response::Error {
                code: ErrorCode::Upgrade,
                message,
            }) => {
                assert!(message.contains("upgrade"), "{message}")
            }
            other => panic!("old version: {other:?}"),
        }
        let req = Request::RequestWork {
            want_seconds: 10,
            free_slots: 1,
            units_held: vec![],
            open_windows: None,
        };
        match link.request(&req).await {
            Err(NetError::Refused {
                code: ErrorCode::NotAuthenticated,
                ..
            }) => {}
            other => panic!("unauthenticated: {other:?}"),
        }
        // The same connection still works for a proper request.
        assert!(matches!(
            link.request(&Request::Challenge).await,
            Ok(Response::Nonce { .. })
        ));
    });
}

/// A unit whose signature does not verify is refused, and the grid goes on:
/// client a takes units, stops, one spooled unit is tampered with, and a
/// restarted client refuses it; its job comes back and the round completes.
fn a_tampered_unit_is_refused_and_the_round_completes(g: &Grid, args: &[&str]) {
    g.import_sites();
    // A politeness delay keeps the scans running long enough to catch a unit spooled.
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "20"]));
    let victim = a_unit_spooled_by_a_stopped_client(g, args);
    let mut bytes = std::fs::read(&victim).expect("read unit");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&victim, bytes).expect("tamper");
    let o = g.client("a", args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("refused a spooled unit"),
        "{}",
        stderr(&o)
    );
    assert!(victim.with_extension("bad").exists());
    g.wait_round(&round, "120s");
    assert_same_rows(&g.export_rows(&round), &g.truth_rows());
    let o = g.admin_ok(&["status", "--json"]);
    assert!(
        stdout(&o).contains("\"hosts_revoked\": 1"),
        "{}",
        stdout(&o)
    );
}

/// Run client a until it has spooled a unit, then kill it; that unit's file,
/// still there.
fn a_unit_spooled_by_a_stopped_client(g: &Grid, args: &[&str]) -> PathBuf {
    let mut child = g
        .client_cmd("a", args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let units_dir = g.home("a").join("spool").join("units");
    let start = Instant::now();
    let victim = loop {
        let found = std::fs::read_dir(&units_dir).ok().and_then(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "unit"))
        });
        if let Some(p) = found {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "client never got a unit"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(
        victim.exists(),
        "the unit was still held when the client stopped"
    );
    victim
}

#[test]
fn usage_errors_exit_2_and_bad_site_files_import_nothing() {
    let g = Grid::start(5, 2);
    let o = g.admin(&["round", "start", "--max-pages", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    let o = g.client("x", &["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));

    let path = g.dir.path().join("bad-sites.txt");
    std::fs::write(
        &path,
        "# ok\nwww.a.edu\n\nthis is not a host\nb.edu\njavascript:alert(1)\nlocalhost\n",
    )
    .expect("write");
    // Strict: a bad line imports nothing, and every bad line is named.
    let file = path.to_str().expect("path");
    let o = g.admin(&["sites", "import", "--strict", file]);
    assert_fails_with(&o, "line 4");
    for said in ["line 6", "scheme", "line 7", "localhost"] {
        assert!(stderr(&o).contains(said), "{said}: {}", stderr(&o));
    }
    assert_eq!(stdout(&g.admin_ok(&["sites", "list"])).lines().count(), 0);

    let o = g.admin(&["round", "start"]);
    assert_fails_with(&o, "target set is empty");

    // By default the good lines go in, the bad ones are named (exit 1).
    let o = g.admin(&["sites", "import", file]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("line 4") && stderr(&o).contains("line 7"),
        "{}",
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("imported 2 new site(s)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(stdout(&g.admin_ok(&["sites", "list"])).lines().count(), 2);
    // `-` reads standard input.
    let mut import = std::process::Command::new(bin("beebot-server"))
        .args(["sites", "import", "-", "--data-dir"])
        .arg(g.data_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut input = import.stdin.take().expect("stdin");
        input.write_all(b"c.edu\nhttps://d.edu/\n").expect("write");
    }
    let o = import.wait_with_output().expect("import");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("imported 2 new site(s)"),
        "{}",
        stdout(&o)
    );
    assert_eq!(stdout(&g.admin_ok(&["sites", "list"])).lines().count(), 4);
    let o = g.admin(&["round", "wait", "12345", "--timeout", "1s"]);
    assert_fails_with(&o, "unknown round 12345");

    // A wrong admin token is refused.
    std::fs::write(g.data_dir().join("admin.token"), "nope").expect("write");
    let o = g.admin(&["status"]);
    assert_fails_with(&o, "wrong admin token");
}
