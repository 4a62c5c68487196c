//! A scan's frontier: where a scan stopped before its natural end (the round's
//! time budget, the server's `Abort`, a stop of the client), so that another
//! scan goes on from there without fetching a page twice: a resume from the
//! client's own checkpoint, or a continuation unit on any host.
//!
//! It holds the queued URLs with their depths, a digest of every URL already
//! requested or queued (8 bytes each), the robots.txt answers seen (so the
//! rules hold without asking again), and the pages the job's scans counted
//! so far (the page cap is the job's, not one scan's).
//!
//! The encoding is hand-written and zstd-compressed with a checksum: every
//! count is checked against its limit and against the bytes left before
//! anything is allocated, so a hostile state costs at most its own size.

use std::io::Read;

use crate::limits::{
    MAX_FRONTIER_URLS, MAX_PAGES_PER_SITE, MAX_SCAN_STATE_BYTES, MAX_SCAN_STATE_DECOMPRESSED_BYTES,
    MAX_STATE_ROBOTS, MAX_STATE_ROBOTS_BYTES, MAX_URL_LEN,
};
use crate::util::sha256;

/// Current scan-state format version.
pub const SCAN_STATE_VERSION: u16 = 1;
const MAGIC: &[u8; 8] = b"BEEBOTSS";
const ZSTD_LEVEL: i32 = 3;
/// Longest robots.txt body kept per origin (Google's read limit).
pub const MAX_STATE_ROBOTS_BODY: usize = 500 * 1024;
/// Longest origin (`https://host:port`) kept.
const MAX_ORIGIN_LEN: usize = 300;
/// Most digests of seen URLs: every page the job may fetch plus a full queue.
pub const MAX_SEEN_DIGESTS: usize = MAX_PAGES_PER_SITE as usize + MAX_FRONTIER_URLS;

/// One URL waiting in the frontier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedUrl {
    /// Canonical URL.
    pub url: String,
    /// Links followed from the seed.
    pub depth: u32,
}

/// The final answer of one origin's robots.txt, as fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RobotsAnswer {
    /// `http://host:port` (the URL origin's serialisation).
    pub origin: String,
    /// Final HTTP status; 0 when the fetch failed.
    pub status: u16,
    /// Body read (at most [`MAX_STATE_ROBOTS_BODY`] bytes).
    pub body: Vec<u8>,
}

/// Where a scan stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanState {
    /// The site's host, as in the target set.
    pub site: String,
    /// Frontier entries the job's scans took so far (answered or failed):
    /// what counts against the round's page cap.
    pub pages_done: u64,
    /// URLs still to fetch, breadth-first order.
    pub queue: Vec<QueuedUrl>,
    /// [`url_digest`] of every URL requested or queued so far.
    pub seen: Vec<u64>,
    /// robots.txt answers seen so far.
    pub robots: Vec<RobotsAnswer>,
}

/// Failures reading or writing a scan state.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScanStateError {
    #[error("scan state is {got} bytes, the limit is {limit}")]
    TooLarge { got: usize, limit: usize },
    #[error("scan state decompresses past {0} bytes")]
    DecompressedTooLarge(usize),
    #[error("scan state is corrupt: {0}")]
    Corrupt(String),
    #[error("scan state format version {0} is not supported")]
    Version(u16),
    #[error("scan state holds {what} {got}, more than the limit {limit}")]
    OverLimit {
        what: &'static str,
        got: usize,
        limit: usize,
    },
}

/// The 8-byte digest of a canonical URL in a state's seen set (SHA-256
/// prefix: the same on every host and version).
pub fn url_digest(url: &str) -> u64 {
    let h = sha256(url.as_bytes());
    u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]])
}

