//! Tests of `status`.

use crate::grid::testkit::*;

#[test]
fn status_right_after_a_round_counts_that_rounds_jobs() {
    let (mut fx, round) = Fx::with_round(2, 3);
    assert_eq!(fx.grid.status().jobs_queued, 2);
    fx.grid.cancel_round(round, T0 + 1).unwrap();
    let s = fx.grid.status();
    assert_eq!(s.rounds_running, 0);
    assert_eq!(s.jobs_rounds, vec![round]);
    assert_eq!(s.jobs_cancelled, 2);
    assert_eq!(
        s.jobs_queued + s.jobs_running + s.jobs_done + s.jobs_failed,
        0
    );
}
