//! The request an app receives: method, target, headers as slices of the receive buffer,
//! the peer's address, and a body to read as a stream.

pub use crate::message::TlsVersion;
use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Version};

use crate::app::body::Body;
use crate::io::sys::PeerAddr;
use crate::io::transport::Tls;
use crate::message::{HeaderSpan, Span};

/// A request's head as a protocol parsed it: its bytes, and where in them the parts are
/// (an HTTP/1.1 head points into the receive buffer, an HTTP/2 one into its decoded
/// fields). The driver makes it a [`Request`] with the rest ([`Request::new`]).
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) buf: Bytes,
    pub(crate) method: Method,
    pub(crate) target: Span,
    pub(crate) path: Span,
    pub(crate) query: Option<Span>,
    pub(crate) authority: Option<Span>,
    pub(crate) headers: Vec<HeaderSpan>,
    /// See [`Request::upgrade`].
    pub(crate) upgrade: Option<Span>,
}

/// An HTTP request. Cheap to move: the head's bytes are shared, never copied.
pub struct Request {
    pub(crate) buf: Bytes,
    pub(crate) method: Method,
    pub(crate) target: Span,
    pub(crate) path: Span,
    pub(crate) query: Option<Span>,
    pub(crate) authority: Option<Span>,
    pub(crate) headers: Vec<HeaderSpan>,
    pub(crate) version: Version,
    pub(crate) peer: PeerAddr,
    pub(crate) body: Body,
    /// The TLS the request came over (`None`: cleartext).
    pub(crate) secure: Option<Tls>,
    /// The protocol an upgradable request asks for: HTTP/1.1 `Upgrade` (with `Connection:
    /// upgrade` and no body), or HTTP/2 extended CONNECT's `:protocol` (RFC 8441).
    pub(crate) upgrade: Option<Span>,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            buf: Bytes::from_static(b"/"),
            method: Method::GET,
            target: Span { start: 0, len: 1 },
            path: Span { start: 0, len: 1 },
            query: None,
            authority: None,
            headers: Vec::new(),
            version: Version::HTTP_11,
            peer: PeerAddr::Unix,
            body: Body::empty(),
            secure: None,
            upgrade: None,
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        crate::io::pool::put_spans(std::mem::take(&mut self.headers));
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("target", &self.target())
            .field("version", &self.version)
            .field("headers", &self.headers().collect::<Vec<_>>())
            .finish()
    }
}

#[inline]
fn ascii(b: &[u8]) -> &str {
    // HTTP/1.1's parser admits only visible ASCII in targets and token characters in
    // names; HTTP/2 and HTTP/3 heads may carry other bytes, and then the text is empty.
    std::str::from_utf8(b).unwrap_or("")
}

impl Request {
    /// The request of `head`, as it came from `peer`.
    #[inline]
    pub(crate) fn new(head: RequestHead, version: Version, peer: PeerAddr, secure: Option<Tls>, body: Body) -> Request {
        let RequestHead { buf, method, target, path, query, authority, headers, upgrade } = head;
        Request { buf, method, target, path, query, authority, headers, version, peer, body, secure, upgrade }
    }

    #[inline]
    fn slice(&self, s: Span) -> &[u8] {
        &self.buf[s.range()]
    }

    /// The request method.
    #[inline]
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The HTTP version (1.0, 1.1 or 2).
    #[inline]
    pub fn version(&self) -> Version {
        self.version
    }

    /// The raw request-target as sent (`/a%20b?x=1`, or an absolute URI).
    pub fn target(&self) -> &str {
        ascii(self.slice(self.target))
    }

    /// [`target`](Self::target) as bytes, without the UTF-8 check: the same for every
    /// HTTP/1.1 request (its parser admits only visible ASCII), the bytes as received where
    /// an HTTP/2 or HTTP/3 client sent some that are not UTF-8 (`target()` gives "" then).
    #[inline]
    pub fn target_bytes(&self) -> &[u8] {
        self.slice(self.target)
    }

    /// The raw (still percent-encoded) path, without the query. Always starts with `/`
    /// except for `CONNECT` (the authority) and `OPTIONS *`.
    #[inline]
    pub fn path(&self) -> &str {
        if self.path.len == 0 {
            return "/";
        }
        ascii(self.slice(self.path))
    }

