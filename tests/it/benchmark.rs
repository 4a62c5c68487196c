//! The reference site and the benchmark: the real crawler scans every page of
//! the reference site a server serves on its own port; `beebot benchmark`
//! sends pages/s and KB/s to the project and `hosts list` shows them; `beebot
//! run` benchmarks by itself on first start. All on loopback.

use beebot_client::cancel::Cancel;
use std::time::{Duration, Instant};

use beebot_client::benchmark;
use beebot_client::crawler::CrawlerConfig;
use beebot_server::reference::{self, REFERENCE_PAGES};
use beebot_tests::*;

fn invite(g: &Grid) -> String {
    let o = g.admin_ok(&["invite", "--uses", "2", "--expires", "1h"]);
    last_line(&o)
}

fn join(g: &Grid, name: &str, code: &str) {
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join failed: {}", stderr(&o));
}

/// The benchmark column of `hosts list` for host `name`.
fn benchmark_column(g: &Grid, name: &str) -> Option<String> {
    let out = stdout(&g.admin_ok(&["hosts", "list"]));
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next()?.split('\t').collect();
    let column = header.iter().position(|h| *h == "benchmark")?;
    lines
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .find(|cols| cols.get(1) == Some(&name))
        .and_then(|cols| cols.get(column).map(|c| c.to_string()))
}

/// Pages per second in a `hosts list` benchmark cell (`12.3 p/s 456 KB/s`).
fn pages_per_s(cell: &str) -> Option<f64> {
    cell.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_benchmark_scans_every_page_of_the_reference_site() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        rt.block_on(reference::serve(listener, async move {
            let _ = stopped.await;
        }))
    });
    let cfg = CrawlerConfig {
        allow_private: true,
        ..CrawlerConfig::default()
    };
    let mut calls = 0u64;
    let record = benchmark::run(
        &format!("http://{addr}/"),
        &cfg,
        &Cancel::new(),
        &mut |_| calls += 1,
    )
    .expect("benchmark");
    assert_eq!(record.pages, REFERENCE_PAGES as u64, "{record:?}");
    assert_eq!(calls, record.pages);
    assert!(record.bytes > REFERENCE_PAGES as u64 * 2000, "{record:?}");
    assert!(record.pages_per_s > 0.0 && record.kb_per_s > 0.0);
    let _ = stop.send(());
    server.join().expect("server thread").expect("served");

    // Private addresses stay refused unless allowed.
    let err = benchmark::run(
        &format!("http://{addr}/"),
        &CrawlerConfig::default(),
        &Cancel::new(),
        &mut |_| {},
    );
    assert!(matches!(err, Err(benchmark::BenchmarkError::NoPages(_))));
}

#[test]
fn beebot_benchmark_reports_to_the_project_and_hosts_list_shows_it() {
    let g = Grid::start(1, 1);
    let code = invite(&g);
    join(&g, "a", &code);
    assert_eq!(benchmark_column(&g, "a").as_deref(), Some("-"));
    let o = g.client("a", &["benchmark"]);
    assert!(o.status.success(), "benchmark failed: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("{REFERENCE_PAGES} pages")) && out.contains("pages/s"),
        "{out}"
    );
    assert!(out.contains("sent to the project"), "{out}");
    // Piped: no progress line on stderr.
    assert!(!stderr(&o).contains("queued"), "{}", stderr(&o));
    let cell = benchmark_column(&g, "a").expect("a's row");
    assert!(pages_per_s(&cell).is_some_and(|p| p > 0.0), "{cell}");
}

#[test]
fn beebot_run_benchmarks_on_first_start() {
    let g = Grid::start(2, 1);
    let code = invite(&g);
    join(&g, "b", &code);
    let mut args = vec!["run"];
    let flags = g.crawl_flags();
    args.extend(flags.iter().map(String::as_str));
    let mut child = g
        .client_cmd("b", &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn client");
    let started = Instant::now();
    let cell = loop {
        let cell = benchmark_column(&g, "b").unwrap_or_default();
        if pages_per_s(&cell).is_some() || started.elapsed() > Duration::from_secs(60) {
            break cell;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(pages_per_s(&cell).is_some_and(|p| p > 0.0), "{cell:?}");
}

#[test]
fn init_can_point_the_project_at_another_reference_site() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("server");
    let o = run(
        std::process::Command::new(bin("beebot-server")).args([
            "init",
            "--data-dir",
            data.to_str().expect("path"),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--reference-listen",
            "off",
            "--reference-site",
            "http://reference.example.org/",
            "--contact",
            beebot_tests::TEST_CONTACT,
        ]),
        Duration::from_secs(60),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg = beebot_server::config::DataDir(data)
        .load_config()
        .expect("config");
    assert_eq!(cfg.reference_site, "http://reference.example.org/");
    assert_eq!(cfg.reference_listen, "");
    assert!(stdout(&o).contains("reference    http://reference.example.org/"));
}
