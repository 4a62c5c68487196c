//! The default policy (`adaptive`): longest expected job first to the host
//! that would finish it soonest (or to an idle slot that ends it before the
//! queue could drain), hand-overs of critical scans from clearly slower
//! hosts, then of the last scans.
//!
//! Invariants: a decision is one pass over the hosts ([`Field`]) and
//! O(log queue) plus the running
//! jobs it reads, latest end first, until none later can be worth a copy
//! (the queue is indexed by size: [`super::Queue`]); at most [`MAX_COPIES`] copies
//! of a job run, and a copy goes only to the online host that would finish
//! it soonest. It never reads a clock: `now` comes in the context.
//!
//! It wants a copy of a running scan (a hand-over) only where the copy ends the
//! scan before `REPLICA_GAIN` of its expected end, after `HAND_OVER_S`, at the
//! holder's pace times the ratio of their costs per page; and of the scans
//! whose every holder is offline, largest first, until one is too small.
//! `Field` holds the other online hosts' starts and costs per page (once per
//! pace class) and the queue's drain sums, built once a decision however many
//! units it hands out.

use super::{
    class_pace, pace_class, Ctx, Decision, JobView, Policy, RunningView, WorkAsk, ADAPTIVE_SLACK,
    ASK_LAG_S, HAND_OVER_S, HEDGE_REACH, MAX_COPIES, REPLICA_GAIN,
};

/// The default: longest expected job first, each to the host that would
/// finish it soonest given what it already holds, sized by learned speeds;
/// hand-overs of the scans on the critical path; then of the last scans.
///
/// On a request, the asking host takes the largest queued job for which no
/// other online host would finish clearly sooner (each other host's start is
/// its next free slot plus [`ASK_LAG_S`]), or that some host may not take
/// (it failed it, or wrote its result under check) and that no other host
/// that may take it would finish sooner: the faster host may be one that
/// may not. A check a faster host not trusted would win is left for it
/// (it may check once trusted) unless the asker is idle with nothing
/// else to take. Finishing times are linear in the
/// job's pages, so one pass over the hosts gives the interval of sizes the
/// asker wins, and the queue's size index the largest job in it: a decision
/// is O(hosts + log queue) per unit. An asker with an idle slot that wins
/// no job takes the largest of a site scanned before that it ends before
/// the queued and held work could drain over every slot ([`Field`]'s
/// level): with thousands of jobs queued the faster hosts cannot take
/// them all at once, and an idle slot is lost to the round.
///
/// A copy (at most [`MAX_COPIES`] counted) is a hand-over: the grid stops
/// the running scan at a page boundary and the asker continues it, so it is
/// wanted only when it ends the job clearly sooner: the asker would scan
/// what is left at the holder's observed pace times the ratio of their
/// costs per page (the site's own pace holds on any host), and with
/// [`HAND_OVER_S`] added must end before [`REPLICA_GAIN`] of the running
/// scan's expected end. Copies go latest expected end first. While jobs are
/// queued, a copy comes before any queued job, for a running job on the
/// critical path: one that ends after the queued and held work would drain
/// over the online hosts even without the asker's slot (so the grid has
/// the slack to spare a slot), after any queued job could end on the
/// fastest host (within [`HEDGE_REACH`], so long queued jobs are placed
/// first), and within [`HEDGE_REACH`] of the longest running job. A job
/// whose every holder is offline is copied when the copy would outlast the
/// queue (it lands when the holder reports again, or once the grid takes
/// the scan back at its lease). Once nothing is queued and the asker has an
/// idle slot, it takes over the running job expected to finish last on
/// the same terms.
pub struct Adaptive;

