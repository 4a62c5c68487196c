use super::days::{MAX_DAYS_FILE_BYTES, *};
use super::identity::MAX_ENROLMENT_FILE_BYTES;
use super::spool::{MAX_PARTS_SENT_BYTES, MAX_SUMMARY_FILE_BYTES};
use super::*;
use crate::checkpoint::Checkpoint;
use crate::recordlog::LogMark;
use beebot_shared::linkfile::ScanSummary;
use beebot_shared::scope::Scope;
use beebot_shared::sign::UnitLimits;
use beebot_shared::sign::{self, WorkUnit};
use proptest::prelude::*;

/// Cases per property in CI.
const CASES: u32 = 64;

fn home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = Home {
        config: dir.path().to_path_buf(),
        data: dir.path().to_path_buf(),
    };
    (dir, h)
}

/// A spool file longer than its kind may be is refused by name, and
/// one at the limit is read.
#[test]
fn spool_files_longer_than_their_limit_are_refused_by_name() {
    let (_d, h) = home();
    fs::create_dir_all(h.spool().units_dir()).unwrap();
    fs::create_dir_all(h.spool().results_dir()).unwrap();
    let pad = |json: &str, len: usize| {
        let mut t = json.to_string();
        t.push_str(&" ".repeat(len - json.len()));
        t
    };
    // What the server holds of a scan.
    let sent = serde_json::to_string(&PartsSent::default()).unwrap();
    let path = h.spool().parts_sent_path(7);
    fs::write(&path, pad(&sent, MAX_PARTS_SENT_BYTES)).unwrap();
    assert_eq!(h.spool().parts_sent(7).unwrap(), PartsSent::default());
    fs::write(&path, pad(&sent, MAX_PARTS_SENT_BYTES + 1)).unwrap();
    let e = h.spool().parts_sent(7).unwrap_err().to_string();
    assert!(e.contains("larger than the record may be"), "{e}");
    // A result's summary.
    let summary = serde_json::to_string(&ScanSummary::default()).unwrap();
    fs::write(h.spool().results_dir().join("8.lf"), b"").unwrap();
    let spath = h.spool().results_dir().join("8.summary");
    fs::write(&spath, pad(&summary, MAX_SUMMARY_FILE_BYTES)).unwrap();
    assert!(h.spool().result(8).unwrap().is_some());
    fs::write(&spath, pad(&summary, MAX_SUMMARY_FILE_BYTES + 1)).unwrap();
    let e = format!("{:#}", h.spool().result(8).unwrap_err());
    assert!(
        e.contains("8.summary is larger than a summary may be"),
        "{e}"
    );
    // The day totals: shown as unreadable, not read whole.
    fs::write(h.days().path, pad("[]", MAX_DAYS_FILE_BYTES + 1)).unwrap();
    let e = h.days().read_days().unwrap().unwrap_err();
    assert!(e.contains("larger than a days file may be"), "{e}");
    // The enrolment.
    fs::write(
        h.identity().enrolment,
        pad("{}", MAX_ENROLMENT_FILE_BYTES + 1),
    )
    .unwrap();
    let e = format!("{:#}", h.identity().enrolment().unwrap_err());
    assert!(e.contains("larger than an enrolment may be"), "{e}");
}

