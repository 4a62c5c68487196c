//! Invites end to end: `invite list` shows each invite without its code,
//! `invite revoke` stops it from being used, and `beebot join` takes the code
//! from stdin or `BEEBOT_INVITE`, so it need not be on a command line.

use std::fs::File;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use beebot_shared::invite::Invite;
use beebot_shared::util::sha256;
use beebot_tests::*;

fn run_cmd(c: &mut Command) -> Output {
    run(c, Duration::from_secs(300))
}

/// The rows of `invite list` (its header checked).
fn invite_rows(g: &Grid) -> (String, Vec<Vec<String>>) {
    let text = stdout(&g.admin_ok(&["invite", "list"]));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id\tuses left\texpires\tcreated"));
    let rows = lines
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    (text, rows)
}

#[test]
fn invites_are_listed_without_their_codes_and_a_revoked_one_cannot_join() {
    let g = Grid::start(1, 1);
    let code_a = g.invite(2);
    let code_b = g.invite(1);
    let (text, rows) = invite_rows(&g);
    assert_eq!(rows.len(), 2, "{text}");
    let inv_a = Invite::from_code(&code_a).expect("code a");
    let id_a = hex::encode(&sha256(&inv_a.token)[..8]);
    let row_a = rows.iter().find(|r| r[0] == id_a).expect("invite a listed");
    assert_eq!(row_a[1], "2", "uses left");
    assert!(row_a[2].starts_with("in "), "expiry: {}", row_a[2]);
    assert!(row_a[3].ends_with("s ago"), "created: {}", row_a[3]);
    // Never the code nor the token, in any form.
    for code in [&code_a, &code_b] {
        let token = Invite::from_code(code).expect("code").token;
        assert!(!text.contains(code.as_str()));
        assert!(!text.contains(&hex::encode(&token)));
        assert!(!text.contains(&code["beebot2-".len()..][..24]));
    }

    // Revoked by a prefix of its id: joining with it fails, and it is gone.
    let o = g.admin_ok(&["invite", "revoke", &id_a[..8]]);
    assert!(stdout(&o).contains(&id_a), "{}", stdout(&o));
    let o = g.client("a", &["join", &code_a]);
    assert!(!o.status.success(), "joined with a revoked invite");
    assert!(
        stderr(&o).contains("invite is unknown, expired or used up"),
        "{}",
        stderr(&o)
    );
    let (_, rows) = invite_rows(&g);
    assert_eq!(rows.len(), 1);
    assert_ne!(rows[0][0], id_a);
    // An id that names no invite, or is not one: one clear error line.
    for bad in [&id_a[..], "not-hex!"] {
        let o = g.admin(&["invite", "revoke", bad]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).lines().any(|l| l.starts_with("error: ")),
            "{}",
            stderr(&o)
        );
    }
    // The other invite still works.
    g.join("b", &code_b);
}

#[test]
fn join_takes_the_code_from_stdin_or_the_environment() {
    let g = Grid::start(1, 1);
    let code = g.invite(3);
    let path = g.dir.path().join("invite.txt");
    std::fs::write(&path, format!("\n{code}\n")).expect("write code");
    let joined = |o: &Output, how: &str| {
        assert!(o.status.success(), "join {how}: {}", stderr(o));
        assert!(stdout(o).contains(" as host "), "join {how}: {}", stdout(o));
    };

    // `beebot join -`: from stdin.
    let mut c = g.client_cmd("dash", &["join", "-", "--name", "dash"]);
    c.env_remove("BEEBOT_INVITE")
        .stdin(File::open(&path).expect("code file"));
    joined(&run_cmd(&mut c), "-");
    // No code, stdin not a terminal: from stdin.
    let mut c = g.client_cmd("piped", &["join", "--name", "piped"]);
    c.env_remove("BEEBOT_INVITE")
        .stdin(File::open(&path).expect("code file"));
    joined(&run_cmd(&mut c), "from a pipe");
    // From the environment.
    let mut c = g.client_cmd("env", &["join", "--name", "env"]);
    c.env("BEEBOT_INVITE", &code).stdin(Stdio::null());
    joined(&run_cmd(&mut c), "from BEEBOT_INVITE");
    // Nothing anywhere: a clear error.
    let mut c = g.client_cmd("none", &["join"]);
    c.env_remove("BEEBOT_INVITE").stdin(Stdio::null());
    let o = run_cmd(&mut c);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no invite code"), "{}", stderr(&o));

    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    for name in ["dash", "piped", "env"] {
        assert!(hosts.contains(&format!("\t{name}\t")), "{hosts}");
    }
    assert!(!hosts.contains("\tnone\t"));
}

/// A second desktop (or user) with the same machine name joins under a
/// suffixed name instead of failing: a silent install is never a dead
/// end. A taken name spends no use of the invite.
#[test]
fn a_name_already_taken_gets_a_suffix_and_spends_nothing() {
    let g = Grid::start(2, 1);
    let code = g.invite(3);
    let mut said = vec![];
    for (home, name_flag) in [("a", None), ("b", None), ("c", Some("DESK"))] {
        let mut args = vec!["join", code.as_str()];
        if let Some(n) = name_flag {
            args.extend(["--name", n]);
        }
        let o = run_cmd(g.client_cmd(home, &args).env("HOSTNAME", "desk"));
        assert!(o.status.success(), "join {home}: {}", stderr(&o));
        said.push(stdout(&o));
    }
    assert!(said[0].contains("(desk)\n"), "{said:?}");
    assert!(said[1].contains("(desk-2)\n"), "{said:?}");
    assert!(said[2].contains("(DESK-3)\n"), "{said:?}");
    let hosts = stdout(&g.admin_ok(&["hosts", "list"]));
    for name in ["\tdesk\t", "\tdesk-2\t", "\tDESK-3\t"] {
        assert!(hosts.contains(name), "{name} in {hosts}");
    }
    // Three joins took three uses, not five.
    let (text, rows) = invite_rows(&g);
    assert!(
        rows.is_empty() || rows.iter().all(|r| r[1] == "0"),
        "{text}"
    );
}
