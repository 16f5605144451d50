//! Answers to the CA's validation requests, for orders this instance placed and (through
//! the storage directory) orders another instance sharing the storage placed: the CA may
//! connect to any of them.
//!
//! - HTTP-01 (RFC 8555 §8.3): `GET /.well-known/acme-challenge/TOKEN` on a cleartext
//!   listener answers the key authorization as `text/plain`, before routes and redirects
//!   ([`Http01`] wraps the app; the redirect listener asks [`Challenges::answer`]).
//! - TLS-ALPN-01 (RFC 8737): a handshake offering only `acme-tls/1` gets a self-signed
//!   certificate for the name with the critical `acmeIdentifier` extension holding the
//!   SHA-256 digest of the key authorization (the engine's `ManagedCerts` asks
//!   [`Challenges::tls_alpn01`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use selvedge::http::{header, Method, StatusCode};
use selvedge::tls::CertKey;
use selvedge::{App, Request, Response};

use super::storage::Storage;

/// The path prefix of HTTP-01 requests.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// The challenge answers being validated (cheap to clone).
#[derive(Clone)]
pub struct Challenges(Arc<Inner>);

struct Inner {
    http: Mutex<HashMap<String, String>>,
    tls: Mutex<HashMap<String, CertKey>>,
    storage: Option<Storage>,
}

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("acme::Challenges")
    }
}

impl Challenges {
    /// Answers kept in memory, and published to / looked up in `storage` if given.
    pub fn new(storage: Option<Storage>) -> Challenges {
        Challenges(Arc::new(Inner { http: Mutex::default(), tls: Mutex::default(), storage }))
    }

    /// Whether the answers go to a fleet's Redis (and its instances).
    pub fn in_fleet(&self) -> bool {
        self.0.storage.as_ref().is_some_and(Storage::is_fleet)
    }

    /// An answer another instance of the fleet published (`kind` `http01` or
    /// `tls_alpn01`), or withdrew (`None`).
    pub fn from_fleet(&self, kind: &str, name: &str, answer: Option<&str>) {
        match (kind, answer) {
            ("http01", Some(ka)) => {
                self.0.http.lock().unwrap_or_else(|p| p.into_inner()).insert(name.into(), ka.into());
            }
            ("http01", None) => {
                self.0.http.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            }
            ("tls_alpn01", Some(pem)) => {
                if let Ok(ck) = CertKey::from_pem(Vec::new(), pem.as_bytes(), pem.as_bytes()) {
                    self.0.tls.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_ascii_lowercase(), ck);
                }
            }
            ("tls_alpn01", None) => {
                self.0.tls.lock().unwrap_or_else(|p| p.into_inner()).remove(&name.to_ascii_lowercase());
            }
            _ => {}
        }
    }

    /// The key authorization for an HTTP-01 token.
    pub fn http01(&self, token: &str) -> Option<String> {
        let mine = self.0.http.lock().unwrap_or_else(|p| p.into_inner()).get(token).cloned();
        mine.or_else(|| self.0.storage.as_ref()?.http01(token))
    }

    /// The TLS-ALPN-01 certificate for a server name.
    pub fn tls_alpn01(&self, name: &str) -> Option<CertKey> {
        let name = name.to_ascii_lowercase();
        let mine = self.0.tls.lock().unwrap_or_else(|p| p.into_inner()).get(&name).cloned();
        mine.or_else(|| {
            let pem = self.0.storage.as_ref()?.tls_alpn01(&name)?;
            CertKey::from_pem(Vec::new(), &pem, &pem).ok()
        })
    }

    /// The answer to `req` if it asks for an HTTP-01 challenge: 200 with the key
    /// authorization, or 404 for an unknown token.
    pub fn answer(&self, req: &Request) -> Option<Response> {
        let token = req.path().strip_prefix(HTTP01_PREFIX)?;
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return None;
        }
        Some(match self.http01(token) {
            Some(ka) => Response::bytes(StatusCode::OK, ka).header(header::CONTENT_TYPE, "text/plain"),
            None => {
                Response::bytes(StatusCode::NOT_FOUND, "no such challenge\n").header(header::CONTENT_TYPE, "text/plain")
            }
        })
    }

    /// Publishes an HTTP-01 answer.
    ///
    /// # Errors
    /// It could not be written to the storage.
    pub fn publish_http01(&self, token: &str, key_authorization: &str) -> std::io::Result<()> {
        self.0.http.lock().unwrap_or_else(|p| p.into_inner()).insert(token.into(), key_authorization.into());
        match &self.0.storage {
            Some(s) => s.put_http01(token, key_authorization),
            None => Ok(()),
        }
    }

    /// Makes and publishes the TLS-ALPN-01 certificate for `name`, whose key authorization
    /// has this SHA-256 `digest`.
    ///
    /// # Errors
    /// The certificate could not be made or written to the storage.
    pub fn publish_tls_alpn01(&self, name: &str, digest: &[u8]) -> Result<(), String> {
        let name = name.to_ascii_lowercase();
        let pem = alpn_certificate(&name, digest)?;
        let ck = CertKey::from_pem(Vec::new(), pem.as_bytes(), pem.as_bytes()).map_err(|e| e.to_string())?;
        self.0.tls.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), ck);
        match &self.0.storage {
            Some(s) => s.put_tls_alpn01(&name, &pem).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Withdraws answers once their validation is over.
    pub fn withdraw(&self, http01_token: Option<&str>, tls_alpn01_name: Option<&str>) {
        if let Some(t) = http01_token {
            self.0.http.lock().unwrap_or_else(|p| p.into_inner()).remove(t);
        }
        let name = tls_alpn01_name.map(str::to_ascii_lowercase);
        if let Some(n) = &name {
            self.0.tls.lock().unwrap_or_else(|p| p.into_inner()).remove(n);
        }
        if let Some(s) = &self.0.storage {
            s.remove_challenge(http01_token, name.as_deref());
        }
    }
}

