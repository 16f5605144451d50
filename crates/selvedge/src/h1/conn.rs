//! One HTTP/1.1 connection as a sans-IO state machine: bytes and the time go in
//! ([`Conn::handle_read`], `now` arguments), requests come out ([`Next::Request`]),
//! responses go in ([`Conn::respond`]) and bytes come out ([`Conn::write_buf`]). It never
//! touches a socket or the clock; the async driver (`driver.rs`) does the reads, writes and
//! app calls it asks for, and arms the connection's timer with [`Conn::deadline`]. Unit
//! tests drive it byte by byte (`tests.rs`).
//!
//! Modelled on hyper's `proto::h1::conn` (`Reading` / keep-alive state and the decision to
//! keep the connection made in one place) and quinn's `handle_*` / `poll_*` with `now`
//! passed in:
//!
//! ```text
//!            +------- pipelined head already buffered -------+
//!            v                                               |
//!   Head --(head)--> App --(app_done)--+--> Respond --(respond)--+--> Head   (keep-alive)
//!     ^                                |       ^                 +--> Closed (close, linger?)
//!     |                                v       |                 |
//!     |                              Drain ----+  (what is       +--> Drain, answered
//!     |                                            buffered)           |  (the rest of the
//!     +----------------------------------------------------------------+   unread body)
//!     +--- Upgrade: h2c: 101, then the connection goes to HTTP/2 (Handoff)
//! ```
//!
//! - **Pipelining**: while the receive buffer holds another complete head, its response is
//!   appended to the write buffer; the batch goes out in one write before the next read
//!   (or once it reaches [`BATCH_MAX`]).
//! - **Bodies**: the receive buffer is lent with the body (`Lent`) to the app's reader and
//!   comes back when the app is done. What the app left unread is drained (up to
//!   `max_drain`) so the connection can be kept, else it is closed with a linger: what is
//!   already buffered before the answer (a body that fails there turns the answer into its
//!   400/413), the rest after it, so an answer never waits for a slow client's body. The
//!   drain after the answer is held to the body clock (`min_body_rate`, with its grace):
//!   a client too slow, over `max_drain` or with a broken body has its connection closed.
//! - **Keep-alive**: HTTP/1.1 unless `Connection: close`; HTTP/1.0 only with `Connection:
//!   keep-alive`; never after the app's own `Connection: close`, during shutdown, after a
//!   stream of unknown length to HTTP/1.0, a stream shorter than its declared length, a
//!   panic, or an unread body; a 101 ends HTTP/1.1 on the connection.
//! - **Errors in the head** get their status (400, 413, 414, 417, 431, 501, 505) and a
//!   lingering close: half-close, drain for a moment, then close, so the client reads the
//!   answer.
//! - **Deadlines**: a head must be complete within `header_timeout` of its first byte
//!   (reads do not extend it); an idle keep-alive connection waits `idle_timeout`; a write
//!   `send_timeout`; a drained body has the body deadline; none while the app runs.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::BytesMut;
use http::header::CONNECTION;
use http::{Method, StatusCode, Version};

use super::body::Decoder;
use super::inbound::{Failure, Inbound, Lent, Step};
use super::parse::{self, Framing, Head, Minor, ParseError};
use super::write::{compose, ConnHeader, Framing as Out};
use crate::app::body::Body;
use crate::app::request::{Request, RequestHead};
use crate::app::response::{FileBody, Response, ResponseBody, StreamBody};
use crate::error::{Error, Kind};
use crate::io::sys::PeerAddr;
use crate::message::{has_token, HeaderSpan, Span};
use crate::settings::Settings;
use crate::time::date::SharedDate;
use crate::time::rate::BodyRule;
use crate::time::timeout::NO_DEADLINE;

/// Bodies up to this size are copied into the write buffer (one write for head and body);
/// larger ones go out with `writev` straight from their own memory.
pub(crate) const COPY_BODY_MAX: usize = 16 * 1024;
/// A pipelined batch is flushed once it reaches this size.
pub(crate) const BATCH_MAX: usize = 64 * 1024;

