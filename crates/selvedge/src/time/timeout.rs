//! One timeout manager for every connection in the process (the Warp design).
//!
//! Ground rules:
//! - A connection owns a [`Timer`]. Its hot-path operations are single relaxed atomic
//!   stores: `Timer::tickle` moves the deadline to `now + timeout`, `Timer::pause` parks
//!   it at infinity. No lock, no syscall, no heap traffic per request.
//! - "Now" is a coarse clock ([`now_ms`]) that the manager's thread advances on each tick,
//!   so reading it is one relaxed load.
//! - New timers are pushed onto a lock-free stack (Warp's atomic prepend); the manager
//!   takes the whole stack in one swap on each tick and merges it into its private list.
//! - On each tick the manager walks its list once: a timer whose owner has gone is dropped,
//!   a timer whose deadline passed has its task aborted (dropping the task closes the socket
//!   and runs every destructor, so streams are cleaned up), and when the timer's group is
//!   shutting down an idle connection is claimed (`IDLE -> CLOSING`) and aborted at once.
//! - Idle connections are parked (Warp's two-phase reaper, applied to waiting): a pass that
//!   finds a connection idle marks it (`IDLE -> IDLE_SEEN`); the next pass that finds it
//!   still idle asks it to park (`IDLE_SEEN -> PARK`) and wakes its task, which hands its
//!   socket and timer to a parking lot (`server::park`) and ends. So a connection idle for
//!   one to two ticks holds no task; while parked, its deadline is kept here as before and
//!   an expired (or, at shutdown, claimed) parked connection is closed through its lot.
//! - The manager's thread also refreshes the shared `Date` header once a second, and after
//!   a burst of connections gives the allocator's free memory back ([`crate::heap`]).
//!
//! The manager's tick is [`TICK`]: a timeout fires between `timeout` and `timeout + TICK`.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// How often the manager wakes.
pub const TICK: Duration = Duration::from_millis(100);

/// Deadline value meaning "no deadline".
pub(crate) const NO_DEADLINE: u64 = u64::MAX;
const PAUSED: u64 = NO_DEADLINE;

/// Connection phases as the manager sees them.
const PHASE_ACTIVE: u8 = 0;
const PHASE_IDLE: u8 = 1;
const PHASE_CLOSING: u8 = 2;
/// Idle, and seen idle by one pass of the manager.
const PHASE_IDLE_SEEN: u8 = 3;
/// Idle, and asked to park (its task was woken to do so).
const PHASE_PARK: u8 = 4;
/// Parked: no task; the connection waits in a parking lot.
const PHASE_PARKED: u8 = 5;

/// Whether `phase` is one of the idle phases (waiting for a request, in its task).
#[inline]
fn idle_phase(phase: u8) -> bool {
    matches!(phase, PHASE_IDLE | PHASE_IDLE_SEEN | PHASE_PARK)
}

/// Where parked connections wait (`server::park`): the manager closes a parked connection
/// there when its deadline passes or shutdown claims it.
pub(crate) trait Lot: Send + Sync {
    /// Closes the connection parked under `key`, if it is still there.
    fn close(&self, key: u64);
}

/// What runs the connection, as the manager reaches it.
#[derive(Default)]
enum Owner {
    /// Nothing yet (between a parking lot and the task it spawns).
    #[default]
    None,
    /// A task: aborted when the deadline passes; `waker` (the task's, once it has waited
    /// idle) is woken to ask it to park.
    Task { abort: AbortHandle, waker: Option<Waker> },
    /// Parked in a lot under `key`.
    Parked { lot: Weak<dyn Lot>, key: u64 },
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::None => f.write_str("None"),
            Owner::Task { .. } => f.write_str("Task"),
            Owner::Parked { key, .. } => write!(f, "Parked({key})"),
        }
    }
}

/// The coarse clock: milliseconds since the manager started, advanced on each tick.
static NOW_MS: AtomicU64 = AtomicU64::new(0);

