//! A round's queued jobs, indexed by what the policies order on
//! ([`JobQueue`]): list order, expected size (largest first, ties in list
//! order), sites never scanned, jobs some host may not take, and each host's
//! `batch` share, in two parts indexed alike: jobs waiting for a scan and
//! results under check (waiting for a host that may check them). [`Queue`]
//! is one asking host's look at it: the jobs it failed marked, the jobs it
//! may not take now hidden, and of the results under check all, none or
//! only some ([`Checks`]).
//!
//! Invariants: every index holds exactly the jobs of its part's `by_id`
//! (a job is added and removed through [`JobQueue::insert`] and
//! [`JobQueue::remove`] only, each O(log n)); finding the largest job under
//! a size, the first in list order or the first never scanned costs O(log
//! n) plus the hidden or failed jobs passed over, never a walk over the
//! queue; an asker that may check no result never looks at the results
//! under check. Sums count the whole queue, hidden jobs included: what
//! waits for the grid, not for one host.

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

/// One part of a round's queue, indexed (see the module's doc).
#[derive(Clone, Debug, Default)]
struct Part {
    /// Every job of the part, by id.
    by_id: HashMap<u64, JobView>,
    /// Every job in list order.
    list: BTreeSet<ListKey>,
    /// Every job by size.
    by_size: BTreeSet<SizeKey>,
    /// Jobs whose size comes from a last scan, by their site's pace class
    /// ([`super::pace_class`]), then by size (no empty class kept).
    known: BTreeMap<u8, BTreeSet<SizeKey>>,
    /// Jobs of sites never scanned, in list order.
    unknown: BTreeSet<ListKey>,
    /// Jobs some host may not take (`barred_somewhere`), in list order.
    barred_somewhere: BTreeSet<ListKey>,
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

impl Part {
    fn insert(&mut self, v: JobView) {
        let key = SizeKey::of(&v);
        let at = key.at;
        self.list.insert(at);
        self.by_size.insert(key);
        if v.size_known {
            self.known
                .entry(super::pace_class(v.pace_s))
                .or_default()
                .insert(key);
        } else {
            self.unknown.insert(at);
        }
        if v.barred_somewhere {
            self.barred_somewhere.insert(at);
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

    fn remove(&mut self, job_id: u64) -> Option<JobView> {
        let v = self.by_id.remove(&job_id)?;
        let key = SizeKey::of(&v);
        let at = key.at;
        self.list.remove(&at);
        self.by_size.remove(&key);
        let class = super::pace_class(v.pace_s);
        if let Some(set) = self.known.get_mut(&class) {
            set.remove(&key);
            if set.is_empty() {
                self.known.remove(&class);
            }
        }
        self.unknown.remove(&at);
        self.barred_somewhere.remove(&at);
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

    fn at(&self, at: &ListKey) -> Option<&JobView> {
        self.by_id.get(&at.1)
    }

    fn iter(&self) -> impl Iterator<Item = &JobView> + '_ {
        self.list.iter().filter_map(|at| self.at(at))
    }

    /// Panics unless every index holds exactly the jobs of `by_id`.
    fn check(&self, name: &str) {
        let mut fresh = Part::default();
        for v in self.by_id.values() {
            fresh.insert(v.clone());
        }
        assert_eq!(self.list, fresh.list, "{name}: list order");
        assert_eq!(self.by_size, fresh.by_size, "{name}: size index");
        assert_eq!(self.known, fresh.known, "{name}: known sizes");
        assert_eq!(self.unknown, fresh.unknown, "{name}: never scanned");
        assert_eq!(
            self.barred_somewhere, fresh.barred_somewhere,
            "{name}: barred somewhere"
        );
        assert_eq!(self.flagged_failed, fresh.flagged_failed, "{name}: flagged");
        assert_eq!(self.assigned, fresh.assigned, "{name}: shares");
        assert_eq!(self.unassigned, fresh.unassigned, "{name}: unassigned");
        assert_eq!(self.page_units, fresh.page_units, "{name}: pages");
    }
}

/// A round's queued jobs in two parts indexed alike: jobs that wait for a
/// scan, and results under check (`under_check`) that wait for a host
/// that may check them. An asker that may check none never looks at the
/// second part, however many results wait there (see the module's doc).
#[derive(Clone, Debug, Default)]
pub struct JobQueue {
    /// Jobs not under check.
    fresh: Part,
    /// Results under check.
    checks: Part,
}

impl PartialEq for JobQueue {
    /// Two queues are equal when they hold the same jobs: every index
    /// follows from the jobs (checked by [`JobQueue::check`]).
    fn eq(&self, other: &Self) -> bool {
        self.fresh.by_id == other.fresh.by_id && self.checks.by_id == other.checks.by_id
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

    /// Queue `v` (replacing a job of the same id), in the part its
    /// `under_check` says.
    pub fn insert(&mut self, v: JobView) {
        self.remove(v.job_id);
        if v.under_check {
            self.checks.insert(v);
        } else {
            self.fresh.insert(v);
        }
    }

    /// Take job `job_id` out of the queue; its view, if it was queued.
    pub fn remove(&mut self, job_id: u64) -> Option<JobView> {
        self.fresh
            .remove(job_id)
            .or_else(|| self.checks.remove(job_id))
    }

    /// The view of a queued job.
    pub fn get(&self, job_id: u64) -> Option<&JobView> {
        self.fresh
            .by_id
            .get(&job_id)
            .or_else(|| self.checks.by_id.get(&job_id))
    }

    /// Queued jobs in list order.
    pub fn iter(&self) -> impl Iterator<Item = &JobView> + '_ {
        Merge::new(self.fresh.iter(), self.checks.iter(), |v: &&JobView| {
            list_key(v)
        })
    }

    /// Jobs queued.
    pub fn len(&self) -> usize {
        self.fresh.by_id.len() + self.checks.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Results under check queued.
    pub fn checks_len(&self) -> usize {
        self.checks.by_id.len()
    }

    /// Expected pages of every queued job.
    pub fn total_pages(&self) -> f64 {
        (self.fresh.page_units + self.checks.page_units) as f64 / PAGE_UNITS
    }

    /// A queue of the results under check among `ids` (for an asker that
    /// may check only those: [`Checks::Only`]). O(ids × log ids).
    pub fn checks_among(&self, ids: impl IntoIterator<Item = u64>) -> JobQueue {
        let mut q = JobQueue::default();
        for id in ids {
            if let Some(v) = self.checks.by_id.get(&id) {
                q.checks.insert(v.clone());
            }
        }
        q
    }

    /// Panics unless every index holds exactly the jobs of its part, and
    /// each part holds the jobs its `under_check` says.
    pub fn check(&self) {
        self.fresh.check("waiting for a scan");
        self.checks.check("under check");
        assert!(self.fresh.by_id.values().all(|v| !v.under_check));
        assert!(self.checks.by_id.values().all(|v| v.under_check));
        assert!(self
            .fresh
            .by_id
            .keys()
            .all(|id| !self.checks.by_id.contains_key(id)));
    }
}

/// Two iterators sorted by `key`, merged.
struct Merge<A: Iterator, B: Iterator, F> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
    key: F,
}

impl<A: Iterator, B: Iterator<Item = A::Item>, F> Merge<A, B, F> {
    fn new(a: A, b: B, key: F) -> Self {
        Merge {
            a: a.peekable(),
            b: b.peekable(),
            key,
        }
    }
}

impl<T, K: Ord, A, B, F> Iterator for Merge<A, B, F>
where
    A: Iterator<Item = T>,
    B: Iterator<Item = T>,
    F: Fn(&T) -> K,
{
    type Item = T;
    fn next(&mut self) -> Option<T> {
        let a_first = match (self.a.peek(), self.b.peek()) {
            (Some(x), Some(y)) => (self.key)(x) <= (self.key)(y),
            (Some(_), None) => true,
            (None, _) => false,
        };
        if a_first {
            self.a.next()
        } else {
            self.b.next()
        }
    }
}

/// Which results under check an asker may see.
#[derive(Clone, Copy, Debug)]
pub enum Checks<'a> {
    /// Every one (its `hidden` still says which not).
    All,
    /// None: the part under check is never looked at.
    None,
    /// Only those of this queue ([`JobQueue::checks_among`]).
    Only(&'a JobQueue),
}

/// One asking host's look at a round's queue: the jobs it failed marked
/// (`failed_here`), the jobs it may not take now hidden (their sites
/// share a host with a running scan, they are results it may not check,
/// or their deadline does not fit its windows). Policies see only the
/// jobs not hidden; [`Queue::len`] and [`Queue::total_pages`] count them all.
#[derive(Clone, Copy)]
pub struct Queue<'a> {
    jobs: &'a JobQueue,
    /// The results under check it may see.
    checks: Option<&'a Part>,
    /// Jobs the asker failed (besides those whose view says so).
    failed: Option<&'a BTreeSet<u64>>,
    /// Whether the asker may not take a job now.
    hidden: Option<&'a dyn Fn(&JobView) -> bool>,
}

impl std::fmt::Debug for Queue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("jobs", &self.jobs.len())
            .field("checks", &self.checks.map_or(0, |p| p.by_id.len()))
            .field("failed", &self.failed.map_or(0, BTreeSet::len))
            .finish()
    }
}

