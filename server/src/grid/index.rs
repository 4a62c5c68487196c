//! The index of open jobs ([`OpenJobs`]): per running round, the queued
//! jobs as the scheduler sees them, the running ones, each host's failures,
//! the jobs under check, each open job's reach and the running jobs by
//! their reach and by host.
//!
//! Invariants: [`Grid::reindex`] is called after every change of a job of a
//! running round, so the index always equals one built afresh from the jobs
//! (debug builds check it: [`Grid::check_open`]). It is memory only, rebuilt
//! when the grid opens; it never writes to the store.
//!
//! Beside the queue and the running jobs (by id, by host: `running_on`, by
//! reach: `running_reach`) it holds the scans that could be handed over
//! (`handable`), each host's failures, the results under check and their
//! authors (`checks`, `checks_by_author`), the reaches settling after an upload
//! (`Settling`, ended in time order) and the queued jobs kept out of the queue
//! while their own upload settles (`settling`, queued by `expire_settling` at
//! the next request). A round is done only when its queue, its settling jobs
//! and its running ones are all empty. A failed write cannot leave it
//! behind its jobs: the grid only gives its writes back, after the change
//! is whole ([`super::writes`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use beebot_shared::scope::{Scope, SiteScope};

use super::Grid;
use crate::model::*;
use crate::scheduler::{self, JobQueue, JobView};

/// The one running copy of `job` that could hand its scan over to `asker`:
/// on another host, scanning, with pages of its own taken (a unit still
/// waiting in a host's buffer crawls nothing, and one that stopped at once
/// would be a failed attempt).
pub(super) fn hand_over_from(job: &JobRecord, asker: u64) -> Option<&Attempt> {
    let mut running = job.running_attempts();
    let (Some(a), None) = (running.next(), running.next()) else {
        return None;
    };
    // Progress counts the unit's own pages, not those of the scans it
    // continues from.
    let scanning = a.first_report_ms != 0 && a.pages > 0;
    (a.host_id != asker && scanning && !job.is_behind(a)).then_some(a)
}

/// A running round's queued and running jobs, so that a work request, an
/// upload and a tick cost what is open now, not a walk over every job of
/// every round ever run.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct OpenJobs {
    /// Queued jobs as the scheduler sees them, indexed by list order (job
    /// ids grow with it) and size, `failed_here` unset: it is filled in per
    /// asking host.
    pub(super) queue: JobQueue,
    /// Jobs with a running attempt.
    pub(super) running: BTreeSet<u64>,
    /// Hosts with a running attempt and the job (host id, job id).
    pub(super) running_on: BTreeSet<(u64, u64)>,
    /// The hosts of each running job's running attempts.
    pub(super) hosts_of: HashMap<u64, Vec<u64>>,
    /// Each open job's reach ([`reach_key`]), worked out once.
    pub(super) reach_of: HashMap<u64, (String, bool)>,
    /// Running jobs whose one running copy could hand its scan over to
    /// another host ([`hand_over_from`]), with that copy.
    pub(super) handable: BTreeMap<u64, Handable>,
    /// Running jobs by their site's reach ([`reach_key`] → job id → whether
    /// every name under it is inside): a queued job whose reach meets one
    /// waits, so no host is scanned by two jobs at once.
    pub(super) running_reach: BTreeMap<String, BTreeMap<u64, bool>>,
    /// Open jobs each host failed (an attempt expired or given back).
    pub(super) failed_by: HashMap<u64, BTreeSet<u64>>,
    /// The hosts under which `failed_by` lists each job.
    pub(super) failed_hosts: HashMap<u64, Vec<u64>>,
    /// Open jobs whose results are being checked, with the hosts that may
    /// not take them (the results' authors).
    pub(super) checks: BTreeMap<u64, Vec<u64>>,
    /// The jobs of `checks` by each of their authors.
    pub(super) checks_by_author: HashMap<u64, BTreeSet<u64>>,
    /// Queued jobs kept out of `queue` while their own scan's upload
    /// settles ([`Settling`]): every asker would have to pass over them,
    /// and at hundreds of uploads a second they are hundreds. Each goes
    /// into the queue when its settling ends (`Grid::expire_settling`).
    pub(super) settling: BTreeSet<u64>,
}

/// Jobs by their site's reach ([`reach_key`] → job id → whether every
/// name under it is inside).
pub(super) type ReachIndex = BTreeMap<String, BTreeMap<u64, bool>>;

