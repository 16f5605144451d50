//! The admin listener (`[admin] listen`): a listener of its own, apart from the public
//! ones, with one worker thread, serving
//!
//! - `/metrics`: every metric in the OpenMetrics text format ([`crate::metrics::expose`]);
//! - `/healthz`: 200 while the process serves (liveness);
//! - `/readyz`: 200 when ready, 503 while starting, draining or failed (readiness);
//! - `/status`: a self-contained HTML page that polls `/status.json` and draws live charts;
//! - `/status.json`: the numbers behind the page, with the last ten minutes' history;
//! - `/config`, `/config/PATH`, `/load`, `/reload`, `/stop`: the configuration API
//!   (`docs/admin-api.md`; the document in [`api`], applied by [`crate::supervise`]).
//!
//! None of these requests is counted in the metrics or written to the access log. The
//! listener refuses a non-loopback TCP address unless `[admin] public = true` (checked when
//! the configuration is loaded): metrics and the status page tell an attacker what runs and
//! where (routes, upstreams, load), so exposing them is a decision, not a default.

pub mod api;
pub mod client;
pub mod status;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use selvedge::http::{header, Method, StatusCode};
use selvedge::{Listen, Request, Response, Server, ServerHandle, Settings, Workers};

use crate::metrics::expose::{self, EngineSeries, Extra, FileCacheStats};

/// The admin listener (`[admin]`): `/metrics`, `/healthz`, `/readyz`, `/status`, and the
/// configuration API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where it listens: a loopback address or a Unix socket, unless `public`.
    pub listen: Listen,
    /// Allow a non-loopback address (anyone who reaches it sees the metrics and status).
    pub public: bool,
    /// The bearer token the configuration API asks for (`None`: none asked on a loopback
    /// address or a Unix socket; the API is refused on any other).
    pub token: Option<String>,
    /// Where changes made through the API are written as TOML (`None`: kept in memory
    /// until the next reload from the file).
    pub persist: Option<std::path::PathBuf>,
    /// TLS on the listener, with client certificates asked for when `client_ca` is set.
    pub tls: Option<AdminTls>,
    /// The configuration API (`/config`, `/load`, `/upstreams`, `/reload`, `/stop`) on.
    pub api: bool,
}

/// `[admin] tls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminTls {
    /// The certificate chain (PEM).
    pub cert: std::path::PathBuf,
    /// Its key (PEM).
    pub key: std::path::PathBuf,
    /// The CAs whose client certificates are accepted (PEM); with it, a client without
    /// one is refused in the handshake.
    pub client_ca: Option<std::path::PathBuf>,
}

