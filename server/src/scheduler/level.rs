//! Water-filling (`level`): pour the pending work over the hosts' loads and
//! give the asking host only what lifts it to the level line.
//!
//! Invariants: the level line is monotone in the work poured; a host never
//! takes work that would lift it above the line (but for its first job). It
//! never copies jobs.
//!
//! The water line is found in passes over the hosts (at most `LEVEL_PASSES`,
//! then by sorting them).

use super::{Ctx, Decision, HostView, Policy, WorkAsk};

/// Water-filling: pour the pending work over the hosts' current loads and
/// give the asking host only what lifts it to the level line.
pub struct Level;

/// Passes [`water_level`] makes over the hosts before it sorts them.
pub const LEVEL_PASSES: usize = 8;

/// The level line (seconds from now) that `work` pages reach when poured over
/// hosts given as `(load seconds, pages per second)`; hosts whose load is
/// above the line take nothing. O(hosts) a pass: a line poured over hosts
/// some of which stand above it is too high, and pouring again over only
/// those under it lowers it, never below the level; when no host drops
/// out, it is the level. After [`LEVEL_PASSES`] (loads spread so that
/// hosts drop out one by one) the hosts are sorted instead.
pub fn water_level(hosts: &mut [(f64, f64)], work: f64) -> f64 {
    let mut line = f64::INFINITY;
    let mut under = usize::MAX;
    for _ in 0..LEVEL_PASSES {
        let (mut rate, mut ice, mut n) = (0.0, 0.0, 0);
        for &(load, r) in hosts.iter().filter(|(load, _)| *load < line) {
            rate += r.max(0.0);
            ice += load * r.max(0.0);
            n += 1;
        }
        if n == under {
            return line;
        }
        if rate <= 0.0 {
            break;
        }
        (line, under) = ((work + ice) / rate, n);
    }
    water_level_sorted(hosts, work)
}

/// [`water_level`] by sorting the hosts by load and pouring over them in
/// turn until the line is under the next one.
fn water_level_sorted(hosts: &mut [(f64, f64)], work: f64) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The passes find the level sorting finds.
        #[test]
        fn passes_find_the_sorted_level(
            hosts in proptest::collection::vec((0.0f64..1e5, 0.0f64..50.0), 0..300),
            work in 0.0f64..1e7,
        ) {
            let mut a = hosts.clone();
            let mut b = hosts;
            let (got, want) = (water_level(&mut a, work), water_level_sorted(&mut b, work));
            prop_assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "{got} != {want}");
        }
    }
}
