//! One `beebot run` a home: an exclusive advisory lock on `DATA/run.lock`
//! and the runner's pid beside it.

use std::fs;
use std::path::{Path, PathBuf};

/// Why `beebot run` could not take the home.
#[derive(Debug, thiserror::Error)]
pub enum RunLockError {
    #[error(
        "another `beebot run` ({}) is already running with this home ({}): stop it first, or use another --home",
        .pid.map(|p| format!("pid {p}")).unwrap_or_else(|| "pid unknown".into()),
        .home.display()
    )]
    Held { pid: Option<u32>, home: PathBuf },
    #[error("cannot lock {}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The home held by one `beebot run`: an exclusive advisory lock (`flock` on
/// Unix, `LockFileEx` on Windows) on `DATA/run.lock`, and its pid in
/// `DATA/run.pid` for other processes to find it. The pid is a file apart
/// because Windows lets no other process read a range another holds
/// locked. The operating system drops the lock when the process ends,
/// however it ends, so a lock left by a killed runner (its pid file still
/// there) is taken over by the next. The lock file itself is never removed
/// (removing it while another runner opens it would let two lock different
/// files); on drop the pid file goes, then the lock.
#[derive(Debug)]
pub struct RunLock {
    /// Held open for the lock; dropped after the pid file is removed.
    _lock: fs::File,
    pid_path: PathBuf,
    /// The pid a runner that died left behind, if one did.
    pub stale_pid: Option<u32>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.pid_path);
    }
}

/// The runner's pid beside its lock.
pub const RUN_PID_FILE: &str = "run.pid";

/// The pid in a file of the home, if it holds one.
fn pid_in(path: &Path) -> Option<u32> {
    use std::io::Read;
    let mut text = String::new();
    Read::take(fs::File::open(path).ok()?, 64)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

/// The pid recorded for the home's runner: `run.pid`, else the lock file
/// itself, where runners before `run.pid` wrote it.
fn recorded_pid(data: &Path) -> Option<u32> {
    pid_in(&data.join(RUN_PID_FILE)).or_else(|| pid_in(&data.join(RUN_LOCK_FILE)))
}

/// Tries of the run lock before another holder is reported, and the wait
/// between them.
const LOCK_RETRIES: usize = 3;
const LOCK_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(30);

/// The pid of the `beebot run` holding the home at `data`, if one does.
/// Only looks: the lock file is neither taken over nor changed (a dead
/// runner's pid stays for the next runner to report).
pub fn runner_pid(data: &Path) -> Option<u32> {
    use fs2::FileExt;
    let file = fs::File::open(data.join(RUN_LOCK_FILE)).ok()?;
    match FileExt::try_lock_shared(&file) {
        // Nobody holds it exclusively: no runner.
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            None
        }
        Err(_) => recorded_pid(data),
    }
}

/// The lock file in the data dir.
pub const RUN_LOCK_FILE: &str = "run.lock";

/// Take the home whose data dir is `data` for `beebot run`, or say which
/// process holds it; `dirs` (the home's) are made private on the way.
pub fn lock(data: &Path, dirs: [&Path; 2]) -> Result<RunLock, RunLockError> {
    use fs2::FileExt;
    let path = data.join(RUN_LOCK_FILE);
    let io = |source| RunLockError::Io {
        path: path.clone(),
        source,
    };
    beebot_shared::util::create_private_dir(data).map_err(io)?;
    // A home an older version made readable by others is made private.
    for dir in dirs {
        if dir.is_dir() {
            beebot_shared::util::make_dir_private(dir).map_err(io)?;
        }
    }
    let mut opts = fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let file = opts.open(&path).map_err(io)?;
    let contended = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::WouldBlock
            || e.raw_os_error() == fs2::lock_contended_error().raw_os_error()
    };
    let mut locked = FileExt::try_lock_exclusive(&file);
    // A command that only looks ([`runner_pid`]) holds a shared lock for
    // a moment: try again before saying another runner holds the home.
    for _ in 0..LOCK_RETRIES {
        match &locked {
            Err(e) if contended(e) => {
                std::thread::sleep(LOCK_RETRY_WAIT);
                locked = FileExt::try_lock_exclusive(&file);
            }
            _ => break,
        }
    }
    if let Err(e) = locked {
        if !contended(&e) {
            return Err(io(e));
        }
        // The holder writes its pid right after locking: give it a moment.
        let mut pid = recorded_pid(data);
        if pid.is_none() {
            std::thread::sleep(std::time::Duration::from_millis(200));
            pid = recorded_pid(data);
        }
        return Err(RunLockError::Held {
            pid,
            home: data.to_path_buf(),
        });
    }
    let stale_pid = recorded_pid(data).filter(|p| *p != std::process::id());
    // What a runner before `run.pid` left in the lock file goes.
    file.set_len(0).map_err(io)?;
    let pid_path = data.join(RUN_PID_FILE);
    let pid_io = |source| RunLockError::Io {
        path: pid_path.clone(),
        source,
    };
    beebot_shared::durable::write_with(
        &pid_path,
        format!("{}\n", std::process::id()).as_bytes(),
        beebot_shared::durable::Access::Private,
    )
    .map_err(pid_io)?;
    Ok(RunLock {
        _lock: file,
        pid_path,
        stale_pid,
    })
}
