//! The commands of `beebot-server`, one module per command group. Each
//! command is a function that returns what it says ([`Report`]: standard
//! output, notes for standard error, exit code), so its text is tested
//! without a terminal; `main.rs` only parses the command line, runs the
//! command and prints its report. Commands other than `init`, `serve` and
//! `simulate` are calls to the running server's admin API
//! ([`beebot_server::cli_util::AdminClient`]). Nothing here prints, except
//! the commands that stream (`serve`'s banner, `round wait`'s progress,
//! `export`'s rows).

pub mod check;
pub mod export;
pub mod hosts;
pub mod init;
pub mod invite;
pub mod round;
pub mod serve;
pub mod simulate;
pub mod sites;
pub mod status;
pub mod wait;

use std::fmt;
use std::path::PathBuf;

use anyhow::{Context, Result};

use beebot_server::config::DataDir;

/// What a command says: its standard output, its notes for standard error
/// (each line ends in a newline), and the exit code of the process.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub out: String,
    pub err: String,
    pub code: i32,
}

impl Report {
    /// A report of standard output only, exit code 0.
    pub fn out(out: impl Into<String>) -> Report {
        Report {
            out: out.into(),
            ..Report::default()
        }
    }

    /// A report of a note on standard error only, exit code 0.
    pub fn note(line: impl fmt::Display) -> Report {
        Report {
            err: format!("{line}\n"),
            ..Report::default()
        }
    }

    /// `value` as pretty JSON on standard output (the `--json` of lists).
    pub fn json(value: &impl serde::Serialize) -> Result<Report> {
        Ok(Report::out(format!(
            "{}\n",
            serde_json::to_string_pretty(value)?
        )))
    }

    /// Append a line to standard output.
    pub fn say(&mut self, line: impl fmt::Display) {
        self.out.push_str(&format!("{line}\n"));
    }

    /// Append a line to standard error.
    pub fn warn(&mut self, line: impl fmt::Display) {
        self.err.push_str(&format!("{line}\n"));
    }

    /// [`Report::warn`] a note when there is one.
    pub fn warn_some(&mut self, line: Option<impl fmt::Display>) {
        if let Some(line) = line {
            self.warn(line);
        }
    }

    /// Print the report (notes first) and return its exit code.
    pub fn print(&self) -> i32 {
        eprint!("{}", self.err);
        print!("{}", self.out);
        self.code
    }
}

impl fmt::Display for Report {
    /// The standard output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.out)
    }
}

/// The data dir the Debian package makes (its `postinst`) and its unit
/// serves from: every command finds it when no other is named.
pub const PACKAGED_DATA_DIR: &str = "/var/lib/beebot-server";

/// The data dir: `--data-dir` (or `BEEBOT_SERVER_DIR`), else the
/// packaged install's when this machine has one, else the platform's
/// per-user dir (`~/.local/share/beebot-server` on Linux).
pub fn data_dir(explicit: Option<PathBuf>) -> Result<DataDir> {
    let packaged = cfg!(unix).then(|| std::path::Path::new(PACKAGED_DATA_DIR));
    data_dir_from(explicit, packaged)
}

fn data_dir_from(explicit: Option<PathBuf>, packaged: Option<&std::path::Path>) -> Result<DataDir> {
    if let Some(d) = explicit {
        return Ok(DataDir(d));
    }
    if let Some(p) = packaged.filter(|p| p.is_dir()) {
        return Ok(DataDir(p.to_path_buf()));
    }
    let dirs = directories::ProjectDirs::from("org", "BeeBot", "beebot-server")
        .context("cannot find a data dir; pass --data-dir DIR")?;
    Ok(DataDir(dirs.data_dir().to_path_buf()))
}

/// `init` and `serve` write the server's files, which must stay the data
/// dir's owner's alone: run as another user (root, say, in the package's
/// dir), they would leave files its server cannot read. Refused, naming
/// the owner.
pub fn owned_by_me(dir: &DataDir) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(&dir.0) {
            let me = rustix::process::geteuid().as_raw();
            if meta.uid() != me {
                anyhow::bail!(
                    "{} belongs to another user (uid {}), and the server's files must stay \
                     theirs: run this as that user (packaged: `sudo -u beebot-server \
                     beebot-server ...`), or give another --data-dir",
                    dir.0.display(),
                    meta.uid()
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Write `text` to `path` (an export the admin asked for).
pub fn write_out(path: &std::path::Path, text: &[u8]) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `init` and `serve` refuse a data dir another user owns (root in the
    /// package's dir would leave files its server cannot read).
    #[cfg(unix)]
    #[test]
    fn a_data_dir_of_another_user_is_refused_for_writing() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mine = DataDir(tmp.path().join("mine"));
        std::fs::create_dir(&mine.0).expect("mkdir");
        owned_by_me(&mine).expect("my own dir");
        owned_by_me(&DataDir(tmp.path().join("not-made-yet"))).expect("a new dir");
        let theirs = if rustix::process::geteuid().is_root() {
            let d = tmp.path().join("theirs");
            std::fs::create_dir(&d).expect("mkdir");
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).expect("chown");
            d
        } else {
            PathBuf::from("/")
        };
        let e = owned_by_me(&DataDir(theirs)).expect_err("another user's dir");
        assert!(e.to_string().contains("sudo -u beebot-server"), "{e}");
    }

    #[test]
    fn the_packaged_data_dir_is_found_unless_another_is_named() {
        let tmp = tempfile::tempdir().expect("tmp");
        let packaged = tmp.path().join("var-lib-beebot-server");
        let named = tmp.path().join("named");
        // Not installed: the per-user dir.
        let d = data_dir_from(None, Some(&packaged)).expect("dir");
        assert!(d.0.ends_with("beebot-server"), "{}", d.0.display());
        assert_ne!(d.0, packaged);
        // Installed: every command finds the package's dir.
        std::fs::create_dir(&packaged).expect("mkdir");
        assert_eq!(
            data_dir_from(None, Some(&packaged)).expect("dir").0,
            packaged
        );
        // A named dir wins.
        assert_eq!(
            data_dir_from(Some(named.clone()), Some(&packaged))
                .expect("dir")
                .0,
            named
        );
    }

    #[test]
    fn a_report_keeps_output_notes_and_code_apart() {
        let mut r = Report::note("no hosts yet");
        r.say("a\tb");
        r.code = 3;
        assert_eq!(r.to_string(), "a\tb\n");
        assert_eq!(r.err, "no hosts yet\n");
        assert_eq!(Report::out("x\n").code, 0);
    }
}
