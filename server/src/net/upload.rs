//! Uploads and scan states: the three upload steps (begin under the grid
//! lock, verify and write outside it, finish under it), reading a
//! continuation's state, and reading a frame's body at a minimum rate.
//!
//! Invariants: decoding and fsyncs run outside the grid lock; a body slower
//! than [`MIN_BODY_BYTES_PER_S`] after [`BODY_GRACE`] is dropped. It never
//! authenticates anyone.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use beebot_shared::linkfile::ScanSummary;
use beebot_shared::proto::{ErrorCode, Response};

use super::{error, BODY_GRACE, MIN_BODY_BYTES_PER_S};
use crate::grid::{GridError, StateFile, UploadOutcome, UploadStep};
use crate::{now_ms, Shared};

/// An upload (a result, or part `part` of a running scan) in three steps, so that decoding the link file and making it
/// durable (two fsyncs) run outside the grid lock and concurrent uploads
/// share the disk instead of queueing behind one another.
pub(super) async fn upload(
    shared: &Arc<Shared>,
    host_id: u64,
    unit_id: u64,
    part: Option<u32>,
    summary: ScanSummary,
    link_file: Vec<u8>,
    state: Option<Vec<u8>>,
) -> Result<Response, GridError> {
    let pages = summary.pages;
    let plan = match shared
        .with_grid(move |g| match part {
            None => g.upload_begin(host_id, unit_id, now_ms()),
            Some(index) => g.upload_part_begin(host_id, unit_id, (index, pages), now_ms()),
        })
        .await?
    {
        UploadStep::Answer(o) => return Ok(upload_response(o)),
        UploadStep::Plan(p) => p,
    };
    // One upload of a unit in flight: a repeat (a flood, or a client that
    // timed out and sent it again) is answered at once, undecoded, with an
    // answer the client retries later (by then the first one has decided).
    let Some(slot) = shared.upload_slot(unit_id) else {
        return Ok(error(
            ErrorCode::Internal,
            format!("an upload of unit {unit_id} is in progress: try again later"),
        ));
    };
    // Held by the blocking work too: a request dropped mid-way frees the
    // unit only once its decoding has stopped.
    let slot = Arc::new(slot);
    let held = slot.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let checked = match plan.verify(&summary, &link_file, state.as_deref()) {
            Ok(info) => plan
                .write(&link_file, info.state.as_ref())
                .map(|()| Ok(info)),
            Err(reason) => Ok(Err(reason)),
        };
        drop(held);
        (plan, summary, checked)
    })
    .await;
    let (plan, summary, checked) = match checked {
        Ok(x) => x,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let outcome = match checked? {
        Ok(info) => {
            shared
                .with_grid(move |g| g.upload_finish(&plan, summary, info, now_ms()))
                .await
        }
        Err(reason) => {
            shared
                .with_grid(move |g| g.upload_refused(&plan, reason, now_ms()))
                .await
        }
    };
    drop(slot);
    outcome.map(upload_response)
}

pub(super) fn upload_response(o: UploadOutcome) -> Response {
    match o {
        UploadOutcome::Accepted => Response::Accepted,
        UploadOutcome::Duplicate => Response::Duplicate,
        UploadOutcome::NotKept => Response::Ack,
        UploadOutcome::Rejected(reason) => Response::Rejected { reason },
    }
}

/// A continuation's scan state, read outside the grid lock and checked
/// against the digest its unit names. A state that is gone or damaged
/// cannot be continued from: the host is told to drop the unit (and the
/// server's log says why).
pub(super) async fn read_state(file: StateFile) -> Result<Response, GridError> {
    let (shown, sha) = (file.location(), file.sha256);
    let read = tokio::task::spawn_blocking(move || file.read())
        .await
        .map_err(|e| GridError::Io(std::io::Error::other(e.to_string())))?;
    let reason = match read {
        Ok(bytes) if beebot_shared::scanstate::state_sha256(&bytes) == sha => {
            return Ok(Response::State { bytes })
        }
        Ok(_) => "the stored scan state does not match its unit".to_string(),
        Err(e) => format!("the stored scan state cannot be read: {e}"),
    };
    tracing::error!(state = %shown, "{reason}");
    Ok(Response::Abort { reason })
}

/// When the body must be whole by, given `received` bytes of it so far:
/// [`BODY_GRACE`] after it was let in, plus its bytes so far at
/// [`MIN_BODY_BYTES_PER_S`]. A body arriving at least that fast never meets it.
pub(super) fn body_deadline(start: tokio::time::Instant, received: usize) -> tokio::time::Instant {
    start + BODY_GRACE + Duration::from_secs_f64(received as f64 / MIN_BODY_BYTES_PER_S as f64)
}

/// Read exactly `len` payload bytes, growing the buffer as data arrives, at
/// least as fast as [`body_deadline`] requires.
/// `Err(Some(_))`: the peer ended the stream early or sent too slowly
/// (answerable); `Err(None)`: the stream broke.
pub(super) async fn read_payload(
    recv: &mut quinn::RecvStream,
    len: usize,
) -> Result<Vec<u8>, Option<String>> {
    /// Most bytes preallocated before they arrive.
    const PREALLOCATE: usize = 64 * 1024;
    let start = tokio::time::Instant::now();
    let mut payload = Vec::with_capacity(len.min(PREALLOCATE));
    while payload.len() < len {
        let deadline = body_deadline(start, payload.len());
        let chunk = tokio::time::timeout_at(deadline, recv.read_chunk(len - payload.len(), true));
        match chunk.await {
            Ok(Ok(Some(chunk))) => payload.extend_from_slice(&chunk.bytes),
            Ok(Ok(None)) => {
                return Err(Some(format!(
                    "truncated frame: {} of {len} bytes before the stream ended",
                    payload.len()
                )))
            }
            Ok(Err(_)) => return Err(None),
            Err(_) => {
                return Err(Some(format!(
                    "the frame's body came too slowly: {} of {len} bytes in {:.0} s \
                     (a body may take {} s, then must keep up {} KiB/s)",
                    payload.len(),
                    start.elapsed().as_secs_f64(),
                    BODY_GRACE.as_secs(),
                    MIN_BODY_BYTES_PER_S / 1024
                )))
            }
        }
    }
    Ok(payload)
}
