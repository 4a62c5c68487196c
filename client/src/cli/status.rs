//! `beebot status`: what the client is doing (the running client's live
//! status, else the spool's), as text or `--json`.
//!
//! What is shown is read first ([`StatusView::read`]), then formatted, so
//! the formats are testable without a home. Deadlines are the server's,
//! shown as time left; they never stop a scan. Nothing here writes.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;

use beebot_client::control::{self, LiveStatus};
use beebot_client::home::{today_date, DayTotals, Enrolment, Home, Revocation};
use beebot_shared::util::human_duration;

use super::REVOKED_ADVICE;

/// Hex digits of the server certificate's digest shown.
const CERT_DIGITS_SHOWN: usize = 16;

/// `beebot status`: the running client's live status, or the spool's.
pub fn status(home: &Home, json: bool) -> Result<String> {
    let Some(e) = home.identity().enrolment()? else {
        return Ok(not_joined(home, json));
    };
    let view = StatusView::read(home, e)?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&view.json())?));
    }
    Ok(view.text(control::unix_ms(SystemTime::now())))
}

/// What `beebot status` says before the home joined a project.
fn not_joined(home: &Home, json: bool) -> String {
    if json {
        format!("{}\n", serde_json::json!({ "enrolled": false }))
    } else {
        format!(
            "not joined (home {}): run `beebot join -` and paste the invite code\n",
            home.config.display()
        )
    }
}

/// One unit held in the spool.
struct HeldUnit {
    unit_id: u64,
    site: String,
    /// Its result is spooled, waiting for upload.
    finished: bool,
    /// Server clock, as last extended.
    deadline_ms: u64,
    checkpoint: bool,
}

/// Everything `beebot status` shows of a joined home.
struct StatusView {
    enrolment: Enrolment,
    units: Vec<HeldUnit>,
    /// Spooled units refused (their signature, their host).
    refused: Vec<String>,
    live: Option<LiveStatus>,
    revocation: Option<Revocation>,
    today: DayTotals,
}

impl StatusView {
    /// Read what is shown from the home.
    fn read(home: &Home, enrolment: Enrolment) -> Result<StatusView> {
        let (units, refused) = home
            .spool()
            .spooled_units(&enrolment.project_verifying_key()?)?;
        let units = units
            .iter()
            .map(|u| HeldUnit {
                unit_id: u.unit.unit_id,
                site: u.unit.site.clone(),
                finished: matches!(home.spool().result(u.unit.unit_id), Ok(Some(_))),
                deadline_ms: home
                    .spool()
                    .deadline(u.unit.unit_id)
                    .unwrap_or(u.unit.deadline_ms),
                checkpoint: home.spool().has_checkpoint(u.unit.unit_id),
            })
            .collect();
        Ok(StatusView {
            enrolment,
            units,
            refused,
            live: control::read_live_status(&home.data),
            revocation: home.identity().revocation(),
            today: home.days().today(&today_date()),
        })
    }

    /// Results waiting for upload.
    fn pending(&self) -> usize {
        self.units.iter().filter(|u| u.finished).count()
    }

    /// The `--json` form.
    fn json(&self) -> serde_json::Value {
        let (e, live) = (&self.enrolment, self.live.as_ref());
        serde_json::json!({
            "enrolled": true,
            "project": e.server_addr,
            "host_id": e.host_id,
            "name": e.name,
            "state": live.map(|l| l.state.as_str()).unwrap_or("not running"),
            "until_ms": live.and_then(|l| l.until_ms),
            "scans": live.map(|l| l.scans.clone()).unwrap_or_default(),
            "concurrency": live.and_then(|l| l.concurrency),
            "slots_ceiling": live.and_then(|l| l.slots_ceiling),
            "today": self.today,
            "units_held": self.units.iter().map(|u| serde_json::json!({
                "unit_id": u.unit_id, "site": u.site,
                "finished": u.finished,
                "deadline_ms": u.deadline_ms,
                "checkpoint": u.checkpoint,
            })).collect::<Vec<_>>(),
            "pending_uploads": self.pending(),
            "last_error": live.and_then(|l| l.last_error.clone()),
            "refused": self.refused,
            "revoked": self.revocation.as_ref().map(|r| serde_json::json!({
                "at_ms": r.at_ms, "message": r.message, "advice": REVOKED_ADVICE,
            })),
        })
    }

    /// The text form, at `now_ms` (Unix ms).
    fn text(&self, now_ms: u64) -> String {
        let e = &self.enrolment;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "project   {} (certificate sha256:{}…)",
            e.server_addr,
            &e.cert_sha256[..CERT_DIGITS_SHOWN.min(e.cert_sha256.len())]
        );
        let _ = writeln!(out, "host      {} ({})", e.host_id, e.name);
        if let Some(r) = &self.revocation {
            let at = UNIX_EPOCH + Duration::from_millis(r.at_ms);
            let _ = writeln!(
                out,
                "REVOKED   this host was revoked by the project (heard {}: {}): {REVOKED_ADVICE}",
                control::local_time(at),
                r.message
            );
        }
        match &self.live {
            Some(l) => live_text(&mut out, l, now_ms),
            None => out.push_str("state     not running\n"),
        }
        let t = &self.today;
        let _ = writeln!(
            out,
            "today     {} results, {} pages, {} links",
            t.results, t.pages, t.links
        );
        let _ = writeln!(out, "units     {} held", self.units.len());
        for u in &self.units {
            let state = if u.finished {
                "finished, upload pending"
            } else {
                "to scan"
            };
            let _ = writeln!(out, "  unit {}  {}  {state}", u.unit_id, u.site);
        }
        let _ = writeln!(out, "uploads   {} pending", self.pending());
        for r in &self.refused {
            let _ = writeln!(out, "refused   {r}");
        }
        out
    }
}

