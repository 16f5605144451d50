//! The `[acme]` section: what it may say, its defaults, and the checks `selvedge --check`
//! runs on it (without contacting the CA).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::units::NonZeroDur;

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";
/// Let's Encrypt's staging directory (untrusted certificates, generous rate limits).
pub const LETS_ENCRYPT_STAGING: &str = "https://acme-staging-v02.api.letsencrypt.org/directory";

/// The default storage directory.
pub const DEFAULT_STORAGE: &str = "/var/lib/selvedge/acme";

/// How the CA checks that we control a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeKind {
    /// TLS-ALPN-01 (RFC 8737): answered in the TLS handshake on the HTTPS port (443).
    TlsAlpn01,
    /// HTTP-01 (RFC 8555 §8.3): `GET /.well-known/acme-challenge/TOKEN` on port 80.
    Http01,
    /// DNS-01 (RFC 8555 §8.4): a TXT record at `_acme-challenge.NAME`, written through
    /// `[acme.dns]`; the only challenge for wildcard names.
    Dns01,
}

impl ChallengeKind {
    /// The name the CA and the config file use.
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::Dns01 => "dns-01",
        }
    }
}

/// When to renew, before the certificate expires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RenewBefore {
    /// This long before `notAfter`.
    Time(Duration),
    /// This fraction (0..1) of the certificate's lifetime before `notAfter`.
    Fraction(f64),
}

/// The checked `[acme]` section.
#[derive(Debug, Clone, PartialEq)]
pub struct AcmeConfig {
    /// Contact address given to the CA (`mailto:`), optional.
    pub email: Option<String>,
    /// The CA's directory URL: Let's Encrypt by default.
    pub directory: String,
    /// PEM file of root certificates trusted for the CA's own HTTPS (tests, private CAs);
    /// `None`: the system's roots.
    pub ca_roots: Option<PathBuf>,
    /// Account, certificates, keys, locks; may be shared by several instances.
    pub storage: PathBuf,
    /// The challenge answered.
    pub challenge: ChallengeKind,
    /// Renew this long before expiry: a third of the lifetime by default (30 days of a
    /// 90-day certificate).
    pub renew_before: RenewBefore,
    /// The CA's certificate profile to ask for (`None`: the CA's default).
    pub profile: Option<String>,
    /// First wait after a failed order; doubles with each failure: 2 minutes.
    pub retry_min: Duration,
    /// Longest wait between attempts: 6 hours.
    pub retry_max: Duration,
    /// How DNS-01 records are written and checked (`[acme.dns]`); set exactly when
    /// `challenge` is DNS-01.
    pub dns: Option<DnsConfig>,
}

/// How the TXT records of DNS-01 are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsProvider {
    /// RFC 2136 dynamic updates, signed with TSIG (RFC 8945), sent to the zone's primary.
    Rfc2136 {
        /// The primary server (`host:port`, port 53 by default).
        server: String,
        /// The zone to update; `None`: the zone whose SOA the server gives for the name.
        zone: Option<String>,
        /// The TSIG key.
        key: TsigKey,
    },
    /// A command run as `COMMAND... present|cleanup FQDN VALUE` (lego's `exec` convention).
    Exec {
        /// The program and its first arguments.
        command: Vec<String>,
    },
}

/// A TSIG key: its name, algorithm and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    /// The key's name, as the server knows it.
    pub name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    /// The shared secret (decoded).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsigKey").field("name", &self.name).field("algorithm", &self.algorithm).finish_non_exhaustive()
    }
}

/// The checked `[acme.dns]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// Where the records are written.
    pub provider: DnsProvider,
    /// Servers asked whether the records are there before the CA is told (`host:port`);
    /// empty: the zone's authoritative servers (its NS records), and the RFC 2136 primary.
    pub check: Vec<String>,
    /// How long the records may take to appear on every checked server: 2 minutes.
    pub propagation_timeout: Duration,
    /// The TTL of the records written: 60 seconds.
    pub ttl: u32,
}

/// A listener's `on_demand`: whom to ask whether a name may have a certificate, and how
/// many may be ordered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDemandConfig {
    /// `GET {ask}?domain=NAME`: 200 allows the name, anything else refuses it.
    pub ask: String,
    /// At most this many new certificates ordered per `per`: 10.
    pub rate: u32,
    /// The window of `rate`: 1 minute.
    pub per: std::time::Duration,
    /// At most this many certificates obtained on demand kept at once: 10,000.
    pub max_certificates: u32,
}