/// The coarse clock in milliseconds (starts the manager on first use).
#[inline]
pub fn now_ms() -> u64 {
    NOW_MS.load(Ordering::Relaxed)
}

/// A group of connections that shut down together (one per server).
#[derive(Debug)]
pub struct Group {
    shutting_down: AtomicBool,
    /// Set by [`Group::begin_drain`] (and by shutdown): no new connections; open ones close
    /// after their current exchange.
    draining: AtomicBool,
    live: AtomicUsize,
    max: usize,
    /// Signalled when shutdown begins.
    shutdown: Notify,
    /// Signalled when a connection ends while the group is at its limit or shutting down.
    freed: Notify,
}

impl Group {
    /// A group that admits at most `max` live connections.
    pub fn new(max: usize) -> Group {
        Group {
            shutting_down: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            live: AtomicUsize::new(0),
            max: max.max(1),
            shutdown: Notify::new(),
            freed: Notify::new(),
        }
    }

    /// Whether graceful shutdown has begun.
    #[inline]
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Starts graceful shutdown: idle connections are closed on the manager's next pass,
    /// which is requested at once.
    pub fn begin_shutdown(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.shutting_down.store(true, Ordering::SeqCst);
        manager().wake();
        self.shutdown.notify_waiters();
        self.freed.notify_waiters();
    }

    /// Starts draining: listeners stop accepting, HTTP/1.1 connections close after their
    /// next response (`Connection: close`) and HTTP/2 connections send GOAWAY, but idle
    /// connections stay open until they send a request or shutdown begins.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.freed.notify_waiters();
    }

    /// Whether draining (or shutdown, which implies it) has begun.
    #[inline]
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Resolves once draining (or shutdown) has begun.
    pub async fn wait_drain(&self) {
        loop {
            let mut n = std::pin::pin!(self.shutdown.notified());
            n.as_mut().enable();
            if self.is_draining() {
                return;
            }
            n.await;
        }
    }

    /// Number of live connections.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Whether the group is at its connection limit.
    pub fn is_full(&self) -> bool {
        self.live() >= self.max
    }

    /// Connections the group may still take before its limit.
    pub fn room(&self) -> usize {
        self.max.saturating_sub(self.live())
    }

    /// Resolves once shutdown has begun.
    pub async fn wait_shutdown(&self) {
        loop {
            let mut n = std::pin::pin!(self.shutdown.notified());
            n.as_mut().enable();
            if self.is_shutting_down() {
                return;
            }
            n.await;
        }
    }

    /// Resolves when the group has room for another connection or is draining.
    pub async fn wait_room(&self) {
        loop {
            let mut n = std::pin::pin!(self.freed.notified());
            n.as_mut().enable();
            if !self.is_full() || self.is_draining() {
                return;
            }
            n.await;
        }
    }

    /// Resolves when a connection of a shutting-down (or full) group ends.
    pub async fn wait_drop(&self) {
        self.freed.notified().await;
    }
}

/// Shared state of one connection's timer.
#[derive(Debug)]
struct Slot {
    deadline: AtomicU64,
    phase: AtomicU8,
    /// Set by the manager when it closes the connection for its passed deadline.
    expired: AtomicBool,
    /// Taken on spawn, park and unpark, by the task once per task (its waker), and by the
    /// manager when it aborts, closes or wakes: never per request.
    owner: Mutex<Owner>,
    group: Arc<Group>,
}

