//! The script's response head (RFC 3875 §6), parsed sans-IO from the bytes read so far.
//!
//! ```text
//! CGI-Response = document-response | local-redir-response | client-redir-response
//!              | client-redirdoc-response
//! header-field = field-name ":" [ field-value ] NL    ; CGI-field or other-field
//! CGI-field    = Content-Type | Location | Status
//! Status       = "Status:" status-code SP reason-phrase NL
//! NL           = LF | CR LF                            ; the head ends at an empty line
//! ```
//!
//! Strict where a mistake would reach the client: a line that is not `name: value`, a
//! folded line, a bad name or value, an informational or malformed `Status`, a bad or
//! repeated `Content-Length`, `Status` or `Location` are all [`HeadError::Malformed`]
//! (the caller answers 502). Hop-by-hop fields are dropped: the server frames the body.

use bytes::Bytes;
use selvedge::http::{header, HeaderName, HeaderValue, StatusCode};
use selvedge::Response;

/// A parsed head.
#[derive(Debug, Default)]
pub struct Head {
    /// `Status:` (`None`: 200, or 302 with an absolute `Location`).
    pub status: Option<StatusCode>,
    /// `Location:`.
    pub location: Option<HeaderValue>,
    /// `Content-Length:`.
    pub content_length: Option<u64>,
    /// Every other field, in order.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Head {
    /// Adds the head's `Location` and other fields to `res` (the script's response, with
    /// its status, body and any `Content-Length` already set), in a header list recycled
    /// from a sent response rather than one grown here.
    pub fn add_fields(self, res: Response) -> Response {
        let mut res = match self.location {
            Some(loc) => res.header(header::LOCATION, loc),
            None => res,
        };
        res.reserve_headers(self.headers.len());
        res.headers_mut().extend(self.headers);
        res
    }
}

/// Why a head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// No empty line within the limit.
    TooLarge,
    /// Not a valid CGI head.
    Malformed(&'static str),
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::TooLarge => f.write_str("response head over the limit"),
            HeadError::Malformed(why) => write!(f, "malformed response head: {why}"),
        }
    }
}

/// Fields the server owns (RFC 9110 §7.6.1 and framing): never copied from a script.
const HOP_BY_HOP: [&str; 7] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"];

/// Parses the head at the start of `buf`, which may hold up to `max` bytes of it (the
/// empty line included). `Ok(None)`: read more.
///
/// # Errors
/// [`HeadError::TooLarge`] when `max` bytes hold no end; [`HeadError::Malformed`] else.
pub fn parse(buf: &[u8], max: usize) -> Result<Option<(Head, usize)>, HeadError> {
    parse_with(buf, max, &|v: &[u8]| HeaderValue::from_bytes(v).ok())
}

/// [`parse`] for a head held in a [`Bytes`]: the values share its bytes (no copy).
///
/// # Errors
/// As [`parse`].
pub fn parse_shared(buf: &Bytes, max: usize) -> Result<Option<(Head, usize)>, HeadError> {
    let base = buf.as_ptr() as usize;
    parse_with(buf, max, &|v: &[u8]| {
        let at = v.as_ptr() as usize - base;
        HeaderValue::from_maybe_shared(buf.slice(at..at + v.len())).ok()
    })
}

/// [`parse`], with `value` making a field value from its bytes (a slice of `buf`).
fn parse_with(
    buf: &[u8],
    max: usize,
    value: &dyn Fn(&[u8]) -> Option<HeaderValue>,
) -> Result<Option<(Head, usize)>, HeadError> {
    let Some(end) = head_end(buf, max)? else { return Ok(None) };
    let mut head = Head { headers: Vec::with_capacity(8), ..Head::default() };
    for line in buf[..end].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        field(line, &mut head, value)?;
    }
    Ok(Some((head, end)))
}

/// The length of the head with its empty line, if `buf` holds all of it.
fn head_end(buf: &[u8], max: usize) -> Result<Option<usize>, HeadError> {
    let mut pos = 0;
    while let Some(i) = buf[pos..].iter().position(|&b| b == b'\n') {
        let end = pos + i + 1;
        if end > max {
            return Err(HeadError::TooLarge);
        }
        let line = &buf[pos..end - 1];
        if line.is_empty() || line == b"\r" {
            return Ok(Some(end));
        }
        pos = end;
    }
    if buf.len() >= max {
        return Err(HeadError::TooLarge);
    }
    Ok(None)
}

