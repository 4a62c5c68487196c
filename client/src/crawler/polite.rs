//! The crawler's manners toward a host: its robots.txt, asked once per
//! origin (following in-scope redirects) and kept for the scan state within
//! bounds, the wait between two requests (the spec's delay or a longer
//! Crawl-delay, capped), and the probe that tells a site gone quiet from a
//! site offline.
//!
//! A robots.txt that cannot be read means nothing is crawled on its origin
//! (the safe side). A wait sleeps until its time or the scan's cancel,
//! whichever comes first ([`crate::cancel::Cancel`]): it never polls. Nothing
//! here queues or records links.

use std::time::{Duration, Instant};

use beebot_shared::limits::MAX_STATE_ROBOTS_BYTES;
use beebot_shared::linkfile::StopReason;
use beebot_shared::scanstate::RobotsAnswer;
use beebot_shared::scope::canonical_url;
use url::Url;

use super::fetch::{BodyWanted, FetchError};
use super::redirect::{self, MAX_REDIRECTS};
use super::robots::{Robots, MAX_ROBOTS_BYTES};
use super::{origin, Crawler, MAX_ROBOTS_HOSTS};

/// What asking one origin's robots.txt gave.
struct RobotsAsked {
    policy: Robots,
    /// The final answer's status (0: no answer) and body.
    status: u16,
    body: Vec<u8>,
    /// Whether the answer is kept for the scan state (not when it
    /// redirected out of the scope: a resumed scan asks again).
    keep: bool,
}

