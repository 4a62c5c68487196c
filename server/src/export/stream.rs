//! An export streamed as an HTTP body: a blocking writer (on tokio's
//! blocking pool) fills chunks of [`CHUNK_BYTES`] and sends them through a
//! channel of [`CHANNEL_DEPTH`] chunks to the body the client reads.
//!
//! Invariants: at most `CHANNEL_DEPTH + 2` chunks of one export are in
//! memory at once (the queue, the one being filled, the one being sent), so
//! an export of any size costs a bounded amount of memory; a writer whose
//! reader went away (the client disconnected) gets a broken pipe on its next
//! chunk and stops. A writer that fails sends its error into the body, which
//! ends the response without its terminating chunk: the client sees a
//! broken transfer, never a short export that looks complete.

use std::io::{self, Write};

use axum::body::{Body, Bytes};
use tokio::sync::mpsc;

/// Bytes the writer gathers before sending a chunk to the body.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Chunks queued between the writer and the body: with [`CHUNK_BYTES`],
/// at most half a megabyte waits for a slow reader.
pub const CHANNEL_DEPTH: usize = 8;

type Chunk = Result<Bytes, io::Error>;

/// The writing end: a `Write` that sends full chunks into the channel,
/// blocking while the channel is full. It lives on a blocking thread.
pub struct ChannelWriter {
    buf: Vec<u8>,
    tx: mpsc::Sender<Chunk>,
    /// The body ended, well ([`ChannelWriter::finish`]) or with an error.
    ended: bool,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(Bytes::from(chunk)))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))
    }

    /// Send what is left: the body ends well.
    fn finish(mut self) -> io::Result<()> {
        self.ended = true;
        self.send()
    }

    /// End the body with `error`: the client's transfer breaks.
    fn fail(mut self, error: io::Error) {
        self.ended = true;
        self.buf.clear();
        // A reader that is gone needs no error.
        let _ = self.tx.blocking_send(Err(error));
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK_BYTES - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

impl Drop for ChannelWriter {
    /// A writer dropped before its body ended (a panic midway) breaks the
    /// body: the rows sent so far must not look like the whole export.
    fn drop(&mut self) {
        if !self.ended {
            self.buf.clear();
            let _ = self
                .tx
                .blocking_send(Err(io::Error::other("the export stopped midway")));
        }
    }
}

/// A body and the writer that fills it.
fn channel() -> (ChannelWriter, Body) {
    let (tx, rx) = mpsc::channel::<Chunk>(CHANNEL_DEPTH);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let writer = ChannelWriter {
        buf: Vec::with_capacity(CHUNK_BYTES),
        tx,
        ended: false,
    };
    (writer, Body::from_stream(stream))
}

/// Run `write` on the blocking pool with a writer into the returned body.
/// An error of `write` breaks the body (and is logged with `what`).
pub fn spawn<E: std::fmt::Display>(
    what: String,
    write: impl FnOnce(&mut ChannelWriter) -> Result<(), E> + Send + 'static,
) -> Body {
    let (mut writer, body) = channel();
    tokio::task::spawn_blocking(move || match write(&mut writer) {
        Ok(()) => {
            if writer.finish().is_err() {
                tracing::debug!("{what}: the reader went away at the end");
            }
        }
        Err(e) => {
            tracing::warn!("{what} stopped: {e}");
            writer.fail(io::Error::other(e.to_string()));
        }
    });
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Bytes a test writer produces: far more than the channel holds.
    const TOTAL: usize = 64 * CHUNK_BYTES;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_chunk_arrives_while_the_writer_is_held_back() {
        let written = Arc::new(AtomicUsize::new(0));
        let w = written.clone();
        let body = spawn("test export".into(), move |out| {
            let line = [b'x'; 1000];
            while w.load(Ordering::SeqCst) < TOTAL {
                out.write_all(&line)?;
                w.fetch_add(line.len(), Ordering::SeqCst);
            }
            out.flush()
        });
        let mut stream = body.into_data_stream();
        let first = stream.next().await.expect("a chunk").expect("data");
        assert_eq!(first.len(), CHUNK_BYTES);
        // The reader has taken one chunk: the writer is blocked on a full
        // channel, far from done.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let ahead = written.load(Ordering::SeqCst);
        let bound = (CHANNEL_DEPTH + 3) * CHUNK_BYTES;
        assert!(
            ahead <= bound,
            "{ahead} bytes written ahead (bound {bound})"
        );
        let mut total = first.len();
        while let Some(chunk) = stream.next().await {
            total += chunk.expect("data").len();
        }
        assert!(total >= TOTAL, "{total}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_that_goes_away_stops_the_writer() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let body = spawn("test export".into(), move |out| {
            let line = [b'y'; 1000];
            let result = (0..TOTAL / line.len()).try_for_each(|_| out.write_all(&line));
            let _ = tx.send(result.as_ref().map_err(io::Error::kind).copied());
            result
        });
        let mut stream = body.into_data_stream();
        stream.next().await.expect("a chunk").expect("data");
        drop(stream);
        let result = rx.await.expect("the writer ends");
        assert_eq!(result, Err(io::ErrorKind::BrokenPipe));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_writer_breaks_the_body() {
        let body = spawn("test export".into(), |out| {
            out.write_all(b"half a row")?;
            out.flush()?;
            Err::<(), _>(io::Error::other("link file damaged"))
        });
        let mut stream = body.into_data_stream();
        let first = stream.next().await.expect("a chunk").expect("data");
        assert_eq!(&first[..], b"half a row");
        let e = stream.next().await.expect("an error").unwrap_err();
        assert!(e.to_string().contains("link file damaged"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_writer_that_panics_breaks_the_body() {
        let body = spawn("test export".into(), |out| -> io::Result<()> {
            out.write_all(b"half a row")?;
            out.flush()?;
            panic!("a bug midway");
        });
        let mut stream = body.into_data_stream();
        stream.next().await.expect("a chunk").expect("data");
        let e = stream.next().await.expect("an error").unwrap_err();
        assert!(e.to_string().contains("stopped midway"), "{e}");
    }
}
