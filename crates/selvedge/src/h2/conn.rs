//! The HTTP/2 connection driver (the seed's Figure 5, with tokio tasks for threads):
//!
//! - the **receiver** reads the socket, cuts frames and feeds them to the sans-IO
//!   [`Proto`] under one short lock per read; new requests become stream tasks;
//! - a **worker task per stream** runs the app (panics become 500), hands the response to
//!   the `Proto`, and for a streaming body writes pieces with backpressure;
//! - the **sender** waits until there is output, then drains the control queue first and
//!   packs frames of many streams, chosen by the weighted fair queue, into one buffer that
//!   goes out in one write.
//!
//! Receiver and sender run in the connection's own task, so the timeout manager's abort
//! stops both; a guard aborts the stream tasks when the connection ends.
//!
//! Timeouts: the handshake has `handshake_timeout` (the connection's [`Timer`]). After it,
//! the sans-IO `Proto` keeps the deadlines (`proto/timers.rs`) and the reaper acts on
//! them: a connection held back by closed flow-control windows (a peer that stops reading,
//! "zero-window slow read") gets `send_timeout` from its last DATA progress, which
//! control-frame chatter (PINGs) does not extend, then GOAWAY(ENHANCE_YOUR_CALM); an idle
//! one gets GOAWAY(NO_ERROR). Either GOAWAY is flushed before the FIN. The connection's
//! timer stays armed behind them, later by the linger time and a second ([`BACKSTOP`]), in
//! case the socket itself takes nothing; a write in progress has `send_timeout`.
//!
//! Parking: a quiet connection (no stream open, nothing to send: `Proto::is_quiet`) waits
//! as an idle one, and when the timeout manager asks it to park, its task ends: the
//! `Proto` leaves as a small record ([`Ended::Park`], `server::park`) and [`resume`]
//! rebuilds it when bytes arrive.

use std::collections::HashMap;
use std::fmt;
use std::future::{poll_fn, Future};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::Version;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::codec::{self, PrefaceMatch};
use super::frame::{Reason, HEADER_LEN};
use super::proto::{After, Event, FileRead, Parked, Proto, Timeouts, FAREWELL_LEN};
use crate::app::body::{Body, BodySink, BodySource, BodyWriter, WriteFuture};
use crate::app::response::{Response, StreamBody};
use crate::app::App;
use crate::dispatch::{or_500, poll_catching, AppSlot};
use crate::error::{Error, Kind};
use crate::io::sys::PeerAddr;
use crate::io::transport::Transport;
use crate::settings::Settings;
use crate::stats::{OpenConn, Phase};
use crate::time::date::{self, DATE_LEN};
use crate::time::timeout::{now_ms, Timer, TimerHandle};
use crate::Request;

/// How much later than the `Proto`'s own deadline the connection's timer aborts it: time
/// for the GOAWAY and the lingering close.
const BACKSTOP: std::time::Duration = std::time::Duration::from_secs(1);

/// Room the receiver keeps for the next read while streams are open.
const RECV_RESERVE: usize = 32 * 1024;