/// The TSIG algorithms the updates can be signed with.
pub const TSIG_ALGORITHMS: [&str; 3] = ["hmac-sha256", "hmac-sha384", "hmac-sha512"];

/// The `[acme.dns]` table as written in the file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawDns {
    provider: Option<Spanned<String>>,
    server: Option<Spanned<String>>,
    zone: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    key_name: Option<Spanned<String>>,
    key_algorithm: Option<Spanned<String>>,
    key_secret: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    check: Option<Spanned<Vec<String>>>,
    propagation_timeout: Option<Spanned<NonZeroDur>>,
    ttl: Option<Spanned<u32>>,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            email: None,
            directory: LETS_ENCRYPT.into(),
            ca_roots: None,
            storage: PathBuf::from(DEFAULT_STORAGE),
            challenge: ChallengeKind::TlsAlpn01,
            renew_before: RenewBefore::Fraction(1.0 / 3.0),
            profile: None,
            retry_min: Duration::from_secs(120),
            retry_max: Duration::from_secs(6 * 3600),
            dns: None,
        }
    }
}

/// The `[acme]` table as written in the file.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    email: Option<Spanned<String>>,
    directory: Option<Spanned<String>>,
    ca_roots: Option<Spanned<String>>,
    storage: Option<Spanned<String>>,
    challenge: Option<Spanned<String>>,
    /// A duration, or a percentage of the lifetime (`"33%"`).
    renew_before: Option<Spanned<toml::Value>>,
    profile: Option<Spanned<String>>,
    retry_min: Option<Spanned<NonZeroDur>>,
    retry_max: Option<Spanned<NonZeroDur>>,
    dns: Option<Spanned<RawDns>>,
}

/// A configuration error: where (a byte range of the file) and what.
pub type Error = (Option<Range<usize>>, String);

