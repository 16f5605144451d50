//! `forward_auth`: each request is first asked about to an authentication service (nginx's
//! `auth_request`, Caddy's `forward_auth`), as a `GET` to its URL carrying the client's
//! fields (all of them but hop-by-hop ones, or those `headers` lists), `Host` as the client
//! sent it, `X-Forwarded-Method`, `X-Forwarded-Uri` (the normalized path and query),
//! `X-Original-Method`, `X-Original-URL` (scheme, authority, path and query),
//! `X-Forwarded-For`/`-Proto`/`-Host`, `Forwarded` and the request id. A client's own
//! `X-Original-*` and `X-Forwarded-*` fields never reach the service (the forwarding
//! fields are this hop's, or a trusted proxy's: [`crate::client`]). No body is sent.
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
//! what the service decided on: the method, host, path and query, the client's address and
//! the values of `cache_key` fields (`Cookie` and `Authorization` by default), hashed (128
//! bits, keyed per process); at most `cache_max` entries, each holding at most
//! [`MAX_CACHED`] bytes of copied fields (a larger answer is not cached); a denial is never
//! cached.

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

/// The most bytes of copied fields a cached answer holds: a cache holds at most
/// `cache_max` times this (40 MB at the default 10,000 entries).
pub const MAX_CACHED: usize = 4096;

/// A cached answer: the fields to copy, and until when.
type Cached = (Instant, Vec<(HeaderName, Bytes)>);

/// Cached answers, and when expired ones were last swept out.
#[derive(Debug)]
struct Cache {
    map: HashMap<u128, Cached>,
    swept: Instant,
}