#[test]
fn a_part_is_spooled_until_answered_and_what_the_server_holds_is_kept() {
    let (_d, h) = home();
    fs::create_dir_all(h.spool().units_dir()).unwrap();
    fs::create_dir_all(h.spool().results_dir()).unwrap();
    assert_eq!(h.spool().parts_sent(7).unwrap(), PartsSent::default());
    assert!(h.spool().part(7).is_none() && !h.spool().has_part(7));
    let part = SpooledPart {
        unit_id: 7,
        index: 0,
        mark: LogMark {
            records: 4,
            bytes: 100,
        },
        total: ScanSummary {
            pages: 9,
            ..ScanSummary::default()
        },
        summary: ScanSummary {
            pages: 9,
            links: 4,
            ..ScanSummary::default()
        },
        link_file: vec![1, 2, 3],
        state: vec![4, 5],
    };
    h.spool().save_part(&part).unwrap();
    assert!(h.spool().has_part(7));
    assert_eq!(h.spool().part(7).as_ref(), Some(&part));
    let sent = h.spool().part_accepted(&part).unwrap();
    assert_eq!(
        (sent.count, sent.mark.records, sent.summary.pages),
        (1, 4, 9)
    );
    assert!(
        h.spool().part(7).is_none(),
        "an answered part leaves the spool"
    );
    assert_eq!(h.spool().parts_sent(7).unwrap(), sent);
    // A damaged spooled part is dropped (taken again from the
    // checkpoint); a damaged record of what the server holds is an error.
    fs::write(h.spool().part_path(7), b"junk").unwrap();
    assert!(h.spool().part(7).is_none() && !h.spool().has_part(7));
    fs::write(h.spool().parts_sent_path(7), b"{").unwrap();
    assert!(format!("{:#}", h.spool().parts_sent(7).unwrap_err()).contains("damaged"));
    // One past its bound is not read whole.
    fs::write(h.spool().parts_sent_path(7), vec![b' '; 64 * 1024 + 1]).unwrap();
    assert!(format!("{:#}", h.spool().parts_sent(7).unwrap_err()).contains("larger"));
    // Both are the unit's: they go with it.
    h.spool().save_part(&part).unwrap();
    h.spool().remove_unit(7);
    assert!(!h.spool().has_part(7) && !h.spool().parts_sent_path(7).exists());
}

#[test]
fn an_unreadable_days_file_is_kept_aside_not_overwritten() {
    let (_d, h) = home();
    fs::create_dir_all(h.days().path.parent().unwrap()).unwrap();
    let garbage = b"[{\"date\": \"2026-11-30\", \"results\": 4,";
    fs::write(h.days().path, garbage).unwrap();
    assert!(
        h.days().all().is_empty(),
        "nothing to show while unreadable"
    );
    let d = h.days().add_to_today("2026-12-01", 3, 30).unwrap();
    assert_eq!((d.results, d.pages, d.links), (1, 3, 30));
    let kept = |h: &Home| -> Vec<Vec<u8>> {
        let mut names: Vec<PathBuf> = fs::read_dir(h.days().path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("days.json.unreadable-"))
            .collect();
        names.sort();
        names.iter().map(|p| fs::read(p).unwrap()).collect()
    };
    assert_eq!(kept(&h), vec![garbage.to_vec()], "the old bytes, whole");
    assert_eq!(h.days().all(), vec![d.clone()], "the days start again");
    // The next result adds to them, and leaves the kept file alone.
    h.days().add_to_today("2026-12-01", 1, 0).unwrap();
    assert_eq!(h.days().all()[0].results, 2);
    // A second bad file is kept beside the first, not over it.
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs::write(h.days().path, b"not json").unwrap();
    h.days().add_to_today("2026-12-02", 1, 0).unwrap();
    let mut both = kept(&h);
    both.sort();
    assert_eq!(both, vec![garbage.to_vec(), b"not json".to_vec()]);
}

#[test]
fn a_days_file_that_cannot_be_read_now_is_left_where_it_is() {
    let (_d, h) = home();
    // A directory where the file should be: reading fails, not parsing.
    fs::create_dir_all(h.days().path).unwrap();
    let err = h.days().add_to_today("2026-12-01", 1, 1).unwrap_err();
    assert!(format!("{err:#}").contains("cannot read"), "{err:#}");
    assert!(h.days().path.is_dir(), "left as it was");
    assert!(h.days().all().is_empty());
}

#[test]
fn the_week_sums_the_last_seven_days_kept() {
    let (_d, h) = home();
    std::fs::create_dir_all(h.data.join("spool")).unwrap();
    for (date, pages) in [
        ("2026-11-20", 1000),
        ("2026-11-25", 10),
        ("2026-11-30", 20),
        ("2026-12-01", 30),
    ] {
        h.days().add_to_today(date, pages, pages * 10).unwrap();
    }
    h.days().add_to_today("2026-12-01", 5, 0).unwrap();
    assert_eq!(h.days().today("2026-12-01").pages, 35);
    let (today, w) = h.days().today_and_week("2026-12-01");
    assert_eq!(today, h.days().today("2026-12-01"));
    assert_eq!((w.date.as_str(), w.results, w.pages), ("2026-11-25", 4, 65));
    assert_eq!(w.links, 600);
    // Bounded: the oldest days go first.
    for day in 1..=(DAYS_KEPT as u32 + 3) {
        h.days()
            .add_to_today(&format!("2027-01-{day:02}"), 1, 1)
            .unwrap();
    }
    let days = h.days().all();
    assert_eq!(days.len(), DAYS_KEPT);
    // A clock set back behind every day kept: today's count still adds up.
    h.days().add_to_today("2026-01-01", 2, 0).unwrap();
    h.days().add_to_today("2026-01-01", 3, 0).unwrap();
    assert_eq!(h.days().today("2026-01-01").pages, 5);
    assert_eq!(h.days().all().len(), DAYS_KEPT);
    assert_eq!(
        days.last().unwrap().date,
        format!("2027-01-{:02}", DAYS_KEPT + 3)
    );
}

