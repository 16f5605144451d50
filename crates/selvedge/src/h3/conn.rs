//! The HTTP/3 connection driver, on `quinn` (QUIC): the connection's control streams, and
//! a task per request stream that reads the head (QPACK, `qpack`), builds the engine's
//! [`Request`] (its body a [`Body`] reading the stream's DATA frames), runs the app as the
//! other drivers do (panics become 500), and sends the [`Response`]: bytes, a file read in
//! pieces, or a stream the app writes with backpressure.
//!
//! Streams (RFC 9114 §6): we open our control stream with SETTINGS and keep it open; of the
//! peer's unidirectional streams the control stream is read for its frames (SETTINGS
//! first), QPACK's encoder and decoder streams are read and their bytes dropped (our
//! dynamic table capacity is 0, so nothing on them can matter), a push stream is a
//! connection error (H3_STREAM_CREATION_ERROR) and other types are stopped. Closing a
//! critical stream is H3_CLOSED_CRITICAL_STREAM; a frame where it may not be is
//! H3_FRAME_UNEXPECTED.
//!
//! Timeouts: QUIC's idle timeout closes a silent connection (`Settings::idle_timeout`,
//! advertised in the transport parameters); a request head must arrive within
//! `header_timeout` of its stream; a request body keeps the body clock of `time::rate`
//! (`body_timeout`, `min_body_rate`, `body_rate_grace`), and a body that falls behind has
//! its stream reset with H3_REQUEST_CANCELLED; a response write that makes no
//! progress for `send_timeout` (a client that does not read) resets the stream with
//! H3_REQUEST_CANCELLED. Draining and shutdown send GOAWAY; the requests in flight finish,
//! then the connection closes with H3_NO_ERROR.

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header;
use http::{Method, Version};
use quinn::{RecvStream, SendStream, VarInt};

use super::frame::{self, code};
use super::qpack;
use crate::app::App;
use crate::body::{Body, BodySink, BodySource, BodyWriter, WriteFuture};
use crate::dispatch::{or_500, poll_catching};
use crate::error::{Error, Kind};
use crate::head::{self, HeaderError};
use crate::message::response_field;
use crate::response::{FileBody, Response, ResponseBody, StreamBody};
use crate::settings::Settings;
use crate::sys::PeerAddr;
use crate::time::date::{self, DATE_LEN};
use crate::time::rate::{BodyClock, BodyRule};
use crate::time::timeout::{now_ms, Group};
use crate::Request;

/// File bytes read and sent at a time.
const FILE_PIECE: usize = 64 * 1024;

/// Room kept for reading a stream: what one read asks quinn for at most.
const READ_CHUNK: usize = 16 * 1024;

/// The room of a stream's first read.
const FIRST_READ: usize = 512;

/// Largest SETTINGS payload read from the peer's control stream.
const MAX_SETTINGS: u64 = 4096;

#[inline]
fn var(c: u32) -> VarInt {
    VarInt::from_u32(c)
}

/// Closes the connection with an HTTP/3 error code (a connection error, RFC 9114 §8).
fn conn_error(conn: &quinn::Connection, c: u32, why: &'static str) {
    conn.close(var(c), why.as_bytes());
}

