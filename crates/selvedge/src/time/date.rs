//! The `Date` header value, rendered at most once a second and shared by every thread.
//!
//! The timeout manager's thread calls [`refresh`] on each tick; it renders the IMF-fixdate
//! (RFC 9110 §5.6.7) only when the second changed. Readers copy the 29 bytes out of a
//! sequence lock made of atomics: no mutex, no allocation, two extra loads per response.
//! Before any server runs (unit tests, benches) readers render the date themselves.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use selvedge_proto::date::{render, DATE_LEN};

struct Shared {
    /// Even: stable; odd: a writer is inside.
    seq: AtomicU64,
    /// The second the words hold, 0 before the first render.
    secs: AtomicU64,
    words: [AtomicU64; 4],
}

static SHARED: Shared = Shared {
    seq: AtomicU64::new(0),
    secs: AtomicU64::new(0),
    words: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
};

/// Renders the date for `now` into the shared cache if its second differs from the cached one.
pub fn refresh(now: SystemTime) {
    let secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    if SHARED.secs.load(Ordering::Relaxed) == secs {
        return;
    }
    let seq = SHARED.seq.load(Ordering::Relaxed);
    if seq & 1 == 1 || SHARED.seq.compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return; // another writer is rendering the same second
    }
    fence(Ordering::Release);
    let mut bytes = [0u8; 32];
    render(secs, (&mut bytes[..DATE_LEN]).try_into().expect("29 bytes"));
    for (i, w) in SHARED.words.iter().enumerate() {
        let chunk: [u8; 8] = bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes");
        w.store(u64::from_ne_bytes(chunk), Ordering::Relaxed);
    }
    SHARED.secs.store(secs, Ordering::Relaxed);
    SHARED.seq.store(seq + 2, Ordering::Release);
}

/// Which rendering the shared cache holds: it changes whenever the date does. 0 means no
/// server is ticking, so callers must not cache anything on it.
#[inline]
pub fn version() -> u64 {
    let seq = SHARED.seq.load(Ordering::Acquire);
    if seq & 1 == 1 {
        0
    } else {
        seq
    }
}

/// The shared cache as the protocol composers take their `Date` from it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SharedDate;

impl selvedge_proto::date::DateSource for SharedDate {
    #[inline]
    fn version(&self) -> u64 {
        version()
    }

    #[inline]
    fn current(&self, out: &mut [u8; DATE_LEN]) {
        current(out)
    }
}

/// Copies the current date into `out`.
pub fn current(out: &mut [u8; DATE_LEN]) {
    for _ in 0..4 {
        let s1 = SHARED.seq.load(Ordering::Acquire);
        if s1 & 1 == 0 && SHARED.secs.load(Ordering::Relaxed) != 0 {
            let mut bytes = [0u8; 32];
            for (i, w) in SHARED.words.iter().enumerate() {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
            }
            fence(Ordering::Acquire);
            if SHARED.seq.load(Ordering::Relaxed) == s1 {
                out.copy_from_slice(&bytes[..DATE_LEN]);
                return;
            }
        }
        std::hint::spin_loop();
    }
    // No server is ticking (or a writer is slow): render it here.
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    render(secs, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_then_read_matches_render() {
        let now = SystemTime::now();
        refresh(now);
        let mut out = [0u8; DATE_LEN];
        current(&mut out);
        let secs = now.duration_since(UNIX_EPOCH).unwrap().as_secs();
        // The cache may already hold a later second from another test's refresh.
        let mut expect = [0u8; DATE_LEN];
        render(secs, &mut expect);
        let mut later = [0u8; DATE_LEN];
        render(secs + 1, &mut later);
        assert!(out == expect || out == later, "{:?}", std::str::from_utf8(&out));
    }
}
