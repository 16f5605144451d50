//! The request's path, normalized once ([`selvedge::path`]) before redirect rules and
//! routing, so every later step sees one spelling of it; and how routes and matchers read
//! it (whole-segment prefixes, `;` parameters left out).

use selvedge::path::{self, PathError};
use selvedge::Request;

/// Puts `req` under its normalized path ([`selvedge::path`]: escapes decoded where a byte
/// may stand as itself, `//` merged, dot-segments resolved), so that redirect rules,
/// routing, every check of a route and what serves it see one spelling of the path. A
/// path already normal (nearly every request's) is left as it is after one pass over its
/// bytes; `*` and authority-form targets have no path and are left alone.
///
/// # Errors
/// The path is refused (the request is answered 400).
#[inline]
pub fn normalize(req: &mut Request) -> Result<(), PathError> {
    let p = req.path_bytes();
    if path::is_normal(p) || !p.starts_with(b"/") {
        return Ok(());
    }
    normalize_slow(req)
}

#[cold]
fn normalize_slow(req: &mut Request) -> Result<(), PathError> {
    thread_local! {
        static OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    OUT.with(|out| {
        let mut out = out.borrow_mut();
        path::normalize(req.path_bytes(), &mut out)?;
        if *out != req.path_bytes() {
            // A normal path is visible ASCII starting with `/`: what set_path takes.
            req.set_path(&out).map_err(|_| PathError::NotAbsolute)?;
        }
        if out.capacity() > 4096 {
            *out = Vec::new();
        }
        Ok(())
    })
}

/// `prefix` matches `path` on a segment boundary (`/a` matches `/a`, `/a/b`, not `/ab`).
#[inline]
pub fn prefix_matches(prefix: &str, path: &[u8]) -> bool {
    let prefix = prefix.as_bytes();
    if let [b'/'] = prefix {
        return path.first() == Some(&b'/');
    }
    path.starts_with(prefix) && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

/// `path` with each segment's `;` parameters left out, and a segment that held nothing
/// else left out with them (`/app/;x/internal` is `/app/internal`, as a servlet container
/// that drops parameters and merges slashes reads it); a last one stays a trailing slash.
pub fn without_parameters(path: &[u8]) -> Vec<u8> {
    let Some(rest) = path.strip_prefix(b"/") else { return path.to_vec() };
    let mut out = Vec::with_capacity(path.len());
    let mut segs = rest.split(|&b| b == b'/').peekable();
    while let Some(seg) = segs.next() {
        let name = seg.split(|&b| b == b';').next().unwrap_or(seg);
        if name.is_empty() && segs.peek().is_some() {
            continue;
        }
        out.push(b'/');
        out.extend_from_slice(name);
    }
    out
}
