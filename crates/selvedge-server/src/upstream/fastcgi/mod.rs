//! FastCGI routes (the FastCGI 1.0 Responder role): PHP through php-fpm, or any FastCGI
//! application, over a Unix or TCP socket.
//!
//! Per request routed here:
//! 1. [`script::locate`] walks the route's `root` for the script, with CGI's path rules
//!    (400/403/404; a file is a script when its name ends in `split_path`, `.php`; a
//!    directory is served by its `index` file, and redirected to its `/` form first). So
//!    `SCRIPT_FILENAME` names a script that was under the root when the path was walked,
//!    and `PATH_INFO` is what follows it: `/up/x.jpg/a.php` is never sent to the
//!    application. Each worker remembers a path's walk for `script_cache` (1 s): a script
//!    added, removed or replaced on disk is seen within that time.
//! 2. A body of unknown length (chunked, or HTTP/2 without `content-length`) is read first,
//!    up to `max_buffered_input` (411 beyond), since `CONTENT_LENGTH` must be given.
//! 3. A connection from this worker's pool (`FCGI_KEEP_CONN`; see `transport::idle`) or a
//!    new one (`connect_timeout`). The request goes out as `BEGIN_REQUEST`, the
//!    meta-variables of CGI ([`env`](mod@crate::upstream::gateway::env), then the route's
//!    `params`) as `PARAMS`, and the body as `STDIN` records as the client sends it, each
//!    piece written before the next is read.
//! 4. The application's records are read meanwhile ([`record::decode`]): `STDERR` lines go
//!    to the error log with the script's name; `STDOUT` carries the response, whose head is
//!    parsed with CGI's rules ([`head::parse`]: `Status`, `Location` (a 302 without
//!    `Status`), `Content-Length`, hop-by-hop fields dropped). A response complete in what
//!    was read is answered as one buffer; a longer one is streamed as it comes (the client's
//!    writer waits while the client is slow, so nothing piles up), the upload still moving
//!    along meanwhile.
//! 5. After `END_REQUEST`, with the whole request sent and nothing left over, the
//!    connection goes back to the pool.
//!
//! Errors, as nginx answers them: no connection is 502 (503 over `max_connections`); no
//! progress within `timeout` is 504; an application that closes, breaks the protocol or
//! sends an invalid head is 502 (all logged). A script that fails is the application's
//! answer: PHP sends `Status: 500` for a fatal error, and its message on `STDERR`. A reused
//! connection that fails before any response byte is retried once on a new one, when none of
//! the body was read yet.

pub mod record;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use selvedge::http::{header, StatusCode};
use selvedge::{Body, BodyWriter, Request, Response};
use serde::Deserialize;

use self::record::{Event, Params, ProtocolStatus, RecordType, Role};
use crate::files::gate::Gate;
use crate::units::{Count, Dur, NonZeroDur, Size};
use crate::upstream::gateway::head::{self, Head};
use crate::upstream::gateway::script::{self, Miss, Rule, Script};
use crate::upstream::gateway::{env, plain};
use crate::upstream::transport::conn::{Addr, Conn, Ready, Wait};
use crate::upstream::transport::idle::{self, PoolLimits};

/// The request id of every request: one request per connection at a time.
const ID: u16 = 1;
/// Longest stderr line logged; longer ones are split.
const MAX_LOG_LINE: usize = 2048;

/// A route's `fastcgi = { ... }` table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFastcgi {
    /// `unix:/path/to.sock` or `host:port`.
    pub address: String,
    /// Directory holding the scripts, as the application sees it too.
    pub root: String,
    /// A directory's script: `index.php` (`""`: none).
    pub index: Option<String>,
    /// What a script's name ends with: `.php`.
    pub split_path: Option<String>,
    /// Time the application may go without progress: 60 s.
    pub timeout: Option<NonZeroDur>,
    /// Time to connect: 5 s.
    pub connect_timeout: Option<NonZeroDur>,
    /// Time an idle connection is kept: 15 s.
    pub keepalive_timeout: Option<NonZeroDur>,
    /// Idle connections kept per worker: 16 (0: a connection per request).
    pub max_idle: Option<Count<0, { u32::MAX as u64 }>>,
    /// Connections per worker, busy or idle: 1024 (0: no limit).
    pub max_connections: Option<Count<0, { u32::MAX as u64 }>>,
    /// Largest response head: 64 KiB.
    pub max_output_head: Option<Size<1, { u32::MAX as u64 }>>,
    /// Largest request body of unknown length: 1 MiB.
    pub max_buffered_input: Option<Size<0, { u32::MAX as u64 }>>,
    /// More variables, set after the standard ones (so they may override them).
    pub params: Option<BTreeMap<String, String>>,
    /// Pass `Authorization` as `HTTP_AUTHORIZATION`: on (PHP's `PHP_AUTH_USER` needs it).
    pub pass_authorization: Option<bool>,
    /// How long a path's script lookup is remembered per worker: 1 s (0: not remembered).
    pub script_cache: Option<Dur>,
}

