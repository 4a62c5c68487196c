//! A page's links extracted on a helper thread while the next request is
//! in flight: a crawl whose politeness delay is below
//! [`PIPELINE_BELOW_DELAY`] does not wait for the parse before its next
//! request (at a longer delay the parse runs inside the wait, so the crawl
//! parses in line and starts no thread).
//!
//! Invariants: at most one page is being parsed at a time, and its links
//! are taken into the crawl before the next page's are (the crawl's order
//! is the order of its pages); the crawl takes the pending page's links
//! before a snapshot, before its end, and before it finds its frontier
//! empty, so a state or a summary never misses a page that was answered.
//! The helper ends when the crawl drops it. It never touches the network.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use beebot_shared::extract::{extract_page_links, ExtractedLink};
use url::Url;

/// Politeness delays below this overlap a page's parse with the next
/// request; at or above it the parse fits in the wait for the next turn.
pub const PIPELINE_BELOW_DELAY: Duration = Duration::from_millis(10);

/// A page handed to the helper.
struct Job {
    body: Vec<u8>,
    page: Url,
    content_type: Option<String>,
}

/// The helper thread's two ends.
pub(super) struct Parser {
    jobs: Sender<Job>,
    links: Receiver<Vec<ExtractedLink>>,
    /// Joined when the helper is found gone, so its panic goes on in the
    /// crawl as it would have parsing in line.
    thread: Option<JoinHandle<()>>,
}

impl Parser {
    /// A helper thread, or `None` when one cannot be started (the crawl
    /// then parses in line).
    pub(super) fn start() -> Option<Parser> {
        let (jobs, inbox) = channel::<Job>();
        let (outbox, links) = channel();
        let thread = std::thread::Builder::new()
            .name("parse".into())
            .spawn(move || {
                for job in inbox {
                    let found =
                        extract_page_links(&job.body, &job.page, job.content_type.as_deref());
                    if outbox.send(found).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Parser {
            jobs,
            links,
            thread: Some(thread),
        })
    }

    /// Hand a page over; its body back when the helper is gone.
    pub(super) fn send(
        &mut self,
        body: Vec<u8>,
        page: &Url,
        content_type: Option<String>,
    ) -> Result<(), Vec<u8>> {
        self.jobs
            .send(Job {
                body,
                page: page.clone(),
                content_type,
            })
            .map_err(|e| {
                self.rethrow();
                e.0.body
            })
    }

    /// The links of the page handed over last (waits for its parse). A
    /// helper that panicked on it takes the crawl down with its panic, as
    /// the parse in line would have: a page's links are never lost quietly.
    pub(super) fn recv(&mut self) -> Vec<ExtractedLink> {
        match self.links.recv() {
            Ok(links) => links,
            Err(_) => {
                self.rethrow();
                unreachable!("the parse helper ended while a page was handed to it")
            }
        }
    }

    /// Go on with the helper's panic, if it ended in one.
    fn rethrow(&mut self) {
        if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join) {
            std::panic::resume_unwind(panic);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_back_in_the_order_they_were_handed_over() {
        let mut parser = Parser::start().expect("a helper");
        let page = Url::parse("http://a.test/").unwrap();
        parser
            .send(b"<a href=/one>1</a>".to_vec(), &page, None)
            .unwrap();
        let one = parser.recv();
        parser
            .send(
                b"<a href=/two>2</a><a href=/three>3</a>".to_vec(),
                &page,
                None,
            )
            .unwrap();
        let two = parser.recv();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].url.as_str(), "http://a.test/one");
        assert_eq!(
            two.iter().map(|l| l.url.path()).collect::<Vec<_>>(),
            ["/two", "/three"]
        );
    }
}