/// State shared by the receiver, the sender and the stream tasks.
pub(crate) struct Shared {
    proto: Mutex<Proto>,
    /// Wakes the sender.
    wake: Notify,
    /// The socket is finished (EOF, error): everyone stops.
    closed: AtomicBool,
    /// The sender is inside a write (then only the send timeout applies).
    writing: AtomicBool,
    /// When output got stuck behind flow control.
    blocked_since: Mutex<Option<u64>>,
    tasks: Mutex<HashMap<u32, AbortHandle>>,
    /// Wakes the reaper: a stream or header-block deadline was armed.
    timers: Notify,
    /// Wakes the receiver: the sender wrote its last bytes and no stream is open, so the
    /// connection may now wait as an idle one (and park).
    quiet: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Proto> {
        self.proto.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Aborts every stream task when the connection ends (however it ends), unless it parks.
struct TaskGuard(Option<Arc<Shared>>);

impl TaskGuard {
    /// The connection parks: nothing to stop.
    fn disarm(mut self) -> Option<Arc<Shared>> {
        self.0.take()
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let Some(shared) = self.0.take() else { return };
        shared.closed.store(true, Ordering::SeqCst);
        let tasks = std::mem::take(&mut *shared.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, t) in tasks {
            t.abort();
        }
        // Wake stream tasks parked on body reads or writes so they see the end.
        let mut p = shared.lock();
        p.go_away(Reason::CANCEL);
    }
}

/// How an HTTP/2 connection's task ended.
pub(crate) enum Ended {
    /// The connection is over.
    Closed,
    /// The connection was idle, and the timeout manager asked it to park: what it needs
    /// to go on leaves the task (see `server::park`).
    Park { sock: Arc<Transport>, timer: Timer, idle: Box<Idle> },
}

/// A parked HTTP/2 connection's state: what its quiet `Proto` keeps (the peer's settings,
/// the windows, the HPACK tables), and its place in the engine's counts.
pub(crate) struct Idle {
    proto: Parked,
    open: OpenConn,
}

impl Idle {
    /// The GOAWAY(NO_ERROR) a parked connection closes with (its deadline passed, or the
    /// server shuts down).
    pub(crate) fn farewell(&self) -> [u8; FAREWELL_LEN] {
        self.proto.farewell()
    }
}

/// How the exchange ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Over {
    /// The peer is gone (or the socket failed).
    Gone,
    /// We sent GOAWAY with this code and everything is flushed: close with a linger.
    Linger(Reason),
    /// Idle, and asked to park.
    Park,
}

/// Serves an HTTP/2 connection. `rbuf` holds what was already read (the preface or a
/// prefix of it); `upgraded` is the request of an `Upgrade: h2c`, to be answered on
/// stream 1 (the 101 has been sent).
///
/// Its future is what an idle connection costs, so each phase's state lives only in that
/// phase: the `Proto` is built by a plain function (a local moved into the shared state
/// would keep its room in the future), the handshake and the exchange are futures of their
/// own, and the lingering close comes after the exchange's futures are gone.
pub(crate) async fn serve_http2<A: App>(
    sock: Arc<Transport>,
    peer: PeerAddr,
    app: Arc<A>,
    cfg: Arc<Settings>,
    timer: Timer,
    rbuf: BytesMut,
    upgraded: Option<Box<Request>>,
) -> Ended {
    let open = crate::stats::OpenConn::new(true, &timer);
    let (shared, wbuf) = start(&cfg, upgraded.as_deref());
    let guard = TaskGuard(Some(shared.clone()));
    timer.set_deadline(now_ms(), cfg.h2.handshake_timeout);
    let parts = Parts { shared: &shared, sock: &sock, app: &app, cfg: &cfg };
    let Some((rbuf, wbuf)) = handshake(&parts, &open, wbuf, rbuf, upgraded).await else {
        return Ended::Closed;
    };
    let over = exchange(&parts, &peer, Watch { timer: &timer, open: &open }, rbuf, wbuf).await;
    finish(over, guard, shared, sock, &cfg, timer, open).await
}

/// A parked HTTP/2 connection whose socket turned readable: it goes on where it stopped,
/// with no handshake, and may park again.
pub(crate) async fn resume<A: App>(
    sock: Arc<Transport>,
    peer: PeerAddr,
    app: Arc<A>,
    cfg: Arc<Settings>,
    timer: Timer,
    idle: Box<Idle>,
) -> Ended {
    let (shared, open) = unpack(idle, &cfg);
    let guard = TaskGuard(Some(shared.clone()));
    let parts = Parts { shared: &shared, sock: &sock, app: &app, cfg: &cfg };
    let over = exchange(&parts, &peer, Watch { timer: &timer, open: &open }, BytesMut::new(), Vec::new()).await;
    finish(over, guard, shared, sock, &cfg, timer, open).await
}

/// The shared state of a resumed connection (a plain function: the `Proto` moves into it
/// here, not through the task's future).
fn unpack(idle: Box<Idle>, cfg: &Settings) -> (Arc<Shared>, OpenConn) {
    let Idle { proto, open } = *idle;
    let proto = Proto::unpark(proto, cfg.h2.clone(), cfg.server_name, timeouts(cfg));
    (Arc::new(Shared::new(proto)), open)
}

/// The connection leaves its task: its `Proto`, compacted, goes with it, and its timer
/// now holds the idle deadline the `Proto` kept (the lot closes it then, with GOAWAY).
fn park(
    guard: TaskGuard,
    shared: Arc<Shared>,
    sock: Arc<Transport>,
    cfg: &Settings,
    timer: Timer,
    open: OpenConn,
) -> Ended {
    drop(guard.disarm());
    match Arc::try_unwrap(shared) {
        Ok(shared) => {
            let proto = shared.proto.into_inner().unwrap_or_else(|e| e.into_inner()).park();
            if let Some(at) = proto.idle_deadline(timeouts(cfg).idle) {
                timer.set_at(at);
            }
            Ended::Park { sock, timer, idle: Box::new(Idle { proto, open }) }
        }
        // Not reached: the receiver asks to park only when nothing else holds the state.
        Err(shared) => {
            drop(TaskGuard(Some(shared)));
            Ended::Closed
        }
    }
}

/// After the exchange: the connection parks, or its close is counted, its state goes
/// (stream tasks stopped, tables freed), and a GOAWAY we sent is followed by a lingering
/// close, which needs only the socket (and the timer, behind it).
async fn finish(
    over: Over,
    guard: TaskGuard,
    shared: Arc<Shared>,
    sock: Arc<Transport>,
    cfg: &Settings,
    timer: Timer,
    open: OpenConn,
) -> Ended {
    if over == Over::Park {
        return park(guard, shared, sock, cfg, timer, open);
    }
    if let Some(why) = shared.lock().close_reason() {
        open.close_as(why);
    }
    drop(guard);
    drop(shared);
    if let Over::Linger(reason) = over {
        if reason != Reason::NO_ERROR {
            cfg.exception(&Error::new(Kind::BadRequest, "HTTP/2 connection error (GOAWAY sent)"));
        }
        linger(&sock, cfg).await;
    }
    drop(timer);
    Ended::Closed
}

impl Shared {
    fn new(proto: Proto) -> Shared {
        Shared {
            proto: Mutex::new(proto),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            writing: AtomicBool::new(false),
            blocked_since: Mutex::new(None),
            tasks: Mutex::new(HashMap::new()),
            timers: Notify::new(),
            quiet: Notify::new(),
        }
    }
}

/// The connection's shared state, and the write buffer with our SETTINGS in it (the
/// server preface, sent before the client's arrives).
fn start(cfg: &Settings, upgraded: Option<&Request>) -> (Arc<Shared>, Vec<u8>) {
    let h2cfg = &cfg.h2;
    let mut proto = Proto::new(h2cfg.clone(), cfg.server_name);
    proto.set_timeouts(timeouts(cfg));
    if let Some(req) = upgraded {
        proto.upgrade_stream(req.header("http2-settings"), req.method() == http::Method::HEAD);
    }
    let shared = Arc::new(Shared::new(proto));
    let mut wbuf = Vec::with_capacity(h2cfg.write_batch + 16 * 1024);
    shared.lock().poll_transmit(&mut wbuf, 0, &[0; DATE_LEN], &mut Vec::new());
    (shared, wbuf)
}

/// The `Proto`'s deadlines, from the settings.
fn timeouts(cfg: &Settings) -> Timeouts {
    let ms = |d: std::time::Duration| d.as_millis() as u64;
    Timeouts {
        header: ms(cfg.header_timeout),
        body: ms(cfg.body_timeout),
        min_rate: cfg.min_body_rate,
        grace: ms(cfg.body_rate_grace),
        stall: ms(cfg.h2.stream_stall_timeout),
        send: ms(cfg.send_timeout),
        idle: ms(cfg.idle_timeout),
        max_drain: cfg.max_drain,
    }
}

/// What the phases of a connection share.
struct Parts<'a, A> {
    shared: &'a Arc<Shared>,
    sock: &'a Transport,
    app: &'a Arc<A>,
    cfg: &'a Arc<Settings>,
}

