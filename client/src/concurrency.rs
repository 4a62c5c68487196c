//! How many sites the client scans at once: a pure controller that sizes the
//! client's concurrency from what it measures, within what the machine offers.
//!
//! At a politeness delay per host, a client's pages/s is the number of sites
//! it scans at once, so it scans as many as its budget allows: it starts at
//! [`START_SLOTS`], grows by [`GROWTH`] while pages/s grows with it (slow
//! start), and holds or backs off (by [`BACKOFF`]) when responses get slower,
//! its memory passes the budget or the bandwidth cap is reached; CPU over
//! the budget brings it down to the scans that fit under the hold line. A
//! growth step that did not pay (pages per busy slot fell below
//! [`PAY_SHARE`] of what they were) is undone, and the next
//! probe waits [`PROBE_AFTER_STEPS`] steps. A growth step goes at most one
//! scan past those that fit under [`CPU_HOLD_SHARE`] of the CPU budget at
//! the CPU share per scan measured, so a small budget (the default
//! `cpu_percent`, 2% of a core) is approached from below, not overshot.
//!
//! A run starts where the last one left off ([`Controller::resume`], from
//! what it [`Learned`]): its sites at once, within today's budget, so a
//! desktop reaches its pace in one step instead of seven.
//!
//! Invariants: the effective concurrency is always in `1..=cap`, where `cap`
//! is the least of the `slots` ceiling, [`MAX_SLOTS`], the memory budget
//! ([`SCAN_MEMORY_MB`] a scan) and, under a bandwidth cap, the scans that cap
//! feeds at the measured rate per scan. Pure: no clock, no I/O; the work loop
//! measures ([`Sample`]) and applies ([`Controller::step`]'s answer).

use beebot_shared::limits::MAX_SLOTS;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Sites scanned at once before anything is measured: four polite scans
/// take any desktop about 1% of a core and 20 MB, and a host not trusted
/// yet is given units for four slots (the server's `UNTRUSTED_MAX_SLOTS`).
pub const START_SLOTS: u32 = 4;

/// Memory budgeted per scan, MB: a scan's robots rules, the page being parsed
/// (up to the crawler's body cap; below a 10 ms delay a second page, fetched
/// while the first is parsed), its frontier and the records it keeps
/// until its upload; a 1,000-page site stays well below it. The default
/// `memory_mb` (1024) thus allows [`MAX_SLOTS`] scans.
pub const SCAN_MEMORY_MB: u32 = 16;

/// Concurrency grows by this factor per step (at least one slot) while pages/s
/// grows with it: from 4 to 64 in seven steps.
pub const GROWTH: f64 = 1.5;

/// A growth step paid when the pages per busy slot after it are at least
/// this share of those before it (at a politeness delay they stay about the
/// same; once something saturates, pages/s stays put and the share falls to
/// 1 / [`GROWTH`]).
pub const PAY_SHARE: f64 = 0.8;

/// Concurrency shrinks to this share (at least one slot less) on overload:
/// multiplicative decrease, so a machine in trouble is relieved in a few steps.
pub const BACKOFF: f64 = 0.75;

/// Responses this many times slower than the baseline are overload (shrink).
pub const SLOW_RATIO: f64 = 2.0;

/// Responses this many times slower than the baseline stop growth (hold).
pub const HOLD_RATIO: f64 = 1.5;

/// A rise in the mean response time smaller than this, seconds, is never
/// called slower: on loopback or a LAN responses take a millisecond, and a
/// scheduler's hiccup would otherwise double it.
pub const RESPONSE_NOISE_S: f64 = 0.05;

/// Share of the gap by which the response baseline follows slower responses
/// per judged step (it follows faster ones at once): after a lasting change
/// of the sites' own speed, growth resumes within about twenty steps.
pub const BASELINE_RISE: f64 = 0.05;

/// The CPU share, of the budget, above which growth holds.
pub const CPU_HOLD_SHARE: f64 = 0.8;

/// Steps over which the CPU share is judged against the budget (30 s at
/// the default 10 s step): one step's share swings with what its scans did
/// in it (a site's last pages and upload, a large page), while the budget
/// is a share of the machine over time. Judged on one step, a client near
/// its budget stepped down by a quarter whenever one step passed it, and
/// grew back (64 and 24 sites at once, minutes apart).
pub const CPU_JUDGED_STEPS: usize = 3;

/// Share of the machine's cores the client's process may use in all
/// (it runs at low priority besides): half, and at least half a core; the
/// `cpu_percent` setting is the budget within it.
pub const CPU_SHARE_OF_MACHINE: f64 = 0.5;