/// The admin listener's TLS settings: HTTP/1.1, its certificate, and client certificates
/// verified against `client_ca` (required) when it is set.
///
/// # Errors
/// A file that cannot be read or holds no certificate or key.
pub fn tls_config(t: &AdminTls) -> std::io::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |p: &std::path::Path| {
        crate::files::read_small(p, selvedge::tls::MAX_PEM)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(&t.cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(format!("{}: {e}", t.cert.display())))?;
    if chain.is_empty() {
        return Err(bad(format!("{}: no certificate", t.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&t.key)?).map_err(|e| bad(format!("{}: {e}", t.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(std::io::Error::other)?;
    let builder = match &t.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&read(ca)?) {
                let c = c.map_err(|e| bad(format!("{}: {e}", ca.display())))?;
                roots.add(c).map_err(|e| bad(format!("{}: {e}", ca.display())))?;
            }
            if roots.is_empty() {
                return Err(bad(format!("{}: no certificate", ca.display())));
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| bad(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(|e| bad(format!("{}: {e}", t.key.display())))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The largest body `/load` and the configuration API read.
pub const MAX_API_BODY: usize = 1 << 20;

/// A request of the configuration API, for the supervisor.
#[derive(Debug)]
pub enum Cmd {
    /// The document, or the part of it at a path.
    Get { path: Vec<String>, reply: Reply },
    /// A change, made if the document's tag is one of `if_match` (any, without).
    Change { change: Change, if_match: Option<String>, who: String, what: String, reply: Reply },
    /// The upstream pools, their servers and health.
    Upstreams { reply: Reply },
    /// Reload from the file (as SIGHUP).
    Reload { who: String, reply: Reply },
    /// Stop gracefully (as SIGTERM).
    Stop { who: String, reply: Reply },
}

/// What a change to the configuration is.
#[derive(Debug)]
pub enum Change {
    /// A change at a path.
    Op(api::Op),
    /// A whole configuration in TOML.
    LoadToml(String),
    /// A whole configuration in JSON.
    LoadJson(serde_json::Value),
    /// A server added to an upstream pool.
    AddServer { pool: String, server: serde_json::Value },
    /// A server taken out of an upstream pool (its requests in flight finish).
    RemoveServer { pool: String, addr: String },
}

impl Change {
    /// The change as JSON (to send it to other instances; before it is made, as that
    /// consumes it).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Change::Op(api::Op::Put(p, v)) => json!({ "op": "put", "path": p, "value": v }),
            Change::Op(api::Op::Append(p, v)) => json!({ "op": "append", "path": p, "value": v }),
            Change::Op(api::Op::Patch(p, v)) => json!({ "op": "patch", "path": p, "value": v }),
            Change::Op(api::Op::Delete(p)) => json!({ "op": "delete", "path": p }),
            Change::LoadToml(t) => json!({ "op": "load_toml", "text": t }),
            Change::LoadJson(v) => json!({ "op": "load_json", "value": v }),
            Change::AddServer { pool, server } => json!({ "op": "add_server", "pool": pool, "server": server }),
            Change::RemoveServer { pool, addr } => json!({ "op": "remove_server", "pool": pool, "addr": addr }),
        }
    }

    /// The change [`Change::to_json`] described, `None` if it describes none.
    pub fn from_json(v: &serde_json::Value) -> Option<Change> {
        use api::Op;
        let path = || -> Option<Vec<String>> {
            v["path"].as_array()?.iter().map(|s| s.as_str().map(str::to_string)).collect()
        };
        let text = |k: &str| v[k].as_str().map(str::to_string);
        Some(match v["op"].as_str()? {
            "put" => Change::Op(Op::Put(path()?, v["value"].clone())),
            "append" => Change::Op(Op::Append(path()?, v["value"].clone())),
            "patch" => Change::Op(Op::Patch(path()?, v["value"].clone())),
            "delete" => Change::Op(Op::Delete(path()?)),
            "load_toml" => Change::LoadToml(text("text")?),
            "load_json" => Change::LoadJson(v["value"].clone()),
            "add_server" => Change::AddServer { pool: text("pool")?, server: v["server"].clone() },
            "remove_server" => Change::RemoveServer { pool: text("pool")?, addr: text("addr")? },
            _ => return None,
        })
    }
}

/// Where the supervisor answers a [`Cmd`].
pub type Reply = tokio::sync::oneshot::Sender<ApiAnswer>;

/// The supervisor's answer to a [`Cmd`].
#[derive(Debug)]
pub struct ApiAnswer {
    /// The status.
    pub status: StatusCode,
    /// The JSON body.
    pub body: serde_json::Value,
    /// The document's tag after it.
    pub etag: Option<String>,
}

/// The configuration API's way to the supervisor, and who may use it.
#[derive(Debug, Clone)]
pub struct ApiLink {
    /// The supervisor's queue.
    pub tx: tokio::sync::mpsc::UnboundedSender<Cmd>,
    /// The bearer token asked for, if any.
    pub token: Option<String>,
    /// Whether the admin listener is a loopback address or a Unix socket.
    pub local: bool,
    /// Whether every client presented a certificate from `[admin] tls.client_ca`.
    pub verified_clients: bool,
    /// Whether the configuration API is on (`[admin] api`).
    pub enabled: bool,
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
    pub fn start(cfg: &AdminConfig, info: Info, link: ApiLink) -> std::io::Result<Admin> {
        crate::metrics::set_enabled(true);
        let info = Arc::new(Mutex::new(info));
        let history = status::History::start();
        let settings = Settings { workers: Workers::PerCore(1), ..Settings::default() };
        let app = {
            let info = info.clone();
            move |req: Request| {
                let api = is_api(req.path()).then(|| link.clone());
                let fleet = req.path() == "/fleet";
                let res = match (&api, fleet) {
                    (None, false) => Some(answer(&req, &info, &history, &link)),
                    _ => None,
                };
                async move {
                    match (res, api) {
                        (Some(res), _) => res,
                        (None, Some(link)) => api_answer(req, &link).await,
                        (None, None) => {
                            let reads = req.method() == Method::GET || req.method() == Method::HEAD;
                            drop(req);
                            fleet_answer(reads).await
                        }
                    }
                }
            }
        };
        let server = match &cfg.tls {
            Some(t) => Server::new(settings).bind_tls(cfg.listen.clone(), tls_config(t)?),
            None => Server::new(settings).bind(cfg.listen.clone()),
        };
        let handle = server.start(app)?;
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
    crate::fleet::events::purged(zone.as_deref(), key.as_deref(), prefix.as_deref());
    text(StatusCode::OK, format!("{{\"purged\":{n}}}\n"), "application/json")
}

/// `GET /fleet`: the fleet's live instances ([`crate::fleet::members::list`]).
async fn fleet_answer(reads: bool) -> Response {
    if !reads {
        return text(StatusCode::METHOD_NOT_ALLOWED, "405 Method Not Allowed\n", "text/plain; charset=utf-8")
            .header(header::ALLOW, "GET, HEAD");
    }
    let Some(f) = crate::fleet::get() else {
        return refuse(StatusCode::NOT_FOUND, "this server is not in a fleet (no [fleet] section)");
    };
    match crate::fleet::members::list(f).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => refuse(StatusCode::SERVICE_UNAVAILABLE, &format!("Redis: {e}")),
    }
}

/// Whether `path` is the configuration API's.
fn is_api(path: &str) -> bool {
    path == "/config"
        || path.starts_with("/config/")
        || path == "/upstreams"
        || path.starts_with("/upstreams/")
        || matches!(path, "/load" | "/reload" | "/stop")
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    let mut out = serde_json::to_vec_pretty(body).unwrap_or_default();
    out.push(b'\n');
    text(status, out, "application/json")
}

fn refuse(status: StatusCode, why: &str) -> Response {
    json(status, &serde_json::json!({ "error": why }))
}

/// Whether `req` may use the configuration API: never from a browser page (a request
/// with `Origin` or `Sec-Fetch-Site` other than `none`: another site's page could reach a
/// loopback address); with the token when one is set (compared in constant time);
/// without one only on a loopback address or a Unix socket, and only with a `Host` that a
/// local client sends (an IP address or `localhost`: a name another site controls could
/// be pointed at 127.0.0.1).
fn api_allowed(req: &Request, link: &ApiLink) -> Result<(), Response> {
    let from_browser = req.header_bytes().any(|(n, v)| {
        n.eq_ignore_ascii_case(b"origin")
            || (n.eq_ignore_ascii_case(b"sec-fetch-site") && !v.eq_ignore_ascii_case(b"none"))
    });
    if from_browser {
        return Err(refuse(StatusCode::FORBIDDEN, "the admin API does not answer browser pages"));
    }
    if let Some(token) = &link.token {
        let given = req.header("authorization").and_then(|v| {
            let (scheme, rest) = v.split_at(v.len().min(7));
            scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
        });
        let ok = given.is_some_and(|g| crate::policy::auth::ct_eq(g, token.as_bytes()));
        if !ok {
            return Err(refuse(StatusCode::UNAUTHORIZED, "the admin API needs `Authorization: Bearer TOKEN`")
                .header(header::WWW_AUTHENTICATE, "Bearer realm=\"selvedge admin\""));
        }
        return Ok(());
    }
    if link.verified_clients {
        // The handshake checked the client's certificate.
        return Ok(());
    }
    if !link.local {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "the admin API on a non-loopback address needs [admin] token or tls.client_ca",
        ));
    }
    // A browser cannot reach a Unix socket; over TCP, a name could be pointed at 127.0.0.1.
    if matches!(req.peer(), selvedge::PeerAddr::Unix) || local_host(req.authority().unwrap_or("localhost")) {
        return Ok(());
    }
    Err(refuse(StatusCode::FORBIDDEN, "the admin API answers Host: localhost or an IP address without [admin] token"))
}

/// Whether `host` (a `Host` value: name or address, and maybe a port) is `localhost` or an
/// IP address.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((v6, port)) if port.is_empty() || port.strip_prefix(':').is_some_and(is_port) => {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((h, port)) if is_port(port) => h,
            Some(_) => return false,
            None => host,
        },
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Who made a request, for the log.
fn who(req: &Request, link: &ApiLink) -> String {
    let peer = match req.peer() {
        selvedge::PeerAddr::Tcp(a) => a.to_string(),
        selvedge::PeerAddr::Unix => "unix".to_string(),
    };
    match link.token {
        Some(_) => format!("{peer} (token)"),
        None => peer,
    }
}

/// Serves the configuration API: the request checked and read here, the answer from the
/// supervisor.
async fn api_answer(mut req: Request, link: &ApiLink) -> Response {
    let m = req.method().clone();
    let path = req.path().to_string();
    if let Err(res) = api_allowed(&req, link) {
        tracing::info!(
            who = who(&req, link),
            what = format!("{m} {path}"),
            status = res.status().as_u16(),
            "admin API request refused"
        );
        return refused(res);
    }
    if !link.enabled {
        return refuse(StatusCode::NOT_FOUND, "the configuration API is off ([admin] api = true turns it on)");
    }
    let if_match = req.header_str("if-match").map(str::to_string);
    let json_body = req.header("content-type").is_some_and(|v| {
        let v = v.split(|&b| b == b';').next().unwrap_or_default();
        v.trim_ascii().eq_ignore_ascii_case(b"application/json")
    });
    let (tx, rx) = tokio::sync::oneshot::channel();
    let who = who(&req, link);
    let what = format!("{m} {path}");
    let body = if m == Method::GET || m == Method::HEAD || m == Method::DELETE {
        bytes::Bytes::new()
    } else {
        match req.take_body().to_bytes(MAX_API_BODY).await {
            Ok(b) => b,
            Err(e) if e.status() == Some(StatusCode::PAYLOAD_TOO_LARGE) => {
                return refused(refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the body is over {MAX_API_BODY} bytes"),
                ))
            }
            Err(e) => return refused(refuse(StatusCode::BAD_REQUEST, &format!("reading the body: {e}"))),
        }
    };
    let parse_json = |b: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(b)
            .map_err(|e| refused(refuse(StatusCode::BAD_REQUEST, &format!("the body is not JSON: {e}"))))
    };
    let allow =
        |allow: &'static str| refuse(StatusCode::METHOD_NOT_ALLOWED, "method not allowed").header(header::ALLOW, allow);
    let cmd = match path.as_str() {
        "/load" if m == Method::POST => {
            let change = if json_body {
                match parse_json(&body) {
                    Ok(j) => Change::LoadJson(j),
                    Err(res) => return res,
                }
            } else {
                match String::from_utf8(body.to_vec()) {
                    Ok(t) => Change::LoadToml(t),
                    Err(_) => return refused(refuse(StatusCode::BAD_REQUEST, "the body is not UTF-8")),
                }
            };
            Cmd::Change { change, if_match, who, what, reply: tx }
        }
        "/load" => return allow("POST"),
        "/reload" if m == Method::POST => Cmd::Reload { who, reply: tx },
        "/stop" if m == Method::POST => Cmd::Stop { who, reply: tx },
        "/reload" | "/stop" => return allow("POST"),
        "/upstreams" if m == Method::GET || m == Method::HEAD => {
            let _ = link.tx.send(Cmd::Upstreams { reply: tx });
            return reply(rx, m == Method::HEAD).await;
        }
        "/upstreams" => return allow("GET, HEAD"),
        p if p.starts_with("/upstreams/") => {
            let rest = &p["/upstreams/".len()..];
            let (pool, tail) = rest.split_once('/').unwrap_or((rest, ""));
            let pool = String::from_utf8_lossy(&selvedge::percent_decode(pool.as_bytes())).into_owned();
            let change = match (tail, tail.strip_prefix("servers/")) {
                ("servers", _) if m == Method::POST => match parse_json(&body) {
                    Ok(server) => Change::AddServer { pool, server },
                    Err(res) => return res,
                },
                ("servers", _) => return allow("POST"),
                (_, Some(addr)) if !addr.is_empty() && m == Method::DELETE => {
                    let addr = String::from_utf8_lossy(&selvedge::percent_decode(addr.as_bytes())).into_owned();
                    Change::RemoveServer { pool, addr }
                }
                (_, Some(addr)) if !addr.is_empty() => return allow("DELETE"),
                _ => {
                    return refuse(
                        StatusCode::NOT_FOUND,
                        "/upstreams, /upstreams/NAME/servers (POST), /upstreams/NAME/servers/ADDR (DELETE)",
                    )
                }
            };
            Cmd::Change { change, if_match, who, what, reply: tx }
        }
        _ => {
            let rest = &path["/config".len()..];
            let p = match api::parse_path(rest) {
                Ok(p) => p,
                Err(e) => return refused(refuse(StatusCode::BAD_REQUEST, &e)),
            };
            let op = match m {
                Method::GET | Method::HEAD => {
                    let _ = link.tx.send(Cmd::Get { path: p, reply: tx });
                    return reply(rx, m == Method::HEAD).await;
                }
                Method::DELETE => api::Op::Delete(p),
                Method::PUT | Method::POST | Method::PATCH => {
                    let j = match parse_json(&body) {
                        Ok(j) => j,
                        Err(res) => return res,
                    };
                    match m {
                        Method::PUT => api::Op::Put(p, j),
                        Method::POST => api::Op::Append(p, j),
                        _ => api::Op::Patch(p, j),
                    }
                }
                _ => return allow("GET, HEAD, PUT, POST, PATCH, DELETE"),
            };
            Cmd::Change { change: Change::Op(op), if_match, who, what, reply: tx }
        }
    };
    if link.tx.send(cmd).is_err() {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    }
    reply(rx, false).await
}

