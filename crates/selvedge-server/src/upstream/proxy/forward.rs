//! What goes upstream: the request head selvedge writes to the upstream, and the response
//! fields it relays back.
//!
//! The upstream request is always unambiguous HTTP/1.1: the request line carries the
//! client's path and query as received (after the optional prefix strip and base path);
//! hop-by-hop fields (RFC 9110 §7.6.1: `Connection` and every field it names,
//! `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`), all
//! `Proxy-*` fields (and `Proxy`, the httpoxy vector), `Expect` (selvedge answers
//! `100-continue` itself), `Content-Length`, `Host`, `X-Real-IP` and (unless the route sets
//! `underscores_in_headers`) names with `_` are never copied. Framing is chosen
//! here, once: `Content-Length` when the client's body length is known, else `chunked`.
//! `Host` is the client's or the upstream's, by the route's setting, and the forwarding
//! fields (`Forwarded`, RFC 7239, and `X-Forwarded-For`/`-Proto`/`-Host`) describe this hop;
//! `X-Real-IP` names the client as this server's checks saw it ([`crate::client`]).

use std::net::IpAddr;

use selvedge::{PeerAddr, Request};

use selvedge_proto::message::TCHAR;

use crate::lang::headers::{Field, HeaderOps};
use crate::lang::template::{Context, Template};

/// How the upstream request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body and no length field.
    None,
    /// `Content-Length: n` (also sent as 0 for POST, PUT and PATCH without a body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Which `Host` the upstream sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMode {
    /// The client's `Host` (`:authority` on HTTP/2).
    Preserve,
    /// The upstream's `host[:port]` as written in `upstream`.
    Upstream,
    /// This value.
    Fixed(String),
}

/// The per-route facts the head composer needs.
#[derive(Debug, Clone)]
pub(crate) struct Rewrite {
    /// The upstream URL's path, without a trailing `/` (empty for none).
    pub base: String,
    /// The route prefix to strip, without a trailing `/` (empty: no strip).
    pub strip: String,
    /// `Host` handling.
    pub host: HostMode,
    /// The upstream's authority, for [`HostMode::Upstream`] and requests without `Host`.
    pub upstream_host: String,
    /// Keep the client's forwarding fields and append this hop (else they are replaced).
    pub trust_forwarded: bool,
    /// Forward fields whose names contain `_` (else they are dropped).
    pub underscores: bool,
    /// `header_up` and `path`, if the route has either.
    pub up: Option<std::sync::Arc<Up>>,
}

/// A route's `header_up` and `path`.
#[derive(Debug)]
pub(crate) struct Up {
    pub ops: HeaderOps,
    pub path: Option<Template>,
}

/// Why a request cannot be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ComposeError {
    /// A target or field value HTTP/1.1 cannot carry (only possible from HTTP/2 and HTTP/3
    /// clients: their heads are checked for NUL, CR and LF only).
    Unrepresentable,
}

/// The framing for a request whose body has `len` bytes (`None`: unknown).
pub(crate) fn framing(req: &Request, len: Option<u64>) -> Framing {
    match len {
        Some(0) => {
            let m = req.method().as_str();
            if req.header("content-length").is_some() || matches!(m, "POST" | "PUT" | "PATCH") {
                Framing::Length(0)
            } else {
                Framing::None
            }
        }
        Some(n) => Framing::Length(n),
        None => Framing::Chunked,
    }
}

