//! One HTTP/1.x connection, as plain sequential async code: read a head, call the app,
//! write the response, repeat.
//!
//! - Pipelining: while the receive buffer already holds another complete request, its
//!   response is appended to the send buffer; the batch goes out in one write before the
//!   next read.
//! - Bodies: the receive buffer moves into the request's body reader and comes back when
//!   the app is done; what the app left unread is drained (up to `max_drain`) so the
//!   connection can be kept, else it is closed.
//! - Timers: the header phase has an absolute deadline from the request's first byte; idle
//!   waits, body reads and writes each set their own (see `time::timeout`). While the app
//!   runs the timer is paused.
//! - Errors in the head get their status (400, 413, 414, 417, 431, 501, 505) and a lingering
//!   close: half-close, drain for a moment, then close, so the client reads the answer.

use std::future::Future;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use http::header::CONNECTION;
use http::{Method, StatusCode, Version};

use super::body::Decoder;
use super::parse::{self, Framing, Head, Minor, ParseError};
use super::reader::{self, Failure, Reader};
use super::sink::Sink;
use super::write::{compose, ConnHeader, Framing as Out};
use crate::app::App;
use crate::body::{Body, BodyWriter};
use crate::dispatch::{self, AppSlot};
use crate::error::{Error, Kind};
use crate::message::{has_token, HeaderSpan, Span};
use crate::response::{Response, ResponseBody};
use crate::settings::Settings;
use crate::sys::PeerAddr;
use crate::time::timeout::{now_ms, Timer};
use crate::transport::Transport;
use crate::Request;

/// Bodies up to this size are copied into the send buffer (one write for head and body);
/// larger ones go out with `writev` straight from their own memory.
const COPY_BODY_MAX: usize = 16 * 1024;
/// A pipelined batch is flushed once it reaches this size.
const BATCH_MAX: usize = 64 * 1024;

struct Conn {
    sock: Arc<Transport>,
    peer: PeerAddr,
    cfg: Arc<Settings>,
    timer: Timer,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// The header lines of the head being parsed (moved into its request).
    headers: Vec<HeaderSpan>,
    /// `Upgrade: h2c` was accepted: the connection turns into HTTP/2, with this request to
    /// answer on stream 1.
    h2c: Option<Request>,
}

/// A connection HTTP/1.1 hands over to HTTP/2 after `Upgrade: h2c` (RFC 7540 §3.2): the
/// 101 is sent; the request is to be answered on stream 1, and `rbuf` holds what the
/// client sent after it (its preface).
pub(crate) struct H2c {
    pub(crate) sock: Arc<Transport>,
    pub(crate) timer: Timer,
    pub(crate) rbuf: BytesMut,
    pub(crate) request: Request,
}

/// What to do after a response.
#[derive(PartialEq, Eq)]
enum Next {
    KeepAlive,
    /// Close after flushing; `linger` when the client may still be sending.
    Close {
        linger: bool,
    },
    /// Hand the connection to HTTP/2.
    Upgrade,
}

/// Serves one connection until it closes, or until it turns into HTTP/2 (`Upgrade: h2c`):
/// then the hand-off is returned. `rbuf` holds the bytes already received (the server read
/// them to choose the protocol).
pub(crate) async fn serve<A: App>(
    sock: Arc<Transport>,
    rbuf: BytesMut,
    peer: PeerAddr,
    app: &A,
    cfg: Arc<Settings>,
    timer: Timer,
) -> Option<H2c> {
    let mut conn = Conn { sock, peer, cfg, timer, rbuf, wbuf: Vec::new(), headers: Vec::new(), h2c: None };
    let open = crate::stats::OpenConn::new(false);
    let live = crate::pool::Live::new();
    conn.run(app).await;
    drop(live);
    let Some(request) = conn.h2c.take() else {
        drop(open);
        return None;
    };
    // Counted as HTTP/2 from here (by its driver).
    open.hand_off();
    let Conn { sock, timer, rbuf, .. } = conn;
    Some(H2c { sock, timer, rbuf, request })
}

