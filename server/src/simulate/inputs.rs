//! The simulator's inputs: synthetic sites (power-law sizes, a share never
//! scanned) and hosts (speeds over a factor of ten), and the `HOST [PAGES]`
//! and `NAME PAGES_PER_S [SLOTS [MEMORY_MB BANDWIDTH_KBPS]]` files.
//!
//! Invariants: synthetic inputs depend on their seed alone; a file with a
//! bad line is refused whole, naming the line. It never reads a file itself
//! (callers pass the text).

use beebot_shared::limits::MAX_HOST_MEMORY_MB;
use beebot_shared::proto::HostResources;
use serde::Serialize;

use super::{
    Rng, SimError, MAX_SIM_HOSTS, MAX_SIM_SITES, SYNTH_MAX_SPEED, SYNTH_MIN_SPEED, SYNTH_SLOTS,
};

/// A site: its expected pages (its last scan; `None`: never scanned).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimSite {
    pub name: String,
    pub pages: Option<f64>,
}

/// A host: its true pages per second on one slot, and its slots.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimHost {
    pub name: String,
    pub pages_per_s: f64,
    pub slots: u32,
    /// What it offers its scans beyond slots, told to the grid as a client
    /// does after its `Hello` (`None`: it says nothing).
    pub resources: Option<HostResources>,
}

/// What a synthetic host offers: the client's defaults (1 GB for its
/// scans, no bandwidth cap).
pub const SYNTH_RESOURCES: HostResources = HostResources {
    memory_mb: 1024,
    bandwidth_kbps: 0,
};

/// `n` sites with power-law sizes; a share `unknown` of them never scanned.
pub fn synthetic_sites(n: usize, unknown: f64, seed: u64) -> Vec<SimSite> {
    let mut rng = Rng::new(seed.wrapping_mul(31).wrapping_add(1));
    (0..n)
        .map(|i| {
            let pages = rng.pareto_pages();
            let known = rng.unit() >= unknown;
            SimSite {
                name: format!("site{i}.synth.test"),
                pages: known.then_some(pages),
            }
        })
        .collect()
}

/// `m` hosts with speeds spread log-uniformly over a factor of ten.
pub fn synthetic_hosts(m: usize, seed: u64) -> Vec<SimHost> {
    let mut rng = Rng::new(seed.wrapping_mul(37).wrapping_add(2));
    (0..m)
        .map(|i| SimHost {
            name: format!("host{i}"),
            pages_per_s: rng.log_uniform(SYNTH_MIN_SPEED, SYNTH_MAX_SPEED),
            slots: SYNTH_SLOTS,
            resources: Some(SYNTH_RESOURCES),
        })
        .collect()
}

fn data_lines(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or("").trim();
        (!l.is_empty()).then(|| (i + 1, l.split_whitespace().collect()))
    })
}

fn number(line: usize, what: &str, v: &str) -> Result<f64, SimError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| SimError::BadLine {
            line,
            msg: format!("{what} `{v}` is not a positive number"),
        })
}

/// A sites file: `HOST [PAGES]` a line (`#` comments); a site without pages
/// was never scanned (the grid sizes it from the round's bounds; its true
/// size is drawn from the synthetic power law).
pub fn parse_sites(text: &str) -> Result<Vec<SimSite>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if f.len() > 2 {
            return Err(SimError::BadLine {
                line,
                msg: "expected `HOST [PAGES]`".into(),
            });
        }
        let pages = match f.get(1) {
            Some(p) => Some(number(line, "pages", p)?),
            None => None,
        };
        out.push(SimSite {
            name: f[0].to_string(),
            pages,
        });
        if out.len() > MAX_SIM_SITES {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_SITES} sites")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no sites in the file".into()));
    }
    Ok(out)
}

