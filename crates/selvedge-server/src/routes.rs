//! Virtual hosts and routes: the `Host` header picks a virtual host (an exact name first,
//! then a `*.example.com` wildcard for one label, else the default host); the request is
//! put under its normalized path ([`crate::path::normalize`], the rules of
//! [`selvedge::path`]), which every later step sees; then the redirect rules run, and the
//! longest path prefix picks a route (prefixes match whole segments). [`Front`] is the app
//! the engine runs: it reads the current [`Site`] from an [`ArcSwap`] on each request (one
//! atomic load and reference-count increment, no lock), so SIGHUP can swap in a new
//! configuration without touching the listeners or any connection.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use selvedge::file::{CacheConfig, FileCache};
use selvedge::http::{header, HeaderValue, StatusCode};
use selvedge::{App, Request, Response};

use crate::access_log::{AccessLog, Outcome, Pending};
use crate::cache::RouteCache;
use crate::config::{Config, RouteKind};
use crate::files::compression::Compression;
use crate::files::StaticFiles;
use crate::lang::matcher::{Match, Matchers};
use crate::lang::template::{Context, Template};
use crate::observe::{Exchange, RequestId};
use crate::path::{prefix_matches, without_parameters};
use crate::policy::forward_auth::{self, ForwardAuth};
use crate::policy::{Admitted, Check, Policy};
use crate::redirect::{self, Redirects};
use crate::respond::RespondConfig;
use crate::upstream::cgi::Cgi;
use crate::upstream::fastcgi::Fastcgi;
use crate::upstream::proxy::Proxy;

/// One route.
#[derive(Debug)]
struct Route {
    prefix: String,
    /// Its name in metrics, logs and the status page: the prefix, and its matchers' names
    /// when it has a `match` (`/api [writes]`).
    label: String,
    /// `match`: of the vhost's matchers, one must hold.
    when: Option<Match>,
    /// `try_files` (a static route's).
    try_files: Vec<Template>,
    app: RouteApp,
    /// Its checks and fields (`None`: it has none, and pays nothing for them).
    policy: Option<Box<Policy>>,
    /// `forward_auth`, asked after the checks of `policy`.
    forward_auth: Option<Box<ForwardAuth>>,
    /// The compressor of a CGI or proxy route that compresses (a static route has its own).
    compress: Option<Compression>,
    /// The HTTP cache in front of a proxy or FastCGI route.
    cache: Option<Box<RouteCache>>,
    /// Its metrics slot ([`crate::metrics::Registry::slot`]).
    slot: u32,
}

impl Route {
    /// A fresh answer from the route's HTTP cache, at once, with what the waiting way adds
    /// to a proxy's or FastCGI app's answer (`header_down`, compression); `None`: the request
    /// waits. `now`: nothing else (forward_auth) must run first.
    #[inline]
    fn cached_now(&self, req: &Request, now: bool) -> Option<Response> {
        let cache = self.cache.as_ref().filter(|_| now)?;
        let mut res = cache.hit_now(req)?;
        if let RouteApp::Proxy(p) = &self.app {
            if let Some(ops) = p.header_down() {
                let id = crate::observe::request_id();
                let values = ops.values(req, id.as_ref().map(RequestId::as_str));
                ops.apply(res.headers_mut(), values);
            }
        }
        Some(match &self.compress {
            Some(c) if req.upgrade().is_none() => c.stream(res, c.choice(req.header("accept-encoding"))),
            _ => res,
        })
    }
}

/// What serves a route.
#[derive(Debug)]
enum RouteApp {
    Static(StaticFiles),
    Cgi(Cgi),
    Fastcgi(Fastcgi),
    Proxy(Proxy),
    Respond(RespondConfig),
}

impl RouteApp {
    /// Serves a CGI, FastCGI or proxy route. Their futures are large (kilobytes of state across
    /// their awaits), so they are boxed: a static file's request, the common case, is
    /// answered without them (see [`Site::respond_now`]) and its future stays small (the
    /// engine allocates each request's future, and a small one comes from malloc's
    /// per-thread cache).
    async fn handle(&self, req: Request) -> Response {
        match self {
            RouteApp::Static(s) => s.respond(&req),
            RouteApp::Respond(r) => r.respond(&req),
            RouteApp::Cgi(c) => Box::pin(c.handle(req)).await,
            RouteApp::Fastcgi(f) => Box::pin(f.handle(req)).await,
            // Boxed inside: only the future of the way it is sent (HTTP/1.1 in the common case).
            RouteApp::Proxy(p) => p.handle(req).await,
        }
    }

