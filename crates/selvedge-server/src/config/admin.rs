//! `[admin]`: the admin listener ([`crate::admin`]).

use selvedge::Listen;
use serde::Deserialize;
use toml::Spanned;

use super::listen::parse_listen;
use super::{ConfigError, Source};
use crate::admin::AdminConfig;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    listen: Spanned<String>,
    public: Option<bool>,
}

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
    Ok(Some(AdminConfig { listen, public }))
}