impl Conn {
    async fn run<A: App>(&mut self, app: &A) {
        let mut first = true;
        // Where the app's futures run (its box is reused while that is cheap: `AppSlot`).
        let mut slot = AppSlot::default();
        loop {
            let head = match self.read_head(first).await {
                Ok(Some(h)) => h,
                Ok(None) => return,
                Err(e) => {
                    let err = Error::new(Kind::BadRequest, "invalid request head").with_status(e.status());
                    let err = match e {
                        ParseError::BadRequest(why) => Error::new(Kind::BadRequest, why).with_status(400),
                        _ => err,
                    };
                    self.reject(e.status(), err).await;
                    return;
                }
            };
            first = false;
            match self.request(head, |req| app.handle(req), &mut slot).await {
                Next::KeepAlive => {}
                Next::Upgrade => return,
                Next::Close { linger } => {
                    if self.flush().await.is_ok() && linger {
                        self.linger().await;
                    }
                    return;
                }
            }
        }
    }

    /// Reads until a complete head is buffered. `Ok(None)`: the connection ended quietly.
    async fn read_head(&mut self, first: bool) -> Result<Option<Head>, ParseError> {
        let mut deadline_set = false;
        loop {
            if !self.rbuf.is_empty() {
                if self.headers.capacity() == 0 {
                    self.headers = crate::pool::take_spans();
                }
                if let parse::Status::Complete(h) = parse::parse(&self.rbuf, &self.cfg.limits, &mut self.headers)? {
                    return Ok(Some(h));
                }
            }
            if self.flush().await.is_err() {
                return Ok(None);
            }
            let idle = self.rbuf.is_empty();
            if idle {
                if !self.timer.enter_idle() {
                    return Ok(None);
                }
                self.timer.tickle(if first { self.cfg.header_timeout } else { self.cfg.idle_timeout });
            } else if !deadline_set {
                // Part of the next request is already here: its head is on the clock.
                self.timer.set_deadline(now_ms(), self.cfg.header_timeout);
                deadline_set = true;
            }
            let n = if idle {
                self.read_when_idle().await
            } else {
                self.make_room();
                self.sock.read(&mut self.rbuf).await
            };
            match n {
                Ok(0) | Err(_) => return Ok(None),
                Ok(_) => {}
            }
            if idle {
                if !self.timer.leave_idle() {
                    return Ok(None);
                }
                self.timer.set_deadline(now_ms(), self.cfg.header_timeout);
                deadline_set = true;
            }
        }
    }

    /// Gives the receive buffer room for a read if it has less than 512 bytes (a plain
    /// function: an async wrapper around the read costs ~70 instructions per request).
    #[inline]
    fn make_room(&mut self) {
        if self.rbuf.capacity() - self.rbuf.len() < 512 {
            self.rbuf.reserve(self.cfg.read_buffer);
        }
    }

    /// The first read of a request on an idle connection. Unless few connections are live
    /// (`pool::hold_while_idle`), the connection holds no buffers while it waits: they go
    /// back to the thread's pool and are taken again once the socket is readable.
    async fn read_when_idle(&mut self) -> std::io::Result<usize> {
        if crate::pool::hold_while_idle() && self.rbuf.capacity() > 0 {
            self.make_room();
            return self.sock.read(&mut self.rbuf).await;
        }
        crate::pool::put_read(std::mem::take(&mut self.rbuf));
        crate::pool::put_write(std::mem::take(&mut self.wbuf));
        let min = self.cfg.read_buffer;
        let r = self.sock.read_when_ready(&mut self.rbuf, |b| *b = crate::pool::take_read(min)).await;
        self.wbuf = crate::pool::take_write();
        r
    }

