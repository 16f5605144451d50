//! OCSP stapling (RFC 6960, RFC 6066 §8): for every certificate the TLS listeners serve
//! (files and ACME alike) whose leaf names an OCSP responder, the responder's signed answer
//! is fetched, checked, and stapled to the handshakes, and fetched again halfway through
//! its validity.
//!
//! One task ([`Stapler::run`]) on the control runtime walks the listeners' certificates
//! ([`selvedge::tls::CertStore::update`], [`selvedge::tls::ManagedCerts::update`]): no work
//! on the handshake path, which only reads the staple rustls already holds.
//!
//! - An answer is stapled only if it is signed by the issuer (or by a responder the issuer
//!   certified for OCSP signing), is about this certificate, and is current. An answer that
//!   lapses without a new one is no longer stapled.
//! - **Revoked**: the answer is stapled (it is the truth) and an error is logged at each
//!   fetch; for an ACME certificate a replacement is ordered at once ([`Keeper::revoked`]).
//! - **Must-Staple** (the TLS Feature extension, RFC 7633): such a certificate is fetched
//!   for first, and each failure to get it a staple is an error in the log, since clients
//!   refuse it without one.
//! - Failures are retried after [`RETRY_MIN`], doubling to [`RETRY_MAX`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use der::{Decode, Encode};
use http_body_util::{BodyExt, Full, Limited};
use rustls::pki_types::CertificateDer;
use selvedge::tls::{CertKey, CertStore, ManagedCerts};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

/// The largest OCSP answer read.
pub const MAX_RESPONSE: usize = 64 * 1024;
/// How long a responder may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait after a failed fetch; it doubles with each failure in a row…
pub const RETRY_MIN: Duration = Duration::from_secs(5);
/// …up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(3600);
/// The most answers fetched at once.
pub const FETCHES_AT_ONCE: usize = 8;
/// The longest the task sleeps without looking at the certificates again.
const LOOK_EVERY: Duration = Duration::from_secs(3600);
/// An answer from up to this far in the future is accepted (clock skew).
const SKEW: Duration = Duration::from_secs(300);
/// When an answer gives no next update: fetch again after this.
const NO_NEXT_UPDATE: Duration = Duration::from_secs(12 * 3600);

static WAKE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Certificates changed (a reload, a new ACME certificate): look at them now.
pub fn wake() {
    WAKE.notify_one();
}

/// What a checked answer says of the certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not revoked.
    Good,
    /// Revoked.
    Revoked,
    /// The responder does not know it (not stapled).
    Unknown,
}

/// A checked OCSP answer.
#[derive(Debug, Clone)]
pub struct Staple {
    /// The whole `OCSPResponse`, as stapled.
    pub der: Vec<u8>,
    /// What it says.
    pub status: Status,
    /// When it was made.
    pub this_update: SystemTime,
    /// When it lapses (`None`: the responder gives no time).
    pub next_update: Option<SystemTime>,
}

/// What asking about a certificate needs.
#[derive(Debug, Clone)]
pub struct Subject {
    /// The responder (the leaf's AIA).
    pub url: String,
    /// The DER `OCSPRequest`.
    pub request: Vec<u8>,
    /// The leaf has the TLS Feature `status_request` (Must-Staple).
    pub must_staple: bool,
    /// The leaf's serial, lower-case hex.
    pub serial: String,
    serial_raw: Vec<u8>,
    name_hash: Vec<u8>,
    key_hash: Vec<u8>,
    issuer: Vec<u8>,
}

fn sha1(data: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, data).as_ref().to_vec()
}

fn strip_zeros(b: &[u8]) -> &[u8] {
    let i = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    &b[i..]
}

const OID_SHA1: &str = "1.3.14.3.2.26";
const OID_OCSP_BASIC: &str = "1.3.6.1.5.5.7.48.1.1";
const OID_TLS_FEATURE: &str = "1.3.6.1.5.5.7.1.24";

