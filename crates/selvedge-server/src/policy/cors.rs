//! `cors`: cross-origin requests (the Fetch standard's CORS protocol).
//!
//! - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered
//!   here, before authentication (browsers send preflights without credentials): 204 with
//!   `Access-Control-Allow-Origin`, `-Methods`, `-Headers`, `-Max-Age` (and
//!   `-Credentials`) when the origin, the method and every requested header are allowed;
//!   otherwise 403 with none of them, so the browser blocks the real request.
//! - Any other request with an allowed `Origin` gets `Access-Control-Allow-Origin` (and
//!   `-Credentials`, `-Expose-Headers`) on its response, whatever its status.
//! - With a list of origins, every response carries `Vary: Origin` (it depends on it);
//!   with `origins = ["*"]` the answer is `*` for everyone and does not vary.
//! - Credentials go only with explicit origins: `credentials = true` with `"*"` is refused
//!   when the configuration is read (browsers ignore `*` with credentials anyway).
//! - Methods a browser may send without asking (GET, HEAD, POST) and request headers it
//!   may send without asking are always allowed; others must be listed (`"*"` in
//!   `headers` allows any, without credentials only).

use std::time::Duration;

use selvedge::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use selvedge::{Request, Response};
use serde::Deserialize;

use crate::units::Dur;

/// `cors = { origins, methods, headers, expose, credentials, max_age }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCors {
    origins: Vec<String>,
    methods: Option<Vec<String>>,
    headers: Option<Vec<String>>,
    expose: Option<Vec<String>>,
    credentials: Option<bool>,
    max_age: Option<Dur>,
}

/// A route's CORS settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsConfig {
    /// Allowed origins (`scheme://host[:port]`, lower case), or empty for `*`.
    pub origins: Vec<String>,
    /// Methods allowed beyond GET, HEAD and POST (upper case as written).
    pub methods: Vec<String>,
    /// Request headers allowed (lower case); `None`: any (`"*"`).
    pub headers: Option<Vec<String>>,
    /// Response headers exposed to scripts.
    pub expose: Vec<String>,
    /// Whether cookies and HTTP authentication may go with requests.
    pub credentials: bool,
    /// How long a browser may keep a preflight's answer (`None`: not said).
    pub max_age: Option<Duration>,
}

impl CorsConfig {
    /// The settings for these origins and every default (`serve --cors`).
    ///
    /// # Errors
    /// As [`CorsConfig::from_raw`].
    pub fn for_origins(origins: &[String]) -> Result<CorsConfig, String> {
        CorsConfig::from_raw(&RawCors {
            origins: origins.to_vec(),
            methods: None,
            headers: None,
            expose: None,
            credentials: None,
            max_age: None,
        })
    }

    /// Checks the table as written.
    ///
    /// # Errors
    /// An origin that is not `scheme://host[:port]`, `*` with credentials, a method or
    /// header name that is not a token.
    pub fn from_raw(r: &RawCors) -> Result<CorsConfig, String> {
        let any = r.origins.iter().any(|o| o == "*");
        let credentials = r.credentials.unwrap_or(false);
        if any && r.origins.len() > 1 {
            return Err("cors: origins is [\"*\"] or a list of origins, not both".into());
        }
        if r.origins.is_empty() {
            return Err("cors: origins is empty (list the allowed origins, or [\"*\"])".into());
        }
        if any && credentials {
            return Err("cors: credentials = true needs explicit origins, never \"*\"".into());
        }
        let mut origins = Vec::new();
        if !any {
            for o in &r.origins {
                let lower = o.to_ascii_lowercase();
                let ok = (lower.starts_with("https://") || lower.starts_with("http://") || lower == "null")
                    && !lower.ends_with('/')
                    && lower.bytes().all(|b| b.is_ascii_graphic())
                    && lower.split("://").nth(1).is_none_or(|h| !h.is_empty() && !h.contains('/'));
                if !ok {
                    return Err(format!(
                        "cors: origin {o:?}: write scheme://host[:port], no path (\"https://app.example\")"
                    ));
                }
                origins.push(lower);
            }
        }
        let token = |s: &str| HeaderName::from_bytes(s.as_bytes()).is_ok();
        let mut methods = Vec::new();
        for m in r.methods.as_deref().unwrap_or(&["GET".into(), "HEAD".into(), "POST".into()]) {
            if Method::from_bytes(m.as_bytes()).is_err() || m == "*" {
                return Err(format!("cors: method {m:?} is not a method name"));
            }
            methods.push(m.clone());
        }
        let headers = match &r.headers {
            Some(h) if h.iter().any(|h| h == "*") => {
                if credentials {
                    return Err("cors: headers = [\"*\"] cannot go with credentials = true: list them".into());
                }
                None
            }
            h => {
                let h = h.clone().unwrap_or_default();
                if let Some(bad) = h.iter().find(|h| !token(h)) {
                    return Err(format!("cors: header {bad:?} is not a header name"));
                }
                Some(h.iter().map(|h| h.to_ascii_lowercase()).collect())
            }
        };
        let expose = r.expose.clone().unwrap_or_default();
        if let Some(bad) = expose.iter().find(|h| !token(h)) {
            return Err(format!("cors: expose {bad:?} is not a header name"));
        }
        Ok(CorsConfig { origins, methods, headers, expose, credentials, max_age: r.max_age.map(Dur::get) })
    }
}