/// What a decision needs of the hosts, gathered in one pass over them
/// (O(hosts), a cost per page worked out once per host and pace class):
/// each other online host as a line (its start and its seconds per page
/// on sites of a pace class, slack applied), and the queue's drain over
/// the online hosts (the asker included). A decision then reads these
/// instead of the hosts' views.
struct Field<'a> {
    ctx: &'a Ctx<'a>,
    /// Every other online host's index in `ctx.hosts`, in host order.
    others: Vec<usize>,
    /// `(start_s, cost)` of each of `others` on sites of each pace class
    /// ([`super::PACE_CLASSES`]), worked out when first asked for.
    lines: Vec<std::cell::OnceCell<Vec<(f64, f64)>>>,
    /// Their host ids, in the same order.
    ids: Vec<u64>,
    /// Whether each may check a result the asker may check: a trusted
    /// asker bars every host not trusted from its checks.
    may_check: Vec<bool>,
    /// Pages per second over every slot of the online hosts and the asker.
    rate: f64,
    /// The work they hold, in pages at their speeds.
    held: f64,
    /// The least seconds per page among them.
    fastest: f64,
}

impl<'a> Field<'a> {
    fn of(ctx: &'a Ctx<'a>) -> Field<'a> {
        let mut others = Vec::with_capacity(ctx.hosts.len());
        let mut ids = Vec::with_capacity(ctx.hosts.len());
        let mut may_check = Vec::with_capacity(ctx.hosts.len());
        let trusted_asker = ctx.asker().trusted;
        let (mut rate, mut held, mut fastest) = (0.0, 0.0, f64::INFINITY);
        for (i, h) in ctx.hosts.iter().enumerate() {
            let asker = i == ctx.asker;
            if !asker && !h.online {
                continue;
            }
            let c = h.cost(ctx.delay_s);
            rate += h.slots.max(1) as f64 / c;
            held += h.load_s / c;
            fastest = fastest.min(c);
            if !asker {
                others.push(i);
                ids.push(h.host_id);
                may_check.push(h.trusted || !trusted_asker);
            }
        }
        Field {
            ctx,
            others,
            lines: (0..super::PACE_CLASSES)
                .map(|_| std::cell::OnceCell::new())
                .collect(),
            ids,
            may_check,
            rate,
            held,
            fastest,
        }
    }

    /// The seconds the queued and held work needs over every slot of the
    /// online hosts and the asker: no schedule ends it sooner.
    fn level_s(&self) -> f64 {
        (self.ctx.queue.total_pages() + self.held) / self.rate.max(f64::MIN_POSITIVE)
    }

    /// The asker's seconds per page on sites of pace class `class`.
    fn asker_cost(&self, class: u8) -> f64 {
        self.ctx
            .asker()
            .cost_at(self.ctx.delay_s, class_pace(class))
    }

    /// `(start_s, cost)` of every other online host on sites of pace
    /// class `class`, in host order.
    fn lines(&self, class: u8) -> &[(f64, f64)] {
        let class = usize::from(class.min(super::PACE_CLASSES - 1));
        self.lines[class].get_or_init(|| {
            let pace = class_pace(class as u8);
            self.others
                .iter()
                .map(|&i| {
                    let h = &self.ctx.hosts[i];
                    (
                        ADAPTIVE_SLACK * (h.free_at_s + ASK_LAG_S),
                        ADAPTIVE_SLACK * h.cost_at(self.ctx.delay_s, pace),
                    )
                })
                .collect()
        })
    }
}

impl Adaptive {
    /// The interval of job sizes (pages) of pace class `class` the asker
    /// finishes no later than every other online host, starting at
    /// `start_s` at its cost on that class, widened by a millionth each
    /// way (so a size at an end is in it). O(hosts).
    fn winning_sizes(field: &Field, class: u8, start_s: f64) -> (f64, f64) {
        let cost = field.asker_cost(class);
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        for &(s_g, c_g) in field.lines(class) {
            // start + x·cost ≤ s_g + x·c_g
            let dc = cost - c_g;
            let ds = s_g - start_s;
            if dc > 0.0 {
                hi = hi.min(ds / dc);
            } else if dc < 0.0 {
                lo = lo.max(ds / dc);
            } else if ds < 0.0 {
                return (1.0, 0.0);
            }
        }
        (lo * 0.999_999, hi * 1.000_001)
    }