    /// Handles one request whose head is buffered.
    async fn request<F: Future<Output = Response>>(
        &mut self,
        h: Head,
        call: impl FnOnce(Request) -> F,
        slot: &mut AppSlot<F>,
    ) -> Next {
        let minor = h.minor;
        let method = match Method::from_bytes(&self.rbuf[h.method.range()]) {
            Ok(m) => m,
            Err(_) => {
                self.reject(400, Error::new(Kind::BadRequest, "invalid method").with_status(400)).await;
                return Next::Close { linger: false };
            }
        };
        let is_head = method == Method::HEAD;
        let mut keep_alive = match minor {
            Minor::One => !h.conn_close,
            Minor::Zero => h.conn_keep_alive && !h.conn_close,
        };
        // Both kinds of upgrade need `Connection: upgrade`, which the parser noted.
        let h2c = h.conn_upgrade && first_upgrade(&self.rbuf, &self.headers, minor);
        let upgrade = if h2c || !h.conn_upgrade { None } else { upgrade_request(&self.rbuf, &h, &self.headers, minor) };
        let head_bytes = self.rbuf.split_to(h.len).freeze();

        // An upgrade request's "body" is the connection after a 101, if the app switches.
        let switched = upgrade.map(|_| Arc::new(AtomicBool::new(false)));
        let decoder = match h.framing {
            Framing::None => switched.as_ref().map(|s| Decoder::tunnel(s.clone(), self.cfg.body)),
            Framing::Length(n) => match Decoder::length(n, self.cfg.body) {
                Ok(d) => Some(d),
                Err(_) => {
                    self.reject(413, Error::new(Kind::Body, "request body over the limit").with_status(413)).await;
                    return Next::Close { linger: false };
                }
            },
            Framing::Chunked => Some(Decoder::chunked(self.cfg.body)),
        };
        let (body, home) = match decoder {
            None => (Body::empty(), None),
            Some(d) => {
                let home: reader::Home = Arc::new(Mutex::new(None));
                let st = reader::State::new(
                    self.sock.clone(),
                    std::mem::take(&mut self.rbuf),
                    d,
                    h.expect_continue && minor == Minor::One,
                    self.timer.handle(),
                    self.cfg.clone(),
                );
                (Body::stream(Reader::new(st, home.clone())), Some(home))
            }
        };
        let req = Request {
            buf: head_bytes,
            method,
            target: h.target,
            path: h.path,
            query: h.query,
            authority: h.authority,
            headers: std::mem::take(&mut self.headers),
            version: if minor == Minor::One { Version::HTTP_11 } else { Version::HTTP_10 },
            peer: self.peer.clone(),
            body,
            secure: self.sock.is_tls(),
            upgrade,
        };
        if h2c && home.is_none() && !self.timer.shutting_down() {
            // `Upgrade: h2c` (RFC 7540 §3.2): 101, then HTTP/2, the request on stream 1.
            self.wbuf
                .extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
            if self.flush().await.is_err() {
                return Next::Close { linger: false };
            }
            let mut req = req;
            req.version = Version::HTTP_2;
            self.h2c = Some(req);
            return Next::Upgrade;
        }

        self.timer.pause();
        slot.load(call(req));
        let mut res = match slot.run().await {
            Some(res) => res,
            None => {
                keep_alive = false;
                dispatch::panicked(&self.cfg)
            }
        };

        let mut linger = false;
        if let Some(home) = home {
            let st = home.lock().ok().and_then(|mut g| g.take());
            match st {
                None => {
                    // The app kept the body beyond its response: the connection cannot go on.
                    keep_alive = false;
                    linger = true;
                }
                Some(mut st) => {
                    if st.failed.is_none() && !st.decoder.is_done() {
                        if st.continue_pending || st.decoder.remaining().is_some_and(|r| r > self.cfg.max_drain) {
                            keep_alive = false;
                            linger = true;
                        } else {
                            let mut drained = 0u64;
                            while let Some(piece) = st.next().await {
                                match piece {
                                    Ok(b) => {
                                        drained += b.len() as u64;
                                        if drained > self.cfg.max_drain {
                                            keep_alive = false;
                                            linger = true;
                                            break;
                                        }
                                    }
                                    Err(_) => break,
                                }
                            }
                        }
                    }
                    match st.failed {
                        None => {}
                        Some(Failure::Broken) => return Next::Close { linger: false },
                        Some(Failure::Status(s)) => {
                            let status = StatusCode::from_u16(s).unwrap_or(StatusCode::BAD_REQUEST);
                            let err = Error::new(Kind::Body, "invalid request body").with_status(s);
                            res = dispatch::reject(&self.cfg, status, &err);
                            keep_alive = false;
                            linger = true;
                        }
                    }
                    self.rbuf = st.buf;
                }
            }
        }

        if res.status == StatusCode::SWITCHING_PROTOCOLS {
            return self.switch_protocols(res, switched).await;
        }
        if keep_alive && (self.timer.shutting_down() || asks_close(&res)) {
            keep_alive = false;
        }
        match self.respond(res, is_head, minor, keep_alive).await {
            Ok(true) if keep_alive => Next::KeepAlive,
            Ok(_) => Next::Close { linger: linger || !self.rbuf.is_empty() },
            Err(_) => Next::Close { linger: false },
        }
    }

