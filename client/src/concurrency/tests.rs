//! The controller against modelled machines: a politeness-bound crawl grows
//! to its cap, a saturated one stops, slower responses and CPU make it back
//! off, and no sequence of measurements takes it out of `1..=cap`.

use super::*;
use proptest::prelude::*;

/// The default budget of a desktop: `slots = auto`, 1 GB, no bandwidth cap,
/// one core of two.
fn budget(ceiling: u32) -> Budget {
    Budget {
        ceiling,
        memory_mb: 1024,
        bandwidth_kbps: 0,
        cpu_cores: cpu_budget_cores(2),
    }
}

/// A machine crawling at a 1 s delay, responses of `response_s`: each busy
/// slot yields a page every `1 + response_s` seconds, up to `max_pages_per_s`
/// in all; CPU 1 ms a page; 30 KB a page.
fn polite(limit: u32, response_s: f64, max_pages_per_s: f64) -> Sample {
    let seconds = 10.0;
    let busy = f64::from(limit);
    let pages_per_s = (busy / (1.0 + response_s)).min(max_pages_per_s);
    let pages = (pages_per_s * seconds).round() as u64;
    Sample {
        seconds,
        pages,
        busy_slot_s: busy * seconds,
        responses: pages,
        response_s: pages as f64 * response_s,
        bytes: pages * 30 * 1024,
        cpu_s: Some(pages as f64 * 0.001),
        rss_mb: Some(10.0 + busy),
    }
}

/// Run `steps` steps of `model` (the sample at a concurrency), returning
/// the concurrency after each.
fn run(c: &mut Controller, b: &Budget, steps: usize, model: impl Fn(u32) -> Sample) -> Vec<u32> {
    (0..steps)
        .map(|_| {
            let s = model(c.limit());
            c.step(&s, b).0
        })
        .collect()
}

#[test]
fn it_starts_at_four_or_the_ceiling() {
    assert_eq!(Controller::new(&budget(64)).limit(), START_SLOTS);
    assert_eq!(Controller::new(&budget(1)).limit(), 1);
    assert_eq!(Controller::new(&budget(3)).limit(), 3);
    // 48 MB: three scans' worth.
    let small = Budget {
        memory_mb: 48,
        ..budget(64)
    };
    assert_eq!(small.static_cap(), 3);
    assert_eq!(Controller::new(&small).limit(), 3);
    assert_eq!(
        Budget {
            ceiling: 0,
            ..budget(0)
        }
        .static_cap(),
        1
    );
    assert_eq!(cpu_budget_cores(1), 0.5);
    assert_eq!(cpu_budget_cores(8), 4.0);
}

#[test]
fn a_polite_crawl_grows_while_pages_per_second_grow_up_to_the_ceiling() {
    // Table: ceiling, and the concurrency it reaches.
    for ceiling in [1, 2, 3, 10, 40, 64] {
        let b = budget(ceiling);
        let mut c = Controller::new(&b);
        let seen = run(&mut c, &b, 60, |l| polite(l, 0.175, 1000.0));
        assert_eq!(c.limit(), ceiling, "ceiling {ceiling}: {seen:?}");
        assert!(seen.iter().all(|&l| l <= ceiling && l >= 1), "{seen:?}");
        // It grows step by step, never jumping past 1.5 times.
        let mut prev = START_SLOTS.min(ceiling);
        for &l in &seen {
            assert!(
                f64::from(l) <= (f64::from(prev) * GROWTH).max(f64::from(prev + 1)),
                "{seen:?}"
            );
            prev = l;
        }
    }
}

#[test]
fn it_reaches_64_within_the_first_minutes() {
    let b = budget(MAX_SLOTS);
    let mut c = Controller::new(&b);
    // Steps of 10 s: 64 within 3 minutes.
    let seen = run(&mut c, &b, 18, |l| polite(l, 0.175, 1000.0));
    assert_eq!(c.limit(), MAX_SLOTS, "{seen:?}");
}

