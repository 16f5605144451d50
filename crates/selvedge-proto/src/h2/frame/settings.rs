//! SETTINGS (RFC 9113 §6.5; RFC 9218 §2.1 for SETTINGS_NO_RFC7540_PRIORITIES).
//!
//! ```text
//! SETTINGS Frame {
//!   Length (24), Type (8) = 0x04,
//!   Unused Flags (7), ACK Flag (1),
//!   Reserved (1), Stream Identifier (31) = 0,
//!   Setting (48) ...,
//! }
//! Setting { Identifier (16), Value (32) }
//! ```
//!
//! Unknown identifiers are ignored (§6.5.2).

use bytes::BufMut;

use super::{flag, kind, Error, Head, Reason, MAX_MAX_FRAME_SIZE, MAX_WINDOW};

/// One setting identifier (a wire integer; unknown ones are kept and ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting(pub u16);

impl Setting {
    /// SETTINGS_HEADER_TABLE_SIZE
    pub const HEADER_TABLE_SIZE: Setting = Setting(0x1);
    /// SETTINGS_ENABLE_PUSH
    pub const ENABLE_PUSH: Setting = Setting(0x2);
    /// SETTINGS_MAX_CONCURRENT_STREAMS
    pub const MAX_CONCURRENT_STREAMS: Setting = Setting(0x3);
    /// SETTINGS_INITIAL_WINDOW_SIZE
    pub const INITIAL_WINDOW_SIZE: Setting = Setting(0x4);
    /// SETTINGS_MAX_FRAME_SIZE
    pub const MAX_FRAME_SIZE: Setting = Setting(0x5);
    /// SETTINGS_MAX_HEADER_LIST_SIZE
    pub const MAX_HEADER_LIST_SIZE: Setting = Setting(0x6);
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441)
    pub const ENABLE_CONNECT_PROTOCOL: Setting = Setting(0x8);
    /// SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218)
    pub const NO_RFC7540_PRIORITIES: Setting = Setting(0x9);
}

/// A SETTINGS frame: an acknowledgement, or a list of settings in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// ACK flag.
    pub ack: bool,
    /// The settings, in the order sent (later ones win).
    pub values: Vec<(Setting, u32)>,
}

impl Settings {
    pub(super) fn parse(head: Head, payload: &[u8]) -> Result<Settings, Error> {
        if head.stream != 0 {
            return Err(Error::Connection(Reason::PROTOCOL_ERROR));
        }
        let ack = head.has(flag::ACK);
        if (ack && !payload.is_empty()) || payload.len() % 6 != 0 {
            return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
        }
        let mut values = Vec::with_capacity(payload.len() / 6);
        for s in payload.chunks_exact(6) {
            let id = Setting(u16::from_be_bytes([s[0], s[1]]));
            let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match id {
                Setting::ENABLE_PUSH | Setting::ENABLE_CONNECT_PROTOCOL | Setting::NO_RFC7540_PRIORITIES if v > 1 => {
                    return Err(Error::Connection(Reason::PROTOCOL_ERROR))
                }
                Setting::INITIAL_WINDOW_SIZE if v > MAX_WINDOW => {
                    return Err(Error::Connection(Reason::FLOW_CONTROL_ERROR))
                }
                Setting::MAX_FRAME_SIZE if !(super::DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&v) => {
                    return Err(Error::Connection(Reason::PROTOCOL_ERROR))
                }
                _ => {}
            }
            values.push((id, v));
        }
        Ok(Settings { ack, values })
    }

    /// Appends the frame.
    pub fn encode(&self, dst: &mut impl BufMut) {
        let flags = if self.ack { flag::ACK } else { 0 };
        Head { len: 6 * self.values.len() as u32, kind: kind::SETTINGS, flags, stream: 0 }.encode(dst);
        for (id, v) in &self.values {
            dst.put_u16(id.0);
            dst.put_u32(*v);
        }
    }

    /// Appends a SETTINGS acknowledgement.
    pub fn encode_ack(dst: &mut impl BufMut) {
        Settings { ack: true, values: Vec::new() }.encode(dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(flags: u8, stream: u32, p: &[u8]) -> Result<Settings, Error> {
        Settings::parse(Head { len: p.len() as u32, kind: kind::SETTINGS, flags, stream }, p)
    }

    #[test]
    fn strict_checks() {
        let conn = |r| Err(Error::Connection(r));
        assert_eq!(parse(0, 1, b""), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(parse(flag::ACK, 0, b"\0\x01\0\0\0\0"), conn(Reason::FRAME_SIZE_ERROR));
        assert_eq!(parse(0, 0, b"\0\x01\0"), conn(Reason::FRAME_SIZE_ERROR));
        assert_eq!(parse(0, 0, b"\0\x02\0\0\0\x02"), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(parse(0, 0, b"\0\x04\x80\0\0\0"), conn(Reason::FLOW_CONTROL_ERROR));
        assert_eq!(parse(0, 0, b"\0\x05\0\0\x3f\xff"), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(parse(0, 0, b"\0\x05\x01\0\0\0"), conn(Reason::PROTOCOL_ERROR));
        let s = parse(0, 0, b"\xff\xff\0\0\0\x09\0\x03\0\0\0\x64").unwrap();
        assert_eq!(s.values, vec![(Setting(0xffff), 9), (Setting::MAX_CONCURRENT_STREAMS, 100)]);
        let mut v = Vec::new();
        s.encode(&mut v);
        assert_eq!(parse(0, 0, &v[9..]).unwrap(), s);
    }
}
