//! The scheduler: for this host, now, which jobs? Pure code: no I/O, time is an
//! argument. Policies sit behind [`Policy`]; the grid builds the views (the
//! simulator drives the grid itself), the policy decides.
//!
//! The model: a job's size is its expected page count (its last scan, or
//! [`DEFAULT_SITE_PAGES`]); a host's cost is seconds per page on one slot
//! (its learned speed, never faster than the round's politeness delay allows),
//! divided by how often it is online. A job's expected time on a host is
//! size × cost, so every policy compares hosts with one linear model.

use crate::model::SiteStats;

/// Figures used for a site never scanned before.
pub const DEFAULT_SITE_PAGES: f64 = 50.0;
/// Pages per second (per slot) assumed for a host with no benchmark and no finished job.
pub const DEFAULT_HOST_PAGES_PER_S: f64 = 5.0;
/// Slots assumed for a host that sent no benchmark (the client's default).
pub const DEFAULT_HOST_SLOTS: u32 = 2;
/// Weight of the newest job in a host's running speed average.
pub const SPEED_WEIGHT: f64 = 0.3;
/// A host not heard from for this long is offline (an idle client asks at
/// least every minute; a busy one reports progress every ten seconds).
pub const ONLINE_WINDOW_MS: u64 = 150_000;
/// A host that holds running units reports progress every ten seconds: a
/// silence of this long means it is away.
pub const BUSY_ONLINE_WINDOW_MS: u64 = 40_000;
/// A host's availability (share of time online) is never taken below this,
/// so one long absence does not make a host look ten times slower.
pub const MIN_AVAILABILITY: f64 = 0.25;
/// Most copies of one job a policy may count on (the original and one
/// replica: a hedge or a tail replica). The grid runs a replica as a
/// hand-over, so one copy scans at a time (see `Grid::request_work`).
pub const MAX_COPIES: u32 = 2;
/// How long a host with nothing to do waits before asking again while a round
/// is open (the grid's `retry_after`). Short, because `adaptive` may keep a job
/// for a faster host that is idle but has not asked yet.
pub const RETRY_WHILE_ROUND_OPEN_S: u64 = 2;
/// Seconds an idle host may take to ask again (the grid's retry interval
/// while a round is open): another host's start is at least this far off.
pub const ASK_LAG_S: f64 = RETRY_WHILE_ROUND_OPEN_S as f64;
/// `adaptive` gives a job to the asking host when it would finish it within
/// this factor of the best other host (ties go to the host that asked). Any
/// slack above 1 lets a slightly slower host take the critical job: in the
/// simulator 1.05 cost 3–5% of makespan against 1.0.
pub const ADAPTIVE_SLACK: f64 = 1.0;
/// A tail replica is made only when it would finish before this share of
/// the running copy's expected remaining time.
pub const REPLICA_GAIN: f64 = 0.8;
/// How far apart two expected times may be and still be confused, given the
/// errors of size estimates and benchmarks: while jobs are queued, a running
/// job expected to end within this factor of the longest is on the critical
/// path, and gets a hedge copy that would end within this factor of its own
/// expected end; a queued job that long is placed before any hedge.
/// (In the simulator, 1.1 to 1.5 give about the same makespans.)
pub const HEDGE_REACH: f64 = 1.25;
/// `batch`: a host's batch is released to the others once the host has not
/// been heard from for this long and the round is at least this old.
pub const BATCH_GRACE_MS: u64 = 300_000;
/// A unit already past its expected end is assumed to need this share of its
/// expected time more (its host is slow, or was away).
pub const OVERDUE_SHARE: f64 = 0.25;

/// A queued job as policies see it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub job_id: u64,
    /// Position in the round's site list (round-robin order).
    pub order: u32,
    /// Expected pages (its last scan, bounded by the round's page cap).
    pub pages: f64,
    /// The asking host already failed this job (expired or gave it back).
    pub failed_here: bool,
    /// `pages` comes from a last scan (false: a site never scanned, whose
    /// true size may be anything up to the page cap).
    pub size_known: bool,
    /// `batch`: the host whose batch holds this job (`None`: anyone's).
    pub assigned: Option<u64>,
}

/// A running job, for replicas (hedges and tail replication).
#[derive(Clone, Debug, PartialEq)]
pub struct RunningView {
    pub job_id: u64,
    pub pages: f64,
    /// Running copies.
    pub copies: u32,
    /// The asking host holds a copy.
    pub on_asker: bool,
    /// The asking host failed this job before.
    pub failed_here: bool,
    /// Seconds from now until the first copy is expected to end
    /// (`f64::INFINITY` when every holder is offline).
    pub finish_s: f64,
}

/// A host as policies see it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostView {
    pub host_id: u64,
    /// Learned pages per second on one slot (`None`: never measured).
    pub pages_per_s: Option<f64>,
    pub slots: u32,
    /// Units it holds (running or waiting for a slot).
    pub busy: u32,
    /// Seconds from now until one of its slots is free (0: a slot is idle).
    pub free_at_s: f64,
    /// Expected slot-seconds of work it still holds.
    pub load_s: f64,
    /// Heard from recently and has not missed a deadline since.
    pub online: bool,
    /// Share of time it is online, in `[MIN_AVAILABILITY, 1]`.
    pub availability: f64,
    pub last_seen_ms: u64,
}

impl HostView {
    /// Seconds per page on one slot, for a round with this politeness delay.
    pub fn cost(&self, delay_s: f64) -> f64 {
        seconds_per_page(self.pages_per_s, delay_s) / self.availability.clamp(MIN_AVAILABILITY, 1.0)
    }
    /// Pages per second over all slots.
    pub fn rate(&self, delay_s: f64) -> f64 {
        self.slots.max(1) as f64 / self.cost(delay_s)
    }
    fn idle_slots(&self) -> u32 {
        self.slots.max(1).saturating_sub(self.busy)
    }
}

/// What the host asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkAsk {
    pub want_seconds: u64,
    pub free_slots: u32,
}

