//! The access log, by default in Apache's combined format:
//!
//! ```text
//! %h - - [%d/%b/%Y:%H:%M:%S %z] "%r" %>s %b "%{Referer}i" "%{User-Agent}i"
//! ```
//!
//! or as JSON objects, or from a template of `$name` fields ([`mod@format`]).
//!
//! Cheap on the hot path: each worker thread appends lines to its own buffer (an
//! uncontended lock, taken by another thread only once a second), the timestamp is
//! rendered once a second per thread, and nothing is written per request. A flusher
//! thread writes every buffer out once a second; a buffer past 64 KiB is written by its
//! worker at once; [`AccessLog::flush`] writes everything (at shutdown). The file rotates
//! by size like mighty's `Log_File_Size`/`Log_Backup_Number`: `log` → `log.1` → … →
//! `log.N`, the oldest dropped. [`AccessLog::reopen`] reopens the file (SIGHUP).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use selvedge::http::{Method, Version};
use selvedge::time::date;
use selvedge::{Request, Response, ResponseBody};

pub mod format;

pub use format::{Format, Outcome};

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// No access log.
    Off,
    /// Standard output.
    Stdout,
    /// A file, rotated by size.
    File(PathBuf),
}

/// Access log settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Where lines go: off by default.
    pub target: LogTarget,
    /// Rotate when the file reaches this many bytes: 10 MiB (0: never).
    pub size: u64,
    /// Rotated files kept (`log.1` .. `log.N`): 5.
    pub backups: u32,
    /// The line format: `combined` (default), `json` or a `$name` template.
    pub format: Format,
    /// Keep a client's `X-Request-Id` (when well formed) instead of generating one: off.
    pub trust_request_id: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            target: LogTarget::Off,
            size: 10 << 20,
            backups: 5,
            format: Format::Combined,
            trust_request_id: false,
        }
    }
}

/// A worker writes its own buffer out once it holds this much.
const BUFFER_MAX: usize = 64 * 1024;
/// How often the flusher runs.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

type Buf = Arc<Mutex<Vec<u8>>>;

struct Sink {
    cfg: LogConfig,
    file: Option<File>,
    written: u64,
}

struct Inner {
    id: usize,
    /// The line format (a reload with another format opens a new log).
    format: Format,
    /// `format` needs timing or request ids.
    observes: bool,
    trust_request_id: bool,
    sink: Mutex<Sink>,
    buffers: Mutex<Vec<Buf>>,
}

/// The access log. Cloning shares it.
#[derive(Clone)]
pub struct AccessLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessLog")
    }
}

