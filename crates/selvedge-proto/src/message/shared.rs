//! Header fields rendered once and shared by many responses.

use std::fmt;

use http::{HeaderName, HeaderValue};

/// Header fields rendered once and shared by many responses: a cached file's
/// `Last-Modified`, `ETag`, `Content-Type` and so on. The HTTP/1.1 composer copies their
/// pre-rendered lines with one `memcpy` instead of pushing, comparing and copying field by
/// field, and nothing is cloned or dropped per response but one `Arc`; HTTP/2 encodes the
/// fields in place, and a connection sends a head it already encoded with the same set
/// (same status, date and length, in the same HPACK table state) as the same bytes again.
/// The engine's `Response::shared_fields` attaches them to a response.
pub struct SharedFields {
    fields: Vec<(HeaderName, HeaderValue)>,
    h1: Box<[u8]>,
    has_date: bool,
    has_server: bool,
    /// The fields' HTTP/3 field lines (QPACK without a dynamic table is stateless, so one
    /// encoding serves every response), made by the first response that needs them.
    #[cfg(feature = "http3")]
    h3: std::sync::OnceLock<bytes::Bytes>,
    /// What a middleware derives from the fields, made by the first response that asks.
    derived: std::sync::OnceLock<u8>,
}

impl SharedFields {
    /// Renders `fields`. `Content-Length`, `Transfer-Encoding` and `Connection` are left
    /// out: the engine writes those itself from the body and the connection, as it does
    /// for a response's own headers.
    pub fn new(fields: impl IntoIterator<Item = (HeaderName, HeaderValue)>) -> SharedFields {
        use http::header::{CONNECTION, CONTENT_LENGTH, DATE, SERVER, TRANSFER_ENCODING};
        let fields: Vec<_> = fields
            .into_iter()
            .filter(|(n, _)| n != CONTENT_LENGTH && n != TRANSFER_ENCODING && n != CONNECTION)
            .collect();
        let mut h1 = Vec::new();
        for (n, v) in &fields {
            h1.extend_from_slice(n.as_str().as_bytes());
            h1.extend_from_slice(b": ");
            h1.extend_from_slice(v.as_bytes());
            h1.extend_from_slice(b"\r\n");
        }
        let has = |name| fields.iter().any(|(n, _)| *n == name);
        SharedFields {
            has_date: has(DATE),
            has_server: has(SERVER),
            h1: h1.into_boxed_slice(),
            fields,
            #[cfg(feature = "http3")]
            h3: std::sync::OnceLock::new(),
            derived: std::sync::OnceLock::new(),
        }
    }

    /// A fact about the fields that `derive` finds, found once for all the responses that
    /// share them (the engine's compressor reads their type, coding, `Cache-Control` and
    /// `Vary` this way).
    #[doc(hidden)]
    pub fn derived(&self, derive: impl FnOnce(&[(HeaderName, HeaderValue)]) -> u8) -> u8 {
        *self.derived.get_or_init(|| derive(&self.fields))
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[(HeaderName, HeaderValue)] {
        &self.fields
    }

    /// The HTTP/1.1 header lines (`name: value\r\n` each).
    #[doc(hidden)]
    pub fn h1_lines(&self) -> &[u8] {
        &self.h1
    }

    /// Whether the fields set `Date` / `Server` (the composer then adds neither).
    #[doc(hidden)]
    pub fn sets_date_server(&self) -> (bool, bool) {
        (self.has_date, self.has_server)
    }

    /// The fields' HTTP/3 field lines, `encode`d the first time.
    #[cfg(feature = "http3")]
    #[doc(hidden)]
    pub fn h3_lines(&self, encode: impl FnOnce(&[(HeaderName, HeaderValue)]) -> bytes::Bytes) -> &bytes::Bytes {
        self.h3.get_or_init(|| encode(&self.fields))
    }
}

impl fmt::Debug for SharedFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.fields).finish()
    }
}
