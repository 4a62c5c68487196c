//! The crawler's address policy: `--resolve` rules, the classification of IP
//! addresses, and the ureq resolver that applies both, so every request (redirect
//! hops included) goes only to public addresses unless private ones are allowed.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use beebot_shared::limits::MAX_HOST_LEN;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// What kind of network an IP address belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Routable on the public internet.
    Public,
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918, IPv6 unique-local `fc00::/7`, deprecated site-local `fec0::/10`,
    /// local-use NAT64 `64:ff9b:1::/48`.
    Private,
    /// Carrier-grade NAT `100.64.0.0/10` (RFC 6598).
    Shared,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// Everything else that is not public unicast: IETF protocol assignments,
    /// benchmarking, the 6to4 relay anycast, `240.0.0.0/4`, discard-only
    /// `100::/64`, `2001::/23`, and IPv6 outside `2000::/3`.
    Reserved,
}

impl AddressClass {
    /// Whether a crawler may connect to such an address by default.
    pub fn is_public(self) -> bool {
        self == AddressClass::Public
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::Shared => "shared (CGNAT)",
            AddressClass::LinkLocal => "link-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Broadcast => "broadcast",
            AddressClass::Documentation => "documentation",
            AddressClass::Reserved => "reserved",
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// IPv4 ranges that are not public, checked in order (broadcast before `240/4`).
const V4_RANGES: &[(u32, u8, AddressClass)] = &[
    (0x0000_0000, 8, AddressClass::Unspecified), // 0.0.0.0/8
    (0x0A00_0000, 8, AddressClass::Private),     // 10.0.0.0/8
    (0x6440_0000, 10, AddressClass::Shared),     // 100.64.0.0/10
    (0x7F00_0000, 8, AddressClass::Loopback),    // 127.0.0.0/8
    (0xA9FE_0000, 16, AddressClass::LinkLocal),  // 169.254.0.0/16
    (0xAC10_0000, 12, AddressClass::Private),    // 172.16.0.0/12
    (0xC000_0000, 24, AddressClass::Reserved),   // 192.0.0.0/24
    (0xC000_0200, 24, AddressClass::Documentation), // 192.0.2.0/24
    (0xC058_6300, 24, AddressClass::Reserved),   // 192.88.99.0/24
    (0xC0A8_0000, 16, AddressClass::Private),    // 192.168.0.0/16
    (0xC612_0000, 15, AddressClass::Reserved),   // 198.18.0.0/15
    (0xC633_6400, 24, AddressClass::Documentation), // 198.51.100.0/24
    (0xCB00_7100, 24, AddressClass::Documentation), // 203.0.113.0/24
    (0xE000_0000, 4, AddressClass::Multicast),   // 224.0.0.0/4
    (0xFFFF_FFFF, 32, AddressClass::Broadcast),  // 255.255.255.255
    (0xF000_0000, 4, AddressClass::Reserved),    // 240.0.0.0/4
];

/// IPv6 ranges that are not public, checked in order after the embedded-IPv4 forms.
const V6_RANGES: &[(u128, u8, AddressClass)] = &[
    (0x0064_ff9b_0001_u128 << 80, 48, AddressClass::Private), // 64:ff9b:1::/48
    (0x0100_u128 << 112, 64, AddressClass::Reserved),         // 100::/64
    (0x2001_0db8_u128 << 96, 32, AddressClass::Documentation), // 2001:db8::/32
    (0x2001_u128 << 112, 23, AddressClass::Reserved),         // 2001::/23
    (0x3fff_u128 << 112, 20, AddressClass::Documentation),    // 3fff::/20
    (0xfc00_u128 << 112, 7, AddressClass::Private),           // fc00::/7
    (0xfe80_u128 << 112, 10, AddressClass::LinkLocal),        // fe80::/10
    (0xfec0_u128 << 112, 10, AddressClass::Private),          // fec0::/10
    (0xff00_u128 << 112, 8, AddressClass::Multicast),         // ff00::/8
];

/// Classify an address. IPv6 forms that embed an IPv4 address (mapped
/// `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
/// `2002::/16`) are classified by the IPv4 address they carry.
pub fn classify_address(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let bits = u32::from(ip);
    for &(net, len, class) in V4_RANGES {
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        if bits & mask == net {
            return class;
        }
    }
    AddressClass::Public
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let bits = u128::from(ip);
    if bits == 0 {
        return AddressClass::Unspecified;
    }
    if bits == 1 {
        return AddressClass::Loopback;
    }
    let low32 = Ipv4Addr::from((bits & 0xFFFF_FFFF) as u32);
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
    if bits >> 32 == 0xFFFF || bits >> 32 == 0 {
        return classify_v4(low32);
    }
    // 64:ff9b::/96, the well-known NAT64 prefix.
    if bits >> 32 == 0x0064_ff9b_u128 << 64 {
        return classify_v4(low32);
    }
    // 2002::/16, 6to4: the IPv4 address is bits 16..48.
    if bits >> 112 == 0x2002 {
        return classify_v4(Ipv4Addr::from(((bits >> 80) & 0xFFFF_FFFF) as u32));
    }
    for &(net, len, class) in V6_RANGES {
        let mask = u128::MAX << (128 - u32::from(len));
        if bits & mask == net {
            return class;
        }
    }
    // Only 2000::/3 is allocated as global unicast.
    if bits >> 125 == 0b001 {
        AddressClass::Public
    } else {
        AddressClass::Reserved
    }
}

/// Which hosts a [`ResolveRule`] applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    /// Exactly this host (lower case, no trailing dot).
    Exact(String),
    /// Any host ending in this suffix, which starts with a dot (`*.synth.test` →
    /// `.synth.test`): subdomains only, not the bare domain.
    Suffix(String),
}

/// A fixed address for a host, like curl's `--resolve`: `HOST=IP[:PORT]`, or
/// `*.SUFFIX=IP[:PORT]` for every subdomain of SUFFIX. IPv6 addresses are written
/// `[::1]:8080` (or bare `::1` without a port). A port, when given, replaces the
/// URL's port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveRule {
    pattern: HostPattern,
    ip: IpAddr,
    port: Option<u16>,
}

