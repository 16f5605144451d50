//! Idle connections parked outside their task (`server/park.rs`), over real sockets: a
//! keep-alive connection idle for a few ticks of the timeout manager parks (the engine's
//! `parked` counter says so) and answers its next request as before; so does a connection
//! that has sent nothing yet, whichever protocol it then speaks, and an HTTP/2 connection
//! with no stream open (with its HPACK tables); parked connections keep their idle timeout,
//! their place in `max_connections_per_ip`, and close at shutdown (HTTP/2's with GOAWAY).
//!
//! The tests in this file run one at a time (the counters are the process's).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use selvedge::stats::snapshot;

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

async fn hello(req: selvedge::Request) -> selvedge::Response {
    selvedge::Response::bytes(selvedge::http::StatusCode::OK, format!("hello {}\n", req.path()))
}

fn get(s: &mut TcpStream, path: &str) -> Resp {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes()).unwrap();
    read_responses(s, 1).pop().unwrap()
}

/// Waits until `n` connections are parked now (the manager parks after one to two ticks).
fn parked(n: u64) {
    assert!(wait_for(5, || snapshot().parked == n), "parked: {} (want {n})", snapshot().parked);
}

#[test]
fn an_idle_keep_alive_connection_parks_and_answers_its_next_request() {
    let _s = serial();
    let srv = start(settings(), hello);
    let before = snapshot();
    let mut c = connect(srv.addr);
    assert_eq!(get(&mut c, "/one").text(), "hello /one\n");
    parked(1);
    let s = snapshot();
    assert_eq!(s.open_h1, before.open_h1 + 1, "a parked connection still counts as open");
    assert!(s.parked_total > before.parked_total);
    // Pipelined, after parking: both answered, in order.
    c.write_all(b"GET /two HTTP/1.1\r\nHost: h\r\n\r\nGET /three HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let r = read_responses(&mut c, 2);
    assert_eq!((r[0].text(), r[1].text()), ("hello /two\n".into(), "hello /three\n".into()));
    // And again: a connection parks as often as it idles.
    parked(1);
    assert_eq!(get(&mut c, "/four").text(), "hello /four\n");
    drop(c);
    parked(0);
    assert!(wait_for(5, || snapshot().open_h1 == before.open_h1), "the connection was not counted as closed");
}

#[test]
fn hundreds_of_parked_connections_come_back() {
    let _s = serial();
    let srv = start(settings(), hello);
    let mut conns: Vec<TcpStream> = (0..300).map(|_| connect(srv.addr)).collect();
    for round in 0..3 {
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(get(c, &format!("/{round}/{i}")).text(), format!("hello /{round}/{i}\n"));
        }
        parked(300);
    }
    // Half leave while parked: their places are reused by the next ones.
    conns.truncate(150);
    parked(150);
    conns.extend((0..150).map(|_| connect(srv.addr)));
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(get(c, &format!("/x/{i}")).text(), format!("hello /x/{i}\n"));
    }
    parked(300);
    drop(conns);
    parked(0);
}

