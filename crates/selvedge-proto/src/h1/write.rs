//! The response-head composer: copies prepared pieces straight into the send buffer.
//!
//! Status lines for common codes are static byte strings, the `Date` value comes from the
//! caller's [`DateSource`] (the engine's once-a-second cache), numbers are formatted without `fmt`, and header names and
//! values are `memcpy`'d. Nothing is allocated when the buffer has room.

use http::header::{CONNECTION, CONTENT_LENGTH, DATE, SERVER, TRANSFER_ENCODING};
use http::{HeaderName, HeaderValue, StatusCode};

use crate::date::{DateSource, DATE_LEN};
use crate::message::SharedFields;

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Ends when the connection closes (streams to HTTP/1.0 clients).
    Close,
    /// No body and no length (1xx, 204, 304).
    None,
}

/// The `Connection` header to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnHeader {
    /// Nothing (HTTP/1.1 keep-alive is the default).
    Omit,
    /// `Connection: close`.
    Close,
    /// `Connection: keep-alive` (to HTTP/1.0 clients that asked for it).
    KeepAlive,
    /// `Connection: upgrade` (a 101 Switching Protocols).
    Upgrade,
}

fn status_line(status: StatusCode) -> Option<&'static [u8]> {
    Some(match status.as_u16() {
        200 => b"HTTP/1.1 200 OK\r\n",
        201 => b"HTTP/1.1 201 Created\r\n",
        204 => b"HTTP/1.1 204 No Content\r\n",
        206 => b"HTTP/1.1 206 Partial Content\r\n",
        301 => b"HTTP/1.1 301 Moved Permanently\r\n",
        302 => b"HTTP/1.1 302 Found\r\n",
        304 => b"HTTP/1.1 304 Not Modified\r\n",
        400 => b"HTTP/1.1 400 Bad Request\r\n",
        403 => b"HTTP/1.1 403 Forbidden\r\n",
        404 => b"HTTP/1.1 404 Not Found\r\n",
        500 => b"HTTP/1.1 500 Internal Server Error\r\n",
        _ => return None,
    })
}

/// Appends a response head (status line, shared fields' lines, headers, blank line) to
/// `dst`.
///
/// The app's `Content-Length`, `Transfer-Encoding` and `Connection` headers are replaced by
/// the engine's own, which follow from `framing` and `conn`. `Date` and `Server` are added
/// unless the app set them, `Date` from `date`.
#[allow(clippy::too_many_arguments)]
pub fn compose(
    dst: &mut Vec<u8>,
    status: StatusCode,
    shared: Option<&SharedFields>,
    headers: &[(HeaderName, HeaderValue)],
    framing: Framing,
    conn: ConnHeader,
    server: Option<&str>,
    date: &impl DateSource,
) {
    dst.reserve(128 + headers.len() * 48);
    match status_line(status) {
        Some(line) => dst.extend_from_slice(line),
        None => {
            dst.extend_from_slice(b"HTTP/1.1 ");
            dst.extend_from_slice(status.as_str().as_bytes());
            dst.push(b' ');
            dst.extend_from_slice(status.canonical_reason().unwrap_or("Unknown").as_bytes());
            dst.extend_from_slice(b"\r\n");
        }
    }
    let (mut has_date, mut has_server) = match shared {
        Some(s) => {
            dst.extend_from_slice(s.h1_lines());
            s.sets_date_server()
        }
        None => (false, false),
    };
    for (name, value) in headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING || name == CONNECTION {
            continue;
        }
        has_date |= name == DATE;
        has_server |= name == SERVER;
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    match (has_date, server.filter(|_| !has_server)) {
        (false, Some(s)) => put_date_server(dst, s, date),
        (false, None) => put_date(dst, date),
        (true, Some(s)) => put_server(dst, s),
        (true, None) => {}
    }
    // The last lines go out in one copy from the stack (one `memcpy` instead of up to five).
    let mut tail = Tail { buf: [0; TAIL_MAX], len: 0 };
    match framing {
        Framing::Length(n) => {
            tail.put(b"content-length: ");
            tail.put_decimal(n);
            tail.put(b"\r\n");
        }
        Framing::Chunked => tail.put(b"transfer-encoding: chunked\r\n"),
        Framing::Close | Framing::None => {}
    }
    match conn {
        ConnHeader::Omit => {}
        ConnHeader::Close => tail.put(b"connection: close\r\n"),
        ConnHeader::KeepAlive => tail.put(b"connection: keep-alive\r\n"),
        ConnHeader::Upgrade => tail.put(b"connection: upgrade\r\n"),
    }
    tail.put(b"\r\n");
    dst.extend_from_slice(&tail.buf[..tail.len]);
}

