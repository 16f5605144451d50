//! Reverse-proxy routes to HTTP/1.1 upstreams (TCP, TLS over TCP, or Unix socket), one or
//! a pool.
//!
//! One request's path, as plain sequential code:
//!
//! 0. **Member**: the route's pool ([`crate::upstream::pool`]) picks an upstream address by
//!    its policy among the healthy ones; this module is the transport that talks to it.
//! 1. **Connection**: an idle keep-alive connection to that member from this worker's pool
//!    (`transport::idle`), checked for staleness, else a new one (`connect_timeout`, and at most
//!    `max_connections` per member per worker).
//! 2. **Request**: the head is composed once (`forward`): hop-by-hop fields removed,
//!    `Host` kept or rewritten, `Forwarded`/`X-Forwarded-*` for this hop, and always
//!    re-framed (`Content-Length` when the client's length is known, else `chunked`). The
//!    body is streamed chunk by chunk as the client sends it: each piece is written before
//!    the next is read (backpressure both ways), while the upstream is watched for an early
//!    answer (a final response ends the upload; interim 1xx are consumed). An idempotent
//!    request's body of up to 64 KiB is read first instead, so it can be sent again.
//! 3. **Response head**: parsed strictly (`selvedge_proto::h1::response`, the client role)
//!    within `first_byte_timeout`; interim responses (100 Continue, 103...) are swallowed. A reused connection that fails before
//!    the first response byte is retried once on a new connection, for replayable requests
//!    only (idempotent, with no body or a body read whole).
//! 4. **Retry**: a failed attempt (connect error, reset, timeout, invalid answer, or a
//!    status of `fail_status`) is reported to the pool (passive health) and, if the pool
//!    allows (`retries`, the retry budget), the request goes to another member: always
//!    when nothing was sent yet, else only if it is replayable. Nothing has reached the
//!    client before this point, so a retry is never visible to it.
//! 5. **Response body**: up to 64 KiB with a `Content-Length` is read at once (inside the
//!    attempt, so a break there is retried too) and answered as one buffer (the connection
//!    goes back to the pool at once); anything else is streamed to the client piece by
//!    piece (the engine's writer waits while the client is slow, so nothing piles up),
//!    each upstream read within `idle_timeout`. A body that breaks off ends the client's
//!    response without its terminator (HTTP/1.1 chunked) or with a stream reset (HTTP/2),
//!    and the connection is closed, never reused.
//!
//! Errors: a refused, reset or invalid upstream is 502, a timeout 504, the connection limit
//! reached for `connect_timeout` is 503 (the last attempt's failure, after retries).
//!
//! Upgrade requests (WebSocket over HTTP/1.1, or HTTP/2 extended CONNECT) are tunnelled on
//! a connection of their own: see `tunnel`. Active health checks use `check`.
//!
//! Limits of this design: an upstream that answers before the upload ends stops the upload
//! (right for early 413/401, not for full-duplex streaming; tunnels are full duplex); the
//! upstream's `Date` and `Server` are replaced by the engine's, as nginx does by default.

#![forbid(unsafe_code)]

mod check;
mod forward;
mod h2;
mod tunnel;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use selvedge::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use selvedge::http::{HeaderName, HeaderValue, Method, StatusCode};
use selvedge::{Body, BodyWriter, Request, Response};
use selvedge_proto::h1::body::{BodyLimits, Decoded, Decoder};
use selvedge_proto::message::{put_hex, HeaderSpan};
use serde::Deserialize;

use crate::lang::headers::HeaderOps;
use crate::lang::template::Template;
use crate::units::{Count, NonZeroDur, Size};
use crate::upstream::pool::{self, Endpoint, HashKey, HealthCheck, Passive, Picked, Policy, Pool, PoolConfig, Target};
pub use crate::upstream::pool::{Addr, RawHealth, RawUpstream, Resolver};
use crate::upstream::transport::conn::{Conn, Wait, Written};
use crate::upstream::transport::idle;
pub use crate::upstream::transport::idle::PoolLimits;
use crate::upstream::transport::tls::{RawTls, TlsTarget};
pub use forward::HostMode;
use forward::{ComposeError, Framing, Rewrite};
pub use selvedge_proto::h1::response::HeadLimits;
use selvedge_proto::h1::response::{self as head, ResponseHead};

/// Responses with a `Content-Length` up to this size are read whole and sent as one buffer
/// (and request bodies of idempotent requests up to this size are read before they are
/// sent, so that a retry can send them again).
const SMALL_BODY: u64 = 64 * 1024;
/// Room made in the receive buffer for each read of a streamed body.
const STREAM_READ: usize = 64 * 1024;

/// The most upstreams a pool lists (each host name may stand for several members).
pub const MAX_UPSTREAMS: usize = 1024;

