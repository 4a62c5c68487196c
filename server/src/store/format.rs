//! The store's format on disk: its number (in the `meta` tree) and the
//! shape it gives a round's record.
//!
//! Format 2 (0.1.0's, the first released): a round's record (tree
//! `rounds.v2`) keeps its job ids as runs of consecutive ids ([`IdRun`]):
//! a round's jobs are made at its start, one after another, so a round of
//! any size is one run.
//!
//! Invariants: a store is opened only at a format this build reads; any
//! other is refused ([`StoreError::Format`]; [`StoreError::Unnumbered`]
//! for a store from before 0.1.0, which 0.1.0 migrated; damage for a
//! format no release wrote) before any record is written. A new store has its format
//! written and synced at opening.

use beebot_shared::codec;
use beebot_shared::limits::MAX_SITES;
use serde::{Deserialize, Serialize};

use super::{Backend, StoreError, Tree, MAX_RECORD_BYTES};
use crate::model::{FoldedSite, RoundParams, RoundRecord, RoundState};

/// The format this build writes, and the newest it reads.
pub const STORE_FORMAT: u32 = 2;

/// The key of the format in the `meta` tree.
const FORMAT_KEY: &[u8] = b"format";

/// `count` consecutive ids from `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct IdRun {
    first: u64,
    count: u64,
}

/// Ids in increasing order, as runs of consecutive ones.
fn runs(ids: &[u64]) -> Vec<IdRun> {
    let mut out: Vec<IdRun> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some(r) if r.first.checked_add(r.count) == Some(id) => r.count += 1,
            _ => out.push(IdRun {
                first: id,
                count: 1,
            }),
        }
    }
    out
}

/// A round's record as format 2 stores it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(super) struct StoredRound {
    id: u64,
    created_ms: u64,
    finished_ms: Option<u64>,
    params: RoundParams,
    state: RoundState,
    job_ids: Vec<IdRun>,
    every_ms: Option<u64>,
    next_round: Option<u64>,
    folded: Vec<FoldedSite>,
}

impl From<&RoundRecord> for StoredRound {
    fn from(r: &RoundRecord) -> StoredRound {
        StoredRound {
            id: r.id,
            created_ms: r.created_ms,
            finished_ms: r.finished_ms,
            params: r.params.clone(),
            state: r.state,
            job_ids: runs(&r.job_ids),
            every_ms: r.every_ms,
            next_round: r.next_round,
            folded: r.folded.clone(),
        }
    }
}

impl StoredRound {
    /// Give the first run `count` ids (tests of damaged records).
    #[cfg(test)]
    pub(super) fn damage_runs(&mut self, count: u64) {
        self.job_ids[0].count = count;
    }

    /// The round's record, its runs checked: at most [`MAX_SITES`] job ids
    /// in all, none past `u64::MAX` (a damaged record is an error, never a
    /// huge allocation).
    pub(super) fn into_record(self) -> Result<RoundRecord, StoreError> {
        let damaged = |msg: String| StoreError::Corrupt {
            tree: Tree::Rounds.name(),
            key: hex::encode(super::id_key(self.id)),
            msg,
        };
        let (mut total, mut next): (u64, u64) = (0, 0);
        for r in &self.job_ids {
            total = total.saturating_add(r.count);
            let end = r.first.checked_add(r.count);
            if end.is_none() || total > MAX_SITES as u64 {
                return Err(damaged(format!(
                    "job id runs pass {MAX_SITES} ids or the largest id"
                )));
            }
            if r.first < next {
                return Err(damaged("job id runs out of order".into()));
            }
            next = end.unwrap_or(u64::MAX);
        }
        let mut job_ids = Vec::with_capacity(total as usize);
        for r in &self.job_ids {
            job_ids.extend(r.first..r.first + r.count);
        }
        Ok(RoundRecord {
            id: self.id,
            created_ms: self.created_ms,
            finished_ms: self.finished_ms,
            params: self.params,
            state: self.state,
            job_ids,
            every_ms: self.every_ms,
            next_round: self.next_round,
            folded: self.folded,
        })
    }
}

/// Whether `round`'s record fits the store's record limit as stored: what
/// [`super::Store::put_round`] would refuse, asked before anything is written.
pub fn check_round(round: &RoundRecord) -> Result<(), codec::CodecError> {
    codec::encode(&StoredRound::from(round), MAX_RECORD_BYTES).map(|_| ())
}

/// The format `b` holds, `None` when none was written (a new store).
fn found_format(b: &impl Backend) -> Result<Option<u32>, StoreError> {
    let Some((_, v)) = b
        .entries(Tree::Meta)?
        .into_iter()
        .find(|(k, _)| k == FORMAT_KEY)
    else {
        return Ok(None);
    };
    let bytes = <[u8; 4]>::try_from(v.as_slice()).map_err(|_| StoreError::Corrupt {
        tree: Tree::Meta.name(),
        key: "format".into(),
        msg: format!("{} bytes where a format number is 4", v.len()),
    })?;
    Ok(Some(u32::from_le_bytes(bytes)))
}

/// Check `b`'s format at opening: a new (empty) store gets
/// [`STORE_FORMAT`] written and synced; a newer format is refused, records
/// without a format (a store from before 0.1.0) are refused, and a format
/// no release wrote is damage, all with nothing written.
pub(super) fn prepare(b: &impl Backend) -> Result<(), StoreError> {
    match found_format(b)? {
        Some(STORE_FORMAT) => Ok(()),
        Some(f) if f > STORE_FORMAT => Err(StoreError::Format {
            found: f,
            supported: STORE_FORMAT,
        }),
        Some(f) => Err(StoreError::Corrupt {
            tree: Tree::Meta.name(),
            key: "format".into(),
            msg: format!("format {f}, which no release wrote"),
        }),
        None => {
            for tree in Tree::ALL {
                if !b.entries(tree)?.is_empty() {
                    return Err(StoreError::Unnumbered {
                        supported: STORE_FORMAT,
                    });
                }
            }
            b.insert(Tree::Meta, FORMAT_KEY, STORE_FORMAT.to_le_bytes().to_vec())?;
            b.write_out()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_runs_and_come_back_the_same() {
        for ids in [
            vec![],
            vec![7],
            vec![1, 2, 3, 4],
            vec![1, 2, 5, 6, 7, 9],
            vec![u64::MAX - 2, u64::MAX - 1],
        ] {
            let r = runs(&ids);
            let back: Vec<u64> = r
                .iter()
                .flat_map(|r| (0..r.count).map(move |i| r.first + i))
                .collect();
            assert_eq!(back, ids);
        }
        assert_eq!(runs(&[1, 2, 5, 6, 7, 9]).len(), 3);
        assert_eq!(
            runs(&(10..1_000_010).collect::<Vec<_>>()),
            [IdRun {
                first: 10,
                count: 1_000_000
            }]
        );
    }
}
