//! The access log's formats besides `combined`: `json` (one object per line) and templates
//! of `$name` fields. Both render in two halves like `combined`: what the request says
//! when it arrives ([`begin`]), the rest when the response is known ([`finish`]).

use std::fmt::Write as _;

use selvedge::http::Version;
use selvedge::{Request, Response};

use crate::observe::Upstream;

/// An access log format.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// Apache's combined format (the default).
    #[default]
    Combined,
    /// One JSON object per line (RFC 8259).
    Json,
    /// A template of `$name` fields.
    Template(Template),
}

impl Format {
    /// `"combined"`, `"json"` or a template.
    ///
    /// # Errors
    /// An unknown `$name` in a template, or a `$` without a name.
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "combined" => Ok(Format::Combined),
            "json" => Ok(Format::Json),
            t if t.contains('$') || t.contains('{') => Template::parse(t).map(Format::Template),
            other => Err(format!(
                "format {other:?}: \"combined\", \"json\" or a template with $fields (\"$remote_addr $request $status\")"
            )),
        }
    }

    /// Whether lines need the response's timing (duration, time to first byte).
    pub fn needs_timing(&self) -> bool {
        match self {
            Format::Combined => false,
            Format::Json => true,
            Format::Template(t) => t.pieces.iter().any(|p| matches!(p, Piece::Var(v) if v.timed())),
        }
    }

    /// Whether lines show the request id.
    pub fn needs_request_id(&self) -> bool {
        match self {
            Format::Combined => false,
            Format::Json => true,
            Format::Template(t) => t.pieces.iter().any(|p| matches!(p, Piece::Var(Var::RequestId))),
        }
    }
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Var(Var),
    /// `$http_NAME`: a request header (`_` for `-`), lower case.
    Header(String),
    /// Literal text with placeholders (`{header.x-tenant}`, `{cookie.session}`...),
    /// rendered with the request half ([`crate::lang::template`]).
    Placeholders(crate::lang::template::Template),
}

macro_rules! vars {
    ($($name:literal => $var:ident, $late:literal;)*) => {
        /// A template field.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Var { $($var,)* }
        impl Var {
            fn by_name(n: &str) -> Option<Var> {
                match n { $($name => Some(Var::$var),)* _ => None }
            }
            /// Known only once the response is (rendered by `finish`).
            fn late(self) -> bool {
                match self { $(Var::$var => $late,)* }
            }
        }
        /// Every template field name.
        pub const FIELDS: &[&str] = &[$($name,)*];
    };
}

vars! {
    "remote_addr" => RemoteAddr, false;
    "time_local" => TimeLocal, false;
    "time_iso8601" => TimeIso, false;
    "request" => Request, false;
    "request_method" => Method, false;
    "request_uri" => RequestUri, false;
    "uri" => Uri, false;
    "args" => Args, false;
    "server_protocol" => ServerProtocol, false;
    "protocol" => Protocol, false;
    "tls_version" => TlsVersion, false;
    "host" => Host, false;
    "http_referer" => Referer, false;
    "http_user_agent" => UserAgent, false;
    "vhost" => Vhost, true;
    "route" => Route, true;
    "request_id" => RequestId, true;
    "status" => Status, true;
    "body_bytes_sent" => BodyBytes, true;
    "request_time" => RequestTime, true;
    "duration_us" => DurationUs, true;
    "ttfb_us" => TtfbUs, true;
    "upstream_addr" => UpstreamAddr, true;
    "upstream_time" => UpstreamTime, true;
    "upstream_time_us" => UpstreamTimeUs, true;
}

impl Var {
    fn timed(self) -> bool {
        matches!(self, Var::RequestTime | Var::DurationUs | Var::TtfbUs)
    }
}

