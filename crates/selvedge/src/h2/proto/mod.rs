//! The HTTP/2 connection as a sans-IO state machine: frames in, events and frames out.
//!
//! [`Proto::handle_bytes`] cuts frames out of the receive buffer and
//! [`Proto::handle_frame`] takes each (with the time, for the abuse budgets and the
//! deadlines), updating stream states, windows and the HPACK context; what the peer must be
//! told (SETTINGS acks, PING acks, WINDOW_UPDATE, RST_STREAM, GOAWAY) is queued as encoded
//! control frames; new requests come out of [`Proto::poll_events`]. [`Proto::poll_transmit`]
//! (in `send.rs`) writes the next batch of output: all control frames first, then response
//! frames chosen by the priority queue. [`Proto::poll_timeout`] and
//! [`Proto::handle_timeout`] are its deadlines. Nothing here touches a socket, a file or a
//! clock: the time and the `Date` are passed in, and file bytes are read by the driver into
//! the places `poll_transmit` leaves for them (outside the connection's lock), so tests
//! drive it byte by byte. (The names are `selvedge-proto`'s vocabulary: `handle_*` in,
//! `poll_*` out.)
//!
//! The parts: `stream.rs` (one stream: its state, windows, body and response), `budget.rs`
//! (abuse budgets), `continuation.rs` (header blocks over several frames), `send.rs`
//! (responses out), `timers.rs` (deadlines), `store.rs` (the stream map); request heads
//! come from `crate::head`, and windows (`flow`), stream states and the output queue
//! (`priority`) from `selvedge-proto`.
//!
//! Errors follow RFC 9113 §5.4: `handle_frame` returns a connection error's code (the caller ends
//! the connection with [`Proto::go_away`]); stream errors are handled inside by resetting
//! the stream.

mod budget;
mod continuation;
pub(crate) use selvedge_proto::h2::{flow, priority};
mod send;
mod store;
pub(crate) use send::{After, FileRead};
mod stream;
mod timers;

pub(crate) use timers::Timeouts;

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

pub(crate) use self::stream::{Cause, OutBody, Send, State, Stream, StreamOut};
use super::frame::{self, Frame, Reason, Setting, MAX_WINDOW};
use crate::app::request::RequestHead;
use crate::head::{self as headers, HeaderError, Hpack};
use crate::hpack;
use crate::settings::H2Settings;
use budget::Budget;
use continuation::Block;
use flow::FlowControl;
use priority::{Precedence, Queue};

/// What the connection driver must act on. Not boxed: events live in a reused vector, and
/// a box per request would be one more allocation on the hot path.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Event {
    /// A new request on stream `.0`: run the app (the driver makes the [`Request`] of the
    /// head, with its body if `.2`: the request has one, i.e. the stream is still open).
    ///
    /// [`Request`]: crate::Request
    Request(u32, RequestHead, bool),
    /// Stream `.0` was reset: stop its app.
    Cancel(u32),
}

/// An encoded response head that can be sent again verbatim: its fields (`fixed`: status,
/// date, server and length, compared as values; `key`, the app's own fields as
/// `name\0value\0`...; `shared`, the shared set, kept alive so that its address is not
/// reused while it is compared by address) and the encoder state it is valid in.
#[derive(Default)]
struct HeadCache {
    state: Option<u64>,
    shared: Option<std::sync::Arc<crate::app::response::SharedFields>>,
    fixed: HeadFixed,
    /// Our `Date` in it (when `fixed.date`).
    date: [u8; crate::time::date::DATE_LEN],
    key: Vec<u8>,
    block: Vec<u8>,
    /// Scratch for the next head's key.
    key_next: Vec<u8>,
}

/// The fields every head has, as [`HeadCache`] compares them: a few integers (our `Date`
/// is compared where it lies, not copied per head).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct HeadFixed {
    status: u16,
    /// Whether our `Date` goes out (the app may set its own).
    date: bool,
    /// Whether our `Server` goes out.
    server: bool,
    length: Option<u64>,
}

/// Decodes base64url without padding (RFC 4648 §5), as `HTTP2-Settings` is sent.
/// The connection error a header block ends the connection with.
fn conn_error(e: HeaderError) -> Reason {
    match e {
        HeaderError::Abandoned => Reason::ENHANCE_YOUR_CALM,
        _ => Reason::COMPRESSION_ERROR,
    }
}

fn base64url(s: &[u8]) -> Option<Vec<u8>> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    };
    let s = s.trim_ascii();
    let s = s.strip_suffix(b"==").or_else(|| s.strip_suffix(b"=")).unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        acc = acc << 6 | val(c)? as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// How many recently closed streams are remembered (to tell "closed" from "never opened").
const CLOSED_MEMORY: usize = 64;

