//! FastCGI 1.0 records, sans-IO: the web server's side of the specification's §3 (records,
//! name-value pairs) and §5 (the Responder role).
//!
//! ```text
//! record        = header content padding
//! header        = version:1 (=1) type:1 requestId:2 contentLength:2 paddingLength:1 reserved:1
//!                 (integers big-endian; content up to 65535 bytes, padding up to 255)
//! name-value    = nameLength valueLength name value
//! length        = 0..127 in one byte | 4 bytes, the top bit of the first set (up to 2^31-1)
//! BEGIN_REQUEST = role:2 flags:1 (KEEP_CONN = 1) reserved:5
//! END_REQUEST   = appStatus:4 protocolStatus:1 reserved:3
//! ```
//!
//! A request is `BEGIN_REQUEST`, the `PARAMS` stream, the `STDIN` stream (each stream is
//! records of content ended by an empty one); the application answers with `STDOUT` and
//! `STDERR` streams and one `END_REQUEST`. Name-value pairs may span the records of a
//! stream. Management records (request id 0: `GET_VALUES_RESULT`, `UNKNOWN_TYPE`) may come
//! in between and are skipped.
//!
//! Writing: [`begin_request`], [`Params`] (pairs into `PARAMS` records, split at the
//! 65535-byte limit), [`stream_header`] (a `STDIN` record's header; its content is written
//! from the body's own buffer). Reading: [`decode`] takes one complete record off the front
//! of the receive buffer and gives its content as a [`Bytes`] sharing that buffer.

use bytes::{Buf, Bytes, BytesMut};

/// Length of a record header.
pub const HEADER_LEN: usize = 8;
/// Largest content of one record.
pub const MAX_CONTENT: usize = 65_535;

/// A record type. Unknown values are kept as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordType(pub u8);

impl RecordType {
    /// Starts a request (web server to application).
    pub const BEGIN_REQUEST: RecordType = RecordType(1);
    /// Aborts a request.
    pub const ABORT_REQUEST: RecordType = RecordType(2);
    /// Ends a request (application to web server).
    pub const END_REQUEST: RecordType = RecordType(3);
    /// The name-value pairs stream.
    pub const PARAMS: RecordType = RecordType(4);
    /// The request body stream.
    pub const STDIN: RecordType = RecordType(5);
    /// The response stream.
    pub const STDOUT: RecordType = RecordType(6);
    /// The error stream.
    pub const STDERR: RecordType = RecordType(7);
    /// The Filter role's data stream.
    pub const DATA: RecordType = RecordType(8);
    /// A management query.
    pub const GET_VALUES: RecordType = RecordType(9);
    /// A management answer.
    pub const GET_VALUES_RESULT: RecordType = RecordType(10);
    /// A management answer to a record type the application does not know.
    pub const UNKNOWN_TYPE: RecordType = RecordType(11);
}

/// The role asked of the application in `BEGIN_REQUEST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role(pub u16);

impl Role {
    /// Answers an HTTP request (the only role a web server normally asks for).
    pub const RESPONDER: Role = Role(1);
    /// Authorizes a request.
    pub const AUTHORIZER: Role = Role(2);
    /// Filters a file.
    pub const FILTER: Role = Role(3);
}

/// The protocol status of `END_REQUEST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolStatus(pub u8);

impl ProtocolStatus {
    /// The request was served.
    pub const REQUEST_COMPLETE: ProtocolStatus = ProtocolStatus(0);
    /// Refused: a second request on a connection of an application that serves one at a time.
    pub const CANT_MPX_CONN: ProtocolStatus = ProtocolStatus(1);
    /// Refused: the application is out of a resource.
    pub const OVERLOADED: ProtocolStatus = ProtocolStatus(2);
    /// Refused: the role is not supported.
    pub const UNKNOWN_ROLE: ProtocolStatus = ProtocolStatus(3);
}

/// A record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The protocol version (1).
    pub version: u8,
    /// The record type.
    pub kind: RecordType,
    /// The request it belongs to (0: management).
    pub request_id: u16,
    /// Bytes of content that follow.
    pub content_length: u16,
    /// Bytes of padding after the content.
    pub padding_length: u8,
}

