//! CGI/1.1 routes (RFC 3875).
//!
//! Per request routed here:
//! 1. `script::locate` walks the route's directory for the script; the rest of the path
//!    is `PATH_INFO` (400/403/404 as for static files).
//! 2. A body of unknown length (chunked, or HTTP/2 without `content-length`) is read first,
//!    up to `max_buffered_input` (411 beyond), since `CONTENT_LENGTH` must be given.
//! 3. `process::Run` starts the script with the [`env`](mod@crate::upstream::gateway::env)
//!    meta-variables, feeds it the body and reads its output;
//!    [`head::parse`](crate::upstream::gateway::head::parse) reads the response head (502
//!    when malformed, over `max_output_head`, or when the script exits first; 504 when no
//!    progress is made within `timeout`).
//! 4. The answer (RFC 3875 §6.2): `Location` with a local path and no `Status` is a local
//!    redirect: the routing runs again for a GET of that path (at most
//!    `max_local_redirects` times, then 500); another `Location` is a 302 unless `Status`
//!    says otherwise. A `Content-Length` up to `max_buffered_output` is read in full and
//!    sent with that length in one piece; a larger one is streamed with that length; output
//!    without one is streamed chunked (HTTP/1.1) or as DATA frames (HTTP/2) as it comes.
//! 5. The script is killed (its whole process group) when the client goes away, when it
//!    makes no progress for `timeout`, or `timeout` after its output ended; it is always
//!    reaped. Its stderr goes to the server's stderr, each line prefixed with its name.

mod process;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use selvedge::http::{header, HeaderValue, Method, StatusCode};
use selvedge::{Body, Request, Response};
use serde::Deserialize;
use tokio::sync::Semaphore;

use self::process::{Fail, Run, Spawn};
use crate::files::gate::Gate;
use crate::units::{Count, NonZeroDur, Size};
use crate::upstream::gateway::script::{self, Miss, Rule};
use crate::upstream::gateway::{env, plain, read_all};

/// A route's `cgi = { ... }` table as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCgi {
    /// Directory holding the scripts.
    pub dir: String,
    /// Time a script may go without progress: 30 s.
    pub timeout: Option<NonZeroDur>,
    /// Largest response head: 64 KiB.
    pub max_output_head: Option<Size<1, { u32::MAX as u64 }>>,
    /// Largest output with a `Content-Length` sent with that length: 1 MiB.
    pub max_buffered_output: Option<Size<0, { u32::MAX as u64 }>>,
    /// Largest request body of unknown length: 1 MiB.
    pub max_buffered_input: Option<Size<0, { u32::MAX as u64 }>>,
    /// Local redirects followed per request: 5.
    pub max_local_redirects: Option<Count<0, 100>>,
    /// Scripts of this route running at once: 64.
    pub max_processes: Option<Count<1, 65_535>>,
    /// Programs running scripts by extension (`{ py = "/usr/bin/python3" }`): none.
    pub interpreters: Option<HashMap<String, String>>,
    /// `PATH` given to scripts.
    pub path: Option<String>,
    /// Variables of the server's environment given to scripts (`NAME`), or set (`NAME=value`).
    pub env: Option<Vec<String>>,
    /// Pass `Authorization` as `HTTP_AUTHORIZATION`: off.
    pub pass_authorization: Option<bool>,
}

/// A checked CGI route configuration.
#[derive(Debug, Clone)]
pub struct CgiConfig {
    /// Directory holding the scripts.
    pub dir: PathBuf,
    /// A script making no progress (no output read, no input taken) for this long is
    /// killed: 504 before its head, a cut response after.
    pub timeout: Duration,
    /// Largest response head.
    pub max_output_head: usize,
    /// Largest output with a `Content-Length` that is read in full and sent with that
    /// length; longer ones are streamed.
    pub max_buffered_output: usize,
    /// Largest request body of unknown length (read to compute `CONTENT_LENGTH`; 411
    /// beyond).
    pub max_buffered_input: usize,
    /// Local redirects followed per request.
    pub max_local_redirects: u32,
    /// Scripts of this route running at once (until reaped); a request waits up to
    /// `timeout` for a slot, then gets 503.
    pub max_processes: usize,
    /// Interpreters by file extension (without the dot).
    pub interpreters: HashMap<String, OsString>,
    /// `PATH` given to scripts.
    pub path: OsString,
    /// Extra environment variables.
    pub env: Vec<(String, OsString)>,
    /// Pass `Authorization`.
    pub pass_authorization: bool,
}

