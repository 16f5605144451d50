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
//! `graceful_timeout` whatever is left is dropped.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Type};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::app::App;
use crate::settings::{Settings, Workers};
use crate::socket::Socket;
use crate::sys;
use crate::time::timeout::{self, Group, Timer};

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

/// A listener's TLS configuration (`None`: cleartext).
#[derive(Debug, Clone, Default)]
struct TlsOpt(#[cfg(feature = "tls")] Option<Arc<rustls::ServerConfig>>);

/// A server: settings and addresses; [`Server::start`] or [`Server::run`] serve an app.
#[derive(Debug)]
pub struct Server {
    settings: Settings,
    listen: Vec<Listen>,
    tls: Vec<TlsOpt>,
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    group: Arc<Group>,
    threads: Vec<JoinHandle<()>>,
    bound: Vec<Listen>,
}

impl Server {
    /// A server with these settings and no address yet.
    pub fn new(settings: Settings) -> Server {
        Server { settings, listen: Vec::new(), tls: Vec::new() }
    }

    /// Adds an address to listen on.
    pub fn bind(mut self, addr: impl Into<Listen>) -> Server {
        self.listen.push(addr.into());
        self.tls.push(TlsOpt::default());
        self
    }

    /// Adds a TLS address: connections complete a handshake with `config` (see
    /// [`crate::tls::server_config`]) within `Settings::tls_handshake_timeout`, then speak
    /// HTTP/2 if ALPN chose `h2`, else HTTP/1.1.
    #[cfg(feature = "tls")]
    pub fn bind_tls(mut self, addr: impl Into<Listen>, config: Arc<rustls::ServerConfig>) -> Server {
        self.listen.push(addr.into());
        self.tls.push(TlsOpt(Some(config)));
        self
    }

    /// Binds the listeners, starts the workers and returns at once.
    ///
    /// # Errors
    /// Binding or listening failed, or a worker thread could not start.
    pub fn start<A: App>(self, app: A) -> io::Result<ServerHandle> {
        if self.listen.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on"));
        }
        timeout::start();
        let cfg = Arc::new(self.settings);
        let app = Arc::new(app);
        let group = Arc::new(Group::new(cfg.max_connections));
        let (threads_n, per_core) = match cfg.workers {
            Workers::PerCore(n) => (n.max(1), true),
            Workers::MultiThread(n) => (n.max(1), false),
        };
        let sockets_per_addr = if per_core { threads_n } else { 1 };
        // sockets[w] = the listeners of worker w.
        let mut sockets: Vec<Vec<(OwnedFd, TlsOpt)>> = (0..sockets_per_addr).map(|_| Vec::new()).collect();
        let mut bound = Vec::new();
        for (l, tls) in self.listen.iter().zip(&self.tls) {
            match l {
                Listen::Tcp(addr) => {
                    let mut addr = *addr;
                    for (w, socks) in sockets.iter_mut().enumerate() {
                        let s = tcp_listener(addr, &cfg, per_core)?;
                        if w == 0 {
                            addr = s.local_addr()?.as_socket().unwrap_or(addr);
                            bound.push(Listen::Tcp(addr));
                        }
                        socks.push((s.into(), tls.clone()));
                    }
                }
                Listen::Unix(path) => {
                    let s = unix_listener(path, cfg.backlog)?;
                    bound.push(Listen::Unix(path.clone()));
                    for socks in sockets.iter_mut() {
                        socks.push((s.try_clone()?.into(), tls.clone()));
                    }
                }
            }
        }
        let mut threads = Vec::new();
        if per_core {
            for (w, socks) in sockets.into_iter().enumerate() {
                let (app, cfg, group) = (app.clone(), cfg.clone(), group.clone());
                let t = std::thread::Builder::new().name(format!("selvedge-w{w}")).spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
                    match rt {
                        Ok(rt) => rt.block_on(worker(socks, app, cfg, group)),
                        Err(e) => eprintln!("selvedge: worker {w}: {e}"),
                    }
                })?;
                threads.push(t);
            }
        } else {
            let socks = sockets.pop().unwrap_or_default();
            let group = group.clone();
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads_n).enable_all().build()?;
            let t = std::thread::Builder::new().name("selvedge-mt".into()).spawn(move || {
                rt.block_on(worker(socks, app, cfg, group));
            })?;
            threads.push(t);
        }
        Ok(ServerHandle { group, threads, bound })
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