thread_local! {
    /// This thread's buffer for each log (normally one).
    static BUFFERS: RefCell<Vec<(usize, Buf)>> = const { RefCell::new(Vec::new()) };
    /// The rendered `%d/%b/%Y:%H:%M:%S +0000` of the current second.
    static STAMP: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    /// The rendered `%Y-%m-%dT%H:%M:%S` of the current second.
    static ISO: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// A request's half of a log line, taken before the app consumes the request.
#[derive(Debug)]
pub struct Pending(PendingKind);

#[derive(Debug)]
enum PendingKind {
    Combined {
        line: String,
        /// Where the status and size go.
        split: usize,
        head: bool,
    },
    Other(format::Half),
}

impl AccessLog {
    /// Opens the log described by `cfg` and starts its flusher thread.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(cfg: LogConfig) -> io::Result<AccessLog> {
        static IDS: AtomicUsize = AtomicUsize::new(1);
        let file = open_target(&cfg.target)?;
        let written = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        let inner = Arc::new(Inner {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            format: cfg.format.clone(),
            observes: cfg.format.needs_timing() || cfg.format.needs_request_id(),
            trust_request_id: cfg.trust_request_id,
            sink: Mutex::new(Sink { cfg, file, written }),
            buffers: Mutex::new(Vec::new()),
        });
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        std::thread::Builder::new().name("selvedge-log".into()).spawn(move || loop {
            std::thread::sleep(FLUSH_EVERY);
            let Some(inner) = weak.upgrade() else { return };
            AccessLog { inner }.flush();
        })?;
        Ok(AccessLog { inner })
    }

    /// Writes out every buffered line.
    pub fn flush(&self) {
        let bufs: Vec<Buf> = self.inner.buffers.lock().map(|b| b.clone()).unwrap_or_default();
        for b in bufs {
            let data = match b.lock() {
                Ok(mut g) if !g.is_empty() => std::mem::take(&mut *g),
                _ => continue,
            };
            self.write(&data);
        }
    }

    /// Flushes, then reopens the file with `cfg` (a new path, size or backup count is taken).
    ///
    /// # Errors
    /// The new file cannot be opened (the old one stays in use).
    pub fn reopen(&self, cfg: LogConfig) -> io::Result<()> {
        self.flush();
        let file = open_target(&cfg.target)?;
        let mut s = self.inner.sink.lock().unwrap_or_else(|p| p.into_inner());
        s.written = file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        s.file = file;
        s.cfg = cfg;
        Ok(())
    }

    fn write(&self, data: &[u8]) {
        let mut s = self.inner.sink.lock().unwrap_or_else(|p| p.into_inner());
        match s.cfg.target.clone() {
            LogTarget::Off => {}
            LogTarget::Stdout => {
                let _ = io::stdout().lock().write_all(data);
            }
            LogTarget::File(path) => {
                let mut data = data;
                while !data.is_empty() {
                    // Cut at a line end so that each file stays close to `size`.
                    let room = if s.cfg.size == 0 { u64::MAX } else { s.cfg.size.saturating_sub(s.written) };
                    let take = if (data.len() as u64) <= room {
                        data.len()
                    } else {
                        let room = room as usize;
                        match data[..room].iter().rposition(|&b| b == b'\n') {
                            Some(i) => i + 1,
                            None => data[room..].iter().position(|&b| b == b'\n').map_or(data.len(), |i| room + i + 1),
                        }
                    };
                    let cut = take < data.len();
                    if let Some(f) = s.file.as_mut() {
                        let _ = f.write_all(&data[..take]);
                    }
                    s.written += take as u64;
                    data = &data[take..];
                    if s.cfg.size > 0 && (cut || s.written >= s.cfg.size) {
                        s.file = None;
                        rotate(&path, s.cfg.backups);
                        s.file = open_target(&s.cfg.target).ok().flatten();
                        s.written = 0;
                    }
                }
            }
        }
    }

    /// Whether `other` is this same log.
    pub fn same(&self, other: &AccessLog) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The line format.
    pub fn format(&self) -> &Format {
        &self.inner.format
    }

    /// Whether the format shows timing or request ids (then requests take the observed path).
    pub fn observes(&self) -> bool {
        self.inner.observes
    }

    /// Whether a client's `X-Request-Id` is kept.
    pub fn trust_request_id(&self) -> bool {
        self.inner.trust_request_id
    }

    /// Takes what the log line needs from `req` (before the app consumes it).
    pub fn begin(&self, req: &Request) -> Pending {
        if self.inner.format != Format::Combined {
            return self.begin_other(req);
        }
        let mut line = String::with_capacity(160);
        match crate::client::client_ip(req) {
            Some(ip) => {
                let _ = write!(line, "{ip}");
            }
            None => line.push_str("unix"),
        }
        line.push_str(" - - [");
        STAMP.with(|s| {
            let mut s = s.borrow_mut();
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            if s.0 != now {
                *s = (now, String::from_utf8_lossy(&stamp(now)).into_owned());
            }
            line.push_str(&s.1);
        });
        line.push_str("] \"");
        escape(&mut line, req.method().as_str().as_bytes());
        line.push(' ');
        escape(&mut line, req.target().as_bytes());
        line.push_str(match req.version() {
            Version::HTTP_10 => " HTTP/1.0\" ",
            Version::HTTP_2 => " HTTP/2.0\" ",
            Version::HTTP_3 => " HTTP/3.0\" ",
            _ => " HTTP/1.1\" ",
        });
        let split = line.len();
        line.push_str(" \"");
        escape(&mut line, req.header("referer").unwrap_or(b"-"));
        line.push_str("\" \"");
        escape(&mut line, req.header("user-agent").unwrap_or(b"-"));
        line.push_str("\"\n");
        Pending(PendingKind::Combined { line, split, head: req.method() == Method::HEAD })
    }

    fn begin_other(&self, req: &Request) -> Pending {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = now.as_secs();
        STAMP.with(|st| {
            ISO.with(|iso| {
                let mut st = st.borrow_mut();
                let mut iso = iso.borrow_mut();
                if st.0 != secs {
                    *st = (secs, String::from_utf8_lossy(&stamp(secs)).into_owned());
                }
                if iso.0 != secs {
                    *iso = (secs, iso_stamp(secs));
                }
                let mut time_iso = [0u8; 24];
                time_iso[..19].copy_from_slice(&iso.1.as_bytes()[..19]);
                let ms = now.subsec_millis();
                time_iso[19] = b'.';
                time_iso[20] = b'0' + (ms / 100) as u8;
                time_iso[21] = b'0' + (ms / 10 % 10) as u8;
                time_iso[22] = b'0' + (ms % 10) as u8;
                time_iso[23] = b'Z';
                let cx = format::Context {
                    time_local: &st.1,
                    time_iso: std::str::from_utf8(&time_iso).unwrap_or(""),
                    tls: tls_version(req),
                };
                Pending(PendingKind::Other(format::begin(&self.inner.format, req, &cx)))
            })
        })
    }

    /// Completes the line with the response and what the handlers reported, and buffers
    /// it (`o` matters only to the `json` format and templates).
    pub fn finish_with(&self, p: Pending, res: &Response, o: &Outcome<'_>) {
        match p.0 {
            PendingKind::Other(half) => {
                let json = self.inner.format == Format::Json;
                self.push(|buf| format::finish(half, res, o, json, buf));
            }
            combined => self.finish(Pending(combined), res),
        }
    }

    /// Completes the line with the response's status and body size and buffers it.
    pub fn finish(&self, p: Pending, res: &Response) {
        let (line, split, head) = match p.0 {
            PendingKind::Combined { line, split, head } => (line, split, head),
            PendingKind::Other(half) => {
                let json = self.inner.format == Format::Json;
                return self.push(|buf| format::finish(half, res, &Outcome::default(), json, buf));
            }
        };
        let p = CombinedParts { line, split, head };
        let status = res.status();
        let size = match res.body() {
            _ if p.head || status.as_u16() == 304 || status.as_u16() == 204 => None,
            ResponseBody::Bytes(b) => Some(b.len() as u64),
            ResponseBody::File(f) => Some(f.len),
            _ => None,
        };
        let mut mid = [0u8; 32];
        let mid_len = {
            let mut w = &mut mid[..];
            let _ = match size {
                Some(n) if n > 0 => write!(w, "{} {n}", status.as_u16()),
                _ => write!(w, "{} -", status.as_u16()),
            };
            32 - w.len()
        };
        self.push(|g| {
            g.extend_from_slice(&p.line.as_bytes()[..p.split]);
            g.extend_from_slice(&mid[..mid_len]);
            g.extend_from_slice(&p.line.as_bytes()[p.split..]);
        });
    }

    /// Appends a line to this thread's buffer with `put`, writing the buffer out once full.
    #[inline]
    fn push(&self, put: impl FnOnce(&mut Vec<u8>)) {
        let id = self.inner.id;
        let full = BUFFERS.with(|b| {
            let mut list = b.borrow_mut();
            let buf = match list.iter().find(|(i, _)| *i == id) {
                Some((_, buf)) => buf.clone(),
                None => {
                    let buf: Buf = Arc::new(Mutex::new(Vec::with_capacity(BUFFER_MAX)));
                    if let Ok(mut all) = self.inner.buffers.lock() {
                        all.push(buf.clone());
                    }
                    list.push((id, buf.clone()));
                    buf
                }
            };
            let mut g = buf.lock().unwrap_or_else(|e| e.into_inner());
            put(&mut g);
            (g.len() >= BUFFER_MAX).then(|| std::mem::take(&mut *g))
        });
        if let Some(data) = full {
            self.write(&data);
        }
    }
}

