//! The bytes on the wire, written by hand: HTTP/2 frames (RFC 9113 §4.1, §6), the HPACK
//! representations the attacks need (RFC 7541 §5, §6: indexed fields, literals with and
//! without indexing, never Huffman-coded), and a frame reader.

use std::io::{self, Read};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
}

/// Setting identifiers.
pub mod setting {
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
}

/// The largest window (2^31 - 1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// The name of an HTTP/2 error code (RFC 9113 §7).
pub fn error_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("0x{code:x}"),
    };
    name.to_string()
}

/// Appends one frame.
pub fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & MAX_WINDOW).to_be_bytes());
    out.extend_from_slice(payload);
}

/// A SETTINGS frame with `values`.
pub fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    let mut p = Vec::with_capacity(values.len() * 6);
    for (id, v) in values {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(out, kind::SETTINGS, 0, 0, &p);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    frame(out, kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, code: u32) {
    frame(out, kind::RST_STREAM, 0, stream, &code.to_be_bytes());
}

/// A PRIORITY frame: `stream` depends on `on`, weight 16.
pub fn priority(out: &mut Vec<u8>, stream: u32, on: u32) {
    let mut p = on.to_be_bytes().to_vec();
    p.push(15);
    frame(out, kind::PRIORITY, 0, stream, &p);
}

pub fn ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    frame(out, kind::PING, if ack { flag::ACK } else { 0 }, 0, &payload);
}

// ---------------------------------------------------------------- HPACK (RFC 7541)

/// An integer with an `n`-bit prefix; `first` holds the representation's high bits.
pub fn hpack_int(out: &mut Vec<u8>, n: u8, first: u8, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A string literal, not Huffman-coded.
pub fn hpack_str(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

/// A field from the static or dynamic table (§6.1).
pub fn indexed(out: &mut Vec<u8>, index: usize) {
    hpack_int(out, 7, 0x80, index);
}

/// A literal field without indexing, new name (§6.2.2).
pub fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// A literal field without indexing whose name is static-table entry `index`.
pub fn literal_name_ref(out: &mut Vec<u8>, index: usize, value: &[u8]) {
    hpack_int(out, 4, 0, index);
    hpack_str(out, value);
}

/// A literal field with incremental indexing, new name (§6.2.1): it enters the dynamic
/// table as entry 62.
pub fn literal_indexed(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x40);
    hpack_str(out, name);
    hpack_str(out, value);
}

/// The header block of a request: `:method`, `:scheme http`, `:path`, `:authority`.
pub fn request_block(method: &str, path: &str, authority: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(32 + path.len() + authority.len());
    match method {
        "GET" => indexed(&mut b, 2),
        "POST" => indexed(&mut b, 3),
        m => literal_name_ref(&mut b, 2, m.as_bytes()),
    }
    indexed(&mut b, 6); // :scheme http
    match path {
        "/" => indexed(&mut b, 4),
        p => literal_name_ref(&mut b, 4, p.as_bytes()),
    }
    literal_name_ref(&mut b, 1, authority.as_bytes());
    b
}

// ---------------------------------------------------------------- reading

/// One received frame.
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The first four payload octets as a number (RST_STREAM's code, WINDOW_UPDATE's
    /// increment).
    pub fn u32_at(&self, at: usize) -> u32 {
        match self.payload.get(at..at + 4) {
            Some(b) => u32::from_be_bytes(b.try_into().expect("four bytes")),
            None => 0,
        }
    }

    /// GOAWAY's error code.
    pub fn goaway_code(&self) -> u32 {
        self.u32_at(4)
    }

    /// The header block fragment of a HEADERS frame (without padding and priority fields).
    pub fn fragment(&self) -> &[u8] {
        let mut p = &self.payload[..];
        let mut pad = 0;
        if self.flags & 0x8 != 0 && !p.is_empty() {
            pad = p[0] as usize;
            p = &p[1..];
        }
        if self.kind == kind::HEADERS && self.flags & 0x20 != 0 && p.len() >= 5 {
            p = &p[5..];
        }
        &p[..p.len().saturating_sub(pad)]
    }
}

/// Reads frames from a socket through a buffer.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    /// Bytes read so far.
    pub bytes: u64,
}

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader { inner, buf: Vec::with_capacity(64 * 1024), start: 0, bytes: 0 }
    }

    /// The next frame. `Ok(None)`: end of stream. A read timeout comes back as the error
    /// (`WouldBlock`/`TimedOut`) with nothing lost: call again.
    pub fn next(&mut self) -> io::Result<Option<Frame>> {
        loop {
            let avail = &self.buf[self.start..];
            if avail.len() >= 9 {
                let len = u32::from_be_bytes([0, avail[0], avail[1], avail[2]]) as usize;
                if avail.len() >= 9 + len {
                    let f = Frame {
                        kind: avail[3],
                        flags: avail[4],
                        stream: u32::from_be_bytes([avail[5], avail[6], avail[7], avail[8]]) & MAX_WINDOW,
                        payload: avail[9..9 + len].to_vec(),
                    };
                    self.start += 9 + len;
                    return Ok(Some(f));
                }
            }
            if self.start > 0 && (self.start == self.buf.len() || self.start > 32 * 1024) {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let old = self.buf.len();
            self.buf.resize(old + 64 * 1024, 0);
            let r = self.inner.read(&mut self.buf[old..]);
            match r {
                Ok(n) => {
                    self.buf.truncate(old + n);
                    self.bytes += n as u64;
                    if n == 0 {
                        return Ok(None);
                    }
                }
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
    }
}

/// Whether an error is a read/write timeout (the socket is still there).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_rfc7541_c1() {
        let mut v = Vec::new();
        hpack_int(&mut v, 5, 0, 10);
        assert_eq!(v, [10]);
        v.clear();
        hpack_int(&mut v, 5, 0, 1337);
        assert_eq!(v, [31, 154, 10]);
        v.clear();
        hpack_int(&mut v, 8, 0, 42);
        assert_eq!(v, [42]);
    }

    #[test]
    fn request_blocks_decode() {
        let mut b = request_block("GET", "/index.html", "example");
        literal_indexed(&mut b, b"x-big", &[b'v'; 300]);
        indexed(&mut b, 62);
        literal(&mut b, b"x-a", b"b");
        let fields = hpack::Decoder::new().decode(&b).unwrap();
        let text: Vec<(String, usize)> =
            fields.iter().map(|(n, v)| (String::from_utf8_lossy(n).into_owned(), v.len())).collect();
        assert_eq!(
            text,
            [
                (":method".into(), 3),
                (":scheme".into(), 4),
                (":path".into(), 11),
                (":authority".into(), 7),
                ("x-big".into(), 300),
                ("x-big".into(), 300),
                ("x-a".into(), 1)
            ]
        );
    }

    #[test]
    fn frames_round_trip() {
        let mut v = Vec::new();
        rst_stream(&mut v, 7, 8);
        ping(&mut v, true, *b"12345678");
        let mut r = Reader::new(&v[..]);
        let f = r.next().unwrap().unwrap();
        assert_eq!((f.kind, f.stream, f.u32_at(0)), (kind::RST_STREAM, 7, 8));
        let f = r.next().unwrap().unwrap();
        assert_eq!((f.kind, f.flags, &f.payload[..]), (kind::PING, flag::ACK, &b"12345678"[..]));
        assert!(r.next().unwrap().is_none());
    }
}
