//! A lying client, for the tests only (never shipped): a host joined with the
//! real `beebot join` that takes work and lies in every way an untrusted
//! desktop could, so the tests can check that the grid keeps serving, keeps
//! its memory bounded, and (with validation) throws the lies away.
//!
//! Its lies, each a [`Modes`] flag: it claims a hundred times a desktop's
//! speed and absurd slots; it asks for as many units as a reply may carry
//! and hoards most of them (listed as held, never scanned); of the units it
//! gives back, it scans some honestly with the client's crawler and uploads
//! the records altered (a share of the true links dropped, links from pages
//! of the site that do not exist added) with a summary that claims a natural
//! end and passes every check of a summary; it uploads each result again and again; it
//! sends record bombs; and it gives units back with failure reasons of
//! multi-byte characters, longer than the server keeps.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use beebot_client::crawler::{self, CrawlerConfig};
use beebot_client::net::{Link, NetError};
use beebot_shared::extract::LinkTag;
use beebot_shared::limits::{MAX_SLOTS, MAX_UNITS_PER_REPLY, MAX_WANT_SECONDS};
use beebot_shared::linkfile::{self, LinkFileHeader, LinkRecord, ScanSummary};
use beebot_shared::proto::{Request, Response};
use beebot_shared::sign::{self, SignedUnit, WorkUnit};
use url::Url;

use crate::hostile::{record_bombs, Joined};

/// How much faster than it is the liar says it is.
pub const BOAST_FACTOR: f64 = 100.0;

/// Pages per second of an honest desktop on the reference site (delay 0),
/// what the liar multiplies by [`BOAST_FACTOR`].
const HONEST_PAGES_PER_S: f64 = 20.0;

/// KB per second of an honest desktop on the reference site.
const HONEST_KB_PER_S: f64 = 2_000.0;

/// Times each uploaded lie is uploaded again.
pub const REPEATS: u32 = 3;

/// One true link in this many is dropped from a lie.
const DROP_ONE_IN: usize = 3;

/// Links from pages that do not exist added to a lie, at least.
const MIN_FABRICATED: usize = 3;

/// The reason given with every unit the liar fails: multi-byte characters of
/// every width, longer than the server keeps (`MAX_TEXT_LEN` bytes), so it is
/// cut, and the cut must fall on a character boundary.
pub fn failure_reason() -> String {
    "сбой 💥 クロール失敗 ¿qué? ".repeat(40)
}

/// Pause between work requests when the server had nothing to give.
const ASK_EVERY: Duration = Duration::from_millis(500);

/// Refusals of lies the report keeps, to say why.
const MAX_REFUSALS_KEPT: usize = 8;

/// Network errors in a row after which the liar gives up.
const MAX_ERRORS_IN_A_ROW: u32 = 20;

/// The lies the liar tells (all of them by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes {
    /// Claim a hundredfold speed and absurd slots in its benchmark.
    pub boast: bool,
    /// Ask for as many units as a reply may carry; keep most of them,
    /// listed as held and never scanned.
    pub hoard: bool,
    /// Add links from pages of the site that do not exist.
    pub fabricate: bool,
    /// Leave out a share of the true links.
    pub drop: bool,
    /// Send record bombs for some units.
    pub bomb: bool,
    /// Upload each result again and again.
    pub repeat: bool,
    /// Give some units back with failure reasons of multi-byte characters.
    pub fail: bool,
}

impl Modes {
    /// Every lie.
    pub fn all() -> Modes {
        Modes {
            boast: true,
            hoard: true,
            fabricate: true,
            drop: true,
            bomb: true,
            repeat: true,
            fail: true,
        }
    }

