//! The link-file format: a job's outbound links, zstd-compressed with a checksum,
//! and the scan summary that travels beside it.
//!
//! Layout before compression: the magic `BEEBOTLF`, then one codec value
//! `(LinkFileHeader, Vec<LinkRecord>)`. Decompression is bounded by
//! [`MAX_LINK_FILE_DECOMPRESSED_BYTES`], so a zstd bomb is an error; records
//! are decoded one at a time with a running count and memory budget
//! ([`MAX_LINK_FILE_MEMORY_BYTES`]), so a record bomb (a few KB of zeros
//! after a huge count) is refused at the first record over a limit.
//!
//! Bytes in, bytes out: this module never reads or writes files itself.
//!
//! Reading: `for_each_record_ref` lends one record at a time whose texts'
//! buffers are reused (no allocation per record), and the compressed bytes are
//! read in place. Decompression takes one of at most `KEPT_DECOMPRESSORS` (8)
//! kept zstd contexts; a context is put back only while it holds at most
//! `KEPT_DECOMPRESSOR_BYTES` (1 MiB: a file decompressing past about that frees
//! its own), and every context refuses a frame whose window passes
//! `limits::MAX_ZSTD_WINDOW_LOG` (8 MiB) before allocating it.
//!
//! Writing: `encode` writes the body once and compresses it in one call, with a
//! context of its own or the caller's (`encode_with`: the load generator keeps
//! a few). `LinkFileWriter` writes the same bytes a borrowed record at a time,
//! and refuses more or fewer records than its header claims.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::extract::LinkTag;
use crate::limits::{
    MAX_LINK_FILE_BYTES, MAX_LINK_FILE_DECOMPRESSED_BYTES, MAX_LINK_FILE_MEMORY_BYTES,
    MAX_LINK_RECORDS,
};

/// Current link-file format version.
pub const LINK_FILE_VERSION: u16 = 1;
const MAGIC: &[u8; 8] = b"BEEBOTLF";
/// zstd level: fast, and link lists compress well even so.
const ZSTD_LEVEL: i32 = 3;

/// What a link file is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkFileHeader {
    pub format_version: u16,
    pub round_id: u64,
    pub unit_id: u64,
    /// The site's host, as in the target set.
    pub site: String,
    pub pages: u64,
    pub records: u64,
}

impl LinkFileHeader {
    /// The header of a link file for `unit`: this format, its round, unit
    /// and site, with `pages` scanned and `records` in the file.
    pub fn of_unit(unit: &crate::sign::WorkUnit, pages: u64, records: u64) -> LinkFileHeader {
        LinkFileHeader {
            format_version: LINK_FILE_VERSION,
            round_id: unit.round_id,
            unit_id: unit.unit_id,
            site: unit.site.clone(),
            pages,
            records,
        }
    }
}

/// One distinct (source page, target URL) pair leaving the site's scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    pub source_url: String,
    pub target_url: String,
    pub tag: LinkTag,
    pub nofollow: bool,
    /// Whitespace collapsed, at most [`crate::limits::MAX_ANCHOR_CHARS`] characters.
    pub anchor_text: String,
}

/// Why a scan stopped before its frontier ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    MaxPages,
    MaxTime,
    Deadline,
    FrontierFull,
    Cancelled,
    /// robots.txt answered 5xx or could not be fetched: the host is not crawled now.
    RobotsUnavailable,
    /// The seed page itself could not be fetched.
    SeedUnreachable,
    /// The site stopped answering mid-scan (this host went offline, or the
    /// site did): the pages not fetched wait in the scan's state.
    Offline,
    /// The site's name did not resolve: nothing was fetched.
    DnsFailed,
    /// The site's address refused the connection: nothing was fetched.
    ConnectionRefused,
    /// The site's address is private (loopback, private or link-local
    /// network) and the crawler may not go there: nothing was fetched.
    PrivateAddress,
}

impl StopReason {
    /// Whether a scan stopped this way reached its natural end, as far as
    /// scanning goes: the page cap, or a site that cannot be scanned now.
    /// The others (the time budget, the deadline, a cancel) stopped it
    /// early: its job continues from its frontier.
    pub fn is_natural_end(self) -> bool {
        match self {
            StopReason::MaxPages
            | StopReason::FrontierFull
            | StopReason::RobotsUnavailable
            | StopReason::SeedUnreachable
            | StopReason::DnsFailed
            | StopReason::ConnectionRefused
            | StopReason::PrivateAddress => true,
            StopReason::MaxTime
            | StopReason::Deadline
            | StopReason::Cancelled
            | StopReason::Offline => false,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::MaxPages => "max-pages",
            StopReason::MaxTime => "max-time",
            StopReason::Deadline => "deadline",
            StopReason::FrontierFull => "frontier-full",
            StopReason::Cancelled => "cancelled",
            StopReason::RobotsUnavailable => "robots-unavailable",
            StopReason::SeedUnreachable => "seed-unreachable",
            StopReason::Offline => "offline",
            StopReason::DnsFailed => "dns-failed",
            StopReason::ConnectionRefused => "connection-refused",
            StopReason::PrivateAddress => "private-address",
        }
    }

    /// Whether a scan stopped this way could not scan its site at all
    /// (robots.txt or the seed page unreachable, the name not resolving,
    /// the connection refused, a private address): a scan so stopped
    /// without a page is a failed attempt, not a result.
    pub fn is_site_failure(self) -> bool {
        matches!(
            self,
            StopReason::RobotsUnavailable
                | StopReason::SeedUnreachable
                | StopReason::DnsFailed
                | StopReason::ConnectionRefused
                | StopReason::PrivateAddress
        )
    }
}

