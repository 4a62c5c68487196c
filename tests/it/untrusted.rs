//! Attacks from untrusted hosts and networks against the real server: a host
//! that claims large frames and sends nothing (or drips), a work request
//! naming too many held units, and connections when every address must be
//! validated with a QUIC Retry.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use beebot_client::net::{Link, NetError};
use beebot_server::net::{
    BODY_GRACE, MAX_CONNECTIONS_PER_HOST, MAX_HOST_INFLIGHT_REQUEST_BYTES,
    MAX_INFLIGHT_REQUEST_BYTES,
};
use beebot_shared::codec::{self, FRAME_HEADER_BYTES};
use beebot_shared::limits::{MAX_FRAME_BYTES, MAX_UNITS_HELD};
use beebot_shared::proto::{ErrorCode, Request, Response};
use beebot_shared::sign::{self, WorkUnit};
use beebot_tests::hostile::{join_raw, one_record_upload, Joined};
use beebot_tests::*;

/// Streams the server lets one connection open at once.
const STREAMS_PER_CONNECTION: usize = 8;

async fn hello(j: &Joined) -> Link {
    j.hello().await.expect("hello")
}

fn work_request(units_held: Vec<u64>) -> Request {
    Request::RequestWork {
        want_seconds: 60,
        free_slots: 1,
        units_held,
        open_windows: None,
    }
}

async fn take_unit(link: &Link, j: &Joined) -> WorkUnit {
    match link.request(&work_request(vec![])).await {
        Ok(Response::Work { units, .. }) => {
            let signed = units.first().expect("a unit");
            sign::verify_unit(&j.project_key, signed).expect("signed unit")
        }
        other => panic!("work: {other:?}"),
    }
}

/// A raw QUIC connection, authenticated as `j`: streams written by hand.
async fn raw_hello(j: &Joined) -> (quinn::Endpoint, quinn::Connection) {
    let cfg = beebot_client::net::pinned_client_config(j.server.cert_sha256).expect("quic config");
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("bind");
    endpoint.set_default_client_config(cfg);
    let addr: SocketAddr = j.server.addr.parse().expect("server addr");
    let conn = endpoint
        .connect(addr, &j.server.server_name)
        .expect("connect")
        .await
        .expect("handshake");
    let nonce = match raw_request(&conn, &Request::Challenge).await {
        Response::Nonce { nonce } => nonce,
        other => panic!("challenge: {other:?}"),
    };
    let proof = sign::make_proof(&j.key, &nonce, &j.server.cert_sha256);
    match raw_request(
        &conn,
        &Request::Hello {
            host_id: j.id,
            proof,
        },
    )
    .await
    {
        Response::Welcome { .. } => {}
        other => panic!("hello: {other:?}"),
    }
    (endpoint, conn)
}

async fn raw_request(conn: &quinn::Connection, req: &Request) -> Response {
    let (mut send, recv) = conn.open_bi().await.expect("stream");
    send.write_all(&codec::encode_frame(req).expect("encode"))
        .await
        .expect("write");
    let _ = send.finish();
    read_response(recv).await.expect("response")
}

/// One framed response, or why there was none.
async fn read_response(mut recv: quinn::RecvStream) -> Result<Response, String> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    recv.read_exact(&mut header)
        .await
        .map_err(|e| e.to_string())?;
    let len = codec::frame_len(header, MAX_FRAME_BYTES).map_err(|e| e.to_string())?;
    let mut payload = vec![0u8; len];
    recv.read_exact(&mut payload)
        .await
        .map_err(|e| e.to_string())?;
    codec::decode_payload::<Response>(&payload).map_err(|e| e.to_string())
}

/// The server's answer to a stream cut for a slow body.
fn cut_for_slowness(r: &Result<Response, String>) -> bool {
    matches!(r, Ok(Response::Error { code: ErrorCode::BadRequest, message }) if message.contains("too slowly"))
}