/// A route's CORS answers, rendered once.
#[derive(Debug)]
pub struct Cors {
    cfg: CorsConfig,
    /// Each allowed origin as a header value, made once (answering one is a clone).
    origin_values: Vec<HeaderValue>,
    /// `Access-Control-Allow-Methods` of preflights.
    methods: HeaderValue,
    /// `Access-Control-Allow-Headers` of preflights (`None`: echo what is asked).
    headers: Option<HeaderValue>,
    expose: Option<HeaderValue>,
    max_age: Option<HeaderValue>,
}

/// What [`Cors::check`] found.
#[derive(Debug)]
pub enum CorsCheck {
    /// Not a preflight: the value for `Access-Control-Allow-Origin` (if the origin is
    /// allowed) to add to the response.
    Request(Option<HeaderValue>),
    /// A preflight, answered.
    Preflight(Response),
}

static VARY_ORIGIN: HeaderValue = HeaderValue::from_static("Origin");
static VARY_PREFLIGHT: HeaderValue =
    HeaderValue::from_static("Origin, Access-Control-Request-Method, Access-Control-Request-Headers");

impl Cors {
    /// Renders the fixed values of `cfg`.
    pub fn new(cfg: &CorsConfig) -> Cors {
        let join = |v: &[String]| HeaderValue::try_from(v.join(", ")).expect("tokens");
        Cors {
            origin_values: cfg
                .origins
                .iter()
                .map(|o| HeaderValue::try_from(o.as_str()).expect("checked origin"))
                .collect(),
            methods: join(&cfg.methods),
            headers: cfg.headers.as_ref().map(|h| join(h)),
            expose: (!cfg.expose.is_empty()).then(|| join(&cfg.expose)),
            max_age: cfg.max_age.map(|d| HeaderValue::from(d.as_secs())),
            cfg: cfg.clone(),
        }
    }

