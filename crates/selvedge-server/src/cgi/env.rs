//! The script's environment: the meta-variables of RFC 3875 §4.1, plus the usual
//! extensions (`REQUEST_URI`, `REQUEST_SCHEME`, `HTTPS`, `DOCUMENT_ROOT`,
//! `SCRIPT_FILENAME`, `REDIRECT_STATUS`). Nothing else of the server's environment reaches
//! the script but `PATH` and the names the route's `env` lists.
//!
//! Request headers become `HTTP_*` (upper case, `-` → `_`, repeated fields joined by `, `,
//! cookies by `; `), except:
//! - `Proxy`: it would become `HTTP_PROXY`, which many HTTP clients read as their proxy
//!   setting (the "httpoxy" hole, CVE-2016-5385 and friends);
//! - names containing `_`: `X_Forwarded_For` would be indistinguishable from
//!   `X-Forwarded-For` (Apache 2.4 and nginx drop them too);
//! - `Content-Length` / `Content-Type`, which are `CONTENT_LENGTH` / `CONTENT_TYPE`;
//! - `Authorization` and `Proxy-Authorization` (RFC 3875 §4.1.18: credentials are not
//!   passed), unless the route sets `pass_authorization`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use selvedge::http::Version;
use selvedge::{PeerAddr, Request};

use super::script::Script;
use super::CgiConfig;

/// `SERVER_SOFTWARE`.
const SOFTWARE: &str = concat!("selvedge/", env!("CARGO_PKG_VERSION"));

/// The environment for running `script` for `req`. `content_length`: the body's length
/// (`None`: no body). `root`: the route's canonical directory.
pub fn meta_variables(
    req: &Request,
    script: &Script,
    content_length: Option<u64>,
    cfg: &CgiConfig,
    root: &Path,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::with_capacity(32 + cfg.env.len());
    let mut set = |name: &str, value: OsString| out.push((name.into(), value));
    for (n, v) in &cfg.env {
        set(n, v.clone());
    }
    set("PATH", cfg.path.clone());
    set("GATEWAY_INTERFACE", "CGI/1.1".into());
    set("SERVER_SOFTWARE", SOFTWARE.into());
    let protocol = match req.version() {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    };
    set("SERVER_PROTOCOL", protocol.into());
    let secure = req.is_secure();
    let (name, port) = server_name_port(req.authority().unwrap_or(""), secure);
    set("SERVER_NAME", name.into());
    set("SERVER_PORT", port.into());
    set("REQUEST_SCHEME", if secure { "https" } else { "http" }.into());
    if secure {
        set("HTTPS", "on".into());
    }
    set("REQUEST_METHOD", req.method().as_str().into());
    set("REQUEST_URI", req.target().into());
    set("QUERY_STRING", req.query().unwrap_or("").into());
    set("SCRIPT_NAME", OsString::from_vec(script.script_name.clone()));
    set("SCRIPT_FILENAME", script.path.clone().into());
    set("DOCUMENT_ROOT", root.into());
    if !script.path_info.is_empty() {
        set("PATH_INFO", OsString::from_vec(script.path_info.clone()));
        let mut translated = root.as_os_str().to_owned().into_vec();
        translated.extend_from_slice(&script.path_info);
        set("PATH_TRANSLATED", OsString::from_vec(translated));
    }
    match req.peer() {
        PeerAddr::Tcp(a) => {
            set("REMOTE_ADDR", a.ip().to_string().into());
            set("REMOTE_PORT", a.port().to_string().into());
        }
        PeerAddr::Unix => set("REMOTE_ADDR", "".into()),
    }
    if let Some(n) = content_length {
        set("CONTENT_LENGTH", n.to_string().into());
    }
    if let Some(t) = req.header("content-type").filter(|v| !v.contains(&0)) {
        set("CONTENT_TYPE", OsString::from_vec(t.to_vec()));
    }
    set("REDIRECT_STATUS", "200".into());

    let mut http: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, value) in req.headers() {
        let dropped = ["proxy", "content-length", "content-type", "proxy-authorization"]
            .iter()
            .any(|d| name.eq_ignore_ascii_case(d))
            || (!cfg.pass_authorization && name.eq_ignore_ascii_case("authorization"))
            || name.contains('_')
            || name.starts_with(':')
            || value.contains(&0);
        if dropped {
            continue;
        }
        let var: String =
            "HTTP_".chars().chain(name.chars().map(|c| if c == '-' { '_' } else { c.to_ascii_uppercase() })).collect();
        match http.iter_mut().find(|(n, _)| *n == var) {
            Some((n, v)) => {
                v.extend_from_slice(if n == "HTTP_COOKIE" { b"; " } else { b", " });
                v.extend_from_slice(value);
            }
            None => http.push((var, value.to_vec())),
        }
    }
    if !http.iter().any(|(n, _)| n == "HTTP_HOST") {
        if let Some(a) = req.authority() {
            http.push(("HTTP_HOST".into(), a.as_bytes().to_vec()));
        }
    }
    out.extend(http.into_iter().map(|(n, v)| (n.into(), OsString::from_vec(v))));
    out
}

/// `SERVER_NAME` and `SERVER_PORT` from the request's authority (the `Host` header): the
/// name the client used, and its port or the scheme's default.
fn server_name_port(authority: &str, secure: bool) -> (&str, String) {
    let default = if secure { "443" } else { "80" };
    let split = if authority.starts_with('[') { authority.find("]:").map(|i| i + 1) } else { authority.rfind(':') };
    let (name, port) = match split {
        Some(i) => (&authority[..i], &authority[i + 1..]),
        None => (authority, ""),
    };
    let port = if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) { port } else { default };
    (if name.is_empty() { "localhost" } else { name }, port.to_string())
}

#[cfg(test)]
mod tests {
    use super::server_name_port;

    #[test]
    fn server_names() {
        assert_eq!(server_name_port("example.com:8080", false), ("example.com", "8080".into()));
        assert_eq!(server_name_port("example.com", true), ("example.com", "443".into()));
        assert_eq!(server_name_port("[::1]:81", false), ("[::1]", "81".into()));
        assert_eq!(server_name_port("[::1]", false), ("[::1]", "80".into()));
        assert_eq!(server_name_port("", false), ("localhost", "80".into()));
    }
}
