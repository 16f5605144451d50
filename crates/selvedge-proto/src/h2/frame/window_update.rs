//! WINDOW_UPDATE (RFC 9113 §6.9).
//!
//! ```text
//! WINDOW_UPDATE Frame {
//!   Length (24) = 0x04, Type (8) = 0x08, Unused Flags (8),
//!   Reserved (1), Stream Identifier (31),
//!   Reserved (1), Window Size Increment (31),
//! }
//! ```
//!
//! An increment of 0 is a PROTOCOL_ERROR: of the stream, or of the connection for
//! stream 0. A wrong length is a connection FRAME_SIZE_ERROR.

use bytes::BufMut;

use super::{kind, Error, Head, Reason, MAX_WINDOW};

/// A WINDOW_UPDATE frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowUpdate {
    /// The stream (0: the connection).
    pub stream: u32,
    /// The increment, 1 to 2^31 - 1.
    pub increment: u32,
}

impl WindowUpdate {
    pub(super) fn parse(head: Head, payload: &[u8]) -> Result<WindowUpdate, Error> {
        if payload.len() != 4 {
            return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
        }
        let inc = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
        if inc == 0 {
            return Err(match head.stream {
                0 => Error::Connection(Reason::PROTOCOL_ERROR),
                s => Error::Stream(s, Reason::PROTOCOL_ERROR),
            });
        }
        Ok(WindowUpdate { stream: head.stream, increment: inc })
    }

    /// Appends the frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        Head { len: 4, kind: kind::WINDOW_UPDATE, flags: 0, stream: self.stream }.encode(dst);
        dst.put_u32(self.increment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_increment() {
        let h = |stream| Head { len: 4, kind: kind::WINDOW_UPDATE, flags: 0, stream };
        assert_eq!(WindowUpdate::parse(h(0), &[0; 4]), Err(Error::Connection(Reason::PROTOCOL_ERROR)));
        assert_eq!(WindowUpdate::parse(h(3), &[0; 4]), Err(Error::Stream(3, Reason::PROTOCOL_ERROR)));
        assert_eq!(WindowUpdate::parse(h(3), &[0; 3]), Err(Error::Connection(Reason::FRAME_SIZE_ERROR)));
        assert_eq!(WindowUpdate::parse(h(3), &[0x80, 0, 0, 1]).unwrap().increment, 1);
    }
}