impl Header {
    /// A version-1 header without padding.
    pub fn new(kind: RecordType, request_id: u16, content_length: u16) -> Header {
        Header { version: 1, kind, request_id, content_length, padding_length: 0 }
    }

    /// Reads a header.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Header {
        Header {
            version: b[0],
            kind: RecordType(b[1]),
            request_id: u16::from_be_bytes([b[2], b[3]]),
            content_length: u16::from_be_bytes([b[4], b[5]]),
            padding_length: b[6],
        }
    }

    /// Its bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let [i1, i0] = self.request_id.to_be_bytes();
        let [l1, l0] = self.content_length.to_be_bytes();
        [self.version, self.kind.0, i1, i0, l1, l0, self.padding_length, 0]
    }

    /// Length of the whole record.
    pub fn record_len(&self) -> usize {
        HEADER_LEN + usize::from(self.content_length) + usize::from(self.padding_length)
    }
}

/// Appends a `BEGIN_REQUEST` record.
pub fn begin_request(out: &mut Vec<u8>, request_id: u16, role: Role, keep_conn: bool) {
    out.extend_from_slice(&Header::new(RecordType::BEGIN_REQUEST, request_id, 8).encode());
    let [r1, r0] = role.0.to_be_bytes();
    out.extend_from_slice(&[r1, r0, u8::from(keep_conn), 0, 0, 0, 0, 0]);
}

/// The header of a stream record (`STDIN`...) with `len` bytes of content (at most
/// [`MAX_CONTENT`]; 0 ends the stream).
pub fn stream_header(kind: RecordType, request_id: u16, len: usize) -> [u8; HEADER_LEN] {
    debug_assert!(len <= MAX_CONTENT);
    Header::new(kind, request_id, len.min(MAX_CONTENT) as u16).encode()
}

/// Writes name-value pairs as a `PARAMS` stream into a buffer: records of up to
/// [`MAX_CONTENT`] bytes, then the empty record that ends the stream ([`Params::finish`]).
#[derive(Debug)]
pub struct Params<'a> {
    out: &'a mut Vec<u8>,
    request_id: u16,
    /// Where the open record's header is.
    open: usize,
}

impl<'a> Params<'a> {
    /// Starts the stream at the end of `out`.
    pub fn new(out: &'a mut Vec<u8>, request_id: u16) -> Params<'a> {
        let open = out.len();
        out.extend_from_slice(&[0; HEADER_LEN]);
        Params { out, request_id, open }
    }

    /// Adds a pair. Names and values longer than 2^31-1 bytes cannot be expressed and are
    /// not written.
    pub fn pair(&mut self, name: &[u8], value: &[u8]) {
        const MAX: usize = 0x7fff_ffff;
        if name.len() > MAX || value.len() > MAX {
            return;
        }
        put_length(self.out, name.len());
        put_length(self.out, value.len());
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(value);
        self.split_full();
    }

    /// Closes full records: while the open one has more than [`MAX_CONTENT`] bytes, its
    /// first [`MAX_CONTENT`] become a record and a new header opens after them.
    fn split_full(&mut self) {
        while self.out.len() - self.open - HEADER_LEN > MAX_CONTENT {
            self.close_open(MAX_CONTENT);
            let at = self.open + HEADER_LEN + MAX_CONTENT;
            self.out.splice(at..at, [0; HEADER_LEN]);
            self.open = at;
        }
    }

    fn close_open(&mut self, len: usize) {
        let h = Header::new(RecordType::PARAMS, self.request_id, len as u16).encode();
        self.out[self.open..self.open + HEADER_LEN].copy_from_slice(&h);
    }

    /// Closes the stream: the open record (dropped if empty) and the empty one after it.
    pub fn finish(mut self) {
        let len = self.out.len() - self.open - HEADER_LEN;
        if len == 0 {
            self.out.truncate(self.open);
        } else {
            self.close_open(len);
        }
        self.out.extend_from_slice(&Header::new(RecordType::PARAMS, self.request_id, 0).encode());
    }
}

/// A name-value pair length: one byte up to 127, else four with the top bit set.
fn put_length(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&(n as u32 | 0x8000_0000).to_be_bytes());
    }
}