/// The `Upgrade: h2c` answer (RFC 7540 §3.2).
const SWITCH_H2C: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";

/// What the connection needs next; see [`Conn::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// A complete request head is buffered: [`Conn::start`] it.
    Request,
    /// Send all of [`Conn::write_buf`], then [`Conn::handle_written`].
    Flush,
    /// Read into [`Conn::read_buf`], then [`Conn::handle_read`]. `idle`: between requests
    /// (the driver may give the buffers back while it waits).
    Read { idle: bool },
    /// The head is invalid: answer [`head_error`]'s error ([`Conn::respond`]); the
    /// connection then closes with a linger.
    Reject(ParseError),
    /// The unread body is drained: [`Conn::respond`] now.
    Respond,
    /// The body failed while draining: answer this status instead of the app's response
    /// ([`body_error`]).
    Fail(u16),
    /// Send the write buffer, then close: `linger` when the client may still be sending.
    Close { linger: bool },
    /// The connection ended without a word (the peer left, or its body broke).
    Done,
}

/// What [`Conn::start`] made of a head.
#[derive(Debug)]
pub(crate) enum Start {
    /// The request went to the app (`run`).
    App,
    /// `Upgrade: h2c` accepted: the 101 is in the write buffer. Send it, then hand the
    /// connection and this request (for stream 1) to HTTP/2 ([`Conn::into_rbuf`]).
    H2c(Box<Request>),
    /// The request cannot be served (an unknown method form, a body over the limit):
    /// answer the error; the connection then closes with a linger.
    Reject(StatusCode, Error),
}

/// The error a [`ParseError`] is answered with, and its status.
pub(crate) fn head_error(e: ParseError) -> (StatusCode, Error) {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let err = match e {
        ParseError::BadRequest(why) => Error::new(Kind::BadRequest, why),
        _ => Error::new(Kind::BadRequest, "invalid request head"),
    };
    (status, err.with_status(status.as_u16()))
}

/// The error a body that failed while draining is answered with ([`Next::Fail`]).
pub(crate) fn body_error(status: u16) -> (StatusCode, Error) {
    let err = Error::new(Kind::Body, "invalid request body").with_status(status);
    (StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST), err)
}

/// The app's request body, as the driver found it after the app.
#[derive(Debug)]
pub(crate) enum Returned {
    /// The request had none.
    None,
    /// The app kept it beyond its response (a tunnel, or a leak): the connection cannot go
    /// on.
    Kept,
    /// It came back.
    Back(Lent),
}

/// What the driver sends after [`Conn::respond`] put the head in the write buffer.
#[derive(Debug)]
pub(crate) enum Send {
    /// Nothing more: the body (if any) is in the write buffer too.
    Buffered,
    /// The write buffer, then these bytes (one `writev`); then [`Conn::handle_written`].
    Bytes(bytes::Bytes),
    /// The write buffer, then `len` bytes of the file (`sendfile`); then
    /// [`Conn::handle_written`].
    File(FileBody),
    /// Flush the head, then the app writes the body (see [`StreamFraming`]); then
    /// [`Conn::stream_done`].
    Stream(StreamBody, StreamFraming),
    /// 101 Switching Protocols: flush it, raise the flag (the request body becomes the
    /// client's bytes), then the app's stream runs the other protocol until it ends the
    /// connection.
    Switch(StreamBody, Arc<AtomicBool>),
}

/// How a streamed body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamFraming {
    /// `Content-Length: n` (the app declared it): writing past it fails, stopping short
    /// closes the connection.
    Sized(u64),
    /// Chunked (HTTP/1.1).
    Chunked,
    /// Until the connection closes (HTTP/1.0).
    Close,
}

/// How the connection reads; see the module's diagram.
#[derive(Debug)]
enum Reading {
    /// Waiting for a head; `since`: when its first byte arrived (its deadline runs from
    /// there).
    Head { since: Option<u64> },
    /// The app has the request (and the receive buffer, if it has the body).
    App,
    /// Reading and discarding what the app left of its body, `drained` bytes so far;
    /// `answered`: after the response (then the next head follows, or the close).
    Drain { body: Box<Inbound>, drained: u64, answered: bool },
    /// The app's response is due.
    Respond,
    /// No more requests: close once the write buffer is out.
    Closed { linger: bool },
    /// Handed to HTTP/2 after the 101.
    Handoff,
}

