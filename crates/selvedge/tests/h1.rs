//! HTTP/1.1 behaviour over real sockets: keep-alive, 1.0, pipelining, bodies, 100-continue,
//! HEAD, streams, files.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::app::{app, file_app, RELEASED};
use common::*;

#[test]
fn keep_alive_serves_many_requests_on_one_connection() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    for _ in 0..5 {
        s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let r = read_responses(&mut s, 1).remove(0);
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "hello");
        assert!(r.header("date").unwrap().ends_with(" GMT"));
        assert_eq!(r.header("server"), Some("selvedge"));
        assert_eq!(r.header("connection"), None);
    }
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let (rest, closed) = read_to_close(&mut s);
    assert!(closed);
    assert!(rest.contains("connection: close\r\n"), "{rest}");
}

/// Few live connections keep their buffers while idle; past the pool's size they give them
/// back between requests. Both ways, every connection keeps answering, with bodies and
/// pipelined requests in between.
#[test]
fn idle_connections_keep_or_recycle_their_buffers() {
    let srv = start(settings(), app);
    let mut conns: Vec<_> = (0..3).map(|_| connect(srv.addr)).collect();
    let round = |conns: &mut Vec<std::net::TcpStream>| {
        for (i, s) in conns.iter_mut().enumerate() {
            s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello").unwrap();
            s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let rs = read_responses(s, 2);
            assert_eq!((rs[0].status, rs[1].status), (200, 200), "connection {i}");
            assert_eq!(rs[1].text(), "hello");
        }
    };
    round(&mut conns);
    round(&mut conns);
    // Past 64 live connections (the per-thread pool's size).
    conns.extend((0..80).map(|_| connect(srv.addr)));
    round(&mut conns);
    round(&mut conns);
    conns.truncate(3);
    round(&mut conns);
}

#[test]
fn http10_closes_by_default_and_keeps_alive_on_request() {
    let srv = start(settings(), app);
    let (out, closed) = exchange(srv.addr, b"GET /hello HTTP/1.0\r\n\r\n");
    assert!(closed && out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("hello"), "{out}");
    assert!(out.contains("connection: close"));

    let mut s = connect(srv.addr);
    for _ in 0..3 {
        s.write_all(b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
        let r = read_responses(&mut s, 1).remove(0);
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
}

#[test]
fn http10_stream_is_close_delimited() {
    let srv = start(settings(), app);
    let (out, closed) = exchange(srv.addr, b"GET /stream?3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(closed);
    assert!(!out.contains("transfer-encoding"), "{out}");
    assert!(out.ends_with("\r\n\r\npart0;part1;part2;"), "{out}");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    let mut batch = Vec::new();
    for p in ["/hello", "/info?a", "/nocontent", "/hello", "/info?b"] {
        batch.extend_from_slice(format!("GET {p} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes());
    }
    s.write_all(&batch).unwrap();
    let rs = read_responses(&mut s, 5);
    assert_eq!(rs.iter().map(|r| r.status).collect::<Vec<_>>(), [200, 200, 204, 200, 200]);
    assert!(rs[1].text().contains("query=a"));
    assert!(rs[4].text().contains("query=b"));
    assert_eq!(rs[2].header("content-length"), None);
}

#[test]
fn content_length_body_then_next_request_in_same_write() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello worldGET /hello HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let rs = read_responses(&mut s, 2);
    assert_eq!(rs[0].text(), "hello world");
    assert_eq!(rs[1].text(), "hello");
}

#[test]
fn chunked_body_then_next_request_in_same_write() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer-X: y\r\n\r\n\
          GET /hello HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .unwrap();
    let rs = read_responses(&mut s, 2);
    assert_eq!(rs[0].status, 200);
    assert_eq!(rs[0].text(), "hello world");
    assert_eq!(rs[1].text(), "hello");
}

#[test]
fn chunked_body_arriving_byte_by_byte() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    for b in b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(read_responses(&mut s, 1)[0].text(), "abcde");
}

#[test]
fn body_pieces_share_the_receive_buffer() {
    // A large body arrives in several reads; the app sees it piece by piece.
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    let body = vec![b'x'; 200_000];
    s.write_all(format!("POST /chunks HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes())
        .unwrap();
    s.write_all(&body).unwrap();
    let r = read_responses(&mut s, 1).remove(0);
    let sizes: Vec<usize> = r.text().split(',').map(|x| x.parse().unwrap()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 200_000);
    assert!(sizes.len() > 1);
}

#[test]
fn unread_small_body_is_drained_and_connection_kept() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nabcde").unwrap();
    s.write_all(b"POST /ignore HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        .unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let rs = read_responses(&mut s, 3);
    assert_eq!(rs[0].text(), "ignored");
    assert_eq!(rs[1].text(), "ignored");
    assert_eq!(rs[2].text(), "hello");
}

#[test]
fn unread_large_body_closes_the_connection() {
    let mut cfg = settings();
    cfg.max_drain = 1000;
    let srv = start(cfg, app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n").unwrap();
    let _ = s.write_all(&vec![b'a'; 100_000]);
    let (out, closed) = read_to_close(&mut s);
    assert!(closed);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("connection: close"), "{out}");
}

#[test]
fn expect_100_continue_is_answered_when_the_app_reads() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"ping").unwrap();
    assert_eq!(read_responses(&mut s, 1)[0].text(), "ping");
}

#[test]
fn expect_100_continue_not_sent_when_the_app_ignores_the_body() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let (out, closed) = read_to_close(&mut s);
    assert!(closed);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(!out.contains("100 Continue"));
}

#[test]
fn head_has_length_but_no_body() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"HEAD /hello HTTP/1.1\r\nHost: h\r\n\r\nGET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !String::from_utf8_lossy(&buf).ends_with("hello") || buf.windows(4).filter(|w| w == b"\r\n\r\n").count() < 2 {
        let n = s.read(&mut tmp).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&tmp[..n]);
    }
    let text = String::from_utf8(buf).unwrap();
    let first = text.split("\r\n\r\n").next().unwrap();
    assert!(first.contains("content-length: 5"), "{text}");
    assert!(text.split("\r\n\r\n").nth(1).unwrap().starts_with("HTTP/1.1 200"), "{text}");
}