/// Everything a policy may look at for one request.
#[derive(Clone, Debug)]
pub struct Ctx<'a> {
    pub now_ms: u64,
    /// When the round started.
    pub round_started_ms: u64,
    /// The round's politeness delay, seconds.
    pub delay_s: f64,
    /// Queued jobs, in the round's list order.
    pub queue: &'a [JobView],
    /// Running jobs (only filled for policies that replicate).
    pub running: &'a [RunningView],
    /// Every active host, sorted by `host_id`, the asking one included.
    pub hosts: &'a [HostView],
    /// Index of the asking host in `hosts`.
    pub asker: usize,
}

impl Ctx<'_> {
    fn asker(&self) -> &HostView {
        &self.hosts[self.asker]
    }
    fn host(&self, id: u64) -> Option<&HostView> {
        self.hosts
            .binary_search_by_key(&id, |h| h.host_id)
            .ok()
            .map(|i| &self.hosts[i])
    }
}

/// A policy's answer: jobs to issue (in order), and running jobs to copy.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    pub jobs: Vec<u64>,
    pub replicas: Vec<u64>,
}

/// A scheduling policy.
pub trait Policy: Send + Sync {
    /// The name used on the command line.
    fn name(&self) -> &'static str;
    /// Choose work for one request.
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision;
    /// Round-start plan: `(job, host)` assignments (only `batch` plans).
    fn plan(&self, _jobs: &[JobView], _hosts: &[HostView], _delay_s: f64) -> Vec<(u64, u64)> {
        Vec::new()
    }
    /// Whether [`Ctx::running`] must be filled.
    fn replicates(&self) -> bool {
        false
    }
}

/// Names accepted by `round start --policy`; the first is the default.
pub const POLICY_NAMES: [&str; 6] = [
    "adaptive",
    "round-robin",
    "batch",
    "level",
    "pack",
    "size-aware",
];

/// The policy of a name, or `None` when unknown.
pub fn policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "adaptive" => Some(Box::new(Adaptive)),
        "round-robin" => Some(Box::new(RoundRobin)),
        "batch" => Some(Box::new(Batch)),
        "level" => Some(Box::new(Level)),
        "pack" => Some(Box::new(Pack)),
        "size-aware" => Some(Box::new(SizeAware)),
        _ => None,
    }
}

// ---- estimates ----

/// Seconds one slot of a host needs per page: its speed, never faster than
/// the politeness delay allows.
pub fn seconds_per_page(pages_per_s: Option<f64>, delay_s: f64) -> f64 {
    let speed = pages_per_s
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_HOST_PAGES_PER_S);
    (1.0 / speed).max(delay_s.max(0.0))
}

/// Expected pages of a site: its last scan, bounded by the round's page cap.
pub fn site_pages(last: Option<&SiteStats>, max_pages: u32) -> f64 {
    last.map(|s| s.pages as f64)
        .unwrap_or(DEFAULT_SITE_PAGES)
        .clamp(1.0, max_pages.max(1) as f64)
}

/// Expected seconds of a site on a host: pages over the host's speed, never
/// below pages × the politeness delay.
pub fn expected_seconds(
    last: Option<&SiteStats>,
    max_pages: u32,
    host_pages_per_s: Option<f64>,
    delay_ms: u64,
) -> f64 {
    site_pages(last, max_pages) * seconds_per_page(host_pages_per_s, delay_ms as f64 / 1000.0)
}

/// A host's running speed average after a finished job of `pages` in
/// `seconds`. A job held back by the politeness delay says only that the host
/// is at least that fast, so it raises the figure but never lowers it.
pub fn learn_speed(prev: Option<f64>, pages: u64, seconds: f64, delay_s: f64) -> Option<f64> {
    if pages == 0 || !(seconds.is_finite() && seconds > 0.0) {
        return prev;
    }
    let observed = pages as f64 / seconds;
    let polite_bound = delay_s > 0.0 && seconds / pages as f64 <= delay_s * 1.1;
    Some(match prev {
        None => observed,
        Some(p) if polite_bound => p.max(observed),
        Some(p) => p + SPEED_WEIGHT * (observed - p),
    })
}

/// Share of time a host was online since it enrolled, bounded below.
pub fn availability(enrolled_ms: u64, offline_ms: u64, now_ms: u64) -> f64 {
    let span = now_ms.saturating_sub(enrolled_ms);
    if span == 0 {
        return 1.0;
    }
    (1.0 - offline_ms as f64 / span as f64).clamp(MIN_AVAILABILITY, 1.0)
}

/// Whether a host counts as online for scheduling: heard from lately (a busy
/// host, whose scans report progress, within [`BUSY_ONLINE_WINDOW_MS`]), and
/// no deadline missed since.
pub fn is_online(last_seen_ms: u64, last_missed_ms: u64, busy: bool, now_ms: u64) -> bool {
    let window = if busy {
        BUSY_ONLINE_WINDOW_MS
    } else {
        ONLINE_WINDOW_MS
    };
    now_ms.saturating_sub(last_seen_ms) <= window && last_missed_ms <= last_seen_ms
}

/// Share of a job assumed still to do when its scan has passed its expected pages.
pub const MIN_LEFT_SHARE: f64 = 0.05;

/// Seconds left of a scan, from the pace between its first and latest
/// progress reports (`(ms, pages)`; `None` without two distinct reports).
pub fn remaining_s(
    est_pages: f64,
    first: (u64, u64),
    last: (u64, u64),
    now_ms: u64,
) -> Option<f64> {
    if first.0 == 0 || last.0 <= first.0 || last.1 <= first.1 {
        return None;
    }
    let pace = (last.1 - first.1) as f64 / ((last.0 - first.0) as f64 / 1000.0);
    let left = (est_pages - last.1 as f64).max(est_pages * MIN_LEFT_SHARE);
    Some((left / pace - now_ms.saturating_sub(last.0) as f64 / 1000.0).max(0.0))
}

/// A unit a host holds, for [`slot_schedule`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeldUnit {
    pub issued_ms: u64,
    /// Expected seconds on this host.
    pub expected_s: f64,
}

/// When a host's slots free up, assuming it runs its units first come first
/// served (as the client does).
#[derive(Clone, Debug, PartialEq)]
pub struct SlotSchedule {
    /// Seconds from now until each unit (in the order given) is expected to end.
    pub ends_s: Vec<f64>,
    /// Seconds from now until a slot is free (0: one is idle).
    pub free_at_s: f64,
    /// Expected slot-seconds of work left.
    pub load_s: f64,
}

