//! Running as a service: systemd readiness notifications (`sd_notify`), listeners taken
//! from socket activation or from the process being upgraded, dropping root privileges
//! after binding, and the binary upgrade (SIGUSR2).
//!
//! **Inherited sockets.** `LISTEN_FDS` sockets (see [`selvedge::server::listen_fds`]) take
//! the place of the configured listener with the same address; a socket named
//! `http:N`, `https:N` or `redirect:N` (the names an upgrading selvedge gives) takes the
//! place of listener N of that kind when that one's port is 0; any other socket is served
//! as cleartext HTTP, or as TLS (with the first TLS listener's certificates) if its name
//! starts with `https`, or redirects if it starts with `redirect`. `selvedge serve` (no
//! file) serves every inherited socket in place of its `--host`/`--port` address.
//!
//! **Upgrade.** The running process starts the binary it was started from (the file now on
//! disk at that path) with the same arguments, its listening sockets at descriptors 3… and
//! `LISTEN_FDS`/`LISTEN_FDNAMES`/`LISTEN_PID` set as systemd would (through `/bin/sh`, which
//! learns the new process's id before it `exec`s the binary), and one end of a socket
//! pair at the descriptor after them, named by `SELVEDGE_UPGRADE_NOTIFY`. The new process
//! writes `READY=1` on it once it serves; the old one then tells systemd the new main pid,
//! stops accepting, drains its connections and exits. If the new process exits, closes
//! its end or stays silent for 60 s, the old one goes on serving. The pair has no name:
//! no other process can take its place or speak on it.

use std::ffi::OsString;
use std::io;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use nix::unistd::{Gid, Group, Uid, User};
use selvedge::server::Inherited;
use selvedge::Listen;

use crate::config::Config;

/// The variable giving the descriptor of the old process's readiness socket, in an
/// upgraded process.
pub const UPGRADE_NOTIFY: &str = "SELVEDGE_UPGRADE_NOTIFY";

/// The readiness socket an upgrading process passed to this one (see the module's text),
/// taken once at start by [`take_upgrade_notify`].
static NOTIFY: std::sync::Mutex<Option<UnixStream>> = std::sync::Mutex::new(None);

/// In a process started by an upgrade: takes the readiness socket the old process passed
/// (its descriptor is in [`UPGRADE_NOTIFY`]) and removes the variable. Call it early, before
/// other threads start. `Ok(true)`: this process was started by an upgrade.
///
/// # Errors
/// The variable does not name a passed descriptor.
pub fn take_upgrade_notify() -> io::Result<bool> {
    let Some(v) = std::env::var_os(UPGRADE_NOTIFY) else { return Ok(false) };
    std::env::remove_var(UPGRADE_NOTIFY);
    let fd: i32 = v
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{UPGRADE_NOTIFY} is not a descriptor")))?;
    let fd = selvedge::server::take_passed_fd(fd)?;
    *NOTIFY.lock().unwrap_or_else(|e| e.into_inner()) = Some(UnixStream::from(fd));
    Ok(true)
}

/// systemd notifications; nothing happens outside systemd (no `NOTIFY_SOCKET`).
pub mod notify {
    use sd_notify::NotifyState;

