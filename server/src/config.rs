//! The server's data dir: config file, keys, certificate, admin token, and the
//! runtime file that tells the CLI where the running server listens.
//!
//! ```text
//! DATA_DIR/config.toml   settings (documented in deploy/server.example.toml)
//! DATA_DIR/project.key   ed25519 project signing key, hex (0600)
//! DATA_DIR/cert.pem      TLS certificate; key.pem its private key (0600)
//! DATA_DIR/admin.token   admin API bearer token (0600)
//! DATA_DIR/store/        sled database
//! DATA_DIR/links/        link files and scan states, named ROUND/JOB-UNIT.lf
//!                        (.state), appended to links/ROUND/pack-NNNNNN.lfp
//! DATA_DIR/serve.json    addresses of the running server (written by `serve`)
//! ```
//!
//! Secrets (the project key, the TLS key, the admin token) are written 0600 and
//! refused when others can read them.

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

pub use crate::durations::{
    in_unit_of, DurationBounds, DurationError, CRAWL_DELAY, DEADLINE, DEADLINE_GRACE,
    INVITE_EXPIRY, REPEAT_PERIOD, REPORT_EVERY, SCAN_TIME, WAIT_TIMEOUT,
};
use crate::durations::{seconds, secs};
use crate::params::{round_defaults, RoundParams};
use crate::validate::{DEFAULT_SPOT_CHECK_PERCENT, DEFAULT_TRUST_AFTER};

/// `config.toml`. An unknown key is refused, naming the nearest known one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// UDP address the QUIC endpoint binds.
    pub listen: String,
    /// `host:port` clients use to reach the server (goes into invites). Port 0:
    /// the port `serve` actually bound.
    pub public_addr: String,
    /// TLS name of the server certificate.
    pub server_name: String,
    /// Admin HTTP API address: loopback only.
    pub admin_listen: String,
    /// How site owners reach whoever runs the crawler: an `http(s)://` URL or
    /// an e-mail address (`init --contact`). Shown on the about page; a round
    /// is refused while it is empty or [`PLACEHOLDER_CONTACT`].
    pub contact: String,
    /// Who runs the crawler (an organisation or a person), shown on the
    /// about page (`init --operator`).
    #[serde(default)]
    pub operator: String,
    /// The URL the User-Agent links to. Empty: the about page this server
    /// serves (`http://` + the public address's host + the reference site's
    /// port + `/about`), or the contact when the reference site is not served.
    #[serde(default)]
    pub about_url: String,
    /// URL of the reference site hosts benchmark against, sent to every host
    /// in `Welcome`. Empty: the one this server serves (`reference_listen`),
    /// at the public address's host and the bound port. Set it to point the
    /// project at another reference site.
    pub reference_site: String,
    /// TCP address the reference site's HTTP server binds; empty: not served
    /// here. `init` sets the QUIC listen IP and port 4481 (port 0 when QUIC's
    /// is 0).
    #[serde(default)]
    pub reference_listen: String,
    /// TCP address serving `GET /metrics` to Prometheus without the admin
    /// token; empty or `off`: not served (the admin address serves it with
    /// the token either way). `init` sets loopback port
    /// [`DEFAULT_METRICS_PORT`] (port 0 when the admin port is 0); another
    /// address is the admin's explicit choice, warned about when served.
    #[serde(default)]
    pub metrics_listen: String,
    /// Validate every client's address with a QUIC Retry (one round trip
    /// more per connection). Off: only under a flood of handshakes.
    #[serde(default)]
    pub quic_retry: bool,
    /// Deadline = issue + expected × slack + grace, within the round's
    /// bounds (`[round]`'s `deadline_min_s` and `deadline_max_s`); the slack
    /// is a number from 1 to 100.
    pub deadline_slack: f64,
    /// The grace of a deadline (see `deadline_slack`), seconds.
    #[serde(deserialize_with = "seconds")]
    pub deadline_grace_s: u64,
    /// `[round]`: any of [`crate::params::RoundOverrides`]' keys.
    #[serde(default, deserialize_with = "round_defaults")]
    pub round: RoundParams,
    #[serde(default)]
    pub validation: ValidationConfig,
}

/// `[validation]`: when a host is trusted, and how often a trusted host's
/// results are still checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ValidationConfig {
    /// Consecutive valid results after which a host is trusted.
    pub trust_after: u32,
    /// Share of a trusted host's results still checked (spot checks), percent.
    pub spot_check_percent: u32,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        ValidationConfig {
            trust_after: DEFAULT_TRUST_AFTER,
            spot_check_percent: DEFAULT_SPOT_CHECK_PERCENT,
        }
    }
}

impl ServerConfig {
    pub fn new(public_addr: &str, listen: &str, admin_listen: &str) -> ServerConfig {
        let server_name = public_addr
            .rsplit_once(':')
            .map(|(h, _)| h.trim_matches(['[', ']']).to_string())
            .unwrap_or_else(|| "localhost".into());
        ServerConfig {
            listen: listen.into(),
            public_addr: public_addr.into(),
            server_name,
            admin_listen: admin_listen.into(),
            contact: PLACEHOLDER_CONTACT.into(),
            operator: String::new(),
            about_url: String::new(),
            reference_site: String::new(),
            reference_listen: String::new(),
            metrics_listen: String::new(),
            quic_retry: false,
            deadline_slack: 3.0,
            deadline_grace_s: 60,
            round: RoundParams::default(),
            validation: ValidationConfig::default(),
        }
    }

