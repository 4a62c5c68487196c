//! Serves a [`SynthWeb`] over HTTP/1.1 on a caller-owned listener, choosing the
//! site by the `Host` header: for tests, the demo and the reference site. The
//! hostile sites of [`crate::synth::hostile`] (`*.hostile.test`) are
//! served too, their big bodies generated while sent and the drip-fed one
//! really dripped, so a test can aim a crawler at them.
//!
//! [`serve`] is the async entry point (the caller owns the socket and the shutdown
//! signal); [`SynthWebServer`] wraps it for synchronous tests: it binds
//! `127.0.0.1:0`, runs its own single-threaded tokio runtime on a thread, counts
//! and logs requests, and shuts down when dropped.
//!
//! Answers may be held back like a real web server's ([`ResponseDelay`]:
//! a time drawn per page from a seeded distribution, changeable while
//! serving), for tests and benches of a client at realistic response times.
//!
//! Invariants: every answer comes from the [`SynthWeb`] it serves (a delay
//! changes when its bytes leave, never the bytes); it only answers on the
//! listener it is given and never makes a request of its own.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::synth::hostile::{self, HostileBody};
use crate::synth::SynthWeb;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, Method, Response, StatusCode};
use axum::Router;
use beebot_shared::rng::SplitMix64;
use tokio::sync::oneshot;

/// Requests kept in a [`RequestLog`]; later ones are counted but not logged.
pub const MAX_LOGGED_REQUESTS: usize = 100_000;

/// Longest a dropped [`SynthWebServer`] waits for open connections to finish
/// before the runtime is torn down with them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Largest piece of a generated body sent at once: bounds the memory one
/// hostile response holds, however big the body.
const STREAM_CHUNK_BYTES: usize = 64 * 1024;

/// Longest `Host` header or request target kept in the log.
const MAX_LOGGED_FIELD_LEN: usize = 2048;

/// Longest a [`ResponseDelay`] may hold an answer back: past a crawler's
/// request timeout a delay is an outage, which the hostile sites play.
pub const MAX_RESPONSE_DELAY_MS: u64 = 30_000;

/// How long the server takes to answer a page: drawn per page (host without
/// its port, and path) from a seeded log-uniform distribution over
/// `min_ms..=max_ms`, so most pages are quick and a few slow, as on the real
/// web, and the same page takes the same time on every request and run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseDelay {
    pub min_ms: u64,
    pub max_ms: u64,
    pub seed: u64,
}

impl ResponseDelay {
    /// The delay of `path` on `host` (a `:port` is ignored), within
    /// `min_ms..=max_ms` (both bounded by [`MAX_RESPONSE_DELAY_MS`]).
    pub fn of(&self, host: &str, path: &str) -> Duration {
        let max = self.max_ms.min(MAX_RESPONSE_DELAY_MS);
        let min = self.min_ms.min(max);
        let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
        // FNV-1a of the page, mixed with the seed by SplitMix64: fixed forever.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes().chain([0]).chain(path.bytes()) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut rng = SplitMix64::new(hash ^ self.seed);
        let u = rng.unit();
        // Log-uniform: min × (max / min)^u (uniform when min is 0).
        let ms = if min == 0 {
            u * max as f64
        } else {
            min as f64 * (max as f64 / min as f64).powf(u)
        };
        Duration::from_micros((ms * 1000.0) as u64).min(Duration::from_millis(max))
    }
}

/// The response delay a server applies now (`None`: answer at once);
/// shared with whoever changes it while it serves.
#[derive(Debug, Default)]
pub struct DelaySetting(Mutex<Option<ResponseDelay>>);

impl DelaySetting {
    pub fn new(delay: Option<ResponseDelay>) -> DelaySetting {
        DelaySetting(Mutex::new(delay))
    }

    /// Answer with `delay` from the next request on.
    pub fn set(&self, delay: Option<ResponseDelay>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = delay;
    }

    pub fn get(&self) -> Option<ResponseDelay> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One request the server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    /// When it arrived.
    pub at: Instant,
    /// When its answer was ready to send (after any response delay).
    pub answered: Instant,
    /// The `Host` header as sent (port included).
    pub host: String,
    /// Path and query as sent.
    pub path: String,
    /// The `User-Agent` header, empty when absent.
    pub user_agent: String,
    /// The status answered.
    pub status: u16,
}

