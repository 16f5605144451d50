//! Connection sockets over io_uring: one ring per worker thread, driven from the worker's
//! own runtime, so a socket's reads and writes cost no system call of their own.
//!
//! - **Reads** are `recv` operations that pick their buffer from a ring of provided buffers
//!   ([`BUFS`] × [`BUF_LEN`] per worker): an idle connection waiting for its next request
//!   holds no buffer at all. What a completion brings is copied to the socket's own queue
//!   at once and the buffer goes back to the ring, so a read that is cancelled (its future
//!   dropped) loses nothing: the next read finds the bytes. One `recv` at a time per socket,
//!   armed only while a reader waits with nothing queued, so what a socket holds unread is
//!   at most one buffer (a peek for a PROXY header or a ClientHello: what it waits for, plus
//!   one). Single-shot receives measured level with multishot ones here, and bound the
//!   queue where a multishot receive fills several buffers before it can be stopped.
//! - **Writes** copy what they send into a buffer the operation owns (at most
//!   [`SEND_MAX`] per operation) and wait for its completion: one send at a time per socket,
//!   in order; a cancelled write's operation keeps its buffer until it completes.
//! - **Everything else** (peeking at a PROXY header or a ClientHello, `sendfile`) is the
//!   usual non-blocking system call, waited for with a poll operation on the ring.
//! - **Listeners** take their connections with accept operations on the ring
//!   ([`Acceptor`]): each new connection is a completion, with no readiness event and no
//!   `accept4` of its own. At most [`ACCEPT_BATCH`] accepts are out per listener, and
//!   never more than the server has room for, so what a listener holds accepted and not
//!   yet served is bounded by that, and the listen backlog keeps the rest, as on epoll.
//!   (A multishot accept would take the whole backlog in one completion run.)
//!
//! The submissions of a loop turn, across all of the worker's connections, go to the kernel
//! in one `io_uring_enter` when the runtime is about to park ([`before_park`], from tokio's
//! `on_thread_park`), and completions that are there already are handled then; completions
//! that come later wake the runtime through the ring's descriptor, which is on the
//! runtime's reactor ([`reap_forever`]).
//!
//! A ring belongs to its thread: a socket used from another thread (a body handed to a
//! task on another runtime) fails its operations with an error instead of touching a ring
//! it does not own.
//!
//! All of the engine's `unsafe` for io_uring is here: submission entries point into
//! memory this module owns until their completion arrives.

use std::alloc::Layout;
use std::cell::RefCell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Provided receive buffers per worker (a power of two).
pub const BUFS: u16 = 128;
/// Size of each provided receive buffer: 16 KiB (so 2 MiB per worker, touched as used).
pub const BUF_LEN: usize = 16 * 1024;
/// Most bytes one send operation copies and owns; larger writes go in several.
pub const SEND_MAX: usize = 64 * 1024;
/// A socket's queue keeps its allocation between reads up to this capacity; a larger one
/// (a burst of body) is freed once read.
const QUEUE_KEEP: usize = 4096;
/// Submission queue entries per ring.
const ENTRIES: u32 = 1024;
/// Completion queue entries per ring (the kernel keeps overflow, but this avoids it for
/// one armed read per connection up to the default connection limit).
const CQ_ENTRIES: u32 = 16 * 1024;
/// The provided buffers' group id.
const GROUP: u16 = 0;
/// Submissions queued past this many go to the kernel at once instead of at the turn's end.
const EAGER_SUBMIT: usize = 128;
/// Free send buffers kept per worker.
const SPARE_SENDS: usize = 32;
/// Accept operations a listener's [`Acceptor`] keeps out at most: the most connections it
/// holds accepted and not yet served.
pub const ACCEPT_BATCH: usize = 16;

const IORING_ENTER_GETEVENTS: u32 = 1;
/// The longest a worker's ring waits, as its thread ends, for its operations to end.
const QUIESCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

const RX: u64 = 1;
const TX: u64 = 2;
const POLL: u64 = 3;
const CANCEL: u64 = 4;
const ACCEPT: u64 = 5;

/// Ring ids, so a socket knows which thread's ring it belongs to.
static NEXT_RING: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// A worker's ring.
struct Ring {
    id: u64,
    /// Signalled by the kernel when completions (or the deferred work that makes them)
    /// are waiting: what the runtime's reactor watches.
    wake_fd: OwnedFd,
    uring: IoUring,
    bufs: BufRing,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Listeners' accepts; a slot with no acceptor and none out is reused.
    accepts: Vec<AcceptSlot>,
    spare_sends: Vec<Vec<u8>>,
    /// Wakers to call once the ring is no longer borrowed.
    wake: Vec<Waker>,
    /// Operations submitted whose completion has not been reaped (each gives exactly
    /// one: none is multishot), so the ring can be emptied before it is dropped.
    inflight: usize,
    /// Scratch lists for `reap`, kept for their capacity.
    cq: Vec<(u64, i32, u32)>,
    again: Vec<u32>,
    resend: Vec<u32>,
}

/// One socket's state on the ring.
#[derive(Default)]
struct Slot {
    gen: u32,
    fd: RawFd,
    /// The socket still exists (its `Sock` was not dropped).
    live: bool,
    /// Received and not yet read.
    queued: BytesMut,
    /// The stream ended: `Some(0)` end of stream, `Some(errno)` an error. Sticky.
    end: Option<i32>,
    /// A receive is out.
    rx: bool,
    /// Its cancellation was asked for (the reader parks).
    rx_cancel: bool,
    rx_waker: Option<Waker>,
    /// The send in flight: its buffer, how much of it is done, its last result.
    tx: Option<Vec<u8>>,
    tx_done: usize,
    tx_flags: i32,
    tx_result: Option<i32>,
    tx_waker: Option<Waker>,
    poll: bool,
    poll_result: Option<i32>,
    poll_waker: Option<Waker>,
}

impl Slot {
    fn busy(&self) -> bool {
        self.rx || self.tx.is_some() || self.poll
    }
}

/// One listener's accepts on the ring.
#[derive(Default)]
struct AcceptSlot {
    /// Changed when the accepts out are cancelled, so the cancel names only them.
    gen: u32,
    fd: RawFd,
    /// Its `Acceptor` exists.
    live: bool,
    /// Accept operations out (each takes one connection).
    out: usize,
    /// Accepted, not yet taken (with `out`, at most `ACCEPT_BATCH`).
    ready: std::collections::VecDeque<OwnedFd>,
    /// The error that ended the last accept, reported once.
    error: Option<i32>,
    waker: Option<Waker>,
}

