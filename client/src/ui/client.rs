//! The command line's side of the status page's API: find the running
//! client's page (its [`super::ADDR_FILE`]), and send it a control command
//! or ask it for a login link, with the per-install secret as a bearer
//! token. Plain HTTP on loopback, never through a proxy, every call under
//! [`CALL_TIMEOUT`].
//!
//! The secret goes only to a port the home's runner holds: the address
//! file must name the pid that holds the home's run lock (a runner that
//! was killed leaves its file behind, and another local user could be
//! listening on that port by now).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::auth::Secret;

/// Longest one call to the running client may take (a `reload` reads files;
/// a `stop` answers at once).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A running client's page, as its home tells.
#[derive(Debug)]
pub struct Running {
    pub port: u16,
    secret: Secret,
}

fn not_running(data_dir: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "no running client answers here (home {}): is `beebot run` or its service running with this --home?",
        data_dir.display()
    )
}

/// The running client of `data_dir`, or why none can be reached.
pub fn find(data_dir: &Path) -> Result<Running> {
    read(data_dir, true)
}

/// The page `data_dir`'s address file names, without asking which process
/// holds the home's run lock: for a harness outside the runner's system (a
/// runner under Wine, whose Windows file locks Linux does not see). The
/// command line never uses it: see [`find`].
pub fn named_by_file(data_dir: &Path) -> Result<Running> {
    read(data_dir, false)
}

/// The page of `data_dir`'s address file, and its secret; with
/// `check_runner`, only when the file names the run lock's holder.
fn read(data_dir: &Path, check_runner: bool) -> Result<Running> {
    let addr = super::read_addr(data_dir).ok_or_else(|| not_running(data_dir))?;
    if check_runner && crate::home::runner_pid(data_dir) != Some(addr.pid) {
        return Err(not_running(data_dir));
    }
    let secret = Secret::read(data_dir).map_err(|_| not_running(data_dir))?;
    Ok(Running {
        port: addr.port,
        secret,
    })
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(CALL_TIMEOUT))
        .build()
        .into()
}

impl Running {
    /// GET `path`; the answer's JSON, or its error in words.
    pub fn get(&self, path: &str) -> Result<Value> {
        let url = self.url(path);
        let r = agent()
            .get(&url)
            .header("Authorization", &self.bearer())
            .call();
        answer(&url, r)
    }

    /// POST `body` to `path`; the answer's JSON, or its error in words.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let url = self.url(path);
        let r = agent()
            .post(&url)
            .header("Authorization", &self.bearer())
            .header("Content-Type", "application/json")
            .send(body.to_string());
        answer(&url, r)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn bearer(&self) -> String {
        format!("{}{}", super::auth::OWNER_SCHEME, self.secret.expose())
    }
}

/// The JSON of the running client's answer, or its error in words.
fn answer(url: &str, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Value> {
    let mut r = r.with_context(|| format!("the running client did not answer on {url}"))?;
    let status = r.status();
    let text = r.body_mut().read_to_string()?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("the running client answered {status}: {text}"))?;
    if !status.is_success() {
        bail!("{}", v["error"].as_str().unwrap_or(&text));
    }
    Ok(v)
}

/// Send one control command (`pause 60`, `resume`, `reload KEY`, `stop`)
/// to the running client of `data_dir`; its answer line (`ok …`).
pub fn command(data_dir: &Path, command: &str) -> Result<String> {
    let running = find(data_dir)?;
    let v = running
        .post("/api/control", &json!({ "command": command }))
        .map_err(|e| {
            // A page that is gone (a killed runner left its file) is "not running".
            if e.chain().any(|c| c.downcast_ref::<ureq::Error>().is_some()) {
                not_running(data_dir)
            } else {
                e
            }
        })?;
    let line = v["answer"].as_str().unwrap_or("").trim().to_string();
    if let Some(e) = line.strip_prefix("error: ") {
        bail!("{e}");
    }
    Ok(line)
}

/// A one-time login link to the running client's page (only a link to
/// that page is taken: it goes to a browser).
pub fn login_link(data_dir: &Path) -> Result<String> {
    let running = find(data_dir)?;
    let v = running.post("/api/login-link", &json!({}))?;
    let url = v["url"]
        .as_str()
        .context("the running client gave no login link")?;
    let code = url
        .strip_prefix(&format!("http://127.0.0.1:{}/login#code=", running.port))
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_hexdigit()))
        .with_context(|| format!("the running client gave a link that is not its page: {url}"))?;
    Ok(super::login_url(running.port, code))
}
