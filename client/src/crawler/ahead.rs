//! More than one connection to a site, only where its operator allows it
//! (`beebot crawl --connections N` at `--delay-ms 0`; never a grid unit):
//! N helpers make every request of the crawl, each on a connection of its
//! own. While the crawl waits for its current page, the helpers left ask
//! for the pages queued right after it, and the crawl takes their answers
//! when it reaches them.
//!
//! Invariants: the crawl itself is unchanged (the same pages in the same
//! order, the same counts and the same state): a page requested ahead stays
//! queued until the crawl's turn takes it, and its answer is then read as if
//! the request had been made at that turn (a redirect hop to a page asked
//! for ahead takes that answer too, so no page is asked for twice). Only
//! URLs the crawl would request next are asked for ahead: in the scope, not
//! excluded, not requested yet, allowed by a robots.txt already read, on an
//! origin with no delay at all (no politeness delay, no Crawl-delay), within
//! the page cap. Every request of the crawl goes through the `connections`
//! helpers, so a site never has more than `connections` requests unanswered.
//! A request ahead whose page the crawl never takes (the crawl stopped) is
//! thrown away; there are at most `connections - 1` of them. A request
//! carries the deadline the crawl gave it when asked for: one that waited
//! past it is not sent, and none is sent once the crawl has ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use beebot_shared::scanstate::url_digest;
use url::Url;

use super::fetch::{BodyWanted, FetchError, Fetched, Fetcher};

/// Most connections to one site an operator may allow.
pub const MAX_CONNECTIONS_PER_HOST: u8 = 4;

/// Frontier entries looked at per turn for requests ahead, per free helper
/// (skipped ones included), so a turn's cost stays bounded.
const LOOK_AHEAD_PER_HELPER: usize = 8;

/// What a helper got: the answer, and how long its request took.
pub(super) type Answer = (Result<Fetched, FetchError>, Duration);

/// What is asked of a request: the body wanted, and how much of it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Wanted {
    body: BodyWanted,
    max_bytes: u64,
}

/// A request for a helper.
struct Job {
    url: Url,
    wanted: Wanted,
    /// When the crawl stops waiting for it: not sent after that.
    deadline: Instant,
    reply: Sender<Answer>,
}

/// The helpers and the requests asked of them.
pub(super) struct Ahead {
    jobs: Sender<Job>,
    helpers: usize,
    /// Requests asked and not answered yet (their pages reached or not).
    busy: Arc<AtomicUsize>,
    /// Set when the crawl ends: a request not sent yet never is.
    ended: Arc<AtomicBool>,
    /// Requests asked ahead, by URL digest: what was wanted, the answer's channel.
    ahead: HashMap<u64, (Wanted, Receiver<Answer>)>,
}

impl Ahead {
    /// `connections` helpers sharing `fetcher` (its pool keeps a connection
    /// per helper), or `None` for one connection or when a helper cannot be
    /// started (the crawl then makes its requests itself, one at a time).
    pub(super) fn start(fetcher: &Arc<Fetcher>, connections: u8) -> Option<Ahead> {
        let helpers = usize::from(connections.clamp(1, MAX_CONNECTIONS_PER_HOST));
        if helpers == 1 {
            return None;
        }
        let (jobs, inbox) = channel::<Job>();
        let inbox = Arc::new(Mutex::new(inbox));
        let busy = Arc::new(AtomicUsize::new(0));
        let ended = Arc::new(AtomicBool::new(false));
        for i in 0..helpers {
            let inbox = Arc::clone(&inbox);
            let fetcher = Arc::clone(fetcher);
            let (busy, ended) = (Arc::clone(&busy), Arc::clone(&ended));
            std::thread::Builder::new()
                .name(format!("ahead-{i}"))
                .spawn(move || loop {
                    // The lock is held only while waiting for a job.
                    let job = match inbox.lock() {
                        Ok(inbox) => inbox.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    if ended.load(Ordering::SeqCst) {
                        return;
                    }
                    let sent = Instant::now();
                    let left = job.deadline.saturating_duration_since(sent);
                    let result = if left.is_zero() {
                        Err(FetchError::Timeout(
                            "not sent: it waited past its deadline".into(),
                        ))
                    } else {
                        fetcher.get(&job.url, job.wanted.max_bytes, job.wanted.body, left)
                    };
                    busy.fetch_sub(1, Ordering::SeqCst);
                    let _ = job.reply.send((result, sent.elapsed()));
                })
                .ok()?;
        }
        Some(Ahead {
            jobs,
            helpers,
            busy,
            ended,
            ahead: HashMap::new(),
        })
    }

    /// Helpers with no request asked of them.
    pub(super) fn free(&self) -> usize {
        self.helpers
            .saturating_sub(self.busy.load(Ordering::SeqCst))
    }

    /// Requests asked ahead whose pages the crawl has not reached.
    pub(super) fn pending(&self) -> usize {
        self.ahead.len()
    }

    /// Frontier entries worth looking at this turn.
    pub(super) fn look_ahead(&self) -> usize {
        self.free() * LOOK_AHEAD_PER_HELPER
    }

    /// Whether `url` is asked for ahead.
    pub(super) fn has(&self, url: &Url) -> bool {
        self.ahead.contains_key(&url_digest(url.as_str()))
    }

    /// Hand a request to the helpers; `None` when they are gone.
    fn ask(&self, url: &Url, wanted: Wanted, timeout: Duration) -> Option<Receiver<Answer>> {
        let (reply, answer) = channel();
        let job = Job {
            url: url.clone(),
            wanted,
            deadline: Instant::now() + timeout,
            reply,
        };
        self.busy.fetch_add(1, Ordering::SeqCst);
        if self.jobs.send(job).is_err() {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(answer)
    }

    /// Ask for a page queued after the current one, when a helper is free.
    pub(super) fn ask_ahead(&mut self, url: &Url, max_bytes: u64, timeout: Duration) {
        if self.free() == 0 || self.has(url) {
            return;
        }
        let wanted = Wanted {
            body: BodyWanted::Html,
            max_bytes,
        };
        if let Some(answer) = self.ask(url, wanted, timeout) {
            self.ahead
                .insert(url_digest(url.as_str()), (wanted, answer));
        }
    }

    /// The crawl's request for `url` now: the one asked ahead when it
    /// wanted the same, else a new one. [`Pending::wait`] reads the answer;
    /// `None` when the helpers are gone (the crawl then asks itself).
    pub(super) fn request(
        &mut self,
        url: &Url,
        body: BodyWanted,
        max_bytes: u64,
        timeout: Duration,
    ) -> Option<Pending> {
        let wanted = Wanted { body, max_bytes };
        let digest = url_digest(url.as_str());
        if self.ahead.get(&digest).is_some_and(|(w, _)| *w == wanted) {
            return self
                .ahead
                .remove(&digest)
                .map(|(_, answer)| Pending(answer));
        }
        self.ask(url, wanted, timeout).map(Pending)
    }

    /// Throw away the answer to `url`, if it was asked for ahead: its
    /// turn skipped it.
    pub(super) fn forget(&mut self, url: &Url) {
        self.ahead.remove(&url_digest(url.as_str()));
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Helpers end after the request they are making; none is sent after.
        self.ended.store(true, Ordering::SeqCst);
    }
}

/// A request the crawl waits for.
pub(super) struct Pending(Receiver<Answer>);

impl Pending {
    /// The answer and how long the request took (waits for it). `None`:
    /// the helper ended without one (the crawl then asks itself).
    pub(super) fn wait(self) -> Option<Answer> {
        self.0.recv().ok()
    }
}