/// A checked FastCGI route configuration.
#[derive(Debug, Clone)]
pub struct FastcgiConfig {
    /// The address as written (also the pool's key).
    pub address: String,
    /// Where it is.
    pub addr: Addr,
    /// Directory holding the scripts.
    pub root: PathBuf,
    /// A directory's script (`None`: a directory is a 404).
    pub index: Option<String>,
    /// What a script's name ends with.
    pub split_path: String,
    /// Any wait on the application (sending, the first byte, each later read) may last
    /// this long: 504 before the response head, a cut response after.
    pub timeout: Duration,
    /// Time to open a connection (and to wait for a free one under `max_connections`).
    pub connect_timeout: Duration,
    /// Pool limits (`max_idle` 0: no `FCGI_KEEP_CONN`, the application closes after each
    /// request).
    pub pool: PoolLimits,
    /// Largest response head (502 beyond).
    pub max_output_head: usize,
    /// Largest request body of unknown length (read to compute `CONTENT_LENGTH`; 411
    /// beyond).
    pub max_buffered_input: usize,
    /// Extra variables.
    pub params: Vec<(String, OsString)>,
    /// Pass `Authorization`.
    pub pass_authorization: bool,
    /// How long a path's script lookup (found, or why not) is remembered per worker
    /// (`Duration::ZERO`: every request walks the path on disk).
    pub script_cache: Duration,
}

impl FastcgiConfig {
    /// Checks `raw`; `abs` makes a path from the file absolute.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawFastcgi, abs: &dyn Fn(&str) -> PathBuf) -> Result<FastcgiConfig, String> {
        let addr = parse_address(&raw.address)?;
        let root = abs(&raw.root);
        if !root.is_dir() {
            return Err(format!("fastcgi root {} is not a directory", root.display()));
        }
        let index = match raw.index.as_deref() {
            None => Some("index.php".to_string()),
            Some("") => None,
            Some(i) if i.contains('/') || i.starts_with('.') => {
                return Err(format!("fastcgi index {i:?}: a file name, without '/'"));
            }
            Some(i) => Some(i.to_string()),
        };
        let split_path = raw.split_path.clone().unwrap_or_else(|| ".php".into());
        if split_path.is_empty() || split_path.contains('/') {
            return Err(format!("fastcgi split_path {split_path:?}: a name ending such as \".php\""));
        }
        let secs = |v: Option<NonZeroDur>, default: u64| v.map_or(Duration::from_secs(default), NonZeroDur::get);
        let mut params = Vec::new();
        for (n, v) in raw.params.iter().flatten() {
            if n.is_empty() || v.contains('\0') || n.contains('\0') {
                return Err(format!("fastcgi params {n:?}: empty name or a NUL byte"));
            }
            params.push((n.clone(), OsString::from(v)));
        }
        Ok(FastcgiConfig {
            address: raw.address.clone(),
            addr,
            root,
            index,
            split_path,
            timeout: secs(raw.timeout, 60),
            connect_timeout: secs(raw.connect_timeout, 5),
            pool: PoolLimits {
                max_idle: raw.max_idle.map_or(16, Count::get_usize),
                keepalive: secs(raw.keepalive_timeout, 15),
                max_connections: raw.max_connections.map_or(1024, Count::get_usize),
                release_idle: true,
            },
            max_output_head: raw.max_output_head.map_or(64 << 10, Size::get_usize),
            max_buffered_input: raw.max_buffered_input.map_or(1 << 20, Size::get_usize),
            params,
            pass_authorization: raw.pass_authorization.unwrap_or(true),
            script_cache: raw.script_cache.map_or(Duration::from_secs(1), Dur::get),
        })
    }
}

/// `unix:/path` or `host:port` (`[v6]:port`).
fn parse_address(s: &str) -> Result<Addr, String> {
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("fastcgi address {s:?}: a unix socket needs an absolute path"));
        }
        return Ok(Addr::Unix(PathBuf::from(path)));
    }
    let bad = |why: &str| format!("fastcgi address {s:?}: {why} (\"unix:/path\" or \"host:port\")");
    let (host, port) = match s.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").ok_or_else(|| bad("no port"))?,
        None => s.rsplit_once(':').ok_or_else(|| bad("no port"))?,
    };
    let port: u16 = port.parse().map_err(|_| bad("invalid port"))?;
    if host.is_empty() || host.contains('/') {
        return Err(bad("no host"));
    }
    let addrs: Vec<_> =
        (host, port).to_socket_addrs().map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(bad("resolves to no address"));
    }
    Ok(Addr::Tcp(addrs))
}

/// The app serving a FastCGI route.
#[derive(Debug)]
pub struct Fastcgi {
    route: Arc<Route>,
}

