//! Attack replays over real sockets that the engine must cut short (bench/attacks/ replays
//! the same classes against selvedge, h2o and nginx):
//!
//! - a zero-window HTTP/2 client is closed at `send_timeout`, with a GOAWAY before the FIN,
//!   whether or not it sends PINGs (chatter is not progress);
//! - a request body far below `min_body_rate` is cut within seconds, not at `body_timeout`,
//!   and an app that answers without reading the body has its answer sent at once
//!   (HTTP/1.1 and HTTP/2);
//! - an HPACK bomber that stays under the stream limits is cut off with
//!   GOAWAY(ENHANCE_YOUR_CALM) at its first bomb;
//! - a stream that depends on itself (MadeYouReset's PRIORITY variant) ends the connection
//!   with GOAWAY(PROTOCOL_ERROR) at the first such frame.
//!
//! Each reproduces a fault the attack replays found (issue 16) and fails on the code
//! before its fix.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::h2::{raw, Client};
use common::{connect, settings, start};
use selvedge::http::{header, Method, StatusCode};
use selvedge::{Request, Response};
use selvedge_proto::h2::frame::{kind, Frame, Reason};

/// A static-file route's answers: the page for GET and HEAD, 405 for other methods without
/// reading the body (as `selvedge serve` answers `POST /index.html`); the common test app
/// elsewhere (`/echo` reads the whole body).
async fn site(req: Request) -> Response {
    if req.path() != "/index.html" {
        return common::app::app(req).await;
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Response::bytes(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed\n")
            .header(header::ALLOW, "GET, HEAD")
            .header(header::CONTENT_TYPE, "text/plain");
    }
    Response::bytes(StatusCode::OK, "<html>page</html>").header(header::CONTENT_TYPE, "text/html")
}

/// What a client saw over a stretch of time: frames with their arrival times, and when (if)
/// the server closed the connection.
struct Seen {
    frames: Vec<(Duration, Frame)>,
    closed: Option<Duration>,
}

impl Seen {
    fn goaway(&self) -> Option<(Duration, Reason)> {
        self.frames.iter().find_map(|(t, f)| match f {
            Frame::GoAway(g) => Some((*t, g.reason)),
            _ => None,
        })
    }

    fn reset(&self, stream: u32) -> Option<(Duration, Reason)> {
        self.frames.iter().find_map(|(t, f)| match f {
            Frame::RstStream(r) if r.stream == stream => Some((*t, r.reason)),
            _ => None,
        })
    }
}

/// Reads frames until the server closes or `max` passes since `t0`, calling `tick` between
/// reads (every ~50 ms) to let the client act; stops early once `done` holds.
fn watch(
    c: &mut Client,
    t0: Instant,
    max: Duration,
    mut tick: impl FnMut(&mut Client, Duration),
    done: impl Fn(&Seen) -> bool,
) -> Seen {
    let mut seen = Seen { frames: Vec::new(), closed: None };
    c.sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    while t0.elapsed() < max && !done(&seen) {
        tick(c, t0.elapsed());
        match c.next() {
            Some(f) => seen.frames.push((t0.elapsed(), f)),
            None => {
                // A read timeout, or the end: peek to tell them apart.
                match c.sock.peek(&mut [0u8; 1]) {
                    Ok(0) => {
                        seen.closed = Some(t0.elapsed());
                        break;
                    }
                    Err(e) if e.kind() != ErrorKind::WouldBlock && e.kind() != ErrorKind::TimedOut => {
                        seen.closed = Some(t0.elapsed());
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    seen
}

// ---------------------------------------------------------------- zero window (fix 1)

/// A client with window 0 on every stream (SETTINGS_INITIAL_WINDOW_SIZE = 0), never sending
/// WINDOW_UPDATE: the response's head goes out, its body never can. With `pings`, the client
/// chatters (a PING every 100 ms, whose ACKs the server does write): that must not count as
/// progress.
fn zero_window(pings: bool) {
    let mut cfg = settings();
    cfg.send_timeout = Duration::from_secs(1);
    let srv = start(cfg, site);
    let mut c = Client::connect(srv.addr, &[(0x4, 0)]);
    c.get(1, "/index.html");
    let t0 = Instant::now();
    let mut next_ping = Duration::ZERO;
    let seen = watch(
        &mut c,
        t0,
        Duration::from_secs(5),
        |c, t| {
            if pings && t >= next_ping {
                c.send(&raw(kind::PING, 0, 0, b"chatter!"));
                next_ping = t + Duration::from_millis(100);
            }
        },
        |_| false,
    );
    let closed = seen.closed.expect("the connection is closed within 5 s");
    let (at, reason) = seen.goaway().expect("a GOAWAY before the close");
    assert_eq!(reason, Reason::ENHANCE_YOUR_CALM, "GOAWAY code");
    assert!(at >= Duration::from_millis(900) && at <= Duration::from_millis(2000), "GOAWAY at {at:?}");
    assert!(closed >= at && closed <= Duration::from_millis(2500), "closed at {closed:?}, GOAWAY at {at:?}");
}

#[test]
fn zero_window_is_closed_at_send_timeout_with_goaway() {
    zero_window(false);
}

#[test]
fn zero_window_with_pings_is_closed_at_send_timeout_with_goaway() {
    zero_window(true);
}

// ---------------------------------------------------------------- slow bodies (fix 2)

/// An HTTP/1.1 POST with `Content-Length: 8192` whose body comes at 100 B/s (50 bytes every
/// 500 ms, far below the default 256 B/s minimum). Returns when the first response byte
/// arrived (and the response so far) and when the server closed, within 6 s.
fn h1_slow_post(path: &str) -> (Option<Duration>, String, Option<Duration>) {
    let srv = start(settings(), site);
    let mut s = connect(srv.addr);
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let t0 = Instant::now();
    let head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 8192\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let (mut first, mut closed, mut got) = (None, None, Vec::new());
    let mut sent = 0;
    let mut next = Duration::ZERO;
    while t0.elapsed() < Duration::from_secs(6) && closed.is_none() {
        if t0.elapsed() >= next && sent < 8192 {
            if s.write_all(&[b'a'; 50]).is_err() {
                closed = Some(t0.elapsed());
                break;
            }
            sent += 50;
            next += Duration::from_millis(500);
        }
        closed = read_some(&mut s, &mut got, &mut first, t0);
    }
    (first, String::from_utf8_lossy(&got).into_owned(), closed)
}

/// One read: appends to `got`, notes the first byte's time; returns when the peer closed.
fn read_some(s: &mut TcpStream, got: &mut Vec<u8>, first: &mut Option<Duration>, t0: Instant) -> Option<Duration> {
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => Some(t0.elapsed()),
        Ok(n) => {
            first.get_or_insert(t0.elapsed());
            got.extend_from_slice(&buf[..n]);
            None
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => None,
        Err(_) => Some(t0.elapsed()),
    }
}

#[test]
fn h1_answer_without_reading_goes_out_at_once_and_a_slow_body_is_cut() {
    let (first, got, closed) = h1_slow_post("/index.html");
    let first = first.expect("an answer");
    assert!(got.starts_with("HTTP/1.1 405 "), "{got}");
    // Before the body's second piece (sent at 500 ms): the answer did not wait for it.
    assert!(first < Duration::from_millis(450), "405 after {first:?}");
    let closed = closed.expect("closed within 6 s");
    assert!(closed <= Duration::from_secs(5), "closed after {closed:?}");
    assert_eq!(got.matches("HTTP/1.1 ").count(), 1, "{got}");
}

#[test]
fn h1_body_far_below_min_rate_is_cut_long_before_body_timeout() {
    // /echo reads the whole body: the client is the slow one.
    let (_, got, closed) = h1_slow_post("/echo");
    let closed = closed.expect("closed within 6 s");
    assert!(closed <= Duration::from_secs(5), "closed after {closed:?}");
    assert!(!got.contains(" 200 "), "{got}");
}

/// The HTTP/2 version: POST with content-length 8192 on stream 1, 50 bytes of DATA every
/// 500 ms; returns what was seen within 6 s (stops once stream 1 is reset).
fn h2_slow_post(path: &str) -> (common::TestServer, Client, Seen) {
    let srv = start(settings(), site);
    let mut c = Client::connect(srv.addr, &[]);
    let f = c.request_frame(1, "POST", path, &[("content-length", "8192")], false);
    c.send(&f);
    let t0 = Instant::now();
    let mut sent = 0;
    let mut next = Duration::ZERO;
    let seen = watch(
        &mut c,
        t0,
        Duration::from_secs(6),
        |c, t| {
            if t >= next && sent < 8192 {
                c.send(&raw(kind::DATA, 0, 1, &[b'a'; 50]));
                sent += 50;
                next = t + Duration::from_millis(500);
            }
        },
        |s| s.reset(1).is_some(),
    );
    (srv, c, seen)
}

fn h2_status(c: &mut Client, seen: &Seen, stream: u32) -> Option<(Duration, String)> {
    seen.frames.iter().find_map(|(t, f)| match f {
        Frame::Headers(h) if h.stream == stream => Some((*t, c.status(h))),
        _ => None,
    })
}

#[test]
fn h2_answer_without_reading_is_followed_by_a_reset_of_the_slow_body() {
    let (_srv, mut c, seen) = h2_slow_post("/index.html");
    let (at, status) = h2_status(&mut c, &seen, 1).expect("an answer");
    assert_eq!(status, "405");
    // Before the body's second piece (sent at 500 ms): the answer did not wait for it.
    assert!(at < Duration::from_millis(450), "405 after {at:?}");
    // The app never asked for the body: what follows the answer is drained under the body
    // clock, as for an HTTP/1.1 body left unread (and as for an app that read part of it),
    // so a body far below the minimum rate is cut within the clock's grace, not the
    // body timeout. (The stream is not reset at once: frames the client sent before it saw
    // the answer are still the stream's, and a malformed one gets its PROTOCOL_ERROR.)
    let (at, reason) = seen.reset(1).expect("stream 1 reset within 6 s");
    assert_eq!(reason, Reason::CANCEL);
    assert!(at <= Duration::from_secs(5), "reset after {at:?}");
    assert!(seen.goaway().is_none() && seen.closed.is_none(), "only the stream ends");
}

#[test]
fn h2_body_far_below_min_rate_is_reset_long_before_body_timeout() {
    let (_srv, _c, seen) = h2_slow_post("/echo");
    let (at, reason) = seen.reset(1).expect("stream 1 reset within 6 s");
    assert_eq!(reason, Reason::CANCEL);
    assert!(at <= Duration::from_secs(5), "reset after {at:?}");
    assert!(seen.closed.is_none(), "the connection stays");
}

// ---------------------------------------------------------------- HPACK bomb (fix 3)

#[test]
fn polite_hpack_bomber_is_cut_off_at_the_first_bomb() {
    let srv = start(settings(), site);
    let mut c = Client::connect(srv.addr, &[]);
    // Stream 1 stores a 4,000-byte field in the server's dynamic table (entry 62):
    // :method GET, :scheme http, :path /, :authority test (not indexed), then a literal with
    // incremental indexing.
    let mut first = vec![0x82, 0x86, 0x84, 0x01, 0x04, b't', b'e', b's', b't'];
    first.extend_from_slice(&[0x40, 0x06]);
    first.extend_from_slice(b"x-bomb");
    first.extend_from_slice(&[0x7f, 0xa1, 0x1e]); // 4,000 = 127 + 3,873
    first.extend(std::iter::repeat_n(b'v', 4000));
    let mut frames = Vec::new();
    selvedge_proto::h2::frame::Headers::encode(1, &first, true, 16_384, &mut frames);
    c.send(&frames);
    // Each bomb references entry 62 until its block fills a frame: ~16k references, some
    // 66 MB decoded, far over the 64 KiB header list limit. One at a time: the client waits
    // for each answer, staying under every stream limit.
    let mut bomb = vec![0x82, 0x86, 0x84, 0x01, 0x04, b't', b'e', b's', b't'];
    bomb.resize(16_384, 0xbe);
    let (mut refused, mut goaway) = (0usize, None);
    'bombs: for i in 1..=200u32 {
        let id = 2 * i + 1;
        let mut f = Vec::new();
        selvedge_proto::h2::frame::Headers::encode(id, &bomb, true, 16_384, &mut f);
        c.send(&f);
        while let Some(f) = c.next() {
            match f {
                Frame::Headers(h) if h.stream == id => {
                    assert_eq!(c.status(&h), "431");
                    refused += 1;
                    continue 'bombs;
                }
                Frame::Headers(h) => {
                    c.status(&h); // keeps the HPACK context in step
                }
                Frame::GoAway(g) => {
                    goaway = Some(g.reason);
                    break 'bombs;
                }
                _ => {}
            }
        }
        panic!("no answer to bomb {i}");
    }
    assert_eq!(goaway, Some(Reason::ENHANCE_YOUR_CALM), "after {refused} answers of 431");
    // None: a block that decodes to far more than the header list limit spends the whole
    // budget for refused blocks at once.
    assert_eq!(refused, 0, "answers of 431 before the GOAWAY");
    assert!(c.next().is_none(), "the connection is closed after the GOAWAY");
}

// ---------------------------------------------------------------- self-dependent PRIORITY

#[test]
fn self_dependent_priority_ends_the_connection_at_once() {
    let srv = start(settings(), site);
    let mut c = Client::connect(srv.addr, &[]);
    let t0 = Instant::now();
    let mut f = c.request_frame(1, "POST", "/echo", &[], false);
    f.extend(raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 1, 15]));
    c.send(&f);
    let mut resets = 0;
    let reason = loop {
        match c.next() {
            Some(Frame::GoAway(g)) => break Some(g.reason),
            Some(Frame::RstStream(_)) => resets += 1,
            Some(_) => {}
            None => break None,
        }
    };
    assert_eq!(reason, Some(Reason::PROTOCOL_ERROR), "after {resets} resets");
    assert_eq!(resets, 0);
    assert!(c.next().is_none(), "the connection is closed after the GOAWAY");
    assert!(t0.elapsed() < Duration::from_secs(1));
}
