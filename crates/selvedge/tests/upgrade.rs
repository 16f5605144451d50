//! Protocol switches over real sockets: HTTP/1.1 `Upgrade` answered with 101 and a tunnel,
//! and HTTP/2 extended CONNECT (RFC 8441) answered with 200 and a tunnel on the stream.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::h2::{raw, Client};
use common::{connect, read_responses, settings, start};
use selvedge::http::{header, HeaderName, StatusCode};
use selvedge::{Request, Response};
use selvedge_proto::h2::frame::{flag, kind, Frame, Setting};

/// Echoes every byte of an `echo` tunnel back, upper-cased; anything else gets 426 (or a
/// plain 200 when no upgrade was asked for).
async fn echo(mut req: Request) -> Response {
    match req.upgrade() {
        Some(p) if p.eq_ignore_ascii_case("echo") => Response::upgrade(&mut req, |mut from, mut to| async move {
            while let Some(piece) = from.chunk().await {
                let piece = piece?;
                to.write(&piece.to_ascii_uppercase()).await?;
            }
            to.write(b"BYE").await
        })
        .header(header::UPGRADE, "echo")
        .header(HeaderName::from_static("x-tunnel"), "yes"),
        Some(_) => Response::bytes(StatusCode::UPGRADE_REQUIRED, "only echo\n").header(header::UPGRADE, "echo"),
        None if req.path() == "/force101" => {
            // A 101 to a request that cannot switch: the engine must refuse it.
            Response::stream(StatusCode::SWITCHING_PROTOCOLS, |_w| async { Ok(()) })
        }
        None => Response::bytes(StatusCode::OK, "plain\n"),
    }
}

fn read_until(s: &mut std::net::TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(needle.len()).any(|w| w == needle) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before {:?}: {:?}", String::from_utf8_lossy(needle), String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn h1_upgrade_switches_to_a_tunnel_and_closes_after_it() {
    let srv = start(settings(), echo);
    let mut s = connect(srv.addr);
    // Bytes of the new protocol may follow the head in the same packet.
    s.write_all(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: echo\r\n\r\nearly ")
        .unwrap();
    let got = read_until(&mut s, b"EARLY ");
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: upgrade\r\n"), "{text}");
    assert!(text.contains("upgrade: echo\r\n") && text.contains("x-tunnel: yes\r\n"), "{text}");
    assert!(!text.to_ascii_lowercase().contains("transfer-encoding"), "{text}");
    // Not HTTP any more: what looks like a request is just bytes.
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    read_until(&mut s, b"GET / HTTP/1.1\r\n\r\n");
    // Half-close: the app sees the end, says BYE, and the connection closes.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let got = read_until(&mut s, b"BYE");
    assert!(got.ends_with(b"BYE"));
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn h1_upgrade_refused_keeps_the_connection_as_http() {
    let srv = start(settings(), echo);
    let mut s = connect(srv.addr);
    // Another protocol: 426, then the connection goes on as HTTP/1.1.
    s.write_all(
        b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let r = read_responses(&mut s, 2);
    assert_eq!((r[0].status, r[1].status), (426, 200));
    assert_eq!(r[1].body, b"plain\n");
    // `Upgrade` without `Connection: upgrade` is no upgrade request.
    s.write_all(b"GET /t HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\n\r\n").unwrap();
    assert_eq!(read_responses(&mut s, 1)[0].status, 200);
    // Nor one with a body (the switch would come after it; we do not do that).
    s.write_all(b"POST /t HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\nContent-Length: 2\r\n\r\nhi")
        .unwrap();
    assert_eq!(read_responses(&mut s, 1)[0].status, 200);
    // HTTP/1.0 cannot switch.
    s.write_all(b"GET /t HTTP/1.0\r\nConnection: upgrade, keep-alive\r\nUpgrade: echo\r\n\r\n").unwrap();
    assert_eq!(read_responses(&mut s, 1)[0].status, 200);
}

#[test]
fn h1_101_without_an_upgrade_request_is_a_500() {
    let srv = start(settings(), echo);
    let mut s = connect(srv.addr);
    s.write_all(b"GET /force101 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let r = read_responses(&mut s, 1);
    assert_eq!(r[0].status, 500);
}

#[test]
fn h2_extended_connect_tunnels_on_the_stream() {
    let srv = start(settings(), echo);
    let mut c = Client::connect(srv.addr, &[]);
    // The server advertises SETTINGS_ENABLE_CONNECT_PROTOCOL.
    let mut enabled = false;
    while let Some(f) = c.next() {
        if let Frame::Settings(s) = f {
            if !s.ack {
                enabled = s.values.iter().any(|(id, v)| *id == Setting::ENABLE_CONNECT_PROTOCOL && *v == 1);
                break;
            }
        }
    }
    assert!(enabled, "SETTINGS_ENABLE_CONNECT_PROTOCOL = 1 advertised");
    let f = c.request_frame(1, "CONNECT", "/t", &[(":protocol", "echo")], false);
    c.send(&f);
    c.send(&raw(kind::DATA, 0, 1, b"hello "));
    let mut status = String::new();
    let mut data = Vec::new();
    while !data.ends_with(b"HELLO ") {
        match c.next().expect("frames") {
            Frame::Headers(h) => {
                status = c.status(&h);
                assert!(!h.end_stream);
            }
            Frame::Data(d) => data.extend_from_slice(&d.data),
            Frame::RstStream(r) => panic!("reset: {r:?}"),
            _ => {}
        }
    }
    assert_eq!(status, "200");
    // The client ends its side: the app says BYE and ends the stream.
    c.send(&raw(kind::DATA, flag::END_STREAM, 1, b"world"));
    let mut ended = false;
    while let Some(f) = c.next() {
        match f {
            Frame::Data(d) => {
                data.extend_from_slice(&d.data);
                if d.end_stream {
                    ended = true;
                    break;
                }
            }
            Frame::RstStream(r) => panic!("reset: {r:?}"),
            _ => {}
        }
    }
    assert!(ended);
    assert_eq!(data, b"HELLO WORLDBYE");
    // Another protocol is refused with 426 by the app; the connection lives on.
    let f = c.request_frame(3, "CONNECT", "/t", &[(":protocol", "other")], false);
    c.send(&f);
    let mut st = String::new();
    while let Some(f) = c.next() {
        if let Frame::Headers(h) = f {
            st = c.status(&h);
            break;
        }
    }
    assert_eq!(st, "426");
    std::thread::sleep(Duration::from_millis(10));
}