#[derive(Debug)]
struct Route {
    cfg: FastcgiConfig,
    /// The canonical root, and which scripts of it may run ([`Gate`]).
    gate: Gate,
    prefix: String,
    /// This application's pool slot in every worker.
    slot: usize,
    /// Tells this route's remembered script lookups from another's (never reused, unlike
    /// an address after a reload).
    id: u64,
}

/// Route ids ([`Route::id`]).
static NEXT_ROUTE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Most script lookups a worker remembers; past it the worker forgets them all, so a scan
/// of distinct paths holds at most this many entries of at most [`SCRIPT_CACHE_PATH_MAX`]
/// bytes of path each.
const SCRIPT_CACHE_MAX: usize = 1024;

/// Longer request paths are looked up on disk every time (their script's name and
/// `PATH_INFO` are copies of the path: remembering them could hold much more memory).
const SCRIPT_CACHE_PATH_MAX: usize = 512;

/// A remembered lookup: until when ([`selvedge::time::monotonic_ns`]), and what it found.
type Located = (u64, Result<Arc<Script>, Miss>);

/// This worker's remembered lookups: by route ([`Route::id`]), then by request path.
#[derive(Default)]
struct Remembered {
    routes: HashMap<u64, HashMap<Box<str>, Located>>,
    len: usize,
}

thread_local! {
    /// This worker's remembered script lookups: no lock, and no system call for a path
    /// looked up within `script_cache`.
    static LOCATED: std::cell::RefCell<Remembered> = std::cell::RefCell::new(Remembered::default());
}

impl Route {
    /// The script for `path`: remembered for `script_cache` per worker, as the file cache
    /// remembers files for its sweep interval (a script added, removed or replaced is seen
    /// within that time); otherwise found on disk ([`script::locate`]).
    fn locate(&self, path: &str) -> Result<Arc<Script>, Miss> {
        let cfg = &self.cfg;
        let rule = Rule::Fastcgi { ext: &cfg.split_path, index: cfg.index.as_deref() };
        let walk = || script::locate(&self.gate, &self.prefix, path, rule).map(Arc::new);
        let ttl = cfg.script_cache.as_nanos().min(u128::from(u64::MAX)) as u64;
        if ttl == 0 || path.len() > SCRIPT_CACHE_PATH_MAX {
            return walk();
        }
        let now = selvedge::time::monotonic_ns();
        LOCATED.with(|r| {
            let mut r = r.borrow_mut();
            if let Some((until, found)) = r.routes.get_mut(&self.id).and_then(|m| m.get_mut(path)) {
                if now >= *until {
                    (*until, *found) = (now.saturating_add(ttl), walk());
                }
                return found.clone();
            }
            if r.len >= SCRIPT_CACHE_MAX {
                *r = Remembered::default();
            }
            let found = walk();
            r.routes.entry(self.id).or_default().insert(path.into(), (now.saturating_add(ttl), found.clone()));
            r.len += 1;
            found
        })
    }
}

/// Why an exchange failed.
#[derive(Debug)]
enum Fail {
    /// No connection.
    Connect,
    /// Over `max_connections` for `connect_timeout`.
    AtLimit,
    /// No progress within the time limit.
    Timeout,
    /// The application closed (or failed) before sending a byte (retryable on a reused
    /// connection).
    Closed,
    /// The application broke the protocol, closed mid-response, or sent an invalid head.
    Bad,
    /// The application refused the request (`END_REQUEST` with `FCGI_OVERLOADED`...).
    Refused(ProtocolStatus),
    /// The client's body failed (the engine answers for it).
    Client,
}

impl Fail {
    fn status(&self) -> StatusCode {
        match self {
            Fail::Connect | Fail::Closed | Fail::Bad => StatusCode::BAD_GATEWAY,
            Fail::Refused(ProtocolStatus::OVERLOADED) | Fail::AtLimit => StatusCode::SERVICE_UNAVAILABLE,
            Fail::Refused(_) => StatusCode::BAD_GATEWAY,
            Fail::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Fail::Client => StatusCode::BAD_REQUEST,
        }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Connect => f.write_str("cannot connect"),
            Fail::AtLimit => f.write_str("max_connections reached, none freed in time"),
            Fail::Timeout => f.write_str("no progress within the time limit"),
            Fail::Closed => f.write_str("connection closed before a response"),
            Fail::Bad => f.write_str("invalid response"),
            Fail::Refused(s) => write!(f, "request refused (protocol status {})", s.0),
            Fail::Client => f.write_str("the request body failed"),
        }
    }
}

impl Fastcgi {
    /// A FastCGI app for the route at `prefix`.
    ///
    /// # Errors
    /// The root cannot be resolved.
    pub fn new(cfg: &FastcgiConfig, prefix: &str) -> std::io::Result<Fastcgi> {
        let root = cfg.root.canonicalize()?;
        let slot = idle::slot_of(&format!("fastcgi {}", cfg.address));
        let id = NEXT_ROUTE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let gate = Gate::new(root, false);
        Ok(Fastcgi { route: Arc::new(Route { cfg: cfg.clone(), gate, prefix: prefix.to_string(), slot, id }) })
    }