/// The provided-buffer ring: `BUFS` entries the kernel takes receive buffers from.
struct BufRing {
    entries: *mut types::BufRingEntry,
    mem: *mut u8,
    tail: u16,
}

impl BufRing {
    fn ring_layout() -> Layout {
        Layout::from_size_align(BUFS as usize * std::mem::size_of::<types::BufRingEntry>(), 4096).expect("layout")
    }

    fn mem_layout() -> Layout {
        Layout::from_size_align(BUFS as usize * BUF_LEN, 4096).expect("layout")
    }

    fn new() -> io::Result<BufRing> {
        // SAFETY: both layouts have a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(Self::ring_layout()) }.cast::<types::BufRingEntry>();
        // SAFETY: as above.
        let mem = unsafe { std::alloc::alloc(Self::mem_layout()) };
        if entries.is_null() || mem.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut ring = BufRing { entries, mem, tail: 0 };
        for bid in 0..BUFS {
            ring.put(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// Hands buffer `bid` back to the kernel (seen once [`publish`](Self::publish)ed).
    fn put(&mut self, bid: u16) {
        let i = (self.tail & (BUFS - 1)) as usize;
        // SAFETY: `i < BUFS`, inside the entries' allocation; the kernel reads an entry only
        // between the published tail and its head, and this one is behind the head (its
        // buffer was handed to us, or it was never published).
        unsafe {
            let e = &mut *self.entries.add(i);
            e.set_addr(self.mem.add(bid as usize * BUF_LEN) as u64);
            e.set_len(BUF_LEN as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the ring's tail is the `resv` field of its first entry, as the kernel
        // defines it; it is written with release ordering so the entries before it are seen.
        let tail = unsafe { types::BufRingEntry::tail(self.entries) }.cast::<AtomicU16>();
        // SAFETY: `tail` points into the entries' allocation, aligned for a u16.
        unsafe { (*tail).store(self.tail, Ordering::Release) };
    }

    fn buf(&self, bid: u16, len: usize) -> &[u8] {
        debug_assert!(bid < BUFS && len <= BUF_LEN);
        // SAFETY: the kernel wrote `len` bytes into buffer `bid` and handed it to us; it is
        // not handed back (so not written) until `put`.
        unsafe { std::slice::from_raw_parts(self.mem.add(bid as usize * BUF_LEN), len) }
    }

    /// Leaves the entries and buffers allocated for good (the ring's operations did not
    /// all end: see `Ring`'s drop).
    fn leak(&mut self) {
        self.entries = std::ptr::null_mut();
        self.mem = std::ptr::null_mut();
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        if self.mem.is_null() {
            return;
        }
        // SAFETY: allocated in `new` with these layouts; the ring's operations have ended
        // (`Ring`'s drop; had they not, `leak` would have left both allocated) and the ring
        // (declared before it in `Ring`) is closed, so the kernel no longer uses either.
        unsafe {
            std::alloc::dealloc(self.entries.cast(), Self::ring_layout());
            std::alloc::dealloc(self.mem, Self::mem_layout());
        }
    }
}

fn user_data(slot: u32, gen: u32, kind: u64) -> u64 {
    (u64::from(slot) << 32) | (u64::from(gen & 0xff_ffff) << 8) | kind
}

impl Ring {
    fn new() -> io::Result<Ring> {
        let uring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .dontfork()
            .build(ENTRIES)?;
        if !uring.params().is_feature_nodrop() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "the kernel's io_uring drops completions"));
        }
        let bufs = BufRing::new()?;
        // SAFETY: the entries stay allocated until the ring is dropped (`BufRing` is
        // dropped after `uring`: see the field order).
        unsafe { uring.submitter().register_buf_ring_with_flags(bufs.entries as u64, BUFS, GROUP, 0)? };
        let wake_fd = crate::io::sys::eventfd()?;
        uring.submitter().register_eventfd(wake_fd.as_raw_fd())?;
        Ok(Ring {
            id: NEXT_RING.fetch_add(1, Ordering::Relaxed),
            wake_fd,
            uring,
            bufs,
            slots: Vec::new(),
            free: Vec::new(),
            accepts: Vec::new(),
            spare_sends: Vec::new(),
            wake: Vec::new(),
            inflight: 0,
            cq: Vec::new(),
            again: Vec::new(),
            resend: Vec::new(),
        })
    }

    fn push(&mut self, entry: &squeue::Entry) {
        loop {
            // SAFETY: every entry pushed points only into memory that outlives its
            // operation: a slot's send buffer (kept in the slot until the completion, which
            // the ring's drop waits for) or nothing (recv with a provided buffer, accept,
            // poll, cancel).
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                self.inflight += 1;
                break;
            }
            let _ = self.uring.submit();
        }
        if self.uring.submission().len() >= EAGER_SUBMIT {
            let _ = self.uring.submit();
        }
    }

    /// Submits what is queued and runs the kernel's deferred completion work (one
    /// `io_uring_enter`), unless there is neither.
    fn enter(&mut self) {
        let mut sq = self.uring.submission();
        sq.sync();
        if sq.is_empty() && !sq.taskrun() && !sq.cq_overflow() {
            return;
        }
        drop(sq);
        // GETEVENTS with nothing to wait for: deferred work runs, nothing blocks.
        let len = self.uring.submission().len() as u32;
        // SAFETY: no signal mask or timeout argument is passed; the entries submitted point
        // only into memory that outlives their operations (see `push`).
        let _ = unsafe { self.uring.submitter().enter::<libc::sigset_t>(len, 0, IORING_ENTER_GETEVENTS, None) };
    }

    fn arm_rx(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.rx = true;
        let e = opcode::Recv::new(types::Fd(s.fd), std::ptr::null_mut(), BUF_LEN as u32)
            .buf_group(GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data(i, s.gen, RX));
        self.push(&e);
    }

    fn push_tx(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        let buf = s.tx.as_ref().expect("a send buffer");
        let rest = &buf[s.tx_done..];
        let e = opcode::Send::new(types::Fd(s.fd), rest.as_ptr(), rest.len() as u32)
            .flags(s.tx_flags | libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(i, s.gen, TX));
        self.push(&e);
    }

    fn cancel(&mut self, i: u32, kind: u64) {
        let s = &self.slots[i as usize];
        let e = opcode::AsyncCancel::new(user_data(i, s.gen, kind)).build().user_data(user_data(i, s.gen, CANCEL));
        self.push(&e);
    }

    /// Puts listener `i`'s accepts out until `want` are (counting those out already).
    fn arm_accepts(&mut self, i: u32, want: usize) {
        while self.accepts[i as usize].out < want {
            let a = &mut self.accepts[i as usize];
            a.out += 1;
            let e = opcode::Accept::new(types::Fd(a.fd), std::ptr::null_mut(), std::ptr::null_mut())
                .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
                .build()
                .user_data(user_data(i, a.gen, ACCEPT));
            self.push(&e);
        }
    }

    /// Cancels listener `i`'s accepts that are out; later ones are not touched.
    fn stop_accepts(&mut self, i: u32) {
        let a = &mut self.accepts[i as usize];
        if a.out == 0 {
            return;
        }
        let ud = user_data(i, a.gen, ACCEPT);
        a.gen = a.gen.wrapping_add(1);
        let e = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(ud).all())
            .build()
            .user_data(user_data(i, 0, CANCEL));
        self.push(&e);
    }

