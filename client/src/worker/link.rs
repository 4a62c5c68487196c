//! The link to the server: connect and say hello when needed, send one
//! request, back off with full jitter when the network fails, and the pass
//! of talking to the server ([`Worker::contact`]) that uploads, reports,
//! fetches states and asks for work, in that order.
//!
//! A network failure never stops a scan: it closes the link and sets when
//! to try again. Only a permanent refusal (this host revoked) is an error.

use crate::control::ProblemKind;
use std::time::Instant;

use anyhow::{Context, Result};
use beebot_shared::proto::{ErrorCode, HostResources, Request, Response};

use crate::net::{Link, NetError};

use super::{now_ms, AVERAGE_WEIGHT};
use super::{HeldState, Worker};

/// Longest wait before trying the server again while a scan runs: its lease
/// (`LEASE_S`) is renewed only by an answered report, and the server takes
/// the scan back `LEASE_TAKEOVER_S` after its last one.
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

impl Worker {
    /// Connect and say hello when not connected; errors start the backoff.
    pub(super) async fn ensure_link(&mut self) -> Result<(), NetError> {
        if self.link.is_some() {
            return Ok(());
        }
        let link = Link::connect(&self.server).await?;
        if let Response::Welcome {
            server_time_ms,
            reference_site,
            ..
        } = link.hello(self.enrolment.host_id, &self.key).await?
        {
            self.clock_offset_ms = server_time_ms as i64 - now_ms() as i64;
            self.bench.reference_site = reference_site;
        }
        self.link = Some(link);
        // A new connection: the server hears the offer and the concurrency again.
        self.resources_told = false;
        self.concurrency_told = None;
        self.progress_all_refused = false;
        Ok(())
    }

    /// The network failed: close the link and wait a backoff before the
    /// next contact (said in the log and the status).
    pub(super) fn net_failed(&mut self, e: &NetError) {
        if let Some(l) = self.link.take() {
            l.close();
        }
        self.failures = self.failures.saturating_add(1);
        let mut wait = self.backoff(self.failures);
        // A running scan keeps its site only while its reports are answered
        // (the server takes it back LEASE_TAKEOVER_S after the last one):
        // while one runs, try again well within that.
        let scanning = self
            .held
            .values()
            .any(|h| matches!(h.state, HeldState::Crawling { .. }));
        if scanning {
            wait = wait.min(LEASE_RETRY);
        }
        tracing::warn!(
            "server unreachable ({e}); retrying in {:.1}s",
            wait.as_secs_f64()
        );
        self.problem(ProblemKind::ServerUnreachable, e.to_string());
        self.next_contact = Instant::now() + wait;
    }

    /// Send one request over the link (connecting first when needed); an
    /// answer resets the failures and updates the round-trip average.
    pub(super) async fn request(&mut self, req: &Request) -> Result<Response, NetError> {
        self.ensure_link().await?;
        let link = self.link.as_ref().ok_or(NetError::Lost("no link".into()))?;
        let sent = Instant::now();
        let sent_at = super::lease::Sent::now();
        let r = link.request(req).await;
        if r.is_ok() {
            self.last_answered = Some(sent_at);
            self.failures = 0;
            let rtt = sent.elapsed().as_secs_f64();
            self.round_trip_s += AVERAGE_WEIGHT * (rtt - self.round_trip_s);
        }
        r
    }

    /// Give a unit back without a result (`Fail`) and forget it.
    pub(super) async fn give_back(&mut self, unit_id: u64, reason: String) -> Result<()> {
        let req = Request::Fail { unit_id, reason };
        let r = self.request(&req).await;
        // Forgotten either way: unanswered, the unit goes back when the
        // server sees this host no longer holds it.
        self.held.remove(&unit_id);
        self.home.spool().remove_unit(unit_id);
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(())
            }
        }
    }

    /// One pass of talking to the server, when the backoff allows.
    pub(super) async fn contact(&mut self) -> Result<()> {
        if Instant::now() < self.next_contact {
            return Ok(());
        }
        if !self.tell_resources().await? {
            return Ok(());
        }
        if !self.tell_concurrency().await? {
            return Ok(());
        }
        if !self.upload_finished().await? {
            return Ok(());
        }
        if !self.report_progress().await? {
            return Ok(());
        }
        if !self.send_parts().await? {
            return Ok(());
        }
        if !self.fetch_states().await? {
            return Ok(());
        }
        self.fetch_work().await?;
        self.send_benchmark().await;
        Ok(())
    }

    /// Tell the server what this machine offers its scans beyond slots
    /// (after every `Hello`, and when the settings change), before asking
    /// for work. `false`: the network failed (the backoff is set). A server
    /// that does not take it is noted in the log and not asked again on
    /// this connection.
    pub(super) async fn tell_resources(&mut self) -> Result<bool> {
        if self.resources_told && self.link.is_some() {
            return Ok(true);
        }
        let req = Request::Resources(HostResources {
            memory_mb: self.opts.memory_mb,
            bandwidth_kbps: self.opts.bandwidth_kbps,
        });
        match self.request(&req).await {
            Ok(answer) => {
                if answer != Response::Ack {
                    tracing::warn!("the server did not take this machine's resources: {answer:?}");
                }
                self.resources_told = true;
                Ok(true)
            }
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(false)
            }
        }
    }

    /// Tell the server the sites this client scans at once (after every
    /// `Hello` and every change), before asking for work: what it may hold
    /// follows it. `false`: the network failed (the backoff is set). An
    /// answer other than `Ack` is noted in the log, and this concurrency is
    /// not told again on this connection.
    pub(super) async fn tell_concurrency(&mut self) -> Result<bool> {
        let slots = self.concurrency();
        if self.concurrency_told == Some(slots) && self.link.is_some() {
            return Ok(true);
        }
        match self.request(&Request::Concurrency { slots }).await {
            Ok(Response::Ack) => {
                self.concurrency_told = Some(slots);
                Ok(true)
            }
            Ok(answer) => {
                tracing::warn!("the server did not take this client's concurrency: {answer:?}");
                self.concurrency_told = Some(slots);
                Ok(true)
            }
            Err(NetError::Refused {
                code: ErrorCode::BadRequest,
                message,
            }) => {
                tracing::warn!("the server did not take this client's concurrency: {message}");
                self.concurrency_told = Some(slots);
                Ok(true)
            }
            Err(e) if e.is_permanent() => Err(e).context("the server refused this host"),
            Err(e) => {
                self.net_failed(&e);
                Ok(false)
            }
        }
    }

    /// Start the reference-site benchmark when due and the client holds no
    /// work (and is not paused), and send its result once in; a failed send
    /// is retried next contact.
    pub(super) async fn send_benchmark(&mut self) {
        // Never when `--once` is about to exit.
        let exiting = self.opts.once && self.server_idle;
        let idle = self.held.is_empty() && self.gate_open() && !exiting;
        let Some(record) = self
            .bench
            .poll(
                &self.home,
                &self.opts.crawler,
                idle,
                self.opts.throttle,
                self.bandwidth.clone(),
            )
            .await
        else {
            return;
        };
        let req = Request::Benchmark {
            pages_per_s: record.pages_per_s,
            kb_per_s: record.kb_per_s,
            slots: self.opts.slots,
        };
        match self.request(&req).await {
            Ok(Response::Ack) => self.bench.sent(&self.home, &record),
            Ok(other) => {
                // Not retried before next week: the server would answer the same.
                tracing::warn!("benchmark not taken: {other:?}");
                self.bench.sent(&self.home, &record);
            }
            Err(e) => self.net_failed(&e),
        }
    }
}
