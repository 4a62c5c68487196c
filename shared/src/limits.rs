//! Every bound of the grid, in one place, each with the reason for its value.

/// Largest protocol frame (request or response), checked before any allocation.
/// An upload carries one link file and maybe a scan state, so this is their
/// caps plus headroom.
pub const MAX_FRAME_BYTES: usize = MAX_LINK_FILE_BYTES + MAX_SCAN_STATE_BYTES + 64 * 1024;

/// Largest compressed scan state (a scan's frontier, see `scanstate`): a full
/// queue of typical URLs and the seen digests of a large site fit well below.
pub const MAX_SCAN_STATE_BYTES: usize = 16 * 1024 * 1024;

/// Largest decompressed scan state: zstd bombs stop here.
pub const MAX_SCAN_STATE_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// The largest window a compressed link file or scan state may ask for, as
/// a power of two (8 MiB). A zstd frame's header names the window its
/// reader must allocate, so a frame asking more is refused before that is
/// allocated (zstd's own default allows 128 MiB for every upload being
/// checked). Both are made at level 3, whose window is at most 2 MiB; every
/// level up to 19 stays within 8 MiB.
pub const MAX_ZSTD_WINDOW_LOG: u32 = 23;

/// URLs waiting in one crawl's queue: a site of a million pages rarely has more
/// than this many unvisited links at once, and each entry costs at most
/// [`MAX_URL_LEN`] bytes, twice (queue and seen set).
pub const MAX_FRONTIER_URLS: usize = 200_000;

/// robots.txt answers a scan state carries (the rest are asked again).
pub const MAX_STATE_ROBOTS: usize = 64;

/// robots.txt bytes a scan state carries in all.
pub const MAX_STATE_ROBOTS_BYTES: usize = 2 * 1024 * 1024;

/// Scans one job may take (the first and its continuations): a job of the
/// largest size at the round's shortest time budget, with room. A scan that
/// ends early without a new page counts as a failed attempt besides.
pub const MAX_SCANS_PER_JOB: usize = 1000;

/// Largest compressed link file a host may upload: a site of 10,000 pages with
/// a few hundred outbound links each compresses well below this.
pub const MAX_LINK_FILE_BYTES: usize = 32 * 1024 * 1024;

/// Largest decompressed link file: zstd bombs stop here, not in the allocator.
pub const MAX_LINK_FILE_DECOMPRESSED_BYTES: usize = 256 * 1024 * 1024;

/// Memory a link file's records may take when decoded: their texts' bytes
/// plus the size of a record each. bincode charges only what it reads, and an
/// empty record is 5 bytes on the wire but 80 in memory, so this is counted
/// while decoding, record by record; honest files are far below it.
pub const MAX_LINK_FILE_MEMORY_BYTES: usize = 256 * 1024 * 1024;

/// Most records in one link file (pages × links kept per page, with headroom).
pub const MAX_LINK_RECORDS: usize = 2_000_000;

/// Longest URL kept anywhere (links, seeds): longer ones are dropped as traps.
pub const MAX_URL_LEN: usize = 2048;

/// Anchor text kept per link, in characters (whitespace collapsed first).
pub const MAX_ANCHOR_CHARS: usize = 128;

/// Most work units one reply may carry.
pub const MAX_UNITS_PER_REPLY: usize = 64;

/// Most slots (sites scanned at once) a host may announce.
pub const MAX_SLOTS: u32 = 64;

/// Largest encoded work unit: a unit is a few hundred bytes of fields.
pub const MAX_UNIT_BYTES: usize = 16 * 1024;

/// Exclusions one work unit carries (those inside its scope, see
/// `scope::Exclusion`): 32 of the longest host names (253 bytes) are about
/// 8 KiB, so a unit stays within [`MAX_UNIT_BYTES`]. A site whose scope holds
/// more is scanned with scope `host`, which reaches no other host.
pub const MAX_UNIT_EXCLUSIONS: usize = 32;

/// Hosts excluded from crawling at once (`sites exclude`): a bound on memory,
/// far above what site owners ask for.
pub const MAX_EXCLUSIONS: usize = 100_000;

/// Characters of an exclusion's reason (a site owner's request, a ticket).
pub const MAX_EXCLUSION_REASON_CHARS: usize = 500;

/// Host names longer than this are not valid DNS names.
pub const MAX_HOST_LEN: usize = 253;

/// Most sites in the target set (bounds `sites import` and round creation).
pub const MAX_SITES: usize = 1_000_000;

/// Free text fields a host sends (name, OS, version, error reasons).
pub const MAX_TEXT_LEN: usize = 512;

/// Most error reasons kept per job.
pub const MAX_REASONS_PER_JOB: usize = 16;

/// Pages per site a round may ask for.
pub const MAX_PAGES_PER_SITE: u32 = 1_000_000;

/// Longest politeness delay a round may set between two requests to one host.
pub const MAX_DELAY_MS: u64 = 60_000;

