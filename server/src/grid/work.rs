//! Work: a host's request answered with signed units. The host's view
//! (slots, speed, windows, units held), the scheduler's choice among the open
//! jobs, hand-overs of a straggler's scan, and units issued and signed.
//!
//! Invariants: a host never holds more than its cap of units
//! ([`held_cap`]); no two jobs whose sites share a host run at once; a
//! unit is signed with the project key and bound to its host. Units are
//! judged elsewhere ([`super::attempts`], [`super::upload`]).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use beebot_shared::limits::{MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_REPLY};
use beebot_shared::scope::Scope;
use beebot_shared::sign::{ResumeFrom, SignedUnit, UnitLimits, WorkUnit};

use crate::model::*;
use crate::scheduler::{
    self, Capacity, DeadlineRule, Demand, HeldUnit, HostView, JobView, RunningView, WorkAsk,
};
use crate::store::IdKind;
use crate::validate;

use super::index::*;
use super::{Grid, GridError, RETRY_IDLE_S, RETRY_WHILE_ROUND_OPEN_S};

/// A work request as the grid sees it.
#[derive(Clone, Debug)]
pub struct WorkRequest {
    pub want_seconds: u64,
    pub free_slots: u32,
    pub units_held: Vec<u64>,
    /// The host's open crawling intervals, seconds from now (`None`: always open).
    pub open_windows: Option<Vec<(u64, u64)>>,
}

/// The answer to a work request.
#[derive(Clone, Debug)]
pub struct WorkReply {
    pub units: Vec<SignedUnit>,
    pub retry_after_s: Option<u64>,
    pub rounds_open: bool,
    /// Held units (named in the request) of cancelled rounds: the host drops them.
    pub cancelled_units: Vec<u64>,
}

/// A host's slots as learned: its benchmark's (bounded when stored), else
/// the default.
pub(super) fn host_slots(h: &HostRecord) -> u32 {
    h.benchmark
        .as_ref()
        .map(|b| b.slots)
        .filter(|s| *s > 0)
        .unwrap_or(scheduler::DEFAULT_HOST_SLOTS)
}

/// Most units a host of `slots` (as learned: its benchmark's, bounded) may
/// hold at once: a scanning unit and a buffer per slot, at most
/// [`MAX_UNITS_HELD_PER_HOST`].
pub fn held_cap(slots: u32) -> usize {
    usize::try_from(scheduler::host_capacity(slots)).unwrap_or(MAX_UNITS_HELD_PER_HOST)
}

/// Expected seconds of a job's next scan on a host of `speed`: what is left
/// of its expected pages at the host's cost (never faster than the pace its
/// last scan showed, Crawl-delay included); for a site never scanned before,
/// what the round's limits allow (the page cap at that cost), not a guess.
/// Never more than the round's time budget, which ends any scan.
pub(super) fn scan_expected_s(job: &JobRecord, p: &RoundParams, speed: Option<f64>) -> f64 {
    let mut cost = scheduler::seconds_per_page(speed, p.delay_ms as f64 / 1000.0);
    if let Some(seg) = job.segments.last().filter(|s| s.summary.pages > 0) {
        cost = cost.max(seg.summary.elapsed_ms as f64 / 1000.0 / seg.summary.pages as f64);
    }
    let pages = if job.size_known {
        job.est_pages
    } else {
        (f64::from(p.max_pages) - job.pages_done() as f64).max(1.0)
    };
    let s = pages * cost;
    if p.max_seconds > 0 {
        s.min(p.max_seconds as f64)
    } else {
        s
    }
}

/// The one running copy of `job` that could hand its scan over to `asker`:
/// on another host, scanning, with pages of its own taken (a unit still
/// waiting in a host's buffer crawls nothing, and one that stopped at once
/// would be a failed attempt).
pub(super) fn hand_over_from(job: &JobRecord, asker: u64) -> Option<&Attempt> {
    let mut running = job.running_attempts();
    let (Some(a), None) = (running.next(), running.next()) else {
        return None;
    };
    // Pages of the scans it continues from (progress counts the unit's).
    let pages_before = (a.resume_seq as usize)
        .checked_sub(1)
        .and_then(|k| job.segments.get(k))
        .map_or(0, |s| s.pages_done);
    let scanning = a.first_report_ms != 0 && a.pages > pages_before;
    (a.host_id != asker && scanning && !job.is_behind(a)).then_some(a)
}