    /// Refuses scripts under `roots` (the canonical roots of the virtual host's other
    /// routes) nested in this route's root ([`Gate::with_nested`]).
    pub fn with_nested(self, roots: &[PathBuf]) -> Fastcgi {
        let r = Arc::try_unwrap(self.route).unwrap_or_else(|_| unreachable!("built just now"));
        Fastcgi { route: Arc::new(Route { gate: r.gate.with_nested(roots), ..r }) }
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        self.route.gate.root()
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &str {
        &self.route.cfg.address
    }

    /// Serves one request.
    pub async fn handle(&self, mut req: Request) -> Response {
        let route = &self.route;
        let cfg = &route.cfg;
        let script = match route.locate(req.path()) {
            Ok(s) => s,
            Err(Miss::Status(s)) => return plain(s),
            Err(Miss::AddSlash) => {
                let loc = match req.query() {
                    Some(q) => format!("{}/?{q}", req.path()),
                    None => format!("{}/", req.path()),
                };
                return plain(StatusCode::MOVED_PERMANENTLY).header(header::LOCATION, loc);
            }
        };
        let mut body = req.take_body();
        let length = match body.content_length() {
            Some(n) => (n > 0 || req.header("content-length").is_some()).then_some(n),
            None => match crate::upstream::gateway::read_all(&mut body, cfg.max_buffered_input).await {
                Ok(b) => {
                    let n = b.len() as u64;
                    body = Body::from_bytes(b);
                    Some(n)
                }
                Err(status) => return plain(status),
            },
        };
        let keep = cfg.pool.max_idle > 0;
        let is_head = req.method() == selvedge::http::Method::HEAD;
        let due = length.unwrap_or(0);
        // The request's records, composed once into the first connection's buffer (kept
        // for a retry).
        let mut request: Option<Vec<u8>> = None;
        let mut retried = false;
        let (mut ex, head, first) = loop {
            let pooled = if retried { None } else { idle::checkout(route.slot, &cfg.pool) };
            let reused = pooled.is_some();
            let (mut conn, fresh) = match pooled {
                Some(c) => (c, None),
                None => match Box::pin(route.connect()).await {
                    Ok(c) => c,
                    Err(f) => {
                        tracing::warn!("fastcgi {}: {}: {f}", cfg.address, Lossy(&script.script_name));
                        return plain(f.status());
                    }
                },
            };
            let lead = request.take().unwrap_or_else(|| {
                let mut b = std::mem::take(&mut conn.wbuf);
                b.clear();
                route.compose(&mut b, &req, &script, length, keep);
                b
            });
            let mut ex = Exchange::new(conn, route.clone(), script.clone(), body, lead, due);
            ex.fresh = fresh;
            match ex.read_head().await {
                Ok((head, first)) => break (ex, head, first),
                Err(Fail::Closed) if reused && !retried && !ex.feed.pulled => {
                    retried = true;
                    let lead;
                    (body, lead) = ex.feed.take_back();
                    request = Some(lead);
                }
                Err(f) => {
                    tracing::warn!(
                        "fastcgi {}: {}: {f} before the response head",
                        cfg.address,
                        Lossy(&ex.script.script_name)
                    );
                    return plain(f.status());
                }
            }
        };
        drop(req);

        let status = head.status.unwrap_or(if head.location.is_some() { StatusCode::FOUND } else { StatusCode::OK });
        let bodiless = is_head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
        let res = if bodiless {
            // The script's output is read to its end, so the connection can be reused.
            if let Err(f) = ex.drain().await {
                tracing::warn!(
                    "fastcgi {}: {}: {f} after the response head",
                    cfg.address,
                    Lossy(&ex.script.script_name)
                );
            }
            ex.finish();
            match head.content_length {
                Some(n) if is_head => Response::stream(status, |_w| async { Ok(()) }).header(header::CONTENT_LENGTH, n),
                _ => Response::new(status),
            }
        } else {
            match ex.complete_body(first) {
                Ok(whole) => {
                    ex.finish();
                    match head.content_length {
                        Some(n) if n > whole.len() as u64 => {
                            tracing::warn!(
                                "fastcgi {}: {}: output shorter than its Content-Length",
                                cfg.address,
                                Lossy(&ex.script.script_name)
                            );
                            return plain(StatusCode::BAD_GATEWAY);
                        }
                        Some(n) => Response::bytes(status, whole.slice(..n as usize)),
                        None => Response::bytes(status, whole),
                    }
                }
                Err(first) => {
                    let declared = head.content_length;
                    let mut res = Response::stream(status, move |w| ex.stream(w, first, declared));
                    if let Some(n) = declared {
                        res = res.header(header::CONTENT_LENGTH, n);
                    }
                    res
                }
            }
        };
        head.add_fields(res)
    }
}

impl Route {
    /// A new connection (marked [`Fresh`](idle::Fresh) until answered), or one given back
    /// while waiting under `max_connections`; within `connect_timeout`.
    async fn connect(&self) -> Result<(Conn, Option<idle::Fresh>), Fail> {
        let cfg = &self.cfg;
        let permit = match idle::permit(self.slot, &cfg.pool, cfg.connect_timeout).await {
            Ok(idle::Permit::Idle(c)) => return Ok((c, None)),
            Ok(idle::Permit::New(p)) => p,
            Err(_) => return Err(Fail::AtLimit),
        };
        match Conn::connect(&cfg.addr, cfg.connect_timeout, permit).await {
            Ok(c) => Ok((c, Some(idle::fresh(self.slot, &cfg.pool)))),
            Err(Wait::Timeout) => Err(Fail::Timeout),
            Err(Wait::Io(_)) => Err(Fail::Connect),
        }
    }

