//! The scheduler's view of the hosts ([`HostView`]), kept between work
//! requests ([`HostViews`]): a request refreshes only the hosts that
//! changed since (and the asker), and a share of the others, oldest first
//! (`hosts × elapsed / VIEW_REFRESH_MS` of them, so every view is built
//! again once a [`VIEW_REFRESH_MS`] paid a few a request), instead of
//! building 2,000 views per request or all of them at once every second.
//!
//! Invariants: a host whose units or record changed is marked stale
//! ([`Grid::host_changed`], called by `reindex` for every host of a
//! changed job and by `active_host`) and refreshed before its view is
//! read; any other view is at most [`VIEW_REFRESH_MS`] old when read, so a
//! change no mark names is seen within that. Views are memory only and
//! never change a record.
//!
//! `HostViews` also keeps the units whose scan could be handed over, by
//! expected end (`by_end`: latest end, then larger job, then lower id: the
//! order `adaptive` reads running jobs in). Debug builds check each kept view
//! against a fresh one built at the same moment, every view's age, and, at
//! every request of a replicating policy, that `by_end` gives the round's
//! handable jobs in the order a walk finds them.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::model::*;
use crate::scheduler::{self, Capacity, Demand, HeldUnit, HostView};

use super::Grid;

/// A host's slots as learned: its benchmark's (bounded when stored), else
/// the default.
pub(super) fn host_slots(h: &HostRecord) -> u32 {
    h.benchmark
        .as_ref()
        .map(|b| b.slots)
        .filter(|s| *s > 0)
        .unwrap_or(scheduler::DEFAULT_HOST_SLOTS)
}

/// Longest a host's view may be reused before it is built again although
/// no change was marked: views are read in seconds from now (the next
/// free slot, whether the host is online), and a second is far below the
/// error of any estimate a policy compares.
pub const VIEW_REFRESH_MS: u64 = 1_000;

/// One host's view, the expected end (seconds from when it was made) of
/// each unit it runs whose scan could be handed over (as a key of
/// [`HostViews::by_end`]), and its units laid on its slots (in issue order).
struct OneHost {
    view: HostView,
    trusted: bool,
    ends: Vec<EndKey>,
    held: Vec<HeldUnit>,
}

/// A running unit in the order running jobs are read in, latest end first
/// when read backwards: `(end_key(end), end_key(pages), !job id, unit id,
/// end_key(pace))` (ties: the larger job, then the lower id; see
/// [`crate::scheduler::RunningView::latest_first`]; the unit id is unique,
/// so the site's pace never orders).
pub(super) type EndKey = (u64, u64, u64, u64, u64);

/// A running unit of a host as its view is built.
struct RunningUnit {
    /// Scanning ones first (their slots are taken), then in issue order:
    /// (not scanning, issued, unit id).
    key: (bool, u64, u64),
    held: HeldUnit,
    demand: Demand,
    /// Its job, pages and the site's pace when a copy of it could be made
    /// (its scan could be handed over), for the index by end.
    handable: Option<(u64, f64, f64)>,
}

/// The key of `unit` of job `job_id` (`pages` expected, on a site of
/// `pace` seconds a page of its own) ending at `end`.
fn end_of_unit(unit: u64, job_id: u64, pages: f64, end: f64, pace: f64) -> EndKey {
    (end_key(end), end_key(pages), !job_id, unit, end_key(pace))
}

/// The hosts' views kept between requests (see the module's doc).
#[derive(Default)]
pub(super) struct HostViews {
    /// When every view was last built at once (`None`: never).
    pub(super) built_ms: Option<u64>,
    /// When each host's view was built, by host id.
    pub(super) built: HashMap<u64, u64>,
    /// The request the views were last brought up to.
    last_ms: u64,
    /// Host-milliseconds of rebuilding owed but not yet a whole view.
    credit: u128,
    /// Every build `(when, host)` in the order made: the oldest view is the
    /// first whose host's `built` still names it (the others are skipped).
    order: VecDeque<(u64, u64)>,
    /// Active hosts' views, sorted by host id.
    pub(super) views: Vec<HostView>,
    /// Every running unit whose scan could be handed over (the only ones a
    /// policy may copy), ordered by expected end (see [`EndKey`]): they are
    /// read latest end first without a walk over them all.
    pub(super) by_end: BTreeSet<EndKey>,
    /// Each host's units laid on its slots.
    pub(super) held: HashMap<u64, Vec<HeldUnit>>,
    /// Each host's units in `by_end`.
    units_of: HashMap<u64, Vec<EndKey>>,
    /// Trusted hosts online.
    pub(super) trusted_online: BTreeSet<u64>,
}