/// What a scan did, sent beside its link file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScanSummary {
    pub pages: u64,
    pub bytes: u64,
    /// Outbound link records (distinct source, target pairs).
    pub links: u64,
    pub distinct_target_hosts: u64,
    /// Requests that failed (network errors, timeouts, refused addresses).
    pub errors: u64,
    pub elapsed_ms: u64,
    /// The limit that stopped the scan, if one did.
    pub stopped_by: Option<StopReason>,
    /// HTTP status code → count.
    pub status_counts: Vec<(u16, u64)>,
    /// Pages skipped because robots.txt disallowed them.
    pub robots_disallowed: u64,
    // What the crawler's bounds did (each a count; all zero on a tame site).
    /// Requests that ran out of time (connect, read or the whole request); a
    /// page whose body timed out keeps and parses the part read.
    pub timeouts: u64,
    /// Requests refused because the address was private, loopback, link-local
    /// or otherwise not public.
    pub refused_addresses: u64,
    /// Page bodies cut at the unit's bytes-per-page limit (the part read is parsed).
    pub truncated_pages: u64,
    /// 2xx answers that were not HTML, so not parsed.
    pub non_html: u64,
    /// Redirects not followed: loops, too many hops, bad or non-HTTP locations.
    pub redirect_errors: u64,
    /// In-scope links skipped as crawler traps (repeated path segments, too
    /// many segments, e.g. endless calendars).
    pub trap_urls: u64,
    /// Links skipped for being longer than the URL length limit.
    pub long_urls: u64,
    /// In-scope links not queued because they were past the depth limit.
    pub beyond_depth: u64,
    /// Pages whose links reached the per-page cap (the rest were ignored).
    pub link_capped_pages: u64,
    /// In-scope links dropped because the frontier was full.
    pub frontier_dropped: u64,
    /// Outbound records dropped beyond the link-file record limit.
    pub records_dropped: u64,
    /// robots.txt files cut at the 500 KiB limit (the part read is obeyed).
    pub robots_truncated: u64,
}

/// Failures reading or writing a link file.
#[derive(Debug, thiserror::Error)]
pub enum LinkFileError {
    #[error("link file is {got} bytes, the limit is {limit}")]
    TooLarge { got: usize, limit: usize },
    #[error("link file decompresses past {0} bytes")]
    DecompressedTooLarge(usize),
    #[error("link file is corrupt: {0}")]
    Corrupt(String),
    #[error("link file has {0} records, more than allowed")]
    TooManyRecords(usize),
    #[error("link file format version {0} is not supported")]
    Version(u16),
    #[error("link file header says {claimed} records but holds {actual}")]
    CountMismatch { claimed: u64, actual: usize },
    #[error("link file records take more than {0} bytes in memory")]
    TooMuchMemory(usize),
    /// A record refused by the caller of [`for_each_record`].
    #[error("{0}")]
    Refused(String),
}

/// Compress a header and its records into a link file.
pub fn encode(header: &LinkFileHeader, records: &[LinkRecord]) -> Result<Vec<u8>, LinkFileError> {
    let mut zstd = new_compressor()?;
    encode_with(&mut zstd, header, records)
}

/// A zstd compression context of link files.
pub type Compressor = zstd::bulk::Compressor<'static>;

/// A compression context as [`encode_with`] wants it (level, checksum).
pub fn new_compressor() -> Result<Compressor, LinkFileError> {
    let zerr = |e: std::io::Error| LinkFileError::Corrupt(e.to_string());
    let mut zstd = zstd::bulk::Compressor::new(ZSTD_LEVEL).map_err(zerr)?;
    zstd.include_checksum(true).map_err(zerr)?;
    Ok(zstd)
}

/// [`encode`] with a compression context of the caller's
/// ([`new_compressor`]), kept from one file to the next by a maker of many
/// files (the load generator); it keeps the tables the largest file asked for.
pub fn encode_with(
    zstd: &mut Compressor,
    header: &LinkFileHeader,
    records: &[LinkRecord],
) -> Result<Vec<u8>, LinkFileError> {
    if records.len() > MAX_LINK_RECORDS {
        return Err(LinkFileError::TooManyRecords(records.len()));
    }
    let memory = records_memory(records);
    if memory > MAX_LINK_FILE_MEMORY_BYTES {
        return Err(LinkFileError::TooMuchMemory(MAX_LINK_FILE_MEMORY_BYTES));
    }
    // Magic and body into one buffer (no copy of the body), then one
    // compression call: zstd knows the size, sizes its window and tables to
    // it, and writes it in the frame's header. A record's encoding is its
    // texts and at most 12 bytes of lengths (up to 3 each) and flags; the
    // header's a few hundred.
    let texts = memory - records.len() * LINK_RECORD_OVERHEAD_BYTES;
    let mut raw = Vec::with_capacity(MAGIC.len() + texts + records.len() * 12 + 1024);
    raw.extend_from_slice(MAGIC);
    bincode::serde::encode_into_std_write((header, records), &mut raw, bincode::config::standard())
        .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    compress_raw(zstd, &raw)
}

