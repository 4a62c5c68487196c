//! The dashboard's JSON bodies (`/api/dashboard/...`), built from a grid
//! snapshot and the [`Live`] state: the overview, a round's page (progress,
//! ETA, sites, failures by reason, pages/s over time) and the hosts.
//!
//! Invariants: pure functions of their arguments (time is an argument);
//! every text is sent as data for the page to set as text, never as HTML.
//! The ETA uses the scheduler's own estimates ([`crate::scheduler::estimates`]),
//! never a rule of its own for how long a page takes.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::live::{Component, Live, Series, Windows, MAX_SERIES_POINTS};
use crate::api::{HostLine, JobCounts, RoundListed};
use crate::grid::{GridSnapshot, GridStatus, JobsByState};
use crate::model::{HostRecord, JobRecord, JobState, RoundRecord, RoundState};
use crate::scheduler::{is_online, remaining_s, seconds_per_page, MIN_LEFT_SHARE};
use crate::scheduler::{DEFAULT_HOST_SLOTS, ONLINE_WINDOW_MS};

/// How often the pages ask for fresh numbers.
pub const POLL_INTERVAL_MS: u64 = 2_000;
/// A component whose last turn is older than this is shown down (the ticker
/// turns every second; every turn syncs the store).
pub const COMPONENT_STALE_MS: u64 = 10_000;
/// The QUIC endpoint is shown idle (not down: hosts may all be away) after
/// this long without a request.
pub const QUIC_QUIET_MS: u64 = ONLINE_WINDOW_MS;
/// Rounds listed on the overview (the newest).
pub const MAX_ROUNDS_LISTED: usize = 50;
/// Open windows shown per host.
const MAX_WINDOWS_SHOWN: usize = 3;

/// How the ETA is computed, shown beside it.
pub const ETA_HOW: &str = "ETA: the scheduler's estimates: each queued site's expected pages \
     at the online hosts' mean learned speed (never faster than the politeness delay), plus \
     each running scan's remaining time from its own pace, shared over the online hosts' \
     slots; never less than the longest running scan's remaining time.";

/// One component's liveness.
#[derive(Clone, Debug, Serialize)]
pub struct ComponentLine {
    pub name: &'static str,
    /// `ok`, `idle`, `down` or `off` (not served here).
    pub state: &'static str,
    /// Its last successful turn (Unix ms).
    pub last_ms: Option<u64>,
    pub detail: String,
}

/// Pages/s and KB/s now and averaged over a round.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Rates {
    pub pages_per_s_now: f64,
    pub kb_per_s_now: f64,
    pub pages_per_s_avg: f64,
    pub kb_per_s_avg: f64,
}

/// One round on the overview.
#[derive(Clone, Debug, Serialize)]
pub struct RoundRow {
    #[serde(flatten)]
    pub listed: RoundListed,
    /// Jobs over (done, failed, cancelled) out of all.
    pub progress: f64,
    pub pending: usize,
}

/// `GET /api/dashboard/overview`.
#[derive(Clone, Debug, Serialize)]
pub struct Overview {
    pub now_ms: u64,
    pub poll_ms: u64,
    pub components: Vec<ComponentLine>,
    pub jobs: JobsByState,
    pub jobs_rounds: Vec<u64>,
    pub oldest_running_s: Option<f64>,
    /// Over the running rounds together.
    pub rates: Rates,
    pub hosts_enrolled: usize,
    pub hosts_active_hour: u64,
    pub hosts_active_day: u64,
    pub rounds: Vec<RoundRow>,
}

/// A round and its jobs borrowed where the grid keeps them: the overview is
/// built under the grid lock from these, so a poll copies no job.
pub type RoundJobRefs<'a> = (&'a RoundRecord, Vec<&'a JobRecord>);

/// Pages and bytes of a job so far: accepted scans, and the running scan's
/// last report.
pub fn job_pages_bytes(j: &JobRecord) -> (u64, u64) {
    (j.pages_so_far(), j.bytes_so_far())
}

/// A round's pages and bytes so far (one series point's numbers).
pub fn round_totals<J: Borrow<JobRecord>>(jobs: &[J]) -> (u64, u64) {
    jobs.iter()
        .map(|j| job_pages_bytes(j.borrow()))
        .fold((0, 0), |(p, b), (jp, jb)| {
            (p.saturating_add(jp), b.saturating_add(jb))
        })
}

