//! The scheduler: for this host, now, which jobs? Pure code: no I/O, time is an
//! argument. Policies sit behind [`Policy`]; the grid builds the views (the
//! simulator drives the grid itself), the policy decides.
//!
//! The model: a job's size is its expected page count (its last scan, or
//! [`DEFAULT_SITE_PAGES`]); a host's cost is seconds per page on one slot
//! (its learned speed, never faster than the round's politeness delay allows),
//! divided by how often it is online. A job's expected time on a host is
//! size × cost, so every policy compares hosts with one linear model.
//!
//! Its rooms: this module holds the views the grid builds, the [`Policy`]
//! trait, the limits every policy shares and the helpers over the queue;
//! `estimates` the cost model, slot schedules and deadlines; one module
//! per policy family (`simple`, `batch`, `level`, `pack`, `adaptive`).
//!
//! Invariants: a policy decides from its [`Ctx`] alone, so one context gives
//! one decision; it never issues, writes or reads the store, and never
//! reads a clock.

mod adaptive;
mod batch;
mod estimates;
mod level;
mod pack;
mod queue;
pub mod resources;
mod simple;
#[cfg(test)]
mod tests;

pub use adaptive::Adaptive;
pub use batch::{batch_plan, Batch};
pub use estimates::{
    availability, deadline_ms, expected_seconds, extended_deadline, fits_windows, is_online,
    learn_speed, left_pages, remaining_s, seconds_per_page, seconds_per_page_at, site_pace_s,
    site_pages, slot_schedule, DeadlineRule, HeldUnit, SiteStats, SlotSchedule, MAX_SITE_PACE_S,
    MIN_LEFT_SHARE,
};
pub use level::{water_level, Level};
pub use pack::{host_capacity, Pack};
pub use queue::{Checks, JobQueue, Queue};
pub use resources::{Capacity, Demand};
pub use simple::{RoundRobin, SizeAware};

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
/// replica: a copy on the critical path or a tail replica). The grid runs a replica as a
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
/// this factor of the best other host (ties go to the host that asked). A
/// host a hair faster has only so many slots: without slack, every host a
/// few seconds slower on a large slow site leaves it to that one, and once
/// its slots are full the site goes to a host far slower. A larger slack
/// lets a slower host take the critical job: in the simulator 1.05 cost
/// 3–5% of makespan against 1.0, and 1.005 gained 8% at 2,000 × 100
/// (docs/measurements.md).
pub const ADAPTIVE_SLACK: f64 = 1.005;
/// A tail replica is made only when it would finish before this share of
/// the running copy's expected remaining time.
pub const REPLICA_GAIN: f64 = 0.8;
/// Seconds a hand-over costs the job it moves: the running scan hears of
/// it at its next progress report (every 10 s), uploads with its frontier,
/// the site rests for the round's delay, and the new host asks again
/// ([`ASK_LAG_S`]) and fetches the frontier and robots.txt. A copy is
/// wanted only when it ends sooner even after this.
pub const HAND_OVER_S: f64 = 15.0;
/// How far apart two expected times may be and still be confused, given the
/// errors of size estimates and benchmarks: while jobs are queued, a running
/// job expected to end within this factor of the longest is on the critical
/// path (a copy of it may be wanted); a queued job that long is placed
/// before any copy.
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
    /// Some host may not take this job while another may: it failed it,
    /// or wrote a result of it under check (it may not check its own). It
    /// goes to a host that would finish it soonest of those that may take
    /// it, never kept for a faster host in `barred`.
    pub barred_somewhere: bool,
    /// Those hosts (when `barred_somewhere`): the grid gives it to none of
    /// them while another host is online, and to an author of its result
    /// under check only as the fallback checker.
    pub barred: Vec<u64>,
    /// `pages` comes from a last scan (false: a site never scanned, whose
    /// true size may be anything up to the page cap).
    pub size_known: bool,
    /// `batch`: the host whose batch holds this job (`None`: anyone's).
    pub assigned: Option<u64>,
    /// A result of it waits for a check: only a host that may check it
    /// sees it (the queue keeps such jobs apart: [`Checks`]).
    pub under_check: bool,
    /// Its site's mean response time (its pace), as its last scan showed
    /// ([`site_pace_s`]), at its class's value ([`class_pace`]; 0: nothing
    /// known): a slow site costs a slow host more than a fast one.
    pub pace_s: f64,
}