    /// Writes `BEGIN_REQUEST` and the `PARAMS` stream (and, without a body, the empty
    /// `STDIN` record) into `out`.
    fn compose(&self, out: &mut Vec<u8>, req: &Request, script: &Script, length: Option<u64>, keep: bool) {
        let cfg = &self.cfg;
        record::begin_request(out, ID, Role::RESPONDER, keep);
        let mut params = Params::new(out, ID);
        let opts = env::Options { extra: &[], path: None, pass_authorization: cfg.pass_authorization };
        env::meta_variables(req, script, length, &opts, self.gate.root(), &mut params);
        for (n, v) in &cfg.params {
            params.pair(n.as_bytes(), std::os::unix::ffi::OsStrExt::as_bytes(v.as_os_str()));
        }
        params.finish();
        if length.unwrap_or(0) == 0 {
            out.extend_from_slice(&record::stream_header(RecordType::STDIN, ID, 0));
        }
    }
}

impl env::Vars for Params<'_> {
    fn var(&mut self, name: &[u8], value: &[u8]) {
        self.pair(name, value);
    }
}

/// The request body on its way to the application as `STDIN` records: what is being
/// written (the request's first bytes, a record header, its content), what is left of the
/// client's piece, and whether the stream was ended.
#[derive(Debug)]
struct Feed {
    /// `BEGIN_REQUEST` and `PARAMS` (kept whole for a retry) and how much of it was written.
    lead: Vec<u8>,
    lead_at: usize,
    /// The open record's header and how much of it was written.
    hdr: [u8; record::HEADER_LEN],
    hdr_at: usize,
    /// The open record's content not yet written.
    content: Bytes,
    /// The rest of the client's piece, not framed yet.
    rest: Bytes,
    /// The client's body, until it ended.
    body: Option<Body>,
    /// Body bytes still due (`CONTENT_LENGTH`).
    due: u64,
    /// Whether a piece of the body was read (then a retry cannot send it again).
    pulled: bool,
    /// Whether the empty `STDIN` record was written (or composed into `lead`).
    ended: bool,
    /// Whether the application stopped taking input (the connection cannot be reused).
    abandoned: bool,
}

impl Feed {
    /// A feed of `lead`, then `due` bytes of `body` (none: `lead` ends the stream).
    fn new(lead: Vec<u8>, body: Body, due: u64) -> Feed {
        let empty = due == 0;
        Feed {
            lead,
            lead_at: 0,
            hdr: [0; record::HEADER_LEN],
            hdr_at: record::HEADER_LEN,
            content: Bytes::new(),
            rest: Bytes::new(),
            due,
            body: (!empty).then_some(body),
            pulled: false,
            ended: empty,
            abandoned: false,
        }
    }

    /// The body and the request's first bytes, for a retry (nothing of the body was read).
    fn take_back(&mut self) -> (Body, Vec<u8>) {
        (self.body.take().unwrap_or_default(), std::mem::take(&mut self.lead))
    }

    /// Bytes are waiting to be written.
    fn has_pending(&self) -> bool {
        !self.abandoned
            && (self.lead_at < self.lead.len() || self.hdr_at < record::HEADER_LEN || !self.content.is_empty())
    }

    /// Nothing is waiting and the next piece of the body is needed.
    fn wants_piece(&self) -> bool {
        !self.abandoned && !self.has_pending() && self.rest.is_empty() && !self.ended
    }

    /// Everything was written, the empty `STDIN` record included.
    fn done(&self) -> bool {
        self.ended && !self.has_pending()
    }

    /// Takes a piece of the client's body (or its end).
    fn accept(&mut self, piece: Option<Result<Bytes, selvedge::Error>>) -> Result<(), Fail> {
        match piece {
            Some(Ok(b)) => {
                self.pulled = true;
                if b.len() as u64 > self.due {
                    return Err(Fail::Client);
                }
                self.due -= b.len() as u64;
                self.rest = b;
            }
            Some(Err(_)) => return Err(Fail::Client),
            None => {
                self.body = None;
                if self.due != 0 {
                    return Err(Fail::Client);
                }
            }
        }
        self.frame();
        Ok(())
    }

