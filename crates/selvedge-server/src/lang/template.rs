//! Placeholders: `{name}` in a configured text (header values, redirect and rewrite
//! targets, `respond` bodies, `try_files` entries, the proxy's `path`) stands for a part of
//! the request, read when the text is used.
//!
//! A template is parsed once, when the configuration is loaded: a `{` followed by a name
//! (a lower-case letter, then letters, digits, `_`, `-` or `.`) and `}` is a placeholder,
//! and an unknown one is an error there, with its position; any other `{` is itself
//! (`{"ok":true}` is literal text, and so is `${1}`, a redirect's capture), and `{{` is a
//! literal `{`. A text without placeholders
//! costs nothing per request ([`Template::literal`]). Expanding writes into one buffer the
//! caller owns; a value that is a slice of the request (the path, a header, the query) is
//! copied from the request's bytes once, without an allocation of its own.
//!
//! The bytes a placeholder brings are made safe for where they go ([`Context`]): in a URL
//! every byte that is not visible ASCII is percent-encoded, and a value a client wrote
//! freely (`{query.NAME}`, `{header.NAME}`, `{cookie.NAME}`) is encoded as one component
//! (every byte but letters, digits and `-._~`), so it cannot add a `/`, `?`, `#` or `@`; in
//! a header value control bytes are encoded; an HTML body escapes `<>&"'`; a plain body
//! takes the bytes as they are.

use std::net::IpAddr;

use regex::bytes::Regex;
use selvedge::http::HeaderName;
use selvedge::{PeerAddr, Request};

/// The longest text one expansion makes: longer is cut here (a header value, a redirect
/// target or a `respond` body made of placeholders holds at most this).
pub const MAX_EXPANDED: usize = 64 * 1024;

/// Where an expanded text goes, which decides what a placeholder's bytes may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A path or URL: bytes other than visible ASCII are percent-encoded.
    Url,
    /// A header value: control bytes (other than tab) are percent-encoded.
    Header,
    /// A response body: bytes as they are.
    Body,
    /// An HTML (or XML) response body: `<`, `>`, `&`, `"` and `'` become entities.
    Html,
    /// A `Host` value: bytes other than an authority's (letters, digits, `-._~:[]`) are
    /// percent-encoded (and such a host is then refused).
    Host,
}

/// What a regular-expression capture placeholder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// The normalized path.
    Path,
    /// The host, lower case, without port.
    Host,
}

/// A capture group: by number or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Group {
    Index(usize),
    Name(Box<str>),
}

/// One placeholder.
#[derive(Debug, Clone)]
enum Var {
    Host,
    HostPort,
    Path,
    Query,
    Uri,
    Method,
    Scheme,
    RemoteIp,
    RemotePort,
    ClientIp,
    Header(HeaderName),
    QueryArg(Box<str>),
    Cookie(Box<str>),
    TimeUnix,
    TimeRfc3339,
    RequestId,
    TlsVersion,
    TlsSni,
    Re { regex: Regex, subject: Subject, group: Group },
}

#[derive(Debug, Clone)]
enum Piece {
    Lit(Box<str>),
    Var(Var),
}

/// A parsed text with placeholders.
#[derive(Debug, Clone)]
pub struct Template {
    pieces: Box<[Piece]>,
    text: Box<str>,
}

impl PartialEq for Template {
    fn eq(&self, other: &Template) -> bool {
        self.text == other.text
    }
}

impl Eq for Template {}

/// The regular expressions `{re.NAME.N}` may name: a vhost's matchers with a `path_regex`
/// or `host_regex` ([`super::matcher::Matchers::regex`]).
pub trait Captures {
    /// The expression of matcher `name`, what it reads, and whether it has a group `group`.
    fn regex(&self, name: &str) -> Option<(&Regex, Subject)>;
}

/// No matchers: `{re.*}` is unknown.
#[derive(Debug)]
pub struct NoCaptures;

impl Captures for NoCaptures {
    fn regex(&self, _: &str) -> Option<(&Regex, Subject)> {
        None
    }
}

