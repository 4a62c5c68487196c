//! The admin API's client and server against leaks of the admin token: an
//! admin CLI that never sends its token through a proxy.

use std::io::Read;
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use beebot_tests::*;

#[test]
fn the_admin_cli_ignores_proxy_settings_and_keeps_its_token_local() {
    let g = Grid::start(73, 1);
    let proxy = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
    let proxy_addr = proxy.local_addr().expect("addr");
    let received = Arc::new(AtomicUsize::new(0));
    {
        let received = received.clone();
        std::thread::spawn(move || {
            for mut conn in proxy.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).unwrap_or(0);
                received.fetch_add(n.max(1), Ordering::SeqCst);
                // Closed at once: a CLI that went through the proxy fails.
            }
        });
    }
    let url = format!("http://{proxy_addr}");
    for args in [
        &["status"][..],
        &["sites", "list"][..],
        &["invite", "--uses", "1"][..],
    ] {
        let o = run(
            Command::new(bin("beebot-server"))
                .args(args)
                .arg("--data-dir")
                .arg(g.data_dir())
                .env("HTTP_PROXY", &url)
                .env("http_proxy", &url)
                .env("ALL_PROXY", &url)
                .env("all_proxy", &url)
                .env("HTTPS_PROXY", &url)
                .env_remove("NO_PROXY")
                .env_remove("no_proxy"),
            Duration::from_secs(60),
        );
        assert!(
            o.status.success(),
            "{args:?} under a proxy setting: {}",
            stderr(&o)
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        received.load(Ordering::SeqCst),
        0,
        "the proxy heard from the CLI"
    );
}
