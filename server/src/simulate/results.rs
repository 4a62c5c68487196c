//! Many runs and what is printed of them: every policy over a series of
//! seeds in parallel, each policy's summary (medians, worst cases, totals)
//! and the table `simulate` prints.
//!
//! Invariants: results are in seed order whatever the thread count; the
//! arguments are checked against their limits before anything runs.

use serde::Serialize;

use super::inputs::{synthetic_hosts, synthetic_sites, SimHost, SimSite};
use super::run::{run, RunResult};
use super::{SimError, SimOptions, MAX_FIRST_SEED, MAX_SEEDS, MAX_SIM_HOSTS, MAX_SIM_SITES};
use crate::scheduler;

/// A policy's runs over the seeds, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    pub runs: usize,
    pub makespan_median_s: f64,
    pub makespan_worst_s: f64,
    pub ratio_median: f64,
    pub ratio_worst: f64,
    pub utilisation_median: f64,
    pub pages_lost_total: u64,
    pub continuations_mean: f64,
    pub reissued_mean: f64,
    pub replicated_mean: f64,
    pub failed_total: u64,
    pub unfinished: usize,
    /// Pages scanned to check results over the pages of the results kept.
    pub check_overhead: f64,
    pub hosts_used_median: f64,
    pub host_hours_median: f64,
    /// Accepted uploads lost over every run (a fault; see [`RunResult`]).
    pub acknowledged_lost_total: u64,
}
/// Where the sites and hosts of a simulation come from.
#[derive(Clone, Debug)]
pub enum Input<T> {
    /// Fixed (from a file).
    Given(Vec<T>),
    /// Generated from each seed.
    Synthetic(usize),
}

/// Run `policies` over `seeds` seeds (seed numbers `first_seed..` of
/// `opts`), in parallel
/// over the machine's cores. Results are per policy, in seed order.
pub fn run_all(
    sites: &Input<SimSite>,
    hosts: &Input<SimHost>,
    policies: &[&str],
    seeds: u32,
    opts: &SimOptions,
) -> Result<Vec<(String, Vec<RunResult>)>, SimError> {
    check_arguments(sites, hosts, policies, seeds, opts)?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, seeds as usize);
    let mut out = Vec::new();
    for name in policies {
        let results = run_policy(sites, hosts, name, seeds, threads, opts)?;
        out.push((name.to_string(), results));
    }
    Ok(out)
}

/// Refuse seed counts, first seeds, synthetic sizes and policy names out of
/// their limits.
fn check_arguments(
    sites: &Input<SimSite>,
    hosts: &Input<SimHost>,
    policies: &[&str],
    seeds: u32,
    opts: &SimOptions,
) -> Result<(), SimError> {
    if seeds == 0 || seeds > MAX_SEEDS {
        return Err(SimError::Invalid(format!("seeds must be 1 to {MAX_SEEDS}")));
    }
    if opts.first_seed > MAX_FIRST_SEED {
        return Err(SimError::Invalid(format!(
            "the first seed must be at most {MAX_FIRST_SEED}"
        )));
    }
    for (n, max, what) in [
        (
            matches!(sites, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_SITES),
            MAX_SIM_SITES,
            "sites",
        ),
        (
            matches!(hosts, Input::Synthetic(n) if *n == 0 || *n > MAX_SIM_HOSTS),
            MAX_SIM_HOSTS,
            "hosts",
        ),
    ] {
        if n {
            return Err(SimError::Invalid(format!(
                "synthetic {what} must be 1 to {max}"
            )));
        }
    }
    for name in policies {
        if scheduler::policy_by_name(name).is_none() {
            return Err(SimError::Invalid(format!(
                "unknown policy `{name}` (known: {})",
                scheduler::POLICY_NAMES.join(", ")
            )));
        }
    }
    Ok(())
}