/// Sends our SETTINGS, starts the app on an upgraded request, and waits for the client's
/// preface: what is left of the receive buffer after it, and the (empty) write buffer.
/// `None`: the connection is over (a wrong preface is answered with GOAWAY first).
async fn handshake<A: App>(
    parts: &Parts<'_, A>,
    open: &OpenConn,
    mut wbuf: Vec<u8>,
    mut rbuf: BytesMut,
    upgraded: Option<Box<Request>>,
) -> Option<(BytesMut, Vec<u8>)> {
    let Parts { shared, sock, app, cfg } = *parts;
    if sock.write_all(&wbuf).await.is_err() {
        return None;
    }
    wbuf.clear();
    if let Some(req) = upgraded {
        let mut ready = Vec::new();
        let mut slot = AppSlot::default();
        slot.load(owned_call(app.clone(), *req, 1));
        start_app(shared, cfg, 1, &mut slot, &mut ready);
        hand_over(shared, cfg, ready);
    }
    loop {
        match codec::preface(&rbuf) {
            PrefaceMatch::Full => break,
            PrefaceMatch::No => {
                let mut out = Vec::new();
                {
                    let mut p = shared.lock();
                    p.go_away(Reason::PROTOCOL_ERROR);
                    p.poll_transmit(&mut out, 0, &[0; DATE_LEN], &mut Vec::new());
                }
                let _ = sock.write_all(&out).await;
                open.close_as(crate::stats::CloseReason::Error);
                cfg.exception(&Error::new(Kind::BadRequest, "invalid HTTP/2 connection preface"));
                linger(sock, cfg).await;
                return None;
            }
            PrefaceMatch::Partial => {
                if rbuf.capacity() - rbuf.len() < 1024 {
                    rbuf.reserve(16 * 1024);
                }
                match sock.read(&mut rbuf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        }
    }
    let _ = rbuf.split_to(codec::PREFACE.len());
    Some((rbuf, wbuf))
}

/// The exchange: the receiver, the sender and the reaper until the connection is over
/// (or parks).
async fn exchange<A: App>(
    parts: &Parts<'_, A>,
    peer: &PeerAddr,
    watch: Watch<'_>,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
) -> Over {
    let Parts { shared, sock, app, cfg } = *parts;
    let send = sender(shared, sock, cfg, watch.timer, wbuf, watch.open);
    let recv = receiver(shared, sock, app, cfg, peer, watch, rbuf);
    let reap = reaper(shared);
    tokio::pin!(recv, send, reap);
    // The sender decides when the connection is over: if it finishes first (going away
    // and the last stream is answered) the receiver is dropped mid-read (cancel safe);
    // if the receiver finishes first (EOF, connection error) the sender still flushes.
    // Biased, receiver first: the sender then runs in the same poll, right after the
    // receiver queued responses, while their streams are still in the cache (an unbiased
    // select polls them in random order, and half the time the sender's turn would come a
    // whole scheduler round later).
    // A receiver that parks does so with the sender idle (nothing queued, no write in
    // progress): dropping the sender there loses nothing.
    let over = |f: Option<Reason>| f.map_or(Over::Gone, Over::Linger);
    tokio::select! {
        biased;
        r = &mut recv => match r {
            Recv::Park => Over::Park,
            Recv::Over => over(send.await),
        },
        f = &mut send => over(f),
        () = &mut reap => Over::Gone,
    }
}

/// How the receiver ended.
enum Recv {
    /// EOF, a connection error, the end of a graceful close: the sender finishes.
    Over,
    /// Idle, and asked to park.
    Park,
}

/// What keeps watch on the connection: its timer, and its place in the engine's counts.
#[derive(Clone, Copy)]
struct Watch<'a> {
    timer: &'a Timer,
    open: &'a OpenConn,
}

/// Sleeps until the earliest stream or header-block deadline, then acts on the expired
/// ones (see `proto/timers.rs`). Idle while none is armed; never returns.
async fn reaper(shared: &Shared) {
    loop {
        let changed = shared.timers.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let next = shared.lock().poll_timeout();
        match next {
            None => changed.await,
            Some(at) => {
                let now = now_ms();
                if at > now {
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_millis(at - now)) => {}
                        () = changed => continue,
                    }
                }
                shared.lock().handle_timeout(now_ms());
                shared.wake.notify_one();
                // The coarse clock may lag the sleep: do not spin while it catches up.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    }
}

/// Lingering close, so the peer reads our GOAWAY instead of a reset (see `Transport::linger`).
async fn linger(sock: &Transport, cfg: &Settings) {
    sock.linger(cfg.linger_timeout, crate::io::transport::LINGER_HTTP2).await;
}

/// Sets the connection's timer after activity: the backstop behind the `Proto`'s send and
/// idle deadlines (with streams in flight, the idle timeout itself, as before).
fn arm(shared: &Shared, p: &Proto, timer: &TimerHandle, cfg: &Settings) {
    if shared.writing.load(Ordering::Relaxed) {
        return;
    }
    let mut since = shared.blocked_since.lock().unwrap_or_else(|e| e.into_inner());
    let backstop = cfg.linger_timeout + BACKSTOP;
    if p.has_streams() && p.flow_blocked() {
        let at = *since.get_or_insert_with(now_ms);
        timer.set_deadline(at, cfg.send_timeout + backstop);
    } else {
        *since = None;
        timer.tickle(if p.has_streams() { cfg.idle_timeout } else { cfg.idle_timeout + backstop });
    }
}

async fn receiver<A: App>(
    shared: &Arc<Shared>,
    sock: &Transport,
    app: &Arc<A>,
    cfg: &Arc<Settings>,
    peer: &PeerAddr,
    watch: Watch<'_>,
    mut rbuf: BytesMut,
) -> Recv {
    let Watch { timer, open } = watch;
    let mut events = Vec::new();
    let mut shutdown_seen = false;
    let tls = sock.tls();
    loop {
        let (done, quiet) = {
            let mut p = shared.lock();
            let now = now_ms();
            p.handle_all(&mut rbuf, now);
            p.poll_events(&mut events);
            if p.take_timers_changed() {
                shared.timers.notify_one();
            }
            arm(shared, &p, timer, cfg);
            let streams = p.has_streams();
            open.set_phase(if streams { Phase::Send } else { Phase::Idle });
            let quiet = rbuf.is_empty() && !shared.writing.load(Ordering::Relaxed) && p.is_quiet();
            (p.is_done(), quiet)
        };
        spawn_streams(shared, app, cfg, peer, &tls, &mut events);
        shared.wake.notify_one();
        if done || shared.closed.load(Ordering::SeqCst) {
            return Recv::Over;
        }
        // With nothing buffered, the connection waits without its receive buffer (back to
        // the thread's pool, taken again once bytes arrive: a busy worker recycles the
        // same warm buffer), so an idle connection holds none.
        if rbuf.is_empty() {
            crate::io::pool::put_read(std::mem::take(&mut rbuf));
        } else if rbuf.capacity() - rbuf.len() < 4096 {
            rbuf.reserve(RECV_RESERVE);
        }
        let fill = |b: &mut BytesMut| {
            if b.capacity() - b.len() < 4096 {
                *b = crate::io::pool::take_read(RECV_RESERVE);
            }
        };
        let r = if quiet && !shutdown_seen {
            match idle_wait(shared, sock, timer, &mut rbuf, fill).await {
                Wait::Read(r) => r,
                Wait::Again => continue,
                Wait::Park => return Recv::Park,
                Wait::Shutdown => {
                    shutdown_seen = true;
                    shared.lock().shutdown();
                    continue;
                }
                Wait::Claimed => {
                    // The task is being stopped: the sender too.
                    shared.closed.store(true, Ordering::SeqCst);
                    shared.wake.notify_one();
                    return Recv::Over;
                }
            }
        } else {
            tokio::select! {
                r = sock.read_when_ready(&mut rbuf, fill) => r,
                _ = timer.wait_shutdown(), if !shutdown_seen => {
                    shutdown_seen = true;
                    shared.lock().shutdown();
                    continue;
                }
                () = shared.quiet.notified(), if !shutdown_seen => continue,
            }
        };
        match r {
            Ok(0) | Err(_) => {
                shared.closed.store(true, Ordering::SeqCst);
                shared.wake.notify_one();
                return Recv::Over;
            }
            Ok(_) => {}
        }
    }
}

/// How a quiet connection's wait ended.
enum Wait {
    /// The read's result.
    Read(std::io::Result<usize>),
    /// Asked to park, but something still holds the connection's state: wait again.
    Again,
    /// Asked to park, and it can.
    Park,
    /// The server shuts down: the usual graceful close (GOAWAY, the streams finish).
    Shutdown,
    /// Shutdown claimed the idle connection (its task is being stopped): the GOAWAY went
    /// out here.
    Claimed,
}

/// A quiet connection (no stream, nothing to send, see `Proto::is_quiet`) waits as an idle
/// one: the timeout manager may ask it to park, and may stop its task at shutdown, in which
/// case [`Farewell`] sends the GOAWAY the sender can no longer send.
async fn idle_wait(
    shared: &Arc<Shared>,
    sock: &Transport,
    timer: &Timer,
    rbuf: &mut BytesMut,
    fill: impl FnOnce(&mut BytesMut),
) -> Wait {
    if timer.shutting_down() {
        return Wait::Shutdown;
    }
    let mut bye = Farewell { shared, sock, armed: true };
    if !timer.enter_idle() {
        return if timer.leave_idle() {
            bye.armed = false;
            Wait::Shutdown
        } else {
            Wait::Claimed
        };
    }
    let r = tokio::select! {
        // Drain or shutdown first: a connection asked to park as draining begins is told
        // (GOAWAY) instead of parking.
        biased;
        _ = timer.wait_shutdown() => {
            if !timer.leave_idle() {
                return Wait::Claimed;
            }
            bye.armed = false;
            return Wait::Shutdown;
        }
        r = sock.idle_read(rbuf, fill, timer) => r,
    };
    match r {
        Ok(None) if timer.shutting_down() => {
            if !timer.leave_idle() {
                return Wait::Claimed;
            }
            bye.armed = false;
            Wait::Shutdown
        }
        Ok(None) if can_park(shared) => {
            bye.armed = false;
            Wait::Park
        }
        Ok(None) | Ok(Some(1..)) if !timer.leave_idle() => Wait::Claimed,
        Ok(None) => {
            bye.armed = false;
            Wait::Again
        }
        Ok(Some(n)) => {
            bye.armed = false;
            Wait::Read(Ok(n))
        }
        Err(e) => {
            bye.armed = false;
            Wait::Read(Err(e))
        }
    }
}

/// Whether a quiet connection can leave its task: nothing but the task holds its state
/// (the task's two handles: no stream task, body reader or writer is left), and it is
/// still quiet.
fn can_park(shared: &Arc<Shared>) -> bool {
    Arc::strong_count(shared) == 2
        && !shared.writing.load(Ordering::Relaxed)
        && shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
        && shared.lock().is_quiet()
}

/// Sends the GOAWAY(NO_ERROR) of a quiet connection whose task is stopped while it waits
/// (shutdown claimed it): written at once, before the socket closes with the task.
struct Farewell<'a> {
    shared: &'a Shared,
    sock: &'a Transport,
    armed: bool,
}

impl Drop for Farewell<'_> {
    fn drop(&mut self) {
        if !self.armed || self.shared.writing.load(Ordering::Relaxed) {
            return;
        }
        let bytes = self.shared.lock().farewell();
        if let Some(b) = bytes {
            self.sock.last_words(&b);
        }
    }
}
/// The sender: returns the connection error it sent (or `NO_ERROR` for a graceful end)
/// when the connection should close with a linger, `None` when the peer is gone.
async fn sender(
    shared: &Arc<Shared>,
    sock: &Transport,
    cfg: &Arc<Settings>,
    timer: &TimerHandle,
    mut wbuf: Vec<u8>,
    open: &OpenConn,
) -> Option<Reason> {
    let batch = cfg.h2.write_batch;
    let mut reads = Vec::new();
    // File payloads of the batch, read outside the lock and sent between its pieces.
    let mut fbuf = Vec::new();
    let mut date = [0u8; DATE_LEN];
    loop {
        let notified = shared.wake.notified();
        date::current(&mut date);
        let (done, failed, streams, quiet) = {
            let mut p = shared.lock();
            p.set_now(now_ms());
            p.poll_transmit(&mut wbuf, batch, &date, &mut reads);
            if p.take_timers_changed() {
                shared.timers.notify_one();
            }
            (p.is_done() && !p.has_output(), p.failed(), p.has_streams(), p.is_quiet())
        };
        open.set_phase(if streams { Phase::Send } else { Phase::Idle });
        if !wbuf.is_empty() {
            shared.writing.store(true, Ordering::Relaxed);
            timer.tickle(cfg.send_timeout);
            let bulk = wbuf.len() + reads.iter().map(|r| r.len).sum::<usize>() >= batch && !reads.is_empty();
            let r = if reads.is_empty() {
                sock.write_all(&wbuf).await
            } else {
                let (at, failed) = read_files(shared, &mut fbuf, &reads);
                let mut pieces = pieces(&wbuf, &fbuf, &reads, &at, &failed);
                sock.write_all_vectored(&mut pieces).await
            };
            shared.writing.store(false, Ordering::Relaxed);
            wbuf.clear();
            reads.clear();
            // A bulk sender keeps its payload buffer; one that sent a little lets it go.
            if fbuf.capacity() > 2 * batch {
                fbuf = Vec::new();
            }
            fbuf.clear();
            if r.is_err() {
                shared.closed.store(true, Ordering::SeqCst);
                return None;
            }
            {
                let p = shared.lock();
                arm(shared, &p, timer, cfg);
            }
            if bulk {
                // A full batch of file data: let the reactor and the worker's other
                // connections run before the next one, as an event loop does between
                // writes (bench/RESULTS.md has the large-file numbers).
                tokio::task::yield_now().await;
            }
            continue;
        }
        if done {
            shared.closed.store(true, Ordering::SeqCst);
            return Some(failed.unwrap_or(Reason::NO_ERROR));
        }
        if shared.closed.load(Ordering::SeqCst) {
            return None;
        }
        // With no stream open, the connection waits without its write buffer, its file
        // payload buffer (a batch of a file: 112 KiB) and its decoded-fields arena.
        if wbuf.capacity() > 0 && !streams {
            wbuf = Vec::new();
            fbuf = Vec::new();
            shared.lock().release_idle();
        }
        if quiet {
            // Nothing left to write and no stream open: the receiver may now wait as an
            // idle connection (and park).
            shared.quiet.notify_one();
        }
        notified.await;
        if wbuf.capacity() == 0 {
            wbuf.reserve(batch + 16 * 1024);
        }
    }
}

