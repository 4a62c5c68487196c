//! Where a crawl stands, as a scan state: the queue (less what was
//! requested already), the digests seen and the robots.txt answers, fitted
//! so that encoding it never fails ([`fit_state`], [`encode_state`]), and
//! the snapshots a caller checkpoints at page boundaries.
//!
//! A resumed crawl never requests a URL twice: a URL requested (as a page or
//! a redirect hop) is never queued in the state. Nothing here fetches.

use std::collections::HashSet;

use beebot_shared::limits::{MAX_SCAN_STATE_DECOMPRESSED_BYTES, MAX_STATE_ROBOTS, MAX_URL_LEN};
use beebot_shared::scanstate::{
    url_digest, ScanState, ScanStateError, MAX_SEEN_DIGESTS, MAX_STATE_ROBOTS_BODY,
};

use super::frontier::MAX_FRONTIER_URLS;
use super::{Crawler, Snapshot};

impl Crawler<'_> {
    /// Put the requests that got no answer back at the head of the queue,
    /// in their order, no longer counted as taken: the scan that continues
    /// this one requests them.
    pub(super) fn put_back_unanswered(&mut self) {
        for (url, depth, counted) in std::mem::take(&mut self.unanswered).into_iter().rev() {
            self.fetched.remove(&url_digest(url.as_str()));
            if counted {
                self.failed_pages = self.failed_pages.saturating_sub(1);
            }
            self.frontier.unpop(url, depth);
        }
    }

    /// Where the crawl stands, between two pages, fitted to what a state
    /// may hold ([`fit_state`]), and the queued URLs the fit cut.
    pub(super) fn state(&self) -> (ScanState, u64) {
        let mut state = ScanState {
            site: self.spec.site.clone(),
            pages_done: self.pages_taken(),
            // A queued URL requested already (reached by a redirect) is not
            // queued in the state: the resumed scan would request it again.
            queue: self
                .frontier
                .queued()
                .into_iter()
                .filter(|q| !self.fetched.contains(&url_digest(&q.url)))
                .collect(),
            seen: self.frontier.seen_digests(),
            robots: self
                .robots_answers
                .iter()
                .take(MAX_STATE_ROBOTS)
                .cloned()
                .collect(),
        };
        let cut = fit_state(&mut state, Some(&self.fetched));
        (state, cut)
    }

    /// A snapshot between two pages: the state, the records found since
    /// the previous snapshot (taken out of the crawl), and the summary so far.
    pub(super) fn snapshot(&mut self) -> Snapshot {
        self.take_pending_links();
        let (state, cut) = self.state();
        let mut summary = self.summary(None);
        summary.frontier_dropped += cut;
        Snapshot {
            state,
            new_records: std::mem::take(&mut self.records),
            summary,
        }
    }
}

/// Fit a state within what its encoding allows, so that encoding it never
/// fails and a stopped scan never loses its work for being too large: URLs
/// longer than [`MAX_URL_LEN`] and the queue beyond [`MAX_FRONTIER_URLS`] are
/// cut; a seen set over [`MAX_SEEN_DIGESTS`] keeps only the digests in `keep`
/// (the URLs requested: the others, robots-disallowed or queued, need not be
/// kept), then the first ones; and the queue's tail is cut until the state's
/// raw bytes fit [`MAX_SCAN_STATE_DECOMPRESSED_BYTES`]. Returns the queued
/// URLs cut (to be counted in `frontier_dropped`).
pub fn fit_state(state: &mut ScanState, keep: Option<&HashSet<u64>>) -> u64 {
    let queued = state.queue.len();
    state.queue.retain(|q| q.url.len() <= MAX_URL_LEN);
    state.queue.truncate(MAX_FRONTIER_URLS);
    if state.seen.len() > MAX_SEEN_DIGESTS {
        if let Some(keep) = keep {
            state.seen.retain(|d| keep.contains(d));
        }
        state.seen.truncate(MAX_SEEN_DIGESTS);
    }
    // The encoding's bytes, robots answers over-counted (see `ScanState::encode`).
    let robots: usize = state
        .robots
        .iter()
        .take(MAX_STATE_ROBOTS)
        .map(|r| 8 + r.origin.len() + r.body.len().min(MAX_STATE_ROBOTS_BODY))
        .sum();
    let fixed = 8 + 2 + 2 + state.site.len() + 8 + 4 + robots + 4 + 4 + 8 * state.seen.len();
    let budget = MAX_SCAN_STATE_DECOMPRESSED_BYTES.saturating_sub(fixed);
    let mut used = 0usize;
    let mut fits = 0usize;
    for q in &state.queue {
        used += 6 + q.url.len();
        if used > budget {
            break;
        }
        fits += 1;
    }
    state.queue.truncate(fits);
    (queued - state.queue.len()) as u64
}