impl ScanState {
    /// Compress the state. Robots answers beyond [`MAX_STATE_ROBOTS`] or
    /// [`MAX_STATE_ROBOTS_BYTES`] are left out (the next scan asks again);
    /// a queue or seen set over its limit is an error.
    pub fn encode(&self) -> Result<Vec<u8>, ScanStateError> {
        check_limit("queued URLs", self.queue.len(), MAX_FRONTIER_URLS)?;
        check_limit("seen digests", self.seen.len(), MAX_SEEN_DIGESTS)?;
        let mut raw = Vec::with_capacity(64 + self.queue.len() * 64 + self.seen.len() * 8);
        raw.extend_from_slice(MAGIC);
        raw.extend_from_slice(&SCAN_STATE_VERSION.to_le_bytes());
        put_str(&mut raw, &self.site, 16);
        raw.extend_from_slice(&self.pages_done.to_le_bytes());
        let mut kept = Vec::new();
        let mut budget = MAX_STATE_ROBOTS_BYTES;
        for r in &self.robots {
            if kept.len() >= MAX_STATE_ROBOTS || r.origin.len() > MAX_ORIGIN_LEN {
                continue;
            }
            let body = &r.body[..r.body.len().min(MAX_STATE_ROBOTS_BODY)];
            if body.len() > budget {
                continue;
            }
            budget -= body.len();
            kept.push((r, body));
        }
        raw.extend_from_slice(&(kept.len() as u32).to_le_bytes());
        for (r, body) in kept {
            put_str(&mut raw, &r.origin, 16);
            raw.extend_from_slice(&r.status.to_le_bytes());
            put_bytes(&mut raw, body, 32);
        }
        raw.extend_from_slice(&(self.queue.len() as u32).to_le_bytes());
        for q in &self.queue {
            if q.url.len() > MAX_URL_LEN {
                return Err(ScanStateError::OverLimit {
                    what: "URL bytes",
                    got: q.url.len(),
                    limit: MAX_URL_LEN,
                });
            }
            raw.extend_from_slice(&q.depth.to_le_bytes());
            put_str(&mut raw, &q.url, 16);
        }
        raw.extend_from_slice(&(self.seen.len() as u32).to_le_bytes());
        for d in &self.seen {
            raw.extend_from_slice(&d.to_le_bytes());
        }
        if raw.len() > MAX_SCAN_STATE_DECOMPRESSED_BYTES {
            return Err(ScanStateError::DecompressedTooLarge(
                MAX_SCAN_STATE_DECOMPRESSED_BYTES,
            ));
        }
        let mut out = Vec::with_capacity(raw.len() / 3 + 64);
        {
            let corrupt = |e: std::io::Error| ScanStateError::Corrupt(e.to_string());
            let mut enc = zstd::stream::Encoder::new(&mut out, ZSTD_LEVEL).map_err(corrupt)?;
            enc.include_checksum(true).map_err(corrupt)?;
            // The size known, zstd sizes its window and tables to it: a small
            // state costs kilobytes to compress, not the level's megabytes.
            enc.set_pledged_src_size(Some(raw.len() as u64))
                .map_err(corrupt)?;
            std::io::Write::write_all(&mut enc, &raw).map_err(corrupt)?;
            enc.finish().map_err(corrupt)?;
        }
        if out.len() > MAX_SCAN_STATE_BYTES {
            return Err(ScanStateError::TooLarge {
                got: out.len(),
                limit: MAX_SCAN_STATE_BYTES,
            });
        }
        Ok(out)
    }

