//! The configuration file (TOML). `docs/config.md` describes every key; `examples/selvedge.toml`
//! is a commented example.
//!
//! Unknown keys, wrong types and invalid values are errors reported as
//! `FILE:LINE:COLUMN: reason`; relative paths are taken from the config file's directory.
//! Durations and sizes use the types of [`units`] (`"30s"`, `"10MiB"`...), which refuse
//! out-of-range values with the value's position.

pub mod units;

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use selvedge::file::CacheConfig;
use selvedge::{Listen, Settings, Workers};
use serde::Deserialize;
use toml::Spanned;

use self::units::{Count, Dur, NonZeroDur, Size};
use crate::client::TrustedProxies;
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
    /// `FILE:LINE:COLUMN: reason`, or `FILE: reason` for an error of the whole file (it
    /// cannot be read).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.reason),
            _ => write!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.col, self.reason),
        }
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
    /// Address to listen on (TCP, or a Unix socket).
    pub addr: Listen,
    /// PEM certificate chain of the default certificate (`None` with `key`: no default,
    /// only the virtual hosts' certificates, chosen by SNI).
    pub cert: Option<PathBuf>,
    /// PEM private key of the default certificate.
    pub key: Option<PathBuf>,
    /// Refuse handshakes naming an unknown host (an `unrecognized_name` alert) instead of
    /// answering with the default certificate.
    pub strict_sni: bool,
    /// Also serve HTTP/3 over QUIC on this address's UDP port (`quic = true`).
    pub quic: bool,
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
    /// The line format: `combined` (default), `json` or a `$name` template.
    pub format: crate::access_log::format::Format,
    /// Keep a client's `X-Request-Id` (when well formed) instead of generating one: off.
    pub trust_request_id: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            target: LogTarget::Off,
            size: 10 << 20,
            backups: 5,
            format: crate::access_log::format::Format::Combined,
            trust_request_id: false,
        }
    }
}

/// Where diagnostics (startup, reload, warnings, errors) go: `[log] error`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ErrorTarget {
    /// Standard error (the default; journald takes it under systemd).
    #[default]
    Stderr,
    /// A file, appended to and reopened on SIGHUP/SIGUSR1.
    File(PathBuf),
}

/// How diagnostics are written: `[log] error_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorFormat {
    /// One human-readable line per event: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Diagnostics settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorLogConfig {
    /// Where events go.
    pub target: ErrorTarget,
    /// Their format.
    pub format: ErrorFormat,
    /// The level or filter (`"info"`, `"debug"`, `"selvedge=debug,warn"`); `None`: `info`,
    /// unless `RUST_LOG` or `--log-level` say otherwise.
    pub level: Option<String>,
}

/// The admin listener (`[admin]`): `/metrics`, `/healthz`, `/readyz`, `/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where it listens: a loopback address or a Unix socket, unless `public`.
    pub listen: Listen,
    /// Allow a non-loopback address (anyone who reaches it sees the metrics and status).
    pub public: bool,
}

/// One route: requests whose path starts with `prefix` are served by `kind`.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Path prefix (starts with `/`).
    pub prefix: String,
    /// What serves it.
    pub kind: RouteKind,
    /// Checks and fields around it (`allow`, `rate`, `auth`, `headers`...).
    pub policy: crate::policy::PolicyConfig,
    /// Compress its responses on the fly (`compress`, on by default).
    pub compress: bool,
}

/// What serves a route: exactly one of `root`, `cgi`, `fastcgi` or `proxy` in the file.
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
    Proxy(Box<crate::proxy::ProxyConfig>),
    /// A FastCGI application (php-fpm...).
    Fastcgi(crate::fastcgi::FastcgiConfig),
}

impl RouteConfig {
    /// The directory it serves from, if it has one (static, CGI, FastCGI).
    pub fn root(&self) -> Option<&Path> {
        match &self.kind {
            RouteKind::Static { root, .. } => Some(root),
            RouteKind::Cgi(c) => Some(&c.dir),
            RouteKind::Fastcgi(f) => Some(&f.root),
            RouteKind::Proxy(_) => None,
        }
    }

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
    /// `tls = "acme"`: this host's certificate is obtained and renewed by ACME.
    pub acme: bool,
    /// `[[vhost.redirect]]` rules, in order.
    pub redirects: Vec<crate::redirect::Rule>,
}

/// A whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (`None`: built from the command line).
    pub file: Option<PathBuf>,
    /// Addresses to listen on (cleartext HTTP/1.1 and h2c): TCP or Unix sockets.
    pub listen: Vec<Listen>,
    /// TLS listeners (HTTP/2 by ALPN, else HTTP/1.1).
    pub tls: Vec<TlsListen>,
    /// Listeners that only redirect to `https://` (301, same host and path).
    pub redirect: Vec<Listen>,
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
    /// Diagnostics (the error log).
    pub error_log: ErrorLogConfig,
    /// User to run as after binding the listeners (`None`: stay who started the server).
    pub user: Option<String>,
    /// Group to run as (`None` with a `user`: that user's primary group).
    pub group: Option<String>,
    /// Peers whose `X-Forwarded-For`/`Forwarded` name the client (`[server]
    /// trusted_proxies`): none.
    pub trusted_proxies: TrustedProxies,
    /// Listeners that read a PROXY protocol header first (`[[listen]] proxy_protocol`):
    /// their addresses, as in `listen` and `tls`, and the networks whose header is believed
    /// (`proxy_protocol_from`).
    pub proxy_protocol: Vec<(Listen, Vec<ipnet::IpNet>)>,
    /// Listeners that may share their address with other processes (`[[listen]]
    /// reuse_port`); the others refuse an address another process listens on.
    pub shared: Vec<Listen>,
    /// Virtual hosts.
    pub vhosts: Vec<VhostConfig>,
    /// Automatic HTTPS settings (`[acme]`, or its defaults when a host says `tls = "acme"`).
    pub acme: Option<crate::acme::config::AcmeConfig>,
    /// On-the-fly compression settings (`[compress]`).
    pub compress: crate::compression::CompressConfig,
    /// The admin listener, if any (metrics are collected only with one).
    pub admin: Option<AdminConfig>,
    /// `[mime]`: types by extension, before the built-in ones.
    pub mime: std::collections::BTreeMap<String, String>,
    /// `[server] release_startup_code`: after start and each reload, let go of the code
    /// pages only start-up used (`selvedge::server::release_code_pages`): true.
    pub release_startup_code: bool,
}

