//! HTTP/2 frames (RFC 9113 §4, §6): pure data, one file per frame type.
//!
//! Every frame starts with a 9-octet header:
//!
//! ```text
//! HTTP Frame {
//!   Length (24),
//!   Type (8),
//!   Flags (8),
//!   Reserved (1),
//!   Stream Identifier (31),
//!   Frame Payload (..),
//! }
//! ```
//!
//! [`Frame::parse`] checks everything that can be checked from one frame alone (sizes,
//! stream id 0 or not, padding, setting values) and returns a precise [`Error`]: a
//! connection error or a stream error with its code. Checks that need connection state
//! (stream states, CONTINUATION sequencing, windows) live in `h2::proto`.

mod data;
mod goaway;
mod headers;
mod ping;
mod priority;
mod priority_update;
mod rst_stream;
mod settings;
mod window_update;

pub use data::Data;
pub use goaway::GoAway;
pub use headers::{Continuation, Headers, HeadersRef};
pub use ping::Ping;
pub use priority::{Priority, StreamDependency};
pub use priority_update::PriorityUpdate;
pub use rst_stream::RstStream;
pub use settings::{Setting, Settings};
pub use window_update::WindowUpdate;

use bytes::{BufMut, Bytes};

/// Length of the frame header.
pub const HEADER_LEN: usize = 9;
/// The initial (and minimum) SETTINGS_MAX_FRAME_SIZE.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE a peer may set: 2^24 - 1.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window: 2^31 - 1.
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The initial flow-control window of a connection and of every stream.
pub const DEFAULT_WINDOW: u32 = 65_535;

/// An error code (RFC 9113 §7): a wire integer with named constants, so unknown codes
/// round-trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful shutdown, or a stream not needed any more.
    pub const NO_ERROR: Reason = Reason(0x0);
    /// An unspecific protocol error.
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    /// An unexpected internal error.
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    /// The peer violated flow control.
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    /// SETTINGS were not acknowledged in time.
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    /// A frame arrived on a half-closed (remote) stream.
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    /// A frame has an invalid size.
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    /// The stream was refused before any processing.
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    /// The stream is no longer needed.
    pub const CANCEL: Reason = Reason(0x8);
    /// The header compression context could not be kept.
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    /// A CONNECT tunnel failed.
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    /// The peer is generating excessive load.
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    /// The transport does not meet minimum security requirements.
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    /// Use HTTP/1.1 for this request.
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);
}

impl Reason {
    /// The code's name in RFC 9113 §7 (`None` past the registered ones).
    pub fn name(self) -> Option<&'static str> {
        [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ]
        .get(self.0 as usize)
        .copied()
    }
}

impl std::fmt::Debug for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "Reason({:#x})", self.0),
        }
    }
}

/// Why a frame was rejected (RFC 9113 §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The connection must end with GOAWAY and this code.
    Connection(Reason),
    /// Only this stream is reset with RST_STREAM and this code.
    Stream(u32, Reason),
}

/// Frame types (RFC 9113 §6, RFC 9218 §7.1).
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0x0;
    /// HEADERS
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING
    pub const PING: u8 = 0x6;
    /// GOAWAY
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 0x9;
    /// PRIORITY_UPDATE (RFC 9218)
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

/// Frame flags.
pub mod flag {
    /// DATA, HEADERS: the last frame of the stream from this endpoint.
    pub const END_STREAM: u8 = 0x1;
    /// SETTINGS, PING: an acknowledgement.
    pub const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION: the header block is complete.
    pub const END_HEADERS: u8 = 0x4;
    /// DATA, HEADERS: padded.
    pub const PADDED: u8 = 0x8;
    /// HEADERS: carries priority fields.
    pub const PRIORITY: u8 = 0x20;
}

/// The 9-octet frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl Head {
    /// Reads a header from the first 9 bytes of `b`.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
        }
    }

    /// Appends the header.
    pub fn encode(&self, dst: &mut impl BufMut) {
        debug_assert!(self.len <= MAX_MAX_FRAME_SIZE);
        dst.put_slice(&self.len.to_be_bytes()[1..]);
        dst.put_u8(self.kind);
        dst.put_u8(self.flags);
        dst.put_u32(self.stream & MAX_WINDOW);
    }

    /// Whether `f` is set.
    #[inline]
    pub fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    fn conn_error(&self) -> Error {
        Error::Connection(Reason::PROTOCOL_ERROR)
    }
}

