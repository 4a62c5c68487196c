//! Results delivered a day (`days.json`, the last [`DAYS_KEPT`] days),
//! and a week's totals from them.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use beebot_shared::durable::read_at_most;

use super::files::write_atomic;

/// Results delivered on one day.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotals {
    /// Local date, `YYYY-MM-DD`.
    pub date: String,
    pub results: u64,
    pub pages: u64,
    pub links: u64,
}

/// Days of totals kept for the week's (two weeks: a week back from any day).
pub const DAYS_KEPT: usize = 14;

/// Today's local date as `YYYY-MM-DD`.
pub fn today_date() -> String {
    crate::localtime::today()
}

/// Largest file of day totals (a line a day, the last weeks kept).
pub(super) const MAX_DAYS_FILE_BYTES: usize = 1 << 20;

/// The totals among `days` of the seven days ending on `today`
/// (`YYYY-MM-DD`).
fn week_in(days: &[DayTotals], today: &str) -> DayTotals {
    let first = chrono::NaiveDate::parse_from_str(today, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.checked_sub_days(chrono::Days::new(6)))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_else(|| today.to_string());
    let mut w = DayTotals {
        date: first.clone(),
        ..Default::default()
    };
    for d in days {
        if d.date.as_str() >= first.as_str() && d.date.as_str() <= today {
            w.results += d.results;
            w.pages += d.pages;
            w.links += d.links;
        }
    }
    w
}

/// The day totals' file.
#[derive(Clone, Debug)]
pub struct Days {
    pub(super) path: PathBuf,
}

impl Days {
    /// Today's totals (local date), kept in the spool across restarts.
    pub fn today(&self, date: &str) -> DayTotals {
        self.day_in(&self.all(), date)
    }

    /// Today's totals, or `None` when the days' file could not be read or
    /// does not parse (the zeros [`Days::today`] gives then are no reading
    /// to keep).
    pub fn today_read(&self, date: &str) -> Option<DayTotals> {
        let days = self.read_days().ok()?.ok()?;
        Some(self.day_in(&days, date))
    }

    /// `date`'s totals among `days`, else nothing yet.
    fn day_in(&self, days: &[DayTotals], date: &str) -> DayTotals {
        days.iter()
            .rfind(|d| d.date == date)
            .cloned()
            .unwrap_or_else(|| DayTotals {
                date: date.to_string(),
                ..Default::default()
            })
    }

    /// Add one accepted result to today's totals, kept with the days kept
    /// for the week's ([`Days::all`]): one read and one write a result.
    pub fn add_to_today(&self, date: &str, pages: u64, links: u64) -> Result<DayTotals> {
        let mut days = match self.read_days()? {
            Ok(days) => days,
            Err(why) => {
                // Not overwritten: the history that does not parse is kept
                // aside, under a name of its own.
                let aside = self.path.with_extension(format!(
                    "json.unreadable-{}",
                    beebot_shared::clock::now_ms()
                ));
                fs::rename(&self.path, &aside)
                    .with_context(|| format!("cannot keep {} aside", self.path.display()))?;
                tracing::warn!(
                    "{} could not be read ({why}): kept as {}, the days start again",
                    self.path.display(),
                    aside.display()
                );
                Vec::new()
            }
        };
        let mut d = self.day_in(&days, date);
        d.results += 1;
        d.pages += pages;
        d.links += links;
        days.retain(|x| x.date != d.date);
        days.sort_by(|a, b| a.date.cmp(&b.date));
        // The oldest other days go; today's stays, even on a clock set
        // back behind the days kept.
        let extra = (days.len() + 1).saturating_sub(DAYS_KEPT);
        days.drain(..extra.min(days.len()));
        let at = days.partition_point(|x| x.date < d.date);
        days.insert(at, d.clone());
        write_atomic(&self.path, serde_json::to_string(&days)?.as_bytes(), false)?;
        Ok(d)
    }

    /// The totals of the last [`DAYS_KEPT`] days with results, oldest first
    /// (none while the file cannot be read).
    pub fn all(&self) -> Vec<DayTotals> {
        self.read_days()
            .ok()
            .and_then(|d| d.ok())
            .unwrap_or_default()
    }

    /// The days kept, none when there is no file yet; the inner `Err`
    /// says why a file that was read does not parse (bytes no reader can
    /// use), the outer one why it could not be read (which may pass).
    pub(super) fn read_days(&self) -> Result<std::result::Result<Vec<DayTotals>, String>> {
        match read_at_most(&self.path, MAX_DAYS_FILE_BYTES) {
            Ok(Some(bytes)) => Ok(serde_json::from_slice(&bytes).map_err(|e| e.to_string())),
            Ok(None) => Ok(Err(format!(
                "larger than a days file may be ({MAX_DAYS_FILE_BYTES} bytes)"
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ok(Vec::new())),
            Err(e) => Err(e).with_context(|| format!("cannot read {}", self.path.display())),
        }
    }

    /// Today's totals and the week's, from one reading of the days' file
    /// (the page asks for both every two seconds while it is open).
    pub fn today_and_week(&self, today: &str) -> (DayTotals, DayTotals) {
        let days = self.all();
        (self.day_in(&days, today), week_in(&days, today))
    }
}