/// The download rate, as a share of the bandwidth cap, above which growth
/// holds: more scans would only share the cap.
pub const BANDWIDTH_HOLD_SHARE: f64 = 0.9;

/// Steps a plateau (a growth step that did not pay) holds before probing again.
pub const PROBE_AFTER_STEPS: u32 = 6;

/// Pages a step needs before pages/s is judged (fewer: the step goes on
/// collecting); a page count below it is mostly noise.
pub const MIN_JUDGED_PAGES: u64 = 32;

/// Responses a step needs before the response time is judged.
pub const MIN_JUDGED_RESPONSES: u64 = 8;

/// Busy slots, as a share of the concurrency, below which growth holds: the
/// client lacks units to fill more slots, so more would measure nothing.
pub const BUSY_SHARE: f64 = 0.9;

/// What the machine offers its scans: the bounds of the concurrency.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    /// The `slots` setting: the most sites at once an employee or admin allows.
    pub ceiling: u32,
    /// The `memory_mb` setting: memory the scans may hold together, MB.
    pub memory_mb: u32,
    /// The `bandwidth_kbps` setting: download cap over all scans (0: none).
    pub bandwidth_kbps: u64,
    /// CPU the process may use, in cores (see [`cpu_budget_cores`]).
    pub cpu_cores: f64,
}

impl Budget {
    /// The most sites at once the settings allow, before any measurement:
    /// the ceiling and the memory budget, within `1..=MAX_SLOTS`.
    pub fn static_cap(&self) -> u32 {
        let memory = (self.memory_mb / SCAN_MEMORY_MB).max(1);
        self.ceiling.min(memory).clamp(1, MAX_SLOTS)
    }
}

/// The CPU budget of a machine of `cores` cores, in cores.
pub fn cpu_budget_cores(cores: usize) -> f64 {
    (cores.max(1) as f64 * CPU_SHARE_OF_MACHINE).max(0.5)
}

/// What the work loop measured over one stretch of time (sums, so that
/// stretches add up).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Wall time of the stretch, seconds.
    pub seconds: f64,
    /// Pages answered.
    pub pages: u64,
    /// Scans running, integrated over the stretch (slot-seconds busy).
    pub busy_slot_s: f64,
    /// Requests answered, and their response times summed, seconds.
    pub responses: u64,
    pub response_s: f64,
    /// Body bytes read.
    pub bytes: u64,
    /// CPU time the process used, seconds (`None`: not measurable here).
    pub cpu_s: Option<f64>,
    /// The process's resident memory at the end, MB (`None`: unknown).
    pub rss_mb: Option<f64>,
}

impl Sample {
    /// This stretch followed by `next`.
    pub fn add(&mut self, next: &Sample) {
        // CPU time is known over the whole only if known over every part.
        self.cpu_s = if self.seconds == 0.0 && self.cpu_s.is_none() {
            next.cpu_s
        } else {
            self.cpu_s.zip(next.cpu_s).map(|(a, b)| a + b)
        };
        self.seconds += next.seconds;
        self.pages += next.pages;
        self.busy_slot_s += next.busy_slot_s;
        self.responses += next.responses;
        self.response_s += next.response_s;
        self.bytes += next.bytes;
        self.rss_mb = next.rss_mb;
    }

    /// Mean response time, seconds.
    pub fn mean_response_s(&self) -> Option<f64> {
        (self.responses > 0).then(|| self.response_s / self.responses as f64)
    }

    /// Share of one core used.
    pub fn cpu_share(&self) -> Option<f64> {
        self.cpu_s
            .filter(|_| self.seconds > 0.0)
            .map(|c| c / self.seconds)
    }

    /// Download rate, KB/s.
    pub fn kbps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / 1024.0 / self.seconds
        } else {
            0.0
        }
    }

    /// Scans running on average.
    pub fn busy(&self) -> f64 {
        if self.seconds > 0.0 {
            self.busy_slot_s / self.seconds
        } else {
            0.0
        }
    }

    /// Pages per busy slot-second.
    pub fn pages_per_slot_s(&self) -> Option<f64> {
        (self.busy_slot_s > 0.0).then(|| self.pages as f64 / self.busy_slot_s)
    }
}

