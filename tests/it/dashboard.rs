//! The dashboard as an admin uses it: its JSON endpoints, its pages' files
//! and headers, CSRF on a revoke, and a real headless Chromium that logs in,
//! watches a running round live, sorts and filters its sites, revokes a
//! host after confirming, and fits a phone's width. Screenshots go to
//! `target/screenshots/`.

use std::time::{Duration, Instant};

use beebot_tests::browser::{self, Browser};
use beebot_tests::*;
use serde_json::{json, Value};

/// A host name that is HTML: it must show as text.
const HOSTILE_NAME: &str = "<img src=x onerror=alert(1)>";
/// The round's politeness delay: slow enough that it still runs while the
/// browser looks.
const DELAY_MS: &str = "400";
/// Longest a page may take to show what the test waits for.
const PAGE_WAIT: Duration = Duration::from_secs(30);

/// One HTTP answer.
struct Answer {
    status: u16,
    headers: ureq::http::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// The admin address of a grid, spoken to without a proxy or redirects.
struct AdminHttp {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl AdminHttp {
    fn of(g: &Grid) -> AdminHttp {
        let addr = beebot_server::config::DataDir(g.data_dir())
            .load_runtime()
            .expect("serve.json")
            .admin_addr;
        let token = std::fs::read_to_string(g.data_dir().join("admin.token")).expect("token");
        AdminHttp {
            base: format!("http://{addr}"),
            token: token.trim().to_string(),
            agent: ureq::Agent::config_builder()
                .proxy(None)
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .into(),
        }
    }

    fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Answer {
        let mut r = r.expect("admin HTTP");
        Answer {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.body_mut().read_to_string().expect("body"),
        }
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Answer {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.call())
    }

    fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        let mut req = self.agent.post(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Self::answer(req.send(body.to_string()))
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// Log in as the login page does (its Origin); the `Authorization`
    /// header value of the session.
    fn login(&self) -> String {
        let a = self.post(
            "/login",
            &[("Content-Type", "application/json"), ("Origin", &self.base)],
            &format!(r#"{{"token":"{}"}}"#, self.token),
        );
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.header("set-cookie"), "", "never a cookie");
        let session = a.json()["session"].as_str().expect("session").to_string();
        format!("Session {session}")
    }

    /// `/api/hosts` by the bearer token: host `name`'s record.
    fn host(&self, name: &str) -> Value {
        let hosts = self
            .get("/api/hosts", &[("Authorization", &self.bearer())])
            .json();
        hosts
            .as_array()
            .expect("hosts")
            .iter()
            .find(|h| h["info"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no host {name}: {hosts}"))
    }
}

/// `field` of each object of the array `list`.
fn field_of_each<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .filter_map(|v| v[field].as_str())
        .collect()
}

/// Join client `home` with `name` (any text), with invite `code`.
fn join_named(g: &Grid, home: &str, name: &str, code: &str) {
    let o = run(
        &mut g.client_cmd(home, &["join", code, "--name", name]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
}

#[test]
fn the_dashboard_serves_its_json_and_refuses_a_revoke_from_another_page() {
    let g = Grid::start(91, 3);
    g.import_sites();
    let http = AdminHttp::of(&g);
    let code = last_line(&g.admin_ok(&["invite", "--uses", "3", "--expires", "1h"]));
    join_named(&g, "a", "alpha", &code);
    join_named(&g, "x", HOSTILE_NAME, &code);
    pages_and_files_have_their_types_and_a_strict_policy(&http);
    let session = http.login();
    let page = http.get("/hosts", &[]);
    assert!(
        !page.body.contains(HOSTILE_NAME),
        "host names are data, not HTML"
    );

    // JSON: the session or the token; nothing without.
    for path in ["/api/dashboard/overview", "/api/dashboard/hosts"] {
        assert_eq!(http.get(path, &[]).status, 401, "{path}");
        assert_eq!(
            http.get(path, &[("Authorization", &http.bearer())]).status,
            200
        );
    }
    let hosts = http
        .get("/api/dashboard/hosts", &[("Authorization", &session)])
        .json();
    let names = field_of_each(&hosts["hosts"], "name");
    assert!(names.contains(&HOSTILE_NAME), "{names:?}");
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    let o = http
        .get("/api/dashboard/overview", &[("Authorization", &session)])
        .json();
    let states = field_of_each(&o["components"], "state");
    assert_eq!(o["hosts_enrolled"], 2, "{o:#}");
    assert_eq!(o["jobs"]["queued"], 3, "{o:#}");
    assert_eq!(o["rounds"][0]["id"].to_string(), round, "{o:#}");
    // Hosts spoke over QUIC; the store syncs and the ticker turns every
    // second; the reference site answers.
    assert_eq!(states, ["ok"; 4], "{o:#}");
    let r = http
        .get(
            &format!("/api/dashboard/rounds/{round}"),
            &[("Authorization", &session)],
        )
        .json();
    assert_eq!(r["sites"].as_array().map(Vec::len), Some(3), "{r:#}");
    assert_eq!(r["progress"], 0.0);
    assert!(
        r["eta"]["seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{r:#}"
    );
    assert!(r["eta"]["how"].as_str().unwrap_or("").contains("scheduler"));
    assert_eq!(r["max_points"], 600);
    let missing = http.get("/api/dashboard/rounds/999", &[("Authorization", &session)]);
    assert_eq!(missing.status, 404, "{}", missing.body);

    a_revoke_needs_the_dashboards_own_origin(&http, &session);
}

/// While a site's scan runs, before any result reached the server, the
/// round's KB/s and pages/s "now" come from the scan's own reports; at a
/// politeness delay, and at none with slow answers.
#[test]
fn kilobytes_per_second_count_a_running_scan() {
    for (politeness, answer_ms) in [("300", 0), ("0", 300)] {
        let g = Grid::of_sites(93, 1, 50, answer_ms);
        g.import_sites();
        let http = AdminHttp::of(&g);
        let code = g.invite(1);
        g.join("worker", &code);
        let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", politeness]));
        let client = g.run_once("worker", 1, &[]);
        let path = format!("/api/dashboard/rounds/{round}");
        let mut seen = Value::Null;
        wait_for("KB/s of the running scan", Duration::from_secs(60), || {
            seen = http.get(&path, &[("Authorization", &http.bearer())]).json();
            seen["rates"]["kb_per_s_now"].as_f64().unwrap_or(0.0) > 0.0
        });
        // Seen before the site's result: the scan's reports carried it.
        assert_eq!(seen["progress"], 0.0, "politeness {politeness}: {seen:#}");
        assert!(
            seen["rates"]["pages_per_s_now"].as_f64().unwrap_or(0.0) > 0.0,
            "{:#}",
            seen["rates"]
        );
        g.wait_round(&round, "120s");
        client.wait_ok("worker");
        let done = http.get(&path, &[("Authorization", &http.bearer())]).json();
        assert!(
            done["rates"]["kb_per_s_avg"].as_f64().unwrap_or(0.0) > 0.0,
            "{:#}",
            done["rates"]
        );
    }
}

/// The pages, their files and the login form: types, CSP, no caching.
fn pages_and_files_have_their_types_and_a_strict_policy(http: &AdminHttp) {
    for (path, ctype) in [
        ("/", "text/html"),
        ("/hosts", "text/html"),
        ("/rounds/1", "text/html"),
        ("/assets/dashboard.css", "text/css"),
        ("/assets/dashboard.js", "text/javascript"),
    ] {
        let a = http.get(path, &[]);
        assert_eq!(a.status, 200, "{path}");
        assert!(a.header("content-type").starts_with(ctype), "{path}");
        let csp = a.header("content-security-policy");
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert_eq!(a.header("x-content-type-options"), "nosniff");
    }
    let login = http.get("/login", &[]);
    assert!(login.body.contains("<form id=login>"), "{}", login.body);
    // Every file a page links is there, its icon included.
    for page in ["/", "/hosts", "/rounds/1", "/login"] {
        let linked = linked_paths(&http.get(page, &[]).body);
        assert!(
            linked.iter().any(|p| p == "/favicon.svg"),
            "{page}: {linked:?}"
        );
        for path in linked {
            assert_eq!(http.get(&path, &[]).status, 200, "{page} links {path}");
        }
    }
    assert!(http
        .get("/favicon.svg", &[])
        .header("content-type")
        .starts_with("image/svg+xml"));
    let script = http.get("/assets/login.js", &[]);
    assert!(script.header("content-type").starts_with("text/javascript"));
    // The pages hold no data and no credential; no cookie is set.
    for path in ["/", "/hosts", "/login"] {
        let a = http.get(path, &[]);
        assert_eq!(a.header("set-cookie"), "", "{path}");
        assert!(!a.body.contains(&http.token), "{path}");
    }
}

/// A revoke with the session from another page (another loopback port's
/// Origin, or none) is refused with 403 and changes nothing; from the
/// dashboard's own page, done. The CLI's bearer token needs no Origin.
fn a_revoke_needs_the_dashboards_own_origin(http: &AdminHttp, session: &str) {
    let id = http.host("alpha")["id"].as_u64().expect("id");
    let path = format!("/api/hosts/{id}/revoke");
    for headers in [
        vec![("Authorization", session)],
        vec![("Authorization", session), ("Origin", "http://127.0.0.1:1")],
        vec![("Authorization", session), ("Origin", "null")],
    ] {
        let a = http.post(&path, &headers, "");
        assert_eq!(a.status, 403, "{headers:?}: {}", a.body);
        assert!(a.body.contains("Origin"), "{}", a.body);
        assert_eq!(http.host("alpha")["revoked"], false, "changed nothing");
    }
    let a = http.post(
        &path,
        &[("Authorization", session), ("Origin", &http.base)],
        "",
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["name"], "alpha");
    assert_eq!(http.host("alpha")["revoked"], true);
    // The CLI's bearer token needs none (no browser sends it).
    let x = http.host(HOSTILE_NAME)["id"].as_u64().expect("id");
    let a = http.post(
        &format!("/api/hosts/{x}/revoke"),
        &[("Authorization", &http.bearer())],
        "",
    );
    assert_eq!(a.status, 200, "{}", a.body);
}

#[test]
fn a_browser_logs_in_watches_a_running_round_and_revokes_a_host() {
    if let Some(missing) = browser::available() {
        tool_missing(missing, "drive the dashboard in headless Chromium");
        return;
    }
    let g = Grid::start(92, 10);
    g.import_sites();
    let http = AdminHttp::of(&g);
    let code = last_line(&g.admin_ok(&["invite", "--uses", "3", "--expires", "1h"]));
    for (home, name) in [
        ("worker", "worker"),
        ("spare", "spare"),
        ("x", HOSTILE_NAME),
    ] {
        join_named(&g, home, name, &code);
    }
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", DELAY_MS]));
    let b = Browser::start().expect("start headless Chromium");
    let shots = browser::screenshot_dir();
    let mut urls = vec![];

    log_in(&b, &http, &mut urls);
    // The crawl starts once the browser looks: the round runs while it does.
    let _worker = g.run_once("worker", 2, &[]);
    overview_updates_live(&b, &round);
    shot(&b, &shots, "overview");
    round_page_sorts_and_filters(&b, &round, &mut urls);
    shot(&b, &shots, "round");
    hosts_page_revokes_after_confirming(&b, &http, &mut urls);
    shot(&b, &shots, "hosts");
    pages_fit_a_phone(&b, &http, &round);
    shot(&b, &shots, "phone");
    logs_out(&b, &http);

    // The token was never in a URL: not visited, not fetched by a page.
    let fetched = b
        .script(
            "return performance.getEntries().map(e => e.name);",
            json!([]),
        )
        .expect("entries");
    urls.extend(
        fetched
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u.as_str().map(str::to_string)),
    );
    assert!(urls.len() > 5, "{urls:?}");
    for u in &urls {
        assert!(!u.contains(&http.token), "the token in a URL: {u}");
    }
}

/// Save a screenshot of the page's top-left as `dir/name.png`.
fn shot(b: &Browser, dir: &std::path::Path, name: &str) {
    b.script(
        "window.scrollTo(0, 0); document.querySelectorAll('.scroll').forEach(e => e.scrollLeft = 0);",
        json!([]),
    )
    .expect("scroll");
    let saved = b
        .screenshot(&dir.join(format!("{name}.png")))
        .expect("screenshot");
    browser::keep_for_docs(name, &saved);
}

/// Not logged in, a page sends the browser to the login page; a wrong
/// token is refused; the right one opens the overview, with the session
/// in the origin's storage and no cookie.
fn log_in(b: &Browser, http: &AdminHttp, urls: &mut Vec<String>) {
    b.goto(&format!("{}/", http.base)).expect("open");
    let field = b
        .wait_find("#login input[name=token]", PAGE_WAIT)
        .expect("login form");
    assert_eq!(
        b.current_url().expect("url"),
        format!("{}/login", http.base)
    );
    b.type_into(&field, "not-the-token").expect("type");
    b.click(&b.find("button[type=submit]").expect("button"))
        .expect("submit");
    b.wait_true(
        "the refusal",
        "return !document.getElementById('note').hidden;",
        PAGE_WAIT,
    )
    .expect("refusal");
    let note = b.find("#note").expect("note");
    assert_eq!(b.text(&note).expect("note"), "That is not the admin token.");
    urls.push(b.current_url().expect("url"));
    let field = b.find("input[name=token]").expect("login form again");
    b.type_into(&field, &http.token).expect("type");
    b.click(&b.find("button[type=submit]").expect("button"))
        .expect("submit");
    b.wait_find("#rounds", PAGE_WAIT)
        .expect("overview after login");
    let url = b.current_url().expect("url");
    assert_eq!(url, format!("{}/", http.base));
    urls.push(url);
    let kept = b
        .script(
            "return [document.cookie, localStorage.getItem('beebot-admin-session') || ''];",
            json!([]),
        )
        .expect("storage");
    assert_eq!(kept[0], "", "no cookie");
    assert_eq!(kept[1].as_str().map(str::len), Some(64), "{kept}");
}

/// "Log out" ends the session on the server and in the browser, which
/// goes to the login page.
fn logs_out(b: &Browser, http: &AdminHttp) {
    b.goto(&format!("{}/", http.base)).expect("open");
    b.wait_find("#rounds", PAGE_WAIT).expect("overview");
    let session = b
        .script(
            "return localStorage.getItem('beebot-admin-session');",
            json!([]),
        )
        .expect("storage");
    let session = format!("Session {}", session.as_str().expect("a session"));
    assert_eq!(
        http.get("/api/status", &[("Authorization", &session)])
            .status,
        200
    );
    b.click(&b.find("#logout").expect("log out button"))
        .expect("log out");
    b.wait_find("#login input[name=token]", PAGE_WAIT)
        .expect("the login page");
    let left = b
        .script(
            "return localStorage.getItem('beebot-admin-session');",
            json!([]),
        )
        .expect("storage");
    assert_eq!(left, Value::Null, "the session is gone here");
    assert_eq!(
        http.get("/api/status", &[("Authorization", &session)])
            .status,
        401,
        "and on the server"
    );
}

/// A page script's number (text with separators).
const NUMBER_OF: &str =
    "const n = (id) => Number(document.getElementById(id).textContent.replace(/,/g, ''));";

/// The overview shows the running round, its components alive, and numbers
/// that change without a reload.
fn overview_updates_live(b: &Browser, round: &str) {
    b.wait_true(
        "the running round listed",
        &format!("const r = document.querySelector('#rounds tr[data-round=\"{round}\"]'); return !!r && r.cells[1].textContent === 'running';"),
        PAGE_WAIT,
    )
    .expect("round row");
    b.wait_true(
        "components alive",
        "const s = [...document.querySelectorAll('#components li')].map(l => l.dataset.state); return s.length === 4 && s.every(x => x === 'ok');",
        PAGE_WAIT,
    )
    .expect("components");
    b.script("window.notReloaded = true;", json!([]))
        .expect("mark");
    let first = b
        .script(&format!("{NUMBER_OF} return n('jobs-done') * 1e6 + Number(document.querySelector('#rounds tr[data-round=\"{round}\"]').cells[9].textContent.replace(/,/g, ''));"), json!([]))
        .expect("numbers");
    b.wait_true(
        "numbers changing without a reload",
        &format!("{NUMBER_OF} const now = n('jobs-done') * 1e6 + Number(document.querySelector('#rounds tr[data-round=\"{round}\"]').cells[9].textContent.replace(/,/g, '')); return window.notReloaded === true && now !== {first};"),
        Duration::from_secs(90),
    )
    .expect("live numbers");
    assert!(
        b.script(
            "return document.querySelector('meta[http-equiv]') === null;",
            json!([])
        )
        .expect("meta")
            == Value::Bool(true)
    );
}

/// The round's page: its progress bar and ETA, every site; sorting by a
/// column and filtering by text and by state.
fn round_page_sorts_and_filters(b: &Browser, round: &str, urls: &mut Vec<String>) {
    b.click(
        &b.find(&format!("#rounds tr[data-round=\"{round}\"] a"))
            .expect("round link"),
    )
    .expect("open round");
    b.wait_true(
        "sites listed",
        "return document.querySelectorAll('#sites tbody tr').length === 10;",
        PAGE_WAIT,
    )
    .expect("sites");
    urls.push(b.current_url().expect("url"));
    let eta = b.find("#eta").expect("eta");
    assert!(b.text(&eta).expect("eta").starts_with("ETA"));
    let how = b
        .script("return document.getElementById('eta').title;", json!([]))
        .expect("title");
    assert!(how.as_str().unwrap_or("").contains("scheduler"), "{how}");
    assert_eq!(
        b.script("return document.getElementById('progress').max;", json!([]))
            .expect("progress"),
        json!(1)
    );
    // Sort by pages: the largest first, then smallest first.
    let pages = "return [...document.querySelectorAll('#sites tbody tr')].map(r => Number(r.cells[3].textContent.replace(/,/g, '')));";
    b.click(&b.find("#sites th[data-key=pages]").expect("th"))
        .expect("sort");
    let down = b.script(pages, json!([])).expect("pages");
    let down: Vec<f64> = serde_json::from_value(down).expect("numbers");
    assert!(down.windows(2).all(|w| w[0] >= w[1]), "{down:?}");
    b.click(&b.find("#sites th[data-key=pages]").expect("th"))
        .expect("sort");
    let up: Vec<f64> =
        serde_json::from_value(b.script(pages, json!([])).expect("pages")).expect("numbers");
    assert!(up.windows(2).all(|w| w[0] <= w[1]), "{up:?}");
    // Filter by text: one site.
    let site = b
        .script(
            "return document.querySelector('#sites tbody tr').dataset.site;",
            json!([]),
        )
        .expect("site");
    let site = site.as_str().expect("site").to_string();
    b.type_into(&b.find("#filter").expect("filter"), &site)
        .expect("type");
    let shown = "return [...document.querySelectorAll('#sites tbody tr')].map(r => [r.dataset.site, r.cells[1].textContent]);";
    let rows: Vec<(String, String)> =
        serde_json::from_value(b.script(shown, json!([])).expect("rows")).expect("rows");
    assert!(
        !rows.is_empty() && rows.iter().all(|(s, _)| s.contains(&site)),
        "{rows:?}"
    );
    // By state: only that state.
    b.script(
        "const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input'));\
         const s = document.getElementById('state-filter'); s.value = arguments[0]; s.dispatchEvent(new Event('change'));",
        json!(["running"]),
    )
    .expect("state");
    let rows: Vec<(String, String)> =
        serde_json::from_value(b.script(shown, json!([])).expect("rows")).expect("rows");
    assert!(
        rows.len() < 10 && rows.iter().all(|(_, st)| st == "running"),
        "{rows:?}"
    );
    b.script(
        "const s = document.getElementById('state-filter'); s.value = ''; s.dispatchEvent(new Event('change'));",
        json!([]),
    )
    .expect("all states");
}

/// The hosts page: a hostile name is text; a revoke asks first, and the
/// server then lists the host revoked.
fn hosts_page_revokes_after_confirming(b: &Browser, http: &AdminHttp, urls: &mut Vec<String>) {
    b.click(&b.find("#nav-hosts").expect("nav")).expect("hosts");
    b.wait_true(
        "hosts listed",
        "return document.querySelectorAll('#hosts tbody tr').length === 3;",
        PAGE_WAIT,
    )
    .expect("hosts");
    urls.push(b.current_url().expect("url"));
    let names = b
        .script(
            "return [...document.querySelectorAll('#hosts td.name')].map(td => td.textContent);",
            json!([]),
        )
        .expect("names");
    assert!(
        names
            .as_array()
            .expect("names")
            .contains(&json!(HOSTILE_NAME)),
        "{names}"
    );
    assert_eq!(
        b.script(
            "return document.querySelectorAll('#hosts img').length;",
            json!([])
        )
        .expect("imgs"),
        json!(0),
        "a host name became an element"
    );
    assert_eq!(b.dialog_text(), None, "a script ran from a host name");
    let id = http.host("spare")["id"].as_u64().expect("id");
    let button = b
        .find(&format!("#hosts tr[data-host=\"{id}\"] button.revoke"))
        .expect("revoke button");
    b.click(&button).expect("click revoke");
    let asked = b.dialog_text().expect("a confirmation dialog");
    assert!(asked.contains("Revoke host spare"), "{asked}");
    b.accept_dialog().expect("confirm");
    b.wait_true(
        "the row shows the host revoked",
        &format!("const r = document.querySelector('#hosts tr[data-host=\"{id}\"]'); return !!r && r.dataset.state === 'revoked';"),
        PAGE_WAIT,
    )
    .expect("revoked row");
    assert_eq!(http.host("spare")["revoked"], true);
    assert_eq!(http.host("worker")["revoked"], false);
}

/// At a phone's width (375 px) no page is wider than the screen: tables
/// scroll inside their box.
fn pages_fit_a_phone(b: &Browser, http: &AdminHttp, round: &str) {
    b.resize(375, 812).expect("resize");
    let width = b
        .script("return window.innerWidth;", json!([]))
        .expect("width");
    assert!(width.as_u64().is_some_and(|w| w <= 400), "viewport {width}");
    for path in [
        "/hosts".to_string(),
        format!("/rounds/{round}"),
        "/".to_string(),
    ] {
        b.goto(&format!("{}{path}", http.base)).expect("open");
        b.wait_true(
            "the page filled",
            "return document.getElementById('updated').textContent.startsWith('updated');",
            PAGE_WAIT,
        )
        .expect("filled");
        let started = Instant::now();
        let fits = b
            .script(
                "return [document.documentElement.scrollWidth, window.innerWidth];",
                json!([]),
            )
            .expect("widths");
        let (scroll, inner) = (
            fits[0].as_u64().unwrap_or(u64::MAX),
            fits[1].as_u64().unwrap_or(0),
        );
        assert!(
            scroll <= inner,
            "{path}: {scroll} px wide in a {inner} px viewport ({:?})",
            started.elapsed()
        );
    }
}
