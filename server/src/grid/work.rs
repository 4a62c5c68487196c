//! Work: a host's request answered with signed units. The host's view
//! (slots, speed, windows, units held), the scheduler's choice among the open
//! jobs, hand-overs of a straggler's scan, and units issued and signed.
//!
//! Invariants: a host never holds more than its cap of units
//! ([`held_cap`]); no two jobs whose sites share a host run at once; a
//! unit is signed with the project key and bound to its host. Units are
//! judged elsewhere ([`super::attempts`], [`super::upload`]).
//!
//! The asker sees each round's queue through its own look (`scheduler::Queue`):
//! its failures marked, and what it may not take hidden and asked per job as a
//! policy looks at it (`Barred`: jobs it failed or handed over, results it may
//! not check; reaches meeting a running or settling one; windows). A request
//! never walks or copies a round's queue or its results under check: a host not
//! trusted while trusted hosts are online sees only the results every trusted
//! host online wrote (`checks_only`); the others see them all, their own
//! hidden. A host's slots are the concurrency its client last reported, else
//! its benchmark's, at most `untrusted_slots` (four, and one per result
//! kept) until it is trusted (`units_cap`). `work/level_claim.rs` shows `level`'s claim through
//! `request_work`.

use std::collections::{BTreeMap, BTreeSet};

use beebot_shared::limits::{MAX_UNITS_HELD_PER_HOST, MAX_UNITS_PER_REPLY};
use beebot_shared::sign::{ResumeFrom, SignedUnit, UnitBytes, WorkUnit};

use crate::model::*;
use crate::scheduler::{
    self, Checks, DeadlineRule, HeldUnit, HostView, JobQueue, JobView, Queue, RunningView, WorkAsk,
};
use crate::store::IdKind;
use crate::validate;

use super::index::*;
use super::verdict::fallback_checker;
use super::views::{end_key, end_of, host_slots, EndKey, HostViews};
use super::{Grid, GridError, ProjectSigner, RETRY_IDLE_S, RETRY_WHILE_ROUND_OPEN_S};

impl WorkReply<UnitBytes> {
    /// The reply with its units signed by `signer` (the project key).
    pub fn sign(self, signer: &dyn ProjectSigner) -> WorkReply {
        WorkReply {
            units: self
                .units
                .into_iter()
                .map(|u| signer.sign_unit_bytes(u))
                .collect(),
            retry_after_s: self.retry_after_s,
            rounds_open: self.rounds_open,
            cancelled_units: self.cancelled_units,
        }
    }
}

/// A work request as the grid sees it.
#[derive(Clone, Debug)]
pub struct WorkRequest {
    pub want_seconds: u64,
    pub free_slots: u32,
    pub units_held: Vec<u64>,
    /// The host's open crawling intervals, seconds from now (`None`: always open).
    pub open_windows: Option<Vec<(u64, u64)>>,
}

/// The answer to a work request: its units signed (`U` = [`SignedUnit`]),
/// or their bytes made but not signed yet ([`UnitBytes`]:
/// [`Grid::request_work_unsigned`], signed off the grid thread by
/// [`WorkReply::sign`], which cannot fail).
#[derive(Clone, Debug)]
pub struct WorkReply<U = SignedUnit> {
    pub units: Vec<U>,
    pub retry_after_s: Option<u64>,
    pub rounds_open: bool,
    /// Held units (named in the request) the host drops: of cancelled
    /// rounds or excluded sites, or recalled while it was away and taken
    /// by another host since.
    pub cancelled_units: Vec<u64>,
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

/// A work request's asker as each round's choice sees it.
struct Asker<'a> {
    host_id: u64,
    /// Its place in `hosts`.
    index: usize,
    /// The scheduler's view of every active host.
    hosts: &'a [HostView],
    /// Every running unit by expected end (seconds from now).
    by_end: &'a BTreeSet<EndKey>,
    speed: Option<f64>,
    /// Trusted hosts online.
    trusted_online: &'a BTreeSet<u64>,
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

