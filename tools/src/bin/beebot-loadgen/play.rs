//! One host's share of the load, open-loop: work requests and uploads each
//! on their own schedule (a random phase, then every interval), progress
//! reports for every unit held at the client's interval. A request leaves
//! when it is due whatever the earlier ones are doing, and its latency is
//! measured from when it was due: a server that falls behind shows as
//! latency, not as a slower load (no coordinated omission).
//!
//! Each unit got is verified, its result made at once (the host has
//! "scanned" it: [`beebot_tools::loadfiles::realistic_result`]), and held
//! until the host's next upload time, oldest first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use beebot_client::net::Link;
use beebot_shared::proto::{Request, Response};
use beebot_shared::sign::WorkUnit;
use beebot_tools::loadfiles::{made_up_result, realistic_result, LinkFileSizes};

use beebot_shared::fetch_rules::{work_wanted, DEFAULT_BUFFER_MAX_S, DEFAULT_BUFFER_MIN_S};

use crate::report::{Kind, Sinks};

/// The round trip a host counts on when it sizes its buffer (loopback).
const ROUND_TRIP_S: f64 = 0.05;

/// A host of the load: its key, its connection and the units it holds.
pub struct Host {
    pub id: u64,
    pub key: ed25519_dalek::SigningKey,
    pub link: Link,
    /// Uploads made-up link files
    /// ([`beebot_tools::loadfiles::made_up_result`]).
    pub liar: bool,
    held: Mutex<VecDeque<Held>>,
    /// Units whose upload is on its way (still held, as a client counts them).
    uploading: Mutex<Vec<u64>>,
    /// Held while a work request is out: a host asks one at a time, as the
    /// client's loop does (the list of units it holds must include those of
    /// the previous answer, or the server releases them).
    asking: tokio::sync::Mutex<()>,
}

/// A unit held; its result is made when it is uploaded.
struct Held {
    unit: WorkUnit,
    /// Its result's pages and links, for the progress reports.
    pages: u64,
    links: u64,
    next_progress: Instant,
    reports: u64,
}