/// What a parked connection keeps of its [`Proto`] (see [`Proto::park`]).
pub(crate) struct Parked {
    hdec: hpack::Decoder,
    /// Our encoder's table size: its entries are dropped, and the first response after
    /// the park empties the peer's table too (`hpack::Encoder::emptying`).
    henc_max: usize,
    closed: VecDeque<(u32, Cause)>,
    budget: Budget,
    send_flow: FlowControl,
    recv_flow: FlowControl,
    peer_initial_window: i64,
    active_at: Option<u64>,
    last_id: u32,
    peer_max_frame: u32,
    requests: u32,
    no_rfc7540: bool,
}

impl Parked {
    /// When its idle deadline passes, `idle` (ms) after the peer's last frame (`None`:
    /// no idle timeout).
    pub(crate) fn idle_deadline(&self, idle: u64) -> Option<u64> {
        self.active_at.filter(|_| idle > 0).map(|x| x + idle)
    }

    /// The GOAWAY(NO_ERROR) it closes with where it waits (its deadline passed, or the
    /// server shuts down).
    pub(crate) fn farewell(&self) -> [u8; FAREWELL_LEN] {
        farewell(self.last_id)
    }
}

/// GOAWAY(NO_ERROR) with `last_stream`, counted as sent.
fn farewell(last_stream: u32) -> [u8; FAREWELL_LEN] {
    crate::stats::h2_goaway_sent(0);
    let mut out = [0u8; FAREWELL_LEN];
    frame::GoAway { last_stream, reason: Reason::NO_ERROR, debug: Bytes::new() }.encode(&mut &mut out[..]);
    out
}

/// A GOAWAY frame without debug data: its head and two 32-bit fields.
pub(crate) const FAREWELL_LEN: usize = frame::HEADER_LEN + 8;

/// One HTTP/2 connection's protocol state (server side).
pub(crate) struct Proto {
    cfg: H2Settings,
    pub(crate) streams: store::Store<Stream>,
    /// Recently closed streams, and why.
    closed: VecDeque<(u32, Cause)>,
    /// Highest client stream id seen.
    last_id: u32,
    hdec: hpack::Decoder,
    henc: hpack::Encoder,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_initial_window: i64,
    peer_max_frame: u32,
    /// The connection's send window (the client's grant) and receive window (ours).
    send_flow: FlowControl,
    recv_flow: FlowControl,
    /// Encoded control frames waiting for the sender.
    control: Vec<u8>,
    queue: Queue,
    /// Streams with data waiting for the connection window.
    conn_blocked: Vec<u32>,
    /// Streams with data waiting for their own window (`Stream::win_blocked`).
    win_blocked: usize,
    block: Option<Block>,
    got_settings: bool,
    /// We sent GOAWAY (graceful: finish the streams we have).
    draining: bool,
    /// The connection failed: flush the GOAWAY and close.
    failed: Option<Reason>,
    /// The client sent GOAWAY.
    peer_goaway: bool,
    /// A timeout ended the connection (see `timers.rs`): why it closes.
    pub(crate) timed_out: Option<crate::stats::CloseReason>,
    requests: u32,
    /// The client sent SETTINGS_NO_RFC7540_PRIORITIES = 1 (RFC 9218 §2.1): its RFC 7540
    /// signals (PRIORITY frames, HEADERS priority fields) are ignored.
    no_rfc7540: bool,
    budget: Budget,
    events: Vec<Event>,
    /// Scratch for encoding header blocks.
    scratch: BytesMut,
    /// Where decoded request fields are copied (see `headers::request`).
    arena: BytesMut,
    /// The last response head that encoded without changing the HPACK table.
    head_cache: HeadCache,
    server_name: Option<&'static str>,
    /// The time of the frame or fill being handled (see `timers.rs`).
    now: u64,
    timeouts: timers::Timeouts,
    timers_changed: bool,
    /// Since when no stream could send DATA for flow control (the send deadline, see
    /// `timers.rs`).
    stuck_since: Option<u64>,
    /// When the peer last sent a frame (once the connection is established).
    active_at: Option<u64>,
}