    /// A completion of one of listener `i`'s accepts.
    fn accepted(&mut self, i: u32, res: i32) {
        let a = &mut self.accepts[i as usize];
        a.out -= 1;
        if res >= 0 {
            // SAFETY: an accept's result is a new descriptor that nothing else owns.
            let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(res) };
            // (Dropped, so closed, if the acceptor is gone.)
            if a.live {
                a.ready.push_back(fd);
            }
        } else if res != -libc::ECANCELED && a.live {
            a.error = Some(-res);
        }
        if let Some(w) = a.waker.take() {
            self.wake.push(w);
        }
    }

    /// Handles every completion there is; wakers are collected in `self.wake`.
    fn reap(&mut self) {
        let mut cq = std::mem::take(&mut self.cq);
        let before = cq.len();
        cq.extend(self.uring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        self.inflight -= cq.len() - before;
        let mut returned = false;
        let mut again = std::mem::take(&mut self.again);
        let mut resend = std::mem::take(&mut self.resend);
        for &(ud, res, flags) in &cq {
            let kind = ud & 0xff;
            let i = (ud >> 32) as u32;
            if kind == CANCEL {
                continue;
            }
            if kind == ACCEPT {
                self.accepted(i, res);
                continue;
            }
            if let Some(bid) = cqueue::buffer_select(flags) {
                let data = if res > 0 { self.bufs.buf(bid, res as usize) } else { &[] };
                let s = &mut self.slots[i as usize];
                if s.live {
                    s.queued.extend_from_slice(data);
                }
                self.bufs.put(bid);
                returned = true;
            }
            let s = &mut self.slots[i as usize];
            match kind {
                RX => {
                    s.rx = false;
                    s.rx_cancel = false;
                    if res == 0 {
                        s.end = Some(0);
                    } else if res == -libc::ENOBUFS && s.live {
                        // Every buffer was taken in one turn: armed again once they are back.
                        s.rx = true;
                        again.push(i);
                        continue;
                    } else if res < 0 && res != -libc::ECANCELED && res != -libc::EINTR && res != -libc::EAGAIN {
                        s.end = Some(-res);
                    }
                    if let Some(w) = s.rx_waker.take() {
                        self.wake.push(w);
                    }
                }
                TX => {
                    if res > 0 && s.live && s.tx_done + (res as usize) < s.tx.as_ref().map_or(0, Vec::len) {
                        // Short: the rest goes out before the writer hears of it.
                        s.tx_done += res as usize;
                        resend.push(i);
                        continue;
                    }
                    if let Some(mut buf) = s.tx.take() {
                        if buf.capacity() <= SEND_MAX && self.spare_sends.len() < SPARE_SENDS {
                            buf.clear();
                            self.spare_sends.push(buf);
                        }
                    }
                    let s = &mut self.slots[i as usize];
                    s.tx_result = Some(res);
                    if let Some(w) = s.tx_waker.take() {
                        self.wake.push(w);
                    }
                }
                POLL => {
                    s.poll = false;
                    s.poll_result = Some(res);
                    if let Some(w) = s.poll_waker.take() {
                        self.wake.push(w);
                    }
                }
                _ => {}
            }
            let s = &self.slots[i as usize];
            if !s.live && !s.busy() {
                self.release(i);
            }
        }
        cq.clear();
        self.cq = cq;
        if returned {
            self.bufs.publish();
        }
        for &i in &again {
            self.slots[i as usize].rx = false;
            self.arm_rx(i);
        }
        again.clear();
        self.again = again;
        for &i in &resend {
            self.push_tx(i);
        }

        resend.clear();
        self.resend = resend;
    }

    fn release(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.gen = s.gen.wrapping_add(1);
        s.queued = BytesMut::new();
        s.end = None;
        s.rx_cancel = false;
        s.rx_waker = None;
        s.tx_waker = None;
        s.poll_waker = None;
        s.tx_result = None;
        s.poll_result = None;
        self.free.push(i);
    }
}

