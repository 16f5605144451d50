//! RST_STREAM (RFC 9113 §6.4).
//!
//! ```text
//! RST_STREAM Frame {
//!   Length (24) = 0x04, Type (8) = 0x03, Unused Flags (8),
//!   Reserved (1), Stream Identifier (31),
//!   Error Code (32),
//! }
//! ```

use bytes::BufMut;

use super::{kind, Error, Head, Reason};

/// A RST_STREAM frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RstStream {
    /// The stream.
    pub stream: u32,
    /// Why.
    pub reason: Reason,
}

impl RstStream {
    pub(super) fn parse(head: Head, payload: &[u8]) -> Result<RstStream, Error> {
        if head.stream == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        if payload.len() != 4 {
            return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
        }
        let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        Ok(RstStream { stream: head.stream, reason: Reason(code) })
    }

    /// Appends the frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Head { len: 4, kind: kind::RST_STREAM, flags: 0, stream: self.stream }.encode(dst);
        dst.put_u32(self.reason.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_size() {
        let mut v = Vec::new();
        RstStream { stream: 3, reason: Reason::CANCEL }.encode(&mut v);
        let head = Head::parse(v[..9].try_into().unwrap());
        assert_eq!(RstStream::parse(head, &v[9..]).unwrap().reason, Reason::CANCEL);
        assert_eq!(RstStream::parse(head, &v[9..12]), Err(Error::Connection(Reason::FRAME_SIZE_ERROR)));
    }
}