/// Reaches whose scan uploaded less than the round's delay ago
/// ([`Grid::settle`]): an index a request asks as it asks the running
/// reaches' ([`meets_any`]), kept between requests, with each entry's end
/// in time order so that a request takes out only what expired (never a
/// walk over every settling reach).
#[derive(Clone, Debug, Default)]
pub(super) struct Settling {
    /// Reach key → the job whose scan uploaded → whether every name under
    /// it is inside.
    pub(super) index: ReachIndex,
    /// (until, reach key, job), in time order.
    ends: BTreeSet<(u64, String, u64)>,
    /// Each entry's end, by (reach key, job).
    until: HashMap<(String, u64), u64>,
    /// The jobs with an entry.
    jobs: HashSet<u64>,
}

impl Settling {
    /// `job`'s reach (`key`, `all_under`) settles until `until_ms`
    /// (replacing an earlier end of the same job's).
    pub(super) fn insert(&mut self, key: String, all_under: bool, job: u64, until_ms: u64) {
        if let Some(old) = self.until.insert((key.clone(), job), until_ms) {
            self.ends.remove(&(old, key.clone(), job));
        }
        self.ends.insert((until_ms, key.clone(), job));
        self.index.entry(key).or_default().insert(job, all_under);
        self.jobs.insert(job);
    }

    /// Whether `job`'s own scan settles.
    pub(super) fn holds(&self, job: u64) -> bool {
        self.jobs.contains(&job)
    }

    /// Take out every entry whose end is at or before `now_ms`; the jobs
    /// whose settling ended.
    pub(super) fn expire(&mut self, now_ms: u64) -> Vec<u64> {
        let mut ended = Vec::new();
        while self
            .ends
            .first()
            .is_some_and(|(until, _, _)| *until <= now_ms)
        {
            let Some((_, key, job)) = self.ends.pop_first() else {
                break;
            };
            self.until.remove(&(key.clone(), job));
            if let Some(jobs) = self.index.get_mut(&key) {
                jobs.remove(&job);
                if jobs.is_empty() {
                    self.index.remove(&key);
                }
            }
            if self.jobs.remove(&job) {
                ended.push(job);
            }
        }
        ended
    }

    /// Entries settling.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.until.len()
    }
}

/// A running job's one copy that could hand its scan over: its host, its
/// unit and the job's expected pages.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Handable {
    pub(super) host_id: u64,
    pub(super) unit_id: u64,
    pub(super) pages: f64,
}

/// A site's reach ([`SiteScope::reach`]) as a key whose names under a root
/// sort right after it: labels reversed (`cs.example.edu` is
/// `edu.example.cs`), ports dropped.
pub(super) fn reach_key(site: &str, scope: Scope) -> (String, bool) {
    let s = SiteScope::new(site, scope);
    let (root, all_under) = s.reach();
    let key: Vec<&str> = root.rsplit('.').collect();
    (key.join("."), all_under)
}

/// Whether two reaches ([`reach_key`]) share a host name (what
/// [`meets_any`] asks of an index).
#[cfg(test)]
pub(super) fn reaches_meet(a: &(String, bool), b: &(String, bool)) -> bool {
    let under = |x: &str, root: &str| {
        x.len() > root.len() && x.starts_with(root) && x.as_bytes()[root.len()] == b'.'
    };
    a.0 == b.0 || (a.1 && under(&b.0, &a.0)) || (b.1 && under(&a.0, &b.0))
}

/// Take `job_id` out of a reach index under `key`.
fn unindex_reach(index: &mut BTreeMap<String, BTreeMap<u64, bool>>, key: &str, job_id: u64) {
    if let Some(jobs) = index.get_mut(key) {
        jobs.remove(&job_id);
        if jobs.is_empty() {
            index.remove(key);
        }
    }
}

