//! Tests of the open-jobs index and of one stream of requests per host, including the property test that every number a host sends keeps the grid consistent.

use super::*;
use crate::grid::testkit::*;
use crate::grid::views::host_slots;
use crate::grid::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use beebot_shared::limits::{
    MAX_BENCHMARK_KB_PER_S, MAX_BENCHMARK_PAGES_PER_S, MAX_HOST_PAGES_PER_S, MAX_LINK_RECORDS,
};
use beebot_shared::linkfile::{self, ScanSummary};
use beebot_shared::proto::ABORT_HAND_OVER;
use beebot_shared::scope::Scope;
use beebot_shared::sign::{self, WorkUnit};

use crate::scheduler;
use crate::validate::ValidateMode;

/// One thing a host does, with arbitrary numbers.
#[derive(Clone, Debug)]
enum HostAct {
    Bench(usize, f64, f64, u32),
    /// Host, want_seconds, free_slots, units held (`None`: all it got), windows.
    Ask(usize, u64, u32, Option<Vec<u64>>, Option<Vec<(u64, u64)>>),
    /// Host, unit (an index into those issued), pages, links.
    Progress(usize, usize, u64, u64),
    /// Host, unit, summary, records in the file, the frontier's pages done.
    Upload(usize, usize, Box<ScanSummary>, usize, Option<u64>),
    Wait(u32),
}

/// A number a host might send: small (to reach the paths that accept)
/// or anything.
fn host_number() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![0u64..64, any::<u64>(), Just(u64::MAX)]
}

fn any_summary() -> impl proptest::strategy::Strategy<Value = ScanSummary> {
    use linkfile::StopReason as S;
    use proptest::prelude::*;
    let stop = prop_oneof![
        Just(None),
        proptest::sample::select(vec![
            S::MaxPages,
            S::MaxTime,
            S::Deadline,
            S::FrontierFull,
            S::Cancelled,
            S::RobotsUnavailable,
            S::SeedUnreachable,
            S::Offline,
            S::DnsFailed,
            S::ConnectionRefused,
            S::PrivateAddress,
        ])
        .prop_map(Some),
    ];
    (
        proptest::collection::vec(host_number(), 14),
        proptest::collection::vec((any::<u16>(), host_number()), 0..4),
        stop,
    )
        .prop_map(|(n, status_counts, stopped_by)| ScanSummary {
            pages: n[0],
            bytes: n[1],
            links: n[2],
            distinct_target_hosts: n[3],
            errors: n[4],
            elapsed_ms: n[5],
            stopped_by,
            status_counts,
            robots_disallowed: n[6],
            timeouts: n[7],
            truncated_pages: n[8],
            non_html: n[9],
            link_capped_pages: n[10],
            frontier_dropped: n[11],
            records_dropped: n[12],
            beyond_depth: n[13],
            ..ScanSummary::default()
        })
}

fn any_act() -> impl proptest::strategy::Strategy<Value = HostAct> {
    use proptest::prelude::*;
    let windows = proptest::option::of(proptest::collection::vec(
        (host_number(), host_number()),
        0..beebot_shared::limits::MAX_WINDOW_INTERVALS,
    ));
    let held = proptest::option::of(proptest::collection::vec(host_number(), 0..8));
    prop_oneof![
        (
            0usize..2,
            proptest::num::f64::ANY,
            proptest::num::f64::ANY,
            any::<u32>()
        )
            .prop_map(|(h, p, k, s)| HostAct::Bench(h, p, k, s)),
        (0usize..2, host_number(), any::<u32>(), held, windows)
            .prop_map(|(h, w, f, u, o)| HostAct::Ask(h, w, f, u, o)),
        (0usize..2, any::<usize>(), host_number(), host_number())
            .prop_map(|(h, u, p, l)| HostAct::Progress(h, u, p, l)),
        (
            0usize..2,
            any::<usize>(),
            any_summary(),
            0usize..6,
            proptest::option::of(host_number())
        )
            .prop_map(|(h, u, s, n, st)| HostAct::Upload(h, u, Box::new(s), n, st)),
        (0u32..4_000_000).prop_map(HostAct::Wait),
    ]
}