/// Serves one established QUIC connection until the client closes it, it times out, or a
/// drain (GOAWAY) has let its last request finish.
pub(crate) async fn serve<A: App>(conn: quinn::Connection, app: Arc<A>, cfg: Arc<Settings>, group: Arc<Group>) {
    let peer = PeerAddr::Tcp(conn.remote_address());
    // Our control stream, open for the connection's life (its end would be a connection
    // error for the peer).
    let Ok(mut control) = conn.open_uni().await else { return };
    let preface = frame::control_preface(u64::from(cfg.h3.max_header_list_size));
    if timed(&cfg, control.write_all(&preface)).await.is_err() {
        // A peer that leaves no room for our SETTINGS (RFC 9114 §6.2 asks for 1,024 bytes).
        return conn_error(&conn, code::EXCESSIVE_LOAD, "no room for our control stream");
    }
    let critical = Arc::new(Critical::default());
    // Requests in flight, each a task of its own; the connection waits for them to end.
    let tasks = Arc::new(InFlight::default());
    // The peer's unidirectional streams: they live as long as the connection.
    let mut uni = tokio::task::JoinSet::new();
    let mut draining = false;
    // The lowest request stream ID not yet taken (what a GOAWAY carries).
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            bi = conn.accept_bi() => match bi {
                Ok((send, recv)) => {
                    let id = u64::from(send.id());
                    if draining {
                        // After our GOAWAY (RFC 9114 §5.2).
                        reject(send, recv);
                        continue;
                    }
                    next_id = next_id.max(id + 4);
                    let guard = InFlight::enter(&tasks);
                    let req = request(send, recv, conn.clone(), app.clone(), cfg.clone(), peer.clone());
                    // Boxed: the task then moves a pointer, not the request's whole future
                    // (the app's included), each time it is spawned, run and finished.
                    let req = Box::pin(async move {
                        req.await;
                        drop(guard);
                    });
                    tokio::spawn(crate::dispatch::in_current_span(req));
                }
                Err(_) => break,
            },
            u = conn.accept_uni() => match u {
                Ok(recv) => {
                    uni.spawn(peer_stream(recv, conn.clone(), critical.clone()));
                }
                Err(_) => break,
            },
            // Streams the peer ended (unknown types, stopped at once) leave the set.
            Some(_) = uni.join_next(), if !uni.is_empty() => {}
            () = group.wait_drain(), if !draining => {
                draining = true;
                // GOAWAY: no new requests; those in flight finish.
                if timed(&cfg, control.write_all(&frame::goaway(next_id))).await.is_err() {
                    break;
                }
            }
            // After GOAWAY, once the last request in flight has ended.
            () = tasks.idle(), if draining => break,
        }
    }
    tasks.idle().await;
    if draining {
        // The last responses may still be in quinn's send buffer: the client gets the
        // time to take them and close, at most `linger`, before our CONNECTION_CLOSE (which
        // stops all sending).
        let _ = tokio::time::timeout(cfg.linger_timeout, conn.closed()).await;
    }
    uni.abort_all();
    conn.close(var(code::NO_ERROR), b"");
    // Let the endpoint's driver send the CONNECTION_CLOSE before this task (and maybe
    // the runtime) ends.
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// A connection's requests in flight.
#[derive(Debug, Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

/// One request in flight, until dropped.
struct Entered(Arc<InFlight>);

impl InFlight {
    fn enter(this: &Arc<InFlight>) -> Entered {
        this.count.fetch_add(1, Ordering::Relaxed);
        Entered(this.clone())
    }

    /// Waits until no request is in flight.
    async fn idle(&self) {
        loop {
            let notified = self.done.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.done.notify_waiters();
        }
    }
}

/// A request stream opened after our GOAWAY: refused, so the client may retry it
/// elsewhere.
fn reject(mut send: SendStream, mut recv: RecvStream) {
    let _ = recv.stop(var(code::REQUEST_REJECTED));
    let _ = send.reset(var(code::REQUEST_REJECTED));
}

/// Which of the peer's one-of-a-kind streams it has opened.
#[derive(Debug, Default)]
struct Critical {
    control: AtomicBool,
    encoder: AtomicBool,
    decoder: AtomicBool,
}

/// Reads one of the peer's unidirectional streams (RFC 9114 §6.2).
async fn peer_stream(recv: RecvStream, conn: quinn::Connection, critical: Arc<Critical>) {
    let mut r = Reader::new(recv);
    let kind = loop {
        if let Some((v, n)) = frame::varint(&r.buf) {
            r.buf.advance(n);
            break v;
        }
        match r.fill().await {
            Ok(true) => {}
            // Ended or reset before its type: nothing to act on.
            Ok(false) | Err(_) => return,
        }
    };
    let first = |flag: &AtomicBool| !flag.swap(true, Ordering::Relaxed);
    match kind {
        frame::CONTROL_STREAM if first(&critical.control) => control_stream(r, &conn).await,
        frame::QPACK_ENCODER_STREAM if first(&critical.encoder) => qpack_stream(r, &conn, true).await,
        frame::QPACK_DECODER_STREAM if first(&critical.decoder) => qpack_stream(r, &conn, false).await,
        frame::CONTROL_STREAM | frame::QPACK_ENCODER_STREAM | frame::QPACK_DECODER_STREAM => {
            conn_error(&conn, code::STREAM_CREATION_ERROR, "a second critical stream");
        }
        frame::PUSH_STREAM => conn_error(&conn, code::STREAM_CREATION_ERROR, "a push stream from a client"),
        _ => {
            let _ = r.recv.stop(var(code::STREAM_CREATION_ERROR));
        }
    }
}