    /// `all`, or a comma-separated list of `boast`, `hoard`, `fabricate`,
    /// `drop`, `bomb`, `repeat`, `fail`.
    pub fn parse(text: &str) -> Result<Modes> {
        if text.trim() == "all" {
            return Ok(Modes::all());
        }
        let mut m = Modes {
            boast: false,
            hoard: false,
            fabricate: false,
            drop: false,
            bomb: false,
            repeat: false,
            fail: false,
        };
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "boast" => m.boast = true,
                "hoard" => m.hoard = true,
                "fabricate" => m.fabricate = true,
                "drop" => m.drop = true,
                "bomb" => m.bomb = true,
                "repeat" => m.repeat = true,
                "fail" => m.fail = true,
                other => bail!(
                    "unknown mode `{other}` (all, boast, hoard, fabricate, drop, bomb, repeat, fail)"
                ),
            }
        }
        Ok(m)
    }

    /// What the liar does with a unit it gives back, in turn: a lie, a bomb,
    /// a failure, another lie (the modes left out are skipped).
    fn give_back_order(&self) -> Vec<GiveBack> {
        let lie = self.fabricate || self.drop;
        let mut out = Vec::new();
        for (on, g) in [
            (lie, GiveBack::Lie),
            (self.bomb, GiveBack::Bomb),
            (self.fail, GiveBack::Fail),
            (lie, GiveBack::Lie),
        ] {
            if on {
                out.push(g);
            }
        }
        if out.is_empty() {
            // Nothing to lie with: the records as found.
            out.push(GiveBack::Lie);
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveBack {
    Lie,
    Bomb,
    Fail,
}

/// How the liar runs.
#[derive(Clone, Debug)]
pub struct LiarOptions {
    /// The home a real `beebot join` left (enrolment and host key).
    pub home: PathBuf,
    pub modes: Modes,
    /// How the honest scans behind the lies crawl (loopback, `--resolve`).
    pub crawler: CrawlerConfig,
    /// Longest the liar runs; it stops sooner once the grid has no open round.
    pub run_for: Duration,
    /// With `hoard`, one unit in this many is given back, the rest kept.
    pub return_every: usize,
}

/// What the liar did and what the server answered.
#[derive(Clone, Debug, Default)]
pub struct LiarReport {
    pub host_id: u64,
    /// The boastful benchmark was acknowledged.
    pub benchmark_acked: bool,
    pub units_taken: u64,
    /// The most units one reply carried.
    pub most_in_one_reply: u64,
    /// Units kept, listed as held and never scanned.
    pub hoarded: u64,
    /// The most units the liar held at once as the server counts them:
    /// hoarded units before their deadline, and those of the reply in hand.
    pub most_held: u64,
    /// Lies uploaded (altered records, a natural end claimed), and the answers.
    pub lies: u64,
    pub lies_accepted: u64,
    pub lies_refused: u64,
    /// Why lies were refused (the first few answers).
    pub refusals: Vec<String>,
    /// Of the lies: links made up, true links left out.
    pub fabricated_links: u64,
    pub dropped_links: u64,
    /// Uploads again of a lie that was accepted, and those answered `Duplicate`.
    pub repeats: u64,
    pub repeats_duplicate: u64,
    /// Record bombs sent, and those refused.
    pub bombs: u64,
    pub bombs_refused: u64,
    /// Units given back with a multi-byte reason, and those acknowledged.
    pub fails: u64,
    pub fails_acked: u64,
    /// Units of the lies accepted (for the validation checks).
    pub lie_units: Vec<u64>,
    /// Answers the liar did not expect (the test decides what they mean).
    pub unexpected: Vec<String>,
}

impl LiarReport {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "host_id": self.host_id,
            "benchmark_acked": self.benchmark_acked,
            "units_taken": self.units_taken,
            "most_in_one_reply": self.most_in_one_reply,
            "hoarded": self.hoarded,
            "most_held": self.most_held,
            "lies": self.lies,
            "lies_accepted": self.lies_accepted,
            "lies_refused": self.lies_refused,
            "refusals": self.refusals,
            "fabricated_links": self.fabricated_links,
            "dropped_links": self.dropped_links,
            "repeats": self.repeats,
            "repeats_duplicate": self.repeats_duplicate,
            "bombs": self.bombs,
            "bombs_refused": self.bombs_refused,
            "fails": self.fails,
            "fails_acked": self.fails_acked,
            "lie_units": self.lie_units,
            "unexpected": self.unexpected,
        })
    }
}

/// A connection that comes back after a network error.
struct Conn {
    me: Joined,
    link: Option<Link>,
    errors_in_a_row: u32,
}

