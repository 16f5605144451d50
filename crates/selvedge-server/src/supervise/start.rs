//! Start-up: the site and access log, the admin listener (first: `/readyz` says "starting"
//! until the public listeners serve), ACME, every listener bound (or taken from the
//! sockets inherited), root privileges dropped, the apps started, the pid file, the
//! startup line, then ready.

use std::sync::Arc;

use selvedge::server::Inherited;
use selvedge::{Listen, Listening, Server, ServerHandle, Settings};
use tokio::runtime::Runtime;
use tracing::{info, warn};

use super::{admin_info, apply_memory_settings, load_certs, loaded_now, open_log, Running};
use crate::access_log::LogTarget;
use crate::acme::{Acme, Challenges, Spec};
use crate::admin::{self, Admin};
use crate::config::{Config, TlsListen};
use crate::diag::ErrorLog;
use crate::routes::{self, Front, Site};
use crate::service::{self, notify, Assigned, Identity};

type TlsConfig = Arc<rustls::ServerConfig>;

/// The public listeners, bound and not yet served.
struct Bound {
    listening: Listening,
    /// Each listener's name (`http:N`, `https:N`...), by `bind*` index.
    names: Vec<String>,
    cert_stores: Vec<(TlsListen, selvedge::tls::CertStore)>,
    redirect: Option<Listening>,
    redirect_names: Vec<String>,
}

/// Starts serving `cfg`: on success every listener serves and systemd was told so.
pub(super) fn start(cfg: Config, errors: ErrorLog, rt: &Runtime) -> Result<Running, String> {
    let inherited = selvedge::server::listen_fds().map_err(|e| format!("inherited sockets (LISTEN_FDS): {e}"))?;
    let upgraded = service::take_upgrade_notify().map_err(|e| format!("upgrade: {e}"))?;
    let identity = service::identity(cfg.user.as_deref(), cfg.group.as_deref())?;
    let app = App::prepare(&cfg)?;
    let acme_specs = cfg.acme_specs();
    let acme = start_acme(&cfg, &acme_specs, identity.as_ref())?;
    let from_fds = inherited.len();
    let bound = bind(&cfg, app.settings, inherited, acme.as_ref())?;
    // Every socket is bound: now the process can stop being root.
    if let Some(id) = &identity {
        id.drop_privileges().map_err(|e| format!("dropping privileges to {}: {e}", id.describe()))?;
        info!("running as {}", id.describe());
    }
    let (handle, redirect) = serve(&cfg, bound.listening, bound.redirect, &app.front, acme.as_ref())?;
    if let Err(e) = write_pid_file(&cfg, upgraded) {
        handle.shutdown();
        handle.join();
        return Err(e);
    }
    let urls = urls(&cfg, &bound.names, &handle, redirect.as_ref());
    info!("{}", startup_line(&cfg, &urls, &app.routes_served, from_fds, handle.io()));
    if let selvedge::IoInUse::EpollInstead(why) = handle.io() {
        warn!("io_uring is not available ({why}): using epoll");
    }
    let api = super::api::ApiState::of(&cfg);
    let running = Running {
        cfg,
        front: app.front,
        errors,
        handle,
        redirect,
        cert_stores: bound.cert_stores,
        acme,
        names: bound.names,
        redirect_names: bound.redirect_names,
        admin: app.admin,
        urls,
        api,
        api_rx: app.api_rx,
    };
    ready(&running, rt, &acme_specs)?;
    Ok(running)
}

/// What serves requests, before any listener is bound.
struct App {
    front: Front,
    /// The engine's settings, with the hooks that answer from the site's error pages.
    settings: Settings,
    /// The admin listener, if configured: it serves from here on (`/readyz` says
    /// "starting" until the public listeners serve).
    admin: Option<Admin>,
    /// The configuration API's requests, from the admin listener.
    api_rx: Option<tokio::sync::mpsc::UnboundedReceiver<admin::Cmd>>,
    /// The routes, for the startup line.
    routes_served: String,
}

