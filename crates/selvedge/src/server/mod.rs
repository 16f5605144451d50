//! Listeners, workers, the accept loop and graceful shutdown.
//!
//! With [`Workers::PerCore`] each worker thread runs its own single-threaded runtime and
//! owns its own `SO_REUSEPORT` socket per TCP address, so the kernel spreads connections
//! and no connection ever crosses a core. With [`Workers::MultiThread`] one tokio
//! work-stealing runtime serves one socket per address.
//!
//! Graceful shutdown ([`ServerHandle::shutdown`]): listeners close at once; idle keep-alive
//! connections are closed by the timeout manager's next pass (requested immediately);
//! requests in flight finish and are answered with `Connection: close`; after
//! `graceful_timeout` whatever is left is dropped. [`ServerHandle::drain`] is the gentler
//! first step for handing over to another process: listeners close, every connection ends
//! after its next exchange (`Connection: close`, HTTP/2 GOAWAY), idle ones stay open until
//! they send a request or shutdown begins.
//!
//! Listening sockets can also be inherited ([`listen_fds`], socket activation) and served
//! with [`Server::bind_fd`]; [`ServerHandle::listener_fds`] duplicates the running server's
//! sockets for a new process. [`Server::listen`] binds without serving yet, so a process can
//! bind privileged ports and then drop its privileges before the workers start.
//! [`release_code_pages`] lets go of the code pages start-up brought in.

mod code_pages;
mod inherit;

pub use code_pages::release_code_pages;
pub use inherit::{listen_fds, local_listen, take_passed_fd, Inherited, LISTEN_FDS_START};

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod negotiate;
mod park;

use socket2::{Domain, Protocol, SockAddr, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::app::App;
use crate::dispatch;
use crate::io::socket::Socket;
use crate::io::sys;
use crate::io::sys::PeerAddr;
use crate::io::transport::Transport;
use crate::settings::{Settings, Workers};
use crate::time::timeout::{self, Group, Timer};

mod per_ip;
use park::{Accepted, Lot};
use per_ip::PerIp;

#[cfg(feature = "http3")]
mod quic;

/// An address to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// TCP on IPv4 or IPv6 (v6 sockets are v6-only, so both can be listed).
    Tcp(SocketAddr),
    /// A Unix-domain stream socket at this path (a stale socket file is replaced).
    Unix(PathBuf),
}

impl From<SocketAddr> for Listen {
    fn from(a: SocketAddr) -> Listen {
        Listen::Tcp(a)
    }
}

impl From<PathBuf> for Listen {
    fn from(p: PathBuf) -> Listen {
        Listen::Unix(p)
    }
}

/// A listener's options.
#[derive(Debug, Clone, Default)]
struct ListenOpts {
    /// TLS configuration (`None`: cleartext).
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ServerConfig>>,
    /// A PROXY protocol header comes first ([`Server::proxy_protocol`]).
    proxy_protocol: bool,
    /// The peers whose PROXY header is believed (`None`: every peer's).
    proxy_from: Option<TrustPeer>,
    /// Share the address with other processes that also ask to ([`Server::reuse_port`]).
    shared: bool,
    /// HTTP/3 on this TLS listener's port ([`Server::http3`]).
    #[cfg(feature = "http3")]
    quic: Quic,
    /// Certificates obtained during the handshake ([`Server::on_demand`]).
    #[cfg(feature = "tls")]
    on_demand: Option<OnDemandHook>,
}

/// A TLS listener's on-demand hook ([`Server::on_demand`]).
#[cfg(feature = "tls")]
#[derive(Clone)]
struct OnDemandHook(crate::io::tls::OnDemand);

#[cfg(feature = "tls")]
impl std::fmt::Debug for OnDemandHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnDemand")
    }
}

/// Which peers a `proxy_protocol` listener believes ([`Server::proxy_protocol_from`]).
#[derive(Clone)]
struct TrustPeer(Arc<dyn Fn(&PeerAddr) -> bool + Send + Sync>);

