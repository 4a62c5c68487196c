//! Live progress bars for `beebot run` on a terminal: one line for the
//! client's state and one per scan, drawn from the live status the work loop
//! writes (so the display never slows the work down).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::control::{read_live_status, LiveStatus};

/// How often the display refreshes.
const REFRESH: Duration = Duration::from_millis(500);

/// The header line for a live status.
pub fn header_text(s: &LiveStatus) -> String {
    format!(
        "{} · {} scans · {} results, {} pages, {} links today · {} uploads pending{}",
        crate::control::state_text(s, crate::control::unix_ms(std::time::SystemTime::now())),
        s.scans.len(),
        s.today_results,
        s.today_pages,
        s.today_links,
        s.pending_uploads,
        s.last_error
            .as_ref()
            .map(|e| format!(" · last error: {e}"))
            .unwrap_or_default()
    )
}

/// Draw until `stop` is set (run it on its own thread).
pub fn run(data_dir: PathBuf, stop: Arc<AtomicBool>) {
    let multi = MultiProgress::new();
    let style = ProgressStyle::with_template("{spinner} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let header = multi.add(ProgressBar::new_spinner());
    header.set_style(style.clone());
    let mut bars: BTreeMap<u64, ProgressBar> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        if let Some(s) = read_live_status(&data_dir) {
            header.set_message(header_text(&s));
            header.tick();
            bars.retain(|id, bar| {
                let keep = s.scans.iter().any(|x| x.unit_id == *id);
                if !keep {
                    bar.finish_and_clear();
                }
                keep
            });
            for scan in &s.scans {
                let bar = bars.entry(scan.unit_id).or_insert_with(|| {
                    let b = multi.add(ProgressBar::new_spinner());
                    b.set_style(style.clone());
                    b
                });
                bar.set_message(format!(
                    "{:<40} {:>6} pages {:>7} links {:>7.1} pages/s",
                    scan.site, scan.pages, scan.links, scan.pages_per_s
                ));
                bar.tick();
            }
        }
        std::thread::sleep(REFRESH);
    }
    for b in bars.values() {
        b.finish_and_clear();
    }
    header.finish_and_clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_says_state_and_totals() {
        let s = LiveStatus {
            state: "running".into(),
            today_results: 3,
            today_pages: 120,
            today_links: 900,
            pending_uploads: 1,
            ..Default::default()
        };
        let t = header_text(&s);
        assert!(
            t.starts_with("running · 0 scans · 3 results, 120 pages, 900 links"),
            "{t}"
        );
        assert!(t.contains("1 uploads pending"));
    }
}