/// Counts and remembers the requests a server answered (the first
/// [`MAX_LOGGED_REQUESTS`] of them), so tests can check what a crawler fetched.
#[derive(Debug, Default)]
pub struct RequestLog {
    count: AtomicU64,
    entries: Mutex<Vec<LoggedRequest>>,
}

impl RequestLog {
    /// Requests answered so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// A copy of the logged requests, in arrival order.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The logged requests, in arrival order, leaving the log empty: a
    /// reader that takes them as they come sees every request, however
    /// many (the log holds at most [`MAX_LOGGED_REQUESTS`] between takes).
    pub fn take(&self) -> Vec<LoggedRequest> {
        std::mem::take(&mut *self.entries.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn record(&self, entry: LoggedRequest) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() < MAX_LOGGED_REQUESTS {
            entries.push(entry);
        }
        // Counted under the lock, so a reader that sees the count sees the entry.
        self.count.fetch_add(1, Ordering::SeqCst);
    }
}

/// Shared by every request handler.
struct AppState {
    web: Arc<SynthWeb>,
    log: Arc<RequestLog>,
    delay: Arc<DelaySetting>,
}

/// Serve `web` on `listener` until `shutdown` completes, then finish open
/// requests and return.
pub async fn serve(
    listener: tokio::net::TcpListener,
    web: Arc<SynthWeb>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_logged(listener, web, Arc::new(RequestLog::default()), shutdown).await
}

/// [`serve`], recording every request in `log`.
pub async fn serve_logged(
    listener: tokio::net::TcpListener,
    web: Arc<SynthWeb>,
    log: Arc<RequestLog>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_delayed(listener, web, log, Arc::default(), shutdown).await
}

/// [`serve_logged`], holding each synthetic page's answer back by `delay`
/// (as set at the request's arrival; hostile sites keep their own pace).
pub async fn serve_delayed(
    listener: tokio::net::TcpListener,
    web: Arc<SynthWeb>,
    log: Arc<RequestLog>,
    delay: Arc<DelaySetting>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let state = Arc::new(AppState { web, log, delay });
    let app = Router::new().fallback(handle).with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

async fn handle(State(state): State<Arc<AppState>>, request: Request) -> Response<Body> {
    let arrived = Instant::now();
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().host())
        .unwrap_or("")
        .to_string();
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let response = match *request.method() {
        Method::GET | Method::HEAD if hostile::is_hostile_host(&host) => {
            match hostile::respond(&host, &path) {
                Some(answer) => {
                    let mut builder = Response::builder()
                        .status(answer.status)
                        .header(header::CONTENT_TYPE, answer.content_type);
                    if let Some(location) = answer.location {
                        builder = builder.header(header::LOCATION, location);
                    }
                    builder.body(hostile_body(answer.body)).unwrap_or_else(|_| {
                        plain(StatusCode::INTERNAL_SERVER_ERROR, "bad hostile response\n")
                    })
                }
                None => plain(StatusCode::NOT_FOUND, "not found\n"),
            }
        }
        Method::GET | Method::HEAD => {
            if let Some(d) = state.delay.get() {
                tokio::time::sleep(d.of(&host, &path)).await;
            }
            let answer = state.web.respond(&host, &path);
            let mut builder = Response::builder()
                .status(answer.status)
                .header(header::CONTENT_TYPE, answer.content_type);
            if let Some(location) = answer.location {
                builder = builder.header(header::LOCATION, location);
            }
            builder.body(Body::from(answer.body)).unwrap_or_else(|_| {
                plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "bad synthetic response\n",
                )
            })
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n"),
    };
    state.log.record(LoggedRequest {
        at: arrived,
        answered: Instant::now(),
        host: truncate(host),
        path: truncate(path),
        user_agent: truncate(user_agent),
        status: response.status().as_u16(),
    });
    response
}

/// A hostile body as an HTTP body: repeated parts generated
/// [`STREAM_CHUNK_BYTES`] at a time, drip-fed bytes one at a time.
fn hostile_body(body: HostileBody) -> Body {
    match body {
        HostileBody::Bytes(bytes) => Body::from(bytes),
        HostileBody::Repeat(parts) => {
            let parts: Vec<(Vec<u8>, u64)> =
                parts.into_iter().filter(|(c, _)| !c.is_empty()).collect();
            let stream = futures_util::stream::unfold(
                (parts, 0usize, 0u64),
                |(parts, mut part, mut done)| async move {
                    let mut buf = Vec::with_capacity(STREAM_CHUNK_BYTES);
                    // Each turn appends one non-empty chunk or moves to the next part.
                    while buf.len() < STREAM_CHUNK_BYTES {
                        let Some((chunk, times)) = parts.get(part) else {
                            break;
                        };
                        if done >= *times {
                            part += 1;
                            done = 0;
                            continue;
                        }
                        buf.extend_from_slice(chunk);
                        done += 1;
                    }
                    if buf.is_empty() {
                        return None;
                    }
                    Some((Ok::<_, io::Error>(Bytes::from(buf)), (parts, part, done)))
                },
            );
            Body::from_stream(stream)
        }
        HostileBody::Drip { bytes, every } => {
            let stream =
                futures_util::stream::unfold((bytes, 0usize), move |(bytes, i)| async move {
                    let byte = *bytes.get(i)?;
                    if i > 0 {
                        tokio::time::sleep(every).await;
                    }
                    Some((Ok::<_, io::Error>(Bytes::from(vec![byte])), (bytes, i + 1)))
                });
            Body::from_stream(stream)
        }
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_LOGGED_FIELD_LEN {
        let mut end = MAX_LOGGED_FIELD_LEN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// A synthetic web served on `127.0.0.1:{ephemeral}` from a thread of its own,
/// for synchronous tests. Dropping it shuts the server down.
pub struct SynthWebServer {
    addr: SocketAddr,
    log: Arc<RequestLog>,
    delay: Arc<DelaySetting>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl SynthWebServer {
    /// Bind `127.0.0.1:0` and start serving `web`.
    pub fn start(web: Arc<SynthWeb>) -> io::Result<SynthWebServer> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let log = Arc::new(RequestLog::default());
        let delay = Arc::new(DelaySetting::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let thread_log = Arc::clone(&log);
        let thread_delay = Arc::clone(&delay);
        let thread = std::thread::Builder::new()
            .name(format!("synth-web-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    let (graceful, graceful_signal) = oneshot::channel::<()>();
                    let server =
                        serve_delayed(listener, web, thread_log, thread_delay, async move {
                            let _ = graceful_signal.await;
                        });
                    // On stop: ask for a graceful end, and give it SHUTDOWN_GRACE.
                    let watchdog = async move {
                        let _ = stopped.await;
                        let _ = graceful.send(());
                        tokio::time::sleep(SHUTDOWN_GRACE).await;
                    };
                    tokio::select! {
                        result = server => result,
                        () = watchdog => Ok(()),
                    }
                })
            })?;
        Ok(SynthWebServer {
            addr,
            log,
            delay,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.log.count()
    }

    /// Hold each page's answer back by `delay` from the next request on
    /// (`None`: answer at once, the default).
    pub fn set_response_delay(&self, delay: Option<ResponseDelay>) {
        self.delay.set(delay);
    }

    /// The requests answered so far (the first [`MAX_LOGGED_REQUESTS`]).
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.log.entries()
    }

    /// Stop the server and report how serving ended.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("synthetic web server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for SynthWebServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    /// A reader that takes the log as it comes sees every request, past
    /// the entries one log holds; the count is never reset.
    #[test]
    fn taking_the_log_empties_it_and_the_count_goes_on() {
        let log = RequestLog::default();
        let entry = |path: &str| LoggedRequest {
            at: Instant::now(),
            answered: Instant::now(),
            host: "a.test".into(),
            path: path.into(),
            user_agent: String::new(),
            status: 200,
        };
        log.record(entry("/1"));
        log.record(entry("/2"));
        let taken: Vec<String> = log.take().into_iter().map(|r| r.path).collect();
        assert_eq!(taken, ["/1", "/2"]);
        assert!(log.entries().is_empty());
        log.record(entry("/3"));
        assert_eq!(log.take().len(), 1);
        assert_eq!(log.count(), 3);
    }

    /// One raw HTTP/1.1 GET (Connection: close), returning the response head and body.
    fn get(addr: SocketAddr, host: &str, path: &str) -> (String, Vec<u8>) {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: test-agent/1\r\nConnection: close\r\n\r\n"
        )
        .expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read");
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head");
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        (head, raw[split + 4..].to_vec())
    }

    #[test]
    fn serves_sites_by_host_and_counts_requests() {
        let web = Arc::new(SynthWeb::generate(7, 4));
        let server = SynthWebServer::start(Arc::clone(&web)).expect("start");
        let addr = server.addr();
        let host = format!("site0.synth.test:{}", addr.port());

        let (head, body) = get(addr, &host, "/robots.txt");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, web.respond("site0.synth.test", "/robots.txt").body);

        let (head, body) = get(addr, &host, "/");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert_eq!(body, web.respond("site0.synth.test", "/").body);

        let (head, _) = get(addr, &host, "/go/0");
        assert!(head.starts_with("HTTP/1.1 302"), "{head}");
        assert!(
            head.to_ascii_lowercase().contains("\r\nlocation: "),
            "{head}"
        );

        let (head, _) = get(addr, "nowhere.test", "/");
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");

        assert_eq!(server.requests(), 4);
        let log = server.request_log();
        assert_eq!(log.len(), 4);
        assert_eq!(log[0].path, "/robots.txt");
        assert_eq!(log[0].host, host);
        assert_eq!(log[0].user_agent, "test-agent/1");
        assert_eq!(log[2].status, 302);
        assert_eq!(log[3].status, 404);
    }

    #[test]
    fn response_delays_are_drawn_per_page_and_change_no_byte() {
        let d = ResponseDelay {
            min_ms: 50,
            max_ms: 300,
            seed: 9,
        };
        let ms: Vec<u128> = (0..2000)
            .map(|i| {
                d.of("site1.synth.test:8080", &format!("/p/{i}"))
                    .as_millis()
            })
            .collect();
        assert!(ms.iter().all(|&m| (50..=300).contains(&m)), "{ms:?}");
        // Log-uniform over 50-300 ms: the median near sqrt(50 * 300) = 122 ms.
        let mut sorted = ms.clone();
        sorted.sort_unstable();
        assert!(
            (105..=140).contains(&sorted[1000]),
            "median {}",
            sorted[1000]
        );
        // The same page takes the same time, whatever the port; another seed differs.
        assert_eq!(d.of("a.test:1", "/x"), d.of("a.test:2", "/x"));
        let other = ResponseDelay { seed: 10, ..d };
        assert!((0..50).any(|i| {
            let p = format!("/p/{i}");
            other.of("a.test", &p) != d.of("a.test", &p)
        }));

        let web = Arc::new(SynthWeb::generate(7, 2));
        let server = SynthWebServer::start(Arc::clone(&web)).expect("start");
        let host = format!("site0.synth.test:{}", server.addr().port());
        let (_, quick) = get(server.addr(), &host, "/");
        server.set_response_delay(Some(ResponseDelay {
            min_ms: 200,
            max_ms: 200,
            seed: 1,
        }));
        let started = Instant::now();
        let (_, slow) = get(server.addr(), &host, "/");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(quick, slow, "a delay changes no byte");
        let log = server.request_log();
        assert!(log[1].answered.duration_since(log[1].at) >= Duration::from_millis(200));
        assert!(log[0].answered >= log[0].at);
    }

    #[test]
    fn drop_stops_the_server() {
        let server = SynthWebServer::start(Arc::new(SynthWeb::generate(1, 1))).expect("start");
        let addr = server.addr();
        // A connection held open must not keep the server alive.
        let _idle = TcpStream::connect(addr).expect("connect");
        let started = Instant::now();
        drop(server);
        assert!(started.elapsed() < SHUTDOWN_GRACE + Duration::from_secs(2));
        assert!(TcpStream::connect(addr).is_err());
    }

    #[tokio::test]
    async fn serve_stops_on_its_shutdown_signal() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(
            listener,
            Arc::new(SynthWeb::generate(1, 1)),
            async move {
                let _ = rx.await;
            },
        ));
        let _ = tx.send(());
        let result = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops in time")
            .expect("no panic");
        assert!(result.is_ok());
    }
}