    /// The `Vary` field every response of the route carries (`None` with `*`).
    pub fn vary(&self) -> Option<&'static HeaderValue> {
        (!self.cfg.origins.is_empty()).then_some(&VARY_ORIGIN)
    }

    /// The allowed `Access-Control-Allow-Origin` value for `origin`, if any.
    fn allow(&self, origin: &[u8]) -> Option<HeaderValue> {
        if self.cfg.origins.is_empty() {
            return Some(HeaderValue::from_static("*"));
        }
        // Browsers send the serialized origin, lower case.
        self.origin_values.iter().find(|o| o.as_bytes() == origin).cloned()
    }

    /// Looks at `req`: answers a preflight, or says what the response gets.
    pub fn check(&self, req: &Request) -> CorsCheck {
        let mut origin = None;
        let mut acrm = None;
        let mut acrh = None;
        for (name, value) in req.header_bytes() {
            let slot = match name.len() {
                6 if name.eq_ignore_ascii_case(b"origin") => &mut origin,
                29 if name.eq_ignore_ascii_case(b"access-control-request-method") => &mut acrm,
                30 if name.eq_ignore_ascii_case(b"access-control-request-headers") => &mut acrh,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        let Some(origin) = origin else { return CorsCheck::Request(None) };
        let allowed = self.allow(origin);
        let (true, Some(method)) = (req.method() == Method::OPTIONS, acrm) else { return CorsCheck::Request(allowed) };
        // A preflight.
        let refuse = || {
            Response::bytes(StatusCode::FORBIDDEN, "403 Forbidden (CORS preflight refused)\n")
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .header(header::VARY, VARY_PREFLIGHT.clone())
        };
        let Some(allow_origin) = allowed else { return CorsCheck::Preflight(refuse()) };
        let simple = matches!(method, b"GET" | b"HEAD" | b"POST");
        if !simple && !self.cfg.methods.iter().any(|m| m.as_bytes() == method) {
            return CorsCheck::Preflight(refuse());
        }
        let asked: Vec<&[u8]> = acrh
            .map(|h| h.split(|&b| b == b',').map(<[u8]>::trim_ascii).filter(|h| !h.is_empty()).collect())
            .unwrap_or_default();
        let allow_headers = match (&self.cfg.headers, &self.headers) {
            (None, _) => acrh.and_then(|h| HeaderValue::from_bytes(h).ok()),
            (Some(list), v) => {
                let ok =
                    asked.iter().all(|a| safelisted(a) || list.iter().any(|l| l.as_bytes().eq_ignore_ascii_case(a)));
                if !ok {
                    return CorsCheck::Preflight(refuse());
                }
                v.clone()
            }
        };
        let mut res = Response::new(StatusCode::NO_CONTENT)
            .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin)
            .header(header::ACCESS_CONTROL_ALLOW_METHODS, self.methods.clone());
        if let Some(h) = allow_headers.filter(|h| !h.is_empty()) {
            res = res.header(header::ACCESS_CONTROL_ALLOW_HEADERS, h);
        }
        if self.cfg.credentials {
            res = res.header(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
        }
        if let Some(a) = &self.max_age {
            res = res.header(header::ACCESS_CONTROL_MAX_AGE, a.clone());
        }
        CorsCheck::Preflight(res.header(header::VARY, VARY_PREFLIGHT.clone()))
    }

    /// Adds the CORS fields of an allowed origin's response. `own`: the response is the
    /// server's own (a static file's), with no CORS fields of an app to replace, so the
    /// fields are appended after its shared ones without copying those.
    pub fn finish(&self, mut res: Response, allow_origin: HeaderValue, own: bool) -> Response {
        if !own {
            res.headers_mut().retain(|(n, _)| {
                n != header::ACCESS_CONTROL_ALLOW_ORIGIN
                    && n != header::ACCESS_CONTROL_ALLOW_CREDENTIALS
                    && n != header::ACCESS_CONTROL_EXPOSE_HEADERS
            });
        }
        res = res.header(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow_origin);
        if self.cfg.credentials {
            res = res.header(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, HeaderValue::from_static("true"));
        }
        if let Some(e) = &self.expose {
            res = res.header(header::ACCESS_CONTROL_EXPOSE_HEADERS, e.clone());
        }
        res
    }
}

/// Request headers a browser sends without a preflight listing them (CORS-safelisted
/// names; their values are checked by the browser, which lists them when unsafe).
fn safelisted(name: &[u8]) -> bool {
    ["accept", "accept-language", "content-language", "content-type", "range"]
        .iter()
        .any(|s| s.as_bytes().eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn cfg(text: &str) -> Result<CorsConfig, String> {
        let raw: RawCors = toml::from_str(text).map_err(|e| e.to_string())?;
        CorsConfig::from_raw(&raw)
    }

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = selvedge::http::Request::builder().method(method).uri("/api");
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(Bytes::new()).unwrap().into()
    }

    #[test]
    fn config_rules() {
        assert!(cfg("origins = [\"*\"]\ncredentials = true").unwrap_err().contains("never"));
        assert!(cfg("origins = [\"https://a.example/\"]").is_err());
        assert!(cfg("origins = [\"a.example\"]").is_err());
        assert!(cfg("origins = []").is_err());
        assert!(cfg("origins = [\"https://a.example\"]\nheaders = [\"*\"]\ncredentials = true").is_err());
        let c = cfg("origins = [\"https://App.example:8443\"]\nmax_age = \"10m\"").unwrap();
        assert_eq!(c.origins, ["https://app.example:8443"]);
        assert_eq!(c.max_age, Some(Duration::from_secs(600)));
    }

    #[test]
    fn preflights_and_requests() {
        let c = Cors::new(
            &cfg("origins = [\"https://app.example\"]\nmethods = [\"GET\", \"PUT\"]\nheaders = [\"X-Token\"]\n\
                  credentials = true\nmax_age = \"1m\"")
            .unwrap(),
        );
        let pre = |origin: &str, method: &str, hdrs: &str| {
            let mut h = vec![("origin", origin), ("access-control-request-method", method)];
            if !hdrs.is_empty() {
                h.push(("access-control-request-headers", hdrs));
            }
            match c.check(&req("OPTIONS", &h)) {
                CorsCheck::Preflight(r) => r,
                other => panic!("not a preflight: {other:?}"),
            }
        };
        let ok = pre("https://app.example", "PUT", "x-token, content-type");
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        let get = |r: &Response, n: HeaderName| r.header_value(&n).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(get(&ok, header::ACCESS_CONTROL_ALLOW_ORIGIN).as_deref(), Some("https://app.example"));
        assert_eq!(get(&ok, header::ACCESS_CONTROL_ALLOW_CREDENTIALS).as_deref(), Some("true"));
        assert_eq!(get(&ok, header::ACCESS_CONTROL_MAX_AGE).as_deref(), Some("60"));
        for bad in [
            pre("https://evil.example", "PUT", ""),
            pre("https://app.example", "DELETE", ""),
            pre("https://app.example", "PUT", "x-other"),
        ] {
            assert_eq!(bad.status(), StatusCode::FORBIDDEN);
            assert!(get(&bad, header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        }
        assert!(matches!(c.check(&req("GET", &[("origin", "https://app.example")])), CorsCheck::Request(Some(_))));
        assert!(matches!(c.check(&req("GET", &[("origin", "https://evil.example")])), CorsCheck::Request(None)));
        assert!(matches!(c.check(&req("OPTIONS", &[("origin", "https://app.example")])), CorsCheck::Request(Some(_))));
        assert!(c.vary().is_some());
    }
}
