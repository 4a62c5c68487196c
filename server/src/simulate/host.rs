//! The simulated host: what a site truly is (its pages and their response
//! times), the client of one host with the units it holds, its scans
//! (paused, resumed, checkpointed), and the events the loop orders.
//!
//! Invariants: a scan's `page_ends` are cumulative and ascending; a scan
//! never does more than its pages. It never calls the grid: the engine does.

use beebot_shared::linkfile::ScanSummary;
use beebot_shared::scanstate::ScanState;
use beebot_shared::sign::WorkUnit;

use super::timeline::Avail;

/// A site as it truly is.
pub(super) struct SiteTruth {
    /// Pages to its natural end: its true size, up to the page cap.
    pub(super) natural: u64,
    /// Its true size is over the page cap (a scan to the end stops at `MaxPages`).
    pub(super) capped: bool,
    /// Each page's response time, seconds.
    pub(super) response_s: Vec<f32>,
}

impl SiteTruth {
    /// Seconds one slot of a host of `pages_per_s` needs for pages `from..`:
    /// each page the politeness delay or its response time plus the host's
    /// own time, whichever is longer. Cumulative, one entry a page.
    pub(super) fn page_ends(&self, from: u64, pages_per_s: f64, delay_s: f64) -> Vec<f64> {
        let own = 1.0 / pages_per_s.max(1e-6);
        let mut t = 0.0;
        self.response_s
            .iter()
            .skip(from as usize)
            .map(|r| {
                t += (f64::from(*r) + own).max(delay_s);
                t
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
    /// The client's loop asks for work.
    Ask(usize),
    /// A running scan reaches its end or its time budget (host, unit, epoch).
    ScanEnd(usize, u64, u64),
    /// A scan reports progress (host, unit, epoch).
    Report(usize, u64, u64),
    /// A deadline passes: the server's ticker runs.
    Tick,
    /// A host's availability changes (host, index into its timeline).
    Avail(usize, usize),
    /// The server restarts (the fault schedule).
    Restart,
    /// The server's clock jumps (the fault schedule).
    ClockJump,
    /// The client sends its spooled results again (host).
    Retry(usize),
    /// The server's disk fills up (the fault schedule)...
    DiskFull,
    /// ...and has space again.
    DiskFreed,
    /// `serve`'s probe of a failed store's disk.
    StoreProbe,
}

/// A scan in a client.
pub(super) struct Scan {
    /// Pages the job's earlier scans did (the unit's `resume`).
    pub(super) start_page: u64,
    /// Cumulative seconds of scanning at which each page of this scan ends.
    pub(super) page_ends: Vec<f64>,
    /// Seconds of scanning done up to `since_ms` (or up to the pause).
    pub(super) done_s: f64,
    /// Scanning since (`None`: paused).
    pub(super) since_ms: Option<u64>,
    /// When it started: elapsed time and the time budget count from here,
    /// pauses included, as the client's crawler counts them.
    pub(super) started_ms: u64,
    /// Seconds of scanning at its last checkpoint.
    pub(super) checkpoint_s: f64,
    /// Pages of this scan its accepted parts hold, how many parts, and
    /// when the last was taken (its start before the first).
    pub(super) part_pages: u64,
    pub(super) parts: u32,
    pub(super) part_ms: u64,
    /// Seconds of scanning its accepted parts hold.
    pub(super) part_s: f64,
    /// The server wants no more parts of it: the rest goes at its end.
    pub(super) parts_off: bool,
}

impl Scan {
    pub(super) fn done_at(&self, now: u64) -> f64 {
        let run = self
            .since_ms
            .map_or(0.0, |s| now.saturating_sub(s) as f64 / 1000.0);
        let total = self.page_ends.last().copied().unwrap_or(0.0);
        (self.done_s + run).min(total)
    }
    /// Seconds of scanning up to `now` that no accepted part holds (what
    /// is wasted if the scan stops without a result).
    pub(super) fn unkept_at(&self, now: u64) -> f64 {
        (self.done_at(now) - self.part_s).max(0.0)
    }
    pub(super) fn pages_at(&self, now: u64) -> u64 {
        let done = self.done_at(now) + 1e-9;
        self.page_ends.partition_point(|&e| e <= done) as u64
    }
    pub(super) fn pause(&mut self, now: u64) {
        self.done_s = self.done_at(now);
        self.since_ms = None;
    }
}

pub(super) enum HeldState {
    Waiting,
    Scanning(Scan),
    /// Scanned: its result waits in the client's spool, the server having
    /// answered its upload with an error (a full disk); sent again later.
    Spooled(Box<Spooled>),
}

/// A result in a client's spool.
pub(super) struct Spooled {
    pub(super) summary: ScanSummary,
    pub(super) state: Option<ScanState>,
    /// The site's pages it covers (from, to).
    pub(super) covers: (u64, u64),
    /// Seconds of scanning it holds that no accepted part does (wasted
    /// if it is not accepted).
    pub(super) unkept_s: f64,
}

/// A unit the client holds.
pub(super) struct Held {
    pub(super) unit: WorkUnit,
    pub(super) site: usize,
    pub(super) state: HeldState,
}

/// The client of one host.
pub(super) struct Client {
    pub(super) host_id: u64,
    pub(super) avail: Avail,
    /// Its window's open intervals (ms from the start), sent with work
    /// requests; `None`: it keeps no window.
    pub(super) window: Option<Vec<(u64, u64)>>,
    pub(super) held: Vec<Held>,
    pub(super) job_s: Option<f64>,
    pub(super) next_request_ms: u64,
    /// No contact with the server before this (its back-off after a
    /// server error): work requests and spooled uploads alike.
    pub(super) next_contact_ms: u64,
    pub(super) ask_at: Option<u64>,
    /// Bumped at every change of availability: events of earlier epochs are stale.
    pub(super) epoch: u64,
    /// It received a unit at least once in the round.
    pub(super) used: bool,
    /// Since when it holds units (`None`: it holds none, or is gone).
    pub(super) held_since_ms: Option<u64>,
    /// Milliseconds it held units before `held_since_ms`.
    pub(super) held_ms: u64,
    /// Server errors in a row (its back-off grows with them).
    pub(super) failures: u32,
}

impl Ev {
    /// The host the event is about (`None`: the server's ticker).
    pub(super) fn host(&self) -> Option<usize> {
        match *self {
            Ev::Ask(h)
            | Ev::ScanEnd(h, _, _)
            | Ev::Report(h, _, _)
            | Ev::Avail(h, _)
            | Ev::Retry(h) => Some(h),
            Ev::Tick
            | Ev::Restart
            | Ev::ClockJump
            | Ev::DiskFull
            | Ev::DiskFreed
            | Ev::StoreProbe => None,
        }
    }
}
