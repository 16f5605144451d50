//! The HTTP/3 connection driver, on `quinn` (QUIC) and the `h3` crate (HTTP/3 framing and
//! QPACK): each request stream gets a task that builds the engine's [`Request`] (its body a
//! [`Body`] reading the stream's DATA), runs the app as the other drivers do (panics
//! become 500), and sends the [`Response`]: bytes, a file read in pieces, or a stream the
//! app writes with backpressure.
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

use ::h3::error::Code;
use ::h3::server::{RequestResolver, RequestStream};
use bytes::{Buf, Bytes, BytesMut};
use http::{header, HeaderValue, Method, Version};

use super::head::{self, connection_specific, Malformed};
use crate::app::App;
use crate::body::{Body, BodySink, BodySource, BodyWriter, WriteFuture};
use crate::dispatch::{or_500, poll_catching};
use crate::error::{Error, Kind};
use crate::response::{FileBody, Response, ResponseBody, StreamBody};
use crate::settings::Settings;
use crate::sys::PeerAddr;
use crate::time::date::{self, DATE_LEN};
use crate::time::rate::{BodyClock, BodyRule};
use crate::time::timeout::{now_ms, Group};
use crate::Request;

type Conn = h3_quinn::Connection;
type SendHalf = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = RequestStream<h3_quinn::RecvStream, Bytes>;

/// File bytes read and sent at a time.
const FILE_PIECE: usize = 64 * 1024;

