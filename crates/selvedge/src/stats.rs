//! The engine's counters, for embedders to export their own way ([`snapshot`]): connections
//! accepted, open by protocol and parked, file cache hits, misses and evictions.
//!
//! Counters are process-wide (every [`Server`](crate::Server) in the process adds to the
//! same ones). Each thread counts into its own cache-line-aligned shard, with a relaxed
//! load and store no other core writes (no locked read-modify-write on a shared line);
//! [`snapshot`] sums the shards of every thread that ever counted.
//!
//! ```
//! let s = selvedge::stats::snapshot();
//! println!("{} connections open, {} file cache hits", s.open_h1 + s.open_h2, s.file_cache_hits);
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The counters, summed over the threads.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Connections accepted (before TLS).
    pub accepted: u64,
    /// HTTP/1.x connections open now (an `Upgrade: h2c` counts as HTTP/2 from the switch).
    pub open_h1: u64,
    /// HTTP/2 connections open now.
    pub open_h2: u64,
    /// HTTP/1.x connections served to the end (not counting those that switched to HTTP/2).
    pub closed_h1: u64,
    /// HTTP/2 connections served to the end.
    pub closed_h2: u64,
    /// File cache lookups answered from the cache.
    pub file_cache_hits: u64,
    /// File cache lookups that went to the file system.
    pub file_cache_misses: u64,
    /// File cache entries dropped by the reaper.
    pub file_cache_evictions: u64,
    /// File cache entries held now (over every cache).
    pub file_cache_entries: u64,
    /// Idle connections parked now: waiting for their next request without a task (they
    /// count as open too).
    pub parked: u64,
    /// Times an idle connection was parked.
    pub parked_total: u64,
}

/// What a shard counts.
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub(crate) enum Counter {
    Accepted,
    OpenedH1,
    OpenedH2,
    ClosedH1,
    ClosedH2,
    CacheHit,
    CacheMiss,
    CacheEviction,
    CacheInserted,
    HandedOffH1,
    Parked,
    /// Taken out of a parking lot (woken, or closed there).
    Unparked,
}

const COUNTERS: usize = Counter::Unparked as usize + 1;

/// One thread's counters, on cache lines of their own.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Shard([AtomicU64; COUNTERS]);

static SHARDS: Mutex<Vec<Arc<Shard>>> = Mutex::new(Vec::new());

thread_local! {
    static SHARD: Arc<Shard> = {
        let s = Arc::new(Shard::default());
        SHARDS.lock().unwrap_or_else(|p| p.into_inner()).push(s.clone());
        s
    };
}

/// Adds `n` to this thread's `c`.
#[inline]
pub(crate) fn add(c: Counter, n: u64) {
    // A thread being torn down no longer counts.
    let _ = SHARD.try_with(|s| {
        let a = &s.0[c as usize];
        a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    });
}

/// Counts a connection of one protocol as open while it lives.
#[derive(Debug)]
pub(crate) struct OpenConn(bool);

impl OpenConn {
    /// An HTTP/1.x (`h2 == false`) or HTTP/2 connection begins.
    #[inline]
    pub(crate) fn new(h2: bool) -> OpenConn {
        add(if h2 { Counter::OpenedH2 } else { Counter::OpenedH1 }, 1);
        OpenConn(h2)
    }

    /// An HTTP/1.1 connection that becomes HTTP/2 (`Upgrade: h2c`, a prior-knowledge
    /// preface): it leaves the HTTP/1.x counts without counting as closed.
    #[inline]
    pub(crate) fn hand_off(self) {
        add(Counter::HandedOffH1, 1);
        std::mem::forget(self);
    }
}

impl Drop for OpenConn {
    #[inline]
    fn drop(&mut self) {
        add(if self.0 { Counter::ClosedH2 } else { Counter::ClosedH1 }, 1);
    }
}

/// The counters now.
pub fn snapshot() -> Stats {
    let mut t = [0u64; COUNTERS];
    for s in SHARDS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        for (o, a) in t.iter_mut().zip(&s.0) {
            *o = o.wrapping_add(a.load(Ordering::Relaxed));
        }
    }
    let c = |k: Counter| t[k as usize];
    Stats {
        accepted: c(Counter::Accepted),
        open_h1: c(Counter::OpenedH1).saturating_sub(c(Counter::ClosedH1) + c(Counter::HandedOffH1)),
        open_h2: c(Counter::OpenedH2).saturating_sub(c(Counter::ClosedH2)),
        closed_h1: c(Counter::ClosedH1),
        closed_h2: c(Counter::ClosedH2),
        file_cache_hits: c(Counter::CacheHit),
        file_cache_misses: c(Counter::CacheMiss),
        file_cache_evictions: c(Counter::CacheEviction),
        file_cache_entries: c(Counter::CacheInserted).saturating_sub(c(Counter::CacheEviction)),
        parked: c(Counter::Parked).saturating_sub(c(Counter::Unparked)),
        parked_total: c(Counter::Parked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_sum_up() {
        let before = snapshot();
        let ts: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    add(Counter::Accepted, 5);
                    let c = OpenConn::new(true);
                    drop(c);
                    let _keep = std::mem::ManuallyDrop::new(OpenConn::new(false));
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let after = snapshot();
        assert!(after.accepted >= before.accepted + 20);
        assert!(after.closed_h2 >= before.closed_h2 + 4);
        assert!(after.open_h1 >= 4);
    }
}
