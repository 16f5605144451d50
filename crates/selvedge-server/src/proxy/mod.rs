//! Reverse-proxy routes to HTTP/1.1 upstreams (TCP or Unix socket).
//!
//! One request's path, as plain sequential code:
//!
//! 1. **Connection**: an idle keep-alive connection from this worker's pool (`pool`),
//!    checked for staleness, else a new one (`connect_timeout`, and at most
//!    `max_connections` per upstream per worker).
//! 2. **Request**: the head is composed once (`forward`): hop-by-hop fields removed,
//!    `Host` kept or rewritten, `Forwarded`/`X-Forwarded-*` for this hop, and always
//!    re-framed (`Content-Length` when the client's length is known, else `chunked`). The
//!    body is streamed chunk by chunk as the client sends it: each piece is written before
//!    the next is read (backpressure both ways), while the upstream is watched for an early
//!    answer (a final response ends the upload; interim 1xx are consumed).
//! 3. **Response head**: parsed strictly (`head`) within `first_byte_timeout`; interim
//!    responses (100 Continue, 103...) are swallowed. A reused connection that fails before
//!    the first response byte is retried once on a new connection, for idempotent requests
//!    without a body only.
//! 4. **Response body**: up to 64 KiB with a `Content-Length` is read at once and answered
//!    as one buffer (the connection goes back to the pool at once); anything else is
//!    streamed to the client piece by piece (the engine's writer waits while the client is
//!    slow, so nothing piles up), each upstream read within `idle_timeout`. A body that
//!    breaks off ends the client's response without its terminator (HTTP/1.1 chunked) or
//!    with a stream reset (HTTP/2), and the connection is closed, never reused.
//!
//! Errors: a refused, reset or invalid upstream is 502, a timeout 504, the connection limit
//! reached for `connect_timeout` is 503.
//!
//! Upgrade requests (WebSocket over HTTP/1.1, or HTTP/2 extended CONNECT) are tunnelled on
//! a connection of their own: see `tunnel`.
//!
//! Limits of this design: an upstream that answers before the upload ends stops the upload
//! (right for early 413/401, not for full-duplex streaming; tunnels are full duplex); the
//! upstream's `Date` and `Server` are replaced by the engine's, as nginx does by default.

#![forbid(unsafe_code)]

mod forward;
mod head;
mod tunnel;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use selvedge::h1::body::{BodyLimits, Decoded, Decoder};
use selvedge::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use selvedge::http::{HeaderName, HeaderValue, Method, StatusCode};
use selvedge::message::HeaderSpan;
use selvedge::{Body, BodyWriter, Request, Response};
use serde::Deserialize;

pub use crate::backend::conn::Addr;
use crate::backend::conn::{Conn, Wait, Written};
use crate::backend::pool;
pub use crate::backend::pool::PoolLimits;
use crate::backend::tls::{RawTls, TlsTarget};
use crate::config::units::{Count, NonZeroDur, Size};
pub use forward::HostMode;
use forward::{ComposeError, Framing, Rewrite};
pub use head::HeadLimits;
use head::ResponseHead;

/// Responses with a `Content-Length` up to this size are read whole and sent as one buffer.
const SMALL_BODY: u64 = 64 * 1024;
/// Room made in the receive buffer for each read of a streamed body.
const STREAM_READ: usize = 64 * 1024;

/// A route's `proxy = { ... }` table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProxy {
    /// `http://host[:port][/base]`, `https://...` or `unix:/path/to.sock`.
    pub upstream: String,
    /// TLS to an `https://` upstream.
    pub tls: Option<RawTls>,
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
    /// Largest upstream response head.
    pub max_response_head: Option<Size<64, { u32::MAX as u64 }>>,
    /// Most fields in an upstream response head.
    pub max_response_headers: Option<Count<1, 65_535>>,
}

