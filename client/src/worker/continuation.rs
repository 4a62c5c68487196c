//! Continuation units: a unit that goes on from the state the server keeps
//! of its job's earlier segments. Its state is fetched (`FetchState`),
//! checked against the signed length and digest, and kept as the unit's
//! first checkpoint.
//!
//! A continuation unit never starts from its seed (that would scan its
//! job's earlier segments again), and a state the server will not give or
//! that does not match never holds the client: the unit is given back.

use crate::control::ProblemKind;
use anyhow::{Context, Result};
use beebot_shared::proto::{ErrorCode, Request, Response, ABORT_ROUND_CANCELLED};
use beebot_shared::scanstate::{state_sha256, ScanState, ScanStateError};
use beebot_shared::sign::{ResumeFrom, WorkUnit};

use crate::checkpoint::Checkpoint;
use crate::net::NetError;

use super::{HeldState, Worker};

/// Why the state a continuation unit names was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateRefused {
    #[error("the state is {got} bytes, the unit names {want}")]
    Length { got: u64, want: u64 },
    #[error("the state's SHA-256 is not the one the unit names")]
    Digest,
    #[error("the state cannot be read: {0}")]
    Decode(#[from] ScanStateError),
    #[error("the state is of site {got:?}, the unit of {want:?}")]
    Site { got: String, want: String },
}

/// Check the state the server sent for a continuation unit against what the
/// unit names (signed: length and SHA-256), then decode it. The pages the
/// job took are the signed figure.
pub fn check_state(
    unit: &WorkUnit,
    resume: &ResumeFrom,
    bytes: &[u8],
) -> Result<ScanState, StateRefused> {
    if bytes.len() as u64 != resume.state_bytes {
        return Err(StateRefused::Length {
            got: bytes.len() as u64,
            want: resume.state_bytes,
        });
    }
    if state_sha256(bytes) != resume.state_sha256 {
        return Err(StateRefused::Digest);
    }
    let mut state = ScanState::decode(bytes)?;
    if state.site != unit.site {
        return Err(StateRefused::Site {
            got: state.site,
            want: unit.site.clone(),
        });
    }
    state.pages_done = resume.pages_done;
    Ok(state)
}

/// What to do with the server's answer to a continuation unit's `FetchState`.
#[derive(Debug)]
pub enum StateAnswer {
    /// The state, checked: the unit's first checkpoint.
    Use(ScanState),
    /// The server ended the unit (`Abort`, `Rejected`): forget it.
    Drop(String),
    /// No usable state (refused by the server, or by the signed digest):
    /// give the unit back (`Fail`) and forget it.
    GiveBack(String),
    /// The network failed: back off and ask again.
    Retry(NetError),
    /// This host may not talk to the server any more.
    Fatal(NetError),
}

/// Decide what a `FetchState` answer means for the unit. Only a network
/// failure keeps the unit waiting for its state: a unit whose state the
/// server will not give (its job is over, the state is gone or does not
/// match) is forgotten, so it never holds the client.
pub fn state_answer(
    unit: &WorkUnit,
    resume: &ResumeFrom,
    answer: Result<Response, NetError>,
) -> StateAnswer {
    match answer {
        Ok(Response::State { bytes }) => match check_state(unit, resume, &bytes) {
            Ok(state) => StateAnswer::Use(state),
            Err(e) => {
                StateAnswer::GiveBack(format!("refused the state of the continuation unit: {e}"))
            }
        },
        Ok(Response::Abort { reason }) | Ok(Response::Rejected { reason }) => {
            StateAnswer::Drop(reason)
        }
        Ok(other) => StateAnswer::GiveBack(format!(
            "the server gave no state for the continuation unit: {other:?}"
        )),
        Err(e) if e.is_permanent() => StateAnswer::Fatal(e),
        Err(NetError::Refused { code, message })
            if matches!(code, ErrorCode::BadRequest | ErrorCode::Internal) =>
        {
            StateAnswer::GiveBack(format!(
                "the server refused the continuation unit's state ({code:?}): {message}"
            ))
        }
        Err(e) => StateAnswer::Retry(e),
    }
}