    /// [`path`](Self::path) as bytes, without the check that makes it a `&str` (routing
    /// compares bytes).
    #[inline]
    pub fn path_bytes(&self) -> &[u8] {
        if self.path.len == 0 {
            return b"/";
        }
        self.slice(self.path)
    }

    /// The raw query string after `?`, if any.
    #[inline]
    pub fn query(&self) -> Option<&str> {
        self.query.map(|q| ascii(self.slice(q)))
    }

    /// [`query`](Self::query) as bytes, without the UTF-8 check: the same for every
    /// HTTP/1.1 request (its parser admits only visible ASCII), the bytes as received where
    /// an HTTP/2 or HTTP/3 client sent some that are not UTF-8 (`query()` gives `Some("")` then).
    #[inline]
    pub fn query_bytes(&self) -> Option<&[u8]> {
        self.query.map(|q| self.slice(q))
    }

    /// The authority: the absolute-form target's, else the `Host` header's (or `:authority`).
    pub fn authority(&self) -> Option<&str> {
        self.authority.map(|a| ascii(self.slice(a)))
    }

    /// [`authority`](Self::authority) as bytes, without the UTF-8 check: the same for every
    /// HTTP/1.1 request (its parser admits only visible ASCII), the bytes as received where
    /// an HTTP/2 or HTTP/3 client sent some that are not UTF-8 (`authority()` gives "" then).
    #[inline]
    pub fn authority_bytes(&self) -> Option<&[u8]> {
        self.authority.map(|a| self.slice(a))
    }