/// What the response to the current request depends on.
#[derive(Debug, Clone, Copy)]
struct Current {
    minor: Minor,
    is_head: bool,
    keep_alive: bool,
    /// Close with a linger: the client may still be sending.
    linger: bool,
}

/// One HTTP/1.1 connection; see the module's text.
#[derive(Debug)]
pub(crate) struct Conn {
    cfg: Arc<Settings>,
    /// Received bytes not yet consumed (lent to the app's reader with a body).
    rbuf: BytesMut,
    /// Bytes to send.
    wbuf: Vec<u8>,
    /// The header lines of the head being parsed (moved into its request).
    headers: Vec<HeaderSpan>,
    /// The last head parsed (for [`start`](Self::start)).
    head: Option<Head>,
    reading: Reading,
    cur: Current,
    /// The flag an upgradable request's tunnel waits on (raised after the 101).
    switched: Option<Arc<AtomicBool>>,
    /// No request has been read yet (its wait is the header timeout, not the idle one).
    fresh: bool,
    deadline: u64,
    /// The unread rest of the current request's body, to drain after its answer.
    unread: Option<(Box<Inbound>, u64)>,
    /// The client closed (or broke its body, or a write to it failed): why the connection
    /// closes, if it does.
    peer_left: bool,
}

impl Conn {
    /// A connection whose first bytes (`rbuf`, maybe empty) arrived at `now`.
    pub(crate) fn new(cfg: Arc<Settings>, rbuf: BytesMut, now: u64) -> Conn {
        let since = (!rbuf.is_empty()).then_some(now);
        let deadline = match since {
            Some(t) => t.saturating_add(cfg.header_timeout.as_millis() as u64),
            None => NO_DEADLINE,
        };
        Conn {
            cfg,
            rbuf,
            wbuf: Vec::new(),
            headers: Vec::new(),
            head: None,
            reading: Reading::Head { since },
            cur: Current { minor: Minor::One, is_head: false, keep_alive: true, linger: false },
            switched: None,
            fresh: true,
            peer_left: false,
            deadline,
            unread: None,
        }
    }

    /// When the connection must be closed if it has not moved on ([`NO_DEADLINE`]: no
    /// deadline, while the app runs).
    #[inline]
    pub(crate) fn poll_timeout(&self) -> u64 {
        self.deadline
    }

    /// The bytes to send.
    #[inline]
    pub(crate) fn write_buf(&self) -> &[u8] {
        &self.wbuf
    }

    /// All of [`write_buf`](Self::write_buf) was sent.
    #[inline]
    pub(crate) fn handle_written(&mut self) {
        self.wbuf.clear();
    }

    /// Where the next read goes, with room for it (at least 512 bytes: the buffer grows by
    /// `read_buffer` at a time, up to the head limit).
    #[inline]
    pub(crate) fn read_buf(&mut self) -> &mut BytesMut {
        if self.rbuf.capacity() - self.rbuf.len() < 512 {
            self.rbuf.reserve(self.cfg.read_buffer);
        }
        &mut self.rbuf
    }

    /// Whether the connection holds its buffers (it may keep them while it waits).
    #[inline]
    pub(crate) fn holds_buffers(&self) -> bool {
        self.rbuf.capacity() > 0
    }

    /// The empty receive buffer's slot, for a read that takes a buffer only once the socket
    /// is readable (after [`release_buffers`](Self::release_buffers)).
    #[inline]
    pub(crate) fn recv_slot(&mut self) -> &mut BytesMut {
        &mut self.rbuf
    }

    /// Gives the (empty) buffers back to the thread's pool while the connection waits for
    /// its next request, so an idle connection holds none.
    pub(crate) fn release_buffers(&mut self) {
        crate::io::pool::put_read(std::mem::take(&mut self.rbuf));
        crate::io::pool::put_write(std::mem::take(&mut self.wbuf));
    }