/// Why the concurrency is what it is after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Nothing judged yet (too few pages or responses in the step).
    Measuring,
    /// Pages/s grew with the concurrency: one more step up.
    Grew,
    /// Held: the ceiling, memory budget or bandwidth cap is reached.
    AtCap,
    /// Held: fewer scans ran than allowed (not enough units held).
    WorkLimited,
    /// Held: responses somewhat slower, CPU near its budget, or the
    /// bandwidth cap nearly full.
    Near,
    /// Held after a growth step that did not pay, until the next probe.
    Plateau,
    /// Undone: the last growth step did not raise pages/s.
    Undone,
    /// Shrunk: responses much slower than the baseline.
    Slower,
    /// Shrunk: the process used more CPU than its budget.
    Cpu,
    /// Shrunk: the process's memory passed the budget.
    Memory,
    /// Shrunk to the cap: the ceiling, memory or bandwidth allows fewer.
    Capped,
    /// Raised to the start: an employee or admin raised the ceiling.
    CeilingRaised,
}

impl Reason {
    /// The reason in words, for the log.
    pub fn text(self) -> &'static str {
        match self {
            Reason::Measuring => "measuring",
            Reason::Grew => "pages/s grew with it",
            Reason::AtCap => "at the ceiling, memory or bandwidth budget",
            Reason::WorkLimited => "fewer units held than slots",
            Reason::Near => "responses, CPU or bandwidth near their limit",
            Reason::Plateau => "pages/s stopped growing",
            Reason::Undone => "the last step did not raise pages/s",
            Reason::Slower => "responses got slower",
            Reason::Cpu => "CPU over its budget",
            Reason::Memory => "memory over its budget",
            Reason::Capped => "the ceiling, memory or bandwidth allows fewer",
            Reason::CeilingRaised => "the ceiling was raised",
        }
    }
}

/// What a run learned of its machine, kept for the next run's start
/// ([`Controller::resume`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    /// The effective concurrency when it was kept.
    pub sites_at_once: u32,
    /// Pages per busy slot-second at the last judged step.
    pub pages_per_slot_s: f64,
    /// CPU seconds the process spent per page then (`None`: not measurable).
    pub cpu_s_per_page: Option<f64>,
}

/// Most pages per busy slot-second a kept figure may claim (a scan at no
/// politeness delay on loopback); a file claiming more is not believed.
pub const MAX_LEARNED_PAGES_PER_SLOT_S: f64 = 1000.0;

impl Learned {
    /// Whether its figures are ones a run could have measured (a file
    /// edited or damaged into others is not used).
    pub fn is_plausible(&self) -> bool {
        (1..=MAX_SLOTS).contains(&self.sites_at_once)
            && self.pages_per_slot_s.is_finite()
            && self.pages_per_slot_s > 0.0
            && self.pages_per_slot_s <= MAX_LEARNED_PAGES_PER_SLOT_S
            && self
                .cpu_s_per_page
                .is_none_or(|c| c.is_finite() && (0.0..=1.0).contains(&c))
    }

    /// The scans that fit under the CPU budget's hold line at the CPU a
    /// page took (`None`: not measured).
    fn cpu_fit(&self, budget: &Budget) -> Option<u32> {
        let per_scan = self.cpu_s_per_page? * self.pages_per_slot_s;
        (per_scan > 0.0).then(|| {
            (CPU_HOLD_SHARE * budget.cpu_cores / per_scan).clamp(1.0, f64::from(MAX_SLOTS)) as u32
        })
    }
}

/// The controller's state between steps.
#[derive(Clone, Debug)]
pub struct Controller {
    /// The effective concurrency: sites scanned at once.
    limit: u32,
    /// What is measured since the last judged step.
    pending: Sample,
    /// The last growth step, while not judged: the concurrency before it and
    /// its pages per busy slot-second.
    growing: Option<(u32, f64)>,
    /// Mean response time when things went well, seconds.
    baseline_s: Option<f64>,
    /// Steps to hold before probing again after a plateau.
    plateau: u32,
    /// Pages per busy slot-second at the last judged step, for the next growth.
    last_rate: Option<f64>,
    /// The ceiling of the last budget seen (a raised one is applied at once).
    ceiling: u32,
    /// CPU seconds per page at the last judged step that measured both.
    cpu_s_per_page: Option<f64>,
    /// The last [`CPU_JUDGED_STEPS`] steps' samples, as measured (oldest first).
    cpu_steps: VecDeque<Sample>,
}

impl Controller {
    /// A controller at [`START_SLOTS`] (or the cap, if lower).
    pub fn new(budget: &Budget) -> Controller {
        Controller {
            limit: START_SLOTS.min(budget.static_cap()),
            pending: Sample::default(),
            growing: None,
            baseline_s: None,
            plateau: 0,
            last_rate: None,
            ceiling: budget.ceiling,
            cpu_s_per_page: None,
            cpu_steps: VecDeque::with_capacity(CPU_JUDGED_STEPS),
        }
    }

