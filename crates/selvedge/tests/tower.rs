//! An axum router served through the tower adapter: routing, extractors, request bodies in
//! and streaming bodies out, over HTTP/1.1 (and HTTP/2 with prior knowledge, via curl).

mod common;

use std::io::Write;

use axum::body::Body as AxumBody;
use axum::extract::Path;
use axum::routing::{get, post};
use axum::Router;
use common::*;
use selvedge::tower::TowerApp;

fn router() -> Router {
    Router::new()
        .route("/hello/{name}", get(|Path(name): Path<String>| async move { format!("hello, {name}") }))
        .route("/echo", post(|body: axum::body::Bytes| async move { body }))
        .route(
            "/stream",
            get(|| async {
                let parts: Vec<Result<String, std::io::Error>> = (0..5).map(|i| Ok(format!("part{i};"))).collect();
                AxumBody::from_stream(futures_lite_stream(parts))
            }),
        )
}

/// A minimal `Stream` over a vector, to build a streaming axum body without extra crates.
fn futures_lite_stream<T: Send + 'static>(items: Vec<T>) -> ItemStream<std::vec::IntoIter<T>> {
    ItemStream(items.into_iter())
}

struct ItemStream<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for ItemStream<I> {
    type Item = I::Item;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<I::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}

#[test]
fn axum_router_over_http1() {
    let srv = start(settings(), TowerApp::new(router()));
    let mut s = connect(srv.addr);
    s.write_all(b"GET /hello/selvedge HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    s.write_all(
        b"POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .unwrap();
    s.write_all(b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\nGET /nope HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    let rs = read_responses(&mut s, 4);
    assert_eq!((rs[0].status, rs[0].text().as_str()), (200, "hello, selvedge"));
    assert_eq!(rs[0].header("content-length"), Some("15"));
    assert_eq!(rs[1].text(), "hello world");
    assert_eq!(rs[2].header("transfer-encoding"), Some("chunked"));
    assert_eq!(rs[2].text(), "part0;part1;part2;part3;part4;");
    assert_eq!(rs[3].status, 404);
}

#[test]
fn axum_router_over_h2c_with_curl() {
    // One URL per curl run: curl 7.88 fails to reuse an h2c prior-knowledge connection for a
    // second URL against any server (h2o too).
    let srv = start(settings(), TowerApp::new(router()));
    let base = format!("http://{}", srv.addr);
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "-w", " %{http_version}"])
            .args(args)
            .output()
            .expect("curl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(&[&format!("{base}/hello/h2")]), "hello, h2 2");
    assert_eq!(curl(&[&format!("{base}/stream")]), "part0;part1;part2;part3;part4; 2");
    assert_eq!(curl(&["--data-binary", "posted over h2", &format!("{base}/echo")]), "posted over h2 2");
}
