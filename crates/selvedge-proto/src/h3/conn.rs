//! An HTTP/3 server connection's rules outside its request streams (RFC 9114 §5, §6.2,
//! §7; RFC 9204 §4.2–§4.4), as sans-IO state machines: the driver (the engine's
//! `h3::conn`, over quinn) feeds each of the peer's unidirectional streams to a
//! [`UniStream`] and admits request streams through [`Admission`]; what they say back is
//! all it acts on.
//!
//! - **Unidirectional streams** (§6.2): the first varint is the type. The control stream
//!   and QPACK's encoder and decoder streams are critical: one of each ([`Critical`]; a
//!   second is H3_STREAM_CREATION_ERROR) and never closed (H3_CLOSED_CRITICAL_STREAM). A
//!   push stream from a client is H3_STREAM_CREATION_ERROR; other types, reserved ones
//!   included, are stopped with H3_STREAM_CREATION_ERROR and ignored.
//! - **The control stream** (§6.2.1, §7.2): SETTINGS first (else H3_MISSING_SETTINGS) and
//!   once, at most [`MAX_SETTINGS`] bytes (H3_EXCESSIVE_LOAD), well formed
//!   ([`frame::check_settings`]); GOAWAY and MAX_PUSH_ID carry one varint each
//!   (H3_FRAME_ERROR), a GOAWAY may not raise its ID nor a MAX_PUSH_ID lower its
//!   (H3_ID_ERROR); CANCEL_PUSH names a push we never promised (H3_ID_ERROR); DATA,
//!   HEADERS, PUSH_PROMISE, a second SETTINGS and HTTP/2's frame types are
//!   H3_FRAME_UNEXPECTED; unknown types are skipped. A frame head cut by the stream's end is
//!   H3_FRAME_ERROR.
//! - **QPACK's streams** (RFC 9204 §4.3, §4.4): our dynamic table's capacity is 0, so the
//!   encoder may only set that capacity to 0 and the decoder may only cancel streams;
//!   anything else is H3_QPACK_ENCODER_STREAM_ERROR / H3_QPACK_DECODER_STREAM_ERROR.
//! - **Requests** (§5.2): after our GOAWAY a new request stream is refused with
//!   H3_REQUEST_REJECTED; the GOAWAY carries the lowest request stream ID not yet seen.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Buf, BytesMut};

use super::frame::{self, code};

/// Largest SETTINGS payload accepted from the peer.
pub const MAX_SETTINGS: u64 = 4096;

/// A connection error: close the connection with this code (RFC 9114 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Close {
    /// The HTTP/3 error code.
    pub code: u32,
    /// The reason phrase.
    pub reason: &'static str,
}

fn close(code: u32, reason: &'static str) -> Close {
    Close { code, reason }
}

/// Which of its one-of-a-kind streams the peer has opened, shared by the connection's
/// unidirectional streams (each may be read by a task of its own).
#[derive(Debug, Default)]
pub struct Critical {
    control: AtomicBool,
    encoder: AtomicBool,
    decoder: AtomicBool,
}

impl Critical {
    /// Whether this is the first stream of a critical `kind` (and now it is seen).
    fn first(&self, kind: u64) -> bool {
        let flag = match kind {
            frame::CONTROL_STREAM => &self.control,
            frame::QPACK_ENCODER_STREAM => &self.encoder,
            _ => &self.decoder,
        };
        !flag.swap(true, Ordering::Relaxed)
    }
}

/// What the driver does with a unidirectional stream after feeding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UniStep {
    /// Keep reading it.
    More,
    /// Send STOP_SENDING with this code and forget the stream (a type we do not use).
    Stop(u32),
}

/// One of the peer's unidirectional streams; see the module's text.
#[derive(Debug)]
pub struct UniStream {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// The type has not arrived yet.
    Untyped,
    Control(Control),
    /// QPACK's encoder (`true`) or decoder stream.
    Qpack(bool),
    /// Stopped: what still arrives is dropped.
    Ignored,
}

#[derive(Debug)]
struct Control {
    settings: bool,
    /// The last GOAWAY's ID (may only fall) and MAX_PUSH_ID (may only rise).
    goaway: u64,
    max_push: u64,
    /// Payload left of an unknown frame being skipped.
    skip: u64,
}

