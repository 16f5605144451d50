//! A connected socket on the tokio reactor, read and written with as few system calls as
//! the kernel allows. It knows nothing of TLS: the TLS session sits on top of it (see
//! `tls.rs`), and `transport.rs` puts the two behind one type.
//!
//! - Reads go straight into the connection's buffer. A read that returns fewer bytes than
//!   it had room for drained the socket, so the readiness flag is cleared at once
//!   ([`AsyncFdReadyGuard::clear_ready`] only clears it if no new event arrived meanwhile):
//!   the next read waits for epoll instead of making a `read` that fails with `EAGAIN`.
//! - Writes are optimistic: the socket is usually writable, so `write`/`writev` is tried
//!   first and readiness is only awaited after `EAGAIN`. Until a write first goes short,
//!   the socket is not even asked for readiness (a new socket's is unknown until its first
//!   epoll event: asking would cost the connection's first answer a trip through the
//!   reactor).
//! - A file goes out as `send(header, MSG_MORE)` followed by `sendfile`, so header and the
//!   first file bytes share a packet.
//!
//! [`AsyncFdReadyGuard::clear_ready`]: tokio::io::unix::AsyncFdReadyGuard::clear_ready

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use bytes::BytesMut;
use tokio::io::unix::{AsyncFd, AsyncFdReadyGuard};
use tokio::io::Interest;

use crate::io::{sys, uring};
use crate::time::timeout::Timer;

/// A non-blocking connected stream socket (TCP or Unix): on the tokio reactor (epoll), or
/// on the worker's io_uring when the thread has one (`io::uring`).
#[derive(Debug)]
pub(crate) enum Socket {
    /// Readiness from epoll, and a system call per read and write.
    Epoll(Epoll),
    /// Reads and writes as operations on the worker's ring.
    Uring(uring::Sock),
}

/// A socket on the tokio reactor.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: AsyncFd<OwnedFd>,
    /// No write has gone short or blocked yet: writes skip the readiness check. One writer
    /// at a time (see [`read_ready`](Self::read_ready)), so `Relaxed` is enough.
    eager: AtomicBool,
}

impl Socket {
    /// Puts an accepted socket on this thread's ring if it has one, else on the current
    /// runtime's reactor.
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Socket> {
        if uring::active() {
            return Ok(Socket::Uring(uring::Sock::new(fd)?));
        }
        Ok(Socket::Epoll(Epoll::new(fd)?))
    }

