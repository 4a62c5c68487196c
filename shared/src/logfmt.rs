//! How both command lines log (the `logs` feature): `--log-format text`
//! (human lines, colours only when the caller says the output is a
//! terminal) or `--log-format json` (one JSON object per line, with
//! `timestamp`, `level`, `fields.message` and `target`, for a log
//! collector). The level comes from `RUST_LOG` when set, else the
//! command's default.
//!
//! Invariant: a JSON line never carries ANSI escapes, and neither does a
//! text line unless `ansi` was asked for. This module only installs the
//! global subscriber; where the lines go (stderr, a rotating file) is the
//! caller's writer.

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Environment variable the command lines read `--log-format` from when the
/// flag is absent (e.g. `Environment=BEEBOT_LOG_FORMAT=json` in a unit).
pub const LOG_FORMAT_ENV: &str = "BEEBOT_LOG_FORMAT";

/// The shape of each log line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LogFormat {
    /// `TIMESTAMP LEVEL target: message key=value`.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Install the global `tracing` subscriber: lines of `format` at
/// `default_level` (unless `RUST_LOG` says otherwise) to `writer`; `ansi`
/// colours text lines (pass whether the output is a terminal). Call once,
/// first thing in `main`.
pub fn init<W>(format: LogFormat, default_level: &str, ansi: bool, writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.with_ansi(ansi).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