/// A checked proxy route configuration; every default is documented on its field.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The upstream as written.
    pub upstream: String,
    /// Where it is (host names resolved when the configuration is loaded).
    pub addr: Addr,
    /// The upstream's authority as written (`Host` with `host = "upstream"`).
    pub upstream_host: String,
    /// TLS (an `https://` upstream): verified against the system's CAs (or `tls.ca`) for
    /// the upstream's host name (or `tls.sni`).
    pub tls: Option<TlsTarget>,
    /// The upstream URL's path, without a trailing `/`.
    pub base: String,
    /// `Host` sent upstream: `preserve` (the client's; default), `upstream`, or a literal.
    pub host: HostMode,
    /// Remove the route's prefix from the forwarded path: `false`.
    pub strip_prefix: bool,
    /// Keep the client's `Forwarded`/`X-Forwarded-*` and append this hop: `false` (they are
    /// replaced, so a client cannot forge them).
    pub trust_forwarded: bool,
    /// Time to open a connection (and to wait for a free one under `max_connections`): 5 s.
    pub connect_timeout: Duration,
    /// Time from the request's end to the response's first byte: 60 s.
    pub first_byte_timeout: Duration,
    /// Time any later read or write on the upstream may wait: 60 s.
    pub idle_timeout: Duration,
    /// Pool: 64 idle connections per upstream per worker, each kept 15 s; at most 1024
    /// connections per upstream per worker.
    pub pool: PoolLimits,
    /// Response heads: 32 KiB and 100 fields at most (else 502).
    pub head: HeadLimits,
    /// A WebSocket (or other `Upgrade`) tunnel with no bytes either way for this long is
    /// closed: 300 s.
    pub tunnel_idle_timeout: Duration,
}

impl ProxyConfig {
    /// Checks `raw`.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawProxy) -> Result<ProxyConfig, String> {
        let (addr, upstream_host, base, https) = parse_upstream(&raw.upstream)?;
        let tls = match (https, &raw.tls) {
            (true, t) => {
                let host = match upstream_host.strip_prefix('[') {
                    Some(v6) => v6.split(']').next().unwrap_or(v6),
                    None => upstream_host.rsplit_once(':').map_or(upstream_host.as_str(), |(h, _)| h),
                };
                let default = RawTls::default();
                Some(TlsTarget::new(t.as_ref().unwrap_or(&default), host, &[b"http/1.1"])?)
            }
            (false, Some(_)) => {
                return Err(format!("proxy upstream {:?}: tls needs an https:// upstream", raw.upstream))
            }
            (false, None) => None,
        };
        let secs = |v: Option<NonZeroDur>, default: u64| v.map_or(Duration::from_secs(default), NonZeroDur::get);
        let host = match raw.host.as_deref() {
            None | Some("preserve") => HostMode::Preserve,
            Some("upstream") => HostMode::Upstream,
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()) => HostMode::Fixed(h.to_string()),
            Some(h) => return Err(format!("proxy host {h:?}: \"preserve\", \"upstream\" or a host name")),
        };
        let max_head = raw.max_response_head.map_or(32 * 1024, Size::get_usize);
        Ok(ProxyConfig {
            upstream: raw.upstream.clone(),
            addr,
            upstream_host,
            tls,
            base,
            host,
            strip_prefix: raw.strip_prefix.unwrap_or(false),
            trust_forwarded: raw.trust_forwarded.unwrap_or(false),
            connect_timeout: secs(raw.connect_timeout, 5),
            first_byte_timeout: secs(raw.first_byte_timeout, 60),
            idle_timeout: secs(raw.idle_timeout, 60),
            pool: PoolLimits {
                max_idle: raw.max_idle.map_or(64, Count::get_usize),
                keepalive: secs(raw.keepalive_timeout, 15),
                max_connections: raw.max_connections.map_or(1024, Count::get_usize),
                release_idle: false,
            },
            head: HeadLimits { max_head, max_headers: raw.max_response_headers.map_or(100, Count::get_usize) },
            tunnel_idle_timeout: secs(raw.tunnel_idle_timeout, 300),
        })
    }
}

/// Splits `http://host[:port][/base]`, `https://...` or `unix:/path` into the address, the
/// authority, the base path and whether it is `https`.
fn parse_upstream(s: &str) -> Result<(Addr, String, String, bool), String> {
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("proxy upstream {s:?}: a unix socket needs an absolute path"));
        }
        return Ok((Addr::Unix(PathBuf::from(path)), "localhost".into(), String::new(), false));
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
    let addrs: Vec<_> =
        (host, port).to_socket_addrs().map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(bad("resolves to no address"));
    }
    Ok((Addr::Tcp(addrs), authority.to_string(), base.trim_end_matches('/').to_string(), https))
}

/// The app serving a proxy route.
#[derive(Debug)]
pub struct Proxy {
    route: Arc<Route>,
}

#[derive(Debug)]
struct Route {
    cfg: ProxyConfig,
    rw: Rewrite,
    /// This upstream's pool slot in every worker.
    slot: usize,
    /// The upstream as the access log and metrics name it (`host:port`, `unix:PATH`).
    label: Arc<str>,
}

