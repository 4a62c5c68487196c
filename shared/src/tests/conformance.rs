//! Link-extraction conformance: every case of `shared/tests/conformance/links.json`
//! (what headless Chromium resolves) must come out of `extract_links` exactly.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::extract::{extract_links, LinkTag};
use crate::scope::{Scope, SiteScope};
use serde::Deserialize;
use url::Url;

#[derive(Debug, Deserialize)]
struct Case {
    name: String,
    page_url: String,
    scope: String,
    html: String,
    links: Vec<ExpectedLink>,
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
struct ExpectedLink {
    url: String,
    outbound: bool,
    nofollow: bool,
}

impl std::fmt::Display for ExpectedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} outbound={} nofollow={}",
            self.url, self.outbound, self.nofollow
        )
    }
}

fn cases_path() -> PathBuf {
    // The repository's copy of the cases (see `conformance/README.md`).
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance/links.json"
    ))
}

fn load_cases() -> Vec<Case> {
    let path = cases_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "conformance cases missing: cannot read {}: {e}",
            path.display()
        )
    });
    let cases: Vec<Case> = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a list of cases: {e}", path.display()));
    assert!(!cases.is_empty(), "{} has zero cases", path.display());
    cases
}

/// What our extractor gives for one case, in the file's terms.
fn run_case(case: &Case) -> Result<Vec<ExpectedLink>, String> {
    let page_url =
        Url::parse(&case.page_url).map_err(|e| format!("bad page_url {}: {e}", case.page_url))?;
    let scope: Scope = case.scope.parse().map_err(|e| format!("{e}"))?;
    let host = page_url
        .host_str()
        .ok_or_else(|| format!("page_url {} has no host", case.page_url))?;
    let site = SiteScope::new(host, scope);
    Ok(extract_links(case.html.as_bytes(), &page_url)
        .into_iter()
        // The file lists what browsers expose as hyperlinks: `a` and `area`.
        .filter(|link| matches!(link.tag, LinkTag::A | LinkTag::Area))
        .map(|link| ExpectedLink {
            outbound: !site.contains(&link.url),
            url: link.url.to_string(),
            nofollow: link.nofollow,
        })
        .collect())
}

fn diff(expected: &[ExpectedLink], actual: &[ExpectedLink]) -> String {
    let mut out = String::new();
    for i in 0..expected.len().max(actual.len()) {
        match (expected.get(i), actual.get(i)) {
            (Some(e), Some(a)) if e == a => {
                let _ = writeln!(out, "      {e}");
            }
            (e, a) => {
                if let Some(e) = e {
                    let _ = writeln!(out, "    - {e}");
                }
                if let Some(a) = a {
                    let _ = writeln!(out, "    + {a}");
                }
            }
        }
    }
    out
}

#[test]
fn links_json_conformance() {
    let cases = load_cases();
    let mut failures = String::new();
    let mut failed = 0;
    for case in &cases {
        match run_case(case) {
            Ok(actual) if actual == case.links => {}
            Ok(actual) => {
                failed += 1;
                let _ = writeln!(
                    failures,
                    "case `{}` (page {}, scope {}):\n  html: {:?}\n  (- expected, + got)\n{}",
                    case.name,
                    case.page_url,
                    case.scope,
                    case.html,
                    diff(&case.links, &actual)
                );
            }
            Err(e) => {
                failed += 1;
                let _ = writeln!(failures, "case `{}`: {e}", case.name);
            }
        }
    }
    assert!(
        failed == 0,
        "{failed} of {} conformance cases failed:\n\n{failures}",
        cases.len()
    );
}

#[test]
fn case_names_are_unique() {
    let cases = load_cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate case names in links.json");
}
