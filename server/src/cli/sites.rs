//! `sites`: the target set (add, import, list, remove) and the hosts
//! excluded from crawling for good (exclude, include, exclusions).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};

use beebot_server::api::{
    ExcludeRequest, Excluded, ExclusionListed, SiteListed, SiteRefused, SiteRemoved, SitesAdd,
    SitesAdded,
};
use beebot_server::cli_util::{path_segment, AdminClient};
use beebot_server::config::DataDir;
use beebot_server::model::SiteRecord;
use beebot_shared::scope::{parse_site, Exclusion};

use super::Report;

#[derive(Subcommand)]
pub enum SitesCmd {
    /// Add sites by host or URL.
    Add {
        /// Hosts or URLs (`x.edu`, `https://x.edu/`).
        #[arg(required = true)]
        sites: Vec<String>,
        /// Allow names and addresses no public site has (localhost, a
        /// single label, a private or loopback IP): an intranet's sites.
        #[arg(long)]
        allow_private: bool,
    },
    /// Import a file: one host or URL a line, `#` comments, blank lines
    /// ignored. Each bad line is reported (its number, its text cut, why)
    /// and the others are imported; --strict imports nothing then.
    Import {
        /// A file of one host or URL a line (`#` starts a comment); `-`
        /// reads standard input.
        file: PathBuf,
        /// A bad line imports nothing.
        #[arg(long)]
        strict: bool,
        /// Allow names and addresses no public site has (see `sites add`).
        #[arg(long)]
        allow_private: bool,
    },
    /// Every site of the target set, with its last scan's pages and links.
    List {
        /// Print the sites as JSON (fields: site, added_ms, last_round, pages, links).
        #[arg(long)]
        json: bool,
    },
    /// Remove a site, by host or URL (`x.edu` removes `www.x.edu`: one site).
    Remove {
        /// The site's host or URL.
        site: String,
    },
    /// Exclude a host from crawling for good (a site owner asked): it leaves
    /// the target set, its jobs stop, no round or scope requests it again,
    /// and adding or importing it is refused. `x.edu` covers `www.x.edu`;
    /// `.x.edu` or --subdomains covers every name under it too.
    Exclude {
        /// A host or URL (every port); `.x.edu`: with its subdomains.
        host: String,
        /// Why (recorded with the date): e.g. "owner asked, ticket 42".
        #[arg(long)]
        reason: String,
        /// Exclude every subdomain too.
        #[arg(long)]
        subdomains: bool,
    },
    /// Lift an exclusion (the site is not added back: `sites add` it).
    Include {
        /// The host as excluded (`.x.edu` with its subdomains).
        host: String,
    },
    /// Excluded hosts: host, reason, date (UTC).
    Exclusions {
        /// Print them as JSON (fields: host, subdomains, reason, excluded_at, excluded_ms).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Export: tsv (with a header row) or json.
        #[arg(long, value_enum)]
        format: Option<ExclusionsFormat>,
        /// Write the export to this file instead of stdout.
        #[arg(long, requires = "format")]
        out: Option<PathBuf>,
    },
}

/// `sites exclusions --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExclusionsFormat {
    Tsv,
    Json,
}

