//! The guides' commands as written: the ```` ```sh walk ```` blocks of the
//! admin guide (a first round with one test desktop) and then of the
//! employee guide, taken from the pages (not copied here) and run in one
//! shell against a synthetic web on loopback. Only the fixed loopback
//! ports of the admin's `init` are swapped for free ones, so runs side by
//! side do not meet.

use std::collections::BTreeSet;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use beebot_testkit::synth::SynthWeb;
use beebot_testkit::web::SynthWebServer;
use beebot_tests::*;

/// The fenced blocks of `page` whose info string is `sh walk`, in order.
fn walk_blocks(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(page))
        .expect("the guide");
    let mut blocks = vec![];
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh walk" {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(body.join("\n"));
        }
    }
    blocks
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free TCP port")
        .port()
}

#[test]
fn the_admin_and_employee_guides_walk_as_written() {
    let admin = walk_blocks("docs/admin.md");
    let employee = walk_blocks("docs/employee.md");
    assert_eq!(admin.len(), 1, "the admin guide has one walk block");
    assert_eq!(employee.len(), 1, "the employee guide has one walk block");
    // Whatever ends the walk (a failure, the timeout's TERM), the server
    // and the client it started in the background go with it.
    let script = format!(
        "trap 'kill $(jobs -p) 2>/dev/null' EXIT TERM INT\n{}\n{}\n",
        admin[0], employee[0]
    )
    .replace("127.0.0.1:4433", &format!("127.0.0.1:{}", free_udp_port()))
    .replace("127.0.0.1:4480", &format!("127.0.0.1:{}", free_tcp_port()));

    let web = Arc::new(SynthWeb::generate(81, 3));
    let server = SynthWebServer::start(web.clone()).expect("synthetic web");
    let dir = tempfile::tempdir().expect("tempdir");
    let sites: String = web
        .site_hosts()
        .iter()
        .map(|h| format!("http://{h}/\n"))
        .collect();
    std::fs::write(dir.path().join("sites.txt"), sites).expect("sites.txt");
    let data = dir.path().join("server");
    let bins = bin("beebot-server");
    bin("beebot");
    let path = format!(
        "{}:{}",
        bins.parent().expect("bin dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = run(
        Command::new("timeout")
            .args(["300", "bash", "-euo", "pipefail", "-c", &script])
            .current_dir(dir.path())
            .env("PATH", path)
            .env("BEEBOT_SERVER_DIR", &data)
            .env("DESK", dir.path().join("desk"))
            .env("BEEBOT_ALLOW_PRIVATE", "true")
            .env("BEEBOT_RESOLVE", format!("*.synth.test={}", server.addr()))
            .env("BEEBOT_CPU_PERCENT", LAB_CPU_PERCENT),
        Duration::from_secs(600),
    );
    // The server the admin started goes, whatever the walk did.
    if let Some(rt) = beebot_server::config::DataDir(data.clone()).load_runtime() {
        let _ = Command::new("kill").arg(rt.pid.to_string()).status();
    }
    assert!(
        o.status.success(),
        "the walk failed:\n{script}\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        stdout(&o),
        stderr(&o),
        std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
    );
    // The admin's export holds the synthetic web's links.
    let export = std::fs::read_to_string(dir.path().join("links.tsv")).expect("links.tsv");
    let sites_seen: BTreeSet<&str> = export
        .lines()
        .skip(1)
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(sites_seen.len(), 3, "{export}");
    // The employee joined again and set the hours the guide sets.
    let shown = stdout(&o);
    assert!(shown.contains("window"), "{shown}");
}
