//! Decoded field sections to request heads, for HTTP/2 (HPACK) and HTTP/3 (QPACK): the
//! checks of RFC 9113 §8.2–8.3 and RFC 9114 §4.2–4.3, which say the same. A malformed
//! request is a stream error (HTTP/2 PROTOCOL_ERROR, §8.1.1; HTTP/3 H3_MESSAGE_ERROR,
//! §4.1.2).
//!
//! The decoded fields are copied once into one buffer per request, which the
//! [`RequestHead`]'s spans point into (as an HTTP/1 request's point into its receive
//! buffer).

use bytes::{Bytes, BytesMut};
use http::Method;

use crate::app::request::RequestHead;
use crate::hpack::{self, DecodeError, HeaderField, Token};
use crate::message::{parse_decimal, swar, HeaderSpan, Span, LOWER_TOKEN};

/// Bytes of decoded fields the arena allocates at a time.
const ARENA: usize = 16 * 1024;

/// Why a header block gives no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// The request is malformed: RST_STREAM(PROTOCOL_ERROR), H3_MESSAGE_ERROR.
    Malformed,
    /// The decoded list exceeds our SETTINGS_MAX_HEADER_LIST_SIZE
    /// (SETTINGS_MAX_FIELD_SECTION_SIZE): answer 431.
    TooLarge,
    /// The field section cannot be decoded: the connection ends with COMPRESSION_ERROR
    /// (QPACK_DECOMPRESSION_FAILED).
    Compression,
    /// The block decodes to far more than the limit (an HPACK bomb) and was abandoned:
    /// the connection ends with ENHANCE_YOUR_CALM.
    Abandoned,
}

/// What a request's header block tells: the request's head, and what the connection needs
/// besides.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) req: RequestHead,
    pub(crate) content_length: Option<u64>,
    /// The RFC 9218 `priority` field, if any.
    pub(crate) priority: Option<Bytes>,
}

#[inline]
fn token_char(b: u8) -> bool {
    LOWER_TOKEN[b as usize]
}

fn valid_value(v: &[u8]) -> bool {
    !swar::has_nul_cr_lf(v) && !matches!(v.first(), Some(b' ' | b'\t')) && !matches!(v.last(), Some(b' ' | b'\t'))
}

/// A field section that decodes field by field: an HPACK block with its connection's
/// decoder, or a QPACK one.
pub(crate) trait Fields {
    /// Gives each field to `emit`, in order; on [`DecodeError::HeaderListTooLarge`] the
    /// fields that fit were given.
    fn decode<F: FnMut(HeaderField<'_>)>(self, emit: F) -> Result<(), DecodeError>;

    /// The encoded size, from which the decoded size is guessed.
    fn encoded_len(&self) -> usize;
}

/// A QPACK field section (no dynamic table: nothing to decode it with but itself).
#[cfg(feature = "http3")]
impl Fields for selvedge_proto::h3::qpack::Section<'_> {
    #[inline]
    fn decode<F: FnMut(HeaderField<'_>)>(self, emit: F) -> Result<(), DecodeError> {
        self.decode_each(emit)
    }

    #[inline]
    fn encoded_len(&self) -> usize {
        self.block.len()
    }
}

/// An HPACK block and its connection's decoder.
pub(crate) struct Hpack<'a>(pub(crate) &'a mut hpack::Decoder, pub(crate) &'a [u8]);

impl Fields for Hpack<'_> {
    #[inline]
    fn decode<F: FnMut(HeaderField<'_>)>(self, emit: F) -> Result<(), DecodeError> {
        self.0.decode(self.1, emit)
    }

    #[inline]
    fn encoded_len(&self) -> usize {
        self.1.len()
    }
}

/// Whether the field may not appear in HTTP/2 (RFC 9113 §8.2.2) or HTTP/3 (RFC 9114 §4.2).
fn connection_specific(token: Option<Token>, name: &[u8]) -> bool {
    matches!(token, Some(Token::Connection | Token::TransferEncoding | Token::Upgrade))
        || name == b"keep-alive"
        || name == b"proxy-connection"
}

