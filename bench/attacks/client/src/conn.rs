//! An attacking HTTP/2 connection: a writer the attack drives, and (unless the attack does
//! not read) a reader thread that answers the server's SETTINGS and PINGs, tops up the
//! connection window, decodes response heads and records how the server treats us.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::report::{End, Outcome};
use crate::wire::{self, flag, kind, setting, Reader};

/// What the reader saw.
#[derive(Default)]
struct Seen {
    goaway: Option<(u32, Duration)>,
    goaway_last: Option<u32>,
    end: Option<(End, Duration)>,
    rst: BTreeMap<u32, u64>,
    statuses: BTreeMap<u16, u64>,
    first_response: Option<(u16, Duration)>,
    first_rst: Option<(u32, Duration)>,
    /// The server's SETTINGS arrived (and were acknowledged).
    settings: bool,
    answered: HashSet<u32>,
    /// Streams we opened that the server has not finished (END_STREAM or RST_STREAM).
    open: HashSet<u32>,
    bytes_in: u64,
}

struct Shared {
    start: Instant,
    seen: Mutex<Seen>,
    /// Signalled when a stream finishes or the connection ends.
    changed: Condvar,
    /// The reader has seen the end of the connection.
    done: AtomicBool,
    /// The attack is over: the reader returns at its next timeout.
    stop: AtomicBool,
    /// Our send window on the connection (for attacks that send DATA).
    conn_window: AtomicI64,
}

/// How the connection starts.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// SETTINGS_INITIAL_WINDOW_SIZE we announce (how much each response may send).
    pub initial_window: u32,
    /// Raise the connection's receive window to the maximum at once.
    pub open_connection_window: bool,
    /// Run the reader thread (attacks that "do not read" set this false).
    pub read: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { initial_window: wire::MAX_WINDOW, open_connection_window: true, read: true }
    }
}

pub struct Conn {
    w: Arc<Mutex<TcpStream>>,
    /// A second handle for reading inline when there is no reader thread.
    r: Option<TcpStream>,
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    pub bytes_out: u64,
    stalled_at: Option<Duration>,
    blocked_since: Option<Instant>,
    write_error: Option<(End, Duration)>,
    /// When the attack's first bytes went out (the first `send` after the preface).
    attack_at: Option<Duration>,
}

impl Conn {
    /// Connects and sends the preface and our SETTINGS.
    pub fn open(addr: SocketAddr, setup: Setup) -> io::Result<Conn> {
        let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        sock.set_nodelay(true)?;
        sock.set_write_timeout(Some(Duration::from_millis(200)))?;
        let rsock = sock.try_clone()?;
        rsock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let shared = Arc::new(Shared {
            start: Instant::now(),
            seen: Mutex::new(Seen::default()),
            changed: Condvar::new(),
            done: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conn_window: AtomicI64::new(65_535),
        });
        let w = Arc::new(Mutex::new(sock));
        let mut c = Conn {
            w: w.clone(),
            r: None,
            shared: shared.clone(),
            reader: None,
            bytes_out: 0,
            stalled_at: None,
            blocked_since: None,
            write_error: None,
            attack_at: None,
        };
        let mut out = wire::PREFACE.to_vec();
        wire::settings(&mut out, &[(setting::ENABLE_PUSH, 0), (setting::INITIAL_WINDOW_SIZE, setup.initial_window)]);
        if setup.open_connection_window {
            wire::window_update(&mut out, 0, wire::MAX_WINDOW - 65_535);
        }
        c.send(&out, Instant::now() + Duration::from_secs(5))?;
        c.attack_at = None; // the preface is not the attack
        if setup.read {
            c.reader = Some(std::thread::spawn(move || read_loop(rsock, w, shared)));
        } else {
            c.r = Some(rsock);
        }
        Ok(c)
    }

