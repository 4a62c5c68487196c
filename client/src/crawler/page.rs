//! Fetching one page of a crawl: the frontier entry's request, the in-scope
//! redirects it follows (each a request of its own, each allowed by its
//! host's robots.txt), and the links taken from an HTML answer: in-scope
//! ones queued, the others recorded.
//!
//! Every request waits its turn ([`Crawler::wait_turn`]); a request cut by
//! the time budget is not the page's answer, so its URL goes back to the
//! queue. Nothing here decides when the crawl stops.

use std::collections::HashSet;
use std::time::Instant;

use beebot_shared::extract::{extract_page_links, ExtractedLink, LinkTag};
use beebot_shared::limits::{MAX_LINKS_PER_PAGE, MAX_LINK_RECORDS, MAX_URL_LEN};
use beebot_shared::linkfile::{LinkRecord, StopReason};
use beebot_shared::scanstate::url_digest;
use beebot_shared::scope::canonical_url;
use url::Url;

use super::fetch::{self, BodyWanted, FetchError};
use super::frontier::Pushed;
use super::redirect::{self, RedirectStep, MAX_REDIRECTS};
use super::{origin, trap, Crawler, PageResult};

impl Crawler<'_> {
    /// Fetch one frontier entry, following in-scope redirects, and take its links.
    pub(super) fn fetch_page(&mut self, url: Url, depth: u32) -> PageResult {
        self.fetched.insert(url_digest(url.as_str()));
        let mut chain = vec![url.clone()];
        let mut current = url;
        // One request per turn: the entry, then at most MAX_REDIRECTS hops
        // (`redirect::next_step` refuses the hop after that).
        for hop in 0..=MAX_REDIRECTS {
            let response = match self.request_hop(&current, depth, hop == 0) {
                Ok(response) => response,
                Err(result) => return result,
            };
            self.count_response(&current, &response, hop == 0);
            if redirect::is_redirect(response.status) {
                let Some(location) = &response.location else {
                    return PageResult::Answered;
                };
                match self.redirect_to(&current, location, &chain, depth) {
                    Ok(next) => {
                        chain.push(next.clone());
                        current = next;
                        continue;
                    }
                    Err(result) => return result,
                }
            }
            if (200..300).contains(&response.status) {
                if response.is_html() {
                    self.take_links(&current, depth, response);
                } else {
                    self.bounds.non_html += 1;
                }
            }
            return PageResult::Answered;
        }
        PageResult::Answered
    }

    /// One request of a page (`first`: the frontier entry, else a redirect
    /// hop), in its turn. `Err` is how the page went when there is no
    /// response to read: not requested or cut by the budget (the URL goes
    /// back to the queue), or failed.
    fn request_hop(
        &mut self,
        current: &Url,
        depth: u32,
        first: bool,
    ) -> Result<fetch::Fetched, PageResult> {
        if let Err(stop) = self.wait_turn(current) {
            // Not requested: the state keeps it queued (a redirect's
            // target as a page of its own).
            self.fetched.remove(&url_digest(current.as_str()));
            self.frontier.unpop(current.clone(), depth);
            return Err(PageResult::Stopped(stop));
        }
        let (result, took) = self.get(current, BodyWanted::Html, self.max_page_bytes, first);
        self.last_request.insert(origin(current), Instant::now());
        if result.is_ok() {
            self.responses += 1;
            self.response_time += took;
        }
        if self.cut_by_budget(&result) {
            // Not the page's answer: it goes back to the queue, for the
            // scan that continues this one.
            self.fetched.remove(&url_digest(current.as_str()));
            self.frontier.unpop(current.clone(), depth);
            return Err(PageResult::Stopped(StopReason::MaxTime));
        }
        match result {
            Ok(response) => {
                self.unanswered.clear();
                Ok(response)
            }
            Err(e) => {
                self.count_error(current, &e);
                if is_unanswered(&e) {
                    self.unanswered.push((current.clone(), depth, first));
                }
                if !first {
                    return Err(PageResult::Answered);
                }
                self.failed_pages += 1;
                Err(PageResult::Failed)
            }
        }
    }

    /// Count a response: the page (for the frontier entry), its status,
    /// bytes, and the bounds it met.
    fn count_response(&mut self, current: &Url, response: &fetch::Fetched, first: bool) {
        if first {
            self.pages += 1;
        }
        *self.status_counts.entry(response.status).or_insert(0) += 1;
        self.bytes += response.body.len() as u64;
        if response.truncated {
            self.bounds.truncated_pages += 1;
        }
        if response.timed_out {
            self.errors += 1;
            self.bounds.timeouts += 1;
            tracing::debug!(url = %current, "body timed out; the part read is parsed");
        }
    }

    /// Where a redirect to `location` leads: `Ok` is the next hop to
    /// request (in the scope, not excluded, not requested yet, allowed by its
    /// robots.txt); `Err` is how the page went (an outbound redirect is
    /// recorded as a link).
    fn redirect_to(
        &mut self,
        current: &Url,
        location: &str,
        chain: &[Url],
        depth: u32,
    ) -> Result<Url, PageResult> {
        let step = match redirect::next_step(current, location, chain, &self.scope) {
            // An excluded host is left like one outside the scope.
            RedirectStep::Follow(next) if self.is_excluded(&next) => RedirectStep::Outbound(next),
            step => step,
        };
        match step {
            RedirectStep::Follow(next) => {
                if self.fetched.contains(&url_digest(next.as_str())) {
                    return Err(PageResult::Answered);
                }
                if let Err(stop) = self.ensure_robots(&next) {
                    // The target is a page of its own for the next scan.
                    self.frontier.unpop(next, depth);
                    return Err(PageResult::Stopped(stop));
                }
                match self.robots_for(&next) {
                    Some(robots) if robots.allowed(&next) => {}
                    Some(robots) if !robots.is_unavailable() => {
                        self.robots_disallowed += 1;
                        return Err(PageResult::Answered);
                    }
                    _ => return Err(PageResult::Answered),
                }
                self.fetched.insert(url_digest(next.as_str()));
                self.frontier.mark_seen(&next);
                Ok(next)
            }
            RedirectStep::Outbound(target) => {
                self.add_record(current, target, LinkTag::Redirect, false, String::new());
                Err(PageResult::Answered)
            }
            RedirectStep::Fail(e) => {
                self.errors += 1;
                self.bounds.redirect_errors += 1;
                tracing::debug!(url = %current, error = %e, "redirect not followed");
                Err(PageResult::Answered)
            }
        }
    }

    /// Queue the page's in-scope links and record the others.
    pub(super) fn take_links(&mut self, page: &Url, depth: u32, response: fetch::Fetched) {
        // The page before's links first: pages are taken in order.
        self.take_pending_links();
        let body = match &mut self.parser {
            Some(parser) => match parser.send(response.body, page, response.content_type.clone()) {
                Ok(()) => {
                    self.pending = Some((page.clone(), depth));
                    return;
                }
                Err(body) => {
                    tracing::warn!("the parse helper is gone: pages are parsed in line");
                    self.parser = None;
                    body
                }
            },
            None => response.body,
        };
        let links = extract_page_links(&body, page, response.content_type.as_deref());
        self.add_links(page, depth, links);
    }

    /// Take the links of the page being parsed on the helper, if one is
    /// (waiting for its parse).
    pub(super) fn take_pending_links(&mut self) {
        let Some((page, depth)) = self.pending.take() else {
            return;
        };
        let Some(parser) = self.parser.as_mut() else {
            return;
        };
        let links = parser.recv();
        self.add_links(&page, depth, links);
    }

    /// Queue a page's links in the scope and record those leaving it.
    fn add_links(&mut self, page: &Url, depth: u32, links: Vec<ExtractedLink>) {
        let mut targets: HashSet<String> = HashSet::new();
        // At most MAX_LINKS_PER_PAGE links come back.
        if links.len() >= MAX_LINKS_PER_PAGE {
            self.bounds.link_capped_pages += 1;
        }
        for link in links {
            if !matches!(link.url.scheme(), "http" | "https") {
                continue;
            }
            let target = canonical_url(&link.url);
            if target.as_str().len() > MAX_URL_LEN {
                self.bounds.long_urls += 1;
                continue;
            }
            if self.scope.contains(&target) && !self.is_excluded(&target) {
                if depth >= self.spec.max_depth {
                    self.bounds.beyond_depth += 1;
                } else if self.frontier.is_seen(&target) {
                    // Queued or fetched already.
                } else if let Err(e) = trap::check(&target) {
                    self.bounds.trap_urls += 1;
                    tracing::debug!(url = %target, error = %e, "trap URL skipped");
                } else if let Pushed::Full = self.frontier.push(target, depth + 1) {
                    tracing::debug!(site = %self.spec.site, "frontier full, link dropped");
                }
            } else if targets.insert(target.as_str().to_string()) {
                self.add_record(page, target, link.tag, link.nofollow, link.anchor_text);
            }
        }
    }

    /// Record an outbound link (at most [`MAX_LINK_RECORDS`]; the rest are
    /// counted as dropped).
    fn add_record(
        &mut self,
        source: &Url,
        target: Url,
        tag: LinkTag,
        nofollow: bool,
        anchor_text: String,
    ) {
        if self.links >= MAX_LINK_RECORDS as u64 {
            self.records_dropped += 1;
            return;
        }
        self.links += 1;
        if let Some(host) = target.host_str() {
            if !self.target_hosts.contains(host) {
                self.target_hosts.insert(host.to_string());
            }
        }
        self.records.push(LinkRecord {
            source_url: source.as_str().to_string(),
            target_url: target.into(),
            tag,
            nofollow,
            anchor_text,
        });
    }

    /// Count a failed request, and the bound it met (timeout, refused address).
    pub(super) fn count_error(&mut self, url: &Url, error: &FetchError) {
        self.errors += 1;
        match error {
            FetchError::Timeout(_) => self.bounds.timeouts += 1,
            FetchError::Refused(_) => self.bounds.refused_addresses += 1,
            _ => {}
        }
        tracing::debug!(url = %url, error = %error, "request failed");
    }
}

/// Whether a request failed without any answer from the site (the network,
/// DNS, or the site's host being down), as opposed to an address refused by
/// policy.
fn is_unanswered(e: &FetchError) -> bool {
    matches!(
        e,
        FetchError::Timeout(_)
            | FetchError::HostNotFound
            | FetchError::ConnectionRefused
            | FetchError::Network(_)
            | FetchError::Body(_)
    )
}