    /// [`Asker::may_check`] for job `job_id` under check, or the asker is
    /// the one to scan it afresh because no host online is outside its
    /// authors ([`fallback_checker`]): a round never waits for ever for a
    /// check nobody may make.
    fn may_check_job(&self, jobs: &BTreeMap<u64, JobRecord>, job_id: u64, authors: &[u64]) -> bool {
        self.may_check(authors)
            || (authors.contains(&self.host_id)
                && jobs
                    .get(&job_id)
                    .is_some_and(|j| fallback_checker(j, self.hosts) == Some(self.host_id)))
    }
}

/// A round's running jobs whose scan could be handed over to the asker
/// (one copy runs, on another host: see `index::hand_over_from`), read from the
/// views' index by expected end ([`HostViews::by_end`]): a policy reads
/// from the latest end and stops where no later one could be worth a copy
/// (nothing is built for the jobs it does not read).
struct RoundRunning<'a> {
    open: &'a OpenJobs,
    asker: &'a Asker<'a>,
}

impl RoundRunning<'_> {
    /// The view of a running job whose one copy `h` is expected to end in
    /// `finish_s` with `pages` left.
    fn view(
        &self,
        job_id: u64,
        h: &Handable,
        pages: f64,
        finish_s: f64,
        pace_s: f64,
    ) -> RunningView {
        let failed = self.open.failed_by.get(&self.asker.host_id);
        RunningView {
            job_id,
            pages,
            holder: Some(h.host_id),
            copies: 1,
            on_asker: false,
            failed_here: failed.is_some_and(|f| f.contains(&job_id)),
            finish_s,
            pace_s,
        }
    }
}

impl std::fmt::Debug for RoundRunning<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundRunning")
            .field("handable", &self.open.handable.len())
            .field("asker", &self.asker.host_id)
            .finish()
    }
}

impl RoundRunning<'_> {
    /// The round's handable units among `keys` (read backwards: latest end first).
    fn read<'b>(
        &'b self,
        keys: impl DoubleEndedIterator<Item = &'b EndKey> + 'b,
    ) -> Box<dyn Iterator<Item = RunningView> + 'b> {
        Box::new(keys.rev().filter_map(|&(end, pages, job, unit, pace)| {
            let job_id = !job;
            let h = self.open.handable.get(&job_id)?;
            (h.unit_id == unit && h.host_id != self.asker.host_id)
                .then(|| self.view(job_id, h, end_of(pages), end_of(end), end_of(pace)))
        }))
    }
}

impl scheduler::RunningJobs for RoundRunning<'_> {
    fn latest_first(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        self.read(self.asker.by_end.iter())
    }
    fn latest_first_finite(&self) -> Box<dyn Iterator<Item = RunningView> + '_> {
        let infinite = (end_key(f64::INFINITY), 0, 0, 0, 0);
        self.read(self.asker.by_end.range(..infinite))
    }
}

/// The open jobs of a round an asker may not take now
/// ([`Grid::barred_jobs`]).
struct Barred<'a> {
    /// The round's results under check, by their authors.
    checks: &'a BTreeMap<u64, Vec<u64>>,
    jobs: &'a BTreeMap<u64, JobRecord>,
    asker: &'a Asker<'a>,
    /// Jobs it failed or handed over that go to another host.
    also: BTreeSet<u64>,
}

impl Barred<'_> {
    fn contains(&self, job_id: &u64) -> bool {
        self.also.contains(job_id)
            || self
                .checks
                .get(job_id)
                .is_some_and(|authors| !self.asker.may_check_job(self.jobs, *job_id, authors))
    }
}

/// The results under check of a round an asker that may not check every
/// one may see (`None`: every one, its own hidden per job by [`Barred`]):
/// a host not trusted while trusted hosts are online checks only results
/// that every trusted host online wrote, found among one of those hosts'
/// results, so a request never walks the round's results under check.
fn checks_only(
    open: &OpenJobs,
    jobs: &BTreeMap<u64, JobRecord>,
    asker: &Asker<'_>,
) -> Option<JobQueue> {
    if asker.trusted || asker.trusted_online.is_empty() {
        return None;
    }
    let first = asker.trusted_online.iter().next()?;
    let theirs = open.checks_by_author.get(first).into_iter().flatten();
    let mine = theirs.filter(|id| {
        open.checks
            .get(id)
            .is_some_and(|authors| asker.may_check_job(jobs, **id, authors))
    });
    Some(open.queue.checks_among(mine.copied()))
}