    /// Decompress (bounded) and decode a state, checking every count against
    /// its limit before allocating for it.
    pub fn decode(bytes: &[u8]) -> Result<ScanState, ScanStateError> {
        if bytes.len() > MAX_SCAN_STATE_BYTES {
            return Err(ScanStateError::TooLarge {
                got: bytes.len(),
                limit: MAX_SCAN_STATE_BYTES,
            });
        }
        let corrupt = |e: std::io::Error| ScanStateError::Corrupt(e.to_string());
        let mut decoder = zstd::stream::Decoder::new(bytes).map_err(corrupt)?;
        decoder
            .window_log_max(crate::limits::MAX_ZSTD_WINDOW_LOG)
            .map_err(corrupt)?;
        let mut raw = Vec::new();
        decoder
            .take(MAX_SCAN_STATE_DECOMPRESSED_BYTES as u64 + 1)
            .read_to_end(&mut raw)
            .map_err(corrupt)?;
        if raw.len() > MAX_SCAN_STATE_DECOMPRESSED_BYTES {
            return Err(ScanStateError::DecompressedTooLarge(
                MAX_SCAN_STATE_DECOMPRESSED_BYTES,
            ));
        }
        let mut r = Reader { buf: &raw };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(ScanStateError::Corrupt("bad magic".into()));
        }
        let version = r.u16()?;
        if version != SCAN_STATE_VERSION {
            return Err(ScanStateError::Version(version));
        }
        let site = r.string(16, crate::limits::MAX_HOST_LEN + 8)?;
        let pages_done = r.u64()?;
        if pages_done > u64::from(MAX_PAGES_PER_SITE) {
            return Err(ScanStateError::OverLimit {
                what: "pages",
                got: pages_done as usize,
                limit: MAX_PAGES_PER_SITE as usize,
            });
        }
        let n = r.count("robots answers", MAX_STATE_ROBOTS, 8)?;
        let mut robots = Vec::with_capacity(n);
        let mut robots_bytes = 0usize;
        for _ in 0..n {
            let origin = r.string(16, MAX_ORIGIN_LEN)?;
            let status = r.u16()?;
            let body = r.bytes(32, MAX_STATE_ROBOTS_BODY)?.to_vec();
            robots_bytes += body.len();
            check_limit("robots bytes", robots_bytes, MAX_STATE_ROBOTS_BYTES)?;
            robots.push(RobotsAnswer {
                origin,
                status,
                body,
            });
        }
        let n = r.count("queued URLs", MAX_FRONTIER_URLS, 6)?;
        let mut queue = Vec::with_capacity(n);
        for _ in 0..n {
            let depth = r.u32()?;
            let url = r.string(16, MAX_URL_LEN)?;
            queue.push(QueuedUrl { url, depth });
        }
        let n = r.count("seen digests", MAX_SEEN_DIGESTS, 8)?;
        let mut seen = Vec::with_capacity(n);
        for _ in 0..n {
            seen.push(r.u64()?);
        }
        if !r.buf.is_empty() {
            return Err(ScanStateError::Corrupt("trailing bytes".into()));
        }
        Ok(ScanState {
            site,
            pages_done,
            queue,
            seen,
            robots,
        })
    }
}

/// SHA-256 of an encoded state: what a continuation unit names, signed.
pub fn state_sha256(encoded: &[u8]) -> [u8; 32] {
    sha256(encoded)
}

