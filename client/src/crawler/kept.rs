//! A kept connection is probed once a request, not twice.
//!
//! ureq asks a connection whether it is still open (`Transport::is_open`)
//! twice a request: when the response is read and the connection goes back
//! to the pool, and when a request takes it from there. Its TCP probe
//! switches the socket to non-blocking, tries a read and switches it back:
//! three system calls each time, and under Wine six round trips to the
//! wineserver (a third of all a page costs there). The first probe tells
//! nothing the second does not: the connection waits in the pool for the
//! politeness delay, and whatever arrives or closes meanwhile (bytes past
//! the body, the server's close) is found when a request takes it.
//!
//! [`ProbeWhenTaken`] wraps every connection so that the probe right after
//! its own input and output answers "open" without asking the socket; the
//! probe when a request takes it asks, as before. Unread input still keeps
//! a connection out of the pool (ureq checks its buffer first).

use ureq::unversioned::transport::{Buffers, ConnectionDetails, Connector, NextTimeout, Transport};

/// The connector that wraps each connection in [`Kept`], last in the chain
/// (after TCP, the proxy and TLS).
#[derive(Debug, Default)]
pub struct ProbeWhenTaken;

impl Connector<Box<dyn Transport>> for ProbeWhenTaken {
    type Out = Kept;

    fn connect(
        &self,
        _details: &ConnectionDetails,
        chained: Option<Box<dyn Transport>>,
    ) -> Result<Option<Kept>, ureq::Error> {
        Ok(chained.map(|inner| Kept {
            inner,
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
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::Relaxed);
                std::thread::spawn(move || answer(stream, answers_per_connection));
            }
        });
        (format!("http://{addr}"), accepted)
    }

    fn answer(stream: TcpStream, answers: usize) {
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
