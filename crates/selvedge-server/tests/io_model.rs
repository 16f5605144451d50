//! `[server] io`: the binary on io_uring serves pages, pipelined requests, large files to a
//! slow reader and HTTP/2, and takes connections with accepts on the ring that hold the
//! connection limits; refused io_uring (a seccomp filter, as containers have) falls
//! back to epoll and says so. The rest of the suite runs under either model with
//! `SELVEDGE_IO` (scripts/test runs it under both).

mod common;

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{connect, Srv, TempDir};

/// A site (a page and an 8 MiB file) and its configuration; `io`: the `[server] io` line.
fn config(d: &TempDir, io: &str) -> std::path::PathBuf {
    d.write("site/index.html", "hello from the ring\n");
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(d.0.join("site/big.bin"), &big).unwrap();
    d.write(
        "selvedge.toml",
        format!(
            "[server]\nworkers = 2\n{io}\n[[listen]]\nport = 0\n[log]\nlevel = \"debug\"\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.0.join("site").display()
        ),
    )
}

fn cmd(cfg: &std::path::Path) -> Command {
    let mut c = Command::new(common::bin());
    common::clean_env(&mut c);
    c.env_remove("SELVEDGE_IO");
    c.args(["--config", cfg.to_str().unwrap()]);
    c
}

/// Whether this process may make an io_uring: `io_uring_setup` with no entries fails with
/// `EINVAL` where it may, `ENOSYS` or `EPERM` where the kernel or a filter refuses.
fn uring_allowed() -> bool {
    // `struct io_uring_params`, zeroed: 120 bytes.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup with 0 entries reads the zeroed parameters (which outlive the
    // call) and fails with EINVAL before it makes anything.
    let r = unsafe { libc::syscall(libc::SYS_io_uring_setup, 0u32, params.as_mut_ptr()) };
    let err = std::io::Error::last_os_error().raw_os_error();
    r < 0 && err == Some(libc::EINVAL)
}

/// Makes `io_uring_setup` fail with `EPERM` in the process about to exec, as Docker's
/// default seccomp profile does.
fn refuse_io_uring() -> std::io::Result<()> {
    const IO_URING_SETUP: u32 = 425; // x86_64 and aarch64 alike
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter { code: 0x20, jt: 0, jf: 0, k: 0 },
        // A == io_uring_setup ? next : skip one
        libc::sock_filter { code: 0x15, jt: 0, jf: 1, k: IO_URING_SETUP },
        libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x0005_0000 | libc::EPERM as u32 },
        libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 },
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: prctl with integer arguments, and a pointer to a filter program that lives
    // through the call (the kernel copies it).
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const libc::sock_fprog) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn read_response(s: &mut std::net::TcpStream, body_len: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if buf.len() >= end + 4 + body_len {
                let rest = buf.split_off(end + 4 + body_len);
                assert!(rest.is_empty(), "bytes past the response");
                return buf;
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed mid-response: {:?}", String::from_utf8_lossy(&buf[..buf.len().min(200)]));
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn on_io_uring_pages_pipelines_big_files_to_slow_readers_and_http2_are_served() {
    if !uring_allowed() {
        eprintln!("SKIPPED: io_uring is refused here");
        return;
    }
    let d = TempDir::new("io-uring");
    let srv = Srv::spawn(cmd(&config(&d, "io = \"uring\"")));
    assert!(srv.said("I/O on io_uring"), "{:?}", srv.stderr.lock().unwrap());

    // Three requests in one write, on one connection: three answers, in order.
    let mut s = connect(srv.addr);
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /index.html HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    for want in ["200", "404", "200"] {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).unwrap(), 1);
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with(&format!("HTTP/1.1 {want}")), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .unwrap();
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).unwrap();
    }
    // Many keep-alive requests on it, one at a time.
    for _ in 0..200 {
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let r = read_response(&mut s, 20);
        assert!(r.ends_with(b"hello from the ring\n"));
    }

    // An 8 MiB file to a reader that stops for a while: every byte, in order.
    let want = std::fs::read(d.0.join("site/big.bin")).unwrap();
    let mut slow = connect(srv.addr);
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut first = [0u8; 4096];
    let n = slow.read(&mut first).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut got = first[..n].to_vec();
    while got.len() < want.len() + 100 {
        let mut chunk = [0u8; 65536];
        let n = slow.read(&mut chunk).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() == end + 4 + want.len() {
                assert!(got[end + 4..] == want[..], "the file's bytes");
                break;
            }
        }
    }
    // The same connection goes on.
    slow.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert!(read_response(&mut slow, 20).starts_with(b"HTTP/1.1 200"));

    // A client that closes mid-answer and 300 connections at once leave nothing behind.
    for _ in 0..20 {
        let mut c = connect(srv.addr);
        c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let _ = c.read(&mut [0u8; 100]);
    }
    let many: Vec<_> = (0..300).map(|_| connect(srv.addr)).collect();
    for mut c in many {
        c.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).unwrap();
        assert!(out.starts_with(b"HTTP/1.1 200"));
    }
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", srv.pid())).unwrap().count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds() > 40 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(fds() <= 40, "{} descriptors open after the connections closed", fds());

    // HTTP/2 with prior knowledge (curl), when curl is here.
    if common::have("curl") {
        let out = Command::new("curl")
            .args([
                "-s",
                "--http2-prior-knowledge",
                "-o",
                "/dev/null",
                "-w",
                "%{http_version} %{http_code} %{size_download}",
            ])
            .arg(format!("http://{}/big.bin", srv.addr))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("2 200 {}", want.len()));
    }
}