impl Template {
    /// Parses `$name` and `${name}` fields; `$$` is a `$`.
    ///
    /// # Errors
    /// An unknown name, or a `$` without one.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            lit.push_str(&rest[..i]);
            rest = &rest[i + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            }
            let (name, after) = match rest.strip_prefix('{') {
                Some(r) => match r.find('}') {
                    Some(j) => (&r[..j], &r[j + 1..]),
                    None => return Err(format!("format: unclosed ${{ in {s:?}")),
                },
                None => {
                    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                    (&rest[..end], &rest[end..])
                }
            };
            if name.is_empty() {
                return Err(format!("format: a $ without a field name in {s:?} (write $$ for a dollar sign)"));
            }
            if !lit.is_empty() {
                pieces.push(literal(std::mem::take(&mut lit))?);
            }
            pieces.push(match (Var::by_name(name), name.strip_prefix("http_")) {
                (Some(v), _) => Piece::Var(v),
                (None, Some(h)) if !h.is_empty() => Piece::Header(h.replace('_', "-").to_ascii_lowercase()),
                _ => return Err(format!("format: unknown field ${name} (known: {}, $http_NAME)", FIELDS.join(", "))),
            });
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(literal(lit)?);
        }
        Ok(Template { pieces })
    }
}

/// A template's text between fields: itself, or with placeholders.
fn literal(text: String) -> Result<Piece, String> {
    let t = crate::lang::template::Template::parse(&text, &crate::lang::template::NoCaptures)
        .map_err(|e| format!("format: {e}"))?;
    if t.literal().is_some() {
        return Ok(Piece::Lit(t.literal().unwrap_or_default().to_owned()));
    }
    if t.uses_request_id() {
        return Err("format: the log's request id is $request_id (the one sent upstream)".into());
    }
    Ok(Piece::Placeholders(t))
}

/// The response half of a line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome<'a> {
    /// The virtual host's label.
    pub vhost: &'a str,
    /// The route's prefix (`none`: no route).
    pub route: &'a str,
    /// Time to the response head, µs.
    pub ttfb_us: u64,
    /// Time to the last byte, µs.
    pub duration_us: u64,
    /// The upstream, on a proxied request.
    pub upstream: Option<&'a Upstream>,
    /// The request id, if one is used.
    pub request_id: Option<&'a str>,
}

/// A request's half of a line, for [`finish`].
#[derive(Debug)]
pub struct Half {
    /// The text so far; for a template, the request fields in order.
    pub line: String,
    /// Template only: where each late field goes in `line`.
    cuts: Vec<(usize, Var)>,
    /// A HEAD request (no body bytes).
    pub head: bool,
}

/// `true` for protocol tokens.
fn server_protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

fn protocol(v: Version) -> &'static str {
    crate::metrics::PROTOCOLS[crate::metrics::protocol(v) as usize]
}

/// What the request's line needs that depends on the clock or the connection.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// `10/Oct/2000:13:55:36 +0000` for this second.
    pub time_local: &'a str,
    /// `2000-10-10T13:55:36.123Z`.
    pub time_iso: &'a str,
    /// The TLS version, on TLS.
    pub tls: Option<&'a str>,
}

/// Renders the request half of a `json` or template line.
pub fn begin(format: &Format, req: &Request, cx: &Context<'_>) -> Half {
    let head = req.method() == selvedge::http::Method::HEAD;
    let mut line = String::with_capacity(384);
    match format {
        Format::Combined => {}
        Format::Json => {
            line.push_str("{\"time\":\"");
            line.push_str(cx.time_iso);
            line.push_str("\",\"peer\":");
            match crate::client::client_ip(req) {
                // An address's text needs no escaping.
                Some(ip) => {
                    let _ = write!(line, "\"{ip}\"");
                }
                None => line.push_str("null"),
            }
            line.push_str(",\"method\":");
            json_text(&mut line, req.method().as_str());
            line.push_str(",\"path\":");
            json_text(&mut line, req.path());
            line.push_str(",\"query\":");
            json_text_opt(&mut line, req.query());
            line.push_str(",\"protocol\":\"");
            line.push_str(protocol(req.version()));
            line.push_str("\",\"tls\":");
            json_text_opt(&mut line, cx.tls);
            line.push_str(",\"host\":");
            json_text_opt(&mut line, req.authority());
            line.push_str(",\"user_agent\":");
            json_opt(&mut line, req.header("user-agent"));
            line.push_str(",\"referer\":");
            json_opt(&mut line, req.header("referer"));
        }
        Format::Template(t) => {
            let mut cuts = Vec::new();
            for p in &t.pieces {
                match p {
                    Piece::Lit(s) => line.push_str(s),
                    Piece::Header(h) => text(&mut line, req.header(h)),
                    // The template's own text as written, what a request brings escaped.
                    Piece::Placeholders(t) => {
                        let cell = std::cell::RefCell::new(&mut line);
                        t.each(
                            req,
                            crate::lang::template::Context::Header,
                            None,
                            &mut |s| cell.borrow_mut().push_str(s),
                            &mut |v| escape(&mut cell.borrow_mut(), v),
                        );
                    }
                    Piece::Var(v) if v.late() => cuts.push((line.len(), *v)),
                    Piece::Var(v) => early(&mut line, *v, req, cx),
                }
            }
            return Half { line, cuts, head };
        }
    }
    Half { line, cuts: Vec::new(), head }
}