    /// Gives the (empty) receive buffer back to the thread's pool while a long response
    /// goes out; the next read takes one again ([`read_buf`](Self::read_buf) reserves).
    pub(crate) fn release_read_buffer(&mut self) {
        debug_assert!(self.rbuf.is_empty());
        crate::io::pool::put_read(std::mem::take(&mut self.rbuf));
    }

    /// Moves the part of a head received so far out of the receive buffer into an
    /// allocation of its own size and gives the buffer back to the thread's pool, while
    /// the connection waits for the rest: a client that sends its head a little at a time
    /// (slowloris) holds tens of bytes, not the buffer. The read that follows takes a
    /// buffer again once the socket is readable ([`refill`](Self::refill)).
    pub(crate) fn release_read_buffer_keeping_head(&mut self) {
        let part = BytesMut::from(&self.rbuf[..]);
        let mut buf = std::mem::replace(&mut self.rbuf, part);
        buf.clear();
        crate::io::pool::put_read(buf);
    }

    /// After [`release_read_buffer_keeping_head`](Self::release_read_buffer_keeping_head),
    /// as the socket turns readable: `part` (the receive slot) goes into a buffer from the
    /// thread's pool with room for a read.
    pub(crate) fn refill(part: &mut BytesMut, min: usize) {
        // (A pool buffer as it is, unless the part needs more room than `min`.)
        let mut buf = crate::io::pool::take_read(min.max(part.len() + 512));
        buf.extend_from_slice(part);
        *part = buf;
    }

    /// Takes a write buffer again after [`release_buffers`](Self::release_buffers).
    pub(crate) fn reacquire_buffers(&mut self) {
        self.wbuf = crate::io::pool::take_write();
    }

    /// Bytes received and not yet consumed (while the connection holds the receive buffer).
    pub(crate) fn buffered(&self) -> usize {
        self.rbuf.len()
    }

    /// Whether a request head is being received (its first bytes are in).
    #[inline]
    pub(crate) fn reading_head(&self) -> bool {
        matches!(self.reading, Reading::Head { since: Some(_) })
    }

    /// Whether the client left (closed, broke its body, or could not be written to): the
    /// connection closes for that.
    #[inline]
    pub(crate) fn peer_left(&self) -> bool {
        self.peer_left
    }

    /// The head [`poll`](Self::poll) found, before [`start`](Self::start) takes it.
    pub(crate) fn pending_head(&self) -> Option<&Head> {
        self.head.as_ref()
    }

    /// What is left of the receive buffer (the client's first HTTP/2 bytes after `Upgrade:
    /// h2c`).
    pub(crate) fn into_rbuf(self) -> BytesMut {
        self.rbuf
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf) at `now`; 0: the peer closed.
    pub(crate) fn handle_read(&mut self, n: usize, now: u64) {
        match &mut self.reading {
            Reading::Head { since } => {
                if n == 0 {
                    self.peer_left = true;
                    self.reading = Reading::Closed { linger: false };
                } else if since.is_none() {
                    *since = Some(now);
                    self.deadline = now.saturating_add(self.cfg.header_timeout.as_millis() as u64);
                }
            }
            Reading::Drain { body, .. } => {
                // A failure (the peer closed mid-body) is recorded in the body: the next
                // step reports it.
                let _ = body.handle_read(n, now);
                self.deadline = body.deadline();
            }
            _ => {}
        }
    }