impl Subject {
    /// The OCSP facts of `chain` (leaf first, then its issuer): `None` when the leaf names
    /// no OCSP responder.
    ///
    /// # Errors
    /// A certificate cannot be parsed, or the issuer is not in the chain.
    pub fn of(chain: &[CertificateDer<'_>]) -> Option<Result<Subject, String>> {
        let (_, leaf) = match X509Certificate::from_der(chain.first()?.as_ref()) {
            Ok(c) => c,
            Err(e) => return Some(Err(format!("certificate: {e}"))),
        };
        let mut url = None;
        let mut must_staple = false;
        for ext in leaf.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::AuthorityInfoAccess(aia) => {
                    for d in &aia.accessdescs {
                        if d.access_method == x509_parser::oid_registry::OID_PKIX_ACCESS_DESCRIPTOR_OCSP {
                            if let GeneralName::URI(u) = d.access_location {
                                url.get_or_insert_with(|| u.to_string());
                            }
                        }
                    }
                }
                _ if ext.oid.to_id_string() == OID_TLS_FEATURE => {
                    // SEQUENCE OF INTEGER; status_request is 5.
                    must_staple = ext.value.windows(3).any(|w| w == [0x02, 0x01, 0x05]);
                }
                _ => {}
            }
        }
        let url = url.filter(|u| u.starts_with("http://") || u.starts_with("https://"))?;
        Some(Self::with_issuer(chain, &leaf, url, must_staple))
    }

    fn with_issuer(
        chain: &[CertificateDer<'_>],
        leaf: &X509Certificate<'_>,
        url: String,
        must_staple: bool,
    ) -> Result<Subject, String> {
        let issuer_der = chain[1..]
            .iter()
            .find(|c| {
                X509Certificate::from_der(c.as_ref())
                    .is_ok_and(|(_, c)| c.tbs_certificate.subject.as_raw() == leaf.tbs_certificate.issuer.as_raw())
            })
            .ok_or("the issuer's certificate is not in the chain (OCSP needs it)")?;
        let (_, issuer) = X509Certificate::from_der(issuer_der.as_ref()).map_err(|e| format!("issuer: {e}"))?;
        let serial_raw = strip_zeros(leaf.raw_serial()).to_vec();
        let name_hash = sha1(leaf.tbs_certificate.issuer.as_raw());
        let key_hash = sha1(&issuer.public_key().subject_public_key.data);
        let cert_id = x509_ocsp::CertId {
            hash_algorithm: spki::AlgorithmIdentifierOwned {
                oid: OID_SHA1.parse().expect("valid OID"),
                parameters: Some(der::Any::null()),
            },
            issuer_name_hash: der::asn1::OctetString::new(name_hash.clone()).map_err(|e| e.to_string())?,
            issuer_key_hash: der::asn1::OctetString::new(key_hash.clone()).map_err(|e| e.to_string())?,
            serial_number: x509_cert::serial_number::SerialNumber::new(&serial_raw).map_err(|e| e.to_string())?,
        };
        let request = x509_ocsp::OcspRequest {
            tbs_request: x509_ocsp::TbsRequest {
                version: x509_ocsp::Version::V1,
                requestor_name: None,
                request_list: vec![x509_ocsp::Request { req_cert: cert_id, single_request_extensions: None }],
                request_extensions: None,
            },
            optional_signature: None,
        }
        .to_der()
        .map_err(|e| e.to_string())?;
        Ok(Subject {
            url,
            request,
            must_staple,
            serial: leaf.raw_serial_as_string().replace(':', "").to_ascii_lowercase(),
            serial_raw,
            name_hash,
            key_hash,
            issuer: issuer_der.as_ref().to_vec(),
        })
    }

    /// Checks an answer about this certificate at time `now`.
    ///
    /// # Errors
    /// Not a successful answer, not signed by the issuer or its responder, not about this
    /// certificate, or not current.
    pub fn check(&self, der: &[u8], now: SystemTime) -> Result<Staple, String> {
        let resp = x509_ocsp::OcspResponse::from_der(der).map_err(|e| format!("not an OCSP response: {e}"))?;
        if resp.response_status != x509_ocsp::OcspResponseStatus::Successful {
            return Err(format!("the responder answered {:?}", resp.response_status));
        }
        let bytes = resp.response_bytes.ok_or("a successful answer without a response")?;
        if bytes.response_type.to_string() != OID_OCSP_BASIC {
            return Err(format!("response type {} (not basic)", bytes.response_type));
        }
        let basic = x509_ocsp::BasicOcspResponse::from_der(bytes.response.as_bytes())
            .map_err(|e| format!("basic response: {e}"))?;
        let tbs = basic.tbs_response_data.to_der().map_err(|e| e.to_string())?;
        let (_, issuer) = X509Certificate::from_der(&self.issuer).map_err(|e| format!("issuer: {e}"))?;
        let sig_alg = basic.signature_algorithm.oid.to_string();
        let sig = basic.signature.raw_bytes();
        let signed_by_issuer = verify(issuer.public_key(), &sig_alg, &tbs, sig);
        let signed = signed_by_issuer
            || basic.certs.iter().flatten().any(|c| {
                let Ok(c_der) = c.to_der() else { return false };
                let Ok((_, r)) = X509Certificate::from_der(&c_der) else { return false };
                let secs = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
                let valid = r.validity().not_before.timestamp() <= secs && secs <= r.validity().not_after.timestamp();
                let certified = valid
                    && r.tbs_certificate.issuer.as_raw() == issuer.tbs_certificate.subject.as_raw()
                    && verify(
                        issuer.public_key(),
                        &r.signature_algorithm.algorithm.to_id_string(),
                        r.tbs_certificate.as_ref(),
                        &r.signature_value.data,
                    )
                    && r.extended_key_usage().ok().flatten().is_some_and(|e| e.value.ocsp_signing);
                certified && verify(r.public_key(), &sig_alg, &tbs, sig)
            });
        if !signed {
            return Err(
                "the answer's signature is not the issuer's nor that of a current responder it certified".into()
            );
        }
        let single = basic
            .tbs_response_data
            .responses
            .iter()
            .find(|r| {
                strip_zeros(r.cert_id.serial_number.as_bytes()) == self.serial_raw.as_slice()
                    && r.cert_id.issuer_name_hash.as_bytes() == self.name_hash.as_slice()
                    && r.cert_id.issuer_key_hash.as_bytes() == self.key_hash.as_slice()
            })
            .ok_or("the answer is about another certificate")?;
        let this_update = single.this_update.0.to_system_time();
        let next_update = single.next_update.map(|t| t.0.to_system_time());
        if this_update > now + SKEW {
            return Err("the answer is from the future".into());
        }
        if next_update.is_some_and(|n| n <= now) {
            return Err("the answer has lapsed (nextUpdate passed)".into());
        }
        let status = match single.cert_status {
            x509_ocsp::CertStatus::Good(_) => Status::Good,
            x509_ocsp::CertStatus::Revoked(_) => Status::Revoked,
            x509_ocsp::CertStatus::Unknown(_) => Status::Unknown,
        };
        Ok(Staple { der: der.to_vec(), status, this_update, next_update })
    }
}

