//! The engine's counters, for embedders to export their own way ([`snapshot`]): connections
//! accepted, open by protocol and state ([`ConnState`]) and parked, closed by protocol and
//! [`CloseReason`], HTTP/2 streams and the RST_STREAM and GOAWAY
//! frames sent and received by error code, file cache hits, misses and evictions, TLS
//! handshakes by version and failed ones by reason.
//!
//! Counters are process-wide (every [`Server`](crate::Server) in the process adds to the
//! same ones). Each thread counts into its own cache-line-aligned shard, with a relaxed
//! load and store no other core writes (no locked read-modify-write on a shared line);
//! [`snapshot`] sums the shards of every thread that ever counted.
//!
//! ```
//! let s = selvedge::stats::snapshot();
//! println!("{} connections open, {} file cache hits", s.open_h1 + s.open_h2, s.file_cache_hits);
//! ```

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::time::timeout::TimerHandle;

/// The counters, summed over the threads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Connections accepted (before TLS).
    pub accepted: u64,
    /// HTTP/1.x connections open now (an `Upgrade: h2c` counts as HTTP/2 from the switch).
    pub open_h1: u64,
    /// HTTP/2 connections open now.
    pub open_h2: u64,
    /// HTTP/1.x connections served to the end (not counting those that switched to HTTP/2).
    pub closed_h1: u64,
    /// HTTP/2 connections served to the end.
    pub closed_h2: u64,
    /// HTTP/1.x connections open now, by state (they add up to `open_h1`).
    pub states_h1: ConnStates,
    /// HTTP/2 connections open now, by state (they add up to `open_h2`).
    pub states_h2: ConnStates,
    /// HTTP/1.x connections closed, by reason (index: [`CloseReason`] as `usize`; they add
    /// up to `closed_h1`).
    pub closes_h1: [u64; REASONS],
    /// HTTP/2 connections closed, by reason (as `closes_h1`).
    pub closes_h2: [u64; REASONS],
    /// File cache lookups answered from the cache.
    pub file_cache_hits: u64,
    /// File cache lookups that went to the file system.
    pub file_cache_misses: u64,
    /// File cache entries dropped by the reaper.
    pub file_cache_evictions: u64,
    /// File cache entries held now (over every cache).
    pub file_cache_entries: u64,
    /// Idle connections parked now: waiting for their next request without a task (they
    /// count as open too).
    pub parked: u64,
    /// Times an idle connection was parked.
    pub parked_total: u64,
    /// HTTP/2 streams opened by clients (every request, including those refused with 431).
    pub h2_streams: u64,
    /// HTTP/2 streams open now.
    pub h2_streams_open: u64,
    /// RST_STREAM frames sent, by error code (index: the code, RFC 9113 §7;
    /// [`OTHER_CODE`]: any code above 13).
    pub h2_resets_sent: [u64; CODES],
    /// RST_STREAM frames received, by error code (as `h2_resets_sent`).
    pub h2_resets_received: [u64; CODES],
    /// GOAWAY frames sent, by error code (NO_ERROR: a graceful close; the others end the
    /// connection for the peer's error or abuse, e.g. ENHANCE_YOUR_CALM).
    pub h2_goaways_sent: [u64; CODES],
    /// TLS handshakes completed with TLS 1.2.
    pub tls_handshakes_tls12: u64,
    /// TLS handshakes completed with TLS 1.3.
    pub tls_handshakes_tls13: u64,
    /// TLS handshakes that failed on an error: an alert, a bad record, no certificate for
    /// the name, no protocol in common.
    pub tls_handshake_errors: u64,
    /// TLS handshakes the client closed before they completed.
    pub tls_handshake_closed: u64,
    /// TLS handshakes cut off by `tls_handshake_timeout` (or by shutdown).
    pub tls_handshake_timeouts: u64,
}

/// Open connections of one protocol by what they are doing (nginx's `stub_status` states).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnStates {
    /// Receiving a request head that is not complete yet (HTTP/1.x; an HTTP/2 connection
    /// never counts here).
    pub reading: u64,
    /// Serving: from a complete request head until its response is sent (HTTP/1.x: the
    /// app's work, the request body, the response; HTTP/2: while any stream is open).
    pub writing: u64,
    /// Waiting for the next request (keep-alive; parked connections too), or for the
    /// first.
    pub idle: u64,
}