    /// While jobs are queued: the seconds the queued and held work needs over
    /// the online hosts were the asker to spend one slot on a copy (the level
    /// it reaches), and the seconds of the largest queued job on the fastest
    /// online host (the queued work counts every queued job: it waits for
    /// the grid, not for one host).
    fn queue_drain_s(ctx: &Ctx, field: &Field, cost: f64) -> (f64, f64) {
        let (work, largest) = (ctx.queue.total_pages(), ctx.queue.largest_pages());
        let rate = (field.rate - 1.0 / cost).max(f64::MIN_POSITIVE);
        ((work + field.held) / rate, largest * field.fastest)
    }

    /// Copies of running jobs for the asker, latest expected finish first, at
    /// most `n`, starting at `start_s` with `cost` s/page: only jobs whose
    /// size the asker would finish soonest of the online hosts. With nothing
    /// queued (the tail): a copy that would end well before the running one.
    /// With jobs queued: hedges of jobs on the critical path, and copies of
    /// jobs whose every holder is offline that would outlast the queue (see
    /// [`Adaptive`]).
    /// `field` is read only when some job runs.
    fn replicas<'f>(
        ctx: &Ctx,
        field: impl Fn() -> &'f Field<'f>,
        n: usize,
        start_s: f64,
        cost: f64,
    ) -> Vec<u64> {
        if n == 0 {
            return Vec::new();
        }
        if ctx.running.latest_first().next().is_none() {
            return Vec::new();
        }
        let field = field();
        // With jobs queued: (level, largest queued) and the longest running
        // job (the first with a finite end).
        let queued = (!ctx.queue.is_empty()).then(|| {
            let longest_s = ctx
                .running
                .latest_first_finite()
                .next()
                .map_or(0.0, |r| r.finish_s.max(0.0));
            (Self::queue_drain_s(ctx, field, cost), longest_s)
        });
        // The sizes this host would finish soonest, for each pace class
        // (one pass over the hosts each, when first asked for).
        let me = ctx.asker();
        let wins: Vec<std::cell::OnceCell<(f64, f64)>> = (0..super::PACE_CLASSES)
            .map(|_| std::cell::OnceCell::new())
            .collect();
        let win = |pace_s: f64| {
            let class = pace_class(pace_s);
            *wins[usize::from(class)].get_or_init(|| Self::winning_sizes(field, class, start_s))
        };
        let (lo, _) = win(0.0);
        // A copy is a hand-over: the asker would scan what is left of
        // the same site, as fast as the holder scans it times the ratio
        // of their costs on that site (what the site adds to each page,
        // its response times, the scan's pace shows: a slow site costs a
        // slow host more than a fast one), after the hand-over's cost. A
        // holder never measured (no benchmark yet, no job done) has no
        // cost to compare: then the asker's own cost per page is all
        // there is.
        let holder_cost = |r: &RunningView| {
            r.holder
                .and_then(|id| ctx.host(id))
                .filter(|h| h.pages_per_s.is_some())
                .map(|h| h.cost_at(ctx.delay_s, r.pace_s))
        };
        let worth = |r: &RunningView| {
            let mine_per_page = me.cost_at(ctx.delay_s, r.pace_s);
            let scan = match holder_cost(r) {
                Some(c) if r.finish_s.is_finite() && c > 0.0 => r.finish_s * mine_per_page / c,
                _ => r.pages * mine_per_page,
            };
            let mine = start_s + HAND_OVER_S + scan;
            match queued {
                None => mine < REPLICA_GAIN * r.finish_s,
                Some(((level, largest), _)) if r.finish_s.is_infinite() => {
                    mine >= level.max(largest)
                }
                Some(((level, largest), longest_s)) => {
                    r.finish_s >= level.max(largest * HEDGE_REACH)
                        && r.finish_s * HEDGE_REACH >= longest_s
                        && mine < REPLICA_GAIN * r.finish_s
                }
            }
        };
        let take = |r: &RunningView| {
            let (lo, hi) = win(r.pace_s);
            r.copies < MAX_COPIES
                && !r.on_asker
                && !r.failed_here
                && r.pages >= lo
                && r.pages <= hi
                && worth(r)
        };
        let mut out: Vec<u64> = Vec::new();
        // Jobs whose every holder is offline, the largest first: none
        // smaller than `lo` is taken, nor (with jobs queued) one whose copy
        // would end before the queue drains.
        for r in ctx.running.latest_first() {
            if out.len() >= n || r.finish_s.is_finite() || r.pages < lo {
                break;
            }
            if queued.is_some() && !worth(&r) && r.pages <= win(r.pace_s).1 {
                break;
            }
            if take(&r) {
                out.push(r.job_id);
            }
        }
        // Then by expected end: each test on the end grows with it, so the
        // first job whose end fails one ends the reading.
        let may_be_worth = |finish_s: f64| match queued {
            None => start_s + HAND_OVER_S + lo.max(0.0) * cost < REPLICA_GAIN * finish_s,
            Some(((level, largest), longest_s)) => {
                finish_s >= level.max(largest * HEDGE_REACH) && finish_s * HEDGE_REACH >= longest_s
            }
        };
        for r in ctx.running.latest_first_finite() {
            if out.len() >= n || !may_be_worth(r.finish_s) {
                break;
            }
            if take(&r) {
                out.push(r.job_id);
            }
        }
        out
    }
}