/// `end` as a key whose order is [`f64::total_cmp`]'s.
pub(super) fn end_key(end: f64) -> u64 {
    let bits = end.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The end [`end_key`] was made of.
pub(super) fn end_of(key: u64) -> f64 {
    f64::from_bits(if key >> 63 == 1 {
        key & !(1 << 63)
    } else {
        !key
    })
}

impl HostViews {
    /// Put `one`, built at `now_ms`, in for `host_id` (`None`: the host is
    /// gone or revoked).
    fn set(&mut self, host_id: u64, one: Option<OneHost>, now_ms: u64) {
        for key in self.units_of.remove(&host_id).unwrap_or_default() {
            self.by_end.remove(&key);
        }
        self.held.remove(&host_id);
        self.trusted_online.remove(&host_id);
        let at = self.views.binary_search_by_key(&host_id, |v| v.host_id);
        let Some(one) = one else {
            self.built.remove(&host_id);
            if let Ok(i) = at {
                self.views.remove(i);
            }
            return;
        };
        self.built.insert(host_id, now_ms);
        self.order.push_back((now_ms, host_id));
        self.by_end.extend(one.ends.iter().copied());
        self.units_of.insert(host_id, one.ends);
        self.held.insert(host_id, one.held);
        if one.trusted && one.view.online {
            self.trusted_online.insert(host_id);
        }
        match at {
            Ok(i) => self.views[i] = one.view,
            Err(i) => self.views.insert(i, one.view),
        }
    }
}

/// The mean response time of the site of a running scan, as the pace
/// between its first and latest progress reports shows under the delay
/// and its host's own time (`own_s` a page) (0: no pace yet).
fn scan_pace_s(a: &Attempt, delay_s: f64, own_s: f64) -> f64 {
    let (t0, p0, t1, p1) = (
        a.first_report_ms,
        a.first_report_pages,
        a.last_report_ms,
        a.pages,
    );
    if t0 == 0 || t1 <= t0 || p1 <= p0 {
        return 0.0;
    }
    let page_s = (t1 - t0) as f64 / 1000.0 / (p1 - p0) as f64;
    scheduler::site_pace_s(page_s, delay_s, own_s)
}

impl Grid {
    /// Note that a host's units or record changed: its view is built again
    /// before it is read.
    pub(super) fn host_changed(&mut self, host_id: u64) {
        self.stale_views.insert(host_id);
    }

    /// One host's view at `now_ms`, from its running units in the running
    /// rounds; `None` for a revoked host.
    fn one_host(&self, h: &HostRecord, now_ms: u64) -> Option<OneHost> {
        if h.revoked {
            return None;
        }
        // Its running units, scanning ones first (their slots are taken),
        // then in issue order.
        let mut units: Vec<RunningUnit> = Vec::new();
        for (round_id, open) in &self.open {
            let Some(r) = self
                .rounds
                .get(round_id)
                .filter(|r| r.state == RoundState::Running)
            else {
                continue;
            };
            let delay_s = r.params.delay_ms as f64 / 1000.0;
            let speed = self.host_speed(h.id);
            let cost = scheduler::seconds_per_page(speed, delay_s);
            let own_s = scheduler::seconds_per_page(speed, 0.0);
            for job in open.jobs_on(h.id).filter_map(|id| self.jobs.get(&id)) {
                let site_cost = scheduler::seconds_per_page_at(
                    speed,
                    delay_s,
                    self.site_pace(job, r.params.delay_ms),
                );
                for a in job.running_attempts().filter(|a| a.host_id == h.id) {
                    // Pages expected of the unit: of a site never scanned,
                    // what the page cap leaves (its end is not planned on).
                    let parts = job.parts_of(a).0;
                    let expected = job.est_pages + parts as f64;
                    let unit_pages = if job.size_known {
                        expected
                    } else {
                        let before = job.pages_done().saturating_sub(parts);
                        (f64::from(r.params.max_pages) - before as f64).max(1.0)
                    };
                    // A scan that reports progress is timed by its own pace.
                    let unit = match scheduler::remaining_s(
                        unit_pages,
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
                            expected_s: (unit_pages - parts as f64).max(1.0) * site_cost,
                        },
                    };
                    let key = (a.first_report_ms == 0, a.issued_ms, a.unit_id);
                    units.push(RunningUnit {
                        key,
                        held: unit,
                        demand: Demand::of_scan(job.est_pages, cost),
                        handable: open
                            .handable
                            .get(&job.id)
                            .is_some_and(|h| h.unit_id == a.unit_id)
                            .then(|| {
                                (
                                    job.id,
                                    scheduler::left_pages(expected, a.pages),
                                    scan_pace_s(a, delay_s, own_s),
                                )
                            }),
                    });
                }
            }
        }
        units.sort_by_key(|u| u.key);
        // What its held units need at once, beyond slots (`pack`).
        let mut demand = Demand::default();
        for u in &units {
            demand.add(u.demand);
        }
        let slots = host_slots(h);
        let held: Vec<HeldUnit> = units.iter().map(|u| u.held).collect();
        let sched = scheduler::slot_schedule(&held, slots, now_ms);
        let online =
            scheduler::is_online(h.last_seen_ms, h.last_missed_ms, !units.is_empty(), now_ms);
        let ends = units
            .iter()
            .zip(&sched.ends_s)
            .filter_map(|(u, end)| {
                let (job_id, pages, pace) = u.handable?;
                let end = if online { *end } else { f64::INFINITY };
                Some(end_of_unit(u.key.2, job_id, pages, end, pace))
            })
            .collect();
        let view = HostView {
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
            demand,
            trusted: self.is_trusted(h.id),
        };
        Some(OneHost {
            trusted: view.trusted,
            view,
            ends,
            held,
        })
    }

    /// Every active host's view built afresh at `now_ms` (sorted by id).
    pub(super) fn host_views_now(&self, now_ms: u64) -> HostViews {
        let mut out = HostViews {
            built_ms: Some(now_ms),
            last_ms: now_ms,
            ..HostViews::default()
        };
        for h in self.hosts.values() {
            let one = self.one_host(h, now_ms);
            out.set(h.id, one, now_ms);
        }
        out
    }

    /// The kept views, brought up to `now_ms` for a request of `asker`: the
    /// stale hosts', the asker's and the oldest ones built again (at least
    /// `hosts × elapsed / VIEW_REFRESH_MS` of them, and every one
    /// [`VIEW_REFRESH_MS`] old); all built afresh when that share is every
    /// host (or the clock went back).
    pub(super) fn take_views(&mut self, now_ms: u64, asker: u64) -> HostViews {
        let mut views = std::mem::take(&mut self.views);
        // The views kept (revoked hosts have none).
        let hosts = views.built.len() as u128;
        let refresh = u128::from(VIEW_REFRESH_MS);
        let credit = views
            .built_ms
            .filter(|_| now_ms >= views.last_ms)
            .map(|_| views.credit + hosts * u128::from(now_ms - views.last_ms));
        let Some(credit) = credit.filter(|c| c / refresh < hosts) else {
            self.stale_views.clear();
            return self.host_views_now(now_ms);
        };
        let due = (credit / refresh) as usize;
        views.credit = credit % refresh;
        views.last_ms = now_ms;
        // Kept views built at this very moment and not marked: each must
        // equal one built afresh (debug builds check the marks by it).
        #[cfg(debug_assertions)]
        let unmarked_now: Vec<u64> = views
            .built
            .iter()
            .filter(|&(id, &b)| b == now_ms && *id != asker && !self.stale_views.contains(id))
            .map(|(id, _)| *id)
            .collect();
        let mut stale: Vec<u64> = self.stale_views.drain().collect();
        stale.push(asker);
        // The oldest views: the share due, and any as old as the limit.
        let mut taken = 0;
        while let Some(&(b, h)) = views.order.front() {
            if views.built.get(&h) != Some(&b) {
                views.order.pop_front();
                continue;
            }
            if taken >= due && now_ms - b < VIEW_REFRESH_MS {
                break;
            }
            views.order.pop_front();
            stale.push(h);
            taken += 1;
        }
        stale.sort_unstable();
        stale.dedup();
        for id in stale {
            let one = self.hosts.get(&id).and_then(|h| self.one_host(h, now_ms));
            views.set(id, one, now_ms);
        }
        #[cfg(debug_assertions)]
        for id in unmarked_now {
            let one = self.hosts.get(&id).and_then(|h| self.one_host(h, now_ms));
            let mut fresh = HostViews::default();
            fresh.set(id, one, now_ms);
            let kept = |v: &HostViews| {
                let view = v.views.iter().find(|x| x.host_id == id).cloned();
                let mut ends: Vec<EndKey> = v.units_of.get(&id).cloned().unwrap_or_default();
                ends.sort_unstable();
                let held = v.held.get(&id).cloned();
                (view, ends, held, v.trusted_online.contains(&id))
            };
            assert_eq!(kept(&views), kept(&fresh), "kept view of host {id}");
        }
        #[cfg(debug_assertions)]
        for v in &views.views {
            let age = now_ms - views.built[&v.host_id];
            assert!(
                age < VIEW_REFRESH_MS,
                "view of host {} {age} ms old",
                v.host_id
            );
        }
        views
    }

    /// Keep `views` for the next request.
    pub(super) fn keep_views(&mut self, views: HostViews) {
        self.views = views;
    }
}