/// Why a `--resolve` rule did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveRuleError {
    #[error(
        "resolve rule {0:?} has no '=': write HOST=IP[:PORT], e.g. example.org=127.0.0.1:8080"
    )]
    MissingEquals(String),
    #[error("resolve rule {0:?} names no host")]
    EmptyHost(String),
    #[error("{0:?} is not a host name (letters, digits, '-' and '.', or *.suffix)")]
    InvalidHost(String),
    #[error("{0:?} is not an IP address (write IPv6 with a port as [::1]:8080)")]
    InvalidAddress(String),
    #[error("{0:?} is not a port number (1-65535)")]
    InvalidPort(String),
}

impl ResolveRule {
    /// A rule sending `host` (or `*.suffix`) to `ip`, and to `port` if given.
    pub fn new(host: &str, ip: IpAddr, port: Option<u16>) -> Result<ResolveRule, ResolveRuleError> {
        Ok(ResolveRule {
            pattern: parse_pattern(host)?,
            ip,
            port,
        })
    }

    /// Whether this rule applies to `host` (compared case-insensitively, trailing dot ignored).
    pub fn matches(&self, host: &str) -> bool {
        let host = normalize_host(host);
        match &self.pattern {
            HostPattern::Exact(h) => host == *h,
            HostPattern::Suffix(suffix) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
        }
    }

