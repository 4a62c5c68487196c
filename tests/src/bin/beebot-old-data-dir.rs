//! `beebot-old-data-dir DIR`: write the data dir this release leaves
//! behind, for the test that opens it with later builds (never shipped;
//! see `beebot_tests::old_release`). Run from the workspace after a
//! release build of `beebot-server` and `beebot`.

use std::path::PathBuf;

fn main() {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: beebot-old-data-dir DIR (a directory not there yet)");
        std::process::exit(2);
    };
    if out.exists() {
        eprintln!("{}: already there; give a new directory", out.display());
        std::process::exit(2);
    }
    beebot_tests::old_release::write(&out);
    println!("{}", out.display());
}
