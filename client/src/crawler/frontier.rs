//! The crawl frontier: a bounded breadth-first queue of URLs that never holds, or
//! hands out, the same canonical URL twice. The seen set keeps 8-byte digests
//! ([`url_digest`]), the same a scan state carries, so a resumed scan knows
//! what an earlier one saw.

use std::collections::{HashSet, VecDeque};

use beebot_shared::scanstate::{url_digest, QueuedUrl};
use url::Url;

pub use beebot_shared::limits::MAX_FRONTIER_URLS;

/// What happened to a pushed URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    Added,
    /// Queued or handed out before.
    AlreadySeen,
    /// The queue is at its bound; the URL was dropped.
    Full,
}

/// Breadth-first queue with a seen set. The seen set keeps the digest of every
/// URL ever queued or marked, so it grows up to the pages fetched plus the
/// queue bound (8 bytes each).
#[derive(Debug)]
pub struct Frontier {
    queue: VecDeque<(Url, u32)>,
    seen: HashSet<u64>,
    max_len: usize,
    dropped: u64,
}

impl Frontier {
    /// An empty frontier holding at most `max_len` queued URLs.
    pub fn new(max_len: usize) -> Frontier {
        Frontier {
            queue: VecDeque::new(),
            seen: HashSet::new(),
            max_len,
            dropped: 0,
        }
    }

    /// A frontier resuming a scan: `queue` waits (URLs that do not parse, or
    /// beyond the bound, are dropped and counted), and every digest in `seen`
    /// (and every queued URL) counts as seen.
    pub fn resume(max_len: usize, queue: &[QueuedUrl], seen: &[u64]) -> Frontier {
        let mut f = Frontier::new(max_len);
        f.seen.extend(seen.iter().copied());
        for q in queue {
            match Url::parse(&q.url) {
                Ok(url) if f.queue.len() < max_len => {
                    f.seen.insert(url_digest(url.as_str()));
                    f.queue.push_back((url, q.depth));
                }
                _ => f.dropped += 1,
            }
        }
        f
    }

    /// Queue `url` (already canonical) at `depth`, unless seen before or full.
    pub fn push(&mut self, url: Url, depth: u32) -> Pushed {
        let digest = url_digest(url.as_str());
        if self.seen.contains(&digest) {
            return Pushed::AlreadySeen;
        }
        if self.queue.len() >= self.max_len {
            self.dropped += 1;
            return Pushed::Full;
        }
        self.seen.insert(digest);
        self.queue.push_back((url, depth));
        Pushed::Added
    }

    /// Put a URL handed out by [`Frontier::pop`] back at the head (a scan
    /// stopped before requesting it), so the scan's state still holds it.
    pub fn unpop(&mut self, url: Url, depth: u32) {
        self.seen.insert(url_digest(url.as_str()));
        self.queue.push_front((url, depth));
    }

    /// Record `url` as seen without queueing it (a page reached by a redirect).
    /// Returns whether it was new.
    pub fn mark_seen(&mut self, url: &Url) -> bool {
        self.seen.insert(url_digest(url.as_str()))
    }

    /// Whether `url` was queued or marked before.
    pub fn is_seen(&self, url: &Url) -> bool {
        self.seen.contains(&url_digest(url.as_str()))
    }

    /// The queue, oldest first, as a scan state holds it.
    pub fn queued(&self) -> Vec<QueuedUrl> {
        self.queue
            .iter()
            .map(|(url, depth)| QueuedUrl {
                url: url.as_str().to_string(),
                depth: *depth,
            })
            .collect()
    }

    /// Digests of every URL queued or marked so far.
    pub fn seen_digests(&self) -> Vec<u64> {
        self.seen.iter().copied().collect()
    }

    /// The next URL and its depth, oldest first.
    pub fn pop(&mut self) -> Option<(Url, u32)> {
        self.queue.pop_front()
    }

    /// The next `n` URLs, oldest first, left queued.
    pub fn peek(&self, n: usize) -> impl Iterator<Item = &Url> {
        self.queue.iter().take(n).map(|(url, _)| url)
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// URLs dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    #[test]
    fn breadth_first_without_duplicates() {
        let mut f = Frontier::new(10);
        assert_eq!(f.push(url("http://a.test/"), 0), Pushed::Added);
        assert_eq!(f.push(url("http://a.test/x"), 1), Pushed::Added);
        assert_eq!(f.push(url("http://a.test/"), 1), Pushed::AlreadySeen);
        assert_eq!(f.pop(), Some((url("http://a.test/"), 0)));
        // Handed out once: never again.
        assert_eq!(f.push(url("http://a.test/"), 2), Pushed::AlreadySeen);
        assert!(!f.mark_seen(&url("http://a.test/x")));
        assert!(f.mark_seen(&url("http://a.test/y")));
        assert_eq!(f.push(url("http://a.test/y"), 2), Pushed::AlreadySeen);
        assert_eq!(f.pop(), Some((url("http://a.test/x"), 1)));
        assert_eq!(f.pop(), None);
        assert!(f.is_empty());
    }

    #[test]
    fn bounded() {
        let mut f = Frontier::new(2);
        assert_eq!(f.push(url("http://a.test/1"), 1), Pushed::Added);
        assert_eq!(f.push(url("http://a.test/2"), 1), Pushed::Added);
        assert_eq!(f.push(url("http://a.test/3"), 1), Pushed::Full);
        assert_eq!(f.len(), 2);
        assert_eq!(f.dropped(), 1);
        // A dropped URL may come back once there is room.
        f.pop();
        assert_eq!(f.push(url("http://a.test/3"), 1), Pushed::Added);
    }

    #[test]
    fn a_resumed_frontier_knows_what_was_seen() {
        let mut f = Frontier::new(10);
        f.push(url("http://a.test/"), 0);
        f.push(url("http://a.test/1"), 1);
        f.push(url("http://a.test/2"), 1);
        let (first, depth) = f.pop().expect("seed");
        f.mark_seen(&url("http://a.test/r"));
        let mut g = Frontier::resume(10, &f.queued(), &f.seen_digests());
        assert_eq!(g.len(), 2);
        for seen in ["http://a.test/", "http://a.test/1", "http://a.test/r"] {
            assert_eq!(g.push(url(seen), 3), Pushed::AlreadySeen, "{seen}");
        }
        assert_eq!(g.push(url("http://a.test/3"), 2), Pushed::Added);
        g.unpop(first.clone(), depth);
        assert_eq!(g.pop(), Some((first, 0)));
        assert_eq!(g.pop(), Some((url("http://a.test/1"), 1)));
    }
}