impl Host {
    pub fn new(id: u64, key: ed25519_dalek::SigningKey, link: Link, liar: bool) -> Host {
        Host {
            id,
            key,
            link,
            liar,
            held: Mutex::new(VecDeque::new()),
            uploading: Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, VecDeque<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn uploading(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.uploading.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn units_held(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.held().iter().map(|h| h.unit.unit_id).collect();
        ids.extend(self.uploading().iter().copied());
        ids
    }
}

/// The schedule every host follows.
pub struct Plan {
    /// Between two work requests of one host.
    pub work_every: Duration,
    /// Between two uploads of one host (`None`: no uploads).
    pub upload_every: Option<Duration>,
    /// Between two progress reports of one unit (the server's hint).
    pub progress_every: Duration,
    /// The slots a host says it runs.
    pub slots: u32,
    pub sizes: LinkFileSizes,
    /// No request is due at or after this.
    pub until: Instant,
}

/// Requests sent and not yet answered, over all hosts.
#[derive(Default)]
pub struct InFlight(AtomicU64);

impl InFlight {
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct Flying(Arc<InFlight>);

impl Flying {
    fn start(f: &Arc<InFlight>) -> Flying {
        f.0.fetch_add(1, Ordering::Relaxed);
        Flying(f.clone())
    }
}

impl Drop for Flying {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Play `host`'s schedule until `plan.until`; requests still in flight then
/// finish on their own tasks (counted by `flying`).
pub async fn play(host: Arc<Host>, plan: Arc<Plan>, sinks: Arc<Sinks>, flying: Arc<InFlight>) {
    let start = Instant::now();
    let mut next_work = start + plan.work_every.mul_f64(rand::random::<f64>());
    let mut next_upload = plan
        .upload_every
        .map(|every| start + every.mul_f64(rand::random::<f64>()));
    loop {
        let next_progress = host.held().iter().map(|h| h.next_progress).min();
        let due = [Some(next_work), next_upload, next_progress]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next_work);
        if due >= plan.until {
            return;
        }
        tokio::time::sleep_until(due).await;
        let now = Instant::now();
        if next_work <= now {
            let guard = Flying::start(&flying);
            tokio::spawn(work(
                host.clone(),
                plan.clone(),
                sinks.clone(),
                next_work,
                guard,
            ));
            next_work += plan.work_every;
        }
        if let (Some(at), Some(every)) = (next_upload, plan.upload_every) {
            if at <= now {
                let oldest = host.held().pop_front();
                match oldest {
                    Some(h) => {
                        host.uploading().push(h.unit.unit_id);
                        let guard = Flying::start(&flying);
                        tokio::spawn(upload(
                            host.clone(),
                            plan.clone(),
                            sinks.clone(),
                            h,
                            at,
                            guard,
                        ));
                    }
                    None => {
                        sinks
                            .at(at)
                            .nothing_to_upload
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
                next_upload = Some(at + every);
            }
        }
        let reports: Vec<(u64, u64, u64, Instant)> = host
            .held()
            .iter_mut()
            .filter(|h| h.next_progress <= now)
            .map(|h| {
                let due = h.next_progress;
                h.next_progress += plan.progress_every;
                h.reports += 1;
                // Pages and links so far: a share of the result, growing.
                let pages = (h.pages * h.reports / (h.reports + 1)).max(1);
                let links = h.links * h.reports / (h.reports + 1);
                (h.unit.unit_id, pages, links, due)
            })
            .collect();
        for (unit_id, pages, links, due) in reports {
            let guard = Flying::start(&flying);
            tokio::spawn(progress(
                host.clone(),
                sinks.clone(),
                (unit_id, pages, links),
                due,
                guard,
            ));
        }
    }
}

async fn work(host: Arc<Host>, plan: Arc<Plan>, sinks: Arc<Sinks>, due: Instant, _f: Flying) {
    let _asking = host.asking.lock().await;
    let stats = sinks.at(due);
    // The client's own rule: ask only while the buffer wants work, for
    // what it wants (`fetch_rules::work_wanted`; no scan time known yet).
    let unfinished = host.held().len();
    let Some((want_seconds, free_slots)) = work_wanted(
        plan.slots,
        unfinished,
        None,
        ROUND_TRIP_S,
        DEFAULT_BUFFER_MIN_S,
        DEFAULT_BUFFER_MAX_S,
    ) else {
        stats.buffer_full.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let req = Request::RequestWork {
        want_seconds,
        free_slots,
        units_held: host.units_held(),
        open_windows: None,
    };
    let r = host.link.request(&req).await;
    let latency = due.elapsed();
    let units = match r {
        Ok(Response::Work { units, .. }) => units,
        Ok(other) => return stats.error(|| format!("work request answered {other:?}")),
        Err(e) => return stats.error(|| format!("work request: {e}")),
    };
    stats
        .of(if units.is_empty() {
            Kind::WorkEmpty
        } else {
            Kind::WorkWithUnits
        })
        .add(latency);
    if units.is_empty() {
        return;
    }
    stats.units.fetch_add(units.len() as u64, Ordering::Relaxed);
    let mut held = host.held();
    for signed in units {
        match beebot_shared::codec::decode::<WorkUnit>(
            &signed.bytes,
            beebot_shared::limits::MAX_UNIT_BYTES,
        ) {
            Ok(unit) => {
                let (pages, links) = plan.sizes.scan_of(&unit);
                held.push_back(Held {
                    pages,
                    links,
                    unit,
                    next_progress: Instant::now() + plan.progress_every,
                    reports: 0,
                });
            }
            Err(e) => stats.error(|| format!("unit: {e}")),
        }
    }
}

async fn upload(
    host: Arc<Host>,
    plan: Arc<Plan>,
    sinks: Arc<Sinks>,
    h: Held,
    due: Instant,
    _f: Flying,
) {
    let stats = sinks.at(due);
    let unit_id = h.unit.unit_id;
    // The scan's result, made off the runtime.
    let sizes = plan.sizes;
    let make = if host.liar {
        made_up_result
    } else {
        realistic_result
    };
    let made = tokio::task::spawn_blocking(move || make(&h.unit, &sizes))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let (summary, link_file) = match made {
        Ok(r) => r,
        Err(e) => {
            host.uploading().retain(|&u| u != unit_id);
            return stats.error(|| format!("link file: {e}"));
        }
    };
    stats.records.fetch_add(summary.links, Ordering::Relaxed);
    stats
        .upload_bytes
        .fetch_add(link_file.len() as u64, Ordering::Relaxed);
    let r = host
        .link
        .request(&Request::Upload {
            unit_id,
            summary,
            link_file,
            state: None,
        })
        .await;
    // Latency of answers only: a failure is counted as an error.
    if r.is_ok() {
        stats.upload.add(due.elapsed());
    }
    host.uploading().retain(|&u| u != unit_id);
    match r {
        Ok(Response::Accepted) => {
            stats.accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Response::Rejected { reason }) => {
            stats.not_accepted.fetch_add(1, Ordering::Relaxed);
            stats.note_first(|| format!("upload rejected: {reason}"));
        }
        Ok(Response::Duplicate) => {
            stats.not_accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(other) => stats.error(|| format!("upload answered {other:?}")),
        Err(e) => stats.error(|| format!("upload: {e}")),
    }
}

async fn progress(
    host: Arc<Host>,
    sinks: Arc<Sinks>,
    (unit_id, pages, links): (u64, u64, u64),
    due: Instant,
    _f: Flying,
) {
    let stats = sinks.at(due);
    let r = host
        .link
        .request(&Request::Progress {
            unit_id,
            pages,
            links,
        })
        .await;
    if r.is_ok() {
        stats.progress.add(due.elapsed());
    }
    match r {
        Ok(Response::Extend { .. } | Response::Continue) => {}
        Ok(Response::Abort { .. }) => {
            // A hand-over or a cancelled round: the unit is dropped.
            host.held().retain(|h| h.unit.unit_id != unit_id);
        }
        Ok(other) => stats.error(|| format!("progress answered {other:?}")),
        Err(e) => stats.error(|| format!("progress: {e}")),
    }
}