impl Adaptive {
    /// Whether the asker, starting at `start_s` with `cost` s/page, would
    /// finish `pages` no later than every other online host that may take
    /// the job (none of `barred`: a host that failed it, or an author of
    /// its result under check; with `trust_bars`, for a check, none the
    /// asker's trust bars). O(hosts).
    fn wins_among(field: &Field, j: &JobView, pages: f64, start_s: f64, trust_bars: bool) -> bool {
        let class = pace_class(j.pace_s);
        let cost = field.asker_cost(class);
        let mine = start_s + pages * cost;
        let barred = &j.barred;
        field
            .lines(class)
            .iter()
            .zip(&field.ids)
            .zip(&field.may_check)
            .all(|((&(s_g, c_g), id), &may_check)| {
                barred.contains(id)
                    || (trust_bars && j.under_check && !may_check)
                    || mine <= (s_g + pages * c_g) * 1.000_001
            })
    }

    /// The longest queued job on the asker (ties: list order) it has not
    /// failed and does not take already, whose size it would finish
    /// soonest among the jobs of its site's pace class, or that some host
    /// may not take (it failed it, or wrote its result under check) and
    /// that it would finish soonest of the hosts that may take it; a site
    /// never scanned is placed at the `largest` queued size. With none,
    /// for an `idle` slot: the longest job of a site scanned before that
    /// the asker ends before the queue's level ([`Field::level_s`]), else
    /// the first check it would end soonest of the hosts its trust lets
    /// check it. O(classes × (hosts + log queue)) plus the jobs passed
    /// over, and O(hosts) for the first job some host may not take.
    fn largest_won(
        ctx: &Ctx,
        field: &Field,
        out: &[u64],
        largest: f64,
        (start_s, idle): (f64, bool),
    ) -> Option<JobView> {
        let me = ctx.asker();
        let place = |j: &JobView| {
            if j.size_known {
                j.pages
            } else {
                j.pages.max(largest)
            }
        };
        let seconds = |j: &JobView| place(j) * me.cost_at(ctx.delay_s, j.pace_s);
        let won = |class: u8| Self::winning_sizes(field, class, start_s);
        let mut picks: Vec<JobView> = Vec::new();
        let classes = ctx.queue.known_classes();
        for &class in &classes {
            picks.extend(ctx.queue.largest_known_between(class, won(class), out));
        }
        let (lo, hi) = won(0);
        picks.extend(
            (largest >= lo && largest <= hi)
                .then(|| ctx.queue.first_unknown(out))
                .flatten(),
        );
        picks.extend(
            ctx.queue
                .barred_somewhere()
                .find(|j| !j.failed_here && !out.contains(&j.job_id))
                .filter(|j| Self::wins_among(field, j, place(j), start_s, false)),
        );
        let longest = |picks: Vec<JobView>| {
            picks.into_iter().min_by(|a, b| {
                seconds(b)
                    .total_cmp(&seconds(a))
                    .then((a.order, a.job_id).cmp(&(b.order, b.job_id)))
            })
        };
        let best = longest(picks);
        if best.is_some() || !idle {
            return best;
        }
        // Each queued job alone ends sooner on a faster host, but the
        // faster hosts cannot take them all at once: a slot left idle is
        // lost to the round, and a job that ends before the queue could
        // drain over every slot costs it nothing. Sites never scanned are
        // left to the hosts that win them (they may be as large as the
        // cap), and the asker's buffer to its wins (a host that buffered
        // such jobs would look busy and win no site never scanned).
        let level_s = field.level_s();
        let before_level = longest(
            classes
                .iter()
                .filter_map(|&class| {
                    let most = (level_s - start_s) / field.asker_cost(class);
                    (most > 0.0)
                        .then(|| ctx.queue.largest_known_between(class, (0.0, most), out))
                        .flatten()
                })
                .collect(),
        );
        if before_level.is_some() {
            return before_level;
        }
        // A check a faster host would end sooner, but that host's trust
        // does not let it check while the asker is online: rather than
        // wait for it to be trusted (as a check of a busy round best
        // does), an idle asker takes it when no host that may check it
        // would end it sooner, so a check never waits for ever.
        ctx.queue
            .barred_somewhere()
            .find(|j| j.under_check && !j.failed_here && !out.contains(&j.job_id))
            .filter(|j| Self::wins_among(field, j, place(j), start_s, true))
    }
}

