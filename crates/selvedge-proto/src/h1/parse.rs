//! The HTTP/1.1 request-head parser (RFC 9112 §2-§7), hand-written and zero-copy.
//!
//! ```text
//! HTTP-message   = start-line CRLF *( field-line CRLF ) CRLF [ message-body ]
//! request-line   = method SP request-target SP HTTP-version
//! field-line     = field-name ":" OWS field-value OWS
//! ```
//!
//! [`parse`] looks at the bytes received so far and answers one of three things: the head is
//! complete ([`Head`], a set of offsets into the same bytes plus the framing facts found on
//! the way), more bytes are needed, or the input is invalid and which status to answer with.
//! It never copies and never allocates (the header offsets go into the caller's vector). It is strict:
//! bare CR or LF, obs-fold, whitespace before a colon, control characters, a bad version,
//! conflicting framing headers and oversized lines are all rejected at the first bad byte,
//! even before the head is complete.
//!
//! Byte classes are `[bool; 256]` lookup tables built at compile time (see `message`).

use std::fmt;

use crate::message::{authority, class, parse_decimal, swar, trim_ows, HeaderSpan, Span, TCHAR, VALUE};

/// Limits the parser enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest request-target; longer gets 414.
    pub max_target: usize,
    /// Largest head (request line and headers, with line ends); larger gets 431.
    pub max_head: usize,
    /// Most header lines; more gets 431.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_target: 8 * 1024, max_head: 16 * 1024, max_headers: 100 }
    }
}

/// Why a head was rejected; each maps to one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// 400, with a short reason for logs.
    BadRequest(&'static str),
    /// 414: the request-target is longer than [`Limits::max_target`].
    UriTooLong,
    /// 431: the head or the header count exceeds the limits.
    HeadersTooLarge,
    /// 505: a well-formed version other than 1.0 and 1.1.
    VersionNotSupported,
    /// 501: a transfer coding we do not implement before the final `chunked`.
    NotImplemented,
    /// 417: an `Expect` other than `100-continue`.
    ExpectationFailed,
}

impl ParseError {
    /// The status code this error is answered with.
    pub fn status(self) -> u16 {
        match self {
            ParseError::BadRequest(_) => 400,
            ParseError::UriTooLong => 414,
            ParseError::HeadersTooLarge => 431,
            ParseError::VersionNotSupported => 505,
            ParseError::NotImplemented => 501,
            ParseError::ExpectationFailed => 417,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::BadRequest(why) => write!(f, "bad request: {why}"),
            ParseError::UriTooLong => f.write_str("request-target too long"),
            ParseError::HeadersTooLarge => f.write_str("request header fields too large"),
            ParseError::VersionNotSupported => f.write_str("HTTP version not supported"),
            ParseError::NotImplemented => f.write_str("transfer coding not implemented"),
            ParseError::ExpectationFailed => f.write_str("expectation not supported"),
        }
    }
}

/// The form of the request-target (RFC 9112 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path?query`
    Absolute,
    /// `host:port` (CONNECT only)
    Authority,
    /// `*` (OPTIONS only)
    Asterisk,
}

/// The minor version of HTTP/1.x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Minor {
    /// HTTP/1.0
    Zero,
    /// HTTP/1.1
    One,
}

/// How the request body is framed (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A complete request head: offsets into the received bytes and the facts found on the way
/// (the header lines are in the vector the caller passed to [`parse`]).
#[derive(Debug, Clone, Copy)]
pub struct Head {
    /// Bytes the head occupies, including leading empty lines and the final CRLF.
    pub len: usize,
    /// The method token.
    pub method: Span,
    /// The whole request-target.
    pub target: Span,
    /// The request-target's form.
    pub form: TargetForm,
    /// The path part of the target (`/` for absolute-form without a path; the authority for
    /// CONNECT; `*` for asterisk-form).
    pub path: Span,
    /// The query after `?`, without the `?`.
    pub query: Option<Span>,
    /// The authority: from an absolute-form target, which overrides `Host`, else from `Host`.
    pub authority: Option<Span>,
    /// HTTP/1.0 or HTTP/1.1.
    pub minor: Minor,
    /// How the body is framed.
    pub framing: Framing,
    /// `Connection: close` was sent.
    pub conn_close: bool,
    /// `Connection: keep-alive` was sent.
    pub conn_keep_alive: bool,
    /// `Connection: upgrade` was sent.
    pub conn_upgrade: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
}