impl Slot {
    fn owner(&self) -> std::sync::MutexGuard<'_, Owner> {
        self.owner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection's registration with the manager. Dropping it tells the manager the
/// connection ended. Derefs to [`TimerHandle`] for the hot-path operations.
#[derive(Debug)]
pub struct Timer {
    handle: TimerHandle,
    /// The current task's waker is in the slot (see [`Timer::park_requested`]).
    waker_set: AtomicBool,
}

/// A cloneable handle on a connection's deadline (for body readers and stream writers).
#[derive(Debug, Clone)]
pub struct TimerHandle {
    slot: Arc<Slot>,
}

impl std::ops::Deref for Timer {
    type Target = TimerHandle;
    fn deref(&self) -> &TimerHandle {
        &self.handle
    }
}

impl Timer {
    /// Registers a new connection of `group` with the manager, with a first deadline.
    pub fn register(group: &Arc<Group>, timeout: Duration) -> Timer {
        let mgr = manager();
        group.live.fetch_add(1, Ordering::SeqCst);
        let slot = Arc::new(Slot {
            deadline: AtomicU64::new(now_ms().saturating_add(timeout.as_millis() as u64)),
            phase: AtomicU8::new(PHASE_ACTIVE),
            expired: AtomicBool::new(false),
            owner: Mutex::new(Owner::None),
            group: group.clone(),
        });
        mgr.push(slot.clone());
        Timer { handle: TimerHandle { slot }, waker_set: AtomicBool::new(false) }
    }

    /// A cloneable handle on this timer.
    pub fn handle(&self) -> TimerHandle {
        self.handle.clone()
    }

    /// Marks the connection idle between requests. Returns `false` if the server is
    /// shutting down, in which case the connection should close now.
    #[inline]
    pub fn enter_idle(&self) -> bool {
        self.slot.phase.store(PHASE_IDLE, Ordering::SeqCst);
        !self.slot.group.is_shutting_down()
    }

    /// Leaves the idle phase as a request begins. Returns `false` if shutdown already
    /// claimed this connection, in which case it must close without answering. (A request
    /// to park that came too late is simply dropped.)
    #[inline]
    pub fn leave_idle(&self) -> bool {
        let phase = &self.slot.phase;
        let mut p = PHASE_IDLE;
        loop {
            match phase.compare_exchange(p, PHASE_ACTIVE, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) if idle_phase(now) => p = now,
                Err(now) => return now == PHASE_ACTIVE,
            }
        }
    }

    /// For an idle wait's poll: whether the manager asks the connection to park. The first
    /// call in a task leaves the task's waker with the manager, which wakes it to ask.
    #[inline]
    pub(crate) fn park_requested(&self, cx: &Context<'_>) -> bool {
        if !self.waker_set.load(Ordering::Relaxed) {
            // Until the task's abort handle is in the slot (a task spawned on another
            // thread may run before `set_abort`), the next poll tries again.
            if let Owner::Task { waker, .. } = &mut *self.slot.owner() {
                *waker = Some(cx.waker().clone());
                self.waker_set.store(true, Ordering::Relaxed);
            }
        }
        self.slot.phase.load(Ordering::Acquire) == PHASE_PARK
    }

    /// Asks the connection to park, as the manager does after two idle ticks (for tests of
    /// the waits that must hear it).
    #[cfg(test)]
    pub(crate) fn ask_to_park(&self) {
        self.slot.phase.store(PHASE_PARK, Ordering::SeqCst);
    }

    /// The connection goes on in a task of its own, which [`TimerHandle::set_abort`] gives
    /// the manager: the waker left by an idle wait in the task before is forgotten, so the
    /// next idle wait leaves the new task's.
    pub(crate) fn changes_task(&self) {
        self.waker_set.store(false, Ordering::Relaxed);
    }

    /// The connection leaves its task for parking lot `lot` under `key`: the task's abort
    /// handle and waker are let go (they hold the finished task's memory), and the manager
    /// now closes it through the lot. Called by the lot, with the connection in it.
    ///
    /// `false` (the lot then closes it itself): the manager moved first, claiming it for
    /// shutdown or finding its deadline passed, and has stopped watching it.
    pub(crate) fn parked(&self, lot: Weak<dyn Lot>, key: u64) -> bool {
        // Under the owner's lock, as the manager decides to abort: either it found the
        // task (and set `expired` or claimed the phase first), or it will find the lot.
        let mut owner = self.slot.owner();
        if self.slot.expired.load(Ordering::Relaxed)
            || self.slot.phase.compare_exchange(PHASE_PARK, PHASE_PARKED, Ordering::SeqCst, Ordering::SeqCst).is_err()
        {
            return false;
        }
        *owner = Owner::Parked { lot, key };
        self.waker_set.store(false, Ordering::Relaxed);
        true
    }

