//! Strict input handling (RFC 9112): each bad request gets its status and a close, and no
//! second request is ever parsed from what follows.

mod common;

use common::app::app;
use common::*;

/// (name, request bytes, expected status). Each request is followed by a valid pipelined
/// request that must never be answered.
const CASES: &[(&str, &[u8], u16)] = &[
    ("obs-fold", b"GET /hello HTTP/1.1\r\nHost: h\r\nX: a\r\n  b\r\n\r\n", 400),
    ("bare LF in request line", b"GET /hello HTTP/1.1\nHost: h\r\n\r\n", 400),
    ("bare LF after header", b"GET /hello HTTP/1.1\r\nHost: h\n\r\n", 400),
    ("bare CR in header value", b"GET /hello HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400),
    ("whitespace before colon", b"GET /hello HTTP/1.1\r\nHost : h\r\n\r\n", 400),
    ("leading whitespace header", b"GET /hello HTTP/1.1\r\n Host: h\r\n\r\n", 400),
    ("invalid token in name", b"GET /hello HTTP/1.1\r\nHost: h\r\nX{y}: z\r\n\r\n", 400),
    ("invalid method", b"GE@T /hello HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("NUL in value", b"GET /hello HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n", 400),
    ("NUL in target", b"GET /hel\0lo HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("fragment in target", b"GET /hello#top HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("fragment in absolute-form", b"GET http://h/hello#top HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("missing Host", b"GET /hello HTTP/1.1\r\nX: y\r\n\r\n", 400),
    ("two Hosts", b"GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    (
        "CL and TE",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    (
        "repeated CL same value",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        400,
    ),
    (
        "repeated CL different",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        400,
    ),
    ("CL list", b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\nhello", 400),
    ("CL non-numeric", b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: five\r\n\r\nhello", 400),
    ("CL negative", b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: -5\r\n\r\nhello", 400),
    ("TE identity", b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\nhello", 400),
    (
        "TE chunked, identity",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        400,
    ),
    ("TE xchunked", b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400),
    ("TE gzip, chunked", b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    ("TE in HTTP/1.0", b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (
        "bad chunk size",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    (
        "oversized chunk size",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\nx\r\n0\r\n\r\n",
        400,
    ),
    (
        "bad chunk extension",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;\x01\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk data overrun",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
        400,
    ),
    (
        "chunk bare LF",
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        400,
    ),
    ("bad chunk unread by app", b"POST /ignore HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ("HTTP/2.0 version", b"GET /hello HTTP/2.0\r\nHost: h\r\n\r\n", 505),
    ("HTTP/1.2 version", b"GET /hello HTTP/1.2\r\nHost: h\r\n\r\n", 505),
    ("garbage version", b"GET /hello HTTX/1.1\r\nHost: h\r\n\r\n", 400),
    ("HTTP/0.9", b"GET /hello\r\n\r\n", 400),
    ("asterisk with GET", b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute-form bad scheme", b"GET ftp://h/hello HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute-form userinfo", b"GET http://u:p@h/hello HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("expect unknown", b"POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx", 417),
];

const NEXT: &[u8] = b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n";

#[test]
fn each_bad_request_gets_its_status_and_a_close() {
    let srv = start(settings(), app);
    let mut failures = Vec::new();
    for (name, req, status) in CASES {
        let mut all = req.to_vec();
        all.extend_from_slice(NEXT);
        let (out, closed) = exchange(srv.addr, &all);
        let got: u16 = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let answers = out.matches("HTTP/1.1 ").count();
        if got != *status || !closed || answers != 1 || !out.contains("connection: close") {
            failures.push(format!("{name}: want {status}, got {got} closed={closed} answers={answers}: {out:?}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CASES.len(), failures.join("\n"));
    eprintln!("{} bad-request cases passed", CASES.len());
}

/// RFC 9112 §3: a request line that is not `method SP request-target SP HTTP-version` is
/// answered 400 with a lingering close, however little it looks like HTTP; only the start
/// of an HTTP/2 preface that goes wrong (the peer does not speak HTTP/1.1) gets no answer.
#[test]
fn malformed_request_lines_get_400_but_a_broken_preface_a_bare_close() {
    let srv = start(settings(), app);
    let lines: &[&[u8]] = &[
        b"GET /hello FOO/1.1\r\nHost: h\r\n\r\n",
        b"GET /hello HTTP/1.1 extra\r\nHost: h\r\n\r\n",
        b"hello\r\n\r\n",
        b"GET\r\n\r\n",
        b"\x16\x03\x01\x00\x2a\x01\x00\x00\x26\x03\x03 a TLS ClientHello on the cleartext port",
        b"PRI / HTTP/1.1 \r\n\r\n",
    ];
    for req in lines {
        let (out, closed) = exchange(srv.addr, req);
        assert!(closed, "{req:?}: not closed");
        assert!(
            out.starts_with("HTTP/1.1 400 Bad Request\r\n") && out.contains("connection: close"),
            "{req:?}: {out:?}"
        );
        assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{req:?}: {out:?}");
    }
    // A broken HTTP/2 preface (its request line, then something else; or a line of its
    // shape: not HTTP/1.x, no fields): no HTTP/1.1 answer at all.
    let prefaces: &[&[u8]] = &[
        b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\nGET /hello HTTP/1.1\r\nHost: h\r\n\r\n",
        b"INVALID CONNECTION PREFACE\r\n\r\n",
    ];
    for req in prefaces {
        let (out, closed) = exchange(srv.addr, req);
        assert!(closed && out.is_empty(), "{req:?}: {out:?}");
    }
}

#[test]
fn long_target_gets_414() {
    let srv = start(settings(), app);
    let mut req = b"GET /".to_vec();
    req.extend(std::iter::repeat_n(b'a', 9000));
    req.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
    let (out, closed) = exchange(srv.addr, &req);
    assert!(closed && out.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{out}");
}

#[test]
fn large_headers_get_431() {
    let srv = start(settings(), app);
    let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
    req.extend(std::iter::repeat_n(b'a', 20_000));
    req.extend_from_slice(b"\r\n\r\n");
    let (out, closed) = exchange(srv.addr, &req);
    assert!(closed && out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{out}");

    let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    for i in 0..150 {
        req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    let (out, _) = exchange(srv.addr, &req);
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
}

#[test]
fn body_over_limit_gets_413() {
    let mut cfg = settings();
    cfg.body.max_body = 100;
    let srv = start(cfg, app);
    let (out, closed) = exchange(srv.addr, b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n");
    assert!(closed && out.starts_with("HTTP/1.1 413 Payload Too Large\r\n"), "{out}");
    let mut req = b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(b"64\r\n");
    req.extend(std::iter::repeat_n(b'x', 100));
    req.extend_from_slice(b"\r\n1\r\nx\r\n0\r\n\r\n");
    let (out, closed) = exchange(srv.addr, &req);
    assert!(closed && out.starts_with("HTTP/1.1 413 "), "{out}");
}

#[test]
fn custom_error_response_and_exception_hooks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let seen = Arc::new(AtomicUsize::new(0));
    let mut cfg = settings();
    let s2 = seen.clone();
    cfg.on_exception = Some(Arc::new(move |e: &selvedge::Error| {
        assert!(e.is_bad_request() || e.is_body());
        s2.fetch_add(1, Ordering::SeqCst);
    }));
    cfg.error_response = Some(Arc::new(|status, _e: &selvedge::Error| {
        selvedge::Response::bytes(status, format!("custom {}", status.as_u16()))
    }));
    let srv = start(cfg, app);
    let (out, _) = exchange(srv.addr, b"GET / HTTP/1.1\r\nHost : h\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 400 ") && out.ends_with("custom 400"), "{out}");
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

#[test]
fn garbage_never_hangs_or_panics() {
    // Garbage may leave a partial second request: a short header timeout closes those.
    let mut cfg = settings();
    cfg.header_timeout = std::time::Duration::from_millis(200);
    let srv = start(cfg, app);
    // Each connection is closed by the server within the header timeout (plus a linger),
    // never left to the idle timeout (60 s).
    let closes = |req: &[u8]| {
        let t = std::time::Instant::now();
        let (out, closed) = exchange(srv.addr, req);
        let status: u16 = out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(status == 200 || (400..600).contains(&status), "{req:?} -> {out:?}");
        assert!(closed && t.elapsed() < std::time::Duration::from_secs(5), "{req:?}: {:?}", t.elapsed());
    };
    let mut x: u64 = 0x243f_6a88_85a3_08d3;
    let step = |x: &mut u64| {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
    };
    for _ in 0..60 {
        // Advanced once per request too: a length of 0 would otherwise repeat for good.
        step(&mut x);
        let mut req = b"GET /hello HTTP/1.1\r\nHost: h\r\n".to_vec();
        for _ in 0..(x % 64) {
            step(&mut x);
            req.push(x as u8);
        }
        req.extend_from_slice(b"\r\n\r\n");
        closes(&req);
    }
    // A whole request followed by an empty line, or by the start of the next request: the
    // rest of that head is due within the header timeout.
    closes(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\n\r\n");
    closes(b"GET /hello HTTP/1.1\r\nHost: h\r\n\r\nGET /next HT");
    // Still serving.
    let (out, _) = exchange(srv.addr, b"GET /hello HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert!(out.ends_with("hello"));
}

/// An answer that closes the connection while the client is still sending a large body
/// reaches the client: the lingering close reads until the client stops (within
/// `linger_timeout`), however much it still sends, instead of closing with its bytes unread,
/// which resets the connection under the answer (the client's writes fail, and an answer it
/// has not read yet is lost).
#[test]
fn an_early_answer_survives_a_large_body() {
    use std::io::Write;
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    let body = 32usize << 20;
    s.write_all(format!("POST /ignore HTTP/1.1\r\nHost: h\r\nContent-Length: {body}\r\n\r\n").as_bytes()).unwrap();
    let chunk = vec![b'x'; 64 << 10];
    for sent in (0..body).step_by(chunk.len()) {
        s.write_all(&chunk).unwrap_or_else(|e| panic!("write at {sent} of {body}: {e}"));
    }
    let (out, closed) = read_to_close(&mut s);
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.ends_with("ignored"), "{out:?}");
    assert!(closed);
}
