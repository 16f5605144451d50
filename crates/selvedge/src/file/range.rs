//! `Range` and `If-Range` (RFC 9110 §14.2, §13.1.5), as pure functions.
//!
//! ```text
//! Range          = ranges-specifier
//! ranges-specifier = range-unit "=" range-set
//! range-set      = 1#range-spec
//! range-spec     = int-range / suffix-range / other-range
//! int-range      = first-pos "-" [ last-pos ]
//! suffix-range   = "-" suffix-length
//! ```
//! A malformed header, another unit, or more than [`MAX_RANGES`] ranges is ignored (the
//! whole representation is sent, as §14.2 allows); a well-formed set with no satisfiable
//! range is a 416. Several ranges are put in order and coalesced where they overlap or lie
//! closer than a part's own overhead ([`COALESCE_GAP`], as §14.6 allows), and a set that
//! asks for more bytes in all than the representation has (overlapping ranges that would
//! repeat it) is ignored too: no answer to a short request is larger than the file.

use super::conditional::parse_http_date;

/// More ranges than this and the header is ignored (a guard against range amplification).
pub const MAX_RANGES: usize = 16;

/// Ranges closer than this (in bytes) are sent as one: about what a part's head costs.
pub const COALESCE_GAP: u64 = 80;

/// One satisfiable range: `len` bytes from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Number of bytes (at least 1).
    pub len: u64,
}

impl ByteRange {
    /// Last byte (inclusive), as in `Content-Range`.
    pub fn last(&self) -> u64 {
        self.start + self.len - 1
    }
}

/// The outcome of a `Range` header against a representation of `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable `Range`: send the whole representation (200).
    Ignore,
    /// One or more satisfiable ranges (206): one as asked, several in ascending order,
    /// coalesced, never overlapping.
    Satisfiable(Vec<ByteRange>),
    /// Well formed but nothing satisfiable (416 with `Content-Range: bytes */size`).
    Unsatisfiable,
}