impl Drop for Ring {
    /// Ends the operations still out before the memory they use (send buffers, provided
    /// buffers) is freed and the descriptors they hold (sockets, listeners) are let go.
    /// Closing the ring alone ends them later, in the kernel's own time: a listener would
    /// take connections for a moment after its process exited. Every operation is
    /// cancelable (receives, sends, polls and accepts on sockets), so this takes one or
    /// two turns; it gives up after `QUIESCE_LIMIT`.
    fn drop(&mut self) {
        if self.inflight == 0 {
            return;
        }
        let all = opcode::AsyncCancel2::new(types::CancelBuilder::any().all()).build().user_data(CANCEL);
        self.push(&all);
        let deadline = std::time::Instant::now() + QUIESCE_LIMIT;
        let turn = types::Timespec::new().nsec(50_000_000);
        let args = types::SubmitArgs::new().timespec(&turn);
        while self.inflight > 0 && std::time::Instant::now() < deadline {
            // (Waits for one completion or 50 ms; GETEVENTS runs the deferred work that
            // posts the cancelled operations' completions.)
            let _ = self.uring.submitter().submit_with_args(1, &args);
            let mut cq = std::mem::take(&mut self.cq);
            cq.extend(self.uring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            self.inflight -= cq.len();
            // A last accept's connection is closed there (its acceptor is gone).
            for &(ud, res, _) in cq.iter().filter(|(ud, ..)| ud & 0xff == ACCEPT) {
                self.accepted((ud >> 32) as u32, res);
            }
            cq.clear();
            self.cq = cq;
        }
        if self.inflight > 0 {
            // Operations the kernel did not end: the memory they may still use is left
            // allocated rather than freed under them.
            for s in &mut self.slots {
                std::mem::forget(s.tx.take());
            }
            self.bufs.leak();
        }
    }
}

/// Runs `f` on this thread's ring, if it is `id`'s; then calls the wakers it collected.
fn with_ring<R>(id: u64, f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
    let (r, wake) = RING.with(|cell| {
        let mut guard = cell.borrow_mut();
        match guard.as_mut() {
            Some(ring) if ring.id == id => {
                let r = f(ring);
                Ok((r, std::mem::take(&mut ring.wake)))
            }
            _ => Err(io::Error::new(io::ErrorKind::Unsupported, "an io_uring socket used off its worker thread")),
        }
    })?;
    for w in wake {
        w.wake();
    }
    Ok(r)
}

/// Sets up this thread's ring. An error (the kernel has no io_uring, or a seccomp filter
/// refuses it, as containers often do) leaves the thread on epoll.
///
/// # Errors
/// The ring could not be made or its buffers registered.
pub fn install() -> io::Result<()> {
    let ring = Ring::new()?;
    RING.with(|cell| *cell.borrow_mut() = Some(ring));
    Ok(())
}

/// Whether this thread has a ring: sockets made on it use io_uring.
pub(crate) fn active() -> bool {
    RING.with(|cell| cell.borrow().is_some())
}

/// Submits what the turn queued and handles the completions already there: called by the
/// runtime before it parks (a woken task keeps it from parking).
pub fn before_park() {
    let wake = RING.with(|cell| {
        let Ok(mut guard) = cell.try_borrow_mut() else { return Vec::new() };
        let Some(ring) = guard.as_mut() else { return Vec::new() };
        ring.enter();
        ring.reap();
        std::mem::take(&mut ring.wake)
    });
    for w in wake {
        w.wake();
    }
}

/// Handles completions whenever the ring's descriptor says there are some: a task on the
/// worker's runtime for as long as it runs.
pub(crate) async fn reap_forever() {
    let dup = RING.with(|cell| cell.borrow().as_ref().map(|r| r.wake_fd.try_clone()));
    let dup = match dup {
        None => return,
        Some(Ok(d)) => d,
        Some(Err(e)) => {
            tracing::error!("io_uring: cannot watch the ring: {e}");
            return;
        }
    };
    let Ok(afd) = crate::io::sys::register(dup, tokio::io::Interest::READABLE) else {
        tracing::error!("io_uring: cannot put the ring on the reactor");
        return;
    };
    loop {
        let Ok(mut guard) = afd.readable().await else { return };
        guard.clear_ready();
        drop(guard);
        before_park();
    }
}

/// A connected socket on this thread's ring.
#[derive(Debug)]
pub(crate) struct Sock {
    fd: Option<OwnedFd>,
    ring: u64,
    slot: u32,
}

impl Sock {
    /// Puts `fd` on this thread's ring ([`active`] must be true).
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Sock> {
        let raw = fd.as_raw_fd();
        RING.with(|cell| {
            let mut guard = cell.borrow_mut();
            let ring = guard.as_mut().ok_or_else(|| io::Error::other("no io_uring on this thread"))?;
            let slot = match ring.free.pop() {
                Some(i) => i,
                None => {
                    ring.slots.push(Slot::default());
                    (ring.slots.len() - 1) as u32
                }
            };
            let s = &mut ring.slots[slot as usize];
            s.fd = raw;
            s.live = true;
            s.tx_done = 0;
            Ok(Sock { fd: Some(fd), ring: ring.id, slot })
        })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_ref().expect("open").as_fd()
    }

    /// Leaves the ring (for a parked connection). No read may be armed: an idle read that
    /// was asked to park cancelled its own first.
    pub(crate) fn into_fd(mut self) -> OwnedFd {
        let fd = self.fd.take().expect("open");
        self.detach();
        fd
    }

    fn detach(&mut self) {
        let slot = self.slot;
        let _ = with_ring(self.ring, |ring| {
            let s = &mut ring.slots[slot as usize];
            s.live = false;
            let (rx, tx, poll) = (s.rx && !s.rx_cancel, s.tx.is_some(), s.poll);
            if rx {
                ring.cancel(slot, RX);
            }
            // A send still out belongs to a write that was given up (its timeout, or the
            // connection's end): it would otherwise hold the socket open for as long as the
            // peer does not read.
            if tx {
                ring.cancel(slot, TX);
            }
            if poll {
                ring.cancel(slot, POLL);
            }
            if ring.slots[slot as usize].busy() {
                // Entries naming the descriptor go to the kernel before it is closed or
                // handed on, so none can reach a descriptor that reuses its number.
                let _ = ring.uring.submit();
            } else {
                ring.release(slot);
            }
        });
    }

    /// Copies what is queued into `buf`'s spare room: `Some(n)`, `Some(0)` at the end of
    /// the stream; `None` when nothing is queued. An error the stream ended with is
    /// reported once the queue is empty.
    fn take_queued(s: &mut Slot, buf: &mut BytesMut) -> Option<io::Result<usize>> {
        if !s.queued.is_empty() {
            let room = buf.capacity() - buf.len();
            let n = room.min(s.queued.len());
            buf.extend_from_slice(&s.queued[..n]);
            s.queued.advance(n);
            if s.queued.is_empty() && s.queued.capacity() > QUEUE_KEEP {
                s.queued = BytesMut::new();
            }
            return Some(Ok(n));
        }
        match s.end {
            Some(0) => Some(Ok(0)),
            Some(e) => Some(Err(io::Error::from_raw_os_error(e))),
            None => None,
        }
    }