    /// Time since the connection started.
    pub fn elapsed(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// Whether the server ended the connection (as the reader or a write saw it).
    pub fn is_over(&self) -> bool {
        self.write_error.is_some() || self.shared.done.load(Ordering::Relaxed)
    }

    /// Whether an RST_STREAM arrived.
    pub fn got_rst(&self) -> bool {
        self.shared.seen.lock().unwrap().first_rst.is_some()
    }

    /// Whether a GOAWAY arrived.
    pub fn got_goaway(&self) -> bool {
        self.shared.seen.lock().unwrap().goaway.is_some()
    }

    /// Writes all of `buf` unless the connection ends or `deadline` passes (then an error;
    /// a frame may be cut short, which no longer matters). Writes blocked for a second
    /// mark the connection as stalled (the server stopped reading).
    pub fn send(&mut self, buf: &[u8], deadline: Instant) -> io::Result<()> {
        if self.attack_at.is_none() {
            self.attack_at = Some(self.elapsed());
        }
        let mut pos = 0;
        let w = self.w.clone();
        let mut w = w.lock().unwrap();
        while pos < buf.len() {
            match w.write(&buf[pos..]) {
                Ok(0) => return Err(self.write_failed(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    pos += n;
                    self.bytes_out += n as u64;
                    self.blocked_since = None;
                }
                Err(e) if wire::is_timeout(&e) => {
                    let since = *self.blocked_since.get_or_insert_with(Instant::now);
                    if self.stalled_at.is_none() && since.elapsed() >= Duration::from_secs(1) {
                        self.stalled_at = Some(since.duration_since(self.shared.start));
                    }
                    if Instant::now() >= deadline || self.shared.done.load(Ordering::Relaxed) {
                        return Err(e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.write_failed(e)),
            }
        }
        Ok(())
    }

    fn write_failed(&mut self, e: io::Error) -> io::Error {
        if self.write_error.is_none() {
            let end = match e.kind() {
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => End::Reset,
                _ => End::Error(e.to_string()),
            };
            self.write_error = Some((end, self.elapsed()));
        }
        e
    }

    /// Waits (up to `deadline`) until the server's SETTINGS have arrived and been
    /// acknowledged, so that the acknowledgement does not land inside the attack (in the
    /// middle of a header block, say). Needs the reader thread.
    pub fn wait_settings(&self, deadline: Instant) {
        let mut seen = self.shared.seen.lock().unwrap();
        while !seen.settings && !self.shared.done.load(Ordering::Relaxed) && self.reader.is_some() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            seen = self.shared.changed.wait_timeout(seen, (deadline - now).min(Duration::from_millis(50))).unwrap().0;
        }
    }

    /// Notes that stream `id` was opened (it counts as in flight until answered).
    pub fn opened(&self, id: u32) {
        self.shared.seen.lock().unwrap().open.insert(id);
    }

    /// Streams in flight.
    pub fn in_flight(&self) -> usize {
        self.shared.seen.lock().unwrap().open.len()
    }

    /// Waits until fewer than `max` streams are in flight, the connection ends or
    /// `deadline` passes.
    pub fn wait_in_flight_below(&self, max: usize, deadline: Instant) {
        let mut seen = self.shared.seen.lock().unwrap();
        while seen.open.len() >= max && !self.shared.done.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            let wait = (deadline - now).min(Duration::from_millis(50));
            seen = self.shared.changed.wait_timeout(seen, wait).unwrap().0;
        }
    }

    /// Takes `n` octets of the connection send window, waiting (up to `deadline`) for the
    /// server to grant them. `false`: not granted in time.
    pub fn take_window(&self, n: i64, deadline: Instant) -> bool {
        loop {
            if self.shared.conn_window.load(Ordering::Relaxed) >= n {
                self.shared.conn_window.fetch_sub(n, Ordering::Relaxed);
                return true;
            }
            if Instant::now() >= deadline || self.is_over() {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Ends the connection from our side and returns what happened. With no reader
    /// thread, first reads (for up to `linger`) what the server sent, to find its GOAWAY.
    pub fn finish(mut self, linger: Duration) -> Outcome {
        let stop_at = Instant::now() + linger;
        if let Some(r) = self.r.take() {
            let w = self.w.clone();
            let shared = self.shared.clone();
            // The reader thread, run now: it stops at EOF or once asked to.
            let h = std::thread::spawn(move || read_loop(r, w, shared));
            while !self.shared.done.load(Ordering::Relaxed) && Instant::now() < stop_at {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.shared.stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        } else if let Some(h) = self.reader.take() {
            while !self.shared.done.load(Ordering::Relaxed) && Instant::now() < stop_at {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.shared.stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
        let seen = std::mem::take(&mut *self.shared.seen.lock().unwrap());
        let (end, end_at) = match (seen.end, self.write_error.take()) {
            (Some(e), _) => e,
            (None, Some(e)) => e,
            (None, None) => (End::Open, self.elapsed()),
        };
        Outcome {
            goaway: seen.goaway,
            goaway_last: seen.goaway_last,
            end,
            end_at,
            stalled_at: self.stalled_at,
            units: 0,
            streams: 0,
            answered: seen.answered.len() as u64,
            rst: seen.rst,
            statuses: seen.statuses,
            first_response: seen.first_response,
            first_rst: seen.first_rst,
            stream_cut: None,
            bytes_out: self.bytes_out,
            bytes_in: seen.bytes_in,
            attack_at: self.attack_at.unwrap_or_default(),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

/// The reader: runs until the connection ends or `stop` is set.
fn read_loop(sock: TcpStream, w: Arc<Mutex<TcpStream>>, shared: Arc<Shared>) {
    let mut r = Reader::new(&sock);
    let mut dec = hpack::Decoder::new();
    // A header block being collected across CONTINUATION frames: stream, bytes, END_STREAM.
    let mut block: Option<(u32, Vec<u8>, bool)> = None;
    let mut unacked_data: u64 = 0;
    let end = loop {
        let f = match r.next() {
            Ok(Some(f)) => f,
            Ok(None) => break End::Eof,
            Err(e) if wire::is_timeout(&e) => {
                if shared.stop.load(Ordering::Relaxed) {
                    break End::Open;
                }
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break End::Reset,
            Err(e) => break End::Error(e.to_string()),
        };
        let now = shared.start.elapsed();
        let mut reply = Vec::new();
        let mut acked_settings = false;
        {
            let mut seen = shared.seen.lock().unwrap();
            seen.bytes_in = r.bytes;
            match f.kind {
                kind::SETTINGS if f.flags & flag::ACK == 0 => {
                    wire::frame(&mut reply, kind::SETTINGS, flag::ACK, 0, &[]);
                    acked_settings = true;
                }
                kind::PING if f.flags & flag::ACK == 0 => {
                    let mut p = [0u8; 8];
                    if f.payload.len() == 8 {
                        p.copy_from_slice(&f.payload);
                    }
                    wire::ping(&mut reply, true, p);
                }
                kind::GOAWAY if seen.goaway.is_none() => {
                    seen.goaway = Some((f.goaway_code(), now));
                    seen.goaway_last = Some(f.u32_at(0) & wire::MAX_WINDOW);
                }
                kind::RST_STREAM => {
                    if seen.first_rst.is_none() {
                        seen.first_rst = Some((f.u32_at(0), now));
                    }
                    *seen.rst.entry(f.u32_at(0)).or_default() += 1;
                    seen.answered.insert(f.stream);
                    seen.open.remove(&f.stream);
                    shared.changed.notify_all();
                }
                kind::WINDOW_UPDATE if f.stream == 0 => {
                    shared.conn_window.fetch_add(i64::from(f.u32_at(0) & wire::MAX_WINDOW), Ordering::Relaxed);
                }
                kind::DATA => {
                    unacked_data += f.payload.len() as u64;
                    if f.flags & flag::END_STREAM != 0 {
                        seen.open.remove(&f.stream);
                        shared.changed.notify_all();
                    }
                }
                kind::HEADERS | kind::CONTINUATION => {
                    let (id, mut buf, end_stream) = if f.kind == kind::HEADERS {
                        (f.stream, Vec::new(), f.flags & flag::END_STREAM != 0)
                    } else {
                        block.take().unwrap_or((f.stream, Vec::new(), false))
                    };
                    buf.extend_from_slice(f.fragment());
                    if f.flags & flag::END_HEADERS == 0 {
                        block = Some((id, buf, end_stream));
                    } else {
                        head(&mut dec, &buf, id, now, &mut seen);
                        if end_stream {
                            seen.open.remove(&id);
                            shared.changed.notify_all();
                        }
                    }
                }
                _ => {}
            }
        }
        // Keep the connection window open (we announced the maximum at the start).
        if unacked_data >= 1 << 30 {
            wire::window_update(&mut reply, 0, unacked_data as u32);
            unacked_data = 0;
        }
        if !reply.is_empty() && !write_fully(&w, &reply, &shared) {
            break End::Reset;
        }
        if acked_settings {
            shared.seen.lock().unwrap().settings = true;
            shared.changed.notify_all();
        }
    };
    let mut seen = shared.seen.lock().unwrap();
    seen.bytes_in = r.bytes;
    if end != End::Open {
        seen.end = Some((end, shared.start.elapsed()));
    }
    shared.done.store(true, Ordering::Relaxed);
    shared.changed.notify_all();
}

/// Writes a reply whole (a frame cut short would corrupt the attack's own frames), unless
/// the connection fails or the run ends.
fn write_fully(w: &Mutex<TcpStream>, buf: &[u8], shared: &Shared) -> bool {
    let mut w = w.lock().unwrap();
    let mut pos = 0;
    while pos < buf.len() {
        match w.write(&buf[pos..]) {
            Ok(0) => return false,
            Ok(n) => pos += n,
            Err(e) if wire::is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if shared.stop.load(Ordering::Relaxed) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// A response head: its status counts; the stream was answered.
fn head(dec: &mut hpack::Decoder<'_>, block: &[u8], id: u32, now: Duration, seen: &mut Seen) {
    let mut status = 0u16;
    let _ = dec.decode_with_cb(block, |n, v| {
        if &n[..] == b":status" {
            status = std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        }
    });
    if status == 0 {
        return; // trailers, or a block we could not read
    }
    if status >= 200 {
        seen.answered.insert(id);
    }
    *seen.statuses.entry(status).or_default() += 1;
    if seen.first_response.is_none() {
        seen.first_response = Some((status, now));
    }
}