    /// Opens the next record when nothing is pending: content from `rest`, or the empty
    /// record once the body has ended.
    fn frame(&mut self) {
        if self.has_pending() || self.ended {
            return;
        }
        if !self.rest.is_empty() {
            let n = self.rest.len().min(record::MAX_CONTENT);
            self.content = self.rest.split_to(n);
            self.hdr = record::stream_header(RecordType::STDIN, ID, n);
            self.hdr_at = 0;
        } else if self.body.is_none() {
            self.hdr = record::stream_header(RecordType::STDIN, ID, 0);
            self.hdr_at = 0;
            self.ended = true;
        }
    }

    /// Writes what the socket takes now. A failed write means the application stopped
    /// reading: the upload is abandoned (its answer may still come).
    fn write(&mut self, conn: &mut Conn) {
        while self.has_pending() {
            let lead = &self.lead[self.lead_at..];
            let hdr = &self.hdr[self.hdr_at..];
            let mut parts = [lead, hdr, &self.content[..]];
            let before = lead.len() + hdr.len() + self.content.len();
            let mut left = &mut parts[..];
            let r = conn.try_write(&mut left);
            let mut written = before - left.iter().map(|p| p.len()).sum::<usize>();
            let step = written.min(self.lead.len() - self.lead_at);
            self.lead_at += step;
            written -= step;
            let step = written.min(record::HEADER_LEN - self.hdr_at);
            self.hdr_at += step;
            written -= step;
            bytes::Buf::advance(&mut self.content, written);
            match r {
                Ok(true) => self.frame(),
                Ok(false) => return,
                Err(_) => {
                    self.abandoned = true;
                    conn.closing = true;
                    return;
                }
            }
        }
    }
}

/// One request on one connection.
struct Exchange {
    conn: Option<Conn>,
    route: Arc<Route>,
    /// The script (its name is in the log lines).
    script: Arc<Script>,
    feed: Feed,
    /// Bytes were received from the application.
    got_any: bool,
    /// `END_REQUEST` arrived.
    ended: bool,
    /// A new connection's mark, until its first answer.
    fresh: Option<idle::Fresh>,
}

impl Exchange {
    fn new(conn: Conn, route: Arc<Route>, script: Arc<Script>, body: Body, lead: Vec<u8>, due: u64) -> Exchange {
        Exchange {
            conn: Some(conn),
            route,
            script,
            feed: Feed::new(lead, body, due),
            got_any: false,
            ended: false,
            fresh: None,
        }
    }

    /// The next `STDOUT` content or the end, moving the upload along meanwhile; `STDERR`
    /// goes to the log.
    async fn next(&mut self) -> Result<Option<Bytes>, Fail> {
        let conn = self.conn.as_mut().ok_or(Fail::Bad)?;
        let timeout = self.route.cfg.timeout;
        loop {
            match record::decode(&mut conn.rbuf, ID) {
                Ok(Some(Event::Stdout(b))) => return Ok(Some(b)),
                Ok(Some(Event::Stderr(b))) => {
                    log_stderr(&self.route.cfg.address, Lossy(&self.script.script_name), &b);
                    continue;
                }
                Ok(Some(Event::End { protocol_status, app_status })) => {
                    self.ended = true;
                    if protocol_status != ProtocolStatus::REQUEST_COMPLETE {
                        return Err(Fail::Refused(protocol_status));
                    }
                    let _ = app_status;
                    return Ok(None);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("fastcgi {}: {}: {e}", self.route.cfg.address, Lossy(&self.script.script_name));
                    conn.closing = true;
                    return Err(Fail::Bad);
                }
            }
            self.feed.write(conn);
            match conn.try_fill() {
                Ok(0) => return Err(if self.got_any { Fail::Bad } else { Fail::Closed }),
                Ok(_) => {
                    self.got_any = true;
                    self.fresh = None;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Err(if self.got_any { Fail::Bad } else { Fail::Closed }),
            }
            let want = self.feed.wants_piece();
            // While the upload waits on the client, the client's pace is the engine's
            // business (its body timeouts); otherwise the application must make progress.
            // A new connection also wakes when it starts to count as starving.
            let starving_in = self.fresh.as_ref().and_then(idle::Fresh::starving_in);
            let limit = match ((!want).then_some(timeout), starving_in) {
                (Some(t), Some(s)) => Some(t.min(s)),
                (t, s) => t.or(s),
            };
            let pending = self.feed.has_pending();
            let body = &mut self.feed.body;
            let piece = async {
                match body {
                    Some(b) if want => b.chunk().await,
                    _ => std::future::pending().await,
                }
            };
            match conn.wait(limit, true, pending, piece).await {
                Ok(Ready::Read | Ready::Write) => {}
                Ok(Ready::Other(p)) => self.feed.accept(p)?,
                Err(Wait::Timeout) => match &mut self.fresh {
                    Some(f) if starving_in.is_some_and(|s| limit == Some(s)) => f.starve(),
                    _ => return Err(Fail::Timeout),
                },
                Err(Wait::Io(_)) => return Err(if self.got_any { Fail::Bad } else { Fail::Closed }),
            }
        }
    }

    /// Reads until the response head is complete; gives it with the body bytes read after
    /// it.
    async fn read_head(&mut self) -> Result<(Head, Bytes), Fail> {
        let max = self.route.cfg.max_output_head;
        let mut buf = BytesMut::new();
        loop {
            let Some(b) = self.next().await? else {
                tracing::warn!(
                    "fastcgi {}: {}: the request ended without a response head",
                    self.route.cfg.address,
                    Lossy(&self.script.script_name)
                );
                return Err(Fail::Bad);
            };
            // Usually the whole head is in the first record: parsed there, without a copy.
            let parsed = if buf.is_empty() {
                head::parse_shared(&b, max).map(|r| r.map(|(h, n)| (h, b.slice(n..))))
            } else {
                buf.extend_from_slice(&b);
                head::parse(&buf, max).map(|r| r.map(|(h, n)| (h, buf.split().freeze().slice(n..))))
            };
            match parsed {
                Ok(Some(found)) => return Ok(found),
                Ok(None) if buf.is_empty() => buf.extend_from_slice(&b),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("fastcgi {}: {}: {e}", self.route.cfg.address, Lossy(&self.script.script_name));
                    if let Some(c) = self.conn.as_mut() {
                        c.closing = true;
                    }
                    return Err(Fail::Bad);
                }
            }
        }
    }

