//! `beebot-server simulate`: the server's scheduler against simulated hosts on
//! a virtual clock.
//!
//! The simulator runs the very code the grid runs: the policies of
//! [`crate::scheduler`] with the same views ([`scheduler::slot_schedule`],
//! [`scheduler::is_online`], [`scheduler::availability`]), the same
//! estimates and speed learning ([`scheduler::learn_speed`]), the same
//! deadlines and extensions, and the real client's buffer rule
//! ([`beebot_client::worker::work_wanted`]). Only the network, the store and
//! the crawling are replaced by events.
//!
//! What varies, from one seed: each site's true size (so each scan's time)
//! differs from its estimate by up to ± `noise`; each host's reference-site
//! benchmark is off by up to ± `benchmark_noise` (default a third of the
//! default noise) until it learns from real jobs; hosts go offline for a `dropout` share of
//! the time (their scans pause and they stop talking to the server) and come
//! back; deadlines pass and jobs are reissued as in the server; a result for
//! a job already done is dropped; the other copy of a finished job stops at
//! its next progress report.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use serde::Serialize;

use beebot_client::worker::{work_wanted, DEFAULT_BUFFER_MAX_S, DEFAULT_BUFFER_MIN_S};

use crate::grid::RETRY_WHILE_ROUND_OPEN_S;
use crate::scheduler::{
    self, Ctx, DeadlineRule, HeldUnit, HostView, JobView, Policy, RunningView, WorkAsk,
};

/// Most sites one simulation takes.
pub const MAX_SIM_SITES: usize = 200_000;
/// Most hosts one simulation takes.
pub const MAX_SIM_HOSTS: usize = 20_000;
/// Largest first seed (seeds are numbered from it).
pub const MAX_FIRST_SEED: u64 = 1_000_000_000;
/// Most seeds per policy.
pub const MAX_SEEDS: u32 = 1000;
/// Synthetic sites: the smallest size, the power-law exponent and the cap.
/// Sizes of thematic web spaces follow a power law; α = 1.2 gives a few sites
/// a hundred times the median.
pub const SYNTH_MIN_PAGES: f64 = 10.0;
pub const SYNTH_PARETO_ALPHA: f64 = 1.2;
pub const SYNTH_MAX_PAGES: f64 = 10_000.0;
/// Synthetic hosts: pages per second on one slot, spread over a factor of ten.
pub const SYNTH_MIN_SPEED: f64 = 0.5;
pub const SYNTH_MAX_SPEED: f64 = 5.0;
pub const SYNTH_SLOTS: u32 = 2;
/// Events one run may process per job and per host, before it is stopped as
/// runaway (a healthy run needs well under a tenth of this).
const EVENTS_PER_JOB: u64 = 2_000;
const EVENTS_PER_HOST: u64 = 200_000;
/// The client's loop turns this often: the next request after a reply with work.
const CLIENT_TICK_MS: u64 = 500;
/// Mean offline period, as a share of the run's lower bound.
const OFFLINE_MEAN_SHARE: f64 = 0.1;

/// Errors of the simulator's inputs.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("line {line}: {msg}")]
    BadLine { line: usize, msg: String },
    #[error("{0}")]
    Invalid(String),
}

/// A site: its expected pages (its last scan).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimSite {
    pub name: String,
    pub pages: f64,
}

/// A host: its true pages per second on one slot, and its slots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimHost {
    pub name: String,
    pub pages_per_s: f64,
    pub slots: u32,
}

/// Settings of a simulation.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// True sizes (so scan times) are off their estimates by up to ± this share.
    pub noise: f64,
    /// Reference-site benchmarks are off the true speeds by up to ± this share.
    pub benchmark_noise: f64,
    /// Share of time a host is offline.
    pub dropout: f64,
    /// The round's politeness delay.
    pub delay_ms: u64,
    pub max_attempts: u32,
    pub deadline: DeadlineRule,
    pub progress_interval_ms: u64,
    /// A request's round trip, seconds (the client's buffer rule uses it).
    pub round_trip_s: f64,
    pub buffer_min_s: u64,
    pub buffer_max_s: u64,
    /// The first seed: runs use seeds `first_seed..first_seed + seeds`.
    pub first_seed: u64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            noise: 0.3,
            benchmark_noise: 0.1,
            dropout: 0.05,
            delay_ms: 0,
            max_attempts: 5,
            // The server's defaults (config.rs, RoundDefaults).
            deadline: DeadlineRule {
                slack: 3.0,
                grace_s: 60,
                min_s: 120,
                max_s: 2 * 24 * 3600,
            },
            progress_interval_ms: 10_000,
            round_trip_s: 0.05,
            buffer_min_s: DEFAULT_BUFFER_MIN_S,
            buffer_max_s: DEFAULT_BUFFER_MAX_S,
            first_seed: 0,
        }
    }
}

/// One run of one policy with one seed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunResult {
    pub seed: u64,
    pub makespan_s: f64,
    pub lower_bound_s: f64,
    /// Slot time spent scanning (useful or not) over slots × makespan.
    pub utilisation: f64,
    /// Attempts issued again after a deadline passed or a host gave up.
    pub reissued: u64,
    /// Replicas issued (hedges and tail replicas).
    pub replicated: u64,
    /// Jobs failed after their attempts ran out.
    pub failed: u64,
    /// Slot seconds spent on copies whose result was dropped or aborted.
    pub wasted_s: f64,
    /// False when the run hit its event bound before every job was final.
    pub finished: bool,
}

