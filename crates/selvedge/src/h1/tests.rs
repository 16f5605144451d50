//! The HTTP/1.1 connection state machine driven without a socket: a scripted peer feeds its
//! bytes in the pieces a test chooses (byte by byte, or split at every point), a scripted
//! app answers, and the output is checked byte for byte.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONNECTION, DATE};
use http::{StatusCode, Version};

use super::conn::{Conn, Next, Returned, Send, Start, StreamFraming, BATCH_MAX};
use super::inbound::{Lent, Step, CONTINUE};
use crate::app::body::Body;
use crate::app::request::Request;
use crate::app::response::{Response, ResponseBody};
use crate::io::sys::PeerAddr;
use crate::settings::Settings;
use crate::time::timeout::NO_DEADLINE;

/// What the app does with a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Reads all of it.
    Read,
    /// Leaves it unread (the connection drains it, or closes).
    Ignore,
    /// Keeps it beyond its response.
    Keep,
}

/// A request as the app saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    target: String,
    version: Version,
    body: Vec<u8>,
}

/// How the connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Still open, waiting for bytes the script does not have.
    Waiting,
    /// Closed after its output; `linger`: with a lingering close.
    Closed { linger: bool },
    /// Handed over to HTTP/2; the rest of the input is HTTP/2's.
    Handoff,
}

/// The scripted peer and app around one [`Conn`].
struct Script {
    conn: Conn,
    /// Pieces the peer has yet to send.
    input: VecDeque<Vec<u8>>,
    /// Everything the connection wrote.
    out: Vec<u8>,
    seen: Vec<Seen>,
    now: u64,
    /// The app's answers so far (the rejections included).
    responses: usize,
    shutting_down: bool,
}

/// A `Date` of our own, so the output is the same whenever the test runs.
const FIXED_DATE: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

fn cfg() -> Arc<Settings> {
    Arc::new(Settings { server_name: Some("t"), ..Settings::default() })
}

/// The answer the default app gives: the target echoed.
fn echo(req: &Request) -> (Use, Response) {
    let body = format!("{} {}", req.method(), req.target());
    (Use::Read, Response::bytes(StatusCode::OK, body).header(DATE, FIXED_DATE))
}

impl Script {
    fn new(cfg: Arc<Settings>, pieces: Vec<Vec<u8>>) -> Script {
        Script {
            conn: Conn::new(cfg, bytes::BytesMut::new(), 0),
            input: pieces.into(),
            out: Vec::new(),
            seen: Vec::new(),
            now: 0,
            responses: 0,
            shutting_down: false,
        }
    }