/// Lay a host's held units (in issue order) on its slots.
pub fn slot_schedule(units: &[HeldUnit], slots: u32, now_ms: u64) -> SlotSchedule {
    let slots = slots.clamp(1, beebot_shared::limits::MAX_SLOTS) as usize;
    // Absolute seconds (relative to now) at which each slot is free; idle = 0.
    let mut free = vec![f64::NEG_INFINITY; slots];
    let mut ends_s = Vec::with_capacity(units.len());
    for u in units {
        let issued = (u.issued_ms as f64 - now_ms as f64) / 1000.0;
        let (i, _) = free
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .unwrap_or((0, &0.0));
        let start = free[i].max(issued);
        let mut end = start + u.expected_s.max(0.0);
        if end < 0.0 {
            end = OVERDUE_SHARE * u.expected_s.max(0.0);
        }
        free[i] = end;
        ends_s.push(end);
    }
    let free_at_s = free.iter().copied().fold(f64::INFINITY, f64::min).max(0.0);
    let load_s = free.iter().map(|f| f.max(0.0)).sum();
    SlotSchedule {
        ends_s,
        free_at_s,
        load_s,
    }
}

/// Deadline bounds and slack.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadlineRule {
    pub slack: f64,
    pub grace_s: u64,
    pub min_s: u64,
    pub max_s: u64,
}

/// `issued + expected × slack + grace`, bounded to `[min, max]` after issue.
pub fn deadline_ms(issued_ms: u64, expected_s: f64, rule: &DeadlineRule) -> u64 {
    // A host's speed is its own claim: a tiny one makes `expected_s` vast
    // (the cast saturates, and so does the sum).
    let span = ((expected_s.max(0.0) * rule.slack) as u64).saturating_add(rule.grace_s);
    let span = span.clamp(rule.min_s, rule.max_s.max(rule.min_s));
    issued_ms.saturating_add(span.saturating_mul(1000))
}

/// Whether a job of `expected_s` seconds fits in a host's open `windows`
/// (`[start, end)` seconds from now) before the deadline `rule` would give it.
pub fn fits_windows(windows: &[(u64, u64)], expected_s: f64, rule: &DeadlineRule) -> bool {
    let span = deadline_ms(0, expected_s, rule) / 1000;
    let open: u64 = windows
        .iter()
        .map(|&(a, b)| b.min(span).saturating_sub(a.min(span)))
        .sum();
    open as f64 >= expected_s
}

/// The new deadline of a unit whose scan is still making progress (its
/// pages grew since the last report) in the last half of its window: one
/// window from now (`None`: keep the deadline). A deadline finds a host that
/// went silent or stalled; it never cuts a scan that goes on, so there is no
/// cap here: the scan itself is bounded by the round's time budget.
pub fn extended_deadline(
    deadline_ms: u64,
    window_ms: u64,
    now_ms: u64,
    progressed: bool,
) -> Option<u64> {
    if progressed && window_ms > 0 && now_ms > deadline_ms.saturating_sub(window_ms / 2) {
        Some(now_ms.saturating_add(window_ms).max(deadline_ms))
    } else {
        None
    }
}

// ---- helpers over the queue ----

/// Index of the largest job (ties: list order) among those `ok` accepts,
/// preferring jobs the asker has not failed.
fn largest_where(queue: &[JobView], taken: &[u64], ok: impl Fn(&JobView) -> bool) -> Option<usize> {
    largest_by(queue, taken, ok, |j| j.pages)
}

/// [`largest_where`] with sizes given by `size`.
fn largest_by(
    queue: &[JobView],
    taken: &[u64],
    ok: impl Fn(&JobView) -> bool,
    size: impl Fn(&JobView) -> f64,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, j) in queue.iter().enumerate() {
        if !ok(j) || taken.contains(&j.job_id) {
            continue;
        }
        best = match best {
            None => Some(i),
            Some(b) => {
                let cur = &queue[b];
                let better = (cur.failed_here && !j.failed_here)
                    || (cur.failed_here == j.failed_here && size(j) > size(cur));
                Some(if better { i } else { b })
            }
        };
    }
    best
}

/// Jobs in list order, the asker's failed ones last, at most `n`.
fn in_list_order(queue: &[JobView], n: usize) -> Vec<u64> {
    let mut out: Vec<u64> = queue
        .iter()
        .filter(|j| !j.failed_here)
        .take(n)
        .map(|j| j.job_id)
        .collect();
    if out.len() < n {
        let more = n - out.len();
        out.extend(
            queue
                .iter()
                .filter(|j| j.failed_here)
                .take(more)
                .map(|j| j.job_id),
        );
    }
    out
}

// ---- policies ----

