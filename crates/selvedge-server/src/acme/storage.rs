//! The storage directory: account, certificates, retry state, challenge answers and locks,
//! shared by every instance that names the same directory.
//!
//! ```text
//! STORAGE/                                 0700
//!   ISSUER/                                the CA's directory URL as a file name
//!     account-EMAIL.json                   the account key and URL (instant-acme's credentials)
//!     certs/ID.pem                         chain (leaf first) and private key
//!     certs/ID.retry                       failures in a row and the next attempt (JSON)
//!     locks/account.lock, locks/ID.lock    flock(2): one instance orders at a time
//!   challenges/http-01/TOKEN               key authorization being validated
//!   challenges/tls-alpn-01/NAME.pem        acmeIdentifier certificate and key being validated
//! ```
//!
//! Files are 0600 and directories 0700; every file is written to a temporary name, synced
//! and renamed, so a reader (another instance) sees the old file or the new one, never a
//! part. `ID` is the certificate's first host name. Locks are `flock`s on files that are
//! never removed; the kernel drops them when their holder exits, so a crashed instance
//! never blocks the others. Shared volumes must support `flock` (local file systems, NFSv4).
//!
//! In a fleet (`[fleet]`, with `acme_storage`, the default) the same things live in Redis
//! instead ([`FleetStore`]), under `{prefix}acme:ISSUER:`: `account:EMAIL`, `cert:ID`,
//! `retry:ID`, `lock:NAME`; challenge answers under `{prefix}acme:challenge:` (15 minutes)
//! and published to the other instances, which keep them in memory (a validation request
//! never waits for Redis). A lock is a key set if absent, with a random token and a 60 s
//! expiry its holder extends every 20 s: a holder that dies blocks the others for a minute
//! at most. Its token fences the holder's writes: a certificate is stored only while the
//! lock is still the writer's (a holder that stalled past its expiry cannot overwrite the
//! next holder's result). A certificate stored is announced, and the other instances read
//! it at once.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// One storage directory, for one CA (or, in a fleet, its keys in Redis).
#[derive(Debug, Clone)]
pub struct Storage {
    root: PathBuf,
    issuer: PathBuf,
    fleet: Option<Arc<FleetStore>>,
}

/// A held lock; dropping it unlocks.
#[derive(Debug)]
pub struct Lock {
    _file: Option<File>,
    _fleet: Option<FleetLock>,
}

/// The storage's keys in Redis.
#[derive(Debug)]
pub struct FleetStore {
    /// `{prefix}acme:ISSUER:`
    keys: String,
    /// `{prefix}acme:challenge:`
    challenges: String,
    /// The locks this instance holds: name → token.
    held: Mutex<HashMap<String, String>>,
}

/// How long a lock lives unless its holder extends it.
const LOCK_TTL: Duration = Duration::from_secs(60);
/// How long a call to Redis may take (off the request paths).
const REDIS_LIMIT: Duration = Duration::from_secs(2);
/// How long a challenge answer is kept in Redis.
const CHALLENGE_TTL: Duration = Duration::from_secs(900);

const RENEW: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const FENCED_SET: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[2], ARGV[2]); redis.call('DEL', KEYS[3]); return 1 else return 0 end";

/// A lock held in Redis: extended in the background, released when dropped.
#[derive(Debug)]
struct FleetLock {
    store: Arc<FleetStore>,
    name: String,
    key: String,
    token: String,
    renew: Option<tokio::task::AbortHandle>,
}

impl Drop for FleetLock {
    fn drop(&mut self) {
        self.store.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.name);
        if let Some(r) = &self.renew {
            r.abort();
        }
        let (key, token) = (self.key.clone(), self.token.clone());
        if let Some(rt) = crate::fleet::get().and_then(|f| f.link.runtime()) {
            rt.spawn(async move {
                let Some(f) = crate::fleet::get() else { return };
                let _ = f
                    .link
                    .call(REDIS_LIMIT, |mut c| async move {
                        redis::Script::new(RELEASE).key(key).arg(token).invoke_async::<i64>(&mut c).await
                    })
                    .await;
            });
        }
    }
}

fn unanswered() -> io::Error {
    io::Error::other("Redis did not answer")
}

impl FleetStore {
    fn get(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let key = format!("{}{name}", self.keys);
        crate::fleet::block(REDIS_LIMIT, |mut c| async move {
            redis::cmd("GET").arg(key).query_async::<Option<Vec<u8>>>(&mut c).await
        })
        .ok_or_else(unanswered)
    }

