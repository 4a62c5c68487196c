//! Tests of link-file writes.

use super::*;
use crate::grid::testkit::*;
use std::fs;
use std::path::Path;

#[test]
fn write_durable_creates_replaces_and_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("7.lf");
    write_durable(&path, b"first").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"first");
    write_durable(&path, b"second").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"second");
    assert_eq!(files_under(dir.path()), vec![path]);
    assert!(write_durable(Path::new("/"), b"x").is_err());
}
