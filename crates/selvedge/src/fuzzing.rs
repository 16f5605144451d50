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

/// The HTTP/1.1 connection state machine (sans-IO), driven as its driver drives it, by an
/// arbitrary peer: the first byte sets the size of the pieces the peer's bytes arrive in
/// and how the app treats bodies; the rest are the peer's bytes. Checked on the way:
///
/// - a request head is parsed only where the previous message ended (its head, and its
///   body as an independent decoder frames it): never out of a body;
/// - never more answers than requests (a rejected head counts as one), nothing after the
///   close;
/// - the buffers stay bounded.
pub fn h1_conn(data: &[u8]) {
    use std::sync::Arc;

    use crate::h1::conn::{head_error, Conn, Next, Returned, Send, Start};
    use crate::h1::inbound::Step;
    use crate::h1::parse::Framing;

    let Some((&ctl, input)) = data.split_first() else { return };
    let step = usize::from(ctl & 0x1f) + 1;
    let body_limits = BodyLimits { max_body: 1 << 14, max_chunk_ext: 64, max_trailers: 256 };
    let cfg = Arc::new(crate::Settings {
        limits: Limits { max_target: 256, max_head: 1024, max_headers: 16 },
        body: body_limits,
        max_drain: 512,
        ..crate::Settings::default()
    });
    let mut conn = Conn::new(cfg, BytesMut::new(), 0);
    let (mut fed, mut now) = (0usize, 0u64);
    let (mut attempts, mut answers) = (0usize, 0usize);
    // Where the next head must start; `None` once no further head may be parsed.
    let mut boundary = Some(0usize);
    let next_piece = |fed: &mut usize| -> Option<&[u8]> {
        if *fed >= input.len() {
            return None;
        }
        let n = step.min(input.len() - *fed);
        let piece = &input[*fed..*fed + n];
        *fed += n;
        Some(piece)
    };
    for _ in 0..10_000 {
        now += 1;
        assert!(conn.buffered() <= 1024 + step, "receive buffer unbounded: {}", conn.buffered());
        assert!(conn.write_buf().len() <= 128 * 1024, "write buffer unbounded");
        let res = match conn.poll(now) {
            Next::Request => {
                let h = *conn.pending_head().expect("a head after Request");
                let start = fed - conn.buffered();
                assert_eq!(Some(start), boundary, "a head parsed where no message starts");
                let head_end = start + h.len;
                // Where this message ends, by an independent decoder over the input.
                boundary = match h.framing {
                    Framing::None => Some(0),
                    Framing::Length(n) => {
                        Decoder::length(n, body_limits).ok().and_then(|d| framed(d, &input[head_end..]))
                    }
                    Framing::Chunked => framed(Decoder::chunked(body_limits), &input[head_end..]),
                }
                .map(|n| head_end + n);
                attempts += 1;
                let mut lent = None;
                let mut path = Vec::new();
                let started = conn.start(
                    false,
                    &crate::PeerAddr::Unix,
                    None,
                    |l| {
                        lent = Some(l);
                        crate::Body::empty()
                    },
                    |req| path = req.path_bytes().to_vec(),
                );
                match started {
                    Start::App => {
                        let choice = (ctl >> 5) ^ path.last().copied().unwrap_or(0);
                        let returned = match lent {
                            None => Returned::None,
                            Some(_) if choice % 4 == 3 => Returned::Kept,
                            Some(mut l) if choice % 4 == 0 => {
                                // The app reads the whole body, more bytes as they come.
                                loop {
                                    match l.inbound.decode(&mut l.buf) {
                                        Some(Step::Data(_)) => {}
                                        Some(_) => break,
                                        None => {
                                            if let Step::Read = l.inbound.wait(now) {
                                                let Some(p) = next_piece(&mut fed) else { break };
                                                l.buf.extend_from_slice(p);
                                                if l.inbound.handle_read(p.len(), now).is_some() {
                                                    break;
                                                }
                                            }
                                        }
                                    }
                                }
                                Returned::Back(l)
                            }
                            Some(l) => Returned::Back(l),
                        };
                        let res = fuzz_response(choice);
                        if conn.app_done(returned, choice % 16 == 15) {
                            loop {
                                match conn.poll(now) {
                                    Next::Respond | Next::Fail(_) => break,
                                    Next::Read { .. } => match next_piece(&mut fed) {
                                        Some(p) => {
                                            conn.read_buf().extend_from_slice(p);
                                            conn.handle_read(p.len(), now);
                                        }
                                        None => return,
                                    },
                                    Next::Close { .. } => return,
                                    other => panic!("while draining: {other:?}"),
                                }
                            }
                        }
                        res
                    }
                    Start::H2c(_) => return,
                    Start::Reject(status, _) => crate::Response::error(status),
                }
            }
            Next::Flush => {
                conn.handle_written();
                continue;
            }
            Next::Read { .. } => {
                match next_piece(&mut fed) {
                    Some(p) => {
                        conn.read_buf().extend_from_slice(p);
                        conn.handle_read(p.len(), now);
                    }
                    None => return,
                }
                continue;
            }
            Next::Reject(e) => {
                attempts += 1;
                boundary = None;
                crate::Response::error(head_error(e).0)
            }
            Next::Close { .. } | Next::Done => return,
            Next::Respond | Next::Fail(_) => panic!("a response was due outside a request"),
        };
        answers += 1;
        assert!(answers <= attempts, "more answers than requests");
        let send = match conn.respond(res, false) {
            Ok(send) => send,
            Err(_) => conn.respond(crate::Response::error(http::StatusCode::INTERNAL_SERVER_ERROR), true).expect("500"),
        };
        match send {
            Send::Stream(_, framing) => conn.stream_done(framing, Ok(true)),
            Send::Switch(..) => return,
            Send::Bytes(_) | Send::File(_) => conn.handle_written(),
            Send::Buffered => {}
        }
    }
}

