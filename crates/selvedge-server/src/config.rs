//! The configuration file (TOML). See `examples/selvedge.toml` for every key.
//!
//! Unknown keys, wrong types and invalid values are errors reported as
//! `FILE:LINE:COLUMN: reason`; relative paths are taken from the config file's directory.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use selvedge::file::CacheConfig;
use selvedge::{Settings, Workers};
use serde::Deserialize;
use toml::Spanned;

use crate::static_files::StaticOptions;

/// A configuration error, with its position in the file.
#[derive(Debug)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 if unknown).
    pub line: usize,
    /// 1-based column (0 if unknown).
    pub col: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.col, self.reason)
    }
}

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// No access log.
    Off,
    /// Standard output.
    Stdout,
    /// A file, rotated by size.
    File(PathBuf),
}

/// A TLS listener: address and the PEM files of its default certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListen {
    /// Address to listen on.
    pub addr: SocketAddr,
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// Refuse handshakes naming an unknown host (an `unrecognized_name` alert) instead of
    /// answering with the default certificate.
    pub strict_sni: bool,
}

/// Access log settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Where lines go: off by default.
    pub target: LogTarget,
    /// Rotate when the file reaches this many bytes: 10 MiB (0: never).
    pub size: u64,
    /// Rotated files kept (`log.1` .. `log.N`): 5.
    pub backups: u32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { target: LogTarget::Off, size: 10 << 20, backups: 5 }
    }
}

/// One route: requests whose path starts with `prefix` are served by `kind`.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Path prefix (starts with `/`).
    pub prefix: String,
    /// What serves it.
    pub kind: RouteKind,
}

/// What serves a route: exactly one of `root`, `cgi` or `proxy` in the file.
#[derive(Debug, Clone)]
pub enum RouteKind {
    /// Static files from a directory.
    Static {
        /// Directory served.
        root: PathBuf,
        /// Static-file options.
        opts: StaticOptions,
    },
    /// CGI/1.1 scripts.
    Cgi(crate::cgi::CgiConfig),
    /// A reverse proxy to an HTTP/1.1 upstream.
    Proxy(crate::proxy::ProxyConfig),
}

impl RouteConfig {
    /// The static-file options, on a static route.
    pub fn static_opts(&self) -> Option<&StaticOptions> {
        match &self.kind {
            RouteKind::Static { opts, .. } => Some(opts),
            _ => None,
        }
    }
}

/// A virtual host: the `Host` names it answers (empty: the default host) and its routes.
#[derive(Debug, Clone)]
pub struct VhostConfig {
    /// Host names, lower case, without port.
    pub hosts: Vec<String>,
    /// Routes.
    pub routes: Vec<RouteConfig>,
    /// This host's certificate and key (PEM) for TLS listeners, chosen by SNI.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// A whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (`None`: built from the command line).
    pub file: Option<PathBuf>,
    /// Addresses to listen on (cleartext HTTP/1.1 and h2c).
    pub listen: Vec<SocketAddr>,
    /// TLS listeners (HTTP/2 by ALPN, else HTTP/1.1).
    pub tls: Vec<TlsListen>,
    /// Listeners that only redirect to `https://` (301, same host and path).
    pub redirect: Vec<SocketAddr>,
    /// `Strict-Transport-Security` value sent on TLS responses (`None`: not sent).
    pub hsts: Option<String>,
    /// Worker threads (`None`: one per core).
    pub workers: Option<usize>,
    /// Pid file to write at startup and remove at exit.
    pub pid_file: Option<PathBuf>,
    /// Engine settings (timeouts, limits).
    pub settings: Settings,
    /// File cache settings.
    pub cache: CacheConfig,
    /// Access log.
    pub log: LogConfig,
    /// Virtual hosts.
    pub vhosts: Vec<VhostConfig>,
}

impl Config {
    /// The configuration of `selvedge serve DIR`: one listener, one default host serving
    /// `root` at `/`.
    pub fn simple(root: PathBuf, addr: SocketAddr, workers: Option<usize>) -> Config {
        Config {
            file: None,
            listen: vec![addr],
            tls: Vec::new(),
            redirect: Vec::new(),
            hsts: None,
            workers,
            pid_file: None,
            settings: Settings::default(),
            cache: CacheConfig::default(),
            log: LogConfig::default(),
            vhosts: vec![VhostConfig {
                hosts: Vec::new(),
                routes: vec![RouteConfig {
                    prefix: "/".into(),
                    kind: RouteKind::Static { root, opts: StaticOptions::default() },
                }],
                tls: None,
            }],
        }
    }