/// Sites' paces below this are taken as nothing (class 0).
pub const PACE_STEP_S: f64 = 0.1;
/// Pace classes: 0 (below [`PACE_STEP_S`]), then one per doubling from
/// it, the last holding every slower site. A policy that weighs a site's
/// pace works out its hosts' costs once per class, not per job.
pub const PACE_CLASSES: u8 = 8;

/// The class of a site's pace (see [`PACE_CLASSES`]).
pub fn pace_class(pace_s: f64) -> u8 {
    if pace_s.is_nan() || pace_s < PACE_STEP_S {
        return 0;
    }
    let k = 1.0 + (pace_s / PACE_STEP_S).log2().floor();
    (k.min(f64::from(PACE_CLASSES - 1))) as u8
}

/// The pace a class stands for: 0 for class 0, else the geometric middle
/// of its doubling.
pub fn class_pace(class: u8) -> f64 {
    if class == 0 {
        return 0.0;
    }
    PACE_STEP_S * 2f64.powi(i32::from(class) - 1) * std::f64::consts::SQRT_2
}

/// A running job, for replicas (hand-overs on the critical path and in the tail).
#[derive(Clone, Debug, PartialEq)]
pub struct RunningView {
    pub job_id: u64,
    /// Expected pages left (what a host that took it over would scan).
    pub pages: f64,
    /// The host running it (`None`: not known to the policy), whose cost
    /// per page its `finish_s` came at: a host that took it over would
    /// scan the same site at its own cost.
    pub holder: Option<u64>,
    /// Running copies.
    pub copies: u32,
    /// The asking host holds a copy.
    pub on_asker: bool,
    /// The asking host failed this job before.
    pub failed_here: bool,
    /// Seconds from now until the first copy is expected to end
    /// (`f64::INFINITY` when every holder is offline).
    pub finish_s: f64,
    /// The site's mean response time, as its scan's pace on its holder
    /// shows ([`site_pace_s`]; 0: nothing seen): a host that took it over
    /// would pay it too.
    pub pace_s: f64,
}

impl RunningView {
    /// The order a policy looks at running jobs in: latest expected end
    /// first, then the larger, then the lower id.
    pub fn latest_first(a: &RunningView, b: &RunningView) -> std::cmp::Ordering {
        b.finish_s
            .total_cmp(&a.finish_s)
            .then(b.pages.total_cmp(&a.pages))
            .then(a.job_id.cmp(&b.job_id))
    }
}

/// The running jobs a replicating policy may copy, read latest expected
/// end first ([`RunningView::latest_first`]): a policy stops reading once
/// no later one can be worth a copy, so while jobs are queued a decision
/// reads the few latest (the grid keeps them indexed by expected end); in
/// the tail, with few running, it may read them all.
pub trait RunningJobs: std::fmt::Debug {
    /// The running jobs in [`RunningView::latest_first`] order.
    fn latest_first(&self) -> Box<dyn Iterator<Item = RunningView> + '_>;
    /// The same, from the first with a finite expected end (the ones
    /// whose every holder is offline passed over without a walk).
    fn latest_first_finite(&self) -> Box<dyn Iterator<Item = RunningView> + '_>;
}

/// No running job (a policy that does not replicate is given this).
#[derive(Debug)]
pub struct NoRunning;

impl RunningJobs for NoRunning {
    fn latest_first(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        Box::new(std::iter::empty())
    }
    fn latest_first_finite(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        Box::new(std::iter::empty())
    }
}

/// A list of running jobs (tests, benches, the simulator's policy runs),
/// sorted once when made.
#[derive(Clone, Debug, Default)]
pub struct RunningList(Vec<RunningView>);