/// Whether the request's method is idempotent (RFC 9110 §9.2.2): sending it twice does
/// what sending it once does, so a failed attempt may go to another upstream.
pub(crate) fn idempotent(req: &Request) -> bool {
    matches!(req.method().as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// Whether `name` is never copied from the client's request to the upstream's.
fn dropped_request_field(name: &[u8]) -> bool {
    let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
    let fixed = match name.len() {
        2 => is(b"te"),
        4 => is(b"host"),
        5 => is(b"proxy"),
        6 => is(b"expect"),
        7 => is(b"upgrade") || is(b"trailer"),
        10 => is(b"connection") || is(b"keep-alive"),
        14 => is(b"content-length") || is(b"http2-settings"),
        17 => is(b"transfer-encoding"),
        _ => false,
    };
    fixed || (name.len() > 6 && name[..6].eq_ignore_ascii_case(b"proxy-"))
}

/// Whether `name` is a forwarding field: `Some(true)` for the list-valued ones this hop
/// appends to (`Forwarded`, `X-Forwarded-For`).
fn forwarding_field(name: &[u8]) -> Option<bool> {
    let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        9 if is(b"forwarded") => Some(true),
        15 if is(b"x-forwarded-for") => Some(true),
        16 if is(b"x-forwarded-host") => Some(false),
        17 if is(b"x-forwarded-proto") => Some(false),
        _ => None,
    }
}

/// Whether a response field from the upstream is not relayed: hop-by-hop fields, and (as
/// nginx does) `Date` and `Server`, which the engine sets. `Content-Length` is handled by
/// the caller.
pub(crate) fn dropped_response_field(name: &[u8]) -> bool {
    let is = |s: &[u8]| name.eq_ignore_ascii_case(s);
    match name.len() {
        2 => is(b"te"),
        4 => is(b"date"),
        6 => is(b"server"),
        7 => is(b"upgrade") || is(b"trailer"),
        10 => is(b"connection") || is(b"keep-alive"),
        16 => is(b"proxy-connection"),
        17 => is(b"transfer-encoding"),
        _ => false,
    }
}

/// Tokens of every `Connection` field among `fields`: the names that are hop-by-hop too.
pub(crate) fn connection_tokens<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for (n, v) in fields {
        if n.eq_ignore_ascii_case(b"connection") {
            out.extend(v.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty()));
        }
    }
    out
}

fn named_in(tokens: &[&[u8]], name: &[u8]) -> bool {
    tokens.iter().any(|t| t.eq_ignore_ascii_case(name))
}