    fn set(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let (key, data) = (format!("{}{name}", self.keys), data.to_vec());
        crate::fleet::block(REDIS_LIMIT, |mut c| async move {
            redis::cmd("SET").arg(key).arg(data).query_async::<()>(&mut c).await
        })
        .ok_or_else(unanswered)
    }
}

/// Failed attempts at a certificate, shared by the instances so that together they wait as
/// one would.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RetryState {
    /// The names the attempts were for (another set starts afresh).
    pub names: Vec<String>,
    /// Failures in a row.
    pub failures: u32,
    /// No attempt before this (seconds since the epoch).
    pub retry_at: u64,
    /// The last error.
    pub error: String,
}

impl RetryState {
    /// `retry_at` as a time.
    pub fn retry_time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(self.retry_at)
    }
}

/// A file-name-safe key for a CA: its directory URL without the scheme, other characters
/// than letters, digits, `.` and `-` as `-`.
pub fn issuer_key(directory: &str) -> String {
    let rest = directory.split_once("://").map_or(directory, |(_, r)| r);
    let key: String =
        rest.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '-' }).collect();
    let key = key.trim_matches('-').to_string();
    if key.is_empty() || key.starts_with('.') {
        format!("ca-{key}")
    } else {
        key
    }
}

/// Whether `s` can be a file name as it is: a host name or a base64url token.
fn safe_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

