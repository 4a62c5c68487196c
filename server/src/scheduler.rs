//! The scheduler: for this host, now, which jobs? Pure code: no I/O, time is an
//! argument. Policies sit behind [`Policy`]; the grid asks, the policy picks.

use crate::model::SiteStats;

/// Figures used for a site never scanned before.
pub const DEFAULT_SITE_PAGES: f64 = 50.0;
/// Pages per second assumed for a host with no benchmark and no finished job.
pub const DEFAULT_HOST_PAGES_PER_S: f64 = 5.0;

/// A queued job as the policy sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobView {
    pub job_id: u64,
    /// Expected seconds of this job on the asking host.
    pub expected_s: f64,
    /// The asking host already failed this job (expired or gave it back).
    pub failed_here: bool,
}

/// What the host asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkAsk {
    pub want_seconds: u64,
    pub free_slots: u32,
}

/// A scheduling policy.
pub trait Policy: Send + Sync {
    /// The name used on the command line.
    fn name(&self) -> &'static str;
    /// Choose jobs (by id, in issue order) from `queue` (in queue order) for one request.
    fn choose(&self, queue: &[JobView], ask: &WorkAsk, now_ms: u64) -> Vec<u64>;
}

/// Jobs in queue order, one per free slot (the papers' baseline).
pub struct RoundRobin;

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }
    fn choose(&self, queue: &[JobView], ask: &WorkAsk, _now_ms: u64) -> Vec<u64> {
        let mut order: Vec<&JobView> = queue.iter().filter(|j| !j.failed_here).collect();
        order.extend(queue.iter().filter(|j| j.failed_here));
        order
            .into_iter()
            .take(ask.free_slots as usize)
            .map(|j| j.job_id)
            .collect()
    }
}

/// Longest expected job first, until the asked seconds are covered or the
/// free slots are used (at least one job when a slot is free).
pub struct SizeAware;

impl Policy for SizeAware {
    fn name(&self) -> &'static str {
        "size-aware"
    }
    fn choose(&self, queue: &[JobView], ask: &WorkAsk, _now_ms: u64) -> Vec<u64> {
        let mut order: Vec<&JobView> = queue.iter().collect();
        // Jobs this host failed go last; then longest first; ties in queue order.
        order.sort_by(|a, b| {
            a.failed_here
                .cmp(&b.failed_here)
                .then(b.expected_s.total_cmp(&a.expected_s))
        });
        let mut out = Vec::new();
        let mut total = 0.0;
        for j in order {
            if out.len() >= ask.free_slots as usize {
                break;
            }
            if !out.is_empty() && total >= ask.want_seconds as f64 {
                break;
            }
            total += j.expected_s;
            out.push(j.job_id);
        }
        out
    }
}

/// Names accepted by `round start --policy`.
pub const POLICY_NAMES: [&str; 2] = ["size-aware", "round-robin"];

/// The policy of a name, or `None` when unknown.
pub fn policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "size-aware" => Some(Box::new(SizeAware)),
        "round-robin" => Some(Box::new(RoundRobin)),
        _ => None,
    }
}

/// Expected seconds of a site on a host: pages over the host's speed, never
/// below pages × the politeness delay.
pub fn expected_seconds(
    last: Option<&SiteStats>,
    max_pages: u32,
    host_pages_per_s: Option<f64>,
    delay_ms: u64,
) -> f64 {
    let pages = last
        .map(|s| s.pages as f64)
        .unwrap_or(DEFAULT_SITE_PAGES)
        .clamp(1.0, max_pages.max(1) as f64);
    let speed = host_pages_per_s
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(DEFAULT_HOST_PAGES_PER_S);
    let by_speed = pages / speed;
    let by_politeness = pages * delay_ms as f64 / 1000.0;
    by_speed.max(by_politeness)
}

/// Deadline bounds and slack.
#[derive(Clone, Debug, PartialEq)]
pub struct DeadlineRule {
    pub slack: f64,
    pub grace_s: u64,
    pub min_s: u64,
    pub max_s: u64,
}

/// `issued + expected × slack + grace`, bounded to `[min, max]` after issue.
pub fn deadline_ms(issued_ms: u64, expected_s: f64, rule: &DeadlineRule) -> u64 {
    let span = (expected_s.max(0.0) * rule.slack) as u64 + rule.grace_s;
    let span = span.clamp(rule.min_s, rule.max_s.max(rule.min_s));
    issued_ms.saturating_add(span.saturating_mul(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(ids_secs: &[(u64, f64)]) -> Vec<JobView> {
        ids_secs
            .iter()
            .map(|&(job_id, expected_s)| JobView {
                job_id,
                expected_s,
                failed_here: false,
            })
            .collect()
    }

    #[test]
    fn size_aware_takes_longest_first_until_covered() {
        let queue = q(&[(1, 10.0), (2, 50.0), (3, 30.0), (4, 5.0)]);
        let ask = WorkAsk {
            want_seconds: 60,
            free_slots: 4,
        };
        assert_eq!(SizeAware.choose(&queue, &ask, 0), vec![2, 3]);
        let ask = WorkAsk {
            want_seconds: 1000,
            free_slots: 3,
        };
        assert_eq!(SizeAware.choose(&queue, &ask, 0), vec![2, 3, 1]);
        let ask = WorkAsk {
            want_seconds: 0,
            free_slots: 0,
        };
        assert!(SizeAware.choose(&queue, &ask, 0).is_empty());
    }

    #[test]
    fn failed_here_goes_last() {
        let mut queue = q(&[(1, 100.0), (2, 1.0)]);
        queue[0].failed_here = true;
        let ask = WorkAsk {
            want_seconds: 1,
            free_slots: 1,
        };
        assert_eq!(SizeAware.choose(&queue, &ask, 0), vec![2]);
        assert_eq!(RoundRobin.choose(&queue, &ask, 0), vec![2]);
    }

    #[test]
    fn estimate_respects_politeness_floor() {
        let stats = SiteStats {
            pages: 100,
            ..Default::default()
        };
        assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 0), 2.0);
        assert_eq!(expected_seconds(Some(&stats), 1000, Some(50.0), 500), 50.0);
        assert_eq!(expected_seconds(Some(&stats), 10, Some(5.0), 0), 2.0);
    }

    #[test]
    fn deadline_is_bounded() {
        let rule = DeadlineRule {
            slack: 3.0,
            grace_s: 10,
            min_s: 60,
            max_s: 600,
        };
        assert_eq!(deadline_ms(1000, 1.0, &rule), 1000 + 60_000);
        assert_eq!(deadline_ms(1000, 100.0, &rule), 1000 + 310_000);
        assert_eq!(deadline_ms(1000, 1e9, &rule), 1000 + 600_000);
    }
}
