//! Automatic HTTPS: certificates for `tls = "acme"` virtual hosts obtained from an ACME CA
//! (RFC 8555; Let's Encrypt by default), renewed, and installed into the running TLS
//! listeners without a restart.
//!
//! One task per certificate (one per virtual host, for all its host names) runs on the
//! server's control runtime:
//!
//! 1. It reads the certificate from the storage ([`storage`]) and installs it into the
//!    listeners' [`ManagedCerts`] if it is newer than the one served. Until a name has a
//!    certificate, handshakes for it fail with an alert (never another site's certificate).
//! 2. It computes the renewal time ([`schedule`]): `renew_before` ahead of expiry with
//!    jitter, or earlier if the CA's renewal information (ARI, RFC 9773) asks for it, and
//!    not before the shared retry time after failures (exponential backoff from
//!    `retry_min` to `retry_max`).
//! 3. When due, it takes the certificate's lock in the storage; an instance that cannot
//!    waits for the holder and then reads the holder's result, so instances sharing the
//!    storage order each certificate once. Under the lock it orders (`client.rs`): HTTP-01
//!    or TLS-ALPN-01 answers are published in memory and in the storage ([`challenge`]),
//!    so whichever instance the CA reaches can answer; DNS-01 records are written to the
//!    zone and checked on its servers ([`dns`]); then the CSR, the chain, an atomic
//!    write, and installation. Open connections keep the certificate they started with.
//!
//! A certificate that cannot be renewed keeps being served until it expires, with an error
//! in the log at each attempt; after expiry its names fail the handshake.
//!
//! OCSP stapling is not done: Let's Encrypt stopped its OCSP service in 2025 (its
//! certificates carry no OCSP URL; revocation is published by CRLs, which browsers fetch
//! themselves), and rustls has no OCSP client, so a staple would need our own fetching and
//! caching for CAs that still run OCSP; file certificates can be paired with a staple by
//! a later change to the engine's `CertKey`.

pub mod cert;
pub mod challenge;
mod client;
pub mod config;
pub mod dns;
mod on_demand;
pub mod schedule;
pub mod storage;

use std::fmt::Display;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use instant_acme::Account;
use selvedge::tls::ManagedCerts;
use tokio::runtime::Handle;

pub use self::cert::Bundle;
pub use self::challenge::{Challenges, Http01};
pub use self::config::{AcmeConfig, ChallengeKind, RenewBefore};
use self::storage::{RetryState, Storage};

/// Wakes every certificate's task to read the storage again (a certificate another instance
/// of the fleet stored).
static WAKE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// This instance's challenge answers, when they are shared with a fleet.
static FLEET_CHALLENGES: std::sync::OnceLock<Challenges> = std::sync::OnceLock::new();

/// OCSP answers kept in the storage with their certificates.
struct OcspKeeper(Storage);

impl crate::ocsp::Keeper for OcspKeeper {
    fn load(&self, id: &str) -> Option<Vec<u8>> {
        self.0.load_ocsp(id)
    }

    fn save(&self, id: &str, der: &[u8]) -> std::io::Result<()> {
        self.0.save_ocsp(id, der)
    }

    fn revoked(&self, serial: &str) {
        revoked(serial);
    }
}

/// Serials of ACME certificates their OCSP responder says are revoked: replaced at once.
static REVOKED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The certificate with `serial` (lower-case hex) is revoked (OCSP): its task orders a
/// replacement now.
pub fn revoked(serial: &str) {
    let mut r = REVOKED.lock().unwrap_or_else(|p| p.into_inner());
    if !r.iter().any(|s| s == serial) {
        r.push(serial.to_string());
    }
    drop(r);
    wake();
}

fn is_revoked(serial: &str) -> bool {
    REVOKED.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|s| s == serial)
}

/// Another instance of the fleet stored a certificate: every task reads the storage now.
pub fn wake() {
    WAKE.notify_waiters();
}

/// A challenge answer another instance of the fleet published or withdrew.
pub fn challenge_from_fleet(kind: &str, name: &str, answer: Option<&str>) {
    if let Some(c) = FLEET_CHALLENGES.get() {
        c.from_fleet(kind, name, answer);
    }
}

/// Sleeps `d`, or less if [`wake`] is called.
async fn nap(d: Duration) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        () = WAKE.notified() => {}
    }
}