impl Storage {
    /// Opens (creating, 0700) the storage directory for the CA at `directory`.
    ///
    /// # Errors
    /// The directories cannot be created.
    pub fn open(root: &Path, directory: &str) -> io::Result<Storage> {
        let s = Storage { root: root.to_path_buf(), issuer: root.join(issuer_key(directory)), fleet: None };
        for d in [
            s.root.clone(),
            s.issuer.clone(),
            s.issuer.join("certs"),
            s.issuer.join("locks"),
            s.root.join("challenges/http-01"),
            s.root.join("challenges/tls-alpn-01"),
        ] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", d.display())))?;
        }
        Ok(s)
    }

    /// The same storage kept in the running fleet's Redis (its directory stays, unused but
    /// for nothing: it is made as without a fleet).
    pub fn in_fleet(mut self, directory: &str) -> Storage {
        if let Some(f) = crate::fleet::get() {
            let base = crate::fleet::key(&f.cfg.prefix, "acme:");
            self.fleet = Some(Arc::new(FleetStore {
                keys: format!("{base}{}:", issuer_key(directory)),
                challenges: format!("{base}challenge:"),
                held: Mutex::new(HashMap::new()),
            }));
        }
        self
    }

    /// Whether the storage is the fleet's Redis.
    pub fn is_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// The storage directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether others than the owner may read the storage directory (a warning at startup).
    pub fn too_open(&self) -> bool {
        fs::metadata(&self.root).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
    }

    fn account_path(&self, email: Option<&str>) -> PathBuf {
        let who = email.map_or("default".to_string(), |e| {
            e.chars().map(|c| if c.is_ascii_alphanumeric() || "@.-_+".contains(c) { c } else { '-' }).collect()
        });
        self.issuer.join(format!("account-{who}.json"))
    }

    /// The stored account credentials, if any.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn load_account(&self, email: Option<&str>) -> io::Result<Option<Vec<u8>>> {
        if let Some(f) = &self.fleet {
            return f.get(&account_key(email));
        }
        read_opt(&self.account_path(email))
    }

    /// Stores the account credentials.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_account(&self, email: Option<&str>, creds: &[u8]) -> io::Result<()> {
        if let Some(f) = &self.fleet {
            return f.set(&account_key(email), creds);
        }
        write_atomic(&self.account_path(email), creds)
    }

    fn cert_path(&self, id: &str, ext: &str) -> PathBuf {
        self.issuer.join("certs").join(format!("{id}.{ext}"))
    }

    /// The stored bundle of certificate `id`, if any.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn load_cert(&self, id: &str) -> io::Result<Option<Vec<u8>>> {
        if let Some(f) = &self.fleet {
            return f.get(&format!("cert:{id}"));
        }
        read_opt(&self.cert_path(id, "pem"))
    }

    /// Stores the bundle of certificate `id` (chain, then key) and clears its retry state.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_cert(&self, id: &str, bundle: &[u8]) -> io::Result<()> {
        if let Some(f) = &self.fleet {
            return save_fenced(f, id, bundle);
        }
        write_atomic(&self.cert_path(id, "pem"), bundle)?;
        match fs::remove_file(self.cert_path(id, "retry")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The OCSP answer last stapled to certificate `id`, if any (checked again before use).
    pub fn load_ocsp(&self, id: &str) -> Option<Vec<u8>> {
        match &self.fleet {
            Some(f) => f.get(&format!("ocsp:{id}")).ok()?,
            None => read_opt(&self.cert_path(id, "ocsp")).ok()?,
        }
    }

    /// Stores the OCSP answer stapled to certificate `id`.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_ocsp(&self, id: &str, der: &[u8]) -> io::Result<()> {
        if let Some(f) = &self.fleet {
            return f.set(&format!("ocsp:{id}"), der);
        }
        write_atomic(&self.cert_path(id, "ocsp"), der)
    }

    /// The retry state of certificate `id` (`None` when absent or unreadable).
    pub fn load_retry(&self, id: &str) -> Option<RetryState> {
        let bytes = match &self.fleet {
            Some(f) => f.get(&format!("retry:{id}")).ok()??,
            None => read_opt(&self.cert_path(id, "retry")).ok()??,
        };
        serde_json::from_slice(&bytes).ok()
    }

    /// Stores the retry state of certificate `id`.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_retry(&self, id: &str, state: &RetryState) -> io::Result<()> {
        let json = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
        if let Some(f) = &self.fleet {
            return f.set(&format!("retry:{id}"), &json);
        }
        write_atomic(&self.cert_path(id, "retry"), &json)
    }

    /// Takes the lock `name` if no one holds it (`Ok(None)`: someone does).
    ///
    /// # Errors
    /// The lock file cannot be opened, or `flock` failed otherwise.
    pub fn try_lock(&self, name: &str) -> io::Result<Option<Lock>> {
        if let Some(f) = &self.fleet {
            return try_fleet_lock(f, name).map(|l| l.map(|l| Lock { _file: None, _fleet: Some(l) }));
        }
        let path = self.issuer.join("locks").join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(Lock { _file: Some(file), _fleet: None })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(io::Error::new(io::Error::from(e).kind(), format!("flock {}: {e}", path.display()))),
        }
    }

    fn http01_path(&self, token: &str) -> Option<PathBuf> {
        safe_name(token).then(|| self.root.join("challenges/http-01").join(token))
    }

    fn tls_alpn01_path(&self, name: &str) -> Option<PathBuf> {
        let name = name.to_ascii_lowercase();
        safe_name(&name).then(|| self.root.join("challenges/tls-alpn-01").join(format!("{name}.pem")))
    }

    /// Publishes an HTTP-01 answer for the other instances.
    ///
    /// # Errors
    /// Writing failed, or the token is not a plain token.
    pub fn put_http01(&self, token: &str, key_authorization: &str) -> io::Result<()> {
        if let Some(f) = &self.fleet {
            if !safe_name(token) {
                return Err(bad_name(token));
            }
            return put_challenge(f, "http01", token, key_authorization);
        }
        let p = self.http01_path(token).ok_or_else(|| bad_name(token))?;
        write_atomic(&p, key_authorization.as_bytes())
    }

    /// An HTTP-01 answer another instance published.
    pub fn http01(&self, token: &str) -> Option<String> {
        if self.fleet.is_some() {
            // The fleet's answers came with their events (no Redis on a request path).
            return None;
        }
        let bytes = read_opt(&self.http01_path(token)?).ok()??;
        String::from_utf8(bytes).ok()
    }

    /// Publishes a TLS-ALPN-01 certificate and key (PEM) for the other instances.
    ///
    /// # Errors
    /// Writing failed, or the name is not a host name.
    pub fn put_tls_alpn01(&self, name: &str, pem: &str) -> io::Result<()> {
        if let Some(f) = &self.fleet {
            if !safe_name(name) {
                return Err(bad_name(name));
            }
            return put_challenge(f, "tls_alpn01", &name.to_ascii_lowercase(), pem);
        }
        let p = self.tls_alpn01_path(name).ok_or_else(|| bad_name(name))?;
        write_atomic(&p, pem.as_bytes())
    }

    /// A TLS-ALPN-01 certificate and key another instance published.
    pub fn tls_alpn01(&self, name: &str) -> Option<Vec<u8>> {
        if self.fleet.is_some() {
            return None;
        }
        read_opt(&self.tls_alpn01_path(name)?).ok()?
    }

    /// Removes published answers.
    pub fn remove_challenge(&self, http01_token: Option<&str>, tls_alpn01_name: Option<&str>) {
        if let Some(f) = &self.fleet {
            remove_challenges(f, http01_token, tls_alpn01_name);
            return;
        }
        for p in [http01_token.and_then(|t| self.http01_path(t)), tls_alpn01_name.and_then(|n| self.tls_alpn01_path(n))]
            .into_iter()
            .flatten()
        {
            let _ = fs::remove_file(p);
        }
    }
}

