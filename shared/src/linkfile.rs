//! The link-file format: a job's outbound links, zstd-compressed with a checksum,
//! and the scan summary that travels beside it.
//!
//! Layout before compression: the magic `BEEBOTLF`, then one codec value
//! `(LinkFileHeader, Vec<LinkRecord>)`. Decompression is bounded by
//! [`MAX_LINK_FILE_DECOMPRESSED_BYTES`], so a zstd bomb is an error.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::extract::LinkTag;
use crate::limits::{MAX_LINK_FILE_BYTES, MAX_LINK_FILE_DECOMPRESSED_BYTES, MAX_LINK_RECORDS};

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
            | StopReason::SeedUnreachable => true,
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
        }
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
}

/// Compress a header and its records into a link file.
pub fn encode(header: &LinkFileHeader, records: &[LinkRecord]) -> Result<Vec<u8>, LinkFileError> {
    if records.len() > MAX_LINK_RECORDS {
        return Err(LinkFileError::TooManyRecords(records.len()));
    }
    let mut raw = MAGIC.to_vec();
    let body = codec::encode(&(header, records), MAX_LINK_FILE_DECOMPRESSED_BYTES)
        .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    raw.extend_from_slice(&body);
    let mut out = Vec::with_capacity(raw.len() / 4 + 64);
    {
        let mut enc = zstd::stream::Encoder::new(&mut out, ZSTD_LEVEL)
            .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
        enc.include_checksum(true)
            .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
        std::io::Write::write_all(&mut enc, &raw)
            .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
        enc.finish()
            .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    }
    if out.len() > MAX_LINK_FILE_BYTES {
        return Err(LinkFileError::TooLarge {
            got: out.len(),
            limit: MAX_LINK_FILE_BYTES,
        });
    }
    Ok(out)
}

/// Decompress (bounded) and decode a link file, checking its checksum, magic,
/// version and record count.
pub fn decode(bytes: &[u8]) -> Result<(LinkFileHeader, Vec<LinkRecord>), LinkFileError> {
    if bytes.len() > MAX_LINK_FILE_BYTES {
        return Err(LinkFileError::TooLarge {
            got: bytes.len(),
            limit: MAX_LINK_FILE_BYTES,
        });
    }
    let decoder =
        zstd::stream::Decoder::new(bytes).map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    let mut raw = Vec::new();
    decoder
        .take(MAX_LINK_FILE_DECOMPRESSED_BYTES as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    if raw.len() > MAX_LINK_FILE_DECOMPRESSED_BYTES {
        return Err(LinkFileError::DecompressedTooLarge(
            MAX_LINK_FILE_DECOMPRESSED_BYTES,
        ));
    }
    if raw.len() < MAGIC.len() || &raw[..MAGIC.len()] != MAGIC {
        return Err(LinkFileError::Corrupt("bad magic".into()));
    }
    let (header, records): (LinkFileHeader, Vec<LinkRecord>) =
        codec::decode(&raw[MAGIC.len()..], MAX_LINK_FILE_DECOMPRESSED_BYTES)
            .map_err(|e| LinkFileError::Corrupt(e.to_string()))?;
    if header.format_version != LINK_FILE_VERSION {
        return Err(LinkFileError::Version(header.format_version));
    }
    if records.len() > MAX_LINK_RECORDS {
        return Err(LinkFileError::TooManyRecords(records.len()));
    }
    if header.records != records.len() as u64 {
        return Err(LinkFileError::CountMismatch {
            claimed: header.records,
            actual: records.len(),
        });
    }
    Ok((header, records))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(matches!(
            decode(&bomb),
            Err(LinkFileError::DecompressedTooLarge(_))
        ));
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