/// Why an exchange failed.
#[derive(Debug, PartialEq, Eq)]
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
    /// A proxy app for the route at `prefix`.
    ///
    /// # Errors
    /// Never: the configuration was checked when loaded.
    pub fn new(cfg: &ProxyConfig, prefix: &str) -> std::io::Result<Proxy> {
        let strip = if cfg.strip_prefix { prefix.trim_end_matches('/').to_string() } else { String::new() };
        let rw = Rewrite {
            base: cfg.base.clone(),
            strip,
            host: cfg.host.clone(),
            upstream_host: cfg.upstream_host.clone(),
            trust_forwarded: cfg.trust_forwarded,
        };
        let slot = pool::slot_of(&cfg.upstream);
        let label: Arc<str> = match &cfg.addr {
            Addr::Unix(p) => format!("unix:{}", p.display()).into(),
            Addr::Tcp(_) => cfg.upstream_host.as_str().into(),
        };
        Ok(Proxy { route: Arc::new(Route { cfg: cfg.clone(), rw, slot, label }) })
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &str {
        &self.route.cfg.upstream
    }

    /// Serves one request.
    pub async fn handle(&self, mut req: Request) -> Response {
        let route = &self.route;
        if req.upgrade().is_some() {
            return Box::pin(route.clone().tunnel(req)).await;
        }
        let mut body = req.take_body();
        let framing = forward::framing(&req, body.content_length());
        let retry_ok = forward::retryable(&req, framing);
        let is_head = req.method() == Method::HEAD;
        let mut head: Vec<u8> = Vec::new();
        let mut retried = false;
        let sent = std::time::Instant::now();
        let failed = |f: Fail| {
            crate::observe::upstream(&route.label, sent, f != Fail::Client);
            f.response()
        };
        let (conn, resp) = loop {
            let pooled = if retried { None } else { pool::checkout(route.slot, &route.cfg.pool) };
            let reused = pooled.is_some();
            let mut conn = match pooled {
                Some(c) => c,
                // Boxed: connecting is rare once the pool is warm, and its state is large.
                None => match Box::pin(route.connect()).await {
                    Ok(c) => c,
                    Err(f) => return failed(f),
                },
            };
            if head.is_empty() {
                std::mem::swap(&mut head, &mut conn.wbuf);
                head.clear();
                if let Err(ComposeError::Unrepresentable) = forward::compose(&mut head, &req, &route.rw, framing) {
                    return failed(Fail::Client);
                }
            }
            let r = route.exchange(&mut conn, &head, &mut body, framing).await;
            match r {
                Ok(h) => {
                    conn.wbuf = head;
                    break (conn, h);
                }
                Err(Fail::Closed) if reused && retry_ok && !retried => retried = true,
                Err(f) => return failed(f),
            }
        };
        crate::observe::upstream(&route.label, sent, false);
        drop(body);
        route.respond(conn, resp, is_head).await
    }
}

