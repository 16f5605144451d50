//! HTTP/2 over real sockets: curl (prior knowledge and `Upgrade: h2c`), nghttp, h2spec,
//! and a hand-driven client for priorities, abuse limits, timeouts and shutdown.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::app::{app, file_app};
use common::h2::{raw, Client};
use common::{settings, start};
use selvedge::http::StatusCode;
use selvedge::{Request, Response};
use selvedge_proto::h2::frame::{flag, kind, Frame, Reason};

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl").args(["-sS"]).args(args).output().expect("curl is installed");
    assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn curl_prior_knowledge_bytes_stream_body_and_errors() {
    let srv = start(settings(), app);
    let url = format!("http://{}/", srv.addr);
    // One URL per curl: curl 7.88.1 fails to reuse a prior-knowledge connection ("Error in
    // the HTTP2 framing layer" before it sends anything, against h2o too). Reuse is
    // covered by nghttp below.
    let (out, err) = curl(&["--http2-prior-knowledge", "-v", &format!("{url}hello")]);
    assert_eq!(out, "hello");
    assert!(err.contains("< HTTP/2 200"), "{err}");
    let (out, _) = curl(&["--http2-prior-knowledge", &format!("{url}stream?5")]);
    assert_eq!(out, "part0;part1;part2;part3;part4;");
    let (out, _) = curl(&["--http2-prior-knowledge", &format!("{url}info?q=1")]);
    assert_eq!(out, format!("method=GET path=/info query=q=1 authority={} version=HTTP/2.0 segs=info", srv.addr));
    // A request body, larger than the stream window (so WINDOW_UPDATEs must flow).
    let up = std::env::temp_dir().join(format!("selvedge-h2-up-{}", std::process::id()));
    std::fs::write(&up, "x".repeat(300_000)).unwrap();
    let (out, _) =
        curl(&["--http2-prior-knowledge", "--data-binary", &format!("@{}", up.display()), &format!("{url}echo")]);
    std::fs::remove_file(&up).unwrap();
    assert_eq!(out.len(), 300_000);
    for path in ["panic", "panic-later"] {
        let (out, _) =
            curl(&["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}", &format!("{url}{path}")]);
        assert_eq!(out, "500", "{path}");
    }
    let (out, _) = curl(&["--http2-prior-knowledge", "-I", &format!("{url}hello")]);
    assert!(out.starts_with("HTTP/2 200") && out.contains("content-length: 5"), "{out}");
}

/// The declared length is the whole body until the app reads, even when DATA frames
/// arrived first (the app waits here; a proxy announcing the shrunken length to its
/// upstream answered 400 to large uploads now and then).
#[test]
fn content_length_is_whole_until_the_app_reads() {
    let srv = start(settings(), |mut req: Request| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut body = req.take_body();
        let before = body.content_length();
        let mut got = 0u64;
        while let Some(Ok(b)) = body.chunk().await {
            got += b.len() as u64;
        }
        Response::bytes(StatusCode::OK, format!("{before:?} {got} {:?}", body.content_length()))
    });
    let up = std::env::temp_dir().join(format!("selvedge-h2-cl-{}", std::process::id()));
    std::fs::write(&up, "y".repeat(200_000)).unwrap();
    let (out, _) = curl(&[
        "--http2-prior-knowledge",
        "--data-binary",
        &format!("@{}", up.display()),
        &format!("http://{}/", srv.addr),
    ]);
    std::fs::remove_file(&up).unwrap();
    assert_eq!(out, "Some(200000) 200000 Some(0)");
}