impl std::fmt::Debug for TrustPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrustPeer")
    }
}

impl ListenOpts {
    /// Whether the listener speaks TLS.
    fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }
}

/// A listener's part in HTTP/3.
#[cfg(feature = "http3")]
#[derive(Debug, Clone, Default)]
enum Quic {
    /// None.
    #[default]
    Off,
    /// Asked for ([`Server::http3`]), before the sockets are bound.
    Asked,
    /// A TCP listener whose responses carry this `Alt-Svc`.
    Advertise(http::HeaderValue),
    /// The UDP socket of a QUIC endpoint.
    Endpoint,
}

impl ListenOpts {
    #[cfg(feature = "tls")]
    fn tls(config: Arc<rustls::ServerConfig>) -> ListenOpts {
        ListenOpts { tls: Some(config), ..ListenOpts::default() }
    }

    /// Whether this is a QUIC endpoint's UDP socket.
    fn is_udp(&self) -> bool {
        #[cfg(feature = "http3")]
        return matches!(self.quic, Quic::Endpoint);
        #[cfg(not(feature = "http3"))]
        false
    }
}

/// Where a listener comes from.
#[derive(Debug)]
enum Source {
    /// Bind this address.
    Bind(Listen),
    /// An already bound socket (inherited, or made by the caller).
    Fd(OwnedFd),
}

/// A server: settings and addresses; [`Server::start`] or [`Server::run`] serve an app.
#[derive(Debug)]
pub struct Server {
    settings: Settings,
    listen: Vec<Source>,
    tls: Vec<ListenOpts>,
}

/// A server whose sockets are bound and listening, not yet serving ([`Server::listen`]).
#[derive(Debug)]
pub struct Listening {
    cfg: Settings,
    /// sockets[w] = the listeners of worker w, with the index of their `bind*` call.
    sockets: Vec<Vec<(OwnedFd, ListenOpts, usize)>>,
    bound: Vec<Listen>,
    threads_n: usize,
    per_core: bool,
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    group: Arc<Group>,
    threads: Vec<JoinHandle<()>>,
    bound: Vec<Listen>,
    /// A duplicate of every listening socket (with its `bind*` index), for
    /// [`ServerHandle::listener_fds`]; dropped by `drain` and `shutdown`.
    listeners: std::sync::Mutex<Vec<(OwnedFd, usize)>>,
    io: IoInUse,
}

/// The I/O model a server's workers run on ([`ServerHandle::io`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoInUse {
    /// epoll, as asked ([`Io::Epoll`](crate::Io::Epoll)).
    Epoll,
    /// io_uring on every worker.
    Uring,
    /// io_uring was asked for (`Uring` or `Auto`) and could not be had (the reason: the
    /// kernel's error, or multi-threaded workers); the workers, or those that could not
    /// make a ring, run on epoll.
    EpollInstead(String),
}

impl Server {
    /// A server with these settings and no address yet.
    pub fn new(settings: Settings) -> Server {
        Server { settings, listen: Vec::new(), tls: Vec::new() }
    }

    /// Adds an address to listen on.
    pub fn bind(mut self, addr: impl Into<Listen>) -> Server {
        self.listen.push(Source::Bind(addr.into()));
        self.tls.push(ListenOpts::default());
        self
    }

    /// Adds a socket that is already bound (a TCP or Unix stream socket, for example one
    /// from [`listen_fds`]): it is made non-blocking, `listen` is called on it with the
    /// configured backlog (harmless if it already listens), and every worker accepts on it.
    pub fn bind_fd(mut self, fd: OwnedFd) -> Server {
        self.listen.push(Source::Fd(fd));
        self.tls.push(ListenOpts::default());
        self
    }

    /// [`Server::bind_fd`] for TLS, as [`Server::bind_tls`].
    #[cfg(feature = "tls")]
    pub fn bind_fd_tls(mut self, fd: OwnedFd, config: Arc<rustls::ServerConfig>) -> Server {
        self.listen.push(Source::Fd(fd));
        self.tls.push(ListenOpts::tls(config));
        self
    }