/// Where a unit's scan starts.
#[derive(Debug)]
pub enum StartFrom<C> {
    /// A fresh scan, from the seed.
    Seed,
    /// The unit's checkpoint (its own earlier run, or a continuation's state).
    Checkpoint(Box<C>),
    /// A continuation unit without a usable state: fetch it (`FetchState`).
    FetchState,
}

/// Where a unit starts, given what reading its checkpoint gave. A damaged
/// checkpoint starts a unit over from the seed; a continuation unit never
/// starts from the seed (that would scan its job's earlier segments again):
/// without its checkpoint it fetches its state again.
pub fn start_from<C>(continuation: bool, read: Result<Option<C>>) -> StartFrom<C> {
    match read {
        Ok(Some(c)) => StartFrom::Checkpoint(Box::new(c)),
        _ if continuation => StartFrom::FetchState,
        _ => StartFrom::Seed,
    }
}

impl Worker {
    /// Fetch the state of each continuation unit not started yet, check it
    /// against the unit's signed digest and length, and keep it as the
    /// unit's checkpoint; a state refused gives the unit back (`Fail`).
    /// Returns false when the network failed.
    pub(super) async fn fetch_states(&mut self) -> Result<bool> {
        let due: Vec<(u64, WorkUnit, ResumeFrom)> = self
            .held
            .iter()
            .filter(|(_, h)| h.needs_state && matches!(h.state, HeldState::Waiting))
            .filter_map(|(id, h)| {
                let unit = h.unit.unit.clone();
                unit.resume.clone().map(|r| (*id, unit, r))
            })
            .collect();
        for (unit_id, unit, resume) in due {
            if self.home.spool().has_checkpoint(unit_id) {
                // Resumed after a restart: its own checkpoint is newer.
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.needs_state = false;
                }
                continue;
            }
            let answer = self.request(&Request::FetchState { unit_id }).await;
            let refused = match state_answer(&unit, &resume, answer) {
                StateAnswer::Use(state) => {
                    let c = Checkpoint {
                        state,
                        records: Vec::new(),
                        summary: Default::default(),
                    };
                    self.home.spool().save_checkpoint(unit_id, &c)?;
                    // A state may be megabytes: the spool is measured again.
                    self.spool_measured = None;
                    if let Some(h) = self.held.get_mut(&unit_id) {
                        h.needs_state = false;
                    }
                    tracing::info!(
                        unit_id,
                        pages_done = resume.pages_done,
                        "continuation state fetched"
                    );
                    continue;
                }
                StateAnswer::Drop(reason) => {
                    // The job is over (or the unit no longer this host's):
                    // nothing to give back, nothing to scan.
                    tracing::info!(unit_id, "continuation unit dropped: {reason}");
                    self.held.remove(&unit_id);
                    self.home.spool().remove_unit(unit_id);
                    if reason == ABORT_ROUND_CANCELLED {
                        let of_round = self.units_where_round(unit.round_id);
                        self.drop_cancelled(&of_round);
                    }
                    continue;
                }
                StateAnswer::GiveBack(reason) => reason,
                StateAnswer::Retry(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
                StateAnswer::Fatal(e) => return Err(e).context("the server refused this host"),
            };
            tracing::error!(unit_id, "{refused}");
            self.problem(
                ProblemKind::WorkRefused,
                format!("unit {unit_id}: {refused}"),
            );
            self.give_back(unit_id, refused).await?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::tests::unit;

    #[test]
    fn a_continuation_state_is_checked_against_the_signed_unit() {
        let state = ScanState {
            site: "a.test".into(),
            pages_done: 12,
            queue: vec![beebot_shared::scanstate::QueuedUrl {
                url: "http://a.test/x".into(),
                depth: 1,
            }],
            seen: vec![1, 2, 3],
            robots: Vec::new(),
        };
        let bytes = state.encode().expect("encode");
        let resume = ResumeFrom {
            state_sha256: state_sha256(&bytes),
            state_bytes: bytes.len() as u64,
            pages_done: 12,
        };
        let u = unit();
        assert_eq!(check_state(&u, &resume, &bytes), Ok(state.clone()));
        // Another length, another digest, bytes that do not decode, another site.
        let longer = ResumeFrom {
            state_bytes: resume.state_bytes + 1,
            ..resume.clone()
        };
        assert!(matches!(
            check_state(&u, &longer, &bytes),
            Err(StateRefused::Length { .. })
        ));
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(
            check_state(&u, &resume, &flipped),
            Err(StateRefused::Digest)
        );
        let junk = vec![7u8; 40];
        let junk_resume = ResumeFrom {
            state_sha256: state_sha256(&junk),
            state_bytes: 40,
            pages_done: 0,
        };
        assert!(matches!(
            check_state(&u, &junk_resume, &junk),
            Err(StateRefused::Decode(_))
        ));
        let other = WorkUnit {
            site: "b.test".into(),
            ..u
        };
        assert!(matches!(
            check_state(&other, &resume, &bytes),
            Err(StateRefused::Site { .. })
        ));
    }

    #[test]
    fn a_refused_state_never_holds_the_client() {
        let state = ScanState {
            site: "a.test".into(),
            pages_done: 3,
            ..ScanState::default()
        };
        let bytes = state.encode().expect("encode");
        let resume = ResumeFrom {
            state_sha256: state_sha256(&bytes),
            state_bytes: bytes.len() as u64,
            pages_done: 3,
        };
        let u = unit();
        let ok = state_answer(&u, &resume, Ok(Response::State { bytes }));
        assert!(matches!(ok, StateAnswer::Use(s) if s.pages_done == 3));
        // The job is over: the unit is dropped, not retried.
        for r in [
            Response::Abort {
                reason: "job done".into(),
            },
            Response::Rejected {
                reason: "no such unit".into(),
            },
        ] {
            assert!(matches!(
                state_answer(&u, &resume, Ok(r)),
                StateAnswer::Drop(_)
            ));
        }
        // Refusals of the request (the server before `Abort`, a state gone,
        // a failing store) and a state that does not match: given back.
        for code in [ErrorCode::BadRequest, ErrorCode::Internal] {
            let e = NetError::Refused {
                code,
                message: "no state".into(),
            };
            assert!(matches!(
                state_answer(&u, &resume, Err(e)),
                StateAnswer::GiveBack(_)
            ));
        }
        let wrong = Response::State {
            bytes: vec![1, 2, 3],
        };
        assert!(matches!(
            state_answer(&u, &resume, Ok(wrong)),
            StateAnswer::GiveBack(_)
        ));
        assert!(matches!(
            state_answer(&u, &resume, Ok(Response::Ack)),
            StateAnswer::GiveBack(_)
        ));
        // Only the network backs off; a revoked host stops.
        for e in [NetError::Timeout, NetError::Lost("reset".into())] {
            assert!(matches!(
                state_answer(&u, &resume, Err(e)),
                StateAnswer::Retry(_)
            ));
        }
        let revoked = NetError::Refused {
            code: ErrorCode::Revoked,
            message: String::new(),
        };
        assert!(matches!(
            state_answer(&u, &resume, Err(revoked)),
            StateAnswer::Fatal(_)
        ));
    }

    #[test]
    fn a_continuation_unit_without_its_checkpoint_fetches_its_state() {
        let c = Checkpoint {
            state: ScanState::default(),
            records: Vec::new(),
            summary: Default::default(),
        };
        let none = || Ok::<Option<Checkpoint>, anyhow::Error>(None);
        let damaged = || Err::<Option<Checkpoint>, _>(anyhow::anyhow!("damaged"));
        assert!(matches!(start_from(false, none()), StartFrom::Seed));
        assert!(matches!(start_from(true, none()), StartFrom::FetchState));
        assert!(matches!(start_from(true, damaged()), StartFrom::FetchState));
        assert!(matches!(start_from(false, damaged()), StartFrom::Seed));
        assert!(matches!(
            start_from(true, Ok(Some(c.clone()))),
            StartFrom::Checkpoint(_)
        ));
        assert!(matches!(
            start_from(false, Ok(Some(c))),
            StartFrom::Checkpoint(_)
        ));
    }
}
