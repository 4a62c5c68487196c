//! Site scope rules: which URLs belong to a site, the URL identity used for
//! deduplication, and parsing the site names an admin types.
//!
//! A *site* is written as its lower-case host (punycode for IDN), optionally
//! followed by `:port` when the admin gave an explicit non-default port (see
//! [`parse_site`]). Scope checks respect the port: a site added without one
//! holds only URLs on the scheme's default port (80 for http, 443 for
//! https), and `example.edu:8080` only URLs on port 8080.
//!
//! Pure functions on strings and parsed URLs: nothing here resolves a name or
//! touches the network, so whether an address is safe to fetch is decided
//! elsewhere, at connect time.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use url::{Host, Url};

use crate::limits::{MAX_HOST_LEN, MAX_URL_LEN};

/// Which hosts belong to a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Only the site's own host.
    #[default]
    Host,
    /// The host and all its subdomains.
    Subdomains,
    /// The whole registrable domain (Public Suffix List).
    Domain,
}

impl Scope {
    /// Every scope, in the order of their names in error messages.
    pub const ALL: [Scope; 3] = [Scope::Host, Scope::Subdomains, Scope::Domain];

    /// The name used on command lines and in config files.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Host => "host",
            Scope::Subdomains => "subdomains",
            Scope::Domain => "domain",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = ScopeError;

    /// Parses `host`, `subdomains` or `domain` (ASCII case-insensitive,
    /// surrounding whitespace ignored).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim();
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| ScopeError::UnknownScope(shorten(name)))
    }
}

/// What is wrong with a scope name or a site an admin typed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ScopeError {
    #[error("unknown scope `{0}`: expected one of host, subdomains, domain")]
    UnknownScope(String),
    #[error("empty site: expected a host name or an http(s) URL")]
    Empty,
    #[error("site `{0}` contains whitespace or control characters")]
    Whitespace(String),
    #[error("site is {len} bytes long, more than the {max} allowed")]
    TooLong { len: usize, max: usize },
    #[error("site `{site}` uses the scheme `{scheme}`: only http and https are crawled")]
    UnsupportedScheme { site: String, scheme: String },
    #[error("site `{0}` contains a user name or password")]
    Credentials(String),
    #[error("site `{0}` has no host")]
    NoHost(String),
    #[error("host `{host}` is {len} bytes long, more than the {max} a DNS name may have")]
    HostTooLong {
        host: String,
        len: usize,
        max: usize,
    },
    #[error("site `{site}` is not a valid host or URL: {reason}")]
    Invalid {
        site: String,
        reason: url::ParseError,
    },
}

/// Cut user input quoted in error messages to a readable length.
fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

