//! The app most integration tests talk to.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use selvedge::http::{header, StatusCode};
use selvedge::{Cleanup, Request, Response};

/// Counts stream clean-ups (released resources).
pub static RELEASED: AtomicUsize = AtomicUsize::new(0);

/// The queries of the `/slow` requests the app has begun: a test that needs its request
/// in flight waits for its own tag here ([`slow_started`]).
pub static SLOW_STARTED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Whether a `/slow?{tag}` request has reached the app.
pub fn slow_started(tag: &str) -> bool {
    SLOW_STARTED.lock().unwrap().iter().any(|q| q == tag)
}

pub async fn app(mut req: Request) -> Response {
    let path = req.path().to_string();
    match path.as_str() {
        "/hello" => Response::bytes(StatusCode::OK, "hello").header(header::CONTENT_TYPE, "text/plain"),
        "/echo" => {
            let body = req.take_body();
            match body.to_bytes(1 << 20).await {
                Ok(b) => Response::bytes(StatusCode::OK, b),
                Err(e) => Response::bytes(e.status().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "body error"),
            }
        }
        "/chunks" => {
            // Reports the sizes of the pieces the body arrived in.
            let mut body = req.take_body();
            let mut sizes = Vec::new();
            while let Some(piece) = body.chunk().await {
                match piece {
                    Ok(b) => sizes.push(b.len().to_string()),
                    Err(_) => return Response::bytes(StatusCode::BAD_REQUEST, "body error"),
                }
            }
            Response::bytes(StatusCode::OK, sizes.join(","))
        }
        "/ignore" => Response::bytes(StatusCode::OK, "ignored"),
        "/info" => {
            let segs: Vec<String> = req.segments().map(|s| String::from_utf8_lossy(&s).into_owned()).collect();
            let text = format!(
                "method={} path={} query={} authority={} version={:?} segs={}",
                req.method(),
                req.path(),
                req.query().unwrap_or("-"),
                req.authority().unwrap_or("-"),
                req.version(),
                segs.join("|")
            );
            Response::bytes(StatusCode::OK, text)
        }
        "/stream" => {
            let n: usize = req.query().and_then(|q| q.parse().ok()).unwrap_or(3);
            Response::stream(StatusCode::OK, move |mut w| async move {
                let _guard = Cleanup::new((), |_| {
                    RELEASED.fetch_add(1, Ordering::SeqCst);
                });
                for i in 0..n {
                    w.write(format!("part{i};").as_bytes()).await?;
                    if n > 10 {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                Ok(())
            })
            .header(header::CONTENT_TYPE, "text/plain")
        }
        "/panic" => panic!("the app panicked on purpose"),
        "/panic-later" => {
            // Not ready at the first poll: on HTTP/2 this runs in a task of its own.
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("the app panicked on purpose, after waiting")
        }
        "/slow" => {
            if let Some(q) = req.query() {
                SLOW_STARTED.lock().unwrap().push(q.to_string());
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            Response::bytes(StatusCode::OK, "slow done")
        }
        "/close" => Response::bytes(StatusCode::OK, "bye").header(header::CONNECTION, "close"),
        "/nocontent" => Response::new(StatusCode::NO_CONTENT),
        _ => Response::bytes(StatusCode::NOT_FOUND, "not found"),
    }
}

/// An app that serves `path` as a file (whole, or the range in the query `a-b`).
pub fn file_app(path: std::path::PathBuf) -> impl selvedge::App {
    let path = Arc::new(path);
    move |req: Request| {
        let path = path.clone();
        async move {
            let file = Arc::new(std::fs::File::open(&*path).unwrap());
            let len = file.metadata().unwrap().len();
            match req.query().and_then(|q| q.split_once('-')) {
                Some((a, b)) => {
                    let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
                    Response::file_range(StatusCode::PARTIAL_CONTENT, file, a, b - a + 1)
                }
                None => Response::file_range(StatusCode::OK, file, 0, len),
            }
        }
    }
}
