//! Helpers of the command line: the admin API client (never through a
//! proxy: the token stays on loopback), `round wait`'s progress line, and
//! durations like `7d`.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{de::DeserializeOwned, Serialize};

use crate::api::ApiError;
use crate::config::DataDir;
use beebot_shared::util::human_duration;

pub use beebot_shared::util::parse_duration;

pub use crate::durations::{typed_duration, BadDuration, TypedDuration};

/// How far a round is: `round wait`'s progress line.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub round: u64,
    pub total: usize,
    pub done: usize,
    pub failed: usize,
    pub running: usize,
    /// Open jobs whose site is scanned and whose result waits for (or is
    /// in) another host's check ([`crate::api::JobCounts::scanned_to_check`]).
    pub checking: usize,
    /// Why the round cannot end as things are ([`crate::api::waiting_note`]).
    pub waiting: Option<String>,
    /// Pages of every accepted scan and of the running scans' last reports.
    pub pages: u64,
    /// Pages the open jobs are still expected to take: the scheduler's
    /// estimates (each site's last scan, fixed at round start) less what
    /// their running scans reported.
    pub pages_left: f64,
    /// Since the round started.
    pub elapsed: Duration,
}

impl Progress {
    pub fn of(d: &crate::api::RoundDetail, now_ms: u64) -> Progress {
        let pages_left = d
            .jobs
            .iter()
            .filter(|j| !j.state.is_final())
            .map(|j| {
                let running = j
                    .running_attempts()
                    .map(|a| a.pages.saturating_sub(j.parts_of(a).0))
                    .max()
                    .unwrap_or(0);
                (j.est_pages - running as f64).max(0.0)
            })
            .sum();
        Progress {
            round: d.round.id,
            total: d.counts.total,
            done: d.counts.done,
            failed: d.counts.failed,
            running: d.counts.running,
            checking: d.counts.scanned_to_check,
            waiting: d.waiting.clone(),
            pages: d.counts.pages,
            pages_left,
            elapsed: Duration::from_millis(now_ms.saturating_sub(d.round.created_ms)),
        }
    }

    /// Time left at the rate of pages so far, once there is a rate and
    /// while a scan runs: with none running, the rate so far promises
    /// nothing (the round waits for hosts, or for a check).
    pub fn eta(&self) -> Option<Duration> {
        let secs = self.elapsed.as_secs_f64();
        if self.pages == 0
            || secs < 1.0
            || self.running == 0
            || self.done + self.failed >= self.total
        {
            return None;
        }
        let rate = self.pages as f64 / secs;
        Duration::try_from_secs_f64(self.pages_left / rate).ok()
    }

    pub fn line(&self) -> String {
        let open = self.done + self.failed < self.total;
        let eta = match self.eta() {
            _ if open && self.waiting.is_some() => {
                format!(", waiting: {}", self.waiting.as_deref().unwrap_or_default())
            }
            Some(left) => format!(", about {} left", human_duration(left)),
            None if open && self.running == 0 && self.checking > 0 => format!(
                ", waiting: {} {} a check by another host",
                self.checking,
                if self.checking == 1 {
                    "result waits for"
                } else {
                    "results wait for"
                }
            ),
            None if open && self.running == 0 => ", waiting for a host to ask".to_string(),
            None => String::new(),
        };
        let checked = if self.checking > 0 {
            format!(", {} scanned waiting for a check", self.checking)
        } else {
            String::new()
        };
        format!(
            "round {}: {}/{} jobs done, {} failed, {} running{checked}; {} pages; {} elapsed{eta}",
            self.round,
            self.done,
            self.total,
            self.failed,
            self.running,
            self.pages,
            human_duration(self.elapsed)
        )
    }
}

/// `text` as one URL path segment: every byte but the unreserved ones
/// percent-encoded (a host name may hold spaces, `/` or `+`).
pub fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `ms` (Unix time) as `2026-12-14 21:00 UTC`.
pub fn utc_minute(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
        .map_or_else(
            || "a time out of range".to_string(),
            |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
        )
}

/// Client of the running server's admin API.
pub struct AdminClient {
    base: String,
    token: String,
    agent: ureq::Agent,
}

