//! Where `beebot-server export --out FILE` puts an export: compression
//! chosen by the file's extension (`.zst` zstd, `.gz` gzip, anything else
//! plain), the format checked against the name (`links.parquet`,
//! `links.jsonl.gz`), and a temporary name in the same directory renamed to
//! `FILE` only when the export ended well.
//!
//! Invariants: a file at the asked name is always a whole export (the
//! rename is the last step, after the compressor's trailer, an fsync and
//! before the directory's fsync); an export that fails or is dropped
//! midway leaves no file behind (the temporary file is removed with its
//! handle). Parquet is never compressed again: its pages are zstd inside.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use tempfile::NamedTempFile;

use super::Format;

/// zstd's level for `.zst` output (its default: fast, a good ratio).
pub const ZSTD_LEVEL: i32 = 3;
/// Buffer between the stream and the compressor or file.
const BUFFER_BYTES: usize = 256 * 1024;

/// How the output file is compressed, from its last extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Plain,
    Gzip,
    Zstd,
}

impl Compression {
    /// `.gz` is gzip, `.zst` zstd; any other name (or none) is plain.
    pub fn of(path: &Path) -> Compression {
        match path.extension().and_then(|e| e.to_str()) {
            Some("gz") => Compression::Gzip,
            Some("zst") => Compression::Zstd,
            _ => Compression::Plain,
        }
    }
}

/// A format and an output name that do not go together.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    #[error("--format {given} but {path} names a {named} file: use one or the other")]
    Mismatch {
        given: &'static str,
        named: &'static str,
        path: String,
    },
    #[error(
        "{path}: Parquet is not compressed again (its pages are zstd inside); \
         name the file .parquet"
    )]
    ParquetCompressed { path: String },
}

/// The format a file name names, looking through a compression extension:
/// `links.tsv.gz` is TSV, `links.parquet` Parquet, `links.txt` none.
pub fn format_named(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?;
    let name = match Compression::of(path) {
        Compression::Plain => name,
        _ => name.rsplit_once('.').map_or(name, |(stem, _)| stem),
    };
    let ext = name.rsplit_once('.')?.1;
    Format::ALL.into_iter().find(|f| f.name() == ext)
}

/// The format of an export: `--format` when given, else the one `out`
/// names, else TSV. A `--format` that contradicts the name, or Parquet
/// with a compression extension, is an error.
pub fn choose_format(given: Option<Format>, out: Option<&Path>) -> Result<Format, OutputError> {
    let Some(path) = out else {
        return Ok(given.unwrap_or_default());
    };
    let named = format_named(path);
    let format = match (given, named) {
        (Some(g), Some(n)) if g != n => {
            return Err(OutputError::Mismatch {
                given: g.name(),
                named: n.name(),
                path: path.display().to_string(),
            })
        }
        (Some(g), _) => g,
        (None, n) => n.unwrap_or_default(),
    };
    if format == Format::Parquet && Compression::of(path) != Compression::Plain {
        return Err(OutputError::ParquetCompressed {
            path: path.display().to_string(),
        });
    }
    Ok(format)
}

