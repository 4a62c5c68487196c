//! Fixtures shared by the grid's tests: a grid in a temporary directory
//! ([`Fx`]), round parameters, enrolled hosts, link records and summaries.

use crate::grid::*;
use std::fs;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::proto::HostInfo;
use beebot_shared::scanstate::ScanState;
use beebot_shared::scope::{Exclusion, Scope};
use beebot_shared::sign::{self, WorkUnit};

use crate::model::*;
use crate::validate::ValidateMode;
use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::{LinkFileHeader, LinkRecord};
use ed25519_dalek::VerifyingKey;
use tempfile::TempDir;

/// A fixed start time (Unix ms); every test drives time from here.
pub(crate) const T0: u64 = 1_700_000_000_000;
pub(crate) const HOUR_MS: u64 = 3_600_000;
/// The deadline window of a never-scanned site on a host with no speed figure
/// under [`params`]: what the round allows, its 50-page cap at 5 pages/s =
/// 10 s, × slack 3 + grace 10 s = 40 s.
pub(crate) const WINDOW_MS: u64 = 40_000;

/// A grid over a store and link packs in a temporary directory. The grid
/// comes first: dropped before the directory, it persists what is left.
pub(crate) struct Fx {
    pub(crate) grid: Stored,
    pub(crate) dir: TempDir,
    pub(crate) key: SigningKey,
}

pub(crate) fn settings() -> GridSettings {
    GridSettings {
        user_agent: "BeeBot/test (+http://example.test/bot)".into(),
        deadline_slack: 3.0,
        deadline_grace_s: 10,
        trust_after: 2,
        spot_check_percent: 0,
    }
}

pub(crate) fn open_grid(dir: &Path, key: &SigningKey) -> Stored {
    let store = crate::store::open(&dir.join("db")).unwrap();
    let io = GridIo::server(LinkPacks::writer(dir.join("links")), key.clone());
    Stored::open(store, io, settings())
}

/// A grid with the store its writes go to, as `serve` drives it: the
/// tests persist its writes with [`Stored::persist`], and dropping it
/// persists what is left (so a grid opened again on the same store sees
/// every change).
pub(crate) struct Stored {
    pub(crate) grid: Grid,
    pub(crate) store: crate::store::SharedStore,
}

impl Stored {
    /// The grid over what `store` holds.
    pub(crate) fn open(
        store: crate::store::SharedStore,
        io: GridIo,
        settings: GridSettings,
    ) -> Stored {
        let records = crate::store::records(&*store).unwrap();
        let grid = Grid::open(records, io, settings).unwrap();
        Stored { grid, store }
    }

    /// Persist the writes made so far and sync them, then apply the link
    /// changes that rest on them (only the rounds' closing when the store
    /// failed).
    pub(crate) fn persist(&mut self) -> Result<(), crate::store::StoreError> {
        let changes = self.grid.take_link_changes();
        let durable = self
            .store
            .apply(&self.grid.take_writes())
            .and_then(|()| self.store.flush());
        match &durable {
            Ok(()) => changes.apply(self.grid.link_files()),
            Err(_) => changes.close_rounds(self.grid.link_files()),
        }
        durable
    }
}

impl std::ops::Deref for Stored {
    type Target = Grid;
    fn deref(&self) -> &Grid {
        &self.grid
    }
}

impl std::ops::DerefMut for Stored {
    fn deref_mut(&mut self) -> &mut Grid {
        &mut self.grid
    }
}

impl Drop for Stored {
    fn drop(&mut self) {
        // A store made to fail stays as it is; the tests check that.
        let _ = self.persist();
    }
}