    /// A controller that starts at what a previous run `learned` (when
    /// plausible): its sites at once, within the static cap and the scans
    /// the CPU budget's hold line fits at the CPU a page took then; never
    /// below where [`Controller::new`] starts.
    pub fn resume(budget: &Budget, learned: Option<&Learned>) -> Controller {
        let mut c = Controller::new(budget);
        let Some(l) = learned.filter(|l| l.is_plausible()) else {
            return c;
        };
        let mut start = l.sites_at_once.min(budget.static_cap());
        if let Some(fit) = l.cpu_fit(budget) {
            start = start.min(fit);
        }
        c.limit = start.max(c.limit);
        c.last_rate = Some(l.pages_per_slot_s);
        c.cpu_s_per_page = l.cpu_s_per_page;
        c
    }

    /// What to keep for the next run (`None` before a step was judged).
    /// While a growth step is not judged yet, the sites at once before it:
    /// a level kept is one that paid, so a restart (or a crash) in the
    /// middle of a probe does not start the next run above it.
    pub fn learned(&self) -> Option<Learned> {
        Some(Learned {
            sites_at_once: self.growing.map_or(self.limit, |(before, _)| before),
            pages_per_slot_s: self.last_rate?,
            cpu_s_per_page: self.cpu_s_per_page,
        })
    }

    /// The effective concurrency.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The most sites at once `budget` allows given what `s` measured: the
    /// static cap, and under a bandwidth cap the scans it feeds at the rate
    /// per busy scan measured (once measured).
    pub fn cap(budget: &Budget, s: &Sample) -> u32 {
        let mut cap = budget.static_cap();
        let per_scan_kbps = if s.busy() > 0.0 {
            s.kbps() / s.busy()
        } else {
            0.0
        };
        if budget.bandwidth_kbps > 0 && per_scan_kbps > 0.0 {
            let fed = (budget.bandwidth_kbps as f64 / per_scan_kbps).floor();
            cap = cap.min(fed.clamp(1.0, f64::from(MAX_SLOTS)) as u32);
        }
        cap.max(1)
    }

    /// Apply changed settings at once: above the static cap (a lowered
    /// ceiling or memory budget), the concurrency comes down to it; below
    /// [`START_SLOTS`] when the ceiling was raised, it goes up to the start
    /// (or the new cap), as a client started with that ceiling would. `None`
    /// when nothing changes.
    pub fn bound(&mut self, budget: &Budget) -> Option<(u32, Reason)> {
        let cap = budget.static_cap();
        let raised = budget.ceiling > self.ceiling;
        self.ceiling = budget.ceiling;
        let start = START_SLOTS.min(cap);
        if self.limit > cap {
            Some(self.set(cap, Reason::Capped))
        } else if raised && self.limit < start {
            Some(self.set(start, Reason::CeilingRaised))
        } else {
            None
        }
    }