/// How often a task looks at the storage again while nothing is due (a certificate another
/// instance renewed early is picked up by then).
const STORAGE_POLL: Duration = Duration::from_secs(600);
/// How often an instance waiting for another's order looks at the lock.
const LOCK_POLL: Duration = Duration::from_secs(1);
/// The longest an order may take, all requests included.
const ORDER_LIMIT: Duration = Duration::from_secs(300);

/// Writes a line to the server's log.
pub fn log(msg: impl Display) {
    eprintln!("selvedge: acme: {msg}");
}

/// The id of a certificate whose first name is `first`: the name, with a leading `*.`
/// spelled `wildcard_.` (a file name without a glob character, as Caddy's storage has it).
pub fn spec_id(first: &str) -> String {
    match first.strip_prefix("*.") {
        Some(rest) => format!("wildcard_.{rest}"),
        None => first.to_string(),
    }
}

/// A certificate to keep: its id (the first host name, see [`spec_id`]; its file name in
/// the storage) and its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The first host name.
    pub id: String,
    /// Every host name of the virtual host.
    pub names: Vec<String>,
}

/// The ACME client of a running server.
#[derive(Debug)]
pub struct Acme {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<(Spec, tokio::task::AbortHandle)>>,
}

struct Shared {
    cfg: AcmeConfig,
    storage: Storage,
    managed: ManagedCerts,
    challenges: Challenges,
    account: tokio::sync::Mutex<Option<Account>>,
    ari: AtomicU8,
    /// The control runtime, once [`Acme::start`] ran (on-demand orders are spawned there).
    rt: std::sync::OnceLock<Handle>,
    /// Certificates obtained on demand, by name (kept apart from the configured ones,
    /// which a reload replaces).
    on_demand_tasks: on_demand::Tasks,
}

const ARI_UNKNOWN: u8 = 0;
const ARI_NO: u8 = 2;

