//! Prometheus metrics: `GET /metrics` in the OpenMetrics text format (or,
//! for a scraper that does not prefer it, Prometheus's text format), on the
//! admin address (behind the admin token, like the API) and on the
//! `metrics_listen` address (no token; loopback unless the admin chose
//! otherwise).
//!
//! Two kinds of numbers. What the server layers see as it happens (QUIC
//! requests by kind and outcome and their latency, upload bytes, store
//! fsyncs and their groups, how long the grid lock is held) is kept in
//! [`Metrics`]' own registry by the code that sees it. What the grid knows
//! (units issued, accepted, expired, aborted and replicated, pages and
//! links accepted, jobs by state, active hosts, a round's progress) is read
//! at scrape time from one [`GridSnapshot`] taken briefly under the grid
//! lock, so the sans-I/O grid keeps plain counts and never sees a metric.
//!
//! Invariants: every family is named `beebot_…` in base units, counters end
//! in `_total`, and every label value comes from a closed enum
//! ([`RequestKind`], [`Outcome`], [`UnitEvent`], job states, activity
//! windows): no site, URL or host id ever becomes a label. Recording on the
//! request path is a few atomic adds, never an allocation once a label set
//! has been seen. It never serves anything but `/metrics`, and never takes
//! the grid lock except for the one snapshot per scrape.
//!
//! `prometheus-client`, not the `metrics` crate: an explicit registry per
//! server suits the sans-I/O grid and tests that run several servers in one
//! process.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use beebot_shared::proto::{ErrorCode, Request, Response as Answer};

use crate::grid::GridSnapshot;
use crate::store::SyncObserver;
use crate::{now_ms, Shared};

/// Prefix of every metric family.
pub const PREFIX: &str = "beebot";
/// The scrape's content type when the scraper asks for OpenMetrics
/// (Prometheus does, first)...
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// ...and otherwise: Prometheus's text format ([`text_format`]).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Request latency buckets: 0.5 ms doubling to 16 s (an upload's decoding
/// and two fsyncs stay well inside).
const REQUEST_BUCKETS: (f64, f64, u16) = (0.0005, 2.0, 16);
/// fsync latency buckets: 0.1 ms doubling to about 3 s.
const FSYNC_BUCKETS: (f64, f64, u16) = (0.0001, 2.0, 16);
/// Group-commit group sizes: 1 doubling to 512 callers per fsync.
const GROUP_BUCKETS: (f64, f64, u16) = (1.0, 2.0, 10);
/// Grid lock hold buckets: 10 µs doubling to about 1.3 s.
const LOCK_BUCKETS: (f64, f64, u16) = (0.00001, 2.0, 18);

/// A closed set of label values: each variant's text.
pub(crate) trait LabelText: Copy + 'static {
    const ALL: &'static [Self];
    fn text(self) -> &'static str;
}

/// Encode a [`LabelText`] as its text.
macro_rules! label_value {
    ($t:ty) => {
        impl EncodeLabelValue for $t {
            fn encode(&self, e: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                e.write_str(self.text())
            }
        }
    };
}

/// The QUIC protocol's requests, by kind; `Undecodable` for a frame that is
/// no request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestKind {
    Challenge,
    ProveProject,
    Enrol,
    Hello,
    Benchmark,
    Resources,
    Concurrency,
    RequestWork,
    Progress,
    Upload,
    UploadPart,
    FetchState,
    Fail,
    Leave,
    Undecodable,
}

impl LabelText for RequestKind {
    const ALL: &'static [Self] = &[
        Self::Challenge,
        Self::ProveProject,
        Self::Enrol,
        Self::Hello,
        Self::Benchmark,
        Self::Resources,
        Self::Concurrency,
        Self::RequestWork,
        Self::Progress,
        Self::Upload,
        Self::UploadPart,
        Self::FetchState,
        Self::Fail,
        Self::Leave,
        Self::Undecodable,
    ];
    fn text(self) -> &'static str {
        match self {
            Self::Challenge => "challenge",
            Self::ProveProject => "prove_project",
            Self::Enrol => "enrol",
            Self::Hello => "hello",
            Self::Benchmark => "benchmark",
            Self::Resources => "resources",
            Self::Concurrency => "concurrency",
            Self::RequestWork => "request_work",
            Self::Progress => "progress",
            Self::Upload => "upload",
            Self::UploadPart => "upload_part",
            Self::FetchState => "fetch_state",
            Self::Fail => "fail",
            Self::Leave => "leave",
            Self::Undecodable => "undecodable",
        }
    }
}
label_value!(RequestKind);

