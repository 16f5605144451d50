//! A byte-exact blocking HTTP/2 client for tests: writes frames built by hand, reads and
//! parses whatever the server sends.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use selvedge_proto::h2::codec::{decode_frame, PREFACE};
use selvedge_proto::h2::frame::{self, flag, kind, Frame, Head};
use selvedge_proto::hpack;

pub struct Client {
    pub sock: TcpStream,
    pub enc: hpack::Encoder,
    pub dec: hpack::Decoder,
    buf: BytesMut,
}

pub fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut v);
    v.extend_from_slice(payload);
    v
}

impl Client {
    /// Connects, sends the preface and `settings` (id, value pairs), acks the server's.
    pub fn connect(addr: SocketAddr, settings: &[(u16, u32)]) -> Client {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_nodelay(true).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = Client { sock, enc: hpack::Encoder::new(), dec: hpack::Decoder::default(), buf: BytesMut::new() };
        let mut out = PREFACE.to_vec();
        let mut payload = Vec::new();
        for (id, v) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&v.to_be_bytes());
        }
        out.extend(raw(kind::SETTINGS, 0, 0, &payload));
        out.extend(raw(kind::SETTINGS, flag::ACK, 0, &[]));
        c.send(&out);
        c
    }

    pub fn send(&mut self, b: &[u8]) {
        let _ = self.sock.write_all(b);
    }

    /// A HEADERS frame (END_HEADERS) for a request; `extra` adds fields.
    pub fn request_frame(
        &mut self,
        stream: u32,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        end_stream: bool,
    ) -> Vec<u8> {
        let mut fields = vec![(":method", method), (":scheme", "http"), (":path", path), (":authority", "test")];
        fields.extend_from_slice(extra);
        let mut block = BytesMut::new();
        self.enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
        let mut v = Vec::new();
        frame::Headers::encode(stream, &block, end_stream, 16_384, &mut v);
        v
    }

    pub fn get(&mut self, stream: u32, path: &str) {
        let f = self.request_frame(stream, "GET", path, &[], true);
        self.send(&f);
    }

    /// The next frame; `None` once the server closed the connection (or 10 s passed).
    pub fn next(&mut self) -> Option<Frame> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(f) =
                decode_frame(&mut self.buf, frame::MAX_MAX_FRAME_SIZE).expect("valid frames from the server")
            {
                return Some(f);
            }
            if Instant::now() > deadline {
                return None;
            }
            let mut tmp = [0u8; 65536];
            match self.sock.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }

    /// Reads frames until GOAWAY; returns its error code and last stream id.
    pub fn until_goaway(&mut self) -> Option<(frame::Reason, u32)> {
        while let Some(f) = self.next() {
            if let Frame::GoAway(g) = f {
                return Some((g.reason, g.last_stream));
            }
        }
        None
    }

    /// The `:status` of a HEADERS frame (decoding keeps the HPACK context in step).
    pub fn status(&mut self, h: &frame::Headers) -> String {
        let mut status = String::new();
        self.dec
            .decode(&h.fragment, |f| {
                if f.name.as_bytes() == b":status" {
                    status = String::from_utf8_lossy(&f.value).into_owned();
                }
            })
            .unwrap();
        status
    }
}