/// Whether some job of a reach index (as [`OpenJobs::running_reach`]) other than
/// `except` has a reach that meets `r`'s: O(labels × log n).
pub(super) fn meets_any(
    index: &BTreeMap<String, BTreeMap<u64, bool>>,
    r: &(String, bool),
    except: Option<u64>,
) -> bool {
    let (root, all_under) = (r.0.as_str(), r.1);
    let other = |id: &u64| Some(*id) != except;
    for (i, b) in root.bytes().enumerate().chain([(root.len(), b'.')]) {
        if b != b'.' {
            continue;
        }
        let above = &root[..i];
        let meets = index.get(above).is_some_and(|jobs| {
            jobs.iter()
                .any(|(id, tree)| other(id) && (i == root.len() || *tree))
        });
        if meets {
            return true;
        }
    }
    if all_under {
        let from = format!("{root}.");
        return index
            .range(from.clone()..)
            .take_while(|(k, _)| k.starts_with(&from))
            .any(|(_, jobs)| jobs.keys().any(other));
    }
    false
}

impl OpenJobs {
    /// The running jobs of `host` in this round.
    pub(super) fn jobs_on(&self, host: u64) -> impl Iterator<Item = u64> + '_ {
        self.running_on
            .range((host, 0)..=(host, u64::MAX))
            .map(|(_, job)| *job)
    }
}

/// The host had an attempt of `job` that expired or failed.
pub(super) fn failed_by(job: &JobRecord, host_id: u64) -> bool {
    job.attempts
        .iter()
        .any(|a| a.host_id == host_id && a.state.ended_without_result())
}

/// An open job's pace as the index holds it (`Grid::scan_paces`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct ScanPace {
    /// The job's segments when it was worked out.
    pub(super) segments: usize,
    /// Seconds a page adds under the delay (`scheduler::site_pace_s`).
    pub(super) pace: f64,
    /// From the job's own scan in its round (kept as first seen), rather
    /// than from its site's scan in an earlier round.
    pub(super) own: bool,
}

impl Grid {
    /// `job`'s site's mean response time under the delay (`delay_ms`,
    /// this round's), at its pace class's value
    /// ([`crate::scheduler::class_pace`]): from the job's last scan in
    /// this round when it has one (beyond its host's own time too: the
    /// pace kept in `scan_paces` when the job was first indexed with that
    /// scan, so that the index holds a figure no later change of a host's
    /// speed moves), else from the site's last scan finished in an earlier
    /// round (under that round's delay; its host's own time, not kept,
    /// taken as nothing); 0 when neither is known.
    pub(super) fn site_pace(&self, job: &JobRecord, delay_ms: u64) -> f64 {
        let delay_s = delay_ms as f64 / 1000.0;
        let pace = if let Some(p) = self
            .scan_paces
            .get(&job.id)
            .filter(|p| p.segments == job.segments.len())
        {
            p.pace
        } else if let Some(p) = self.last_scan_pace(job, delay_s) {
            p
        } else {
            self.earlier_pace(job, delay_s)
        };
        scheduler::class_pace(scheduler::pace_class(pace))
    }

    /// The site's pace as its last scan finished in an earlier round (or
    /// in this one, before `round rescan`) showed it, under that round's delay (`delay_s`, this round's, when
    /// that round is gone); 0 when there is none. Looks the site up by name.
    fn earlier_pace(&self, job: &JobRecord, delay_s: f64) -> f64 {
        let Some(last) = self
            .sites
            .get(&job.site)
            .and_then(|s| s.last_scan.as_ref())
            // (Its own round's: a site scanned again, `round rescan`.)
            .filter(|l| l.round_id <= job.round_id && l.pages > 0 && l.seconds > 0.0)
        else {
            return 0.0;
        };
        let then_s = self
            .rounds
            .get(&last.round_id)
            .map_or(delay_s, |r| r.params.delay_ms as f64 / 1000.0);
        scheduler::site_pace_s(last.seconds / last.pages as f64, then_s, 0.0)
    }

    /// The site's pace as `job`'s last scan in its round showed it, under
    /// the delay and its host's own time now (`None`: no scan of its own
    /// yet).
    fn last_scan_pace(&self, job: &JobRecord, delay_s: f64) -> Option<f64> {
        let seg = job
            .segments
            .iter()
            .rev()
            .find(|s| s.summary.pages > 0 && s.summary.elapsed_ms > 0)?;
        let page_s = seg.summary.elapsed_ms as f64 / 1000.0 / seg.summary.pages as f64;
        let own_s = scheduler::seconds_per_page(self.host_speed(seg.host_id), 0.0);
        Some(scheduler::site_pace_s(page_s, delay_s, own_s))
    }