/// A burst: 1,500 connections each send a request at once (new, then three times parked), and
/// every answer is read only after all were sent. Many tasks take their request with the
/// optimistic first read, past the reactor, whose readiness for the socket then goes
/// stale; yet every connection parks once idle (a wait that found the stale readiness
/// used to go on deaf to the request to park, keeping its task until the idle timeout).
#[test]
fn every_connection_of_a_burst_parks_again() {
    let _s = serial();
    // An app that lets the reactor turn before it answers (as one that reads a file or asks
    // an upstream does): the reactor may then report the socket readable for the request
    // already taken. (The socket's unit test `an_idle_wait_on_stale_readiness_still_parks`
    // makes that case every time.)
    let srv = start(settings(), |req| async move {
        tokio::task::yield_now().await;
        hello(req).await
    });
    let n = connection_budget(1500);
    assert!(n >= 500, "the descriptor limit allows {n} connections (want 500)");
    let mut conns: Vec<TcpStream> = (0..n).map(|_| connect(srv.addr)).collect();
    for round in 0..4 {
        for (i, c) in conns.iter_mut().enumerate() {
            c.write_all(format!("GET /{round}/{i} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes()).unwrap();
        }
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(read_responses(c, 1).pop().unwrap().text(), format!("hello /{round}/{i}\n"));
        }
        parked(n as u64);
    }
    drop(conns);
    parked(0);
}

#[test]
fn a_connection_parked_before_its_first_byte_negotiates_as_usual() {
    let _s = serial();
    let srv = start(settings(), hello);
    // HTTP/1.1.
    let mut c = connect(srv.addr);
    parked(1);
    assert_eq!(get(&mut c, "/late").text(), "hello /late\n");
    drop(c);
    parked(0);
    // HTTP/2 with prior knowledge: the preface arrives after the parking.
    let s = connect(srv.addr);
    parked(1);
    drop(s);
    parked(0);
    let mut h2 = common::h2::Client::connect(srv.addr, &[]);
    assert_eq!(h2_get(&mut h2, 1, "/h2"), "hello /h2\n");
    drop(h2);
    parked(0);
}

/// A GET on `stream` of an HTTP/2 connection: the body of its answer (a 200; every
/// response head is decoded, keeping the client's HPACK context in step).
fn h2_get(c: &mut common::h2::Client, stream: u32, path: &str) -> String {
    c.get(stream, path);
    let mut body = Vec::new();
    while let Some(f) = c.next() {
        match f {
            selvedge_proto::h2::frame::Frame::Headers(h) => assert_eq!(c.status(&h), "200"),
            selvedge_proto::h2::frame::Frame::Data(d) if d.stream == stream => {
                body.extend_from_slice(&d.data);
                if d.end_stream {
                    break;
                }
            }
            selvedge_proto::h2::frame::Frame::GoAway(g) => panic!("GOAWAY {:?}", g.reason),
            _ => {}
        }
    }
    String::from_utf8(body).unwrap()
}

#[test]
fn an_idle_http2_connection_parks_and_answers_again_with_its_tables() {
    let _s = serial();
    let srv = start(settings(), hello);
    let mut conns: Vec<common::h2::Client> = (0..20).map(|_| common::h2::Client::connect(srv.addr, &[])).collect();
    for c in &mut conns {
        assert_eq!(h2_get(c, 1, "/first"), "hello /first\n");
    }
    parked(20);
    // The client's HPACK encoder refers to what its first request put in the dynamic
    // table: the parked decoder still has it. Each connection parks again in between.
    for round in 0..3 {
        let stream = 3 + 2 * round;
        for c in &mut conns {
            assert_eq!(h2_get(c, stream, "/first"), "hello /first\n");
        }
        parked(20);
    }
    assert!(snapshot().parked_total >= 80, "parked {} times", snapshot().parked_total);
    drop(conns);
    parked(0);
}

#[test]
fn a_parked_http2_connection_says_goaway_at_its_idle_timeout() {
    let _s = serial();
    let cfg = selvedge::Settings { idle_timeout: Duration::from_secs(1), ..settings() };
    let srv = start(cfg, hello);
    let mut c = common::h2::Client::connect(srv.addr, &[]);
    let t0 = Instant::now();
    assert_eq!(h2_get(&mut c, 1, "/"), "hello /\n");
    assert_eq!(h2_get(&mut c, 3, "/"), "hello /\n");
    parked(1);
    let goaway = c.until_goaway();
    let waited = t0.elapsed();
    assert_eq!(goaway, Some((selvedge_proto::h2::frame::Reason::NO_ERROR, 3)));
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500), "GOAWAY after {waited:?}");
    assert!(read_to_close(&mut c.sock).1);
    parked(0);
}