/// The link file of `raw` (the magic, then the encoded header and records):
/// within [`MAX_LINK_FILE_DECOMPRESSED_BYTES`] and [`MAX_LINK_FILE_BYTES`].
fn compress_raw(zstd: &mut Compressor, raw: &[u8]) -> Result<Vec<u8>, LinkFileError> {
    if raw.len() - MAGIC.len() > MAX_LINK_FILE_DECOMPRESSED_BYTES {
        return Err(LinkFileError::DecompressedTooLarge(
            MAX_LINK_FILE_DECOMPRESSED_BYTES,
        ));
    }
    let out = zstd
        .compress(raw)
        .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    if out.len() > MAX_LINK_FILE_BYTES {
        return Err(LinkFileError::TooLarge {
            got: out.len(),
            limit: MAX_LINK_FILE_BYTES,
        });
    }
    Ok(out)
}

/// A record of borrowed texts: encoded exactly as the [`LinkRecord`] of the
/// same fields.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LinkRecordRef<'a> {
    pub source_url: &'a str,
    pub target_url: &'a str,
    pub tag: LinkTag,
    pub nofollow: bool,
    pub anchor_text: &'a str,
}

impl LinkRecordRef<'_> {
    /// The memory the record takes decoded, as [`for_each_record`] charges
    /// it: its texts plus [`LINK_RECORD_OVERHEAD_BYTES`].
    pub fn memory(&self) -> usize {
        LINK_RECORD_OVERHEAD_BYTES
            + self.source_url.len()
            + self.target_url.len()
            + self.anchor_text.len()
    }
}

impl<'a> From<&'a LinkRecord> for LinkRecordRef<'a> {
    fn from(r: &'a LinkRecord) -> LinkRecordRef<'a> {
        // Every field named: one added to `LinkRecord` stops the build
        // here until it is added to the borrowed record too.
        let LinkRecord {
            source_url,
            target_url,
            tag,
            nofollow,
            anchor_text,
        } = r;
        LinkRecordRef {
            source_url,
            target_url,
            tag: *tag,
            nofollow: *nofollow,
            anchor_text,
        }
    }
}

/// A link file written a record at a time from borrowed texts: byte for
/// byte what [`encode_with`] makes of the same header and records, with no
/// record allocated, for a maker of many files (the load generator). The
/// header's `records` is the count written; the limits are
/// [`encode_with`]'s.
pub struct LinkFileWriter {
    raw: Vec<u8>,
    claimed: u64,
    written: u64,
    memory: usize,
}

impl LinkFileWriter {
    /// A file of `header` and the `header.records` records to come.
    pub fn new(header: &LinkFileHeader) -> Result<LinkFileWriter, LinkFileError> {
        let claimed = header.records;
        if claimed > MAX_LINK_RECORDS as u64 {
            return Err(LinkFileError::TooManyRecords(
                usize::try_from(claimed).unwrap_or(usize::MAX),
            ));
        }
        let mut raw = Vec::with_capacity(1024);
        raw.extend_from_slice(MAGIC);
        // `(header, records)` as encode_with writes it: the header, then
        // the sequence's length, then its records.
        bincode::serde::encode_into_std_write(
            (header, claimed),
            &mut raw,
            bincode::config::standard(),
        )
        .map_err(corrupt)?;
        Ok(LinkFileWriter {
            raw,
            claimed,
            written: 0,
            memory: 0,
        })
    }

    /// Append one record (one past the header's count is refused).
    pub fn push(&mut self, r: &LinkRecordRef<'_>) -> Result<(), LinkFileError> {
        if self.written == self.claimed {
            return Err(LinkFileError::CountMismatch {
                claimed: self.claimed,
                actual: usize::try_from(self.written + 1).unwrap_or(usize::MAX),
            });
        }
        self.memory = self.memory.saturating_add(r.memory());
        if self.memory > MAX_LINK_FILE_MEMORY_BYTES {
            return Err(LinkFileError::TooMuchMemory(MAX_LINK_FILE_MEMORY_BYTES));
        }
        bincode::serde::encode_into_std_write(r, &mut self.raw, bincode::config::standard())
            .map_err(corrupt)?;
        self.written += 1;
        Ok(())
    }

    /// The link file, compressed with `zstd` ([`new_compressor`]); its
    /// records must be as many as its header said.
    pub fn finish_with(self, zstd: &mut Compressor) -> Result<Vec<u8>, LinkFileError> {
        if self.written != self.claimed {
            return Err(LinkFileError::CountMismatch {
                claimed: self.claimed,
                actual: usize::try_from(self.written).unwrap_or(usize::MAX),
            });
        }
        compress_raw(zstd, &self.raw)
    }
}

/// Decompress (bounded) and decode a link file, checking its checksum, magic,
/// version, record count and the memory its records take (see
/// [`for_each_record`]).
pub fn decode(bytes: &[u8]) -> Result<(LinkFileHeader, Vec<LinkRecord>), LinkFileError> {
    let mut records = Vec::new();
    let header = for_each_record(bytes, |r| {
        records.push(r);
        Ok(())
    })?;
    Ok((header, records))
}

/// Memory one record is charged besides its texts: its own size in a `Vec`.
pub const LINK_RECORD_OVERHEAD_BYTES: usize = std::mem::size_of::<LinkRecord>();

/// Largest header a link file may carry (a site name and six numbers).
const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The memory `records` take when decoded, as [`for_each_record`] counts it:
/// their texts' bytes plus [`LINK_RECORD_OVERHEAD_BYTES`] each.
pub fn records_memory(records: &[LinkRecord]) -> usize {
    records
        .iter()
        .map(|r| LinkRecordRef::from(r).memory())
        .sum()
}