impl Conn {
    async fn request(&mut self, req: &Request) -> Result<Result<Response, NetError>> {
        loop {
            if self.link.as_ref().is_none_or(|l| !l.is_open()) {
                match self.me.hello().await {
                    Ok(l) => self.link = Some(l),
                    Err(e) => {
                        self.errors_in_a_row += 1;
                        if self.errors_in_a_row >= MAX_ERRORS_IN_A_ROW {
                            return Err(e.context("the server is gone"));
                        }
                        tokio::time::sleep(ASK_EVERY).await;
                        continue;
                    }
                }
            }
            let Some(link) = self.link.as_ref() else {
                continue;
            };
            let r = link.request(req).await;
            match &r {
                Err(NetError::Refused { .. }) | Ok(_) => {
                    self.errors_in_a_row = 0;
                    return Ok(r);
                }
                Err(e) => {
                    self.errors_in_a_row += 1;
                    if self.errors_in_a_row >= MAX_ERRORS_IN_A_ROW {
                        bail!("the server is gone: {e}");
                    }
                    self.link = None;
                    tokio::time::sleep(ASK_EVERY).await;
                }
            }
        }
    }
}

/// What the liar keeps between work requests: the units it hoards and how
/// far along its order of give-backs it is.
struct Tally {
    /// What the liar does with the units it gives back, in turn.
    order: Vec<GiveBack>,
    /// With `hoard`, one unit in this many is given back.
    return_every: usize,
    /// Units listed as held in every work request.
    held: Vec<u64>,
    /// Hoarded units and their deadlines (server time, the same clock here).
    hoard: Vec<(u64, u64)>,
    /// Units taken so far.
    seen: usize,
    /// Units given back so far.
    given_back: usize,
}

/// What one work request brought.
enum Asked {
    /// Units to hoard or give back.
    Units(Vec<SignedUnit>),
    /// Nothing this time (the pause before asking again already taken).
    Nothing,
    /// Nothing, and no round is open: the liar is done.
    RoundsOver,
}

/// Run the liar until the grid has no open round or `run_for` has passed.
pub async fn run(opts: &LiarOptions) -> Result<LiarReport> {
    let me = Joined::from_home(&opts.home)?;
    let project_key = me.project_key;
    let mut report = LiarReport {
        host_id: me.id,
        ..LiarReport::default()
    };
    let mut conn = Conn {
        me,
        link: None,
        errors_in_a_row: 0,
    };
    if opts.modes.boast {
        boast(&mut conn, &mut report).await?;
    }
    let mut tally = Tally {
        order: opts.modes.give_back_order(),
        return_every: opts.return_every.max(1),
        held: Vec::new(),
        hoard: Vec::new(),
        seen: 0,
        given_back: 0,
    };
    let started = Instant::now();
    while started.elapsed() < opts.run_for {
        let units = match ask_for_work(&mut conn, opts, &tally.held, &mut report).await? {
            Asked::Units(units) => units,
            Asked::Nothing => continue,
            Asked::RoundsOver => break,
        };
        report.most_in_one_reply = report.most_in_one_reply.max(units.len() as u64);
        let now = beebot_server::now_ms();
        tally.hoard.retain(|&(_, deadline_ms)| deadline_ms > now);
        report.most_held = report
            .most_held
            .max((tally.hoard.len() + units.len()) as u64);
        for signed in &units {
            let unit = sign::verify_unit(&project_key, signed).context("a unit")?;
            take(&mut conn, &unit, opts, &mut tally, &mut report).await?;
        }
    }
    if let Some(l) = &conn.link {
        l.close();
    }
    Ok(report)
}

/// Claim a hundredfold speed and absurd slots in a benchmark.
async fn boast(conn: &mut Conn, report: &mut LiarReport) -> Result<()> {
    let r = conn
        .request(&Request::Benchmark {
            pages_per_s: HONEST_PAGES_PER_S * BOAST_FACTOR,
            kb_per_s: HONEST_KB_PER_S * BOAST_FACTOR,
            slots: MAX_SLOTS.saturating_mul(BOAST_FACTOR as u32),
        })
        .await?;
    match r {
        Ok(Response::Ack) => report.benchmark_acked = true,
        other => report.unexpected.push(format!("benchmark: {other:?}")),
    }
    Ok(())
}

