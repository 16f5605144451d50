//! The state machine driven by a scripted peer, byte by byte: frames are encoded, fed one
//! byte at a time through the codec, and the output is decoded and checked frame by frame.

use bytes::{BufMut, BytesMut};
use http::StatusCode;

use super::{Event, Proto};
use crate::h2::codec;
use crate::h2::frame::{self, flag, kind, Frame, Head, Reason};
use crate::hpack;
use crate::settings::H2Settings;
use crate::Response;

struct Peer {
    proto: Proto,
    enc: hpack::Encoder,
    dec: hpack::Decoder,
    rbuf: BytesMut,
    events: Vec<Event>,
    error: Option<Reason>,
    /// The clock the frames arrive at (ms).
    now: u64,
}

fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut v);
    v.extend_from_slice(payload);
    v
}

impl Peer {
    fn new(cfg: H2Settings) -> Peer {
        let mut p = Peer {
            proto: Proto::new(cfg, None),
            enc: hpack::Encoder::new(),
            dec: hpack::Decoder::default(),
            rbuf: BytesMut::new(),
            events: Vec::new(),
            error: None,
            now: 0,
        };
        // The server's SETTINGS come first.
        let out = p.output();
        assert!(
            matches!(&out[0], Frame::Settings(s) if !s.ack && s.values.iter().any(|(id, v)| *id == frame::Setting::MAX_CONCURRENT_STREAMS && *v > 0))
        );
        p.send(&raw(kind::SETTINGS, 0, 0, &[]));
        assert!(matches!(&p.output()[..], [Frame::Settings(s)] if s.ack));
        p
    }

