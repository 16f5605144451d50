//! `selvedge`: the web server on the selvedge engine. `selvedge --help` lists the commands
//! (`serve [DIR]`, `run -c FILE`, `check -c FILE`, `completions`, `man`); `docs/config.md`
//! describes the configuration file.
//!
//! Signals: SIGHUP reloads the configuration and the certificates and reopens the logs
//! (listeners and connections stay); SIGUSR1 only reopens the logs; SIGUSR2 starts the
//! binary on disk on the same listening sockets, then drains and exits once it is ready;
//! SIGTERM, SIGINT and SIGQUIT stop gracefully (in-flight requests finish) and exit 0.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use selvedge::{Listen, Server, ServerHandle};
use tokio::signal::unix::{signal, SignalKind};
use tracing::{error, info, warn};

use selvedge_server::access_log::{AccessLog, LogConfig, LogTarget};
use selvedge_server::acme::{self, Acme};
use selvedge_server::admin::{self, Admin};
use selvedge_server::cli::{self, Action};
use selvedge_server::config::{self, Config};
use selvedge_server::diag::{self, ErrorLog};
use selvedge_server::routes::{self, Front, Site};
use selvedge_server::service::{self, notify, UpgradeOutcome};

fn main() -> ExitCode {
    // The binary's path now, before an upgrade replaces the file (SIGUSR2 starts the file
    // then at this path).
    let exe = std::env::current_exe().ok();
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (action, level) = cli::parse();
    match action {
        Action::Completions(shell) => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cli::command(), "selvedge", &mut out);
            print_all(&out)
        }
        Action::Man => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(cli::command()).render(&mut out) {
                Ok(()) => print_all(&out),
                Err(e) => {
                    eprintln!("selvedge: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Action::Check(file) => check(&file),
        Action::Run(cfg) => run(*cfg, level.as_deref(), exe, args),
    }
}

/// Writes `text` to standard output. A reader that stopped early (`| head`) is not an
/// error: what it wanted went out.
fn print_all(text: &[u8]) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("selvedge: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `selvedge check`: the file parses, every path and certificate is there, the user exists.
fn check(file: &std::path::Path) -> ExitCode {
    let result = Config::load(file).map_err(|e| e.to_string()).and_then(|cfg| {
        Site::build(&cfg).map_err(|e| e.to_string())?;
        service::identity(cfg.user.as_deref(), cfg.group.as_deref()).map(|_| ())
    });
    match result {
        Ok(()) => {
            eprintln!("selvedge: {} is valid", file.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("selvedge: {e}");
            ExitCode::from(2)
        }
    }
}

fn open_log(cfg: &LogConfig) -> std::io::Result<Option<AccessLog>> {
    if cfg.target == LogTarget::Off {
        return Ok(None);
    }
    AccessLog::open(cfg.clone()).map(Some)
}

/// HTTP/3 on the TLS listener added last (`quic = true`).
#[cfg(feature = "http3")]
fn http3(server: Server) -> Server {
    server.http3()
}

#[cfg(not(feature = "http3"))]
fn http3(server: Server) -> Server {
    server
}

/// Everything the signal loop works with.
struct Running {
    cfg: Config,
    front: Front,
    errors: ErrorLog,
    handle: ServerHandle,
    redirect: Option<ServerHandle>,
    cert_stores: Vec<(config::TlsListen, selvedge::tls::CertStore)>,
    /// Automatic HTTPS, if a virtual host has `tls = "acme"`.
    acme: Option<Acme>,
    /// The name of each listener of `handle` (then of `redirect`), by `bind*` index.
    names: (Vec<String>, Vec<String>),
    /// The admin listener, if configured.
    admin: Option<Admin>,
    /// The listeners' URLs (for the status page).
    urls: Vec<String>,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    error!("{msg}");
    ExitCode::from(2)
}

fn run(cfg: Config, level: Option<&str>, exe: Option<PathBuf>, args: Vec<OsString>) -> ExitCode {
    let errors = match ErrorLog::open(&cfg.error_log.target) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("selvedge: error log: {e}");
            return ExitCode::from(2);
        }
    };
    match diag::filter(level, &cfg.error_log) {
        Ok(f) => diag::install(&errors, cfg.error_log.format, f),
        Err(e) => {
            eprintln!("selvedge: log level: {e}");
            return ExitCode::from(2);
        }
    }
    // Signal handlers before anything is served: a signal that comes as soon as the
    // startup line is out is handled, not fatal.
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format_args!("signal runtime: {e}")),
    };
    let signals = match rt.block_on(async { Signals::new() }) {
        Ok(s) => s,
        Err(e) => return fail(format_args!("signal handlers: {e}")),
    };
    let inherited = match selvedge::server::listen_fds() {
        Ok(v) => v,
        Err(e) => return fail(format_args!("inherited sockets (LISTEN_FDS): {e}")),
    };
    let upgraded = match service::take_upgrade_notify() {
        Ok(u) => u,
        Err(e) => return fail(format_args!("upgrade: {e}")),
    };
    let identity = match service::identity(cfg.user.as_deref(), cfg.group.as_deref()) {
        Ok(i) => i,
        Err(e) => return fail(e),
    };
    let site = match Site::build(&cfg) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    selvedge_server::client::set_trusted(&cfg.trusted_proxies);
    selvedge_server::mime::set_overrides(&cfg.mime);
    let log = match open_log(&cfg.log) {
        Ok(l) => l,
        Err(e) => return fail(format_args!("access log: {e}")),
    };
    let routes_served = site.summary(8);
    // The admin listener first: /readyz says "starting" until the public listeners serve.
    let admin_srv = match &cfg.admin {
        None => None,
        Some(a) => match Admin::start(a, admin_info(&cfg, &site, Vec::new())) {
            Ok(s) => Some(s),
            Err(e) => return fail(format_args!("cannot listen on the admin address {:?}: {e}", a.listen)),
        },
    };
    let hsts = cfg.hsts.as_deref().and_then(|v| selvedge::http::HeaderValue::from_str(v).ok());
    let front = Front::new(site, routes::engine_pages(&cfg), log, hsts);
    let mut settings = cfg.settings.clone();
    settings.error_response = Some(routes::error_hook(front.pages.clone()));
    settings.on_exception = Some(std::sync::Arc::new(|e: &selvedge::Error| tracing::debug!("connection: {e}")));

    let acme_specs = cfg.acme_specs();
    let acme = match cfg.acme.as_ref().filter(|_| !acme_specs.is_empty()) {
        None => None,
        Some(a) => match Acme::new(a, &acme_specs) {
            Ok(m) => Some(m),
            Err(e) => return fail(format_args!("acme storage: {e}")),
        },
    };
    // The storage is written after the drop to [server] user: it is that user's.
    if let (Some(id), Some(a)) = (&identity, &acme) {
        if let Err(e) = id.give_tree(a.storage_root()) {
            return fail(format_args!(
                "acme storage {}: giving it to {}: {e}",
                a.storage_root().display(),
                id.describe()
            ));
        }
    }
    // HTTP-01 answers on the cleartext listeners, before routes and redirects.
    let http01 = acme.as_ref().filter(|a| a.http01()).map(Acme::challenges);

    let from_fds = inherited.len();
    let mut assigned = service::assign(&cfg, inherited);
    let mut server = Server::new(settings.clone());
    let mut names = Vec::new();
    // A listener with proxy_protocol reads the PROXY header first (whether bound here or
    // inherited).
    // Its header names the client only when the peer is one of `proxy_protocol_from`. A
    // listener with `reuse_port` may share its address with other processes.
    let pp = |server: Server, a: &Listen| {
        let server = if cfg.shared.contains(a) { server.reuse_port() } else { server };
        match cfg.proxy_protocol.iter().find(|(l, _)| l == a) {
            Some((_, nets)) => {
                let nets = nets.clone();
                server.proxy_protocol_from(move |peer| match peer {
                    selvedge::PeerAddr::Tcp(s) => nets.iter().any(|n| n.contains(&s.ip().to_canonical())),
                    selvedge::PeerAddr::Unix => true,
                })
            }
            None => server,
        }
    };
    for (i, a) in cfg.listen.iter().enumerate() {
        let fds = std::mem::take(&mut assigned.http[i]);
        if fds.is_empty() {
            server = pp(server.bind(a.clone()), a);
            names.push(format!("http:{i}"));
        }
        for fd in fds {
            server = pp(server.bind_fd(fd), a);
            names.push(format!("http:{i}"));
        }
    }
    for fd in std::mem::take(&mut assigned.extra_http) {
        server = server.bind_fd(fd);
        names.push("http".into());
    }
    let mut cert_stores = Vec::new();
    let mut first_tls = None;
    for (i, t) in cfg.tls.iter().enumerate() {
        let store = match load_certs(t, &cfg) {
            Ok(certs) => selvedge::tls::CertStore::new(certs),
            Err(e) => return fail(format_args!("tls: {e}")),
        };
        let store = match &acme {
            Some(a) => store.with_managed(a.managed()),
            None => store,
        };
        // Without a default certificate, unknown names are refused.
        let strict_sni = t.strict_sni || t.cert.is_none();
        let tc = match selvedge::tls::server_config_with_store(store.clone(), strict_sni, true) {
            Ok(tc) => tc,
            Err(e) => return fail(format_args!("tls: {e}")),
        };
        let fds = std::mem::take(&mut assigned.tls[i]);
        let h3 = |server: Server| if t.quic { http3(server) } else { server };
        if fds.is_empty() {
            server = h3(pp(server.bind_tls(t.addr.clone(), tc.clone()), &t.addr));
            names.push(format!("https:{i}"));
        }
        for fd in fds {
            server = h3(pp(server.bind_fd_tls(fd, tc.clone()), &t.addr));
            names.push(format!("https:{i}"));
        }
        first_tls.get_or_insert(tc);
        cert_stores.push((t.clone(), store));
    }
    for fd in std::mem::take(&mut assigned.extra_tls) {
        match &first_tls {
            Some(tc) => {
                server = server.bind_fd_tls(fd, tc.clone());
                names.push("https".into());
            }
            None => warn!("an inherited socket named https* is closed: no TLS listener in the configuration"),
        }
    }
    let listening = match server.listen() {
        Ok(l) => l,
        Err(e) => return fail(format_args!("cannot listen on {:?}: {e}", cfg.listen)),
    };
    let mut redirect_names = Vec::new();
    let redirect = if cfg.redirect.is_empty() && assigned.extra_redirect.is_empty() {
        None
    } else {
        let mut r = Server::new(settings);
        for (i, a) in cfg.redirect.iter().enumerate() {
            let fds = std::mem::take(&mut assigned.redirect[i]);
            if fds.is_empty() {
                r = r.bind(a.clone());
                if cfg.shared.contains(a) {
                    r = r.reuse_port();
                }
                redirect_names.push(format!("redirect:{i}"));
            }
            for fd in fds {
                r = r.bind_fd(fd);
                redirect_names.push(format!("redirect:{i}"));
            }
        }
        for fd in std::mem::take(&mut assigned.extra_redirect) {
            r = r.bind_fd(fd);
            redirect_names.push("redirect".into());
        }
        match r.listen() {
            Ok(l) => Some(l),
            Err(e) => return fail(format_args!("cannot listen on {:?}: {e}", cfg.redirect)),
        }
    };
    // Every socket is bound: now the process can stop being root.
    if let Some(id) = &identity {
        if let Err(e) = id.drop_privileges() {
            return fail(format_args!("dropping privileges to {}: {e}", id.describe()));
        }
        info!("running as {}", id.describe());
    }
    let https_port = cfg.tls.iter().find_map(|t| match &t.addr {
        Listen::Tcp(a) => Some(a.port()),
        Listen::Unix(_) => None,
    });
    let redirect = match redirect {
        None => None,
        Some(l) => {
            let http01 = http01.clone();
            let app = move |req: selvedge::Request| {
                let answer = http01.as_ref().and_then(|c| c.answer(&req));
                async move { answer.unwrap_or_else(|| redirect_to_https(&req, https_port)) }
            };
            match l.start(app) {
                Ok(h) => Some(h),
                Err(e) => return fail(format_args!("redirect listener: {e}")),
            }
        }
    };
    let started = match http01 {
        Some(c) => listening.start(acme::Http01::new(front.clone(), c)),
        None => listening.start(front.clone()),
    };
    let handle = match started {
        Ok(s) => s,
        Err(e) => return fail(format_args!("cannot start the workers: {e}")),
    };
    if let Some(p) = &cfg.pid_file {
        let written = p
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(p, format!("{}\n", std::process::id())));
        match written {
            Ok(()) => {}
            Err(e) if upgraded => warn!("pid file {}: {e}", p.display()),
            Err(e) => {
                handle.shutdown();
                handle.join();
                return fail(format_args!("pid file {}: {e}", p.display()));
            }
        }
    }
    let tls_urls = |a: &std::net::SocketAddr| {
        cfg.tls.iter().any(|t| matches!(&t.addr, Listen::Tcp(t) if t.port() == a.port()))
            || names.iter().zip(handle.local_addrs()).any(|(n, l)| n.starts_with("https") && *l == Listen::Tcp(*a))
    };
    // A TLS listener with `quic = true` (or `--http3`) also serves HTTP/3 on its UDP port.
    let quic = |k: usize| {
        names
            .get(k)
            .and_then(|n| n.strip_prefix("https:"))
            .and_then(|i| i.parse::<usize>().ok())
            .is_some_and(|i| cfg.tls[i].quic)
    };
    let mut urls: Vec<String> = handle
        .local_addrs()
        .iter()
        .enumerate()
        .map(|(k, l)| match l {
            Listen::Tcp(a) if tls_urls(a) && quic(k) => format!("https://{a}/ (and HTTP/3 on UDP port {})", a.port()),
            Listen::Tcp(a) if tls_urls(a) => format!("https://{a}/"),
            Listen::Tcp(a) => format!("http://{a}/"),
            Listen::Unix(p) => format!("unix:{}", p.display()),
        })
        .collect();
    urls.dedup();
    if let Some(r) = &redirect {
        for l in r.local_addrs() {
            if let Listen::Tcp(a) = l {
                urls.push(format!("(redirect to https) http://{a}/"));
            }
        }
    }
    let workers = cfg.worker_count();
    let status = format!(
        "listening on {} with {workers} worker{}; serving {routes_served}; config {}, access log {}{}",
        urls.join(" "),
        if workers == 1 { "" } else { "s" },
        cfg.file.as_ref().map_or("none".into(), |f| f.display().to_string()),
        match &cfg.log.target {
            LogTarget::Off => "off".to_string(),
            LogTarget::Stdout => "stdout".to_string(),
            LogTarget::File(p) => p.display().to_string(),
        },
        if from_fds > 0 { format!(", {from_fds} inherited sockets") } else { String::new() },
    );
    info!("{status}");
    loaded_now();
    if let Some(a) = &admin_srv {
        a.set_info(admin_info(&cfg, &front.site.load(), urls.clone()));
        for l in a.local_addrs() {
            let shown = match l {
                Listen::Tcp(a) => format!("http://{a}/"),
                Listen::Unix(p) => format!("unix:{}", p.display()),
            };
            info!("admin listener on {shown} (/metrics /healthz /readyz /status)");
        }
    }
    admin::set_state(admin::State::Ready);
    if let Some(a) = &acme {
        a.start(rt.handle(), &acme_specs);
    }
    // Upstream health checks and re-resolution, off the workers.
    if let Err(e) = selvedge_server::upstream::start_maintenance() {
        return fail(format_args!("upstream maintenance thread: {e}"));
    }
    notify::ready("serving");
    service::tell_upgrading_parent();
    release_startup_code(&cfg);

    let running = Running {
        cfg,
        front,
        errors,
        handle,
        redirect,
        cert_stores,
        acme,
        names: (names, redirect_names),
        admin: admin_srv,
        urls,
    };
    signal_loop(running, rt, signals, exe, args)
}

