//! The filesystem gate: the one check every path built from a request passes before
//! anything of it is served (a file, a precompressed sibling, a directory's listing, its
//! slash redirect or its index, a CGI or FastCGI script).
//!
//! A route owns the files under its root, minus the roots of the other routes of its
//! virtual host that lie inside it (`nested`): those belong to their own routes, with
//! their own protections. A path is admitted when its canonical form (symlinks resolved)
//! is under the root (or anywhere, with `symlinks_outside`) and under none of the nested
//! roots. So a symlink cannot lead a request out of the root, nor into another route's
//! files past that route's checks (`www/old -> admin` does not serve `/admin`'s files
//! through `/`). Without `dotfiles`, the canonical path must not pass through a name
//! starting with `.` under the root either (`www/notdot -> .secret` is not served).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A route's gate.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The canonical root.
    root: PathBuf,
    /// Paths outside the root are admitted (a static route's `symlinks_outside`).
    outside: bool,
    /// The canonical roots of other routes of the virtual host inside this one's.
    nested: Arc<[PathBuf]>,
    /// Names starting with `.` are not served.
    hide_dotfiles: bool,
}

/// Whether `path` is `dir` or under it: a byte comparison of canonical paths
/// (`Path::starts_with` walks components, measurably slower per request).
pub fn inside(dir: &Path, path: &Path) -> bool {
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    p.starts_with(d) && (p.len() == d.len() || p[d.len()] == b'/' || d == b"/")
}

impl Gate {
    /// The gate of a route serving `root` (canonical); `outside`: admit paths outside it.
    pub fn new(root: PathBuf, outside: bool) -> Gate {
        Gate { root, outside, nested: Arc::from(Vec::new()), hide_dotfiles: true }
    }

    /// The same gate, serving names that start with `.` (a static route's `dotfiles`).
    pub fn with_dotfiles(mut self, dotfiles: bool) -> Gate {
        self.hide_dotfiles = !dotfiles;
        self
    }

    /// The same gate, minus those of `roots` (canonical roots of the other routes of the
    /// virtual host) that lie strictly inside this root.
    pub fn with_nested(mut self, roots: &[PathBuf]) -> Gate {
        let nested: Vec<PathBuf> =
            roots.iter().filter(|r| **r != self.root && inside(&self.root, r)).cloned().collect();
        self.nested = nested.into();
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the canonical path `real` may be served through this route.
    #[inline]
    pub fn admits(&self, real: &Path) -> bool {
        let under = inside(&self.root, real);
        (self.outside || under)
            && (self.nested.is_empty() || self.not_nested(real))
            && !(self.hide_dotfiles && under && self.dot_below_root(real))
    }

    /// Whether `real` (under the root) passes through a name starting with `.` below it.
    #[inline]
    fn dot_below_root(&self, real: &Path) -> bool {
        let rel = &real.as_os_str().as_bytes()[self.root.as_os_str().len()..];
        rel.windows(2).any(|w| w == b"/.") || (self.root.as_os_str() == "/" && rel.starts_with(b"."))
    }

    /// [`Gate::admits`] for a path built under the root from plain names, with no symlink
    /// crossed on the way (so it is its own canonical form).
    #[inline]
    pub fn admits_plain(&self, path: &Path) -> bool {
        self.nested.is_empty() || self.not_nested(path)
    }

    #[cold]
    fn not_nested(&self, real: &Path) -> bool {
        !self.nested.iter().any(|n| inside(n, real))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_outside_and_nested() {
        let p = |s: &str| PathBuf::from(s);
        let g = Gate::new(p("/srv/www"), false).with_nested(&[p("/srv/www"), p("/srv/www/admin"), p("/srv/other")]);
        assert!(g.admits(&p("/srv/www")));
        assert!(g.admits(&p("/srv/www/a.txt")));
        assert!(g.admits(&p("/srv/www/administrator/x")));
        assert!(!g.admits(&p("/srv/www/admin")));
        assert!(!g.admits(&p("/srv/www/admin/secret.txt")));
        assert!(!g.admits(&p("/srv/wwwx/a")));
        assert!(!g.admits(&p("/etc/passwd")));
        assert!(!g.admits_plain(&p("/srv/www/admin/x")));
        assert!(g.admits_plain(&p("/srv/www/b/x")));
        let open = Gate::new(p("/srv/www"), true).with_nested(&[p("/srv/www/admin")]);
        assert!(open.admits(&p("/etc/passwd")));
        assert!(!open.admits(&p("/srv/www/admin/x")));
        let root = Gate::new(p("/"), false);
        assert!(root.admits(&p("/etc")));
        // Dotfiles: hidden unless the route serves them.
        assert!(!g.admits(&p("/srv/www/.secret")));
        assert!(!g.admits(&p("/srv/www/a/.git/config")));
        assert!(g.admits(&p("/srv/www/a.b/c")));
        assert!(Gate::new(p("/srv/www"), false).with_dotfiles(true).admits(&p("/srv/www/.well-known/x")));
        assert!(!root.admits(&p("/.hidden")));
        assert!(inside(&p("/"), &p("/x")));
    }
}
