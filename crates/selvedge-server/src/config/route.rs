//! `[[vhost.route]]`: a path prefix, what serves it (static files, CGI, FastCGI or a proxy,
//! each checked by its own module) and the checks and fields around it ([`crate::policy`]).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};
use crate::files::StaticOptions;
use crate::lang::headers::HeaderOps;
use crate::lang::matcher::{Match, Matchers, RawMatch};
use crate::lang::template::Template;
use crate::policy::{self, PolicyConfig};
use crate::respond::{RawRespond, RespondConfig};
use crate::units::{Count, Dur, Size};
use crate::upstream::cgi::{CgiConfig, RawCgi};
use crate::upstream::fastcgi::{FastcgiConfig, RawFastcgi};
use crate::upstream::proxy::{ProxyConfig, ProxyContext, RawProxy};

/// One route: requests whose path starts with `prefix` (and that its `match` admits) are
/// served by `kind`.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    /// Path prefix (starts with `/`).
    pub prefix: String,
    /// `match`: the matchers of which one must hold (of the vhost's [`Matchers`]).
    pub when: Option<Match>,
    /// `try_files`: paths tried in order under a static route's root, the last one the
    /// internal rewrite when none is a file.
    pub try_files: Vec<Template>,
    /// What serves it.
    pub kind: RouteKind,
    /// Checks and fields around it (`allow`, `rate`, `auth`, `headers`...).
    pub policy: PolicyConfig,
    /// Compress its responses on the fly (`compress`, on by default).
    pub compress: bool,
    /// `forward_auth`: an authentication service asked about each request.
    pub forward_auth: Option<crate::policy::forward_auth::ForwardAuthConfig>,
    /// `cache`: the HTTP cache in front of a proxy or FastCGI route.
    pub cache: Option<crate::cache::RouteCacheConfig>,
}

/// What serves a route: exactly one of `root`, `cgi`, `fastcgi`, `proxy` or `respond` in
/// the file.
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
    Cgi(CgiConfig),
    /// A reverse proxy to an HTTP/1.1 upstream.
    Proxy(Box<ProxyConfig>),
    /// A FastCGI application (php-fpm...).
    Fastcgi(FastcgiConfig),
    /// A fixed answer (`respond`).
    Respond(RespondConfig),
}