    /// Adds a TLS address: connections complete a handshake with `config` (see
    /// [`crate::io::tls::server_config`]) within `Settings::tls_handshake_timeout`, then speak
    /// HTTP/2 if ALPN chose `h2`, else HTTP/1.1.
    #[cfg(feature = "tls")]
    pub fn bind_tls(mut self, addr: impl Into<Listen>, config: Arc<rustls::ServerConfig>) -> Server {
        self.listen.push(Source::Bind(addr.into()));
        self.tls.push(ListenOpts::tls(config));
        self
    }

    /// The listener added last reads a PROXY protocol header (v1 or v2, from a load
    /// balancer in front) before anything else, TLS included: the connection's peer is
    /// then the client the header names (see [`crate::io::proxy_protocol`]). A connection
    /// without a valid header within `header_timeout` is closed, never guessed at.
    pub fn proxy_protocol(mut self) -> Server {
        if let Some(o) = self.tls.last_mut() {
            o.proxy_protocol = true;
        }
        self
    }

    /// The TCP listener added last may share its address with other processes that set
    /// `SO_REUSEPORT` too (the kernel spreads connections between them). Without it a
    /// listener refuses an address another process already listens on (`AddrInUse`), as
    /// nginx does, instead of taking a share of its connections unseen.
    pub fn reuse_port(mut self) -> Server {
        if let Some(o) = self.tls.last_mut() {
            o.shared = true;
        }
        self
    }

    /// [`Server::proxy_protocol`] for the listener added last, believing the header only
    /// from peers `trusted` admits (the balancers in front): from any other peer the header
    /// is still required and read, but the connection's peer stays the socket's (as nginx's
    /// `set_real_ip_from` decides for `proxy_protocol` listeners).
    pub fn proxy_protocol_from(mut self, trusted: impl Fn(&PeerAddr) -> bool + Send + Sync + 'static) -> Server {
        if let Some(o) = self.tls.last_mut() {
            o.proxy_protocol = true;
            o.proxy_from = Some(TrustPeer(Arc::new(trusted)));
        }
        self
    }

    /// The TLS listener added last asks `hook` during a handshake whose server name none of
    /// its certificates covers, and waits for it before choosing the certificate (see
    /// [`crate::io::tls::OnDemand`]): on-demand TLS, for names not known in advance. Only
    /// such handshakes pay for it (their ClientHello is read once more). Ignored on
    /// cleartext listeners; QUIC handshakes do not ask.
    #[cfg(feature = "tls")]
    pub fn on_demand(mut self, hook: crate::io::tls::OnDemand) -> Server {
        if let Some(o) = self.tls.last_mut() {
            if o.tls.is_some() {
                o.on_demand = Some(OnDemandHook(hook));
            }
        }
        self
    }

    /// The TLS listener added last also serves HTTP/3 over QUIC: a UDP socket on the same
    /// address and port (one per worker with [`Workers::PerCore`], `SO_REUSEPORT`), the same
    /// certificates, ALPN `h3`, the limits of [`crate::H3Settings`]; its HTTP/1.1 and
    /// HTTP/2 responses carry `Alt-Svc: h3=":PORT"; ma=86400` so that browsers move over.
    /// Ignored on cleartext and Unix-socket listeners.
    #[cfg(feature = "http3")]
    pub fn http3(mut self) -> Server {
        if let Some(o) = self.tls.last_mut() {
            if o.tls.is_some() {
                o.quic = Quic::Asked;
            }
        }
        self
    }

    /// Binds the listeners, starts the workers and returns at once.
    ///
    /// # Errors
    /// Binding or listening failed, or a worker thread could not start.
    pub fn start<A: App>(self, app: A) -> io::Result<ServerHandle> {
        self.listen()?.start(app)
    }