/// A route's `proxy = { ... }` table as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxy {
    /// The pool's name in the admin API (read there, from the configuration document).
    pub name: Option<String>,
    /// `http://host[:port][/base]`, `https://...` or `unix:/path/to.sock`: one upstream.
    pub upstream: Option<String>,
    /// Several upstreams (URLs, or `{ url, weight }` tables).
    pub upstreams: Option<Vec<RawUpstream>>,
    /// TLS to the `https://` upstreams.
    pub tls: Option<RawTls>,
    /// HTTP/2 to the upstreams (h2c for `http://`, ALPN `h2` for `https://`).
    pub http2: Option<bool>,
    /// With `http2`: each stream's receive window (what an upstream may send ahead).
    pub http2_window: Option<Size<65_535, { (1 << 31) - 1 }>>,
    /// `"round_robin"`, `"least_conn"`, `"random_two"` or `"hash"`.
    pub balance: Option<String>,
    /// `"client_ip"`, `"header:NAME"` or `"cookie:NAME"` (with `balance = "hash"`).
    pub hash_key: Option<String>,
    /// Active health checks.
    pub health: Option<RawHealth>,
    /// Failures within `fail_timeout` that mark an upstream down (0: never).
    pub max_fails: Option<Count<0, 1000>>,
    /// The window for `max_fails`, and how long a marked upstream stays out.
    pub fail_timeout: Option<NonZeroDur>,
    /// Upstream statuses that count as failures (and are retried).
    pub fail_status: Option<Vec<Count<500, 599>>>,
    /// Other upstreams a failed idempotent request may be sent to.
    pub retries: Option<Count<0, 100>>,
    /// Retries stay below this fraction of requests.
    pub retry_budget: Option<f64>,
    /// Retries per second always allowed (per worker thread).
    pub retry_budget_min: Option<Count<0, { u32::MAX as u64 }>>,
    /// Re-resolve upstream host names this often.
    pub resolve: Option<NonZeroDur>,
    /// `"preserve"`, `"upstream"` or a literal host.
    pub host: Option<String>,
    /// Remove the route's prefix from the path.
    pub strip_prefix: Option<bool>,
    /// Keep the client's forwarding fields and append to them.
    pub trust_forwarded: Option<bool>,
    /// Time to connect to the upstream.
    pub connect_timeout: Option<NonZeroDur>,
    /// Time from the request sent to the response head's first byte.
    pub first_byte_timeout: Option<NonZeroDur>,
    /// Time without progress while the response streams.
    pub idle_timeout: Option<NonZeroDur>,
    /// Time an idle upstream connection is kept for reuse.
    pub keepalive_timeout: Option<NonZeroDur>,
    /// Idle connections kept per upstream per worker.
    pub max_idle: Option<Count<0, { u32::MAX as u64 }>>,
    /// Connections per upstream per worker (0: no limit).
    pub max_connections: Option<Count<0, { u32::MAX as u64 }>>,
    /// Time a WebSocket (or other upgraded) tunnel may stay silent both ways.
    pub tunnel_idle_timeout: Option<NonZeroDur>,
    /// `"refuse"` (400) or `"keep"`: what an encoded slash (`%2F`) in the path means.
    pub encoded_slashes: Option<String>,
    /// Forward request fields whose names have `_` (dropped by default).
    pub underscores_in_headers: Option<bool>,
    /// Largest upstream response head.
    pub max_response_head: Option<Size<64, { u32::MAX as u64 }>>,
    /// Most fields in an upstream response head.
    pub max_response_headers: Option<Count<1, 65_535>>,
    /// Fields of the request sent upstream set, added, deleted or rewritten.
    pub header_up: Option<crate::lang::headers::RawHeaderOps>,
    /// Fields of the upstream's response set, added, deleted or rewritten.
    pub header_down: Option<crate::lang::headers::RawHeaderOps>,
    /// The path sent upstream, a template (`"/v2{re.api.1}"`).
    pub path: Option<String>,
}

/// A checked proxy route configuration; every default is documented on its field.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The pool's name in the admin API, if given.
    pub name: Option<String>,
    /// The upstreams as written (for the startup line).
    pub upstream: String,
    /// The pool: upstreams (host names resolved when the configuration is loaded, and
    /// again every `resolve`), balancing, health, retries.
    pub pool: PoolConfig,
    /// Each upstream's authority as written (`Host` with `host = "upstream"`).
    pub authorities: Vec<String>,
    /// Each upstream's TLS (an `https://` upstream; `None`: plain): verified against the
    /// system's CAs (or `tls.ca`) for the upstream's host name (or `tls.sni`). One `tls`
    /// table applies to every `https://` upstream of the route.
    pub tls: Vec<Option<TlsTarget>>,
    /// HTTP/2 to the upstreams: `false`. Prior knowledge (h2c) on `http://` and `unix:`,
    /// ALPN `h2` (else `http/1.1`) on `https://`.
    pub http2: bool,
    /// With `http2`: each `https://` upstream's TLS offering `h2` and `http/1.1` in ALPN.
    pub tls_h2: Vec<Option<TlsTarget>>,
    /// With `http2`: each upstream stream's receive window: 256 KiB (the connection's is
    /// 16 times that).
    pub h2_stream_window: u32,
    /// The upstreams' path (the same for all), without a trailing `/`.
    pub base: String,
    /// `Host` sent upstream: `preserve` (the client's; default), `upstream`, or a literal.
    pub host: HostMode,
    /// Remove the route's prefix from the forwarded path: `false`.
    pub strip_prefix: bool,
    /// Keep the client's `Forwarded`/`X-Forwarded-*` and append this hop: `false` (they are
    /// replaced, so a client cannot forge them), unless the peer is a trusted proxy.
    pub trust_forwarded: bool,
    /// Time to open a connection (and to wait for a free one under `max_connections`): 5 s.
    pub connect_timeout: Duration,
    /// Time from the request's end to the response's first byte: 60 s.
    pub first_byte_timeout: Duration,
    /// Time any later read or write on the upstream may wait: 60 s.
    pub idle_timeout: Duration,
    /// Pool: 64 idle connections per upstream per worker, each kept 15 s; at most 1024
    /// connections per upstream per worker.
    pub pool_limits: PoolLimits,
    /// Response heads: 32 KiB and 100 fields at most (else 502).
    pub head: HeadLimits,
    /// A WebSocket (or other `Upgrade`) tunnel with no bytes either way for this long is
    /// closed: 300 s.
    pub tunnel_idle_timeout: Duration,
    /// Forward a path with an encoded slash (`%2F`) as it is (`encoded_slashes = "keep"`)
    /// instead of answering 400: `false`.
    pub keep_encoded_slashes: bool,
    /// Forward request fields whose names contain `_` (`underscores_in_headers`): `false`,
    /// as nginx (`X_Forwarded_For` would read as `X-Forwarded-For` to many applications).
    pub underscores_in_headers: bool,
    /// `header_up`: none.
    pub header_up: HeaderOps,
    /// `header_down`: none.
    pub header_down: HeaderOps,
    /// `path`: the path sent upstream in place of the client's (its query is kept unless
    /// the expanded path has one): none.
    pub path: Option<Template>,
}

/// What checking a proxy table needs from the rest of the file.
#[derive(Debug, Clone, Default)]
pub struct ProxyContext {
    /// `[server] resolver`.
    pub resolver: Resolver,
}