#[test]
fn stream_response_is_chunked() {
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    s.write_all(b"GET /stream?4 HTTP/1.1\r\nHost: h\r\n\r\nGET /hello HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let rs = read_responses(&mut s, 2);
    assert_eq!(rs[0].header("transfer-encoding"), Some("chunked"));
    assert_eq!(rs[0].text(), "part0;part1;part2;part3;");
    assert_eq!(rs[1].text(), "hello");
}

#[test]
fn stream_is_cleaned_up_when_the_client_goes_away() {
    let srv = start(settings(), app);
    let before = RELEASED.load(Ordering::SeqCst);
    let mut s = connect(srv.addr);
    s.write_all(b"GET /stream?1000 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut buf = [0u8; 256];
    let _ = s.read(&mut buf).unwrap();
    drop(s);
    assert!(wait_for(10, || RELEASED.load(Ordering::SeqCst) > before), "cleanup did not run");
}

#[test]
fn file_response_whole_and_range() {
    let dir = std::env::temp_dir().join(format!("selvedge-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let srv = start(settings(), file_app(path));
    let mut s = connect(srv.addr);
    s.write_all(b"GET /f HTTP/1.1\r\nHost: h\r\n\r\nGET /f?10-19 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let rs = read_responses(&mut s, 2);
    assert_eq!(rs[0].body, data);
    assert_eq!(rs[1].status, 206);
    assert_eq!(rs[1].body, &data[10..20]);
}

#[test]
fn request_fields_and_lazy_segments() {
    let srv = start(settings(), app);
    let (out, _) =
        exchange(srv.addr, b"GET http://Example.com:81/info?q=1 HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n");
    assert!(
        out.contains("method=GET path=/info query=q=1 authority=Example.com:81 version=HTTP/1.1 segs=info"),
        "{out}"
    );
}

#[test]
fn app_connection_close_header_closes() {
    let srv = start(settings(), app);
    let (out, closed) = exchange(srv.addr, b"GET /close HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(closed && out.contains("connection: close") && out.ends_with("bye"), "{out}");
}

#[test]
fn app_panic_gives_500_and_the_server_lives() {
    let srv = start(settings(), app);
    let (out, closed) = exchange(srv.addr, b"GET /panic HTTP/1.1\r\nHost: h\r\n\r\n");
    assert!(closed && out.starts_with("HTTP/1.1 500 Internal Server Error\r\n"), "{out}");
    let (out, _) = exchange(srv.addr, b"GET /hello HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert!(out.ends_with("hello"));
}

#[test]
fn curl_get_post_and_keepalive() {
    let srv = start(settings(), app);
    let url = format!("http://{}/", srv.addr);
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http1.1", "-d", "posted-data", &format!("{url}echo"), &format!("{url}hello")])
        .output()
        .expect("curl is installed");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "posted-datahello");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--http1.1", "-v", &format!("{url}hello"), &format!("{url}stream?5")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hellopart0;part1;part2;part3;part4;");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Re-using existing connection"));
}

#[test]
fn stream_with_a_declared_length_is_not_chunked() {
    use selvedge::http::{header, StatusCode};
    use selvedge::{Request, Response};
    let srv = start(settings(), |req: Request| async move {
        let (declared, sent): (u64, &'static [u8]) = match req.path() {
            "/exact" => (10, b"0123456789"),
            "/short" => (10, b"01234"),
            _ => (4, b"0123456789"),
        };
        Response::stream(StatusCode::OK, move |mut w| async move {
            w.write(&sent[..sent.len().min(5)]).await?;
            if sent.len() > 5 {
                w.write(&sent[5..]).await?;
            }
            Ok(())
        })
        .header(header::CONTENT_LENGTH, declared)
    });
    // Exact: Content-Length framing, and the connection stays open.
    let mut s = connect(srv.addr);
    for _ in 0..2 {
        s.write_all(b"GET /exact HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let r = read_responses(&mut s, 1).remove(0);
        assert_eq!((r.status, &r.body[..]), (200, &b"0123456789"[..]));
        let h = &r.headers;
        assert!(h.iter().any(|(n, v)| n.eq_ignore_ascii_case("content-length") && v == "10"), "{h:?}");
        assert!(!h.iter().any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding")), "{h:?}");
    }
    // HEAD: the declared length, no body.
    s.write_all(b"HEAD /exact HTTP/1.1\r\nHost: x\r\n\r\nGET /exact HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"0123456789") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert_eq!(text.matches("content-length: 10\r\n").count(), 2, "{text}");
    // Short of its length: the connection closes after what was sent.
    let (out, closed) = exchange(srv.addr, b"GET /short HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(closed && out.ends_with("\r\n\r\n01234"), "{out:?}");
    // Longer than its length: only the declared bytes go out, then the close.
    let (out, closed) = exchange(srv.addr, b"GET /long HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(closed && out.ends_with("\r\n\r\n"), "{out:?}");
}