/// The names a template may use, for error messages.
pub const NAMES: &str = "host, hostport, path, query, uri, method, scheme, remote_ip, remote_port, client_ip, \
                         header.NAME, query.NAME, cookie.NAME, env.NAME, time.unix, time.rfc3339, request_id, \
                         tls.version, tls.sni, re.MATCHER.N or re.MATCHER.GROUP";

fn name_start(b: u8) -> bool {
    b.is_ascii_lowercase()
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

impl Template {
    /// Parses `text`; `re` resolves `{re.NAME...}`. `env` reads `{env.NAME}` (once, now).
    ///
    /// # Errors
    /// An unknown placeholder, a `{re...}` naming no matcher with an expression or a group
    /// it does not have, a `{header.NAME}` that is not a field name; the message says where
    /// (the byte offset in the text) and what the names are.
    pub fn parse(text: &str, re: &dyn Captures) -> Result<Template, String> {
        Self::parse_with(text, re, &|k| std::env::var(k).ok())
    }

    /// [`Template::parse`] with the environment read through `env`.
    ///
    /// # Errors
    /// As [`Template::parse`].
    pub fn parse_with(text: &str, re: &dyn Captures, env: &dyn Fn(&str) -> Option<String>) -> Result<Template, String> {
        let b = text.as_bytes();
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'{' && b.get(i + 1) == Some(&b'{') {
                lit.push('{');
                i += 2;
                continue;
            }
            // `${1}` and `${name}` are a redirect's captures, never placeholders.
            let dollar = i > 0 && b[i - 1] == b'$';
            if b[i] == b'{' && !dollar && b.get(i + 1).copied().is_some_and(name_start) {
                let end = b[i + 1..].iter().position(|&c| !name_byte(c)).map_or(b.len(), |n| i + 1 + n);
                if b.get(end) == Some(&b'}') {
                    let name = &text[i + 1..end];
                    let var = Self::var(name, re).map_err(|e| format!("placeholder {{{name}}} at byte {i}: {e}"))?;
                    match var {
                        Ok(v) => {
                            if !lit.is_empty() {
                                pieces.push(Piece::Lit(std::mem::take(&mut lit).into()));
                            }
                            pieces.push(Piece::Var(v));
                        }
                        Err(env_name) => lit.push_str(&env(&env_name).unwrap_or_default()),
                    }
                    i = end + 1;
                    continue;
                }
            }
            let ch = text[i..].chars().next().expect("in bounds");
            lit.push(ch);
            i += ch.len_utf8();
        }
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit.into()));
        }
        Ok(Template { pieces: pieces.into(), text: text.into() })
    }

    /// The placeholder `name` (`Err(NAME)`: `{env.NAME}`, read at load).
    fn var(name: &str, re: &dyn Captures) -> Result<Result<Var, String>, String> {
        let v = match name {
            "host" => Var::Host,
            "hostport" => Var::HostPort,
            "path" => Var::Path,
            "query" => Var::Query,
            "uri" => Var::Uri,
            "method" => Var::Method,
            "scheme" => Var::Scheme,
            "remote_ip" => Var::RemoteIp,
            "remote_port" => Var::RemotePort,
            "client_ip" => Var::ClientIp,
            "time.unix" => Var::TimeUnix,
            "time.rfc3339" => Var::TimeRfc3339,
            "request_id" => Var::RequestId,
            "tls.version" => Var::TlsVersion,
            "tls.sni" => Var::TlsSni,
            _ => {
                let (kind, rest) = name.split_once('.').ok_or_else(|| format!("unknown; the names are {NAMES}"))?;
                if rest.is_empty() {
                    return Err(format!("{kind}. needs a name after the dot"));
                }
                match kind {
                    "header" => Var::Header(
                        HeaderName::from_bytes(rest.as_bytes()).map_err(|_| format!("{rest:?} is not a field name"))?,
                    ),
                    "query" => Var::QueryArg(rest.into()),
                    "cookie" => Var::Cookie(rest.into()),
                    "env" => return Ok(Err(rest.to_owned())),
                    "re" => {
                        let (m, g) = rest.rsplit_once('.').ok_or("re.MATCHER.N or re.MATCHER.GROUP")?;
                        let (regex, subject) = re
                            .regex(m)
                            .ok_or_else(|| format!("no matcher {m:?} with a path_regex or host_regex in this vhost"))?;
                        let group = match g.parse::<usize>() {
                            Ok(n) if n < regex.captures_len() => Group::Index(n),
                            Ok(n) => return Err(format!("matcher {m:?}'s expression has no group {n}")),
                            Err(_) if regex.capture_names().flatten().any(|c| c == g) => Group::Name(g.into()),
                            Err(_) => return Err(format!("matcher {m:?}'s expression has no group named {g:?}")),
                        };
                        Var::Re { regex: regex.clone(), subject, group }
                    }
                    _ => return Err(format!("unknown; the names are {NAMES}")),
                }
            }
        };
        Ok(Ok(v))
    }

    /// The text as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text, if it has no placeholders (what every request gets).
    pub fn literal(&self) -> Option<&str> {
        match &*self.pieces {
            [] => Some(""),
            [Piece::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// Whether it names the request id (so the request needs one).
    pub fn uses_request_id(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Var(Var::RequestId)))
    }

    /// Appends the text for `req` to `out`, with placeholders' bytes made safe for `cx`;
    /// `literal` rewrites each literal piece as it is copied (a redirect's `$1`), and
    /// `request_id` is the request's id, if it has one. Appends at most [`MAX_EXPANDED`]
    /// bytes.
    pub fn expand(
        &self,
        req: &Request,
        cx: Context,
        request_id: Option<&str>,
        out: &mut Vec<u8>,
        literal: &mut dyn FnMut(&str, &mut Vec<u8>),
    ) {
        self.expand_up_to(req, cx, request_id, out, literal, MAX_EXPANDED);
    }

    /// [`Template::expand`] appending at most `max` bytes.
    pub fn expand_up_to(
        &self,
        req: &Request,
        cx: Context,
        request_id: Option<&str>,
        out: &mut Vec<u8>,
        literal: &mut dyn FnMut(&str, &mut Vec<u8>),
        max: usize,
    ) {
        let base = out.len();
        for p in self.pieces.iter() {
            if out.len() - base >= max {
                break;
            }
            match p {
                Piece::Lit(s) => literal(s, out),
                Piece::Var(v) => {
                    let start = out.len();
                    value(v, req, request_id, out);
                    let component = matches!(v, Var::Header(_) | Var::QueryArg(_) | Var::Cookie(_));
                    safe(out, start, cx, component);
                }
            }
        }
        out.truncate(base + max);
    }

    /// The pieces for `req` in order: literal text to `lit`, each placeholder's value (made
    /// safe for `cx`) to `val`, for a caller that writes them differently (the access log
    /// escapes values only).
    pub fn each(
        &self,
        req: &Request,
        cx: Context,
        request_id: Option<&str>,
        lit: &mut dyn FnMut(&str),
        val: &mut dyn FnMut(&[u8]),
    ) {
        let mut buf = Vec::new();
        for p in self.pieces.iter() {
            match p {
                Piece::Lit(s) => lit(s),
                Piece::Var(v) => {
                    buf.clear();
                    value(v, req, request_id, &mut buf);
                    let component = matches!(v, Var::Header(_) | Var::QueryArg(_) | Var::Cookie(_));
                    safe(&mut buf, 0, cx, component);
                    buf.truncate(MAX_EXPANDED);
                    val(&buf);
                }
            }
        }
    }

    /// The text for `req` (literal pieces as written).
    pub fn render(&self, req: &Request, cx: Context, request_id: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        self.expand(req, cx, request_id, &mut out, &mut |s, o| o.extend_from_slice(s.as_bytes()));
        out
    }
}

