//! The async side of an HTTP/1.1 connection: it does what the sans-IO [`Conn`] asks for —
//! reads and writes on the connection's transport, the app call, files and streamed
//! bodies — and keeps the connection's timer on the `Conn`'s deadline. Every decision
//! (framing, keep-alive, linger, drain, `Expect`, upgrades) is the `Conn`'s.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use http::StatusCode;

use super::conn::{body_error, head_error, Conn, Next, Returned, Send, Start, StreamFraming};
use super::reader::{Home, Reader};
use super::sink::Sink;
use crate::app::body::{Body, BodyWriter};
use crate::app::request::Request;
use crate::app::response::Response;
use crate::app::App;
use crate::dispatch::{self, AppSlot};
use crate::io::sys::PeerAddr;
use crate::io::transport::Transport;
use crate::settings::Settings;
use crate::stats::{CloseReason, OpenConn, Phase};
use crate::time::timeout::{now_ms, Timer};

/// A connection HTTP/1.1 hands over to HTTP/2 after `Upgrade: h2c` (RFC 7540 §3.2): the
/// 101 is sent; the request is to be answered on stream 1, and `rbuf` holds what the
/// client sent after it (its preface).
pub(crate) struct H2c {
    pub(crate) sock: Arc<Transport>,
    pub(crate) timer: Timer,
    pub(crate) rbuf: BytesMut,
    pub(crate) request: Request,
}

/// How serving an HTTP/1.1 connection ended.
pub(crate) enum Ended {
    /// The connection is over.
    Closed,
    /// `Upgrade: h2c`: HTTP/2 takes over (boxed: rare, and large).
    H2c(Box<H2c>),
    /// Idle, and asked to park by the timeout manager: what the connection keeps while it
    /// waits outside its task (no buffer, no request state).
    Park(Idle),
}

/// An idle HTTP/1.1 connection between requests, leaving its task.
pub(crate) struct Idle {
    pub(crate) sock: Arc<Transport>,
    pub(crate) timer: Timer,
    /// Its count among the open HTTP/1.x connections, kept while it is parked.
    pub(crate) open: OpenConn,
}

/// A file at least this long is sent without the connection's receive buffer (when it
/// need not keep it): it rarely fits the socket's send buffer at once.
const LONG_SEND: u64 = 64 * 1024;

/// The connection's I/O: what the driver's steps share.
struct Io<'a> {
    sock: &'a Arc<Transport>,
    cfg: &'a Arc<Settings>,
    timer: &'a Timer,
}

