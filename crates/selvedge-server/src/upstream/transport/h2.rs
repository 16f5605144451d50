//! HTTP/2 connections to upstreams, shared by many requests at once: the engine's sans-IO
//! client ([`selvedge_proto::h2::client`]) driven over one socket (h2c with prior knowledge, or
//! TLS after ALPN `h2`).
//!
//! - A **driver task** per connection owns the socket: it reads, feeds the [`Client`]
//!   under a short lock, sorts the events into each stream's [`Slot`] and wakes its
//!   owner, and writes whatever the client queued (requests, DATA, WINDOW_UPDATE, acks).
//!   With no stream open for `idle` it says GOAWAY and closes.
//! - A request owns a [`Stream`]: it sends its body ([`Stream::send`], waiting while the
//!   flow-control windows are closed), reads the head, body pieces and trailers, and gives
//!   body bytes back as it relays them ([`Stream::release`]), so a slow client slows the
//!   upstream through its window instead of filling memory. Dropping a stream that has not
//!   ended resets it (CANCEL).
//! - Each worker keeps its connections per upstream ([`Conns`]): a new stream goes on the
//!   first one with room under the server's SETTINGS_MAX_CONCURRENT_STREAMS; a new
//!   connection is opened only when all are full (one at a time: requests that arrive
//!   meanwhile wait for it).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use selvedge_proto::h2::client::{Client, ClientSettings, Event, Fields};
use selvedge_proto::h2::frame::Reason;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use super::conn::Conn;

/// What a stream has received and not yet taken.
#[derive(Debug, Default)]
struct Slot {
    head: Option<(u16, Fields, bool)>,
    data: VecDeque<(Bytes, bool)>,
    trailers: Option<Fields>,
    reset: Option<Reason>,
    /// The reader waiting for any of the above.
    waker: Option<Waker>,
    /// The body sender waiting for window.
    send_waker: Option<Waker>,
}

#[derive(Debug)]
struct State {
    client: Client,
    slots: HashMap<u32, Slot>,
    /// The socket is gone.
    closed: bool,
}

/// One upstream HTTP/2 connection (see the module's text).
#[derive(Debug)]
pub(crate) struct H2Conn {
    state: Mutex<State>,
    /// Wakes the driver: output is queued.
    wake: Notify,
    /// Wakes [`H2Conn::settle`]: the upstream's SETTINGS arrived, or the connection ended.
    settled: Notify,
}

/// What a stream's reader gets next.
#[derive(Debug)]
pub(crate) enum Piece {
    /// Body bytes (`true`: the last).
    Data(Bytes, bool),
    /// The trailer section (the end).
    Trailers(Fields),
}

impl H2Conn {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes over `conn` (after ALPN `h2`, or a plain socket for prior knowledge) and
    /// starts its driver task.
    pub(crate) fn start(conn: Conn, settings: ClientSettings, idle: Duration) -> Arc<H2Conn> {
        let t = conn.into_tunnel();
        let h = Arc::new(H2Conn {
            state: Mutex::new(State { client: Client::new(settings), slots: HashMap::new(), closed: false }),
            wake: Notify::new(),
            settled: Notify::new(),
        });
        tokio::spawn(drive(h.clone(), t, idle));
        h
    }

    /// Waits (at most `limit`) until the upstream's first SETTINGS frame has arrived or
    /// the connection ended, so the streams put on a new connection respect the
    /// upstream's SETTINGS_MAX_CONCURRENT_STREAMS instead of an assumed 100 (a server
    /// with a lower limit refuses the streams above it).
    pub(crate) async fn settle(&self, limit: Duration) {
        let notified = self.settled.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let st = self.lock();
            if st.closed || st.client.peer_settled() {
                return;
            }
        }
        let _ = tokio::time::timeout(limit, notified).await;
    }

    /// Whether a new stream fits now.
    pub(crate) fn has_room(&self) -> bool {
        let st = self.lock();
        !st.closed && st.client.can_open()
    }

    /// Whether the connection takes no new streams any more (closed or going away).
    pub(crate) fn is_spent(&self) -> bool {
        let st = self.lock();
        st.closed || !st.client.is_usable()
    }

    /// Opens a stream with the request head `fields`; `None` when the connection is full
    /// or going away.
    pub(crate) fn open(self: &Arc<Self>, fields: &RequestFields, end_stream: bool) -> Option<Stream> {
        let id = {
            let mut st = self.lock();
            if st.closed {
                return None;
            }
            let id = st.client.open(fields.iter(), end_stream)?;
            st.slots.insert(id, Slot::default());
            id
        };
        self.wake.notify_one();
        Some(Stream { conn: self.clone(), id, ended: false })
    }
}

