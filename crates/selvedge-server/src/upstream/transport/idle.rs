//! Idle keep-alive connections to upstreams, one pool per worker thread (no lock: each
//! worker is a single-threaded runtime, so a connection is taken and given back on the
//! thread that uses it).
//!
//! - One slot per upstream as written (`upstream = ...`, a FastCGI `address`), numbered
//!   once per process ([`slot_of`]), so a lookup is an index and a reload that keeps an
//!   upstream keeps its idle connections.
//! - Last in, first out: the warmest connection is reused; the oldest idle ones sit at the
//!   front and expire after `keepalive_timeout`: checked on use, and by a timer task per
//!   worker and slot that runs while the slot holds idle connections, so a worker that goes
//!   quiet closes them on time too.
//! - At most `max_idle` idle connections per upstream; more are closed.
//! - `max_connections` per upstream per worker (busy and idle) is a semaphore: a permit is
//!   taken only to open a new connection and held by it until it closes, so reuse costs
//!   nothing.
//! - A connection is checked before reuse ([`Conn::is_stale`]): closed or talking
//!   upstream sockets are dropped.
//! - A request that finds the limit reached waits (up to `connect_timeout`) for a permit or
//!   for a connection given back to this worker's pool, whichever comes first.
//! - [`PoolLimits::release_idle`] (FastCGI): an application such as php-fpm gives each
//!   connection one of its worker processes for as long as the connection lives; a new
//!   connection beyond its processes waits in its listen backlog until one is closed. An
//!   idle connection kept then holds a process that the waiting connection needs, in this
//!   worker thread or another, and nothing would ever close it while it is reused. So a new
//!   connection still unanswered after [`STARVING_AFTER`] ([`Fresh::starve`]) counts as
//!   starving: the oldest idle connection (this worker's, else another's, whose timer task
//!   listens for the request) is closed for it, or else the next connection that finishes
//!   is closed instead of kept (unless a request of its worker waits under
//!   `max_connections` for one). One close per starving connection: a slow script taken
//!   for a starving connection costs one reconnection, never a stream of them, and a fast
//!   application under a steady load keeps every connection.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use selvedge::time::now_ms;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

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
    /// Opening a connection asks another worker to close an idle one (see the module's
    /// text).
    pub release_idle: bool,
}

/// Buffers larger than this are dropped when a connection goes idle.
const KEEP_BUFFER: usize = 64 * 1024;

/// What the workers' pools of one upstream share.
#[derive(Debug, Default)]
struct Shared {
    /// Idle connections in every worker.
    idle: AtomicUsize,
    /// Asks one worker to close its oldest idle connection.
    release: Notify,
    /// Closes owed to starving connections (see [`Fresh::starve`]).
    owed: AtomicUsize,
}

impl Shared {
    /// Takes one owed close, if any.
    fn take_owed(&self) -> bool {
        self.owed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }
}

/// How long a new connection may go unanswered before it counts as waiting for a process
/// that idle connections hold (see the module's text).
pub(crate) const STARVING_AFTER: Duration = Duration::from_millis(100);

struct Slot {
    /// Idle connections with the time they went idle (`now_ms`), oldest first.
    idle: VecDeque<(Conn, u64)>,
    /// The upstream's `keepalive_timeout` as last seen (for the timer).
    keepalive: Duration,
    limit: usize,
    sem: Option<Arc<Semaphore>>,
    shared: Arc<Shared>,
    /// A timer task runs for this slot in this worker.
    timed: bool,
    /// Releases were asked for (`release_idle` as last seen).
    release_idle: bool,
    /// Signalled when a connection is given back (for requests waiting under the limit).
    returned: Arc<Notify>,
    /// Requests of this worker waiting under the limit.
    waiters: usize,
}

impl Slot {
    fn push(&mut self, conn: Conn, now: u64) {
        self.idle.push_back((conn, now));
        self.shared.idle.fetch_add(1, Ordering::Relaxed);
    }

    fn pop_newest(&mut self) -> Option<(Conn, u64)> {
        let c = self.idle.pop_back();
        if c.is_some() {
            self.shared.idle.fetch_sub(1, Ordering::Relaxed);
        }
        c
    }

    fn pop_oldest(&mut self) -> Option<Conn> {
        let c = self.idle.pop_front();
        if c.is_some() {
            self.shared.idle.fetch_sub(1, Ordering::Relaxed);
        }
        c.map(|(c, _)| c)
    }

    /// Takes the idle connections that expired by `now` (into `out`).
    fn expire(&mut self, now: u64, out: &mut Vec<Conn>) {
        while self.idle.front().is_some_and(|(_, since)| expired(*since, now, self.keepalive)) {
            out.extend(self.pop_oldest());
        }
    }
}