/// Encodes, in `out[start..]`, what `cx` does not take (`component`: a value a client
/// wrote freely, which in a URL is one component).
fn safe(out: &mut Vec<u8>, start: usize, cx: Context, component: bool) {
    let bad = |b: u8| match cx {
        Context::Url if component => !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')),
        Context::Url => !b.is_ascii_graphic(),
        Context::Header => (b < 0x20 && b != b'\t') || b == 0x7f,
        Context::Body => false,
        Context::Html => matches!(b, b'<' | b'>' | b'&' | b'"' | b'\''),
        Context::Host => !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':' | b'[' | b']')),
    };
    if !out[start..].iter().any(|&b| bad(b)) {
        return;
    }
    let tail = out.split_off(start);
    for b in tail {
        if !bad(b) {
            out.push(b);
        } else if cx == Context::Html {
            out.extend_from_slice(format!("&#{b};").as_bytes());
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The host of `req` as sent, without port or a trailing dot (any case).
pub fn raw_host(req: &Request) -> &[u8] {
    let Some(auth) = req.authority_bytes() else { return &[] };
    let host = match auth.iter().rposition(|&b| b == b':') {
        Some(i) if !auth.ends_with(b"]") => &auth[..i],
        _ => auth,
    };
    host.strip_suffix(b".").unwrap_or(host)
}

/// The host of `req`, lower case, without port or a trailing dot (copied only when it
/// has upper case).
pub fn host_of(req: &Request) -> std::borrow::Cow<'_, [u8]> {
    let host = raw_host(req);
    if host.iter().any(u8::is_ascii_uppercase) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

/// The path as matchers and routes read it: `;` parameters left out.
pub fn plain_path(req: &Request) -> std::borrow::Cow<'_, [u8]> {
    let path = req.path_bytes();
    if path.contains(&b';') {
        std::borrow::Cow::Owned(crate::path::without_parameters(path))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// The first value of `name` in a `&`-separated query ([`query_args`]).
pub fn query_arg<'q>(query: &'q [u8], name: &'q str) -> Option<std::borrow::Cow<'q, [u8]>> {
    query_args(query, name).next()
}

/// Every value of `name` in a `&`-separated query, `+` and `%XX` decoded; a key is
/// compared without leading spaces (PHP drops them: `?+action=x` is `action` to it).
pub fn query_args<'q>(query: &'q [u8], name: &'q str) -> impl Iterator<Item = std::borrow::Cow<'q, [u8]>> + 'q {
    query.split(|&b| b == b'&').filter_map(move |pair| {
        let (k, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &b""[..]),
        };
        let key = decode_form(k);
        let start = key.iter().position(|&b| b != b' ').unwrap_or(key.len());
        (key[start..] == *name.as_bytes()).then(|| decode_form(v))
    })
}

/// Every value of cookie `name`, read as leniently as the applications that read cookies
/// do: pairs split at `;` and `,`, spaces around names and values dropped, quotes around a
/// value dropped, and each value also `%XX` decoded (both forms are given).
pub fn cookies<'r>(req: &'r Request, name: &'r str) -> impl Iterator<Item = std::borrow::Cow<'r, [u8]>> + 'r {
    req.header_bytes()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
        .flat_map(|(_, v)| v.split(|&b| b == b';' || b == b','))
        .filter_map(move |pair| {
            let i = pair.iter().position(|&b| b == b'=')?;
            if pair[..i].trim_ascii() != name.as_bytes() {
                return None;
            }
            let v = pair[i + 1..].trim_ascii();
            Some(v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v))
        })
        .flat_map(|v| {
            let decoded = selvedge::percent_decode(v);
            let again = matches!(decoded, std::borrow::Cow::Owned(_)).then_some(decoded);
            std::iter::once(std::borrow::Cow::Borrowed(v)).chain(again)
        })
}