    /// Reads and checks `file`.
    ///
    /// # Errors
    /// The file cannot be read, is not valid TOML, or has an invalid value.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_path_buf(),
            line: 0,
            col: 0,
            reason: format!("cannot read: {e}"),
        })?;
        Config::parse(file, &text)
    }

    /// Parses `text` as if read from `file`.
    ///
    /// # Errors
    /// Invalid TOML, unknown keys, wrong types, invalid values.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let err = |span: Option<std::ops::Range<usize>>, reason: String| {
            let (line, col) = span.map_or((0, 0), |s| line_col(text, s.start));
            ConfigError { file: file.to_path_buf(), line, col, reason }
        };
        let raw: Raw = toml::from_str(text).map_err(|e| err(e.span(), e.message().trim().to_string()))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let abs = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };

        let mut settings = Settings::default();
        let t = &raw.timeouts;
        let secs = |v: Option<f64>, d: &mut Duration| {
            if let Some(v) = v.filter(|v| v.is_finite() && *v > 0.0) {
                *d = Duration::from_secs_f64(v);
            }
        };
        secs(t.header, &mut settings.header_timeout);
        secs(t.idle, &mut settings.idle_timeout);
        secs(t.body, &mut settings.body_timeout);
        secs(t.send, &mut settings.send_timeout);
        secs(t.graceful, &mut settings.graceful_timeout);
        let l = &raw.limits;
        if let Some(v) = l.max_connections {
            settings.max_connections = v;
        }
        if let Some(v) = l.max_body {
            settings.body.max_body = v;
        }
        if let Some(v) = l.max_head {
            settings.limits.max_head = v;
        }
        if let Some(v) = l.max_headers {
            settings.limits.max_headers = v;
        }
        if let Some(v) = l.max_target {
            settings.limits.max_target = v;
        }
        if let Some(v) = l.notsent_lowat {
            settings.notsent_lowat = (v > 0).then_some(v);
        }
        let workers = match raw.server.workers {
            Some(w) if *w.get_ref() == 0 => return Err(err(Some(w.span()), "workers must be at least 1".into())),
            w => w.map(Spanned::into_inner),
        };
        if let Some(n) = workers {
            settings.workers = Workers::PerCore(n);
        }

        let mut listen = Vec::new();
        let mut tls = Vec::new();
        let mut redirect = Vec::new();
        for l in &raw.listen {
            let host: IpAddr = match &l.get_ref().host {
                None => IpAddr::from([127, 0, 0, 1]),
                Some(h) => h.get_ref().parse().map_err(|e| err(Some(h.span()), format!("host: {e}")))?,
            };
            let addr = SocketAddr::new(host, l.get_ref().port);
            match (&l.get_ref().tls, l.get_ref().redirect_https) {
                (Some(_), Some(true)) => {
                    return Err(err(Some(l.span()), "a listener is either tls or redirect_https".into()))
                }
                (Some(t), _) => {
                    let (cert, key) = (abs(t.cert.get_ref()), abs(t.key.get_ref()));
                    for (f, sp) in [(&cert, t.cert.span()), (&key, t.key.span())] {
                        if let Err(e) = std::fs::metadata(f) {
                            return Err(err(Some(sp), format!("{}: {e}", f.display())));
                        }
                    }
                    if let Err(e) = selvedge::tls::CertKey::from_pem_files(vec![], &cert, &key) {
                        return Err(err(Some(t.cert.span()), format!("tls: {e}")));
                    }
                    tls.push(TlsListen { addr, cert, key, strict_sni: t.strict_sni.unwrap_or(false) });
                }
                (None, Some(true)) => redirect.push(addr),
                (None, _) => listen.push(addr),
            }
        }
        if listen.is_empty() && tls.is_empty() && redirect.is_empty() {
            listen.push(SocketAddr::from(([127, 0, 0, 1], 8080)));
        }

        let fc = &raw.file_cache;
        let mut cache = CacheConfig::default();
        cache.enabled = fc.enabled.unwrap_or(cache.enabled);
        if let Some(ms) = &fc.sweep_ms {
            if *ms.get_ref() == 0 {
                return Err(err(Some(ms.span()), "sweep_ms must be at least 1".into()));
            }
            cache.sweep = Duration::from_millis(*ms.get_ref());
        }
        cache.max_entries = fc.max_entries.unwrap_or(cache.max_entries);
        cache.memory_max = fc.memory_max.unwrap_or(cache.memory_max);

        let mut log = LogConfig::default();
        if let Some(a) = &raw.log.access {
            log.target = match a.as_str() {
                "off" | "" => LogTarget::Off,
                "stdout" | "-" => LogTarget::Stdout,
                p => LogTarget::File(abs(p)),
            };
        }
        log.size = raw.log.size.unwrap_or(log.size);
        log.backups = raw.log.backups.unwrap_or(log.backups);

        let mut vhosts = Vec::new();
        let mut seen_default = false;
        for v in raw.vhost {
            let v = v.into_inner();
            if v.hosts.is_empty() {
                if seen_default {
                    return Err(err(None, "more than one [[vhost]] without hosts (the default host)".into()));
                }
                seen_default = true;
            }
            let mut routes = Vec::new();
            for r in v.route {
                let span = r.span();
                let r = r.into_inner();
                if !r.path.starts_with('/') {
                    return Err(err(Some(span), format!("route path {:?} must start with '/'", r.path)));
                }
                let kind = match (r.root, r.cgi, r.proxy) {
                    (Some(root), None, None) => {
                        let root_span = root.span();
                        let root = abs(root.get_ref());
                        if !root.is_dir() {
                            return Err(err(Some(root_span), format!("root {} is not a directory", root.display())));
                        }

                        let mut opts = StaticOptions::default();
                        if let Some(i) = r.index {
                            opts.index = i;
                        }
                        opts.dotfiles = r.dotfiles.unwrap_or(opts.dotfiles);
                        opts.symlinks_outside = r.symlinks_outside.unwrap_or(opts.symlinks_outside);
                        opts.precompressed = r.precompressed.unwrap_or(opts.precompressed);
                        opts.max_age = r.max_age.or(raw.cache.max_age);
                        for (code, page) in r.error_pages.unwrap_or_default() {
                            let n: u16 = match code.parse() {
                                Ok(n) if (400..600).contains(&n) => n,
                                _ => {
                                    return Err(err(
                                        Some(span.clone()),
                                        format!("error page status {code:?} is not 400..599"),
                                    ))
                                }
                            };
                            opts.error_pages.insert(n, abs(&page));
                        }
                        RouteKind::Static { root, opts }
                    }
                    (None, Some(c), None) => RouteKind::Cgi(
                        crate::cgi::CgiConfig::from_raw(c.get_ref(), &abs).map_err(|e| err(Some(c.span()), e))?,
                    ),
                    (None, None, Some(p)) => RouteKind::Proxy(
                        crate::proxy::ProxyConfig::from_raw(p.get_ref()).map_err(|e| err(Some(p.span()), e))?,
                    ),
                    _ => {
                        return Err(err(Some(span), "a route needs exactly one of `root`, `cgi` or `proxy`".into()));
                    }
                };
                routes.push(RouteConfig { prefix: r.path, kind });
            }
            let hosts: Vec<String> = v.hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
            let tls = match &v.tls {
                None => None,
                Some(t) => {
                    let (cert, key) = (abs(t.cert.get_ref()), abs(t.key.get_ref()));
                    if hosts.is_empty() {
                        return Err(err(
                            Some(t.cert.span()),
                            "a [[vhost]] with tls needs `hosts` (its SNI names)".into(),
                        ));
                    }
                    if let Err(e) = selvedge::tls::CertKey::from_pem_files(hosts.clone(), &cert, &key) {
                        return Err(err(Some(t.cert.span()), format!("tls: {e}")));
                    }
                    Some((cert, key))
                }
            };
            vhosts.push(VhostConfig { hosts, routes, tls });
        }
        if vhosts.is_empty() {
            return Err(err(Some(0..0), "no [[vhost]]: nothing to serve".into()));
        }
        Ok(Config {
            file: Some(file.to_path_buf()),
            listen,
            tls,
            redirect,
            hsts: raw.server.hsts.clone(),
            workers,
            pid_file: raw.server.pid_file.as_deref().map(abs),
            settings,
            cache,
            log,
            vhosts,
        })
    }

    /// Number of worker threads this configuration runs.
    pub fn worker_count(&self) -> usize {
        match self.settings.workers {
            Workers::PerCore(n) | Workers::MultiThread(n) => n,
        }
    }
}