impl Config {
    /// The configuration of `selvedge serve DIR`: one listener, one default host serving
    /// `root` at `/`.
    pub fn simple(root: PathBuf, addr: SocketAddr, workers: Option<usize>) -> Config {
        Config {
            file: None,
            listen: vec![Listen::Tcp(addr)],
            tls: Vec::new(),
            redirect: Vec::new(),
            hsts: None,
            workers,
            pid_file: None,
            settings: Settings::default(),
            cache: CacheConfig::default(),
            log: LogConfig::default(),
            error_log: ErrorLogConfig::default(),
            user: None,
            group: None,
            trusted_proxies: TrustedProxies::default(),
            proxy_protocol: Vec::new(),
            shared: Vec::new(),
            vhosts: vec![VhostConfig {
                hosts: Vec::new(),
                routes: vec![RouteConfig {
                    prefix: "/".into(),
                    // Like miniserve and `python3 -m http.server`: directories are listed.
                    kind: RouteKind::Static { root, opts: StaticOptions { listing: true, ..StaticOptions::default() } },
                    policy: Default::default(),
                    compress: true,
                }],
                tls: None,
                acme: false,
                redirects: Vec::new(),
            }],
            acme: None,
            compress: Default::default(),
            admin: None,
            mime: Default::default(),
            release_startup_code: true,
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
        let text = &substitute(text, &|name| std::env::var(name).ok()).map_err(|(at, reason)| {
            let (line, col) = line_col(text, at);
            ConfigError { file: file.to_path_buf(), line, col, reason }
        })?;
        let err = |span: Option<std::ops::Range<usize>>, reason: String| {
            let (line, col) = span.map_or((0, 0), |s| line_col(text, s.start));
            ConfigError { file: file.to_path_buf(), line, col, reason }
        };
        let raw: Raw = toml::from_str(text).map_err(|e| err(e.span(), e.message().trim().to_string()))?;
        // A bare file name's directory is the current one (`Path::parent` gives "").
        let base = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let abs = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };

        let mut settings = Settings::default();
        raw.timeouts.apply(&mut settings);
        raw.limits.apply(&mut settings);
        raw.http2.apply(&mut settings.h2);
        #[cfg(feature = "http3")]
        raw.http3.apply(&mut settings.h3);
        #[cfg(not(feature = "http3"))]
        let _ = &raw.http3;
        if !raw.server.server_tokens.unwrap_or(true) {
            settings.server_name = None;
        }
        settings.backlog = raw.server.backlog.map_or(settings.backlog, |b| b.get() as i32);
        settings.max_connections_per_ip = raw.server.max_connections_per_ip.map(Count::get_usize);
        let workers = raw.server.workers.map(Count::get_usize);
        if let Some(n) = workers {
            settings.workers = Workers::PerCore(n);
        }

        let mut listen = Vec::new();
        let mut tls = Vec::new();
        let mut redirect = Vec::new();
        let mut proxy_protocol = Vec::new();
        let mut shared = Vec::new();
        for l in &raw.listen {
            let r = l.get_ref();
            let addr = match (&r.address, &r.host, r.port) {
                (Some(a), None, None) => parse_listen(a.get_ref(), &abs).map_err(|e| err(Some(a.span()), e))?,
                (Some(a), _, _) => {
                    return Err(err(Some(a.span()), "a listener has `address` or `host`/`port`, not both".into()))
                }
                (None, host, Some(port)) => {
                    let host: IpAddr = match host {
                        None => IpAddr::from([127, 0, 0, 1]),
                        Some(h) => h.get_ref().parse().map_err(|e| err(Some(h.span()), format!("host: {e}")))?,
                    };
                    Listen::Tcp(SocketAddr::new(host, port))
                }
                (None, _, None) => {
                    return Err(err(
                        Some(l.span()),
                        "a listener needs `address` (\"[::]:443\", \"unix:/run/selvedge.sock\") or `port`".into(),
                    ))
                }
            };
            if l.get_ref().reuse_port.unwrap_or(false) {
                shared.push(addr.clone());
            }
            match (l.get_ref().proxy_protocol.unwrap_or(false), &l.get_ref().proxy_protocol_from) {
                (true, Some(from)) => {
                    let mut nets = Vec::new();
                    for n in from.get_ref() {
                        nets.push(
                            crate::policy::ip::parse_net(n)
                                .map_err(|e| err(Some(from.span()), format!("proxy_protocol_from: {e}")))?,
                        );
                    }
                    proxy_protocol.push((addr.clone(), nets));
                }
                (true, None) => {
                    return Err(err(
                        Some(l.span()),
                        "proxy_protocol = true needs proxy_protocol_from: the networks of the balancers whose \
                         PROXY header names the client ([\"10.0.0.0/8\"]; [\"0.0.0.0/0\", \"::/0\"] believes any peer)"
                            .into(),
                    ))
                }
                (false, Some(from)) => {
                    return Err(err(Some(from.span()), "proxy_protocol_from needs proxy_protocol = true".into()))
                }
                (false, None) => {}
            }
            match (&l.get_ref().tls, l.get_ref().redirect_https) {
                (Some(_), Some(true)) => {
                    return Err(err(Some(l.span()), "a listener is either tls or redirect_https".into()))
                }
                (Some(t), _) => {
                    let (cert, key) = match (&t.cert, &t.key) {
                        (Some(c), Some(k)) => {
                            let (cert, key) = (abs(c.get_ref()), abs(k.get_ref()));
                            for (f, sp) in [(&cert, c.span()), (&key, k.span())] {
                                if let Err(e) = std::fs::metadata(f) {
                                    return Err(err(Some(sp), format!("{}: {e}", f.display())));
                                }
                            }
                            if let Err(e) = selvedge::tls::CertKey::from_pem_files(vec![], &cert, &key) {
                                return Err(err(Some(c.span()), format!("tls: {e}")));
                            }
                            (Some(cert), Some(key))
                        }
                        (None, None) => (None, None),
                        _ => return Err(err(Some(l.span()), "tls: `cert` and `key` go together".into())),
                    };
                    let quic = l.get_ref().quic.unwrap_or(false);
                    if quic && (cfg!(not(feature = "http3")) || !matches!(addr, Listen::Tcp(_))) {
                        let why = if cfg!(feature = "http3") {
                            "quic needs a TCP address (HTTP/3 takes the same port over UDP)"
                        } else {
                            "quic: this selvedge was built without the http3 feature"
                        };
                        return Err(err(Some(l.span()), why.into()));
                    }
                    tls.push(TlsListen { addr, cert, key, strict_sni: t.strict_sni.unwrap_or(false), quic });
                }
                (None, _) if l.get_ref().quic == Some(true) => {
                    return Err(err(Some(l.span()), "quic = true needs tls (HTTP/3 is always encrypted)".into()))
                }
                (None, Some(true)) => redirect.push(addr),
                (None, _) => listen.push(addr),
            }
        }
        if listen.is_empty() && tls.is_empty() && redirect.is_empty() {
            listen.push(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 8080))));
        }

        let fc = &raw.file_cache;
        let mut cache = CacheConfig::default();
        cache.enabled = fc.enabled.unwrap_or(cache.enabled);
        match (fc.sweep, &fc.sweep_ms) {
            (Some(_), Some(ms)) => return Err(err(Some(ms.span()), "set `sweep` or `sweep_ms`, not both".into())),
            (Some(d), None) => cache.sweep = d.get(),
            (None, Some(ms)) => cache.sweep = Duration::from_millis(ms.get_ref().get()),
            (None, None) => {}
        }
        cache.max_entries = fc.max_entries.map_or(cache.max_entries, Count::get_usize);
        cache.memory_max = fc.memory_max.map_or(cache.memory_max, Size::get);

        let mut log = LogConfig::default();
        if let Some(a) = &raw.log.access {
            log.target = match a.as_str() {
                "off" | "" => LogTarget::Off,
                "stdout" | "-" => LogTarget::Stdout,
                p => LogTarget::File(abs(p)),
            };
        }
        let mut error_log = ErrorLogConfig::default();
        match raw.log.error.as_deref() {
            None | Some("stderr" | "-" | "") => {}
            Some(p) => error_log.target = ErrorTarget::File(abs(p)),
        }
        error_log.format = match &raw.log.error_format {
            None => ErrorFormat::Text,
            Some(f) if f.get_ref() == "text" => ErrorFormat::Text,
            Some(f) if f.get_ref() == "json" => ErrorFormat::Json,
            Some(f) => {
                return Err(err(Some(f.span()), format!("error_format {:?}: \"text\" or \"json\"", f.get_ref())))
            }
        };
        if let Some(l) = &raw.log.level {
            if let Err(e) = tracing_subscriber::EnvFilter::try_new(l.get_ref()) {
                return Err(err(Some(l.span()), format!("level {:?}: {e}", l.get_ref())));
            }
            error_log.level = Some(l.get_ref().clone());
        }
        log.size = raw.log.size.map_or(log.size, Size::get);
        log.backups = raw.log.backups.map_or(log.backups, Count::get_u32);
        if let Some(f) = &raw.log.format {
            log.format = crate::access_log::format::Format::parse(f.get_ref()).map_err(|e| err(Some(f.span()), e))?;
        }
        log.trust_request_id = match raw.log.request_id.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
            None | Some(("generate", _)) => false,
            Some(("trust", _)) => true,
            Some((other, sp)) => {
                return Err(err(Some(sp), format!("request_id {other:?}: \"generate\" or \"trust\"")));
            }
        };

        let mut trusted_proxies = match &raw.server.trusted_proxies {
            None => TrustedProxies::default(),
            Some(t) => TrustedProxies::parse(t.get_ref()).map_err(|e| err(Some(t.span()), e))?,
        };
        if let Some(h) = &raw.server.client_ip_header {
            trusted_proxies.header =
                crate::client::ClientIpHeader::parse(h.get_ref()).map_err(|e| err(Some(h.span()), e))?;
        }
        let mut proxy_ctx = crate::proxy::ProxyContext::default();
        if let Some(r) = &raw.server.resolver {
            let mut servers = Vec::new();
            for s in r.get_ref() {
                let a = s
                    .parse::<SocketAddr>()
                    .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                    .map_err(|_| err(Some(r.span()), format!("resolver {s:?}: an IP address, with a port or not")))?;
                servers.push(a);
            }
            if !servers.is_empty() {
                proxy_ctx.resolver = crate::upstream::Resolver::Servers(servers);
            }
        }

        let mut vhosts = Vec::new();
        let mut seen_default = false;
        for v in raw.vhost {
            let v_span = v.span();
            let v = v.into_inner();
            if v.hosts.is_empty() {
                if seen_default {
                    return Err(err(
                        Some(v_span.clone()),
                        "a second [[vhost]] without hosts: there is one default host (give this one `hosts`)".into(),
                    ));
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
                let prefix = route_prefix(&r.path).map_err(|e| err(Some(span.clone()), e))?;
                let policy = route_policy(&r, &abs).map_err(|(sp, e)| err(Some(sp.unwrap_or(span.clone())), e))?;
                let compress = r.compress.unwrap_or(true);
                let static_only = [
                    ("listing", r.listing.is_some()),
                    ("listing_max", r.listing_max.is_some()),
                    ("fallback", r.fallback.is_some()),
                ];
                if r.root.is_none() {
                    if let Some((key, _)) = static_only.iter().find(|(_, set)| *set) {
                        return Err(err(Some(span), format!("`{key}` applies to static routes (`root`)")));
                    }
                }
                let kind = match (r.root, r.cgi, r.proxy, r.fastcgi) {
                    (Some(root), None, None, None) => {
                        let root_span = root.span();
                        let root = abs(root.get_ref());
                        if !root.is_dir() {
                            return Err(err(Some(root_span), format!("root {} is not a directory", root.display())));
                        }

                        let mut opts = StaticOptions::default();
                        if let Some(i) = r.index {
                            let plain = |n: &String| !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\0']);
                            if let Some(bad) = i.iter().find(|n| !plain(n)) {
                                return Err(err(None, format!("index {bad:?}: a file name, without '/'")));
                            }
                            opts.index = i;
                        }
                        opts.dotfiles = r.dotfiles.unwrap_or(opts.dotfiles);
                        opts.symlinks_outside = r.symlinks_outside.unwrap_or(opts.symlinks_outside);
                        opts.precompressed = r.precompressed.unwrap_or(opts.precompressed);
                        opts.max_age = r.max_age.or(raw.cache.max_age).map(|d| d.get().as_secs());
                        opts.listing = r.listing.unwrap_or(false);
                        opts.listing_max = r.listing_max.map_or(opts.listing_max, Count::get_usize);
                        opts.compress = compress;
                        opts.fields = crate::policy::Policy::fixed_fields(&policy);
                        if let Some(f) = &r.fallback {
                            let rel = f.get_ref().trim_start_matches('/');
                            let bad = !f.get_ref().starts_with('/')
                                || rel.is_empty()
                                || rel.split('/').any(|s| s.is_empty() || s == "." || s == "..")
                                || rel.contains(['\\', '\0']);
                            if bad {
                                return Err(err(
                                    Some(f.span()),
                                    format!("fallback {:?}: a file under the root (\"/index.html\")", f.get_ref()),
                                ));
                            }
                            opts.fallback = Some(f.get_ref().clone());
                        }
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
                    (None, Some(c), None, None) => RouteKind::Cgi(
                        crate::cgi::CgiConfig::from_raw(c.get_ref(), &abs).map_err(|e| err(Some(c.span()), e))?,
                    ),
                    (None, None, Some(p), None) => RouteKind::Proxy(Box::new(
                        crate::proxy::ProxyConfig::from_raw(p.get_ref(), &proxy_ctx)
                            .map_err(|e| err(Some(p.span()), e))?,
                    )),
                    (None, None, None, Some(f)) => RouteKind::Fastcgi(
                        crate::fastcgi::FastcgiConfig::from_raw(f.get_ref(), &abs)
                            .map_err(|e| err(Some(f.span()), e))?,
                    ),
                    _ => {
                        return Err(err(
                            Some(span),
                            "a route needs exactly one of `root`, `cgi`, `fastcgi` or `proxy`".into(),
                        ));
                    }
                };
                routes.push(RouteConfig { prefix, kind, policy, compress });
            }
            // A route that forwards `%2F` must have no route under it: `/api/internal%2Fx`
            // would reach `/api/internal/x` upstream past that route's checks.
            for r in &routes {
                let RouteKind::Proxy(p) = &r.kind else { continue };
                if !p.keep_encoded_slashes {
                    continue;
                }
                let under = |o: &&RouteConfig| {
                    o.prefix.len() > r.prefix.len()
                        && o.prefix.starts_with(&r.prefix)
                        && (r.prefix == "/" || o.prefix.as_bytes()[r.prefix.len()] == b'/')
                };
                if let Some(o) = routes.iter().find(under) {
                    return Err(err(
                        Some(v_span.clone()),
                        format!(
                            "route {}: encoded_slashes = \"keep\" with route {} under it, whose checks a path \
                             with %2F would pass by upstream",
                            r.prefix, o.prefix
                        ),
                    ));
                }
            }
            let mut hosts = Vec::new();
            for h in &v.hosts {
                hosts.push(check_host(h.get_ref()).map_err(|e| err(Some(h.span()), e))?);
            }
            let mut acme = false;
            let tls = match &v.tls {
                None => None,
                Some(t) if t.get_ref().as_str() == Some("acme") => {
                    if hosts.is_empty() {
                        return Err(err(Some(t.span()), "a [[vhost]] with tls = \"acme\" needs `hosts`".into()));
                    }
                    for h in &hosts {
                        crate::acme::config::check_host(h)
                            .map_err(|e| err(Some(t.span()), format!("tls = \"acme\": {e}")))?;
                    }
                    acme = true;
                    None
                }
                Some(t) if t.get_ref().is_str() => {
                    return Err(err(Some(t.span()), "tls: \"acme\" or { cert = ..., key = ... }".into()));
                }
                Some(tv) => {
                    let t = RawVhostTls::deserialize(tv.get_ref().clone())
                        .map_err(|e| err(Some(tv.span()), format!("tls: {}", e.message())))?;
                    let (cert, key) = (abs(&t.cert), abs(&t.key));
                    if hosts.is_empty() {
                        return Err(err(Some(tv.span()), "a [[vhost]] with tls needs `hosts` (its SNI names)".into()));
                    }
                    if let Err(e) = selvedge::tls::CertKey::from_pem_files(hosts.clone(), &cert, &key) {
                        return Err(err(Some(tv.span()), format!("tls: {e}")));
                    }
                    Some((cert, key))
                }
            };
            let mut redirects = Vec::new();
            for rd in &v.redirect {
                redirects.push(
                    crate::redirect::Rule::from_raw(rd.get_ref()).map_err(|(sp, e)| err(sp.or(Some(rd.span())), e))?,
                );
            }
            vhosts.push(VhostConfig { hosts, routes, tls, acme, redirects });
        }
        if vhosts.is_empty() {
            return Err(err(Some(0..0), "no [[vhost]]: nothing to serve".into()));
        }
        let acme_hosts = vhosts.iter().any(|v| v.acme);
        let acme = match &raw.acme {
            Some(a) => Some(
                crate::acme::config::AcmeConfig::from_raw(a.get_ref(), &abs)
                    .map_err(|(sp, e)| err(sp.or(Some(a.span())), e))?,
            ),
            None if acme_hosts => Some(
                crate::acme::config::AcmeConfig::from_raw(&Default::default(), &abs).map_err(|(sp, e)| err(sp, e))?,
            ),
            None => None,
        };
        if let Some(a) = acme.as_ref().filter(|_| acme_hosts) {
            let at = raw.acme.as_ref().map(Spanned::span);
            if tls.is_empty() {
                return Err(err(
                    at,
                    "tls = \"acme\" needs a TLS listener ([[listen]] with tls) to serve the certificates".into(),
                ));
            }
            if a.challenge == crate::acme::config::ChallengeKind::Http01 && listen.is_empty() && redirect.is_empty() {
                return Err(err(at, "the http-01 challenge needs a cleartext listener (port 80)".into()));
            }
        }
        let admin = match &raw.admin {
            None => None,
            Some(a) => {
                let public = a.get_ref().public.unwrap_or(false);
                let l = &a.get_ref().listen;
                let listen = parse_listen(l.get_ref(), &abs).map_err(|e| err(Some(l.span()), e))?;
                if let Listen::Tcp(addr) = &listen {
                    if !addr.ip().is_loopback() && !public {
                        return Err(err(
                            Some(l.span()),
                            format!(
                                "[admin] listen {addr} is not a loopback address: metrics and status would be \
                                 open to the network; set `public = true` to mean it (and firewall it)"
                            ),
                        ));
                    }
                }
                Some(AdminConfig { listen, public })
            }
        };
        let mut mime = std::collections::BTreeMap::new();
        if let Some(m) = &raw.mime {
            for (ext, ty) in m.get_ref() {
                crate::mime::check_override(ext, ty).map_err(|e| err(Some(m.span()), e))?;
                mime.insert(ext.to_ascii_lowercase(), ty.clone());
            }
        }
        Ok(Config {
            admin,
            mime,
            file: Some(file.to_path_buf()),
            listen,
            tls,
            redirect,
            hsts: raw.server.hsts.clone(),
            workers,
            pid_file: raw.server.pid_file.as_deref().map(abs),
            release_startup_code: raw.server.release_startup_code.unwrap_or(true),
            settings,
            cache,
            log,
            error_log,
            user: raw.server.user.clone(),
            group: raw.server.group.clone(),
            trusted_proxies,
            proxy_protocol,
            shared,
            vhosts,
            acme,
            compress: crate::compression::CompressConfig::from_raw(&raw.compress),
        })
    }

    /// Number of worker threads this configuration runs.
    pub fn worker_count(&self) -> usize {
        match self.settings.workers {
            Workers::PerCore(n) | Workers::MultiThread(n) => n,
        }
    }
}

