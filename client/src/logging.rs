//! Where `beebot` logs: stderr on a terminal; as a service, stderr (which the
//! journal keeps on Linux) and a size-rotated file in the data dir.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// A log file is rotated when it grows past this.
pub const MAX_LOG_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated files kept (`beebot.log.1` … `.N`).
pub const KEEP_LOGS: usize = 3;

/// An append-only log file that rotates itself by size.
pub struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: Option<File>,
    written: u64,
    /// Closed for good ([`close_files`]): writes are dropped.
    closed: bool,
}

impl RotatingFile {
    pub fn open(path: &Path, max_bytes: u64, keep: usize) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent() {
            beebot_shared::util::create_private_dir(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let written = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_path_buf(),
            max_bytes,
            keep: keep.max(1),
            file: Some(file),
            written,
            closed: false,
        })
    }

    /// Close the file; later writes are dropped, never reopen it.
    pub fn close(&mut self) {
        self.closed = true;
        self.file = None;
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        let _ = fs::remove_file(self.rotated(self.keep));
        for n in (1..self.keep).rev() {
            let _ = fs::rename(self.rotated(n), self.rotated(n + 1));
        }
        fs::rename(&self.path, self.rotated(1))?;
        self.file = Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?,
        );
        self.written = 0;
        Ok(())
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        if self.written > 0 && self.written + buf.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("log file closed"))?;
        let n = f.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// A `tracing` writer: each event goes to stderr and, when set, the rotating file.
#[derive(Clone)]
pub struct LogWriter {
    file: Option<Arc<Mutex<RotatingFile>>>,
}

/// The log files this process writes, for [`close_files`].
static OPEN_FILES: OnceLock<Mutex<Vec<Arc<Mutex<RotatingFile>>>>> = OnceLock::new();

impl LogWriter {
    pub fn new(file: Option<RotatingFile>) -> LogWriter {
        let file = file.map(|f| Arc::new(Mutex::new(f)));
        if let Some(f) = &file {
            OPEN_FILES
                .get_or_init(Mutex::default)
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(f.clone());
        }
        LogWriter { file }
    }
}

/// Close this process's log files for good (logging goes on to stderr
/// alone): before leaving removes the log directory, which Windows keeps
/// while a file in it is open.
pub fn close_files() {
    if let Some(files) = OPEN_FILES.get() {
        for f in files.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            f.lock().unwrap_or_else(|p| p.into_inner()).close();
        }
    }
}

/// One event's writer.
pub struct EventWriter {
    file: Option<Arc<Mutex<RotatingFile>>>,
}

impl Write for EventWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        if let Some(f) = &self.file {
            let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = EventWriter;
    fn make_writer(&'a self) -> EventWriter {
        EventWriter {
            file: self.file.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_n() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("logs/beebot.log");
        let mut f = RotatingFile::open(&path, 100, 2).unwrap();
        for i in 0..30 {
            writeln!(f, "line {i:04} of the log").unwrap();
        }
        f.flush().unwrap();
        assert!(fs::metadata(&path).unwrap().len() <= 100);
        assert!(d.path().join("logs/beebot.log.1").exists());
        assert!(d.path().join("logs/beebot.log.2").exists());
        assert!(!d.path().join("logs/beebot.log.3").exists());
        let newest = fs::read_to_string(&path).unwrap();
        assert!(newest.contains("line 0029"));
    }

    #[test]
    fn a_closed_file_takes_no_more_lines_and_can_be_removed() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("logs/beebot.log");
        let mut f = RotatingFile::open(&path, 100, 2).unwrap();
        writeln!(f, "before").unwrap();
        f.close();
        // Removable while the value lives (Windows keeps an open file's
        // directory), and never written again, nor reopened by a rotation.
        fs::remove_dir_all(d.path().join("logs")).unwrap();
        for _ in 0..20 {
            writeln!(f, "after the close, past the rotation size").unwrap();
        }
        assert!(!d.path().join("logs").exists());
    }
}
