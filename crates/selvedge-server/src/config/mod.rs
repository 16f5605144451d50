//! The configuration file (TOML). `docs/config.md` describes every key; `examples/selvedge.toml`
//! is a commented example.
//!
//! Unknown keys, wrong types and invalid values are errors reported as
//! `FILE:LINE:COLUMN: reason`; relative paths are taken from the config file's directory.
//! Durations and sizes use the types of [`crate::units`] (`"30s"`, `"10MiB"`...), which refuse
//! out-of-range values with the value's position.
//!
//! One module per section of the file: [`Config::parse`] puts `${VAR}`s in (`substitute`),
//! reads the TOML into the sections' raw types, and has each section checked by its module
//! (`listen`, `server`, `engine`, `log`, `vhost` and `route`, `admin`); a feature's own
//! table is checked by that feature (`RawProxy` in [`crate::upstream::proxy`], `RawAcme` in
//! [`crate::acme::config`]...). Features do not depend on this module, only on [`crate::units`].

mod admin;
mod engine;
mod listen;
mod log;
mod route;
mod server;
mod substitute;
mod vhost;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use selvedge::file::CacheConfig;
use selvedge::{Listen, Settings, Workers};
use serde::Deserialize;
use toml::Spanned;

pub use self::listen::{OnDemandConfig, TlsListen};
pub use self::route::{RouteConfig, RouteKind};
pub use self::vhost::VhostConfig;
use crate::access_log::LogConfig;
use crate::acme::config::{AcmeConfig, ChallengeKind, RawAcme};
use crate::admin::AdminConfig;
use crate::client::TrustedProxies;
use crate::diag::ErrorLogConfig;
use crate::files::compression::{CompressConfig, RawCompress};
use crate::files::StaticOptions;

/// The configuration file's JSON Schema (`selvedge config schema`), written by
/// `scripts/config-schema.py`.
pub const SCHEMA: &str = include_str!("schema.json");