impl App {
    /// The site, the access log, process-wide settings (trusted proxies, MIME types), the
    /// admin listener.
    fn prepare(cfg: &Config) -> Result<App, String> {
        // Before the site: its fleet rate limits name their keys under the fleet's prefix.
        if let Some(f) = &cfg.fleet {
            crate::fleet::start(f).map_err(|e| format!("fleet: {e}"))?;
        }
        let site = Site::build(cfg).map_err(|e| e.to_string())?;
        crate::client::set_trusted(&cfg.trusted_proxies);
        crate::files::mime::set_overrides(&cfg.mime);
        let log = open_log(&cfg.log).map_err(|e| format!("access log: {e}"))?;
        let routes_served = site.summary(8);
        let (admin, api_rx) = match start_admin(cfg, &site)? {
            Some((a, rx)) => (Some(a), Some(rx)),
            None => (None, None),
        };
        let hsts = cfg.hsts.as_deref().and_then(|v| selvedge::http::HeaderValue::from_str(v).ok());
        let front = Front::new(site, routes::engine_pages(cfg), log, hsts);
        let mut settings = cfg.settings.clone();
        settings.error_response = Some(routes::error_hook(front.pages.clone()));
        settings.on_exception = Some(Arc::new(|e: &selvedge::Error| tracing::debug!("connection: {e}")));
        Ok(App { front, settings, admin, api_rx, routes_served })
    }
}

/// Starts the apps on the bound listeners: the redirect listeners' first, then the site
/// (both answering ACME's HTTP-01 challenges, before routes and redirects).
fn serve(
    cfg: &Config,
    listening: Listening,
    redirect: Option<Listening>,
    front: &Front,
    acme: Option<&Acme>,
) -> Result<(ServerHandle, Option<ServerHandle>), String> {
    let http01 = acme.filter(|a| a.http01()).map(Acme::challenges);
    let redirect = match redirect {
        None => None,
        Some(l) => Some(start_redirect(cfg, l, http01.clone())?),
    };
    let started = match http01 {
        Some(c) => listening.start(crate::acme::Http01::new(front.clone(), c)),
        None => listening.start(front.clone()),
    };
    let handle = started.map_err(|e| format!("cannot start the workers: {e}"))?;
    Ok((handle, redirect))
}

/// Configuration changes from other instances of the fleet are made through the admin
/// API's queue, as the request that made them (checked as this instance's own; the digest
/// of the configuration they were made on is their `If-Match`).
fn fleet_changes_to(tx: tokio::sync::mpsc::UnboundedSender<admin::Cmd>) {
    crate::fleet::events::on_config(Box::new(move |from, change, base| {
        let Some(change) = admin::Change::from_json(change) else { return };
        let (reply, rx) = tokio::sync::oneshot::channel();
        let what = format!("{} from the fleet", change.to_json()["op"].as_str().unwrap_or("change"));
        let who = format!("{}{from}", crate::fleet::events::FROM_FLEET);
        if tx.send(admin::Cmd::Change { change, if_match: base, who, what, reply }).is_err() {
            return;
        }
        let from = from.to_string();
        tokio::spawn(async move {
            if let Ok(a) = rx.await {
                if a.status.is_success() {
                    info!(from, "configuration change from the fleet made");
                } else {
                    warn!(from, status = a.status.as_u16(), error = %a.body, "configuration change from the fleet refused here");
                }
            }
        });
    }));
}

/// The admin listener, if configured, and the queue of its configuration API.
type AdminAndApi = (Admin, tokio::sync::mpsc::UnboundedReceiver<admin::Cmd>);