    /// What the connection needs next, at `now`.
    #[inline]
    pub(crate) fn poll(&mut self, now: u64) -> Next {
        match &mut self.reading {
            Reading::Head { since } => {
                let mut since = *since;
                if self.wbuf.len() < BATCH_MAX && !self.rbuf.is_empty() {
                    if let Some(next) = self.parse() {
                        return next;
                    }
                }
                if !self.wbuf.is_empty() {
                    self.deadline = now.saturating_add(self.cfg.send_timeout.as_millis() as u64);
                    return Next::Flush;
                }
                let idle = self.rbuf.is_empty();
                if since.is_none() && !idle {
                    // Bytes of the next head came with the last request (pipelined, or a
                    // leading empty line): its header clock starts now, not the idle one.
                    since = Some(now);
                    self.reading = Reading::Head { since };
                }
                self.deadline = match since {
                    Some(t) => t.saturating_add(self.cfg.header_timeout.as_millis() as u64),
                    None => {
                        let wait = if self.fresh { self.cfg.header_timeout } else { self.cfg.idle_timeout };
                        now.saturating_add(wait.as_millis() as u64)
                    }
                };
                Next::Read { idle }
            }
            Reading::Drain { .. } => self.drain(now),
            Reading::Respond => Next::Respond,
            Reading::Closed { linger } => {
                let linger = *linger;
                if !self.wbuf.is_empty() {
                    self.deadline = now.saturating_add(self.cfg.send_timeout.as_millis() as u64);
                }
                Next::Close { linger }
            }
            Reading::App | Reading::Handoff => Next::Done,
        }
    }

    /// Parses the buffered head: `Some` if it is complete or invalid.
    #[inline(never)]
    fn parse(&mut self) -> Option<Next> {
        if self.headers.capacity() == 0 {
            self.headers = crate::io::pool::take_spans();
        }
        match parse::parse(&self.rbuf, &self.cfg.limits, &mut self.headers) {
            Ok(parse::Status::Complete(h)) => {
                self.head = Some(h);
                Some(Next::Request)
            }
            Ok(parse::Status::Partial) => None,
            Err(e) => {
                // An invalid head: its answer, then a lingering close.
                self.closing(Minor::One);
                Some(Next::Reject(e))
            }
        }
    }

    /// The current request's answer closes the connection with a linger (an error answer).
    fn closing(&mut self, minor: Minor) {
        self.cur = Current { minor, is_head: false, keep_alive: false, linger: true };
        self.reading = Reading::Respond;
    }

    /// Takes the head [`poll`](Self::poll) found off the receive buffer and makes its
    /// request, from `peer` (`secure`: over TLS), and gives it to `run` (the app). A
    /// request body is lent, with the receive buffer, to `lend` (which makes the app's
    /// reader of it); the reader gives it back. `shutting_down`: the server is going away
    /// (no HTTP/2 upgrade then).
    pub(crate) fn start(
        &mut self,
        shutting_down: bool,
        peer: &PeerAddr,
        secure: Option<crate::io::transport::Tls>,
        lend: impl FnOnce(Lent) -> Body,
        run: impl FnOnce(Request),
    ) -> Start {
        self.fresh = false;
        let Some(h) = self.head.take() else {
            self.closing(Minor::One);
            return Start::Reject(StatusCode::BAD_REQUEST, Error::new(Kind::BadRequest, "no request"));
        };
        let minor = h.minor;
        let Ok(method) = crate::message::method(&self.rbuf[h.method.range()]) else {
            self.closing(minor);
            return Start::Reject(
                StatusCode::BAD_REQUEST,
                Error::new(Kind::BadRequest, "invalid method").with_status(400),
            );
        };
        let keep_alive = match minor {
            Minor::One => !h.conn_close,
            Minor::Zero => h.conn_keep_alive && !h.conn_close,
        };
        self.cur = Current { minor, is_head: method == Method::HEAD, keep_alive, linger: false };
        // Both kinds of upgrade need `Connection: upgrade`, which the parser noted.
        let h2c = h.conn_upgrade && h.framing == Framing::None && wants_h2c(&self.rbuf, &self.headers, minor);
        let upgrade = if h2c || !h.conn_upgrade { None } else { upgrade_request(&self.rbuf, &h, &self.headers, minor) };
        // An upgrade request's "body" is the connection after a 101, if the app switches.
        self.switched = upgrade.map(|_| Arc::new(AtomicBool::new(false)));
        let decoder = match h.framing {
            Framing::None => self.switched.as_ref().map(|s| Decoder::tunnel(s.clone(), self.cfg.body)),
            Framing::Length(n) => match Decoder::length(n, self.cfg.body) {
                Ok(d) => Some(d),
                Err(_) => {
                    self.closing(minor);
                    let err = Error::new(Kind::Body, "request body over the limit").with_status(413);
                    return Start::Reject(StatusCode::PAYLOAD_TOO_LARGE, err);
                }
            },
            Framing::Chunked => Some(Decoder::chunked(self.cfg.body)),
        };
        let buf = self.rbuf.split_to(h.len).freeze();
        let headers = std::mem::take(&mut self.headers);
        if h2c && !shutting_down {
            // `Upgrade: h2c` (RFC 7540 §3.2): 101, then HTTP/2, the request on stream 1.
            self.wbuf.extend_from_slice(SWITCH_H2C);
            self.reading = Reading::Handoff;
            let head = RequestHead {
                buf,
                method,
                target: h.target,
                path: h.path,
                query: h.query,
                authority: h.authority,
                headers,
                upgrade,
            };
            return Start::H2c(Box::new(Request::new(head, Version::HTTP_2, peer.clone(), secure, Body::empty())));
        }
        self.reading = Reading::App;
        self.deadline = NO_DEADLINE;
        let body = match decoder {
            None => Body::empty(),
            Some(d) => {
                let rule = BodyRule {
                    timeout: self.cfg.body_timeout.as_millis() as u64,
                    min_rate: self.cfg.min_body_rate,
                    grace: self.cfg.body_rate_grace.as_millis() as u64,
                };
                let inbound = Inbound::new(d, h.expect_continue && minor == Minor::One, rule);
                lend(Lent { inbound, buf: std::mem::take(&mut self.rbuf) })
            }
        };
        // Built where `run` takes it: the request is moved once, into the app's future.
        run(Request {
            buf,
            method,
            target: h.target,
            path: h.path,
            query: h.query,
            authority: h.authority,
            headers,
            version: if minor == Minor::One { Version::HTTP_11 } else { Version::HTTP_10 },
            peer: peer.clone(),
            body,
            secure,
            upgrade,
        });
        Start::App
    }

