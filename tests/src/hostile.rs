//! Hostile-client helpers shared by the tests and the lying client: a host
//! joined with the real client and spoken for directly, record and zstd
//! bombs, and a process's peak memory.

use std::path::Path;

use anyhow::{Context, Result};
use beebot_client::home::Home;
use beebot_client::net::{Link, ServerId};
use beebot_shared::codec;
use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::{LinkFileHeader, LinkRecord};
use beebot_shared::proto::Request;
use beebot_shared::sign::WorkUnit;
use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::{stderr, Grid};

/// A host joined with the real client: its server id, host id and key.
pub struct Joined {
    pub server: ServerId,
    pub id: u64,
    pub key: SigningKey,
    pub project_key: VerifyingKey,
}

impl Joined {
    /// Read the enrolment and host key a real `beebot join` left in `home`.
    pub fn from_home(home: &Path) -> Result<Joined> {
        let home = Home {
            config: home.to_path_buf(),
            data: home.to_path_buf(),
        };
        let e = home.identity().require_enrolment().context("enrolment")?;
        Ok(Joined {
            server: ServerId {
                addr: e.server_addr.clone(),
                server_name: e.server_name.clone(),
                cert_sha256: e.cert_fingerprint().context("certificate fingerprint")?,
            },
            id: e.host_id,
            key: home.identity().host_key(false).context("host key")?,
            project_key: e.project_verifying_key().context("project key")?,
        })
    }

    /// A new connection, authenticated as this host.
    pub async fn hello(&self) -> Result<Link> {
        let link = Link::connect(&self.server).await.context("connect")?;
        link.hello(self.id, &self.key).await.context("hello")?;
        Ok(link)
    }
}

/// Join client `name` of `g` with the real `beebot join CODE`, and read its home.
pub fn join_raw(g: &Grid, name: &str, code: &str) -> Joined {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
    Joined::from_home(&g.home(name)).expect("joined home")
}

/// A zstd frame that claims no size and expands to `blocks` × 128 KiB: the
/// link-file magic in a raw block, then RLE blocks of zeros (4 bytes each).
pub fn zstd_bomb(blocks: usize) -> Vec<u8> {
    zstd_bomb_after(b"BEEBOTLF", blocks)
}

/// A zstd frame of `prefix` in a raw block, then `blocks` RLE blocks of
/// 128 KiB of zeros (4 bytes each).
pub fn zstd_bomb_after(prefix: &[u8], blocks: usize) -> Vec<u8> {
    const BLOCK: u32 = 128 * 1024;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header: no content size, no checksum, not single-segment;
    // window descriptor exponent 11: a 2 MiB window.
    out.push(0x00);
    out.push(0x58);
    // Raw block: last=0, type=0.
    let h = (prefix.len() as u32) << 3;
    out.extend_from_slice(&h.to_le_bytes()[..3]);
    out.extend_from_slice(prefix);
    for i in 0..blocks {
        let last = u32::from(i + 1 == blocks);
        let h = last | (1 << 1) | (BLOCK << 3);
        out.extend_from_slice(&h.to_le_bytes()[..3]);
        out.push(0);
    }
    out
}

/// What a record bomb for `unit` starts with: the magic, a header naming the
/// unit and the most records allowed, then a records' count of 2^60.
pub fn record_bomb_prefix(unit: &WorkUnit) -> Vec<u8> {
    let header = LinkFileHeader::of_unit(unit, 1, beebot_shared::limits::MAX_LINK_RECORDS as u64);
    let mut out = b"BEEBOTLF".to_vec();
    out.extend(codec::encode(&header, usize::MAX).expect("header"));
    out.extend(codec::encode(&(1u64 << 60), usize::MAX).expect("count"));
    out
}

/// Record bombs for `unit`, a few KB each: (1) 256 MiB of zeros (an empty
/// record every 5 bytes) after the count, as RLE blocks; (2) records on
/// the unit's site, more than allowed, that compress to almost nothing.
pub fn record_bombs(unit: &WorkUnit) -> [Vec<u8>; 2] {
    let prefix = record_bomb_prefix(unit);
    let zeros = zstd_bomb_after(&prefix, 2048);
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).expect("zstd");
    std::io::Write::write_all(&mut enc, &prefix).expect("zstd");
    let one = codec::encode(
        &LinkRecord {
            source_url: format!("http://{}/", unit.site),
            target_url: "http://x.test/".into(),
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: String::new(),
        },
        usize::MAX,
    )
    .expect("record");
    let chunk = one.repeat(64 * 1024);
    for _ in 0..(beebot_shared::limits::MAX_LINK_RECORDS / (64 * 1024) + 2) {
        std::io::Write::write_all(&mut enc, &chunk).expect("zstd");
    }
    let many = enc.finish().expect("zstd");
    [zeros, many]
}

/// Peak resident memory of process `pid` (VmHWM), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM kB");
    kb * 1024
}

/// One record leaving `site` from its front page.
pub fn records_of(site: &str) -> Vec<LinkRecord> {
    vec![LinkRecord {
        source_url: format!("http://{site}/"),
        target_url: "http://elsewhere.test/".into(),
        tag: LinkTag::A,
        nofollow: false,
        anchor_text: "out".into(),
    }]
}

/// A link file of `records` for `unit`, its header naming `site` (a test may
/// name another site than the unit's).
pub fn link_file(unit: &WorkUnit, site: &str, records: &[LinkRecord]) -> Vec<u8> {
    let mut header = LinkFileHeader::of_unit(unit, 1, records.len() as u64);
    header.site = site.to_string();
    beebot_shared::linkfile::encode(&header, records).expect("encode")
}

/// An upload of `file` for `unit`, its summary counting one page and `links` links.
pub fn upload(unit: &WorkUnit, file: Vec<u8>, links: u64) -> Request {
    Request::Upload {
        unit_id: unit.unit_id,
        summary: beebot_shared::linkfile::ScanSummary {
            pages: 1,
            links,
            ..Default::default()
        },
        link_file: file,
        state: None,
    }
}

/// A unit id no server of a test has issued.
pub const UNKNOWN_UNIT: u64 = 987_654_321;

/// An upload for a unit never issued ([`UNKNOWN_UNIT`]): one page, no file.
pub fn upload_of_unknown_unit() -> Request {
    Request::Upload {
        unit_id: UNKNOWN_UNIT,
        summary: beebot_shared::linkfile::ScanSummary {
            pages: 1,
            ..Default::default()
        },
        link_file: vec![],
        state: None,
    }
}

/// An honest one-record upload for `unit`.
pub fn one_record_upload(unit: &WorkUnit) -> Request {
    upload(
        unit,
        link_file(unit, &unit.site, &records_of(&unit.site)),
        1,
    )
}