/// A policy's runs over the seeds, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    pub runs: usize,
    pub makespan_median_s: f64,
    pub makespan_worst_s: f64,
    pub ratio_median: f64,
    pub ratio_worst: f64,
    pub utilisation_median: f64,
    pub reissued_mean: f64,
    pub replicated_mean: f64,
    pub failed_total: u64,
    pub unfinished: usize,
}

// ---- inputs ----

/// A small, stable random generator (SplitMix64): the same seed gives the same
/// run on every platform and every version of the `rand` crate.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[1 - f, 1 + f]`.
    pub fn around_one(&mut self, f: f64) -> f64 {
        1.0 + f * (2.0 * self.unit() - 1.0)
    }
    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// `n` sites with power-law sizes.
pub fn synthetic_sites(n: usize, seed: u64) -> Vec<SimSite> {
    let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(1));
    (0..n)
        .map(|i| {
            let u = 1.0 - rng.unit(); // (0, 1]
            let pages = (SYNTH_MIN_PAGES * u.powf(-1.0 / SYNTH_PARETO_ALPHA))
                .min(SYNTH_MAX_PAGES)
                .round();
            SimSite {
                name: format!("site{i}.synth.test"),
                pages,
            }
        })
        .collect()
}

/// `m` hosts with speeds spread log-uniformly over a factor of ten.
pub fn synthetic_hosts(m: usize, seed: u64) -> Vec<SimHost> {
    let mut rng = Rng::new(seed.wrapping_mul(37).wrapping_add(2));
    let (lo, hi) = (SYNTH_MIN_SPEED.ln(), SYNTH_MAX_SPEED.ln());
    (0..m)
        .map(|i| SimHost {
            name: format!("host{i}"),
            pages_per_s: (lo + (hi - lo) * rng.unit()).exp(),
            slots: SYNTH_SLOTS,
        })
        .collect()
}

fn data_lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or("").trim();
        (!l.is_empty()).then(|| (i + 1, l.split_whitespace().collect()))
    })
}

fn number(line: usize, what: &str, v: &str) -> Result<f64, SimError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| SimError::BadLine {
            line,
            msg: format!("{what} `{v}` is not a positive number"),
        })
}

/// A sites file: `HOST [PAGES]` a line (`#` comments); a site without pages
/// was never scanned and gets the scheduler's default size.
pub fn parse_sites(text: &str) -> Result<Vec<SimSite>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if f.len() > 2 {
            return Err(SimError::BadLine {
                line,
                msg: "expected `HOST [PAGES]`".into(),
            });
        }
        let pages = match f.get(1) {
            Some(p) => number(line, "pages", p)?,
            None => scheduler::DEFAULT_SITE_PAGES,
        };
        out.push(SimSite {
            name: f[0].to_string(),
            pages,
        });
        if out.len() > MAX_SIM_SITES {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_SITES} sites")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no sites in the file".into()));
    }
    Ok(out)
}

/// A hosts file: `NAME PAGES_PER_S [SLOTS]` a line (`#` comments).
pub fn parse_hosts(text: &str) -> Result<Vec<SimHost>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if !(2..=3).contains(&f.len()) {
            return Err(SimError::BadLine {
                line,
                msg: "expected `NAME PAGES_PER_S [SLOTS]`".into(),
            });
        }
        let slots = match f.get(2) {
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|s| (1..=beebot_shared::limits::MAX_SLOTS).contains(s))
                .ok_or_else(|| SimError::BadLine {
                    line,
                    msg: format!(
                        "slots `{s}` must be 1 to {}",
                        beebot_shared::limits::MAX_SLOTS
                    ),
                })?,
            None => SYNTH_SLOTS,
        };
        out.push(SimHost {
            name: f[0].to_string(),
            pages_per_s: number(line, "speed", f[1])?,
            slots,
        });
        if out.len() > MAX_SIM_HOSTS {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_HOSTS} hosts")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no hosts in the file".into()));
    }
    Ok(out)
}

/// The lower bound of a round: the larger of all work over all speed, and
/// the longest job on the fastest host (true sizes and speeds).
pub fn lower_bound_s(true_pages: &[f64], hosts: &[SimHost], delay_s: f64) -> f64 {
    let cost = |h: &SimHost| scheduler::seconds_per_page(Some(h.pages_per_s), delay_s);
    let rate: f64 = hosts.iter().map(|h| h.slots.max(1) as f64 / cost(h)).sum();
    let fastest = hosts.iter().map(cost).fold(f64::INFINITY, f64::min);
    let total: f64 = true_pages.iter().sum();
    let longest = true_pages.iter().copied().fold(0.0, f64::max);
    if rate <= 0.0 || !fastest.is_finite() {
        return 0.0;
    }
    (total / rate).max(longest * fastest)
}

