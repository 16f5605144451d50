//! Test support: the `selvedge` binary run as a process on 127.0.0.1:0, temp sites, and a
//! blocking HTTP/1.1 client over real sockets.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub mod fpm;
pub mod pki;

pub const BIN: &str = env!("CARGO_BIN_EXE_selvedge");

/// The binary servers are started from: this build's, or `SELVEDGE_TEST_BIN` (to run a
/// test against another build, such as the last release, and see it fail there).
pub fn bin() -> String {
    std::env::var("SELVEDGE_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// A TCP port free now, for a process that binds it later (a restarted upstream, Redis,
/// nginx, a second server on the same port). Taken below the kernel's ephemeral range
/// (32768 and up by default), which the test's own outgoing connections draw from, so none
/// of them can be given the port meanwhile; above 24000, clear of the ACME tests' fixed
/// ports; never the same twice in one test process.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    const BASE: u32 = 24_000;
    const SPAN: u32 = 8_000;
    let start = std::process::id().wrapping_mul(7919) % SPAN;
    loop {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(i < SPAN, "no free port left between {BASE} and {}", BASE + SPAN);
        let port = (BASE + (start + i) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A fresh temp directory (removed when dropped).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("selvedge-it-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn write(&self, rel: &str, data: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&p, data).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the variables the server reads from its environment (`SELVEDGE_*`, systemd's,
/// `RUST_LOG`), so that the caller's environment does not change what a test runs; but for
/// `SELVEDGE_IO`, which is how the suite runs under each I/O model.
pub fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k == "SELVEDGE_IO" {
            continue;
        }
        if k.starts_with("SELVEDGE_") || k.starts_with("LISTEN_") || k == "NOTIFY_SOCKET" || k == "RUST_LOG" {
            cmd.env_remove(&*k);
        }
    }
}

/// A running `selvedge` process.
pub struct Srv {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Srv {
    /// Runs `selvedge ARGS` and waits for its startup line.
    pub fn start(args: &[&str]) -> Srv {
        Srv::try_start(args).unwrap_or_else(|lines| panic!("server did not start: {lines:?}"))
    }

    pub fn try_start(args: &[&str]) -> Result<Srv, Vec<String>> {
        let mut cmd = Command::new(bin());
        clean_env(&mut cmd);
        cmd.args(args);
        Srv::try_spawn(cmd)
    }

    /// Runs `cmd` (stdin and stdout closed, stderr read) and waits for its startup line.
    pub fn spawn(cmd: Command) -> Srv {
        Srv::try_spawn(cmd).unwrap_or_else(|lines| panic!("server did not start: {lines:?}"))
    }

    pub fn try_spawn(mut cmd: Command) -> Result<Srv, Vec<String>> {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let err = BufReader::new(child.stderr.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l2 = lines.clone();
        std::thread::spawn(move || {
            for line in err.lines() {
                let Ok(line) = line else { break };
                // Recorded before the address is announced: a test may read it at once.
                l2.lock().unwrap().push(line.clone());
                // The first URL of the line (a proxy route's upstream may follow it).
                let at = match (line.find("http://"), line.find("https://")) {
                    (Some(h), Some(s)) if s < h => Some(s + 8),
                    (Some(h), _) => Some(h + 7),
                    (None, s) => s.map(|s| s + 8),
                };
                if let Some(i) = at {
                    let rest = &line[i..];
                    let addr = &rest[..rest.find('/').unwrap_or(rest.len())];
                    let _ = tx.send(addr.parse::<SocketAddr>().ok());
                }
            }
            let _ = tx.send(None);
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(addr)) => Ok(Srv { child, addr, stderr: lines }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(50));
                Err(lines.lock().unwrap().clone())
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        kill(sig, self.pid());
    }

    /// Whether a stderr line so far contains `text`.
    pub fn said(&self, text: &str) -> bool {
        self.stderr.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Waits up to `secs` for the process to exit; its exit code.
    pub fn wait_exit(&mut self, secs: u64) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Open file descriptors of the server process that are regular files (not sockets,
    /// pipes or the event fds).
    pub fn open_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.display().to_string();
                if t.starts_with('/') && !t.starts_with("/dev/") {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Every descriptor of the server process with what it points at; sockets also get
    /// their TCP state from `/proc/PID/net/tcp{,6}` (for failure messages).
    #[allow(dead_code)]
    pub fn describe_fds(&self) -> Vec<String> {
        let pid = self.pid();
        let mut states = std::collections::HashMap::new();
        for t in ["tcp", "tcp6"] {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/net/{t}")) {
                for l in s.lines().skip(1) {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    if f.len() > 9 {
                        states.insert(f[9].to_string(), format!("{} {}->{} st={}", t, f[1], f[2], f[3]));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
            let fd = e.file_name().to_string_lossy().to_string();
            let t = std::fs::read_link(e.path()).map(|t| t.display().to_string()).unwrap_or_default();
            let extra = t
                .strip_prefix("socket:[")
                .and_then(|i| states.get(i.trim_end_matches(']')))
                .cloned()
                .unwrap_or_default();
            out.push(format!("{fd}={t} {extra}"));
        }
        out
    }

    pub fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().count()
    }

    /// SIGTERM and wait for exit; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn get(&self, path: &str) -> Resp {
        request(self.addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"))
    }

    pub fn get_h(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut r = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
        for (n, v) in headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        r.push_str("\r\n");
        request(self.addr, &r)
    }

    /// [`Srv::get_h`], reading the response's head only (a big or slow body is not
    /// waited for).
    pub fn head_of(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut r = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n");
        for (n, v) in headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        r.push_str("\r\n");
        let mut s = connect(self.addr);
        s.write_all(r.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let mut piece = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut piece).unwrap();
            assert!(n > 0, "the connection closed before a response head");
            buf.extend_from_slice(&piece[..n]);
        }
        parse(&buf, false).expect("a response head")
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends signal `sig` (`TERM`, `HUP`...) to process `pid`.
pub fn kill(sig: &str, pid: u32) {
    let ok = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// Whether `prog` is on the PATH.
pub fn have(prog: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {prog}")).output().is_ok_and(|o| o.status.success())
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends raw bytes (one request, `Connection: close`) and reads the whole answer.
pub fn request(addr: SocketAddr, raw: &str) -> Resp {
    let mut s = connect(addr);
    s.write_all(raw.as_bytes()).unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    parse(&buf, !raw.starts_with("HEAD ")).expect("a response")
}

/// Parses one response from `buf` (`with_body`: read `Content-Length` bytes of body).
pub fn parse(buf: &[u8], with_body: bool) -> Option<Resp> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    if with_body {
        if let Some(n) = headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()) {
            body.truncate(n);
        }
    } else {
        body.clear();
    }
    Some(Resp { status, headers, body })
}

/// Waits until `f` holds (or panics after `secs`).
pub fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A test that needs `tool`, which is not installed: under `./scripts/test` (which installs
/// every tool, `SELVEDGE_REQUIRE_TOOLS=1`) and in CI that is a failure; elsewhere the test
/// says so and is skipped.
pub fn missing_tool(tool: &str, test: &str) {
    let required =
        std::env::var_os("SELVEDGE_REQUIRE_TOOLS").is_some_and(|v| v == "1") || std::env::var_os("CI").is_some();
    assert!(!required, "{test}: {tool} is not installed (./scripts/setup installs it)");
    eprintln!("\n!!! {test}: {tool} is not installed (./scripts/setup installs it): SKIPPED !!!\n");
}

/// The admin listener's address, from the startup lines.
pub fn admin_addr(srv: &Srv) -> SocketAddr {
    eventually(10, "the admin listener's line", || {
        srv.stderr.lock().unwrap().iter().any(|l| l.contains("admin listener on http://"))
    });
    let lines = srv.stderr.lock().unwrap().clone();
    let line = lines.iter().find(|l| l.contains("admin listener on http://")).expect("admin line");
    let rest = &line[line.find("http://").unwrap() + 7..];
    rest[..rest.find('/').unwrap()].parse().unwrap()
}