fn early(out: &mut String, v: Var, req: &Request, cx: &Context<'_>) {
    match v {
        Var::RemoteAddr => match crate::client::client_ip(req) {
            Some(ip) => {
                let _ = write!(out, "{ip}");
            }
            None => out.push_str("unix"),
        },
        Var::TimeLocal => out.push_str(cx.time_local),
        Var::TimeIso => out.push_str(cx.time_iso),
        Var::Request => {
            escape(out, req.method().as_str().as_bytes());
            out.push(' ');
            escape(out, req.target().as_bytes());
            out.push(' ');
            out.push_str(server_protocol(req.version()));
        }
        Var::Method => escape(out, req.method().as_str().as_bytes()),
        Var::RequestUri => escape(out, req.target().as_bytes()),
        Var::Uri => escape(out, req.path().as_bytes()),
        Var::Args => escape(out, req.query().unwrap_or("").as_bytes()),
        Var::ServerProtocol => out.push_str(server_protocol(req.version())),
        Var::Protocol => out.push_str(protocol(req.version())),
        Var::TlsVersion => out.push_str(cx.tls.unwrap_or("-")),
        Var::Host => text(out, req.authority().map(str::as_bytes)),
        Var::Referer => text(out, req.header("referer")),
        Var::UserAgent => text(out, req.header("user-agent")),
        _ => {}
    }
}

/// The response body's size as logged: `None` for HEAD, 204, 304 and streams.
pub fn body_size(head: bool, res: &Response) -> Option<u64> {
    let status = res.status().as_u16();
    match res.body() {
        _ if head || status == 304 || status == 204 => None,
        selvedge::ResponseBody::Bytes(b) => Some(b.len() as u64),
        selvedge::ResponseBody::File(f) => Some(f.len),
        selvedge::ResponseBody::Empty => Some(0),
        selvedge::ResponseBody::Stream(_) => None,
    }
}

