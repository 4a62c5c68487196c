//! The metrics' names, labels and encoding, checked on a real render.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::grid::{GridCounters, JobsByState};

/// A snapshot with every number set.
fn snapshot() -> GridSnapshot {
    GridSnapshot {
        counters: GridCounters {
            units_issued: 7,
            units_replicated: 1,
            units_accepted: 5,
            units_expired: 2,
            units_recalled: 3,
            parts_accepted: 4,
            units_aborted: 1,
            pages_accepted: 120,
            links_accepted: 900,
        },
        jobs: JobsByState {
            queued: 1,
            running: 1,
            done: 5,
            failed: 0,
            cancelled: 0,
            awaiting_validation: 0,
        },
        rounds_running: 1,
        hosts_active_hour: 2,
        hosts_active_day: 3,
        round_progress: Some(5.0 / 7.0),
    }
}

/// Metrics that saw one request of every kind with every outcome, an
/// upload, fsyncs and lock holds.
fn busy_metrics() -> Metrics {
    let m = Metrics::new(1_700_000_000_000);
    for &kind in RequestKind::ALL {
        for &outcome in Outcome::ALL {
            m.answered(kind, &answer_for(outcome), Duration::from_millis(3));
        }
    }
    m.uploaded(4096);
    m.synced(Duration::from_micros(800), 3);
    m.lock_held(Duration::from_micros(40));
    m
}

/// An answer that has `outcome`.
fn answer_for(outcome: Outcome) -> Answer {
    let error = |code| Answer::Error {
        code,
        message: String::new(),
    };
    match outcome {
        Outcome::Ok => Answer::Ack,
        Outcome::Rejected => Answer::Rejected {
            reason: String::new(),
        },
        Outcome::Duplicate => Answer::Duplicate,
        Outcome::Abort => Answer::Abort {
            reason: String::new(),
        },
        Outcome::Upgrade => error(ErrorCode::Upgrade),
        Outcome::NotAuthenticated => error(ErrorCode::NotAuthenticated),
        Outcome::UnknownHost => error(ErrorCode::UnknownHost),
        Outcome::Revoked => error(ErrorCode::Revoked),
        Outcome::BadInvite => error(ErrorCode::BadInvite),
        Outcome::BadRequest => error(ErrorCode::BadRequest),
        Outcome::Internal => error(ErrorCode::Internal),
        Outcome::NameTaken => error(ErrorCode::NameTaken),
    }
}

/// One sample line: its name, labels and value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

fn parse_sample(line: &str) -> Sample {
    let (head, value) = line.rsplit_once(' ').expect("name and value");
    let (name, labels) = match head.split_once('{') {
        Some((n, rest)) => {
            let inner = rest.strip_suffix('}').expect("closing brace");
            let labels = inner
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("k=v");
                    (k.to_string(), v.trim_matches('"').to_string())
                })
                .collect();
            (n.to_string(), labels)
        }
        None => (head.to_string(), Vec::new()),
    };
    Sample {
        name,
        labels,
        value: value.parse().expect("value"),
    }
}

/// The families (`# TYPE` name → type) and samples of a render.
fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
    assert!(text.ends_with("# EOF\n"), "ends with # EOF");
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| *l != "# EOF") {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("name and type");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none());
        } else if !line.starts_with('#') {
            samples.push(parse_sample(line));
        }
    }
    (types, samples)
}

/// The family a sample belongs to, by the OpenMetrics suffixes.
fn family_of<'a>(sample: &str, types: &'a BTreeMap<String, String>) -> &'a str {
    for suffix in ["", "_total", "_bucket", "_count", "_sum", "_created"] {
        if let Some(base) = sample.strip_suffix(suffix) {
            if let Some((name, _)) = types.get_key_value(base) {
                return name;
            }
        }
    }
    panic!("sample {sample} has no family");
}

#[test]
fn every_family_is_named_by_the_rules_and_every_label_is_closed() {
    let text = busy_metrics().render(&snapshot()).expect("render");
    let (types, samples) = parse(&text);
    assert!(types.len() >= 15, "families: {types:?}");
    for (name, kind) in &types {
        assert!(name.starts_with("beebot_"), "{name}");
        assert!(
            !name.ends_with("_total"),
            "family {name}: the suffix is the sample's"
        );
        if kind == "histogram" {
            assert!(
                name.ends_with("_seconds") || name.ends_with("_size"),
                "histogram {name} in a base unit"
            );
        }
    }
    let allowed: BTreeMap<&str, BTreeSet<&str>> = [
        ("kind", RequestKind::ALL.iter().map(|k| k.text()).collect()),
        ("outcome", Outcome::ALL.iter().map(|k| k.text()).collect()),
        ("event", UnitEvent::ALL.iter().map(|k| k.text()).collect()),
        (
            "state",
            JobStateLabel::ALL.iter().map(|k| k.text()).collect(),
        ),
        ("within", Within::ALL.iter().map(|k| k.text()).collect()),
    ]
    .into_iter()
    .collect();
    for s in &samples {
        let family = family_of(&s.name, &types);
        if types[family] == "counter" {
            assert!(
                s.name.ends_with("_total") || s.name.ends_with("_created"),
                "{}",
                s.name
            );
        }
        for (k, v) in &s.labels {
            if k == "le" {
                assert!(v == "+Inf" || v.parse::<f64>().is_ok(), "le={v}");
                continue;
            }
            let values = allowed
                .get(k.as_str())
                .unwrap_or_else(|| panic!("label {k} of {} is not a closed set", s.name));
            assert!(values.contains(v.as_str()), "{k}={v} of {}", s.name);
        }
    }
}

