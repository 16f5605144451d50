//! The app interface: closures, middleware, boxed apps, and conversions to and from the
//! `http` crate's types.

mod common;

use common::*;
use selvedge::http::{header, StatusCode};
use selvedge::{middleware, App, AppExt, Request, Response};

#[test]
fn middleware_wraps_in_order() {
    let app = |req: Request| async move { Response::bytes(StatusCode::OK, format!("inner {}", req.path())) };
    let app = app
        .with(middleware::from_fn(|req, next: middleware::Next<_>| async move {
            next.run(req).await.header(header::HeaderName::from_static("x-a"), "1")
        }))
        .with(middleware::from_fn(|req: Request, next: middleware::Next<_>| async move {
            if req.path() == "/blocked" {
                return Response::bytes(StatusCode::FORBIDDEN, "no");
            }
            next.run(req).await.header(header::HeaderName::from_static("x-b"), "2")
        }))
        .boxed();
    let srv = start(settings(), app);
    let mut s = connect(srv.addr);
    use std::io::Write;
    s.write_all(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\nGET /blocked HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let rs = read_responses(&mut s, 2);
    assert_eq!(rs[0].text(), "inner /x");
    assert_eq!((rs[0].header("x-a"), rs[0].header("x-b")), (Some("1"), Some("2")));
    assert_eq!(rs[1].status, 403);
    assert_eq!(rs[1].header("x-a"), None);
}

#[test]
fn http_crate_conversions() {
    let app = |req: Request| async move {
        let hreq = req.into_http();
        let body = format!(
            "{} {} host={:?} ua={:?}",
            hreq.method(),
            hreq.uri(),
            hreq.headers().get(header::HOST),
            hreq.headers().get(header::USER_AGENT)
        );
        let res = selvedge::http::Response::builder()
            .status(StatusCode::ACCEPTED)
            .header("x-from", "http")
            .body(body)
            .unwrap();
        Response::from(res)
    };
    let srv = start(settings(), app);
    let (out, _) =
        exchange(srv.addr, b"GET /p?q=1 HTTP/1.1\r\nHost: ex.org\r\nUser-Agent: t\r\nConnection: close\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 202 Accepted\r\n"), "{out}");
    assert!(out.contains("x-from: http\r\n"));
    assert!(out.ends_with("GET http://ex.org/p?q=1 host=Some(\"ex.org\") ua=Some(\"t\")"), "{out}");
}

#[tokio::test]
async fn request_from_http_and_app_called_directly() {
    let hreq = selvedge::http::Request::builder()
        .method("POST")
        .uri("/a/b%2Fc?x=1")
        .header("host", "h.example")
        .body("payload")
        .unwrap();
    let mut req = Request::from(hreq);
    assert_eq!(req.path(), "/a/b%2Fc");
    assert_eq!(req.query(), Some("x=1"));
    assert_eq!(req.authority(), Some("h.example"));
    let segs: Vec<_> = req.segments().map(|s| s.into_owned()).collect();
    assert_eq!(segs, vec![b"a".to_vec(), b"b/c".to_vec()]);
    let body = req.take_body().to_bytes(100).await.unwrap();
    assert_eq!(&body[..], b"payload");
    let app = |req: Request| async move { Response::bytes(StatusCode::OK, req.method().to_string()) };
    let res = app.handle(req).await;
    match res.body() {
        selvedge::ResponseBody::Bytes(b) => assert_eq!(&b[..], b"POST"),
        other => panic!("{other:?}"),
    }
    let h = res.into_http();
    assert_eq!(h.status(), StatusCode::OK);
}

#[test]
fn body_limit_and_request_log_compose() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let calls = Arc::new(AtomicUsize::new(0));
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let (c, l) = (calls.clone(), lines.clone());
    let app = move |mut req: Request| {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            match req.take_body().to_bytes(1 << 20).await {
                Ok(b) => Response::bytes(StatusCode::OK, b),
                Err(e) => Response::bytes(e.status().unwrap_or(StatusCode::BAD_REQUEST), "body error"),
            }
        }
    };
    let app = app
        .with(middleware::BodyLimit::new(10))
        .with(middleware::RequestLog::new(move |r: &middleware::Record| l.lock().unwrap().push(r.to_string())));
    let srv = start(settings(), app);
    // Under the limit: the app echoes it.
    let (out, _) = exchange(
        srv.addr,
        b"POST /echo?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("hello"), "{out}");
    // Declared over the limit: 413 and the app never runs.
    let before = calls.load(Ordering::SeqCst);
    let (out, _) = exchange(
        srv.addr,
        b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
    );
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert_eq!(calls.load(Ordering::SeqCst), before);
    // Chunked past the limit: the app's read fails and the answer is 413.
    let (out, _) = exchange(
        srv.addr,
        b"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
          6\r\nhello \r\n6\r\nworld!\r\n0\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 413"), "{out}");
    assert_eq!(calls.load(Ordering::SeqCst), before + 1);
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with("127.0.0.1 \"POST /echo?x=1 HTTP/1.1\" 200 5 "), "{}", lines[0]);
    assert!(lines[1].contains("\"POST /big HTTP/1.1\" 413 "), "{}", lines[1]);
    assert!(lines[2].contains("\"POST /chunked HTTP/1.1\" 413 "), "{}", lines[2]);
}
