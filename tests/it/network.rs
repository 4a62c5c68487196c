//! Network trouble against the real server: a server that restarts under open
//! connections, connections lost mid-upload, and idempotent answers.

use std::time::{Duration, Instant};

use beebot_client::home::Home;
use beebot_client::net::{Link, NetError, ServerId};
use beebot_shared::proto::Request;
use beebot_tests::*;

fn invite(g: &Grid, uses: u32) -> String {
    last_line(&g.admin_ok(&["invite", "--uses", &uses.to_string()]))
}

fn join_ok(g: &Grid, name: &str, code: &str) -> (ServerId, u64, ed25519_dalek::SigningKey) {
    // Hosts on one machine need names of their own (the default is the
    // machine's name, and an enrolled host's name is not taken twice).
    let o = g.client(name, &["join", code, "--name", name]);
    assert!(o.status.success(), "join {name}: {}", stderr(&o));
    let home = Home {
        config: g.home(name),
        data: g.home(name),
    };
    let e = home.identity().require_enrolment().expect("enrolment");
    let key = home.identity().host_key(false).expect("key");
    (
        ServerId {
            addr: e.server_addr.clone(),
            server_name: e.server_name.clone(),
            cert_sha256: e.cert_fingerprint().expect("fingerprint"),
        },
        e.host_id,
        key,
    )
}

#[test]
fn a_restarted_server_resets_old_connections_at_once() {
    let mut g = Grid::start(3, 2);
    let (server, host, key) = join_ok(&g, "a", &invite(&g, 1));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let link = rt.block_on(async {
        let link = Link::connect(&server).await.expect("connect");
        link.hello(host, &key).await.expect("hello");
        link
    });
    g.kill_server();
    g.start_server();
    let asked = Instant::now();
    let r = rt.block_on(link.request(&Request::RequestWork {
        want_seconds: 10,
        free_slots: 1,
        units_held: vec![],
        open_windows: None,
    }));
    assert!(
        matches!(r, Err(NetError::Lost(_))),
        "the old connection is gone: {r:?}"
    );
    // Not the idle timeout (20 s): the new server's stateless reset ended it.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "connection loss noticed after {:?}",
        asked.elapsed()
    );
}
