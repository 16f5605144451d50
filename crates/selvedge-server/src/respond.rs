//! `respond = { status, body, headers }`: a route answered by the server itself (health
//! checks, maintenance pages, a fixed `robots.txt`), its body and header values templates
//! ([`crate::lang::template`]). What placeholders bring goes into the body as it is when
//! the body is plain text (no `Content-Type` set, or a literal `text/plain`, here or in the
//! route's `headers`); with any other type it is HTML-escaped (`<` is `&#60;`), so no type
//! turns a reflected value into markup. A body expands to at most [`MAX_BODY`] bytes.

use std::collections::BTreeMap;

use bytes::Bytes;
use selvedge::http::{header, HeaderName, HeaderValue, StatusCode};
use selvedge::{Request, Response};
use serde::Deserialize;

use crate::lang::headers::{HeaderOps, RawHeaderOp};
use crate::lang::template::{Captures, Context, Template};

/// The largest `respond` body as written.
pub const MAX_BODY: usize = 1024 * 1024;

/// A route's `respond = { status = 503, body = "...", headers = { ... } }` as written (or
/// just a status: `respond = 204`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRespond {
    /// The status: 200.
    status: Option<u16>,
    /// The body (a template): empty.
    body: Option<String>,
    /// Response fields (templates): `Content-Type: text/plain; charset=utf-8` with a body.
    headers: Option<BTreeMap<String, String>>,
}

impl RawRespond {
    /// Reads `respond = 204` or `respond = { ... }`.
    ///
    /// # Errors
    /// Neither.
    pub fn from_value(v: &toml::Value) -> Result<RawRespond, String> {
        match v {
            toml::Value::Integer(n) => {
                Ok(RawRespond { status: Some(u16::try_from(*n).unwrap_or(0)), body: None, headers: None })
            }
            toml::Value::Table(_) => {
                RawRespond::deserialize(v.clone()).map_err(|e| format!("respond: {}", e.message()))
            }
            _ => Err("respond: a status (204) or a table ({ status = 503, body = \"...\", headers = { ... } })".into()),
        }
    }
}

/// A checked `respond`.
#[derive(Debug, Clone)]
pub struct RespondConfig {
    status: StatusCode,
    body: Template,
    headers: HeaderOps,
    /// The body, when it has no placeholders.
    fixed: Option<Bytes>,
    has_type: bool,
    /// How placeholders' bytes go into the body: escaped for HTML and XML types.
    cx: Context,
}

impl RespondConfig {
    /// Checks `raw`.
    ///
    /// # Errors
    /// A status outside 200..=599 (1xx are not final, and 101 is a protocol switch), a body
    /// over [`MAX_BODY`], a bad field or placeholder.
    /// `route_type`: the `Content-Type` the route's `headers` set, if they do (it is the
    /// one that goes out).
    pub fn from_raw(raw: &RawRespond, re: &dyn Captures, route_type: Option<&str>) -> Result<RespondConfig, String> {
        let (status, body, headers) = (raw.status, raw.body.as_deref(), raw.headers.as_ref());
        let status = status.unwrap_or(200);
        if !(200..=599).contains(&status) {
            return Err(format!("respond status {status}: 200 to 599"));
        }
        let body = body.unwrap_or("");
        if matches!(status, 204 | 304) && !body.is_empty() {
            return Err(format!("respond status {status} has no body"));
        }
        if body.len() > MAX_BODY {
            return Err(format!("respond body: at most {MAX_BODY} bytes"));
        }
        let body = Template::parse(body, re).map_err(|e| format!("respond body: {e}"))?;
        let ops: BTreeMap<String, RawHeaderOp> =
            headers.into_iter().flatten().map(|(k, v)| (k.clone(), RawHeaderOp::Value(v.clone()))).collect();
        if let Some(k) = ops.keys().find(|k| k.starts_with(['+', '-'])) {
            return Err(format!("respond headers: {k:?}: fields are set here (\"Name\" = \"value\")"));
        }
        let headers = HeaderOps::from_raw(&ops, false, re).map_err(|e| format!("respond headers: {e}"))?;
        // What placeholders bring is escaped unless the body goes out as plain text: the
        // default type, or a `text/plain` written as such (a type from a placeholder could
        // be anything).
        let own_type = ops.iter().find(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| match v {
            RawHeaderOp::Value(v) if !v.contains('{') => v.to_ascii_lowercase(),
            _ => String::new(),
        });
        let has_type = own_type.is_some();
        let effective = route_type.map(str::to_ascii_lowercase).or(own_type);
        let plain = effective.as_deref().is_none_or(|t| t.starts_with("text/plain"));
        let cx = if plain { Context::Body } else { Context::Html };
        let fixed = body.literal().map(|b| Bytes::copy_from_slice(b.as_bytes()));
        let status = StatusCode::from_u16(status).expect("checked");
        Ok(RespondConfig { status, body, headers, fixed, has_type, cx })
    }

    /// The answer to `req`.
    pub fn respond(&self, req: &Request) -> Response {
        let body = match &self.fixed {
            Some(b) => b.clone(),
            None => {
                let mut out = Vec::new();
                let lit = &mut |s: &str, o: &mut Vec<u8>| o.extend_from_slice(s.as_bytes());
                self.body.expand_up_to(req, self.cx, None, &mut out, lit, MAX_BODY);
                Bytes::from(out)
            }
        };
        let empty = body.is_empty();
        let mut res = Response::bytes(self.status, body);
        if !empty && !self.has_type {
            res = res.header(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        }
        if !self.headers.is_empty() {
            let values: Vec<(HeaderName, HeaderValue)> = self.headers.values(req, None);
            res.headers_mut().extend(values);
        }
        res
    }
}