fn start_admin(cfg: &Config, site: &Site) -> Result<Option<AdminAndApi>, String> {
    let Some(a) = &cfg.admin else { return Ok(None) };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    if cfg.fleet.is_some() {
        fleet_changes_to(tx.clone());
    }
    let local = match &a.listen {
        Listen::Tcp(addr) => addr.ip().is_loopback(),
        Listen::Unix(_) => true,
    };
    let verified_clients = a.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
    let link = admin::ApiLink { tx, token: a.token.clone(), local, verified_clients, enabled: a.api };
    Admin::start(a, admin_info(cfg, site, Vec::new()), link)
        .map(|admin| Some((admin, rx)))
        .map_err(|e| format!("cannot listen on the admin address {:?}: {e}", a.listen))
}

/// Automatic HTTPS, if a virtual host asks for it: its storage opened (and given to the
/// `[server]` user, who writes it after the drop).
fn start_acme(cfg: &Config, specs: &[Spec], identity: Option<&Identity>) -> Result<Option<Acme>, String> {
    let on_demand = cfg.tls.iter().any(|t| t.on_demand.is_some());
    let Some(a) = cfg.acme.as_ref().filter(|_| !specs.is_empty() || on_demand) else { return Ok(None) };
    let acme = Acme::new(a, specs).map_err(|e| format!("acme storage: {e}"))?;
    if let Some(id) = identity {
        id.give_tree(acme.storage_root()).map_err(|e| {
            format!("acme storage {}: giving it to {}: {e}", acme.storage_root().display(), id.describe())
        })?;
    }
    Ok(Some(acme))
}

/// Binds every listener, or takes the inherited socket assigned to it.
fn bind(cfg: &Config, settings: Settings, inherited: Vec<Inherited>, acme: Option<&Acme>) -> Result<Bound, String> {
    let mut assigned = service::assign(cfg, inherited);
    let mut names = Vec::new();
    let server = bind_http(cfg, Server::new(settings.clone()), &mut assigned, &mut names);
    let (server, cert_stores) = bind_tls(cfg, server, &mut assigned, &mut names, acme)?;
    let listening = server.listen().map_err(|e| format!("cannot listen on {:?}: {e}", cfg.listen))?;
    let mut redirect_names = Vec::new();
    let redirect = bind_redirect(cfg, settings, &mut assigned, &mut redirect_names)?;
    Ok(Bound { listening, names, cert_stores, redirect, redirect_names })
}

/// A listener with proxy_protocol reads the PROXY header first (whether bound here or
/// inherited); its header names the client only when the peer is one of
/// `proxy_protocol_from`. A listener with `reuse_port` may share its address with other
/// processes.
fn listener_options(cfg: &Config, server: Server, a: &Listen) -> Server {
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
}

/// The cleartext listeners, and the inherited sockets served as cleartext.
fn bind_http(cfg: &Config, mut server: Server, assigned: &mut Assigned, names: &mut Vec<String>) -> Server {
    for (i, a) in cfg.listen.iter().enumerate() {
        let fds = std::mem::take(&mut assigned.http[i]);
        if fds.is_empty() {
            server = listener_options(cfg, server.bind(a.clone()), a);
            names.push(format!("http:{i}"));
        }
        for fd in fds {
            server = listener_options(cfg, server.bind_fd(fd), a);
            names.push(format!("http:{i}"));
        }
    }
    for fd in std::mem::take(&mut assigned.extra_http) {
        server = server.bind_fd(fd);
        names.push("http".into());
    }
    server
}

