//! The client's local status page as an employee and an attacker meet it:
//! a real `beebot run` not yet joined serves the page on loopback;
//! `beebot open --print` gives a one-time link (`beebot open` hands the
//! browser an owner-only page instead, so the link is in no process's
//! arguments); headless Chromium joins
//! with a pasted invite code, watches a polite scan progress, pauses,
//! changes the crawl window, tries a bad value, and leaves after
//! confirming. Over plain HTTP: other names (DNS rebinding), other origins,
//! a link used twice, a change without the page's origin and a wrong secret
//! are refused and change nothing; the command line's pause goes through
//! the same API; a round at delay 0 shows in today's and the week's
//! totals. Screenshots go to `target/screenshots/`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use beebot_tests::browser::{self, Browser};
use beebot_tests::*;
use serde_json::{json, Value};

/// The polite round's delay: a scan lasts long enough to be watched.
const DELAY_MS: &str = "400";
/// Longest the page may take to show what a test waits for.
const PAGE_WAIT: Duration = Duration::from_secs(40);

/// One raw HTTP/1.1 exchange on loopback (headers exactly as given).
fn raw(port: u16, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the page");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("as set up");
    s.write_all(request.as_bytes()).expect("send");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn get(port: u16, path: &str, host: &str, extra: &str) -> (u16, String) {
    raw(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"),
    )
}

fn post(port: u16, path: &str, extra: &str, body: &str) -> (u16, String) {
    raw(
        port,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

fn body_json(answer: &str) -> Value {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// The page's port, from the address file the runner wrote.
fn page_port(g: &Grid, name: &str) -> u16 {
    let path = g.home(name).join("ui.json");
    wait_for("the page's address file", PAGE_WAIT, || path.exists());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("as set up"))
        .expect("as set up");
    v["port"].as_u64().expect("port") as u16
}

/// `beebot open --print`: a fresh one-time link.
fn login_link(g: &Grid, name: &str) -> String {
    let o = g.client(name, &["open", "--print"]);
    assert!(o.status.success(), "open: {}", stderr(&o));
    let url = last_line(&o);
    assert!(url.contains("/login#code="), "{url}");
    url
}

fn secret(g: &Grid, name: &str) -> String {
    std::fs::read_to_string(g.home(name).join("ui.secret"))
        .expect("secret")
        .trim()
        .to_string()
}

/// Spend a login link's code as the login page's script does: the
/// session token the page sends in `Authorization: Session …`.
fn session(port: u16, url: &str) -> String {
    let code = url.split("#code=").nth(1).expect("code in the fragment");
    let origin = format!("Origin: http://127.0.0.1:{port}\r\n");
    let (status, answer) = post(
        port,
        "/api/session",
        &origin,
        &json!({ "code": code }).to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("set-cookie"),
        "no cookie: {answer}"
    );
    body_json(&answer)["token"]
        .as_str()
        .expect("token")
        .to_string()
}

fn spawn_runner(g: &Grid, name: &str) -> Child {
    std::fs::create_dir_all(g.home(name)).expect("as set up");
    let log = g.dir.path().join(format!("client-{name}.log"));
    g.spawn_run(name, &[], &log)
}

fn wait_exit(child: &mut Child, within: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < within {
        if child.try_wait().expect("wait").is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn the_page_refuses_other_pages_and_shows_a_rounds_totals() {
    let g = Grid::start(61, 3);
    g.import_sites();
    let mut child = spawn_runner(&g, "h");
    let port = page_port(&g, "h");
    let me = format!("127.0.0.1:{port}");
    // The runner limits glibc's malloc arenas (it started itself again
    // with the variable set: the same process, so the same pid).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let environ = std::fs::read(format!("/proc/{}/environ", child.id())).expect("environ");
        assert!(
            environ
                .split(|b| *b == 0)
                .any(|v| v == b"MALLOC_ARENA_MAX=2"),
            "the runner's environment limits malloc's arenas"
        );
    }

    // Before any login: the page's files hold no data, the API refuses.
    let (status, page) = get(port, "/", &me, "");
    assert_eq!(status, 200);
    assert!(
        page.contains("content-security-policy: default-src 'self'"),
        "{page}"
    );
    assert_eq!(get(port, "/api/status", &me, "").0, 401);
    // Every file the page and its login page link is there before any login.
    for html in [page.clone(), get(port, "/login", &me, "").1] {
        let linked = linked_paths(&html);
        assert!(linked.iter().any(|p| p == "/favicon.svg"), "{linked:?}");
        for path in linked {
            let (status, answer) = get(port, &path, &me, "");
            assert_eq!(status, 200, "{path}: {answer}");
        }
    }
    // DNS rebinding: another name for 127.0.0.1 is refused, even with the secret.
    let bearer = format!("Authorization: Bearer {}\r\n", secret(&g, "h"));
    assert_eq!(
        get(
            port,
            "/api/status",
            &format!("evil.example:{port}"),
            &bearer
        )
        .0,
        403
    );
    assert_eq!(get(port, "/api/status", &me, &bearer).0, 200);
    assert_eq!(
        post(port, "/api/pause", "Authorization: Bearer 00\r\n", "{}").0,
        401,
        "a wrong secret"
    );

    // A login link works once, and only from the page itself.
    let url = login_link(&g, "h");
    let code = url.split("#code=").nth(1).expect("code").to_string();
    let spend = json!({ "code": code }).to_string();
    assert_eq!(post(port, "/api/session", "", &spend).0, 403, "no origin");
    let other = "Origin: http://127.0.0.1:9\r\n";
    assert_eq!(
        post(port, "/api/session", other, &spend).0,
        403,
        "another page"
    );
    let token = session(port, &url);
    let mine = format!("Origin: http://{me}\r\n");
    assert_eq!(
        post(port, "/api/session", &mine, &spend).0,
        401,
        "a link used twice"
    );

    // Join through the API, as the page does (session token, its origin).
    let code = g.invite(1);
    let from_page = format!("Authorization: Session {token}\r\nOrigin: http://{me}\r\n");
    let join = json!({ "code": code, "name": "h" }).to_string();
    let (status, a) = post(port, "/api/join", &from_page, &join);
    assert_eq!(status, 200, "{a}");
    let said = body_json(&a)["message"]
        .as_str()
        .expect("message")
        .to_string();
    assert!(said.starts_with("joined "), "{a}");
    assert!(g.home("h").join("enrolment.json").exists());

    // Another local page (same site, another port) with a stolen token, a
    // change without the page's origin, a guessed token, a pause past a
    // year, a body past the limit: refused, nothing paused.
    let cross = format!("Authorization: Session {token}\r\nOrigin: http://127.0.0.1:9\r\n");
    assert_eq!(post(port, "/api/pause", &cross, "{}").0, 403);
    let no_origin = format!("Authorization: Session {token}\r\n");
    assert_eq!(post(port, "/api/pause", &no_origin, "{}").0, 403);
    let guessed = format!("Authorization: Session {}\r\n{mine}", "0".repeat(64));
    assert_eq!(post(port, "/api/pause", &guessed, "{}").0, 401);
    let forever = json!({ "seconds": 400u64 * 24 * 3600 }).to_string();
    let (status, a) = post(port, "/api/pause", &from_page, &forever);
    assert_eq!(status, 400, "{a}");
    let big = format!(
        "{{\"key\":\"window\",\"value\":\"{}\"}}",
        "x".repeat(20_000)
    );
    assert_eq!(post(port, "/api/settings", &from_page, &big).0, 413);
    wait_for("the runner's status", PAGE_WAIT, || {
        g.status_json("h")["state"] != "not running"
    });
    assert_ne!(g.status_json("h")["state"], "paused");

    // The command line's pause and resume go through the same API.
    let o = g.client("h", &["pause", "--for", "1h"]);
    assert!(o.status.success(), "pause: {}", stderr(&o));
    wait_for("paused", PAGE_WAIT, || {
        g.status_json("h")["state"] == "paused"
    });
    let o = g.client("h", &["resume"]);
    assert!(stdout(&o).contains("resumed"), "{}", stdout(&o));

    // A round at delay 0 shows in today's and this week's totals.
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "0"]));
    g.wait_round(&round, "120s");
    wait_for("today's totals", PAGE_WAIT, || {
        let (_, a) = get(port, "/api/status", &me, &bearer);
        body_json(&a)["today"]["results"] == 3
    });
    let (_, a) = get(port, "/api/status", &me, &bearer);
    let v = body_json(&a);
    assert_eq!(v["week"]["results"], 3, "{v}");
    assert!(v["today"]["pages"].as_u64().expect("pages") > 3, "{v}");
    assert_eq!(v["pending_uploads"], 0);
    assert_eq!(v["project"].as_str().map(|p| !p.is_empty()), Some(true));

    // `beebot open` gives the browser an owner-only page that goes on to a
    // fresh link (here no browser opener is on the PATH: it says so).
    let o = run(
        g.client_cmd("h", &["open"]).env("PATH", g.dir.path()),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "open: {}", stderr(&o));
    let opener = g.home("h").join("open.html");
    let html = std::fs::read_to_string(&opener).expect("open.html");
    assert!(
        html.contains(&format!("url=http://127.0.0.1:{port}/login#code=")),
        "{html}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&opener)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "only the owner reads the opener");
    }
    assert!(
        stdout(&o).contains("could not open a browser"),
        "{}",
        stdout(&o)
    );

    // A runner that is gone leaves its address file: nothing is sent to that port.
    let _ = child.kill();
    let _ = child.wait();
    let o = g.client("h", &["pause"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no running client"), "{}", stderr(&o));
}

/// A runner started by an installer with an invite (`BEEBOT_INVITE`, as a
/// silent install leaves one): a damaged code leaves it waiting, saying why
/// on the page; a good one joins by itself.
#[test]
fn a_deployment_invite_joins_by_itself_and_a_bad_one_is_said_on_the_page() {
    let g = Grid::start(63, 1);
    let code = g.invite(1);
    let mut damaged = code.clone();
    let last = damaged.pop().expect("a code");
    damaged.push(if last == 'a' { 'b' } else { 'a' });
    let spawn = |name: &str, invite: &str| {
        std::fs::create_dir_all(g.home(name)).expect("home");
        let mut args = vec!["run".to_string()];
        args.extend(g.crawl_flags());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        g.client_cmd(name, &args)
            .env("BEEBOT_INVITE", invite)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn")
    };
    let mut bad = spawn("bad", &damaged);
    let port = page_port(&g, "bad");
    let bearer = format!("Authorization: Bearer {}\r\n", secret(&g, "bad"));
    wait_for("the join problem on the page", PAGE_WAIT, || {
        let (_, a) = get(port, "/api/status", &format!("127.0.0.1:{port}"), &bearer);
        body_json(&a)["join_problem"]
            .as_str()
            .is_some_and(|p| p.contains("damaged"))
    });
    let (_, a) = get(port, "/api/status", &format!("127.0.0.1:{port}"), &bearer);
    assert_eq!(body_json(&a)["state"], "not-joined", "{a}");
    assert!(!g.home("bad").join("enrolment.json").exists());
    let _ = bad.kill();
    let _ = bad.wait();

    let mut good = spawn("good", &code);
    wait_for("joined by itself", PAGE_WAIT, || {
        g.home("good").join("enrolment.json").exists()
    });
    wait_for("the runner's status", PAGE_WAIT, || {
        g.status_json("good")["state"] != "not running"
    });

    // Left: the installed code does not join this home again by itself.
    let o = run(
        g.client_cmd("good", &["leave"]).env("BEEBOT_INVITE", &code),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "leave: {}", stderr(&o));
    assert!(wait_exit(&mut good, PAGE_WAIT), "the runner stopped");
    assert!(g.home("good").join("left.json").exists());
    let mut again = spawn("good", &code);
    let port = page_port(&g, "good");
    let bearer = format!("Authorization: Bearer {}\r\n", secret(&g, "good"));
    wait_for("the page", PAGE_WAIT, || {
        get(port, "/api/status", &format!("127.0.0.1:{port}"), &bearer).0 == 200
    });
    std::thread::sleep(Duration::from_secs(2));
    let (_, a) = get(port, "/api/status", &format!("127.0.0.1:{port}"), &bearer);
    let v = body_json(&a);
    assert_eq!(v["state"], "not-joined", "{v}");
    assert!(v["join_problem"].is_null(), "it did not even try: {v}");
    let _ = again.kill();
    let _ = again.wait();
}

/// Revoked by the admin: the runner does not exit (a service would start it
/// again and again); its page says so and still leaves, from the owner's API.
#[test]
fn a_revoked_host_keeps_its_page_and_leaves_from_it() {
    let g = Grid::start(64, 2);
    g.import_sites();
    let code = g.invite(1);
    g.join("r", &code);
    let mut child = spawn_runner(&g, "r");
    let port = page_port(&g, "r");
    let me = format!("127.0.0.1:{port}");
    let bearer = format!("Authorization: Bearer {}\r\n", secret(&g, "r"));
    wait_for("the runner's status", PAGE_WAIT, || {
        g.status_json("r")["state"] != "not running"
    });
    g.admin_ok(&["hosts", "revoke", "r"]);
    // It hears at its next contact: a round's work hint brings one at once.
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
    wait_for("the page says revoked", PAGE_WAIT, || {
        let (_, a) = get(port, "/api/status", &me, &bearer);
        body_json(&a)["state"] == "revoked"
    });
    // Past the live status's freshness, `beebot status` still tells a
    // revoked runner that runs from one that does not.
    std::thread::sleep(Duration::from_millis(
        beebot_client::control::STATUS_FRESH.as_millis() as u64 + 2_000,
    ));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the runner stays up"
    );
    let s = g.status_json("r");
    assert_eq!(s["state"], "revoked", "{s}");
    let text = stdout(&g.client("r", &["status"]));
    assert!(
        text.contains("REVOKED") && text.contains("state     revoked"),
        "{text}"
    );
    let mine = format!("{bearer}Origin: http://{me}\r\n");
    let (status, a) = post(
        port,
        "/api/leave",
        &mine,
        &json!({ "confirm": true }).to_string(),
    );
    assert_eq!(status, 200, "{a}");
    let said = body_json(&a)["message"]
        .as_str()
        .expect("message")
        .to_string();
    assert!(
        said.contains("revoked this host already") && said.contains("left the project"),
        "{said}"
    );
    assert!(
        wait_exit(&mut child, PAGE_WAIT),
        "the runner exits after leaving"
    );
    assert!(!g.home("r").join("enrolment.json").exists());
}

#[test]
fn an_employee_joins_watches_pauses_steers_and_leaves_in_chromium() {
    if let Some(missing) = browser::available() {
        tool_missing(missing, "drive the status page in headless Chromium");
        return;
    }
    let g = Grid::start(62, 4);
    g.import_sites();
    let mut child = spawn_runner(&g, "e");
    page_port(&g, "e");
    let b = Browser::start().expect("start headless Chromium");
    let shots = browser::screenshot_dir();

    // First run: the page asks for the invite code.
    b.goto(&login_link(&g, "e")).expect("as set up");
    let invite = b
        .wait_find("#join-card:not([hidden]) #invite", PAGE_WAIT)
        .expect("as set up");
    shot(&b, &shots, "status-page-join");
    b.type_into(&invite, &g.invite(1)).expect("as set up");
    b.type_into(&b.find("#host-name").expect("as set up"), "desk-e")
        .expect("as set up");
    b.click(&b.find("#join-btn").expect("as set up"))
        .expect("as set up");
    wait_text(&b, "#project", "as desk-e");
    assert!(g.home("e").join("enrolment.json").exists());

    // A polite round: the page shows the scan and its progress.
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    b.wait_true(
        "a scan with its progress",
        "const r = document.querySelector('#scans tbody tr.scan');
         return !!r && document.getElementById('state').textContent === 'crawling'
           && /of about \\d+ pages|\\d+ pages/.test(r.textContent)
           && r.querySelector('progress').value > 0;",
        PAGE_WAIT,
    )
    .expect("as set up");
    shot(&b, &shots, "status-page-crawling");

    // Pause for an hour: nothing is fetched while paused.
    b.click(&b.find("#pause-hour").expect("as set up"))
        .expect("as set up");
    wait_text(&b, "#state", "paused");
    wait_text(&b, "#state-text", "Paused for");
    std::thread::sleep(Duration::from_millis(1500)); // the page in flight ends
    let before = g.web_server.requests();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(g.web_server.requests(), before, "a request while paused");
    shot(&b, &shots, "status-page-paused");
    b.click(&b.find("#resume").expect("as set up"))
        .expect("as set up");
    wait_text(&b, "#control-msg", "resumed");

    // Crawl hours that exclude now: the client waits outside its window.
    let hour = chrono::Local::now()
        .format("%H")
        .to_string()
        .parse::<u32>()
        .expect("as set up");
    let away = format!("{:02}:00-{:02}:00", (hour + 6) % 24, (hour + 7) % 24);
    b.click(&b.find("#window-days").expect("as set up"))
        .expect("as set up");
    // At a laptop's 1366 px every day's name is whole, none cut or spilling.
    b.resize(1366, 768).expect("as set up");
    let cut = b
        .script(
            "return [...document.querySelectorAll('#window-editor .days label')]
               .filter(l => l.scrollWidth > l.clientWidth || l.clientWidth === 0)
               .map(l => l.textContent);",
            json!([]),
        )
        .expect("as set up");
    assert_eq!(cut, json!([]), "day names cut at 1366 px");
    for d in ["mon", "tue", "wed", "thu", "fri", "sat", "sun"] {
        b.type_into(&b.find(&format!("#win-{d}")).expect("as set up"), &away)
            .expect("as set up");
    }
    b.click(&b.find("#window-save").expect("as set up"))
        .expect("as set up");
    wait_text(&b, "#settings-msg", "now uses window");
    wait_text(&b, "#state", "outside window");
    wait_text(&b, "#src-window", "set here");
    let file = std::fs::read_to_string(g.home("e").join("config.toml")).expect("as set up");
    assert!(file.contains(&format!("mon {away}")), "{file}");

    // A bad value is refused in words and not written.
    save_field(&b, "slots", "99");
    wait_text(&b, "#settings-msg", "99 is outside 1..=64");
    let file = std::fs::read_to_string(g.home("e").join("config.toml")).expect("as set up");
    assert!(!file.contains("slots"), "{file}");

    // The CPU budget, set here: written to the settings file.
    save_field(&b, "cpu", "5");
    wait_text(&b, "#settings-msg", "cpu_percent");
    let file = std::fs::read_to_string(g.home("e").join("config.toml")).expect("as set up");
    assert!(file.contains("cpu_percent = 5"), "{file}");

    // Any time again: the round goes on to its end.
    b.click(&b.find("#window-always").expect("as set up"))
        .expect("as set up");
    b.click(&b.find("#window-save").expect("as set up"))
        .expect("as set up");
    wait_text(&b, "#settings-msg", "now uses window = always");
    g.wait_round(&round, "240s");
    wait_text(&b, "#today-results", "4");

    // Leave, after confirming.
    b.click(&b.find("#leave-btn").expect("as set up"))
        .expect("as set up");
    let start = Instant::now();
    let asked = loop {
        if let Some(t) = b.dialog_text() {
            break t;
        }
        assert!(start.elapsed() < PAGE_WAIT, "no confirmation asked");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(asked.contains("Leave the project?"), "{asked}");
    b.accept_dialog().expect("as set up");
    wait_text(&b, "#leave-msg", "left the project");
    wait_text(&b, "#leave-msg", "told the server");
    shot(&b, &shots, "status-page-left");
    assert!(
        wait_exit(&mut child, PAGE_WAIT),
        "the runner exits after leaving"
    );
    assert!(!g.home("e").join("enrolment.json").exists());
    assert!(!g.home("e").join("ui.secret").exists());
    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    assert!(hosts.contains("\tleft\t"), "{hosts}");
}

/// Type `value` into the settings field `id` (emptied first) and press its
/// Save button (`#ID-save`).
fn save_field(b: &Browser, id: &str, value: &str) {
    let field = b.find(&format!("#{id}")).expect("as set up");
    b.script(
        "document.getElementById(arguments[0]).value = '';",
        json!([id]),
    )
    .expect("as set up");
    b.type_into(&field, value).expect("as set up");
    b.click(&b.find(&format!("#{id}-save")).expect("as set up"))
        .expect("as set up");
}

fn wait_text(b: &Browser, css: &str, want: &str) {
    let script = format!(
        "const e = document.querySelector({css:?}); return !!e && e.textContent.includes({want:?});"
    );
    b.wait_true(&format!("{css} shows {want:?}"), &script, PAGE_WAIT)
        .unwrap_or_else(|e| {
            let seen = b
                .script(
                    &format!("const e = document.querySelector({css:?}); return e ? e.textContent : null;"),
                    json!([]),
                )
                .unwrap_or_default();
            panic!("{e:#}; it shows {seen}")
        });
}

fn shot(b: &Browser, dir: &Path, name: &str) {
    let saved = b
        .screenshot(&dir.join(format!("{name}.png")))
        .expect("screenshot");
    browser::keep_for_docs(name, &saved);
}

/// Connections that send half a header and nothing more: the page holds
/// at most its cap of them, closes each after its header timeout, and
/// `beebot pause` is answered meanwhile (150 such connections once made
/// it fail).
#[test]
fn half_sent_headers_are_capped_and_closed_and_pause_still_works() {
    let g = Grid::start(62, 1);
    let mut child = spawn_runner(&g, "h");
    let port = page_port(&g, "h");
    let pid = child.id();
    let fds = || open_fds(pid);
    let before = fds();
    let opened = Instant::now();
    let flood = 150;
    let mut held = half_sent_headers(std::net::SocketAddr::from(([127, 0, 0, 1], port)), flood);
    std::thread::sleep(Duration::from_millis(500));
    let cap = beebot_client::ui::LIMITS.connections;
    assert!(
        fds() <= before + cap + 8,
        "{} descriptors (before {before})",
        fds()
    );
    let o = g.client("h", &["pause"]);
    assert!(o.status.success(), "pause during the flood: {}", stderr(&o));
    let header = beebot_client::ui::LIMITS.header;
    let deadline = opened + flood.div_ceil(cap) as u32 * header + Duration::from_secs(15);
    assert_all_closed_by(&mut held, deadline);
    let _ = child.kill();
    let _ = child.wait();
}