impl RequestKind {
    pub fn of(req: &Request) -> RequestKind {
        match req {
            Request::Challenge => Self::Challenge,
            Request::ProveProject { .. } => Self::ProveProject,
            Request::Enrol { .. } => Self::Enrol,
            Request::Hello { .. } => Self::Hello,
            Request::Benchmark { .. } => Self::Benchmark,
            Request::Resources(_) => Self::Resources,
            Request::Concurrency { .. } => Self::Concurrency,
            Request::RequestWork { .. } => Self::RequestWork,
            // Both forms of a progress report are one kind of request.
            Request::Progress { .. } | Request::ScanProgressAll { .. } => Self::Progress,
            Request::Upload { .. } => Self::Upload,
            Request::UploadPart { .. } => Self::UploadPart,
            Request::FetchState { .. } => Self::FetchState,
            Request::Fail { .. } => Self::Fail,
            Request::Leave => Self::Leave,
        }
    }
}

/// How a request was answered: `ok`, a refusal of the grid's (`rejected`
/// upload, `duplicate`, `abort` of the unit), or the error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Ok,
    Rejected,
    Duplicate,
    Abort,
    Upgrade,
    NotAuthenticated,
    UnknownHost,
    Revoked,
    BadInvite,
    BadRequest,
    Internal,
    NameTaken,
}

impl LabelText for Outcome {
    const ALL: &'static [Self] = &[
        Self::Ok,
        Self::Rejected,
        Self::Duplicate,
        Self::Abort,
        Self::Upgrade,
        Self::NotAuthenticated,
        Self::UnknownHost,
        Self::Revoked,
        Self::BadInvite,
        Self::BadRequest,
        Self::Internal,
        Self::NameTaken,
    ];
    fn text(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Rejected => "rejected",
            Self::Duplicate => "duplicate",
            Self::Abort => "abort",
            Self::Upgrade => "upgrade",
            Self::NotAuthenticated => "not_authenticated",
            Self::UnknownHost => "unknown_host",
            Self::Revoked => "revoked",
            Self::BadInvite => "bad_invite",
            Self::BadRequest => "bad_request",
            Self::Internal => "internal",
            Self::NameTaken => "name_taken",
        }
    }
}
label_value!(Outcome);

impl Outcome {
    pub fn of(answer: &Answer) -> Outcome {
        match answer {
            Answer::Rejected { .. } => Self::Rejected,
            Answer::Duplicate => Self::Duplicate,
            Answer::Abort { .. } => Self::Abort,
            Answer::Error { code, .. } => match code {
                ErrorCode::Upgrade => Self::Upgrade,
                ErrorCode::NotAuthenticated => Self::NotAuthenticated,
                ErrorCode::UnknownHost => Self::UnknownHost,
                ErrorCode::Revoked => Self::Revoked,
                ErrorCode::BadInvite => Self::BadInvite,
                ErrorCode::BadRequest => Self::BadRequest,
                ErrorCode::Internal => Self::Internal,
                ErrorCode::NameTaken => Self::NameTaken,
            },
            _ => Self::Ok,
        }
    }
}

/// What happened to units, as the grid counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnitEvent {
    Issued,
    Replicated,
    Accepted,
    Expired,
    Recalled,
    Aborted,
}

impl LabelText for UnitEvent {
    const ALL: &'static [Self] = &[
        Self::Issued,
        Self::Replicated,
        Self::Accepted,
        Self::Expired,
        Self::Recalled,
        Self::Aborted,
    ];
    fn text(self) -> &'static str {
        match self {
            Self::Issued => "issued",
            Self::Replicated => "replicated",
            Self::Accepted => "accepted",
            Self::Expired => "expired",
            Self::Recalled => "recalled",
            Self::Aborted => "aborted",
        }
    }
}
label_value!(UnitEvent);

/// A job's state, as a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobStateLabel {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl LabelText for JobStateLabel {
    const ALL: &'static [Self] = &[
        Self::Queued,
        Self::Running,
        Self::Done,
        Self::Failed,
        Self::Cancelled,
    ];
    fn text(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}
label_value!(JobStateLabel);

/// How recently a host was seen to count as active.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Within {
    Hour,
    Day,
}

