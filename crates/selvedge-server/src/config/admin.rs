//! `[admin]`: the admin listener ([`crate::admin`]).

use selvedge::Listen;
use serde::Deserialize;
use toml::Spanned;

use super::listen::parse_listen;
use super::{ConfigError, Source};
use crate::admin::{AdminConfig, AdminTls};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    listen: Spanned<String>,
    public: Option<bool>,
    token: Option<Spanned<String>>,
    persist: Option<Spanned<String>>,
    tls: Option<Spanned<RawAdminTls>>,
    api: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdminTls {
    cert: String,
    key: String,
    client_ca: Option<String>,
}

/// The shortest `[admin] token` taken (a guessable one would open the configuration).
const MIN_TOKEN: usize = 16;

/// The admin listener, if any: a loopback address or a Unix socket, unless `public`.
pub(super) fn admin(src: &Source<'_>, raw: Option<&Spanned<RawAdmin>>) -> Result<Option<AdminConfig>, ConfigError> {
    let Some(a) = raw else { return Ok(None) };
    let public = a.get_ref().public.unwrap_or(false);
    let l = &a.get_ref().listen;
    let listen = parse_listen(src, l.get_ref()).map_err(|e| src.err(Some(l.span()), e))?;
    if let Listen::Tcp(addr) = &listen {
        if !addr.ip().is_loopback() && !public {
            return Err(src.err(
                Some(l.span()),
                format!(
                    "[admin] listen {addr} is not a loopback address: metrics and status would be \
                     open to the network; set `public = true` to mean it (and firewall it)"
                ),
            ));
        }
    }
    let token = match &a.get_ref().token {
        Some(t) if t.get_ref().len() < MIN_TOKEN || t.get_ref().bytes().any(|b| !b.is_ascii_graphic()) => {
            return Err(src.err(
                Some(t.span()),
                format!("[admin] token must be at least {MIN_TOKEN} visible ASCII characters (no spaces)"),
            ))
        }
        Some(t) => Some(t.get_ref().clone()),
        None => None,
    };
    let persist = match &a.get_ref().persist {
        Some(p) if p.get_ref().is_empty() => return Err(src.err(Some(p.span()), "[admin] persist: a file path".into())),
        Some(p) => Some(src.abs(p.get_ref())),
        None => None,
    };
    let tls = match &a.get_ref().tls {
        Some(t) => {
            let r = t.get_ref();
            let tls = AdminTls {
                cert: src.abs(&r.cert),
                key: src.abs(&r.key),
                client_ca: r.client_ca.as_deref().map(|c| src.abs(c)),
            };
            if let Err(e) = crate::admin::tls_config(&tls) {
                return Err(src.err(Some(t.span()), format!("[admin] tls: {e}")));
            }
            Some(tls)
        }
        None => None,
    };
    if matches!(listen, Listen::Unix(_)) && tls.is_some() {
        return Err(src.err(Some(l.span()), "[admin] tls is for a TCP address, not a Unix socket".into()));
    }
    let api = a.get_ref().api.unwrap_or(false);
    Ok(Some(AdminConfig { listen, public, token, persist, tls, api }))
}
