//! Proxy routes with `http2 = true`: requests go to the upstream as HTTP/2 streams,
//! many at once over few connections (`transport::h2`): h2c with prior knowledge for
//! `http://` and `unix:` upstreams, ALPN `h2` for `https://` ones (an upstream that picks
//! `http/1.1` is served over HTTP/1.1 instead, and asked again after [`RETRY_H2`]).
//!
//! The request head is composed as for HTTP/1.1 (`forward::compose`: the same hop-by-hop
//! rules, `Host` and forwarding fields) and then carried as HTTP/2 fields (`:method`,
//! `:scheme`, `:authority`, `:path`, lowercase names); `te: trailers` is passed on when
//! the client sent it (gRPC needs it). Both bodies stream at once: the request body is
//! sent by a task of its own while the response is relayed, each within the other side's
//! flow-control window, so bidirectional streams (gRPC) work and nothing is buffered
//! whole. Response trailers are relayed as trailers (HTTP/2 clients; HTTP/1.1 clients do
//! not get them).
//!
//! Failures before the response head are retried like HTTP/1.1 attempts (another member
//! within `retries`), and a stream the upstream refused (RST_STREAM(REFUSED_STREAM), or
//! above a GOAWAY's last stream id) counts as never sent. For a gRPC request
//! (`content-type: application/grpc...`) a failure is answered the gRPC way, as nginx's
//! `grpc_pass` does: status 200 with `grpc-status` 14 (UNAVAILABLE) or 4
//! (DEADLINE_EXCEEDED) in a trailers-only response, never an HTML page; and its
//! `grpc-timeout` bounds the whole exchange.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use selvedge::http::header::CONTENT_TYPE;
use selvedge::http::{HeaderName, HeaderValue, Method, StatusCode};
use selvedge::{Body, Request, Response};
use selvedge_proto::h2::client::ClientSettings;
use selvedge_proto::h2::frame::Reason;

use super::forward::{self, ComposeError, Framing};
use super::{read_body, Fail, Route, SMALL_BODY};
use crate::upstream::pool::Endpoint;
use crate::upstream::transport::conn::{Conn, Wait};
use crate::upstream::transport::h2::{self as conns, Found, H2Conn, Piece, RequestFields, Stream};

/// How long an `https://` upstream that chose HTTP/1.1 in ALPN is served over HTTP/1.1
/// before it is asked for `h2` again.
pub(super) const RETRY_H2: Duration = Duration::from_secs(60);

/// How many times one request is opened again on the same member after the upstream
/// refused its stream unprocessed (REFUSED_STREAM) before that counts as a failure.
const MAX_REFUSALS: u32 = 4;

/// Per upstream of a route: until when (process milliseconds) it is spoken to over
/// HTTP/1.1 because ALPN chose that (0: HTTP/2).
#[derive(Debug, Default)]
pub(super) struct Fallback(Vec<AtomicU64>);

impl Fallback {
    pub(super) fn new(n: usize) -> Fallback {
        Fallback((0..n).map(|_| AtomicU64::new(0)).collect())
    }

    /// Whether upstream `target` is to get HTTP/1.1 now.
    pub(super) fn h1(&self, target: usize) -> bool {
        self.0.get(target).is_some_and(|t| {
            let until = t.load(Ordering::Relaxed);
            until != 0 && selvedge::time::now_ms() < until
        })
    }

    fn set(&self, target: usize) {
        if let Some(t) = self.0.get(target) {
            t.store(selvedge::time::now_ms() + RETRY_H2.as_millis() as u64, Ordering::Relaxed);
        }
    }
}

/// Turns an HTTP/1.1 head composed by `forward::compose` into HTTP/2 fields: the request
/// line and `host` become pseudo-fields, names are lowercased, `transfer-encoding` goes.
fn h2_fields(head: &[u8], https: bool, te_trailers: bool) -> RequestFields {
    let lines = || head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    fn field(line: &[u8]) -> Option<(&[u8], &[u8])> {
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    }
    let first = lines().next().unwrap_or_default();
    let mut parts = first.splitn(3, |&b| b == b' ');
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let host =
        lines().skip(1).filter_map(field).find(|(n, _)| n.eq_ignore_ascii_case(b"host")).map_or(&b""[..], |f| f.1);
    let mut out = RequestFields::with_capacity(head.len() + 48, 16);
    out.push(b":method", method);
    out.push(b":scheme", if https { b"https" } else { b"http" });
    out.push(b":authority", host);
    out.push(b":path", target);
    for (name, value) in lines().skip(1).filter_map(field) {
        if !name.eq_ignore_ascii_case(b"host") && !name.eq_ignore_ascii_case(b"transfer-encoding") {
            out.push(name, value);
        }
    }
    if te_trailers {
        out.push(b"te", b"trailers");
    }
    out
}