/// Largest admin answer read whole (streamed exports have no such bound).
const MAX_ADMIN_RESPONSE_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// How long a streamed answer may stay silent before the read fails (a
/// streamed export has no overall deadline: a big round takes its time).
const STREAM_READ_TIMEOUT: Duration = Duration::from_secs(300);

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

    /// GET `path` and read its body as it arrives (an export): an error
    /// answer is read whole and said; a body that breaks off is a read
    /// error of the returned reader, never a silent end.
    pub fn get_stream(
        &self,
        path: &str,
    ) -> Result<(ureq::http::HeaderMap, ureq::BodyReader<'static>)> {
        let resp = self
            .agent
            .get(format!("{}{path}", self.base))
            .config()
            .timeout_global(None)
            .timeout_per_read(Some(STREAM_READ_TIMEOUT))
            .build()
            .header("Authorization", self.auth())
            .call();
        match resp {
            Ok(r) if r.status().is_success() => {
                let headers = r.headers().clone();
                Ok((headers, r.into_body().into_reader()))
            }
            other => self
                .finish(other)
                .and_then(|_| bail!("the server's answer ended early")),
        }
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

    /// The admin API's base URL (`http://127.0.0.1:4480`), where the dashboard is.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn delete_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let r = self
            .agent
            .delete(format!("{}{path}", self.base))
            .header("Authorization", self.auth())
            .call();
        let body = self.finish(r)?;
        serde_json::from_slice(&body).context("the server's answer is not what this CLI expects")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_durations_keep_their_text_and_need_a_unit() {
        let d = typed_duration(" 14d ").expect("14d");
        assert_eq!(d.text, "14d");
        assert_eq!(d.value, Duration::from_secs(14 * 86400));
        let e = typed_duration("14").unwrap_err().to_string();
        assert!(e.contains("has no unit"), "{e}");
        let e = d
            .within("--expires", &crate::config::INVITE_EXPIRY, false)
            .map(|_| ());
        assert_eq!(e, Ok(()));
    }

    #[test]
    fn progress_says_jobs_pages_and_time_left_at_the_rate_so_far() {
        let mut p = Progress {
            round: 3,
            total: 40,
            done: 12,
            failed: 1,
            running: 4,
            checking: 0,
            waiting: None,
            pages: 600,
            pages_left: 1200.0,
            elapsed: Duration::from_secs(300),
        };
        // 600 pages in 5 minutes: 1,200 more take 10 minutes.
        assert_eq!(p.eta(), Some(Duration::from_secs(600)));
        assert_eq!(
            p.line(),
            "round 3: 12/40 jobs done, 1 failed, 4 running; 600 pages; 5m elapsed, about 10m left"
        );
        // No rate yet: no guess.
        p.pages = 0;
        assert_eq!(p.eta(), None);
        assert!(!p.line().contains("left"), "{}", p.line());
        // Nothing running: no time is promised, the line says what it waits for.
        p.pages = 600;
        p.running = 0;
        assert_eq!(p.eta(), None);
        assert!(
            p.line().ends_with("5m elapsed, waiting for a host to ask"),
            "{}",
            p.line()
        );
        p.checking = 2;
        assert!(
            p.line()
                .ends_with("5m elapsed, waiting: 2 results wait for a check by another host"),
            "{}",
            p.line()
        );
        assert!(p
            .line()
            .contains("0 running, 2 scanned waiting for a check; 600 pages"));
        // No host can make the check: the line says so, and how to trial.
        p.waiting = Some("one host: start rounds with --validate off".into());
        assert!(
            p.line()
                .ends_with("waiting: one host: start rounds with --validate off"),
            "{}",
            p.line()
        );
    }

    #[test]
    fn path_segments_keep_spaces_slashes_and_pluses() {
        assert_eq!(path_segment("pc-1.lab"), "pc-1.lab");
        assert_eq!(path_segment("my pc/2+x"), "my%20pc%2F2%2Bx");
        assert_eq!(path_segment("[::1]:8080"), "%5B%3A%3A1%5D%3A8080");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn times_are_printed_to_the_minute_in_utc() {
        assert_eq!(utc_minute(1_797_282_000_000), "2026-12-14 21:00 UTC");
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
    }

    /// A streamed answer that breaks off is a read error of the body, never
    /// a short body that looks whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_answer_that_breaks_off_is_an_error() {
        use crate::export::stream::{spawn, CHUNK_BYTES};
        use std::io::{Read, Write};
        let broken = || async {
            spawn("test export".into(), |out| {
                out.write_all(&vec![b'r'; 3 * CHUNK_BYTES])?;
                Err::<(), _>(std::io::Error::other("link file damaged"))
            })
        };
        let whole = || async { spawn("test export".into(), |out| out.write_all(b"row\n")) };
        let app = axum::Router::new()
            .route("/broken", axum::routing::get(broken))
            .route("/whole", axum::routing::get(whole));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let read = move |path: &'static str| {
            let c = AdminClient {
                base: format!("http://{addr}"),
                token: "t".into(),
                agent: ureq::Agent::new_with_defaults(),
            };
            let mut buf = Vec::new();
            c.get_stream(path)?.1.read_to_end(&mut buf)?;
            Ok::<_, anyhow::Error>(buf)
        };
        let (broken, whole) =
            tokio::task::spawn_blocking(move || (read("/broken"), read("/whole")))
                .await
                .expect("join");
        assert!(
            broken.is_err(),
            "{} bytes read as whole",
            broken.map_or(0, |b| b.len())
        );
        assert_eq!(whole.expect("whole"), b"row\n");
    }
}