    /// The User-Agent the crawlers send: `BeeBot/<version> (+ABOUT)`, ABOUT
    /// from [`ServerConfig::about_link`].
    pub fn user_agent(&self, about_link: &str) -> String {
        format!("BeeBot/{} (+{about_link})", env!("CARGO_PKG_VERSION"))
    }

    /// What the User-Agent links to: `about_url` when set, else the about
    /// page served beside the reference site (`reference_bound`) at the
    /// public address's host, else the contact.
    pub fn about_link(&self, public_addr: &str, reference_bound: Option<SocketAddr>) -> String {
        if !self.about_url.trim().is_empty() {
            return self.about_url.trim().to_string();
        }
        match reference_bound {
            Some(bound) => format!("http://{}:{}/about", public_host(public_addr), bound.port()),
            None => self.contact.trim().to_string(),
        }
    }

    /// Why the contact cannot go out with a round (`None`: it can).
    pub fn contact_problem(&self) -> Option<ContactError> {
        check_contact(&self.contact).err()
    }
}

/// The contact `ServerConfig::new` writes until the admin gives one: a round
/// is refused while the config holds it.
pub const PLACEHOLDER_CONTACT: &str = "https://example.invalid/beebot";
/// Longest contact accepted (a URL or an e-mail address), in characters.
pub const MAX_CONTACT_CHARS: usize = 256;
/// Longest operator name accepted, in characters.
pub const MAX_OPERATOR_CHARS: usize = 200;

/// Why a contact was refused. Each message says what a contact must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContactError {
    #[error("the operator contact is empty: give a web page (https://...) or an e-mail address where site owners can reach whoever runs this crawler")]
    Empty,
    #[error("the operator contact is still the placeholder `{PLACEHOLDER_CONTACT}`: give a web page (https://...) or an e-mail address where site owners can reach whoever runs this crawler")]
    Placeholder,
    #[error("the operator contact is longer than {MAX_CONTACT_CHARS} characters")]
    TooLong,
    #[error("`{0}` is not an http:// or https:// URL with a host")]
    NotHttpUrl(String),
    #[error("`{0}` is not an e-mail address (name@domain.example)")]
    NotEmail(String),
    #[error("`{0}` is neither a URL (https://...) nor an e-mail address (name@domain.example)")]
    Neither(String),
    #[error("no operator contact given: pass --contact URL|EMAIL")]
    NotGiven,
    #[error("the operator name is longer than {MAX_OPERATOR_CHARS} characters")]
    OperatorTooLong,
    #[error("the operator name holds a control character")]
    OperatorControl,
}

/// Check an operator contact: an `http://`/`https://` URL with a host, or
/// an e-mail address; returns it trimmed.
pub fn check_contact(text: &str) -> Result<String, ContactError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(ContactError::Empty);
    }
    if t == PLACEHOLDER_CONTACT {
        return Err(ContactError::Placeholder);
    }
    if t.chars().count() > MAX_CONTACT_CHARS {
        return Err(ContactError::TooLong);
    }
    let shown = || t.to_string();
    if t.contains("://") {
        let ok = url::Url::parse(t).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty())
                && !t.chars().any(char::is_whitespace)
        });
        return if ok {
            Ok(t.to_string())
        } else {
            Err(ContactError::NotHttpUrl(shown()))
        };
    }
    if t.contains('@') {
        let addr = t.strip_prefix("mailto:").unwrap_or(t);
        let ok = addr.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !domain.contains("..")
                && addr
                    .chars()
                    .all(|c| c.is_alphanumeric() || "@.!#$%&'*+/=?^_`{|}~-".contains(c))
        });
        return if ok {
            Ok(addr.to_string())
        } else {
            Err(ContactError::NotEmail(shown()))
        };
    }
    Err(ContactError::Neither(shown()))
}

/// Times `init` asks for a contact on a terminal before giving up.
pub const CONTACT_PROMPT_ATTEMPTS: u32 = 3;

/// Ask for a contact on `prompt`, reading answers from `input`, until one
/// passes [`check_contact`] ([`CONTACT_PROMPT_ATTEMPTS`] at most; each
/// refusal is said). `init` does this on a terminal.
pub fn ask_contact(
    mut input: impl std::io::BufRead,
    mut prompt: impl Write,
) -> Result<String, ContactError> {
    let _ = writeln!(
        prompt,
        "Site owners must be able to reach whoever runs this crawler. The contact \
         (a web page https://... or an e-mail address) is shown on the about page the \
         User-Agent links to."
    );
    let mut last = ContactError::NotGiven;
    for _ in 0..CONTACT_PROMPT_ATTEMPTS {
        let _ = write!(prompt, "contact: ");
        let _ = prompt.flush();
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        match check_contact(&line) {
            Ok(c) => return Ok(c),
            Err(e) => {
                let _ = writeln!(prompt, "{e}");
                last = e;
            }
        }
    }
    Err(last)
}

