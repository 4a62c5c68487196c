//! A round's outbound links, exported: the one loop over a round's done jobs
//! that the admin API's export (and the demo's check against the truth)
//! share, the formats it writes, and how the rows travel.
//!
//! Sites come in name order; a site scanned in several scans (continuations)
//! is the union of their link files, each (source, target) pair once
//! ([`crate::grid::for_each_link`]). Only jobs that are done with an
//! accepted result are exported: a failed or cancelled job has no rows. This
//! module never changes the grid: it reads link files and writes rows.
//!
//! Rooms: [`stream`] carries the rows from a blocking writer to the HTTP
//! body in bounded chunks; [`parquet`] writes typed Parquet in bounded row
//! groups; [`graph`] folds rows into Common Crawl's host-graph layout;
//! [`output`] is where the CLI puts them (compression by the file's
//! extension, a temporary name renamed only when the export ended well).
//! No room ever holds a whole export in memory.

pub mod graph;
pub mod output;
pub mod parquet;
pub mod stream;

use std::io::{self, Write};

use beebot_shared::export::ExportWriter;
use beebot_shared::linkfile::LinkRecord;

use crate::grid::{LinkFiles, LinkReadError};
use crate::model::{JobRecord, JobState};

/// Why an export stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A link file of a site could not be read or decoded.
    #[error("{message}")]
    Links { site: String, message: String },
    /// The rows could not be written (a closed pipe, a full disk).
    #[error(transparent)]
    Write(#[from] io::Error),
}

/// The formats of `beebot-server export`: the shared text formats (also
/// `beebot crawl`'s) and Parquet, which only the server writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Tsv,
    Jsonl,
    Parquet,
}

/// A format name that is none of `tsv`, `jsonl`, `parquet`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown format `{0}` (use tsv, jsonl or parquet)")]
pub struct UnknownFormat(pub String);

impl Format {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [Format; 3] = [Format::Tsv, Format::Jsonl, Format::Parquet];

    /// Its name in the API's query (`format=tsv`) and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tsv => "tsv",
            Format::Jsonl => "jsonl",
            Format::Parquet => "parquet",
        }
    }

    /// The HTTP content type of its body.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Tsv => "text/tab-separated-values; charset=utf-8",
            Format::Jsonl => "application/jsonl; charset=utf-8",
            Format::Parquet => "application/vnd.apache.parquet",
        }
    }

    /// The shared text format, for the text formats.
    fn text(self) -> Option<beebot_shared::export::Format> {
        match self {
            Format::Tsv => Some(beebot_shared::export::Format::Tsv),
            Format::Jsonl => Some(beebot_shared::export::Format::Jsonl),
            Format::Parquet => None,
        }
    }
}

impl std::str::FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// Where exported rows go: a text writer or a Parquet writer.
pub trait RowSink {
    /// Write one record of `site`.
    fn row(&mut self, site: &str, rec: &LinkRecord) -> io::Result<()>;
}

impl<W: Write> RowSink for ExportWriter<W> {
    fn row(&mut self, site: &str, rec: &LinkRecord) -> io::Result<()> {
        self.write(site, rec)
    }
}

/// Write the whole export of `jobs` in `format` to `out` and finish it
/// (TSV's header, Parquet's footer); returns the number of rows. A site
/// whose files are damaged is left out and told to `on_damaged` (site,
/// why) before the export is finished.
pub fn export_to<W: Write + Send>(
    files: &dyn LinkFiles,
    jobs: &[JobRecord],
    format: Format,
    out: W,
    on_damaged: impl FnMut(&str, &str),
) -> Result<u64, ExportError> {
    match format.text() {
        Some(text) => {
            let mut w = ExportWriter::new(out, text)?;
            let rows = export_round(files, jobs, &mut w, |_, _| {}, on_damaged)?;
            w.finish()?;
            Ok(rows)
        }
        None => {
            let mut w = parquet::ParquetRows::new(out)?;
            let rows = export_round(files, jobs, &mut w, |_, _| {}, on_damaged)?;
            w.finish()?;
            Ok(rows)
        }
    }
}

/// Write the link records of `jobs` that are done (with their accepted
/// result) to `writer`, sites in name order; `on_row` sees each row written
/// (its site and record). Returns the number of rows. The writer is not
/// finished: the caller ends it ([`ExportWriter::finish`]).
///
/// Each site's files are read whole before its first row is written
/// ([`crate::damage::job_damage`]): a site whose files are damaged
/// (missing, cut short, failing their checksum) is left out whole and
/// told to `on_damaged` (site, why), and the export goes on with the
/// others. It costs each file a second read and decode.
pub fn export_round<S: RowSink>(
    files: &dyn LinkFiles,
    jobs: &[JobRecord],
    writer: &mut S,
    mut on_row: impl FnMut(&str, &LinkRecord),
    mut on_damaged: impl FnMut(&str, &str),
) -> Result<u64, ExportError> {
    let mut done: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| j.state == JobState::Done && j.result.is_some())
        .collect();
    done.sort_by(|a, b| a.site.cmp(&b.site));
    let mut rows = 0u64;
    for job in done {
        if let Some(why) = crate::damage::job_damage(files, job) {
            on_damaged(&job.site, &why);
            continue;
        }
        let visited = crate::grid::for_each_link(files, job, |r| {
            writer.row(&job.site, r)?;
            rows += 1;
            on_row(&job.site, r);
            Ok::<(), io::Error>(())
        });
        match visited {
            Ok(()) => {}
            Err(LinkReadError::Visit(e)) => return Err(ExportError::Write(e)),
            Err(e) => {
                return Err(ExportError::Links {
                    site: job.site.clone(),
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_without_done_jobs_exports_the_header_only() {
        let dir = crate::grid::MemoryLinks::new();
        let mut w =
            ExportWriter::new(Vec::new(), beebot_shared::export::Format::Tsv).expect("writer");
        let mut seen = 0;
        let rows = export_round(&dir, &[], &mut w, |_, _| seen += 1, |_, _| {}).expect("export");
        assert_eq!((rows, seen), (0, 0));
        let out = String::from_utf8(w.finish().expect("finish")).expect("utf-8");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("site\t"), "{out}");
    }

    #[test]
    fn formats_parse_by_their_names_only() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
        }
        let e = "csv".parse::<Format>().unwrap_err().to_string();
        assert!(e.contains("tsv, jsonl or parquet"), "{e}");
    }
}
