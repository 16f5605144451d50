//! WebSocket (and any other `Upgrade`) through the proxy.
//!
//! A client's upgrade request (HTTP/1.1 `Upgrade` + `Connection: upgrade`, or HTTP/2
//! extended CONNECT with `:protocol`, RFC 8441) goes upstream on a connection of its own
//! as an HTTP/1.1 `GET` with `Upgrade` (for an HTTP/2 WebSocket client, with the
//! `Sec-WebSocket-Key` HTTP/1.1 needs, RFC 8441 §5). If the upstream switches (101), the
//! client gets 101 (HTTP/1.1) or 200 (HTTP/2) with the upstream's end-to-end fields, and
//! bytes then flow both ways as they come, each direction with its own backpressure. A
//! client that ends its side half-closes the upstream; the upstream closing ends the
//! tunnel. A tunnel silent both ways for `tunnel_idle_timeout` is closed. Any other answer
//! is relayed as an ordinary response.

use std::hash::{BuildHasher, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use selvedge::http::header::{SEC_WEBSOCKET_ACCEPT, UPGRADE};
use selvedge::http::{HeaderValue, Version};
use selvedge::{Body, BodyWriter, Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::forward::{self, ComposeError, Framing};
use super::{relay_fields, Fail, Route};
use crate::upstream::transport::conn::{Tunnel, Wait};

impl Route {
    /// Serves an upgrade request (see the module's text).
    pub(super) async fn tunnel(self: Arc<Self>, mut req: Request) -> Response {
        let Some(proto) = req.upgrade().map(str::to_owned) else { return Fail::Client.response() };
        if !proto.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
            return Fail::Client.response();
        }
        let h2 = req.version() == Version::HTTP_2;
        // The member: a connection failure (nothing sent) moves on to another.
        let mut attempts = self.pool.attempts(&req);
        let (picked, mut conn) = loop {
            let Some(picked) = self.pool.pick(&mut attempts) else { return Fail::Connect.response() };
            match self.connect(&picked.ep).await {
                Ok(c) => break (picked, c),
                Err(f) => {
                    if f != Fail::AtLimit {
                        picked.failed(f.describe());
                    }
                    if !self.pool.may_retry(&mut attempts) {
                        return f.response();
                    }
                }
            }
        };
        let mut head = Vec::with_capacity(512);
        let rw = &self.rws[picked.ep.target];
        if let Err(ComposeError::Unrepresentable) = forward::compose(&mut head, &req, rw, Framing::None) {
            return Fail::Client.response();
        }
        if h2 {
            // Extended CONNECT is HTTP/1.1's GET with Upgrade.
            if let Some(rest) = head.strip_prefix(b"CONNECT ") {
                head = [&b"GET "[..], rest].concat();
            }
        }
        // The upgrade itself: hop-by-hop, so `compose` left it out.
        head.truncate(head.len() - 2);
        head.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
        head.extend_from_slice(proto.as_bytes());
        head.extend_from_slice(b"\r\n");
        if h2 && proto.eq_ignore_ascii_case("websocket") && req.header("sec-websocket-key").is_none() {
            head.extend_from_slice(b"sec-websocket-key: ");
            head.extend_from_slice(&websocket_key());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");

        match conn.write_all(&mut [&head], self.cfg.idle_timeout, None).await {
            Ok(_) => {}
            Err(Wait::Timeout) => return Fail::Timeout.response(),
            Err(Wait::Io(_)) => return Fail::Bad.response(),
        }
        let h = match self.read_head(&mut conn, true).await {
            Ok(h) => h,
            Err(f) => {
                picked.failed(f.describe());
                return f.response();
            }
        };
        picked.succeeded();
        if h.status != 101 {
            // Not switching (426, 403, 404...): an ordinary answer, on a connection that is
            // not reused.
            conn.closing = true;
            let whole = match self.read_small(&mut conn, &h, false).await {
                Ok(w) => w,
                Err(f) => return f.response(),
            };
            return self.respond(super::Answer { conn, head: h, whole }, false, picked).await;
        }
        let head_bytes = Bytes::copy_from_slice(&conn.rbuf[..h.len]);
        conn.rbuf.advance(h.len);
        let mut fields = Vec::new();
        relay_fields(&mut fields, &head_bytes, &h, &conn.fields, false);
        if h2 {
            // HTTP/2 has no key/accept handshake (RFC 8441 §5).
            fields.retain(|(n, _)| n != SEC_WEBSOCKET_ACCEPT);
        } else {
            let up = conn
                .fields
                .iter()
                .find(|f| head_bytes[f.name.range()].eq_ignore_ascii_case(b"upgrade"))
                .and_then(|f| HeaderValue::from_maybe_shared(head_bytes.slice(f.value.range())).ok());
            let value = up.or_else(|| HeaderValue::from_str(&proto).ok());
            if let Some(v) = value {
                fields.push((UPGRADE, v));
            }
        }
        let tunnel = conn.into_tunnel();
        let idle = self.cfg.tunnel_idle_timeout;
        // The member counts the tunnel as in flight while it lasts (least connections).
        let mut res = Response::upgrade(&mut req, move |from, to| async move {
            let _in_flight = picked;
            pump(tunnel, from, to, idle).await
        });
        res.headers_mut().extend(fields);
        res
    }
}

/// Moves bytes both ways until the upstream closes, either side fails, or nothing moved
/// for `idle`.
async fn pump(t: Tunnel, mut from: Body, mut to: BodyWriter, idle: Duration) -> io::Result<()> {
    let Tunnel { mut rd, mut wr, early, permit } = t;
    let _held = permit;
    let start = Instant::now();
    // Milliseconds since `start` of the last byte moved either way.
    let last = AtomicU64::new(0);
    let touch = || last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    let up = async {
        loop {
            match while_busy(start, &last, idle, from.chunk()).await? {
                Some(Ok(b)) => {
                    touch();
                    while_busy(start, &last, idle, wr.write_all(&b)).await??;
                }
                Some(Err(e)) => return Err(io::Error::other(e)),
                None => {
                    // The client is done sending: half-close, and keep relaying down.
                    let _ = wr.shutdown().await;
                    return std::future::pending().await;
                }
            }
        }
    };
    let down = async {
        if !early.is_empty() {
            to.write(&early).await?;
        }
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = while_busy(start, &last, idle, rd.read(&mut buf)).await??;
            if n == 0 {
                return Ok(());
            }
            touch();
            to.write(&buf[..n]).await?;
        }
    };
    tokio::select! {
        r = up => r,
        r = down => r,
    }
}

/// `fut`, unless the tunnel as a whole (the last byte either way, `last` ms after `start`)
/// stays idle for `idle` first.
async fn while_busy<T>(
    start: Instant,
    last: &AtomicU64,
    idle: Duration,
    fut: impl std::future::Future<Output = T>,
) -> io::Result<T> {
    tokio::pin!(fut);
    loop {
        let quiet = start.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
        if quiet >= idle {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "tunnel idle"));
        }
        if let Ok(v) = tokio::time::timeout(idle - quiet, &mut fut).await {
            return Ok(v);
        }
    }
}

/// A fresh `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1).
fn websocket_key() -> Vec<u8> {
    let mut raw = [0u8; 16];
    for (i, half) in raw.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    base64(&raw)
}

fn base64(data: &[u8]) -> Vec<u8> {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_and_keys() {
        assert_eq!(super::base64(b"the sample nonce"), b"dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(super::base64(b"ab"), b"YWI=");
        assert_eq!(super::base64(b"abc"), b"YWJj");
        let (a, b) = (super::websocket_key(), super::websocket_key());
        assert_eq!(a.len(), 24);
        assert_ne!(a, b);
    }
}
