//! The crawler's address policy: `--resolve` rules, the classification of IP
//! addresses, and the ureq resolver that applies both, so every request (redirect
//! hops included) goes only to public addresses unless private ones are allowed.
//! Through a proxy the resolver sees only the proxy, so [`ProxyGuard`] checks
//! each target before it is handed to the proxy.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use beebot_shared::limits::MAX_HOST_LEN;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;
use url::{Host, Url};

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
/// URL's port. `HOST=none` makes the name not resolve (as a name nobody
/// registered: a scan of it fails `dns-failed`), without asking any resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveRule {
    pattern: HostPattern,
    /// `None`: the name does not resolve.
    ip: Option<IpAddr>,
    port: Option<u16>,
}

/// The address of a `--resolve` rule that makes its name not resolve.
pub const UNRESOLVABLE: &str = "none";

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
            ip: Some(ip),
            port,
        })
    }

    /// A rule making `host` (or `*.suffix`) not resolve.
    pub fn unresolvable(host: &str) -> Result<ResolveRule, ResolveRuleError> {
        Ok(ResolveRule {
            pattern: parse_pattern(host)?,
            ip: None,
            port: None,
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

    /// The address to connect to for a URL whose port is `url_port`
    /// (`None`: the name does not resolve).
    pub fn socket_addr(&self, url_port: u16) -> Option<SocketAddr> {
        self.ip
            .map(|ip| SocketAddr::new(ip, self.port.unwrap_or(url_port)))
    }

    /// `None`: the name does not resolve.
    pub fn ip(&self) -> Option<IpAddr> {
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
        if addr.trim().eq_ignore_ascii_case(UNRESOLVABLE) {
            return ResolveRule::unresolvable(host.trim());
        }
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
            (None, _) => write!(f, "{UNRESOLVABLE}"),
            (Some(IpAddr::V6(ip)), Some(port)) => write!(f, "[{ip}]:{port}"),
            (Some(ip), Some(port)) => write!(f, "{ip}:{port}"),
            (Some(ip), None) => write!(f, "{ip}"),
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

/// How names without a `--resolve` rule are looked up on this machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Lookup {
    /// The system resolver (`getaddrinfo`).
    #[default]
    System,
    /// These names (lower case, no trailing dot) have these addresses, and no
    /// other name resolves: tests, so that no DNS query leaves the machine.
    Fixed(Vec<(String, Vec<IpAddr>)>),
}

impl Lookup {
    /// The fixed addresses of `host`, for [`Lookup::Fixed`] (empty when it
    /// does not list the name); `None` for the system resolver.
    fn fixed(&self, host: &str) -> Option<Vec<IpAddr>> {
        match self {
            Lookup::System => None,
            // An IP address is itself, as with the system resolver.
            Lookup::Fixed(_) if host.parse::<IpAddr>().is_ok() => {
                host.parse::<IpAddr>().ok().map(|ip| vec![ip])
            }
            Lookup::Fixed(table) => {
                let host = normalize_host(host);
                Some(
                    table
                        .iter()
                        .filter(|(name, _)| normalize_host(name) == host)
                        .flat_map(|(_, ips)| ips.iter().copied())
                        .collect(),
                )
            }
        }
    }

    /// The addresses `host` resolves to here, within `timeout`; empty when it
    /// does not resolve (no such name, no answer in time, a failing resolver).
    fn addresses(&self, host: &str, timeout: Duration) -> Vec<IpAddr> {
        if let Some(ips) = self.fixed(host) {
            return ips;
        }
        let name = host.to_string();
        let (tx, rx) = mpsc::sync_channel(1);
        // On a thread of its own, as ureq does: getaddrinfo has no timeout. A
        // lookup that outlives the timeout ends on its own, its answer dropped.
        let spawned = std::thread::Builder::new()
            .name("beebot-lookup".into())
            .spawn(move || {
                let _ = tx.send(system_addresses(&name));
            });
        match spawned {
            Ok(_) => rx.recv_timeout(timeout).unwrap_or_default(),
            Err(_) => system_addresses(host),
        }
    }
}

fn system_addresses(host: &str) -> Vec<IpAddr> {
    (host, 0u16)
        .to_socket_addrs()
        .map(|addrs| addrs.map(|a| a.ip()).collect())
        .unwrap_or_default()
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
    /// Replaces the system resolver when fixed (tests).
    lookup: Lookup,
    /// A host whose addresses are never filtered: the configured proxy.
    trusted_host: Option<String>,
}

impl GuardedResolver {
    pub(crate) fn new(rules: Vec<ResolveRule>, allow_private: bool) -> GuardedResolver {
        GuardedResolver {
            rules,
            allow_private,
            system: DefaultResolver::default(),
            lookup: Lookup::System,
            trusted_host: None,
        }
    }

    /// Look names without a rule up with `lookup`.
    pub(crate) fn with_lookup(mut self, lookup: Lookup) -> GuardedResolver {
        self.lookup = lookup;
        self
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
                addrs.push(rule.socket_addr(port).ok_or(ureq::Error::HostNotFound)?);
                addrs
            }
            None => match self.lookup.fixed(host) {
                None => self.system.resolve(uri, config, timeout)?,
                Some(ips) if ips.is_empty() => return Err(ureq::Error::HostNotFound),
                Some(ips) => {
                    let mut addrs = self.empty();
                    for ip in ips {
                        if addrs.try_push(SocketAddr::new(ip, port)).is_err() {
                            break;
                        }
                    }
                    addrs
                }
            },
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

/// Names whose decision one [`ProxyGuard`] keeps (a crawl asks about a few
/// hosts again and again; a wide scope touches at most `MAX_ROBOTS_HOSTS`):
/// past this the cache starts afresh, so its memory stays bounded whatever a
/// site links to.
const MAX_PROXY_GUARD_NAMES: usize = 1024;

/// The private-address guard of requests sent through a proxy. The proxy
/// resolves each target and connects to it, so [`GuardedResolver`] only ever
/// sees the proxy (trusted, even on a private address): every target is
/// checked here instead, before it is handed to the proxy, by
/// [`proxied_target`].
#[derive(Debug)]
pub(crate) struct ProxyGuard {
    rules: Vec<ResolveRule>,
    lookup: Lookup,
    /// Longest wait for the local lookup of one name.
    timeout: Duration,
    /// The decision per name (lower case, no trailing dot).
    decided: Mutex<HashMap<String, Result<(), AddressRefused>>>,
}

impl ProxyGuard {
    pub(crate) fn new(rules: Vec<ResolveRule>, lookup: Lookup, timeout: Duration) -> ProxyGuard {
        ProxyGuard {
            rules,
            lookup,
            timeout,
            decided: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `url` may be requested through the proxy.
    pub(crate) fn check(&self, url: &Url) -> Result<(), AddressRefused> {
        let Some(host) = url.host() else {
            return Ok(()); // no host, no request: ureq refuses the URL itself
        };
        let Host::Domain(name) = host else {
            return proxied_target(host, &self.rules, |_| Vec::new());
        };
        let key = normalize_host(name);
        let mut decided = self.decided.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(decision) = decided.get(&key) {
            return decision.clone();
        }
        let decision = proxied_target(host, &self.rules, |name| {
            self.lookup.addresses(name, self.timeout)
        });
        if decided.len() >= MAX_PROXY_GUARD_NAMES {
            decided.clear();
        }
        decided.insert(key, decision.clone());
        decision
    }
}

/// Whether a request for `host` may be handed to a proxy when private
/// addresses are not allowed, decided on what this machine knows:
/// - an IP address must be public (the `url` crate has already turned every
///   spelling of an IPv4 address, `0x7f.1` or `2130706433`, into its dotted
///   form, and IPv6 forms that carry an IPv4 address are classified by it);
/// - `localhost` and `*.localhost` are loopback (RFC 6761), whoever resolves them;
/// - a name with a `--resolve` rule must map to a public address;
/// - otherwise every address `resolve` finds for the name here must be public:
///   the proxy, not we, picks which one it connects to.
///
/// A name that does not resolve here (`resolve` finds nothing: no such name,
/// no answer in time, or no DNS beyond the proxy, as on some corporate
/// networks) goes to the proxy, which resolves it: refusing would stop every
/// crawl where only the proxy can resolve names. Such a name, and one whose
/// DNS answers the proxy differently than us, is kept off private addresses
/// only by the proxy's own policy.
pub(crate) fn proxied_target(
    host: Host<&str>,
    rules: &[ResolveRule],
    resolve: impl FnOnce(&str) -> Vec<IpAddr>,
) -> Result<(), AddressRefused> {
    let public = |ip: IpAddr| -> Result<(), AddressRefused> {
        let class = classify_address(ip);
        if class.is_public() {
            Ok(())
        } else {
            Err(AddressRefused {
                host: host.to_string(),
                ip,
                class,
            })
        }
    };
    let name = match host {
        Host::Ipv4(ip) => return public(IpAddr::V4(ip)),
        Host::Ipv6(ip) => return public(IpAddr::V6(ip)),
        Host::Domain(name) => name,
    };
    let normalized = normalize_host(name);
    if normalized == "localhost" || normalized.ends_with(".localhost") {
        return public(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    if let Some(rule) = rules.iter().find(|rule| rule.matches(name)) {
        // A name that does not resolve here goes to the proxy.
        return rule.ip().map_or(Ok(()), public);
    }
    resolve(&normalized).into_iter().try_for_each(public)
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
        assert_eq!(r.socket_addr(80), "127.0.0.1:8080".parse().ok());
        assert_eq!(r.to_string(), "example.org=127.0.0.1:8080");

        let r: ResolveRule = "*.synth.test=127.0.0.1:9000".parse().expect("rule");
        assert!(r.matches("site3.synth.test"));
        assert!(r.matches("a.b.synth.test"));
        assert!(!r.matches("synth.test"));
        assert!(!r.matches("xsynth.test"));
        assert_eq!(r.to_string(), "*.synth.test=127.0.0.1:9000");

        let r: ResolveRule = "a.test=10.0.0.1".parse().expect("rule");
        assert_eq!(r.port(), None);
        assert_eq!(r.socket_addr(8443), "10.0.0.1:8443".parse().ok());

        let r: ResolveRule = "v6.test=[::1]:8080".parse().expect("rule");
        assert_eq!(r.socket_addr(80), "[::1]:8080".parse().ok());
        assert_eq!(r.to_string(), "v6.test=[::1]:8080");
        let r: ResolveRule = "v6.test=[::1]".parse().expect("rule");
        assert_eq!(r.port(), None);
        let r: ResolveRule = "v6.test=fe80::1".parse().expect("rule");
        assert_eq!(r.ip(), "fe80::1".parse::<IpAddr>().ok());

        // `none`: the name does not resolve, whatever any resolver says.
        let r: ResolveRule = "gone.synth.test=none".parse().expect("rule");
        assert!(r.matches("gone.synth.test"));
        assert_eq!((r.ip(), r.socket_addr(80)), (None, None));
        assert_eq!(r.to_string(), "gone.synth.test=none");
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

    fn host_of(url: &str) -> Url {
        Url::parse(url).expect("test URL")
    }

    /// The proxy decision for `url`'s host with `rules`; names are looked up
    /// in `dns` (a name it does not list does not resolve).
    fn proxied(url: &str, rules: &[&str], dns: &[(&str, &[&str])]) -> Result<(), AddressRefused> {
        let rules: Vec<ResolveRule> = rules.iter().map(|r| r.parse().expect("rule")).collect();
        let url = host_of(url);
        let host = url.host().expect("host");
        let is_ip = !matches!(host, Host::Domain(_));
        proxied_target(host, &rules, |name| {
            assert!(!is_ip, "an IP address is never looked up");
            dns.iter()
                .filter(|(n, _)| *n == name)
                .flat_map(|(_, ips)| ips.iter().map(|ip| ip.parse::<IpAddr>().expect("ip")))
                .collect()
        })
    }

    fn refused_class(url: &str, rules: &[&str], dns: &[(&str, &[&str])]) -> AddressClass {
        match proxied(url, rules, dns) {
            Err(refused) => refused.class,
            Ok(()) => panic!("{url} was allowed through the proxy"),
        }
    }

    #[test]
    fn proxied_ip_literals_must_be_public() {
        use AddressClass::*;
        let cases = [
            ("http://127.0.0.1:8080/", Loopback),
            ("http://127.1/", Loopback),
            ("http://0x7f.0.0.1/", Loopback),
            ("http://0177.0.0.1/", Loopback),
            ("http://2130706433/", Loopback),
            ("http://0.0.0.0/", Unspecified),
            ("http://10.0.0.5/", Private),
            ("http://192.168.1.1/", Private),
            ("http://100.64.0.1/", Shared),
            ("http://169.254.169.254/latest/meta-data/", LinkLocal),
            ("http://224.0.0.1/", Multicast),
            ("http://255.255.255.255/", Broadcast),
            ("http://192.0.2.1/", Documentation),
            ("http://[::1]:8080/", Loopback),
            ("http://[::]/", Unspecified),
            ("http://[::ffff:127.0.0.1]/", Loopback),
            ("http://[::ffff:7f00:1]/", Loopback),
            ("http://[::ffff:10.0.0.5]/", Private),
            ("http://[::ffff:a9fe:a9fe]/", LinkLocal),
            ("http://[::127.0.0.1]/", Loopback),
            ("http://[64:ff9b::a9fe:a9fe]/", LinkLocal),
            ("http://[2002:7f00:1::1]/", Loopback),
            ("http://[fe80::1]/", LinkLocal),
            ("http://[fd00::5]/", Private),
            ("http://[ff02::1]/", Multicast),
        ];
        for (url, class) in cases {
            assert_eq!(refused_class(url, &[], &[]), class, "{url}");
        }
        let refused = proxied("http://[::ffff:127.0.0.1]:9/", &[], &[]).expect_err("refused");
        assert_eq!(
            refused.ip,
            "::ffff:127.0.0.1".parse::<IpAddr>().expect("ip")
        );
        assert_eq!(refused.host, "[::ffff:7f00:1]");
        // Public addresses go to the proxy (nothing is contacted here).
        for url in [
            "http://8.8.8.8/",
            "http://[2606:4700:4700::1111]/",
            "http://[::ffff:8.8.8.8]/",
        ] {
            assert_eq!(proxied(url, &[], &[]), Ok(()), "{url}");
        }
    }

    #[test]
    fn proxied_names_are_checked_on_their_rules_and_local_addresses() {
        use AddressClass::*;
        let rules = [
            "intranet.test=10.0.0.5",
            "*.corp.test=[fd00::1]:8080",
            "mapped.test=[::ffff:127.0.0.1]",
            "public.test=8.8.8.8",
        ];
        assert_eq!(refused_class("http://intranet.test/", &rules, &[]), Private);
        assert_eq!(
            refused_class("http://INTRANET.test./x", &rules, &[]),
            Private
        );
        assert_eq!(refused_class("http://db.corp.test/", &rules, &[]), Private);
        assert_eq!(refused_class("http://mapped.test/", &rules, &[]), Loopback);
        // A rule wins over what the name resolves to.
        let dns: &[(&str, &[&str])] = &[
            ("public.test", &["127.0.0.1"]),
            ("db.example", &["10.1.2.3"]),
            ("v6.example", &["::1"]),
            ("both.example", &["8.8.8.8", "192.168.0.10"]),
            ("site.example", &["8.8.8.8", "2606:4700:4700::1111"]),
        ];
        assert_eq!(proxied("http://public.test/", &rules, dns), Ok(()));
        // Without a rule, every local address of the name must be public.
        assert_eq!(refused_class("http://db.example/", &rules, dns), Private);
        assert_eq!(refused_class("http://v6.example/", &rules, dns), Loopback);
        assert_eq!(refused_class("http://both.example/", &rules, dns), Private);
        assert_eq!(proxied("http://site.example/", &rules, dns), Ok(()));
        // A name that does not resolve here goes to the proxy.
        assert_eq!(proxied("http://unknown.example/", &rules, dns), Ok(()));
        assert_eq!(proxied("http://corp.test/", &rules, dns), Ok(()));
        // localhost is loopback whatever resolves it (RFC 6761).
        for url in [
            "http://localhost/",
            "http://LOCALHOST.:8080/",
            "http://api.localhost/",
        ] {
            assert_eq!(refused_class(url, &rules, &[]), Loopback, "{url}");
        }
    }

    #[test]
    fn proxy_guard_looks_names_up_once_with_its_lookup() {
        let lookup = Lookup::Fixed(vec![
            ("db.example".into(), vec!["10.0.0.5".parse().expect("ip")]),
            ("WWW.Example.".into(), vec!["8.8.4.4".parse().expect("ip")]),
        ]);
        let rules = vec!["intranet.test=192.168.0.1:80".parse().expect("rule")];
        let guard = ProxyGuard::new(rules, lookup, Duration::from_secs(1));
        let refused = guard
            .check(&host_of("http://db.example/a"))
            .expect_err("private");
        assert_eq!(refused.class, AddressClass::Private);
        assert_eq!(refused.host, "db.example");
        assert!(guard.check(&host_of("http://db.example/b")).is_err());
        assert!(guard.check(&host_of("http://intranet.test/")).is_err());
        assert!(guard.check(&host_of("http://127.0.0.1:1/")).is_err());
        assert!(guard.check(&host_of("http://www.example/")).is_ok());
        assert!(guard.check(&host_of("http://nowhere.example/")).is_ok());
        let cached = guard.decided.lock().expect("lock");
        assert_eq!(cached.len(), 4, "one decision per name: {cached:?}");
    }

    #[test]
    fn a_fixed_lookup_replaces_the_system_resolver() {
        let lookup = Lookup::Fixed(vec![(
            "db.example".into(),
            vec!["10.0.0.5".parse().expect("ip")],
        )]);
        let config = Config::default();
        let guarded = GuardedResolver::new(Vec::new(), false).with_lookup(lookup.clone());
        let uri: Uri = "http://db.example:8080/".parse().expect("uri");
        match guarded.resolve(&uri, &config, NextTimeout::default()) {
            Err(ureq::Error::Other(e)) => {
                let refused = e.downcast_ref::<AddressRefused>().expect("AddressRefused");
                assert_eq!(refused.class, AddressClass::Private);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        let open = GuardedResolver::new(Vec::new(), true).with_lookup(lookup);
        let addrs = open
            .resolve(&uri, &config, NextTimeout::default())
            .expect("allowed");
        assert_eq!(addrs.to_vec(), vec!["10.0.0.5:8080".parse().expect("addr")]);
        // An IP address needs no lookup.
        let literal: Uri = "http://[::1]:9/".parse().expect("uri");
        let addrs = open
            .resolve(&literal, &config, NextTimeout::default())
            .expect("an address");
        assert_eq!(addrs.to_vec(), vec!["[::1]:9".parse().expect("addr")]);
        let unknown: Uri = "http://elsewhere.example/".parse().expect("uri");
        assert!(matches!(
            open.resolve(&unknown, &config, NextTimeout::default()),
            Err(ureq::Error::HostNotFound)
        ));
    }

    /// A `HOST=none` rule: the name is not found, with no resolver asked
    /// (the system one included), allowed private or not.
    #[test]
    fn an_unresolvable_rule_is_host_not_found() {
        let rules: Vec<ResolveRule> = vec!["*.gone.test=none".parse().expect("rule")];
        let config = Config::default();
        let uri: Uri = "http://www.gone.test/".parse().expect("uri");
        for allow_private in [false, true] {
            let r = GuardedResolver::new(rules.clone(), allow_private);
            assert!(matches!(
                r.resolve(&uri, &config, NextTimeout::default()),
                Err(ureq::Error::HostNotFound)
            ));
        }
    }
}