    /// What is queued, without waiting or a system call; `Ok(None)`: nothing yet.
    pub(crate) fn try_read(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        let slot = self.slot;
        with_ring(self.ring, |ring| Self::take_queued(&mut ring.slots[slot as usize], buf).transpose())?
    }

    /// Waits until more than `min` bytes are queued or the stream ended (`Ok(true)`), or
    /// `park` (an idle connection's check) says to park (`Ok(false)`: its armed read was
    /// cancelled first, and bytes that read got count as arrived).
    pub(crate) async fn wait_queued(
        &self,
        min: usize,
        mut park: impl FnMut(&mut Context<'_>) -> bool,
    ) -> io::Result<bool> {
        let slot = self.slot;
        let mut parking = false;
        std::future::poll_fn(|cx| {
            let r = with_ring(self.ring, |ring| {
                let s = &mut ring.slots[slot as usize];
                if s.queued.len() > min || s.end.is_some() {
                    return Poll::Ready(Ok(true));
                }
                if parking || park(cx) {
                    if !s.rx {
                        return Poll::Ready(Ok(false));
                    }
                    s.rx_waker = Some(cx.waker().clone());
                    if !parking {
                        parking = true;
                        if !s.rx_cancel {
                            s.rx_cancel = true;
                            ring.cancel(slot, RX);
                        }
                    }
                    return Poll::Pending;
                }
                if !s.rx_waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.rx_waker = Some(cx.waker().clone());
                }
                if !s.rx {
                    ring.arm_rx(slot);
                }
                Poll::Pending
            });
            r.unwrap_or_else(|e| Poll::Ready(Err(e)))
        })
        .await
    }

    /// Waits until bytes are queued, the stream ended, or `park` says to park (`Ok(None)`:
    /// nothing read, `fill` not called); then calls `fill` and takes what is queued.
    pub(crate) async fn read_unless_parked(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
        park: impl FnMut(&mut Context<'_>) -> bool,
    ) -> io::Result<Option<usize>> {
        if !self.wait_queued(0, park).await? {
            return Ok(None);
        }
        fill(buf);
        self.try_read(buf).map(|n| Some(n.unwrap_or(0)))
    }

    /// Copies the queued bytes into `buf` (they stay queued), waiting until more than
    /// `have` are there, `buf` is full, or the stream ended (`Ok(0)` if nothing is queued).
    pub(crate) async fn peek_more(&self, buf: &mut [u8], have: usize) -> io::Result<usize> {
        self.wait_queued(have.min(buf.len().saturating_sub(1)), |_| false).await?;
        let slot = self.slot;
        with_ring(self.ring, |ring| {
            let s = &ring.slots[slot as usize];
            if s.queued.len() <= have && s.queued.len() < buf.len() {
                // The stream ended with no more: as a peek at a closed socket says.
                return match s.end {
                    Some(e) if e != 0 => Err(io::Error::from_raw_os_error(e)),
                    _ => Ok(0),
                };
            }
            let n = s.queued.len().min(buf.len());
            buf[..n].copy_from_slice(&s.queued[..n]);
            Ok(n)
        })?
    }

    /// Takes `n` bytes that [`peek_more`](Self::peek_more) showed are queued.
    pub(crate) fn discard_queued(&self, n: usize) -> io::Result<()> {
        let slot = self.slot;
        with_ring(self.ring, |ring| {
            let s = &mut ring.slots[slot as usize];
            if s.queued.len() < n {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            s.queued.advance(n);
            Ok(())
        })?
    }

    /// Waits for `events` (`POLLOUT`) on the socket, with a poll operation.
    pub(crate) async fn wait(&self, events: i16) -> io::Result<()> {
        let slot = self.slot;
        let mut armed = false;
        std::future::poll_fn(|cx| {
            let r = with_ring(self.ring, |ring| {
                let s = &mut ring.slots[slot as usize];
                if armed && !s.poll {
                    let res = s.poll_result.take().unwrap_or(0);
                    return Poll::Ready(if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(()) });
                }
                s.poll_waker = Some(cx.waker().clone());
                if armed || s.poll {
                    // Ours is out, or a dropped wait's still is: its end wakes this one.
                    return Poll::Pending;
                }
                s.poll = true;
                s.poll_result = None;
                armed = true;
                let e = opcode::PollAdd::new(types::Fd(s.fd), events as u32)
                    .build()
                    .user_data(user_data(slot, s.gen, POLL));
                ring.push(&e);
                Poll::Pending
            });
            r.unwrap_or_else(|e| Poll::Ready(Err(e)))
        })
        .await
    }

    /// Sends all of `data` (the slices, in order) through send operations that own copies
    /// of it, `SEND_MAX` at a time. `more`: `MSG_MORE` on the last one (a file follows).
    pub(crate) async fn send_all(&self, bufs: &[&[u8]], more: bool) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut at = (0usize, 0usize);
        let mut left = total;
        while left > 0 {
            self.tx_idle().await?;
            let take = left.min(SEND_MAX);
            left -= take;
            let last = left == 0;
            let slot = self.slot;
            with_ring(self.ring, |ring| {
                let mut buf = ring.spare_sends.pop().unwrap_or_default();
                buf.reserve(take);
                let mut want = take;
                while want > 0 {
                    let b = &bufs[at.0][at.1..];
                    let n = b.len().min(want);
                    buf.extend_from_slice(&b[..n]);
                    want -= n;
                    at.1 += n;
                    if at.1 == bufs[at.0].len() {
                        at = (at.0 + 1, 0);
                    }
                }
                let s = &mut ring.slots[slot as usize];
                s.tx = Some(buf);
                s.tx_done = 0;
                s.tx_result = None;
                s.tx_flags = if more && last { libc::MSG_MORE } else { 0 };
                ring.push_tx(slot);
            })?;
            // The send ends (in the kernel) whether or not this future is still here.
            let res = self.tx_result().await?;
            if res < 0 {
                return Err(io::Error::from_raw_os_error(-res));
            }
        }
        Ok(())
    }