/// The running check of a route.
#[derive(Debug)]
pub struct ForwardAuth {
    cfg: ForwardAuthConfig,
    proxy: Proxy,
    cache: Option<Mutex<Cache>>,
    /// The keys of the cache's hash (random per process).
    hash: [std::collections::hash_map::RandomState; 2],
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
        let cache = (!cfg.cache.is_zero()).then(|| Mutex::new(Cache { map: HashMap::new(), swept: Instant::now() }));
        let hash = [Default::default(), Default::default()];
        Ok(ForwardAuth { cfg: cfg.clone(), proxy, cache, hash })
    }

    /// The cache key of `req`: what the service decides on (method, host, target, client
    /// address, the `cache_key` fields), hashed.
    fn key(&self, req: &Request) -> u128 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let [a, b] = &self.hash;
        let (mut ha, mut hb) = (a.build_hasher(), b.build_hasher());
        let mut put = |bytes: &[u8]| {
            bytes.hash(&mut ha);
            bytes.hash(&mut hb);
        };
        put(req.method().as_str().to_ascii_uppercase().as_bytes());
        put(if req.is_secure() { b"https" } else { b"http" });
        put(req.authority_bytes().unwrap_or_default());
        put(req.path_bytes());
        put(req.query_bytes().unwrap_or(b"\xff"));
        let mut ip = [0u8; 64];
        put(crate::client::client_ip(req).map_or(&b""[..], |a| crate::client::ip_text(&mut ip, a)));
        for name in &self.cfg.cache_key {
            for (n, v) in req.header_bytes() {
                if n.eq_ignore_ascii_case(name.as_str().as_bytes()) {
                    put(v);
                }
            }
            put(b"\0");
        }
        u128::from(ha.finish()) << 64 | u128::from(hb.finish())
    }

    /// Asks the service about `req`; on a pass, `req` carries the copied fields.
    pub async fn check(&self, req: &mut Request) -> Verdict {
        let key = self.cache.as_ref().map(|_| self.key(req));
        if let (Some(c), Some(k)) = (&self.cache, &key) {
            let hit = c.lock().unwrap_or_else(|p| p.into_inner()).map.get(k).filter(|e| e.0 > Instant::now()).cloned();
            if let Some((_, fields)) = hit {
                return self.admit(req, &fields);
            }
        }
        let Some(sub) = self.subrequest(req) else {
            return Verdict::Answer(crate::policy::plain(StatusCode::BAD_REQUEST));
        };
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
            let size: usize = fields.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
            if let (Some(c), Some(k), true) = (&self.cache, key, size <= MAX_CACHED) {
                let mut cache = c.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                if cache.map.len() >= self.cfg.cache_max {
                    // Expired answers go at most once a second; when none has, one answer
                    // makes room (the map's first: no order is kept, none is needed).
                    if now.duration_since(cache.swept) >= Duration::from_secs(1) {
                        cache.map.retain(|_, e| e.0 > now);
                        cache.swept = now;
                    }
                    if cache.map.len() >= self.cfg.cache_max {
                        if let Some(&first) = cache.map.keys().next() {
                            cache.map.remove(&first);
                        }
                    }
                }
                cache.map.insert(k, (now + self.cfg.cache, fields.clone()));
            }
            return self.admit(req, &fields);
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) || status.is_redirection() {
            return Verdict::Answer(res);
        }
        Verdict::Answer(failed(&format!("answered {}", status.as_u16())))
    }

    /// The request to the service for `req`, or `None` when a field cannot be passed on
    /// as it is (a control byte an HTTP/2 or HTTP/3 client sent): the service is never
    /// asked about less than the request.
    fn subrequest(&self, req: &Request) -> Option<Request> {
        let mut b = selvedge::http::Request::builder().method("GET").uri(&self.cfg.target);
        // Hop-by-hop fields, and those a client's `Connection` names, are this hop's: they
        // are neither sent nor allowed to take the server's own fields off the request.
        let tokens: Vec<Vec<u8>> = req
            .header_bytes()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"connection"))
            .flat_map(|(_, v)| v.split(|&c| c == b',').map(|t| t.trim_ascii().to_ascii_lowercase()))
            .collect();
        let mut cookies: Vec<&[u8]> = Vec::new();
        for (n, v) in req.header_bytes() {
            let Ok(name) = HeaderName::from_bytes(n) else { return None };
            let sent = match &self.cfg.headers {
                None => true,
                Some(list) => list.contains(&name),
            };
            // The fields the service's answer sets are its to say, never the client's.
            let copied = self.cfg.copy.iter().any(|c| same_name(c.as_str().as_bytes(), n));
            if !sent || copied || claims_the_request(name.as_str()) || hop_by_hop(name.as_str()) {
                continue;
            }
            if tokens.iter().any(|t| t.as_slice() == name.as_str().as_bytes()) {
                continue;
            }
            // HTTP/2 and HTTP/3 split cookies into fields; the service gets one, as an
            // HTTP/1.1 upstream does.
            if name == selvedge::http::header::COOKIE {
                cookies.push(v);
                continue;
            }
            b = b.header(name, selvedge::http::HeaderValue::from_bytes(v).ok()?);
        }
        if !cookies.is_empty() {
            b = b.header(
                selvedge::http::header::COOKIE,
                selvedge::http::HeaderValue::from_bytes(&cookies.join(&b"; "[..])).ok()?,
            );
        }
        // The host that chose the virtual host (an absolute-form target's wins over `Host`).
        let host = req.authority_bytes().unwrap_or_default();
        b = b.header(selvedge::http::header::HOST, selvedge::http::HeaderValue::from_bytes(host).ok()?);
        // The request as this server reads it: the normalized path without `;` parameters
        // (what routes and matchers saw), not the client's spelling or an absolute-form
        // target; the query with what a URL cannot carry as is percent-encoded.
        let mut uri = crate::lang::template::plain_path(req).into_owned();
        if let Some(q) = req.query_bytes() {
            uri.push(b'?');
            for &c in q {
                if c.is_ascii_graphic() && c != b'#' {
                    uri.push(c);
                } else {
                    uri.extend_from_slice(format!("%{c:02X}").as_bytes());
                }
            }
        }
        let uri = String::from_utf8(uri).ok()?;
        let scheme = if req.is_secure() { "https" } else { "http" };
        let url = format!("{scheme}://{}{uri}", String::from_utf8_lossy(host));
        // The method in upper case, as the applications that upper-case what they receive
        // read it (`delete` is DELETE to them, and must be to the service's rules).
        let method = req.method().as_str().to_ascii_uppercase();
        b = b
            .header("x-forwarded-method", &method)
            .header("x-forwarded-uri", &uri)
            .header("x-original-method", &method)
            .header("x-original-url", &url);
        let mut sub = Request::from(b.body(Bytes::new()).ok()?);
        sub.set_origin(req.peer().clone(), req.is_secure());
        Some(sub)
    }

    /// Puts the copied fields on `req` (and removes the client's of those names).
    fn admit(&self, req: &mut Request, fields: &[(HeaderName, Bytes)]) -> Verdict {
        if self.cfg.copy.is_empty() {
            return Verdict::Pass;
        }
        let add: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (n.as_str().as_bytes(), &v[..])).collect();
        let copy = &self.cfg.copy;
        let removed = |n: &[u8]| copy.iter().any(|c| same_name(c.as_str().as_bytes(), n));
        // A client's `Connection` naming a copied field would take it off the request on the
        // way upstream: such a `Connection` goes, its other tokens stay.
        let names_copied = req.header_bytes().any(|(n, v)| {
            n.eq_ignore_ascii_case(b"connection") && v.split(|&c| c == b',').any(|t| removed(t.trim_ascii()))
        });
        let mut keep = Vec::new();
        if names_copied {
            for (n, v) in req.header_bytes() {
                if n.eq_ignore_ascii_case(b"connection") {
                    for t in v.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
                        if !t.is_empty() && !removed(t) {
                            if !keep.is_empty() {
                                keep.extend_from_slice(b", ");
                            }
                            keep.extend_from_slice(t);
                        }
                    }
                }
            }
        }
        let mut add = add;
        if names_copied && !keep.is_empty() {
            add.push((b"connection", &keep));
        }
        let drop_field = |n: &[u8]| removed(n) || (names_copied && n.eq_ignore_ascii_case(b"connection"));
        match req.rewrite_headers(drop_field, &add) {
            Ok(()) => Verdict::Pass,
            Err(_) => Verdict::Answer(failed("sent a field that cannot be copied")),
        }
    }
}

