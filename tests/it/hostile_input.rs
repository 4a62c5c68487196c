//! Hostile input against the real server (and a hostile server against the real
//! client): each gets a clear error or refusal, and the server keeps serving
//! the others. Complements `refusals.rs` (used invites, wrong pins, unknown and
//! revoked hosts, oversized and malformed frames, old versions, tampered spool).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use beebot_client::net::{Link, NetError};
use beebot_server::net::{MAX_CONNECTIONS_PER_HOST, MAX_UNAUTHENTICATED_PER_ADDRESS};
use beebot_shared::codec;
use beebot_shared::invite::Invite;
use beebot_shared::limits::MAX_REPORTS_PER_REQUEST;
use beebot_shared::proto::{ErrorCode, HostInfo, Request, Response, ScanAnswer, ScanReport};
use beebot_shared::sign::{self, WorkUnit};
use beebot_tests::hostile::*;
use beebot_tests::*;
use std::sync::Arc;

/// Longest a test waits for the server to close connections by itself.
const CLOSE_WAIT: Duration = Duration::from_secs(30);

/// Uploads in flight per connection and unit in the record-bomb flood.
const STREAMS: usize = 8;

/// Uploads each stream of the record-bomb flood makes, one after another.
const REPEATS: usize = 3;

fn invite(g: &Grid, uses: u32, expires: &str) -> String {
    // An expired invite is made by one that lives a second (--force).
    last_line(&g.admin_ok(&[
        "invite",
        "--uses",
        &uses.to_string(),
        "--expires",
        expires,
        "--force",
    ]))
}

async fn hello(j: &Joined) -> Link {
    j.hello().await.expect("hello")
}

async fn nonce(link: &Link) -> [u8; 32] {
    match link.request(&Request::Challenge).await {
        Ok(Response::Nonce { nonce }) => nonce,
        other => panic!("challenge: {other:?}"),
    }
}

fn refused(r: Result<Response, NetError>, code: ErrorCode, needle: &str) {
    match r {
        Err(NetError::Refused { code: c, message }) if c == code => assert!(
            message.contains(needle),
            "{code:?} should say `{needle}`: {message}"
        ),
        other => panic!("expected {code:?} ({needle}), got {other:?}"),
    }
}

fn rejected(r: Result<Response, NetError>, needle: &str) {
    match r {
        Ok(Response::Rejected { reason }) => {
            assert!(
                reason.contains(needle),
                "rejection should say `{needle}`: {reason}"
            )
        }
        other => panic!("expected Rejected ({needle}), got {other:?}"),
    }
}

/// Ask for one unit of the open round.
async fn take_unit(link: &Link, j: &Joined) -> WorkUnit {
    take_another_unit(link, j, vec![]).await
}

/// Ask for one more unit of the open round, still holding `held`.
async fn take_another_unit(link: &Link, j: &Joined, held: Vec<u64>) -> WorkUnit {
    match link
        .request(&Request::RequestWork {
            want_seconds: 60,
            free_slots: 1,
            units_held: held,
            open_windows: None,
        })
        .await
    {
        Ok(Response::Work { units, .. }) => {
            let signed = units.first().expect("a unit");
            sign::verify_unit(&j.project_key, signed).expect("signed unit")
        }
        other => panic!("work: {other:?}"),
    }
}

#[test]
fn hostile_requests_get_clear_refusals_and_the_server_keeps_serving() {
    let mut g = Grid::start(53, 8);
    let code = invite(&g, 2, "1h");
    let a = join_raw(&g, "a", &code);
    let b = join_raw(&g, "b", &code);
    g.import_sites();
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let raw = Link::connect(&a.server).await.expect("connect");
        bad_frames_are_refused(&raw).await;
        messages_out_of_order_are_refused(&raw, &a).await;
        bad_proofs_are_refused(&raw, &a).await;
        expired_and_forged_invites_are_refused(&g, &raw, &a).await;
        raw.close();
        lying_uploads_are_rejected_and_an_honest_one_accepted(&a, &b).await;
        progress_reports_together_are_answered_each_and_a_bad_list_refused(&a, &b).await;
        a_host_keeps_its_newest_connections(&a).await;
        a_flood_is_refused_at_the_door_while_others_are_served(&a, &b).await;
    });
    let mut server = g.server.take().expect("server");
    assert!(
        server.try_wait().expect("status").is_none(),
        "the server is still running:\n{}",
        g.server_log()
    );
    let _ = server.kill();
    let _ = server.wait();
    no_secret_reaches_the_log(&g, &code);
}