    /// Bring the index of open jobs in step with job `job_id` after a change.
    pub(super) fn reindex(&mut self, job_id: u64) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        // Every host that ran a copy: its view changes with the job's.
        for a in &job.attempts {
            self.stale_views.insert(a.host_id);
        }
        let Some(round) = self
            .rounds
            .get(&job.round_id)
            .filter(|r| r.state == RoundState::Running)
        else {
            return;
        };
        let settles = self.settling.holds(job_id);
        // The pace of its last scan is kept as first seen; one from an
        // earlier round is worked out again at every change (a site's last
        // scan indexes its open jobs again). See `site_pace`.
        let segments = job.segments.len();
        let is_open = matches!(job.state, JobState::Queued | JobState::Running);
        if !is_open {
            self.scan_paces.remove(&job_id);
        } else if self
            .scan_paces
            .get(&job_id)
            .is_none_or(|p| !p.own || p.segments != segments)
        {
            let delay_s = round.params.delay_ms as f64 / 1000.0;
            // One from an earlier round is kept for running jobs only (the
            // views read it; a queued job's is in the queue's index), so
            // a round of a million queued sites keeps none.
            let kept = match self.last_scan_pace(job, delay_s) {
                Some(pace) => Some(ScanPace {
                    segments,
                    pace,
                    own: true,
                }),
                None => (job.state == JobState::Running).then(|| ScanPace {
                    segments,
                    pace: self.earlier_pace(job, delay_s),
                    own: false,
                }),
            };
            match kept {
                Some(kept) => self.scan_paces.insert(job_id, kept),
                None => self.scan_paces.remove(&job_id),
            };
        }
        let pace_s = if job.state == JobState::Queued {
            self.site_pace(job, round.params.delay_ms)
        } else {
            0.0
        };
        let open = self.open.entry(job.round_id).or_default();
        open.queue.remove(job_id);
        open.settling.remove(&job_id);
        // The site's reach, worked out once while the job is open.
        let reach = match open.reach_of.get(&job_id) {
            Some(r) => r.clone(),
            None => reach_key(&job.site, round.params.scope),
        };
        unindex_reach(&mut open.running_reach, &reach.0, job_id);
        if job.state == JobState::Running {
            open.running_reach
                .entry(reach.0.clone())
                .or_default()
                .insert(job_id, reach.1);
        }
        if is_open {
            open.reach_of.insert(job_id, reach);
        } else {
            open.reach_of.remove(&job_id);
        }
        if job.state == JobState::Queued && settles {
            open.settling.insert(job_id);
        } else if job.state == JobState::Queued {
            let order = round.job_ids.binary_search(&job_id).unwrap_or(0) as u32;
            open.queue.insert(JobView {
                job_id,
                order,
                pages: job.est_pages,
                failed_here: false,
                barred_somewhere: !job.candidates.is_empty()
                    || job.attempts.iter().any(|a| a.state.ended_without_result()),
                // Those that failed it, and the authors of its results
                // under check (they may not check them).
                barred: {
                    let mut by: Vec<u64> = job
                        .attempts
                        .iter()
                        .filter(|a| a.state.ended_without_result())
                        .map(|a| a.host_id)
                        .chain(job.authors())
                        .collect();
                    by.sort_unstable();
                    by.dedup();
                    by
                },
                size_known: job.size_known,
                // A batch stays with its host unless that host failed the job.
                assigned: job.batch_host.filter(|h| !failed_by(job, *h)),
                under_check: !job.candidates.is_empty(),
                pace_s,
            });
        }
        if job.state == JobState::Running {
            open.running.insert(job_id);
        } else {
            open.running.remove(&job_id);
        }
        // Whether its scan could be handed over (to any host but its own:
        // host ids count from 1, so 0 is nobody's).
        match hand_over_from(job, 0) {
            Some(a) if job.state == JobState::Running => {
                let h = Handable {
                    host_id: a.host_id,
                    unit_id: a.unit_id,
                    pages: job.est_pages,
                };
                open.handable.insert(job_id, h);
            }
            _ => {
                open.handable.remove(&job_id);
            }
        }
        // The hosts running a copy of it.
        for h in open.hosts_of.remove(&job_id).unwrap_or_default() {
            open.running_on.remove(&(h, job_id));
        }
        let holders: Vec<u64> = job.running_attempts().map(|a| a.host_id).collect();
        if !holders.is_empty() {
            for &h in &holders {
                open.running_on.insert((h, job_id));
            }
            open.hosts_of.insert(job_id, holders);
        }
        // An attempt's state may change back (an expired scan's late result
        // is accepted), so this job's failures are counted afresh.
        for h in open.failed_hosts.remove(&job_id).unwrap_or_default() {
            if let Some(jobs) = open.failed_by.get_mut(&h) {
                jobs.remove(&job_id);
                if jobs.is_empty() {
                    open.failed_by.remove(&h);
                }
            }
        }
        if !job.state.is_final() {
            let mut failed: Vec<u64> = Vec::new();
            for a in &job.attempts {
                if a.state.ended_without_result() && !failed.contains(&a.host_id) {
                    open.failed_by.entry(a.host_id).or_default().insert(job_id);
                    failed.push(a.host_id);
                }
            }
            if !failed.is_empty() {
                open.failed_hosts.insert(job_id, failed);
            }
        }
        for author in open.checks.remove(&job_id).unwrap_or_default() {
            if let Some(jobs) = open.checks_by_author.get_mut(&author) {
                jobs.remove(&job_id);
                if jobs.is_empty() {
                    open.checks_by_author.remove(&author);
                }
            }
        }
        if !job.state.is_final() && !job.candidates.is_empty() {
            let authors = job.authors();
            for &author in &authors {
                open.checks_by_author
                    .entry(author)
                    .or_default()
                    .insert(job_id);
            }
            open.checks.insert(job_id, authors);
        }
    }

    /// Build the index of open jobs afresh from the jobs of the running
    /// rounds.
    pub(super) fn rebuild_open(&mut self) {
        self.open.clear();
        let running: Vec<u64> = self
            .rounds
            .values()
            .filter(|r| r.state == RoundState::Running)
            .flat_map(|r| r.job_ids.iter().copied())
            .collect();
        for id in running {
            self.reindex(id);
        }
    }

    /// Debug builds check every map the grid derives from its records
    /// against the records, in this one place: the index of open jobs
    /// (equal to one built afresh, each queue in its own order), the unit
    /// → job map (equal to the jobs' attempts), paces kept only for open
    /// jobs, and resources only for hosts not revoked. (Hosts, jobs and
    /// units are never removed, so maps keyed by them alone hold nothing
    /// a check could find gone.)
    pub(super) fn check_derived(&self) {
        #[cfg(debug_assertions)]
        {
            assert_eq!(self.open, self.open_from_scratch(), "index of open jobs");
            for o in self.open.values() {
                o.queue.check();
            }
            let units: HashMap<u64, u64> = self
                .jobs
                .values()
                .flat_map(|j| j.attempts.iter().map(move |a| (a.unit_id, j.id)))
                .collect();
            assert_eq!(self.units, units, "unit → job");
            let open_job = |id: &u64| {
                self.jobs
                    .get(id)
                    .is_some_and(|j| matches!(j.state, JobState::Queued | JobState::Running))
            };
            if let Some(id) = self.scan_paces.keys().find(|id| !open_job(id)) {
                panic!("a pace kept for job {id}, which is not open");
            }
            let active = |h: &u64| self.hosts.get(h).is_some_and(|r| !r.revoked);
            if let Some(h) = self.resources.keys().find(|h| !active(h)) {
                panic!("resources kept for host {h}, revoked or unknown");
            }
        }
    }

    /// The index of open jobs, built afresh from the jobs.
    #[cfg(debug_assertions)]
    pub(super) fn open_from_scratch(&self) -> HashMap<u64, OpenJobs> {
        let io = super::GridIo {
            links: self.links.clone(),
            signer: self.signer.clone(),
            // Never drawn from: this grid only builds an index.
            rng: Box::new(rand::rngs::OsRng),
        };
        let mut g = Grid::empty(io, self.settings.clone(), [0; 4]);
        g.rounds = self.rounds.clone();
        g.jobs = self.jobs.clone();
        g.sites = self.sites.clone();
        g.hosts = self.hosts.clone();
        g.scan_paces = self.scan_paces.clone();
        g.settling = self.settling.clone();
        let ids: Vec<u64> = g.jobs.keys().copied().collect();
        for id in ids {
            g.reindex(id);
        }
        g.open
    }

    /// Ids of the running jobs of every running round, in id order.
    pub(super) fn running_job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .open
            .values()
            .flat_map(|o| o.running.iter().copied())
            .collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests;