impl Crawler<'_> {
    /// Whether the site answers at all (any HTTP status for its robots.txt),
    /// after [`MAX_CONSECUTIVE_CONN_FAILURES`] requests got no answer.
    pub(super) fn still_online(&mut self, seed: &Url) -> Result<bool, StopReason> {
        let Ok(probe) = seed.join("/robots.txt") else {
            return Ok(false);
        };
        self.wait_turn(&probe)?;
        let (result, _) = self.get(&probe, BodyWanted::Any2xx, MAX_ROBOTS_BYTES, false);
        self.last_request.insert(origin(&probe), Instant::now());
        match result {
            Ok(_) => Ok(true),
            Err(e) => {
                self.count_error(&probe, &e);
                if self.cut_by_budget(&Err(e)) {
                    return Err(StopReason::MaxTime);
                }
                Ok(false)
            }
        }
    }

    /// Wait until `url`'s host may get another request: the spec's delay, or the
    /// robots.txt Crawl-delay when longer, after the previous request finished.
    pub(super) fn wait_turn(&self, url: &Url) -> Result<(), StopReason> {
        if let Some(stop) = self.limit_reached() {
            return Err(stop);
        }
        let key = origin(url);
        let Some(last) = self.last_request.get(&key).copied().or(self.quiet_since) else {
            return Ok(());
        };
        let ready = last + self.delay_for(&key);
        let now = Instant::now();
        if ready <= now {
            return Ok(());
        }
        if ready - now > self.time_left() {
            return Err(StopReason::MaxTime); // the wait alone would outlast the crawl
        }
        // Within the time budget (checked above): only a cancel ends it early.
        if self.cancel.sleep_until(ready) {
            return Err(StopReason::Cancelled);
        }
        Ok(())
    }

    /// The pause between two requests to origin `key`: the crawl's delay,
    /// or its robots.txt Crawl-delay when longer (up to the cap).
    pub(super) fn delay_for(&self, key: &str) -> Duration {
        let crawl_delay = self
            .robots
            .get(key)
            .and_then(Robots::crawl_delay)
            .unwrap_or(Duration::ZERO)
            .min(self.max_crawl_delay);
        self.delay.max(crawl_delay)
    }

    /// The robots.txt policy of `url`'s origin, once asked.
    pub(super) fn robots_for(&self, url: &Url) -> Option<&Robots> {
        self.robots.get(&origin(url))
    }

    /// Fetch robots.txt of `url`'s origin if not known yet. A host beyond
    /// [`MAX_ROBOTS_HOSTS`] gets no entry (its URLs are skipped).
    pub(super) fn ensure_robots(&mut self, url: &Url) -> Result<(), StopReason> {
        let key = origin(url);
        if self.robots.contains_key(&key) || self.robots.len() >= MAX_ROBOTS_HOSTS {
            return Ok(());
        }
        let Ok(robots_url) = url.join("/robots.txt") else {
            self.robots.insert(key, Robots::Unavailable);
            return Ok(());
        };
        let asked = self.ask_robots(robots_url)?;
        self.robots.insert(key.clone(), asked.policy);
        self.robots_unanswered = asked.status == 0;
        // No answer at all is not kept for the state: the next scan asks.
        if asked.keep
            && asked.status != 0
            && self.robots_answer_bytes + asked.body.len() <= MAX_STATE_ROBOTS_BYTES
        {
            self.robots_answer_bytes += asked.body.len();
            self.robots_answers.push(RobotsAnswer {
                origin: key,
                status: asked.status,
                body: asked.body,
            });
        }
        Ok(())
    }

    /// Ask robots.txt at `current`, following its redirects.
    fn ask_robots(&mut self, mut current: Url) -> Result<RobotsAsked, StopReason> {
        let mut chain: Vec<Url> = Vec::new();
        let mut policy = Robots::Unavailable;
        // The final answer (status 0: no answer), kept for the scan state
        // unless `keep` is cleared.
        let mut answer: (u16, Vec<u8>) = (0, Vec::new());
        let mut keep = true;
        // robots.txt redirects are followed within the site's scope, at most
        // MAX_REDIRECTS hops (RFC 9309 asks for at least five); when the hops
        // run out it counts as missing. A redirect out of the scope is not
        // followed: the site would have us request a host that is not its own
        // (anyone's, or a private one the guard cannot see behind a proxy),
        // and its rules for us would come from there. RFC 9309 lets a crawler
        // treat a robots.txt it cannot reach as unavailable, so it is: nothing
        // is crawled on that origin, the safe side when we cannot read the
        // rules (allowing all could crawl what the site forbids).
        for _ in 0..=MAX_REDIRECTS {
            self.wait_turn(&current)?;
            let (result, _) = self.get(&current, BodyWanted::Any2xx, MAX_ROBOTS_BYTES, false);
            self.last_request.insert(origin(&current), Instant::now());
            if self.cut_by_budget(&result) {
                return Err(StopReason::MaxTime); // asked again by the next scan
            }
            chain.push(current.clone());
            let response = match result {
                Ok(response) => response,
                Err(e) => {
                    self.count_error(&current, &e);
                    self.robots_failure = Some(unreachable_cause(&e));
                    policy = Robots::Unavailable;
                    break;
                }
            };
            let next = match (&response.location, redirect::is_redirect(response.status)) {
                (Some(location), true) => current
                    .join(location.trim())
                    .ok()
                    .map(|u| canonical_url(&u))
                    .filter(|u| matches!(u.scheme(), "http" | "https") && !chain.contains(u)),
                _ => None,
            };
            match next {
                Some(next) if !self.scope.contains(&next) || self.is_excluded(&next) => {
                    tracing::debug!(url = %current, to = %next, "robots.txt redirect out of the scope: unavailable");
                    policy = Robots::Unavailable;
                    // Answered, but not kept: a resumed scan asks again.
                    answer = (response.status, Vec::new());
                    keep = false;
                    break;
                }
                Some(next) => {
                    policy = Robots::AllowAll;
                    answer = (response.status, Vec::new());
                    current = next;
                }
                None => {
                    if response.truncated {
                        self.bounds.robots_truncated += 1;
                    }
                    policy =
                        Robots::from_response(response.status, &response.body, &self.agent_token);
                    answer = (response.status, response.body);
                    break;
                }
            }
        }
        Ok(RobotsAsked {
            policy,
            status: answer.0,
            body: answer.1,
            keep,
        })
    }
}

/// Why a site whose robots.txt got no answer at all could not be scanned.
pub(super) fn unreachable_cause(e: &FetchError) -> StopReason {
    match e {
        FetchError::HostNotFound => StopReason::DnsFailed,
        FetchError::ConnectionRefused => StopReason::ConnectionRefused,
        FetchError::Refused(_) => StopReason::PrivateAddress,
        FetchError::Timeout(_) | FetchError::Body(_) | FetchError::Network(_) => {
            StopReason::RobotsUnavailable
        }
    }
}
