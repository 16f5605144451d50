//! Conditional requests (RFC 9110 §13): `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since`, evaluated in the order of §13.2.2.
//!
//! ```text
//! 1. If-Match present:            no strong match              -> 412
//! 2. else If-Unmodified-Since:    modified after the date      -> 412
//! 3. If-None-Match present:       a weak match -> 304 (GET/HEAD) or 412
//! 4. else If-Modified-Since:      (GET/HEAD) not modified since -> 304
//! 5. proceed (If-Range and Range are the caller's next step)
//! ```
//! Invalid dates make their header ignored, as the RFC asks.

/// The conditional headers of a request (raw values).
#[derive(Debug, Default, Clone, Copy)]
pub struct Preconditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a [u8]>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a [u8]>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a [u8]>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a [u8]>,
}

/// What to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Go on with the request.
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// Evaluates `p` for a representation with strong entity tag `etag` (quoted) modified at
/// `modified` (seconds since the epoch). `get_or_head`: the request method is GET or HEAD.
pub fn evaluate(p: &Preconditions<'_>, get_or_head: bool, etag: &[u8], modified: u64) -> Precondition {
    if let Some(v) = p.if_match {
        if !etag_list_matches(v, etag, false) {
            return Precondition::Failed;
        }
    } else if let Some(d) = p.if_unmodified_since.and_then(parse_http_date) {
        if modified > d {
            return Precondition::Failed;
        }
    }
    if let Some(v) = p.if_none_match {
        if etag_list_matches(v, etag, true) {
            return if get_or_head { Precondition::NotModified } else { Precondition::Failed };
        }
    } else if get_or_head {
        if let Some(d) = p.if_modified_since.and_then(parse_http_date) {
            if modified <= d {
                return Precondition::NotModified;
            }
        }
    }
    Precondition::Proceed
}

/// Whether a list of entity tags (or `*`) matches `etag`; `weak` selects the weak
/// comparison (the `W/` prefixes are ignored), else a weak tag never matches.
pub fn etag_list_matches(list: &[u8], etag: &[u8], weak: bool) -> bool {
    let etag = etag.strip_prefix(b"W/").unwrap_or(etag);
    let mut rest = list;
    loop {
        while let [b' ' | b'\t' | b',', r @ ..] = rest {
            rest = r;
        }
        if rest.is_empty() {
            return false;
        }
        if rest[0] == b'*' {
            return true;
        }
        let is_weak = rest.starts_with(b"W/");
        if is_weak {
            rest = &rest[2..];
        }
        if rest.first() != Some(&b'"') {
            return false;
        }
        let Some(end) = rest[1..].iter().position(|&b| b == b'"') else { return false };
        let tag = &rest[..end + 2];
        if tag == etag && (weak || !is_weak) {
            return true;
        }
        rest = &rest[end + 2..];
    }
}

const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')))
}

