//! WebSocket through the reverse proxy, with real processes: a Python `websockets` echo
//! server upstream, the `selvedge` binary as the proxy, and as clients Python `websockets`
//! (HTTP/1.1 Upgrade) and a hand-driven HTTP/2 client (extended CONNECT, RFC 8441).
//! `.ci/run` installs the `websockets` package.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::{Srv, TempDir};
use selvedge_proto::h2::codec::{decode_frame, PREFACE};
use selvedge_proto::h2::frame::{self, flag, kind, Frame, Head};
use selvedge_proto::hpack;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ws_echo.py");

struct Upstream(Child, u16);

impl Upstream {
    fn start() -> Upstream {
        let mut child = Command::new("python3")
            .args([SCRIPT, "serve"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("the websocket upstream did not start (is the Python `websockets` package installed?): {line:?}")
        });
        Upstream(child, port)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn proxy(d: &TempDir, upstream: &str, extra: &str) -> Srv {
    let cfg = d.write(
        "proxy.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\n\
             proxy = {{ upstream = \"{upstream}\"{extra} }}\n"
        ),
    );
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

fn py_client(args: &[&str]) -> String {
    let out = Command::new("python3").arg(SCRIPT).args(args).output().expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "client failed: {text} {}", String::from_utf8_lossy(&out.stderr));
    text
}

#[test]
fn websocket_echo_through_the_proxy_over_http1() {
    let up = Upstream::start();
    let d = TempDir::new("ws-h1");
    let srv = proxy(&d, &format!("http://127.0.0.1:{}", up.1), "");
    // Text, a 1 MiB binary message, and 100 messages in a row, echoed through the tunnel.
    let url = format!("ws://{}/chat", srv.addr);
    assert_eq!(py_client(&["client", &url]), "ok");
    // Twice: each tunnel has its own upstream connection, closed with it.
    assert_eq!(py_client(&["client", &url]), "ok");
}

#[test]
fn idle_tunnel_is_closed_after_its_timeout() {
    let up = Upstream::start();
    let d = TempDir::new("ws-idle");
    let srv = proxy(&d, &format!("http://127.0.0.1:{}", up.1), ", tunnel_idle_timeout = 1");
    let t = Instant::now();
    assert_eq!(py_client(&["idle", &format!("ws://{}/", srv.addr), "1.5"]), "closed");
    assert!(t.elapsed() < Duration::from_secs(8));
}

#[test]
fn upgrade_the_upstream_refuses_is_an_ordinary_answer() {
    let site = TempDir::new("ws-plain-site");
    site.write("index.html", "plain\n");
    let upstream = Srv::start(&["serve", site.path().to_str().unwrap(), "--port", "0", "--workers", "1"]);
    let d = TempDir::new("ws-plain");
    let srv = proxy(&d, &format!("http://{}", upstream.addr), "");
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"plain\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&got));
}

/// A minimal HTTP/2 client: preface, SETTINGS, frames by hand.
struct H2 {
    sock: TcpStream,
    enc: hpack::Encoder,
    dec: hpack::Decoder,
    buf: BytesMut,
}

impl H2 {
    fn connect(addr: SocketAddr) -> H2 {
        let sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = H2 { sock, enc: hpack::Encoder::new(), dec: hpack::Decoder::default(), buf: BytesMut::new() };
        let mut out = PREFACE.to_vec();
        out.extend(raw(kind::SETTINGS, 0, 0, &[]));
        c.sock.write_all(&out).unwrap();
        c
    }

    fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = decode_frame(&mut self.buf, frame::MAX_MAX_FRAME_SIZE).unwrap() {
                if let Frame::Settings(s) = &f {
                    if !s.ack {
                        self.sock.write_all(&raw(kind::SETTINGS, flag::ACK, 0, &[])).unwrap();
                    }
                }
                return Some(f);
            }
            let mut tmp = [0u8; 65536];
            match self.sock.read(&mut tmp) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            }
        }
    }
}

fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    Head { len: payload.len() as u32, kind, flags, stream }.encode(&mut v);
    v.extend_from_slice(payload);
    v
}

/// A masked client text frame (RFC 6455 §5.2), payload under 126 bytes.
fn ws_text(payload: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut v = vec![0x81, 0x80 | payload.len() as u8];
    v.extend_from_slice(&mask);
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    v
}

#[test]
fn websocket_over_http2_extended_connect() {
    let up = Upstream::start();
    let d = TempDir::new("ws-h2");
    let srv = proxy(&d, &format!("http://127.0.0.1:{}", up.1), "");
    let mut c = H2::connect(srv.addr);
    let fields = [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "http"),
        (":path", "/chat"),
        (":authority", "localhost"),
        ("sec-websocket-version", "13"),
    ];
    let mut block = BytesMut::new();
    c.enc.encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
    let mut out = Vec::new();
    frame::Headers::encode(1, &block, false, 16_384, &mut out);
    out.extend(raw(kind::DATA, 0, 1, &ws_text(b"hello over h2")));
    c.sock.write_all(&out).unwrap();
    let mut status = String::new();
    let mut data = Vec::new();
    let want = b"\x81\x0dhello over h2";
    while !data.ends_with(want) {
        match c.next().expect("frames until the echo") {
            Frame::Headers(h) => {
                c.dec
                    .decode(&h.fragment, |f| {
                        if f.name.as_bytes() == b":status" {
                            status = String::from_utf8_lossy(&f.value).into_owned();
                        }
                    })
                    .unwrap();
                assert!(!h.end_stream, "the tunnel stays open");
            }
            Frame::Data(d) => data.extend_from_slice(&d.data),
            Frame::RstStream(r) => panic!("stream reset: {r:?}"),
            Frame::GoAway(g) => panic!("goaway: {g:?}"),
            _ => {}
        }
    }
    assert_eq!(status, "200");
    assert_eq!(&data[..], &want[..], "the upstream's unmasked echo frame, byte for byte");
}