// ---- the simulation ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The client asks for work.
    Ask(usize),
    /// A scan ends (host, unit, the host's epoch when it was scheduled).
    Finish(usize, usize, u64),
    /// A unit's deadline comes.
    Deadline(usize),
    /// A scanning unit reports progress (host, unit, epoch): its pace, an
    /// extension, or the news that its job is done elsewhere.
    Report(usize, usize, u64),
    Offline(usize),
    Online(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JState {
    Queued,
    Running,
    Done,
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AState {
    Running,
    Expired,
    Done,
    Aborted,
}

struct Job {
    est: f64,
    truth: f64,
    state: JState,
    /// Running attempts (unit ids).
    units: Vec<usize>,
    fails: u32,
    attempts: u32,
    /// Hosts whose attempt expired.
    failed_by: Vec<usize>,
    batch_host: Option<u64>,
}

struct Att {
    job: usize,
    host: usize,
    issued_ms: u64,
    deadline_ms: u64,
    window_ms: u64,
    state: AState,
    /// First and latest progress reports, `(ms, pages)`.
    first_report: (u64, u64),
    last_report: (u64, u64),
}

/// The server's record of a host.
struct HostRec {
    learned: Option<f64>,
    benchmark: f64,
    last_missed_ms: u64,
    offline_ms: u64,
    went_offline_ms: u64,
    /// Running attempts (unit ids), in issue order.
    units: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CState {
    Waiting,
    /// Scanning since `since_ms` with `left_s` of work left at that moment.
    Scanning {
        since_ms: u64,
        left_s: f64,
    },
}

/// The client.
struct Client {
    online: bool,
    epoch: u64,
    units: Vec<(usize, CState)>,
    ask_at: Option<u64>,
    job_s: Option<f64>,
}

struct Sim<'a> {
    opts: &'a SimOptions,
    policy: &'a dyn Policy,
    hosts: &'a [SimHost],
    delay_s: f64,
    rng: Rng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    jobs: Vec<Job>,
    atts: Vec<Att>,
    recs: Vec<HostRec>,
    clients: Vec<Client>,
    queued: BTreeSet<usize>,
    running: BTreeSet<usize>,
    open_jobs: usize,
    busy_ms: f64,
    wasted_ms: f64,
    reissued: u64,
    replicated: u64,
    failed: u64,
    offline_mean_ms: f64,
    online_mean_ms: f64,
}

/// Host ids are 1-based so that none is 0.
fn host_id(h: usize) -> u64 {
    h as u64 + 1
}

impl Sim<'_> {
    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn ask_soon(&mut self, h: usize, t: u64) {
        let c = &mut self.clients[h];
        if c.ask_at.is_some_and(|a| a <= t) {
            return;
        }
        c.ask_at = Some(t);
        self.at(t, Ev::Ask(h));
    }

    fn cost(&self, h: usize) -> f64 {
        scheduler::seconds_per_page(
            self.recs[h].learned.or(Some(self.recs[h].benchmark)),
            self.delay_s,
        )
    }

    fn true_seconds(&self, job: usize, h: usize) -> f64 {
        self.jobs[job].truth
            * scheduler::seconds_per_page(Some(self.hosts[h].pages_per_s), self.delay_s)
    }

    fn last_seen(&self, h: usize) -> u64 {
        if self.clients[h].online {
            self.now
        } else {
            self.recs[h].went_offline_ms
        }
    }

    /// The units a host holds as the grid lays them on slots
    /// (`Grid::host_views`): scans with a pace first, then in issue order.
    fn held_units(&self, h: usize) -> (Vec<usize>, Vec<HeldUnit>) {
        let cost = self.cost(h);
        let mut units: Vec<((bool, u64, usize), HeldUnit)> = self.recs[h]
            .units
            .iter()
            .map(|&u| {
                let a = &self.atts[u];
                let est = self.jobs[a.job].est;
                let unit =
                    match scheduler::remaining_s(est, a.first_report, a.last_report, self.now) {
                        Some(left) => HeldUnit {
                            issued_ms: self.now,
                            expected_s: left,
                        },
                        None => HeldUnit {
                            issued_ms: a.issued_ms,
                            expected_s: est * cost,
                        },
                    };
                ((a.first_report.0 == 0, a.issued_ms, u), unit)
            })
            .collect();
        units.sort_by_key(|(k, _)| *k);
        units.into_iter().map(|((_, _, u), x)| (u, x)).unzip()
    }

    /// The grid's host views, built the same way (`Grid::host_views`).
    fn host_views(&self) -> (Vec<HostView>, Vec<f64>) {
        let mut ends = vec![f64::INFINITY; self.atts.len()];
        let mut views = Vec::with_capacity(self.hosts.len());
        for (h, rec) in self.recs.iter().enumerate() {
            let (ids, held) = self.held_units(h);
            let slots = self.hosts[h].slots;
            let sched = scheduler::slot_schedule(&held, slots, self.now);
            let seen = self.last_seen(h);
            let online = scheduler::is_online(seen, rec.last_missed_ms, !ids.is_empty(), self.now);
            if online {
                for (&u, &e) in ids.iter().zip(&sched.ends_s) {
                    ends[u] = e;
                }
            }
            views.push(HostView {
                host_id: host_id(h),
                pages_per_s: rec.learned.or(Some(rec.benchmark)),
                slots,
                busy: rec.units.len() as u32,
                free_at_s: sched.free_at_s,
                load_s: sched.load_s,
                online,
                availability: scheduler::availability(0, rec.offline_ms, self.now),
                last_seen_ms: seen,
            });
        }
        (views, ends)
    }

    /// The grid's `request_work`, on the simulated server.
    fn request_work(&mut self, h: usize, want_seconds: u64, free_slots: u32) -> usize {
        let (hosts, ends) = self.host_views();
        let queue: Vec<JobView> = self
            .queued
            .iter()
            .map(|&j| {
                let job = &self.jobs[j];
                JobView {
                    job_id: j as u64,
                    order: j as u32,
                    pages: job.est,
                    failed_here: job.failed_by.contains(&h),
                    assigned: job
                        .batch_host
                        .filter(|b| !job.failed_by.contains(&((*b - 1) as usize))),
                }
            })
            .collect();
        let running: Vec<RunningView> = if self.policy.replicates() {
            self.running
                .iter()
                .map(|&j| {
                    let units = &self.jobs[j].units;
                    RunningView {
                        job_id: j as u64,
                        pages: self.jobs[j].est,
                        copies: units.len() as u32,
                        on_asker: units.iter().any(|&u| self.atts[u].host == h),
                        finish_s: units.iter().map(|&u| ends[u]).fold(f64::INFINITY, f64::min),
                        failed_here: self.jobs[j].failed_by.contains(&h),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let ctx = Ctx {
            now_ms: self.now,
            round_started_ms: 0,
            delay_s: self.delay_s,
            queue: &queue,
            running: &running,
            hosts: &hosts,
            asker: h,
        };
        let ask = WorkAsk {
            want_seconds,
            free_slots,
        };
        let decision = self.policy.choose(&ctx, &ask);
        let mut free = free_slots.min(beebot_shared::limits::MAX_UNITS_PER_REPLY as u32);
        let mut issued = 0;
        for id in decision.jobs {
            let j = id as usize;
            if free == 0 || !self.queued.contains(&j) {
                continue;
            }
            self.issue(j, h, false);
            free -= 1;
            issued += 1;
        }
        for id in decision.replicas {
            let j = id as usize;
            let ok = running
                .iter()
                .any(|r| r.job_id == id && r.copies < scheduler::MAX_COPIES && !r.on_asker);
            if free == 0 || !ok || self.jobs[j].state != JState::Running {
                continue;
            }
            self.issue(j, h, true);
            free -= 1;
            issued += 1;
        }
        issued
    }

    fn issue(&mut self, j: usize, h: usize, replica: bool) {
        // As the grid does: the deadline counts the wait for a slot.
        let cost = self.cost(h);
        let (_, held) = self.held_units(h);
        let wait_s = scheduler::slot_schedule(&held, self.hosts[h].slots, self.now).free_at_s;
        let expected = self.jobs[j].est * cost;
        let deadline = scheduler::deadline_ms(self.now, wait_s + expected, &self.opts.deadline);
        let unit = self.atts.len();
        self.atts.push(Att {
            job: j,
            host: h,
            issued_ms: self.now,
            deadline_ms: deadline,
            window_ms: deadline - self.now,
            state: AState::Running,
            first_report: (0, 0),
            last_report: (0, 0),
        });
        let job = &mut self.jobs[j];
        if replica {
            self.replicated += 1;
        } else if job.attempts > 0 {
            self.reissued += 1;
        }
        job.attempts += 1;
        job.units.push(unit);
        job.state = JState::Running;
        self.queued.remove(&j);
        self.running.insert(j);
        self.recs[h].units.push(unit);
        self.clients[h].units.push((unit, CState::Waiting));
        self.at(deadline, Ev::Deadline(unit));
    }

    /// Start waiting units on free slots (first come, first served).
    fn start_scans(&mut self, h: usize) {
        if !self.clients[h].online {
            return;
        }
        let slots = self.hosts[h].slots.max(1) as usize;
        let mut scanning = self.clients[h]
            .units
            .iter()
            .filter(|u| matches!(u.1, CState::Scanning { .. }))
            .count();
        for i in 0..self.clients[h].units.len() {
            if scanning >= slots {
                break;
            }
            let (unit, state) = self.clients[h].units[i];
            if state != CState::Waiting {
                continue;
            }
            let left_s = self.true_seconds(self.atts[unit].job, h);
            self.clients[h].units[i].1 = CState::Scanning {
                since_ms: self.now,
                left_s,
            };
            scanning += 1;
            let epoch = self.clients[h].epoch;
            self.at(
                self.now + (left_s * 1000.0).ceil() as u64,
                Ev::Finish(h, unit, epoch),
            );
            self.at(
                self.now + self.opts.progress_interval_ms,
                Ev::Report(h, unit, epoch),
            );
        }
    }

    /// Remove a unit from its client; returns the slot milliseconds it scanned since last counted.
    fn drop_unit(&mut self, h: usize, unit: usize) -> Option<f64> {
        let c = &mut self.clients[h];
        let i = c.units.iter().position(|u| u.0 == unit)?;
        let (_, state) = c.units.remove(i);
        Some(match state {
            CState::Scanning { since_ms, .. } if c.online => (self.now - since_ms) as f64,
            _ => 0.0,
        })
    }

    fn end_attempt(&mut self, unit: usize, state: AState) {
        let a = &mut self.atts[unit];
        if a.state != AState::Running {
            return;
        }
        a.state = state;
        let (h, j) = (a.host, a.job);
        self.recs[h].units.retain(|&u| u != unit);
        self.jobs[j].units.retain(|&u| u != unit);
    }

    fn job_final(&mut self, j: usize) {
        self.running.remove(&j);
        self.queued.remove(&j);
        self.open_jobs -= 1;
    }

    fn on_finish(&mut self, h: usize, unit: usize, epoch: u64) {
        if self.clients[h].epoch != epoch {
            return;
        }
        let Some(ms) = self.drop_unit(h, unit) else {
            return;
        };
        self.busy_ms += ms;
        let j = self.atts[unit].job;
        let took = self.true_seconds(j, h);
        let c = &mut self.clients[h];
        c.job_s = Some(match c.job_s {
            None => took,
            Some(a) => a + 0.3 * (took - a),
        });
        // Upload: the first result wins; a late one for an open job is welcome.
        if matches!(self.jobs[j].state, JState::Done | JState::Failed) {
            self.wasted_ms += ms;
        } else {
            self.end_attempt(unit, AState::Done);
            self.atts[unit].state = AState::Done;
            self.jobs[j].state = JState::Done;
            // Other copies stop at their next progress report.
            for u in self.jobs[j].units.clone() {
                self.end_attempt(u, AState::Aborted);
            }
            let pages = self.jobs[j].truth.round() as u64;
            let rec = &mut self.recs[h];
            rec.learned = scheduler::learn_speed(rec.learned, pages, took, self.delay_s);
            self.job_final(j);
        }
        self.start_scans(h);
        self.ask_soon(h, self.now);
    }

    fn on_deadline(&mut self, unit: usize) {
        let a = &self.atts[unit];
        if a.state != AState::Running || a.deadline_ms > self.now {
            return;
        }
        let (h, j) = (a.host, a.job);
        self.end_attempt(unit, AState::Expired);
        self.recs[h].last_missed_ms = self.now;
        let job = &mut self.jobs[j];
        job.fails += 1;
        job.failed_by.push(h);
        if job.units.is_empty() {
            if job.fails >= self.opts.max_attempts {
                job.state = JState::Failed;
                self.failed += 1;
                self.job_final(j);
            } else {
                job.state = JState::Queued;
                self.running.remove(&j);
                self.queued.insert(j);
            }
        }
    }

    /// A scanning unit's progress report (the grid's `progress`).
    fn on_report(&mut self, h: usize, unit: usize, epoch: u64) {
        if self.clients[h].epoch != epoch {
            return; // paused meanwhile: reports resume with the scan
        }
        let Some(CState::Scanning { since_ms, left_s }) = self.clients[h]
            .units
            .iter()
            .find(|u| u.0 == unit)
            .map(|u| u.1)
        else {
            return;
        };
        let j = self.atts[unit].job;
        let total = self.true_seconds(j, h);
        let left_now = (left_s - (self.now - since_ms) as f64 / 1000.0).max(0.0);
        if matches!(self.jobs[j].state, JState::Done | JState::Failed) {
            // Abort: the job is finished elsewhere.
            if let Some(ms) = self.drop_unit(h, unit) {
                self.busy_ms += ms;
                self.wasted_ms += (total - left_now) * 1000.0;
            }
            self.start_scans(h);
            self.ask_soon(h, self.now);
            return;
        }
        let pages = (self.jobs[j].truth * (1.0 - left_now / total.max(1e-9))).floor() as u64;
        let a = &mut self.atts[unit];
        if a.first_report.0 == 0 {
            a.first_report = (self.now, pages);
        }
        let progressed = pages > a.last_report.1;
        a.last_report = (self.now, pages);
        if a.state == AState::Running {
            if let Some(d) =
                scheduler::extended_deadline(a.deadline_ms, a.window_ms, self.now, progressed)
            {
                a.deadline_ms = d;
                self.at(d, Ev::Deadline(unit));
            }
        }
        self.at(
            self.now + self.opts.progress_interval_ms,
            Ev::Report(h, unit, epoch),
        );
    }

    fn on_offline(&mut self, h: usize) {
        let now = self.now;
        let c = &mut self.clients[h];
        c.online = false;
        c.epoch += 1;
        let mut busy = 0.0;
        for u in c.units.iter_mut() {
            if let CState::Scanning { since_ms, left_s } = u.1 {
                let ran = (now - since_ms) as f64;
                busy += ran;
                u.1 = CState::Scanning {
                    since_ms: now,
                    left_s: (left_s - ran / 1000.0).max(0.0),
                };
            }
        }
        self.busy_ms += busy;
        self.recs[h].went_offline_ms = now;
        let back = self.rng.exp(self.offline_mean_ms).max(1000.0) as u64;
        self.at(now + back, Ev::Online(h));
    }

    fn on_online(&mut self, h: usize) {
        let now = self.now;
        let gap = now - self.recs[h].went_offline_ms;
        if gap > scheduler::ONLINE_WINDOW_MS {
            self.recs[h].offline_ms += gap;
        }
        let c = &mut self.clients[h];
        c.online = true;
        c.epoch += 1;
        let epoch = c.epoch;
        let mut todo = Vec::new();
        for u in c.units.iter_mut() {
            if let CState::Scanning { left_s, .. } = u.1 {
                u.1 = CState::Scanning {
                    since_ms: now,
                    left_s,
                };
                todo.push((u.0, left_s));
            }
        }
        for (unit, left_s) in todo {
            self.at(
                now + (left_s * 1000.0).ceil() as u64,
                Ev::Finish(h, unit, epoch),
            );
            self.at(
                now + self.opts.progress_interval_ms,
                Ev::Report(h, unit, epoch),
            );
        }
        self.start_scans(h);
        self.ask_soon(h, now);
        let next = self.rng.exp(self.online_mean_ms).max(1000.0) as u64;
        self.at(now + next, Ev::Offline(h));
    }

    fn on_ask(&mut self, h: usize) {
        if self.clients[h].ask_at != Some(self.now) {
            return;
        }
        self.clients[h].ask_at = None;
        if !self.clients[h].online {
            return;
        }
        let c = &self.clients[h];
        let Some((want, free)) = work_wanted(
            self.hosts[h].slots,
            c.units.len(),
            c.job_s,
            self.opts.round_trip_s,
            self.opts.buffer_min_s,
            self.opts.buffer_max_s,
        ) else {
            return; // asks again when a scan ends
        };
        if self.request_work(h, want, free) > 0 {
            self.start_scans(h);
            self.ask_soon(h, self.now + CLIENT_TICK_MS);
        } else {
            let jitter = 1.0 + 0.2 * self.rng.unit();
            let wait = (RETRY_WHILE_ROUND_OPEN_S as f64 * 1000.0 * jitter) as u64;
            self.ask_soon(h, self.now + wait);
        }
    }
}

/// Run one round of `sites` on `hosts` under `policy` with one seed.
pub fn run(
    sites: &[SimSite],
    hosts: &[SimHost],
    policy: &dyn Policy,
    seed: u64,
    opts: &SimOptions,
) -> RunResult {
    let mut rng = Rng::new(seed);
    let delay_s = opts.delay_ms as f64 / 1000.0;
    let noise = opts.noise.clamp(0.0, 0.95);
    let jobs: Vec<Job> = sites
        .iter()
        .map(|s| Job {
            est: s.pages,
            truth: (s.pages * rng.around_one(noise)).max(1.0),
            state: JState::Queued,
            units: Vec::new(),
            fails: 0,
            attempts: 0,
            failed_by: Vec::new(),
            batch_host: None,
        })
        .collect();
    let truth: Vec<f64> = jobs.iter().map(|j| j.truth).collect();
    let lower = lower_bound_s(&truth, hosts, delay_s);
    let recs: Vec<HostRec> = hosts
        .iter()
        .map(|h| HostRec {
            learned: None,
            benchmark: h.pages_per_s * rng.around_one(opts.benchmark_noise.clamp(0.0, 0.95)),
            last_missed_ms: 0,
            offline_ms: 0,
            went_offline_ms: 0,
            units: Vec::new(),
        })
        .collect();
    let dropout = opts.dropout.clamp(0.0, 0.9);
    let offline_mean_ms = (OFFLINE_MEAN_SHARE * lower * 1000.0).max(1000.0);
    let mut sim = Sim {
        opts,
        policy,
        hosts,
        delay_s,
        rng,
        now: 0,
        seq: 0,
        events: BinaryHeap::new(),
        open_jobs: jobs.len(),
        jobs,
        atts: Vec::new(),
        recs,
        clients: hosts
            .iter()
            .map(|_| Client {
                online: true,
                epoch: 0,
                units: Vec::new(),
                ask_at: None,
                job_s: None,
            })
            .collect(),
        queued: (0..sites.len()).collect(),
        running: BTreeSet::new(),
        busy_ms: 0.0,
        wasted_ms: 0.0,
        reissued: 0,
        replicated: 0,
        failed: 0,
        offline_mean_ms,
        online_mean_ms: if dropout > 0.0 {
            offline_mean_ms * (1.0 - dropout) / dropout
        } else {
            f64::INFINITY
        },
    };
    // Round start: the plan (batch) over every host, with its benchmark.
    let (views, _) = sim.host_views();
    let all: Vec<JobView> = sim
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobView {
            job_id: i as u64,
            order: i as u32,
            pages: j.est,
            failed_here: false,
            assigned: None,
        })
        .collect();
    for (job, host) in policy.plan(&all, &views, delay_s) {
        if let Some(j) = sim.jobs.get_mut(job as usize) {
            j.batch_host = Some(host);
        }
    }
    for h in 0..hosts.len() {
        let t = (sim.rng.unit() * 1000.0) as u64;
        sim.ask_soon(h, t);
        if dropout > 0.0 {
            let off = sim.rng.exp(sim.online_mean_ms).max(1000.0) as u64;
            sim.at(off, Ev::Offline(h));
        }
    }
    let bound = EVENTS_PER_JOB * sites.len() as u64 + EVENTS_PER_HOST * hosts.len() as u64;
    let mut processed = 0u64;
    let mut makespan_ms = 0;
    while sim.open_jobs > 0 && processed < bound {
        let Some(Reverse((t, _, ev))) = sim.events.pop() else {
            break;
        };
        processed += 1;
        sim.now = t;
        match ev {
            Ev::Ask(h) => sim.on_ask(h),
            Ev::Finish(h, u, e) => sim.on_finish(h, u, e),
            Ev::Deadline(u) => sim.on_deadline(u),
            Ev::Report(h, u, e) => sim.on_report(h, u, e),
            Ev::Offline(h) => sim.on_offline(h),
            Ev::Online(h) => sim.on_online(h),
        }
        makespan_ms = sim.now;
    }
    // Scans still running at the end count as busy (copies now useless).
    for c in &sim.clients {
        for u in &c.units {
            if let CState::Scanning { since_ms, .. } = u.1 {
                if c.online {
                    let ms = (makespan_ms.saturating_sub(since_ms)) as f64;
                    sim.busy_ms += ms;
                    sim.wasted_ms += ms;
                }
            }
        }
    }
    let slots: f64 = hosts.iter().map(|h| h.slots.max(1) as f64).sum();
    let makespan_s = makespan_ms as f64 / 1000.0;
    RunResult {
        seed,
        makespan_s,
        lower_bound_s: lower,
        utilisation: if makespan_ms > 0 {
            sim.busy_ms / (slots * makespan_ms as f64)
        } else {
            0.0
        },
        reissued: sim.reissued,
        replicated: sim.replicated,
        failed: sim.failed,
        wasted_s: sim.wasted_ms / 1000.0,
        finished: sim.open_jobs == 0,
    }
}

/// Where the sites and hosts of a simulation come from.
#[derive(Clone, Debug)]
pub enum Input<T> {
    /// Fixed (from a file).
    Given(Vec<T>),
    /// Generated from each seed.
    Synthetic(usize),
}

/// Run `policies` over `seeds` seeds (seed numbers `first_seed..` of
/// `opts`), in parallel
/// over the machine's cores. Results are per policy, in seed order.
pub fn run_all(
    sites: &Input<SimSite>,
    hosts: &Input<SimHost>,
    policies: &[&str],
    seeds: u32,
    opts: &SimOptions,
) -> Result<Vec<(String, Vec<RunResult>)>, SimError> {
    if seeds == 0 || seeds > MAX_SEEDS {
        return Err(SimError::Invalid(format!("seeds must be 1 to {MAX_SEEDS}")));
    }
    if opts.first_seed > MAX_FIRST_SEED {
        return Err(SimError::Invalid(format!(
            "the first seed must be at most {MAX_FIRST_SEED}"
        )));
    }
    let first = opts.first_seed;
    for (n, max, what) in [
        (
            matches!(sites, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_SITES),
            MAX_SIM_SITES,
            "sites",
        ),
        (
            matches!(hosts, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_HOSTS),
            MAX_SIM_HOSTS,
            "hosts",
        ),
    ] {
        if n {
            return Err(SimError::Invalid(format!(
                "synthetic {what} must be 1 to {max}"
            )));
        }
    }
    let mut out = Vec::new();
    for name in policies {
        let policy = scheduler::policy_by_name(name).ok_or_else(|| {
            SimError::Invalid(format!(
                "unknown policy `{name}` (known: {})",
                scheduler::POLICY_NAMES.join(", ")
            ))
        })?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, seeds as usize);
        let mut results: Vec<RunResult> = Vec::with_capacity(seeds as usize);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let policy = &policy;
                    s.spawn(move || {
                        (first..first + seeds as u64)
                            .filter(|seed| (*seed - first) as usize % threads == t)
                            .map(|seed| {
                                let ss = match sites {
                                    Input::Given(v) => v.clone(),
                                    Input::Synthetic(n) => synthetic_sites(*n, seed),
                                };
                                let hs = match hosts {
                                    Input::Given(v) => v.clone(),
                                    Input::Synthetic(m) => synthetic_hosts(*m, seed),
                                };
                                run(&ss, &hs, policy.as_ref(), seed, opts)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                if let Ok(r) = h.join() {
                    results.extend(r);
                }
            }
        });
        results.sort_by_key(|r| r.seed);
        out.push((name.to_string(), results));
    }
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarise one policy's runs.
pub fn summarise(policy: &str, runs: &[RunResult]) -> PolicySummary {
    let ratio = |r: &RunResult| {
        if r.lower_bound_s > 0.0 {
            r.makespan_s / r.lower_bound_s
        } else {
            f64::INFINITY
        }
    };
    let n = runs.len().max(1) as f64;
    PolicySummary {
        policy: policy.to_string(),
        runs: runs.len(),
        makespan_median_s: median(runs.iter().map(|r| r.makespan_s).collect()),
        makespan_worst_s: runs.iter().map(|r| r.makespan_s).fold(0.0, f64::max),
        ratio_median: median(runs.iter().map(ratio).collect()),
        ratio_worst: runs.iter().map(ratio).fold(0.0, f64::max),
        utilisation_median: median(runs.iter().map(|r| r.utilisation).collect()),
        reissued_mean: runs.iter().map(|r| r.reissued as f64).sum::<f64>() / n,
        replicated_mean: runs.iter().map(|r| r.replicated as f64).sum::<f64>() / n,
        failed_total: runs.iter().map(|r| r.failed).sum(),
        unfinished: runs.iter().filter(|r| !r.finished).count(),
    }
}

/// The table printed by `simulate`.
pub fn table(rows: &[PolicySummary]) -> String {
    let mut s = String::from(
        "policy        makespan med    worst   /LB med   worst   util  reissued  replicated  failed\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{:<12} {:>11.0}s {:>8.0}s {:>9.3} {:>7.3} {:>5.0}% {:>9.1} {:>11.1} {:>7}{}\n",
            r.policy,
            r.makespan_median_s,
            r.makespan_worst_s,
            r.ratio_median,
            r.ratio_worst,
            r.utilisation_median * 100.0,
            r.reissued_mean,
            r.replicated_mean,
            r.failed_total,
            if r.unfinished > 0 {
                format!("  ({} runs unfinished)", r.unfinished)
            } else {
                String::new()
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SimOptions {
        SimOptions::default()
    }

    #[test]
    fn the_generator_is_stable_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            let x = a.unit();
            assert_eq!(x, b.unit());
            assert!((0.0..1.0).contains(&x));
            let y = a.around_one(0.3);
            b.around_one(0.3);
            assert!((0.7..=1.3).contains(&y));
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn synthetic_inputs_follow_their_laws() {
        let sites = synthetic_sites(2000, 1);
        assert!(sites
            .iter()
            .all(|s| (SYNTH_MIN_PAGES..=SYNTH_MAX_PAGES).contains(&s.pages)));
        let mut p: Vec<f64> = sites.iter().map(|s| s.pages).collect();
        p.sort_by(f64::total_cmp);
        // A heavy tail: the largest site is far above the median.
        assert!(
            p[p.len() - 1] > 30.0 * p[p.len() / 2],
            "{:?}",
            (p[p.len() / 2], p[p.len() - 1])
        );
        let hosts = synthetic_hosts(500, 1);
        let (lo, hi) = hosts.iter().fold((f64::MAX, 0.0f64), |(l, h), x| {
            (l.min(x.pages_per_s), h.max(x.pages_per_s))
        });
        assert!(lo >= SYNTH_MIN_SPEED && hi <= SYNTH_MAX_SPEED && hi / lo > 8.0);
        assert_eq!(synthetic_sites(5, 3), synthetic_sites(5, 3));
    }

    #[test]
    fn files_parse_and_refuse_bad_lines() {
        let s = parse_sites("# sites\nwww.a.edu 120\nwww.b.edu\n\n").unwrap();
        assert_eq!(s[0].pages, 120.0);
        assert_eq!(s[1].pages, scheduler::DEFAULT_SITE_PAGES);
        assert!(matches!(
            parse_sites("a 1 2\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_sites("a -4\n"),
            Err(SimError::BadLine { .. })
        ));
        assert!(parse_sites("# none\n").is_err());
        let h = parse_hosts("pc1 2.5 4\npc2 1\n").unwrap();
        assert_eq!(
            (h[0].pages_per_s, h[0].slots, h[1].slots),
            (2.5, 4, SYNTH_SLOTS)
        );
        assert!(matches!(
            parse_hosts("pc1\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_hosts("x\npc 1 0\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_hosts("pc 1 0\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
    }

    #[test]
    fn the_lower_bound_is_the_larger_of_its_two_parts() {
        let hosts = [
            SimHost {
                name: "a".into(),
                pages_per_s: 2.0,
                slots: 1,
            },
            SimHost {
                name: "b".into(),
                pages_per_s: 1.0,
                slots: 2,
            },
        ];
        // Total rate 4 pages/s: 400 pages → 100 s; the largest (100) on the fastest: 50 s.
        assert_eq!(
            lower_bound_s(&[100.0, 100.0, 100.0, 100.0], &hosts, 0.0),
            100.0
        );
        // 400 pages, but the largest (300) alone takes 150 s on the fastest host.
        assert_eq!(lower_bound_s(&[100.0, 300.0], &hosts, 0.0), 150.0);
        // One 1000-page site: 500 s on the fastest host.
        assert_eq!(lower_bound_s(&[1000.0, 10.0], &hosts, 0.0), 500.0);
        // A politeness delay of 1 s caps every slot at 1 page/s.
        assert_eq!(lower_bound_s(&[1000.0], &hosts, 1.0), 1000.0);
    }

    #[test]
    fn every_policy_finishes_every_job_with_dropout_and_noise() {
        let sites = synthetic_sites(60, 5);
        let hosts = synthetic_hosts(4, 5);
        let o = SimOptions {
            dropout: 0.1,
            ..opts()
        };
        for name in scheduler::POLICY_NAMES {
            let p = scheduler::policy_by_name(name).unwrap();
            for seed in 0..3 {
                let r = run(&sites, &hosts, p.as_ref(), seed, &o);
                assert!(r.finished, "{name} seed {seed}: {r:?}");
                assert_eq!(r.failed, 0, "{name} seed {seed}: {r:?}");
                assert!(
                    r.makespan_s >= r.lower_bound_s * 0.999,
                    "{name} seed {seed} beat the lower bound: {r:?}"
                );
                assert!(
                    r.utilisation > 0.0 && r.utilisation <= 1.0 + 1e-9,
                    "{name}: {r:?}"
                );
                // Deterministic: the same seed, the same run.
                assert_eq!(
                    run(&sites, &hosts, p.as_ref(), seed, &o),
                    r,
                    "{name} seed {seed}"
                );
            }
        }
    }

    #[test]
    fn without_noise_or_dropout_nothing_is_reissued() {
        let sites = synthetic_sites(40, 9);
        let hosts = synthetic_hosts(3, 9);
        let o = SimOptions {
            noise: 0.0,
            dropout: 0.0,
            ..opts()
        };
        for name in ["round-robin", "adaptive", "batch", "level", "pack"] {
            let p = scheduler::policy_by_name(name).unwrap();
            let r = run(&sites, &hosts, p.as_ref(), 1, &o);
            assert!(r.finished, "{name}: {r:?}");
            assert_eq!(r.reissued, 0, "{name}: {r:?}");
        }
    }

    /// The issue's target on its smallest case (99 sites, 3 hosts, 20 seeds,
    /// noise 0.3, dropout 0.05): adaptive within 1.10 of the lower bound in
    /// the median, and ahead of round-robin and batch. Seeds are printed on failure.
    #[test]
    fn adaptive_beats_the_baselines_on_the_beebot_edg_case() {
        let o = opts();
        let seeds = 20;
        let res = run_all(
            &Input::Synthetic(99),
            &Input::Synthetic(3),
            &["adaptive", "round-robin", "batch"],
            seeds,
            &o,
        )
        .unwrap();
        let rows: Vec<PolicySummary> = res.iter().map(|(p, r)| summarise(p, r)).collect();
        let t = table(&rows);
        let (a, rr, b) = (&rows[0], &rows[1], &rows[2]);
        assert!(a.ratio_median <= 1.10, "seeds 0..{seeds}\n{t}");
        assert!(
            a.makespan_median_s < rr.makespan_median_s,
            "seeds 0..{seeds}\n{t}"
        );
        assert!(
            a.makespan_median_s < b.makespan_median_s,
            "seeds 0..{seeds}\n{t}"
        );
        assert!(a.replicated_mean > 0.0, "tail replication happened\n{t}");
    }

    #[test]
    fn run_all_checks_its_arguments() {
        let o = opts();
        let s = Input::Synthetic(5);
        let h = Input::Synthetic(2);
        assert!(run_all(&s, &h, &["nope"], 1, &o).is_err());
        assert!(run_all(&s, &h, &["adaptive"], 0, &o).is_err());
        assert!(run_all(&Input::Synthetic(0), &h, &["adaptive"], 1, &o).is_err());
        let r = run_all(&s, &Input::Given(synthetic_hosts(2, 0)), &["pack"], 3, &o).unwrap();
        assert_eq!(
            r[0].1.iter().map(|r| r.seed).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        // Seeds from another first seed: the same runs as in a longer series.
        let later = SimOptions {
            first_seed: 2,
            ..o.clone()
        };
        let r2 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 2, &later).unwrap();
        let r4 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 4, &o).unwrap();
        assert_eq!(
            r2[0].1.iter().map(|r| r.seed).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert_eq!(r2[0].1, r4[0].1[2..]);
        let too_far = SimOptions {
            first_seed: MAX_FIRST_SEED + 1,
            ..o.clone()
        };
        assert!(run_all(&s, &h, &["adaptive"], 1, &too_far).is_err());
    }
}
