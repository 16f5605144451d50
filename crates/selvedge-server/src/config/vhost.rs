//! `[[vhost]]`: the host names a virtual host answers, its certificate (files or ACME), its
//! routes ([`super::route`]) and redirect rules ([`crate::redirect`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::route::{self, RawRoute, RouteConfig, RouteContext};
use super::{ConfigError, Source};
use crate::lang::matcher::{Matchers, RawMatcher};
use crate::redirect::{RawRedirect, Rule};

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
    pub redirects: Vec<Rule>,
    /// `[vhost.matchers]`, and the matchers written inline where they are used.
    pub matchers: Matchers,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVhost {
    #[serde(default)]
    hosts: Vec<Spanned<String>>,
    /// `"acme"` or a [`RawVhostTls`] table.
    tls: Option<Spanned<toml::Value>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    redirect: Vec<Spanned<RawRedirect>>,
    matchers: Option<Spanned<BTreeMap<String, RawMatcher>>>,
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

/// Every `[[vhost]]`: at least one, and at most one without `hosts` (the default host).
pub(super) fn vhosts(
    src: &Source<'_>,
    raw: Vec<Spanned<RawVhost>>,
    ctx: &RouteContext,
) -> Result<Vec<VhostConfig>, ConfigError> {
    let mut vhosts = Vec::new();
    let mut seen_default = false;
    for v in raw {
        if v.get_ref().hosts.is_empty() {
            if seen_default {
                return Err(src.err(
                    Some(v.span()),
                    "a second [[vhost]] without hosts: there is one default host (give this one `hosts`)".into(),
                ));
            }
            seen_default = true;
        }
        vhosts.push(vhost(src, v, ctx)?);
    }
    if vhosts.is_empty() {
        return Err(src.err(Some(0..0), "no [[vhost]]: nothing to serve".into()));
    }
    Ok(vhosts)
}

/// A virtual host: its routes, names, certificate and redirect rules.
fn vhost(src: &Source<'_>, raw: Spanned<RawVhost>, ctx: &RouteContext) -> Result<VhostConfig, ConfigError> {
    let v_span = raw.span();
    let v = raw.into_inner();
    let mut matchers = match &v.matchers {
        Some(m) => Matchers::from_raw(m.get_ref()).map_err(|e| src.err(Some(m.span()), e))?,
        None => Matchers::default(),
    };
    let mut routes = Vec::new();
    for r in v.route {
        routes.push(route::route(src, r, ctx, &mut matchers)?);
    }
    route::check_kept_slashes(&routes).map_err(|e| src.err(Some(v_span), e))?;
    let mut hosts = Vec::new();
    for h in &v.hosts {
        hosts.push(check_host(h.get_ref()).map_err(|e| src.err(Some(h.span()), e))?);
    }
    let (tls, acme) = match &v.tls {
        None => (None, false),
        Some(t) => vhost_tls(src, t, &hosts)?,
    };
    let mut redirects = Vec::new();
    for rd in &v.redirect {
        redirects
            .push(Rule::from_raw(rd.get_ref(), &mut matchers).map_err(|(sp, e)| src.err(sp.or(Some(rd.span())), e))?);
    }
    Ok(VhostConfig { hosts, routes, tls, acme, redirects, matchers })
}

/// A virtual host's `tls`: `"acme"` (the second value: `true`), or its certificate and key,
/// read and checked against `hosts` now.
fn vhost_tls(
    src: &Source<'_>,
    t: &Spanned<toml::Value>,
    hosts: &[String],
) -> Result<(Option<(PathBuf, PathBuf)>, bool), ConfigError> {
    if t.get_ref().as_str() == Some("acme") {
        if hosts.is_empty() {
            return Err(src.err(Some(t.span()), "a [[vhost]] with tls = \"acme\" needs `hosts`".into()));
        }
        for h in hosts {
            crate::acme::config::check_host(h).map_err(|e| src.err(Some(t.span()), format!("tls = \"acme\": {e}")))?;
        }
        return Ok((None, true));
    }
    if t.get_ref().is_str() {
        return Err(src.err(Some(t.span()), "tls: \"acme\" or { cert = ..., key = ... }".into()));
    }
    let tls = RawVhostTls::deserialize(t.get_ref().clone())
        .map_err(|e| src.err(Some(t.span()), format!("tls: {}", e.message())))?;
    let (cert, key) = (src.abs(&tls.cert), src.abs(&tls.key));
    if hosts.is_empty() {
        return Err(src.err(Some(t.span()), "a [[vhost]] with tls needs `hosts` (its SNI names)".into()));
    }
    if let Err(e) = selvedge::tls::CertKey::from_pem_files(hosts.to_vec(), &cert, &key) {
        return Err(src.err(Some(t.span()), format!("tls: {e}")));
    }
    Ok((Some((cert, key)), false))
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