    /// The app answered (`panicked`: with a panic) and its body is as `body` says. `true`:
    /// [`poll`](Self::poll) first drains what it left unread (that keeps the connection) or
    /// closes, and says when to [`respond`](Self::respond); `false`: respond now.
    pub(crate) fn app_done(&mut self, body: Returned, panicked: bool) -> bool {
        self.reading = Reading::Respond;
        if panicked {
            self.cur.keep_alive = false;
        }
        match body {
            Returned::None => {}
            Returned::Kept => {
                self.cur.keep_alive = false;
                self.cur.linger = true;
            }
            Returned::Back(Lent { inbound, buf }) => {
                self.rbuf = buf;
                if inbound.failed.is_none() && !inbound.decoder.is_done() {
                    let too_much = inbound.decoder.remaining().is_some_and(|r| r > self.cfg.max_drain);
                    if inbound.continue_pending || too_much {
                        // The client waits for a 100 it will not get, or there is too much
                        // to read: close (the client may still be sending).
                        self.cur.keep_alive = false;
                        self.cur.linger = true;
                    } else {
                        self.reading = Reading::Drain { body: Box::new(inbound), drained: 0, answered: false };
                        return true;
                    }
                }
                self.body_failed(inbound.failed);
                return !matches!(self.reading, Reading::Respond);
            }
        }
        false
    }

    /// Applies how the body failed (if it did) to the connection.
    fn body_failed(&mut self, failed: Option<Failure>) {
        match failed {
            None => {}
            Some(Failure::Broken) => {
                self.peer_left = true;
                self.reading = Reading::Closed { linger: false };
            }
            Some(Failure::Status(_)) => {
                self.cur.keep_alive = false;
                self.cur.linger = true;
            }
        }
    }

