//! MIME types by file extension, case-insensitively: the `[mime]` table of the configuration
//! first, then the server's own table (the common web types, text ones with
//! `charset=utf-8`), then the shared MIME list of `mime_guess` (about 1,000 extensions:
//! yaml, m3u8, mov, flac, docx, epub, mkv, heic...); anything else is
//! `application/octet-stream`.
//!
//! The file cache looks a file's type up once, when it loads the file. A lookup is a byte
//! scan for the extension and an FNV-1a hash of at most 16 bytes in a table built once
//! (the table is fixed and only looked up, so a keyed hash buys nothing here): about 60
//! instructions, where `Path::extension` and SipHash took about 680.

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

/// The `[mime]` table (extension, lower case, without its dot → type), installed at start
/// and on reload.
static OVERRIDES: arc_swap::ArcSwapOption<HashMap<Box<[u8]>, &'static str>> = arc_swap::ArcSwapOption::const_empty();

/// Installs the `[mime]` table (empty: none). Each type is kept for the process's life
/// (a reload that names the same type again reuses it).
pub fn set_overrides(table: &std::collections::BTreeMap<String, String>) {
    static KEPT: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    if table.is_empty() {
        OVERRIDES.store(None);
        return;
    }
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let mut map = HashMap::new();
    for (ext, ty) in table {
        let ty: &'static str = match kept.iter().find(|k| **k == ty.as_str()) {
            Some(k) => k,
            None => {
                let k: &'static str = Box::leak(ty.clone().into_boxed_str());
                kept.push(k);
                k
            }
        };
        map.insert(ext.to_ascii_lowercase().into_bytes().into_boxed_slice(), ty);
    }
    OVERRIDES.store(Some(std::sync::Arc::new(map)));
}

/// Checks a `[mime]` entry: an extension (no dot, no slash) and a type that can go in a
/// header (`type/subtype`, parameters allowed).
///
/// # Errors
/// What is wrong with it.
pub fn check_override(ext: &str, ty: &str) -> Result<(), String> {
    if ext.is_empty() || ext.len() > 16 || !ext.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(format!("mime: {ext:?}: an extension without its dot (letters, digits, '-', '_'; at most 16)"));
    }
    let essence = ty.split(';').next().unwrap_or("").trim();
    let ok_essence = essence.split_once('/').is_some_and(|(a, b)| {
        let token = |t: &str| !t.is_empty() && t.bytes().all(|c| selvedge_proto::message::TCHAR[usize::from(c)]);
        token(a) && token(b)
    });
    if !ok_essence || selvedge::http::HeaderValue::from_str(ty).is_err() {
        return Err(format!("mime: {ext} = {ty:?}: a type such as \"text/plain; charset=utf-8\""));
    }
    Ok(())
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
    let ext = &buf[..ext.len()];
    if let Some(t) = OVERRIDES.load().as_ref().and_then(|o| o.get(ext).copied()) {
        return t;
    }
    if let Some(t) = table().get(ext) {
        return t;
    }
    std::str::from_utf8(ext).ok().and_then(|e| mime_guess::from_ext(e).first_raw()).unwrap_or(DEFAULT)
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
        // The shared list, for what the table does not name.
        for (ext, want) in [
            ("yaml", "yaml"),
            ("m3u8", "mpegurl"),
            ("mov", "video/quicktime"),
            ("flac", "audio/"),
            ("docx", "officedocument"),
            ("epub", "application/epub+zip"),
            ("mkv", "matroska"),
        ] {
            let t = for_path(Path::new(&format!("x.{ext}")));
            assert!(t.contains(want), "{ext}: {t}");
        }
    }

    #[test]
    fn overrides_come_first() {
        assert!(check_override("log", "text/plain; charset=utf-8").is_ok());
        for (e, t) in
            [(".log", "text/plain"), ("a/b", "text/plain"), ("log", "text"), ("log", "text/plain\n"), ("", "a/b")]
        {
            assert!(check_override(e, t).is_err(), "{e} {t}");
        }
        // (Extensions no other test looks up: the table is the process's.)
        let table =
            [("LOG".to_string(), "text/plain; charset=utf-8".to_string()), ("weird".into(), "text/x-test".into())];
        set_overrides(&table.into_iter().collect());
        assert_eq!(for_path(Path::new("a.log")), "text/plain; charset=utf-8");
        assert_eq!(for_path(Path::new("a.WEIRD")), "text/x-test");
        set_overrides(&Default::default());
        assert_eq!(for_path(Path::new("a.weird")), DEFAULT);
    }
}