/// Serves one established QUIC connection until the client closes it, it times out, or a
/// drain (GOAWAY) has let its last request finish.
pub(crate) async fn serve<A: App>(conn: quinn::Connection, app: Arc<A>, cfg: Arc<Settings>, group: Arc<Group>) {
    let peer = PeerAddr::Tcp(conn.remote_address());
    let built = ::h3::server::builder()
        .max_field_section_size(u64::from(cfg.h3.max_header_list_size))
        .build::<Conn, Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await;
    let mut h3c = match built {
        Ok(c) => c,
        Err(_) => return,
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut draining = false;
    loop {
        let next = tokio::select! {
            r = h3c.accept() => r,
            () = group.wait_drain(), if !draining => {
                draining = true;
                // GOAWAY: no new requests; `accept` returns `None` once those in flight end.
                if h3c.shutdown(0).await.is_err() {
                    break;
                }
                continue;
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        match next {
            Ok(Some(resolver)) => {
                let req = request(resolver, app.clone(), cfg.clone(), peer.clone());
                tasks.spawn(crate::dispatch::in_current_span(req));
            }
            Ok(None) => break,
            Err(e) => {
                if !e.is_h3_no_error() {
                    cfg.exception(&Error::new(Kind::Io, "HTTP/3 connection error"));
                }
                break;
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    conn.close(Code::H3_NO_ERROR.value().try_into().unwrap_or_default(), b"");
    // Let the endpoint's driver send the CONNECTION_CLOSE before this task (and maybe
    // the runtime) ends.
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// One request stream: its head (within `header_timeout`), the app, the response.
async fn request<A: App>(resolver: RequestResolver<Conn, Bytes>, app: Arc<A>, cfg: Arc<Settings>, peer: PeerAddr) {
    let (req, mut stream) = match tokio::time::timeout(cfg.header_timeout, resolver.resolve_request()).await {
        Ok(Ok(r)) => r,
        // Refused by the h3 crate (431 sent for an oversized head; a malformed one reset
        // with H3_MESSAGE_ERROR), or no head in time.
        Ok(Err(_)) => return cfg.exception(&Error::new(Kind::BadRequest, "HTTP/3 request head refused")),
        Err(_) => return cfg.exception(&Error::new(Kind::Timeout, "HTTP/3 request head too slow")),
    };
    let (parts, ()) = req.into_parts();
    let head = match head::request(&parts) {
        Ok(h) => h,
        Err(Malformed) => {
            stream.stop_sending(Code::H3_MESSAGE_ERROR);
            stream.stop_stream(Code::H3_MESSAGE_ERROR);
            return cfg.exception(&Error::new(Kind::BadRequest, "malformed HTTP/3 request"));
        }
    };
    let is_head = parts.method == Method::HEAD;
    let stream_id = stream.id().into_inner();
    let (mut send, recv) = stream.split();
    let stalled = Arc::new(AtomicBool::new(false));
    let body = BodyReader::start(recv, head.content_length, &cfg, stalled.clone());
    let req = Request::new(head.req, Version::HTTP_3, peer, Some(crate::request::TlsVersion::Tls13), body);
    let mut fut = std::pin::pin!(crate::dispatch::call(&*app, req, Some(stream_id)));
    let res = or_500(poll_fn(|cx| poll_catching(fut.as_mut(), cx)).await, &cfg);
    if stalled.load(Ordering::Relaxed) {
        // The body fell behind its clock: the stream is reset, whatever the app answered
        // (as HTTP/2 resets it). The request half's STOP_SENDING goes out as it is dropped.
        send.stop_stream(Code::H3_REQUEST_CANCELLED);
        return;
    }
    respond(send, res, is_head, &cfg).await;
}

/// Sends `res` on the stream: the head (with `date`, `server` and `content-length` added
/// as the other drivers add them), then the body, then FIN.
async fn respond(send: SendHalf, mut res: Response, is_head: bool, cfg: &Settings) {
    let finish = res.take_finish();
    let whole = send_response(send, res, is_head, cfg).await;
    if let Some(f) = finish {
        f.report(whole);
    }
}

/// Sends the response; whether it went out whole (its stream finished).
async fn send_response(mut send: SendHalf, res: Response, is_head: bool, cfg: &Settings) -> bool {
    let (status, fields, body) = res.into_fields();
    let mut head = http::Response::new(());
    *head.status_mut() = status;
    let h = head.headers_mut();
    h.reserve(fields.len() + 3);
    let (mut has_date, mut has_server, mut has_len) = (false, false, false);
    for (n, v) in fields {
        if connection_specific(&n) {
            continue;
        }
        has_date |= n == header::DATE;
        has_server |= n == header::SERVER;
        has_len |= n == header::CONTENT_LENGTH;
        h.append(n, v);
    }
    if !has_date {
        let mut d = [0u8; DATE_LEN];
        date::current(&mut d);
        if let Ok(v) = HeaderValue::from_bytes(&d) {
            h.insert(header::DATE, v);
        }
    }
    if let (false, Some(s)) = (has_server, cfg.server_name) {
        h.insert(header::SERVER, HeaderValue::from_static(s));
    }
    let bodiless = crate::message::bodiless(status);
    let len = match &body {
        ResponseBody::Empty => Some(0),
        ResponseBody::Bytes(b) => Some(b.len() as u64),
        ResponseBody::File(f) => Some(f.len),
        ResponseBody::Stream(_) => None,
    };
    if let (false, false, Some(n)) = (has_len, bodiless, len) {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    if timed(cfg, send.send_response(head)).await.is_err() {
        return false;
    }
    let sent = match body {
        _ if is_head || bodiless => Ok(()),
        ResponseBody::Empty => Ok(()),
        ResponseBody::Bytes(b) if b.is_empty() => Ok(()),
        ResponseBody::Bytes(b) => timed(cfg, send.send_data(b)).await,
        ResponseBody::File(f) => send_file(&mut send, &f, cfg).await,
        ResponseBody::Stream(st) => return send_stream(send, st, cfg).await,
    };
    match sent {
        Ok(()) => timed(cfg, send.finish()).await.is_ok(),
        Err(Sent::Failed) => false,
        Err(Sent::Stalled) => {
            send.stop_stream(Code::H3_REQUEST_CANCELLED);
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

/// A file's range, read in pieces of [`FILE_PIECE`] into DATA frames.
async fn send_file(send: &mut SendHalf, f: &FileBody, cfg: &Settings) -> Result<(), Sent> {
    let (mut at, end) = (f.offset, f.offset + f.len);
    while at < end {
        let want = ((end - at) as usize).min(FILE_PIECE);
        let mut buf = BytesMut::zeroed(want);
        let mut got = 0;
        while got < want {
            match crate::sys::pread(f.file.as_fd(), &mut buf[got..], at + got as u64) {
                Ok(0) | Err(_) => break,
                Ok(k) => got += k,
            }
        }
        if got < want {
            // The file shrank: the response cannot be completed.
            send.stop_stream(Code::H3_INTERNAL_ERROR);
            return Err(Sent::Failed);
        }
        at += want as u64;
        timed(cfg, send.send_data(buf.freeze())).await?;
    }
    Ok(())
}

/// A streaming body: the app writes through a [`BodyWriter`] whose pieces become DATA
/// frames; the stream ends (FIN) when the app's future finishes well, and is reset with
/// H3_INTERNAL_ERROR when it fails.
async fn send_stream(send: SendHalf, st: StreamBody, cfg: &Settings) -> bool {
    let shared = Arc::new(tokio::sync::Mutex::new(send));
    let w = BodyWriter::new(StreamWriter { send: shared.clone(), timeout: cfg.send_timeout });
    let ok = (st.0)(w).await.is_ok();
    let mut send = shared.lock().await;
    if ok {
        timed(cfg, send.finish()).await.is_ok()
    } else {
        send.stop_stream(Code::H3_INTERNAL_ERROR);
        false
    }
}

/// The HTTP/3 side of [`BodyWriter`]: each write is one DATA frame, waiting on QUIC flow
/// control (at most `send_timeout` without progress).
struct StreamWriter {
    send: Arc<tokio::sync::Mutex<SendHalf>>,
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
            let mut send = self.send.lock().await;
            match tokio::time::timeout(self.timeout, send.send_data(Bytes::copy_from_slice(data))).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, format!("HTTP/3 stream ended: {e}"))),
                Err(_) => {
                    send.stop_stream(Code::H3_REQUEST_CANCELLED);
                    Err(io::Error::new(io::ErrorKind::TimedOut, "HTTP/3 client not reading (stream reset)"))
                }
            }
        })
    }
}

/// The request body of an HTTP/3 stream: its DATA frames as they arrive, under the body
/// clock (`time::rate`) and the body size limit. Reading gives QUIC flow-control credit
/// back to the client (quinn does that as the stream's data is consumed).
///
/// It never calls `stop_sending` itself: h3-quinn 0.0.10 panics on that while a read is
/// pending. A body left unread is stopped by quinn when the stream is dropped; a body that
/// fell behind raises `stalled`, and the request's task resets the stream.
struct BodyReader {
    recv: RecvHalf,
    /// A piece read while probing for the end of the stream.
    first: Option<Bytes>,
    done: bool,
    /// What is left of the declared length.
    left: Option<u64>,
    /// Bytes read, against `max`.
    read: u64,
    max: u64,
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
    fn start(recv: RecvHalf, content_length: Option<u64>, cfg: &Settings, stalled: Arc<AtomicBool>) -> Body {
        let ms = |d: Duration| d.as_millis() as u64;
        let mut r = BodyReader {
            recv,
            first: None,
            done: false,
            left: content_length,
            read: 0,
            max: cfg.body.max_body,
            rule: BodyRule {
                timeout: ms(cfg.body_timeout),
                min_rate: cfg.min_body_rate,
                grace: ms(cfg.body_rate_grace),
            },
            clock: None,
            sleep: None,
            stalled,
        };
        if content_length == Some(0) {
            r.done = true;
            return Body::empty();
        }
        match r.recv.poll_recv_data(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(None)) if content_length.is_none() => {
                r.done = true;
                return Body::empty();
            }
            Poll::Ready(Ok(Some(mut b))) => r.first = Some(b.copy_to_bytes(b.remaining())),
            _ => {}
        }
        Body::stream(r)
    }

    fn fail(&mut self, err: Error) -> Poll<Option<Result<Bytes, Error>>> {
        self.done = true;
        Poll::Ready(Some(Err(err)))
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
}

impl BodySource for BodyReader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        if let Some(b) = self.first.take() {
            return self.piece(b);
        }
        if self.done {
            return Poll::Ready(None);
        }
        match self.recv.poll_recv_data(cx) {
            Poll::Ready(Ok(Some(mut b))) => {
                let b = b.copy_to_bytes(b.remaining());
                self.piece(b)
            }
            Poll::Ready(Ok(None)) => {
                self.done = true;
                if self.left.is_some_and(|n| n > 0) {
                    let e = Error::new(Kind::Body, "HTTP/3 body shorter than its content-length").with_status(400);
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None)
            }
            Poll::Ready(Err(_)) => {
                self.done = true;
                Poll::Ready(Some(Err(Error::new(Kind::Body, "HTTP/3 stream reset or connection closed"))))
            }
            Poll::Pending => {
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
                    let e = Error::new(Kind::Timeout, "HTTP/3 request body too slow (the stream is reset)");
                    return self.fail(e);
                }
                Poll::Pending
            }
        }
    }

    fn content_length(&self) -> Option<u64> {
        self.left
    }
}