impl Proto {
    /// A new connection: our SETTINGS and the connection window increase are queued.
    pub(crate) fn new(cfg: H2Settings, server_name: Option<&'static str>) -> Proto {
        let mut p = Proto::blank(cfg, server_name);
        p.closed.reserve(CLOSED_MEMORY);
        p.control.reserve(256);
        let mut values = vec![
            (Setting::MAX_CONCURRENT_STREAMS, p.cfg.max_concurrent_streams),
            (Setting::INITIAL_WINDOW_SIZE, p.cfg.initial_window_size),
            (Setting::MAX_HEADER_LIST_SIZE, p.cfg.max_header_list_size),
        ];
        // No SETTINGS_ENABLE_PUSH: only clients use it (some client stacks reject it from a
        // server), and we never push.
        if p.cfg.enable_connect_protocol {
            values.push((Setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        if p.cfg.max_frame_size != frame::DEFAULT_MAX_FRAME_SIZE {
            values.push((Setting::MAX_FRAME_SIZE, p.cfg.max_frame_size));
        }
        if p.cfg.header_table_size != hpack::DEFAULT_TABLE_SIZE as u32 {
            values.push((Setting::HEADER_TABLE_SIZE, p.cfg.header_table_size));
        }
        frame::Settings { ack: false, values }.encode(&mut p.control);
        let extra = p.recv_flow.window() - frame::DEFAULT_WINDOW as i64;
        if extra > 0 {
            frame::WindowUpdate { stream: 0, increment: extra as u32 }.encode(&mut p.control);
        }
        p
    }

    /// A connection's state before anything is exchanged, with nothing queued.
    fn blank(cfg: H2Settings, server_name: Option<&'static str>) -> Proto {
        let mut hdec = hpack::Decoder::new(cfg.header_table_size as usize);
        hdec.set_max_header_list_size(cfg.max_header_list_size as usize);
        Proto {
            streams: store::Store::default(),
            closed: VecDeque::new(),
            last_id: 0,
            hdec,
            henc: hpack::Encoder::new(),
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            send_flow: FlowControl::new(frame::DEFAULT_WINDOW as i64),
            recv_flow: FlowControl::new(cfg.connection_window.max(frame::DEFAULT_WINDOW) as i64),
            control: Vec::new(),
            queue: Queue::new(),
            conn_blocked: Vec::new(),
            win_blocked: 0,
            block: None,
            got_settings: false,
            draining: false,
            failed: None,
            peer_goaway: false,
            timed_out: None,
            requests: 0,
            no_rfc7540: false,
            budget: Budget::new(&cfg),
            events: Vec::new(),
            scratch: BytesMut::new(),
            head_cache: HeadCache::default(),
            arena: BytesMut::new(),
            server_name,
            now: 0,
            timeouts: timers::Timeouts { stall: cfg.stream_stall_timeout.as_millis() as u64, ..Default::default() },
            timers_changed: false,
            stuck_since: None,
            active_at: None,
            cfg,
        }
    }

    /// Stream 1 of an `Upgrade: h2c` connection: the upgrade request (the driver runs it),
    /// half-closed (remote). Its `HTTP2-Settings` (base64url SETTINGS payload) are applied
    /// with no ACK: the 101 acknowledged them (RFC 7540 §3.2.1); invalid ones are ignored.
    pub(crate) fn upgrade_stream(&mut self, http2_settings: Option<&[u8]>, is_head: bool) {
        if let Some(payload) = http2_settings.and_then(base64url) {
            let head = frame::Head { len: payload.len() as u32, kind: frame::kind::SETTINGS, flags: 0, stream: 0 };
            if let Ok(Frame::Settings(s)) = Frame::parse(head, Bytes::from(payload)) {
                let _ = self.apply_settings(s);
            }
        }
        self.last_id = 1;
        self.requests = 1;
        let mut s = Stream::new(State::HalfClosedRemote, self.peer_initial_window, self.cfg.initial_window_size as i64);
        s.is_head = is_head;
        self.streams.insert(1, s);
    }

    /// Our SETTINGS_MAX_FRAME_SIZE: the codec's limit on received frames.
    pub(crate) fn max_frame_size(&self) -> u32 {
        self.cfg.max_frame_size
    }

    /// Takes the events produced so far.
    pub(crate) fn poll_events(&mut self, out: &mut Vec<Event>) {
        if out.is_empty() {
            // The usual case: hand over the vector instead of moving each event.
            std::mem::swap(out, &mut self.events);
        } else {
            out.append(&mut self.events);
        }
    }

    /// Whether the connection has nothing left to do: failed, or going away with no stream
    /// left.
    pub(crate) fn is_done(&self) -> bool {
        self.failed.is_some() || ((self.draining || self.peer_goaway) && self.streams.is_empty())
    }

    /// The connection error we sent, if any.
    pub(crate) fn failed(&self) -> Option<Reason> {
        self.failed
    }

    /// Why the connection closes, as far as the protocol knows: a timeout, our GOAWAY's
    /// code (NO_ERROR: the server's normal end; ENHANCE_YOUR_CALM: abuse; others: the
    /// peer's error), a drain. `None`: the peer ended it (EOF, its GOAWAY).
    pub(crate) fn close_reason(&self) -> Option<crate::stats::CloseReason> {
        use crate::stats::CloseReason;
        if let Some(t) = self.timed_out {
            return Some(t);
        }
        match self.failed {
            Some(Reason::NO_ERROR) => Some(CloseReason::Server),
            Some(Reason::ENHANCE_YOUR_CALM) => Some(CloseReason::Abuse),
            Some(_) => Some(CloseReason::Error),
            None if self.draining => Some(CloseReason::Server),
            None => None,
        }
    }

    /// Whether streams are open.
    pub(crate) fn has_streams(&self) -> bool {
        !self.streams.is_empty()
    }

    /// Lets go of what only open streams need (the decoded-fields arena) while the
    /// connection has none, so an idle connection keeps only its tables and settings.
    pub(crate) fn release_idle(&mut self) {
        if self.streams.is_empty() {
            self.arena = BytesMut::new();
        }
    }

    /// Whether the connection could wait without its task (see `server::park`): the
    /// handshake is done, no stream is open, nothing waits to be sent, no header block is
    /// in progress, no deadline runs but the idle one, and neither side is going away.
    pub(crate) fn is_quiet(&self) -> bool {
        self.got_settings
            && self.streams.is_empty()
            && self.control.is_empty()
            && self.queue.is_empty()
            && self.block.is_none()
            && self.events.is_empty()
            && self.stuck_since.is_none()
            && !self.draining
            && !self.peer_goaway
            && self.failed.is_none()
    }

    /// A quiet connection parks (see [`Proto::is_quiet`]): it keeps its peer's settings,
    /// the windows, the HPACK decoder's table (our encoder's entries are dropped: its
    /// next block empties the peer's table), the flood budget, its idle clock and the ids of the
    /// streams we reset (their late frames are still ignored; the streams that ended
    /// normally are forgotten, as they are after `CLOSED_MEMORY` newer ones). Our own
    /// settings, the timeouts and every buffer, queue and cache are rebuilt by
    /// [`Proto::unpark`].
    pub(crate) fn park(self) -> Parked {
        let mut closed = self.closed;
        closed.retain(|(_, c)| *c != Cause::Ended);
        closed.shrink_to_fit();
        Parked {
            hdec: self.hdec,
            henc_max: self.henc.max_size(),
            closed,
            budget: self.budget,
            send_flow: self.send_flow,
            recv_flow: self.recv_flow,
            peer_initial_window: self.peer_initial_window,
            active_at: self.active_at,
            last_id: self.last_id,
            peer_max_frame: self.peer_max_frame,
            requests: self.requests,
            no_rfc7540: self.no_rfc7540,
        }
    }

    /// A parked connection goes on: `cfg`, `server_name` and `timeouts` as it had them.
    pub(crate) fn unpark(p: Parked, cfg: H2Settings, server_name: Option<&'static str>, timeouts: Timeouts) -> Proto {
        let Parked {
            hdec,
            henc_max,
            closed,
            budget,
            send_flow,
            recv_flow,
            peer_initial_window,
            active_at,
            last_id,
            peer_max_frame,
            requests,
            no_rfc7540,
        } = p;
        Proto {
            closed,
            last_id,
            hdec,
            henc: hpack::Encoder::emptying(henc_max),
            peer_initial_window,
            peer_max_frame,
            send_flow,
            recv_flow,
            got_settings: true,
            requests,
            no_rfc7540,
            budget,
            timeouts,
            active_at,
            ..Proto::blank(cfg, server_name)
        }
    }

    /// The graceful end of a connection whose driver no longer runs (it is parked, or its
    /// task is being stopped while it waits): the GOAWAY(NO_ERROR) to write at once, on a
    /// socket with nothing else in flight. `None` when something is queued or a GOAWAY
    /// went out already (then the connection just closes).
    pub(crate) fn farewell(&mut self) -> Option<[u8; FAREWELL_LEN]> {
        if self.failed.is_some() || self.draining || !self.control.is_empty() || !self.queue.is_empty() {
            return None;
        }
        self.failed = Some(Reason::NO_ERROR);
        Some(farewell(self.last_id))
    }

    /// Ends the connection with a connection error: GOAWAY with the last stream id.
    pub(crate) fn go_away(&mut self, reason: Reason) {
        if self.failed.is_some() {
            return;
        }
        frame::GoAway { last_stream: self.last_id, reason, debug: Bytes::new() }.encode(&mut self.control);
        crate::stats::h2_goaway_sent(reason.0);
        self.failed = Some(reason);
        for (_, s) in self.streams.iter_mut() {
            s.recv_error = Some(reason);
            s.wake_reader();
            s.wake_writer();
        }
    }

    /// Graceful shutdown: GOAWAY(NO_ERROR) with the last stream id; the streams we have
    /// are finished, new ones are ignored.
    pub(crate) fn shutdown(&mut self) {
        if self.draining || self.failed.is_some() {
            return;
        }
        self.draining = true;
        frame::GoAway { last_stream: self.last_id, reason: Reason::NO_ERROR, debug: Bytes::new() }
            .encode(&mut self.control);
        crate::stats::h2_goaway_sent(0);
    }

    /// Handles the next whole frame at the start of `buf`, if there is one (`Ok(true)`: a
    /// frame was consumed). HEADERS frames are decoded in place; other frames are cut off
    /// the buffer (DATA payloads are shared, not copied). A frame error that is only a
    /// stream's has been dealt with (RST_STREAM queued) when this returns `Ok`.
    ///
    /// # Errors
    /// A connection error's code: call [`Proto::go_away`] with it.
    pub(crate) fn handle_bytes(&mut self, buf: &mut BytesMut, now: u64) -> Result<bool, Reason> {
        let max = self.max_frame_size();
        if buf.len() >= frame::HEADER_LEN {
            let head = frame::Head::parse(buf[..frame::HEADER_LEN].try_into().expect("nine bytes"));
            let total = frame::HEADER_LEN + head.len as usize;
            if head.kind == frame::kind::HEADERS && head.len <= max && buf.len() >= total {
                let r = match frame::Headers::parse_ref(head, &buf[frame::HEADER_LEN..total]) {
                    Ok(h) => self.recv_headers_ref(h, now),
                    Err(e) => self.recv_error(e),
                };
                bytes::Buf::advance(buf, total);
                return r.map(|()| true);
            }
        }
        match super::codec::decode_frame(buf, max) {
            Ok(Some(f)) => self.handle_frame(f, now).map(|()| true),
            Ok(None) => Ok(false),
            // The frame is already cut off the buffer.
            Err(e) => self.recv_error(e).map(|()| true),
        }
    }

    /// [`Proto::handle_bytes`] until `buf` holds no whole frame; a connection error ends the
    /// connection ([`Proto::go_away`]) and is returned.
    pub(crate) fn handle_all(&mut self, buf: &mut BytesMut, now: u64) -> Option<Reason> {
        loop {
            match self.handle_bytes(buf, now) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(r) => {
                    self.go_away(r);
                    return Some(r);
                }
            }
        }
    }

    /// [`Proto::handle_frame`] for a HEADERS frame borrowed from the receive buffer.
    fn recv_headers_ref(&mut self, h: frame::HeadersRef<'_>, now: u64) -> Result<(), Reason> {
        self.now = now;
        self.active_at = Some(now);
        self.budget.tick(now);
        if !self.got_settings || self.block.is_some() {
            return Err(Reason::PROTOCOL_ERROR);
        }
        self.recv_headers(h.stream, h.fragment, h.end_stream, h.end_headers, h.dependency)
    }

    /// Handles one frame arriving at `now` (milliseconds of the driver's clock).
    ///
    /// # Errors
    /// A connection error's code: call [`Proto::go_away`] with it.
    pub(crate) fn handle_frame(&mut self, f: Frame, now: u64) -> Result<(), Reason> {
        self.now = now;
        self.budget.tick(now);
        if !self.got_settings {
            match &f {
                Frame::Settings(s) if !s.ack => {
                    self.got_settings = true;
                    // The idle deadline begins.
                    self.timers_changed = true;
                }
                _ => return Err(Reason::PROTOCOL_ERROR),
            }
        }
        self.active_at = Some(now);
        if let Some(b) = &self.block {
            match &f {
                Frame::Continuation(c) if c.stream == b.stream => {}
                _ => return Err(Reason::PROTOCOL_ERROR),
            }
        }
        match f {
            Frame::Data(d) => self.recv_data(d),
            Frame::Headers(h) => self.recv_headers(h.stream, &h.fragment, h.end_stream, h.end_headers, h.dependency),
            Frame::Continuation(c) => self.recv_continuation(c),
            Frame::Priority(p) => {
                self.budget.control()?;
                if p.dependency.stream == p.stream {
                    // A stream error (RFC 9113 §5.3.1) that we treat as a connection error
                    // (§5.4: allowed): no client means it, and a reset would let one
                    // connection provoke `max_local_resets` of them (MadeYouReset).
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if !self.no_rfc7540 && self.keeps_priority(p.stream) {
                    let mut prec = self.queue.precedence(p.stream);
                    prec.weight = p.dependency.weight;
                    self.queue.set_precedence(p.stream, prec);
                }
                Ok(())
            }
            Frame::PriorityUpdate(u) => {
                self.budget.control()?;
                if u.stream % 2 == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if self.keeps_priority(u.stream) {
                    let mut prec = Precedence { incremental: false, ..self.queue.precedence(u.stream) };
                    prec.apply_field(&u.value);
                    self.queue.set_precedence(u.stream, prec);
                }
                Ok(())
            }
            Frame::RstStream(r) => self.recv_reset(r.stream, r.reason),
            Frame::Settings(s) => self.recv_settings(s),
            Frame::PushPromise(_) => Err(Reason::PROTOCOL_ERROR),
            Frame::Ping(p) => {
                self.budget.control()?;
                if !p.ack {
                    frame::Ping { ack: true, payload: p.payload }.encode(&mut self.control);
                }
                self.check_control_queue()
            }
            Frame::GoAway(_) => {
                self.peer_goaway = true;
                Ok(())
            }
            Frame::WindowUpdate(w) => self.recv_window_update(w.stream, w.increment),
            Frame::Unknown(_) => Ok(()),
        }
    }

    /// Parses and handles a frame error from the frame layer.
    ///
    /// # Errors
    /// As [`Proto::handle_frame`].
    pub(crate) fn recv_error(&mut self, e: frame::Error) -> Result<(), Reason> {
        match e {
            frame::Error::Connection(r) => Err(r),
            frame::Error::Stream(id, r) => {
                if self.block.is_some() {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                self.reset(id, r)
            }
        }
    }

    /// Whether a priority signal for `id` is recorded: for open streams, and for a bounded
    /// number of idle ones (signals for closed streams are dropped, so a peer cannot make
    /// the queue remember ids without limit).
    fn keeps_priority(&self, id: u32) -> bool {
        self.streams.contains_key(&id)
            || (id > self.last_id && self.queue.tracked() < 2 * self.cfg.max_concurrent_streams as usize + 16)
    }

    /// A peer that makes us queue control frames faster than it reads them is cut off.
    fn check_control_queue(&self) -> Result<(), Reason> {
        if self.control.len() > self.cfg.max_control_queue {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    /// Resets a stream with `reason` (a stream error, RFC 9113 §5.4.2).
    fn reset(&mut self, id: u32, reason: Reason) -> Result<(), Reason> {
        frame::RstStream { stream: id, reason }.encode(&mut self.control);
        crate::stats::h2_reset_sent(reason.0);
        if let Some(mut s) = self.take_stream(id) {
            s.recv_error = Some(reason);
            s.wake_reader();
            s.wake_writer();
            self.cancel_app(id);
        }
        self.forget(id, Cause::Reset);
        if reason != Reason::NO_ERROR && reason != Reason::REFUSED_STREAM {
            // MadeYouReset: resets the peer provokes count against a budget too.
            self.budget.local_reset()?;
        }
        self.check_control_queue()
    }

    /// Stream `id` ended before its app finished: a request still waiting in this batch's
    /// events is dropped (its app never starts: a stream opened and reset in one read costs
    /// no task), else the driver is told to stop the app.
    fn cancel_app(&mut self, id: u32) {
        match self.events.iter().rposition(|e| matches!(e, Event::Request(r, ..) if *r == id)) {
            Some(i) => drop(self.events.remove(i)),
            None => self.events.push(Event::Cancel(id)),
        }
    }

    /// Removes a stream from the map, keeping the stalled-stream count right.
    fn take_stream(&mut self, id: u32) -> Option<Stream> {
        self.unstall(id);
        self.streams.remove(&id)
    }

    /// Before `id` leaves the map: it no longer counts as held back by its window.
    fn unstall(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(|s| s.win_blocked) {
            self.win_blocked -= 1;
        }
    }

    /// Forgets a closed stream (remembering its id for a while).
    fn forget(&mut self, id: u32, cause: Cause) {
        self.queue.forget(id);
        if self.closed.len() == CLOSED_MEMORY {
            self.closed.pop_front();
        }
        self.closed.push_back((id, cause));
    }

    fn close(&mut self, id: u32) {
        self.unstall(id);
        // Dropped where it lies (a stream is a few hundred bytes: no move out).
        if self.streams.delete(&id) {
            self.forget(id, Cause::Ended);
        }
    }

    /// How a frame for `id`, which is not an open stream, is treated: `None` for an idle
    /// stream, `Some(true)` for one we reset (its late frames are ignored), `Some(false)`
    /// for one closed otherwise.
    fn closed_kind(&self, id: u32) -> Option<bool> {
        if id > self.last_id {
            return None;
        }
        Some(self.closed.iter().rev().find(|(i, _)| *i == id).is_some_and(|(_, c)| *c != Cause::Ended))
    }

    fn recv_data(&mut self, d: frame::Data) -> Result<(), Reason> {
        // The connection window is granted back as data arrives; each stream's window
        // bounds what waits in memory for its app.
        self.recv_flow.recv_data(d.flow_len)?;
        if let Some(inc) = self.recv_flow.release(d.flow_len, self.cfg.connection_window / 2) {
            frame::WindowUpdate { stream: 0, increment: inc }.encode(&mut self.control);
        }
        if d.flow_len == 0 && !d.end_stream {
            self.budget.empty()?;
        }
        let id = d.stream;
        let Some(s) = self.streams.get_mut(&id) else {
            return match self.closed_kind(id) {
                None => Err(Reason::PROTOCOL_ERROR),
                Some(true) => Ok(()),
                Some(false) => self.reset(id, Reason::STREAM_CLOSED),
            };
        };
        if !s.state.can_recv() {
            return self.reset(id, Reason::STREAM_CLOSED);
        }
        if let Err(r) = s.recv_flow.recv_data(d.flow_len) {
            return self.reset(id, r);
        }
        let data_len = d.data.len();
        s.received += d.data.len() as u64;
        if s.drain_until.is_some_and(|n| s.received > n) {
            // Answered, body unread, and more of it than we discard: stop it.
            self.reset_for(id, Reason::NO_ERROR, Cause::Reset);
            return Ok(());
        }
        if s.content_length.is_some_and(|n| s.received > n || (d.end_stream && s.received != n)) {
            return self.reset(id, Reason::PROTOCOL_ERROR);
        }
        // Padding, and data for an app that dropped its body, is granted back at once.
        let mut credit = d.flow_len - d.data.len() as u32;
        if s.body_dropped {
            credit += d.data.len() as u32;
        } else if !d.data.is_empty() {
            s.inbox.push(d.data);
        }
        if d.end_stream {
            s.state = s.state.recv_end();
        }
        s.wake_reader();
        self.body_progress(id, data_len, d.end_stream);
        if credit > 0 && !d.end_stream {
            self.grant(id, credit);
        }
        if d.end_stream && self.streams.get(&id).is_some_and(|s| s.state == State::Closed) {
            self.close(id);
        }
        Ok(())
    }

    /// Returns `n` octets of receive window to stream `id` once enough has accumulated.
    pub(crate) fn grant(&mut self, id: u32, n: u32) {
        let threshold = self.cfg.initial_window_size / 2;
        let Some(s) = self.streams.get_mut(&id) else { return };
        if !s.state.can_recv() {
            return;
        }
        if let Some(inc) = s.recv_flow.release(n, threshold) {
            frame::WindowUpdate { stream: id, increment: inc }.encode(&mut self.control);
        }
    }

    fn skip_block(&mut self, block: &[u8]) -> Result<(), Reason> {
        self.arm_decoder();
        headers::skip(&mut self.hdec, block).map_err(conn_error)
    }

    /// Tells the decoder where a block overspends the refused-header budget (an HPACK
    /// bomb): it gives up there, and the connection ends.
    #[inline]
    fn arm_decoder(&mut self) {
        let limit = self.cfg.max_header_list_size as usize;
        self.hdec.set_abandon_list_size(budget::abandon_size(self.budget.refused_room(), limit));
    }

    /// What a refused block costs the budget: by how far it went over the limit.
    fn refused_cost(&self) -> u32 {
        budget::refused_cost(self.hdec.last_list_size(), self.cfg.max_header_list_size as usize)
    }

    fn headers_complete(
        &mut self,
        id: u32,
        block: &[u8],
        end_stream: bool,
        dep: Option<frame::StreamDependency>,
    ) -> Result<(), Reason> {
        if id % 2 == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if let Some(s) = self.streams.get(&id) {
            // Trailers (or a second HEADERS, which is malformed).
            if !s.state.can_recv() {
                self.skip_block(block)?;
                return self.reset(id, Reason::STREAM_CLOSED);
            }
            if !end_stream {
                self.skip_block(block)?;
                return self.reset(id, Reason::PROTOCOL_ERROR);
            }
            self.arm_decoder();
            return match headers::trailers(Hpack(&mut self.hdec, block)) {
                Err(e @ (HeaderError::Compression | HeaderError::Abandoned)) => Err(conn_error(e)),
                Err(_) => self.reset(id, Reason::PROTOCOL_ERROR),
                Ok(()) => {
                    let s = self.streams.get_mut(&id).expect("present");
                    if s.content_length.is_some_and(|n| n != s.received) {
                        return self.reset(id, Reason::PROTOCOL_ERROR);
                    }
                    s.state = s.state.recv_end();
                    s.wake_reader();
                    if s.state == State::Closed {
                        self.close(id);
                    }
                    Ok(())
                }
            };
        }
        match self.closed_kind(id) {
            None => {}
            Some(true) => return self.skip_block(block),
            Some(false) => {
                self.skip_block(block)?;
                let recent = self.closed.iter().any(|(i, _)| *i == id);
                return Err(if recent { Reason::STREAM_CLOSED } else { Reason::PROTOCOL_ERROR });
            }
        }
        self.last_id = id;
        if dep.is_some_and(|d| d.stream == id) {
            // As a self-dependent PRIORITY: the connection ends.
            return Err(Reason::PROTOCOL_ERROR);
        }
        if self.draining || self.failed.is_some() {
            // After our GOAWAY, new streams are ignored (RFC 9113 §6.8).
            return self.skip_block(block);
        }
        if self.streams.len() >= self.cfg.max_concurrent_streams as usize {
            self.skip_block(block)?;
            return self.reset(id, Reason::REFUSED_STREAM);
        }
        self.arm_decoder();
        let head =
            match headers::request(Hpack(&mut self.hdec, block), self.cfg.enable_connect_protocol, &mut self.arena) {
                Ok(h) => Some(h),
                Err(e @ (HeaderError::Compression | HeaderError::Abandoned)) => return Err(conn_error(e)),
                Err(HeaderError::Malformed) => {
                    self.budget.refused(1)?;
                    return self.reset(id, Reason::PROTOCOL_ERROR);
                }
                Err(HeaderError::TooLarge) => {
                    // Over the limit: 431, costing the budget by how far over (an HPACK bomb
                    // that stays under the stream limits ends the connection at once).
                    self.budget.refused(self.refused_cost())?;
                    None
                }
            };
        let state = if end_stream { State::HalfClosedRemote } else { State::Open };
        let mut prec = self.queue.precedence(id);
        if let Some(d) = dep.filter(|_| !self.no_rfc7540) {
            prec.weight = d.weight;
        }
        let (content_length, is_head, answer) = match head {
            Some(h) => {
                if end_stream && h.content_length.is_some_and(|n| n != 0) {
                    return self.reset(id, Reason::PROTOCOL_ERROR);
                }
                if let Some(p) = &h.priority {
                    prec.incremental = false;
                    prec.apply_field(p);
                }
                let (cl, is_head) = (h.content_length, h.req.method == http::Method::HEAD);
                self.events.push(Event::Request(id, h.req, !end_stream));
                (cl, is_head, None)
            }
            None => {
                // The header list is over our limit: 431, without running the app.
                let res = crate::app::response::Response::error(http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
                let (status, headers, _) = res.into_fields();
                self.queue.push(id, 0);
                (None, false, Some(Send::Head { status, shared: None, headers, length: None, body: OutBody::Empty }))
            }
        };
        if prec != self.queue.precedence(id) {
            self.queue.set_precedence(id, prec);
        }
        // Built in its slot (a stream is a few hundred bytes: no moves).
        let (send_window, recv_window) = (self.peer_initial_window, self.cfg.initial_window_size as i64);
        let s = self.streams.insert_new(id, || Stream::new(state, send_window, recv_window));
        s.content_length = content_length;
        s.is_head = is_head;
        if let Some(send) = answer {
            s.body_dropped = true;
            s.send = send;
        }
        self.requests += 1;
        if self.requests >= self.cfg.max_requests || id == MAX_WINDOW {
            // No more streams on this connection (the limit, or client ids exhausted).
            self.shutdown();
        }
        Ok(())
    }

    fn recv_reset(&mut self, id: u32, reason: Reason) -> Result<(), Reason> {
        if id > self.last_id {
            return Err(Reason::PROTOCOL_ERROR);
        }
        crate::stats::h2_reset_received(reason.0);
        if let Some(mut s) = self.take_stream(id) {
            s.recv_error = Some(reason);
            s.wake_reader();
            s.wake_writer();
            self.cancel_app(id);
            self.forget(id, Cause::Ended);
            // Rapid reset (CVE-2023-44487): streams the peer opens and cancels cost us a
            // task each; past the budget the connection ends.
            self.budget.peer_reset()?;
        }
        Ok(())
    }

    fn recv_settings(&mut self, s: frame::Settings) -> Result<(), Reason> {
        self.budget.control()?;
        if s.ack {
            return Ok(());
        }
        self.apply_settings(s)?;
        frame::Settings::encode_ack(&mut self.control);
        self.check_control_queue()
    }

    fn apply_settings(&mut self, s: frame::Settings) -> Result<(), Reason> {
        for (id, v) in s.values {
            match id {
                Setting::HEADER_TABLE_SIZE => self.henc.update_max_size((v as usize).min(hpack::DEFAULT_TABLE_SIZE)),
                Setting::INITIAL_WINDOW_SIZE => {
                    let delta = v as i64 - self.peer_initial_window;
                    self.peer_initial_window = v as i64;
                    let mut reopened = Vec::new();
                    for (&sid, st) in self.streams.iter_mut() {
                        let before = st.send_flow.window();
                        st.send_flow.shift(delta)?;
                        if before <= 0 && st.send_flow.window() > 0 {
                            reopened.push(sid);
                        }
                    }
                    for sid in reopened {
                        self.schedule(sid);
                    }
                }
                Setting::MAX_FRAME_SIZE => self.peer_max_frame = v,
                Setting::NO_RFC7540_PRIORITIES => self.no_rfc7540 = v == 1,
                _ => {}
            }
        }
        Ok(())
    }

    fn recv_window_update(&mut self, id: u32, inc: u32) -> Result<(), Reason> {
        if id == 0 {
            self.send_flow.inc_window(inc)?;
            for sid in std::mem::take(&mut self.conn_blocked) {
                if let Some(s) = self.streams.get_mut(&sid) {
                    s.conn_blocked = false;
                }
                self.schedule(sid);
            }
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return match self.closed_kind(id) {
                None => Err(Reason::PROTOCOL_ERROR),
                Some(_) => Ok(()),
            };
        };
        if let Err(r) = s.send_flow.inc_window(inc) {
            return self.reset(id, r);
        }
        self.schedule(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