/// What a connection is doing, as [`ConnStates`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// See [`ConnStates::reading`].
    Reading,
    /// See [`ConnStates::writing`].
    Writing,
    /// See [`ConnStates::idle`].
    Idle,
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CloseReason {
    /// The client closed or reset it (or sent GOAWAY and left), or a read or write on it
    /// failed.
    Client = 0,
    /// The server ended it in the normal course: `Connection: close` (asked by either
    /// side, or HTTP/1.0), a graceful drain or shutdown.
    Server,
    /// No request came within the idle (keep-alive) timeout.
    IdleTimeout,
    /// A request's head or body did not arrive in time (the header and body timeouts, the
    /// minimum body rate).
    ReadTimeout,
    /// The client did not take the response in time (the send timeout; HTTP/2: the
    /// connection's send deadline or its timer's backstop while streams are open).
    WriteTimeout,
    /// A request over a limit, answered 413, 414 or 431 and closed.
    Limit,
    /// A malformed request (400, 501, 505 and the like) or an HTTP/2 connection error
    /// (GOAWAY with PROTOCOL_ERROR, COMPRESSION_ERROR, ...).
    Error,
    /// An abuse limit (HTTP/2 GOAWAY ENHANCE_YOUR_CALM: floods of control frames, resets,
    /// CONTINUATION; an unfinished header block).
    Abuse,
}

/// How many [`CloseReason`]s there are.
pub const REASONS: usize = 8;

impl CloseReason {
    /// Every reason, in index order.
    pub const ALL: [CloseReason; REASONS] = [
        CloseReason::Client,
        CloseReason::Server,
        CloseReason::IdleTimeout,
        CloseReason::ReadTimeout,
        CloseReason::WriteTimeout,
        CloseReason::Limit,
        CloseReason::Error,
        CloseReason::Abuse,
    ];

    /// Its name in snake case (`client`, `idle_timeout`, ...), as metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::Server => "server",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::ReadTimeout => "read_timeout",
            CloseReason::WriteTimeout => "write_timeout",
            CloseReason::Limit => "limit",
            CloseReason::Error => "error",
            CloseReason::Abuse => "abuse",
        }
    }

    /// The reason an error answer with `status` closes its connection for.
    pub(crate) fn of_status(status: u16) -> CloseReason {
        match status {
            408 => CloseReason::ReadTimeout,
            413 | 414 | 431 => CloseReason::Limit,
            _ => CloseReason::Error,
        }
    }
}

/// Slots of the per-code HTTP/2 counters: codes 0 to 13, then every other code.
pub const CODES: usize = 15;
/// The slot of codes above 13 in the per-code counters.
pub const OTHER_CODE: usize = CODES - 1;

/// The slot of error code `code` in the per-code counters.
#[inline]
fn code_slot(code: u32) -> usize {
    (code as usize).min(OTHER_CODE)
}

/// What a shard counts.
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    Accepted,
    OpenedH1,
    OpenedH2,
    CacheHit,
    CacheMiss,
    CacheEviction,
    CacheInserted,
    HandedOffH1,
    Parked,
    /// Taken out of a parking lot (woken, or closed there).
    Unparked,
    H2StreamOpened,
    H2StreamClosed,
    /// The first of `CODES` per-code counters each.
    H2ResetSent,
    H2ResetReceived = Counter::H2ResetSent as usize + CODES,
    H2GoawaySent = Counter::H2ResetReceived as usize + CODES,
    TlsDone12 = Counter::H2GoawaySent as usize + CODES,
    TlsDone13,
    TlsError,
    TlsClosed,
    TlsTimeout,
    /// Per protocol (HTTP/1.x, then HTTP/2), entries into and exits from the reading and
    /// writing states (idle is what is left of the open connections).
    StateH1,
    StateH2 = Counter::StateH1 as usize + 4,
    /// The first of `REASONS` per-reason close counters each.
    ClosedH1 = Counter::StateH2 as usize + 4,
    ClosedH2 = Counter::ClosedH1 as usize + REASONS,
}

const COUNTERS: usize = Counter::ClosedH2 as usize + REASONS;

/// Offsets of the state counters from `StateH1`/`StateH2`.
const READING_IN: usize = 0;
const READING_OUT: usize = 1;
const WRITING_IN: usize = 2;
const WRITING_OUT: usize = 3;

/// Adds 1 to this thread's per-code counter `first` for `code`.
#[inline]
fn add_code(first: Counter, code: u32) {
    add_at(first as usize + code_slot(code), 1);
}

