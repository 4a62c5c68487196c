//! The data dir a release leaves behind, kept under `tests/fixtures/`
//! so that later builds are tested to open it (`tests/it/export.rs`,
//! `a_data_dir_of_the_previous_release_opens_and_exports_the_same`). Written
//! by `cargo run -p beebot-tests --bin beebot-old-data-dir -- DIR` on the
//! release it stands for: one round over [`SITES`] sites of the synthetic
//! web of seed [`SEED`], scanned by one client, its export beside it.

use std::path::{Path, PathBuf};

use crate::{last_line, Grid};

/// The synthetic web the round scanned.
pub const SEED: u64 = 45;
pub const SITES: usize = 4;
/// The release whose data dir the test opens: the one before this build.
pub const PREVIOUS_RELEASE: &str = "0.1.0";

/// Where the previous release's data dir is kept: `server/` (the data dir)
/// and `round-1.tsv` (its round's export as that release wrote it).
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("data-dir-{PREVIOUS_RELEASE}"))
}

/// Run the round and write `out/server` and `out/round-1.tsv`.
pub fn write(out: &Path) {
    let mut g = Grid::start(SEED, SITES);
    let code = g.invite(1);
    g.join("a", &code);
    g.import_sites();
    let round = last_line(&g.admin_ok(&["round", "start", "--delay-ms", "5"]));
    g.run_once("a", 2, &[]).wait_ok("run --once");
    g.wait_round(&round, "240s");
    g.export_rows(&round);
    g.stop_server();
    // The ports back to "any free one", as `init` wrote them: the data dir
    // is opened elsewhere.
    let dir = beebot_server::config::DataDir(g.data_dir());
    let mut cfg = dir.load_config().expect("config");
    cfg.listen = "127.0.0.1:0".into();
    cfg.public_addr = "127.0.0.1:0".into();
    dir.save_config(&cfg).expect("save config");
    let _ = std::fs::remove_file(g.data_dir().join("serve.json"));
    crate::copy_dir(&g.data_dir(), &out.join("server"));
    std::fs::copy(
        g.dir.path().join(format!("export-{round}.tsv")),
        out.join(format!("round-{round}.tsv")),
    )
    .expect("copy the export");
}