impl ProxyConfig {
    /// Checks `raw`.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawProxy, ctx: &ProxyContext) -> Result<ProxyConfig, String> {
        let list: Vec<(&str, u32)> = match (&raw.upstream, &raw.upstreams) {
            (Some(u), None) => vec![(u.as_str(), 1)],
            (None, Some(v)) if v.len() > MAX_UPSTREAMS => {
                return Err(format!("proxy upstreams: at most {MAX_UPSTREAMS}, not {}", v.len()))
            }
            (None, Some(v)) if !v.is_empty() => v.iter().map(RawUpstream::parts).collect(),
            (None, Some(_)) => return Err("proxy upstreams: at least one".into()),
            (Some(_), Some(_)) => return Err("proxy: `upstream` or `upstreams`, not both".into()),
            (None, None) => return Err("proxy: `upstream = \"http://...\"` or `upstreams = [...]`".into()),
        };
        let mut targets = Vec::new();
        let mut authorities = Vec::new();
        let mut tls = Vec::new();
        let mut tls_h2 = Vec::new();
        let http2 = raw.http2.unwrap_or(false);
        let mut base: Option<String> = None;
        for (url, weight) in list {
            if targets.iter().any(|t: &Target| t.url == url) {
                return Err(format!("proxy upstream {url:?} is listed twice"));
            }
            let u = parse_upstream(url)?;
            match &base {
                Some(b) if *b != u.base => {
                    return Err(format!("proxy upstream {url:?}: every upstream of a route has the same path"))
                }
                _ => base = Some(u.base),
            }
            tls_h2.push(match (&u.host, u.https) {
                (Some(host), true) if http2 => {
                    let default = RawTls::default();
                    Some(TlsTarget::new(raw.tls.as_ref().unwrap_or(&default), host, &[b"h2", b"http/1.1"])?)
                }
                _ => None,
            });
            tls.push(match (&u.host, u.https) {
                (Some(host), true) => {
                    let default = RawTls::default();
                    Some(TlsTarget::new(raw.tls.as_ref().unwrap_or(&default), host, &[b"http/1.1"])?)
                }
                _ => None,
            });
            authorities.push(u.authority);
            let addrs = match u.unix {
                Some(p) => Addr::Unix(p),
                None => Addr::Tcp(Vec::new()),
            };
            targets.push(Target { url: url.to_string(), weight, host: u.host, port: u.port, addrs });
        }
        if raw.http2_window.is_some() && !http2 {
            return Err("proxy: http2_window needs http2 = true".into());
        }
        if raw.tls.is_some() && tls.iter().all(Option::is_none) {
            return Err("proxy: tls needs an https:// upstream".into());
        }
        let resolve = raw.resolve.map(NonZeroDur::get);
        pool::resolve_targets(&mut targets, &ctx.resolver, resolve.is_some())?;

        let policy = match raw.balance.as_deref() {
            None => Policy::RoundRobin,
            Some(b) => Policy::parse(b).ok_or_else(|| {
                format!("proxy balance {b:?}: \"round_robin\", \"least_conn\", \"random_two\" or \"hash\"")
            })?,
        };
        let hash_key = HashKey::parse(raw.hash_key.as_deref().unwrap_or("client_ip"))?;
        let retry_budget = raw.retry_budget.unwrap_or(0.2);
        if !(0.0..=1.0).contains(&retry_budget) {
            return Err(format!("proxy retry_budget {retry_budget}: a fraction from 0 to 1 (0.2: 20%)"));
        }
        let secs = |v: Option<NonZeroDur>, default: u64| v.map_or(Duration::from_secs(default), NonZeroDur::get);
        let pool = PoolConfig {
            targets,
            policy,
            hash_key,
            health: raw.health.as_ref().map(HealthCheck::from_raw).transpose()?,
            passive: Passive {
                max_fails: raw.max_fails.map_or(3, Count::get_u32),
                fail_timeout: secs(raw.fail_timeout, 10),
            },
            fail_status: raw
                .fail_status
                .as_ref()
                .map_or_else(|| vec![502, 503, 504], |v| v.iter().map(|c| c.get() as u16).collect()),
            retries: raw.retries.map_or(1, Count::get_u32),
            retry_budget,
            retry_budget_min: raw.retry_budget_min.map_or(10, Count::get_u32),
            resolve,
            resolver: ctx.resolver.clone(),
        };
        let host = match raw.host.as_deref() {
            None | Some("preserve") => HostMode::Preserve,
            Some("upstream") => HostMode::Upstream,
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()) => HostMode::Fixed(h.to_string()),
            Some(h) => return Err(format!("proxy host {h:?}: \"preserve\", \"upstream\" or a host name")),
        };
        let keep_encoded_slashes = match raw.encoded_slashes.as_deref() {
            None | Some("refuse") => false,
            Some("keep") => true,
            Some(v) => return Err(format!("proxy encoded_slashes {v:?}: \"refuse\" or \"keep\"")),
        };
        let max_head = raw.max_response_head.map_or(32 * 1024, Size::get_usize);
        if let Some(n) = &raw.name {
            let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
            if n.is_empty() || n.len() > 64 || !n.bytes().all(ok) || n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("proxy name {n:?}: 1 to 64 letters, digits, '-' and '_', not only digits"));
            }
        }
        Ok(ProxyConfig {
            name: raw.name.clone(),
            upstream: pool.targets.iter().map(|t| t.url.as_str()).collect::<Vec<_>>().join(","),
            pool,
            authorities,
            tls,
            http2,
            tls_h2,
            h2_stream_window: raw.http2_window.map_or(256 * 1024, |s| s.get_usize() as u32),
            base: base.unwrap_or_default(),
            host,
            strip_prefix: raw.strip_prefix.unwrap_or(false),
            trust_forwarded: raw.trust_forwarded.unwrap_or(false),
            connect_timeout: secs(raw.connect_timeout, 5),
            first_byte_timeout: secs(raw.first_byte_timeout, 60),
            idle_timeout: secs(raw.idle_timeout, 60),
            pool_limits: PoolLimits {
                max_idle: raw.max_idle.map_or(64, Count::get_usize),
                keepalive: secs(raw.keepalive_timeout, 15),
                max_connections: raw.max_connections.map_or(1024, Count::get_usize),
                release_idle: false,
            },
            head: HeadLimits { max_head, max_headers: raw.max_response_headers.map_or(100, Count::get_usize) },
            tunnel_idle_timeout: secs(raw.tunnel_idle_timeout, 300),
            keep_encoded_slashes,
            underscores_in_headers: raw.underscores_in_headers.unwrap_or(false),
            header_up: HeaderOps::default(),
            header_down: HeaderOps::default(),
            path: None,
        })
    }
}