impl CgiConfig {
    /// Checks `raw`; `abs` makes a path from the file absolute.
    ///
    /// # Errors
    /// The reason, reported at the table's position.
    pub fn from_raw(raw: &RawCgi, abs: &dyn Fn(&str) -> PathBuf) -> Result<CgiConfig, String> {
        let dir = abs(&raw.dir);
        if !dir.is_dir() {
            return Err(format!("cgi dir {} is not a directory", dir.display()));
        }
        let timeout = raw.timeout.map_or(Duration::from_secs(30), NonZeroDur::get);
        let mut interpreters = HashMap::new();
        for (ext, prog) in raw.interpreters.iter().flatten() {
            let ext = ext.trim_start_matches('.');
            if ext.is_empty() || prog.is_empty() {
                return Err(format!("cgi interpreter {ext:?} = {prog:?}: empty extension or program"));
            }
            if Path::new(prog).is_absolute() && !Path::new(prog).is_file() {
                return Err(format!("cgi interpreter {prog} is not a file"));
            }
            interpreters.insert(ext.to_string(), OsString::from(prog));
        }
        let mut env = Vec::new();
        for e in raw.env.iter().flatten() {
            match e.split_once('=') {
                Some((n, v)) if !n.is_empty() => env.push((n.to_string(), OsString::from(v))),
                Some(_) => return Err(format!("cgi env {e:?}: empty name")),
                None => {
                    if let Some(v) = std::env::var_os(e) {
                        env.push((e.clone(), v));
                    }
                }
            }
        }
        Ok(CgiConfig {
            dir,
            timeout,
            max_output_head: raw.max_output_head.map_or(64 << 10, Size::get_usize),
            max_buffered_output: raw.max_buffered_output.map_or(1 << 20, Size::get_usize),
            max_buffered_input: raw.max_buffered_input.map_or(1 << 20, Size::get_usize),
            max_local_redirects: raw.max_local_redirects.map_or(5, Count::get_u32),
            max_processes: raw.max_processes.map_or(64, Count::get_usize),
            interpreters,
            path: raw.path.as_deref().unwrap_or("/usr/local/bin:/usr/bin:/bin").into(),
            env,
            pass_authorization: raw.pass_authorization.unwrap_or(false),
        })
    }
}

/// What a CGI route made of a request.
#[derive(Debug)]
pub enum Outcome {
    /// The answer.
    Response(Response),
    /// A local redirect (RFC 3875 §6.2.2): serve this GET instead.
    Redirect(Request),
}

/// The app serving a CGI route.
#[derive(Debug)]
pub struct Cgi {
    cfg: Arc<CgiConfig>,
    /// The canonical directory, and what of it may run ([`Gate`]).
    gate: Gate,
    prefix: String,
    /// `max_processes` slots.
    slots: Arc<Semaphore>,
}

impl Cgi {
    /// A CGI app for the route at `prefix`.
    ///
    /// # Errors
    /// The directory cannot be resolved.
    pub fn new(cfg: &CgiConfig, prefix: &str) -> std::io::Result<Cgi> {
        let root = cfg.dir.canonicalize()?;
        let slots = Arc::new(Semaphore::new(cfg.max_processes));
        Ok(Cgi { cfg: Arc::new(cfg.clone()), gate: Gate::new(root, false), prefix: prefix.to_string(), slots })
    }

    /// Refuses scripts under `roots` (the canonical roots of the virtual host's other
    /// routes) nested in this route's directory ([`Gate::with_nested`]).
    pub fn with_nested(mut self, roots: &[PathBuf]) -> Cgi {
        self.gate = self.gate.with_nested(roots);
        self
    }

    /// The canonical directory.
    pub fn root(&self) -> &Path {
        self.gate.root()
    }

    /// What the startup line shows.
    pub fn describe(&self) -> &Path {
        &self.cfg.dir
    }