/// The TLS listeners with their certificate stores, and the inherited sockets served as
/// TLS (with the first listener's certificates).
fn bind_tls(
    cfg: &Config,
    mut server: Server,
    assigned: &mut Assigned,
    names: &mut Vec<String>,
    acme: Option<&Acme>,
) -> Result<(Server, Vec<(TlsListen, selvedge::tls::CertStore)>), String> {
    let mut cert_stores = Vec::new();
    let mut first_tls = None;
    for (i, t) in cfg.tls.iter().enumerate() {
        let (tc, store) = tls_config(cfg, t, acme)?;
        let fds = std::mem::take(&mut assigned.tls[i]);
        let on_demand = match (&t.on_demand, acme) {
            (Some(o), Some(a)) => Some(a.on_demand(o).map_err(|e| format!("on_demand: {e}"))?),
            _ => None,
        };
        let h3 = |server: Server| {
            let server = match &on_demand {
                Some(hook) => server.on_demand(hook.clone()),
                None => server,
            };
            if t.quic {
                http3(server)
            } else {
                server
            }
        };
        if fds.is_empty() {
            server = h3(listener_options(cfg, server.bind_tls(t.addr.clone(), tc.clone()), &t.addr));
            names.push(format!("https:{i}"));
        }
        for fd in fds {
            server = h3(listener_options(cfg, server.bind_fd_tls(fd, tc.clone()), &t.addr));
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
    Ok((server, cert_stores))
}

/// A TLS listener's rustls configuration over its certificate store (with ACME's
/// certificates when there are some).
fn tls_config(
    cfg: &Config,
    t: &TlsListen,
    acme: Option<&Acme>,
) -> Result<(TlsConfig, selvedge::tls::CertStore), String> {
    let certs = load_certs(t, cfg).map_err(|e| format!("tls: {e}"))?;
    let store = selvedge::tls::CertStore::new(certs);
    let store = match acme {
        Some(a) => store.with_managed(a.managed()),
        None => store,
    };
    // Without a default certificate, unknown names are refused.
    let strict_sni = t.strict_sni || t.cert.is_none();
    let mut tc =
        selvedge::tls::server_config_with_store(store.clone(), strict_sni, true).map_err(|e| format!("tls: {e}"))?;
    if let Some(f) = crate::fleet::get() {
        // Session tickets any instance of the fleet opens.
        let mut shared = (*tc).clone();
        shared.ticketer = f.tickets.clone();
        tc = Arc::new(shared);
    }
    Ok((tc, store))
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

/// The listeners that redirect to `https://`, if any (or inherited sockets named so).
fn bind_redirect(
    cfg: &Config,
    settings: Settings,
    assigned: &mut Assigned,
    names: &mut Vec<String>,
) -> Result<Option<Listening>, String> {
    if cfg.redirect.is_empty() && assigned.extra_redirect.is_empty() {
        return Ok(None);
    }
    let mut r = Server::new(settings);
    for (i, a) in cfg.redirect.iter().enumerate() {
        let fds = std::mem::take(&mut assigned.redirect[i]);
        if fds.is_empty() {
            r = r.bind(a.clone());
            if cfg.shared.contains(a) {
                r = r.reuse_port();
            }
            names.push(format!("redirect:{i}"));
        }
        for fd in fds {
            r = r.bind_fd(fd);
            names.push(format!("redirect:{i}"));
        }
    }
    for fd in std::mem::take(&mut assigned.extra_redirect) {
        r = r.bind_fd(fd);
        names.push("redirect".into());
    }
    r.listen().map(Some).map_err(|e| format!("cannot listen on {:?}: {e}", cfg.redirect))
}

/// Serves the redirect listeners: ACME's HTTP-01 answers, else a 301 to `https://`.
fn start_redirect(cfg: &Config, l: Listening, http01: Option<Challenges>) -> Result<ServerHandle, String> {
    let https_port = cfg.tls.iter().find_map(|t| match &t.addr {
        Listen::Tcp(a) => Some(a.port()),
        Listen::Unix(_) => None,
    });
    let app = move |req: selvedge::Request| {
        let answer = http01.as_ref().and_then(|c| c.answer(&req));
        async move { answer.unwrap_or_else(|| redirect_to_https(&req, https_port)) }
    };
    l.start(app).map_err(|e| format!("redirect listener: {e}"))
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

/// Writes the pid file, if configured. A process started by an upgrade only warns when it
/// cannot (the old one's file stays).
fn write_pid_file(cfg: &Config, upgraded: bool) -> Result<(), String> {
    let Some(p) = &cfg.pid_file else { return Ok(()) };
    let written = p
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(p, format!("{}\n", std::process::id())));
    match written {
        Ok(()) => Ok(()),
        Err(e) if upgraded => {
            warn!("pid file {}: {e}", p.display());
            Ok(())
        }
        Err(e) => Err(format!("pid file {}: {e}", p.display())),
    }
}

/// The listeners' URLs, as the startup line and the status page show them.
fn urls(cfg: &Config, names: &[String], handle: &ServerHandle, redirect: Option<&ServerHandle>) -> Vec<String> {
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
    for l in redirect.map_or(&[][..], |r| r.local_addrs()) {
        if let Listen::Tcp(a) = l {
            urls.push(format!("(redirect to https) http://{a}/"));
        }
    }
    urls
}

/// The line that says what serves where.
fn startup_line(cfg: &Config, urls: &[String], routes_served: &str, from_fds: usize, io: &selvedge::IoInUse) -> String {
    let workers = cfg.worker_count();
    format!(
        "listening on {} with {workers} worker{}; serving {routes_served}; config {}, access log {}{}{}",
        urls.join(" "),
        if workers == 1 { "" } else { "s" },
        cfg.file.as_ref().map_or("none".into(), |f| f.display().to_string()),
        match &cfg.log.target {
            LogTarget::Off => "off".to_string(),
            LogTarget::Stdout => "stdout".to_string(),
            LogTarget::File(p) => p.display().to_string(),
        },
        if from_fds > 0 { format!(", {from_fds} inherited sockets") } else { String::new() },
        if *io == selvedge::IoInUse::Uring { ", I/O on io_uring" } else { "" },
    )
}

/// Serving: the status page filled in, `/readyz` ready, ACME and the upstreams' upkeep
/// started, systemd (and an upgrading parent) told.
fn ready(r: &Running, rt: &Runtime, acme_specs: &[Spec]) -> Result<(), String> {
    loaded_now();
    if let Some(a) = &r.admin {
        a.set_info(admin_info(&r.cfg, &r.front.site.load(), r.urls.clone()));
        let scheme = if r.cfg.admin.as_ref().is_some_and(|a| a.tls.is_some()) { "https" } else { "http" };
        for l in a.local_addrs() {
            let shown = match l {
                Listen::Tcp(a) => format!("{scheme}://{a}/"),
                Listen::Unix(p) => format!("unix:{}", p.display()),
            };
            info!("admin listener on {shown} (/metrics /healthz /readyz /status /config)");
        }
    }
    admin::set_state(admin::State::Ready);
    if let Some(f) = crate::fleet::get() {
        let admin = r.admin.as_ref().and_then(|a| a.local_addrs().first()).map(|l| match l {
            Listen::Tcp(a) => format!("http://{a}/"),
            Listen::Unix(p) => format!("unix:{}", p.display()),
        });
        f.set_about(crate::fleet::members::About { listeners: r.urls.clone(), admin });
    }
    if let Some(a) = &r.acme {
        a.start(rt.handle(), acme_specs);
    }
    if !r.cert_stores.is_empty() {
        // OCSP staples for every certificate that names a responder (files and ACME).
        let stores = r.cert_stores.iter().map(|(_, s)| s.clone()).collect();
        let stapler = crate::ocsp::Stapler::new(
            stores,
            r.acme.as_ref().map(|a| a.managed()),
            r.acme.as_ref().map(|a| a.ocsp_keeper()),
        )?;
        rt.spawn(Arc::new(stapler).run());
    }
    // Upstream health checks and re-resolution, off the workers.
    crate::upstream::pool::start_maintenance().map_err(|e| format!("upstream maintenance thread: {e}"))?;
    notify::ready("serving");
    service::tell_upgrading_parent();
    apply_memory_settings(&r.cfg);
    Ok(())
}
