//! The event loop's state and handlers: the grid over its in-memory store,
//! driven by the simulated clients as `serve` would be (work requests,
//! progress, failures, the three upload steps, deadline ticks).
//!
//! Invariants: events are handled in (time, sequence) order and are never
//! scheduled in the past; events of a host's earlier availability epoch are
//! stale and ignored. It never writes link files or states. A grid error
//! is the simulation's failure unless the server's disk is full (or its
//! store failed on a full disk): then the client meets it as any server
//! error ([`Sim::call`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use ed25519_dalek::VerifyingKey;

use beebot_shared::fetch_rules::{backoff_delay, work_wanted};
use beebot_shared::limits::{LEASE_TAKEOVER_S, MAX_WINDOW_INTERVALS, PART_INTERVAL_S};
use beebot_shared::linkfile::{self, LinkFileHeader, ScanSummary, StopReason};
use beebot_shared::proto::ABORT_HAND_OVER;
use beebot_shared::scanstate::ScanState;
use beebot_shared::sign::{self, WorkUnit};

use super::host::{Client, Ev, Held, HeldState, Scan, SiteTruth, Spooled};
use super::inputs::SimHost;
use super::timeline::{Avail, Timeline};
use super::{
    Rng, SimError, SimOptions, CHECKPOINT_INTERVAL_MS, CLIENT_TICK_MS, PAGE_BYTES,
    PROGRESS_INTERVAL_MS, SIM_START_MS,
};
use crate::grid::{
    Grid, GridError, ProgressOutcome, UploadOutcome, UploadPlan, UploadStep, WorkRequest,
};
use crate::store::{MemoryStore, Store};

pub(super) struct Sim<'a> {
    pub(super) opts: &'a SimOptions,
    pub(super) hosts: &'a [SimHost],
    pub(super) sites: Vec<SiteTruth>,
    pub(super) timelines: Vec<Timeline>,
    pub(super) grid: Grid,
    pub(super) project_key: VerifyingKey,
    pub(super) round_id: u64,
    /// Grid job id → site index.
    pub(super) job_site: HashMap<u64, usize>,
    pub(super) rng: Rng,
    /// Milliseconds since the start (the grid sees `SIM_START_MS + now`).
    pub(super) now: u64,
    pub(super) seq: u64,
    pub(super) events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    pub(super) clients: Vec<Client>,
    /// Page ranges of each site that accepted scans covered.
    pub(super) covered: Vec<Vec<(u64, u64)>>,
    pub(super) busy_s: f64,
    pub(super) wasted_s: f64,
    pub(super) continuations: u64,
    pub(super) round_over: bool,
    /// The latest tick scheduled for leases that may lapse.
    pub(super) lease_tick_ms: u64,
    /// What the grid is opened again from at a restart.
    pub(super) reopen: Reopen,
    /// The fault schedule's draws (a stream of their own).
    pub(super) fault_rng: Rng,
    pub(super) restarts: u64,
    pub(super) uploads_repeated: u64,
    /// Every upload the grid accepted: (job, unit).
    pub(super) acknowledged: Vec<(u64, u64)>,
    /// How far the server's clock is off the simulation's (clock jumps).
    pub(super) clock_skew_ms: i64,
    pub(super) clock_jumps: u64,
    /// Times the server's disk filled up, and times its store had failed
    /// on it and the server started afresh once space was back.
    pub(super) disk_fulls: u64,
    pub(super) recoveries: u64,
    /// The server could not start (its disk full): every request is
    /// answered with an error until its probe finds space.
    pub(super) down: bool,
}

/// A clock jump goes back at most this far (an NTP step, a wrong clock set
/// right)...
const CLOCK_JUMP_BACK_MS: u64 = 5 * 60_000;
/// ...or on at most this far (a sleep the clock did not see, a step on).
const CLOCK_JUMP_ON_MS: u64 = 15 * 60_000;
/// The server's clock is never further off the simulation's than this.
const MAX_CLOCK_SKEW_MS: u64 = 60 * 60_000;
/// A full disk stays full this long on average (exponential)...
const DISK_FULL_MEAN_MS: u64 = 2 * 60_000;
/// ...and never longer than this.
const DISK_FULL_MAX_MS: u64 = 30 * 60_000;
/// A disk that fills up takes up to this many more writes first, so that
/// it fills in the middle of an operation as often as between two.
const DISK_FULL_WRITES_MAX: u64 = 6;
/// A client's back-off after a server error, as its defaults
/// (`backoff_base`, `backoff_cap`), and no longer than its `LEASE_RETRY`
/// while it scans (a scan keeps its site while its reports are answered).
const BACKOFF_BASE: std::time::Duration = std::time::Duration::from_secs(1);
const BACKOFF_CAP: std::time::Duration = std::time::Duration::from_secs(300);
const LEASE_RETRY_MS: u64 = 30_000;

/// What a restarted server opens: its store and link files as they are.
pub(super) struct Reopen {
    /// The store's handle the grid runs on (a restart opens it anew).
    pub(super) store: Arc<MemoryStore>,
    pub(super) links: std::sync::Arc<crate::grid::MemoryLinks>,
    pub(super) key: ed25519_dalek::SigningKey,
    pub(super) settings: crate::grid::GridSettings,
    pub(super) seed: u64,
}