/// Whether a client's field `name` is the field `copied` (lower case), in any case and
/// with `_` for `-` (`Remote_User`: an upstream that reads `_` as `-`, as CGI's
/// `HTTP_REMOTE_USER` does, would take it for the copied field).
fn same_name(copied: &[u8], name: &[u8]) -> bool {
    name.len() == copied.len()
        && name.iter().zip(copied).all(|(&x, &y)| x.eq_ignore_ascii_case(&y) || (x == b'_' && y == b'-'))
}

/// Whether `name` (lower case) is a hop-by-hop field (RFC 9110 §7.6.1), or one the
/// subrequest sets itself (`Host`, framing).
fn hop_by_hop(name: &str) -> bool {
    matches!(
        name,
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
            | "expect"
    ) || name.starts_with("proxy-")
}

/// Whether a client's field named `name` (lower case) would tell the service about the
/// request in place of this server: `X-Original-*` and `X-Forwarded-*`, but for the
/// forwarding fields the proxy writes itself (and keeps only from a trusted proxy).
fn claims_the_request(name: &str) -> bool {
    (name.starts_with("x-original-") || name.starts_with("x-forwarded-"))
        && !matches!(name, "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-host")
}

fn failed(why: &str) -> Response {
    tracing::warn!("forward_auth: the authentication service {why}: answered 502");
    crate::policy::plain(StatusCode::BAD_GATEWAY)
}