/// The file's text with environment variables put in: `${NAME}` is the variable's value
/// (an error if it is not set), `${NAME:-default}` the value or, unset or empty, `default`;
/// `$${` writes `${`. `NAME` is upper case, digits and `_`, starting with a letter or `_`:
/// `${name}` and `${1}` (a redirect rule's captures) are left as they are. Values go in as
/// they are (inside a TOML string, a `"` or `\` in one must be escaped by whoever sets it).
///
/// # Errors
/// The byte offset of an unset variable (or an unclosed `${NAME`), and why.
fn substitute(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<String, (usize, String)> {
    if !text.contains("${") {
        return Ok(text.to_string());
    }
    let name_ok = |n: &str| {
        n.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && n.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut at = 0;
    while let Some(i) = rest.find("${") {
        if rest[..i].ends_with('$') {
            // `$${`: a literal `${`.
            out.push_str(&rest[..i - 1]);
            out.push_str("${");
            rest = &rest[i + 2..];
            at += i + 2;
            continue;
        }
        out.push_str(&rest[..i]);
        let body_start = i + 2;
        let close = rest[body_start..].find('}').map(|c| body_start + c);
        let inner = close.map(|c| &rest[body_start..c]);
        let (name, default) = match inner.map(|x| x.split_once(":-").map_or((x, None), |(n, d)| (n, Some(d)))) {
            Some((n, d)) if name_ok(n) => (n, d),
            // Not a variable (a capture such as `${1}` or `${name}`): kept.
            _ => {
                out.push_str("${");
                rest = &rest[body_start..];
                at += body_start;
                continue;
            }
        };
        let close = close.expect("a closed variable");
        match (var(name).filter(|v| !(v.is_empty() && default.is_some())), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err((
                    at + i,
                    format!("${{{name}}}: the variable {name} is not set (${{{name}:-default}} gives a default)"),
                ))
            }
        }
        rest = &rest[close + 1..];
        at += close + 1;
    }
    out.push_str(rest);
    Ok(out)
}

/// A route's `path` as requests are matched against it: normalized as request paths are
/// (`selvedge::path`), without a trailing slash (a prefix matches whole segments, so
/// `/admin/` and `/admin` both match `/admin` and `/admin/x`, never `/administrator`).
fn route_prefix(path: &str) -> Result<String, String> {
    let mut out = Vec::new();
    let normal =
        selvedge::path::normalize(path.as_bytes(), &mut out).map_err(|e| format!("route path {path:?}: {e}"))?;
    if normal.encoded_slash {
        return Err(format!("route path {path:?}: an encoded slash (%2F) cannot be part of a route's path"));
    }
    if out.len() > 1 && out.ends_with(b"/") {
        out.pop();
    }
    Ok(String::from_utf8(out).expect("a normal path is ASCII"))
}

/// A listener's `address`: `"unix:PATH"` (relative to the file's directory) or an IP
/// address and port (`"0.0.0.0:80"`, `"[::]:443"`, `"127.0.0.1:8080"`).
fn parse_listen(text: &str, abs: &dyn Fn(&str) -> PathBuf) -> Result<Listen, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("address \"unix:\" needs a path (\"unix:/run/selvedge.sock\")".into());
        }
        return Ok(Listen::Unix(abs(path)));
    }
    text.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
        format!("address {text:?}: write an IP address and port (\"0.0.0.0:80\", \"[::]:443\") or \"unix:/path\"")
    })
}