    /// The upstream's answer for the HTTP cache (a proxy or FastCGI route's): a function of
    /// its own, so that [`RouteApp::handle`] keeps one caller and stays inlined into the
    /// way of routes without a cache.
    async fn fetch(&self, req: Request) -> Response {
        // Not boxed again: the cache boxes this future whole.
        match self {
            RouteApp::Fastcgi(f) => f.handle(req).await,
            RouteApp::Proxy(p) => p.handle(req).await,
            _ => Response::error(StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    /// Whether a path with an encoded slash (`%2F`) may reach this route: only a proxy's
    /// with `encoded_slashes = "keep"` (the others would read it as a separator, or refuse
    /// it later).
    fn keeps_encoded_slashes(&self) -> bool {
        match self {
            RouteApp::Proxy(p) => p.keeps_encoded_slashes(),
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            RouteApp::Static(s) => s.root().display().to_string(),
            RouteApp::Cgi(c) => format!("cgi {}", c.describe().display()),
            RouteApp::Fastcgi(f) => format!("fastcgi {}", f.describe()),
            RouteApp::Proxy(p) => format!("proxy {}", p.describe()),
            RouteApp::Respond(_) => "respond".into(),
        }
    }
}

/// A virtual host: redirect rules, then routes, longest prefix first (and of one prefix,
/// those with a `match` first, in the file's order).
#[derive(Debug, Default)]
struct Vhost {
    routes: Vec<Route>,
    redirects: Redirects,
    matchers: Matchers,
    /// Whether a route has a `match`.
    conditional: bool,
    /// Its name in metrics and logs: the first host name, or `default`.
    label: String,
    /// The metrics slot of its requests that no route matches.
    none_slot: u32,
}

/// Where a request went, for the metrics and the log.
#[derive(Debug, Clone, Copy)]
pub struct RouteAt<'a> {
    /// The virtual host's label (`none`: no host matched and there is no default).
    pub vhost: &'a str,
    /// The route's prefix (`none`: no route matched).
    pub route: &'a str,
    /// The metrics slot.
    pub slot: u32,
    /// Whether the route is a reverse proxy (its requests carry an id upstream).
    pub proxy: bool,
}

impl Vhost {
    /// The route of `req`: the longest prefix of its path (routes are sorted so) whose
    /// `match`, if it has one, holds. Segments' `;` parameters are left out of the
    /// comparison (`/api;x/internal` is under `/api/internal`): Java servlet containers
    /// drop them, so a proxied application reads the path without them, and its checks
    /// must be the route's that owns that path.
    fn route(&self, req: &Request) -> Option<usize> {
        let path = req.path_bytes();
        if self.conditional {
            return self.route_matched(req, path);
        }
        // A prefix match reads at most the longest prefix and the byte after it, and leaving
        // parameters out changes nothing before the first `;`: only a `;` that early matters.
        let reach = self.routes.first().map_or(0, |r| r.prefix.len()) + 1;
        if path[..path.len().min(reach)].contains(&b';') {
            let plain = without_parameters(path);
            return self.routes.iter().position(|r| prefix_matches(&r.prefix, &plain));
        }
        self.routes.iter().position(|r| prefix_matches(&r.prefix, path))
    }

    /// [`Vhost::route`] in a virtual host with `match` on some route (a matcher reads the
    /// whole path, so any `;` counts).
    fn route_matched(&self, req: &Request, path: &[u8]) -> Option<usize> {
        let plain;
        let path = if path.contains(&b';') {
            plain = without_parameters(path);
            &plain[..]
        } else {
            path
        };
        self.routes.iter().position(|r| {
            prefix_matches(&r.prefix, path) && r.when.as_ref().is_none_or(|w| self.matchers.check(w, req, path))
        })
    }

    /// Where a request routed to `ri` went, for the metrics and the log.
    fn at(&self, ri: usize) -> RouteAt<'_> {
        let r = &self.routes[ri];
        RouteAt { vhost: &self.label, route: &r.label, slot: r.slot, proxy: matches!(r.app, RouteApp::Proxy(_)) }
    }

    /// Runs route `ri`'s `try_files` on `req`: the first entry that names a file (or, ending
    /// in `/`, a directory) the route serves becomes the request's path; else the last
    /// entry does (or its status, `=404`, is the answer). The new path is routed again
    /// (its route's own `try_files` is not run).
    fn try_files(&self, ri: usize, req: &mut Request) -> Result<usize, Response> {
        let route = &self.routes[ri];
        let RouteApp::Static(files) = &route.app else { return Ok(ri) };
        let (last, tries) = route.try_files.split_last().expect("try_files is not empty");
        let mut buf = Vec::new();
        for t in tries {
            buf.clear();
            t.expand(req, Context::Url, None, &mut buf, &mut |s, o| o.extend_from_slice(s.as_bytes()));
            let Ok(target) = std::str::from_utf8(&buf) else { continue };
            let dir = target.split('?').next().is_some_and(|p| p.ends_with('/'));
            let saved = req.target().to_owned();
            if req.set_target(target).is_ok()
                && crate::path::normalize(req).is_ok()
                && prefix_matches(&route.prefix, req.path_bytes())
                && files.exists(req, dir)
            {
                return self.route(req).ok_or_else(not_found);
            }
            req.set_target(&saved).map_err(|_| bad_request())?;
            crate::path::normalize(req).map_err(|_| bad_request())?;
        }
        if let Some(code) = last.literal().and_then(|l| l.strip_prefix('=')) {
            let code = code.parse().ok().and_then(|c| StatusCode::from_u16(c).ok());
            return Err(files.error(code.unwrap_or(StatusCode::NOT_FOUND)));
        }
        buf.clear();
        last.expand(req, Context::Url, None, &mut buf, &mut |s, o| o.extend_from_slice(s.as_bytes()));
        let target = std::str::from_utf8(&buf).map_err(|_| bad_request())?;
        req.set_target(target).map_err(|_| bad_request())?;
        crate::path::normalize(req).map_err(|_| bad_request())?;
        // A new path, as if asked for: the redirect rules see it first (as nginx's server
        // rewrites see an internal redirect).
        if !self.redirects.is_empty() {
            if let redirect::Outcome::Answer(res) = self.redirects.apply(req, &self.matchers) {
                return Err(res);
            }
        }
        self.route(req).ok_or_else(not_found)
    }
}

/// What [`Site::respond_now`] makes of a request: an answer now, or a request that waits.
type Now = Result<Response, Box<Waiting>>;

/// A routed request that waits (CGI, proxy, or a bcrypt check): the site it was routed
/// on, where it goes and what its checks found; [`Site::handle_waiting`] serves it.
#[derive(Debug)]
pub struct Waiting {
    site: Arc<Site>,
    vhost: usize,
    route: usize,
    admitted: Option<Admitted>,
    verify: Option<Box<crate::policy::Pending>>,
    /// The route's `try_files` is still to run (after its checks).
    try_files: bool,
}

/// Everything a configuration serves.
#[derive(Debug)]
pub struct Site {
    vhosts: Vec<Vhost>,
    by_host: HashMap<String, usize>,
    /// Whether `by_host` has `*.` entries.
    wildcards: bool,
    default: Option<usize>,
    /// The metrics slot of requests no virtual host takes.
    none_slot: u32,
}

impl Site {
    /// Builds the routes of `cfg`, with a new file cache.
    ///
    /// # Errors
    /// A route's root is not a directory.
    pub fn build(cfg: &Config) -> io::Result<Site> {
        let cache = FileCache::new(CacheConfig {
            siblings: &["br", "zst", "gz"],
            content_type: Some(crate::files::mime::for_path),
            ..cfg.cache
        });
        let compression = Compression::new(cfg.compress);
        let mut vhosts = Vec::new();
        let mut by_host = HashMap::new();
        let mut default = None;
        for (i, v) in cfg.vhosts.iter().enumerate() {
            let label = v.hosts.first().cloned().unwrap_or_else(|| "default".into());
            let mut routes = Vec::new();
            // Each route's files are its own: the roots of the others nested inside its root
            // are closed to it (crate::files::gate), so a symlink, or a root placed under another,
            // cannot walk past the checks of the route that owns them.
            let roots: Vec<PathBuf> = v.routes.iter().filter_map(|r| r.root()?.canonicalize().ok()).collect();
            for r in &v.routes {
                let app = match &r.kind {
                    RouteKind::Static { root, opts } => RouteApp::Static(
                        StaticFiles::new(root, &r.prefix, opts.clone(), cache.clone())
                            .map_err(|e| {
                                io::Error::new(e.kind(), format!("route {}: root {}: {e}", r.prefix, root.display()))
                            })?
                            .with_nested(&roots)
                            .with_compression(&compression),
                    ),
                    RouteKind::Cgi(c) => RouteApp::Cgi(Cgi::new(c, &r.prefix)?.with_nested(&roots)),
                    RouteKind::Proxy(p) => {
                        RouteApp::Proxy(Proxy::new(p, &r.prefix, &format!("{}{}", v.hosts.join(","), r.prefix))?)
                    }
                    RouteKind::Respond(r) => RouteApp::Respond(r.clone()),
                    RouteKind::Fastcgi(f) => RouteApp::Fastcgi(
                        Fastcgi::new(f, &r.prefix)
                            .map_err(|e| {
                                io::Error::new(
                                    e.kind(),
                                    format!("route {}: fastcgi root {}: {e}", r.prefix, f.root.display()),
                                )
                            })?
                            .with_nested(&roots),
                    ),
                };
                let compress = match app {
                    RouteApp::Static(_) | RouteApp::Respond(_) => None,
                    _ => r.compress.then(|| compression.clone()),
                };
                let route_label = match &r.when {
                    Some(w) => format!("{} [{}]", r.prefix, v.matchers.names(w).join("|")),
                    None => r.prefix.clone(),
                };
                let slot = crate::metrics::registry().slot(&label, &route_label);
                let forward_auth = match &r.forward_auth {
                    Some(f) => Some(Box::new(ForwardAuth::new(f, &format!("{label}{route_label}"))?)),
                    None => None,
                };
                let cache = match &r.cache {
                    Some(c) => Some(Box::new(
                        RouteCache::new(c, &cfg.cache_zones, &v.matchers)
                            .map_err(|e| io::Error::new(e.kind(), format!("route {}: cache: {e}", r.prefix)))?,
                    )),
                    None => None,
                };
                let policy = Policy::new(&r.policy, &format!("{label} {route_label}")).map(Box::new);
                routes.push(Route {
                    forward_auth,
                    cache,
                    prefix: r.prefix.clone(),
                    label: route_label,
                    when: r.when.clone(),
                    try_files: r.try_files.clone(),
                    app,
                    policy,
                    compress,
                    slot,
                });
            }
            routes.sort_by_key(|r| (std::cmp::Reverse(r.prefix.len()), r.when.is_none()));
            let none_slot = crate::metrics::registry().slot(&label, "none");
            let conditional = routes.iter().any(|r| r.when.is_some());
            vhosts.push(Vhost {
                routes,
                redirects: Redirects::new(v.redirects.clone()),
                matchers: v.matchers.clone(),
                conditional,
                label,
                none_slot,
            });
            if v.hosts.is_empty() {
                default = Some(i);
            }
            for h in &v.hosts {
                by_host.insert(h.clone(), i);
            }
        }
        let wildcards = by_host.keys().any(|h| h.starts_with("*."));
        let none_slot = crate::metrics::registry().slot("none", "none");
        // Zones no route uses any more go once the site that used them does.
        let zones: Vec<String> = vhosts
            .iter()
            .flat_map(|v: &Vhost| v.routes.iter().filter_map(|r| r.cache.as_ref().map(|c| c.zone_name())))
            .collect();
        crate::cache::retain_zones(&zones);
        Ok(Site { vhosts, by_host, wildcards, default, none_slot })
    }