/// Decode a link file as a stream, handing each record to `f` as it is read:
/// the header first (its version and count checked), then the records one
/// at a time from the decompressing reader, with a running count (refused
/// at the first record past [`MAX_LINK_RECORDS`] or past the header's
/// count) and a running charge of decoded memory (texts plus
/// [`LINK_RECORD_OVERHEAD_BYTES`] per record, at most
/// [`MAX_LINK_FILE_MEMORY_BYTES`]; a text's length is checked against what
/// is left before it is allocated). Nothing is allocated for a claimed
/// count. The stream is read to its end, so the zstd checksum and trailing
/// bytes are checked before `Ok`. An `Err` from `f` stops the decoding
/// and is returned as it is.
pub fn for_each_record(
    bytes: &[u8],
    mut f: impl FnMut(LinkRecord) -> Result<(), LinkFileError>,
) -> Result<LinkFileHeader, LinkFileError> {
    stream(bytes, MAX_LINK_FILE_MEMORY_BYTES, |r| f(r.clone()))
}

/// [`for_each_record`] lending each record instead of giving it: one
/// record's texts are read into the same buffers every time, so a reader
/// that keeps nothing (the server's check of an upload, the export)
/// allocates nothing per record. The same checks and memory charge.
pub fn for_each_record_ref(
    bytes: &[u8],
    f: impl FnMut(&LinkRecord) -> Result<(), LinkFileError>,
) -> Result<LinkFileHeader, LinkFileError> {
    stream(bytes, MAX_LINK_FILE_MEMORY_BYTES, f)
}

/// [`for_each_record_ref`] with a memory budget of `budget` bytes.
fn stream(
    bytes: &[u8],
    budget: usize,
    f: impl FnMut(&LinkRecord) -> Result<(), LinkFileError>,
) -> Result<LinkFileHeader, LinkFileError> {
    if bytes.len() > MAX_LINK_FILE_BYTES {
        return Err(LinkFileError::TooLarge {
            got: bytes.len(),
            limit: MAX_LINK_FILE_BYTES,
        });
    }
    // With a kept decompression context (see `KEPT_DECOMPRESSORS`).
    let mut dctx = take_decompressor()?;
    let out = stream_with(&mut dctx, bytes, budget, f);
    put_back_decompressor(dctx);
    out
}

fn stream_with(
    dctx: &mut DCtx,
    bytes: &[u8],
    budget: usize,
    mut f: impl FnMut(&LinkRecord) -> Result<(), LinkFileError>,
) -> Result<LinkFileHeader, LinkFileError> {
    // The compressed bytes are read in place (a slice is already buffered).
    let decoder = zstd::stream::read::Decoder::with_context(bytes, dctx);
    let mut r = std::io::BufReader::with_capacity(
        64 * 1024,
        Bounded {
            inner: decoder,
            left: MAX_LINK_FILE_DECOMPRESSED_BYTES as u64,
            over: false,
        },
    );
    let header = read_body(&mut r, budget, &mut f).map_err(|e| {
        if r.get_ref().over {
            LinkFileError::DecompressedTooLarge(MAX_LINK_FILE_DECOMPRESSED_BYTES)
        } else {
            e
        }
    })?;
    Ok(header)
}

/// Decompression contexts kept between link files (the server checks one
/// per upload on whichever blocking thread is free), at most this many: a
/// file reuses one instead of building a context and its buffers.
const KEPT_DECOMPRESSORS: usize = 8;

/// A context is put back only while its buffers take at most this: one that
/// grew for a large file (its window is about the file's decompressed size:
/// past this from some 15,000 records) is freed with that file. So the
/// kept ones hold at most 8 × 1 MiB.
const KEPT_DECOMPRESSOR_BYTES: usize = 1 << 20;

static DECOMPRESSORS: crate::util::Kept<DCtx> = crate::util::Kept::new(KEPT_DECOMPRESSORS);

type DCtx = zstd::zstd_safe::DCtx<'static>;

/// A kept decompression context, or a new one (a decoder made with one
/// resets its session first, so whatever the last file left half read is
/// forgotten).
fn take_decompressor() -> Result<DCtx, LinkFileError> {
    if let Some(d) = DECOMPRESSORS.take() {
        return Ok(d);
    }
    new_decompressor()
}

/// A decompression context that refuses a frame asking for a window past
/// [`crate::limits::MAX_ZSTD_WINDOW_LOG`] (kept through its session's resets).
fn new_decompressor() -> Result<DCtx, LinkFileError> {
    let mut dctx =
        DCtx::try_create().ok_or_else(|| corrupt("no memory for a decompression context"))?;
    dctx.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(
        crate::limits::MAX_ZSTD_WINDOW_LOG,
    ))
    .map_err(|code| corrupt(zstd::zstd_safe::get_error_name(code)))?;
    Ok(dctx)
}

/// Keep `dctx` for the next file if it is small enough and there is room.
fn put_back_decompressor(dctx: DCtx) {
    if dctx.sizeof() <= KEPT_DECOMPRESSOR_BYTES {
        DECOMPRESSORS.put_back(dctx);
    }
}

/// The decompressed stream, refused past [`MAX_LINK_FILE_DECOMPRESSED_BYTES`].
struct Bounded<R> {
    inner: R,
    left: u64,
    over: bool,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            // One byte more means the limit is passed.
            let mut one = [0u8; 1];
            return match self.inner.read(&mut one)? {
                0 => Ok(0),
                _ => {
                    self.over = true;
                    Err(std::io::Error::other("decompressed size limit passed"))
                }
            };
        }
        let cap = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..cap])?;
        self.left -= n as u64;
        Ok(n)
    }
}

