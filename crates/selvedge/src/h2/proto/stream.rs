//! One stream's state: its RFC 9113 §5.1 state, flow-control windows, the request body
//! waiting for the app, and the response waiting for the sender.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;
use std::task::Waker;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use super::flow::FlowControl;
use crate::app::response::SharedFields;
use crate::h2::frame::Reason;
use crate::time::rate::BodyClock;

pub(crate) use selvedge_proto::h2::state::State;

/// Why a stream closed, remembered for a while after it left the map (to tell a closed
/// stream from an idle one, and to answer late frames and reads rightly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Ended by END_STREAM both ways, or reset by the peer.
    Ended,
    /// We reset it: its late frames are ignored.
    Reset,
    /// We reset it because its request body did not arrive in time (`timers.rs`).
    TimedOut,
}

/// Where the response body comes from.
pub(crate) enum OutBody {
    /// Nothing (more) to send but END_STREAM.
    Empty,
    /// Bytes in memory, sent from the front.
    Bytes(Bytes),
    /// A range of a file, read with `pread` into the send buffer.
    File { file: Arc<File>, offset: u64, remaining: u64 },
    /// Pieces written by a streaming app (boxed: bytes and files, the common answers, are
    /// then moved around in a smaller stream state).
    Stream(Box<StreamOut>),
}

/// A streaming app's queue: pieces bounded by `queued` (the writer waits above the limit);
/// `trailers`: the trailer section sent after the last piece.
#[derive(Debug, Default)]
pub(crate) struct StreamOut {
    pub(crate) pieces: VecDeque<Bytes>,
    pub(crate) queued: usize,
    pub(crate) done: bool,
    pub(crate) waker: Option<Waker>,
    pub(crate) trailers: Option<Vec<(http::HeaderName, http::HeaderValue)>>,
}

impl OutBody {
    /// Bytes ready to go now (0 for a stream waiting for its app).
    pub(crate) fn ready(&self) -> u64 {
        match self {
            OutBody::Empty => 0,
            OutBody::Bytes(b) => b.len() as u64,
            OutBody::File { remaining, .. } => *remaining,
            OutBody::Stream(st) => st.queued as u64,
        }
    }

    /// Whether nothing more will come after what is ready.
    pub(crate) fn finished(&self) -> bool {
        !matches!(self, OutBody::Stream(st) if !st.done)
    }

    /// Whether a trailer section follows the data.
    pub(crate) fn has_trailers(&self) -> bool {
        matches!(self, OutBody::Stream(st) if st.trailers.is_some())
    }
}

/// What the stream is sending.
pub(crate) enum Send {
    /// The app has not answered yet.
    Waiting,
    /// The head is to be sent, then the body. `shared`: fields shared with other responses,
    /// before `headers`; `length`: a `content-length` to add.
    Head {
        status: StatusCode,
        shared: Option<Arc<SharedFields>>,
        headers: Vec<(HeaderName, HeaderValue)>,
        length: Option<u64>,
        body: OutBody,
    },
    /// The head is out; the body follows.
    Body(OutBody),
    /// END_STREAM is sent.
    Done,
}

/// A stream's request body pieces not yet read by the app.
///
/// A DATA payload is a slice of the connection's receive buffer, which it keeps whole while
/// it waits: a peer sending tiny (or padded) frames one read at a time could make a stream
/// hold a buffer per byte of its window. Pieces under [`Inbox::SMALL`] are copied into one
/// buffer of their own instead, so what a stream holds stays near the bytes its window
/// admits.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pieces: VecDeque<Bytes>,
    /// Small pieces gathered, after every piece in `pieces`.
    small: bytes::BytesMut,
}

impl Inbox {
    /// Payloads shorter than this are copied (gathered) rather than kept as slices.
    pub(crate) const SMALL: usize = 1024;
    /// A gathering buffer goes into the queue once it holds this much.
    const GATHER: usize = 16 * 1024;

    /// Queues a piece (not empty).
    pub(crate) fn push(&mut self, data: Bytes) {
        if data.len() < Self::SMALL {
            self.small.extend_from_slice(&data);
            if self.small.len() >= Self::GATHER {
                self.pieces.push_back(self.small.split().freeze());
            }
            return;
        }
        if !self.small.is_empty() {
            self.pieces.push_back(self.small.split().freeze());
        }
        self.pieces.push_back(data);
    }

