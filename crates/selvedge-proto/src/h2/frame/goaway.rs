//! GOAWAY (RFC 9113 §6.8).
//!
//! ```text
//! GOAWAY Frame {
//!   Length (24), Type (8) = 0x07, Unused Flags (8),
//!   Reserved (1), Stream Identifier (31) = 0,
//!   Reserved (1), Last-Stream-ID (31),
//!   Error Code (32),
//!   Additional Debug Data (..),
//! }
//! ```

use bytes::{BufMut, Bytes};

use super::{kind, Error, Head, Reason, MAX_WINDOW};

/// A GOAWAY frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// The highest stream id the sender may have processed.
    pub last_stream: u32,
    /// Why.
    pub reason: Reason,
    /// Opaque diagnostics.
    pub debug: Bytes,
}

impl GoAway {
    pub(super) fn parse(head: Head, payload: Bytes) -> Result<GoAway, Error> {
        if head.stream != 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        if payload.len() < 8 {
            return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
        }
        let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
        let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
        Ok(GoAway { last_stream: last, reason: Reason(code), debug: payload.slice(8..) })
    }

    /// Appends the frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Head { len: 8 + self.debug.len() as u32, kind: kind::GOAWAY, flags: 0, stream: 0 }.encode(dst);
        dst.put_u32(self.last_stream);
        dst.put_u32(self.reason.0);
        dst.put_slice(&self.debug);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let g = GoAway { last_stream: 7, reason: Reason::ENHANCE_YOUR_CALM, debug: Bytes::from_static(b"calm") };
        let mut v = Vec::new();
        g.encode(&mut v);
        let head = Head::parse(v[..9].try_into().unwrap());
        assert_eq!(GoAway::parse(head, Bytes::copy_from_slice(&v[9..])).unwrap(), g);
        assert!(GoAway::parse(head, Bytes::from_static(b"1234567")).is_err());
    }
}
