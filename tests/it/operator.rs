//! A real operator behind the grid (issue 18): `init` takes a contact (and
//! refuses none or a bad one), a round is refused while the contact is the
//! placeholder, and the public HTTP address serves an about page for site
//! owners (operator, contact, what is collected, the `BeeBot` robots.txt
//! token, the running rounds' budgets) that the crawlers' User-Agent links to.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use beebot_server::config::{DataDir, PLACEHOLDER_CONTACT};
use beebot_tests::*;

/// How long a plain HTTP request to the server may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// `GET path` on `addr` (HTTP/1.1, connection closed): the status code and body.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(HTTP_TIMEOUT)).expect("timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).expect("answer");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a header");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (status, body.to_string())
}

/// The address the running server serves the reference site and about page on.
fn public_http(g: &Grid) -> SocketAddr {
    DataDir(g.data_dir())
        .load_runtime()
        .expect("serve.json")
        .reference_addr
        .expect("the reference site is served")
}

/// Change the server's config and restart it.
fn reconfigure(g: &mut Grid, change: impl FnOnce(&mut beebot_server::config::ServerConfig)) {
    let dir = DataDir(g.data_dir());
    let mut cfg = dir.load_config().expect("config");
    change(&mut cfg);
    dir.save_config(&cfg).expect("save config");
    g.kill_server();
    g.start_server();
}

/// `beebot-server init` into a fresh dir with `args`, stdin not a terminal.
fn init(data: &std::path::Path, args: &[&str]) -> std::process::Output {
    run(
        Command::new(bin("beebot-server"))
            .args([
                "init",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .arg("--data-dir")
            .arg(data)
            .stdin(Stdio::null()),
        Duration::from_secs(60),
    )
}

/// A command on a dir that holds no server says where it looked and how to
/// name the server's dir, never only "run init" (a second server); its
/// `init` hint names the same dir.
#[test]
fn a_command_without_a_server_names_the_dir_it_looked_in() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("nothing-here");
    let o = run(
        Command::new(bin("beebot-server"))
            .args(["status", "--data-dir"])
            .arg(&data),
        Duration::from_secs(60),
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("no server in {}", data.display())),
        "{err}"
    );
    assert!(err.contains("BEEBOT_SERVER_DIR"), "{err}");
    assert!(
        err.contains(&format!("init --data-dir {}", data.display())),
        "{err}"
    );
    assert!(!data.exists(), "nothing was made");
}

#[test]
fn init_refuses_no_contact_off_a_terminal_and_a_bad_one_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("server");

    let o = init(&data, &[]);
    assert!(!o.status.success(), "init without a contact succeeded");
    assert!(
        stderr(&o).contains("error: no operator contact: pass --contact URL|EMAIL"),
        "{}",
        stderr(&o)
    );
    assert!(!data.exists(), "a refused init left files");

    for (bad, said) in [
        (
            "bad",
            "`bad` is neither a URL (https://...) nor an e-mail address",
        ),
        (
            "ftp://lab.example.edu/",
            "`ftp://lab.example.edu/` is not an http:// or https:// URL",
        ),
        ("bot@localhost", "`bot@localhost` is not an e-mail address"),
        (PLACEHOLDER_CONTACT, "still the placeholder"),
    ] {
        let o = init(&data, &["--contact", bad]);
        assert!(!o.status.success(), "init --contact {bad} succeeded");
        assert!(
            stderr(&o).contains("--contact") && stderr(&o).contains(said),
            "--contact {bad}: {}",
            stderr(&o)
        );
        assert!(!data.exists(), "init --contact {bad} left files");
    }

    let o = init(
        &data,
        &["--contact", "bot@lab.example.edu", "--operator", "Link Lab"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("contact      bot@lab.example.edu"));
    let cfg = DataDir(data).load_config().expect("config");
    assert_eq!(
        (cfg.contact.as_str(), cfg.operator.as_str()),
        ("bot@lab.example.edu", "Link Lab")
    );
}

