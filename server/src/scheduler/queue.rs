//! A round's queued jobs, indexed by what the policies order on
//! ([`JobQueue`]): list order, expected size (largest first, ties in list
//! order), sites never scanned, jobs some host failed, and each host's
//! `batch` share. [`Queue`] is one asking host's look at it: the jobs it
//! failed marked, the jobs it may not take now hidden.
//!
//! Invariants: every index holds exactly the jobs of `by_id` (a job is
//! added and removed through [`JobQueue::insert`] and [`JobQueue::remove`]
//! only, each O(log n)); finding the largest job under a size, the first in
//! list order or the first never scanned costs O(log n) plus the hidden or
//! failed jobs passed over, never a walk over the queue. Sums count the
//! whole queue, hidden jobs included: what waits for the grid, not for one
//! host.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::JobView;

/// A job's place in list order: its position, then its id (in a round,
/// job ids grow with the position).
type ListKey = (u32, u64);

/// A job's place in the size index: larger first, then list order.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SizeKey {
    pages: f64,
    at: ListKey,
}

impl Eq for SizeKey {}

impl Ord for SizeKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .pages
            .total_cmp(&self.pages)
            .then(self.at.cmp(&other.at))
    }
}

impl PartialOrd for SizeKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl SizeKey {
    fn of(v: &JobView) -> SizeKey {
        SizeKey {
            pages: v.pages,
            at: list_key(v),
        }
    }
    /// The first key of a job of at most `pages` pages.
    fn at_most(pages: f64) -> SizeKey {
        SizeKey { pages, at: (0, 0) }
    }
    fn job_id(&self) -> u64 {
        self.at.1
    }
}

fn list_key(v: &JobView) -> ListKey {
    (v.order, v.job_id)
}

/// Pages are summed in millionths, so that adding and removing jobs in
/// any order gives the same total as summing afresh.
const PAGE_UNITS: f64 = 1e6;

fn page_units(pages: f64) -> u128 {
    (pages.max(0.0) * PAGE_UNITS).round() as u128
}

/// A round's queued jobs, indexed (see the module's doc).
#[derive(Clone, Debug, Default)]
pub struct JobQueue {
    /// Every queued job, by id.
    by_id: HashMap<u64, JobView>,
    /// Every queued job, in list order.
    list: BTreeSet<ListKey>,
    /// Every queued job by size.
    by_size: BTreeSet<SizeKey>,
    /// Jobs whose size comes from a last scan, by size.
    known: BTreeSet<SizeKey>,
    /// Jobs of sites never scanned, in list order.
    unknown: BTreeSet<ListKey>,
    /// Jobs some host failed, in list order.
    failed_somewhere: BTreeSet<ListKey>,
    /// Jobs whose view says the asker failed them (views built by hand;
    /// the grid marks failures per asker instead), in list order.
    flagged_failed: BTreeSet<ListKey>,
    /// `batch`: each host's share, by size.
    assigned: BTreeMap<u64, BTreeSet<SizeKey>>,
    /// Jobs in no host's share, by size.
    unassigned: BTreeSet<SizeKey>,
    /// Σ pages in millionths.
    page_units: u128,
}

impl PartialEq for JobQueue {
    /// Two queues are equal when they hold the same jobs: every index
    /// follows from `by_id` (checked by [`JobQueue::check`]).
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

impl JobQueue {
    /// A queue of `views` (any order).
    pub fn from_views(views: &[JobView]) -> JobQueue {
        let mut q = JobQueue::default();
        for v in views {
            q.insert(v.clone());
        }
        q
    }

    /// Queue `v` (replacing a job of the same id).
    pub fn insert(&mut self, v: JobView) {
        self.remove(v.job_id);
        let key = SizeKey::of(&v);
        let at = key.at;
        self.list.insert(at);
        self.by_size.insert(key);
        if v.size_known {
            self.known.insert(key);
        } else {
            self.unknown.insert(at);
        }
        if v.failed_somewhere {
            self.failed_somewhere.insert(at);
        }
        if v.failed_here {
            self.flagged_failed.insert(at);
        }
        match v.assigned {
            Some(h) => {
                self.assigned.entry(h).or_default().insert(key);
            }
            None => {
                self.unassigned.insert(key);
            }
        }
        self.page_units += page_units(v.pages);
        self.by_id.insert(v.job_id, v);
    }

    /// Take job `job_id` out of the queue; its view, if it was queued.
    pub fn remove(&mut self, job_id: u64) -> Option<JobView> {
        let v = self.by_id.remove(&job_id)?;
        let key = SizeKey::of(&v);
        let at = key.at;
        self.list.remove(&at);
        self.by_size.remove(&key);
        self.known.remove(&key);
        self.unknown.remove(&at);
        self.failed_somewhere.remove(&at);
        self.flagged_failed.remove(&at);
        match v.assigned {
            Some(h) => {
                if let Some(share) = self.assigned.get_mut(&h) {
                    share.remove(&key);
                    if share.is_empty() {
                        self.assigned.remove(&h);
                    }
                }
            }
            None => {
                self.unassigned.remove(&key);
            }
        }
        self.page_units -= page_units(v.pages);
        Some(v)
    }

