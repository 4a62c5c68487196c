//! Kept connections, asked cheaply whether they are still open.
//!
//! ureq asks a connection whether it is still open (`Transport::is_open`)
//! twice a request: when the response is read and it goes back to the
//! pool, and when a request takes it from there. Its TCP probe switches the
//! socket to non-blocking, tries a read and switches it back: three system
//! calls each time, and under Wine six round trips to the wineserver (with
//! both probes, about a third of all a page cost there).
//!
//! [`PolledTcpConnector`] opens the TCP connections as ureq's own does (in
//! its place in the chain: after an HTTP CONNECT proxy, before TLS), and
//! each [`PolledTcp`] answers the probe so:
//! - right after its own input or output (the connection going back to the
//!   pool after a response) it answers "open" without asking the socket:
//!   the connection waits in the pool for the politeness delay, and
//!   whatever arrives or closes meanwhile (bytes past the body, the
//!   server's close) is found when a request takes it. Unread input still
//!   keeps a connection out of the pool (ureq checks its buffer first);
//! - otherwise (a request taking it) by one `poll` (`WSAPoll` on Windows)
//!   with a zero timeout: bytes waiting, a close or an error mean "not
//!   open".
//!
//! One `PolledTcp` holds each socket, so a tunnel through a proxy (whose
//! leg to the proxy the same chain opens) asks the one socket beneath it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};
use ureq::Timeout;

/// Opens TCP connections (unless the proxy's connector opened one) whose
/// probe is a `poll`.
#[derive(Debug, Default)]
pub struct PolledTcpConnector;

impl<In: Transport> Connector<In> for PolledTcpConnector {
    type Out = Either<In, PolledTcp>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(t) = chained {
            return Ok(Some(Either::A(t)));
        }
        let config = details.config;
        let stream = Arc::new(connect(&details.addrs, details.timeout)?);
        if config.no_delay() {
            stream.set_nodelay(true)?;
        }
        let handle: Arc<dyn ShutdownHandle> = Arc::new(Closer(stream.clone()));
        (details.register_shutdown)(Arc::downgrade(&handle))?;
        Ok(Some(Either::B(PolledTcp {
            stream,
            _closer: handle,
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            read_timeout: None,
            write_timeout: None,
            used_since_probe: false,
        })))
    }
}

/// The first of `addrs` that answers within its share of `timeout` (an
/// equal share each, at least 10 ms). As ureq's own connector: the next
/// address is tried only after a refusal, an unreachable network or
/// address, or a timeout with time left.
fn connect(addrs: &[SocketAddr], timeout: NextTimeout) -> Result<TcpStream, ureq::Error> {
    let started = Instant::now();
    let share = timeout
        .not_zero()
        .map(|t| (*t / addrs.len().max(1) as u32).max(Duration::from_millis(10)));
    let mut last = None;
    for addr in addrs {
        let r = match share {
            Some(t) => TcpStream::connect_timeout(addr, t),
            None => TcpStream::connect(addr),
        };
        match r {
            Ok(s) => return Ok(s),
            Err(e) if is_timeout(&e) => {
                if timeout.not_zero().is_some_and(|t| started.elapsed() >= *t) {
                    return Err(ureq::Error::Timeout(timeout.reason));
                }
                last = Some(ureq::Error::Timeout(Timeout::Connect));
            }
            Err(e) if is_addr_specific(&e) => last = Some(ureq::Error::Io(e)),
            Err(e) => return Err(ureq::Error::Io(e)),
        }
    }
    Err(last.unwrap_or_else(|| {
        ureq::Error::Io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "no address to connect to",
        ))
    }))
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// A failed connect that concerns only the address tried (ureq's rule: a
/// refusal, an unreachable host or network, an address not available, and
/// on Windows `WSAEACCES`, which a VPN or firewall gives a blocked family).
fn is_addr_specific(e: &io::Error) -> bool {
    #[cfg(windows)]
    if e.raw_os_error() == Some(10013) {
        return true;
    }
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::AddrNotAvailable
    )
}