/// Parses an HTTP-date (RFC 9110 §5.6.7) into seconds since the epoch: the preferred
/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and, as recipients must, the obsolete
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`; two-digit years 70-99 are 19xx, others 20xx)
/// and asctime (`Sun Nov  6 08:49:37 1994`) forms. Anything malformed gives `None` (and
/// the header carrying it is then ignored).
pub fn parse_http_date(s: &[u8]) -> Option<u64> {
    let s = s.strip_suffix(b" ").unwrap_or(s);
    if s.len() == 29 && s[3] == b',' {
        // IMF-fixdate
        if &s[3..5] != b", " || s[7] != b' ' || s[11] != b' ' || s[16] != b' ' || &s[25..] != b" GMT" {
            return None;
        }
        return civil(digits(&s[12..16])?, month(&s[8..11])?, digits(&s[5..7])?, &s[17..25]);
    }
    if let Some(comma) = s.iter().position(|&b| b == b',') {
        // RFC 850: weekday ", " DD "-" Mon "-" YY " " hh:mm:ss " GMT"
        let r = &s[comma..];
        if r.len() != 24 || &r[..2] != b", " || r[4] != b'-' || r[8] != b'-' || r[11] != b' ' || &r[20..] != b" GMT" {
            return None;
        }
        let yy = digits(&r[9..11])?;
        let year = if yy >= 70 { 1900 + yy } else { 2000 + yy };
        return civil(year, month(&r[5..8])?, digits(&r[2..4])?, &r[12..20]);
    }
    // asctime: wkday " " Mon " " (DD | " " D) " " hh:mm:ss " " YYYY
    if s.len() != 24 || s[3] != b' ' || s[7] != b' ' || s[10] != b' ' || s[19] != b' ' {
        return None;
    }
    let day = if s[8] == b' ' { digits(&s[9..10])? } else { digits(&s[8..10])? };
    civil(digits(&s[20..24])?, month(&s[4..7])?, day, &s[11..19])
}

fn month(m: &[u8]) -> Option<u32> {
    MONTHS.iter().position(|x| x[..] == *m).map(|i| i as u32 + 1)
}

/// Seconds since the epoch of a civil date and an `hh:mm:ss` time.
fn civil(year: u32, month: u32, day: u32, time: &[u8]) -> Option<u64> {
    if time.len() != 8 || time[2] != b':' || time[5] != b':' {
        return None;
    }
    let (h, mi, se) = (digits(&time[..2])?, digits(&time[3..5])?, digits(&time[6..8])?);
    if !(1..=31).contains(&day) || h > 23 || mi > 59 || se > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    u64::try_from(days * 86_400 + i64::from(h * 3600 + mi * 60 + se)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::date;

    const ETAG: &[u8] = b"\"1f-5\"";
    const T: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT

    fn pre<'a>(
        im: Option<&'a [u8]>,
        inm: Option<&'a [u8]>,
        ims: Option<&'a [u8]>,
        ius: Option<&'a [u8]>,
    ) -> Preconditions<'a> {
        Preconditions { if_match: im, if_none_match: inm, if_modified_since: ims, if_unmodified_since: ius }
    }

    #[test]
    fn dates_round_trip() {
        assert_eq!(parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(T));
        for secs in [0u64, 951_782_400, 1_700_000_000, 4_102_444_800] {
            let mut out = [0u8; date::DATE_LEN];
            date::render(secs, &mut out);
            assert_eq!(parse_http_date(&out), Some(secs));
        }
        assert_eq!(parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(T));
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(T));
        assert_eq!(parse_http_date(b"Wed Nov 16 08:49:37 1994"), Some(T + 10 * 86_400));
        assert_eq!(parse_http_date(b"Tuesday, 01-Jan-30 00:00:00 GMT"), Some(1_893_456_000));
        for bad in [
            &b""[..],
            b"Sun, 06 Xyz 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sunday, 06-Nov-1994 08:49:37 GMT",
            b"Sun Nov 6 08:49:37 1994",
            b"1994-11-06T08:49:37Z",
        ] {
            assert_eq!(parse_http_date(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn etag_lists() {
        assert!(etag_list_matches(b"*", ETAG, false));
        assert!(etag_list_matches(b"\"x\", \"1f-5\"", ETAG, false));
        assert!(etag_list_matches(b"W/\"1f-5\"", ETAG, true));
        assert!(!etag_list_matches(b"W/\"1f-5\"", ETAG, false));
        assert!(!etag_list_matches(b"\"1f-6\"", ETAG, true));
        assert!(!etag_list_matches(b"1f-5", ETAG, true));
        assert!(!etag_list_matches(b"\"unterminated", ETAG, true));
    }

    #[test]
    fn order_of_evaluation() {
        use Precondition::*;
        let date: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
        let earlier: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";
        assert_eq!(evaluate(&pre(None, None, None, None), true, ETAG, T), Proceed);
        assert_eq!(evaluate(&pre(None, Some(ETAG), None, None), true, ETAG, T), NotModified);
        assert_eq!(evaluate(&pre(None, Some(ETAG), None, None), false, ETAG, T), Failed);
        assert_eq!(evaluate(&pre(None, None, Some(date), None), true, ETAG, T), NotModified);
        assert_eq!(evaluate(&pre(None, None, Some(earlier), None), true, ETAG, T), Proceed);
        assert_eq!(evaluate(&pre(None, None, Some(date), None), false, ETAG, T), Proceed);
        // If-None-Match wins over If-Modified-Since.
        assert_eq!(evaluate(&pre(None, Some(b"\"other\""), Some(date), None), true, ETAG, T), Proceed);
        assert_eq!(evaluate(&pre(Some(b"\"other\""), None, None, None), true, ETAG, T), Failed);
        assert_eq!(evaluate(&pre(Some(ETAG), None, None, Some(earlier)), true, ETAG, T), Proceed);
        assert_eq!(evaluate(&pre(None, None, None, Some(earlier)), true, ETAG, T), Failed);
        assert_eq!(evaluate(&pre(None, None, Some(b"garbage"), Some(b"junk")), true, ETAG, T), Proceed);
    }
}