    /// The path's segments, split and percent-decoded lazily: nothing is decoded or
    /// allocated until the iterator reaches a segment containing `%`.
    pub fn segments(&self) -> Segments<'_> {
        let p = self.path_bytes();
        Segments { rest: p.strip_prefix(b"/").unwrap_or(p), done: p.is_empty() }
    }

    /// The headers in the order received, as `(name, value)` slices of the request's bytes.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        self.headers.iter().map(|h| (ascii(self.slice(h.name)), self.slice(h.value)))
    }

    /// The headers in the order received, names and values as bytes of the request (no
    /// UTF-8 check: for handlers that look for several fields in one pass).
    pub fn header_bytes(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.headers.iter().map(|h| (self.slice(h.name), self.slice(h.value)))
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: impl AsRef<str>) -> Option<&[u8]> {
        let name = name.as_ref().as_bytes();
        self.headers
            .iter()
            .find(|h| h.name.len as usize == name.len() && self.slice(h.name).eq_ignore_ascii_case(name))
            .map(|h| self.slice(h.value))
    }

    /// The first value of header `name` as `&str`, if it is valid UTF-8.
    pub fn header_str(&self, name: impl AsRef<str>) -> Option<&str> {
        self.header(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The protocol this request may switch to, when it can: the `Upgrade` header of an
    /// HTTP/1.1 request that names `upgrade` in `Connection` and has no body, or the
    /// `:protocol` of an HTTP/2 extended CONNECT (RFC 8441). Accept with
    /// [`Response::upgrade`](crate::Response::upgrade).
    pub fn upgrade(&self) -> Option<&str> {
        self.upgrade.map(|s| ascii(self.slice(s)))
    }

    /// Whether the request came over TLS (`https`).
    pub fn is_secure(&self) -> bool {
        self.secure.is_some()
    }

    /// The TLS version the request came over, `None` over cleartext.
    pub fn tls_version(&self) -> Option<TlsVersion> {
        self.secure.as_ref().map(|t| t.version)
    }

    /// The server name the client asked for in its TLS handshake (SNI), if it named one.
    pub fn tls_server_name(&self) -> Option<&str> {
        self.secure.as_ref()?.name.as_deref()
    }

    /// The peer's address.
    pub fn peer(&self) -> &PeerAddr {
        &self.peer
    }

    /// Sets the peer's address and whether the connection is TLS: for a request an app
    /// builds on behalf of another (an internal redirect), which keeps the client's.
    pub fn set_origin(&mut self, peer: PeerAddr, secure: bool) {
        self.peer = peer;
        if secure != self.is_secure() {
            self.secure = secure.then(|| Tls::new(TlsVersion::Other, None));
        }
    }

    /// Replaces the request-target with `target` (an origin-form path with an optional
    /// query, `/a/b?x=1`), keeping the method, headers, body and origin: for a server's
    /// internal rewrite, which serves another path than the one asked for. Later reads of
    /// [`target`](Self::target), [`path`](Self::path), [`query`](Self::query) and
    /// [`segments`](Self::segments) see the new one. The head's bytes are copied once.
    ///
    /// # Errors
    /// `target` does not start with `/`, or has bytes other than visible ASCII (a bad
    /// request, status 400).
    pub fn set_target(&mut self, target: &str) -> Result<(), crate::Error> {
        let t = target.as_bytes();
        if !t.starts_with(b"/") || !t.iter().all(|b| b.is_ascii_graphic()) || t.len() > u32::MAX as usize / 2 {
            return Err(crate::Error::new(crate::error::Kind::BadRequest, "invalid request-target").with_status(400));
        }
        let mut buf = bytes::BytesMut::with_capacity(self.buf.len() + t.len());
        buf.extend_from_slice(&self.buf);
        let start = buf.len() as u32;
        buf.extend_from_slice(t);
        self.buf = buf.freeze();
        self.target = Span { start, len: t.len() as u32 };
        match t.iter().position(|&b| b == b'?') {
            Some(i) => {
                self.path = Span { start, len: i as u32 };
                self.query = Some(Span { start: start + i as u32 + 1, len: (t.len() - i - 1) as u32 });
            }
            None => {
                self.path = self.target;
                self.query = None;
            }
        }
        Ok(())
    }

    /// Replaces the path with `path` (which starts with `/`, visible ASCII), keeping the
    /// query as it is (its bytes are not checked again) and everything else: for a server
    /// that serves a request under its normalized path ([`path::normalize`](crate::path::normalize)).
    /// Later reads of [`target`](Self::target), [`path`](Self::path) and
    /// [`segments`](Self::segments) see the new path. The head's bytes are copied once.
    ///
    /// # Errors
    /// `path` does not start with `/` or has bytes other than visible ASCII (status 400).
    pub fn set_path(&mut self, path: &[u8]) -> Result<(), crate::Error> {
        let query_len = self.query.map_or(0, |q| q.len as usize + 1);
        if !path.starts_with(b"/")
            || !path.iter().all(u8::is_ascii_graphic)
            || path.len() + query_len > u32::MAX as usize / 2
        {
            return Err(crate::Error::new(crate::error::Kind::BadRequest, "invalid path").with_status(400));
        }
        let mut buf = bytes::BytesMut::with_capacity(self.buf.len() + path.len() + query_len);
        buf.extend_from_slice(&self.buf);
        let start = buf.len() as u32;
        buf.extend_from_slice(path);
        let query = self.query.map(|q| {
            buf.extend_from_slice(b"?");
            let qs = buf.len() as u32;
            buf.extend_from_slice(&self.buf[q.range()]);
            Span { start: qs, len: q.len }
        });
        self.buf = buf.freeze();
        self.path = Span { start, len: path.len() as u32 };
        self.target = Span { start, len: (path.len() + query_len) as u32 };
        self.query = query;
        Ok(())
    }

    /// Removes the fields whose names `remove` picks and appends `add` (name, value): for a
    /// server that changes what its app sees (the fields an authentication service vouches
    /// for). Framing is not touched: the body stays as it was received, whatever fields say.
    /// The head's bytes are copied once.
    ///
    /// # Errors
    /// A name that is not a lower-case token, or a value with NUL, CR or LF (status 500:
    /// the server made it).
    pub fn rewrite_headers(
        &mut self,
        remove: impl Fn(&[u8]) -> bool,
        add: &[(&[u8], &[u8])],
    ) -> Result<(), crate::Error> {
        let bad = || crate::Error::new(crate::error::Kind::BadRequest, "invalid field").with_status(500);
        let extra: usize = add.iter().map(|(n, v)| n.len() + v.len()).sum();
        if extra > u32::MAX as usize / 2 {
            return Err(bad());
        }
        for (n, v) in add {
            let token = !n.is_empty() && n.iter().all(|&b| crate::message::LOWER_TOKEN[b as usize]);
            if !token || v.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n')) {
                return Err(bad());
            }
        }
        let buf = &self.buf;
        self.headers.retain(|h| !remove(&buf[h.name.range()]));
        if add.is_empty() {
            return Ok(());
        }
        let mut nb = bytes::BytesMut::with_capacity(self.buf.len() + extra);
        nb.extend_from_slice(&self.buf);
        for (n, v) in add {
            let name = Span { start: nb.len() as u32, len: n.len() as u32 };
            nb.extend_from_slice(n);
            let value = Span { start: nb.len() as u32, len: v.len() as u32 };
            nb.extend_from_slice(v);
            self.headers.push(HeaderSpan { name, value });
        }
        self.buf = nb.freeze();
        Ok(())
    }

    /// Sets the method (a cache sends a `HEAD` it cannot answer as the `GET` it stores).
    pub fn set_method(&mut self, method: Method) {
        self.method = method;
    }

    /// A copy of the head, with no body and no upgrade: the same target, fields, peer and
    /// TLS, for a request the server sends again on its own (a background revalidation).
    /// The head's bytes are shared, not copied.
    pub fn head_copy(&self) -> Request {
        let mut headers = crate::io::pool::take_spans();
        headers.extend_from_slice(&self.headers);
        Request {
            buf: self.buf.clone(),
            method: self.method.clone(),
            target: self.target,
            path: self.path,
            query: self.query,
            authority: self.authority,
            headers,
            version: self.version,
            peer: self.peer.clone(),
            body: Body::empty(),
            secure: self.secure.clone(),
            upgrade: None,
        }
    }

    /// The request body.
    pub fn body_mut(&mut self) -> &mut Body {
        &mut self.body
    }

    /// Takes the body out, leaving an empty one.
    pub fn take_body(&mut self) -> Body {
        std::mem::replace(&mut self.body, Body::empty())
    }

    /// Converts into an [`http::Request`]. Header values share the request's bytes; only
    /// non-standard header names are copied.
    pub fn into_http(mut self) -> http::Request<Body> {
        let mut b = http::Request::builder().method(self.method.clone()).version(self.version);
        let uri = match self.authority() {
            Some(a) if !a.is_empty() && self.path().starts_with('/') => {
                format!("http://{a}{}", &self.target()[self.target().find(self.path()).unwrap_or(0)..])
            }
            _ => self.target().to_string(),
        };
        b = b.uri(uri);
        let mut req = b.body(Body::empty()).unwrap_or_default();
        let map = req.headers_mut();
        map.reserve(self.headers.len());
        for h in &self.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(self.slice(h.name)),
                HeaderValue::from_maybe_shared(self.buf.slice(h.value.range())),
            ) else {
                continue;
            };
            map.append(name, value);
        }
        *req.body_mut() = std::mem::take(&mut self.body);
        req
    }
}

