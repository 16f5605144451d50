//! `selvedge`: the web server on the selvedge engine.
//!
//! ```text
//! selvedge serve [DIR] [--host H] [--port P] [--workers N] [--log FILE|stdout] [--pid-file F]
//! selvedge --config FILE [--check]
//! ```
//! `serve` needs no configuration (DIR defaults to the bundled example site; the
//! `SELVEDGE_ADDR` and `SELVEDGE_WORKERS` environment variables give defaults for the
//! address and workers, as the benchmark scripts use). `--config` reads everything from a
//! TOML file (see `examples/selvedge.toml`); `--check` only validates it.
//!
//! Signals: SIGTERM/SIGINT shut down gracefully (in-flight requests finish); SIGHUP
//! reloads the configuration file and reopens the access log, keeping the listeners and
//! every connection.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use selvedge::Server;
use tokio::signal::unix::{signal, SignalKind};

use selvedge_server::access_log::AccessLog;
use selvedge_server::acme::{self, Acme};
use selvedge_server::config::{self, Config, LogConfig, LogTarget};
use selvedge_server::routes::{self, Front, Site};

const USAGE: &str = "usage: selvedge serve [DIR] [--host H] [--port P] [--workers N] [--log FILE|stdout] \
                     [--pid-file F]\n       selvedge --config FILE [--check]";

enum Mode {
    Run(Box<Config>),
    Check(PathBuf),
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Mode, String> {
    match args.next().as_deref() {
        Some("serve") => {}
        Some("--config") => {
            let file = PathBuf::from(args.next().ok_or("--config needs a file")?);
            return match args.next().as_deref() {
                None => Config::load(&file).map(|c| Mode::Run(Box::new(c))).map_err(|e| e.to_string()),
                Some("--check") => Ok(Mode::Check(file)),
                Some(other) => Err(format!("unexpected argument {other:?}\n{USAGE}")),
            };
        }
        Some("-h" | "--help") | None => return Err(USAGE.into()),
        Some(other) => return Err(format!("unknown command {other:?}\n{USAGE}")),
    }
    let env_addr: Option<SocketAddr> = std::env::var("SELVEDGE_ADDR").ok().and_then(|a| a.parse().ok());
    let mut host = env_addr.map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip());
    let mut port = env_addr.map_or(8080, |a| a.port());
    let mut workers: Option<usize> = std::env::var("SELVEDGE_WORKERS").ok().and_then(|w| w.parse().ok());
    let mut root = default_root();
    let mut log = LogConfig::default();
    let mut pid_file = None;
    let mut tls_cert: Option<PathBuf> = None;
    let mut tls_key: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--host" => host = value("--host")?.parse().map_err(|e| format!("--host: {e}"))?,
            "--port" => port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
            "--workers" => {
                let n: usize = value("--workers")?.parse().map_err(|e| format!("--workers: {e}"))?;
                workers = Some(n.max(1));
            }
            "--log" => {
                log.target = match value("--log")?.as_str() {
                    "stdout" | "-" => LogTarget::Stdout,
                    "off" => LogTarget::Off,
                    p => LogTarget::File(PathBuf::from(p)),
                }
            }
            "--pid-file" => pid_file = Some(PathBuf::from(value("--pid-file")?)),
            "--tls-cert" => tls_cert = Some(PathBuf::from(value("--tls-cert")?)),
            "--tls-key" => tls_key = Some(PathBuf::from(value("--tls-key")?)),
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            dir => root = PathBuf::from(dir),
        }
    }
    if !root.is_dir() {
        return Err(format!("selvedge: {} is not a directory", root.display()));
    }
    let mut cfg = Config::simple(root, SocketAddr::new(host, port), workers);
    if let Some(n) = workers {
        cfg.settings.workers = selvedge::Workers::PerCore(n);
    }
    cfg.log = log;
    cfg.pid_file = pid_file;
    match (tls_cert, tls_key) {
        (Some(cert), Some(key)) => {
            selvedge::tls::CertKey::from_pem_files(vec![], &cert, &key).map_err(|e| format!("selvedge: tls: {e}"))?;
            let addr = cfg.listen.remove(0);
            cfg.tls.push(config::TlsListen { addr, cert: Some(cert), key: Some(key), strict_sni: false });
        }
        (None, None) => {}
        _ => return Err("--tls-cert and --tls-key go together".into()),
    }
    Ok(Mode::Run(Box::new(cfg)))
}

/// The bundled example site: next to the binary's source tree, or `./examples/site`.
fn default_root() -> PathBuf {
    let bundled = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/site"));
    if bundled.is_dir() {
        bundled
    } else {
        PathBuf::from("examples/site")
    }
}

fn open_log(cfg: &LogConfig) -> std::io::Result<Option<AccessLog>> {
    if cfg.target == LogTarget::Off {
        return Ok(None);
    }
    AccessLog::open(cfg.clone()).map(Some)
}

