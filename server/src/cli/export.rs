//! `export`: a round's outbound links, streamed from the admin API (TSV,
//! JSON Lines or Parquet) to stdout or a file, or folded into Common
//! Crawl's host-graph layout (`--graph host`). The rows stay rows: what the
//! admin should know (a cancelled round, sites left out because their
//! files are damaged, with exit code 5) is said on stderr.
//!
//! Nothing here holds a whole export: the body is copied as it arrives into
//! stdout or an [`OutFile`] (compressed by its extension, renamed into place
//! only when the export ended well); the host graph holds hosts and host
//! pairs only, within [`beebot_server::export::graph::MAX_GRAPH_HOSTS`] and
//! [`beebot_server::export::graph::MAX_GRAPH_EDGES`].

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

use beebot_server::api::{DamagedSite, ROUND_STATE_HEADER};
use beebot_server::cli_util::AdminClient;
use beebot_server::config::DataDir;
use beebot_server::damage::EXIT_DAMAGED;
use beebot_server::export::graph::{self, HostGraph};
use beebot_server::export::output::{choose_format, OutFile};
use beebot_server::export::Format;

use super::Report;

/// The files of `--graph host --out DIR`, in the order they are renamed
/// into place (edges last: a directory with edges has both).
pub const GRAPH_FILES: [&str; 2] = [graph::FILES[0].0, graph::FILES[1].0];

#[derive(Args)]
pub struct ExportArgs {
    /// The round to export (an id from `round list`).
    #[arg(long)]
    round: u64,
    /// Row format; without it, the one `--out` names (`links.parquet`,
    /// `links.jsonl.gz`), else tsv. A format the name contradicts is refused.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Write here instead of stdout: `.gz` and `.zst` compress; the file
    /// appears only when the export ended well. With `--graph`, a directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Export a graph instead of rows: `host` writes Common Crawl's host
    /// graph (`vertices.txt.gz`, `edges.txt.gz`) into the `--out` directory.
    #[arg(long, value_enum)]
    graph: Option<GraphKind>,
}

/// `export --graph`: the graphs an export can be folded into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GraphKind {
    Host,
}

/// `beebot-server export --round ID`: the rows go to stdout (a reader that
/// stops early, `| head`, is no error) or to `--out`.
pub fn run(dir: &DataDir, a: ExportArgs) -> Result<Report> {
    let c = AdminClient::new(dir)?;
    let round = a.round;
    let mut r = Report::default();
    if a.graph.is_some() {
        let Some(out) = a.out.as_deref() else {
            bail!("--graph host writes two files: name their directory with --out DIR");
        };
        if a.format.is_some_and(|f| f != Format::Tsv) {
            bail!("--graph host writes its own layout: leave out --format");
        }
        let (state, (v, e)) = host_graph(&c, round, out)?;
        r.warn_some(round_state_note(round, state.as_deref()));
        r.warn(format!(
            "wrote {} ({v} hosts, {e} host links)",
            out.display()
        ));
    } else {
        let format = choose_format(a.format, a.out.as_deref())?;
        let (headers, body) = c.get_stream(&format!(
            "/api/rounds/{round}/export?format={}",
            format.name()
        ))?;
        let state = round_state(&headers);
        match a.out {
            Some(path) => {
                let bytes = copy_to_file(body, &path)?;
                r.warn(format!(
                    "wrote {} ({bytes} bytes of {} before compression)",
                    path.display(),
                    format.name()
                ));
            }
            None => copy_to_stdout(body)?,
        }
        r.warn_some(round_state_note(round, state.as_deref()));
    }
    // Sites whose files are damaged were left out: named, and the exit
    // code says so (the export holds every other site).
    let damaged: Vec<DamagedSite> = c.get(&format!("/api/rounds/{round}/damage"))?;
    for line in super::check::damaged_lines(&damaged) {
        r.warn(line);
    }
    if !damaged.is_empty() {
        r.code = EXIT_DAMAGED;
    }
    Ok(r)
}

/// The round's state the server sends beside an export's rows.
fn round_state(headers: &ureq::http::HeaderMap) -> Option<String> {
    headers
        .get(ROUND_STATE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Copy the body into `path`; on any error the file is not there.
fn copy_to_file(mut body: impl Read, path: &Path) -> Result<u64> {
    let mut out =
        OutFile::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    let bytes = std::io::copy(&mut body, &mut out)
        .with_context(|| format!("the export broke off; {} was not written", path.display()))?;
    out.commit()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(bytes)
}

fn copy_to_stdout(mut body: impl Read) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let copied = std::io::copy(&mut body, &mut out).and_then(|_| out.flush());
    match copied {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("the export to stdout broke off"),
    }
}

/// Stream the round's TSV into a host graph and write its two files into
/// `dir`; returns the numbers of hosts and host links.
fn host_graph(c: &AdminClient, round: u64, dir: &Path) -> Result<(Option<String>, (usize, usize))> {
    let (headers, body) = c.get_stream(&format!("/api/rounds/{round}/export?format=tsv"))?;
    let state = round_state(&headers);
    let mut lines = BufReader::new(body).lines();
    let header = lines.next().transpose().context("the export broke off")?;
    if header.as_deref() != Some(beebot_shared::export::COLUMNS.join("\t").as_str()) {
        bail!("the server's export does not start with the expected header");
    }
    let mut g = HostGraph::new();
    for line in lines {
        g.add_tsv_row(&line.context("the export broke off")?)?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let create = |name: &str| {
        let p = dir.join(name);
        OutFile::create(&p).with_context(|| format!("cannot write {}", p.display()))
    };
    let (mut vertices, mut edges) = (create(GRAPH_FILES[0])?, create(GRAPH_FILES[1])?);
    let counts = g
        .write(&mut vertices, &mut edges)
        .context("cannot write the host graph")?;
    vertices.commit().context("cannot write the vertices")?;
    edges.commit().context("cannot write the edges")?;
    Ok((state, counts))
}

/// What to say of an export by its round's state: a cancelled or a
/// running round's export holds only the sites done so far.
fn round_state_note(round: u64, state: Option<&str>) -> Option<String> {
    match state? {
        "cancelled" => Some(format!(
            "note: round {round} was cancelled: the export holds only the sites done before the cancel"
        )),
        "running" => Some(format!(
            "note: round {round} is still running: the export holds only the sites done so far"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_named_as_the_api_parses_them() {
        for f in Format::ALL {
            let v = f.to_possible_value().expect("named");
            assert_eq!(v.get_name(), f.name());
            assert_eq!(v.get_name().parse::<Format>(), Ok(f));
        }
        assert_eq!(round_state_note(1, None), None);
        assert_eq!(round_state_note(1, Some("done")), None);
        for (state, says) in [
            ("cancelled", "was cancelled"),
            ("running", "is still running"),
        ] {
            let note = round_state_note(7, Some(state)).expect("a note");
            assert!(note.contains(&format!("round 7 {says}")), "{note}");
        }
    }

    #[test]
    fn a_body_that_breaks_off_leaves_no_file() {
        struct Broken(usize);
        impl Read for Broken {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("connection reset"));
                }
                self.0 -= 1;
                buf[..4].copy_from_slice(b"row\n");
                Ok(4)
            }
        }
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("links.tsv.zst");
        let e = copy_to_file(Broken(100), &path).unwrap_err();
        assert!(format!("{e:#}").contains("broke off"), "{e:#}");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
        assert_eq!(copy_to_file(&b"row\n"[..], &path).expect("copy"), 4);
        assert_eq!(std::fs::read(&path).map(|b| b.is_empty()).ok(), Some(false));
    }
}
