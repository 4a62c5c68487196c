//! What the load measured: a latency histogram per request kind (HDR, from
//! the moment a request was due to be sent, so a slow server's backlog
//! counts against it instead of slowing the load down), counters, and the
//! table the run prints.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Longest latency a histogram records exactly, µs (longer ones are
/// counted at it).
const MAX_LATENCY_US: u64 = 120_000_000;
/// Significant figures the histograms keep.
const SIGFIGS: u8 = 3;

/// The kinds of request the table shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A work request answered with at least one unit.
    WorkWithUnits,
    /// A work request answered with none (the host's buffer is full, or
    /// nothing it may take now).
    WorkEmpty,
    Upload,
    Progress,
}

pub const KINDS: [Kind; 4] = [
    Kind::WorkWithUnits,
    Kind::WorkEmpty,
    Kind::Upload,
    Kind::Progress,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::WorkWithUnits => "work, units",
            Kind::WorkEmpty => "work, none",
            Kind::Upload => "upload",
            Kind::Progress => "progress",
        }
    }
}

/// One kind's latencies, µs.
pub struct Latencies(Mutex<Histogram<u64>>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Mutex::new(
            Histogram::new_with_bounds(1, MAX_LATENCY_US, SIGFIGS).expect("histogram bounds"),
        ))
    }
}

impl Latencies {
    pub fn add(&self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        self.lock().saturating_record(us);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histogram<u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self) -> u64 {
        self.lock().len()
    }

    /// The latency at quantile `q`, ms.
    pub fn ms_at(&self, q: f64) -> f64 {
        let h = self.lock();
        if h.is_empty() {
            return 0.0;
        }
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Everything one stretch of load counted.
#[derive(Default)]
pub struct Stats {
    pub work_units: Latencies,
    pub work_empty: Latencies,
    pub upload: Latencies,
    pub progress: Latencies,
    pub hello: Latencies,
    /// Units handed out, and of their uploads those accepted, answered
    /// otherwise (rejected, duplicate), and failed (no answer, an error).
    pub units: AtomicU64,
    pub accepted: AtomicU64,
    pub not_accepted: AtomicU64,
    /// Records in the link files uploaded, and their bytes.
    pub records: AtomicU64,
    pub upload_bytes: AtomicU64,
    /// Requests that got no answer or an error answer (their latency is not
    /// in the histograms).
    pub errors: AtomicU64,
    /// The first error or refusal seen, for the table.
    pub first_error: Mutex<Option<String>>,
    /// Upload times that came while the host held nothing to upload.
    pub nothing_to_upload: AtomicU64,
    /// Work times at which the host's buffer was full, so it did not ask
    /// (`fetch_rules::work_wanted`, as the client does).
    pub buffer_full: AtomicU64,
}

/// Where a request's figures go, by when it was due: the warm-up's or the
/// measured stretch's. One schedule runs through both, so the measured
/// stretch starts with whatever backlog the warm-up left, as load does.
pub struct Sinks {
    pub warm: Stats,
    pub measured: Stats,
    pub from: tokio::time::Instant,
}

impl Sinks {
    pub fn at(&self, due: tokio::time::Instant) -> &Stats {
        if due < self.from {
            &self.warm
        } else {
            &self.measured
        }
    }
}

impl Stats {
    pub fn of(&self, kind: Kind) -> &Latencies {
        match kind {
            Kind::WorkWithUnits => &self.work_units,
            Kind::WorkEmpty => &self.work_empty,
            Kind::Upload => &self.upload,
            Kind::Progress => &self.progress,
        }
    }

    pub fn error(&self, what: impl FnOnce() -> String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.note_first(what);
    }

    /// Keep `what` if it is the first error or refusal seen.
    pub fn note_first(&self, what: impl FnOnce() -> String) {
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(what());
        }
    }

    pub fn work_requests(&self) -> u64 {
        self.work_units.count() + self.work_empty.count()
    }
}

/// What the server process used over the measured stretch.
pub struct ServerUse {
    pub cpu_s: f64,
    pub rss_idle_mb: f64,
    pub rss_mb: f64,
    pub peak_mb: f64,
}

fn row(name: &str, count: u64, secs: f64, l: &Latencies) {
    println!(
        "{name:<16} {count:>9} {:>9.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        count as f64 / secs,
        l.ms_at(0.50),
        l.ms_at(0.99),
        l.ms_at(0.999),
        l.ms_at(1.0)
    );
}

/// The table of one measured stretch of `secs`.
pub fn print_table(stats: &Stats, secs: f64, server: &ServerUse, load_cpu_s: f64) {
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "request", "count", "per s", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
    );
    for kind in KINDS {
        let l = stats.of(kind);
        row(kind.name(), l.count(), secs, l);
    }
    let work = stats.work_requests();
    println!("{:<16} {work:>9} {:>9.0}", "work, all", work as f64 / secs);
    println!();
    let units = stats.units.load(Ordering::Relaxed);
    let accepted = stats.accepted.load(Ordering::Relaxed);
    let records = stats.records.load(Ordering::Relaxed);
    let uploads = stats.upload.count();
    let line = |what: &str, v: String| println!("{what:<34} {v:>12}");
    line("units handed out", units.to_string());
    line("uploads accepted", accepted.to_string());
    line(
        "uploads answered otherwise",
        stats.not_accepted.load(Ordering::Relaxed).to_string(),
    );
    line(
        "records per upload (mean)",
        format!("{:.0}", records as f64 / uploads.max(1) as f64),
    );
    line(
        "upload MB/s",
        format!(
            "{:.1}",
            stats.upload_bytes.load(Ordering::Relaxed) as f64 / 1e6 / secs
        ),
    );
    line(
        "work times with a full buffer",
        stats.buffer_full.load(Ordering::Relaxed).to_string(),
    );
    line(
        "upload times with nothing held",
        stats.nothing_to_upload.load(Ordering::Relaxed).to_string(),
    );
    line("errors", stats.errors.load(Ordering::Relaxed).to_string());
    line("server CPU, cores", format!("{:.2}", server.cpu_s / secs));
    line(
        "load generator CPU, cores",
        format!("{:.2}", load_cpu_s / secs),
    );
    line("server RSS idle, MB", format!("{:.0}", server.rss_idle_mb));
    line("server RSS after, MB", format!("{:.0}", server.rss_mb));
    line("server peak RSS, MB", format!("{:.0}", server.peak_mb));
    if let Some(e) = stats
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        println!("first error: {e}");
    }
}