/// Pages/s and KB/s of a round: now (its series) and averaged since it
/// started (until it finished).
pub fn round_rates<J: Borrow<JobRecord>>(
    r: &RoundRecord,
    jobs: &[J],
    series: &Series,
    now: u64,
) -> Rates {
    let (pages, bytes) = round_totals(jobs);
    let end = r.finished_ms.unwrap_or(now);
    let secs = (end.saturating_sub(r.created_ms) as f64 / 1000.0).max(1.0);
    let (pages_now, kb_now) = match r.state {
        RoundState::Running => series.rate_now().unwrap_or_default(),
        _ => (0.0, 0.0),
    };
    Rates {
        pages_per_s_now: pages_now,
        kb_per_s_now: kb_now,
        pages_per_s_avg: pages as f64 / secs,
        kb_per_s_avg: bytes as f64 / 1024.0 / secs,
    }
}

fn progress(c: &JobCounts) -> f64 {
    c.progress()
}

/// The overview from the newest rounds (with their jobs), the grid's own
/// counts (`status`, `snapshot`: the same jobs by state and active hosts the
/// metrics show) and the live state; `reference` is the probe's outcome
/// (`None`: not served). Built under the grid lock from borrowed records: it
/// copies no job.
pub fn overview(
    rounds: &[RoundJobRefs],
    (status, snapshot): (&GridStatus, &GridSnapshot),
    live: &Live,
    store_failure: Option<String>,
    reference: Option<Result<(), String>>,
    now: u64,
) -> Overview {
    let running: Vec<&RoundJobRefs> = rounds
        .iter()
        .filter(|(r, _)| r.state == RoundState::Running)
        .collect();
    let mut rates = Rates::default();
    for (r, jobs) in &running {
        let one = round_rates(r, jobs, &live.series(r.id), now);
        rates.pages_per_s_now += one.pages_per_s_now;
        rates.kb_per_s_now += one.kb_per_s_now;
        rates.pages_per_s_avg += one.pages_per_s_avg;
        rates.kb_per_s_avg += one.kb_per_s_avg;
    }
    let mut rows: Vec<RoundRow> = rounds.iter().map(round_row).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.listed.id));
    Overview {
        now_ms: now,
        poll_ms: POLL_INTERVAL_MS,
        components: components(live, store_failure, reference, now),
        jobs: snapshot.jobs,
        jobs_rounds: status.jobs_rounds.clone(),
        oldest_running_s: oldest_running_s(
            running.iter().flat_map(|(_, j)| j.iter().copied()),
            now,
        ),
        rates,
        hosts_enrolled: status.hosts.saturating_sub(status.hosts_left),
        hosts_active_hour: snapshot.hosts_active_hour,
        hosts_active_day: snapshot.hosts_active_day,
        rounds: rows,
    }
}

fn round_row((r, jobs): &RoundJobRefs) -> RoundRow {
    let counts = JobCounts::of_round_iter(r, jobs.iter().copied());
    RoundRow {
        progress: progress(&counts),
        pending: counts.pending,
        listed: RoundListed::of_parts(r, &counts),
    }
}

/// Age in seconds of the oldest unit running now.
fn oldest_running_s<'a>(jobs: impl Iterator<Item = &'a JobRecord>, now: u64) -> Option<f64> {
    jobs.flat_map(|j| j.running_attempts())
        .map(|a| a.issued_ms)
        .min()
        .map(|issued| now.saturating_sub(issued) as f64 / 1000.0)
}

