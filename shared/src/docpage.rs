//! The reference pages (`docs/reference/`) are made from the code: each
//! program's tests make their pages and [`check_current`] compares each with
//! the committed one. A difference fails the test, showing it and the
//! command that writes the pages again ([`REGENERATE`]). Nothing here runs
//! outside tests.

use std::path::Path;

/// Set to `1`, [`check_current`] writes the page instead of comparing.
pub const WRITE_ENV: &str = "BEEBOT_WRITE_REFERENCE";

/// The command that writes every reference page again.
pub const REGENERATE: &str =
    "BEEBOT_WRITE_REFERENCE=1 cargo test -p beebot-server -p beebot-client reference_page";

/// The comment under a page's title: where the page comes from.
pub fn made_from_the_code() -> String {
    format!(
        "<!-- Made from the code by the tests: do not edit. `{REGENERATE}` writes it again. -->"
    )
}

/// Most lines of a difference a failure shows.
const MAX_DIFF_LINES: usize = 60;
/// Largest table [`line_diff`] fills (changed lines of one side times the
/// other's); past it every changed line is shown as removed and added.
const MAX_DIFF_CELLS: usize = 4_000_000;

/// [`check_current`] for `docs/reference/NAME` of the repository holding
/// the crate at `crate_dir` (its `CARGO_MANIFEST_DIR`): a test's check,
/// which panics with what differs.
pub fn assert_reference_current(crate_dir: &str, name: &str, generated: &str) {
    let path = Path::new(crate_dir).join("../docs/reference").join(name);
    if let Err(e) = check_current(&path, generated) {
        panic!("{e}");
    }
}

/// `generated` against the committed page at `path`: `Ok` when they are
/// the same (line ends aside), or when [`WRITE_ENV`] is `1` and the page
/// was written; else what differs and how to write it again.
pub fn check_current(path: &Path, generated: &str) -> Result<(), String> {
    if std::env::var(WRITE_ENV).is_ok_and(|v| v == "1") {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        return std::fs::write(path, generated)
            .map_err(|e| format!("cannot write {}: {e}", path.display()));
    }
    let committed = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            return Err(format!(
                "cannot read {} ({e}): write it with `{REGENERATE}`",
                path.display()
            ))
        }
    };
    match difference(&committed, generated) {
        None => Ok(()),
        Some(diff) => Err(format!(
            "{} is not what the code makes now (- committed, + made now):\n{diff}\n\
             Write it again with `{REGENERATE}` and commit it.",
            path.display()
        )),
    }
}

/// What differs between a committed page and the one made now (line ends
/// aside), at most [`MAX_DIFF_LINES`] lines of it; `None`: nothing.
pub fn difference(committed: &str, generated: &str) -> Option<String> {
    let committed = committed.replace("\r\n", "\n");
    if committed == generated {
        return None;
    }
    let mut diff = line_diff(&committed, generated);
    if diff.is_empty() {
        diff.push("(only the line ends or the last line's end differ)".into());
    }
    if diff.len() > MAX_DIFF_LINES {
        let more = diff.len() - MAX_DIFF_LINES;
        diff.truncate(MAX_DIFF_LINES);
        diff.push(format!("... and {more} more lines"));
    }
    Some(diff.join("\n"))
}

/// The lines that differ between `old` and `new`: `-N: line` for a line of
/// `old` (N its number) not in `new`, `+N: line` for a line of `new` not in
/// `old`, in order (a longest common subsequence of lines is kept).
pub fn line_diff(old: &str, new: &str) -> Vec<String> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let removed = |i: usize| format!("-{}: {}", head + i + 1, a[i]);
    let added = |j: usize| format!("+{}: {}", head + j + 1, b[j]);
    if a.len().saturating_mul(b.len()) > MAX_DIFF_CELLS {
        return (0..a.len())
            .map(removed)
            .chain((0..b.len()).map(added))
            .collect();
    }
    // common[i][j]: length of the longest common subsequence of a[i..], b[j..].
    let width = b.len() + 1;
    let mut common = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i * width + j] = if a[i] == b[j] {
                common[(i + 1) * width + j + 1] + 1
            } else {
                common[(i + 1) * width + j].max(common[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j == b.len()
            || (i < a.len() && common[(i + 1) * width + j] >= common[i * width + j + 1])
        {
            out.push(removed(i));
            i += 1;
        } else {
            out.push(added(j));
            j += 1;
        }
    }
    out
}

/// `text` as one cell of a Markdown table: on one line, its `|` escaped.
pub fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_names_the_lines_removed_and_added() {
        let old = "a\nb\nc\nd\n";
        let new = "a\nc\nx\nd\ne\n";
        assert_eq!(line_diff(old, new), ["-2: b", "+3: x", "+5: e"]);
        assert!(line_diff(old, old).is_empty());
    }

    #[test]
    fn a_page_that_differs_shows_the_difference() {
        assert_eq!(difference("# Title\r\nline\r\n", "# Title\nline\n"), None);
        let d = difference("# Title\nold line\n", "# Title\nnew line\n").expect("differs");
        assert_eq!(d, "-2: old line\n+2: new line");
        let many: String = (0..100).map(|i| format!("{i}\n")).collect();
        let d = difference(&many, "").expect("differs");
        assert!(d.ends_with("... and 40 more lines"), "{d}");
        assert!(difference("a", "a\n").is_some());
    }

    #[test]
    fn a_cell_is_one_line_with_its_bars_escaped() {
        assert_eq!(cell("a |b\n  c"), "a \\|b c");
    }
}