impl RouteConfig {
    /// The directory it serves from, if it has one (static, CGI, FastCGI).
    pub fn root(&self) -> Option<&Path> {
        match &self.kind {
            RouteKind::Static { root, .. } => Some(root),
            RouteKind::Cgi(c) => Some(&c.dir),
            RouteKind::Fastcgi(f) => Some(&f.root),
            RouteKind::Proxy(_) | RouteKind::Respond(_) => None,
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

/// What a route takes from the rest of the file.
pub(super) struct RouteContext {
    /// `[cache] max_age`: static routes' default.
    pub(super) max_age: Option<Dur>,
    /// `[server]`'s settings for proxy routes.
    pub(super) proxy: ProxyContext,
    /// The HTTP cache's `[[cache]]` zones.
    pub(super) zones: Vec<crate::cache::ZoneConfig>,
}

/// `[cache]` (`max_age`, and zones as `[[cache.zone]]`), or the zones alone as `[[cache]]`.
pub(super) enum RawCache {
    Table(RawCacheSection),
    Zones(Vec<Spanned<crate::cache::RawCacheTable>>),
}

impl<'de> Deserialize<'de> for RawCache {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawCache;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("[cache] (max_age) or [[cache]] zones")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawCache, A::Error> {
                let mut v = Vec::new();
                while let Some(z) = seq.next_element()? {
                    v.push(z);
                }
                Ok(RawCache::Zones(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawCache, A::Error> {
                RawCacheSection::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(RawCache::Table)
            }
        }
        d.deserialize_any(V)
    }
}

impl Default for RawCache {
    fn default() -> Self {
        RawCache::Table(RawCacheSection::default())
    }
}

impl RawCache {
    pub(super) fn max_age(&self) -> Option<Dur> {
        match self {
            RawCache::Table(t) => t.max_age,
            RawCache::Zones(_) => None,
        }
    }

    /// The HTTP cache's zones, checked.
    pub(super) fn zones(&self, src: &Source<'_>) -> Result<Vec<crate::cache::ZoneConfig>, ConfigError> {
        let list = match self {
            RawCache::Table(t) => &t.zone,
            RawCache::Zones(z) => z,
        };
        let mut out: Vec<crate::cache::ZoneConfig> = Vec::new();
        for z in list {
            let raw = z.get_ref();
            let Some(name) = raw.name.clone().filter(|n| !n.is_empty()) else {
                return Err(src.err(Some(z.span()), "a [[cache]] zone needs a `name`".into()));
            };
            let route_only =
                [("zone", raw.zone.is_some()), ("bypass", raw.bypass.is_some()), ("no_store", raw.no_store.is_some())];
            if let Some((k, _)) = route_only.iter().find(|(_, set)| *set) {
                return Err(src
                    .err(Some(z.span()), format!("cache `{k}` is a route's (`cache = {{ zone = ..., {k} = ... }}`)")));
            }
            if out.iter().any(|o| o.name == name) {
                return Err(src.err(Some(z.span()), format!("cache zone {name:?} is defined twice")));
            }
            let abs = |p: &str| src.abs(p);
            let zc = crate::cache::ZoneConfig::from_raw(raw, name, &abs).map_err(|e| src.err(Some(z.span()), e))?;
            if let Some(o) = out.iter().find(|o| o.path.is_some() && o.path == zc.path) {
                return Err(src.err(
                    Some(z.span()),
                    format!(
                        "cache zone {:?}: path is zone {:?}'s too (each zone needs a directory of its own)",
                        zc.name, o.name
                    ),
                ));
            }
            out.push(zc);
        }
        Ok(out)
    }
}

/// `[cache]` as a table.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCacheSection {
    pub(super) max_age: Option<Dur>,
    #[serde(default)]
    pub(super) zone: Vec<Spanned<crate::cache::RawCacheTable>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    path: String,
    #[serde(rename = "match")]
    when: Option<Spanned<RawMatch>>,
    respond: Option<Spanned<toml::Value>>,
    try_files: Option<Spanned<Vec<String>>>,
    root: Option<Spanned<String>>,
    cgi: Option<Spanned<RawCgi>>,
    proxy: Option<Spanned<RawProxy>>,
    fastcgi: Option<Spanned<RawFastcgi>>,
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
    headers: Option<Spanned<BTreeMap<String, String>>>,
    cors: Option<Spanned<policy::cors::RawCors>>,
    auth: Option<Spanned<policy::auth::RawAuth>>,
    allow: Option<Vec<Spanned<String>>>,
    deny: Option<Vec<Spanned<String>>>,
    max_body: Option<Size>,
    rate: Option<Spanned<policy::rate::RawRate>>,
    forward_auth: Option<Spanned<policy::forward_auth::RawForwardAuth>>,
    cache: Option<Spanned<crate::cache::RawRouteCache>>,
}

/// A route: its prefix, policy and what serves it.
pub(super) fn route(
    src: &Source<'_>,
    raw: Spanned<RawRoute>,
    ctx: &RouteContext,
    matchers: &mut Matchers,
) -> Result<RouteConfig, ConfigError> {
    let span = raw.span();
    let r = raw.into_inner();
    if !r.path.starts_with('/') {
        return Err(src.err(Some(span), format!("route path {:?} must start with '/'", r.path)));
    }
    let prefix = route_prefix(&r.path).map_err(|e| src.err(Some(span.clone()), e))?;
    let when = match &r.when {
        Some(m) => {
            Some(matchers.resolve(m.get_ref(), &format!("route {prefix}")).map_err(|e| src.err(Some(m.span()), e))?)
        }
        None => None,
    };
    let mut try_files = Vec::new();
    if let Some(t) = &r.try_files {
        if r.root.is_none() {
            return Err(src.err(Some(t.span()), "`try_files` applies to static routes (`root`)".into()));
        }
        if t.get_ref().is_empty() {
            return Err(src.err(Some(t.span()), "try_files: at least one path".into()));
        }
        for entry in t.get_ref() {
            let tm =
                Template::parse(entry, matchers).map_err(|e| src.err(Some(t.span()), format!("try_files: {e}")))?;
            let last = std::ptr::eq(entry, t.get_ref().last().expect("not empty"));
            let status =
                last && entry.starts_with('=') && entry[1..].parse::<u16>().is_ok_and(|s| (400..600).contains(&s));
            if !status && !entry.starts_with(['/', '{']) {
                return Err(src.err(
                    Some(t.span()),
                    format!(
                        "try_files {entry:?}: a path (\"{{path}}\", \"/index.html\") or, last, a status (\"=404\")"
                    ),
                ));
            }
            try_files.push(tm);
        }
    }
    let policy = route_policy(src, &r).map_err(|(sp, e)| src.err(Some(sp.unwrap_or(span.clone())), e))?;
    let static_only = [
        ("listing", r.listing.is_some()),
        ("listing_max", r.listing_max.is_some()),
        ("fallback", r.fallback.is_some()),
    ];
    if r.root.is_none() {
        if let Some((key, _)) = static_only.iter().find(|(_, set)| *set) {
            return Err(src.err(Some(span), format!("`{key}` applies to static routes (`root`)")));
        }
    }
    let abs = |p: &str| src.abs(p);
    let kind = match (&r.root, &r.cgi, &r.proxy, &r.fastcgi, &r.respond) {
        (Some(root), None, None, None, None) => static_route(src, &r, &span, root, ctx.max_age, &policy)?,
        (None, Some(c), None, None, None) => {
            RouteKind::Cgi(CgiConfig::from_raw(c.get_ref(), &abs).map_err(|e| src.err(Some(c.span()), e))?)
        }
        (None, None, Some(p), None, None) => {
            RouteKind::Proxy(Box::new(proxy(p, ctx, matchers).map_err(|e| src.err(Some(p.span()), e))?))
        }
        (None, None, None, Some(f), None) => {
            RouteKind::Fastcgi(FastcgiConfig::from_raw(f.get_ref(), &abs).map_err(|e| src.err(Some(f.span()), e))?)
        }
        (None, None, None, None, Some(rs)) => {
            let raw = RawRespond::from_value(rs.get_ref()).map_err(|e| src.err(Some(rs.span()), e))?;
            let route_type = policy
                .headers
                .set
                .iter()
                .find(|(n, _)| n == selvedge::http::header::CONTENT_TYPE)
                .map(|(_, v)| v.to_str().unwrap_or("application/octet-stream"));
            RouteKind::Respond(
                RespondConfig::from_raw(&raw, matchers, route_type).map_err(|e| src.err(Some(rs.span()), e))?,
            )
        }
        _ => {
            return Err(src.err(
                Some(span),
                "a route needs exactly one of `root`, `cgi`, `fastcgi`, `proxy` or `respond`".into(),
            ));
        }
    };
    let forward_auth = match &r.forward_auth {
        Some(f) => Some(
            policy::forward_auth::ForwardAuthConfig::from_raw(f.get_ref(), &ctx.proxy)
                .map_err(|e| src.err(Some(f.span()), e))?,
        ),
        None => None,
    };
    let cache = match &r.cache {
        Some(c) if !matches!(kind, RouteKind::Proxy(_) | RouteKind::Fastcgi(_)) => {
            return Err(src.err(Some(c.span()), "`cache` applies to proxy and FastCGI routes".into()));
        }
        Some(c) => {
            let abs = |p: &str| src.abs(p);
            Some(
                crate::cache::RouteCacheConfig::from_raw(c.get_ref(), &ctx.zones, matchers, &prefix, &abs)
                    .map_err(|e| src.err(Some(c.span()), e))?,
            )
        }
        None => None,
    };
    Ok(RouteConfig { prefix, when, try_files, kind, policy, compress: r.compress.unwrap_or(true), forward_auth, cache })
}

/// A proxy route's table, with its header rewriting and upstream path.
fn proxy(p: &Spanned<RawProxy>, ctx: &RouteContext, matchers: &Matchers) -> Result<ProxyConfig, String> {
    let raw = p.get_ref();
    let mut cfg = ProxyConfig::from_raw(raw, &ctx.proxy)?;
    if let Some(up) = &raw.header_up {
        cfg.header_up = HeaderOps::from_raw(up, true, matchers).map_err(|e| format!("proxy header_up: {e}"))?;
        if cfg.header_up.host().is_some() && raw.host.is_some() {
            return Err("proxy: `host` or header_up's Host, not both".into());
        }
    }
    if let Some(down) = &raw.header_down {
        cfg.header_down = HeaderOps::from_raw(down, false, matchers).map_err(|e| format!("proxy header_down: {e}"))?;
    }
    if let Some(path) = &raw.path {
        if !path.starts_with(['/', '{']) {
            return Err(format!("proxy path {path:?}: the path sent upstream (\"/v2{{path}}\")"));
        }
        if raw.strip_prefix.is_some() {
            return Err("proxy: `path` or `strip_prefix`, not both (`path` writes the whole path)".into());
        }
        cfg.path = Some(Template::parse(path, matchers).map_err(|e| format!("proxy path: {e}"))?);
    }
    Ok(cfg)
}

/// A static route: its directory (which must be one) and options.
fn static_route(
    src: &Source<'_>,
    r: &RawRoute,
    span: &Range<usize>,
    root: &Spanned<String>,
    max_age: Option<Dur>,
    policy: &PolicyConfig,
) -> Result<RouteKind, ConfigError> {
    let root_span = root.span();
    let root = src.abs(root.get_ref());
    if !root.is_dir() {
        return Err(src.err(Some(root_span), format!("root {} is not a directory", root.display())));
    }
    let mut opts = StaticOptions::default();
    if let Some(i) = &r.index {
        let plain = |n: &String| !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\0']);
        if let Some(bad) = i.iter().find(|n| !plain(n)) {
            return Err(src.err(None, format!("index {bad:?}: a file name, without '/'")));
        }
        opts.index = i.clone();
    }
    opts.dotfiles = r.dotfiles.unwrap_or(opts.dotfiles);
    opts.symlinks_outside = r.symlinks_outside.unwrap_or(opts.symlinks_outside);
    opts.precompressed = r.precompressed.unwrap_or(opts.precompressed);
    opts.max_age = r.max_age.or(max_age).map(|d| d.get().as_secs());
    opts.listing = r.listing.unwrap_or(false);
    opts.listing_max = r.listing_max.map_or(opts.listing_max, Count::get_usize);
    opts.compress = r.compress.unwrap_or(true);
    opts.fields = policy::Policy::fixed_fields(policy);
    if let Some(f) = &r.fallback {
        opts.fallback = Some(fallback(f).map_err(|e| src.err(Some(f.span()), e))?);
    }
    for (code, page) in r.error_pages.iter().flatten() {
        let n: u16 = match code.parse() {
            Ok(n) if (400..600).contains(&n) => n,
            _ => return Err(src.err(Some(span.clone()), format!("error page status {code:?} is not 400..599"))),
        };
        opts.error_pages.insert(n, src.abs(page));
    }
    Ok(RouteKind::Static { root, opts })
}

/// A static route's `fallback`: a file under the root, written from `/`.
fn fallback(f: &Spanned<String>) -> Result<String, String> {
    let rel = f.get_ref().trim_start_matches('/');
    let bad = !f.get_ref().starts_with('/')
        || rel.is_empty()
        || rel.split('/').any(|s| s.is_empty() || s == "." || s == "..")
        || rel.contains(['\\', '\0']);
    if bad {
        return Err(format!("fallback {:?}: a file under the root (\"/index.html\")", f.get_ref()));
    }
    Ok(f.get_ref().clone())
}

/// A route's checks and fields ([`crate::policy`]), or the position and reason of an error.
fn route_policy(src: &Source<'_>, r: &RawRoute) -> Result<PolicyConfig, (Option<Range<usize>>, String)> {
    let mut p = PolicyConfig::default();
    for (list, out) in [(&r.allow, &mut p.ip.allow), (&r.deny, &mut p.ip.deny)] {
        for entry in list.iter().flatten() {
            out.push(crate::client::parse_net(entry.get_ref()).map_err(|e| (Some(entry.span()), e))?);
        }
    }
    if let Some(h) = &r.headers {
        p.headers = policy::HeaderRules::from_raw(h.get_ref()).map_err(|e| (Some(h.span()), e))?;
    }
    if let Some(c) = &r.cors {
        p.cors = Some(policy::cors::CorsConfig::from_raw(c.get_ref()).map_err(|e| (Some(c.span()), e))?);
    }
    if let Some(a) = &r.auth {
        let abs = |p: &str| src.abs(p);
        p.auth = Some(policy::auth::AuthConfig::from_raw(a.get_ref(), &abs).map_err(|e| (Some(a.span()), e))?);
    }
    if let Some(rt) = &r.rate {
        p.rate = Some(policy::rate::RateConfig::from_raw(rt.get_ref()).map_err(|e| (Some(rt.span()), e))?);
    }
    p.max_body = r.max_body.map(Size::get);
    Ok(p)
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
    if out.contains(&b';') {
        return Err(format!(
            "route path {path:?}: routes are matched with `;` parameters left out, so a route's path cannot hold one"
        ));
    }
    if out.len() > 1 && out.ends_with(b"/") {
        out.pop();
    }
    Ok(String::from_utf8(out).expect("a normal path is ASCII"))
}

/// A route that forwards `%2F` must have no route under it: `/api/internal%2Fx` would
/// reach `/api/internal/x` upstream past that route's checks.
pub(super) fn check_kept_slashes(routes: &[RouteConfig]) -> Result<(), String> {
    for r in routes {
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
            return Err(format!(
                "route {}: encoded_slashes = \"keep\" with route {} under it, whose checks a path \
                 with %2F would pass by upstream",
                r.prefix, o.prefix
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::tests::parse;

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
        for bad in ["/..", "/a%2Fb", "/a%00", "/a;v=1", "/;x", "/a%3Bb"] {
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
}
