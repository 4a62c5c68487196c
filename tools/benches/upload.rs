//! Upload-check bench (`cargo bench -p beebot-tools --bench upload`): the
//! server's check of one uploaded link file (`UploadPlan::verify`, as
//! `serve` runs it off the grid thread for every upload: decompress, decode,
//! every record's source on the site, every pair's digest into the sketch)
//! on link files made as an honest client makes them
//! (`beebot_tools::loadfiles::realistic_result`), at the real web's median
//! size (300 records), ten times that, and the most the load generator draws
//! (20,000), in a round at the default politeness delay (1 s; the pace
//! check passes as it does for an honest client). Prints one table: µs per
//! file and records per second, and beside them µs per file of the making
//! side: `linkfile::encode` of the same records (what a client does for
//! every result, and the load generator for every upload). A last line
//! takes the load generator's own mix ([`MIX_FILES`] files whose sizes are
//! drawn from `LinkFileSizes::default()`, as its sites' are): the check's
//! mean µs per file, the making's (`realistic_result`, records and all),
//! and what each costs in cores at the default 2,000 uploads a second.
//! Figures are compared within one run; nothing here asserts a speed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use beebot_server::grid::UploadStep;
use beebot_server::params::RoundParams;
use beebot_shared::linkfile;
use beebot_tools::loadfiles::{memory_grid, memory_unit, realistic_result, LinkFileSizes};

const T0: u64 = 1_750_000_000_000;
/// Records of the files checked.
const SIZES: [u64; 3] = [300, 3_000, 20_000];
/// Least time spent on each figure, and most files.
const MIN_TIME: Duration = Duration::from_secs(2);
const MAX_FILES: usize = 200_000;
/// Files of the load generator's mix.
const MIX_FILES: usize = 2_000;
/// Uploads a second the mix's cores are given at (the load generator's default).
const MIX_UPLOADS_PER_S: f64 = 2_000.0;

fn main() {
    let (mut g, host, key) =
        memory_grid(&["www.example.edu".to_string()], RoundParams::default(), T0);
    let unit = memory_unit(&mut g, host, &key, T0 + 1);
    let UploadStep::Plan(plan) = g.upload_begin(host, unit.unit_id, T0 + 2).expect("upload") else {
        panic!("no upload plan");
    };
    println!("one upload's check (UploadPlan::verify) of an honest client's link file");
    println!(
        "{:>10} {:>12} {:>10} {:>12} {:>14} {:>16} {:>18}",
        "records",
        "file bytes",
        "files",
        "µs per file",
        "records per s",
        "encode µs/file",
        "context kept µs"
    );
    for records in SIZES {
        let sizes = LinkFileSizes {
            median: records,
            sigma: 0.0,
            most: records,
        };
        let (summary, file) = realistic_result(&unit, &sizes).expect("link file");
        assert_eq!(summary.links, records);
        plan.verify(&summary, &file, None)
            .expect("an honest file passes");
        let (n, per_file) = time_each(|| {
            black_box(plan.verify(black_box(&summary), black_box(&file), None)).ok();
        });
        let (header, recs) = linkfile::decode(&file).expect("decodes");
        let (_, per_encode) = time_each(|| {
            black_box(linkfile::encode(black_box(&header), black_box(&recs))).ok();
        });
        let mut zstd = linkfile::new_compressor().expect("context");
        let (_, per_encode_kept) = time_each(|| {
            black_box(linkfile::encode_with(
                &mut zstd,
                black_box(&header),
                black_box(&recs),
            ))
            .ok();
        });
        println!(
            "{:>10} {:>12} {:>10} {:>12.1} {:>14.0} {:>16.1} {:>18.1}",
            records,
            file.len(),
            n,
            per_file * 1e6,
            records as f64 / per_file,
            per_encode * 1e6,
            per_encode_kept * 1e6
        );
    }

    // The load generator's mix: each file's records as a site's are drawn.
    let counts: Vec<u64> = (0..MIX_FILES)
        .map(|k| LinkFileSizes::default().records_of(&format!("site{k}.example.edu")))
        .collect();
    let sized = |records: u64| LinkFileSizes {
        median: records,
        sigma: 0.0,
        most: records,
    };
    let files: Vec<_> = counts
        .iter()
        .map(|&r| realistic_result(&unit, &sized(r)).expect("link file"))
        .collect();
    let mut rounds = 0;
    let started = Instant::now();
    while rounds == 0 || started.elapsed() < MIN_TIME {
        for &r in &counts {
            black_box(realistic_result(black_box(&unit), &sized(r))).ok();
        }
        rounds += 1;
    }
    let make = started.elapsed().as_secs_f64() / (rounds * MIX_FILES) as f64;
    for (summary, file) in &files {
        plan.verify(summary, file, None)
            .expect("an honest file passes");
    }
    let mut rounds = 0;
    let started = Instant::now();
    while rounds == 0 || started.elapsed() < MIN_TIME {
        for (summary, file) in &files {
            black_box(plan.verify(black_box(summary), black_box(file), None)).ok();
        }
        rounds += 1;
    }
    let check = started.elapsed().as_secs_f64() / (rounds * MIX_FILES) as f64;
    let mean_records = counts.iter().sum::<u64>() as f64 / MIX_FILES as f64;
    let mean_bytes = files.iter().map(|(_, f)| f.len()).sum::<usize>() as f64 / MIX_FILES as f64;
    println!();
    println!(
        "the load generator's mix: {MIX_FILES} files, mean {mean_records:.0} records, \
         {mean_bytes:.0} bytes"
    );
    println!(
        "{:>22} {:>12} {:>28}",
        "",
        "µs per file",
        format!("cores at {MIX_UPLOADS_PER_S} uploads/s")
    );
    for (what, per) in [("check (server)", check), ("make (load generator)", make)] {
        println!(
            "{:>22} {:>12.1} {:>28.2}",
            what,
            per * 1e6,
            per * MIX_UPLOADS_PER_S
        );
    }
}

/// Run `f` at least [`MIN_TIME`] and 10 times, at most [`MAX_FILES`]
/// times: the runs made and the seconds each took.
fn time_each(mut f: impl FnMut()) -> (usize, f64) {
    let start = Instant::now();
    let mut n = 0;
    while n < MAX_FILES && (start.elapsed() < MIN_TIME || n < 10) {
        f();
        n += 1;
    }
    (n, start.elapsed().as_secs_f64() / n as f64)
}
