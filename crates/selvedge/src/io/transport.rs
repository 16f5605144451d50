//! What a connection reads and writes: a plain socket, or a TLS session over one. Protocol
//! drivers see only this type; TLS depends on the socket and the socket knows nothing of
//! TLS.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use bytes::BytesMut;

use crate::io::socket::Socket;
use crate::time::timeout::Timer;

/// A connection's byte stream.
#[derive(Debug)]
pub(crate) enum Transport {
    /// Cleartext.
    Plain(Socket),
    /// TLS: every read and write goes through the session.
    #[cfg(feature = "tls")]
    Tls {
        /// The socket under the session.
        sock: Socket,
        /// The session (boxed: much larger than a socket).
        session: Box<crate::io::tls::Session>,
    },
}

/// What a connection's TLS agreed, as each of its requests carries it: the version, and
/// the server name the client asked for (SNI), shared by the connection's requests.
#[derive(Debug, Clone)]
pub(crate) struct Tls {
    pub(crate) version: crate::message::TlsVersion,
    pub(crate) name: Option<std::sync::Arc<str>>,
}

impl Tls {
    pub(crate) fn new(version: crate::message::TlsVersion, name: Option<&str>) -> Tls {
        Tls { version, name: name.map(std::sync::Arc::from) }
    }
}

impl Transport {
    /// The TLS version (after the handshake), `None` for cleartext.
    pub(crate) fn tls_version(&self) -> Option<crate::message::TlsVersion> {
        match self {
            Transport::Plain(_) => None,
            #[cfg(feature = "tls")]
            Transport::Tls { session, .. } => Some(session.version()),
        }
    }

    /// The TLS its requests carry (version and SNI), `None` for cleartext: read once per
    /// connection.
    pub(crate) fn tls(&self) -> Option<Tls> {
        match self {
            Transport::Plain(_) => None,
            #[cfg(feature = "tls")]
            Transport::Tls { session, .. } => Some(Tls::new(session.version(), session.server_name().as_deref())),
        }
    }

    /// The socket's descriptor (under the TLS session, if any), for socket options.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Transport::Plain(sock) => sock.fd(),
            #[cfg(feature = "tls")]
            Transport::Tls { sock, .. } => sock.fd(),
        }
    }

    /// Whether the TLS client chose HTTP/2 by ALPN.
    pub(crate) fn alpn_h2(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            #[cfg(feature = "tls")]
            Transport::Tls { session, .. } => session.alpn().as_deref() == Some(b"h2"),
        }
    }

    /// Tries one read without waiting; `Ok(None)` means it would block.
    pub(crate) fn try_read(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match self {
            Transport::Plain(s) => s.try_read(buf),
            #[cfg(feature = "tls")]
            Transport::Tls { session, .. } => session.try_read(buf),
        }
    }

    /// One read without waiting, if the reactor says the socket may be readable (see
    /// `Socket::try_read_ready`); `Ok(None)`: nothing now. Over TLS, what the session
    /// holds decrypted, else `Ok(None)`.
    pub(crate) fn try_read_ready(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match self {
            Transport::Plain(s) => s.try_read_ready(buf),
            #[cfg(feature = "tls")]
            Transport::Tls { session, .. } if session.has_plaintext() => session.try_read(buf),
            #[cfg(feature = "tls")]
            Transport::Tls { .. } => Ok(None),
        }
    }

    /// Reads into the spare capacity of `buf` (which must have some). `Ok(0)` is end of
    /// stream.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes are only appended to `buf` by a completed read.
    #[inline]
    pub(crate) async fn read(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => session.read(sock, buf).await,
        }
    }

    /// Waits until a read would make progress, calls `fill` (an idle connection takes its
    /// buffer back only now), then reads into `buf` as [`read`](Self::read) does. In
    /// cleartext one readiness check serves both the wait and the read.
    pub(crate) async fn read_when_ready(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
    ) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read_when_ready(buf, fill).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => {
                if !session.has_plaintext() {
                    session.release_idle();
                    sock.ready_unless_parked(None).await?;
                }
                fill(buf);
                session.read(sock, buf).await
            }
        }
    }

    /// An idle connection's read: as [`read_when_ready`](Self::read_when_ready), unless the
    /// timeout manager asks the connection to park first (`Ok(None)`: nothing was read and
    /// `fill` was not called).
    pub(crate) async fn idle_read(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
        timer: &Timer,
    ) -> io::Result<Option<usize>> {
        match self {
            Transport::Plain(s) => s.idle_read(buf, fill, timer).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => {
                if !session.has_plaintext() {
                    session.release_idle();
                    if !sock.ready_unless_parked(Some(timer)).await? {
                        return Ok(None);
                    }
                }
                fill(buf);
                session.read(sock, buf).await.map(Some)
            }
        }
    }

    /// Leaves the reactor while the connection is parked: the socket's descriptor (and the
    /// TLS session), with no task, registration or buffer of the transport's own.
    pub(crate) fn into_dormant(self) -> Dormant {
        match self {
            Transport::Plain(s) => Dormant {
                fd: s.into_fd(),
                #[cfg(feature = "tls")]
                session: None,
            },
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => Dormant { fd: sock.into_fd(), session: Some(session) },
        }
    }

    /// One write attempt without waiting, in cleartext: how many bytes the kernel took (0
    /// if it would block or was interrupted). Over TLS it writes nothing and returns 0, so
    /// callers go on with [`write_all`](Self::write_all) for the rest.
    #[inline]
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.try_write(data),
            #[cfg(feature = "tls")]
            Transport::Tls { .. } => Ok(0),
        }
    }

    /// Writes all of `data`.
    pub(crate) async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.write_all(data).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => session.write_all(sock, &[data]).await,
        }
    }

    /// Writes all of the slices (one `writev` when cleartext).
    pub(crate) async fn write_all_vectored(&self, bufs: &mut [&[u8]]) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.write_all_vectored(bufs).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => session.write_all(sock, bufs).await,
        }
    }

    /// Sends `header` then `len` bytes of `file` from `offset`: `send(MSG_MORE)` +
    /// `sendfile` in cleartext, `pread` + encrypted writes over TLS. `on_progress` runs
    /// after each step that moved bytes.
    pub(crate) async fn send_file(
        &self,
        header: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        on_progress: &(dyn Fn() + Sync),
    ) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.send_file(header, file, offset, len, on_progress).await,
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => session.send_file(sock, header, file, offset, len, on_progress).await,
        }
    }

    /// Half-closes the write side (after a TLS `close_notify`, on TLS).
    pub(crate) fn shutdown_write(&self) {
        match self {
            Transport::Plain(s) => s.shutdown_write(),
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => {
                session.close_notify(sock);
                sock.shutdown_write();
            }
        }
    }

    /// Closes an idle connection from where no `await` is possible (a task being
    /// stopped): see [`Dormant::last_words`].
    pub(crate) fn last_words(&self, data: &[u8]) {
        match self {
            #[cfg(not(feature = "tls"))]
            Transport::Plain(s) => last_words(s.fd(), data),
            #[cfg(feature = "tls")]
            Transport::Plain(s) => last_words(s.fd(), None, data),
            #[cfg(feature = "tls")]
            Transport::Tls { sock, session } => last_words(sock.fd(), Some(session), data),
        }
    }

    /// Lingering close: half-close (FIN), then read and discard what the peer still sends,
    /// for up to `timeout` and `most` bytes, so closing with unread data does not reset the
    /// connection under the answer (or the HTTP/2 GOAWAY) the peer has yet to read.
    pub(crate) async fn linger(&self, timeout: Duration, most: usize) {
        self.shutdown_write();
        // The buffer is taken from the thread's pool only when bytes arrive and goes back
        // after each read: a lingering connection (thousands, under a flood of connections
        // the server cuts off) waits without one.
        let drain = async {
            let mut total = 0usize;
            while total <= most {
                let mut buf = BytesMut::new();
                let r = self.read_when_ready(&mut buf, |b| *b = crate::io::pool::take_read(4096)).await;
                buf.clear();
                crate::io::pool::put_read(buf);
                match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => total += n,
                }
            }
        };
        let _ = tokio::time::timeout(timeout, drain).await;
    }
}