/// `beebot-server sites ...`.
pub fn run(dir: &DataDir, cmd: SitesCmd) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    match cmd {
        SitesCmd::Add {
            sites,
            allow_private,
        } => add(&c, sites, allow_private),
        SitesCmd::Import {
            file,
            strict,
            allow_private,
        } => import(&c, &file, strict, allow_private),
        SitesCmd::Exclude {
            host,
            reason,
            subdomains,
        } => exclude(&c, &host, reason, subdomains),
        SitesCmd::Include { host } => {
            let e = Exclusion::parse(&host, false).with_context(|| format!("`{host}`"))?;
            let path = path_segment(&e.host);
            let r: ExclusionListed = c.delete_json(&format!("/api/exclusions/{path}"))?;
            Ok(Report::out(format!(
                "lifted the exclusion of {} (excluded on {}: {}); `sites add {}` to crawl it again\n",
                r.display(),
                r.excluded_at,
                r.reason,
                r.host
            )))
        }
        SitesCmd::Exclusions { json, format, out } => {
            let list: Vec<ExclusionListed> = c.get("/api/exclusions")?;
            let format = if json {
                Some(ExclusionsFormat::Json)
            } else {
                format
            };
            let r = exclusions(&list, format)?;
            match out {
                Some(p) => {
                    super::write_out(&p, r.out.as_bytes())?;
                    Ok(Report {
                        out: String::new(),
                        ..r
                    })
                }
                None => Ok(r),
            }
        }
        SitesCmd::List { json } => {
            let sites: Vec<SiteRecord> = c.get("/api/sites")?;
            list(&sites, json)
        }
        SitesCmd::Remove { site } => {
            // A URL names its site as its host does.
            let host = parse_site(&site).with_context(|| format!("`{site}`"))?;
            let path = path_segment(&host);
            let r: SiteRemoved = c.delete_json(&format!("/api/sites/{path}"))?;
            Ok(Report::out(format!("removed {}\n", r.site)))
        }
    }
}

/// `sites add`: every entry checked first; exit 1 when an exclusion
/// refused one (the others are added).
fn add(c: &AdminClient, sites: Vec<String>, allow_private: bool) -> Result<Report> {
    for s in &sites {
        check_line(s, allow_private).map_err(|why| anyhow::anyhow!("`{}`: {why}", cut(s)))?;
    }
    let r: SitesAdded = c.post("/api/sites", &SitesAdd { sites })?;
    let mut report = Report::default();
    for x in &r.excluded {
        report.warn(format!("refused {}", refused_line(x)));
    }
    report.say(format!(
        "added {} site(s); {} in the target set",
        r.added, r.total
    ));
    if !r.excluded.is_empty() {
        report.code = 1;
    }
    Ok(report)
}

/// `sites import FILE`: every bad line is reported and the others are
/// imported (`strict`: a bad line imports nothing); lines an exclusion
/// covers are skipped and said.
fn import(
    c: &AdminClient,
    file: &std::path::Path,
    strict: bool,
    allow_private: bool,
) -> Result<Report> {
    let bytes = read_site_file(file)?;
    let (lines, bad) = parse_site_file(&bytes, allow_private);
    let said = bad_lines_said(&bad);
    let named = if file == std::path::Path::new("-") {
        "standard input".to_string()
    } else {
        file.display().to_string()
    };
    if strict && !bad.is_empty() {
        bail!(
            "{named}: {} bad line(s), nothing imported (--strict):\n{}",
            bad.len(),
            said.join("\n")
        );
    }
    if lines.is_empty() {
        let mut why = format!("{named}: no sites in it: nothing imported");
        for line in &said {
            why.push('\n');
            why.push_str(line);
        }
        bail!(why);
    }
    let mut report = Report::default();
    for line in &said {
        report.warn(line);
    }
    let sites = lines.iter().map(|(_, s)| s.clone()).collect();
    let r: SitesAdded = c.post("/api/sites", &SitesAdd { sites })?;
    for x in &r.excluded {
        let line = lines.get(x.entry.wrapping_sub(1)).map_or(0, |l| l.0);
        report.warn(format!("line {line}: skipped {}", refused_line(x)));
    }
    let skipped = if r.excluded.is_empty() {
        String::new()
    } else {
        format!("; {} line(s) skipped as excluded", r.excluded.len())
    };
    let bad_lines = if bad.is_empty() {
        String::new()
    } else {
        format!("; {} bad line(s) skipped (above)", bad.len())
    };
    report.say(format!(
        "imported {} new site(s); {} in the target set{skipped}{bad_lines}",
        r.added, r.total
    ));
    if !bad.is_empty() {
        report.code = 1;
    }
    Ok(report)
}