/// Shuts a connection down from another thread (ureq's agent shutdown).
struct Closer(Arc<TcpStream>);

impl ShutdownHandle for Closer {
    fn shutdown(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// A TCP connection probed by `poll`, and not at all right after its use.
pub struct PolledTcp {
    stream: Arc<TcpStream>,
    /// Keeps the shutdown handle ureq holds weakly alive with the connection.
    _closer: Arc<dyn ShutdownHandle>,
    buffers: LazyBuffers,
    /// The socket's timeouts as last set: set again only when they change
    /// (a system call each).
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Input or output happened since the last probe: the connection is
    /// going back to the pool after a response, not being taken from it.
    used_since_probe: bool,
}

impl std::fmt::Debug for PolledTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolledTcp")
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

/// The timeout to set on the socket for an I/O under `timeout`, or the
/// error of one already spent.
fn socket_timeout(timeout: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if timeout.after.is_zero() {
        return Err(ureq::Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|t| *t))
}

fn io_error(e: io::Error, timeout: NextTimeout) -> ureq::Error {
    if is_timeout(&e) {
        ureq::Error::Timeout(timeout.reason)
    } else {
        ureq::Error::from(e)
    }
}

/// Set a socket timeout through `set` when it differs from `cache`. On
/// macOS a socket whose peer closed with unread data may refuse the change
/// (`InvalidInput`) while its response is still readable: the I/O then
/// says what happened (as ureq does), and the cache keeps the old value.
fn set_timeout(
    cache: &mut Option<Duration>,
    t: Option<Duration>,
    set: impl FnOnce(Option<Duration>) -> io::Result<()>,
) -> io::Result<()> {
    if t == *cache {
        return Ok(());
    }
    match set(t) {
        Ok(()) => *cache = t,
        Err(e) if cfg!(target_os = "macos") && e.kind() == io::ErrorKind::InvalidInput => {}
        Err(e) => return Err(e),
    }
    Ok(())
}

impl Transport for PolledTcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.used_since_probe = true;
        let timeout = timeout.for_write();
        let t = socket_timeout(timeout)?;
        let stream = &*self.stream;
        set_timeout(&mut self.write_timeout, t, |t| stream.set_write_timeout(t))?;
        let output = &self.buffers.output()[..amount];
        { stream }
            .write_all(output)
            .map_err(|e| io_error(e, timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.used_since_probe = true;
        let timeout = timeout.for_read();
        let t = socket_timeout(timeout)?;
        let stream = &*self.stream;
        set_timeout(&mut self.read_timeout, t, |t| stream.set_read_timeout(t))?;
        let started = Instant::now();
        let input = self.buffers.input_append_buf();
        let n = loop {
            match { stream }.read(input) {
                // A signal: read again within the time left (a socket read
                // with a timeout is not restarted by the system).
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let Some(t) = t else {
                        return Err(ureq::Error::from(e));
                    };
                    let left = t.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(ureq::Error::Timeout(timeout.reason));
                    }
                    set_timeout(&mut self.read_timeout, Some(left), |t| {
                        stream.set_read_timeout(t)
                    })?;
                }
                r => break r.map_err(|e| io_error(e, timeout))?,
            }
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
        if std::mem::take(&mut self.used_since_probe) {
            return true;
        }
        !has_news(&self.stream).unwrap_or(true)
    }
}

/// Whether `stream` has bytes to read, was closed or failed, asked
/// without waiting.
#[cfg(unix)]
fn has_news(stream: &TcpStream) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(stream, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let n = poll(&mut fds, Some(&zero))?;
    Ok(n > 0 && !fds[0].revents().is_empty())
}

#[cfg(windows)]
fn has_news(stream: &TcpStream) -> io::Result<bool> {
    beebot_win32::socket::has_news(stream)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use ureq::unversioned::transport::LazyBuffers;

    use super::*;
    use crate::crawler::fetch::{BodyWanted, Fetcher};
    use crate::crawler::CrawlerConfig;

    /// A connected pair on loopback: the crawler's end as a `PolledTcp`,
    /// and the server's end.
    fn pair() -> (PolledTcp, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let near = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (far, _) = listener.accept().unwrap();
        let stream = Arc::new(near);
        let polled = PolledTcp {
            stream: stream.clone(),
            _closer: Arc::new(Closer(stream)),
            buffers: LazyBuffers::new(64, 64),
            read_timeout: None,
            write_timeout: None,
            used_since_probe: false,
        };
        (polled, far)
    }

    #[test]
    fn the_probe_after_use_is_answered_and_the_probe_when_taken_polls() {
        let (mut conn, mut far) = pair();
        let timeout = NextTimeout::default();
        // Taken: polled, nothing waiting.
        assert!(conn.is_open());
        conn.buffers().output()[..3].copy_from_slice(b"GET");
        conn.transmit_output(3, timeout).unwrap();
        far.write_all(b"answer").unwrap();
        assert!(conn.await_input(timeout).unwrap());
        let n = conn.buffers().input().len();
        conn.buffers().input_consume(n);
        // Bytes no request asked for arrive while it goes back to the pool.
        far.write_all(b"junk").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // Put back right after its use: not asked.
        assert!(conn.is_open());
        // Taken again: the poll finds the bytes.
        assert!(!conn.is_open());
        // A fresh pair whose far end closes: found when taken.
        let (mut conn, far) = pair();
        assert!(conn.is_open());
        drop(far);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!conn.is_open());
    }