#[test]
fn a_deployment_invite_comes_from_the_environment_or_its_file() {
    let (d, _h) = home();
    let dir = d.path().join("etc");
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("invite");
    assert_eq!(deployment_invite(None, Some(&file)), None, "no file");
    std::fs::write(&file, "\n  beebot2-file \r\nmore\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        mode(&dir, 0o755);
        mode(&file, 0o666);
        assert_eq!(
            deployment_invite(None, Some(&file)),
            None,
            "others may write it"
        );
        mode(&file, 0o644);
        mode(&dir, 0o777);
        assert_eq!(
            deployment_invite(None, Some(&file)),
            None,
            "others may replace it"
        );
        mode(&dir, 0o755);
        if !is_root() {
            assert_eq!(deployment_invite(None, Some(&file)), None, "not root's");
            return;
        }
    }
    assert_eq!(
        deployment_invite(None, Some(&file)).as_deref(),
        Some("beebot2-file")
    );
    assert_eq!(
        deployment_invite(Some(" beebot2-env\n".into()), Some(&file)).as_deref(),
        Some("beebot2-env")
    );
    assert_eq!(
        deployment_invite(Some(String::new()), Some(&file)).as_deref(),
        Some("beebot2-file")
    );
    // What is read is bounded.
    std::fs::write(&file, "x".repeat(1 << 20)).unwrap();
    let long = deployment_invite(None, Some(&file)).unwrap();
    assert!(long.len() <= beebot_shared::invite::MAX_INVITE_CODE_LEN + 2);
}

/// Whether the tests run as root (files they make are root's).
#[cfg(unix)]
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::metadata(d.path()).unwrap().uid() == 0
}

/// An installer's code is read from this user's registry (the MSI's
/// machine-wide value comes first; under Wine in CI).
#[cfg(windows)]
#[test]
fn a_windows_installers_invite_is_read_from_the_registry() {
    use beebot_win32::registry::{delete_value, set_string, Root};
    if std::env::var_os("BEEBOT_INVITE").is_some() {
        return;
    }
    assert_eq!(installed_invite(), None);
    set_string(
        Root::CurrentUser,
        WINDOWS_INVITE_KEY,
        WINDOWS_INVITE_VALUE,
        "  \r\n",
    )
    .unwrap();
    assert_eq!(installed_invite(), None, "a blank value is none");
    set_string(
        Root::CurrentUser,
        WINDOWS_INVITE_KEY,
        WINDOWS_INVITE_VALUE,
        " beebot2-abc \r\n",
    )
    .unwrap();
    assert_eq!(installed_invite().as_deref(), Some("beebot2-abc"));
    assert!(has_deployment_invite());
    delete_value(Root::CurrentUser, WINDOWS_INVITE_KEY, WINDOWS_INVITE_VALUE).unwrap();
    assert_eq!(installed_invite(), None);
}

#[cfg(windows)]
#[test]
fn the_default_home_is_in_local_app_data() {
    let local = std::env::var_os("LOCALAPPDATA").expect("LOCALAPPDATA");
    let roaming = std::env::var_os("APPDATA").expect("APPDATA");
    let h = Home::resolve(None).unwrap();
    for dir in [&h.config, &h.data] {
        assert!(
            dir.starts_with(&local),
            "{} not under {local:?}",
            dir.display()
        );
        assert!(
            !dir.starts_with(&roaming),
            "{} under {roaming:?}",
            dir.display()
        );
    }
    assert_ne!(h.config, h.data);
}

#[cfg(target_os = "linux")]
#[test]
fn the_default_home_follows_xdg() {
    let h = Home::resolve(None).unwrap();
    let base = directories::BaseDirs::new().unwrap();
    assert!(h.config.starts_with(base.config_dir()));
    assert!(h.data.starts_with(base.data_dir()));
}

