//! Kept connections, asked cheaply whether they are still open.
//!
//! ureq asks a connection whether it is still open (`Transport::is_open`)
//! twice a request: when the response is read and it goes back to the
//! pool, and when a request takes it from there. Its TCP probe switches the
//! socket to non-blocking, tries a read and switches it back: three system
//! calls each time, and under Wine six round trips to the wineserver (with
//! both probes, about a third of all a page costs there).
//!
//! - [`ProbeWhenTaken`] wraps every connection (last in the chain, after
//!   the proxy and TLS) so that the probe right after its own input and
//!   output answers "open" without asking the socket: the connection waits
//!   in the pool for the politeness delay, and whatever arrives or closes
//!   meanwhile (bytes past the body, the server's close) is found when a
//!   request takes it. Unread input still keeps a connection out of the
//!   pool (ureq checks its buffer first).
//! - [`PolledTcpConnector`] opens the TCP connections as ureq's own does,
//!   and its probe is one `poll` (`WSAPoll` on Windows) with a zero
//!   timeout: bytes waiting, a close or an error mean "not open".

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};
use ureq::Timeout;

/// The connector that wraps each connection in [`Kept`], last in the chain.
#[derive(Debug, Default)]
pub struct ProbeWhenTaken;

impl<In: Transport> Connector<In> for ProbeWhenTaken {
    type Out = Kept;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Kept>, ureq::Error> {
        Ok(chained.map(|inner| Kept {
            inner: Box::new(inner),
            used_since_probe: false,
        }))
    }
}

/// A connection that skips the probe right after it was used.
#[derive(Debug)]
pub struct Kept {
    inner: Box<dyn Transport>,
    /// Input or output happened since the last probe: the connection is
    /// going back to the pool after a response, not being taken from it.
    used_since_probe: bool,
}

impl Transport for Kept {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.used_since_probe = true;
        self.inner.transmit_output(amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.used_since_probe = true;
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.used_since_probe = true;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        if std::mem::take(&mut self.used_since_probe) {
            return true;
        }
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

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
        })))
    }
}

/// The first of `addrs` that answers within its share of `timeout` (an
/// equal share each, at least 10 ms).
fn connect(addrs: &[SocketAddr], timeout: NextTimeout) -> Result<TcpStream, ureq::Error> {
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
            Err(e) if is_timeout(&e) => last = Some(ureq::Error::Timeout(Timeout::Connect)),
            Err(e) => last = Some(ureq::Error::Io(e)),
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

/// Shuts a connection down from another thread (ureq's agent shutdown).
struct Closer(Arc<TcpStream>);

impl ShutdownHandle for Closer {
    fn shutdown(&self) {
        let _ = self.0.shutdown(Shutdown::Both);
    }
}

/// A TCP connection probed by `poll`.
pub struct PolledTcp {
    stream: Arc<TcpStream>,
    /// Keeps the shutdown handle ureq holds weakly alive with the connection.
    _closer: Arc<dyn ShutdownHandle>,
    buffers: LazyBuffers,
    /// The socket's timeouts as last set: set again only when they change
    /// (a system call each).
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
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

impl Transport for PolledTcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let timeout = timeout.for_write();
        let t = socket_timeout(timeout)?;
        if t != self.write_timeout {
            self.stream.set_write_timeout(t)?;
            self.write_timeout = t;
        }
        let output = &self.buffers.output()[..amount];
        (&*self.stream)
            .write_all(output)
            .map_err(|e| io_error(e, timeout))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let timeout = timeout.for_read();
        let t = socket_timeout(timeout)?;
        if t != self.read_timeout {
            self.stream.set_read_timeout(t)?;
            self.read_timeout = t;
        }
        let input = self.buffers.input_append_buf();
        let n = loop {
            match (&*self.stream).read(input) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r.map_err(|e| io_error(e, timeout))?,
            }
        };
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    fn is_open(&mut self) -> bool {
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

    /// A transport that counts the probes that reach it.
    #[derive(Debug)]
    struct Counted {
        buffers: LazyBuffers,
        probes: Arc<AtomicUsize>,
    }

    impl Transport for Counted {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.buffers
        }
        fn transmit_output(&mut self, _: usize, _: NextTimeout) -> Result<(), ureq::Error> {
            Ok(())
        }
        fn await_input(&mut self, _: NextTimeout) -> Result<bool, ureq::Error> {
            Ok(true)
        }
        fn is_open(&mut self) -> bool {
            self.probes.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    #[test]
    fn the_probe_after_use_is_answered_and_the_probe_when_taken_asks() {
        let probes = Arc::new(AtomicUsize::new(0));
        let mut kept = Kept {
            inner: Box::new(Counted {
                buffers: LazyBuffers::new(64, 64),
                probes: probes.clone(),
            }),
            used_since_probe: false,
        };
        let timeout = NextTimeout::default();
        for request in 1..=3 {
            // Taken from the pool: the socket is asked.
            assert!(kept.is_open());
            assert_eq!(probes.load(Ordering::Relaxed), request);
            kept.transmit_output(0, timeout).unwrap();
            kept.await_input(timeout).unwrap();
            // Back to the pool right after the response: not asked.
            assert!(kept.is_open());
            assert_eq!(probes.load(Ordering::Relaxed), request);
        }
        // Taken twice with no use between: asked both times.
        assert!(kept.is_open());
        assert!(kept.is_open());
        assert_eq!(probes.load(Ordering::Relaxed), 5);
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