/// A self-signed certificate for `name` with the `acmeIdentifier` extension, and its key,
/// as PEM.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<String, String> {
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok(format!("{}{}", cert.pem(), key.serialize_pem()))
}

/// An app answering HTTP-01 challenges before passing other requests to `app`.
#[derive(Debug, Clone)]
pub struct Http01<A> {
    app: A,
    challenges: Challenges,
}

impl<A> Http01<A> {
    /// `app`, answering `challenges` first.
    pub fn new(app: A, challenges: Challenges) -> Http01<A> {
        Http01 { app, challenges }
    }
}

impl<A: App> App for Http01<A> {
    fn handle(&self, req: Request) -> impl Future<Output = Response> + Send {
        let answer = self.challenges.answer(&req);
        let rest = match answer {
            Some(_) => None,
            None => Some(self.app.handle(req)),
        };
        async move {
            match (answer, rest) {
                (Some(a), _) => a,
                (None, Some(f)) => f.await,
                (None, None) => Response::new(StatusCode::INTERNAL_SERVER_ERROR),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_alpn01_certificate_has_the_critical_acme_identifier() {
        let digest = [7u8; 32];
        let pem = alpn_certificate("a.example.com", &digest).unwrap();
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
            .map(|c: rustls::pki_types::CertificateDer<'_>| c.to_vec())
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let oid = x509_parser::der_parser::oid!(1.3.6 .1 .5 .5 .7 .1 .31);
        let ext = cert.extensions().iter().find(|e| e.oid == oid).expect("acmeIdentifier");
        assert!(ext.critical);
        // An OCTET STRING (0x04) of 32 bytes holding the digest.
        assert_eq!(&ext.value[..2], &[0x04, 32]);
        assert_eq!(&ext.value[2..], &digest);
        let san = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(format!("{:?}", san.value.general_names), "[DNSName(\"a.example.com\")]");
    }

    #[test]
    fn answers_come_from_memory_or_storage() {
        let root = std::env::temp_dir().join(format!("selvedge-acme-challenges-{}", std::process::id()));
        let storage = Storage::open(&root, "https://ca.example/dir").unwrap();
        let mine = Challenges::new(Some(storage.clone()));
        let theirs = Challenges::new(Some(storage));
        mine.publish_http01("tok", "tok.thumb").unwrap();
        mine.publish_tls_alpn01("A.example.com", &[1; 32]).unwrap();
        assert_eq!(theirs.http01("tok").as_deref(), Some("tok.thumb"));
        assert!(theirs.tls_alpn01("a.example.com").is_some());
        assert!(theirs.tls_alpn01("b.example.com").is_none());
        mine.withdraw(Some("tok"), Some("a.example.com"));
        assert_eq!(theirs.http01("tok"), None);
        assert!(mine.tls_alpn01("a.example.com").is_none());
        let alone = Challenges::new(None);
        alone.publish_http01("t", "k").unwrap();
        assert_eq!(alone.http01("t").as_deref(), Some("k"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