    /// A parked connection's socket turned readable and its lot takes it out to spawn a
    /// task for it. `false`: the manager closes it (its deadline passed, or shutdown).
    pub(crate) fn unpark(&self) -> bool {
        let ok = self.slot.phase.compare_exchange(PHASE_PARKED, PHASE_ACTIVE, Ordering::SeqCst, Ordering::SeqCst);
        if ok.is_ok() {
            *self.slot.owner() = Owner::None;
        }
        ok.is_ok()
    }
}

impl TimerHandle {
    /// Gives the manager the means to stop the connection's task.
    ///
    /// A waker left by the new task before this call (it may run first on another thread)
    /// is kept.
    pub fn set_abort(&self, handle: AbortHandle) {
        let mut owner = self.slot.owner();
        let waker = match &mut *owner {
            Owner::Task { waker, .. } => waker.take(),
            _ => None,
        };
        *owner = Owner::Task { abort: handle, waker };
    }

    /// Moves the deadline to `timeout` from now: one relaxed store.
    #[inline]
    pub fn tickle(&self, timeout: Duration) {
        self.slot.deadline.store(now_ms().saturating_add(timeout.as_millis() as u64), Ordering::Relaxed);
    }

    /// Sets the deadline to `timeout` after `since` (a [`now_ms`] reading): an absolute
    /// deadline that later reads do not push back.
    #[inline]
    pub fn set_deadline(&self, since: u64, timeout: Duration) {
        self.slot.deadline.store(since.saturating_add(timeout.as_millis() as u64), Ordering::Relaxed);
    }

    /// Sets the deadline to `at` (a [`now_ms`] time; [`NO_DEADLINE`] for none), as computed
    /// by a sans-IO state machine.
    #[inline]
    pub(crate) fn set_at(&self, at: u64) {
        self.slot.deadline.store(at, Ordering::Relaxed);
    }

    /// No deadline until the next tickle (while the application runs).
    #[inline]
    pub fn pause(&self) {
        self.slot.deadline.store(PAUSED, Ordering::Relaxed);
    }

    /// Whether the connection's server is draining or shutting down: the connection
    /// should end after its current exchange.
    #[inline]
    pub fn shutting_down(&self) -> bool {
        self.slot.group.is_draining()
    }

    /// Whether the manager closed the connection because its deadline passed.
    #[inline]
    pub fn expired(&self) -> bool {
        self.slot.expired.load(Ordering::Relaxed)
    }

    /// Whether the connection's server is draining or shutting down (its connections end
    /// for that, unless something else ended them first).
    #[inline]
    pub fn group_closing(&self) -> bool {
        self.slot.group.is_draining()
    }