/// A hosts file: `NAME PAGES_PER_S [SLOTS [MEMORY_MB BANDWIDTH_KBPS]]` a
/// line (`#` comments); memory and bandwidth are what the host offers its
/// scans (a bandwidth of 0: no cap), as a client's settings say.
pub fn parse_hosts(text: &str) -> Result<Vec<SimHost>, SimError> {
    let mut out = Vec::new();
    for (line, f) in data_lines(text) {
        if !matches!(f.len(), 2 | 3 | 5) {
            return Err(SimError::BadLine {
                line,
                msg: "expected `NAME PAGES_PER_S [SLOTS [MEMORY_MB BANDWIDTH_KBPS]]`".into(),
            });
        }
        let slots = match f.get(2) {
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|s| (1..=beebot_shared::limits::MAX_SLOTS).contains(s))
                .ok_or_else(|| SimError::BadLine {
                    line,
                    msg: format!(
                        "slots `{s}` must be 1 to {}",
                        beebot_shared::limits::MAX_SLOTS
                    ),
                })?,
            None => SYNTH_SLOTS,
        };
        let resources = match (f.get(3), f.get(4)) {
            (Some(m), Some(b)) => {
                let memory_mb = m
                    .parse::<u32>()
                    .ok()
                    .filter(|m| (1..=MAX_HOST_MEMORY_MB).contains(m))
                    .ok_or_else(|| SimError::BadLine {
                        line,
                        msg: format!("memory `{m}` must be 1 to {MAX_HOST_MEMORY_MB} MB"),
                    })?;
                let bandwidth_kbps = b.parse::<u64>().map_err(|_| SimError::BadLine {
                    line,
                    msg: format!("bandwidth `{b}` is not a whole number of KB/s"),
                })?;
                Some(HostResources {
                    memory_mb,
                    bandwidth_kbps,
                })
            }
            _ => None,
        };
        out.push(SimHost {
            name: f[0].to_string(),
            pages_per_s: number(line, "speed", f[1])?,
            slots,
            resources,
        });
        if out.len() > MAX_SIM_HOSTS {
            return Err(SimError::Invalid(format!("at most {MAX_SIM_HOSTS} hosts")));
        }
    }
    if out.is_empty() {
        return Err(SimError::Invalid("no hosts in the file".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{SYNTH_MAX_PAGES, SYNTH_MIN_PAGES};

    #[test]
    fn synthetic_inputs_follow_their_laws() {
        let sites = synthetic_sites(2000, 0.1, 1);
        let known: Vec<f64> = sites.iter().filter_map(|s| s.pages).collect();
        assert!(known
            .iter()
            .all(|p| (SYNTH_MIN_PAGES..=SYNTH_MAX_PAGES).contains(p)));
        let unknown = sites.len() - known.len();
        assert!((100..300).contains(&unknown), "{unknown} unknown");
        let mut p = known;
        p.sort_by(f64::total_cmp);
        // A heavy tail: the largest site is far above the median.
        assert!(
            p[p.len() - 1] > 30.0 * p[p.len() / 2],
            "{:?}",
            (p[p.len() / 2], p[p.len() - 1])
        );
        let hosts = synthetic_hosts(500, 1);
        let (lo, hi) = hosts.iter().fold((f64::MAX, 0.0f64), |(l, h), x| {
            (l.min(x.pages_per_s), h.max(x.pages_per_s))
        });
        assert!(lo >= SYNTH_MIN_SPEED && hi <= SYNTH_MAX_SPEED && hi / lo > 8.0);
        assert_eq!(synthetic_sites(5, 0.5, 3), synthetic_sites(5, 0.5, 3));
    }

    #[test]
    fn files_parse_and_refuse_bad_lines() {
        let s = parse_sites("# sites\nwww.a.edu 120\nwww.b.edu\n\n").unwrap();
        assert_eq!(s[0].pages, Some(120.0));
        assert_eq!(s[1].pages, None);
        assert!(matches!(
            parse_sites("a 1 2\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_sites("a -4\n"),
            Err(SimError::BadLine { .. })
        ));
        assert!(parse_sites("# none\n").is_err());
        let h = parse_hosts("pc1 2.5 4\npc2 1\n").unwrap();
        assert_eq!(
            (h[0].pages_per_s, h[0].slots, h[1].slots),
            (2.5, 4, SYNTH_SLOTS)
        );
        assert!(matches!(
            parse_hosts("pc1\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        assert!(matches!(
            parse_hosts("x\npc 1 0\n"),
            Err(SimError::BadLine { line: 1, .. })
        ));
        // Memory and bandwidth come together; the host without them says nothing.
        let h = parse_hosts("pc1 2 2 512 90\npc2 1 2\n").unwrap();
        assert_eq!(
            h[0].resources,
            Some(HostResources {
                memory_mb: 512,
                bandwidth_kbps: 90
            })
        );
        assert_eq!(h[1].resources, None);
        for bad in ["pc 1 2 512\n", "pc 1 2 0 90\n", "pc 1 2 512 -1\n"] {
            assert!(
                matches!(parse_hosts(bad), Err(SimError::BadLine { line: 1, .. })),
                "{bad}"
            );
        }
    }
}
