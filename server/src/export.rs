//! A round's outbound links, exported: the one loop over a round's done jobs
//! that the admin API's export (and the demo's check against the truth)
//! share.
//!
//! Sites come in name order; a site scanned in several scans (continuations)
//! is the union of their link files, each (source, target) pair once
//! ([`crate::grid::for_each_job_link`]). Only jobs that are done with an
//! accepted result are exported: a failed or cancelled job has no rows. This
//! module never changes the grid: it reads link files and writes rows.

use std::io::{self, Write};
use std::path::Path;

use beebot_shared::export::ExportWriter;
use beebot_shared::linkfile::LinkRecord;

use crate::grid::LinkReadError;
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

/// Write the link records of `jobs` that are done (with their accepted
/// result) to `writer`, sites in name order; `on_row` sees each row written
/// (its site and record). Returns the number of rows. The writer is not
/// finished: the caller ends it ([`ExportWriter::finish`]).
pub fn export_round<W: Write>(
    links_dir: &Path,
    jobs: &[JobRecord],
    writer: &mut ExportWriter<W>,
    mut on_row: impl FnMut(&str, &LinkRecord),
) -> Result<u64, ExportError> {
    let mut done: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| j.state == JobState::Done && j.result.is_some())
        .collect();
    done.sort_by(|a, b| a.site.cmp(&b.site));
    let mut rows = 0u64;
    for job in done {
        let visited = crate::grid::for_each_job_link(links_dir, job, |r| {
            writer.write(&job.site, r)?;
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
    use beebot_shared::export::Format;

    #[test]
    fn a_round_without_done_jobs_exports_the_header_only() {
        let dir = std::env::temp_dir();
        let mut w = ExportWriter::new(Vec::new(), Format::Tsv).expect("writer");
        let mut seen = 0;
        let rows = export_round(&dir, &[], &mut w, |_, _| seen += 1).expect("export");
        assert_eq!((rows, seen), (0, 0));
        let out = String::from_utf8(w.finish().expect("finish")).expect("utf-8");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("site\t"), "{out}");
    }
}