fn num(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Parses a `Range` header value for a representation of `size` bytes.
pub fn parse(value: &[u8], size: u64) -> Ranges {
    let value = trim(value);
    if value.len() < 6 || !value[..6].eq_ignore_ascii_case(b"bytes=") {
        return Ranges::Ignore;
    }
    let mut out = Vec::new();
    let mut specs = 0usize;
    for spec in value[6..].split(|&b| b == b',') {
        let spec = trim(spec);
        if spec.is_empty() {
            continue;
        }
        specs += 1;
        if specs > MAX_RANGES {
            return Ranges::Ignore;
        }
        let Some(dash) = spec.iter().position(|&b| b == b'-') else { return Ranges::Ignore };
        let (a, b) = (&spec[..dash], &spec[dash + 1..]);
        if a.is_empty() {
            let Some(n) = num(b) else { return Ranges::Ignore };
            if n > 0 && size > 0 {
                let len = n.min(size);
                out.push(ByteRange { start: size - len, len });
            }
            continue;
        }
        let Some(first) = num(a) else { return Ranges::Ignore };
        let last = if b.is_empty() {
            u64::MAX
        } else {
            match num(b) {
                Some(l) if l >= first => l,
                _ => return Ranges::Ignore,
            }
        };
        if first < size {
            out.push(ByteRange { start: first, len: last.min(size - 1) - first + 1 });
        }
    }
    if specs == 0 {
        Ranges::Ignore
    } else if out.is_empty() {
        Ranges::Unsatisfiable
    } else if out.len() > 1 && out.iter().map(|r| r.len).fold(0u64, u64::saturating_add) > size {
        // More than the whole: only overlaps do that (range amplification).
        Ranges::Ignore
    } else {
        Ranges::Satisfiable(coalesce(out))
    }
}

/// Sorts `rs` by start and merges those that overlap or lie within [`COALESCE_GAP`].
fn coalesce(mut rs: Vec<ByteRange>) -> Vec<ByteRange> {
    if rs.len() < 2 {
        return rs;
    }
    rs.sort_unstable_by_key(|r| r.start);
    let mut out: Vec<ByteRange> = Vec::with_capacity(rs.len());
    for r in rs {
        match out.last_mut() {
            Some(last) if r.start <= (last.start + last.len).saturating_add(COALESCE_GAP) => {
                let end = (last.start + last.len).max(r.start + r.len);
                last.len = end - last.start;
            }
            _ => out.push(r),
        }
    }
    out
}

/// Whether an `If-Range` value lets the `Range` apply: a strong entity tag equal to
/// `etag`, or an HTTP-date equal to `last_modified` (§13.1.5). Weak tags never match.
pub fn if_range_matches(value: &[u8], etag: &[u8], last_modified: u64) -> bool {
    let value = trim(value);
    if value.starts_with(b"\"") {
        return value == etag;
    }
    if value.starts_with(b"W/") {
        return false;
    }
    parse_http_date(value) == Some(last_modified)
}

/// `Content-Range` for a range of a representation of `size` bytes.
pub fn content_range(r: ByteRange, size: u64) -> String {
    format!("bytes {}-{}/{size}", r.start, r.last())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, len: u64) -> ByteRange {
        ByteRange { start, len }
    }

    macro_rules! cases {
        ($($name:ident: $value:expr, $size:expr => $want:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(parse($value, $size), $want);
            }
        )*};
    }

    cases! {
        first_bytes: b"bytes=0-499", 1000 => Ranges::Satisfiable(vec![r(0, 500)]);
        open_ended: b"bytes=900-", 1000 => Ranges::Satisfiable(vec![r(900, 100)]);
        suffix: b"bytes=-100", 1000 => Ranges::Satisfiable(vec![r(900, 100)]);
        suffix_longer_than_file: b"bytes=-5000", 1000 => Ranges::Satisfiable(vec![r(0, 1000)]);
        last_clamped: b"bytes=990-5000", 1000 => Ranges::Satisfiable(vec![r(990, 10)]);
        several: b"bytes=0-0, -1 ,200-300", 1000 => Ranges::Satisfiable(vec![r(0, 1), r(200, 101), r(999, 1)]);
        several_coalesced: b"bytes=0-0, -1 ,500-", 1000 => Ranges::Satisfiable(vec![r(0, 1), r(500, 500)]);
        overlapping_merge: b"bytes=100-199,150-299,0-9", 1000 => Ranges::Satisfiable(vec![r(0, 10), r(100, 200)]);
        near_merge: b"bytes=0-9,90-99", 1000 => Ranges::Satisfiable(vec![r(0, 100)]);
        apart: b"bytes=0-9,91-99", 1000 => Ranges::Satisfiable(vec![r(0, 10), r(91, 9)]);
        repeated_small: b"bytes=0-0,0-0,0-0", 1000 => Ranges::Satisfiable(vec![r(0, 1)]);
        more_than_the_whole: b"bytes=0-,0-", 1000 => Ranges::Ignore;
        sixteen_whole: b"bytes=0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-", 520_000 => Ranges::Ignore;
        overlap_over_the_size: b"bytes=0-599,400-999", 1000 => Ranges::Ignore;
        overlap_within_the_size: b"bytes=0-499,400-449", 1000 => Ranges::Satisfiable(vec![r(0, 500)]);
        unit_case: b"Bytes=1-1", 3 => Ranges::Satisfiable(vec![r(1, 1)]);
        empty_elements: b"bytes=,0-1,", 3 => Ranges::Satisfiable(vec![r(0, 2)]);
        some_unsatisfiable: b"bytes=5000-6000,0-0", 1000 => Ranges::Satisfiable(vec![r(0, 1)]);
        past_end: b"bytes=1000-", 1000 => Ranges::Unsatisfiable;
        zero_suffix: b"bytes=-0", 1000 => Ranges::Unsatisfiable;
        empty_file: b"bytes=0-", 0 => Ranges::Unsatisfiable;
        reversed: b"bytes=5-1", 1000 => Ranges::Ignore;
        other_unit: b"items=0-1", 1000 => Ranges::Ignore;
        no_dash: b"bytes=5", 1000 => Ranges::Ignore;
        junk: b"bytes=a-b", 1000 => Ranges::Ignore;
        negative: b"bytes=--5", 1000 => Ranges::Ignore;
        overflow: b"bytes=99999999999999999999-", 1000 => Ranges::Ignore;
        nothing: b"bytes=", 1000 => Ranges::Ignore;
        too_many: b"bytes=0-0,1-1,2-2,3-3,4-4,5-5,6-6,7-7,8-8,9-9,10-10,11-11,12-12,13-13,14-14,15-15,16-16", 100 => Ranges::Ignore;
    }

    #[test]
    fn if_range() {
        let lm = parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert!(if_range_matches(b"\"abc\"", b"\"abc\"", lm));
        assert!(!if_range_matches(b"\"abd\"", b"\"abc\"", lm));
        assert!(!if_range_matches(b"W/\"abc\"", b"\"abc\"", lm));
        assert!(if_range_matches(b"Sun, 06 Nov 1994 08:49:37 GMT", b"\"abc\"", lm));
        assert!(!if_range_matches(b"Sun, 06 Nov 1994 08:49:38 GMT", b"\"abc\"", lm));
        assert!(!if_range_matches(b"garbage", b"\"abc\"", lm));
        assert_eq!(content_range(r(0, 500), 1000), "bytes 0-499/1000");
    }
}
