//! The target set and its exclusions: sites added (once, `www.` and the bare
//! host being one site) and removed; hosts excluded at a site owner's
//! request, and the exclusions a unit carries.
//!
//! Invariants: no site in the target set is covered by an exclusion; the
//! exclusions are keyed by their host's [`reversed_labels`], so those
//! under one root are a range. Excluding a host takes it out of running
//! rounds at once; lifting one never adds its sites back.

use std::collections::HashMap;

use beebot_shared::limits::MAX_SITES;
use beebot_shared::limits::{MAX_EXCLUSIONS, MAX_EXCLUSION_REASON_CHARS, MAX_UNIT_EXCLUSIONS};
use beebot_shared::scope::{reversed_labels, site_key, Exclusion, Scope, SiteScope};
use beebot_shared::util::collapse_whitespace;

use super::{push_reason, Grid, GridError};
use crate::model::*;

/// The reason a job taken out of its round by an exclusion fails with.
pub const EXCLUDED_REASON: &str = "excluded";

/// Why `site` may not be added: the exclusion that covers it.
pub fn excluded_message(site: &str, e: &ExclusionRecord) -> String {
    format!(
        "`{site}` is excluded from crawling ({}: {}); lift it with `sites include {}`",
        e.exclusion.display(),
        e.reason,
        e.exclusion.display()
    )
}

/// What [`Grid::exclude`] did.
#[derive(Clone, Debug)]
pub struct ExcludeOutcome {
    pub record: ExclusionRecord,
    /// The exclusion of the same host it replaced, if any.
    pub replaced: Option<ExclusionRecord>,
    /// Sites it took out of the target set.
    pub sites_removed: Vec<String>,
    /// Open jobs of running rounds it failed (their site is excluded).
    pub jobs_excluded: usize,
    /// Running copies of other jobs whose scope reaches the host, aborted
    /// (their jobs go on with units that carry the exclusion).
    pub copies_restarted: usize,
}

/// An exclusion's reason as kept: at most [`MAX_EXCLUSION_REASON_CHARS`]
/// characters, its whitespace collapsed, never empty.
fn exclusion_reason(reason: &str) -> Result<String, GridError> {
    if reason.chars().count() > MAX_EXCLUSION_REASON_CHARS {
        return Err(GridError::Invalid(format!(
            "the reason is {} characters long; at most {MAX_EXCLUSION_REASON_CHARS} are kept",
            reason.chars().count()
        )));
    }
    let reason = collapse_whitespace(reason, MAX_EXCLUSION_REASON_CHARS);
    if reason.is_empty() {
        return Err(GridError::Invalid(
            "say why the host is excluded (--reason, e.g. \"owner asked, ticket 42\")".into(),
        ));
    }
    Ok(reason)
}

impl Grid {
    /// Add sites (already parsed to hosts). Returns how many were new.
    pub fn add_sites(&mut self, hosts: &[String], now_ms: u64) -> Result<usize, GridError> {
        if self.sites.len() + hosts.len() > MAX_SITES {
            return Err(GridError::Invalid(format!(
                "the target set may hold at most {MAX_SITES} sites"
            )));
        }
        if let Some((h, e)) = hosts
            .iter()
            .find_map(|h| self.excluded_by(h).map(|e| (h, e)))
        {
            return Err(GridError::Invalid(excluded_message(h, e)));
        }
        // `www.x.edu` and `x.edu` are one site: one of them is kept.
        let mut keys: HashMap<String, &str> = self
            .sites
            .keys()
            .map(|h| (site_key(h), h.as_str()))
            .collect();
        for h in hosts {
            match keys.get(&site_key(h)) {
                Some(existing) if *existing != h.as_str() => {
                    return Err(GridError::SameSite {
                        given: h.clone(),
                        existing: existing.to_string(),
                        where_: if self.sites.contains_key(*existing) {
                            "already in the target set"
                        } else {
                            "given before it"
                        },
                    })
                }
                _ => {}
            }
            keys.insert(site_key(h), h.as_str());
        }
        let mut added = 0;
        for h in hosts {
            if self.sites.contains_key(h) {
                continue;
            }
            let rec = SiteRecord {
                host: h.clone(),
                added_ms: now_ms,
                last_scan: None,
            };
            self.writes.put_site(&rec);
            self.sites.insert(h.clone(), rec);
            added += 1;
        }
        Ok(added)
    }