/// An upstream URL's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UpstreamUrl {
    /// The host (name or address, IPv6 without brackets); `None` for a Unix socket.
    host: Option<String>,
    port: u16,
    /// `host[:port]` as written (`localhost` for a Unix socket).
    authority: String,
    /// The path, without a trailing `/`.
    base: String,
    /// A Unix socket's path.
    unix: Option<PathBuf>,
    /// `https://`.
    https: bool,
}

/// Splits `http://host[:port][/base]`, `https://...` or `unix:/path` (no resolution here).
fn parse_upstream(s: &str) -> Result<UpstreamUrl, String> {
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("proxy upstream {s:?}: a unix socket needs an absolute path"));
        }
        let unix = Some(PathBuf::from(path));
        let (authority, base) = ("localhost".into(), String::new());
        return Ok(UpstreamUrl { host: None, port: 0, authority, base, unix, https: false });
    }
    let (rest, https) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) => (r, true),
        _ => return Err(format!("proxy upstream {s:?} must start with http://, https:// or unix:")),
    };
    let (authority, base) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let bad = |why: &str| format!("proxy upstream {s:?}: {why}");
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("needs host[:port] (no user info)"));
    }
    if !base.bytes().all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#') {
        return Err(bad("the path may not have a query, fragment or spaces"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            (h, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port: u16 = match port {
        None if https => 443,
        None => 80,
        Some(p) => p.parse().map_err(|_| bad("invalid port"))?,
    };
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b)) {
        return Err(bad("invalid host"));
    }
    Ok(UpstreamUrl {
        host: Some(host.to_string()),
        port,
        authority: authority.to_string(),
        base: base.trim_end_matches('/').to_string(),
        unix: None,
        https,
    })
}

/// The app serving a proxy route.
#[derive(Debug)]
pub struct Proxy {
    route: Arc<Route>,
}

#[derive(Debug)]
struct Route {
    cfg: ProxyConfig,
    /// The request rewrite for each upstream (they differ in `Host` with `host = "upstream"`).
    rws: Vec<Rewrite>,
    pool: Pool,
    /// With `http2`: the `https://` upstreams that chose HTTP/1.1 in ALPN (`h2`).
    fallback: h2::Fallback,
}

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// No connection: refused, unreachable...
    Connect,
    /// Over `max_connections` for `connect_timeout`.
    AtLimit,
    /// A deadline passed (connect, first byte, idle).
    Timeout,
    /// The upstream closed or failed before sending a byte of the response (retryable on a
    /// reused connection).
    Closed,
    /// The upstream broke off or sent an invalid response.
    Bad,
    /// The request cannot be expressed in HTTP/1.1, or the client's body failed.
    Client,
}

impl Fail {
    fn response(&self) -> Response {
        let (status, text) = match self {
            Fail::Connect | Fail::Closed | Fail::Bad => (StatusCode::BAD_GATEWAY, "502 Bad Gateway\n"),
            Fail::AtLimit => (StatusCode::SERVICE_UNAVAILABLE, "503 Service Unavailable\n"),
            Fail::Timeout => (StatusCode::GATEWAY_TIMEOUT, "504 Gateway Timeout\n"),
            Fail::Client => (StatusCode::BAD_REQUEST, "400 Bad Request\n"),
        };
        Response::bytes(status, text).header(CONTENT_TYPE, "text/plain; charset=utf-8")
    }

    /// What the log says.
    fn describe(&self) -> &'static str {
        match self {
            Fail::Connect => "connection failed",
            Fail::AtLimit => "max_connections reached",
            Fail::Timeout => "timed out",
            Fail::Closed => "closed before answering",
            Fail::Bad => "invalid or broken response",
            Fail::Client => "client request failed",
        }
    }
}

/// How an attempt failed.
#[derive(Debug, Clone, Copy)]
struct Tried {
    fail: Fail,
    /// Request bytes went out (a retry could run the request twice).
    sent: bool,
}

impl Tried {
    fn before_sending(fail: Fail) -> Tried {
        Tried { fail, sent: false }
    }
}

/// An upstream's answer to an attempt.
struct Answer {
    conn: Conn,
    head: ResponseHead,
    /// Head and body, when the whole response was small enough to read at once.
    whole: Option<Bytes>,
}

/// How the response body is delimited.
enum BodyKind {
    /// No body (HEAD, 204, 304).
    None,
    /// Chunked or `Content-Length`.
    Framed(Decoder),
    /// Until the upstream closes.
    UntilClose,
}

impl Proxy {
    /// A proxy app for the route at `prefix` (`key` names the route across reloads).
    ///
    /// # Errors
    /// Never: the configuration was checked when loaded.
    pub fn new(cfg: &ProxyConfig, prefix: &str, key: &str) -> std::io::Result<Proxy> {
        let strip = if cfg.strip_prefix { prefix.trim_end_matches('/').to_string() } else { String::new() };
        let up = (!cfg.header_up.is_empty() || cfg.path.is_some())
            .then(|| Arc::new(forward::Up { ops: cfg.header_up.clone(), path: cfg.path.clone() }));
        let rws = cfg
            .authorities
            .iter()
            .map(|a| Rewrite {
                base: cfg.base.clone(),
                strip: strip.clone(),
                host: cfg.host.clone(),
                upstream_host: a.clone(),
                trust_forwarded: cfg.trust_forwarded,
                underscores: cfg.underscores_in_headers,
                up: up.clone(),
            })
            .collect();
        let probe = cfg.pool.health.as_ref().map(|h| check::probe(cfg, h));
        let pool = Pool::new(cfg.pool.clone(), &format!("{key} {}", cfg.upstream), probe);
        let fallback = h2::Fallback::new(cfg.tls.len());
        Ok(Proxy { route: Arc::new(Route { cfg: cfg.clone(), rws, pool, fallback }) })
    }

    /// The route's `header_down`, if it has one.
    pub fn header_down(&self) -> Option<&HeaderOps> {
        Some(&self.route.cfg.header_down).filter(|h| !h.is_empty())
    }

