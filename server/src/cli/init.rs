//! `init`: create a data dir (project key, certificate, admin token,
//! config). Every check runs before anything is written: a refused init
//! leaves no file.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use beebot_server::config::{self, DataDir, InitOptions, ServerConfig};

use super::Report;

/// The word that turns the reference site off (`--reference-listen off`).
const OFF: &str = "off";

#[derive(Args)]
pub struct InitArgs {
    /// HOST:PORT that clients use to reach this server (goes into invites).
    #[arg(long, default_value = "127.0.0.1:4433")]
    public_addr: String,
    /// UDP address the QUIC endpoint binds.
    #[arg(long, default_value = "0.0.0.0:4433")]
    listen: String,
    /// Admin API address (loopback only).
    #[arg(long, default_value = "127.0.0.1:4480")]
    admin_listen: String,
    /// Use this PEM certificate instead of a self-signed one (with --key).
    #[arg(long)]
    cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long)]
    key: Option<PathBuf>,
    /// TCP address of the reference site hosts benchmark against, or `off`
    /// (default: the --listen IP, port 4481; port 0 when --listen's is 0).
    #[arg(long, value_name = "ADDR:PORT|off")]
    reference_listen: Option<String>,
    /// Point the project at another reference site (a URL) instead of the
    /// one this server serves.
    #[arg(long, value_name = "URL")]
    reference_site: Option<String>,
    /// How site owners reach whoever runs this crawler: a web page
    /// (https://...) or an e-mail address. Shown on the about page the
    /// User-Agent links to. Asked for on a terminal when not given.
    #[arg(long, value_name = "URL|EMAIL")]
    contact: Option<String>,
    /// Who runs the crawler (an organisation or a person), shown on the
    /// about page.
    #[arg(long, value_name = "NAME", default_value = "")]
    operator: String,
}

/// `beebot-server init`.
pub fn run(dir: &DataDir, a: InitArgs) -> Result<Report> {
    let contact = init_contact(a.contact)?;
    let operator = config::check_operator(&a.operator).context("--operator")?;
    check_reference(a.reference_listen.as_deref(), a.reference_site.as_deref())?;
    let mut cfg = config::init(
        dir,
        &InitOptions {
            public_addr: a.public_addr,
            listen: a.listen,
            admin_listen: a.admin_listen,
            cert_pem: a.cert,
            key_pem: a.key,
            contact,
            operator,
        },
    )?;
    let listen_given = a.reference_listen.is_some();
    if a.reference_listen.is_some() || a.reference_site.is_some() {
        if let Some(addr) = a.reference_listen {
            cfg.reference_listen = if addr == OFF { String::new() } else { addr };
        }
        if let Some(url) = a.reference_site {
            cfg.reference_site = url;
        }
        dir.save_config(&cfg)?;
    }
    let mut out = initialised(dir, &cfg);
    if let Some(note) = reference_port_note(&cfg.reference_listen).filter(|_| !listen_given) {
        out.push_str(&note);
    }
    Ok(Report::out(out))
}

/// A line when the reference site could not have its default port (taken
/// by another server on this machine) and `init` picked another.
fn reference_port_note(reference_listen: &str) -> Option<String> {
    let port = reference_listen
        .parse::<std::net::SocketAddr>()
        .ok()?
        .port();
    (port != 0 && port != config::DEFAULT_REFERENCE_PORT).then(|| {
        format!(
            "note: port {} is in use, so the reference site takes port {port} \
             (`reference_listen` in config.toml, or `init --reference-listen`)\n",
            config::DEFAULT_REFERENCE_PORT
        )
    })
}

/// `--reference-listen` is ADDR:PORT or `off`; `--reference-site` an
/// http(s) URL.
fn check_reference(listen: Option<&str>, site: Option<&str>) -> Result<()> {
    if let Some(addr) = listen.filter(|a| *a != OFF) {
        addr.parse::<std::net::SocketAddr>()
            .with_context(|| format!("--reference-listen `{addr}` is not ADDR:PORT or off"))?;
    }
    if let Some(url) = site {
        let parsed = url::Url::parse(url)
            .with_context(|| format!("--reference-site `{url}` is not a URL"))?;
        anyhow::ensure!(
            matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
            "--reference-site `{url}` is not an http(s) URL"
        );
    }
    Ok(())
}

/// What `init` says it made.
fn initialised(dir: &DataDir, cfg: &ServerConfig) -> String {
    let mut out = format!("initialised {}\n", dir.0.display());
    out.push_str(&format!("  QUIC listen  {}\n", cfg.listen));
    out.push_str(&format!("  public addr  {}\n", cfg.public_addr));
    out.push_str(&format!("  admin API    {}\n", cfg.admin_listen));
    out.push_str(&format!("  contact      {}\n", cfg.contact));
    if !cfg.operator.is_empty() {
        out.push_str(&format!("  operator     {}\n", cfg.operator));
    }
    out.push_str(
        &match (cfg.reference_site.as_str(), cfg.reference_listen.as_str()) {
            ("", "") => "  reference    none (hosts will not benchmark)\n".to_string(),
            ("", addr) => format!("  reference    served on http://{addr}/\n"),
            (url, _) => format!("  reference    {url}\n"),
        },
    );
    out.push_str(&ports_to_open(cfg));
    if let Some(note) = port_mismatch_note(cfg) {
        out.push_str(&note);
    }
    out.push_str("next: `beebot-server serve`, then `beebot-server invite`\n");
    out
}