impl LabelText for Within {
    const ALL: &'static [Self] = &[Self::Hour, Self::Day];
    fn text(self) -> &'static str {
        match self {
            Self::Hour => "1h",
            Self::Day => "1d",
        }
    }
}
label_value!(Within);

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    kind: RequestKind,
    outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: RequestKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EventLabels {
    event: UnitEvent,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: JobStateLabel,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WithinLabels {
    within: Within,
}

/// Makes the request latency histograms of a family.
#[derive(Clone)]
struct RequestHistogram;

impl MetricConstructor<Histogram> for RequestHistogram {
    fn new_metric(&self) -> Histogram {
        histogram(REQUEST_BUCKETS)
    }
}

fn histogram((start, factor, count): (f64, f64, u16)) -> Histogram {
    Histogram::new(exponential_buckets(start, factor, count))
}

/// The server's live metrics and their registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<KindLabels, Histogram, RequestHistogram>,
    upload_bytes: Counter,
    fsync: Histogram,
    sync_group: Histogram,
    link_fsync: Histogram,
    link_sync_group: Histogram,
    lock_hold: Histogram,
    /// Done sites whose kept link files cannot be read whole.
    damaged_sites: Gauge,
    /// 1 while the store has failed (fail-stop), else 0.
    store_failed: Gauge,
    /// When this server started, Unix seconds.
    started_s: f64,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(now_ms())
    }
}

impl Metrics {
    /// Done sites now known damaged ([`crate::damage`]).
    pub fn set_damaged_sites(&self, n: u64) {
        self.damaged_sites.set(gauge_value(n));
    }

    /// Whether the store has failed (see [`crate::Shared::store_failure`]).
    pub fn set_store_failed(&self, failed: bool) {
        self.store_failed.set(i64::from(failed));
    }

    /// Empty metrics of a server started at `started_ms` (Unix ms).
    pub fn new(started_ms: u64) -> Metrics {
        let m = Metrics {
            registry: Registry::with_prefix(PREFIX),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(RequestHistogram),
            upload_bytes: Counter::default(),
            fsync: histogram(FSYNC_BUCKETS),
            sync_group: histogram(GROUP_BUCKETS),
            link_fsync: histogram(FSYNC_BUCKETS),
            link_sync_group: histogram(GROUP_BUCKETS),
            lock_hold: histogram(LOCK_BUCKETS),
            damaged_sites: Gauge::default(),
            store_failed: Gauge::default(),
            started_s: started_ms as f64 / 1000.0,
        };
        m.register()
    }

    fn register(mut self) -> Metrics {
        // Every kind's series exist from the start (at zero), so a rate
        // over the first requests of a kind is not lost.
        for &kind in RequestKind::ALL {
            let outcome = Outcome::Ok;
            drop(
                self.requests
                    .get_or_create(&RequestLabels { kind, outcome }),
            );
            drop(self.request_duration.get_or_create(&KindLabels { kind }));
        }
        let r = &mut self.registry;
        r.register(
            "store_failed",
            "1 while the store has failed (a full disk): nothing is acknowledged until its disk takes writes again and the server starts afresh",
            self.store_failed.clone(),
        );
        r.register(
            "damaged_sites",
            "Done sites whose kept link files cannot be read whole (found at start, by `check` or by an export)",
            self.damaged_sites.clone(),
        );
        r.register(
            "requests",
            "QUIC requests answered, by kind (the request, or undecodable) and outcome (ok, a refusal of the grid's: rejected, duplicate, abort; or the error code)",
            self.requests.clone(),
        );
        r.register_with_unit(
            "request_duration",
            "Time from a decoded QUIC request to its answer, by kind",
            Unit::Seconds,
            self.request_duration.clone(),
        );
        r.register_with_unit(
            "upload",
            "Bytes of upload requests received (link files and scan states)",
            Unit::Bytes,
            self.upload_bytes.clone(),
        );
        for (name, help, h) in [
            (
                "store_fsync_duration",
                "Time one store fsync took",
                &self.fsync,
            ),
            (
                "link_fsync_duration",
                "Time one fsync of a round's link pack took",
                &self.link_fsync,
            ),
            (
                "grid_lock_hold_duration",
                "Time one call on the grid's thread took (the grid lock's hold: every call runs alone there)",
                &self.lock_hold,
            ),
        ] {
            r.register_with_unit(name, help, Unit::Seconds, h.clone());
        }
        r.register(
            "store_sync_group_size",
            "Sync calls one store fsync served (group commit): its own and those that waited for it, observed when the next fsync begins",
            self.sync_group.clone(),
        );
        r.register(
            "link_sync_group_size",
            "Link files, scan states and removals one link pack fsync made durable (group commit: uploads landing together share one)",
            self.link_sync_group.clone(),
        );
        self
    }