    /// The whole body (`first` and what follows), if the rest of it and the end of the
    /// request are already in the receive buffer; else the part of it that is (`Err`), to
    /// be streamed. Never waits.
    fn complete_body(&mut self, first: Bytes) -> Result<Bytes, Bytes> {
        let Some(conn) = self.conn.as_mut() else { return Err(first) };
        let mut more: Option<BytesMut> = None;
        let whole = loop {
            match record::decode(&mut conn.rbuf, ID) {
                Ok(Some(Event::Stdout(b))) => {
                    more.get_or_insert_with(|| BytesMut::from(&first[..])).extend_from_slice(&b);
                }
                Ok(Some(Event::Stderr(b))) => log_stderr(&self.route.cfg.address, Lossy(&self.script.script_name), &b),
                Ok(Some(Event::End { .. })) => {
                    self.ended = true;
                    break true;
                }
                // A gap, or an error that `next` will meet again.
                Ok(None) | Err(_) => break false,
            }
        };
        let known = more.map_or(first, BytesMut::freeze);
        if whole {
            Ok(known)
        } else {
            Err(known)
        }
    }

    /// Reads and drops the rest of the output.
    async fn drain(&mut self) -> Result<(), Fail> {
        while self.next().await?.is_some() {}
        Ok(())
    }

    /// Streams the rest of the response (`first`, then every later `STDOUT`) to `w`, at
    /// most `limit` bytes (exactly that many or an error when given).
    async fn stream(mut self, mut w: BodyWriter, first: Bytes, limit: Option<u64>) -> std::io::Result<()> {
        let mut sent = 0u64;
        let mut piece = Some(first);
        loop {
            if let Some(b) = piece.take() {
                let take = limit.map_or(b.len(), |l| b.len().min((l - sent) as usize));
                if take > 0 {
                    if let Err(e) = self.write_feeding(&mut w, &b[..take]).await {
                        self.abandon();
                        return Err(e);
                    }
                    sent += take as u64;
                }
            }
            match self.next().await {
                Ok(Some(b)) => piece = Some(b),
                Ok(None) => break,
                Err(f) => {
                    tracing::warn!(
                        "fastcgi {}: {}: {f}; response cut short",
                        self.route.cfg.address,
                        Lossy(&self.script.script_name)
                    );
                    self.abandon();
                    return Err(std::io::Error::other(f.to_string()));
                }
            }
        }
        if limit.is_some_and(|l| sent < l) {
            tracing::warn!(
                "fastcgi {}: {}: output shorter than its Content-Length; response cut short",
                self.route.cfg.address,
                Lossy(&self.script.script_name)
            );
            self.abandon();
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.finish();
        Ok(())
    }

    /// Writes `data` to the client while still moving the upload along (a client that
    /// reads only once its upload is done must not deadlock with an application that reads
    /// it only once its output is taken).
    async fn write_feeding(&mut self, w: &mut BodyWriter, data: &[u8]) -> std::io::Result<()> {
        let write = w.write(data);
        tokio::pin!(write);
        loop {
            let (Some(conn), true) = (self.conn.as_mut(), self.feed.has_pending() || self.feed.wants_piece()) else {
                return write.await;
            };
            let want = self.feed.wants_piece();
            let pending = self.feed.has_pending();
            let body = &mut self.feed.body;
            let step = async {
                let piece = async {
                    match body {
                        Some(b) if want => b.chunk().await,
                        _ => std::future::pending().await,
                    }
                };
                conn.wait(None, false, pending, piece).await
            };
            tokio::select! {
                biased;
                r = &mut write => return r,
                s = step => match s {
                    Ok(Ready::Other(p)) => {
                        if self.feed.accept(p).is_err() {
                            return Err(std::io::Error::other("request body failed"));
                        }
                    }
                    Ok(_) => {
                        if let Some(c) = self.conn.as_mut() {
                            self.feed.write(c);
                        }
                    }
                    Err(_) => self.feed.abandoned = true,
                },
            }
        }
    }

    /// The connection will not be reused.
    fn abandon(&mut self) {
        self.conn = None;
    }

    /// The normal end: the connection goes back to the pool if the request was sent whole,
    /// answered whole, and nothing is left over.
    fn finish(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        conn.wbuf = std::mem::take(&mut self.feed.lead);
        let cfg = &self.route.cfg;
        if self.ended && self.feed.done() && !self.feed.abandoned && conn.rbuf.is_empty() && cfg.pool.max_idle > 0 {
            idle::checkin(self.route.slot, &cfg.pool, conn);
        }
    }
}

/// Bytes shown as text in log lines (invalid UTF-8 replaced).
struct Lossy<'a>(&'a [u8]);

