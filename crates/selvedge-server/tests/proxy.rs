//! Reverse-proxy routes, with real processes: the `selvedge` binary as the proxy, in front
//! of a second `selvedge serve DIR`, of `python3 -m http.server`, and of a scripted raw-socket
//! Python upstream (`proxy_upstream.py`) that records every byte it receives.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{connect, free_port, parse, request, Resp, Srv, TempDir};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/proxy_upstream.py");

/// The scripted upstream (see `proxy_upstream.py`).
struct Py {
    child: Child,
    port: u16,
    capture: PathBuf,
}

impl Py {
    /// Starts it on `port` (0: any) or a Unix socket path, recording into `dir`.
    fn start(dir: &TempDir, at: &str) -> Py {
        let capture = dir.path().join(format!("capture-{}.bin", at.replace('/', "_")));
        let mut child = Command::new("python3")
            .arg(SCRIPT)
            .arg(at)
            .arg(&capture)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("upstream did not start: {line:?}"));
        Py { child, port, capture }
    }

    /// Everything it received so far.
    fn captured(&self) -> Vec<u8> {
        std::fs::read(&self.capture).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy: one worker, the given routes on the default host.
fn proxy(d: &TempDir, routes: &str) -> Srv {
    let cfg = d.write("proxy.toml", format!("[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n{routes}"));
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

fn route(path: &str, table: &str) -> String {
    format!("[[vhost.route]]\npath = \"{path}\"\nproxy = {{ {table} }}\n")
}

/// Sends `raw` then reads to EOF (or the 10 s read timeout).
fn raw(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    buf
}

fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out = Command::new("curl").args(["-sS", "--max-time", "20"]).args(args).output().expect("curl");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stderr).into_owned(), out.stdout)
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

fn post(addr: SocketAddr, path: &str, body: &[u8]) -> Resp {
    let mut s = connect(addr);
    write!(s, "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
        .unwrap();
    s.write_all(body).unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let mut r = parse(&buf, false).expect("a response");
    r.body = body_of(&buf);
    r
}

/// Decodes a chunked body; `None` if it is not complete.
fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let i = b.windows(2).position(|w| w == b"\r\n")?;
        let n = usize::from_str_radix(std::str::from_utf8(&b[..i]).ok()?.split(';').next()?, 16).ok()?;
        b = &b[i + 2..];
        if n == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..n)?);
        b = b.get(n + 2..)?;
    }
}

/// The body of a raw response (chunked or not).
fn body_of(resp: &[u8]) -> Vec<u8> {
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    if contains(&resp[..end], "transfer-encoding: chunked") {
        dechunk(&resp[end..]).expect("complete chunked body")
    } else {
        resp[end..].to_vec()
    }
}