#[test]
fn a_round_is_refused_while_the_contact_is_the_placeholder_or_empty() {
    let mut g = Grid::start(18, 2);
    g.import_sites();
    for contact in [PLACEHOLDER_CONTACT, ""] {
        reconfigure(&mut g, |cfg| cfg.contact = contact.into());
        let o = g.admin(&["round", "start", "--delay-ms", "0"]);
        assert!(
            !o.status.success(),
            "a round started with contact {contact:?}"
        );
        let err = stderr(&o);
        assert!(
            err.contains("round refused: the operator contact is"),
            "{err}"
        );
        assert!(
            err.contains("Set `contact = \"https://...\"`")
                && err.contains("config.toml")
                && err.contains("restart `beebot-server serve`"),
            "the error does not name the fix: {err}"
        );
        let rounds = stdout(&g.admin_ok(&["round", "list", "--json"]));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&rounds).expect("json"),
            serde_json::json!([]),
            "a refused round was kept"
        );
    }
    // Mended in config.toml and restarted: the round starts.
    reconfigure(&mut g, |cfg| cfg.contact = "bot@lab.example.edu".into());
    g.admin_ok(&["round", "start", "--delay-ms", "0"]);
}

#[test]
fn the_about_page_shows_who_what_and_the_running_rounds_budgets_and_the_user_agent_links_to_it() {
    let mut g = Grid::start(18, 3);
    reconfigure(&mut g, |cfg| {
        cfg.operator = "Link Lab <Research> & Co".into()
    });
    let addr = public_http(&g);
    with_no_round_the_about_page_says_who_and_what(addr);

    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let (round, page) = a_running_round_shows_its_budgets(&g, addr);

    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "120s");
    every_request_names_the_about_page(&g, addr, &page);

    // Between two scans of the repeating round, it is still shown.
    wait_for(
        "the about page to show the round waiting",
        HTTP_TIMEOUT,
        || {
            http_get(addr, "/about").1.contains(&format!(
                "Scan {round}: repeated every 2h; the next scan has not started yet"
            ))
        },
    );
}

/// No round yet: who runs it (escaped), how to reach them, what it takes,
/// the token, and the budgets a round starts with; the reference site is
/// served as before beside it.
fn with_no_round_the_about_page_says_who_and_what(addr: SocketAddr) {
    let (status, page) = http_get(addr, "/about");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Link Lab &lt;Research&gt; &amp; Co"),
        "{page}"
    );
    assert!(!page.contains("<Research>"), "operator not escaped");
    assert!(page.contains(&format!("<a href=\"{TEST_CONTACT}\">{TEST_CONTACT}</a>")));
    assert!(page.contains("Outbound links only"));
    assert!(page.contains("<code id=\"robots-token\">BeeBot</code>"));
    assert!(page.contains("User-agent: BeeBot\nDisallow: /"));
    assert!(page.contains("beebot-server sites exclude HOST"));
    assert!(page.contains("No scan is under way now"));
    assert!(
        page.contains("<td>at most 1000</td>"),
        "the default page cap"
    );
    // The reference site is served as before beside it.
    assert_eq!(http_get(addr, "/").0, 200);
    assert_eq!(http_get(addr, "/about/nothing-here").0, 404);
}

/// A repeating round with budgets of its own is shown under way, with each
/// budget. Returns the round and the about page as it showed it.
fn a_running_round_shows_its_budgets(g: &Grid, addr: SocketAddr) -> (String, String) {
    let o = g.admin_ok(&[
        "round",
        "start",
        "--delay-ms",
        "20",
        "--max-pages",
        "7",
        "--max-depth",
        "3",
        "--max-scan-time",
        "90s",
        "--max-crawl-delay",
        "12s",
        "--every",
        "2h",
    ]);
    let round = last_line(&o);
    let (_, page) = http_get(addr, "/about");
    assert!(
        page.contains(&format!("Scan {round}: under way now; repeated every 2h")),
        "{page}"
    );
    for cell in [
        "<td>at most 7</td>",
        "<td>at most 3</td>",
        "<td>20 ms</td>",
        "<td>1m 30s (a larger site",
        "<td>12s</td>",
    ] {
        assert!(page.contains(cell), "{cell} not on the page:\n{page}");
    }
    assert!(!page.contains("No scan is under way now"));
    (round, page)
}

/// Every request the crawler sent names the about page (at `addr`), whose
/// `page` gives that user agent.
fn every_request_names_the_about_page(g: &Grid, addr: SocketAddr, page: &str) {
    let about_url = format!("http://{addr}/about");
    let want = format!("BeeBot/{} (+{about_url})", env!("CARGO_PKG_VERSION"));
    let log = g.web_server.request_log();
    assert!(!log.is_empty(), "the crawler fetched nothing");
    for r in &log {
        assert_eq!(r.user_agent, want, "{} {}", r.host, r.path);
    }
    assert!(page.contains(&format!("User-Agent: {want}")), "{page}");
}