    /// The view of a queued job.
    pub fn get(&self, job_id: u64) -> Option<&JobView> {
        self.by_id.get(&job_id)
    }

    /// Queued jobs in list order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &JobView> + '_ {
        self.list.iter().filter_map(|(_, id)| self.by_id.get(id))
    }

    fn at(&self, at: &ListKey) -> Option<&JobView> {
        self.by_id.get(&at.1)
    }

    /// Jobs queued.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Expected pages of every queued job.
    pub fn total_pages(&self) -> f64 {
        self.page_units as f64 / PAGE_UNITS
    }

    /// Panics unless every index holds exactly the jobs of `by_id`.
    pub fn check(&self) {
        let fresh = JobQueue::from_views(&self.by_id.values().cloned().collect::<Vec<_>>());
        assert_eq!(self.list, fresh.list, "list order");
        assert_eq!(self.by_size, fresh.by_size, "size index");
        assert_eq!(self.known, fresh.known, "known sizes");
        assert_eq!(self.unknown, fresh.unknown, "never scanned");
        assert_eq!(
            self.failed_somewhere, fresh.failed_somewhere,
            "failed somewhere"
        );
        assert_eq!(self.flagged_failed, fresh.flagged_failed, "flagged");
        assert_eq!(self.assigned, fresh.assigned, "shares");
        assert_eq!(self.unassigned, fresh.unassigned, "unassigned");
        assert_eq!(self.page_units, fresh.page_units, "pages");
    }
}

/// One asking host's look at a round's queue: the jobs it failed marked
/// (`failed_here`), the jobs it may not take now hidden (their sites
/// share a host with a running scan, they are results it may not check,
/// or their deadline does not fit its windows). Policies see only the
/// jobs not hidden; [`Queue::len`] and [`Queue::total_pages`] count them all.
#[derive(Clone, Copy)]
pub struct Queue<'a> {
    jobs: &'a JobQueue,
    /// Jobs the asker failed (besides those whose view says so).
    failed: Option<&'a BTreeSet<u64>>,
    /// Whether the asker may not take a job now.
    hidden: Option<&'a dyn Fn(&JobView) -> bool>,
}

impl std::fmt::Debug for Queue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("jobs", &self.jobs.len())
            .field("failed", &self.failed.map_or(0, BTreeSet::len))
            .finish()
    }
}

impl<'a> Queue<'a> {
    /// Every job of `jobs`, none hidden.
    pub fn all(jobs: &'a JobQueue) -> Queue<'a> {
        Queue {
            jobs,
            failed: None,
            hidden: None,
        }
    }

    /// `jobs` as an asker sees them: `failed` it failed, `hidden` it may
    /// not take now.
    pub fn for_asker(
        jobs: &'a JobQueue,
        failed: Option<&'a BTreeSet<u64>>,
        hidden: &'a dyn Fn(&JobView) -> bool,
    ) -> Queue<'a> {
        Queue {
            jobs,
            failed,
            hidden: Some(hidden),
        }
    }

    fn visible(&self, v: &JobView) -> bool {
        !self.hidden.is_some_and(|h| h(v))
    }

    fn failed_here(&self, v: &JobView) -> bool {
        v.failed_here || self.failed.is_some_and(|f| f.contains(&v.job_id))
    }

    /// The view as the asker sees it (`failed_here` set), if visible.
    fn seen(&self, v: &JobView) -> Option<JobView> {
        self.visible(v).then(|| JobView {
            failed_here: self.failed_here(v),
            ..v.clone()
        })
    }

    fn by_key(&self, k: &SizeKey) -> Option<JobView> {
        self.jobs.by_id.get(&k.job_id()).and_then(|v| self.seen(v))
    }

    /// Jobs queued, hidden ones included.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Expected pages of every queued job, hidden ones included.
    pub fn total_pages(&self) -> f64 {
        self.jobs.total_pages()
    }