    /// Whether a path with an encoded slash (`%2F`) is forwarded (`encoded_slashes = "keep"`).
    pub fn keeps_encoded_slashes(&self) -> bool {
        self.route.cfg.keep_encoded_slashes
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &str {
        &self.route.cfg.upstream
    }

    /// Serves one request.
    ///
    /// The future is boxed here, and holds only what the request's way needs: a plain
    /// request's is `handle_h1`'s, with no wrapper keeping a second copy of the
    /// request beside it.
    pub fn handle(&self, mut req: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        let route = &self.route;
        if req.upgrade().is_some() {
            return Box::pin(route.clone().tunnel(req));
        }
        if route.cfg.http2 {
            return Box::pin(async move {
                match Box::pin(route.clone().handle_h2(req)).await {
                    Ok(res) => res,
                    Err((req, body)) => Box::pin(self.handle_h1(req, body)).await,
                }
            });
        }
        let body = req.take_body();
        Box::pin(self.handle_h1(req, body))
    }

    /// Serves one request over HTTP/1.1 (`body`: the request's, taken off it).
    async fn handle_h1(&self, mut req: Request, mut body: Body) -> Response {
        let route = &self.route;
        let framing = forward::framing(&req, body.content_length());
        let idempotent = forward::idempotent(&req);
        // A small body of an idempotent request is read first, so a retry can send it again.
        let mut kept: Option<Bytes> = None;
        if let (true, Framing::Length(n @ 1..=SMALL_BODY)) = (idempotent, framing) {
            match read_body(&mut body, n).await {
                Some(b) => kept = Some(b),
                None => return Fail::Client.response(),
            }
        }
        let replayable = idempotent && (framing == Framing::None || kept.is_some());
        let is_head = req.method() == Method::HEAD;
        let pool = &route.pool;
        let mut attempts = pool.attempts(&req);
        let mut head: Vec<u8> = Vec::new();
        let mut head_for = usize::MAX;
        let mut last = Fail::Connect;
        // The access log and metrics see the last attempt's member, and the time from the
        // first attempt to its answer (or failure).
        let sent = std::time::Instant::now();
        loop {
            let Some(picked) = pool.pick(&mut attempts) else { return last.response() };
            if let Some(b) = &kept {
                body = Body::from_bytes(b.clone());
            }
            let r = route.attempt(
                &picked.ep,
                &mut req,
                (&mut head, &mut head_for),
                &mut body,
                framing,
                is_head,
                replayable,
            );
            let r = r.await;
            let failed = matches!(&r, Err(t) if t.fail != Fail::Client);
            crate::observe::upstream(&picked.ep.label, sent, failed);
            match r {
                Ok(mut a) => {
                    let status = a.head.status;
                    if !pool.fails_on(status) {
                        picked.succeeded();
                        a.conn.wbuf = std::mem::take(&mut head);
                        return route.respond(a, is_head, picked).await;
                    }
                    picked.failed(&format!("answered {status}"));
                    if !(replayable && pool.may_retry(&mut attempts)) {
                        return route.respond(a, is_head, picked).await;
                    }
                    if a.whole.is_some() && a.head.keep_alive() {
                        idle::checkin(picked.ep.slot, &route.cfg.pool_limits, a.conn);
                    }
                }
                Err(Tried { fail: Fail::Client, .. }) => return Fail::Client.response(),
                Err(t) => {
                    if t.fail != Fail::AtLimit {
                        picked.failed(t.fail.describe());
                    }
                    if (t.sent && !replayable) || !pool.may_retry(&mut attempts) {
                        return t.fail.response();
                    }
                    last = t.fail;
                }
            }
            tracing::debug!(upstream = picked.ep.health.name(), "retrying on another upstream");
        }
    }
}

/// Reads a body of `n` bytes whole (`None`: it failed or had another length).
async fn read_body(body: &mut Body, n: u64) -> Option<Bytes> {
    let mut buf = BytesMut::with_capacity(n as usize);
    while let Some(piece) = body.chunk().await {
        buf.extend_from_slice(&piece.ok()?);
        if buf.len() as u64 > n {
            return None;
        }
    }
    (buf.len() as u64 == n).then(|| buf.freeze())
}

impl Route {
    /// A new connection to `ep` (or one given back to its slot while waiting under
    /// `max_connections`), within `connect_timeout`; TLS for an `https://` member.
    async fn connect(&self, ep: &Endpoint) -> Result<Conn, Fail> {
        let cfg = &self.cfg;
        let permit = match idle::permit(ep.slot, &cfg.pool_limits, cfg.connect_timeout).await {
            Ok(idle::Permit::Idle(c)) => return Ok(c),
            Ok(idle::Permit::New(p)) => p,
            Err(_) => return Err(Fail::AtLimit),
        };
        let tls = cfg.tls.get(ep.target).and_then(Option::as_ref);
        match Conn::connect_tls(&ep.addr, tls, cfg.connect_timeout, permit).await {
            Ok(c) => Ok(c),
            Err(Wait::Timeout) => {
                tracing::warn!("proxy {}: connect timed out", ep.health.name());
                Err(Fail::Timeout)
            }
            Err(Wait::Io(e)) => {
                tracing::warn!("proxy {}: cannot connect: {e}", ep.health.name());
                Err(Fail::Connect)
            }
        }
    }

    /// One attempt on `ep`: a connection (an idle one if the pool has it), the request,
    /// the response head, and the body too if it is small. A reused connection that fails
    /// before the first response byte is retried once on a new one for a replayable
    /// request (the upstream may have closed it just as it was taken).
    ///
    /// `head` is the request head composed for upstream `head.1` (composed again here for
    /// another upstream, in the first connection's send buffer for its capacity). `req` is
    /// only read, but borrowed `&mut`: a request is `Send` and not `Sync` (its body), so a
    /// shared borrow held across the awaits would make the handler's future not `Send`.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        ep: &Endpoint,
        req: &mut Request,
        head: (&mut Vec<u8>, &mut usize),
        body: &mut Body,
        framing: Framing,
        is_head: bool,
        replayable: bool,
    ) -> Result<Answer, Tried> {
        let (head, head_for) = head;
        let mut retried = false;
        loop {
            let pooled = if retried { None } else { idle::checkout(ep.slot, &self.cfg.pool_limits) };
            let reused = pooled.is_some();
            let mut conn = match pooled {
                Some(c) => c,
                // Boxed: connecting is rare once the pool is warm, and its state is large.
                None => Box::pin(self.connect(ep)).await.map_err(Tried::before_sending)?,
            };
            if *head_for != ep.target {
                if head.capacity() == 0 {
                    std::mem::swap(head, &mut conn.wbuf);
                }
                head.clear();
                if let Err(ComposeError::Unrepresentable) = forward::compose(head, req, &self.rws[ep.target], framing) {
                    return Err(Tried::before_sending(Fail::Client));
                }
                *head_for = ep.target;
            }
            match self.exchange(&mut conn, head, body, framing).await {
                Ok(h) => {
                    let whole =
                        self.read_small(&mut conn, &h, is_head).await.map_err(|fail| Tried { fail, sent: true })?;
                    return Ok(Answer { conn, head: h, whole });
                }
                Err(Fail::Closed) if reused && replayable && !retried => retried = true,
                Err(fail) => return Err(Tried { fail, sent: true }),
            }
        }
    }