impl AcmeConfig {
    /// Checks the raw section; `abs` makes a path absolute (relative to the config file).
    ///
    /// # Errors
    /// An invalid value, with its position.
    pub fn from_raw(raw: &RawAcme, abs: &dyn Fn(&str) -> PathBuf) -> Result<AcmeConfig, Error> {
        let mut c = AcmeConfig::default();
        let at = |s: &Spanned<String>, msg: String| (Some(s.span()), msg);
        if let Some(e) = &raw.email {
            let v = e.get_ref().trim().trim_start_matches("mailto:");
            let ok = v.split_once('@').is_some_and(|(user, host)| {
                !user.is_empty()
                    && host.contains('.')
                    && !v.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
            });
            if !ok {
                return Err(at(e, format!("acme email {:?} is not an e-mail address", e.get_ref())));
            }
            c.email = Some(v.to_string());
        }
        if let Some(d) = &raw.directory {
            let v = d.get_ref();
            let url: Option<selvedge::http::Uri> = v.parse().ok();
            let ok = url.as_ref().is_some_and(|u| u.scheme_str() == Some("https") && u.host().is_some());
            if !ok {
                return Err(at(d, format!("acme directory {v:?} must be an https:// URL")));
            }
            c.directory = v.clone();
        }
        if let Some(r) = &raw.ca_roots {
            let p = abs(r.get_ref());
            let n = load_roots(&p).map_err(|e| at(r, format!("acme ca_roots: {e}")))?.len();
            if n == 0 {
                return Err(at(r, format!("acme ca_roots: no certificate in {}", p.display())));
            }
            c.ca_roots = Some(p);
        }
        if let Some(s) = &raw.storage {
            c.storage = abs(s.get_ref());
        }
        check_storage(&c.storage).map_err(|e| (raw.storage.as_ref().map(Spanned::span), e))?;
        if let Some(ch) = &raw.challenge {
            c.challenge = match ch.get_ref().as_str() {
                "tls-alpn-01" => ChallengeKind::TlsAlpn01,
                "http-01" => ChallengeKind::Http01,
                "dns-01" => ChallengeKind::Dns01,
                other => {
                    return Err(at(ch, format!("acme challenge {other:?}: \"tls-alpn-01\", \"http-01\" or \"dns-01\"")))
                }
            };
        }
        if let Some(rb) = &raw.renew_before {
            let bad = |e: String| (Some(rb.span()), format!("acme renew_before: {e}"));
            c.renew_before = match rb.get_ref().as_str().and_then(|t| t.trim().strip_suffix('%')) {
                Some(pct) => match pct.trim().parse::<f64>() {
                    Ok(p) if p > 0.0 && p < 100.0 => RenewBefore::Fraction(p / 100.0),
                    _ => return Err(bad(format!("{pct:?}%: a percentage of the lifetime is between 0 and 100"))),
                },
                None => {
                    let d = NonZeroDur::deserialize(rb.get_ref().clone()).map_err(|e| bad(e.message().to_string()))?;
                    RenewBefore::Time(d.get())
                }
            };
        }
        if let Some(p) = &raw.profile {
            if p.get_ref().is_empty() || !p.get_ref().bytes().all(|b| b.is_ascii_graphic()) {
                return Err(at(p, format!("acme profile {:?} is not a profile name", p.get_ref())));
            }
            c.profile = Some(p.get_ref().clone());
        }
        for (raw, slot, name) in
            [(&raw.retry_min, &mut c.retry_min, "retry_min"), (&raw.retry_max, &mut c.retry_max, "retry_max")]
        {
            if let Some(v) = raw {
                if v.get_ref().get() < Duration::from_secs(1) {
                    return Err((Some(v.span()), format!("acme {name} must be at least 1s")));
                }
                *slot = v.get_ref().get();
            }
        }
        if c.retry_max < c.retry_min {
            let span = raw.retry_max.as_ref().or(raw.retry_min.as_ref()).map(Spanned::span);
            return Err((span, "acme retry_max is shorter than retry_min".into()));
        }
        match (&raw.dns, c.challenge) {
            (Some(d), ChallengeKind::Dns01) => c.dns = Some(DnsConfig::from_raw(d, abs)?),
            (None, ChallengeKind::Dns01) => {
                let span = raw.challenge.as_ref().map(Spanned::span);
                return Err((
                    span,
                    "acme challenge \"dns-01\" needs [acme.dns] (provider = \"rfc2136\" or \"exec\")".into(),
                ));
            }
            (Some(d), _) => {
                return Err((Some(d.span()), "[acme.dns] is used by challenge = \"dns-01\" only".into()));
            }
            (None, _) => {}
        }
        Ok(c)
    }
}