#[test]
fn curl_file_over_h2_with_pread() {
    let dir = std::env::temp_dir().join(format!("selvedge-h2-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.bin");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let srv = start(settings(), file_app(path.clone()));
    let got = dir.join("got.bin");
    curl(&["--http2-prior-knowledge", "-o", got.to_str().unwrap(), &format!("http://{}/f", srv.addr)]);
    assert!(std::fs::read(&got).unwrap() == data, "file differs");
    let out = Command::new("curl")
        .args(["-sS", "--http2-prior-knowledge", &format!("http://{}/f?10-19", srv.addr)])
        .output()
        .unwrap();
    assert_eq!(&out.stdout[..], &data[10..20]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// File bytes are read outside the connection's lock; a file that turns out shorter than
/// its response (it shrank) resets that stream instead of sending bytes it does not have,
/// and the connection goes on.
#[test]
fn file_shorter_than_its_response_resets_the_stream() {
    let dir = std::env::temp_dir().join(format!("selvedge-h2-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("short.bin");
    let data: Vec<u8> = (0..50_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let srv = start(settings(), file_app(path));
    let mut c = Client::connect(srv.addr, &[]);
    c.get(1, "/f?0-199999");
    let mut got = Vec::new();
    let reset = loop {
        match c.next().expect("the server answers") {
            Frame::Headers(h) => assert_eq!(c.status(&h), "206"),
            Frame::Data(d) => {
                assert!(!d.end_stream, "a short file must not look complete");
                got.extend_from_slice(&d.data);
            }
            Frame::RstStream(r) => break r,
            _ => {}
        }
    };
    assert_eq!((reset.stream, reset.reason), (1, Reason::INTERNAL_ERROR));
    assert!(got.len() < data.len() && got[..] == data[..got.len()], "{} bytes", got.len());
    // The connection still serves.
    c.get(3, "/f?10-19");
    let body = loop {
        if let Some(Frame::Data(d)) = c.next() {
            if d.stream == 3 {
                break d.data;
            }
        }
    };
    assert_eq!(&body[..], &data[10..20]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn curl_upgrade_h2c() {
    let srv = start(settings(), app);
    let (out, err) = curl(&["--http2", "-v", &format!("http://{}/hello", srv.addr)]);
    assert_eq!(out, "hello");
    assert!(err.contains("101 Switching Protocols") && err.contains("HTTP/2 200"), "{err}");
}

#[test]
fn nghttp_concurrent_streams_and_upload() {
    if Command::new("nghttp").arg("--version").output().is_err() {
        common::missing_tool("nghttp", "nghttp");
        return;
    }
    let srv = start(settings(), app);
    let url = format!("http://{}/hello", srv.addr);
    let out = Command::new("nghttp").args(["-n", "-s", "-m", "50", &url]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stats.matches(" 200 ").count(), 50, "{stats}");
    let dir = std::env::temp_dir().join(format!("selvedge-nghttp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let up = dir.join("up.txt");
    std::fs::write(&up, "u".repeat(200_000)).unwrap();
    let out = Command::new("nghttp")
        .args(["-d", up.to_str().unwrap(), &format!("http://{}/chunks", srv.addr)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sizes: usize =
        String::from_utf8_lossy(&out.stdout).split(',').map(|s| s.trim().parse::<usize>().unwrap()).sum();
    assert_eq!(sizes, 200_000);
    let out = Command::new("nghttp").args([&format!("http://{}/stream?4", srv.addr)]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "part0;part1;part2;part3;");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn h2spec_bin() -> Option<std::path::PathBuf> {
    let mut candidates = vec![std::path::PathBuf::from("h2spec")];
    if let Ok(p) = std::env::var("H2SPEC") {
        candidates.insert(0, p.into());
    }
    if let Ok(home) = std::env::var("HOME") {
        candidates.push(std::path::Path::new(&home).join("go/bin/h2spec"));
    }
    candidates.into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
}

/// Reads any request body, then answers.
async fn reading_app(mut req: Request) -> Response {
    let _ = req.take_body().to_bytes(1 << 20).await;
    Response::bytes(StatusCode::OK, "h2spec")
}

#[test]
fn h2spec_all_cases_pass() {
    let Some(bin) = h2spec_bin() else {
        common::missing_tool("h2spec", "h2spec_all_cases_pass");
        return;
    };
    // An app that reads the body, and one that answers without asking for it (an early
    // answer: the request's later frames, malformed ones too, arrive after it).
    let reading = start(settings(), reading_app);
    let early = start(settings(), |_req: Request| async { Response::bytes(StatusCode::OK, vec![b'e'; 20_000]) });
    for srv in [&reading, &early] {
        let out = Command::new(&bin)
            .args(["-h", "127.0.0.1", "-p", &srv.addr.port().to_string(), "-o", "5"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text.lines().rev().find(|l| l.contains("tests,")).unwrap_or("no summary").to_string();
        eprintln!("h2spec: {summary}");
        // "N tests, N passed, 0 skipped, 0 failed" (145 cases in 2.2.1, 146 in 2.6.0).
        let n: Vec<u32> = summary.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
        assert!(n.len() == 4 && n[0] == n[1] && n[2] == 0 && n[3] == 0 && n[0] >= 145, "{text}");
    }
}

/// Sends `n` bytes per stream: the app of the priority tests.
async fn sized(req: Request) -> Response {
    let n: usize = req.query().and_then(|q| q.parse().ok()).unwrap_or(0);
    Response::bytes(StatusCode::OK, vec![b'z'; n])
}

/// A client with huge windows, so that only the server's scheduling orders the frames.
fn wide_open(addr: std::net::SocketAddr) -> Client {
    let mut c = Client::connect(addr, &[(0x4, 0x7fff_ffff)]);
    c.send(&raw(kind::WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    c
}

#[test]
fn urgent_stream_is_not_delayed_by_heavy_low_urgency_stream() {
    let srv = start(settings(), sized);
    let mut c = wide_open(srv.addr);
    let mut out = c.request_frame(1, "GET", "/?8000000", &[("priority", "u=7")], true);
    out.extend(c.request_frame(3, "GET", "/?1000", &[("priority", "u=0")], true));
    c.send(&out);
    let mut heavy = 0usize;
    let mut urgent_done_after = None;
    while let Some(f) = c.next() {
        if let Frame::Data(d) = f {
            if d.stream == 1 {
                heavy += d.data.len();
                if d.end_stream {
                    break;
                }
            } else if d.end_stream {
                urgent_done_after = Some(heavy);
            }
        }
    }
    assert_eq!(heavy, 8_000_000);
    // The urgent answer went out within the first batch of the heavy one.
    let after = urgent_done_after.expect("urgent stream finished");
    assert!(after <= 256 * 1024, "urgent stream waited for {after} bytes of the heavy stream");
}

#[test]
fn equal_weights_share_bandwidth_fairly() {
    let srv = start(settings(), sized);
    let mut c = wide_open(srv.addr);
    let mut out = c.request_frame(1, "GET", "/?4000000", &[], true);
    out.extend(c.request_frame(3, "GET", "/?4000000", &[], true));
    c.send(&out);
    let mut got = [0usize; 2];
    while got[0] + got[1] < 4_000_000 {
        match c.next() {
            Some(Frame::Data(d)) => got[(d.stream as usize - 1) / 2] += d.data.len(),
            Some(_) => {}
            None => panic!("connection ended"),
        }
    }
    // Once both are running, each gets half; allow for the first stream's head start.
    let (a, b) = (got[0] as f64, got[1] as f64);
    assert!((a - b).abs() / (a + b) < 0.2, "unfair split: {got:?}");
}

#[test]
fn rapid_reset_gets_enhance_your_calm() {
    let mut cfg = settings();
    cfg.h2.max_peer_resets = 100;
    let srv = start(cfg, common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = Vec::new();
    for i in 0..500u32 {
        let id = 2 * i + 1;
        out.extend(c.request_frame(id, "GET", "/slow", &[], true));
        out.extend(raw(kind::RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    c.send(&out);
    let (reason, _) = c.until_goaway().expect("GOAWAY");
    assert_eq!(reason, Reason::ENHANCE_YOUR_CALM);
    assert!(c.next().is_none(), "connection closed after GOAWAY");
}

#[test]
fn made_you_reset_gets_enhance_your_calm() {
    let mut cfg = settings();
    cfg.h2.max_local_resets = 50;
    let srv = start(cfg, common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = Vec::new();
    for i in 0..200u32 {
        // Each stream gets a WINDOW_UPDATE of 0: a stream error the server must answer.
        let id = 2 * i + 1;
        out.extend(c.request_frame(id, "GET", "/slow", &[], true));
        out.extend(raw(kind::WINDOW_UPDATE, 0, id, &0u32.to_be_bytes()));
    }
    c.send(&out);
    assert_eq!(c.until_goaway().expect("GOAWAY").0, Reason::ENHANCE_YOUR_CALM);
}

#[test]
fn continuation_flood_and_hpack_bomb() {
    let srv = start(settings(), common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = raw(kind::HEADERS, flag::END_STREAM, 1, b"\x82\x86\x84");
    for _ in 0..10_000 {
        out.extend(raw(kind::CONTINUATION, 0, 1, b"\x82"));
    }
    c.send(&out);
    assert_eq!(c.until_goaway().expect("GOAWAY").0, Reason::ENHANCE_YOUR_CALM);

    // One 4 KB entry in the dynamic table, then referenced: a few times (20 KB decoded,
    // just over a 16 KiB limit: 431, the connection goes on), or thousands of times (an
    // HPACK bomb, 12 MB decoded: the connection ends at once).
    let mut cfg = settings();
    cfg.h2.max_header_list_size = 16 * 1024;
    let srv = start(cfg, common::app::app);
    let block = |refs: usize| {
        // literal with incremental indexing, new name "b", 4000-byte value
        let mut block = vec![0x82, 0x86, 0x84, 0x40, 0x01, b'b', 0x7f, 0xa1, 0x1e];
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, refs)); // index 62: the new entry
        let mut frames = Vec::new();
        selvedge_proto::h2::frame::Headers::encode(1, &block, true, 16_384, &mut frames);
        frames
    };
    let mut c = Client::connect(srv.addr, &[]);
    c.send(&block(3000));
    assert_eq!(c.until_goaway().expect("GOAWAY").0, Reason::ENHANCE_YOUR_CALM);
    let mut c = Client::connect(srv.addr, &[]);
    c.send(&block(4));
    let mut status = None;
    while let Some(f) = c.next() {
        if let Frame::Headers(h) = f {
            status = Some(c.status(&h));
            break;
        }
    }
    assert_eq!(status.as_deref(), Some("431"));
    // The connection is still usable.
    c.get(3, "/hello");
    let mut ok = false;
    while let Some(f) = c.next() {
        if let Frame::Data(d) = f {
            ok = d.stream == 3 && &d.data[..] == b"hello";
            break;
        }
    }
    assert!(ok);
}

#[test]
fn ping_flood_and_empty_frames() {
    let mut cfg = settings();
    cfg.h2.max_control_frames = 1000;
    let srv = start(cfg, common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = Vec::new();
    for _ in 0..5000 {
        out.extend(raw(kind::PING, 0, 0, b"12345678"));
    }
    c.send(&out);
    assert_eq!(c.until_goaway().expect("GOAWAY").0, Reason::ENHANCE_YOUR_CALM);

    let srv = start(settings(), common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = c.request_frame(1, "POST", "/echo", &[], false);
    for _ in 0..1000 {
        out.extend(raw(kind::DATA, 0, 1, b""));
    }
    c.send(&out);
    let t = Instant::now();
    assert_eq!(c.until_goaway().expect("GOAWAY").0, Reason::ENHANCE_YOUR_CALM);
    // The app was still waiting for the body: the connection must close anyway (after the
    // linger), not wait for the idle timeout.
    assert!(c.next().is_none());
    assert!(t.elapsed() < Duration::from_secs(5), "connection lingered {:?}", t.elapsed());
}

/// A slow reader whose window opens once, a little, then never again, and who chatters
/// (PINGs every 100 ms) all along: the send timeout runs from the last DATA the window let
/// through, not from the last write (PING ACKs are writes too), and the close comes after a
/// GOAWAY(ENHANCE_YOUR_CALM).
#[test]
fn zero_window_slow_reader_is_timed_out_from_its_last_data() {
    let mut cfg = settings();
    cfg.send_timeout = Duration::from_secs(1);
    let srv = start(cfg, sized);
    // Window 0: the server can send headers but no data until the update below.
    let mut c = Client::connect(srv.addr, &[(0x4, 0)]);
    c.get(1, "/?1000000");
    let t = Instant::now();
    c.sock.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let (mut next_ping, mut opened, mut data_at, mut goaway) = (Duration::ZERO, false, None, None);
    let closed = loop {
        let now = t.elapsed();
        assert!(now < Duration::from_secs(6), "slow reader still connected after {now:?}");
        if now >= next_ping {
            c.send(&raw(kind::PING, 0, 0, b"keepme!!"));
            next_ping = now + Duration::from_millis(100);
        }
        if !opened && now >= Duration::from_millis(600) {
            opened = true;
            c.send(&raw(kind::WINDOW_UPDATE, 0, 1, &1_000u32.to_be_bytes()));
        }
        match c.next() {
            Some(Frame::Data(d)) if !d.data.is_empty() => data_at = Some(t.elapsed()),
            Some(Frame::GoAway(g)) => goaway = Some((t.elapsed(), g.reason)),
            Some(_) => {}
            None => match c.sock.peek(&mut [0u8; 1]) {
                Ok(0) => break t.elapsed(),
                Err(e) if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    break t.elapsed()
                }
                _ => {}
            },
        }
    };
    let data_at = data_at.expect("the window's 1,000 bytes were sent");
    let (at, reason) = goaway.expect("a GOAWAY before the close");
    assert_eq!(reason, Reason::ENHANCE_YOUR_CALM);
    assert!(at >= data_at + Duration::from_millis(900), "GOAWAY at {at:?}, last DATA at {data_at:?}");
    assert!(at <= data_at + Duration::from_millis(1_600), "GOAWAY at {at:?}, last DATA at {data_at:?}");
    assert!(closed >= at && closed <= at + Duration::from_millis(500), "closed at {closed:?}, GOAWAY at {at:?}");
}

#[test]
fn graceful_shutdown_sends_goaway_and_finishes_streams() {
    let srv = start(settings(), common::app::app);
    let mut c = Client::connect(srv.addr, &[]);
    c.get(1, "/slow?graceful-h2");
    assert!(common::wait_for(10, || common::app::slow_started("graceful-h2")));
    srv.handle.as_ref().unwrap().shutdown();
    let mut goaway = None;
    let mut body = Vec::new();
    while let Some(f) = c.next() {
        match f {
            Frame::GoAway(g) => goaway = Some((g.reason, g.last_stream)),
            Frame::Data(d) => {
                body.extend_from_slice(&d.data);
                if d.end_stream {
                    break;
                }
            }
            _ => {}
        }
    }
    assert_eq!(goaway, Some((Reason::NO_ERROR, 1)));
    assert_eq!(body, b"slow done");
}

#[test]
fn streaming_response_respects_flow_control() {
    // The stream writes 100 pieces; the client grants 1000 bytes at a time.
    let srv = start(settings(), |_req: Request| async {
        Response::stream(StatusCode::OK, |mut w| async move {
            for _ in 0..100 {
                w.write(&[b's'; 1000]).await?;
            }
            Ok(())
        })
    });
    let mut c = Client::connect(srv.addr, &[(0x4, 1000)]);
    c.get(1, "/");
    let mut got = 0;
    loop {
        if let Frame::Data(d) = c.next().expect("frames") {
            assert!(d.data.len() <= 1000);
            got += d.data.len();
            if d.end_stream {
                break;
            }
            if !d.data.is_empty() {
                let inc = (d.data.len() as u32).to_be_bytes();
                let mut out = raw(kind::WINDOW_UPDATE, 0, 1, &inc);
                out.extend(raw(kind::WINDOW_UPDATE, 0, 0, &inc));
                c.send(&out);
            }
        }
    }
    assert_eq!(got, 100_000);
}

#[test]
fn head_with_a_stream_body_that_owns_the_request_body() {
    // The discarded stream body owns the request body, whose drop takes the connection
    // lock: it must be dropped outside it (this would deadlock otherwise).
    let srv = start(settings(), |mut req: Request| async move {
        let mut body = req.take_body();
        Response::stream(StatusCode::OK, move |mut w| async move {
            while let Some(Ok(b)) = body.chunk().await {
                w.write(&b).await?;
            }
            Ok(())
        })
    });
    // HEAD with a request body: the answer is bodiless, its stream body is discarded.
    let mut c = Client::connect(srv.addr, &[]);
    let mut out = c.request_frame(1, "HEAD", "/", &[], false);
    out.extend(raw(kind::DATA, flag::END_STREAM, 1, b"abc"));
    c.send(&out);
    let mut head_end = false;
    while let Some(f) = c.next() {
        if let Frame::Headers(h) = f {
            head_end = h.end_stream;
            break;
        }
    }
    assert!(head_end, "HEAD answered with END_STREAM on HEADERS");
    let url = format!("http://{}/", srv.addr);
    let up = std::env::temp_dir().join(format!("selvedge-h2-echo-{}", std::process::id()));
    std::fs::write(&up, "e".repeat(100_000)).unwrap();
    let (out, _) =
        curl(&["--http2-prior-knowledge", "--max-time", "5", "--data-binary", &format!("@{}", up.display()), &url]);
    std::fs::remove_file(&up).unwrap();
    assert_eq!(out.len(), 100_000);
}

/// The app reading a body that stalls gets an error that says so (`Error::is_timeout`).
#[test]
fn a_stalled_upload_is_a_timeout_for_the_app() {
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Arc;
    let mut cfg = settings();
    cfg.body_timeout = Duration::from_millis(500);
    let seen = Arc::new(AtomicU8::new(0));
    let s2 = seen.clone();
    let srv = start(cfg, move |mut req: Request| {
        let seen = s2.clone();
        async move {
            let r = req.body_mut().chunk().await;
            let code = match r {
                Some(Err(e)) if e.is_timeout() && !e.is_body() => 1,
                Some(Err(_)) => 2,
                _ => 3,
            };
            seen.store(code, Ordering::SeqCst);
            Response::new(StatusCode::OK)
        }
    });
    let mut c = Client::connect(srv.addr, &[]);
    let f = c.request_frame(1, "POST", "/upload", &[], false);
    c.send(&f);
    // No body at all: the stream is reset, and the app's read fails as a timeout.
    let reset = loop {
        if let Some(Frame::RstStream(r)) = c.next() {
            break r;
        }
    };
    assert_eq!((reset.stream, reset.reason), (1, Reason::CANCEL));
    let t = Instant::now();
    while seen.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 1, "1: a timeout, 2: another error, 3: no error");
}

#[test]
fn slow_upload_stream_is_reset_while_the_connection_serves_others() {
    let mut cfg = settings();
    cfg.body_timeout = Duration::from_secs(1);
    cfg.min_body_rate = 1000;
    let srv = start(cfg, reading_app);
    let mut c = Client::connect(srv.addr, &[]);
    let f = c.request_frame(1, "POST", "/upload", &[], false);
    c.send(&f);
    c.sock.set_read_timeout(Some(Duration::from_millis(250))).unwrap();
    let t = Instant::now();
    let mut reset = None;
    // 10 bytes every 250 ms: 40 B/s against a minimum of 1,000 B/s.
    while t.elapsed() < Duration::from_secs(5) && reset.is_none() {
        c.send(&raw(kind::DATA, 0, 1, b"0123456789"));
        while let Some(f) = c.next() {
            if let Frame::RstStream(r) = f {
                reset = Some((r.stream, r.reason, t.elapsed()));
                break;
            }
        }
    }
    let (stream, reason, after) = reset.expect("the slow upload was reset");
    assert_eq!((stream, reason), (1, Reason::CANCEL));
    assert!(after >= Duration::from_millis(900) && after < Duration::from_secs(3), "{after:?}");
    // The connection goes on: a new request is answered.
    c.sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.get(3, "/");
    let mut status = String::new();
    while let Some(f) = c.next() {
        if let Frame::Headers(h) = f {
            if h.stream == 3 {
                status = c.status(&h);
                break;
            }
        }
    }
    assert_eq!(status, "200");
}

/// An idle connection (no stream, no frame) ends at `idle_timeout` with GOAWAY(NO_ERROR)
/// before the FIN, so the client knows it may retry on a new one.
#[test]
fn idle_connection_is_told_goaway_no_error_then_closed() {
    let mut cfg = settings();
    cfg.idle_timeout = Duration::from_millis(500);
    let srv = start(cfg, sized);
    let mut c = Client::connect(srv.addr, &[]);
    c.get(1, "/?10");
    let t = Instant::now();
    c.sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut goaway = None;
    while let Some(f) = c.next() {
        if let Frame::GoAway(g) = f {
            goaway = Some((t.elapsed(), g.reason, g.last_stream));
        }
    }
    let closed = t.elapsed();
    let (at, reason, last) = goaway.expect("a GOAWAY before the close");
    assert_eq!((reason, last), (Reason::NO_ERROR, 1));
    assert!(at >= Duration::from_millis(400) && at < Duration::from_millis(1_500), "GOAWAY at {at:?}");
    assert!(closed < at + Duration::from_millis(500), "closed at {closed:?}");
}