fn pseudo_random(n: usize) -> Vec<u8> {
    let mut x = 0x2545f4914f6cdd1du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn in_front_of_selvedge_get_head_and_h2() {
    let site = TempDir::new("px-site");
    site.write("index.html", "<h1>upstream</h1>\n");
    let big = pseudo_random(3 << 20);
    site.write("big.bin", &big);
    let up = Srv::start(&["serve", site.path().to_str().unwrap(), "--port", "0", "--workers", "1"]);
    let d = TempDir::new("px-sv");
    let px = proxy(&d, &route("/", &format!("upstream = \"http://{}\"", up.addr)));

    let r = px.get("/index.html");
    assert_eq!((r.status, r.text().as_str()), (200, "<h1>upstream</h1>\n"));
    assert!(r.header("etag").is_some(), "{r:?}");
    assert_eq!(r.header("server"), Some("selvedge"));
    assert_eq!(px.get("/missing").status, 404);

    // A 3 MB file is streamed (chunked to this HTTP/1.1 client).
    let resp = raw(px.addr, b"GET /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(resp.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&resp[..100]));
    assert!(body_of(&resp) == big, "big body differs");

    // HEAD keeps the upstream's length and sends no body.
    let resp = raw(px.addr, b"HEAD /big.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let h = parse(&resp, false).unwrap();
    assert_eq!((h.status, h.header("content-length")), (200, Some("3145728")), "{h:?}");
    assert!(resp.ends_with(b"\r\n\r\n"), "HEAD answered with a body");

    // An HTTP/2 client through the proxy.
    let out = d.path().join("h2.bin");
    let url = format!("http://{}/big.bin", px.addr);
    let (_, w) =
        curl(&["--http2-prior-knowledge", "-o", out.to_str().unwrap(), "-w", "%{http_code} %{http_version}", &url]);
    assert_eq!(String::from_utf8_lossy(&w), "200 2");
    assert!(std::fs::read(&out).unwrap() == big, "h2 body differs");
    let url = format!("http://{}/index.html", px.addr);
    let (_, head) = curl(&["--http2-prior-knowledge", "-I", &url]);
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/2 200") && head.contains("content-length: 18"), "{head}");
    assert_eq!(head.matches("date:").count(), 1, "{head}");
}

#[test]
fn in_front_of_python_http_server() {
    let site = TempDir::new("px-pysite");
    site.write("hello.txt", "hello from python\n");
    site.write("sub/a.txt", "a\n");
    let port = free_port();
    let mut py = Command::new("python3")
        .args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string(), "--directory"])
        .arg(site.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::eventually(10, "python http.server listening", || TcpStream::connect(("127.0.0.1", port)).is_ok());
    let d = TempDir::new("px-py");
    let px = proxy(&d, &route("/py", &format!("upstream = \"http://127.0.0.1:{port}\", strip_prefix = true")));

    for _ in 0..3 {
        // HTTP/1.0 answers: no keep-alive upstream, each request on a new connection.
        let r = px.get("/py/hello.txt?x=1");
        assert_eq!((r.status, r.text().as_str()), (200, "hello from python\n"), "{r:?}");
    }
    let r = request(px.addr, "HEAD /py/hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("content-length")), (200, Some("18")));
    let r = px.get("/py/sub/");
    assert!(r.status == 200 && r.text().contains("a.txt"), "{r:?}");
    assert_eq!(px.get("/py/nope").status, 404);
    let _ = py.kill();
    let _ = py.wait();
}

#[test]
fn post_5mb_echo_h1_and_h2() {
    let d = TempDir::new("px-echo");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    let body = pseudo_random(5 << 20);

    // Content-Length from an HTTP/1.1 client: small answers come back with a length.
    let r = post(px.addr, "/echo", &body);
    assert_eq!(r.status, 200);
    assert!(r.body == body, "echo differs ({} bytes back)", r.body.len());

    // Chunked from the client: re-framed, echoed.
    let mut s = connect(px.addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").unwrap();
    for piece in body.chunks(300_000) {
        write!(s, "{:x}\r\n", piece.len()).unwrap();
        s.write_all(piece).unwrap();
        s.write_all(b"\r\n").unwrap();
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    assert!(body_of(&resp) == body, "chunked echo differs");

    // HTTP/2 with a length, and without one (curl -T - streams stdin: no content-length).
    let file = d.write("body.bin", &body);
    let url = format!("http://{}/echo", px.addr);
    let out = d.path().join("out.bin");
    let (_, w) = curl(&[
        "--http2-prior-knowledge",
        "--data-binary",
        &format!("@{}", file.display()),
        "-o",
        out.to_str().unwrap(),
        "-w",
        "%{http_code} %{http_version}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&w), "200 2");
    assert!(std::fs::read(&out).unwrap() == body, "h2 echo differs");
    let out2 = d.path().join("out2.bin");
    let st = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--http2-prior-knowledge", "-T", "-", "-o", out2.to_str().unwrap(), &url])
        .stdin(std::fs::File::open(&file).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(std::fs::read(&out2).unwrap() == body, "h2 streamed echo differs");
    assert!(contains(&up.captured(), "transfer-encoding: chunked"), "unknown length not sent chunked");
}

#[test]
fn forwarding_fields_hop_by_hop_and_host() {
    let d = TempDir::new("px-fields");
    let up = Py::start(&d, "0");
    let url = up.url();
    let px = proxy(
        &d,
        &[
            route("/", &format!("upstream = \"{url}\"")),
            route("/rw", &format!("upstream = \"{url}/base\", host = \"upstream\", strip_prefix = true")),
            route("/fixed", &format!("upstream = \"{url}\", host = \"app.internal\"")),
            route("/trust", &format!("upstream = \"{url}\", trust_forwarded = true")),
        ]
        .concat(),
    );
    let ask = |path: &str| {
        let r = request(
            px.addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: front.example:8080\r\nConnection: X-Secret, close\r\n\
                 X-Secret: 1\r\nKeep-Alive: timeout=9\r\nTE: trailers\r\nUpgrade: websocket\r\n\
                 Proxy-Authorization: Basic Zm9v\r\nProxy-Connection: keep-alive\r\n\
                 X-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Forwarded-Proto: https\r\n\
                 Accept: text/plain\r\n\r\n"
            ),
        );
        assert_eq!(r.status, 200, "{r:?}");
        // The upstream's hop-by-hop response fields are not relayed either.
        assert!(r.header("x-hop").is_none() && r.header("keep-alive").is_none(), "{r:?}");
        r.text().to_ascii_lowercase()
    };

    let h = ask("/headers?q=1");
    assert!(h.starts_with("get /headers?q=1 http/1.1\r\nhost: front.example:8080\r\n"), "{h}");
    assert!(h.contains("\r\naccept: text/plain\r\n"), "{h}");
    assert!(h.contains("\r\nx-forwarded-for: 127.0.0.1\r\n"), "{h}");
    assert!(h.contains("\r\nx-forwarded-proto: http\r\n"), "{h}");
    assert!(h.contains("\r\nx-forwarded-host: front.example:8080\r\n"), "{h}");
    assert!(h.contains("\r\nforwarded: for=127.0.0.1;host=\"front.example:8080\";proto=http\r\n"), "{h}");
    for gone in
        ["x-secret", "keep-alive", "\r\nte:", "upgrade", "proxy-", "6.6.6.6", "connection:", "transfer-encoding"]
    {
        assert!(!h.contains(gone), "{gone:?} reached the upstream: {h}");
    }

    let h = ask("/rw/v1/headers");
    assert!(h.starts_with(&format!("get /base/v1/headers http/1.1\r\nhost: 127.0.0.1:{}\r\n", up.port)), "{h}");
    let h = ask("/fixed/headers");
    assert!(h.starts_with("get /fixed/headers http/1.1\r\nhost: app.internal\r\n"), "{h}");
    let h = ask("/trust/headers");
    assert!(h.contains("\r\nx-forwarded-for: 6.6.6.6, 127.0.0.1\r\n"), "{h}");
    assert!(h.contains("\r\nforwarded: for=6.6.6.6, for=127.0.0.1;"), "{h}");
    assert!(h.contains("\r\nx-forwarded-proto: https\r\n"), "{h}");
}

#[test]
fn keepalive_connections_are_reused() {
    let d = TempDir::new("px-ka");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    let n = 30;
    for i in 0..n {
        // Each request on a new client connection; the upstream connection is pooled.
        let r = px.get(&format!("/echo/{i}"));
        assert_eq!(r.status, 200);
    }
    let conns: u32 = px.get("/stats").text().parse().unwrap();
    assert!(conns <= 2, "upstream saw {conns} connections for {} requests", n + 1);
    // Responses framed by close are not reused but still relayed whole.
    let resp = raw(px.addr, b"GET /close HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    assert_eq!(body_of(&resp), b"until-close");
    let conns_after: u32 = px.get("/stats").text().parse().unwrap();
    assert_eq!(conns_after, conns + 1, "a new connection after the closed one");
    // Shutting down with pooled connections is clean.
    let stderr = px.stderr.clone();
    assert_eq!(px.stop(), Some(0));
    assert!(!stderr.lock().unwrap().iter().any(|l| l.contains("panic")), "{:?}", stderr.lock().unwrap());
}

#[test]
fn requests_over_max_connections_wait_for_a_pooled_one() {
    // Two connections at most, six slow requests at once: the four waiting take the
    // connections as they come back (not a 503 after connect_timeout), and no more are opened.
    let d = TempDir::new("px-limit");
    let up = Py::start(&d, "0");
    let table = format!("upstream = \"{}\", max_connections = 2, connect_timeout = \"1s\"", up.url());
    let px = proxy(&d, &route("/", &table));
    let addr = px.addr;
    let t0 = Instant::now();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                request(addr, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").status
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(statuses, [200; 6], "after {:?}", t0.elapsed());
    let conns: u32 = px.get("/stats").text().parse().unwrap();
    assert!(conns <= 2, "upstream saw {conns} connections");
}

#[test]
fn reused_connection_closed_unanswered_is_retried_only_when_idempotent() {
    let d = TempDir::new("px-retry");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    // Each GET goes out on the pooled connection, which the upstream closes unanswered;
    // selvedge sends it again on a new connection.
    for _ in 0..3 {
        let r = px.get("/once");
        assert_eq!(r.status, 200, "{r:?}");
    }
    // A POST is not sent twice.
    let r = post(px.addr, "/once", b"x");
    assert_eq!(r.status, 502, "{r:?}");
    let conns: u32 = px.get("/stats").text().parse().unwrap();
    assert_eq!(conns, 4, "one new connection per request (the retried GETs and the /stats one)");
}

/// One HTTP/2 GET on a new connection, the fields written as HPACK literals (so any bytes
/// can be sent); the response's status (its first field, as the server's encoder writes it), or 0
/// when the stream is reset as malformed.
fn h2_get_status(addr: SocketAddr, path: &[u8], authority: &[u8]) -> u16 {
    let mut block = Vec::new();
    for (n, v) in [(&b":method"[..], &b"GET"[..]), (b":scheme", b"http"), (b":path", path), (b":authority", authority)]
    {
        block.push(0); // literal without indexing, new name
        block.push(n.len() as u8);
        block.extend_from_slice(n);
        block.push(v.len() as u8);
        block.extend_from_slice(v);
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
    let len = block.len() as u32;
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, 1, 0x5, 0, 0, 0, 1]); // HEADERS
    out.extend_from_slice(&block);
    let mut s = connect(addr);
    s.write_all(&out).unwrap();
    loop {
        let mut h = [0u8; 9];
        s.read_exact(&mut h).expect("a frame before the response");
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        // Reset as malformed (RST_STREAM PROTOCOL_ERROR): status 0.
        if h[3] == 3 && stream == 1 {
            assert_eq!(payload, [0, 0, 0, 1], "reset with PROTOCOL_ERROR");
            return 0;
        }
        if h[3] != 1 || stream != 1 {
            continue;
        }
        // :status is the static table's (index 8 to 14) or a literal with its name indexed.
        let statuses = [200, 204, 206, 304, 400, 404, 500];
        return match payload[0] {
            b if b & 0x80 != 0 && (8..=14).contains(&(b & 0x7f)) => statuses[usize::from(b & 0x7f) - 8],
            b if b & 0xc0 != 0x80 && payload[1] == 3 => std::str::from_utf8(&payload[2..5]).unwrap().parse().unwrap(),
            b => panic!("status encoded as {b:#x} {:?}", &payload[..payload.len().min(8)]),
        };
    }
}

/// An HTTP/2 `:path` or `:authority` that HTTP/1.1 cannot carry (bytes that are not UTF-8)
/// is answered 400 and never reaches the upstream; a plain one goes through, and a space
/// in the path (a byte of it, normalized) goes as `%20`.
#[test]
fn h2_targets_http11_cannot_carry_are_refused() {
    let d = TempDir::new("px-h2-target");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    // A path that is not UTF-8 is a 400; an authority that is not host[:port] makes the
    // request malformed (reset).
    for (path, authority, want) in [(&b"/\xff"[..], &b"example.test"[..], 400), (b"/ok", b"ex\xffmple", 0)] {
        assert_eq!(
            h2_get_status(px.addr, path, authority),
            want,
            "{:?} {:?}",
            path.escape_ascii(),
            authority.escape_ascii()
        );
    }
    assert!(up.captured().is_empty(), "{:?}", String::from_utf8_lossy(&up.captured()));
    assert_eq!(h2_get_status(px.addr, b"/ok", b"example.test"), 200);
    assert!(contains(&up.captured(), "GET /ok HTTP/1.1"), "{:?}", String::from_utf8_lossy(&up.captured()));
    assert_eq!(h2_get_status(px.addr, b"/a b", b"example.test"), 200);
    assert!(contains(&up.captured(), "GET /a%20b HTTP/1.1"), "{:?}", String::from_utf8_lossy(&up.captured()));
    assert!(!contains(&up.captured(), "/a b"), "{:?}", String::from_utf8_lossy(&up.captured()));
}

#[test]
fn refused_upstream_is_502() {
    let d = TempDir::new("px-502");
    let dead = free_port();
    let px = proxy(&d, &route("/", &format!("upstream = \"http://127.0.0.1:{dead}\"")));
    let t = Instant::now();
    let r = px.get("/x");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
    let (_, w) =
        curl(&["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", &format!("http://{}/", px.addr)]);
    assert_eq!(String::from_utf8_lossy(&w), "502");
}

#[test]
fn stalled_upstream_is_504_within_the_timeout() {
    let d = TempDir::new("px-504");
    let up = Py::start(&d, "0");
    let px =
        proxy(&d, &route("/", &format!("upstream = \"{}\", first_byte_timeout = 0.5, idle_timeout = 0.5", up.url())));
    let t = Instant::now();
    let r = px.get("/stall");
    let took = t.elapsed();
    assert_eq!(r.status, 504, "{r:?}");
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "took {took:?}");
    // The stalled connection is not reused: the next request works.
    assert_eq!(px.get("/ok").status, 200);

    // Stalled mid-body: the answer has begun, so the client sees it cut off (no final
    // chunk) once the idle timeout passes, and the proxy goes on.
    let t = Instant::now();
    let resp = raw(px.addr, b"GET /stall-body HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let took = t.elapsed();
    assert!(resp.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&resp));
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        dechunk(&resp[end..]).is_none() && contains(&resp[end..], "0123456789"),
        "{:?}",
        String::from_utf8_lossy(&resp)
    );
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(px.get("/ok").status, 200);
}

#[test]
fn upstream_killed_mid_response() {
    let d = TempDir::new("px-kill");
    let port = free_port();
    let up = Py::start(&d, &port.to_string());
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    // Two requests at once: two upstream connections, both pooled afterwards.
    let slow = || {
        let a = px.addr;
        std::thread::spawn(move || request(a, "GET /slow HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").status)
    };
    let (x, y) = (slow(), slow());
    assert_eq!((x.join().unwrap(), y.join().unwrap()), (200, 200));

    let t = Instant::now();
    let resp = raw(px.addr, b"GET /die HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(t.elapsed() < Duration::from_secs(8), "the client hung until its timeout");
    assert!(resp.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&resp[..resp.len().min(200)]));
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(dechunk(&resp[end..]).is_none(), "a truncated body must not look complete");
    assert!(resp.len() < 10_000_000);
    drop(up);

    // The proxy is fine: with the upstream back on the same port, the next request works
    // (the other pooled connection, to the dead process, is found stale or retried).
    let up = Py::start(&d, &port.to_string());
    let r = px.get("/after");
    assert_eq!(r.status, 200, "{r:?}");
    let r = post(px.addr, "/echo", b"still works");
    assert_eq!(r.text(), "still works");
    drop(up);
}

#[test]
fn ambiguous_requests_never_reach_the_upstream_and_bodies_are_reframed() {
    let d = TempDir::new("px-smuggle");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));
    let smuggle = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";
    let cases = [
        format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggle}"
        ),
        format!(
            "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n{smuggle}"
        ),
        format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 45\r\n\r\nhello{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 45\r\n\r\nhello{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n{smuggle}"),
        format!("POST / HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\nContent-Length: 5\r\n\r\nhello{smuggle}"),
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n{smuggle}"),
        format!("GET / HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n{smuggle}"),
    ];
    for (i, c) in cases.iter().enumerate() {
        let resp = raw(px.addr, c.as_bytes());
        let status = parse(&resp, false).map_or(0, |r| r.status);
        assert!((400..=501).contains(&status), "case {i}: status {status}");
        assert_eq!(resp.windows(12).filter(|w| w.starts_with(b"HTTP/1.1")).count(), 1, "case {i}: two answers");
        assert!(
            up.captured().is_empty(),
            "case {i} reached the upstream: {:?}",
            String::from_utf8_lossy(&up.captured())
        );
    }

    // Valid bodies arrive re-framed by selvedge: a length stays a length, chunked is
    // re-chunked (the client's chunk extensions and trailers do not pass), and the bytes
    // after the body (a pipelined request) arrive as a request of their own.
    let resp = raw(
        px.addr,
        b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
          3;ext=\"x\"\r\nabc\r\n0\r\nX-Trailer: evil\r\n\r\n\
          POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    assert_eq!(resp.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count(), 2);
    let got = String::from_utf8_lossy(&up.captured()).to_ascii_lowercase();
    let a = got.find("post /a http/1.1\r\n").expect("first request");
    let b = got.find("post /b http/1.1\r\n").expect("second request");
    let (first, second) = (&got[a..b], &got[b..]);
    assert!(
        first.contains("\r\ntransfer-encoding: chunked\r\n") && first.ends_with("\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        "{first:?}"
    );
    assert_eq!(first.matches("transfer-encoding").count(), 1, "{first:?}");
    assert!(!first.contains("content-length") && !first.contains("ext=") && !first.contains("evil"), "{first:?}");
    assert!(second.contains("\r\ncontent-length: 2\r\n") && second.ends_with("\r\n\r\nhi"), "{second:?}");
    assert!(!second.contains("transfer-encoding") && !got.contains("smuggled"), "{got:?}");
}

#[test]
fn upstream_answers_early_interim_and_invalid_responses() {
    let d = TempDir::new("px-odd");
    let up = Py::start(&d, "0");
    let px = proxy(&d, &route("/", &format!("upstream = \"{}\"", up.url())));

    // 100 Continue and 103 are swallowed; the final answer is relayed.
    let r = px.get("/continue");
    assert_eq!((r.status, r.text().as_str()), (200, "after-continue"), "{r:?}");
    // A chunked upstream body, trailer dropped.
    let resp = raw(px.addr, b"GET /chunked HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_eq!(body_of(&resp), b"hello world");
    assert!(!contains(&resp, "x-trailer"));

    // An answer before the upload ends: relayed, the upload stops.
    let mut s = connect(px.addr);
    let body = vec![b'x'; 5 << 20];
    write!(s, "POST /early HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&body);
    });
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let r = parse(&resp, true).expect("an answer");
    assert_eq!((r.status, r.text().as_str()), (413, "early"));
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();

    // Ambiguous or malformed responses are never relayed.
    for path in ["/bad-cl", "/te-cl", "/fold"] {
        let r = px.get(path);
        assert_eq!(r.status, 502, "{path}: {r:?}");
    }
    let r = post(px.addr, "/echo", b"fine");
    assert_eq!((r.status, r.text().as_str()), (200, "fine"));
}

#[test]
fn unix_socket_upstream() {
    let d = TempDir::new("px-unix");
    let sock = d.path().join("up.sock");
    let _up = Py::start(&d, sock.to_str().unwrap());
    let px = proxy(&d, &route("/", &format!("upstream = \"unix:{}\"", sock.display())));
    for _ in 0..3 {
        let r = post(px.addr, "/echo", b"over a unix socket");
        assert_eq!((r.status, r.text().as_str()), (200, "over a unix socket"));
    }
    let r = px.get("/headers");
    assert!(r.text().to_ascii_lowercase().contains("\r\nhost: t\r\n"), "{r:?}");
}

#[test]
fn config_errors_point_at_the_route() {
    let d = TempDir::new("px-cfg");
    for bad in [
        "upstream = \"ftp://x\"",
        "upstream = \"http://127.0.0.1:1\", idle_timeout = 0",
        "upstream = \"http://h\", nope = 1",
    ] {
        let cfg = d.write("bad.toml", format!("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ {bad} }}\n"));
        let out = Command::new(common::BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("bad.toml:4:"), "{bad}: {err}");
    }
}

/// `header_up` sets, adds, deletes and rewrites fields of the request sent upstream (its
/// `Host` and forwarding fields too, which selvedge then leaves to it), `path` writes the
/// path sent, and `header_down` rewrites the response's fields; placeholders read the
/// client's request, and what a client sends cannot break a field.
#[test]
fn header_rewriting_both_ways() {
    let d = TempDir::new("proxy-rewrite");
    let up = Py::start(&d, "0");
    let u = up.url();
    let routes = format!(
        "[vhost.matchers.api]\npath_regex = \"^/api/(.*)$\"\n{}{}{}",
        route(
            "/api",
            &format!(
                "upstream = \"{u}\", path = \"/headers\", header_up = {{ \"X-Set\" = \"{{method}} {{client_ip}}\", \
                 \"+X-Add\" = \"two\", \"-X-Drop\" = \"\", \"-X-Debug-*\" = \"\", \
                 \"User-Agent\" = {{ search = \"^tester/(.*)$\", replace = \"t$1\" }}, \"Host\" = \"{{host}}.internal\", \
                 \"X-Forwarded-For\" = \"{{header.x-test-for}}\", \"X-Path\" = \"{{re.api.1}}\", \"X-Q\" = \"{{query.q}}\", \
                 \"X-Empty\" = \"{{header.x-none}}\" }}"
            )
        ),
        route("/down", &format!("upstream = \"{u}\", header_down = {{ \"-X-Conn\" = \"\", \"X-Down\" = \"{{uri}}\", \"+X-Two\" = \"b\" }}")),
        route("/re", &format!("upstream = \"{u}\", header_down = {{ \"X-Conn\" = {{ search = \"^([0-9]+)$\", replace = \"conn-$1\" }} }}")),
    );
    let s = proxy(&d, &routes);
    let r = s.get_h(
        "/api/x/y?q=a%0D%0Ab",
        &[
            ("X-Add", "one"),
            ("X-Drop", "1"),
            ("X-Debug-A", "1"),
            ("x-debug-b", "2"),
            ("User-Agent", "tester/8.1"),
            ("X-Test-For", "9.9.9.9"),
            ("X-Forwarded-For", "6.6.6.6"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let head = r.text().to_ascii_lowercase();
    assert!(head.starts_with("get /headers?q=a%0d%0ab http/1.1\r\nhost: t.internal\r\n"), "{head}");
    for want in [
        "x-add: one\r\n",
        "x-add: two\r\n",
        "user-agent: t8.1\r\n",
        "x-set: get 127.0.0.1\r\n",
        "x-path: x/y\r\n",
        "x-q: a%0d%0ab\r\n",
        "x-forwarded-for: 9.9.9.9\r\n",
        "x-real-ip: 127.0.0.1\r\n",
        "forwarded: for=127.0.0.1",
    ] {
        assert!(head.contains(want), "{want:?} in {head}");
    }
    for gone in ["x-drop", "x-debug-", "6.6.6.6", "x-empty", "x-forwarded-for: 127"] {
        assert!(!head.contains(gone), "{gone:?} in {head}");
    }
    assert_eq!(head.matches("x-forwarded-for").count(), 1, "{head}");
    let r = s.get("/down/e?k=1");
    assert_eq!((r.header("x-conn"), r.header("x-down"), r.header("x-two")), (None, Some("/down/e?k=1"), Some("b")));
    let r = s.get("/re/e");
    assert!(r.header("x-conn").is_some_and(|v| v.starts_with("conn-")), "{:?}", r.headers);
}

/// A `path` made from a client's value cannot climb out of the upstream's base or change
/// the query, and a `Host` made from one must be a host.
#[test]
fn templated_paths_and_hosts_stay_in_bounds() {
    let d = TempDir::new("proxy-template-bounds");
    let up = Py::start(&d, "0");
    let u = up.url();
    let routes = format!(
        "{}{}",
        route("/p", &format!("upstream = \"{u}/base\", path = \"/{{query.x}}/headers\"")),
        route("/h", &format!("upstream = \"{u}\", path = \"/headers\", header_up = {{ \"Host\" = \"{{query.h}}\" }}")),
    );
    let s = proxy(&d, &routes);
    let line = |r: &Resp| r.text().lines().next().unwrap_or_default().to_string();
    assert_eq!(line(&s.get("/p?x=a")), "GET /base/a/headers?x=a HTTP/1.1");
    for v in ["..", "%2e%2e", ".", "%2E"] {
        assert_eq!(s.get(&format!("/p?x={v}")).status, 400, "{v}: a value that is a dot-segment is refused");
    }
    assert_eq!(line(&s.get("/p?x=a%3Fz%3D1%23f")), "GET /base/a%3Fz=1%23f/headers?x=a%3Fz%3D1%23f HTTP/1.1");
    assert_eq!(s.get("/p?x=..%2F..%2Fsecret").status, 400, "an encoded slash from a value is refused");
    assert!(s.get("/h?h=app.internal:8080").text().contains("host: app.internal:8080\r\n"));
    assert_eq!(s.get("/h?h=evil.com%2Fx").status, 400);
    assert_eq!(s.get("/h?h=a,b").status, 400);
}