impl Fx {
    pub(crate) fn new() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let key = sign::generate_key();
        let grid = open_grid(dir.path(), &key);
        Fx { dir, key, grid }
    }

    /// A grid with `sites` sites and one running round.
    pub(crate) fn with_round(sites: usize, max_attempts: u32) -> (Fx, u64) {
        let mut fx = Fx::new();
        fx.grid.add_sites(&site_names(sites), T0).unwrap();
        let round = fx.grid.start_round(params(max_attempts), T0).unwrap();
        (fx, round)
    }

    pub(crate) fn links(&self) -> PathBuf {
        self.dir.path().join("links")
    }

    /// Every name the grid's link-file storage holds, once its writes and
    /// link changes so far are applied (as `serve` applies them after each
    /// call).
    pub(crate) fn link_names(&mut self) -> Vec<String> {
        self.grid.persist().unwrap();
        self.grid.link_files().names().unwrap()
    }

    pub(crate) fn has_link(&mut self, name: &str) -> bool {
        self.link_names().iter().any(|n| n == name)
    }

    /// The bytes stored as `name` (it must be there).
    pub(crate) fn read_link(&self, name: &str) -> Vec<u8> {
        self.grid
            .link_files()
            .read(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    pub(crate) fn host(&mut self) -> u64 {
        enrol_host(&mut self.grid, T0)
    }

    /// Ask for work and verify every unit with the project public key.
    pub(crate) fn ask(
        &mut self,
        host: u64,
        free: u32,
        held: &[u64],
        now: u64,
    ) -> (Vec<WorkUnit>, WorkReply) {
        let reply = self
            .grid
            .request_work(
                host,
                &WorkRequest {
                    want_seconds: 3600,
                    free_slots: free,
                    units_held: held.to_vec(),
                    open_windows: None,
                },
                now,
            )
            .unwrap();
        let pk = VerifyingKey::from_bytes(&self.grid.project_public_key()).unwrap();
        assert_eq!(pk, self.key.verifying_key());
        let units = reply
            .units
            .iter()
            .map(|s| sign::verify_unit(&pk, s).unwrap())
            .collect();
        (units, reply)
    }

    /// Ask for exactly one unit.
    pub(crate) fn one(&mut self, host: u64, held: &[u64], now: u64) -> WorkUnit {
        let (mut units, _) = self.ask(host, 1, held, now);
        assert_eq!(units.len(), 1, "expected one unit for host {host}");
        units.remove(0)
    }

    pub(crate) fn upload(
        &mut self,
        host: u64,
        unit: &WorkUnit,
        n: usize,
        now: u64,
    ) -> UploadOutcome {
        let (summary, file) = result_for(unit, n);
        self.grid
            .upload(host, unit.unit_id, summary, &file, None, now)
            .unwrap()
    }

    /// Upload a scan of `unit` that stopped early ([`partial_for`]): `n`
    /// records, `pages_done` pages of the job behind its frontier.
    pub(crate) fn upload_partial(
        &mut self,
        host: u64,
        unit: &WorkUnit,
        n: usize,
        pages_done: u64,
        now: u64,
    ) -> UploadOutcome {
        let (summary, file, state) = partial_for(unit, n, pages_done);
        self.grid
            .upload(host, unit.unit_id, summary, &file, Some(&state), now)
            .unwrap()
    }

    pub(crate) fn job(&self, job_id: u64) -> JobRecord {
        self.grid.jobs[&job_id].clone()
    }

    pub(crate) fn attempt(&self, unit_id: u64) -> Attempt {
        let job = &self.grid.jobs[&self.grid.units[&unit_id]];
        job.attempts
            .iter()
            .find(|a| a.unit_id == unit_id)
            .unwrap()
            .clone()
    }

    pub(crate) fn host_rec(&self, id: u64) -> HostRecord {
        self.grid.hosts[&id].clone()
    }

    pub(crate) fn round_state(&self, id: u64) -> RoundState {
        self.grid.rounds[&id].state
    }
}

pub(crate) fn params(max_attempts: u32) -> RoundParams {
    RoundParams {
        policy: "round-robin".into(),
        max_pages: 50,
        max_depth: 3,
        delay_ms: 0,
        scope: Scope::Host,
        max_page_bytes: 100_000,
        max_seconds: 600,
        deadline_min_s: 30,
        deadline_max_s: 600,
        max_attempts,
        max_crawl_delay_ms: 10_000,
        // Validation has its own tests: these take the first result.
        validate: ValidateMode::Off,
    }
}

pub(crate) fn site_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("s{i}.test")).collect()
}

pub(crate) fn info(name: &str) -> HostInfo {
    HostInfo {
        name: name.into(),
        os: "linux".into(),
        client_version: "0.1.0".into(),
        cores: 4,
    }
}

pub(crate) fn enrol_host(g: &mut Grid, now: u64) -> u64 {
    let token = g.create_invite(1, now + HOUR_MS, now).unwrap();
    let key = sign::generate_key().verifying_key().to_bytes();
    // Names are unique among active hosts.
    let name = format!("pc-{}", hex::encode(&key[..4]));
    g.enrol(&token, key, info(&name), now).unwrap()
}

