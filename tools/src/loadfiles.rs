//! The results the load generator uploads: a scan's link file of a
//! realistic size and the summary that goes with it, the same for every copy
//! of a site's job (replicas agree, as honest hosts' do).
//!
//! Sizes follow [`LinkFileSizes`]: records per scan log-normal around a
//! median, cut at a most, as a site's outbound links are (most sites link a
//! few hundred times, a few tens of thousands). Pages are the records over
//! [`LINKS_PER_PAGE`], and the summary's elapsed time covers the round's
//! politeness delay between them (at least [`PAGE_FETCH_MS`] a page), so
//! the server's pace check passes as it does for an honest client.
//!
//! Files are written a record at a time with `linkfile::LinkFileWriter`.
//! `made_up_result` makes the files of the hosts `--liars` names: the same
//! pages, record count and summary as the honest file, every source on the
//! site, so each passes every check an upload meets alone, but links drawn
//! otherwise, so it disagrees with an honest copy.

use std::sync::Arc;

use beebot_server::grid::{Grid, GridIo, GridSettings, MemoryLinks};
use beebot_server::params::RoundParams;
use beebot_shared::extract::LinkTag;
use beebot_shared::linkfile::{self, LinkFileHeader, LinkFileWriter, LinkRecordRef, ScanSummary};
use beebot_shared::proto::HostInfo;
use beebot_shared::rng::SplitMix64;
use beebot_shared::sign::{self, WorkUnit};

/// Links a page holds on average in the results (a documentation or
/// university page: navigation plus content).
pub const LINKS_PER_PAGE: u64 = 40;
/// Bytes of a page in the summary (its HTML, uncompressed).
pub const PAGE_BYTES: u64 = 24_000;
/// What a page takes to fetch when the round's delay is shorter: a real
/// site answers in 50–300 ms. (At a 0 ms delay a result claiming 1 ms a
/// page made every host look hundreds of times faster than any is.)
pub const PAGE_FETCH_MS: u64 = 150;
/// Other hosts a result links to, at most.
const TARGET_HOSTS: u64 = 200;

/// Records per scan: log-normal with `median` and shape `sigma`, at least 1
/// and at most `most`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkFileSizes {
    pub median: u64,
    pub sigma: f64,
    pub most: u64,
}

impl Default for LinkFileSizes {
    /// A median of 300 records and a tail to 20,000: with `sigma` 1.2 one
    /// scan in a hundred holds more than about 5,000.
    fn default() -> Self {
        LinkFileSizes {
            median: 300,
            sigma: 1.2,
            most: 20_000,
        }
    }
}

impl LinkFileSizes {
    /// The records of `site`'s result: drawn from the site's name, so every
    /// copy of its job holds the same.
    pub fn records_of(&self, site: &str) -> u64 {
        let mut rng = SplitMix64::new(site_seed(site));
        // Box-Muller from two uniforms in (0, 1].
        let u1 = 1.0 - rng.unit();
        let u2 = rng.unit();
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let n = (self.median as f64 * (self.sigma * z).exp()).round();
        (n as u64).clamp(1, self.most.max(1))
    }
}

impl LinkFileSizes {
    /// `(pages, records)` of `unit`'s result: its site's records, over
    /// [`LINKS_PER_PAGE`] a page, within the unit's page cap.
    pub fn scan_of(&self, unit: &WorkUnit) -> (u64, u64) {
        let records = self.records_of(&unit.site);
        let pages = records
            .div_ceil(LINKS_PER_PAGE)
            .clamp(1, u64::from(unit.limits.max_pages.max(1)));
        (pages, records)
    }
}

