//! QPACK (RFC 9204) without a dynamic table, and without I/O.
//!
//! We advertise a dynamic table capacity of 0 and no blocked streams (the defaults), so a
//! peer's field sections may only use the static table and literals: the decoder refuses
//! any dynamic reference (QPACK_DECOMPRESSION_FAILED), needs no encoder or decoder stream,
//! and never blocks. The encoder writes static references and literals too (a dynamic
//! table would save bytes on repeated response fields at the price of per-connection
//! state and stream-ordering work; for responses the savings are small).
//!
//! The string and integer coding is HPACK's (RFC 7541 §5), which QPACK reuses.

use std::sync::OnceLock;

use bytes::{BufMut, BytesMut};

use crate::hpack::encoder::write_string;
use crate::hpack::{decode_int, encode_int, huffman, DecodeError, FieldBytes, HeaderField, Token};

/// The static table (RFC 9204 Appendix A).
pub static STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    ("strict-transport-security", "max-age=31536000; includesubdomains"),
    ("strict-transport-security", "max-age=31536000; includesubdomains; preload"),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    ("content-security-policy", "script-src 'none'; object-src 'none'; base-uri 'none'"),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// Index of the static table's `:status` entry without a value match, for a literal
/// with a name reference.
const STATUS_NAME: usize = 24;

/// A static entry as a decoded field.
fn static_field(index: usize, never_indexed: bool) -> Result<HeaderField<'static>, DecodeError> {
    let (name, value) = STATIC.get(index).ok_or(DecodeError::IndexOutOfRange { index })?;
    Ok(HeaderField {
        token: Token::from_bytes(name.as_bytes()),
        name: FieldBytes::Static(name.as_bytes()),
        value: FieldBytes::Static(value.as_bytes()),
        never_indexed,
    })
}

/// A field section to decode (RFC 9204 §4.5), with the decoded size limit (our
/// SETTINGS_MAX_FIELD_SECTION_SIZE, counted as RFC 9114 §4.2.2 says).
#[derive(Debug, Clone, Copy)]
pub struct Section<'a> {
    /// The encoded field section (a HEADERS frame's payload).
    pub block: &'a [u8],
    /// The decoded size limit.
    pub max_size: usize,
}

/// A string literal at `pos` whose length has a `prefix`-bit prefix with the Huffman flag
/// just above it; Huffman-decoded strings go into `scratch` (reserved for the whole
/// block beforehand, so each is split off without copying).
fn string<'a>(
    block: &'a [u8],
    pos: &mut usize,
    prefix: u32,
    scratch: &mut BytesMut,
) -> Result<FieldBytes<'a>, DecodeError> {
    let huff = block.get(*pos).is_some_and(|&b| b & (1 << prefix) != 0);
    let len = decode_int(block, pos, prefix)?;
    let end = pos.checked_add(len).filter(|&e| e <= block.len()).ok_or(DecodeError::StringLengthExceedsInput)?;
    let raw = &block[*pos..end];
    *pos = end;
    if !huff {
        return Ok(FieldBytes::Borrowed(raw));
    }
    if scratch.capacity() == 0 {
        scratch.reserve(huffman::max_decoded_len(block.len()) + 1);
    }
    huffman::decode(raw, scratch)?;
    Ok(FieldBytes::Owned(scratch.split().freeze()))
}

impl Section<'_> {
    /// Gives each field to `emit`, in order. Any reference to a dynamic table, or a
    /// section that does not decode, is an error (QPACK_DECOMPRESSION_FAILED); past
    /// `max_size` it is [`DecodeError::HeaderListTooLarge`].
    pub fn decode_each<F: FnMut(HeaderField<'_>)>(self, mut emit: F) -> Result<(), DecodeError> {
        let b = self.block;
        let mut pos = 0;
        // Required Insert Count: 0, as nothing can be in our table (§4.5.1.1); Base
        // means nothing then.
        if decode_int(b, &mut pos, 8)? != 0 {
            return Err(DecodeError::IndexOutOfRange { index: 0 });
        }
        decode_int(b, &mut pos, 7)?;
        let mut scratch = BytesMut::new();
        let mut size = 0usize;
        while let Some(&first) = b.get(pos) {
            let field = if first & 0x80 != 0 {
                // Indexed field line (§4.5.2): static only.
                if first & 0x40 == 0 {
                    return Err(DecodeError::IndexOutOfRange { index: 0 });
                }
                static_field(decode_int(b, &mut pos, 6)?, false)?
            } else if first & 0x40 != 0 {
                // Literal field line with name reference (§4.5.4): static only.
                if first & 0x10 == 0 {
                    return Err(DecodeError::IndexOutOfRange { index: 0 });
                }
                let never_indexed = first & 0x20 != 0;
                let index = decode_int(b, &mut pos, 4)?;
                let (name, _) = STATIC.get(index).ok_or(DecodeError::IndexOutOfRange { index })?;
                let value = string(b, &mut pos, 7, &mut scratch)?;
                HeaderField {
                    token: Token::from_bytes(name.as_bytes()),
                    name: FieldBytes::Static(name.as_bytes()),
                    value,
                    never_indexed,
                }
            } else if first & 0x20 != 0 {
                // Literal field line with literal name (§4.5.6).
                let never_indexed = first & 0x10 != 0;
                let name = string(b, &mut pos, 3, &mut scratch)?;
                let value = string(b, &mut pos, 7, &mut scratch)?;
                HeaderField { token: Token::from_bytes(&name), name, value, never_indexed }
            } else {
                // Post-base references (§4.5.3, §4.5.5) are dynamic.
                return Err(DecodeError::IndexOutOfRange { index: 0 });
            };
            size = size.saturating_add(field.size());
            if size > self.max_size {
                return Err(DecodeError::HeaderListTooLarge);
            }
            emit(field);
        }
        Ok(())
    }
}

