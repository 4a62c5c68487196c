//! Uploading finished results: each spooled result goes to the server until
//! it is accepted, a duplicate or rejected, and only then leaves the spool.
//!
//! A result whose file is lost is scanned again; a network failure keeps
//! every result for the next contact. Nothing here starts or stops a scan.

use std::time::Instant;

use anyhow::{Context, Result};
use beebot_shared::proto::{Request, Response, ABORT_ROUND_CANCELLED};

use crate::home::SpooledResult;

use super::parts::PartSent;
use super::{HeldState, Worker};

impl Worker {
    /// Upload every finished result. Returns false when the network failed.
    pub(super) async fn upload_finished(&mut self) -> Result<bool> {
        let ids = self.units_where(|s| matches!(s, HeldState::Finished));
        for unit_id in ids {
            let Some(whole) = self.home.spool().result(unit_id)? else {
                // Lost its result file: scan again.
                if let Some(h) = self.held.get_mut(&unit_id) {
                    h.state = HeldState::Waiting;
                }
                continue;
            };
            // What its parts hold is the server's already.
            let SpooledResult {
                link_file,
                summary,
                state,
            } = match self.after_parts(unit_id, whole).await? {
                Ok(r) => r,
                Err(PartSent::NetFailed) => return Ok(false),
                Err(_) => continue,
            };
            let pages = summary.pages;
            let links = summary.links;
            let req = Request::Upload {
                unit_id,
                summary,
                link_file,
                state,
            };
            match self.request(&req).await {
                Ok(Response::Accepted) => {
                    self.stats.uploads_accepted += 1;
                    self.stats.pages += pages;
                    self.stats.links += links;
                    self.add_to_today(pages, links);
                    tracing::info!(
                        unit_id,
                        pages,
                        links,
                        "result uploaded (the server keeps it; validation decides)"
                    );
                }
                Ok(Response::Duplicate) => {
                    self.stats.uploads_duplicate += 1;
                    tracing::info!(unit_id, "result was a duplicate (job finished elsewhere)");
                }
                Ok(Response::Rejected { reason }) if reason == ABORT_ROUND_CANCELLED => {
                    self.stats.uploads_rejected += 1;
                    tracing::info!(unit_id, "result dropped: {reason}");
                    if let Some(round_id) = self.held.get(&unit_id).map(|h| h.unit.unit.round_id) {
                        let of_round = self.units_where_round(round_id);
                        self.drop_cancelled(&of_round);
                    }
                }
                Ok(Response::Rejected { reason }) => {
                    self.stats.uploads_rejected += 1;
                    tracing::warn!(unit_id, "result rejected: {reason}");
                }
                Ok(other) => {
                    tracing::warn!(unit_id, "unexpected answer to upload: {other:?}");
                    continue;
                }
                Err(e) if e.is_permanent() => {
                    return Err(e).context("the server refused this host")
                }
                Err(e) => {
                    self.net_failed(&e);
                    return Ok(false);
                }
            }
            self.held.remove(&unit_id);
            self.home.spool().remove_unit(unit_id);
            self.spool_shrank();
            // A slot is free: ask at once (when the buffer wants more)
            // rather than after a `retry_after` heard while it was busy,
            // which said only that nothing was left for a full host then.
            // This result may also have ended the round: `--once` exits as
            // soon as its work is delivered.
            self.next_request = Instant::now();
        }
        Ok(true)
    }
}
