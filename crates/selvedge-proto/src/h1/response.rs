//! The client role's response-head parser (RFC 9112 §4, §5, §6): strict and zero-copy,
//! for the server's proxy reading its upstreams' answers (the server role's request heads
//! are [`parse`](super::parse)'s; both share the message vocabulary and byte tables).
//!
//! It looks at the bytes received so far and says "complete", "need more" or
//! "invalid". Anything whose framing could be read two ways is invalid, so nothing
//! ambiguous is ever relayed to a client:
//!
//! ```text
//! status-line = HTTP-version SP 3DIGIT SP [ reason-phrase ] CRLF   (HTTP/1.0 or HTTP/1.1)
//! field-line  = field-name ":" OWS field-value OWS CRLF
//! ```
//!
//! Rejected: bare LF or CR, obs-fold (a line starting with SP/HTAB), whitespace before the
//! colon, control characters in values, a `Content-Length` that is not plain digits or is
//! repeated (even with the same value), `Transfer-Encoding` together with `Content-Length`,
//! `Transfer-Encoding` in an HTTP/1.0 response, codings other than one final `chunked`
//! (we re-frame bodies, so we cannot pass other transfer codings on), heads over the size or
//! field-count limit.

use crate::message::{HeaderSpan, Span};

/// Limits on a response head.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Largest head, in bytes.
    pub max_head: usize,
    /// Most header fields.
    pub max_headers: usize,
}

/// A parsed response head (its fields are in the vector given to [`parse`]).
#[derive(Debug)]
pub struct ResponseHead {
    /// Length of the head, blank line included.
    pub len: usize,
    /// The status code (100..=999).
    pub status: u16,
    /// `true` for HTTP/1.1, `false` for HTTP/1.0.
    pub http11: bool,
    /// `Content-Length`, if present.
    pub content_length: Option<u64>,
    /// `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// `Connection: close` was sent.
    pub conn_close: bool,
    /// `Connection` names other fields (they are hop-by-hop and not relayed).
    pub conn_names_fields: bool,
}

impl ResponseHead {
    /// Whether the upstream will keep the connection open after this response.
    pub fn keep_alive(&self) -> bool {
        self.http11 && !self.conn_close
    }
}

/// Why a head is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed or ambiguous.
    Invalid(&'static str),
    /// Over [`HeadLimits`].
    TooLarge,
}

/// The parse result: `Ok(None)` means more bytes are needed.
pub type Parsed = Result<Option<ResponseHead>, HeadError>;

use crate::message::{TCHAR, VALUE};

use HeadError::Invalid;

/// Parses a response head from the start of `buf`; its fields go to `fields` (cleared
/// first; a vector the caller keeps, so parsing allocates nothing), as spans of `buf`.
///
/// # Errors
/// [`HeadError`] when the bytes cannot be a valid, unambiguous response head.
pub fn parse(buf: &[u8], limits: &HeadLimits, fields: &mut Vec<HeaderSpan>) -> Parsed {
    fields.clear();
    let r = parse_inner(buf, limits, fields);
    match r {
        Ok(None) if buf.len() >= limits.max_head => Err(HeadError::TooLarge),
        Ok(Some(h)) if h.len > limits.max_head => Err(HeadError::TooLarge),
        r => r,
    }
}

/// Position after a CRLF at `at`; `Ok(None)` if the buffer ends first.
#[inline]
fn crlf(buf: &[u8], at: usize) -> Result<Option<usize>, HeadError> {
    match (buf.get(at), buf.get(at + 1)) {
        (Some(b'\r'), Some(b'\n')) => Ok(Some(at + 2)),
        (Some(b'\r'), None) => Ok(None),
        (None, _) => Ok(None),
        _ => Err(Invalid("bare CR or LF")),
    }
}