/// An HTTP/2 RST_STREAM with `code` was sent.
#[inline]
pub(crate) fn h2_reset_sent(code: u32) {
    add_code(Counter::H2ResetSent, code);
}

/// An HTTP/2 RST_STREAM with `code` was received.
#[inline]
pub(crate) fn h2_reset_received(code: u32) {
    add_code(Counter::H2ResetReceived, code);
}

/// An HTTP/2 GOAWAY with `code` was sent.
#[inline]
pub(crate) fn h2_goaway_sent(code: u32) {
    add_code(Counter::H2GoawaySent, code);
}

/// One thread's counters, on cache lines of their own.
#[repr(align(64))]
#[derive(Debug)]
struct Shard([AtomicU64; COUNTERS]);

impl Default for Shard {
    fn default() -> Self {
        Shard(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// Every thread's shard. Shards are leaked: they live as long as the process, so a
/// thread keeps a plain `&'static` to its own (no reference count, no destructor).
static SHARDS: Mutex<Vec<&'static Shard>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's shard, once it has counted: a constant-initialised thread-local
    /// without a destructor, so reaching it is one load from the thread's block.
    static SHARD: Cell<Option<&'static Shard>> = const { Cell::new(None) };
}

/// This thread's shard (made and registered on its first count).
#[inline]
fn shard() -> &'static Shard {
    match SHARD.with(Cell::get) {
        Some(s) => s,
        None => register(),
    }
}

#[cold]
fn register() -> &'static Shard {
    let s: &'static Shard = Box::leak(Box::default());
    SHARDS.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    SHARD.with(|c| c.set(Some(s)));
    s
}

/// Adds `n` to this thread's `c`.
#[inline]
pub(crate) fn add(c: Counter, n: u64) {
    add_at(c as usize, n);
}

#[inline]
fn add_at(i: usize, n: u64) {
    let a = &shard().0[i];
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// What a connection is doing, finer than [`ConnState`] (for the timeout it ends on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Waiting for a request.
    Idle = 0,
    /// Receiving a request head.
    Head,
    /// The app has the request (and may be reading its body).
    App,
    /// Sending a response.
    Send,
}

impl Phase {
    /// The state counter offset (`READING_IN` or `WRITING_IN`) of a phase, or `None` for
    /// idle.
    #[inline]
    fn counter(self) -> Option<usize> {
        match self {
            Phase::Idle => None,
            Phase::Head => Some(READING_IN),
            Phase::App | Phase::Send => Some(WRITING_IN),
        }
    }

    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Head,
            2 => Phase::App,
            3 => Phase::Send,
            _ => Phase::Idle,
        }
    }
}

/// The state counter (`READING_IN`, `WRITING_IN`, or 255 for idle) of each phase.
const STATE_OF: [u8; 4] = [u8::MAX, READING_IN as u8, WRITING_IN as u8, WRITING_IN as u8];

/// No close reason set (yet).
const NO_REASON: u8 = u8::MAX;
/// Handed to HTTP/2: not counted as closed.
const HANDED_OFF: u8 = u8::MAX - 1;

/// Counts a connection of one protocol as open while it lives: by state as the driver
/// moves it ([`OpenConn::set_phase`]), and when it ends, as closed for the reason the
/// driver gave ([`OpenConn::close_as`]), else for the timeout its timer fired in that
/// phase, else for shutdown or the client. Its fields are atomics only so that HTTP/2's
/// reader and writer can share it; one task uses it at a time (relaxed loads and stores).
#[derive(Debug)]
pub(crate) struct OpenConn {
    h2: bool,
    phase: AtomicU8,
    why: AtomicU8,
    timer: TimerHandle,
}

impl OpenConn {
    /// An HTTP/1.x (`h2 == false`) or HTTP/2 connection begins, idle, with `timer`.
    #[inline]
    pub(crate) fn new(h2: bool, timer: &TimerHandle) -> OpenConn {
        add(if h2 { Counter::OpenedH2 } else { Counter::OpenedH1 }, 1);
        OpenConn { h2, phase: AtomicU8::new(Phase::Idle as u8), why: AtomicU8::new(NO_REASON), timer: timer.clone() }
    }

    #[inline]
    fn state_base(&self) -> usize {
        if self.h2 {
            Counter::StateH2 as usize
        } else {
            Counter::StateH1 as usize
        }
    }

