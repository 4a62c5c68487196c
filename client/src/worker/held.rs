//! The client's state while it runs: the [`Worker`] itself (its link, its
//! clock offset and backoff, its running averages) and the units it holds
//! ([`Held`]), each waiting, crawling, finished or aborted.
//!
//! Invariants: every held unit is in the spool as well (dropping one
//! removes it from both); a crawling unit's scan thread holds the same
//! `cancel`, counters and checkpoint slot as its [`HeldState::Crawling`].
//! Nothing here talks to the server or starts a scan.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::mpsc;

use crate::bandwidth::Bandwidth;
use crate::cancel::Cancel;
use crate::checkpoint::CheckpointSlot;
use crate::home::{Enrolment, Home, PartsSent, SpooledUnit};
use crate::net::{Link, ServerId};

use super::scan::ScanDone;
use super::{backoff_delay, RunOptions, RunStats};

/// A unit the client holds.
pub(super) struct Held {
    pub(super) unit: SpooledUnit,
    pub(super) state: HeldState,
    /// The unit's deadline on the server's clock, as last extended (Unix ms).
    pub(super) deadline_ms: u64,
    /// A continuation unit whose state is not fetched yet (`FetchState`).
    pub(super) needs_state: bool,
    /// What the server holds of its scan: the parts it accepted.
    pub(super) parts: PartsSent,
    /// When its next part is due (set when its scan starts).
    pub(super) part_due: Option<Instant>,
}

pub(super) enum HeldState {
    Waiting,
    Crawling {
        cancel: Arc<Cancel>,
        /// Set with `cancel` when the server wants the scan on another host
        /// ([`ABORT_HAND_OVER`]): it ends with a result and its frontier.
        hand_over: Arc<AtomicBool>,
        pages: Arc<AtomicU64>,
        links: Arc<AtomicU64>,
        /// Body bytes read, from the unit's start (its parts included).
        bytes: Arc<AtomicU64>,
        /// URLs its frontier holds.
        queued: Arc<AtomicU64>,
        last_progress: Instant,
        /// The scan's lease on its site, renewed by answered reports.
        lease: Arc<super::lease::Lease>,
        started: Instant,
        /// Its checkpoints, shared with its thread.
        slot: Arc<CheckpointSlot>,
    },
    /// Result spooled, waiting for the server's acknowledgement.
    Finished,
    /// The server said stop: drop it when its scan returns.
    Aborted,
}

/// The running client.
pub(super) struct Worker {
    pub(super) home: Home,
    pub(super) enrolment: Enrolment,
    pub(super) key: SigningKey,
    pub(super) project_key: VerifyingKey,
    pub(super) server: ServerId,
    pub(super) opts: RunOptions,
    pub(super) held: BTreeMap<u64, Held>,
    pub(super) link: Option<Link>,
    pub(super) clock_offset_ms: i64,
    pub(super) failures: u32,
    /// Work answers in a row whose every unit was refused (their own backoff:
    /// those answers are network successes, which reset `failures`).
    pub(super) refusals: u32,
    pub(super) next_contact: Instant,
    pub(super) next_request: Instant,
    pub(super) server_idle: bool,
    pub(super) stats: RunStats,
    pub(super) done_tx: mpsc::Sender<ScanDone>,
    pub(super) last_error: Option<String>,
    /// When the latest request the server answered was sent: a new scan's
    /// lease counts from it.
    pub(super) last_answered: Option<super::lease::Sent>,
    /// The spool's size when last measured, and when (see [`SPOOL_RECHECK`]).
    pub(super) spool_measured: Option<(Instant, u64)>,
    /// The last problems, for the status page.
    pub(super) problems: Vec<crate::control::Problem>,
    pub(super) status_written: Instant,
    /// Today's totals as this run last wrote or read them: the status
    /// reads the spool's days file again only on another date (this run
    /// is its only writer).
    pub(super) today: Option<crate::home::DayTotals>,
    /// The units whose scans ended when the status was last written
    /// ([`Worker::write_status`] writes a change there at once).
    pub(super) status_shape: Vec<(u64, bool)>,
    pub(super) bandwidth: Option<Arc<Bandwidth>>,
    /// Running average of this client's scan time, seconds (buffer sizing).
    pub(super) job_s: Option<f64>,
    /// Running average of a request's round trip, seconds (buffer sizing).
    pub(super) round_trip_s: f64,
    /// The reference-site benchmark, run on first start and weekly.
    pub(super) bench: crate::benchmark::Background,
    /// The client is stopping: cancelled scans stay in the spool, checkpointed.
    pub(super) stopping: bool,
    /// Scans stopped offline in a row (the offline back-off's exponent).
    pub(super) offline_stops: u32,
    /// No scan starts before this (a scan found its site offline).
    pub(super) scans_resume_at: Option<Instant>,
    /// The server pushed `WorkAvailable`: ask for work at this moment.
    pub(super) hinted_at: Option<Instant>,
    /// The server has heard this link's `Resources` (memory, bandwidth cap).
    pub(super) resources_told: bool,
    /// The concurrency the server has heard on this link (`Concurrency`).
    pub(super) concurrency_told: Option<u32>,
    /// The server does not take `ScanProgressAll` (0.1.0's): each scan
    /// reports on its own, as `Progress` without its bytes, until the next
    /// link.
    pub(super) progress_all_refused: bool,
    /// When this run started: a run before it may have asked any of its
    /// sites a moment before.
    pub(super) run_started: Instant,
    /// The concurrency controller and what it measures.
    pub(super) sizing: super::sizing::Sizing,
    /// What every scan counts (pages, bytes, response times).
    pub(super) meter: Arc<super::sizing::ScanMeter>,
}