/// Turns one `HOST_OR_URL` line an admin typed into the site's name.
///
/// Accepts a bare host (`www.example.edu`), a host with a port
/// (`example.edu:8080`) or an http/https URL (`https://www.Example.edu/path`;
/// path, query and fragment are ignored). Surrounding whitespace is trimmed.
/// The result is the lower-case host, punycode for IDN, without a trailing
/// dot, and IPv6 addresses in brackets.
///
/// Ports: an explicit port that is not the scheme's default is kept as
/// `host:port`, because admins may run test sites on other ports (the
/// synthetic test web itself uses names without ports). A default port
/// (`:80` for http, `:443` for https) is dropped. The scheme itself is not kept:
/// crawls start from [`seed_url`] (`http://`) and follow the site's redirect to
/// https, so `https://x.edu:8443/` gives `x.edu:8443`, which is then crawled
/// as `http://x.edu:8443/`.
pub fn parse_site(input: &str) -> Result<String, ScopeError> {
    let site = input.trim_matches(|c: char| c.is_ascii_whitespace());
    if site.is_empty() {
        return Err(ScopeError::Empty);
    }
    if site.len() > MAX_URL_LEN {
        return Err(ScopeError::TooLong {
            len: site.len(),
            max: MAX_URL_LEN,
        });
    }
    if site.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ScopeError::Whitespace(shorten(site)));
    }

    // `javascript:…`, `data:…`, `mailto:…`: a scheme, not `host:port`.
    if !site.contains("://") {
        if let Some((scheme, rest)) = site.split_once(':') {
            let scheme_like = scheme
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if scheme_like && !rest.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(ScopeError::UnsupportedScheme {
                    site: shorten(site),
                    scheme: shorten(scheme),
                });
            }
        }
    }
    let with_scheme;
    let url_text = match site.find("://") {
        Some(pos) => {
            let scheme = &site[..pos];
            if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
                return Err(ScopeError::UnsupportedScheme {
                    site: shorten(site),
                    scheme: shorten(scheme),
                });
            }
            site
        }
        None => {
            with_scheme = format!("http://{site}");
            &with_scheme
        }
    };

    let url = Url::parse(url_text).map_err(|reason| ScopeError::Invalid {
        site: shorten(site),
        reason,
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ScopeError::Credentials(shorten(site)));
    }
    let host = match url.host_str() {
        Some(h) if !h.is_empty() => h,
        _ => return Err(ScopeError::NoHost(shorten(site))),
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() || host.contains("..") || host.starts_with('.') {
        return Err(ScopeError::Invalid {
            site: shorten(site),
            reason: url::ParseError::EmptyHost,
        });
    }
    if host.len() > MAX_HOST_LEN {
        return Err(ScopeError::HostTooLong {
            host: shorten(host),
            len: host.len(),
            max: MAX_HOST_LEN,
        });
    }
    if url.port() == Some(0) {
        return Err(ScopeError::Invalid {
            site: shorten(site),
            reason: url::ParseError::InvalidPort,
        });
    }
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// Whether `site` (as [`parse_site`] gives it) can be a public web site by
/// its form: no wildcard, every label of letters, digits and inner hyphens
/// (1 to 63 of them), at least two labels, not `localhost`, and no IP
/// literal in a loopback, private, link-local or unspecified range. A name
/// is judged by its form here, and by its address at crawl time.
pub fn public_form(site: &str) -> Result<(), String> {
    let host = match site.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => site,
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        let local = match ip {
            std::net::IpAddr::V4(v4) => {
                v4.is_loopback()
                    || v4.is_private()
                    || v4.is_link_local()
                    || v4.is_unspecified()
                    || v4.is_broadcast()
                    || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
            }
            std::net::IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
                    || v6.to_ipv4_mapped().is_some()
            }
        };
        return if local {
            Err(format!(
                "{ip} is a loopback, private or link-local address, no public site"
            ))
        } else {
            Ok(())
        };
    }
    if host.contains('*') {
        return Err("a wildcard names no one site".into());
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Err("localhost is this machine, no public site".into());
    }
    let labels: Vec<&str> = host.split('.').collect();
    if labels.len() < 2 {
        return Err(format!("`{host}` is a single label, no public name"));
    }
    for label in labels {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "label `{}` is {} characters (1 to 63)",
                shorten(label),
                label.len()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(format!("label `{label}` starts or ends with a hyphen"));
        }
        if !label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "label `{}` holds a character no host name has",
                shorten(label)
            ));
        }
    }
    Ok(())
}

/// The URL a crawl of `site` (as given by [`parse_site`]) starts from:
/// `http://{site}/`.
///
/// A `site` that did not come from [`parse_site`] and does not form a valid URL
/// gives `http://invalid.invalid/`, a name that never resolves (RFC 2606), so a
/// crawl of it fails cleanly instead of panicking.
pub fn seed_url(site: &str) -> Url {
    Url::parse(&format!("http://{site}/"))
        .ok()
        .filter(|url| {
            url.host_str().is_some()
                && url.path() == "/"
                && url.query().is_none()
                && url.fragment().is_none()
                && url.username().is_empty()
                && url.password().is_none()
        })
        .unwrap_or_else(invalid_seed)
}

fn invalid_seed() -> Url {
    Url::parse("http://invalid.invalid/").expect("constant URL parses")
}

/// The identity of a URL for deduplication: the URL with its fragment dropped.
///
/// The `url` crate already lower-cases the scheme and host, converts IDN to
/// punycode, drops default ports and resolves `.`/`..` path segments; path and
/// query keep their case.
pub fn canonical_url(url: &Url) -> Url {
    let mut out = url.clone();
    out.set_fragment(None);
    out
}

/// Which URLs belong to one site under one [`Scope`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteScope {
    scope: Scope,
    /// The site's host: lower case, punycode, no port, no trailing dot.
    host: String,
    /// The site's explicit port (`None`: the scheme's default port only).
    port: Option<u16>,
    /// What `contains` compares against.
    rule: Rule,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// Exactly this host (IP addresses under every scope).
    Exact(String),
    /// This host or `www.` + this host (the host scope of a domain name: `www.`
    /// and the bare host are the same site).
    HostOrWww(String),
    /// This host or any name ending in `.` + this host.
    Suffix(String),
    /// Hosts whose registrable domain (Public Suffix List) is this one.
    Registrable(String),
}

