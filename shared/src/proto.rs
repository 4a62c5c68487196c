//! Protocol messages (QUIC, ALPN `beebot/1`): one request and one response per
//! bidirectional stream, each one frame of [`crate::codec`].
//!
//! `WorkAvailable` is the only message the server pushes (on a unidirectional
//! stream of an authenticated connection); every other response answers a
//! request. New requests are appended to `Request` (`Resources`, then
//! `Concurrency`, `UploadPart` and `ScanProgressAll`), so
//! earlier ones keep their encoding; a server that does not know one answers
//! `BadRequest`.

use serde::{Deserialize, Serialize};

use crate::linkfile::ScanSummary;
use crate::sign::SignedUnit;

/// ALPN protocol name of this protocol.
pub const ALPN: &[u8] = b"beebot/1";

/// What a host says about itself when it enrols.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub name: String,
    pub os: String,
    pub client_version: String,
    pub cores: u32,
}

/// Client → server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Ask for this connection's nonce (the first request of every connection).
    Challenge,
    /// Enrol a new host with an invite token. `proof` signs nonce ‖ fingerprint
    /// with the new host key, so the key is proven held.
    Enrol {
        token: Vec<u8>,
        host_key: [u8; 32],
        host_info: HostInfo,
        proof: Vec<u8>,
    },
    /// Authenticate this connection as an enrolled host.
    Hello { host_id: u64, proof: Vec<u8> },
    /// Reference-site benchmark result.
    Benchmark {
        pages_per_s: f64,
        kb_per_s: f64,
        slots: u32,
    },
    /// Ask for work: seconds of work wanted, free slots, units already held.
    RequestWork {
        want_seconds: u64,
        free_slots: u32,
        units_held: Vec<u64>,
        /// When the host may crawl: open intervals `[start, end)` in seconds
        /// from now, over the next two weeks (`None`: always). The server sends
        /// only work whose deadline the host can meet inside them.
        open_windows: Option<Vec<(u64, u64)>>,
    },
    /// A unit's scan is still running.
    Progress {
        unit_id: u64,
        pages: u64,
        links: u64,
    },
    /// A unit's result. A scan that ended before its natural end (the
    /// round's time budget, a stop) carries its frontier as an encoded
    /// [`crate::scanstate::ScanState`], so the job continues from there.
    Upload {
        unit_id: u64,
        summary: ScanSummary,
        #[serde(with = "crate::codec::bytes")]
        link_file: Vec<u8>,
        #[serde(with = "crate::codec::bytes::option")]
        state: Option<Vec<u8>>,
    },
    /// The frontier a continuation unit starts from (`WorkUnit::resume`).
    FetchState { unit_id: u64 },
    /// The host gives a unit back without a result (its scan failed).
    Fail { unit_id: u64, reason: String },
    /// The host leaves the project: its units go back to the queue at once and
    /// its key is refused from now on.
    Leave,
    /// Before enrolling, a joining client asks the server to prove it holds
    /// the project key of the invite: answered `ProjectProof`, a signature
    /// over a reserved context ‖ this fresh nonce ‖ the certificate
    /// fingerprint (`sign::make_enrol_proof`), never over anything else.
    ProveProject { nonce: [u8; 32] },
    /// What the host offers its scans beyond slots, sent after every
    /// `Hello` and whenever its settings change; answered `Ack`. (Last in
    /// the enum so that older hosts' requests keep their encoding.)
    Resources(HostResources),
    /// The sites the host scans at once now: its client sizes its
    /// concurrency itself (up to its `slots` ceiling) and says so after
    /// every `Hello` and whenever it changes; answered `Ack`. The server
    /// lets a host hold units for this many slots (see the grid's
    /// `units_cap`). (Appended after `Resources` so that every earlier
    /// request keeps its encoding; a server that does not know it answers
    /// `BadRequest`, and the client stops telling it.)
    Concurrency { slots: u32 },
    /// A part of a running scan: its records and frontier from its
    /// previous part (or its start) up to a checkpoint, sent every
    /// [`PART_INTERVAL_S`](crate::limits::PART_INTERVAL_S) while it runs,
    /// so that a host taking the site over starts there. `index` counts
    /// the unit's parts from 0: a part sent again (its answer lost) is a
    /// `Duplicate`. Answered `Accepted` or `Duplicate` (the scan goes on
    /// and its next upload starts after this part), `Ack` (not kept: the
    /// job holds its most parts; the scan goes on, sends no more parts and
    /// uploads the rest at its end), or `Rejected` (the scan is not
    /// wanted: the host stops it and drops the unit).
    /// (Appended after `Concurrency`; a server that does not know it
    /// answers `BadRequest`, and the client sends no more parts to it.)
    UploadPart {
        unit_id: u64,
        index: u32,
        summary: ScanSummary,
        #[serde(with = "crate::codec::bytes")]
        link_file: Vec<u8>,
        #[serde(with = "crate::codec::bytes")]
        state: Vec<u8>,
    },
    /// The progress of several running scans in one request, each as
    /// `Progress` carries it with the body bytes read so far (counted like
    /// its pages, from the unit's start; the dashboard's KB/s): answered
    /// `Progressed`, one answer a report in their order, each as `Progress`
    /// is answered. At most
    /// [`MAX_REPORTS_PER_REQUEST`](crate::limits::MAX_REPORTS_PER_REQUEST)
    /// reports, each unit once. (Appended after `UploadPart`; a server
    /// that does not know it (0.1.0's) answers `BadRequest`, and the
    /// client reports scan by scan to it, as `Progress`.)
    ScanProgressAll { reports: Vec<ScanReport> },
}