/// Check an operator name (`init --operator`): returns it trimmed.
pub fn check_operator(text: &str) -> Result<String, ContactError> {
    let t = text.trim();
    if t.chars().count() > MAX_OPERATOR_CHARS {
        return Err(ContactError::OperatorTooLong);
    }
    if t.chars().any(char::is_control) {
        return Err(ContactError::OperatorControl);
    }
    Ok(t.to_string())
}

/// The host of a `host:port` address (brackets of an IPv6 address kept).
fn public_host(public_addr: &str) -> &str {
    public_addr
        .rsplit_once(':')
        .map_or(public_addr, |(host, _)| host)
}

/// Port of the reference site's HTTP server unless `init` is told otherwise.
pub const DEFAULT_REFERENCE_PORT: u16 = 4481;

/// Port of `metrics_listen` unless `init` is told otherwise (Prometheus'
/// registry of exporter ports does not list it taken by a common exporter).
pub const DEFAULT_METRICS_PORT: u16 = 9464;

/// `metrics_listen` for an admin address: the same (loopback) IP on
/// [`DEFAULT_METRICS_PORT`], or a free port when that one is taken now, or
/// port 0 when the admin port is 0.
pub fn default_metrics_listen(admin_listen: &str) -> String {
    match admin_listen.parse::<SocketAddr>() {
        Ok(addr) if addr.port() == 0 => SocketAddr::new(addr.ip(), 0).to_string(),
        Ok(addr) => default_or_free(SocketAddr::new(addr.ip(), DEFAULT_METRICS_PORT)),
        Err(_) => String::new(),
    }
}

/// The address `metrics_listen` names; `None` when it is empty or `off`.
pub fn metrics_addr(listen: &str) -> Result<Option<SocketAddr>> {
    match listen.trim() {
        "" | "off" => Ok(None),
        addr => addr.parse().map(Some).with_context(|| {
            format!("metrics_listen `{addr}` is not ADDR:PORT (or empty, or `off`)")
        }),
    }
}

/// `wanted` when it can be bound now; else any free port of its IP (or
/// `wanted` as it is, when the IP is not this machine's).
fn default_or_free(wanted: SocketAddr) -> String {
    if std::net::TcpListener::bind(wanted).is_ok() {
        return wanted.to_string();
    }
    std::net::TcpListener::bind(SocketAddr::new(wanted.ip(), 0))
        .and_then(|l| l.local_addr())
        .unwrap_or(wanted)
        .to_string()
}

/// The reference site's address for a QUIC `listen` address: the same IP on
/// [`DEFAULT_REFERENCE_PORT`], or port 0 (any) when QUIC's port is 0. When
/// the default port is taken now (another server on this machine), a free
/// port the system picks instead; `init` says which.
pub fn default_reference_listen(listen: &str) -> String {
    match listen.parse::<SocketAddr>() {
        Ok(addr) if addr.port() == 0 => SocketAddr::new(addr.ip(), 0).to_string(),
        Ok(addr) => default_or_free(SocketAddr::new(addr.ip(), DEFAULT_REFERENCE_PORT)),
        Err(_) => String::new(),
    }
}

/// The URL hosts are told for the reference site: `configured` when set,
/// else `http://` + the public address's host + `bound`'s port.
pub fn reference_url(configured: &str, public_addr: &str, bound: Option<SocketAddr>) -> String {
    if !configured.trim().is_empty() {
        return configured.trim().to_string();
    }
    let Some(bound) = bound else {
        return String::new();
    };
    let host = public_addr
        .rsplit_once(':')
        .map_or(public_addr, |(host, _)| host);
    format!("http://{host}:{}/", bound.port())
}

/// Where the running server listens (`serve.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Runtime {
    pub quic_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// The reference site's HTTP address, when this server serves it.
    #[serde(default)]
    pub reference_addr: Option<SocketAddr>,
    /// The `metrics_listen` address, when this server serves it.
    #[serde(default)]
    pub metrics_addr: Option<SocketAddr>,
    pub public_addr: String,
    pub pid: u32,
}

/// Paths inside a data dir.
#[derive(Clone, Debug)]
pub struct DataDir(pub PathBuf);

impl DataDir {
    pub fn config(&self) -> PathBuf {
        self.0.join("config.toml")
    }
    pub fn project_key(&self) -> PathBuf {
        self.0.join("project.key")
    }
    pub fn cert(&self) -> PathBuf {
        self.0.join("cert.pem")
    }
    pub fn cert_key(&self) -> PathBuf {
        self.0.join("key.pem")
    }
    pub fn admin_token(&self) -> PathBuf {
        self.0.join("admin.token")
    }
    pub fn store(&self) -> PathBuf {
        self.0.join("store")
    }
    pub fn links(&self) -> PathBuf {
        self.0.join("links")
    }
    pub fn runtime(&self) -> PathBuf {
        self.0.join("serve.json")
    }

    pub fn load_config(&self) -> Result<ServerConfig> {
        let text = fs::read_to_string(self.config()).map_err(|e| self.unreadable(e))?;
        parse_config(&text).map_err(|e| anyhow::anyhow!("{}: {e}", self.config().display()))
    }