/// Reads the file payloads of the batch's DATA frames into `fbuf` (one after another, in
/// batch order), outside the connection's lock; returns where each payload starts in
/// `fbuf`, and the streams whose read failed or came up short (the file shrank): their
/// frames are left out of what is sent ([`pieces`]), and the `Proto` gives their window
/// back and resets them. Frames that follow each other in one stream's file (a batch holds
/// several of a large file) are read with one `pread` (seven 16 KB frames of a 112 KB batch:
/// one system call instead of seven).
fn read_files(shared: &Shared, fbuf: &mut Vec<u8>, reads: &[FileRead]) -> (Vec<usize>, Vec<u32>) {
    let mut at = Vec::with_capacity(reads.len());
    let mut failed: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < reads.len() {
        let r = &reads[i];
        // The run of frames continuing this one's range of the same stream.
        let mut end = i + 1;
        let mut len = r.len;
        while end < reads.len()
            && reads[end].stream == r.stream
            && reads[end].offset == r.offset + len as u64
            && Arc::ptr_eq(&reads[end].file, &r.file)
        {
            len += reads[end].len;
            end += 1;
        }
        let start = fbuf.len();
        at.extend(reads[i..end].iter().map(|f| start + (f.offset - r.offset) as usize));
        i = end;
        if failed.contains(&r.stream) {
            continue;
        }
        while fbuf.len() - start < len {
            let got = fbuf.len() - start;
            match crate::io::sys::pread_append(r.file.as_fd(), fbuf, len - got, r.offset + got as u64) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if fbuf.len() - start < len {
            fbuf.truncate(start);
            failed.push(r.stream);
        }
    }
    if !failed.is_empty() {
        let mut p = shared.lock();
        for &id in &failed {
            let removed = reads.iter().filter(|r| r.stream == id).map(|r| r.len as u64).sum();
            p.file_failed(id, removed);
        }
    }
    (at, failed)
}

/// The batch as slices for one vectored write: `out` with each file payload (from `fbuf`
/// at `at`) in its place; the frames of `failed` streams (header and payload) left out.
fn pieces<'a>(out: &'a [u8], fbuf: &'a [u8], reads: &[FileRead], at: &[usize], failed: &[u32]) -> Vec<&'a [u8]> {
    let mut v = Vec::with_capacity(2 * reads.len() + 1);
    let mut from = 0;
    for (r, &f) in reads.iter().zip(at) {
        if failed.contains(&r.stream) {
            v.push(&out[from..r.at - HEADER_LEN]);
        } else {
            v.push(&out[from..r.at]);
            v.push(&fbuf[f..f + r.len]);
        }
        from = r.at;
    }
    v.push(&out[from..]);
    v
}

/// Starts the app for each new request (see [`start_app`]) and hands over the answers
/// that were ready at once.
fn spawn_streams<A: App>(
    shared: &Arc<Shared>,
    app: &Arc<A>,
    cfg: &Arc<Settings>,
    peer: &PeerAddr,
    secure: &Option<crate::io::transport::Tls>,
    events: &mut Vec<Event>,
) {
    if events.is_empty() {
        return;
    }
    // Sized for the batch at once: grown one request at a time, it was reallocated (and
    // its answers copied) about a dozen times per batch of a hundred.
    let mut ready: Vec<(u32, Option<Response>)> = Vec::with_capacity(events.len());
    // One box for the app futures of the whole batch: most answer at their first poll and
    // leave it empty for the next (one allocation per batch, not per request). It goes
    // with the batch: an idle connection keeps none.
    let mut slot = AppSlot::default();
    for ev in events.drain(..) {
        match ev {
            Event::Request(id, head, has_body) => {
                let body =
                    if has_body { Body::stream(BodyReader { shared: shared.clone(), id }) } else { Body::empty() };
                let req = Request::new(head, Version::HTTP_2, peer.clone(), secure.clone(), body);
                slot.load(owned_call(app.clone(), req, id));
                start_app(shared, cfg, id, &mut slot, &mut ready);
            }
            Event::Cancel(id) => {
                if let Some(t) = shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                    t.abort();
                }
            }
        }
    }
    hand_over(shared, cfg, ready);
}

