//! Parts of running scans: every [`RunOptions::part_every`] a running
//! scan's records and frontier since its previous part (or its start),
//! taken from its last checkpoint, go to the server (`UploadPart`) while
//! the scan goes on, so that a host taking the site over after the lease
//! starts there instead of from the seed.
//!
//! Invariants: a part is spooled before it is sent and sent again, the
//! same, until the server answers it; what the server holds
//! ([`PartsSent`]) is recorded before the spooled part is dropped, and
//! the scan's next part and its final upload start there. A part the
//! server refuses stops the scan and drops the unit. Nothing here starts
//! a scan.
//!
//! [`RunOptions::part_every`]: super::RunOptions::part_every

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use beebot_shared::linkfile::{self, LinkFileHeader};
use beebot_shared::proto::{ErrorCode, Request, Response, ABORT_ROUND_CANCELLED};

use crate::checkpoint::{distinct_hosts, sub_summaries};
use crate::home::{PartsSent, SpooledPart, SpooledResult};
use crate::net::NetError;

use super::{HeldState, Worker};

/// A scan whose checkpoint holds nothing past its last part is looked at
/// again after this (not at every turn of the loop).
const PART_RECHECK: Duration = Duration::from_secs(10);

/// What became of a part sent.
pub(super) enum PartSent {
    /// The server holds it: the scan goes on from it.
    Held,
    /// The server refused it: the unit is dropped.
    Dropped,
    /// The network failed (the backoff is set): it stays spooled.
    NetFailed,
    /// Not kept (the job holds its most parts): the scan sends no more
    /// parts and uploads the rest at its end.
    NotKept,
    /// An answer that is none of those (it stays spooled), or a
    /// `BadRequest` (it is dropped, and a fresh part taken from the
    /// checkpoint): tried again after `PART_RECHECK`.
    Later,
}