/// A virtual host's name, lower-cased: a DNS name, or `*.` and a name (a wildcard for one
/// label, as in certificates and SNI).
fn check_host(name: &str) -> Result<String, String> {
    let lower = name.to_ascii_lowercase();
    let bare = lower.strip_prefix("*.").unwrap_or(&lower);
    let ip = bare.parse::<IpAddr>().is_ok() || (bare.starts_with('[') && bare.ends_with(']'));
    let valid = ip
        || !bare.is_empty()
            && bare.len() <= 253
            && bare.split('.').all(|l| {
                !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
    if valid {
        Ok(lower)
    } else {
        Err(format!("host {name:?}: a DNS name (\"example.com\") or a wildcard for one label (\"*.example.com\")"))
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
    http2: RawHttp2,
    #[serde(default)]
    http3: RawHttp3,
    #[serde(default)]
    file_cache: RawFileCache,
    #[serde(default)]
    cache: RawCache,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    vhost: Vec<Spanned<RawVhost>>,
    acme: Option<Spanned<crate::acme::config::RawAcme>>,
    #[serde(default)]
    compress: crate::compression::RawCompress,
    admin: Option<Spanned<RawAdmin>>,
    mime: Option<Spanned<std::collections::BTreeMap<String, String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Spanned<String>,
    public: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    workers: Option<Count<1, 4096>>,
    server_tokens: Option<bool>,
    backlog: Option<Count<1, { i32::MAX as u64 }>>,
    user: Option<String>,
    group: Option<String>,
    max_connections_per_ip: Option<Count<1, { u32::MAX as u64 }>>,
    pid_file: Option<String>,
    hsts: Option<String>,
    trusted_proxies: Option<Spanned<Vec<String>>>,
    client_ip_header: Option<Spanned<String>>,
    resolver: Option<Spanned<Vec<String>>>,
    release_startup_code: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawListen {
    address: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    port: Option<u16>,
    tls: Option<RawTls>,
    redirect_https: Option<bool>,
    proxy_protocol: Option<bool>,
    proxy_protocol_from: Option<Spanned<Vec<String>>>,
    quic: Option<bool>,
    reuse_port: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
    strict_sni: Option<bool>,
}

/// A virtual host's `tls = { cert, key }` (read from the value after `"acme"` was ruled
/// out, so without positions of its own).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVhostTls {
    cert: String,
    key: String,
    /// Accepted as before; it is the listener's setting.
    #[serde(rename = "strict_sni")]
    _strict_sni: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    header: Option<NonZeroDur>,
    idle: Option<NonZeroDur>,
    body: Option<NonZeroDur>,
    send: Option<NonZeroDur>,
    linger: Option<Dur>,
    graceful: Option<Dur>,
    tls_handshake: Option<NonZeroDur>,
}

impl RawTimeouts {
    fn apply(&self, s: &mut Settings) {
        let set = |v: Option<Dur<true>>, d: &mut Duration| *d = v.map_or(*d, Dur::get);
        set(self.header, &mut s.header_timeout);
        set(self.idle, &mut s.idle_timeout);
        set(self.body, &mut s.body_timeout);
        set(self.send, &mut s.send_timeout);
        s.linger_timeout = self.linger.map_or(s.linger_timeout, Dur::get);
        s.graceful_timeout = self.graceful.map_or(s.graceful_timeout, Dur::get);
        set(self.tls_handshake, &mut s.tls_handshake_timeout);
    }
}

/// `[http2]`: every field of [`selvedge::H2Settings`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp2 {
    max_concurrent_streams: Option<Count<1, { u32::MAX as u64 }>>,
    initial_window_size: Option<Size<0, { (1 << 31) - 1 }>>,
    connection_window: Option<Size<65_535, { (1 << 31) - 1 }>>,
    max_frame_size: Option<Size<16_384, { (1 << 24) - 1 }>>,
    max_header_list_size: Option<Size<1, { u32::MAX as u64 }>>,
    header_table_size: Option<Size<0, { u32::MAX as u64 }>>,
    max_continuation_frames: Option<Count<1, { u32::MAX as u64 }>>,
    abuse_window: Option<NonZeroDur>,
    max_peer_resets: Option<Count<0, { u32::MAX as u64 }>>,
    max_local_resets: Option<Count<0, { u32::MAX as u64 }>>,
    max_refused_headers: Option<Count<0, { u32::MAX as u64 }>>,
    max_control_frames: Option<Count<0, { u32::MAX as u64 }>>,
    max_empty_frames: Option<Count<0, { u32::MAX as u64 }>>,
    max_control_queue: Option<Size<1024, { u32::MAX as u64 }>>,
    max_requests: Option<Count<1, { u32::MAX as u64 }>>,
    stream_buffer: Option<Size<1, { u32::MAX as u64 }>>,
    write_batch: Option<Size<1024, { u32::MAX as u64 }>>,
    notsent_lowat: Option<Size<0, { u32::MAX as u64 }>>,
    handshake_timeout: Option<NonZeroDur>,
    enable_connect_protocol: Option<bool>,
    stream_stall_timeout: Option<NonZeroDur>,
}

impl RawHttp2 {
    fn apply(&self, h: &mut selvedge::H2Settings) {
        // Every bound below is at most u32::MAX, so `as u32` is exact.
        let set = |v: Option<u64>, d: &mut u32| *d = v.map_or(*d, |v| v as u32);
        set(self.max_concurrent_streams.map(Count::get), &mut h.max_concurrent_streams);
        set(self.initial_window_size.map(Size::get), &mut h.initial_window_size);
        set(self.connection_window.map(Size::get), &mut h.connection_window);
        set(self.max_frame_size.map(Size::get), &mut h.max_frame_size);
        set(self.max_header_list_size.map(Size::get), &mut h.max_header_list_size);
        set(self.header_table_size.map(Size::get), &mut h.header_table_size);
        set(self.max_continuation_frames.map(Count::get), &mut h.max_continuation_frames);
        set(self.max_peer_resets.map(Count::get), &mut h.max_peer_resets);
        set(self.max_local_resets.map(Count::get), &mut h.max_local_resets);
        set(self.max_refused_headers.map(Count::get), &mut h.max_refused_headers);
        set(self.max_control_frames.map(Count::get), &mut h.max_control_frames);
        set(self.max_empty_frames.map(Count::get), &mut h.max_empty_frames);
        set(self.max_requests.map(Count::get), &mut h.max_requests);
        set(self.notsent_lowat.map(Size::get), &mut h.notsent_lowat);
        h.abuse_window = self.abuse_window.map_or(h.abuse_window, Dur::get);
        h.max_control_queue = self.max_control_queue.map_or(h.max_control_queue, Size::get_usize);
        h.stream_buffer = self.stream_buffer.map_or(h.stream_buffer, Size::get_usize);
        h.write_batch = self.write_batch.map_or(h.write_batch, Size::get_usize);
        h.handshake_timeout = self.handshake_timeout.map_or(h.handshake_timeout, Dur::get);
        h.enable_connect_protocol = self.enable_connect_protocol.unwrap_or(h.enable_connect_protocol);
        h.stream_stall_timeout = self.stream_stall_timeout.map_or(h.stream_stall_timeout, Dur::get);
    }
}

/// `[http3]`: every field of [`selvedge::H3Settings`].
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp3 {
    max_concurrent_streams: Option<Count<1, { u32::MAX as u64 }>>,
    stream_window: Option<Size<1024, { u32::MAX as u64 }>>,
    connection_window: Option<Size<1024, { u32::MAX as u64 }>>,
    send_window: Option<Size<1024, { u32::MAX as u64 }>>,
    max_header_list_size: Option<Size<1, { u32::MAX as u64 }>>,
    retry_threshold: Option<Count<0, { u32::MAX as u64 }>>,
    early_data: Option<bool>,
}

#[cfg(feature = "http3")]
impl RawHttp3 {
    fn apply(&self, h: &mut selvedge::H3Settings) {
        // Every bound below is at most u32::MAX, so `as u32` is exact.
        let set = |v: Option<u64>, d: &mut u32| *d = v.map_or(*d, |v| v as u32);
        set(self.max_concurrent_streams.map(Count::get), &mut h.max_concurrent_streams);
        set(self.stream_window.map(Size::get), &mut h.stream_window);
        set(self.connection_window.map(Size::get), &mut h.connection_window);
        set(self.send_window.map(Size::get), &mut h.send_window);
        set(self.max_header_list_size.map(Size::get), &mut h.max_header_list_size);
        set(self.retry_threshold.map(Count::get), &mut h.retry_threshold);
        h.early_data = self.early_data.unwrap_or(h.early_data);
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_connections: Option<Count<1, { u32::MAX as u64 }>>,
    max_body: Option<Size>,
    max_head: Option<Size<256, { u32::MAX as u64 }>>,
    max_headers: Option<Count<1, 65_535>>,
    max_target: Option<Size<16, { u32::MAX as u64 }>>,
    max_chunk_ext: Option<Size<0, { u32::MAX as u64 }>>,
    max_trailers: Option<Size<0, { u32::MAX as u64 }>>,
    max_drain: Option<Size>,
    min_body_rate: Option<Size>,
    body_rate_grace: Option<Dur>,
    read_buffer: Option<Size<512, { 16 << 20 }>>,
    notsent_lowat: Option<Size<0, { u32::MAX as u64 }>>,
}

impl RawLimits {
    fn apply(&self, s: &mut Settings) {
        s.max_connections = self.max_connections.map_or(s.max_connections, Count::get_usize);
        s.body.max_body = self.max_body.map_or(s.body.max_body, Size::get);
        s.limits.max_head = self.max_head.map_or(s.limits.max_head, Size::get_usize);
        s.limits.max_headers = self.max_headers.map_or(s.limits.max_headers, Count::get_usize);
        s.limits.max_target = self.max_target.map_or(s.limits.max_target, Size::get_usize);
        s.body.max_chunk_ext = self.max_chunk_ext.map_or(s.body.max_chunk_ext, |v| v.get() as u32);
        s.body.max_trailers = self.max_trailers.map_or(s.body.max_trailers, |v| v.get() as u32);
        s.max_drain = self.max_drain.map_or(s.max_drain, Size::get);
        s.min_body_rate = self.min_body_rate.map_or(s.min_body_rate, Size::get);
        s.body_rate_grace = self.body_rate_grace.map_or(s.body_rate_grace, Dur::get);
        s.read_buffer = self.read_buffer.map_or(s.read_buffer, Size::get_usize);
        if let Some(v) = self.notsent_lowat {
            s.notsent_lowat = (v.get() > 0).then_some(v.get() as u32);
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFileCache {
    enabled: Option<bool>,
    sweep: Option<NonZeroDur>,
    /// The older spelling of `sweep`, in milliseconds.
    sweep_ms: Option<Spanned<Count<1>>>,
    max_entries: Option<Count<1>>,
    memory_max: Option<Size>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCache {
    max_age: Option<Dur>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    access: Option<String>,
    error: Option<String>,
    error_format: Option<Spanned<String>>,
    level: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    request_id: Option<Spanned<String>>,
    size: Option<Size>,
    backups: Option<Count<0, 1000>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVhost {
    #[serde(default)]
    hosts: Vec<Spanned<String>>,
    /// `"acme"` or a [`RawTls`] table.
    tls: Option<Spanned<toml::Value>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    redirect: Vec<Spanned<crate::redirect::RawRedirect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    path: String,
    root: Option<Spanned<String>>,
    cgi: Option<Spanned<crate::cgi::RawCgi>>,
    proxy: Option<Spanned<crate::proxy::RawProxy>>,
    fastcgi: Option<Spanned<crate::fastcgi::RawFastcgi>>,
    index: Option<Vec<String>>,
    dotfiles: Option<bool>,
    symlinks_outside: Option<bool>,
    precompressed: Option<bool>,
    max_age: Option<Dur>,
    error_pages: Option<HashMap<String, String>>,
    listing: Option<bool>,
    listing_max: Option<Count<1, 10_000_000>>,
    fallback: Option<Spanned<String>>,
    compress: Option<bool>,
    headers: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    cors: Option<Spanned<crate::policy::cors::RawCors>>,
    auth: Option<Spanned<crate::policy::auth::RawAuth>>,
    allow: Option<Vec<Spanned<String>>>,
    deny: Option<Vec<Spanned<String>>>,
    max_body: Option<Size>,
    rate: Option<Spanned<crate::policy::rate::RawRate>>,
}

/// A route's checks and fields ([`crate::policy`]), or the position and reason of an error.
fn route_policy(
    r: &RawRoute,
    abs: &dyn Fn(&str) -> PathBuf,
) -> Result<crate::policy::PolicyConfig, (Option<std::ops::Range<usize>>, String)> {
    use crate::policy::{self, PolicyConfig};
    let mut p = PolicyConfig::default();
    for (list, out) in [(&r.allow, &mut p.ip.allow), (&r.deny, &mut p.ip.deny)] {
        for entry in list.iter().flatten() {
            out.push(policy::ip::parse_net(entry.get_ref()).map_err(|e| (Some(entry.span()), e))?);
        }
    }
    if let Some(h) = &r.headers {
        p.headers = policy::HeaderRules::from_raw(h.get_ref()).map_err(|e| (Some(h.span()), e))?;
    }
    if let Some(c) = &r.cors {
        p.cors = Some(policy::cors::CorsConfig::from_raw(c.get_ref()).map_err(|e| (Some(c.span()), e))?);
    }
    if let Some(a) = &r.auth {
        p.auth = Some(policy::auth::AuthConfig::from_raw(a.get_ref(), abs).map_err(|e| (Some(a.span()), e))?);
    }
    if let Some(rt) = &r.rate {
        p.rate = Some(policy::rate::RateConfig::from_raw(rt.get_ref()).map_err(|e| (Some(rt.span()), e))?);
    }
    p.max_body = r.max_body.map(Size::get);
    Ok(p)
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
    fn environment_variables() {
        let vars = |n: &str| match n {
            "ROOT" => Some("/srv/www".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let sub = |t: &str| substitute(t, &vars);
        assert_eq!(sub("root = \"${ROOT}/site\"").unwrap(), "root = \"/srv/www/site\"");
        assert_eq!(sub("port = ${PORT:-8080}").unwrap(), "port = 8080");
        assert_eq!(sub("x = \"${EMPTY:-dflt}\" y = \"${EMPTY}\"").unwrap(), "x = \"dflt\" y = \"\"");
        assert_eq!(sub("to = \"/new/${1}/${slug}\"").unwrap(), "to = \"/new/${1}/${slug}\"");
        assert_eq!(sub("x = \"$${ROOT}\"").unwrap(), "x = \"${ROOT}\"");
        assert_eq!(sub("x = \"${ROOT\"").unwrap(), "x = \"${ROOT\"");
        let (at, why) = sub("a = 1\nroot = \"${NOPE}\"").unwrap_err();
        assert_eq!((at, why.contains("NOPE is not set")), (14, true));
        // In a file: the variable's position.
        let e = Config::parse(Path::new("/tmp/t.toml"), "[server]\npid_file = \"${SELVEDGE_TEST_UNSET_VAR}\"\n")
            .unwrap_err();
        assert_eq!((e.line, e.col), (2, 13), "{e}");
    }

    /// Route prefixes are normalized as request paths are; `encoded_slashes = "keep"` may
    /// not have a route under it.
    #[test]
    fn route_prefixes_and_kept_slashes() {
        let dir = std::env::temp_dir();
        let route =
            |path: &str| format!("[[vhost]]\n[[vhost.route]]\npath = \"{path}\"\nroot = \"{}\"\n", dir.display());
        for (written, prefix) in
            [("/admin/", "/admin"), ("//admin", "/admin"), ("/%61dmin", "/admin"), ("/a/./b/../c", "/a/c"), ("/", "/")]
        {
            assert_eq!(parse(&route(written)).unwrap().vhosts[0].routes[0].prefix, prefix, "{written}");
        }
        for bad in ["/..", "/a%2Fb", "/a%00"] {
            assert!(parse(&route(bad)).is_err(), "{bad}");
        }
        let keep = "[[vhost]]\n[[vhost.route]]\npath = \"/api\"\nproxy = { upstream = \"http://127.0.0.1:9\", encoded_slashes = \"keep\" }\n\
                    [[vhost.route]]\npath = \"/api/internal\"\nproxy = { upstream = \"http://127.0.0.1:9\" }\n";
        let e = parse(keep).unwrap_err().to_string();
        assert!(e.contains("encoded_slashes") && e.contains("/api/internal"), "{e}");
        let alone = "[[vhost]]\n[[vhost.route]]\npath = \"/api\"\nproxy = { upstream = \"http://127.0.0.1:9\", encoded_slashes = \"keep\" }\n\
                     [[vhost.route]]\npath = \"/apix\"\nproxy = { upstream = \"http://127.0.0.1:9\" }\n";
        assert!(parse(alone).is_ok());
    }

    #[test]
    fn minimal_and_full() {
        let c = parse("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n").unwrap();
        assert_eq!(c.listen, vec![Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 8080)))]);
        assert!(matches!(&c.vhosts[0].routes[0].kind, RouteKind::Static { root, .. } if root == Path::new("/tmp")));
        let c = parse(
            "[server]\nworkers = 3\npid_file = \"run/x.pid\"\n[[listen]]\nhost = \"0.0.0.0\"\nport = 9000\n\
             [timeouts]\nidle = 5\n[file_cache]\nsweep_ms = 200\nmemory_max = 0\n[log]\naccess = \"logs/a.log\"\n\
             size = 1000\nbackups = 2\n[[vhost]]\nhosts = [\"Example.com\"]\n[[vhost.route]]\npath = \"/s\"\n\
             root = \"/tmp\"\nmax_age = 60\nerror_pages = { 404 = \"/tmp/404.html\" }\n",
        )
        .unwrap();
        assert_eq!(c.workers, Some(3));
        assert!(c.release_startup_code);
        assert_eq!(c.pid_file, Some(PathBuf::from("/tmp/run/x.pid")));
        assert_eq!(c.listen[0], Listen::Tcp(SocketAddr::from(([0, 0, 0, 0], 9000))));
        assert_eq!(c.settings.idle_timeout, Duration::from_secs(5));
        assert_eq!(c.settings.notsent_lowat, Some(128 * 1024));
        assert_eq!(c.cache.sweep, Duration::from_millis(200));
        assert_eq!(c.log.target, LogTarget::File(PathBuf::from("/tmp/logs/a.log")));
        assert_eq!(c.vhosts[0].hosts, vec!["example.com".to_string()]);
        assert_eq!(c.vhosts[0].routes[0].static_opts().unwrap().max_age, Some(60));
        assert!(c.vhosts[0].routes[0].static_opts().unwrap().error_pages.contains_key(&404));
        let c = parse(
            "[server]\nserver_tokens = false\nbacklog = 64\nrelease_startup_code = false\n[timeouts]\ntls_handshake = \"3s\"\n\
             [http2]\nmax_concurrent_streams = 10\ninitial_window_size = \"1MiB\"\nhandshake_timeout = \"2s\"\n\
             enable_connect_protocol = false\n[[listen]]\naddress = \"[::]:443\"\n[[listen]]\naddress = \"unix:run/s.sock\"\n\
             [[listen]]\naddress = \"0.0.0.0:80\"\n[[vhost]]\nhosts = [\"*.Example.com\", \"example.com\"]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n",
        )
        .unwrap();
        assert_eq!(c.settings.server_name, None);
        assert_eq!(c.settings.backlog, 64);
        assert!(!c.release_startup_code);
        assert_eq!(c.settings.tls_handshake_timeout, Duration::from_secs(3));
        assert_eq!((c.settings.h2.max_concurrent_streams, c.settings.h2.initial_window_size), (10, 1 << 20));
        assert_eq!(c.settings.h2.handshake_timeout, Duration::from_secs(2));
        assert!(!c.settings.h2.enable_connect_protocol);
        assert_eq!(
            c.listen,
            vec![
                Listen::Tcp("[::]:443".parse().unwrap()),
                Listen::Unix(PathBuf::from("/tmp/run/s.sock")),
                Listen::Tcp("0.0.0.0:80".parse().unwrap())
            ]
        );
        assert_eq!(c.vhosts[0].hosts, ["*.example.com", "example.com"]);
        let off =
            parse("[limits]\nnotsent_lowat = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n").unwrap();
        assert_eq!(off.settings.notsent_lowat, None);
    }

    #[test]
    fn durations_and_sizes() {
        let c = parse(
            "[timeouts]\nheader = \"250ms\"\nidle = \"5m\"\nbody = 30\nsend = 1.5\ngraceful = 0\nlinger = \"1s\"\n\
             [limits]\nmax_body = \"10MiB\"\nmax_head = \"32KiB\"\nmax_target = \"4KB\"\nnotsent_lowat = \"256KiB\"\n\
             max_drain = \"1MiB\"\nmin_body_rate = \"1KiB\"\nbody_rate_grace = \"5s\"\n[file_cache]\nsweep = \"500ms\"\nmemory_max = \"64KiB\"\n\
             [log]\nsize = \"1GiB\"\n[cache]\nmax_age = \"1d\"\n[http2]\nnotsent_lowat = \"16KiB\"\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n",
        )
        .unwrap();
        let s = &c.settings;
        assert_eq!(s.header_timeout, Duration::from_millis(250));
        assert_eq!(s.idle_timeout, Duration::from_secs(300));
        assert_eq!(s.body_timeout, Duration::from_secs(30));
        assert_eq!(s.send_timeout, Duration::from_millis(1500));
        assert_eq!(s.graceful_timeout, Duration::ZERO);
        assert_eq!(s.linger_timeout, Duration::from_secs(1));
        assert_eq!(s.body.max_body, 10 << 20);
        assert_eq!((s.limits.max_head, s.limits.max_target), (32 << 10, 4000));
        assert_eq!(s.notsent_lowat, Some(256 << 10));
        assert_eq!(s.h2.notsent_lowat, 16 << 10);
        assert_eq!((s.max_drain, s.min_body_rate), (1 << 20, 1024));
        assert_eq!(s.body_rate_grace, Duration::from_secs(5));
        assert_eq!((c.cache.sweep, c.cache.memory_max), (Duration::from_millis(500), 64 << 10));
        assert_eq!(c.log.size, 1 << 30);
        assert_eq!(c.vhosts[0].routes[0].static_opts().unwrap().max_age, Some(86_400));
        for (text, line, why) in [
            ("[timeouts]\nidle = 0\n", 2, "greater than 0"),
            ("[timeouts]\nidle = \"0s\"\n", 2, "greater than 0"),
            ("\n[timeouts]\nheader = -1\n", 3, "negative"),
            ("[timeouts]\nbody = \"soon\"\n", 2, "invalid duration"),
            ("[limits]\nmax_body = -1\n", 2, "negative"),
            ("[limits]\nmax_connections = 0\n", 2, "greater than 0"),
            ("[limits]\nnotsent_lowat = \"8GiB\"\n", 2, "above the maximum"),
            ("[file_cache]\nsweep = \"1s\"\nsweep_ms = 10\n", 3, "not both"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
            assert!(e.col > 0 && e.reason.contains(why), "{text}: {e}");
        }
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
        for (text, line) in [
            ("[[listen]]\naddress = \"localhost:80\"\n", 2),
            ("[[listen]]\naddress = \"unix:\"\n", 2),
            ("[[listen]]\naddress = \"[::]:80\"\nport = 80\n", 2),
            ("[[listen]]\nhost = \"::\"\n", 1),
            ("[http2]\nmax_frame_size = 100\n", 2),
            ("[http2]\nmax_concurrent_streams = 0\n", 2),
            ("[server]\nbacklog = 0\n", 2),
            ("[[vhost]]\nhosts = [\"a.*.com\"]\n", 2),
            ("[[vhost]]\nhosts = [\"*\"]\n", 2),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text}: {e}");
        }
        // A static route's index names are file names.
        for bad in ["\"/etc/passwd\"", "\"a/b.html\"", "\"..\"", "\"\""] {
            let text =
                format!("[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\nindex = [\"index.html\", {bad}]\n");
            let e = parse(&text).unwrap_err();
            assert!(e.reason.contains("a file name"), "{bad}: {e}");
        }
        assert!(parse(
            "[[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\nindex = [\"index.htm\", \"default.html\"]\n"
        )
        .is_ok());
        let e = parse("this is not toml").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        assert!(parse("").is_err());
    }
}