/// What a work request was given so far, round after round.
#[derive(Default)]
struct Picks {
    /// Jobs to issue, in order.
    chosen: Vec<u64>,
    /// Reaches of the jobs chosen
    /// ([`reach_key`]); running jobs' are in the index.
    busy: ReachIndex,
    /// Slots still free.
    free: u32,
    /// Seconds of work still wanted.
    want: f64,
    /// Running jobs whose scan the asker wants a copy of: handed over.
    hand_over: Vec<u64>,
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
        bytes: 0,
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

    /// Answer a host's work request, its units signed.
    pub fn request_work(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        now_ms: u64,
    ) -> Result<WorkReply, GridError> {
        let signer = self.signer.clone();
        Ok(self
            .request_work_unsigned(host_id, req, now_ms)?
            .sign(&*signer))
    }

    /// Answer a host's work request with units recorded as issued, their
    /// bytes made (every way signing can fail is met there, before a unit
    /// is recorded) but not signed: `serve` signs them
    /// ([`WorkReply::sign`]) outside the grid's lock.
    pub fn request_work_unsigned(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        now_ms: u64,
    ) -> Result<WorkReply<UnitBytes>, GridError> {
        let offline_before = self.hosts.get(&host_id).map_or(0, |h| h.offline_ms);
        let host = self.active_host(host_id, now_ms)?.clone();
        self.store_contact(&host, offline_before)?;
        // Units the host no longer holds go back to the queue at once.
        self.release_host_units(host_id, Some(&req.units_held), now_ms)?;
        // Units recalled while it was away: its own again, or dropped.
        let mut cancelled_units = self.cancelled_units(&req.units_held);
        for unit in self.reclaim_recalled(host_id, &req.units_held, now_ms)? {
            if !cancelled_units.contains(&unit) {
                cancelled_units.push(unit);
            }
        }

        // Rounds in start order; each with its own policy.
        let running: Vec<(u64, RoundParams, u64)> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .map(|r| (r.id, r.params.clone(), r.created_ms))
            .collect();
        let units = if running.is_empty() {
            Vec::new()
        } else {
            // The views are kept for the next request, whatever this one's outcome.
            let views = self.take_views(now_ms, host_id);
            let units = self.units_for(host_id, req, &running, &views, now_ms);
            self.keep_views(views);
            units?
        };
        self.check_derived();
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

    /// The units a host's request gets from the `running` rounds, given
    /// the hosts' `views`: each round's policy chooses, hand-overs are
    /// asked for, and the chosen jobs are issued.
    fn units_for(
        &mut self,
        host_id: u64,
        req: &WorkRequest,
        running: &[(u64, RoundParams, u64)],
        views: &HostViews,
        now_ms: u64,
    ) -> Result<Vec<UnitBytes>, GridError> {
        let speed = self.host_speed(host_id);
        let mut picks = Picks {
            free: req.free_slots.min(MAX_UNITS_PER_REPLY as u32),
            want: req.want_seconds as f64,
            ..Picks::default()
        };
        let hosts = &views.views;
        let index = hosts.binary_search_by_key(&host_id, |h| h.host_id).ok();
        let mine = views.held.get(&host_id).cloned().unwrap_or_default();
        // Never more units held at once than the host's slots keep busy
        // (and its buffer), whatever it says is free.
        if index.is_some() {
            let room = self.units_cap(host_id).saturating_sub(mine.len());
            picks.free = picks.free.min(u32::try_from(room).unwrap_or(u32::MAX));
        }
        let asker = index.map(|index| self.asker(host_id, index, views, speed, req));
        // Hand-overs and handed-over jobs of the past are forgotten.
        self.prune_hand_overs();
        self.expire_settling(now_ms);
        for round in running {
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
        self.issue_chosen(&picks.chosen, host_id, speed, (slots, mine), now_ms)
    }

    /// The asker as the scheduler's choice sees it (`index` is its place in
    /// `hosts`): a result is checked by another host than its authors, a
    /// trusted one while one that is not among them is online.
    fn asker<'a>(
        &self,
        host_id: u64,
        index: usize,
        views: &'a HostViews,
        speed: Option<f64>,
        req: &'a WorkRequest,
    ) -> Asker<'a> {
        let trusted = self.is_trusted(host_id);
        let (hosts, trusted_online) = (&views.views, &views.trusted_online);
        Asker {
            host_id,
            index,
            hosts,
            by_end: &views.by_end,
            speed,
            trusted_online,
            trusted,
            others_online: hosts.iter().any(|h| h.online && h.host_id != host_id),
            open_windows: req.open_windows.as_deref(),
        }
    }