/// The peer's QPACK encoder or decoder stream (RFC 9204 §4.3, §4.4). With our table's
/// capacity at 0 the encoder may only set that capacity to 0, and the decoder may only
/// cancel streams (we never send a section that it could acknowledge, nor insert anything
/// it could count); anything else is an error, and so is the stream's end.
async fn qpack_stream(mut r: Reader, conn: &quinn::Connection, encoder: bool) {
    let err = if encoder { code::QPACK_ENCODER_STREAM_ERROR } else { code::QPACK_DECODER_STREAM_ERROR };
    loop {
        while let Some(&b) = r.buf.first() {
            // (pattern, mask, integer prefix) of the one instruction allowed.
            let (ok, prefix) = if encoder { (b & 0xe0 == 0x20, 5) } else { (b & 0xc0 == 0x40, 6) };
            if !ok {
                return conn_error(conn, err, "QPACK instruction for a table we do not have");
            }
            let mut pos = 0;
            match crate::hpack::decode_int(&r.buf, &mut pos, prefix) {
                Ok(v) => {
                    if encoder && v != 0 {
                        return conn_error(conn, err, "QPACK table capacity above ours");
                    }
                    r.buf.advance(pos);
                }
                Err(crate::hpack::DecodeError::TruncatedInteger) => break,
                Err(_) => return conn_error(conn, err, "bad QPACK instruction"),
            }
        }
        match r.fill().await {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                let why = if encoder { "QPACK encoder stream closed" } else { "QPACK decoder stream closed" };
                return conn_error(conn, code::CLOSED_CRITICAL_STREAM, why);
            }
        }
    }
}

/// The peer's control stream: SETTINGS first and once, then GOAWAY, MAX_PUSH_ID and
/// CANCEL_PUSH (nothing to do for a server that does not push), unknown types skipped.
async fn control_stream(mut r: Reader, conn: &quinn::Connection) {
    let mut settings = false;
    // The last GOAWAY and MAX_PUSH_ID values: the one may only fall, the other only rise.
    let (mut goaway, mut max_push) = (u64::MAX, 0u64);
    loop {
        let h = match r.frame_head().await {
            Ok(Some(h)) => h,
            Ok(None) | Err(ReadFail::Reset) => {
                return conn_error(conn, code::CLOSED_CRITICAL_STREAM, "control stream closed");
            }
            Err(ReadFail::Truncated) => return conn_error(conn, code::FRAME_ERROR, "truncated frame"),
        };
        if !settings && h.kind != frame::SETTINGS {
            return conn_error(conn, code::MISSING_SETTINGS, "control stream without SETTINGS");
        }
        match h.kind {
            frame::SETTINGS if !settings => {
                settings = true;
                if h.len > MAX_SETTINGS {
                    return conn_error(conn, code::EXCESSIVE_LOAD, "SETTINGS too large");
                }
                let payload = match r.payload(h.len as usize).await {
                    Ok(p) => p,
                    Err(_) => return conn_error(conn, code::CLOSED_CRITICAL_STREAM, "control stream closed"),
                };
                if let Err(c) = frame::check_settings(&payload) {
                    return conn_error(conn, c, "bad SETTINGS");
                }
            }
            frame::CANCEL_PUSH => {
                // We never promise a push, so no push ID can be cancelled (§7.2.3).
                return conn_error(conn, code::ID_ERROR, "CANCEL_PUSH without a push");
            }
            frame::GOAWAY | frame::MAX_PUSH_ID => {
                if h.len > 8 {
                    return conn_error(conn, code::FRAME_ERROR, "bad control frame");
                }
                let id = match r.payload(h.len as usize).await {
                    Ok(p) => match frame::varint(&p) {
                        Some((id, n)) if n == p.len() => id,
                        _ => return conn_error(conn, code::FRAME_ERROR, "bad control frame"),
                    },
                    Err(_) => return conn_error(conn, code::CLOSED_CRITICAL_STREAM, "control stream closed"),
                };
                // A GOAWAY may not raise the last one's ID (§5.2), a MAX_PUSH_ID may not
                // lower the last one's (§7.2.7).
                if h.kind == frame::GOAWAY {
                    if id > goaway {
                        return conn_error(conn, code::ID_ERROR, "GOAWAY raised its ID");
                    }
                    goaway = id;
                } else {
                    if id < max_push {
                        return conn_error(conn, code::ID_ERROR, "MAX_PUSH_ID lowered");
                    }
                    max_push = id;
                }
            }
            frame::SETTINGS | frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                return conn_error(conn, code::FRAME_UNEXPECTED, "frame not allowed on the control stream");
            }
            k if frame::reserved_http2(k) => {
                return conn_error(conn, code::FRAME_UNEXPECTED, "an HTTP/2 frame type");
            }
            _ => {
                if r.skip(h.len).await.is_err() {
                    return conn_error(conn, code::CLOSED_CRITICAL_STREAM, "control stream closed");
                }
            }
        }
    }
}

/// Why reading a stream stopped short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadFail {
    /// Reset by the peer, or the connection is gone.
    Reset,
    /// The stream ended inside a frame (H3_FRAME_ERROR, RFC 9114 §7.1).
    Truncated,
}

/// A stream's bytes as they arrive, read into one buffer that frames are taken from.
struct Reader {
    recv: RecvStream,
    buf: BytesMut,
    eof: bool,
}

impl Reader {
    fn new(recv: RecvStream) -> Reader {
        Reader { recv, buf: BytesMut::new(), eof: false }
    }

