//! The vocabulary HTTP/1.1, HTTP/2, HTTP/3 and the proxy share: spans into a message's
//! bytes, byte classes, comma-separated lists and q-values, number writers, the normalized
//! path, authorities, and header fields rendered once for many responses.
//!
//! Nothing here knows a protocol, a socket or a clock; every protocol module sits above it.

pub mod authority;
mod chars;
mod list;
mod names;
mod number;
pub mod path;
mod shared;
mod span;
pub mod swar;

pub(crate) use chars::class;
pub use chars::{LOWER_TOKEN, TCHAR, VALUE};
pub use list::{accept_q, has_token, parse_q, tokens, trim_ows};
pub use names::field_name;
pub use number::{decimal, parse_decimal, put_hex};
pub use shared::SharedFields;
pub use span::{HeaderSpan, Span};

/// The request method of `bytes`: `GET`, nearly every request's, by one compare; the rest
/// through `http`'s parser (which validates the token).
#[inline]
pub fn method(bytes: &[u8]) -> Result<http::Method, http::method::InvalidMethod> {
    if bytes == b"GET" {
        Ok(http::Method::GET)
    } else {
        http::Method::from_bytes(bytes)
    }
}

/// Whether a response with this status never has a body (RFC 9110 §6.4.1): 1xx, 204, 304.
#[inline]
pub fn bodiless(status: http::StatusCode) -> bool {
    use http::StatusCode;
    status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
}

/// A response field as HTTP/2 and HTTP/3 encode it (name and value bytes), unless it is
/// connection-specific and so left out (RFC 9113 §8.2.2, RFC 9114 §4.2).
#[inline]
pub fn response_field((n, v): &(http::HeaderName, http::HeaderValue)) -> Option<(&[u8], &[u8])> {
    use http::header::{CONNECTION, TRANSFER_ENCODING, UPGRADE};
    let specific = n == CONNECTION
        || n == TRANSFER_ENCODING
        || n == UPGRADE
        || n.as_str() == "keep-alive"
        || n.as_str() == "proxy-connection";
    (!specific).then(|| (n.as_str().as_bytes(), v.as_bytes()))
}

/// The TLS version of a request's connection (the engine's `Request::tls_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
    /// TLS of a version not known here (or not known at all: a request an app built).
    Other,
}

impl TlsVersion {
    /// The version's name as OpenSSL and nginx's `$ssl_protocol` write it: `TLSv1.2`,
    /// `TLSv1.3`, `TLS` (other).
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1.2",
            TlsVersion::Tls13 => "TLSv1.3",
            TlsVersion::Other => "TLS",
        }
    }
}