    /// Why the config cannot be read, and what to do: never only "run
    /// init", which beside an existing server would make a second one.
    fn unreadable(&self, e: std::io::Error) -> anyhow::Error {
        let path = self.config();
        match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(
                "no server in {dir} ({path} is missing). If this machine runs a server, \
                 name its data dir with --data-dir DIR or BEEBOT_SERVER_DIR; to make a \
                 new one here, run `beebot-server init --data-dir {dir} --public-addr HOST:PORT` \
                 as the user the server will run as",
                dir = self.0.display(),
                path = path.display()
            ),
            std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
                "cannot read {}: permission denied. The data dir belongs to the user the \
                 server runs as; run the command as that user (packaged: \
                 `sudo -u beebot-server beebot-server ...`)",
                path.display()
            ),
            _ => anyhow::Error::new(e).context(format!("cannot read {}", path.display())),
        }
    }

    /// Write the config back (durably).
    pub fn save_config(&self, cfg: &ServerConfig) -> Result<()> {
        let text = toml::to_string_pretty(cfg).context("cannot encode config")?;
        // The admin's settings are the server user's alone, whatever the
        // umask of the process that saves them.
        beebot_shared::durable::write_private(&self.config(), text.as_bytes())
            .with_context(|| format!("cannot write {}", self.config().display()))
    }

    pub fn load_project_key(&self) -> Result<SigningKey> {
        check_private(&self.project_key())?;
        let text = fs::read_to_string(self.project_key())
            .with_context(|| format!("cannot read {}", self.project_key().display()))?;
        let bytes: [u8; 32] = hex::decode(text.trim())
            .ok()
            .and_then(|b| b.try_into().ok())
            .with_context(|| format!("{} is not a key", self.project_key().display()))?;
        Ok(SigningKey::from_bytes(&bytes))
    }

    pub fn load_admin_token(&self) -> Result<String> {
        check_private(&self.admin_token())?;
        Ok(fs::read_to_string(self.admin_token())
            .with_context(|| format!("cannot read {}", self.admin_token().display()))?
            .trim()
            .to_string())
    }

    pub fn load_runtime(&self) -> Option<Runtime> {
        let text = fs::read_to_string(self.runtime()).ok()?;
        serde_json::from_str(&text).ok()
    }
}

pub use beebot_shared::util::check_private;

/// Write a file readable by its owner only, durably (replaced whole).
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    beebot_shared::durable::write_private(path, data)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Options of `beebot-server init`.
pub struct InitOptions {
    pub public_addr: String,
    pub listen: String,
    pub admin_listen: String,
    /// Use these PEM files instead of a self-signed certificate.
    pub cert_pem: Option<PathBuf>,
    pub key_pem: Option<PathBuf>,
    /// The operator contact (checked by [`check_contact`]).
    pub contact: String,
    /// Who runs the crawler (checked by [`check_operator`]); may be empty.
    pub operator: String,
}

/// Check an admin address is on loopback.
pub fn check_admin_addr(addr: &str) -> Result<SocketAddr> {
    let sa: SocketAddr = addr
        .parse()
        .with_context(|| format!("admin address `{addr}` is not ADDR:PORT"))?;
    if !sa.ip().is_loopback() {
        bail!("admin address {addr} is not on loopback: the admin API listens on 127.0.0.1 or [::1] only");
    }
    Ok(sa)
}

/// Create a data dir: config, project key, certificate, admin token.
pub fn init(dir: &DataDir, opts: &InitOptions) -> Result<ServerConfig> {
    if dir.config().exists() {
        bail!(
            "{} already holds a server (config.toml exists); choose another --data-dir",
            dir.0.display()
        );
    }
    opts.listen
        .parse::<SocketAddr>()
        .with_context(|| format!("--listen `{}` is not ADDR:PORT", opts.listen))?;
    check_admin_addr(&opts.admin_listen)?;
    if !opts.public_addr.contains(':') {
        bail!("--public-addr `{}` is not HOST:PORT", opts.public_addr);
    }
    let contact = check_contact(&opts.contact).context("--contact")?;
    let operator = check_operator(&opts.operator).context("--operator")?;
    beebot_shared::util::create_private_dir(&dir.0)
        .with_context(|| format!("cannot create {}", dir.0.display()))?;
    let mut cfg = ServerConfig::new(&opts.public_addr, &opts.listen, &opts.admin_listen);
    cfg.reference_listen = default_reference_listen(&opts.listen);
    cfg.metrics_listen = default_metrics_listen(&opts.admin_listen);
    cfg.contact = contact;
    cfg.operator = operator;

    let key = beebot_shared::sign::generate_key();
    write_private(&dir.project_key(), hex::encode(key.to_bytes()).as_bytes())?;

    match (&opts.cert_pem, &opts.key_pem) {
        (Some(c), Some(k)) => {
            fs::copy(c, dir.cert()).with_context(|| format!("cannot copy {}", c.display()))?;
            let key_pem = fs::read(k).with_context(|| format!("cannot read {}", k.display()))?;
            write_private(&dir.cert_key(), &key_pem)?;
        }
        (None, None) => {
            let mut names = vec![cfg.server_name.clone()];
            if cfg.server_name != "localhost" {
                names.push("localhost".into());
            }
            let ck = rcgen::generate_simple_self_signed(names)
                .context("cannot make a self-signed certificate")?;
            fs::write(dir.cert(), ck.cert.pem())?;
            write_private(&dir.cert_key(), ck.key_pair.serialize_pem().as_bytes())?;
        }
        _ => bail!("--cert and --key go together"),
    }

    let token: [u8; 32] = rand::random();
    write_private(&dir.admin_token(), hex::encode(token).as_bytes())?;
    let text = toml::to_string_pretty(&cfg).context("cannot encode config")?;
    fs::write(dir.config(), text)?;
    Ok(cfg)
}

