//! Serving from disk: static files (here: the app that maps a request path under a root
//! directory), directory listings ([`listing`]), MIME types ([`mime`]), compression
//! ([`compression`]: a file's kept compressed copies, and on the fly for the other routes'
//! responses too) and the filesystem gate every path served from disk passes, CGI and
//! FastCGI scripts included ([`gate`]).
//!
//! Per request, after the route picked this app:
//! 1. GET and HEAD only (else 405 with `Allow`).
//! 2. The path's segments (percent-decoded) are checked: `.`/`..`, encoded slashes or
//!    backslashes and NUL bytes are a 400; a segment starting with `.` (a dotfile) is a
//!    404 unless `dotfiles` is on. So nothing built from the URL can climb out of the root.
//! 3. The file cache says what the path is (no system call when cached). A file or
//!    directory the route's [`Gate`] does not admit (its real path, symlinks resolved, is
//!    outside the root without `symlinks_outside`, or inside another route's root) is a
//!    404, whatever is asked of it. A directory without a trailing slash is redirected
//!    (301) to the slash form; with one, its index file is served, else its listing
//!    (`listing`, see [`listing`]). No file: the `fallback` file for a page request (200,
//!    `Vary: Accept`), else 404.
//! 4. A `.br`, `.zst` or `.gz` sibling is served instead when `Accept-Encoding` allows it
//!    (`Content-Encoding`, `Vary: Accept-Encoding`); without one, `compress` gives a copy
//!    compressed once and kept with the cache entry ([`compression`]).
//! 5. Conditionals (`If-Match`, `If-Unmodified-Since`, `If-None-Match`,
//!    `If-Modified-Since`) give 304/412; then `If-Range` + `Range` give 206 (one range from
//!    the file, several as `multipart/byteranges`) or 416; else 200.
//!
//! The route's fixed fields (`headers`, `Vary: Origin`) go on every answer; on the whole
//! file's they are rendered once with the file's own shared fields.

pub mod compression;
pub mod gate;
pub mod listing;
pub mod mime;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use selvedge::file::range::{self, ByteRange, Ranges};
use selvedge::file::{conditional, Entry, FileCache, FileInfo, Kind, Precondition, Preconditions, Sibling};
use selvedge::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use selvedge::{Request, Response, SharedFields};
use selvedge_proto::message::trim_ows;

use self::compression::Compression;
use self::gate::Gate;

/// A `multipart/byteranges` body is read from its file this many bytes at a time, as the
/// client takes them (the `multipart` body).
pub const MULTIPART_CHUNK: usize = 16 * 1024;

/// `Accept-Ranges: bytes`, checked at compile time rather than per response.
static BYTES: HeaderValue = HeaderValue::from_static("bytes");

/// Options of one static route.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// Index files tried in a directory, in order: `["index.html"]`.
    pub index: Vec<String>,
    /// Serve names starting with `.`: off.
    pub dotfiles: bool,
    /// Serve files whose real path (after symlinks) leaves the root: off.
    pub symlinks_outside: bool,
    /// Serve `.br` / `.gz` siblings when the client accepts them: on.
    pub precompressed: bool,
    /// `Cache-Control: max-age=N` on files, if set.
    pub max_age: Option<u64>,
    /// Error pages by status: files served (with that status) instead of the plain text.
    pub error_pages: HashMap<u16, PathBuf>,
    /// List directories without an index file: off (on under `selvedge serve`).
    pub listing: bool,
    /// Most entries a listing reads: 10,000.
    pub listing_max: usize,
    /// A file under the root (`"/index.html"`) served with 200 for page requests of paths
    /// with no file (a single-page app's deep links): none.
    pub fallback: Option<String>,
    /// Compress compressible types on the fly: on.
    pub compress: bool,
    /// Fields added to every response (the route's `headers`, `Vary: Origin`), rendered
    /// once per file with the file's own fields.
    pub fields: Vec<(HeaderName, HeaderValue)>,
}

impl Default for StaticOptions {
    fn default() -> Self {
        StaticOptions {
            index: vec!["index.html".into()],
            dotfiles: false,
            symlinks_outside: false,
            precompressed: true,
            max_age: None,
            error_pages: HashMap::new(),
            listing: false,
            listing_max: 10_000,
            fallback: None,
            compress: true,
            fields: Vec::new(),
        }
    }
}

