//! `Response::on_finish` over real sockets: the report comes once per response, complete
//! when the last byte went out (a body in memory at once, a 32 MB stream, a file, over
//! HTTP/1.1 and HTTP/2), abandoned when the client left mid-body.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::Command;
use std::sync::Mutex;

use common::*;
use selvedge::http::StatusCode;
use selvedge::{Request, Response};

/// Reports by tag: (complete, abandoned).
static REPORTS: Mutex<Option<HashMap<u64, (u32, u32)>>> = Mutex::new(None);

fn report(complete: bool, tag: [u64; 2]) {
    let mut r = REPORTS.lock().unwrap();
    let e = r.get_or_insert_with(HashMap::new).entry(tag[0]).or_default();
    if complete {
        e.0 += 1;
    } else {
        e.1 += 1;
    }
}

fn reports(tag: u64) -> (u32, u32) {
    REPORTS.lock().unwrap().as_ref().and_then(|r| r.get(&tag).copied()).unwrap_or_default()
}

/// `/small/N`, `/large/N` (a 32 MB stream) and `/file/N` report under tag N.
async fn app(req: Request) -> Response {
    let mut parts = req.path().trim_start_matches('/').split('/');
    let (kind, tag) = (parts.next().unwrap_or(""), parts.next().and_then(|t| t.parse().ok()).unwrap_or(0));
    let res = match kind {
        "small" => Response::bytes(StatusCode::OK, "hello\n"),
        "large" => Response::stream(StatusCode::OK, |mut w| async move {
            let chunk = vec![b'x'; 1 << 20];
            for _ in 0..32 {
                w.write(&chunk).await?;
            }
            Ok(())
        }),
        "file" => {
            let f = std::fs::File::open("/proc/self/exe").unwrap();
            let len = f.metadata().unwrap().len().min(4 << 20);
            Response::file_range(StatusCode::OK, std::sync::Arc::new(f), 0, len)
        }
        _ => return Response::new(StatusCode::NOT_FOUND),
    };
    res.on_finish(report, [tag, 0])
}

#[test]
fn each_response_reports_its_end_once() {
    let srv = start(settings(), app);
    // HTTP/1.1, pipelined on one connection: a small body (buffered), a large one, a file.
    let mut c = connect(srv.addr);
    c.write_all(b"GET /small/1 HTTP/1.1\r\nHost: h\r\n\r\nGET /large/2 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    c.write_all(b"GET /file/3 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let r = read_responses(&mut c, 3);
    assert_eq!(r[0].text(), "hello\n");
    assert!(wait_for(5, || reports(1) == (1, 0) && reports(2) == (1, 0) && reports(3) == (1, 0)));
    // HTTP/2: nghttp, three requests on one connection (curl 7.88 fails to reuse a
    // prior-knowledge connection, whatever the server).
    let urls: Vec<String> =
        [4, 5, 6].iter().zip(["small", "large", "file"]).map(|(t, k)| format!("http://{}/{k}/{t}", srv.addr)).collect();
    let out = Command::new("nghttp").arg("-n").args(&urls).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(wait_for(5, || (4..=6).all(|t| reports(t) == (1, 0))), "{:?}", REPORTS.lock().unwrap());

    // A client that reads the head of a 32 MB stream and leaves: abandoned, once.
    let mut c = connect(srv.addr);
    c.write_all(b"GET /large/7 HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let mut head = [0u8; 64];
    c.read_exact(&mut head).unwrap();
    drop(c);
    assert!(wait_for(5, || reports(7) == (0, 1)), "{:?}", reports(7));
    // The same over HTTP/2: the client resets the stream after the head.
    let mut c = common::h2::Client::connect(srv.addr, &[]);
    c.get(1, "/large/8");
    while let Some(f) = c.next() {
        if let selvedge_proto::h2::frame::Frame::Headers(_) = f {
            break;
        }
    }
    c.send(&common::h2::raw(3, 0, 1, &8u32.to_be_bytes())); // RST_STREAM(CANCEL)
    assert!(wait_for(5, || reports(8) == (0, 1)), "{:?}", reports(8));
    drop(c);
}
