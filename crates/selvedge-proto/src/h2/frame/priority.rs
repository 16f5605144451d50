//! PRIORITY (RFC 9113 §6.3, deprecated but still parsed: RFC 7540 §5.3 weights).
//!
//! ```text
//! PRIORITY Frame {
//!   Length (24) = 0x05, Type (8) = 0x02, Unused Flags (8),
//!   Reserved (1), Stream Identifier (31),
//!   Exclusive (1), Stream Dependency (31), Weight (8),
//! }
//! ```

use super::{Error, Head, Reason, MAX_WINDOW};

/// RFC 7540 priority fields: the parent stream, exclusivity and weight (1..=256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamDependency {
    /// The stream depended upon (0: the root).
    pub stream: u32,
    /// Exclusive flag.
    pub exclusive: bool,
    /// The weight, 1 to 256 (the wire value plus one).
    pub weight: u16,
}

impl StreamDependency {
    pub(super) fn parse(b: &[u8]) -> StreamDependency {
        let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        StreamDependency { stream: v & MAX_WINDOW, exclusive: v >> 31 == 1, weight: b[4] as u16 + 1 }
    }
}

/// A PRIORITY frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// The stream.
    pub stream: u32,
    /// Its new dependency.
    pub dependency: StreamDependency,
}

impl Priority {
    pub(super) fn parse(head: Head, payload: &[u8]) -> Result<Priority, Error> {
        if head.stream == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        if payload.len() != 5 {
            return Err(Error::Stream(head.stream, Reason::FRAME_SIZE_ERROR));
        }
        Ok(Priority { stream: head.stream, dependency: StreamDependency::parse(payload) })
    }
}

#[cfg(test)]
mod tests {
    use super::super::kind;
    use super::*;

    #[test]
    fn size_is_a_stream_error() {
        let head = Head { len: 4, kind: kind::PRIORITY, flags: 0, stream: 9 };
        assert_eq!(Priority::parse(head, b"\0\0\0\0"), Err(Error::Stream(9, Reason::FRAME_SIZE_ERROR)));
        let head = Head { len: 5, kind: kind::PRIORITY, flags: 0, stream: 9 };
        let p = Priority::parse(head, b"\0\0\0\x07\xff").unwrap();
        assert_eq!(p.dependency, StreamDependency { stream: 7, exclusive: false, weight: 256 });
    }
}
