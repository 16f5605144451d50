//! The admin listener (`[admin] listen`): a listener of its own, apart from the public
//! ones, with one worker thread, serving
//!
//! - `/metrics`: every metric in the OpenMetrics text format ([`crate::metrics::expose`]);
//! - `/healthz`: 200 while the process serves (liveness);
//! - `/readyz`: 200 when ready, 503 while starting, draining or failed (readiness);
//! - `/status`: a self-contained HTML page that polls `/status.json` and draws live charts;
//! - `/status.json`: the numbers behind the page, with the last ten minutes' history.
//!
//! None of these requests is counted in the metrics or written to the access log. The
//! listener refuses a non-loopback TCP address unless `[admin] public = true` (checked when
//! the configuration is loaded): metrics and the status page tell an attacker what runs and
//! where (routes, upstreams, load), so exposing them is a decision, not a default.

pub mod status;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use selvedge::http::{header, Method, StatusCode};
use selvedge::{Listen, Request, Response, Server, ServerHandle, Settings, Workers};

use crate::metrics::expose::{self, EngineSeries, Extra, FileCacheStats};

/// The admin listener (`[admin]`): `/metrics`, `/healthz`, `/readyz`, `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where it listens: a loopback address or a Unix socket, unless `public`.
    pub listen: Listen,
    /// Allow a non-loopback address (anyone who reaches it sees the metrics and status).
    pub public: bool,
}

/// The process's readiness, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Listeners not serving yet.
    Starting = 0,
    /// Serving.
    Ready = 1,
    /// Shutting down or handing over: in-flight requests finish, new ones should go elsewhere.
    Draining = 2,
    /// Not able to serve (no listener, a worker gone).
    Failed = 3,
}

impl State {
    /// The word `/readyz` answers.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Ready => "ready",
            State::Draining => "draining",
            State::Failed => "failed",
        }
    }
}

static STATE: AtomicU8 = AtomicU8::new(State::Starting as u8);

/// Sets the readiness state.
pub fn set_state(s: State) {
    STATE.store(s as u8, Ordering::Release);
}

/// The readiness state.
pub fn state() -> State {
    match STATE.load(Ordering::Acquire) {
        1 => State::Ready,
        2 => State::Draining,
        3 => State::Failed,
        _ => State::Starting,
    }
}

/// What the status page shows about the configuration, set at startup and on reload.
#[derive(Debug, Default, Clone)]
pub struct Info {
    /// The listeners' URLs.
    pub listeners: Vec<String>,
    /// Virtual host, route prefix, what serves it.
    pub routes: Vec<(String, String, String)>,
    /// The configuration file.
    pub config_file: Option<String>,
    /// Worker threads.
    pub workers: usize,
}

/// The running admin listener.
#[derive(Debug)]
pub struct Admin {
    handle: ServerHandle,
    info: Arc<Mutex<Info>>,
}

/// The engine's counters as metrics series, and the file cache's.
pub fn engine_series() -> (Vec<EngineSeries>, FileCacheStats) {
    let s = selvedge::stats::snapshot();
    let series = |name, help, counter, labels: Vec<(&'static str, String)>, value| EngineSeries {
        name,
        help,
        counter,
        labels,
        value,
    };
    let proto = |p: &str| vec![("protocol", p.to_string())];
    let ver = |v: &str| vec![("version", v.to_string())];
    let why = |r: &str| vec![("reason", r.to_string())];
    let out = vec![
        series("connections_accepted", "Connections accepted", true, vec![], s.accepted),
        series("connections_open", "Connections open, by protocol", false, proto("h1"), s.open_h1),
        series("connections_open", "Connections open, by protocol", false, proto("h2"), s.open_h2),
        series("http2_streams", "HTTP/2 streams opened by clients", true, vec![], s.h2_streams),
        series("http2_streams_open", "HTTP/2 streams open", false, vec![], s.h2_streams_open),
        series("tls_handshakes", "TLS handshakes completed, by version", true, ver("TLSv1.2"), s.tls_handshakes_tls12),
        series("tls_handshakes", "TLS handshakes completed, by version", true, ver("TLSv1.3"), s.tls_handshakes_tls13),
        series(
            "tls_handshake_failures",
            "TLS handshakes that failed, by reason",
            true,
            why("error"),
            s.tls_handshake_errors,
        ),
        series(
            "tls_handshake_failures",
            "TLS handshakes that failed, by reason",
            true,
            why("closed"),
            s.tls_handshake_closed,
        ),
        series(
            "tls_handshake_failures",
            "TLS handshakes that failed, by reason",
            true,
            why("timeout"),
            s.tls_handshake_timeouts,
        ),
    ];
    let mut out = out;
    // Open connections by state, and closed ones by reason, for each protocol.
    for (p, st, closes) in [("h1", s.states_h1, &s.closes_h1), ("h2", s.states_h2, &s.closes_h2)] {
        for (state, n) in [("reading", st.reading), ("writing", st.writing), ("idle", st.idle)] {
            let labels = vec![("protocol", p.to_string()), ("state", state.to_string())];
            out.push(series("connections_state", "Connections open, by protocol and state", false, labels, n));
        }
        for r in selvedge::stats::CloseReason::ALL {
            let labels = vec![("protocol", p.to_string()), ("reason", r.name().to_string())];
            let help = "Connections closed, by protocol and reason";
            out.push(series("connections_closed", help, true, labels, closes[r as usize]));
        }
    }
    // Per error code, the codes seen (series appear once non-zero).
    let per_code: [(&'static str, &'static str, &[u64; selvedge::stats::CODES]); 3] = [
        ("http2_resets_sent", "HTTP/2 RST_STREAM frames sent, by error code", &s.h2_resets_sent),
        ("http2_resets_received", "HTTP/2 RST_STREAM frames received, by error code", &s.h2_resets_received),
        ("http2_goaways_sent", "HTTP/2 GOAWAY frames sent, by error code", &s.h2_goaways_sent),
    ];
    for (name, help, counts) in per_code {
        for (code, &n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            out.push(series(name, help, true, vec![("code", code_name(code).to_string())], n));
        }
    }
    let fc = FileCacheStats {
        entries: s.file_cache_entries,
        hits: s.file_cache_hits,
        misses: s.file_cache_misses,
        evictions: s.file_cache_evictions,
    };
    (out, fc)
}

