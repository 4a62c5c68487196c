//! String values in the registry: the per-user autostart entry
//! (`HKCU\Software\Microsoft\Windows\CurrentVersion\Run`) and the
//! machine-wide one an administrator's installer writes (`HKLM\...\Run`).

use std::ffi::OsString;
use std::io;
use std::os::windows::ffi::OsStringExt;

use windows_sys::Win32::Foundation::{ERROR_FILE_NOT_FOUND, ERROR_MORE_DATA, ERROR_SUCCESS};
use windows_sys::Win32::System::Registry::{
    RegDeleteKeyValueW, RegDeleteTreeW, RegGetValueW, RegSetKeyValueW, HKEY, HKEY_CURRENT_USER,
    HKEY_LOCAL_MACHINE, REG_SZ, RRF_RT_REG_SZ,
};

use crate::wide::wide;

/// Longest string value read, in UTF-16 units: a command line's limit.
pub const MAX_VALUE_CHARS: usize = 32_768;

/// Which hive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Root {
    /// `HKEY_CURRENT_USER`: this user's; writable without administrator rights.
    CurrentUser,
    /// `HKEY_LOCAL_MACHINE`: the machine's; read here, written by installers.
    LocalMachine,
}

impl Root {
    fn hkey(self) -> HKEY {
        match self {
            Root::CurrentUser => HKEY_CURRENT_USER,
            Root::LocalMachine => HKEY_LOCAL_MACHINE,
        }
    }
}

fn result(code: u32) -> io::Result<()> {
    if code == ERROR_SUCCESS {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code as i32))
    }
}

/// Write `value` as a `REG_SZ` string, making the key when missing.
pub fn set_string(root: Root, key: &str, name: &str, value: &str) -> io::Result<()> {
    let (k, n, v) = (wide(key), wide(name), wide(value));
    let bytes = u32::try_from(v.len() * 2)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "value too long"))?;
    // SAFETY: NUL-terminated UTF-16 strings owned here; `bytes` is the size
    // of `v`, its terminator included, as REG_SZ wants.
    result(unsafe {
        RegSetKeyValueW(
            root.hkey(),
            k.as_ptr(),
            n.as_ptr(),
            REG_SZ,
            v.as_ptr().cast(),
            bytes,
        )
    })
}

/// A string value (`REG_SZ`, or `REG_EXPAND_SZ` expanded), `None` when the
/// key or the value is missing.
pub fn get_string(root: Root, key: &str, name: &str) -> io::Result<Option<String>> {
    let (k, n) = (wide(key), wide(name));
    let mut buf: Vec<u16> = vec![0; 512];
    loop {
        let mut bytes = u32::try_from(buf.len() * 2).unwrap_or(u32::MAX);
        // SAFETY: NUL-terminated strings owned here; `buf` is writable for
        // `bytes` bytes, and the call writes at most that and says how much.
        let code = unsafe {
            RegGetValueW(
                root.hkey(),
                k.as_ptr(),
                n.as_ptr(),
                // Takes a REG_EXPAND_SZ too (Group Policy may write one),
                // expanded (RRF_RT_REG_EXPAND_SZ without RRF_NOEXPAND
                // would be refused as invalid).
                RRF_RT_REG_SZ,
                std::ptr::null_mut(),
                buf.as_mut_ptr().cast(),
                &mut bytes,
            )
        };
        match code {
            ERROR_SUCCESS => {
                let mut len = (bytes as usize / 2).min(buf.len());
                while len > 0 && buf[len - 1] == 0 {
                    len -= 1;
                }
                return Ok(Some(
                    OsString::from_wide(&buf[..len])
                        .to_string_lossy()
                        .into_owned(),
                ));
            }
            ERROR_FILE_NOT_FOUND => return Ok(None),
            ERROR_MORE_DATA if (bytes as usize) / 2 <= MAX_VALUE_CHARS => {
                buf = vec![0; bytes as usize / 2 + 1];
            }
            other => return result(other).map(|()| None),
        }
    }
}

/// Remove a value; a missing one is not an error.
pub fn delete_value(root: Root, key: &str, name: &str) -> io::Result<()> {
    let (k, n) = (wide(key), wide(name));
    // SAFETY: NUL-terminated strings owned here.
    match unsafe { RegDeleteKeyValueW(root.hkey(), k.as_ptr(), n.as_ptr()) } {
        ERROR_FILE_NOT_FOUND => Ok(()),
        code => result(code),
    }
}

/// Remove a key and everything under it; a missing one is not an error.
pub fn delete_tree(root: Root, key: &str) -> io::Result<()> {
    let k = wide(key);
    // SAFETY: a NUL-terminated string owned here.
    match unsafe { RegDeleteTreeW(root.hkey(), k.as_ptr()) } {
        ERROR_FILE_NOT_FOUND => Ok(()),
        code => result(code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `REG_EXPAND_SZ` value, as Group Policy Preferences may write one.
    fn set_expandable(key: &str, name: &str, value: &str) {
        let (k, n, v) = (wide(key), wide(name), wide(value));
        // SAFETY: NUL-terminated strings owned here; the size is `v`'s,
        // terminator included.
        let code = unsafe {
            RegSetKeyValueW(
                HKEY_CURRENT_USER,
                k.as_ptr(),
                n.as_ptr(),
                windows_sys::Win32::System::Registry::REG_EXPAND_SZ,
                v.as_ptr().cast(),
                (v.len() * 2) as u32,
            )
        };
        assert_eq!(code, ERROR_SUCCESS);
    }

    #[test]
    fn a_value_is_written_read_and_removed() {
        let key = format!("Software\\BeeBot-test-{}", std::process::id());
        assert_eq!(get_string(Root::CurrentUser, &key, "v").unwrap(), None);
        let long = format!(
            "\"C:\\Program Files\\BeeBot\\beebotw.exe\" run {}",
            "é".repeat(600)
        );
        set_string(Root::CurrentUser, &key, "v", &long).unwrap();
        assert_eq!(
            get_string(Root::CurrentUser, &key, "v").unwrap().as_deref(),
            Some(long.as_str())
        );
        delete_value(Root::CurrentUser, &key, "v").unwrap();
        assert_eq!(get_string(Root::CurrentUser, &key, "v").unwrap(), None);
        delete_value(Root::CurrentUser, &key, "v").unwrap();
        // An expandable string comes expanded.
        set_expandable(&key, "x", "%SystemRoot%\\beebot");
        let got = get_string(Root::CurrentUser, &key, "x").unwrap().unwrap();
        assert!(
            !got.contains('%') && got.to_lowercase().ends_with("\\windows\\beebot"),
            "{got}"
        );
        delete_tree(Root::CurrentUser, &key).unwrap();
        delete_tree(Root::CurrentUser, &key).unwrap();
    }
}