/// Whether the client asked for trailers (`TE: trailers`).
fn wants_trailers(req: &Request) -> bool {
    req.header_bytes()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"te"))
        .any(|(_, v)| v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers")))
}

/// Whether the request is a gRPC call.
pub(super) fn is_grpc(req: &Request) -> bool {
    req.header("content-type").is_some_and(|v| v.starts_with(b"application/grpc"))
}

/// gRPC's `grpc-timeout` (a number of at most 8 digits and a unit H M S m u n).
fn grpc_timeout(req: &Request) -> Option<Duration> {
    let v = req.header("grpc-timeout")?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The trailers-only gRPC answer for a failure (nginx's mapping: UNAVAILABLE for an
/// upstream that cannot be reached or broke, DEADLINE_EXCEEDED for a timeout).
pub(super) fn grpc_failure(fail: Fail) -> Response {
    let (code, msg) = match fail {
        Fail::Timeout => ("4", "upstream timed out"),
        Fail::Client => ("13", "request cannot be forwarded"),
        Fail::AtLimit => ("14", "upstream connection limit reached"),
        _ => ("14", "upstream unavailable"),
    };
    Response::new(StatusCode::OK)
        .header(CONTENT_TYPE, "application/grpc")
        .header(HeaderName::from_static("grpc-status"), code)
        .header(HeaderName::from_static("grpc-message"), msg)
}

/// Fields of the upstream's head or trailers that are relayed.
fn relayed(fields: Vec<(HeaderName, HeaderValue)>) -> Vec<(HeaderName, HeaderValue)> {
    let mut fields = fields;
    fields.retain(|(n, _)| !forward::dropped_response_field(n.as_str().as_bytes()));
    fields
}

impl Route {
    /// A new HTTP/2 connection to `ep`: `Ok(None)` when TLS chose HTTP/1.1 in ALPN (the
    /// upstream is then served over HTTP/1.1 for [`RETRY_H2`]).
    async fn connect_h2(&self, ep: &Endpoint) -> Result<Option<Arc<H2Conn>>, Fail> {
        let cfg = &self.cfg;
        let tls = cfg.tls_h2.get(ep.target).and_then(Option::as_ref);
        let conn = match Conn::connect_tls(&ep.addr, tls, cfg.connect_timeout, None).await {
            Ok(c) => c,
            Err(Wait::Timeout) => {
                tracing::warn!("proxy {}: connect timed out", ep.health.name());
                return Err(Fail::Timeout);
            }
            Err(Wait::Io(e)) => {
                tracing::warn!("proxy {}: cannot connect: {e}", ep.health.name());
                return Err(Fail::Connect);
            }
        };
        if tls.is_some() && conn.alpn() != Some(b"h2") {
            tracing::info!("proxy {}: no h2 in ALPN, using HTTP/1.1", ep.health.name());
            self.fallback.set(ep.target);
            return Ok(None);
        }
        let settings = ClientSettings {
            stream_window: cfg.h2_stream_window,
            conn_window: cfg.h2_stream_window.saturating_mul(16).max(cfg.h2_stream_window),
            ..ClientSettings::default()
        };
        let c = H2Conn::start(conn, settings, cfg.pool_limits.keepalive);
        // Streams go on it once the upstream's limits are known (one round trip).
        c.settle(cfg.connect_timeout).await;
        Ok(Some(c))
    }

    /// A stream on a connection to `ep` (opening one if all are full); `Ok(None)`: this
    /// upstream is served over HTTP/1.1 now.
    async fn stream(&self, ep: &Endpoint, fields: &RequestFields, end: bool) -> Result<Option<Stream>, Fail> {
        let started = Instant::now();
        loop {
            match conns::acquire(ep.slot, self.cfg.pool_limits.max_connections, fields, end) {
                Found::Stream(s) => return Ok(Some(s)),
                Found::Open(opening) => {
                    return match Box::pin(self.connect_h2(ep)).await? {
                        None => Ok(None),
                        Some(c) => {
                            let s = c.open(fields, end);
                            opening.done(c);
                            Ok(s)
                        }
                    };
                }
                Found::Wait(n) => {
                    let left = self.cfg.connect_timeout.saturating_sub(started.elapsed());
                    if left.is_zero() || tokio::time::timeout(left, n.notified()).await.is_err() {
                        return Err(Fail::AtLimit);
                    }
                }
                Found::Full => return Err(Fail::AtLimit),
            }
        }
    }

    /// Serves one request over HTTP/2 (see the module's text). `None`: the picked
    /// upstream chose HTTP/1.1; the caller serves the request that way.
    pub(super) async fn handle_h2(self: Arc<Self>, mut req: Request) -> Result<Response, (Request, Body)> {
        let grpc = is_grpc(&req);
        let deadline = grpc_timeout(&req).map(|d| Instant::now() + d);
        let fail = |f: Fail| if grpc { grpc_failure(f) } else { f.response() };
        let mut body = req.take_body();
        let framing = forward::framing(&req, body.content_length());
        let idempotent = forward::idempotent(&req);
        let mut kept: Option<Bytes> = None;
        if let (true, Framing::Length(n @ 1..=SMALL_BODY)) = (idempotent, framing) {
            match read_body(&mut body, n).await {
                Some(b) => kept = Some(b),
                None => return Ok(fail(Fail::Client)),
            }
        }
        let replayable = idempotent && (framing == Framing::None || kept.is_some());
        let is_head = req.method() == Method::HEAD;
        let te = wants_trailers(&req);
        let pool = &self.pool;
        let mut attempts = pool.attempts(&req);
        let mut last = Fail::Connect;
        let sent = Instant::now();
        let mut body = Some(body);
        // A stream the upstream refused unprocessed goes again to the same member.
        let (mut again, mut refusals) = (None, 0);
        loop {
            let picked = match again.take() {
                Some(p) => p,
                None => match pool.pick(&mut attempts) {
                    Some(p) => p,
                    None => return Ok(fail(last)),
                },
            };
            if self.fallback.h1(picked.ep.target) {
                // Served over HTTP/1.1 by the caller (the body is still whole: nothing sent).
                let b = match kept {
                    Some(k) => Body::from_bytes(k),
                    None => body.take().unwrap_or_default(),
                };
                return Err((req, b));
            }
            let mut head = Vec::with_capacity(512);
            if let Err(ComposeError::Unrepresentable) =
                forward::compose(&mut head, &req, &self.rws[picked.ep.target], framing)
            {
                return Ok(fail(Fail::Client));
            }
            let https = self.cfg.tls_h2.get(picked.ep.target).is_some_and(Option::is_some);
            let fields = h2_fields(&head, https, te);
            let has_body = framing != Framing::None;
            let r = self.stream(&picked.ep, &fields, !has_body).await;
            let mut stream = match r {
                Ok(Some(s)) => s,
                Ok(None) => {
                    // ALPN chose HTTP/1.1: the same member, over HTTP/1.1 (the check at the
                    // top of the loop), not the next one (there may be none).
                    again = Some(picked);
                    continue;
                }
                Err(f) => {
                    crate::observe::upstream(&picked.ep.label, sent, true);
                    if f != Fail::AtLimit {
                        picked.failed(f.describe());
                    }
                    if !pool.may_retry(&mut attempts) {
                        return Ok(fail(f));
                    }
                    last = f;
                    continue;
                }
            };
            // The request body goes out on a task of its own, while the response comes.
            let upload = if has_body {
                let b = match &kept {
                    Some(k) => Body::from_bytes(k.clone()),
                    None => body.take().unwrap_or_default(),
                };
                Some(AbortOnDrop(tokio::spawn(upload(stream.sender(), b))))
            } else {
                None
            };
            let first_byte = self.cfg.first_byte_timeout;
            let limit = deadline.map_or(first_byte, |d| d.saturating_duration_since(Instant::now()).min(first_byte));
            let got = match tokio::time::timeout(limit, stream.head()).await {
                Ok(Ok(h)) => Ok(h),
                Ok(Err(Reason::REFUSED_STREAM)) => Err((Fail::Closed, false)),
                Ok(Err(_)) => Err((Fail::Bad, true)),
                Err(_) => {
                    stream.reset(Reason::CANCEL);
                    Err((Fail::Timeout, true))
                }
            };
            if matches!(got, Err((Fail::Closed, false))) && refusals < MAX_REFUSALS && (!has_body || kept.is_some()) {
                // RST_STREAM(REFUSED_STREAM), or above a GOAWAY's last stream id: the upstream
                // did not process it (RFC 9113 §8.7), typically a new connection's streams
                // over a limit its SETTINGS had not announced yet. Not a failure of the
                // member: opened again on it, on a connection with room now.
                refusals += 1;
                drop(upload);
                again = Some(picked);
                continue;
            }
            crate::observe::upstream(&picked.ep.label, sent, got.is_err());
            let (status, fields, end) = match got {
                Ok(h) => h,
                Err((f, was_sent)) => {
                    picked.failed(f.describe());
                    // A streamed body went to the failed stream's task: it cannot be sent again.
                    let resendable = !has_body || kept.is_some();
                    if !resendable || (was_sent && !replayable) || !pool.may_retry(&mut attempts) {
                        return Ok(fail(f));
                    }
                    last = f;
                    continue;
                }
            };
            if pool.fails_on(status) {
                picked.failed(&format!("answered {status}"));
            } else {
                picked.succeeded();
            }
            let Ok(status) = StatusCode::from_u16(status) else { return Ok(fail(Fail::Bad)) };
            let fields = relayed(fields);
            if end || is_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
                let mut res = Response::new(status);
                *res.headers_mut() = fields;
                return Ok(res);
            }
            let idle = self.cfg.idle_timeout;
            let mut res = Response::stream(status, move |mut w| async move {
                let _upload = upload;
                let _picked = picked;
                loop {
                    let limit = deadline.map_or(idle, |d| d.saturating_duration_since(Instant::now()).min(idle));
                    let piece = match tokio::time::timeout(limit, stream.next()).await {
                        Ok(Ok(Some(p))) => p,
                        Ok(Ok(None)) => return Ok(()),
                        Ok(Err(r)) => {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::ConnectionReset,
                                format!("upstream reset the stream: {r:?}"),
                            ))
                        }
                        Err(_) => {
                            stream.reset(Reason::CANCEL);
                            if grpc && deadline.is_some_and(|d| Instant::now() >= d) {
                                w.trailers(vec![
                                    (HeaderName::from_static("grpc-status"), HeaderValue::from_static("4")),
                                    (
                                        HeaderName::from_static("grpc-message"),
                                        HeaderValue::from_static("deadline exceeded"),
                                    ),
                                ]);
                                return Ok(());
                            }
                            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream idle timeout"));
                        }
                    };
                    match piece {
                        Piece::Data(b, end) => {
                            if !b.is_empty() {
                                w.write(&b).await?;
                                stream.release(b.len());
                            }
                            if end {
                                return Ok(());
                            }
                        }
                        Piece::Trailers(t) => {
                            w.trailers(relayed(t));
                            return Ok(());
                        }
                    }
                }
            });
            *res.headers_mut() = fields;
            return Ok(res);
        }
    }
}