/// A name of the static table: its first index, and its entries' values.
struct Name {
    name: &'static [u8],
    first: usize,
    values: Vec<(&'static [u8], usize)>,
}

/// The static table's names by length, each name once.
fn by_len() -> &'static [Vec<Name>] {
    static BY_LEN: OnceLock<Vec<Vec<Name>>> = OnceLock::new();
    BY_LEN.get_or_init(|| {
        let longest = STATIC.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        let mut v: Vec<Vec<Name>> = (0..=longest).map(|_| Vec::new()).collect();
        for (i, (n, val)) in STATIC.iter().enumerate() {
            let bucket = &mut v[n.len()];
            match bucket.iter_mut().find(|e| e.name == n.as_bytes()) {
                Some(e) => e.values.push((val.as_bytes(), i)),
                None => bucket.push(Name { name: n.as_bytes(), first: i, values: vec![(val.as_bytes(), i)] }),
            }
        }
        v
    })
}

/// The static entry that is `name: value`, else the first whose name is `name`.
#[inline]
fn find(name: &[u8], value: &[u8]) -> (Option<usize>, Option<usize>) {
    let Some(bucket) = by_len().get(name.len()) else { return (None, None) };
    for e in bucket {
        if e.name == name {
            return match e.values.iter().find(|(v, _)| *v == value) {
                Some(&(_, i)) => (Some(i), None),
                None => (None, Some(e.first)),
            };
        }
    }
    (None, None)
}

/// The static entry for `:status` with this code.
fn status_index(status: u16) -> Option<usize> {
    Some(match status {
        103 => 24,
        200 => 25,
        304 => 26,
        404 => 27,
        503 => 28,
        100 => 63,
        204 => 64,
        206 => 65,
        302 => 66,
        400 => 67,
        403 => 68,
        421 => 69,
        425 => 70,
        500 => 71,
        _ => return None,
    })
}

/// A request's field section (pseudo-header fields first, names in lower case): the
/// encoded-section prefix, then the fields as [`encode_fields`] writes them.
pub fn encode_request<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, dst: &mut BytesMut) {
    dst.put_slice(&[0, 0]);
    encode_fields(fields, dst);
}

/// A response's field section: the encoded-section prefix, `:status`, then `fields`
/// (lower-case names, as `http`'s are). Values are Huffman-coded where that is shorter;
/// literal names are not (a name outside the static table is rarely short to code).
pub fn encode_response<'a>(status: u16, fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, dst: &mut BytesMut) {
    encode_status(status, dst);
    encode_fields(fields, dst);
}

/// The encoded-section prefix (Required Insert Count 0, Base 0) and `:status`: what
/// [`encode_fields`] continues.
pub fn encode_status(status: u16, dst: &mut BytesMut) {
    dst.put_slice(&[0, 0]);
    match status_index(status) {
        Some(i) => encode_int(dst, i, 6, 0xc0),
        None => {
            let mut code = [0u8; 3];
            let mut s = status.min(999);
            for c in code.iter_mut().rev() {
                *c = b'0' + (s % 10) as u8;
                s /= 10;
            }
            encode_int(dst, STATUS_NAME, 4, 0x50);
            write_string(&code, dst, false);
        }
    }
}

