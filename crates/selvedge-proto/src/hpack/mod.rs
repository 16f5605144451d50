//! HPACK: header compression for HTTP/2 (RFC 7541).
//!
//! * [`Decoder`] turns a complete header block (the concatenated fragments of
//!   one HEADERS/PUSH_PROMISE frame and its CONTINUATION frames) into
//!   [`HeaderField`]s, handed to a callback one at a time. Names of static
//!   table entries come back as `&'static [u8]` plus a [`Token`]; literal
//!   strings that are not Huffman-coded are borrowed from the input block;
//!   dynamic-table entries are borrowed from the decoder as `&Bytes` (owning
//!   one is a reference-count increment); Huffman-decoded strings come back
//!   as owned [`bytes::Bytes`] carved out of a per-decoder 4 KiB chunk, so
//!   there is no allocation per header. See [`FieldBytes`].
//! * [`Encoder`] writes a header list into a [`bytes::BytesMut`], choosing
//!   between indexed and literal representations (see [`Indexing`] for the
//!   policy), Huffman-coding a string only when that is not longer than the
//!   raw string, and writing the Huffman output straight into the destination
//!   behind a guessed length prefix (no temporary buffer).
//! * [`Token`] names the static-table header names and other common HTTP/2
//!   header names; [`Token::from_bytes`] is a length-then-bytes match.
//! * [`huffman`] holds the RFC 7541 Appendix B code and a generated
//!   nibble-at-a-time decoding state machine.
//!
//! # Errors and connection state
//!
//! Every [`DecodeError`] is a connection error of type COMPRESSION_ERROR
//! (RFC 9113 §4.3), with one exception: [`DecodeError::HeaderListTooLarge`].
//! When the decoded header list grows past
//! [`Decoder::set_max_header_list_size`], the decoder stops handing fields to
//! the callback at once, but still walks the rest of the block so that its
//! dynamic table stays in step with the peer's encoder; it then returns
//! `HeaderListTooLarge`. The caller may therefore refuse just the one stream
//! (e.g. with a 431 response or RST_STREAM) and keep the connection. Walking
//! the rest costs O(block length): references to (possibly huge) table
//! entries are not copied once emission has stopped, so an "HPACK bomb"
//! cannot make the decoder allocate. With
//! [`Decoder::set_abandon_list_size`], a block whose decoded size goes far
//! past the limit is not walked to its end: `HeaderListAbandoned`, and the
//! connection ends (ENHANCE_YOUR_CALM). After any other error the table may be
//! out of step with the peer and the connection must be torn down.
#![forbid(unsafe_code)]

pub mod decoder;
pub mod encoder;
mod error;
pub mod huffman;
pub mod table;

pub use decoder::{Decoder, FieldBytes, HeaderField, DEFAULT_MAX_HEADER_LIST_SIZE};
pub use encoder::{Encoder, Indexing};
pub use error::DecodeError;
pub use table::{Token, STATIC_TABLE};

use bytes::{BufMut, BytesMut};

/// The initial value of SETTINGS_HEADER_TABLE_SIZE (RFC 9113 §6.5.2), and the
/// dynamic table size both sides start with.
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// Per-entry overhead counted in the dynamic table size (RFC 7541 §4.1) and,
/// by RFC 9113 §6.5.2, in the header list size.
pub const ENTRY_OVERHEAD: usize = 32;

/// Largest integer the decoder accepts in any prefix integer (RFC 7541 §5.1).
/// Everything an integer can stand for (an index, a string length, a table
/// size) is far below this in practice.
pub const MAX_INT: usize = u32::MAX as usize;

/// Number of bytes `value` takes as an integer with an `prefix_bits`-bit
/// prefix.
#[inline]
pub(crate) fn int_len(value: usize, prefix_bits: u32) -> usize {
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        return 1;
    }
    let mut rest = value - max_prefix;
    let mut n = 2;
    while rest >= 0x80 {
        rest >>= 7;
        n += 1;
    }
    n
}

