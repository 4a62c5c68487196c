//! The "about this crawler" page for site owners, served at `/about` on the
//! reference site's public HTTP address (the User-Agent links to it): who runs
//! the crawler and how to reach them, what it collects, how often and within
//! which budgets it scans a site, the robots.txt token, and how to ask for
//! exclusion.
//!
//! Pure: [`AboutInfo`] is a small snapshot of the settings and the rounds in
//! effect, [`render`] turns it into HTML with every text escaped. The server
//! renders it when the snapshot changes and hands it to the reference site's
//! connections through a watch channel ([`AboutPage`]), so serving the page
//! never takes the grid lock.
//! [`render`] never reads the grid or the store: [`AboutInfo::of`] takes
//! the snapshot once, under the lock its caller holds.

use std::sync::Arc;
use std::time::Duration;

use beebot_shared::util::human_duration;

use crate::config::ServerConfig;
use crate::grid::Grid;
use crate::model::{RoundParams, RoundState};

/// The token site owners name in robots.txt (the crawler matches it
/// case-insensitively against `User-agent` lines).
pub const ROBOTS_TOKEN: &str = "BeeBot";

/// Rounds listed on the page at most (the running and repeating ones; an
/// admin rarely has more than a few).
pub const MAX_ROUNDS_SHOWN: usize = 16;

/// The rendered page, as the reference site's connections read it.
pub type AboutPage = tokio::sync::watch::Receiver<Arc<String>>;

/// What one round scans a site with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub max_pages: u32,
    pub max_depth: u32,
    pub delay_ms: u64,
    /// Time budget of one scan, seconds.
    pub max_seconds: u64,
    pub max_crawl_delay_ms: u64,
}

impl Budget {
    pub fn of(p: &RoundParams) -> Budget {
        Budget {
            max_pages: p.max_pages,
            max_depth: p.max_depth,
            delay_ms: p.delay_ms,
            max_seconds: p.max_seconds,
            max_crawl_delay_ms: p.max_crawl_delay_ms,
        }
    }

    pub fn of_defaults(d: &RoundParams) -> Budget {
        Budget::of(d)
    }
}

/// A round in effect: running, or repeating and waiting for its next scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundShown {
    pub id: u64,
    pub running: bool,
    /// Repeat period (`round start --every`), ms.
    pub every_ms: Option<u64>,
    pub budget: Budget,
}

/// Everything the page shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AboutInfo {
    pub operator: String,
    pub contact: String,
    pub user_agent: String,
    /// The budgets a new round starts with (shown when no round is in effect).
    pub defaults: Budget,
    pub rounds: Vec<RoundShown>,
}

impl AboutInfo {
    /// The snapshot for `config` and the rounds in effect in `grid` (cheap:
    /// a few fields of at most [`MAX_ROUNDS_SHOWN`] rounds).
    pub fn of(config: &ServerConfig, user_agent: &str, grid: &Grid) -> AboutInfo {
        let rounds = grid
            .rounds_in_effect()
            .take(MAX_ROUNDS_SHOWN)
            .map(|r| RoundShown {
                id: r.id,
                running: r.state == RoundState::Running,
                every_ms: r.every_ms,
                budget: Budget::of(&r.params),
            })
            .collect();
        AboutInfo {
            operator: config.operator.clone(),
            contact: config.contact.clone(),
            user_agent: user_agent.to_string(),
            defaults: Budget::of_defaults(&config.round),
            rounds,
        }
    }
}

/// Escape text for HTML content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A delay as a person reads it: `250 ms` under a second, else `1s`, `2m`.
fn delay_text(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        human_duration(Duration::from_millis(ms))
    }
}

/// The contact as a link: a URL as is, an e-mail address as `mailto:`.
fn contact_link(contact: &str) -> String {
    let href = if contact.contains("://") {
        contact.to_string()
    } else {
        format!("mailto:{contact}")
    };
    format!("<a href=\"{}\">{}</a>", escape(&href), escape(contact))
}