impl DnsConfig {
    fn from_raw(d: &Spanned<RawDns>, abs: &dyn Fn(&str) -> PathBuf) -> Result<DnsConfig, Error> {
        let at = |s: &Spanned<String>, msg: String| (Some(s.span()), format!("acme.dns {msg}"));
        let whole = |msg: &str| (Some(d.span()), format!("acme.dns: {msg}"));
        let r = d.get_ref();
        let provider = match r.provider.as_ref().map(|p| p.get_ref().as_str()) {
            Some("rfc2136") => {
                let server = r.server.as_ref().ok_or_else(|| whole("provider \"rfc2136\" needs `server`"))?;
                check_server(server.get_ref()).map_err(|e| at(server, format!("server: {e}")))?;
                let zone = match &r.zone {
                    Some(z) => {
                        let v = z.get_ref().trim_end_matches('.').to_ascii_lowercase();
                        check_dns_name(&v).map_err(|e| at(z, format!("zone: {e}")))?;
                        Some(v)
                    }
                    None => None,
                };
                let key = match (&r.key_file, &r.key_name, &r.key_secret) {
                    (Some(f), None, None) => {
                        let p = abs(f.get_ref());
                        let text = crate::files::read_small(&p, 64 * 1024)
                            .map_err(|e| at(f, format!("key_file: {}: {e}", p.display())))?;
                        parse_key_file(&String::from_utf8_lossy(&text))
                            .map_err(|e| at(f, format!("key_file: {}: {e}", p.display())))?
                    }
                    (None, Some(n), Some(s)) => {
                        use base64::Engine as _;
                        let algorithm = r
                            .key_algorithm
                            .as_ref()
                            .map_or("hmac-sha256".to_string(), |a| a.get_ref().to_ascii_lowercase());
                        let secret = base64::engine::general_purpose::STANDARD
                            .decode(s.get_ref().trim())
                            .map_err(|e| at(s, format!("key_secret is not base64: {e}")))?;
                        TsigKey { name: n.get_ref().trim_end_matches('.').to_string(), algorithm, secret }
                    }
                    (Some(f), _, _) => {
                        return Err(at(f, "key_file: give either key_file or key_name and key_secret".into()))
                    }
                    _ => {
                        return Err(whole(
                            "provider \"rfc2136\" needs a TSIG key: key_file, or key_name and key_secret",
                        ))
                    }
                };
                if !TSIG_ALGORITHMS.contains(&key.algorithm.as_str()) {
                    let span = r.key_algorithm.as_ref().or(r.key_file.as_ref()).map(Spanned::span);
                    return Err((
                        span,
                        format!("acme.dns key algorithm {:?}: one of {}", key.algorithm, TSIG_ALGORITHMS.join(", ")),
                    ));
                }
                check_dns_name(&key.name).map_err(|e| whole(&format!("key name: {e}")))?;
                if key.secret.len() < 16 {
                    return Err(whole("the TSIG secret is shorter than 16 bytes (make one with `tsig-keygen`)"));
                }
                if let Some(c) = &r.command {
                    return Err((Some(c.span()), "acme.dns command: for provider = \"exec\" only".into()));
                }
                DnsProvider::Rfc2136 { server: server.get_ref().clone(), zone, key }
            }
            Some("exec") => {
                let command = r.command.as_ref().ok_or_else(|| whole("provider \"exec\" needs `command`"))?;
                if command.get_ref().first().is_none_or(|c| c.is_empty()) {
                    return Err((Some(command.span()), "acme.dns command: a program and its arguments".into()));
                }
                for (key, set) in [
                    ("server", r.server.is_some()),
                    ("zone", r.zone.is_some()),
                    ("key_file", r.key_file.is_some()),
                    ("key_name", r.key_name.is_some()),
                    ("key_secret", r.key_secret.is_some()),
                ] {
                    if set {
                        return Err(whole(&format!("`{key}` is for provider = \"rfc2136\" only")));
                    }
                }
                let mut command = command.get_ref().clone();
                if !command[0].contains('/') {
                    return Err(whole("command: give the program's absolute path"));
                }
                command[0] = abs(&command[0]).to_string_lossy().into_owned();
                DnsProvider::Exec { command }
            }
            Some(other) => {
                let p = r.provider.as_ref().expect("matched");
                return Err(at(p, format!("provider {other:?}: \"rfc2136\" or \"exec\"")));
            }
            None => return Err(whole("needs `provider` (\"rfc2136\" or \"exec\")")),
        };
        let mut check = Vec::new();
        if let Some(c) = &r.check {
            for s in c.get_ref() {
                check_server(s).map_err(|e| (Some(c.span()), format!("acme.dns check: {s:?}: {e}")))?;
                check.push(s.clone());
            }
        }
        let propagation_timeout =
            r.propagation_timeout.as_ref().map_or(Duration::from_secs(120), |t| t.get_ref().get());
        let ttl = match &r.ttl {
            Some(t) if *t.get_ref() == 0 || *t.get_ref() > 86_400 => {
                return Err((Some(t.span()), "acme.dns ttl: 1 to 86400 seconds".into()));
            }
            Some(t) => *t.get_ref(),
            None => 60,
        };
        Ok(DnsConfig { provider, check, propagation_timeout, ttl })
    }
}

/// `host` or `host:port`, `[v6]` or `[v6]:port`.
fn check_server(s: &str) -> Result<(), String> {
    let (host, port) = split_server(s).ok_or("host or host:port")?;
    if port == 0 {
        return Err("port 0".into());
    }
    if host.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    check_dns_name(host)
        .or_else(|_| if host == "localhost" { Ok(()) } else { Err("not a host name or address".into()) })
}

/// A server's host and port (53 when not given).
pub fn split_server(s: &str) -> Option<(&str, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        return match tail {
            "" => Some((h, 53)),
            t => Some((h, t.strip_prefix(':')?.parse().ok()?)),
        };
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h, p.parse().ok()?)),
        Some(_) => s.parse::<std::net::Ipv6Addr>().is_ok().then_some((s, 53)),
        None if !s.is_empty() => Some((s, 53)),
        None => None,
    }
}