/// A work request's asker as each round's choice sees it.
struct Asker<'a> {
    host_id: u64,
    /// Its place in `hosts`.
    index: usize,
    /// The scheduler's view of every active host.
    hosts: &'a [HostView],
    /// Expected end (seconds from now) of every running unit, by unit id.
    ends: &'a HashMap<u64, f64>,
    speed: Option<f64>,
    /// Trusted hosts online.
    trusted_online: Vec<u64>,
    trusted: bool,
    /// Whether a host other than the asker is online.
    others_online: bool,
    open_windows: Option<&'a [(u64, u64)]>,
}

impl Asker<'_> {
    /// Whether the asker may check a result of `authors`: it is none of
    /// them, and it is trusted or no trusted host outside them is online.
    fn may_check(&self, authors: &[u64]) -> bool {
        !authors.contains(&self.host_id)
            && (self.trusted || self.trusted_online.iter().all(|t| authors.contains(t)))
    }
}

/// What a work request was given so far, round after round.
#[derive(Default)]
struct Picks {
    /// Jobs to issue, in order.
    chosen: Vec<u64>,
    /// Reaches of the running jobs and of those chosen ([`reach_key`]).
    busy: Vec<(String, bool)>,
    /// Slots still free.
    free: u32,
    /// Seconds of work still wanted.
    want: f64,
    /// Running jobs whose scan the asker wants a copy of: handed over.
    hand_over: Vec<u64>,
}

/// The limits a unit of a round with `p` carries.
fn unit_limits(p: &RoundParams) -> UnitLimits {
    UnitLimits {
        max_pages: p.max_pages,
        max_depth: p.max_depth,
        delay_ms: p.delay_ms,
        max_page_bytes: p.max_page_bytes,
        max_seconds: p.max_seconds,
        max_crawl_delay_ms: p.max_crawl_delay_ms,
    }
}

/// A running attempt just issued: nothing reported yet, the first copy of
/// the job's first scan (the caller sets `replica`, `resume_seq`, `chain`).
fn new_attempt(unit_id: u64, host_id: u64, now_ms: u64, deadline_ms: u64) -> Attempt {
    Attempt {
        unit_id,
        host_id,
        issued_ms: now_ms,
        deadline_ms,
        window_ms: deadline_ms.saturating_sub(now_ms),
        state: AttemptState::Running,
        pages: 0,
        links: 0,
        replica: false,
        first_report_ms: 0,
        first_report_pages: 0,
        last_report_ms: 0,
        resume_seq: 0,
        chain: 0,
    }
}

impl Grid {
    /// How deadlines of a round with `p` are set.
    fn deadline_rule(&self, p: &RoundParams) -> DeadlineRule {
        DeadlineRule {
            slack: self.settings.deadline_slack,
            grace_s: self.settings.deadline_grace_s,
            min_s: p.deadline_min_s,
            max_s: p.deadline_max_s,
        }
    }