impl<B: Into<Bytes>> From<http::Request<B>> for Request {
    /// Builds a request from an [`http::Request`] (tests, adapters): the target and headers
    /// are copied once into one buffer that the spans point into.
    fn from(req: http::Request<B>) -> Request {
        let (parts, body) = req.into_parts();
        let mut buf = bytes::BytesMut::new();
        let mut put = |b: &[u8]| {
            let start = buf.len();
            buf.extend_from_slice(b);
            Span { start: start as u32, len: b.len() as u32 }
        };
        let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let target = put(pq.as_bytes());
        let (path, query) = match pq.find('?') {
            Some(i) => (
                Span { start: target.start, len: i as u32 },
                Some(Span { start: target.start + i as u32 + 1, len: (pq.len() - i - 1) as u32 }),
            ),
            None => (target, None),
        };
        let mut authority = parts.uri.authority().map(|a| put(a.as_str().as_bytes()));
        let mut headers = Vec::with_capacity(parts.headers.len());
        for (name, value) in &parts.headers {
            let is_host = name == http::header::HOST;
            let name = put(name.as_str().as_bytes());
            let value = put(value.as_bytes());
            if authority.is_none() && is_host {
                authority = Some(value);
            }
            headers.push(HeaderSpan { name, value });
        }
        let body = body.into();
        Request {
            buf: buf.freeze(),
            method: parts.method,
            target,
            path,
            query,
            authority,
            headers,
            version: parts.version,
            peer: PeerAddr::Unix,
            body: if body.is_empty() { Body::empty() } else { Body::from_bytes(body) },
            secure: (parts.uri.scheme_str() == Some("https")).then(|| Tls::new(TlsVersion::Other, None)),
            upgrade: None,
        }
    }
}