impl RunningList {
    pub fn new(mut all: Vec<RunningView>) -> RunningList {
        all.sort_by(RunningView::latest_first);
        RunningList(all)
    }
}

impl RunningJobs for RunningList {
    fn latest_first(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        Box::new(self.0.iter().cloned())
    }
    fn latest_first_finite(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        let infinite = self.0.partition_point(|r| r.finish_s == f64::INFINITY);
        Box::new(self.0[infinite..].iter().cloned())
    }
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
    /// What it offers its scans beyond slots (memory, bandwidth cap).
    pub capacity: Capacity,
    /// What the units it holds need of that at once.
    pub demand: Demand,
    /// Trusted: while it is online, hosts not trusted check no result it
    /// could check.
    pub trusted: bool,
}

impl HostView {
    /// Seconds per page on one slot, for a round with this politeness delay.
    pub fn cost(&self, delay_s: f64) -> f64 {
        self.cost_at(delay_s, 0.0)
    }
    /// Seconds per page on one slot of a site that adds `pace_s` to each
    /// page ([`seconds_per_page_at`]).
    pub fn cost_at(&self, delay_s: f64, pace_s: f64) -> f64 {
        seconds_per_page_at(self.pages_per_s, delay_s, pace_s)
            / self.availability.clamp(MIN_AVAILABILITY, 1.0)
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
    /// The round's page cap: as large as a site never scanned may be.
    pub max_pages: f64,
    /// Queued jobs as the asker sees them (indexed: see [`Queue`]).
    pub queue: Queue<'a>,
    /// Running jobs (only given to policies that replicate).
    pub running: &'a dyn RunningJobs,
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

/// The scheduling policies by name: `round start --policy`, the config
/// file and the admin API say these (kebab-case); the first is the default.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    Adaptive,
    RoundRobin,
    Batch,
    Level,
    Pack,
    SizeAware,
}

impl PolicyName {
    /// Every policy, the default first.
    pub const ALL: [PolicyName; 6] = [
        PolicyName::Adaptive,
        PolicyName::RoundRobin,
        PolicyName::Batch,
        PolicyName::Level,
        PolicyName::Pack,
        PolicyName::SizeAware,
    ];

    /// The policy's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyName::Adaptive => "adaptive",
            PolicyName::RoundRobin => "round-robin",
            PolicyName::Batch => "batch",
            PolicyName::Level => "level",
            PolicyName::Pack => "pack",
            PolicyName::SizeAware => "size-aware",
        }
    }

    /// The policy itself.
    pub fn policy(self) -> Box<dyn Policy> {
        match self {
            PolicyName::Adaptive => Box::new(Adaptive),
            PolicyName::RoundRobin => Box::new(RoundRobin),
            PolicyName::Batch => Box::new(Batch),
            PolicyName::Level => Box::new(Level),
            PolicyName::Pack => Box::new(Pack),
            PolicyName::SizeAware => Box::new(SizeAware),
        }
    }
}

/// Names accepted by `round start --policy` ([`PolicyName::ALL`]'s names).
pub const POLICY_NAMES: [&str; 6] = {
    let mut names = [""; 6];
    let mut i = 0;
    while i < names.len() {
        names[i] = PolicyName::ALL[i].as_str();
        i += 1;
    }
    names
};

/// The policy of a name, or `None` when unknown.
pub fn policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    PolicyName::ALL
        .into_iter()
        .find(|p| p.as_str() == name)
        .map(PolicyName::policy)
}

// ---- helpers over the queue ----

/// Jobs in list order, the asker's failed ones last, at most `n`.
fn in_list_order(queue: &Queue, n: usize) -> Vec<u64> {
    let mut out: Vec<u64> = queue
        .iter()
        .filter(|j| !j.failed_here)
        .take(n)
        .map(|j| j.job_id)
        .collect();
    if out.len() < n {
        let more = n - out.len();
        out.extend(queue.failed_jobs().take(more).map(|j| j.job_id));
    }
    out
}