/// Aborts the upload task when the exchange is dropped (client gone, or finished).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends the client's body on the stream, piece by piece as it arrives, each within the
/// stream's window; a client body that fails resets the stream.
async fn upload(s: crate::upstream::transport::h2::Sender, mut body: Body) {
    loop {
        match body.chunk().await {
            Some(Ok(b)) => {
                if !b.is_empty() && !s.send(b, false).await {
                    return;
                }
            }
            Some(Err(_)) => return s.reset(Reason::CANCEL),
            None => {
                s.send(Bytes::new(), true).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_from_a_composed_head() {
        let head = b"POST /svc/M?x=1 HTTP/1.1\r\nhost: a.example\r\nContent-Type: application/grpc\r\nx-forwarded-for: 1.2.3.4\r\ntransfer-encoding: chunked\r\n\r\n";
        let f = h2_fields(head, true, true);
        let f: Vec<(&[u8], &[u8])> = f.iter().collect();
        assert_eq!(
            f,
            [
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"https"),
                (b":authority", b"a.example"),
                (b":path", b"/svc/M?x=1"),
                (b"content-type", b"application/grpc"),
                (b"x-forwarded-for", b"1.2.3.4"),
                (b"te", b"trailers"),
            ]
        );
    }

    #[test]
    fn grpc_failures_are_trailers_only() {
        let r = grpc_failure(Fail::Connect);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.header_value(&HeaderName::from_static("grpc-status")).unwrap(), "14");
        let r = grpc_failure(Fail::Timeout);
        assert_eq!(r.header_value(&HeaderName::from_static("grpc-status")).unwrap(), "4");
    }
}
