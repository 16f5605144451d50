//! HTTP/3's connection rules, byte by byte: one test per rule of RFC 9114 §4–§7 (and RFC
//! 9204 §4.2–§4.4) the server enforces. Every input is fed one byte at a time (and whole),
//! so a rule holds however the bytes arrive.

use bytes::{BufMut, BytesMut};

use super::conn::{Admission, Close, Critical, UniStep, UniStream, MAX_SETTINGS};
use super::frame::{self, code, put_head, put_varint};
use super::request::{ReqError, ReqEvent, RequestStream};

fn f(kind: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    put_head(&mut b, kind, payload.len() as u64);
    b.put_slice(payload);
    b.to_vec()
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A control stream's type and an empty SETTINGS frame.
const CTRL: &[u8] = &[0x00, 0x04, 0x00];

/// How a stream's end comes.
#[derive(Clone, Copy)]
enum End {
    Open,
    Fin,
    Reset,
}

/// Feeds `bytes` to a new unidirectional stream (one byte at a time when `bytewise`), then
/// its end: the first connection error, or the steps it gave.
fn uni_with(critical: &Critical, bytes: &[u8], end: End, bytewise: bool) -> Result<Vec<UniStep>, Close> {
    let mut s = UniStream::new();
    let mut buf = BytesMut::new();
    let mut steps = Vec::new();
    let pieces: Vec<&[u8]> = if bytewise { bytes.chunks(1).collect() } else { vec![bytes] };
    for p in pieces {
        buf.extend_from_slice(p);
        let step = s.handle_bytes(&mut buf, critical)?;
        if step != UniStep::More {
            steps.push(step);
            return Ok(steps);
        }
    }
    match end {
        End::Open => {}
        End::Fin => s.handle_end(&buf, false)?,
        End::Reset => s.handle_end(&buf, true)?,
    }
    Ok(steps)
}

/// [`uni_with`] both ways (whole and byte by byte), which must agree.
fn uni(bytes: &[u8], end: End) -> Result<Vec<UniStep>, Close> {
    let whole = uni_with(&Critical::default(), bytes, end, false);
    let bytewise = uni_with(&Critical::default(), bytes, end, true);
    assert_eq!(whole, bytewise, "{bytes:02x?}");
    whole
}

fn closed(r: Result<Vec<UniStep>, Close>) -> u32 {
    r.expect_err("a connection error").code
}

#[test]
fn our_control_stream_opens_with_settings() {
    // §6.2.1, §7.2.4.1: type 0, SETTINGS with MAX_FIELD_SECTION_SIZE and a greased id.
    let p = frame::control_preface(65_536);
    assert_eq!(&p[..], &[0x00, 0x04, 0x08, 0x06, 0x80, 0x01, 0x00, 0x00, 0x40, 0xfa, 0x00]);
}

#[test]
fn control_stream_needs_settings_first() {
    // §6.2.1: H3_MISSING_SETTINGS.
    assert_eq!(closed(uni(&cat(&[&[0x00], &f(frame::GOAWAY, &[0])]), End::Open)), code::MISSING_SETTINGS);
    assert_eq!(closed(uni(&cat(&[&[0x00], &f(0x21, b"abc")]), End::Open)), code::MISSING_SETTINGS);
    assert_eq!(uni(CTRL, End::Open), Ok(vec![]));
}

#[test]
fn closing_the_control_stream_is_a_connection_error() {
    // §6.2.1: H3_CLOSED_CRITICAL_STREAM, before SETTINGS, after it, mid-payload, or reset.
    assert_eq!(closed(uni(&[0x00], End::Fin)), code::CLOSED_CRITICAL_STREAM);
    assert_eq!(closed(uni(CTRL, End::Fin)), code::CLOSED_CRITICAL_STREAM);
    assert_eq!(closed(uni(CTRL, End::Reset)), code::CLOSED_CRITICAL_STREAM);
    let mid = cat(&[CTRL, &[0x21, 0x05, 0xaa]]);
    assert_eq!(closed(uni(&mid, End::Fin)), code::CLOSED_CRITICAL_STREAM);
    let settings_cut = [0x00, 0x04, 0x04, 0x06];
    assert_eq!(closed(uni(&settings_cut, End::Fin)), code::CLOSED_CRITICAL_STREAM);
}

#[test]
fn a_frame_head_cut_by_the_control_streams_end_is_a_frame_error() {
    // §7.1: H3_FRAME_ERROR.
    assert_eq!(closed(uni(&cat(&[CTRL, &[0x40]]), End::Fin)), code::FRAME_ERROR);
}

#[test]
fn settings_come_once() {
    // §7.2.4: a second SETTINGS is H3_FRAME_UNEXPECTED.
    assert_eq!(closed(uni(&cat(&[CTRL, &f(frame::SETTINGS, &[])]), End::Open)), code::FRAME_UNEXPECTED);
}

#[test]
fn request_frames_on_the_control_stream_are_unexpected() {
    // §7.2.1, §7.2.2, §7.2.5: DATA, HEADERS, PUSH_PROMISE on the control stream.
    for kind in [frame::DATA, frame::HEADERS, frame::PUSH_PROMISE] {
        assert_eq!(closed(uni(&cat(&[CTRL, &f(kind, &[0])]), End::Open)), code::FRAME_UNEXPECTED, "{kind}");
    }
}

#[test]
fn http2_frame_types_are_unexpected() {
    // §7.2.8: 0x2, 0x6, 0x8, 0x9.
    for kind in [0x2, 0x6, 0x8, 0x9] {
        assert_eq!(closed(uni(&cat(&[CTRL, &f(kind, &[])]), End::Open)), code::FRAME_UNEXPECTED, "{kind}");
    }
}

#[test]
fn unknown_control_frames_are_skipped() {
    // §9: unknown and reserved types are ignored, whatever their length.
    let big = vec![0x55u8; 5000];
    let bytes = cat(&[CTRL, &f(0x21, b"abc"), &f(0x1f * 3 + 0x21, &big), &f(frame::GOAWAY, &[4])]);
    assert_eq!(uni(&bytes, End::Open), Ok(vec![]));
}

#[test]
fn oversized_settings_close_before_their_payload() {
    // A SETTINGS frame over MAX_SETTINGS: H3_EXCESSIVE_LOAD on its head alone.
    let mut b = BytesMut::new();
    b.put_u8(0x00);
    put_head(&mut b, frame::SETTINGS, MAX_SETTINGS + 1);
    assert_eq!(closed(uni(&b, End::Open)), code::EXCESSIVE_LOAD);
}

#[test]
fn settings_are_checked() {
    // §7.2.4.1: HTTP/2's ids, a setting twice (H3_SETTINGS_ERROR); a truncated pair
    // (H3_FRAME_ERROR); unknown ids are fine.
    let cases: [(&[u8], Option<u32>); 5] = [
        (&[0x02, 0x00], Some(code::SETTINGS_ERROR)),
        (&[0x06, 0x01, 0x06, 0x02], Some(code::SETTINGS_ERROR)),
        (&[0x06], Some(code::FRAME_ERROR)),
        (&[0x00, 0x00], Some(code::SETTINGS_ERROR)),
        (&[0x01, 0x00, 0x07, 0x00, 0x21, 0x05], None),
    ];
    for (payload, want) in cases {
        let r = uni(&cat(&[&[0x00], &f(frame::SETTINGS, payload)]), End::Open);
        assert_eq!(r.err().map(|c| c.code), want, "{payload:02x?}");
    }
}

#[test]
fn cancel_push_names_a_push_never_promised() {
    // §7.2.3: H3_ID_ERROR.
    assert_eq!(closed(uni(&cat(&[CTRL, &f(frame::CANCEL_PUSH, &[0])]), End::Open)), code::ID_ERROR);
}

#[test]
fn goaway_and_max_push_id_carry_one_varint() {
    // §7.2.6, §7.2.7: H3_FRAME_ERROR otherwise.
    for kind in [frame::GOAWAY, frame::MAX_PUSH_ID] {
        for payload in [&[][..], &[0x04, 0x00], &[0x40]] {
            let r = uni(&cat(&[CTRL, &f(kind, payload)]), End::Open);
            assert_eq!(closed(r), code::FRAME_ERROR, "{kind} {payload:02x?}");
        }
        let mut long = BytesMut::new();
        put_head(&mut long, kind, 9);
        assert_eq!(closed(uni(&cat(&[CTRL, &long]), End::Open)), code::FRAME_ERROR);
    }
}

#[test]
fn a_clients_goaway_may_only_fall() {
    // §5.2: H3_ID_ERROR when it rises.
    let ok = cat(&[CTRL, &f(frame::GOAWAY, &[8]), &f(frame::GOAWAY, &[4]), &f(frame::GOAWAY, &[4])]);
    assert_eq!(uni(&ok, End::Open), Ok(vec![]));
    assert_eq!(closed(uni(&cat(&[&ok, &f(frame::GOAWAY, &[12])]), End::Open)), code::ID_ERROR);
}

#[test]
fn max_push_id_may_only_rise() {
    // §7.2.7: H3_ID_ERROR when it falls.
    let ok = cat(&[CTRL, &f(frame::MAX_PUSH_ID, &[4]), &f(frame::MAX_PUSH_ID, &[8])]);
    assert_eq!(uni(&ok, End::Open), Ok(vec![]));
    assert_eq!(closed(uni(&cat(&[&ok, &f(frame::MAX_PUSH_ID, &[4])]), End::Open)), code::ID_ERROR);
}

#[test]
fn a_stream_that_ends_before_its_type_is_ignored() {
    // §6.2: nothing to act on.
    assert_eq!(uni(&[], End::Fin), Ok(vec![]));
    assert_eq!(uni(&[], End::Reset), Ok(vec![]));
    assert_eq!(uni(&[0x40], End::Fin), Ok(vec![]));
}

#[test]
fn critical_streams_come_once() {
    // §6.2.1, RFC 9204 §4.2: a second control, encoder or decoder stream is
    // H3_STREAM_CREATION_ERROR.
    for kind in [frame::CONTROL_STREAM, frame::QPACK_ENCODER_STREAM, frame::QPACK_DECODER_STREAM] {
        let c = Critical::default();
        let first = if kind == frame::CONTROL_STREAM { CTRL } else { &[kind as u8][..] };
        assert_eq!(uni_with(&c, first, End::Open, false), Ok(vec![]));
        let again = uni_with(&c, &[kind as u8], End::Open, false);
        assert_eq!(closed(again), code::STREAM_CREATION_ERROR, "{kind}");
    }
    // One of each kind is fine together.
    let c = Critical::default();
    for first in [CTRL, &[0x02], &[0x03]] {
        assert_eq!(uni_with(&c, first, End::Open, true), Ok(vec![]));
    }
}

#[test]
fn a_push_stream_from_a_client_is_refused() {
    // §6.2.2: only servers push: H3_STREAM_CREATION_ERROR.
    assert_eq!(closed(uni(&[0x01, 0x00], End::Open)), code::STREAM_CREATION_ERROR);
}

#[test]
fn unknown_and_reserved_stream_types_are_stopped() {
    // §6.2, §6.2.3: STOP_SENDING(H3_STREAM_CREATION_ERROR), the connection goes on.
    let stop = Ok(vec![UniStep::Stop(code::STREAM_CREATION_ERROR)]);
    assert_eq!(uni(&[0x21, 0xff, 0xff], End::Open), stop);
    let mut reserved = BytesMut::new();
    put_varint(&mut reserved, 0x1f * 1000 + 0x21);
    reserved.put_slice(b"anything");
    assert_eq!(uni(&reserved, End::Fin), stop);
}

#[test]
fn the_encoder_stream_may_only_set_a_capacity_of_zero() {
    // RFC 9204 §4.3: our capacity is 0, so only Set Dynamic Table Capacity 0:
    // H3_QPACK_ENCODER_STREAM_ERROR for anything else.
    assert_eq!(uni(&[0x02, 0x20, 0x20], End::Open), Ok(vec![]));
    for bad in [&[0x21][..], &[0x3f, 0x01], &[0x41, 0x61, 0x01, 0x62], &[0x80, 0x01, 0x61], &[0x00, 0x01]] {
        let r = uni(&cat(&[&[0x02], bad]), End::Open);
        assert_eq!(closed(r), code::QPACK_ENCODER_STREAM_ERROR, "{bad:02x?}");
    }
}

#[test]
fn the_decoder_stream_may_only_cancel_streams() {
    // RFC 9204 §4.4: Stream Cancellation only (we send nothing to acknowledge and insert
    // nothing to count): H3_QPACK_DECODER_STREAM_ERROR otherwise.
    assert_eq!(uni(&[0x03, 0x41, 0x7f, 0x01], End::Open), Ok(vec![]));
    for bad in [&[0x81][..], &[0x01], &[0x3f, 0x01]] {
        let r = uni(&cat(&[&[0x03], bad]), End::Open);
        assert_eq!(closed(r), code::QPACK_DECODER_STREAM_ERROR, "{bad:02x?}");
    }
}

#[test]
fn closing_a_qpack_stream_is_a_connection_error() {
    // RFC 9204 §4.2: H3_CLOSED_CRITICAL_STREAM.
    for kind in [0x02u8, 0x03] {
        assert_eq!(closed(uni(&[kind], End::Fin)), code::CLOSED_CRITICAL_STREAM);
        assert_eq!(closed(uni(&[kind], End::Reset)), code::CLOSED_CRITICAL_STREAM);
    }
}

#[test]
fn goaway_names_the_first_request_not_seen_and_later_ones_are_rejected() {
    // §5.2: the ID is the lowest client-initiated bidirectional stream ID not processed;
    // streams after it are refused with H3_REQUEST_REJECTED (§4.1.1), and GOAWAY goes once.
    let mut a = Admission::new();
    assert_eq!(a.handle_request_opened(0), Ok(()));
    assert_eq!(a.handle_request_opened(8), Ok(()));
    assert_eq!(a.handle_request_opened(4), Ok(()));
    assert!(!a.draining());
    assert_eq!(a.handle_drain().as_deref(), Some(&f(frame::GOAWAY, &[12])[..]));
    assert!(a.draining());
    assert_eq!(a.handle_drain(), None);
    assert_eq!(a.handle_request_opened(12), Err(code::REQUEST_REJECTED));
    let mut quiet = Admission::new();
    assert_eq!(quiet.handle_drain().as_deref(), Some(&f(frame::GOAWAY, &[0])[..]));
}

// ---------------------------------------------------------------- request streams

/// A QPACK field section for GET https://x/ (static references and one literal).
const GET: &[u8] = &[0x00, 0x00, 0xd1, 0xd7, 0x50, 0x01, b'x', 0xc1];

/// A QPACK trailer section `x-t: v`.
const TRAILER: &[u8] = &[0x00, 0x00, 0x23, b'x', b'-', b't', 0x01, b'v'];

/// Feeds a request stream `bytes` (one byte at a time when `bytewise`), then its end when
/// `fin`, collecting events (a head sets `content_length`) until an error, the end, or a
/// need for more bytes once all are in.
fn request_with(
    bytes: &[u8],
    fin: bool,
    content_length: Option<u64>,
    bytewise: bool,
) -> (Vec<ReqEvent>, Option<ReqError>) {
    let mut s = RequestStream::new(1024);
    let mut buf = BytesMut::new();
    let mut events = Vec::new();
    let pieces: Vec<&[u8]> = if bytewise { bytes.chunks(1).collect() } else { vec![bytes] };
    let n = pieces.len();
    for (i, p) in pieces.into_iter().enumerate() {
        buf.extend_from_slice(p);
        let last = i + 1 == n;
        while let Some(r) = s.poll_event(&mut buf, fin && last) {
            match r {
                Ok(ReqEvent::Headers(h)) => {
                    s.set_content_length(content_length);
                    events.push(ReqEvent::Headers(h));
                }
                Ok(e) => events.push(e),
                Err(e) => return (events, Some(e)),
            }
        }
    }
    if n == 0 {
        while let Some(r) = s.poll_event(&mut buf, fin) {
            match r {
                Ok(e) => events.push(e),
                Err(e) => return (events, Some(e)),
            }
        }
    }
    (merge(events), None)
}

/// Adjacent body pieces as one (byte-by-byte feeding gives one per byte).
fn merge(events: Vec<ReqEvent>) -> Vec<ReqEvent> {
    let mut out: Vec<ReqEvent> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (Some(ReqEvent::Data(a)), ReqEvent::Data(b)) => {
                let mut v = a.to_vec();
                v.extend_from_slice(&b);
                *a = v.into();
            }
            (_, e) => out.push(e),
        }
    }
    out
}