    /// Reaches whose scan uploaded less than the round's delay ago (their
    /// host's last request came before): no new stream to that host yet.
    /// A queued job whose reach meets a running job's waits too (the same
    /// host from two sites, or a site in subdomains/domain scope over
    /// another's host), so no host gets two request streams from the grid:
    /// [`Grid::meets_busy`] asks the index of running reaches.
    /// [`Grid::meets_busy`] asks the index of running reaches and the
    /// settling one, kept between requests (only what expired is taken out).
    /// A queued job whose own scan settled goes into its round's queue.
    fn expire_settling(&mut self, now_ms: u64) {
        for job_id in self.settling.expire(now_ms) {
            self.reindex(job_id);
        }
    }

    /// Whether `reach` meets a running job's (of any running round), one
    /// settling, or one of `busy` (chosen in this request). O(rounds ×
    /// labels × log running).
    fn meets_busy(&self, reach: &(String, bool), busy: &ReachIndex) -> bool {
        meets_any(busy, reach, None)
            || meets_any(&self.settling.index, reach, None)
            || self
                .open
                .values()
                .any(|o| meets_any(&o.running_reach, reach, None))
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
        let barred = self.barred_jobs(open, asker);
        let only = checks_only(open, &self.jobs, asker);
        let checks = match &only {
            None => Checks::All,
            Some(q) if q.checks_len() == 0 => Checks::None,
            Some(q) => Checks::Only(q),
        };
        let running_jobs = RoundRunning { open, asker };
        #[cfg(debug_assertions)]
        if policy.replicates() {
            self.check_running(&running_jobs);
        }
        let running: &dyn scheduler::RunningJobs = if policy.replicates() {
            &running_jobs
        } else {
            &scheduler::NoRunning
        };
        let delay_s = params.delay_ms as f64 / 1000.0;
        let cost = scheduler::seconds_per_page(asker.speed, delay_s);
        let rule = self.deadline_rule(params);
        let decision = {
            // The queue as the index keeps it, with this host's failures
            // marked and what it may not take now hidden, looked up only
            // for the jobs a policy looks at: a deep queue is never walked
            // or copied for a request.
            let busy = &picks.busy;
            let hidden = |v: &JobView| {
                barred.contains(&v.job_id)
                    || open
                        .reach_of
                        .get(&v.job_id)
                        .is_some_and(|r| self.meets_busy(r, busy))
                    // Only work whose deadline the host can meet inside its open windows.
                    || asker
                        .open_windows
                        .is_some_and(|w| !scheduler::fits_windows(w, v.pages * cost, &rule))
            };
            let ctx = scheduler::Ctx {
                now_ms,
                round_started_ms: *started_ms,
                delay_s,
                max_pages: f64::from(params.max_pages.max(1)),
                queue: Queue::for_asker(&open.queue, open.failed_by.get(&host_id), &hidden, checks),
                running,
                hosts: asker.hosts,
                asker: asker.index,
            };
            let ask = WorkAsk {
                want_seconds: picks.want.max(0.0) as u64,
                free_slots: picks.free,
            };
            policy.choose(&ctx, &ask)
        };
        self.take_jobs(&decision.jobs, open, cost, picks);
        // A copy of a running job is wanted (a hedge or a tail replica):
        // never a second stream of requests to its site, but a hand-over.
        // The running copy stops at a page boundary and uploads what it
        // did with its frontier, and another host continues from there.
        for id in decision.replicas {
            // One running copy, on another host (see `index::hand_over_from`).
            let ok = !barred.contains(&id)
                && open.handable.get(&id).is_some_and(|h| h.host_id != host_id);
            if ok && !picks.hand_over.contains(&id) {
                picks.hand_over.push(id);
            }
        }
    }

