//! DuckDB as an independent reader of what the grid writes: its Python
//! package from PyPI, pinned ([`DUCKDB_VERSION`]), installed once into a
//! virtualenv under `target/` ([`VENV_DIR`]) and reused by every test and
//! every run after.
//!
//! Where python3 (or its `venv` module) is missing the test fails naming
//! it, through [`crate::tool_missing`]; a failed install is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::{run, stderr, stdout};

/// The DuckDB release the tests read with.
pub const DUCKDB_VERSION: &str = "1.5.6";
/// The virtualenv's directory under the cargo target dir.
pub const VENV_DIR: &str = "py";
/// Longest a `pip install` may take (a download of some 20 MB).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

/// One install at a time within a test process.
static INSTALL: Mutex<()> = Mutex::new(());

/// The cargo target dir of the running test (`target/<profile>/deps/x` →
/// `target`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("the target dir above the test executable")
        .to_path_buf()
}

fn has_duckdb(python: &Path) -> bool {
    let script = format!("import duckdb, sys; sys.exit(duckdb.__version__ != '{DUCKDB_VERSION}')");
    python.exists()
        && Command::new(python)
            .args(["-c", &script])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// The Python interpreter of the virtualenv with DuckDB installed, after
/// installing it if needed; `None` when python3 is missing and
/// [`crate::ALLOW_MISSING_TOOLS`] lets the test skip.
pub fn python() -> Option<PathBuf> {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let venv = target_dir().join(VENV_DIR);
    let python = venv.join("bin").join("python");
    if has_duckdb(&python) {
        return Some(python);
    }
    if Command::new("python3").arg("--version").output().is_err() {
        crate::tool_missing("python3", "read the exports with DuckDB");
        return None;
    }
    // A virtualenv half made (before python3-venv was installed: no pip)
    // is made again.
    if !venv.join("bin").join("pip").exists() {
        let o = run(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
            INSTALL_TIMEOUT,
        );
        if !o.status.success() {
            crate::tool_missing(
                "python3 -m venv (python3-venv)",
                "read the exports with DuckDB",
            );
            return None;
        }
    }
    let o = run(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            &format!("duckdb=={DUCKDB_VERSION}"),
        ]),
        INSTALL_TIMEOUT,
    );
    assert!(
        o.status.success() && has_duckdb(&python),
        "pip install duckdb=={DUCKDB_VERSION} failed: {}",
        stderr(&o)
    );
    Some(python)
}

/// The rows of `sql` as DuckDB answers them (each value as JSON; values
/// JSON has no type for, such as dates, as their text).
pub fn query(python: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    const SCRIPT: &str = "import duckdb, json, sys\n\
        rows = duckdb.sql(sys.argv[1]).fetchall()\n\
        json.dump([list(r) for r in rows], sys.stdout, default=str)\n";
    let o = run(
        Command::new(python).args(["-c", SCRIPT, sql]),
        QUERY_TIMEOUT,
    );
    assert!(o.status.success(), "duckdb: {sql}\n{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).expect("duckdb's rows as JSON")
}

/// `path` as a single-quoted SQL string.
pub fn sql_path(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "''"))
}
