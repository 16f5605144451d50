//! Listening sockets inherited from the process that started this one, by systemd's
//! socket-activation protocol (`sd_listen_fds(3)`): descriptors 3, 4, … `3 + LISTEN_FDS - 1`,
//! meant for the process whose id is `LISTEN_PID`, named by `LISTEN_FDNAMES`
//! (colon-separated). A binary upgrade hands its sockets to the new process the same way.

use std::io;
use std::os::fd::OwnedFd;

use super::Listen;
use crate::io::sys;

/// The first inherited descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: i32 = 3;

/// One inherited listening socket.
#[derive(Debug)]
pub struct Inherited {
    /// The socket (close-on-exec from now on).
    pub fd: OwnedFd,
    /// Its name from `LISTEN_FDNAMES` (systemd's `FileDescriptorName=`), or `""`.
    pub name: String,
    /// The address it is bound to.
    pub addr: Listen,
}

/// Takes the listening sockets passed by socket activation, if any are meant for this
/// process (`LISTEN_PID` is its id), and removes the `LISTEN_*` variables from the
/// environment so that child processes do not see them. Call it once, early, before other
/// threads start (it changes the environment). [`Server::bind_fd`](super::Server::bind_fd)
/// serves on each.
///
/// # Errors
/// A variable is malformed, or a descriptor is not an open socket.
pub fn listen_fds() -> io::Result<Vec<Inherited>> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let names = std::env::var("LISTEN_FDNAMES").ok();
    for v in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    let (Some(pid), Some(fds)) = (pid, fds) else { return Ok(Vec::new()) };
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let pid: u32 = pid.trim().parse().map_err(|_| bad("LISTEN_PID is not a process id"))?;
    if pid != std::process::id() {
        return Ok(Vec::new());
    }
    let n: i32 = fds.trim().parse().map_err(|_| bad("LISTEN_FDS is not a number"))?;
    if !(0..=4096).contains(&n) {
        return Err(bad("LISTEN_FDS out of range"));
    }
    let names: Vec<&str> = names.as_deref().map_or(Vec::new(), |n| n.split(':').collect());
    let mut out = Vec::new();
    for i in 0..n {
        let fd = sys::take_inherited(LISTEN_FDS_START + i)?;
        let addr = local_listen(&fd)?;
        let name = names.get(i as usize).copied().unwrap_or("").to_string();
        out.push(Inherited { fd, name, addr });
    }
    Ok(out)
}

/// Takes descriptor `fd` (3 or more), which the process that started this one passed to it
/// besides its listening sockets and named in its environment (a binary upgrade's
/// readiness socket): close-on-exec from now on. Call it early, once per descriptor.
///
/// # Errors
/// `fd` is below 3 or not an open descriptor.
pub fn take_passed_fd(fd: i32) -> io::Result<OwnedFd> {
    if fd < LISTEN_FDS_START {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a passed descriptor is 3 or more"));
    }
    sys::take_inherited(fd)
}

/// The address a socket is bound to, as a [`Listen`].
///
/// # Errors
/// Not a TCP or Unix-domain socket with an address.
pub fn local_listen(fd: &OwnedFd) -> io::Result<Listen> {
    let addr = socket2::SockRef::from(fd).local_addr()?;
    if let Some(a) = addr.as_socket() {
        return Ok(Listen::Tcp(a));
    }
    match addr.as_pathname() {
        Some(p) => Ok(Listen::Unix(p.to_path_buf())),
        None => Err(io::Error::new(io::ErrorKind::InvalidInput, "inherited socket is not TCP or a named Unix socket")),
    }
}