fn decode_err(e: DecodeError) -> HeaderError {
    match e {
        DecodeError::HeaderListTooLarge => HeaderError::TooLarge,
        DecodeError::HeaderListAbandoned => HeaderError::Abandoned,
        _ => HeaderError::Compression,
    }
}

/// Decodes and checks a request's field section. `extended_connect`: `:protocol` is allowed
/// on CONNECT (we advertised SETTINGS_ENABLE_CONNECT_PROTOCOL, RFC 8441 §4).
///
/// The fields are copied into `arena` (one allocation serves many requests; each request's
/// bytes are split off and shared).
pub(crate) fn request(fields: impl Fields, extended_connect: bool, arena: &mut BytesMut) -> Result<Head, HeaderError> {
    let need = fields.encoded_len() * 2 + 64;
    let buf = arena;
    buf.clear();
    if buf.capacity() < need {
        buf.reserve(need.max(ARENA));
    }
    let mut put = |b: &[u8]| {
        let start = buf.len();
        buf.extend_from_slice(b);
        Span { start: start as u32, len: b.len() as u32 }
    };
    let mut malformed = false;
    let mut regular_seen = false;
    let (mut method, mut scheme, mut path, mut authority, mut host) = (None, None, None, None, None);
    let mut protocol = None;
    let mut headers = crate::io::pool::take_spans();
    let mut content_length: Option<u64> = None;
    let mut priority: Option<Bytes> = None;
    let r = fields.decode(|f| {
        if malformed {
            return;
        }
        let name = f.name.as_bytes();
        let value = f.value.as_bytes();
        // Static-table values are known good.
        if name.is_empty() || (!matches!(f.value, hpack::FieldBytes::Static(_)) && !valid_value(value)) {
            malformed = true;
            return;
        }
        if name[0] == b':' {
            let slot = match name {
                b":method" => &mut method,
                b":scheme" => &mut scheme,
                b":path" => &mut path,
                b":authority" => &mut authority,
                b":protocol" if extended_connect => &mut protocol,
                _ => {
                    malformed = true;
                    return;
                }
            };
            if regular_seen || slot.is_some() {
                malformed = true;
                return;
            }
            *slot = Some(put(value));
            return;
        }
        regular_seen = true;
        // A name that is a known token is a valid lower-case token.
        if (f.token.is_none() && !name.iter().all(|&b| token_char(b))) || connection_specific(f.token, name) {
            malformed = true;
            return;
        }
        match f.token {
            Some(Token::Te) if value != b"trailers" => malformed = true,
            Some(Token::ContentLength) => {
                let n = parse_decimal(value);
                match (n, content_length) {
                    (Some(n), None) => content_length = Some(n),
                    (Some(n), Some(m)) if n == m => {}
                    _ => malformed = true,
                }
            }
            _ => {}
        }
        if f.token == Some(Token::Priority) {
            priority = Some(Bytes::copy_from_slice(value));
        }
        let n = put(name);
        let v = put(value);
        if f.token == Some(Token::Host) {
            // One `Host`, as HTTP/1.1 requires (RFC 9112 §3.2).
            if host.is_some() {
                malformed = true;
            }
            host = Some(v);
        }
        headers.push(HeaderSpan { name: n, value: v });
    });
    r.map_err(decode_err)?;
    if malformed {
        return Err(HeaderError::Malformed);
    }
    let Some(m) = method else { return Err(HeaderError::Malformed) };
    let method = crate::message::method(&buf[m.range()]).map_err(|_| HeaderError::Malformed)?;
    // An authority is `host[:port]` (no userinfo: RFC 9113 §8.3.1, RFC 9114 §4.3.1), and a
    // `Host` naming another entity than `:authority` makes the request malformed: the
    // virtual host is chosen by one and a script sees the other otherwise.
    for a in [authority, host].into_iter().flatten() {
        if !crate::message::authority::valid(&buf[a.range()]) {
            return Err(HeaderError::Malformed);
        }
    }
    if let (Some(a), Some(h)) = (authority, host) {
        if !buf[a.range()].eq_ignore_ascii_case(&buf[h.range()]) {
            return Err(HeaderError::Malformed);
        }
    }
    let authority = authority.or(host);
    if protocol.is_some() && (method != Method::CONNECT || scheme.is_none() || path.is_none() || authority.is_none()) {
        return Err(HeaderError::Malformed);
    }
    let (target, path, query) = if method == Method::CONNECT && protocol.is_none() {
        match (authority, scheme, path) {
            (Some(a), None, None) => (a, a, None),
            _ => return Err(HeaderError::Malformed),
        }
    } else {
        let (Some(_), Some(p)) = (scheme, path) else { return Err(HeaderError::Malformed) };
        let pb = &buf[p.range()];
        if pb.is_empty() || !(pb[0] == b'/' || (pb == b"*" && method == Method::OPTIONS)) {
            return Err(HeaderError::Malformed);
        }
        // A fragment is no part of a request's target (RFC 9113 §8.3.1, RFC 9114 §4.3.1), as
        // HTTP/1.1's parser holds: an upstream would cut the query there, where checks did not.
        // One pass to the query or a fragment; then the query alone for a fragment.
        let query_at = match swar::find_either(pb, b'?', b'#') {
            Some(i) if pb[i] == b'#' => return Err(HeaderError::Malformed),
            Some(i) if swar::find(&pb[i + 1..], b'#').is_some() => return Err(HeaderError::Malformed),
            found => found,
        };
        match query_at {
            Some(i) => (
                p,
                Span { start: p.start, len: i as u32 },
                Some(Span { start: p.start + i as u32 + 1, len: p.len - i as u32 - 1 }),
            ),
            None => (p, p, None),
        }
    };
    // This request's bytes; the spare room stays in the arena for the next one.
    let fields = buf.split();
    let req = RequestHead { buf: fields.freeze(), method, target, path, query, authority, headers, upgrade: protocol };
    Ok(Head { req, content_length, priority })
}

