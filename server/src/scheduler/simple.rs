//! The two baselines: `round-robin` (jobs in list order, one per free
//! slot) and `size-aware` (largest expected job first).
//!
//! Invariants: neither looks at other hosts; both take only queued jobs and
//! never copies.

use super::{in_list_order, Ctx, Decision, Policy, WorkAsk};

// ---- policies ----

/// Jobs in list order, one per free slot (the papers' baseline).
pub struct RoundRobin;

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        Decision {
            jobs: in_list_order(&ctx.queue, ask.free_slots as usize),
            replicas: Vec::new(),
        }
    }
}

/// Longest expected job first, until the asked seconds are covered or the
/// free slots are used (at least one job when a slot is free).
pub struct SizeAware;

impl Policy for SizeAware {
    fn name(&self) -> &'static str {
        "size-aware"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let cost = ctx.asker().cost(ctx.delay_s);
        let mut out = Vec::new();
        let mut total = 0.0;
        while out.len() < ask.free_slots as usize
            && (out.is_empty() || total < ask.want_seconds as f64)
        {
            let Some(j) = ctx.queue.largest(&out, f64::INFINITY) else {
                break;
            };
            total += j.pages * cost;
            out.push(j.job_id);
        }
        Decision {
            jobs: out,
            replicas: Vec::new(),
        }
    }
}
