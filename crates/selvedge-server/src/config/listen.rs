//! `[[listen]]`: the addresses served (cleartext, TLS and QUIC, or redirecting to HTTPS),
//! with their PROXY protocol and `reuse_port` settings.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use selvedge::Listen;
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Source};
pub use crate::acme::config::OnDemandConfig;

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
    /// Certificates for names not known in advance, obtained during the handshake
    /// (`on_demand = { ask = ... }`).
    pub on_demand: Option<OnDemandConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnDemand {
    ask: Option<Spanned<String>>,
    rate: Option<Spanned<u32>>,
    per: Option<crate::units::NonZeroDur>,
    max_certificates: Option<Spanned<u32>>,
}

/// A file's listeners, by what they serve.
#[derive(Default)]
pub(super) struct Listeners {
    /// Cleartext HTTP/1.1 and h2c.
    pub(super) listen: Vec<Listen>,
    /// TLS.
    pub(super) tls: Vec<TlsListen>,
    /// Redirects to `https://`.
    pub(super) redirect: Vec<Listen>,
    /// Those reading a PROXY header, with the networks believed.
    pub(super) proxy_protocol: Vec<(Listen, Vec<ipnet::IpNet>)>,
    /// Those with `reuse_port`.
    pub(super) shared: Vec<Listen>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListen {
    address: Option<Spanned<String>>,
    host: Option<Spanned<String>>,
    port: Option<u16>,
    tls: Option<RawTls>,
    redirect_https: Option<bool>,
    proxy_protocol: Option<bool>,
    proxy_protocol_from: Option<Spanned<Vec<String>>>,
    quic: Option<bool>,
    reuse_port: Option<bool>,
    on_demand: Option<Spanned<RawOnDemand>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
    strict_sni: Option<bool>,
}

/// Every `[[listen]]`, or `127.0.0.1:8080` when none serves.
pub(super) fn listeners(src: &Source<'_>, raw: &[Spanned<RawListen>]) -> Result<Listeners, ConfigError> {
    let mut out = Listeners::default();
    for l in raw {
        let r = l.get_ref();
        let addr = address(src, l)?;
        if r.reuse_port.unwrap_or(false) {
            out.shared.push(addr.clone());
        }
        if let Some(nets) = proxy_protocol(src, l)? {
            out.proxy_protocol.push((addr.clone(), nets));
        }
        if let (Some(od), None) = (&r.on_demand, &r.tls) {
            return Err(src.err(Some(od.span()), "on_demand is for TLS listeners (tls = {})".into()));
        }
        match (&r.tls, r.redirect_https) {
            (Some(_), Some(true)) => {
                return Err(src.err(Some(l.span()), "a listener is either tls or redirect_https".into()))
            }
            (Some(t), _) => out.tls.push(tls_listener(src, l, t, addr)?),
            (None, _) if r.quic == Some(true) => {
                return Err(src.err(Some(l.span()), "quic = true needs tls (HTTP/3 is always encrypted)".into()))
            }
            (None, Some(true)) => out.redirect.push(addr),
            (None, _) => out.listen.push(addr),
        }
    }
    if out.listen.is_empty() && out.tls.is_empty() && out.redirect.is_empty() {
        out.listen.push(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], 8080))));
    }
    Ok(out)
}

/// A listener's address: `address`, or `host` (127.0.0.1 by default) and `port`.
fn address(src: &Source<'_>, l: &Spanned<RawListen>) -> Result<Listen, ConfigError> {
    let r = l.get_ref();
    match (&r.address, &r.host, r.port) {
        (Some(a), None, None) => parse_listen(src, a.get_ref()).map_err(|e| src.err(Some(a.span()), e)),
        (Some(a), _, _) => Err(src.err(Some(a.span()), "a listener has `address` or `host`/`port`, not both".into())),
        (None, host, Some(port)) => {
            let host: IpAddr = match host {
                None => IpAddr::from([127, 0, 0, 1]),
                Some(h) => h.get_ref().parse().map_err(|e| src.err(Some(h.span()), format!("host: {e}")))?,
            };
            Ok(Listen::Tcp(SocketAddr::new(host, port)))
        }
        (None, _, None) => Err(src.err(
            Some(l.span()),
            "a listener needs `address` (\"[::]:443\", \"unix:/run/selvedge.sock\") or `port`".into(),
        )),
    }
}

/// The networks whose PROXY header a listener believes (`None`: it reads none).
fn proxy_protocol(src: &Source<'_>, l: &Spanned<RawListen>) -> Result<Option<Vec<ipnet::IpNet>>, ConfigError> {
    let r = l.get_ref();
    match (r.proxy_protocol.unwrap_or(false), &r.proxy_protocol_from) {
        (true, Some(from)) => {
            let mut nets = Vec::new();
            for n in from.get_ref() {
                nets.push(
                    crate::client::parse_net(n)
                        .map_err(|e| src.err(Some(from.span()), format!("proxy_protocol_from: {e}")))?,
                );
            }
            Ok(Some(nets))
        }
        (true, None) => Err(src.err(
            Some(l.span()),
            "proxy_protocol = true needs proxy_protocol_from: the networks of the balancers whose \
             PROXY header names the client ([\"10.0.0.0/8\"]; [\"0.0.0.0/0\", \"::/0\"] believes any peer)"
                .into(),
        )),
        (false, Some(from)) => {
            Err(src.err(Some(from.span()), "proxy_protocol_from needs proxy_protocol = true".into()))
        }
        (false, None) => Ok(None),
    }
}