#[test]
fn looking_for_the_runner_changes_nothing() {
    let (_d, h) = home();
    assert_eq!(runner_pid(&h.data), None);
    // A dead runner's pid stays for the next runner to report.
    std::fs::write(h.data.join(RUN_PID_FILE), "4242\n").unwrap();
    std::fs::write(h.data.join("run.lock"), "").unwrap();
    assert_eq!(runner_pid(&h.data), None);
    assert_eq!(
        std::fs::read_to_string(h.data.join(RUN_PID_FILE)).unwrap(),
        "4242\n"
    );
    let lock = h.lock_runner().unwrap();
    assert_eq!(lock.stale_pid, Some(4242));
    assert_eq!(runner_pid(&h.data), Some(std::process::id()));
}

#[test]
fn a_home_that_left_remembers_it_until_it_joins_again() {
    let (_d, h) = home();
    assert!(!h.identity().has_left());
    h.identity().mark_left();
    assert!(h.identity().has_left());
    h.identity().clear_left();
    assert!(!h.identity().has_left());
}

fn unit(id: u64) -> WorkUnit {
    WorkUnit {
        unit_id: id,
        round_id: 1,
        job_id: 2,
        host_id: 3,
        site: "a.test".into(),
        seed_url: "http://a.test/".into(),
        scope: Scope::Host,
        limits: UnitLimits {
            max_pages: 1,
            max_depth: 1,
            delay_ms: 0,
            max_page_bytes: 1,
            max_seconds: 1,
            max_crawl_delay_ms: 1000,
        },
        issued_ms: 1,
        deadline_ms: 2,
        user_agent: "t".into(),
        resume: None,
        exclusions: Vec::new(),
    }
}

#[test]
fn one_runner_holds_the_home_and_a_dead_ones_lock_is_taken_over() {
    let (_d, h) = home();
    let lock = h.lock_runner().expect("first runner");
    assert_eq!(lock.stale_pid, None);
    // The pid is in a file of its own, readable while the lock is held
    // (Windows refuses reads of a locked range to other handles).
    let text = fs::read_to_string(h.data.join(RUN_PID_FILE)).unwrap();
    assert_eq!(text.trim(), std::process::id().to_string());
    assert_eq!(runner_pid(&h.data), Some(std::process::id()));
    // A second lock on another open file is refused and names the holder.
    let e = h.lock_runner().expect_err("second runner");
    assert!(
        matches!(e, RunLockError::Held { pid: Some(p), .. } if p == std::process::id()),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("pid {}", std::process::id())) && msg.contains("already running"),
        "{msg}"
    );
    // Released on drop, the pid file gone.
    drop(lock);
    assert!(!h.data.join(RUN_PID_FILE).exists());
    assert_eq!(runner_pid(&h.data), None);
    let lock = h.lock_runner().expect("after the first exits");
    assert_eq!(lock.stale_pid, None);
    drop(lock);
    // A runner killed leaves its pid but no lock: taken over.
    fs::write(h.data.join(RUN_PID_FILE), "4000000\n").unwrap();
    let lock = h.lock_runner().expect("stale lock");
    assert_eq!(lock.stale_pid, Some(4_000_000));
    drop(lock);
    // So does a runner from before `run.pid`, which wrote it in the lock.
    fs::write(h.data.join("run.lock"), "4000004\n").unwrap();
    let lock = h.lock_runner().expect("stale lock of an older runner");
    assert_eq!(lock.stale_pid, Some(4_000_004));
    assert_eq!(fs::read_to_string(h.data.join("run.lock")).unwrap(), "");
}

#[test]
fn units_signed_by_another_key_are_moved_aside() {
    let (_d, h) = home();
    let project = sign::generate_key();
    let stranger = sign::generate_key();
    for (id, key) in [(1, &project), (2, &stranger)] {
        let signed = sign::sign_unit(key, &unit(id)).expect("sign");
        h.spool()
            .spool_unit(&SpooledUnit {
                signed,
                unit: unit(id),
            })
            .expect("spool");
    }
    let (units, refused) = h
        .spool()
        .spooled_units(&project.verifying_key())
        .expect("read");
    assert_eq!(units.len(), 1);
    assert_eq!(units[0].unit.unit_id, 1);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("bad signature"), "{refused:?}");
    assert!(h.spool().units_dir().join("2.bad").exists());
}