/// The signals the server handles.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

/// What ends the signal loop.
enum Stop {
    /// TERM, INT or QUIT: graceful shutdown.
    Graceful,
    /// A new process took over: drain, then shut down.
    Upgraded,
}

fn signal_loop(
    mut r: Running,
    rt: tokio::runtime::Runtime,
    mut s: Signals,
    exe: Option<PathBuf>,
    args: Vec<OsString>,
) -> ExitCode {
    let stop = rt.block_on(async {
        loop {
            tokio::select! {
                _ = s.term.recv() => return Stop::Graceful,
                _ = s.int.recv() => return Stop::Graceful,
                _ = s.quit.recv() => return Stop::Graceful,
                _ = s.hup.recv() => {
                    notify::reloading();
                    reload(&mut r);
                    notify::ready("serving (reloaded)");
                    release_startup_code(&r.cfg);
                }
                _ = s.usr1.recv() => {
                    reopen_logs(&r, &r.cfg.log.clone(), &r.cfg.error_log.target.clone());
                    info!("reopened the logs");
                }
                _ = s.usr2.recv() => {
                    if upgrade(&r, exe.as_deref(), &args).await {
                        return Stop::Upgraded;
                    }
                }
            }
        }
    });
    notify::stopping();
    admin::set_state(admin::State::Draining);
    if let Stop::Upgraded = stop {
        // Connections end after their next exchange; give idle ones until the graceful
        // timeout (or until they are all gone), then shut down.
        r.handle.drain();
        if let Some(x) = &r.redirect {
            x.drain();
        }
        let deadline = Instant::now() + r.cfg.settings.graceful_timeout;
        let live = |r: &Running| r.handle.live_connections() + r.redirect.as_ref().map_or(0, |x| x.live_connections());
        while live(&r) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        info!("drained; {} connections left are closed", live(&r));
    } else {
        info!("shutting down (draining in-flight requests)");
    }
    r.handle.shutdown();
    if let Some(x) = &r.redirect {
        x.shutdown();
    }
    r.handle.join();
    if let Some(x) = r.redirect {
        x.join();
    }
    if let Some(log) = r.front.log.load().as_ref() {
        log.flush();
    }
    if let Some(p) = &r.cfg.pid_file {
        // After an upgrade the file names the new process: leave it.
        let ours = std::fs::read_to_string(p).is_ok_and(|t| t.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(p);
        }
    }
    if let Some(a) = r.admin.take() {
        a.stop();
    }
    info!("stopped");
    ExitCode::SUCCESS
}