    /// Open jobs of a round the asker may not take now: results it may not
    /// check, jobs it failed while another host is online, and jobs it
    /// handed over. (Jobs whose reach meets a busy one are asked of the
    /// index per job looked at: [`Grid::meets_busy`].) The results under
    /// check are asked per job too ([`Barred::contains`]): there may be a
    /// round's worth of them, and a request never walks them.
    fn barred_jobs<'a>(&'a self, open: &'a OpenJobs, asker: &'a Asker<'a>) -> Barred<'a> {
        let host_id = asker.host_id;
        let mut also = BTreeSet::new();
        // A job this host let expire or gave back goes to another host
        // while one that has not failed it (nor wrote the result it
        // checks) is online (as BOINC sends a host no second result of a
        // job): a host that hoards cannot keep the last sites of a round
        // to itself.
        for id in open.failed_by.get(&host_id).into_iter().flatten() {
            let authors = open.checks.get(id);
            // Failed where the job stands now (not before a segment).
            let here = self.jobs.get(id).is_some_and(|j| {
                j.attempts.iter().any(|a| {
                    a.host_id == host_id && j.is_current(a) && a.state.ended_without_result()
                })
            });
            // Of a check, only a host that may make it: no author, and
            // trusted unless every trusted host online is an author.
            let may_check = |h: &scheduler::HostView| {
                authors.is_none_or(|a| {
                    !a.contains(&h.host_id)
                        && (h.trusted || asker.trusted_online.iter().all(|t| a.contains(t)))
                })
            };
            let someone_else = here
                && asker.hosts.iter().any(|h| {
                    h.online
                        && h.host_id != host_id
                        && may_check(h)
                        && !open
                            .failed_by
                            .get(&h.host_id)
                            .is_some_and(|f| f.contains(id))
                });
            if someone_else {
                also.insert(*id);
            }
        }
        // A job this host handed over goes to another host while one
        // is online (else the hand-over gained nothing).
        for (job, from) in &self.handed_from {
            if *from == host_id && asker.others_online {
                also.insert(*job);
            }
        }
        Barred {
            checks: &open.checks,
            jobs: &self.jobs,
            asker,
            also,
        }
    }

    /// Debug builds: the running jobs as [`RoundRunning`] reads them from
    /// the index by expected end are every running job of the round whose
    /// scan could be handed over to the asker, as a walk over them all
    /// finds them, in [`RunningView::latest_first`] order.
    #[cfg(debug_assertions)]
    fn check_running(&self, running: &RoundRunning<'_>) {
        use scheduler::RunningJobs;
        let asker = running.asker;
        let ends: std::collections::HashMap<u64, (f64, f64, f64)> = asker
            .by_end
            .iter()
            .map(|&(end, pages, _, unit, pace)| (unit, (end_of(end), end_of(pages), end_of(pace))))
            .collect();
        let mut all: Vec<RunningView> = running
            .open
            .handable
            .iter()
            .filter(|(_, h)| h.host_id != asker.host_id)
            .map(|(&job_id, h)| {
                let (end, pages, pace) =
                    ends.get(&h.unit_id)
                        .copied()
                        .unwrap_or((f64::INFINITY, h.pages, 0.0));
                running.view(job_id, h, pages, end, pace)
            })
            .collect();
        all.sort_by(RunningView::latest_first);
        let read: Vec<RunningView> = running.latest_first().collect();
        assert_eq!(read, all, "running jobs read by expected end");
        let finite: Vec<RunningView> = running.latest_first_finite().collect();
        all.retain(|r| r.finish_s.is_finite());
        assert_eq!(finite, all, "running jobs with a finite end");
    }

