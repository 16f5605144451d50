//! HEADERS (RFC 9113 §6.2) and CONTINUATION (§6.10).
//!
//! ```text
//! HEADERS Frame {
//!   Length (24), Type (8) = 0x01,
//!   Unused Flags (2), PRIORITY Flag (1), Unused Flag (1), PADDED Flag (1),
//!   END_HEADERS Flag (1), Unused Flag (1), END_STREAM Flag (1),
//!   Reserved (1), Stream Identifier (31),
//!   [Pad Length (8)], [Exclusive (1), Stream Dependency (31), Weight (8)],
//!   Field Block Fragment (..), Padding (..2040),
//! }
//! CONTINUATION Frame {
//!   Length (24), Type (8) = 0x09,
//!   Unused Flags (5), END_HEADERS Flag (1), Unused Flags (2),
//!   Reserved (1), Stream Identifier (31),
//!   Field Block Fragment (..),
//! }
//! ```

use bytes::{BufMut, Bytes};

use super::{flag, kind, strip_padding_ref, Error, Head, Reason, StreamDependency};

/// A HEADERS frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headers {
    /// The stream.
    pub stream: u32,
    /// RFC 7540 priority fields, if the PRIORITY flag was set.
    pub dependency: Option<StreamDependency>,
    /// The field block fragment.
    pub fragment: Bytes,
    /// END_STREAM.
    pub end_stream: bool,
    /// END_HEADERS.
    pub end_headers: bool,
}

/// A HEADERS frame borrowed from the receive buffer (decoded in place, with no shared
/// [`Bytes`] made for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadersRef<'a> {
    /// The stream.
    pub stream: u32,
    /// RFC 7540 priority fields, if the PRIORITY flag was set.
    pub dependency: Option<StreamDependency>,
    /// The field block fragment.
    pub fragment: &'a [u8],
    /// END_STREAM.
    pub end_stream: bool,
    /// END_HEADERS.
    pub end_headers: bool,
}

impl Headers {
    pub(super) fn parse(head: Head, payload: Bytes) -> Result<Headers, Error> {
        let r = Headers::parse_ref(head, &payload)?;
        Ok(Headers {
            stream: r.stream,
            dependency: r.dependency,
            fragment: payload.slice_ref(r.fragment),
            end_stream: r.end_stream,
            end_headers: r.end_headers,
        })
    }

    /// Parses a HEADERS frame's `payload` in place.
    ///
    /// # Errors
    /// Stream 0, bad padding or a short priority block: connection errors.
    pub fn parse_ref(head: Head, payload: &[u8]) -> Result<HeadersRef<'_>, Error> {
        if head.stream == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        let prio = head.has(flag::PRIORITY);
        let mut payload = strip_padding_ref(&head, payload, if prio { 5 } else { 0 })?;
        let dependency = if prio {
            if payload.len() < 5 {
                return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
            }
            let d = StreamDependency::parse(&payload[..5]);
            payload = &payload[5..];
            Some(d)
        } else {
            None
        };
        Ok(HeadersRef {
            stream: head.stream,
            dependency,
            fragment: payload,
            end_stream: head.has(flag::END_STREAM),
            end_headers: head.has(flag::END_HEADERS),
        })
    }

    /// Appends a header block as HEADERS plus as many CONTINUATION frames as
    /// `max_frame_size` requires.
    pub fn encode(stream: u32, block: &[u8], end_stream: bool, max_frame_size: usize, dst: &mut impl BufMut) {
        let mut chunks = block.chunks(max_frame_size.max(1));
        let first = chunks.next().unwrap_or(&[]);
        let mut rest = chunks.peekable();
        let mut flags = if end_stream { flag::END_STREAM } else { 0 };
        if rest.peek().is_none() {
            flags |= flag::END_HEADERS;
        }
        Head { len: first.len() as u32, kind: kind::HEADERS, flags, stream }.encode(dst);
        dst.put_slice(first);
        while let Some(c) = rest.next() {
            let flags = if rest.peek().is_none() { flag::END_HEADERS } else { 0 };
            Head { len: c.len() as u32, kind: kind::CONTINUATION, flags, stream }.encode(dst);
            dst.put_slice(c);
        }
    }
}

/// A CONTINUATION frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// The stream.
    pub stream: u32,
    /// The field block fragment.
    pub fragment: Bytes,
    /// END_HEADERS.
    pub end_headers: bool,
}

impl Continuation {
    pub(super) fn parse(head: Head, payload: Bytes) -> Result<Continuation, Error> {
        if head.stream == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        Ok(Continuation { stream: head.stream, fragment: payload, end_headers: head.has(flag::END_HEADERS) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Frame;
    use super::*;

    #[test]
    fn priority_and_padding() {
        let head =
            Head { len: 10, kind: kind::HEADERS, flags: flag::PADDED | flag::PRIORITY | flag::END_HEADERS, stream: 3 };
        let h = Headers::parse(head, Bytes::from_static(b"\x02\x80\0\0\x01\x0fab\0\0")).unwrap();
        assert_eq!(h.dependency, Some(StreamDependency { stream: 1, exclusive: true, weight: 16 }));
        assert_eq!(&h.fragment[..], b"ab");
        assert!(h.end_headers && !h.end_stream);
        let head = Head { len: 4, kind: kind::HEADERS, flags: flag::PRIORITY, stream: 3 };
        assert!(Headers::parse(head, Bytes::from_static(b"\0\0\0\x01")).is_err());
    }

    #[test]
    fn encode_splits_into_continuations() {
        let mut v = Vec::new();
        Headers::encode(5, b"abcdefg", true, 3, &mut v);
        let mut frames = Vec::new();
        let mut rest = &v[..];
        while !rest.is_empty() {
            let h = Head::parse(rest[..9].try_into().unwrap());
            let p = Bytes::copy_from_slice(&rest[9..9 + h.len as usize]);
            frames.push(Frame::parse(h, p).unwrap());
            rest = &rest[9 + h.len as usize..];
        }
        assert_eq!(frames.len(), 3);
        assert!(matches!(&frames[0], Frame::Headers(h) if h.end_stream && !h.end_headers && &h.fragment[..] == b"abc"));
        assert!(matches!(&frames[2], Frame::Continuation(c) if c.end_headers && &c.fragment[..] == b"g"));
    }
}
