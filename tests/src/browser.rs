//! A small WebDriver client for the dashboard's browser tests: it starts
//! `chromedriver` on a free loopback port and drives headless Chromium
//! (new session, navigate, find, click, type, run a script, screenshot,
//! accept a dialog). WebDriver is JSON over HTTP; this speaks it with
//! `ureq`, never through a proxy, every call under [`CALL_TIMEOUT`].
//!
//! Invariants: each [`Browser`] has its own fresh profile directory and its
//! own driver process, both gone when it is dropped. It never reaches
//! anything but loopback: Chromium runs with background networking, sync,
//! component updates and QUIC off.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// Debian's Chromium and its driver.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Longest one WebDriver call may take (a new session starts Chromium).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest the driver may take to listen.
pub const DRIVER_START_TIMEOUT: Duration = Duration::from_secs(20);
/// The window of the desktop checks.
pub const DESKTOP: (u32, u32) = (1366, 768);
/// The W3C name of an element reference in WebDriver's JSON.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Whether Chromium and chromedriver are installed.
pub fn available() -> Option<&'static str> {
    [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .find(|p| !Path::new(p).exists())
}

/// A headless Chromium session behind its own chromedriver.
pub struct Browser {
    driver: Child,
    base: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

/// An element of the current page.
#[derive(Clone, Debug)]
pub struct Element(String);

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Browser {
    /// Start chromedriver and a headless Chromium of [`DESKTOP`] size.
    pub fn start() -> Result<Browser> {
        let port = free_port()?;
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start chromedriver")?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .http_status_as_error(false)
            .timeout_global(Some(CALL_TIMEOUT))
            .build()
            .into();
        let profile = tempfile::tempdir()?;
        let mut b = Browser {
            driver,
            base: format!("http://127.0.0.1:{port}"),
            agent,
            _profile: profile,
        };
        b.wait_for_driver()?;
        b.new_session()?;
        Ok(b)
    }

    fn wait_for_driver(&self) -> Result<()> {
        let start = Instant::now();
        loop {
            let ready = self
                .agent
                .get(format!("{}/status", self.base))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return Ok(());
            }
            if start.elapsed() > DRIVER_START_TIMEOUT {
                bail!("chromedriver did not listen within {DRIVER_START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn new_session(&mut self) -> Result<()> {
        let profile = self._profile.path().display().to_string();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            &format!("--user-data-dir={profile}"),
            &format!("--window-size={},{}", DESKTOP.0, DESKTOP.1),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let v = self.call("POST", "/session", Some(caps))?;
        let id = v["sessionId"].as_str().context("no session id")?;
        self.base = format!("{}/session/{id}", self.base);
        Ok(())
    }

    /// One WebDriver call; its `value`, or the driver's error.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let resp = match method {
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            _ => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let mut resp = resp.with_context(|| format!("WebDriver {method} {path}"))?;
        let status = resp.status();
        let text = resp.body_mut().read_to_string()?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{path}: {text}"))?;
        if !status.is_success() {
            bail!("WebDriver {method} {path}: {status}: {}", v["value"]);
        }
        Ok(v["value"].clone())
    }

    pub fn goto(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", Some(json!({ "url": url })))
            .map(drop)
    }

    pub fn current_url(&self) -> Result<String> {
        Ok(self
            .call("GET", "/url", None)?
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    pub fn find(&self, css: &str) -> Result<Element> {
        let v = self.call(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        let id = v[ELEMENT_KEY].as_str().context("no element id")?;
        Ok(Element(id.to_string()))
    }

    /// Wait until `css` matches an element.
    pub fn wait_find(&self, css: &str, timeout: Duration) -> Result<Element> {
        let start = Instant::now();
        loop {
            match self.find(css) {
                Ok(e) => return Ok(e),
                Err(e) if start.elapsed() > timeout => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub fn click(&self, e: &Element) -> Result<()> {
        self.call("POST", &format!("/element/{}/click", e.0), None)
            .map(drop)
    }

    pub fn type_into(&self, e: &Element, text: &str) -> Result<()> {
        self.call(
            "POST",
            &format!("/element/{}/value", e.0),
            Some(json!({ "text": text })),
        )
        .map(drop)
    }

    pub fn text(&self, e: &Element) -> Result<String> {
        Ok(self
            .call("GET", &format!("/element/{}/text", e.0), None)?
            .as_str()
            .unwrap_or("")
            .to_string())
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page.
    pub fn script(&self, script: &str, args: Value) -> Result<Value> {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Wait until `script` returns `true`.
    pub fn wait_true(&self, what: &str, script: &str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.script(script, json!([]))? == Value::Bool(true) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!("{what}: not within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The text of the open dialog (alert, confirm), if one is open.
    pub fn dialog_text(&self) -> Option<String> {
        self.call("GET", "/alert/text", None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
    }

    pub fn accept_dialog(&self) -> Result<()> {
        self.call("POST", "/alert/accept", None).map(drop)
    }

    /// Resize the window (its outer size).
    pub fn resize(&self, width: u32, height: u32) -> Result<()> {
        self.call(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .map(drop)
    }

    /// Save a PNG screenshot of the viewport to `path`.
    pub fn screenshot(&self, path: &Path) -> Result<PathBuf> {
        let v = self.call("GET", "/screenshot", None)?;
        let png = decode_base64(v.as_str().context("no screenshot")?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(path.to_path_buf())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (with padding, whitespace ignored), as WebDriver sends
/// screenshots.
pub fn decode_base64(text: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {:?}", c as char),
        } as u32)
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    let body = clean
        .strip_suffix(b"==")
        .or_else(|| clean.strip_suffix(b"="))
        .unwrap_or(&clean);
    let mut out = Vec::with_capacity(body.len() * 3 / 4);
    for chunk in body.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Ok(out)
}

/// Set to `1` to keep the screenshots the documents show in `docs/` too:
/// `BEEBOT_WRITE_SCREENSHOTS=1 cargo test -p beebot-tests --test it --
/// dashboard:: status_page::`. The documents' pictures are made by these tests.
pub const WRITE_SCREENSHOTS: &str = "BEEBOT_WRITE_SCREENSHOTS";

/// The screenshots the documents show: the browser tests' name for each,
/// and its path under `docs/`.
pub const DOC_SHOTS: &[(&str, &str)] = &[
    ("overview", "dashboard.png"),
    ("status-page-join", "img/status-page-join.png"),
    ("status-page-crawling", "img/status-page-crawling.png"),
    ("status-page-paused", "img/status-page-paused.png"),
    ("status-page-left", "img/status-page-left.png"),
];

/// With [`WRITE_SCREENSHOTS`] set, copy the shot `name` (saved at `saved`)
/// to where the documents show it, if they do.
pub fn keep_for_docs(name: &str, saved: &Path) {
    if std::env::var(WRITE_SCREENSHOTS).as_deref() != Ok("1") {
        return;
    }
    if let Some((_, path)) = DOC_SHOTS.iter().find(|(n, _)| *n == name) {
        let to = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs")
            .join(path);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("docs dir");
        std::fs::copy(saved, &to).expect("copy a screenshot into docs");
    }
}

/// Where the browser tests save their screenshots: `target/screenshots/`
/// (the target dir of the running test: `target/<profile>/deps/test-x`).
pub fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors()
        .nth(3)
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("screenshots")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every picture the documents show is one a browser test makes (so
    /// it stays current), and is there.
    #[test]
    fn the_documents_pictures_are_the_browser_tests_shots() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let tests = std::fs::read_dir(root.join("tests/it"))
            .expect("tests")
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>();
        for (name, path) in DOC_SHOTS {
            assert!(
                root.join("docs").join(path).is_file(),
                "docs/{path} is missing"
            );
            assert!(
                tests.contains(&format!("&shots, \"{name}\")")),
                "no browser test shoots {name}"
            );
        }
        for page in std::fs::read_dir(root.join("docs"))
            .expect("docs")
            .flatten()
        {
            let text = std::fs::read_to_string(page.path()).unwrap_or_default();
            for link in text.split("](").skip(1) {
                let target = link.split(')').next().unwrap_or_default();
                if target.ends_with(".png") {
                    assert!(
                        DOC_SHOTS.iter().any(|(_, p)| *p == target),
                        "{}: {target} is not made by a browser test",
                        page.path().display()
                    );
                }
            }
        }
    }

    #[test]
    fn base64_decodes_every_padding() {
        assert_eq!(decode_base64("").expect("empty"), b"");
        assert_eq!(decode_base64("TQ==").expect("1"), b"M");
        assert_eq!(decode_base64("TWE=").expect("2"), b"Ma");
        assert_eq!(decode_base64("TWFu").expect("3"), b"Man");
        assert_eq!(
            decode_base64("aGVs\nbG8gd29ybGQ=").expect("wrapped"),
            b"hello world"
        );
        assert!(decode_base64("a*b=").is_err());
    }
}
