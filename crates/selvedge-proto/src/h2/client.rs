//! The client side of an HTTP/2 connection (RFC 9113), sans-IO: the proxy's HTTP/2
//! upstreams use it. Bytes from the server go in ([`Client::handle_bytes`]), frames to send
//! come out ([`Client::poll_transmit`]), and what happened on each stream is read with
//! [`Client::poll_event`]. No socket, no clock: the driver owns both.
//!
//! It shares the server's framing ([`super::frame`], [`super::codec`]), HPACK
//! ([`crate::hpack`]) and flow-control windows ([`super::flow`]).
//!
//! Streams (§5.1), as a client sees them:
//!
//! ```text
//!             open(end_stream = false)           open(end_stream = true)
//!   idle ──────────────────────────────► open ──────────────────────► half-closed (local)
//!                                          │  recv END_STREAM               │ recv END_STREAM
//!                                          ▼                                ▼
//!                               half-closed (remote) ── send END_STREAM ──► closed
//!   RST_STREAM either way, or a GOAWAY whose last_stream_id is below the stream: closed.
//! ```
//!
//! - **Concurrency**: [`Client::can_open`] holds new streams to the server's
//!   SETTINGS_MAX_CONCURRENT_STREAMS (100 until its first SETTINGS says otherwise), and
//!   refuses them after a GOAWAY either way.
//! - **Flow control**: DATA goes out only within both windows ([`Client::send_data`]
//!   takes what fits); received DATA is given back with [`Client::release`] once the
//!   consumer has taken it, so a slow consumer closes the server's window (backpressure).
//! - **Heads**: responses are checked as §8.3.2 asks (`:status` first and alone among
//!   pseudo-fields, lowercase names, no connection-specific fields); interim 1xx heads are
//!   dropped; a second head is a trailer section (END_STREAM required). A malformed head
//!   resets the stream with PROTOCOL_ERROR and is reported as [`Event::Reset`].
//! - **GOAWAY**: streams above the server's `last_stream_id` were never processed: each
//!   is reported as reset with REFUSED_STREAM, like an RST_STREAM(REFUSED_STREAM), so the
//!   caller may retry them elsewhere.
//! - Server push is turned off (SETTINGS_ENABLE_PUSH = 0), so PUSH_PROMISE is a
//!   connection PROTOCOL_ERROR.

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue};

use super::codec;
use super::flow::FlowControl;
use super::frame::{self, Error, Frame, Reason, Setting, DEFAULT_WINDOW};
use super::state::State;
use crate::hpack::{self, Token};

/// The client's own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSettings {
    /// SETTINGS_INITIAL_WINDOW_SIZE: what the server may send on a stream before the
    /// consumer takes it.
    pub stream_window: u32,
    /// The connection's receive window (all streams together).
    pub conn_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: larger response heads reset their stream.
    pub max_header_list: u32,
    /// SETTINGS_MAX_FRAME_SIZE we accept.
    pub max_frame: u32,
}

impl Default for ClientSettings {
    fn default() -> ClientSettings {
        ClientSettings {
            stream_window: 256 * 1024,
            conn_window: 4 * 1024 * 1024,
            max_header_list: 64 * 1024,
            max_frame: 16_384,
        }
    }
}

/// A response head or trailer section: field names as the `http` crate holds them.
pub type Fields = Vec<(HeaderName, HeaderValue)>;

/// What happened on the connection, for the driver to hand to each stream's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The final response head of `stream`.
    Head {
        /// The stream.
        stream: u32,
        /// The status (200 to 999).
        status: u16,
        /// The fields (no pseudo-fields).
        fields: Fields,
        /// There is no body (nor trailers).
        end_stream: bool,
    },
    /// Body bytes; give them back with [`Client::release`] once consumed.
    Data {
        /// The stream.
        stream: u32,
        /// The bytes (may be empty with `end_stream`).
        data: Bytes,
        /// The response is complete.
        end_stream: bool,
    },
    /// The trailer section, which ends the response.
    Trailers {
        /// The stream.
        stream: u32,
        /// The fields.
        fields: Fields,
    },
    /// The stream is gone: reset by the server (or by us for a malformed response), or
    /// refused by a GOAWAY (REFUSED_STREAM: the server never processed it).
    Reset {
        /// The stream.
        stream: u32,
        /// Why.
        reason: Reason,
    },
}