/// Iterator over percent-decoded path segments; see [`Request::segments`].
#[derive(Debug)]
pub struct Segments<'a> {
    rest: &'a [u8],
    done: bool,
}

impl<'a> Iterator for Segments<'a> {
    type Item = Cow<'a, [u8]>;

    fn next(&mut self) -> Option<Cow<'a, [u8]>> {
        if self.done {
            return None;
        }
        let seg = match self.rest.iter().position(|&b| b == b'/') {
            Some(i) => {
                let s = &self.rest[..i];
                self.rest = &self.rest[i + 1..];
                s
            }
            None => {
                self.done = true;
                self.rest
            }
        };
        Some(percent_decode(seg))
    }
}

/// Decodes `%XX` escapes; borrows when there are none. Malformed escapes stay as they are.
pub fn percent_decode(s: &[u8]) -> Cow<'_, [u8]> {
    if !s.contains(&b'%') {
        return Cow::Borrowed(s);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            if let (Some(h), Some(l)) = (hex(s[i + 1]), hex(s[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_target_keeps_the_rest() {
        let mut req: Request = http::Request::builder()
            .method("POST")
            .uri("/old/a%20b?x=1")
            .header("host", "example.com")
            .header("x-one", "1")
            .body(Bytes::from_static(b"body"))
            .unwrap()
            .into();
        req.set_target("/new/a%20b").unwrap();
        assert_eq!((req.target(), req.path(), req.query()), ("/new/a%20b", "/new/a%20b", None));
        assert_eq!(req.segments().map(|s| s.into_owned()).collect::<Vec<_>>(), [&b"new"[..], b"a b"]);
        assert_eq!((req.method(), req.authority()), (&Method::POST, Some("example.com")));
        assert_eq!(req.header("x-one"), Some(&b"1"[..]));
        assert_eq!(req.body_mut().content_length(), Some(4));
        req.set_target("/q?y=2&z").unwrap();
        assert_eq!((req.path(), req.query()), ("/q", Some("y=2&z")));
        assert!(req.set_target("relative").is_err());
        assert!(req.set_target("/a b").is_err());
        assert_eq!(req.path(), "/q");
    }

    #[test]
    fn set_path_keeps_the_query() {
        let mut req: Request = http::Request::builder().uri("/a/../b?x=%C3%A9&y").body(Bytes::new()).unwrap().into();
        req.set_path(b"/b").unwrap();
        assert_eq!((req.target(), req.path(), req.query()), ("/b?x=%C3%A9&y", "/b", Some("x=%C3%A9&y")));
        let mut req: Request = http::Request::builder().uri("//c").body(Bytes::new()).unwrap().into();
        req.set_path(b"/c").unwrap();
        assert_eq!((req.target(), req.path(), req.query()), ("/c", "/c", None));
        assert!(req.set_path(b"c").is_err());
        assert!(req.set_path(b"/a b").is_err());
        assert_eq!(req.target(), "/c");
    }

    #[test]
    fn segments_decode_lazily() {
        let mut req = Request::default();
        req.buf = Bytes::from_static(b"/a/b%20c//d%2Fe/%zz");
        req.path = Span { start: 0, len: 19 };
        let segs: Vec<_> = req.segments().collect();
        assert_eq!(segs.len(), 5);
        assert!(matches!(segs[0], Cow::Borrowed(b"a")));
        assert_eq!(&segs[1][..], b"b c");
        assert_eq!(&segs[2][..], b"");
        assert_eq!(&segs[3][..], b"d/e");
        assert_eq!(&segs[4][..], b"%zz");
        assert_eq!(percent_decode(b"%41%4"), Cow::<[u8]>::Owned(b"A%4".to_vec()));
    }
}