/// The outcome of [`parse`].
#[derive(Debug)]
pub enum Status {
    /// The head is complete.
    Complete(Head),
    /// More bytes are needed.
    Partial,
}

/// Visible ASCII but `#`: a fragment is never sent in a request-target (RFC 9112 §3.2, RFC
/// 3986 §3.5), so a `#` there is a client error, not part of the path.
const fn is_target(b: u8) -> bool {
    b >= 0x21 && b <= 0x7e && b != b'#'
}
/// request-target characters: visible ASCII but `#`.
static TARGET: [bool; 256] = class!(is_target);
/// Headers the parser recognises while scanning (Warp's indexed headers).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Known {
    ContentLength,
    TransferEncoding,
    Connection,
    Host,
    Expect,
    Other,
}

#[inline]
fn known(name: &[u8]) -> Known {
    let eq = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        // One word, case folded: the 0x20 bit is the only difference between an ASCII
        // letter's cases, and no other token byte folds onto a letter.
        4 if u32::from_le_bytes(name.try_into().expect("4 bytes")) | 0x2020_2020 == u32::from_le_bytes(*b"host") => {
            Known::Host
        }
        6 if eq(b"expect") => Known::Expect,
        10 if eq(b"connection") => Known::Connection,
        14 if eq(b"content-length") => Known::ContentLength,
        17 if eq(b"transfer-encoding") => Known::TransferEncoding,
        _ => Known::Other,
    }
}

type Result<T> = std::result::Result<T, ParseError>;

/// A cursor over the input; `None` from a method means "ran out of bytes".
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// Advances while `table` accepts the byte; returns the first rejected byte's position,
    /// or `None` at the end of input.
    #[inline]
    fn scan(&mut self, table: &[bool; 256]) -> Option<u8> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|&b| !table[b as usize]) {
            Some(k) => {
                self.pos += k;
                Some(rest[k])
            }
            None => {
                self.pos = self.buf.len();
                None
            }
        }
    }

    /// [`scan`](Self::scan) with the [`TARGET`] table, eight bytes at a time.
    #[inline]
    fn scan_target(&mut self) -> Option<u8> {
        while let Some(w) = self.buf.get(self.pos..self.pos + 8) {
            let x = swar::word(w);
            let stop = swar::lt(x, 0x21) | swar::ge_7f(x) | swar::eq(x, b'#');
            if stop != 0 {
                self.pos += swar::first(stop);
                return Some(self.buf[self.pos]);
            }
            self.pos += 8;
        }
        self.scan(&TARGET)
    }

    /// [`scan`](Self::scan) with the [`VALUE`] table, eight bytes at a time.
    #[inline]
    fn scan_value(&mut self) -> Option<u8> {
        while let Some(w) = self.buf.get(self.pos..self.pos + 8) {
            let x = swar::word(w);
            // Controls (HTAB among them) and DEL: HTAB is allowed, so step over it.
            let stop = swar::lt(x, 0x20) | swar::eq(x, 0x7f);
            if stop == 0 {
                self.pos += 8;
                continue;
            }
            self.pos += swar::first(stop);
            let b = self.buf[self.pos];
            if b != b'\t' {
                return Some(b);
            }
            self.pos += 1;
        }
        self.scan(&VALUE)
    }

    /// Consumes `\r\n` at the cursor. `Ok(None)`: need more bytes.
    #[inline]
    fn crlf(&mut self) -> Result<Option<()>> {
        match self.buf.get(self.pos..self.pos + 2) {
            Some(w) if u16::from_le_bytes([w[0], w[1]]) == u16::from_le_bytes(*b"\r\n") => {
                self.pos += 2;
                Ok(Some(()))
            }
            Some(_) => Err(ParseError::BadRequest("bare CR or LF")),
            None if self.buf.get(self.pos).is_some_and(|&b| b != b'\r') => Err(ParseError::BadRequest("bare CR or LF")),
            None => Ok(None),
        }
    }
}

macro_rules! need {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(Status::Partial),
        }
    };
}

