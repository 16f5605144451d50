//! The system calls the engine makes, in one place.
//!
//! Every `unsafe` block of the crate that touches the kernel lives here, each with a
//! `// SAFETY:` comment. Callers get safe functions over borrowed descriptors
//! ([`BorrowedFd`], or anything [`AsFd`]), so a descriptor is open for as long as a call
//! uses it. The set is small on purpose: `accept4` (non-blocking and close-on-exec in one
//! call), `recv` (reads, and `MSG_PEEK` for the PROXY header), `writev`, `send` with
//! `MSG_MORE`, `sendfile`, `pread`, `shutdown`, two socket options, and `madvise` to let go
//! of start-up's code pages.

use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Turns a `-1` return into the thread's `errno` as an [`io::Error`].
fn cvt(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// The peer address of an accepted connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAddr {
    /// A TCP peer (IPv4 or IPv6).
    Tcp(SocketAddr),
    /// A Unix-domain socket peer (usually unnamed).
    Unix,
}

/// The address (`127.0.0.1:5000`, `[::1]:5000`), or `unix`.
impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Tcp(a) => a.fmt(f),
            PeerAddr::Unix => f.write_str("unix"),
        }
    }
}

/// `accept4(fd, SOCK_NONBLOCK | SOCK_CLOEXEC)`: one call returns a ready-to-use socket.
///
/// # Errors
/// `WouldBlock` when the backlog is empty, or the kernel's error (`EMFILE`, `ECONNABORTED`...).
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<(OwnedFd, PeerAddr)> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` and `len` are valid for writes and sized as the kernel expects;
    // the flags are valid for accept4.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: accept4 returned a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((owned, peer_from_storage(&storage)))
}

/// The peer of connected socket `fd` (`getpeername`): for connections accepted without
/// their address (an accept operation on io_uring).
///
/// # Errors
/// The kernel's (`ENOTCONN`: the peer is already gone).
pub fn peer_of(fd: BorrowedFd<'_>) -> io::Result<PeerAddr> {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` and `len` are valid for writes and sized as the kernel expects.
    let r =
        unsafe { libc::getpeername(fd.as_raw_fd(), (&mut storage as *mut libc::sockaddr_storage).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(peer_from_storage(&storage))
}

fn peer_from_storage(storage: &libc::sockaddr_storage) -> PeerAddr {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is big and
            // aligned enough for.
            let sin = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            PeerAddr::Tcp(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            PeerAddr::Tcp(SocketAddr::new(ip.into(), u16::from_be(sin6.sin6_port)))
        }
        _ => PeerAddr::Unix,
    }
}

/// `recv(2)` from the stream socket `fd` into the spare capacity of `buf`, advancing its
/// length by what arrived.
///
/// `recvfrom` with no address rather than `read`: the socket call skips the file layer's
/// checks and notifications that `read` makes on every call (about 40 ns less per read of a
/// request on loopback, measured interleaved; `bench/floor/syscalls.c`).
///
/// # Errors
/// `WouldBlock` when no data is ready; `ENOTSOCK` if `fd` is not a socket; the kernel's
/// error otherwise.
pub fn read_into(fd: BorrowedFd<'_>, buf: &mut bytes::BytesMut) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // The raw system call skips glibc's cancellation-point bookkeeping (measurable per
    // request; we never use pthread cancellation).
    // SAFETY: `spare` is writable memory of `spare.len()` bytes owned by `buf`; the kernel
    // writes at most that many; a null address with length 0 is how recvfrom means recv.
    let n = cvt(unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd.as_raw_fd(),
            spare.as_mut_ptr(),
            spare.len(),
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    } as libc::ssize_t)?;
    // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// `writev(2)` of up to `IOV_MAX` slices; returns the bytes written.
///
/// # Errors
/// `WouldBlock` when the socket buffer is full; `EPIPE`/`ECONNRESET` when the peer left.
pub fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let cnt = bufs.len().min(1024) as libc::c_int;
    // SAFETY: IoSlice is ABI-compatible with `struct iovec` (documented by std); the slices
    // are valid for reads for the duration of the call.
    cvt(unsafe { libc::syscall(libc::SYS_writev, fd.as_raw_fd(), bufs.as_ptr(), cnt) } as libc::ssize_t)
}