impl Worker {
    /// Send the parts due: a spooled one first, else one taken from the
    /// scan's checkpoint. Returns false when the network failed.
    pub(super) async fn send_parts(&mut self) -> Result<bool> {
        let now = Instant::now();
        let due: Vec<u64> = self
            .held
            .iter()
            .filter(|(_, h)| {
                matches!(h.state, HeldState::Crawling { .. })
                    && h.part_due.is_some_and(|t| t <= now)
            })
            .map(|(id, _)| *id)
            .collect();
        for unit_id in due {
            let part = match self.home.spool().part(unit_id) {
                Some(p) => Some(p),
                None => self.take_part(unit_id).unwrap_or_else(|e| {
                    tracing::warn!(unit_id, "cannot take a part of the scan: {e:#}");
                    None
                }),
            };
            let Some(part) = part else {
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.part_due = Some(now + PART_RECHECK);
                }
                continue;
            };
            match self.send_part(part).await? {
                PartSent::Held => {
                    if let Some(h) = self.held.get_mut(&unit_id) {
                        h.part_due = Some(Instant::now() + self.opts.part_every);
                    }
                }
                PartSent::Dropped => {}
                PartSent::NotKept => {
                    if let Some(h) = self.held.get_mut(&unit_id) {
                        h.part_due = None;
                    }
                }
                PartSent::Later => {
                    if let Some(h) = self.held.get_mut(&unit_id) {
                        h.part_due = Some(Instant::now() + PART_RECHECK);
                    }
                }
                PartSent::NetFailed => return Ok(false),
            }
        }
        Ok(true)
    }

    /// A part of `unit_id`'s scan from its checkpoint, spooled: `None`
    /// when the checkpoint holds nothing past the last part.
    fn take_part(&mut self, unit_id: u64) -> Result<Option<SpooledPart>> {
        let Some(h) = self.held.get(&unit_id) else {
            return Ok(None);
        };
        let Some(mut head) = self.home.spool().checkpoint_head(unit_id)? else {
            return Ok(None);
        };
        let sent = &h.parts;
        if head.summary.pages <= sent.summary.pages || head.log.records < sent.mark.records {
            return Ok(None);
        }
        let records = self
            .home
            .spool()
            .records_between(unit_id, sent.mark, head.log)?;
        let mut summary = sub_summaries(
            &head.summary,
            &sent.summary,
            records.len() as u64,
            distinct_hosts(&records),
        );
        // The scan goes on: a part names no stop.
        summary.stopped_by = None;
        let (state, cut) = crate::crawler::encode_state(&mut head.state)
            .context("cannot encode the scan's state")?;
        summary.frontier_dropped += cut;
        let header = LinkFileHeader::of_unit(&h.unit.unit, summary.pages, records.len() as u64);
        let link_file = linkfile::encode(&header, &records)?;
        let part = SpooledPart {
            unit_id,
            index: sent.count,
            mark: head.log,
            total: head.summary,
            summary,
            link_file,
            state,
        };
        self.home.spool().save_part(&part)?;
        // A part copies records into a link file: measured again.
        self.spool_measured = None;
        Ok(Some(part))
    }

    /// Send a spooled part and act on the answer.
    pub(super) async fn send_part(&mut self, part: SpooledPart) -> Result<PartSent> {
        let unit_id = part.unit_id;
        let (pages, links) = (part.summary.pages, part.summary.links);
        let req = Request::UploadPart {
            unit_id,
            index: part.index,
            summary: part.summary.clone(),
            link_file: part.link_file.clone(),
            state: part.state.clone(),
        };
        match self.request(&req).await {
            Ok(answer @ (Response::Accepted | Response::Duplicate)) => {
                let sent = self.home.spool().part_accepted(&part)?;
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.parts = sent;
                }
                if answer == Response::Accepted {
                    self.stats.pages += pages;
                    self.stats.links += links;
                    self.add_to_today(pages, links);
                }
                tracing::info!(unit_id, index = part.index, pages, links, "part accepted");
                Ok(PartSent::Held)
            }
            Ok(Response::Ack) => {
                tracing::info!(
                    unit_id,
                    "part not kept (its job holds its most parts): the scan goes on"
                );
                self.home.spool().remove_part(unit_id);
                Ok(PartSent::NotKept)
            }
            Ok(Response::Rejected { reason }) => {
                tracing::info!(unit_id, "part refused, the scan stops: {reason}");
                self.home.spool().remove_part(unit_id);
                let round_id = self.held.get(&unit_id).map(|h| h.unit.unit.round_id);
                self.drop_unit(unit_id);
                if let Some(round_id) = round_id.filter(|_| reason == ABORT_ROUND_CANCELLED) {
                    let of_round = self.units_where_round(round_id);
                    self.drop_cancelled(&of_round);
                }
                Ok(PartSent::Dropped)
            }
            Ok(other) => {
                tracing::warn!(unit_id, "unexpected answer to a part: {other:?}");
                Ok(PartSent::Later)
            }
            Err(NetError::Refused {
                code: ErrorCode::BadRequest,
                message,
            }) => {
                // Refused (a body cut short or too slow, or the part
                // itself): dropped from the spool, and a fresh part is taken
                // from the checkpoint at the next try.
                tracing::warn!(unit_id, "part refused, tried again later: {message}");
                self.home.spool().remove_part(unit_id);
                Ok(PartSent::Later)
            }
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(PartSent::NetFailed)
            }
        }
    }

    /// Stop a unit's scan (its end is dropped when it comes back), or
    /// forget it at once when nothing runs.
    fn drop_unit(&mut self, unit_id: u64) {
        let Some(h) = self.held.get_mut(&unit_id) else {
            return;
        };
        if let HeldState::Crawling { cancel, .. } = &h.state {
            cancel.cancel();
            h.state = HeldState::Aborted;
        } else {
            self.held.remove(&unit_id);
            self.home.spool().remove_unit(unit_id);
            self.spool_shrank();
        }
    }

    /// The result of a unit as the server wants it after its parts: its
    /// records and counts from the last part on, once a part still
    /// spooled is answered (`Err`: what became of that part instead).
    pub(super) async fn after_parts(
        &mut self,
        unit_id: u64,
        result: SpooledResult,
    ) -> Result<std::result::Result<SpooledResult, PartSent>> {
        if let Some(part) = self.home.spool().part(unit_id) {
            match self.send_part(part).await? {
                PartSent::Held | PartSent::NotKept => {}
                other => return Ok(Err(other)),
            }
        }
        let Some(h) = self.held.get(&unit_id) else {
            return Ok(Err(PartSent::Dropped));
        };
        Ok(Ok(trim(result, &h.parts, &h.unit.unit)?))
    }
}