    fn vhost(&self, req: &Request) -> Option<usize> {
        if !self.by_host.is_empty() {
            if let Some(auth) = req.authority() {
                let host = match auth.rfind(':') {
                    Some(i) if !auth.ends_with(']') => &auth[..i],
                    _ => auth,
                };
                // A fully qualified name's trailing dot names the same host (`example.com.`).
                let host = host.strip_suffix('.').unwrap_or(host);
                let mut buf = [0u8; 256];
                if host.len() <= buf.len() {
                    for (o, b) in buf.iter_mut().zip(host.bytes()) {
                        *o = b.to_ascii_lowercase();
                    }
                    let lower = std::str::from_utf8(&buf[..host.len()]).unwrap_or("");
                    if let Some(&i) = self.by_host.get(lower).or_else(|| self.wildcard(lower)) {
                        return Some(i);
                    }
                } else {
                    // A longer name (no DNS name is) is looked up the same way, not sent to
                    // the default host past a wildcard host's checks.
                    let lower = host.to_ascii_lowercase();
                    if let Some(&i) = self.by_host.get(&lower).or_else(|| self.wildcard(&lower)) {
                        return Some(i);
                    }
                }
            }
        }
        self.default
    }

    /// The host of a `*.example.com` entry matching `host` (one label in place of `*`, as
    /// in certificates and SNI): only asked when no name matches exactly.
    fn wildcard(&self, host: &str) -> Option<&usize> {
        if !self.wildcards {
            return None;
        }
        let dot = host.find('.')?;
        let rest = &host.as_bytes()[dot..];
        if rest.len() >= 257 {
            return self.by_host.get(&format!("*{}", &host[dot..]));
        }
        let mut key = [0u8; 257];
        key[0] = b'*';
        key[1..=rest.len()].copy_from_slice(rest);
        self.by_host.get(std::str::from_utf8(&key[..=rest.len()]).ok()?)
    }