fn components(
    live: &Live,
    store_failure: Option<String>,
    reference: Option<Result<(), String>>,
    now: u64,
) -> Vec<ComponentLine> {
    Component::ALL
        .iter()
        .map(|&c| {
            let last = live.last_beat(c);
            let age = last.map(|ms| now.saturating_sub(ms));
            let ago = age.map_or("never since the server started".to_string(), |a| {
                format!("{:.0} s ago", a as f64 / 1000.0)
            });
            let fresh = |limit: u64| age.is_some_and(|a| a <= limit);
            let (state, detail) = match c {
                Component::Store => match &store_failure {
                    Some(e) => ("down", format!("failed: {e}")),
                    None if fresh(COMPONENT_STALE_MS) => ("ok", format!("last sync {ago}")),
                    None => ("down", format!("last sync {ago}")),
                },
                Component::Ticker if fresh(COMPONENT_STALE_MS) => {
                    ("ok", format!("last turn {ago}"))
                }
                Component::Ticker => ("down", format!("last turn {ago}")),
                Component::Quic if fresh(QUIC_QUIET_MS) => ("ok", format!("last request {ago}")),
                Component::Quic => ("idle", format!("no request lately: last {ago}")),
                Component::Reference => match &reference {
                    None => ("off", "not served by this server".to_string()),
                    Some(Ok(())) => ("ok", "answered just now".to_string()),
                    Some(Err(e)) => ("down", format!("{e}; last answer {ago}")),
                },
            };
            ComponentLine {
                name: c.as_str(),
                state,
                last_ms: last,
                detail,
            }
        })
        .collect()
}

/// One site of a round's page.
#[derive(Clone, Debug, Serialize)]
pub struct SiteRow {
    pub site: String,
    pub state: &'static str,
    /// What a scanned site waits for ([`JobRecord::check_wait`]).
    pub waits: Option<&'static str>,
    /// The host scanning it now, else the host of its last accepted scan.
    pub host: String,
    pub pages: u64,
    pub links: u64,
    pub attempts: usize,
    pub reasons: Vec<String>,
    /// `complete`, `incomplete` or `open` (not over yet).
    pub completeness: &'static str,
    pub why_not: Option<String>,
}

/// A failure reason and how many times it was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReasonCount {
    pub reason: String,
    pub count: usize,
}

/// The ETA and how it was computed.
#[derive(Clone, Debug, Serialize)]
pub struct Eta {
    pub seconds: Option<f64>,
    pub how: &'static str,
    /// Why there is none, when there is none.
    pub note: Option<String>,
}

/// `GET /api/dashboard/rounds/{id}`.
#[derive(Clone, Debug, Serialize)]
pub struct RoundPage {
    pub now_ms: u64,
    pub poll_ms: u64,
    pub round: RoundListed,
    pub delay_ms: u64,
    pub max_pages: u32,
    pub validate: &'static str,
    pub counts: JobCounts,
    pub progress: f64,
    /// Why the round cannot end as things are ([`crate::api::waiting_note`]).
    pub waiting: Option<String>,
    pub eta: Eta,
    pub rates: Rates,
    pub sites: Vec<SiteRow>,
    pub failures: Vec<ReasonCount>,
    /// Pages/s over time: `[ms, pages/s]`, at most [`MAX_SERIES_POINTS`].
    pub chart: Vec<(u64, f64)>,
    pub max_points: usize,
    /// Done sites whose kept files do not read whole (filled by the
    /// handler from [`crate::damage::Damage`], not under the grid lock).
    pub damaged: Vec<crate::api::DamagedSite>,
}

/// A round's page from its jobs, every host and its series: built under
/// the grid lock from borrowed records (it copies no job, only the page's
/// own fields).
pub fn round_page<J: Borrow<JobRecord>, H: Borrow<HostRecord>>(
    (r, jobs): (&RoundRecord, &[J]),
    hosts: &[H],
    series: &Series,
    now: u64,
) -> RoundPage {
    let names: HashMap<u64, &str> = hosts
        .iter()
        .map(|h| (h.borrow().id, h.borrow().info.name.as_str()))
        .collect();
    let counts = JobCounts::of_round_iter(r, jobs.iter().map(Borrow::borrow));
    let able = hosts
        .iter()
        .map(Borrow::borrow)
        .filter(|h| !h.revoked && h.left_ms.is_none())
        .count();
    let waiting = crate::api::waiting_note(r, &counts, able);
    RoundPage {
        now_ms: now,
        poll_ms: POLL_INTERVAL_MS,
        round: RoundListed::of_parts(r, &counts),
        delay_ms: r.params.delay_ms,
        max_pages: r.params.max_pages,
        validate: r.params.validate.as_str(),
        progress: progress(&counts),
        counts,
        eta: match &waiting {
            // No ETA while no host can make the checks the round waits for.
            Some(_) => Eta {
                seconds: None,
                how: ETA_HOW,
                note: Some("waiting for a second host".to_string()),
            },
            None => eta(r, jobs, hosts, now),
        },
        waiting,
        rates: round_rates(r, jobs, series, now),
        sites: jobs.iter().map(|j| site_row(j.borrow(), &names)).collect(),
        failures: failures_by_reason(jobs),
        chart: series.pages_per_s(),
        max_points: MAX_SERIES_POINTS,
        damaged: Vec::new(),
    }
}

