//! The crawler's HTTP shell: one ureq agent per crawl with the guarded resolver,
//! no automatic redirects, the configured proxy only (each target checked by
//! the proxy guard first), timeouts set, bodies read up to a limit, kept
//! connections probed once a request by a poll ([`super::kept`]).
//! https goes through rustls (ring) with the webpki root certificates.

use std::io::Read;
use std::time::Duration;

use ureq::unversioned::transport::{ConnectProxyConnector, Connector, RustlsConnector};
use ureq::Agent;
use url::Url;

use super::kept::PolledTcpConnector;
use super::resolve::{AddressRefused, GuardedResolver, ProxyGuard};
use super::CrawlerConfig;

/// What we accept, in order of preference.
const ACCEPT: &str = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.1";

/// Bytes of an unwanted body read and thrown away so the connection can be
/// reused (redirects and error pages are small); a longer body closes it.
const DRAIN_BYTES: u64 = 16 * 1024;

/// Idle connections kept in all (scopes wider than a host touch a few hosts).
const IDLE_CONNECTIONS: usize = 4;

/// Largest response header (status line and fields) accepted; a connection's
/// read buffer is this size, since a header is parsed whole from it.
pub const MAX_RESPONSE_HEADER_BYTES: usize = 64 * 1024;
/// A connection's write buffer: a request's line and fields (a URL is at
/// most 2 KiB). ureq's defaults (128 KiB each way) would hold 256 KiB per
/// kept connection, 16 MB at 64 scans.
const REQUEST_BUFFER_BYTES: usize = 16 * 1024;

/// One HTTP response, its body read only when asked for.
#[derive(Debug)]
pub struct Fetched {
    pub status: u16,
    pub location: Option<String>,
    /// The media type, lower case, parameters dropped.
    pub mime: Option<String>,
    /// The `Content-Type` header as sent (its `charset` names the encoding).
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than the limit and was cut there.
    pub truncated: bool,
    /// The body stopped arriving in time; `body` holds what came before.
    pub timed_out: bool,
}

impl Fetched {
    /// Whether the body is HTML we extract links from.
    pub fn is_html(&self) -> bool {
        is_html_mime(self.mime.as_deref())
    }
}

/// Whether a media type is one we extract links from.
pub fn is_html_mime(mime: Option<&str>) -> bool {
    matches!(mime, Some("text/html" | "application/xhtml+xml"))
}

/// `Text/HTML; charset=UTF-8` → `text/html`.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Refused(AddressRefused),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("host not found")]
    HostNotFound,
    #[error("connection refused")]
    ConnectionRefused,
    #[error("reading the body failed: {0}")]
    Body(String),
    #[error("request failed: {0}")]
    Network(String),
}

/// Which bodies to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyWanted {
    /// Bodies of 2xx HTML responses (pages).
    Html,
    /// Bodies of every 2xx response (robots.txt).
    Any2xx,
}

/// Issues the crawl's requests.
pub struct Fetcher {
    agent: Agent,
    /// Through a proxy, private addresses not allowed: checks each target
    /// (the resolver sees only the proxy).
    proxy_guard: Option<ProxyGuard>,
}

