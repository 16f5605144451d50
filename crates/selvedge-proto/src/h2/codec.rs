//! Bytes to frames: the connection preface, the frame header, and the size limit.
//!
//! The codec only cuts frames out of the receive buffer and checks their length against
//! our SETTINGS_MAX_FRAME_SIZE (RFC 9113 §4.2: a larger frame is a FRAME_SIZE_ERROR of the
//! connection); each frame type's own checks are in [`super::frame`].

use bytes::{Bytes, BytesMut};

use super::frame::{Error, Frame, Head, Reason, HEADER_LEN};

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How `buf` relates to the preface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefaceMatch {
    /// The preface is complete at the start of the buffer.
    Full,
    /// The buffer is a (possibly empty) prefix of the preface: read more.
    Partial,
    /// The buffer cannot start with the preface.
    No,
}

/// Checks whether `buf` starts with the connection preface.
pub fn preface(buf: &[u8]) -> PrefaceMatch {
    let n = buf.len().min(PREFACE.len());
    if buf[..n] != PREFACE[..n] {
        PrefaceMatch::No
    } else if n == PREFACE.len() {
        PrefaceMatch::Full
    } else {
        PrefaceMatch::Partial
    }
}

/// Cuts the next whole frame off `buf`. `Ok(None)`: more bytes are needed. Frames longer
/// than `max_frame_size` are a connection FRAME_SIZE_ERROR.
pub fn decode(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<(Head, Bytes)>, Error> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let head = Head::parse(buf[..HEADER_LEN].try_into().expect("nine bytes"));
    if head.len > max_frame_size {
        return Err(Error::Connection(Reason::FRAME_SIZE_ERROR));
    }
    let total = HEADER_LEN + head.len as usize;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    // Skipping the header is a pointer bump; only the payload becomes a shared `Bytes`.
    bytes::Buf::advance(buf, HEADER_LEN);
    let payload = buf.split_to(head.len as usize).freeze();
    Ok(Some((head, payload)))
}

/// [`decode`] then [`Frame::parse`].
pub fn decode_frame(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<Frame>, Error> {
    match decode(buf, max_frame_size)? {
        Some((head, payload)) => Frame::parse(head, payload).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::frame::Ping;

    #[test]
    fn preface_prefixes() {
        assert_eq!(preface(b""), PrefaceMatch::Partial);
        assert_eq!(preface(b"PRI * HT"), PrefaceMatch::Partial);
        assert_eq!(preface(b"PRI * HTTP/1.1"), PrefaceMatch::No);
        assert_eq!(preface(b"GET / HTTP/1.1\r\n"), PrefaceMatch::No);
        let mut full = PREFACE.to_vec();
        full.extend_from_slice(b"\0\0");
        assert_eq!(preface(&full), PrefaceMatch::Full);
    }

    #[test]
    fn frames_byte_by_byte_and_size_limit() {
        let mut wire = Vec::new();
        Ping { ack: false, payload: *b"12345678" }.encode(&mut wire);
        let mut buf = BytesMut::new();
        for (i, b) in wire.iter().enumerate() {
            buf.extend_from_slice(&[*b]);
            let got = decode_frame(&mut buf, 16_384).unwrap();
            assert_eq!(got.is_some(), i == wire.len() - 1);
        }
        let mut buf = BytesMut::from(&b"\0\x40\x01\0\0\0\0\0\x01"[..]);
        assert_eq!(decode(&mut buf, 16_384), Err(Error::Connection(Reason::FRAME_SIZE_ERROR)));
    }
}