/// The account's key name: `account:EMAIL` (`default` without one).
fn account_key(email: Option<&str>) -> String {
    format!("account:{}", email.unwrap_or("default"))
}

/// Takes lock `name` in Redis if free: a random token, set if absent with [`LOCK_TTL`],
/// extended every third of it while held.
fn try_fleet_lock(f: &Arc<FleetStore>, name: &str) -> io::Result<Option<FleetLock>> {
    let key = format!("{}lock:{name}", f.keys);
    let token = format!("{}-{:016x}", std::process::id(), (rand_u32() as u64) << 32 | u64::from(rand_u32()));
    let ttl = LOCK_TTL.as_millis() as u64;
    let (k, t) = (key.clone(), token.clone());
    let got = crate::fleet::block(REDIS_LIMIT, move |mut c| async move {
        redis::cmd("SET").arg(k).arg(t).arg("NX").arg("PX").arg(ttl).query_async::<Option<String>>(&mut c).await
    })
    .ok_or_else(unanswered)?;
    if got.is_none() {
        return Ok(None);
    }
    f.held.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), token.clone());
    let renew = crate::fleet::get().and_then(|fl| fl.link.runtime()).map(|rt| {
        let (k, t) = (key.clone(), token.clone());
        rt.spawn(async move {
            loop {
                tokio::time::sleep(LOCK_TTL / 3).await;
                let Some(fl) = crate::fleet::get() else { return };
                let (k, t) = (k.clone(), t.clone());
                let kept = fl
                    .link
                    .call(REDIS_LIMIT, |mut c| async move {
                        redis::Script::new(RENEW).key(k).arg(t).arg(ttl).invoke_async::<i64>(&mut c).await
                    })
                    .await;
                if kept == Some(0) {
                    super::log("error: an ACME lock in Redis expired while held; its holder's result is not stored");
                    return;
                }
            }
        })
        .abort_handle()
    });
    Ok(Some(FleetLock { store: f.clone(), name: name.to_string(), key, token, renew }))
}

/// Stores certificate `id` if this instance still holds its lock (the token fences a
/// holder that lost it), clears its retry state, and tells the other instances.
fn save_fenced(f: &FleetStore, id: &str, bundle: &[u8]) -> io::Result<()> {
    let token = f.held.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned();
    let Some(token) = token else {
        return Err(io::Error::other("the certificate's lock is not held here"));
    };
    let (lock, cert, retry) =
        (format!("{}lock:{id}", f.keys), format!("{}cert:{id}", f.keys), format!("{}retry:{id}", f.keys));
    let data = bundle.to_vec();
    let stored = crate::fleet::block(REDIS_LIMIT, move |mut c| async move {
        redis::Script::new(FENCED_SET)
            .key(lock)
            .key(cert)
            .key(retry)
            .arg(token)
            .arg(data)
            .invoke_async::<i64>(&mut c)
            .await
    })
    .ok_or_else(unanswered)?;
    if stored != 1 {
        return Err(io::Error::other(
            "the certificate's lock expired before it was stored (another instance may hold it)",
        ));
    }
    crate::fleet::events::acme_cert(id);
    Ok(())
}

/// Puts a challenge answer in Redis and publishes it to the other instances.
fn put_challenge(f: &FleetStore, kind: &'static str, name: &str, answer: &str) -> io::Result<()> {
    let key = format!("{}{kind}:{name}", f.challenges);
    let ttl = CHALLENGE_TTL.as_millis() as u64;
    let data = answer.to_string();
    crate::fleet::block(REDIS_LIMIT, move |mut c| async move {
        redis::cmd("SET").arg(key).arg(data).arg("PX").arg(ttl).query_async::<()>(&mut c).await
    })
    .ok_or_else(unanswered)?;
    crate::fleet::events::acme_challenge(kind, name, Some(answer));
    Ok(())
}

