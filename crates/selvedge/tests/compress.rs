//! The compression middleware over real sockets, checked by decompressing what arrives.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;

use common::*;
use selvedge::http::{header, StatusCode};
use selvedge::middleware::Compress;
use selvedge::{AppExt, Request, Response};

fn text() -> String {
    (0..400).map(|i| format!("line {i} of some compressible text\n")).collect()
}

fn app(file: Arc<std::path::PathBuf>) -> impl selvedge::App {
    (move |req: Request| {
        let file = file.clone();
        async move {
            match req.path() {
                "/text" => Response::bytes(StatusCode::OK, text())
                    .header(header::CONTENT_TYPE, "text/plain")
                    .header(header::ETAG, "\"v1\""),
                "/small" => Response::bytes(StatusCode::OK, "tiny").header(header::CONTENT_TYPE, "text/plain"),
                "/png" => Response::bytes(StatusCode::OK, vec![0u8; 5000]).header(header::CONTENT_TYPE, "image/png"),
                "/notransform" => Response::bytes(StatusCode::OK, text())
                    .header(header::CONTENT_TYPE, "text/plain")
                    .header(header::CACHE_CONTROL, "no-transform"),
                "/file" => Response::file(StatusCode::OK, &*file).unwrap().header(header::CONTENT_TYPE, "text/plain"),
                "/stream" => Response::stream(StatusCode::OK, |mut w| async move {
                    for i in 0..50 {
                        w.write(format!("event {i}: some streamed data\n").as_bytes()).await?;
                    }
                    Ok(())
                })
                .header(header::CONTENT_TYPE, "text/event-stream"),
                _ => Response::new(StatusCode::NOT_FOUND),
            }
        }
    })
    .with(Compress::new())
}

fn decode(coding: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        Some("gzip") => {
            flate2::read::GzDecoder::new(body).read_to_end(&mut out).unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(body, 4096).read_to_end(&mut out).unwrap();
        }
        Some("zstd") => out = zstd::decode_all(body).unwrap(),
        None => out = body.to_vec(),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

fn get(addr: std::net::SocketAddr, path: &str, ae: Option<&str>) -> Resp {
    let mut s = connect(addr);
    let ae = ae.map(|a| format!("Accept-Encoding: {a}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: h\r\n{ae}\r\n").as_bytes()).unwrap();
    read_responses(&mut s, 1).remove(0)
}

#[test]
fn negotiated_codings_for_bytes_file_and_stream() {
    let dir = std::env::temp_dir().join(format!("selvedge-compress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.txt");
    std::fs::write(&path, text().repeat(20)).unwrap();
    let srv = start(settings(), app(Arc::new(path)));
    // (accept-encoding, the coding of a body in memory, of a file or stream: never brotli)
    for (ae, want, streamed) in [
        ("gzip", Some("gzip"), Some("gzip")),
        ("gzip, br", Some("br"), Some("gzip")),
        ("br;q=0, gzip", Some("gzip"), Some("gzip")),
        ("br, zstd", Some("br"), Some("zstd")),
        ("zstd", Some("zstd"), Some("zstd")),
        ("br", Some("br"), None),
        ("identity", None, None),
    ] {
        let r = get(srv.addr, "/text", Some(ae));
        assert_eq!(r.header("content-encoding"), want, "{ae}");
        assert_eq!(r.header("vary"), Some("accept-encoding"));
        assert_eq!(decode(want, &r.body), text().as_bytes());
        if want.is_some() {
            assert!(r.body.len() < text().len() / 4, "{} bytes", r.body.len());
            assert_eq!(r.header("etag"), Some("W/\"v1\""));
        } else {
            assert_eq!(r.header("etag"), Some("\"v1\""));
        }
        let r = get(srv.addr, "/file", Some(ae));
        assert_eq!(r.header("content-encoding"), streamed, "file {ae}");
        assert_eq!(decode(streamed, &r.body), text().repeat(20).as_bytes());
        let r = get(srv.addr, "/stream", Some(ae));
        assert_eq!(r.header("content-encoding"), streamed, "stream {ae}");
        let expect: String = (0..50).map(|i| format!("event {i}: some streamed data\n")).collect();
        assert_eq!(decode(streamed, &r.body), expect.as_bytes());
    }
}

#[test]
fn skips_small_incompressible_and_no_transform() {
    let srv = start(settings(), app(Arc::new("/nonexistent".into())));
    let r = get(srv.addr, "/small", Some("gzip"));
    assert_eq!((r.header("content-encoding"), r.text().as_str()), (None, "tiny"));
    assert_eq!(r.header("vary"), Some("accept-encoding"));
    let r = get(srv.addr, "/png", Some("gzip, br"));
    assert_eq!((r.header("content-encoding"), r.header("vary"), r.body.len()), (None, None, 5000));
    let r = get(srv.addr, "/notransform", Some("gzip"));
    assert_eq!(r.header("content-encoding"), None);
    let r = get(srv.addr, "/text", None);
    assert_eq!(r.header("content-encoding"), None);
}

#[test]
fn curl_compressed() {
    let srv = start(settings(), app(Arc::new("/nonexistent".into())));
    let out = std::process::Command::new("curl")
        .args(["-sS", "--compressed", "-D", "-", &format!("http://{}/text", srv.addr)])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("content-encoding: "), "{s}");
    assert!(s.ends_with(&text()), "curl decoded something else");
}