enum Sink {
    Plain(BufWriter<NamedTempFile>),
    Gzip(GzEncoder<BufWriter<NamedTempFile>>),
    Zstd(zstd::Encoder<'static, BufWriter<NamedTempFile>>),
}

/// An output file being written under a temporary name.
pub struct OutFile {
    sink: Sink,
    path: PathBuf,
}

impl OutFile {
    /// Start writing `path` (compressed by its extension) under a temporary
    /// name beside it.
    pub fn create(path: &Path) -> io::Result<OutFile> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".partial")
            .tempfile_in(dir)?;
        let file = BufWriter::with_capacity(BUFFER_BYTES, temp);
        let sink = match Compression::of(path) {
            Compression::Plain => Sink::Plain(file),
            Compression::Gzip => Sink::Gzip(GzEncoder::new(file, flate2::Compression::default())),
            Compression::Zstd => Sink::Zstd(zstd::Encoder::new(file, ZSTD_LEVEL)?),
        };
        Ok(OutFile {
            sink,
            path: path.to_path_buf(),
        })
    }

    /// End the compression, make the file durable and give it its name.
    pub fn commit(self) -> io::Result<()> {
        let file = match self.sink {
            Sink::Plain(f) => f,
            Sink::Gzip(z) => z.finish()?,
            Sink::Zstd(z) => z.finish()?,
        };
        let temp = file.into_inner().map_err(io::IntoInnerError::into_error)?;
        temp.as_file().sync_all()?;
        temp.persist(&self.path).map_err(|e| e.error)?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.sink {
            Sink::Plain(f) => f.write(buf),
            Sink::Gzip(z) => z.write(buf),
            Sink::Zstd(z) => z.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Plain(f) => f.flush(),
            Sink::Gzip(z) => z.flush(),
            Sink::Zstd(z) => z.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn the_name_chooses_compression_and_checks_the_format() {
        let p = Path::new;
        assert_eq!(Compression::of(p("a/links.tsv.zst")), Compression::Zstd);
        assert_eq!(Compression::of(p("links.jsonl.gz")), Compression::Gzip);
        assert_eq!(Compression::of(p("links.out")), Compression::Plain);
        assert_eq!(format_named(p("links.jsonl.gz")), Some(Format::Jsonl));
        assert_eq!(format_named(p("links.gz")), None);
        assert_eq!(
            choose_format(None, Some(p("x.parquet"))),
            Ok(Format::Parquet)
        );
        assert_eq!(choose_format(None, Some(p("x.out"))), Ok(Format::Tsv));
        assert_eq!(
            choose_format(Some(Format::Jsonl), Some(p("x.gz"))),
            Ok(Format::Jsonl)
        );
        assert_eq!(choose_format(Some(Format::Jsonl), None), Ok(Format::Jsonl));
        let e = choose_format(Some(Format::Parquet), Some(p("x.tsv"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("--format parquet but x.tsv names a tsv"),
            "{e}"
        );
        let e = choose_format(Some(Format::Parquet), Some(p("x.zst"))).unwrap_err();
        assert!(matches!(e, OutputError::ParquetCompressed { .. }), "{e}");
        let e = choose_format(None, Some(p("x.parquet.gz"))).unwrap_err();
        assert!(matches!(e, OutputError::ParquetCompressed { .. }), "{e}");
    }

    #[test]
    fn a_committed_file_is_whole_and_compressed_by_its_name() {
        let dir = tempfile::tempdir().expect("dir");
        let text = "site\tsource_url\n".repeat(1000);
        for (name, decode) in [
            ("a.tsv", None),
            ("a.tsv.gz", Some(Compression::Gzip)),
            ("a.tsv.zst", Some(Compression::Zstd)),
        ] {
            let path = dir.path().join(name);
            let mut f = OutFile::create(&path).expect("create");
            f.write_all(text.as_bytes()).expect("write");
            f.commit().expect("commit");
            let raw = std::fs::read(&path).expect("read");
            let mut got = String::new();
            match decode {
                None => got = String::from_utf8(raw).expect("utf-8"),
                Some(Compression::Gzip) => {
                    flate2::read::GzDecoder::new(&raw[..])
                        .read_to_string(&mut got)
                        .expect("gunzip");
                }
                Some(_) => {
                    got =
                        String::from_utf8(zstd::decode_all(&raw[..]).expect("zstd")).expect("utf-8")
                }
            }
            assert_eq!(got, text, "{name}");
        }
        assert_eq!(entries(dir.path()), ["a.tsv", "a.tsv.gz", "a.tsv.zst"]);
    }

    #[test]
    fn an_export_dropped_midway_leaves_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("links.tsv.gz");
        let mut f = OutFile::create(&path).expect("create");
        f.write_all(b"site\t").expect("write");
        assert_eq!(entries(dir.path()).len(), 1, "the temporary file");
        assert!(entries(dir.path())[0].ends_with(".partial"));
        drop(f);
        assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
    }
}