struct Pools {
    slots: Vec<Slot>,
}

thread_local! {
    static POOLS: RefCell<Pools> = const { RefCell::new(Pools { slots: Vec::new() }) };
}

/// Upstreams seen by this process, by slot number.
static SLOTS: Mutex<Vec<(String, Arc<Shared>)>> = Mutex::new(Vec::new());

/// The slot number of upstream `key` (when a route is built, not per request).
pub(crate) fn slot_of(key: &str) -> usize {
    let mut keys = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    match keys.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            keys.push((key.to_string(), Arc::default()));
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
        while let Some((mut conn, since)) = slot.pop_newest() {
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
    let (dropped, start_timer) = POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let mut dropped = Vec::new();
        let slot = slot_mut(&mut p, id, limits);
        slot.expire(now, &mut dropped);
        if slot.idle.len() >= limits.max_idle {
            dropped.extend(slot.pop_oldest());
        }
        let waited_for = slot.waiters > 0;
        if slot.release_idle && !waited_for && slot.shared.take_owed() {
            // A starving connection waits for the application process this one holds.
            dropped.push(conn);
            return (dropped, None);
        }
        slot.push(conn, now);
        slot.returned.notify_one();
        let start = !slot.timed && on_worker_thread();
        slot.timed |= start;
        (dropped, start.then(|| slot.shared.clone()))
    });
    drop(dropped); // closed outside the borrow
    if let Some(shared) = start_timer {
        tokio::spawn(idle_timer(id, shared));
    }
}

/// Whether this thread runs a single-threaded worker runtime, where a task spawned now
/// runs on this thread and sees this thread's pools.
fn on_worker_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// While slot `id` of this worker holds idle connections: closes each when it expires,
/// and the oldest when another worker asks for a release.
async fn idle_timer(id: usize, shared: Arc<Shared>) {
    loop {
        let now = now_ms();
        let found = POOLS.with(|p| {
            let mut p = p.borrow_mut();
            let slot = p.slots.get_mut(id)?;
            let mut dropped = Vec::new();
            slot.expire(now, &mut dropped);
            let next = slot.idle.front().map(|(_, since)| since + slot.keepalive.as_millis() as u64);
            slot.timed = next.is_some();
            Some((next, slot.release_idle, dropped))
        });
        let Some((next, release, dropped)) = found else { return };
        drop(dropped);
        let Some(at) = next else { return };
        // The clock is coarse: never spin on a deadline it has not reached yet.
        let sleep = tokio::time::sleep(Duration::from_millis(at.saturating_sub(now).max(50)));
        if !release {
            sleep.await;
            continue;
        }
        tokio::select! {
            () = sleep => {}
            () = shared.release.notified() => {
                let oldest = POOLS.with(|p| p.borrow_mut().slots.get_mut(id).and_then(Slot::pop_oldest));
                match oldest {
                    Some(c) => {
                        if shared.take_owed() {
                            drop(c);
                        } else {
                            // Paid meanwhile (a connection finished and was closed): keep it.
                            POOLS.with(|p| p.borrow_mut().slots.get_mut(id).map(|s| s.push(c, now_ms())));
                        }
                    }
                    // Nothing here after all: pass the request on.
                    None => shared.release.notify_one(),
                }
            }
        }
    }
}

fn slot_mut<'a>(p: &'a mut Pools, id: usize, limits: &PoolLimits) -> &'a mut Slot {
    while p.slots.len() <= id {
        let n = p.slots.len();
        let shared = SLOTS.lock().unwrap_or_else(|e| e.into_inner()).get(n).map(|(_, s)| s.clone()).unwrap_or_default();
        p.slots.push(Slot {
            idle: VecDeque::new(),
            keepalive: limits.keepalive,
            limit: usize::MAX,
            sem: None,
            shared,
            timed: false,
            release_idle: false,
            returned: Arc::new(Notify::new()),
            waiters: 0,
        });
    }
    let slot = &mut p.slots[id];
    slot.keepalive = limits.keepalive;
    slot.release_idle = limits.release_idle;
    if slot.limit != limits.max_connections {
        // New limit (first use, or a reload changed it): connections holding permits of the
        // old semaphore keep them until they close.
        slot.limit = limits.max_connections;
        slot.sem = (limits.max_connections > 0).then(|| Arc::new(Semaphore::new(limits.max_connections)));
    }
    slot
}

/// Why no connection could be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AtLimit;