/// Ask for work (as many units as a reply may carry when hoarding), listing
/// the hoard as held; pause before returning when nothing came.
async fn ask_for_work(
    conn: &mut Conn,
    opts: &LiarOptions,
    held: &[u64],
    report: &mut LiarReport,
) -> Result<Asked> {
    let free_slots = if opts.modes.hoard {
        MAX_UNITS_PER_REPLY as u32
    } else {
        1
    };
    let r = conn
        .request(&Request::RequestWork {
            want_seconds: MAX_WANT_SECONDS,
            free_slots,
            units_held: held.to_vec(),
            open_windows: None,
        })
        .await?;
    match r {
        Ok(Response::Work {
            units, rounds_open, ..
        }) => {
            if units.is_empty() {
                if !rounds_open {
                    return Ok(Asked::RoundsOver);
                }
                tokio::time::sleep(ASK_EVERY).await;
                return Ok(Asked::Nothing);
            }
            Ok(Asked::Units(units))
        }
        other => {
            report.unexpected.push(format!("work: {other:?}"));
            tokio::time::sleep(ASK_EVERY).await;
            Ok(Asked::Nothing)
        }
    }
}

/// Hoard one unit taken, or give it back the way the order says: a lie, a
/// bomb or a failure.
async fn take(
    conn: &mut Conn,
    unit: &WorkUnit,
    opts: &LiarOptions,
    tally: &mut Tally,
    report: &mut LiarReport,
) -> Result<()> {
    report.units_taken += 1;
    tally.seen += 1;
    if opts.modes.hoard && tally.seen % tally.return_every != 0 {
        tally.held.push(unit.unit_id);
        tally.hoard.push((unit.unit_id, unit.deadline_ms));
        report.hoarded += 1;
        return Ok(());
    }
    let what = tally.order[tally.given_back % tally.order.len()];
    tally.given_back += 1;
    match what {
        GiveBack::Lie => lie(conn, unit, opts, report).await,
        GiveBack::Bomb => bomb(conn, unit, tally.given_back, report).await,
        GiveBack::Fail => fail(conn, unit, report).await,
    }
}

/// Give the unit back as failed, with a reason of multi-byte characters
/// longer than the server keeps.
async fn fail(conn: &mut Conn, unit: &WorkUnit, report: &mut LiarReport) -> Result<()> {
    report.fails += 1;
    let r = conn
        .request(&Request::Fail {
            unit_id: unit.unit_id,
            reason: failure_reason(),
        })
        .await?;
    match r {
        Ok(Response::Ack) => report.fails_acked += 1,
        other => report.unexpected.push(format!("fail: {other:?}")),
    }
    Ok(())
}

/// Scan the unit honestly (a continuation: not at all), alter the records,
/// claim a natural end, upload, and upload again.
async fn lie(
    conn: &mut Conn,
    unit: &WorkUnit,
    opts: &LiarOptions,
    report: &mut LiarReport,
) -> Result<()> {
    let (records, summary) = if unit.resume.is_none() {
        let spec = beebot_client::worker::crawl_spec(unit, None, Duration::ZERO)?;
        let cfg = opts.crawler.clone();
        let out = tokio::task::spawn_blocking(move || {
            crawler::crawl(
                &spec,
                &cfg,
                &beebot_client::cancel::Cancel::new(),
                &mut |_, _| {},
            )
        })
        .await
        .context("the honest scan")?;
        (out.records, out.summary)
    } else {
        (Vec::new(), ScanSummary::default())
    };
    let (records, fabricated, dropped) = alter(unit, records, &opts.modes)?;
    report.fabricated_links += fabricated;
    report.dropped_links += dropped;
    let summary = claim_natural_end(unit, summary, &records, fabricated);
    let header = LinkFileHeader::of_unit(unit, summary.pages, records.len() as u64);
    let upload = Request::Upload {
        unit_id: unit.unit_id,
        summary,
        link_file: linkfile::encode(&header, &records).context("encode the lie")?,
        state: None,
    };
    report.lies += 1;
    let accepted = match conn.request(&upload).await? {
        Ok(Response::Accepted) => {
            report.lies_accepted += 1;
            report.lie_units.push(unit.unit_id);
            true
        }
        // Refused (a unit the server no longer wanted from it, e.g. one that
        // another copy finished while it scanned): nothing to repeat.
        Ok(r @ (Response::Rejected { .. } | Response::Duplicate)) => {
            report.lies_refused += 1;
            if report.refusals.len() < MAX_REFUSALS_KEPT {
                report.refusals.push(format!("{r:?}"));
            }
            false
        }
        other => {
            report.unexpected.push(format!("lie: {other:?}"));
            false
        }
    };
    if opts.modes.repeat && accepted {
        repeat(conn, &upload, report).await?;
    }
    Ok(())
}