    /// The scheduler's view of every active host (sorted by id), with the
    /// expected end (seconds from now) of every running unit, by unit id, and
    /// the units each host holds (in issue order).
    #[allow(clippy::type_complexity)]
    pub(super) fn host_views(
        &self,
        now_ms: u64,
    ) -> (
        Vec<HostView>,
        HashMap<u64, f64>,
        HashMap<u64, Vec<HeldUnit>>,
    ) {
        // Running units per host, from the running rounds.
        let mut held: HashMap<u64, Vec<((bool, u64, u64), HeldUnit)>> = HashMap::new();
        // What each host's held units need at once, beyond slots (`pack`).
        let mut demands: HashMap<u64, Demand> = HashMap::new();
        for r in self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
        {
            let delay_s = r.params.delay_ms as f64 / 1000.0;
            let Some(open) = self.open.get(&r.id) else {
                continue;
            };
            for job in open.running.iter().filter_map(|id| self.jobs.get(id)) {
                for a in job.running_attempts() {
                    let cost = scheduler::seconds_per_page(self.host_speed(a.host_id), delay_s);
                    // A scan that reports progress is timed by its own pace.
                    let unit = match scheduler::remaining_s(
                        job.est_pages,
                        (a.first_report_ms, a.first_report_pages),
                        (a.last_report_ms, a.pages),
                        now_ms,
                    ) {
                        Some(left) => HeldUnit {
                            issued_ms: now_ms,
                            expected_s: left,
                        },
                        None => HeldUnit {
                            issued_ms: a.issued_ms,
                            expected_s: job.est_pages * cost,
                        },
                    };
                    // Scanning units first (their slots are taken), then in issue order.
                    let key = (a.first_report_ms == 0, a.issued_ms, a.unit_id);
                    held.entry(a.host_id).or_default().push((key, unit));
                    demands
                        .entry(a.host_id)
                        .or_default()
                        .add(Demand::of_scan(job.est_pages, cost));
                }
            }
        }
        let mut ends = HashMap::new();
        let mut by_host = HashMap::new();
        let mut views = Vec::with_capacity(self.hosts.len());
        for h in self.hosts.values().filter(|h| !h.revoked) {
            let mut units = held.remove(&h.id).unwrap_or_default();
            units.sort_by_key(|(key, _)| *key);
            let slots = host_slots(h);
            let plain: Vec<HeldUnit> = units.iter().map(|(_, u)| *u).collect();
            let sched = scheduler::slot_schedule(&plain, slots, now_ms);
            let online =
                scheduler::is_online(h.last_seen_ms, h.last_missed_ms, !units.is_empty(), now_ms);
            for (((_, _, unit), _), end) in units.iter().zip(&sched.ends_s) {
                ends.insert(*unit, if online { *end } else { f64::INFINITY });
            }
            views.push(HostView {
                host_id: h.id,
                pages_per_s: self.host_speed(h.id),
                slots,
                busy: units.len() as u32,
                free_at_s: sched.free_at_s,
                load_s: sched.load_s,
                online,
                availability: scheduler::availability(h.enrolled_ms, h.offline_ms, now_ms),
                last_seen_ms: h.last_seen_ms,
                capacity: Capacity::of(self.resources.get(&h.id)),
                demand: demands.remove(&h.id).unwrap_or_default(),
            });
            by_host.insert(h.id, plain);
        }
        (views, ends, by_host)
    }

    /// Answer a host's work request.
    pub fn request_work(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        now_ms: u64,
    ) -> Result<WorkReply, GridError> {
        let host = self.active_host(host_id, now_ms)?.clone();
        self.store.put_host(&host)?;
        // Units the host no longer holds go back to the queue at once.
        self.release_host_units(host_id, Some(&req.units_held), now_ms)?;
        let cancelled_units = self.cancelled_units(&req.units_held);

        let speed = self.host_speed(host_id);
        // Rounds in start order; each with its own policy.
        let running: Vec<(u64, RoundParams, u64)> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| (r.id, r.params.clone(), r.created_ms))
            .collect();
        let mut picks = Picks {
            free: req.free_slots.min(MAX_UNITS_PER_REPLY as u32),
            want: req.want_seconds as f64,
            ..Picks::default()
        };
        let (hosts, ends, mut held) = if running.is_empty() {
            (Vec::new(), HashMap::new(), HashMap::new())
        } else {
            self.host_views(now_ms)
        };
        let index = hosts.iter().position(|h| h.host_id == host_id);
        // Never more units held at once than the host's slots keep busy
        // (and its buffer), whatever it says is free.
        if index.is_some() {
            let holds = held.get(&host_id).map_or(0, Vec::len);
            let room = self.units_cap(host_id).saturating_sub(holds);
            picks.free = picks.free.min(u32::try_from(room).unwrap_or(u32::MAX));
        }
        let asker = index.map(|index| self.asker(host_id, index, &hosts, &ends, speed, req));
        // Hand-overs and handed-over jobs of the past are forgotten.
        self.prune_hand_overs();
        picks.busy = self.busy_reaches(&running, now_ms);
        for round in &running {
            let Some(asker) = &asker else { break };
            if picks.free == 0 {
                break;
            }
            self.choose_in_round(round, asker, &mut picks, now_ms);
        }