    /// A QUIC request of `kind` was answered `answer` after `took`.
    pub fn answered(&self, kind: RequestKind, answer: &Answer, took: Duration) {
        let outcome = Outcome::of(answer);
        self.requests
            .get_or_create(&RequestLabels { kind, outcome })
            .inc();
        self.request_duration
            .get_or_create(&KindLabels { kind })
            .observe(took.as_secs_f64());
    }

    /// An upload request of `bytes` (its whole frame) was received.
    pub fn uploaded(&self, bytes: usize) {
        self.upload_bytes.inc_by(bytes as u64);
    }

    /// The grid's thread ran one call for `held`, its writes handed to the
    /// store included.
    pub fn lock_held(&self, held: Duration) {
        self.lock_hold.observe(held.as_secs_f64());
    }

    /// The OpenMetrics text of these metrics and of `grid`, ending `# EOF`.
    pub fn render(&self, grid: &GridSnapshot) -> Result<String, std::fmt::Error> {
        self.render_with_memory(grid, resident_memory_bytes())
    }

    /// [`Metrics::render`] with the process's resident memory given
    /// (`None`: not known, and not served).
    pub(crate) fn render_with_memory(
        &self,
        grid: &GridSnapshot,
        resident_bytes: Option<u64>,
    ) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)?;
        encode_registry(&mut out, &self.scrape_registry(grid, resident_bytes))?;
        encode_eof(&mut out)?;
        Ok(out)
    }

    /// The numbers read at scrape time: the grid's, and the process's.
    fn scrape_registry(&self, grid: &GridSnapshot, resident_bytes: Option<u64>) -> Registry {
        let mut r = Registry::with_prefix(PREFIX);
        let c = &grid.counters;
        let units: Family<EventLabels, Counter> = Family::default();
        for (event, n) in [
            (UnitEvent::Issued, c.units_issued),
            (UnitEvent::Replicated, c.units_replicated),
            (UnitEvent::Accepted, c.units_accepted),
            (UnitEvent::Expired, c.units_expired),
            (UnitEvent::Recalled, c.units_recalled),
            (UnitEvent::Aborted, c.units_aborted),
        ] {
            units.get_or_create(&EventLabels { event }).inc_by(n);
        }
        r.register(
            "units",
            "Units by what happened to them (recalled: not started while their host was silent)",
            units,
        );
        r.register(
            "parts_accepted",
            "Parts of running scans accepted (each kept for a takeover to start from)",
            counter(c.parts_accepted),
        );
        r.register(
            "pages_accepted",
            "Pages of accepted uploads, parts included",
            counter(c.pages_accepted),
        );
        r.register(
            "links_accepted",
            "Links of accepted uploads, parts included",
            counter(c.links_accepted),
        );
        let jobs: Family<StateLabels, Gauge> = Family::default();
        let j = &grid.jobs;
        for (state, n) in [
            (JobStateLabel::Queued, j.queued),
            (JobStateLabel::Running, j.running),
            (JobStateLabel::Done, j.done),
            (JobStateLabel::Failed, j.failed),
            (JobStateLabel::Cancelled, j.cancelled),
        ] {
            jobs.get_or_create(&StateLabels { state })
                .set(gauge_value(n));
        }
        r.register(
            "jobs",
            "Jobs of the running rounds (the newest round when none runs), by state",
            jobs,
        );
        let rounds: Gauge = Gauge::default();
        rounds.set(gauge_value(grid.rounds_running));
        r.register("rounds_running", "Rounds running", rounds);
        let hosts: Family<WithinLabels, Gauge> = Family::default();
        for (within, n) in [
            (Within::Hour, grid.hosts_active_hour),
            (Within::Day, grid.hosts_active_day),
        ] {
            hosts
                .get_or_create(&WithinLabels { within })
                .set(gauge_value(n));
        }
        r.register(
            "hosts_active",
            "Hosts (not revoked or left) seen within the last hour or day",
            hosts,
        );
        if let Some(p) = grid.round_progress {
            r.register_with_unit(
                "round_progress",
                "Share of jobs over (0 to 1) in the oldest running round, or the newest round when none runs; absent before the first round",
                Unit::Other("ratio".into()),
                float_gauge(p),
            );
        }
        self.register_process(&mut r, resident_bytes);
        r
    }

    /// The process's memory and start time.
    fn register_process(&self, r: &mut Registry, resident_bytes: Option<u64>) {
        if let Some(rss) = resident_bytes {
            r.register_with_unit(
                "process_resident_memory",
                "Resident memory of the server process (VmRSS: Linux only)",
                Unit::Bytes,
                float_gauge(rss as f64),
            );
        }
        r.register_with_unit(
            "process_start_time",
            "When the server started, Unix time",
            Unit::Seconds,
            float_gauge(self.started_s),
        );
    }
}