fn corrupt(e: impl std::fmt::Display) -> LinkFileError {
    LinkFileError::Corrupt(e.to_string())
}

fn bincode_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_HEADER_BYTES>()
}

/// One small value of the stream (the header, a length, a tag, a flag).
fn read_value<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> Result<T, LinkFileError> {
    bincode::serde::decode_from_std_read(r, bincode_config()).map_err(corrupt)
}

/// Texts up to this long are allocated at their claimed length before they
/// are read (a lie costs at most this much); longer ones as they arrive.
const TEXT_READ_AT_ONCE: usize = 16 * 1024;

/// A text into `out` (its buffer reused), its length checked against the
/// memory `budget` left before anything is allocated.
fn read_text_into(
    r: &mut impl Read,
    budget: &mut usize,
    out: &mut String,
) -> Result<(), LinkFileError> {
    let len: u64 = read_value(r)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= *budget)
        .ok_or(LinkFileError::TooMuchMemory(MAX_LINK_FILE_MEMORY_BYTES))?;
    *budget -= len;
    let mut buf = std::mem::take(out).into_bytes();
    buf.clear();
    if len <= TEXT_READ_AT_ONCE {
        // A short text (every URL and anchor text of a real page) is read
        // in one go.
        buf.resize(len, 0);
        r.read_exact(&mut buf)
            .map_err(|_| LinkFileError::Corrupt("truncated text".into()))?;
    } else {
        // A longer one is allocated only as it arrives: a length claimed by
        // a short file costs what the file holds, not what it claims.
        let got = r.take(len as u64).read_to_end(&mut buf).map_err(corrupt)?;
        if got != len {
            return Err(LinkFileError::Corrupt("truncated text".into()));
        }
    }
    *out = String::from_utf8(buf).map_err(corrupt)?;
    Ok(())
}