impl Fetcher {
    /// A fetcher keeping up to `connections` idle connections per host:
    /// the requests a crawl may have in flight to one host at once (one,
    /// unless the site's operator allows more).
    pub fn new(cfg: &CrawlerConfig, user_agent: &str, connections: u8) -> Fetcher {
        let per_host = usize::from(connections.max(1));
        let proxy = cfg.proxy.as_deref().and_then(|p| ureq::Proxy::new(p).ok());
        let proxy_guard = (proxy.is_some() && !cfg.allow_private)
            .then(|| ProxyGuard::new(cfg.resolve.clone(), cfg.lookup.clone(), cfg.connect_timeout));
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(proxy)
            .user_agent(user_agent)
            .accept(ACCEPT)
            .timeout_connect(Some(cfg.connect_timeout))
            // Each read and each write waits at most `read_timeout`, and
            // the whole request `request_timeout`. No deadline of its own
            // for the response head: its time left would differ at every
            // read, and a socket's timeout is set again (a system call; a
            // round trip to the wineserver under Wine) whenever it changes.
            // With these, a kept connection sets its timeouts once.
            .timeout_per_read(Some(cfg.read_timeout))
            .timeout_per_write(Some(cfg.read_timeout))
            .timeout_global(Some(cfg.request_timeout))
            .max_idle_connections(IDLE_CONNECTIONS.max(per_host))
            .max_idle_connections_per_host(per_host)
            .max_response_header_size(MAX_RESPONSE_HEADER_BYTES)
            .input_buffer_size(MAX_RESPONSE_HEADER_BYTES)
            .output_buffer_size(REQUEST_BUFFER_BYTES)
            .build();
        let proxy_host = cfg
            .proxy
            .as_deref()
            .and_then(|p| url::Url::parse(p).ok())
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()));
        let resolver = GuardedResolver::new(cfg.resolve.clone(), cfg.allow_private)
            .with_lookup(cfg.lookup.clone())
            .trusting(proxy_host);
        // ureq's default chain (an HTTP CONNECT proxy, TCP, rustls) with
        // kept connections probed once a request, by a poll (see `kept`).
        let connector =
            ().chain(ConnectProxyConnector::default())
                .chain(PolledTcpConnector)
                .chain(RustlsConnector::default());
        Fetcher {
            agent: Agent::with_parts(config, connector, resolver),
            proxy_guard,
        }
    }

    /// GET `url` within `timeout`, reading at most `max_body_bytes` of the body
    /// when `wanted` asks for it (a longer body is cut, not refused).
    pub fn get(
        &self,
        url: &Url,
        max_body_bytes: u64,
        wanted: BodyWanted,
        timeout: Duration,
    ) -> Result<Fetched, FetchError> {
        if let Some(guard) = &self.proxy_guard {
            guard.check(url).map_err(FetchError::Refused)?;
        }
        let response = self
            .agent
            .get(url.as_str())
            .config()
            .timeout_global(Some(timeout))
            .build()
            .call()
            .map_err(map_error)?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let location = header("location");
        let content_type = header("content-type");
        let mime = content_type.as_deref().map(media_type);
        let read = (200..300).contains(&status)
            && match wanted {
                BodyWanted::Any2xx => true,
                BodyWanted::Html => is_html_mime(mime.as_deref()),
            };
        let mut body = Vec::new();
        let (mut truncated, mut timed_out) = (false, false);
        if read {
            // One byte past the limit tells a cut body from one that fits.
            let result = response
                .into_body()
                .into_reader()
                .take(max_body_bytes.saturating_add(1))
                .read_to_end(&mut body);
            match result {
                Ok(_) => {}
                // What arrived before the timeout is kept (read_to_end leaves it).
                Err(e) if is_timeout(&e) => timed_out = true,
                Err(e) => return Err(FetchError::Body(e.to_string())),
            }
            if body.len() as u64 > max_body_bytes {
                body.truncate(usize::try_from(max_body_bytes).unwrap_or(usize::MAX));
                truncated = true;
            }
        } else {
            // Best effort: a failure here only costs the connection.
            let _ = std::io::copy(
                &mut response.into_body().into_reader().take(DRAIN_BYTES),
                &mut std::io::sink(),
            );
        }
        Ok(Fetched {
            status,
            location,
            mime,
            content_type,
            body,
            truncated,
            timed_out,
        })
    }
}

/// Whether a body read failed by running out of time (ureq reports its own
/// timeouts wrapped in an I/O error).
fn is_timeout(e: &std::io::Error) -> bool {
    if matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    ) {
        return true;
    }
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|inner| matches!(inner, ureq::Error::Timeout(_)))
}

