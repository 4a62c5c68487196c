//! The BeeBot-EDG batch heuristic (`batch`): a batch per host at round
//! start, sized to its share of the speed, released to the others when its
//! host is not heard from in time.
//!
//! Invariants: the plan is a pure function of the jobs and hosts; a host
//! takes only its own batch until the grace has passed. It never copies jobs.

use super::{Ctx, Decision, HostView, JobView, Policy, WorkAsk, BATCH_GRACE_MS};

/// The BeeBot-EDG batch heuristic: at round start every host gets a batch
/// sized to its share of the speed; hosts pull their own batch, largest
/// first, one per free slot; a batch whose host is not heard from within
/// [`BATCH_GRACE_MS`] is released to the others.
pub struct Batch;

/// The BeeBot-EDG batch plan over `(job, pages)` and `(host, speed)`.
///
/// (1) Sort sites by size and hosts by speed, both descending; (2) total the
/// sizes; (3) each host's share is the total × its speed / the sum of speeds;
/// (4) for each host in that order, take the next largest sites while the
/// batch stays within its share (the site that would overflow goes back);
/// (5) deal the remaining sites, smallest first, to the batches in reverse
/// host order.
pub fn batch_plan(jobs: &[(u64, f64)], hosts: &[(u64, f64)]) -> Vec<(u64, u64)> {
    if hosts.is_empty() {
        return Vec::new();
    }
    let mut js: Vec<(u64, f64)> = jobs.to_vec();
    js.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut hs: Vec<(u64, f64)> = hosts.to_vec();
    hs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let total: f64 = js.iter().map(|j| j.1).sum();
    let speeds: f64 = hs.iter().map(|h| h.1.max(0.0)).sum();
    let mut out = Vec::with_capacity(js.len());
    let mut next = 0;
    for &(host, speed) in &hs {
        let share = if speeds > 0.0 {
            total * speed.max(0.0) / speeds
        } else {
            total / hs.len() as f64
        };
        let mut batch = 0.0;
        while next < js.len() && batch + js[next].1 <= share {
            batch += js[next].1;
            out.push((js[next].0, host));
            next += 1;
        }
    }
    // The rest, smallest first, dealt to the slowest host first.
    for (k, &(job, _)) in js[next..].iter().rev().enumerate() {
        let host = hs[hs.len() - 1 - k % hs.len()].0;
        out.push((job, host));
    }
    out
}

impl Batch {
    /// Whether jobs of `owner`'s batch may go to the asking host.
    fn open_to(ctx: &Ctx, owner: u64) -> bool {
        let me = ctx.asker().host_id;
        if owner == me {
            return true;
        }
        match ctx.host(owner) {
            None => true, // revoked or gone
            Some(owner) => {
                ctx.now_ms.saturating_sub(ctx.round_started_ms) >= BATCH_GRACE_MS
                    && ctx.now_ms.saturating_sub(owner.last_seen_ms) >= BATCH_GRACE_MS
            }
        }
    }
}

impl Policy for Batch {
    fn name(&self) -> &'static str {
        "batch"
    }
    fn plan(&self, jobs: &[JobView], hosts: &[HostView], delay_s: f64) -> Vec<(u64, u64)> {
        let js: Vec<(u64, f64)> = jobs.iter().map(|j| (j.job_id, j.pages)).collect();
        let hs: Vec<(u64, f64)> = hosts.iter().map(|h| (h.host_id, h.rate(delay_s))).collect();
        batch_plan(&js, &hs)
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker().host_id;
        let mut out = Vec::new();
        // Its own batch first, then released jobs; largest first in each
        // (one pass over the batches' largest jobs).
        for own in [true, false] {
            while out.len() < ask.free_slots as usize {
                let pick = if own {
                    ctx.queue.largest_assigned(me, &out)
                } else {
                    ctx.queue
                        .largest_released(&out, |h| h != me && Self::open_to(ctx, h))
                };
                match pick {
                    Some(j) => out.push(j.job_id),
                    None => break,
                }
            }
        }
        Decision {
            jobs: out,
            replicas: Vec::new(),
        }
    }
}
