//! Process plumbing shared by the command lines (client, server, tools): the
//! async runtime and the shutdown signal (Ctrl-C, or SIGTERM from a service
//! manager). The only tokio code of this crate, behind its `rt` feature; it
//! never touches the network or the disk.
//!
//! At exit a runtime waits at most `EXIT_WAIT` for its blocking threads: a scan
//! stuck in a request is checkpointed already.

use std::future::Future;
use std::time::Duration;

/// Longest the runtime waits at exit for its blocking threads (a crawl stuck
/// in a request of up to 60 s, a benchmark): their work is checkpointed or
/// given up before, and a stop must take seconds, not a request timeout.
pub const EXIT_WAIT: Duration = Duration::from_millis(250);

/// The runtime could not start (threads or the I/O driver refused).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the async runtime")]
pub struct RuntimeError(#[source] std::io::Error);

/// A multi-threaded tokio runtime.
pub fn runtime() -> Result<tokio::runtime::Runtime, RuntimeError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(RuntimeError)
}

/// Run `f` on a fresh runtime on the calling thread (and its pool of
/// blocking threads), then shut the runtime down without waiting more than
/// [`EXIT_WAIT`] for blocking threads (dropping a runtime waits for them
/// all).
///
/// One thread, not one per core: the desktop client's async work is one
/// QUIC connection, its loop and timers, while its scans run on blocking
/// threads. A second worker thread only adds hand-offs between the two,
/// and on Windows each is a round trip to the completion port. The price:
/// while the loop writes to its spool (fsyncs of units and results, at
/// most seconds on a slow disk) the connection's timers wait, well inside
/// its idle timeout.
pub fn block_on_then_exit<F: Future>(f: F) -> Result<F::Output, RuntimeError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RuntimeError)?;
    let out = rt.block_on(f);
    rt.shutdown_timeout(EXIT_WAIT);
    Ok(out)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
