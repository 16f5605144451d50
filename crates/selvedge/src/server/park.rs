//! The parking lot: where idle connections wait without a task.
//!
//! A task per connection is cheap while it works, but an idle keep-alive connection would
//! keep its task (the connection's whole future) and its registration with the reactor
//! for as long as it waits. So a connection that stays idle for one to two ticks of the
//! timeout manager is asked to park (see `time::timeout`): its task hands the socket's
//! descriptor, its timer and what it must remember (its client, its place in the
//! per-address count, the protocol it speaks if it chose one, its TLS session; for HTTP/2
//! with no stream open, the protocol state it keeps: `h2::conn::Idle`) to the lot of its
//! listener and ends. The lot watches every parked descriptor with one epoll instance
//! of its own (through mio), itself one registration on the worker's reactor, and spawns
//! a task for a connection again when its socket turns readable: it reads the next request
//! as any idle connection does, into a buffer from the thread's pool.
//!
//! The timeout manager stays the one clock: a parked connection keeps its timer, and when
//! its deadline passes (or shutdown claims it) the manager closes it here
//! ([`time::timeout::Lot::close`](crate::time::timeout::Lot)); an HTTP/2 connection says
//! GOAWAY first, there and when the server drains. A parked connection costs a
//! slot in the lot's table (about a hundred bytes) and its timer's slot; its buffers went
//! back to the pool before it parked.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use mio::unix::SourceFd;

use super::per_ip::IpSlot;
use crate::app::App;
use crate::io::sys::PeerAddr;
use crate::io::transport::{Dormant, Transport};
use crate::settings::Settings;
use crate::stats::OpenConn;
use crate::time::timeout::{self, Group, Timer};

/// A connection as a listener hands it on: its client, its timer, its place in the
/// per-address count, and the lot (with the app and settings) it parks in.
pub(crate) struct Accepted<A> {
    pub(crate) lot: Arc<Lot<A>>,
    pub(crate) peer: PeerAddr,
    pub(crate) timer: Timer,
    pub(crate) ip: Option<IpSlot>,
}

/// Where a parked connection picks up again.
pub(crate) enum Resume {
    /// From its first bytes: it parked before sending any (the protocol is not chosen).
    Negotiate,
    /// As HTTP/1.1, waiting for its next request.
    H1(OpenConn),
    /// As HTTP/2, with its protocol state (settings, windows, HPACK tables).
    H2(Box<crate::h2::conn::Idle>),
}

/// A parked connection.
pub(crate) struct Parked {
    sock: Dormant,
    timer: Timer,
    peer: PeerAddr,
    ip: Option<IpSlot>,
    how: Resume,
}

/// One place in the lot's table; `gen` tells its occupants apart (keys are `gen << 32 |
/// index`), so a late event or close for an earlier occupant finds nothing.
struct Place {
    gen: u32,
    conn: Option<Parked>,
}

#[derive(Default)]
struct Table {
    places: Vec<Place>,
    free: Vec<u32>,
}

/// Spawns the task that serves a parked connection again (the server's negotiation).
pub(crate) type Resumer<A> = fn(Arc<Lot<A>>, Parked) -> tokio::task::JoinHandle<()>;

/// The parked connections of one listener on one worker.
pub(crate) struct Lot<A> {
    app: Arc<A>,
    cfg: Arc<Settings>,
    resume: Resumer<A>,
    registry: mio::Registry,
    table: Mutex<Table>,
    me: Weak<Lot<A>>,
}

impl<A: App> Lot<A> {
    /// A lot for `app`'s connections, and the task that wakes them (to spawn on the
    /// worker's runtime; it ends when `group` shuts down, closing what is still parked).
    /// `resume` spawns a woken connection's task.
    ///
    /// # Errors
    /// The epoll instance could not be made.
    pub(crate) fn new(
        app: Arc<A>,
        cfg: Arc<Settings>,
        group: Arc<Group>,
        resume: Resumer<A>,
    ) -> io::Result<(Arc<Lot<A>>, impl std::future::Future<Output = ()> + Send)> {
        let poll = mio::Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let lot = Arc::new_cyclic(|me| Lot {
            app,
            cfg,
            resume,
            registry,
            table: Mutex::new(Table::default()),
            me: me.clone(),
        });
        let run = lot.clone().run(poll, group);
        Ok((lot, run))
    }

    pub(crate) fn app(&self) -> &Arc<A> {
        &self.app
    }