    /// Reads what has arrived into the buffer: `Ready(Ok(false))` at the stream's end.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, ReadFail>> {
        if self.eof {
            return Poll::Ready(Ok(false));
        }
        // A request head usually comes whole in a few dozen bytes: a small buffer first,
        // read chunks of READ_CHUNK once a body streams.
        if self.buf.capacity() == 0 {
            self.buf.reserve(FIRST_READ);
        } else if self.buf.capacity() - self.buf.len() < FIRST_READ {
            self.buf.reserve(READ_CHUNK);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut self.recv), cx, &mut self.buf) {
            Poll::Ready(Ok(0)) => {
                self.eof = true;
                Poll::Ready(Ok(false))
            }
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(true)),
            Poll::Ready(Err(_)) => Poll::Ready(Err(ReadFail::Reset)),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn fill(&mut self) -> Result<bool, ReadFail> {
        poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// The next frame's head, or `None` at a clean end of the stream.
    async fn frame_head(&mut self) -> Result<Option<frame::Head>, ReadFail> {
        loop {
            if let Some(h) = frame::head(&self.buf) {
                self.buf.advance(h.size);
                return Ok(Some(h));
            }
            if !self.fill().await? {
                return if self.buf.is_empty() { Ok(None) } else { Err(ReadFail::Truncated) };
            }
        }
    }

    /// The next `len` bytes, whole.
    async fn payload(&mut self, len: usize) -> Result<BytesMut, ReadFail> {
        if self.buf.capacity() < len {
            self.buf.reserve(len - self.buf.len());
        }
        while self.buf.len() < len {
            if !self.fill().await? {
                return Err(ReadFail::Truncated);
            }
        }
        Ok(self.buf.split_to(len))
    }

    /// Skips `len` bytes.
    async fn skip(&mut self, mut len: u64) -> Result<(), ReadFail> {
        loop {
            let n = (self.buf.len() as u64).min(len);
            self.buf.advance(n as usize);
            len -= n;
            if len == 0 {
                return Ok(());
            }
            if !self.fill().await? {
                return Err(ReadFail::Truncated);
            }
        }
    }
}