    /// Take the jobs the scheduler chose (`ids`, queued in `open`) while
    /// slots are free: two jobs chosen at once whose sites share a host, the
    /// later one waits.
    fn take_jobs(&self, ids: &[u64], open: &OpenJobs, cost: f64, picks: &mut Picks) {
        for &id in ids {
            if picks.free == 0 {
                break;
            }
            let Some(v) = open.queue.get(id) else {
                continue;
            };
            let reach = open.reach_of.get(&id);
            let meets = reach.is_some_and(|r| {
                meets_any(&picks.busy, r, None) || meets_any(&self.settling.index, r, None)
            });
            if picks.chosen.iter().all(|c| *c != id) && !meets {
                picks.want -= v.pages * cost;
                picks.chosen.push(id);
                if let Some((key, all_under)) = reach {
                    picks
                        .busy
                        .entry(key.clone())
                        .or_default()
                        .insert(id, *all_under);
                }
                picks.free -= 1;
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
    ) -> Result<Vec<UnitBytes>, GridError> {
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
        let Some(round) = self.rounds.get(&job.round_id) else {
            return false;
        };
        let reach = self
            .open
            .get(&job.round_id)
            .and_then(|o| o.reach_of.get(&job.id).cloned())
            .unwrap_or_else(|| reach_key(&job.site, round.params.scope));
        self.open
            .values()
            .any(|o| meets_any(&o.running_reach, &reach, Some(job.id)))
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

    /// Create and record one unit of a job (queued, or running when
    /// `replica`); its deadline counts `wait_s` for a free slot. Returns the
    /// unit's bytes (to be signed; a unit that cannot be signed is refused
    /// before anything is recorded) and its expected scan seconds.
    pub(super) fn issue(
        &mut self,
        job_id: u64,
        host_id: u64,
        speed: Option<f64>,
        replica: bool,
        wait_s: f64,
        now_ms: u64,
    ) -> Result<(UnitBytes, f64), GridError> {
        let unit_id = self.writes.next_id(IdKind::Unit);
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
            limits: p.unit_limits(),
            issued_ms: now_ms,
            deadline_ms: deadline,
            user_agent: self.settings.user_agent.clone(),
            resume,
            exclusions,
        };
        let bytes =
            beebot_shared::sign::unit_bytes(&unit).map_err(|e| GridError::Sign(e.to_string()))?;
        let job = self.job_mut(job_id)?;
        job.attempts.push(Attempt {
            replica,
            resume_seq,
            chain: job.chain,
            ..new_attempt(unit_id, host_id, now_ms, deadline)
        });
        job.state = JobState::Running;
        let job = job.clone();
        self.writes.put_job(job);
        self.units.insert(unit_id, job_id);
        self.reindex(job_id);
        self.counters.units_issued += 1;
        self.counters.units_replicated += u64::from(replica);
        Ok((bytes, expected))
    }

    /// Running attempts of `host_id`, across rounds.
    pub(super) fn running_units_of(&self, host_id: u64) -> usize {
        self.open
            .values()
            .flat_map(|o| o.jobs_on(host_id))
            .filter_map(|id| self.jobs.get(&id))
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
    /// trusted yet is taken to have at most [`validate::untrusted_slots`]
    /// (four, one more per result of it kept and one less per unit it let
    /// lapse or gave back), whatever it claims.
    pub(super) fn units_cap(&self, host_id: u64) -> usize {
        let Some(h) = self.hosts.get(&host_id) else {
            return held_cap(scheduler::DEFAULT_HOST_SLOTS.min(validate::UNTRUSTED_MAX_SLOTS));
        };
        let slots = h.concurrency.unwrap_or_else(|| host_slots(h));
        if self.is_trusted(host_id) {
            held_cap(slots)
        } else {
            let lapsed = h.deadlines_missed.saturating_add(h.failures);
            held_cap(slots.min(validate::untrusted_slots(
                h.jobs_done,
                lapsed,
                h.invalid_results,
            )))
        }
    }
}

#[cfg(test)]
mod level_claim;
#[cfg(test)]
mod tests;