    /// Remove the site `host` names (`x.edu` removes `www.x.edu`: one
    /// site); returns the one removed.
    pub fn remove_site(&mut self, host: &str) -> Result<Option<String>, GridError> {
        let key = site_key(host);
        let Some(stored) = self.sites.keys().find(|h| site_key(h) == key).cloned() else {
            return Ok(None);
        };
        self.sites.remove(&stored);
        self.writes.remove_site(&stored);
        Ok(Some(stored))
    }

    pub fn sites(&self) -> Vec<SiteRecord> {
        self.sites.values().cloned().collect()
    }

    /// [`Grid::add_sites`] for the hosts no exclusion covers; the others are
    /// refused one by one: `(index in hosts, host, its exclusion)`.
    #[allow(clippy::type_complexity)]
    pub fn add_sites_except_excluded(
        &mut self,
        hosts: &[String],
        now_ms: u64,
    ) -> Result<(usize, Vec<(usize, String, ExclusionRecord)>), GridError> {
        let mut refused = Vec::new();
        let mut allowed = Vec::with_capacity(hosts.len());
        for (i, h) in hosts.iter().enumerate() {
            match self.excluded_by(h) {
                Some(e) => refused.push((i, h.clone(), e.clone())),
                None => allowed.push(h.clone()),
            }
        }
        let added = self.add_sites(&allowed, now_ms)?;
        Ok((added, refused))
    }

