//! The HTTP/3 connection driver, on `quinn` (QUIC): the connection's control streams, and
//! a task per request stream that reads the head (QPACK, `qpack`), builds the engine's
//! [`Request`] (its body a [`Body`] reading the stream's DATA frames), runs the app as the
//! other drivers do (panics become 500), and sends the [`Response`]: bytes, a file read in
//! pieces, or a stream the app writes with backpressure.
//!
//! Streams (RFC 9114 §6): we open our control stream with SETTINGS and keep it open. The
//! rules of the peer's unidirectional streams (`selvedge_proto::h3::conn::UniStream`),
//! of admitting request streams and GOAWAY (`Admission`) and of a request stream's frames
//! (`selvedge_proto::h3::request::RequestStream`) are sans-IO state machines, tested byte
//! by byte there; this driver reads the streams into their buffers, feeds them, and does
//! what they say (close the connection with a code, stop or reset a stream).
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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::header;
use http::{Method, Version};
use quinn::{RecvStream, SendStream, VarInt};

use super::frame::{self, code};
use super::qpack;
use crate::app::body::{Body, BodySink, BodySource, BodyWriter, WriteFuture};
use crate::app::response::{FileBody, Response, ResponseBody, StreamBody};
use crate::app::App;
use crate::dispatch::{or_500, poll_catching};
use crate::error::{Error, Kind};
use crate::head::{self, HeaderError};
use crate::io::sys::PeerAddr;
use crate::message::response_field;
use crate::settings::Settings;
use crate::time::date::{self, DATE_LEN};
use crate::time::rate::{BodyClock, BodyRule};
use crate::time::timeout::{now_ms, Group};
use crate::Request;
use selvedge_proto::h3::conn::{Admission, Close, Critical, UniStep, UniStream};
use selvedge_proto::h3::request::{ReqError, ReqEvent, RequestStream};

/// File bytes read and sent at a time.
const FILE_PIECE: usize = 64 * 1024;

/// Room kept for reading a stream: what one read asks quinn for at most.
const READ_CHUNK: usize = 16 * 1024;

/// The room of a stream's first read.
const FIRST_READ: usize = 512;

#[inline]
fn var(c: u32) -> VarInt {
    VarInt::from_u32(c)
}

/// Closes the connection with an HTTP/3 error code (a connection error, RFC 9114 §8).
fn conn_error(conn: &quinn::Connection, c: Close) {
    conn.close(var(c.code), c.reason.as_bytes());
}