fn main() -> ExitCode {
    let cfg = match parse_args(std::env::args().skip(1)) {
        Ok(Mode::Run(c)) => *c,
        Ok(Mode::Check(file)) => {
            return match Config::load(&file) {
                Ok(_) => {
                    eprintln!("selvedge: {} is valid", file.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("selvedge: {e}");
                    ExitCode::from(2)
                }
            };
        }
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let site = match Site::build(&cfg) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("selvedge: {e}");
            return ExitCode::from(2);
        }
    };
    let log = match open_log(&cfg.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("selvedge: access log: {e}");
            return ExitCode::from(2);
        }
    };
    let roots = site.roots();
    let hsts = cfg.hsts.as_deref().and_then(|v| selvedge::http::HeaderValue::from_str(v).ok());
    let front = Front::new(site, routes::engine_pages(&cfg), log, hsts);
    let mut settings = cfg.settings.clone();
    settings.error_response = Some(routes::error_hook(front.pages.clone()));
    let mut server = Server::new(settings.clone());
    for a in &cfg.listen {
        server = server.bind(a.clone());
    }
    let acme_specs = acme::specs(&cfg);
    let acme = match cfg.acme.as_ref().filter(|_| !acme_specs.is_empty()) {
        None => None,
        Some(a) => match Acme::new(a, &acme_specs) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("selvedge: acme storage: {e}");
                return ExitCode::from(2);
            }
        },
    };
    // HTTP-01 answers on the cleartext listeners, before routes and redirects.
    let http01 = acme.as_ref().filter(|a| a.http01()).map(Acme::challenges);
    let mut cert_stores = Vec::new();
    for t in &cfg.tls {
        let store = match load_certs(t, &cfg) {
            Ok(certs) => selvedge::tls::CertStore::new(certs),
            Err(e) => {
                eprintln!("selvedge: tls: {e}");
                return ExitCode::from(2);
            }
        };
        let store = match &acme {
            Some(a) => store.with_managed(a.managed()),
            None => store,
        };
        // Without a default certificate, unknown names are refused.
        let strict_sni = t.strict_sni || t.cert.is_none();
        match selvedge::tls::server_config_with_store(store.clone(), strict_sni, true) {
            Ok(tc) => server = server.bind_tls(t.addr.clone(), tc),
            Err(e) => {
                eprintln!("selvedge: tls: {e}");
                return ExitCode::from(2);
            }
        }
        cert_stores.push((t.clone(), store));
    }
    let redirect = if cfg.redirect.is_empty() {
        None
    } else {
        let https_port = cfg.tls.iter().find_map(|t| match &t.addr {
            selvedge::Listen::Tcp(a) => Some(a.port()),
            selvedge::Listen::Unix(_) => None,
        });
        let mut r = Server::new(settings);
        for a in &cfg.redirect {
            r = r.bind(a.clone());
        }
        let http01 = http01.clone();
        let app = move |req: selvedge::Request| {
            let answer = http01.as_ref().and_then(|c| c.answer(&req));
            async move { answer.unwrap_or_else(|| redirect_to_https(&req, https_port)) }
        };
        match r.start(app) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("selvedge: cannot listen on {:?}: {e}", cfg.redirect);
                return ExitCode::FAILURE;
            }
        }
    };
    let started = match http01 {
        Some(c) => server.start(acme::Http01::new(front.clone(), c)),
        None => server.start(front.clone()),
    };
    let handle = match started {
        Ok(s) => s,
        Err(e) => {
            eprintln!("selvedge: cannot listen on {:?}: {e}", cfg.listen);
            return ExitCode::FAILURE;
        }
    };
    if let Some(p) = &cfg.pid_file {
        let written = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(p, format!("{}\n", std::process::id())));
        if let Err(e) = written {
            eprintln!("selvedge: pid file {}: {e}", p.display());
            handle.shutdown();
            handle.join();
            return ExitCode::FAILURE;
        }
    }
    let addrs: Vec<String> = handle.local_addrs().iter().map(|l| format!("{l:?}")).collect();
    let mut urls: Vec<String> = handle
        .local_addrs()
        .iter()
        .enumerate()
        .map(|(i, l)| match l {
            // Bound in order: the cleartext listeners, then the TLS ones (port 0 resolved).
            selvedge::Listen::Tcp(a) if i >= cfg.listen.len() => format!("https://{a}/"),
            selvedge::Listen::Tcp(a) => format!("http://{a}/"),
            selvedge::Listen::Unix(p) => format!("unix:{}", p.display()),
        })
        .collect();
    drop(addrs);
    if let Some(r) = &redirect {
        for l in r.local_addrs() {
            if let selvedge::Listen::Tcp(a) = l {
                urls.push(format!("(redirect to https) http://{a}/"));
            }
        }
    }
    eprintln!(
        "selvedge: listening on {} with {} workers, root {}, config {}, access log {}",
        urls.join(" "),
        cfg.worker_count(),
        roots.join(" "),
        cfg.file.as_ref().map_or("none".into(), |f| f.display().to_string()),
        match &cfg.log.target {
            LogTarget::Off => "off".to_string(),
            LogTarget::Stdout => "stdout".to_string(),
            LogTarget::File(p) => p.display().to_string(),
        }
    );

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("signal runtime");
    if let Some(a) = &acme {
        a.start(rt.handle(), &acme_specs);
    }
    let mut current = cfg;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT");
        let mut hup = signal(SignalKind::hangup()).expect("SIGHUP");
        loop {
            tokio::select! {
                _ = int.recv() => break,
                _ = term.recv() => break,
                _ = hup.recv() => {
                    reload(&mut current, &front);
                    reload_certs(&cert_stores, &current);
                    let specs = acme::specs(&current);
                    match &acme {
                        Some(a) => a.reload(&tokio::runtime::Handle::current(), current.acme.as_ref(), &specs),
                        None if !specs.is_empty() => eprintln!("selvedge: note: tls = \"acme\" applies on restart"),
                        None => {}
                    }
                }
            }
        }
    });
    eprintln!("selvedge: shutting down (draining in-flight requests)");
    handle.shutdown();
    if let Some(r) = &redirect {
        r.shutdown();
    }
    handle.join();
    if let Some(r) = redirect {
        r.join();
    }
    if let Some(log) = front.log.load().as_ref() {
        log.flush();
    }
    if let Some(p) = &current.pid_file {
        let _ = std::fs::remove_file(p);
    }
    eprintln!("selvedge: stopped");
    ExitCode::SUCCESS
}