/// What [`permit`] got.
#[derive(Debug)]
pub(crate) enum Permit {
    /// A connection given back while waiting under the limit.
    Idle(Conn),
    /// Room to open a connection (`None`: there is no limit).
    New(Option<OwnedSemaphorePermit>),
}

/// Room to open one more connection of slot `id`; at the limit, waits at most `wait` for a
/// permit to free up or a connection to come back to this worker's pool.
pub(crate) async fn permit(id: usize, limits: &PoolLimits, wait: Duration) -> Result<Permit, AtLimit> {
    let (sem, returned) = POOLS.with(|p| {
        let mut p = p.borrow_mut();
        let slot = slot_mut(&mut p, id, limits);
        (slot.sem.clone(), slot.returned.clone())
    });
    let Some(sem) = sem else { return Ok(Permit::New(None)) };
    if let Ok(p) = sem.clone().try_acquire_owned() {
        return Ok(Permit::New(Some(p)));
    }
    // An idle connection of ours may be what holds the last permit: close the oldest.
    let oldest = POOLS.with(|p| p.borrow_mut().slots.get_mut(id).and_then(Slot::pop_oldest));
    drop(oldest);
    let deadline = tokio::time::Instant::now() + wait;
    let _waiting = Waiting::new(id);
    loop {
        tokio::select! {
            p = sem.clone().acquire_owned() => return p.map(|p| Permit::New(Some(p))).map_err(|_| AtLimit),
            () = returned.notified() => {
                if let Some(c) = checkout(id, limits) {
                    return Ok(Permit::Idle(c));
                }
            }
            () = tokio::time::sleep_until(deadline) => return Err(AtLimit),
        }
    }
}

/// Counts a request waiting under slot `id`'s limit while it lives: a connection given
/// back then goes to it, even while new connections wait for their answer.
struct Waiting(usize);

impl Waiting {
    fn new(id: usize) -> Waiting {
        POOLS.with(|p| {
            if let Some(s) = p.borrow_mut().slots.get_mut(id) {
                s.waiters += 1;
            }
        });
        Waiting(id)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Without the thread's pools (the thread is ending) there is nothing to count.
        let _ = POOLS.try_with(|p| {
            if let Some(s) = p.borrow_mut().slots.get_mut(self.0) {
                s.waiters = s.waiters.saturating_sub(1);
            }
        });
    }
}

/// A new connection of slot `id` not answered yet. Drop it at the first byte of the
/// answer; call [`Fresh::starve`] once it has waited [`STARVING_AFTER`].
///
/// A close owed stays owed when the connection is answered first: an answer after a
/// starve is what a close paid for (the application's freed process took the oldest
/// waiting connection), or, when the connection was not waiting after all (a slow
/// script), the one extra close the module's text allows.
#[derive(Debug)]
pub(crate) struct Fresh {
    id: usize,
    shared: Option<Arc<Shared>>,
    since: tokio::time::Instant,
    starved: bool,
}

/// Marks a new connection of slot `id` (with `release_idle`; else the mark does nothing).
pub(crate) fn fresh(id: usize, limits: &PoolLimits) -> Fresh {
    let shared = limits.release_idle.then(|| POOLS.with(|p| slot_mut(&mut p.borrow_mut(), id, limits).shared.clone()));
    Fresh { id, shared, since: tokio::time::Instant::now(), starved: false }
}

impl Fresh {
    /// How long until [`Fresh::starve`] is due (`None`: not to be called).
    pub(crate) fn starving_in(&self) -> Option<Duration> {
        (self.shared.is_some() && !self.starved).then(|| STARVING_AFTER.saturating_sub(self.since.elapsed()))
    }

    /// The connection has waited [`STARVING_AFTER`] unanswered: one close is owed to it,
    /// paid now by this worker's oldest idle connection if it has one, else by another
    /// worker's (asked through its timer task) or by the next connection that finishes.
    pub(crate) fn starve(&mut self) {
        let Some(shared) = &self.shared else { return };
        if std::mem::replace(&mut self.starved, true) {
            return;
        }
        shared.owed.fetch_add(1, Ordering::AcqRel);
        let oldest = POOLS.with(|p| p.borrow_mut().slots.get_mut(self.id).and_then(Slot::pop_oldest));
        match oldest {
            Some(c) => {
                if shared.take_owed() {
                    drop(c);
                } else {
                    POOLS.with(|p| p.borrow_mut().slots.get_mut(self.id).map(|s| s.push(c, now_ms())));
                }
            }
            None if shared.idle.load(Ordering::Relaxed) > 0 => shared.release.notify_one(),
            None => {}
        }
    }
}
