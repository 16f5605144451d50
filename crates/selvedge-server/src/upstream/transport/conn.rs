//! One upstream connection: a TCP or Unix socket, its receive buffer, a send buffer kept
//! across requests, and one deadline timer reused for every wait on it.
//!
//! Reads and writes first try the system call; only when it would block does the
//! connection arm its timer and wait for readiness. The timer is a single tokio `Sleep`
//! per connection, reset for each wait: pushing a deadline later is one atomic update in
//! tokio's timer wheel, so a request costs no timer allocation.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use selvedge_proto::message::HeaderSpan;
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::tls::{TlsIo, TlsTarget};

/// Spare receive-buffer room below which a read first grows the buffer.
const MIN_READ: usize = 2048;
/// How much a read makes room for.
const READ_SIZE: usize = 16 * 1024;

/// Where an upstream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// TCP, tried in order.
    Tcp(Vec<SocketAddr>),
    /// A Unix-domain socket.
    Unix(PathBuf),
}

/// The socket.
#[derive(Debug)]
enum Io {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsIo>),
}

impl Io {
    /// A read that also clears the socket's readiness when it drains the socket (a short
    /// read): the next read then waits for epoll instead of paying for an `EAGAIN` first
    /// (tokio clears readiness only on `WouldBlock`, so the read reports one to it).
    fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if let Io::Tls(t) = self {
            return t.try_read_buf(buf);
        }
        let this = &*self;
        let spare = buf.capacity() - buf.len();
        let mut got = 0;
        let mut read = || {
            let n = match this {
                Io::Tcp(s) => s.try_read_buf(buf)?,
                Io::Unix(s) => s.try_read_buf(buf)?,
                Io::Tls(_) => unreachable!(),
            };
            got = n;
            if n > 0 && n < spare {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        };
        let r = match this {
            Io::Tcp(s) => s.try_io(Interest::READABLE, &mut read),
            Io::Unix(s) => s.try_io(Interest::READABLE, &mut read),
            Io::Tls(_) => unreachable!(),
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
            r => r,
        }
    }

    fn try_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Io::Tcp(s) => s.try_read(buf),
            Io::Unix(s) => s.try_read(buf),
            Io::Tls(t) => t.read_plain(buf),
        }
    }

    /// `send` for one buffer (cheaper in the kernel than `writev`), else `writev`.
    fn try_write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match (self, bufs) {
            (Io::Tls(t), _) => t.try_write_vectored(bufs),
            (Io::Tcp(s), [one]) => s.try_write(one),
            (Io::Unix(s), [one]) => s.try_write(one),
            (Io::Tcp(s), _) => s.try_write_vectored(bufs),
            (Io::Unix(s), _) => s.try_write_vectored(bufs),
        }
    }

    /// Waits for readability through the stream's one reader waker slot
    /// (`poll_read_ready`) rather than `readable()`, whose waiter-list node is linked,
    /// unlinked and locked on every wait (about 300 instructions per proxied request). One
    /// task owns a connection, and it waits for each direction from one place at a time, so
    /// the slot's "only the last waker is woken" rule never drops a wake-up.
    async fn readable(&self) -> io::Result<()> {
        match self {
            Io::Tcp(s) => std::future::poll_fn(|cx| s.poll_read_ready(cx)).await,
            Io::Unix(s) => std::future::poll_fn(|cx| s.poll_read_ready(cx)).await,
            Io::Tls(t) if t.has_buffered() => Ok(()),
            Io::Tls(t) => std::future::poll_fn(|cx| t.sock.poll_read_ready(cx)).await,
        }
    }

    /// Waits for writability, as [`readable`](Self::readable) does (the writer slot).
    async fn writable(&self) -> io::Result<()> {
        match self {
            Io::Tcp(s) => std::future::poll_fn(|cx| s.poll_write_ready(cx)).await,
            Io::Unix(s) => std::future::poll_fn(|cx| s.poll_write_ready(cx)).await,
            Io::Tls(t) => std::future::poll_fn(|cx| t.sock.poll_write_ready(cx)).await,
        }
    }

    /// Sends what TLS still holds. `WouldBlock`: the socket is full.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Io::Tls(t) if t.wants_write() => t.flush(),
            _ => Ok(()),
        }
    }
}

/// Why a wait on the upstream ended without its result.
#[derive(Debug)]
pub(crate) enum Wait {
    /// The deadline passed.
    Timeout,
    /// The socket failed.
    Io(io::Error),
}

/// How a write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Everything was written.
    All,
    /// The watcher given to [`Conn::write_all`] said the upstream answered (for HTTP: a
    /// final response head is buffered, or it closed, or it sent something invalid) before
    /// everything was written.
    Answered,
}

/// What [`Conn::wait`] saw first.
#[derive(Debug)]
pub(crate) enum Ready<T> {
    /// The socket has something to read (or has closed).
    Read,
    /// The socket has room to write.
    Write,
    /// The other future completed.
    Other(T),
}