#[cfg(unix)]
#[test]
fn a_host_key_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (_d, h) = home();
    h.identity().host_key(true).expect("made");
    let mode = fs::metadata(h.identity().key)
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    fs::set_permissions(h.identity().key, fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = h.identity().host_key(false).expect_err("refused");
    assert!(format!("{e:#}").contains("chmod 600"), "{e:#}");
    fs::set_permissions(h.identity().key, fs::Permissions::from_mode(0o600)).expect("chmod");
    assert!(h.identity().host_key(false).is_ok());
}

#[test]
fn a_failed_write_leaves_no_temporary_file() {
    let (d, _h) = home();
    // The target is a directory: writing the temporary file works, the
    // rename over a non-empty directory fails.
    let target = d.path().join("busy");
    fs::create_dir_all(target.join("inside")).expect("mkdir");
    assert!(write_atomic(&target, b"x", false).is_err());
    assert!(!target.with_extension("tmp").exists());
}

#[test]
fn a_write_makes_its_missing_directories_and_then_writes_beside_them() {
    let (d, _h) = home();
    let path = d.path().join("a/b/c.json");
    write_atomic(&path, b"one", false).expect("into missing directories");
    assert_eq!(fs::read(&path).expect("read"), b"one");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(d.path().join("a/b"))
            .expect("dir")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }
    write_atomic(&path, b"two", false).expect("over it");
    write_atomic(&path.with_file_name("d.json"), b"three", true).expect("beside it");
    assert_eq!(fs::read(&path).expect("read"), b"two");
    assert_eq!(
        fs::read(path.with_file_name("d.json")).expect("read"),
        b"three"
    );
    // A parent that is a file: refused, and the file is left as it was.
    let blocked = path.join("e.json");
    assert!(write_atomic(&blocked, b"x", false).is_err());
    assert_eq!(fs::read(&path).expect("still a file"), b"two");
    // A directory removed since is made again.
    fs::remove_dir_all(d.path().join("a")).expect("remove");
    write_atomic(&path, b"four", false).expect("made again");
    assert_eq!(fs::read(&path).expect("read"), b"four");
}

#[test]
fn checkpoints_results_and_deadlines_round_trip_through_the_spool() {
    use beebot_shared::extract::LinkTag;
    use beebot_shared::linkfile::LinkRecord;
    use beebot_shared::scanstate::{url_digest, QueuedUrl, ScanState};
    let (_d, h) = home();
    assert!(h.spool().checkpoint(9).expect("none").is_none());
    let c = Checkpoint {
        state: ScanState {
            site: "a.test".into(),
            pages_done: 2,
            queue: vec![QueuedUrl {
                url: "http://a.test/b".into(),
                depth: 1,
            }],
            seen: vec![url_digest("http://a.test/"), url_digest("http://a.test/b")],
            robots: Vec::new(),
        },
        records: vec![LinkRecord {
            source_url: "http://a.test/".into(),
            target_url: "http://c.test/".into(),
            tag: LinkTag::A,
            nofollow: true,
            anchor_text: "c".into(),
        }],
        summary: ScanSummary {
            pages: 2,
            links: 1,
            ..ScanSummary::default()
        },
    };
    h.spool().save_checkpoint(9, &c).expect("save");
    assert!(h.spool().has_checkpoint(9));
    let (read, mark) = h.spool().checkpoint(9).expect("read").expect("some");
    assert_eq!(read, c);
    assert_eq!(mark.records, 1);
    // A checkpoint of another unit under this name is refused, not used;
    // so is one whose records log is gone or shorter than it names.
    fs::copy(h.spool().checkpoint_path(9), h.spool().checkpoint_path(10)).expect("copy");
    fs::copy(
        h.spool().records_log_path(9),
        h.spool().records_log_path(10),
    )
    .expect("copy");
    assert!(h.spool().checkpoint(10).is_err());
    fs::copy(
        h.spool().records_log_path(9),
        h.spool().records_log_path(11),
    )
    .expect("copy");
    let log = fs::read(h.spool().records_log_path(9)).expect("log");
    fs::write(h.spool().records_log_path(9), &log[..log.len() - 1]).expect("cut");
    assert!(h.spool().checkpoint(9).is_err());
    fs::remove_file(h.spool().records_log_path(9)).expect("rm");
    assert!(h.spool().checkpoint(9).is_err());
    fs::rename(
        h.spool().records_log_path(11),
        h.spool().records_log_path(9),
    )
    .expect("back");
    assert_eq!(h.spool().checkpoint(9).expect("read").expect("some").0, c);
    // Saved whole again: the log is written anew, not appended to.
    h.spool().save_checkpoint(9, &c).expect("save");
    assert_eq!(
        h.spool().checkpoint(9).expect("read").expect("some"),
        (c.clone(), mark)
    );
    h.spool()
        .save_deadline(9, 1_700_000_000_123)
        .expect("deadline");
    assert_eq!(h.spool().deadline(9), Some(1_700_000_000_123));
    let r = SpooledResult {
        link_file: vec![1, 2, 3],
        summary: ScanSummary::default(),
        state: Some(vec![4, 5]),
    };
    h.spool().save_result(9, &r).expect("result");
    assert_eq!(h.spool().result(9).expect("read"), Some(r.clone()));
    let r2 = SpooledResult { state: None, ..r };
    h.spool().save_result(9, &r2).expect("result");
    assert_eq!(h.spool().result(9).expect("read"), Some(r2));
    h.spool().remove_unit(9);
    assert!(!h.spool().has_checkpoint(9));
    assert!(!h.spool().records_log_path(9).exists());
    assert_eq!(h.spool().deadline(9), None);
    assert!(h.spool().result(9).expect("read").is_none());
}

