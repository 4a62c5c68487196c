//! The crawl frontier: a bounded breadth-first queue of URLs that never holds, or
//! hands out, the same canonical URL twice.

use std::collections::{HashSet, VecDeque};

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

/// Breadth-first queue with a seen set. The seen set keeps every URL ever
/// queued or marked, so it grows up to the pages fetched plus the queue bound.
#[derive(Debug)]
pub struct Frontier {
    queue: VecDeque<(Url, u32)>,
    seen: HashSet<String>,
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

    /// Queue `url` (already canonical) at `depth`, unless seen before or full.
    pub fn push(&mut self, url: Url, depth: u32) -> Pushed {
        if self.seen.contains(url.as_str()) {
            return Pushed::AlreadySeen;
        }
        if self.queue.len() >= self.max_len {
            self.dropped += 1;
            return Pushed::Full;
        }
        self.seen.insert(url.as_str().to_string());
        self.queue.push_back((url, depth));
        Pushed::Added
    }

    /// Record `url` as seen without queueing it (a page reached by a redirect).
    /// Returns whether it was new.
    pub fn mark_seen(&mut self, url: &Url) -> bool {
        self.seen.insert(url.as_str().to_string())
    }

    /// Whether `url` was queued or marked before.
    pub fn is_seen(&self, url: &Url) -> bool {
        self.seen.contains(url.as_str())
    }

    /// The next URL and its depth, oldest first.
    pub fn pop(&mut self) -> Option<(Url, u32)> {
        self.queue.pop_front()
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
}