impl<'a> Queue<'a> {
    /// Every job of `jobs`, none hidden.
    pub fn all(jobs: &'a JobQueue) -> Queue<'a> {
        Queue {
            jobs,
            checks: Some(&jobs.checks),
            failed: None,
            hidden: None,
        }
    }

    /// `jobs` as an asker sees them: `failed` it failed, `hidden` it may
    /// not take now, `checks` the results under check it may see.
    pub fn for_asker(
        jobs: &'a JobQueue,
        failed: Option<&'a BTreeSet<u64>>,
        hidden: &'a dyn Fn(&JobView) -> bool,
        checks: Checks<'a>,
    ) -> Queue<'a> {
        let checks = match checks {
            Checks::All => Some(&jobs.checks),
            Checks::None => None,
            Checks::Only(q) => Some(&q.checks),
        };
        Queue {
            jobs,
            checks,
            failed,
            hidden: Some(hidden),
        }
    }

    /// The parts the asker looks at.
    fn parts(&self) -> impl Iterator<Item = &'a Part> + 'a {
        std::iter::once(&self.jobs.fresh).chain(self.checks)
    }

    fn get(&self, id: &u64) -> Option<&'a JobView> {
        self.jobs
            .fresh
            .by_id
            .get(id)
            .or_else(|| self.checks.and_then(|p| p.by_id.get(id)))
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