#[test]
fn leftovers_of_a_kill_are_swept_at_startup() {
    let (_d, h) = home();
    let key = sign::generate_key();
    let signed = sign::sign_unit(&key, &unit(4)).expect("sign");
    h.spool()
        .spool_unit(&SpooledUnit {
            signed,
            unit: unit(4),
        })
        .expect("spool");
    fs::create_dir_all(h.spool().scans_dir()).expect("mkdir");
    fs::create_dir_all(h.spool().results_dir()).expect("mkdir");
    let kept = [
        h.spool().units_dir().join("4.unit"),
        h.spool().scans_dir().join("4.ckpt"),
        h.spool().scans_dir().join("4.records"),
        h.spool().results_dir().join("4.lf"),
        h.spool().units_dir().join("4.deadline"),
        h.data.join("spool").join("days.json"),
    ];
    let swept = [
        // A checkpoint being written when the power went.
        h.spool().scans_dir().join("4.tmp"),
        h.spool().results_dir().join("9.tmp"),
        h.data.join("spool").join("days.tmp"),
        // A unit removed, its checkpoint and result not yet.
        h.spool().scans_dir().join("7.ckpt"),
        h.spool().scans_dir().join("7.records"),
        h.spool().results_dir().join("7.lf"),
        h.spool().results_dir().join("7.summary"),
        h.spool().results_dir().join("7.state"),
        h.spool().units_dir().join("7.deadline"),
    ];
    for p in kept.iter().chain(&swept) {
        if !p.exists() {
            fs::write(p, b"x").expect("write");
        }
    }
    let before = h.spool().spool_bytes();
    assert_eq!(h.spool().sweep_spool(), swept.len());
    for p in &kept {
        assert!(p.exists(), "{} kept", p.display());
    }
    for p in &swept {
        assert!(!p.exists(), "{} swept", p.display());
    }
    assert!(h.spool().spool_bytes() < before);
    assert_eq!(h.spool().sweep_spool(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_spool_files_are_refused_not_fatal(
        unit_bytes in proptest::collection::vec(any::<u8>(), 0..400),
        summary_bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let (_d, h) = home();
        let key = sign::generate_key();
        fs::create_dir_all(h.spool().units_dir()).expect("mkdir");
        fs::write(h.spool().units_dir().join("5.unit"), &unit_bytes).expect("write");
        let (units, refused) = h.spool().spooled_units(&key.verifying_key()).expect("read");
        prop_assert!(units.is_empty());
        prop_assert_eq!(refused.len(), 1);
        prop_assert!(h.spool().units_dir().join("5.bad").exists());
        fs::create_dir_all(h.spool().results_dir()).expect("mkdir");
        fs::write(h.spool().results_dir().join("5.summary"), &summary_bytes).expect("write");
        fs::write(h.spool().results_dir().join("5.lf"), &unit_bytes).expect("write");
        // A damaged summary is an error naming the file, never a panic.
        if let Err(e) = h.spool().result(5) {
            let msg = format!("{e:#}");
            prop_assert!(msg.contains("5.summary"), "{}", msg);
        }
    }
}