/// Runs the app's call loaded in `slot` for stream `id`. The call is first polled once
/// right here: most answer at once (bytes or a file), and those answers go to `ready`, to be
/// handed over together under one lock, with no task spawned. An app that is not ready gets
/// its own task (Warp's worker), in the box it was loaded in, as does a streaming body.
fn start_app<F>(
    shared: &Arc<Shared>,
    cfg: &Arc<Settings>,
    id: u32,
    slot: &mut AppSlot<F>,
    ready: &mut Vec<(u32, Option<Response>)>,
) where
    F: Future<Output = Response> + Send + 'static,
{
    match slot.poll_once() {
        Ok(res) => ready.push((id, res)),
        Err(mut fut) => {
            let fut = poll_fn(move |cx| match fut.as_mut().as_pin_mut() {
                Some(f) => poll_catching(f, cx),
                None => Poll::Ready(None),
            });
            let task = tokio::spawn(stream_task(shared.clone(), id, cfg.clone(), fut));
            let mut tasks = shared.tasks.lock().unwrap_or_else(|e| e.into_inner());
            if !task.is_finished() {
                tasks.insert(id, task.abort_handle());
            }
        }
    }
}

/// The app's call for a request of stream `id`, owning what it needs (it may go on in a
/// task of its own).
async fn owned_call<A: App>(app: Arc<A>, req: Request, id: u32) -> Response {
    crate::dispatch::call(&*app, req, Some(u64::from(id))).await
}

