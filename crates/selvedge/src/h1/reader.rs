//! The request-body reader an app holds: decodes the body straight out of the connection's
//! receive buffer and reads more from the socket as needed, enforcing the body timeout and
//! minimum rate. When the app drops it, its state (and so the receive buffer, with any
//! pipelined bytes after the body) goes back to the connection.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

use super::body::{BodyError, Decoded, Decoder};
use crate::body::BodySource;
use crate::error::{Error, Kind};
use crate::settings::Settings;
use crate::time::timeout::{now_ms, TimerHandle};
use crate::transport::Transport;

/// Where a finished or dropped reader leaves its state for the connection.
pub(crate) type Home = Arc<Mutex<Option<State>>>;

/// What happened to the body, as the connection needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Malformed or oversized: answer with this status and close.
    Status(u16),
    /// The socket failed or closed, or the client was too slow: just close.
    Broken,
}

/// The reader's state: the connection's socket and receive buffer, and the decoder.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) sock: Arc<Transport>,
    pub(crate) buf: BytesMut,
    pub(crate) decoder: Decoder,
    /// `Expect: 100-continue` was sent and the interim response is not yet written.
    pub(crate) continue_pending: bool,
    pub(crate) failed: Option<Failure>,
    pub(crate) timer: TimerHandle,
    pub(crate) cfg: Arc<Settings>,
    started: bool,
    last_tickle: u64,
    since_tickle: u64,
}

impl State {
    pub(crate) fn new(
        sock: Arc<Transport>,
        buf: BytesMut,
        decoder: Decoder,
        continue_pending: bool,
        timer: TimerHandle,
        cfg: Arc<Settings>,
    ) -> State {
        State {
            sock,
            buf,
            decoder,
            continue_pending,
            failed: None,
            timer,
            cfg,
            started: false,
            last_tickle: 0,
            since_tickle: 0,
        }
    }

    fn fail(&mut self, f: Failure, detail: &'static str) -> Error {
        self.failed = Some(f);
        self.timer.pause();
        match f {
            Failure::Status(s) => Error::new(Kind::Body, detail).with_status(s),
            Failure::Broken => Error::new(Kind::Body, detail),
        }
    }

    /// The next piece if it can be had without I/O: decoded from what is buffered, the end,
    /// or an error. `None`: the socket must be read (or the interim 100 sent) first.
    fn next_buffered(&mut self) -> Option<Option<Result<Bytes, Error>>> {
        if let Some(f) = self.failed {
            return Some(Some(Err(Error::new(Kind::Body, "request body failed earlier").with_status(match f {
                Failure::Status(s) => s,
                Failure::Broken => 400,
            }))));
        }
        match self.decoder.decode(&mut self.buf) {
            Ok(Decoded::Data(b)) => Some(Some(Ok(b))),
            Ok(Decoded::Done) => {
                if self.started {
                    self.timer.pause();
                }
                Some(None)
            }
            Ok(Decoded::NeedMore) => None,
            Err(BodyError::Invalid(why)) => Some(Some(Err(self.fail(Failure::Status(400), why)))),
            Err(BodyError::TooLarge) => Some(Some(Err(self.fail(Failure::Status(413), "request body over the limit")))),
        }
    }

    /// The next piece of the body, `None` at its end.
    pub(crate) async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        loop {
            if let Some(r) = self.next_buffered() {
                return r;
            }
            if self.continue_pending {
                self.continue_pending = false;
                if self.sock.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
                    return Some(Err(self.fail(Failure::Broken, "connection lost")));
                }
            }
            // A switched protocol's bytes come when they come: the app keeps its own time.
            let tunnel = self.decoder.is_tunnel();
            if !self.started && !tunnel {
                self.started = true;
                self.timer.tickle(self.cfg.body_timeout);
                self.last_tickle = now_ms();
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(self.cfg.read_buffer.max(4096));
            }
            match self.sock.read(&mut self.buf).await {
                Ok(0) if tunnel => return None,
                Ok(0) => return Some(Err(self.fail(Failure::Broken, "connection closed mid-body"))),
                Ok(_) if tunnel => {}
                Ok(n) => {
                    // Slow-loris defence: only a read that keeps the average rate since the
                    // last extension at or above the minimum extends the deadline.
                    self.since_tickle += n as u64;
                    let now = now_ms();
                    if self.since_tickle * 1000 >= self.cfg.min_body_rate * now.saturating_sub(self.last_tickle) {
                        self.timer.tickle(self.cfg.body_timeout);
                        self.last_tickle = now;
                        self.since_tickle = 0;
                    }
                }
                Err(_) => return Some(Err(self.fail(Failure::Broken, "connection lost"))),
            }
        }
    }
}

/// A read in progress: it owns the state while it waits on the socket.
type Reading = Pin<Box<dyn Future<Output = (Option<State>, Option<Result<Bytes, Error>>)> + Send>>;

/// The app's handle on the body ([`BodySource`]); gives the state back to the connection
/// when dropped. Pieces already buffered are handed out directly; a read that must wait on
/// the socket runs as a boxed future that owns the state meanwhile (and sends it home if it
/// is dropped before it finishes).
pub(crate) struct Reader {
    st: Option<State>,
    home: Home,
    reading: Option<Reading>,
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("h1::Reader").field("reading", &self.reading.is_some()).finish_non_exhaustive()
    }
}

/// Sends the state home when dropped (a read future dropped before it finished).
struct Homing {
    st: Option<State>,
    home: Home,
}

impl Drop for Homing {
    fn drop(&mut self) {
        if let Some(st) = self.st.take() {
            if let Ok(mut home) = self.home.lock() {
                *home = Some(st);
            }
        }
    }
}

impl Reader {
    pub(crate) fn new(st: State, home: Home) -> Reader {
        Reader { st: Some(st), home, reading: None }
    }
}

impl BodySource for Reader {
    fn content_length(&self) -> Option<u64> {
        self.st.as_ref().and_then(|s| s.decoder.remaining())
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        if self.reading.is_none() {
            let Some(st) = self.st.as_mut() else {
                return Poll::Ready(Some(Err(Error::new(Kind::BodyGone, "request body no longer available"))));
            };
            if let Some(r) = st.next_buffered() {
                return Poll::Ready(r);
            }
            let mut homing = Homing { st: self.st.take(), home: self.home.clone() };
            self.reading = Some(Box::pin(async move {
                let r = match homing.st.as_mut() {
                    Some(st) => st.next().await,
                    None => None,
                };
                (homing.st.take(), r)
            }));
        }
        let Some(reading) = self.reading.as_mut() else { return Poll::Ready(None) };
        let (st, r) = std::task::ready!(reading.as_mut().poll(cx));
        self.reading = None;
        self.st = st;
        Poll::Ready(r)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some(st) = self.st.take() {
            if let Ok(mut home) = self.home.lock() {
                *home = Some(st);
            }
        }
    }
}