    /// Answers at once what needs no waiting: redirects, static files, unrouted paths, the
    /// answers of a route's checks. A rewrite changes `req` in place. `Err`: the route is
    /// CGI or a proxy, or a bcrypt check is due ([`Site::handle_waiting`]).
    ///
    /// # Errors
    /// Not an error: the request waits.
    pub fn respond_now(self: &Arc<Site>, req: &mut Request) -> Result<Response, Box<Waiting>> {
        self.respond_now_at(req).1
    }

    /// [`Site::respond_now`], and where the request went (for the metrics and the log; a
    /// redirect rule's answer counts as no route).
    ///
    /// # Errors
    /// Not an error: the request waits.
    pub fn respond_now_at(self: &Arc<Site>, req: &mut Request) -> (RouteAt<'_>, Result<Response, Box<Waiting>>) {
        let Some(vi) = self.vhost(req) else {
            return (RouteAt { vhost: "none", route: "none", slot: self.none_slot, proxy: false }, Ok(not_found()));
        };
        let vhost = &self.vhosts[vi];
        let unrouted = RouteAt { vhost: &vhost.label, route: "none", slot: vhost.none_slot, proxy: false };
        if crate::path::normalize(req).is_err() {
            return (unrouted, Ok(bad_request()));
        }
        if !vhost.redirects.is_empty() {
            if let redirect::Outcome::Answer(res) = vhost.redirects.apply(req, &vhost.matchers) {
                return (unrouted, Ok(res));
            }
        }
        let Some(ri) = vhost.route(req) else { return (unrouted, Ok(not_found())) };
        if vhost.routes[ri].try_files.is_empty() {
            return self.respond_routed(vi, ri, req, None);
        }
        self.respond_trying(vi, ri, req)
    }

    /// [`Site::respond_now_at`] for a route with `try_files`. Its checks run first: what
    /// exists is told only to the requests they admit.
    fn respond_trying(self: &Arc<Site>, vi: usize, ri: usize, req: &mut Request) -> (RouteAt<'_>, Now) {
        let vhost = &self.vhosts[vi];
        let route = &vhost.routes[ri];
        let mut checked = None;
        if let Some(p) = &route.policy {
            match p.check(req) {
                Check::Answer(res) => return (vhost.at(ri), Ok(p.finish(res, None, false))),
                Check::Verify(a, v) => return (vhost.at(ri), self.wait(vi, ri, Some(a), Some(v), true)),
                Check::Pass(a) => checked = Some(a),
            }
        }
        if route.forward_auth.is_some() {
            return (vhost.at(ri), self.wait(vi, ri, checked, None, true));
        }
        match vhost.try_files(ri, req) {
            Ok(next) if next == ri => self.respond_routed(vi, ri, req, checked),
            Ok(next) => self.respond_routed(vi, next, req, None),
            Err(res) => {
                let res = match &route.policy {
                    Some(p) => p.finish(res, checked.as_ref(), false),
                    None => res,
                };
                (vhost.at(ri), Ok(res))
            }
        }
    }

    /// A request that waits for route `ri` ([`Site::handle_waiting`]).
    #[inline(always)]
    fn wait(
        self: &Arc<Site>,
        vi: usize,
        ri: usize,
        admitted: Option<Admitted>,
        verify: Option<Box<crate::policy::Pending>>,
        try_files: bool,
    ) -> Now {
        Err(Box::new(Waiting { site: self.clone(), vhost: vi, route: ri, admitted, verify, try_files }))
    }

    /// The rest of [`Site::respond_now_at`] once the route is `ri`: its checks (unless
    /// `checked` says they passed), then its answer, or the request waits.
    #[inline(always)]
    fn respond_routed(
        self: &Arc<Site>,
        vi: usize,
        ri: usize,
        req: &mut Request,
        checked: Option<Admitted>,
    ) -> (RouteAt<'_>, Now) {
        let vhost = &self.vhosts[vi];
        let route = &vhost.routes[ri];
        // A static route refuses an encoded slash itself (it is no file name's byte).
        if !matches!(route.app, RouteApp::Static(_))
            && !route.app.keeps_encoded_slashes()
            && has_encoded_slash(req.path_bytes())
        {
            let unrouted = RouteAt { vhost: &vhost.label, route: "none", slot: vhost.none_slot, proxy: false };
            return (unrouted, Ok(bad_request()));
        }
        if route.cache.is_some() {
            return self.respond_cached(vi, ri, req, checked);
        }
        let at = vhost.at(ri);
        let now = route.forward_auth.is_none();
        let Some(policy) = &route.policy else {
            return match &route.app {
                RouteApp::Static(s) if now => (at, Ok(s.respond(req))),
                RouteApp::Respond(r) if now => (at, Ok(r.respond(req))),
                _ => (at, self.wait(vi, ri, None, None, false)),
            };
        };
        let check = match checked {
            Some(a) => Check::Pass(a),
            None => policy.check(req),
        };
        let res = match check {
            Check::Answer(res) => Ok(policy.finish(res, None, false)),
            Check::Pass(admitted) => match &route.app {
                RouteApp::Static(s) if now => Ok(policy.finish(s.respond(req), Some(&admitted), true)),
                RouteApp::Respond(r) if now => Ok(policy.finish(r.respond(req), Some(&admitted), false)),
                _ => self.wait(vi, ri, Some(admitted), None, false),
            },
            Check::Verify(admitted, v) => self.wait(vi, ri, Some(admitted), Some(v), false),
        };
        (at, res)
    }