impl Policy for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }
    fn replicates(&self) -> bool {
        true
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        let me = ctx.asker();
        let cost = me.cost(ctx.delay_s);
        let slots = me.slots.max(1) as f64;
        let mut idle = me.idle_slots();
        // The hosts, read once for the whole decision, when it needs them.
        let field = std::cell::OnceCell::new();
        let field = || field.get_or_init(|| Field::of(ctx));
        // A copy of a job on the critical path (from a slower host, or a job stuck on
        // offline hosts) comes first, into the next free slot.
        if !ctx.queue.is_empty() && ask.free_slots > 0 {
            let start = if idle > 0 { 0.0 } else { me.free_at_s };
            let critical = Self::replicas(ctx, field, 1, start, cost);
            if !critical.is_empty() {
                return Decision {
                    jobs: Vec::new(),
                    replicas: critical,
                };
            }
        }
        let mut load = me.load_s;
        let mut start = if idle > 0 { 0.0 } else { me.free_at_s };
        let mut out = Vec::new();
        let mut total = 0.0;
        // A site never scanned may be as large as the page cap allows: it is
        // placed at the cap (or the largest queued job, when larger): early,
        // on a host that would finish that soonest, and counted at its
        // expected size.
        let largest = ctx.queue.largest_pages().max(ctx.max_pages);
        while out.len() < ask.free_slots as usize
            && (out.is_empty() || total < ask.want_seconds as f64)
        {
            let mut pick = Self::largest_won(ctx, field(), &out, largest, (start, idle > 0));
            // A job this host failed comes back to it only when nothing else is left.
            if pick.is_none() && idle > 0 {
                let left = ctx
                    .queue
                    .iter()
                    .any(|j| !j.failed_here && !out.contains(&j.job_id));
                if !left {
                    pick = ctx.queue.largest_failed(&out);
                }
            }
            let Some(j) = pick else { break };
            let e = j.pages * me.cost_at(ctx.delay_s, j.pace_s);
            total += e;
            load += e;
            out.push(j.job_id);
            idle = idle.saturating_sub(1);
            start = if idle > 0 {
                0.0
            } else {
                start.max(load / slots)
            };
        }
        // Tail replication: nothing queued, and this host has a slot to spare.
        let replicas = if ctx.queue.is_empty() && idle > 0 && out.is_empty() {
            Self::replicas(ctx, field, idle.min(ask.free_slots) as usize, 0.0, cost)
        } else {
            Vec::new()
        };
        Decision {
            jobs: out,
            replicas,
        }
    }
}