    /// The exclusion that covers `host` (a site, maybe with a port), if any:
    /// one for the host itself (`www.` and the bare host alike), or one
    /// with subdomains for a name above it.
    pub fn excluded_by(&self, host: &str) -> Option<&ExclusionRecord> {
        if self.exclusions.is_empty() {
            return None; // (round starts and imports parse no host then)
        }
        let e = Exclusion::parse(host, false).ok()?;
        if let Some(r) = self.exclusions.get(&reversed_labels(&e.host)) {
            return Some(r);
        }
        let mut rest = e.host.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(r) = self
                .exclusions
                .get(&reversed_labels(parent))
                .filter(|r| r.exclusion.subdomains)
            {
                return Some(r);
            }
            rest = parent;
        }
        None
    }

    /// The exclusions of hosts at or under `root`, in key order.
    pub(super) fn exclusions_under<'a>(
        &'a self,
        root: &str,
    ) -> impl Iterator<Item = &'a ExclusionRecord> {
        let key = reversed_labels(root);
        let prefix = format!("{key}.");
        self.exclusions.get(&key).into_iter().chain(
            self.exclusions
                .range(prefix.clone()..)
                .take_while(move |(k, _)| k.starts_with(&prefix))
                .map(|(_, r)| r),
        )
    }

    /// The scope a unit of `site` is issued with and the exclusions it
    /// carries: the round's scope with the exclusions at or under its root,
    /// or `host` scope (which reaches no other host) when more than
    /// [`MAX_UNIT_EXCLUSIONS`] lie there.
    pub fn unit_scope(&self, site: &str, scope: Scope) -> (Scope, Vec<Exclusion>) {
        let site_scope = SiteScope::new(site, scope);
        let Some(root) = site_scope.root() else {
            return (scope, Vec::new());
        };
        let inside: Vec<Exclusion> = self
            .exclusions_under(root)
            .take(MAX_UNIT_EXCLUSIONS + 1)
            .map(|r| r.exclusion.clone())
            .collect();
        if inside.len() > MAX_UNIT_EXCLUSIONS {
            (Scope::Host, Vec::new())
        } else {
            (scope, inside)
        }
    }

    /// Every exclusion, a host before its subdomains.
    pub fn exclusions(&self) -> Vec<ExclusionRecord> {
        self.exclusions.values().cloned().collect()
    }

    /// Exclude a host from crawling (a site owner asked). The sites it
    /// covers leave the target set; their open jobs in running rounds fail
    /// with the reason `excluded` (running copies are aborted, and their
    /// hosts told to drop them); running copies of other jobs whose scope
    /// reaches the host are aborted and their jobs queued again, so they go
    /// on with units that carry the exclusion. Excluding a host again
    /// replaces its reason and date.
    pub fn exclude(
        &mut self,
        exclusion: Exclusion,
        reason: &str,
        now_ms: u64,
    ) -> Result<ExcludeOutcome, GridError> {
        let reason = exclusion_reason(reason)?;
        let key = reversed_labels(&exclusion.host);
        let replaced = self.exclusions.get(&key).cloned();
        if replaced.is_none() && self.exclusions.len() >= MAX_EXCLUSIONS {
            return Err(GridError::Invalid(format!(
                "at most {MAX_EXCLUSIONS} hosts may be excluded"
            )));
        }
        let record = ExclusionRecord {
            exclusion,
            reason,
            excluded_ms: now_ms,
        };
        self.writes.put_exclusion(&record);
        self.exclusions.insert(key, record.clone());
        let e = &record.exclusion;
        let sites_removed: Vec<String> = self
            .sites
            .keys()
            .filter(|h| e.covers_host(h))
            .cloned()
            .collect();
        for h in &sites_removed {
            self.sites.remove(h);
            self.writes.remove_site(h);
        }
        let (jobs_excluded, copies_restarted) = self.exclude_from_rounds(&record, now_ms)?;
        if jobs_excluded + copies_restarted > 0 {
            // Connected hosts ask again at once and hear which units to drop.
            self.rounds_changed += 1;
        }
        Ok(ExcludeOutcome {
            record,
            replaced,
            sites_removed,
            jobs_excluded,
            copies_restarted,
        })
    }

    /// Take the jobs an exclusion covers out of the running rounds (failed
    /// with the reason `excluded`), and restart the running copies of jobs
    /// whose scope reaches the host. Returns (jobs excluded, copies restarted).
    fn exclude_from_rounds(
        &mut self,
        record: &ExclusionRecord,
        now_ms: u64,
    ) -> Result<(usize, usize), GridError> {
        let running = self.running_round_ids();
        let (mut jobs_excluded, mut copies_restarted) = (0, 0);
        for round_id in running {
            let Some(round) = self.rounds.get(&round_id) else {
                continue;
            };
            let scope = round.params.scope;
            let ids = round.job_ids.clone();
            for id in ids {
                let (excluded, restarted) = self.exclude_job(id, scope, record)?;
                jobs_excluded += excluded;
                copies_restarted += restarted;
            }
            self.check_round_done(round_id, now_ms)?;
        }
        Ok((jobs_excluded, copies_restarted))
    }

    /// [`Grid::exclude_from_rounds`] for job `id` of a running round of
    /// `scope`: (1, 0) when the exclusion covers its site, (0, copies
    /// aborted) when its scope reaches the host, else (0, 0).
    fn exclude_job(
        &mut self,
        id: u64,
        scope: Scope,
        record: &ExclusionRecord,
    ) -> Result<(usize, usize), GridError> {
        let Some(job) = self.jobs.get_mut(&id) else {
            return Ok((0, 0));
        };
        if job.state.is_final() {
            return Ok((0, 0));
        }
        let e = &record.exclusion;
        let covered = e.covers_host(&job.site);
        // A copy running with an older list of exclusions must not go on.
        let reached = !covered
            && SiteScope::new(&job.site, scope).root().is_some_and(|root| {
                Exclusion {
                    host: root.to_string(),
                    subdomains: true,
                }
                .covers_host(&e.host)
            });
        if !covered && !reached {
            return Ok((0, 0));
        }
        let mut aborted = 0;
        for a in job.attempts.iter_mut() {
            if a.state == AttemptState::Running {
                a.state = AttemptState::Aborted;
                aborted += 1;
            }
        }
        self.counters.units_aborted += aborted as u64;
        let counts = if covered {
            job.state = JobState::Failed;
            push_reason(job, format!("{EXCLUDED_REASON}: {}", record.reason));
            (1, 0)
        } else if aborted > 0 {
            job.state = JobState::Queued;
            (0, aborted)
        } else {
            return Ok((0, 0));
        };
        let job = job.clone();
        if job.state.is_final() {
            self.drop_states(&job);
        }
        self.writes.put_job(job);
        self.reindex(id);
        Ok(counts)
    }

    /// Lift the exclusion of `exclusion.host` (with or without its
    /// subdomains); returns it. The host's sites are not added back.
    pub fn include(&mut self, exclusion: &Exclusion) -> Result<ExclusionRecord, GridError> {
        let key = reversed_labels(&exclusion.host);
        let Some(record) = self.exclusions.get(&key).cloned() else {
            return Err(match self.excluded_by(&exclusion.host) {
                Some(above) => GridError::Invalid(format!(
                    "{} is excluded as part of {} ({}): lift that with `sites include {}`",
                    exclusion.host,
                    above.exclusion.display(),
                    above.reason,
                    above.exclusion.display()
                )),
                None => GridError::Invalid(format!(
                    "{} is not excluded (see `sites exclusions`)",
                    exclusion.host
                )),
            });
        };
        self.writes.remove_exclusion(&record.exclusion.host);
        self.exclusions.remove(&key);
        Ok(record)
    }
}

#[cfg(test)]
mod tests;