/// `sites exclude HOST --reason WHY [--subdomains]`.
fn exclude(c: &AdminClient, host: &str, reason: String, subdomains: bool) -> Result<Report> {
    let e = Exclusion::parse(host, subdomains).with_context(|| format!("`{host}`"))?;
    if reason.trim().is_empty() {
        bail!("say why {host} is excluded: --reason \"owner asked, ticket 42\"");
    }
    let r: Excluded = c.post(
        "/api/exclusions",
        &ExcludeRequest {
            host: e.display(),
            subdomains: e.subdomains,
            reason,
        },
    )?;
    Ok(Report::out(excluded(&r)))
}

/// What `sites exclude` did, in words.
fn excluded(r: &Excluded) -> String {
    let mut out = String::new();
    if let Some(old) = &r.replaced {
        out.push_str(&format!(
            "{} was excluded since {} ({}): reason and date replaced\n",
            old.display(),
            old.excluded_at,
            old.reason
        ));
    }
    for site in &r.sites_removed {
        out.push_str(&format!("removed {site} from the target set\n"));
    }
    if r.jobs_excluded > 0 {
        out.push_str(&format!(
            "stopped {} job(s) of running rounds (failed: excluded)\n",
            r.jobs_excluded
        ));
    }
    if r.copies_restarted > 0 {
        out.push_str(&format!(
            "restarted {} running scan(s) whose scope reaches it\n",
            r.copies_restarted
        ));
    }
    let x = &r.exclusion;
    let subdomains = if x.subdomains {
        " and its subdomains"
    } else {
        ""
    };
    out.push_str(&format!(
        "excluded {}{subdomains} on {}: {}\n",
        x.display(),
        x.excluded_at,
        x.reason
    ));
    out
}

/// `sites exclusions`: JSON, TSV with a header, or a plain list (said on
/// stderr when empty).
fn exclusions(list: &[ExclusionListed], format: Option<ExclusionsFormat>) -> Result<Report> {
    Ok(match format {
        Some(ExclusionsFormat::Json) => Report::json(&list)?,
        Some(ExclusionsFormat::Tsv) => Report::out(exclusions_tsv(list)),
        None => {
            let mut r = Report::default();
            if list.is_empty() {
                r.warn("no host is excluded");
            }
            for x in list {
                r.say(format!("{}\t{}\t{}", x.display(), x.excluded_at, x.reason));
            }
            r
        }
    })
}

/// `sites list`: JSON, or a line a site.
fn list(sites: &[SiteRecord], json: bool) -> Result<Report> {
    if json {
        let listed: Vec<SiteListed> = sites.iter().map(SiteListed::of).collect();
        return Report::json(&listed);
    }
    let mut r = Report::default();
    if sites.is_empty() {
        r.warn("no sites yet: add some with `beebot-server sites add HOST` or `sites import FILE`");
    }
    for s in sites {
        match &s.last_scan {
            Some(l) => r.say(format!("{}\t{} pages\t{} links", s.host, l.pages, l.links)),
            None => r.say(format!("{}\tnever scanned", s.host)),
        }
    }
    Ok(r)
}

/// An entry an exclusion refused, in words.
fn refused_line(x: &SiteRefused) -> String {
    format!(
        "{}: excluded ({} since {}: {}); lift it with `sites include {}`",
        x.site, x.excluded_by, x.excluded_at, x.reason, x.excluded_by
    )
}

/// Exclusions as TSV with a header row (reasons hold no tabs or newlines:
/// their whitespace is collapsed when recorded).
fn exclusions_tsv(list: &[ExclusionListed]) -> String {
    let mut out = String::from("host\tsubdomains\texcluded_at\treason\n");
    for x in list {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            x.host, x.subdomains, x.excluded_at, x.reason
        ));
    }
    out
}

/// Parse a `sites import` file into (line number, entry); the first bad
/// line fails the whole file.
/// Largest site file `sites import` reads: the admin API's largest body
/// (64 MiB), which a file of `limits::MAX_SITES` URLs stays well inside.
const MAX_SITE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// A site file's bytes, refused unread past [`MAX_SITE_FILE_BYTES`].
fn read_site_file(file: &std::path::Path) -> Result<Vec<u8>> {
    if file == std::path::Path::new("-") {
        return read_bounded(std::io::stdin().lock(), "standard input");
    }
    let len = std::fs::metadata(file)
        .with_context(|| format!("cannot read {}", file.display()))?
        .len();
    if len > MAX_SITE_FILE_BYTES {
        bail!(
            "{} is {len} bytes, more than a site file may be ({MAX_SITE_FILE_BYTES}): split it",
            file.display()
        );
    }
    std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))
}

