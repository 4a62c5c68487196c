//! The command line of `beebot`: its commands, flags and their help text
//! (clap's derive), and the network flags several commands share.
//!
//! Flags and their meanings are the user's interface: they change only on
//! purpose. Nothing here runs a command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};

use beebot_client::crawler::{CrawlerConfig, ResolveRule};
use beebot_client::settings;
use beebot_shared::logfmt::{LogFormat, LOG_FORMAT_ENV};

#[derive(Parser)]
#[command(
    name = "beebot",
    version,
    about = "BeeBot grid desktop client: crawl websites for a research link graph"
)]
pub struct Cli {
    /// Client home (keys, enrolment, spool). Default: the platform's config and data dirs.
    #[arg(long, global = true, env = "BEEBOT_HOME")]
    pub home: Option<PathBuf>,
    /// Log lines (stderr and the service's log file): `text`, or `json` (one
    /// object per line).
    #[arg(long, global = true, value_enum, default_value_t, env = LOG_FORMAT_ENV)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Join a project with the invite code from its admin. The code is
    /// secret: rather than on the command line (shell history, `ps`), give
    /// `-` and pipe it in, or set BEEBOT_INVITE; with no code and stdin not a
    /// terminal, it is read from stdin.
    Join {
        /// The invite code, or `-` to read it from stdin.
        code: Option<String>,
        /// Name shown to the admin (default: this machine's host name).
        #[arg(long)]
        name: Option<String>,
        /// Only check the code, offline (its form and checksum): nothing is
        /// joined or written. What the Windows installers run on theirs.
        #[arg(long)]
        check: bool,
    },
    /// Pull work, crawl, upload, repeat.
    Run {
        #[command(flatten)]
        flags: RunFlags,
        #[command(flatten)]
        net: NetArgs,
    },
    /// What the client is doing: state, scans, totals, pending uploads.
    Status {
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Settings (a TOML file in the config dir, under environment and flags).
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Pause the running client's scans at a page boundary.
    Pause {
        /// Resume by itself after this long (e.g. 2h); default: until `beebot resume`.
        #[arg(long = "for", value_parser = beebot_shared::util::parse_duration)]
        duration: Option<Duration>,
    },
    /// Resume a paused client.
    Resume,
    /// Stop the running client: its scans are checkpointed and go on at its
    /// next start (the autostart starts it again at the next login). What
    /// an installer runs before it replaces the program.
    Stop,
    /// Open the status page in the browser (starting the client when it is
    /// not running): see and steer it without a terminal.
    Open {
        /// Print the one-time link instead of opening a browser.
        #[arg(long)]
        print: bool,
    },
    /// Leave the project: stop this home's client and its service, tell the
    /// server (it releases this host's units and lists it as left), and
    /// remove every file the client made here. Offline, the files are
    /// removed all the same and the server is not told.
    Leave {
        /// Kept for old scripts: leaving always cleans up, reachable or not.
        #[arg(long)]
        force: bool,
    },
    /// Run the client as a background service that starts at login.
    Service {
        #[command(subcommand)]
        cmd: ServiceCmd,
    },
    /// Scan the project's reference site and report pages/s and KB/s (the
    /// result goes to the server, as `beebot run` does on first start and weekly).
    Benchmark {
        /// Benchmark against this URL instead; nothing is sent to the server.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        net: NetArgs,
    },
    /// Scan one site locally, without a server.
    Crawl {
        #[command(flatten)]
        flags: CrawlFlags,
        #[command(flatten)]
        net: NetArgs,
    },
}

#[derive(Subcommand)]
pub enum ConfigCmd {
    /// Every setting, its value, and where the value came from.
    Show {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Validate and write one setting; a running client applies it at once.
    /// The rest of the line is the value: `config set window mon-fri 19:00-07:00`.
    Set {
        /// The setting's name (`config show` lists them).
        key: String,
        /// Its value: the rest of the line.
        #[arg(required = true, num_args = 1..)]
        value: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum ServiceCmd {
    /// Install and start the per-user service.
    Install {
        /// Crawl only in this window (saved as the `window` setting).
        #[arg(long)]
        window: Option<String>,
        /// Write the service files without starting them.
        #[arg(long)]
        no_start: bool,
    },
    /// Remove the per-user service (systemd, launchd: stopped too; Windows:
    /// its autostart entry). The home is kept: `leave` leaves the project.
    Uninstall,
    /// Whether the per-user service is installed and running.
    Status,
}

/// The flags of `beebot run` other than the network ones.
#[derive(clap::Args)]
pub struct RunFlags {
    /// Exit when the server has no more work and every result is uploaded.
    #[arg(long)]
    pub once: bool,
    /// Most sites scanned at once (setting `slots`): `auto` (up to 64) or a
    /// ceiling from 1 to 64; the client sizes its concurrency under it.
    #[arg(long, value_name = "auto|N")]
    pub slots: Option<String>,
    /// When to crawl (setting `window`), e.g. `mon-fri 19:00-07:00`.
    #[arg(long)]
    pub window: Option<String>,
    /// Pause this many ms after every page: a deliberately slower client
    /// (tests and demos of scheduling; 0 in real use).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub throttle_ms: u64,
    /// How often a running scan uploads its part, seconds (tests and
    /// demos; the default is the protocol's 120 s).
    #[arg(long, default_value_t = beebot_shared::limits::PART_INTERVAL_S, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub part_every_s: u64,
    /// How often the client sizes its concurrency again, ms (tests and
    /// demos; the default is 10 s).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub adjust_every_ms: u64,
    /// No notification-area icon (Windows; elsewhere there is none).
    #[arg(long)]
    pub no_tray: bool,
}

/// The flags of `beebot crawl` other than the network ones.
#[derive(clap::Args)]
pub struct CrawlFlags {
    /// The site's URL (a bare host is taken as `http://HOST/`).
    pub url: String,
    /// Most pages fetched.
    #[arg(long, default_value_t = 100)]
    pub max_pages: u32,
    /// Most links followed from the first page to reach a page.
    #[arg(long, default_value_t = 20)]
    pub max_depth: u32,
    /// Politeness delay between two requests to one host, ms (robots.txt's
    /// Crawl-delay when longer).
    #[arg(long, default_value_t = 1000)]
    pub delay_ms: u64,
    /// Requests the site may have unanswered at once, 1 to 4: more than
    /// one only for a site whose operator allows it, and only with
    /// `--delay-ms 0` (no robots.txt Crawl-delay either).
    #[arg(long, default_value_t = 1)]
    pub connections: u8,
    /// What the scan follows: the site's host, its subdomains too, or its
    /// whole registrable domain.
    #[arg(long, default_value = "host", value_parser = ["host", "subdomains", "domain"])]
    pub scope: String,
    /// Row format: tsv (with a header row) or jsonl.
    #[arg(long, default_value = "tsv", value_parser = ["tsv", "jsonl"])]
    pub format: String,
    /// Write here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct NetArgs {
    /// Allow crawling loopback, private and link-local addresses.
    #[arg(long)]
    pub allow_private: bool,
    /// HTTP proxy for crawling (setting `proxy`), e.g. http://proxy.corp:3128.
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
    /// Map a host name for crawling, like curl: HOST=IP[:PORT] (HOST may be
    /// *.suffix). Also from BEEBOT_RESOLVE, rules separated by commas (a
    /// lab's client started by its autostart, which passes no flags).
    #[arg(
        long,
        value_name = "HOST=IP[:PORT]",
        env = "BEEBOT_RESOLVE",
        value_delimiter = ','
    )]
    pub resolve: Vec<String>,
}

impl NetArgs {
    /// The settings these flags override.
    pub fn overrides(&self) -> Vec<(&'static str, String)> {
        let mut v = Vec::new();
        if self.allow_private {
            v.push(("allow_private", "true".to_string()));
        }
        if let Some(p) = &self.proxy {
            v.push(("proxy", p.clone()));
        }
        v
    }