/// A listener with `tls`: its default certificate (read and checked now) and `quic`.
fn tls_listener(src: &Source<'_>, l: &Spanned<RawListen>, t: &RawTls, addr: Listen) -> Result<TlsListen, ConfigError> {
    let (cert, key) = match (&t.cert, &t.key) {
        (Some(c), Some(k)) => {
            let (cert, key) = (src.abs(c.get_ref()), src.abs(k.get_ref()));
            for (f, sp) in [(&cert, c.span()), (&key, k.span())] {
                if let Err(e) = std::fs::metadata(f) {
                    return Err(src.err(Some(sp), format!("{}: {e}", f.display())));
                }
            }
            if let Err(e) = selvedge::tls::CertKey::from_pem_files(vec![], &cert, &key) {
                return Err(src.err(Some(c.span()), format!("tls: {e}")));
            }
            (Some(cert), Some(key))
        }
        (None, None) => (None, None),
        _ => return Err(src.err(Some(l.span()), "tls: `cert` and `key` go together".into())),
    };
    let quic = l.get_ref().quic.unwrap_or(false);
    if quic && (cfg!(not(feature = "http3")) || !matches!(addr, Listen::Tcp(_))) {
        let why = if cfg!(feature = "http3") {
            "quic needs a TCP address (HTTP/3 takes the same port over UDP)"
        } else {
            "quic: this selvedge was built without the http3 feature"
        };
        return Err(src.err(Some(l.span()), why.into()));
    }
    let on_demand = match &l.get_ref().on_demand {
        Some(od) => {
            if cert.is_some() {
                return Err(src.err(
                    Some(od.span()),
                    "on_demand needs a listener without a default certificate (tls = {}): with one, every \
                     unknown name would get it instead"
                        .into(),
                ));
            }
            Some(on_demand(src, od)?)
        }
        None => None,
    };
    Ok(TlsListen { addr, cert, key, strict_sni: t.strict_sni.unwrap_or(false), quic, on_demand })
}

/// `on_demand = { ask = URL, rate, per, max_certificates }`; `ask` is required (without it
/// anyone could make the server order certificates for any name pointed at it).
fn on_demand(src: &Source<'_>, od: &Spanned<RawOnDemand>) -> Result<OnDemandConfig, ConfigError> {
    let r = od.get_ref();
    let Some(ask) = &r.ask else {
        return Err(src.err(
            Some(od.span()),
            "on_demand needs `ask` (a URL that answers 200 for the names allowed a certificate): \
             without it, anyone could make the server order certificates for names they point at it"
                .into(),
        ));
    };
    let url: Option<selvedge::http::Uri> = ask.get_ref().parse().ok();
    if ask.get_ref().contains('#') {
        return Err(src.err(Some(ask.span()), "on_demand ask: no #fragment (the name is sent in the query)".into()));
    }
    if !url.as_ref().is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some()) {
        return Err(src.err(Some(ask.span()), format!("on_demand ask {:?}: an http:// or https:// URL", ask.get_ref())));
    }
    let rate = match &r.rate {
        Some(n) if *n.get_ref() == 0 => return Err(src.err(Some(n.span()), "on_demand rate: at least 1".into())),
        Some(n) => *n.get_ref(),
        None => 10,
    };
    let max_certificates = match &r.max_certificates {
        Some(n) if *n.get_ref() == 0 => {
            return Err(src.err(Some(n.span()), "on_demand max_certificates: at least 1".into()))
        }
        Some(n) => *n.get_ref(),
        None => 10_000,
    };
    let per = r.per.as_ref().map_or(std::time::Duration::from_secs(60), |d| d.get());
    Ok(OnDemandConfig { ask: ask.get_ref().clone(), rate, per, max_certificates })
}

/// A listener's `address`: `"unix:PATH"` (relative to the file's directory) or an IP
/// address and port (`"0.0.0.0:80"`, `"[::]:443"`, `"127.0.0.1:8080"`).
pub(super) fn parse_listen(src: &Source<'_>, text: &str) -> Result<Listen, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("address \"unix:\" needs a path (\"unix:/run/selvedge.sock\")".into());
        }
        return Ok(Listen::Unix(src.abs(path)));
    }
    text.parse::<SocketAddr>().map(Listen::Tcp).map_err(|_| {
        format!("address {text:?}: write an IP address and port (\"0.0.0.0:80\", \"[::]:443\") or \"unix:/path\"")
    })
}