/// An HTTP/2 error code's name (RFC 9113 §7), `OTHER` past the known ones.
fn code_name(code: usize) -> &'static str {
    let known = code < selvedge::stats::OTHER_CODE;
    u32::try_from(code)
        .ok()
        .filter(|_| known)
        .and_then(|c| selvedge_proto::h2::frame::Reason(c).name())
        .unwrap_or("OTHER")
}

/// Everything `/metrics` adds to the registry's numbers.
pub fn extra() -> Extra {
    let (engine, fc) = engine_series();
    let upstreams = crate::upstream::pool::health_states();
    Extra { ready: state() == State::Ready, file_cache: Some(fc), engine, upstreams }
}

impl Admin {
    /// Binds `cfg.listen` and serves the admin pages; turns metrics recording on.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn start(cfg: &AdminConfig, info: Info) -> std::io::Result<Admin> {
        crate::metrics::set_enabled(true);
        let info = Arc::new(Mutex::new(info));
        let history = status::History::start();
        let settings = Settings { workers: Workers::PerCore(1), ..Settings::default() };
        let app = {
            let info = info.clone();
            move |req: Request| {
                let res = answer(&req, &info, &history);
                async move { res }
            }
        };
        let handle = Server::new(settings).bind(cfg.listen.clone()).start(app)?;
        Ok(Admin { handle, info })
    }

    /// The addresses bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[Listen] {
        self.handle.local_addrs()
    }

    /// Replaces what the status page shows about the configuration (on reload).
    pub fn set_info(&self, info: Info) {
        *self.info.lock().unwrap_or_else(|p| p.into_inner()) = info;
    }

    /// Stops the listener (after the public ones have drained).
    pub fn stop(self) {
        self.handle.shutdown();
        self.handle.join();
    }
}

fn text(status: StatusCode, body: impl Into<bytes::Bytes>, mime: &'static str) -> Response {
    Response::bytes(status, body).header(header::CONTENT_TYPE, mime).header(header::CACHE_CONTROL, "no-store")
}

/// `POST /cache/purge?key=URL` or `?prefix=URL` (and `zone=NAME` for one zone): removes
/// stored responses of the HTTP cache. The key is the cache's (by default
/// `scheme://host/path?query`); a prefix removes every key that starts with it.
fn purge(req: &Request) -> Response {
    use crate::lang::template::query_arg;
    let q = req.query_bytes().unwrap_or_default();
    let decode = |name: &'static str| query_arg(q, name).map(std::borrow::Cow::into_owned);
    let (zone, key, prefix) = (decode("zone"), decode("key"), decode("prefix"));
    let empty = |v: &Option<Vec<u8>>| v.as_ref().is_some_and(Vec::is_empty);
    if (key.is_none() && prefix.is_none()) || empty(&key) || empty(&prefix) {
        return text(
            StatusCode::BAD_REQUEST,
            "400: ?key=URL or ?prefix=URL, not empty (and zone=NAME)\n",
            "text/plain; charset=utf-8",
        );
    }
    let zone = zone.map(|z| String::from_utf8_lossy(&z).into_owned());
    if let Some(z) = &zone {
        if !crate::cache::all_zones().iter().any(|x| &x.name() == z) {
            return text(StatusCode::NOT_FOUND, format!("404: no cache zone {z:?}\n"), "text/plain; charset=utf-8");
        }
    }
    let n = crate::cache::purge(zone.as_deref(), key.as_deref(), prefix.as_deref());
    tracing::info!(zone = zone.as_deref().unwrap_or("*"), purged = n, "cache purge");
    text(StatusCode::OK, format!("{{\"purged\":{n}}}\n"), "application/json")
}

fn answer(req: &Request, info: &Mutex<Info>, history: &status::History) -> Response {
    if req.path() == "/cache/purge" {
        if req.method() == Method::POST || req.method() == Method::DELETE || req.method().as_str() == "PURGE" {
            return purge(req);
        }
        return text(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed\n", "text/plain; charset=utf-8")
            .header(header::ALLOW, "POST, DELETE, PURGE");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed\n", "text/plain; charset=utf-8")
            .header(header::ALLOW, "GET, HEAD");
    }
    const PLAIN: &str = "text/plain; charset=utf-8";
    match req.path() {
        "/metrics" => text(StatusCode::OK, expose::render(extra()), expose::CONTENT_TYPE),
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/readyz" => match state() {
            State::Ready => text(StatusCode::OK, "ready\n", PLAIN),
            s => text(StatusCode::SERVICE_UNAVAILABLE, format!("{}\n", s.as_str()), PLAIN),
        },
        "/status" => text(StatusCode::OK, status::PAGE, "text/html; charset=utf-8")
            .header(header::HeaderName::from_static("content-security-policy"), status::CSP),
        "/status.json" => {
            let info = info.lock().unwrap_or_else(|p| p.into_inner()).clone();
            text(StatusCode::OK, status::json(&info, history), "application/json")
        }
        "/" => Response::new(StatusCode::FOUND).header(header::LOCATION, "/status"),
        _ => text(StatusCode::NOT_FOUND, "404 Not Found: /metrics /healthz /readyz /status /status.json\n", PLAIN),
    }
}