impl Route {
    /// A new connection (or one given back while waiting under `max_connections`), within
    /// `connect_timeout`.
    async fn connect(&self) -> Result<Conn, Fail> {
        let cfg = &self.cfg;
        let permit = match pool::permit(self.slot, &cfg.pool, cfg.connect_timeout).await {
            Ok(pool::Permit::Idle(c)) => return Ok(c),
            Ok(pool::Permit::New(p)) => p,
            Err(_) => return Err(Fail::AtLimit),
        };
        match Conn::connect_tls(&cfg.addr, cfg.tls.as_ref(), cfg.connect_timeout, permit).await {
            Ok(c) => Ok(c),
            Err(Wait::Timeout) => {
                tracing::warn!("proxy {}: connect timed out", cfg.upstream);
                Err(Fail::Timeout)
            }
            Err(Wait::Io(e)) => {
                tracing::warn!("proxy {}: cannot connect: {e}", cfg.upstream);
                Err(Fail::Connect)
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

    /// Turns the upstream's response into the client's.
    async fn respond(self: &Arc<Self>, mut conn: Conn, h: ResponseHead, is_head: bool) -> Response {
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

        // A small body is read whole: head and body then travel in one buffer, and the
        // connection is free again before the client is answered.
        let small = match (&kind, h.content_length) {
            (BodyKind::Framed(_), Some(n)) if !h.chunked && n <= SMALL_BODY => Some(n as usize),
            (BodyKind::None, _) => Some(0),
            _ => None,
        };
        if let Some(n) = small {
            while conn.rbuf.len() < h.len + n {
                match conn.read(cfg.idle_timeout, h.len + n - conn.rbuf.len()).await {
                    Ok(0) | Err(Wait::Io(_)) => return Fail::Bad.response(),
                    Ok(_) => {}
                    Err(Wait::Timeout) => return Fail::Timeout.response(),
                }
            }
            let msg = Bytes::copy_from_slice(&conn.rbuf[..h.len + n]);
            conn.rbuf.advance(h.len + n);
            let mut res = match kind {
                BodyKind::None => head_response(status, is_head.then_some(h.content_length).flatten()),
                _ => Response::bytes(status, msg.slice(h.len..)),
            };
            relay_fields(res.headers_mut(), &msg, &h, &conn.fields, false);
            if keep_alive {
                pool::checkin(self.slot, &cfg.pool, conn);
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
                pool::checkin(route.slot, &route.cfg.pool, conn);
            }
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
    out.reserve(fields.len());
    for f in fields {
        let name = &head[f.name.range()];
        if forward::dropped_response_field(name) || tokens.iter().any(|t| t.eq_ignore_ascii_case(name)) {
            continue;
        }
        let Ok(name) = HeaderName::from_bytes(name) else { continue };
        if name == CONTENT_LENGTH && !keep_length {
            continue;
        }
        let Ok(value) = HeaderValue::from_maybe_shared(head.slice(f.value.range())) else { continue };
        out.push((name, value));
    }
}

/// Appends the lowercase hex digits of `n` (chunk sizes).
fn put_hex(dst: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 16];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    dst.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(upstream: &str) -> RawProxy {
        RawProxy {
            upstream: upstream.into(),
            tls: None,
            host: None,
            strip_prefix: None,
            trust_forwarded: None,
            connect_timeout: None,
            first_byte_timeout: None,
            idle_timeout: None,
            keepalive_timeout: None,
            max_idle: None,
            max_connections: None,
            max_response_head: None,
            max_response_headers: None,
            tunnel_idle_timeout: None,
        }
    }

    #[test]
    fn upstream_urls() {
        let c = ProxyConfig::from_raw(&raw("http://127.0.0.1:9000/base/")).unwrap();
        assert_eq!(c.addr, Addr::Tcp(vec!["127.0.0.1:9000".parse().unwrap()]));
        assert_eq!((c.upstream_host.as_str(), c.base.as_str()), ("127.0.0.1:9000", "/base"));
        let c = ProxyConfig::from_raw(&raw("http://[::1]")).unwrap();
        assert_eq!(c.addr, Addr::Tcp(vec!["[::1]:80".parse().unwrap()]));
        let mut r = raw("https://[::1]/x");
        r.tls = Some(RawTls { verify: Some(false), ..RawTls::default() });
        let c = ProxyConfig::from_raw(&r).unwrap();
        assert_eq!((c.addr, c.base.as_str()), (Addr::Tcp(vec!["[::1]:443".parse().unwrap()]), "/x"));
        assert_eq!(c.tls.unwrap().name, rustls::pki_types::ServerName::try_from("::1").unwrap());
        let mut r = raw("http://[::1]");
        r.tls = Some(RawTls::default());
        assert!(ProxyConfig::from_raw(&r).is_err());
        let c = ProxyConfig::from_raw(&raw("unix:/run/app.sock")).unwrap();
        assert_eq!(c.addr, Addr::Unix("/run/app.sock".into()));
        assert_eq!(c.connect_timeout, Duration::from_secs(5));
        for bad in ["https://", "http://", "http://u@h", "http://h:99999", "http://h/a?b", "unix:rel", "ftp://x"] {
            assert!(ProxyConfig::from_raw(&raw(bad)).is_err(), "{bad}");
        }
        let mut r: RawProxy = toml::from_str("upstream = \"http://127.0.0.1:1\"\nidle_timeout = \"250ms\"\n").unwrap();
        assert!(toml::from_str::<RawProxy>("upstream = \"http://127.0.0.1:1\"\nidle_timeout = 0\n").is_err());
        r.host = Some("upstream".into());
        let c = ProxyConfig::from_raw(&r).unwrap();
        assert_eq!((c.idle_timeout, c.host), (Duration::from_millis(250), HostMode::Upstream));
    }

    #[test]
    fn hex() {
        let mut v = Vec::new();
        put_hex(&mut v, 0x1a2f);
        assert_eq!(v, b"1a2f");
    }
}