/// Parses a request head from the start of `buf`. The header lines go into `headers`, which
/// the caller owns (cleared first; as httparse's `Request::new(&mut headers)`): a
/// connection reuses one vector across partial parses, and moves it into the request.
///
/// # Errors
/// A [`ParseError`] naming the status to answer with; the connection must then close.
pub fn parse(buf: &[u8], limits: &Limits, headers: &mut Vec<HeaderSpan>) -> Result<Status> {
    let r = parse_inner(buf, limits, headers);
    if let Ok(Status::Partial) = r {
        if buf.len() >= limits.max_head {
            return Err(ParseError::HeadersTooLarge);
        }
    }
    r
}

#[inline(always)]
fn parse_inner(buf: &[u8], limits: &Limits, headers: &mut Vec<HeaderSpan>) -> Result<Status> {
    let mut c = Cursor { buf, pos: 0 };
    // RFC 9112 §2.2: ignore at least one empty line before the request-line.
    while c.buf.get(c.pos) == Some(&b'\r') || c.buf.get(c.pos) == Some(&b'\n') {
        need!(c.crlf()?);
        if c.pos > 4 {
            return Err(ParseError::BadRequest("empty lines before request"));
        }
    }

    // method SP (most requests are GETs: four bytes compared instead of a scan)
    let m_start = c.pos;
    if c.buf.get(m_start..m_start + 4) == Some(b"GET ") {
        c.pos = m_start + 3;
    } else {
        let b = need!(c.scan(&TCHAR));
        if b != b' ' || c.pos == m_start {
            return Err(ParseError::BadRequest("invalid method"));
        }
    }
    let method = Span::new(m_start, c.pos);
    c.pos += 1;

    // request-target SP
    let t_start = c.pos;
    let end = c.scan_target();
    if c.pos - t_start > limits.max_target {
        return Err(ParseError::UriTooLong);
    }
    let b = need!(end);
    if b == b'#' {
        return Err(ParseError::BadRequest("fragment in request-target"));
    }
    if b != b' ' || c.pos == t_start {
        return Err(ParseError::BadRequest("invalid request-target"));
    }
    let target = Span::new(t_start, c.pos);
    c.pos += 1;

    // HTTP-version CRLF
    let Some(v) = c.buf.get(c.pos..c.pos + 8) else {
        // Validate the prefix we have, so garbage fails before the line is complete.
        let have = &c.buf[c.pos..];
        let k = have.len().min(5);
        if have[..k] != b"HTTP/"[..k] {
            return Err(ParseError::BadRequest("invalid HTTP-version"));
        }
        return Ok(Status::Partial);
    };
    // One word compared for the two versions served (a slice pattern compares bytewise).
    let word = swar::word(v);
    let minor = match v {
        _ if word == u64::from_le_bytes(*b"HTTP/1.1") => Minor::One,
        _ if word == u64::from_le_bytes(*b"HTTP/1.0") => Minor::Zero,
        [b'H', b'T', b'T', b'P', b'/', d1, b'.', d2] if d1.is_ascii_digit() && d2.is_ascii_digit() => {
            return Err(ParseError::VersionNotSupported)
        }
        _ => return Err(ParseError::BadRequest("invalid HTTP-version")),
    };
    c.pos += 8;
    need!(c.crlf()?);

    let method_bytes = &buf[method.range()];
    let (form, path, query, mut authority) = split_target(method_bytes, &buf[target.range()], target.start as usize)?;

    // field lines
    headers.clear();
    let mut content_length: Option<u64> = None;
    let mut te_seen = false;
    let mut te_chunked_last = false;
    let mut te_other = false;
    let mut host_count = 0u32;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut conn_upgrade = false;
    let mut expect_continue = false;
    loop {
        match c.buf.get(c.pos) {
            None => return Ok(Status::Partial),
            Some(b'\r') | Some(b'\n') => {
                need!(c.crlf()?);
                break;
            }
            Some(b' ') | Some(b'\t') => return Err(ParseError::BadRequest("obs-fold or leading whitespace")),
            Some(_) => {}
        }
        if headers.len() >= limits.max_headers {
            return Err(ParseError::HeadersTooLarge);
        }
        let n_start = c.pos;
        let b = need!(c.scan(&TCHAR));
        if b != b':' {
            return Err(ParseError::BadRequest(if b == b' ' || b == b'\t' {
                "whitespace before colon"
            } else {
                "invalid header name"
            }));
        }
        if c.pos == n_start {
            return Err(ParseError::BadRequest("empty header name"));
        }
        let name = Span::new(n_start, c.pos);
        c.pos += 1;
        while matches!(c.buf.get(c.pos), Some(b' ') | Some(b'\t')) {
            c.pos += 1;
        }
        let v_start = c.pos;
        need!(c.scan_value());
        let mut v_end = c.pos;
        while v_end > v_start && matches!(buf[v_end - 1], b' ' | b'\t') {
            v_end -= 1;
        }
        need!(c.crlf()?);
        let value = Span::new(v_start, v_end);
        headers.push(HeaderSpan { name, value });

        let vb = &buf[v_start..v_end];
        match known(&buf[name.range()]) {
            Known::Other => {}
            Known::ContentLength => {
                if content_length.is_some() {
                    return Err(ParseError::BadRequest("repeated Content-Length"));
                }
                content_length = Some(parse_content_length(vb)?);
            }
            Known::TransferEncoding => {
                te_seen = true;
                for coding in vb.split(|&b| b == b',') {
                    let coding = trim_ows(coding);
                    if coding.is_empty() {
                        continue;
                    }
                    if te_chunked_last {
                        return Err(ParseError::BadRequest("chunked is not the final transfer coding"));
                    }
                    if coding.eq_ignore_ascii_case(b"chunked") {
                        te_chunked_last = true;
                    } else if coding.iter().all(|&b| TCHAR[b as usize]) {
                        te_other = true;
                    } else {
                        return Err(ParseError::BadRequest("invalid transfer coding"));
                    }
                }
            }
            Known::Connection => {
                for opt in vb.split(|&b| b == b',') {
                    let opt = trim_ows(opt);
                    if opt.eq_ignore_ascii_case(b"close") {
                        conn_close = true;
                    } else if opt.eq_ignore_ascii_case(b"keep-alive") {
                        conn_keep_alive = true;
                    } else if opt.eq_ignore_ascii_case(b"upgrade") {
                        conn_upgrade = true;
                    }
                }
            }
            Known::Host => {
                host_count += 1;
                // Empty when the target's authority is (RFC 9112 §3.2); else host[:port].
                if !vb.is_empty() && !authority::valid(vb) {
                    return Err(ParseError::BadRequest("invalid Host"));
                }
                if authority.is_none() || form != TargetForm::Absolute {
                    authority = Some(value);
                }
            }
            Known::Expect => {
                if vb.eq_ignore_ascii_case(b"100-continue") {
                    expect_continue = true;
                } else {
                    return Err(ParseError::ExpectationFailed);
                }
            }
        }
    }

    if host_count > 1 {
        return Err(ParseError::BadRequest("repeated Host"));
    }
    if host_count == 0 && minor == Minor::One {
        return Err(ParseError::BadRequest("missing Host"));
    }
    let framing = if te_seen {
        if minor == Minor::Zero {
            return Err(ParseError::BadRequest("Transfer-Encoding in HTTP/1.0"));
        }
        if content_length.is_some() {
            return Err(ParseError::BadRequest("both Content-Length and Transfer-Encoding"));
        }
        if !te_chunked_last {
            return Err(ParseError::BadRequest("chunked is not the final transfer coding"));
        }
        if te_other {
            return Err(ParseError::NotImplemented);
        }
        Framing::Chunked
    } else {
        match content_length {
            None | Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
        }
    };
    if c.pos > limits.max_head {
        return Err(ParseError::HeadersTooLarge);
    }
    Ok(Status::Complete(Head {
        len: c.pos,
        method,
        target,
        form,
        path,
        query,
        authority,
        minor,
        framing,
        conn_close,
        conn_keep_alive,
        conn_upgrade,
        expect_continue,
    }))
}

