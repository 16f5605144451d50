//! Per-thread pools of connection buffers.
//!
//! An idle keep-alive connection gives its receive and send buffers back to its thread's
//! pool while it waits, and takes buffers again when the socket becomes readable. Thousands
//! of idle connections then hold no buffer memory, while a busy worker recycles the same few
//! warm buffers (no allocator traffic per request).

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers kept per thread; more are freed.
const KEEP: usize = 64;

thread_local! {
    static READ: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static WRITE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
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