/// Appends the upstream request head for `req` (prefix `route` already matched) to `dst`.
///
/// # Errors
/// [`ComposeError::Unrepresentable`] for an HTTP/2 or HTTP/3 request whose target or fields
/// HTTP/1.1 cannot carry (spaces or bytes outside visible ASCII in `:path` or `:authority`,
/// control characters in a value).
pub(crate) fn compose(dst: &mut Vec<u8>, req: &Request, rw: &Rewrite, framing: Framing) -> Result<(), ComposeError> {
    // HTTP/2 and HTTP/3 heads: what HTTP/1.1's parser would have refused is checked here.
    let h2 = req.version() >= selvedge::http::Version::HTTP_2;
    let start = dst.len();

    // Request line: METHOD SP base + path [ "?" query ] SP HTTP/1.1
    dst.extend_from_slice(req.method().as_str().as_bytes());
    dst.push(b' ');
    let target_start = dst.len();
    // Bytes, not `&str` (the UTF-8 checks of `path()`, `query()` and `headers()` cost a pass
    // over each per request): HTTP/1.1's parser admitted only visible ASCII here, and for
    // HTTP/2 and HTTP/3 the target is checked below.
    let request_id = crate::observe::request_id();
    let up = rw.up.as_deref();
    // The id as text only for templates (reading it checks its bytes).
    let id_text = up.and(request_id.as_ref()).map(|id| id.as_str());
    if let Some(t) = up.and_then(|u| u.path.as_ref()) {
        // The path a template made is normalized as a request's is: its dot-segments cannot
        // climb out of the base, and an encoded slash (which a lenient upstream would read
        // as one) is refused.
        let mut made = Vec::new();
        t.expand(req, Context::Url, id_text, &mut made, &mut |s, o| o.extend_from_slice(s.as_bytes()));
        if !made.starts_with(b"/") {
            made.insert(0, b'/');
        }
        let (path, query) = match made.iter().position(|&b| b == b'?') {
            Some(i) => (&made[..i], Some(&made[i + 1..])),
            None => (&made[..], None),
        };
        // A dot-segment, written or brought by a value (`{query.v}` of `..`), is refused:
        // the path is the template's, one segment per placeholder.
        let dot = |seg: &[u8]| matches!(&*selvedge::percent_decode(seg), b"." | b"..");
        if path.split(|&b| b == b'/').any(dot) {
            dst.truncate(start);
            return Err(ComposeError::Unrepresentable);
        }
        let mut normal = Vec::new();
        match selvedge::path::normalize(path, &mut normal) {
            Ok(n) if !n.encoded_slash => {}
            _ => {
                dst.truncate(start);
                return Err(ComposeError::Unrepresentable);
            }
        }
        dst.extend_from_slice(rw.base.as_bytes());
        dst.extend_from_slice(&normal);
        match (query, req.query_bytes()) {
            (Some(q), _) => {
                dst.push(b'?');
                dst.extend_from_slice(q);
            }
            (None, Some(q)) => {
                dst.push(b'?');
                dst.extend_from_slice(q);
            }
            (None, None) => {}
        }
    } else {
        let mut path = req.path_bytes();
        if !rw.strip.is_empty() {
            if let Some(rest) = path.strip_prefix(rw.strip.as_bytes()) {
                path = rest;
            }
        }
        dst.extend_from_slice(rw.base.as_bytes());
        if !path.starts_with(b"/") {
            dst.push(b'/');
        }
        dst.extend_from_slice(path);
        if let Some(q) = req.query_bytes() {
            dst.push(b'?');
            dst.extend_from_slice(q);
        }
    }
    if h2 && !dst[target_start..].iter().all(|&b| (0x21..=0x7e).contains(&b)) {
        dst.truncate(start);
        return Err(ComposeError::Unrepresentable);
    }
    dst.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    let client_host = req.authority_bytes().filter(|a| !a.is_empty());
    if h2 && client_host.is_some_and(|a| !a.iter().all(|b| (0x21..=0x7e).contains(b))) {
        dst.truncate(start);
        return Err(ComposeError::Unrepresentable);
    }
    match (up.and_then(|u| u.ops.host()), &rw.host, client_host) {
        (Some(t), ..) => {
            let at = dst.len();
            t.expand(req, Context::Host, id_text, dst, &mut |s, o| o.extend_from_slice(s.as_bytes()));
            if dst.len() == at {
                dst.extend_from_slice(rw.upstream_host.as_bytes());
            } else if !selvedge_proto::message::authority::valid(&dst[at..]) {
                // `host[:port]` and nothing else, as a client's authority must be.
                dst.truncate(start);
                return Err(ComposeError::Unrepresentable);
            }
        }
        (None, HostMode::Preserve, Some(h)) => dst.extend_from_slice(h),
        (None, HostMode::Fixed(h), _) => dst.extend_from_slice(h.as_bytes()),
        _ => dst.extend_from_slice(rw.upstream_host.as_bytes()),
    }
    dst.extend_from_slice(b"\r\n");
    let ops = up.map(|u| &u.ops).filter(|o| !o.is_empty());
    let ours = |field: &str| ops.is_none_or(|o| !o.owns(field));

    // The client's fields, minus hop-by-hop ones.
    let tokens = if req.header("connection").is_some() { connection_tokens(req.header_bytes()) } else { Vec::new() };
    // The client's forwarding fields are kept from a trusted proxy (see crate::client).
    let trust = rw.trust_forwarded || crate::client::peer_trusted(req);
    let mut xff_prev: Vec<&[u8]> = Vec::new();
    let mut fwd_prev: Vec<&[u8]> = Vec::new();
    let (mut has_proto, mut has_xhost) = (false, false);
    let mut cookies = 0usize;
    for (n, value) in req.header_bytes() {
        if dropped_request_field(n) || (!tokens.is_empty() && named_in(&tokens, n)) {
            continue;
        }
        // `X_Forwarded_For` reads as `X-Forwarded-For` to many applications (nginx drops
        // such names too); `X-Real-IP` is this hop's to write.
        if (!rw.underscores && n.contains(&b'_')) || (n.len() == 9 && n.eq_ignore_ascii_case(b"x-real-ip")) {
            continue;
        }
        // The request's id replaces the client's (which it is, when trusted).
        if request_id.is_some() && n.len() == 12 && n.eq_ignore_ascii_case(b"x-request-id") {
            continue;
        }
        if let Some(list) = forwarding_field(n) {
            if !trust {
                continue;
            }
            if list {
                if n.len() == 9 {
                    fwd_prev.push(value)
                } else {
                    xff_prev.push(value)
                }
                continue;
            }
            if n.len() == 16 {
                has_xhost = true
            } else {
                has_proto = true
            }
        }
        if h2 {
            if value.iter().any(|&b| b < 0x20 && b != b'\t' || b == 0x7f) {
                dst.truncate(start);
                return Err(ComposeError::Unrepresentable);
            }
            // HTTP/2 splits cookies into fields (RFC 9113 §8.2.3); HTTP/1.1 wants one.
            if n == b"cookie" && ops.is_none_or(|o| matches!(o.field(n), Field::Keep)) {
                cookies += 1;
                continue;
            }
        }
        if let Some(o) = ops {
            match o.field(n) {
                Field::Keep => {}
                Field::Drop => continue,
                Field::Replace(re, with) => {
                    let new = re.replace_all(value, with.as_bytes());
                    if !new.is_empty() {
                        dst.extend_from_slice(n);
                        dst.extend_from_slice(b": ");
                        dst.extend_from_slice(&new);
                        dst.extend_from_slice(b"\r\n");
                    }
                    continue;
                }
            }
        }
        dst.extend_from_slice(n);
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value);
        dst.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        dst.extend_from_slice(b"cookie: ");
        for (i, (_, v)) in req.header_bytes().filter(|(n, _)| *n == b"cookie").enumerate() {
            if i > 0 {
                dst.extend_from_slice(b"; ");
            }
            dst.extend_from_slice(v);
        }
        dst.extend_from_slice(b"\r\n");
    }

    if let Some(o) = ops {
        o.write_added(req, id_text, dst);
    }

    // This hop.
    if let (Some(id), true) = (request_id, ours("x-request-id")) {
        dst.extend_from_slice(b"x-request-id: ");
        dst.extend_from_slice(id.as_str().as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    let proto: &[u8] = if req.is_secure() { b"https" } else { b"http" };
    let ip = match req.peer() {
        PeerAddr::Tcp(a) => Some(a.ip()),
        PeerAddr::Unix => None,
    };
    // The client as every check of this server saw it (crate::client).
    if let (Some(client), true) = (crate::client::client_ip(req), ours("x-real-ip")) {
        dst.extend_from_slice(b"x-real-ip: ");
        put_ip(dst, client);
        dst.extend_from_slice(b"\r\n");
    }
    if ours("x-forwarded-for") {
        dst.extend_from_slice(b"x-forwarded-for: ");
        for v in &xff_prev {
            dst.extend_from_slice(v);
            dst.extend_from_slice(b", ");
        }
        match ip {
            Some(ip) => put_ip(dst, ip),
            None => dst.extend_from_slice(b"unknown"),
        }
        dst.extend_from_slice(b"\r\n");
    }
    if !has_proto && ours("x-forwarded-proto") {
        dst.extend_from_slice(b"x-forwarded-proto: ");
        dst.extend_from_slice(proto);
        dst.extend_from_slice(b"\r\n");
    }
    if let (Some(h), false, true) = (client_host, has_xhost, ours("x-forwarded-host")) {
        dst.extend_from_slice(b"x-forwarded-host: ");
        dst.extend_from_slice(h);
        dst.extend_from_slice(b"\r\n");
    }
    if ours("forwarded") {
        forwarded(dst, &fwd_prev, ip, client_host, proto);
    }

    match framing {
        Framing::None => {}
        Framing::Length(n) => {
            dst.extend_from_slice(b"content-length: ");
            put_u64(dst, n);
            dst.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => dst.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    dst.extend_from_slice(b"\r\n");
    Ok(())
}

/// This hop's `Forwarded` (RFC 7239), after the trusted ones before it.
fn forwarded(dst: &mut Vec<u8>, prev: &[&[u8]], ip: Option<IpAddr>, client_host: Option<&[u8]>, proto: &[u8]) {
    dst.extend_from_slice(b"forwarded: ");
    for v in prev {
        dst.extend_from_slice(v);
        dst.extend_from_slice(b", ");
    }
    dst.extend_from_slice(b"for=");
    match ip {
        Some(IpAddr::V4(v4)) => put_ip(dst, IpAddr::V4(v4)),
        Some(IpAddr::V6(v6)) => {
            dst.extend_from_slice(b"\"[");
            put_ip(dst, IpAddr::V6(v6));
            dst.extend_from_slice(b"]\"");
        }
        None => dst.extend_from_slice(b"unknown"),
    }
    if let Some(h) = client_host {
        dst.extend_from_slice(b";host=");
        put_token_or_quoted(dst, h);
    }
    dst.extend_from_slice(b";proto=");
    dst.extend_from_slice(proto);
    dst.extend_from_slice(b"\r\n");
}

/// Appends the decimal digits of `n`.
pub(crate) fn put_u64(dst: &mut Vec<u8>, n: u64) {
    dst.extend_from_slice(selvedge_proto::message::decimal(n, &mut [0; 20]));
}

/// Appends `ip` as text ([`crate::client::ip_text`]).
fn put_ip(dst: &mut Vec<u8>, ip: IpAddr) {
    dst.extend_from_slice(crate::client::ip_text(&mut [0; 64], ip));
}

/// RFC 7239 §4: a value is a token or a quoted-string.
fn put_token_or_quoted(dst: &mut Vec<u8>, v: &[u8]) {
    if !v.is_empty() && v.iter().all(|&b| TCHAR[b as usize]) {
        dst.extend_from_slice(v);
        return;
    }
    dst.push(b'"');
    if v.iter().any(|&b| b == b'"' || b == b'\\') {
        for &b in v {
            if b == b'"' || b == b'\\' {
                dst.push(b'\\');
            }
            dst.push(b);
        }
    } else {
        // The usual case (a host with a port): nothing to escape, one copy.
        dst.extend_from_slice(v);
    }
    dst.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use selvedge::http;

    fn rw() -> Rewrite {
        Rewrite {
            base: String::new(),
            strip: String::new(),
            host: HostMode::Preserve,
            upstream_host: "up:9000".into(),
            trust_forwarded: false,
            underscores: false,
            up: None,
        }
    }

    fn head(req: &Request, rw: &Rewrite, f: Framing) -> String {
        let mut out = Vec::new();
        compose(&mut out, req, rw, f).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn get(uri: &str, fields: &[(&str, &str)]) -> Request {
        let mut b = http::Request::builder().uri(uri);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        Request::from(b.body(bytes::Bytes::new()).unwrap())
    }

    #[test]
    fn addresses_are_written_as_std_writes_them() {
        let v4 = [[0, 0, 0, 0], [127, 0, 0, 1], [9, 10, 99, 100], [255, 255, 255, 255], [1, 20, 205, 3]];
        for o in v4 {
            let ip = IpAddr::from(o);
            let mut out = b"x".to_vec();
            put_ip(&mut out, ip);
            assert_eq!(out, format!("x{ip}").as_bytes());
        }
        let ip: IpAddr = "2001:db8::1".parse().unwrap();
        let mut out = Vec::new();
        put_ip(&mut out, ip);
        assert_eq!(out, b"2001:db8::1");
    }

    #[test]
    fn hop_by_hop_fields_are_dropped() {
        let req = get(
            "/a?b=1",
            &[
                ("host", "example.com"),
                ("connection", "keep-alive, X-Secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("te", "trailers"),
                ("trailer", "x"),
                ("upgrade", "websocket"),
                ("proxy-authorization", "Basic x"),
                ("proxy-connection", "keep-alive"),
                ("proxy", "http://evil"),
                ("expect", "100-continue"),
                ("content-length", "0"),
                ("accept", "*/*"),
            ],
        );
        let h = head(&req, &rw(), Framing::Length(0));
        assert!(h.starts_with("GET /a?b=1 HTTP/1.1\r\nhost: example.com\r\n"), "{h}");
        for gone in ["x-secret", "keep-alive", "te:", "trailer", "upgrade", "proxy", "expect", "connection"] {
            assert!(!h.to_ascii_lowercase().contains(gone), "{gone} in {h}");
        }
        assert!(h.contains("accept: */*\r\n"), "{h}");
        assert!(h.contains("content-length: 0\r\n"), "{h}");
        assert_eq!(h.matches("content-length").count(), 1, "{h}");
        assert!(h.ends_with("\r\n\r\n"));
    }

    #[test]
    fn forwarding_fields_replace_or_append() {
        let req =
            get("/", &[("host", "example.com:8080"), ("x-forwarded-for", "6.6.6.6"), ("forwarded", "for=6.6.6.6")]);
        let h = head(&req, &rw(), Framing::None);
        assert!(!h.contains("6.6.6.6"), "{h}");
        assert!(h.contains("x-forwarded-for: unknown\r\n"), "{h}");
        assert!(h.contains("x-forwarded-proto: http\r\n"), "{h}");
        assert!(h.contains("x-forwarded-host: example.com:8080\r\n"), "{h}");
        assert!(h.contains("forwarded: for=unknown;host=\"example.com:8080\";proto=http\r\n"), "{h}");
        let trusting = Rewrite { trust_forwarded: true, ..rw() };
        let h = head(&req, &trusting, Framing::None);
        assert!(h.contains("x-forwarded-for: 6.6.6.6, unknown\r\n"), "{h}");
        assert!(h.contains("forwarded: for=6.6.6.6, for=unknown;"), "{h}");
    }

    #[test]
    fn host_modes_strip_and_base() {
        let req = get("/api/v1/x?q", &[("host", "front")]);
        let r = Rewrite { base: "/base".into(), strip: "/api".into(), host: HostMode::Upstream, ..rw() };
        assert!(head(&req, &r, Framing::None).starts_with("GET /base/v1/x?q HTTP/1.1\r\nhost: up:9000\r\n"));
        let r = Rewrite { strip: "/api/v1/x".into(), host: HostMode::Fixed("fixed.example".into()), ..rw() };
        assert!(head(&req, &r, Framing::None).starts_with("GET /?q HTTP/1.1\r\nhost: fixed.example\r\n"));
    }

    #[test]
    fn framing_choice() {
        let req = get("/", &[("host", "h")]);
        assert_eq!(framing(&req, Some(0)), Framing::None);
        assert_eq!(framing(&req, Some(5)), Framing::Length(5));
        assert_eq!(framing(&req, None), Framing::Chunked);
        let post = Request::from(http::Request::post("/").body(bytes::Bytes::new()).unwrap());
        assert_eq!(framing(&post, Some(0)), Framing::Length(0));
        assert!(!idempotent(&post));
        assert!(idempotent(&req));
        let h = head(&req, &rw(), Framing::Chunked);
        assert!(h.contains("transfer-encoding: chunked\r\n"));
    }

    #[test]
    fn quoted_values() {
        let mut v = Vec::new();
        put_token_or_quoted(&mut v, b"a\"b\\c:1");
        assert_eq!(v, b"\"a\\\"b\\\\c:1\"");
    }
}
