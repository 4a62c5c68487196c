//! The loop of `beebot run`: take the home (one runner per home), resume
//! the spooled units, then contact the server, start scans and keep their
//! ends until told to stop (or, with `once`, until the server is idle and
//! every result is delivered).
//!
//! A stop is heard even while a request is in flight; every scan is then
//! checkpointed before the loop returns. Nothing here decides what to ask
//! the server: that is the link's pass ([`Worker::contact`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::mpsc;

use crate::bandwidth::Bandwidth;
use crate::control;
use crate::home::{Enrolment, Home, RunLock, MAX_SPOOLED_UNITS};

use super::scan::ScanDone;
use super::sizing::{cpu_budget, machine_cpu_budget, Sizing};
use super::{Held, HeldState, Worker};
use super::{RunOptions, RunStats};
use crate::concurrency::Budget;

/// Longest the loop sleeps between passes when nothing happens.
const LOOP_TICK: Duration = Duration::from_millis(500);

/// Run the work loop until `shutdown` resolves (or, with `once`, until the
/// server is idle and every result is delivered).
pub async fn run(
    home: Home,
    opts: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<RunStats> {
    home.identity().require_enrolment()?;
    // One runner per home: a second would take over the status page and
    // share the host key and the spool. Held until this function returns.
    let run_lock = home.lock_runner()?;
    if let Some(pid) = run_lock.stale_pid {
        tracing::info!("taking over the home from pid {pid}, which is no longer running");
    }
    run_locked(home, &run_lock, opts, shutdown).await
}

/// [`run`] on a home whose run lock the caller holds (`beebot run` takes it
/// before its status page listens, and keeps it while it leaves).
pub async fn run_locked(
    home: Home,
    _lock: &RunLock,
    opts: RunOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<RunStats> {
    let enrolment = home.identity().require_enrolment()?;
    let (done_tx, mut done_rx) = mpsc::channel::<ScanDone>(MAX_SPOOLED_UNITS);
    let mut w = Worker::open(home, enrolment, opts, done_tx)?;
    w.resume_spooled()?;
    let stopped = w.work_until(shutdown, &mut done_rx).await?;
    w.bench.stop();
    if stopped {
        tracing::info!("stopping; scans are checkpointed, unfinished units stay in the spool");
        w.stop_scans(&mut done_rx).await;
    }
    if let Some(l) = w.link.take() {
        l.close();
    }
    let _ = std::fs::remove_file(control::status_path(&w.home.data));
    Ok(w.stats)
}

impl Worker {
    /// The worker of an enrolled home, holding nothing yet.
    pub(super) fn open(
        home: Home,
        enrolment: Enrolment,
        opts: RunOptions,
        done_tx: mpsc::Sender<ScanDone>,
    ) -> Result<Worker> {
        let key = home.identity().host_key(false)?;
        let project_key = enrolment.project_verifying_key()?;
        let server = enrolment.server_id()?;
        // Adjustable: `beebot config set bandwidth_kbps` reaches running scans.
        let bandwidth = Some(Arc::new(Bandwidth::adjustable(opts.bandwidth_kbps)));
        let learned = super::sizing::read_learned(&home.data);
        let budget = Budget {
            ceiling: opts.slots,
            memory_mb: opts.memory_mb,
            bandwidth_kbps: opts.bandwidth_kbps,
            cpu_cores: cpu_budget(opts.cpu_percent, machine_cpu_budget()),
        };
        let sizing = Sizing::new(&budget, learned.as_ref());
        if let Some(l) = &learned {
            tracing::info!(
                concurrency = sizing.limit(),
                learned = l.sites_at_once,
                "sites scanned at once: {} to start, where the last run left off",
                sizing.limit()
            );
        }
        Ok(Worker {
            home,
            enrolment,
            key,
            project_key,
            server,
            opts,
            held: BTreeMap::new(),
            link: None,
            clock_offset_ms: 0,
            failures: 0,
            refusals: 0,
            next_contact: Instant::now(),
            next_request: Instant::now(),
            server_idle: false,
            stats: RunStats::default(),
            done_tx,
            last_error: None,
            last_answered: None,
            spool_measured: None,
            problems: Vec::new(),
            status_written: Instant::now() - Duration::from_secs(60),
            today: None,
            status_shape: Vec::new(),
            bandwidth,
            job_s: None,
            round_trip_s: 0.0,
            bench: Default::default(),
            stopping: false,
            offline_stops: 0,
            scans_resume_at: None,
            hinted_at: None,
            resources_told: false,
            concurrency_told: None,
            progress_all_refused: false,
            run_started: Instant::now(),
            sizing,
            meter: Default::default(),
        })
    }

    /// Resume from the spool: units verified again, finished results queued
    /// for upload; what a kill left half-written or orphaned swept first.
    fn resume_spooled(&mut self) -> Result<()> {
        self.home.spool().sweep_spool();
        let (units, refused) = self.home.spool().spooled_units(&self.project_key)?;
        for r in refused {
            tracing::error!("refused a spooled unit: {r}");
            self.stats.units_refused += 1;
        }
        for u in units {
            if u.unit.host_id != self.enrolment.host_id {
                self.home.spool().remove_unit(u.unit.unit_id);
                continue;
            }
            let id = u.unit.unit_id;
            // Where its next upload starts: without it, the scan cannot
            // say what the server holds; the unit is dropped (the server
            // takes it back when this host no longer names it).
            let parts = match self.home.spool().parts_sent(id) {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(unit_id = id, "unit dropped: {e:#}");
                    self.home.spool().remove_unit(id);
                    continue;
                }
            };
            let state = if self.home.spool().result(id)?.is_some() {
                HeldState::Finished
            } else {
                HeldState::Waiting
            };
            tracing::info!(
                unit_id = id,
                checkpoint = self.home.spool().has_checkpoint(id),
                "resuming spooled unit"
            );
            let held = Held {
                deadline_ms: self.home.spool().deadline(id).unwrap_or(u.unit.deadline_ms),
                needs_state: u.unit.resume.is_some() && !self.home.spool().has_checkpoint(id),
                unit: u,
                state,
                parts,
                part_due: None,
            };
            self.held.insert(id, held);
        }
        Ok(())
    }

    /// Contact the server, start scans and keep their ends until `shutdown`
    /// resolves (true) or, with `once`, the server is idle and nothing is
    /// held (false). A stop (SIGTERM, Ctrl-C) is heard even while a request
    /// is in flight.
    async fn work_until(
        &mut self,
        shutdown: impl std::future::Future<Output = ()>,
        done_rx: &mut mpsc::Receiver<ScanDone>,
    ) -> Result<bool> {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(LOOP_TICK);
        loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(true),
                r = self.contact() => r?,
            }
            if let Some(s) = self.opts.gate.as_ref().and_then(|g| g.take_settings()) {
                self.apply_settings(&s);
            }
            self.adjust_concurrency();
            self.start_scans();
            self.write_status();
            if self.opts.once && self.server_idle && self.held.is_empty() {
                return Ok(false);
            }
            tokio::select! {
                biased;
                _ = &mut shutdown => return Ok(true),
                r = async {
                    match done_rx.recv().await {
                        Some(done) => {
                            self.scan_done(done).await?;
                            self.write_status_now();
                            anyhow::Ok(())
                        }
                        None => Ok(()),
                    }
                } => r?,
                _ = tick.tick() => {}
            }
        }
    }
}