/// Hands the answers that were ready at once to the `Proto`, under one lock, and starts a
/// task for each streaming body among them.
fn hand_over(shared: &Arc<Shared>, cfg: &Settings, ready: Vec<(u32, Option<Response>)>) {
    if ready.is_empty() {
        return;
    }
    let mut afters = Vec::with_capacity(ready.len());
    {
        let mut p = shared.lock();
        for (id, res) in ready {
            afters.push((id, p.respond(id, or_500(res, cfg))));
        }
    }
    let streams = afters.into_iter().filter_map(|(id, a)| match a {
        After::RunStream(st) => Some((id, st)),
        After::Discard(mut res) => {
            if let Some(f) = res.take_finish() {
                f.report(false);
            }
            drop(res); // outside the lock: it may own a request body
            None
        }
        After::Done => None,
    });
    for (id, st) in streams {
        let task = tokio::spawn(run_stream_body(shared.clone(), id, st));
        let mut tasks = shared.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if !task.is_finished() {
            tasks.insert(id, task.abort_handle());
        }
    }
}

/// A worker: finishes an app call that was not ready at once and hands over its response.
async fn stream_task<F>(shared: Arc<Shared>, id: u32, cfg: Arc<Settings>, fut: F)
where
    F: Future<Output = Option<Response>> + Send,
{
    let res = or_500(fut.await, &cfg);
    let after = shared.lock().respond(id, res);
    shared.wake.notify_one();
    match after {
        After::RunStream(st) => write_stream_body(&shared, id, st).await,
        After::Discard(mut res) => {
            if let Some(f) = res.take_finish() {
                f.report(false);
            }
        }
        After::Done => {}
    }
    shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
}