/// The longest tail: a 20-digit `content-length` line, `connection: keep-alive` and the
/// blank line.
const TAIL_MAX: usize = b"content-length: \r\nconnection: keep-alive\r\n\r\n".len() + 20;

/// A head's last lines, assembled on the stack.
struct Tail {
    buf: [u8; TAIL_MAX],
    len: usize,
}

impl Tail {
    #[inline(always)]
    fn put(&mut self, s: &[u8]) {
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }

    /// The decimal digits of `n`, written in place.
    #[inline(always)]
    fn put_decimal(&mut self, mut n: u64) {
        let mut digits = 1;
        let mut m = n;
        while m >= 10 {
            m /= 10;
            digits += 1;
        }
        let end = self.len + digits;
        let mut i = end;
        loop {
            i -= 1;
            self.buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.len = end;
    }
}

fn put_lines(dst: &mut Vec<u8>, parts: &[&[u8]]) {
    for p in parts {
        dst.extend_from_slice(p);
    }
}

fn put_date(dst: &mut Vec<u8>, date: &impl DateSource) {
    let mut d = [0u8; DATE_LEN];
    date.current(&mut d);
    put_lines(dst, &[b"date: ", &d, b"\r\n"]);
}

fn put_server(dst: &mut Vec<u8>, s: &str) {
    put_lines(dst, &[b"server: ", s.as_bytes(), b"\r\n"]);
}

/// Longest `Server` value the per-thread block below holds.
const SERVER_MAX: usize = 64;
const DATE_SERVER_MAX: usize = b"date: \r\nserver: \r\n".len() + DATE_LEN + SERVER_MAX;

/// This thread's `date` and `server` lines, rendered once per date change.
struct DateServer {
    /// The [`DateSource::version`] they were rendered for (0: none yet).
    version: u64,
    /// The server name they carry (its address and length: names are `'static` settings).
    server: (usize, usize),
    len: usize,
    bytes: [u8; DATE_SERVER_MAX],
}

thread_local! {
    static DATE_SERVER: std::cell::RefCell<DateServer> = const {
        std::cell::RefCell::new(DateServer { version: 0, server: (0, 0), len: 0, bytes: [0; DATE_SERVER_MAX] })
    };
}

/// Appends `date: …` and `server: s` lines: one copy of a block this thread renders again
/// only when the date's version changes.
fn put_date_server(dst: &mut Vec<u8>, s: &str, date: &impl DateSource) {
    let version = date.version();
    if version == 0 || s.len() > SERVER_MAX {
        put_date(dst, date);
        put_server(dst, s);
        return;
    }
    let key = (s.as_ptr() as usize, s.len());
    DATE_SERVER.with(|c| {
        let mut c = c.borrow_mut();
        if c.version != version || c.server != key {
            let mut d = [0u8; DATE_LEN];
            date.current(&mut d);
            let mut n = 0;
            for p in [&b"date: "[..], &d, b"\r\nserver: ", s.as_bytes(), b"\r\n"] {
                c.bytes[n..n + p.len()].copy_from_slice(p);
                n += p.len();
            }
            c.len = n;
            c.server = key;
            // The date read may be newer than `version`; then the next call renders again.
            c.version = version;
        }
        dst.extend_from_slice(&c.bytes[..c.len]);
    });
}

/// The composer as the benches see it: a `Content-Length` response head, kept alive or
/// closed, with the `Server` header.
pub fn compose_head(
    dst: &mut Vec<u8>,
    status: StatusCode,
    headers: &[(HeaderName, HeaderValue)],
    len: u64,
    keep_alive: bool,
    date: &impl DateSource,
) {
    let conn = if keep_alive { ConnHeader::Omit } else { ConnHeader::Close };
    compose(dst, status, None, headers, Framing::Length(len), conn, Some("selvedge"), date);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::date::FixedDate;
    use http::header::CONTENT_TYPE;

    /// Sun, 06 Nov 1994 08:49:37 GMT.
    const D: FixedDate = FixedDate::at(784_111_777);

    #[test]
    fn composes_a_head() {
        let mut out = Vec::new();
        let headers = vec![
            (CONTENT_TYPE, HeaderValue::from_static("text/html")),
            (CONTENT_LENGTH, HeaderValue::from_static("999")),
            (DATE, HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT")),
        ];
        compose(
            &mut out,
            StatusCode::OK,
            None,
            &headers,
            Framing::Length(612),
            ConnHeader::Close,
            Some("selvedge"),
            &D,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             server: selvedge\r\ncontent-length: 612\r\nconnection: close\r\n\r\n"
        );
    }

    /// The stack-built tail holds every length (0 to `u64::MAX`) with every `Connection`.
    #[test]
    fn tail_lines_for_every_length_and_connection() {
        let date = [(DATE, HeaderValue::from_static("d"))];
        let lengths = [0, 1, 9, 10, 99, 612, 1_000_000, u64::MAX - 1, u64::MAX];
        let conns = [
            (ConnHeader::Omit, ""),
            (ConnHeader::Close, "connection: close\r\n"),
            (ConnHeader::KeepAlive, "connection: keep-alive\r\n"),
            (ConnHeader::Upgrade, "connection: upgrade\r\n"),
        ];
        for n in lengths {
            for (c, line) in conns {
                let mut out = Vec::new();
                compose(&mut out, StatusCode::OK, None, &date, Framing::Length(n), c, None, &D);
                let want = format!("HTTP/1.1 200 OK\r\ndate: d\r\ncontent-length: {n}\r\n{line}\r\n");
                assert_eq!(String::from_utf8(out).unwrap(), want);
            }
        }
        for (framing, line) in
            [(Framing::Chunked, "transfer-encoding: chunked\r\n"), (Framing::Close, ""), (Framing::None, "")]
        {
            let mut out = Vec::new();
            compose(&mut out, StatusCode::OK, None, &date, framing, ConnHeader::KeepAlive, None, &D);
            let want = format!("HTTP/1.1 200 OK\r\ndate: d\r\n{line}connection: keep-alive\r\n\r\n");
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn shared_fields_come_first_and_obey_the_same_rules() {
        let shared = SharedFields::new([
            (http::header::ETAG, HeaderValue::from_static("\"1-2\"")),
            (CONTENT_LENGTH, HeaderValue::from_static("5")),
            (CONNECTION, HeaderValue::from_static("keep-alive")),
            (SERVER, HeaderValue::from_static("mine")),
        ]);
        // The engine's own framing fields are not kept; the rest are, in order.
        assert_eq!(shared.fields().len(), 2);
        let mut out = Vec::new();
        let own = [(CONTENT_TYPE, HeaderValue::from_static("text/plain"))];
        compose(
            &mut out,
            StatusCode::OK,
            Some(&shared),
            &own,
            Framing::Length(3),
            ConnHeader::Omit,
            Some("selvedge"),
            &D,
        );
        let s = String::from_utf8(out).unwrap();
        let (head, rest) = s.split_once("\r\ndate: ").unwrap();
        assert_eq!(head, "HTTP/1.1 200 OK\r\netag: \"1-2\"\r\nserver: mine\r\ncontent-type: text/plain");
        // `Server` came with the shared fields: the engine adds no second one.
        assert!(!rest.contains("server:") && rest.ends_with("\r\ncontent-length: 3\r\n\r\n"), "{s}");
    }

    #[test]
    fn date_and_server_block_follows_the_date_and_the_name() {
        let head = |server: &'static str, date: &FixedDate| {
            let mut out = Vec::new();
            compose(&mut out, StatusCode::OK, None, &[], Framing::None, ConnHeader::Omit, Some(server), date);
            String::from_utf8(out).unwrap()
        };
        let t = FixedDate::at(4_000_000_000);
        let a = head("one", &t);
        assert_eq!(a, "HTTP/1.1 200 OK\r\ndate: Tue, 02 Oct 2096 07:06:40 GMT\r\nserver: one\r\n\r\n");
        // The thread's block follows the name...
        let b = head("two", &t);
        assert!(b.contains("\r\nserver: two\r\n"), "{b}");
        // ...and the date's version.
        let c = head("two", &FixedDate::at(4_000_000_001));
        assert!(c.contains("date: Tue, 02 Oct 2096 07:06:41 GMT\r\nserver: two\r\n"), "{c}");
        assert_eq!(head("one", &t), a);
    }

    #[test]
    fn uncommon_status_and_chunked() {
        let mut out = Vec::new();
        compose(&mut out, StatusCode::IM_A_TEAPOT, None, &[], Framing::Chunked, ConnHeader::KeepAlive, None, &D);
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 418 I'm a teapot\r\ndate: "), "{s}");
        assert!(s.ends_with(" GMT\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"), "{s}");
    }

    #[test]
    fn numbers() {
        for (n, line) in [(0, "content-length: 0\r\n"), (7, "content-length: 7\r\n"), (612, "content-length: 612\r\n")]
            .into_iter()
            .chain([(u64::MAX, "content-length: 18446744073709551615\r\n")])
        {
            let mut out = Vec::new();
            compose(&mut out, StatusCode::OK, None, &[], Framing::Length(n), ConnHeader::Omit, None, &D);
            let s = String::from_utf8(out).unwrap();
            assert!(s.ends_with(&format!(" GMT\r\n{line}\r\n")), "{s}");
        }
    }
}