/// SIGUSR2: starts the binary on disk on our listening sockets and waits until it is
/// ready. `true`: it serves, this process should drain and exit.
async fn upgrade(r: &Running, exe: Option<&std::path::Path>, args: &[OsString]) -> bool {
    let Some(exe) = exe else {
        error!("upgrade: the path of the running binary is unknown");
        return false;
    };
    let mut fds = Vec::new();
    for (handle, names) in [(Some(&r.handle), &r.names.0), (r.redirect.as_ref(), &r.names.1)] {
        let Some(h) = handle else { continue };
        match h.listener_fds() {
            Ok(v) => fds.extend(v.into_iter().map(|(fd, i)| (fd, names.get(i).cloned().unwrap_or_default()))),
            Err(e) => {
                error!("upgrade: duplicating the listening sockets: {e}");
                return false;
            }
        }
    }
    info!("upgrade: starting {} on {} sockets ({})", exe.display(), fds.len(), service::describe_fds(&fds));
    let up = match service::upgrade(exe, args, fds) {
        Ok(u) => u,
        Err(e) => {
            error!("upgrade: cannot start {}: {e}", exe.display());
            return false;
        }
    };
    let pid = up.child.id();
    match up.wait(Duration::from_secs(60)).await {
        UpgradeOutcome::Ready(pid) => {
            info!("upgrade: process {pid} is ready; this one ({}) drains and exits", std::process::id());
            notify::main_pid(pid);
            true
        }
        UpgradeOutcome::Exited(st) => {
            error!("upgrade: process {pid} exited ({st}) before it was ready; still serving");
            false
        }
        UpgradeOutcome::TimedOut => {
            error!("upgrade: process {pid} was not ready within 60 s and was stopped; still serving");
            false
        }
    }
}

