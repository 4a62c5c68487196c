//! The herd after a restart: the server is killed and started again, and
//! hosts reconnect with the client's backoff (exponential, full jitter); the
//! table shows how they spread out instead of arriving at once.

use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use beebot_client::net::{Link, ServerId};
use beebot_shared::fetch_rules::backoff_delay;

use crate::play::Host;
use crate::start_server;

/// Backoff of the herd phase: the client's defaults.
const HERD_BACKOFF_BASE: Duration = Duration::from_secs(1);
const HERD_BACKOFF_CAP: Duration = Duration::from_secs(300);
/// Reconnection attempts per host in the herd phase.
const HERD_MAX_ATTEMPTS: u32 = 8;
/// Width of one bar of the herd histogram.
const HERD_BUCKET: Duration = Duration::from_millis(250);

/// Kill the server, restart it, and reconnect `hosts` with the client's
/// backoff; prints when they came back. Returns the new server process.
pub async fn herd(
    hosts: &[Arc<Host>],
    server: &ServerId,
    bin: &Path,
    dir: &Path,
    log: &Path,
    child: &mut Child,
) -> Result<Child> {
    println!();
    println!(
        "herd: {} hosts connected; server SIGKILLed and restarted; each host reconnects",
        hosts.len()
    );
    println!(
        "after backoff_delay(attempt, {:?}, {:?}) (exponential, full jitter), as `beebot run` does",
        HERD_BACKOFF_BASE, HERD_BACKOFF_CAP
    );
    child.kill().context("kill the server")?;
    let _ = child.wait();
    let killed = Instant::now();
    let new_child = start_server(bin, dir, log)?;
    let restarted = killed.elapsed();
    let (times, failed) = reconnect_all(hosts, server, killed).await;
    print_herd(&times, restarted, failed);
    Ok(new_child)
}

/// Each host reconnects (and says hello) after the client's backoff from
/// `killed`; returns the sorted times since `killed` of those that came
/// back, and how many gave up.
async fn reconnect_all(
    hosts: &[Arc<Host>],
    server: &ServerId,
    killed: Instant,
) -> (Vec<Duration>, u64) {
    let times: Arc<Mutex<Vec<Duration>>> = Arc::new(Mutex::new(Vec::new()));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for h in hosts {
        let h = h.clone();
        let server = server.clone();
        let times = times.clone();
        let failed = failed.clone();
        tasks.push(tokio::spawn(async move {
            for attempt in 1..=HERD_MAX_ATTEMPTS {
                let wait = backoff_delay(
                    attempt,
                    HERD_BACKOFF_BASE,
                    HERD_BACKOFF_CAP,
                    rand::random::<f64>(),
                );
                tokio::time::sleep_until(tokio::time::Instant::from_std(killed + wait)).await;
                let ok = async {
                    let link = Link::connect(&server).await?;
                    link.hello(h.id, &h.key).await?;
                    Ok::<_, beebot_client::net::NetError>(link)
                }
                .await;
                if let Ok(link) = ok {
                    times
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(killed.elapsed());
                    link.close();
                    return;
                }
            }
            failed.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut v = times.lock().unwrap_or_else(|p| p.into_inner()).clone();
    v.sort();
    (v, failed.load(Ordering::Relaxed))
}

/// When the herd came back: first and last, and a histogram of
/// [`HERD_BUCKET`] windows.
fn print_herd(v: &[Duration], restarted: Duration, failed: u64) {
    println!(
        "server back after {:.2}s; {} reconnected, {} gave up",
        restarted.as_secs_f64(),
        v.len(),
        failed
    );
    if let (Some(first), Some(last)) = (v.first(), v.last()) {
        println!(
            "reconnections from {:.2}s to {:.2}s after the kill",
            first.as_secs_f64(),
            last.as_secs_f64()
        );
    }
    let buckets = v
        .last()
        .map(|l| (l.as_millis() / HERD_BUCKET.as_millis()) as usize + 1)
        .unwrap_or(0);
    let mut counts = vec![0usize; buckets];
    for t in v {
        counts[(t.as_millis() / HERD_BUCKET.as_millis()) as usize] += 1;
    }
    let busiest = counts.iter().copied().max().unwrap_or(0);
    for (i, c) in counts.iter().enumerate() {
        let from = i as f64 * HERD_BUCKET.as_secs_f64();
        println!(
            "  {from:>5.2}s {c:>5} {}",
            "#".repeat((c * 50).div_ceil(busiest.max(1)))
        );
    }
    println!(
        "busiest {}ms window: {} of {} hosts ({:.0}%)",
        HERD_BUCKET.as_millis(),
        busiest,
        v.len(),
        100.0 * busiest as f64 / v.len().max(1) as f64
    );
}