    /// The connection moves to `p`: counted when its [`ConnState`] changes (the usual
    /// step, between phases of one state or to the same phase, is a load and a compare).
    #[inline(always)]
    pub(crate) fn set_phase(&self, p: Phase) {
        let old = self.phase.load(Ordering::Relaxed);
        if old != p as u8 {
            self.phase.store(p as u8, Ordering::Relaxed);
            if STATE_OF[old as usize & 3] != STATE_OF[p as usize] {
                self.moved(old, p);
            }
        }
    }

    /// Counts a change of state: out of `old`'s, into `p`'s.
    #[inline]
    fn moved(&self, old: u8, p: Phase) {
        let base = self.state_base();
        let (from, to) = (Phase::from_u8(old).counter(), p.counter());
        if let Some(f) = from {
            add_at(base + f + 1, 1);
        }
        if let Some(t) = to {
            add_at(base + t, 1);
        }
    }

    /// The connection will close for `why` (the first reason given stands).
    #[inline]
    pub(crate) fn close_as(&self, why: CloseReason) {
        if self.why.load(Ordering::Relaxed) == NO_REASON {
            self.why.store(why as u8, Ordering::Relaxed);
        }
    }

    /// An HTTP/1.1 connection that becomes HTTP/2 (`Upgrade: h2c`, a prior-knowledge
    /// preface): it leaves the HTTP/1.x counts without counting as closed.
    #[inline]
    pub(crate) fn hand_off(self) {
        add(Counter::HandedOffH1, 1);
        self.why.store(HANDED_OFF, Ordering::Relaxed);
    }
}

impl Drop for OpenConn {
    #[inline]
    fn drop(&mut self) {
        let phase = Phase::from_u8(self.phase.load(Ordering::Relaxed));
        if let Some(f) = phase.counter() {
            add_at(self.state_base() + f + 1, 1);
        }
        let why = match self.why.load(Ordering::Relaxed) {
            HANDED_OFF => return,
            NO_REASON if self.timer.expired() => match phase {
                Phase::Idle => CloseReason::IdleTimeout,
                Phase::Head | Phase::App => CloseReason::ReadTimeout,
                Phase::Send => CloseReason::WriteTimeout,
            },
            NO_REASON if self.timer.group_closing() => CloseReason::Server,
            NO_REASON => CloseReason::Client,
            w => CloseReason::ALL.get(w as usize).copied().unwrap_or(CloseReason::Client),
        };
        let first = if self.h2 { Counter::ClosedH2 } else { Counter::ClosedH1 };
        add_at(first as usize + why as usize, 1);
    }
}

/// Counts one TLS handshake's outcome: a timeout (the connection's task dropped while
/// it ran) unless [`TlsHandshake::done`] or [`TlsHandshake::failed`] says otherwise.
#[derive(Debug)]
#[cfg(feature = "tls")]
pub(crate) struct TlsHandshake(bool);

#[cfg(feature = "tls")]
impl TlsHandshake {
    #[inline]
    pub(crate) fn start() -> TlsHandshake {
        TlsHandshake(false)
    }

    /// Completed with TLS 1.3 (`tls13`) or 1.2.
    #[inline]
    pub(crate) fn done(mut self, tls13: bool) {
        self.0 = true;
        add(if tls13 { Counter::TlsDone13 } else { Counter::TlsDone12 }, 1);
    }

    /// Failed: the client closed (`closed`), or an error.
    #[inline]
    pub(crate) fn failed(mut self, closed: bool) {
        self.0 = true;
        add(if closed { Counter::TlsClosed } else { Counter::TlsError }, 1);
    }
}

#[cfg(feature = "tls")]
impl Drop for TlsHandshake {
    #[inline]
    fn drop(&mut self) {
        if !self.0 {
            add(Counter::TlsTimeout, 1);
        }
    }
}