/// The environment variables a configuration's text reads (`${NAME}`, `${NAME:-default}`),
/// once per reference.
pub fn env_references(text: &str) -> Vec<String> {
    substitute::references(text)
}

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
    /// The HTTP cache's `[[cache]]` zones.
    pub cache_zones: Vec<crate::cache::ZoneConfig>,
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
    pub acme: Option<AcmeConfig>,
    /// On-the-fly compression settings (`[compress]`).
    pub compress: CompressConfig,
    /// The admin listener, if any (metrics are collected only with one).
    pub admin: Option<AdminConfig>,
    /// `[mime]`: types by extension, before the built-in ones.
    pub mime: BTreeMap<String, String>,
    /// `[server] release_startup_code`: after start and each reload, let go of the code
    /// pages only start-up used (`selvedge::server::release_code_pages`): true.
    pub release_startup_code: bool,
    /// `[server] release_memory_after`: connections served at once that make a burst, after
    /// which free heap memory is given back to the system (`selvedge::heap`); 0: never.
    pub release_memory_after: usize,
    /// `[fleet]`: state shared with other instances through Redis (`crate::fleet`).
    pub fleet: Option<crate::fleet::FleetConfig>,
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
            cache_zones: Vec::new(),
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
                    when: None,
                    try_files: Vec::new(),
                    // Like miniserve and `python3 -m http.server`: directories are listed.
                    kind: RouteKind::Static { root, opts: StaticOptions { listing: true, ..StaticOptions::default() } },
                    policy: Default::default(),
                    compress: true,
                    forward_auth: None,
                    cache: None,
                }],
                tls: None,
                acme: false,
                redirects: Vec::new(),
                matchers: Default::default(),
            }],
            acme: None,
            compress: Default::default(),
            admin: None,
            mime: Default::default(),
            release_startup_code: true,
            release_memory_after: selvedge::heap::DEFAULT_RELEASE_AFTER,
            fleet: None,
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
        let text = &substitute::substitute(text, &|name| std::env::var(name).ok()).map_err(|(at, reason)| {
            let (line, col) = substitute::line_col(text, at);
            ConfigError { file: file.to_path_buf(), line, col, reason }
        })?;
        let src = Source::new(file, text);
        let raw: Raw = toml::from_str(text).map_err(|e| src.err(e.span(), e.message().trim().to_string()))?;
        let settings = engine::settings(&raw);
        let listeners = listen::listeners(&src, &raw.listen)?;
        let cache = raw.file_cache.cache_config(&src)?;
        let error_log = raw.log.error_log(&src)?;
        let log = raw.log.access_log(&src)?;
        let trusted_proxies = raw.server.trusted_proxies(&src)?;
        let zones = raw.cache.zones(&src)?;
        let route_ctx = route::RouteContext {
            max_age: raw.cache.max_age(),
            proxy: raw.server.proxy_context(&src)?,
            zones: zones.clone(),
        };
        let vhosts = vhost::vhosts(&src, raw.vhost, &route_ctx)?;
        let mut names = std::collections::HashSet::new();
        for r in vhosts.iter().flat_map(|v| &v.routes) {
            if let RouteKind::Proxy(p) = &r.kind {
                if let Some(n) = p.name.as_deref().filter(|n| !names.insert(*n)) {
                    return Err(src.err(None, format!("proxy name {n:?} is on two routes")));
                }
            }
        }
        let acme = acme(&src, raw.acme.as_ref(), &vhosts, &listeners)?;
        let admin = admin::admin(&src, raw.admin.as_ref())?;
        let fleet = match &raw.fleet {
            Some(f) => Some(crate::fleet::FleetConfig::from_raw(f.get_ref()).map_err(|e| src.err(Some(f.span()), e))?),
            None => None,
        };
        if fleet.is_none() {
            let fleet_rate = vhosts
                .iter()
                .flat_map(|v| &v.routes)
                .find(|r| r.policy.rate.is_some_and(|r| r.scope == crate::policy::rate::Scope::Fleet));
            if let Some(r) = fleet_rate {
                return Err(src.err(
                    None,
                    format!("route {}: rate scope = \"fleet\" needs a [fleet] section (its Redis server)", r.prefix),
                ));
            }
        }
        let mime = mime(&src, raw.mime.as_ref())?;
        let (workers, release_memory_after, server) =
            (raw.server.workers(), raw.server.release_memory_after(), raw.server);
        Ok(Config {
            fleet,
            admin,
            mime,
            file: Some(file.to_path_buf()),
            listen: listeners.listen,
            tls: listeners.tls,
            redirect: listeners.redirect,
            hsts: server.hsts,
            workers,
            pid_file: server.pid_file.as_deref().map(|p| src.abs(p)),
            release_startup_code: server.release_startup_code.unwrap_or(true),
            release_memory_after,
            settings,
            cache,
            cache_zones: zones,
            log,
            error_log,
            user: server.user,
            group: server.group,
            trusted_proxies,
            proxy_protocol: listeners.proxy_protocol,
            shared: listeners.shared,
            vhosts,
            acme,
            compress: CompressConfig::from_raw(&raw.compress),
        })
    }

    /// Number of worker threads this configuration runs.
    pub fn worker_count(&self) -> usize {
        match self.settings.workers {
            Workers::PerCore(n) | Workers::MultiThread(n) => n,
        }
    }

    /// The certificates ACME is to keep: one per `tls = "acme"` virtual host.
    pub fn acme_specs(&self) -> Vec<crate::acme::Spec> {
        self.vhosts
            .iter()
            .filter(|v| v.acme && !v.hosts.is_empty())
            .map(|v| crate::acme::Spec { id: crate::acme::spec_id(&v.hosts[0]), names: v.hosts.clone() })
            .collect()
    }
}

/// The file being read: errors point into its text, relative paths start from its
/// directory.
struct Source<'a> {
    file: &'a Path,
    text: &'a str,
    dir: PathBuf,
}

impl<'a> Source<'a> {
    fn new(file: &'a Path, text: &'a str) -> Source<'a> {
        // A bare file name's directory is the current one (`Path::parent` gives "").
        let dir = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Source { file, text, dir }
    }

    /// An error at `span` of the text (`None`: of no place in it).
    fn err(&self, span: Option<Range<usize>>, reason: String) -> ConfigError {
        let (line, col) = span.map_or((0, 0), |s| substitute::line_col(self.text, s.start));
        ConfigError { file: self.file.to_path_buf(), line, col, reason }
    }

    /// `path`, taken from the file's directory unless absolute.
    fn abs(&self, path: &str) -> PathBuf {
        if Path::new(path).is_absolute() {
            PathBuf::from(path)
        } else {
            self.dir.join(path)
        }
    }
}

