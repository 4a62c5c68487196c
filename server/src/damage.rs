//! Damaged results: a done site whose kept link files (its result and the
//! segments before it) can no longer be read whole (missing, cut short, a
//! checksum that fails, a file that does not decode). Found by the check
//! the server runs in the background at start, by `beebot-server check`,
//! and by an export, which leaves such a site out, names it, and goes on
//! with every other site. Kept in memory only (found again at each start);
//! the admin scans the damaged sites again (`round rescan --damaged`),
//! which takes them off the list.
//!
//! Invariants: a site is listed only after a read of its files failed, and
//! leaves the list once a later check read them whole; reading is never
//! done under the grid lock (the callers hand over a copy of the jobs and
//! the storage). Limits: at most [`MAX_DAMAGED_LISTED`] sites are kept:
//! past it the list, `round show` and the metric stop growing (a check's
//! own report still names every damaged site of the rounds it read).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::api::DamagedSite;
use crate::grid::{for_each_link, LinkFiles};
use crate::model::{JobRecord, JobState};

/// Damaged sites kept with their causes; more are not kept.
pub const MAX_DAMAGED_LISTED: usize = 10_000;

/// The exit code of `export` and `check` when a site is damaged (the
/// export itself holds every other site); apart from `round wait`'s 3
/// and 4.
pub const EXIT_DAMAGED: i32 = 5;

/// The damaged sites found so far, by round and site.
#[derive(Debug, Default)]
pub struct Damage(Mutex<BTreeMap<u64, BTreeMap<String, String>>>);

impl Damage {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, BTreeMap<String, String>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Site `site` of round `round` is damaged: `why`.
    pub fn found(&self, round: u64, site: &str, why: &str) {
        let mut m = self.map();
        let listed: usize = m.values().map(BTreeMap::len).sum();
        let known = m.get(&round).is_some_and(|r| r.contains_key(site));
        if known || listed < MAX_DAMAGED_LISTED {
            m.entry(round)
                .or_default()
                .insert(site.to_string(), why.to_string());
        }
    }

    /// A check of round `round` is over: `damaged` are its damaged sites
    /// now (the others were read whole).
    pub fn checked(&self, round: u64, damaged: &[DamagedSite]) {
        self.map().remove(&round);
        for d in damaged {
            self.found(round, &d.site, &d.why);
        }
    }

    /// `sites` of `round` are scanned again: no longer listed.
    pub fn cleared(&self, round: u64, sites: &[String]) {
        let mut m = self.map();
        if let Some(r) = m.get_mut(&round) {
            for s in sites {
                r.remove(s);
            }
            if r.is_empty() {
                m.remove(&round);
            }
        }
    }

    /// The damaged sites of `round`, by name.
    pub fn of_round(&self, round: u64) -> Vec<DamagedSite> {
        self.map()
            .get(&round)
            .into_iter()
            .flatten()
            .map(|(site, why)| DamagedSite {
                round,
                site: site.clone(),
                why: why.clone(),
            })
            .collect()
    }

    /// How many sites are damaged (listed).
    pub fn count(&self) -> u64 {
        self.map().values().map(|r| r.len() as u64).sum()
    }
}

/// Why a done job's kept files cannot be read whole, or `None` when each
/// reads and decodes to its end (every record visited, none kept).
pub fn job_damage(files: &dyn LinkFiles, job: &JobRecord) -> Option<String> {
    if job.state != JobState::Done || job.result.is_none() {
        return None;
    }
    for_each_link(files, job, |_| Ok::<(), std::io::Error>(()))
        .err()
        .map(|e| e.to_string())
}

/// The damaged sites among the done jobs of round `round`, and how many
/// were read.
pub fn check_round(
    files: &dyn LinkFiles,
    round: u64,
    jobs: &[JobRecord],
) -> (u64, Vec<DamagedSite>) {
    let mut read = 0;
    let mut damaged = Vec::new();
    for job in jobs
        .iter()
        .filter(|j| j.state == JobState::Done && j.result.is_some())
    {
        read += 1;
        if let Some(why) = job_damage(files, job) {
            damaged.push(DamagedSite {
                round,
                site: job.site.clone(),
                why,
            });
        }
    }
    damaged.sort_by(|a, b| a.site.cmp(&b.site));
    (read, damaged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(round: u64, name: &str) -> DamagedSite {
        DamagedSite {
            round,
            site: name.into(),
            why: format!("{name} is cut short"),
        }
    }

    #[test]
    fn a_check_replaces_what_was_known_of_its_round_and_the_list_is_bounded() {
        let d = Damage::default();
        d.found(1, "a.test", "gone");
        d.found(2, "b.test", "gone");
        assert_eq!(d.count(), 2);
        // Round 1 checked again: a.test reads whole now, c.test does not.
        d.checked(1, &[site(1, "c.test")]);
        assert_eq!(d.of_round(1), vec![site(1, "c.test")]);
        assert_eq!(d.of_round(2).len(), 1, "other rounds are kept");
        d.checked(2, &[]);
        assert_eq!(d.count(), 1);
        // Past the bound nothing more is listed; a known site's cause may
        // still change.
        for i in 0..MAX_DAMAGED_LISTED + 5 {
            d.found(3, &format!("s{i}.test"), "gone");
        }
        assert_eq!(d.count(), MAX_DAMAGED_LISTED as u64);
        d.found(1, "c.test", "still cut short");
        assert_eq!(d.of_round(1)[0].why, "still cut short");
    }
}
