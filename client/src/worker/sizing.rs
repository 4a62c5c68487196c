//! The work loop's side of the concurrency controller
//! ([`crate::concurrency`]): the scans count their pages, bytes and response
//! times into one [`ScanMeter`]; every `adjust_every` the loop turns what was
//! counted, the scans running and the process's CPU time and memory into a
//! [`Sample`], steps the controller, and applies the answer. Scans start up
//! to the effective concurrency ([`Worker::concurrency`]), the buffer of work
//! is sized by it, and the server hears it (`Concurrency`) after every
//! `Hello` and every change.
//!
//! What the controller learned is kept in the home ([`LEARNED_FILE`]) each
//! time the concurrency changes, and the next run starts from it.
//!
//! Nothing here stops a running scan: a lower concurrency starts no new scan
//! until fewer run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::path::Path;

use crate::concurrency::{cpu_budget_cores, Budget, Controller, Learned, Reason, Sample};
use crate::crawler::CrawlProgress;
use crate::usage::{self, Process};

use super::Worker;

/// How often the controller steps by default: ten seconds hold about ten
/// pages a scan at the default 1 s delay, enough to judge pages/s.
pub const ADJUST_EVERY: Duration = Duration::from_secs(10);

pub use crate::home::{learned_path, LEARNED_FILE};

/// What the last run learned, if its file reads and is plausible (else the
/// run starts afresh, saying why when the file is there but not usable).
pub fn read_learned(data: &Path) -> Option<Learned> {
    let path = learned_path(data);
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str::<Learned>(&text) {
        Ok(l) if l.is_plausible() => Some(l),
        Ok(l) => {
            tracing::warn!(path = %path.display(), "learned figures out of range, not used: {l:?}");
            None
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), "learned figures unreadable, not used: {e}");
            None
        }
    }
}

/// Keep what the controller learned for the next run.
fn write_learned(data: &Path, l: &Learned) -> anyhow::Result<()> {
    crate::home::write_atomic(
        &learned_path(data),
        serde_json::to_string(l)?.as_bytes(),
        false,
    )
}

/// Totals of every scan of this run, counted by the scans as they go.
#[derive(Debug, Default)]
pub struct ScanMeter {
    pages: AtomicU64,
    bytes: AtomicU64,
    responses: AtomicU64,
    response_ms: AtomicU64,
}

/// The totals of a [`ScanMeter`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    pages: u64,
    bytes: u64,
    responses: u64,
    response_ms: u64,
}

impl ScanMeter {
    /// Count what one scan did since its last report: `now` and `before` are
    /// its own running counts (`before` becomes `now`).
    pub fn count(&self, now: &CrawlProgress, before: &mut CrawlProgress) {
        let add = |c: &AtomicU64, n: u64, b: u64| {
            c.fetch_add(n.saturating_sub(b), Ordering::Relaxed);
        };
        add(&self.pages, now.pages, before.pages);
        add(&self.bytes, now.bytes, before.bytes);
        add(&self.responses, now.responses, before.responses);
        add(&self.response_ms, now.response_ms, before.response_ms);
        *before = *now;
    }

    fn totals(&self) -> Totals {
        Totals {
            pages: self.pages.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            responses: self.responses.load(Ordering::Relaxed),
            response_ms: self.response_ms.load(Ordering::Relaxed),
        }
    }
}

/// The controller and what the loop measured since its last step.
#[derive(Debug)]
pub struct Sizing {
    controller: Controller,
    /// When the stretch being measured began, with the totals, the
    /// process's CPU seconds then.
    since: Instant,
    totals: Totals,
    cpu_s: Option<f64>,
    /// Scans running, integrated since `since` (slot-seconds), and when it
    /// was last integrated.
    busy_slot_s: f64,
    busy_at: Instant,
    /// What the machine offers the process, cores (the budget's bound).
    machine_cores: f64,
    /// The sites at once last kept in [`LEARNED_FILE`].
    kept: Option<u32>,
}

impl Sizing {
    /// A controller at its start, for a run with `budget`'s settings, from
    /// what the last run `learned`.
    pub fn new(budget: &Budget, learned: Option<&Learned>) -> Sizing {
        let now = Instant::now();
        Sizing {
            controller: Controller::resume(budget, learned),
            since: now,
            totals: Totals::default(),
            cpu_s: usage::cpu_seconds(Process::This),
            busy_slot_s: 0.0,
            busy_at: now,
            machine_cores: machine_cpu_budget(),
            kept: learned.map(|l| l.sites_at_once),
        }
    }

    /// The effective concurrency.
    pub fn limit(&self) -> u32 {
        self.controller.limit()
    }
}

impl Worker {
    /// Sites scanned at once now: the controller's answer.
    pub(super) fn concurrency(&self) -> u32 {
        self.sizing.limit()
    }

    /// What the settings allow the controller.
    pub(super) fn budget(&self) -> Budget {
        Budget {
            ceiling: self.opts.slots,
            memory_mb: self.opts.memory_mb,
            bandwidth_kbps: self.opts.bandwidth_kbps,
            cpu_cores: cpu_budget(self.opts.cpu_percent, self.sizing.machine_cores),
        }
    }

