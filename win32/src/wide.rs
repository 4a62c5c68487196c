//! UTF-16 strings for the `W` functions.

use std::ffi::OsStr;
use std::os::windows::ffi::OsStrExt;

/// `s` as a NUL-terminated UTF-16 string.
pub fn wide(s: impl AsRef<OsStr>) -> Vec<u16> {
    s.as_ref().encode_wide().chain(std::iter::once(0)).collect()
}