/// The field lines of `fields`: static references where the table has the field or its
/// name, literals otherwise (lower-case names, as `http`'s are). Values are Huffman-coded
/// where that is shorter; literal names are not (a name outside the static table is rarely
/// short to code). With no dynamic table, field lines do not depend on what came before
/// them: lines encoded once can be copied into any section.
pub fn encode_fields<'a>(fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, dst: &mut BytesMut) {
    for (name, value) in fields {
        match find(name, value) {
            (Some(i), _) => encode_int(dst, i, 6, 0xc0),
            (None, Some(i)) => {
                encode_int(dst, i, 4, 0x50);
                write_string(value, dst, true);
            }
            (None, None) => {
                encode_int(dst, name.len(), 3, 0x20);
                dst.put_slice(name);
                write_string(value, dst, true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(block: &[u8], max: usize) -> Result<Vec<(String, String)>, DecodeError> {
        let mut out = Vec::new();
        Section { block, max_size: max }.decode_each(|f| {
            out.push((
                String::from_utf8(f.name.as_bytes().to_vec()).unwrap(),
                String::from_utf8(f.value.as_bytes().to_vec()).unwrap(),
            ))
        })?;
        Ok(out)
    }

    /// A whole response section, as the driver writes it.
    fn encode_response<'a>(status: u16, fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, dst: &mut BytesMut) {
        encode_status(status, dst);
        encode_fields(fields, dst);
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_static_table_is_rfc_9204s() {
        assert_eq!(STATIC.len(), 99);
        assert_eq!(STATIC[0], (":authority", ""));
        assert_eq!(STATIC[17], (":method", "GET"));
        assert_eq!(STATIC[25], (":status", "200"));
        assert_eq!(STATIC[52], ("content-type", "text/html; charset=utf-8"));
        assert_eq!(STATIC[71], (":status", "500"));
        assert_eq!(STATIC[92], ("server", ""));
        assert_eq!(STATIC[98], ("x-frame-options", "sameorigin"));
    }

    #[test]
    fn responses_round_trip() {
        let fields: &[(&str, &str)] = &[
            ("date", "Thu, 26 Nov 2026 15:51:29 GMT"),
            ("server", "selvedge"),
            ("content-length", "612"),
            ("content-type", "text/html; charset=utf-8"),
            ("accept-ranges", "bytes"),
            ("x-custom", "v"),
            ("etag", "\"264-18eba30c1dff7819\""),
        ];
        for status in [200u16, 204, 301, 404, 500, 599] {
            let mut b = BytesMut::new();
            encode_response(status, fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut b);
            let got = decode(&b, usize::MAX).unwrap();
            let mut want = vec![(":status".to_string(), status.to_string())];
            want.extend(pairs(fields));
            assert_eq!(got, want);
        }
        // Static matches are one byte each: `:status 200` (25), `content-type` (52),
        // `accept-ranges: bytes` (32).
        let mut b = BytesMut::new();
        encode_response(200, [(&b"accept-ranges"[..], &b"bytes"[..])], &mut b);
        assert_eq!(&b[..], &[0, 0, 0xc0 | 25, 0xc0 | 32]);
    }

    #[test]
    fn rfc_9204_b1_literal_with_name_reference() {
        // RFC 9204 Appendix B.1: `:path /index.html`, a static name reference.
        let block = [0x00, 0x00, 0x51, 0x0b, 0x2f, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x2e, 0x68, 0x74, 0x6d, 0x6c];
        assert_eq!(decode(&block, usize::MAX).unwrap(), pairs(&[(":path", "/index.html")]));
    }

    #[test]
    fn requests_with_huffman_and_literal_names() {
        // `:method GET` indexed, `:path` with a Huffman value, a literal name and value.
        let mut b = BytesMut::new();
        b.put_slice(&[0, 0, 0xc0 | 17]);
        encode_int(&mut b, 1, 4, 0x50);
        write_string(b"/a/b?c=d", &mut b, true);
        encode_int(&mut b, 6, 3, 0x20);
        b.put_slice(b"x-test");
        write_string(b"some value", &mut b, true);
        assert_eq!(
            decode(&b, usize::MAX).unwrap(),
            pairs(&[(":method", "GET"), (":path", "/a/b?c=d"), ("x-test", "some value")])
        );
        // A Huffman-coded literal name.
        let mut b = BytesMut::new();
        b.put_slice(&[0, 0]);
        let mut name = BytesMut::new();
        huffman::encode(b"custom-key", &mut name);
        encode_int(&mut b, name.len(), 3, 0x28);
        b.put_slice(&name);
        write_string(b"v", &mut b, false);
        assert_eq!(decode(&b, usize::MAX).unwrap(), pairs(&[("custom-key", "v")]));
    }

    #[test]
    fn dynamic_references_and_bad_input_fail() {
        for block in [
            &[0x01, 0x00, 0xc0 | 17][..], // Required Insert Count 1
            &[0, 0, 0x80 | 1],            // indexed, dynamic
            &[0, 0, 0x40 | 1, 0x00],      // name reference, dynamic
            &[0, 0, 0x10],                // indexed post-base
            &[0, 0, 0x00, 0x00],          // literal with post-base name reference
            &[0, 0, 0xc0 | 0x3f, 99],     // static index 162
            &[0, 0, 0x51, 0x0b, b'/'],    // string past the end
            &[0, 0, 0x51, 0x81, 0xff],    // Huffman EOS
            &[0],                         // truncated prefix
        ] {
            let e = decode(block, usize::MAX).unwrap_err();
            assert_ne!(e, DecodeError::HeaderListTooLarge, "{block:?}");
        }
        // Over the decoded size limit: `:authority` (10 + 0 + 32) twice is 84.
        assert_eq!(decode(&[0, 0, 0xc0, 0xc0], 83), Err(DecodeError::HeaderListTooLarge));
        assert_eq!(decode(&[0, 0, 0xc0, 0xc0], 84).unwrap().len(), 2);
    }
}
