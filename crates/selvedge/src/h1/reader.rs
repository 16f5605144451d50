//! The request-body reader an app holds ([`BodySource`]): it steps the body's sans-IO
//! [`Inbound`] phase over the connection's receive buffer, and does the reads and the
//! `100 Continue` write the phase asks for, on the connection's transport and timer. When
//! the app drops it, the phase and the buffer (with any pipelined bytes after the body)
//! go back to the connection.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;

use super::inbound::{Failure, Lent, Step, CONTINUE};
use crate::app::body::BodySource;
use crate::error::{Error, Kind};
use crate::io::transport::Transport;
use crate::time::timeout::{now_ms, TimerHandle};

/// Where a finished or dropped reader leaves the body for the connection.
pub(crate) type Home = Arc<Mutex<Option<Lent>>>;

/// The reader's state: the lent body and what it reads with.
#[derive(Debug)]
struct State {
    lent: Lent,
    sock: Arc<Transport>,
    timer: TimerHandle,
    /// Room a read asks for.
    read_buffer: usize,
}

impl State {
    /// The next piece if it can be had without I/O: decoded from what is buffered, the end,
    /// or a failure. `None`: the socket must be read (or the interim response sent) first.
    fn next_buffered(&mut self) -> Option<Option<Result<Bytes, Error>>> {
        let step = self.lent.inbound.decode(&mut self.lent.buf)?;
        Some(self.report(step))
    }

    fn report(&mut self, step: Step) -> Option<Result<Bytes, Error>> {
        match step {
            Step::Data(b) => Some(Ok(b)),
            Step::End => {
                if self.lent.inbound.started() {
                    self.timer.pause();
                }
                None
            }
            Step::Failed(e) => {
                self.timer.pause();
                Some(Err(e))
            }
            Step::Continue | Step::Read => None,
        }
    }

    /// The next piece of the body, `None` at its end.
    async fn next(&mut self) -> Option<Result<Bytes, Error>> {
        loop {
            if let Some(r) = self.next_buffered() {
                return r;
            }
            match self.lent.inbound.wait(now_ms()) {
                Step::Continue => {
                    if self.sock.write_all(CONTINUE).await.is_err() {
                        let f = self.lent.inbound.fail(Failure::Broken, "connection lost");
                        return self.report(f);
                    }
                }
                Step::Read => {
                    self.timer.set_at(self.lent.inbound.deadline());
                    let buf = &mut self.lent.buf;
                    if buf.capacity() - buf.len() < 1024 {
                        buf.reserve(self.read_buffer.max(4096));
                    }
                    let r = self.sock.read(buf).await;
                    let step = match r {
                        Ok(n) => self.lent.inbound.handle_read(n, now_ms()),
                        Err(_) => Some(self.lent.inbound.fail(Failure::Broken, "connection lost")),
                    };
                    if let Some(step) = step {
                        return self.report(step);
                    }
                }
                step => return self.report(step),
            }
        }
    }
}

/// A read in progress: it owns the state while it waits on the socket.
type Reading = Pin<Box<dyn Future<Output = (Option<State>, Option<Result<Bytes, Error>>)> + Send>>;

/// The app's handle on the body; gives the body back to the connection when dropped.
/// Pieces already buffered are handed out directly; a read that must wait on the socket
/// runs as a boxed future that owns the state meanwhile (and sends it home if it is
/// dropped before it finishes).
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

/// Sends the body home when dropped (a read future dropped before it finished).
struct Homing {
    st: Option<State>,
    home: Home,
}

fn send_home(st: State, home: &Home) {
    if let Ok(mut h) = home.lock() {
        *h = Some(st.lent);
    }
}

impl Drop for Homing {
    fn drop(&mut self) {
        if let Some(st) = self.st.take() {
            send_home(st, &self.home);
        }
    }
}

impl Reader {
    /// A reader of `lent`, reading with `sock`; the body goes back to `home`.
    pub(crate) fn new(lent: Lent, sock: Arc<Transport>, timer: TimerHandle, read_buffer: usize, home: Home) -> Reader {
        Reader { st: Some(State { lent, sock, timer, read_buffer }), home, reading: None }
    }
}

impl BodySource for Reader {
    fn content_length(&self) -> Option<u64> {
        self.st.as_ref().and_then(|s| s.lent.inbound.decoder.remaining())
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        if self.reading.is_none() {
            let Some(st) = self.st.as_mut() else {
                return Poll::Ready(Some(Err(Error::new(Kind::Body, "request body no longer available"))));
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
            send_home(st, &self.home);
        }
    }
}