/// A worker for a streaming body whose response head was handed over inline.
async fn run_stream_body(shared: Arc<Shared>, id: u32, st: StreamBody) {
    write_stream_body(&shared, id, st).await;
    shared.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
}

async fn write_stream_body(shared: &Arc<Shared>, id: u32, st: StreamBody) {
    let w = BodyWriter::new(StreamWriter { shared: shared.clone(), id });
    let ok = (st.0)(w).await.is_ok();
    shared.lock().finish_stream(id, ok);
    shared.wake.notify_one();
}

/// The request body of an HTTP/2 stream: pieces the receiver queued, read under the
/// connection lock; reading grants flow-control window back to the client.
pub(crate) struct BodyReader {
    shared: Arc<Shared>,
    id: u32,
}

impl fmt::Debug for BodyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h2::BodyReader({})", self.id)
    }
}

impl BodySource for BodyReader {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Error>>> {
        let r = {
            let mut p = self.shared.lock();
            p.set_now(now_ms());
            let r = p.poll_body(self.id, cx);
            if p.take_timers_changed() {
                self.shared.timers.notify_one();
            }
            r
        };
        let r = std::task::ready!(r);
        self.shared.wake.notify_one();
        Poll::Ready(r.map(|r| {
            r.map_err(|timed_out| match timed_out {
                true => Error::new(Kind::Timeout, "HTTP/2 request body too slow (the stream was reset)"),
                false => Error::new(Kind::Body, "HTTP/2 stream reset or connection closed"),
            })
        }))
    }