/// The summary of a lie: a natural end, all the records counted, and the
/// time the made-up pages would have taken at the round's pace — a lie that
/// passes every check of the summary (a hundredfold pace is refused by the
/// pace check before validation sees it), so only validation can find it out.
fn claim_natural_end(
    unit: &WorkUnit,
    mut summary: ScanSummary,
    records: &[LinkRecord],
    fabricated: u64,
) -> ScanSummary {
    summary.stopped_by = None;
    summary.links = records.len() as u64;
    summary.distinct_target_hosts = records
        .iter()
        .filter_map(|r| {
            Url::parse(&r.target_url)
                .ok()?
                .host_str()
                .map(str::to_string)
        })
        .collect::<std::collections::HashSet<String>>()
        .len() as u64;
    summary.pages = summary.pages.max(1) + fabricated;
    summary.elapsed_ms = summary
        .elapsed_ms
        .saturating_add(fabricated.saturating_add(1) * unit.limits.delay_ms);
    summary
}

/// Upload an accepted lie again, [`REPEATS`] times.
async fn repeat(conn: &mut Conn, upload: &Request, report: &mut LiarReport) -> Result<()> {
    for _ in 0..REPEATS {
        report.repeats += 1;
        match conn.request(upload).await? {
            Ok(Response::Duplicate) => report.repeats_duplicate += 1,
            Ok(Response::Rejected { .. } | Response::Accepted) => {}
            other => report.unexpected.push(format!("repeat: {other:?}")),
        }
    }
    Ok(())
}

/// The records of a lie: a share of the true ones left out, links from
/// pages of the site that do not exist added. Returns (records, made up,
/// left out).
fn alter(
    unit: &WorkUnit,
    truth: Vec<LinkRecord>,
    modes: &Modes,
) -> Result<(Vec<LinkRecord>, u64, u64)> {
    let seed = Url::parse(&unit.seed_url).context("the unit's seed")?;
    let targets: Vec<String> = truth.iter().map(|r| r.target_url.clone()).collect();
    let mut out = Vec::with_capacity(truth.len() + MIN_FABRICATED);
    let mut dropped = 0u64;
    for (i, r) in truth.into_iter().enumerate() {
        if modes.drop && i % DROP_ONE_IN == 0 {
            dropped += 1;
        } else {
            out.push(r);
        }
    }
    let mut fabricated = 0u64;
    if modes.fabricate {
        let n = (out.len() / 4).max(MIN_FABRICATED);
        for i in 0..n {
            let source = seed
                .join(&format!("/archive/{}/{}-news.html", 2010 + i % 12, i))
                .context("a made-up page")?;
            let target = targets
                .get(i % targets.len().max(1))
                .cloned()
                .unwrap_or_else(|| format!("http://partner-{i}.example.org/"));
            out.push(LinkRecord {
                source_url: source.to_string(),
                target_url: target,
                tag: LinkTag::A,
                nofollow: false,
                anchor_text: format!("archive {i}"),
            });
            fabricated += 1;
        }
    }
    Ok((out, fabricated, dropped))
}

/// Send one of the unit's record bombs, then the other on the same unit.
async fn bomb(conn: &mut Conn, unit: &WorkUnit, n: usize, report: &mut LiarReport) -> Result<()> {
    let bombs = record_bombs(unit);
    for i in 0..bombs.len() {
        let file = bombs[(n + i) % bombs.len()].clone();
        report.bombs += 1;
        let r = conn
            .request(&Request::Upload {
                unit_id: unit.unit_id,
                summary: ScanSummary {
                    pages: 1,
                    ..ScanSummary::default()
                },
                link_file: file,
                state: None,
            })
            .await?;
        match r {
            Ok(Response::Rejected { .. }) => report.bombs_refused += 1,
            other => report.unexpected.push(format!("bomb: {other:?}")),
        }
    }
    Ok(())
}
