//! Header rewriting: a proxy route's `header_up` (the request sent upstream) and
//! `header_down` (the response relayed back), and a `respond` route's `headers`.
//!
//! Written as a table of operations, applied in this order: a field of the client's (or the
//! upstream's) that an operation names is deleted (`"-Name" = ""`; `"-X-Debug-*" = ""`
//! deletes every field whose name starts with `X-Debug-`), replaced (`"Name" = "value"`)
//! or rewritten (`"Name" = { search = "regex", replace = "$1" }`, every match in each
//! value); `"+Name" = "value"` adds a field beside the ones there are. Values are templates
//! ([`super::template`]). Fields that frame the message (`Content-Length`,
//! `Transfer-Encoding`, `Connection`, `Upgrade`, `TE`, `Trailer`, `Keep-Alive`) cannot be
//! touched. `header_up` may set `Host` (the same as the proxy's `host`, with placeholders)
//! and the forwarding fields (`X-Forwarded-For`, `-Proto`, `-Host`, `Forwarded`,
//! `X-Real-IP`, `X-Request-Id`): selvedge then writes none of its own for that field.

use std::collections::BTreeMap;

use regex::bytes::Regex;
use selvedge::http::{HeaderName, HeaderValue};
use selvedge::Request;
use serde::Deserialize;

use super::template::{Captures, Context, Template};

/// One operation as written: a value, or a search and replace.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawHeaderOp {
    /// `"Name" = "value"`, `"+Name" = "value"`, `"-Name" = ""`.
    Value(String),
    /// `"Name" = { search = "regex", replace = "text" }`.
    Replace {
        /// The expression.
        search: String,
        /// What each match becomes (`$1`, `${name}`).
        replace: String,
    },
}

/// `header_up` / `header_down` as written.
pub type RawHeaderOps = BTreeMap<String, RawHeaderOp>;

#[derive(Debug, Clone)]
enum Op {
    Set(HeaderName, Template),
    Add(HeaderName, Template),
    Delete(HeaderName),
    DeletePrefix(String),
    Replace(HeaderName, Regex, String),
}

/// Fields selvedge writes on the way upstream that an operation may take over.
const HOP_FIELDS: [&str; 6] =
    ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded", "x-real-ip", "x-request-id"];

/// Fields that frame the message.
const FRAMING: [&str; 7] =
    ["content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive"];

/// Checked header operations.
#[derive(Debug, Clone, Default)]
pub struct HeaderOps {
    ops: Vec<Op>,
    /// `Host` set (`header_up` only).
    host: Option<Template>,
    /// Which of [`HOP_FIELDS`] an operation sets or deletes (bit `i`).
    hop: u8,
}

/// What becomes of one field of the message.
#[derive(Debug)]
pub enum Field<'a> {
    /// Copied as it is.
    Keep,
    /// Left out (deleted, or replaced by a set value).
    Drop,
    /// Its value rewritten.
    Replace(&'a Regex, &'a str),
}