/// The file's sections, as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    listen: Vec<Spanned<listen::RawListen>>,
    #[serde(default)]
    timeouts: engine::RawTimeouts,
    #[serde(default)]
    limits: engine::RawLimits,
    #[serde(default)]
    http2: engine::RawHttp2,
    #[serde(default)]
    http3: engine::RawHttp3,
    #[serde(default)]
    file_cache: engine::RawFileCache,
    #[serde(default)]
    cache: route::RawCache,
    #[serde(default)]
    log: log::RawLog,
    #[serde(default)]
    vhost: Vec<Spanned<vhost::RawVhost>>,
    acme: Option<Spanned<RawAcme>>,
    #[serde(default)]
    compress: RawCompress,
    admin: Option<Spanned<admin::RawAdmin>>,
    fleet: Option<Spanned<crate::fleet::RawFleet>>,
    mime: Option<Spanned<BTreeMap<String, String>>>,
}

/// `[acme]`, or its defaults when a virtual host says `tls = "acme"`; such a host needs a
/// TLS listener, and the http-01 challenge a cleartext one.
fn acme(
    src: &Source<'_>,
    raw: Option<&Spanned<RawAcme>>,
    vhosts: &[VhostConfig],
    listeners: &listen::Listeners,
) -> Result<Option<AcmeConfig>, ConfigError> {
    let abs = |p: &str| src.abs(p);
    let acme_hosts = vhosts.iter().any(|v| v.acme) || listeners.tls.iter().any(|t| t.on_demand.is_some());
    let acme = match raw {
        Some(a) => Some(AcmeConfig::from_raw(a.get_ref(), &abs).map_err(|(sp, e)| src.err(sp.or(Some(a.span())), e))?),
        None if acme_hosts => Some(AcmeConfig::from_raw(&Default::default(), &abs).map_err(|(sp, e)| src.err(sp, e))?),
        None => None,
    };
    if let Some(a) = acme.as_ref().filter(|_| acme_hosts) {
        let at = raw.map(Spanned::span);
        if listeners.tls.is_empty() {
            return Err(src.err(
                at,
                "tls = \"acme\" needs a TLS listener ([[listen]] with tls) to serve the certificates".into(),
            ));
        }
        if a.challenge == ChallengeKind::Http01 && listeners.listen.is_empty() && listeners.redirect.is_empty() {
            return Err(src.err(at, "the http-01 challenge needs a cleartext listener (port 80)".into()));
        }
        if a.challenge != ChallengeKind::Dns01 {
            if let Some(h) = vhosts.iter().filter(|v| v.acme).flat_map(|v| &v.hosts).find(|h| h.starts_with("*.")) {
                return Err(src.err(
                    at,
                    format!(
                        "{h}: a wildcard certificate needs challenge = \"dns-01\" (the {} challenge cannot prove a wildcard)",
                        a.challenge.name()
                    ),
                ));
            }
        }
    }
    Ok(acme)
}

/// `[mime]`: types by extension, the extensions lower-cased.
fn mime(
    src: &Source<'_>,
    raw: Option<&Spanned<BTreeMap<String, String>>>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut mime = BTreeMap::new();
    if let Some(m) = raw {
        for (ext, ty) in m.get_ref() {
            crate::files::mime::check_override(ext, ty).map_err(|e| src.err(Some(m.span()), e))?;
            mime.insert(ext.to_ascii_lowercase(), ty.clone());
        }
    }
    Ok(mime)
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
    use std::time::Duration;

    use super::*;
    use crate::access_log::LogTarget;

    /// `text` parsed as `/tmp/t.toml`.
    pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("/tmp/t.toml"), text)
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
        assert_eq!(c.release_memory_after, 256);
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
            "[server]\nserver_tokens = false\nbacklog = 64\nrelease_startup_code = false\nrelease_memory_after = 0\n[timeouts]\ntls_handshake = \"3s\"\n\
             [http2]\nmax_concurrent_streams = 10\ninitial_window_size = \"1MiB\"\nhandshake_timeout = \"2s\"\n\
             enable_connect_protocol = false\n[[listen]]\naddress = \"[::]:443\"\n[[listen]]\naddress = \"unix:run/s.sock\"\n\
             [[listen]]\naddress = \"0.0.0.0:80\"\n[[vhost]]\nhosts = [\"*.Example.com\", \"example.com\"]\n\
             [[vhost.route]]\npath = \"/\"\nroot = \"/tmp\"\n",
        )
        .unwrap();
        assert_eq!(c.settings.server_name, None);
        assert_eq!(c.settings.backlog, 64);
        assert!(!c.release_startup_code);
        assert_eq!(c.release_memory_after, 0);
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