/// `send(2)` with `MSG_NOSIGNAL` and, when `more` is set, `MSG_MORE` so the kernel holds the
/// bytes to share a packet with what follows (a `sendfile`).
///
/// # Errors
/// As [`writev`].
pub fn send(fd: BorrowedFd<'_>, buf: &[u8], more: bool) -> io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // sendto with no address is send; raw for the same reason as `read_into`.
    // SAFETY: `buf` is valid for reads of `buf.len()` bytes; a null address with length 0
    // is how sendto means send.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd.as_raw_fd(),
            buf.as_ptr(),
            buf.len(),
            flags,
            std::ptr::null::<libc::sockaddr>(),
            0,
        )
    } as libc::ssize_t)
}

/// `sendfile(2)` of up to `len` bytes of `file` from `*offset`, advancing `*offset`.
///
/// # Errors
/// As [`writev`], plus the file's read errors.
pub fn sendfile(sock: BorrowedFd<'_>, file: BorrowedFd<'_>, offset: &mut u64, len: usize) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: `off` is a valid, writable off_t; both descriptors are open for the call.
    let n = cvt(unsafe { libc::sendfile(sock.as_raw_fd(), file.as_raw_fd(), &mut off, len.min(0x7fff_f000)) })?;
    *offset = off as u64;
    Ok(n)
}

/// `pread(2)`: reads file bytes at an offset without moving the file position.
///
/// # Errors
/// The kernel's error.
#[cfg(any(feature = "tls", feature = "compress"))]
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
    cvt(unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) })
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds: the clock `Instant` reads (through the
/// vDSO), as a plain number, for timing that subtracts two readings per request without
/// `Instant`'s checked `timespec` arithmetic.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// `pread(2)` of up to `len` bytes at `offset`, appended to `buf` (read into its spare
/// capacity: nothing is zeroed first); returns the bytes read, 0 at the end of the file.
///
/// # Errors
/// The kernel's error.
pub fn pread_append(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<usize> {
    buf.reserve(len);
    let spare = &mut buf.spare_capacity_mut()[..len];
    // The raw system call, as `read_into` makes, where the offset is one argument (64-bit
    // Linux): glibc's `pread` wrapper adds a cancellation point (two calls around each
    // read) that no thread here uses.
    // SAFETY: `spare` is writable memory of `len` bytes owned by `buf`; the kernel writes at
    // most that many.
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    let n =
        cvt(
            unsafe { libc::syscall(libc::SYS_pread64, fd.as_raw_fd(), spare.as_mut_ptr(), len, offset as libc::off_t) }
                as libc::ssize_t,
        )?;
    // SAFETY: as above.
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    let n = cvt(unsafe { libc::pread(fd.as_raw_fd(), spare.as_mut_ptr().cast(), len, offset as libc::off_t) })?;
    // SAFETY: the kernel initialised the first `n` bytes of the spare capacity.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// `recv(2)` into `buf`; with `peek` (`MSG_PEEK`) the bytes stay queued for the next read
/// (the PROXY protocol header is peeked, then exactly its bytes are taken).
///
/// # Errors
/// `WouldBlock` when nothing is queued; the kernel's error otherwise.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], peek: bool) -> io::Result<usize> {
    let flags = if peek { libc::MSG_PEEK } else { 0 };
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes; the kernel writes at most that.
    cvt(unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) })
}

/// `shutdown(fd, SHUT_WR)`: sends FIN while still reading (the first step of a lingering close).
pub fn shutdown_write(fd: BorrowedFd<'_>) {
    // SAFETY: shutdown takes no pointers; an error (e.g. ENOTCONN) is harmless here.
    unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) };
}

/// Reads an integer socket option (used by tests to check inherited options).
///
/// # Errors
/// The kernel's error.
#[cfg(test)]
pub fn getsockopt_int(fd: &impl AsFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `val` and `len` are valid for writes and sized for an int option.
    let r = unsafe {
        libc::getsockopt(fd.as_fd().as_raw_fd(), level, name, (&mut val as *mut libc::c_int).cast(), &mut len)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(val)
    }
}

/// Sets `TCP_NODELAY` on a socket (set once on the listener; accepted sockets inherit it).
///
/// # Errors
/// The kernel's error.
pub fn set_nodelay(fd: &impl AsFd) -> io::Result<()> {
    set_tcp_int(fd, libc::TCP_NODELAY, 1)
}