impl SiteScope {
    /// The scope of the site whose host is `site_host` (a bare host, `host:port`
    /// or anything [`parse_site`] returns; an explicit port is the only one
    /// inside, else the scheme's default port is).
    pub fn new(site_host: &str, scope: Scope) -> SiteScope {
        let (host, is_ip, port) = normalize_site_host(site_host);
        let rule = if is_ip {
            Rule::Exact(host.clone())
        } else {
            match scope {
                Scope::Host => Rule::HostOrWww(without_www(&host).to_string()),
                Scope::Subdomains => Rule::Suffix(without_www(&host).to_string()),
                Scope::Domain => match registrable_domain(&host) {
                    Some(domain) => Rule::Registrable(domain.to_string()),
                    None => Rule::Suffix(without_www(&host).to_string()),
                },
            }
        };
        SiteScope {
            scope,
            host,
            port,
            rule,
        }
    }

    /// The site's host (lower case, punycode, no port).
    pub fn site_host(&self) -> &str {
        &self.host
    }

    /// The scope this was built with.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// How far the site reaches on the web, by host name (ports aside): a
    /// root name and whether every name under it is inside too (`true` for
    /// the subdomains and domain scopes). Two sites whose reaches meet share
    /// a host, so the grid never scans them at the same time.
    pub fn reach(&self) -> (&str, bool) {
        match &self.rule {
            Rule::Exact(h) | Rule::HostOrWww(h) => (h, false),
            Rule::Suffix(h) | Rule::Registrable(h) => (h, true),
        }
    }

    /// Whether every page of `other` is inside this site too: the same port,
    /// and `other`'s reach under this one's, this one taking every name under
    /// its root (or both the same host). A round folds such a site into the
    /// wider one, so no host is crawled by two jobs of one round.
    pub fn covers_site(&self, other: &SiteScope) -> bool {
        let ((root, all), (other_root, other_all)) = (self.reach(), other.reach());
        if self.port != other.port {
            return false;
        }
        if !all {
            return root == other_root && !other_all;
        }
        other_root == root
            || other_root
                .strip_suffix(root)
                .is_some_and(|head| head.ends_with('.'))
    }

    /// The site's explicit port (`None`: the scheme's default port).
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether `url` is inside the site: its host by the scope, and its
    /// port the site's (an explicit one, else the scheme's default). Scheme,
    /// path and query are ignored. URLs without a host are never inside.
    pub fn contains(&self, url: &Url) -> bool {
        // `url` drops a scheme's default port, so `port()` is `None` on it.
        let port_ok = match self.port {
            Some(p) => url.port_or_known_default() == Some(p),
            None => url.port().is_none(),
        };
        if !port_ok {
            return false;
        }
        let host = match url.host() {
            Some(Host::Domain(d)) => d,
            Some(Host::Ipv4(_)) | Some(Host::Ipv6(_)) => {
                return match (&self.rule, url.host_str()) {
                    (Rule::Exact(h), Some(u)) => h == u,
                    _ => false,
                };
            }
            None => return false,
        };
        // `url` lower-cases domains of special schemes; other schemes keep case.
        let lowered;
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            lowered = host.to_ascii_lowercase();
            lowered.as_str()
        } else {
            host
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        match &self.rule {
            Rule::Exact(h) => host == h,
            Rule::HostOrWww(h) => without_www(host) == h,
            Rule::Suffix(base) => is_same_or_subdomain(host, base),
            Rule::Registrable(domain) => {
                is_same_or_subdomain(host, domain)
                    && registrable_domain(host).is_some_and(|d| d == domain)
            }
        }
    }
}

/// `host` without a leading `www.`, unless only one label would be left
/// (`www.x.test` is `x.test`, but `www.test` stays: `test` is no site).
fn without_www(host: &str) -> &str {
    match host.strip_prefix("www.") {
        Some(rest) if rest.contains('.') => rest,
        _ => host,
    }
}

/// What makes two sites (as given by [`parse_site`]) one: `www.` and the bare
/// host are one site on the same port (`www.x.edu` and `x.edu` are,
/// `x.edu:8080` and `x.edu` are not).
pub fn site_key(site: &str) -> String {
    match site.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{}:{port}", without_www(host))
        }
        _ => without_www(site).to_string(),
    }
}

/// A host a site owner asked not to be crawled (`sites exclude`). An
/// exclusion names a host, with every port: `x.edu` (or `www.x.edu`, the same
/// site) covers `x.edu` and `www.x.edu`; with `subdomains` (typed `.x.edu` or
/// `--subdomains`) it covers `x.edu` and every name under it too.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Exclusion {
    /// Lower case, punycode, no port, no trailing dot, no leading `www.`.
    pub host: String,
    /// Every name under `host` is excluded too.
    pub subdomains: bool,
}

