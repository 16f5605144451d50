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
}

impl ChallengeKind {
    /// The name the CA and the config file use.
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Http01 => "http-01",
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
                other => return Err(at(ch, format!("acme challenge {other:?}: \"tls-alpn-01\" or \"http-01\""))),
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
        Ok(c)
    }
}

/// Checks a host name of a `tls = "acme"` virtual host: a DNS name the CA can validate by
/// HTTP-01 or TLS-ALPN-01 (no wildcard, no IP address).
///
/// # Errors
/// Why not.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.starts_with("*.") {
        return Err(format!("{host}: wildcard certificates need the DNS-01 challenge, which selvedge does not answer"));
    }
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
            ("challenge = \"dns-01\"", "tls-alpn-01"),
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
    fn hosts() {
        assert!(check_host("example.com").is_ok());
        assert!(check_host("a-b.example.co.uk").is_ok());
        assert!(check_host("*.example.com").unwrap_err().contains("DNS-01"));
        assert!(check_host("192.0.2.1").is_err());
        assert!(check_host("localhost").is_err());
        assert!(check_host("-a.example.com").is_err());
        assert!(check_host("a..example.com").is_err());
    }
}