    /// Sends the request (head `head`, then the body) and reads the final response head.
    async fn exchange(
        &self,
        conn: &mut Conn,
        head: &[u8],
        body: &mut Body,
        framing: Framing,
    ) -> Result<ResponseHead, Fail> {
        let cfg = &self.cfg;
        let sent = match framing {
            Framing::None => conn.write_all(&mut [head], cfg.idle_timeout, None).await,
            // Boxed: only requests with a body pay for the body loop's state.
            _ => Box::pin(self.send_body(conn, head, body, framing)).await?,
        };
        match sent {
            Ok(Written::All) => {}
            // The upstream answered early or the write failed: its answer (if any) is still
            // read, but the request was not sent whole.
            Ok(Written::Answered) | Err(Wait::Io(_)) => conn.closing = true,
            Err(Wait::Timeout) => return Err(Fail::Timeout),
        }
        self.read_head(conn, false).await
    }

    /// Reads a small response's body (a `Content-Length` up to [`SMALL_BODY`], or none):
    /// head and body then travel in one buffer, and the connection is free again before
    /// the client is answered. `Ok(None)`: the body is to be streamed.
    async fn read_small(&self, conn: &mut Conn, h: &ResponseHead, is_head: bool) -> Result<Option<Bytes>, Fail> {
        let bodiless = is_head || h.status == 204 || h.status == 304;
        let n = match h.content_length {
            _ if bodiless => 0,
            Some(n) if !h.chunked && n <= SMALL_BODY => n as usize,
            _ => return Ok(None),
        };
        while conn.rbuf.len() < h.len + n {
            match conn.read(self.cfg.idle_timeout, h.len + n - conn.rbuf.len()).await {
                Ok(0) | Err(Wait::Io(_)) => return Err(Fail::Bad),
                Ok(_) => {}
                Err(Wait::Timeout) => return Err(Fail::Timeout),
            }
        }
        let msg = Bytes::copy_from_slice(&conn.rbuf[..h.len + n]);
        conn.rbuf.advance(h.len + n);
        Ok(Some(msg))
    }

    /// Streams the body after the head. `Err` only for the client's side; the upstream's
    /// result is inside the `Ok`.
    async fn send_body(
        &self,
        conn: &mut Conn,
        head: &[u8],
        body: &mut Body,
        framing: Framing,
    ) -> Result<Result<Written, Wait>, Fail> {
        let cfg = &self.cfg;
        let chunked = framing == Framing::Chunked;
        let mut pending: &[u8] = head;
        let mut total = 0u64;
        let mut size_line = Vec::with_capacity(24);
        let mut next = body.chunk().await;
        loop {
            let piece = match next {
                Some(Ok(b)) => b,
                Some(Err(_)) => return Err(Fail::Client),
                None => {
                    if let Framing::Length(n) = framing {
                        if total != n {
                            return Err(Fail::Client);
                        }
                    }
                    let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
                    return Ok(conn
                        .write_all(
                            &mut [pending, end],
                            cfg.idle_timeout,
                            Some(&mut |c: &mut Conn| answered(c, &cfg.head)),
                        )
                        .await);
                }
            };
            total += piece.len() as u64;
            if !piece.is_empty() {
                let mut watch = |c: &mut Conn| answered(c, &cfg.head);
                let w = if chunked {
                    size_line.clear();
                    put_hex(&mut size_line, piece.len() as u64);
                    size_line.extend_from_slice(b"\r\n");
                    conn.write_all(&mut [pending, &size_line, &piece, b"\r\n"], cfg.idle_timeout, Some(&mut watch))
                        .await
                } else {
                    conn.write_all(&mut [pending, &piece], cfg.idle_timeout, Some(&mut watch)).await
                };
                match w {
                    Ok(Written::All) => pending = b"",
                    other => return Ok(other),
                }
            }
            // The next piece, unless the upstream answers first.
            next = tokio::select! {
                biased;
                c = body.chunk() => c,
                () = wait_answer(conn, &cfg.head) => return Ok(Ok(Written::Answered)),
            };
        }
    }

    /// Reads until a final response head is buffered; interim responses are dropped.
    /// `switching`: a 101 is the answer (to an upgrade request), else it is invalid.
    async fn read_head(&self, conn: &mut Conn, switching: bool) -> Result<ResponseHead, Fail> {
        let cfg = &self.cfg;
        let mut got_any = !conn.rbuf.is_empty();
        loop {
            if !conn.rbuf.is_empty() {
                match head::parse(&conn.rbuf, &cfg.head, &mut conn.fields) {
                    Ok(Some(h)) if h.status == 101 && switching => return Ok(h),
                    Ok(Some(h)) if h.status == 101 => return Err(Fail::Bad),
                    Ok(Some(h)) if h.status < 200 => {
                        conn.rbuf.advance(h.len);
                        continue;
                    }
                    Ok(Some(h)) => return Ok(h),
                    Ok(None) => {}
                    Err(_) => return Err(Fail::Bad),
                }
            }
            let limit = if got_any { cfg.idle_timeout } else { cfg.first_byte_timeout };
            match conn.read(limit, 0).await {
                Ok(0) | Err(Wait::Io(_)) => return Err(if got_any { Fail::Bad } else { Fail::Closed }),
                Ok(_) => got_any = true,
                Err(Wait::Timeout) => return Err(Fail::Timeout),
            }
        }
    }