/// Advances from `at` while `table` accepts; the position of the first other byte, or
/// `None` at the end of input.
#[inline]
fn scan(buf: &[u8], mut at: usize, table: &[bool; 256]) -> Option<usize> {
    while let Some(&b) = buf.get(at) {
        if !table[b as usize] {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// [`scan`] over [`VALUE`], eight bytes at a time while a word holds no control byte
/// (below 0x20, or 0x7f: the only bytes, with HTAB, that `VALUE` refuses).
#[inline]
fn scan_value(buf: &[u8], mut at: usize) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    while let Some(w) = buf.get(at..at + 8) {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        // Non-zero iff some byte is below 0x20 / equal to 0x7f (exact for thresholds <= 0x80);
        // the lowest flag is the first such byte (flags above it may be wrong).
        let below_space = x.wrapping_sub(LO * 0x20) & !x & HI;
        let del = x ^ (LO * 0x7f);
        let is_del = del.wrapping_sub(LO) & !del & HI;
        let stop = below_space | is_del;
        if stop == 0 {
            at += 8;
            continue;
        }
        // The first control byte: the end of the value, unless it is an HTAB (allowed).
        at += (stop.trailing_zeros() / 8) as usize;
        if buf[at] != b'\t' {
            return Some(at);
        }
        at += 1;
    }
    scan(buf, at, &VALUE)
}

macro_rules! need {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

fn parse_inner(buf: &[u8], limits: &HeadLimits, fields: &mut Vec<HeaderSpan>) -> Parsed {
    // HTTP-version SP
    let prefix = b"HTTP/1.";
    let have = &buf[..buf.len().min(prefix.len())];
    if have != &prefix[..have.len()] {
        return Err(Invalid("not an HTTP/1.x status line"));
    }
    let (Some(&minor), Some(&sp)) = (buf.get(7), buf.get(8)) else { return Ok(None) };
    let http11 = match minor {
        b'1' => true,
        b'0' => false,
        _ => return Err(Invalid("unsupported HTTP version")),
    };
    if sp != b' ' {
        return Err(Invalid("invalid status line"));
    }
    // 3DIGIT
    let Some(code) = buf.get(9..12) else {
        if buf[9..].iter().all(u8::is_ascii_digit) {
            return Ok(None);
        }
        return Err(Invalid("invalid status code"));
    };
    if !code.iter().all(u8::is_ascii_digit) {
        return Err(Invalid("invalid status code"));
    }
    let status = code.iter().fold(0u16, |n, &d| n * 10 + (d - b'0') as u16);
    if status < 100 {
        return Err(Invalid("invalid status code"));
    }
    // [ SP reason-phrase ] CRLF (a missing SP before an empty reason is tolerated: it is not
    // ambiguous).
    let mut at = 12;
    match buf.get(at) {
        None => return Ok(None),
        Some(b' ') => {
            at = need!(scan_value(buf, at + 1));
        }
        Some(b'\r') => {}
        Some(_) => return Err(Invalid("invalid status line")),
    }
    at = need!(crlf(buf, at)?);

    let mut head = ResponseHead {
        len: 0,
        status,
        http11,
        content_length: None,
        chunked: false,
        conn_close: false,
        conn_names_fields: false,
    };
    let mut te_seen = false;
    loop {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'\r' | b'\n') => {
                at = need!(crlf(buf, at)?);
                break;
            }
            Some(b' ' | b'\t') => return Err(Invalid("obs-fold or leading whitespace")),
            Some(_) => {}
        }
        if fields.len() >= limits.max_headers {
            return Err(HeadError::TooLarge);
        }
        let n_start = at;
        at = need!(scan(buf, at, &TCHAR));
        if buf[at] != b':' {
            return Err(Invalid(if matches!(buf[at], b' ' | b'\t') {
                "whitespace before colon"
            } else {
                "invalid field name"
            }));
        }
        if at == n_start {
            return Err(Invalid("empty field name"));
        }
        let name = &buf[n_start..at];
        at += 1;
        while matches!(buf.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let v_start = at;
        at = need!(scan_value(buf, at));
        let mut v_end = at;
        while v_end > v_start && matches!(buf[v_end - 1], b' ' | b'\t') {
            v_end -= 1;
        }
        at = need!(crlf(buf, at)?);
        let value = &buf[v_start..v_end];
        fields.push(HeaderSpan { name: span(n_start, name.len()), value: span(v_start, value.len()) });

        let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
        match name.len() {
            14 if is(b"content-length") => {
                if head.content_length.is_some() {
                    return Err(Invalid("repeated Content-Length"));
                }
                head.content_length = Some(content_length(value)?);
            }
            17 if is(b"transfer-encoding") => {
                te_seen = true;
                for coding in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if coding.is_empty() {
                        continue;
                    }
                    if head.chunked || !coding.eq_ignore_ascii_case(b"chunked") {
                        return Err(Invalid("transfer coding other than one final chunked"));
                    }
                    head.chunked = true;
                }
            }
            10 if is(b"connection") => {
                for opt in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if opt.eq_ignore_ascii_case(b"close") {
                        head.conn_close = true;
                    } else if !opt.is_empty() && !opt.eq_ignore_ascii_case(b"keep-alive") {
                        head.conn_names_fields = true;
                    }
                }
            }
            _ => {}
        }
    }
    if te_seen {
        if !head.http11 {
            return Err(Invalid("Transfer-Encoding in an HTTP/1.0 response"));
        }
        if head.content_length.is_some() {
            return Err(Invalid("both Content-Length and Transfer-Encoding"));
        }
        if !head.chunked {
            return Err(Invalid("empty Transfer-Encoding"));
        }
    }
    head.len = at;
    Ok(Some(head))
}

