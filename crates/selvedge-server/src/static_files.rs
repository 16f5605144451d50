//! Static files: the app that maps a request path under a root directory.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use selvedge::http::{header, Method, StatusCode};
use selvedge::{App, Request, Response};

/// Serves files under `root`. Paths never escape the root: `.`/`..` segments, encoded
/// slashes, NUL bytes and dotfiles are refused, and the resolved path (after symlinks) must
/// stay inside the root.
#[derive(Debug, Clone)]
pub struct StaticFiles {
    root: PathBuf,
}

impl StaticFiles {
    /// Serves `root` (which should be canonical).
    pub fn new(root: PathBuf) -> StaticFiles {
        StaticFiles { root }
    }

    fn resolve(&self, req: &Request) -> Option<PathBuf> {
        let mut path = self.root.clone();
        for seg in req.segments() {
            if seg.is_empty() {
                continue;
            }
            if seg[0] == b'.' || seg.contains(&b'/') || seg.contains(&0) || seg.contains(&b'\\') {
                return None;
            }
            path.push(OsStr::from_bytes(&seg));
        }
        Some(path)
    }
}

/// The `Content-Type` for a file name.
pub fn mime(path: &std::path::Path) -> &'static str {
    match path.extension().and_then(OsStr::to_str).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "pdf" => "application/pdf",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

fn status(code: StatusCode) -> Response {
    Response::bytes(code, format!("{} {}\n", code.as_u16(), code.canonical_reason().unwrap_or("")))
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
}

impl App for StaticFiles {
    async fn handle(&self, req: Request) -> Response {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return status(StatusCode::METHOD_NOT_ALLOWED).header(header::ALLOW, "GET, HEAD");
        }
        let Some(mut path) = self.resolve(&req) else { return status(StatusCode::NOT_FOUND) };
        let Ok(meta) = std::fs::metadata(&path) else { return status(StatusCode::NOT_FOUND) };
        if meta.is_dir() {
            if !req.path().ends_with('/') {
                let loc = format!("{}/", req.path());
                return status(StatusCode::MOVED_PERMANENTLY).header(header::LOCATION, loc);
            }
            path.push("index.html");
        }
        match path.canonicalize() {
            Ok(real) if real.starts_with(&self.root) => {}
            _ => return status(StatusCode::NOT_FOUND),
        }
        match Response::file(StatusCode::OK, &path) {
            Ok(res) => res.header(header::CONTENT_TYPE, mime(&path)),
            Err(_) => status(StatusCode::NOT_FOUND),
        }
    }
}
