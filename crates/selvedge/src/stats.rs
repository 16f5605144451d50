//! The engine's counters, for embedders to export their own way ([`snapshot`]): connections
//! accepted, open by protocol and parked, HTTP/2 streams and the RST_STREAM and GOAWAY
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    ClosedH1,
    ClosedH2,
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
}

const COUNTERS: usize = Counter::TlsTimeout as usize + 1;

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

static SHARDS: Mutex<Vec<Arc<Shard>>> = Mutex::new(Vec::new());

thread_local! {
    static SHARD: Arc<Shard> = {
        let s = Arc::new(Shard::default());
        SHARDS.lock().unwrap_or_else(|p| p.into_inner()).push(s.clone());
        s
    };
}

/// Adds `n` to this thread's `c`.
#[inline]
pub(crate) fn add(c: Counter, n: u64) {
    add_at(c as usize, n);
}

#[inline]
fn add_at(i: usize, n: u64) {
    // A thread being torn down no longer counts.
    let _ = SHARD.try_with(|s| {
        let a = &s.0[i];
        a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    });
}

/// Counts a connection of one protocol as open while it lives.
#[derive(Debug)]
pub(crate) struct OpenConn(bool);

impl OpenConn {
    /// An HTTP/1.x (`h2 == false`) or HTTP/2 connection begins.
    #[inline]
    pub(crate) fn new(h2: bool) -> OpenConn {
        add(if h2 { Counter::OpenedH2 } else { Counter::OpenedH1 }, 1);
        OpenConn(h2)
    }

    /// An HTTP/1.1 connection that becomes HTTP/2 (`Upgrade: h2c`, a prior-knowledge
    /// preface): it leaves the HTTP/1.x counts without counting as closed.
    #[inline]
    pub(crate) fn hand_off(self) {
        add(Counter::HandedOffH1, 1);
        std::mem::forget(self);
    }
}

impl Drop for OpenConn {
    #[inline]
    fn drop(&mut self) {
        add(if self.0 { Counter::ClosedH2 } else { Counter::ClosedH1 }, 1);
    }
}

/// Counts one TLS handshake's outcome: a timeout (the connection's task dropped while
/// it ran) unless [`TlsHandshake::done`] or [`TlsHandshake::failed`] says otherwise.
#[derive(Debug)]
pub(crate) struct TlsHandshake(bool);

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
    for s in SHARDS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        for (o, a) in t.iter_mut().zip(&s.0) {
            *o = o.wrapping_add(a.load(Ordering::Relaxed));
        }
    }
    let c = |k: Counter| t[k as usize];
    let codes = |first: Counter| -> [u64; CODES] { std::array::from_fn(|i| t[first as usize + i]) };
    Stats {
        accepted: c(Counter::Accepted),
        open_h1: c(Counter::OpenedH1).saturating_sub(c(Counter::ClosedH1) + c(Counter::HandedOffH1)),
        open_h2: c(Counter::OpenedH2).saturating_sub(c(Counter::ClosedH2)),
        closed_h1: c(Counter::ClosedH1),
        closed_h2: c(Counter::ClosedH2),
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
                    let c = OpenConn::new(true);
                    drop(c);
                    let _keep = std::mem::ManuallyDrop::new(OpenConn::new(false));
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
        assert!(after.open_h1 >= 4);
        assert!(after.h2_resets_sent[8] >= before.h2_resets_sent[8] + 4);
        assert!(after.h2_resets_received[OTHER_CODE] >= before.h2_resets_received[OTHER_CODE] + 4);
        assert!(after.h2_goaways_sent[11] >= before.h2_goaways_sent[11] + 4);
        assert!(after.tls_handshakes_tls13 >= before.tls_handshakes_tls13 + 4);
        assert!(after.tls_handshake_closed >= before.tls_handshake_closed + 4);
        assert!(after.tls_handshake_timeouts >= before.tls_handshake_timeouts + 4);
    }
}