    /// Answers 101 and hands the connection to the app's stream (see
    /// [`Response::upgrade`]); the connection closes when the stream ends. A 101 the request
    /// did not ask for (or without a stream) becomes a 500.
    async fn switch_protocols(&mut self, res: Response, switched: Option<Arc<AtomicBool>>) -> Next {
        let Response { status, headers, body, shared } = res;
        let (Some(switched), ResponseBody::Stream(s)) = (switched, body) else {
            let err = Error::new(
                Kind::BadResponse,
                "the app answered 101 Switching Protocols to a request that cannot switch",
            );
            let res = dispatch::reject(&self.cfg, StatusCode::INTERNAL_SERVER_ERROR, &err);
            return match self.respond(res, false, Minor::One, false).await {
                Ok(_) => Next::Close { linger: true },
                Err(_) => Next::Close { linger: false },
            };
        };
        compose(
            &mut self.wbuf,
            status,
            shared.as_deref(),
            &headers,
            Out::None,
            ConnHeader::Upgrade,
            self.cfg.server_name,
        );
        if self.flush().await.is_err() {
            return Next::Close { linger: false };
        }
        switched.store(true, Ordering::Release);
        let writer = BodyWriter::new(Sink::new(self.sock.clone(), false, self.timer.handle(), self.cfg.send_timeout));
        let _ = (s.0)(writer).await;
        Next::Close { linger: false }
    }

    /// Writes (or queues) the response. `Ok(false)`: the framing forced a close.
    async fn respond(&mut self, res: Response, is_head: bool, minor: Minor, keep_alive: bool) -> std::io::Result<bool> {
        let Response { status, headers, body, shared } = res;
        let bodiless =
            status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        let conn = |keep: bool| match (keep, minor) {
            (false, _) => ConnHeader::Close,
            (true, Minor::Zero) => ConnHeader::KeepAlive,
            (true, Minor::One) => ConnHeader::Omit,
        };
        let server = self.cfg.server_name;
        match body {
            ResponseBody::Empty => {
                let f = if bodiless { Out::None } else { Out::Length(0) };
                compose(&mut self.wbuf, status, shared.as_deref(), &headers, f, conn(keep_alive), server);
                crate::pool::put_headers(headers);
            }
            ResponseBody::Bytes(b) => {
                let f = if bodiless { Out::None } else { Out::Length(b.len() as u64) };
                compose(&mut self.wbuf, status, shared.as_deref(), &headers, f, conn(keep_alive), server);
                crate::pool::put_headers(headers);
                if !is_head && !bodiless {
                    if b.len() <= COPY_BODY_MAX {
                        self.wbuf.extend_from_slice(&b);
                    } else {
                        self.timer.tickle(self.cfg.send_timeout);
                        self.sock.write_all_vectored(&mut [&self.wbuf, &b]).await?;
                        self.wbuf.clear();
                    }
                }
            }
            ResponseBody::File(f) => {
                let framing = if bodiless { Out::None } else { Out::Length(f.len) };
                compose(&mut self.wbuf, status, shared.as_deref(), &headers, framing, conn(keep_alive), server);
                crate::pool::put_headers(headers);
                if !is_head && !bodiless {
                    let timer = self.timer.handle();
                    let t = self.cfg.send_timeout;
                    timer.tickle(t);
                    self.sock.send_file(&self.wbuf, f.file.as_fd(), f.offset, f.len, &|| timer.tickle(t)).await?;
                    self.wbuf.clear();
                }
            }
            ResponseBody::Stream(s) => {
                // A stream whose length the app declared goes out with that length.
                let declared = declared_length(&headers);
                if is_head || bodiless {
                    let framing = match (bodiless, declared) {
                        (true, _) => Out::None,
                        (false, Some(n)) => Out::Length(n),
                        (false, None) => Out::Chunked,
                    };
                    compose(&mut self.wbuf, status, shared.as_deref(), &headers, framing, conn(keep_alive), server);
                    return Ok(true);
                }
                if let Some(n) = declared {
                    compose(
                        &mut self.wbuf,
                        status,
                        shared.as_deref(),
                        &headers,
                        Out::Length(n),
                        conn(keep_alive),
                        server,
                    );
                    self.flush().await?;
                    let left = Arc::new(std::sync::atomic::AtomicU64::new(n));
                    let writer = BodyWriter::new(Sink::sized(
                        self.sock.clone(),
                        left.clone(),
                        self.timer.handle(),
                        self.cfg.send_timeout,
                    ));
                    (s.0)(writer).await?;
                    // Short of the declared length: only closing tells the client.
                    return Ok(left.load(Ordering::Acquire) == 0);
                }
                let chunked = minor == Minor::One;
                let keep = keep_alive && chunked;
                let framing = if chunked { Out::Chunked } else { Out::Close };
                compose(&mut self.wbuf, status, shared.as_deref(), &headers, framing, conn(keep), server);
                self.flush().await?;
                let writer =
                    BodyWriter::new(Sink::new(self.sock.clone(), chunked, self.timer.handle(), self.cfg.send_timeout));
                (s.0)(writer).await?;
                if chunked {
                    self.wbuf.extend_from_slice(b"0\r\n\r\n");
                }
                return Ok(keep);
            }
        }
        if self.wbuf.len() >= BATCH_MAX {
            self.flush().await?;
        }
        Ok(true)
    }