/// One request's stream; dropping it before the response ended resets it.
#[derive(Debug)]
pub(crate) struct Stream {
    conn: Arc<H2Conn>,
    id: u32,
    ended: bool,
}

/// The sending half of a [`Stream`], for the task that uploads the request body.
#[derive(Debug)]
pub(crate) struct Sender {
    conn: Arc<H2Conn>,
    id: u32,
}

impl Sender {
    /// Sends `data` (all of it, waiting for window as needed), ending the request body
    /// with `end`. `false`: the stream is gone (reset, or the connection closed).
    pub(crate) async fn send(&self, mut data: Bytes, end: bool) -> bool {
        let conn = &self.conn;
        let ok = poll_fn(|cx| {
            let mut st = conn.lock();
            if st.closed || st.slots.get(&self.id).is_none_or(|s| s.reset.is_some()) {
                return Poll::Ready(false);
            }
            if !st.client.send_data(self.id, &mut data, end) {
                return Poll::Ready(false);
            }
            conn.wake.notify_one();
            if data.is_empty() {
                return Poll::Ready(true);
            }
            if let Some(s) = st.slots.get_mut(&self.id) {
                s.send_waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
        ok
    }

    /// The client's body failed: the stream is reset (`reason`).
    pub(crate) fn reset(&self, reason: Reason) {
        let mut st = self.conn.lock();
        if let Some(s) = st.slots.get_mut(&self.id) {
            s.reset = Some(reason);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
        st.client.reset(self.id, reason);
        drop(st);
        self.conn.wake.notify_one();
    }
}

impl Stream {
    /// A sender of the request body.
    pub(crate) fn sender(&self) -> Sender {
        Sender { conn: self.conn.clone(), id: self.id }
    }

    /// The response head: status, fields, and whether it ends the response.
    ///
    /// # Errors
    /// The reason the stream was reset (REFUSED_STREAM: the upstream never processed it).
    pub(crate) async fn head(&mut self) -> Result<(u16, Fields, bool), Reason> {
        let r = poll_fn(|cx| {
            let mut st = self.conn.lock();
            let closed = st.closed;
            let Some(s) = st.slots.get_mut(&self.id) else { return Poll::Ready(Err(Reason::CANCEL)) };
            if let Some(h) = s.head.take() {
                return Poll::Ready(Ok(h));
            }
            if let Some(r) = s.reset {
                return Poll::Ready(Err(r));
            }
            if closed {
                return Poll::Ready(Err(Reason::CANCEL));
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        if matches!(r, Ok((_, _, true)) | Err(_)) {
            self.ended = true;
            self.conn.lock().slots.remove(&self.id);
        }
        r
    }

    /// The next piece of the response body; `Ok(None)` after the end.
    ///
    /// # Errors
    /// The reason the stream was reset or the connection lost.
    pub(crate) async fn next(&mut self) -> Result<Option<Piece>, Reason> {
        if self.ended {
            return Ok(None);
        }
        let r = poll_fn(|cx| {
            let mut st = self.conn.lock();
            let closed = st.closed;
            let Some(s) = st.slots.get_mut(&self.id) else { return Poll::Ready(Err(Reason::CANCEL)) };
            if let Some((b, end)) = s.data.pop_front() {
                return Poll::Ready(Ok(Piece::Data(b, end)));
            }
            if let Some(t) = s.trailers.take() {
                return Poll::Ready(Ok(Piece::Trailers(t)));
            }
            if let Some(r) = s.reset {
                return Poll::Ready(Err(r));
            }
            if closed {
                return Poll::Ready(Err(Reason::CANCEL));
            }
            s.waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        let end = match &r {
            Ok(Piece::Data(_, end)) => *end,
            Ok(Piece::Trailers(_)) | Err(_) => true,
        };
        if end {
            self.ended = true;
            self.conn.lock().slots.remove(&self.id);
        }
        r.map(Some)
    }

    /// `n` body bytes were passed on: the upstream may send more.
    pub(crate) fn release(&self, n: usize) {
        let mut st = self.conn.lock();
        st.client.release(self.id, n);
        if st.client.has_output() {
            drop(st);
            self.conn.wake.notify_one();
        }
    }

    /// Resets the stream now (a timeout): RST_STREAM(`reason`).
    pub(crate) fn reset(&mut self, reason: Reason) {
        self.ended = true;
        let mut st = self.conn.lock();
        st.slots.remove(&self.id);
        st.client.reset(self.id, reason);
        drop(st);
        self.conn.wake.notify_one();
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.ended {
            self.reset(Reason::CANCEL);
        } else {
            self.conn.lock().slots.remove(&self.id);
        }
    }
}

/// Sorts the client's events into the slots and wakes their owners; wakes every body
/// sender too (a window may have opened).
fn dispatch(st: &mut State) {
    while let Some(ev) = st.client.poll_event() {
        let id = match &ev {
            Event::Head { stream, .. }
            | Event::Data { stream, .. }
            | Event::Trailers { stream, .. }
            | Event::Reset { stream, .. } => *stream,
        };
        let Some(s) = st.slots.get_mut(&id) else { continue };
        match ev {
            Event::Head { status, fields, end_stream, .. } => s.head = Some((status, fields, end_stream)),
            Event::Data { data, end_stream, .. } => s.data.push_back((data, end_stream)),
            Event::Trailers { fields, .. } => s.trailers = Some(fields),
            Event::Reset { reason, .. } => s.reset = Some(reason),
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
    }
    for s in st.slots.values_mut() {
        if let Some(w) = s.send_waker.take() {
            w.wake();
        }
    }
}

/// The driver (see the module's text).
async fn drive(h: Arc<H2Conn>, t: super::conn::Tunnel, idle: Duration) {
    let super::conn::Tunnel { mut rd, mut wr, early, permit } = t;
    let mut rbuf = early;
    let mut wbuf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut idle_since = tokio::time::Instant::now();
    let mut settled = false;
    loop {
        let notified = h.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (done, streams) = {
            let mut st = h.lock();
            st.client.poll_transmit(&mut wbuf);
            (st.client.is_done(), st.client.active())
        };
        if !wbuf.is_empty() {
            if wr.write_all(&wbuf).await.is_err() {
                break;
            }
            wbuf.clear();
            continue;
        }
        if done {
            break;
        }
        if streams > 0 {
            idle_since = tokio::time::Instant::now();
        }
        if rbuf.capacity() - rbuf.len() < 8 * 1024 {
            rbuf.reserve(32 * 1024);
        }
        tokio::select! {
            r = rd.read_buf(&mut rbuf) => {
                match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let mut st = h.lock();
                        let _ = st.client.handle_bytes(&mut rbuf);
                        dispatch(&mut st);
                        if !settled && st.client.peer_settled() {
                            settled = true;
                            h.settled.notify_waiters();
                        }
                    }
                }
            }
            () = &mut notified => {}
            () = tokio::time::sleep_until(idle_since + idle), if streams == 0 => {
                let mut st = h.lock();
                if st.client.active() == 0 {
                    st.client.go_away(Reason::NO_ERROR);
                }
            }
        }
    }
    let _ = wr.shutdown().await;
    let mut st = h.lock();
    st.closed = true;
    h.settled.notify_waiters();
    for s in st.slots.values_mut() {
        if s.reset.is_none() && s.trailers.is_none() && !s.data.back().is_some_and(|d| d.1) {
            s.reset.get_or_insert(Reason::CANCEL);
        }
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        if let Some(w) = s.send_waker.take() {
            w.wake();
        }
    }
    drop(st);
    drop(permit);
}

/// This worker's HTTP/2 connections to one upstream.
#[derive(Debug, Default)]
struct Conns {
    list: Vec<Arc<H2Conn>>,
    /// A connection is being opened: others wait for it.
    opening: Option<Arc<Notify>>,
}

thread_local! {
    static CONNS: RefCell<HashMap<usize, Conns>> = RefCell::new(HashMap::new());
}

/// What [`acquire`] found.
pub(crate) enum Found {
    /// A stream on an open connection.
    Stream(Stream),
    /// None has room: the caller opens a connection ([`Opening`] marks it in progress).
    Open(Opening),
    /// Another request is opening one: wait on this, then look again.
    Wait(Arc<Notify>),
    /// `max` connections are open and full.
    Full,
}

/// A connection being opened for a slot; dropped without [`Opening::done`], it lets the
/// waiting requests look again (and open one themselves).
pub(crate) struct Opening {
    slot: usize,
    notify: Arc<Notify>,
}

impl Opening {
    /// The new connection joins the slot's list.
    pub(crate) fn done(self, conn: Arc<H2Conn>) {
        CONNS.with(|c| c.borrow_mut().entry(self.slot).or_default().list.push(conn));
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        CONNS.with(|c| {
            if let Some(s) = c.borrow_mut().get_mut(&self.slot) {
                s.opening = None;
            }
        });
        self.notify.notify_waiters();
    }
}

/// A request head as HTTP/2 fields (pseudo-fields first, names lowercase), every name and
/// value in one buffer: two allocations per request instead of two per field.
#[derive(Debug, Default)]
pub(crate) struct RequestFields {
    buf: Vec<u8>,
    /// Per field: where its name starts, where its value starts (the name's end), where
    /// the value ends.
    spans: Vec<(u32, u32, u32)>,
}

impl RequestFields {
    pub(crate) fn with_capacity(bytes: usize, fields: usize) -> RequestFields {
        RequestFields { buf: Vec::with_capacity(bytes), spans: Vec::with_capacity(fields) }
    }

    /// Appends a field; `name` is lowercased on the way in.
    pub(crate) fn push(&mut self, name: &[u8], value: &[u8]) {
        let start = self.buf.len();
        self.buf.extend(name.iter().map(u8::to_ascii_lowercase));
        let mid = self.buf.len();
        self.buf.extend_from_slice(value);
        // A head is bounded far below 4 GiB (`max_header_size`); saturate rather than wrap.
        let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.spans.push((at(start), at(mid), at(self.buf.len())));
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans.iter().map(|&(a, b, c)| (&self.buf[a as usize..b as usize], &self.buf[b as usize..c as usize]))
    }
}

/// A stream for upstream `slot` on one of this worker's connections, or what to do to
/// get one (see [`Found`]). Spent connections are dropped from the list here.
pub(crate) fn acquire(slot: usize, max: usize, fields: &RequestFields, end_stream: bool) -> Found {
    CONNS.with(|c| {
        let mut c = c.borrow_mut();
        let s = c.entry(slot).or_default();
        s.list.retain(|h| !h.is_spent());
        for h in &s.list {
            if h.has_room() {
                if let Some(st) = h.open(fields, end_stream) {
                    return Found::Stream(st);
                }
            }
        }
        if let Some(n) = &s.opening {
            return Found::Wait(n.clone());
        }
        if max > 0 && s.list.len() >= max {
            return Found::Full;
        }
        let notify = Arc::new(Notify::new());
        s.opening = Some(notify.clone());
        Found::Open(Opening { slot, notify })
    })
}
