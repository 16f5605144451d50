//! PRIORITY_UPDATE (RFC 9218 §7.1).
//!
//! ```text
//! PRIORITY_UPDATE Frame {
//!   Length (24), Type (8) = 0x10, Unused Flags (8),
//!   Reserved (1), Stream Identifier (31) = 0,
//!   Reserved (1), Prioritized Stream ID (31),
//!   Priority Field Value (..),
//! }
//! ```

use bytes::Bytes;

use super::{Error, Head, Reason, MAX_WINDOW};

/// A PRIORITY_UPDATE frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityUpdate {
    /// The stream whose priority changes.
    pub stream: u32,
    /// The `priority` field value (RFC 9218 §4), e.g. `u=1, i`.
    pub value: Bytes,
}

impl PriorityUpdate {
    pub(super) fn parse(head: Head, payload: Bytes) -> Result<PriorityUpdate, Error> {
        if head.stream != 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        if payload.len() < 4 {
            return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
        }
        let id = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_WINDOW;
        if id == 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        Ok(PriorityUpdate { stream: id, value: payload.slice(4..) })
    }
}