    /// A server on loopback answering each request with a small page; it
    /// closes a connection after `answers_per_connection` answers (without
    /// saying so in the response). Returns its address and its count of
    /// accepted connections.
    fn server(answers_per_connection: usize) -> (String, Arc<AtomicUsize>) {
        server_then(answers_per_connection, b"")
    }

    fn server_then(
        answers_per_connection: usize,
        after: &'static [u8],
    ) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || answer_then(stream, answers_per_connection, after));
            }
        });
        (format!("http://{addr}"), accepted)
    }

    /// Answers `answers` requests, then sends `after` (bytes no request
    /// asked for) and closes.
    fn answer_then(stream: TcpStream, answers: usize, after: &[u8]) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        for _ in 0..answers {
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
            }
            let body = "<a href=\"/x\">x</a>";
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n",
                body.len()
            );
            if out.write_all(head.as_bytes()).is_err() || out.write_all(body.as_bytes()).is_err() {
                return;
            }
        }
        if !after.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
            let _ = out.write_all(after);
            // Kept open: only the bytes tell the connection is spoilt.
            std::thread::sleep(Duration::from_secs(5));
        }
        // Close without a word, as a server does when its keep-alive ends.
        let _ = out.shutdown(std::net::Shutdown::Both);
    }

    fn get(fetcher: &Fetcher, base: &str, path: &str) -> u16 {
        let url = url::Url::parse(&format!("{base}{path}")).unwrap();
        fetcher
            .get(&url, 1 << 20, BodyWanted::Html, Duration::from_secs(10))
            .unwrap()
            .status
    }

    fn fetcher() -> Fetcher {
        let cfg = CrawlerConfig {
            allow_private: true,
            ..CrawlerConfig::default()
        };
        Fetcher::new(&cfg, "beebot-test", 1)
    }

    #[test]
    fn a_kept_connection_is_used_again() {
        let (base, accepted) = server(usize::MAX);
        let fetcher = fetcher();
        for i in 0..5 {
            assert_eq!(get(&fetcher, &base, &format!("/{i}")), 200);
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_connection_with_bytes_past_its_response_is_not_used_again() {
        let (base, accepted) = server_then(1, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nJUNK");
        let fetcher = fetcher();
        for i in 0..3 {
            assert_eq!(get(&fetcher, &base, &format!("/{i}")), 200);
            // The bytes arrive while the connection waits.
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_connection_the_server_closed_while_kept_is_found_when_taken() {
        let (base, accepted) = server(1);
        let fetcher = fetcher();
        for i in 0..4 {
            assert_eq!(get(&fetcher, &base, &format!("/{i}")), 200);
            // The server's close arrives while the connection waits.
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(accepted.load(Ordering::Relaxed), 4);
    }
}