/// Completes a `json` or template line (with its newline) into `out`.
pub fn finish(half: Half, res: &Response, o: &Outcome<'_>, json: bool, out: &mut Vec<u8>) {
    let size = body_size(half.head, res);
    if json {
        // The rest goes after the request half, in its allocation.
        let mut s = half.line;
        s.push_str(",\"vhost\":");
        json_text(&mut s, o.vhost);
        s.push_str(",\"route\":");
        json_text(&mut s, o.route);
        s.push_str(",\"status\":");
        push_u64(&mut s, u64::from(res.status().as_u16()));
        s.push_str(",\"bytes\":");
        match size {
            Some(n) => push_u64(&mut s, n),
            None if half.head || matches!(res.status().as_u16(), 204 | 304) => s.push('0'),
            None => s.push_str("null"),
        }
        s.push_str(",\"duration_us\":");
        push_u64(&mut s, o.duration_us);
        s.push_str(",\"ttfb_us\":");
        push_u64(&mut s, o.ttfb_us);
        s.push_str(",\"upstream_addr\":");
        match o.upstream {
            Some(u) => {
                json_text(&mut s, &u.addr);
                let _ = write!(s, ",\"upstream_time_us\":{}", u.time.as_micros());
            }
            None => s.push_str("null,\"upstream_time_us\":null"),
        }
        s.push_str(",\"request_id\":");
        json_text_opt(&mut s, o.request_id);
        s.push_str("}\n");
        out.extend_from_slice(s.as_bytes());
        return;
    }
    let mut s = String::with_capacity(64);
    let mut at = 0;
    for &(cut, v) in &half.cuts {
        out.extend_from_slice(&half.line.as_bytes()[at..cut]);
        at = cut;
        s.clear();
        match v {
            Var::Vhost => escape(&mut s, o.vhost.as_bytes()),
            Var::Route => escape(&mut s, o.route.as_bytes()),
            Var::RequestId => s.push_str(o.request_id.unwrap_or("-")),
            Var::Status => {
                let _ = write!(s, "{}", res.status().as_u16());
            }
            Var::BodyBytes => {
                let _ = write!(s, "{}", size.unwrap_or(0));
            }
            Var::RequestTime => seconds(&mut s, o.duration_us),
            Var::DurationUs => {
                let _ = write!(s, "{}", o.duration_us);
            }
            Var::TtfbUs => {
                let _ = write!(s, "{}", o.ttfb_us);
            }
            Var::UpstreamAddr => match o.upstream {
                Some(u) => escape(&mut s, u.addr.as_bytes()),
                None => s.push('-'),
            },
            Var::UpstreamTime => match o.upstream {
                Some(u) => seconds(&mut s, u.time.as_micros() as u64),
                None => s.push('-'),
            },
            Var::UpstreamTimeUs => match o.upstream {
                Some(u) => {
                    let _ = write!(s, "{}", u.time.as_micros());
                }
                None => s.push('-'),
            },
            _ => {}
        }
        out.extend_from_slice(s.as_bytes());
    }
    out.extend_from_slice(&half.line.as_bytes()[at..]);
    out.push(b'\n');
}

/// `1.234` seconds with millisecond precision (nginx's `$request_time`).
fn seconds(out: &mut String, us: u64) {
    let ms = us / 1000;
    let _ = write!(out, "{}.{:03}", ms / 1000, ms % 1000);
}

/// A header or other optional text, escaped; `-` when absent.
fn text(out: &mut String, v: Option<&[u8]>) {
    match v {
        Some(v) => escape(out, v),
        None => out.push('-'),
    }
}

/// Appends `s` with `"`, `\` and non-printable bytes escaped as `\xHH` (as Apache and
/// nginx do): a line never holds a control byte or a raw quote. A byte at a time, as the
/// combined format always did: its fields are short, and a run-and-validate loop measured
/// slower (`bench/callgrind.sh`).
pub fn escape(out: &mut String, s: &[u8]) {
    for &b in s {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                out.push_str("\\x");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 15)] as char);
            }
        }
    }
}

/// Lower-case hex digits.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `n` in decimal (without `fmt`'s machinery).
pub fn push_u64(out: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    for &d in selvedge_proto::message::decimal(n, &mut buf) {
        out.push(char::from(d));
    }
}

/// Text already UTF-8 as a JSON string (no validation pass).
fn json_text(out: &mut String, v: &str) {
    out.push('"');
    json_utf8(out, v);
    out.push('"');
}

/// [`json_text`], or `null`.
fn json_text_opt(out: &mut String, v: Option<&str>) {
    match v {
        Some(v) => json_text(out, v),
        None => out.push_str("null"),
    }
}

/// A JSON string, or `null`.
fn json_opt(out: &mut String, v: Option<&[u8]>) {
    match v {
        Some(v) => json_str(out, v),
        None => out.push_str("null"),
    }
}