/// The config file's durations: within their bounds (its short ends
/// allowed, as with `--force`: the file is deliberate).
/// A config file's text, parsed and every key checked: the reason names
/// the key (an unknown one with the nearest known key).
pub fn parse_config(text: &str) -> Result<ServerConfig, String> {
    // `[round]`'s keys are checked here: its type is also the admin API's
    // body, flattened beside other fields, so it cannot refuse keys itself.
    if let Ok(doc) = toml::from_str::<toml::Table>(text) {
        if let Some(round) = doc.get("round").and_then(toml::Value::as_table) {
            if let Some(k) = round.keys().find(|k| !ROUND_KEYS.contains(&k.as_str())) {
                let known: Vec<String> = ROUND_KEYS.iter().map(|k| format!("`{k}`")).collect();
                return Err(format!(
                    "not valid: {}",
                    with_nearest_key(&format!(
                        "unknown field `{k}` in [round], expected one of {}",
                        known.join(", ")
                    ))
                ));
            }
        }
    }
    let cfg: ServerConfig = toml::from_str(text)
        .map_err(|e| format!("not valid: {}", with_nearest_key(&e.to_string())))?;
    check_config_durations(&cfg).map_err(|e| format!("not valid: {e}"))?;
    check_config_values(&cfg)?;
    let about = cfg.about_url.trim();
    // A URL (an e-mail address is no page to link to).
    if !about.is_empty() && (!about.contains("://") || check_contact(about).is_err()) {
        return Err(format!(
            "about_url `{about}` is not an http:// or https:// URL (leave it empty for the \
             about page this server serves)"
        ));
    }
    check_operator(&cfg.operator).map_err(|e| format!("operator: {e:#}"))?;
    if cfg.validation.spot_check_percent > crate::validate::MAX_SPOT_CHECK_PERCENT {
        return Err(format!(
            "validation.spot_check_percent is {}, at most {}",
            cfg.validation.spot_check_percent,
            crate::validate::MAX_SPOT_CHECK_PERCENT
        ));
    }
    Ok(cfg)
}

/// The keys of `[round]` ([`crate::params::RoundOverrides`]' fields).
pub const ROUND_KEYS: [&str; 12] = [
    "policy",
    "max_pages",
    "max_depth",
    "delay_ms",
    "scope",
    "max_page_bytes",
    "deadline_max_s",
    "deadline_min_s",
    "max_seconds",
    "max_attempts",
    "max_crawl_delay_ms",
    "validate",
];

/// Smallest and largest `deadline_slack`: a deadline is at least the
/// expected scan time, and at most a hundred times it.
pub const DEADLINE_SLACK: (f64, f64) = (1.0, 100.0);
/// Largest `validation.trust_after` (0 would trust every host at once:
/// validation silently off).
pub const MAX_TRUST_AFTER: u32 = 10_000;

/// Every value of `cfg` within its named bounds (the durations are
/// [`check_config_durations`]'s): the reason names the key.
pub fn check_config_values(cfg: &ServerConfig) -> Result<(), String> {
    let (lo, hi) = DEADLINE_SLACK;
    if !cfg.deadline_slack.is_finite() || !(lo..=hi).contains(&cfg.deadline_slack) {
        return Err(format!(
            "deadline_slack is {}, must be a number from {lo} to {hi}",
            cfg.deadline_slack
        ));
    }
    for (key, value) in [
        ("listen", &cfg.listen),
        ("public_addr", &cfg.public_addr),
        ("admin_listen", &cfg.admin_listen),
    ] {
        let ok = value
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !ok {
            return Err(format!("{key} is `{value}`, must be HOST:PORT"));
        }
    }
    if cfg.server_name.trim().is_empty() {
        return Err("server_name is empty: it must be the certificate's name".into());
    }
    let reference = cfg.reference_site.trim();
    if !reference.is_empty()
        && !reference.starts_with("http://")
        && !reference.starts_with("https://")
    {
        return Err(format!(
            "reference_site is `{reference}`, must be an http:// or https:// URL (or empty: this server's own)"
        ));
    }
    let trust = cfg.validation.trust_after;
    if !(1..=MAX_TRUST_AFTER).contains(&trust) {
        return Err(format!(
            "validation.trust_after is {trust}, must be from 1 to {MAX_TRUST_AFTER} \
             (to take results unchecked, set `[round] validate = \"off\"`)"
        ));
    }
    cfg.round
        .check_values(None)
        .map_err(|e| format!("[round]: {e}"))
}