/// What must hold whatever the hosts sent: the open-job index matches
/// the jobs, no host holds more than its cap (unless it held them
/// before, e.g. its benchmark lowered its slots), every count is within
/// the round's page cap, one copy of a job runs at a time (a wanted copy
/// is a hand-over, never a second stream of requests), and speeds and
/// benchmarks are within their bounds.
fn check_consistent(g: &Grid, before: &HashMap<u64, usize>, max_pages: u64) {
    g.check_derived();
    let mut running: HashMap<u64, usize> = HashMap::new();
    for job in g.jobs.values() {
        let copies = job.running_attempts().count();
        assert!(
            copies <= 1,
            "job {}: {copies} copies running at once",
            job.id
        );
        for a in job.running_attempts() {
            *running.entry(a.host_id).or_default() += 1;
        }
        for a in &job.attempts {
            assert!(
                a.pages <= max_pages,
                "attempt {} reports {} pages",
                a.unit_id,
                a.pages
            );
            assert!(a.links <= MAX_LINK_RECORDS as u64);
        }
        for seg in &job.segments {
            assert!(seg.pages_done <= max_pages && seg.summary.pages <= max_pages);
        }
        if let Some(r) = &job.result {
            assert!(r.summary.pages <= max_pages);
        }
        assert!(job.completeness().pages <= max_pages);
    }
    for h in g.hosts.values() {
        let n = running.get(&h.id).copied().unwrap_or(0);
        let was = before.get(&h.id).copied().unwrap_or(0);
        assert!(
            n <= held_cap(host_slots(h)).max(was),
            "host {} holds {n} units (cap {}, {was} before)",
            h.id,
            held_cap(host_slots(h))
        );
        if let Some(b) = &h.benchmark {
            assert!(
                b.pages_per_s.is_finite()
                    && (0.0..=MAX_BENCHMARK_PAGES_PER_S).contains(&b.pages_per_s)
            );
            assert!(b.kb_per_s.is_finite() && (0.0..=MAX_BENCHMARK_KB_PER_S).contains(&b.kb_per_s));
            assert!(b.slots <= beebot_shared::limits::MAX_SLOTS);
        }
        if let Some(s) = g.host_speed(h.id) {
            assert!(
                s.is_finite() && s > 0.0 && s <= MAX_HOST_PAGES_PER_S,
                "speed {s}"
            );
        }
    }
}