/// Writes `value` as an `prefix_bits`-bit prefix integer into `out`, which
/// must be exactly [`int_len`] bytes long; `flags` fills the bits of the
/// first byte above the prefix.
#[inline]
pub(crate) fn write_int(out: &mut [u8], value: usize, prefix_bits: u32, flags: u8) {
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        out[0] = flags | value as u8;
        return;
    }
    out[0] = flags | max_prefix as u8;
    let mut rest = value - max_prefix;
    let mut i = 1;
    while rest >= 0x80 {
        out[i] = 0x80 | (rest & 0x7f) as u8;
        rest >>= 7;
        i += 1;
    }
    out[i] = rest as u8;
}

/// Appends `value` as an `prefix_bits`-bit prefix integer to `dst`.
#[inline]
pub(crate) fn encode_int(dst: &mut BytesMut, value: usize, prefix_bits: u32, flags: u8) {
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        dst.put_u8(flags | value as u8);
        return;
    }
    let mut buf = [0u8; 10];
    let n = int_len(value, prefix_bits);
    write_int(&mut buf[..n], value, prefix_bits, flags);
    dst.extend_from_slice(&buf[..n]);
}

/// Reads an `prefix_bits`-bit prefix integer starting at `block[*pos]`,
/// advancing `pos` past it.
///
/// At most five continuation bytes are read, and the value must not exceed
/// [`MAX_INT`]; anything else is [`DecodeError::IntegerOverflow`].
#[inline]
pub fn decode_int(block: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<usize, DecodeError> {
    let max_prefix = ((1u32 << prefix_bits) - 1) as u8;
    let first = match block.get(*pos) {
        Some(&b) => b & max_prefix,
        None => return Err(DecodeError::TruncatedInteger),
    };
    *pos += 1;
    if first < max_prefix {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(max_prefix);
    let mut shift = 0u32;
    loop {
        let b = match block.get(*pos) {
            Some(&b) => b,
            None => return Err(DecodeError::TruncatedInteger),
        };
        *pos += 1;
        value += u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 28 {
            return Err(DecodeError::IntegerOverflow);
        }
    }
    if value > MAX_INT as u64 {
        return Err(DecodeError::IntegerOverflow);
    }
    Ok(value as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(value: usize, prefix_bits: u32, flags: u8) -> Vec<u8> {
        let mut dst = BytesMut::new();
        encode_int(&mut dst, value, prefix_bits, flags);
        assert_eq!(dst.len(), int_len(value, prefix_bits));
        dst.to_vec()
    }

    fn dec(bytes: &[u8], prefix_bits: u32) -> Result<(usize, usize), DecodeError> {
        let mut pos = 0;
        decode_int(bytes, &mut pos, prefix_bits).map(|v| (v, pos))
    }

    #[test]
    fn rfc_c1_integer_examples() {
        // C.1.1: 10 with a 5-bit prefix.
        assert_eq!(enc(10, 5, 0), [0x0a]);
        assert_eq!(dec(&[0x0a], 5), Ok((10, 1)));
        // C.1.2: 1337 with a 5-bit prefix.
        assert_eq!(enc(1337, 5, 0), [0x1f, 0x9a, 0x0a]);
        assert_eq!(dec(&[0x1f, 0x9a, 0x0a], 5), Ok((1337, 3)));
        // C.1.3: 42 at an octet boundary.
        assert_eq!(enc(42, 8, 0), [0x2a]);
        assert_eq!(dec(&[0x2a], 8), Ok((42, 1)));
    }

    #[test]
    fn flags_are_kept_and_ignored() {
        assert_eq!(enc(5, 6, 0x40), [0x45]);
        assert_eq!(dec(&[0xc5], 6), Ok((5, 1)));
        assert_eq!(enc(63, 6, 0x40), [0x7f, 0x00]);
        assert_eq!(dec(&[0x7f, 0x00], 6), Ok((63, 2)));
    }

    #[test]
    fn round_trip_many() {
        for prefix in 1..=8u32 {
            let mut v = 0usize;
            while v < MAX_INT {
                let bytes = enc(v, prefix, 0);
                assert_eq!(dec(&bytes, prefix), Ok((v, bytes.len())), "v={v} p={prefix}");
                v = v * 3 + 1;
            }
            let bytes = enc(MAX_INT, prefix, 0);
            assert_eq!(dec(&bytes, prefix), Ok((MAX_INT, bytes.len())));
        }
    }

    #[test]
    fn truncated_and_overflowing() {
        assert_eq!(dec(&[], 5), Err(DecodeError::TruncatedInteger));
        assert_eq!(dec(&[0x1f], 5), Err(DecodeError::TruncatedInteger));
        assert_eq!(dec(&[0x1f, 0x80, 0x80], 5), Err(DecodeError::TruncatedInteger));
        // Six continuation bytes.
        assert_eq!(dec(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], 5), Err(DecodeError::IntegerOverflow));
        // 2^35-ish: five bytes but too big.
        assert_eq!(dec(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f], 5), Err(DecodeError::IntegerOverflow));
        // One above MAX_INT.
        let mut bytes = enc(MAX_INT, 5, 0);
        assert_eq!(dec(&bytes, 5), Ok((MAX_INT, bytes.len())));
        // Bump the first continuation byte's payload by one: MAX_INT + 1.
        bytes[1] += 1;
        assert_eq!(dec(&bytes, 5), Err(DecodeError::IntegerOverflow));
    }
}

/// The header-block examples of RFC 7541 Appendix C, shared by the encoder
/// and decoder tests.
#[cfg(test)]
pub(crate) mod rfc_examples {
    /// One example block: the wire bytes, the header list, and the dynamic
    /// table size after decoding it.
    pub(crate) struct Example {
        pub(crate) wire: &'static str,
        pub(crate) headers: &'static [(&'static str, &'static str)],
        pub(crate) table_size: usize,
    }

    const REQ1: &[(&str, &str)] =
        &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")];
    const REQ2: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
        ("cache-control", "no-cache"),
    ];
    const REQ3: &[(&str, &str)] = &[
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    const RESP1: &[(&str, &str)] = &[
        (":status", "302"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];
    const RESP2: &[(&str, &str)] = &[
        (":status", "307"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("location", "https://www.example.com"),
    ];
    const RESP3: &[(&str, &str)] = &[
        (":status", "200"),
        ("cache-control", "private"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
    ];

    /// C.3: requests without Huffman coding (table size 4096).
    pub(crate) const C3: [Example; 3] = [
        Example { wire: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d", headers: REQ1, table_size: 57 },
        Example { wire: "8286 84be 5808 6e6f 2d63 6163 6865", headers: REQ2, table_size: 110 },
        Example {
            wire: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            headers: REQ3,
            table_size: 164,
        },
    ];

    /// C.4: requests with Huffman coding (table size 4096).
    pub(crate) const C4: [Example; 3] = [
        Example { wire: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", headers: REQ1, table_size: 57 },
        Example { wire: "8286 84be 5886 a8eb 1064 9cbf", headers: REQ2, table_size: 110 },
        Example { wire: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf", headers: REQ3, table_size: 164 },
    ];

    /// C.5: responses without Huffman coding (table size 256).
    pub(crate) const C5: [Example; 3] = [
        Example {
            wire: "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 \
                   3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 \
                   7777 2e65 7861 6d70 6c65 2e63 6f6d",
            headers: RESP1,
            table_size: 222,
        },
        Example { wire: "4803 3330 37c1 c0bf", headers: RESP2, table_size: 222 },
        Example {
            wire: "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 \
                   3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a \
                   584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 \
                   3630 303b 2076 6572 7369 6f6e 3d31",
            headers: RESP3,
            table_size: 215,
        },
    ];

    /// C.6: responses with Huffman coding (table size 256).
    pub(crate) const C6: [Example; 3] = [
        Example {
            wire: "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 \
                   66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            headers: RESP1,
            table_size: 222,
        },
        Example { wire: "4883 640e ffc1 c0bf", headers: RESP2, table_size: 222 },
        Example {
            wire: "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a \
                   839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 \
                   72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            headers: RESP3,
            table_size: 215,
        },
    ];

    /// Parses hex, ignoring whitespace.
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        digits.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap()).collect()
    }

    /// A small xorshift generator for the pseudo-random tests.
    pub(crate) struct XorShift(pub(crate) u64);

    impl XorShift {
        pub(crate) fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        /// Uniform-ish in `0..n` (`n > 0`).
        pub(crate) fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }
}
