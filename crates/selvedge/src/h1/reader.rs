//! The request-body reader an app holds: decodes the body straight out of the connection's
//! receive buffer and reads more from the socket as needed, enforcing the body timeout and
//! minimum rate. When the app drops it, its state (and so the receive buffer, with any
//! pipelined bytes after the body) goes back to the connection.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use super::body::{BodyError, Decoded, Decoder};
use crate::error::{Error, Kind};
use crate::settings::Settings;
use crate::socket::Socket;
use crate::time::timeout::{now_ms, TimerHandle};

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
    pub(crate) sock: Arc<Socket>,
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
        sock: Arc<Socket>,
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

    /// The next piece of the body, `None` at its end.
    pub(crate) async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        if let Some(f) = self.failed {
            return Some(Err(Error::new(Kind::Body, "request body failed earlier").with_status(match f {
                Failure::Status(s) => s,
                Failure::Broken => 400,
            })));
        }
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Decoded::Data(b)) => return Some(Ok(b)),
                Ok(Decoded::Done) => {
                    if self.started {
                        self.timer.pause();
                    }
                    return None;
                }
                Ok(Decoded::NeedMore) => {}
                Err(BodyError::Invalid(why)) => return Some(Err(self.fail(Failure::Status(400), why))),
                Err(BodyError::TooLarge) => {
                    return Some(Err(self.fail(Failure::Status(413), "request body over the limit")))
                }
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

/// The app's handle on the body; gives the state back to the connection when dropped.
#[derive(Debug)]
pub(crate) struct Reader {
    st: Option<State>,
    home: Home,
}

impl Reader {
    pub(crate) fn new(st: State, home: Home) -> Reader {
        Reader { st: Some(st), home }
    }

    pub(crate) fn remaining(&self) -> Option<u64> {
        self.st.as_ref().and_then(|s| s.decoder.remaining())
    }

    pub(crate) async fn next_chunk(&mut self) -> Option<Result<Bytes, Error>> {
        match &mut self.st {
            Some(st) => st.next().await,
            None => Some(Err(Error::new(Kind::BodyGone, "request body no longer available"))),
        }
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