/// Whether `sig` over `msg` verifies with `key` by the signature algorithm `alg` (an OID).
fn verify(key: &x509_parser::x509::SubjectPublicKeyInfo<'_>, alg: &str, msg: &[u8], sig: &[u8]) -> bool {
    use ring::signature as s;
    let curve = key.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|o| o.to_id_string());
    let p256 = curve.as_deref() == Some("1.2.840.10045.3.1.7");
    let p384 = curve.as_deref() == Some("1.3.132.0.34");
    let algorithm: &dyn s::VerificationAlgorithm = match alg {
        "1.2.840.10045.4.3.2" if p256 => &s::ECDSA_P256_SHA256_ASN1,
        "1.2.840.10045.4.3.2" if p384 => &s::ECDSA_P384_SHA256_ASN1,
        "1.2.840.10045.4.3.3" if p256 => &s::ECDSA_P256_SHA384_ASN1,
        "1.2.840.10045.4.3.3" if p384 => &s::ECDSA_P384_SHA384_ASN1,
        "1.2.840.113549.1.1.11" => &s::RSA_PKCS1_2048_8192_SHA256,
        "1.2.840.113549.1.1.12" => &s::RSA_PKCS1_2048_8192_SHA384,
        "1.2.840.113549.1.1.13" => &s::RSA_PKCS1_2048_8192_SHA512,
        "1.3.101.112" => &s::ED25519,
        _ => return false,
    };
    s::UnparsedPublicKey::new(algorithm, &key.subject_public_key.data).verify(msg, sig).is_ok()
}

/// One certificate the stapler knows.
struct Entry {
    /// `None`: the certificate names no responder (or its issuer is missing).
    subject: Option<Subject>,
    /// Its names, for the log.
    names: String,
    /// The ACME certificate id, for an ACME certificate.
    acme_id: Option<String>,
    staple: Option<Staple>,
    next_fetch: SystemTime,
    failures: u32,
    /// Seen in the last walk over the certificates.
    seen: bool,
}