#[test]
fn a_host_claiming_large_frames_neither_starves_other_hosts_nor_holds_for_long() {
    let g = Grid::start(71, 4);
    let code = last_line(&g.admin_ok(&["invite", "--uses", "2", "--expires", "1h"]));
    let a = join_raw(&g, "a", &code);
    let b = join_raw(&g, "b", &code);
    g.import_sites();
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        // B holds a unit and has its result ready.
        let lb = hello(&b).await;
        let unit = take_unit(&lb, &b).await;
        too_many_held_units_are_refused_by_name(&a).await;

        // A, on every connection it may hold, drips one body (a few bytes a
        // second) and claims frames that together are the whole shared
        // budget of request bytes, and sends nothing more.
        let conns = MAX_CONNECTIONS_PER_HOST;
        let claims = conns * STREAMS_PER_CONNECTION - 1;
        let claim = MAX_INFLIGHT_REQUEST_BYTES.div_ceil(claims);
        assert!(claim <= MAX_FRAME_BYTES && claim * claims >= MAX_INFLIGHT_REQUEST_BYTES);
        assert!(claim < MAX_HOST_INFLIGHT_REQUEST_BYTES);
        let mut raw = Vec::new();
        for _ in 0..conns {
            raw.push(raw_hello(&a).await);
        }
        let (dripper, drip_answer) = start_drip(&raw[0].1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (held, silent) = claim_silently(&raw, claim).await;
        // Let the server take the claims in.
        tokio::time::sleep(Duration::from_millis(500)).await;

        b_uploads_at_once(&lb, &unit, claims, claim).await;
        the_dripped_body_is_cut(dripper, drip_answer).await;
        silent_claims_are_cut(silent, claims).await;
        drop(held);
        lb.close();
    });
}

/// What a stream of the attack got back, and how long after it began.
type Timed = tokio::task::JoinHandle<(Result<Response, String>, Duration)>;

/// A names more held units than any client holds: refused by name, before
/// the grid sees it; the limit itself is fine.
async fn too_many_held_units_are_refused_by_name(a: &Joined) {
    let la = hello(a).await;
    match la
        .request(&work_request((1..=MAX_UNITS_HELD as u64 + 1).collect()))
        .await
    {
        Err(NetError::Refused {
            code: ErrorCode::BadRequest,
            message,
        }) => assert!(
            message.contains(&format!("at most {MAX_UNITS_HELD} held units")),
            "{message}"
        ),
        other => panic!("too many held units: {other:?}"),
    }
    assert!(matches!(
        la.request(&work_request((1..=MAX_UNITS_HELD as u64).collect()))
            .await,
        Ok(Response::Work { .. })
    ));
    la.close();
}

/// On `conn`, claim a 1 MiB frame and drip its body a few bytes a second:
/// the dripper (bytes sent) and the server's answer.
async fn start_drip(conn: &quinn::Connection) -> (tokio::task::JoinHandle<usize>, Timed) {
    let attack_start = Instant::now();
    let (mut drip, drip_recv) = conn.open_bi().await.expect("stream");
    drip.write_all(&(1024u32 * 1024).to_le_bytes())
        .await
        .expect("header");
    let dripper = tokio::spawn(async move {
        let mut sent = 0usize;
        while drip.write_all(&[0u8; 8]).await.is_ok() && sent < 4096 {
            sent += 8;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    });
    let drip_answer = tokio::spawn(async move {
        let r = read_response(drip_recv).await;
        (r, attack_start.elapsed())
    });
    (dripper, drip_answer)
}

/// On every stream left on the connections `raw`, claim a frame of `claim`
/// bytes and send nothing more: the held send sides and the answers.
async fn claim_silently(
    raw: &[(quinn::Endpoint, quinn::Connection)],
    claim: usize,
) -> (Vec<quinn::SendStream>, Vec<Timed>) {
    let mut held = Vec::new();
    let mut silent = Vec::new();
    for (i, (_, conn)) in raw.iter().enumerate() {
        let streams = if i == 0 {
            STREAMS_PER_CONNECTION - 1
        } else {
            STREAMS_PER_CONNECTION
        };
        for _ in 0..streams {
            let (mut send, recv) = conn.open_bi().await.expect("stream");
            send.write_all(&(claim as u32).to_le_bytes())
                .await
                .expect("header");
            let start = Instant::now();
            silent.push(tokio::spawn(async move {
                let r = read_response(recv).await;
                (r, start.elapsed())
            }));
            held.push(send);
        }
    }
    (held, silent)
}

/// B uploads at once, long before any of A's `claims` claims of `claim` bytes is cut.
async fn b_uploads_at_once(lb: &Link, unit: &WorkUnit, claims: usize, claim: usize) {
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        lb.request(&one_record_upload(unit)),
    )
    .await
    .expect("B's upload waited behind A's claims");
    let took = started.elapsed();
    assert!(
        matches!(answer, Ok(Response::Accepted)),
        "B's upload: {answer:?}"
    );
    eprintln!("B's upload answered in {took:?} while A claimed {claims} × {claim} bytes");
    assert!(
        took < BODY_GRACE / 2,
        "B's upload took {took:?}: it waited for A's claims to be cut"
    );
}