/// All of `input`, refused past [`MAX_SITE_FILE_BYTES`].
fn read_bounded(input: impl std::io::Read, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    input
        .take(MAX_SITE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() as u64 > MAX_SITE_FILE_BYTES {
        bail!("{what} holds more than a site file may ({MAX_SITE_FILE_BYTES} bytes): split it");
    }
    Ok(bytes)
}

/// What is said of the bad lines: the first [`MAX_BAD_LINES_SHOWN`] one
/// by one, then how many more.
fn bad_lines_said(bad: &[NumberedLine]) -> Vec<String> {
    let mut said: Vec<String> = bad
        .iter()
        .take(MAX_BAD_LINES_SHOWN)
        .map(|(n, why)| format!("line {n}: {why}"))
        .collect();
    if bad.len() > MAX_BAD_LINES_SHOWN {
        said.push(format!(
            "… and {} more bad lines (the first {MAX_BAD_LINES_SHOWN} are shown)",
            bad.len() - MAX_BAD_LINES_SHOWN
        ));
    }
    said
}

/// Bad lines a report names one by one; the rest are counted.
const MAX_BAD_LINES_SHOWN: usize = 1000;

/// Longest piece of a bad line a report repeats.
const SHOWN_CHARS: usize = 80;

/// `text` cut to [`SHOWN_CHARS`] characters (a 100,000-byte line is not
/// echoed whole).
fn cut(text: &str) -> String {
    if text.chars().count() <= SHOWN_CHARS {
        return text.to_string();
    }
    let mut out: String = text.chars().take(SHOWN_CHARS).collect();
    out.push_str(&format!("… ({} bytes)", text.len()));
    out
}

/// One site as an admin typed it: its name, or why it cannot be one (its
/// form; names no public site has unless `allow_private`).
fn check_line(line: &str, allow_private: bool) -> std::result::Result<String, String> {
    let site = parse_site(line).map_err(|e| e.to_string())?;
    if !allow_private {
        beebot_shared::scope::public_form(&site)
            .map_err(|why| format!("{why} (--allow-private takes it)"))?;
    }
    Ok(site)
}

/// A line of a site file: its number and its text (a site), or what is
/// said of it (a bad line).
type NumberedLine = (usize, String);

/// The sites of a site file and its bad lines (the text cut and why):
/// each line on its own, UTF-8 or not.
fn parse_site_file(bytes: &[u8], allow_private: bool) -> (Vec<NumberedLine>, Vec<NumberedLine>) {
    let mut sites = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(e) => {
                bad.push((
                    n,
                    format!(
                        "not UTF-8 text (a bad byte at column {})",
                        e.valid_up_to() + 1
                    ),
                ));
                continue;
            }
        };
        let line = text.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match check_line(line, allow_private) {
            Ok(_) => sites.push((n, line.to_string())),
            Err(why) => bad.push((n, format!("`{}`: {why}", cut(line)))),
        }
    }
    (sites, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_file_past_its_bound_is_refused_unread_and_bad_lines_are_bounded() {
        let dir = tempfile::tempdir().expect("dir");
        let big = dir.path().join("big.txt");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(MAX_SITE_FILE_BYTES + 1).expect("sparse");
        let e = read_site_file(&big).unwrap_err().to_string();
        assert!(e.contains("split it"), "{e}");
        let bad: Vec<NumberedLine> = (1..=MAX_BAD_LINES_SHOWN + 5)
            .map(|n| (n, "`x`: no".to_string()))
            .collect();
        let said = bad_lines_said(&bad);
        assert_eq!(said.len(), MAX_BAD_LINES_SHOWN + 1);
        assert!(said.last().expect("a line").contains("5 more"), "{said:?}");
    }

    #[test]
    fn site_file_reports_every_bad_line_and_keeps_the_good_ones() {
        let (ok, bad) = parse_site_file(
            b"# list\n\nwww.a.edu\nhttps://b.org/x  # trailing\r\n",
            false,
        );
        assert_eq!(
            ok,
            vec![(3, "www.a.edu".to_string()), (4, "https://b.org/x".into())]
        );
        assert!(bad.is_empty());
        let long = format!("{}.edu", "a".repeat(100_000));
        let mut file = String::from("a.edu\nnot a host\nb.edu\n");
        for junk in [
            "javascript:alert(1)",
            "data:text/html,x",
            "*.example.com",
            "-leadinghyphen.example",
            &format!("{}.example", "x".repeat(70)),
            "localhost",
            "127.0.0.1",
            "10.0.0.1",
            "http://[::1]/",
            "intranet",
            &long,
        ] {
            file.push_str(junk);
            file.push('\n');
        }
        let mut bytes = file.into_bytes();
        bytes.extend_from_slice(b"caf\xe9.example\n");
        let (ok, bad) = parse_site_file(&bytes, false);
        assert_eq!(ok.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 3]);
        let numbers: Vec<usize> = bad.iter().map(|b| b.0).collect();
        assert_eq!(
            numbers,
            (2..=2).chain(4..=15).collect::<Vec<_>>(),
            "{bad:#?}"
        );
        let said = |n: usize| &bad.iter().find(|b| b.0 == n).expect("reported").1;
        assert!(said(4).contains("scheme"), "{}", said(4));
        assert!(said(5).contains("scheme"), "{}", said(5));
        assert!(said(6).contains("wildcard"), "{}", said(6));
        assert!(said(7).contains("hyphen"), "{}", said(7));
        assert!(said(8).contains("63"), "{}", said(8));
        assert!(said(9).contains("localhost"), "{}", said(9));
        assert!(said(10).contains("loopback"), "{}", said(10));
        assert!(said(11).contains("private"), "{}", said(11));
        assert!(said(12).contains("loopback"), "{}", said(12));
        assert!(said(13).contains("single label"), "{}", said(13));
        assert!(
            said(14).len() < 300,
            "a long line is cut: {}",
            said(14).len()
        );
        assert!(said(15).contains("UTF-8"), "{}", said(15));
        // The admin may allow an intranet's names and addresses.
        let (ok, _) = parse_site_file(b"localhost:8080\n10.0.0.1\nintranet\n", true);
        assert_eq!(ok.len(), 3);
    }

    fn listed() -> ExclusionListed {
        ExclusionListed {
            host: "x.edu".into(),
            subdomains: true,
            reason: "owner asked".into(),
            excluded_at: "2026-11-30T22:20:05Z".into(),
            excluded_ms: 1,
        }
    }

    #[test]
    fn exclusions_export_as_tsv_with_a_header() {
        let tsv = exclusions_tsv(&[listed()]);
        assert_eq!(
            tsv,
            "host\tsubdomains\texcluded_at\treason\nx.edu\ttrue\t2026-11-30T22:20:05Z\towner asked\n"
        );
        let plain = exclusions(&[listed()], None).unwrap();
        assert_eq!(plain.out, ".x.edu\t2026-11-30T22:20:05Z\towner asked\n");
        assert_eq!(exclusions(&[], None).unwrap().err, "no host is excluded\n");
    }

    #[test]
    fn an_exclusion_says_what_it_stopped() {
        let r = Excluded {
            exclusion: listed(),
            replaced: None,
            sites_removed: vec!["www.x.edu".into()],
            jobs_excluded: 2,
            copies_restarted: 0,
        };
        assert_eq!(
            excluded(&r),
            "removed www.x.edu from the target set\n\
             stopped 2 job(s) of running rounds (failed: excluded)\n\
             excluded .x.edu and its subdomains on 2026-11-30T22:20:05Z: owner asked\n"
        );
    }
}
