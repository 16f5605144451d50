//! Test support: servers on 127.0.0.1:0 and a byte-exact blocking client.
#![allow(dead_code)]

pub mod app;
pub mod h2;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use selvedge::{App, Server, ServerHandle, Settings, Workers};

/// Settings for tests: one worker, short timeouts.
pub fn settings() -> Settings {
    Settings { workers: Workers::PerCore(1), ..Settings::default() }
}

pub struct TestServer {
    pub handle: Option<ServerHandle>,
    pub addr: SocketAddr,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
            h.join();
        }
    }
}

pub fn start<A: App>(settings: Settings, app: A) -> TestServer {
    let handle = Server::new(settings).bind("127.0.0.1:0".parse::<SocketAddr>().unwrap()).start(app).unwrap();
    let addr = handle.tcp_addr().unwrap();
    TestServer { handle: Some(handle), addr }
}

/// How many connections a test can hold, up to `want`: each takes a descriptor on both
/// ends, in this one process. The soft limit is raised to the hard one first.
#[allow(dead_code)] // not every test file holds many connections
pub fn connection_budget(want: usize) -> usize {
    // SAFETY: getrlimit/setrlimit with a valid, initialized struct.
    unsafe {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
            return want.min((r.rlim_cur as usize).saturating_sub(300) / 2);
        }
    }
    want.min(400)
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads until the peer closes (or 10 s pass); returns everything and whether it closed.
pub fn read_to_close(s: &mut TcpStream) -> (String, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&out).into_owned(), true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&out).into_owned(), true)
            }
            Err(_) => return (String::from_utf8_lossy(&out).into_owned(), false),
        }
    }
}

/// Sends `req` on a new connection and reads until close.
pub fn exchange(addr: SocketAddr, req: &[u8]) -> (String, bool) {
    let mut s = connect(addr);
    s.write_all(req).unwrap();
    read_to_close(&mut s)
}

/// Reads exactly `n` complete responses (Content-Length or chunked framing).
pub fn read_responses(s: &mut TcpStream, n: usize) -> Vec<Resp> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut tmp = [0u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(10);
    while out.len() < n {
        if let Some((r, used)) = parse_response(&buf) {
            buf.drain(..used);
            out.push(r);
            continue;
        }
        assert!(Instant::now() < deadline, "timed out; have {:?}", String::from_utf8_lossy(&buf));
        let k = s.read(&mut tmp).unwrap();
        assert!(k > 0, "closed early; have {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&tmp[..k]);
    }
    assert!(buf.is_empty(), "extra bytes: {:?}", String::from_utf8_lossy(&buf));
    out
}

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

/// Parses one response from the front of `buf` (responses to GET/POST, not HEAD).
pub fn parse_response(buf: &[u8]) -> Option<(Resp, usize)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_string(), v.trim().to_string())
        })
        .collect();
    let get = |n: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(n)).map(|(_, v)| v.clone());
    if (100..200).contains(&status) {
        return Some((Resp { status, headers, body: Vec::new() }, end));
    }
    if let Some(cl) = get("content-length") {
        let cl: usize = cl.parse().unwrap();
        if buf.len() < end + cl {
            return None;
        }
        return Some((Resp { status, headers, body: buf[end..end + cl].to_vec() }, end + cl));
    }
    if get("transfer-encoding").is_some() {
        // The chunks' places first, and the body copied only once it is all there: a large
        // body read in many pieces is not copied again at every piece.
        let mut pos = end;
        let mut chunks = Vec::new();
        loop {
            let le = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
            let size = usize::from_str_radix(std::str::from_utf8(&buf[pos..le]).unwrap(), 16).unwrap();
            if size == 0 {
                if buf.len() < le + 4 {
                    return None;
                }
                let body = chunks.iter().flat_map(|&(at, n)| &buf[at..at + n]).copied().collect();
                return Some((Resp { status, headers, body }, le + 4));
            }
            if buf.len() < le + 2 + size + 2 {
                return None;
            }
            chunks.push((le + 2, size));
            pos = le + 2 + size + 2;
        }
    }
    Some((Resp { status, headers, body: Vec::new() }, end))
}

/// Waits for a condition for up to `secs`.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
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
