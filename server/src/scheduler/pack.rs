//! First fit (`pack`): fill the hosts already working up to what they may
//! hold before waking an idle one, so the fewest machines are disturbed for
//! the same work, at a cost in makespan (the queue waits for their slots
//! rather than spreading over idle machines).
//!
//! A host's capacity is counted in units: its slots (as its benchmark
//! reports them) times the units a slot may hold, the grid's own cap
//! ([`host_capacity`]). Slots are the one resource packed: hosts report no
//! memory, and of bandwidth only the benchmark's measured KB/s, not a cap
//! a scan would use up (a scan's traffic is bounded by the politeness delay).
//!
//! Invariants: it takes only queued jobs and never copies; an idle host is
//! woken only when the working hosts online cannot hold the queue.

use beebot_shared::limits::{MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_SLOT};

use super::{in_list_order, Ctx, Decision, HostView, Policy, WorkAsk};

/// First fit: fill hosts that are already working before waking idle
/// ones, so the fewest machines are in use.
pub struct Pack;

/// Units a host may hold at once: a scanning unit and a buffer per slot,
/// bounded for every host (the grid's `held_cap`).
pub fn host_capacity(slots: u32) -> u64 {
    (u64::from(slots.max(1)) * MAX_UNITS_PER_SLOT as u64).min(MAX_UNITS_HELD_PER_HOST as u64)
}

/// Units a working host could still take.
fn room(h: &HostView) -> u64 {
    host_capacity(h.slots).saturating_sub(u64::from(h.busy))
}

impl Policy for Pack {
    fn name(&self) -> &'static str {
        "pack"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker();
        // The working hosts online besides the asker, and what they could still hold.
        let others: u64 = ctx
            .hosts
            .iter()
            .enumerate()
            .filter(|(i, h)| *i != ctx.asker && h.online && h.busy > 0)
            .map(|(_, h)| room(h))
            .sum();
        // A working host takes what it asks for (the grid holds it to its cap);
        // an idle one is woken only when the working ones cannot hold the queue.
        let n = if me.busy > 0 || ctx.queue.len() as u64 > others {
            ask.free_slots
                .min(u32::try_from(room(me)).unwrap_or(u32::MAX))
        } else {
            0
        };
        Decision {
            jobs: in_list_order(ctx.queue, n as usize),
            replicas: Vec::new(),
        }
    }
}