/// How many bytes of `input` a body framed by `d` takes; `None` if it is not complete in
/// `input` (or malformed).
fn framed(mut d: Decoder, input: &[u8]) -> Option<usize> {
    let mut buf = BytesMut::from(input);
    loop {
        match d.decode(&mut buf) {
            Ok(Decoded::Data(_)) => {}
            Ok(Decoded::Done) => return Some(input.len() - buf.len()),
            Ok(Decoded::NeedMore) | Err(_) => return None,
        }
    }
}

/// The fuzzing app's answer, by `choice`: bytes, nothing, a large body, a stream, a close.
fn fuzz_response(choice: u8) -> crate::Response {
    use http::StatusCode;
    match choice % 8 {
        0 | 1 => crate::Response::bytes(StatusCode::OK, "ok"),
        2 => crate::Response::new(StatusCode::NO_CONTENT),
        3 => crate::Response::bytes(StatusCode::OK, vec![b'x'; 20_000]),
        4 => crate::Response::stream(StatusCode::OK, |_| async { Ok(()) }),
        5 => crate::Response::bytes(StatusCode::OK, "bye").header(http::header::CONNECTION, "close"),
        6 => crate::Response::stream(StatusCode::SWITCHING_PROTOCOLS, |_| async { Ok(()) }),
        _ => crate::Response::new(StatusCode::NOT_MODIFIED),
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
        match p.handle_bytes(&mut buf, now) {
            Ok(true) => {}
            Ok(false) => break,
            Err(r) => {
                p.go_away(r);
                break;
            }
        }
        p.poll_events(&mut events);
        for ev in events.drain(..) {
            if let Event::Request(id, _req, _) = ev {
                let res = crate::Response::bytes(http::StatusCode::OK, "fuzz");
                let _ = p.respond(id, res);
            }
        }
        out.clear();
        p.poll_transmit(&mut out, 64 * 1024, &DATE, &mut Vec::new());
        if p.is_done() {
            break;
        }
    }
    out.clear();
    p.poll_transmit(&mut out, 64 * 1024, &DATE, &mut Vec::new());
}

/// The `Range` header parser, against a size taken from the first two bytes.
pub fn range(data: &[u8]) {
    let Some((size, value)) = data.split_first_chunk::<2>() else { return };
    let size = u64::from(u16::from_le_bytes(*size));
    let _ = crate::file::range::parse(value, size);
    let _ = crate::file::range::if_range_matches(value, b"\"etag\"", 784_111_777);
}

/// The PROXY protocol header parser: a header never claims more bytes than it was given,
/// and "need more" always asks for more than it has, within the limit.
pub fn proxy_protocol(data: &[u8]) {
    use crate::io::proxy_protocol::{parse, Status, MAX_V2};
    match parse(data) {
        Ok(Status::Done(_, len)) => assert!(len > 0 && len <= data.len() && len <= MAX_V2),
        Ok(Status::Need(n)) => assert!(n > data.len() && n <= MAX_V2),
        Err(_) => {}
    }
}