/// Serves one connection until it closes, turns into HTTP/2 (`Upgrade: h2c`: the hand-off
/// is returned) or parks while idle. `rbuf` holds the bytes already received (the server
/// read them to choose the protocol). `resumed`: a parked keep-alive connection whose
/// socket turned readable, with its count among the open connections.
pub(crate) async fn serve_http1<A: App>(
    sock: Arc<Transport>,
    rbuf: BytesMut,
    peer: PeerAddr,
    app: &A,
    cfg: Arc<Settings>,
    timer: Timer,
    resumed: Option<OpenConn>,
) -> Ended {
    // Counts the connection as HTTP/1.x until it ends or turns into HTTP/2.
    let open = resumed.unwrap_or_else(|| OpenConn::new(false, &timer));
    let _live = crate::io::pool::Live::new();
    let mut conn = Conn::new(cfg.clone(), rbuf, now_ms());
    // Where the app's futures run (its box is reused while that is cheap: `AppSlot`).
    let mut slot = AppSlot::default();
    let io = Io { sock: &sock, cfg: &cfg, timer: &timer };
    let secure = sock.tls();
    loop {
        let res = match conn.poll(now_ms()) {
            Next::Request => {
                let mut home: Option<Home> = None;
                let lend = |lent| {
                    let h: Home = Arc::new(Mutex::new(None));
                    home = Some(h.clone());
                    Body::stream(Reader::new(lent, sock.clone(), timer.handle(), cfg.read_buffer, h))
                };
                let run = |req| slot.load(dispatch::call(app, req, None));
                open.set_phase(Phase::App);
                match conn.start(timer.shutting_down(), &peer, secure.clone(), lend, run) {
                    Start::App => {
                        timer.pause();
                        let res = slot.run().await;
                        let panicked = res.is_none();
                        let res = dispatch::or_500(res, &cfg);
                        let returned = match home {
                            None => Returned::None,
                            Some(home) => match home.lock().ok().and_then(|mut g| g.take()) {
                                Some(lent) => Returned::Back(lent),
                                None => Returned::Kept,
                            },
                        };
                        if conn.app_done(returned, panicked) {
                            match io.drain(&mut conn, res, &open).await {
                                Some(res) => res,
                                None => return Ended::Closed,
                            }
                        } else {
                            res
                        }
                    }
                    Start::H2c(request) => {
                        if io.flush(&mut conn).await.is_err() {
                            return Ended::Closed;
                        }
                        open.hand_off();
                        return Ended::H2c(Box::new(H2c { sock, timer, rbuf: conn.into_rbuf(), request: *request }));
                    }
                    Start::Reject(status, err) => {
                        open.close_as(CloseReason::of_status(status.as_u16()));
                        dispatch::reject(&cfg, status, &err)
                    }
                }
            }
            Next::Flush => {
                open.set_phase(Phase::Send);
                timer.set_at(conn.poll_timeout());
                // Usually the socket takes it all at once: no write future is made.
                let buf = conn.write_buf();
                let r = match sock.try_write(buf) {
                    Ok(n) if n == buf.len() => Ok(()),
                    Ok(n) => sock.write_all(&buf[n..]).await,
                    Err(e) => Err(e),
                };
                conn.handle_written();
                if r.is_err() {
                    return Ended::Closed;
                }
                continue;
            }
            Next::Read { idle: true } => {
                open.set_phase(Phase::Idle);
                if !timer.enter_idle() {
                    open.close_as(CloseReason::Server);
                    return Ended::Closed;
                }
                timer.set_at(conn.poll_timeout());
                let r = if crate::io::pool::hold_while_idle() && conn.holds_buffers() {
                    sock.idle_read(conn.read_buf(), |_| {}, &timer).await
                } else {
                    // An idle connection holds no buffers while it waits: they go back to
                    // the thread's pool and are taken again once the socket is readable.
                    conn.release_buffers();
                    let min = cfg.read_buffer;
                    let r = sock.idle_read(conn.recv_slot(), |b| *b = crate::io::pool::take_read(min), &timer).await;
                    if let Ok(Some(_)) = r {
                        conn.reacquire_buffers();
                    }
                    r
                };
                match r {
                    Ok(Some(n)) if n > 0 && timer.leave_idle() => {
                        conn.handle_read(n, now_ms());
                        timer.set_at(conn.poll_timeout());
                    }
                    Ok(None) => {
                        conn.release_buffers();
                        // Parked with its socket alone: a body reader the app kept would
                        // still share it (then the connection waits here, asked again later).
                        if Arc::strong_count(&sock) == 1 {
                            return Ended::Park(Idle { sock, timer, open });
                        }
                    }
                    _ => return Ended::Closed,
                }
                continue;
            }
            Next::Read { idle: false } => {
                if conn.reading_head() {
                    open.set_phase(Phase::Head);
                }
                if !io.read(&mut conn).await {
                    return Ended::Closed;
                }
                continue;
            }
            Next::Reject(e) => {
                let (status, err) = head_error(e);
                open.close_as(CloseReason::of_status(status.as_u16()));
                dispatch::reject(&cfg, status, &err)
            }
            Next::Close { linger } => {
                open.close_as(if conn.peer_left() { CloseReason::Client } else { CloseReason::Server });
                open.set_phase(Phase::Send);
                if io.flush(&mut conn).await.is_ok() && linger {
                    sock.linger(cfg.linger_timeout, crate::io::transport::LINGER_HTTP1).await;
                }
                return Ended::Closed;
            }
            Next::Respond | Next::Fail(_) | Next::Done => return Ended::Closed,
        };
        open.set_phase(Phase::Send);
        match conn.respond(res, timer.shutting_down()) {
            Ok(Send::Buffered) => {}
            Ok(send) => {
                if !io.send(&mut conn, send).await {
                    return Ended::Closed;
                }
            }
            Err(err) => {
                // A 101 the request cannot switch to: 500, and the connection closes.
                let res = dispatch::reject(&cfg, StatusCode::INTERNAL_SERVER_ERROR, &err);
                match conn.respond(res, true) {
                    Ok(Send::Buffered) => {}
                    _ => return Ended::Closed,
                }
            }
        }
    }
}