    /// Feeds `bytes` one at a time.
    fn send(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.rbuf.put_u8(*b);
            if self.error.is_some() {
                return;
            }
            if let Some(r) = self.proto.handle_all(&mut self.rbuf, self.now) {
                self.error = Some(r);
                return;
            }
        }
        self.proto.poll_events(&mut self.events);
    }

    fn headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        let mut block = BytesMut::new();
        self.enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
        let mut v = Vec::new();
        frame::Headers::encode(stream, &block, end_stream, 16_384, &mut v);
        self.send(&v);
    }

    fn get(&mut self, stream: u32) {
        self.headers(stream, &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x")], true);
    }

    /// Decodes everything the connection wants to write.
    fn output(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        self.proto.set_now(self.now);
        fill(&mut self.proto, &mut out);
        let mut buf = BytesMut::from(&out[..]);
        let mut frames = Vec::new();
        while let Some(f) = codec::decode_frame(&mut buf, frame::MAX_MAX_FRAME_SIZE).unwrap() {
            frames.push(f);
        }
        assert!(buf.is_empty());
        frames
    }

    fn status_of(&mut self, h: &frame::Headers) -> String {
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

/// `poll_transmit` as the driver calls it, with a fixed date, file payloads read and put in their
/// places (the driver sends them there).
fn fill(p: &mut Proto, out: &mut Vec<u8>) {
    let mut reads = Vec::new();
    p.poll_transmit(out, 1 << 20, b"Sun, 06 Nov 1994 08:49:37 GMT", &mut reads);
    for r in reads.iter().rev() {
        let mut payload = vec![0; r.len];
        let n = std::os::unix::fs::FileExt::read_at(&*r.file, &mut payload, r.offset).unwrap();
        assert_eq!(n, r.len);
        out.splice(r.at..r.at, payload);
    }
}

/// The path of a request head.
fn path(h: &crate::app::request::RequestHead) -> &[u8] {
    &h.buf[h.path.range()]
}

fn rst(frames: &[Frame]) -> Vec<(u32, Reason)> {
    frames.iter().filter_map(|f| if let Frame::RstStream(r) = f { Some((r.stream, r.reason)) } else { None }).collect()
}

fn goaway(frames: &[Frame]) -> Option<Reason> {
    frames.iter().find_map(|f| if let Frame::GoAway(g) = f { Some(g.reason) } else { None })
}

#[test]
fn request_response_round_trip() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    assert!(matches!(&p.events[..], [Event::Request(1, r, _)] if path(r) == b"/"));
    p.proto.respond(1, Response::bytes(StatusCode::OK, "hello"));
    let out = p.output();
    let Frame::Headers(h) = &out[0] else { panic!("{out:?}") };
    assert!(!h.end_stream);
    assert_eq!(p.status_of(h), "200");
    assert!(matches!(&out[1], Frame::Data(d) if &d.data[..] == b"hello" && d.end_stream));
    assert!(p.proto.streams.is_empty());
}

#[test]
fn first_frame_must_be_settings() {
    let mut p = Peer {
        proto: Proto::new(H2Settings::default(), None),
        enc: hpack::Encoder::new(),
        dec: hpack::Decoder::default(),
        rbuf: BytesMut::new(),
        events: Vec::new(),
        error: None,
        now: 0,
    };
    p.send(&raw(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn ping_is_acked_and_control_goes_first() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    p.proto.respond(1, Response::bytes(StatusCode::OK, "x"));
    p.send(&raw(kind::PING, 0, 0, b"abcdefgh"));
    let out = p.output();
    assert!(matches!(&out[0], Frame::Ping(pg) if pg.ack && &pg.payload == b"abcdefgh"));
    assert!(matches!(&out[1], Frame::Headers(_)));
}

#[test]
fn stream_state_errors() {
    let mut p = Peer::new(H2Settings::default());
    // DATA on an idle stream: connection PROTOCOL_ERROR.
    p.send(&raw(kind::DATA, 0, 1, b"x"));
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));

    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    // DATA after END_STREAM: STREAM_CLOSED.
    p.send(&raw(kind::DATA, 0, 1, b"x"));
    assert_eq!(rst(&p.output()), vec![(1, Reason::STREAM_CLOSED)]);
    // Even stream id: PROTOCOL_ERROR.
    p.get(2);
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn continuation_rules() {
    let mut p = Peer::new(H2Settings::default());
    p.send(&raw(kind::HEADERS, 0, 1, b"\x82"));
    p.send(&raw(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));

    // A split header block assembles into one request.
    let mut p = Peer::new(H2Settings::default());
    let mut block = BytesMut::new();
    p.enc.encode([(":method", "GET"), (":scheme", "http"), (":path", "/split")], &mut block);
    let mut v = Vec::new();
    frame::Headers::encode(1, &block, true, 2, &mut v);
    p.send(&v);
    assert!(matches!(&p.events[..], [Event::Request(1, r, _)] if path(r) == b"/split"));

    // CONTINUATION flood: endless empty CONTINUATION frames.
    let cfg = H2Settings { max_continuation_frames: 10, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    p.send(&raw(kind::HEADERS, flag::END_STREAM, 1, b"\x82"));
    for _ in 0..20 {
        p.send(&raw(kind::CONTINUATION, 0, 1, b""));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
    assert_eq!(goaway(&p.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn flow_control_windows() {
    let mut p = Peer::new(H2Settings::default());
    // The client grants only 10 bytes per stream.
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x04\0\0\0\x0a"));
    p.output();
    p.get(1);
    p.proto.respond(1, Response::bytes(StatusCode::OK, vec![b'a'; 25]));
    let out = p.output();
    assert!(matches!(&out[1], Frame::Data(d) if d.data.len() == 10 && !d.end_stream));
    assert_eq!(out.len(), 2);
    assert!(p.proto.flow_blocked());
    p.send(&raw(kind::WINDOW_UPDATE, 0, 1, &20u32.to_be_bytes()));
    let out = p.output();
    assert!(matches!(&out[0], Frame::Data(d) if d.data.len() == 15 && d.end_stream));
    // Window overflow on a stream: FLOW_CONTROL_ERROR for that stream only.
    p.get(3);
    p.send(&raw(kind::WINDOW_UPDATE, 0, 3, &0x7fff_ffffu32.to_be_bytes()));
    assert_eq!(rst(&p.output()), vec![(3, Reason::FLOW_CONTROL_ERROR)]);
    // On the connection: connection error.
    p.send(&raw(kind::WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()));
    assert_eq!(p.error, Some(Reason::FLOW_CONTROL_ERROR));
}

#[test]
fn request_body_grants_window_as_read() {
    let mut p = Peer::new(H2Settings::default());
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    let out = p.output();
    assert!(!out.iter().any(|f| matches!(f, Frame::WindowUpdate(w) if w.stream == 1)));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    for _ in 0..2 {
        let got = p.proto.poll_body(1, &mut cx);
        assert!(matches!(got, std::task::Poll::Ready(Some(Ok(ref b))) if b.len() == 16_384));
    }
    assert!(p.proto.poll_body(1, &mut cx).is_pending());
    let out = p.output();
    assert!(out.iter().any(|f| matches!(f, Frame::WindowUpdate(w) if w.stream == 1 && w.increment == 32_768)));
    // Too much data for the stream window: FLOW_CONTROL_ERROR on the stream.
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    p.send(&raw(kind::DATA, 0, 1, &[0u8; 16_384]));
    assert_eq!(rst(&p.output()), vec![(1, Reason::FLOW_CONTROL_ERROR)]);
}

#[test]
fn initial_window_change_applies_to_open_streams() {
    let mut p = Peer::new(H2Settings::default());
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x04\0\0\0\0"));
    p.get(1);
    p.proto.respond(1, Response::bytes(StatusCode::OK, "abc"));
    let out = p.output();
    assert!(out.iter().all(|f| !matches!(f, Frame::Data(_))));
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x04\0\0\0\x64"));
    let out = p.output();
    assert!(out.iter().any(|f| matches!(f, Frame::Data(d) if &d.data[..] == b"abc" && d.end_stream)));
}

#[test]
fn rapid_reset_and_made_you_reset_budgets() {
    let cfg = H2Settings { max_peer_resets: 5, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    for i in 0..10u32 {
        p.get(2 * i + 1);
        p.send(&raw(kind::RST_STREAM, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));

    let cfg = H2Settings { max_local_resets: 5, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    for i in 0..10u32 {
        // WINDOW_UPDATE with increment 0 on an open stream provokes a reset each time.
        p.get(2 * i + 1);
        p.send(&raw(kind::WINDOW_UPDATE, 0, 2 * i + 1, &0u32.to_be_bytes()));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn header_list_too_large_gets_431() {
    let cfg = H2Settings { max_header_list_size: 200, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    let big = "b".repeat(300);
    p.headers(1, &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", &big)], true);
    assert!(p.events.is_empty());
    let out = p.output();
    let Frame::Headers(h) = &out[0] else { panic!() };
    let h = h.clone();
    assert_eq!(p.status_of(&h), "431");
    // The connection goes on.
    p.get(3);
    assert_eq!(p.events.len(), 1);
}

#[test]
fn header_blocks_refused_past_the_budget_end_the_connection() {
    let cfg = H2Settings { max_header_list_size: 200, max_refused_headers: 3, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    // Decodes to 256 bytes: just over the limit, one unit each.
    let big = "b".repeat(100);
    for i in 0..3u32 {
        p.headers(2 * i + 1, &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", &big)], true);
        let out = p.output();
        let Frame::Headers(h) = &out[0] else { panic!("{out:?}") };
        let h = h.clone();
        assert_eq!(p.status_of(&h), "431");
    }
    assert_eq!(p.error, None);
    p.headers(7, &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", &big)], true);
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
    let out = p.output();
    assert!(!out.iter().any(|f| matches!(f, Frame::Headers(_))), "no fourth 431: {out:?}");
    assert_eq!(goaway(&out), Some(Reason::ENHANCE_YOUR_CALM));
}

/// A polite HPACK bomb (one block stores a 4,000-byte field and refers to it 12,000 times:
/// ~48 MB decoded from 16 KB) ends the connection at the first block, without a 431.
#[test]
fn an_hpack_bomb_ends_the_connection_at_the_first_block() {
    let mut p = Peer::new(H2Settings::default());
    let mut block = vec![0x82, 0x86, 0x84, 0x40, 0x01, b'x', 0x7f];
    let mut n = 4000 - 127;
    while n >= 128 {
        block.push((n & 0x7f) as u8 | 0x80);
        n >>= 7;
    }
    block.push(n as u8);
    block.extend(std::iter::repeat_n(b'v', 4000));
    block.extend(std::iter::repeat_n(0xbe, 12_000));
    let mut v = Vec::new();
    frame::Headers::encode(1, &block, true, 16_384, &mut v);
    p.send(&v);
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
    let out = p.output();
    assert!(!out.iter().any(|f| matches!(f, Frame::Headers(_))), "no 431: {out:?}");
    assert_eq!(goaway(&out), Some(Reason::ENHANCE_YOUR_CALM));
    assert!(p.events.is_empty());
}

/// A request just over the header list limit is not a bomb: 431, and the connection goes
/// on; one far over the limit spends the budget at once.
#[test]
fn refused_blocks_cost_by_their_decoded_size() {
    let cfg = H2Settings { max_header_list_size: 200, max_refused_headers: 8, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    fn fields(v: &str) -> Vec<(&str, &str)> {
        vec![(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", v)]
    }
    let (small, large) = ("b".repeat(100), "b".repeat(1_500));
    p.headers(1, &fields(&small), true);
    assert_eq!(p.error, None);
    assert!(p.output().iter().any(|f| matches!(f, Frame::Headers(_))), "431");
    // 1,656 bytes decoded: 8 units, over the 7 left.
    p.headers(3, &fields(&large), true);
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
}

/// A stream that depends on itself (RFC 9113 §5.3.1) ends the connection at once:
/// GOAWAY(PROTOCOL_ERROR) at the first PRIORITY frame or HEADERS that says so, not a
/// reset per stream until the MadeYouReset budget runs out.
#[test]
fn a_self_dependent_stream_ends_the_connection() {
    let mut p = Peer::new(H2Settings::default());
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    p.send(&raw(kind::PRIORITY, 0, 1, b"\0\0\0\x01\x0f"));
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));
    let out = p.output();
    assert!(rst(&out).is_empty(), "{out:?}");
    assert_eq!(goaway(&out), Some(Reason::PROTOCOL_ERROR));

    let mut p = Peer::new(H2Settings::default());
    let mut block = BytesMut::new();
    p.enc.encode([(&b":method"[..], &b"GET"[..]), (b":scheme", b"http"), (b":path", b"/")], &mut block);
    let mut payload = vec![0, 0, 0, 3, 15];
    payload.extend_from_slice(&block);
    p.send(&raw(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM | flag::PRIORITY, 3, &payload));
    assert_eq!(p.error, Some(Reason::PROTOCOL_ERROR));
    assert!(p.events.is_empty());
    assert_eq!(goaway(&p.output()), Some(Reason::PROTOCOL_ERROR));
}

#[test]
fn refused_streams_do_not_count_as_provoked_resets() {
    let cfg = H2Settings { max_concurrent_streams: 1, max_local_resets: 2, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    for i in 1..10u32 {
        p.get(2 * i + 1);
    }
    assert_eq!(p.error, None);
    assert_eq!(rst(&p.output()).len(), 9);
}

#[test]
fn a_stream_opened_and_reset_in_one_read_never_reaches_the_app() {
    let mut p = Peer::new(H2Settings::default());
    let mut block = BytesMut::new();
    p.enc.encode([(&b":method"[..], &b"GET"[..]), (b":scheme", b"http"), (b":path", b"/")], &mut block);
    let mut bytes = Vec::new();
    frame::Headers::encode(1, &block, true, 16_384, &mut bytes);
    bytes.extend(raw(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    // One read: the whole batch at once (as the driver reads it).
    p.rbuf.extend_from_slice(&bytes);
    while p.proto.handle_bytes(&mut p.rbuf, 0).unwrap() {}
    p.proto.poll_events(&mut p.events);
    assert!(p.events.is_empty(), "{:?}", p.events);
    // Provoked the same way: a WINDOW_UPDATE of 0 right behind the HEADERS.
    let mut bytes = Vec::new();
    frame::Headers::encode(3, &block[..], true, 16_384, &mut bytes);
    bytes.extend(raw(kind::WINDOW_UPDATE, 0, 3, &0u32.to_be_bytes()));
    p.rbuf.extend_from_slice(&bytes);
    while p.proto.handle_bytes(&mut p.rbuf, 0).unwrap() {}
    p.proto.poll_events(&mut p.events);
    assert!(p.events.is_empty(), "{:?}", p.events);
    assert_eq!(rst(&p.output()), vec![(3, Reason::PROTOCOL_ERROR)]);
}

#[test]
fn concurrency_limit_refuses() {
    let cfg = H2Settings { max_concurrent_streams: 2, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    p.get(1);
    p.get(3);
    p.get(5);
    assert_eq!(rst(&p.output()), vec![(5, Reason::REFUSED_STREAM)]);
    assert_eq!(p.events.len(), 2);
}

#[test]
fn settings_and_ping_floods() {
    let cfg = H2Settings { max_control_frames: 50, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    for _ in 0..100 {
        p.send(&raw(kind::PING, 0, 0, &[1; 8]));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
    // A peer that never reads our acks: the control queue is bounded.
    let cfg = H2Settings { max_control_queue: 1000, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    for _ in 0..200 {
        p.send(&raw(kind::SETTINGS, 0, 0, &[]));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
    let cfg = H2Settings { max_empty_frames: 10, ..H2Settings::default() };
    let mut p = Peer::new(cfg);
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    for _ in 0..20 {
        p.send(&raw(kind::DATA, 0, 1, &[]));
    }
    assert_eq!(p.error, Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn last_stream_id_ends_the_connection_gracefully() {
    let mut p = Peer::new(H2Settings::default());
    p.get(0x7fff_ffff);
    assert_eq!(p.events.len(), 1);
    let out = p.output();
    assert_eq!(goaway(&out), Some(Reason::NO_ERROR));
    assert!(out.iter().any(|f| matches!(f, Frame::GoAway(g) if g.last_stream == 0x7fff_ffff)));
    p.proto.respond(0x7fff_ffff, Response::new(StatusCode::OK));
    p.output();
    assert!(p.proto.is_done());
}

#[test]
fn priority_update_puts_urgent_stream_first() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    p.get(3);
    // Stream 3 becomes urgent.
    let mut payload = 3u32.to_be_bytes().to_vec();
    payload.extend_from_slice(b"u=0");
    p.send(&raw(kind::PRIORITY_UPDATE, 0, 0, &payload));
    p.proto.respond(1, Response::bytes(StatusCode::OK, vec![1u8; 100_000]));
    p.proto.respond(3, Response::bytes(StatusCode::OK, vec![3u8; 1000]));
    let order: Vec<u32> =
        p.output().iter().filter_map(|f| if let Frame::Data(d) = f { Some(d.stream) } else { None }).collect();
    // The urgent stream's data goes out before the big stream's first frame.
    assert_eq!(order.first(), Some(&3), "{order:?}");
    assert_eq!(order.iter().filter(|&&s| s == 1).count(), 4);
}

#[test]
fn upgrade_settings_are_applied_without_ack() {
    assert_eq!(
        super::base64url(b"AAMAAABkAAQCAAAAAAIAAAAA").unwrap(),
        b"\0\x03\0\0\0\x64\0\x04\x02\0\0\0\0\x02\0\0\0\0"
    );
    let mut p = Proto::new(H2Settings::default(), None);
    let mut out = Vec::new();
    fill(&mut p, &mut out);
    // Initial window 10 for our sends.
    p.upgrade_stream(Some(b"AAQAAAAK"), false);
    p.respond(1, Response::bytes(StatusCode::OK, vec![b'u'; 30]));
    let mut peer = Peer {
        proto: p,
        enc: hpack::Encoder::new(),
        dec: hpack::Decoder::default(),
        rbuf: BytesMut::new(),
        events: Vec::new(),
        error: None,
        now: 0,
    };
    let out = peer.output();
    assert!(!out.iter().any(|f| matches!(f, Frame::Settings(s) if s.ack)));
    assert!(out.iter().any(|f| matches!(f, Frame::Data(d) if d.data.len() == 10)));
}

#[test]
fn priority_signals_for_idle_and_closed_streams_are_bounded() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    p.proto.respond(1, Response::new(StatusCode::OK));
    p.output();
    for i in 0..4000u32 {
        // PRIORITY for far-away idle ids and for the closed stream 1.
        p.send(&raw(kind::PRIORITY, 0, 1001 + 2 * i, b"\0\0\0\0\x0f"));
        p.send(&raw(kind::PRIORITY, 0, 1, b"\0\0\0\0\x0f"));
    }
    assert!(p.error.is_none());
    assert!(p.proto.queue.tracked() <= 2 * 100 + 16, "{}", p.proto.queue.tracked());
}

#[test]
fn no_rfc7540_priorities_setting_ignores_weights() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    // Weight 256 for stream 1 is honoured...
    p.send(&raw(kind::PRIORITY, 0, 1, b"\0\0\0\0\xff"));
    assert_eq!(p.proto.queue.precedence(1).weight, 256);
    // ...until the client says it does not use RFC 7540 priorities.
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x09\0\0\0\x01"));
    p.get(3);
    p.send(&raw(kind::PRIORITY, 0, 3, b"\0\0\0\0\xff"));
    assert_eq!(p.proto.queue.precedence(3).weight, super::priority::DEFAULT_WEIGHT);
}

fn timeouts() -> super::Timeouts {
    super::Timeouts {
        header: 1_000,
        body: 2_000,
        min_rate: 100,
        grace: 2_000,
        stall: 3_000,
        send: 0,
        idle: 0,
        max_drain: 100,
    }
}

#[test]
fn zero_window_connection_gets_goaway_at_the_send_deadline_pings_or_not() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(super::Timeouts { send: 1_000, stall: 60_000, ..timeouts() });
    // Stream windows of 100 bytes; the client never opens them further.
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x04\0\0\0\x64"));
    let _ = p.output();
    p.get(1);
    p.proto.respond(1, Response::bytes(StatusCode::OK, vec![b'a'; 1_000]));
    p.now = 100;
    let out = p.output();
    assert!(out.iter().any(|f| matches!(f, Frame::Data(d) if d.data.len() == 100)), "{out:?}");
    assert!(p.proto.take_timers_changed());
    assert_eq!(p.proto.poll_timeout(), Some(1_100), "from the last DATA progress");
    // PINGs are answered, and change nothing.
    for t in [300, 600, 900, 1_050] {
        p.now = t;
        p.send(&raw(kind::PING, 0, 0, b"chatter!"));
        assert!(matches!(&p.output()[..], [Frame::Ping(a)] if a.ack));
    }
    assert_eq!(p.proto.poll_timeout(), Some(1_100));
    // A window update that lets 50 bytes go is progress: the deadline moves.
    p.now = 1_080;
    p.send(&raw(kind::WINDOW_UPDATE, 0, 1, &50u32.to_be_bytes()));
    assert!(p.output().iter().any(|f| matches!(f, Frame::Data(d) if d.data.len() == 50)));
    assert_eq!(p.proto.poll_timeout(), Some(2_080));
    p.proto.handle_timeout(2_079);
    assert_eq!(goaway(&p.output()), None);
    p.proto.handle_timeout(2_080);
    assert_eq!(goaway(&p.output()), Some(Reason::ENHANCE_YOUR_CALM));
    assert!(p.proto.is_done());
}

#[test]
fn idle_connection_gets_goaway_no_error() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(super::Timeouts { idle: 5_000, ..timeouts() });
    assert_eq!(p.proto.poll_timeout(), Some(5_000), "from the client's SETTINGS");
    p.now = 1_000;
    p.get(1);
    p.proto.respond(1, Response::bytes(StatusCode::OK, "hi"));
    let _ = p.output();
    assert_eq!(p.proto.poll_timeout(), Some(6_000), "from the last frame");
    // A stream in flight is not idle.
    p.now = 2_000;
    p.get(3);
    p.proto.handle_timeout(7_000);
    assert_eq!(goaway(&p.output()), None);
    p.proto.respond(3, Response::bytes(StatusCode::OK, "hi"));
    let _ = p.output();
    p.proto.handle_timeout(12_000);
    assert_eq!(goaway(&p.output()), Some(Reason::NO_ERROR));
}

#[test]
fn slow_request_body_stream_is_reset_at_its_deadline() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/slow")], false);
    p.headers(3, &[(":method", "POST"), (":scheme", "http"), (":path", "/fast")], false);
    assert_eq!(p.proto.poll_timeout(), None, "no deadline before the app waits");
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(p.proto.poll_body(1, &mut cx).is_pending());
    assert!(p.proto.poll_body(3, &mut cx).is_pending());
    assert!(p.proto.take_timers_changed());
    assert_eq!(p.proto.poll_timeout(), Some(2_000));
    // Stream 3 keeps 100 B/s (200 bytes per 2 s: extended); stream 1 sends 10 bytes.
    for t in [1_000u64, 1_900, 2_900, 3_800] {
        p.now = t;
        p.send(&raw(kind::DATA, 0, 3, &[b'x'; 200]));
        while let std::task::Poll::Ready(Some(Ok(_))) = p.proto.poll_body(3, &mut cx) {}
    }
    p.now = 1_500;
    p.send(&raw(kind::DATA, 0, 1, b"0123456789"));
    assert!(matches!(p.proto.poll_body(1, &mut cx), std::task::Poll::Ready(Some(Ok(_)))));
    assert!(p.proto.poll_body(1, &mut cx).is_pending());
    p.proto.handle_timeout(1_999);
    assert!(rst(&p.output()).is_empty(), "nothing is late yet");
    p.proto.handle_timeout(2_000);
    assert_eq!(rst(&p.output()), vec![(1, Reason::CANCEL)]);
    assert!(matches!(p.proto.poll_body(1, &mut cx), std::task::Poll::Ready(Some(Err(_)))));
    // Stream 3 is alive: its deadline moved with its data.
    assert!(p.proto.poll_timeout().is_some_and(|d| d > 4_000), "{:?}", p.proto.poll_timeout());
    p.now = 4_000;
    p.send(&raw(kind::DATA, flag::END_STREAM, 3, b"end"));
    assert_eq!(p.proto.poll_timeout(), None, "the body ended: its deadline is gone");
}

#[test]
fn app_not_reading_does_not_count_against_the_client() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(p.proto.poll_body(1, &mut cx).is_pending());
    p.now = 100;
    p.send(&raw(kind::DATA, 0, 1, &[b'x'; 500]));
    // The app does not read for a long time: unread data extends the deadline.
    p.proto.handle_timeout(10_000);
    assert!(rst(&p.output()).is_empty());
    assert_eq!(p.proto.poll_timeout(), Some(12_000));
}

#[test]
fn stalled_stream_is_reset_while_others_go_on() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    // Stream windows of 1,000 bytes; the connection window is wide open.
    p.send(&raw(kind::SETTINGS, 0, 0, b"\0\x04\0\0\x03\xe8"));
    p.send(&raw(kind::WINDOW_UPDATE, 0, 0, &1_000_000u32.to_be_bytes()));
    let _ = p.output();
    p.get(1);
    p.get(3);
    // Stream 1's window closes after 1,000 bytes (the client does not read it).
    let mut out = Vec::new();
    p.proto.respond(1, Response::bytes(StatusCode::OK, vec![b'a'; 70_000]));
    p.proto.respond(3, Response::bytes(StatusCode::OK, "small"));
    p.now = 10;
    p.proto.set_now(10);
    fill(&mut p.proto, &mut out);
    assert!(p.proto.take_timers_changed());
    assert_eq!(p.proto.poll_timeout(), Some(3_010));
    // Nothing else has output now, so the connection counts as stuck too (its own send
    // deadline); while other streams send, it would not.
    assert!(p.proto.flow_blocked());
    p.proto.handle_timeout(3_009);
    assert!(rst(&p.output()).is_empty());
    p.proto.handle_timeout(3_010);
    assert_eq!(rst(&p.output()), vec![(1, Reason::CANCEL)]);
    assert_eq!(p.proto.poll_timeout(), None);
}

#[test]
fn slow_header_block_gets_goaway() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    let mut block = BytesMut::new();
    p.enc.encode([(&b":method"[..], &b"GET"[..]), (b":scheme", b"http"), (b":path", b"/")], &mut block);
    p.now = 50;
    // HEADERS without END_HEADERS: the rest never comes.
    p.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &block[..2]));
    assert_eq!(p.proto.poll_timeout(), Some(1_050));
    p.proto.handle_timeout(1_049);
    assert_eq!(goaway(&p.output()), None);
    p.proto.handle_timeout(1_050);
    assert_eq!(goaway(&p.output()), Some(Reason::ENHANCE_YOUR_CALM));
}

#[test]
fn repeated_heads_are_reused_and_decode_the_same() {
    let mut p = Peer::new(H2Settings::default());
    let mut blocks = Vec::new();
    for (i, id) in [1u32, 3, 5, 7].into_iter().enumerate() {
        p.get(id);
        let ct = if i == 3 { "text/plain" } else { "text/html" };
        p.proto.respond(id, Response::bytes(StatusCode::OK, "hello").header(http::header::CONTENT_TYPE, ct));
        let out = p.output();
        let Some(Frame::Headers(h)) = out.into_iter().find(|f| matches!(f, Frame::Headers(_))) else {
            panic!("no HEADERS")
        };
        let mut fields = Vec::new();
        p.dec.decode(&h.fragment, |f| fields.push((f.name.as_bytes().to_vec(), f.value.as_bytes().to_vec()))).unwrap();
        let has = |n: &str, v: &str| fields.iter().any(|(a, b)| a == n.as_bytes() && b == v.as_bytes());
        assert!(has(":status", "200") && has("content-type", ct) && has("content-length", "5"), "{fields:?}");
        blocks.push(h.fragment.to_vec());
    }
    // The second head indexes what the first inserted; the third is the cached copy of the
    // second; the fourth differs and is encoded afresh.
    assert_ne!(blocks[0], blocks[1]);
    assert!(blocks[1] == blocks[2] || blocks[2].len() <= blocks[1].len());
    assert_ne!(blocks[2], blocks[3]);
}

/// Decoded header fields, as (name, value) bytes.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// The decoded fields of the first HEADERS frame the connection writes, and its block.
fn head_fields(p: &mut Peer) -> (Fields, Vec<u8>) {
    let out = p.output();
    let Some(Frame::Headers(h)) = out.into_iter().find(|f| matches!(f, Frame::Headers(_))) else {
        panic!("no HEADERS")
    };
    let mut fields = Vec::new();
    p.dec.decode(&h.fragment, |f| fields.push((f.name.as_bytes().to_vec(), f.value.as_bytes().to_vec()))).unwrap();
    (fields, h.fragment.to_vec())
}

#[test]
fn shared_fields_are_encoded_in_place_and_their_heads_reused_by_identity() {
    use crate::SharedFields;
    use http::header::{CONTENT_TYPE, DATE, ETAG, VARY};
    use std::sync::Arc;
    let set = |etag: &'static str| {
        Arc::new(SharedFields::new([
            (ETAG, http::HeaderValue::from_static(etag)),
            (CONTENT_TYPE, http::HeaderValue::from_static("text/html")),
            (http::header::CONNECTION, http::HeaderValue::from_static("close")),
        ]))
    };
    let (a, b, c) = (set("\"a\""), set("\"a\""), set("\"c\""));
    let mut p = Peer::new(H2Settings::default());
    let mut got = Vec::new();
    // Two with set a (the second is the first's cached block once the table settled), one
    // with an equal set b, one with set c, one with set c and a field of its own.
    let sends: [(&Arc<SharedFields>, Option<&str>); 6] =
        [(&a, None), (&a, None), (&a, None), (&b, None), (&c, None), (&c, Some("origin"))];
    for (i, (set, own)) in sends.into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        p.get(id);
        let mut res = Response::bytes(StatusCode::OK, "hello").shared_fields(set.clone());
        if let Some(v) = own {
            res = res.header(VARY, v);
        }
        p.proto.respond(id, res);
        let (fields, block) = head_fields(&mut p);
        let names: Vec<&[u8]> = fields.iter().map(|(n, _)| &n[..]).collect();
        let mut want: Vec<&[u8]> = vec![b":status", b"date", b"content-length", b"etag", b"content-type"];
        if own.is_some() {
            want.push(b"vary");
        }
        assert_eq!(names, want, "{fields:?}");
        let etag = &fields[3].1;
        assert_eq!(etag, if i < 4 { &b"\"a\""[..] } else { &b"\"c\""[..] });
        assert_eq!(&fields[2].1, b"5");
        got.push(block);
    }
    assert_eq!(got[1], got[2], "the same set in the same table state: the same bytes");
    assert_eq!(got[2], got[3], "an equal set encodes the same");
    assert_ne!(got[3], got[4]);
    assert_ne!(got[4], got[5]);
    // A shared Date replaces ours.
    let dated = Arc::new(SharedFields::new([(DATE, http::HeaderValue::from_static("Mon, 07 Nov 1994 08:49:37 GMT"))]));
    p.get(101);
    p.proto.respond(101, Response::bytes(StatusCode::OK, "x").shared_fields(dated));
    let (fields, _) = head_fields(&mut p);
    let dates: Vec<_> = fields.iter().filter(|(n, _)| n == b"date").collect();
    assert_eq!(dates.len(), 1, "{fields:?}");
    assert_eq!(dates[0].1, b"Mon, 07 Nov 1994 08:49:37 GMT");
}

#[test]
fn app_date_and_server_replace_ours() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    let res = Response::bytes(StatusCode::OK, "x")
        .header(http::header::DATE, "Sun, 06 Nov 1994 08:49:37 GMT")
        .header(http::header::SERVER, "upstream/1.0");
    p.proto.respond(1, res);
    let out = p.output();
    let Some(Frame::Headers(h)) = out.into_iter().find(|f| matches!(f, Frame::Headers(_))) else { panic!() };
    let mut fields = Vec::new();
    p.dec.decode(&h.fragment, |f| fields.push((f.name.as_bytes().to_vec(), f.value.as_bytes().to_vec()))).unwrap();
    let count = |n: &[u8]| fields.iter().filter(|(a, _)| a == n).count();
    assert_eq!((count(b"date"), count(b"server")), (1, 1), "{fields:?}");
    assert!(fields.iter().any(|(a, b)| a == b"server" && b == b"upstream/1.0"));
}

#[test]
fn unread_body_after_the_complete_answer_is_held_to_the_rate_and_max_drain() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    let post = [(":method", "POST"), (":scheme", "http"), (":path", "/")];
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Stream 1: the app reads a piece of the body, drops the rest and answers; the client
    // goes on sending, discarded, until it is too slow for the body clock (2 s of grace
    // from the answer).
    p.headers(1, &post, false);
    p.send(&raw(kind::DATA, 0, 1, b"some"));
    assert!(p.proto.poll_body(1, &mut cx).is_ready());
    p.proto.drop_body(1);
    p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
    let out = p.output();
    assert!(out.iter().any(|f| matches!(f, Frame::Data(d) if d.end_stream)), "the answer: {out:?}");
    assert!(rst(&out).is_empty(), "an upload that keeps up may finish: {out:?}");
    assert!(p.proto.take_timers_changed());
    assert_eq!(p.proto.poll_timeout(), Some(2_000));
    p.now = 1_000;
    p.send(&raw(kind::DATA, 0, 1, b"more"));
    assert!(rst(&p.output()).is_empty());
    let at = p.proto.poll_timeout().unwrap();
    assert!(at < 2_100, "{at}");
    p.proto.handle_timeout(at);
    assert_eq!(rst(&p.output()), vec![(1, Reason::CANCEL)]);
    // Stream 3: more declared than max_drain (100 bytes here): stopped at once, NO_ERROR.
    p.headers(3, &[(":method", "POST"), (":scheme", "http"), (":path", "/"), ("content-length", "5000")], false);
    p.proto.drop_body(3);
    p.proto.respond(3, Response::bytes(StatusCode::OK, "ok"));
    let out = p.output();
    let end = out.iter().position(|f| matches!(f, Frame::Data(d) if d.end_stream)).expect("the answer");
    assert_eq!(rst(&out[end..]), vec![(3, Reason::NO_ERROR)]);
    // Stream 5: no length, more than max_drain arrives after the answer: NO_ERROR.
    p.headers(5, &post, false);
    assert!(p.proto.poll_body(5, &mut cx).is_pending());
    p.proto.respond(5, Response::bytes(StatusCode::OK, "ok"));
    let _ = p.output();
    p.proto.drop_body(5);
    assert!(rst(&p.output()).is_empty(), "the app let go after its answer: the same rule");
    p.send(&raw(kind::DATA, 0, 5, &[b'x'; 80]));
    assert!(rst(&p.output()).is_empty());
    p.send(&raw(kind::DATA, 0, 5, &[b'x'; 80]));
    assert_eq!(rst(&p.output()), vec![(5, Reason::NO_ERROR)]);
    assert_eq!(p.error, None);
}

/// An app that answers without ever asking for the body (a static route's 405): what the
/// client still sends is drained as for an app that read part of it (and as HTTP/1.1 does):
/// discarded under the body clock, the stream never reset while the upload keeps up.
#[test]
fn body_never_asked_for_is_drained_under_the_body_clock() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(timeouts());
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/"), ("content-length", "50")], false);
    p.send(&raw(kind::DATA, 0, 1, b"some"));
    p.proto.drop_body(1);
    p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
    let out = p.output();
    assert!(out.iter().any(|f| matches!(f, Frame::Data(d) if d.end_stream)), "the answer: {out:?}");
    assert!(rst(&out).is_empty(), "{out:?}");
    assert!(p.proto.take_timers_changed());
    p.send(&raw(kind::DATA, 0, 1, b"more"));
    assert!(rst(&p.output()).is_empty());
    // Far below the rate: the body clock cuts it.
    let at = p.proto.poll_timeout().unwrap();
    p.proto.handle_timeout(at);
    assert_eq!(rst(&p.output()), vec![(1, Reason::CANCEL)]);
    // The rest of it coming: the stream ends as the request does, with no reset.
    p.headers(3, &[(":method", "POST"), (":scheme", "http"), (":path", "/"), ("content-length", "8")], false);
    p.proto.drop_body(3);
    p.proto.respond(3, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
    let _ = p.output();
    p.send(&raw(kind::DATA, flag::END_STREAM, 3, b"12345678"));
    assert!(rst(&p.output()).is_empty());
    assert!(!p.proto.has_streams());
    assert_eq!(p.error, None);
}

/// h2spec 2.6.0's http2/8.1 #1 and http2/8.1.2.6 #1: a request answered early (its app
/// never read the body) whose later frames are malformed gets RST_STREAM(PROTOCOL_ERROR),
/// whether the answer went out before those frames arrived or after.
#[test]
fn malformed_frames_after_an_early_answer_are_stream_errors() {
    let post = [(":method", "POST"), (":scheme", "http"), (":path", "/"), (":authority", "x")];
    let trailers = {
        let mut enc = hpack::Encoder::new();
        let mut b = BytesMut::new();
        enc.encode([(&b"x-test"[..], &b"ok"[..])], &mut b);
        b
    };
    for answer_first in [true, false] {
        // 8.1 #1: HEADERS, DATA "test", then a second HEADERS without END_STREAM.
        let mut p = Peer::new(H2Settings::default());
        p.proto.set_timeouts(timeouts());
        p.headers(1, &post, false);
        if answer_first {
            p.proto.drop_body(1);
            p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
            let _ = p.output();
        }
        p.send(&raw(kind::DATA, 0, 1, b"test"));
        // The peer's encoder state: a fresh context encodes the same literal block.
        let mut v = Vec::new();
        frame::Headers::encode(1, &trailers, false, 16_384, &mut v);
        p.send(&v);
        if !answer_first {
            p.proto.drop_body(1);
            p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
        }
        let out = p.output();
        assert_eq!(rst(&out), vec![(1, Reason::PROTOCOL_ERROR)], "8.1 #1, answer first: {answer_first}: {out:?}");

        // 8.1.2.6 #1: content-length 1, then DATA of 4 bytes with END_STREAM.
        let mut p = Peer::new(H2Settings::default());
        p.proto.set_timeouts(timeouts());
        let mut f = post.to_vec();
        f.push(("content-length", "1"));
        p.headers(1, &f, false);
        if answer_first {
            p.proto.drop_body(1);
            p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
            let _ = p.output();
        }
        p.send(&raw(kind::DATA, flag::END_STREAM, 1, b"test"));
        if !answer_first {
            p.proto.drop_body(1);
            p.proto.respond(1, Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "no"));
        }
        let out = p.output();
        assert_eq!(rst(&out), vec![(1, Reason::PROTOCOL_ERROR)], "8.1.2.6 #1, answer first: {answer_first}: {out:?}");
    }
}

#[test]
fn body_far_below_the_rate_is_reset_within_the_grace_not_the_timeout() {
    let mut p = Peer::new(H2Settings::default());
    p.proto.set_timeouts(super::Timeouts { body: 30_000, min_rate: 256, grace: 2_000, ..timeouts() });
    p.headers(1, &[(":method", "POST"), (":scheme", "http"), (":path", "/")], false);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    assert!(p.proto.poll_body(1, &mut cx).is_pending());
    // 50 bytes every 500 ms (100 B/s): each earns ~195 ms of credit.
    let mut t = 0;
    while p.proto.poll_timeout().is_some_and(|d| d > t) {
        p.now = t;
        p.send(&raw(kind::DATA, 0, 1, &[b'x'; 50]));
        while let std::task::Poll::Ready(Some(Ok(_))) = p.proto.poll_body(1, &mut cx) {}
        t += 500;
    }
    let at = p.proto.poll_timeout().unwrap();
    assert!((3_000..4_000).contains(&at), "{at}");
    p.proto.handle_timeout(at);
    assert_eq!(rst(&p.output()), vec![(1, Reason::CANCEL)]);
}

#[test]
fn streamed_body_ends_with_trailers() {
    let mut p = Peer::new(H2Settings::default());
    p.get(1);
    let res = Response::stream(StatusCode::OK, |_w| async { Ok(()) });
    assert!(matches!(p.proto.respond(1, res), super::After::RunStream(_)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut piece = Some(bytes::Bytes::from_static(b"msg"));
    assert!(p.proto.poll_write(1, &mut piece, &mut cx).is_ready());
    let grpc = http::HeaderName::from_static("grpc-status");
    p.proto.set_trailers(1, vec![(grpc, http::HeaderValue::from_static("0"))]);
    p.proto.finish_stream(1, true);
    let out = p.output();
    assert!(
        matches!(&out[..], [Frame::Headers(h), Frame::Data(d), Frame::Headers(t)]
        if !h.end_stream && &d.data[..] == b"msg" && !d.end_stream && t.end_stream),
        "{out:?}"
    );
    let Frame::Headers(t) = &out[2] else { unreachable!() };
    let Frame::Headers(h) = &out[0] else { unreachable!() };
    p.status_of(h);
    let mut fields = Vec::new();
    p.dec.decode(&t.fragment, |f| fields.push((f.name.as_bytes().to_vec(), f.value.as_bytes().to_vec()))).unwrap();
    assert_eq!(fields, [(b"grpc-status".to_vec(), b"0".to_vec())]);
    assert!(p.proto.streams.is_empty());
}

/// A cached head goes out again only while its date, length and status are the same: each
/// of them changing gives a head with the new value.
#[test]
fn a_cached_head_follows_its_date_length_and_status() {
    let mut p = Peer::new(H2Settings::default());
    let (d1, d2) = (b"Sun, 06 Nov 1994 08:49:37 GMT", b"Sun, 06 Nov 1994 08:49:38 GMT");
    let cases = [
        (d1, StatusCode::OK, "hello"),
        (d1, StatusCode::OK, "hello"),
        (d1, StatusCode::OK, "hello"),
        (d2, StatusCode::OK, "hello"),
        (d2, StatusCode::OK, "hi"),
        (d2, StatusCode::NOT_FOUND, "hi"),
        (d2, StatusCode::NOT_FOUND, "hi"),
    ];
    let mut blocks = Vec::new();
    for (i, (date, status, body)) in cases.into_iter().enumerate() {
        let id = 1 + 2 * i as u32;
        p.get(id);
        p.proto.respond(id, Response::bytes(status, body));
        let mut out = Vec::new();
        p.proto.poll_transmit(&mut out, 1 << 20, date, &mut Vec::new());
        let mut buf = BytesMut::from(&out[..]);
        let mut head = None;
        while let Some(f) = codec::decode_frame(&mut buf, frame::MAX_MAX_FRAME_SIZE).unwrap() {
            if let Frame::Headers(h) = f {
                head = Some(h);
            }
        }
        let h = head.expect("a HEADERS frame");
        let mut fields = Vec::new();
        p.dec.decode(&h.fragment, |f| fields.push((f.name.as_bytes().to_vec(), f.value.as_bytes().to_vec()))).unwrap();
        let value = |n: &str| fields.iter().find(|(a, _)| a == n.as_bytes()).map(|(_, v)| v.clone());
        assert_eq!(value("date").as_deref(), Some(&date[..]), "{i}");
        assert_eq!(value("content-length").as_deref(), Some(body.len().to_string().as_bytes()), "{i}");
        assert_eq!(value(":status").as_deref(), Some(status.as_str().as_bytes()), "{i}");
        blocks.push(h.fragment.to_vec());
    }
    assert_eq!(blocks[1], blocks[2], "the same head in the same table state: the cached bytes");
    assert_eq!(blocks[5].len(), blocks[6].len());
}

#[test]
fn a_file_batch_fits_two_loopback_segments() {
    // The default batch of a file's DATA frames (the write the driver makes of it) must fit
    // in two TCP segments of loopback's MSS (65,483 bytes): a third, small segment is what
    // BBR's pacing holds back on a timer (a 128 KiB batch, 131,144 bytes, left 178 over).
    const LOOPBACK_MSS: usize = 65_483;
    let cfg = H2Settings::default();
    let batch = cfg.write_batch;
    let mut p = Peer::new(cfg);
    // Windows as wide as HTTP/2 allows, so that only the batch bounds a write.
    let mut settings = Vec::new();
    settings.extend_from_slice(&frame::Setting::INITIAL_WINDOW_SIZE.0.to_be_bytes());
    settings.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    p.send(&raw(kind::SETTINGS, 0, 0, &settings));
    p.send(&raw(kind::WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    p.get(1);
    let path = std::env::temp_dir().join(format!("selvedge-batch-{}", std::process::id()));
    std::fs::write(&path, vec![b'f'; 1 << 20]).unwrap();
    p.proto.respond(1, Response::file(StatusCode::OK, &path).unwrap());
    std::fs::remove_file(&path).unwrap();
    // The SETTINGS ACK, the response head and a first batch of file data, then the rest.
    let mut first = Vec::new();
    p.proto.poll_transmit(&mut first, batch, b"Sun, 06 Nov 1994 08:49:37 GMT", &mut Vec::new());
    let mut writes = Vec::new();
    loop {
        let (mut out, mut reads) = (Vec::new(), Vec::new());
        p.proto.poll_transmit(&mut out, batch, b"Sun, 06 Nov 1994 08:49:37 GMT", &mut reads);
        let size = out.len() + reads.iter().map(|r| r.len).sum::<usize>();
        if size == 0 {
            break;
        }
        writes.push(size);
    }
    assert!(writes.iter().all(|&w| w <= 2 * LOOPBACK_MSS), "batches of {batch} bytes: {writes:?}");
    assert!(writes.len() >= 2, "{writes:?}");
    // And a batch is not much smaller than that: a write's fixed cost is spread over it.
    assert!(writes[..writes.len() - 1].iter().all(|&w| w > 3 * LOOPBACK_MSS / 2), "{writes:?}");
}