/// Why a request stream gives no request.
enum NoHead {
    /// A connection error: close with this code.
    Conn(u32, &'static str),
    /// Malformed (H3_MESSAGE_ERROR, a stream error).
    Malformed,
    /// Over SETTINGS_MAX_FIELD_SECTION_SIZE: answer 431.
    TooLarge,
    /// The stream ended or was reset before a head.
    Gone,
}

/// Reads the request's HEADERS frame (unknown frame types before it are skipped).
async fn read_head(r: &mut Reader, max: u32) -> Result<head::Head, NoHead> {
    loop {
        let h = match r.frame_head().await {
            Ok(Some(h)) => h,
            Ok(None) | Err(ReadFail::Reset) => return Err(NoHead::Gone),
            Err(ReadFail::Truncated) => return Err(NoHead::Conn(code::FRAME_ERROR, "truncated frame")),
        };
        match h.kind {
            frame::HEADERS => {
                if h.len > u64::from(max) {
                    return Err(NoHead::TooLarge);
                }
                let block = match r.payload(h.len as usize).await {
                    Ok(b) => b,
                    Err(ReadFail::Reset) => return Err(NoHead::Gone),
                    Err(ReadFail::Truncated) => return Err(NoHead::Conn(code::FRAME_ERROR, "truncated frame")),
                };
                let mut arena = BytesMut::with_capacity(block.len() * 2 + 64);
                let section = qpack::Section { block: &block, max_size: max as usize };
                return match head::request(section, false, &mut arena) {
                    // Every HTTP/3 request names its authority, by `:authority` or `host`, and
                    // not as empty (RFC 9114 §4.3.1: the schemes HTTP/3 carries require one).
                    Ok(h) if h.req.authority.is_none_or(|a| a.len == 0) => Err(NoHead::Malformed),
                    Ok(h) => Ok(h),
                    Err(HeaderError::Malformed) => Err(NoHead::Malformed),
                    Err(HeaderError::TooLarge) => Err(NoHead::TooLarge),
                    Err(HeaderError::Compression | HeaderError::Abandoned) => {
                        Err(NoHead::Conn(code::QPACK_DECOMPRESSION_FAILED, "QPACK decoding failed"))
                    }
                };
            }
            k if !frame::allowed_on_request(k) || k == frame::DATA => {
                return Err(NoHead::Conn(code::FRAME_UNEXPECTED, "unexpected frame before the request head"));
            }
            _ => {
                if let Err(e) = r.skip(h.len).await {
                    return Err(match e {
                        ReadFail::Reset => NoHead::Gone,
                        ReadFail::Truncated => NoHead::Conn(code::FRAME_ERROR, "truncated frame"),
                    });
                }
            }
        }
    }
}

/// One request stream: its head (within `header_timeout`), the app, the response.
async fn request<A: App>(
    mut send: SendStream,
    recv: RecvStream,
    conn: quinn::Connection,
    app: Arc<A>,
    cfg: Arc<Settings>,
    peer: PeerAddr,
) {
    let mut r = Reader::new(recv);
    let head = match tokio::time::timeout(cfg.header_timeout, read_head(&mut r, cfg.h3.max_header_list_size)).await {
        Ok(Ok(h)) => h,
        Ok(Err(NoHead::Conn(c, why))) => return conn_error(&conn, c, why),
        Ok(Err(NoHead::Malformed)) => {
            let _ = r.recv.stop(var(code::MESSAGE_ERROR));
            let _ = send.reset(var(code::MESSAGE_ERROR));
            return cfg.exception(&Error::new(Kind::BadRequest, "malformed HTTP/3 request"));
        }
        Ok(Err(NoHead::TooLarge)) => {
            // Answered, and the rest of the request not read (RFC 9114 §4.1.1, §4.2.2).
            let _ = r.recv.stop(var(code::NO_ERROR));
            let res = Response::new(http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            send_response(send, res, false, &cfg).await;
            return cfg.exception(&Error::new(Kind::BadRequest, "HTTP/3 request head over the limit (431)"));
        }
        Ok(Err(NoHead::Gone)) => {
            let _ = send.reset(var(code::REQUEST_INCOMPLETE));
            return;
        }
        Err(_) => {
            let _ = r.recv.stop(var(code::REQUEST_CANCELLED));
            let _ = send.reset(var(code::REQUEST_CANCELLED));
            return cfg.exception(&Error::new(Kind::Timeout, "HTTP/3 request head too slow"));
        }
    };
    let is_head = head.req.method == Method::HEAD;
    let stream_id = u64::from(send.id());
    let stalled = Arc::new(AtomicBool::new(false));
    let body = BodyReader::start(r, conn, head.content_length, &cfg, stalled.clone());
    let req = Request::new(head.req, Version::HTTP_3, peer, Some(crate::request::TlsVersion::Tls13), body);
    let mut fut = std::pin::pin!(crate::dispatch::call(&*app, req, Some(stream_id)));
    let mut res = or_500(poll_fn(|cx| poll_catching(fut.as_mut(), cx)).await, &cfg);
    if stalled.load(Ordering::Relaxed) {
        // The body fell behind its clock: the stream is reset, whatever the app answered
        // (as HTTP/2 resets it). The request half's STOP_SENDING goes out as it is dropped.
        let _ = send.reset(var(code::REQUEST_CANCELLED));
        return;
    }
    let finish = res.take_finish();
    let whole = send_response(send, res, is_head, &cfg).await;
    if let Some(f) = finish {
        f.report(whole);
    }
}

/// The HEADERS frame of a response: its fields (the shared ones first), with `date`,
/// `server` and `content-length` added as the other drivers add them; then, if `data` is
/// given, the head of a DATA frame of that length (the body follows it as it is).
fn response_head(res: &crate::response::Parts, len: Option<u64>, data: Option<usize>, cfg: &Settings) -> Bytes {
    let (mut has_date, mut has_server) = res.shared.as_deref().map_or((false, false), |s| s.sets_date_server());
    let mut has_len = false;
    for (n, _) in &res.headers {
        has_date |= *n == header::DATE;
        has_server |= *n == header::SERVER;
        has_len |= *n == header::CONTENT_LENGTH;
    }
    let mut d = [0u8; DATE_LEN];
    if !has_date {
        date::current(&mut d);
    }
    let mut digits = [0u8; 20];
    let len_str: Option<&[u8]> = match len {
        Some(n) if !has_len && !crate::message::bodiless(res.status) => Some(crate::message::decimal(n, &mut digits)),
        _ => None,
    };
    let server = if has_server { None } else { cfg.server_name };
    let own = res
        .headers
        .iter()
        .filter_map(response_field)
        .chain((!has_date).then_some((&b"date"[..], &d[..])))
        .chain(server.map(|s| (&b"server"[..], s.as_bytes())))
        .chain(len_str.map(|l| (&b"content-length"[..], l)));
    // The frame's type and a two-byte length go in front of the section once its length
    // is known (a one-byte length moves the type up instead).
    const ROOM: usize = 3;
    let mut block = BytesMut::with_capacity(384);
    block.put_slice(&[0; ROOM]);
    qpack::encode_status(res.status.as_u16(), &mut block);
    if let Some(s) = res.shared.as_deref() {
        block.extend_from_slice(s.h3_lines(|fields| {
            let mut b = BytesMut::new();
            qpack::encode_fields(fields.iter().filter_map(response_field), &mut b);
            b.freeze()
        }));
    }
    qpack::encode_fields(own, &mut block);
    let n = block.len() - ROOM;
    let start = match n {
        0..64 => {
            block[1] = frame::HEADERS as u8;
            block[2] = n as u8;
            1
        }
        64..16384 => {
            block[0] = frame::HEADERS as u8;
            block[1..3].copy_from_slice(&(0x4000 | n as u16).to_be_bytes());
            0
        }
        _ => {
            let mut out = BytesMut::with_capacity(n + 9);
            frame::put_head(&mut out, frame::HEADERS, n as u64);
            out.extend_from_slice(&block[ROOM..]);
            block = out;
            0
        }
    };
    if let Some(d) = data {
        frame::put_head(&mut block, frame::DATA, d as u64);
    }
    block.freeze().slice(start..)
}

/// A DATA frame's head for `len` bytes.
fn data_head(len: usize) -> Bytes {
    let mut h = BytesMut::with_capacity(9);
    frame::put_head(&mut h, frame::DATA, len as u64);
    h.freeze()
}

/// Sends the response; whether it went out whole (its stream finished).
async fn send_response(mut send: SendStream, res: Response, is_head: bool, cfg: &Settings) -> bool {
    let parts = res.into_parts();
    let len = match &parts.body {
        ResponseBody::Empty => Some(0),
        ResponseBody::Bytes(b) => Some(b.len() as u64),
        ResponseBody::File(f) => Some(f.len),
        ResponseBody::Stream(_) => None,
    };
    let bodiless = is_head || crate::message::bodiless(parts.status);
    // A body in memory goes out in one DATA frame whose head rides with the HEADERS.
    let data = match &parts.body {
        ResponseBody::Bytes(b) if !bodiless && !b.is_empty() => Some(b.len()),
        _ => None,
    };
    let headers = response_head(&parts, len, data, cfg);
    let sent = match parts.body {
        ResponseBody::Bytes(b) if data.is_some() => timed(cfg, send.write_all_chunks(&mut [headers, b])).await,
        ResponseBody::File(f) if !bodiless && f.len > 0 => match timed(cfg, send.write_chunk(headers)).await {
            Ok(()) => send_file(&mut send, &f, cfg).await,
            Err(e) => Err(e),
        },
        ResponseBody::Stream(st) if !bodiless => match timed(cfg, send.write_chunk(headers)).await {
            Ok(()) => return send_stream(send, st, cfg).await,
            Err(e) => Err(e),
        },
        _ => timed(cfg, send.write_chunk(headers)).await,
    };
    match sent {
        Ok(()) => send.finish().is_ok(),
        Err(Sent::Failed) => false,
        Err(Sent::Stalled) => {
            let _ = send.reset(var(code::REQUEST_CANCELLED));
            false
        }
    }
}

/// Why a response was not sent whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The stream or connection is gone.
    Failed,
    /// No progress for `send_timeout`: the client does not read.
    Stalled,
}

/// Runs one send step under `send_timeout`.
async fn timed<T, E>(cfg: &Settings, step: impl Future<Output = Result<T, E>>) -> Result<T, Sent> {
    match tokio::time::timeout(cfg.send_timeout, step).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(Sent::Failed),
        Err(_) => Err(Sent::Stalled),
    }
}