/// Garbage, truncated and (before authentication) large frames get errors.
async fn bad_frames_are_refused(raw: &Link) {
    // Garbage bytes: a length that fits, a body that is nothing.
    let mut garbage = 40u32.to_le_bytes().to_vec();
    garbage.extend((0..40u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    match raw.raw_request(&garbage).await {
        Ok(Response::Error {
            code: ErrorCode::BadRequest | ErrorCode::Upgrade,
            ..
        }) => {}
        other => panic!("garbage: {other:?}"),
    }
    // Truncated: the header promises 100 bytes, the stream ends after 10.
    let mut cut = 100u32.to_le_bytes().to_vec();
    cut.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    match raw.raw_request(&cut).await {
        Ok(Response::Error {
            code: ErrorCode::BadRequest,
            message,
        }) => assert!(message.contains("truncated"), "{message}"),
        other => panic!("truncated: {other:?}"),
    }
    // Before authentication a frame may not be large (an Enrol is small).
    let big = (64u32 * 1024).to_le_bytes();
    match raw.raw_request(&big).await {
        Ok(Response::Error {
            code: ErrorCode::BadRequest,
            message,
        }) => assert!(message.contains("exceeds the limit"), "{message}"),
        other => panic!("large unauthenticated frame: {other:?}"),
    }
}

/// Hello before a nonce and work before Hello are refused.
async fn messages_out_of_order_are_refused(raw: &Link, a: &Joined) {
    // Hello without asking for a nonce first.
    refused(
        raw.request(&Request::Hello {
            host_id: a.id,
            proof: vec![0; 64],
        })
        .await,
        ErrorCode::NotAuthenticated,
        "challenge",
    );
    // Work before Hello.
    refused(
        raw.request(&Request::Progress {
            unit_id: 1,
            pages: 1,
            links: 1,
        })
        .await,
        ErrorCode::NotAuthenticated,
        "Hello",
    );
}

/// Replayed, forged and misdirected proofs are refused.
async fn bad_proofs_are_refused(raw: &Link, a: &Joined) {
    // A proof made on one connection, replayed on another.
    let first = Link::connect(&a.server).await.expect("connect");
    let n1 = nonce(&first).await;
    let proof = sign::make_proof(&a.key, &n1, &a.server.cert_sha256);
    assert!(matches!(
        first
            .request(&Request::Hello {
                host_id: a.id,
                proof: proof.clone()
            })
            .await,
        Ok(Response::Welcome { .. })
    ));
    let _ = nonce(raw).await;
    refused(
        raw.request(&Request::Hello {
            host_id: a.id,
            proof: proof.clone(),
        })
        .await,
        ErrorCode::UnknownHost,
        "does not verify",
    );
    // Replayed on its own connection: the nonce is spent.
    refused(
        first
            .request(&Request::Hello {
                host_id: a.id,
                proof,
            })
            .await,
        ErrorCode::NotAuthenticated,
        "challenge",
    );
    // Forged: signed with another key, or not a signature at all.
    let n = nonce(raw).await;
    let other = sign::generate_key();
    refused(
        raw.request(&Request::Hello {
            host_id: a.id,
            proof: sign::make_proof(&other, &n, &a.server.cert_sha256),
        })
        .await,
        ErrorCode::UnknownHost,
        "does not verify",
    );
    let _ = nonce(raw).await;
    refused(
        raw.request(&Request::Hello {
            host_id: a.id,
            proof: vec![1, 2, 3],
        })
        .await,
        ErrorCode::UnknownHost,
        "does not verify",
    );
    // A proof for another server's certificate.
    let n = nonce(raw).await;
    refused(
        raw.request(&Request::Hello {
            host_id: a.id,
            proof: sign::make_proof(&a.key, &n, &[7; 32]),
        })
        .await,
        ErrorCode::UnknownHost,
        "does not verify",
    );
    first.close();
}

/// An expired invite and a forged token cannot enrol.
async fn expired_and_forged_invites_are_refused(g: &Grid, raw: &Link, a: &Joined) {
    let expired = Invite::from_code(&invite(g, 5, "1s")).expect("invite");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let info = HostInfo {
        name: "late".into(),
        ..HostInfo::default()
    };
    match raw
        .enrol(expired.token.clone(), &sign::generate_key(), info.clone())
        .await
    {
        Err(NetError::Refused {
            code: ErrorCode::BadInvite,
            message,
        }) => assert!(message.contains("expired"), "{message}"),
        other => panic!("expired invite: {other:?}"),
    }
    let forged = Link::connect(&a.server).await.expect("connect");
    match forged.enrol(vec![9; 24], &sign::generate_key(), info).await {
        Err(NetError::Refused {
            code: ErrorCode::BadInvite,
            ..
        }) => {}
        other => panic!("forged token: {other:?}"),
    }
    forged.close();
}

/// Uploads for another host's or an unknown unit, bombs, bad checksums and
/// lying records, headers or summaries are rejected; an honest one is not.
async fn lying_uploads_are_rejected_and_an_honest_one_accepted(a: &Joined, b: &Joined) {
    let la = hello(a).await;
    let lb = hello(b).await;
    let u = take_unit(&la, a).await;
    rejected(
        lb.request(&upload(&u, link_file(&u, &u.site, &records_of(&u.site)), 1))
            .await,
        "was not issued to host",
    );
    rejected(la.request(&upload_of_unknown_unit()).await, "unknown unit");
    // A decompression bomb: a few KB that expand past the decompressed cap.
    let blocks = beebot_shared::limits::MAX_LINK_FILE_DECOMPRESSED_BYTES / (128 * 1024) + 8;
    let bomb = zstd_bomb(blocks);
    assert!(bomb.len() < 64 * 1024);
    rejected(la.request(&upload(&u, bomb, 0)).await, "link file refused");
    // A bad checksum (the last four bytes of the frame).
    let u = take_unit(&la, a).await;
    let mut file = link_file(&u, &u.site, &records_of(&u.site));
    let n = file.len();
    file[n - 1] ^= 0x5a;
    rejected(la.request(&upload(&u, file, 1)).await, "link file refused");
    // Records that lie about the site: sources on another site.
    let u = take_unit(&la, a).await;
    let liar = records_of("someone-else.test");
    rejected(
        la.request(&upload(&u, link_file(&u, &u.site, &liar), 1))
            .await,
        "is not on site",
    );
    // A header that names another site.
    let u = take_unit(&la, a).await;
    rejected(
        la.request(&upload(
            &u,
            link_file(&u, "other.test", &records_of(&u.site)),
            1,
        ))
        .await,
        "does not match",
    );
    // A summary that lies about the count.
    let u = take_unit(&la, a).await;
    rejected(
        la.request(&upload(&u, link_file(&u, &u.site, &records_of(&u.site)), 5))
            .await,
        "summary says",
    );
    // After all that, an honest upload is accepted, and repeating it is
    // answered `Duplicate` (idempotent by unit id).
    let u = take_unit(&la, a).await;
    let honest = upload(&u, link_file(&u, &u.site, &records_of(&u.site)), 1);
    assert!(matches!(la.request(&honest).await, Ok(Response::Accepted)));
    assert!(matches!(la.request(&honest).await, Ok(Response::Duplicate)));
    la.close();
    lb.close();
}

/// `ScanProgressAll`: each report is answered as it would be alone, in
/// order (a unit of another host or none at all is aborted, the others go
/// on); a list longer than its limit or naming a unit twice is refused.
async fn progress_reports_together_are_answered_each_and_a_bad_list_refused(
    a: &Joined,
    b: &Joined,
) {
    let lb = hello(b).await;
    let u1 = take_unit(&lb, b).await;
    let u2 = take_another_unit(&lb, b, vec![u1.unit_id]).await;
    let report = |unit_id| ScanReport {
        unit_id,
        pages: 1,
        links: 3,
        bytes: 2_000,
    };
    let all = |ids: &[u64]| Request::ScanProgressAll {
        reports: ids.iter().map(|&id| report(id)).collect(),
    };
    match lb.request(&all(&[u1.unit_id, 999_999, u2.unit_id])).await {
        Ok(Response::Progressed { answers }) => {
            assert_eq!(answers.len(), 3, "{answers:?}");
            for i in [0, 2] {
                assert!(
                    matches!(answers[i], ScanAnswer::Continue | ScanAnswer::Extend { .. }),
                    "{answers:?}"
                );
            }
            assert_eq!(
                answers[1],
                ScanAnswer::Abort {
                    reason: "unknown unit".into()
                }
            );
        }
        other => panic!("reports together: {other:?}"),
    }
    // Another host's units are not this one's to report.
    let la = hello(a).await;
    match la.request(&all(&[u1.unit_id])).await {
        Ok(Response::Progressed { answers }) => assert!(
            matches!(&answers[..], [ScanAnswer::Abort { reason }] if reason.contains("another host")),
            "{answers:?}"
        ),
        other => panic!("another host's report: {other:?}"),
    }
    refused(
        lb.request(&all(&[u1.unit_id, u2.unit_id, u1.unit_id]))
            .await,
        ErrorCode::BadRequest,
        "twice",
    );
    let many: Vec<u64> = (1..=MAX_REPORTS_PER_REQUEST as u64 + 1).collect();
    refused(
        lb.request(&all(&many)).await,
        ErrorCode::BadRequest,
        &format!("at most {MAX_REPORTS_PER_REQUEST}"),
    );
    // The refusals changed nothing: the scans still go on.
    match lb.request(&all(&[u1.unit_id, u2.unit_id])).await {
        Ok(Response::Progressed { answers }) => assert!(
            answers
                .iter()
                .all(|a| matches!(a, ScanAnswer::Continue | ScanAnswer::Extend { .. })),
            "{answers:?}"
        ),
        other => panic!("reports after refusals: {other:?}"),
    }
    la.close();
    lb.close();
}

/// One host, more connections than allowed: the oldest are closed.
async fn a_host_keeps_its_newest_connections(a: &Joined) {
    let mut mine = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_HOST + 1 {
        mine.push(hello(a).await);
    }
    let start = Instant::now();
    while mine[0].is_open() {
        assert!(start.elapsed() < CLOSE_WAIT, "oldest connection kept");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(mine[1..].iter().all(Link::is_open));
    for l in &mine {
        l.close();
    }
}

/// A flood of unauthenticated connections from one address is refused and
/// closed while a host on another address is served; then the address may
/// connect again.
async fn a_flood_is_refused_at_the_door_while_others_are_served(a: &Joined, b: &Joined) {
    // A flood from one address: beyond the limit of unauthenticated
    // connections the server refuses at the door...
    let mut flood = Vec::new();
    let mut refused_at_door = 0;
    for _ in 0..MAX_UNAUTHENTICATED_PER_ADDRESS + 6 {
        match Link::connect(&a.server).await {
            Ok(l) => flood.push(l),
            Err(_) => refused_at_door += 1,
        }
    }
    assert!(
        flood.len() <= MAX_UNAUTHENTICATED_PER_ADDRESS as usize,
        "{} unauthenticated connections held",
        flood.len()
    );
    assert!(refused_at_door >= 6, "only {refused_at_door} refused");
    // ...while a host on another address is served.
    let elsewhere: SocketAddr = "127.0.0.2:0".parse().expect("addr");
    let lb = Link::connect_from(&b.server, Some(elsewhere))
        .await
        .expect("connect from another address");
    lb.hello(b.id, &b.key).await.expect("hello while flooded");
    assert!(matches!(
        lb.request(&Request::RequestWork {
            want_seconds: 10,
            free_slots: 0,
            units_held: vec![],
            open_windows: None,
        })
        .await,
        Ok(Response::Work { .. })
    ));
    // The flood's connections never authenticate: the server closes them.
    let start = Instant::now();
    while flood.iter().any(Link::is_open) {
        assert!(
            start.elapsed() < CLOSE_WAIT,
            "unauthenticated connections were not closed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And the flooding address may connect again.
    let again = hello(a).await;
    again.close();
    lb.close();
}

/// Secrets never reach the log.
fn no_secret_reaches_the_log(g: &Grid, code: &str) {
    let log = g.server_log();
    let admin_token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
    assert!(!log.contains(admin_token.trim()), "admin token logged");
    let project_key = std::fs::read_to_string(g.data_dir().join("project.key")).expect("key");
    assert!(!log.contains(project_key.trim()), "project key logged");
    let inv = Invite::from_code(code).expect("invite");
    assert!(
        !log.contains(&hex::encode(&inv.token)),
        "invite token logged"
    );
}

#[cfg(unix)]
#[test]
fn secrets_readable_by_others_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let mut g = Grid::start(67, 1);
    g.kill_server();
    for f in ["project.key", "admin.token", "key.pem"] {
        let path = g.data_dir().join(f);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f} is written 0600");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let o = g.admin(&["serve"]);
        assert!(!o.status.success(), "served with {f} world-readable");
        let err = stderr(&o);
        assert!(err.contains(f) && err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    g.start_server();
}

/// Copy the named files of a fresh data dir over the grid's, and restart.
fn replace_server_files(g: &mut Grid, files: &[&str]) {
    let other = g.dir.path().join("other-server");
    let o = beebot_tests::run(
        std::process::Command::new(bin("beebot-server"))
            .args(beebot_tests::LOOPBACK_INIT)
            .arg("--data-dir")
            .arg(&other),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "init: {}", stderr(&o));
    g.kill_server();
    for f in files {
        std::fs::copy(other.join(f), g.data_dir().join(f)).expect("copy");
    }
    g.start_server();
}

#[test]
fn a_server_signing_with_another_key_gets_nothing_crawled() {
    let mut g = Grid::start(59, 3);
    let code = invite(&g, 1, "1h");
    join_raw(&g, "a", &code);
    g.import_sites();
    // The server now signs units with a project key the client never joined.
    replace_server_files(&mut g, &["project.key"]);
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
    let mut args = vec!["run".to_string(), "--once".into()];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let log = g.dir.path().join("client.log");
    let mut child = g
        .client_cmd("a", &args)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn");
    // Wait for three refused answers: the client backs off between them.
    let start = Instant::now();
    while std::fs::read_to_string(&log)
        .unwrap_or_default()
        .matches("backoff bound")
        .count()
        < 3
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "client never refused three times: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("bad signature"), "{text}");
    assert_eq!(g.web_server.requests(), 0, "no target was fetched: {text}");
    let units = g.home("a").join("spool").join("units");
    let spooled = std::fs::read_dir(&units).map(|d| d.count()).unwrap_or(0);
    assert_eq!(spooled, 0, "nothing unsigned was spooled");
    // Refused units back off, longer each time: the bounds of the waits grow.
    let bounds: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split("backoff bound ").nth(1))
        .filter_map(|r| {
            r.trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        })
        .collect();
    assert!(bounds.len() >= 3, "{text}");
    assert!(
        bounds.windows(2).all(|w| w[1] > w[0]),
        "the backoff after refused units grows: {bounds:?}\n{text}"
    );
}

#[test]
fn a_server_presenting_another_certificate_is_refused_by_name() {
    let mut g = Grid::start(61, 1);
    let code = invite(&g, 1, "1h");
    join_raw(&g, "a", &code);
    replace_server_files(&mut g, &["cert.pem", "key.pem"]);
    let mut args = vec!["run".to_string(), "--once".into()];
    args.extend(g.crawl_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = g.client("a", &args);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("presented another certificate"),
        "the refusal says why:\n{err}"
    );
    // And an invite code pinned to the old certificate says the same.
    let o = g.client("b", &["join", &code]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("presented another certificate"),
        "{}",
        stderr(&o)
    );
    // The codec is not fooled by the server's frames either way.
    assert!(codec::decode_frame::<Response>(&[0, 0, 0]).is_err());
}

/// A flood of record bombs: a few KB of zstd each that decode into more
/// records than allowed (2^60 claimed, empty ones from RLE zeros, or ones on
/// the site), uploaded for held units from every connection a host may
/// have, 8 streams each, over and over. Each unit's first bomb is decoded
/// as a stream and refused at its first record over a limit; repeats while
/// it runs are answered at once (one upload in flight per unit), and later
/// ones are refused undecoded (the attempt failed). The server's peak
/// memory stays under 300 MB and it goes on serving.
#[test]
fn a_flood_of_record_bombs_keeps_server_memory_bounded() {
    const PEAK_LIMIT: u64 = 300 * 1000 * 1000;
    let mut g = Grid::start(71, 8);
    let code = invite(&g, 1, "1h");
    let a = join_raw(&g, "a", &code);
    g.import_sites();
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
    let pid = g.server.as_ref().expect("server").id();
    let before = peak_rss(pid);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let counts = rt.block_on(async {
        let mut links = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_HOST {
            links.push(Arc::new(hello(&a).await));
        }
        let first = take_unit(&links[0], &a).await;
        let second = take_another_unit(&links[0], &a, vec![first.unit_id]).await;
        let units = [first, second];
        let bombs: Vec<_> = units.iter().map(|u| Arc::new(record_bombs(u))).collect();
        assert!(bombs
            .iter()
            .flat_map(|b| b.iter())
            .all(|b| b.len() < 64 * 1024));
        // First the bomb of records on the site (2 million decoded before
        // the first one past the limit), then the flood while it decodes.
        let started = Instant::now();
        let tasks = spawn_record_bomb_flood(&links, &units, &bombs).await;
        let mut counts = count_bomb_answers(tasks).await;
        let held = units.iter().map(|u| u.unit_id).collect();
        eprintln!("flood answered in {:.1}s", started.elapsed().as_secs_f64());
        counts.2 += later_bombs_are_refused_undecoded(&links[2], &units, &bombs).await;
        // Still serving: work, and an honest upload of a new unit.
        let u = take_another_unit(&links[1], &a, held).await;
        let honest = upload(&u, link_file(&u, &u.site, &records_of(&u.site)), 1);
        assert!(matches!(
            links[1].request(&honest).await,
            Ok(Response::Accepted)
        ));
        for l in &links {
            l.close();
        }
        counts
    });
    let peak = peak_rss(pid);
    eprintln!(
        "record bombs: {} decoded and refused, {} answered in flight, {} refused undecoded; \
         server peak RSS {:.1} MB (before the flood {:.1} MB)",
        counts.0,
        counts.1,
        counts.2,
        peak as f64 / 1e6,
        before as f64 / 1e6
    );
    // Each unit's bombs: one decoded, the rest refused without decoding.
    assert_eq!(
        counts.0 + counts.1 + counts.2,
        2 * (3 + MAX_CONNECTIONS_PER_HOST * STREAMS * REPEATS)
    );
    assert_eq!(counts.0, 2, "{counts:?}");
    assert!(counts.1 > 0, "{counts:?}");
    assert!(counts.2 > 0, "{counts:?}");
    assert!(
        peak < PEAK_LIMIT,
        "server peak RSS {peak} bytes under the flood:\n{}",
        g.server_log()
    );
    let mut server = g.server.take().expect("server");
    assert!(server.try_wait().expect("status").is_none(), "server died");
    let _ = server.kill();
    let _ = server.wait();
}

/// Each unit's attempt failed with its first bomb: what comes after is
/// refused before anything of it is decoded. How many bombs were sent.
async fn later_bombs_are_refused_undecoded(
    link: &Link,
    units: &[WorkUnit],
    bombs: &[Arc<[Vec<u8>; 2]>],
) -> usize {
    let mut sent = 0;
    for (u, bombs) in units.iter().zip(bombs) {
        for bomb in bombs.iter() {
            rejected(
                link.request(&upload(u, bomb.clone(), 0)).await,
                "not wanted",
            );
            sent += 1;
        }
    }
    sent
}

/// The answers one stream of the flood got, in order.
type Answers = Vec<Result<Response, NetError>>;

/// First the bomb of records on the site (2 million decoded before the first
/// one past the limit), then, while it decodes, [`STREAMS`] streams of
/// [`REPEATS`] bombs from every connection for every unit.
async fn spawn_record_bomb_flood(
    links: &[Arc<Link>],
    units: &[WorkUnit],
    bombs: &[Arc<[Vec<u8>; 2]>],
) -> tokio::task::JoinSet<Answers> {
    let mut tasks = tokio::task::JoinSet::new();
    for (u, bombs) in units.iter().zip(bombs) {
        let (link, bomb, u) = (links[0].clone(), bombs[1].clone(), u.clone());
        tasks.spawn(async move { vec![link.request(&upload(&u, bomb, 0)).await] });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (u, bombs) in units.iter().zip(bombs) {
        for (c, link) in links.iter().enumerate() {
            for s in 0..STREAMS {
                let (link, bombs, u) = (link.clone(), bombs.clone(), u.clone());
                tasks.spawn(async move {
                    let mut answers = Vec::new();
                    for r in 0..REPEATS {
                        let bomb = bombs[(c + s + r) % 2].clone();
                        answers.push(link.request(&upload(&u, bomb, 0)).await);
                    }
                    answers
                });
            }
        }
    }
    tasks
}

/// The flood's answers counted: (decoded and refused, answered at once,
/// refused undecoded); any other answer fails the test.
async fn count_bomb_answers(mut tasks: tokio::task::JoinSet<Answers>) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    while let Some(answers) = tasks.join_next().await {
        for r in answers.expect("task") {
            match r {
                Ok(Response::Rejected { reason }) if reason.contains("link file") => counts.0 += 1,
                Err(NetError::Refused {
                    code: ErrorCode::Internal,
                    message,
                }) if message.contains("in progress") => counts.1 += 1,
                Ok(Response::Rejected { reason }) if reason.contains("not wanted") => counts.2 += 1,
                other => panic!("a record bomb got {other:?}"),
            }
        }
    }
    counts
}