/// `Content-Length = 1*DIGIT`, no sign, no list, no overflow.
fn parse_content_length(v: &[u8]) -> Result<u64> {
    parse_decimal(v).ok_or(ParseError::BadRequest("invalid Content-Length"))
}

type Target = (TargetForm, Span, Option<Span>, Option<Span>);

/// Splits the request-target into its form, path, query and authority (RFC 9112 §3.2).
fn split_target(method: &[u8], t: &[u8], base: usize) -> Result<Target> {
    let span = |s: usize, e: usize| Span::new(base + s, base + e);
    let path_query = |from: usize| -> (Span, Option<Span>) {
        match swar::find(&t[from..], b'?') {
            Some(q) => (span(from, from + q), Some(span(from + q + 1, t.len()))),
            None => (span(from, t.len()), None),
        }
    };
    if method == b"CONNECT" {
        // authority-form: host:port, nothing else.
        if t[0] == b'/' || !authority::valid(t) || !t.contains(&b':') {
            return Err(ParseError::BadRequest("CONNECT needs authority-form"));
        }
        return Ok((TargetForm::Authority, span(0, t.len()), None, Some(span(0, t.len()))));
    }
    match t[0] {
        b'/' => {
            let (p, q) = path_query(0);
            Ok((TargetForm::Origin, p, q, None))
        }
        b'*' if t.len() == 1 => {
            if method != b"OPTIONS" {
                return Err(ParseError::BadRequest("asterisk-form outside OPTIONS"));
            }
            Ok((TargetForm::Asterisk, span(0, 1), None, None))
        }
        _ => {
            let rest = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
                7
            } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
                8
            } else {
                return Err(ParseError::BadRequest("invalid request-target form"));
            };
            let a_end = t[rest..].iter().position(|&b| matches!(b, b'/' | b'?')).map_or(t.len(), |p| rest + p);
            let auth = &t[rest..a_end];
            if !authority::valid(auth) {
                return Err(ParseError::BadRequest("invalid authority in absolute-form"));
            }
            let (p, q) = if t.get(a_end) == Some(&b'/') {
                path_query(a_end)
            } else {
                // No path: the path is "/" (RFC 9112 §3.2.2); point at nothing and let the
                // request report "/".
                let (_, q) = path_query(a_end);
                (span(a_end, a_end), q)
            };
            Ok((TargetForm::Absolute, p, q, Some(span(rest, a_end))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-at-a-time scans stop exactly where the byte-at-a-time table scans stop,
    /// for every byte value at every offset of a word, after any mix of allowed bytes.
    #[test]
    fn word_scans_match_table_scans() {
        let fillers: [&[u8]; 3] =
            [b"abcdefghijklmnopqrstuvwx", b"\x80\xff~!/?%AZ09az.-_:@[]", b" \t \t\t  x\ty\t z\t\t\t"];
        for filler in fillers {
            for at in 0..20 {
                for b in 0..=255u8 {
                    let mut buf = filler.repeat(2)[..at].to_vec();
                    buf.push(b);
                    buf.extend_from_slice(b"tail-of-input");
                    for is_target in [true, false] {
                        let table = if is_target { &TARGET } else { &VALUE };
                        let word = |c: &mut Cursor<'_>| if is_target { c.scan_target() } else { c.scan_value() };
                        let mut by_table = Cursor { buf: &buf, pos: 0 };
                        let mut by_word = Cursor { buf: &buf, pos: 0 };
                        assert_eq!(by_table.scan(table), word(&mut by_word), "{buf:?}");
                        assert_eq!(by_table.pos, by_word.pos, "{buf:?}");
                        // And when the input ends there.
                        let cut = &buf[..at + 1];
                        let mut by_table = Cursor { buf: cut, pos: 0 };
                        let mut by_word = Cursor { buf: cut, pos: 0 };
                        assert_eq!(by_table.scan(table), word(&mut by_word), "{cut:?}");
                        assert_eq!(by_table.pos, by_word.pos, "{cut:?}");
                    }
                }
            }
        }
    }

    /// A head and its header lines.
    struct Parsed {
        head: Head,
        headers: Vec<HeaderSpan>,
    }

    impl std::ops::Deref for Parsed {
        type Target = Head;
        fn deref(&self) -> &Head {
            &self.head
        }
    }

    fn ok(input: &str) -> Parsed {
        let mut headers = Vec::new();
        match parse(input.as_bytes(), &Limits::default(), &mut headers) {
            Ok(Status::Complete(head)) => Parsed { head, headers },
            other => panic!("{input:?}: {other:?}"),
        }
    }
    fn err(input: &[u8]) -> ParseError {
        match parse(input, &Limits::default(), &mut Vec::new()) {
            Err(e) => e,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
    fn partial(input: &[u8]) {
        match parse(input, &Limits::default(), &mut Vec::new()) {
            Ok(Status::Partial) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(input)),
        }
    }
    fn s(buf: &str, sp: Span) -> &str {
        &buf[sp.range()]
    }

    #[test]
    fn simple_get() {
        let r = "GET /a/b?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\nNEXT";
        let h = ok(r);
        assert_eq!(h.len, r.len() - 4);
        assert_eq!(s(r, h.method), "GET");
        assert_eq!(s(r, h.path), "/a/b");
        assert_eq!(s(r, h.query.unwrap()), "x=1");
        assert_eq!(s(r, h.authority.unwrap()), "example.com");
        assert_eq!(h.minor, Minor::One);
        assert_eq!(h.headers.len(), 2);
        assert_eq!(s(r, h.headers[1].name), "Accept");
        assert_eq!(s(r, h.headers[1].value), "*/*");
        assert_eq!(h.framing, Framing::None);
    }

    /// The GET shortcut and the case-folded `Host` test agree with the general path: every
    /// prefix of a GET is partial, any case of `Host` is the Host field, and a name that
    /// only folds onto it bytewise is not.
    #[test]
    fn get_and_host_shortcuts() {
        let r = b"GET /a?b HTTP/1.1\r\nhOsT: x.example:81\r\n\r\n";
        for i in 0..r.len() {
            partial(&r[..i]);
        }
        let h = ok(std::str::from_utf8(r).unwrap());
        assert_eq!(s(std::str::from_utf8(r).unwrap(), h.method), "GET");
        assert_eq!(s(std::str::from_utf8(r).unwrap(), h.authority.unwrap()), "x.example:81");
        assert_eq!(s(std::str::from_utf8(r).unwrap(), h.query.unwrap()), "b");
        assert_eq!(ok("GETS / HTTP/1.1\r\nHost: h\r\n\r\n").method.len, 4);
        assert_eq!(ok("HEAD / HTTP/1.1\r\nHOST: h\r\n\r\n").authority.map(|a| a.len), Some(1));
        // "H0st" is not Host: without a Host field an HTTP/1.1 request is refused.
        err(b"GET / HTTP/1.1\r\nH0st: h\r\n\r\n");
        err(b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(ok("GET / HTTP/1.0\r\n\r\n").minor, Minor::Zero);
        assert!(matches!(err(b"GET / HTTP/1.2\r\n\r\n"), ParseError::VersionNotSupported));
        assert!(matches!(err(b"GET / HTTQ/1.1\r\n\r\n"), ParseError::BadRequest(_)));
    }

    #[test]
    fn every_prefix_is_partial() {
        let r = b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX: a b \r\n\r\n";
        for i in 0..r.len() {
            partial(&r[..i]);
        }
        let h = ok(std::str::from_utf8(r).unwrap());
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(&r[h.headers[2].value.range()], b"a b");
    }

    #[test]
    fn leading_empty_line_skipped() {
        let h = ok("\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.method.start, 2);
    }

    #[test]
    fn http10_without_host() {
        let h = ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert_eq!(h.minor, Minor::Zero);
        assert!(h.conn_keep_alive);
    }

    #[test]
    fn connection_tokens_and_expect() {
        let h = ok("PUT / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, close\r\nExpect: 100-Continue\r\nTransfer-Encoding: Chunked\r\n\r\n");
        assert!(h.conn_close && h.conn_upgrade && h.expect_continue);
        assert_eq!(h.framing, Framing::Chunked);
    }

    #[test]
    fn absolute_form_overrides_host() {
        let r = "GET http://Example.org:8080/p?q HTTP/1.1\r\nHost: other\r\n\r\n";
        let h = ok(r);
        assert_eq!(h.form, TargetForm::Absolute);
        assert_eq!(s(r, h.authority.unwrap()), "Example.org:8080");
        assert_eq!(s(r, h.path), "/p");
        assert_eq!(s(r, h.query.unwrap()), "q");
        let r = "GET http://e.org HTTP/1.1\r\nHost: e.org\r\n\r\n";
        let h = ok(r);
        assert_eq!(h.path.len, 0);
    }

    #[test]
    fn connect_and_options_forms() {
        let r = "CONNECT e.org:443 HTTP/1.1\r\nHost: e.org:443\r\n\r\n";
        assert_eq!(ok(r).form, TargetForm::Authority);
        assert_eq!(ok("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").form, TargetForm::Asterisk);
        assert_eq!(err(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n").status(), 400);
        assert_eq!(err(b"CONNECT /x HTTP/1.1\r\nHost: h\r\n\r\n").status(), 400);
        assert_eq!(err(b"GET ftp://x/ HTTP/1.1\r\nHost: h\r\n\r\n").status(), 400);
        assert_eq!(err(b"GET http://u@x/ HTTP/1.1\r\nHost: h\r\n\r\n").status(), 400);
    }

    macro_rules! rejects {
        ($($name:ident: $input:expr => $status:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(err($input).status(), $status);
            }
        )*};
    }

    rejects! {
        bare_lf_request_line: b"GET / HTTP/1.1\nHost: h\r\n\r\n" => 400;
        bare_lf_header: b"GET / HTTP/1.1\r\nHost: h\n\r\n" => 400;
        bare_cr_in_value: b"GET / HTTP/1.1\r\nHost: h\rX\r\n\r\n" => 400;
        bare_lf_end: b"GET / HTTP/1.1\r\nHost: h\r\n\n" => 400;
        obs_fold: b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n" => 400;
        space_before_colon: b"GET / HTTP/1.1\r\nHost : h\r\n\r\n" => 400;
        tab_before_colon: b"GET / HTTP/1.1\r\nHost\t: h\r\n\r\n" => 400;
        nul_in_value: b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n" => 400;
        bad_name_char: b"GET / HTTP/1.1\r\nHo(st: h\r\n\r\n" => 400;
        empty_name: b"GET / HTTP/1.1\r\n: h\r\n\r\n" => 400;
        bad_method: b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        double_space: b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        space_in_target: b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        non_ascii_target: b"GET /\xff HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        fragment_in_target: b"GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        fragment_alone: b"GET # HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        fragment_in_absolute_form: b"GET http://h/a?b#c HTTP/1.1\r\nHost: h\r\n\r\n" => 400;
        fragment_before_complete: b"GET /a#" => 400;
        http09: b"GET /\r\n\r\n" => 400;
        lowercase_version: b"GET / http/1.1\r\nHost: h\r\n\r\n" => 400;
        http2_version: b"GET / HTTP/2.0\r\nHost: h\r\n\r\n" => 505;
        http12_version: b"GET / HTTP/1.2\r\nHost: h\r\n\r\n" => 505;
        missing_host: b"GET / HTTP/1.1\r\nX: y\r\n\r\n" => 400;
        two_hosts: b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" => 400;
        bad_host: b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n" => 400;
        cl_and_te: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n" => 400;
        te_and_cl: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n" => 400;
        repeated_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n" => 400;
        list_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3, 3\r\n\r\n" => 400;
        signed_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n" => 400;
        hex_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x3\r\n\r\n" => 400;
        empty_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n" => 400;
        huge_cl: b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n" => 400;
        te_identity: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n" => 400;
        te_chunked_then_gzip: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n" => 400;
        te_chunked_twice: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" => 400;
        te_xchunked: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n" => 400;
        te_gzip_chunked: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" => 501;
        te_http10: b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" => 400;
        te_bad_char: b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\x0b\r\n\r\n" => 400;
        expect_other: b"PUT / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n" => 417;
        many_empty_lines: b"\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n" => 400;
        garbage_version_early: b"GET / XYZ" => 400;
    }

    #[test]
    fn limits() {
        let lim = Limits { max_target: 16, max_head: 64, max_headers: 2 };
        let long = b"GET /0123456789abcdefg";
        assert_eq!(parse(long, &lim, &mut Vec::new()).unwrap_err(), ParseError::UriTooLong);
        let many = b"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\nC: d\r\n\r\n";
        assert_eq!(parse(many, &lim, &mut Vec::new()).unwrap_err(), ParseError::HeadersTooLarge);
        let mut big = b"GET / HTTP/1.1\r\nHost: h\r\nA: ".to_vec();
        big.extend(std::iter::repeat_n(b'x', 64));
        assert_eq!(parse(&big, &lim, &mut Vec::new()).unwrap_err(), ParseError::HeadersTooLarge);
    }

    #[test]
    fn pseudo_random_input_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let alphabet = b"GET /HTP1.0\r\n: aA\t,chunkedContent-Length9";
        for _ in 0..20_000 {
            let len = (x % 80) as usize;
            let mut v = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(if x % 5 == 0 { x as u8 } else { alphabet[(x % alphabet.len() as u64) as usize] });
            }
            let _ = parse(&v, &Limits::default(), &mut Vec::new());
        }
    }
}