/// Longest a work-request reply may ask a host to wait before asking again.
pub const MAX_RETRY_AFTER_SECS: u64 = 3600;

/// Seconds of work a host may ask for at once (two days).
pub const MAX_WANT_SECONDS: u64 = 2 * 24 * 3600;

/// Nonce length of the connection proof.
pub const NONCE_LEN: usize = 32;

/// Invite tokens: random bytes (stored hashed on the server).
pub const INVITE_TOKEN_LEN: usize = 24;

/// Most distinct links kept per page: real pages have hundreds; more is a trap or a sitemap dump.
pub const MAX_LINKS_PER_PAGE: usize = 10_000;

/// Open-window intervals a work request may carry (two weeks of twice-daily windows, with room).
pub const MAX_WINDOW_INTERVALS: usize = 64;

/// Units a client keeps per slot: the one scanning and the ones waiting to
/// cover the round trip to the server (the client asks for no more, and the
/// server gives a host no more than this many per slot).
pub const MAX_UNITS_PER_SLOT: usize = 4;

/// Units one host may hold at once, across rounds, whatever slots it claims:
/// a single desktop (or a liar) never takes more than this share of a round.
/// Twice the units of a host at the slot limit scanning one each.
pub const MAX_UNITS_HELD_PER_HOST: usize = 2 * MAX_SLOTS as usize;

/// Progress reports one `ScanProgressAll` may carry: a host runs at most
/// `MAX_SLOTS` scans at once, each holding a unit. A longer list is
/// refused (`BadRequest`) before the grid walks it.
pub const MAX_REPORTS_PER_REQUEST: usize = MAX_UNITS_HELD_PER_HOST;

/// Fastest reference-site benchmark believed, pages per second (delay 0 on
/// the project's own server). A desktop beside the server can measure
/// more (3,000 pages/s and over on loopback); a higher claim is counted as
/// this, so a liar is no faster than the fastest, and the client says so.
pub const MAX_BENCHMARK_PAGES_PER_S: f64 = 1000.0;

/// Fastest benchmark download believed, KB per second (a 10 Gbit/s link).
/// A higher claim is clamped to it.
pub const MAX_BENCHMARK_KB_PER_S: f64 = 1_250_000.0;

/// Fastest a host's learned speed is taken to be, pages per second (its
/// benchmark's bound: a scan of a real site is never faster than that).
pub const MAX_HOST_PAGES_PER_S: f64 = MAX_BENCHMARK_PAGES_PER_S;

/// Scan-pace check of a summary (`elapsed_ms` against the politeness delay):
/// requests free of the delay besides the first of each origin (a client
/// restarted from a checkpoint starts a fresh pace: one free page each).
pub const PACE_FREE_PAGES: u64 = 2;

/// Scan-pace check: the share of the delays an honest scan's elapsed time
/// must cover (timers and clocks are not exact; a lie is off by far more).
pub const PACE_TOLERANCE: f64 = 0.9;

/// Unit ids a work request may name as held: a client spools at most 1,024
/// units (`MAX_SPOOLED_UNITS`) and stops asking for work when full, so a
/// longer list is not an honest client's; it is refused before the grid walks it.
pub const MAX_UNITS_HELD: usize = 1024;

/// Most memory a host may offer its scans, MB (1 TiB). A higher claim is
/// clamped to it.
pub const MAX_HOST_MEMORY_MB: u32 = 1 << 20;

/// A running scan reports its progress this often, seconds (the server
/// says so in `Welcome`); the dashboard's rates are measured over whole
/// multiples of it, so reports arriving in steps draw a steady line.
pub const PROGRESS_INTERVAL_S: u64 = 10;

/// A host crawls a unit's site only while the server answered one of its
/// scan's progress reports (sent every [`PROGRESS_INTERVAL_S`]) within
/// this many seconds:
/// a host that cannot report stops at the next page boundary, so the
/// server may hand the site to another host without two request streams.
pub const LEASE_S: u64 = 60;

/// The server takes back a scan whose host has not reported for this many
/// seconds (the lease, plus the longest request a scan may have started
/// just before it lapsed, plus a margin): its job goes on elsewhere from
/// its last uploaded part, unless the host reports first.
pub const LEASE_TAKEOVER_S: u64 = 180;

/// A running scan uploads what it did since its previous part (its
/// records and frontier, at a checkpoint) once this many seconds have
/// passed since that part (or its start), and goes on: a host that
/// takes its site over after the lease starts there, not from the seed.
/// A scan shorter than this uploads no part.
pub const PART_INTERVAL_S: u64 = 120;

/// Parts a job keeps at most (half its [`MAX_SCANS_PER_JOB`] segments):
/// a part of a job that holds as many segments is not kept (answered
/// `Ack`), and its scan goes on uploading at its end only, so a very long
/// site (a page cap of hundreds of thousands) is never failed for the
/// parts it sent.
pub const MAX_PARTS_PER_JOB: usize = MAX_SCANS_PER_JOB / 2;
