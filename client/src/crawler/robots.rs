//! robots.txt policy of one host: what a fetch result means (Google's rules: 2xx
//! parse, 4xx allow all, 429/5xx/unreachable crawl nothing), the rules for our
//! robot, and its Crawl-delay, bounded.

use std::time::Duration;

use texting_robots::Robot;
use url::Url;

/// Bytes of robots.txt read and parsed; the rest is ignored (Google's limit).
pub const MAX_ROBOTS_BYTES: u64 = 500 * 1024;

/// Longest Crawl-delay honoured: a larger value would stall a scan for hours.
pub const MAX_CRAWL_DELAY: Duration = Duration::from_secs(60);

/// What robots.txt lets us do on one host.
#[derive(Debug)]
pub enum Robots {
    /// No robots.txt (4xx) or an unreadable one: everything is allowed.
    AllowAll,
    /// The parsed rules for our robot.
    Rules(Box<Robot>),
    /// robots.txt answered 429 or 5xx or could not be fetched: crawl nothing now.
    Unavailable,
}

impl Robots {
    /// The policy given the final status and body of the robots.txt fetch.
    pub fn from_response(status: u16, body: &[u8], agent_token: &str) -> Robots {
        match status {
            200..=299 => {
                let cut = body.len().min(MAX_ROBOTS_BYTES as usize);
                match Robot::new(agent_token, &body[..cut]) {
                    Ok(robot) => Robots::Rules(Box::new(robot)),
                    Err(_) => Robots::AllowAll,
                }
            }
            // Redirects left unresolved are treated as "not found", as Google does.
            300..=399 => Robots::AllowAll,
            429 => Robots::Unavailable,
            400..=499 => Robots::AllowAll,
            _ => Robots::Unavailable,
        }
    }

    /// Whether our robot may fetch `url`.
    pub fn allowed(&self, url: &Url) -> bool {
        match self {
            Robots::AllowAll => true,
            Robots::Rules(robot) => robot.allowed(url.as_str()),
            Robots::Unavailable => false,
        }
    }

    /// The Crawl-delay for our robot, capped at [`MAX_CRAWL_DELAY`].
    pub fn crawl_delay(&self) -> Option<Duration> {
        match self {
            Robots::Rules(robot) => robot
                .delay
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(|d| Duration::from_secs_f64(f64::from(d).min(MAX_CRAWL_DELAY.as_secs_f64()))),
            _ => None,
        }
    }

    pub fn is_unavailable(&self) -> bool {
        matches!(self, Robots::Unavailable)
    }
}

/// The product token robots.txt groups are matched against (as
/// `User-agent: BeeBot`), whatever the full User-Agent string a unit sets:
/// a site owner names the robot, not its version or contact.
pub const ROBOTS_TOKEN: &str = "BeeBot";

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    const TXT: &[u8] = b"User-agent: GreedyBot\nDisallow: /\n\nUser-agent: *\nDisallow: /private/\nCrawl-delay: 2.5\n";

    #[test]
    fn statuses() {
        assert!(matches!(
            Robots::from_response(200, TXT, "BeeBot"),
            Robots::Rules(_)
        ));
        assert!(matches!(
            Robots::from_response(404, b"", "BeeBot"),
            Robots::AllowAll
        ));
        assert!(matches!(
            Robots::from_response(403, b"", "BeeBot"),
            Robots::AllowAll
        ));
        assert!(Robots::from_response(429, b"", "BeeBot").is_unavailable());
        assert!(Robots::from_response(500, b"", "BeeBot").is_unavailable());
        assert!(Robots::from_response(503, b"", "BeeBot").is_unavailable());
        assert!(!Robots::Unavailable.allowed(&url("http://a.test/")));
    }

    #[test]
    fn rules_for_our_robot() {
        let r = Robots::from_response(200, TXT, "BeeBot");
        assert!(r.allowed(&url("http://a.test/")));
        assert!(r.allowed(&url("http://a.test/public/x.html?y=1")));
        assert!(!r.allowed(&url("http://a.test/private/members.html")));
        assert_eq!(r.crawl_delay(), Some(Duration::from_millis(2500)));
        let greedy = Robots::from_response(200, TXT, "GreedyBot");
        assert!(!greedy.allowed(&url("http://a.test/")));
    }

    #[test]
    fn crawl_delay_is_capped_and_sane() {
        let r = Robots::from_response(200, b"User-agent: *\nCrawl-delay: 86400\n", "BeeBot");
        assert_eq!(r.crawl_delay(), Some(MAX_CRAWL_DELAY));
        let r = Robots::from_response(200, b"User-agent: *\nCrawl-delay: -3\n", "BeeBot");
        assert_eq!(r.crawl_delay(), None);
    }

    #[test]
    fn oversized_robots_is_cut() {
        let mut body = b"User-agent: *\nDisallow: /a\n".to_vec();
        body.extend(std::iter::repeat_n(b'#', MAX_ROBOTS_BYTES as usize));
        body.extend_from_slice(b"\nDisallow: /b\n");
        let r = Robots::from_response(200, &body, "BeeBot");
        assert!(!r.allowed(&url("http://a.test/a")));
        assert!(r.allowed(&url("http://a.test/b")));
    }

    #[test]
    fn a_beebot_group_binds_us_whatever_the_star_group_says() {
        // Disallowed by name only: nothing for `*`.
        let only_us = b"User-agent: BeeBot\nDisallow: /\n";
        let r = Robots::from_response(200, only_us, ROBOTS_TOKEN);
        assert!(!r.allowed(&url("http://a.test/")));
        assert!(!r.allowed(&url("http://a.test/page.html")));
        // `*` allows everything, but our own group wins (case-insensitive).
        let both = b"User-agent: *\nAllow: /\n\nUser-agent: beebot\nDisallow: /\n";
        assert!(!Robots::from_response(200, both, ROBOTS_TOKEN).allowed(&url("http://a.test/")));
        // Our group allows what `*` forbids.
        let star_only = b"User-agent: *\nDisallow: /\n\nUser-agent: BeeBot\nAllow: /\n";
        assert!(Robots::from_response(200, star_only, ROBOTS_TOKEN).allowed(&url("http://a.test/")));
        // Another robot's group is not ours.
        let other = b"User-agent: OtherBot\nDisallow: /\n";
        assert!(Robots::from_response(200, other, ROBOTS_TOKEN).allowed(&url("http://a.test/")));
    }
}