/// The dripped body is cut within the body timeout though bytes came.
async fn the_dripped_body_is_cut(dripper: tokio::task::JoinHandle<usize>, drip_answer: Timed) {
    let (r, after) = drip_answer.await.expect("drip answer");
    assert!(cut_for_slowness(&r), "dripped body: {r:?}");
    eprintln!("dripped body cut after {after:?}");
    assert!(
        after >= BODY_GRACE - Duration::from_millis(500)
            && after < BODY_GRACE + Duration::from_secs(3),
        "dripped body cut after {after:?}"
    );
    assert!(
        dripper.await.expect("dripper") > 0,
        "the dripper sent bytes"
    );
}

/// The silent claims that had room are cut within the body timeout; the ones
/// that waited behind A's own claims are cut one timeout later each round,
/// never all held for the request timeout.
async fn silent_claims_are_cut(silent: Vec<Timed>, claims: usize) {
    let mut cut_first = Duration::MAX;
    let mut cut = 0;
    for s in silent {
        let (r, after) = s.await.expect("silent answer");
        assert!(cut_for_slowness(&r), "silent claim: {r:?}");
        cut_first = cut_first.min(after);
        cut += 1;
    }
    eprintln!("{cut} silent claims cut, the first after {cut_first:?}");
    assert_eq!(cut, claims);
    assert!(
        cut_first < BODY_GRACE + Duration::from_secs(3),
        "first silent claim cut after {cut_first:?}"
    );
}

/// Restart `g`'s server with `quic_retry` set and net debug logs on.
fn restart_with_retry(g: &mut Grid) {
    g.kill_server();
    let dir = beebot_server::config::DataDir(g.data_dir());
    let mut cfg = dir.load_config().expect("config");
    cfg.quic_retry = true;
    dir.save_config(&cfg).expect("save config");
    let runtime = g.data_dir().join("serve.json");
    let _ = std::fs::remove_file(&runtime);
    let log = std::fs::File::create(g.dir.path().join("server.log")).expect("log");
    let child = Command::new(bin("beebot-server"))
        .args(["serve", "--data-dir"])
        .arg(g.data_dir())
        .env("RUST_LOG", "info,beebot_server::net=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn server");
    g.server = Some(child);
    let start = Instant::now();
    while !runtime.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn clients_connect_and_work_when_every_address_must_be_validated() {
    let mut g = Grid::start(72, 3);
    let code = last_line(&g.admin_ok(&["invite", "--uses", "1", "--expires", "1h"]));
    let a = join_raw(&g, "a", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    restart_with_retry(&mut g);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let l = hello(&a).await;
        let unit = take_unit(&l, &a).await;
        assert!(matches!(
            l.request(&one_record_upload(&unit)).await,
            Ok(Response::Accepted)
        ));
        l.close();
    });
    // The real client's work loop too: it finishes the round.
    g.run_once("a", 2, &[])
        .wait_ok("run --once under address validation");
    g.wait_round(&round, "120s");
    let log = g.server_log();
    let retries = log.matches("sent a Retry").count();
    assert!(retries >= 2, "{retries} Retry packets sent:\n{log}");
}
