//! Hosts and invites: invites made, listed and revoked; enrolment with an
//! invite's token; `Hello` and benchmarks; a host revoked or leaving; trust
//! and names.
//!
//! Invariants: only an invite token's SHA-256 is kept, never the token; no
//! two active hosts share a name (compared trimmed, ignoring case) and no
//! key is enrolled twice; a host's texts are cut to [`MAX_TEXT_LEN`] on
//! whole characters. A host that goes (revoked or leaving) gives its
//! running units back ([`super::attempts`] requeues them); nothing here
//! judges a unit or a result.
//!
//! The concurrency a client reports (`set_concurrency`) is kept in memory
//! (`HostRecord::concurrency`), never stored. A work request writes its host
//! only when more than its last contact changed, else every
//! `LAST_SEEN_STORED_EVERY_MS` (30 s), so a host asking every few seconds costs
//! no fsync per empty answer.

use beebot_shared::limits::{
    INVITE_TOKEN_LEN, MAX_BENCHMARK_KB_PER_S, MAX_BENCHMARK_PAGES_PER_S, MAX_HOST_MEMORY_MB,
    MAX_TEXT_LEN,
};
use beebot_shared::proto::{HostInfo, HostResources};
use beebot_shared::util::{sha256, truncate_on_char};
use rand::RngCore;
use serde::{Deserialize, Serialize};

use super::{Grid, GridError};
use crate::model::*;
use crate::scheduler;
use crate::store::IdKind;

/// One host as `hosts list` shows it: its record and whether it is trusted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostLine {
    #[serde(flatten)]
    pub host: HostRecord,
    /// Enough valid results in a row: only spot checks of its results.
    pub trusted: bool,
    /// What it offers its scans beyond slots, as it said since the server
    /// started (`None`: not yet).
    #[serde(default)]
    pub resources: Option<HostResources>,
}

/// Hex digits of an invite's id: the start of its token's SHA-256, enough to
/// tell invites apart and nothing of the token itself.
pub const INVITE_ID_LEN: usize = 16;
/// A work request's only change to its host may be its last contact: it is
/// written at most this often then. A restart finds it at most this stale,
/// well inside [`scheduler::ONLINE_WINDOW_MS`], so no time away is counted
/// for the gap.
pub const LAST_SEEN_STORED_EVERY_MS: u64 = 30_000;
/// Fewest hex digits `invite revoke` takes (a prefix of the id).
pub const MIN_INVITE_ID_LEN: usize = 6;

/// An invite's id: the first [`INVITE_ID_LEN`] hex digits of its token's hash.
pub fn invite_id(token_sha256: &[u8; 32]) -> String {
    hex::encode(&token_sha256[..INVITE_ID_LEN / 2])
}

