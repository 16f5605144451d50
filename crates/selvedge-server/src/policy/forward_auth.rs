//! `forward_auth`: each request is first asked about to an authentication service (nginx's
//! `auth_request`, Caddy's `forward_auth`), as a `GET` to its URL carrying the client's
//! fields (all of them but hop-by-hop ones, or those `headers` lists), `Host` as the client
//! sent it, `X-Forwarded-Method`, `X-Forwarded-Uri`, `X-Forwarded-For`/`-Proto`/`-Host`,
//! `Forwarded` and the request id. No body is sent.
//!
//! - A 2xx answer lets the request through: the fields `copy_headers` names are copied from
//!   the answer onto the request (a client's own fields of those names are always removed
//!   first, so it cannot claim to be someone the service did not say it is).
//! - 401 and 403, and redirects (3xx: a login page, as Authelia and oauth2-proxy answer
//!   browsers), go back to the client as the service sent them (status, fields, body).
//! - Anything else, or no answer within `timeout`, is 502.
//!
//! The service is reached through the reverse proxy's machinery ([`crate::upstream::proxy`]):
//! a pool of keep-alive connections per worker, its timeouts, TLS for `https://`. Answers
//! that let a request through may be cached (`cache`, off by default) for a time, keyed on
//! the values of `cache_key` fields (`Cookie` and `Authorization` by default), at most
//! `cache_max` entries; a denial is never cached.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use selvedge::http::{HeaderName, StatusCode};
use selvedge::{Request, Response};
use serde::Deserialize;

use crate::units::{Count, Dur, NonZeroDur};
use crate::upstream::proxy::{Proxy, ProxyConfig, ProxyContext, RawProxy};

/// A route's `forward_auth` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawForwardAuth {
    url: String,
    headers: Option<Vec<String>>,
    copy_headers: Option<Vec<String>>,
    timeout: Option<NonZeroDur>,
    cache: Option<Dur>,
    cache_key: Option<Vec<String>>,
    cache_max: Option<Count<1, 10_000_000>>,
}

/// A checked `forward_auth`.
#[derive(Debug, Clone)]
pub struct ForwardAuthConfig {
    /// The service as a proxy route (its `upstream` is the URL's scheme and authority).
    proxy: ProxyConfig,
    /// The URL's path and query: the target asked for.
    target: String,
    /// Request fields sent (lower case): `None`, all of them.
    headers: Option<Vec<HeaderName>>,
    /// Answer fields copied onto the request (lower case).
    copy: Vec<HeaderName>,
    /// Time for the answer: 5 s.
    timeout: Duration,
    /// How long an answer letting a request through is reused: not at all.
    cache: Duration,
    /// The fields a cached answer is keyed on: `cookie`, `authorization`.
    cache_key: Vec<HeaderName>,
    /// Cached answers at most: 10,000.
    cache_max: usize,
}

fn names(list: &[String], what: &str) -> Result<Vec<HeaderName>, String> {
    list.iter()
        .map(|n| {
            HeaderName::from_bytes(n.as_bytes()).map_err(|_| format!("forward_auth {what}: {n:?} is not a field name"))
        })
        .collect()
}

impl ForwardAuthConfig {
    /// Checks `raw`.
    ///
    /// # Errors
    /// A URL that is not `http://`, `https://` or `unix:`, a bad field name.
    pub fn from_raw(raw: &RawForwardAuth, ctx: &ProxyContext) -> Result<ForwardAuthConfig, String> {
        let (upstream, target) = match raw.url.split_once("://") {
            Some((scheme @ ("http" | "https"), rest)) => {
                let i = rest.find('/').unwrap_or(rest.len());
                (
                    format!("{scheme}://{}", &rest[..i]),
                    if i == rest.len() { "/".to_owned() } else { rest[i..].to_owned() },
                )
            }
            _ => match raw.url.strip_prefix("unix:") {
                // `unix:/run/auth.sock:/verify`: the socket, then the path asked for.
                Some(rest) => match rest.split_once(":/") {
                    Some((sock, path)) => (format!("unix:{sock}"), format!("/{path}")),
                    None => (raw.url.clone(), "/".to_owned()),
                },
                None => return Err(format!("forward_auth url {:?}: http://, https:// or unix:", raw.url)),
            },
        };
        if !target.bytes().all(|b| b.is_ascii_graphic()) || target.contains('#') {
            return Err(format!("forward_auth url {:?}: a path of visible ASCII", raw.url));
        }
        let raw_proxy = RawProxy { upstream: Some(upstream), ..RawProxy::default() };
        let mut proxy = ProxyConfig::from_raw(&raw_proxy, ctx).map_err(|e| format!("forward_auth url: {e}"))?;
        let timeout = raw.timeout.map_or(Duration::from_secs(5), NonZeroDur::get);
        proxy.connect_timeout = timeout;
        proxy.first_byte_timeout = timeout;
        proxy.idle_timeout = timeout;
        // The service's answers to one request each: never sent again elsewhere.
        proxy.pool.retries = 0;
        Ok(ForwardAuthConfig {
            proxy,
            target,
            headers: raw.headers.as_deref().map(|h| names(h, "headers")).transpose()?,
            copy: names(raw.copy_headers.as_deref().unwrap_or_default(), "copy_headers")?,
            timeout,
            cache: raw.cache.map_or(Duration::ZERO, Dur::get),
            cache_key: match &raw.cache_key {
                Some(k) => names(k, "cache_key")?,
                None => vec![selvedge::http::header::COOKIE, selvedge::http::header::AUTHORIZATION],
            },
            cache_max: raw.cache_max.map_or(10_000, Count::get_usize),
        })
    }
}