fn site_row(j: &JobRecord, names: &HashMap<u64, &str>) -> SiteRow {
    let done = j.completeness();
    let host = j
        .running_attempts()
        .filter(|a| j.is_current(a))
        .map(|a| a.host_id)
        .next()
        .or(j.result.as_ref().map(|r| r.host_id))
        .or(j.segments.last().map(|s| s.host_id));
    SiteRow {
        site: j.site.clone(),
        state: j.state.as_str(),
        waits: j.check_wait(),
        host: host.map_or(String::new(), |h| {
            names.get(&h).map_or(format!("#{h}"), |n| n.to_string())
        }),
        pages: done.pages,
        links: done.links,
        attempts: j.attempts.len(),
        reasons: j.reasons.clone(),
        completeness: match (done.natural_end, j.state.is_final()) {
            (true, _) => "complete",
            (false, true) => "incomplete",
            (false, false) => "open",
        },
        why_not: done.why_not,
    }
}

/// Every reason given for a failed attempt, with how often, most often first.
pub fn failures_by_reason<J: Borrow<JobRecord>>(jobs: &[J]) -> Vec<ReasonCount> {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for r in jobs.iter().flat_map(|j| &j.borrow().reasons) {
        *by.entry(r.as_str()).or_default() += 1;
    }
    let mut out: Vec<ReasonCount> = by
        .into_iter()
        .map(|(reason, count)| ReasonCount {
            reason: reason.to_string(),
            count,
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    out
}

/// The round's ETA from the scheduler's estimates (see [`ETA_HOW`]).
pub fn eta<J: Borrow<JobRecord>, H: Borrow<HostRecord>>(
    r: &RoundRecord,
    jobs: &[J],
    hosts: &[H],
    now: u64,
) -> Eta {
    let none = |note: &str| Eta {
        seconds: None,
        how: ETA_HOW,
        note: Some(note.to_string()),
    };
    if r.state != RoundState::Running {
        return none("the round is over");
    }
    let busy: std::collections::HashSet<u64> = jobs
        .iter()
        .flat_map(|j| j.borrow().running_attempts().map(|a| a.host_id))
        .collect();
    let online: Vec<&HostRecord> = hosts
        .iter()
        .map(Borrow::borrow)
        .filter(|h| !h.revoked)
        .filter(|h| is_online(h.last_seen_ms, h.last_missed_ms, busy.contains(&h.id), now))
        .collect();
    if online.is_empty() {
        return none("no host is online");
    }
    let slots: u32 = online.iter().map(|h| host_slots(h)).sum();
    let speeds: Vec<f64> = online.iter().filter_map(|h| host_speed(h)).collect();
    let mean = (!speeds.is_empty()).then(|| speeds.iter().sum::<f64>() / speeds.len() as f64);
    let per_page = seconds_per_page(mean, r.params.delay_ms as f64 / 1000.0);
    let (mut total, mut longest) = (0.0f64, 0.0f64);
    for j in jobs.iter().map(Borrow::borrow) {
        let left = match j.state {
            JobState::Queued => j.est_pages.max(1.0) * per_page,
            JobState::Running => running_left(j, per_page, now),
            _ => continue,
        };
        total += left;
        if j.state == JobState::Running {
            longest = longest.max(left);
        }
    }
    Eta {
        seconds: Some((total / f64::from(slots.max(1))).max(longest)),
        how: ETA_HOW,
        note: None,
    }
}

/// Seconds left of a running job: its scan's pace if it reported twice,
/// else its expected pages not yet reported at `per_page`.
fn running_left(j: &JobRecord, per_page: f64, now: u64) -> f64 {
    j.running_attempts()
        .filter(|a| j.is_current(a))
        .filter_map(|a| {
            // Measured from the unit's start, as its reports count.
            let est = j.expected_of(a).max(1.0);
            remaining_s(
                est,
                (a.first_report_ms, a.first_report_pages),
                (a.last_report_ms, a.pages),
                now,
            )
            .or(Some(
                (est - a.pages as f64).max(est * MIN_LEFT_SHARE) * per_page,
            ))
        })
        .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.min(s))))
        .unwrap_or(j.est_pages.max(1.0) * per_page)
}