/// A file's range, read in pieces of [`FILE_PIECE`] into DATA frames (each piece read
/// straight into the buffer quinn is handed, nothing zeroed first).
async fn send_file(send: &mut SendStream, f: &FileBody, cfg: &Settings) -> Result<(), Sent> {
    let (mut at, end) = (f.offset, f.offset + f.len);
    while at < end {
        let want = ((end - at) as usize).min(FILE_PIECE);
        let mut buf = Vec::with_capacity(want);
        while buf.len() < want {
            let got = buf.len();
            match crate::sys::pread_append(f.file.as_fd(), &mut buf, want - got, at + got as u64) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if buf.len() < want {
            // The file shrank: the response cannot be completed.
            let _ = send.reset(var(code::INTERNAL_ERROR));
            return Err(Sent::Failed);
        }
        at += want as u64;
        timed(cfg, send.write_all_chunks(&mut [data_head(want), Bytes::from(buf)])).await?;
    }
    Ok(())
}

/// A streaming body: the app writes through a [`BodyWriter`] whose pieces become DATA
/// frames; the stream ends (FIN) when the app's future finishes well, and is reset with
/// H3_INTERNAL_ERROR when it fails.
async fn send_stream(send: SendStream, st: StreamBody, cfg: &Settings) -> bool {
    let shared = Arc::new(tokio::sync::Mutex::new(send));
    let w = BodyWriter::new(StreamWriter { send: shared.clone(), timeout: cfg.send_timeout });
    let ok = (st.0)(w).await.is_ok();
    let mut send = shared.lock().await;
    if ok {
        send.finish().is_ok()
    } else {
        let _ = send.reset(var(code::INTERNAL_ERROR));
        false
    }
}

/// The HTTP/3 side of [`BodyWriter`]: each write is one DATA frame, waiting on QUIC flow
/// control (at most `send_timeout` without progress).
struct StreamWriter {
    send: Arc<tokio::sync::Mutex<SendStream>>,
    timeout: Duration,
}

impl fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("h3::StreamWriter")
    }
}