    /// Binds every listener (one `SO_REUSEPORT` socket per TCP address and worker with
    /// [`Workers::PerCore`]) without serving yet: [`Listening::start`] starts the workers.
    ///
    /// # Errors
    /// Binding or listening failed.
    pub fn listen(self) -> io::Result<Listening> {
        if self.listen.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        let cfg = self.settings;
        let (threads_n, per_core) = match cfg.workers {
            Workers::PerCore(n) => (n.max(1), true),
            Workers::MultiThread(n) => (n.max(1), false),
        };
        let sockets_per_addr = if per_core { threads_n } else { 1 };
        let mut sockets: Vec<Vec<(OwnedFd, ListenOpts, usize)>> = (0..sockets_per_addr).map(|_| Vec::new()).collect();
        let mut bound = Vec::new();
        for (i, (l, tls)) in self.listen.into_iter().zip(self.tls).enumerate() {
            match l {
                Source::Bind(Listen::Tcp(mut addr)) => {
                    if !tls.shared && addr.port() != 0 {
                        exclusive(addr)?;
                    }
                    for (w, socks) in sockets.iter_mut().enumerate() {
                        let s = tcp_listener(addr, &cfg, per_core)?;
                        if w == 0 {
                            addr = s.local_addr()?.as_socket().unwrap_or(addr);
                            bound.push(Listen::Tcp(addr));
                        }
                        socks.push((s.into(), tls.clone(), i));
                    }
                    #[cfg(feature = "http3")]
                    quic_sockets(&mut sockets, addr, i, per_core)?;
                }
                Source::Bind(Listen::Unix(path)) => {
                    let s: OwnedFd = unix_listener(&path, cfg.backlog)?.into();
                    bound.push(Listen::Unix(path));
                    share(&mut sockets, s, &tls, i)?;
                }
                Source::Fd(fd) => {
                    let s = socket2::SockRef::from(&fd);
                    s.set_nonblocking(true)?;
                    s.listen(cfg.backlog)?;
                    let local = local_listen(&fd)?;
                    share(&mut sockets, fd, &tls, i)?;
                    #[cfg(feature = "http3")]
                    if let Listen::Tcp(addr) = &local {
                        quic_sockets(&mut sockets, *addr, i, per_core)?;
                    }
                    bound.push(local);
                }
            }
        }
        Ok(Listening { cfg, sockets, bound, threads_n, per_core })
    }

    /// Starts the server and blocks until it has shut down.
    ///
    /// # Errors
    /// As [`Server::start`].
    pub fn run<A: App>(self, app: A) -> io::Result<()> {
        self.start(app)?.join();
        Ok(())
    }
}

/// Gives every worker a duplicate of socket `s` (Unix and inherited listeners: one
/// socket that all workers accept on).
fn share(sockets: &mut [Vec<(OwnedFd, ListenOpts, usize)>], s: OwnedFd, tls: &ListenOpts, i: usize) -> io::Result<()> {
    for socks in sockets.iter_mut() {
        socks.push((s.try_clone()?, tls.clone(), i));
    }
    Ok(())
}

/// For a TCP listener (index `i`, bound on `addr`) that asked for HTTP/3: a UDP socket on
/// the same address per worker (one in all with a multi-threaded runtime), and `Alt-Svc`
/// on the TCP listener's responses.
#[cfg(feature = "http3")]
fn quic_sockets(
    sockets: &mut [Vec<(OwnedFd, ListenOpts, usize)>],
    addr: SocketAddr,
    i: usize,
    per_core: bool,
) -> io::Result<()> {
    let mut udp = None;
    for (w, socks) in sockets.iter_mut().enumerate() {
        let Some(tcp) = socks.iter_mut().rev().find(|(_, o, j)| *j == i && matches!(o.quic, Quic::Asked)) else {
            continue;
        };
        tcp.1.quic = Quic::Advertise(quic::alt_svc(addr.port()));
        let opts = ListenOpts { quic: Quic::Endpoint, ..tcp.1.clone() };
        if per_core || w == 0 {
            udp = Some(quic::udp_socket(addr, true)?);
        }
        // A multi-threaded runtime has one worker list; per-core workers get one socket each.
        if let Some(u) = udp.take() {
            socks.push((u.into(), opts, i));
        }
    }
    Ok(())
}