/// The port of an `ADDR:PORT` (a name or an IP, `[v6]:port` too).
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// What this machine's firewall must let in: the QUIC port it listens
/// on, and the port of the page every request's User-Agent links to (the
/// reference site's about page, served whenever `reference_listen` is
/// set), which site owners open. A port 0 (a free one, picked at `serve`)
/// is not named.
fn ports_to_open(cfg: &ServerConfig) -> String {
    let quic = port_of(&cfg.listen).filter(|&p| p != 0);
    let about = port_of(&cfg.reference_listen).filter(|&p| p != 0);
    let mut open = Vec::new();
    if let Some(p) = quic {
        open.push(format!("UDP {p} from the desktops (QUIC)"));
    }
    if let Some(p) = about {
        open.push(format!("TCP {p} (the about page the User-Agent links to)"));
    }
    if open.is_empty() {
        return String::new();
    }
    format!("  firewall     {}\n", open.join("; "))
}

/// A word when clients are told one port and the server listens on
/// another: right behind a forwarding NAT or load balancer, a mistake
/// otherwise.
fn port_mismatch_note(cfg: &ServerConfig) -> Option<String> {
    let public = port_of(&cfg.public_addr)?;
    let listen = port_of(&cfg.listen)?;
    (public != listen && listen != 0).then(|| {
        format!(
            "note: clients are told port {public} (--public-addr) and the server listens on \
             {listen} (--listen): forward UDP {public} to {listen} (a NAT, a load balancer), \
             or give both the same port\n"
        )
    })
}

/// The operator contact for `init`: `--contact` checked, else asked for on
/// a terminal, else refused with the flag to pass.
fn init_contact(given: Option<String>) -> Result<String> {
    if let Some(c) = given {
        return config::check_contact(&c).context("--contact");
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "no operator contact: pass --contact URL|EMAIL (a web page or an e-mail address \
             where site owners can reach whoever runs this crawler; it goes into the \
             User-Agent's about page)"
        );
    }
    config::ask_contact(std::io::stdin().lock(), std::io::stderr())
        .context("no usable operator contact")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_says_what_it_made_and_what_comes_next() {
        let mut cfg = ServerConfig::new("grid.example.edu:4433", "0.0.0.0:4433", "127.0.0.1:4480");
        cfg.contact = "bot@lab.example.edu".into();
        let dir = DataDir(PathBuf::from("/srv/beebot"));
        let text = initialised(&dir, &cfg);
        assert!(text.starts_with("initialised /srv/beebot\n  QUIC listen  0.0.0.0:4433\n"));
        assert!(
            text.contains("  reference    none (hosts will not benchmark)\n"),
            "{text}"
        );
        assert!(!text.contains("operator"), "{text}");
        cfg.reference_listen = "0.0.0.0:4481".into();
        cfg.operator = "Link Lab".into();
        let text = initialised(&dir, &cfg);
        assert!(text.contains("  operator     Link Lab\n"), "{text}");
        assert!(text.contains("  reference    served on http://0.0.0.0:4481/\n"));
        assert!(
            text.contains(
                "  firewall     UDP 4433 from the desktops (QUIC); TCP 4481 (the about page"
            ),
            "{text}"
        );
        assert!(!text.contains("note:"), "{text}");
        assert!(text.ends_with("next: `beebot-server serve`, then `beebot-server invite`\n"));
    }

    #[test]
    fn a_public_port_other_than_the_listen_port_is_said() {
        let cfg = ServerConfig::new("grid.example.edu:443", "0.0.0.0:4433", "127.0.0.1:4480");
        let text = initialised(&DataDir(PathBuf::from("/srv/beebot")), &cfg);
        assert!(
            text.contains(
                "note: clients are told port 443 (--public-addr) and the server listens on 4433"
            ),
            "{text}"
        );
        // This machine lets in the port it listens on.
        assert!(
            text.contains("  firewall     UDP 4433 from the desktops"),
            "{text}"
        );
        let same = ServerConfig::new("[2001:db8::1]:4433", "[::]:4433", "127.0.0.1:4480");
        assert_eq!(port_mismatch_note(&same), None);
        // A free port picked at `serve` is not named; an about page
        // served beside a reference site elsewhere still is.
        let mut free = ServerConfig::new("h.example:4433", "127.0.0.1:0", "127.0.0.1:0");
        free.reference_listen = "127.0.0.1:0".into();
        assert_eq!(ports_to_open(&free), "");
        free.reference_listen = "0.0.0.0:4481".into();
        free.reference_site = "https://r.example/".into();
        assert!(ports_to_open(&free).contains("TCP 4481"));
    }

    #[test]
    fn reference_flags_are_checked_before_anything_is_written() {
        assert!(check_reference(Some("off"), None).is_ok());
        assert!(check_reference(Some("127.0.0.1:4481"), Some("https://r.example/")).is_ok());
        let e = check_reference(Some("nowhere"), None).unwrap_err();
        assert!(
            format!("{e:#}").contains("is not ADDR:PORT or off"),
            "{e:#}"
        );
        let e = check_reference(None, Some("ftp://r.example/")).unwrap_err();
        assert!(format!("{e:#}").contains("is not an http(s) URL"), "{e:#}");
    }
}