impl ServerHandle {
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
        self.group.begin_shutdown();
    }

    /// Waits until every worker has finished.
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
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
            eprintln!("selvedge: TCP_NOTSENT_LOWAT not set on {addr}: {e}");
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
async fn worker<A: App>(socks: Vec<(OwnedFd, TlsOpt)>, app: Arc<A>, cfg: Arc<Settings>, group: Arc<Group>) {
    for (s, tls) in socks {
        match sys::register(s, Interest::READABLE) {
            Ok(l) => {
                tokio::spawn(accept_loop(l, tls, app.clone(), cfg.clone(), group.clone()));
            }
            Err(e) => eprintln!("selvedge: listener registration failed: {e}"),
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
    tls: TlsOpt,
    app: Arc<A>,
    cfg: Arc<Settings>,
    group: Arc<Group>,
) {
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    let fd = listener.as_raw_fd();
    loop {
        group.wait_room().await;
        let mut guard = tokio::select! {
            g = listener.readable() => match g {
                Ok(g) => g,
                Err(_) => return,
            },
            _ = group.wait_shutdown() => return,
        };
        loop {
            if group.is_shutting_down() {
                return;
            }
            match sys::accept(fd) {
                Ok((conn, peer)) => {
                    let sock = match Socket::new(conn) {
                        Ok(s) => s,
                        Err(_) => continue,
                    };
                    let timer = Timer::register(&group, cfg.header_timeout);
                    let handle = timer.handle();
                    #[cfg(feature = "tls")]
                    let task = match &tls.0 {
                        Some(tc) => tokio::spawn(serve_tls(sock, tc.clone(), peer, app.clone(), cfg.clone(), timer)),
                        None => tokio::spawn(crate::h1::conn::serve(sock, peer, app.clone(), cfg.clone(), timer)),
                    };
                    #[cfg(not(feature = "tls"))]
                    let task = tokio::spawn(crate::h1::conn::serve(sock, peer, app.clone(), cfg.clone(), timer));
                    handle.set_abort(task.abort_handle());
                    if group.is_full() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        // Out of descriptors or memory: back off instead of spinning, keep
                        // serving the connections we have.
                        cfg.exception(&crate::Error::io(e));
                        drop(guard);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        break;
                    }
                    _ => continue, // ECONNABORTED, EINTR, EPROTO...: the next one may be fine
                },
            }
        }
    }
}

/// A TLS connection: handshake (on the connection's timer), then HTTP/2 or HTTP/1.1 by ALPN.
#[cfg(feature = "tls")]
async fn serve_tls<A: App>(
    mut sock: Socket,
    config: Arc<rustls::ServerConfig>,
    peer: sys::PeerAddr,
    app: Arc<A>,
    cfg: Arc<Settings>,
    timer: Timer,
) {
    let session = match crate::tls::Session::new(config) {
        Ok(s) => s,
        Err(e) => return cfg.exception(&crate::Error::io(e)),
    };
    sock.tls = Some(Box::new(session));
    timer.set_deadline(timeout::now_ms(), cfg.tls_handshake_timeout);
    let Some(session) = sock.tls.as_deref() else { return };
    if let Err(e) = session.handshake(&sock).await {
        cfg.exception(&crate::Error::io(e));
        sock.raw_shutdown_write();
        return;
    }
    let alpn = session.alpn();
    if alpn.as_deref() == Some(crate::tls::ACME_TLS_ALPN) {
        // A TLS-ALPN-01 validation: the handshake was the answer; no data follows (RFC 8737).
        session.close_notify(&sock);
        sock.raw_shutdown_write();
        return;
    }
    if alpn.as_deref() == Some(b"h2") {
        let sock = Arc::new(sock);
        Box::pin(crate::h2::conn::serve(sock, peer, app, cfg, timer, bytes::BytesMut::new(), None)).await;
    } else {
        crate::h1::conn::serve(sock, peer, app, cfg, timer).await;
    }
}