/// Encode a state, fitted first ([`fit_state`]); should the compressed
/// bytes still be over their limit, the queue's tail is halved until they
/// fit. Returns the bytes and the queued URLs cut.
pub fn encode_state(state: &mut ScanState) -> Result<(Vec<u8>, u64), ScanStateError> {
    let mut cut = fit_state(state, None);
    loop {
        match state.encode() {
            Ok(bytes) => return Ok((bytes, cut)),
            Err(_) if !state.queue.is_empty() => {
                let keep = state.queue.len() / 2;
                cut += (state.queue.len() - keep) as u64;
                state.queue.truncate(keep);
            }
            Err(_) if !state.robots.is_empty() => state.robots.clear(),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cancel::Cancel;
    use crate::crawler::{CrawlSpec, CrawlerConfig};
    use beebot_shared::scanstate::QueuedUrl;
    use beebot_shared::scope::Scope;
    use url::Url;

    #[test]
    fn an_oversized_state_is_cut_to_fit_and_always_encodes() {
        // A queue whose URLs pass the raw bytes a state may hold, and a
        // seen set past its count limit.
        let long = "x".repeat(1900);
        let queue: Vec<QueuedUrl> = (0..40_000)
            .map(|i| QueuedUrl {
                url: format!("http://a.test/{i}/{long}"),
                depth: 3,
            })
            .collect();
        let fetched: HashSet<u64> = (0..1000u64).collect();
        let mut state = ScanState {
            site: "a.test".into(),
            pages_done: 1000,
            queue: queue.clone(),
            seen: (0..MAX_SEEN_DIGESTS as u64 + 10).collect(),
            robots: Vec::new(),
        };
        assert!(state.encode().is_err(), "over its limits as it is");
        let cut = fit_state(&mut state, Some(&fetched));
        assert!(cut > 0 && cut < 40_000, "{cut}");
        assert_eq!(state.queue.len() as u64 + cut, 40_000);
        // The head of the queue is kept, the tail cut.
        assert_eq!(state.queue[..], queue[..state.queue.len()]);
        // Only the URLs requested are kept in the seen set.
        assert_eq!(state.seen.len(), 1000);
        let bytes = state.encode().expect("fits");
        let back = ScanState::decode(&bytes).expect("decodes");
        assert_eq!(back.queue.len(), state.queue.len());
        // Without a set to keep, encoding still always succeeds.
        let mut state = ScanState {
            site: "a.test".into(),
            pages_done: 1000,
            queue,
            seen: (0..MAX_SEEN_DIGESTS as u64 + 10).collect(),
            robots: Vec::new(),
        };
        let (bytes, cut) = encode_state(&mut state).expect("always encodes");
        assert!(cut > 0);
        assert_eq!(state.seen.len(), MAX_SEEN_DIGESTS);
        assert!(ScanState::decode(&bytes).is_ok());
    }

    #[test]
    fn a_page_reached_by_a_redirect_is_not_queued_in_the_state() {
        let spec = CrawlSpec::new("a.test", Scope::Host);
        let cfg = CrawlerConfig::default();
        let cancel = Cancel::new();
        let mut c = Crawler::new(&spec, &cfg, &cancel);
        for u in ["http://a.test/", "http://a.test/b", "http://a.test/c"] {
            c.frontier.push(Url::parse(u).expect("test URL"), 1);
        }
        c.frontier.pop();
        c.fetched.insert(url_digest("http://a.test/"));
        // /b was requested as the target of a redirect while still queued.
        c.fetched.insert(url_digest("http://a.test/b"));
        let (state, cut) = c.state();
        assert_eq!(cut, 0);
        let queued: Vec<&str> = state.queue.iter().map(|q| q.url.as_str()).collect();
        assert_eq!(queued, vec!["http://a.test/c"]);
        // The resumed crawl knows /b was requested: it never requests it again.
        let resumed = CrawlSpec {
            resume: Some(state),
            ..spec.clone()
        };
        let r = Crawler::new(&resumed, &cfg, &cancel);
        assert!(r.fetched.contains(&url_digest("http://a.test/b")));
        assert!(!r.fetched.contains(&url_digest("http://a.test/c")));
        assert_eq!(r.frontier.len(), 1);
    }
}