    /// Turns the upstream's answer into the client's response. `picked` stays in flight
    /// until the body has been relayed.
    async fn respond(self: &Arc<Self>, a: Answer, is_head: bool, picked: Picked) -> Response {
        let Answer { mut conn, head: h, whole } = a;
        let cfg = &self.cfg;
        let Ok(status) = StatusCode::from_u16(h.status) else { return Fail::Bad.response() };
        let bodiless = is_head || h.status == 204 || h.status == 304;
        let kind = if bodiless {
            BodyKind::None
        } else if h.chunked {
            BodyKind::Framed(Decoder::chunked(BODY_LIMITS))
        } else if let Some(n) = h.content_length {
            match Decoder::length(n, BODY_LIMITS) {
                Ok(d) => BodyKind::Framed(d),
                Err(_) => return Fail::Bad.response(),
            }
        } else {
            BodyKind::UntilClose
        };
        let keep_alive = h.keep_alive() && !matches!(kind, BodyKind::UntilClose);

        if let Some(msg) = whole {
            let mut res = match kind {
                BodyKind::None => head_response(status, is_head.then_some(h.content_length).flatten()),
                _ => Response::bytes(status, msg.slice(h.len..)),
            };
            // A header list recycled from a sent response (room for the compressing route's
            // two), rather than one grown here and dropped by the pool once sent.
            res.reserve_headers(conn.fields.len() + 2);
            relay_fields(res.headers_mut(), &msg, &h, &conn.fields, false);
            if keep_alive {
                idle::checkin(picked.ep.slot, &cfg.pool_limits, conn);
            }
            return res;
        }

        let head_bytes = Bytes::copy_from_slice(&conn.rbuf[..h.len]);
        conn.rbuf.advance(h.len);
        let mut fields = Vec::new();
        relay_fields(&mut fields, &head_bytes, &h, &conn.fields, true);
        let route = self.clone();
        let mut res = Response::stream(status, move |mut w| async move {
            let done = route.relay(&mut conn, &mut w, kind).await?;
            if done && keep_alive && conn.rbuf.is_empty() {
                idle::checkin(picked.ep.slot, &route.cfg.pool_limits, conn);
            }
            drop(picked);
            Ok(())
        });
        *res.headers_mut() = fields;
        res
    }

    /// Copies the response body to the client. `Ok(true)`: the body ended as framed.
    async fn relay(&self, conn: &mut Conn, w: &mut BodyWriter, kind: BodyKind) -> std::io::Result<bool> {
        use std::io::{Error, ErrorKind};
        let idle = self.cfg.idle_timeout;
        let mut dec = match kind {
            BodyKind::None => return Ok(true),
            BodyKind::Framed(d) => Some(d),
            BodyKind::UntilClose => None,
        };
        loop {
            if let Some(d) = &mut dec {
                match d.decode(&mut conn.rbuf) {
                    Ok(Decoded::Data(b)) => {
                        w.write(&b).await?;
                        continue;
                    }
                    Ok(Decoded::Done) => return Ok(true),
                    Ok(Decoded::NeedMore) => {}
                    Err(_) => return Err(Error::new(ErrorKind::InvalidData, "invalid upstream body framing")),
                }
            } else if !conn.rbuf.is_empty() {
                let b = conn.rbuf.split().freeze();
                w.write(&b).await?;
            }
            match conn.read(idle, STREAM_READ).await {
                Ok(0) if dec.is_none() => return Ok(false),
                Ok(0) => return Err(Error::new(ErrorKind::UnexpectedEof, "upstream closed mid-body")),
                Ok(_) => {}
                Err(Wait::Timeout) => return Err(Error::new(ErrorKind::TimedOut, "upstream idle timeout")),
                Err(Wait::Io(e)) => return Err(e),
            }
        }
    }
}

/// Reads what the upstream sent unasked, drops complete interim responses, and says
/// whether it has answered for good: a final head (or the start of invalid bytes) is
/// buffered, or it closed.
fn answered(conn: &mut Conn, limits: &HeadLimits) -> bool {
    match conn.try_fill() {
        Ok(0) => return true,
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
        Err(_) => return true,
    }
    loop {
        match head::parse(&conn.rbuf, limits, &mut conn.fields) {
            Ok(None) => return false,
            Ok(Some(h)) if h.status < 200 && h.status != 101 => conn.rbuf.advance(h.len),
            Ok(Some(_)) | Err(_) => return true,
        }
    }
}

/// Resolves once the upstream has answered for good (see [`answered`]).
///
/// # Cancel safety
/// Cancel safe: what was read stays in the receive buffer.
async fn wait_answer(conn: &mut Conn, limits: &HeadLimits) {
    loop {
        if conn.readable().await.is_err() || answered(conn, limits) {
            return;
        }
    }
}

/// Response bodies: any size (the client's connection bounds nothing here), chunk
/// extensions and trailers within the engine's request defaults (trailers are dropped).
const BODY_LIMITS: BodyLimits = BodyLimits { max_body: u64::MAX, max_chunk_ext: 1024, max_trailers: 16 * 1024 };

/// A bodiless response; for HEAD with a `Content-Length`, that length is announced (an
/// empty stream of a declared length, which the engine never runs for HEAD).
fn head_response(status: StatusCode, len: Option<u64>) -> Response {
    match len {
        Some(n) => Response::stream(status, |_w| async { Ok(()) }).header(CONTENT_LENGTH, n),
        None => Response::new(status),
    }
}

