//! Per-thread pools of connection buffers.
//!
//! An idle keep-alive connection gives its receive and send buffers back to its thread's
//! pool while it waits, and takes buffers again when the socket becomes readable. Thousands
//! of idle connections then hold no buffer memory, while a busy worker recycles the same few
//! warm buffers (no allocator traffic per request).

use std::cell::RefCell;

use bytes::BytesMut;

use crate::message::HeaderSpan;

/// Buffers kept per thread; more are freed.
const KEEP: usize = 64;

thread_local! {
    static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// Live HTTP/1 connections in this process (see [`hold_while_idle`]).
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts a live HTTP/1 connection for as long as it is held.
pub(crate) struct Live(());

impl Live {
    pub(crate) fn new() -> Live {
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Live(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether an idle connection may keep its buffers while it waits: with no more live
/// connections than one thread's pool keeps buffers, holding them costs no more memory
/// than recycling would, and saves giving them back and taking them again per request.
#[inline]
pub(crate) fn hold_while_idle() -> bool {
    LIVE.load(std::sync::atomic::Ordering::Relaxed) <= KEEP
}

/// A receive buffer with at least `min` bytes of spare capacity.
pub(crate) fn take_read(min: usize) -> BytesMut {
    let mut b = READ.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    if b.capacity() - b.len() < min {
        // Reclaims the whole allocation when nothing else shares it.
        b.reserve(min.max(4096));
    }
    b
}

/// Returns an empty receive buffer.
pub(crate) fn put_read(b: BytesMut) {
    if b.is_empty() && b.capacity() > 0 {
        READ.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < KEEP {
                p.push(b);
            }
        });
    }
}

/// A send buffer (possibly with capacity from earlier use).
pub(crate) fn take_write() -> Vec<u8> {
    WRITE.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

/// Returns a send buffer (it is cleared).
pub(crate) fn put_write(mut b: Vec<u8>) {
    if b.capacity() == 0 || b.capacity() > 1 << 20 {
        return;
    }
    b.clear();
    WRITE.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(b);
        }
    });
}

thread_local! {
    static SPANS: RefCell<Vec<Vec<HeaderSpan>>> = const { RefCell::new(Vec::new()) };
}

/// Header spans recycled from requests this thread dropped (HTTP/1 and HTTP/2 requests
/// each need one such vector; reusing them saves an allocation and a free per request).
const SPANS_CAP: usize = 16;

/// An empty vector for a request's header spans.
pub(crate) fn take_spans() -> Vec<HeaderSpan> {
    SPANS.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| Vec::with_capacity(SPANS_CAP))
}

/// Gives a request's header spans back (kept if of the usual size).
pub(crate) fn put_spans(mut v: Vec<HeaderSpan>) {
    if (SPANS_CAP..=4 * SPANS_CAP).contains(&v.capacity()) {
        v.clear();
        // `try_with`: a request dropped while the thread exits finds no pool.
        let _ = SPANS.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                if p.len() < 4 * KEEP {
                    p.push(v);
                }
            }
        });
    }
}

/// A response's header list: `(name, value)` pairs.
type HeaderList = Vec<(http::HeaderName, http::HeaderValue)>;

thread_local! {
    static HEADERS: RefCell<Vec<HeaderList>> = const { RefCell::new(Vec::new()) };
}

/// Capacity of a fresh header list: most responses carry a few headers.
const HEADERS_CAP: usize = 8;

/// An empty list for a response's headers, recycled from responses this thread sent.
pub(crate) fn take_headers() -> HeaderList {
    HEADERS.with(|p| p.borrow_mut().pop()).unwrap_or_else(|| Vec::with_capacity(HEADERS_CAP))
}

/// Gives a sent response's header list back (kept if of the usual size).
pub(crate) fn put_headers(mut v: HeaderList) {
    if (HEADERS_CAP..=4 * HEADERS_CAP).contains(&v.capacity()) {
        v.clear();
        let _ = HEADERS.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut() {
                if p.len() < KEEP {
                    p.push(v);
                }
            }
        });
    }
}
