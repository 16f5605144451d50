//! What a request's handlers tell the access log and the metrics about it, and its id.
//!
//! A request whose route waits (proxy, CGI) runs inside a task-local [`Exchange`] that
//! the proxy fills in ([`upstream`]) and reads ([`request_id`], sent upstream as
//! `X-Request-Id`); static files never touch it. Request ids are generated per thread
//! (a random 64-bit prefix and a counter: no shared state), or kept from the client's
//! `X-Request-Id` when the configuration trusts it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use selvedge::Request;

/// What the handlers of one request report.
#[derive(Debug, Default, Clone)]
pub struct Exchange {
    /// The request id, if one is used.
    pub request_id: Option<RequestId>,
    /// The upstream that answered (or failed), on a proxied request.
    pub upstream: Option<Upstream>,
}

/// A proxied request's upstream.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The upstream's address (`127.0.0.1:9000`, `unix:/run/app.sock`).
    pub addr: std::sync::Arc<str>,
    /// From sending the request to the upstream's response head (or the failure).
    pub time: Duration,
    /// No valid answer: refused, reset, timed out, invalid.
    pub failed: bool,
}

tokio::task_local! {
    static EXCHANGE: RefCell<Exchange>;
}

/// Runs `fut` with `ex` as its [`Exchange`]; returns its output and what was reported.
///
/// Written as a plain future around tokio's task-local scope rather than as an `async fn`:
/// an `async` wrapper keeps `fut` twice (as its captured argument and as the awaited
/// future), and a proxied request's future is boxed and moved, so every byte of it costs.
pub fn scope<F: Future>(ex: Exchange, fut: F) -> impl Future<Output = (F::Output, Exchange)> {
    EXCHANGE.scope(RefCell::new(ex), TakeExchange { fut })
}

pin_project_lite::pin_project! {
    /// `fut`, then the exchange it reported (taken while still inside the scope).
    struct TakeExchange<F> {
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for TakeExchange<F> {
    type Output = (F::Output, Exchange);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let out = std::task::ready!(self.project().fut.poll(cx));
        Poll::Ready((out, EXCHANGE.with(|c| std::mem::take(&mut *c.borrow_mut()))))
    }
}

/// The proxy: the upstream `addr` answered (or `failed`) after `since`.
pub fn upstream(addr: &std::sync::Arc<str>, since: Instant, failed: bool) {
    let _ = EXCHANGE.try_with(|c| {
        c.borrow_mut().upstream = Some(Upstream { addr: addr.clone(), time: since.elapsed(), failed });
    });
}

/// The current request's id, inside [`scope`].
pub fn request_id() -> Option<RequestId> {
    EXCHANGE.try_with(|c| c.borrow().request_id).ok().flatten()
}

/// A request id: up to 64 visible ASCII bytes, stored inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestId {
    len: u8,
    bytes: [u8; 64],
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RequestId {
    /// The id's text.
    pub fn as_str(&self) -> &str {
        // Only visible ASCII is ever stored.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }

    /// `text` as an id: 1 to 64 bytes of `A-Z a-z 0-9 - _ . : + / =` (what request-id
    /// generators use); anything else is not kept.
    pub fn parse(text: &[u8]) -> Option<RequestId> {
        let ok = |b: &u8| b.is_ascii_alphanumeric() || b"-_.:+/=".contains(b);
        if text.is_empty() || text.len() > 64 || !text.iter().all(ok) {
            return None;
        }
        let mut bytes = [0u8; 64];
        bytes[..text.len()].copy_from_slice(text);
        Some(RequestId { len: text.len() as u8, bytes })
    }

    /// A new id: 32 hex digits, this thread's random prefix then its counter.
    pub fn generate() -> RequestId {
        thread_local! {
            static NEXT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
        }
        let (prefix, n) = NEXT.with(|c| {
            let (mut prefix, n) = c.get();
            if prefix == 0 {
                prefix = random_u64() | 1;
            }
            c.set((prefix, n.wrapping_add(1)));
            (prefix, n)
        });
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0u8; 64];
        let digits = (u128::from(prefix) << 64 | u128::from(n)).to_be_bytes();
        for (pair, d) in bytes[..32].chunks_exact_mut(2).zip(digits) {
            pair[0] = HEX[usize::from(d >> 4)];
            pair[1] = HEX[usize::from(d & 15)];
        }
        RequestId { len: 32, bytes }
    }

    /// The id for `req`: the client's `X-Request-Id` when `trust` and it is well formed,
    /// else a new one.
    pub fn for_request(req: &Request, trust: bool) -> RequestId {
        trust
            .then(|| req.header("x-request-id").and_then(RequestId::parse))
            .flatten()
            .unwrap_or_else(RequestId::generate)
    }
}

/// 64 random bits from the standard library's randomly keyed hasher.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_hex_and_parse_is_strict() {
        let a = RequestId::generate();
        let b = RequestId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a.as_str()[..16], b.as_str()[..16]);
        let other = std::thread::spawn(RequestId::generate).join().unwrap();
        assert_ne!(other.as_str()[..16], a.as_str()[..16]);
        assert_eq!(RequestId::parse(b"abc-123_x").unwrap().as_str(), "abc-123_x");
        for bad in [&b""[..], b"a b", b"a\"b", b"\xff", &[b'a'; 65]] {
            assert!(RequestId::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_scope_collects_what_handlers_report() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let id = RequestId::generate();
        let addr: std::sync::Arc<str> = "127.0.0.1:9".into();
        let ((), ex) = rt.block_on(scope(Exchange { request_id: Some(id), upstream: None }, async {
            assert_eq!(request_id(), Some(id));
            upstream(&addr, Instant::now(), true);
        }));
        assert!(ex.upstream.unwrap().failed);
        assert_eq!(request_id(), None);
        upstream(&addr, Instant::now(), false); // outside a scope: ignored
    }
}