/// A TSIG key as BIND's `tsig-keygen` writes it:
/// `key "NAME" { algorithm hmac-sha256; secret "BASE64"; };`.
///
/// # Errors
/// Not such a key.
pub fn parse_key_file(text: &str) -> Result<TsigKey, String> {
    use base64::Engine as _;
    let re = regex::Regex::new(
        r#"(?s)key\s+"?([A-Za-z0-9._-]+)"?\s*\{\s*algorithm\s+"?([A-Za-z0-9-]+)"?\s*;\s*secret\s+"([A-Za-z0-9+/=]+)"\s*;\s*\}\s*;"#,
    )
    .expect("valid pattern");
    let c = re.captures(text).ok_or("no `key \"NAME\" { algorithm ...; secret \"...\"; };` in it")?;
    let secret = base64::engine::general_purpose::STANDARD.decode(&c[3]).map_err(|e| format!("secret: {e}"))?;
    Ok(TsigKey { name: c[1].trim_end_matches('.').to_string(), algorithm: c[2].to_ascii_lowercase(), secret })
}

/// A DNS name: labels of letters, digits, `-` and `_`, dots between.
fn check_dns_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?} is not a DNS name"))
    }
}

/// Checks a host name of a `tls = "acme"` virtual host: a DNS name the CA can validate, or
/// a wildcard for one label (`*.example.com`, DNS-01 only; the configuration's check says
/// so when another challenge is set). No IP address.
///
/// # Errors
/// Why not.
pub fn check_host(host: &str) -> Result<(), String> {
    let host = host.strip_prefix("*.").unwrap_or(host);
    if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') {
        return Err(format!("{host}: an IP address; ACME certificates here are for DNS names"));
    }
    let ok = host.len() <= 253
        && host.contains('.')
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !ok {
        return Err(format!("{host}: not a fully qualified DNS name"));
    }
    Ok(())
}