fn remove_challenges(f: &FleetStore, http01_token: Option<&str>, tls_alpn01_name: Option<&str>) {
    let names: Vec<(&'static str, String)> = [
        http01_token.map(|t| ("http01", t.to_string())),
        tls_alpn01_name.map(|n| ("tls_alpn01", n.to_ascii_lowercase())),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (kind, name) in names {
        let key = format!("{}{kind}:{name}", f.challenges);
        let _ = crate::fleet::block(REDIS_LIMIT, move |mut c| async move {
            redis::cmd("DEL").arg(key).query_async::<()>(&mut c).await
        });
        crate::fleet::events::acme_challenge(kind, &name, None);
    }
}

fn bad_name(s: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{s:?} cannot be a file name"))
}

/// The file's contents, `None` if it does not exist.
fn read_opt(p: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
    }
}

/// Writes `data` to `path` (mode 0600) through a synced temporary file and a rename.
fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{}.{:08x}.tmp", std::process::id(), rand_u32()));
    let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let written = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(ctx(e));
    }
    if let Some(dir) = path.parent() {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn rand_u32() -> u32 {
    (super::schedule::random_unit() * f64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("selvedge-acme-storage-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn issuer_keys() {
        assert_eq!(
            issuer_key("https://acme-v02.api.letsencrypt.org/directory"),
            "acme-v02.api.letsencrypt.org-directory"
        );
        assert_eq!(issuer_key("https://127.0.0.1:14000/dir"), "127.0.0.1-14000-dir");
        assert_eq!(issuer_key("https://../"), "ca-..");
    }

    #[test]
    fn files_are_private_and_replaced_whole() {
        let root = temp("files");
        let s = Storage::open(&root, "https://ca.example/dir").unwrap();
        assert_eq!(fs::metadata(&root).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(!s.too_open());
        assert_eq!(s.load_cert("a.example.com").unwrap(), None);
        s.save_cert("a.example.com", b"one").unwrap();
        s.save_cert("a.example.com", b"two").unwrap();
        assert_eq!(s.load_cert("a.example.com").unwrap().as_deref(), Some(&b"two"[..]));
        let p = root.join("ca.example-dir/certs/a.example.com.pem");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        // No temporary file left behind.
        let names: Vec<_> = fs::read_dir(p.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        s.save_account(Some("ops@example.com"), b"{}").unwrap();
        assert_eq!(s.load_account(Some("ops@example.com")).unwrap().as_deref(), Some(&b"{}"[..]));
        assert_eq!(s.load_account(None).unwrap(), None);
        // Retry state is cleared by a new certificate.
        let r = RetryState { names: vec!["a.example.com".into()], failures: 2, retry_at: 7, error: "x".into() };
        s.save_retry("a.example.com", &r).unwrap();
        assert_eq!(s.load_retry("a.example.com"), Some(r));
        s.save_cert("a.example.com", b"three").unwrap();
        assert_eq!(s.load_retry("a.example.com"), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn one_lock_holder_at_a_time() {
        let root = temp("locks");
        let s = Storage::open(&root, "https://ca.example/dir").unwrap();
        let held = s.try_lock("a").unwrap().expect("free");
        // Another open file description (as another process would have) is refused.
        assert!(s.try_lock("a").unwrap().is_none());
        assert!(s.try_lock("b").unwrap().is_some());
        drop(held);
        assert!(s.try_lock("a").unwrap().is_some());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn challenge_names_cannot_escape() {
        let root = temp("challenges");
        let s = Storage::open(&root, "https://ca.example/dir").unwrap();
        s.put_http01("tok_en-1", "tok_en-1.thumb").unwrap();
        assert_eq!(s.http01("tok_en-1").as_deref(), Some("tok_en-1.thumb"));
        for bad in ["../x", "", ".hidden", "a/b", "a b"] {
            assert!(s.put_http01(bad, "x").is_err(), "{bad}");
            assert_eq!(s.http01(bad), None);
        }
        s.put_tls_alpn01("A.example.com", "pem").unwrap();
        assert_eq!(s.tls_alpn01("a.example.com").as_deref(), Some(&b"pem"[..]));
        s.remove_challenge(Some("tok_en-1"), Some("a.example.com"));
        assert_eq!(s.http01("tok_en-1"), None);
        assert_eq!(s.tls_alpn01("a.example.com"), None);
        fs::remove_dir_all(&root).unwrap();
    }
}