/// Decides, after [`Conn::try_fill`] put what arrived unasked into the receive buffer,
/// whether the upstream has answered for good (see [`Conn::write_all`]).
pub(crate) type Watch<'a> = &'a mut (dyn FnMut(&mut Conn) -> bool + Send);

/// An upstream connection.
#[derive(Debug)]
pub(crate) struct Conn {
    io: Io,
    /// Bytes received and not yet consumed.
    pub rbuf: BytesMut,
    /// The request head being sent (kept across requests for its capacity).
    pub wbuf: Vec<u8>,
    /// The fields of the last response head parsed (kept for its capacity).
    pub fields: Vec<HeaderSpan>,
    timer: Pin<Box<Sleep>>,
    /// The connection must not be reused: the upstream closed its side, or the last
    /// request was not sent whole.
    pub closing: bool,
    /// Holds the connection's place under the pool's connection limit.
    _permit: Option<OwnedSemaphorePermit>,
}

/// An upstream connection turned into a byte tunnel (see [`Conn::into_tunnel`]).
pub(crate) struct Tunnel {
    pub rd: Box<dyn AsyncRead + Send + Unpin>,
    pub wr: Box<dyn AsyncWrite + Send + Unpin>,
    /// Bytes of the new protocol that came with the 101.
    pub early: BytesMut,
    /// Held while the tunnel lives.
    pub permit: Option<OwnedSemaphorePermit>,
}

/// `fut`, but at most `limit`.
async fn timed<T>(
    timer: &mut Pin<Box<Sleep>>,
    limit: Duration,
    fut: impl Future<Output = io::Result<T>>,
) -> Result<T, Wait> {
    timer.as_mut().reset(Instant::now() + limit);
    tokio::select! {
        biased;
        r = fut => r.map_err(Wait::Io),
        () = timer.as_mut() => Err(Wait::Timeout),
    }
}

