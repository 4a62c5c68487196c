//! The server's data dir: config file, keys, certificate, admin token, and the
//! runtime file that tells the CLI where the running server listens.
//!
//! ```text
//! DATA_DIR/config.toml   settings (documented in deploy/server.example.toml)
//! DATA_DIR/project.key   ed25519 project signing key, hex (0600)
//! DATA_DIR/cert.pem      TLS certificate; key.pem its private key (0600)
//! DATA_DIR/admin.token   admin API bearer token (0600)
//! DATA_DIR/store/        sled database
//! DATA_DIR/links/        accepted link files, links/ROUND/JOB-UNIT.lf
//! DATA_DIR/serve.json    addresses of the running server (written by `serve`)
//! ```

use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use beebot_shared::scope::Scope;

use crate::model::RoundParams;
use crate::validate::{ValidateMode, DEFAULT_SPOT_CHECK_PERCENT, DEFAULT_TRUST_AFTER};

/// Round defaults an admin can override per round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RoundDefaults {
    pub policy: String,
    pub max_pages: u32,
    pub max_depth: u32,
    pub delay_ms: u64,
    pub scope: Scope,
    pub max_page_bytes: u64,
    pub max_seconds: u64,
    pub deadline_min_s: u64,
    pub deadline_max_s: u64,
    pub max_attempts: u32,
    pub max_crawl_delay_ms: u64,
    /// How results are validated: off, adaptive or all.
    pub validate: ValidateMode,
}

impl Default for RoundDefaults {
    fn default() -> Self {
        RoundDefaults {
            policy: "adaptive".into(),
            max_pages: 1000,
            max_depth: 20,
            delay_ms: 1000,
            scope: Scope::Host,
            max_page_bytes: 2 * 1024 * 1024,
            max_seconds: 6 * 3600,
            deadline_min_s: 120,
            deadline_max_s: 2 * 24 * 3600,
            max_attempts: 5,
            max_crawl_delay_ms: 30_000,
            validate: ValidateMode::Adaptive,
        }
    }
}

impl RoundDefaults {
    pub fn params(&self) -> RoundParams {
        RoundParams {
            policy: self.policy.clone(),
            max_pages: self.max_pages,
            max_depth: self.max_depth,
            delay_ms: self.delay_ms,
            scope: self.scope,
            max_page_bytes: self.max_page_bytes,
            max_seconds: self.max_seconds,
            deadline_min_s: self.deadline_min_s,
            deadline_max_s: self.deadline_max_s,
            max_attempts: self.max_attempts,
            max_crawl_delay_ms: self.max_crawl_delay_ms,
            validate: self.validate,
        }
    }
}

/// `config.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Contact URL in the crawler's User-Agent.
    pub contact_url: String,
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
    /// Validate every client's address with a QUIC Retry (one round trip
    /// more per connection). Off: only under a flood of handshakes.
    #[serde(default)]
    pub quic_retry: bool,
    /// Deadline = issue + expected × slack + grace.
    pub deadline_slack: f64,
    pub deadline_grace_s: u64,
    #[serde(default)]
    pub round: RoundDefaults,
    #[serde(default)]
    pub validation: ValidationConfig,
}

/// `[validation]`: when a host is trusted, and how often a trusted host's
/// results are still checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
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
            contact_url: "https://example.invalid/beebot".into(),
            reference_site: String::new(),
            reference_listen: String::new(),
            quic_retry: false,
            deadline_slack: 3.0,
            deadline_grace_s: 60,
            round: RoundDefaults::default(),
            validation: ValidationConfig::default(),
        }
    }

    pub fn user_agent(&self) -> String {
        format!(
            "BeeBot/{} (+{})",
            env!("CARGO_PKG_VERSION"),
            self.contact_url
        )
    }
}

/// Port of the reference site's HTTP server unless `init` is told otherwise.
pub const DEFAULT_REFERENCE_PORT: u16 = 4481;

/// The reference site's address for a QUIC `listen` address: the same IP on
/// [`DEFAULT_REFERENCE_PORT`], or port 0 (any) when QUIC's port is 0.
pub fn default_reference_listen(listen: &str) -> String {
    match listen.parse::<SocketAddr>() {
        Ok(addr) if addr.port() == 0 => SocketAddr::new(addr.ip(), 0).to_string(),
        Ok(addr) => SocketAddr::new(addr.ip(), DEFAULT_REFERENCE_PORT).to_string(),
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
        let text = fs::read_to_string(self.config()).with_context(|| {
            format!(
                "cannot read {} (run `beebot-server init` first)",
                self.config().display()
            )
        })?;
        let cfg: ServerConfig = toml::from_str(&text)
            .with_context(|| format!("{} is not valid", self.config().display()))?;
        if cfg.validation.spot_check_percent > crate::validate::MAX_SPOT_CHECK_PERCENT {
            anyhow::bail!(
                "{}: validation.spot_check_percent is {}, at most {}",
                self.config().display(),
                cfg.validation.spot_check_percent,
                crate::validate::MAX_SPOT_CHECK_PERCENT
            );
        }
        Ok(cfg)
    }

    /// Write the config back (durably).
    pub fn save_config(&self, cfg: &ServerConfig) -> Result<()> {
        let text = toml::to_string_pretty(cfg).context("cannot encode config")?;
        crate::grid::write_durable(&self.config(), text.as_bytes())
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

/// Write a file readable by its owner only.
pub fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(data)?;
    f.sync_all()?;
    Ok(())
}

/// Options of `beebot-server init`.
pub struct InitOptions {
    pub public_addr: String,
    pub listen: String,
    pub admin_listen: String,
    /// Use these PEM files instead of a self-signed certificate.
    pub cert_pem: Option<PathBuf>,
    pub key_pem: Option<PathBuf>,
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
    beebot_shared::util::create_private_dir(&dir.0)
        .with_context(|| format!("cannot create {}", dir.0.display()))?;
    let mut cfg = ServerConfig::new(&opts.public_addr, &opts.listen, &opts.admin_listen);
    cfg.reference_listen = default_reference_listen(&opts.listen);

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