impl Exclusion {
    /// The exclusion an admin typed: a host or URL as [`parse_site`] takes it
    /// (its port and a leading `www.` are dropped), or `.host` for the host
    /// and its subdomains.
    pub fn parse(input: &str, subdomains: bool) -> Result<Exclusion, ScopeError> {
        let trimmed = input.trim_matches(|c: char| c.is_ascii_whitespace());
        let (text, dot) = match trimmed.strip_prefix('.') {
            Some(rest) => (rest, true),
            None => (trimmed, false),
        };
        let site = parse_site(text)?;
        let (host, _, _) = normalize_site_host(&site);
        Ok(Exclusion {
            host: without_www(&host).to_string(),
            subdomains: subdomains || dot,
        })
    }

    /// Whether this exclusion covers `host` (a host name, or a site with a port).
    pub fn covers_host(&self, host: &str) -> bool {
        let (host, _, _) = normalize_site_host(host);
        if self.subdomains {
            is_same_or_subdomain(&host, &self.host)
        } else {
            without_www(&host) == self.host
        }
    }

    /// Whether this exclusion covers the host of `url` (any port).
    pub fn covers_url(&self, url: &Url) -> bool {
        url.host_str().is_some_and(|h| self.covers_host(h))
    }

    /// How it is written in lists: `x.edu`, or `.x.edu` with its subdomains.
    pub fn display(&self) -> String {
        if self.subdomains {
            format!(".{}", self.host)
        } else {
            self.host.clone()
        }
    }
}

impl SiteScope {
    /// The name every host of this scope is or lies under, when the scope
    /// may reach hosts other than the site's own (`subdomains` and
    /// `domain`); `None` for `host` scope and IP addresses. The exclusions a
    /// unit must carry are the ones at or under it.
    pub fn root(&self) -> Option<&str> {
        match &self.rule {
            Rule::Exact(_) | Rule::HostOrWww(_) => None,
            Rule::Suffix(base) => Some(base),
            Rule::Registrable(domain) => Some(domain),
        }
    }
}

/// `host` with its labels in reverse order (`www.x.edu` → `edu.x.www`): every
/// name under a host starts with its reversed name and a dot, so the
/// exclusions under a scope's root are one range of an ordered map.
pub fn reversed_labels(host: &str) -> String {
    host.rsplit('.').collect::<Vec<_>>().join(".")
}

/// `host` equals `base` or ends with `.` + `base`.
fn is_same_or_subdomain(host: &str, base: &str) -> bool {
    match host.strip_suffix(base) {
        Some("") => true,
        Some(rest) => rest.ends_with('.'),
        None => false,
    }
}

/// The registrable domain of a (lower-case, punycode) host by the Public Suffix
/// List, or `None` when it has none: a public suffix itself, a single label, an
/// unknown top-level domain (such as `.test`, where the list's default rule would
/// otherwise make every second-level name a site).
fn registrable_domain(host: &str) -> Option<&str> {
    let domain = psl::domain(host.as_bytes())?;
    if !domain.suffix().is_known() {
        return None;
    }
    std::str::from_utf8(domain.as_bytes()).ok()
}