/// A host's slots as the scheduler counts them: its benchmark's, else the default.
fn host_slots(h: &HostRecord) -> u32 {
    h.benchmark
        .as_ref()
        .map(|b| b.slots)
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_HOST_SLOTS)
}

/// A host's learned pages/s (its real jobs' average), else its benchmark's.
fn host_speed(h: &HostRecord) -> Option<f64> {
    h.speed()
}

/// One host of the hosts page.
#[derive(Clone, Debug, Serialize)]
pub struct HostRow {
    pub id: u64,
    pub name: String,
    pub state: &'static str,
    pub trusted: bool,
    pub slots: u32,
    pub speed_pages_per_s: Option<f64>,
    pub speed_kb_per_s: Option<f64>,
    pub benchmark_pages_per_s: Option<f64>,
    pub benchmark_kb_per_s: Option<f64>,
    pub last_seen_ms: u64,
    pub last_seen_s_ago: f64,
    pub jobs_done: u64,
    pub jobs_failed: u64,
    pub deadlines_missed: u64,
    pub windows: String,
    pub version: String,
    pub os: String,
}

/// `GET /api/dashboard/hosts`.
#[derive(Clone, Debug, Serialize)]
pub struct HostsPage {
    pub now_ms: u64,
    pub poll_ms: u64,
    pub hosts: Vec<HostRow>,
}

pub fn hosts_page(lines: &[HostLine], live: &Live, now: u64) -> HostsPage {
    let hosts = lines
        .iter()
        .map(
            |HostLine {
                 host: h, trusted, ..
             }| HostRow {
                id: h.id,
                name: h.info.name.clone(),
                state: h.state(),
                trusted: *trusted,
                slots: host_slots(h),
                speed_pages_per_s: h.speed(),
                speed_kb_per_s: h.avg_kb_per_s,
                benchmark_pages_per_s: h.benchmark.as_ref().map(|b| b.pages_per_s),
                benchmark_kb_per_s: h.benchmark.as_ref().map(|b| b.kb_per_s),
                last_seen_ms: h.last_seen_ms,
                last_seen_s_ago: now.saturating_sub(h.last_seen_ms) as f64 / 1000.0,
                jobs_done: h.jobs_done,
                jobs_failed: h.failures,
                deadlines_missed: h.deadlines_missed,
                windows: windows_text(live.windows(h.id).as_ref()),
                version: h.info.client_version.clone(),
                os: h.info.os.clone(),
            },
        )
        .collect();
    HostsPage {
        now_ms: now,
        poll_ms: POLL_INTERVAL_MS,
        hosts,
    }
}