/// 1-based line and column of byte `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let col = at - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    listen: Vec<Spanned<RawListen>>,
    #[serde(default)]
    timeouts: RawTimeouts,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    file_cache: RawFileCache,
    #[serde(default)]
    cache: RawCache,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    vhost: Vec<Spanned<RawVhost>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    workers: Option<Spanned<usize>>,
    pid_file: Option<String>,
    hsts: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListen {
    host: Option<Spanned<String>>,
    port: u16,
    tls: Option<RawTls>,
    redirect_https: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Spanned<String>,
    key: Spanned<String>,
    strict_sni: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    header: Option<f64>,
    idle: Option<f64>,
    body: Option<f64>,
    send: Option<f64>,
    graceful: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_connections: Option<usize>,
    max_body: Option<u64>,
    max_head: Option<usize>,
    max_headers: Option<usize>,
    max_target: Option<usize>,
    notsent_lowat: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFileCache {
    enabled: Option<bool>,
    sweep_ms: Option<Spanned<u64>>,
    max_entries: Option<usize>,
    memory_max: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCache {
    max_age: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    access: Option<String>,
    size: Option<u64>,
    backups: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVhost {
    #[serde(default)]
    hosts: Vec<String>,
    tls: Option<RawTls>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    path: String,
    root: Option<Spanned<String>>,
    cgi: Option<Spanned<crate::cgi::RawCgi>>,
    proxy: Option<Spanned<crate::proxy::RawProxy>>,
    index: Option<Vec<String>>,
    dotfiles: Option<bool>,
    symlinks_outside: Option<bool>,
    precompressed: Option<bool>,
    max_age: Option<u64>,
    error_pages: Option<HashMap<String, String>>,
}

/// The config fuzz target's entry point (also replayed over the committed corpus by the
/// tests): any bytes, as a config file, must give a `Config` or a positioned error, never
/// a panic.
pub fn fuzz(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Config::parse(Path::new("/nonexistent/fuzz.toml"), &text) {
        Ok(c) => {
            let _ = c.vhosts.len();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("/tmp/t.toml"), text)
    }

    #[test]
    fn minimal_and_full() {
        let c = parse("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n").unwrap();
        assert_eq!(c.listen, vec![SocketAddr::from(([127, 0, 0, 1], 8080))]);
        assert!(matches!(&c.vhosts[0].routes[0].kind, RouteKind::Static { root, .. } if root == Path::new("/tmp")));
        let c = parse(
            "[server]\nworkers = 3\npid_file = \"run/x.pid\"\n[[listen]]\nhost = \"0.0.0.0\"\nport = 9000\n\
             [timeouts]\nidle = 5\n[file_cache]\nsweep_ms = 200\nmemory_max = 0\n[log]\naccess = \"logs/a.log\"\n\
             size = 1000\nbackups = 2\n[[vhost]]\nhosts = [\"Example.com\"]\n[[vhost.route]]\npath = \"/s\"\n\
             root = \"/tmp\"\nmax_age = 60\nerror_pages = { 404 = \"/tmp/404.html\" }\n",
        )
        .unwrap();
        assert_eq!(c.workers, Some(3));
        assert_eq!(c.pid_file, Some(PathBuf::from("/tmp/run/x.pid")));
        assert_eq!(c.listen[0].port(), 9000);
        assert_eq!(c.settings.idle_timeout, Duration::from_secs(5));
        assert_eq!(c.settings.notsent_lowat, Some(128 * 1024));
        assert_eq!(c.cache.sweep, Duration::from_millis(200));
        assert_eq!(c.log.target, LogTarget::File(PathBuf::from("/tmp/logs/a.log")));
        assert_eq!(c.vhosts[0].hosts, vec!["example.com".to_string()]);
        assert_eq!(c.vhosts[0].routes[0].static_opts().unwrap().max_age, Some(60));
        assert!(c.vhosts[0].routes[0].static_opts().unwrap().error_pages.contains_key(&404));
        let off =
            parse("[limits]\nnotsent_lowat = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n").unwrap();
        assert_eq!(off.settings.notsent_lowat, None);
    }

    #[test]
    fn errors_have_positions() {
        let e = parse("[server]\nworkerz = 2\n").unwrap_err();
        assert_eq!((e.line, e.reason.contains("workerz")), (2, true), "{e}");
        let e = parse("[server]\nworkers = \"two\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = parse("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/definitely/not/here\"\n").unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.to_string().starts_with("/tmp/t.toml:4:"), "{e}");
        let e = parse("[[listen]]\nhost = \"nope\"\nport = 1\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = parse("this is not toml").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        assert!(parse("").is_err());
    }
}