/// The combined format's request half.
struct CombinedParts {
    line: String,
    split: usize,
    head: bool,
}

/// The TLS version of the connection `req` came on (`None`: cleartext).
fn tls_version(req: &Request) -> Option<&'static str> {
    req.tls_version().map(selvedge::TlsVersion::as_str)
}

/// `2026-11-22T00:14:33` for `secs` since the epoch.
fn iso_stamp(secs: u64) -> String {
    let mut d = [0u8; date::DATE_LEN];
    date::render(secs, &mut d); // "Sun, 22 Nov 2026 00:14:33 GMT"
    const MONTHS: [&[u8; 3]; 12] =
        [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
    let m = MONTHS.iter().position(|m| m[..] == d[8..11]).map_or(1, |i| i + 1);
    let s = |r: std::ops::Range<usize>| std::str::from_utf8(&d[r]).unwrap_or("00");
    format!("{}-{m:02}-{}T{}", s(12..16), s(5..7), s(17..25))
}

fn open_target(t: &LogTarget) -> io::Result<Option<File>> {
    match t {
        LogTarget::File(p) => {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir)?;
            }
            OpenOptions::new().create(true).append(true).open(p).map(Some)
        }
        _ => Ok(None),
    }
}

fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// `log.(N-1)` → `log.N`, …, `log` → `log.1` (the oldest beyond `backups` dropped).
fn rotate(path: &Path, backups: u32) {
    if backups == 0 {
        let _ = std::fs::remove_file(path);
        return;
    }
    let _ = std::fs::remove_file(numbered(path, backups));
    for n in (1..backups).rev() {
        let _ = std::fs::rename(numbered(path, n), numbered(path, n + 1));
    }
    let _ = std::fs::rename(path, numbered(path, 1));
}