impl Listening {
    /// The addresses bound (port 0 resolved), in the order of the `bind*` calls.
    pub fn local_addrs(&self) -> &[Listen] {
        &self.bound
    }

    /// Starts the workers on the bound sockets and returns at once.
    ///
    /// # Errors
    /// A worker thread or the multi-threaded runtime could not start.
    pub fn start<A: App>(self, app: A) -> io::Result<ServerHandle> {
        timeout::start();
        let Listening { cfg, sockets, bound, threads_n, per_core } = self;
        let cfg = Arc::new(cfg);
        let app = Arc::new(app);
        let group = Arc::new(Group::new(cfg.max_connections));
        let per_ip = cfg.max_connections_per_ip.map(PerIp::new);
        // One duplicate per distinct socket (per-core TCP sockets are distinct; a shared
        // socket appears once per worker, so only worker 0's copies are kept for those).
        let mut listeners = Vec::new();
        for (w, socks) in sockets.iter().enumerate() {
            for (fd, opts, i) in socks {
                if opts.is_udp() {
                    // Not handed to another process: it binds its own.
                    continue;
                }
                let distinct = per_core && matches!(bound.get(*i), Some(Listen::Tcp(_)));
                if w == 0 || distinct {
                    listeners.push((fd.try_clone()?, *i));
                }
            }
        }
        let sockets: Vec<Vec<(OwnedFd, ListenOpts)>> =
            sockets.into_iter().map(|v| v.into_iter().map(|(fd, tls, _)| (fd, tls)).collect()).collect();
        let mut threads = Vec::new();
        let asked = crate::settings::Io::from_env().unwrap_or(cfg.io);
        let wants_uring = asked != crate::settings::Io::Epoll;
        let mut io = IoInUse::Epoll;
        if per_core {
            let (ring_tx, ring_rx) = std::sync::mpsc::channel();
            let workers = sockets.len();
            for (w, socks) in sockets.into_iter().enumerate() {
                let (app, cfg, group, per_ip) = (app.clone(), cfg.clone(), group.clone(), per_ip.clone());
                let ring_tx = ring_tx.clone();
                let t = std::thread::Builder::new().name(format!("selvedge-w{w}")).spawn(move || {
                    let mut rt = tokio::runtime::Builder::new_current_thread();
                    if wants_uring {
                        let ring = crate::io::uring::install();
                        if ring.is_ok() {
                            rt.on_thread_park(crate::io::uring::before_park);
                        }
                        let _ = ring_tx.send(ring.map_err(|e| e.to_string()));
                    }
                    drop(ring_tx);
                    let rt = rt.enable_all().build();
                    match rt {
                        Ok(rt) => rt.block_on(worker(socks, app, cfg, group, per_ip)),
                        Err(e) => tracing::error!("worker {w}: cannot start its runtime: {e}"),
                    }
                })?;
                threads.push(t);
            }
            drop(ring_tx);
            if wants_uring {
                // Each worker says whether its ring is up before it serves anything.
                let rings: Vec<Result<(), String>> = ring_rx.iter().take(workers).collect();
                io = match rings.into_iter().find_map(Result::err) {
                    None if workers > 0 => IoInUse::Uring,
                    None => IoInUse::Epoll,
                    Some(why) => IoInUse::EpollInstead(why),
                };
            }
        } else {
            if wants_uring {
                io = IoInUse::EpollInstead("io_uring needs per-core workers".into());
            }
            let mut sockets = sockets;
            let socks = sockets.pop().unwrap_or_default();
            let group = group.clone();
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads_n).enable_all().build()?;
            let t = std::thread::Builder::new().name("selvedge-mt".into()).spawn(move || {
                rt.block_on(worker(socks, app, cfg, group, per_ip));
            })?;
            threads.push(t);
        }
        Ok(ServerHandle { group, threads, bound, listeners: std::sync::Mutex::new(listeners), io })
    }
}