/// Name-value pairs, borrowed from a stream's content.
pub type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;

/// Splits a stream's content (the concatenated content of its records) into name-value
/// pairs.
///
/// # Errors
/// [`DecodeError::Pairs`] when the content ends inside a pair.
pub fn parse_pairs(mut b: &[u8]) -> Result<Pairs<'_>, DecodeError> {
    fn length(b: &mut &[u8]) -> Option<usize> {
        let first = *b.first()?;
        if first < 0x80 {
            *b = &b[1..];
            return Some(usize::from(first));
        }
        let (n, rest) = b.split_first_chunk::<4>()?;
        *b = rest;
        Some((u32::from_be_bytes(*n) & 0x7fff_ffff) as usize)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let (Some(n), Some(v)) = (length(&mut b), length(&mut b)) else { return Err(DecodeError::Pairs) };
        if b.len() < n.saturating_add(v) {
            return Err(DecodeError::Pairs);
        }
        let (name, rest) = b.split_at(n);
        let (value, rest) = rest.split_at(v);
        out.push((name, value));
        b = rest;
    }
    Ok(out)
}

/// What the application sent for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Response bytes (never empty: the empty record ending the stream is skipped).
    Stdout(Bytes),
    /// Error-log bytes (never empty).
    Stderr(Bytes),
    /// The request is over.
    End {
        /// The application's exit status (a CGI program's `exit` code).
        app_status: u32,
        /// Whether it was served or refused.
        protocol_status: ProtocolStatus,
    },
}

/// A record the web server cannot accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Not version 1.
    Version(u8),
    /// A type the application does not send for a request (or, with request id 0, a
    /// management type that is not an answer).
    Type(RecordType),
    /// A request id that is neither this request's nor 0.
    RequestId(u16),
    /// An `END_REQUEST` with less than its 8 bytes of content.
    ShortEnd,
    /// Name-value pairs cut short.
    Pairs,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Version(v) => write!(f, "record version {v}, not 1"),
            DecodeError::Type(t) => write!(f, "unexpected record type {}", t.0),
            DecodeError::RequestId(id) => write!(f, "record for request {id}, not this one"),
            DecodeError::ShortEnd => f.write_str("END_REQUEST shorter than 8 bytes"),
            DecodeError::Pairs => f.write_str("name-value pairs cut short"),
        }
    }
}

/// Takes the next complete record of request `request_id` off the front of `buf`, skipping
/// management answers and empty stream records. `Ok(None)`: `buf` holds no complete record
/// (what is there stays).
///
/// # Errors
/// See [`DecodeError`]; the buffer is then left at the offending record.
pub fn decode(buf: &mut BytesMut, request_id: u16) -> Result<Option<Event>, DecodeError> {
    loop {
        let Some(h) = buf.first_chunk::<HEADER_LEN>().map(Header::parse) else { return Ok(None) };
        if h.version != 1 {
            return Err(DecodeError::Version(h.version));
        }
        let management = h.request_id == 0;
        match h.kind {
            RecordType::GET_VALUES_RESULT | RecordType::UNKNOWN_TYPE if management => {}
            _ if management => return Err(DecodeError::Type(h.kind)),
            RecordType::STDOUT | RecordType::STDERR => {}
            RecordType::END_REQUEST if h.content_length >= 8 => {}
            RecordType::END_REQUEST => return Err(DecodeError::ShortEnd),
            t => return Err(DecodeError::Type(t)),
        }
        if !management && h.request_id != request_id {
            return Err(DecodeError::RequestId(h.request_id));
        }
        if buf.len() < h.record_len() {
            return Ok(None);
        }
        let len = usize::from(h.content_length);
        if management || len == 0 {
            buf.advance(h.record_len());
            continue;
        }
        return Ok(Some(match h.kind {
            RecordType::END_REQUEST => {
                let c = &buf[HEADER_LEN..HEADER_LEN + 8];
                let ev = Event::End {
                    app_status: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    protocol_status: ProtocolStatus(c[4]),
                };
                buf.advance(h.record_len());
                ev
            }
            kind => {
                let mut rec = buf.split_to(h.record_len());
                rec.advance(HEADER_LEN);
                rec.truncate(len);
                let content = rec.freeze();
                if kind == RecordType::STDOUT {
                    Event::Stdout(content)
                } else {
                    Event::Stderr(content)
                }
            }
        }));
    }
}

