//! PING (RFC 9113 §6.7).
//!
//! ```text
//! PING Frame {
//!   Length (24) = 0x08, Type (8) = 0x06,
//!   Unused Flags (7), ACK Flag (1),
//!   Reserved (1), Stream Identifier (31) = 0,
//!   Opaque Data (64),
//! }
//! ```

use bytes::BufMut;

use super::{flag, kind, Error, Head, Reason};

/// A PING frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// ACK flag.
    pub ack: bool,
    /// The opaque data, echoed in the acknowledgement.
    pub payload: [u8; 8],
}

impl Ping {
    pub(super) fn parse(head: Head, payload: &[u8]) -> Result<Ping, Error> {
        if head.stream != 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        let Ok(p) = <[u8; 8]>::try_from(payload) else { return Err(Error::Connection(Reason::FRAME_SIZE_ERROR)) };
        Ok(Ping { ack: head.has(flag::ACK), payload: p })
    }

    /// Appends the frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        let flags = if self.ack { flag::ACK } else { 0 };
        Head { len: 8, kind: kind::PING, flags, stream: 0 }.encode(dst);
        dst.put_slice(&self.payload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        let h = |len, stream| Head { len, kind: kind::PING, flags: 0, stream };
        assert_eq!(Ping::parse(h(7, 0), &[0; 7]), Err(Error::Connection(Reason::FRAME_SIZE_ERROR)));
        assert_eq!(Ping::parse(h(8, 1), &[0; 8]), Err(Error::Connection(Reason::PROTOCOL_ERROR)));
        let mut v = Vec::new();
        Ping { ack: true, payload: *b"abcdefgh" }.encode(&mut v);
        assert_eq!(&v[..], b"\0\0\x08\x06\x01\0\0\0\0abcdefgh");
    }
}