impl Io<'_> {
    /// Reads the rest of a head, or of a body being drained. `false`: the connection is
    /// over (closed or failed).
    async fn read(&self, conn: &mut Conn) -> bool {
        self.timer.set_at(conn.poll_timeout());
        let r = if conn.reading_head() && !crate::io::pool::hold_while_idle() {
            // The rest of a head: unless it is there already, wait for it without the
            // receive buffer (as an idle connection waits), keeping only the bytes so far.
            match self.sock.try_read_ready(conn.read_buf()) {
                Ok(None) => {
                    conn.release_read_buffer_keeping_head();
                    let min = self.cfg.read_buffer;
                    self.sock.read_when_ready(conn.recv_slot(), |part| Conn::refill(part, min)).await
                }
                Ok(Some(n)) => Ok(n),
                Err(e) => Err(e),
            }
        } else {
            self.sock.read(conn.read_buf()).await
        };
        match r {
            Ok(n) if n > 0 => {
                conn.handle_read(n, now_ms());
                self.timer.set_at(conn.poll_timeout());
                true
            }
            _ => false,
        }
    }

    /// Drains what the app left of its body (reading as the `Conn` asks), then returns the
    /// answer: `res`, or the body's error answer. `None`: the connection is over.
    async fn drain(&self, conn: &mut Conn, res: Response, open: &OpenConn) -> Option<Response> {
        loop {
            match conn.poll(now_ms()) {
                Next::Respond => return Some(res),
                Next::Fail(status) => {
                    open.close_as(CloseReason::of_status(status));
                    let (status, err) = body_error(status);
                    return Some(dispatch::reject(self.cfg, status, &err));
                }
                Next::Read { .. } => {
                    if !self.read(conn).await {
                        return None;
                    }
                }
                Next::Close { linger } => {
                    drop(res);
                    open.close_as(if conn.peer_left() { CloseReason::Client } else { CloseReason::Server });
                    if self.flush(conn).await.is_ok() && linger {
                        self.sock.linger(self.cfg.linger_timeout, crate::io::transport::LINGER_HTTP1).await;
                    }
                    return None;
                }
                _ => return None,
            }
        }
    }

    /// Sends what follows a response's head (the head is in the write buffer), then reports
    /// the response's end to `finish` (complete unless a streamed body stopped short or a
    /// write failed). `false`: the connection is over.
    async fn send(&self, conn: &mut Conn, mut send: Send) -> bool {
        let finish = match &mut send {
            Send::File(f) => f.finish.take(),
            Send::Stream(s, _) => s.1.take(),
            _ => None,
        };
        let whole = self.send_body(conn, send).await;
        if let Some(f) = finish {
            f.report(whole == Some(true));
        }
        whole.is_some()
    }

    /// [`send`](Self::send)'s work: whether the response went out whole, `None` when the
    /// connection is over.
    async fn send_body(&self, conn: &mut Conn, send: Send) -> Option<bool> {
        let send_timeout = self.cfg.send_timeout;
        match send {
            Send::Buffered => Some(true),
            Send::Bytes(b) => {
                self.timer.tickle(send_timeout);
                let r = self.sock.write_all_vectored(&mut [conn.write_buf(), &b]).await;
                conn.handle_written();
                r.ok().map(|()| true)
            }
            Send::File(f) => {
                // A long file may hold the connection for long (a slow reader): it is sent
                // without the receive buffer when nothing is buffered and the worker has
                // more connections than its pool keeps buffers for, as an idle connection
                // waits (the next read takes one from the pool).
                if f.len >= LONG_SEND && conn.buffered() == 0 && !crate::io::pool::hold_while_idle() {
                    conn.release_read_buffer();
                }
                let timer = self.timer.handle();
                timer.tickle(send_timeout);
                let r = self
                    .sock
                    .send_file(conn.write_buf(), f.file.as_fd(), f.offset, f.len, &|| timer.tickle(send_timeout))
                    .await;
                conn.handle_written();
                r.ok().map(|()| true)
            }
            Send::Stream(s, framing) => {
                if self.flush(conn).await.is_err() {
                    return None;
                }
                let handle = self.timer.handle();
                let (sink, left) = match framing {
                    StreamFraming::Sized(n) => {
                        let left = Arc::new(AtomicU64::new(n));
                        (Sink::sized(self.sock.clone(), left.clone(), handle, send_timeout), Some(left))
                    }
                    StreamFraming::Chunked => (Sink::new(self.sock.clone(), true, handle, send_timeout), None),
                    StreamFraming::Close => (Sink::new(self.sock.clone(), false, handle, send_timeout), None),
                };
                let r = (s.0)(BodyWriter::new(sink)).await;
                let complete = left.is_none_or(|l| l.load(Ordering::Acquire) == 0);
                let whole = r.is_ok() && complete;
                conn.stream_done(framing, r.map(|()| complete).map_err(|_| ()));
                Some(whole)
            }
            Send::Switch(s, switched) => {
                if self.flush(conn).await.is_err() {
                    return None;
                }
                switched.store(true, Ordering::Release);
                let sink = Sink::new(self.sock.clone(), false, self.timer.handle(), send_timeout);
                let r = (s.0)(BodyWriter::new(sink)).await;
                Some(r.is_ok())
            }
        }
    }

    /// Sends the write buffer (within the send timeout).
    async fn flush(&self, conn: &mut Conn) -> std::io::Result<()> {
        if conn.write_buf().is_empty() {
            return Ok(());
        }
        self.timer.tickle(self.cfg.send_timeout);
        let r = self.sock.write_all(conn.write_buf()).await;
        conn.handle_written();
        r
    }
}
