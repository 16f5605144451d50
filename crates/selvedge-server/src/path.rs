//! The request's path, normalized once ([`selvedge::path`]) before redirect rules and
//! routing, so every later step sees one spelling of it.

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