    /// Take one stretch's measurements and decide the concurrency.
    pub fn step(&mut self, sample: &Sample, budget: &Budget) -> (u32, Reason) {
        self.ceiling = budget.ceiling;
        self.pending.add(sample);
        if self.cpu_steps.len() == CPU_JUDGED_STEPS {
            self.cpu_steps.pop_front();
        }
        self.cpu_steps.push_back(*sample);
        let s = self.pending;
        let cap = Controller::cap(budget, &s);
        if self.limit > cap {
            return self.set(cap, Reason::Capped);
        }
        // Overload of the machine: CPU over the budget across the window
        // shrinks to the scans that fit under the hold line; memory at once.
        let cpu = self.cpu_at_limit();
        if self.cpu_steps.len() == CPU_JUDGED_STEPS && cpu.is_some_and(|c| c > budget.cpu_cores) {
            let fit = self.cpu_fit(budget).unwrap_or(1);
            return self.set(fit.min(self.limit - 1), Reason::Cpu);
        }
        if s.rss_mb.is_some_and(|m| m > f64::from(budget.memory_mb)) {
            return self.shrink(Reason::Memory);
        }
        // Slower responses: judged on enough of them.
        let mean = s
            .mean_response_s()
            .filter(|_| s.responses >= MIN_JUDGED_RESPONSES);
        let slowness = match (mean, self.baseline_s) {
            (Some(m), Some(b)) if m - b > RESPONSE_NOISE_S => m / b.max(f64::MIN_POSITIVE),
            _ => 1.0,
        };
        if slowness > SLOW_RATIO {
            if let Some(m) = mean {
                self.follow_baseline(m);
            }
            return self.shrink(Reason::Slower);
        }
        // Pages/s: judged on enough pages (the baseline learns once a step).
        if s.pages < MIN_JUDGED_PAGES {
            return (self.limit, Reason::Measuring);
        }
        if let Some(m) = mean {
            self.follow_baseline(m);
        }
        let rate = s.pages_per_slot_s();
        if let Some(cpu) = s.cpu_s {
            self.cpu_s_per_page = Some(cpu / s.pages as f64);
        }
        self.pending = Sample::default();
        if let (Some((before, then)), Some(now)) = (self.growing.take(), rate) {
            if now < PAY_SHARE * then {
                self.plateau = PROBE_AFTER_STEPS;
                self.last_rate = None;
                return self.set(before, Reason::Undone);
            }
        }
        self.last_rate = rate.or(self.last_rate);
        let near = slowness > HOLD_RATIO
            || self
                .cpu_per_scan()
                .is_some_and(|c| c * f64::from(self.limit) > CPU_HOLD_SHARE * budget.cpu_cores)
            || (budget.bandwidth_kbps > 0
                && s.kbps() >= BANDWIDTH_HOLD_SHARE * budget.bandwidth_kbps as f64);
        if self.limit >= cap {
            return (self.limit, Reason::AtCap);
        }
        if near {
            return (self.limit, Reason::Near);
        }
        if self.plateau > 0 {
            self.plateau -= 1;
            return (self.limit, Reason::Plateau);
        }
        if s.busy() < BUSY_SHARE * f64::from(self.limit) {
            return (self.limit, Reason::WorkLimited);
        }
        let mut grown = ((f64::from(self.limit) * GROWTH).floor() as u32)
            .max(self.limit + 1)
            .min(cap);
        if let Some(fit) = self.cpu_fit(budget) {
            // No further than the CPU budget's hold line, at this share per scan.
            grown = grown.min(fit.max(self.limit + 1));
        }
        if let Some(r) = self.last_rate {
            self.growing = Some((self.limit, r));
        }
        self.limit = grown;
        (grown, Reason::Grew)
    }

    /// The CPU the window of steps measured ([`CPU_JUDGED_STEPS`]), added up.
    fn cpu_window(&self) -> Sample {
        let mut w = Sample::default();
        for s in &self.cpu_steps {
            w.add(s);
        }
        w
    }

    /// The CPU share the window measured, at the effective concurrency:
    /// when more scans ran than it allows (those started before a step
    /// down, winding down), scaled by its share of them.
    fn cpu_at_limit(&self) -> Option<f64> {
        let w = self.cpu_window();
        let share = w.cpu_share()?;
        let busy = w.busy();
        let limit = f64::from(self.limit);
        Some(if busy > limit {
            share * limit / busy
        } else {
            share
        })
    }

    /// The CPU share per scan running the window measured (the process's
    /// own share counted as the scans': so never too little).
    fn cpu_per_scan(&self) -> Option<f64> {
        let w = self.cpu_window();
        let share = w.cpu_share().filter(|&c| c > 0.0)?;
        let busy = w.busy();
        Some(
            share
                / if busy > 0.0 {
                    busy
                } else {
                    f64::from(self.limit)
                },
        )
    }

    /// The scans that fit under the CPU budget's hold line
    /// ([`CPU_HOLD_SHARE`]) at the CPU share per scan the window measured.
    fn cpu_fit(&self, budget: &Budget) -> Option<u32> {
        let fit = CPU_HOLD_SHARE * budget.cpu_cores / self.cpu_per_scan()?;
        Some(fit.floor().clamp(1.0, f64::from(MAX_SLOTS)) as u32)
    }

    /// The baseline follows faster responses at once and slower ones slowly.
    fn follow_baseline(&mut self, mean_s: f64) {
        self.baseline_s = Some(match self.baseline_s {
            Some(b) if mean_s >= b => b + BASELINE_RISE * (mean_s - b),
            _ => mean_s,
        });
    }

    /// Multiplicative decrease, at least one slot, never below one.
    fn shrink(&mut self, why: Reason) -> (u32, Reason) {
        let shrunk = ((f64::from(self.limit) * BACKOFF).floor() as u32).min(self.limit - 1);
        self.set(shrunk, why)
    }

    /// Set the concurrency after a change not earned by growth: the next
    /// growth step is measured afresh.
    fn set(&mut self, limit: u32, why: Reason) -> (u32, Reason) {
        self.limit = limit.max(1);
        self.pending = Sample::default();
        self.growing = None;
        (self.limit, why)
    }
}

#[cfg(test)]
mod tests;