#[test]
fn a_render_carries_the_grid_and_the_server_numbers() {
    let text = busy_metrics().render(&snapshot()).expect("render");
    let (_, samples) = parse(&text);
    let value = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
            .value
    };
    assert_eq!(value("beebot_units_total", &[("event", "issued")]), 7.0);
    assert_eq!(value("beebot_units_total", &[("event", "expired")]), 2.0);
    assert_eq!(value("beebot_units_total", &[("event", "recalled")]), 3.0);
    assert_eq!(value("beebot_parts_accepted_total", &[]), 4.0);
    assert_eq!(value("beebot_pages_accepted_total", &[]), 120.0);
    assert_eq!(value("beebot_jobs", &[("state", "done")]), 5.0);
    assert_eq!(value("beebot_hosts_active", &[("within", "1d")]), 3.0);
    assert!((value("beebot_round_progress_ratio", &[]) - 5.0 / 7.0).abs() < 1e-9);
    let req = [("kind", "upload"), ("outcome", "rejected")];
    assert_eq!(value("beebot_requests_total", &req), 1.0);
    let n = RequestKind::ALL.len() as f64 * Outcome::ALL.len() as f64;
    let count: f64 = samples
        .iter()
        .filter(|s| s.name == "beebot_request_duration_seconds_count")
        .map(|s| s.value)
        .sum();
    assert_eq!(count, n);
    assert_eq!(value("beebot_upload_bytes_total", &[]), 4096.0);
    assert_eq!(value("beebot_store_fsync_duration_seconds_count", &[]), 1.0);
    assert_eq!(value("beebot_store_sync_group_size_sum", &[]), 3.0);
    assert_eq!(
        value("beebot_grid_lock_hold_duration_seconds_count", &[]),
        1.0
    );
    assert_eq!(
        value("beebot_process_start_time_seconds", &[]),
        1_700_000_000.0
    );
    if cfg!(target_os = "linux") {
        assert!(value("beebot_process_resident_memory_bytes", &[]) > 1e6);
    }
}

#[test]
fn no_round_yet_means_no_progress_sample() {
    let snap = GridSnapshot {
        round_progress: None,
        ..snapshot()
    };
    let text = Metrics::new(0).render(&snap).expect("render");
    assert!(!text.contains("round_progress"), "{text}");
    assert!(text.contains("beebot_units_total{event=\"issued\"} 7\n"));
}

#[test]
fn resident_memory_is_read_in_bytes_from_vm_rss() {
    assert_eq!(
        vm_rss_bytes("Name:\tx\nVmRSS:\t   2048 kB\n"),
        Some(2048 * 1024)
    );
    assert_eq!(vm_rss_bytes("VmRSS: 12 MB\n"), None);
    assert_eq!(vm_rss_bytes("VmSize: 12 kB\n"), None);
}

#[test]
fn one_fsync_serves_the_group_of_syncs_that_asked_for_it() {
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<u64>>);
    impl SyncObserver for Seen {
        fn synced(&self, _took: Duration, group: u64) {
            self.0.lock().expect("lock").push(group);
        }
    }
    let store = crate::store::memory();
    store.defer_flushes();
    let seen = Arc::new(Seen::default());
    store.observe_syncs(seen.clone());
    store.sync().expect("nothing to sync");
    assert!(
        seen.0.lock().expect("lock").is_empty(),
        "no write: no fsync"
    );
    store.next_id(crate::store::IdKind::Round).expect("write");
    store.sync().expect("sync");
    store.sync().expect("already durable");
    assert!(
        seen.0.lock().expect("lock").is_empty(),
        "an fsync is told once its group is whole, when the next begins"
    );
    store.next_id(crate::store::IdKind::Round).expect("write");
    store.sync().expect("sync");
    assert_eq!(*seen.0.lock().expect("lock"), vec![1]);
}

/// Prometheus's text format, for a scraper that does not ask for
/// OpenMetrics: what `promtool check metrics` takes without a word.
#[test]
fn the_text_format_names_counters_by_their_samples_and_promtool_takes_it() {
    let open = busy_metrics().render(&snapshot()).expect("render");
    let text = text_format(&open);
    assert!(text.contains("# HELP beebot_units_total Units by what happened to them (recalled: not started while their host was silent).\n"));
    assert!(text.contains("# TYPE beebot_units_total counter\n"));
    assert!(
        text.contains("# TYPE beebot_jobs gauge\n"),
        "gauges keep their name"
    );
    assert!(!text.contains("# UNIT") && !text.contains("# EOF") && !text.contains("_created"));
    // Every sample is kept.
    let samples = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples(&text), samples(&open));
}

#[test]
fn a_scraper_gets_openmetrics_only_when_it_prefers_it() {
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                      version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert!(wants_openmetrics(prometheus));
    assert!(wants_openmetrics("application/openmetrics-text"));
    assert!(wants_openmetrics(
        "text/plain; q=0.5, application/openmetrics-text; Q = 0.9"
    ));
    for other in [
        "",
        "*/*",
        "text/plain;version=0.0.4",
        "text/plain, application/openmetrics-text;q=0.5",
        "application/openmetrics-text;q=0",
        "application/openmetrics-text; Q = 0",
        "application/openmetrics-text;q=nonsense",
    ] {
        assert!(!wants_openmetrics(other), "{other}");
    }
}
