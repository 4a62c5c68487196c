//! First fit (`pack`): fill the hosts already working up to what they can
//! hold before waking an idle one, so the fewest machines are disturbed for
//! the same work, at a cost in makespan (the queue waits for their slots
//! rather than spreading over idle machines).
//!
//! A host holds a job when it fits in every resource it offers: units (its
//! slots, as its benchmark reports them, times the units a slot may hold,
//! the grid's own cap: [`host_capacity`]), memory and bandwidth (what it
//! reports in `Request::Resources`, against what its held units and the
//! job need at once: [`super::resources`]). Jobs are tried in list order;
//! one that does not fit is passed over for a smaller one after it (first
//! fit). A host holding nothing always takes one job, so a site larger
//! than any host's offer still runs, alone.
//!
//! Invariants: it takes only queued jobs and never copies; an idle host is
//! woken only when the working hosts online cannot hold the queue (their
//! room for jobs like the next queued one: one pass over the hosts); a
//! decision tries at most [`FIT_LOOKAHEAD`] queued jobs.

use beebot_shared::limits::{MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_SLOT};

use super::resources::Demand;
use super::{seconds_per_page, Ctx, Decision, HostView, JobView, Policy, Queue, WorkAsk};

/// First fit: fill hosts that are already working before waking idle
/// ones, so the fewest machines are in use.
pub struct Pack;

/// Queued jobs tried per host: enough to fill the largest host's units
/// ([`MAX_UNITS_HELD_PER_HOST`]) past jobs that do not fit, so a decision's
/// cost does not grow with the queue.
pub const FIT_LOOKAHEAD: usize = 4 * MAX_UNITS_HELD_PER_HOST;

/// Units a host may hold at once: a scanning unit and a buffer per slot,
/// bounded for every host (the grid's `held_cap`).
pub fn host_capacity(slots: u32) -> u64 {
    (u64::from(slots.max(1)) * MAX_UNITS_PER_SLOT as u64).min(MAX_UNITS_HELD_PER_HOST as u64)
}

/// The jobs of `queue` (in list order, those this host failed last) that
/// fit on `h` one after another, at most `most`.
fn first_fit<'q>(
    h: &HostView,
    queue: &'q Queue<'q>,
    delay_s: f64,
    most: u64,
) -> impl Iterator<Item = JobView> + 'q {
    let mut units = u64::from(h.busy);
    let cap = host_capacity(h.slots).min(u64::from(h.busy).saturating_add(most));
    let mut demand = h.demand;
    let capacity = h.capacity;
    let spp = seconds_per_page(h.pages_per_s, delay_s);
    queue
        .iter()
        .filter(|j| !j.failed_here)
        .chain(queue.failed_jobs())
        .take(FIT_LOOKAHEAD)
        .filter(move |j| {
            if units >= cap {
                return false;
            }
            let mut after = demand;
            after.add(Demand::of_scan(j.pages, spp));
            // An empty host takes its first job whatever it needs.
            if units > 0 && !after.fits(&capacity) {
                return false;
            }
            units += 1;
            demand = after;
            true
        })
}

/// Jobs like `job` a working host could still take: its units left,
/// bounded by how many such scans fit in the memory and bandwidth it has
/// left.
fn room_for(h: &HostView, job: Option<&JobView>, delay_s: f64) -> u64 {
    let units = host_capacity(h.slots).saturating_sub(u64::from(h.busy));
    let Some(j) = job else {
        return units;
    };
    let need = Demand::of_scan(j.pages, seconds_per_page(h.pages_per_s, delay_s));
    let fit = |left: f64, per: f64| {
        if left.is_infinite() {
            u64::MAX
        } else {
            (left.max(0.0) / per).floor() as u64
        }
    };
    units
        .min(fit(
            h.capacity.memory_mb - h.demand.memory_mb,
            need.memory_mb,
        ))
        .min(fit(h.capacity.kbps - h.demand.kbps, need.kbps))
}

impl Policy for Pack {
    fn name(&self) -> &'static str {
        "pack"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker();
        // A working host takes what fits (the grid holds it to its cap); an
        // idle one is woken only when the working hosts online cannot hold
        // the queue.
        let wake = me.busy > 0 || {
            // One pass over the hosts: each working host's room for jobs
            // like the next queued one (not a fit over the queue per host,
            // which would cost hosts × queue on every idle host's request).
            let next = ctx.queue.first();
            let next = next.as_ref();
            let room: u64 = ctx
                .hosts
                .iter()
                .enumerate()
                .filter(|(i, h)| *i != ctx.asker && h.online && h.busy > 0)
                .map(|(_, h)| room_for(h, next, ctx.delay_s))
                .sum();
            ctx.queue.len() as u64 > room
        };
        let jobs = if wake {
            first_fit(me, &ctx.queue, ctx.delay_s, u64::from(ask.free_slots))
                .map(|j| j.job_id)
                .collect()
        } else {
            Vec::new()
        };
        Decision {
            jobs,
            replicas: Vec::new(),
        }
    }
}