impl ServerHandle {
    /// The I/O model the workers run on: what [`Settings::io`](crate::Settings::io) asked
    /// for, or epoll and the reason io_uring could not be had.
    pub fn io(&self) -> &IoInUse {
        &self.io
    }

    /// Duplicates of every listening socket, each with the index of the `bind*` call that
    /// made it (several per index for per-core TCP listeners), to hand to another process
    /// (binary upgrade). Empty once [`ServerHandle::drain`] or `shutdown` has run.
    ///
    /// # Errors
    /// `dup` failed (out of descriptors).
    pub fn listener_fds(&self) -> io::Result<Vec<(OwnedFd, usize)>> {
        let l = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().map(|(fd, i)| Ok((fd.try_clone()?, *i))).collect()
    }

    /// Stops accepting (the listening sockets close, unless another process holds them)
    /// and asks every connection to end after its current exchange: HTTP/1.1 answers its
    /// next request with `Connection: close`, HTTP/2 sends GOAWAY. Idle connections stay
    /// open until they send a request or [`ServerHandle::shutdown`] is called; watch
    /// [`ServerHandle::live_connections`] to know when they are gone.
    pub fn drain(&self) {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.group.begin_drain();
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[Listen] {
        &self.bound
    }

    /// The first TCP address bound.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.bound.iter().find_map(|l| match l {
            Listen::Tcp(a) => Some(*a),
            Listen::Unix(_) => None,
        })
    }

    /// Live connections right now.
    pub fn live_connections(&self) -> usize {
        self.group.live()
    }

    /// Begins graceful shutdown and returns at once; [`ServerHandle::join`] waits for it.
    pub fn shutdown(&self) {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.group.begin_shutdown();
    }

    /// Waits until every worker has finished.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Fails with `AddrInUse` when another process listens on `addr`: a socket without
/// `SO_REUSEPORT` cannot be bound beside a listening one (the workers' own sockets, which
/// all set it, could). The probe is closed before the workers bind.
fn exclusive(addr: SocketAddr) -> io::Result<()> {
    let s = socket2::Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.bind(&addr.into()).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{addr} is in use by another process (share it with reuse_port, if that is meant)"),
        ),
        _ => e,
    })
}

fn tcp_listener(addr: SocketAddr, cfg: &Settings, reuse_port: bool) -> io::Result<socket2::Socket> {
    let s = socket2::Socket::new(Domain::for_address(addr), Type::STREAM.nonblocking().cloexec(), Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one call per server
    // instead of one per connection (checked by a test).
    sys::set_nodelay(&s)?;
    if let Some(n) = cfg.notsent_lowat {
        // A tuning, not a requirement: a kernel without it (before 3.12) still serves.
        if let Err(e) = sys::set_notsent_lowat(&s, n) {
            tracing::warn!("TCP_NOTSENT_LOWAT not set on {addr}: {e}");
        }
    }
    s.bind(&addr.into())?;
    s.listen(cfg.backlog)?;
    Ok(s)
}

fn unix_listener(path: &std::path::Path, backlog: i32) -> io::Result<socket2::Socket> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        }
    }
    let s = socket2::Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
    s.bind(&SockAddr::unix(path)?)?;
    s.listen(backlog)?;
    Ok(s)
}

