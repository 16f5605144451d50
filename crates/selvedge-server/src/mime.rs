//! MIME types by file extension: one hash lookup (O(1)) in a table built once, keyed by the
//! lower-cased extension; unknown extensions get `application/octet-stream`.
//!
//! Per request this is a byte scan for the extension and an FNV-1a hash of at most 16
//! bytes (the table is fixed and only looked up, so a keyed hash buys nothing here):
//! about 60 instructions, where `Path::extension` and SipHash took about 680.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

/// The type for files whose extension is unknown.
pub const DEFAULT: &str = "application/octet-stream";

const TABLE: &[(&str, &str)] = &[
    ("html", "text/html; charset=utf-8"),
    ("htm", "text/html; charset=utf-8"),
    ("css", "text/css; charset=utf-8"),
    ("js", "text/javascript; charset=utf-8"),
    ("mjs", "text/javascript; charset=utf-8"),
    ("json", "application/json"),
    ("map", "application/json"),
    ("webmanifest", "application/manifest+json"),
    ("xml", "application/xml"),
    ("rss", "application/rss+xml"),
    ("atom", "application/atom+xml"),
    ("txt", "text/plain; charset=utf-8"),
    ("md", "text/markdown; charset=utf-8"),
    ("csv", "text/csv; charset=utf-8"),
    ("svg", "image/svg+xml"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("webp", "image/webp"),
    ("avif", "image/avif"),
    ("ico", "image/x-icon"),
    ("bmp", "image/bmp"),
    ("wasm", "application/wasm"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tar", "application/x-tar"),
    ("woff", "font/woff"),
    ("woff2", "font/woff2"),
    ("ttf", "font/ttf"),
    ("otf", "font/otf"),
    ("mp3", "audio/mpeg"),
    ("ogg", "audio/ogg"),
    ("wav", "audio/wav"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
];

/// FNV-1a: short keys, fixed table.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type Table = HashMap<&'static [u8], &'static str, BuildHasherDefault<Fnv>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| TABLE.iter().map(|&(e, m)| (e.as_bytes(), m)).collect())
}

/// The extension of the last component of `p` (as `Path::extension`: none for `.name`,
/// `..` or a name without a dot).
fn extension(p: &[u8]) -> Option<&[u8]> {
    let end = p.iter().rposition(|&b| b != b'/')? + 1;
    let p = &p[..end];
    let name = &p[p.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1)..];
    if name == b".." {
        return None;
    }
    match name.iter().rposition(|&b| b == b'.') {
        None | Some(0) => None,
        Some(dot) => Some(&name[dot + 1..]),
    }
}

/// The `Content-Type` for `path` (by its extension, case-insensitively).
pub fn for_path(path: &Path) -> &'static str {
    let Some(ext) = extension(path.as_os_str().as_bytes()) else { return DEFAULT };
    let mut buf = [0u8; 16];
    if ext.len() > buf.len() {
        return DEFAULT;
    }
    for (o, b) in buf.iter_mut().zip(ext) {
        *o = b.to_ascii_lowercase();
    }
    table().get(&buf[..ext.len()]).copied().unwrap_or(DEFAULT)
}

/// Whether a type is worth a precompressed sibling (text-like).
pub fn compressible(mime: &str) -> bool {
    compressible_bytes(mime.as_bytes())
}

/// [`compressible`] on a header value's bytes.
pub fn compressible_bytes(m: &[u8]) -> bool {
    let has = |t: &[u8]| m.windows(t.len()).any(|w| w == t);
    m.starts_with(b"text/")
        || has(b"json")
        || has(b"xml")
        || m.ends_with(b"javascript")
        || matches!(m, b"application/wasm" | b"image/x-icon" | b"font/ttf" | b"font/otf")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(for_path(Path::new("/a/index.html")), "text/html; charset=utf-8");
        assert_eq!(for_path(Path::new("LOGO.SVG")), "image/svg+xml");
        assert_eq!(for_path(Path::new("x.unknown")), DEFAULT);
        assert_eq!(for_path(Path::new("noext")), DEFAULT);
        assert_eq!(for_path(Path::new("x.averyveryverylongextension")), DEFAULT);
        assert_eq!(for_path(Path::new("/site/.html")), DEFAULT);
        assert_eq!(for_path(Path::new("/site/a.b/noext")), DEFAULT);
        assert_eq!(for_path(Path::new("/site/a.CSS/")), for_path(Path::new("a.css")));
        assert_eq!(for_path(Path::new("..")), DEFAULT);
        assert_eq!(for_path(Path::new("x.")), DEFAULT);
        assert_eq!(for_path(Path::new(std::ffi::OsStr::from_bytes(b"x.\xff"))), DEFAULT);
        // The byte scan agrees with `Path::extension` on these.
        for p in ["/a/b.c.txt", ".bashrc", "a/.b.js", "a.b/c", "/", "", "a..", "dir/x.tar.gz", "./x.png"] {
            let std = Path::new(p).extension().map(|e| e.as_bytes());
            assert_eq!(extension(p.as_bytes()), std, "{p}");
        }
        assert!(compressible("text/css; charset=utf-8"));
        assert!(!compressible("image/png"));
    }
}
