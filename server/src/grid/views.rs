//! The scheduler's view of the hosts ([`HostView`]), kept between work
//! requests ([`HostViews`]): a request refreshes only the hosts that
//! changed since (and the asker), and every view at least every
//! [`VIEW_REFRESH_MS`], instead of building 2,000 views per request.
//!
//! Invariants: a host whose units or record changed is marked stale
//! ([`Grid::host_changed`], called by `reindex` for every host of a
//! changed job and by `active_host`) and refreshed before its view is
//! read; any other view is at most [`VIEW_REFRESH_MS`] old, so a change
//! no mark names is seen within that. Views are memory only and never
//! change a record.

use std::collections::{BTreeSet, HashMap};

use crate::model::*;
use crate::scheduler::{self, Capacity, Demand, HeldUnit, HostView};

use super::work::host_slots;
use super::Grid;

/// Longest a host's view may be reused before it is built again although
/// no change was marked: views are read in seconds from now (the next
/// free slot, whether the host is online), and a second is far below the
/// error of any estimate a policy compares.
pub const VIEW_REFRESH_MS: u64 = 1_000;

/// One host's view, the expected end (seconds from when it was made) of
/// each unit it runs, and its units laid on its slots (in issue order).
struct OneHost {
    view: HostView,
    trusted: bool,
    ends: Vec<(u64, f64)>,
    held: Vec<HeldUnit>,
}

/// The hosts' views kept between requests (see the module's doc).
#[derive(Default)]
pub(super) struct HostViews {
    /// When every view was last built (`None`: never).
    pub(super) built_ms: Option<u64>,
    /// Active hosts' views, sorted by host id.
    pub(super) views: Vec<HostView>,
    /// Expected end of every running unit, by unit id.
    pub(super) ends: HashMap<u64, f64>,
    /// Each host's units laid on its slots.
    pub(super) held: HashMap<u64, Vec<HeldUnit>>,
    /// Each host's units in `ends`.
    units_of: HashMap<u64, Vec<u64>>,
    /// Trusted hosts online.
    pub(super) trusted_online: BTreeSet<u64>,
}

impl HostViews {
    /// Put `one` in for `host_id` (`None`: the host is gone or revoked).
    fn set(&mut self, host_id: u64, one: Option<OneHost>) {
        for unit in self.units_of.remove(&host_id).unwrap_or_default() {
            self.ends.remove(&unit);
        }
        self.held.remove(&host_id);
        self.trusted_online.remove(&host_id);
        let at = self.views.binary_search_by_key(&host_id, |v| v.host_id);
        let Some(one) = one else {
            if let Ok(i) = at {
                self.views.remove(i);
            }
            return;
        };
        let units: Vec<u64> = one.ends.iter().map(|(u, _)| *u).collect();
        self.ends.extend(one.ends);
        self.units_of.insert(host_id, units);
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
        let mut units: Vec<((bool, u64, u64), HeldUnit, Demand)> = Vec::new();
        for (round_id, open) in &self.open {
            let Some(r) = self
                .rounds
                .get(round_id)
                .filter(|r| r.state == RoundState::Running)
            else {
                continue;
            };
            let delay_s = r.params.delay_ms as f64 / 1000.0;
            let cost = scheduler::seconds_per_page(self.host_speed(h.id), delay_s);
            for job in open.jobs_on(h.id).filter_map(|id| self.jobs.get(&id)) {
                for a in job.running_attempts().filter(|a| a.host_id == h.id) {
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
                    let key = (a.first_report_ms == 0, a.issued_ms, a.unit_id);
                    units.push((key, unit, Demand::of_scan(job.est_pages, cost)));
                }
            }
        }
        units.sort_by_key(|(key, _, _)| *key);
        // What its held units need at once, beyond slots (`pack`).
        let mut demand = Demand::default();
        for (_, _, d) in &units {
            demand.add(*d);
        }
        let slots = host_slots(h);
        let held: Vec<HeldUnit> = units.iter().map(|(_, u, _)| *u).collect();
        let sched = scheduler::slot_schedule(&held, slots, now_ms);
        let online =
            scheduler::is_online(h.last_seen_ms, h.last_missed_ms, !units.is_empty(), now_ms);
        let ends = units
            .iter()
            .zip(&sched.ends_s)
            .map(|(((_, _, unit), _, _), end)| (*unit, if online { *end } else { f64::INFINITY }))
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
        };
        Some(OneHost {
            view,
            trusted: self.is_trusted(h.id),
            ends,
            held,
        })
    }

    /// Every active host's view built afresh at `now_ms` (sorted by id).
    pub(super) fn host_views_now(&self, now_ms: u64) -> HostViews {
        let mut out = HostViews {
            built_ms: Some(now_ms),
            ..HostViews::default()
        };
        for h in self.hosts.values() {
            let one = self.one_host(h, now_ms);
            out.set(h.id, one);
        }
        out
    }

    /// The kept views, brought up to `now_ms` for a request of `asker`:
    /// built afresh when older than [`VIEW_REFRESH_MS`] (or the clock went
    /// back), else the stale hosts' and the asker's built again.
    pub(super) fn take_views(&mut self, now_ms: u64, asker: u64) -> HostViews {
        let mut views = std::mem::take(&mut self.views);
        let fresh = views
            .built_ms
            .is_some_and(|b| now_ms >= b && now_ms - b < VIEW_REFRESH_MS);
        if !fresh {
            self.stale_views.clear();
            return self.host_views_now(now_ms);
        }
        let mut stale: Vec<u64> = self.stale_views.drain().collect();
        stale.push(asker);
        stale.sort_unstable();
        stale.dedup();
        for id in stale {
            let one = self.hosts.get(&id).and_then(|h| self.one_host(h, now_ms));
            views.set(id, one);
        }
        // Debug builds check the marks: at the moment the views were built,
        // the kept ones equal views built afresh.
        #[cfg(debug_assertions)]
        if views.built_ms == Some(now_ms) {
            let fresh = self.host_views_now(now_ms);
            assert_eq!(views.views, fresh.views, "host views");
            assert_eq!(views.ends, fresh.ends, "units' ends");
            assert_eq!(views.held, fresh.held, "units held");
            assert_eq!(views.trusted_online, fresh.trusted_online, "trusted");
        }
        views
    }

    /// Keep `views` for the next request.
    pub(super) fn keep_views(&mut self, views: HostViews) {
        self.views = views;
    }
}