/// Serves files under `root`.
#[derive(Debug, Clone)]
pub struct StaticFiles {
    root: PathBuf,
    /// Number of path segments of the route's prefix, skipped before mapping.
    skip: usize,
    opts: Arc<StaticOptions>,
    cache: FileCache,
    cache_control: Option<HeaderValue>,
    /// Tags the fields this route renders for a cached file ([`FileInfo::fields`]): a hash
    /// of the settings they depend on (root, `Cache-Control`, precompression, symlinks),
    /// so routes that would render the same fields share them, across reloads too.
    fields_key: u64,
    /// The route's fixed fields (see [`StaticOptions::fields`]).
    fixed: Arc<[(HeaderName, HeaderValue)]>,
    /// The fallback file's path, if any.
    fallback: Option<PathBuf>,
    /// Tags a listing's scan kept with a directory's cache entry (by the settings it
    /// depends on).
    listing_key: u64,
    /// What may be served ([`Gate`]): the root, `symlinks_outside`, and the roots of the
    /// virtual host's other routes nested inside this one's.
    gate: Gate,
    /// The compressor, when the route compresses.
    compression: Option<Compression>,
}

/// Why a path cannot be mapped.
enum Refused {
    Bad,
    Hidden,
}

impl StaticFiles {
    /// Serves `root` (canonicalized here) for requests under `prefix`.
    ///
    /// # Errors
    /// `root` does not exist or is not a directory.
    pub fn new(root: &Path, prefix: &str, opts: StaticOptions, cache: FileCache) -> std::io::Result<StaticFiles> {
        let root = root.canonicalize()?;
        if !root.is_dir() {
            return Err(std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"));
        }
        let skip = prefix.split('/').filter(|s| !s.is_empty()).count();
        let cache_control = opts.max_age.map(|a| HeaderValue::try_from(format!("max-age={a}")).expect("digits"));
        let fields_key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            root.hash(&mut h);
            cache_control.as_ref().map(HeaderValue::as_bytes).hash(&mut h);
            (opts.precompressed, opts.symlinks_outside, opts.compress).hash(&mut h);
            for (n, v) in &opts.fields {
                (n.as_str(), v.as_bytes()).hash(&mut h);
            }
            h.finish()
        };
        let listing_key = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            ("listing", &root, opts.dotfiles, opts.symlinks_outside, opts.listing_max).hash(&mut h);
            h.finish()
        };
        let fallback = match &opts.fallback {
            Some(f) => {
                let rel = f.trim_start_matches('/');
                let bad = rel.is_empty()
                    || rel.split('/').any(|s| s.is_empty() || s == "." || s == ".." || s.contains('\\'))
                    || rel.contains('\0');
                if bad {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("fallback {f:?}: a file under the root (\"/index.html\")"),
                    ));
                }
                Some(root.join(rel))
            }
            None => None,
        };
        let fixed = opts.fields.clone().into();
        Ok(StaticFiles {
            gate: Gate::new(root.clone(), opts.symlinks_outside).with_dotfiles(opts.dotfiles),
            root,
            skip,
            opts: Arc::new(opts),
            cache,
            cache_control,
            fields_key,
            fixed,
            fallback,
            listing_key,
            compression: None,
        })
    }

    /// Compresses with `c` when the options say so.
    pub fn with_compression(mut self, c: &Compression) -> StaticFiles {
        if self.opts.compress {
            self.compression = Some(c.clone());
        }
        self
    }

    /// Refuses what lies under `roots` (the canonical roots of the virtual host's other
    /// routes) where they are nested inside this route's root ([`Gate::with_nested`]).
    pub fn with_nested(mut self, roots: &[PathBuf]) -> StaticFiles {
        self.gate = self.gate.with_nested(roots);
        // A listing shows what the gate admits: its scans are kept apart by it too.
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        (self.listing_key, roots).hash(&mut h);
        self.listing_key = h.finish();
        self
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file system path for `req`, built into `path` (which must be empty).
    fn resolve(&self, req: &Request, path: &mut Vec<u8>) -> Result<(), Refused> {
        resolve_into(self.root.as_os_str().as_bytes(), req, self.skip, self.opts.dotfiles, path)
    }

    /// Whether the request's path names a file (`dir`: a directory) this route serves,
    /// through the same checks as [`StaticFiles::respond`] (dotfiles, symlinks, nested
    /// roots): `try_files` asks before it picks a path.
    pub fn exists(&self, req: &Request, dir: bool) -> bool {
        let mut buf = Vec::new();
        let root = self.root.as_os_str().as_bytes();
        if resolve_into(root, req, self.skip, self.opts.dotfiles, &mut buf).is_err() {
            return false;
        }
        let Ok(real) = Path::new(OsStr::from_bytes(&buf)).canonicalize() else { return false };
        self.gate.admits(&real) && std::fs::metadata(&real).is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    }

    /// A plain or custom error response.
    pub fn error(&self, status: StatusCode) -> Response {
        if let Some(page) = self.opts.error_pages.get(&status.as_u16()) {
            if let Some(f) = self.cache.lookup(page).file() {
                return body_of(status, f, 0, f.size).header(header::CONTENT_TYPE, mime::for_path(page));
            }
        }
        plain(status)
    }

    /// Answers a request routed here: nothing waits, so the server calls this directly
    /// (no future of its own per request).
    pub fn respond(&self, req: &Request) -> Response {
        // The file's path is built in this thread's scratch buffer: no allocation per request.
        thread_local! {
            static PATH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let mut buf = PATH.with(|p| std::mem::take(&mut *p.borrow_mut()));
        let (mut res, fixed_done) = self.respond_with(req, &mut buf);
        if buf.capacity() <= 4096 {
            buf.clear();
            PATH.with(|p| *p.borrow_mut() = buf);
        }
        if !fixed_done && !self.fixed.is_empty() {
            let h = res.headers_mut();
            h.retain(|(n, _)| !self.fixed.iter().any(|(f, _)| f == n && f != header::VARY));
            h.extend(self.fixed.iter().cloned());
        }
        res
    }

    fn respond_with(&self, req: &Request, buf: &mut Vec<u8>) -> (Response, bool) {
        let get = req.method() == Method::GET;
        if !get && req.method() != Method::HEAD {
            return (self.error(StatusCode::METHOD_NOT_ALLOWED).header(header::ALLOW, "GET, HEAD"), false);
        }
        buf.clear();
        match self.resolve(req, buf) {
            Ok(()) => {}
            Err(Refused::Bad) => return (self.error(StatusCode::BAD_REQUEST), false),
            Err(Refused::Hidden) => return self.missing(req, get),
        }
        let path = Path::new(OsStr::from_bytes(buf));
        let fields = Fields::of(req);
        let entry = self.cache.lookup(path);
        match &entry.kind {
            Kind::File(_) => self.serve(get, &fields, &entry, path),
            Kind::Missing => self.missing(req, get),
            Kind::Unavailable => (self.error(StatusCode::SERVICE_UNAVAILABLE).header(header::RETRY_AFTER, "1"), false),
            Kind::Dir { real } => {
                // A directory reached through a symlink out of the root (or into another
                // route's root) is not there: no redirect, index or listing confirms it.
                if !self.gate.admits(real) {
                    return (self.error(StatusCode::NOT_FOUND), false);
                }
                if !req.path().ends_with('/') {
                    let loc = match req.query() {
                        Some(q) => format!("{}/?{q}", req.path()),
                        None => format!("{}/", req.path()),
                    };
                    return (self.error(StatusCode::MOVED_PERMANENTLY).header(header::LOCATION, loc), false);
                }
                // The index file's path is built on the directory's, in the same buffer.
                let dir_len = buf.len();
                let found = self.opts.index.iter().find_map(|name| {
                    buf.truncate(dir_len);
                    if buf.last() != Some(&b'/') {
                        buf.push(b'/');
                    }
                    buf.extend_from_slice(name.as_bytes());
                    let e = self.cache.lookup(Path::new(OsStr::from_bytes(buf)));
                    e.file().is_some().then_some(e)
                });
                match found {
                    Some(e) => self.serve(get, &fields, &e, Path::new(OsStr::from_bytes(buf))),
                    None => {
                        buf.truncate(dir_len);
                        let path = Path::new(OsStr::from_bytes(buf));
                        if self.opts.listing {
                            (self.listing(req, &entry, path), false)
                        } else {
                            self.missing(req, get)
                        }
                    }
                }
            }
        }
    }

    /// No file for the path: the `fallback` file for a page request (status 200, with
    /// conditionals and ranges, `Vary: Accept`), else 404.
    fn missing(&self, req: &Request, get: bool) -> (Response, bool) {
        let Some(fallback) = &self.fallback else { return (self.error(StatusCode::NOT_FOUND), false) };
        if !accepts_html(req.header("accept")) {
            return (self.error(StatusCode::NOT_FOUND).header(header::VARY, "Accept"), false);
        }
        let entry = self.cache.lookup(fallback);
        if entry.file().is_none() {
            return (self.error(StatusCode::NOT_FOUND).header(header::VARY, "Accept"), false);
        }
        let (res, _) = self.serve(get, &Fields::of(req), &entry, fallback);
        // The shared fields of the file do not say that this answer depends on `Accept`.
        (res.header(header::VARY, "Accept"), false)
    }

    /// A directory's listing (HTML, or JSON by `Accept`), from the scan kept with the
    /// directory's cache entry until the cache's next sweep.
    fn listing(&self, req: &Request, entry: &Entry, dir: &Path) -> Response {
        let sweep = self.cache.sweeps();
        let scan = match entry.derived.get::<listing::Scan>(self.listing_key) {
            Some(s) if s.sweep == sweep => s,
            _ => {
                let show = |p: &Path| p.canonicalize().is_ok_and(|real| self.gate.admits(&real));
                match listing::scan(dir, self.opts.dotfiles, self.opts.listing_max, &show, sweep) {
                    Ok(s) => {
                        let s = Arc::new(s);
                        entry.derived.set(self.listing_key, s.clone());
                        s
                    }
                    Err(_) => return self.error(StatusCode::NOT_FOUND),
                }
            }
        };
        let view = listing::View::from_query(req.query());
        let json = listing::wants_json(req.header("accept"));
        let title = String::from_utf8_lossy(&selvedge::percent_decode(req.path_bytes())).into_owned();
        let at_root = req.segments().skip(self.skip).all(|s| s.is_empty());
        let truncated = scan.truncated().then(|| format!("shown={}; total={}", scan.items.len(), scan.total));
        let mut render = listing::Render::new(scan, json, title, at_root, view);
        let mut res = Response::stream(StatusCode::OK, move |mut w| async move {
            let mut piece = String::with_capacity(listing::LISTING_CHUNK + 4096);
            while render.fill(&mut piece) {
                w.write(piece.as_bytes()).await?;
                piece.clear();
            }
            Ok(())
        });
        res = if json {
            let r = res.header(header::CONTENT_TYPE, "application/json");
            match truncated {
                Some(t) => r.header(HeaderName::from_static("x-listing-truncated"), t),
                None => r,
            }
        } else {
            res.header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        };
        res = res.header(header::VARY, "Accept").header(header::CACHE_CONTROL, "no-cache");
        match &self.compression {
            Some(c) => {
                let choice = c.choice(req.header("accept-encoding"));
                if choice.streamed.is_some() {
                    c.stream(res, choice)
                } else {
                    res.header(header::VARY, "Accept-Encoding")
                }
            }
            None => res,
        }
    }

    /// Serves the regular file of `entry` (at `path`). The flag: the response carries the
    /// route's fixed fields already (in the file's shared fields).
    fn serve(&self, get: bool, fields: &Fields<'_>, entry: &Entry, path: &Path) -> (Response, bool) {
        let Some(f) = entry.file() else { return (self.error(StatusCode::NOT_FOUND), false) };
        if !self.gate.admits(&f.real) {
            return (self.error(StatusCode::NOT_FOUND), false);
        }
        // The main file's type (a precompressed sibling goes out with it), looked up once
        // when the file was cached (the same table, see `routes.rs`).
        let ct = f.content_type.clone().unwrap_or_else(|| HeaderValue::from_static(mime::for_path(path)));
        let content_type = || ct.to_str().unwrap_or(mime::DEFAULT);

        // Precompressed siblings (found and validated with the file by the cache).
        let mut encoding = None;
        let mut vary_siblings = false;
        let mut f = f;
        if self.opts.precompressed && !entry.siblings.is_empty() && mime::compressible(content_type()) {
            let accept = fields.accept_encoding.unwrap_or(b"");
            let inside = |s: &&Sibling| self.gate.admits(&s.info.real);
            vary_siblings = entry.siblings.iter().any(|s| inside(&s));
            for s in entry.siblings.iter().filter(inside) {
                let coding = match s.ext {
                    "gz" => "gzip",
                    "zst" => "zstd",
                    ext => ext,
                };
                if accepts(accept, coding) {
                    encoding = Some(coding);
                    f = &s.info;
                    break;
                }
            }
        }
        // On-the-fly compression: a copy kept with the entry, or compressed as sent. The
        // type is only looked at when it matters (a client accepting a coding, or fields
        // being rendered), not for every request of a file whose fields are shared.
        let precompressed = encoding.is_some();
        let dynamic = || match &self.compression {
            Some(c) if !precompressed && f.size >= c.config().min_size => Some(c),
            _ => None,
        };
        let compressible = || mime::compressible_bytes(ct.as_bytes());
        let mut variant = None;
        let mut stream = None;
        if let (Some(accept), None) = (fields.accept_encoding, fields.range) {
            if let Some(c) = dynamic() {
                let choice = c.choice(Some(accept));
                if choice.any() && compressible() {
                    match choice.whole.map(|coding| (c.variant(entry, f, coding), coding)) {
                        Some((Some(v), coding)) if v.bytes.is_some() => variant = Some((v, coding)),
                        Some((Some(_), _)) => {}
                        // Too large to keep (or the memory is spent): compressed as sent.
                        _ => stream = choice.streamed.is_some().then_some(choice),
                    }
                }
            }
        }
        let vary_cell = std::cell::OnceCell::new();
        let vary = || *vary_cell.get_or_init(|| vary_siblings || (dynamic().is_some() && compressible()));
        let etag = match &variant {
            Some((v, _)) => &v.etag,
            None => &f.etag,
        };
        if let Some((_, coding)) = &variant {
            encoding = Some(coding.token());
        }

        let pre = Preconditions {
            if_match: fields.if_match,
            if_none_match: fields.if_none_match,
            if_modified_since: fields.if_modified_since,
            if_unmodified_since: fields.if_unmodified_since,
        };
        // The validators and caching fields of every answer about `f` (200, 206, 304,
        // 412, 416), and the type and coding of those carrying its bytes.
        let push_common = |h: &mut Vec<_>| {
            h.push((header::LAST_MODIFIED, f.last_modified.clone()));
            h.push((header::ETAG, etag.clone()));
            if let Some(cc) = &self.cache_control {
                h.push((header::CACHE_CONTROL, cc.clone()));
            }
            if vary() {
                h.push((header::VARY, HeaderValue::from_static("Accept-Encoding")));
            }
        };
        let push_typed = |h: &mut Vec<_>| {
            push_common(h);
            h.push((header::CONTENT_TYPE, ct.clone()));
            if let Some(c) = encoding {
                h.push((header::CONTENT_ENCODING, HeaderValue::from_static(c)));
            }
        };
        let common = |mut res: Response| {
            push_common(res.headers_mut());
            (res, false)
        };
        match conditional::evaluate(&pre, true, etag.as_bytes(), f.mtime) {
            Precondition::Proceed => {}
            Precondition::NotModified => return common(Response::new(StatusCode::NOT_MODIFIED)),
            Precondition::Failed => return common(self.error(StatusCode::PRECONDITION_FAILED)),
        }
        if let Some((v, _)) = &variant {
            // The kept compressed copy, with fields rendered once for it.
            let shared = v.fields.get_or_make(self.fields_key, || {
                let mut h = Vec::with_capacity(7 + self.fixed.len());
                push_typed(&mut h);
                h.extend(self.fixed.iter().cloned());
                SharedFields::new(h)
            });
            let bytes = v.bytes.clone().unwrap_or_default();
            return (Response::bytes(StatusCode::OK, bytes).shared_fields(shared), true);
        }
        let typed = |mut res: Response| {
            push_typed(res.headers_mut());
            (res, false)
        };
        // The whole file: its fields are rendered once per file (and route settings) and
        // shared by every such response (the HTTP/1.1 head is then one copy).
        let whole = || {
            let shared = f.fields.get_or_make(self.fields_key, || {
                let mut v = Vec::with_capacity(7 + self.fixed.len());
                push_typed(&mut v);
                v.push((header::ACCEPT_RANGES, BYTES.clone()));
                v.extend(self.fixed.iter().cloned());
                SharedFields::new(v)
            });
            let res = bare(StatusCode::OK, f, 0, f.size).shared_fields(shared);
            match (&self.compression, stream) {
                // Too large to keep compressed (or the memory is spent): compressed as sent
                // (unless max_streams are being compressed already).
                (Some(c), Some(choice)) => {
                    let mut res = c.stream(res, choice);
                    if res.headers().any(|(n, _)| n == header::CONTENT_ENCODING) {
                        res.headers_mut().retain(|(n, _)| n != header::ACCEPT_RANGES);
                    }
                    (res, true)
                }
                _ => (res, true),
            }
        };

        let ranges = match fields.range {
            Some(r) if get => match fields.if_range {
                Some(ir) if !range::if_range_matches(ir, f.etag.as_bytes(), f.mtime) => Ranges::Ignore,
                _ => range::parse(r, f.size),
            },
            _ => Ranges::Ignore,
        };
        match ranges {
            Ranges::Ignore => whole(),
            Ranges::Unsatisfiable => {
                let (res, _) = common(self.error(StatusCode::RANGE_NOT_SATISFIABLE));
                (res.header(header::CONTENT_RANGE, format!("bytes */{}", f.size)), false)
            }
            Ranges::Satisfiable(rs) if rs.len() == 1 => {
                let r = rs[0];
                let (res, _) = typed(body_of(StatusCode::PARTIAL_CONTENT, f, r.start, r.len));
                (res.header(header::CONTENT_RANGE, range::content_range(r, f.size)), false)
            }
            Ranges::Satisfiable(rs) => {
                let (boundary, res) = multipart(f, &rs, content_type());
                let (mut res, _) = common(res);
                res = res.header(header::CONTENT_TYPE, format!("multipart/byteranges; boundary={boundary}"));
                if let Some(c) = encoding {
                    res = res.header(header::CONTENT_ENCODING, HeaderValue::from_static(c));
                }
                (res, false)
            }
        }
    }
}

/// [`StaticFiles::resolve`] for a root, a number of the route's segments to skip and the
/// `dotfiles` setting.
#[inline(always)]
fn resolve_into(root: &[u8], req: &Request, skip: usize, dotfiles: bool, path: &mut Vec<u8>) -> Result<(), Refused> {
    // Bytes appended by hand: `PathBuf::push` re-examines separators on every call.
    path.extend_from_slice(root);
    if let Some(rest) = plain_rest(req.path_bytes(), skip) {
        // The common case: nothing to decode, refuse or collapse, so the path's bytes go on
        // as they are (what the segment loop below builds, in one copy).
        if !rest.is_empty() {
            if root.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(rest);
        }
        return Ok(());
    }
    resolve_segments(req, skip, dotfiles, path)
}

/// The general case of [`resolve_into`]: segment by segment, percent-decoded, onto the root
/// already in `path`.
fn resolve_segments(req: &Request, skip: usize, dotfiles: bool, path: &mut Vec<u8>) -> Result<(), Refused> {
    for seg in req.segments().skip(skip) {
        if seg.is_empty() {
            continue;
        }
        if &*seg == b"." || &*seg == b".." || seg.iter().any(|&b| b == b'/' || b == b'\\' || b == 0) {
            return Err(Refused::Bad);
        }
        if seg[0] == b'.' && !dotfiles {
            return Err(Refused::Hidden);
        }
        if path.last() != Some(&b'/') {
            path.push(b'/');
        }
        path.extend_from_slice(&seg);
    }
    Ok(())
}

/// The request path's part below the route's `skip` leading segments, without a trailing
/// slash, when the segment loop of [`StaticFiles::resolve`] would take it as it is: no `%`
/// (nothing to decode), no backslash or NUL, no empty segment (`//`) and no segment
/// starting with `.` (`.`, `..` and dotfiles are decided there). `None`: take that loop.
#[inline]
fn plain_rest(path: &[u8], skip: usize) -> Option<&[u8]> {
    let mut rest = path.strip_prefix(b"/")?;
    for _ in 0..skip {
        rest = match rest.iter().position(|&b| b == b'/') {
            Some(i) => &rest[i + 1..],
            None => &[],
        };
    }
    let mut prev = b'/';
    for &b in rest {
        match PATH_CLASS[b as usize] {
            0 => {}
            1 if prev != b'/' => {}
            _ => return None,
        }
        prev = b;
    }
    Some(rest.strip_suffix(b"/").unwrap_or(rest))
}

/// For [`plain_rest`]: 2 for bytes that always need the segment loop (`%`, `\`, NUL), 1
/// for those that need it after a `/` (`.` and `/` begin a dot segment or an empty one).
static PATH_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'%' as usize] = 2;
    t[b'\\' as usize] = 2;
    t[0] = 2;
    t[b'.' as usize] = 1;
    t[b'/' as usize] = 1;
    t
};