impl Sim<'_> {
    /// Schedule an event (never in the past).
    pub(super) fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t.max(self.now), self.seq, ev)));
    }

    /// The server's clock: the simulation's, off by the clock jumps.
    pub(super) fn grid_now(&self) -> u64 {
        (SIM_START_MS + self.now).saturating_add_signed(self.clock_skew_ms)
    }

    /// The simulation's time at which the server's clock reads `grid_ms`.
    pub(super) fn sim_ms_of(&self, grid_ms: u64) -> u64 {
        grid_ms
            .saturating_add_signed(-self.clock_skew_ms)
            .saturating_sub(SIM_START_MS)
    }

    pub(super) fn ask_soon(&mut self, h: usize, t: u64) {
        let c = &mut self.clients[h];
        if c.ask_at.is_some_and(|a| a <= t) {
            return;
        }
        c.ask_at = Some(t);
        self.at(t, Ev::Ask(h));
    }

    pub(super) fn check_round(&mut self) {
        // A failed store's grid may be ahead of its disk: the round ends
        // only once its end is stored.
        if self.down || self.reopen.store.failure().is_some() {
            return;
        }
        self.round_over =
            self.grid.round_state(self.round_id) != Some(crate::model::RoundState::Running);
    }

    /// Call the grid as a request reaching `serve` does. `None`: the
    /// server answered with an error because its disk is full, its store
    /// failed on a full disk, or it could not start on one; the client
    /// meets it as any server error (it keeps what it has and tries again
    /// after its back-off). Any other error is the simulation's.
    pub(super) fn call<T>(
        &mut self,
        f: impl FnOnce(&mut Grid) -> Result<T, GridError>,
    ) -> Result<Option<T>, SimError> {
        // As `serve`: after a storage failure no request reaches the grid
        // (its memory may be ahead of its disk) until it starts afresh.
        if self.down || self.reopen.store.failure().is_some() {
            return Ok(None);
        }
        let answer = f(&mut self.grid);
        // As `serve` after each call: the grid's writes go to the store in
        // the order it made them, and once the store has failed every
        // answer is an error (none may rest on memory the disk does not
        // hold).
        let store = &self.reopen.store;
        let changes = self.grid.take_link_changes();
        let durable = store
            .apply(&self.grid.take_writes())
            .and_then(|()| store.flush());
        // A file goes only once no durable record names it.
        match durable {
            Ok(()) => changes.apply(self.reopen.links.as_ref()),
            Err(_) => changes.close_rounds(self.reopen.links.as_ref()),
        }
        let failed = store.failure().is_some();
        match answer {
            Ok(_) if failed => Ok(None),
            Ok(t) => Ok(Some(t)),
            Err(e) if self.storage_refused(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A storage error while the disk is full or the store has failed.
    fn storage_refused(&self, e: &GridError) -> bool {
        let storage = match e {
            GridError::Io(io) => io.kind() == std::io::ErrorKind::StorageFull,
            _ => false,
        };
        let store = &self.reopen.store;
        storage && (store.disk().is_full() || store.failure().is_some())
    }

    /// Whether host `h`'s client may contact the server now (not backing
    /// off after a server error).
    fn may_contact(&self, h: usize) -> bool {
        self.now >= self.clients[h].next_contact_ms
    }

    /// The server answered host `h` with an error: its client contacts
    /// the server again after its back-off, the time returned.
    fn server_error(&mut self, h: usize) -> u64 {
        let c = &mut self.clients[h];
        c.failures = c.failures.saturating_add(1);
        let scanning = c
            .held
            .iter()
            .any(|u| matches!(u.state, HeldState::Scanning(_)));
        let jitter = self.fault_rng.unit();
        let mut wait =
            backoff_delay(c.failures, BACKOFF_BASE, BACKOFF_CAP, jitter).as_millis() as u64;
        if scanning {
            wait = wait.min(LEASE_RETRY_MS);
        }
        let t = self.now + wait.max(1);
        self.clients[h].next_contact_ms = t;
        t
    }

    /// The open intervals a client sends, seconds from now (as
    /// `Gate::open_intervals`), and the seconds left in the open one.
    pub(super) fn open_windows(&self, h: usize) -> (Option<Vec<(u64, u64)>>, Option<u64>) {
        let Some(w) = &self.clients[h].window else {
            return (None, None);
        };
        let now = self.now;
        let v: Vec<(u64, u64)> = w
            .iter()
            .filter(|&&(_, b)| b > now)
            .take(MAX_WINDOW_INTERVALS)
            .map(|&(a, b)| (a.saturating_sub(now) / 1000, (b - now) / 1000))
            .collect();
        let left = v.first().filter(|x| x.0 == 0).map(|x| x.1);
        (Some(v), left)
    }

    /// The client asks for work when its buffer runs low (`fetch_work`).
    pub(super) fn on_ask(&mut self, h: usize) -> Result<(), SimError> {
        if self.clients[h].ask_at != Some(self.now) {
            return Ok(());
        }
        self.clients[h].ask_at = None;
        let c = &self.clients[h];
        if c.avail != Avail::On {
            return Ok(());
        }
        let next = c.next_request_ms.max(c.next_contact_ms);
        if self.now < next {
            self.ask_soon(h, next);
            return Ok(());
        }
        let unfinished = c
            .held
            .iter()
            .filter(|u| !matches!(u.state, HeldState::Spooled(_)))
            .count();
        let Some((want, free)) = work_wanted(
            self.hosts[h].slots,
            unfinished,
            c.job_s,
            self.opts.round_trip_s,
            self.opts.buffer_min_s,
            self.opts.buffer_max_s,
        ) else {
            return Ok(()); // asks again when a scan ends
        };
        let (open_windows, left) = self.open_windows(h);
        let req = WorkRequest {
            want_seconds: left.map_or(want, |l| want.min(l)),
            free_slots: free,
            units_held: c.held.iter().map(|u| u.unit.unit_id).collect(),
            open_windows,
        };
        let host_id = c.host_id;
        let now = self.grid_now();
        let Some(reply) = self.call(|g| g.request_work(host_id, &req, now))? else {
            let t = self.server_error(h);
            self.ask_soon(h, t);
            return Ok(());
        };
        self.clients[h].failures = 0;
        // As the client: units the server no longer wants are dropped (a
        // scan of one is stopped, its time wasted).
        for unit_id in &reply.cancelled_units {
            let held = &mut self.clients[h].held;
            if let Some(i) = held.iter().position(|u| u.unit.unit_id == *unit_id) {
                match held.remove(i).state {
                    HeldState::Scanning(s) => {
                        self.busy_s += s.done_at(self.now);
                        self.wasted_s += s.unkept_at(self.now);
                    }
                    HeldState::Spooled(sp) => self.wasted_s += sp.unkept_s,
                    HeldState::Waiting => {}
                }
            }
        }
        let mut got = 0;
        for signed in &reply.units {
            // As the client: verified with the project key, and ours.
            let Ok(unit) = sign::verify_unit(&self.project_key, signed) else {
                continue;
            };
            let Some(&site) = self.job_site.get(&unit.job_id) else {
                continue;
            };
            if unit.host_id != host_id {
                continue;
            }
            if unit.resume.is_some() {
                self.continuations += 1;
            }
            self.at(self.sim_ms_of(unit.deadline_ms) + 1, Ev::Tick);
            self.clients[h].held.push(Held {
                unit,
                site,
                state: HeldState::Waiting,
            });
            got += 1;
        }
        if got > 0 {
            self.clients[h].used = true;
            self.start_scans(h)?;
            self.ask_soon(h, self.now + CLIENT_TICK_MS);
        } else {
            let wait_s = reply.retry_after_s.unwrap_or(30);
            let jitter = 1.0 + 0.2 * self.rng.unit();
            let t = self.now + (wait_s as f64 * 1000.0 * jitter) as u64;
            self.clients[h].next_request_ms = t;
            self.ask_soon(h, t);
        }
        Ok(())
    }

    /// Start waiting units on free slots, first come first served.
    pub(super) fn start_scans(&mut self, h: usize) -> Result<(), SimError> {
        if self.clients[h].avail != Avail::On {
            return Ok(());
        }
        let slots = self.hosts[h].slots.max(1) as usize;
        loop {
            let c = &self.clients[h];
            let scanning = c
                .held
                .iter()
                .filter(|u| matches!(u.state, HeldState::Scanning(_)))
                .count();
            let Some(i) = c
                .held
                .iter()
                .position(|u| matches!(u.state, HeldState::Waiting))
            else {
                return Ok(());
            };
            if scanning >= slots {
                return Ok(());
            }
            if self.rng.unit() < self.opts.scan_failures {
                // The scan cannot run here: the client gives the unit back.
                let unit_id = c.held[i].unit.unit_id;
                let host_id = c.host_id;
                self.clients[h].held.remove(i);
                let now = self.grid_now();
                self.call(|g| g.fail(host_id, unit_id, "simulated scan failure", now))?;
                self.check_round();
                continue;
            }
            let held = &self.clients[h].held[i];
            let from = held.unit.resume.as_ref().map_or(0, |r| r.pages_done);
            let delay_s = held.unit.limits.delay_ms as f64 / 1000.0;
            let page_ends =
                self.sites[held.site].page_ends(from, self.hosts[h].pages_per_s, delay_s);
            let unit_id = held.unit.unit_id;
            self.clients[h].held[i].state = HeldState::Scanning(Scan {
                start_page: from,
                page_ends,
                done_s: 0.0,
                since_ms: Some(self.now),
                started_ms: self.now,
                checkpoint_s: 0.0,
                part_pages: 0,
                parts: 0,
                part_ms: self.now,
                part_s: 0.0,
                parts_off: false,
            });
            self.schedule_scan(h, unit_id);
        }
    }

    /// Schedule a scan's end (when running) and its next progress report.
    pub(super) fn schedule_scan(&mut self, h: usize, unit_id: u64) {
        let c = &self.clients[h];
        let epoch = c.epoch;
        let Some(Held {
            state: HeldState::Scanning(s),
            unit,
            ..
        }) = c.held.iter().find(|u| u.unit.unit_id == unit_id)
        else {
            return;
        };
        let end = s.since_ms.map(|since| {
            let left = s.page_ends.last().copied().unwrap_or(0.0) - s.done_s;
            let natural = since + (left.max(0.0) * 1000.0).ceil() as u64;
            let budget = s.started_ms + unit.limits.max_seconds.saturating_mul(1000);
            natural.min(budget)
        });
        let reports = matches!(c.avail, Avail::On | Avail::Gated);
        if let Some(end) = end {
            self.at(end, Ev::ScanEnd(h, unit_id, epoch));
        }
        if reports {
            self.at(
                self.now + PROGRESS_INTERVAL_MS,
                Ev::Report(h, unit_id, epoch),
            );
        }
    }

    pub(super) fn scan_of(&self, h: usize, unit_id: u64) -> Option<(usize, &Scan)> {
        self.clients[h]
            .held
            .iter()
            .enumerate()
            .find_map(|(i, u)| match &u.state {
                HeldState::Scanning(s) if u.unit.unit_id == unit_id => Some((i, s)),
                _ => None,
            })
    }

    /// A scan ends: at its natural end, or at its time budget with its frontier.
    pub(super) fn on_scan_end(
        &mut self,
        h: usize,
        unit_id: u64,
        epoch: u64,
    ) -> Result<(), SimError> {
        if self.clients[h].epoch != epoch || self.clients[h].avail != Avail::On {
            return Ok(());
        }
        self.end_scan(h, unit_id, false)
    }

    /// End a running scan now: at its natural end or its time budget, or
    /// handed over ([`ABORT_HAND_OVER`]: what it did, with its frontier).
    pub(super) fn end_scan(
        &mut self,
        h: usize,
        unit_id: u64,
        hand_over: bool,
    ) -> Result<(), SimError> {
        let Some((i, scan)) = self.scan_of(h, unit_id) else {
            return Ok(());
        };
        let pages = scan.pages_at(self.now);
        let natural = pages as usize >= scan.page_ends.len();
        let (start_page, started_ms, done_s) =
            (scan.start_page, scan.started_ms, scan.done_at(self.now));
        let (part_pages, part_ms, part_s) = (scan.part_pages, scan.part_ms, scan.part_s);
        let held = self.clients[h].held.remove(i);
        let site = held.site;
        let stopped_by = if !natural && hand_over {
            Some(StopReason::Cancelled)
        } else if !natural {
            Some(StopReason::MaxTime)
        } else if self.sites[site].capped {
            Some(StopReason::MaxPages)
        } else {
            None
        };
        let elapsed_ms = self.now - started_ms;
        let c = &mut self.clients[h];
        let took = elapsed_ms as f64 / 1000.0;
        c.job_s = Some(match c.job_s {
            None => took,
            Some(a) => a + 0.3 * (took - a),
        });
        self.busy_s += done_s;
        // What its parts hold is uploaded already.
        let summary = ScanSummary {
            pages: pages - part_pages,
            bytes: (pages - part_pages) * PAGE_BYTES,
            elapsed_ms: self.now - part_ms,
            stopped_by,
            ..Default::default()
        };
        let state = (!natural).then(|| ScanState {
            site: held.unit.site.clone(),
            pages_done: start_page + pages,
            ..Default::default()
        });
        let covers = (start_page + part_pages, start_page + pages);
        let unkept_s = (done_s - part_s).max(0.0);
        let contact = self.may_contact(h);
        let answered = if contact {
            self.upload(h, &held.unit, summary.clone(), state.clone(), None)?
        } else {
            None
        };
        match answered {
            Some(outcome) => self.delivered(site, outcome, covers, unkept_s),
            None => {
                // Kept in the spool, sent again after the back-off.
                self.clients[h].held.push(Held {
                    state: HeldState::Spooled(Box::new(Spooled {
                        summary,
                        state,
                        covers,
                        unkept_s,
                    })),
                    ..held
                });
                let t = if contact {
                    self.server_error(h)
                } else {
                    self.clients[h].next_contact_ms
                };
                self.at(t, Ev::Retry(h));
            }
        }
        self.start_scans(h)?;
        self.ask_soon(h, self.now);
        Ok(())
    }

    /// A result's upload was answered: accepted, it covers its pages;
    /// otherwise its scanning not kept elsewhere is wasted.
    fn delivered(
        &mut self,
        site: usize,
        outcome: UploadOutcome,
        covers: (u64, u64),
        unkept_s: f64,
    ) {
        if outcome == UploadOutcome::Accepted {
            self.covered[site].push(covers);
            self.check_round();
        } else {
            self.wasted_s += unkept_s;
        }
    }

    /// The client sends its spooled results again, one after another until
    /// the server answers one with an error (then again after its back-off).
    pub(super) fn on_retry(&mut self, h: usize) -> Result<(), SimError> {
        let c = &self.clients[h];
        if !matches!(c.avail, Avail::On | Avail::Gated) {
            return Ok(()); // again when it is back
        }
        if self.now < c.next_contact_ms {
            let t = c.next_contact_ms;
            self.at(t, Ev::Retry(h));
            return Ok(());
        }
        let spooled = |c: &Client| {
            c.held
                .iter()
                .position(|u| matches!(u.state, HeldState::Spooled(_)))
        };
        let Some(mut i) = spooled(&self.clients[h]) else {
            return Ok(());
        };
        loop {
            let held = &self.clients[h].held[i];
            let HeldState::Spooled(sp) = &held.state else {
                unreachable!("found as spooled");
            };
            let (unit, site) = (held.unit.clone(), held.site);
            let (summary, state, covers, unkept_s) =
                (sp.summary.clone(), sp.state.clone(), sp.covers, sp.unkept_s);
            let Some(outcome) = self.upload(h, &unit, summary, state, None)? else {
                let t = self.server_error(h);
                self.at(t, Ev::Retry(h));
                return Ok(());
            };
            self.clients[h].failures = 0;
            self.clients[h].held.remove(i);
            // Taken before, its answer lost to the full disk (the write
            // went through, its sync did not): the grid holds it.
            let outcome = match outcome {
                UploadOutcome::Duplicate if self.grid_holds(unit.job_id, unit.unit_id)? => {
                    UploadOutcome::Accepted
                }
                other => other,
            };
            self.delivered(site, outcome, covers, unkept_s);
            match spooled(&self.clients[h]) {
                Some(next) => i = next,
                None => break,
            }
        }
        self.start_scans(h)?;
        self.ask_soon(h, self.now);
        Ok(())
    }

    /// The server's three upload steps, the link file verified and written
    /// (to memory). `None`: answered with an error (see [`Sim::call`]).
    pub(super) fn upload(
        &mut self,
        h: usize,
        unit: &WorkUnit,
        summary: ScanSummary,
        state: Option<ScanState>,
        part: Option<u32>,
    ) -> Result<Option<UploadOutcome>, SimError> {
        let pages = summary.pages;
        let header = LinkFileHeader::of_unit(unit, summary.pages, 0);
        let link_file =
            linkfile::encode(&header, &[]).map_err(|e| SimError::Invalid(e.to_string()))?;
        let state = state
            .map(|s| s.encode())
            .transpose()
            .map_err(|e| SimError::Invalid(e.to_string()))?;
        let host_id = self.clients[h].host_id;
        let now = self.grid_now();
        let begin = |g: &mut Grid| match part {
            None => g.upload_begin(host_id, unit.unit_id, now),
            Some(index) => g.upload_part_begin(host_id, unit.unit_id, (index, pages), now),
        };
        let plan = match self.call(begin)? {
            None => return Ok(None),
            Some(UploadStep::Answer(o)) => return Ok(Some(o)),
            Some(UploadStep::Plan(p)) => p,
        };
        let Some(outcome) =
            self.call(|g| finish_upload(g, &plan, summary, &link_file, state, now))?
        else {
            return Ok(None);
        };
        if outcome == UploadOutcome::Accepted {
            self.acknowledged.push((unit.job_id, unit.unit_id));
            // Its answer lost: the client sends it again, and the grid
            // must answer from what it took, never take it twice.
            if self.opts.upload_loss > 0.0 && self.fault_rng.unit() < self.opts.upload_loss {
                self.uploads_repeated += 1;
                // (Answered with an error, it is sent again later still.)
                if let Some(UploadStep::Plan(_)) = self.call(begin)? {
                    return Err(SimError::Invalid(format!(
                        "unit {}'s upload, sent again, would be taken twice",
                        unit.unit_id
                    )));
                }
            }
        }
        Ok(Some(outcome))
    }

    /// The server restarts: the grid is opened again from its store and
    /// link files; each client that is on reconnects and says its
    /// resources again (what the grid keeps in memory only).
    pub(super) fn on_restart(&mut self) -> Result<(), SimError> {
        self.restarts += 1;
        self.start_afresh()?;
        self.next_restart();
        Ok(())
    }

    /// The server starts from what its disk holds, as a new process: the
    /// store opened anew (a failure of the old handle forgotten), the grid
    /// opened from it and the link files. A disk still full may keep it
    /// from starting ([`Sim::down`] until the probe finds space).
    pub(super) fn start_afresh(&mut self) -> Result<(), SimError> {
        let store = Arc::new(self.reopen.store.reopen());
        self.reopen.store = store.clone();
        let r = &self.reopen;
        let records = crate::store::records(&*store)?;
        let io = crate::grid::GridIo::in_memory(
            r.links.clone(),
            r.key.clone(),
            r.seed ^ self.restarts ^ (self.recoveries << 32),
        );
        match Grid::open(records, io, r.settings.clone()) {
            Ok(grid) => {
                self.grid = grid;
                self.down = false;
                // `serve`'s ticker runs within a second of the start.
                self.at(self.now + 1000, Ev::Tick);
            }
            Err(e) if self.storage_refused(&e) => {
                self.down = true;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        let now = self.grid_now();
        for h in 0..self.clients.len() {
            let c = &self.clients[h];
            if c.avail == Avail::On {
                if let Some(res) = self.hosts[h].resources {
                    let id = c.host_id;
                    self.call(|g| g.set_resources(id, res, now))?;
                }
            }
        }
        self.check_round();
        Ok(())
    }

    /// Schedule the next full disk of the fault schedule (none at rate 0).
    pub(super) fn next_disk_full(&mut self) {
        if let Some(after_ms) = self.fault_after(self.opts.disk_fulls_per_hour) {
            self.at(self.now + after_ms, Ev::DiskFull);
        }
    }

    /// The server's disk fills up: it takes a few more writes, then none
    /// (store and link files alike) until it is freed.
    pub(super) fn on_disk_full(&mut self) {
        self.disk_fulls += 1;
        let writes = (self.fault_rng.unit() * (DISK_FULL_WRITES_MAX + 1) as f64) as u64;
        self.reopen.store.disk().fill_after(writes);
        let u = self.fault_rng.unit().max(1e-12);
        let lasts = ((-u.ln() * DISK_FULL_MEAN_MS as f64) as u64).clamp(1, DISK_FULL_MAX_MS);
        self.at(self.now + lasts, Ev::DiskFreed);
    }

    /// Space is back: `serve`'s probe (every [`crate::STORE_PROBE_INTERVAL`])
    /// finds it at its next turn.
    pub(super) fn on_disk_freed(&mut self) {
        self.reopen.store.disk().free();
        let every = crate::STORE_PROBE_INTERVAL.as_millis() as f64;
        let probe = (self.fault_rng.unit() * every) as u64;
        self.at(self.now + probe.max(1), Ev::StoreProbe);
        self.next_disk_full();
    }

    /// `serve`'s probe: a failed store (or a server that could not start)
    /// whose disk takes writes again starts afresh.
    pub(super) fn on_store_probe(&mut self) -> Result<(), SimError> {
        let store = &self.reopen.store;
        let failed = self.down || store.failure().is_some();
        if !failed || store.disk().is_full() {
            return Ok(());
        }
        self.recoveries += 1;
        self.start_afresh()
    }

    /// Schedule the next restart of the fault schedule (none at rate 0).
    pub(super) fn next_restart(&mut self) {
        if let Some(after_ms) = self.fault_after(self.opts.restarts_per_hour) {
            self.at(self.now + after_ms, Ev::Restart);
        }
    }

    /// Schedule the next clock jump of the fault schedule (none at rate 0).
    pub(super) fn next_clock_jump(&mut self) {
        if let Some(after_ms) = self.fault_after(self.opts.clock_jumps_per_hour) {
            self.at(self.now + after_ms, Ev::ClockJump);
        }
    }

    /// Milliseconds to the next fault of a schedule of `per_hour` on
    /// average (exponential gaps); `None` at 0.
    fn fault_after(&mut self, per_hour: f64) -> Option<u64> {
        (per_hour > 0.0 && per_hour.is_finite()).then(|| {
            let u = self.fault_rng.unit().max(1e-12);
            ((-u.ln() * 3_600_000.0 / per_hour) as u64).max(1)
        })
    }

    /// The server's clock jumps: back up to [`CLOCK_JUMP_BACK_MS`] or on up
    /// to [`CLOCK_JUMP_ON_MS`], never further off than
    /// [`MAX_CLOCK_SKEW_MS`] either way; its ticker runs at once.
    pub(super) fn on_clock_jump(&mut self) -> Result<(), SimError> {
        self.clock_jumps += 1;
        let span = (CLOCK_JUMP_BACK_MS + CLOCK_JUMP_ON_MS) as f64;
        let jump = (self.fault_rng.unit() * span) as i64 - CLOCK_JUMP_BACK_MS as i64;
        self.clock_skew_ms = (self.clock_skew_ms + jump)
            .clamp(-(MAX_CLOCK_SKEW_MS as i64), MAX_CLOCK_SKEW_MS as i64);
        self.at(self.now, Ev::Tick);
        self.next_clock_jump();
        Ok(())
    }

    /// Accepted uploads whose piece the job's record no longer holds (its
    /// result, a segment, or a result under comparison).
    pub(super) fn acknowledged_lost(&self) -> Result<u64, SimError> {
        let (_, jobs) = self.grid.round(self.round_id)?;
        let jobs: HashMap<u64, crate::model::JobRecord> =
            jobs.into_iter().map(|j| (j.id, j)).collect();
        let mut lost = 0;
        for &(job_id, unit_id) in &self.acknowledged {
            let Some(job) = jobs.get(&job_id) else {
                lost += 1;
                continue;
            };
            lost += u64::from(!holds(job, unit_id));
        }
        Ok(lost)
    }

    /// Whether the grid's record of job `job_id` holds unit `unit_id`'s
    /// upload (its result, a segment, or a result under comparison).
    fn grid_holds(&self, job_id: u64, unit_id: u64) -> Result<bool, SimError> {
        let (_, jobs) = self.grid.round(self.round_id)?;
        Ok(jobs
            .iter()
            .find(|j| j.id == job_id)
            .is_some_and(|j| holds(j, unit_id)))
    }

    /// A scan's progress report: `Extend` is followed, `Abort` stops it.
    pub(super) fn on_report(&mut self, h: usize, unit_id: u64, epoch: u64) -> Result<(), SimError> {
        let c = &self.clients[h];
        if c.epoch != epoch || !matches!(c.avail, Avail::On | Avail::Gated) {
            return Ok(());
        }
        let Some((_, scan)) = self.scan_of(h, unit_id) else {
            return Ok(());
        };
        if !self.may_contact(h) {
            // Backing off: no report and no part until it ends.
            self.at(
                self.now + PROGRESS_INTERVAL_MS,
                Ev::Report(h, unit_id, epoch),
            );
            return Ok(());
        }
        let due = !scan.parts_off
            && self.now >= scan.part_ms + PART_INTERVAL_S * 1000
            && scan.pages_at(self.now) > scan.part_pages;
        if due && !self.upload_part(h, unit_id)? {
            return Ok(());
        }
        let Some((i, scan)) = self.scan_of(h, unit_id) else {
            return Ok(());
        };
        let c = &self.clients[h];
        // The unit's own pages since it started, as the client counts
        // them (not the job's; its parts included).
        let pages = scan.pages_at(self.now);
        let host_id = c.host_id;
        let now = self.grid_now();
        // Answered with an error, the scan goes on.
        let report = (pages, 0, Some(pages * PAGE_BYTES));
        match self.call(|g| g.report(host_id, unit_id, report, now))? {
            Some(ProgressOutcome::Abort(r)) if r == ABORT_HAND_OVER => {
                return self.end_scan(h, unit_id, true);
            }
            Some(ProgressOutcome::Abort(_)) => return self.drop_scan(h, i),
            Some(ProgressOutcome::Extend(d)) => {
                self.clients[h].held[i].unit.deadline_ms = d;
                self.at(self.sim_ms_of(d) + 1, Ev::Tick);
            }
            Some(ProgressOutcome::Continue) => {}
            None => {
                self.server_error(h);
            }
        }
        // The server's ticker (every second in `serve`) takes back scans
        // whose host stopped reporting: one tick every 10 s of virtual
        // time is enough for a lease of minutes.
        let lapse = self.now + LEASE_TAKEOVER_S * 1000 + 1;
        let tick = lapse.div_ceil(PROGRESS_INTERVAL_MS) * PROGRESS_INTERVAL_MS;
        if tick > self.lease_tick_ms {
            self.lease_tick_ms = tick;
            self.at(tick, Ev::Tick);
        }
        self.at(
            self.now + PROGRESS_INTERVAL_MS,
            Ev::Report(h, unit_id, epoch),
        );
        Ok(())
    }

    /// The server does not want held unit `i` of host `h` any more: its
    /// scan stops (what no part holds is wasted), and the slot goes to the
    /// next unit.
    fn drop_scan(&mut self, h: usize, i: usize) -> Result<(), SimError> {
        let held = self.clients[h].held.remove(i);
        if let HeldState::Scanning(s) = held.state {
            self.busy_s += s.done_at(self.now);
            self.wasted_s += s.unkept_at(self.now);
        }
        self.start_scans(h)?;
        self.ask_soon(h, self.now);
        Ok(())
    }

    /// A running scan uploads its part (at a checkpoint) and goes on; a
    /// part refused stops it (the server took it back or another copy
    /// went further). False when the scan stopped.
    fn upload_part(&mut self, h: usize, unit_id: u64) -> Result<bool, SimError> {
        let Some((i, scan)) = self.scan_of(h, unit_id) else {
            return Ok(false);
        };
        let pages = scan.pages_at(self.now);
        let (start_page, part_pages, parts) = (scan.start_page, scan.part_pages, scan.parts);
        let summary = ScanSummary {
            pages: pages - part_pages,
            bytes: (pages - part_pages) * PAGE_BYTES,
            elapsed_ms: self.now - scan.part_ms,
            ..Default::default()
        };
        let held = &self.clients[h].held[i];
        let (unit, site) = (held.unit.clone(), held.site);
        let state = ScanState {
            site: unit.site.clone(),
            pages_done: start_page + pages,
            ..Default::default()
        };
        let Some(outcome) = self.upload(h, &unit, summary, Some(state), Some(parts))? else {
            // Not taken: the client backs off; the scan goes on and tries
            // again after it (its pages since the last part taken, in the
            // time since it).
            self.server_error(h);
            return Ok(true);
        };
        match outcome {
            UploadOutcome::Accepted | UploadOutcome::Duplicate => {
                self.covered[site].push((start_page + part_pages, start_page + pages));
                let now = self.now;
                if let HeldState::Scanning(s) = &mut self.clients[h].held[i].state {
                    s.part_pages = pages;
                    s.parts += 1;
                    s.part_ms = now;
                    // A part is taken at a checkpoint.
                    s.checkpoint_s = s.done_at(now);
                    s.part_s = s.checkpoint_s;
                }
                Ok(true)
            }
            UploadOutcome::NotKept => {
                // No more parts of this scan: the rest goes at its end.
                if let HeldState::Scanning(s) = &mut self.clients[h].held[i].state {
                    s.parts_off = true;
                }
                Ok(true)
            }
            UploadOutcome::Rejected(_) => {
                self.drop_scan(h, i)?;
                Ok(false)
            }
        }
    }

    /// A host's availability changes: scans pause (checkpointed), stop (lost
    /// back to the last checkpoint) or resume.
    pub(super) fn on_avail(&mut self, h: usize, idx: usize) -> Result<(), SimError> {
        let Some(&(_, to, clean)) = self.timelines[h].changes.get(idx) else {
            return Ok(());
        };
        if let Some(&(t, _, _)) = self.timelines[h].changes.get(idx + 1) {
            self.at(t, Ev::Avail(h, idx + 1));
        }
        let now = self.now;
        let c = &mut self.clients[h];
        let from = c.avail;
        if from == to || from == Avail::Gone {
            return Ok(());
        }
        c.avail = to;
        c.epoch += 1;
        let mut lost = 0.0;
        for u in c.held.iter_mut() {
            let HeldState::Scanning(s) = &mut u.state else {
                continue;
            };
            if s.since_ms.is_some() {
                s.pause(now);
                if clean {
                    s.checkpoint_s = s.done_s;
                }
            }
            if matches!(to, Avail::Off | Avail::Gone) {
                // Back to the last checkpoint: at least every 30 s of scanning.
                let every = CHECKPOINT_INTERVAL_MS as f64 / 1000.0;
                let kept = s.checkpoint_s.max((s.done_s / every).floor() * every);
                lost += s.done_s - kept;
                s.done_s = kept;
                s.checkpoint_s = kept;
            }
            if to == Avail::On {
                s.since_ms = Some(now);
            }
        }
        self.busy_s += lost;
        self.wasted_s += lost;
        if to == Avail::Gone {
            return Ok(());
        }
        let ids: Vec<u64> = self.clients[h]
            .held
            .iter()
            .filter(|u| matches!(u.state, HeldState::Scanning(_)))
            .map(|u| u.unit.unit_id)
            .collect();
        for id in ids {
            self.schedule_scan(h, id);
        }
        if to == Avail::On {
            self.start_scans(h)?;
            self.ask_soon(h, now);
        }
        let spooled = self.clients[h]
            .held
            .iter()
            .any(|u| matches!(u.state, HeldState::Spooled(_)));
        if spooled {
            self.at(now, Ev::Retry(h));
        }
        Ok(())
    }

    /// Keep count of the time a host holds units: a machine holding work
    /// is disturbed (its client crawls, or waits for a slot to). A host
    /// gone for good holds nothing from then on.
    pub(super) fn note_held(&mut self, h: usize) {
        let now = self.now;
        let c = &mut self.clients[h];
        let holds = !c.held.is_empty() && c.avail != Avail::Gone;
        match c.held_since_ms {
            None if holds => c.held_since_ms = Some(now),
            Some(since) if !holds => {
                c.held_ms += now.saturating_sub(since);
                c.held_since_ms = None;
            }
            _ => {}
        }
    }

    pub(super) fn on_tick(&mut self) -> Result<(), SimError> {
        let now = self.grid_now();
        // A tick may end a round too (one whose end a failed write missed).
        self.call(|g| g.tick(now))?;
        self.check_round();
        Ok(())
    }

    /// Pages of the sites' natural ends no accepted scan covered.
    pub(super) fn pages_lost(&self) -> u64 {
        self.sites
            .iter()
            .zip(&self.covered)
            .map(|(site, ranges)| {
                let mut r = ranges.clone();
                r.sort_unstable();
                let (mut covered, mut reach) = (0, 0);
                for (a, b) in r {
                    let (a, b) = (a.max(reach), b.min(site.natural));
                    if b > a {
                        covered += b - a;
                        reach = b;
                    }
                }
                site.natural - covered.min(site.natural)
            })
            .sum()
    }
}

/// Whether `job`'s record holds unit `unit_id`'s upload: its result, a
/// segment, or a result under comparison.
fn holds(job: &crate::model::JobRecord, unit_id: u64) -> bool {
    job.result.as_ref().is_some_and(|r| r.unit_id == unit_id)
        || job.segments.iter().any(|s| s.unit_id == unit_id)
        || job
            .candidates
            .iter()
            .any(|c| c.result.unit_id == unit_id || c.segments.iter().any(|s| s.unit_id == unit_id))
}

/// The last upload steps as `serve` runs them: verify, write (to memory),
/// then finish or refuse.
pub fn finish_upload(
    grid: &mut Grid,
    plan: &UploadPlan,
    summary: ScanSummary,
    link_file: &[u8],
    state: Option<Vec<u8>>,
    now: u64,
) -> Result<UploadOutcome, GridError> {
    match plan.verify(&summary, link_file, state.as_deref()) {
        Ok(info) => {
            plan.write(link_file, info.state.as_ref())?;
            grid.upload_finish(plan, summary, info, now)
        }
        Err(reason) => grid.upload_refused(plan, reason, now),
    }
}

/// A one-page result of `unit`: one record from the site's front page to
/// another site, and its summary (`elapsed_ms` of scanning). What the load
/// generator and the work-request bench upload.
pub fn one_page_result(
    unit: &WorkUnit,
    elapsed_ms: u64,
) -> Result<(ScanSummary, Vec<u8>), linkfile::LinkFileError> {
    let records = [linkfile::LinkRecord {
        source_url: format!("http://{}/", unit.site),
        target_url: "http://elsewhere.test/".into(),
        tag: beebot_shared::extract::LinkTag::A,
        nofollow: false,
        anchor_text: "out".into(),
    }];
    let file = linkfile::encode(&LinkFileHeader::of_unit(unit, 1, 1), &records)?;
    let summary = ScanSummary {
        pages: 1,
        links: 1,
        bytes: 1000,
        elapsed_ms,
        ..ScanSummary::default()
    };
    Ok((summary, file))
}