    /// [`Site::respond_routed`] for a route with an HTTP cache: its checks, then a fresh
    /// stored answer at once, or the request waits. A function of its own, out of the way
    /// of routes without a cache.
    #[inline(never)]
    fn respond_cached(
        self: &Arc<Site>,
        vi: usize,
        ri: usize,
        req: &mut Request,
        checked: Option<Admitted>,
    ) -> (RouteAt<'_>, Now) {
        let vhost = &self.vhosts[vi];
        let route = &vhost.routes[ri];
        let at = vhost.at(ri);
        let now = route.forward_auth.is_none();
        let Some(policy) = &route.policy else {
            return match route.cached_now(req, now) {
                Some(res) => (at, Ok(res)),
                None => (at, self.wait(vi, ri, None, None, false)),
            };
        };
        let check = match checked {
            Some(a) => Check::Pass(a),
            None => policy.check(req),
        };
        let res = match check {
            Check::Answer(res) => Ok(policy.finish(res, None, false)),
            Check::Pass(admitted) => match route.cached_now(req, now) {
                Some(res) => Ok(policy.finish(res, Some(&admitted), false)),
                None => self.wait(vi, ri, Some(admitted), None, false),
            },
            Check::Verify(admitted, v) => self.wait(vi, ri, Some(admitted), Some(v), false),
        };
        (at, res)
    }

    /// Serves a request [`Site::respond_now`] left waiting: the bcrypt check, then the app
    /// (routed again after a CGI script's local redirect, with that route's checks).
    pub async fn handle_waiting(mut req: Request, w: Box<Waiting>) -> Response {
        let Waiting { site, vhost: vi, route, admitted, verify, try_files } = *w;
        let vhost = &site.vhosts[vi];
        let (mut ri, mut admitted, mut verify, mut try_files) = (route, admitted, verify, try_files);
        let mut redirects = 0;
        loop {
            let route = &vhost.routes[ri];
            let policy = route.policy.as_deref();
            if let (Some(p), Some(v)) = (policy, verify.take()) {
                if let Some(res) = Box::pin(p.verify(v, &mut req, &mut admitted)).await {
                    return p.finish(res, None, false);
                }
            }
            if let Some(fa) = &route.forward_auth {
                if let forward_auth::Verdict::Answer(res) = Box::pin(fa.check(&mut req)).await {
                    return with_fields(policy, res, None, false);
                }
            }
            if std::mem::take(&mut try_files) {
                let before = route.forward_auth.is_some().then(|| req.target_bytes().to_vec());
                match vhost.try_files(ri, &mut req) {
                    // Another path on the same route: the service is asked about it too
                    // (the route's other checks do not read the path).
                    Ok(next) if next == ri && before.as_deref().is_some_and(|b| b != req.target_bytes()) => continue,
                    Ok(next) if next == ri => {}
                    Ok(next) => {
                        ri = next;
                        if !vhost.routes[ri].app.keeps_encoded_slashes()
                            && !matches!(vhost.routes[ri].app, RouteApp::Static(_))
                            && has_encoded_slash(req.path_bytes())
                        {
                            return bad_request();
                        }
                        match checks_of(&vhost.routes[ri], &mut req) {
                            Ok((a, v)) => (admitted, verify) = (a, v),
                            Err(res) => return res,
                        }
                        continue;
                    }
                    Err(res) => {
                        return with_fields(policy, res, admitted.as_ref(), false);
                    }
                }
            }
            let coding = match &route.compress {
                Some(c) if req.upgrade().is_none() => c.choice(req.header("accept-encoding")),
                _ => Default::default(),
            };
            let res = match &route.app {
                RouteApp::Static(s) => {
                    let res = s.respond(&req);
                    return with_fields(policy, res, admitted.as_ref(), true);
                }
                RouteApp::Respond(r) => {
                    let res = r.respond(&req);
                    return with_fields(policy, res, admitted.as_ref(), false);
                }
                RouteApp::Cgi(c) => match Box::pin(c.run(req, redirects)).await {
                    crate::upstream::cgi::Outcome::Response(res) => res,
                    crate::upstream::cgi::Outcome::Redirect(next) => {
                        (req, redirects) = (next, redirects + 1);
                        if crate::path::normalize(&mut req).is_err() {
                            return bad_request();
                        }
                        let Some(next_ri) = vhost.route(&req) else { return not_found() };
                        if !vhost.routes[next_ri].app.keeps_encoded_slashes() && has_encoded_slash(req.path_bytes()) {
                            return bad_request();
                        }
                        ri = next_ri;
                        match checks_of(&vhost.routes[ri], &mut req) {
                            Ok((a, v)) => (admitted, verify) = (a, v),
                            Err(res) => return res,
                        }
                        continue;
                    }
                },
                RouteApp::Proxy(_) | RouteApp::Fastcgi(_) => {
                    // `header_down`'s values are read from the request before it goes.
                    let down = match &route.app {
                        RouteApp::Proxy(p) => p.header_down().map(|ops| {
                            let id = crate::observe::request_id();
                            (ops, ops.values(&req, id.as_ref().map(RequestId::as_str)))
                        }),
                        _ => None,
                    };
                    let mut res = match &route.cache {
                        Some(cache) => cached(cache, &site, vi, ri, req).await,
                        None => route.app.handle(req).await,
                    };
                    if let Some((ops, values)) = down {
                        ops.apply(res.headers_mut(), values);
                    }
                    res
                }
            };
            let res = match &route.compress {
                Some(c) => c.stream(res, coding),
                None => res,
            };
            return with_fields(policy, res, admitted.as_ref(), false);
        }
    }