/// The listener's accepts on io_uring: over `max_connections` a connection waits in the
/// backlog, unanswered, and is served once one closes, and a burst costs the server no
/// descriptor beyond the room it has; `max_connections_per_ip`
/// sees the peer `getpeername` gave; a burst of short connections is all served and leaves
/// no descriptor behind; a stop with connections waiting ends at once.
#[test]
fn on_io_uring_accepts_hold_the_connection_limits() {
    if !uring_allowed() {
        eprintln!("SKIPPED: io_uring is refused here");
        return;
    }
    let d = TempDir::new("io-accept");
    config(&d, "");
    let cfg = d.write(
        "limits.toml",
        format!(
            "[server]\nworkers = 1\nio = \"uring\"\nmax_connections_per_ip = 3\n[limits]\nmax_connections = 4\n\
             [[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.0.join("site").display()
        ),
    );

    // A burst of idle connections at a server with room for 4: it takes 4, and the rest
    // wait in the backlog, not in the server's descriptors.
    let burst = d.write(
        "burst.toml",
        format!(
            "[server]\nworkers = 1\nio = \"uring\"\n[limits]\nmax_connections = 4\n[[listen]]\nport = 0\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            d.0.join("site").display()
        ),
    );
    let b_srv = Srv::spawn(cmd(&burst));
    let b_fds = || std::fs::read_dir(format!("/proc/{}/fd", b_srv.pid())).unwrap().count();
    // (Once it has served, so every worker has made its ring and reactor.)
    assert_eq!(b_srv.get("/index.html").status, 200);
    std::thread::sleep(Duration::from_millis(200));
    let idle = b_fds();
    let conns: Vec<_> = (0..100).map(|_| connect(b_srv.addr)).collect();
    std::thread::sleep(Duration::from_millis(400));
    assert!(b_fds() <= idle + 4 + 2, "{} descriptors after a burst of 100 at room for 4 ({idle} idle)", b_fds());
    drop((conns, b_srv));

    let srv = Srv::spawn(cmd(&cfg));
    assert!(srv.said("I/O on io_uring"), "{:?}", srv.stderr.lock().unwrap());
    let ask = |s: &mut std::net::TcpStream| {
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        read_response(s, 20)
    };

    // Three from 127.0.0.1 are served; a fourth from the same address is closed at accept.
    let mut held: Vec<_> = (0..3).map(|_| connect(srv.addr)).collect();
    for s in &mut held {
        assert!(ask(s).starts_with(b"HTTP/1.1 200"));
    }
    let mut over_ip = connect(srv.addr);
    over_ip.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = over_ip.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut b = [0u8; 64];
    let r = over_ip.read(&mut b);
    assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset), "{r:?}");

    // From 127.0.0.2 (its own per-address count): the fourth connection fills the server;
    // a fifth waits unanswered until one of the first closes.
    let from2 = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&"127.0.0.2:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
        s.connect(&srv.addr.into()).unwrap();
        std::net::TcpStream::from(s)
    };
    let mut fourth = from2();
    assert!(ask(&mut fourth).starts_with(b"HTTP/1.1 200"));
    let mut fifth = from2();
    fifth.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    fifth.set_read_timeout(Some(Duration::from_millis(700))).unwrap();
    assert!(fifth.read(&mut b).is_err(), "a connection over max_connections was served");
    let fds = || std::fs::read_dir(format!("/proc/{}/fd", srv.pid())).unwrap().count();
    let full = fds();
    let more: Vec<_> = (0..100).map(|_| from2()).collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(fds() <= full + 16, "{} descriptors with the server full, {full} before 100 more connected", fds());
    drop(held.pop());
    fifth.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(b"hello from the ring\n") {
        let n = fifth.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before its answer");
        got.extend_from_slice(&chunk[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"));
    drop((held, fourth, fifth, over_ip, more));

    // 500 short connections, in rounds of three (the per-address limit): all served.
    for _ in 0..500 / 3 {
        let conns: Vec<_> = (0..3).map(|_| connect(srv.addr)).collect();
        for mut c in conns {
            c.write_all(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
            let mut out = Vec::new();
            c.read_to_end(&mut out).unwrap();
            assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out));
        }
    }
    let base = fds();
    common::eventually(10, "the connections' descriptors closed", || fds() <= 30);

    // Connections waiting in the backlog do not hold up a stop.
    let waiting: Vec<_> = (0..6).map(|_| from2()).collect();
    let mut srv = srv;
    let t = Instant::now();
    srv.signal("TERM");
    assert_eq!(srv.wait_exit(10), Some(0));
    assert!(t.elapsed() < Duration::from_secs(5), "stop took {:?} (descriptors before: {base})", t.elapsed());
    drop(waiting);
}

#[test]
fn refused_io_uring_falls_back_to_epoll_and_says_so() {
    let d = TempDir::new("io-refused");
    let mut c = cmd(&config(&d, "io = \"uring\""));
    // SAFETY: the closure only makes system calls (prctl), as `pre_exec` requires.
    unsafe { c.pre_exec(refuse_io_uring) };
    let srv = Srv::spawn(c);
    // Said right after the startup line.
    common::eventually(5, "the fallback said", || srv.said("using epoll"));
    let lines = srv.stderr.lock().unwrap().clone();
    assert!(lines.iter().any(|l| l.contains("io_uring is not available") && l.contains("using epoll")), "{lines:?}");
    assert!(!srv.said("I/O on io_uring"));
    let r = srv.get("/index.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello from the ring\n");
}

#[test]
fn epoll_is_the_default_and_says_nothing_of_io_uring() {
    let d = TempDir::new("io-default");
    let cfg = config(&d, "");
    let srv = Srv::spawn(cmd(&cfg));
    assert!(!srv.said("io_uring"), "{:?}", srv.stderr.lock().unwrap());
    assert_eq!(srv.get("/index.html").status, 200);
}