/// `22/Nov/2026:00:14:33 +0000` for `secs` since the epoch.
fn stamp(secs: u64) -> [u8; 26] {
    let mut d = [0u8; date::DATE_LEN];
    date::render(secs, &mut d); // "Sun, 22 Nov 2026 00:14:33 GMT"
    let mut out = [0u8; 26];
    out[0..2].copy_from_slice(&d[5..7]);
    out[2] = b'/';
    out[3..6].copy_from_slice(&d[8..11]);
    out[6] = b'/';
    out[7..11].copy_from_slice(&d[12..16]);
    out[11] = b':';
    out[12..20].copy_from_slice(&d[17..25]);
    out[20..26].copy_from_slice(b" +0000");
    out
}

use format::escape;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_format() {
        assert_eq!(&stamp(784_111_777), b"06/Nov/1994:08:49:37 +0000");
    }

    #[test]
    fn iso_format() {
        assert_eq!(iso_stamp(784_111_777), "1994-11-06T08:49:37");
    }

    #[test]
    fn rotation_keeps_backups() {
        let d = std::env::temp_dir().join(format!("selvedge-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let p = d.join("access.log");
        let log = AccessLog::open(LogConfig {
            target: LogTarget::File(p.clone()),
            size: 100,
            backups: 2,
            ..Default::default()
        })
        .unwrap();
        for i in 0..10 {
            log.write(format!("line {i:04} {}\n", "x".repeat(60)).as_bytes());
        }
        log.flush();
        assert!(numbered(&p, 1).exists() && numbered(&p, 2).exists());
        assert!(!numbered(&p, 3).exists());
        let newest = std::fs::read_to_string(numbered(&p, 1)).unwrap();
        assert!(newest.contains("line 0008") && newest.contains("line 0009"), "{newest}");
        assert!(std::fs::read_to_string(numbered(&p, 2)).unwrap().contains("line 0007"));
    }
}