    /// Serves one request, without local redirects (they answer 500): the site's routing
    /// calls [`Cgi::run`] instead.
    pub async fn handle(&self, req: Request) -> Response {
        match self.run(req, u32::MAX).await {
            Outcome::Response(r) => r,
            Outcome::Redirect(_) => plain(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    /// Serves one request that already went through `redirects` local redirects.
    pub async fn run(&self, mut req: Request, redirects: u32) -> Outcome {
        let rule = Rule::Cgi { interpreters: &self.cfg.interpreters };
        let script = match script::locate(&self.gate, &self.prefix, req.path(), rule) {
            Ok(s) => s,
            Err(Miss::Status(status)) => return Outcome::Response(plain(status)),
            Err(Miss::AddSlash) => return Outcome::Response(plain(StatusCode::NOT_FOUND)),
        };
        let mut body = req.take_body();
        let length = match body.content_length() {
            Some(n) => (n > 0 || req.header("content-length").is_some()).then_some(n),
            None => match read_all(&mut body, self.cfg.max_buffered_input).await {
                Ok(b) => {
                    let n = b.len() as u64;
                    body = Body::from_bytes(b);
                    Some(n)
                }
                Err(status) => return Outcome::Response(plain(status)),
            },
        };
        let name: Arc<str> = String::from_utf8_lossy(&script.script_name).into();
        let permit = match tokio::time::timeout(self.cfg.timeout, self.slots.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            _ => {
                tracing::warn!("cgi {name}: {} scripts running, none ended in time", self.cfg.max_processes);
                return Outcome::Response(plain(StatusCode::SERVICE_UNAVAILABLE));
            }
        };
        let opts = env::Options {
            extra: &self.cfg.env,
            path: Some(&self.cfg.path),
            pass_authorization: self.cfg.pass_authorization,
        };
        let mut vars: Vec<(OsString, OsString)> = Vec::with_capacity(32 + self.cfg.env.len());
        env::meta_variables(&req, &script, length, &opts, self.gate.root(), &mut vars);
        let (program, args) = match &script.interpreter {
            Some(i) => (i.as_os_str(), vec![script.path.as_os_str()]),
            None => (script.path.as_os_str(), vec![]),
        };
        let spawn = Spawn {
            program,
            args,
            env: vars,
            dir: script.path.parent().unwrap_or(self.gate.root()),
            name: name.clone(),
            timeout: self.cfg.timeout,
            permit,
        };
        let mut run = match Run::spawn(spawn, body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cgi {name}: cannot run {}: {e}", script.path.display());
                return Outcome::Response(plain(StatusCode::BAD_GATEWAY));
            }
        };
        let head = match run.head(self.cfg.max_output_head).await {
            Ok(h) => h,
            Err(f) => return Outcome::Response(self.failed(run, &f, "before its response head")),
        };

        if let Some(loc) = &head.location {
            let local = loc.as_bytes().starts_with(b"/") && !loc.as_bytes().starts_with(b"//");
            if local && head.status.is_none() {
                run.finish();
                if redirects >= self.cfg.max_local_redirects {
                    tracing::warn!("cgi {name}: more than {redirects} local redirects");
                    return Outcome::Response(plain(StatusCode::INTERNAL_SERVER_ERROR));
                }
                return match redirect_request(&req, loc) {
                    Some(r) => Outcome::Redirect(r),
                    None => {
                        tracing::warn!("cgi {name}: bad local Location {loc:?}");
                        Outcome::Response(plain(StatusCode::BAD_GATEWAY))
                    }
                };
            }
        }
        let status = head.status.unwrap_or(if head.location.is_some() { StatusCode::FOUND } else { StatusCode::OK });
        let res = match head.content_length {
            Some(n) if n <= self.cfg.max_buffered_output as u64 => match run.body(n as usize).await {
                Ok(b) => {
                    run.finish();
                    Response::bytes(status, b)
                }
                Err(f) => return Outcome::Response(self.failed(run, &f, "before the end of its Content-Length")),
            },
            declared => {
                let mut unstarted = Unstarted(Some(run));
                let mut res = Response::stream(status, move |w| {
                    let run = unstarted.0.take();
                    async move {
                        match run {
                            Some(run) => run.stream(w, declared).await,
                            None => Ok(()),
                        }
                    }
                });
                if let Some(n) = declared {
                    // The engine sends the stream with this length (HTTP/1.1 and HTTP/2).
                    res = res.header(header::CONTENT_LENGTH, n);
                }
                res
            }
        };
        Outcome::Response(head.add_fields(res))
    }

    /// The answer when the script failed before anything was sent: logged, then 502 (504
    /// for the time limit). The script is killed, except after a clean end of output, when
    /// it is left to exit (and its status logged).
    fn failed(&self, run: Run, f: &Fail, when: &str) -> Response {
        tracing::warn!("cgi {}: {f} {when}", run.name());
        match f {
            Fail::TimedOut => plain(StatusCode::GATEWAY_TIMEOUT),
            Fail::Body => plain(StatusCode::BAD_REQUEST),
            Fail::Eof => {
                run.finish();
                plain(StatusCode::BAD_GATEWAY)
            }
            Fail::Head(_) | Fail::Io(_) => plain(StatusCode::BAD_GATEWAY),
        }
    }
}

/// A run whose output is not streamed yet. Should the engine drop the stream unstarted
/// (HEAD, 204, 304), the script is finished normally, not killed; once started, dropping
/// the stream (the client went away) kills it.
struct Unstarted(Option<Run>);

impl Drop for Unstarted {
    fn drop(&mut self) {
        if let Some(run) = self.0.take() {
            run.finish();
        }
    }
}

/// The GET of a local redirect to `location`: the original's headers but the body's, its
/// peer and scheme.
fn redirect_request(orig: &Request, location: &HeaderValue) -> Option<Request> {
    let mut b =
        selvedge::http::Request::builder().method(Method::GET).uri(location.to_str().ok()?).version(orig.version());
    let mut has_host = false;
    for (name, value) in orig.headers() {
        let skip = ["content-length", "content-type", "transfer-encoding", "expect"];
        if skip.iter().any(|s| name.eq_ignore_ascii_case(s)) {
            continue;
        }
        has_host |= name.eq_ignore_ascii_case("host");
        b = b.header(name, value);
    }
    if let (false, Some(a)) = (has_host, orig.authority()) {
        b = b.header(header::HOST, a);
    }
    let mut req = Request::from(b.body(Bytes::new()).ok()?);
    req.set_origin(orig.peer().clone(), orig.is_secure());
    Some(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Result<CgiConfig, String> {
        let raw: RawCgi = toml::from_str(text).map_err(|e| e.to_string())?;
        CgiConfig::from_raw(&raw, &|p| std::env::temp_dir().join(p))
    }

    #[test]
    fn config_defaults_and_errors() {
        let c = cfg("dir = \".\"").unwrap();
        assert_eq!((c.timeout, c.max_output_head, c.max_buffered_output), (Duration::from_secs(30), 65536, 1 << 20));
        assert_eq!((c.max_buffered_input, c.max_local_redirects, c.max_processes), (1 << 20, 5, 64));
        assert_eq!((c.path.to_str(), c.pass_authorization), (Some("/usr/local/bin:/usr/bin:/bin"), false));
        let c = cfg(
            "dir = \".\"\ntimeout = 0.5\ninterpreters = { \".py\" = \"/bin/sh\" }\nenv = [\"A=b=c\", \"SELVEDGE_SURELY_UNSET\"]",
        )
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(500));
        assert_eq!(c.interpreters.get("py").and_then(|p| p.to_str()), Some("/bin/sh"));
        assert_eq!(c.env, vec![("A".to_string(), OsString::from("b=c"))]);
        for bad in [
            "dir = \"/no/such/dir\"",
            "dir = \".\"\ntimeout = 0",
            "dir = \".\"\ntimeout = -1",
            "dir = \".\"\nmax_output_head = 0",
            "dir = \".\"\nmax_processes = 0",
            "dir = \".\"\ninterpreters = { py = \"/no/such/python\" }",
            "dir = \".\"\ninterpreters = { \"\" = \"/bin/sh\" }",
            "dir = \".\"\nenv = [\"=x\"]",
            "dir = \".\"\ntimeuot = 1",
        ] {
            assert!(cfg(bad).is_err(), "{bad}");
        }
    }
}