/// The fastcgi fuzz target's entry point (also replayed over the committed corpus by the
/// tests): records decoded from any bytes, fed whole and one byte at a time, must agree,
/// never panic, and consume the buffer only forward; name-value pairs that parse must
/// encode and parse back the same, across record boundaries.
pub fn fuzz(data: &[u8]) {
    let whole = decode_all(data, data.len().max(1));
    let bytewise = decode_all(data, 1);
    assert_eq!(whole, bytewise, "decoding depends on how the bytes arrive");

    if let Ok(pairs) = parse_pairs(data) {
        let mut out = Vec::new();
        let mut p = Params::new(&mut out, 1);
        for (n, v) in &pairs {
            p.pair(n, v);
        }
        p.finish();
        let mut content = Vec::new();
        let mut rest = &out[..];
        while let Some(h) = rest.first_chunk::<HEADER_LEN>().map(Header::parse) {
            assert_eq!((h.version, h.kind, h.request_id), (1, RecordType::PARAMS, 1));
            content.extend_from_slice(&rest[HEADER_LEN..h.record_len()]);
            rest = &rest[h.record_len()..];
            if h.content_length == 0 {
                break;
            }
        }
        assert!(rest.is_empty(), "bytes after the end of the PARAMS stream");
        assert_eq!(parse_pairs(&content).expect("re-encoded pairs parse"), pairs);
    }
}