/// A parse error of the config with the known key nearest an unknown one
/// named (`unknown field `deadline_slak`, expected one of …`).
fn with_nearest_key(message: &str) -> String {
    let Some(rest) = message.split("unknown field `").nth(1) else {
        return message.to_string();
    };
    let Some((unknown, known)) = rest.split_once('`') else {
        return message.to_string();
    };
    // `round start`'s flag names, written as keys.
    const FLAGS: [(&str, &str); 4] = [
        ("max_deadline", "deadline_max_s"),
        ("min_deadline", "deadline_min_s"),
        ("max_scan_time", "max_seconds"),
        ("max_crawl_delay", "max_crawl_delay_ms"),
    ];
    if let Some((_, key)) = FLAGS.iter().find(|(flag, _)| *flag == unknown) {
        return format!("unknown key `{unknown}` (did you mean `{key}`?): {message}");
    }
    let nearest = known
        .split('`')
        .skip(1)
        .step_by(2)
        .min_by_key(|k| edit_distance(unknown, k));
    match nearest {
        Some(k) if edit_distance(unknown, k) <= unknown.len().max(3) / 2 => {
            format!("unknown key `{unknown}` (did you mean `{k}`?): {message}")
        }
        _ => format!("unknown key `{unknown}`: {message}"),
    }
}

/// Levenshtein distance of two keys (short ASCII names).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (diag + usize::from(ca != *cb)).min(row[j] + 1).min(up + 1);
            diag = up;
        }
    }
    row[b.len()]
}

