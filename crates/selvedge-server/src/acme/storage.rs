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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// One storage directory, for one CA.
#[derive(Debug, Clone)]
pub struct Storage {
    root: PathBuf,
    issuer: PathBuf,
}

/// A held lock; dropping it unlocks.
#[derive(Debug)]
pub struct Lock {
    _file: File,
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
        let s = Storage { root: root.to_path_buf(), issuer: root.join(issuer_key(directory)) };
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
        read_opt(&self.account_path(email))
    }

    /// Stores the account credentials.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_account(&self, email: Option<&str>, creds: &[u8]) -> io::Result<()> {
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
        read_opt(&self.cert_path(id, "pem"))
    }

    /// Stores the bundle of certificate `id` (chain, then key) and clears its retry state.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_cert(&self, id: &str, bundle: &[u8]) -> io::Result<()> {
        write_atomic(&self.cert_path(id, "pem"), bundle)?;
        match fs::remove_file(self.cert_path(id, "retry")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The retry state of certificate `id` (`None` when absent or unreadable).
    pub fn load_retry(&self, id: &str) -> Option<RetryState> {
        let bytes = read_opt(&self.cert_path(id, "retry")).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// Stores the retry state of certificate `id`.
    ///
    /// # Errors
    /// Writing failed.
    pub fn save_retry(&self, id: &str, state: &RetryState) -> io::Result<()> {
        let json = serde_json::to_vec_pretty(state).map_err(io::Error::other)?;
        write_atomic(&self.cert_path(id, "retry"), &json)
    }

    /// Takes the lock `name` if no one holds it (`Ok(None)`: someone does).
    ///
    /// # Errors
    /// The lock file cannot be opened, or `flock` failed otherwise.
    pub fn try_lock(&self, name: &str) -> io::Result<Option<Lock>> {
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
            Ok(()) => Ok(Some(Lock { _file: file })),
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
        let p = self.http01_path(token).ok_or_else(|| bad_name(token))?;
        write_atomic(&p, key_authorization.as_bytes())
    }

    /// An HTTP-01 answer another instance published.
    pub fn http01(&self, token: &str) -> Option<String> {
        let bytes = read_opt(&self.http01_path(token)?).ok()??;
        String::from_utf8(bytes).ok()
    }

    /// Publishes a TLS-ALPN-01 certificate and key (PEM) for the other instances.
    ///
    /// # Errors
    /// Writing failed, or the name is not a host name.
    pub fn put_tls_alpn01(&self, name: &str, pem: &str) -> io::Result<()> {
        let p = self.tls_alpn01_path(name).ok_or_else(|| bad_name(name))?;
        write_atomic(&p, pem.as_bytes())
    }

    /// A TLS-ALPN-01 certificate and key another instance published.
    pub fn tls_alpn01(&self, name: &str) -> Option<Vec<u8>> {
        read_opt(&self.tls_alpn01_path(name)?).ok()?
    }

    /// Removes published answers.
    pub fn remove_challenge(&self, http01_token: Option<&str>, tls_alpn01_name: Option<&str>) {
        for p in [http01_token.and_then(|t| self.http01_path(t)), tls_alpn01_name.and_then(|n| self.tls_alpn01_path(n))]
            .into_iter()
            .flatten()
        {
            let _ = fs::remove_file(p);
        }
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