/// Decodes and checks a trailer section: no pseudo-header fields (RFC 9113 §8.1, RFC 9114
/// §4.3).
pub(crate) fn trailers(fields: impl Fields) -> Result<(), HeaderError> {
    let mut malformed = false;
    fields
        .decode(|f| {
            let name = f.name.as_bytes();
            if name.first() == Some(&b':') || !name.iter().all(|&b| token_char(b)) || !valid_value(&f.value) {
                malformed = true;
            }
        })
        .map_err(decode_err)?;
    if malformed {
        Err(HeaderError::Malformed)
    } else {
        Ok(())
    }
}

/// Only decodes a block (to keep the HPACK context in step) and drops it.
pub(crate) fn skip(dec: &mut hpack::Decoder, block: &[u8]) -> Result<(), HeaderError> {
    match dec.decode(block, |_| {}) {
        Ok(()) | Err(DecodeError::HeaderListTooLarge) => Ok(()),
        Err(e) => Err(decode_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(fields: &[(&str, &str)]) -> BytesMut {
        let mut enc = hpack::Encoder::new();
        let mut out = BytesMut::new();
        enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut out);
        out
    }

    fn decode(fields: &[(&str, &str)]) -> Result<Head, HeaderError> {
        request(Hpack(&mut hpack::Decoder::default(), &block(fields)), true, &mut BytesMut::new())
    }

    /// The request the driver makes of a head.
    fn req(h: RequestHead) -> crate::Request {
        crate::Request::new(h, http::Version::HTTP_2, crate::io::sys::PeerAddr::Unix, None, crate::Body::empty())
    }

    const BASE: [(&str, &str); 3] = [(":method", "GET"), (":scheme", "http"), (":path", "/a/b?x=1")];

    #[test]
    fn good_request() {
        let mut f = BASE.to_vec();
        f.push((":authority", "example.com"));
        f.push(("accept", "*/*"));
        f.push(("content-length", "5"));
        let h = decode(&f).unwrap();
        assert_eq!(h.content_length, Some(5));
        let r = req(h.req);
        assert_eq!(r.path(), "/a/b");
        assert_eq!(r.query(), Some("x=1"));
        assert_eq!(r.target(), "/a/b?x=1");
        assert_eq!(r.authority(), Some("example.com"));
        assert_eq!(r.header("accept"), Some(&b"*/*"[..]));
    }

    #[test]
    fn malformed_requests() {
        let cases: &[&[(&str, &str)]] = &[
            &[(":method", "GET"), (":scheme", "http")],
            &[(":method", "GET"), (":path", "/")],
            &[(":scheme", "http"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/a?action=delete#")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/a#b")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":status", "200")],
            &[(":method", "GET"), (":scheme", "http"), ("x", "y"), (":path", "/")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("Upper", "y")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("connection", "close")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("te", "gzip")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("x", " lead")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("content-length", "x")],
            // A `Host` naming another entity than `:authority`, or two `Host` fields.
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "a.test"), ("host", "b.test")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("host", "a.test"), ("host", "b.test")],
            // An authority that is not host[:port].
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "good.test:1/x@evil.example")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "good.test:@evil.example")],
            &[(":method", "GET"), (":scheme", "http"), (":path", "/"), ("host", "good.test:1,evil.example")],
            &[(":method", "CONNECT"), (":authority", "u@example.com:443")],
        ];
        for c in cases {
            assert_eq!(decode(c).err(), Some(HeaderError::Malformed), "{c:?}");
        }
        let mut f = BASE.to_vec();
        f.push(("te", "trailers"));
        assert!(decode(&f).is_ok());
        // The same entity, in another case: one authority.
        let mut f = BASE.to_vec();
        f.extend([(":authority", "Example.com:8443"), ("host", "example.COM:8443")]);
        assert_eq!(req(decode(&f).unwrap().req).authority(), Some("Example.com:8443"));
    }

    #[test]
    fn extended_connect() {
        let ws = [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/chat")];
        let mut f = ws.to_vec();
        f.push((":authority", "example.com"));
        let r = req(decode(&f).unwrap().req);
        assert_eq!((r.method(), r.upgrade(), r.path()), (&Method::CONNECT, Some("websocket"), "/chat"));
        // Not advertised: `:protocol` is an unknown pseudo-header.
        assert_eq!(
            request(Hpack(&mut hpack::Decoder::default(), &block(&f)), false, &mut BytesMut::new()).err(),
            Some(HeaderError::Malformed)
        );
        // `:protocol` needs CONNECT with :scheme, :path and :authority (RFC 8441 §4).
        assert_eq!(decode(&ws).err(), Some(HeaderError::Malformed));
        let get =
            [(":method", "GET"), (":protocol", "websocket"), (":scheme", "https"), (":path", "/"), (":authority", "a")];
        assert_eq!(decode(&get).err(), Some(HeaderError::Malformed));
        // Plain CONNECT has no upgrade.
        let plain = req(decode(&[(":method", "CONNECT"), (":authority", "example.com:443")]).unwrap().req);
        assert_eq!(plain.upgrade(), None);
    }

    #[test]
    fn list_size_limit_is_not_a_compression_error() {
        let mut dec = hpack::Decoder::default();
        dec.set_max_header_list_size(100);
        let big = "x".repeat(200);
        let mut f = BASE.to_vec();
        f.push(("big", &big));
        assert_eq!(request(Hpack(&mut dec, &block(&f)), true, &mut BytesMut::new()).err(), Some(HeaderError::TooLarge));
    }
}