        for job_id in std::mem::take(&mut picks.hand_over) {
            self.ask_hand_over(job_id, host_id);
        }
        // Each unit's deadline counts the wait for a slot behind what the host holds.
        let slots = index.map(|i| hosts[i].slots).unwrap_or(1);
        let mine = held.remove(&host_id).unwrap_or_default();
        let units = self.issue_chosen(&picks.chosen, host_id, speed, (slots, mine), now_ms)?;
        self.store.flush()?;
        self.check_open();
        let rounds_open = self.rounds_open(now_ms);
        let retry_after_s = if !units.is_empty() {
            None
        } else if rounds_open {
            Some(RETRY_WHILE_ROUND_OPEN_S)
        } else {
            Some(RETRY_IDLE_S)
        };
        Ok(WorkReply {
            units,
            retry_after_s,
            rounds_open,
            cancelled_units,
        })
    }

    /// The asker as the scheduler's choice sees it (`index` is its place in
    /// `hosts`): a result is checked by another host than its authors, a
    /// trusted one while one that is not among them is online.
    fn asker<'a>(
        &self,
        host_id: u64,
        index: usize,
        hosts: &'a [HostView],
        ends: &'a HashMap<u64, f64>,
        speed: Option<f64>,
        req: &'a WorkRequest,
    ) -> Asker<'a> {
        Asker {
            host_id,
            index,
            hosts,
            ends,
            speed,
            trusted_online: hosts
                .iter()
                .filter(|h| h.online && self.is_trusted(h.host_id))
                .map(|h| h.host_id)
                .collect(),
            trusted: self.is_trusted(host_id),
            others_online: hosts.iter().any(|h| h.online && h.host_id != host_id),
            open_windows: req.open_windows.as_deref(),
        }
    }

    /// The reach of every running job: a queued job whose reach meets one
    /// waits (the same host from two sites, or a site in subdomains/domain
    /// scope over another's host), so no host gets two request streams from
    /// the grid. And a host whose scan uploaded less than the round's delay
    /// ago (its last request came before) gets no new stream yet.
    fn busy_reaches(
        &mut self,
        running: &[(u64, RoundParams, u64)],
        now_ms: u64,
    ) -> Vec<(String, bool)> {
        let mut busy: Vec<(String, bool)> = Vec::new();
        for (round_id, params, _) in running {
            for id in self.open.get(round_id).into_iter().flat_map(|o| &o.running) {
                if let Some(j) = self.jobs.get(id) {
                    busy.push(reach_key(&j.site, params.scope));
                }
            }
        }
        self.settling.retain(|_, until| *until > now_ms);
        busy.extend(self.settling.keys().cloned());
        busy
    }

    /// The scheduler's choice in one running round (`(id, params, started)`)
    /// for the asker: the queued jobs it may take, and the running jobs whose
    /// scan it wants a copy of (handed over), added to `picks`.
    fn choose_in_round(
        &self,
        (round_id, params, started_ms): &(u64, RoundParams, u64),
        asker: &Asker<'_>,
        picks: &mut Picks,
        now_ms: u64,
    ) {
        let Some(policy) = scheduler::policy_by_name(&params.policy) else {
            return;
        };
        let Some(open) = self.open.get(round_id) else {
            return;
        };
        let host_id = asker.host_id;
        // The queue as the index keeps it, with this host's failures marked.
        // (Borrowed as it is, unless this host failed some of it or
        // keeps windows: a deep queue is not copied for every request.)
        let mut queue: Cow<[JobView]> = Cow::Borrowed(&open.queue);
        for id in open.failed_by.get(&host_id).into_iter().flatten() {
            if let Ok(p) = queue.binary_search_by_key(id, |v| v.job_id) {
                queue.to_mut()[p].failed_here = true;
            }
        }
        let barred = self.barred_jobs(open, asker, &picks.busy);
        for id in &barred {
            if let Ok(p) = queue.binary_search_by_key(id, |v| v.job_id) {
                queue.to_mut().remove(p);
            }
        }
        let running_jobs = if policy.replicates() {
            self.running_views(open, asker)
        } else {
            Vec::new()
        };
        // Only work whose deadline the host can meet inside its open windows.
        if let Some(windows) = asker.open_windows {
            let cost = scheduler::seconds_per_page(asker.speed, params.delay_ms as f64 / 1000.0);
            let rule = self.deadline_rule(params);
            queue
                .to_mut()
                .retain(|v| scheduler::fits_windows(windows, v.pages * cost, &rule));
        }
        let ctx = scheduler::Ctx {
            now_ms,
            round_started_ms: *started_ms,
            delay_s: params.delay_ms as f64 / 1000.0,
            queue: &queue,
            running: &running_jobs,
            hosts: asker.hosts,
            asker: asker.index,
        };
        let ask = WorkAsk {
            want_seconds: picks.want.max(0.0) as u64,
            free_slots: picks.free,
        };
        let decision = policy.choose(&ctx, &ask);
        let cost = scheduler::seconds_per_page(asker.speed, ctx.delay_s);
        self.take_jobs(&decision.jobs, &queue, params.scope, cost, picks);
        // A copy of a running job is wanted (a hedge or a tail replica):
        // never a second stream of requests to its site, but a hand-over.
        // The running copy stops at a page boundary and uploads what it
        // did with its frontier, and another host continues from there.
        for id in decision.replicas {
            let ok = !barred.contains(&id)
                && running_jobs
                    .iter()
                    .any(|r| r.job_id == id && r.copies < scheduler::MAX_COPIES && !r.on_asker);
            if ok && !picks.hand_over.contains(&id) {
                picks.hand_over.push(id);
            }
        }
    }

    /// Open jobs of a round the asker may not take now: results it may not
    /// check, jobs it failed while another host is online, jobs it handed
    /// over, and jobs whose reach meets a `busy` one.
    fn barred_jobs(
        &self,
        open: &OpenJobs,
        asker: &Asker<'_>,
        busy: &[(String, bool)],
    ) -> BTreeSet<u64> {
        let host_id = asker.host_id;
        let mut barred: BTreeSet<u64> = open
            .checks
            .iter()
            .filter(|(_, authors)| !asker.may_check(authors))
            .map(|(id, _)| *id)
            .collect();
        // A job this host let expire or gave back goes to another host
        // while one that has not failed it is online (as BOINC sends a
        // host no second result of a job): a host that hoards cannot
        // keep the last sites of a round to itself.
        for id in open.failed_by.get(&host_id).into_iter().flatten() {
            // Failed where the job stands now (not before a segment).
            let here = self.jobs.get(id).is_some_and(|j| {
                j.attempts.iter().any(|a| {
                    a.host_id == host_id && j.is_current(a) && a.state.ended_without_result()
                })
            });
            let someone_else = here
                && asker.hosts.iter().any(|h| {
                    h.online
                        && h.host_id != host_id
                        && !open
                            .failed_by
                            .get(&h.host_id)
                            .is_some_and(|f| f.contains(id))
                });
            if someone_else {
                barred.insert(*id);
            }
        }
        // A job this host handed over goes to another host while one
        // is online (else the hand-over gained nothing).
        for (job, from) in &self.handed_from {
            if *from == host_id && asker.others_online {
                barred.insert(*job);
            }
        }
        for b in busy {
            queued_meeting(&open.reach, b, &mut barred);
        }
        barred
    }

    /// The running jobs of a round whose scan could be handed over to the
    /// asker: a copy is never run beside another (one silent is replaced at
    /// its deadline).
    fn running_views(&self, open: &OpenJobs, asker: &Asker<'_>) -> Vec<RunningView> {
        let host_id = asker.host_id;
        open.running
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| hand_over_from(j, host_id).is_some())
            .map(|j| {
                let copies: Vec<&Attempt> = j.running_attempts().collect();
                RunningView {
                    job_id: j.id,
                    pages: j.est_pages,
                    copies: copies.len() as u32,
                    on_asker: copies.iter().any(|a| a.host_id == host_id),
                    failed_here: failed_by(j, host_id),
                    finish_s: copies
                        .iter()
                        .map(|a| asker.ends.get(&a.unit_id).copied().unwrap_or(f64::INFINITY))
                        .fold(f64::INFINITY, f64::min),
                }
            })
            .collect()
    }

    /// Take the jobs the scheduler chose (`ids`, of `queue`) while slots are
    /// free: two jobs chosen at once whose sites share a host, the later one
    /// waits.
    fn take_jobs(
        &self,
        ids: &[u64],
        queue: &[JobView],
        scope: Scope,
        cost: f64,
        picks: &mut Picks,
    ) {
        for &id in ids {
            if picks.free == 0 {
                break;
            }
            if let Ok(p) = queue.binary_search_by_key(&id, |v| v.job_id) {
                let v = &queue[p];
                let reach = self.jobs.get(&id).map(|j| reach_key(&j.site, scope));
                let meets = reach
                    .as_ref()
                    .is_some_and(|r| picks.busy.iter().any(|b| reaches_meet(b, r)));
                if picks.chosen.iter().all(|c| *c != id) && !meets {
                    picks.want -= v.pages * cost;
                    picks.chosen.push(id);
                    picks.busy.extend(reach);
                    picks.free -= 1;
                }
            }
        }
    }

    /// Issue the chosen jobs to the host, in order; each unit's deadline
    /// counts the wait for a slot (`(slots, units held)`) behind what the
    /// host holds.
    fn issue_chosen(
        &mut self,
        chosen: &[u64],
        host_id: u64,
        speed: Option<f64>,
        (slots, mut mine): (u32, Vec<HeldUnit>),
        now_ms: u64,
    ) -> Result<Vec<SignedUnit>, GridError> {
        let mut units = Vec::with_capacity(chosen.len());
        for &job_id in chosen {
            // The continuation of a handed-over scan counts as the copy
            // the scheduler wanted.
            let replica = self.handed_from.remove(&job_id).is_some();
            let wait_s = scheduler::slot_schedule(&mine, slots, now_ms).free_at_s;
            let (unit, expected_s) = self.issue(job_id, host_id, speed, replica, wait_s, now_ms)?;
            mine.push(HeldUnit {
                issued_ms: now_ms,
                expected_s,
            });
            units.push(unit);
        }
        Ok(units)
    }

    /// Ask the one running copy of `job_id` to hand its scan over, for
    /// `asker` (who wanted a copy). Only a scan that has taken pages (a
    /// unit still waiting in a host's buffer crawls nothing, and one that
    /// stopped at once would be a failed attempt).
    pub(super) fn ask_hand_over(&mut self, job_id: u64, asker: u64) {
        let Some((unit_id, host)) = self
            .jobs
            .get(&job_id)
            .and_then(|j| hand_over_from(j, asker))
            .map(|a| (a.unit_id, a.host_id))
        else {
            return;
        };
        self.hand_overs.insert(unit_id, asker);
        self.handed_from.insert(job_id, host);
    }

    /// Whether another running job's site shares a host with `job`'s.
    pub(super) fn meets_running_job(&self, job: &JobRecord) -> bool {
        let scope_of = |j: &JobRecord| self.rounds.get(&j.round_id).map(|r| r.params.scope);
        let Some(reach) = scope_of(job).map(|sc| reach_key(&job.site, sc)) else {
            return false;
        };
        self.running_job_ids()
            .iter()
            .filter(|id| **id != job.id)
            .filter_map(|id| self.jobs.get(id))
            .filter_map(|j| scope_of(j).map(|sc| reach_key(&j.site, sc)))
            .any(|r| reaches_meet(&r, &reach))
    }

    /// Forget hand-overs of units no longer running and handed-over jobs
    /// no longer open (both maps stay as small as the scans running).
    pub(super) fn prune_hand_overs(&mut self) {
        let jobs = &self.jobs;
        let units = &self.units;
        self.hand_overs.retain(|unit, _| {
            units
                .get(unit)
                .and_then(|j| jobs.get(j))
                .is_some_and(|j| j.running_attempts().any(|a| a.unit_id == *unit))
        });
        self.handed_from.retain(|job, _| {
            jobs.get(job)
                .is_some_and(|j| matches!(j.state, JobState::Queued | JobState::Running))
        });
    }

    /// Create, record and sign one unit of a job (queued, or running when
    /// `replica`); its deadline counts `wait_s` for a free slot. Returns the
    /// unit and its expected scan seconds.
    pub(super) fn issue(
        &mut self,
        job_id: u64,
        host_id: u64,
        speed: Option<f64>,
        replica: bool,
        wait_s: f64,
        now_ms: u64,
    ) -> Result<(SignedUnit, f64), GridError> {
        let unit_id = self.store.next_id(IdKind::Unit)?;
        let job = self
            .jobs
            .get(&job_id)
            .ok_or_else(|| GridError::Invalid(format!("job {job_id} vanished")))?;
        let round = self
            .rounds
            .get(&job.round_id)
            .ok_or(GridError::UnknownRound(job.round_id))?;
        let p = &round.params;
        // A job whose attempts ran out is failed, never issued again.
        assert!(
            job.failed_attempts() < p.max_attempts as usize,
            "job {job_id} issued with {} attempts ended without a result (limit {})",
            job.failed_attempts(),
            p.max_attempts
        );
        let expected = scan_expected_s(job, p, speed);
        let resume = job.segments.last().map(|seg| ResumeFrom {
            state_sha256: seg.state_sha256,
            state_bytes: seg.state_bytes,
            pages_done: seg.pages_done,
        });
        let resume_seq = job.segments.len() as u32;
        let rule = self.deadline_rule(p);
        let deadline = scheduler::deadline_ms(now_ms, wait_s.max(0.0) + expected, &rule);
        let (scope, exclusions) = self.unit_scope(&job.site, p.scope);
        let unit = WorkUnit {
            unit_id,
            round_id: job.round_id,
            job_id,
            host_id,
            site: job.site.clone(),
            seed_url: beebot_shared::scope::seed_url(&job.site).to_string(),
            scope,
            limits: unit_limits(p),
            issued_ms: now_ms,
            deadline_ms: deadline,
            user_agent: self.settings.user_agent.clone(),
            resume,
            exclusions,
        };
        let signed = self
            .signer
            .sign_unit(&unit)
            .map_err(|e| GridError::Sign(e.to_string()))?;
        let job = self.job_mut(job_id)?;
        job.attempts.push(Attempt {
            replica,
            resume_seq,
            chain: job.chain,
            ..new_attempt(unit_id, host_id, now_ms, deadline)
        });
        job.state = JobState::Running;
        let job = job.clone();
        self.store.put_job(&job)?;
        self.units.insert(unit_id, job_id);
        self.reindex(job_id);
        self.counters.units_issued += 1;
        self.counters.units_replicated += u64::from(replica);
        Ok((signed, expected))
    }

    /// Running attempts of `host_id`, across rounds.
    pub(super) fn running_units_of(&self, host_id: u64) -> usize {
        self.running_job_ids()
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .flat_map(|j| j.running_attempts())
            .filter(|a| a.host_id == host_id)
            .count()
    }

    pub(super) fn job_of_unit(&self, unit_id: u64) -> Option<&JobRecord> {
        self.units.get(&unit_id).and_then(|j| self.jobs.get(j))
    }

    /// Most units `host_id` may hold at once: its slots' worth
    /// ([`held_cap`]), its slots being the concurrency its client last
    /// reported (`Request::Concurrency`), else its benchmark's; a host not
    /// trusted yet is taken to have at most
    /// [`validate::UNTRUSTED_MAX_SLOTS`], whatever it claims.
    pub(super) fn units_cap(&self, host_id: u64) -> usize {
        let slots = self
            .hosts
            .get(&host_id)
            .map_or(scheduler::DEFAULT_HOST_SLOTS, |h| {
                h.concurrency.unwrap_or_else(|| host_slots(h))
            });
        if self.is_trusted(host_id) {
            held_cap(slots)
        } else {
            held_cap(slots.min(validate::UNTRUSTED_MAX_SLOTS))
        }
    }
}

#[cfg(test)]
mod level_claim;
#[cfg(test)]
mod tests;