impl HeaderOps {
    /// Reads a table; `up`: it is `header_up` (which may set `Host`).
    ///
    /// # Errors
    /// A bad name, value, expression or placeholder; a framing field; `Host` where not
    /// allowed or deleted.
    pub fn from_raw(raw: &RawHeaderOps, up: bool, re: &dyn Captures) -> Result<HeaderOps, String> {
        let mut out = HeaderOps::default();
        for (key, op) in raw {
            let (sign, name) = match key.as_bytes().first() {
                Some(b'+') => (Some('+'), &key[1..]),
                Some(b'-') => (Some('-'), &key[1..]),
                _ => (None, key.as_str()),
            };
            let (prefix, bare) = match (sign, name.strip_suffix('*')) {
                (Some('-'), Some(p)) => (true, p),
                _ => (false, name),
            };
            let hn = HeaderName::from_bytes(bare.as_bytes()).map_err(|_| format!("{key:?} is not a field name"))?;
            if FRAMING.contains(&hn.as_str()) && !prefix {
                return Err(format!("{key}: {hn} frames the message and is written by the server"));
            }
            if hn == selvedge::http::header::HOST && (!up || sign.is_some() || prefix) {
                return Err(format!("{key}: Host can only be set, and only in header_up"));
            }
            if let Some(i) = HOP_FIELDS.iter().position(|f| *f == hn.as_str()) {
                out.hop |= 1 << i;
            }
            let tmpl = |v: &str| {
                let t = Template::parse(v, re).map_err(|e| format!("{key}: {e}"))?;
                if let Some(l) = t.literal() {
                    HeaderValue::from_str(l).map_err(|_| format!("{key}: the value is not valid in a header"))?;
                }
                Ok::<_, String>(t)
            };
            match (sign, op) {
                (Some('-'), RawHeaderOp::Value(v)) if v.is_empty() => match prefix {
                    true => {
                        let p = bare.to_ascii_lowercase();
                        // `-X-Forwarded-*` takes selvedge's own forwarding fields too.
                        for (i, f) in HOP_FIELDS.iter().enumerate() {
                            if f.starts_with(&p) {
                                out.hop |= 1 << i;
                            }
                        }
                        out.ops.push(Op::DeletePrefix(p))
                    }
                    false => out.ops.push(Op::Delete(hn)),
                },
                (Some('-'), _) => return Err(format!("{key}: deletes the field; its value must be \"\"")),
                (Some('+'), RawHeaderOp::Value(v)) => out.ops.push(Op::Add(hn, tmpl(v)?)),
                (None, RawHeaderOp::Value(v)) if hn == selvedge::http::header::HOST => out.host = Some(tmpl(v)?),
                (None, RawHeaderOp::Value(v)) => out.ops.push(Op::Set(hn, tmpl(v)?)),
                (None, RawHeaderOp::Replace { search, replace }) => {
                    let re = regex::bytes::RegexBuilder::new(search)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| format!("{key} search: {e}"))?;
                    if !replace.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
                        return Err(format!("{key} replace: visible ASCII and spaces"));
                    }
                    out.ops.push(Op::Replace(hn, re, replace.clone()));
                }
                _ => return Err(format!("{key}: \"+Name\" adds a value; a search and replace is \"Name\"")),
            }
        }
        Ok(out)
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.host.is_none()
    }

    /// `Host` as set, if it is.
    pub fn host(&self) -> Option<&Template> {
        self.host.as_ref()
    }

    /// Whether an operation takes over selvedge's own `field` (`x-forwarded-for`, `-proto`,
    /// `-host`, `forwarded`, `x-real-ip`, `x-request-id`).
    pub fn owns(&self, field: &str) -> bool {
        HOP_FIELDS.iter().position(|f| *f == field).is_some_and(|i| self.hop & (1 << i) != 0)
    }

    /// What becomes of a field named `name` (any case).
    pub fn field(&self, name: &[u8]) -> Field<'_> {
        let mut out = Field::Keep;
        for op in &self.ops {
            match op {
                Op::Set(n, _) | Op::Delete(n) if name.eq_ignore_ascii_case(n.as_str().as_bytes()) => {
                    return Field::Drop
                }
                Op::DeletePrefix(p) if name.len() >= p.len() && name[..p.len()].eq_ignore_ascii_case(p.as_bytes()) => {
                    return Field::Drop
                }
                Op::Replace(n, re, with) if name.eq_ignore_ascii_case(n.as_str().as_bytes()) => {
                    out = Field::Replace(re, with)
                }
                _ => {}
            }
        }
        out
    }

    /// Appends `name: value\r\n` for every set and added field, expanded for `req`.
    pub fn write_added(&self, req: &Request, request_id: Option<&str>, dst: &mut Vec<u8>) {
        for op in &self.ops {
            if let Op::Set(n, t) | Op::Add(n, t) = op {
                let start = dst.len();
                dst.extend_from_slice(n.as_str().as_bytes());
                dst.extend_from_slice(b": ");
                let at = dst.len();
                t.expand(req, Context::Header, request_id, dst, &mut |s, o| o.extend_from_slice(s.as_bytes()));
                if dst.len() == at {
                    // An empty value: no field (as Caddy and nginx leave it out).
                    dst.truncate(start);
                    continue;
                }
                dst.extend_from_slice(b"\r\n");
            }
        }
    }

    /// The set and added fields for `req`, as values (for a response).
    pub fn values(&self, req: &Request, request_id: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for op in &self.ops {
            if let Op::Set(n, t) | Op::Add(n, t) = op {
                buf.clear();
                t.expand(req, Context::Header, request_id, &mut buf, &mut |s, o| o.extend_from_slice(s.as_bytes()));
                if let Ok(v) = HeaderValue::from_bytes(&buf) {
                    if !buf.is_empty() {
                        out.push((n.clone(), v));
                    }
                }
            }
        }
        out
    }

    /// Applies the operations to a response's fields; `values`: [`HeaderOps::values`] of
    /// its request.
    pub fn apply(&self, fields: &mut Vec<(HeaderName, HeaderValue)>, values: Vec<(HeaderName, HeaderValue)>) {
        fields.retain_mut(|(n, v)| match self.field(n.as_str().as_bytes()) {
            Field::Keep => true,
            Field::Drop => false,
            Field::Replace(re, with) => {
                let new = re.replace_all(v.as_bytes(), with.as_bytes());
                match HeaderValue::from_bytes(&new) {
                    Ok(nv) => {
                        *v = nv;
                        true
                    }
                    Err(_) => false,
                }
            }
        });
        fields.extend(values);
    }
}
