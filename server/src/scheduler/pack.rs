//! First fit (`pack`): fill hosts already working before waking idle ones,
//! so the fewest machines are in use.
//!
//! Invariants: it takes only queued jobs and never copies.

use super::{in_list_order, Ctx, Decision, Policy, WorkAsk};

/// First fit: fill hosts that are already working and have free slots before
/// waking idle ones, so the fewest machines are in use.
pub struct Pack;

impl Policy for Pack {
    fn name(&self) -> &'static str {
        "pack"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker();
        let n = if me.busy > 0 {
            me.idle_slots().min(ask.free_slots)
        } else {
            // Wake this host only when the busy hosts' free slots cannot take the queue.
            let room: u64 = ctx
                .hosts
                .iter()
                .enumerate()
                .filter(|(i, h)| *i != ctx.asker && h.online && h.busy > 0)
                .map(|(_, h)| h.idle_slots() as u64)
                .sum();
            if ctx.queue.len() as u64 > room {
                me.slots.max(1).min(ask.free_slots)
            } else {
                0
            }
        };
        Decision {
            jobs: in_list_order(ctx.queue, n as usize),
            replicas: Vec::new(),
        }
    }
}