    /// One step of the drain: discard what is buffered; read more, respond, or fail.
    /// Before the answer it only takes what is buffered: when the body needs more bytes,
    /// the answer goes first and the rest is drained after it.
    #[inline(never)]
    fn drain(&mut self, now: u64) -> Next {
        let Reading::Drain { body, drained, answered } = &mut self.reading else { return Next::Respond };
        let answered = *answered;
        loop {
            match body.decode(&mut self.rbuf) {
                Some(Step::Data(b)) => {
                    *drained += b.len() as u64;
                    if *drained > self.cfg.max_drain {
                        if answered {
                            self.reading = Reading::Closed { linger: true };
                            return Next::Close { linger: true };
                        }
                        self.cur.keep_alive = false;
                        self.cur.linger = true;
                        self.reading = Reading::Respond;
                        return Next::Respond;
                    }
                }
                Some(Step::End) => {
                    if answered {
                        self.reading = Reading::Head { since: None };
                        return self.poll(now);
                    }
                    self.reading = Reading::Respond;
                    return Next::Respond;
                }
                Some(Step::Failed(_)) => {
                    let failed = body.failed;
                    if answered {
                        // Too late for its 400/413: the connection just ends.
                        let linger = matches!(failed, Some(Failure::Status(_)));
                        self.reading = Reading::Closed { linger };
                        return Next::Close { linger };
                    }
                    self.reading = Reading::Respond;
                    self.body_failed(failed);
                    return match failed {
                        Some(Failure::Status(s)) => Next::Fail(s),
                        _ => Next::Close { linger: false },
                    };
                }
                Some(Step::Continue | Step::Read) | None => {
                    if !answered {
                        // The answer goes out now; the rest is drained after it.
                        let Reading::Drain { body, drained, .. } =
                            std::mem::replace(&mut self.reading, Reading::Respond)
                        else {
                            unreachable!()
                        };
                        self.unread = Some((body, drained));
                        return Next::Respond;
                    }
                    if !self.wbuf.is_empty() {
                        self.deadline = now.saturating_add(self.cfg.send_timeout.as_millis() as u64);
                        return Next::Flush;
                    }
                    // The 100 was never owed here (`app_done` closes instead).
                    let _ = body.wait(now);
                    self.deadline = body.deadline();
                    if self.rbuf.capacity() - self.rbuf.len() < 1024 {
                        self.rbuf.reserve(self.cfg.read_buffer.max(4096));
                    }
                    return Next::Read { idle: false };
                }
            }
        }
    }