/// A cached answer: the fields to copy, and until when.
type Cached = (Instant, Vec<(HeaderName, Bytes)>);

/// The running check of a route.
#[derive(Debug)]
pub struct ForwardAuth {
    cfg: ForwardAuthConfig,
    proxy: Proxy,
    cache: Option<Mutex<HashMap<Vec<u8>, Cached>>>,
}

/// What the service said.
#[derive(Debug)]
pub enum Verdict {
    /// Go on (the request carries the copied fields).
    Pass,
    /// Answer this.
    Answer(Response),
}

impl ForwardAuth {
    /// The check of `cfg`.
    ///
    /// # Errors
    /// Never: the configuration was checked when loaded.
    pub fn new(cfg: &ForwardAuthConfig, key: &str) -> std::io::Result<ForwardAuth> {
        let proxy = Proxy::new(&cfg.proxy, "/", &format!("{key} forward_auth"))?;
        let cache = (!cfg.cache.is_zero()).then(|| Mutex::new(HashMap::new()));
        Ok(ForwardAuth { cfg: cfg.clone(), proxy, cache })
    }

    /// The cache key of `req`: the values of the `cache_key` fields, each ended by a NUL.
    fn key(&self, req: &Request) -> Vec<u8> {
        let mut k = Vec::new();
        for name in &self.cfg.cache_key {
            for (n, v) in req.header_bytes() {
                if n.eq_ignore_ascii_case(name.as_str().as_bytes()) {
                    k.extend_from_slice(v);
                    k.push(b'\n');
                }
            }
            k.push(0);
        }
        k
    }

    /// Asks the service about `req`; on a pass, `req` carries the copied fields.
    pub async fn check(&self, req: &mut Request) -> Verdict {
        let key = self.cache.as_ref().map(|_| self.key(req));
        if let (Some(c), Some(k)) = (&self.cache, &key) {
            let hit = c.lock().unwrap_or_else(|p| p.into_inner()).get(k).filter(|e| e.0 > Instant::now()).cloned();
            if let Some((_, fields)) = hit {
                return self.admit(req, &fields);
            }
        }
        let sub = self.subrequest(req);
        let res = match tokio::time::timeout(self.cfg.timeout, self.proxy.handle(sub)).await {
            Ok(res) => res,
            Err(_) => return Verdict::Answer(failed("timed out")),
        };
        let status = res.status();
        if status.is_success() {
            let fields: Vec<(HeaderName, Bytes)> = res
                .headers()
                .filter(|(n, _)| self.cfg.copy.contains(n))
                .map(|(n, v)| (n.clone(), Bytes::copy_from_slice(v.as_bytes())))
                .collect();
            if let (Some(c), Some(k)) = (&self.cache, key) {
                let mut map = c.lock().unwrap_or_else(|p| p.into_inner());
                if map.len() >= self.cfg.cache_max {
                    let now = Instant::now();
                    map.retain(|_, e| e.0 > now);
                }
                if map.len() < self.cfg.cache_max {
                    map.insert(k, (Instant::now() + self.cfg.cache, fields.clone()));
                }
            }
            return self.admit(req, &fields);
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) || status.is_redirection() {
            return Verdict::Answer(res);
        }
        Verdict::Answer(failed(&format!("answered {}", status.as_u16())))
    }

    /// The request to the service for `req`.
    fn subrequest(&self, req: &Request) -> Request {
        let mut b = selvedge::http::Request::builder().method("GET").uri(&self.cfg.target);
        for (n, v) in req.header_bytes() {
            let Ok(name) = HeaderName::from_bytes(n) else { continue };
            let sent = match &self.cfg.headers {
                None => name != "x-forwarded-method" && name != "x-forwarded-uri",
                Some(list) => list.contains(&name) || name == selvedge::http::header::HOST,
            };
            if sent {
                b = b.header(name, v);
            }
        }
        if req.authority().is_some() && req.header("host").is_none() {
            b = b.header(selvedge::http::header::HOST, req.authority().unwrap_or_default());
        }
        b = b.header("x-forwarded-method", req.method().as_str()).header("x-forwarded-uri", req.target());
        let mut sub = match b.body(Bytes::new()) {
            Ok(r) => Request::from(r),
            Err(_) => Request::default(),
        };
        sub.set_origin(req.peer().clone(), req.is_secure());
        sub
    }

    /// Puts the copied fields on `req` (and removes the client's of those names).
    fn admit(&self, req: &mut Request, fields: &[(HeaderName, Bytes)]) -> Verdict {
        if self.cfg.copy.is_empty() {
            return Verdict::Pass;
        }
        let add: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (n.as_str().as_bytes(), &v[..])).collect();
        let copy = &self.cfg.copy;
        let removed = |n: &[u8]| copy.iter().any(|c| n.eq_ignore_ascii_case(c.as_str().as_bytes()));
        match req.rewrite_headers(removed, &add) {
            Ok(()) => Verdict::Pass,
            Err(_) => Verdict::Answer(failed("sent a field that cannot be copied")),
        }
    }
}

fn failed(why: &str) -> Response {
    tracing::warn!("forward_auth: the authentication service {why}: answered 502");
    crate::policy::plain(StatusCode::BAD_GATEWAY)
}
