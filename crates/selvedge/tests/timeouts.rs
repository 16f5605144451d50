//! The timeout manager over real sockets: slowloris clients are closed on time, slow but
//! honest uploads survive, idle keep-alive connections are closed.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::app::app;
use common::*;

fn short() -> selvedge::Settings {
    let mut cfg = settings();
    cfg.header_timeout = Duration::from_millis(1000);
    cfg.idle_timeout = Duration::from_millis(600);
    cfg.body_timeout = Duration::from_millis(1000);
    cfg.min_body_rate = 500;
    cfg
}

/// Sends `bytes` one at a time every `gap` until the server closes; returns when it closed
/// (measured from the first byte) and what it answered.
fn trickle(s: &mut std::net::TcpStream, bytes: &[u8], gap: Duration) -> (Duration, String) {
    let start = Instant::now();
    s.set_read_timeout(Some(gap)).unwrap();
    let mut out = Vec::new();
    for b in bytes.iter().cycle().take(10_000) {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never closed");
    }
    (start.elapsed(), String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn slowloris_headers_are_closed_on_time() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    // A byte every 150 ms: each read brings data, but the head's deadline is absolute.
    let (t, out) = trickle(
        &mut s,
        b"GET /hello HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        Duration::from_millis(150),
    );
    assert!(out.is_empty(), "{out}");
    assert!(t >= Duration::from_millis(900) && t < Duration::from_millis(2000), "closed after {t:?}");
}

#[test]
fn slowloris_body_is_closed_on_time() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n").unwrap();
    // 1 byte / 150 ms = 7 B/s, far under the 500 B/s minimum.
    let (t, out) = trickle(&mut s, b"x", Duration::from_millis(150));
    assert!(!out.contains("200 OK"), "{out}");
    assert!(t >= Duration::from_millis(900) && t < Duration::from_millis(2500), "closed after {t:?}");
}

#[test]
fn slow_honest_upload_survives() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    let total = 3000;
    s.write_all(format!("POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: {total}\r\n\r\n").as_bytes()).unwrap();
    // 150 bytes every 100 ms = 1500 B/s for 2 s: above the minimum rate, and twice the body
    // timeout long in total.
    let start_t = Instant::now();
    for _ in 0..total / 150 {
        s.write_all(&[b'u'; 150]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(start_t.elapsed() > Duration::from_millis(1900));
    let r = read_responses(&mut s, 1).remove(0);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), total);
}

#[test]
fn idle_keep_alive_connection_is_closed() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    read_responses(&mut s, 1);
    let t = Instant::now();
    let (_, closed) = read_to_close(&mut s);
    assert!(closed);
    let t = t.elapsed();
    assert!(t >= Duration::from_millis(500) && t < Duration::from_millis(1500), "closed after {t:?}");
}

#[test]
fn partial_pipelined_request_after_a_response_times_out() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /hel").unwrap();
    let t = Instant::now();
    let (out, closed) = read_to_close(&mut s);
    assert!(closed && out.contains("slow done"), "{out}");
    assert!(t.elapsed() < Duration::from_millis(2500), "closed after {:?}", t.elapsed());
}

#[test]
fn a_connection_that_sends_nothing_is_closed() {
    let srv = start(short(), app);
    let mut s = connect(srv.addr);
    let t = Instant::now();
    let (_, closed) = read_to_close(&mut s);
    assert!(closed);
    assert!(t.elapsed() < Duration::from_millis(2000), "closed after {:?}", t.elapsed());
}