#[test]
fn shutdown_says_goaway_to_parked_http2_connections() {
    let _s = serial();
    let mut srv = start(settings(), hello);
    let mut conns: Vec<common::h2::Client> = (0..10).map(|_| common::h2::Client::connect(srv.addr, &[])).collect();
    for c in &mut conns {
        h2_get(c, 1, "/");
    }
    parked(10);
    let t0 = Instant::now();
    let h = srv.handle.take().unwrap();
    h.shutdown();
    h.join();
    assert!(t0.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t0.elapsed());
    for c in &mut conns {
        assert_eq!(c.until_goaway(), Some((selvedge_proto::h2::frame::Reason::NO_ERROR, 1)));
        assert!(read_to_close(&mut c.sock).1);
    }
    parked(0);
}

#[test]
fn a_parked_connection_keeps_its_idle_timeout() {
    let _s = serial();
    let cfg = selvedge::Settings { idle_timeout: Duration::from_secs(1), ..settings() };
    let srv = start(cfg, hello);
    let mut c = connect(srv.addr);
    let t0 = Instant::now();
    get(&mut c, "/");
    parked(1);
    let (_, closed) = read_to_close(&mut c);
    let waited = t0.elapsed();
    assert!(closed, "the parked connection was not closed");
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500), "closed after {waited:?}");
    parked(0);
}

#[test]
fn shutdown_closes_parked_connections_at_once() {
    let _s = serial();
    let mut srv = start(settings(), hello);
    let mut conns: Vec<TcpStream> = (0..20).map(|_| connect(srv.addr)).collect();
    for c in &mut conns {
        get(c, "/");
    }
    parked(20);
    let t0 = Instant::now();
    let h = srv.handle.take().unwrap();
    h.shutdown();
    h.join();
    assert!(t0.elapsed() < Duration::from_secs(2), "shutdown took {:?}", t0.elapsed());
    for c in &mut conns {
        assert!(read_to_close(c).1);
    }
    parked(0);
}

#[test]
fn drain_leaves_parked_connections_open_and_their_next_answer_closes() {
    let _s = serial();
    let mut srv = start(settings(), hello);
    let mut c = connect(srv.addr);
    get(&mut c, "/");
    parked(1);
    let h = srv.handle.take().unwrap();
    h.drain();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(snapshot().parked, 1, "draining closed an idle connection");
    let r = get(&mut c, "/last");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(read_to_close(&mut c).1);
    h.shutdown();
    h.join();
    parked(0);
}

#[test]
fn parked_connections_keep_their_place_in_the_per_address_count() {
    let _s = serial();
    let cfg = selvedge::Settings { max_connections_per_ip: Some(2), ..settings() };
    let srv = start(cfg, hello);
    let mut a = connect(srv.addr);
    let mut b = connect(srv.addr);
    get(&mut a, "/");
    get(&mut b, "/");
    parked(2);
    // A third from the same address is closed before any byte is read.
    let mut c = connect(srv.addr);
    let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    let mut buf = [0u8; 64];
    assert!(matches!(c.read(&mut buf), Ok(0) | Err(_)), "a third connection was served");
    // One leaves (while parked): its place is free again.
    drop(a);
    parked(1);
    let mut d = connect(srv.addr);
    assert_eq!(get(&mut d, "/d").text(), "hello /d\n");
    assert_eq!(get(&mut b, "/b").text(), "hello /b\n");
}

#[test]
fn drain_says_goaway_to_parked_http2_connections() {
    let _s = serial();
    let mut srv = start(settings(), hello);
    let mut h1 = connect(srv.addr);
    get(&mut h1, "/");
    let mut h2 = common::h2::Client::connect(srv.addr, &[]);
    h2_get(&mut h2, 1, "/");
    parked(2);
    let h = srv.handle.take().unwrap();
    h.drain();
    // The HTTP/2 client is told at once, as one in its task would be; the HTTP/1.1
    // connection waits for its next request.
    let t0 = Instant::now();
    assert_eq!(h2.until_goaway(), Some((selvedge_proto::h2::frame::Reason::NO_ERROR, 1)));
    assert!(t0.elapsed() < Duration::from_secs(1), "GOAWAY after {:?}", t0.elapsed());
    assert!(read_to_close(&mut h2.sock).1);
    parked(1);
    let r = get(&mut h1, "/last");
    assert_eq!(r.header("connection"), Some("close"));
    h.shutdown();
    h.join();
    parked(0);
}
