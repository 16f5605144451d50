//! The meta-variables of RFC 3875 §4.1 (a CGI script's environment, a FastCGI request's
//! `FCGI_PARAMS`), plus the usual extensions (`REQUEST_URI`, `REQUEST_SCHEME`, `HTTPS`,
//! `DOCUMENT_ROOT`, `SCRIPT_FILENAME`, `REDIRECT_STATUS`). Nothing else of the server's
//! environment reaches the script but `PATH` (CGI) and the names the route lists.
//!
//! Request headers become `HTTP_*` (upper case, `-` → `_`, repeated fields joined by `, `,
//! cookies by `; `), except:
//! - `Proxy`: it would become `HTTP_PROXY`, which many HTTP clients read as their proxy
//!   setting (the "httpoxy" hole, CVE-2016-5385 and friends);
//! - names containing `_`: `X_Forwarded_For` would be indistinguishable from
//!   `X-Forwarded-For` (Apache 2.4 and nginx drop them too);
//! - `Content-Length` / `Content-Type`, which are `CONTENT_LENGTH` / `CONTENT_TYPE`;
//! - `Host`: `HTTP_HOST` is the authority that chose the virtual host (an absolute-form
//!   target's or `:authority`, which a `Host` field cannot contradict);
//! - `Authorization` and `Proxy-Authorization` (RFC 3875 §4.1.18: credentials are not
//!   passed), unless the route sets `pass_authorization`.
//!
//! The variables are written into a [`Vars`] sink as byte pairs, so FastCGI encodes them
//! straight into its request buffer without building a list first.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use selvedge::http::Version;
use selvedge::{PeerAddr, Request};
use selvedge_proto::message::decimal;

use super::script::Script;

/// `SERVER_SOFTWARE`.
const SOFTWARE: &str = concat!("selvedge/", env!("CARGO_PKG_VERSION"));

/// Where the variables go.
pub trait Vars {
    /// One variable.
    fn var(&mut self, name: &[u8], value: &[u8]);
}

/// A process environment (CGI).
impl Vars for Vec<(OsString, OsString)> {
    fn var(&mut self, name: &[u8], value: &[u8]) {
        self.push((OsStr::from_bytes(name).to_owned(), OsStr::from_bytes(value).to_owned()));
    }
}

/// What a route adds to the variables.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Set first, as given (the route's `env` / `params`).
    pub extra: &'a [(String, OsString)],
    /// `PATH`, if given (CGI).
    pub path: Option<&'a OsStr>,
    /// Pass `Authorization` as `HTTP_AUTHORIZATION`.
    pub pass_authorization: bool,
}