impl BodySink for StreamWriter {
    fn write<'a>(&'a mut self, data: &'a [u8]) -> WriteFuture<'a> {
        Box::pin(async move {
            if data.is_empty() {
                return Ok(());
            }
            let mut send = self.send.lock().await;
            let mut chunks = [data_head(data.len()), Bytes::copy_from_slice(data)];
            match tokio::time::timeout(self.timeout, send.write_all_chunks(&mut chunks)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/3 stream ended: {e}"))),
                Err(_) => {
                    let _ = send.reset(var(code::REQUEST_CANCELLED));
                    Err(io::Error::new(io::ErrorKind::TimedOut, "HTTP/3 client not reading (stream reset)"))
                }
            }
        })
    }
}

/// The request body of an HTTP/3 stream: the payloads of its DATA frames as they arrive
/// (trailers checked and dropped, unknown frame types skipped), under the body clock
/// (`time::rate`) and the body size limit. Reading gives QUIC flow-control credit back to
/// the client (quinn does that as the stream's data is consumed). A body left unread is
/// stopped by quinn when the stream is dropped; a body that fell behind raises `stalled`,
/// and the request's task resets the stream.
struct BodyReader {
    r: Reader,
    conn: quinn::Connection,
    /// Payload left in the DATA frame being read.
    data_left: u64,
    /// Bytes left of a frame being skipped.
    skip_left: u64,
    /// A trailer section came: only the stream's end may follow.
    trailers: bool,
    done: bool,
    /// What is left of the declared length.
    left: Option<u64>,
    /// Bytes read, against `max`.
    read: u64,
    max: u64,
    max_section: u32,
    rule: BodyRule,
    clock: Option<BodyClock>,
    /// The timer for the clock's deadline, and the deadline it was set for.
    sleep: Option<(Pin<Box<tokio::time::Sleep>>, u64)>,
    stalled: Arc<AtomicBool>,
}

impl fmt::Debug for BodyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("h3::BodyReader").field("read", &self.read).field("done", &self.done).finish()
    }
}

impl BodyReader {
    /// The request's body: empty if the stream already ended with its head (the usual
    /// GET), else a stream of its DATA.
    fn start(
        mut r: Reader,
        conn: quinn::Connection,
        content_length: Option<u64>,
        cfg: &Settings,
        stalled: Arc<AtomicBool>,
    ) -> Body {
        if content_length == Some(0) {
            return Body::empty();
        }
        if r.buf.is_empty() {
            let _ = r.poll_fill(&mut Context::from_waker(Waker::noop()));
            if r.eof && r.buf.is_empty() && content_length.is_none() {
                return Body::empty();
            }
        }
        let ms = |d: Duration| d.as_millis() as u64;
        Body::stream(BodyReader {
            r,
            conn,
            data_left: 0,
            skip_left: 0,
            trailers: false,
            done: false,
            left: content_length,
            read: 0,
            max: cfg.body.max_body,
            max_section: cfg.h3.max_header_list_size,
            rule: BodyRule {
                timeout: ms(cfg.body_timeout),
                min_rate: cfg.min_body_rate,
                grace: ms(cfg.body_rate_grace),
            },
            clock: None,
            sleep: None,
            stalled,
        })
    }

    fn fail(&mut self, err: Error) -> Poll<Option<Result<Bytes, Error>>> {
        self.done = true;
        Poll::Ready(Some(Err(err)))
    }

    /// A connection error found in the body's frames.
    fn conn_fail(&mut self, c: u32, why: &'static str) -> Poll<Option<Result<Bytes, Error>>> {
        conn_error(&self.conn, c, why);
        self.fail(Error::new(Kind::Body, why))
    }

    fn piece(&mut self, b: Bytes) -> Poll<Option<Result<Bytes, Error>>> {
        let n = b.len() as u64;
        self.read += n;
        if let Some(c) = &mut self.clock {
            c.progress(n, now_ms(), &self.rule);
        }
        if self.read > self.max {
            return self.fail(Error::new(Kind::Body, "body over the limit").with_status(413));
        }
        if let Some(left) = &mut self.left {
            if n > *left {
                let e = Error::new(Kind::Body, "HTTP/3 body longer than its content-length").with_status(400);
                return self.fail(e);
            }
            *left -= n;
        }
        Poll::Ready(Some(Ok(b)))
    }