    fn content_length(&self) -> Option<u64> {
        self.shared.lock().body_remaining(self.id)
    }
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        self.shared.lock().drop_body(self.id);
        self.shared.wake.notify_one();
    }
}

/// The HTTP/2 side of [`BodyWriter`]: pieces go to the stream's queue as DATA frames,
/// waiting while the queue is over `H2Settings::stream_buffer`.
pub(crate) struct StreamWriter {
    shared: Arc<Shared>,
    id: u32,
}

impl fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h2::StreamWriter({})", self.id)
    }
}

impl BodySink for StreamWriter {
    /// Queues `data` in pieces of at most `stream_buffer`, each waiting for room in the
    /// stream's queue: what a stream holds is under twice `stream_buffer` (the queue and
    /// the piece waiting), whatever the app writes at once.
    fn write<'a>(&'a mut self, data: &'a [u8]) -> WriteFuture<'a> {
        Box::pin(async move {
            let limit = self.shared.lock().stream_buffer().max(1);
            for chunk in data.chunks(limit) {
                let mut piece = Some(Bytes::copy_from_slice(chunk));
                let r = poll_fn(|cx| {
                    if self.shared.closed.load(Ordering::SeqCst) {
                        return Poll::Ready(Err(Reason::CANCEL));
                    }
                    self.shared.lock().poll_write(self.id, &mut piece, cx)
                })
                .await;
                self.shared.wake.notify_one();
                r.map_err(|reason| {
                    std::io::Error::new(std::io::ErrorKind::BrokenPipe, format!("HTTP/2 stream ended: {reason:?}"))
                })?;
            }
            Ok(())
        })
    }

    fn trailers(&mut self, fields: Vec<(http::HeaderName, http::HeaderValue)>) {
        self.shared.lock().set_trailers(self.id, fields);
    }
}