    /// The input split at `cuts` (offsets, ascending).
    fn split(input: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut pieces = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&input.len())) {
            if c > at {
                pieces.push(input[at..c].to_vec());
                at = c;
            }
        }
        pieces
    }

    /// The next piece of input, fed into the connection's read buffer; `false` when the
    /// script has none left.
    fn feed(&mut self) -> bool {
        let Some(piece) = self.input.pop_front() else { return false };
        self.now += 1;
        self.conn.read_buf().extend_from_slice(&piece);
        self.conn.handle_read(piece.len(), self.now);
        true
    }

    /// Reads the lent body as the app's reader does, with the peer's pieces.
    fn read_body(&mut self, lent: &mut Lent) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            match lent.inbound.decode(&mut lent.buf) {
                Some(Step::Data(b)) => body.extend_from_slice(&b),
                Some(_) => return body,
                None => match lent.inbound.wait(self.now) {
                    Step::Continue => self.out.extend_from_slice(CONTINUE),
                    _ => {
                        let Some(piece) = self.input.pop_front() else { return body };
                        self.now += 1;
                        lent.buf.extend_from_slice(&piece);
                        if lent.inbound.handle_read(piece.len(), self.now).is_some() {
                            return body;
                        }
                    }
                },
            }
        }
    }

    /// Sends `res`, as the driver would (streams write "hello" in one chunk).
    fn respond(&mut self, res: Response) {
        self.responses += 1;
        let send = match self.conn.respond(res, self.shutting_down) {
            Ok(s) => s,
            Err(_) => {
                let res = Response::error(StatusCode::INTERNAL_SERVER_ERROR).header(DATE, FIXED_DATE);
                self.conn.respond(res, true).expect("an error page can always be sent")
            }
        };
        match send {
            Send::Buffered => {}
            Send::Bytes(b) => {
                self.out.extend_from_slice(self.conn.write_buf());
                self.out.extend_from_slice(&b);
                self.conn.handle_written();
            }
            Send::File(_) => panic!("no files here"),
            Send::Stream(_, framing) => {
                self.out.extend_from_slice(self.conn.write_buf());
                self.conn.handle_written();
                match framing {
                    StreamFraming::Chunked => self.out.extend_from_slice(b"5\r\nhello\r\n"),
                    _ => self.out.extend_from_slice(b"hello"),
                }
                let complete = !matches!(framing, StreamFraming::Sized(n) if n != 5);
                self.conn.stream_done(framing, Ok(complete));
            }
            Send::Switch(_, flag) => {
                self.out.extend_from_slice(self.conn.write_buf());
                self.conn.handle_written();
                flag.store(true, std::sync::atomic::Ordering::Release);
                self.out.extend_from_slice(b"<tunnel>");
            }
        }
    }

    /// Runs the connection until it closes, hands over, or waits for input the script does
    /// not have. `app` answers each request.
    fn run(&mut self, mut app: impl FnMut(&Request) -> (Use, Response)) -> End {
        loop {
            let next = self.conn.poll(self.now);
            match next {
                Next::Request => {
                    let mut lent = None;
                    let mut req = None;
                    let start = self.conn.start(
                        self.shutting_down,
                        &PeerAddr::Unix,
                        None,
                        |l| {
                            lent = Some(l);
                            Body::empty()
                        },
                        |r| req = Some(r),
                    );
                    match start {
                        Start::App => {
                            let req = req.expect("the request went to the app");
                            let (body_use, res) = app(&req);
                            let mut seen = Seen {
                                method: req.method().to_string(),
                                target: req.target().to_string(),
                                version: req.version(),
                                body: Vec::new(),
                            };
                            let returned = match lent {
                                None => Returned::None,
                                Some(mut lent) => match body_use {
                                    Use::Read => {
                                        seen.body = self.read_body(&mut lent);
                                        Returned::Back(lent)
                                    }
                                    Use::Ignore => Returned::Back(lent),
                                    Use::Keep => Returned::Kept,
                                },
                            };
                            self.seen.push(seen);
                            let mut res = res;
                            if self.conn.app_done(returned, false) {
                                loop {
                                    match self.conn.poll(self.now) {
                                        Next::Respond => break,
                                        Next::Fail(status) => {
                                            res = Response::error(StatusCode::from_u16(status).unwrap())
                                                .header(DATE, FIXED_DATE);
                                            break;
                                        }
                                        Next::Read { .. } => {
                                            if !self.feed() {
                                                return End::Waiting;
                                            }
                                        }
                                        Next::Close { linger } => {
                                            self.out.extend_from_slice(self.conn.write_buf());
                                            return End::Closed { linger };
                                        }
                                        other => panic!("while draining: {other:?}"),
                                    }
                                }
                            }
                            self.respond(res);
                        }
                        Start::H2c(req) => {
                            self.seen.push(Seen {
                                method: req.method().to_string(),
                                target: req.target().to_string(),
                                version: req.version(),
                                body: Vec::new(),
                            });
                            self.out.extend_from_slice(self.conn.write_buf());
                            self.conn.handle_written();
                            return End::Handoff;
                        }
                        Start::Reject(status, _) => self.respond(Response::error(status).header(DATE, FIXED_DATE)),
                    }
                }
                Next::Flush => {
                    self.out.extend_from_slice(self.conn.write_buf());
                    self.conn.handle_written();
                }
                Next::Read { .. } => {
                    if !self.feed() {
                        return End::Waiting;
                    }
                }
                Next::Reject(e) => {
                    let (status, _) = super::conn::head_error(e);
                    self.respond(Response::error(status).header(DATE, FIXED_DATE));
                }
                Next::Close { linger } => {
                    self.out.extend_from_slice(self.conn.write_buf());
                    self.conn.handle_written();
                    return End::Closed { linger };
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }
}

/// Runs `input` in one piece, byte by byte, and split at every point (in two), and checks
/// that every way gives the same output, requests and end; returns the one-piece run.
fn every_split(input: &[u8], app: impl Fn(&Request) -> (Use, Response) + Copy) -> Script {
    let mut whole = Script::new(cfg(), vec![input.to_vec()]);
    let end = whole.run(app);
    let mut ways: Vec<Vec<Vec<u8>>> = vec![input.iter().map(|&b| vec![b]).collect()];
    for cut in 1..input.len() {
        ways.push(Script::split(input, &[cut]));
    }
    for pieces in ways {
        let desc = pieces.iter().map(Vec::len).collect::<Vec<_>>();
        let mut s = Script::new(cfg(), pieces);
        let e = s.run(app);
        assert_eq!(e, end, "pieces {desc:?}");
        assert_eq!(s.seen, whole.seen, "pieces {desc:?}");
        assert_eq!(s.text(), whole.text(), "pieces {desc:?}");
    }
    whole
}

const GET: &[u8] = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n";

fn ok_head(len: usize) -> String {
    format!("HTTP/1.1 200 OK\r\ndate: {FIXED_DATE}\r\nserver: t\r\ncontent-length: {len}\r\n\r\n")
}

#[test]
fn a_request_is_answered_and_the_connection_kept() {
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    assert_eq!(s.run(echo), End::Waiting);
    assert_eq!(s.text(), format!("{}GET /a", ok_head(6)));
    assert_eq!(s.seen[0].version, Version::HTTP_11);
}

#[test]
fn pipelined_requests_at_every_split_point() {
    let input = [GET, b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n", b"HEAD /c HTTP/1.1\r\nHost: h\r\n\r\n"].concat();
    let s = every_split(&input, echo);
    assert_eq!(s.seen.len(), 3);
    // HEAD: the head says how long the body would be; no body follows.
    assert_eq!(s.text(), format!("{}GET /a{}GET /b{}", ok_head(6), ok_head(6), ok_head(7)));
}

#[test]
fn pipelined_answers_go_out_in_one_batch() {
    let input = [GET, GET, GET].concat();
    let mut s = Script::new(cfg(), vec![input]);
    let mut flushes = 0;
    loop {
        match s.conn.poll(0) {
            Next::Request => {
                let mut req = None;
                assert!(matches!(
                    s.conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |r| req = Some(r)),
                    Start::App
                ));
                assert!(!s.conn.app_done(Returned::None, false));
                s.respond(echo(&req.unwrap()).1);
            }
            Next::Flush => {
                flushes += 1;
                assert_eq!(s.conn.write_buf().len(), 3 * (ok_head(6).len() + 6), "all three answers at once");
                s.conn.handle_written();
            }
            Next::Read { idle } => {
                assert!(idle);
                if !s.feed() {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(flushes, 1);
}

#[test]
fn a_batch_is_flushed_at_its_limit_before_more_is_parsed() {
    let n = BATCH_MAX / 1000 + 4;
    let input: Vec<u8> = std::iter::repeat_n(GET, n).flatten().copied().collect();
    let big = |_: &Request| (Use::Read, Response::bytes(StatusCode::OK, vec![b'x'; 1000]).header(DATE, FIXED_DATE));
    let mut s = Script::new(cfg(), vec![input]);
    let mut answered = 0;
    loop {
        match s.conn.poll(0) {
            Next::Request => {
                let mut req = None;
                s.conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |r| req = Some(r));
                s.conn.app_done(Returned::None, false);
                s.respond(big(&req.unwrap()).1);
                answered += 1;
            }
            Next::Flush => {
                assert!(answered == n || s.conn.write_buf().len() >= BATCH_MAX, "flushed early");
                s.conn.handle_written();
            }
            Next::Read { .. } => {
                if !s.feed() {
                    break;
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(answered, n);
}

#[test]
fn chunked_body_read_by_the_app_at_every_split_point() {
    let input = [
        &b"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nT: v\r\n\r\n"[..],
        GET,
    ]
    .concat();
    let s = every_split(&input, echo);
    assert_eq!(s.seen[0].body, b"hello world");
    assert_eq!(s.seen[1].target, "/a");
    assert_eq!(s.text(), format!("{}POST /up{}GET /a", ok_head(8), ok_head(6)));
}

#[test]
fn an_unread_body_is_drained_and_the_connection_kept() {
    let input = [&b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789"[..], GET].concat();
    let ignore = |req: &Request| (Use::Ignore, echo(req).1);
    let s = every_split(&input, ignore);
    assert_eq!(s.seen.len(), 2, "the body was not taken for a request");
    assert_eq!(s.text(), format!("{}POST /up{}GET /a", ok_head(8), ok_head(6)));
}

#[test]
fn an_unread_body_over_the_drain_limit_closes_with_a_linger() {
    let c = Arc::new(Settings { max_drain: 4, server_name: Some("t"), ..Settings::default() });
    let input = [&b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789"[..], GET].concat();
    let mut s = Script::new(c, vec![input]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: true });
    assert!(s.text().contains("connection: close\r\n"), "{}", s.text());
    assert_eq!(s.seen.len(), 1);
    // Chunked, no length known up front: drained until past the limit.
    let c = Arc::new(Settings { max_drain: 4, server_name: Some("t"), ..Settings::default() });
    let input = b"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
    let mut s = Script::new(c, vec![input.to_vec(), GET.to_vec()]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: true });
    assert_eq!(s.responses, 1);
}

#[test]
fn a_malformed_body_found_while_draining_is_answered_400() {
    // Buffered with the head: found before the answer, which becomes its 400.
    let head = &b"POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"[..];
    let mut s = Script::new(cfg(), vec![[head, b"zz\r\n"].concat()]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: true });
    assert!(s.text().starts_with("HTTP/1.1 400 Bad Request\r\n"), "{}", s.text());
    assert!(s.text().contains("connection: close\r\n"));
    assert_eq!(s.responses, 1);
    // Arriving after the answer went out: the connection just closes (with a linger).
    let mut s = Script::new(cfg(), vec![head.to_vec(), b"zz\r\n".to_vec(), GET.to_vec()]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: true });
    assert_eq!(s.text(), format!("{}POST /up", ok_head(8)));
    assert_eq!(s.responses, 1);
}

#[test]
fn an_answer_does_not_wait_for_an_unread_body() {
    // Half the body is here, the rest is not: the answer goes out before any more is read.
    let input = b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n01234";
    let mut s = Script::new(cfg(), vec![input.to_vec()]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Waiting);
    assert_eq!(s.text(), format!("{}POST /up", ok_head(8)));
    // The rest comes, then the next request, on the same connection.
    s.input.push_back(b"56789".to_vec());
    s.input.push_back(GET.to_vec());
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Waiting);
    assert_eq!(s.text(), format!("{}POST /up{}GET /a", ok_head(8), ok_head(6)));
    assert_eq!(s.seen.len(), 2);
}

#[test]
fn a_body_cut_off_while_draining_ends_after_the_answer() {
    let input = b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n01234";
    let mut s = Script::new(cfg(), vec![input.to_vec()]);
    s.input.push_back(Vec::new()); // the peer closes
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: false });
    assert_eq!(s.text(), format!("{}POST /up", ok_head(8)));
}

#[test]
fn expect_continue_is_sent_when_the_app_reads() {
    let input = b"PUT /up HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    let mut s = Script::new(cfg(), vec![input.to_vec(), b"hello".to_vec(), GET.to_vec()]);
    assert_eq!(s.run(echo), End::Waiting);
    assert_eq!(s.seen[0].body, b"hello");
    assert_eq!(s.text(), format!("HTTP/1.1 100 Continue\r\n\r\n{}PUT /up{}GET /a", ok_head(7), ok_head(6)));
}

#[test]
fn expect_continue_unread_closes_without_the_interim_answer() {
    let input = b"PUT /up HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    let mut s = Script::new(cfg(), vec![input.to_vec()]);
    assert_eq!(s.run(|req| (Use::Ignore, echo(req).1)), End::Closed { linger: true });
    assert!(!s.text().contains("100 Continue"));
    assert!(s.text().starts_with("HTTP/1.1 200 OK\r\n") && s.text().contains("connection: close\r\n"));
}

#[test]
fn http10_keeps_alive_only_when_asked() {
    let mut s = Script::new(cfg(), vec![b"GET /a HTTP/1.0\r\n\r\nGET /b HTTP/1.0\r\n\r\n".to_vec()]);
    assert_eq!(s.run(echo), End::Closed { linger: true }, "unread bytes follow: linger");
    assert_eq!(s.seen.len(), 1);
    assert!(s.text().contains("connection: close\r\n"));
    let mut s = Script::new(cfg(), vec![b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_vec()]);
    assert_eq!(s.run(echo), End::Waiting);
    assert_eq!(s.seen[0].version, Version::HTTP_10);
    assert!(s.text().contains("connection: keep-alive\r\n"));
}

#[test]
fn close_asked_by_either_side_or_shutdown() {
    let mut s = Script::new(cfg(), vec![b"GET /a HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n".to_vec()]);
    assert_eq!(s.run(echo), End::Closed { linger: false });
    assert!(s.text().contains("connection: close\r\n"));
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    assert_eq!(s.run(|req| (Use::Read, echo(req).1.header(CONNECTION, "close"))), End::Closed { linger: false });
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    s.shutting_down = true;
    assert_eq!(s.run(echo), End::Closed { linger: false });
    assert!(s.text().contains("connection: close\r\n"));
}

#[test]
fn h2c_upgrade_hands_over_with_the_rest_at_every_split_point() {
    let input = [
        &b"GET /u HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ]
    .concat();
    let s = every_split(&input, echo);
    assert_eq!(s.text(), "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n");
    assert_eq!(s.seen[0].version, Version::HTTP_2, "the request is HTTP/2's stream 1");
    // What HTTP/2 gets: the rest of what arrived (all of it when it came in one piece).
    assert_eq!(&s.conn.into_rbuf()[..], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    // Not during shutdown, nor with a body: then it is plain HTTP/1.1.
    let mut s = Script::new(cfg(), vec![input.clone()]);
    s.shutting_down = true;
    assert_eq!(s.run(echo), End::Closed { linger: true });
    assert!(s.text().starts_with("HTTP/1.1 200 OK\r\n"));
}

#[test]
fn upgrade_switches_only_a_request_that_asked() {
    let ws = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nclient bytes";
    let switch = |_: &Request| (Use::Keep, Response::stream(StatusCode::SWITCHING_PROTOCOLS, |_| async { Ok(()) }));
    let mut s = Script::new(cfg(), vec![ws.to_vec()]);
    assert_eq!(s.run(switch), End::Closed { linger: false });
    assert!(s.text().starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{}", s.text());
    assert!(s.text().contains("connection: upgrade\r\n") && s.text().ends_with("\r\n\r\n<tunnel>"));
    // A 101 to a request that did not ask: 500, and the connection closes.
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    assert_eq!(s.run(switch), End::Closed { linger: true });
    assert!(s.text().starts_with("HTTP/1.1 500 Internal Server Error\r\n"), "{}", s.text());
}

#[test]
fn an_invalid_head_is_answered_and_nothing_after_it_is_parsed() {
    for bad in [&b"GET /a HTTP/1.1\r\nHost : h\r\n\r\n"[..], b"GET /a#b HTTP/1.1\r\nHost: h\r\n\r\n", b"GET /a FOO\r\n"]
    {
        let input = [bad, GET].concat();
        let s = every_split(&input, echo);
        assert!(s.seen.is_empty(), "{:?}", s.seen);
        assert!(s.text().starts_with("HTTP/1.1 400 Bad Request\r\n") && s.text().contains("connection: close"));
        assert_eq!(s.responses, 1);
    }
}

#[test]
fn a_body_over_the_limit_is_refused_before_the_app() {
    let c = Arc::new(Settings {
        body: super::body::BodyLimits { max_body: 4, ..Default::default() },
        ..Settings::default()
    });
    let mut s = Script::new(c, vec![b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello".to_vec()]);
    assert_eq!(s.run(echo), End::Closed { linger: true });
    assert!(s.seen.is_empty());
    assert!(s.text().starts_with("HTTP/1.1 413 Payload Too Large\r\n"), "{}", s.text());
}

#[test]
fn a_kept_body_or_a_panic_ends_the_connection() {
    let input = [&b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"[..], GET].concat();
    let mut s = Script::new(cfg(), vec![input]);
    assert_eq!(s.run(|req| (Use::Keep, echo(req).1)), End::Closed { linger: true });
    assert_eq!(s.seen.len(), 1);
    // A panic: the driver answers 500 and `app_done` is told.
    let mut s = Script::new(cfg(), vec![[GET, GET].concat()]);
    assert_eq!(s.conn.poll(0), Next::Read { idle: true });
    assert!(s.feed());
    assert_eq!(s.conn.poll(1), Next::Request);
    s.conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |_| {});
    assert!(!s.conn.app_done(Returned::None, true));
    s.respond(Response::error(StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(s.conn.poll(0), Next::Close { linger: true });
}

#[test]
fn streams_are_framed_by_version_and_declared_length() {
    let stream = |req: &Request| {
        let res = Response::stream(StatusCode::OK, |_| async { Ok(()) }).header(DATE, FIXED_DATE);
        (Use::Read, if req.path() == "/sized" { res.header(http::header::CONTENT_LENGTH, 5u64) } else { res })
    };
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    assert_eq!(s.run(stream), End::Waiting);
    assert!(s.text().contains("transfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{}", s.text());
    let mut s = Script::new(cfg(), vec![b"GET /sized HTTP/1.1\r\nHost: h\r\n\r\n".to_vec()]);
    assert_eq!(s.run(stream), End::Waiting);
    assert!(s.text().ends_with("content-length: 5\r\n\r\nhello"), "{}", s.text());
    // HTTP/1.0 has no chunks: the stream ends with the connection.
    let mut s = Script::new(cfg(), vec![b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".to_vec()]);
    assert_eq!(s.run(stream), End::Closed { linger: false });
    assert!(s.text().contains("connection: close\r\n\r\nhello"), "{}", s.text());
    // Short of the declared length: only closing tells the client.
    let short = |_: &Request| {
        let res = Response::stream(StatusCode::OK, |_| async { Ok(()) }).header(http::header::CONTENT_LENGTH, 9u64);
        (Use::Read, res)
    };
    let mut s = Script::new(cfg(), vec![[GET, GET].concat()]);
    assert_eq!(s.run(short), End::Closed { linger: true });
    assert_eq!(s.seen.len(), 1);
}

#[test]
fn large_bodies_are_sent_from_their_own_memory() {
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    assert_eq!(s.conn.poll(0), Next::Read { idle: true });
    assert!(s.feed());
    assert_eq!(s.conn.poll(1), Next::Request);
    s.conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |_| {});
    s.conn.app_done(Returned::None, false);
    let big = Bytes::from(vec![b'x'; super::conn::COPY_BODY_MAX + 1]);
    match s.conn.respond(Response::bytes(StatusCode::OK, big.clone()), false) {
        Ok(Send::Bytes(b)) => assert_eq!(b, big),
        other => panic!("{other:?}"),
    }
    assert!(s.conn.write_buf().ends_with(b"\r\n\r\n"), "only the head is copied");
    let small = Response::bytes(StatusCode::OK, "small");
    assert!(matches!(s.conn.respond(small, false), Ok(Send::Buffered)));
    // Bodiless statuses send no body.
    let mut s = Script::new(cfg(), vec![GET.to_vec()]);
    s.run(|_| (Use::Read, Response::bytes(StatusCode::NOT_MODIFIED, "x").header(DATE, FIXED_DATE)));
    assert_eq!(s.text(), format!("HTTP/1.1 304 Not Modified\r\ndate: {FIXED_DATE}\r\nserver: t\r\n\r\n"));
    assert!(matches!(Response::new(StatusCode::OK).body(), ResponseBody::Empty));
}

#[test]
fn the_peer_leaving_mid_head_ends_quietly() {
    let mut s = Script::new(cfg(), vec![b"GET /a HTTP/1.1\r\nHo".to_vec(), Vec::new()]);
    assert_eq!(s.run(echo), End::Closed { linger: false });
    assert!(s.out.is_empty());
}

#[test]
fn deadlines_follow_the_phase() {
    let c = cfg();
    let header = c.header_timeout.as_millis() as u64;
    let idle = c.idle_timeout.as_millis() as u64;
    let send = c.send_timeout.as_millis() as u64;
    let mut conn = Conn::new(c, bytes::BytesMut::new(), 0);
    // A new connection waits the header timeout for its first bytes.
    assert_eq!(conn.poll(1_000), Next::Read { idle: true });
    assert_eq!(conn.poll_timeout(), 1_000 + header);
    // The head's deadline runs from its first byte; later reads do not extend it.
    conn.read_buf().extend_from_slice(b"GET / HTTP/1.1\r\n");
    conn.handle_read(16, 2_000);
    assert_eq!(conn.poll(2_000), Next::Read { idle: false });
    assert_eq!(conn.poll_timeout(), 2_000 + header);
    conn.read_buf().extend_from_slice(b"Host: h\r\n");
    conn.handle_read(9, 5_000);
    assert_eq!(conn.poll(5_000), Next::Read { idle: false });
    assert_eq!(conn.poll_timeout(), 2_000 + header, "not extended");
    conn.read_buf().extend_from_slice(b"\r\n");
    conn.handle_read(2, 6_000);
    assert_eq!(conn.poll(6_000), Next::Request);
    // None while the app runs.
    conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |_| {});
    assert_eq!(conn.poll_timeout(), NO_DEADLINE);
    conn.app_done(Returned::None, false);
    assert!(matches!(conn.respond(Response::new(StatusCode::OK), false), Ok(Send::Buffered)));
    // Sending has the send timeout; then the idle wait has the idle timeout.
    assert_eq!(conn.poll(7_000), Next::Flush);
    assert_eq!(conn.poll_timeout(), 7_000 + send);
    conn.handle_written();
    assert_eq!(conn.poll(8_000), Next::Read { idle: true });
    assert_eq!(conn.poll_timeout(), 8_000 + idle);
}

#[test]
fn bytes_left_after_a_request_start_the_header_clock() {
    // A partial pipelined head, or the empty line a client may send before one, that came
    // with the last request: the rest of that head is due within the header timeout from
    // when the connection turns to it, not after the idle timeout.
    for tail in [&b"GET /next HT"[..], b"\r\n"] {
        let c = cfg();
        let (header, idle) = (c.header_timeout.as_millis() as u64, c.idle_timeout.as_millis() as u64);
        assert!(header < idle);
        let mut conn = Conn::new(c, bytes::BytesMut::new(), 0);
        assert_eq!(conn.poll(1_000), Next::Read { idle: true });
        let first = [GET, tail].concat();
        conn.read_buf().extend_from_slice(&first);
        conn.handle_read(first.len(), 2_000);
        assert_eq!(conn.poll(2_000), Next::Request);
        conn.start(false, &PeerAddr::Unix, None, |_| Body::empty(), |_| {});
        conn.app_done(Returned::None, false);
        assert!(matches!(conn.respond(Response::new(StatusCode::OK), false), Ok(Send::Buffered)));
        assert_eq!(conn.poll(3_000), Next::Flush);
        conn.handle_written();
        assert_eq!(conn.poll(4_000), Next::Read { idle: false });
        assert_eq!(conn.poll_timeout(), 4_000 + header, "{tail:?}");
        // Later reads and polls do not move it.
        conn.read_buf().extend_from_slice(b"T");
        conn.handle_read(1, 5_000);
        assert_eq!(conn.poll(5_000), Next::Read { idle: false });
        assert_eq!(conn.poll_timeout(), 4_000 + header, "{tail:?}");
    }
}

#[test]
fn a_drained_body_has_the_body_deadline() {
    let c = cfg();
    let body = c.body_timeout.as_millis() as u64;
    let (grace, rate) = (c.body_rate_grace.as_millis() as u64, c.min_body_rate);
    let mut s = Script::new(c, vec![b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123".to_vec()]);
    assert_eq!(s.conn.poll(0), Next::Read { idle: true });
    assert!(s.feed());
    assert_eq!(s.conn.poll(1), Next::Request);
    let mut lent = None;
    s.conn.start(
        false,
        &PeerAddr::Unix,
        None,
        |l| {
            lent = Some(l);
            Body::empty()
        },
        |_| {},
    );
    assert!(s.conn.app_done(Returned::Back(lent.unwrap()), false));
    // The answer first (nothing waits for the body), then the drain with the body clock:
    // the rate's grace at first.
    assert_eq!(s.conn.poll(50), Next::Respond);
    assert!(matches!(s.conn.respond(Response::new(StatusCode::OK), false), Ok(Send::Buffered)));
    assert_eq!(s.conn.poll(60), Next::Flush);
    s.conn.handle_written();
    assert_eq!(s.conn.poll(70), Next::Read { idle: false });
    assert_eq!(s.conn.poll_timeout(), 70 + grace.min(body));
    // Far below the rate: the deadline hardly moves.
    s.input.push_back(b"5".to_vec());
    assert!(s.feed());
    assert_eq!(s.conn.poll(1_000), Next::Read { idle: false });
    assert_eq!(s.conn.poll_timeout(), 70 + grace + 1_000 / rate);
}
