//! `beebot benchmark`: scan the project's reference site (or `--url`) and
//! report pages/s and KB/s; a measurement of the project's own site goes to
//! the server, as `beebot run` does on first start and weekly.
//!
//! A live progress line goes to stderr; the figures stay said should the
//! send fail. A `--url` result is never sent.

use beebot_client::cancel::Cancel;

use anyhow::Result;

use beebot_client::benchmark::{self, BenchmarkRecord};
use beebot_client::crawler::progress::ProgressLine;
use beebot_client::home::Home;
use beebot_client::rt::runtime;
use beebot_client::settings;

use super::args::NetArgs;
use super::Said;

/// Run the benchmark, and send its result when it measured the project's
/// reference site.
pub fn benchmark(home: &Home, url: Option<String>, net: &NetArgs) -> Result<Said> {
    let mut cfg = net.crawler_config()?;
    let (settings, _) = settings::load(home, &|k| std::env::var(k).ok(), &[])?;
    let rt = runtime()?;
    let from_project = url.is_none();
    let url = match url {
        Some(url) => url,
        None => {
            let url = rt.block_on(benchmark::project_reference_site(home))?;
            anyhow::ensure!(
                !url.is_empty(),
                "the project names no reference site; pass --url URL"
            );
            // Named by the project's own server over the pinned link.
            cfg.allow_private = true;
            url
        }
    };
    let mut progress = ProgressLine::stderr();
    let record = benchmark::run(&url, &cfg, &Cancel::new(), &mut |p| progress.update(p));
    progress.finish();
    let record = record?;
    let mut said = Said::from(figures(&record));
    if from_project {
        match rt.block_on(benchmark::send(home, &record, settings.slots)) {
            Ok(()) => said.out.push_str(&sent(&record)),
            Err(e) => said.failed = Some(e),
        }
    }
    Ok(said)
}

/// What `benchmark` says once the project has its figures: the project
/// believes a benchmark up to a bound, and says so when this one is over it.
fn sent(r: &BenchmarkRecord) -> String {
    use beebot_shared::limits::MAX_BENCHMARK_PAGES_PER_S as CAP;
    if r.pages_per_s > CAP {
        format!("sent to the project, which counts it as {CAP:.0} pages/s (its most believed)\n")
    } else {
        "sent to the project\n".to_string()
    }
}

/// The benchmark's figures in one line.
fn figures(r: &BenchmarkRecord) -> String {
    format!(
        "{}: {} pages, {:.1} MB in {:.1}s: {:.1} pages/s, {:.0} KB/s\n",
        r.url,
        r.pages,
        r.bytes as f64 / 1e6,
        r.seconds,
        r.pages_per_s,
        r.kb_per_s
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_benchmark_over_the_projects_bound_says_what_it_counts_as() {
        let mut r = BenchmarkRecord {
            at_ms: 0,
            url: String::new(),
            pages: 1,
            bytes: 1,
            seconds: 1.0,
            pages_per_s: 3413.0,
            kb_per_s: 1.0,
        };
        assert_eq!(
            sent(&r),
            "sent to the project, which counts it as 1000 pages/s (its most believed)\n"
        );
        r.pages_per_s = 40.0;
        assert_eq!(sent(&r), "sent to the project\n");
    }

    #[test]
    fn the_figures_read_as_pages_and_kilobytes_per_second() {
        let r = BenchmarkRecord {
            at_ms: 0,
            url: "http://ref.test/".into(),
            pages: 120,
            bytes: 2_500_000,
            seconds: 10.0,
            pages_per_s: 12.0,
            kb_per_s: 250.0,
        };
        assert_eq!(
            figures(&r),
            "http://ref.test/: 120 pages, 2.5 MB in 10.0s: 12.0 pages/s, 250 KB/s\n"
        );
    }
}