    /// Waits for more of the stream under the body clock.
    fn poll_more(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, Error>> {
        match self.r.poll_fill(cx) {
            Poll::Ready(Ok(more)) => return Poll::Ready(Ok(more)),
            Poll::Ready(Err(_)) => {
                return Poll::Ready(Err(Error::new(Kind::Body, "HTTP/3 stream reset or connection closed")));
            }
            Poll::Pending => {}
        }
        let now = now_ms();
        let rule = self.rule;
        let at = self.clock.get_or_insert_with(|| BodyClock::start(now, &rule)).deadline();
        if self.sleep.as_ref().is_none_or(|(_, set)| *set != at) {
            let wait = Duration::from_millis(at.saturating_sub(now));
            self.sleep = Some((Box::pin(tokio::time::sleep(wait)), at));
        }
        let Some((sleep, _)) = &mut self.sleep else { return Poll::Pending };
        if sleep.as_mut().poll(cx).is_ready() {
            self.stalled.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(Error::new(Kind::Timeout, "HTTP/3 request body too slow (the stream is reset)")));
        }
        Poll::Pending
    }
}

impl Drop for BodyReader {
    /// A body not read to its end: the client is asked to stop sending it (RFC 9114
    /// §4.1.2), without error once the request is answered, or cancelled if it fell behind.
    fn drop(&mut self) {
        if !self.r.eof {
            let c = if self.stalled.load(Ordering::Relaxed) { code::REQUEST_CANCELLED } else { code::NO_ERROR };
            let _ = self.r.recv.stop(var(c));
        }
    }
}

impl BodySource for BodyReader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let buf = &mut self.r.buf;
            if self.data_left > 0 && !buf.is_empty() {
                let n = (buf.len() as u64).min(self.data_left) as usize;
                self.data_left -= n as u64;
                let b = buf.split_to(n).freeze();
                return self.piece(b);
            }
            if self.skip_left > 0 && !buf.is_empty() {
                let n = (buf.len() as u64).min(self.skip_left) as usize;
                self.skip_left -= n as u64;
                buf.advance(n);
                continue;
            }
            if self.data_left == 0 && self.skip_left == 0 {
                if let Some(h) = frame::head(buf) {
                    match h.kind {
                        frame::DATA | frame::HEADERS if self.trailers => {
                            return self.conn_fail(code::FRAME_UNEXPECTED, "a frame after the trailers");
                        }
                        frame::DATA => {
                            buf.advance(h.size);
                            self.data_left = h.len;
                        }
                        frame::HEADERS => {
                            if h.len > u64::from(self.max_section) {
                                return self
                                    .fail(Error::new(Kind::Body, "HTTP/3 trailers over the limit").with_status(431));
                            }
                            if (buf.len() as u64) < h.size as u64 + h.len {
                                if buf.capacity() < h.size + h.len as usize {
                                    buf.reserve(h.size + h.len as usize - buf.len());
                                }
                                // Wait for the whole section below.
                            } else {
                                buf.advance(h.size);
                                let block = buf.split_to(h.len as usize);
                                let section = qpack::Section { block: &block, max_size: self.max_section as usize };
                                match head::trailers(section) {
                                    Ok(()) => self.trailers = true,
                                    Err(HeaderError::Compression | HeaderError::Abandoned) => {
                                        return self
                                            .conn_fail(code::QPACK_DECOMPRESSION_FAILED, "QPACK decoding failed");
                                    }
                                    Err(_) => {
                                        let e = Error::new(Kind::Body, "malformed HTTP/3 trailers").with_status(400);
                                        return self.fail(e);
                                    }
                                }
                                continue;
                            }
                        }
                        k if !frame::allowed_on_request(k) => {
                            return self.conn_fail(code::FRAME_UNEXPECTED, "unexpected frame in a request body");
                        }
                        _ => {
                            buf.advance(h.size);
                            self.skip_left = h.len;
                        }
                    }
                    if self.data_left > 0 || self.skip_left > 0 {
                        continue;
                    }
                    if h.kind != frame::HEADERS {
                        // An empty frame.
                        continue;
                    }
                }
            }
            match self.poll_more(cx) {
                Poll::Ready(Ok(true)) => {}
                Poll::Ready(Ok(false)) => {
                    self.done = true;
                    if !self.r.buf.is_empty() || self.data_left > 0 || self.skip_left > 0 {
                        return self.conn_fail(code::FRAME_ERROR, "truncated frame");
                    }
                    if self.left.is_some_and(|n| n > 0) {
                        let e = Error::new(Kind::Body, "HTTP/3 body shorter than its content-length").with_status(400);
                        return Poll::Ready(Some(Err(e)));
                    }
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(e)) => return self.fail(e),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn content_length(&self) -> Option<u64> {
        self.left
    }
}