pub(crate) fn records(site: &str, n: usize) -> Vec<LinkRecord> {
    (0..n)
        .map(|i| LinkRecord {
            source_url: format!("http://{site}/p{}", i % 3),
            target_url: format!("http://out{i}.test/"),
            tag: LinkTag::A,
            nofollow: i % 2 == 0,
            anchor_text: format!("link {i}"),
        })
        .collect()
}

pub(crate) fn header_for(unit: &WorkUnit, n: usize) -> LinkFileHeader {
    LinkFileHeader::of_unit(unit, 3, n as u64)
}

pub(crate) fn summary(n: usize) -> ScanSummary {
    ScanSummary {
        pages: 3,
        bytes: 3000,
        links: n as u64,
        distinct_target_hosts: n as u64,
        errors: 0,
        elapsed_ms: 1500,
        stopped_by: None,
        status_counts: vec![(200, 3)],
        robots_disallowed: 0,
        ..ScanSummary::default()
    }
}

/// A valid result for `unit`: a summary and a link file of `n` records.
pub(crate) fn result_for(unit: &WorkUnit, n: usize) -> (ScanSummary, Vec<u8>) {
    let file = linkfile::encode(&header_for(unit, n), &records(&unit.site, n)).unwrap();
    (summary(n), file)
}

/// Every file under `dir` (none when it does not exist).
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The name of `unit`'s link file in the grid's link-file storage.
pub(crate) fn lf_name(unit: &WorkUnit) -> String {
    format!("{}/{}-{}.lf", unit.round_id, unit.job_id, unit.unit_id)
}

/// Upload `sum` with the link file of `records` for `unit`; the reason
/// it is rejected (`None`: accepted).
pub(crate) fn upload_with(
    fx: &mut Fx,
    host: u64,
    unit: &WorkUnit,
    sum: ScanSummary,
    recs: &[LinkRecord],
    now: u64,
) -> Option<String> {
    let mut h = header_for(unit, recs.len());
    h.pages = sum.pages;
    let file = linkfile::encode(&h, recs).unwrap();
    match fx
        .grid
        .upload(host, unit.unit_id, sum, &file, None, now)
        .unwrap()
    {
        UploadOutcome::Accepted => None,
        UploadOutcome::Rejected(why) => Some(why),
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn excl(host: &str) -> Exclusion {
    Exclusion::parse(host, false).unwrap()
}

/// Two hosts and `sites` sites.
pub(crate) fn two_hosts(sites: usize) -> (Fx, Vec<u64>) {
    let mut fx = Fx::new();
    let hosts = vec![fx.host(), fx.host()];
    fx.grid.add_sites(&site_names(sites), T0).unwrap();
    (fx, hosts)
}

pub(crate) fn start(fx: &mut Fx, policy: &str, now: u64) -> u64 {
    let p = RoundParams {
        policy: policy.into(),
        ..params(3)
    };
    fx.grid.start_round(p, now).unwrap()
}

/// A scan that stopped early: `n` records, its summary saying why, and
/// its frontier with `pages_done` pages of the job behind it.
pub(crate) fn partial_for(
    unit: &WorkUnit,
    n: usize,
    pages_done: u64,
) -> (ScanSummary, Vec<u8>, Vec<u8>) {
    let (mut sum, file) = result_for(unit, n);
    sum.stopped_by = Some(linkfile::StopReason::MaxTime);
    let state = ScanState {
        site: unit.site.clone(),
        pages_done,
        queue: vec![beebot_shared::scanstate::QueuedUrl {
            url: format!("http://{}/next", unit.site),
            depth: 1,
        }],
        seen: vec![1, 2, 3],
        robots: Vec::new(),
    }
    .encode()
    .unwrap();
    (sum, file, state)
}

/// A round of one site whose deadlines are far past the lease, and its
/// unit on `host`, not started.
pub(crate) fn issued(fx: &mut Fx, host: u64) -> WorkUnit {
    let p = RoundParams {
        deadline_min_s: 3600,
        deadline_max_s: 7200,
        ..params(3)
    };
    fx.grid.start_round(p, T0).unwrap();
    // Leases count from the grid's first tick.
    assert_eq!(fx.grid.tick(T0).unwrap(), 0);
    let u = fx.one(host, &[], T0 + 1);
    assert!(u.deadline_ms > T0 + 3_600_000, "a deadline far off");
    u
}

/// No unit for `host` now.
pub(crate) fn nothing_for(fx: &mut Fx, host: u64, now: u64) {
    let (units, _) = fx.ask(host, 4, &[], now);
    assert!(units.is_empty(), "host {host} got {units:?}");
}