    fn send(states: &[NotifyState<'_>]) {
        if let Err(e) = sd_notify::notify(false, states) {
            tracing::warn!("sd_notify: {e}");
        }
    }

    /// `READY=1` (and `STATUS=`): every listener is bound and served.
    pub fn ready(status: &str) {
        send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `RELOADING=1` with the monotonic time, before a reload.
    pub fn reloading() {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => send(&[NotifyState::Reloading, now]),
            Err(_) => send(&[NotifyState::Reloading]),
        }
    }

    /// `STOPPING=1`: shutdown has begun.
    pub fn stopping() {
        send(&[NotifyState::Stopping]);
    }

    /// `MAINPID=`: the upgraded process takes over as the service's main process.
    pub fn main_pid(pid: u32) {
        send(&[NotifyState::MainPid(pid)]);
    }
}

/// The user and group to run as.
#[derive(Debug, Clone)]
pub struct Identity {
    user: User,
    gid: Gid,
    group_name: String,
}

/// Looks up `[server] user` / `group` (a name or a numeric id). `None`: nothing to change
/// (no user given, or already running as that user and group).
///
/// # Errors
/// An unknown user or group, or a user given while not running as root.
pub fn identity(user: Option<&str>, group: Option<&str>) -> Result<Option<Identity>, String> {
    let Some(name) = user else {
        return match group {
            Some(g) => Err(format!("group {g:?} without a user: set [server] user too")),
            None => Ok(None),
        };
    };
    let found = match name.parse::<u32>() {
        Ok(id) => User::from_uid(Uid::from_raw(id)),
        Err(_) => User::from_name(name),
    };
    let user = found.map_err(|e| format!("user {name:?}: {e}"))?.ok_or_else(|| format!("no user {name:?}"))?;
    let (gid, group_name) = match group {
        None => {
            let g = Group::from_gid(user.gid).ok().flatten().map_or_else(|| user.gid.to_string(), |g| g.name);
            (user.gid, g)
        }
        Some(g) => {
            let found = match g.parse::<u32>() {
                Ok(id) => Group::from_gid(Gid::from_raw(id)),
                Err(_) => Group::from_name(g),
            };
            let grp = found.map_err(|e| format!("group {g:?}: {e}"))?.ok_or_else(|| format!("no group {g:?}"))?;
            (grp.gid, grp.name)
        }
    };
    if Uid::current() == user.uid && Gid::current() == gid {
        return Ok(None);
    }
    if !Uid::effective().is_root() {
        return Err(format!("cannot switch to user {:?}: not running as root", user.name));
    }
    Ok(Some(Identity { user, gid, group_name }))
}

impl Identity {
    /// Drops to this user and group for the whole process: supplementary groups, group,
    /// then user. glibc's `setgroups`/`setgid`/`setuid` apply to every thread of the process
    /// (the raw system calls change only the calling thread), so threads started before
    /// (the timeout manager, the log flusher) change too; the check reads them back.
    ///
    /// # Errors
    /// A call failed, or root privileges could be regained.
    pub fn drop_privileges(&self) -> io::Result<()> {
        let name = std::ffi::CString::new(self.user.name.clone()).map_err(io::Error::other)?;
        nix::unistd::initgroups(&name, self.gid).or_else(|_| nix::unistd::setgroups(&[self.gid]))?;
        nix::unistd::setgid(self.gid)?;
        nix::unistd::setuid(self.user.uid)?;
        if nix::unistd::setuid(Uid::from_raw(0)).is_ok() && !self.user.uid.is_root() {
            return Err(io::Error::other("root privileges could be regained after setuid"));
        }
        Ok(())
    }

    /// Gives the directory tree at `root` to this user and group (files the server writes
    /// after dropping root, such as ACME's storage, made by root before the drop).
    ///
    /// # Errors
    /// A file could not be changed.
    pub fn give_tree(&self, root: &Path) -> io::Result<()> {
        std::os::unix::fs::chown(root, Some(self.user.uid.as_raw()), Some(self.gid.as_raw()))?;
        if std::fs::symlink_metadata(root)?.is_dir() {
            for e in std::fs::read_dir(root)? {
                let p = e?.path();
                if !std::fs::symlink_metadata(&p)?.file_type().is_symlink() {
                    self.give_tree(&p)?;
                }
            }
        }
        Ok(())
    }

    /// `user:group` for messages.
    pub fn describe(&self) -> String {
        format!("{}:{}", self.user.name, self.group_name)
    }
}

/// Inherited sockets sorted by the listener they serve.
#[derive(Debug, Default)]
pub struct Assigned {
    /// For each `cfg.listen[i]`: the sockets that replace it (empty: bind it).
    pub http: Vec<Vec<OwnedFd>>,
    /// For each `cfg.tls[i]`.
    pub tls: Vec<Vec<OwnedFd>>,
    /// For each `cfg.redirect[i]`.
    pub redirect: Vec<Vec<OwnedFd>>,
    /// Sockets matching no listener, by kind.
    pub extra_http: Vec<OwnedFd>,
    /// Unmatched sockets named `https…`.
    pub extra_tls: Vec<OwnedFd>,
    /// Unmatched sockets named `redirect…`.
    pub extra_redirect: Vec<OwnedFd>,
}

/// Sorts `inherited` over the listeners of `cfg` (see the module docs).
pub fn assign(cfg: &Config, inherited: Vec<Inherited>) -> Assigned {
    let mut a = Assigned {
        http: cfg.listen.iter().map(|_| Vec::new()).collect(),
        tls: cfg.tls.iter().map(|_| Vec::new()).collect(),
        redirect: cfg.redirect.iter().map(|_| Vec::new()).collect(),
        ..Assigned::default()
    };
    let tls_addrs: Vec<Listen> = cfg.tls.iter().map(|t| t.addr.clone()).collect();
    for inh in inherited {
        let (kind, index) = match inh.name.split_once(':') {
            Some((k, i)) => (k, i.parse::<usize>().ok()),
            None => (inh.name.as_str(), None),
        };
        let lists: [(&str, &[Listen]); 3] = [("http", &cfg.listen), ("https", &tls_addrs), ("redirect", &cfg.redirect)];
        let mut target = None;
        // The same address first, then the named listener if its port is 0.
        'find: for (k, (_, list)) in lists.iter().enumerate() {
            for (i, l) in list.iter().enumerate() {
                if *l == inh.addr {
                    target = Some((k, i));
                    break 'find;
                }
            }
        }
        if target.is_none() {
            if let (Some((k, (_, list))), Some(i)) = (lists.iter().enumerate().find(|(_, (n, _))| *n == kind), index) {
                let any_port = matches!((list.get(i), &inh.addr), (Some(Listen::Tcp(c)), Listen::Tcp(s))
                    if c.port() == 0 && c.ip() == s.ip());
                if any_port {
                    target = Some((k, i));
                }
            }
        }
        // `selvedge serve` takes every socket in place of its own address.
        if target.is_none() && cfg.file.is_none() {
            target = match (cfg.listen.is_empty(), cfg.tls.is_empty()) {
                (false, _) => Some((0, 0)),
                (true, false) => Some((1, 0)),
                (true, true) => None,
            };
        }
        match target {
            Some((0, i)) => a.http[i].push(inh.fd),
            Some((1, i)) => a.tls[i].push(inh.fd),
            Some((_, i)) => a.redirect[i].push(inh.fd),
            None if kind.starts_with("https") => a.extra_tls.push(inh.fd),
            None if kind.starts_with("redirect") => a.extra_redirect.push(inh.fd),
            None => a.extra_http.push(inh.fd),
        }
    }
    a
}