/// Writes the variables for running `script` for `req` into `out`. `content_length`: the
/// body's length (`None`: no body). `root`: the route's canonical directory.
pub fn meta_variables(
    req: &Request,
    script: &Script,
    content_length: Option<u64>,
    opts: &Options<'_>,
    root: &Path,
    out: &mut impl Vars,
) {
    for (n, v) in opts.extra {
        out.var(n.as_bytes(), v.as_bytes());
    }
    if let Some(p) = opts.path {
        out.var(b"PATH", p.as_bytes());
    }
    out.var(b"GATEWAY_INTERFACE", b"CGI/1.1");
    out.var(b"SERVER_SOFTWARE", SOFTWARE.as_bytes());
    let protocol: &[u8] = match req.version() {
        Version::HTTP_09 => b"HTTP/0.9",
        Version::HTTP_10 => b"HTTP/1.0",
        Version::HTTP_2 => b"HTTP/2.0",
        Version::HTTP_3 => b"HTTP/3.0",
        _ => b"HTTP/1.1",
    };
    out.var(b"SERVER_PROTOCOL", protocol);
    let secure = req.is_secure();
    // Bytes throughout, as received (HTTP/1.1 admits only visible ASCII there; HTTP/2 and
    // HTTP/3 any byte but NUL, CR and LF, passed on as nginx does): no UTF-8 pass per request.
    let (name, port) = server_name_port(req.authority_bytes().unwrap_or(b""), secure);
    out.var(b"SERVER_NAME", name);
    out.var(b"SERVER_PORT", port);
    out.var(b"REQUEST_SCHEME", if secure { b"https" } else { b"http" });
    if secure {
        out.var(b"HTTPS", b"on");
    }
    out.var(b"REQUEST_METHOD", req.method().as_str().as_bytes());
    out.var(b"REQUEST_URI", req.target_bytes());
    out.var(b"QUERY_STRING", req.query_bytes().unwrap_or(b""));
    out.var(b"SCRIPT_NAME", &script.script_name);
    out.var(b"SCRIPT_FILENAME", script.path.as_os_str().as_bytes());
    out.var(b"DOCUMENT_ROOT", root.as_os_str().as_bytes());
    // Room for a field's variable name and a few joined values at once (it grew two or
    // three times per request from empty).
    let mut scratch = Vec::with_capacity(256);
    if !script.path_info.is_empty() {
        out.var(b"PATH_INFO", &script.path_info);
        scratch.extend_from_slice(root.as_os_str().as_bytes());
        scratch.extend_from_slice(&script.path_info);
        out.var(b"PATH_TRANSLATED", &scratch);
    }
    let mut text = [0u8; 64];
    let mut digits = [0u8; 20];
    // The client as trusted proxies say (crate::client); its port only when it is the peer.
    let client = crate::client::client_ip(req);
    out.var(b"REMOTE_ADDR", client.map_or(&b""[..], |ip| crate::client::ip_text(&mut text, ip)));
    if let PeerAddr::Tcp(a) = req.peer() {
        if client == Some(a.ip().to_canonical()) {
            out.var(b"REMOTE_PORT", decimal(u64::from(a.port()), &mut digits));
        }
    }
    if let Some(n) = content_length {
        out.var(b"CONTENT_LENGTH", decimal(n, &mut digits));
    }
    if let Some(t) = req.header("content-type").filter(|v| !v.contains(&0)) {
        out.var(b"CONTENT_TYPE", t);
    }
    out.var(b"REDIRECT_STATUS", b"200");
    http_fields(req, opts.pass_authorization, &mut scratch, out);
}

/// The request's fields as `HTTP_*` variables, repeated fields joined in order of their
/// first appearance.
fn http_fields(req: &Request, pass_authorization: bool, scratch: &mut Vec<u8>, out: &mut impl Vars) {
    let passed = |name: &[u8], value: &[u8]| {
        let dropped = [&b"proxy"[..], b"content-length", b"content-type", b"proxy-authorization"]
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d))
            || (!pass_authorization && name.eq_ignore_ascii_case(b"authorization"))
            || name.contains(&b'_')
            || name.eq_ignore_ascii_case(b"host")
            || name.starts_with(b":")
            || value.contains(&0);
        !dropped
    };
    let same = |a: &[u8], b: &[u8]| a.len() == b.len() && a.eq_ignore_ascii_case(b);
    // The authority that chose the virtual host (an absolute-form target's, or
    // `:authority`), never a `Host` field that disagrees with it (RFC 9112 §3.2.2).
    if let Some(a) = req.authority_bytes() {
        out.var(b"HTTP_HOST", a);
    }
    for (i, (name, value)) in req.header_bytes().enumerate() {
        if !passed(name, value) {
            continue;
        }
        // A name seen before was written with all its values then.
        if req.header_bytes().take(i).any(|(n, v)| same(n, name) && passed(n, v)) {
            continue;
        }
        scratch.clear();
        scratch.extend_from_slice(b"HTTP_");
        scratch.extend(name.iter().map(|&c| if c == b'-' { b'_' } else { c.to_ascii_uppercase() }));
        let name_len = scratch.len();
        let mut joined = false;
        for (n, v) in req.header_bytes().skip(i + 1) {
            if same(n, name) && passed(n, v) {
                if !joined {
                    scratch.extend_from_slice(value);
                    joined = true;
                }
                scratch.extend_from_slice(if name.eq_ignore_ascii_case(b"cookie") { b"; " } else { b", " });
                scratch.extend_from_slice(v);
            }
        }
        let (var, rest) = scratch.split_at(name_len);
        out.var(var, if joined { rest } else { value });
    }
}

