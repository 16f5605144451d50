//! The `Date` field's value (RFC 9110 §5.6.7, IMF-fixdate), and where composers take it
//! from: the engine passes its once-a-second shared cache, tests and benches a fixed date.

/// Length of an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const DATE_LEN: usize = 29;

/// Where a composer takes the current date from.
pub trait DateSource {
    /// Which rendering [`current`](DateSource::current) gives: it changes whenever the date
    /// does, so a caller may keep what it rendered from one version. 0: keep nothing.
    /// Versions of different sources must not collide (the engine's are even).
    fn version(&self) -> u64;
    /// Copies the current date into `out`.
    fn current(&self, out: &mut [u8; DATE_LEN]);
}

/// One date, always: for tests and benches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedDate {
    secs: u64,
}

impl FixedDate {
    /// The date `secs` seconds after the Unix epoch.
    pub const fn at(secs: u64) -> FixedDate {
        FixedDate { secs }
    }
}

impl DateSource for FixedDate {
    #[inline]
    fn version(&self) -> u64 {
        // Odd, unlike the engine's versions.
        (self.secs << 1) | 1
    }

    fn current(&self, out: &mut [u8; DATE_LEN]) {
        render(self.secs, out)
    }
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

/// The length of an RFC 3339 UTC time, `2026-11-28T14:20:00Z`.
pub const RFC3339_LEN: usize = 20;

/// Renders `secs` since the Unix epoch as an RFC 3339 time in UTC (`2026-11-28T14:20:00Z`).
pub fn render_rfc3339(secs: u64, out: &mut [u8; RFC3339_LEN]) {
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    let put = |o: &mut [u8], v: u64| {
        for (i, b) in o.iter_mut().rev().enumerate() {
            *b = b'0' + (v / 10u64.pow(i as u32) % 10) as u8;
        }
    };
    put(&mut out[0..4], y as u64);
    out[4] = b'-';
    put(&mut out[5..7], u64::from(m));
    out[7] = b'-';
    put(&mut out[8..10], u64::from(d));
    out[10] = b'T';
    put(&mut out[11..13], rem / 3600);
    out[13] = b':';
    put(&mut out[14..16], rem / 60 % 60);
    out[16] = b':';
    put(&mut out[17..19], rem % 60);
    out[19] = b'Z';
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

    #[test]
    fn rfc3339() {
        let mut out = [0; RFC3339_LEN];
        render_rfc3339(0, &mut out);
        assert_eq!(&out, b"1970-01-01T00:00:00Z");
        render_rfc3339(1_795_875_600, &mut out);
        assert_eq!(&out, b"2026-11-28T14:20:00Z");
    }

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
}