/// Adds the upstream's end-to-end fields to `out` (values share `head`'s bytes).
/// `Content-Length` is kept only for streams (the engine then sends the body with that
/// length on HTTP/1.1 as on HTTP/2).
fn relay_fields(
    out: &mut Vec<(HeaderName, HeaderValue)>,
    head: &Bytes,
    h: &ResponseHead,
    fields: &[HeaderSpan],
    keep_length: bool,
) {
    let tokens = if h.conn_names_fields {
        forward::connection_tokens(fields.iter().map(|f| (&head[f.name.range()], &head[f.value.range()])))
    } else {
        Vec::new()
    };
    // Room for two more: a compressing route adds `Vary` (and `Content-Encoding` when it
    // compresses), and growing the vector then would copy it.
    out.reserve(fields.len() + 2);
    for f in fields {
        let name = &head[f.name.range()];
        if forward::dropped_response_field(name) || tokens.iter().any(|t| t.eq_ignore_ascii_case(name)) {
            continue;
        }
        let Ok(name) = selvedge_proto::message::field_name(name) else { continue };
        if name == CONTENT_LENGTH && !keep_length {
            continue;
        }
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(f.value.range())) else { continue };
        out.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(upstream: &str) -> RawProxy {
        toml::from_str(&format!("upstream = {upstream:?}")).unwrap()
    }

    fn load(r: &RawProxy) -> Result<ProxyConfig, String> {
        ProxyConfig::from_raw(r, &ProxyContext::default())
    }

    #[test]
    fn upstream_urls() {
        let c = load(&raw("http://127.0.0.1:9000/base/")).unwrap();
        assert_eq!(c.pool.targets[0].addrs, Addr::Tcp(vec!["127.0.0.1:9000".parse().unwrap()]));
        assert_eq!((c.authorities[0].as_str(), c.base.as_str()), ("127.0.0.1:9000", "/base"));
        let c = load(&raw("http://[::1]")).unwrap();
        assert_eq!(c.pool.targets[0].addrs, Addr::Tcp(vec!["[::1]:80".parse().unwrap()]));
        let mut r = raw("https://[::1]/x");
        r.tls = Some(RawTls { verify: Some(false), ..RawTls::default() });
        let c = load(&r).unwrap();
        assert_eq!((&c.pool.targets[0].addrs, c.base.as_str()), (&Addr::Tcp(vec!["[::1]:443".parse().unwrap()]), "/x"));
        assert_eq!(c.tls[0].as_ref().unwrap().name, rustls::pki_types::ServerName::try_from("::1").unwrap());
        let mut r = raw("http://[::1]");
        r.tls = Some(RawTls::default());
        assert!(load(&r).is_err());
        let c = load(&raw("unix:/run/app.sock")).unwrap();
        assert_eq!(c.pool.targets[0].addrs, Addr::Unix("/run/app.sock".into()));
        assert!(c.tls[0].is_none());
        assert_eq!(c.connect_timeout, Duration::from_secs(5));
        for bad in ["https://", "http://", "http://u@h", "http://h:99999", "http://h/a?b", "unix:rel", "ftp://x"] {
            assert!(load(&raw(bad)).is_err(), "{bad}");
        }
        let mut r: RawProxy = toml::from_str("upstream = \"http://127.0.0.1:1\"\nidle_timeout = \"250ms\"\n").unwrap();
        assert!(toml::from_str::<RawProxy>("upstream = \"http://127.0.0.1:1\"\nidle_timeout = 0\n").is_err());
        r.host = Some("upstream".into());
        let c = load(&r).unwrap();
        assert_eq!((c.idle_timeout, c.host), (Duration::from_millis(250), HostMode::Upstream));
    }

    #[test]
    fn pools() {
        let r: RawProxy = toml::from_str(
            "upstreams = [\"http://127.0.0.1:1\", { url = \"http://127.0.0.2:1\", weight = 3 }]\n\
             balance = \"hash\"\nhash_key = \"cookie:sid\"\nmax_fails = 0\nfail_timeout = \"2s\"\n\
             fail_status = [500, 503]\nretries = 3\nretry_budget = 0.5\nresolve = \"1s\"\n\
             health = { path = \"/up\", interval = \"100ms\", expect = \"2xx\" }\n",
        )
        .unwrap();
        let c = load(&r).unwrap();
        let p = &c.pool;
        assert_eq!(p.targets.iter().map(|t| t.weight).collect::<Vec<_>>(), [1, 3]);
        assert_eq!((p.policy, &p.hash_key), (Policy::Hash, &HashKey::Cookie("sid".into())));
        assert_eq!((p.passive.max_fails, p.passive.fail_timeout), (0, Duration::from_secs(2)));
        assert_eq!((p.fail_status.as_slice(), p.retries, p.retry_budget), (&[500, 503][..], 3, 0.5));
        let h = p.health.as_ref().unwrap();
        assert_eq!((h.path.as_str(), h.interval, h.healthy, h.unhealthy), ("/up", Duration::from_millis(100), 2, 3));
        assert!(h.expect.admits(204) && !h.expect.admits(500));
        assert_eq!(c.upstream, "http://127.0.0.1:1,http://127.0.0.2:1");
        let d = load(&raw("http://127.0.0.1:1")).unwrap().pool;
        assert_eq!((d.policy, d.retries, d.passive.max_fails, d.fail_status.len()), (Policy::RoundRobin, 1, 3, 3));
        for bad in [
            "upstreams = []",
            "upstream = \"http://127.0.0.1:1\"\nupstreams = [\"http://127.0.0.1:2\"]",
            "upstreams = [\"http://127.0.0.1:1\", \"http://127.0.0.1:1\"]",
            "upstreams = [\"http://127.0.0.1:1/a\", \"http://127.0.0.1:2/b\"]",
            "upstream = \"http://127.0.0.1:1\"\nbalance = \"fastest\"",
            "upstream = \"http://127.0.0.1:1\"\nhash_key = \"ip\"",
            "upstream = \"http://127.0.0.1:1\"\nretry_budget = 2.0",
            "upstream = \"http://127.0.0.1:1\"\nhealth = { expect = \"ok\" }",
            "upstream = \"http://127.0.0.1:1\"\nhealth = { path = \"up\" }",
            "upstream = \"http://no-such-host.invalid:1\"",
        ] {
            let parsed = toml::from_str::<RawProxy>(bad).map_err(|e| e.to_string());
            assert!(parsed.and_then(|r| load(&r)).is_err(), "{bad}");
        }
        assert!(toml::from_str::<RawProxy>("upstream = \"http://127.0.0.1:1\"\nfail_status = [404]").is_err());
        // A name that does not resolve yet is allowed with `resolve`.
        let r: RawProxy = toml::from_str("upstream = \"http://no-such-host.invalid:1\"\nresolve = \"5s\"").unwrap();
        assert_eq!(load(&r).unwrap().pool.targets[0].addrs, Addr::Tcp(vec![]));
    }

    #[test]
    fn hex() {
        let mut v = Vec::new();
        put_hex(&mut v, 0x1a2f);
        assert_eq!(v, b"1a2f");
    }
}