    /// Count the scans running since the last call (slot-seconds busy).
    pub(super) fn count_busy(&mut self) {
        let now = Instant::now();
        let running = self.crawling() as f64;
        let s = &mut self.sizing;
        s.busy_slot_s += running * now.duration_since(s.busy_at).as_secs_f64();
        s.busy_at = now;
    }

    /// Step the controller when a stretch of `adjust_every` is measured, and
    /// apply its answer: a change is logged, asks for work at once (the
    /// buffer follows it) and is told to the server.
    pub(super) fn adjust_concurrency(&mut self) {
        self.count_busy();
        let now = Instant::now();
        let elapsed = now.duration_since(self.sizing.since);
        if elapsed < self.opts.adjust_every {
            return;
        }
        let totals = self.meter.totals();
        let cpu_now = usage::cpu_seconds(Process::This);
        let s = &mut self.sizing;
        let before = s.totals;
        let sample = Sample {
            seconds: elapsed.as_secs_f64(),
            pages: totals.pages.saturating_sub(before.pages),
            busy_slot_s: s.busy_slot_s,
            responses: totals.responses.saturating_sub(before.responses),
            response_s: totals.response_ms.saturating_sub(before.response_ms) as f64 / 1000.0,
            bytes: totals.bytes.saturating_sub(before.bytes),
            cpu_s: cpu_now.zip(s.cpu_s).map(|(a, b)| (a - b).max(0.0)),
            rss_mb: usage::rss_kb(Process::This).map(|k| k as f64 / 1024.0),
        };
        s.since = now;
        s.totals = totals;
        s.cpu_s = cpu_now;
        s.busy_slot_s = 0.0;
        let budget = self.budget();
        let was = self.sizing.limit();
        let (limit, why) = self.sizing.controller.step(&sample, &budget);
        self.applied(was, limit, why, &sample);
    }

    /// Apply a new ceiling, memory budget or bandwidth cap at once (a lower
    /// one lowers the concurrency now; a higher one is grown into).
    pub(super) fn bound_concurrency(&mut self) {
        let budget = self.budget();
        let was = self.sizing.limit();
        if let Some((limit, why)) = self.sizing.controller.bound(&budget) {
            self.applied(was, limit, why, &Sample::default());
        }
    }

    fn applied(&mut self, was: u32, limit: u32, why: Reason, sample: &Sample) {
        // A probe judged to pay is kept even when the figure holds after it.
        self.keep_learned();
        if limit == was {
            tracing::debug!(concurrency = limit, reason = why.text(), "concurrency held");
            return;
        }
        tracing::info!(
            concurrency = limit,
            was,
            reason = why.text(),
            pages_per_s = format!("{:.1}", sample.pages as f64 / sample.seconds.max(0.001)),
            response_ms = sample
                .mean_response_s()
                .map(|r| (r * 1000.0).round() as u64),
            cpu_used_percent = sample.cpu_share().map(|c| (c * 100.0).round() as u64),
            "sites scanned at once: {was} -> {limit} ({})",
            why.text()
        );
        // More slots want more units now; the server hears the new figure.
        self.next_request = Instant::now();
    }

    /// Keep what the controller learned when its level changed since last
    /// kept (a write per change, not per step).
    fn keep_learned(&mut self) {
        let Some(l) = self.sizing.controller.learned() else {
            return;
        };
        if self.sizing.kept == Some(l.sites_at_once) {
            return;
        }
        match write_learned(&self.home.data, &l) {
            Ok(()) => self.sizing.kept = Some(l.sites_at_once),
            Err(e) => tracing::warn!("cannot keep the learned concurrency: {e:#}"),
        }
    }
}

/// What this machine offers the client's process, cores
/// ([`cpu_budget_cores`]; read once a run: it reads the cgroup's files).
pub fn machine_cpu_budget() -> f64 {
    cpu_budget_cores(std::thread::available_parallelism().map_or(1, usize::from))
}

/// The CPU budget, cores: the `cpu_percent` setting, within `machine`.
pub fn cpu_budget(cpu_percent: u32, machine: f64) -> f64 {
    (f64::from(cpu_percent.max(1)) / 100.0).min(machine)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_figures_are_kept_and_a_bad_file_is_not_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read_learned(dir.path()), None, "nothing kept yet");
        let l = Learned {
            sites_at_once: 31,
            pages_per_slot_s: 0.8,
            cpu_s_per_page: Some(0.0004),
        };
        write_learned(dir.path(), &l).expect("write");
        assert_eq!(read_learned(dir.path()), Some(l));
        for bad in [
            "{\"sites_at_once\": 31",
            "{\"sites_at_once\": 100000, \"pages_per_slot_s\": 0.8, \"cpu_s_per_page\": null}",
            "",
        ] {
            std::fs::write(learned_path(dir.path()), bad).expect("write");
            assert_eq!(read_learned(dir.path()), None, "{bad}");
        }
    }
}