impl Default for UniStream {
    fn default() -> Self {
        UniStream::new()
    }
}

impl UniStream {
    /// A stream just opened.
    pub fn new() -> UniStream {
        UniStream { kind: Kind::Untyped }
    }

    /// Takes what it can from the front of `buf` (the stream's bytes received so far and
    /// not yet taken); what is left is an incomplete type, frame or instruction.
    ///
    /// # Errors
    /// A connection error.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut, critical: &Critical) -> Result<UniStep, Close> {
        if let Kind::Untyped = self.kind {
            let Some((kind, n)) = frame::varint(buf) else { return Ok(UniStep::More) };
            buf.advance(n);
            self.kind = match kind {
                frame::CONTROL_STREAM | frame::QPACK_ENCODER_STREAM | frame::QPACK_DECODER_STREAM
                    if !critical.first(kind) =>
                {
                    return Err(close(code::STREAM_CREATION_ERROR, "a second critical stream"));
                }
                frame::CONTROL_STREAM => {
                    Kind::Control(Control { settings: false, goaway: u64::MAX, max_push: 0, skip: 0 })
                }
                frame::QPACK_ENCODER_STREAM => Kind::Qpack(true),
                frame::QPACK_DECODER_STREAM => Kind::Qpack(false),
                frame::PUSH_STREAM => return Err(close(code::STREAM_CREATION_ERROR, "a push stream from a client")),
                _ => {
                    self.kind = Kind::Ignored;
                    buf.clear();
                    return Ok(UniStep::Stop(code::STREAM_CREATION_ERROR));
                }
            };
        }
        match &mut self.kind {
            Kind::Control(c) => c.handle_bytes(buf).map(|()| UniStep::More),
            Kind::Qpack(encoder) => qpack_instructions(buf, *encoder).map(|()| UniStep::More),
            Kind::Ignored => {
                buf.clear();
                Ok(UniStep::More)
            }
            Kind::Untyped => unreachable!("typed above"),
        }
    }

    /// The stream ended (`reset`: it was reset, or the connection is going); `rest` is what
    /// was left in its buffer.
    ///
    /// # Errors
    /// A connection error: a critical stream closed, or a frame cut short.
    pub fn handle_end(&mut self, rest: &[u8], reset: bool) -> Result<(), Close> {
        match &self.kind {
            // Ended before its type, or stopped: nothing to act on.
            Kind::Untyped | Kind::Ignored => Ok(()),
            Kind::Control(c) if !reset && c.skip == 0 && !rest.is_empty() && frame::head(rest).is_none() => {
                Err(close(code::FRAME_ERROR, "truncated frame"))
            }
            Kind::Control(_) => Err(close(code::CLOSED_CRITICAL_STREAM, "control stream closed")),
            Kind::Qpack(true) => Err(close(code::CLOSED_CRITICAL_STREAM, "QPACK encoder stream closed")),
            Kind::Qpack(false) => Err(close(code::CLOSED_CRITICAL_STREAM, "QPACK decoder stream closed")),
        }
    }

    /// Whether this is the peer's control stream.
    pub fn is_control(&self) -> bool {
        matches!(self.kind, Kind::Control(_))
    }
}

