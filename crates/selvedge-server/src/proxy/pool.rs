//! Idle keep-alive connections to upstreams, one pool per worker thread (no lock: each
//! worker is a single-threaded runtime, so a connection is taken and given back on the
//! thread that uses it).
//!
//! - One slot per upstream as written (`upstream = ...`), numbered once per process
//!   ([`slot_of`]), so a lookup is an index and a reload that keeps an upstream keeps its
//!   idle connections.
//! - Last in, first out: the warmest connection is reused; the oldest idle ones sit at the
//!   front and expire after `keepalive_timeout` (checked on use, and for every upstream at
//!   most once a second, so a pool nobody uses any more empties too).
//! - At most `max_idle` idle connections per upstream; more are closed.
//! - `max_connections` per upstream per worker (busy and idle) is a semaphore: a permit is
//!   taken only to open a new connection and held by it until it closes, so reuse costs
//!   nothing.
//! - A connection is checked before reuse ([`Conn::is_stale`]): closed or talking
//!   upstream sockets are dropped.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use selvedge::time::timeout::now_ms;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::conn::Conn;

/// Pool limits of one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Idle connections kept.
    pub max_idle: usize,
    /// How long an idle connection is kept.
    pub keepalive: Duration,
    /// Connections open at once (busy or idle); 0: no limit.
    pub max_connections: usize,
}

/// Buffers larger than this are dropped when a connection goes idle.
const KEEP_BUFFER: usize = 64 * 1024;

struct Slot {
    /// Idle connections with the time they went idle (`now_ms`), oldest first.
    idle: VecDeque<(Conn, u64)>,
    /// The upstream's `keepalive_timeout` as last seen (for the sweep).
    keepalive: Duration,
    limit: usize,
    sem: Option<Arc<Semaphore>>,
}

struct Pools {
    slots: Vec<Slot>,
    last_sweep: u64,
}

thread_local! {
    static POOLS: RefCell<Pools> = const { RefCell::new(Pools { slots: Vec::new(), last_sweep: 0 }) };
}

/// Upstreams seen by this process, by slot number.
static SLOTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The slot number of upstream `key` (when a route is built, not per request).
pub(crate) fn slot_of(key: &str) -> usize {
    let mut keys = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    match keys.iter().position(|k| k == key) {
        Some(i) => i,
        None => {
            keys.push(key.to_string());
            keys.len() - 1
        }
    }
}

fn expired(since: u64, now: u64, keepalive: Duration) -> bool {
    now.saturating_sub(since) >= keepalive.as_millis() as u64
}

/// An idle connection of slot `id`, if a usable one is pooled.
pub(crate) fn checkout(id: usize, limits: &PoolLimits) -> Option<Conn> {
    let now = now_ms();
    POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let slot = p.slots.get_mut(id)?;
        while let Some((conn, since)) = slot.idle.pop_back() {
            if !expired(since, now, limits.keepalive) && !conn.is_stale() {
                return Some(conn);
            }
        }
        None
    })
}

/// Gives a connection whose last response was complete back to slot `id`.
pub(crate) fn checkin(id: usize, limits: &PoolLimits, mut conn: Conn) {
    if limits.max_idle == 0 || !conn.rbuf.is_empty() || conn.closing {
        return;
    }
    conn.trim(KEEP_BUFFER);
    let now = now_ms();
    let dropped = POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let mut dropped = Vec::new();
        if now.saturating_sub(p.last_sweep) >= 1000 {
            p.last_sweep = now;
            for slot in p.slots.iter_mut() {
                while slot.idle.front().is_some_and(|(_, since)| expired(*since, now, slot.keepalive)) {
                    dropped.extend(slot.idle.pop_front().map(|(c, _)| c));
                }
            }
        }
        let slot = slot_mut(&mut p, id, limits);
        while slot.idle.front().is_some_and(|(_, since)| expired(*since, now, limits.keepalive)) {
            dropped.extend(slot.idle.pop_front().map(|(c, _)| c));
        }
        if slot.idle.len() >= limits.max_idle {
            dropped.extend(slot.idle.pop_front().map(|(c, _)| c));
        }
        slot.idle.push_back((conn, now));
        dropped
    });
    drop(dropped); // closed outside the borrow
}

fn slot_mut<'a>(p: &'a mut Pools, id: usize, limits: &PoolLimits) -> &'a mut Slot {
    while p.slots.len() <= id {
        p.slots.push(Slot { idle: VecDeque::new(), keepalive: limits.keepalive, limit: usize::MAX, sem: None });
    }
    let slot = &mut p.slots[id];
    slot.keepalive = limits.keepalive;
    if slot.limit != limits.max_connections {
        // New limit (first use, or a reload changed it): connections holding permits of the
        // old semaphore keep them until they close.
        slot.limit = limits.max_connections;
        slot.sem = (limits.max_connections > 0).then(|| Arc::new(Semaphore::new(limits.max_connections)));
    }
    slot
}

/// Why no permit to open a connection was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtLimit;

/// A permit to open one more connection of slot `id`, waiting at most `wait` for one to
/// free up; `Ok(None)` when there is no limit.
pub(crate) async fn permit(
    id: usize,
    limits: &PoolLimits,
    wait: Duration,
) -> Result<Option<OwnedSemaphorePermit>, AtLimit> {
    let sem = POOLS.with(|p| slot_mut(&mut p.borrow_mut(), id, limits).sem.clone());
    let Some(sem) = sem else { return Ok(None) };
    if let Ok(p) = sem.clone().try_acquire_owned() {
        return Ok(Some(p));
    }
    // An idle connection of ours may be what holds the last permit: close the oldest.
    let oldest = POOLS.with(|p| p.borrow_mut().slots.get_mut(id).and_then(|s| s.idle.pop_front()));
    drop(oldest);
    match tokio::time::timeout(wait, sem.acquire_owned()).await {
        Ok(Ok(p)) => Ok(Some(p)),
        _ => Err(AtLimit),
    }
}