    /// Virtual host, route prefix and what serves it, for the status page.
    pub fn describe_routes(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for v in &self.vhosts {
            let mut routes: Vec<&Route> = v.routes.iter().collect();
            routes.sort_by(|a, b| a.prefix.cmp(&b.prefix));
            out.extend(routes.into_iter().map(|r| (v.label.clone(), r.label.clone(), r.app.describe())));
        }
        out
    }

    /// What is served, for the startup line: `PATH → WHAT` per route (`HOST PATH → WHAT`
    /// with named hosts), in order of host and path, at most `max` of them and then how
    /// many more.
    pub fn summary(&self, max: usize) -> String {
        let named = self.vhosts.iter().any(|v| v.label != "default");
        let mut items: Vec<String> = Vec::new();
        for (host, prefix, what) in self.describe_routes() {
            let item = match named {
                true => format!("{host} {prefix} → {what}"),
                false => format!("{prefix} → {what}"),
            };
            if !items.contains(&item) {
                items.push(item);
            }
        }
        let more = items.len().saturating_sub(max);
        items.truncate(max);
        let mut out = items.join(", ");
        if more > 0 {
            out.push_str(&format!(" and {more} more"));
        }
        out
    }
}

/// `req` through route `ri`'s HTTP cache, which fetches from the route's app (boxed: the
/// cache's state stays out of the futures of routes without one).
fn cached<'c>(
    cache: &'c RouteCache,
    site: &Arc<Site>,
    vi: usize,
    ri: usize,
    req: Request,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send + 'c>> {
    let site = site.clone();
    let fetch: crate::cache::Fetch = Arc::new(move |req| {
        let site = site.clone();
        Box::pin(async move { site.vhosts[vi].routes[ri].app.fetch(req).await })
    });
    Box::pin(cache.serve(req, fetch))
}

/// The checks of `route` on a request routed to it again (after `try_files` or a CGI
/// script's local redirect): what they admit and the bcrypt check still due, or their
/// answer.
#[allow(clippy::type_complexity)]
fn checks_of(
    route: &Route,
    req: &mut Request,
) -> Result<(Option<Admitted>, Option<Box<crate::policy::Pending>>), Response> {
    match route.policy.as_deref().map(|p| (p, p.check(req))) {
        None => Ok((None, None)),
        Some((p, Check::Answer(res))) => Err(p.finish(res, None, false)),
        Some((_, Check::Pass(a))) => Ok((Some(a), None)),
        Some((_, Check::Verify(a, v))) => Ok((Some(a), Some(v))),
    }
}

/// `res` with the route's fields ([`Policy::finish`]), if it has any.
fn with_fields(policy: Option<&Policy>, res: Response, admitted: Option<&Admitted>, fixed_done: bool) -> Response {
    match policy {
        Some(p) => p.finish(res, admitted, fixed_done),
        None => res,
    }
}

fn not_found() -> Response {
    Response::error(StatusCode::NOT_FOUND)
}

fn bad_request() -> Response {
    Response::error(StatusCode::BAD_REQUEST)
}

/// Whether a normalized path has an encoded slash: in a normal path every `%` begins a
/// three-byte escape, so a `%2F` found is one.
#[inline]
fn has_encoded_slash(path: &[u8]) -> bool {
    path.contains(&b'%') && path.windows(3).any(|w| w == b"%2F")
}

