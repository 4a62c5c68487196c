//! What a scan needs beyond a slot, for `pack`'s first fit: the memory its
//! expected size makes it hold, and the bandwidth the round's delay lets it
//! draw. A host offers both in `Request::Resources` (its `memory_mb` and
//! `bandwidth_kbps` settings); what its held units need is summed as if
//! they all ran at once (buffered units start as slots free), so a fit is
//! never optimistic.
//!
//! Invariants: pure; every figure is a named estimate, never a measurement
//! of one host.

use beebot_shared::proto::HostResources;

/// Memory a scan holds whatever its size, MB: its robots rules, the page
/// being parsed (up to the client's body cap) and its buffers.
pub const SCAN_BASE_MEMORY_MB: f64 = 4.0;
/// Memory a scan holds per page until its upload, KB: the page's links
/// kept for the link file (a page of ~50 links at ~120 bytes each in
/// memory) and its URL in the seen set and frontier.
pub const SCAN_PAGE_MEMORY_KB: f64 = 8.0;
/// A page's weight on the wire, KB (an HTML page and its robots share).
pub const PAGE_KB: f64 = 30.0;
/// Shortest time per page counted for bandwidth, seconds: a round at
/// delay 0 on a host that reports no speed still draws a finite rate.
const MIN_SECONDS_PER_PAGE: f64 = 0.01;

/// Memory a scan of `pages` expected pages holds, MB.
pub fn scan_memory_mb(pages: f64) -> f64 {
    SCAN_BASE_MEMORY_MB + pages.max(0.0) * SCAN_PAGE_MEMORY_KB / 1024.0
}

/// Bandwidth a scan draws, KB/s, when each page takes `seconds_per_page`
/// (the delay or the host's own pace, whichever is longer).
pub fn scan_kbps(seconds_per_page: f64) -> f64 {
    PAGE_KB / seconds_per_page.max(MIN_SECONDS_PER_PAGE)
}

/// What a host offers, as capacities (`f64::INFINITY`: no figure or no cap).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    pub memory_mb: f64,
    pub kbps: f64,
}

impl Capacity {
    /// No figure: nothing beyond slots is fitted.
    pub const UNBOUNDED: Capacity = Capacity {
        memory_mb: f64::INFINITY,
        kbps: f64::INFINITY,
    };

    /// A host's offer (a zero figure: none given, or no cap).
    pub fn of(r: Option<&HostResources>) -> Capacity {
        let figure = |v: u64| if v == 0 { f64::INFINITY } else { v as f64 };
        match r {
            None => Capacity::UNBOUNDED,
            Some(r) => Capacity {
                memory_mb: figure(u64::from(r.memory_mb)),
                kbps: figure(r.bandwidth_kbps),
            },
        }
    }
}

/// What a host's held units need at once.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Demand {
    pub memory_mb: f64,
    pub kbps: f64,
}

impl Demand {
    /// One scan of `pages` pages at `seconds_per_page`.
    pub fn of_scan(pages: f64, seconds_per_page: f64) -> Demand {
        Demand {
            memory_mb: scan_memory_mb(pages),
            kbps: scan_kbps(seconds_per_page),
        }
    }
    pub fn add(&mut self, d: Demand) {
        self.memory_mb += d.memory_mb;
        self.kbps += d.kbps;
    }
    /// Whether this demand fits in `cap`.
    pub fn fits(&self, cap: &Capacity) -> bool {
        self.memory_mb <= cap.memory_mb && self.kbps <= cap.kbps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_needs_memory_by_its_size_and_bandwidth_by_its_pace() {
        assert_eq!(scan_memory_mb(0.0), SCAN_BASE_MEMORY_MB);
        // 1,024 pages hold 8 MB of links beyond the base.
        assert_eq!(scan_memory_mb(1024.0), SCAN_BASE_MEMORY_MB + 8.0);
        // At the default delay of 1 s a scan draws a page a second.
        assert_eq!(scan_kbps(1.0), PAGE_KB);
        assert_eq!(scan_kbps(0.0), PAGE_KB / MIN_SECONDS_PER_PAGE);
    }

    #[test]
    fn a_host_that_gives_no_figure_or_no_cap_is_not_bounded_by_it() {
        assert_eq!(Capacity::of(None), Capacity::UNBOUNDED);
        let c = Capacity::of(Some(&HostResources {
            memory_mb: 512,
            bandwidth_kbps: 0,
        }));
        assert_eq!((c.memory_mb, c.kbps), (512.0, f64::INFINITY));
        let mut d = Demand::default();
        d.add(Demand::of_scan(1000.0, 1.0));
        assert!(d.fits(&c));
        d.add(Demand {
            memory_mb: 600.0,
            kbps: 0.0,
        });
        assert!(!d.fits(&c));
    }
}
