//! Support for the end-to-end tests: find the real binaries, run a real server
//! in a temporary data dir, run real clients, and serve the synthetic web.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod browser;
pub mod duckdb;
pub mod hostile;
pub mod liar;
pub mod old_release;

use beebot_testkit::synth::SynthWeb;
use beebot_testkit::web::SynthWebServer;

/// Path of a workspace binary. The first call in a test process runs
/// `cargo build --bins` for the server, the client and the tools (a no-op
/// when they are fresh),
/// so the end-to-end tests never run a binary older than the code under test:
/// `cargo test` builds a package's binaries only for that package's own
/// integration tests.
pub fn bin(name: &str) -> PathBuf {
    static BUILD: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/test-xxxx (or target/<profile>/a-bin of this
    // crate) → target/<profile>
    let parent = exe.parent().expect("target dir");
    let dir = if parent.file_name().is_some_and(|n| n == "deps") {
        parent.parent().expect("target dir")
    } else {
        parent
    }
    .to_path_buf();
    BUILD.call_once(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args([
            "build",
            "--bins",
            "-p",
            "beebot-server",
            "-p",
            "beebot-client",
            "-p",
            "beebot-tools",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "cargo build of the binaries failed");
    });
    dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// Run a command to completion, with a time bound. Output is drained while it
/// runs, so a chatty command never blocks on a full pipe.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err_t = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let Some(status) = wait_or_kill(&mut child, timeout) else {
        let out = out_t.join().unwrap_or_default();
        let err = err_t.join().unwrap_or_default();
        panic!(
            "command timed out after {:?}: {:?}\nstdout:\n{}\nstderr:\n{}",
            timeout,
            cmd,
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
    };
    Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// Wait for `child` to exit, at most `timeout`; past it the child is
/// killed and `None` returned.
pub fn wait_or_kill(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll `f` until it holds; panic naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The same-origin files a page links (`href="/…"`, `src="/…"`), so a
/// test can check that each is there: a browser asks for all of them.
pub fn linked_paths(html: &str) -> Vec<String> {
    let mut paths = vec![];
    for attr in ["href=\"/", "src=\"/"] {
        let mut rest = html;
        while let Some(at) = rest.find(attr) {
            let tail = &rest[at + attr.len() - 1..];
            let end = tail.find('"').unwrap_or(tail.len());
            paths.push(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    paths
}

/// The last non-empty line of a command's stdout.
pub fn last_line(o: &Output) -> String {
    stdout(o)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The operator contact of the tests' servers (a round is refused without one).
pub const TEST_CONTACT: &str = "https://beebot.test/contact";

/// `beebot-server init` with every address on loopback (ports picked by
/// the system) and the test contact.
pub const LOOPBACK_INIT: [&str; 9] = [
    "init",
    "--public-addr",
    "127.0.0.1:0",
    "--listen",
    "127.0.0.1:0",
    "--admin-listen",
    "127.0.0.1:0",
    "--contact",
    TEST_CONTACT,
];

/// A real server process in a temporary data dir, plus a synthetic web.
pub struct Grid {
    pub dir: tempfile::TempDir,
    pub server: Option<Child>,
    pub web: Arc<SynthWeb>,
    pub web_server: SynthWebServer,
}

impl Grid {
    /// Init and start a server, and serve a synthetic web of `sites` sites.
    pub fn start(seed: u64, sites: usize) -> Grid {
        Grid::start_with(SynthWeb::generate(seed, sites))
    }

    /// Init and start a server, and serve `web` (e.g. sites of chosen sizes).
    pub fn start_with(web: SynthWeb) -> Grid {
        let mut g = Grid::unstarted(tempfile::tempdir().expect("tempdir"), web);
        let o = g.admin(&LOOPBACK_INIT);
        assert!(o.status.success(), "init failed: {}", stderr(&o));
        // Most tests run one client, and a result is validated by another
        // host's scan: validation is on per round (`--validate`) where a
        // test is about it.
        let dir = beebot_server::config::DataDir(g.data_dir());
        let mut cfg = dir.load_config().expect("config");
        cfg.round.validate = beebot_server::validate::ValidateMode::Off;
        dir.save_config(&cfg).expect("save config");
        g.start_server();
        // Pin the QUIC port the server picked, so a restarted server is where
        // the clients' enrolments say it is. The admin port stays free to
        // move: everything that talks to it reads `serve.json`, and a pinned
        // TCP port could be taken by another test while the server is down.
        let dir = beebot_server::config::DataDir(g.data_dir());
        let rt = dir.load_runtime().expect("serve.json");
        let mut cfg = dir.load_config().expect("config");
        cfg.listen = rt.quic_addr.to_string();
        cfg.public_addr = rt.public_addr.clone();
        dir.save_config(&cfg).expect("save config");
        g
    }

    /// A grid serving `sites` sites of `pages` pages each, every answer
    /// taking `answer_ms` (0: at once).
    pub fn of_sites(seed: u64, sites: usize, pages: usize, answer_ms: u64) -> Grid {
        let config = beebot_testkit::synth::SynthConfig {
            min_pages_per_site: pages,
            max_pages_per_site: pages,
            crawl_delay_ms: None,
        };
        let g = Grid::start_with(SynthWeb::with_config(seed, sites, config));
        let delay = beebot_testkit::web::ResponseDelay {
            min_ms: answer_ms,
            max_ms: answer_ms,
            seed,
        };
        g.web_server
            .set_response_delay(Some(delay).filter(|_| answer_ms > 0));
        g
    }

    /// Start a server on a copy of the data dir `from` (one a release
    /// left: `tests/fixtures/`), serving `web`; nothing in it is changed
    /// before the server opens it.
    pub fn adopt(from: &Path, web: SynthWeb) -> Grid {
        let dir = tempfile::tempdir().expect("tempdir");
        copy_dir(from, &dir.path().join("server"));
        // Each file readable by its owner only, as the release left it (a
        // checkout keeps no modes; the server refuses a secret others read).
        owner_only(&dir.path().join("server"));
        let mut g = Grid::unstarted(dir, web);
        g.start_server();
        g
    }

    /// `web` served, no server started yet, in `dir`.
    fn unstarted(dir: tempfile::TempDir, web: SynthWeb) -> Grid {
        let web = Arc::new(web);
        let web_server = SynthWebServer::start(web.clone()).expect("synthetic web");
        Grid {
            dir,
            server: None,
            web,
            web_server,
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("server")
    }

    /// Start (or restart) `beebot-server serve` and wait until it listens.
    pub fn start_server(&mut self) {
        let runtime = self.data_dir().join("serve.json");
        let _ = std::fs::remove_file(&runtime);
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log");
        let child = Command::new(bin("beebot-server"))
            .args(["serve", "--data-dir"])
            .arg(self.data_dir())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn server");
        self.server = Some(child);
        let start = Instant::now();
        while !runtime.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "server did not start: {}",
                self.server_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Run a `beebot-server` command on this data dir.
    pub fn admin(&self, args: &[&str]) -> Output {
        run(
            Command::new(bin("beebot-server"))
                .args(args)
                .arg("--data-dir")
                .arg(self.data_dir()),
            Duration::from_secs(300),
        )
    }

    /// Like [`Grid::admin`], asserting success.
    pub fn admin_ok(&self, args: &[&str]) -> Output {
        let o = self.admin(args);
        assert!(
            o.status.success(),
            "beebot-server {args:?} failed:\nstdout: {}\nstderr: {}",
            stdout(&o),
            stderr(&o)
        );
        o
    }

    /// Home dir of client `name`.
    pub fn home(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("client-{name}"))
    }

    /// A `beebot` command for client `name`. Its CPU budget is a whole core
    /// ([`LAB_CPU_PERCENT`]): a debug build crawling at delay 0 needs far
    /// more than the default 2%, and the tests are about what it does, not
    /// what it costs (`concurrency` tests the budget itself).
    pub fn client_cmd(&self, name: &str, args: &[&str]) -> Command {
        let mut c = Command::new(bin("beebot"));
        c.args(args)
            .arg("--home")
            .arg(self.home(name))
            .env("BEEBOT_CPU_PERCENT", LAB_CPU_PERCENT);
        c
    }

    pub fn client(&self, name: &str, args: &[&str]) -> Output {
        run(&mut self.client_cmd(name, args), Duration::from_secs(300))
    }

    /// The crawl flags every test client needs: loopback allowed, synthetic hosts mapped.
    pub fn crawl_flags(&self) -> Vec<String> {
        vec![
            "--allow-private".into(),
            "--resolve".into(),
            format!("*.synth.test={}", self.web_server.addr()),
        ]
    }

    /// Write the target set to a file and import it.
    pub fn import_sites(&self) {
        let path = self.dir.path().join("sites.txt");
        let mut text = String::from("# synthetic target set\n\n");
        for h in self.web.site_hosts() {
            text.push_str(&format!("http://{h}/\n"));
        }
        std::fs::write(&path, text).expect("write sites");
        self.admin_ok(&["sites", "import", path.to_str().expect("path")]);
    }

    /// Export a round as TSV and parse its rows (header checked), in the
    /// order exported, repeats kept ([`assert_same_rows`] refuses them).
    pub fn export_rows(&self, round: &str) -> Vec<Vec<String>> {
        let out = self.dir.path().join(format!("export-{round}.tsv"));
        self.admin_ok(&[
            "export",
            "--round",
            round,
            "--format",
            "tsv",
            "--out",
            out.to_str().expect("path"),
        ]);
        let text = std::fs::read_to_string(&out).expect("export");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("site\tsource_url\ttarget_url\ttarget_host\ttag\tnofollow\tanchor_text")
        );
        lines
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }

    /// The synthetic web's truth as export rows.
    pub fn truth_rows(&self) -> BTreeSet<Vec<String>> {
        self.web
            .truth()
            .into_iter()
            .map(|(site, r)| {
                vec![
                    site,
                    r.source_url.clone(),
                    r.target_url.clone(),
                    beebot_shared::export::target_host(&r.target_url),
                    r.tag.as_str().to_string(),
                    r.nofollow.to_string(),
                    r.anchor_text.clone(),
                ]
            })
            .collect()
    }

    /// Wait (at most `timeout`, e.g. "240s") until round `round` is over;
    /// fail with the server's log otherwise.
    pub fn wait_round(&self, round: &str, timeout: &str) {
        let o = self.admin(&["round", "wait", round, "--timeout", timeout]);
        assert!(
            o.status.success(),
            "round {round} wait: {}\n{}",
            stderr(&o),
            self.server_log()
        );
    }

    /// An invite code for `uses` hosts, valid for an hour.
    pub fn invite(&self, uses: u32) -> String {
        let o = self.admin_ok(&["invite", "--uses", &uses.to_string(), "--expires", "1h"]);
        let code = last_line(&o);
        assert!(code.starts_with("beebot2-"), "invite code: {code}");
        code
    }

    /// `beebot join` for client `name`; returns its host id.
    pub fn join(&self, name: &str, code: &str) -> u64 {
        let o = self.client(name, &["join", code, "--name", name]);
        assert!(o.status.success(), "join {name} failed: {}", stderr(&o));
        // "joined ADDR as host N (NAME)"
        stdout(&o)
            .split(" as host ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .expect("host id in join output")
    }

    /// Start `beebot run --once` for client `name` with `slots` and the
    /// crawl flags; its stderr goes to a file (a pipe nobody reads could
    /// fill and stall it).
    pub fn run_once(&self, name: &str, slots: u32, extra: &[&str]) -> ClientProc {
        let slots = slots.to_string();
        let mut args = vec!["run", "--once", "--slots", &slots];
        let flags = self.crawl_flags();
        args.extend(flags.iter().map(String::as_str));
        args.extend(extra);
        let log = self.dir.path().join(format!("client-{name}.stderr"));
        let child = self
            .client_cmd(name, &args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn client");
        ClientProc {
            child: Some(child),
            log,
        }
    }

    /// Start `beebot run` with `run_args` and the crawl flags for client
    /// `name`, at info level without colours, its stderr appended to `log`.
    pub fn spawn_run(&self, name: &str, run_args: &[&str], log: &Path) -> Child {
        let mut args = vec!["run"];
        args.extend(run_args);
        let flags = self.crawl_flags();
        args.extend(flags.iter().map(String::as_str));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("client log");
        self.client_cmd(name, &args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("spawn client")
    }

    /// `round show ID --json`.
    /// `beebot status --json` of client `name`.
    pub fn status_json(&self, name: &str) -> serde_json::Value {
        let o = self.client(name, &["status", "--json"]);
        assert!(o.status.success(), "status: {}", stderr(&o));
        serde_json::from_str(&stdout(&o)).expect("status json")
    }

    pub fn round_json(&self, id: &str) -> serde_json::Value {
        let o = self.admin_ok(&["round", "show", id, "--json"]);
        serde_json::from_str(&stdout(&o)).expect("round json")
    }

    /// Stop the server as a service manager does (SIGTERM) and wait for it
    /// to exit: it ends its work and syncs its store.
    pub fn stop_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let o = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status()
                .expect("kill -TERM");
            assert!(o.success(), "kill -TERM failed");
            let start = Instant::now();
            while c.try_wait().expect("wait").is_none() {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "server did not stop on SIGTERM: {}",
                    self.server_log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Kill the server process now (SIGKILL).
    pub fn kill_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Grid {
    fn drop(&mut self) {
        self.kill_server();
    }
}

/// The CPU budget of the tests' clients (`cpu_percent`): a whole core.
pub const LAB_CPU_PERCENT: &str = "100";

/// Set to `1` to let a test that needs a system tool (`unshare`,
/// `systemd-analyze`) pass where the tool is missing, saying it skipped.
/// Unset, a missing tool fails the test: CI has them all.
pub const ALLOW_MISSING_TOOLS: &str = "BEEBOT_ALLOW_MISSING_TOOLS";

/// `tool`, which the test needs to `needed_for`, is not available: fail
/// naming it, unless [`ALLOW_MISSING_TOOLS`] is `1` (then say the test is
/// skipped; the caller returns).
pub fn tool_missing(tool: &str, needed_for: &str) {
    let allowed = std::env::var(ALLOW_MISSING_TOOLS).is_ok_and(|v| v == "1");
    assert!(
        allowed,
        "`{tool}` is not available, and this test needs it to {needed_for}: \
         install it, or set {ALLOW_MISSING_TOOLS}=1 to skip the test"
    );
    eprintln!("skipped ({ALLOW_MISSING_TOOLS}=1): `{tool}` is not available to {needed_for}");
}

/// Compare exported rows with the truth: no row exported twice, and the
/// same rows, describing the first differences.
pub fn assert_same_rows(got: &[Vec<String>], want: &BTreeSet<Vec<String>>) {
    let got = distinct_rows(got);
    if &got == want {
        return;
    }
    let missing: Vec<_> = want.difference(&got).take(10).collect();
    let extra: Vec<_> = got.difference(want).take(10).collect();
    panic!(
        "export differs from the truth: {} rows exported, {} true\nmissing (first 10): {missing:#?}\nextra (first 10): {extra:#?}",
        got.len(),
        want.len()
    );
}

/// The exported rows as a set, asserting that no row is exported twice.
pub fn distinct_rows(rows: &[Vec<String>]) -> BTreeSet<Vec<String>> {
    let mut distinct = BTreeSet::new();
    let repeated: Vec<&Vec<String>> = rows.iter().filter(|r| !distinct.insert(*r)).collect();
    assert!(
        repeated.is_empty(),
        "the export repeats {} row(s) (first 10): {:#?}",
        repeated.len(),
        &repeated[..repeated.len().min(10)]
    );
    distinct.into_iter().cloned().collect()
}

/// A running `beebot` process; killed when dropped (a failed test leaves
/// nothing running).
pub struct ClientProc {
    pub child: Option<Child>,
    /// Its stderr.
    pub log: PathBuf,
}

impl ClientProc {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for it to exit, asserting success.
    pub fn wait_ok(mut self, what: &str) {
        let mut child = self.child.take().expect("running client");
        let status = child.wait().expect("client");
        assert!(
            status.success(),
            "{what} failed ({status}):\n{}",
            self.log_text()
        );
    }

    /// SIGKILL it now.
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ClientProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `n` connections to `addr` that each send half a request header and
/// nothing more (a slowloris), all taken by the listen backlog.
pub fn half_sent_headers(addr: std::net::SocketAddr, n: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    let held: Vec<std::net::TcpStream> = (0..n)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(addr).ok()?;
            s.write_all(b"GET /api/status HTTP/1.1\r\nHost: ").ok()?;
            Some(s)
        })
        .collect();
    assert_eq!(held.len(), n, "the backlog takes them all");
    held
}

/// Every one of `held` is closed by the server before `deadline`.
pub fn assert_all_closed_by(held: &mut [std::net::TcpStream], deadline: std::time::Instant) {
    use std::io::Read;
    for s in held.iter_mut() {
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .expect("timeout");
        let mut buf = [0u8; 512];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(_) => assert!(
                    std::time::Instant::now() < deadline,
                    "a half-sent header held open"
                ),
            }
        }
    }
}

/// File descriptors process `pid` holds now (Linux).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Copy the directory `from` to `to` (created), files and directories only.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// Make every file under `dir` readable and writable by its owner only.
pub fn owner_only(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("file type").is_dir() {
            owner_only(&entry.path());
        } else {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        }
    }
}