fn site_seed(site: &str) -> u64 {
    // FNV-1a: stable across runs and builds.
    site.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `unit`'s result as an honest client of a round at `unit`'s politeness
/// delay would upload it: [`LinkFileSizes::records_of`] records from pages of
/// the site (at most the unit's page cap), each linking within the site and
/// to other hosts, and a summary whose elapsed time covers the delay between
/// its pages. The records are written straight into the file
/// ([`linkfile::LinkFileWriter`]) from three reused texts: the load
/// generator makes one for every upload, thousands a second.
pub fn realistic_result(
    unit: &WorkUnit,
    sizes: &LinkFileSizes,
) -> Result<(ScanSummary, Vec<u8>), linkfile::LinkFileError> {
    result_drawn(unit, sizes, HONEST_DRAW)
}

/// A lying host's result for `unit`: the same pages, record count and
/// summary as [`realistic_result`]'s, every record's source on the site,
/// so it passes every check an upload meets alone, but the links are made
/// up (drawn otherwise): it disagrees with an honest copy of the job, as a
/// host that fakes its scans does.
pub fn made_up_result(
    unit: &WorkUnit,
    sizes: &LinkFileSizes,
) -> Result<(ScanSummary, Vec<u8>), linkfile::LinkFileError> {
    result_drawn(unit, sizes, MADE_UP_DRAW)
}

/// What the links of a result are drawn from, besides the site's name.
const HONEST_DRAW: u64 = 0x5eed;
const MADE_UP_DRAW: u64 = 0x11e5;

fn result_drawn(
    unit: &WorkUnit,
    sizes: &LinkFileSizes,
    draw: u64,
) -> Result<(ScanSummary, Vec<u8>), linkfile::LinkFileError> {
    use std::fmt::Write;
    let (pages, links) = sizes.scan_of(unit);
    // `pages` × `per_page` >= `links`: every record claimed is written.
    let per_page = links.div_ceil(pages);
    let mut rng = SplitMix64::new(site_seed(&unit.site) ^ draw);
    let mut hosts = [false; TARGET_HOSTS as usize];
    let mut file = LinkFileWriter::new(&LinkFileHeader::of_unit(unit, pages, links))?;
    let (mut source, mut target, mut anchor) = (String::new(), String::new(), String::new());
    // Page by page, `per_page` records each, until `links` are written.
    for i in 0..links {
        let (p, k) = (i / per_page, i % per_page);
        if k == 0 {
            source.clear();
            let _ = write!(source, "http://{}/docs/section-{p}/index.html", unit.site);
        }
        target.clear();
        anchor.clear();
        if rng.next_u64() % 4 == 0 {
            let host = rng.next_u64() % TARGET_HOSTS;
            hosts[host as usize] = true;
            let _ = write!(
                target,
                "https://www.partner-{host}.example.org/research/item-{k}"
            );
            let _ = write!(anchor, "Partner {host} item {k}");
        } else {
            let to = rng.next_u64() % pages.max(1);
            let _ = write!(
                target,
                "http://{}/docs/section-{to}/page-{k}.html",
                unit.site
            );
            let _ = write!(anchor, "Section {to}, page {k}");
        }
        file.push(&LinkRecordRef {
            source_url: &source,
            target_url: &target,
            tag: LinkTag::A,
            nofollow: false,
            anchor_text: &anchor,
        })?;
    }
    let file = with_compressor(|zstd| file.finish_with(zstd))?;
    let distinct = hosts.iter().filter(|&&h| h).count() as u64;
    let summary = ScanSummary {
        pages,
        links,
        bytes: pages * PAGE_BYTES,
        distinct_target_hosts: (distinct + 1).min(links),
        elapsed_ms: pages * unit.limits.delay_ms.max(PAGE_FETCH_MS) + 1_000,
        status_counts: vec![(200, pages)],
        ..ScanSummary::default()
    };
    Ok((summary, file))
}

/// Compression contexts kept between results, at most this many (each
/// keeps the tables the largest file it made asked for, a few MB).
const KEPT_COMPRESSORS: usize = 8;

static COMPRESSORS: beebot_shared::util::Kept<linkfile::Compressor> =
    beebot_shared::util::Kept::new(KEPT_COMPRESSORS);

/// `f` with a compression context from the kept ones (a new one when none
/// is free), put back after unless [`KEPT_COMPRESSORS`] are kept: a result
/// per upload is made without building a context for each.
fn with_compressor<T>(
    f: impl FnOnce(&mut linkfile::Compressor) -> Result<T, linkfile::LinkFileError>,
) -> Result<T, linkfile::LinkFileError> {
    let mut zstd = match COMPRESSORS.take() {
        Some(z) => z,
        None => linkfile::new_compressor()?,
    };
    let out = f(&mut zstd);
    COMPRESSORS.put_back(zstd);
    out
}

/// A grid in memory (link files; its writes and link changes are never
/// applied: the caller takes them, [`Grid::take_writes`], when it keeps the
/// grid for long) with `sites` in one running
/// round of `params` and one enrolled host, at `now_ms`: the grid, the
/// host, and the project's public key. The real checks an upload meets,
/// for tests and benches of these results.
pub fn memory_grid(
    sites: &[String],
    params: RoundParams,
    now_ms: u64,
) -> (Grid, u64, ed25519_dalek::VerifyingKey) {
    let key = sign::generate_key();
    let io = GridIo::in_memory(Arc::new(MemoryLinks::default()), key.clone(), 7);
    let settings = GridSettings {
        user_agent: "BeeBot/loadfiles (+http://example.test/bot)".into(),
        deadline_slack: 3.0,
        deadline_grace_s: 600,
        trust_after: 3,
        spot_check_percent: 5,
    };
    let mut g = Grid::open(Default::default(), io, settings).expect("a grid in memory");
    g.add_sites(sites, now_ms).expect("sites");
    g.start_round(params, now_ms).expect("round");
    let token = g
        .create_invite(1, now_ms + 86_400_000, now_ms)
        .expect("invite");
    let info = HostInfo {
        name: "h".into(),
        os: "loadfiles".into(),
        client_version: "0".into(),
        cores: 2,
    };
    let host = g
        .enrol(
            &token,
            sign::generate_key().verifying_key().to_bytes(),
            info,
            now_ms,
        )
        .expect("enrol");
    // Never applied: dropped, so the setup's writes are not kept.
    let _ = (g.take_writes(), g.take_link_changes());
    (g, host, key.verifying_key())
}

/// The first unit `host` of a [`memory_grid`] gets at `now_ms`, its
/// signature checked with `key`.
///
/// # Panics
/// When the grid has no unit for the host, or signs it with another key
/// (a bench's or a test's setup gone wrong).
pub fn memory_unit(
    g: &mut Grid,
    host: u64,
    key: &ed25519_dalek::VerifyingKey,
    now_ms: u64,
) -> WorkUnit {
    let req = beebot_server::grid::WorkRequest {
        want_seconds: 600,
        free_slots: 1,
        units_held: vec![],
        open_windows: None,
    };
    let reply = g.request_work(host, &req, now_ms).expect("work");
    let signed = reply.units.first().expect("a unit");
    sign::verify_unit(key, signed).expect("signed by the grid")
}

#[cfg(test)]
mod tests {
    use beebot_server::grid::{Grid, UploadOutcome, UploadStep, WorkRequest};
    use beebot_server::params::RoundParams;
    use beebot_server::validate::{similarity, MIN_SIMILARITY};
    use beebot_shared::sign;
    use ed25519_dalek::VerifyingKey;

    use super::*;

    const T0: u64 = 1_750_000_000_000;

    #[test]
    fn sizes_have_the_median_and_tail_they_name_and_are_the_same_for_every_copy() {
        let sizes = LinkFileSizes::default();
        let mut n: Vec<u64> = (0..20_000)
            .map(|i| sizes.records_of(&format!("s{i}.example.edu")))
            .collect();
        assert_eq!(
            sizes.records_of("s7.example.edu"),
            sizes.records_of("s7.example.edu")
        );
        n.sort_unstable();
        let median = n[n.len() / 2];
        assert!((270..=330).contains(&median), "median {median}");
        let p99 = n[n.len() * 99 / 100];
        assert!((3_500..=7_000).contains(&p99), "p99 {p99}");
        assert_eq!(*n.last().unwrap(), 20_000, "the tail reaches the most");
        assert!(*n.first().unwrap() >= 1);
    }

    #[test]
    fn a_result_holds_the_records_it_claims_on_the_site_and_every_copy_holds_the_same() {
        let (mut g, host, key) = grid(1000);
        let unit = memory_unit(&mut g, host, &key, T0 + 1);
        for median in [1, 40, 300, 5_000] {
            let sizes = LinkFileSizes {
                median,
                sigma: 0.0,
                most: 20_000,
            };
            let (summary, file) = realistic_result(&unit, &sizes).expect("made");
            let (header, records) = linkfile::decode(&file).expect("decodes");
            assert_eq!(records.len() as u64, median);
            assert_eq!((summary.links, header.records), (median, median));
            assert_eq!(summary.pages, median.div_ceil(LINKS_PER_PAGE));
            assert_eq!((header.unit_id, &header.site), (unit.unit_id, &unit.site));
            let on_site = format!("http://{}/", unit.site);
            assert!(records.iter().all(|r| r.source_url.starts_with(&on_site)));
            let partners: std::collections::HashSet<&str> = records
                .iter()
                .filter(|r| !r.target_url.starts_with(&on_site))
                .map(|r| r.target_url.split('/').nth(2).unwrap_or_default())
                .collect();
            assert_eq!(
                summary.distinct_target_hosts,
                (partners.len() as u64 + 1).min(median)
            );
            if median >= 300 {
                let share = partners.len() as f64;
                assert!(share > 10.0, "links leave the site: {share} hosts");
            }
            // Another copy of the job: another unit, the same records.
            let copy = WorkUnit {
                unit_id: unit.unit_id + 1,
                ..unit.clone()
            };
            let (_, other) = realistic_result(&copy, &sizes).expect("made");
            assert_eq!(linkfile::decode(&other).expect("decodes").1, records);
        }
    }

    #[test]
    fn a_made_up_result_passes_alone_and_disagrees_with_the_honest_one() {
        for delay_ms in [1_000, 0] {
            let (mut g, h, key) = grid(delay_ms);
            let unit = memory_unit(&mut g, h, &key, T0 + 1);
            let sizes = LinkFileSizes::default();
            let (honest_summary, honest) = realistic_result(&unit, &sizes).expect("made");
            let (summary, file) = made_up_result(&unit, &sizes).expect("made");
            let claims = ScanSummary {
                distinct_target_hosts: honest_summary.distinct_target_hosts,
                ..summary.clone()
            };
            assert_eq!(claims, honest_summary, "the same pages, links and time");
            // As the server judges two copies: their sketches from its own
            // check, compared with the agreement it asks for (honest copies
            // hold the same records: tested above).
            let UploadStep::Plan(plan) = g.upload_begin(h, unit.unit_id, T0 + 2).expect("begin")
            else {
                panic!("no upload plan");
            };
            let sketch =
                |s: &ScanSummary, f: &[u8]| plan.verify(s, f, None).expect("passes").sketch;
            let lie = similarity(&sketch(&honest_summary, &honest), &sketch(&summary, &file));
            assert!(lie < MIN_SIMILARITY / 2.0, "a made-up copy agrees: {lie}");
            let outcome =
                beebot_server::simulate::finish_upload(&mut g, &plan, summary, &file, None, T0 + 2)
                    .expect("upload");
            assert!(
                matches!(outcome, UploadOutcome::Accepted),
                "delay {delay_ms}: {outcome:?}"
            );
        }
    }

    /// `unit`'s result uploaded by `h` at `now_ms`, checked and kept as
    /// `serve` does.
    fn upload(
        g: &mut Grid,
        h: u64,
        unit: &WorkUnit,
        (summary, file): (ScanSummary, Vec<u8>),
        now_ms: u64,
    ) -> UploadOutcome {
        let UploadStep::Plan(plan) = g.upload_begin(h, unit.unit_id, now_ms).expect("begin") else {
            panic!("no upload plan");
        };
        beebot_server::simulate::finish_upload(g, &plan, summary, &file, None, now_ms)
            .expect("upload")
    }

    /// A grid in memory with one round of 50 sites at `delay_ms` and one
    /// enrolled host.
    fn grid(delay_ms: u64) -> (Grid, u64, VerifyingKey) {
        let sites: Vec<String> = (0..50).map(|i| format!("s{i}.example.edu")).collect();
        let params = RoundParams {
            delay_ms,
            ..RoundParams::default()
        };
        memory_grid(&sites, params, T0)
    }

    #[test]
    fn the_server_accepts_them_at_a_polite_delay_and_at_zero() {
        for delay_ms in [1_000, 0] {
            let (mut g, h, key) = grid(delay_ms);
            let req = WorkRequest {
                want_seconds: 600,
                free_slots: 1,
                units_held: vec![],
                open_windows: None,
            };
            let reply = g.request_work(h, &req, T0 + 1).unwrap();
            assert!(!reply.units.is_empty());
            for signed in reply.units {
                let unit = sign::verify_unit(&key, &signed).unwrap();
                let (summary, file) = realistic_result(&unit, &LinkFileSizes::default()).unwrap();
                let (header, records) = linkfile::decode(&file).unwrap();
                assert_eq!(header.unit_id, unit.unit_id);
                assert_eq!(records.len() as u64, summary.links);
                assert_eq!(
                    summary.links,
                    LinkFileSizes::default().records_of(&unit.site)
                );
                let outcome = upload(&mut g, h, &unit, (summary, file), T0 + 2);
                assert!(
                    matches!(outcome, UploadOutcome::Accepted),
                    "delay {delay_ms}: {outcome:?}"
                );
            }
        }
    }

    #[test]
    fn a_result_claiming_less_time_than_the_delay_allows_is_refused() {
        let (mut g, h, key) = grid(1_000);
        let unit = memory_unit(&mut g, h, &key, T0 + 1);
        let sizes = LinkFileSizes {
            median: 2_000,
            sigma: 0.0,
            most: 20_000,
        };
        let (mut summary, file) = realistic_result(&unit, &sizes).unwrap();
        assert!(summary.pages > 10);
        summary.elapsed_ms = 10;
        let outcome = upload(&mut g, h, &unit, (summary, file), T0 + 2);
        assert!(matches!(outcome, UploadOutcome::Rejected(_)), "{outcome:?}");
    }
}