fn map_error(e: ureq::Error) -> FetchError {
    match e {
        ureq::Error::Other(inner) => match inner.downcast::<AddressRefused>() {
            Ok(refused) => FetchError::Refused(*refused),
            Err(other) => FetchError::Network(other.to_string()),
        },
        ureq::Error::Timeout(t) => FetchError::Timeout(t.to_string()),
        ureq::Error::HostNotFound => FetchError::HostNotFound,
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            FetchError::ConnectionRefused
        }
        ureq::Error::TlsRequired => FetchError::Network("TLS required".into()),
        other => FetchError::Network(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types() {
        assert_eq!(media_type("Text/HTML; Charset=UTF-8"), "text/html");
        assert_eq!(
            media_type(" application/xhtml+xml "),
            "application/xhtml+xml"
        );
        assert!(is_html_mime(Some("text/html")));
        assert!(is_html_mime(Some("application/xhtml+xml")));
        assert!(!is_html_mime(Some("application/pdf")));
        assert!(!is_html_mime(Some("text/plain")));
        assert!(!is_html_mime(None));
    }

    /// Through a proxy (on loopback port 1, where nothing listens), a
    /// target on a non-public address is refused before any connection;
    /// other targets go to the proxy (and fail there, unanswered).
    #[test]
    fn through_a_proxy_private_targets_are_refused_before_any_connection() {
        use super::super::resolve::Lookup;
        let cfg = CrawlerConfig {
            proxy: Some("http://127.0.0.1:1".into()),
            resolve: vec!["intranet.test=10.0.0.5".parse().expect("rule")],
            lookup: Lookup::Fixed(Vec::new()),
            connect_timeout: Duration::from_secs(2),
            ..CrawlerConfig::default()
        };
        let get = |cfg: &CrawlerConfig, url: &str| {
            Fetcher::new(cfg, "BeeBot-test", 1).get(
                &Url::parse(url).expect("url"),
                1024,
                BodyWanted::Html,
                Duration::from_secs(2),
            )
        };
        for url in [
            "http://127.0.0.1:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://10.0.0.5/",
            "http://intranet.test/",
            "http://localhost/",
        ] {
            assert!(
                matches!(get(&cfg, url), Err(FetchError::Refused(_))),
                "{url}"
            );
        }
        // A name that does not resolve here goes to the proxy.
        let err =
            get(&cfg, "http://public.example/").expect_err("nothing listens on the proxy's port");
        assert!(!matches!(err, FetchError::Refused(_)), "{err}");
        let open = CrawlerConfig {
            allow_private: true,
            ..cfg
        };
        let err = get(&open, "http://10.0.0.5/").expect_err("nothing listens");
        assert!(!matches!(err, FetchError::Refused(_)), "{err}");
    }

    /// A response header up to [`MAX_RESPONSE_HEADER_BYTES`] is read (the
    /// connection's read buffer holds it whole); a longer one is refused,
    /// never cut into a page.
    #[test]
    fn a_header_larger_than_the_limit_is_refused_and_one_within_is_read() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let sizes = [
            MAX_RESPONSE_HEADER_BYTES - 1024,
            MAX_RESPONSE_HEADER_BYTES + 1024,
        ];
        let server = std::thread::spawn(move || {
            for size in sizes {
                let (mut conn, _) = listener.accept().expect("accept");
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request);
                let filler = "x".repeat(size);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Filler: {filler}\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                );
            }
        });
        let cfg = CrawlerConfig {
            allow_private: true,
            ..CrawlerConfig::default()
        };
        let fetcher = Fetcher::new(&cfg, "BeeBot-test", 1);
        let url = Url::parse(&format!("http://127.0.0.1:{port}/")).expect("url");
        let get = || fetcher.get(&url, 1024, BodyWanted::Html, Duration::from_secs(5));
        let fits = get().expect("a header within the limit is read");
        assert_eq!((fits.status, fits.body.as_slice()), (200, &b"hello"[..]));
        let err = get().expect_err("a header past the limit");
        assert!(matches!(err, FetchError::Network(_)), "{err}");
        server.join().expect("server");
    }
}