fn check_config_durations(cfg: &ServerConfig) -> Result<(), DurationError> {
    cfg.round.check_durations(None, true)?;
    DEADLINE_GRACE.check_value("deadline_grace_s", secs(cfg.deadline_grace_s), true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid config's text, as `init` writes it.
    fn valid_text() -> String {
        let mut cfg = ServerConfig::new("127.0.0.1:4433", "127.0.0.1:4433", "127.0.0.1:4480");
        cfg.contact = "mailto:crawl@example.org".into();
        toml::to_string_pretty(&cfg).expect("toml")
    }

    /// `valid_text()` with `key = value` set (in `[table]` when given).
    fn with(table: Option<&str>, key: &str, value: &str) -> String {
        let mut doc: toml::Table = toml::from_str(&valid_text()).expect("toml");
        let v: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .expect("value")
            .remove("v")
            .expect("v");
        let t = match table {
            Some(name) => doc
                .entry(name)
                .or_insert(toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .expect("a table"),
            None => &mut doc,
        };
        t.insert(key.into(), v);
        toml::to_string(&doc).expect("toml")
    }

    #[test]
    fn every_key_is_checked_and_an_unknown_one_names_the_nearest() {
        assert!(
            parse_config(&valid_text()).is_ok(),
            "{:?}",
            parse_config(&valid_text())
        );
        for (table, key, value, says) in [
            (None, "deadline_slack", "-1.0", "deadline_slack"),
            (None, "deadline_slack", "nan", "deadline_slack"),
            (None, "deadline_slack", "inf", "deadline_slack"),
            (None, "deadline_slack", "0.5", "deadline_slack"),
            (None, "deadline_grace_s", "\"400d\"", "deadline_grace_s"),
            (None, "public_addr", "\"\"", "public_addr"),
            (None, "public_addr", "\"example.org\"", "public_addr"),
            (None, "listen", "\"nowhere\"", "listen"),
            (None, "admin_listen", "\":99999\"", "admin_listen"),
            (None, "server_name", "\" \"", "server_name"),
            (None, "reference_site", "\"ftp://x\"", "reference_site"),
            (None, "about_url", "\"someone@example.org\"", "about_url"),
            (
                None,
                "operator",
                &format!("\"{}\"", "x".repeat(500)),
                "operator",
            ),
            (
                None,
                "deadline_slak",
                "3.0",
                "did you mean `deadline_slack`?",
            ),
            (None, "quic_retry", "\"yes\"", "quic_retry"),
            (Some("validation"), "trust_after", "0", "trust_after"),
            (Some("validation"), "trust_after", "1000000", "trust_after"),
            (
                Some("validation"),
                "spot_check_percent",
                "101",
                "spot_check_percent",
            ),
            (
                Some("validation"),
                "trust_afterr",
                "3",
                "did you mean `trust_after`?",
            ),
            (Some("round"), "max_page_bytes", "0", "max_page_bytes"),
            (
                Some("round"),
                "max_page_bytes",
                "1000000000",
                "max_page_bytes",
            ),
            (Some("round"), "max_pages", "0", "max pages"),
            (Some("round"), "delay_ms", "100000000", "delay"),
            (Some("round"), "max_attempts", "0", "max attempts"),
            (
                Some("round"),
                "policy",
                "\"fastest\"",
                "unknown variant `fastest`",
            ),
            (Some("round"), "max_deadline", "\"2d\"", "did you mean"),
            (Some("round"), "max_scan_time", "\"0s\"", "did you mean"),
            (Some("round"), "deadline_max_s", "\"90d\"", "deadline"),
            (Some("round"), "max_seconds", "\"30d\"", "max-scan-time"),
            (
                Some("round"),
                "validate",
                "\"sometimes\"",
                "unknown variant `sometimes`",
            ),
        ] {
            let text = with(table, key, value);
            let e = parse_config(&text).expect_err(&format!("{key} = {value} accepted"));
            assert!(
                e.to_lowercase().contains(&says.to_lowercase()),
                "{key} = {value}: {e}"
            );
        }
    }

    #[test]
    fn the_example_config_is_valid() {
        let example = include_str!("../../deploy/server.example.toml");
        let cfg = parse_config(example).expect("deploy/server.example.toml");
        assert_eq!(cfg.deadline_slack, 3.0);
    }

    #[test]
    fn round_keys_are_the_overrides_fields() {
        let o = crate::params::RoundOverrides {
            policy: Some(crate::scheduler::PolicyName::Adaptive),
            max_pages: Some(1),
            max_depth: Some(1),
            delay_ms: Some(1),
            scope: Some(beebot_shared::scope::Scope::Host),
            max_page_bytes: Some(1),
            deadline_max_s: Some(crate::durations::TypedDuration::of(
                std::time::Duration::from_secs(3600),
            )),
            deadline_min_s: Some(crate::durations::TypedDuration::of(
                std::time::Duration::from_secs(3600),
            )),
            max_seconds: Some(crate::durations::TypedDuration::of(
                std::time::Duration::from_secs(3600),
            )),
            max_attempts: Some(1),
            max_crawl_delay_ms: Some(crate::durations::TypedDuration::of(
                std::time::Duration::from_secs(1),
            )),
            validate: Some(crate::validate::ValidateMode::Off),
        };
        let v = serde_json::to_value(&o).expect("json");
        let mut keys: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = ROUND_KEYS.to_vec();
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want);
    }

    #[test]
    fn the_nearest_key_is_named_only_when_near() {
        let m = "unknown field `delay_mss`, expected one of `delay_ms`, `scope`";
        assert!(with_nearest_key(m).contains("did you mean `delay_ms`?"));
        let far = "unknown field `zzzzzzzz`, expected one of `delay_ms`, `scope`";
        assert!(!with_nearest_key(far).contains("did you mean"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(with_nearest_key("other error"), "other error");
    }

    #[test]
    fn a_taken_reference_port_gives_way_to_a_free_one() {
        // Held here (or taken by something else already): either way taken.
        let _held = std::net::TcpListener::bind(("127.0.0.1", DEFAULT_REFERENCE_PORT));
        let addr: SocketAddr = default_reference_listen("127.0.0.1:4433")
            .parse()
            .expect("an address");
        assert_eq!(addr.ip().to_string(), "127.0.0.1");
        assert_ne!(addr.port(), DEFAULT_REFERENCE_PORT);
        assert!(std::net::TcpListener::bind(addr).is_ok(), "{addr} is free");
        // QUIC on any port: the reference site on any port too.
        assert_eq!(default_reference_listen("127.0.0.1:0"), "127.0.0.1:0");
    }

    #[test]
    fn metrics_listen_defaults_to_loopback_and_may_be_off() {
        // The admin port picked by the system: the metrics port too.
        assert_eq!(default_metrics_listen("127.0.0.1:0"), "127.0.0.1:0");
        assert_eq!(default_metrics_listen("[::1]:0"), "[::1]:0");
        // Taken (held here, or by something else): a free loopback port.
        let _held = std::net::TcpListener::bind(("127.0.0.1", DEFAULT_METRICS_PORT));
        let addr: SocketAddr = default_metrics_listen("127.0.0.1:4480")
            .parse()
            .expect("an address");
        assert!(addr.ip().is_loopback());
        assert_ne!(addr.port(), DEFAULT_METRICS_PORT);
        for off in ["", "  ", "off"] {
            assert_eq!(metrics_addr(off).expect("off"), None, "{off:?}");
        }
        assert_eq!(
            metrics_addr("127.0.0.1:9464").expect("an address"),
            Some(SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)))
        );
        let e = metrics_addr("localhost").expect_err("no port");
        assert_eq!(
            e.to_string(),
            "metrics_listen `localhost` is not ADDR:PORT (or empty, or `off`)"
        );
    }
    use crate::durations::DAY;

    #[test]
    fn a_contact_is_an_http_url_or_an_email_address() {
        for ok in [
            "https://lab.example.edu/crawler",
            "http://grid.example.edu:8080/about?x=1",
            "  crawler@lab.example.edu ",
            "first.last+bot@uni.example.ac.uk",
        ] {
            assert_eq!(check_contact(ok).as_deref(), Ok(ok.trim()), "{ok}");
        }
        assert_eq!(
            check_contact("mailto:bot@lab.example.edu").as_deref(),
            Ok("bot@lab.example.edu")
        );
        assert_eq!(check_contact(""), Err(ContactError::Empty));
        assert_eq!(check_contact("  \t"), Err(ContactError::Empty));
        assert_eq!(
            check_contact(PLACEHOLDER_CONTACT),
            Err(ContactError::Placeholder)
        );
        for (bad, want) in [
            ("bad", ContactError::Neither("bad".into())),
            (
                "ftp://lab.example.edu/",
                ContactError::NotHttpUrl("ftp://lab.example.edu/".into()),
            ),
            ("https://", ContactError::NotHttpUrl("https://".into())),
            (
                "https://a b.example/",
                ContactError::NotHttpUrl("https://a b.example/".into()),
            ),
            (
                "bot@localhost",
                ContactError::NotEmail("bot@localhost".into()),
            ),
            (
                "@lab.example.edu",
                ContactError::NotEmail("@lab.example.edu".into()),
            ),
            (
                "a@b@c.example",
                ContactError::NotEmail("a@b@c.example".into()),
            ),
            (
                "bot@lab..example",
                ContactError::NotEmail("bot@lab..example".into()),
            ),
            (
                "b<o>t@lab.example",
                ContactError::NotEmail("b<o>t@lab.example".into()),
            ),
        ] {
            assert_eq!(check_contact(bad), Err(want), "{bad}");
        }
        let long = format!("https://lab.example.edu/{}", "x".repeat(MAX_CONTACT_CHARS));
        assert_eq!(check_contact(&long), Err(ContactError::TooLong));
        // The message says what a contact must be, in the words typed.
        assert_eq!(
            check_contact("bad").unwrap_err().to_string(),
            "`bad` is neither a URL (https://...) nor an e-mail address (name@domain.example)"
        );
    }

    #[test]
    fn init_asks_for_a_contact_until_one_will_do() {
        let mut said = Vec::new();
        let got = ask_contact(&b"\nbad\n  bot@lab.example.edu\n"[..], &mut said);
        assert_eq!(got.as_deref(), Ok("bot@lab.example.edu"));
        let said = String::from_utf8(said).expect("utf-8");
        assert_eq!(said.matches("contact: ").count(), 3, "{said}");
        assert!(said.contains("the operator contact is empty"), "{said}");
        assert!(said.contains("`bad` is neither a URL"), "{said}");
        // Refused every time: the last refusal; no answer at all: not given.
        let mut sink = Vec::new();
        assert_eq!(
            ask_contact(
                &b"a\nb\nftp://x.example/\nbot@lab.example.edu\n"[..],
                &mut sink
            ),
            Err(ContactError::NotHttpUrl("ftp://x.example/".into()))
        );
        assert_eq!(
            ask_contact(&b""[..], &mut sink),
            Err(ContactError::NotGiven)
        );
    }

    #[test]
    fn operator_names_are_bounded_text() {
        assert_eq!(check_operator("  Link Lab  ").as_deref(), Ok("Link Lab"));
        assert_eq!(check_operator("").as_deref(), Ok(""));
        assert_eq!(
            check_operator("a\u{7}b"),
            Err(ContactError::OperatorControl)
        );
        assert_eq!(
            check_operator(&"x".repeat(MAX_OPERATOR_CHARS + 1)),
            Err(ContactError::OperatorTooLong)
        );
    }

    #[test]
    fn the_user_agent_links_to_the_served_about_page_unless_told_otherwise() {
        let mut cfg = ServerConfig::new("grid.example.edu:4433", "0.0.0.0:4433", "127.0.0.1:4480");
        assert_eq!(cfg.contact_problem(), Some(ContactError::Placeholder));
        cfg.contact = "bot@lab.example.edu".into();
        assert_eq!(cfg.contact_problem(), None);
        let bound: SocketAddr = "0.0.0.0:4481".parse().expect("addr");
        let link = cfg.about_link("grid.example.edu:4433", Some(bound));
        assert_eq!(link, "http://grid.example.edu:4481/about");
        assert_eq!(
            cfg.user_agent(&link),
            format!(
                "BeeBot/{} (+http://grid.example.edu:4481/about)",
                env!("CARGO_PKG_VERSION")
            )
        );
        // Not served here: the contact.
        assert_eq!(
            cfg.about_link("grid.example.edu:4433", None),
            "bot@lab.example.edu"
        );
        cfg.about_url = "https://lab.example.edu/beebot".into();
        assert_eq!(
            cfg.about_link("grid.example.edu:4433", Some(bound)),
            "https://lab.example.edu/beebot"
        );
        // An about_url that is no web page is refused when the config loads.
        let dir = tempfile::tempdir().expect("tempdir");
        let data = DataDir(dir.path().to_path_buf());
        for (about, ok) in [
            ("", true),
            ("https://lab.example.edu/beebot", true),
            ("bot@lab.example.edu", false),
            ("lab page", false),
        ] {
            cfg.about_url = about.into();
            data.save_config(&cfg).expect("save");
            let loaded = data.load_config();
            assert_eq!(loaded.is_ok(), ok, "{about}: {loaded:?}");
            if let Err(e) = loaded {
                assert!(
                    format!("{e:#}").contains("is not an http:// or https:// URL"),
                    "{e:#}"
                );
            }
        }
    }

    #[test]
    fn config_durations_take_numbers_or_text_with_a_unit() {
        let base =
            toml::to_string(&ServerConfig::new("h:1", "0.0.0.0:1", "127.0.0.1:2")).expect("encode");
        // The encoded config has every round field: drop the one replaced.
        let drop_field = |field: &str, value: &str| -> Result<ServerConfig, toml::de::Error> {
            let text: String = base
                .lines()
                .filter(|l| !l.starts_with(&format!("{field} =")))
                .map(|l| format!("{l}\n"))
                .collect();
            toml::from_str(&text.replace("[round]\n", &format!("[round]\n{field} = {value}\n")))
        };
        let cfg = drop_field("deadline_max_s", "\"2d\"").expect("text duration");
        assert_eq!(cfg.round.deadline_max_s, 2 * DAY);
        let cfg = drop_field("max_crawl_delay_ms", "\"30s\"").expect("text duration");
        assert_eq!(cfg.round.max_crawl_delay_ms, 30_000);
        let cfg = drop_field("max_seconds", "7200").expect("a number in the field's unit");
        assert_eq!(cfg.round.max_seconds, 7200);
        let e = drop_field("deadline_min_s", "\"5\"").unwrap_err();
        assert!(e.to_string().contains("has no unit"), "{e}");
    }
}