    /// The address to connect to for a URL whose port is `url_port`.
    pub fn socket_addr(&self, url_port: u16) -> SocketAddr {
        SocketAddr::new(self.ip, self.port.unwrap_or(url_port))
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl FromStr for ResolveRule {
    type Err = ResolveRuleError;

    fn from_str(s: &str) -> Result<ResolveRule, ResolveRuleError> {
        let s = s.trim();
        let (host, addr) = s
            .split_once('=')
            .ok_or_else(|| ResolveRuleError::MissingEquals(s.to_string()))?;
        let (ip, port) = parse_addr(addr.trim())?;
        ResolveRule::new(host.trim(), ip, port)
    }
}

impl fmt::Display for ResolveRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            HostPattern::Exact(h) => write!(f, "{h}=")?,
            HostPattern::Suffix(s) => write!(f, "*{s}=")?,
        }
        match (self.ip, self.port) {
            (IpAddr::V6(ip), Some(port)) => write!(f, "[{ip}]:{port}"),
            (ip, Some(port)) => write!(f, "{ip}:{port}"),
            (ip, None) => write!(f, "{ip}"),
        }
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn parse_pattern(host: &str) -> Result<HostPattern, ResolveRuleError> {
    if host.is_empty() {
        return Err(ResolveRuleError::EmptyHost(host.to_string()));
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    let name = normalize_host(name);
    let valid = !name.is_empty()
        && name.len() <= MAX_HOST_LEN
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid {
        return Err(ResolveRuleError::InvalidHost(host.to_string()));
    }
    Ok(if wildcard {
        HostPattern::Suffix(format!(".{name}"))
    } else {
        HostPattern::Exact(name)
    })
}

/// `IP`, `IPv4:PORT`, `[IPv6]`, `[IPv6]:PORT` or a bare IPv6 address.
fn parse_addr(s: &str) -> Result<(IpAddr, Option<u16>), ResolveRuleError> {
    let bad_addr = || ResolveRuleError::InvalidAddress(s.to_string());
    if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(bad_addr)?;
        let ip: Ipv6Addr = inside.parse().map_err(|_| bad_addr())?;
        let port = match after {
            "" => None,
            _ => Some(parse_port(after.strip_prefix(':').ok_or_else(bad_addr)?)?),
        };
        return Ok((IpAddr::V6(ip), port));
    }
    match s.matches(':').count() {
        0 => Ok((s.parse().map_err(|_| bad_addr())?, None)),
        1 => {
            let (ip, port) = s.split_once(':').ok_or_else(bad_addr)?;
            let ip: Ipv4Addr = ip.parse().map_err(|_| bad_addr())?;
            Ok((IpAddr::V4(ip), Some(parse_port(port)?)))
        }
        _ => Ok((IpAddr::V6(s.parse().map_err(|_| bad_addr())?), None)),
    }
}

fn parse_port(s: &str) -> Result<u16, ResolveRuleError> {
    match s.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(ResolveRuleError::InvalidPort(s.to_string())),
    }
}

/// A request refused because its host resolves only to addresses the crawler
/// may not contact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} resolves to {ip} ({class} address), which the crawler is not allowed to contact")]
pub struct AddressRefused {
    pub host: String,
    pub ip: IpAddr,
    pub class: AddressClass,
}

/// The ureq resolver of the crawler: `--resolve` rules first, else the system
/// resolver; then, unless private addresses are allowed, every non-public address
/// is dropped, and a host left with none is refused with [`AddressRefused`].
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    rules: Vec<ResolveRule>,
    allow_private: bool,
    system: DefaultResolver,
    /// A host whose addresses are never filtered: the configured proxy.
    trusted_host: Option<String>,
}

impl GuardedResolver {
    pub(crate) fn new(rules: Vec<ResolveRule>, allow_private: bool) -> GuardedResolver {
        GuardedResolver {
            rules,
            allow_private,
            system: DefaultResolver::default(),
            trusted_host: None,
        }
    }

