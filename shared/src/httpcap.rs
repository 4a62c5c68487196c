//! An HTTP/1.1 listener that bounds what its clients may hold (the `http`
//! feature): connections in all ([`Limits::connections`]: beyond it, new
//! ones wait in the kernel's listen backlog, holding no file descriptor of
//! the process), connections per IP address ([`Limits::per_address`]:
//! more are closed as they are accepted), the time to send a request's
//! header ([`Limits::header`], also how long a kept-alive connection may
//! wait for its next request) and the time no byte may move either way
//! ([`Limits::idle`]). Every HTTP listener of the server (reference site,
//! admin API and dashboard, metrics) and the client's status page serve
//! through [`serve`]; `axum::serve` bounds none of these.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Semaphore;

/// What one listener lets its clients hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub connections: usize,
    /// Connections from one IP address at once; more are closed at once.
    pub per_address: usize,
    /// A request's header must arrive whole within this time of the
    /// server waiting for it (and a kept-alive connection's next one).
    pub header: Duration,
    /// A connection on which no byte moved either way this long is closed.
    pub idle: Duration,
}

/// Serve `app` (an axum router) on `listener` within `limits` until
/// `shutdown`; open connections are dropped then.
pub async fn serve(
    listener: tokio::net::TcpListener,
    limits: Limits,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, limits, shutdown, move |request| {
        let mut app = app.clone();
        async move {
            use tower_service::Service;
            app.call(request.map(axum::body::Body::new)).await
        }
    })
    .await;
}

/// [`serve`] with a handler of its own: `handle` answers each request.
pub async fn serve_with<H, F>(
    listener: tokio::net::TcpListener,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<axum::response::Response, Infallible>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.connections.max(1)));
    let per_address: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let mut conns = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while conns.try_join_next().is_some() {}
        // A slot before accepting: beyond the cap, connections wait in the
        // backlog instead of taking a file descriptor each.
        let slot = tokio::select! {
            _ = &mut shutdown => break,
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                // Out of descriptors or a connection reset before accept:
                // wait a moment rather than spin.
                Err(e) => {
                    tracing::debug!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(address_slot) = AddressSlot::take(&per_address, peer.ip(), limits.per_address)
        else {
            tracing::debug!(%peer, "too many connections from this address: closed");
            continue;
        };
        let handle = handle.clone();
        conns.spawn(async move {
            serve_connection(stream, limits, handle).await;
            drop(address_slot);
            drop(slot);
        });
    }
    conns.shutdown().await;
}

/// One connection counted against its address; released on drop.
struct AddressSlot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl AddressSlot {
    fn take(
        counts: &Arc<Mutex<HashMap<IpAddr, usize>>>,
        ip: IpAddr,
        most: usize,
    ) -> Option<AddressSlot> {
        let mut m = counts.lock().unwrap_or_else(PoisonError::into_inner);
        let n = m.entry(ip).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut m = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Serve one connection (HTTP/1.1, kept alive) until it ends, its header
/// is late, or it idles past the limit; dropping it closes the socket.
async fn serve_connection<H, F>(stream: tokio::net::TcpStream, limits: Limits, handle: H)
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<axum::response::Response, Infallible>> + Send + 'static,
{
    let started = tokio::time::Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let io = Watched {
        inner: stream,
        started,
        last: last.clone(),
    };
    let service = hyper::service::service_fn(handle);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    loop {
        let idle_since = started + Duration::from_millis(last.load(Ordering::Relaxed));
        let idle_until = idle_since + limits.idle;
        if tokio::time::Instant::now() >= idle_until {
            return;
        }
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = tokio::time::sleep_until(idle_until) => {}
        }
    }
}

/// A stream that notes when a byte last moved (ms since `started`).
struct Watched {
    inner: tokio::net::TcpStream,
    started: tokio::time::Instant,
    last: Arc<AtomicU64>,
}

impl Watched {
    fn moved(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.moved();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