fn budget_rows(b: &Budget) -> String {
    format!(
        "<tr><th>pages per site and scan</th><td>at most {}</td></tr>\n\
         <tr><th>link depth from the home page</th><td>at most {}</td></tr>\n\
         <tr><th>delay between two requests to a site</th><td>{}</td></tr>\n\
         <tr><th>time budget of one scan</th><td>{} (a larger site is scanned on where it stopped, later)</td></tr>\n\
         <tr><th>longest robots.txt Crawl-delay honoured</th><td>{}</td></tr>\n",
        b.max_pages,
        b.max_depth,
        escape(&delay_text(b.delay_ms)),
        escape(&human_duration(Duration::from_secs(b.max_seconds))),
        escape(&delay_text(b.max_crawl_delay_ms)),
    )
}

/// The page, every text from the snapshot escaped.
pub fn render(info: &AboutInfo) -> String {
    let operator = if info.operator.trim().is_empty() {
        "the operator of this BeeBot grid server".to_string()
    } else {
        escape(info.operator.trim())
    };
    let contact = contact_link(info.contact.trim());
    let mut out = String::with_capacity(8 * 1024);
    out.push_str(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>BeeBot: about this crawler</title>\n\
         <style>body{font-family:sans-serif;max-width:46em;margin:2em auto;padding:0 1em;line-height:1.45}\
         table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
         pre,code{background:#f4f4f4}pre{padding:.6em}</style>\n</head>\n<body>\n\
         <h1>BeeBot: about this crawler</h1>\n",
    );
    out.push_str(&format!(
        "<p>BeeBot is a research crawler run by <strong id=\"operator\">{operator}</strong>. \
         It scans a fixed list of websites (universities, research institutes, government) \
         to study how the web links its sites together.</p>\n\
         <p>Contact: <span id=\"contact\">{contact}</span></p>\n"
    ));
    out.push_str(
        "<h2>What is collected</h2>\n\
         <p>Outbound links only: for each HTML page, the addresses it links to (with the \
         link's anchor text and whether it is <code>nofollow</code>). No page text, images, \
         forms or personal data are kept, and nothing is ever submitted to a site.</p>\n",
    );
    out.push_str(&format!(
        "<h2>How it crawls</h2>\n\
         <p>One request at a time per site, a delay between two requests, robots.txt \
         obeyed (its <code>Crawl-delay</code> too, up to the limit below). The requests come \
         from the desktop computers of the organisation that runs it, and say who they are:</p>\n\
         <pre id=\"user-agent\">User-Agent: {}</pre>\n",
        escape(&info.user_agent)
    ));
    out.push_str("<h2>How often, and how much</h2>\n");
    if info.rounds.is_empty() {
        out.push_str(
            "<p>No scan is under way now. A scan of the list starts with these budgets per \
             site:</p>\n<table id=\"budgets\">\n",
        );
        out.push_str(&budget_rows(&info.defaults));
        out.push_str("</table>\n");
    } else {
        for r in &info.rounds {
            let when = match (r.running, r.every_ms) {
                (true, Some(every)) => format!(
                    "under way now; repeated every {}",
                    human_duration(Duration::from_millis(every))
                ),
                (false, Some(every)) => format!(
                    "repeated every {}; the next scan has not started yet",
                    human_duration(Duration::from_millis(every))
                ),
                (_, None) => "under way now; scanned once".to_string(),
            };
            out.push_str(&format!(
                "<h3>Scan {}: {}</h3>\n<table class=\"budgets\">\n",
                r.id,
                escape(&when)
            ));
            out.push_str(&budget_rows(&r.budget));
            out.push_str("</table>\n");
        }
    }
    out.push_str(&format!(
        "<h2>Keeping BeeBot out</h2>\n\
         <p>BeeBot reads <code>/robots.txt</code> and obeys the rules for the token \
         <code id=\"robots-token\">{token}</code>. To keep it out of the whole site:</p>\n\
         <pre>User-agent: {token}\nDisallow: /</pre>\n\
         <p>To have your site taken off the list altogether, write to {contact} naming the \
         site; the operator removes it (<code>beebot-server sites exclude HOST</code>) and \
         it is not scanned again.</p>\n</body>\n</html>\n",
        token = ROBOTS_TOKEN,
    ));
    out
}

/// Render `info` into `page` when it differs from `last` (what was rendered
/// before); returns whether the page changed.
pub fn publish(
    page: &tokio::sync::watch::Sender<Arc<String>>,
    last: &mut Option<AboutInfo>,
    info: AboutInfo,
) -> bool {
    if last.as_ref() == Some(&info) {
        return false;
    }
    page.send_replace(Arc::new(render(&info)));
    *last = Some(info);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> AboutInfo {
        AboutInfo {
            operator: "Link <Lab> & \"Friends\"".into(),
            contact: "https://lab.example.edu/crawler?a=1&b=<2>".into(),
            user_agent: "BeeBot/0.1 (+http://grid.example.edu:4481/about)".into(),
            defaults: Budget::of_defaults(&RoundParams::default()),
            rounds: Vec::new(),
        }
    }

    #[test]
    fn every_text_is_escaped() {
        let page = render(&info());
        assert!(page.contains("Link &lt;Lab&gt; &amp; &quot;Friends&quot;"));
        assert!(!page.contains("<Lab>"), "operator unescaped");
        assert!(page.contains(
            "<a href=\"https://lab.example.edu/crawler?a=1&amp;b=&lt;2&gt;\">\
             https://lab.example.edu/crawler?a=1&amp;b=&lt;2&gt;</a>"
        ));
        assert!(!page.contains("b=<2>"), "contact unescaped");
        assert_eq!(escape("'\"<>&x"), "&#39;&quot;&lt;&gt;&amp;x");
        // A user agent or an e-mail address with markup stays text.
        let mut i = info();
        i.contact = "x<script>@evil.example".into();
        i.user_agent = "BeeBot/1 (+<img src=x>)".into();
        let page = render(&i);
        assert!(!page.contains("<script>") && !page.contains("<img"));
        assert!(page.contains("mailto:x&lt;script&gt;@evil.example"));
    }

    #[test]
    fn the_page_says_who_what_how_often_and_how_to_opt_out() {
        let page = render(&info());
        assert!(page.contains("<code id=\"robots-token\">BeeBot</code>"));
        assert!(page.contains("User-agent: BeeBot\nDisallow: /"));
        assert!(page.contains("Outbound links only"));
        assert!(page.contains("beebot-server sites exclude HOST"));
        // No round: the defaults.
        assert!(page.contains("No scan is under way now"));
        assert!(page.contains("<td>at most 1000</td>"), "default page cap");
        assert!(
            page.contains("<td>6h (a larger site"),
            "default scan budget"
        );
        assert!(page.contains("<td>1s</td>"), "default delay");
        assert!(page.contains("<td>30s</td>"), "default crawl-delay cap");
        // A repeating round and a one-off one, with their own budgets.
        let mut i = info();
        i.rounds = vec![
            RoundShown {
                id: 3,
                running: true,
                every_ms: Some(7 * 24 * 3600 * 1000),
                budget: Budget {
                    max_pages: 7,
                    max_depth: 3,
                    delay_ms: 250,
                    max_seconds: 90,
                    max_crawl_delay_ms: 12_000,
                },
            },
            RoundShown {
                id: 4,
                running: true,
                every_ms: None,
                budget: Budget::of_defaults(&RoundParams::default()),
            },
        ];
        let page = render(&i);
        assert!(!page.contains("No scan is under way now"));
        assert!(page.contains("Scan 3: under way now; repeated every 7 days"));
        assert!(page.contains("Scan 4: under way now; scanned once"));
        for cell in [
            "<td>at most 7</td>",
            "<td>at most 3</td>",
            "<td>250 ms</td>",
            "<td>1m 30s (a larger",
            "<td>12s</td>",
        ] {
            assert!(page.contains(cell), "{cell} missing");
        }
        // An empty operator is said in words, an e-mail contact is a mailto link.
        let mut i = info();
        i.operator = String::new();
        i.contact = "crawler@lab.example.edu".into();
        let page = render(&i);
        assert!(page.contains("the operator of this BeeBot grid server"));
        assert!(page.contains("<a href=\"mailto:crawler@lab.example.edu\">"));
    }

    #[test]
    fn publish_renders_only_when_the_snapshot_changes() {
        let (tx, rx) = tokio::sync::watch::channel(Arc::new(String::new()));
        let mut last = None;
        assert!(publish(&tx, &mut last, info()));
        let first = rx.borrow().clone();
        assert!(first.contains("Link &lt;Lab&gt;"));
        assert!(!publish(&tx, &mut last, info()), "same snapshot");
        assert!(Arc::ptr_eq(&first, &rx.borrow()));
        let mut changed = info();
        changed.defaults.max_pages = 5;
        assert!(publish(&tx, &mut last, changed));
        assert!(rx.borrow().contains("<td>at most 5</td>"));
    }
}
