//! Helpers of the command line: the admin API client (and durations like `7d`).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{de::DeserializeOwned, Serialize};

use crate::api::ApiError;
use crate::config::DataDir;

pub use beebot_shared::util::parse_duration;

/// Client of the running server's admin API.
pub struct AdminClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

/// Largest admin answer read (an export of a big round).
const MAX_ADMIN_RESPONSE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

impl AdminClient {
    pub fn new(dir: &DataDir) -> Result<AdminClient> {
        let addr = match dir.load_runtime() {
            Some(rt) => rt.admin_addr.to_string(),
            None => dir.load_config()?.admin_listen,
        };
        let token = dir.load_admin_token()?;
        // No proxy, whatever HTTP_PROXY or ALL_PROXY say: the API is on
        // loopback and every request carries the admin token.
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .proxy(None)
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(600)))
            .build()
            .into();
        Ok(AdminClient {
            base: format!("http://{addr}"),
            token,
            agent,
        })
    }

    fn finish(
        &self,
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Vec<u8>> {
        let mut resp = resp.map_err(|e| match e {
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                anyhow::anyhow!("the server is not running (nothing listens on {}); start it with `beebot-server serve`", self.base)
            }
            other => anyhow::anyhow!("cannot reach the server's admin API at {}: {other}", self.base),
        })?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_ADMIN_RESPONSE_BYTES)
            .read_to_vec()
            .context("cannot read the server's answer")?;
        if status.is_success() {
            return Ok(body);
        }
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(e) => bail!("{}", e.error),
            Err(_) => bail!("the server answered {status}"),
        }
    }

    fn auth(&self) -> String {
        format!("Bearer {}", self.token)
    }

    pub fn get_raw(&self, path: &str) -> Result<Vec<u8>> {
        let r = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .call();
        self.finish(r)
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let body = self.get_raw(path)?;
        serde_json::from_slice(&body).context("the server's answer is not what this CLI expects")
    }

    pub fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        let r = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .header("Content-Type", "application/json")
            .send(serde_json::to_vec(body)?);
        let body = self.finish(r)?;
        serde_json::from_slice(&body).context("the server's answer is not what this CLI expects")
    }

    pub fn post_empty(&self, path: &str) -> Result<()> {
        let r = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .send_empty();
        self.finish(r).map(|_| ())
    }

    pub fn delete(&self, path: &str) -> Result<()> {
        let r = self
            .agent
            .delete(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .call();
        self.finish(r).map(|_| ())
    }
}
