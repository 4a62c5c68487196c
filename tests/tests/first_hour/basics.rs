//! Items that lost work in the first hour and now refuse it: a host that
//! takes units and drops them (the broken host of the damaged invite code)
//! never takes a job past its attempt limit.

use beebot_shared::proto::{Request, Response};
use beebot_shared::sign;
use beebot_tests::hostile::join_raw;
use beebot_tests::*;

/// The attempt limit the rounds of this test run with.
const MAX_ATTEMPTS: u32 = 3;

/// Work requests the dropping host makes: well past the limit.
const REQUESTS: usize = 12;

/// A host that asks for work and then lists none of it as held (it dropped
/// every unit: a refused signature, a lost spool) fails the job at its
/// attempt limit, every attempt named released; no job gets a unit past the
/// limit. At a politeness delay and without one.
#[test]
fn a_host_that_drops_its_units_never_takes_a_job_past_its_attempt_limit() {
    for delay_ms in ["1000", "0"] {
        let g = Grid::start(74, 1);
        let code = g.invite(1);
        let dropper = join_raw(&g, "dropper", &code);
        g.import_sites();
        let round = last_line(&g.admin_ok(&[
            "round",
            "start",
            "--delay-ms",
            delay_ms,
            "--max-attempts",
            &MAX_ATTEMPTS.to_string(),
        ]));
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let units = rt.block_on(async {
            let link = dropper.hello().await.expect("hello");
            let mut units = Vec::new();
            for _ in 0..REQUESTS {
                let req = Request::RequestWork {
                    want_seconds: 60,
                    free_slots: 1,
                    units_held: vec![],
                    open_windows: None,
                };
                match link.request(&req).await {
                    Ok(Response::Work { units: got, .. }) => {
                        for s in got {
                            let u = sign::verify_unit(&dropper.project_key, &s).expect("signed");
                            units.push(u.unit_id);
                        }
                    }
                    other => panic!("work request: {other:?}"),
                }
            }
            link.close();
            units
        });
        assert_eq!(
            units.len(),
            MAX_ATTEMPTS as usize,
            "delay {delay_ms}: units issued for the one job: {units:?}"
        );
        let detail = g.round_json(&round);
        let site = &detail["sites"][0];
        assert_eq!(site["state"], "Failed", "delay {delay_ms}: {site}");
        assert_eq!(site["attempts"], MAX_ATTEMPTS, "delay {delay_ms}: {site}");
        let attempts = detail["jobs"][0]["attempts"].as_array().expect("attempts");
        assert!(
            attempts.iter().all(|a| a["state"] == "Released"),
            "delay {delay_ms}: {attempts:?}"
        );
        let over = last_line(&g.admin(&["round", "wait", &round, "--timeout", "10s"]));
        assert!(over.contains("INCOMPLETE"), "delay {delay_ms}: {over}");
    }
}