fn read_body(
    r: &mut impl Read,
    mut budget: usize,
    f: &mut impl FnMut(&LinkRecord) -> Result<(), LinkFileError>,
) -> Result<LinkFileHeader, LinkFileError> {
    let mut magic = [0u8; MAGIC.len()];
    // A frame zstd refuses (its window past the bound, a damaged header)
    // fails here, at the first read: its reason is kept.
    r.read_exact(&mut magic).map_err(corrupt)?;
    if &magic != MAGIC {
        return Err(LinkFileError::Corrupt("bad magic".into()));
    }
    let header: LinkFileHeader = read_value(r)?;
    if header.format_version != LINK_FILE_VERSION {
        return Err(LinkFileError::Version(header.format_version));
    }
    if header.records > MAX_LINK_RECORDS as u64 {
        return Err(LinkFileError::TooManyRecords(
            usize::try_from(header.records).unwrap_or(usize::MAX),
        ));
    }
    // The records' sequence length: a claim, checked, never allocated for.
    let claimed: u64 = read_value(r)?;
    // Every record is read into this one (its texts' buffers reused).
    let mut record = LinkRecord {
        source_url: String::new(),
        target_url: String::new(),
        tag: LinkTag::A,
        nofollow: false,
        anchor_text: String::new(),
    };
    let mut count: u64 = 0;
    loop {
        if count == claimed {
            break;
        }
        if count >= MAX_LINK_RECORDS as u64 {
            return Err(LinkFileError::TooManyRecords(count as usize + 1));
        }
        if count >= header.records {
            return Err(LinkFileError::CountMismatch {
                claimed: header.records,
                actual: count as usize + 1,
            });
        }
        budget = budget
            .checked_sub(LINK_RECORD_OVERHEAD_BYTES)
            .ok_or(LinkFileError::TooMuchMemory(MAX_LINK_FILE_MEMORY_BYTES))?;
        read_text_into(r, &mut budget, &mut record.source_url)?;
        read_text_into(r, &mut budget, &mut record.target_url)?;
        record.tag = read_value(r)?;
        record.nofollow = read_value(r)?;
        read_text_into(r, &mut budget, &mut record.anchor_text)?;
        f(&record)?;
        count += 1;
    }
    if count != header.records {
        return Err(LinkFileError::CountMismatch {
            claimed: header.records,
            actual: count as usize,
        });
    }
    // To the end: the zstd checksum is checked there, and nothing may follow.
    let mut rest = [0u8; 1];
    match r.read(&mut rest).map_err(corrupt)? {
        0 => Ok(header),
        _ => Err(LinkFileError::Corrupt(
            "trailing bytes after the records".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;

    #[test]
    fn a_file_written_a_record_at_a_time_is_byte_for_byte_the_encoded_one() {
        let tags = [
            LinkTag::A,
            LinkTag::Area,
            LinkTag::MetaRefresh,
            LinkTag::Redirect,
        ];
        for n in [0usize, 1, 250, 3_000] {
            let records: Vec<LinkRecord> = (0..n)
                .map(|i| LinkRecord {
                    source_url: format!("http://www.example.edu/p/{}", i / 40),
                    target_url: format!("https://other-{}.example.org/item-{i}", i % 7),
                    tag: tags[i % tags.len()],
                    nofollow: i % 3 == 0,
                    anchor_text: "x".repeat(i % 300),
                })
                .collect();
            let header = LinkFileHeader {
                format_version: LINK_FILE_VERSION,
                round_id: 4,
                unit_id: 1 << 40,
                site: "www.example.edu".into(),
                pages: n.div_ceil(40) as u64,
                records: n as u64,
            };
            let mut w = LinkFileWriter::new(&header).expect("writer");
            for r in &records {
                w.push(&r.into()).expect("push");
            }
            let written = w
                .finish_with(&mut new_compressor().expect("zstd"))
                .expect("finish");
            let encoded = encode(&header, &records).expect("encode");
            assert_eq!(written, encoded, "{n} records");
            assert_eq!(decode(&written).expect("decodes"), (header, records));
        }
    }

    #[test]
    fn a_writer_refuses_more_or_fewer_records_than_its_header_says() {
        let header = LinkFileHeader {
            format_version: LINK_FILE_VERSION,
            round_id: 1,
            unit_id: 1,
            site: "www.example.edu".into(),
            pages: 1,
            records: 1,
        };
        let r = LinkRecordRef {
            source_url: "http://www.example.edu/",
            target_url: "https://other.example.org/",
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: "other",
        };
        let short = LinkFileWriter::new(&header).expect("writer");
        assert!(matches!(
            short.finish_with(&mut new_compressor().expect("zstd")),
            Err(LinkFileError::CountMismatch {
                claimed: 1,
                actual: 0
            })
        ));
        let mut long = LinkFileWriter::new(&header).expect("writer");
        long.push(&r).expect("the one claimed");
        assert!(matches!(
            long.push(&r),
            Err(LinkFileError::CountMismatch {
                claimed: 1,
                actual: 2
            })
        ));
        let many = LinkFileHeader {
            records: MAX_LINK_RECORDS as u64 + 1,
            ..header
        };
        assert!(matches!(
            LinkFileWriter::new(&many),
            Err(LinkFileError::TooManyRecords(_))
        ));
    }

    /// The causes of a site never reached are natural ends (the job does
    /// not continue from a frontier) and site failures (no page: a failed
    /// attempt); the reasons stored before them decode as they were.
    #[test]
    fn stop_reasons_name_each_cause_and_keep_their_encoding() {
        use StopReason as S;
        for s in [S::DnsFailed, S::ConnectionRefused, S::PrivateAddress] {
            assert!(s.is_natural_end() && s.is_site_failure(), "{s:?}");
        }
        for s in [S::RobotsUnavailable, S::SeedUnreachable] {
            assert!(s.is_site_failure(), "{s:?}");
        }
        for s in [
            S::MaxPages,
            S::MaxTime,
            S::Cancelled,
            S::Offline,
            S::FrontierFull,
        ] {
            assert!(!s.is_site_failure(), "{s:?}");
        }
        let names: Vec<&str> = [S::DnsFailed, S::ConnectionRefused, S::PrivateAddress]
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            names,
            ["dns-failed", "connection-refused", "private-address"]
        );
        // Variant indexes of the older reasons are unchanged (appended after them).
        let offline = codec::encode(&Some(S::Offline), 16).expect("encode");
        assert_eq!(offline, [1, 7]);
        let back: Option<StopReason> = codec::decode(&offline, 16).expect("decode");
        assert_eq!(back, Some(S::Offline));
    }

    fn sample(n: usize) -> (LinkFileHeader, Vec<LinkRecord>) {
        let records: Vec<LinkRecord> = (0..n)
            .map(|i| LinkRecord {
                source_url: format!("http://a.test/p{}", i % 7),
                target_url: format!("http://b{i}.test/"),
                tag: LinkTag::A,
                nofollow: i % 3 == 0,
                anchor_text: format!("link {i}"),
            })
            .collect();
        let header = LinkFileHeader {
            format_version: LINK_FILE_VERSION,
            round_id: 3,
            unit_id: 9,
            site: "a.test".into(),
            pages: 7,
            records: n as u64,
        };
        (header, records)
    }

    /// Kept decompression contexts: files of every size, a file cut short
    /// and a damaged one in between, decode as each does with a context of
    /// its own (a context a failed file left mid-frame is reset), and a
    /// context grown past `KEPT_DECOMPRESSOR_BYTES` is not kept.
    #[test]
    fn kept_decompression_contexts_decode_every_file_as_a_fresh_one_does() {
        let files: Vec<(usize, Vec<u8>)> = [3, 300, 20_000, 0, 3_000]
            .into_iter()
            .map(|n| {
                let (h, r) = sample(n);
                (n, encode(&h, &r).unwrap())
            })
            .collect();
        let fresh = |bytes: &[u8]| {
            let mut dctx = new_decompressor().unwrap();
            let mut n = 0;
            stream_with(&mut dctx, bytes, MAX_LINK_FILE_MEMORY_BYTES, |_| {
                n += 1;
                Ok(())
            })
            .map(|h| (h, n))
            .map_err(|e| e.to_string())
        };
        for round in 0..3 {
            for (n, bytes) in &files {
                let cut = &bytes[..bytes.len() * 2 / 3];
                let mut flipped = bytes.clone();
                let mid = flipped.len() / 2;
                flipped[mid] ^= 0x40;
                for b in [bytes.as_slice(), cut, &flipped] {
                    let mut got = 0;
                    let kept = for_each_record_ref(b, |_| {
                        got += 1;
                        Ok(())
                    })
                    .map(|h| (h, got))
                    .map_err(|e| e.to_string());
                    assert_eq!(kept, fresh(b), "round {round}, {n} records");
                }
                assert_eq!(decode(bytes).unwrap().1.len(), *n);
            }
        }
        assert!(DECOMPRESSORS.len() <= KEPT_DECOMPRESSORS);
        // The largest file grows a context past the bound (so it is not
        // kept); a median one's stays under it.
        let grown = |n: usize| {
            let bytes = &files.iter().find(|(m, _)| *m == n).unwrap().1;
            let mut dctx = new_decompressor().unwrap();
            stream_with(&mut dctx, bytes, MAX_LINK_FILE_MEMORY_BYTES, |_| Ok(())).unwrap();
            dctx.sizeof()
        };
        assert!(grown(20_000) > KEPT_DECOMPRESSOR_BYTES);
        assert!(grown(300) <= KEPT_DECOMPRESSOR_BYTES);
    }

    /// A file whose frame asks for a window past `MAX_ZSTD_WINDOW_LOG` (here
    /// 64 MiB, an honest file's records re-compressed by a hostile maker) is
    /// refused before the window is allocated; the same bytes decode with
    /// zstd's default bound, so the window alone is refused.
    #[test]
    fn a_file_asking_for_a_window_past_the_bound_is_refused() {
        let (h, r) = sample(300);
        let raw = zstd::decode_all(encode(&h, &r).unwrap().as_slice()).unwrap();
        let mut enc = zstd::stream::Encoder::new(Vec::new(), ZSTD_LEVEL).unwrap();
        enc.window_log(26).unwrap();
        enc.include_checksum(true).unwrap();
        std::io::Write::write_all(&mut enc, &raw).unwrap();
        let wide = enc.finish().unwrap();
        let err = for_each_record_ref(&wide, |_| Ok(())).unwrap_err();
        assert!(
            matches!(&err, LinkFileError::Corrupt(m) if m.contains("memory")),
            "{err}"
        );
        let mut unbounded = DCtx::create();
        let header = stream_with(
            &mut unbounded,
            &wide,
            MAX_LINK_FILE_MEMORY_BYTES,
            |_| Ok(()),
        );
        assert_eq!(header.unwrap(), h);
        // An honest file is well within the bound.
        assert!(for_each_record_ref(&encode(&h, &r).unwrap(), |_| Ok(())).is_ok());
    }

    #[test]
    fn round_trip() {
        let (h, r) = sample(100);
        let bytes = encode(&h, &r).unwrap();
        let (h2, r2) = decode(&bytes).unwrap();
        assert_eq!(h, h2);
        assert_eq!(r, r2);
    }

    #[test]
    fn flipped_byte_is_detected() {
        let (h, r) = sample(50);
        let mut bytes = encode(&h, &r).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn zstd_bomb_is_bounded() {
        let zeros = vec![0u8; MAX_LINK_FILE_DECOMPRESSED_BYTES + 1024];
        let bomb = zstd::encode_all(&zeros[..], 19).unwrap();
        assert!(bomb.len() < MAX_LINK_FILE_BYTES);
        // Refused at its first bytes (no magic), not after decompressing it.
        let t = std::time::Instant::now();
        assert!(matches!(decode(&bomb), Err(LinkFileError::Corrupt(_))));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn decompression_past_the_limit_is_an_error() {
        let mut r = Bounded {
            inner: std::io::repeat(0),
            left: 1000,
            over: false,
        };
        let mut buf = Vec::new();
        assert!(r.by_ref().read_to_end(&mut buf).is_err());
        assert!(r.over);
        assert_eq!(buf.len(), 1000);
        let mut r = Bounded {
            inner: &[0u8; 1000][..],
            left: 1000,
            over: false,
        };
        buf.clear();
        assert_eq!(r.read_to_end(&mut buf).unwrap(), 1000);
        assert!(!r.over);
    }

    /// A link file written by hand: magic, `header`, the records' sequence
    /// length `claimed`, then `body`, and `zeros` zero bytes streamed after it.
    fn raw_file(header: &LinkFileHeader, claimed: u64, body: &[u8], zeros: usize) -> Vec<u8> {
        use std::io::Write;
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.include_checksum(true).unwrap();
        enc.write_all(MAGIC).unwrap();
        enc.write_all(&codec::encode(header, usize::MAX).unwrap())
            .unwrap();
        enc.write_all(&codec::encode(&claimed, usize::MAX).unwrap())
            .unwrap();
        enc.write_all(body).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut left = zeros;
        while left > 0 {
            let n = left.min(chunk.len());
            enc.write_all(&chunk[..n]).unwrap();
            left -= n;
        }
        enc.finish().unwrap()
    }

    #[test]
    fn a_hand_written_file_decodes_like_an_encoded_one() {
        let (h, r) = sample(3);
        let body = codec::encode(&r, usize::MAX).unwrap();
        // `body` starts with the records' length; `raw_file` writes its own.
        let (_, rest) = body.split_at(1);
        let bytes = raw_file(&h, 3, rest, 0);
        assert_eq!(decode(&bytes).unwrap(), (h, r));
    }

    #[test]
    fn record_bomb_of_zeros_after_a_huge_count_is_refused_at_once() {
        // A few KB of zstd: 200 MB of zeros, each 5 of them an empty record,
        // after a claimed count of 2^60 records.
        let (mut h, _) = sample(0);
        h.records = 10;
        let bomb = raw_file(&h, 1 << 60, &[], 200 << 20);
        assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
        // A header claiming more than the limit is refused before any record.
        h.records = MAX_LINK_RECORDS as u64 + 1;
        let big = raw_file(&h, 1 << 60, &[], 200 << 20);
        let t = std::time::Instant::now();
        // Past the header's own count: the 11th record.
        assert!(matches!(
            decode(&bomb),
            Err(LinkFileError::CountMismatch {
                claimed: 10,
                actual: 11
            })
        ));
        assert!(matches!(
            decode(&big),
            Err(LinkFileError::TooManyRecords(_))
        ));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn record_bomb_at_the_record_limit_stops_at_the_first_record_past_it() {
        // The header claims the most records allowed, the stream holds more:
        // each record is handed on and dropped, so memory stays one record.
        let (mut h, _) = sample(0);
        h.records = MAX_LINK_RECORDS as u64;
        let bomb = raw_file(&h, 1 << 60, &[], 200 << 20);
        assert!(bomb.len() < 64 * 1024, "{} bytes", bomb.len());
        let mut seen = 0u64;
        let r = for_each_record(&bomb, |_| {
            seen += 1;
            Ok(())
        });
        assert!(
            matches!(r, Err(LinkFileError::TooManyRecords(n)) if n == MAX_LINK_RECORDS + 1),
            "{r:?}"
        );
        assert_eq!(seen, MAX_LINK_RECORDS as u64);
    }

    #[test]
    fn a_text_claiming_more_than_the_memory_budget_is_refused_before_allocation() {
        let (mut h, _) = sample(0);
        h.records = 1;
        // One record whose source claims 1 GiB (more than the budget).
        let len = codec::encode(&(1u64 << 30), usize::MAX).unwrap();
        let bytes = raw_file(&h, 1, &len, 1024);
        assert!(matches!(
            decode(&bytes),
            Err(LinkFileError::TooMuchMemory(MAX_LINK_FILE_MEMORY_BYTES))
        ));
        // One that claims less than the budget but more than the file holds:
        // an error, after allocating only what arrived.
        let len = codec::encode(&(100u64 << 20), usize::MAX).unwrap();
        let bytes = raw_file(&h, 1, &len, 1024);
        assert!(matches!(decode(&bytes), Err(LinkFileError::Corrupt(_))));
    }

    #[test]
    fn records_over_the_memory_budget_are_refused() {
        let (h, r) = sample(100);
        let bytes = encode(&h, &r).unwrap();
        let need = records_memory(&r);
        assert!(stream(&bytes, need, |_| Ok(())).is_ok());
        assert!(matches!(
            stream(&bytes, need - 1, |_| Ok(())),
            Err(LinkFileError::TooMuchMemory(_))
        ));
        // Records of empty texts are charged their size in memory: 2,000
        // of them pass a budget of 2,000 records and not one of 1,999.
        let empty = vec![
            LinkRecord {
                source_url: String::new(),
                target_url: String::new(),
                tag: LinkTag::A,
                nofollow: false,
                anchor_text: String::new(),
            };
            2000
        ];
        let (mut h, _) = sample(0);
        h.records = 2000;
        let bytes = encode(&h, &empty).unwrap();
        assert!(stream(&bytes, 2000 * LINK_RECORD_OVERHEAD_BYTES, |_| Ok(())).is_ok());
        assert!(matches!(
            stream(&bytes, 1999 * LINK_RECORD_OVERHEAD_BYTES, |_| Ok(())),
            Err(LinkFileError::TooMuchMemory(_))
        ));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let (h, r) = sample(2);
        let body = codec::encode(&r, usize::MAX).unwrap();
        let bytes = raw_file(&h, 2, &body[1..], 1);
        assert!(matches!(decode(&bytes), Err(LinkFileError::Corrupt(_))));
    }

    #[test]
    fn a_callers_refusal_stops_the_decoding() {
        let (h, r) = sample(10);
        let bytes = encode(&h, &r).unwrap();
        let mut seen = 0;
        let got = for_each_record(&bytes, |_| {
            seen += 1;
            if seen == 3 {
                Err(LinkFileError::Refused("no".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(got, Err(LinkFileError::Refused(_))));
        assert_eq!(seen, 3);
    }

    #[test]
    fn a_thread_decodes_file_after_file_whatever_the_last_one_was() {
        // A file cut short, refused, or stopped mid-stream leaves nothing
        // behind for the next one (the record's buffers are reused).
        let (h, r) = sample(300);
        let good = encode(&h, &r).unwrap();
        let cut = &good[..good.len() / 2];
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        for bad in [cut, &flipped[..]] {
            assert!(decode(bad).is_err());
            assert_eq!(decode(&good).unwrap(), (h.clone(), r.clone()));
        }
        let mut n = 0;
        let stopped = for_each_record_ref(&good, |_| {
            n += 1;
            if n == 5 {
                Err(LinkFileError::Refused("no".into()))
            } else {
                Ok(())
            }
        });
        assert!(stopped.is_err());
        assert_eq!(decode(&good).unwrap(), (h.clone(), r.clone()));
        // A file decoded inside another's callback.
        let (h2, r2) = sample(20);
        let other = encode(&h2, &r2).unwrap();
        let mut lent = Vec::new();
        let header = for_each_record_ref(&good, |rec| {
            if lent.is_empty() {
                assert_eq!(decode(&other).unwrap(), (h2.clone(), r2.clone()));
            }
            lent.push(rec.clone());
            Ok(())
        })
        .unwrap();
        assert_eq!((header, lent), (h, r));
    }

    #[test]
    fn count_mismatch_is_refused() {
        let (mut h, r) = sample(5);
        h.records = 6;
        let bytes = encode(&h, &r).unwrap();
        assert!(matches!(
            decode(&bytes),
            Err(LinkFileError::CountMismatch { .. })
        ));
    }
}