/// Serves one established QUIC connection until the client closes it, it times out, or a
/// drain (GOAWAY) has let its last request finish.
pub(crate) async fn serve_http3<A: App>(conn: quinn::Connection, app: Arc<A>, cfg: Arc<Settings>, group: Arc<Group>) {
    let peer = PeerAddr::Tcp(conn.remote_address());
    // The server name the client asked for (SNI), shared by the connection's requests.
    let sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let tls = Some(crate::io::transport::Tls::new(crate::app::request::TlsVersion::Tls13, sni.as_deref()));
    // Our control stream, open for the connection's life (its end would be a connection
    // error for the peer).
    let Ok(mut control) = conn.open_uni().await else { return };
    let preface = frame::control_preface(u64::from(cfg.h3.max_header_list_size));
    if timed(&cfg, control.write_all(&preface)).await.is_err() {
        // A peer that leaves no room for our SETTINGS (RFC 9114 §6.2 asks for 1,024 bytes).
        return conn_error(&conn, Close { code: code::EXCESSIVE_LOAD, reason: "no room for our control stream" });
    }
    let critical = Arc::new(Critical::default());
    // Requests in flight, each a task of its own; the connection waits for them to end.
    let tasks = Arc::new(InFlight::default());
    // The peer's unidirectional streams: they live as long as the connection.
    let mut uni = tokio::task::JoinSet::new();
    let mut admission = Admission::new();
    loop {
        tokio::select! {
            bi = conn.accept_bi() => match bi {
                Ok((send, recv)) => {
                    if let Err(c) = admission.handle_request_opened(u64::from(send.id())) {
                        reject(send, recv, c);
                        continue;
                    }
                    let guard = InFlight::enter(&tasks);
                    let req = request(send, recv, conn.clone(), app.clone(), cfg.clone(), peer.clone(), tls.clone());
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
            () = group.wait_drain(), if !admission.draining() => {
                // GOAWAY: no new requests; those in flight finish.
                let Some(goaway) = admission.handle_drain() else { continue };
                if timed(&cfg, control.write_all(&goaway)).await.is_err() {
                    break;
                }
            }
            // After GOAWAY, once the last request in flight has ended.
            () = tasks.idle(), if admission.draining() => break,
        }
    }
    tasks.idle().await;
    if admission.draining() {
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

/// A request stream opened after our GOAWAY: refused (`c`: H3_REQUEST_REJECTED), so the
/// client may retry it elsewhere.
fn reject(mut send: SendStream, mut recv: RecvStream, c: u32) {
    let _ = recv.stop(var(c));
    let _ = send.reset(var(c));
}

/// Reads one of the peer's unidirectional streams (RFC 9114 §6.2) through its rules.
async fn peer_stream(recv: RecvStream, conn: quinn::Connection, critical: Arc<Critical>) {
    let mut r = Reader::new(recv);
    let mut s = UniStream::new();
    loop {
        match s.handle_bytes(&mut r.buf, &critical) {
            Ok(UniStep::More) => {}
            Ok(UniStep::Stop(c)) => {
                let _ = r.recv.stop(var(c));
                return;
            }
            Err(c) => return conn_error(&conn, c),
        }
        let reset = match r.fill().await {
            Ok(true) => continue,
            Ok(false) => false,
            Err(_) => true,
        };
        if let Err(c) = s.handle_end(&r.buf, reset) {
            conn_error(&conn, c);
        }
        return;
    }
}

/// Reading a stream stopped short: it was reset by the peer, or the connection is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reset;

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
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, Reset>> {
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
            Poll::Ready(Err(_)) => Poll::Ready(Err(Reset)),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn fill(&mut self) -> Result<bool, Reset> {
        poll_fn(|cx| self.poll_fill(cx)).await
    }
}

/// Why a request stream gives no request.
enum NoHead {
    /// A connection error.
    Conn(Close),
    /// A stream error (malformed: H3_MESSAGE_ERROR; ended early: H3_REQUEST_INCOMPLETE).
    Stream(u32, &'static str),
    /// Over SETTINGS_MAX_FIELD_SECTION_SIZE: answer 431.
    TooLarge,
    /// Reset by the peer before a head, or the connection is gone.
    Gone,
}

/// Reads the request's HEADERS frame through the stream's rules and decodes it with the
/// checks HTTP/2's heads get.
async fn read_head(r: &mut Reader, rs: &mut RequestStream, max: u32) -> Result<head::Head, NoHead> {
    let block = loop {
        match rs.poll_event(&mut r.buf, r.eof) {
            Some(Ok(ReqEvent::Headers(block))) => break block,
            Some(Ok(_)) => unreachable!("a request stream gives its head first"),
            Some(Err(ReqError::Close(c))) => return Err(NoHead::Conn(c)),
            Some(Err(ReqError::Reset(c, why))) => return Err(NoHead::Stream(c, why)),
            Some(Err(ReqError::TooLarge)) => return Err(NoHead::TooLarge),
            None => {
                if r.fill().await.is_err() {
                    return Err(NoHead::Gone);
                }
            }
        }
    };
    let mut arena = BytesMut::with_capacity(block.len() * 2 + 64);
    let section = qpack::Section { block: &block, max_size: max as usize };
    let malformed = NoHead::Stream(code::MESSAGE_ERROR, "malformed HTTP/3 request");
    match head::request(section, false, &mut arena) {
        // Every HTTP/3 request names its authority, by `:authority` or `host`, and not as
        // empty (RFC 9114 §4.3.1: the schemes HTTP/3 carries require one).
        Ok(h) if h.req.authority.is_none_or(|a| a.len == 0) => Err(malformed),
        Ok(h) => {
            rs.set_content_length(h.content_length);
            Ok(h)
        }
        Err(HeaderError::Malformed) => Err(malformed),
        Err(HeaderError::TooLarge) => Err(NoHead::TooLarge),
        Err(HeaderError::Compression | HeaderError::Abandoned) => {
            Err(NoHead::Conn(Close { code: code::QPACK_DECOMPRESSION_FAILED, reason: "QPACK decoding failed" }))
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
    tls: Option<crate::io::transport::Tls>,
) {
    let mut r = Reader::new(recv);
    let max = cfg.h3.max_header_list_size;
    let mut rs = RequestStream::new(u64::from(max));
    let head = match tokio::time::timeout(cfg.header_timeout, read_head(&mut r, &mut rs, max)).await {
        Ok(Ok(h)) => h,
        Ok(Err(NoHead::Conn(c))) => return conn_error(&conn, c),
        Ok(Err(NoHead::Stream(c, why))) => {
            if !r.eof {
                let _ = r.recv.stop(var(c));
            }
            let _ = send.reset(var(c));
            return cfg.exception(&Error::new(Kind::BadRequest, why));
        }
        Ok(Err(NoHead::TooLarge)) => {
            // Answered, and the rest of the request not read (RFC 9114 §4.1.1, §4.2.2).
            let _ = r.recv.stop(var(code::NO_ERROR));
            let res = Response::new(http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            send_response(send, res, false, &cfg).await;
            return cfg.exception(&Error::new(Kind::BadRequest, "HTTP/3 request head over the limit (431)"));
        }
        Ok(Err(NoHead::Gone)) => {
            // Reset before its head (the connection may be gone too).
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
    // The code to reset the stream with if its body broke its rules or its clock.
    let abort = Arc::new(AtomicU32::new(0));
    let body = BodyReader::start(r, rs, conn, head.content_length, &cfg, abort.clone());
    let req = Request::new(head.req, Version::HTTP_3, peer, tls, body);
    let mut fut = std::pin::pin!(crate::dispatch::call(&*app, req, Some(stream_id)));
    let mut res = or_500(poll_fn(|cx| poll_catching(fut.as_mut(), cx)).await, &cfg);
    let aborted = abort.load(Ordering::Relaxed);
    if aborted != 0 {
        // The body fell behind its clock (H3_REQUEST_CANCELLED) or was malformed
        // (H3_MESSAGE_ERROR): the stream is reset, whatever the app answered (as HTTP/2
        // resets it). The request half's STOP_SENDING goes out as it is dropped.
        let _ = send.reset(var(aborted));
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
fn response_head(res: &crate::app::response::Parts, len: Option<u64>, data: Option<usize>, cfg: &Settings) -> Bytes {
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
            match crate::io::sys::pread_append(f.file.as_fd(), &mut buf, want - got, at + got as u64) {
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
/// (the stream's rules in `RequestStream`: trailers checked and dropped, unknown frame
/// types skipped, the declared length held to), under the body clock (`time::rate`) and
/// the body size limit. Reading gives QUIC flow-control credit back to the client (quinn
/// does that as the stream's data is consumed). A body left unread is stopped with
/// H3_NO_ERROR when it is dropped; a body that fell behind or broke its rules sets `abort`
/// to the code the request's task resets the stream with.
struct BodyReader {
    r: Reader,
    rs: RequestStream,
    conn: quinn::Connection,
    done: bool,
    /// Bytes read, against `max`.
    read: u64,
    max: u64,
    max_section: u32,
    rule: BodyRule,
    clock: Option<BodyClock>,
    /// The timer for the clock's deadline, and the deadline it was set for.
    sleep: Option<(Pin<Box<tokio::time::Sleep>>, u64)>,
    abort: Arc<AtomicU32>,
}

impl fmt::Debug for BodyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("h3::BodyReader").field("read", &self.read).field("done", &self.done).finish()
    }
}

impl BodyReader {
    /// The request's body: empty if the stream already ended with its head (the usual
    /// GET) or declared none, else a stream of its DATA.
    fn start(
        mut r: Reader,
        rs: RequestStream,
        conn: quinn::Connection,
        content_length: Option<u64>,
        cfg: &Settings,
        abort: Arc<AtomicU32>,
    ) -> Body {
        if r.buf.is_empty() {
            let _ = r.poll_fill(&mut Context::from_waker(Waker::noop()));
        }
        if content_length == Some(0) || (r.eof && r.buf.is_empty() && content_length.is_none()) {
            if !r.eof {
                // Nothing more is read: the client is asked to stop sending, without error
                // (RFC 9114 §4.1.2), rather than with quinn's code 0.
                let _ = r.recv.stop(var(code::NO_ERROR));
                r.eof = true;
            }
            return Body::empty();
        }
        let ms = |d: Duration| d.as_millis() as u64;
        Body::stream(BodyReader {
            r,
            rs,
            conn,
            done: false,
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
            abort,
        })
    }

    fn fail(&mut self, err: Error) -> Poll<Option<Result<Bytes, Error>>> {
        self.done = true;
        Poll::Ready(Some(Err(err)))
    }

    /// A connection error found in the body's frames.
    fn conn_fail(&mut self, c: Close) -> Poll<Option<Result<Bytes, Error>>> {
        conn_error(&self.conn, c);
        self.fail(Error::new(Kind::Body, c.reason))
    }

    /// A stream error: the stream is reset with `c` (by the request's task).
    fn stream_fail(&mut self, c: u32, why: &'static str) -> Poll<Option<Result<Bytes, Error>>> {
        self.abort.store(c, Ordering::Relaxed);
        self.fail(Error::new(Kind::Body, why).with_status(400))
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
        Poll::Ready(Some(Ok(b)))
    }

    /// Waits for more of the stream under the body clock.
    fn poll_more(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, Error>> {
        match self.r.poll_fill(cx) {
            Poll::Ready(Ok(more)) => return Poll::Ready(Ok(more)),
            Poll::Ready(Err(Reset)) => {
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
            self.abort.store(code::REQUEST_CANCELLED, Ordering::Relaxed);
            return Poll::Ready(Err(Error::new(Kind::Timeout, "HTTP/3 request body too slow (the stream is reset)")));
        }
        Poll::Pending
    }
}

impl Drop for BodyReader {
    /// A body not read to its end: the client is asked to stop sending it (RFC 9114
    /// §4.1.2), without error once the request is answered, or with the code the stream
    /// is reset with.
    fn drop(&mut self) {
        if !self.r.eof {
            let c = match self.abort.load(Ordering::Relaxed) {
                0 => code::NO_ERROR,
                c => c,
            };
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
            match self.rs.poll_event(&mut self.r.buf, self.r.eof) {
                Some(Ok(ReqEvent::Data(b))) => return self.piece(b),
                Some(Ok(ReqEvent::Trailers(block))) => {
                    let section = qpack::Section { block: &block, max_size: self.max_section as usize };
                    match head::trailers(section) {
                        Ok(()) => {}
                        Err(HeaderError::Compression | HeaderError::Abandoned) => {
                            let c = Close { code: code::QPACK_DECOMPRESSION_FAILED, reason: "QPACK decoding failed" };
                            return self.conn_fail(c);
                        }
                        Err(HeaderError::TooLarge) => {
                            return self
                                .fail(Error::new(Kind::Body, "HTTP/3 trailers over the limit").with_status(431));
                        }
                        Err(HeaderError::Malformed) => {
                            let ReqError::Reset(c, why) = self.rs.malformed_trailers() else { unreachable!() };
                            return self.stream_fail(c, why);
                        }
                    }
                }
                Some(Ok(ReqEvent::End)) => {
                    self.done = true;
                    return Poll::Ready(None);
                }
                Some(Ok(ReqEvent::Headers(_))) => unreachable!("the head came before the body"),
                Some(Err(ReqError::Close(c))) => return self.conn_fail(c),
                Some(Err(ReqError::Reset(c, why))) => return self.stream_fail(c, why),
                Some(Err(ReqError::TooLarge)) => {
                    return self.fail(Error::new(Kind::Body, "HTTP/3 trailers over the limit").with_status(431));
                }
                None => match self.poll_more(cx) {
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => return self.fail(e),
                    Poll::Pending => return Poll::Pending,
                },
            }
        }
    }

    fn content_length(&self) -> Option<u64> {
        self.rs.content_left()
    }
}