/// Lower-case punycode host of a site name, port and trailing dot removed,
/// whether it is an IP address, and its explicit port (not http's default).
/// Falls back to plain lower-casing when the name does not parse as a URL
/// host (such a site then contains nothing real).
fn normalize_site_host(site_host: &str) -> (String, bool, Option<u16>) {
    let trimmed = site_host.trim();
    if let Ok(url) = Url::parse(&format!("http://{trimmed}/")) {
        match url.host() {
            Some(Host::Domain(d)) => {
                let d = d.strip_suffix('.').unwrap_or(d);
                return (d.to_string(), false, url.port());
            }
            Some(Host::Ipv4(_)) | Some(Host::Ipv6(_)) => {
                if let Some(h) = url.host_str() {
                    return (h.to_string(), true, url.port());
                }
            }
            None => {}
        }
    }
    let lower = trimmed.to_ascii_lowercase();
    let is_ip = lower.parse::<IpAddr>().is_ok();
    (lower, is_ip, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_names_and_addresses_pass_and_others_say_why() {
        for ok in [
            "example.org",
            "www.example.org:8080",
            "xn--caf-dma.example",
            "8.8.8.8",
            "[2001:4860::8888]",
        ] {
            assert_eq!(public_form(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("*.example.org", "wildcard"),
            ("localhost", "localhost"),
            ("a.localhost", "localhost"),
            ("intranet", "single label"),
            ("-x.example", "hyphen"),
            ("192.168.1.1", "private"),
            ("169.254.0.1", "link-local"),
            ("100.64.0.1", "private"),
            ("[fe80::1]", "link-local"),
            ("[fd00::1]:80", "private"),
            ("0.0.0.0", "loopback"),
        ] {
            let e = public_form(bad).expect_err(bad);
            assert!(e.contains(says) || e.contains("address"), "{bad}: {e}");
        }
        assert!(matches!(
            parse_site("javascript:alert(1)"),
            Err(ScopeError::UnsupportedScheme { .. })
        ));
        assert_eq!(
            parse_site("example.org:8080").as_deref(),
            Ok("example.org:8080")
        );
    }

    fn u(s: &str) -> Url {
        Url::parse(s).expect("test URL parses")
    }

    fn inside(site: &str, scope: Scope, url: &str) -> bool {
        SiteScope::new(site, scope).contains(&u(url))
    }

    #[test]
    fn scope_names_round_trip() {
        for scope in Scope::ALL {
            assert_eq!(scope.to_string().parse::<Scope>(), Ok(scope));
        }
        assert_eq!("HOST".parse::<Scope>(), Ok(Scope::Host));
        assert_eq!(" Subdomains ".parse::<Scope>(), Ok(Scope::Subdomains));
        assert_eq!(Scope::default(), Scope::Host);
    }

    #[test]
    fn unknown_scope_lists_valid_names() {
        let err = "site".parse::<Scope>().expect_err("not a scope");
        let msg = err.to_string();
        assert!(msg.contains("`site`"), "{msg}");
        for name in ["host", "subdomains", "domain"] {
            assert!(msg.contains(name), "{msg}");
        }
        assert!("".parse::<Scope>().is_err());
    }

    #[test]
    fn host_scope_is_exact_host() {
        let s = Scope::Host;
        assert!(inside("conformance.test", s, "http://conformance.test/x"));
        assert!(inside("conformance.test", s, "https://CONFORMANCE.test/x"));
        assert!(inside("conformance.test", s, "http://conformance.test./x"));
        assert!(!inside(
            "conformance.test",
            s,
            "http://sub.conformance.test/"
        ));
        assert!(!inside("conformance.test", s, "http://other.test/"));
        // `www.` and the bare host are the same site, and only they.
        assert_eq!(site_key("www.x.edu"), site_key("x.edu"));
        assert_eq!(site_key("www.x.edu:8080"), "x.edu:8080");
        assert_ne!(site_key("x.edu:8080"), site_key("x.edu"));
        assert_ne!(site_key("lib.x.edu"), site_key("x.edu"));
        assert_eq!(site_key("www.edu"), "www.edu");
        assert!(inside("www.x.edu", s, "http://x.edu/"));
        assert!(inside("x.edu", s, "http://WWW.x.edu/"));
        assert!(inside("www.x.edu", s, "http://www.x.edu./"));
        assert!(!inside("www.x.edu", s, "http://lib.x.edu/"));
        assert!(!inside("x.edu", s, "http://www.www.x.edu/"));
        assert!(!inside("x.edu", s, "http://wwwx.edu/"));
        assert!(!inside("www.edu", s, "http://edu/"));
    }

    #[test]
    fn site_host_is_normalised() {
        assert!(inside(
            "Conformance.TEST",
            Scope::Host,
            "http://conformance.test/"
        ));
        assert!(inside(
            "conformance.test:8080",
            Scope::Host,
            "http://conformance.test:8080/"
        ));
        assert!(inside(
            "bücher.test",
            Scope::Host,
            "http://xn--bcher-kva.test/"
        ));
        assert!(inside(
            "xn--bcher-kva.test",
            Scope::Host,
            "http://BÜCHER.test/"
        ));
        assert_eq!(
            SiteScope::new("WWW.Example.EDU:81", Scope::Host).site_host(),
            "www.example.edu"
        );
    }

    #[test]
    fn subdomains_scope() {
        let s = Scope::Subdomains;
        assert!(inside("conformance.test", s, "http://conformance.test/"));
        assert!(inside(
            "conformance.test",
            s,
            "http://sub.conformance.test/p"
        ));
        assert!(inside(
            "conformance.test",
            s,
            "http://a.b.conformance.test/p"
        ));
        assert!(!inside(
            "conformance.test",
            s,
            "http://notconformance.test/q"
        ));
        assert!(!inside(
            "conformance.test",
            s,
            "http://conformance.test.evil/"
        ));
        // The site of `www.x.edu` is that of `x.edu`.
        assert!(inside("www.x.edu", s, "http://x.edu/"));
        assert!(inside("www.x.edu", s, "http://a.www.x.edu/"));
        assert!(inside("www.x.edu", s, "http://lib.x.edu/"));
        assert!(inside("x.edu", s, "http://www.x.edu/"));
        assert!(!inside("www.x.edu", s, "http://y.edu/"));
    }

    #[test]
    fn domain_scope_uses_public_suffix_list() {
        let s = Scope::Domain;
        assert!(inside("www.x.edu", s, "http://x.edu/"));
        assert!(inside("x.edu", s, "http://www.x.edu/"));
        assert!(inside("www.x.edu", s, "http://lib.x.edu/"));
        assert!(!inside("www.x.edu", s, "http://y.edu/"));
        assert!(!inside("www.x.edu", s, "http://edu/"));
        assert!(inside("www.bbc.co.uk", s, "http://news.bbc.co.uk/"));
        assert!(!inside("www.bbc.co.uk", s, "http://itv.co.uk/"));
        // github.io is a (private) public suffix: each user is its own site.
        assert!(inside("alice.github.io", s, "http://alice.github.io/"));
        assert!(!inside("alice.github.io", s, "http://bob.github.io/"));
        // s3.amazonaws.com is a public suffix below amazonaws.com.
        assert!(!inside(
            "www.amazonaws.com",
            s,
            "http://bucket.s3.amazonaws.com/"
        ));
        assert!(inside("www.amazonaws.com", s, "http://aws.amazonaws.com/"));
        // IDN top-level domain, known to the list.
        assert!(!inside("www.xn--fiqs8s", s, "http://xn--fiqs8s/"));
        assert!(inside(
            "www.example.xn--fiqs8s",
            s,
            "http://a.example.xn--fiqs8s/"
        ));
    }

    #[test]
    fn domain_scope_falls_back_without_registrable_domain() {
        let s = Scope::Domain;
        // Unknown TLD: host and subdomains, `www.` removed.
        assert!(inside(
            "www.conformance.test",
            s,
            "http://conformance.test/"
        ));
        assert!(inside(
            "www.conformance.test",
            s,
            "http://sub.conformance.test/"
        ));
        assert!(inside(
            "conformance.test",
            s,
            "http://sub.conformance.test/"
        ));
        assert!(!inside(
            "a.conformance.test",
            s,
            "http://b.conformance.test/"
        ));
        assert!(!inside(
            "conformance.test",
            s,
            "http://notconformance.test/"
        ));
        // Single label.
        assert!(inside("localhost", s, "http://localhost/"));
        assert!(inside("localhost", s, "http://a.localhost/"));
        assert!(!inside("localhost", s, "http://otherhost/"));
        // A public suffix as a site.
        assert!(inside("github.io", s, "http://alice.github.io/"));
    }

    #[test]
    fn ip_sites_match_only_themselves() {
        for scope in Scope::ALL {
            assert!(inside("127.0.0.1", scope, "http://127.0.0.1:80/"));
            assert!(inside("127.0.0.1:8080", scope, "http://127.1:8080/"));
            assert!(!inside("127.0.0.1", scope, "http://0.1/"));
            assert!(!inside("127.0.0.1", scope, "http://127.0.0.2/"));
            assert!(inside("[::1]", scope, "http://[::1]/"));
            assert!(inside("[::1]:8080", scope, "http://[0:0::1]:8080/"));
            assert!(!inside("[::1]", scope, "http://[::2]/"));
        }
    }

    #[test]
    fn another_port_of_the_same_host_is_outside() {
        for scope in Scope::ALL {
            // Without an explicit port: the scheme's default port only.
            assert!(inside("x.edu", scope, "http://x.edu/"));
            assert!(inside("x.edu", scope, "http://x.edu:80/"));
            assert!(inside("x.edu", scope, "https://x.edu:443/"));
            assert!(!inside("x.edu", scope, "http://x.edu:8080/"));
            assert!(!inside("x.edu", scope, "https://x.edu:8443/"));
            assert!(!inside("x.edu", scope, "http://x.edu:443/"));
            assert!(!inside("x.edu", scope, "https://www.x.edu:22/"));
            assert!(!inside("127.0.0.1", scope, "http://127.0.0.1:8080/"));
            assert!(!inside("[::1]", scope, "http://[::1]:9/"));
            // With one: that port only, whatever the scheme.
            assert!(inside("x.edu:8080", scope, "http://x.edu:8080/a"));
            assert!(inside("x.edu:8080", scope, "https://x.edu:8080/a"));
            assert!(!inside("x.edu:8080", scope, "http://x.edu/"));
            assert!(!inside("x.edu:8080", scope, "http://x.edu:8081/"));
            assert!(!inside("127.0.0.1:8080", scope, "http://127.0.0.1/"));
            // A site named with https's port holds https's default URLs.
            assert!(inside("x.edu:443", scope, "https://x.edu/"));
            assert!(!inside("x.edu:443", scope, "http://x.edu/"));
        }
        // The port of a site as `parse_site` gives it.
        let site = parse_site("https://x.edu:8443/").expect("valid site");
        assert_eq!(SiteScope::new(&site, Scope::Host).port(), Some(8443));
        assert_eq!(SiteScope::new("x.edu:80", Scope::Host).port(), None);
        assert!(inside(&site, Scope::Host, "https://x.edu:8443/"));
        assert!(!inside(&site, Scope::Host, "https://x.edu/"));
    }

    #[test]
    fn urls_without_host_are_outside() {
        let scope = SiteScope::new("x.edu", Scope::Domain);
        assert!(!scope.contains(&u("mailto:a@x.edu")));
        assert!(!scope.contains(&u("data:text/plain,x.edu")));
    }

    #[test]
    fn canonical_url_drops_fragment_only() {
        let c = |s: &str| canonical_url(&u(s)).to_string();
        assert_eq!(c("http://x.test/a#frag"), "http://x.test/a");
        assert_eq!(c("http://x.test/a?q=1#"), "http://x.test/a?q=1");
        assert_eq!(
            c("HTTP://X.Test:80/A/./b/../C?Q=V"),
            "http://x.test/A/C?Q=V"
        );
        assert_eq!(c("https://x.test:443/"), "https://x.test/");
        assert_eq!(c("https://x.test:8443/"), "https://x.test:8443/");
        assert_eq!(c("http://bücher.test/k"), "http://xn--bcher-kva.test/k");
        assert_eq!(c("http://x.test"), "http://x.test/");
        assert_eq!(c("http://x.test/a b"), "http://x.test/a%20b");
    }

    #[test]
    fn parse_site_accepts_hosts_and_urls() {
        let p = |s: &str| parse_site(s).expect("valid site");
        assert_eq!(p("www.example.edu"), "www.example.edu");
        assert_eq!(p("https://www.Example.edu/path?q#f"), "www.example.edu");
        assert_eq!(p("HTTP://WWW.EXAMPLE.EDU"), "www.example.edu");
        assert_eq!(p("example.edu:8080"), "example.edu:8080");
        assert_eq!(p("http://example.edu:80/"), "example.edu");
        assert_eq!(p("https://example.edu:443/"), "example.edu");
        assert_eq!(p("https://example.edu:8443/"), "example.edu:8443");
        assert_eq!(p("  example.edu \r"), "example.edu");
        assert_eq!(p("example.edu."), "example.edu");
        assert_eq!(p("bücher.test"), "xn--bcher-kva.test");
        assert_eq!(p("127.0.0.1:8080"), "127.0.0.1:8080");
        assert_eq!(p("[::1]"), "[::1]");
        assert_eq!(p("localhost"), "localhost");
    }

    #[test]
    fn parse_site_refuses_bad_input() {
        use ScopeError::*;
        assert_eq!(parse_site(""), Err(Empty));
        assert_eq!(parse_site(" \t "), Err(Empty));
        assert!(matches!(parse_site("www.example .edu"), Err(Whitespace(_))));
        assert!(matches!(parse_site("a\u{0}b"), Err(Whitespace(_))));
        assert!(matches!(
            parse_site("ftp://example.edu/"),
            Err(UnsupportedScheme { .. })
        ));
        assert!(matches!(
            parse_site("javascript://example.edu/"),
            Err(UnsupportedScheme { .. })
        ));
        assert!(matches!(
            parse_site("http://u:p@example.edu/"),
            Err(Credentials(_))
        ));
        assert!(matches!(
            parse_site("user@example.edu"),
            Err(Credentials(_))
        ));
        assert!(matches!(
            parse_site("example.edu:99999"),
            Err(Invalid { .. })
        ));
        assert!(matches!(parse_site("example.edu:0"), Err(Invalid { .. })));
        assert!(matches!(parse_site("exa<mple.edu"), Err(Invalid { .. })));
        assert!(matches!(parse_site("http://"), Err(Invalid { .. })));
        assert!(matches!(parse_site("a..b"), Err(Invalid { .. })));
        assert!(matches!(parse_site("."), Err(Invalid { .. })));
        let long_host = format!("{}.edu", vec!["a".repeat(60); 5].join("."));
        assert!(matches!(parse_site(&long_host), Err(HostTooLong { .. })));
        let huge = "a".repeat(MAX_URL_LEN + 1);
        assert!(matches!(parse_site(&huge), Err(TooLong { .. })));
        // Error messages say what is wrong.
        let msg = parse_site("ftp://x.edu").expect_err("ftp").to_string();
        assert!(msg.contains("ftp") && msg.contains("http"), "{msg}");
    }

    #[test]
    fn parse_site_max_host_len_is_inclusive() {
        let label = "a".repeat(63);
        let host = format!("{label}.{label}.{label}.{}", "b".repeat(61));
        assert_eq!(host.len(), MAX_HOST_LEN);
        assert_eq!(parse_site(&host).as_deref(), Ok(host.as_str()));
    }

    #[test]
    fn seed_url_is_http_root() {
        assert_eq!(
            seed_url("www.example.edu").as_str(),
            "http://www.example.edu/"
        );
        assert_eq!(
            seed_url("example.edu:8080").as_str(),
            "http://example.edu:8080/"
        );
        assert_eq!(seed_url("[::1]").as_str(), "http://[::1]/");
        assert_eq!(seed_url("not a host").as_str(), "http://invalid.invalid/");
        assert_eq!(seed_url("").as_str(), "http://invalid.invalid/");
        assert_eq!(seed_url("x.edu/path").as_str(), "http://invalid.invalid/");
        assert_eq!(seed_url("u@x.edu").as_str(), "http://invalid.invalid/");
        let site = parse_site("https://Bücher.test:81/x").expect("valid");
        assert_eq!(seed_url(&site).as_str(), "http://xn--bcher-kva.test:81/");
    }

    #[test]
    fn an_exclusion_covers_the_site_and_www_or_every_subdomain() {
        let e = Exclusion::parse("https://www.Example.edu:8080/x", false).expect("valid");
        assert_eq!(e.host, "example.edu");
        assert!(!e.subdomains);
        for covered in [
            "example.edu",
            "www.example.edu",
            "example.edu:8080",
            "EXAMPLE.edu.",
        ] {
            assert!(e.covers_host(covered), "{covered}");
        }
        for free in ["lab.example.edu", "example.org", "notexample.edu", "edu"] {
            assert!(!e.covers_host(free), "{free}");
        }
        assert!(e.covers_url(&u("http://www.example.edu:81/a")));
        assert!(!e.covers_url(&u("http://lab.example.edu/")));

        let dot = Exclusion::parse(".example.edu", false).expect("valid");
        let flag = Exclusion::parse("www.example.edu", true).expect("valid");
        assert_eq!(dot, flag);
        assert_eq!(dot.display(), ".example.edu");
        for covered in ["example.edu", "www.example.edu", "a.b.example.edu:8080"] {
            assert!(dot.covers_host(covered), "{covered}");
        }
        for free in ["badexample.edu", "example.edu.org", "org"] {
            assert!(!dot.covers_host(free), "{free}");
        }
        assert!(Exclusion::parse("", false).is_err());
        assert!(Exclusion::parse("ftp://x.edu/", false).is_err());
        assert!(Exclusion::parse("..x.edu", false).is_err());
    }

    #[test]
    fn a_scope_root_holds_the_hosts_it_may_reach() {
        assert_eq!(SiteScope::new("www.x.test", Scope::Host).root(), None);
        assert_eq!(SiteScope::new("127.0.0.1", Scope::Domain).root(), None);
        assert_eq!(
            SiteScope::new("www.lab.x.test", Scope::Subdomains).root(),
            Some("lab.x.test")
        );
        assert_eq!(
            SiteScope::new("lab.example.co.uk", Scope::Domain).root(),
            Some("example.co.uk")
        );
        // No registrable domain (an unknown suffix): the site and its subdomains.
        assert_eq!(
            SiteScope::new("site0.synth.test", Scope::Domain).root(),
            Some("site0.synth.test")
        );
        assert_eq!(reversed_labels("www.x.edu"), "edu.x.www");
        // Names under a host share its reversed name and a dot; a sibling
        // may sort between them (`-` before `.`), so a range takes the prefix.
        let mut keys = ["x.edu", "a.x.edu", "x-y.edu", "b.a.x.edu"].map(reversed_labels);
        keys.sort();
        assert_eq!(keys, ["edu.x", "edu.x-y", "edu.x.a", "edu.x.a.b"]);
    }

    #[test]
    fn a_wider_site_covers_the_names_under_it_on_its_port_only() {
        let sc = |h: &str, scope| SiteScope::new(h, scope);
        let sub = Scope::Subdomains;
        assert!(sc("example.edu", sub).covers_site(&sc("cs.example.edu", sub)));
        assert!(sc("example.edu", sub).covers_site(&sc("a.b.example.edu", Scope::Host)));
        assert!(!sc("cs.example.edu", sub).covers_site(&sc("example.edu", sub)));
        assert!(!sc("example.edu", sub).covers_site(&sc("badexample.edu", sub)));
        assert!(!sc("example.edu", sub).covers_site(&sc("cs.example.edu:8080", sub)));
        assert!(!sc("example.edu", Scope::Host).covers_site(&sc("cs.example.edu", Scope::Host)));
        let dom = Scope::Domain;
        assert!(sc("cs.example.edu", dom).covers_site(&sc("lab.example.edu", dom)));
        assert!(!sc("example.edu", dom).covers_site(&sc("example.org", dom)));
    }
}