#[inline]
fn span(start: usize, len: usize) -> Span {
    Span { start: start as u32, len: len as u32 }
}

/// `Content-Length = 1*DIGIT`, at most 19 digits (no sign, no list, no spaces inside).
fn content_length(v: &[u8]) -> Result<u64, HeadError> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Invalid("invalid Content-Length"));
    }
    Ok(v.iter().fold(0u64, |n, &d| n * 10 + (d - b'0') as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits { max_head: 1024, max_headers: 8 };

    fn ok(raw: &str) -> (ResponseHead, Vec<HeaderSpan>) {
        ok_bytes(raw.as_bytes())
    }

    fn ok_bytes(raw: &[u8]) -> (ResponseHead, Vec<HeaderSpan>) {
        let mut fields = Vec::new();
        match parse(raw, &LIMITS, &mut fields) {
            Ok(Some(h)) => (h, fields),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(raw)),
        }
    }

    #[test]
    fn complete_heads() {
        let raw = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b c \r\n\r\nhello";
        let (h, fields) = ok(raw);
        assert_eq!((h.status, h.http11, h.content_length, h.chunked), (200, true, Some(5), false));
        assert_eq!(h.len, raw.len() - 5);
        let v = fields[1].value;
        assert_eq!(&raw.as_bytes()[v.range()], b"b c");
        assert!(h.keep_alive());
        let (h, _) = ok("HTTP/1.0 404 Not Found\r\n\r\n");
        assert_eq!((h.status, h.http11, h.keep_alive()), (404, false, false));
        let (h, _) = ok("HTTP/1.1 204\r\n\r\n");
        assert_eq!(h.status, 204);
        let (h, _) = ok("HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\nConnection: close, X-Foo\r\n\r\n");
        assert!(h.chunked && h.conn_close && h.conn_names_fields && !h.keep_alive());
        let (h, _) = ok("HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(h.status, 100);
        let (_, fields) = ok_bytes(b"HTTP/1.1 200 Ok\r\nReason: \xff obs-text\r\n\r\n");
        assert_eq!(fields.len(), 1);
    }

    #[test]
    fn partial_heads_need_more() {
        let full = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding\r\n";
        let good = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        for i in 0..good.len() {
            assert!(matches!(parse(&good.as_bytes()[..i], &LIMITS, &mut Vec::new()), Ok(None)), "prefix {i}");
        }
        // Every prefix of an invalid head is either partial or invalid, never complete.
        for i in 0..full.len() {
            assert!(!matches!(parse(&full.as_bytes()[..i], &LIMITS, &mut Vec::new()), Ok(Some(_))), "prefix {i}");
        }
    }

    macro_rules! rejects {
        ($($name:ident: $raw:expr;)*) => {$(
            #[test]
            fn $name() {
                let r = parse($raw, &LIMITS, &mut Vec::new());
                assert!(r.is_err(), "{:?} -> {r:?}", String::from_utf8_lossy($raw));
            }
        )*};
    }

    rejects! {
        not_http: b"HTTX/1.1 200 OK\r\n\r\n";
        http2_version: b"HTTP/2.0 200 OK\r\n\r\n";
        http12: b"HTTP/1.2 200 OK\r\n\r\n";
        short_status: b"HTTP/1.1 20 OK\r\n\r\n";
        status_below_100: b"HTTP/1.1 099 OK\r\n\r\n";
        status_letters: b"HTTP/1.1 2x0 OK\r\n\r\n";
        bare_lf_status: b"HTTP/1.1 200 OK\n\r\n";
        bare_lf_field: b"HTTP/1.1 200 OK\r\nA: b\n\r\n";
        bare_cr_value: b"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n";
        nul_in_value: b"HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n";
        ctl_in_reason: b"HTTP/1.1 200 O\x01K\r\n\r\n";
        obs_fold: b"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n";
        space_before_colon: b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n";
        empty_name: b"HTTP/1.1 200 OK\r\n: 5\r\n\r\n";
        bad_name: b"HTTP/1.1 200 OK\r\nA\"b: 5\r\n\r\n";
        repeated_cl_same: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
        repeated_cl_diff: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
        cl_list: b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n";
        cl_sign: b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n";
        cl_empty: b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n";
        cl_huge: b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n";
        cl_hex: b"HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n";
        te_and_cl: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        cl_and_te: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n";
        te_gzip: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        te_chunked_twice: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n";
        te_not_final: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n";
        te_identity: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n";
        te_empty: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n";
        te_in_http10: b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        te_lookalike: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunked\r\n\r\n";
        too_many_headers: b"HTTP/1.1 200 OK\r\na:1\r\nb:1\r\nc:1\r\nd:1\r\ne:1\r\nf:1\r\ng:1\r\nh:1\r\ni:1\r\n\r\n";
    }

    #[test]
    fn word_scan_agrees_with_the_table() {
        // Every byte value at every offset of a 24-byte run of 'a's.
        for b in 0..=255u8 {
            for pos in 0..24 {
                let mut v = vec![b'a'; 24];
                v[pos] = b;
                let want = scan(&v, 0, &VALUE);
                assert_eq!(scan_value(&v, 0), want, "byte {b:#x} at {pos}");
            }
        }
        // An HTAB (allowed) before the byte, in the same word or an earlier one.
        for b in [b'\r', b'\n', 0, 0x1f, 0x7f, b'\t', b'x'] {
            for tab in 0..16 {
                for pos in tab + 1..24 {
                    let mut v = vec![b'a'; 24];
                    v[tab] = b'\t';
                    v[pos] = b;
                    assert_eq!(scan_value(&v, 0), scan(&v, 0, &VALUE), "tab at {tab}, byte {b:#x} at {pos}");
                }
            }
        }
    }

    /// Mutated valid heads and random bytes: never a panic, and a complete head always
    /// lies within the buffer with its fields inside it.
    #[test]
    fn arbitrary_bytes_never_panic() {
        let seeds: [&[u8]; 3] = [
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 204 No\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 301 Moved\r\nLocation: /x\r\nConnection: close, a\r\n\r\n",
        ];
        let alphabet = b"HTP/1.0 9\r\n:\t,;\x00\x7f\xffchunkedContent-LengthTransfer-Encoding";
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut fields = Vec::new();
        for i in 0..20_000 {
            let mut buf = seeds[i % seeds.len()].to_vec();
            for _ in 0..(rnd() % 4 + 1) {
                let at = rnd() as usize % (buf.len() + 1);
                let b = alphabet[rnd() as usize % alphabet.len()];
                match rnd() % 3 {
                    0 if at < buf.len() => buf[at] = b,
                    1 if at < buf.len() => {
                        buf.remove(at);
                    }
                    _ => buf.insert(at, b),
                }
            }
            if i % 7 == 0 {
                buf = (0..rnd() % 64).map(|_| rnd() as u8).collect();
            }
            if let Ok(Some(h)) = parse(&buf, &LIMITS, &mut fields) {
                assert!(h.len <= buf.len());
                for f in &fields {
                    assert!(f.name.range().end <= h.len && f.value.range().end <= h.len);
                }
            }
        }
    }

    #[test]
    fn size_limit() {
        let mut raw = b"HTTP/1.1 200 OK\r\nA: ".to_vec();
        raw.resize(2000, b'x');
        assert_eq!(parse(&raw, &LIMITS, &mut Vec::new()).unwrap_err(), HeadError::TooLarge);
        raw.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&raw, &LIMITS, &mut Vec::new()).unwrap_err(), HeadError::TooLarge);
    }
}