/// A host's crawl windows as it last reported them, in UTC.
pub fn windows_text(w: Option<&Windows>) -> String {
    let Some(w) = w else {
        return "not reported yet".to_string();
    };
    let Some(open) = &w.open else {
        return "always".to_string();
    };
    if open.is_empty() {
        return "closed (no window in the coming week)".to_string();
    }
    // A window opens and closes on a minute; the offsets the client counts
    // from its clock's reading lose the part of a second it read at (19:00
    // would print as 18:59), so each edge is put on its nearest minute.
    let at = |s: u64| {
        let ms = w.reported_ms.saturating_add(s.saturating_mul(1000));
        let ms = ms.saturating_add(30_000) / 60_000 * 60_000;
        i64::try_from(ms)
            .ok()
            .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
            .map_or_else(|| "?".to_string(), |t| t.format("%a %H:%M").to_string())
    };
    let mut shown: Vec<String> = open
        .iter()
        .take(MAX_WINDOWS_SHOWN)
        .map(|(a, b)| format!("{}–{}", at(*a), at(*b)))
        .collect();
    if open.len() > MAX_WINDOWS_SHOWN {
        shown.push(format!("+{} more", open.len() - MAX_WINDOWS_SHOWN));
    }
    format!("{} UTC", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobValidation, RoundParams};
    use beebot_shared::proto::HostInfo;

    fn round() -> RoundRecord {
        RoundRecord {
            id: 1,
            created_ms: 1,
            finished_ms: None,
            params: RoundParams {
                delay_ms: 1000,
                ..RoundParams::default()
            },
            state: RoundState::Running,
            job_ids: vec![],
            every_ms: None,
            next_round: None,
            folded: vec![],
        }
    }

    fn job(id: u64, reasons: &[&str]) -> JobRecord {
        JobRecord {
            id,
            round_id: 1,
            site: format!("s{id}.test"),
            state: JobState::Queued,
            attempts: vec![],
            result: None,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            est_pages: 10.0,
            size_known: false,
            batch_host: None,
            segments: vec![],
            chain_sketch: vec![],
            chain: 0,
            candidates: vec![],
            validation: JobValidation::default(),
        }
    }

    fn host(id: u64, seen_ms: u64) -> HostRecord {
        let info = HostInfo {
            name: format!("h{id}"),
            os: "linux".into(),
            client_version: "0.1.0".into(),
            cores: 4,
        };
        let mut h = HostRecord::new(id, [0; 32], info, 0);
        h.last_seen_ms = seen_ms;
        h
    }

    #[test]
    fn the_eta_shares_the_expected_seconds_over_the_online_slots() {
        let jobs: Vec<JobRecord> = (1..=4).map(|i| job(i, &[])).collect();
        let now = 1_000_000;
        // 4 sites of 10 expected pages, a page a second (the delay bounds
        // the default speed), over one host's 2 default slots: 20 s.
        let e = eta(&round(), &jobs, &[host(1, now)], now);
        assert_eq!(e.seconds, Some(20.0), "{e:?}");
        // Two hosts: twice the slots.
        let e = eta(&round(), &jobs, &[host(1, now), host(2, now)], now);
        assert_eq!(e.seconds, Some(10.0));
        // A host gone quiet counts for nothing.
        let e = eta(&round(), &jobs, &[host(1, now - 2 * ONLINE_WINDOW_MS)], now);
        assert_eq!(
            (e.seconds, e.note.as_deref()),
            (None, Some("no host is online"))
        );
        let mut over = round();
        over.state = RoundState::Done;
        assert_eq!(eta(&over, &jobs, &[host(1, now)], now).seconds, None);
    }

    #[test]
    fn failures_are_grouped_by_reason_most_often_first() {
        let jobs = [
            job(1, &["deadline missed", "seed unreachable"]),
            job(2, &["deadline missed"]),
            job(3, &[]),
        ];
        let by = failures_by_reason(&jobs);
        let got: Vec<(&str, usize)> = by.iter().map(|r| (r.reason.as_str(), r.count)).collect();
        assert_eq!(got, [("deadline missed", 2), ("seed unreachable", 1)]);
    }

    #[test]
    fn windows_are_told_in_utc_and_bounded() {
        assert_eq!(windows_text(None), "not reported yet");
        let always = Windows {
            reported_ms: 0,
            open: None,
        };
        assert_eq!(windows_text(Some(&always)), "always");
        // Thursday 1 January 1970, 00:00 UTC.
        let some = Windows {
            reported_ms: 0,
            open: Some(vec![
                (0, 3600),
                (7200, 9000),
                (86_400, 90_000),
                (1, 2),
                (3, 4),
            ]),
        };
        assert_eq!(
            windows_text(Some(&some)),
            "Thu 00:00–Thu 01:00, Thu 02:00–Thu 02:30, Fri 00:00–Fri 01:00, +2 more UTC"
        );
        // Read at 18:30:27.4, a 19:00–07:00 window is 1,772 s away (the
        // client counts whole seconds): it still shows 19:00, not 18:59.
        let evening = Windows {
            reported_ms: (18 * 3600 + 30 * 60 + 27) * 1000 + 400,
            open: Some(vec![(1772, 1772 + 12 * 3600)]),
        };
        assert_eq!(windows_text(Some(&evening)), "Thu 19:00–Fri 07:00 UTC");
    }
}
