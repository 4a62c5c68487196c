//! `beebot`: the employee's command line. Join a project, run the work loop,
//! show status, or scan one site locally.
//!
//! This file only parses the command line and hands it to [`cli::dispatch`];
//! each command lives in its own module under `cli/` and returns what it
//! prints. Any error is printed as `error: …` and exits with status 1.

mod cli;

use clap::Parser;

fn main() {
    // Everything the client writes (keys, spool, status, logs, its data
    // dir) is its user's alone, whatever the umask it was started with.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let args = cli::Cli::parse();
    cli::init_logging(&args);
    if let Err(e) = cli::dispatch(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