/// `%XX` and `+` (a space) decoded.
fn decode_form(s: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !s.contains(&b'+') {
        return selvedge::percent_decode(s);
    }
    let spaced: Vec<u8> = s.iter().map(|&b| if b == b'+' { b' ' } else { b }).collect();
    std::borrow::Cow::Owned(selvedge::percent_decode(&spaced).into_owned())
}

/// The value of cookie `name` among the request's `Cookie` fields.
pub fn cookie<'r>(req: &'r Request, name: &str) -> Option<&'r [u8]> {
    let fields = req.header_bytes().filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"));
    for (_, v) in fields {
        for pair in v.split(|&b| b == b';') {
            let pair = pair.trim_ascii();
            if let Some(i) = pair.iter().position(|&b| b == b'=') {
                if &pair[..i] == name.as_bytes() {
                    let v = &pair[i + 1..];
                    return Some(v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v));
                }
            }
        }
    }
    None
}

fn put_ip(out: &mut Vec<u8>, ip: Option<IpAddr>) {
    if let Some(ip) = ip {
        let mut buf = [0u8; 64];
        out.extend_from_slice(crate::client::ip_text(&mut buf, ip));
    }
}

fn value(v: &Var, req: &Request, request_id: Option<&str>, out: &mut Vec<u8>) {
    match v {
        Var::Host => out.extend_from_slice(&host_of(req)),
        Var::HostPort => out.extend_from_slice(req.authority_bytes().unwrap_or_default()),
        Var::Path => out.extend_from_slice(req.path_bytes()),
        Var::Query => out.extend_from_slice(req.query_bytes().unwrap_or_default()),
        Var::Uri => {
            out.extend_from_slice(req.path_bytes());
            if let Some(q) = req.query_bytes() {
                out.push(b'?');
                out.extend_from_slice(q);
            }
        }
        Var::Method => out.extend_from_slice(req.method().as_str().as_bytes()),
        Var::Scheme => out.extend_from_slice(if req.is_secure() { b"https" } else { b"http" }),
        Var::RemoteIp => put_ip(
            out,
            match req.peer() {
                PeerAddr::Tcp(a) => Some(a.ip().to_canonical()),
                PeerAddr::Unix => None,
            },
        ),
        Var::RemotePort => {
            if let PeerAddr::Tcp(a) = req.peer() {
                put_u64(out, u64::from(a.port()));
            }
        }
        Var::ClientIp => put_ip(out, crate::client::client_ip(req)),
        Var::Header(name) => {
            let mut first = true;
            for (n, val) in req.header_bytes() {
                if n.eq_ignore_ascii_case(name.as_str().as_bytes()) {
                    if !first {
                        out.extend_from_slice(b", ");
                    }
                    out.extend_from_slice(val);
                    first = false;
                }
            }
        }
        Var::QueryArg(name) => {
            if let Some(v) = req.query_bytes().and_then(|q| query_arg(q, name)) {
                out.extend_from_slice(&v);
            }
        }
        Var::Cookie(name) => out.extend_from_slice(cookie(req, name).unwrap_or_default()),
        Var::TimeUnix => put_u64(out, unix_now()),
        Var::TimeRfc3339 => {
            let mut buf = [0u8; selvedge_proto::date::RFC3339_LEN];
            selvedge_proto::date::render_rfc3339(unix_now(), &mut buf);
            out.extend_from_slice(&buf);
        }
        Var::RequestId => match request_id {
            Some(id) => out.extend_from_slice(id.as_bytes()),
            None => out.extend_from_slice(crate::observe::RequestId::for_request(req, false).as_str().as_bytes()),
        },
        Var::TlsVersion => out.extend_from_slice(match req.tls_version() {
            None => b"",
            Some(selvedge::TlsVersion::Tls13) => b"tls1.3",
            Some(selvedge::TlsVersion::Tls12) => b"tls1.2",
            Some(_) => b"tls",
        }),
        Var::TlsSni => out.extend_from_slice(req.tls_server_name().unwrap_or_default().as_bytes()),
        Var::Re { regex, subject, group } => {
            let hay = match subject {
                Subject::Path => plain_path(req),
                Subject::Host => host_of(req),
            };
            if let Some(c) = regex.captures(&hay) {
                let m = match group {
                    Group::Index(n) => c.get(*n),
                    Group::Name(n) => c.name(n),
                };
                out.extend_from_slice(m.map_or(&b""[..], |m| m.as_bytes()));
            }
        }
    }
}

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(selvedge_proto::message::decimal(n, &mut [0; 20]));
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct One(Regex);
    impl Captures for One {
        fn regex(&self, name: &str) -> Option<(&Regex, Subject)> {
            (name == "ver").then_some((&self.0, Subject::Path))
        }
    }

    fn req(target: &str, fields: &[(&str, &str)]) -> Request {
        let mut b = selvedge::http::Request::builder().uri(target);
        for (n, v) in fields {
            b = b.header(*n, *v);
        }
        Request::from(b.body(bytes::Bytes::new()).unwrap())
    }

    #[test]
    fn parse_and_expand() {
        let re = One(Regex::new(r"^/v(?<num>\d+)/(.*)$").unwrap());
        let env = |k: &str| (k == "STAGE").then(|| "prod".to_owned());
        let t = Template::parse_with(
            "{method} {path}?{query} {header.x-a} {query.b} {cookie.c} {re.ver.num}/{re.ver.2} {env.STAGE} {{x} {\"ok\":1}",
            &re,
            &env,
        )
        .unwrap();
        let r = req(
            "/v2/a/b;p=1?b=1+2%21&z",
            &[("host", "Ex.com:80"), ("x-a", "1"), ("X-A", "2"), ("cookie", "a=1; c=\"cv\"")],
        );
        let s = t.render(&r, Context::Body, None);
        assert_eq!(String::from_utf8(s).unwrap(), "GET /v2/a/b;p=1?b=1+2%21&z 1, 2 1 2! cv 2/a/b prod {x} {\"ok\":1}");
        let h = Template::parse("{host}|{hostport}|{scheme}|{uri}", &NoCaptures).unwrap();
        assert_eq!(h.render(&r, Context::Url, None), b"ex.com|Ex.com:80|http|/v2/a/b;p=1?b=1+2%21&z");
        assert_eq!(Template::parse("plain {", &NoCaptures).unwrap().literal(), Some("plain {"));
        for bad in ["{nope}", "{header.}", "{re.ver.3}", "{re.other.1}", "{re.ver.nom}", "{header.a b}x{foo.bar}"] {
            let e = Template::parse_with(bad, &re, &env).unwrap_err();
            assert!(e.contains("placeholder"), "{bad}: {e}");
        }
    }

    #[test]
    fn values_are_made_safe_for_where_they_go() {
        let t = Template::parse("{query.q}", &NoCaptures).unwrap();
        let r = req("/?q=a%0D%0Ab%20c%FF", &[]);
        assert_eq!(t.render(&r, Context::Header, None), b"a%0D%0Ab c\xff");
        assert_eq!(t.render(&r, Context::Url, None), b"a%0D%0Ab%20c%FF");
        assert_eq!(t.render(&r, Context::Body, None), b"a\r\nb c\xff");
        // In a URL, a client's value is one component: no `/`, `?`, `#`, `@` of its own.
        let r = req("/?q=..%2F..%2Fx%3Fy%23z%40w%25", &[]);
        assert_eq!(t.render(&r, Context::Url, None), b"..%2F..%2Fx%3Fy%23z%40w%25");
        let r = req("/?q=%3Cb%3E%26%22%27", &[]);
        assert_eq!(t.render(&r, Context::Html, None), b"&#60;b&#62;&#38;&#34;&#39;");
        // Each expansion is bounded on its own.
        let big = "x".repeat(40_000);
        let r = req(&format!("/?q={big}"), &[]);
        let two = Template::parse("{query.q}{query.q}", &NoCaptures).unwrap();
        let mut out = b"prefix".to_vec();
        two.expand(&r, Context::Header, None, &mut out, &mut |s, o| o.extend_from_slice(s.as_bytes()));
        assert_eq!(out.len(), 6 + MAX_EXPANDED);
        two.expand(&r, Context::Header, None, &mut out, &mut |s, o| o.extend_from_slice(s.as_bytes()));
        assert_eq!(out.len(), 6 + 2 * MAX_EXPANDED);
    }
}