#[derive(Debug)]
struct Stream {
    send_flow: FlowControl,
    recv_flow: FlowControl,
    /// A final head arrived.
    got_head: bool,
    /// Which ends are closed (the states the server role uses, seen from this side).
    state: State,
}

/// A header block being received in HEADERS + CONTINUATION frames.
#[derive(Debug)]
struct Partial {
    stream: u32,
    end_stream: bool,
    block: Vec<u8>,
}

/// One client connection; see the module's text.
#[derive(Debug)]
pub struct Client {
    cfg: ClientSettings,
    out: BytesMut,
    henc: hpack::Encoder,
    hdec: hpack::Decoder,
    scratch: BytesMut,
    streams: HashMap<u32, Stream>,
    next_id: u32,
    peer_max_streams: u32,
    /// The peer's first SETTINGS frame has arrived (its limits are known).
    peer_settled: bool,
    peer_initial_window: u32,
    peer_max_frame: u32,
    send_flow: FlowControl,
    recv_flow: FlowControl,
    partial: Option<Partial>,
    events: VecDeque<Event>,
    /// The server's GOAWAY `last_stream_id`.
    goaway: Option<u32>,
    /// The connection failed (our GOAWAY went out, or the server's said so).
    failed: Option<Reason>,
}

/// Header fields not allowed in HTTP/2 (§8.2.2).
fn connection_specific(name: &[u8]) -> bool {
    matches!(name, b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade")
}

impl Client {
    /// A connection: the preface, our SETTINGS and the connection window's increase are
    /// queued for output at once (prior knowledge, or after ALPN `h2`).
    pub fn new(cfg: ClientSettings) -> Client {
        let mut out = BytesMut::with_capacity(128);
        out.extend_from_slice(codec::PREFACE);
        frame::Settings {
            ack: false,
            values: vec![
                (Setting::ENABLE_PUSH, 0),
                (Setting::INITIAL_WINDOW_SIZE, cfg.stream_window),
                (Setting::MAX_FRAME_SIZE, cfg.max_frame),
                (Setting::MAX_HEADER_LIST_SIZE, cfg.max_header_list),
            ],
        }
        .encode(&mut out);
        if cfg.conn_window > DEFAULT_WINDOW {
            frame::WindowUpdate { stream: 0, increment: cfg.conn_window - DEFAULT_WINDOW }.encode(&mut out);
        }
        let mut hdec = hpack::Decoder::new(4096);
        hdec.set_max_header_list_size(cfg.max_header_list as usize);
        Client {
            cfg,
            out,
            henc: hpack::Encoder::new(),
            hdec,
            scratch: BytesMut::new(),
            streams: HashMap::new(),
            next_id: 1,
            peer_max_streams: 100,
            peer_settled: false,
            peer_initial_window: DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            send_flow: FlowControl::new(i64::from(DEFAULT_WINDOW)),
            recv_flow: FlowControl::new(i64::from(cfg.conn_window.max(DEFAULT_WINDOW))),
            partial: None,
            events: VecDeque::new(),
            goaway: None,
            failed: None,
        }
    }

    /// Streams open now.
    pub fn active(&self) -> usize {
        self.streams.len()
    }

    /// Whether the server's first SETTINGS frame has arrived: until then
    /// [`Client::max_streams`] is an assumption (100), and a server with a lower limit
    /// refuses the streams over it.
    pub fn peer_settled(&self) -> bool {
        self.peer_settled
    }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (100 until it says).
    pub fn max_streams(&self) -> u32 {
        self.peer_max_streams
    }

    /// Whether a new stream may be opened now.
    pub fn can_open(&self) -> bool {
        self.is_usable() && (self.streams.len() as u64) < u64::from(self.peer_max_streams)
    }

    /// Whether the connection takes new streams at all (no GOAWAY either way, ids left).
    pub fn is_usable(&self) -> bool {
        self.goaway.is_none() && self.failed.is_none() && self.next_id < (1 << 31) - 2
    }

    /// The connection is over: failed, or gone away with no stream left.
    pub fn is_done(&self) -> bool {
        self.failed.is_some() || (self.goaway.is_some() && self.streams.is_empty())
    }

    /// Why the connection failed, if it did.
    pub fn failed(&self) -> Option<Reason> {
        self.failed
    }

    /// Opens a stream with the request head `fields` (pseudo-fields first, names in
    /// lowercase: the caller composes them). `None` when [`Client::can_open`] is false.
    pub fn open<'a>(
        &mut self,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
    ) -> Option<u32> {
        if !self.can_open() {
            return None;
        }
        let id = self.next_id;
        self.next_id += 2;
        self.scratch.clear();
        self.henc.encode(fields, &mut self.scratch);
        frame::Headers::encode(id, &self.scratch, end_stream, self.peer_max_frame as usize, &mut self.out);
        self.streams.insert(
            id,
            Stream {
                send_flow: FlowControl::new(i64::from(self.peer_initial_window)),
                recv_flow: FlowControl::new(i64::from(self.cfg.stream_window)),
                got_head: false,
                state: if end_stream { State::Open.send_end() } else { State::Open },
            },
        );
        Some(id)
    }

    /// How many body bytes `id` may send now (both windows).
    pub fn send_capacity(&self, id: u32) -> usize {
        match self.streams.get(&id) {
            Some(s) if s.state.can_send() => s.send_flow.window().min(self.send_flow.window()).max(0) as usize,
            _ => 0,
        }
    }

    /// Sends as much of `data` as the windows allow (taken off its front) as DATA frames;
    /// with `end_stream`, the last frame ends the stream once `data` is all sent (an empty
    /// `data` then sends an empty DATA frame with END_STREAM). Returns `false` when the
    /// stream is gone (reset, or already ended).
    pub fn send_data(&mut self, id: u32, data: &mut Bytes, end_stream: bool) -> bool {
        let max = self.peer_max_frame as usize;
        let Some(s) = self.streams.get_mut(&id) else { return false };
        if !s.state.can_send() {
            return false;
        }
        loop {
            let room = s.send_flow.window().min(self.send_flow.window()).max(0) as usize;
            let n = data.len().min(room).min(max);
            if n == 0 && !data.is_empty() {
                return true;
            }
            let end = end_stream && n == data.len();
            frame::Data::encode_head(id, n, end, &mut self.out);
            self.out.extend_from_slice(&data.split_to(n));
            s.send_flow.send_data(n as u32);
            self.send_flow.send_data(n as u32);
            if end {
                s.state = s.state.send_end();
                if s.state == State::Closed {
                    self.streams.remove(&id);
                }
                return true;
            }
            if data.is_empty() {
                return true;
            }
        }
    }

    /// Ends stream `id` with a trailer section. `false`: the stream is gone.
    pub fn send_trailers<'a>(&mut self, id: u32, fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> bool {
        let Some(s) = self.streams.get_mut(&id) else { return false };
        if !s.state.can_send() {
            return false;
        }
        s.state = s.state.send_end();
        let done = s.state == State::Closed;
        self.scratch.clear();
        self.henc.encode(fields, &mut self.scratch);
        frame::Headers::encode(id, &self.scratch, true, self.peer_max_frame as usize, &mut self.out);
        if done {
            self.streams.remove(&id);
        }
        true
    }

    /// Resets stream `id` (the consumer went away, a timeout): RST_STREAM, and the stream
    /// is forgotten; what the server still sends on it is discarded.
    pub fn reset(&mut self, id: u32, reason: Reason) {
        if self.streams.remove(&id).is_some() {
            frame::RstStream { stream: id, reason }.encode(&mut self.out);
        }
    }

    /// The consumer took `n` body bytes of `id`: the windows reopen (WINDOW_UPDATE once
    /// half a window has been taken).
    pub fn release(&mut self, id: u32, n: usize) {
        let n = n as u32;
        if let Some(inc) = self.recv_flow.release(n, self.cfg.conn_window / 2) {
            frame::WindowUpdate { stream: 0, increment: inc }.encode(&mut self.out);
        }
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.state.can_recv() {
                return;
            }
            if let Some(inc) = s.recv_flow.release(n, self.cfg.stream_window / 2) {
                frame::WindowUpdate { stream: id, increment: inc }.encode(&mut self.out);
            }
        }
    }

    /// Ends the connection from our side with GOAWAY(`reason`).
    pub fn go_away(&mut self, reason: Reason) {
        if self.failed.is_none() {
            frame::GoAway { last_stream: 0, reason, debug: Bytes::new() }.encode(&mut self.out);
            self.failed = Some(reason);
        }
    }

    /// Whether there are bytes to send.
    pub fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Moves the bytes to send into `dst`.
    pub fn poll_transmit(&mut self, dst: &mut Vec<u8>) {
        dst.extend_from_slice(&self.out);
        self.out.clear();
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Processes every whole frame in `buf` (what is left is an incomplete frame).
    ///
    /// # Errors
    /// A connection error: GOAWAY with it has been queued, every stream is reported reset,
    /// and the connection is done.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut) -> Result<(), Reason> {
        if let Some(r) = self.failed {
            return Err(r);
        }
        let r = loop {
            match codec::decode_frame(buf, self.cfg.max_frame) {
                Ok(None) => break Ok(()),
                Ok(Some(f)) => {
                    if let Err(e) = self.recv_frame(f) {
                        break Err(e);
                    }
                }
                Err(Error::Connection(r)) => break Err(r),
                Err(Error::Stream(id, r)) => self.stream_error(id, r),
            }
        };
        if let Err(reason) = r {
            self.go_away(reason);
            self.fail_all(Reason::CANCEL);
        }
        r
    }

    fn fail_all(&mut self, reason: Reason) {
        let mut ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        self.streams.clear();
        for stream in ids {
            self.events.push_back(Event::Reset { stream, reason });
        }
    }

    fn stream_error(&mut self, id: u32, reason: Reason) {
        if self.streams.remove(&id).is_some() {
            frame::RstStream { stream: id, reason }.encode(&mut self.out);
            self.events.push_back(Event::Reset { stream: id, reason });
        }
    }

    /// A stream id the server may use: ours, opened already (else PROTOCOL_ERROR).
    fn check_id(&self, id: u32) -> Result<(), Reason> {
        if id % 2 == 0 || id >= self.next_id {
            return Err(Reason::PROTOCOL_ERROR);
        }
        Ok(())
    }

    fn recv_frame(&mut self, f: Frame) -> Result<(), Reason> {
        if let Some(p) = &self.partial {
            match &f {
                Frame::Continuation(c) if c.stream == p.stream => {}
                _ => return Err(Reason::PROTOCOL_ERROR),
            }
        }
        match f {
            Frame::Settings(s) => {
                if s.ack {
                    return Ok(());
                }
                self.peer_settled = true;
                for (id, v) in s.values {
                    match id {
                        Setting::HEADER_TABLE_SIZE => self.henc.update_max_size(v as usize),
                        Setting::MAX_CONCURRENT_STREAMS => self.peer_max_streams = v,
                        Setting::INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(v) - i64::from(self.peer_initial_window);
                            self.peer_initial_window = v;
                            for s in self.streams.values_mut() {
                                s.send_flow.shift(delta)?;
                            }
                        }
                        Setting::MAX_FRAME_SIZE => self.peer_max_frame = v,
                        _ => {}
                    }
                }
                frame::Settings::encode_ack(&mut self.out);
            }
            Frame::Ping(p) => {
                if !p.ack {
                    frame::Ping { ack: true, payload: p.payload }.encode(&mut self.out);
                }
            }
            Frame::GoAway(g) => {
                let last = g.last_stream;
                self.goaway = Some(self.goaway.map_or(last, |l| l.min(last)));
                let mut refused: Vec<u32> = self.streams.keys().copied().filter(|&id| id > last).collect();
                refused.sort_unstable();
                for stream in refused {
                    self.streams.remove(&stream);
                    self.events.push_back(Event::Reset { stream, reason: Reason::REFUSED_STREAM });
                }
                if g.reason != Reason::NO_ERROR && self.streams.is_empty() {
                    self.failed = Some(g.reason);
                }
            }
            Frame::WindowUpdate(w) => {
                if w.stream == 0 {
                    self.send_flow.inc_window(w.increment)?;
                } else {
                    self.check_id(w.stream)?;
                    if let Some(s) = self.streams.get_mut(&w.stream) {
                        if s.send_flow.inc_window(w.increment).is_err() {
                            self.stream_error(w.stream, Reason::FLOW_CONTROL_ERROR);
                        }
                    }
                }
            }
            Frame::RstStream(r) => {
                self.check_id(r.stream)?;
                if self.streams.remove(&r.stream).is_some() {
                    self.events.push_back(Event::Reset { stream: r.stream, reason: r.reason });
                }
            }
            Frame::Data(d) => self.recv_data(d)?,
            Frame::Headers(h) => {
                self.check_id(h.stream)?;
                let p = Partial { stream: h.stream, end_stream: h.end_stream, block: h.fragment.to_vec() };
                if h.end_headers {
                    self.recv_block(p)?;
                } else {
                    self.partial = Some(p);
                }
            }
            Frame::Continuation(c) => {
                let Some(mut p) = self.partial.take() else { return Err(Reason::PROTOCOL_ERROR) };
                p.block.extend_from_slice(&c.fragment);
                if p.block.len() > self.cfg.max_header_list as usize * 2 + 16 * 1024 {
                    return Err(Reason::ENHANCE_YOUR_CALM);
                }
                if c.end_headers {
                    self.recv_block(p)?;
                } else {
                    self.partial = Some(p);
                }
            }
            Frame::PushPromise(_) => return Err(Reason::PROTOCOL_ERROR),
            Frame::Priority(_) | Frame::PriorityUpdate(_) | Frame::Unknown(_) => {}
        }
        Ok(())
    }

    fn recv_data(&mut self, d: frame::Data) -> Result<(), Reason> {
        self.check_id(d.stream)?;
        self.recv_flow.recv_data(d.flow_len)?;
        let padding = d.flow_len - d.data.len() as u32;
        let Some(s) = self.streams.get_mut(&d.stream) else {
            // A stream we reset or finished: its bytes only count for the connection.
            self.release(d.stream, d.flow_len as usize);
            return Ok(());
        };
        if !s.got_head || !s.state.can_recv() {
            self.stream_error(d.stream, Reason::PROTOCOL_ERROR);
            self.release(d.stream, d.flow_len as usize);
            return Ok(());
        }
        if s.recv_flow.recv_data(d.flow_len).is_err() {
            self.stream_error(d.stream, Reason::FLOW_CONTROL_ERROR);
            self.release(d.stream, d.flow_len as usize);
            return Ok(());
        }
        if d.end_stream {
            self.end_remote(d.stream);
        }
        if padding > 0 {
            self.release(d.stream, padding as usize);
        }
        if !d.data.is_empty() || d.end_stream {
            self.events.push_back(Event::Data { stream: d.stream, data: d.data, end_stream: d.end_stream });
        }
        Ok(())
    }

    fn end_remote(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.state = s.state.recv_end();
            if s.state == State::Closed {
                self.streams.remove(&id);
            }
        }
    }

    /// A complete header block on `p.stream`: decoded always (the HPACK table must stay
    /// in step), then a head, an interim head, or trailers.
    fn recv_block(&mut self, p: Partial) -> Result<(), Reason> {
        let mut status: Option<u16> = None;
        // Values are gathered in one buffer and shared by the fields (one allocation per
        // block, not one per value).
        let mut names: Vec<(HeaderName, usize, usize)> = Vec::new();
        let mut values = BytesMut::with_capacity(p.block.len().saturating_mul(2).max(256));
        let mut bad = false;
        let mut seen_regular = false;
        let r = self.hdec.decode(&p.block, |f| {
            let name = f.name.as_bytes();
            if let Some(pseudo) = name.strip_prefix(b":") {
                if pseudo != b"status" || status.is_some() || seen_regular {
                    bad = true;
                    return;
                }
                let v = f.value.as_bytes();
                status = match v {
                    [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
                        Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
                    }
                    _ => {
                        bad = true;
                        None
                    }
                };
                return;
            }
            seen_regular = true;
            if name.iter().any(u8::is_ascii_uppercase) || connection_specific(name) {
                bad = true;
                return;
            }
            if f.token == Some(Token::Te) && f.value.as_bytes() != b"trailers" {
                bad = true;
                return;
            }
            match crate::message::field_name(name) {
                Ok(n) => {
                    let start = values.len();
                    values.extend_from_slice(f.value.as_bytes());
                    names.push((n, start, values.len()));
                }
                Err(_) => bad = true,
            }
        });
        let values = values.freeze();
        let mut fields: Fields = Vec::with_capacity(names.len());
        for (n, start, end) in names {
            match HeaderValue::from_maybe_shared(values.slice(start..end)) {
                Ok(v) => fields.push((n, v)),
                Err(_) => bad = true,
            }
        }
        match r {
            Ok(()) => {}
            Err(hpack::DecodeError::HeaderListTooLarge) => bad = true,
            Err(_) => return Err(Reason::COMPRESSION_ERROR),
        }
        let id = p.stream;
        let Some(s) = self.streams.get_mut(&id) else { return Ok(()) };
        if bad || !s.state.can_recv() {
            self.stream_error(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        if !s.got_head {
            let Some(status) = status else {
                self.stream_error(id, Reason::PROTOCOL_ERROR);
                return Ok(());
            };
            if status < 200 {
                if p.end_stream {
                    self.stream_error(id, Reason::PROTOCOL_ERROR);
                }
                return Ok(());
            }
            s.got_head = true;
            if p.end_stream {
                self.end_remote(id);
            }
            self.events.push_back(Event::Head { stream: id, status, fields, end_stream: p.end_stream });
            return Ok(());
        }
        // A trailer section: no pseudo-fields, and it ends the stream.
        if status.is_some() || !p.end_stream {
            self.stream_error(id, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        self.end_remote(id);
        self.events.push_back(Event::Trailers { stream: id, fields });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::frame::{flag, kind, Head};

    /// A scripted server: encodes frames the way a real one would.
    struct Server {
        enc: hpack::Encoder,
    }

    impl Server {
        fn new() -> Server {
            Server { enc: hpack::Encoder::new() }
        }

        fn head(&mut self, out: &mut BytesMut, id: u32, fields: &[(&str, &str)], end: bool) {
            let mut block = BytesMut::new();
            self.enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
            frame::Headers::encode(id, &block, end, 16_384, out);
        }
    }

    fn data(out: &mut BytesMut, id: u32, b: &[u8], end: bool) {
        frame::Data::encode_head(id, b.len(), end, out);
        out.extend_from_slice(b);
    }

    fn settings(out: &mut BytesMut, values: &[(Setting, u32)]) {
        frame::Settings { ack: false, values: values.to_vec() }.encode(out);
    }

    /// The frames in `c`'s output, with the preface skipped.
    fn sent(c: &mut Client) -> Vec<Frame> {
        let mut v = Vec::new();
        c.poll_transmit(&mut v);
        let mut buf = BytesMut::from(&v[..]);
        if buf.starts_with(codec::PREFACE) {
            let _ = buf.split_to(codec::PREFACE.len());
        }
        let mut frames = Vec::new();
        while let Some(f) = codec::decode_frame(&mut buf, 1 << 20).unwrap() {
            frames.push(f);
        }
        assert!(buf.is_empty());
        frames
    }

    fn events(c: &mut Client) -> Vec<Event> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn get(c: &mut Client) -> u32 {
        let head: [(&[u8], &[u8]); 4] =
            [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"u"), (b":path", b"/")];
        c.open(head, true).unwrap()
    }

    #[test]
    fn preface_settings_and_a_request() {
        let mut c = Client::new(ClientSettings::default());
        let mut v = Vec::new();
        c.poll_transmit(&mut v);
        assert!(v.starts_with(codec::PREFACE));
        let mut buf = BytesMut::from(&v[24..]);
        let Some(Frame::Settings(s)) = codec::decode_frame(&mut buf, 16_384).unwrap() else { panic!() };
        assert!(s.values.contains(&(Setting::ENABLE_PUSH, 0)));
        let Some(Frame::WindowUpdate(w)) = codec::decode_frame(&mut buf, 16_384).unwrap() else { panic!() };
        assert_eq!((w.stream, w.increment), (0, 4 * 1024 * 1024 - 65_535));

        let id = get(&mut c);
        assert_eq!(id, 1);
        let f = sent(&mut c);
        let Frame::Headers(h) = &f[0] else { panic!() };
        assert!(h.end_stream && h.end_headers);
        let mut names = Vec::new();
        hpack::Decoder::new(4096).decode(&h.fragment, |f| names.push(f.name.as_bytes().to_vec())).unwrap();
        assert_eq!(names[0], b":method");

        let mut srv = Server::new();
        let mut input = BytesMut::new();
        settings(&mut input, &[(Setting::MAX_CONCURRENT_STREAMS, 1)]);
        srv.head(&mut input, 1, &[(":status", "100")], false);
        srv.head(&mut input, 1, &[(":status", "200"), ("content-type", "text/plain")], false);
        data(&mut input, 1, b"hello", false);
        srv.head(&mut input, 1, &[("grpc-status", "0")], true);
        // Byte by byte: frames split anywhere.
        let mut buf = BytesMut::new();
        for b in input.iter() {
            buf.extend_from_slice(&[*b]);
            c.handle_bytes(&mut buf).unwrap();
        }
        let ev = events(&mut c);
        assert_eq!(ev.len(), 3, "{ev:?}");
        assert!(
            matches!(&ev[0], Event::Head { stream: 1, status: 200, fields, end_stream: false } if fields[0].0 == "content-type")
        );
        assert_eq!(ev[1], Event::Data { stream: 1, data: Bytes::from_static(b"hello"), end_stream: false });
        assert!(matches!(&ev[2], Event::Trailers { stream: 1, fields } if fields[0].1 == "0"));
        assert_eq!(c.active(), 0);
        assert!(matches!(sent(&mut c)[..], [Frame::Settings(ref s)] if s.ack));
        assert_eq!(c.max_streams(), 1);
    }

    #[test]
    fn concurrency_limit_and_goaway_refuses_streams_above_last() {
        let mut c = Client::new(ClientSettings::default());
        assert!(!c.peer_settled());
        let mut input = BytesMut::new();
        settings(&mut input, &[(Setting::MAX_CONCURRENT_STREAMS, 2)]);
        c.handle_bytes(&mut input).unwrap();
        assert!(c.peer_settled());
        let (a, b) = (get(&mut c), get(&mut c));
        assert_eq!((a, b), (1, 3));
        assert!(!c.can_open());
        let head: [(&[u8], &[u8]); 1] = [(b":method", b"GET")];
        assert_eq!(c.open(head, true), None);
        frame::GoAway { last_stream: 1, reason: Reason::NO_ERROR, debug: Bytes::new() }.encode(&mut input);
        c.handle_bytes(&mut input).unwrap();
        assert_eq!(events(&mut c), [Event::Reset { stream: 3, reason: Reason::REFUSED_STREAM }]);
        assert!(!c.can_open() && !c.is_done());
        let mut srv = Server::new();
        srv.head(&mut input, 1, &[(":status", "204")], true);
        c.handle_bytes(&mut input).unwrap();
        assert!(matches!(events(&mut c)[..], [Event::Head { stream: 1, status: 204, end_stream: true, .. }]));
        assert!(c.is_done());
    }

    #[test]
    fn flow_control_both_ways() {
        let mut c =
            Client::new(ClientSettings { stream_window: 100, conn_window: 65_535, ..ClientSettings::default() });
        let mut input = BytesMut::new();
        settings(&mut input, &[(Setting::INITIAL_WINDOW_SIZE, 10)]);
        c.handle_bytes(&mut input).unwrap();
        let head: [(&[u8], &[u8]); 1] = [(b":method", b"POST")];
        let id = c.open(head, false).unwrap();
        sent(&mut c);
        let mut body = Bytes::from_static(b"0123456789abcdef");
        assert!(c.send_data(id, &mut body, true));
        assert_eq!(&body[..], b"abcdef", "only the stream's window went out");
        assert_eq!(c.send_capacity(id), 0);
        frame::WindowUpdate { stream: id, increment: 100 }.encode(&mut input);
        c.handle_bytes(&mut input).unwrap();
        assert!(c.send_data(id, &mut body, true));
        let f = sent(&mut c);
        assert!(
            matches!(&f[..], [Frame::Data(a), Frame::Data(b)] if a.data.len() == 10 && !a.end_stream && b.end_stream && &b.data[..] == b"abcdef")
        );
        assert!(!c.send_data(id, &mut Bytes::new(), true), "the stream ended");

        // Receive side: past the stream's window is a stream FLOW_CONTROL_ERROR.
        let mut srv = Server::new();
        srv.head(&mut input, id, &[(":status", "200")], false);
        data(&mut input, id, &[b'x'; 60], false);
        c.handle_bytes(&mut input).unwrap();
        c.release(id, 60);
        let f = sent(&mut c);
        assert!(matches!(&f[..], [Frame::WindowUpdate(w)] if w.stream == id && w.increment == 60), "{f:?}");
        data(&mut input, id, &[b'x'; 101], false);
        c.handle_bytes(&mut input).unwrap();
        let ev = events(&mut c);
        assert_eq!(ev.last(), Some(&Event::Reset { stream: id, reason: Reason::FLOW_CONTROL_ERROR }));
        assert!(matches!(sent(&mut c)[..], [Frame::RstStream(r)] if r.reason == Reason::FLOW_CONTROL_ERROR));
    }

    #[test]
    fn malformed_heads_reset_the_stream_and_protocol_errors_end_the_connection() {
        let mut srv = Server::new();
        for bad in [
            &[("content-type", "x")][..],
            &[(":status", "200"), (":path", "/")],
            &[(":status", "2000")],
            &[(":status", "200"), ("connection", "close")],
            &[(":status", "200"), ("Upper", "x")],
        ] {
            let mut c = Client::new(ClientSettings::default());
            let id = get(&mut c);
            sent(&mut c);
            let mut input = BytesMut::new();
            srv.head(&mut input, id, bad, true);
            // Each client gets a fresh table: a fresh server encoder too.
            srv = Server::new();
            c.handle_bytes(&mut input).unwrap();
            assert_eq!(events(&mut c), [Event::Reset { stream: id, reason: Reason::PROTOCOL_ERROR }], "{bad:?}");
        }
        // DATA on an idle stream, and PUSH_PROMISE: connection errors; open streams are reset.
        for wire in [
            {
                let mut b = BytesMut::new();
                data(&mut b, 5, b"x", false);
                b
            },
            {
                let mut b = BytesMut::new();
                Head { len: 4, kind: kind::PUSH_PROMISE, flags: flag::END_HEADERS, stream: 1 }.encode(&mut b);
                b.extend_from_slice(&[0, 0, 0, 2]);
                b
            },
        ] {
            let mut c = Client::new(ClientSettings::default());
            let id = get(&mut c);
            sent(&mut c);
            let mut input = wire;
            assert_eq!(c.handle_bytes(&mut input), Err(Reason::PROTOCOL_ERROR));
            assert_eq!(events(&mut c), [Event::Reset { stream: id, reason: Reason::CANCEL }]);
            assert!(matches!(sent(&mut c)[..], [Frame::GoAway(ref g)] if g.reason == Reason::PROTOCOL_ERROR));
            assert!(c.is_done() && !c.can_open());
        }
    }

    #[test]
    fn frames_after_our_reset_are_discarded_but_decoded() {
        let mut c = Client::new(ClientSettings::default());
        let (a, b) = (get(&mut c), get(&mut c));
        c.reset(a, Reason::CANCEL);
        assert!(matches!(sent(&mut c).last(), Some(Frame::RstStream(r)) if r.stream == a));
        let mut srv = Server::new();
        let mut input = BytesMut::new();
        srv.head(&mut input, a, &[(":status", "200"), ("x-big", "indexed-value")], false);
        data(&mut input, a, b"late", true);
        srv.head(&mut input, b, &[(":status", "200"), ("x-big", "indexed-value")], true);
        c.handle_bytes(&mut input).unwrap();
        let ev = events(&mut c);
        assert!(
            matches!(&ev[..], [Event::Head { stream, fields, .. }] if *stream == b && fields[0].1 == "indexed-value")
        );
    }
}