/// A parsed frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// DATA
    Data(Data),
    /// HEADERS
    Headers(Headers),
    /// PRIORITY
    Priority(Priority),
    /// RST_STREAM
    RstStream(RstStream),
    /// SETTINGS
    Settings(Settings),
    /// PUSH_PROMISE: a client must never send one; kept only to be rejected.
    PushPromise(u32),
    /// PING
    Ping(Ping),
    /// GOAWAY
    GoAway(GoAway),
    /// WINDOW_UPDATE
    WindowUpdate(WindowUpdate),
    /// CONTINUATION
    Continuation(Continuation),
    /// PRIORITY_UPDATE (RFC 9218)
    PriorityUpdate(PriorityUpdate),
    /// A frame of an unknown type: ignored (RFC 9113 §4.1), but seen by the CONTINUATION
    /// sequencing rule.
    Unknown(Head),
}

impl Frame {
    /// Parses a frame whose header is `head` and payload `payload` (exactly `head.len`
    /// bytes; the codec has already checked it against SETTINGS_MAX_FRAME_SIZE).
    pub fn parse(head: Head, payload: Bytes) -> Result<Frame, Error> {
        debug_assert_eq!(head.len as usize, payload.len());
        Ok(match head.kind {
            kind::DATA => Frame::Data(Data::parse(head, payload)?),
            kind::HEADERS => Frame::Headers(Headers::parse(head, payload)?),
            kind::PRIORITY => Frame::Priority(Priority::parse(head, &payload)?),
            kind::RST_STREAM => Frame::RstStream(RstStream::parse(head, &payload)?),
            kind::SETTINGS => Frame::Settings(Settings::parse(head, &payload)?),
            kind::PUSH_PROMISE => {
                if head.stream == 0 {
                    return Err(head.conn_error());
                }
                Frame::PushPromise(head.stream)
            }
            kind::PING => Frame::Ping(Ping::parse(head, &payload)?),
            kind::GOAWAY => Frame::GoAway(GoAway::parse(head, payload)?),
            kind::WINDOW_UPDATE => Frame::WindowUpdate(WindowUpdate::parse(head, &payload)?),
            kind::CONTINUATION => Frame::Continuation(Continuation::parse(head, payload)?),
            kind::PRIORITY_UPDATE => Frame::PriorityUpdate(PriorityUpdate::parse(head, payload)?),
            _ => Frame::Unknown(head),
        })
    }
}

/// Strips padding (RFC 9113 §6.1): `Pad Length (8)` first, padding last. Padding that
/// covers the whole payload is a connection PROTOCOL_ERROR.
/// [`strip_padding`] on a borrowed payload.
fn strip_padding_ref<'a>(head: &Head, payload: &'a [u8], extra: usize) -> Result<&'a [u8], Error> {
    if !head.has(flag::PADDED) {
        return Ok(payload);
    }
    let Some(&pad) = payload.first() else { return Err(Error::Connection(Reason::FRAME_SIZE_ERROR)) };
    let pad = pad as usize;
    if pad + 1 + extra > payload.len() {
        return Err(Error::Connection(Reason::PROTOCOL_ERROR));
    }
    Ok(&payload[1..payload.len() - pad])
}

fn strip_padding(head: &Head, payload: &mut Bytes, extra: usize) -> Result<(), Error> {
    if !head.has(flag::PADDED) {
        return Ok(());
    }
    let Some(&pad) = payload.first() else { return Err(Error::Connection(Reason::FRAME_SIZE_ERROR)) };
    let pad = pad as usize;
    if pad + 1 + extra > payload.len() {
        return Err(Error::Connection(Reason::PROTOCOL_ERROR));
    }
    let end = payload.len() - pad;
    *payload = payload.slice(1..end);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trips_and_clears_reserved_bit() {
        let h = Head { len: 0x123456, kind: 7, flags: 0x25, stream: 0x7fff_fffe };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(v, [0x12, 0x34, 0x56, 7, 0x25, 0x7f, 0xff, 0xff, 0xfe]);
        assert_eq!(Head::parse(&v[..9].try_into().unwrap()), h);
        v[5] |= 0x80;
        assert_eq!(Head::parse(&v[..9].try_into().unwrap()).stream, 0x7fff_fffe);
    }

    #[test]
    fn unknown_types_parse_as_unknown() {
        let h = Head { len: 3, kind: 0xfa, flags: 0xff, stream: 0 };
        assert_eq!(Frame::parse(h, Bytes::from_static(b"abc")), Ok(Frame::Unknown(h)));
        assert_eq!(format!("{:?}", Reason(0xb)), "ENHANCE_YOUR_CALM");
        assert_eq!(format!("{:?}", Reason(0x42)), "Reason(0x42)");
    }
}