    fn by_key(&self, part: &Part, k: &SizeKey) -> Option<JobView> {
        part.by_id.get(&k.job_id()).and_then(|v| self.seen(v))
    }

    /// Jobs queued, hidden ones included.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Expected pages of every queued job, hidden ones included.
    pub fn total_pages(&self) -> f64 {
        self.jobs.total_pages()
    }

    /// Whether no job is visible. Looks at the jobs waiting for a scan
    /// before the results under check, each part in list order, without
    /// copying any (no merge of the two parts: the order does not matter).
    pub fn is_empty(&self) -> bool {
        !self.parts().any(|p| p.iter().any(|v| self.visible(v)))
    }

    /// The visible jobs in list order.
    pub fn iter(&self) -> impl Iterator<Item = JobView> + '_ {
        let checks = self.checks.into_iter().flat_map(Part::iter);
        Merge::new(self.jobs.fresh.iter(), checks, |v: &&JobView| list_key(v))
            .filter_map(|v| self.seen(v))
    }

    /// The visible jobs the asker failed, in list order.
    pub(super) fn failed_jobs(&self) -> impl Iterator<Item = JobView> + '_ {
        let flagged = self.parts().flat_map(|p| p.flagged_failed.iter().copied());
        let overlay = self.failed.into_iter().flatten();
        let overlay = overlay.filter_map(|id| self.get(id).map(list_key));
        let at: BTreeSet<ListKey> = flagged.chain(overlay).collect();
        at.into_iter()
            .filter_map(|at| self.get(&at.1))
            .filter_map(|v| self.seen(v))
    }

    /// The first visible job in list order.
    pub fn first(&self) -> Option<JobView> {
        self.iter().next()
    }

    /// Pages of the largest visible job (0 when none).
    pub fn largest_pages(&self) -> f64 {
        self.parts()
            .filter_map(|p| {
                p.by_size
                    .iter()
                    .filter_map(|k| p.by_id.get(&k.job_id()))
                    .find(|v| self.visible(v))
            })
            .map(|v| v.pages)
            .fold(0.0, f64::max)
    }

    /// The largest visible job of at most `most` pages not in `taken`
    /// (ties: list order), one the asker has not failed before one it has.
    pub fn largest(&self, taken: &[u64], most: f64) -> Option<JobView> {
        let sets: Vec<(&Part, &BTreeSet<SizeKey>)> =
            self.parts().map(|p| (p, &p.by_size)).collect();
        self.largest_of(&sets, taken, most)
    }

    /// [`Queue::largest`] among the jobs of `sets` (each a set of a part).
    fn largest_of(
        &self,
        sets: &[(&Part, &BTreeSet<SizeKey>)],
        taken: &[u64],
        most: f64,
    ) -> Option<JobView> {
        let fine = |v: &JobView| !taken.contains(&v.job_id);
        let mine = sets
            .iter()
            .filter_map(|(part, set)| {
                set.range(SizeKey::at_most(most)..)
                    .filter_map(|k| self.by_key(part, k))
                    .find(|v| !v.failed_here && fine(v))
            })
            .min_by_key(SizeKey::of);
        mine.or_else(|| {
            self.failed_jobs()
                .filter(|v| {
                    v.pages <= most
                        && fine(v)
                        && sets.iter().any(|(_, s)| s.contains(&SizeKey::of(v)))
                })
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

    /// The pace classes ([`super::pace_class`]) of the jobs whose site
    /// has been scanned in the parts the asker looks at (hidden jobs
    /// included), each once, in order.
    pub fn known_classes(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.parts().flat_map(|p| p.known.keys().copied()).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The largest visible job of pace class `class` whose site has been
    /// scanned, of `lo` to `hi` pages, not failed by the asker and not in
    /// `taken` (ties: list order).
    pub fn largest_known_between(
        &self,
        class: u8,
        (lo, hi): (f64, f64),
        taken: &[u64],
    ) -> Option<JobView> {
        self.parts()
            .filter_map(|p| {
                p.known
                    .get(&class)?
                    .range(SizeKey::at_most(hi)..)
                    .take_while(|k| k.pages >= lo)
                    .filter_map(|k| self.by_key(p, k))
                    .find(|v| !v.failed_here && !taken.contains(&v.job_id))
            })
            .min_by_key(SizeKey::of)
    }

    /// The first visible job of a site never scanned, in list order, not
    /// failed by the asker and not in `taken`.
    pub fn first_unknown(&self, taken: &[u64]) -> Option<JobView> {
        self.parts()
            .filter_map(|p| {
                p.unknown
                    .iter()
                    .filter_map(|at| p.at(at))
                    .filter_map(|v| self.seen(v))
                    .find(|v| !v.failed_here && !taken.contains(&v.job_id))
            })
            .min_by_key(list_key)
    }

    /// The visible jobs some host may not take (`barred_somewhere`), in
    /// list order.
    pub fn barred_somewhere<'s>(&'s self) -> impl Iterator<Item = JobView> + 's {
        let fresh: &'s Part = &self.jobs.fresh;
        let checks: Option<&'s Part> = self.checks;
        let of = |p: &'s Part| p.barred_somewhere.iter().filter_map(move |at| p.at(at));
        let rest = checks.into_iter().flat_map(of);
        Merge::new(of(fresh), rest, |v: &&JobView| list_key(v)).filter_map(|v| self.seen(v))
    }

    /// The smallest visible job not in `taken` (ties: list order), one the
    /// asker has not failed before one it has.
    pub fn smallest(&self, taken: &[u64]) -> Option<JobView> {
        let fine = |v: &JobView| !taken.contains(&v.job_id);
        let smallest_in = |p: &Part| {
            let found = p
                .by_size
                .iter()
                .rev()
                .filter_map(|k| self.by_key(p, k))
                .find(|v| !v.failed_here && fine(v))?;
            // Of that size, the first in list order.
            let first = p
                .by_size
                .range(SizeKey::at_most(found.pages)..)
                .take_while(|k| k.pages == found.pages)
                .filter_map(|k| self.by_key(p, k))
                .find(|v| !v.failed_here && fine(v));
            Some(first.unwrap_or(found))
        };
        let by_size = |a: &JobView, b: &JobView| {
            a.pages
                .total_cmp(&b.pages)
                .then(list_key(a).cmp(&list_key(b)))
        };
        let mine = self.parts().filter_map(smallest_in).min_by(by_size);
        mine.or_else(|| self.failed_jobs().filter(|v| fine(v)).min_by(by_size))
    }

    /// `batch`: the largest visible job of `host`'s share (see
    /// [`Queue::largest`]).
    pub fn largest_assigned(&self, host: u64, taken: &[u64]) -> Option<JobView> {
        let sets: Vec<(&Part, &BTreeSet<SizeKey>)> = self
            .parts()
            .filter_map(|p| p.assigned.get(&host).map(|s| (p, s)))
            .collect();
        if sets.is_empty() {
            return None;
        }
        self.largest_of(&sets, taken, f64::INFINITY)
    }

    /// `batch`: the largest visible job in no share, or in the share of a
    /// host `open` accepts (one pass over the shares' largest jobs).
    pub fn largest_released(&self, taken: &[u64], open: impl Fn(u64) -> bool) -> Option<JobView> {
        let unassigned: Vec<(&Part, &BTreeSet<SizeKey>)> =
            self.parts().map(|p| (p, &p.unassigned)).collect();
        let mut best = self.largest_of(&unassigned, taken, f64::INFINITY);
        for part in self.parts() {
            for (host, share) in &part.assigned {
                if !open(*host) {
                    continue;
                }
                let Some(v) = self.largest_of(&[(part, share)], taken, f64::INFINITY) else {
                    continue;
                };
                let better = best.as_ref().is_none_or(|b| {
                    (b.failed_here, SizeKey::of(b)) > (v.failed_here, SizeKey::of(&v))
                });
                if better {
                    best = Some(v);
                }
            }
        }
        best
    }
}