/// The running client's lines: its state, uptime, scans and last error.
fn live_text(out: &mut String, l: &LiveStatus, now: u64) {
    let human_ms = |ms: u64| human_duration(Duration::from_millis(ms));
    let _ = writeln!(
        out,
        "state     {} (pid {})",
        control::state_text(l, now),
        l.pid
    );
    if let Some(t) = l.started_ms {
        let _ = writeln!(out, "up        {}", human_ms(now.saturating_sub(t)));
    }
    if let (Some(c), Some(most)) = (l.concurrency, l.slots_ceiling) {
        let _ = writeln!(out, "sites     {c} at once (at most {most}: slots)");
    }
    for s in &l.scans {
        // The deadline only says when the server would think this
        // host gone; the server moves it while the scan reports.
        let deadline = s
            .deadline_ms
            .map(|d| format!("  deadline in {}", human_ms(d.saturating_sub(now))))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  scanning {}  {} pages  {} links  {:.1} pages/s{deadline}",
            s.site, s.pages, s.links, s.pages_per_s
        );
    }
    if let Some(err) = &l.last_error {
        let _ = writeln!(out, "last error {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_client::control::ScanStatus;

    const NOW: u64 = 1_700_000_000_000;

    fn view(live: Option<LiveStatus>) -> StatusView {
        StatusView {
            enrolment: Enrolment {
                server_addr: "grid.test:4433".into(),
                server_name: "grid.test".into(),
                cert_sha256: "0123456789abcdef0123".into(),
                project_key: String::new(),
                host_id: 7,
                name: "desk-7".into(),
                joined_ms: 1,
            },
            units: vec![
                HeldUnit {
                    unit_id: 11,
                    site: "a.test".into(),
                    finished: true,
                    deadline_ms: NOW + 60_000,
                    checkpoint: false,
                },
                HeldUnit {
                    unit_id: 12,
                    site: "b.test".into(),
                    finished: false,
                    deadline_ms: NOW + 120_000,
                    checkpoint: true,
                },
            ],
            refused: vec!["unit 13: bad signature".into()],
            live,
            revocation: None,
            today: DayTotals {
                date: "2026-12-01".into(),
                results: 2,
                pages: 30,
                links: 400,
            },
        }
    }

    #[test]
    fn a_stopped_client_shows_its_project_units_and_uploads() {
        assert_eq!(
            view(None).text(NOW),
            "project   grid.test:4433 (certificate sha256:0123456789abcdef…)\n\
             host      7 (desk-7)\n\
             state     not running\n\
             today     2 results, 30 pages, 400 links\n\
             units     2 held\n\
             \x20 unit 11  a.test  finished, upload pending\n\
             \x20 unit 12  b.test  to scan\n\
             uploads   1 pending\n\
             refused   unit 13: bad signature\n"
        );
    }

    #[test]
    fn a_running_client_shows_its_scans_uptime_deadlines_and_last_error() {
        let live = LiveStatus {
            pid: 42,
            state: "running".into(),
            scans: vec![ScanStatus {
                unit_id: 12,
                site: "b.test".into(),
                pages: 10,
                links: 99,
                pages_per_s: 1.5,
                deadline_ms: Some(NOW + 600_000),
                queued: Some(5),
                page_cap: Some(100),
            }],
            last_error: Some("server unreachable".into()),
            started_ms: Some(NOW - 3_600_000),
            ..LiveStatus::default()
        };
        let text = view(Some(live.clone())).text(NOW);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            format!("state     {} (pid 42)", control::state_text(&live, NOW))
        );
        assert_eq!(
            lines[3],
            format!("up        {}", human_duration(Duration::from_secs(3600)))
        );
        assert_eq!(
            lines[4],
            format!(
                "  scanning b.test  10 pages  99 links  1.5 pages/s  deadline in {}",
                human_duration(Duration::from_secs(600))
            )
        );
        assert_eq!(lines[5], "last error server unreachable");
        assert_eq!(lines[6], "today     2 results, 30 pages, 400 links");
    }

    #[test]
    fn the_json_form_names_every_unit_and_the_state() {
        let v = view(None).json();
        assert_eq!(v["enrolled"], true);
        assert_eq!(v["state"], "not running");
        assert_eq!(v["pending_uploads"], 1);
        assert_eq!(v["units_held"][1]["checkpoint"], true);
        assert_eq!(v["units_held"][0]["deadline_ms"], NOW + 60_000);
        assert!(v["revoked"].is_null());
    }
}