fn field(line: &[u8], head: &mut Head, value: &dyn Fn(&[u8]) -> Option<HeaderValue>) -> Result<(), HeadError> {
    use HeadError::Malformed;
    if matches!(line[0], b' ' | b'\t') {
        return Err(Malformed("folded line"));
    }
    let colon = line.iter().position(|&b| b == b':').ok_or(Malformed("a line without ':'"))?;
    let name = selvedge_proto::message::field_name(&line[..colon]).map_err(|_| Malformed("bad field name"))?;
    let value = value(line[colon + 1..].trim_ascii()).ok_or(Malformed("bad field value"))?;
    match name.as_str() {
        "status" => {
            if head.status.is_some() {
                return Err(Malformed("two Status fields"));
            }
            head.status = Some(status(value.as_bytes()).ok_or(Malformed("bad Status"))?);
        }
        "location" => {
            if head.location.is_some() {
                return Err(Malformed("two Location fields"));
            }
            if value.is_empty() {
                return Err(Malformed("empty Location"));
            }
            head.location = Some(value);
        }
        "content-length" => {
            let v = value.as_bytes();
            let n = (!v.is_empty() && v.len() <= 18 && v.iter().all(u8::is_ascii_digit))
                .then(|| v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
                .ok_or(Malformed("bad Content-Length"))?;
            if head.content_length.is_some_and(|m| m != n) {
                return Err(Malformed("two Content-Length values"));
            }
            head.content_length = Some(n);
        }
        n if HOP_BY_HOP.contains(&n) => {}
        _ => head.headers.push((name, value)),
    }
    Ok(())
}

/// `NNN` or `NNN reason`, a final status (200..=599).
fn status(v: &[u8]) -> Option<StatusCode> {
    let (code, rest) = v.split_at_checked(3)?;
    if !code.iter().all(u8::is_ascii_digit) || !matches!(rest.first(), None | Some(b' ' | b'\t')) {
        return None;
    }
    StatusCode::from_bytes(code).ok().filter(|s| (200..600).contains(&s.as_u16()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> (Head, usize) {
        parse(s.as_bytes(), 1024).unwrap_or_else(|e| panic!("{s:?}: {e}")).unwrap_or_else(|| panic!("{s:?}: partial"))
    }

    #[test]
    fn documents_and_redirects() {
        let (h, n) = ok("Content-Type: text/plain\nX-A: 1\nX-A:2\n\nbody");
        assert_eq!(n, 39);
        assert_eq!((h.status, h.content_length, h.location.is_none()), (None, None, true));
        let names: Vec<_> = h.headers.iter().map(|(n, v)| format!("{n}={}", v.to_str().unwrap())).collect();
        assert_eq!(names, ["content-type=text/plain", "x-a=1", "x-a=2"]);

        let (h, n) = ok("Status: 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
        assert_eq!((h.status, h.content_length, h.headers.len(), n), (Some(StatusCode::NOT_FOUND), Some(3), 0, 63));
        let (h, _) = ok("Location: /other?x=1\n\n");
        assert_eq!(h.location.unwrap(), "/other?x=1");
        let (h, _) = ok("status:201\nTransfer-Encoding: chunked\n\n");
        assert_eq!((h.status, h.headers.len()), (Some(StatusCode::CREATED), 0));
        // An empty head (the empty line first) is a 200 with no fields.
        assert_eq!(ok("\r\nhello").1, 2);
    }

    #[test]
    fn shared_values() {
        let buf = Bytes::from_static(b"Content-Type: text/plain\r\nX-A:  1 \r\n\r\nbody");
        let (h, n) = parse_shared(&buf, 1024).unwrap().unwrap();
        assert_eq!(n, 38);
        let v: Vec<_> = h.headers.iter().map(|(n, v)| format!("{n}={}", v.to_str().unwrap())).collect();
        assert_eq!(v, ["content-type=text/plain", "x-a=1"]);
        assert!(matches!(parse_shared(&Bytes::from_static(b"X: a\x01b\n\n"), 64), Err(HeadError::Malformed(_))));
    }

    #[test]
    fn partial_and_limits() {
        for s in ["", "Content-Type: text/plain", "Content-Type: text/plain\n", "A: b\r\n\r"] {
            assert!(matches!(parse(s.as_bytes(), 64), Ok(None)), "{s:?}");
        }
        let long = format!("X: {}\n\n", "a".repeat(100));
        assert_eq!(parse(long.as_bytes(), 64).unwrap_err(), HeadError::TooLarge);
        assert_eq!(parse(&[b'a'; 64], 64).unwrap_err(), HeadError::TooLarge);
        // Exactly at the limit, the empty line included.
        assert!(parse(b"X: 1234\n\n", 9).unwrap().is_some());
        assert_eq!(parse(b"X: 12345\n\n", 9).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn malformed_heads() {
        let bad = [
            "hello world\n\n",
            "Content-Type: text/plain\n continued\n\n",
            ": empty name\n\n",
            "Bad Name: x\n\n",
            "X: a\rb\n\n",
            "X: \x01\n\n",
            "Status: 20\n\n",
            "Status: 2000\n\n",
            "Status: 101 Switching\n\n",
            "Status: abc\n\n",
            "Status: 200\nStatus: 200\n\n",
            "Location:\n\n",
            "Location: /a\nLocation: /b\n\n",
            "Content-Length: -1\n\n",
            "Content-Length: 1 2\n\n",
            "Content-Length: 99999999999999999999\n\n",
            "Content-Length: 1\nContent-Length: 2\n\n",
        ];
        for s in bad {
            assert!(matches!(parse(s.as_bytes(), 1024), Err(HeadError::Malformed(_))), "{s:?}");
        }
        assert_eq!(ok("Content-Length: 5\nContent-Length: 5\n\n").0.content_length, Some(5));
    }
}