impl Worker {
    /// Settings read again while running (`beebot config set`): slots,
    /// buffers, the spool cap and the crawler's rules apply from the next
    /// scan and request, the CPU budget from the controller's next step,
    /// the bandwidth cap at once (the window and battery
    /// rule are the gate's).
    pub(super) fn apply_settings(&mut self, s: &crate::settings::Settings) {
        self.opts.slots = s.slots;
        self.opts.buffer_seconds = s.buffer_max_s;
        self.opts.buffer_min_s = s.buffer_min_s;
        self.opts.spool_cap_bytes = s.spool_cap_mb.saturating_mul(1024 * 1024);
        self.opts.crawler.allow_private = s.allow_private;
        self.opts.crawler.proxy = s.proxy.clone();
        let offer_changed =
            (self.opts.bandwidth_kbps, self.opts.memory_mb) != (s.bandwidth_kbps, s.memory_mb);
        self.opts.bandwidth_kbps = s.bandwidth_kbps;
        self.opts.memory_mb = s.memory_mb;
        self.opts.cpu_percent = s.cpu_percent;
        if offer_changed {
            self.resources_told = false;
        }
        if let Some(b) = &self.bandwidth {
            b.set_kb_per_s(s.bandwidth_kbps);
        }
        self.bound_concurrency();
        // Ask again now: free slots, buffers and open windows may differ.
        self.next_request = Instant::now();
        tracing::info!(
            slots = s.slots,
            bandwidth_kbps = s.bandwidth_kbps,
            cpu_percent = s.cpu_percent,
            "settings applied"
        );
    }

    /// The wait of reconnect attempt `attempt`: full jitter within this
    /// run's backoff bounds.
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        backoff_delay(
            attempt,
            self.opts.backoff_base,
            self.opts.backoff_cap,
            rand::random::<f64>(),
        )
    }

    /// Whether scans may run now (not paused, inside the window, on power
    /// when the battery rule says so).
    pub(super) fn gate_open(&self) -> bool {
        self.opts.gate.as_ref().is_none_or(|g| g.is_open())
    }

    /// Ids of the held units whose state matches.
    pub(super) fn units_where(&self, f: impl Fn(&HeldState) -> bool) -> Vec<u64> {
        self.held
            .iter()
            .filter(|(_, h)| f(&h.state))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Ids of the held units of `round_id`.
    pub(super) fn units_where_round(&self, round_id: u64) -> Vec<u64> {
        self.held
            .iter()
            .filter(|(_, h)| h.unit.unit.round_id == round_id)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The server no longer wants these units (their round was cancelled,
    /// their site excluded, or they went to another host while this one
    /// was away): a running scan is stopped (dropped when it returns), the
    /// others are dropped now and never started.
    pub(super) fn drop_cancelled(&mut self, unit_ids: &[u64]) {
        for unit_id in unit_ids {
            let Some(h) = self.held.get_mut(unit_id) else {
                continue;
            };
            match &h.state {
                HeldState::Crawling { cancel, .. } => {
                    cancel.cancel();
                    h.state = HeldState::Aborted;
                }
                HeldState::Aborted => {}
                HeldState::Waiting | HeldState::Finished => {
                    let round_id = h.unit.unit.round_id;
                    tracing::info!(
                        unit_id,
                        round_id,
                        "unit dropped: the server no longer wants it (round cancelled, \
                         site excluded, or given to another host while this one was away)"
                    );
                    self.held.remove(unit_id);
                    self.home.remove_unit(*unit_id);
                }
            }
        }
    }

    /// Ids of every held unit (told to the server with each work request).
    pub(super) fn units_held(&self) -> Vec<u64> {
        self.held.keys().copied().collect()
    }

    /// Scans whose thread still runs (aborted ones until they return).
    pub(super) fn crawling(&self) -> usize {
        self.held
            .values()
            .filter(|h| matches!(h.state, HeldState::Crawling { .. } | HeldState::Aborted))
            .count()
    }
}