impl std::fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.0))
    }
}

/// Logs the application's error stream, line by line, with the script's name.
fn log_stderr(address: &str, name: Lossy<'_>, b: &[u8]) {
    for line in b.split(|&c| c == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        for part in line.chunks(MAX_LOG_LINE) {
            if !part.trim_ascii().is_empty() {
                tracing::warn!("fastcgi {address}: {name}: {}", String::from_utf8_lossy(part));
            }
        }
    }
}

/// The fastcgi fuzz target's entry point: see [`record::fuzz`].
pub fn fuzz(data: &[u8]) {
    record::fuzz(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Result<FastcgiConfig, String> {
        let raw: RawFastcgi = toml::from_str(text).map_err(|e| e.to_string())?;
        FastcgiConfig::from_raw(&raw, &|p| std::env::temp_dir().join(p))
    }

    #[test]
    fn config_defaults_and_errors() {
        let c = cfg("address = \"unix:/run/php/php-fpm.sock\"\nroot = \".\"").unwrap();
        assert_eq!(c.addr, Addr::Unix("/run/php/php-fpm.sock".into()));
        assert_eq!((c.index.as_deref(), c.split_path.as_str()), (Some("index.php"), ".php"));
        assert_eq!((c.timeout, c.connect_timeout), (Duration::from_secs(60), Duration::from_secs(5)));
        assert_eq!((c.pool.max_idle, c.pool.keepalive, c.pool.max_connections), (16, Duration::from_secs(15), 1024));
        assert_eq!((c.max_output_head, c.max_buffered_input, c.pass_authorization), (65536, 1 << 20, true));
        let c = cfg("address = \"127.0.0.1:9000\"\nroot = \".\"\nindex = \"\"\ntimeout = \"250ms\"\nparams = { APP_ENV = \"prod\" }")
            .unwrap();
        assert_eq!(c.addr, Addr::Tcp(vec!["127.0.0.1:9000".parse().unwrap()]));
        assert_eq!((c.index, c.timeout), (None, Duration::from_millis(250)));
        assert_eq!(c.params, vec![("APP_ENV".to_string(), OsString::from("prod"))]);
        assert_eq!(
            cfg("address = \"[::1]:9000\"\nroot = \".\"").unwrap().addr,
            Addr::Tcp(vec!["[::1]:9000".parse().unwrap()])
        );
        for bad in [
            "address = \"unix:rel.sock\"\nroot = \".\"",
            "address = \"127.0.0.1\"\nroot = \".\"",
            "address = \"127.0.0.1:99999\"\nroot = \".\"",
            "address = \":9000\"\nroot = \".\"",
            "address = \"unix:/x\"\nroot = \"/no/such/dir\"",
            "address = \"unix:/x\"\nroot = \".\"\nindex = \"a/index.php\"",
            "address = \"unix:/x\"\nroot = \".\"\nsplit_path = \"\"",
            "address = \"unix:/x\"\nroot = \".\"\ntimeout = 0",
            "address = \"unix:/x\"\nroot = \".\"\nparams = { \"\" = \"x\" }",
            "address = \"unix:/x\"\nroot = \".\"\nadress = 1",
        ] {
            assert!(cfg(bad).is_err(), "{bad}");
        }
    }
}
