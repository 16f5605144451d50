//! HTTP/3 frames and stream types (RFC 9114 §6.2, §7), without I/O: QUIC variable-length
//! integers, frame heads, the SETTINGS and GOAWAY we send and the SETTINGS we receive,
//! and the error codes (§8.1).

use bytes::{BufMut, BytesMut};

// Frame types (§7.2).
/// DATA (§7.2.1): a piece of the message body.
pub const DATA: u64 = 0x0;
/// HEADERS (§7.2.2): a QPACK field section.
pub const HEADERS: u64 = 0x1;
/// CANCEL_PUSH (§7.2.3).
pub const CANCEL_PUSH: u64 = 0x3;
/// SETTINGS (§7.2.4): first on each control stream.
pub const SETTINGS: u64 = 0x4;
/// PUSH_PROMISE (§7.2.5).
pub const PUSH_PROMISE: u64 = 0x5;
/// GOAWAY (§7.2.6).
pub const GOAWAY: u64 = 0x7;
/// MAX_PUSH_ID (§7.2.7).
pub const MAX_PUSH_ID: u64 = 0xd;

// Unidirectional stream types (§6.2; RFC 9204 §4.2).
/// The control stream (§6.2.1).
pub const CONTROL_STREAM: u64 = 0x0;
/// A push stream (§6.2.2).
pub const PUSH_STREAM: u64 = 0x1;
/// QPACK's encoder stream (RFC 9204 §4.2).
pub const QPACK_ENCODER_STREAM: u64 = 0x2;
/// QPACK's decoder stream (RFC 9204 §4.2).
pub const QPACK_DECODER_STREAM: u64 = 0x3;

/// Settings (§7.2.4.1; RFC 9204 §5).
const QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
const MAX_FIELD_SECTION_SIZE: u64 = 0x6;
const QPACK_BLOCKED_STREAMS: u64 = 0x7;

/// Error codes (§8.1; RFC 9204 §6).
#[allow(missing_docs)]
pub mod code {
    pub const NO_ERROR: u32 = 0x100;
    pub const INTERNAL_ERROR: u32 = 0x102;
    pub const STREAM_CREATION_ERROR: u32 = 0x103;
    pub const CLOSED_CRITICAL_STREAM: u32 = 0x104;
    pub const FRAME_UNEXPECTED: u32 = 0x105;
    pub const FRAME_ERROR: u32 = 0x106;
    pub const EXCESSIVE_LOAD: u32 = 0x107;
    pub const ID_ERROR: u32 = 0x108;
    pub const SETTINGS_ERROR: u32 = 0x109;
    pub const MISSING_SETTINGS: u32 = 0x10a;
    pub const REQUEST_REJECTED: u32 = 0x10b;
    pub const REQUEST_CANCELLED: u32 = 0x10c;
    pub const REQUEST_INCOMPLETE: u32 = 0x10d;
    pub const MESSAGE_ERROR: u32 = 0x10e;
    pub const QPACK_DECOMPRESSION_FAILED: u32 = 0x200;
    pub const QPACK_ENCODER_STREAM_ERROR: u32 = 0x201;
    pub const QPACK_DECODER_STREAM_ERROR: u32 = 0x202;
}

/// Largest value a variable-length integer holds (RFC 9000 §16).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Reads a variable-length integer at the front of `b`: its value and length, or `None`
/// if `b` ends first.
#[inline]
pub fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    if b.len() < len {
        return None;
    }
    let mut v = u64::from(first & 0x3f);
    for &x in &b[1..len] {
        v = (v << 8) | u64::from(x);
    }
    Some((v, len))
}

/// Appends `v` (at most [`VARINT_MAX`]) as a variable-length integer, in the fewest bytes.
#[inline]
pub fn put_varint(dst: &mut BytesMut, v: u64) {
    debug_assert!(v <= VARINT_MAX);
    if v < 1 << 6 {
        dst.put_u8(v as u8);
    } else if v < 1 << 14 {
        dst.put_u16(0x4000 | v as u16);
    } else if v < 1 << 30 {
        dst.put_u32(0x8000_0000 | v as u32);
    } else {
        dst.put_u64(0xc000_0000_0000_0000 | v);
    }
}

/// A frame's head: its type and payload length, and how many bytes the head took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The frame type.
    pub kind: u64,
    /// The payload's length.
    pub len: u64,
    /// The head's own length.
    pub size: usize,
}

/// The frame head at the front of `b`, or `None` if it is not all there yet.
#[inline]
pub fn head(b: &[u8]) -> Option<Head> {
    let (kind, n) = varint(b)?;
    let (len, m) = varint(&b[n..])?;
    Some(Head { kind, len, size: n + m })
}

/// Appends a frame head.
#[inline]
pub fn put_head(dst: &mut BytesMut, kind: u64, len: u64) {
    put_varint(dst, kind);
    put_varint(dst, len);
}

/// Frame types that HTTP/2 had and HTTP/3 reserves: receiving one is a connection error
/// of type H3_FRAME_UNEXPECTED (§7.2.8).
#[inline]
pub fn reserved_http2(kind: u64) -> bool {
    matches!(kind, 0x2 | 0x6 | 0x8 | 0x9)
}