/// The storage directory must be a directory, or creatable: its nearest existing ancestor
/// is a directory.
fn check_storage(p: &Path) -> Result<(), String> {
    let mut at = Some(p);
    while let Some(d) = at {
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => return Err(format!("acme storage: {} is not a directory", d.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => at = d.parent(),
            Err(e) => return Err(format!("acme storage: {}: {e}", d.display())),
        }
    }
    Err(format!("acme storage: {} cannot be created", p.display()))
}

/// The certificates of a PEM file.
///
/// # Errors
/// The file cannot be read or is not PEM.
pub fn load_roots(p: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let pem = crate::files::read_small(p, selvedge::tls::MAX_PEM).map_err(|e| format!("{}: {e}", p.display()))?;
    rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AcmeConfig, Error> {
        let raw: RawAcme = toml::from_str(text).map_err(|e| (e.span(), e.message().to_string()))?;
        AcmeConfig::from_raw(&raw, &|p| Path::new("/etc/selvedge").join(p))
    }

    #[test]
    fn defaults_and_values() {
        let c = parse("").unwrap();
        assert_eq!(c, AcmeConfig::default());
        let c = parse(
            "email = \"ops@example.com\"\ndirectory = \"https://localhost:14000/dir\"\nstorage = \"/tmp\"\n\
             challenge = \"http-01\"\nrenew_before = \"30d\"\nprofile = \"shortlived\"\nretry_min = \"30s\"\n",
        )
        .unwrap();
        assert_eq!(c.email.as_deref(), Some("ops@example.com"));
        assert_eq!(c.storage, PathBuf::from("/tmp"));
        assert_eq!(c.challenge, ChallengeKind::Http01);
        assert_eq!(c.renew_before, RenewBefore::Time(Duration::from_secs(30 * 86400)));
        assert_eq!(c.retry_min, Duration::from_secs(30));
        assert_eq!(parse("renew_before = \"50%\"").unwrap().renew_before, RenewBefore::Fraction(0.5));
        // A bare number is seconds, as everywhere in the file.
        assert_eq!(parse("renew_before = 90").unwrap().renew_before, RenewBefore::Time(Duration::from_secs(90)));
        // Relative to the config file; created at startup.
        assert_eq!(parse("storage = \"acme\"").unwrap().storage, PathBuf::from("/etc/selvedge/acme"));
    }

    #[test]
    fn bad_values_point_at_the_key() {
        for (text, want) in [
            ("email = \"nobody\"", "not an e-mail"),
            ("directory = \"http://ca/dir\"", "https://"),
            ("challenge = \"dns-02\"", "dns-01"),
            ("challenge = \"dns-01\"", "needs [acme.dns]"),
            ("renew_before = \"150%\"", "between 0 and 100"),
            ("renew_before = \"30 days\"", "unknown unit"),
            ("renew_before = \"0s\"", "greater than 0"),
            ("retry_min = \"500ms\"", "at least 1s"),
            ("retry_min = \"1h\"\nretry_max = \"1m\"", "shorter"),
            ("ca_roots = \"/nonexistent/roots.pem\"", "ca_roots"),
            ("storage = \"/dev/null/acme\"", "Not a directory"),
            ("emial = \"a@b.c\"", "unknown field"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.1.contains(want), "{text}: {}", e.1);
            assert!(e.0.is_some(), "{text}: no position");
        }
    }

    #[test]
    fn dns_tables() {
        let c = parse(
            "challenge = \"dns-01\"\n[dns]\nprovider = \"rfc2136\"\nserver = \"ns1.example.com:5353\"\n\
             zone = \"Example.com.\"\nkey_name = \"k.\"\nkey_secret = \"c2VsdmVkZ2Ugc2VsdmVkZ2Ugc2VsdmVkZ2U=\"\n",
        )
        .unwrap();
        let d = c.dns.unwrap();
        assert_eq!(d.propagation_timeout, Duration::from_secs(120));
        assert_eq!(d.ttl, 60);
        assert!(d.check.is_empty());
        let DnsProvider::Rfc2136 { server, zone, key } = d.provider else { panic!("rfc2136") };
        assert_eq!((server.as_str(), zone.as_deref()), ("ns1.example.com:5353", Some("example.com")));
        assert_eq!((key.name.as_str(), key.algorithm.as_str()), ("k", "hmac-sha256"));
        assert!(!format!("{key:?}").contains("secret"), "the secret stays out of debug output");
        let c = parse(
            "challenge = \"dns-01\"\n[dns]\nprovider = \"exec\"\ncommand = [\"/usr/local/bin/hook\", \"--zone\", \"x\"]\n\
             check = [\"192.0.2.1\", \"[2001:db8::1]:53\"]\nttl = 300\npropagation_timeout = \"5m\"\n",
        )
        .unwrap();
        let d = c.dns.unwrap();
        assert_eq!(
            d.provider,
            DnsProvider::Exec { command: vec!["/usr/local/bin/hook".into(), "--zone".into(), "x".into()] }
        );
        assert_eq!((d.ttl, d.propagation_timeout, d.check.len()), (300, Duration::from_secs(300), 2));
        for (text, want) in [
            ("[dns]\nprovider = \"exec\"\ncommand = [\"/bin/true\"]\nttl = 0", "1 to 86400"),
            ("[dns]\nprovider = \"exec\"\ncommand = []", "a program"),
            ("[dns]\nprovider = \"exec\"\ncommand = [\"/bin/true\"]\nserver = \"ns1\"", "rfc2136\" only"),
            (
                "[dns]\nprovider = \"rfc2136\"\nserver = \"ns1\"\nkey_name = \"k\"\nkey_secret = \"c2hvcnQ=\"",
                "shorter than 16",
            ),
            ("[dns]\nprovider = \"exec\"\ncommand = [\"/bin/true\"]\ncheck = [\"a b\"]", "check"),
            ("[dns]\nprovider = \"exec\"\ncommand = [\"/bin/true\"]\nhost = \"x\"", "unknown field"),
        ] {
            let e = parse(&format!("challenge = \"dns-01\"\n{text}")).unwrap_err();
            assert!(e.1.contains(want), "{text}: {}", e.1);
        }
    }

    #[test]
    fn hosts() {
        assert!(check_host("example.com").is_ok());
        assert!(check_host("a-b.example.co.uk").is_ok());
        assert!(check_host("*.example.com").is_ok());
        assert!(check_host("*.*.example.com").is_err());
        assert!(check_host("192.0.2.1").is_err());
        assert!(check_host("localhost").is_err());
        assert!(check_host("-a.example.com").is_err());
        assert!(check_host("a..example.com").is_err());
    }
}