/// The counters now.
pub fn snapshot() -> Stats {
    let mut t = [0u64; COUNTERS];
    for s in SHARDS.lock().unwrap_or_else(|p| p.into_inner()).iter().copied() {
        for (o, a) in t.iter_mut().zip(&s.0) {
            *o = o.wrapping_add(a.load(Ordering::Relaxed));
        }
    }
    let c = |k: Counter| t[k as usize];
    let codes = |first: Counter| -> [u64; CODES] { std::array::from_fn(|i| t[first as usize + i]) };
    let closes = |first: Counter| -> [u64; REASONS] { std::array::from_fn(|i| t[first as usize + i]) };
    let (closes_h1, closes_h2) = (closes(Counter::ClosedH1), closes(Counter::ClosedH2));
    let (closed_h1, closed_h2) = (closes_h1.iter().sum::<u64>(), closes_h2.iter().sum::<u64>());
    let open_h1 = c(Counter::OpenedH1).saturating_sub(closed_h1 + c(Counter::HandedOffH1));
    let open_h2 = c(Counter::OpenedH2).saturating_sub(closed_h2);
    let states = |base: Counter, open: u64| {
        let at = |i: usize| t[base as usize + i];
        let reading = at(READING_IN).saturating_sub(at(READING_OUT));
        let writing = at(WRITING_IN).saturating_sub(at(WRITING_OUT));
        ConnStates { reading, writing, idle: open.saturating_sub(reading + writing) }
    };
    Stats {
        accepted: c(Counter::Accepted),
        open_h1,
        open_h2,
        closed_h1,
        closed_h2,
        states_h1: states(Counter::StateH1, open_h1),
        states_h2: states(Counter::StateH2, open_h2),
        closes_h1,
        closes_h2,
        file_cache_hits: c(Counter::CacheHit),
        file_cache_misses: c(Counter::CacheMiss),
        file_cache_evictions: c(Counter::CacheEviction),
        file_cache_entries: c(Counter::CacheInserted).saturating_sub(c(Counter::CacheEviction)),
        parked: c(Counter::Parked).saturating_sub(c(Counter::Unparked)),
        parked_total: c(Counter::Parked),
        h2_streams: c(Counter::H2StreamOpened),
        h2_streams_open: c(Counter::H2StreamOpened).saturating_sub(c(Counter::H2StreamClosed)),
        h2_resets_sent: codes(Counter::H2ResetSent),
        h2_resets_received: codes(Counter::H2ResetReceived),
        h2_goaways_sent: codes(Counter::H2GoawaySent),
        tls_handshakes_tls12: c(Counter::TlsDone12),
        tls_handshakes_tls13: c(Counter::TlsDone13),
        tls_handshake_errors: c(Counter::TlsError),
        tls_handshake_closed: c(Counter::TlsClosed),
        tls_handshake_timeouts: c(Counter::TlsTimeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_sum_up() {
        let before = snapshot();
        let ts: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    add(Counter::Accepted, 5);
                    h2_reset_sent(8);
                    h2_reset_received(99);
                    h2_goaway_sent(11);
                    let group = std::sync::Arc::new(crate::time::timeout::Group::new(10));
                    let timer = crate::time::timeout::Timer::register(&group, std::time::Duration::from_secs(60));
                    let c = OpenConn::new(true, &timer);
                    c.set_phase(Phase::Send);
                    c.close_as(CloseReason::Abuse);
                    c.close_as(CloseReason::Client);
                    drop(c);
                    let keep = OpenConn::new(false, &timer);
                    keep.set_phase(Phase::Head);
                    std::mem::forget(keep);
                    let h = OpenConn::new(false, &timer);
                    h.set_phase(Phase::App);
                    h.set_phase(Phase::Send);
                    h.set_phase(Phase::Idle);
                    drop(h);
                    TlsHandshake::start().done(true);
                    TlsHandshake::start().failed(true);
                    drop(TlsHandshake::start());
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let after = snapshot();
        assert!(after.accepted >= before.accepted + 20);
        assert!(after.closed_h2 >= before.closed_h2 + 4);
        assert!(after.closes_h2[CloseReason::Abuse as usize] >= before.closes_h2[CloseReason::Abuse as usize] + 4);
        assert!(after.closes_h1[CloseReason::Client as usize] >= before.closes_h1[CloseReason::Client as usize] + 4);
        assert!(after.open_h1 >= 4);
        assert!(after.states_h1.reading >= 4);
        assert!(after.h2_resets_sent[8] >= before.h2_resets_sent[8] + 4);
        assert!(after.h2_resets_received[OTHER_CODE] >= before.h2_resets_received[OTHER_CODE] + 4);
        assert!(after.h2_goaways_sent[11] >= before.h2_goaways_sent[11] + 4);
        assert!(after.tls_handshakes_tls13 >= before.tls_handshakes_tls13 + 4);
        assert!(after.tls_handshake_closed >= before.tls_handshake_closed + 4);
        assert!(after.tls_handshake_timeouts >= before.tls_handshake_timeouts + 4);
    }
}