/// A whole scan's result less what its parts hold: the records after the
/// last part's mark, the counts since its summary.
pub(super) fn trim(
    result: SpooledResult,
    sent: &PartsSent,
    unit: &beebot_shared::sign::WorkUnit,
) -> Result<SpooledResult> {
    if sent.count == 0 {
        return Ok(result);
    }
    let (_, records) =
        linkfile::decode(&result.link_file).context("the spooled result is damaged")?;
    let skip = (sent.mark.records as usize).min(records.len());
    let rest = &records[skip..];
    let summary = sub_summaries(
        &result.summary,
        &sent.summary,
        rest.len() as u64,
        distinct_hosts(rest),
    );
    let header = LinkFileHeader::of_unit(unit, summary.pages, rest.len() as u64);
    Ok(SpooledResult {
        link_file: linkfile::encode(&header, rest)?,
        summary,
        state: result.state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recordlog::LogMark;
    use beebot_shared::extract::LinkTag;
    use beebot_shared::linkfile::{LinkRecord, ScanSummary, StopReason};

    fn rec(i: u64) -> LinkRecord {
        LinkRecord {
            source_url: format!("http://a.test/{i}"),
            target_url: format!("http://t{}.test/", i % 3),
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: String::new(),
        }
    }

    #[test]
    fn the_final_upload_holds_only_what_came_after_the_last_part() {
        let unit = crate::worker::tests::unit();
        let records: Vec<LinkRecord> = (0..10).map(rec).collect();
        let total = ScanSummary {
            pages: 12,
            links: 10,
            elapsed_ms: 9000,
            status_counts: vec![(200, 11), (404, 1)],
            stopped_by: Some(StopReason::MaxTime),
            ..ScanSummary::default()
        };
        let header = LinkFileHeader::of_unit(&unit, 12, 10);
        let whole = SpooledResult {
            link_file: linkfile::encode(&header, &records).unwrap(),
            summary: total.clone(),
            state: Some(vec![1]),
        };
        // No part sent: the result as it is.
        assert_eq!(
            trim(whole.clone(), &PartsSent::default(), &unit).unwrap(),
            whole
        );
        let sent = PartsSent {
            count: 2,
            mark: LogMark {
                records: 4,
                bytes: 321,
            },
            summary: ScanSummary {
                pages: 5,
                links: 4,
                elapsed_ms: 4000,
                status_counts: vec![(200, 5)],
                ..ScanSummary::default()
            },
        };
        let t = trim(whole, &sent, &unit).unwrap();
        let (h, rest) = linkfile::decode(&t.link_file).unwrap();
        assert_eq!(rest, records[4..]);
        assert_eq!((h.pages, h.records), (7, 6));
        assert_eq!((t.summary.pages, t.summary.links), (7, 6));
        assert_eq!(t.summary.elapsed_ms, 5000);
        assert_eq!(t.summary.status_counts, vec![(200, 6), (404, 1)]);
        assert_eq!(t.summary.distinct_target_hosts, 3);
        assert_eq!(t.summary.stopped_by, Some(StopReason::MaxTime));
        assert_eq!(t.state, Some(vec![1]));
    }
}
