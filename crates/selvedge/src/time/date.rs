//! The `Date` header value, rendered at most once a second and shared by every thread.
//!
//! The timeout manager's thread calls [`refresh`] on each tick; it renders the IMF-fixdate
//! (RFC 9110 §5.6.7) only when the second changed. Readers copy the 29 bytes out of a
//! sequence lock made of atomics: no mutex, no allocation, two extra loads per response.
//! Before any server runs (unit tests, benches) readers render the date themselves.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

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

const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// Renders `secs` since the Unix epoch as an IMF-fixdate.
pub fn render(secs: u64, out: &mut [u8; DATE_LEN]) {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    let two = |v: u64, o: &mut [u8]| {
        o[0] = b'0' + (v / 10) as u8;
        o[1] = b'0' + (v % 10) as u8;
    };
    out[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    out[3..5].copy_from_slice(b", ");
    two(d as u64, &mut out[5..7]);
    out[7] = b' ';
    out[8..11].copy_from_slice(MONTHS[(m - 1) as usize]);
    out[11] = b' ';
    let y = y as u64;
    two(y / 100 % 100, &mut out[12..14]);
    two(y % 100, &mut out[14..16]);
    out[16] = b' ';
    two(rem / 3600, &mut out[17..19]);
    out[19] = b':';
    two(rem / 60 % 60, &mut out[20..22]);
    out[22] = b':';
    two(rem % 60, &mut out[23..25]);
    out[25..].copy_from_slice(b" GMT");
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> String {
        let mut out = [0u8; DATE_LEN];
        render(secs, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn renders_known_dates() {
        assert_eq!(s(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(s(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(s(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(s(1_795_305_599), "Sat, 21 Nov 2026 23:59:59 GMT");
    }

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