/// In a process started by an upgrade: tells the old process that this one serves (on
/// the socket [`take_upgrade_notify`] took), and closes it.
pub fn tell_upgrading_parent() {
    let Some(mut sock) = NOTIFY.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    if let Err(e) = sock.write_all(b"READY=1") {
        tracing::warn!("upgrade: cannot tell the old process that this one is ready: {e}");
    }
}

/// A new process started by [`upgrade`], not yet ready.
#[derive(Debug)]
pub struct Upgrade {
    /// The new process.
    pub child: Child,
    /// Our end of the readiness pair.
    ready: UnixStream,
}

/// Starts `exe` with `args` on the listening sockets `fds` (each with its name).
///
/// # Errors
/// The readiness socket or the process could not be made.
pub fn upgrade(exe: &Path, args: &[OsString], fds: Vec<(OwnedFd, String)>) -> io::Result<Upgrade> {
    let (ready, theirs) = UnixStream::pair()?;
    ready.set_nonblocking(true)?;
    let names: Vec<String> = fds.iter().map(|(_, n)| n.clone()).collect();
    let count = fds.len();
    let notify_fd = selvedge::server::LISTEN_FDS_START + count as i32;
    let mut mappings: Vec<FdMapping> = fds
        .into_iter()
        .enumerate()
        .map(|(i, (fd, _))| FdMapping { parent_fd: fd, child_fd: selvedge::server::LISTEN_FDS_START + i as i32 })
        .collect();
    mappings.push(FdMapping { parent_fd: theirs.into(), child_fd: notify_fd });
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg("LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args)
        .env("LISTEN_FDS", count.to_string())
        .env("LISTEN_FDNAMES", names.join(":"))
        .env(UPGRADE_NOTIFY, notify_fd.to_string())
        .env_remove("LISTEN_PID")
        .stdin(Stdio::null());
    cmd.fd_mappings(mappings).map_err(io::Error::other)?;
    let child = cmd.spawn()?;
    Ok(Upgrade { child, ready })
}

/// How an upgrade ended.
#[derive(Debug)]
pub enum UpgradeOutcome {
    /// The new process serves.
    Ready(u32),
    /// It exited first (with this status).
    Exited(std::process::ExitStatus),
    /// It said nothing in time (it was killed).
    TimedOut,
}

impl Upgrade {
    /// Waits (polling every 50 ms, up to `limit`) until the new process is ready or exits.
    pub async fn wait(mut self, limit: Duration) -> UpgradeOutcome {
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 64];
        let mut got = 0;
        let mut open = true;
        loop {
            while open && got < buf.len() {
                match self.ready.read(&mut buf[got..]) {
                    // Closed without a word (the new process failed): its exit follows.
                    Ok(0) => open = false,
                    Ok(n) => got += n,
                    Err(_) => break,
                }
            }
            if buf[..got].windows(7).any(|w| w == b"READY=1") {
                return UpgradeOutcome::Ready(self.child.id());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return UpgradeOutcome::Exited(st);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return UpgradeOutcome::TimedOut;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The descriptor numbers of `fds`, for messages.
pub fn describe_fds(fds: &[(OwnedFd, String)]) -> String {
    fds.iter().map(|(fd, n)| format!("{}={n}", fd.as_raw_fd())).collect::<Vec<_>>().join(" ")
}