/// Every event (and the error that ends them) from `data` arriving `step` bytes at a time.
fn decode_all(data: &[u8], step: usize) -> Vec<Result<Event, DecodeError>> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            let before = buf.len();
            match decode(&mut buf, 1) {
                Ok(Some(e)) => out.push(Ok(e)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
            assert!(buf.len() < before, "an event without consuming bytes");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, id: u16, content: &[u8], pad: u8) -> Vec<u8> {
        let mut v = Header {
            version: 1,
            kind: RecordType(kind),
            request_id: id,
            content_length: content.len() as u16,
            padding_length: pad,
        }
        .encode()
        .to_vec();
        v.extend_from_slice(content);
        v.extend(std::iter::repeat_n(0xee, pad.into()));
        v
    }

    #[test]
    fn begin_request_bytes() {
        let mut out = Vec::new();
        begin_request(&mut out, 1, Role::RESPONDER, true);
        assert_eq!(out, [1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(stream_header(RecordType::STDIN, 1, 0x1234), [1, 5, 0, 1, 0x12, 0x34, 0, 0]);
    }

    #[test]
    fn params_lengths_and_split() {
        let mut out = Vec::new();
        let mut p = Params::new(&mut out, 1);
        p.pair(b"A", b"1");
        p.pair(b"LONG", &[b'x'; 200]);
        p.finish();
        // One record: 1+1+1+1 and 1+4+4+200, then the empty one.
        let len = 4 + 209;
        assert_eq!(&out[..8], &[1, 4, 0, 1, 0, len as u8, 0, 0]);
        assert_eq!(&out[8..12], &[1, 1, b'A', b'1']);
        assert_eq!(&out[12..17], &[4, 0x80, 0, 0, 200]);
        assert_eq!(&out[8 + len..], &[1, 4, 0, 1, 0, 0, 0, 0]);

        // A value over one record's size spans three records.
        let big = vec![b'v'; 150_000];
        let mut out = Vec::new();
        let mut p = Params::new(&mut out, 7);
        p.pair(b"BIG", &big);
        p.pair(b"AFTER", b"yes");
        p.finish();
        let mut content = Vec::new();
        let mut rest = &out[..];
        let mut lens = Vec::new();
        while !rest.is_empty() {
            let h = Header::parse(rest.first_chunk().unwrap());
            assert_eq!((h.kind, h.request_id), (RecordType::PARAMS, 7));
            lens.push(h.content_length as usize);
            content.extend_from_slice(&rest[8..h.record_len()]);
            rest = &rest[h.record_len()..];
        }
        assert_eq!(lens, [65_535, 65_535, 150_000 + 3 + 1 + 4 + 1 + 1 + 5 + 3 - 2 * 65_535, 0]);
        assert_eq!(parse_pairs(&content).unwrap(), vec![(&b"BIG"[..], &big[..]), (b"AFTER", b"yes")]);

        // No pairs: just the empty record.
        let mut out = Vec::new();
        Params::new(&mut out, 1).finish();
        assert_eq!(out, [1, 4, 0, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn pairs_cut_short() {
        for bad in [&[1u8][..], &[2, 1, b'a'], &[0x80, 0, 0], &[0x80, 0, 0, 5, 0, b'a'], &[1, 0x80, 0, 0, 0]] {
            assert_eq!(parse_pairs(bad), Err(DecodeError::Pairs), "{bad:?}");
        }
        assert_eq!(parse_pairs(&[0, 0]).unwrap(), vec![(&b""[..], &b""[..])]);
    }

    #[test]
    fn decode_a_response() {
        let mut wire = Vec::new();
        wire.extend(record(10, 0, &[0; 3], 5)); // a management answer: skipped
        wire.extend(record(6, 1, b"Status: 200\r\n\r\nhi", 6));
        wire.extend(record(7, 1, b"warning", 0));
        wire.extend(record(6, 1, b"", 0));
        wire.extend(record(3, 1, &[0, 0, 1, 2, 0, 0, 0, 0], 0));
        let mut buf = BytesMut::new();
        let mut events = Vec::new();
        // Byte by byte: nothing is given before its record is whole.
        for b in &wire {
            buf.extend_from_slice(&[*b]);
            while let Some(e) = decode(&mut buf, 1).unwrap() {
                events.push(e);
            }
        }
        assert!(buf.is_empty());
        assert_eq!(
            events,
            [
                Event::Stdout(Bytes::from_static(b"Status: 200\r\n\r\nhi")),
                Event::Stderr(Bytes::from_static(b"warning")),
                Event::End { app_status: 258, protocol_status: ProtocolStatus::REQUEST_COMPLETE },
            ]
        );
    }

    #[test]
    fn decode_refusals() {
        let cases: [(Vec<u8>, DecodeError); 6] = [
            ([&[2u8, 6, 0, 1, 0, 0, 0, 0][..]].concat(), DecodeError::Version(2)),
            (record(5, 1, b"x", 0), DecodeError::Type(RecordType::STDIN)),
            (record(1, 1, &[0; 8], 0), DecodeError::Type(RecordType::BEGIN_REQUEST)),
            (record(9, 0, b"", 0), DecodeError::Type(RecordType::GET_VALUES)),
            (record(6, 2, b"x", 0), DecodeError::RequestId(2)),
            (record(3, 1, &[0; 7], 0), DecodeError::ShortEnd),
        ];
        for (wire, want) in cases {
            // Refused from the header alone, before the content arrives.
            let mut buf = BytesMut::from(&wire[..HEADER_LEN]);
            assert_eq!(decode(&mut buf, 1), Err(want), "{wire:?}");
        }
    }

    #[test]
    fn fuzz_entry_on_samples() {
        let mut wire = record(6, 1, b"abc", 3);
        wire.extend(record(3, 1, &[0; 8], 0));
        fuzz(&wire);
        fuzz(&[1, 0x80, 0, 0, 1, b'n', b'v']);
        fuzz(b"");
    }
}