/// Whether an `Accept` value names HTML (`text/html` or XHTML with a non-zero q): a page
/// load, not a script's or an image's request, which `*/*` is.
fn accepts_html(accept: Option<&[u8]>) -> bool {
    let Some(a) = accept else { return false };
    a.split(|&b| b == b',').any(|item| {
        let mut parts = item.split(|&b| b == b';');
        let ty = trim_ows(parts.next().unwrap_or(b""));
        let html = ty.eq_ignore_ascii_case(b"text/html") || ty.eq_ignore_ascii_case(b"application/xhtml+xml");
        html && !parts.any(|p| {
            let p = trim_ows(p);
            p.len() >= 2
                && p[..2].eq_ignore_ascii_case(b"q=")
                && trim_ows(&p[2..]).iter().all(|&b| b == b'0' || b == b'.')
        })
    })
}

/// The request fields the handler reads, found in one pass over the headers (the first
/// value of each, as [`Request::header`] gives).
#[derive(Default)]
struct Fields<'a> {
    accept_encoding: Option<&'a [u8]>,
    if_match: Option<&'a [u8]>,
    if_none_match: Option<&'a [u8]>,
    if_modified_since: Option<&'a [u8]>,
    if_unmodified_since: Option<&'a [u8]>,
    range: Option<&'a [u8]>,
    if_range: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    #[inline(always)]
    fn of(req: &'a Request) -> Fields<'a> {
        let mut f = Fields::default();
        for (name, value) in req.header_bytes() {
            let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
            let slot = match name.len() {
                5 if is(b"range") => &mut f.range,
                8 if is(b"if-match") => &mut f.if_match,
                8 if is(b"if-range") => &mut f.if_range,
                13 if is(b"if-none-match") => &mut f.if_none_match,
                15 if is(b"accept-encoding") => &mut f.accept_encoding,
                17 if is(b"if-modified-since") => &mut f.if_modified_since,
                19 if is(b"if-unmodified-since") => &mut f.if_unmodified_since,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        f
    }
}

/// A response carrying `len` bytes of `f` from `offset`: from memory if the cache holds
/// the bytes, else from the open file (`sendfile`).
fn body_of(status: StatusCode, f: &FileInfo, offset: u64, len: u64) -> Response {
    let mut res = bare(status, f, offset, len);
    // Room for the fields every file response gets (no regrowth; usually no allocation).
    res.reserve_headers(6);
    res
}

/// The same with no header list of its own (for a response whose fields come shared).
fn bare(status: StatusCode, f: &FileInfo, offset: u64, len: u64) -> Response {
    match &f.bytes {
        Some(b) => Response::bytes(status, b.slice(offset as usize..(offset + len) as usize)),
        None => Response::file_range(status, f.file.clone(), offset, len),
    }
}

fn plain(status: StatusCode) -> Response {
    Response::error(status)
}

/// Whether `Accept-Encoding` allows `coding` (by name or `*`, with a non-zero q).
fn accepts(header: &[u8], coding: &str) -> bool {
    selvedge_proto::message::accept_q(header, &[coding.as_bytes()]) > 0
}

/// A `multipart/byteranges` answer (206) for `rs` (at most [`range::MAX_RANGES`], in order,
/// not overlapping), and its boundary. The body is streamed: the part heads (about a
/// hundred bytes each) are made first, then each range is read from the file
/// [`MULTIPART_CHUNK`] bytes at a time as the client takes them, so what one such answer
/// holds while it waits on a slow client is those heads and one chunk.
fn multipart(f: &FileInfo, rs: &[ByteRange], content_type: &str) -> (String, Response) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let boundary = format!("selvedge-{:016x}{n:08x}", f.mtime ^ f.size.rotate_left(32));
    let parts: Vec<(Bytes, ByteRange)> = rs
        .iter()
        .map(|r| {
            let head = format!(
                "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: {}\r\n\r\n",
                range::content_range(*r, f.size)
            );
            (Bytes::from(head), *r)
        })
        .collect();
    let tail = Bytes::from(format!("\r\n--{boundary}--\r\n"));
    let length = parts.iter().map(|(h, r)| h.len() as u64 + r.len).sum::<u64>() + tail.len() as u64;
    let (bytes, file) = (f.bytes.clone(), f.file.clone());
    let res = Response::stream(StatusCode::PARTIAL_CONTENT, move |mut w| async move {
        let mut chunk = Vec::new();
        for (head, r) in &parts {
            w.write(head).await?;
            if let Some(b) = &bytes {
                w.write(&b[r.start as usize..(r.start + r.len) as usize]).await?;
                continue;
            }
            let (mut at, end) = (r.start, r.start + r.len);
            while at < end {
                let n = MULTIPART_CHUNK.min((end - at) as usize);
                chunk.resize(n, 0);
                // A file that shrank ends the body short: the declared length tells the client.
                read_exact_at(&file, &mut chunk, at).ok_or(std::io::ErrorKind::UnexpectedEof)?;
                w.write(&chunk).await?;
                at += n as u64;
            }
        }
        w.write(&tail).await
    });
    (boundary, res.header(header::CONTENT_LENGTH, length))
}

fn read_exact_at(file: &std::fs::File, mut buf: &mut [u8], mut offset: u64) -> Option<()> {
    use std::os::unix::fs::FileExt;
    while !buf.is_empty() {
        match file.read_at(buf, offset) {
            Ok(0) | Err(_) => return None,
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Some(())
}

/// Reads a small regular file that the configuration names (an error page, an htpasswd
/// file): opened without blocking (a FIFO cannot stall a reload), refused if it is not a
/// regular file or is over `max` bytes.
///
/// # Errors
/// It cannot be opened or read, it is not a regular file, or it is too large.
pub fn read_small(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f =
        std::fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32).open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("over {max} bytes")));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("over {max} bytes")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_in_one_pass_match_header_lookups() {
        let req: Request = selvedge::http::Request::builder()
            .uri("/x")
            .header("RANGE", "bytes=0-1")
            .header("If-Match", "\"a\"")
            .header("if-range", "\"b\"")
            .header("If-None-Match", "\"c\"")
            .header("accept-encoding", "br")
            .header("If-Modified-Since", "Sat, 21 Nov 2026 10:00:00 GMT")
            .header("if-unmodified-since", "Sun, 22 Nov 2026 10:00:00 GMT")
            .header("range", "bytes=5-6")
            .header("x-other", "y")
            .body(Bytes::new())
            .unwrap()
            .into();
        let f = Fields::of(&req);
        for (got, name) in [
            (f.range, "range"),
            (f.if_match, "if-match"),
            (f.if_range, "if-range"),
            (f.if_none_match, "if-none-match"),
            (f.accept_encoding, "accept-encoding"),
            (f.if_modified_since, "if-modified-since"),
            (f.if_unmodified_since, "if-unmodified-since"),
        ] {
            assert_eq!(got, req.header(name), "{name}");
            assert!(got.is_some(), "{name}");
        }
        assert_eq!(f.range, Some(&b"bytes=0-1"[..]));
    }

    /// The one-copy path of `resolve_into` builds what the segment loop builds, for every
    /// path it takes (and leaves the others to it).
    #[test]
    fn plain_paths_resolve_as_the_segment_loop_does() {
        let paths = [
            "/",
            "/index.html",
            "/a/b/c.txt",
            "/a/b/",
            "/a//b",
            "//a",
            "/a/./b",
            "/a/../b",
            "/.hidden",
            "/a/.git/x",
            "/a/b.c/d",
            "/a%20b",
            "/a%2fb",
            "/a%5cb",
            "/a%00b",
            "/a/b/.",
            "/a/..",
            "/x.",
            "/.",
            "/a.b.",
            "/static",
            "/static/",
            "/static/x/y",
            "/static//x",
            "/staticx/y",
            "/%2e%2e/x",
        ];
        let mut fast = 0;
        for root in ["/srv/site", "/"] {
            for skip in 0..3 {
                for dotfiles in [false, true] {
                    for p in paths {
                        let req: Request = selvedge::http::Request::builder().uri(p).body(Bytes::new()).unwrap().into();
                        let (mut a, mut b) = (Vec::new(), root.as_bytes().to_vec());
                        let got = resolve_into(root.as_bytes(), &req, skip, dotfiles, &mut a);
                        let want = resolve_segments(&req, skip, dotfiles, &mut b);
                        let show = |r: &Result<(), Refused>| match r {
                            Ok(()) => "ok",
                            Err(Refused::Bad) => "bad",
                            Err(Refused::Hidden) => "hidden",
                        };
                        assert_eq!((show(&got), &a), (show(&want), &b), "{p} under {root}, skip {skip}");
                        fast += usize::from(plain_rest(req.path_bytes(), skip).is_some());
                    }
                }
            }
        }
        assert!(fast > 100, "the one-copy path took only {fast} cases");
        // Bytes a URI builder refuses but the HTTP/1.1 parser may pass on.
        for p in [&b"/a\\b"[..], b"/a\0b", b"/a/\\"] {
            assert_eq!(plain_rest(p, 0), None, "{p:?}");
        }
        assert_eq!(plain_rest(b"/a/b/", 0), Some(&b"a/b"[..]));
        assert_eq!(plain_rest(b"/static/a/b", 1), Some(&b"a/b"[..]));
    }

    #[test]
    fn accept_encoding() {
        assert!(accepts(b"gzip, deflate, br", "br"));
        assert!(accepts(b"gzip;q=0.5", "gzip"));
        assert!(!accepts(b"gzip;q=0", "gzip"));
        assert!(!accepts(b"br;q=0.0, *", "br"));
        assert!(accepts(b"*", "gzip"));
        assert!(!accepts(b"*;q=0", "gzip"));
        assert!(!accepts(b"", "gzip"));
        assert!(!accepts(b"identity", "br"));
    }
}