    pub(crate) fn cfg(&self) -> &Arc<Settings> {
        &self.cfg
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks an idle connection: its socket must be shared with no one (else it is closed).
    pub(crate) fn park(&self, sock: Arc<Transport>, a: Accepted<A>, how: Resume) {
        let Ok(sock) = Arc::try_unwrap(sock) else { return };
        let Accepted { timer, peer, ip, .. } = a;
        let sock = sock.into_dormant();
        let mut t = self.table();
        let index = match t.free.pop() {
            Some(i) => i,
            None => {
                t.places.push(Place { gen: 0, conn: None });
                (t.places.len() - 1) as u32
            }
        };
        let key = u64::from(t.places[index as usize].gen) << 32 | u64::from(index);
        let fd = sock.fd().as_raw_fd();
        if self.registry.register(&mut SourceFd(&fd), mio::Token(key as usize), mio::Interest::READABLE).is_err() {
            t.free.push(index);
            return; // closed
        }
        // Under the table's lock: the manager's close for this key waits until it is here.
        let lot: Weak<dyn timeout::Lot> = self.me.clone();
        if !timer.parked(lot, key) {
            // The manager claimed it first (shutdown, or its deadline passed): it closes here.
            let _ = self.registry.deregister(&mut SourceFd(&fd));
            t.free.push(index);
            drop(t);
            return Parked { sock, timer, peer, ip, how }.close();
        }
        // An HTTP/2 connection that parks once draining began may have missed the lot's
        // pass over them (`close_h2`): it is told now.
        let draining_h2 = matches!(how, Resume::H2(_)) && timer.shutting_down();
        t.places[index as usize].conn = Some(Parked { sock, timer, peer, ip, how });
        crate::stats::add(crate::stats::Counter::Parked, 1);
        drop(t);
        if draining_h2 {
            if let Some(p) = self.take(key) {
                p.close();
            }
        }
    }

    /// Takes the connection parked under `key` out of the table (and off the lot's epoll).
    fn take(&self, key: u64) -> Option<Parked> {
        let (index, gen) = ((key & u64::from(u32::MAX)) as usize, (key >> 32) as u32);
        let p = {
            let mut t = self.table();
            let place = t.places.get_mut(index).filter(|p| p.gen == gen && p.conn.is_some())?;
            let p = place.conn.take();
            place.gen = place.gen.wrapping_add(1);
            t.free.push(index as u32);
            p
        }?;
        let _ = self.registry.deregister(&mut SourceFd(&p.sock.fd().as_raw_fd()));
        crate::stats::add(crate::stats::Counter::Unparked, 1);
        Some(p)
    }

    /// The socket of the connection under `key` turned readable: a task serves it again.
    /// `closed`: the event says the peer closed (or reset) the connection; with nothing
    /// left to read it is closed here, without a task (so thousands of clients leaving at
    /// once do not spawn thousands of tasks just to see their end).
    fn wake(&self, key: u64, closed: bool) {
        let Some(p) = self.take(key) else { return };
        if closed && matches!(crate::io::sys::recv(p.sock.fd(), &mut [0u8; 1], true), Ok(0) | Err(_)) {
            return;
        }
        // `false`: the manager claimed it first (deadline, shutdown); dropping it closes it.
        if !p.timer.unpark() {
            return;
        }
        let Some(lot) = self.me.upgrade() else { return };
        let handle = p.timer.handle();
        let task = (self.resume)(lot, p);
        handle.set_abort(task.abort_handle());
    }

    /// Waits for parked sockets to turn readable, until `group` shuts down; then closes
    /// every connection still parked.
    async fn run(self: Arc<Self>, poll: mio::Poll, group: Arc<Group>) {
        let mut poll = match crate::io::sys::register_poll(poll) {
            Ok(p) => p,
            Err(e) => return tracing::error!("parking lot: cannot register its epoll instance: {e}"),
        };
        let mut events = mio::Events::with_capacity(256);
        let mut drained = false;
        loop {
            let mut guard = tokio::select! {
                g = poll.readable_mut() => match g {
                    Ok(g) => g,
                    Err(_) => break,
                },
                _ = group.wait_shutdown() => break,
                _ = group.wait_drain(), if !drained => {
                    drained = true;
                    self.close_h2();
                    continue;
                }
            };
            loop {
                if let Err(e) = guard.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    tracing::error!("parking lot: epoll_wait failed: {e}");
                    break;
                }
                if events.is_empty() {
                    guard.clear_ready();
                    break;
                }
                for ev in events.iter() {
                    self.wake(ev.token().0 as u64, ev.is_read_closed() || ev.is_error());
                }
            }
        }
        let all: Vec<Parked> = self.table().places.iter_mut().filter_map(|p| p.conn.take()).collect();
        crate::stats::add(crate::stats::Counter::Unparked, all.len() as u64);
        for p in all {
            p.close();
        }
    }
}

impl<A: App> Lot<A> {
    /// The server drains: parked HTTP/2 connections are told so at once (GOAWAY, as those
    /// in their tasks are) and closed, so their clients go to the server that takes over.
    /// (Parked HTTP/1.1 connections stay until their next request, answered with
    /// `Connection: close`.)
    fn close_h2(&self) {
        let keys: Vec<u64> = self
            .table()
            .places
            .iter()
            .enumerate()
            .filter(|(_, p)| p.conn.as_ref().is_some_and(|c| matches!(c.how, Resume::H2(_))))
            .map(|(index, p)| u64::from(p.gen) << 32 | index as u64)
            .collect();
        for key in keys {
            if let Some(p) = self.take(key) {
                p.close();
            }
        }
    }
}

impl<A: App> timeout::Lot for Lot<A> {
    fn close(&self, key: u64) {
        if let Some(p) = self.take(key) {
            p.close();
        }
    }
}

/// A parked connection's task: back on the reactor, it serves its next request.
impl Parked {
    /// Closes it where it waits (its deadline passed, or the server shuts down): an
    /// HTTP/2 connection says GOAWAY(NO_ERROR) first, as it would in its task.
    fn close(self) {
        if let Resume::H2(idle) = &self.how {
            self.sock.last_words(&idle.farewell());
        }
    }

    pub(crate) fn into_parts<A>(self, lot: Arc<Lot<A>>) -> (Dormant, Accepted<A>, Resume) {
        let Parked { sock, timer, peer, ip, how } = self;
        (sock, Accepted { lot, peer, timer, ip }, how)
    }
}
