//! `beebot`: the employee's command line. Join a project, run the work loop,
//! show status, or scan one site locally.
//!
//! This file only parses the command line and hands it to [`cli::dispatch`];
//! each command lives in its own module under `cli/` and returns what it
//! prints. Any error is printed as `error: …` and exits with status 1.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::Cli::parse();
    cli::init_logging(&args);
    if let Err(e) = cli::dispatch(args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