/// Sets `TCP_NOTSENT_LOWAT` on a socket (set once on the listener; accepted sockets inherit
/// it): the most unsent bytes the socket queues before it stops taking writes.
///
/// # Errors
/// The kernel's error.
pub fn set_notsent_lowat(fd: &impl AsFd, bytes: u32) -> io::Result<()> {
    set_tcp_int(fd, libc::TCP_NOTSENT_LOWAT, bytes.min(i32::MAX as u32) as libc::c_int)
}

fn set_tcp_int(fd: &impl AsFd, name: libc::c_int, val: libc::c_int) -> io::Result<()> {
    // SAFETY: `val` is a valid int option value for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `madvise(addr, len, MADV_DONTNEED)` on a clean, read-only, private file mapping: its
/// resident pages are unmapped, and come back from the file on their next use.
///
/// # Errors
/// The kernel's error (`EINVAL` for a locked mapping or an unaligned address).
pub(crate) fn drop_clean_pages(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller (`server::code_pages`) passes a whole mapping of the executable
    // that is private, not writable and has no written page (no Anonymous or Swap memory
    // in smaps, which is where a private mapping's written pages go, resident or swapped):
    // every page of it is the file's page-cache page, so dropping them changes no byte any
    // code can see; the next access maps the same page again. No Rust reference covers the
    // range as mutable, and the mapping itself stays. (A write by a debugger between the
    // caller's reading of smaps and this call would be lost; see `server::code_pages`.)
    cvt(unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) } as libc::ssize_t).map(drop)
}

/// A new non-blocking, close-on-exec eventfd (counter 0).
///
/// # Errors
/// `eventfd` failed.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: `eventfd` takes no pointers; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by `eventfd` and is owned by nothing else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Registers an owned descriptor with the current runtime's reactor.
///
/// # Errors
/// The reactor's registration error (no runtime, or `epoll_ctl` failed).
pub(crate) fn register(fd: OwnedFd, interest: tokio::io::Interest) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor stays open and is
    // not reused for as long as the registration exists; it is closed only when the AsyncFd
    // (and with it the OwnedFd) is dropped, after deregistration.
    unsafe { Ok(tokio::io::unix::AsyncFd::register_with_interest(fd, interest)?) }
}

/// Registers an epoll instance of our own (a parking lot's, see `server::park`) with the
/// current runtime's reactor, for readability (it is readable while it has events).
pub(crate) fn register_poll(poll: mio::Poll) -> io::Result<tokio::io::unix::AsyncFd<mio::Poll>> {
    // SAFETY: as in `register`: the AsyncFd takes ownership of the Poll, which owns its
    // descriptor and closes it only when dropped, after deregistration.
    unsafe { Ok(tokio::io::unix::AsyncFd::register_with_interest(poll, tokio::io::Interest::READABLE)?) }
}

/// Takes ownership of descriptor `fd`, inherited from the process that started this one
/// (socket activation), after checking that it is open; marks it close-on-exec.
///
/// # Errors
/// `fd` is not an open descriptor.
pub(crate) fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD takes no pointer; it only reports whether `fd` is open.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and, by the socket-activation protocol
    // (LISTEN_FDS, checked by the caller against LISTEN_PID) or the upgrade's variable that
    // names it, handed to this process alone; nothing else in the process owns it, so
    // making it an OwnedFd is the only owner.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD with a flag value takes no pointer.
    unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_nodelay(&l).unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (fd, peer) = accept(l.as_fd()).unwrap();
        assert!(matches!(peer, PeerAddr::Tcp(_)));
        assert_eq!(getsockopt_int(&fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).unwrap(), 1);
        // TCP_NOTSENT_LOWAT too (0 means "the kernel's default" on a socket that did not set it).
        assert_eq!(getsockopt_int(&fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT).unwrap(), 0);
        set_notsent_lowat(&l, 100_000).unwrap();
        let _c2 = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (fd2, _) = accept(l.as_fd()).unwrap();
        assert_eq!(getsockopt_int(&fd2, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT).unwrap(), 100_000);
        // And accept4 set O_NONBLOCK: a read with nothing to read does not block.
        let mut buf = bytes::BytesMut::with_capacity(16);
        let e = read_into(fd.as_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }
}