    #[inline]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Socket::Epoll(s) => s.fd(),
            Socket::Uring(s) => s.fd(),
        }
    }

    /// Leaves the reactor or ring (for a parked connection): the descriptor, still open.
    pub(crate) fn into_fd(self) -> OwnedFd {
        match self {
            Socket::Epoll(s) => s.into_fd(),
            Socket::Uring(s) => s.into_fd(),
        }
    }

    /// Tries one read without waiting; `Ok(None)` means it would block (on a ring: nothing
    /// is queued).
    pub(crate) fn try_read(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match self {
            Socket::Epoll(s) => s.try_read(buf),
            Socket::Uring(s) => s.try_read(buf),
        }
    }

    /// One read without waiting, if the socket may be readable: see
    /// [`Epoll::try_read_ready`].
    #[inline]
    pub(crate) fn try_read_ready(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match self {
            Socket::Epoll(s) => s.try_read_ready(buf),
            Socket::Uring(s) => s.try_read(buf),
        }
    }

    /// Reads into the spare capacity of `buf` (which must have some). `Ok(0)` is end of
    /// stream.
    ///
    /// # Cancel safety
    /// Cancel safe: bytes are only appended to `buf` by a completed read.
    pub(crate) async fn read(&self, buf: &mut BytesMut) -> io::Result<usize> {
        self.read_when_ready(buf, |_| {}).await
    }

    /// Waits for readability, calls `fill` once (to give `buf` its room), then reads.
    #[inline]
    pub(crate) async fn read_when_ready(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
    ) -> io::Result<usize> {
        match self {
            Socket::Epoll(s) => s.read_when_ready(buf, fill).await,
            Socket::Uring(s) => Ok(s.read_unless_parked(buf, fill, |_| false).await?.unwrap_or(0)),
        }
    }

    /// An idle connection's read: as [`read_when_ready`](Self::read_when_ready), unless the
    /// timeout manager asks the connection to park first (`Ok(None)`: nothing was read and
    /// `fill` was not called).
    #[inline]
    pub(crate) async fn idle_read(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
        timer: &Timer,
    ) -> io::Result<Option<usize>> {
        match self {
            Socket::Epoll(s) => s.idle_read(buf, fill, timer).await,
            Socket::Uring(s) => s.read_unless_parked(buf, fill, |cx| timer.park_requested(cx)).await,
        }
    }

    /// Waits until the socket is readable (`Ok(true)`) or, with an idle connection's
    /// `timer`, the timeout manager asks the connection to park (`Ok(false)`), without
    /// reading.
    #[cfg(feature = "tls")]
    pub(crate) async fn ready_unless_parked(&self, timer: Option<&Timer>) -> io::Result<bool> {
        match self {
            Socket::Epoll(s) => s.ready_unless_parked(timer).await,
            Socket::Uring(s) => s.wait_queued(0, |cx| timer.is_some_and(|t| t.park_requested(cx))).await,
        }
    }

    /// Peeks at the bytes queued on the socket (they stay queued), waiting until more than
    /// `have` are there, `buf` is full, or the peer closed (`Ok(0)`). For the PROXY
    /// protocol header, which must be taken to its last byte and not one byte more.
    pub(crate) async fn peek_more(&self, buf: &mut [u8], have: usize) -> io::Result<usize> {
        match self {
            Socket::Epoll(s) => s.peek_more(buf, have).await,
            Socket::Uring(s) => s.peek_more(buf, have).await,
        }
    }

    /// Takes `n` bytes that [`peek_more`](Self::peek_more) showed are queued.
    pub(crate) fn discard_queued(&self, n: usize) -> io::Result<()> {
        match self {
            Socket::Epoll(s) => s.discard_queued(n),
            Socket::Uring(s) => s.discard_queued(n),
        }
    }

    /// One write attempt without waiting: how many bytes the kernel took (0 if it would
    /// block or was interrupted; always 0 on a ring, where writes are operations).
    #[inline]
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Epoll(s) => s.try_write(data),
            Socket::Uring(_) => Ok(0),
        }
    }

    /// Writes all of `data`.
    pub(crate) async fn write_all(&self, data: &[u8]) -> io::Result<()> {
        match self {
            Socket::Epoll(s) => s.write_all(data).await,
            Socket::Uring(s) => s.send_all(&[data], false).await,
        }
    }

    /// Writes all of the slices (one `writev`, or one send operation, per batch).
    pub(crate) async fn write_all_vectored(&self, bufs: &mut [&[u8]]) -> io::Result<()> {
        match self {
            Socket::Epoll(s) => s.write_all_vectored(bufs).await,
            Socket::Uring(s) => s.send_all(bufs, false).await,
        }
    }

    /// Sends `header` (with `MSG_MORE`) then `len` bytes of `file` from `offset` with
    /// `sendfile`. `on_progress` runs after each call that moved bytes (to tickle a timer).
    ///
    /// # Errors
    /// Socket errors, file read errors, or `UnexpectedEof` if the file shrank.
    pub(crate) async fn send_file(
        &self,
        header: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        on_progress: &(dyn Fn() + Sync),
    ) -> io::Result<()> {
        match self {
            Socket::Epoll(s) => s.send_file(header, file, offset, len, on_progress).await,
            Socket::Uring(s) => s.send_file(header, file, offset, len, on_progress).await,
        }
    }

    /// Half-closes the write side (FIN), keeping the read side open.
    pub(crate) fn shutdown_write(&self) {
        sys::shutdown_write(self.fd());
    }
}

impl Epoll {
    /// Registers an accepted socket with the current runtime's reactor.
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Epoll> {
        Ok(Epoll { fd: sys::register(fd, Interest::READABLE | Interest::WRITABLE)?, eager: AtomicBool::new(true) })
    }