/// SIGHUP: reread the configuration file (if any), swap in the new site, reopen the log.
/// A bad file is reported and the running configuration kept.
fn reload(current: &mut Config, front: &Front) {
    let new = match &current.file {
        None => current.clone(),
        Some(f) => match Config::load(f) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("selvedge: reload failed, keeping the running configuration: {e}");
                return;
            }
        },
    };
    let site = match Site::build(&new) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("selvedge: reload failed, keeping the running configuration: {e}");
            return;
        }
    };
    let old_log = front.log.load_full();
    let log = match (old_log.as_ref(), &new.log.target) {
        (_, LogTarget::Off) => None,
        (Some(l), _) => match l.reopen(new.log.clone()) {
            Ok(()) => Some(l.clone()),
            Err(e) => {
                eprintln!("selvedge: reopening the access log: {e}");
                Some(l.clone())
            }
        },
        (None, _) => match open_log(&new.log) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("selvedge: opening the access log: {e}");
                None
            }
        },
    };
    if new.listen != current.listen || new.workers != current.workers {
        eprintln!("selvedge: note: listeners and workers change only on restart");
    }
    front.swap(site, routes::engine_pages(&new), log);
    if let Some(l) = old_log.as_ref() {
        l.flush();
    }
    let listen = std::mem::take(&mut current.listen);
    let workers = current.workers;
    *current = new;
    current.listen = listen;
    current.workers = workers;
    eprintln!("selvedge: reloaded configuration");
}

/// SIGHUP: reload each TLS listener's certificate and key from their files; new handshakes
/// use them, open connections are untouched. A bad pair is reported and the old one kept.
fn reload_certs(stores: &[(config::TlsListen, selvedge::tls::CertStore)], cfg: &Config) {
    for (t, store) in stores {
        match load_certs(t, cfg) {
            Ok(certs) => store.replace(certs),
            Err(e) => eprintln!("selvedge: tls reload kept the old certificates for {:?}: {e}", t.addr),
        }
    }
}

/// A TLS listener's certificates: its own if it has one (the default, for clients without
/// SNI or with an unknown name) and each virtual host's, chosen by SNI from the host's
/// names. ACME certificates are not here: they are managed (`acme::Acme::managed`).
fn load_certs(t: &config::TlsListen, cfg: &Config) -> std::io::Result<Vec<selvedge::tls::CertKey>> {
    let mut certs = Vec::new();
    if let (Some(c), Some(k)) = (&t.cert, &t.key) {
        certs.push(selvedge::tls::CertKey::from_pem_files(vec![], c, k)?);
    }
    for v in &cfg.vhosts {
        if let Some((c, k)) = &v.tls {
            certs.push(selvedge::tls::CertKey::from_pem_files(v.hosts.clone(), c, k)?);
        }
    }
    Ok(certs)
}

/// The redirect listener's answer: 301 to the same host and target over `https`.
fn redirect_to_https(req: &selvedge::Request, https_port: Option<u16>) -> selvedge::Response {
    use selvedge::http::{header, StatusCode};
    let host = req.authority().unwrap_or("localhost");
    // Drop a port, but not the colons of a bracketed IPv6 literal.
    let name = match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    };
    let port = match https_port {
        Some(443) | None => String::new(),
        Some(p) => format!(":{p}"),
    };
    let location = format!("https://{name}{port}{}", req.target());
    selvedge::Response::bytes(StatusCode::MOVED_PERMANENTLY, format!("moved to {location}\n"))
        .header(header::LOCATION, location)
        .header(header::CONTENT_TYPE, "text/plain")
}