impl SyncObserver for Metrics {
    fn synced(&self, took: Duration, group: u64) {
        self.fsync.observe(took.as_secs_f64());
        self.sync_group.observe(group as f64);
    }
}

/// The link packs' syncs, told to the metrics ([`Metrics::link_syncs`]).
struct LinkSyncs(Arc<Metrics>);

impl SyncObserver for LinkSyncs {
    fn synced(&self, took: Duration, group: u64) {
        self.0.link_fsync.observe(took.as_secs_f64());
        self.0.link_sync_group.observe(group as f64);
    }
}

impl Metrics {
    /// What the link packs tell of their syncs.
    pub fn link_syncs(self: &Arc<Self>) -> Arc<dyn SyncObserver> {
        Arc::new(LinkSyncs(self.clone()))
    }
}

fn counter(n: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(n);
    c
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn float_gauge(v: f64) -> Gauge<f64, std::sync::atomic::AtomicU64> {
    let g = Gauge::default();
    g.set(v);
    g
}

/// The process's resident memory (`VmRSS` of `/proc/self/status`); `None`
/// where there is no such file (not Linux).
pub fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    vm_rss_bytes(&status)
}

/// `VmRSS:   1234 kB` → bytes.
fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        _ => None,
    }
}

/// Whether an `Accept` header prefers OpenMetrics to Prometheus's text
/// format (by their q-values; `*/*` and `text/*` count for text, which a
/// client that names neither gets).
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut open, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let kind = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, q)| q.trim().parse::<f32>().unwrap_or(0.0));
        match kind.as_str() {
            "application/openmetrics-text" => open = open.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    open > 0.0 && open >= text
}

/// Prometheus's text format (0.0.4) of an OpenMetrics render: a counter's
/// `# HELP` and `# TYPE` name its `_total` samples (as `promtool check
/// metrics` wants), and what the text format has no place for (`# UNIT`,
/// `_created` samples, `# EOF`) is left out.
pub fn text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        if let Some((prefix, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            if counters.contains(name) {
                out.push_str(&format!("{prefix}{name}_total {tail}\n"));
                continue;
            }
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap_or("");
            if name.ends_with("_created") {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The scrape: a grid snapshot under the lock, rendered outside it, in
/// OpenMetrics or Prometheus's text format as the scraper asks.
async fn scrape(shared: Arc<Shared>, openmetrics: bool) -> Response {
    shared
        .metrics
        .set_store_failed(shared.store_failure().is_some());
    let snapshot = shared.with_grid(|g| g.metrics_snapshot(now_ms())).await;
    match shared.metrics.render(&snapshot) {
        // Caches keep the two formats apart.
        Ok(text) if openmetrics => (
            [
                (header::CONTENT_TYPE, CONTENT_TYPE),
                (header::VARY, "Accept"),
            ],
            text,
        )
            .into_response(),
        Ok(text) => (
            [
                (header::CONTENT_TYPE, TEXT_CONTENT_TYPE),
                (header::VARY, "Accept"),
            ],
            text_format(&text),
        )
            .into_response(),
        Err(e) => {
            tracing::error!("cannot encode the metrics: {e}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode the metrics",
            )
                .into_response()
        }
    }
}

/// `GET /metrics` (on the admin API, behind its authentication).
pub async fn get_metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    scrape(shared, wants_openmetrics(accept)).await
}

/// What the metrics address lets its clients hold: a scraper or two.
pub const LIMITS: beebot_shared::httpcap::Limits = beebot_shared::httpcap::Limits {
    connections: 32,
    per_address: 8,
    header: std::time::Duration::from_secs(10),
    idle: std::time::Duration::from_secs(60),
};

/// The `metrics_listen` address's router: `GET /metrics`, no token. On a
/// loopback address only the address's own names are answered (a web page
/// whose name was rebound to 127.0.0.1 reads nothing); an address an admin
/// opened to the network is scraped by whatever name Prometheus uses.
pub fn router(shared: Arc<Shared>, addr: SocketAddr) -> Router {
    let router = Router::new()
        .route("/metrics", get(get_metrics))
        .with_state(shared);
    if !addr.ip().is_loopback() {
        return router;
    }
    let allowed = Arc::new(crate::hostcheck::allowed_hosts(addr));
    router.layer(axum::middleware::from_fn_with_state(allowed, check_host))
}

async fn check_host(
    State(allowed): State<Arc<Vec<String>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::hostcheck::refuse_other_host(&allowed, &request, "the metrics address") {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests;