/// [`request_with`] whole and byte by byte: the same events and the same end.
fn request(bytes: &[u8], fin: bool, content_length: Option<u64>) -> (Vec<ReqEvent>, Option<ReqError>) {
    let (we, wr) = request_with(bytes, fin, content_length, false);
    let (be, br) = request_with(bytes, fin, content_length, true);
    assert_eq!((merge(we), wr), (merge(be), br), "{bytes:02x?}");
    request_with(bytes, fin, content_length, false)
}

fn head() -> ReqEvent {
    ReqEvent::Headers(BytesMut::from(GET))
}

fn data(s: &str) -> ReqEvent {
    ReqEvent::Data(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

fn conn_error(r: (Vec<ReqEvent>, Option<ReqError>)) -> u32 {
    match r.1 {
        Some(ReqError::Close(c)) => c.code,
        other => panic!("not a connection error: {other:?} after {:?}", r.0),
    }
}

fn stream_error(r: (Vec<ReqEvent>, Option<ReqError>)) -> u32 {
    match r.1 {
        Some(ReqError::Reset(c, _)) => c,
        other => panic!("not a stream error: {other:?} after {:?}", r.0),
    }
}

#[test]
fn a_request_is_its_head_then_its_end() {
    // §4.1: HEADERS, then (no body) the stream's end.
    assert_eq!(request(&f(frame::HEADERS, GET), true, None), (vec![head(), ReqEvent::End], None));
    // Before the end, the head alone.
    assert_eq!(request(&f(frame::HEADERS, GET), false, None), (vec![head()], None));
}

#[test]
fn a_body_comes_in_data_frames_split_off_without_a_copy() {
    let bytes =
        cat(&[&f(frame::HEADERS, GET), &f(frame::DATA, b"hello "), &f(frame::DATA, b""), &f(frame::DATA, b"world")]);
    let r = request(&bytes, true, Some(11));
    assert_eq!(r, (vec![head(), data("hello world"), ReqEvent::End], None));
    // The pieces are the buffer's own bytes.
    let mut s = RequestStream::new(1024);
    let mut buf = BytesMut::from(&bytes[..]);
    let _ = s.poll_event(&mut buf, true);
    let at = buf.as_ptr() as usize + 2;
    match s.poll_event(&mut buf, true) {
        Some(Ok(ReqEvent::Data(d))) => assert_eq!(d.as_ptr() as usize, at),
        other => panic!("{other:?}"),
    }
}

#[test]
fn data_before_the_head_is_unexpected() {
    // §4.1: H3_FRAME_UNEXPECTED.
    let r = request(&cat(&[&f(frame::DATA, b"x"), &f(frame::HEADERS, GET)]), true, None);
    assert_eq!(conn_error(r), code::FRAME_UNEXPECTED);
}

#[test]
fn control_and_push_frames_on_a_request_stream_are_unexpected() {
    // §7.2.3–§7.2.8: before the head and in the body.
    for kind in [
        frame::SETTINGS,
        frame::GOAWAY,
        frame::MAX_PUSH_ID,
        frame::CANCEL_PUSH,
        frame::PUSH_PROMISE,
        0x2,
        0x6,
        0x8,
        0x9,
    ] {
        let before = request(&f(kind, &[0]), false, None);
        assert_eq!(conn_error(before), code::FRAME_UNEXPECTED, "{kind} before the head");
        let within = request(&cat(&[&f(frame::HEADERS, GET), &f(kind, &[0])]), false, None);
        assert_eq!(conn_error(within), code::FRAME_UNEXPECTED, "{kind} in the body");
    }
}

#[test]
fn unknown_frames_are_skipped_anywhere() {
    // §9: before the head, between DATA frames, after the trailers.
    let bytes = cat(&[
        &f(0x21, b"ab"),
        &f(frame::HEADERS, GET),
        &f(0x21, b""),
        &f(frame::DATA, b"hello"),
        &f(0x1f * 9 + 0x21, &[7; 300]),
        &f(frame::HEADERS, TRAILER),
        &f(0x21, b"z"),
    ]);
    let r = request(&bytes, true, Some(5));
    assert_eq!(r, (vec![head(), data("hello"), ReqEvent::Trailers(BytesMut::from(TRAILER)), ReqEvent::End], None));
}

#[test]
fn the_streams_end_before_a_head_is_request_incomplete() {
    // §4.1.1: H3_REQUEST_INCOMPLETE, a stream error.
    assert_eq!(stream_error(request(&[], true, None)), code::REQUEST_INCOMPLETE);
    assert_eq!(stream_error(request(&f(0x21, b"ab"), true, None)), code::REQUEST_INCOMPLETE);
}

#[test]
fn a_frame_cut_by_the_streams_end_is_a_frame_error() {
    // §7.1: H3_FRAME_ERROR: a frame head, a HEADERS payload, a DATA payload, an unknown
    // frame's payload.
    let mut cut_data = f(frame::HEADERS, GET);
    cut_data.extend_from_slice(&[0x00, 0x05, b'h']);
    for bytes in [&[0x01][..], &f(frame::HEADERS, GET)[..4], &cut_data, &f(0x21, b"abc")[..3]] {
        assert_eq!(conn_error(request(bytes, true, None)), code::FRAME_ERROR, "{bytes:02x?}");
    }
}

#[test]
fn a_field_section_over_the_limit_is_refused_on_its_head() {
    // §4.2.2: answered 431, without reading the section.
    let mut b = BytesMut::new();
    put_head(&mut b, frame::HEADERS, 1025);
    assert_eq!(request(&b, false, None).1, Some(ReqError::TooLarge));
    let mut t = BytesMut::from(&f(frame::HEADERS, GET)[..]);
    put_head(&mut t, frame::HEADERS, 1025);
    assert_eq!(request(&t, false, None), (vec![head()], Some(ReqError::TooLarge)));
}

#[test]
fn a_body_longer_than_its_content_length_is_malformed() {
    // §4.1.2: H3_MESSAGE_ERROR, a stream error, before the extra byte reaches the app.
    let bytes = cat(&[&f(frame::HEADERS, GET), &f(frame::DATA, b"hello!")]);
    let (events, err) = request_with(&bytes, false, Some(5), false);
    assert_eq!(events, vec![head()]);
    assert!(matches!(err, Some(ReqError::Reset(code::MESSAGE_ERROR, _))), "{err:?}");
    // Byte by byte the first five arrive, the sixth is refused.
    let (events, err) = request_with(&bytes, false, Some(5), true);
    assert_eq!(merge(events), vec![head(), data("hello")]);
    assert!(matches!(err, Some(ReqError::Reset(code::MESSAGE_ERROR, _))), "{err:?}");
    // A declared-empty body with DATA.
    let r = request(&cat(&[&f(frame::HEADERS, GET), &f(frame::DATA, b"x")]), false, Some(0));
    assert_eq!(stream_error(r), code::MESSAGE_ERROR);
}

#[test]
fn a_body_shorter_than_its_content_length_is_malformed() {
    // §4.1.2: the stream ends short.
    let r = request(&cat(&[&f(frame::HEADERS, GET), &f(frame::DATA, b"abc")]), true, Some(5));
    assert_eq!(r.0, vec![head(), data("abc")]);
    assert_eq!(stream_error(r), code::MESSAGE_ERROR);
    assert_eq!(stream_error(request(&f(frame::HEADERS, GET), true, Some(1))), code::MESSAGE_ERROR);
}

#[test]
fn trailers_end_the_body() {
    // §4.1: HEADERS, DATA*, HEADERS (trailers), then only the end.
    let base = cat(&[&f(frame::HEADERS, GET), &f(frame::DATA, b"hello"), &f(frame::HEADERS, TRAILER)]);
    let r = request(&base, true, Some(5));
    assert_eq!(r, (vec![head(), data("hello"), ReqEvent::Trailers(BytesMut::from(TRAILER)), ReqEvent::End], None));
    for kind in [frame::DATA, frame::HEADERS] {
        let after = cat(&[&base, &f(kind, b"x")]);
        assert_eq!(conn_error(request(&after, true, Some(5))), code::FRAME_UNEXPECTED, "{kind}");
    }
}

#[test]
fn malformed_trailers_are_a_message_error() {
    // §4.1.2 (the caller decodes and checks the section).
    let mut s = RequestStream::new(1024);
    let mut buf = BytesMut::from(&cat(&[&f(frame::HEADERS, GET), &f(frame::HEADERS, &[0, 0, 0xc1])])[..]);
    assert_eq!(s.poll_event(&mut buf, false), Some(Ok(head())));
    assert!(matches!(s.poll_event(&mut buf, false), Some(Ok(ReqEvent::Trailers(_)))));
    assert!(matches!(s.malformed_trailers(), ReqError::Reset(code::MESSAGE_ERROR, _)));
    assert!(s.is_done());
    assert_eq!(s.poll_event(&mut buf, true), None);
}

#[test]
fn nothing_follows_an_error_or_the_end() {
    let mut s = RequestStream::new(1024);
    let mut buf = BytesMut::from(&f(frame::DATA, b"x")[..]);
    assert!(matches!(s.poll_event(&mut buf, false), Some(Err(ReqError::Close(_)))));
    buf.extend_from_slice(&f(frame::HEADERS, GET));
    assert_eq!(s.poll_event(&mut buf, true), None);
    let mut s = RequestStream::new(1024);
    let mut buf = BytesMut::from(&f(frame::HEADERS, GET)[..]);
    assert_eq!(s.poll_event(&mut buf, true), Some(Ok(head())));
    assert_eq!(s.poll_event(&mut buf, true), Some(Ok(ReqEvent::End)));
    assert_eq!(s.poll_event(&mut buf, true), None);
}