    /// Whether no job is visible.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The visible jobs in list order.
    pub fn iter(&self) -> impl Iterator<Item = JobView> + '_ {
        self.jobs.iter().filter_map(|v| self.seen(v))
    }

    /// The visible jobs the asker failed, in list order.
    pub(super) fn failed_jobs(&self) -> impl Iterator<Item = JobView> + '_ {
        let flagged = self.jobs.flagged_failed.iter().copied();
        let overlay = self.failed.into_iter().flatten();
        let overlay = overlay.filter_map(|id| self.jobs.by_id.get(id).map(list_key));
        let at: BTreeSet<ListKey> = flagged.chain(overlay).collect();
        at.into_iter()
            .filter_map(|at| self.jobs.at(&at))
            .filter_map(|v| self.seen(v))
    }

    /// The first visible job in list order.
    pub fn first(&self) -> Option<JobView> {
        self.iter().next()
    }

    /// Pages of the largest visible job (0 when none).
    pub fn largest_pages(&self) -> f64 {
        self.jobs
            .by_size
            .iter()
            .find_map(|k| self.by_key(k))
            .map_or(0.0, |v| v.pages)
    }

    /// The largest visible job of at most `most` pages not in `taken`
    /// (ties: list order), one the asker has not failed before one it has.
    pub fn largest(&self, taken: &[u64], most: f64) -> Option<JobView> {
        self.largest_of(&self.jobs.by_size, taken, most)
    }

    /// [`Queue::largest`] among the jobs of `set`.
    fn largest_of(&self, set: &BTreeSet<SizeKey>, taken: &[u64], most: f64) -> Option<JobView> {
        let fine = |v: &JobView| !taken.contains(&v.job_id);
        let mine = set
            .range(SizeKey::at_most(most)..)
            .filter_map(|k| self.by_key(k))
            .find(|v| !v.failed_here && fine(v));
        mine.or_else(|| {
            self.failed_jobs()
                .filter(|v| v.pages <= most && set.contains(&SizeKey::of(v)) && fine(v))
                .min_by_key(SizeKey::of)
        })
    }

    /// The largest visible job the asker failed, not in `taken` (ties:
    /// list order).
    pub fn largest_failed(&self, taken: &[u64]) -> Option<JobView> {
        self.failed_jobs()
            .filter(|v| !taken.contains(&v.job_id))
            .min_by_key(SizeKey::of)
    }

    /// The largest visible job whose site has been scanned, of `lo` to
    /// `hi` pages, not failed by the asker and not in `taken` (ties: list
    /// order).
    pub fn largest_known_between(&self, lo: f64, hi: f64, taken: &[u64]) -> Option<JobView> {
        self.jobs
            .known
            .range(SizeKey::at_most(hi)..)
            .take_while(|k| k.pages >= lo)
            .filter_map(|k| self.by_key(k))
            .find(|v| !v.failed_here && !taken.contains(&v.job_id))
    }

    /// The first visible job of a site never scanned, in list order, not
    /// failed by the asker and not in `taken`.
    pub fn first_unknown(&self, taken: &[u64]) -> Option<JobView> {
        self.jobs
            .unknown
            .iter()
            .filter_map(|at| self.jobs.at(at))
            .filter_map(|v| self.seen(v))
            .find(|v| !v.failed_here && !taken.contains(&v.job_id))
    }

    /// The visible jobs some host failed, in list order.
    pub fn failed_somewhere(&self) -> impl Iterator<Item = JobView> + '_ {
        self.jobs
            .failed_somewhere
            .iter()
            .filter_map(|at| self.jobs.at(at))
            .filter_map(|v| self.seen(v))
    }

    /// The smallest visible job not in `taken` (ties: list order), one the
    /// asker has not failed before one it has.
    pub fn smallest(&self, taken: &[u64]) -> Option<JobView> {
        let fine = |v: &JobView| !taken.contains(&v.job_id);
        let found = self
            .jobs
            .by_size
            .iter()
            .rev()
            .filter_map(|k| self.by_key(k))
            .find(|v| !v.failed_here && fine(v));
        // Of that size, the first in list order.
        let mine = found.map(|f| {
            self.jobs
                .by_size
                .range(SizeKey::at_most(f.pages)..)
                .take_while(|k| k.pages == f.pages)
                .filter_map(|k| self.by_key(k))
                .find(|v| !v.failed_here && fine(v))
                .unwrap_or(f)
        });
        mine.or_else(|| {
            self.failed_jobs().filter(|v| fine(v)).min_by(|a, b| {
                a.pages
                    .total_cmp(&b.pages)
                    .then(list_key(a).cmp(&list_key(b)))
            })
        })
    }

    /// `batch`: the largest visible job of `host`'s share (see
    /// [`Queue::largest`]).
    pub fn largest_assigned(&self, host: u64, taken: &[u64]) -> Option<JobView> {
        let share = self.jobs.assigned.get(&host)?;
        self.largest_of(share, taken, f64::INFINITY)
    }

    /// `batch`: the largest visible job in no share, or in the share of a
    /// host `open` accepts (one pass over the shares' largest jobs).
    pub fn largest_released(&self, taken: &[u64], open: impl Fn(u64) -> bool) -> Option<JobView> {
        let mut best = self.largest_of(&self.jobs.unassigned, taken, f64::INFINITY);
        for (host, share) in &self.jobs.assigned {
            if !open(*host) {
                continue;
            }
            let Some(v) = self.largest_of(share, taken, f64::INFINITY) else {
                continue;
            };
            let better = best
                .as_ref()
                .is_none_or(|b| (b.failed_here, SizeKey::of(b)) > (v.failed_here, SizeKey::of(&v)));
            if better {
                best = Some(v);
            }
        }
        best
    }
}