impl Acme {
    /// Opens the storage and installs the stored certificates of `specs` that are still
    /// valid (so a restart serves them at once); the others' names are refused until
    /// [`Acme::start`] obtains them.
    ///
    /// # Errors
    /// The storage directory cannot be created.
    pub fn new(cfg: &AcmeConfig, specs: &[Spec]) -> std::io::Result<Acme> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut storage = Storage::open(&cfg.storage, &cfg.directory)?;
        if crate::fleet::get().is_some_and(|f| f.cfg.acme_storage) {
            storage = storage.in_fleet(&cfg.directory);
            log("keeping the ACME account, certificates and locks in the fleet's Redis");
        }
        if storage.too_open() {
            log(format_args!(
                "warning: {} can be read by other users; it holds private keys (chmod 700)",
                storage.root().display()
            ));
        }
        let challenges = Challenges::new(Some(storage.clone()));
        if storage.is_fleet() {
            let _ = FLEET_CHALLENGES.set(challenges.clone());
            crate::fleet::events::on_acme(Box::new(|ev| match ev {
                crate::fleet::events::AcmeEvent::Stored => wake(),
                crate::fleet::events::AcmeEvent::Challenge { kind, name, answer } => {
                    challenge_from_fleet(kind, name, answer);
                }
            }));
        }
        let managed = ManagedCerts::new();
        let responder = challenges.clone();
        managed.set_challenge_responder(move |name| responder.tls_alpn01(name));
        let shared = Arc::new(Shared {
            cfg: cfg.clone(),
            storage,
            managed,
            challenges,
            account: tokio::sync::Mutex::new(None),
            ari: AtomicU8::new(ARI_UNKNOWN),
            rt: std::sync::OnceLock::new(),
            on_demand_tasks: Mutex::default(),
        });
        for s in specs {
            shared.install_stored(s);
        }
        Ok(Acme { shared, tasks: Mutex::new(Vec::new()) })
    }

    /// The storage directory (given to the user the server runs as, see `service`).
    pub fn storage_root(&self) -> &std::path::Path {
        self.shared.storage.root()
    }

    /// What OCSP stapling needs of ACME: answers kept with the certificates, revoked
    /// certificates replaced.
    pub fn ocsp_keeper(&self) -> Arc<dyn crate::ocsp::Keeper> {
        Arc::new(OcspKeeper(self.shared.storage.clone()))
    }

    /// The certificates to add to every TLS listener's store.
    pub fn managed(&self) -> ManagedCerts {
        self.shared.managed.clone()
    }

    /// The challenge answers (for the HTTP-01 responder on cleartext listeners).
    pub fn challenges(&self) -> Challenges {
        self.shared.challenges.clone()
    }

    /// Whether cleartext listeners must answer HTTP-01 challenges.
    pub fn http01(&self) -> bool {
        self.shared.cfg.challenge == ChallengeKind::Http01
    }

    /// The hook of a listener with `on_demand` ([`selvedge::Server::on_demand`]): see
    /// `on_demand.rs`. Its handshakes wait for nothing until [`Acme::start`] ran.
    ///
    /// # Errors
    /// The HTTPS client for `ask` cannot be made.
    pub fn on_demand(&self, cfg: &config::OnDemandConfig) -> Result<selvedge::tls::OnDemand, String> {
        let od = Arc::new(on_demand::OnDemand::new(cfg.clone())?);
        let sh = self.shared.clone();
        Ok(Arc::new(move |name| Box::pin(on_demand::handshake(sh.clone(), od.clone(), name))))
    }

    /// Starts a task for each certificate on `rt`.
    pub fn start(&self, rt: &Handle, specs: &[Spec]) {
        let _ = self.shared.rt.set(rt.clone());
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for s in specs {
            tasks.push((s.clone(), rt.spawn(run(self.shared.clone(), s.clone())).abort_handle()));
        }
    }

    /// After a configuration reload: starts tasks for new certificates (or changed host
    /// lists) and stops and forgets those no longer asked for. `[acme]` settings change
    /// only on restart.
    pub fn reload(&self, rt: &Handle, cfg: Option<&AcmeConfig>, specs: &[Spec]) {
        if cfg != Some(&self.shared.cfg) {
            log("note: changes to [acme] settings apply on restart");
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.retain(|(s, task)| {
            let keep = specs.contains(s);
            if !keep {
                task.abort();
                if !specs.iter().any(|n| n.id == s.id) {
                    self.shared.managed.remove(&s.id);
                }
            }
            keep
        });
        for s in specs {
            if !tasks.iter().any(|(t, _)| t == s) {
                self.shared.install_stored(s);
                tasks.push((s.clone(), rt.spawn(run(self.shared.clone(), s.clone())).abort_handle()));
            }
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("acme::Shared").field("cfg", &self.cfg).field("managed", &self.managed).finish()
    }
}

impl Shared {
    /// The stored certificate for `spec` if it is for exactly its names and not expired.
    fn stored(&self, spec: &Spec) -> Option<Bundle> {
        let pem = match self.storage.load_cert(&spec.id) {
            Ok(p) => p?,
            Err(e) => {
                log(format_args!("reading the certificate for {}: {e}", spec.id));
                return None;
            }
        };
        match Bundle::from_pem(&pem) {
            Ok(b) if b.info.covers_exactly(&spec.names) && b.info.not_after > SystemTime::now() => Some(b),
            Ok(_) => None,
            Err(e) => {
                log(format_args!("the stored certificate for {} is unusable: {e}", spec.id));
                None
            }
        }
    }

    fn install_stored(&self, spec: &Spec) {
        match self.stored(spec) {
            Some(b) => {
                log(format_args!(
                    "serving the stored certificate for {} (serial {}, valid until {})",
                    spec.names.join(", "),
                    b.info.serial,
                    date(b.info.not_after)
                ));
                self.managed.set(&spec.id, spec.names.clone(), Some(b.key));
            }
            None if !self.managed.has_cert(&spec.id) => self.managed.set(&spec.id, spec.names.clone(), None),
            None => {}
        }
    }

    /// The account: loaded from the storage, or (with `create`) created, one instance at a
    /// time. `Ok(None)`: none stored and `create` is false.
    async fn account(&self, create: bool) -> Result<Option<Account>, String> {
        let mut slot = self.account.lock().await;
        if let Some(a) = &*slot {
            return Ok(Some(a.clone()));
        }
        let email = self.cfg.email.as_deref();
        loop {
            if let Some(stored) = self.storage.load_account(email).map_err(|e| e.to_string())? {
                let a = client::restore(&self.cfg, &stored).await?;
                *slot = Some(a.clone());
                return Ok(Some(a));
            }
            if !create {
                return Ok(None);
            }
            let Some(_lock) = self.storage.try_lock("account").map_err(|e| e.to_string())? else {
                tokio::time::sleep(LOCK_POLL).await;
                continue;
            };
            if self.storage.load_account(email).map_err(|e| e.to_string())?.is_some() {
                continue;
            }
            let (a, creds) = client::create(&self.cfg).await?;
            self.storage.save_account(email, &creds).map_err(|e| format!("storing the account: {e}"))?;
            log(format_args!("created an account at {}", self.cfg.directory));
            *slot = Some(a.clone());
            return Ok(Some(a));
        }
    }

    /// The CA's renewal window for `b`, asked again when the CA says (10 minutes to a day).
    async fn ari_window(&self, memo: &mut Option<AriMemo>, b: &Bundle) -> Option<(SystemTime, SystemTime)> {
        if self.ari.load(Ordering::Relaxed) == ARI_NO {
            return None;
        }
        let id = b.info.ari_id.as_ref()?;
        if let Some(m) = memo.as_ref().filter(|m| m.serial == b.info.serial && Instant::now() < m.next) {
            return m.window;
        }
        let account = self.account(false).await.ok()??;
        let (window, again) = match client::renewal_window(&account, id).await {
            Ok(Some((w, again))) => (Some(w), again.clamp(Duration::from_secs(600), Duration::from_secs(86400))),
            Ok(None) => {
                self.ari.store(ARI_NO, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                log(format_args!("{}: {e}", b.info.names.join(", ")));
                (None, Duration::from_secs(3600))
            }
        };
        *memo = Some(AriMemo { serial: b.info.serial.clone(), window, next: Instant::now() + again });
        window
    }

    /// One order for `spec`, replacing `current`.
    async fn obtain(&self, spec: &Spec, current: Option<&Bundle>) -> Result<String, String> {
        let account = self.account(true).await?.ok_or("no account")?;
        let replaces =
            if self.ari.load(Ordering::Relaxed) == ARI_NO { None } else { current.and_then(|b| b.info.ari_id.clone()) };
        let order = client::order(&account, &self.cfg, &spec.names, &self.challenges, replaces);
        match tokio::time::timeout(ORDER_LIMIT, order).await {
            Ok(r) => r,
            Err(_) => Err(format!("no certificate after {}s", ORDER_LIMIT.as_secs())),
        }
    }
}

/// The renewal window last asked for a certificate.
#[derive(Debug)]
struct AriMemo {
    serial: String,
    window: Option<(SystemTime, SystemTime)>,
    next: Instant,
}

/// A time for the log, `YYYY-MM-DDTHH:MM:SSZ`.
fn date(t: SystemTime) -> String {
    rfc3339(t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(secs: u64) -> String {
    let days = secs / 86400;
    let rem = secs % 86400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Keeps one certificate: see the module documentation.
async fn run(sh: Arc<Shared>, spec: Spec) {
    let names = spec.names.join(", ");
    let r = schedule::random_unit();
    let mut installed: Option<String> = None;
    // A certificate obtained but not stored (the storage failed): served, not re-ordered.
    let mut unsaved: Option<Bundle> = None;
    // The last failure as this task knows it, in case the storage could not record it.
    let mut failed: Option<RetryState> = None;
    let mut memo = None;
    let mut waiting = false;
    let mut cut_logged = false;
    loop {
        let now = SystemTime::now();
        let stored = sh.stored(&spec);
        let current = match (stored, unsaved.clone()) {
            (Some(s), Some(u)) if u.info.not_after > s.info.not_after => Some(u),
            (Some(s), _) => Some(s),
            (None, u) => u.filter(|u| u.info.not_after > now),
        };
        match &current {
            Some(b) if installed.as_deref() != Some(b.info.serial.as_str()) => {
                if waiting || installed.is_some() {
                    log(format_args!(
                        "serving the certificate for {names} another instance stored (serial {}, valid until {})",
                        b.info.serial,
                        date(b.info.not_after)
                    ));
                }
                sh.managed.set(&spec.id, spec.names.clone(), Some(b.key.clone()));
                crate::ocsp::wake();
                installed = Some(b.info.serial.clone());
                failed = None;
            }
            None if installed.is_some() || sh.managed.has_cert(&spec.id) => {
                sh.managed.set(&spec.id, spec.names.clone(), None);
                installed = None;
                log(format_args!(
                    "error: no valid certificate for {names} (expired, or for other names); \
                     their handshakes fail until a new one is obtained"
                ));
            }
            _ => {}
        }
        if let Some(b) = &current {
            if !cut_logged && schedule::lead(b.info.not_before, b.info.not_after, sh.cfg.renew_before).1 {
                cut_logged = true;
                log(format_args!(
                    "note: renew_before is longer than half the lifetime of the certificate for {names}; renewing at half its lifetime"
                ));
            }
        }
        let window = match &current {
            Some(b) => sh.ari_window(&mut memo, b).await,
            None => None,
        };
        let due = match &current {
            // Revoked (its OCSP responder says): replaced at once.
            Some(b) if is_revoked(&b.info.serial) => now,
            Some(b) => schedule::renew_at(b.info.not_before, b.info.not_after, sh.cfg.renew_before, window, r),
            None => now,
        };
        let shared_retry = sh.storage.load_retry(&spec.id).filter(|s| s.names == spec.names);
        let retry = match (shared_retry.clone(), failed.clone()) {
            (Some(s), Some(m)) => Some(if m.retry_at > s.retry_at { m } else { s }),
            (s, m) => s.or(m),
        };
        let at = retry.as_ref().map_or(due, |s| due.max(s.retry_time()));
        if let Ok(wait) = at.duration_since(SystemTime::now()) {
            if !wait.is_zero() {
                nap(wait.min(STORAGE_POLL)).await;
                continue;
            }
        }
        let lock = match sh.storage.try_lock(&spec.id) {
            Ok(Some(l)) => l,
            Ok(None) => {
                if !waiting {
                    waiting = true;
                    log(format_args!("another instance is obtaining the certificate for {names}; waiting for it"));
                }
                nap(LOCK_POLL).await;
                continue;
            }
            Err(e) => {
                log(format_args!("error: {e}"));
                tokio::time::sleep(sh.cfg.retry_min).await;
                continue;
            }
        };
        waiting = false;
        // Another instance may have finished (or failed) while we waited for the lock.
        let serial = |b: Option<&Bundle>| b.map(|b| b.info.serial.clone());
        if unsaved.is_none() && serial(sh.stored(&spec).as_ref()) != serial(current.as_ref()) {
            continue;
        }
        if sh.storage.load_retry(&spec.id).filter(|s| s.names == spec.names) != shared_retry {
            continue;
        }
        log(format_args!(
            "{} a certificate for {names} from {} ({})",
            if current.is_some() { "renewing" } else { "obtaining" },
            sh.cfg.directory,
            sh.cfg.challenge.name()
        ));
        match sh.obtain(&spec, current.as_ref()).await.and_then(|pem| Ok((Bundle::from_pem(pem.as_bytes())?, pem))) {
            Ok((b, pem)) => {
                // Served before it is announced: whoever reads the line (an operator, a
                // test) finds the handshake using it.
                sh.managed.set(&spec.id, spec.names.clone(), Some(b.key.clone()));
                crate::ocsp::wake();
                installed = Some(b.info.serial.clone());
                log(format_args!(
                    "obtained a certificate for {names} (serial {}, valid until {})",
                    b.info.serial,
                    date(b.info.not_after)
                ));
                failed = None;
                match sh.storage.save_cert(&spec.id, pem.as_bytes()) {
                    Ok(()) => unsaved = None,
                    Err(e) => {
                        log(format_args!("error: storing the certificate for {names}: {e}"));
                        unsaved = Some(b);
                    }
                }
            }
            Err(e) => {
                let failures = retry.as_ref().map_or(0, |s| s.failures) + 1;
                let wait = schedule::backoff(failures, sh.cfg.retry_min, sh.cfg.retry_max);
                let retry_at =
                    (SystemTime::now() + wait).duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                let state = RetryState { names: spec.names.clone(), failures, retry_at, error: e.clone() };
                if let Err(se) = sh.storage.save_retry(&spec.id, &state) {
                    log(format_args!("error: storing the retry state for {names}: {se}"));
                }
                failed = Some(state);
                let serving = match &current {
                    Some(b) => format!("; still serving the certificate valid until {}", date(b.info.not_after)),
                    None => "; its handshakes fail until then".into(),
                };
                log(format_args!(
                    "error: could not obtain a certificate for {names} (attempt {failures}): {e}; next attempt in {}{serving}",
                    human(wait)
                ));
            }
        }
        drop(lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_secs(7200)), "2h");
    }
}