    /// The crawler's configuration these flags give (each checked).
    pub fn crawler_config(&self) -> Result<CrawlerConfig> {
        let mut resolve = Vec::new();
        for r in &self.resolve {
            resolve.push(
                r.parse::<ResolveRule>()
                    .map_err(|e| anyhow::anyhow!("--resolve {r}: {e}"))?,
            );
        }
        if let Some(p) = &self.proxy {
            settings::Settings::default()
                .apply("proxy", p)
                .map_err(|e| anyhow::anyhow!("--proxy: {e}"))?;
        }
        Ok(CrawlerConfig {
            allow_private: self.allow_private,
            resolve,
            proxy: self.proxy.clone(),
            ..CrawlerConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_and_argument_says_what_it_is_for() {
        use clap::CommandFactory;
        let missing = beebot_shared::clihelp::without_help(&Cli::command());
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    /// `docs/reference/client.md` is every command's `--help` as it is now.
    #[test]
    fn the_commands_reference_page_is_current() {
        use clap::CommandFactory;
        let intro = "Each command's `--help`, as `beebot` prints it (`beebot help COMMAND` \
                     prints the same). The [employee guide](../employee.md) shows them at \
                     work; the [settings](client-settings.md) are what `beebot config` sets.";
        let page = beebot_shared::clihelp::reference_page(Cli::command(), intro)
            .unwrap_or_else(|e| panic!("{e}"));
        beebot_shared::docpage::assert_reference_current(
            env!("CARGO_MANIFEST_DIR"),
            "client.md",
            &page,
        );
    }

    /// `docs/reference/client-settings.md` is every setting as it is now:
    /// its default and meaning (`settings::KEYS`), its environment
    /// variable, the flags of the same name, and when a change applies.
    #[test]
    fn the_settings_reference_page_is_current() {
        use beebot_shared::docpage::{cell, made_from_the_code};
        use clap::CommandFactory;
        let cli = Cli::command();
        let mut page = format!(
            "# `beebot` settings\n\n{}\n\nThe client's settings: keys of `config.toml` in the \
             client's config dir (`beebot config show` lists them with their values and \
             prints the file's path; `beebot config set KEY VALUE` checks and writes one). \
             An environment variable `BEEBOT_<KEY>` overrides the file, and a command's \
             flag of the same name overrides both for that command (`service install \
             --window` writes the setting instead). Nothing the server sends changes them. \
             A running client applies `config set` at once, except where this table says \
             otherwise. A `config.toml` longer than {} KiB (`MAX_SETTINGS_FILE_BYTES`), or \
             not UTF-8 TOML, is refused with its path named, not read.\n\n\
             | setting | default | environment | flags | applies | meaning |\n\
             |---|---|---|---|---|---|\n",
            made_from_the_code(),
            settings::MAX_SETTINGS_FILE_BYTES / 1024
        );
        for (key, default, meaning) in settings::KEYS {
            let long = key.replace('_', "-");
            let has = |c: &clap::Command| c.get_arguments().any(|a| a.get_long() == Some(&long));
            let mut flags = Vec::new();
            for c in cli.get_subcommands() {
                if has(c) {
                    flags.push(format!("`{} --{long}`", c.get_name()));
                }
                for sub in c.get_subcommands().filter(|s| has(s)) {
                    flags.push(format!("`{} {} --{long}`", c.get_name(), sub.get_name()));
                }
            }
            let applies = if settings::NEEDS_RESTART.contains(&key) {
                "next start"
            } else {
                "at once"
            };
            let default = if default.is_empty() { "\"\"" } else { default };
            page += &format!(
                "| `{key}` | `{default}` | `BEEBOT_{}` | {} | {applies} | {} |\n",
                key.to_ascii_uppercase(),
                flags.join(", "),
                cell(meaning)
            );
        }
        beebot_shared::docpage::assert_reference_current(
            env!("CARGO_MANIFEST_DIR"),
            "client-settings.md",
            &page,
        );
    }

    #[test]
    fn config_set_takes_the_rest_of_the_line_as_the_value() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).map(|c| (c.cmd, c.home)) {
            Ok((
                Cmd::Config {
                    cmd: ConfigCmd::Set { key, value },
                },
                home,
            )) => (key, value.join(" "), home),
            _ => panic!("not a config set: {args:?}"),
        };
        let (k, v, home) = parse(&[
            "beebot",
            "config",
            "set",
            "window",
            "mon-fri",
            "19:00-07:00,",
            "sat-sun",
            "00:00-24:00",
        ]);
        assert_eq!(
            (k.as_str(), v.as_str()),
            ("window", "mon-fri 19:00-07:00, sat-sun 00:00-24:00")
        );
        assert!(home.is_none());
        // A global flag after the value is still the flag.
        let (_, v, home) = parse(&[
            "beebot",
            "config",
            "set",
            "window",
            "mon-fri",
            "19:00-07:00",
            "--home",
            "/h",
        ]);
        assert_eq!(v, "mon-fri 19:00-07:00");
        assert_eq!(home, Some(PathBuf::from("/h")));
        let (_, v, _) = parse(&["beebot", "config", "set", "window", "mon-fri 19:00-07:00"]);
        assert_eq!(v, "mon-fri 19:00-07:00");
        assert!(Cli::try_parse_from(["beebot", "config", "set", "slots"]).is_err());
    }

    /// The command lines the installers and the menu entry run, as
    /// `deploy/` writes them, are commands this client takes.
    #[test]
    fn the_installers_run_commands_the_client_takes() {
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let read = |p: &str| std::fs::read_to_string(deploy.join(p)).unwrap();
        let mut lines: Vec<String> = Vec::new();
        // The per-user setup: `"$INSTDIR\beebot.exe" ARGS'` (and the check
        // from its plug-ins folder), `beebotw.exe" "open"` for the menu.
        for l in read("windows/beebot.nsi").lines() {
            if !l.contains("Exec") && !l.contains("CreateShortcut") {
                continue;
            }
            if let Some(rest) = l.split("beebot.exe\" ").nth(1) {
                lines.push(rest.split('\'').next().unwrap().to_string());
            }
            if let Some(rest) = l.split("beebotw.exe\" \"").nth(1) {
                lines.push(rest.split('"').next().unwrap().to_string());
            }
        }
        // The MSI: its custom actions' commands, the shortcut's arguments.
        for l in read("windows/beebot.wxs").lines() {
            for key in ["ExeCommand=\"", "Arguments=\""] {
                if let Some(rest) = l.split(key).nth(1) {
                    let args = rest.split('"').next().unwrap();
                    lines.push(args.replace("[INVITE]", "beebot2-code"));
                }
            }
        }
        assert!(lines.len() >= 10, "{lines:?}");
        for want in ["join --check", "service install", "stop", "leave", "open"] {
            assert!(lines.iter().any(|l| l == want), "no `{want}` in {lines:?}");
        }
        for (file, key) in [
            ("client-deb/beebot.desktop", "Exec="),
            ("client-deb/beebot.service", "ExecStart="),
        ] {
            let exec = read(file)
                .lines()
                .find_map(|l| l.strip_prefix(key).map(str::to_string))
                .unwrap();
            let args = exec.strip_prefix("/usr/bin/beebot ").unwrap();
            lines.push(args.to_string());
        }
        for l in &lines {
            let argv = std::iter::once("beebot").chain(l.split_whitespace());
            assert!(
                Cli::try_parse_from(argv).is_ok(),
                "`beebot {l}` is not a command"
            );
        }
        assert!(lines.iter().any(|l| l == "open") && lines.iter().any(|l| l == "service install"));
    }
}