#[test]
fn it_stops_growing_where_pages_per_second_stop_growing() {
    // Something saturates at 12 pages/s: 14 slots of 1.175 s a page do it.
    let b = budget(64);
    let mut c = Controller::new(&b);
    let seen = run(&mut c, &b, 200, |l| polite(l, 0.175, 12.0));
    let late = &seen[100..];
    let most = *late.iter().max().expect("steps");
    // Probing goes one step past the knee now and then, never further.
    assert!(most <= 14 * 2, "{late:?}");
    // Most of the time it sits at the knee or just past it, not far below.
    let near = late.iter().filter(|&&l| (10..=21).contains(&l)).count();
    assert!(near * 10 >= late.len() * 8, "{late:?}");
}

#[test]
fn slower_responses_make_it_back_off_and_it_grows_again_once_they_are_the_norm() {
    let b = budget(64);
    let mut c = Controller::new(&b);
    run(&mut c, &b, 40, |l| polite(l, 0.1, 1000.0));
    assert_eq!(c.limit(), 64);
    // Responses go from 100 ms to 1 s: it backs off at once.
    let seen = run(&mut c, &b, 3, |l| polite(l, 1.0, 1000.0));
    assert!(seen[0] < 64 && seen[2] < seen[0], "{seen:?}");
    // A somewhat slower response (1.6x, above the hold ratio) holds it.
    let mut h = Controller::new(&b);
    run(&mut h, &b, 4, |l| polite(l, 0.2, 1000.0));
    let before = h.limit();
    let mut slower = polite(before, 0.32, 1000.0);
    slower.add(&polite(before, 0.32, 1000.0));
    let (after, why) = h.step(&slower, &b);
    assert_eq!((after, why), (before, Reason::Near));
    // Slow for long: the baseline follows, and it grows again.
    let seen = run(&mut c, &b, 200, |l| polite(l, 1.0, 1000.0));
    assert_eq!(*seen.last().expect("steps"), 64, "{seen:?}");
}