fn check_limit(what: &'static str, got: usize, limit: usize) -> Result<(), ScanStateError> {
    if got > limit {
        return Err(ScanStateError::OverLimit { what, got, limit });
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str, len_bits: u8) {
    put_bytes(out, s.as_bytes(), len_bits);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8], len_bits: u8) {
    if len_bits == 16 {
        out.extend_from_slice(&(b.len().min(u16::MAX as usize) as u16).to_le_bytes());
        out.extend_from_slice(&b[..b.len().min(u16::MAX as usize)]);
    } else {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
}

/// A bounds-checked reader over the decompressed bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ScanStateError> {
        if n > self.buf.len() {
            return Err(ScanStateError::Corrupt("truncated".into()));
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, ScanStateError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, ScanStateError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, ScanStateError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A count of items at least `min_item_bytes` long each: checked against
    /// its limit and the bytes left, so nothing is allocated for a lie.
    fn count(
        &mut self,
        what: &'static str,
        limit: usize,
        min_item_bytes: usize,
    ) -> Result<usize, ScanStateError> {
        let n = self.u32()? as usize;
        check_limit(what, n, limit)?;
        if n.saturating_mul(min_item_bytes) > self.buf.len() {
            return Err(ScanStateError::Corrupt(format!(
                "{what}: count past the end"
            )));
        }
        Ok(n)
    }
    fn bytes(&mut self, len_bits: u8, limit: usize) -> Result<&'a [u8], ScanStateError> {
        let n = if len_bits == 16 {
            self.u16()? as usize
        } else {
            self.u32()? as usize
        };
        check_limit("field bytes", n, limit)?;
        self.take(n)
    }
    fn string(&mut self, len_bits: u8, limit: usize) -> Result<String, ScanStateError> {
        let b = self.bytes(len_bits, limit)?;
        String::from_utf8(b.to_vec()).map_err(|_| ScanStateError::Corrupt("not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ScanState {
        ScanState {
            site: "a.test".into(),
            pages_done: 42,
            queue: (0..100)
                .map(|i| QueuedUrl {
                    url: format!("http://a.test/p{i}"),
                    depth: i % 5,
                })
                .collect(),
            seen: (0..300)
                .map(|i| url_digest(&format!("http://a.test/p{i}")))
                .collect(),
            robots: vec![RobotsAnswer {
                origin: "http://a.test".into(),
                status: 200,
                body: b"User-agent: *\nDisallow: /private\n".to_vec(),
            }],
        }
    }

    #[test]
    fn round_trip() {
        let s = sample();
        let bytes = s.encode().unwrap();
        assert_eq!(ScanState::decode(&bytes).unwrap(), s);
    }

    /// A state whose frame asks for a window past `MAX_ZSTD_WINDOW_LOG`
    /// (64 MiB here) is refused before the window is allocated; the same
    /// bytes decompress under zstd's default bound.
    #[test]
    fn a_state_asking_for_a_window_past_the_bound_is_refused() {
        let raw = zstd::decode_all(sample().encode().unwrap().as_slice()).unwrap();
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        enc.window_log(26).unwrap();
        std::io::Write::write_all(&mut enc, &raw).unwrap();
        let wide = enc.finish().unwrap();
        assert_eq!(zstd::decode_all(wide.as_slice()).unwrap(), raw);
        let err = ScanState::decode(&wide).unwrap_err();
        assert!(
            matches!(&err, ScanStateError::Corrupt(m) if m.contains("memory")),
            "{err}"
        );
    }

    #[test]
    fn flipped_byte_is_detected() {
        let mut bytes = sample().encode().unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x10;
        assert!(ScanState::decode(&bytes).is_err());
    }

    #[test]
    fn a_lying_count_allocates_nothing() {
        // A state claiming 200,000 queued URLs in a few bytes is refused before
        // any allocation for them.
        let mut raw = MAGIC.to_vec();
        raw.extend_from_slice(&SCAN_STATE_VERSION.to_le_bytes());
        put_str(&mut raw, "a.test", 16);
        raw.extend_from_slice(&0u64.to_le_bytes());
        raw.extend_from_slice(&0u32.to_le_bytes());
        raw.extend_from_slice(&(MAX_FRONTIER_URLS as u32).to_le_bytes());
        let bytes = zstd::encode_all(&raw[..], 3).unwrap();
        assert!(matches!(
            ScanState::decode(&bytes),
            Err(ScanStateError::Corrupt(_))
        ));
        let mut raw2 = raw.clone();
        let at = raw2.len() - 4;
        raw2[at..].copy_from_slice(&(MAX_FRONTIER_URLS as u32 + 1).to_le_bytes());
        let bytes = zstd::encode_all(&raw2[..], 3).unwrap();
        assert!(matches!(
            ScanState::decode(&bytes),
            Err(ScanStateError::OverLimit { .. })
        ));
    }

    #[test]
    fn zstd_bomb_is_bounded() {
        let zeros = vec![0u8; MAX_SCAN_STATE_DECOMPRESSED_BYTES + 1024];
        let bomb = zstd::encode_all(&zeros[..], 19).unwrap();
        assert!(matches!(
            ScanState::decode(&bomb),
            Err(ScanStateError::DecompressedTooLarge(_))
        ));
    }

    #[test]
    fn robots_beyond_the_budget_are_left_out() {
        let mut s = sample();
        s.robots = (0..MAX_STATE_ROBOTS + 5)
            .map(|i| RobotsAnswer {
                origin: format!("http://h{i}.a.test"),
                status: 404,
                body: Vec::new(),
            })
            .collect();
        let back = ScanState::decode(&s.encode().unwrap()).unwrap();
        assert_eq!(back.robots.len(), MAX_STATE_ROBOTS);
    }

    #[test]
    fn digests_are_stable() {
        // Fixed: a host of another version must read the same seen set.
        assert_eq!(url_digest("http://a.test/"), url_digest("http://a.test/"));
        assert_ne!(url_digest("http://a.test/"), url_digest("http://a.test/x"));
    }
}