impl Entry {
    /// The staple to serve now: a current answer that is not "unknown".
    fn current(&self, now: SystemTime) -> Option<&Staple> {
        self.staple.as_ref().filter(|s| s.status != Status::Unknown && s.next_update.is_none_or(|n| n > now))
    }
}

/// What the stapler asks of the certificate manager (ACME) about the certificates it keeps,
/// named by their id.
pub trait Keeper: Send + Sync {
    /// The answer stored with certificate `id`, if any (checked before use).
    fn load(&self, id: &str) -> Option<Vec<u8>>;
    /// Stores `der` with certificate `id`.
    ///
    /// # Errors
    /// Writing failed.
    fn save(&self, id: &str, der: &[u8]) -> std::io::Result<()>;
    /// The certificate with `serial` (lower-case hex) is revoked: replace it.
    fn revoked(&self, serial: &str);
}

/// Fetches and staples OCSP answers for the certificates of some listeners.
pub struct Stapler {
    stores: Vec<CertStore>,
    managed: Option<ManagedCerts>,
    /// Keeps the answers of ACME certificates with them, and replaces revoked ones.
    keeper: Option<Arc<dyn Keeper>>,
    http: crate::outbound::HttpClient<Full<Bytes>>,
    entries: Mutex<HashMap<Vec<u8>, Entry>>,
}

impl std::fmt::Debug for Stapler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stapler").field("stores", &self.stores.len()).finish_non_exhaustive()
    }
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("selvedge: ocsp: {msg}");
}

fn leaf_key(c: &CertKey) -> Option<Vec<u8>> {
    c.chain().first().map(|l| ring::digest::digest(&ring::digest::SHA256, l.as_ref()).as_ref().to_vec())
}

impl Stapler {
    /// A stapler over the listeners' stores and ACME's certificates.
    ///
    /// # Errors
    /// The HTTPS client cannot be made.
    pub fn new(
        stores: Vec<CertStore>,
        managed: Option<ManagedCerts>,
        keeper: Option<Arc<dyn Keeper>>,
    ) -> Result<Stapler, String> {
        let http = crate::outbound::client()?;
        Ok(Stapler { stores, managed, keeper, http, entries: Mutex::new(HashMap::new()) })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns the certificates served now, and forgets those no longer served.
    fn collect(&self) {
        let now = SystemTime::now();
        let mut entries = self.entries();
        for e in entries.values_mut() {
            e.seen = false;
        }
        let mut see = |c: &CertKey, acme_id: Option<&str>| {
            let Some(key) = leaf_key(c) else { return };
            let e = entries.entry(key).or_insert_with(|| {
                let subject = match Subject::of(c.chain()) {
                    None => None,
                    Some(Ok(s)) => Some(s),
                    Some(Err(e)) => {
                        log(format_args!("error: {}: {e}", c.names.join(", ")));
                        None
                    }
                };
                // An ACME certificate's answer kept with it (a restart): stapled at once if
                // it still checks out.
                let stored = match (&self.keeper, acme_id, &subject) {
                    (Some(k), Some(id), Some(sub)) => {
                        k.load(id).and_then(|der| sub.check(&der, now).ok()).filter(|s| s.status != Status::Unknown)
                    }
                    _ => None,
                };
                let next_fetch = stored.as_ref().map_or(now, |s| next_fetch(s, now));
                if let Some(st) = &stored {
                    let serial = subject.as_ref().map_or("", |s| s.serial.as_str());
                    log(format_args!(
                        "stapling the stored answer for {} (serial {serial}, {:?}), next fetch in {}s",
                        c.names.join(", "),
                        st.status,
                        next_fetch.duration_since(now).unwrap_or_default().as_secs()
                    ));
                }
                Entry {
                    subject,
                    names: if c.names.is_empty() { "the default certificate".into() } else { c.names.join(", ") },
                    acme_id: acme_id.map(str::to_string),
                    staple: stored,
                    next_fetch,
                    failures: 0,
                    seen: false,
                }
            });
            e.seen = true;
        };
        for s in &self.stores {
            s.update(|c| {
                see(c, None);
                None
            });
        }
        if let Some(m) = &self.managed {
            m.update(|id, c| {
                see(c, Some(id));
                None
            });
        }
        entries.retain(|_, e| e.seen);
    }

    /// Fetches the answers that are due, [`FETCHES_AT_ONCE`] at a time; each second (and
    /// on [`wake`]) meanwhile the certificates are walked again and the staples in hand put
    /// on, so a slow responder holds back no other certificate and a reload gets its
    /// current staples back at once. Returns when something is next due: a fetch, or the
    /// end of a staple's validity.
    async fn fetch_due(self: &Arc<Self>) -> SystemTime {
        let mut flying: Vec<Vec<u8>> = Vec::new();
        let mut due = self.due(&flying);
        let mut running = tokio::task::JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while running.len() < FETCHES_AT_ONCE {
                let Some((key, subject)) = due.pop() else { break };
                flying.push(key.clone());
                let me = self.clone();
                running.spawn(async move {
                    let got = me.fetch(&subject).await.and_then(|der| subject.check(&der, SystemTime::now()));
                    (key, subject, got)
                });
            }
            if running.is_empty() {
                break;
            }
            let walk = tokio::select! {
                done = running.join_next() => {
                    if let Some(Ok((key, subject, got))) = done {
                        flying.retain(|k| *k != key);
                        self.record(&key, &subject, got);
                    }
                    false
                }
                _ = tick.tick() => true,
                () = WAKE.notified() => true,
            };
            if walk {
                self.collect();
                // What fell due meanwhile (a retry) goes on beside the fetches still out.
                due = self.due(&flying);
            }
            self.apply();
        }
        let now = SystemTime::now();
        let entries = self.entries();
        let fetches = entries.values().filter(|e| e.subject.is_some()).map(|e| e.next_fetch);
        let lapses = entries.values().filter_map(|e| e.current(now)).filter_map(|s| s.next_update);
        fetches.chain(lapses).min().unwrap_or(now + LOOK_EVERY)
    }

