//! What a person sees of a crawl: a live progress line (pages, queue, links,
//! rate) redrawn in place on a terminal and absent when stderr is not one, and
//! the one-line summary printed at the end.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use beebot_shared::linkfile::ScanSummary;

use super::CrawlProgress;

/// Least time between two redraws of the progress line.
const REDRAW_EVERY: Duration = Duration::from_millis(200);

/// A progress line on stderr, drawn only when stderr is a terminal.
pub struct ProgressLine {
    enabled: bool,
    started: Instant,
    last_draw: Option<Instant>,
    drawn: bool,
}

impl ProgressLine {
    /// A line on stderr, shown only if stderr is a terminal.
    pub fn stderr() -> ProgressLine {
        ProgressLine::new(std::io::stderr().is_terminal())
    }

    /// A line that draws only when `enabled`.
    pub fn new(enabled: bool) -> ProgressLine {
        ProgressLine {
            enabled,
            started: Instant::now(),
            last_draw: None,
            drawn: false,
        }
    }

    /// Redraw with `p`, at most every [`REDRAW_EVERY`].
    pub fn update(&mut self, p: &CrawlProgress) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if self
            .last_draw
            .is_some_and(|last| now.duration_since(last) < REDRAW_EVERY)
        {
            return;
        }
        self.last_draw = Some(now);
        let line = progress_text(p, now.duration_since(self.started));
        let mut err = std::io::stderr().lock();
        // `\r` back to the start, `ESC[K` clears what a longer line left.
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clear the line, so what follows starts on a clean line.
    pub fn finish(&mut self) {
        if self.enabled && self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The progress line's text: `123 pages  45 queued  678 links  12.3 pages/s  1.2 MB`.
pub fn progress_text(p: &CrawlProgress, elapsed: Duration) -> String {
    let rate = p.pages as f64 / elapsed.as_secs_f64().max(0.001);
    let mut line = format!(
        "{} pages  {} queued  {} links  {rate:.1} pages/s  {:.1} MB",
        p.pages,
        p.queued,
        p.links,
        p.bytes as f64 / 1e6
    );
    if p.errors > 0 {
        line.push_str(&format!("  {} errors", p.errors));
    }
    line
}

/// The summary of a scan in one line: counts, statuses, what the bounds did,
/// and the limit that stopped it.
pub fn summary_line(site: &str, s: &ScanSummary) -> String {
    let mut line = format!(
        "{site}: {} pages, {} bytes, {} outbound links to {} hosts, {} errors, {:.1}s",
        s.pages,
        s.bytes,
        s.links,
        s.distinct_target_hosts,
        s.errors,
        s.elapsed_ms as f64 / 1000.0
    );
    if !s.status_counts.is_empty() {
        let statuses: Vec<String> = s
            .status_counts
            .iter()
            .map(|(code, n)| format!("{code}×{n}"))
            .collect();
        line.push_str(&format!(" [HTTP {}]", statuses.join(" ")));
    }
    let bounds = [
        (s.robots_disallowed, "disallowed by robots.txt"),
        (s.timeouts, "timeouts"),
        (s.refused_addresses, "refused addresses"),
        (s.truncated_pages, "pages cut at the size limit"),
        (s.non_html, "not HTML"),
        (s.redirect_errors, "redirects not followed"),
        (s.trap_urls, "trap URLs skipped"),
        (s.long_urls, "over-long URLs skipped"),
        (s.beyond_depth, "links past the depth limit"),
        (s.link_capped_pages, "pages at the link cap"),
        (s.frontier_dropped, "links dropped, frontier full"),
        (s.records_dropped, "records dropped"),
        (s.robots_truncated, "robots.txt cut"),
    ];
    let notes: Vec<String> = bounds
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if !notes.is_empty() {
        line.push_str(&format!("; {}", notes.join(", ")));
    }
    if let Some(reason) = s.stopped_by {
        line.push_str(&format!("; stopped by {}", reason.as_str()));
    }
    line
}

/// What to tell the user of `beebot crawl` when the scan fetched no page
/// (`None` when it fetched some): why, in their terms, and what to do.
pub fn nothing_fetched(site: &str, s: &ScanSummary) -> Option<String> {
    use beebot_shared::linkfile::StopReason as S;
    if s.pages > 0 {
        return None;
    }
    let why = match s.stopped_by {
        Some(S::PrivateAddress) => format!(
            "{site} is on a loopback, private or link-local address, which is refused \
             unless you pass --allow-private (or set allow_private)"
        ),
        Some(S::DnsFailed) => format!("the name {site} does not resolve (dns-failed)"),
        Some(S::ConnectionRefused) => {
            format!("{site} refused the connection (connection-refused)")
        }
        Some(S::RobotsUnavailable) => format!(
            "{site} did not answer for its robots.txt (a server error, a timeout or a \
             redirect off the site: robots-unavailable), so it is not crawled"
        ),
        Some(S::SeedUnreachable) => {
            format!("the start page of {site} could not be fetched (seed-unreachable)")
        }
        Some(other) => format!("the scan of {site} stopped ({})", other.as_str()),
        None if s.robots_disallowed > 0 => format!("robots.txt of {site} disallows its pages"),
        None => format!("{site} has no page to fetch"),
    };
    Some(format!("nothing fetched: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use beebot_shared::linkfile::StopReason;

    #[test]
    fn progress_text_shows_pages_queue_links_rate() {
        let p = CrawlProgress {
            pages: 50,
            links: 7,
            queued: 12,
            bytes: 2_500_000,
            errors: 0,
            responses: 50,
            response_ms: 5_000,
        };
        assert_eq!(
            progress_text(&p, Duration::from_secs(10)),
            "50 pages  12 queued  7 links  5.0 pages/s  2.5 MB"
        );
        let p = CrawlProgress { errors: 3, ..p };
        assert!(progress_text(&p, Duration::ZERO).ends_with("  3 errors"));
    }

    #[test]
    fn a_crawl_without_a_page_says_why_and_what_to_do() {
        let failed = |stop| ScanSummary {
            stopped_by: stop,
            ..ScanSummary::default()
        };
        let private = nothing_fetched("intranet.test", &failed(Some(StopReason::PrivateAddress)))
            .expect("nothing fetched");
        assert!(private.contains("--allow-private"), "{private}");
        for (stop, name) in [
            (StopReason::DnsFailed, "dns-failed"),
            (StopReason::ConnectionRefused, "connection-refused"),
            (StopReason::RobotsUnavailable, "robots-unavailable"),
            (StopReason::SeedUnreachable, "seed-unreachable"),
        ] {
            let m = nothing_fetched("a.test", &failed(Some(stop))).expect("nothing fetched");
            assert!(
                m.starts_with("nothing fetched: ") && m.contains(name),
                "{m}"
            );
            assert!(!m.contains("--allow-private"), "{m}");
        }
        let some = ScanSummary {
            pages: 1,
            stopped_by: Some(StopReason::SeedUnreachable),
            ..ScanSummary::default()
        };
        assert_eq!(nothing_fetched("a.test", &some), None);
    }

    #[test]
    fn summary_line_names_bounds_and_stop() {
        let s = ScanSummary {
            pages: 3,
            bytes: 100,
            links: 2,
            distinct_target_hosts: 1,
            status_counts: vec![(200, 2), (404, 1)],
            timeouts: 1,
            trap_urls: 4,
            stopped_by: Some(StopReason::MaxPages),
            elapsed_ms: 1500,
            ..ScanSummary::default()
        };
        assert_eq!(
            summary_line("a.test", &s),
            "a.test: 3 pages, 100 bytes, 2 outbound links to 1 hosts, 0 errors, 1.5s \
             [HTTP 200×2 404×1]; 1 timeouts, 4 trap URLs skipped; stopped by max-pages"
        );
    }

    #[test]
    fn a_disabled_line_draws_nothing() {
        let mut line = ProgressLine::new(false);
        line.update(&CrawlProgress::default());
        assert!(!line.drawn);
    }
}
