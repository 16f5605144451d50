//! Entry points for the fuzz targets in `fuzz/` and for the test that replays their corpus.
//! Each one must never panic on any input; the assertions inside check invariants.

use bytes::BytesMut;

use crate::h1::body::{BodyLimits, Decoded, Decoder};
use crate::h1::parse::{parse, Limits, Status};

/// The HTTP/1 head parser.
pub fn h1_parse(data: &[u8]) {
    let limits = Limits { max_target: 256, max_head: 1024, max_headers: 16 };
    let mut headers = Vec::new();
    if let Ok(Status::Complete(h)) = parse(data, &limits, &mut headers) {
        assert!(h.len <= data.len());
        for hs in &headers {
            assert!(hs.name.range().end <= h.len && hs.value.range().end <= h.len);
        }
        assert!(h.path.range().end <= h.len);
    }
}

/// The chunked decoder, fed in pieces: the first byte sets the piece size.
pub fn chunked(data: &[u8]) {
    let Some((&step, data)) = data.split_first() else { return };
    let step = usize::from(step % 16) + 1;
    let limits = BodyLimits { max_body: 1 << 20, max_chunk_ext: 64, max_trailers: 256 };
    let mut d = Decoder::chunked(limits);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut out = 0usize;
    loop {
        match d.decode(&mut buf) {
            Ok(Decoded::Data(b)) => {
                assert!(!b.is_empty());
                out += b.len();
                assert!(out <= fed);
            }
            Ok(Decoded::Done) | Err(_) => return,
            Ok(Decoded::NeedMore) => {
                if fed == data.len() {
                    return;
                }
                let n = step.min(data.len() - fed);
                buf.extend_from_slice(&data[fed..fed + n]);
                fed += n;
            }
        }
    }
}

/// The HPACK decoder: the first byte picks the table size, the rest are header blocks
/// separated by `0xff 0x00` pairs (so one input exercises a connection's worth of state).
pub fn hpack_decode(data: &[u8]) {
    let Some((&size, data)) = data.split_first() else { return };
    let mut dec = crate::hpack::Decoder::new(usize::from(size) * 32);
    dec.set_max_header_list_size(16 * 1024);
    let mut rest = data;
    loop {
        let (block, next) = match rest.windows(2).position(|w| w == [0xff, 0x00]) {
            Some(i) => (&rest[..i], Some(&rest[i + 2..])),
            None => (rest, None),
        };
        let mut total = 0usize;
        if dec.decode(block, |f| total += f.size()).is_err() {
            return;
        }
        assert!(dec.table_size() <= dec.table_max_size());
        match next {
            Some(n) => rest = n,
            None => return,
        }
    }
}

/// The HTTP/2 frame decoder: frames are cut off the input until it runs out or a
/// connection error.
pub fn h2_frame(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    for _ in 0..10_000 {
        let before = buf.len();
        match crate::h2::codec::decode_frame(&mut buf, 16_384) {
            Ok(Some(_)) => assert!(buf.len() < before),
            Ok(None) => return,
            Err(_) if buf.len() < before => {} // a stream error: the frame was consumed
            Err(_) => return,
        }
    }
}

/// A fixed `Date` for the HTTP/2 state machine.
const DATE: [u8; crate::time::date::DATE_LEN] = *b"Sun, 06 Nov 1994 08:49:37 GMT";

/// The HTTP/2 connection state machine (sans-IO) driven by an arbitrary frame sequence
/// (the input after the preface): each request is answered at once with a small body, and
/// the sender's output is drained, as the driver does.
pub fn h2_conn(data: &[u8]) {
    use crate::h2::proto::{Event, Proto};
    let mut p = Proto::new(crate::settings::H2Settings::default(), Some("fuzz"));
    let mut buf = BytesMut::from(data);
    let mut events = Vec::new();
    let mut out = Vec::new();
    let mut now = 0u64;
    for _ in 0..10_000 {
        now += 1;
        match p.recv_next(&mut buf, now) {
            Ok(true) => {}
            Ok(false) => break,
            Err(r) => {
                p.go_away(r);
                break;
            }
        }
        p.take_events(&mut events);
        for ev in events.drain(..) {
            if let Event::Request(id, _req, _) = ev {
                let res = crate::Response::bytes(http::StatusCode::OK, "fuzz");
                let _ = p.respond(id, res);
            }
        }
        out.clear();
        p.fill(&mut out, 64 * 1024, &DATE, &mut Vec::new());
        if p.is_done() {
            break;
        }
    }
    out.clear();
    p.fill(&mut out, 64 * 1024, &DATE, &mut Vec::new());
}

/// The `Range` header parser, against a size taken from the first two bytes.
pub fn range(data: &[u8]) {
    let Some((size, value)) = data.split_first_chunk::<2>() else { return };
    let size = u64::from(u16::from_le_bytes(*size));
    let _ = crate::file::range::parse(value, size);
    let _ = crate::file::range::if_range_matches(value, b"\"etag\"", 784_111_777);
}