/// Jobs in list order, one per free slot (the papers' baseline).
pub struct RoundRobin;

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }
    fn choose(&self, ctx: &Ctx, ask: &WorkAsk) -> Decision {
        Decision {
            jobs: in_list_order(ctx.queue, ask.free_slots as usize),
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
            let Some(i) = largest_where(ctx.queue, &out, |_| true) else {
                break;
            };
            total += ctx.queue[i].pages * cost;
            out.push(ctx.queue[i].job_id);
        }
        Decision {
            jobs: out,
            replicas: Vec::new(),
        }
    }
}

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
    /// Whether `job` may go to the asking host.
    fn open_to(ctx: &Ctx, job: &JobView) -> bool {
        let me = ctx.asker().host_id;
        match job.assigned {
            None => true,
            Some(h) if h == me => true,
            Some(h) => match ctx.host(h) {
                None => true, // revoked or gone
                Some(owner) => {
                    ctx.now_ms.saturating_sub(ctx.round_started_ms) >= BATCH_GRACE_MS
                        && ctx.now_ms.saturating_sub(owner.last_seen_ms) >= BATCH_GRACE_MS
                }
            },
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
        // Its own batch first, then released jobs; largest first in each.
        for own in [true, false] {
            while out.len() < ask.free_slots as usize {
                let pick = largest_where(ctx.queue, &out, |j| {
                    if own {
                        j.assigned == Some(me)
                    } else {
                        j.assigned != Some(me) && Self::open_to(ctx, j)
                    }
                });
                match pick {
                    Some(i) => out.push(ctx.queue[i].job_id),
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
        let work: f64 = ctx.queue.iter().map(|j| j.pages).sum();
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
            match largest_where(ctx.queue, &out, |j| j.pages <= quota) {
                Some(i) => {
                    quota -= ctx.queue[i].pages;
                    out.push(ctx.queue[i].job_id);
                }
                None => break,
            }
        }
        // Below the line with an idle slot but every job too big for the gap:
        // the smallest one, so no slot idles while work waits.
        if out.is_empty() && level > ice(me) && me.idle_slots() > 0 && ask.free_slots > 0 {
            let smallest = ctx.queue.iter().enumerate().min_by(|a, b| {
                (a.1.failed_here, a.1.pages)
                    .partial_cmp(&(b.1.failed_here, b.1.pages))
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            if let Some((_, j)) = smallest {
                out.push(j.job_id);
            }
        }
        Decision {
            jobs: out,
            replicas: Vec::new(),
        }
    }
}

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

/// The default: longest expected job first, each to the host that would
/// finish it soonest given what it already holds, sized by learned speeds;
/// hedge copies of the jobs on the critical path; then tail replication.
///
/// On a request, the asking host takes the largest queued job for which no
/// other online host would finish clearly sooner (each other host's start is
/// its next free slot plus [`ASK_LAG_S`]). Finishing times are linear in the
/// job's pages, so one pass over the hosts gives the interval of sizes the
/// asker wins, and one pass over the queue the largest job in it: a decision
/// is O(hosts + queue) per unit.
///
/// Copies (at most [`MAX_COPIES`] running; the first result wins, the other
/// copy is aborted) go only to the online host that would finish them
/// soonest, latest expected end first. While jobs are queued, a copy comes
/// before any queued job, for a running job on the critical path: one that
/// ends after the queued and held work would drain over the online hosts
/// even without the asker's slot (so the grid has the slack to spare a
/// slot), and after any queued job could end on the fastest host (within
/// [`HEDGE_REACH`], so long queued jobs are placed first). Such a job gets
/// a hedge when it is expected to end within [`HEDGE_REACH`] of the longest
/// running job (it may be the one that sets the makespan) and the copy would
/// end within [`HEDGE_REACH`] of its running copy: size estimates and
/// benchmarks are too rough to tell which of two near-equal hosts is faster
/// or which large job is longest, and a host may go offline, so two copies
/// on two fast hosts end the critical job sooner than one. A job whose every
/// holder is offline is copied when the copy would outlast the queue. Once
/// nothing is queued and the asker has an idle slot, it gets a copy of the
/// running job expected to finish last when its copy would finish well
/// sooner ([`REPLICA_GAIN`]).
pub struct Adaptive;

impl Adaptive {
    /// The interval of job sizes (pages) the asker finishes no later than
    /// every other online host, starting at `start_s` with `cost` s/page.
    fn winning_sizes(ctx: &Ctx, start_s: f64, cost: f64) -> (f64, f64) {
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        for (i, g) in ctx.hosts.iter().enumerate() {
            if i == ctx.asker || !g.online {
                continue;
            }
            let s_g = ADAPTIVE_SLACK * (g.free_at_s + ASK_LAG_S);
            let c_g = ADAPTIVE_SLACK * g.cost(ctx.delay_s);
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
        (lo, hi)
    }

    /// While jobs are queued: the seconds the queued and held work needs over
    /// the online hosts were the asker to spend one slot on a copy (the level
    /// it reaches), and the seconds of the largest queued job on the fastest
    /// online host. O(hosts + queue).
    fn queue_drain_s(ctx: &Ctx, cost: f64) -> (f64, f64) {
        let (mut rate, mut held, mut fastest) = (0.0, 0.0, f64::INFINITY);
        for (i, h) in ctx.hosts.iter().enumerate() {
            if i != ctx.asker && !h.online {
                continue;
            }
            let c = h.cost(ctx.delay_s);
            rate += h.slots.max(1) as f64 / c;
            held += h.load_s / c;
            fastest = fastest.min(c);
        }
        let (mut work, mut largest) = (0.0, 0.0f64);
        for j in ctx.queue {
            work += j.pages;
            largest = largest.max(j.pages);
        }
        let rate = (rate - 1.0 / cost).max(f64::MIN_POSITIVE);
        ((work + held) / rate, largest * fastest)
    }

    /// Copies of running jobs for the asker, latest expected finish first, at
    /// most `n`, starting at `start_s` with `cost` s/page: only jobs whose
    /// size the asker would finish soonest of the online hosts. With nothing
    /// queued (the tail): a copy that would end well before the running one.
    /// With jobs queued: hedges of jobs on the critical path, and copies of
    /// jobs whose every holder is offline that would outlast the queue (see
    /// [`Adaptive`]).
    fn replicas(ctx: &Ctx, n: usize, start_s: f64, cost: f64) -> Vec<u64> {
        if ctx.running.is_empty() || n == 0 {
            return Vec::new();
        }
        // With jobs queued: (level, largest queued) and the longest running job.
        let queued = (!ctx.queue.is_empty()).then(|| {
            let longest_s = ctx
                .running
                .iter()
                .map(|r| r.finish_s)
                .filter(|f| f.is_finite())
                .fold(0.0, f64::max);
            (Self::queue_drain_s(ctx, cost), longest_s)
        });
        let worth = |r: &RunningView| {
            let mine = start_s + r.pages * cost;
            match queued {
                None => mine < REPLICA_GAIN * r.finish_s,
                Some(((level, largest), _)) if r.finish_s.is_infinite() => {
                    mine >= level.max(largest)
                }
                Some(((level, largest), longest_s)) => {
                    r.finish_s >= level.max(largest * HEDGE_REACH)
                        && r.finish_s * HEDGE_REACH >= longest_s
                        && mine <= HEDGE_REACH * r.finish_s
                }
            }
        };
        // One pass over the hosts: the sizes this host would finish soonest.
        let (lo, hi) = Self::winning_sizes(ctx, start_s, cost);
        let mut out: Vec<u64> = Vec::new();
        while out.len() < n {
            let pick = ctx
                .running
                .iter()
                .filter(|r| {
                    r.copies < MAX_COPIES
                        && !r.on_asker
                        && !r.failed_here
                        && !out.contains(&r.job_id)
                        && r.pages >= lo * 0.999_999
                        && r.pages <= hi * 1.000_001
                        && worth(r)
                })
                .max_by(|a, b| {
                    a.finish_s
                        .total_cmp(&b.finish_s)
                        .then(a.pages.total_cmp(&b.pages))
                        .then(b.job_id.cmp(&a.job_id))
                });
            match pick {
                Some(r) => out.push(r.job_id),
                None => break,
            }
        }
        out
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
        // A copy of a job on the critical path (a hedge, or a job stuck on
        // offline hosts) comes first, into the next free slot.
        if !ctx.queue.is_empty() && ask.free_slots > 0 {
            let start = if idle > 0 { 0.0 } else { me.free_at_s };
            let critical = Self::replicas(ctx, 1, start, cost);
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
        let mut left = ctx.queue.iter().filter(|j| !j.failed_here).count();
        // A site never scanned may be as large as the page cap allows: it is
        // placed like the largest queued job (early, on a host that would
        // finish that soonest), and counted at its expected size.
        let largest = ctx.queue.iter().map(|j| j.pages).fold(0.0, f64::max);
        let place = |j: &JobView| {
            if j.size_known {
                j.pages
            } else {
                j.pages.max(largest)
            }
        };
        while out.len() < ask.free_slots as usize
            && (out.is_empty() || total < ask.want_seconds as f64)
        {
            let (lo, hi) = Self::winning_sizes(ctx, start, cost);
            let mut pick = largest_by(
                ctx.queue,
                &out,
                |j| !j.failed_here && place(j) >= lo * 0.999_999 && place(j) <= hi * 1.000_001,
                place,
            );
            // A job this host failed comes back to it only when nothing else is left.
            if pick.is_none() && left == 0 && idle > 0 {
                pick = largest_where(ctx.queue, &out, |j| j.failed_here);
            }
            let Some(i) = pick else { break };
            let j = &ctx.queue[i];
            if !j.failed_here {
                left -= 1;
            }
            let e = j.pages * cost;
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
            Self::replicas(ctx, idle.min(ask.free_slots) as usize, 0.0, cost)
        } else {
            Vec::new()
        };
        Decision {
            jobs: out,
            replicas,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_decide_what_fits_before_the_deadline() {
        let rule = DeadlineRule {
            slack: 3.0,
            grace_s: 0,
            min_s: 60,
            max_s: 3600,
        };
        // Open from 10 min to 20 min from now: 10 minutes of crawling.
        let w = [(600, 1200)];
        assert!(fits_windows(&w, 300.0, &rule)); // deadline 900 s: 300 s open
        assert!(!fits_windows(&w, 700.0, &rule)); // only 600 s open before any deadline
        assert!(!fits_windows(&[(3000, 9000)], 100.0, &rule)); // opens after the deadline
        assert!(fits_windows(&[(0, u64::MAX)], 1000.0, &rule));
        assert!(!fits_windows(&[], 1.0, &rule));
    }

    fn q(ids_pages: &[(u64, f64)]) -> Vec<JobView> {
        ids_pages
            .iter()
            .enumerate()
            .map(|(i, &(job_id, pages))| JobView {
                job_id,
                order: i as u32,
                pages,
                failed_here: false,
                size_known: true,
                assigned: None,
            })
            .collect()
    }

    fn host(id: u64, pps: f64) -> HostView {
        HostView {
            host_id: id,
            pages_per_s: Some(pps),
            slots: 1,
            busy: 0,
            free_at_s: 0.0,
            load_s: 0.0,
            online: true,
            availability: 1.0,
            last_seen_ms: 0,
        }
    }

    fn ctx<'a>(queue: &'a [JobView], hosts: &'a [HostView], asker: usize) -> Ctx<'a> {
        Ctx {
            now_ms: 1000,
            round_started_ms: 0,
            delay_s: 0.0,
            queue,
            running: &[],
            hosts,
            asker,
        }
    }

    fn ask(want_seconds: u64, free_slots: u32) -> WorkAsk {
        WorkAsk {
            want_seconds,
            free_slots,
        }
    }

    #[test]
    fn every_name_has_its_policy() {
        for name in POLICY_NAMES {
            assert_eq!(policy_by_name(name).map(|p| p.name()), Some(name));
        }
        assert!(policy_by_name("nope").is_none());
    }

    #[test]
    fn size_aware_takes_longest_first_until_covered() {
        // Host at 1 page/s: pages are seconds.
        let queue = q(&[(1, 10.0), (2, 50.0), (3, 30.0), (4, 5.0)]);
        let hosts = [host(1, 1.0)];
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(SizeAware.choose(&c, &ask(60, 4)).jobs, vec![2, 3]);
        assert_eq!(SizeAware.choose(&c, &ask(1000, 3)).jobs, vec![2, 3, 1]);
        assert!(SizeAware.choose(&c, &ask(0, 0)).jobs.is_empty());
    }

    #[test]
    fn failed_here_goes_last() {
        let mut queue = q(&[(1, 100.0), (2, 1.0)]);
        queue[0].failed_here = true;
        let hosts = [host(1, 1.0)];
        let c = ctx(&queue, &hosts, 0);
        for name in POLICY_NAMES {
            let p = policy_by_name(name).unwrap();
            assert_eq!(p.choose(&c, &ask(1, 1)).jobs, vec![2], "{name}");
        }
        // With nothing else, the failed job does come back.
        let queue = vec![queue[0].clone()];
        let c = ctx(&queue, &hosts, 0);
        for name in POLICY_NAMES {
            let p = policy_by_name(name).unwrap();
            assert_eq!(p.choose(&c, &ask(1, 1)).jobs, vec![1], "{name}");
        }
    }

    #[test]
    fn round_robin_is_list_order_one_per_slot() {
        let queue = q(&[(7, 1.0), (3, 500.0), (9, 2.0)]);
        let hosts = [host(1, 1.0)];
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(RoundRobin.choose(&c, &ask(1, 2)).jobs, vec![7, 3]);
        assert_eq!(RoundRobin.choose(&c, &ask(10_000, 5)).jobs, vec![7, 3, 9]);
    }

    #[test]
    fn estimate_respects_politeness_floor() {
        let stats = SiteStats {
            pages: 100,
            ..Default::default()
        };
        assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 0), 2.0);
        assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 500), 50.0);
        assert_eq!(expected_seconds(Some(&stats), 10, Some(5.0), 0), 2.0);
        assert_eq!(expected_seconds(None, 1000, None, 0), 10.0);
        // Nonsense speeds fall back to the default.
        assert_eq!(seconds_per_page(Some(f64::NAN), 0.0), 0.2);
        assert_eq!(seconds_per_page(Some(-3.0), 0.0), 0.2);
    }

    #[test]
    fn speed_is_learned_as_a_running_average() {
        assert_eq!(learn_speed(None, 100, 10.0, 0.0), Some(10.0));
        let s = learn_speed(Some(10.0), 200, 10.0, 0.0).unwrap();
        assert!((s - (10.0 + SPEED_WEIGHT * 10.0)).abs() < 1e-9);
        // Nothing learned from an empty or instant job.
        assert_eq!(learn_speed(Some(4.0), 0, 10.0, 0.0), Some(4.0));
        assert_eq!(learn_speed(Some(4.0), 10, 0.0, 0.0), Some(4.0));
        // A politeness-bound job only raises the figure.
        assert_eq!(learn_speed(Some(4.0), 10, 10.0, 1.0), Some(4.0));
        assert_eq!(learn_speed(Some(0.5), 10, 10.0, 1.0), Some(1.0));
    }

    #[test]
    fn availability_and_online() {
        assert_eq!(availability(0, 0, 0), 1.0);
        assert_eq!(availability(0, 250, 1000), 0.75);
        assert_eq!(availability(0, 1000, 1000), MIN_AVAILABILITY);
        assert!(is_online(1000, 0, false, 1000 + ONLINE_WINDOW_MS));
        assert!(!is_online(1000, 0, false, 1001 + ONLINE_WINDOW_MS));
        // A busy host reports progress: a shorter silence is enough.
        assert!(is_online(1000, 0, true, 1000 + BUSY_ONLINE_WINDOW_MS));
        assert!(!is_online(1000, 0, true, 1001 + BUSY_ONLINE_WINDOW_MS));
        // A deadline missed after it was last heard from: offline.
        assert!(!is_online(1000, 1001, false, 1002));
    }

    #[test]
    fn slot_schedule_is_first_come_first_served() {
        let now = 100_000;
        let u = |issued_ms, expected_s| HeldUnit {
            issued_ms,
            expected_s,
        };
        // Two slots, three units of 10 s issued now: the third waits for a slot.
        let s = slot_schedule(&[u(now, 10.0), u(now, 10.0), u(now, 10.0)], 2, now);
        assert_eq!(s.ends_s, vec![10.0, 10.0, 20.0]);
        assert_eq!(s.free_at_s, 10.0);
        assert_eq!(s.load_s, 30.0);
        // One unit on two slots: a slot is idle.
        let s = slot_schedule(&[u(now - 4000, 10.0)], 2, now);
        assert_eq!((s.ends_s[0], s.free_at_s, s.load_s), (6.0, 0.0, 6.0));
        // An overdue unit is assumed to need a share of its time more.
        let s = slot_schedule(&[u(now - 40_000, 10.0)], 1, now);
        assert_eq!(s.ends_s[0], 10.0 * OVERDUE_SHARE);
        let s = slot_schedule(&[], 3, now);
        assert_eq!((s.free_at_s, s.load_s), (0.0, 0.0));
    }

    #[test]
    fn deadline_is_bounded() {
        let rule = DeadlineRule {
            slack: 3.0,
            grace_s: 10,
            min_s: 60,
            max_s: 600,
        };
        assert_eq!(deadline_ms(1000, 1.0, &rule), 1000 + 60_000);
        assert_eq!(deadline_ms(1000, 100.0, &rule), 1000 + 310_000);
        assert_eq!(deadline_ms(1000, 1e9, &rule), 1000 + 600_000);
        // A host claiming a speed near zero: an expected time past u64 (found
        // by the grid's property test: the sum overflowed).
        assert_eq!(deadline_ms(1000, 1e300, &rule), 1000 + 600_000);
        assert_eq!(deadline_ms(1000, f64::INFINITY, &rule), 1000 + 600_000);
        assert!(!fits_windows(&[(0, u64::MAX)], 1e300, &rule));
    }

    #[test]
    fn extensions_come_in_the_last_half_while_the_scan_progresses() {
        // Window 100, deadline 100.
        assert_eq!(extended_deadline(100, 100, 50, true), None);
        assert_eq!(extended_deadline(100, 100, 51, true), Some(151));
        // No cap: a scan that goes on is extended again and again.
        assert_eq!(extended_deadline(390, 100, 380, true), Some(480));
        assert_eq!(extended_deadline(10_000, 100, 9_990, true), Some(10_090));
        // A scan that made no page since its last report is not.
        assert_eq!(extended_deadline(100, 100, 99, false), None);
        assert_eq!(extended_deadline(100, 0, 99, true), None);
    }

    #[test]
    fn batch_plan_follows_the_beebot_edg_steps() {
        // Sizes 10, 8, 6, 4, 2, 1 (total 31); speeds 2 and 1: shares 20.67 and 10.33.
        let jobs = [(1, 10.0), (2, 8.0), (3, 6.0), (4, 4.0), (5, 2.0), (6, 1.0)];
        let hosts = [(100, 1.0), (200, 2.0)];
        let mut plan = batch_plan(&jobs, &hosts);
        plan.sort();
        // Fast host 200: 10 + 8 = 18 (6 would overflow 20.67). Slow host 100:
        // next largest 6 + 4 = 10 ≤ 10.33 (2 would overflow). The rest (2, 1)
        // smallest first in reverse host order: 1 → slow, 2 → fast.
        assert_eq!(
            plan,
            vec![(1, 200), (2, 200), (3, 100), (4, 100), (5, 200), (6, 100)]
        );
        assert!(batch_plan(&jobs, &[]).is_empty());
        // Every job is planned exactly once.
        let many: Vec<(u64, f64)> = (0..50).map(|i| (i, (i % 7 + 1) as f64)).collect();
        let plan = batch_plan(&many, &[(1, 3.0), (2, 1.0), (3, 0.5)]);
        let mut ids: Vec<u64> = plan.iter().map(|p| p.0).collect();
        ids.sort();
        assert_eq!(ids, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn batch_hosts_pull_their_own_then_released_batches() {
        let mut queue = q(&[(1, 10.0), (2, 20.0), (3, 5.0), (4, 7.0)]);
        queue[0].assigned = Some(1);
        queue[1].assigned = Some(2);
        queue[2].assigned = Some(1);
        queue[3].assigned = None;
        let mut hosts = [host(1, 1.0), host(2, 1.0)];
        hosts[0].last_seen_ms = 1000;
        hosts[1].last_seen_ms = 0;
        let c = ctx(&queue, &hosts, 0);
        // Own batch largest first, then what is free; not host 2's batch (grace not over).
        assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 4]);
        // After the grace period host 2 (silent since 0) loses its batch.
        let mut c = ctx(&queue, &hosts, 0);
        c.now_ms = BATCH_GRACE_MS + 1;
        assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 2, 4]);
        // A host heard from recently keeps its batch.
        hosts[1].last_seen_ms = BATCH_GRACE_MS;
        let mut c = ctx(&queue, &hosts, 0);
        c.now_ms = BATCH_GRACE_MS + 1;
        assert_eq!(Batch.choose(&c, &ask(0, 4)).jobs, vec![1, 3, 4]);
    }

    #[test]
    fn water_level_excludes_hosts_above_the_line() {
        // Loads 0, 0, 100 s; rates 1 page/s each; 60 pages: level 30, third host above it.
        let mut b = vec![(100.0, 1.0), (0.0, 1.0), (0.0, 1.0)];
        assert_eq!(water_level(&mut b, 60.0), 30.0);
        // 300 pages: all three under the line: (300 + 100) / 3.
        let mut b = vec![(100.0, 1.0), (0.0, 1.0), (0.0, 1.0)];
        assert!((water_level(&mut b, 300.0) - 400.0 / 3.0).abs() < 1e-9);
        assert_eq!(water_level(&mut [], 10.0), 0.0);
    }

    #[test]
    fn level_fills_empty_hosts_first_and_evenly() {
        let queue = q(&[
            (1, 10.0),
            (2, 10.0),
            (3, 10.0),
            (4, 10.0),
            (5, 10.0),
            (6, 10.0),
        ]);
        let mut hosts = [host(1, 1.0), host(2, 1.0), host(3, 1.0)];
        hosts[2].busy = 1;
        hosts[2].load_s = 100.0;
        hosts[2].free_at_s = 100.0;
        // 60 pages over two empty hosts: level 30 s → 30 pages each = three jobs.
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(Level.choose(&c, &ask(0, 10)).jobs, vec![1, 2, 3]);
        // The loaded host is above the line: nothing.
        let c = ctx(&queue, &hosts, 2);
        assert!(Level.choose(&c, &ask(0, 10)).jobs.is_empty());
    }

    #[test]
    fn pack_fills_busy_hosts_before_waking_idle_ones() {
        let queue = q(&[(1, 1.0), (2, 1.0)]);
        let mut hosts = [host(1, 1.0), host(2, 1.0)];
        hosts[0].slots = 4;
        hosts[0].busy = 1;
        // The busy host has 3 free slots: it takes both; the idle one nothing.
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1, 2]);
        let c = ctx(&queue, &hosts, 1);
        assert!(Pack.choose(&c, &ask(0, 8)).jobs.is_empty());
        // Busy hosts full: the idle host is woken.
        hosts[0].busy = 4;
        let c = ctx(&queue, &hosts, 1);
        assert_eq!(Pack.choose(&c, &ask(0, 8)).jobs, vec![1]);
        // A full busy host gets nothing more.
        let c = ctx(&queue, &hosts, 0);
        assert!(Pack.choose(&c, &ask(0, 8)).jobs.is_empty());
    }

    #[test]
    fn adaptive_gives_big_jobs_to_fast_hosts_and_small_ones_to_slow_hosts() {
        let queue = q(&[(1, 2.0), (2, 1000.0), (3, 20.0), (4, 500.0)]);
        // Host 1 does 10 pages/s, host 2 one page/s.
        let hosts = [host(1, 10.0), host(2, 1.0)];
        // The fast host takes the largest job.
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
        // The slow host would take 1000 s for it (the fast one 105 s): it takes
        // the largest job it finishes no later than the fast host would (the
        // fast one would start it after a retry interval: 2 s against 2.2 s).
        let c = ctx(&queue, &hosts, 1);
        assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![1]);
        // The fast host, busy for 2000 s, leaves the big one... to nobody faster:
        // the slow host now wins the 500-page job.
        let mut hosts2 = hosts.clone();
        hosts2[0].busy = 1;
        hosts2[0].free_at_s = 2000.0;
        hosts2[0].load_s = 2000.0;
        let c = ctx(&queue, &hosts2, 1);
        assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
        // An offline fast host does not count.
        let mut hosts3 = hosts.clone();
        hosts3[0].online = false;
        let c = ctx(&queue, &hosts3, 1);
        assert_eq!(Adaptive.choose(&c, &ask(0, 1)).jobs, vec![2]);
    }

    #[test]
    fn adaptive_places_a_site_never_scanned_like_the_largest_job() {
        // Job 3 was never scanned: 50 pages expected, but it may be huge.
        let mut queue = q(&[(1, 500.0), (2, 100.0), (3, 50.0)]);
        queue[2].size_known = false;
        let mut hosts = [host(1, 10.0), host(2, 1.0)];
        hosts[0].slots = 2;
        // The fast host takes the largest job and the unknown one, not job 2.
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(Adaptive.choose(&c, &ask(10_000, 2)).jobs, vec![1, 3]);
        // The slow host, which wins only small jobs, does not get it.
        let c = ctx(&queue, &hosts, 1);
        assert!(!Adaptive.choose(&c, &ask(10_000, 1)).jobs.contains(&3));
        // Known, the same job would come last.
        queue[2].size_known = true;
        let c = ctx(&queue, &hosts, 0);
        assert_eq!(Adaptive.choose(&c, &ask(10_000, 2)).jobs, vec![1, 2]);
    }

    #[test]
    fn adaptive_sizes_the_reply_to_the_asked_seconds() {
        let queue = q(&[(1, 10.0), (2, 10.0), (3, 10.0), (4, 10.0), (5, 10.0)]);
        let mut hosts = [host(1, 1.0)];
        hosts[0].slots = 8;
        let c = ctx(&queue, &hosts, 0);
        // Alone, 10 s a job: 25 s asked → three jobs; nothing asked → one.
        assert_eq!(Adaptive.choose(&c, &ask(25, 8)).jobs.len(), 3);
        assert_eq!(Adaptive.choose(&c, &ask(0, 8)).jobs.len(), 1);
        assert_eq!(Adaptive.choose(&c, &ask(1000, 2)).jobs.len(), 2);
    }

    #[test]
    fn adaptive_replicates_the_job_expected_to_finish_last() {
        let hosts = [host(1, 10.0), host(2, 1.0)];
        let run = |job_id, pages, finish_s| RunningView {
            job_id,
            pages,
            copies: 1,
            on_asker: false,
            failed_here: false,
            finish_s,
        };
        let running = vec![run(1, 100.0, 50.0), run(2, 100.0, 90.0), run(3, 100.0, 5.0)];
        let mut c = ctx(&[], &hosts, 0);
        c.running = &running;
        // The fast host would do 100 pages in 10 s: copy job 2 (ends in 90 s).
        assert_eq!(
            Adaptive.choose(&c, &ask(0, 1)),
            Decision {
                jobs: vec![],
                replicas: vec![2]
            }
        );
        // With two free slots, the next latest too.
        assert_eq!(Adaptive.choose(&c, &ask(0, 2)).replicas, vec![2]);
        let mut two = hosts.clone();
        two[0].slots = 2;
        let mut c2 = ctx(&[], &two, 0);
        c2.running = &running;
        assert_eq!(Adaptive.choose(&c2, &ask(0, 2)).replicas, vec![2, 1]);
        // The slow host would not finish sooner: no copy.
        let mut c = ctx(&[], &hosts, 1);
        c.running = &running;
        assert!(Adaptive.choose(&c, &ask(0, 1)).replicas.is_empty());
        // Never a third copy, never a copy on a holder or on a host that failed it.
        let mut full = running.clone();
        full[1].copies = MAX_COPIES;
        full[0].on_asker = true;
        let mut c = ctx(&[], &hosts, 0);
        c.running = &full;
        assert!(Adaptive.choose(&c, &ask(0, 1)).replicas.is_empty());
        // Nothing is copied while the queue keeps the hosts busy past every
        // running job (2000 pages at 1 page/s without the asker's slot).
        let queue = q(&[(9, 2000.0)]);
        let mut c = ctx(&queue, &hosts, 0);
        c.running = &running;
        assert_eq!(
            Adaptive.choose(&c, &ask(0, 1)),
            Decision {
                jobs: vec![9],
                replicas: vec![]
            }
        );
    }

    #[test]
    fn adaptive_hedges_the_critical_job_while_jobs_are_queued_only_with_slack() {
        let run = |job_id, pages, finish_s| RunningView {
            job_id,
            pages,
            copies: 1,
            on_asker: false,
            failed_here: false,
            finish_s,
        };
        // Hosts 1, 2 and 4 do 10 pages/s, host 3 one. Host 1 runs job 1
        // (1000 pages, 100 s left); host 2 asks.
        let mut hosts = [host(1, 10.0), host(2, 10.0), host(3, 1.0), host(4, 10.0)];
        hosts[0].busy = 1;
        hosts[0].free_at_s = 100.0;
        hosts[0].load_s = 100.0;
        let running = vec![run(1, 1000.0, 100.0)];
        let with = |queue: &[JobView], hosts: &[HostView], asker: usize| {
            let mut c = ctx(queue, hosts, asker);
            c.running = &running;
            Adaptive.choose(&c, &ask(0, 1))
        };
        // Five small jobs: without host 2's slot the rest drain in
        // (50 + 1000) / 21 = 50 s, job 1 ends in 100 s: it sets the makespan,
        // and host 2's copy would end then too. A hedge, before the queue.
        let small = q(&[(11, 10.0), (12, 10.0), (13, 10.0), (14, 10.0), (15, 10.0)]);
        assert_eq!(
            with(&small, &hosts, 1),
            Decision {
                jobs: vec![],
                replicas: vec![1]
            }
        );
        // No slack: 2000 queued pages keep the hosts busy for 143 s.
        let busy: Vec<(u64, f64)> = (21..41).map(|id| (id, 100.0)).collect();
        let busy = q(&busy);
        let d = with(&busy, &hosts, 1);
        assert!(d.replicas.is_empty() && !d.jobs.is_empty(), "{d:?}");
        // A queued job that could last as long (900 pages: 90 s on a fast
        // host, within the reach of 100 s) is placed first.
        let long = q(&[(11, 10.0), (31, 900.0), (12, 10.0)]);
        assert_eq!(
            with(&long, &hosts, 1),
            Decision {
                jobs: vec![31],
                replicas: vec![]
            }
        );
        // The slow host's copy would take 1000 s: no hedge (and the small
        // jobs are the fast hosts' too).
        assert_eq!(with(&small, &hosts, 2), Decision::default());
        // A job well short of the longest one does not set the makespan: job 2
        // (300 s left, already two copies) is the critical one, not job 1.
        let mut running2 = running.clone();
        running2.push(RunningView {
            copies: MAX_COPIES,
            ..run(2, 3000.0, 300.0)
        });
        let mut c = ctx(&small, &hosts, 1);
        c.running = &running2;
        let d = Adaptive.choose(&c, &ask(0, 1));
        assert!(d.replicas.is_empty() && d.jobs.len() == 1, "{d:?}");
    }
}