/// Reopens the access log (with `log`'s settings) and the error log (at `errors`).
/// Failures are reported and the files in use kept.
fn reopen_logs(r: &Running, log: &LogConfig, errors: &diag::ErrorTarget) {
    if let Err(e) = r.errors.reopen(errors) {
        error!("reopening the error log: {e}");
    }
    let old = r.front.log.load_full();
    let new = match (old.as_ref(), &log.target) {
        (_, LogTarget::Off) => None,
        // Another format or request id setting: a new log (the old one is flushed).
        (Some(l), _) if *l.format() != log.format || l.trust_request_id() != log.trust_request_id => {
            l.flush();
            match open_log(log) {
                Ok(l) => l,
                Err(e) => {
                    error!("opening the access log: {e}");
                    Some(l.clone())
                }
            }
        }
        (Some(l), _) => {
            if let Err(e) = l.reopen(log.clone()) {
                error!("reopening the access log: {e}");
            }
            Some(l.clone())
        }
        (None, _) => match open_log(log) {
            Ok(l) => l,
            Err(e) => {
                error!("opening the access log: {e}");
                None
            }
        },
    };
    let same = match (&new, old.as_ref()) {
        (Some(a), Some(b)) => a.same(b),
        (None, None) => true,
        _ => false,
    };
    if !same {
        r.front.log.store(std::sync::Arc::new(new));
    }
}

