//! DATA (RFC 9113 §6.1).
//!
//! ```text
//! DATA Frame {
//!   Length (24), Type (8) = 0x00,
//!   Unused Flags (4), PADDED Flag (1), Unused Flags (2), END_STREAM Flag (1),
//!   Reserved (1), Stream Identifier (31),
//!   [Pad Length (8)], Data (..), Padding (..2040),
//! }
//! ```

use bytes::{BufMut, Bytes};

use super::{flag, kind, strip_padding, Error, Head, Reason};

/// A DATA frame. `flow_len` is the whole payload length, padding included: that is what
/// counts against flow control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// The stream.
    pub stream: u32,
    /// The data, without padding.
    pub data: Bytes,
    /// END_STREAM.
    pub end_stream: bool,
    /// Octets counted by flow control (the frame's payload length).
    pub flow_len: u32,
}

impl Data {
    pub(super) fn parse(head: Head, mut payload: Bytes) -> Result<Data, Error> {
        if head.stream == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        strip_padding(&head, &mut payload, 0)?;
        Ok(Data { stream: head.stream, data: payload, end_stream: head.has(flag::END_STREAM), flow_len: head.len })
    }

    /// Appends the header of a DATA frame carrying `len` bytes (the data itself follows).
    pub fn encode_head(stream: u32, len: usize, end_stream: bool, dst: &mut impl BufMut) {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        Head { len: len as u32, kind: kind::DATA, flags, stream }.encode(dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_stripped_and_checked() {
        let head = Head { len: 6, kind: kind::DATA, flags: flag::PADDED | flag::END_STREAM, stream: 1 };
        let d = Data::parse(head, Bytes::from_static(b"\x02abc\0\0")).unwrap();
        assert_eq!((&d.data[..], d.end_stream, d.flow_len), (&b"abc"[..], true, 6));
        let head = Head { len: 3, kind: kind::DATA, flags: flag::PADDED, stream: 1 };
        assert_eq!(Data::parse(head, Bytes::from_static(b"\x03ab")), Err(Error::Connection(Reason::PROTOCOL_ERROR)));
        let head = Head { len: 0, kind: kind::DATA, flags: 0, stream: 0 };
        assert_eq!(Data::parse(head, Bytes::new()), Err(Error::Connection(Reason::PROTOCOL_ERROR)));
    }
}