    /// The next piece, in arrival order.
    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        self.pieces.pop_front().or_else(|| (!self.small.is_empty()).then(|| self.small.split().freeze()))
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.small.is_empty()
    }

    /// The bytes waiting.
    pub(crate) fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum::<usize>() + self.small.len()
    }

    /// Drops everything waiting; returns how many bytes that was.
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.len();
        self.pieces.clear();
        self.small = bytes::BytesMut::new();
        n
    }
}

/// One open stream.
pub(crate) struct Stream {
    pub(crate) state: State,
    /// Our send window (the client's grant), may go negative after a SETTINGS change.
    pub(crate) send_flow: FlowControl,
    /// What the client may still send, and what the app consumed but we have not yet
    /// granted back.
    pub(crate) recv_flow: FlowControl,
    /// Request body pieces not yet read by the app.
    pub(crate) inbox: Inbox,
    /// The app's task waiting for body data.
    pub(crate) reader: Option<Waker>,
    /// The body failed (reset, content-length mismatch).
    pub(crate) recv_error: Option<Reason>,
    /// `content-length` of the request, and the data received so far.
    pub(crate) content_length: Option<u64>,
    pub(crate) received: u64,
    pub(crate) send: Send,
    /// Waiting in the queue for the connection window to open.
    pub(crate) conn_blocked: bool,
    /// Has data but its own send window is closed.
    pub(crate) win_blocked: bool,
    /// HEAD request: no body goes out.
    pub(crate) is_head: bool,
    /// The app dropped the request body: data is granted back on arrival and discarded.
    pub(crate) body_dropped: bool,
    /// The body phase's clock, while it runs (see `timers.rs`).
    pub(crate) body_clock: Option<BodyClock>,
    /// The answer is complete and the app dropped the body: what is received beyond this
    /// is too much to discard (see `Proto::stop_unread`).
    pub(crate) drain_until: Option<u64>,
    /// Since when the response has been held back by this stream's window.
    pub(crate) stall_since: Option<u64>,
    /// The response's end report: complete if END_STREAM went out before the stream left.
    pub(crate) finish: Option<Box<crate::app::response::Finish>>,
}

/// A stream leaves the connection (closed, reset, or the connection ended): no longer open
/// in the engine's counters.
impl Drop for Stream {
    #[inline]
    fn drop(&mut self) {
        crate::stats::add(crate::stats::Counter::H2StreamClosed, 1);
        if let Some(f) = self.finish.take() {
            f.report(matches!(self.send, Send::Done));
        }
    }
}

impl Stream {
    pub(crate) fn new(state: State, send_window: i64, recv_window: i64) -> Stream {
        crate::stats::add(crate::stats::Counter::H2StreamOpened, 1);
        Stream {
            state,
            send_flow: FlowControl::new(send_window),
            recv_flow: FlowControl::new(recv_window),
            inbox: Inbox::default(),
            reader: None,
            recv_error: None,
            content_length: None,
            received: 0,
            send: Send::Waiting,
            conn_blocked: false,
            win_blocked: false,
            is_head: false,
            body_dropped: false,
            body_clock: None,
            drain_until: None,
            stall_since: None,
            finish: None,
        }
    }

    pub(crate) fn wake_reader(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    pub(crate) fn wake_writer(&mut self) {
        if let Send::Body(OutBody::Stream(st)) | Send::Head { body: OutBody::Stream(st), .. } = &mut self.send {
            if let Some(w) = st.waker.take() {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window's worth of one-byte payloads, each a slice of a 32 KiB receive buffer of its
    /// own: the inbox keeps a few gathered buffers, not 65,535 read buffers, in order.
    #[test]
    fn tiny_pieces_are_gathered() {
        let mut inbox = Inbox::default();
        let mut want = Vec::new();
        for i in 0..65_535u32 {
            let buf = Bytes::from(vec![(i % 251) as u8; 32 * 1024]);
            inbox.push(buf.slice(0..1));
            want.push((i % 251) as u8);
            if i == 40_000 {
                let big = Bytes::from(vec![7u8; 5000]);
                inbox.push(big.clone());
                want.extend_from_slice(&big);
            }
        }
        assert_eq!(inbox.len(), want.len());
        assert!(inbox.pieces.len() <= 6, "{} pieces", inbox.pieces.len());
        assert!(inbox.pieces.iter().all(|p| p.len() <= 16 * 1024 || p.len() == 5000));
        let mut got = Vec::new();
        while let Some(p) = inbox.pop() {
            got.extend_from_slice(&p);
        }
        assert_eq!(got, want);
        assert!(inbox.is_empty());
    }
}