    /// Resolves once the connection's server begins draining or graceful shutdown.
    pub async fn wait_shutdown(&self) {
        self.slot.group.wait_drain().await;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        let slot = &self.handle.slot;
        let g = &slot.group;
        let prev = g.live.fetch_sub(1, Ordering::SeqCst);
        if prev >= g.max || g.is_shutting_down() {
            g.freed.notify_waiters();
        }
        // The task's abort handle and waker go now: each keeps the task's memory (its
        // whole future) allocated after the task ends, and the manager forgets the slot
        // only on its next pass, up to a tick away (under a flood of short connections,
        // hundreds of finished tasks). `try_lock`: the manager holds the lock only for a
        // moment; if it has it now, the slot's owner goes with the slot on that pass.
        let owner = match slot.owner.try_lock() {
            Ok(mut o) => std::mem::take(&mut *o),
            Err(std::sync::TryLockError::Poisoned(p)) => std::mem::take(&mut *p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Owner::None,
        };
        drop(owner);
        // The manager sees the Arc count fall to one and forgets the slot on its next pass.
    }
}

/// A push-only stack with take-all, holding timers not yet seen by the manager.
struct Inbox {
    head: AtomicPtr<Node>,
}

struct Node {
    slot: Arc<Slot>,
    next: *mut Node,
}

impl Inbox {
    fn push(&self, slot: Arc<Slot>) {
        let node = Box::into_raw(Box::new(Node { slot, next: ptr::null_mut() }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` came from Box::into_raw above and is not yet shared.
            unsafe { (*node).next = head };
            match self.head.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    fn take_all(&self, out: &mut Vec<Arc<Slot>>) {
        let mut p = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: every node was made by Box::into_raw in `push`; the swap above removed
            // the whole chain from the stack, so this thread owns each node exactly once.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
            out.push(node.slot);
        }
    }
}

struct Manager {
    inbox: Inbox,
    thread: Thread,
}

// SAFETY: the raw pointers in `Inbox` are only touched through atomics as documented there;
// the nodes own `Arc<Slot>`s, which are Send + Sync.
unsafe impl Sync for Inbox {}
// SAFETY: as above.
unsafe impl Send for Inbox {}

impl Manager {
    fn push(&self, slot: Arc<Slot>) {
        self.inbox.push(slot);
    }

    fn wake(&self) {
        self.thread.unpark();
    }
}

static MANAGER: OnceLock<Manager> = OnceLock::new();

fn manager() -> &'static Manager {
    MANAGER.get_or_init(|| {
        crate::time::date::refresh(SystemTime::now());
        let handle = std::thread::Builder::new()
            .name("selvedge-timeout".into())
            .spawn(run)
            .expect("spawn the timeout manager thread");
        Manager { inbox: Inbox { head: AtomicPtr::new(ptr::null_mut()) }, thread: handle.thread().clone() }
    })
}

/// Starts the manager (and so the coarse clock and the date cache) if it is not running.
pub fn start() {
    let _ = manager();
}

fn run() {
    let start = Instant::now();
    let mut list: Vec<Arc<Slot>> = Vec::new();
    // Bursts of connections served at once, and of connections open (parked ones too).
    let (mut busy_watch, mut open_watch) = (crate::heap::BurstWatch::default(), crate::heap::BurstWatch::default());
    loop {
        std::thread::park_timeout(TICK);
        let now = start.elapsed().as_millis() as u64;
        NOW_MS.store(now, Ordering::Relaxed);
        crate::time::date::refresh(SystemTime::now());
        let Some(mgr) = MANAGER.get() else { continue };
        mgr.inbox.take_all(&mut list);
        let mut busy = 0;
        list.retain(|slot| {
            let keep = sweep(slot, now);
            busy += usize::from(keep && slot.phase.load(Ordering::Relaxed) != PHASE_PARKED);
            keep
        });
        let after = crate::heap::release_after();
        // Both watches see every tick (`|`, not `||`).
        if busy_watch.tick(busy, after) | open_watch.tick(list.len(), after) {
            let t = Instant::now();
            let released = crate::heap::release();
            tracing::debug!("after a burst, free heap memory given back ({released}) in {:?}", t.elapsed());
        }
    }
}

/// One slot's turn: returns whether to keep watching it.
fn sweep(slot: &Arc<Slot>, now: u64) -> bool {
    if Arc::strong_count(slot) == 1 {
        return false; // the connection is gone
    }
    let expired = slot.deadline.load(Ordering::Relaxed) <= now;
    let shutting_down = slot.group.is_shutting_down();
    let phase = slot.phase.load(Ordering::SeqCst);
    if phase == PHASE_PARKED {
        if (expired || shutting_down) && claim(slot, PHASE_PARKED) {
            slot.expired.store(expired, Ordering::Relaxed);
            let lot = match &*slot.owner() {
                Owner::Parked { lot, key } => lot.upgrade().map(|l| (l, *key)),
                _ => None,
            };
            if let Some((lot, key)) = lot {
                lot.close(key);
            }
            return false;
        }
        return true;
    }
    let claim_idle = shutting_down && idle_phase(phase) && claim(slot, phase);
    if expired || claim_idle {
        if let Owner::Task { abort, .. } = &*slot.owner() {
            slot.expired.store(expired, Ordering::Relaxed);
            abort.abort();
            return false;
        }
        return true;
    }
    // Idle for a whole tick: mark it; marked on the pass before: ask it to park.
    if phase == PHASE_IDLE {
        let _ = slot.phase.compare_exchange(PHASE_IDLE, PHASE_IDLE_SEEN, Ordering::SeqCst, Ordering::SeqCst);
    } else if phase == PHASE_IDLE_SEEN
        && slot.phase.compare_exchange(PHASE_IDLE_SEEN, PHASE_PARK, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    {
        let waker = match &*slot.owner() {
            Owner::Task { waker: Some(w), .. } => Some(w.clone()),
            _ => None,
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
    true
}

/// Claims a connection in `phase` for closing (`-> CLOSING`); `false` if it moved on.
fn claim(slot: &Slot, phase: u8) -> bool {
    slot.phase.compare_exchange(phase, PHASE_CLOSING, Ordering::SeqCst, Ordering::SeqCst).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_takes_everything_pushed() {
        let inbox = Inbox { head: AtomicPtr::new(ptr::null_mut()) };
        let group = Arc::new(Group::new(10));
        for _ in 0..10 {
            inbox.push(Arc::new(Slot {
                deadline: AtomicU64::new(0),
                phase: AtomicU8::new(PHASE_ACTIVE),
                expired: AtomicBool::new(false),
                owner: Mutex::new(Owner::None),
                group: group.clone(),
            }));
        }
        let mut out = Vec::new();
        inbox.take_all(&mut out);
        assert_eq!(out.len(), 10);
        inbox.take_all(&mut out);
        assert_eq!(out.len(), 10);
    }

    #[test]
    fn tickle_and_pause_move_the_deadline() {
        start();
        let group = Arc::new(Group::new(10));
        let t = Timer::register(&group, Duration::from_secs(5));
        assert_eq!(group.live(), 1);
        t.pause();
        assert_eq!(t.slot.deadline.load(Ordering::Relaxed), PAUSED);
        t.tickle(Duration::from_secs(1));
        let d = t.slot.deadline.load(Ordering::Relaxed);
        assert!(d >= now_ms() + 900 && d <= now_ms() + 1000, "{d}");
        assert!(t.enter_idle());
        assert!(t.leave_idle());
        drop(t);
        assert_eq!(group.live(), 0);
    }

    /// A task's abort handle and waker keep its memory (its whole future, inline in a
    /// release build) allocated after it ends; the timer lets go of both when the
    /// connection drops it, not on the manager's next pass.
    #[test]
    fn a_dropped_timer_lets_go_of_its_task() {
        start();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let group = Arc::new(Group::new(10));
        let t = Timer::register(&group, Duration::from_secs(5));
        let handle = t.handle();
        rt.block_on(async {
            let task = tokio::spawn(async {});
            handle.set_abort(task.abort_handle());
            std::future::poll_fn(|cx| {
                assert!(!t.park_requested(cx));
                std::task::Poll::Ready(())
            })
            .await;
            task.await.unwrap();
        });
        assert!(matches!(&*handle.slot.owner(), Owner::Task { waker: Some(_), .. }));
        drop(t);
        assert!(matches!(&*handle.slot.owner(), Owner::None), "{:?}", handle.slot.owner());
    }

    #[test]
    fn shutdown_claims_idle_but_not_active() {
        let group = Arc::new(Group::new(10));
        let t = Timer::register(&group, Duration::from_secs(5));
        assert!(t.enter_idle());
        group.shutting_down.store(true, Ordering::SeqCst);
        // Without an abort handle the manager cannot claim; emulate its CAS.
        assert!(sweep(&t.slot, 0));
        assert_eq!(t.slot.phase.load(Ordering::SeqCst), PHASE_CLOSING);
        assert!(!t.leave_idle());
    }
}