impl Control {
    fn handle_bytes(&mut self, buf: &mut BytesMut) -> Result<(), Close> {
        loop {
            if self.skip > 0 {
                let n = (buf.len() as u64).min(self.skip);
                buf.advance(n as usize);
                self.skip -= n;
                if self.skip > 0 {
                    return Ok(());
                }
            }
            let Some(h) = frame::head(buf) else { return Ok(()) };
            if !self.settings && h.kind != frame::SETTINGS {
                return Err(close(code::MISSING_SETTINGS, "control stream without SETTINGS"));
            }
            match h.kind {
                frame::SETTINGS if !self.settings => {
                    if h.len > MAX_SETTINGS {
                        return Err(close(code::EXCESSIVE_LOAD, "SETTINGS too large"));
                    }
                    let Some(payload) = whole(buf, h) else { return Ok(()) };
                    frame::check_settings(&payload).map_err(|c| close(c, "bad SETTINGS"))?;
                    self.settings = true;
                }
                // We never promise a push, so no push ID can be cancelled (§7.2.3).
                frame::CANCEL_PUSH => return Err(close(code::ID_ERROR, "CANCEL_PUSH without a push")),
                frame::GOAWAY | frame::MAX_PUSH_ID => {
                    if h.len > 8 {
                        return Err(close(code::FRAME_ERROR, "bad control frame"));
                    }
                    let Some(payload) = whole(buf, h) else { return Ok(()) };
                    let id = match frame::varint(&payload) {
                        Some((id, n)) if n == payload.len() => id,
                        _ => return Err(close(code::FRAME_ERROR, "bad control frame")),
                    };
                    if h.kind == frame::GOAWAY {
                        if id > self.goaway {
                            return Err(close(code::ID_ERROR, "GOAWAY raised its ID"));
                        }
                        self.goaway = id;
                    } else {
                        if id < self.max_push {
                            return Err(close(code::ID_ERROR, "MAX_PUSH_ID lowered"));
                        }
                        self.max_push = id;
                    }
                }
                frame::SETTINGS | frame::DATA | frame::HEADERS | frame::PUSH_PROMISE => {
                    return Err(close(code::FRAME_UNEXPECTED, "frame not allowed on the control stream"));
                }
                k if frame::reserved_http2(k) => return Err(close(code::FRAME_UNEXPECTED, "an HTTP/2 frame type")),
                _ => {
                    buf.advance(h.size);
                    self.skip = h.len;
                }
            }
        }
    }
}

/// The frame's payload once all of it is in `buf` (the head and payload taken off), or
/// `None` (nothing taken; room reserved for it).
fn whole(buf: &mut BytesMut, h: frame::Head) -> Option<BytesMut> {
    let end = h.size + h.len as usize;
    if buf.len() < end {
        buf.reserve(end - buf.len());
        return None;
    }
    buf.advance(h.size);
    Some(buf.split_to(h.len as usize))
}

/// The QPACK instructions of the peer's encoder or decoder stream; see the module's text.
fn qpack_instructions(buf: &mut BytesMut, encoder: bool) -> Result<(), Close> {
    let err = if encoder { code::QPACK_ENCODER_STREAM_ERROR } else { code::QPACK_DECODER_STREAM_ERROR };
    while let Some(&b) = buf.first() {
        // (pattern, integer prefix) of the one instruction allowed.
        let (ok, prefix) = if encoder { (b & 0xe0 == 0x20, 5) } else { (b & 0xc0 == 0x40, 6) };
        if !ok {
            return Err(close(err, "QPACK instruction for a table we do not have"));
        }
        let mut pos = 0;
        match crate::hpack::decode_int(buf, &mut pos, prefix) {
            Ok(v) if encoder && v != 0 => return Err(close(err, "QPACK table capacity above ours")),
            Ok(_) => buf.advance(pos),
            Err(crate::hpack::DecodeError::TruncatedInteger) => return Ok(()),
            Err(_) => return Err(close(err, "bad QPACK instruction")),
        }
    }
    Ok(())
}

/// Which request streams are taken (RFC 9114 §5.2): after our GOAWAY, none.
#[derive(Debug, Default)]
pub struct Admission {
    /// The lowest request stream ID not yet seen (what a GOAWAY carries).
    next_id: u64,
    goaway: bool,
}

impl Admission {
    /// A new connection.
    pub fn new() -> Admission {
        Admission::default()
    }

    /// The client opened request stream `id`.
    ///
    /// # Errors
    /// The code to stop and reset it with (H3_REQUEST_REJECTED: after our GOAWAY, so the
    /// client may retry it elsewhere).
    pub fn handle_request_opened(&mut self, id: u64) -> Result<(), u32> {
        if self.goaway {
            return Err(code::REQUEST_REJECTED);
        }
        self.next_id = self.next_id.max(id + 4);
        Ok(())
    }

    /// The server drains: the GOAWAY frame to send on our control stream, the first time.
    pub fn handle_drain(&mut self) -> Option<BytesMut> {
        if self.goaway {
            return None;
        }
        self.goaway = true;
        Some(frame::goaway(self.next_id))
    }

    /// Whether our GOAWAY went out.
    pub fn draining(&self) -> bool {
        self.goaway
    }
}