#[test]
fn a_millisecond_of_jitter_on_loopback_is_not_slower() {
    let b = budget(8);
    let mut c = Controller::new(&b);
    let seen = run(&mut c, &b, 30, |l| {
        // 1 ms responses that sometimes take 20 ms: never a back-off.
        let jitter = if l % 2 == 0 { 0.02 } else { 0.001 };
        polite(l, jitter, 1000.0)
    });
    assert_eq!(c.limit(), 8, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
}

#[test]
fn cpu_over_its_budget_makes_it_back_off_and_near_it_holds() {
    let b = budget(64);
    let mut c = Controller::new(&b);
    // 40 ms of CPU a page: 25 pages/s fill the core of the budget.
    let cpu_heavy = |l: u32| {
        let mut s = polite(l, 0.1, 1000.0);
        s.cpu_s = Some(s.pages as f64 * 0.04);
        s
    };
    let seen = run(&mut c, &b, 60, cpu_heavy);
    // Each scan costs 0.036 cores: growth stops at most one scan past the
    // 22 that fit under 80% of the budget (it never passes the budget, 27
    // scans), and stays there.
    assert!(seen.iter().all(|&l| l <= 23), "{seen:?}");
    assert!((22..=23).contains(&seen[20]), "{seen:?}");
    assert!(seen[20..].iter().all(|&l| l == seen[20]), "{seen:?}");
    // From high up, CPU over budget across the window shrinks it to the
    // scans that fit under the hold line, once.
    let mut c = Controller::new(&b);
    run(&mut c, &b, 40, |l| polite(l, 0.1, 1000.0));
    assert_eq!(c.limit(), 64);
    let mut seen = Vec::new();
    for _ in 0..CPU_JUDGED_STEPS {
        // The scans running stay at 64: a step down stops none of them.
        seen.push(c.step(&cpu_heavy(64), &b));
    }
    // The window fills with the heavier steps one by one: it lands on the
    // 21 or 22 scans that fit in at most as many steps.
    let &(l, why) = seen.last().expect("steps");
    assert!((21..=22).contains(&l) && why == Reason::Cpu, "{seen:?}");
    // While the 64 wind down, the share at the new level is what counts:
    // no further step down (and no more than the 22 that fit).
    for _ in 0..2 * CPU_JUDGED_STEPS {
        let (now, why) = c.step(&cpu_heavy(64), &b);
        assert!((l..=22).contains(&now), "{l} then {now} ({why:?})");
    }
}

#[test]
fn a_cpu_share_that_swings_from_step_to_step_is_judged_over_the_window() {
    // The default budget, 0.02 cores; a page costs 0.4 ms on average but a
    // step's share swings by half either way (a site's upload, a large
    // page): at 40 sites at once the mean is 1.45% of a core, and one step
    // in three passes the budget (2.2%).
    let b = Budget {
        cpu_cores: 0.02,
        ..budget(40)
    };
    let swings = [1.5, 0.5, 1.0, 0.5, 1.5, 1.0];
    let step = std::cell::Cell::new(0usize);
    let model = |l: u32| {
        let mut s = polite(l, 0.1, 1000.0);
        let k = swings[step.get() % swings.len()];
        step.set(step.get() + 1);
        s.cpu_s = Some(s.pages as f64 * 0.0004 * k);
        s
    };
    let mut c = Controller::resume(
        &b,
        Some(&Learned {
            sites_at_once: 40,
            pages_per_slot_s: 0.9,
            cpu_s_per_page: Some(0.0004),
        }),
    );
    assert_eq!(c.limit(), 40);
    let seen = run(&mut c, &b, 60, model);
    assert!(seen.iter().all(|&l| l == 40), "{seen:?}");
}

#[test]
fn the_default_cpu_budget_is_approached_from_below_and_held() {
    // `cpu_percent` 2: 0.02 cores. 1 ms a page at 1.1 s a page per scan,
    // plus 2 ms a second of the process's own (its loop, the status page).
    let b = Budget {
        cpu_cores: 0.02,
        ..budget(64)
    };
    let model = |l: u32| {
        let mut s = polite(l, 0.1, 1000.0);
        s.cpu_s = Some(s.pages as f64 * 0.001 + s.seconds * 0.002);
        s
    };
    let mut c = Controller::new(&b);
    let seen = run(&mut c, &b, 60, model);
    let share = |l: u32| model(l).cpu_share().expect("share");
    assert!(seen.iter().all(|&l| share(l) <= b.cpu_cores), "{seen:?}");
    let settled = *seen.last().expect("steps");
    assert!(seen[30..].iter().all(|&l| l == settled), "{seen:?}");
    // Settled within one growth step of the hold line: 80% of the budget.
    assert!(share(settled) > 0.6 * b.cpu_cores, "{settled} {seen:?}");
    assert_eq!(c.step(&model(settled), &b).1, Reason::Near);
    // The budget raised (`beebot config set cpu_percent 5`): it grows again.
    let more = Budget {
        cpu_cores: 0.05,
        ..b
    };
    let seen = run(&mut c, &more, 60, model);
    assert!(*seen.last().expect("steps") > settled, "{seen:?}");
    assert!(seen.iter().all(|&l| share(l) <= more.cpu_cores), "{seen:?}");
}

#[test]
fn memory_over_its_budget_makes_it_back_off() {
    let b = Budget {
        memory_mb: 256,
        ..budget(64)
    };
    let mut c = Controller::new(&b);
    let seen = run(&mut c, &b, 40, |l| polite(l, 0.1, 1000.0));
    // 256 MB at 16 MB a scan: 16 at most.
    assert_eq!(c.limit(), 16, "{seen:?}");
    let mut s = polite(16, 0.1, 1000.0);
    s.rss_mb = Some(300.0);
    assert_eq!(c.step(&s, &b), (12, Reason::Memory));
}

#[test]
fn a_bandwidth_cap_bounds_it_by_what_each_scan_draws() {
    // 30 KB a page at 0.9 pages/s a scan: ~26 KB/s a scan; 300 KB/s feeds 11.
    let b = Budget {
        bandwidth_kbps: 300,
        ..budget(64)
    };
    let mut c = Controller::new(&b);
    let seen = run(&mut c, &b, 60, |l| {
        let mut s = polite(l, 0.1, 1000.0);
        // The cap holds the download to 300 KB/s, whatever the scans want.
        s.bytes = s.bytes.min((300 * 1024) as u64 * 10);
        s
    });
    assert!(seen.iter().all(|&l| l <= 12), "{seen:?}");
    assert!(c.limit() >= 8, "{seen:?}");
}

#[test]
fn too_few_units_hold_it_where_it_is() {
    let b = budget(64);
    let mut c = Controller::new(&b);
    run(&mut c, &b, 6, |l| polite(l, 0.1, 1000.0));
    let at = c.limit();
    // Only 3 scans run, whatever the limit: no growth.
    let seen = run(&mut c, &b, 10, |_| polite(3, 0.1, 1000.0));
    assert!(seen.iter().all(|&l| l == at), "{seen:?}");
}

#[test]
fn changed_settings_apply_at_once() {
    let mut c = Controller::new(&budget(1));
    assert_eq!(c.limit(), 1);
    // Raised from 1 to 3: at once to the start figure or the new ceiling.
    assert_eq!(c.bound(&budget(3)), Some((3, Reason::CeilingRaised)));
    assert_eq!(c.bound(&budget(64)), Some((4, Reason::CeilingRaised)));
    assert_eq!(c.bound(&budget(64)), None, "at the start already");
    // Lowered: down at once; the same budget again changes nothing.
    assert_eq!(c.bound(&budget(2)), Some((2, Reason::Capped)));
    assert_eq!(c.bound(&budget(2)), None);
}

#[test]
fn a_lowered_ceiling_applies_at_the_next_step() {
    let b = budget(64);
    let mut c = Controller::new(&b);
    run(&mut c, &b, 40, |l| polite(l, 0.1, 1000.0));
    assert_eq!(
        c.step(&polite(64, 0.1, 1000.0), &budget(5)),
        (5, Reason::Capped)
    );
}

/// Any sample: any counts, times, CPU and memory, including none and absurd ones.
fn any_sample() -> impl Strategy<Value = Sample> {
    (
        0.0f64..120.0,
        0u64..100_000,
        0.0f64..10_000.0,
        0u64..100_000,
        0.0f64..100_000.0,
        0u64..1 << 40,
        proptest::option::of(0.0f64..1000.0),
        proptest::option::of(0.0f64..1_000_000.0),
    )
        .prop_map(
            |(seconds, pages, busy_slot_s, responses, response_s, bytes, cpu_s, rss_mb)| Sample {
                seconds,
                pages,
                busy_slot_s,
                responses,
                response_s,
                bytes,
                cpu_s,
                rss_mb,
            },
        )
}

fn any_budget() -> impl Strategy<Value = Budget> {
    (1u32..=80, 64u32..=4096, 0u64..100_000, 0.5f64..8.0).prop_map(
        |(ceiling, memory_mb, bandwidth_kbps, cpu_cores)| Budget {
            ceiling,
            memory_mb,
            bandwidth_kbps,
            cpu_cores,
        },
    )
}

proptest! {
    /// Whatever is measured, the concurrency stays within one and the cap:
    /// the ceiling, `MAX_SLOTS`, the memory budget, and what the bandwidth
    /// cap feeds at the rate measured.
    #[test]
    fn never_past_the_ceiling_memory_or_bandwidth_and_never_below_one(
        b in any_budget(),
        samples in proptest::collection::vec(any_sample(), 1..80),
    ) {
        let mut c = Controller::new(&b);
        prop_assert!(c.limit() >= 1 && c.limit() <= b.static_cap());
        for s in &samples {
            let (l, _) = c.step(s, &b);
            prop_assert_eq!(l, c.limit());
            prop_assert!(l >= 1);
            prop_assert!(l <= b.ceiling.max(1));
            prop_assert!(l <= MAX_SLOTS);
            prop_assert!(l <= (b.memory_mb / SCAN_MEMORY_MB).max(1));
        }
    }

    /// Measuring the same every step, it never runs more scans than the
    /// bandwidth cap feeds at the rate a scan draws.
    #[test]
    fn never_past_what_the_bandwidth_cap_feeds(
        b in any_budget(),
        s in any_sample(),
        steps in 1usize..40,
    ) {
        let mut c = Controller::new(&b);
        for _ in 0..steps {
            let (l, _) = c.step(&s, &b);
            prop_assert!(l <= Controller::cap(&b, &s), "{} > {}", l, Controller::cap(&b, &s));
        }
    }

    /// A step grows by at most `GROWTH` (or one slot), and a step up comes
    /// only with enough pages judged.
    #[test]
    fn growth_is_gradual_and_judged(
        b in any_budget(),
        samples in proptest::collection::vec(any_sample(), 1..80),
    ) {
        let mut c = Controller::new(&b);
        for s in &samples {
            let before = c.limit();
            let (l, why) = c.step(s, &b);
            if l > before {
                prop_assert!(
                    f64::from(l) <= (f64::from(before) * GROWTH).floor().max(f64::from(before + 1)),
                    "{} -> {}", before, l
                );
                prop_assert!(matches!(why, Reason::Grew | Reason::Undone));
            }
        }
    }
}

/// What a politeness-bound run at 30 sites learned.
fn learned_at(sites: u32) -> Learned {
    Learned {
        sites_at_once: sites,
        pages_per_slot_s: 0.9,
        cpu_s_per_page: Some(0.000_5),
    }
}

#[test]
fn a_run_starts_where_the_last_one_left_off_within_todays_budget() {
    let b = budget(64);
    let mut c = Controller::resume(&b, Some(&learned_at(30)));
    assert_eq!(c.limit(), 30, "no ramp from four again");
    // Nothing learned, or figures no run could have measured: the start.
    assert_eq!(Controller::resume(&b, None).limit(), START_SLOTS);
    for bad in [
        Learned {
            sites_at_once: 0,
            ..learned_at(30)
        },
        Learned {
            sites_at_once: MAX_SLOTS + 1,
            ..learned_at(30)
        },
        Learned {
            pages_per_slot_s: f64::NAN,
            ..learned_at(30)
        },
        Learned {
            cpu_s_per_page: Some(-1.0),
            ..learned_at(30)
        },
    ] {
        assert!(!bad.is_plausible(), "{bad:?}");
        assert_eq!(Controller::resume(&b, Some(&bad)).limit(), START_SLOTS);
    }
    // A lower ceiling or memory budget today: within it.
    assert_eq!(
        Controller::resume(&budget(8), Some(&learned_at(30))).limit(),
        8
    );
    // A smaller CPU budget today (2% of a core): as many scans as its hold
    // line fits at the CPU a page took (0.5 ms x 0.9 pages/s a scan), never
    // below the start.
    let small = Budget {
        cpu_cores: 0.02,
        ..b
    };
    let fit = (CPU_HOLD_SHARE * 0.02 / (0.000_5 * 0.9)).floor() as u32;
    assert_eq!(
        Controller::resume(&small, Some(&learned_at(60))).limit(),
        fit
    );
    let heavy = Learned {
        cpu_s_per_page: Some(0.05),
        ..learned_at(60)
    };
    assert_eq!(
        Controller::resume(&small, Some(&heavy)).limit(),
        START_SLOTS
    );
    // What it keeps for the next run follows its steps.
    let steps = run(&mut c, &b, 3, |l| polite(l, 0.1, 1000.0));
    let kept = c.learned().expect("judged");
    assert_eq!(kept.sites_at_once, *steps.last().unwrap());
    assert!((kept.pages_per_slot_s - 1.0 / 1.1).abs() < 0.01, "{kept:?}");
    assert_eq!(kept.cpu_s_per_page, Some(0.001));
    assert!(
        Controller::new(&b).learned().is_none(),
        "nothing judged yet"
    );
}

/// A level is kept for the next run once it paid: during a growth step
/// not judged yet the level before it is kept, and a step undone leaves it.
#[test]
fn a_probe_not_judged_yet_is_not_kept_for_the_next_run() {
    let b = budget(64);
    let mut c = Controller::resume(&b, Some(&learned_at(20)));
    assert_eq!(c.limit(), 20);
    let (probe, why) = c.step(&polite(20, 0.1, 1000.0), &b);
    assert_eq!((probe, why), (30, Reason::Grew));
    assert_eq!(c.learned().map(|l| l.sites_at_once), Some(20));
    // Saturated at 18 pages/s: the probe did not pay.
    let (back, why) = c.step(&polite(probe, 0.1, 18.0), &b);
    assert_eq!((back, why), (20, Reason::Undone));
    // Nothing new to keep until the next judged step: the file keeps 20.
    assert_eq!(c.learned(), None);
    let (held, _) = c.step(&polite(back, 0.1, 18.0), &b);
    assert_eq!(held, 20);
    assert_eq!(c.learned().map(|l| l.sites_at_once), Some(20));
}