    /// Trust `host` (the configured proxy): its addresses are not filtered.
    pub(crate) fn trusting(mut self, host: Option<String>) -> GuardedResolver {
        self.trusted_host = host.map(|h| h.to_ascii_lowercase());
        self
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri
            .host()
            .ok_or_else(|| ureq::Error::BadUri(format!("{uri} has no host")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = match (uri.port_u16(), uri.scheme_str()) {
            (Some(port), _) => port,
            (None, Some("http")) => 80,
            (None, Some("https")) => 443,
            _ => return Err(ureq::Error::BadUri(format!("{uri} has no port"))),
        };
        let candidates = match self.rules.iter().find(|rule| rule.matches(host)) {
            Some(rule) => {
                let mut addrs = self.empty();
                addrs.push(rule.socket_addr(port));
                addrs
            }
            None => self.system.resolve(uri, config, timeout)?,
        };
        if self.allow_private
            || self
                .trusted_host
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case(host))
        {
            return Ok(candidates);
        }
        let mut allowed = self.empty();
        let mut refused = None;
        for addr in candidates.iter() {
            let class = classify_address(addr.ip());
            if class.is_public() {
                // `candidates` holds at most as many addresses as `allowed` can.
                if allowed.try_push(*addr).is_err() {
                    break;
                }
            } else if refused.is_none() {
                refused = Some((addr.ip(), class));
            }
        }
        if !allowed.is_empty() {
            return Ok(allowed);
        }
        match refused {
            Some((ip, class)) => Err(ureq::Error::Other(Box::new(AddressRefused {
                host: host.to_string(),
                ip,
                class,
            }))),
            None => Err(ureq::Error::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host} resolves to no address"),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> AddressClass {
        classify_address(s.parse().expect("test address"))
    }

    #[test]
    fn classifies_ipv4() {
        assert_eq!(class("8.8.8.8"), AddressClass::Public);
        assert_eq!(class("93.184.216.34"), AddressClass::Public);
        assert_eq!(class("0.0.0.0"), AddressClass::Unspecified);
        assert_eq!(class("0.1.2.3"), AddressClass::Unspecified);
        assert_eq!(class("127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("127.255.255.254"), AddressClass::Loopback);
        assert_eq!(class("10.1.2.3"), AddressClass::Private);
        assert_eq!(class("172.16.0.1"), AddressClass::Private);
        assert_eq!(class("172.31.255.255"), AddressClass::Private);
        assert_eq!(class("172.32.0.1"), AddressClass::Public);
        assert_eq!(class("192.168.1.1"), AddressClass::Private);
        assert_eq!(class("100.64.0.1"), AddressClass::Shared);
        assert_eq!(class("100.127.255.255"), AddressClass::Shared);
        assert_eq!(class("100.128.0.1"), AddressClass::Public);
        assert_eq!(class("169.254.169.254"), AddressClass::LinkLocal);
        assert_eq!(class("224.0.0.1"), AddressClass::Multicast);
        assert_eq!(class("239.255.255.250"), AddressClass::Multicast);
        assert_eq!(class("255.255.255.255"), AddressClass::Broadcast);
        assert_eq!(class("240.0.0.1"), AddressClass::Reserved);
        assert_eq!(class("192.0.2.10"), AddressClass::Documentation);
        assert_eq!(class("198.51.100.7"), AddressClass::Documentation);
        assert_eq!(class("203.0.113.200"), AddressClass::Documentation);
        assert_eq!(class("198.18.0.1"), AddressClass::Reserved);
        assert_eq!(class("198.19.255.255"), AddressClass::Reserved);
        assert_eq!(class("198.20.0.1"), AddressClass::Public);
        assert_eq!(class("192.0.0.8"), AddressClass::Reserved);
    }

    #[test]
    fn classifies_ipv6() {
        assert_eq!(class("2606:4700:4700::1111"), AddressClass::Public);
        assert_eq!(class("::"), AddressClass::Unspecified);
        assert_eq!(class("::1"), AddressClass::Loopback);
        assert_eq!(class("fe80::1"), AddressClass::LinkLocal);
        assert_eq!(class("febf::1"), AddressClass::LinkLocal);
        assert_eq!(class("fec0::1"), AddressClass::Private);
        assert_eq!(class("fc00::1"), AddressClass::Private);
        assert_eq!(class("fd12:3456::1"), AddressClass::Private);
        assert_eq!(class("ff02::1"), AddressClass::Multicast);
        assert_eq!(class("2001:db8::1"), AddressClass::Documentation);
        assert_eq!(class("3fff::1"), AddressClass::Documentation);
        assert_eq!(class("100::1"), AddressClass::Reserved);
        assert_eq!(class("2001::1"), AddressClass::Reserved);
        assert_eq!(class("4000::1"), AddressClass::Reserved);
        assert_eq!(class("64:ff9b:1::1"), AddressClass::Private);
    }

    #[test]
    fn classifies_ipv4_embedded_in_ipv6() {
        assert_eq!(class("::ffff:127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("::ffff:10.0.0.1"), AddressClass::Private);
        assert_eq!(class("::ffff:8.8.8.8"), AddressClass::Public);
        assert_eq!(class("::127.0.0.1"), AddressClass::Loopback);
        assert_eq!(class("::192.168.0.1"), AddressClass::Private);
        assert_eq!(class("64:ff9b::169.254.1.1"), AddressClass::LinkLocal);
        assert_eq!(class("64:ff9b::8.8.4.4"), AddressClass::Public);
        assert_eq!(class("2002:7f00:1::"), AddressClass::Loopback);
        assert_eq!(class("2002:0a00:0001::1"), AddressClass::Private);
        assert_eq!(class("2002:0808:0808::1"), AddressClass::Public);
    }

    #[test]
    fn parses_resolve_rules() {
        let r: ResolveRule = "Example.ORG.=127.0.0.1:8080".parse().expect("rule");
        assert!(r.matches("example.org"));
        assert!(r.matches("EXAMPLE.org."));
        assert!(!r.matches("www.example.org"));
        assert_eq!(r.socket_addr(80), "127.0.0.1:8080".parse().expect("addr"));
        assert_eq!(r.to_string(), "example.org=127.0.0.1:8080");

        let r: ResolveRule = "*.synth.test=127.0.0.1:9000".parse().expect("rule");
        assert!(r.matches("site3.synth.test"));
        assert!(r.matches("a.b.synth.test"));
        assert!(!r.matches("synth.test"));
        assert!(!r.matches("xsynth.test"));
        assert_eq!(r.to_string(), "*.synth.test=127.0.0.1:9000");

        let r: ResolveRule = "a.test=10.0.0.1".parse().expect("rule");
        assert_eq!(r.port(), None);
        assert_eq!(r.socket_addr(8443), "10.0.0.1:8443".parse().expect("addr"));

        let r: ResolveRule = "v6.test=[::1]:8080".parse().expect("rule");
        assert_eq!(r.socket_addr(80), "[::1]:8080".parse().expect("addr"));
        assert_eq!(r.to_string(), "v6.test=[::1]:8080");
        let r: ResolveRule = "v6.test=[::1]".parse().expect("rule");
        assert_eq!(r.port(), None);
        let r: ResolveRule = "v6.test=fe80::1".parse().expect("rule");
        assert_eq!(r.ip(), "fe80::1".parse::<IpAddr>().expect("ip"));
    }

    #[test]
    fn rejects_bad_resolve_rules() {
        use ResolveRuleError::*;
        let err = |s: &str| s.parse::<ResolveRule>().expect_err(s);
        assert!(matches!(err("example.org:127.0.0.1"), MissingEquals(_)));
        assert!(matches!(err("=127.0.0.1"), EmptyHost(_)));
        assert!(matches!(err("exa mple.org=127.0.0.1"), InvalidHost(_)));
        assert!(matches!(err("*.=127.0.0.1"), InvalidHost(_)));
        assert!(matches!(err("a..b=127.0.0.1"), InvalidHost(_)));
        assert!(matches!(err("a.test/x=127.0.0.1"), InvalidHost(_)));
        assert!(matches!(err("a.test=localhost"), InvalidAddress(_)));
        assert!(matches!(err("a.test=256.0.0.1"), InvalidAddress(_)));
        assert!(matches!(err("a.test=[::1"), InvalidAddress(_)));
        assert!(matches!(err("a.test=[::1]8080"), InvalidAddress(_)));
        assert!(matches!(err("a.test=127.0.0.1:0"), InvalidPort(_)));
        assert!(matches!(err("a.test=127.0.0.1:99999"), InvalidPort(_)));
        assert!(matches!(err("a.test=127.0.0.1:"), InvalidPort(_)));
        assert!(err("a.test").to_string().contains("HOST=IP"));
    }

    #[test]
    fn resolver_refuses_private_addresses_unless_allowed() {
        let rules = vec!["*.synth.test=127.0.0.1:9".parse().expect("rule")];
        let uri: Uri = "http://site1.synth.test/x".parse().expect("uri");
        let config = Config::default();
        let guarded = GuardedResolver::new(rules.clone(), false);
        match guarded.resolve(&uri, &config, NextTimeout::default()) {
            Err(ureq::Error::Other(e)) => {
                let refused = e.downcast_ref::<AddressRefused>().expect("AddressRefused");
                assert_eq!(refused.class, AddressClass::Loopback);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let open = GuardedResolver::new(rules, true);
        let addrs = open
            .resolve(&uri, &config, NextTimeout::default())
            .expect("allowed");
        assert_eq!(addrs.to_vec(), vec!["127.0.0.1:9".parse().expect("addr")]);

        // An IP literal is checked too, and a rule-less host uses the system resolver.
        let literal: Uri = "http://[::ffff:192.168.1.1]:8080/".parse().expect("uri");
        assert!(GuardedResolver::new(Vec::new(), false)
            .resolve(&literal, &config, NextTimeout::default())
            .is_err());
    }
}
