//! Water-filling (`level`): pour the pending work over the hosts' loads and
//! give the asking host only what lifts it to the level line.
//!
//! Invariants: the level line is monotone in the work poured; a host never
//! takes work that would lift it above the line (but for its first job). It
//! never copies jobs.

use super::{Ctx, Decision, HostView, Policy, WorkAsk};

/// Water-filling: pour the pending work over the hosts' current loads and
/// give the asking host only what lifts it to the level line.
pub struct Level;

/// The level line (seconds from now) that `work` pages reach when poured over
/// hosts given as `(load seconds, pages per second)`; hosts whose load is
/// above the line take nothing.
pub fn water_level(hosts: &mut [(f64, f64)], work: f64) -> f64 {
    hosts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rate = 0.0;
    let mut ice = 0.0; // Σ load × rate over the hosts under the line
    let mut level = 0.0;
    for (k, &(load, r)) in hosts.iter().enumerate() {
        rate += r.max(0.0);
        ice += load * r.max(0.0);
        if rate <= 0.0 {
            continue;
        }
        level = (work + ice) / rate;
        let next = hosts.get(k + 1).map(|h| h.0).unwrap_or(f64::INFINITY);
        if level <= next {
            break;
        }
    }
    level
}

impl Policy for Level {
    fn name(&self) -> &'static str {
        "level"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker();
        // The work waiting for the grid, whoever may take it.
        let work = ctx.queue.total_pages();
        let ice = |h: &HostView| h.load_s / h.slots.max(1) as f64;
        let mut buckets: Vec<(f64, f64)> = ctx
            .hosts
            .iter()
            .enumerate()
            .filter(|(i, h)| *i == ctx.asker || h.online)
            .map(|(_, h)| (ice(h), h.rate(ctx.delay_s)))
            .collect();
        let level = water_level(&mut buckets, work);
        let mut quota = (level - ice(me)).max(0.0) * me.rate(ctx.delay_s);
        let mut out = Vec::new();
        while out.len() < ask.free_slots as usize {
            match ctx.queue.largest(&out, quota) {
                Some(j) => {
                    quota -= j.pages;
                    out.push(j.job_id);
                }
                None => break,
            }
        }
        // Below the line with an idle slot but every job too big for the gap:
        // the smallest one, so no slot idles while work waits.
        if out.is_empty() && level > ice(me) && me.idle_slots() > 0 && ask.free_slots > 0 {
            if let Some(j) = ctx.queue.smallest(&out) {
                out.push(j.job_id);
            }
        }
        Decision {
            jobs: out,
            replicas: Vec::new(),
        }
    }
}