    /// The certificates whose answer is due and not being fetched (`flying`), Must-Staple
    /// ones last (they are taken from the end: clients refuse those without a staple).
    fn due(&self, flying: &[Vec<u8>]) -> Vec<(Vec<u8>, Subject)> {
        let now = SystemTime::now();
        let mut due: Vec<(Vec<u8>, Subject)> = self
            .entries()
            .iter()
            .filter(|(k, e)| e.next_fetch <= now && !flying.contains(k))
            .filter_map(|(k, e)| e.subject.clone().map(|s| (k.clone(), s)))
            .collect();
        due.sort_by_key(|(_, s)| s.must_staple);
        due
    }

    /// What a fetch for `key` brought.
    fn record(&self, key: &[u8], subject: &Subject, got: Result<Staple, String>) {
        let now = SystemTime::now();
        let mut entries = self.entries();
        let Some(e) = entries.get_mut(key) else { return };
        match got {
            Ok(staple) => {
                let unknown = staple.status == Status::Unknown;
                e.failures = if unknown { e.failures + 1 } else { 0 };
                e.next_fetch = if unknown { now + backoff(e.failures) } else { next_fetch(&staple, now) };
                let next = e.next_fetch.duration_since(now).unwrap_or_default().as_secs();
                if let (Some(k), Some(id), false) = (&self.keeper, &e.acme_id, unknown) {
                    if let Err(err) = k.save(id, &staple.der) {
                        log(format_args!("error: storing the OCSP answer for {}: {err}", e.names));
                    }
                }
                match staple.status {
                    Status::Good => log(format_args!(
                        "stapling a good answer for {} (serial {}), next fetch in {next}s",
                        e.names, subject.serial
                    )),
                    Status::Revoked => {
                        log(format_args!(
                            "error: the certificate for {} (serial {}) is REVOKED, says its OCSP responder{}",
                            e.names,
                            subject.serial,
                            if e.acme_id.is_some() { "; ordering a replacement" } else { "" }
                        ));
                        if let (Some(k), Some(_)) = (&self.keeper, &e.acme_id) {
                            k.revoked(&subject.serial);
                        }
                    }
                    Status::Unknown => log(format_args!(
                        "warning: the OCSP responder does not know the certificate for {} (serial {}); nothing \
                         stapled; next attempt in {next}s",
                        e.names, subject.serial
                    )),
                }
                e.staple = Some(staple);
            }
            Err(err) => {
                e.failures += 1;
                e.next_fetch = now + backoff(e.failures);
                let kept = e.current(now).is_some();
                log(format_args!(
                    "{}OCSP for {} (serial {}) from {}: {err}; {}; next attempt in {}s",
                    if subject.must_staple && !kept { "error: Must-Staple certificate without a staple: " } else { "" },
                    e.names,
                    subject.serial,
                    subject.url,
                    if kept { "still stapling the last answer" } else { "nothing stapled" },
                    backoff(e.failures).as_secs()
                ));
            }
        }
    }

