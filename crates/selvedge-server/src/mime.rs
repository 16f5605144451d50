//! MIME types by file extension: one hash lookup (O(1)) in a table built once, keyed by the
//! lower-cased extension; unknown extensions get `application/octet-stream`.

use std::collections::HashMap;
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

fn table() -> &'static HashMap<&'static str, &'static str> {
    static T: OnceLock<HashMap<&'static str, &'static str>> = OnceLock::new();
    T.get_or_init(|| TABLE.iter().copied().collect())
}

/// The `Content-Type` for `path` (by its extension, case-insensitively).
pub fn for_path(path: &Path) -> &'static str {
    let Some(ext) = path.extension().and_then(|e| e.to_str()) else { return DEFAULT };
    let mut buf = [0u8; 16];
    if ext.len() > buf.len() {
        return DEFAULT;
    }
    for (o, b) in buf.iter_mut().zip(ext.bytes()) {
        *o = b.to_ascii_lowercase();
    }
    let lower = std::str::from_utf8(&buf[..ext.len()]).unwrap_or("");
    table().get(lower).copied().unwrap_or(DEFAULT)
}

/// Whether a type is worth a precompressed sibling (text-like).
pub fn compressible(mime: &str) -> bool {
    mime.starts_with("text/") || mime.contains("json") || mime.contains("xml") || mime.ends_with("javascript")
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
        assert!(compressible("text/css; charset=utf-8"));
        assert!(!compressible("image/png"));
    }
}
