//! What the grid asks to be persisted: every change to a record, and every
//! id handed out, as a [`Write`] in the order the grid made it. The grid
//! never writes itself: its driver takes the writes after each call
//! ([`Grid::take_writes`]) and persists them in order
//! ([`crate::store::Store::apply`]) before anything that rests on them is
//! answered. A write cannot fail half-way through a call, so the grid's
//! memory is always whole; a store that fails stops acknowledging anything
//! (fail-stop) until a restart reloads what its disk holds.
//!
//! Invariants: an id is never handed out twice, also across a restart (the
//! counter is a write like any record, and the grid opens from the last one
//! stored); writes leave in the order they were made.

use crate::model::{
    ExclusionRecord, HostRecord, IdKind, InviteRecord, JobRecord, RoundRecord, SiteRecord, Write,
};

use super::Grid;

/// The writes the grid made since its driver last took them, and the last
/// id of each kind.
#[derive(Debug, Default)]
pub(super) struct Writes {
    pending: Vec<Write>,
    /// In [`IdKind::ALL`]'s order.
    last_ids: [u64; 4],
}

/// Where `kind`'s last id is kept: its place in [`IdKind::ALL`], as
/// [`crate::store::records`] reads them.
fn slot(kind: IdKind) -> usize {
    IdKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is in IdKind::ALL")
}

impl Writes {
    /// No writes yet, ids going on from `last_ids` (in [`IdKind::ALL`]'s order).
    pub(super) fn from_last_ids(last_ids: [u64; 4]) -> Writes {
        Writes {
            pending: Vec::new(),
            last_ids,
        }
    }

    /// A new id of `kind`: one more than the last, its counter written.
    pub(super) fn next_id(&mut self, kind: IdKind) -> u64 {
        let last = &mut self.last_ids[slot(kind)];
        *last += 1;
        let id = *last;
        self.pending.push(Write::LastId(kind, id));
        id
    }

    pub(super) fn put_site(&mut self, r: &SiteRecord) {
        self.pending.push(Write::Site(r.clone()));
    }
    pub(super) fn remove_site(&mut self, host: &str) {
        self.pending.push(Write::SiteGone(host.to_owned()));
    }
    pub(super) fn put_round(&mut self, r: &RoundRecord) {
        self.pending.push(Write::Round(r.clone()));
    }
    /// A job's record, taken whole: the callers clone it once, out of
    /// the grid's map, to end the map's borrow anyway.
    pub(super) fn put_job(&mut self, r: JobRecord) {
        self.pending.push(Write::Job(r));
    }
    pub(super) fn put_host(&mut self, r: &HostRecord) {
        self.pending.push(Write::Host(r.clone()));
    }
    pub(super) fn put_invite(&mut self, r: &InviteRecord) {
        self.pending.push(Write::Invite(r.clone()));
    }
    pub(super) fn remove_invite(&mut self, token_sha256: &[u8; 32]) {
        self.pending.push(Write::InviteGone(*token_sha256));
    }
    pub(super) fn put_exclusion(&mut self, r: &ExclusionRecord) {
        self.pending.push(Write::Exclusion(r.clone()));
    }
    pub(super) fn remove_exclusion(&mut self, host: &str) {
        self.pending.push(Write::ExclusionGone(host.to_owned()));
    }
}

impl Grid {
    /// The writes made since the last call, in order: the caller persists
    /// them ([`crate::store::Store::apply`]) before it answers anything the
    /// calls since decided.
    pub fn take_writes(&mut self) -> Vec<Write> {
        std::mem::take(&mut self.writes.pending)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::grid::testkit::*;
    use crate::grid::{GridIo, MemoryLinks};
    use crate::model::{IdKind, Write};

    /// Ids go on from the last one stored, also when the grid opens again,
    /// and each is written before the record that carries it.
    #[test]
    fn ids_go_on_across_a_reopen_and_are_written_before_their_records() {
        let store = crate::store::memory();
        let links = Arc::new(MemoryLinks::new());
        let key = beebot_shared::sign::generate_key();
        let open = || {
            Stored::open(
                store.clone(),
                GridIo::in_memory(links.clone(), key.clone(), 7),
                settings(),
            )
        };
        let mut g = open();
        g.add_sites(&site_names(2), T0).unwrap();
        let first = g.start_round(params(3), T0).unwrap();
        let writes = g.take_writes();
        let at = |w: &dyn Fn(&Write) -> bool| writes.iter().position(w).unwrap();
        assert!(
            at(&|w| matches!(w, Write::LastId(IdKind::Round, 1)))
                < at(&|w| matches!(w, Write::Round(r) if r.id == 1))
        );
        assert!(
            at(&|w| matches!(w, Write::LastId(IdKind::Job, 2)))
                < at(&|w| matches!(w, Write::Job(j) if j.id == 2))
        );
        g.store.apply(&writes).unwrap();
        assert!(g.take_writes().is_empty());
        g.cancel_round(first, T0 + 1).unwrap();
        drop(g);
        let mut g = open();
        let second = g.start_round(params(3), T0 + 2).unwrap();
        assert_eq!((first, second), (1, 2));
        let (_, jobs) = g.round(second).unwrap();
        let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [3, 4]);
    }
}