/// `res`, a change refused before it reached the supervisor, counted.
fn refused(res: Response) -> Response {
    crate::metrics::registry().events.api_changes_refused.fetch_add(1, Ordering::Relaxed);
    res
}

async fn reply(rx: tokio::sync::oneshot::Receiver<ApiAnswer>, head: bool) -> Response {
    let Ok(a) = rx.await else { return refuse(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping") };
    let mut res = json(a.status, &a.body);
    if head {
        res = Response::new(a.status).header(header::CONTENT_TYPE, "application/json");
    }
    match a.etag {
        Some(t) => res.header(header::ETAG, t),
        None => res,
    }
}

fn answer(req: &Request, info: &Mutex<Info>, history: &status::History, link: &ApiLink) -> Response {
    if req.path() == "/cache/purge" {
        if req.method() == Method::POST || req.method() == Method::DELETE || req.method().as_str() == "PURGE" {
            // A change: the API's rules on who may make it.
            if let Err(res) = api_allowed(req, link) {
                tracing::info!(
                    who = who(req, link),
                    what = "purge",
                    status = res.status().as_u16(),
                    "admin API request refused"
                );
                return res;
            }
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
        _ => text(
            StatusCode::NOT_FOUND,
            "404 Not Found: /metrics /healthz /readyz /status /status.json /config /load /reload /stop /fleet\n",
            PLAIN,
        ),
    }
}

#[cfg(test)]
mod change_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_change_travels_as_it_was_asked() {
        let changes = [
            Change::Op(api::Op::Put(vec!["a".into(), "0".into()], json!({"x": 1}))),
            Change::Op(api::Op::Append(vec!["vhost".into()], json!(2))),
            Change::Op(api::Op::Patch(vec![], json!({"y": true}))),
            Change::Op(api::Op::Delete(vec!["b".into()])),
            Change::LoadToml("[server]\n".into()),
            Change::LoadJson(json!({"server": {}})),
            Change::AddServer { pool: "p".into(), server: json!({"url": "http://a"}) },
            Change::RemoveServer { pool: "p".into(), addr: "http://a".into() },
        ];
        for c in &changes {
            let d = c.to_json();
            let back = Change::from_json(&serde_json::from_str(&d.to_string()).unwrap()).unwrap();
            assert_eq!(back.to_json(), d);
        }
        assert!(Change::from_json(&json!({"op": "drop_tables"})).is_none());
        assert!(Change::from_json(&json!({"op": "put", "path": [1]})).is_none());
    }
}