/// One running scan's progress from its unit's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanReport {
    pub unit_id: u64,
    pub pages: u64,
    pub links: u64,
    /// Body bytes read so far (the dashboard's KB/s).
    pub bytes: u64,
}

/// What a progress report hears: the answers `Progress` has, one for each
/// report of `ScanProgressAll`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScanAnswer {
    /// The scan goes on.
    Continue,
    /// The scan stops (`ABORT_HAND_OVER`: at a page boundary, uploading
    /// what it did with its frontier).
    Abort { reason: String },
    /// The scan goes on with this later deadline.
    Extend { deadline_ms: u64 },
}

impl From<ScanAnswer> for Response {
    fn from(a: ScanAnswer) -> Response {
        match a {
            ScanAnswer::Continue => Response::Continue,
            ScanAnswer::Abort { reason } => Response::Abort { reason },
            ScanAnswer::Extend { deadline_ms } => Response::Extend { deadline_ms },
        }
    }
}

/// What a host offers its scans beyond slots: the `pack` policy fits the
/// scans a host would run at once into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostResources {
    /// Memory its scans may hold together, MB.
    pub memory_mb: u32,
    /// Its download cap over all scans, KB/s (0: no cap).
    pub bandwidth_kbps: u64,
}

/// What the server tells hosts in `Welcome`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyHints {
    /// Ask for work again at least this often while busy, seconds.
    pub request_interval_s: u64,
    /// Send `Progress` for a running unit this often, seconds.
    pub progress_interval_s: u64,
}

/// Refusal reasons a client can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The peer speaks another protocol version.
    Upgrade,
    /// No valid `Hello` on this connection yet.
    NotAuthenticated,
    /// Unknown host id or bad proof.
    UnknownHost,
    /// The host was revoked by the admin.
    Revoked,
    /// The invite token is unknown, expired or used up.
    BadInvite,
    /// The request was malformed or too large.
    BadRequest,
    /// The server cannot answer now (its storage failed, or an upload of
    /// the same unit is in progress): try again later.
    Internal,
    /// Another active host has the name asked for at `Enrol`: nothing was
    /// spent; ask again with another name.
    NameTaken,
}

/// Server → client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Nonce {
        nonce: [u8; 32],
    },
    Enrolled {
        host_id: u64,
    },
    Welcome {
        /// Server clock, Unix milliseconds: deadlines are in server time.
        server_time_ms: u64,
        reference_site: String,
        policy_hints: PolicyHints,
    },
    Ack,
    Work {
        units: Vec<SignedUnit>,
        /// When there are no units: ask again after this many seconds.
        retry_after_s: Option<u64>,
        /// Some round still has unfinished jobs that may come to this host
        /// (e.g. reissued after a deadline). `false` means the grid is idle.
        rounds_open: bool,
        /// Units the request named as held that the host drops and never
        /// starts (or stops): of a cancelled round or an excluded site, or
        /// taken back while the host was away and given to another since.
        cancelled_units: Vec<u64>,
    },
    Continue,
    Abort {
        reason: String,
    },
    Extend {
        deadline_ms: u64,
    },
    Accepted,
    Duplicate,
    /// The encoded scan state a continuation unit resumes from.
    State {
        #[serde(with = "crate::codec::bytes")]
        bytes: Vec<u8>,
    },
    Rejected {
        reason: String,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// Pushed by the server on a uni stream of an authenticated connection
    /// (never an answer to a request): a round started or was cancelled, so
    /// the host sends `RequestWork` now instead of at its `retry_after` (for
    /// the new work, or to hear which held units to drop).
    WorkAvailable,
    /// The answer to `ProveProject`.
    ProjectProof {
        signature: Vec<u8>,
    },
    /// The answer to `ScanProgressAll`: one answer a report, in their
    /// order. (Appended last, so every earlier response keeps its
    /// encoding.)
    Progressed {
        answers: Vec<ScanAnswer>,
    },
}

/// The reason of the `Abort` that answers `Progress` and `FetchState` (and of
/// the `Rejected` that answers `Upload`) for a unit of a cancelled round: the
/// host then drops every unit it holds of that round.
pub const ABORT_ROUND_CANCELLED: &str = "round cancelled";

/// The reason of the `Abort` that answers `Progress` when the grid wants the
/// scan on another host (the scheduler wanted a second copy of it): the host
/// stops the scan at a page boundary and uploads what it did with its
/// frontier, and the job continues from there elsewhere. Two copies of a job
/// never crawl a site at once, so the round's delay holds for the grid.
pub const ABORT_HAND_OVER: &str = "hand over";