/// Whether a frame of this type may come on a request stream (§7.2): DATA and HEADERS,
/// and types this endpoint does not know (to be skipped). The others are connection errors
/// of type H3_FRAME_UNEXPECTED.
#[inline]
pub fn allowed_on_request(kind: u64) -> bool {
    !reserved_http2(kind) && !matches!(kind, CANCEL_PUSH | SETTINGS | PUSH_PROMISE | GOAWAY | MAX_PUSH_ID)
}

/// The start of our control stream: its type and our SETTINGS. The dynamic table stays
/// off (capacity 0, no blocked streams: the defaults, not sent), so the peer's QPACK
/// encoder may only use the static table and literals.
pub fn control_preface(max_field_section_size: u64) -> BytesMut {
    let mut body = BytesMut::with_capacity(16);
    put_varint(&mut body, MAX_FIELD_SECTION_SIZE);
    put_varint(&mut body, max_field_section_size.min(VARINT_MAX));
    // A reserved setting (§7.2.4.1), so that peers keep ignoring unknown ones.
    put_varint(&mut body, 0x1f * 7 + 0x21);
    put_varint(&mut body, 0);
    let mut out = BytesMut::with_capacity(32);
    put_varint(&mut out, CONTROL_STREAM);
    put_head(&mut out, SETTINGS, body.len() as u64);
    out.extend_from_slice(&body);
    out
}

/// A GOAWAY frame carrying `id` (§5.2, §7.2.6).
pub fn goaway(id: u64) -> BytesMut {
    let mut body = BytesMut::with_capacity(8);
    put_varint(&mut body, id);
    let mut out = BytesMut::with_capacity(12);
    put_head(&mut out, GOAWAY, body.len() as u64);
    out.extend_from_slice(&body);
    out
}

/// Checks the payload of a peer's SETTINGS frame (§7.2.4): well formed, no HTTP/2 setting,
/// no setting twice. The values need no action here: the dynamic table we would use as an
/// encoder stays off whatever the peer allows, and the peer's field section limit is far
/// above our response heads. Err: the error code to close the connection with.
pub fn check_settings(mut p: &[u8]) -> Result<(), u32> {
    let mut seen = [0u64; 16];
    let mut n = 0;
    while !p.is_empty() {
        let (id, a) = varint(p).ok_or(code::FRAME_ERROR)?;
        let (_value, b) = varint(&p[a..]).ok_or(code::FRAME_ERROR)?;
        p = &p[a + b..];
        if matches!(id, 0x0 | 0x2 | 0x3 | 0x4 | 0x5) {
            return Err(code::SETTINGS_ERROR);
        }
        if matches!(id, QPACK_MAX_TABLE_CAPACITY | MAX_FIELD_SECTION_SIZE | QPACK_BLOCKED_STREAMS) {
            if seen[..n].contains(&id) {
                return Err(code::SETTINGS_ERROR);
            }
            if n < seen.len() {
                seen[n] = id;
                n += 1;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_in_the_fewest_bytes() {
        for (v, len) in
            [(0, 1), (63, 1), (64, 2), (16383, 2), (16384, 4), ((1 << 30) - 1, 4), (1 << 30, 8), (VARINT_MAX, 8)]
        {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), len, "{v}");
            assert_eq!(varint(&b), Some((v, len)));
            assert_eq!(varint(&b[..len - 1]), None);
        }
        // RFC 9000 §A.1's examples.
        assert_eq!(varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]), Some((151_288_809_941_952_652, 8)));
        assert_eq!(varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(varint(&[0x25]), Some((37, 1)));
        assert_eq!(varint(&[0x40, 0x25]), Some((37, 2)));
    }

    #[test]
    fn frame_heads() {
        let mut b = BytesMut::new();
        put_head(&mut b, HEADERS, 300);
        b.extend_from_slice(b"xyz");
        assert_eq!(head(&b), Some(Head { kind: HEADERS, len: 300, size: 3 }));
        assert_eq!(head(&b[..2]), None);
        assert!(allowed_on_request(DATA) && allowed_on_request(HEADERS) && allowed_on_request(0x21));
        for k in [0x2, 0x6, 0x8, 0x9, CANCEL_PUSH, SETTINGS, PUSH_PROMISE, GOAWAY, MAX_PUSH_ID] {
            assert!(!allowed_on_request(k), "{k:#x}");
        }
    }

    #[test]
    fn our_settings_and_theirs() {
        let p = control_preface(16384);
        assert_eq!(p[0], CONTROL_STREAM as u8);
        let h = head(&p[1..]).unwrap();
        assert_eq!(h.kind, SETTINGS);
        let body = &p[1 + h.size..];
        assert_eq!(body.len() as u64, h.len);
        assert_eq!(check_settings(body), Ok(()));
        assert_eq!(varint(body), Some((MAX_FIELD_SECTION_SIZE, 1)));
        assert_eq!(varint(&body[1..]), Some((16384, 4)));
        // An HTTP/2 setting, a repeated one, a truncated one.
        assert_eq!(check_settings(&[0x2, 0x0]), Err(code::SETTINGS_ERROR));
        assert_eq!(check_settings(&[0x6, 0x1, 0x6, 0x2]), Err(code::SETTINGS_ERROR));
        assert_eq!(check_settings(&[0x6]), Err(code::FRAME_ERROR));
        assert_eq!(check_settings(&[0x1, 0x0, 0x7, 0x0, 0x21, 0x5]), Ok(()));
        let g = goaway(8);
        assert_eq!(&g[..], &[GOAWAY as u8, 1, 8]);
    }
}