/// One policy over every seed, the seeds dealt round the `threads`; the
/// results in seed order.
fn run_policy(
    sites: &Input<SimSite>,
    hosts: &Input<SimHost>,
    name: &str,
    seeds: u32,
    threads: usize,
    opts: &SimOptions,
) -> Result<Vec<RunResult>, SimError> {
    let first = opts.first_seed;
    let mut results: Vec<RunResult> = Vec::with_capacity(seeds as usize);
    let mut error = None;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (first..first + seeds as u64)
                        .filter(|seed| (*seed - first) as usize % threads == t)
                        .map(|seed| {
                            let ss = match sites {
                                Input::Given(v) => v.clone(),
                                Input::Synthetic(n) => synthetic_sites(*n, opts.unknown, seed),
                            };
                            let hs = match hosts {
                                Input::Given(v) => v.clone(),
                                Input::Synthetic(m) => synthetic_hosts(*m, seed),
                            };
                            run(&ss, &hs, name, seed, opts)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(runs) => {
                    for r in runs {
                        match r {
                            Ok(r) => results.push(r),
                            Err(e) => error = Some(e),
                        }
                    }
                }
                Err(_) => error = Some(SimError::Invalid("a simulation thread panicked".into())),
            }
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    results.sort_by_key(|r| r.seed);
    Ok(results)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarise one policy's runs.
pub fn summarise(policy: &str, runs: &[RunResult]) -> PolicySummary {
    let ratio = |r: &RunResult| {
        if r.lower_bound_s > 0.0 {
            r.makespan_s / r.lower_bound_s
        } else {
            f64::INFINITY
        }
    };
    let n = runs.len().max(1) as f64;
    PolicySummary {
        policy: policy.to_string(),
        runs: runs.len(),
        makespan_median_s: median(runs.iter().map(|r| r.makespan_s).collect()),
        makespan_worst_s: runs.iter().map(|r| r.makespan_s).fold(0.0, f64::max),
        ratio_median: median(runs.iter().map(ratio).collect()),
        ratio_worst: runs.iter().map(ratio).fold(0.0, f64::max),
        utilisation_median: median(runs.iter().map(|r| r.utilisation).collect()),
        pages_lost_total: runs.iter().map(|r| r.pages_lost).sum(),
        continuations_mean: runs.iter().map(|r| r.continuations as f64).sum::<f64>() / n,
        reissued_mean: runs.iter().map(|r| r.reissued as f64).sum::<f64>() / n,
        replicated_mean: runs.iter().map(|r| r.replicated as f64).sum::<f64>() / n,
        failed_total: runs.iter().map(|r| r.failed).sum(),
        unfinished: runs.iter().filter(|r| !r.finished).count(),
        check_overhead: runs.iter().map(|r| r.check_pages).sum::<u64>() as f64
            / runs.iter().map(|r| r.result_pages).sum::<u64>().max(1) as f64,
        hosts_used_median: median(runs.iter().map(|r| r.hosts_used as f64).collect()),
        host_hours_median: median(runs.iter().map(|r| r.host_hours).collect()),
        acknowledged_lost_total: runs.iter().map(|r| r.acknowledged_lost).sum(),
    }
}

/// The table printed by `simulate`.
pub fn table(rows: &[PolicySummary]) -> String {
    let mut s = String::from(
        "policy        makespan med    worst   /LB med   worst   util  lost  continued  reissued  replicated  failed  checks  hosts  host-h\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{:<12} {:>11.0}s {:>8.0}s {:>9.3} {:>7.3} {:>5.0}% {:>5} {:>10.1} {:>9.1} {:>11.1} {:>7} {:>6.1}% {:>6.0} {:>7.2}{}\n",
            r.policy,
            r.makespan_median_s,
            r.makespan_worst_s,
            r.ratio_median,
            r.ratio_worst,
            r.utilisation_median * 100.0,
            r.pages_lost_total,
            r.continuations_mean,
            r.reissued_mean,
            r.replicated_mean,
            r.failed_total,
            r.check_overhead * 100.0,
            r.hosts_used_median,
            r.host_hours_median,
            match (r.unfinished, r.acknowledged_lost_total) {
                (0, 0) => String::new(),
                (u, 0) => format!("  ({u} runs unfinished)"),
                (u, a) => format!("  ({u} runs unfinished, {a} accepted uploads LOST)"),
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::small;

    #[test]
    fn adaptive_beats_round_robin_on_a_small_case() {
        let o = SimOptions {
            first_seed: 0,
            ..small()
        };
        let res = run_all(
            &Input::Synthetic(40),
            &Input::Synthetic(3),
            &["adaptive", "round-robin"],
            6,
            &o,
        )
        .unwrap();
        let rows: Vec<PolicySummary> = res.iter().map(|(p, r)| summarise(p, r)).collect();
        let t = table(&rows);
        assert!(
            rows[0].makespan_median_s < rows[1].makespan_median_s,
            "seeds 0..6\n{t}"
        );
        assert_eq!(rows[0].pages_lost_total, 0, "{t}");
    }

    /// A round that needs few of its hosts: 20 sites on 50 hosts.
    const FEW_SITES: usize = 20;
    const MANY_HOSTS: usize = 50;
    const PACK_SEEDS: u32 = 2;

    #[test]
    fn pack_disturbs_the_fewest_hosts_when_the_round_needs_few() {
        let o = small();
        let res = run_all(
            &Input::Synthetic(FEW_SITES),
            &Input::Synthetic(MANY_HOSTS),
            &scheduler::POLICY_NAMES,
            PACK_SEEDS,
            &o,
        )
        .unwrap();
        let rows: Vec<PolicySummary> = res.iter().map(|(p, r)| summarise(p, r)).collect();
        let t = table(&rows);
        let pack = rows.iter().find(|r| r.policy == "pack").unwrap();
        assert_eq!((pack.pages_lost_total, pack.unfinished), (0, 0), "{t}");
        for r in rows.iter().filter(|r| r.policy != "pack") {
            assert!(
                pack.hosts_used_median < r.hosts_used_median,
                "pack used no fewer hosts than {}:\n{t}",
                r.policy
            );
        }
        // Every run counts the hosts that got work, and the time they held it.
        for (_, runs) in &res {
            for r in runs {
                assert!(
                    r.hosts_used >= 1 && r.hosts_used <= MANY_HOSTS as u64,
                    "{r:?}"
                );
                // Held no longer than the round, by no more hosts than got work.
                let most = r.hosts_used as f64 * r.makespan_s / 3600.0;
                assert!(r.host_hours > 0.0 && r.host_hours <= most + 1e-9, "{r:?}");
            }
        }
        eprintln!("{t}");
    }

    #[test]
    fn run_all_checks_its_arguments() {
        let o = small();
        let s = Input::Synthetic(5);
        let h = Input::Synthetic(2);
        assert!(run_all(&s, &h, &["nope"], 1, &o).is_err());
        assert!(run_all(&s, &h, &["adaptive"], 0, &o).is_err());
        assert!(run_all(&Input::Synthetic(0), &h, &["adaptive"], 1, &o).is_err());
        let r = run_all(&s, &Input::Given(synthetic_hosts(2, 0)), &["pack"], 3, &o).unwrap();
        assert_eq!(
            r[0].1.iter().map(|r| r.seed).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        // Seeds from another first seed: the same runs as in a longer series.
        let later = SimOptions {
            first_seed: 2,
            ..o.clone()
        };
        let r2 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 2, &later).unwrap();
        let r4 = run_all(&s, &Input::Synthetic(2), &["adaptive"], 4, &o).unwrap();
        assert_eq!(r2[0].1, r4[0].1[2..]);
        let too_far = SimOptions {
            first_seed: MAX_FIRST_SEED + 1,
            ..o.clone()
        };
        assert!(run_all(&s, &h, &["adaptive"], 1, &too_far).is_err());
    }
}