impl Conn {
    /// Connects to `addr` within `limit`.
    pub(crate) async fn connect(
        addr: &Addr,
        limit: Duration,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Conn, Wait> {
        Conn::connect_tls(addr, None, limit, permit).await
    }

    /// Connects to `addr` within `limit`, with TLS to `tls` (TCP only) when given.
    pub(crate) async fn connect_tls(
        addr: &Addr,
        tls: Option<&TlsTarget>,
        limit: Duration,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Conn, Wait> {
        let deadline = Instant::now() + limit;
        let mut timer = Box::pin(tokio::time::sleep(limit));
        let io = match addr {
            Addr::Unix(p) => Io::Unix(timed(&mut timer, limit, UnixStream::connect(p)).await?),
            Addr::Tcp(addrs) => {
                let mut last = Wait::Io(io::Error::new(io::ErrorKind::InvalidInput, "no address"));
                let mut found = None;
                for a in addrs {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match timed(&mut timer, left, TcpStream::connect(a)).await {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or(last)?;
                let _ = s.set_nodelay(true);
                match tls {
                    None => Io::Tcp(s),
                    Some(t) => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        Io::Tls(Box::new(timed(&mut timer, left, TlsIo::handshake(s, t)).await?))
                    }
                }
            }
        };
        Ok(Conn {
            io,
            rbuf: BytesMut::new(),
            wbuf: Vec::new(),
            fields: Vec::new(),
            timer,
            closing: false,
            _permit: permit,
        })
    }

    /// The protocol ALPN chose on a TLS connection (`None`: plain, or none chosen).
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        match &self.io {
            Io::Tls(t) => t.alpn(),
            _ => None,
        }
    }

    /// After a protocol switch: the socket's read and write halves (to run both directions
    /// at once), the bytes already received after the 101, and the connection's place under
    /// the limit (held while the tunnel lives).
    pub(crate) fn into_tunnel(self) -> Tunnel {
        let (rd, wr): (Box<dyn AsyncRead + Send + Unpin>, Box<dyn AsyncWrite + Send + Unpin>) = match self.io {
            Io::Tls(t) => {
                let (r, w) = tokio::io::split(*t);
                (Box::new(r), Box::new(w))
            }
            Io::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Io::Unix(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        Tunnel { rd, wr, early: self.rbuf, permit: self._permit }
    }

    /// Whether an idle connection can no longer be used: the upstream closed it or sent
    /// something unasked. Costs no system call when the socket saw no event.
    pub(crate) fn is_stale(&mut self) -> bool {
        if !self.rbuf.is_empty() || self.closing {
            return true;
        }
        let mut probe = [0u8; 1];
        !matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Drops buffers grown past `keep` bytes (before the connection goes idle).
    pub(crate) fn trim(&mut self, keep: usize) {
        if self.rbuf.capacity() > keep {
            self.rbuf = BytesMut::new();
        }
        if self.wbuf.capacity() > keep {
            self.wbuf = Vec::new();
        }
    }

    /// Reads more into the receive buffer, waiting at most `limit` for the socket.
    /// `Ok(0)`: the upstream closed.
    pub(crate) async fn read(&mut self, limit: Duration, room: usize) -> Result<usize, Wait> {
        if self.rbuf.capacity() - self.rbuf.len() < MIN_READ {
            self.rbuf.reserve(room.max(READ_SIZE));
        }
        loop {
            match self.io.try_read_buf(&mut self.rbuf) {
                Ok(n) => {
                    self.closing |= n == 0;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Wait::Io(e)),
            }
            timed(&mut self.timer, limit, self.io.readable()).await?;
        }
    }

    /// Writes all of `parts`, waiting at most `limit` each time the socket is full. With
    /// `watch`, a full socket is also watched for the upstream answering early: when it
    /// becomes readable, what arrived is read into the receive buffer and `watch` decides:
    /// `true` ends the write with [`Written::Answered`], `false` goes on writing.
    pub(crate) async fn write_all(
        &mut self,
        parts: &mut [&[u8]],
        limit: Duration,
        mut watch: Option<Watch<'_>>,
    ) -> Result<Written, Wait> {
        let mut parts = &mut parts[..];
        loop {
            match self.try_write(&mut parts) {
                Ok(true) => return Ok(Written::All),
                Ok(false) => {}
                Err(e) => return Err(Wait::Io(e)),
            }
            let Some(watch) = watch.as_deref_mut() else {
                timed(&mut self.timer, limit, self.io.writable()).await?;
                continue;
            };
            let readable = {
                let io = &self.io;
                let both = async {
                    tokio::select! {
                        biased;
                        r = io.readable() => r.map(|()| true),
                        r = io.writable() => r.map(|()| false),
                    }
                };
                timed(&mut self.timer, limit, both).await?
            };
            if readable && watch(self) {
                return Ok(Written::Answered);
            }
        }
    }

    /// Writes as much of `parts` as the socket takes now, consuming what was written.
    /// `Ok(true)`: all of it; `Ok(false)`: the socket is full.
    pub(crate) fn try_write(&mut self, parts: &mut &mut [&[u8]]) -> io::Result<bool> {
        loop {
            while parts.first().is_some_and(|p| p.is_empty()) {
                let rest = std::mem::take(parts);
                *parts = &mut rest[1..];
            }
            if parts.is_empty() {
                return match self.io.flush() {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
                    Err(e) => Err(e),
                };
            }
            let mut iov = [IoSlice::new(&[]); 4];
            let mut n = 0;
            for p in parts.iter().filter(|p| !p.is_empty()).take(iov.len()) {
                iov[n] = IoSlice::new(p);
                n += 1;
            }
            match self.io.try_write_vectored(&iov[..n]) {
                Ok(written) => advance(parts, written),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what has arrived into the receive buffer without waiting. `Ok(0)`: the
    /// upstream closed; `WouldBlock`: nothing has arrived.
    pub(crate) fn try_fill(&mut self) -> io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < MIN_READ {
            self.rbuf.reserve(READ_SIZE);
        }
        let r = self.io.try_read_buf(&mut self.rbuf);
        match &r {
            Ok(0) => self.closing = true,
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => self.closing = true,
            _ => {}
        }
        r
    }

    /// Waits until the socket is readable (with `read`) or writable (with `write`), or
    /// `other` completes; for at most `limit` (`None`: no limit).
    ///
    /// # Cancel safety
    /// Cancel safe (nothing is read or written), as far as `other` is.
    pub(crate) async fn wait<T>(
        &mut self,
        limit: Option<Duration>,
        read: bool,
        write: bool,
        other: impl Future<Output = T>,
    ) -> Result<Ready<T>, Wait> {
        let io = &self.io;
        let ready = async {
            tokio::select! {
                biased;
                r = io.readable(), if read => r.map(|()| Ready::Read),
                r = io.writable(), if write => r.map(|()| Ready::Write),
                t = other => Ok(Ready::Other(t)),
            }
        };
        match limit {
            Some(limit) => timed(&mut self.timer, limit, ready).await,
            None => ready.await.map_err(Wait::Io),
        }
    }

    /// Resolves when the socket has something to read (or closed, or failed).
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }
}

/// Consumes `n` written bytes from the front of `parts`.
fn advance(parts: &mut &mut [&[u8]], mut n: usize) {
    while n > 0 {
        let Some(first) = parts.first_mut() else { return };
        if n < first.len() {
            *first = &first[n..];
            return;
        }
        n -= first.len();
        let rest = std::mem::take(parts);
        *parts = &mut rest[1..];
    }
}

#[cfg(test)]
mod tests {
    use super::advance;

    #[test]
    fn advance_over_parts() {
        let (a, b, c) = (b"abc".as_slice(), b"de".as_slice(), b"f".as_slice());
        let mut arr = [a, b, c];
        let mut parts = &mut arr[..];
        advance(&mut parts, 4);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], b"e");
        advance(&mut parts, 2);
        assert!(parts.is_empty());
    }
}