    /// Puts the response's head (and a small body) in the write buffer and says what the
    /// driver sends after it. `shutting_down`: the server is going away (the answer says
    /// `Connection: close`).
    ///
    /// # Errors
    /// A 101 to a request that cannot switch protocols (or without a stream): the driver
    /// answers this error instead (the connection then closes).
    pub(crate) fn respond(&mut self, res: Response, shutting_down: bool) -> Result<Send, Error> {
        let cur = &mut self.cur;
        if cur.keep_alive && (shutting_down || asks_close(&res)) {
            cur.keep_alive = false;
        }
        let Response { status, headers, body, shared } = res;
        let server = self.cfg.server_name;
        let shared = shared.as_deref();
        if status == StatusCode::SWITCHING_PROTOCOLS {
            let (Some(flag), ResponseBody::Stream(s)) = (self.switched.take(), body) else {
                self.closing(Minor::One);
                return Err(Error::new(
                    Kind::BadResponse,
                    "the app answered 101 Switching Protocols to a request that cannot switch",
                ));
            };
            compose(&mut self.wbuf, status, shared, &headers, Out::None, ConnHeader::Upgrade, server, &SharedDate);
            self.reading = Reading::Closed { linger: false };
            return Ok(Send::Switch(s, flag));
        }
        let cur = *cur;
        let bodiless = crate::message::bodiless(status);
        let conn = |keep: bool| match (keep, cur.minor) {
            (false, _) => ConnHeader::Close,
            (true, Minor::Zero) => ConnHeader::KeepAlive,
            (true, Minor::One) => ConnHeader::Omit,
        };
        let send = match body {
            ResponseBody::Empty => {
                let f = if bodiless { Out::None } else { Out::Length(0) };
                compose(&mut self.wbuf, status, shared, &headers, f, conn(cur.keep_alive), server, &SharedDate);
                Send::Buffered
            }
            ResponseBody::Bytes(b) => {
                let f = if bodiless { Out::None } else { Out::Length(b.len() as u64) };
                compose(&mut self.wbuf, status, shared, &headers, f, conn(cur.keep_alive), server, &SharedDate);
                if cur.is_head || bodiless {
                    Send::Buffered
                } else if b.len() <= COPY_BODY_MAX {
                    self.wbuf.extend_from_slice(&b);
                    Send::Buffered
                } else {
                    Send::Bytes(b)
                }
            }
            ResponseBody::File(mut f) => {
                let framing = if bodiless { Out::None } else { Out::Length(f.len) };
                compose(&mut self.wbuf, status, shared, &headers, framing, conn(cur.keep_alive), server, &SharedDate);
                if cur.is_head || bodiless {
                    if let Some(fin) = f.finish.take() {
                        fin.report(true);
                    }
                    Send::Buffered
                } else {
                    Send::File(f)
                }
            }
            ResponseBody::Stream(mut s) => {
                // A stream whose length the app declared goes out with that length.
                let declared = declared_length(&headers);
                if cur.is_head || bodiless {
                    if let Some(fin) = s.1.take() {
                        fin.report(true);
                    }
                    let framing = match (bodiless, declared) {
                        (true, _) => Out::None,
                        (false, Some(n)) => Out::Length(n),
                        (false, None) => Out::Chunked,
                    };
                    compose(
                        &mut self.wbuf,
                        status,
                        shared,
                        &headers,
                        framing,
                        conn(cur.keep_alive),
                        server,
                        &SharedDate,
                    );
                    Send::Buffered
                } else if let Some(n) = declared {
                    compose(
                        &mut self.wbuf,
                        status,
                        shared,
                        &headers,
                        Out::Length(n),
                        conn(cur.keep_alive),
                        server,
                        &SharedDate,
                    );
                    Send::Stream(s, StreamFraming::Sized(n))
                } else if cur.minor == Minor::One {
                    compose(
                        &mut self.wbuf,
                        status,
                        shared,
                        &headers,
                        Out::Chunked,
                        conn(cur.keep_alive),
                        server,
                        &SharedDate,
                    );
                    Send::Stream(s, StreamFraming::Chunked)
                } else {
                    self.cur.keep_alive = false;
                    compose(&mut self.wbuf, status, shared, &headers, Out::Close, conn(false), server, &SharedDate);
                    Send::Stream(s, StreamFraming::Close)
                }
            }
        };
        crate::io::pool::put_headers(headers);
        self.switched = None;
        self.next_request();
        Ok(send)
    }

    /// A streamed body ended: `Ok(complete)` when the app's stream finished (`complete`:
    /// all of a declared length was written), `Err` when it failed (a write failed: the
    /// connection is gone). A stream short of its declared length leaves the connection
    /// unusable: only closing tells the client.
    pub(crate) fn stream_done(&mut self, framing: StreamFraming, outcome: Result<bool, ()>) {
        match outcome {
            Err(()) => {
                self.peer_left = true;
                self.reading = Reading::Closed { linger: false };
            }
            Ok(true) => {
                if framing == StreamFraming::Chunked {
                    self.wbuf.extend_from_slice(b"0\r\n\r\n");
                }
            }
            Ok(false) => {
                self.cur.keep_alive = false;
                self.next_request();
            }
        }
    }

    /// After the response: the rest of an unread body, the next head, or the close.
    fn next_request(&mut self) {
        let unread = self.unread.take();
        self.reading = if self.cur.keep_alive {
            match unread {
                None => Reading::Head { since: None },
                Some((body, drained)) => Reading::Drain { body, drained, answered: true },
            }
        } else {
            // Unread bytes in the buffer or a body unread: the client is still sending.
            let unread = unread.is_some() || matches!(self.reading, Reading::Drain { .. });
            Reading::Closed { linger: self.cur.linger || unread || !self.rbuf.is_empty() }
        };
    }
}

/// Whether the request asks for `Upgrade: h2c` with an `HTTP2-Settings` header, both named
/// in `Connection` (RFC 7540 §3.2).
fn wants_h2c(buf: &[u8], headers: &[HeaderSpan], minor: Minor) -> bool {
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
            let len = crate::message::parse_decimal(v.as_bytes())?;
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