/// `s` as a JSON string (RFC 8259 §7): `"` and `\` escaped, control characters (and DEL)
/// as `\uXXXX` (`\n`, `\r`, `\t` short), valid UTF-8 kept as is, and each byte that is not
/// part of valid UTF-8 as the character of the same number (`\u00XX`: header bytes read
/// as ISO-8859-1, as HTTP's obs-text historically was), so every line is valid UTF-8.
pub fn json_str(out: &mut String, s: &[u8]) {
    out.push('"');
    // One validation pass; the byte-wise decoder only for what is not UTF-8.
    match std::str::from_utf8(s) {
        Ok(v) => json_utf8(out, v),
        Err(_) => {
            for chunk in s.utf8_chunks() {
                json_utf8(out, chunk.valid());
                for &bad in chunk.invalid() {
                    json_u00(out, bad);
                }
            }
        }
    }
    out.push('"');
}

/// Bytes a JSON string holds as they are: printable ASCII but `"` and `\`, and the bytes
/// of (valid) UTF-8 beyond ASCII.
static JSON_PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0x20;
    while c < 256 {
        t[c] = c != b'"' as usize && c != b'\\' as usize && c != 0x7f;
        c += 1;
    }
    t
};

/// Valid UTF-8 as the inside of a JSON string. Only ASCII bytes are escaped, so every cut
/// is at a character boundary.
fn json_utf8(out: &mut String, v: &str) {
    let b = v.as_bytes();
    let mut run = 0;
    for (i, &c) in b.iter().enumerate() {
        if JSON_PLAIN[usize::from(c)] {
            continue;
        }
        out.push_str(&v[run..i]);
        match c {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            _ => json_u00(out, c),
        }
        run = i + 1;
    }
    out.push_str(&v[run..]);
}

/// `\u00XX`: a control character, or a byte that is not UTF-8 read as ISO-8859-1.
fn json_u00(out: &mut String, c: u8) {
    out.push_str("\\u00");
    out.push(HEX[usize::from(c >> 4)] as char);
    out.push(HEX[usize::from(c & 15)] as char);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_everything_rfc_8259_asks() {
        let mut s = String::new();
        json_str(&mut s, b"a\"b\\c\n\x01\x7f/\xc3\xa9\xff\xfez");
        assert_eq!(s, r#""a\"b\\c\n\u0001\u007f/é\u00ff\u00fez""#);
        // Valid UTF-8 takes the fast path, with the same escapes.
        s.clear();
        json_str(&mut s, "é\"\t\u{1}日本\\".as_bytes());
        assert_eq!(s, r#""é\"\t\u0001日本\\""#);
        s.clear();
        for n in [0, 7, 10, 404, u64::MAX] {
            push_u64(&mut s, n);
            s.push(' ');
        }
        assert_eq!(s, "0 7 10 404 18446744073709551615 ");
    }

    #[test]
    fn escapes() {
        let mut s = String::new();
        escape(&mut s, b"a\"b\\c\x01\xff");
        assert_eq!(s, "a\\\"b\\\\c\\x01\\xff");
    }

    #[test]
    fn templates_parse_and_refuse_unknown_fields() {
        let t = Template::parse("$remote_addr [${status}] $$ $http_x_forwarded_for x").unwrap();
        assert_eq!(
            t.pieces,
            vec![
                Piece::Var(Var::RemoteAddr),
                Piece::Lit(" [".into()),
                Piece::Var(Var::Status),
                Piece::Lit("] $ ".into()),
                Piece::Header("x-forwarded-for".into()),
                Piece::Lit(" x".into()),
            ]
        );
        assert!(Template::parse("$nope").unwrap_err().contains("unknown field $nope"));
        assert!(Template::parse("a $ b").is_err());
        assert!(Template::parse("${status").is_err());
        assert!(Format::parse("xml").is_err());
        assert!(Format::parse("$status {header.x-tenant} {cookie.s} {\"k\": 1}").is_ok());
        assert!(Format::parse("{header.x-tenant}").is_ok());
        assert!(Format::parse("$status {nope}").unwrap_err().contains("placeholder {nope}"));
        assert!(Format::parse("$status {request_id}").unwrap_err().contains("$request_id"));
        assert!(Format::parse("$request_time").unwrap().needs_timing());
        assert!(!Format::parse("$status").unwrap().needs_timing());
    }

    #[test]
    fn seconds_have_milliseconds() {
        let mut s = String::new();
        seconds(&mut s, 1_234_567);
        assert_eq!(s, "1.234");
    }
}