fn running_by_host(g: &Grid) -> HashMap<u64, usize> {
    let mut running: HashMap<u64, usize> = HashMap::new();
    for a in g.jobs.values().flat_map(|j| j.running_attempts()) {
        *running.entry(a.host_id).or_default() += 1;
    }
    running
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Every number a host sends (benchmark figures, work requests,
    /// progress reports, scan summaries), arbitrary and in any order
    /// under every policy: no panic, and the grid stays consistent.
    #[test]
    fn every_number_a_host_sends_is_bounded_and_never_panics(
        policy in proptest::sample::select(vec![
            "adaptive", "round-robin", "batch", "level", "pack", "size-aware",
        ]),
        acts in proptest::collection::vec(any_act(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let key = sign::generate_key();
        let io = GridIo::server(LinkPacks::new(dir.path().join("links")), key.clone());
        let mut g = Grid::open(Default::default(), io, settings()).unwrap();
        let pk = key.verifying_key();
        let hosts = [enrol_host(&mut g, T0), enrol_host(&mut g, T0)];
        g.add_sites(&site_names(12), T0).unwrap();
        let mut p = params(3);
        p.policy = policy.to_string();
        p.delay_ms = 100;
        let max_pages = u64::from(p.max_pages);
        g.start_round(p, T0).unwrap();
        let mut now = T0;
        let mut issued: Vec<(usize, WorkUnit)> = Vec::new();
        for act in acts {
            now += 1;
            let before = running_by_host(&g);
            let unit_of = |i: usize| (!issued.is_empty()).then(|| issued[i % issued.len()].1.clone());
            match act {
                HostAct::Bench(h, p, k, s) => match g.benchmark(hosts[h], p, k, s, now) {
                    Ok(()) | Err(GridError::Invalid(_)) => {}
                    Err(e) => panic!("benchmark: {e}"),
                },
                HostAct::Ask(h, want_seconds, free_slots, held, open_windows) => {
                    let units_held = held.unwrap_or_else(|| {
                        issued.iter().filter(|(o, _)| *o == h).map(|(_, u)| u.unit_id).collect()
                    });
                    let req = WorkRequest { want_seconds, free_slots, units_held, open_windows };
                    let reply = g.request_work(hosts[h], &req, now).unwrap();
                    for su in &reply.units {
                        issued.push((h, sign::verify_unit(&pk, su).unwrap()));
                    }
                }
                HostAct::Progress(h, i, pages, links) => {
                    if let Some(u) = unit_of(i) {
                        g.progress(hosts[h], u.unit_id, pages, links, now).unwrap();
                    }
                }
                HostAct::Upload(h, i, summary, n, pages_done) => {
                    if let Some(u) = unit_of(i) {
                        let file = linkfile::encode(&header_for(&u, n), &records(&u.site, n)).unwrap();
                        let state = pages_done.map(|d| partial_for(&u, n, d).2);
                        g.upload(hosts[h], u.unit_id, *summary, &file, state.as_deref(), now)
                            .unwrap();
                    }
                }
                HostAct::Wait(ms) => {
                    now += u64::from(ms);
                    g.tick(now).unwrap();
                }
            }
            check_consistent(&g, &before, max_pages);
        }
    }
}

#[test]
fn reaches_meet_where_two_sites_share_a_host_name() {
    let meet =
        |a: &str, b: &str, scope: Scope| reaches_meet(&reach_key(a, scope), &reach_key(b, scope));
    // Domain scope: the registrable domain covers every host under it.
    assert!(meet("example.edu", "cs.example.edu", Scope::Domain));
    assert!(meet("cs.example.edu", "math.example.edu", Scope::Domain));
    assert!(!meet("example.edu", "example.org", Scope::Domain));
    // Subdomains scope: a host covers the names under it, not beside it.
    assert!(meet("example.edu", "cs.example.edu", Scope::Subdomains));
    assert!(meet("cs.example.edu", "example.edu", Scope::Subdomains));
    assert!(!meet(
        "cs.example.edu",
        "math.example.edu",
        Scope::Subdomains
    ));
    assert!(!meet("ample.edu", "example.edu", Scope::Subdomains));
    // Host scope: only the same host, on any port.
    assert!(!meet("example.edu", "cs.example.edu", Scope::Host));
    assert!(meet("example.edu:8080", "example.edu", Scope::Host));
    // Across rounds of other scopes: a host inside a domain-scope site.
    assert!(reaches_meet(
        &reach_key("cs.example.edu", Scope::Host),
        &reach_key("example.edu", Scope::Domain)
    ));
    // The index tells whether a job's reach meets a running one's, above
    // and under it, and which: each job alone in an index of its own.
    let jobs = [
        (1, "example.edu", Scope::Subdomains),
        (2, "a.cs.example.edu", Scope::Host),
        (3, "math.example.edu", Scope::Subdomains),
        (4, "example.org", Scope::Subdomains),
        (5, "edu", Scope::Host),
    ];
    let index_of = |ids: &[u64]| {
        let mut index: BTreeMap<String, BTreeMap<u64, bool>> = BTreeMap::new();
        for (id, site, scope) in jobs.iter().filter(|j| ids.contains(&j.0)) {
            let (k, tree) = reach_key(site, *scope);
            index.entry(k).or_default().insert(*id, tree);
        }
        index
    };
    let all = index_of(&[1, 2, 3, 4, 5]);
    let found = |site: &str, scope: Scope| {
        let r = reach_key(site, scope);
        let ids: Vec<u64> = (1..=5)
            .filter(|id| meets_any(&index_of(&[*id]), &r, None))
            .collect();
        assert_eq!(meets_any(&all, &r, None), !ids.is_empty(), "{site}");
        ids
    };
    assert_eq!(found("cs.example.edu", Scope::Subdomains), vec![1, 2]);
    assert_eq!(found("cs.example.edu", Scope::Host), vec![1]);
    assert_eq!(found("example.edu", Scope::Subdomains), vec![1, 2, 3]);
    assert_eq!(found("example.net", Scope::Subdomains), Vec::<u64>::new());
    // A job does not meet itself.
    let own = reach_key("cs.example.edu", Scope::Subdomains);
    assert!(!meets_any(&index_of(&[1]), &own, Some(1)));
    assert!(meets_any(&index_of(&[1, 2]), &own, Some(1)));
}

/// A round over `sites` in `scope`, and two hosts.
fn round_of(sites: &[&str], scope: Scope, policy: &str) -> (Fx, Vec<u64>) {
    let mut fx = Fx::new();
    let names: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
    fx.grid.add_sites(&names, T0).unwrap();
    let hosts = vec![fx.host(), fx.host()];
    let p = RoundParams {
        scope,
        policy: policy.into(),
        ..params(3)
    };
    fx.grid.start_round(p, T0).unwrap();
    (fx, hosts)
}

#[test]
fn jobs_whose_sites_share_a_host_never_run_at_once() {
    // A site inside another's reach is folded into its job: one job
    // crawls both (domain scope: the first listed of one registrable
    // domain; subdomains: the wider site), and nothing else waits.
    for (scope, kept) in [
        (Scope::Domain, "cs.example.edu"),
        (Scope::Subdomains, "example.edu"),
    ] {
        let (mut fx, h) = round_of(
            &["example.edu", "cs.example.edu", "other.edu"],
            scope,
            "round-robin",
        );
        let (mine, _) = fx.ask(h[0], 3, &[], T0 + 1);
        let sites: BTreeSet<String> = mine.iter().map(|u| u.site.clone()).collect();
        let want: BTreeSet<String> = [kept, "other.edu"].map(String::from).into();
        assert_eq!(sites, want, "{scope:?}");
        let (none, _) = fx.ask(h[1], 3, &[], T0 + 2);
        assert!(none.is_empty(), "{scope:?}: {none:?}");
    }
    // The same host from two sites (two ports): one at a time too; in
    // host scope, a host and its subdomain are not the same host.
    let (mut fx, h) = round_of(
        &["example.edu", "example.edu:8080", "cs.example.edu"],
        Scope::Host,
        "round-robin",
    );
    let (mine, _) = fx.ask(h[0], 3, &[], T0 + 1);
    let sites: BTreeSet<String> = mine.iter().map(|u| u.site.clone()).collect();
    assert_eq!(mine.len(), 2, "{sites:?}");
    assert!(sites.contains("cs.example.edu"));
}

/// Each unit `h` holds reports progress at `step`; a unit asked to hand its
/// scan over uploads it cut, and every third step the oldest finishes.
/// Returns the units still held and how many were handed over.
fn report_held_units(
    fx: &mut Fx,
    h: u64,
    mine: Vec<WorkUnit>,
    step: u64,
    now: u64,
) -> (Vec<WorkUnit>, usize) {
    let mut keep = Vec::new();
    let mut hand_overs = 0;
    for (k, u) in mine.into_iter().enumerate() {
        let pages = 1 + step / 3;
        match fx
            .grid
            .progress(h, u.unit_id, pages, pages, now + 1)
            .unwrap()
        {
            ProgressOutcome::Abort(r) if r == ABORT_HAND_OVER => {
                hand_overs += 1;
                let (sum, file, state) = partial_for(&u, 2, pages.min(49));
                fx.grid
                    .upload(h, u.unit_id, sum, &file, Some(&state), now + 2)
                    .unwrap();
            }
            ProgressOutcome::Abort(_) => {}
            _ if k == 0 && step % 3 == 2 => {
                fx.upload(h, &u, 3, now + 2);
            }
            _ => keep.push(u),
        }
    }
    (keep, hand_overs)
}

/// No job of `round` has two running copies, and at most one job on the
/// host example.edu runs.
fn assert_one_stream_per_host(fx: &Fx, round: u64, policy: &str) {
    let (_, jobs) = fx.grid.round(round).unwrap();
    let running: Vec<&JobRecord> = jobs
        .iter()
        .filter(|j| j.running_attempts().next().is_some())
        .collect();
    for j in &running {
        assert_eq!(j.running_attempts().count(), 1, "{policy}: job {}", j.id);
    }
    let shared = running
        .iter()
        .filter(|j| j.site.starts_with("example.edu"))
        .count();
    assert!(
        shared <= 1,
        "{policy}: two jobs on the host example.edu at once"
    );
}

/// Under every policy, with hosts of different speeds asking, reporting
/// and uploading in turn: a job never has two running copies (its checks
/// included), and two jobs whose sites share a host never run at once.
#[test]
fn under_every_policy_one_stream_of_requests_per_host() {
    for policy in scheduler::POLICY_NAMES {
        for validate in [ValidateMode::Off, ValidateMode::All] {
            let mut fx = Fx::new();
            // Two ports of one host: their reaches meet, neither covers
            // the other (a site is folded only on its own port).
            let sites = ["example.edu", "example.edu:8080", "a.test", "b.test"];
            let names: Vec<String> = sites.iter().map(|s| s.to_string()).collect();
            fx.grid.add_sites(&names, T0).unwrap();
            let hosts: Vec<u64> = (0..3).map(|_| fx.host()).collect();
            for (i, h) in hosts.iter().enumerate() {
                let speed = [0.2, 5.0, 50.0][i];
                fx.grid.benchmark(*h, speed, speed * 10.0, 2, T0).unwrap();
            }
            let p = RoundParams {
                scope: Scope::Domain,
                policy: policy.into(),
                validate,
                ..params(5)
            };
            let round = fx.grid.start_round(p, T0).unwrap();
            let mut held: HashMap<u64, Vec<WorkUnit>> = HashMap::new();
            for step in 0..200u64 {
                let now = T0 + step * 5_000;
                let h = hosts[(step % 3) as usize];
                let ids: Vec<u64> = held
                    .get(&h)
                    .into_iter()
                    .flatten()
                    .map(|u| u.unit_id)
                    .collect();
                let (got, _) = fx.ask(h, 2, &ids, now);
                held.entry(h).or_default().extend(got);
                // Each held unit reports progress; every third step the
                // oldest finishes.
                let mine = held.remove(&h).unwrap_or_default();
                let (keep, _) = report_held_units(&mut fx, h, mine, step, now);
                held.insert(h, keep);
                fx.grid.tick(now + 3).unwrap();
                assert_one_stream_per_host(&fx, round, policy);
            }
        }
    }
}

/// A deadline check whose write fails leaves the grid whole (a write
/// cannot stop a change half-way: the grid gives its writes back after
/// the change), and the store stopped: nothing more is made durable, and
/// a restart finds what was synced before the failure.
#[test]
fn a_failed_write_stops_the_store_and_leaves_the_grid_whole() {
    let store = std::sync::Arc::new(crate::store::MemoryStore::new());
    let links = Arc::new(crate::grid::links::MemoryLinks::new());
    let key = sign::generate_key();
    let io = GridIo::in_memory(links.clone(), key.clone(), 7);
    let mut g = Stored::open(store.clone(), io, settings());
    g.add_sites(&site_names(4), T0).unwrap();
    let round = g.start_round(params(3), T0).unwrap();
    let host = enrol_host(&mut g, T0);
    let req = WorkRequest {
        want_seconds: 3600,
        free_slots: 2,
        units_held: vec![],
        open_windows: None,
    };
    let reply = g.request_work(host, &req, T0).unwrap();
    assert_eq!(reply.units.len(), 2);
    g.persist().unwrap();

    store.fail_next_write();
    let late = T0 + 10 * HOUR_MS;
    assert_eq!(g.tick(late).unwrap(), 2, "both units expired in memory");
    assert!(g.persist().is_err(), "the deadline check's write failed");
    assert_eq!(g.open, g.open_from_scratch());
    g.check_derived();
    // Nothing more is made durable.
    g.request_work(host, &req, late).unwrap();
    assert!(g.persist().is_err());
    assert!(crate::store::Store::failure(&*store).is_some());
    // A restart finds the units as they were before the failed write.
    let io = GridIo::in_memory(links, key, 7);
    let again = Stored::open(std::sync::Arc::new(store.reopen()), io, settings());
    let running = again.jobs.values().filter(|j| j.round_id == round);
    assert_eq!(
        running.filter(|j| j.state == JobState::Running).count(),
        2,
        "the expiry was never durable"
    );
}

/// After a scan uploads, a job on the same host (here the same host on
/// another port) waits until the round's delay has passed since, at 1 s
/// and at 0; the settling reach is then taken out of the index.
#[test]
fn a_job_on_a_host_just_scanned_waits_the_rounds_delay() {
    for delay_ms in [1000, 0] {
        let mut fx = Fx::new();
        let names = ["example.edu", "example.edu:8080"].map(String::from);
        fx.grid.add_sites(&names, T0).unwrap();
        let h = [fx.host(), fx.host()];
        let p = RoundParams {
            scope: Scope::Host,
            policy: "round-robin".into(),
            delay_ms,
            ..params(3)
        };
        fx.grid.start_round(p, T0).unwrap();
        let (first, _) = fx.ask(h[0], 2, &[], T0 + 1);
        assert_eq!(first.len(), 1, "one stream to the host: {first:?}");
        assert_eq!(
            fx.upload(h[0], &first[0], 3, T0 + 1000),
            UploadOutcome::Accepted
        );
        assert_eq!(fx.grid.settling.len(), usize::from(delay_ms > 0));
        let (early, _) = fx.ask(h[1], 2, &[], T0 + 1999);
        let (late, _) = fx.ask(h[1], 2, &[], T0 + 2000);
        if delay_ms > 0 {
            assert!(early.is_empty(), "{early:?}");
            assert_eq!(late.len(), 1, "{late:?}");
        } else {
            assert_eq!(early.len(), 1, "{early:?}");
        }
        assert_ne!(
            [&early, &late].into_iter().flatten().next().unwrap().site,
            first[0].site
        );
        assert_eq!(fx.grid.settling.len(), 0);
    }
}

/// Settling reaches end in time order; a second upload of one job's
/// scan moves its end, and only what ended is taken out.
#[test]
fn settling_reaches_end_in_time_order() {
    let mut s = Settling::default();
    s.insert("edu.a".into(), false, 1, 100);
    s.insert("edu.b".into(), true, 2, 50);
    s.insert("edu.a".into(), false, 1, 200);
    s.expire(99);
    assert_eq!(s.len(), 1);
    assert!(meets_any(&s.index, &("edu.a".into(), false), None));
    assert!(!meets_any(&s.index, &("edu.b".into(), false), None));
    s.expire(199);
    assert_eq!(s.len(), 1);
    s.expire(200);
    assert_eq!(s.len(), 0);
    assert!(s.index.is_empty());
}

/// A result under check waits outside its round's queue while its own
/// scan's upload settles (the round's delay), so no asker passes over it;
/// the round is not done while it waits, and the first request after the
/// delay finds it queued and gives it to a host other than its author. At
/// delay 0 it is queued at once.
#[test]
fn a_result_under_check_waits_outside_the_queue_while_its_upload_settles() {
    for delay_ms in [1000, 0] {
        let mut fx = Fx::new();
        fx.grid.add_sites(&["a.test".to_string()], T0).unwrap();
        let (a, b) = (fx.host(), fx.host());
        let p = RoundParams {
            policy: "round-robin".into(),
            validate: ValidateMode::All,
            delay_ms,
            ..params(3)
        };
        let round = fx.grid.start_round(p, T0).unwrap();
        let unit = fx.one(a, &[], T0 + 1);
        assert_eq!(fx.upload(a, &unit, 3, T0 + 1000), UploadOutcome::Accepted);
        let job = unit.job_id;
        assert_eq!(fx.grid.jobs[&job].state, JobState::Queued, "under check");
        let open = &fx.grid.open[&round];
        if delay_ms > 0 {
            assert!(open.queue.get(job).is_none(), "kept out of the queue");
            assert!(open.settling.contains(&job));
            // Nobody gets it while it settles, and the round goes on.
            assert!(fx.ask(b, 1, &[], T0 + 1999).0.is_empty());
            assert_eq!(fx.grid.rounds[&round].state, RoundState::Running);
            fx.grid.check_derived();
        } else {
            assert!(open.queue.get(job).is_some());
            assert!(open.settling.is_empty());
        }
        // Its author never checks it; another host does once it settled.
        assert!(fx.ask(a, 1, &[unit.unit_id], T0 + 2000).0.is_empty());
        let check = fx.one(b, &[], T0 + 2000);
        assert_eq!(check.job_id, job);
        assert!(fx.grid.open[&round].settling.is_empty());
        assert_eq!(fx.grid.settling.len(), 0);
    }
}

/// The one check of the derived maps finds a map out of step with the
/// records: a unit no job issued.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "unit → job")]
fn a_unit_map_out_of_step_with_the_jobs_is_caught() {
    let (mut fx, _) = Fx::with_round(2, 3);
    fx.grid.check_derived();
    fx.grid.units.insert(999, 1);
    fx.grid.check_derived();
}

/// ... and resources kept for a host that was revoked.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "revoked or unknown")]
fn resources_of_a_revoked_host_are_caught() {
    let (mut fx, _) = Fx::with_round(2, 3);
    let h = fx.host();
    fx.grid.check_derived();
    fx.grid.hosts.get_mut(&h).unwrap().revoked = true;
    fx.grid.resources.insert(h, Default::default());
    fx.grid.check_derived();
}