    /// Writes out the send buffer.
    async fn flush(&mut self) -> std::io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        self.timer.tickle(self.cfg.send_timeout);
        // Usually the socket takes it all at once: no write future is made.
        let r = match self.sock.try_write(&self.wbuf) {
            Ok(n) if n == self.wbuf.len() => Ok(()),
            Ok(n) => self.sock.write_all(&self.wbuf[n..]).await,
            Err(e) => Err(e),
        };
        self.wbuf.clear();
        r
    }

    /// Answers an invalid request with `status`, then closes with a linger.
    async fn reject(&mut self, status: u16, err: Error) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        let res = dispatch::reject(&self.cfg, status, &err);
        if self.respond(res, false, Minor::One, false).await.is_ok() && self.flush().await.is_ok() {
            self.linger().await;
        }
    }

    /// Lingering close (see `Transport::linger`).
    async fn linger(&mut self) {
        self.sock.linger(self.cfg.linger_timeout).await;
    }
}

/// Whether the request asks for `Upgrade: h2c` with an `HTTP2-Settings` header, both named
/// in `Connection` (RFC 7540 §3.2).
fn first_upgrade(buf: &[u8], headers: &[HeaderSpan], minor: Minor) -> bool {
    if minor != Minor::One {
        return false;
    }
    let (mut upgrade, mut settings, mut conn) = (false, false, (false, false));
    for hs in headers {
        let (n, v) = (&buf[hs.name.range()], &buf[hs.value.range()]);
        if n.eq_ignore_ascii_case(b"upgrade") {
            upgrade |= has_token(v, b"h2c");
        } else if n.eq_ignore_ascii_case(b"http2-settings") {
            settings = true;
        } else if n.eq_ignore_ascii_case(b"connection") {
            conn.0 |= has_token(v, b"upgrade");
            conn.1 |= has_token(v, b"http2-settings");
        }
    }
    upgrade && settings && conn.0 && conn.1
}

/// The `Upgrade` value of an HTTP/1.1 request that may switch protocols: `Connection`
/// names `upgrade` and no body follows the head (RFC 9110 §7.8).
fn upgrade_request(buf: &[u8], h: &Head, headers: &[HeaderSpan], minor: Minor) -> Option<Span> {
    if minor != Minor::One || h.framing != Framing::None {
        return None;
    }
    let mut conn = false;
    let mut upgrade = None;
    for hs in headers {
        let n = &buf[hs.name.range()];
        if n.eq_ignore_ascii_case(b"upgrade") {
            if upgrade.is_some() {
                return None;
            }
            upgrade = Some(hs.value);
        } else if n.eq_ignore_ascii_case(b"connection") {
            conn |= has_token(&buf[hs.value.range()], b"upgrade");
        }
    }
    upgrade.filter(|v| conn && v.len > 0)
}

/// The one valid `Content-Length` of a response's headers (none if absent, invalid or
/// repeated).
fn declared_length(headers: &[(http::HeaderName, http::HeaderValue)]) -> Option<u64> {
    let mut found = None;
    for (n, v) in headers {
        if n == http::header::CONTENT_LENGTH {
            let len = std::str::from_utf8(v.as_bytes()).ok()?.parse::<u64>().ok()?;
            if found.is_some_and(|f| f != len) {
                return None;
            }
            found = Some(len);
        }
    }
    found
}

/// The app asked to close with `Connection: close`.
fn asks_close(res: &Response) -> bool {
    res.headers().any(|(n, v)| n == CONNECTION && v.as_bytes().eq_ignore_ascii_case(b"close"))
}