/// A worker: an accept loop per listener, then the drain after shutdown.
async fn worker<A: App>(
    socks: Vec<(OwnedFd, ListenOpts)>,
    app: Arc<A>,
    cfg: Arc<Settings>,
    group: Arc<Group>,
    per_ip: Option<Arc<PerIp>>,
) {
    if crate::io::uring::active() {
        tokio::spawn(crate::io::uring::reap_forever());
    }
    for (s, tls) in socks {
        #[cfg(feature = "http3")]
        match &tls.quic {
            Quic::Endpoint => {
                if let Some(tc) = tls.tls.clone() {
                    tokio::spawn(quic::serve_quic(s, tc, app.clone(), cfg.clone(), group.clone()));
                }
                continue;
            }
            Quic::Advertise(v) => {
                let app = Arc::new(quic::AltSvc { app: app.clone(), value: v.clone() });
                match sys::register(s, Interest::READABLE) {
                    Ok(l) => {
                        tokio::spawn(accept_loop(l, tls, app, cfg.clone(), group.clone(), per_ip.clone()));
                    }
                    Err(e) => tracing::error!("listener registration failed: {e}"),
                }
                continue;
            }
            Quic::Off | Quic::Asked => {}
        }
        match sys::register(s, Interest::READABLE) {
            Ok(l) => {
                tokio::spawn(accept_loop(l, tls, app.clone(), cfg.clone(), group.clone(), per_ip.clone()));
            }
            Err(e) => tracing::error!("listener registration failed: {e}"),
        }
    }
    group.wait_shutdown().await;
    let deadline = Instant::now() + cfg.graceful_timeout;
    while group.live() > 0 && Instant::now() < deadline {
        tokio::select! {
            _ = group.wait_drop() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

async fn accept_loop<A: App>(
    listener: AsyncFd<OwnedFd>,
    opts: ListenOpts,
    app: Arc<A>,
    cfg: Arc<Settings>,
    group: Arc<Group>,
    per_ip: Option<Arc<PerIp>>,
) {
    // Where this listener's idle connections park (see `park.rs`).
    let lot = match Lot::new(app, cfg.clone(), group.clone(), |lot, p| tokio::spawn(negotiate::resume(lot, p))) {
        Ok((lot, run)) => {
            tokio::spawn(run);
            lot
        }
        Err(e) => return tracing::error!("listener: cannot make its parking lot: {e}"),
    };
    let l = Door { opts, cfg, group, per_ip, lot };
    if crate::io::uring::active() {
        match crate::io::uring::Acceptor::new(listener.get_ref().as_fd()) {
            Ok(acceptor) => return accept_ring(&acceptor, &l).await,
            Err(e) => tracing::warn!("listener: accepting without io_uring: {e}"),
        }
    }
    let group = &l.group;
    loop {
        group.wait_room().await;
        let mut guard = tokio::select! {
            g = listener.readable() => match g {
                Ok(g) => g,
                Err(_) => return,
            },
            _ = group.wait_drain() => return,
        };
        loop {
            if group.is_draining() {
                return;
            }
            match sys::accept(listener.get_ref().as_fd()) {
                Ok((conn, peer)) => {
                    l.start(conn, peer);
                    if group.is_full() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => {
                    if l.refused(e) {
                        drop(guard);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        break;
                    }
                }
            }
        }
    }
}

/// The accept loop on io_uring: connections come from accept operations on the ring, as
/// many out as the server has room for (at most `uring::ACCEPT_BATCH`), none while it is
/// full. When the server drains, the connections accepted before the accepts ended are
/// served (as the next process would have served them from the backlog), not dropped.
async fn accept_ring<A: App>(acceptor: &crate::io::uring::Acceptor, l: &Door<A>) {
    let group = &l.group;
    let start = |conn: OwnedFd| match sys::peer_of(conn.as_fd()) {
        Ok(peer) => l.start(conn, peer),
        // A peer already gone has no address: its connection is dropped, closed.
        Err(_) => crate::stats::add(crate::stats::Counter::Accepted, 1),
    };
    loop {
        if group.is_full() {
            acceptor.pause();
            group.wait_room().await;
        }
        let next = tokio::select! {
            r = std::future::poll_fn(|cx| acceptor.poll_accept(cx, group.room())) => Some(r),
            _ = group.wait_drain() => None,
        };
        if group.is_draining() {
            acceptor.pause();
            if let Some(Ok(conn)) = next {
                start(conn);
            }
            while let Some(conn) = std::future::poll_fn(|cx| acceptor.poll_held(cx)).await {
                start(conn);
            }
            return;
        }
        let back_off = match next {
            Some(Ok(conn)) => {
                start(conn);
                false
            }
            Some(Err(e)) => l.refused(e),
            None => false,
        };
        if back_off {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A listener's accept loop: what it starts its connections with.
struct Door<A> {
    opts: ListenOpts,
    cfg: Arc<Settings>,
    group: Arc<Group>,
    per_ip: Option<Arc<PerIp>>,
    lot: Arc<Lot<A>>,
}

impl<A: App> Door<A> {
    /// Starts serving accepted connection `conn` from `peer` in a task of its own.
    fn start(&self, conn: OwnedFd, peer: PeerAddr) {
        let Door { opts, cfg, group, per_ip, lot } = self;
        crate::stats::add(crate::stats::Counter::Accepted, 1);
        // Over `max_connections_per_ip`: `conn` is dropped here, closing it.
        let ip = match per_ip.as_ref().map(|t| t.enter(&peer)) {
            None => None,
            Some(Ok(slot)) => slot,
            Some(Err(())) => return,
        };
        let Ok(sock) = Socket::new(conn) else { return };
        let timer = Timer::register(group, cfg.header_timeout);
        let handle = timer.handle();
        // (Only the `tracing` feature's connection span reads this copy.)
        let span_peer = peer.clone();
        let a = Accepted { lot: lot.clone(), peer, timer, ip };
        let task = if opts.proxy_protocol {
            // (`max_connections_per_ip` counts the socket's peer: the balancer.)
            tokio::spawn(dispatch::in_connection_span(proxied(sock, opts.clone(), a), &span_peer, opts.is_tls(), false))
        } else {
            #[cfg(feature = "tls")]
            match &opts.tls {
                Some(tc) => tokio::spawn(dispatch::in_connection_span(
                    negotiate::serve_tls(sock, tc.clone(), opts.on_demand.as_ref().map(|h| h.0.clone()), a),
                    &span_peer,
                    true,
                    false,
                )),
                None => tokio::spawn(dispatch::in_connection_span(
                    negotiate::serve_connection(Transport::Plain(sock), a),
                    &span_peer,
                    false,
                    false,
                )),
            }
            #[cfg(not(feature = "tls"))]
            tokio::spawn(dispatch::in_connection_span(
                negotiate::serve_connection(Transport::Plain(sock), a),
                &span_peer,
                false,
                false,
            ))
        };
        handle.set_abort(task.abort_handle());
    }

    /// An accept's error: `true` when the loop should back off (out of descriptors or
    /// memory: keep serving the connections there are instead of spinning); the others
    /// (`ECONNABORTED`, `EINTR`, `EPROTO`...) end only that connection.
    fn refused(&self, e: io::Error) -> bool {
        match e.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                self.cfg.exception(&crate::Error::io(e));
                true
            }
            _ => false,
        }
    }
}

/// A connection on a `proxy_protocol` listener: the PROXY header
/// ([`negotiate::proxy_header`], within the header timeout, on the connection's timer),
/// then the connection as the listener serves it, with the peer the header names (when the
/// socket's peer is trusted to name it, [`Server::proxy_protocol_from`]). A missing or
/// invalid header closes the connection.
async fn proxied<A: App>(sock: Socket, opts: ListenOpts, mut a: Accepted<A>) {
    let named = match Box::pin(negotiate::proxy_header(&sock, a.peer.clone())).await {
        Ok(p) => p,
        Err(e) => return a.lot.cfg().exception(&crate::Error::io(e)),
    };
    // The header names the client only when a trusted balancer sent it.
    if opts.proxy_from.as_ref().is_none_or(|t| (t.0)(&a.peer)) {
        a.peer = named;
    }
    #[cfg(feature = "tls")]
    if let Some(tc) = opts.tls {
        return Box::pin(negotiate::serve_tls(sock, tc, opts.on_demand.map(|h| h.0), a)).await;
    }
    #[cfg(not(feature = "tls"))]
    let _ = opts;
    Box::pin(negotiate::serve_connection(Transport::Plain(sock), a)).await;
}