/// `SERVER_NAME` and `SERVER_PORT` from the request's authority (the `Host` header): the
/// name the client used, and its port or the scheme's default.
fn server_name_port(authority: &[u8], secure: bool) -> (&[u8], &[u8]) {
    let default: &[u8] = if secure { b"443" } else { b"80" };
    let split = if authority.starts_with(b"[") {
        authority.windows(2).position(|w| w == b"]:").map(|i| i + 1)
    } else {
        authority.iter().rposition(|&b| b == b':')
    };
    let (name, port) = match split {
        Some(i) => (&authority[..i], &authority[i + 1..]),
        None => (authority, &b""[..]),
    };
    let port = if !port.is_empty() && port.iter().all(u8::is_ascii_digit) { port } else { default };
    (if name.is_empty() { b"localhost" } else { name }, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names() {
        let s = |a: &'static str, secure| {
            let (n, p) = server_name_port(a.as_bytes(), secure);
            (std::str::from_utf8(n).unwrap(), std::str::from_utf8(p).unwrap())
        };
        assert_eq!(s("example.com:8080", false), ("example.com", "8080"));
        assert_eq!(s("example.com", true), ("example.com", "443"));
        assert_eq!(s("[::1]:81", false), ("[::1]", "81"));
        assert_eq!(s("[::1]", false), ("[::1]", "80"));
        assert_eq!(s("", false), ("localhost", "80"));
        assert_eq!(s("h:x1", false), ("h", "80"));
    }

    #[test]
    fn addresses() {
        use crate::client::ip_text;
        let mut buf = [0u8; 64];
        assert_eq!(ip_text(&mut buf, "10.0.255.7".parse().unwrap()), b"10.0.255.7");
        assert_eq!(ip_text(&mut buf, "::ffff:1.2.3.4".parse().unwrap()), b"::ffff:1.2.3.4");
        assert_eq!(ip_text(&mut buf, "2001:db8::1".parse().unwrap()), b"2001:db8::1");
    }

    #[test]
    fn fields_joined_and_dropped() {
        let raw = selvedge::http::Request::builder()
            .uri("/s.php/x?q=1")
            .header("Host", "example.com:8080")
            .header("Cookie", "a=1")
            .header("X-Multi", "1")
            .header("Proxy", "http://evil")
            .header("X_Under", "u")
            .header("Cookie", "b=2")
            .header("x-multi", "2")
            .header("Authorization", "Basic eA==")
            .header("Content-Type", "text/plain")
            .body(bytes::Bytes::new())
            .unwrap();
        let req = Request::from(raw);
        let script = Script {
            path: "/srv/s.php".into(),
            interpreter: None,
            script_name: b"/s.php".to_vec(),
            path_info: b"/x".to_vec(),
        };
        let extra = [("APP".to_string(), OsString::from("1"))];
        let opts = Options { extra: &extra, path: None, pass_authorization: false };
        let mut vars: Vec<(OsString, OsString)> = Vec::new();
        meta_variables(&req, &script, Some(3), &opts, Path::new("/srv"), &mut vars);
        let get = |n: &str| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.to_str().unwrap().to_string());
        assert_eq!(vars[0].0, "APP");
        assert_eq!(get("HTTP_COOKIE").as_deref(), Some("a=1; b=2"));
        assert_eq!(get("HTTP_X_MULTI").as_deref(), Some("1, 2"));
        assert_eq!(get("HTTP_HOST").as_deref(), Some("example.com:8080"));
        assert_eq!((get("SERVER_NAME").as_deref(), get("SERVER_PORT").as_deref()), (Some("example.com"), Some("8080")));
        assert_eq!(get("PATH_TRANSLATED").as_deref(), Some("/srv/x"));
        assert_eq!((get("CONTENT_LENGTH").as_deref(), get("CONTENT_TYPE").as_deref()), (Some("3"), Some("text/plain")));
        for gone in ["HTTP_PROXY", "HTTP_X_UNDER", "HTTP_AUTHORIZATION", "HTTP_CONTENT_TYPE", "PATH"] {
            assert_eq!(get(gone), None, "{gone}");
        }
        assert_eq!(vars.iter().filter(|(k, _)| k == "HTTP_COOKIE").count(), 1);
    }
}
