//! Diagnostics: startup, reload, warnings and errors as `tracing` events, timestamped and
//! leveled, to standard error or a file (`[log] error`), as text or JSON lines
//! (`[log] error_format`). The level comes from `--log-level` (or `SELVEDGE_LOG_LEVEL`),
//! else `RUST_LOG`, else `[log] level`, else `info`; each is an `EnvFilter` directive
//! (`debug`, `selvedge=debug,warn`...). The file is reopened by [`ErrorLog::reopen`]
//! (SIGHUP, SIGUSR1). The access log is separate ([`crate::access_log`]).

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Where diagnostics (startup, reload, warnings, errors) go: `[log] error`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ErrorTarget {
    /// Standard error (the default; journald takes it under systemd).
    #[default]
    Stderr,
    /// A file, appended to and reopened on SIGHUP/SIGUSR1.
    File(PathBuf),
}

/// How diagnostics are written: `[log] error_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorFormat {
    /// One human-readable line per event: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Diagnostics settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorLogConfig {
    /// Where events go.
    pub target: ErrorTarget,
    /// Their format.
    pub format: ErrorFormat,
    /// The level or filter (`"info"`, `"debug"`, `"selvedge=debug,warn"`); `None`: `info`,
    /// unless `RUST_LOG` or `--log-level` say otherwise.
    pub level: Option<String>,
}

/// The diagnostics sink: standard error or a reopenable file.
#[derive(Debug, Clone)]
pub struct ErrorLog {
    inner: Arc<Mutex<Sink>>,
}

#[derive(Debug)]
enum Sink {
    Stderr,
    File(File),
}

fn open(path: &Path) -> io::Result<File> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

impl ErrorLog {
    /// Opens the sink `target` names.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(target: &ErrorTarget) -> io::Result<ErrorLog> {
        let sink = match target {
            ErrorTarget::Stderr => Sink::Stderr,
            ErrorTarget::File(p) => Sink::File(open(p)?),
        };
        Ok(ErrorLog { inner: Arc::new(Mutex::new(sink)) })
    }

    /// Reopens the file (after logrotate moved it away), or switches to `target` (a
    /// reload that changed `[log] error`). On failure the current sink stays.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn reopen(&self, target: &ErrorTarget) -> io::Result<()> {
        let sink = match target {
            ErrorTarget::Stderr => Sink::Stderr,
            ErrorTarget::File(p) => Sink::File(open(p)?),
        };
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = sink;
        Ok(())
    }

    /// Whether events go to a terminal (colors on).
    fn is_terminal(&self) -> bool {
        matches!(&*self.inner.lock().unwrap_or_else(|p| p.into_inner()), Sink::Stderr) && io::stderr().is_terminal()
    }
}

/// One event's writer: the text is collected, then written with one call under the lock.
#[derive(Debug)]
pub struct EventWriter {
    log: ErrorLog,
    buf: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let mut sink = self.log.inner.lock().unwrap_or_else(|p| p.into_inner());
        let _ = match &mut *sink {
            Sink::Stderr => io::stderr().lock().write_all(&self.buf),
            Sink::File(f) => f.write_all(&self.buf),
        };
    }
}

impl<'a> MakeWriter<'a> for ErrorLog {
    type Writer = EventWriter;
    fn make_writer(&'a self) -> EventWriter {
        EventWriter { log: self.clone(), buf: Vec::with_capacity(256) }
    }
}

/// The filter: `cli` (`--log-level`), else `RUST_LOG`, else the file's `[log] level`, else
/// `info`.
///
/// # Errors
/// A directive that does not parse.
pub fn filter(cli: Option<&str>, cfg: &ErrorLogConfig) -> Result<EnvFilter, String> {
    let env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let (text, from) = match (cli, env, cfg.level.as_deref()) {
        (Some(c), _, _) => (c.to_string(), "--log-level"),
        (None, Some(e), _) => (e, "RUST_LOG"),
        (None, None, Some(l)) => (l.to_string(), "[log] level"),
        (None, None, None) => ("info".to_string(), "default"),
    };
    EnvFilter::try_new(&text).map_err(|e| format!("{from} {text:?}: {e}"))
}

/// Installs the global subscriber writing to `log` as `cfg.format` says, filtered by
/// `filter`. Once per process; later calls do nothing.
pub fn install(log: &ErrorLog, format: ErrorFormat, filter: EnvFilter) {
    let builder = tracing_subscriber::fmt().with_writer(log.clone()).with_env_filter(filter).with_target(false);
    let _ = match format {
        ErrorFormat::Text => builder.with_ansi(log.is_terminal()).try_init(),
        ErrorFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    };
}