/// What an HTTP/1.1 connection reads while it lingers: no limit but the time, since a
/// client still sending a large body must be able to finish it and read the answer.
pub(crate) const LINGER_HTTP1: usize = usize::MAX;

/// What a connection ended with an HTTP/2 GOAWAY (or a broken preface) reads while it
/// lingers: what the peer sent before it saw the GOAWAY; a peer that goes on (a flood) is
/// cut at this much instead of at the timeout.
pub(crate) const LINGER_HTTP2: usize = 1 << 20;

/// A parked connection's transport: its descriptor, off the reactor, and its TLS session.
#[derive(Debug)]
pub(crate) struct Dormant {
    fd: std::os::fd::OwnedFd,
    #[cfg(feature = "tls")]
    session: Option<Box<crate::io::tls::Session>>,
}

impl Dormant {
    /// The descriptor, to watch for readability.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// A parked connection closes with `data` (an HTTP/2 GOAWAY): written at once, with
    /// TLS's `close_notify` after it, then the write side is shut. Best effort: nothing
    /// else is in flight on an idle connection, so a few bytes fit its send buffer.
    pub(crate) fn last_words(&self, data: &[u8]) {
        #[cfg(feature = "tls")]
        return last_words(self.fd(), self.session.as_deref(), data);
        #[cfg(not(feature = "tls"))]
        last_words(self.fd(), data);
    }

    /// Back on the current runtime's reactor, as the transport it was.
    ///
    /// # Errors
    /// The registration failed.
    pub(crate) fn wake(self) -> io::Result<Transport> {
        let sock = Socket::new(self.fd)?;
        #[cfg(feature = "tls")]
        if let Some(session) = self.session {
            return Ok(Transport::Tls { sock, session });
        }
        Ok(Transport::Plain(sock))
    }
}

/// Writes `data` at once (with TLS's `close_notify` after it), then shuts the write side.
fn last_words(fd: BorrowedFd<'_>, #[cfg(feature = "tls")] session: Option<&crate::io::tls::Session>, data: &[u8]) {
    #[cfg(feature = "tls")]
    if let Some(session) = session {
        session.last_words(fd, data);
        return crate::io::sys::shutdown_write(fd);
    }
    let _ = crate::io::sys::send(fd, data, false);
    crate::io::sys::shutdown_write(fd);
}
