//! Listeners, workers, the connection limit and graceful shutdown.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::app::app;
use common::*;
use selvedge::{Server, Workers};

#[test]
fn unix_socket_listener() {
    let path = std::env::temp_dir().join(format!("selvedge-test-{}.sock", std::process::id()));
    let h = Server::new(settings()).bind(path.clone()).start(app).unwrap();
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("hello"), "{out}");
    h.shutdown();
    h.join();
    let _ = std::fs::remove_file(path);
}

#[test]
fn ipv6_and_ipv4_listeners_together() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let h = Server::new(settings())
        .bind("127.0.0.1:0".parse::<SocketAddr>().unwrap())
        .bind("[::1]:0".parse::<SocketAddr>().unwrap())
        .start(app)
        .unwrap();
    for l in h.local_addrs() {
        let selvedge::Listen::Tcp(addr) = l else { continue };
        let (out, _) = exchange(*addr, b"GET /info HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{addr}: {out}");
    }
    h.shutdown();
    h.join();
}

#[test]
fn per_core_and_multi_thread_workers_serve() {
    for workers in [Workers::PerCore(2), Workers::MultiThread(2)] {
        let mut cfg = settings();
        cfg.workers = workers;
        let srv = start(cfg, app);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let addr = srv.addr;
                std::thread::spawn(move || {
                    let mut s = connect(addr);
                    for _ in 0..50 {
                        s.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
                        assert_eq!(read_responses(&mut s, 1)[0].text(), "hello");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}

#[test]
fn connection_limit_holds_extra_connections_in_the_backlog() {
    let mut cfg = settings();
    cfg.max_connections = 2;
    let srv = start(cfg, app);
    let mut a = connect(srv.addr);
    let mut b = connect(srv.addr);
    for s in [&mut a, &mut b] {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
        read_responses(s, 1);
    }
    let mut c = connect(srv.addr);
    c.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = [0u8; 64];
    assert!(c.read(&mut buf).is_err(), "third connection served over the limit");
    drop(a);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(read_responses(&mut c, 1)[0].text(), "hello");
}

#[test]
fn graceful_shutdown_finishes_in_flight_and_closes_idle() {
    let srv = start(settings(), app);
    let handle = srv.handle.as_ref().unwrap();
    // An idle keep-alive connection.
    let mut idle = connect(srv.addr);
    idle.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    read_responses(&mut idle, 1);
    // A request in flight (the app takes 300 ms).
    let mut busy = connect(srv.addr);
    busy.write_all(b"GET /slow?graceful-h1 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(wait_for(10, || common::app::slow_started("graceful-h1")));
    let t = Instant::now();
    handle.shutdown();
    // The idle one closes at once.
    let (out, closed) = read_to_close(&mut idle);
    assert!(closed && out.is_empty(), "{out}");
    assert!(t.elapsed() < Duration::from_millis(250), "idle closed after {:?}", t.elapsed());
    // The busy one gets its answer, marked close.
    let (out, closed) = read_to_close(&mut busy);
    assert!(closed && out.contains("connection: close") && out.ends_with("slow done"), "{out}");
    // New connections are refused once the listener is gone.
    assert!(wait_for(2, || std::net::TcpStream::connect(srv.addr).is_err()));
    let mut srv = srv;
    srv.handle.take().unwrap().join();
}