    async fn fetch(&self, subject: &Subject) -> Result<Vec<u8>, String> {
        let req = http::Request::post(&subject.url)
            .header(http::header::CONTENT_TYPE, "application/ocsp-request")
            .header(http::header::ACCEPT, "application/ocsp-response")
            .body(Full::new(Bytes::from(subject.request.clone())))
            .map_err(|e| e.to_string())?;
        let work = async {
            let resp = self.http.request(req).await.map_err(|e| e.to_string())?;
            if resp.status() != http::StatusCode::OK {
                return Err(format!("HTTP status {}", resp.status()));
            }
            let body = Limited::new(resp.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| format!("the answer: {e} (at most {MAX_RESPONSE} bytes are read)"))?;
            Ok(body.to_bytes().to_vec())
        };
        tokio::time::timeout(FETCH_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", FETCH_TIMEOUT.as_secs())))
    }

    /// Puts each certificate's current staple on it (or takes a lapsed one off).
    fn apply(&self) {
        let now = SystemTime::now();
        let entries = self.entries();
        let want = |c: &CertKey| -> Option<CertKey> {
            let staple =
                leaf_key(c).and_then(|k| entries.get(&k)).and_then(|e| e.current(now)).map(|s| s.der.as_slice());
            (staple != c.ocsp()).then(|| c.with_ocsp(staple.map(<[u8]>::to_vec)))
        };
        for s in &self.stores {
            s.update(want);
        }
        if let Some(m) = &self.managed {
            m.update(|_, c| want(c));
        }
    }

    /// Keeps the staples current, until the runtime stops.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.collect();
            // Staples in hand go on before any fetch (after a reload, at once).
            self.apply();
            let next = self.fetch_due().await;
            self.apply();
            let wait = next
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .clamp(Duration::from_millis(100), LOOK_EVERY);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = WAKE.notified() => {}
            }
        }
    }
}

/// When to fetch again after `staple`: halfway through its validity (not sooner than
/// [`RETRY_MIN`] from now), or [`NO_NEXT_UPDATE`] after now when it gives no end.
fn next_fetch(staple: &Staple, now: SystemTime) -> SystemTime {
    staple.next_update.map_or(now + NO_NEXT_UPDATE, |n| {
        let half = n.duration_since(staple.this_update).unwrap_or_default() / 2;
        (staple.this_update + half).max(now + RETRY_MIN)
    })
}

fn backoff(failures: u32) -> Duration {
    RETRY_MIN.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(1), RETRY_MIN);
        assert_eq!(backoff(2), RETRY_MIN * 2);
        assert_eq!(backoff(40), RETRY_MAX);
    }

    #[tokio::test]
    async fn the_task_wakes_when_a_staple_lapses_to_take_it_off() {
        let st = Arc::new(Stapler::new(Vec::new(), None, None).unwrap());
        let now = SystemTime::now();
        let lapse = now + Duration::from_secs(10);
        let staple = Staple { der: vec![1], status: Status::Good, this_update: now, next_update: Some(lapse) };
        st.entries().insert(
            vec![7],
            Entry {
                subject: None,
                names: "a.test".into(),
                acme_id: None,
                staple: Some(staple),
                next_fetch: now + Duration::from_secs(3600),
                failures: 3,
                seen: true,
            },
        );
        // Not the next fetch (an hour away, a backoff): the staple's end.
        assert_eq!(st.fetch_due().await, lapse);
        assert!(st.entries()[&vec![7]].current(lapse).is_none(), "a lapsed staple is not served");
    }

    #[test]
    fn certificates_without_a_responder_are_left_alone() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap().self_signed(&key).unwrap();
        assert!(Subject::of(&[cert.der().clone()]).is_none());
    }
}