/// Two host names are one (`Alice` and `alice ` would be told apart by
/// nobody reading `hosts list`).
pub(super) fn same_name(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

impl Grid {
    /// Make an invite; returns the secret token (only its hash is kept).
    pub fn create_invite(
        &mut self,
        uses: u32,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<u8>, GridError> {
        if uses == 0 {
            return Err(GridError::Invalid(
                "an invite needs at least one use".into(),
            ));
        }
        let mut token = vec![0u8; INVITE_TOKEN_LEN];
        self.rng.fill_bytes(&mut token);
        let rec = InviteRecord {
            token_sha256: sha256(&token),
            uses_left: uses,
            expires_ms,
            created_ms: now_ms,
        };
        self.writes.put_invite(&rec);
        self.invites.insert(rec.token_sha256, rec);
        Ok(token)
    }

    /// Every invite, oldest first, each with its id (never the token: the
    /// grid keeps only the token's hash).
    pub fn invites(&self) -> Vec<(String, InviteRecord)> {
        let mut all: Vec<(String, InviteRecord)> = self
            .invites
            .values()
            .map(|i| (invite_id(&i.token_sha256), i.clone()))
            .collect();
        all.sort_by(|a, b| (a.1.created_ms, &a.0).cmp(&(b.1.created_ms, &b.0)));
        all
    }

    /// Revoke the invite whose id starts with `id` (at least
    /// [`MIN_INVITE_ID_LEN`] hex digits, naming one invite): it is deleted, so
    /// nobody joins with it any more. Returns the revoked invite's full id.
    pub fn revoke_invite(&mut self, id: &str) -> Result<String, GridError> {
        let id = id.trim().to_ascii_lowercase();
        if id.len() < MIN_INVITE_ID_LEN || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GridError::Invalid(format!(
                "an invite id is at least {MIN_INVITE_ID_LEN} hex digits (see `invite list`)"
            )));
        }
        let mut found = self
            .invites
            .keys()
            .filter(|h| invite_id(h).starts_with(&id))
            .copied();
        let hash = found.next().ok_or(GridError::UnknownInvite(id.clone()))?;
        if found.next().is_some() {
            return Err(GridError::Invalid(format!(
                "invite id {id} names more than one invite: give more digits"
            )));
        }
        self.writes.remove_invite(&hash);
        self.invites.remove(&hash);
        Ok(invite_id(&hash))
    }

    /// Enrol a host whose key proof was already checked by the caller.
    pub fn enrol(
        &mut self,
        token: &[u8],
        host_key: [u8; 32],
        mut info: HostInfo,
        now_ms: u64,
    ) -> Result<u64, GridError> {
        let hash = sha256(token);
        let inv = self.invites.get(&hash).ok_or(GridError::BadInvite)?;
        if inv.uses_left == 0 || inv.expires_ms <= now_ms {
            return Err(GridError::BadInvite);
        }
        if let Some(h) = self.hosts.values().find(|h| h.key == host_key) {
            return Err(GridError::KeyEnrolled(h.id));
        }
        // Names tell hosts apart (`hosts revoke NAME`); one that left or was
        // revoked gives its name up.
        if let Some(h) = self.hosts.values().find(|h| {
            !h.revoked && !info.name.trim().is_empty() && same_name(&h.info.name, &info.name)
        }) {
            return Err(GridError::NameTaken {
                name: info.name.clone(),
                host_id: h.id,
            });
        }
        let mut inv = inv.clone();
        inv.uses_left -= 1;
        truncate_on_char(&mut info.name, MAX_TEXT_LEN);
        truncate_on_char(&mut info.os, MAX_TEXT_LEN);
        truncate_on_char(&mut info.client_version, MAX_TEXT_LEN);
        let id = self.writes.next_id(IdKind::Host);
        let host = HostRecord::new(id, host_key, info, now_ms);
        self.writes.put_invite(&inv);
        self.writes.put_host(&host);
        self.invites.insert(hash, inv);
        self.hosts.insert(id, host);
        Ok(id)
    }

    /// A host's name, for log lines.
    pub fn host_name(&self, host_id: u64) -> Option<String> {
        self.hosts.get(&host_id).map(|h| h.info.name.clone())
    }

    /// The host `id_or_name` names: an id, else the one active host of that
    /// name (a name only revoked hosts had names the newest of them).
    pub fn find_host(&self, id_or_name: &str) -> Result<u64, GridError> {
        let given = id_or_name.trim();
        if let Ok(id) = given.parse::<u64>() {
            if self.hosts.contains_key(&id) {
                return Ok(id);
            }
        }
        let named: Vec<&HostRecord> = self
            .hosts
            .values()
            .filter(|h| same_name(&h.info.name, given))
            .collect();
        let active: Vec<u64> = named.iter().filter(|h| !h.revoked).map(|h| h.id).collect();
        match (active.as_slice(), named.last()) {
            ([id], _) => Ok(*id),
            ([], Some(h)) => Ok(h.id),
            ([], None) => match given.parse::<u64>() {
                Ok(id) => Err(GridError::UnknownHost(id)),
                Err(_) => Err(GridError::UnknownHostName(given.to_string())),
            },
            (ids, _) => Err(GridError::AmbiguousHostName {
                name: given.to_string(),
                ids: ids.to_vec(),
            }),
        }
    }

    /// The key of an active host, for checking its proof.
    /// The key a host enrolled with, revoked or not (`Hello` checks the
    /// proof before it says anything else about the host).
    pub fn enrolled_key(&self, host_id: u64) -> Option<[u8; 32]> {
        self.hosts.get(&host_id).map(|h| h.key)
    }

    pub(super) fn active_host(
        &mut self,
        host_id: u64,
        now_ms: u64,
    ) -> Result<&mut HostRecord, GridError> {
        // What it says may change its view.
        self.stale_views.insert(host_id);
        let h = self
            .hosts
            .get_mut(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        if h.revoked {
            return Err(GridError::Revoked(host_id));
        }
        // A silence longer than the online window was time away.
        let gap = now_ms.saturating_sub(h.last_seen_ms);
        if gap > scheduler::ONLINE_WINDOW_MS {
            h.offline_ms = h.offline_ms.saturating_add(gap);
        }
        h.last_seen_ms = h.last_seen_ms.max(now_ms);
        Ok(h)
    }

    /// Store `host` after a contact of `request_work`'s, if that changed
    /// more than its last contact (`offline_before`: its time away before
    /// the contact) or its stored last contact is
    /// [`LAST_SEEN_STORED_EVERY_MS`] old: a host asking every few seconds
    /// then costs no write (and no fsync) per empty answer.
    pub(super) fn store_contact(
        &mut self,
        host: &HostRecord,
        offline_before: u64,
    ) -> Result<(), GridError> {
        let stored = self.seen_stored.get(&host.id).copied().unwrap_or(0);
        if host.offline_ms != offline_before
            || host.last_seen_ms.saturating_sub(stored) >= LAST_SEEN_STORED_EVERY_MS
        {
            self.writes.put_host(host);
            self.seen_stored.insert(host.id, host.last_seen_ms);
        }
        Ok(())
    }

    /// Note a host's successful `Hello`.
    pub fn hello(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let h = self.active_host(host_id, now_ms)?.clone();
        self.writes.put_host(&h);
        Ok(())
    }

    /// Note what a host offers its scans beyond slots. A memory figure past
    /// [`MAX_HOST_MEMORY_MB`] and a bandwidth cap past
    /// [`MAX_BENCHMARK_KB_PER_S`] are clamped to them (zero: no figure, no
    /// cap). Kept in memory only (the host says it again after every `Hello`).
    pub fn set_resources(
        &mut self,
        host_id: u64,
        r: HostResources,
        now_ms: u64,
    ) -> Result<(), GridError> {
        self.active_host(host_id, now_ms)?;
        let r = HostResources {
            memory_mb: r.memory_mb.min(MAX_HOST_MEMORY_MB),
            bandwidth_kbps: r.bandwidth_kbps.min(MAX_BENCHMARK_KB_PER_S as u64),
        };
        self.resources.insert(host_id, r);
        Ok(())
    }

    /// Note the sites a host says it scans at once now (its client sizes
    /// its concurrency itself): from 1 to [`MAX_SLOTS`], a claim outside
    /// clamped into it. What it may hold follows it (`units_cap`), within
    /// the bounds of trust. Kept in memory only, like [`Grid::set_resources`].
    ///
    /// [`MAX_SLOTS`]: beebot_shared::limits::MAX_SLOTS
    pub fn set_concurrency(
        &mut self,
        host_id: u64,
        slots: u32,
        now_ms: u64,
    ) -> Result<(), GridError> {
        let h = self.active_host(host_id, now_ms)?;
        h.concurrency = Some(slots.clamp(1, beebot_shared::limits::MAX_SLOTS));
        Ok(())
    }

    /// The sites a host last said it scans at once, if it said so.
    pub fn host_concurrency(&self, host_id: u64) -> Option<u32> {
        self.hosts.get(&host_id).and_then(|h| h.concurrency)
    }

    /// What a host offers its scans beyond slots, as it last said.
    pub fn host_resources(&self, host_id: u64) -> Option<&HostResources> {
        self.resources.get(&host_id)
    }

    /// Note a host's reference-site benchmark. Figures that are not finite
    /// or are negative are refused; figures past [`MAX_BENCHMARK_PAGES_PER_S`],
    /// [`MAX_BENCHMARK_KB_PER_S`] and [`MAX_SLOTS`](beebot_shared::limits::MAX_SLOTS)
    /// are clamped to them.
    pub fn benchmark(
        &mut self,
        host_id: u64,
        pages_per_s: f64,
        kb_per_s: f64,
        slots: u32,
        now_ms: u64,
    ) -> Result<(), GridError> {
        if !(pages_per_s.is_finite()
            && kb_per_s.is_finite()
            && pages_per_s >= 0.0
            && kb_per_s >= 0.0)
        {
            return Err(GridError::Invalid(
                "benchmark figures must be finite and positive".into(),
            ));
        }
        let h = self.active_host(host_id, now_ms)?;
        // Claims past what any host reaches are clamped, not refused: an
        // honest fast host keeps its benchmark, a liar gains nothing beyond
        // the bounds.
        h.benchmark = Some(Benchmark {
            pages_per_s: pages_per_s.min(MAX_BENCHMARK_PAGES_PER_S),
            kb_per_s: kb_per_s.min(MAX_BENCHMARK_KB_PER_S),
            slots: slots.min(beebot_shared::limits::MAX_SLOTS),
            measured_ms: now_ms,
        });
        let h = h.clone();
        self.writes.put_host(&h);
        Ok(())
    }

    /// Revoke a host: it can no longer connect; its running units go back to the queue.
    pub fn revoke(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let h = self
            .hosts
            .get_mut(&host_id)
            .ok_or(GridError::UnknownHost(host_id))?;
        h.revoked = true;
        let h = h.clone();
        self.host_changed(host_id);
        self.writes.put_host(&h);
        self.resources.remove(&host_id);
        self.release_host_units(host_id, None, now_ms)?;
        Ok(())
    }

    /// A host leaves: like a revocation (refused from now on, its units
    /// back in the queue), asked for by the host itself and recorded as left.
    pub fn leave(&mut self, host_id: u64, now_ms: u64) -> Result<(), GridError> {
        let host = self.active_host(host_id, now_ms)?;
        host.left_ms = Some(now_ms);
        let name = host.info.name.clone();
        tracing::info!(host_id, host = ?name, "host left the project");
        self.revoke(host_id, now_ms)
    }

    /// Count a host as trusted from now on, as if it had returned enough
    /// valid results in a row (the simulator's steady state).
    pub fn set_trusted(&mut self, host_id: u64) -> Result<(), GridError> {
        let trust_after = self.settings.trust_after;
        self.host_changed(host_id);
        if let Some(h) = self.hosts.get_mut(&host_id) {
            h.consecutive_valid = h.consecutive_valid.max(trust_after);
            let h = h.clone();
            self.writes.put_host(&h);
        }
        Ok(())
    }

    /// Every host with whether it is trusted (`hosts list`).
    pub fn host_lines(&self) -> Vec<HostLine> {
        self.hosts
            .values()
            .map(|h| HostLine {
                host: h.clone(),
                trusted: h.consecutive_valid >= self.settings.trust_after,
                resources: self.resources.get(&h.id).copied(),
            })
            .collect()
    }

    /// Every host, borrowed (nothing copied): for pages built under the lock.
    pub fn host_records(&self) -> impl Iterator<Item = &HostRecord> {
        self.hosts.values()
    }

    pub fn hosts(&self) -> Vec<HostRecord> {
        self.hosts.values().cloned().collect()
    }

    /// A host's pages per second on one slot: the running average of its real
    /// jobs, else its reference-site benchmark.
    pub(super) fn host_speed(&self, host_id: u64) -> Option<f64> {
        self.hosts.get(&host_id)?.speed()
    }

    /// Whether a host is trusted: enough valid results in a row.
    pub fn is_trusted(&self, host_id: u64) -> bool {
        self.hosts
            .get(&host_id)
            .is_some_and(|h| h.consecutive_valid >= self.settings.trust_after)
    }
}

#[cfg(test)]
mod tests;