/// Error pages of the default host's routes, in memory, for the answers the engine gives
/// on its own (400, 413, 414, 431, 500...): swapped on reload like the site.
pub type EnginePages = Arc<ArcSwap<HashMap<u16, (Bytes, &'static str)>>>;

/// The largest error page read into memory for the engine's own answers.
pub const MAX_ERROR_PAGE: u64 = 1 << 20;

/// Reads the default virtual host's error pages (unreadable ones, and anything but a
/// regular file of at most [`MAX_ERROR_PAGE`] bytes, are skipped).
pub fn engine_pages(cfg: &Config) -> HashMap<u16, (Bytes, &'static str)> {
    let mut out = HashMap::new();
    for v in cfg.vhosts.iter().filter(|v| v.hosts.is_empty()) {
        for r in &v.routes {
            for (code, path) in r.static_opts().map(|o| &o.error_pages).into_iter().flatten() {
                if let Ok(b) = crate::files::read_small(path, MAX_ERROR_PAGE) {
                    out.entry(*code).or_insert((Bytes::from(b), crate::files::mime::for_path(path)));
                }
            }
        }
    }
    out
}

/// The engine hook serving [`EnginePages`] (the engine's plain text otherwise).
pub fn error_hook(pages: EnginePages) -> selvedge::ErrorResponseHook {
    Arc::new(move |status: StatusCode, _err: &selvedge::Error| match pages.load().get(&status.as_u16()) {
        Some((body, mime)) => Response::bytes(status, body.clone()).header(header::CONTENT_TYPE, *mime),
        None => Response::error(status),
    })
}

/// The app the engine runs: the current site, plus the access log and HSTS.
#[derive(Debug, Clone)]
pub struct Front {
    /// The site, swapped on reload.
    pub site: Arc<ArcSwap<Site>>,
    /// The access log, if on.
    pub log: Arc<ArcSwap<Option<AccessLog>>>,
    /// Error pages for the engine's own answers.
    pub pages: EnginePages,
    /// `Strict-Transport-Security` added to responses over TLS, if set.
    pub hsts: Option<HeaderValue>,
    /// Which `Front` this is (for the per-thread cache below; never reused).
    id: u64,
    /// Bumped by [`Front::swap`] once a reload has stored its site and log.
    generation: Arc<AtomicU64>,
}

/// A worker thread's copy of the site and log it serves with: requests read one counter
/// instead of two `ArcSwap` loads (measured: ~270 instructions per request).
struct Current {
    id: u64,
    generation: u64,
    site: Arc<Site>,
    log: Option<AccessLog>,
}

thread_local! {
    static CURRENT: std::cell::RefCell<Option<Current>> = const { std::cell::RefCell::new(None) };
}

impl Front {
    /// The app for `site`, with its error pages, access log and HSTS value.
    pub fn new(
        site: Site,
        pages: HashMap<u16, (Bytes, &'static str)>,
        log: Option<AccessLog>,
        hsts: Option<HeaderValue>,
    ) -> Front {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Front {
            site: Arc::new(ArcSwap::from_pointee(site)),
            log: Arc::new(ArcSwap::from_pointee(log)),
            pages: Arc::new(ArcSwap::from_pointee(pages)),
            hsts,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Installs a reloaded configuration's site, error pages and access log. Each worker
    /// thread picks them up on its next request (until then it keeps the old ones alive).
    pub fn swap(&self, site: Site, pages: HashMap<u16, (Bytes, &'static str)>, log: Option<AccessLog>) {
        self.site.store(Arc::new(site));
        self.pages.store(Arc::new(pages));
        self.log.store(Arc::new(log));
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Runs `f` with the current site and log (this thread's copy, renewed after a swap).
    fn with_current<R>(&self, f: impl FnOnce(&Arc<Site>, &Option<AccessLog>) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = matches!(&*c, Some(cur) if cur.id == self.id && cur.generation == generation);
            if !fresh {
                let log = Option::clone(&self.log.load());
                *c = Some(Current { id: self.id, generation, site: self.site.load_full(), log });
            }
            let cur = c.as_ref().expect("set above");
            f(&cur.site, &cur.log)
        })
    }
}

/// What [`Front::handle`] does after its synchronous part.
enum First {
    /// No metrics, a log without timing: the request as before observability.
    Plain(Option<AccessLog>, Option<Pending>, Result<Response, Box<Waiting>>),
    /// Answered and recorded.
    Done(Response),
    /// A request that waits, observed.
    Wait(Box<Observing>),
}

/// An observed request's state while it waits.
struct Observing {
    obs: Observed,
    log: Option<AccessLog>,
    pending: Option<Pending>,
    waiting: Box<Waiting>,
    vhost: String,
    route: String,
    slot: u32,
}

impl App for Front {
    async fn handle(&self, mut req: Request) -> Response {
        let metrics = crate::metrics::enabled();
        let hsts = if req.is_secure() { self.hsts.clone() } else { None };
        // Static files are answered right here; only CGI and proxy routes (and bcrypt
        // checks) wait (boxed), with the site they were routed on.
        let first = self.with_current(|site, log| {
            let observed = metrics || log.as_ref().is_some_and(AccessLog::observes);
            if !observed {
                let Some(log) = log else {
                    // No log and no metrics: the answer as it comes (nothing carried past it).
                    return match site.respond_now(&mut req) {
                        Ok(res) => First::Done(res),
                        Err(w) => First::Plain(None, None, Err(w)),
                    };
                };
                let pending = Some(log.begin(&req));
                return First::Plain(Some(log.clone()), pending, site.respond_now(&mut req));
            }
            let obs = Observed::of(&req);
            let pending = log.as_ref().map(|l| l.begin(&req));
            let (at, now) = site.respond_now_at(&mut req);
            match now {
                // Metrics alone: counted as the answer comes (no exchange, no log line).
                Ok(res) if log.is_none() => First::Done(obs.count(&at, res, None, obs.ttfb_us())),
                Ok(res) => {
                    let ex = Exchange {
                        request_id: log
                            .as_ref()
                            .filter(|l| l.format().needs_request_id())
                            .map(|l| RequestId::for_request(&req, l.trust_request_id())),
                        upstream: None,
                    };
                    First::Done(obs.record(&at, res, log.as_ref().zip(pending), &ex))
                }
                Err(waiting) => First::Wait(Box::new(Observing {
                    obs,
                    log: log.clone(),
                    pending,
                    waiting,
                    vhost: at.vhost.to_owned(),
                    route: at.route.to_owned(),
                    slot: at.slot,
                })),
            }
        });
        let mut res = match first {
            First::Done(res) => res,
            // Boxed: the future the engine keeps per connection stays small (see `AppSlot`).
            First::Wait(o) => Box::pin(wait_observed(req, o)).await,
            First::Plain(log, pending, now) => {
                let mut res = match now {
                    Ok(res) => res,
                    Err(w) => {
                        let ex = Exchange { request_id: Some(RequestId::for_request(&req, false)), upstream: None };
                        Box::pin(crate::observe::scope(ex, Site::handle_waiting(req, w))).await.0
                    }
                };
                if let (Some(log), Some(p)) = (&log, pending) {
                    log.finish(p, &res);
                }
                if let Some(v) = hsts {
                    res = res.header(header::STRICT_TRANSPORT_SECURITY, v);
                }
                return res;
            }
        };
        if let Some(v) = hsts {
            res = res.header(header::STRICT_TRANSPORT_SECURITY, v);
        }
        res
    }
}

/// A CGI or proxy request (or one with a bcrypt check), observed: run inside an
/// [`Exchange`] (its request id, the upstream's report), then recorded.
async fn wait_observed(req: Request, o: Box<Observing>) -> Response {
    let Observing { obs, log, pending, waiting, vhost, route, slot } = *o;
    let trust = log.as_ref().is_some_and(AccessLog::trust_request_id);
    let ex = Exchange { request_id: Some(RequestId::for_request(&req, trust)), upstream: None };
    let (res, ex) = crate::observe::scope(ex, Site::handle_waiting(req, waiting)).await;
    let at = RouteAt { vhost: &vhost, route: &route, slot, proxy: false };
    obs.record(&at, res, log.as_ref().zip(pending), &ex)
}

/// The request's side of a sample, taken before the app consumes it.
#[derive(Debug, Clone, Copy)]
struct Observed {
    /// [`selvedge::time::monotonic_ns`] when the app got the request.
    start: u64,
    method: u8,
    protocol: u8,
    head: bool,
    body_in: u64,
}

impl Observed {
    #[inline]
    fn of(req: &Request) -> Observed {
        let method = crate::metrics::method_class(req.method());
        // GET and HEAD (method classes 0 and 1) have no body to count.
        let body_in = if method <= 1 {
            0
        } else {
            req.header("content-length").and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
        };
        Observed {
            start: selvedge::time::monotonic_ns(),
            method,
            protocol: crate::metrics::protocol(req.version()),
            head: method == 1,
            body_in,
        }
    }

    /// The sample and the log's outcome for `res`, answered now.
    fn record<'a>(
        &self,
        at: &RouteAt<'a>,
        res: Response,
        log: Option<(&AccessLog, Pending)>,
        ex: &'a Exchange,
    ) -> Response {
        let ttfb = self.ttfb_us();
        let Some((log, p)) = log else {
            return self.count(at, res, ex.upstream.as_ref(), ttfb);
        };
        // The log line is written now: its duration is the time to the response head.
        let o = Outcome {
            vhost: at.vhost,
            route: at.route,
            ttfb_us: ttfb,
            duration_us: ttfb,
            upstream: ex.upstream.as_ref(),
            request_id: ex.request_id.as_ref().map(RequestId::as_str),
        };
        log.finish_with(p, &res, &o);
        self.count(at, res, ex.upstream.as_ref(), ttfb)
    }

    /// Microseconds from the request to now.
    #[inline]
    fn ttfb_us(&self) -> u64 {
        selvedge::time::monotonic_ns().saturating_sub(self.start) / 1000
    }

    /// Counts `res` in the metrics (if they are on): the request, its time to first byte
    /// (`ttfb`, µs), and its duration, now for a body in memory (it goes out with its head),
    /// else when the engine reports the body's end ([`finished`]).
    #[inline]
    fn count(
        &self,
        at: &RouteAt<'_>,
        res: Response,
        upstream: Option<&crate::observe::Upstream>,
        ttfb: u64,
    ) -> Response {
        if !crate::metrics::enabled() {
            return res;
        }
        let deferred =
            !self.head && matches!(res.body(), selvedge::ResponseBody::File(_) | selvedge::ResponseBody::Stream(_));
        let body_out = crate::access_log::format::body_size(self.head, &res).unwrap_or(0);
        crate::metrics::registry().record(
            at.slot,
            &crate::metrics::Sample {
                method: self.method,
                status: res.status().as_u16(),
                protocol: self.protocol,
                body_in: self.body_in,
                body_out,
                ttfb_us: ttfb,
                duration_us: (!deferred).then_some(ttfb),
                upstream: upstream.map(|u| (u.time.as_micros() as u64, u.failed)),
            },
        );
        if deferred {
            res.on_finish(finished, [self.start, u64::from(at.slot)])
        } else {
            res
        }
    }
}

/// The engine's report that a response ended (`tag`: its start, in
/// [`selvedge::time::monotonic_ns`], and its route's slot): its duration to the last byte
/// (or to where it was abandoned) goes into the route's histogram.
fn finished(_complete: bool, tag: [u64; 2]) {
    let us = selvedge::time::monotonic_ns().saturating_sub(tag[0]) / 1000;
    crate::metrics::registry().record_duration(tag[1] as u32, us);
}

#[cfg(test)]
mod tests {
    use super::{prefix_matches, without_parameters};

    #[test]
    fn prefixes() {
        assert!(prefix_matches("/", b"/anything"));
        assert!(prefix_matches("/a", b"/a"));
        assert!(prefix_matches("/a", b"/a/b"));
        assert!(!prefix_matches("/a", b"/ab"));
        assert!(prefix_matches("/a/", b"/a/b"));
        assert!(!prefix_matches("/a/", b"/a"));
        assert_eq!(without_parameters(b"/a;x/b;y;z/c/;w"), b"/a/b/c/");
        assert_eq!(without_parameters(b"/a/b"), b"/a/b");
        assert_eq!(without_parameters(b"/app/;x/internal/y"), b"/app/internal/y");
        assert_eq!(without_parameters(b"/app/;/;a=b/internal"), b"/app/internal");
        assert_eq!(without_parameters(b"/;x"), b"/");
        assert_eq!(without_parameters(b"/"), b"/");
    }

    /// The engine keeps a connection's app future allocated between requests when it is at
    /// most 1 KiB (`AppSlot`); a larger one costs a malloc and a free per request (~700
    /// instructions on `bench/callgrind.sh server`). Waiting routes box their state.
    #[test]
    fn handle_future_fits_the_engine_slot() {
        use super::{App, Front};
        use selvedge::Request;
        fn future_size<'a, F: Fn(&'a Front, Request) -> R, R>(_: F) -> usize {
            std::mem::size_of::<R>()
        }
        let n = future_size(<Front as App>::handle);
        eprintln!("Front::handle's future: {n} bytes");
        assert!(n <= 1024, "Front::handle's future is {n} bytes, over the engine's 1024");
    }
}