    /// Sends `header` (through the ring) then `len` bytes of `file` from `offset` with
    /// `sendfile`, waiting for room with poll operations. `on_progress` runs after each
    /// call that moved bytes.
    pub(crate) async fn send_file(
        &self,
        header: &[u8],
        file: BorrowedFd<'_>,
        mut offset: u64,
        len: u64,
        on_progress: &(dyn Fn() + Sync),
    ) -> io::Result<()> {
        if !header.is_empty() {
            self.send_all(&[header], len > 0).await?;
        }
        self.tx_idle().await?;
        let end = offset + len;
        while offset < end {
            let want = (end - offset).min(1 << 30) as usize;
            match crate::io::sys::sendfile(self.fd(), file, &mut offset, want) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while sending")),
                Ok(_) => on_progress(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT).await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits until no send is in flight (a cancelled write's may still be).
    async fn tx_idle(&self) -> io::Result<()> {
        let slot = self.slot;
        std::future::poll_fn(|cx| {
            match with_ring(self.ring, |ring| {
                let s = &mut ring.slots[slot as usize];
                if s.tx.is_none() {
                    s.tx_result = None;
                    return Poll::Ready(());
                }
                s.tx_waker = Some(cx.waker().clone());
                Poll::Pending
            }) {
                Ok(p) => p.map(Ok),
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }

    async fn tx_result(&self) -> io::Result<i32> {
        let slot = self.slot;
        std::future::poll_fn(|cx| {
            match with_ring(self.ring, |ring| {
                let s = &mut ring.slots[slot as usize];
                if s.tx.is_none() {
                    return Poll::Ready(s.tx_result.take().unwrap_or(0));
                }
                s.tx_waker = Some(cx.waker().clone());
                Poll::Pending
            }) {
                Ok(p) => p.map(Ok),
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        if self.fd.is_some() {
            self.detach();
        }
    }
}

/// A listener's connections, taken by accept operations on this thread's ring. The
/// listener must outlive it.
#[derive(Debug)]
pub(crate) struct Acceptor {
    ring: u64,
    slot: u32,
}

impl Acceptor {
    /// Puts `listener` (non-blocking) on this thread's ring ([`active`] must be true).
    pub(crate) fn new(listener: BorrowedFd<'_>) -> io::Result<Acceptor> {
        RING.with(|cell| {
            let mut guard = cell.borrow_mut();
            let ring = guard.as_mut().ok_or_else(|| io::Error::other("no io_uring on this thread"))?;
            let slot = match ring.accepts.iter().position(|a| !a.live && a.out == 0) {
                Some(i) => i,
                None => {
                    ring.accepts.push(AcceptSlot::default());
                    ring.accepts.len() - 1
                }
            };
            let a = &mut ring.accepts[slot];
            a.fd = listener.as_raw_fd();
            a.live = true;
            a.ready.clear();
            a.error = None;
            Ok(Acceptor { ring: ring.id, slot: slot as u32 })
        })
    }

    /// The next accepted connection (non-blocking, close-on-exec), or an accept's error.
    /// `room`: how many more connections the server may take; at most that many accepts
    /// (and at most [`ACCEPT_BATCH`]) are out while this waits.
    pub(crate) fn poll_accept(&self, cx: &mut Context<'_>, room: usize) -> Poll<io::Result<OwnedFd>> {
        let slot = self.slot;
        let r = with_ring(self.ring, |ring| {
            let a = &mut ring.accepts[slot as usize];
            if let Some(fd) = a.ready.pop_front() {
                return Poll::Ready(Ok(fd));
            }
            if let Some(e) = a.error.take() {
                return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
            }
            a.waker = Some(cx.waker().clone());
            ring.arm_accepts(slot, room.min(ACCEPT_BATCH));
            Poll::Pending
        });
        r.unwrap_or_else(|e| Poll::Ready(Err(e)))
    }

    /// Stops accepting (the server is at its connection limit, or stops): the accepts out
    /// are cancelled, and the listen backlog keeps new connections. Connections accepted
    /// meanwhile are still taken by [`poll_held`](Self::poll_held) or
    /// [`poll_accept`](Self::poll_accept).
    pub(crate) fn pause(&self) {
        let slot = self.slot;
        let _ = with_ring(self.ring, |ring| ring.stop_accepts(slot));
    }

    /// After [`pause`](Self::pause): the connections accepted before the accepts ended,
    /// one by one, then `None` once none is out.
    pub(crate) fn poll_held(&self, cx: &mut Context<'_>) -> Poll<Option<OwnedFd>> {
        let slot = self.slot;
        let r = with_ring(self.ring, |ring| {
            let a = &mut ring.accepts[slot as usize];
            if let Some(fd) = a.ready.pop_front() {
                return Poll::Ready(Some(fd));
            }
            if a.out == 0 {
                return Poll::Ready(None);
            }
            a.waker = Some(cx.waker().clone());
            Poll::Pending
        });
        r.unwrap_or(Poll::Ready(None))
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        let slot = self.slot;
        let _ = with_ring(self.ring, |ring| {
            let a = &mut ring.accepts[slot as usize];
            a.live = false;
            // Connections accepted and not taken are closed.
            a.ready.clear();
            a.error = None;
            a.waker = None;
            if a.out > 0 {
                ring.stop_accepts(slot);
                // The cancel reaches the kernel before the listener can be closed.
                let _ = ring.uring.submit();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Waker};
    use std::time::Duration;

    use bytes::BytesMut;

    use super::{before_park, install, reap_forever, Acceptor, Sock, ACCEPT_BATCH, BUF_LEN, RING, SEND_MAX};

    /// A single-threaded runtime on this thread's new ring, as a worker has; `None` (the
    /// test says it is skipped) where the kernel refuses io_uring.
    fn ring_runtime() -> Option<tokio::runtime::Runtime> {
        if let Err(e) = install() {
            eprintln!("SKIPPED: no io_uring here: {e}");
            return None;
        }
        Some(tokio::runtime::Builder::new_current_thread().enable_all().on_thread_park(before_park).build().unwrap())
    }

    fn pair() -> (Sock, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (Sock::new(ours.into()).unwrap(), theirs)
    }

    fn queued(s: &Sock) -> usize {
        RING.with(|c| c.borrow().as_ref().unwrap().slots[s.slot as usize].queued.len())
    }

    async fn read(s: &Sock, cap: usize) -> Vec<u8> {
        let mut buf = BytesMut::with_capacity(cap);
        s.read_unless_parked(&mut buf, |_| {}, |_| false).await.unwrap();
        buf.to_vec()
    }

    /// Bytes a read received are queued on the socket, so a read dropped after its receive
    /// completed loses nothing; the end of the stream is `Ok(0)`.
    #[test]
    fn a_dropped_read_loses_nothing_and_the_end_reads_as_zero() {
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            let mut buf = BytesMut::with_capacity(64);
            {
                let mut r = pin!(sock.read_unless_parked(&mut buf, |_| {}, |_| false));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(r.as_mut().poll(&mut cx).is_pending(), "nothing was sent yet");
                theirs.write_all(b"GET / HTTP/1.1\r\n").unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                // Dropped without being polled again: the bytes are the socket's.
            }
            assert_eq!(queued(&sock), 16);
            assert_eq!(read(&sock, 64).await, b"GET / HTTP/1.1\r\n");
            theirs.write_all(b"more").unwrap();
            drop(theirs);
            assert_eq!(read(&sock, 2).await, b"mo", "a read takes what fits");
            assert_eq!(read(&sock, 64).await, b"re");
            let mut end = BytesMut::with_capacity(8);
            assert_eq!(sock.read_unless_parked(&mut end, |_| {}, |_| false).await.unwrap(), Some(0));
        });
    }

    /// A reader that does not read leaves at most one buffer queued however much the peer
    /// sends; all of it arrives in order once it reads again, and the queue's memory goes
    /// once it is read.
    #[test]
    fn a_reader_far_behind_holds_one_buffer_and_misses_nothing() {
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            let total = 4 << 20;
            let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
            let sent = data.clone();
            let writer = std::thread::spawn(move || theirs.write_all(&sent).map(|()| theirs));
            let first = read(&sock, 1).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let held = queued(&sock);
            assert!(held <= BUF_LEN, "{held} queued");
            let mut got = first;
            while got.len() < total {
                got.extend(read(&sock, 256 << 10).await);
            }
            assert!(got == data);
            let kept = RING.with(|c| c.borrow().as_ref().unwrap().slots[sock.slot as usize].queued.capacity());
            assert!(kept <= super::QUEUE_KEEP, "{kept} bytes kept");
            drop(writer.join().unwrap().unwrap());
        });
    }

    /// A socket dropped while its send waits on a peer that does not read (a write given up
    /// at its timeout) is closed: the send is cancelled instead of holding it open.
    #[test]
    fn a_socket_dropped_mid_send_is_closed() {
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            let big = vec![7u8; 8 << 20];
            let r = tokio::time::timeout(Duration::from_millis(200), sock.send_all(&[&big], false)).await;
            assert!(r.is_err(), "the peer reads nothing: the send cannot finish");
            drop(sock);
            tokio::time::sleep(Duration::from_millis(50)).await;
            theirs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut all = Vec::new();
            let end = theirs.read_to_end(&mut all);
            assert!(end.is_ok(), "the socket stayed open: {end:?}");
            assert!(all.len() < big.len());
        });
    }

    /// Sends larger than one operation's buffer, of several slices, arrive whole and in
    /// order; a peer that has gone makes the send fail instead of hanging.
    #[test]
    fn large_sends_arrive_whole_and_a_gone_peer_fails_them() {
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            let big: Vec<u8> = (0..3 * SEND_MAX + 17).map(|i| (i % 253) as u8).collect();
            let reader = std::thread::spawn(move || {
                let mut all = Vec::new();
                theirs.read_to_end(&mut all).unwrap();
                all
            });
            sock.send_all(&[b"head:", &big, b":tail"], false).await.unwrap();
            let fd = sock.fd().try_clone_to_owned().unwrap();
            drop(sock);
            crate::io::sys::shutdown_write(std::os::fd::AsFd::as_fd(&fd));
            let got = reader.join().unwrap();
            assert_eq!(got.len(), big.len() + 10);
            assert!(got[5..5 + big.len()] == big[..] && got.starts_with(b"head:") && got.ends_with(b":tail"));

            let (sock, theirs) = pair();
            drop(theirs);
            let r = tokio::time::timeout(Duration::from_secs(5), sock.send_all(&[&big], false)).await;
            assert!(matches!(r, Ok(Err(_))), "{r:?}");
        });
    }

    /// An idle read asked to park cancels its receive: the descriptor leaves the ring with
    /// nothing of the peer's taken, and a request sent then is still there to read.
    #[test]
    fn an_idle_read_asked_to_park_leaves_the_socket_untouched() {
        use crate::time::timeout::{Group, Timer};
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            let timer = Timer::register(&Arc::new(Group::new(1)), Duration::from_secs(60));
            assert!(timer.enter_idle());
            let mut buf = BytesMut::new();
            let mut filled = false;
            let r = {
                let mut wait = pin!(sock.read_unless_parked(
                    &mut buf,
                    |b| {
                        filled = true;
                        b.reserve(64);
                    },
                    |cx| timer.park_requested(cx),
                ));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(wait.as_mut().poll(&mut cx).is_pending());
                tokio::time::sleep(Duration::from_millis(10)).await;
                timer.ask_to_park();
                wait.await
            };
            assert!(matches!(r, Ok(None)), "{r:?}");
            assert!(!filled);
            let fd = sock.into_fd();
            theirs.write_all(b"GET /next").unwrap();
            let mut plain = UnixStream::from(fd);
            plain.set_nonblocking(false).unwrap();
            let mut got = [0u8; 9];
            plain.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"GET /next");
        });
    }

    /// Peeking leaves the bytes for the reads after it; `discard_queued` takes exactly the
    /// count peeked.
    #[test]
    fn peeks_leave_bytes_queued_and_discards_take_exactly_them() {
        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let (sock, mut theirs) = pair();
            theirs.write_all(b"PROXY").unwrap();
            let mut peek = [0u8; 16];
            let n = sock.peek_more(&mut peek, 0).await.unwrap();
            assert_eq!(&peek[..n], b"PROXY");
            let more = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                theirs.write_all(b" TCP4\r\nGET").unwrap();
            };
            let (n, ()) = tokio::join!(sock.peek_more(&mut peek, 5), more);
            let n = n.unwrap();
            assert_eq!(&peek[..n], b"PROXY TCP4\r\nGET");
            sock.discard_queued(12).unwrap();
            assert_eq!(read(&sock, 64).await, b"GET");
            assert!(sock.discard_queued(1).is_err());
        });
    }

    /// A socket used from a thread other than its ring's fails with an error.
    #[test]
    fn a_socket_off_its_thread_fails_instead_of_touching_another_ring() {
        let Some(_rt) = ring_runtime() else { return };
        let (sock, _theirs) = pair();
        let r = std::thread::spawn(move || {
            let mut buf = BytesMut::with_capacity(8);
            let e = sock.try_read(&mut buf).unwrap_err();
            std::mem::forget(sock);
            e.kind()
        })
        .join()
        .unwrap();
        assert_eq!(r, std::io::ErrorKind::Unsupported);
    }

    /// A listener's accepts: every connection arrives once, in a usable (non-blocking)
    /// socket; however many connect, at most `ACCEPT_BATCH` (and at most the room given)
    /// are accepted ahead of the loop, the backlog keeping the rest until it takes them;
    /// after a pause nothing more is accepted, the held ones are handed over, and a
    /// dropped acceptor closes what it held.
    #[test]
    fn accepts_take_each_connection_once_and_hold_at_most_a_batch() {
        use std::net::{TcpListener, TcpStream};
        use std::os::fd::AsFd;

        let Some(rt) = ring_runtime() else { return };
        rt.block_on(async {
            tokio::spawn(reap_forever());
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let acceptor = Acceptor::new(listener.as_fd()).unwrap();
            let acc = &acceptor;
            let next = move |room| std::future::poll_fn(move |cx| acc.poll_accept(cx, room));
            let state = || {
                RING.with(|c| {
                    let g = c.borrow();
                    let a = &g.as_ref().unwrap().accepts[acceptor.slot as usize];
                    (a.ready.len(), a.out)
                })
            };
            let settle = || tokio::time::sleep(Duration::from_millis(200));

            let mut client = TcpStream::connect(addr).unwrap();
            let conn = tokio::time::timeout(Duration::from_secs(5), next(100)).await.expect("accepted").unwrap();
            let sock = Sock::new(conn).unwrap();
            client.write_all(b"ping").unwrap();
            assert_eq!(read(&sock, 16).await, b"ping");
            sock.send_all(&[b"pong"], false).await.unwrap();
            let mut got = [0u8; 4];
            client.read_exact(&mut got).unwrap();
            assert_eq!(&got, b"pong");

            // 40 connect while the loop takes none: the accepts out take ACCEPT_BATCH - 1
            // of them (one was taken above), the backlog keeps the rest.
            let mut clients: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
            settle().await;
            let (held, out) = state();
            assert_eq!((held, out), (ACCEPT_BATCH - 1, 0), "held and out for a loop that takes none");
            for taken in 0..40 {
                let c = tokio::time::timeout(Duration::from_secs(5), next(100)).await;
                c.unwrap_or_else(|_| panic!("only {taken} of 40 accepted")).unwrap();
                let (held, out) = state();
                assert!(held + out <= ACCEPT_BATCH, "{held} held and {out} out");
            }

            // Paused: the accepts out are cancelled.
            acceptor.pause();
            settle().await;
            assert_eq!(state(), (0, 0), "the accepts out were cancelled");

            // With room for 2, two accepts at most.
            {
                let mut w = std::pin::pin!(next(2));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(w.as_mut().poll(&mut cx).is_pending());
            }
            assert_eq!(state(), (0, 2), "held and out with room for 2");

            // Paused again: nothing more is accepted; connections wait in the backlog.
            acceptor.pause();
            settle().await;
            assert_eq!(state(), (0, 0));
            clients.extend((0..5).map(|_| TcpStream::connect(addr).unwrap()));
            settle().await;
            assert_eq!(std::future::poll_fn(|cx| acceptor.poll_held(cx)).await.map(|_| ()), None);
            for _ in 0..5 {
                tokio::time::timeout(Duration::from_secs(5), next(100))
                    .await
                    .expect("accepted after the pause")
                    .unwrap();
            }

            // Held when the loop pauses for good (a drain): handed over, not lost.
            clients.extend((0..3).map(|_| TcpStream::connect(addr).unwrap()));
            settle().await;
            acceptor.pause();
            let mut handed = 0;
            while std::future::poll_fn(|cx| acceptor.poll_held(cx)).await.is_some() {
                handed += 1;
            }
            assert_eq!(handed, 3);

            // Dropped with a connection held: it is closed (the peer reads the end).
            {
                let mut w = std::pin::pin!(next(100));
                let mut cx = Context::from_waker(Waker::noop());
                assert!(w.as_mut().poll(&mut cx).is_pending());
            }
            let mut last = TcpStream::connect(addr).unwrap();
            settle().await;
            assert_eq!(state().0, 1, "accepted, not taken");
            drop(acceptor);
            tokio::time::sleep(Duration::from_millis(50)).await;
            last.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut end = [0u8; 1];
            let r = last.read(&mut end);
            let closed = match &r {
                Ok(0) => true,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
                Ok(_) => false,
            };
            assert!(closed, "a held connection was left open: {r:?}");
            drop((clients, client, listener));
        });
    }

    /// A ring ends its operations before its thread does: a listener whose accept was out
    /// (and cancelled by its acceptor's drop) takes no connection once the thread is gone.
    /// Closing the ring alone leaves the cancelled accept to the kernel's own clean-up,
    /// which holds the listener open for a moment after the thread (or process) ended.
    #[test]
    fn a_listener_takes_nothing_once_its_rings_thread_has_ended() {
        use std::net::{TcpListener, TcpStream};
        use std::os::fd::AsFd;

        for round in 0..30 {
            let addr = std::thread::spawn(|| {
                let rt = ring_runtime()?;
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                listener.set_nonblocking(true).unwrap();
                let addr = listener.local_addr().unwrap();
                rt.block_on(async {
                    let acceptor = Acceptor::new(listener.as_fd()).unwrap();
                    let mut accept = pin!(std::future::poll_fn(|cx| acceptor.poll_accept(cx, 100)));
                    assert!(accept.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
                    // The accepts go to the kernel, as at the end of a worker's turn.
                    before_park();
                });
                drop(rt);
                drop(listener);
                Some(addr)
            })
            .join()
            .unwrap();
            let Some(addr) = addr else { return };
            let taken = TcpStream::connect(addr);
            assert!(taken.is_err(), "round {round}: a connection was taken after the ring's thread ended");
        }
    }
}
