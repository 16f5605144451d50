//! A request head as the `h3` crate decodes it (QPACK, pseudo-header checks) to the
//! engine's [`RequestHead`], with the RFC 9114 §4.2 checks the crate leaves to us: no
//! connection-specific fields, `te` only `trailers`, one `content-length`. A malformed
//! request is a stream error of type H3_MESSAGE_ERROR (§4.1.2).
//!
//! The fields are copied once into one buffer per request, which the head's spans point
//! into (as HTTP/2's point into its decoded-field arena).

use bytes::BytesMut;
use http::{header, Method};

use crate::message::{parse_decimal, HeaderSpan, Span};
use crate::request::RequestHead;

/// Why a request head was refused: it is malformed (H3_MESSAGE_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// What a request's head tells: the head, and its declared body length.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) req: RequestHead,
    pub(crate) content_length: Option<u64>,
}

/// Whether the field may not appear in an HTTP/3 message (RFC 9114 §4.2): requests that
/// carry one are malformed, responses leave it out.
pub(crate) fn connection_specific(name: &header::HeaderName) -> bool {
    *name == header::CONNECTION
        || *name == header::TRANSFER_ENCODING
        || *name == header::UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

/// The engine's head of a decoded request.
pub(crate) fn request(parts: &http::request::Parts) -> Result<Head, Malformed> {
    let uri = &parts.uri;
    let pq = uri.path_and_query().map_or("", |p| p.as_str());
    let authority = uri.authority().map_or("", |a| a.as_str());
    let fields: usize = parts.headers.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
    let mut buf = BytesMut::with_capacity(pq.len() + authority.len() + fields);
    let mut put = |b: &[u8]| {
        let start = buf.len();
        buf.extend_from_slice(b);
        Span { start: start as u32, len: b.len() as u32 }
    };
    let authority = (!authority.is_empty()).then(|| put(authority.as_bytes()));
    let (target, path, query) = if parts.method == Method::CONNECT {
        let Some(a) = authority else { return Err(Malformed) };
        (a, a, None)
    } else {
        let p = put(pq.as_bytes());
        if pq.is_empty() || !(pq.starts_with('/') || (pq == "*" && parts.method == Method::OPTIONS)) {
            return Err(Malformed);
        }
        match pq.find('?') {
            Some(i) => (
                p,
                Span { start: p.start, len: i as u32 },
                Some(Span { start: p.start + i as u32 + 1, len: p.len - i as u32 - 1 }),
            ),
            None => (p, p, None),
        }
    };
    let mut headers = crate::pool::take_spans();
    let mut content_length = None;
    let mut host = None;
    for (n, v) in &parts.headers {
        if connection_specific(n) || (*n == header::TE && v != "trailers") {
            crate::pool::put_spans(headers);
            return Err(Malformed);
        }
        if *n == header::CONTENT_LENGTH {
            match (parse_decimal(v.as_bytes()), content_length) {
                (Some(x), None) => content_length = Some(x),
                (Some(x), Some(y)) if x == y => {}
                _ => {
                    crate::pool::put_spans(headers);
                    return Err(Malformed);
                }
            }
        }
        let name = put(n.as_str().as_bytes());
        let value = put(v.as_bytes());
        if *n == header::HOST && host.is_none() {
            host = Some(value);
        }
        headers.push(HeaderSpan { name, value });
    }
    let req = RequestHead {
        buf: buf.freeze(),
        method: parts.method.clone(),
        target,
        path,
        query,
        authority: authority.or(host),
        headers,
        upgrade: None,
    };
    Ok(Head { req, content_length })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(b: http::request::Builder) -> Result<crate::Request, Malformed> {
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let h = request(&parts)?;
        Ok(crate::Request::new(
            h.req,
            http::Version::HTTP_3,
            crate::sys::PeerAddr::Unix,
            Some(crate::TlsVersion::Tls13),
            crate::Body::empty(),
        ))
    }

    #[test]
    fn a_request_keeps_its_parts() {
        let r = head(
            http::Request::get("https://example.com/a%20b?x=1&y")
                .header("accept", "text/html")
                .header("cookie", "a=1")
                .header("cookie", "b=2"),
        )
        .unwrap();
        assert_eq!(r.method(), Method::GET);
        assert_eq!(r.target(), "/a%20b?x=1&y");
        assert_eq!(r.path(), "/a%20b");
        assert_eq!(r.query(), Some("x=1&y"));
        assert_eq!(r.authority(), Some("example.com"));
        assert_eq!(r.header("accept"), Some(&b"text/html"[..]));
        assert_eq!(r.headers().filter(|(n, _)| *n == "cookie").count(), 2);
        assert_eq!(r.version(), http::Version::HTTP_3);
    }

    #[test]
    fn connection_specific_fields_are_malformed() {
        for (n, v) in [("connection", "close"), ("transfer-encoding", "chunked"), ("keep-alive", "5"), ("te", "gzip")] {
            assert_eq!(head(http::Request::get("https://h/").header(n, v)).err(), Some(Malformed), "{n}");
        }
        assert!(head(http::Request::get("https://h/").header("te", "trailers")).is_ok());
    }

    #[test]
    fn content_length_must_agree() {
        let (p, ()) = http::Request::post("https://h/").header("content-length", "5").body(()).unwrap().into_parts();
        assert_eq!(request(&p).unwrap().content_length, Some(5));
        let b = http::Request::post("https://h/").header("content-length", "5").header("content-length", "6");
        assert_eq!(head(b).err(), Some(Malformed));
        assert_eq!(head(http::Request::post("https://h/").header("content-length", "x")).err(), Some(Malformed));
    }
}