    #[inline]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }

    /// Leaves the reactor (for a parked connection): the descriptor, still open.
    pub(crate) fn into_fd(self) -> OwnedFd {
        self.fd.into_inner()
    }

    /// Waits until the socket is readable. `poll_read_ready` keeps one waker per direction
    /// in the socket's registration (no waiter-list node to link, unlink and lock on drop,
    /// as `AsyncFd::readable` has: ~200 fewer instructions per wait). One waker is all a
    /// socket needs: one task at a time reads it (the connection, or the body reader it
    /// lends the app and gets back) and one writes it.
    #[inline]
    async fn read_ready(&self) -> io::Result<AsyncFdReadyGuard<'_, OwnedFd>> {
        std::future::poll_fn(|cx| self.fd.poll_read_ready(cx)).await
    }

    /// Waits until the socket is writable, like [`read_ready`](Self::read_ready).
    #[inline]
    async fn write_ready(&self) -> io::Result<AsyncFdReadyGuard<'_, OwnedFd>> {
        std::future::poll_fn(|cx| self.fd.poll_write_ready(cx)).await
    }

    /// Tries one `read` without waiting; `Ok(None)` means it would block.
    pub(crate) fn try_read(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        match sys::read_into(self.fd(), buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One read without waiting, if the reactor says the socket may be readable: `Ok(None)`
    /// when it says not (no system call) or the read would block (and the readiness it
    /// reported is cleared, so that a wait that follows waits for the kernel's next event
    /// instead of finding the stale one: [`try_read`](Self::try_read) reads past the
    /// reactor and leaves it set).
    pub(crate) fn try_read_ready(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let Poll::Ready(mut guard) = self.fd.poll_read_ready(&mut cx)? else { return Ok(None) };
        self.read_guarded(&mut guard, buf)
    }

    /// One `read` under a readiness guard: `Ok(None)` when it would block (the readiness
    /// is cleared, so the next wait is for the kernel's next event); a short read clears it
    /// too (the socket was drained), a full one leaves it for the next read. Always
    /// inlined: it is every request's read (as a call, +18 instructions per request).
    #[inline(always)]
    fn read_guarded(
        &self,
        guard: &mut AsyncFdReadyGuard<'_, OwnedFd>,
        buf: &mut BytesMut,
    ) -> io::Result<Option<usize>> {
        let room = buf.capacity() - buf.len();
        loop {
            match sys::read_into(self.fd(), buf) {
                Ok(n) => {
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    guard.clear_ready();
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for readability, calls `fill` once (to give `buf` its room), then reads as
    /// [`read`](Self::read) does, with the same readiness guard.
    #[inline]
    pub(crate) async fn read_when_ready(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
    ) -> io::Result<usize> {
        Ok(self.read_unless_parked(buf, fill, None).await?.unwrap_or(0))
    }

    /// [`Socket::idle_read`] on the reactor.
    #[inline]
    pub(crate) async fn idle_read(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
        timer: &Timer,
    ) -> io::Result<Option<usize>> {
        self.read_unless_parked(buf, fill, Some(timer)).await
    }

    /// Waits until the socket is readable (`Ok(true)`) or, with an idle connection's
    /// `timer`, the timeout manager asks the connection to park (`Ok(false)`), without
    /// reading.
    #[cfg(feature = "tls")]
    pub(crate) async fn ready_unless_parked(&self, timer: Option<&Timer>) -> io::Result<bool> {
        Ok(self.read_ready_unless_parked(timer).await?.is_some())
    }

    /// [`read_ready`](Self::read_ready), or `None` at once when `park` (an idle
    /// connection's timer) asks the connection to park.
    #[inline]
    async fn read_ready_unless_parked(
        &self,
        park: Option<&Timer>,
    ) -> io::Result<Option<AsyncFdReadyGuard<'_, OwnedFd>>> {
        std::future::poll_fn(|cx| {
            if park.is_some_and(|t| t.park_requested(cx)) {
                return Poll::Ready(Ok(None));
            }
            self.fd.poll_read_ready(cx).map_ok(Some)
        })
        .await
    }

    async fn read_unless_parked(
        &self,
        buf: &mut BytesMut,
        fill: impl FnOnce(&mut BytesMut),
        park: Option<&Timer>,
    ) -> io::Result<Option<usize>> {
        let Some(mut guard) = self.read_ready_unless_parked(park).await? else { return Ok(None) };
        fill(buf);
        debug_assert!(buf.capacity() > buf.len());
        loop {
            if let Some(n) = self.read_guarded(&mut guard, buf)? {
                return Ok(Some(n));
            }
            drop(guard);
            // The readiness was stale (a `try_read` had taken the bytes past the reactor):
            // the wait goes on as it began, so that a request to park still reaches it.
            let Some(g) = self.read_ready_unless_parked(park).await? else { return Ok(None) };
            guard = g;
        }
    }

    /// Peeks at the bytes queued on the socket (they stay queued), waiting until more than
    /// `have` are there, `buf` is full, or the peer closed (`Ok(0)`). For the PROXY
    /// protocol header, which must be taken to its last byte and not one byte more.
    pub(crate) async fn peek_more(&self, buf: &mut [u8], have: usize) -> io::Result<usize> {
        loop {
            let mut guard = self.read_ready().await?;
            match sys::recv(self.fd(), buf, true) {
                Ok(n) if n > have || n == 0 || n == buf.len() => return Ok(n),
                // Nothing new: wait for the next event.
                Ok(_) => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes `n` bytes that [`peek_more`](Self::peek_more) showed are queued.
    pub(crate) fn discard_queued(&self, mut n: usize) -> io::Result<()> {
        let mut scratch = [0u8; 512];
        while n > 0 {
            match sys::recv(self.fd(), &mut scratch[..n.min(512)], false) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => n -= k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One write attempt without waiting: how many bytes the kernel took (0 if it would
    /// block or was interrupted).
    #[inline]
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        match sys::send(self.fd(), data, false) {
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// One non-blocking write (`op`, offered `want` bytes) once the socket is writable,
    /// retried until it does not return `EAGAIN`. Each try holds the readiness guard it was
    /// made under, so readiness is cleared only for the event that try saw and a later
    /// event is never lost. A short write clears it too: with edge-triggered epoll a write
    /// that took fewer bytes than offered means the send buffer is full (tokio's own
    /// streams rely on the same), so the next call waits for the kernel's wake-up instead
    /// of spending a system call on an `EAGAIN`.
    ///
    /// While the socket is `eager` (no write went short yet), `op` is tried first without
    /// asking for readiness; the first short or blocked write ends that for good.
    async fn write_when_ready(&self, want: usize, mut op: impl FnMut() -> io::Result<usize>) -> io::Result<usize> {
        if self.eager.load(Ordering::Relaxed) {
            match op() {
                Ok(n) if n == want => return Ok(n),
                Ok(n) => {
                    // Short: the send buffer is full. Clear a readiness already seen, as
                    // below, so the next write waits for the kernel instead of an EAGAIN.
                    self.eager.store(false, Ordering::Relaxed);
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    if let Poll::Ready(Ok(mut guard)) = self.fd.poll_write_ready(&mut cx) {
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.eager.store(false, Ordering::Relaxed),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        loop {
            let mut guard = self.write_ready().await?;
            match op() {
                Ok(n) => {
                    if n > 0 && n < want {
                        guard.clear_ready();
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes all of `data`.
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = self.write_when_ready(data.len(), || sys::send(self.fd(), data, false)).await?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Writes all of the slices with `writev`, in as few calls as the kernel takes.
    pub(crate) async fn write_all_vectored(&self, bufs: &mut [&[u8]]) -> io::Result<()> {
        let mut first = 0;
        while first < bufs.len() {
            if bufs[first].is_empty() {
                first += 1;
                continue;
            }
            // 16: an HTTP/2 batch of file frames is a header and a payload each, and its
            // end (`h2::conn::sender`).
            let mut slices = [IoSlice::new(&[]); 16];
            let k = (bufs.len() - first).min(slices.len());
            for (slot, b) in slices.iter_mut().zip(&bufs[first..first + k]) {
                *slot = IoSlice::new(b);
            }
            let want = slices[..k].iter().map(|s| s.len()).sum();
            let mut n = self.write_when_ready(want, || sys::writev(self.fd(), &slices[..k])).await?;
            while n > 0 {
                let take = n.min(bufs[first].len());
                bufs[first] = &bufs[first][take..];
                n -= take;
                if bufs[first].is_empty() {
                    first += 1;
                }
            }
        }
        Ok(())
    }

    /// Sends `header` (with `MSG_MORE`) then `len` bytes of `file` from `offset` with
    /// `sendfile`. `on_progress` runs after each call that moved bytes (to tickle a timer).
    ///
    /// # Errors
    /// Socket errors, file read errors, or `UnexpectedEof` if the file shrank.
    pub(crate) async fn send_file(
        &self,
        mut header: &[u8],
        file: BorrowedFd<'_>,
        mut offset: u64,
        len: u64,
        on_progress: &(dyn Fn() + Sync),
    ) -> io::Result<()> {
        let end = offset + len;
        while !header.is_empty() {
            let n = self.write_when_ready(header.len(), || sys::send(self.fd(), header, len > 0)).await?;
            header = &header[n..];
        }
        while offset < end {
            let want = (end - offset).min(1 << 30) as usize;
            match self.write_when_ready(want, || sys::sendfile(self.fd(), file, &mut offset, want)).await? {
                0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while sending")),
                _ => on_progress(),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::Socket;

    /// A new socket's first write goes out in the first poll, before the reactor has
    /// reported any readiness; once a write went short, writes wait for readiness again.
    #[test]
    fn first_write_does_not_wait_for_the_reactor() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        let _enter = rt.enter();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let sock = Socket::new(ours.into()).unwrap();
        let Socket::Epoll(epoll) = &sock else { panic!("no ring on this thread") };
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(pin!(sock.write_all(b"first")).poll(&mut cx), Poll::Ready(Ok(()))));
        let mut got = [0u8; 5];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"first");
        // Fill the send buffer: the write goes short, and the socket stops being eager.
        let big = vec![0u8; 8 << 20];
        assert!(pin!(sock.write_all(&big)).poll(&mut cx).is_pending());
        assert!(!epoll.eager.load(std::sync::atomic::Ordering::Relaxed));
    }

    /// An idle wait that finds the reactor's readiness stale (a `try_read` took the bytes
    /// past the reactor, as a connection's first read does) still hears the timeout
    /// manager's request to park: it used to wait on without it, so the connection kept
    /// its task until its idle timeout.
    #[test]
    fn an_idle_wait_on_stale_readiness_still_parks() {
        use std::io::Write;
        use std::sync::Arc;
        use std::time::Duration;

        use bytes::BytesMut;

        use crate::time::timeout::{Group, Timer};

        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        rt.block_on(async {
            let (ours, mut theirs) = UnixStream::pair().unwrap();
            ours.set_nonblocking(true).unwrap();
            let sock = Socket::new(ours.into()).unwrap();
            let Socket::Epoll(epoll) = &sock else { panic!("no ring on this thread") };
            theirs.write_all(b"GET").unwrap();
            // The reactor reports the bytes (the guard goes without clearing it)...
            drop(epoll.read_ready().await.unwrap());
            // ...which a read past the reactor takes: the readiness is now stale.
            let mut buf = BytesMut::with_capacity(64);
            assert_eq!(sock.try_read(&mut buf).unwrap(), Some(3));
            let timer = Timer::register(&Arc::new(Group::new(1)), Duration::from_secs(60));
            assert!(timer.enter_idle());
            let mut next = BytesMut::with_capacity(64);
            let mut wait = pin!(sock.idle_read(&mut next, |_| {}, &timer));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(wait.as_mut().poll(&mut cx).is_pending(), "nothing more was sent");
            timer.ask_to_park();
            assert!(matches!(wait.as_mut().poll(&mut cx), Poll::Ready(Ok(None))), "the wait did not hear it");
        });
    }
}