/// SIGHUP: reread the configuration file (if any), swap in the new site, reload the
/// certificates, reopen the logs. A bad file is reported and the running configuration
/// kept; the logs are reopened all the same (logrotate may have moved them).
fn reload(r: &mut Running) {
    let new = match &r.cfg.file {
        None => Ok(r.cfg.clone()),
        Some(f) => Config::load(f).map_err(|e| e.to_string()),
    };
    let built = new.and_then(|new| Site::build(&new).map(|site| (new, site)).map_err(|e| e.to_string()));
    let (new, site) = match built {
        Ok(b) => b,
        Err(e) => {
            // The logs first, so that the failure is in the new error log.
            let (log, errors) = (r.cfg.log.clone(), r.cfg.error_log.target.clone());
            reopen_logs(r, &log, &errors);
            error!("reload failed, keeping the running configuration (the logs were reopened): {e}");
            selvedge_server::metrics::registry().events.reloads_failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    reopen_logs(r, &new.log, &new.error_log.target);
    if new.listen != r.cfg.listen
        || new.workers != r.cfg.workers
        || new.user != r.cfg.user
        || new.proxy_protocol != r.cfg.proxy_protocol
        || new.shared != r.cfg.shared
    {
        warn!(
            "listeners (and their proxy_protocol and reuse_port), workers and user change only on restart (or \
             upgrade, SIGUSR2)"
        );
    }
    let log = Option::clone(&r.front.log.load());
    selvedge_server::client::set_trusted(&new.trusted_proxies);
    selvedge_server::mime::set_overrides(&new.mime);
    r.front.swap(site, routes::engine_pages(&new), log);
    reload_certs(&r.cert_stores, &new);
    let specs = new.acme_specs();
    match &r.acme {
        Some(a) => a.reload(&tokio::runtime::Handle::current(), new.acme.as_ref(), &specs),
        None if !specs.is_empty() => warn!("tls = \"acme\" applies on restart"),
        None => {}
    }
    let listen = std::mem::take(&mut r.cfg.listen);
    let proxy_protocol = std::mem::take(&mut r.cfg.proxy_protocol);
    let shared = std::mem::take(&mut r.cfg.shared);
    let workers = r.cfg.workers;
    r.cfg = new;
    r.cfg.listen = listen;
    r.cfg.proxy_protocol = proxy_protocol;
    r.cfg.shared = shared;
    r.cfg.workers = workers;
    selvedge_server::metrics::registry().events.reloads_ok.fetch_add(1, Ordering::Relaxed);
    loaded_now();
    if let Some(a) = &r.admin {
        a.set_info(admin_info(&r.cfg, &r.front.site.load(), r.urls.clone()));
    }
    info!("reloaded configuration");
}

/// Lets go of the executable's code pages that start-up (or a reload) brought in and the
/// request paths do not use (`[server] release_startup_code`): they come back from the
/// page cache if ever needed.
fn release_startup_code(cfg: &Config) {
    if !cfg.release_startup_code {
        return;
    }
    match selvedge::server::release_code_pages() {
        Ok(kb) => tracing::debug!("released {kb} kB of start-up code pages"),
        Err(e) => warn!("releasing start-up code pages: {e}"),
    }
}

/// Records that the configuration in force was loaded now.
fn loaded_now() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    selvedge_server::metrics::registry().events.config_loaded.store(now, Ordering::Relaxed);
}

/// What the status page shows about `cfg`.
fn admin_info(cfg: &Config, site: &Site, listeners: Vec<String>) -> admin::Info {
    admin::Info {
        listeners,
        routes: site.describe_routes(),
        config_file: cfg.file.as_ref().map(|f| f.display().to_string()),
        workers: cfg.worker_count(),
    }
}

/// Reloads each TLS listener's certificate and key from their files; new handshakes use
/// them, open connections are untouched. A bad pair is reported and the old one kept.
fn reload_certs(stores: &[(config::TlsListen, selvedge::tls::CertStore)], cfg: &Config) {
    for (t, store) in stores {
        match load_certs(t, cfg) {
            Ok(certs) => store.replace(certs),
            Err(e) => error!("tls reload kept the old certificates for {:?}: {e}", t.addr),
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
