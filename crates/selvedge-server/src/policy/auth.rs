//! `auth`: HTTP Basic authentication (RFC 7617) against an htpasswd file.
//!
//! - Entries as `htpasswd` writes them: bcrypt (`$2y$`, `$2a$`, `$2b$`; `htpasswd -B`),
//!   Apache MD5 (`$apr1$`, the default of Debian's `htpasswd`; 1,000 rounds of MD5, checked
//!   on the worker) and `{SHA}` (base64 SHA-1; `htpasswd -s`). crypt(3) and plain text are
//!   refused when the configuration is read, with the file's line, so a file the server
//!   cannot check never silently locks everyone out or lets anyone in.
//! - The file is read with the configuration, so SIGHUP reloads it.
//! - bcrypt is slow on purpose (~50–250 ms at the usual costs): it runs off the worker
//!   threads (`spawn_blocking`), at most one per core at a time; a login flood queues
//!   there (past 1,024 waiting, 503) while the workers keep serving everyone else.
//! - A successful check is remembered (a keyed SHA-256 of the credentials, never the
//!   password), so a browser sending the same `Authorization` on every request costs one
//!   bcrypt, not one per request. The memory is per route and dropped on reload.
//! - Secrets are compared in constant time; an unknown user costs a bcrypt like a known
//!   one (checked against another entry's hash), so timing does not tell users apart.
//! - `Authorization` values over 1 KiB, other schemes, bad base64, credentials without `:`
//!   and a second `Authorization` field are answered 401 at once, without hashing anything.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;
use selvedge::http::{header, HeaderValue, StatusCode};
use selvedge::{Request, Response};
use serde::Deserialize;
use tokio::sync::Semaphore;

/// Longest `Authorization` value considered (longer: 401 without decoding).
const MAX_CREDENTIALS: usize = 1024;
/// Successful checks remembered per route.
const CACHE_MAX: usize = 4096;
/// bcrypt checks allowed to wait for a thread before new ones get 503.
const MAX_WAITING: usize = 1024;

/// `auth = { realm, htpasswd }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    realm: Option<String>,
    htpasswd: String,
}

/// A stored password hash.
#[derive(Clone, PartialEq, Eq)]
enum Hash {
    Bcrypt(Arc<str>),
    Sha1([u8; 20]),
    /// `$apr1$SALT$DIGEST`: the salt (at most 8 bytes) and the 22 characters of the digest.
    Apr1(Box<[u8]>, [u8; 22]),
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hash::Bcrypt(_) => "bcrypt",
            Hash::Sha1(_) => "{SHA}",
            Hash::Apr1(..) => "$apr1$",
        })
    }
}

/// A route's `auth` setting: the realm and the users read from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// The realm named in `WWW-Authenticate`.
    pub realm: String,
    users: HashMap<Vec<u8>, Hash>,
}

impl AuthConfig {
    /// Reads the htpasswd file named in `raw` (relative paths from the config's directory).
    ///
    /// # Errors
    /// An unreadable file, a bad line (with its number), a realm that cannot be quoted.
    pub fn from_raw(raw: &RawAuth, abs: &dyn Fn(&str) -> std::path::PathBuf) -> Result<AuthConfig, String> {
        let realm = raw.realm.clone().unwrap_or_else(|| "restricted".into());
        if realm.is_empty() || !realm.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\') {
            return Err(format!("auth: realm {realm:?}: printable ASCII without quotes or backslashes"));
        }
        let file = abs(&raw.htpasswd);
        let users = load_htpasswd(&file)?;
        Ok(AuthConfig { realm, users })
    }

    /// Reads `file` (`serve --auth`).
    ///
    /// # Errors
    /// As [`AuthConfig::from_raw`].
    pub fn from_file(file: &Path, realm: String) -> Result<AuthConfig, String> {
        let raw = RawAuth { realm: Some(realm), htpasswd: file.display().to_string() };
        AuthConfig::from_raw(&raw, &|p| std::path::PathBuf::from(p))
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file has no users (then nobody gets in).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Parses an htpasswd file.
/// The largest htpasswd file read (about 100,000 users).
const MAX_HTPASSWD: u64 = 16 << 20;

fn load_htpasswd(file: &Path) -> Result<HashMap<Vec<u8>, Hash>, String> {
    let bytes =
        crate::files::read_small(file, MAX_HTPASSWD).map_err(|e| format!("auth: htpasswd {}: {e}", file.display()))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("auth: htpasswd {}: not UTF-8", file.display()))?;
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = |why: String| format!("auth: {}:{}: {why}", file.display(), i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, rest)) = line.split_once(':') else {
            return Err(at("expected user:hash".into()));
        };
        let hash = rest.split(':').next().unwrap_or("").trim();
        if user.is_empty() {
            return Err(at("empty user name".into()));
        }
        users.insert(user.as_bytes().to_vec(), parse_hash(hash).map_err(at)?);
    }
    Ok(users)
}

fn parse_hash(h: &str) -> Result<Hash, String> {
    if let Some(b64) = h.strip_prefix("{SHA}") {
        let d = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| "{SHA}: bad base64".to_string())?;
        return d.try_into().map(Hash::Sha1).map_err(|_| "{SHA}: not a SHA-1 digest".into());
    }
    if ["$2y$", "$2a$", "$2b$", "$2x$"].iter().any(|p| h.starts_with(p)) {
        // $2y$CC$ + 22 characters of salt + 31 of hash, in bcrypt's base64 alphabet.
        let cost = h.get(4..6).and_then(|c| c.parse::<u32>().ok());
        let body = h.get(7..).unwrap_or("");
        let ok = h.len() == 60
            && h.as_bytes()[6] == b'$'
            && cost.is_some_and(|c| (4..=31).contains(&c))
            && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
        return if ok { Ok(Hash::Bcrypt(h.into())) } else { Err("malformed bcrypt hash".into()) };
    }
    if let Some(rest) = h.strip_prefix("$apr1$") {
        let (salt, digest) = rest.split_once('$').ok_or("$apr1$: expected $apr1$SALT$DIGEST")?;
        let alphabet = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'/';
        if salt.len() > 8 || !salt.bytes().all(alphabet) || digest.len() != 22 || !digest.bytes().all(alphabet) {
            return Err("malformed $apr1$ hash".into());
        }
        return Ok(Hash::Apr1(salt.as_bytes().into(), digest.as_bytes().try_into().expect("22 bytes")));
    }
    if h.starts_with('$') {
        return Err("this crypt(3) hash is not supported: use `htpasswd -B` (bcrypt) or `-s` ({SHA})".into());
    }
    Err("unrecognized hash (plain text or crypt?): use `htpasswd -B` (bcrypt) or `-s` ({SHA})".into())
}

/// What a request's credentials come to, without waiting.
#[derive(Debug)]
pub enum Verdict {
    /// Known good (remembered, or a `{SHA}` entry that matched).
    Pass,
    /// No, bad or wrong credentials: answer [`BasicAuth::challenge`].
    Refuse,
    /// A bcrypt check is needed: [`BasicAuth::verify`].
    Verify(Verify),
}

/// A pending bcrypt check.
pub struct Verify {
    hash: Arc<str>,
    password: Vec<u8>,
    digest: [u8; 32],
    known: bool,
}

impl std::fmt::Debug for Verify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verify")
    }
}

/// The outcome of [`BasicAuth::verify`].
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// The password matches.
    Pass,
    /// It does not (or the user is unknown).
    Refuse,
    /// Too many checks waiting: answer 503.
    Busy,
}

/// A route's Basic authentication.
pub struct BasicAuth {
    challenge: HeaderValue,
    users: HashMap<Vec<u8>, Hash>,
    /// A bcrypt hash an unknown user's password is checked against (for equal timing).
    decoy: Option<Arc<str>>,
    /// Keyed digests of credentials that passed.
    passed: Mutex<HashMap<[u8; 32], ()>>,
    key: [u8; 32],
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth").field("challenge", &self.challenge).field("users", &self.users.len()).finish()
    }
}

impl BasicAuth {
    /// The checker for `cfg`, with a fresh random key for its memory of good credentials.
    pub fn new(cfg: &AuthConfig) -> BasicAuth {
        let challenge = HeaderValue::try_from(format!("Basic realm=\"{}\", charset=\"UTF-8\"", cfg.realm))
            .expect("the realm was checked");
        let decoy = cfg.users.values().find_map(|h| match h {
            Hash::Bcrypt(b) => Some(b.clone()),
            Hash::Sha1(_) | Hash::Apr1(..) => None,
        });
        let mut key = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key).expect("the system's random source");
        BasicAuth { challenge, users: cfg.users.clone(), decoy, passed: Mutex::new(HashMap::new()), key }
    }

    /// Looks at `req`'s credentials.
    pub fn check(&self, req: &Request) -> Verdict {
        let Some(value) = req.header("authorization") else { return Verdict::Refuse };
        // One set of credentials: a second `Authorization` (not a list field) could be the
        // one an application behind reads.
        if req.header_bytes().filter(|(n, _)| n.eq_ignore_ascii_case(b"authorization")).nth(1).is_some() {
            return Verdict::Refuse;
        }
        let Some(creds) = basic_credentials(value) else { return Verdict::Refuse };
        let digest = self.digest(creds);
        if self.passed.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&digest) {
            return Verdict::Pass;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(creds) else { return Verdict::Refuse };
        let Some(colon) = decoded.iter().position(|&b| b == b':') else { return Verdict::Refuse };
        let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
        match self.users.get(user) {
            Some(Hash::Sha1(want)) => {
                let got = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                if ct_eq(got.as_ref(), want) {
                    self.remember(digest);
                    Verdict::Pass
                } else {
                    Verdict::Refuse
                }
            }
            Some(Hash::Apr1(salt, want)) => {
                if ct_eq(&apr1(password, salt), want) {
                    self.remember(digest);
                    Verdict::Pass
                } else {
                    Verdict::Refuse
                }
            }
            Some(Hash::Bcrypt(h)) => {
                Verdict::Verify(Verify { hash: h.clone(), password: password.to_vec(), digest, known: true })
            }
            None => match &self.decoy {
                Some(h) => {
                    Verdict::Verify(Verify { hash: h.clone(), password: password.to_vec(), digest, known: false })
                }
                None => {
                    // No bcrypt users: hash anyway, as for a known one.
                    let _ = apr1(password, b"decoy");
                    Verdict::Refuse
                }
            },
        }
    }

    /// Runs a bcrypt check on the blocking pool (one per core at a time).
    pub async fn verify(&self, v: Verify) -> Checked {
        static WAITING: AtomicUsize = AtomicUsize::new(0);
        if WAITING.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            WAITING.fetch_sub(1, Ordering::AcqRel);
            return Checked::Busy;
        }
        let permit = slots().acquire().await;
        WAITING.fetch_sub(1, Ordering::AcqRel);
        let Ok(_permit) = permit else { return Checked::Busy };
        let Verify { hash, password, digest, known } = v;
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(&password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if ok && known {
            self.remember(digest);
            Checked::Pass
        } else {
            Checked::Refuse
        }
    }

    /// The 401 answer.
    pub fn challenge(&self) -> Response {
        Response::bytes(StatusCode::UNAUTHORIZED, "401 Unauthorized\n")
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .header(header::WWW_AUTHENTICATE, self.challenge.clone())
    }

    fn digest(&self, creds: &[u8]) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(&self.key);
        ctx.update(creds);
        ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
    }

    fn remember(&self, digest: [u8; 32]) {
        let mut m = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= CACHE_MAX {
            // Full: forget about half (whichever the table holds first), keep going.
            let mut n = 0;
            m.retain(|_, _| {
                n += 1;
                n % 2 == 0
            });
        }
        m.insert(digest, ());
    }
}

/// The base64 token of `Basic <token>` (scheme case-insensitive), if short enough.
fn basic_credentials(v: &[u8]) -> Option<&[u8]> {
    if v.len() > MAX_CREDENTIALS || v.len() < 6 || !v[..5].eq_ignore_ascii_case(b"basic") || v[5] != b' ' {
        return None;
    }
    let token = v[6..].trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The bcrypt slots: one per core.
fn slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// Apache's MD5 password hash (`$apr1$`, Poul-Henning Kamp's MD5-crypt with Apache's magic
/// string): the 22 characters of the digest of `password` with `salt`, in crypt's base64.
fn apr1(password: &[u8], salt: &[u8]) -> [u8; 22] {
    use md5::{Digest, Md5};
    const MAGIC: &[u8] = b"$apr1$";
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let alt = Md5::new().chain_update(password).chain_update(salt).chain_update(password).finalize();
    let mut ctx = Md5::new().chain_update(password).chain_update(MAGIC).chain_update(salt);
    for chunk in (0..password.len()).step_by(16) {
        ctx.update(&alt[..16.min(password.len() - chunk)]);
    }
    let mut i = password.len();
    while i > 0 {
        ctx.update(if i & 1 == 1 { &[0u8][..] } else { &password[..1] });
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(password);
        }
        fin = c.finalize();
    }
    let f = |i: usize| u32::from(fin[i]);
    let groups = [
        ((f(0) << 16) | (f(6) << 8) | f(12), 4),
        ((f(1) << 16) | (f(7) << 8) | f(13), 4),
        ((f(2) << 16) | (f(8) << 8) | f(14), 4),
        ((f(3) << 16) | (f(9) << 8) | f(15), 4),
        ((f(4) << 16) | (f(10) << 8) | f(5), 4),
        (f(11), 2),
    ];
    let mut out = [0u8; 22];
    let mut n = 0;
    for (mut v, count) in groups {
        for _ in 0..count {
            out[n] = ITOA64[(v & 0x3f) as usize];
            v >>= 6;
            n += 1;
        }
    }
    out
}

/// Equality whose time does not depend on where the inputs differ.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `$apr1$` digests as `htpasswd -m` (apache2-utils) made them.
    #[test]
    fn apr1_matches_htpasswd() {
        for (password, salt, digest) in [
            (&b"wonder land"[..], &b"wyd5TBXD"[..], b"OR9IUa/kPLOwj5FO5T/Rj/"),
            (b"", b"CAqaeESP", b"1538E6mevaHrN.wWgUK6l1"),
            (b"password", b"lZL6V/ci", b"eIMz/iKDkbtys/uU7LEK00"),
        ] {
            assert_eq!(&apr1(password, salt), digest, "{password:?}");
        }
        assert_ne!(&apr1(b"wonder lane", b"wyd5TBXD"), b"OR9IUa/kPLOwj5FO5T/Rj/");
    }

    #[test]
    fn hashes_as_htpasswd_writes_them() {
        assert!(matches!(parse_hash("{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M="), Ok(Hash::Sha1(_))));
        let b = "$2y$05$c4WoMPo3SXsafkva.HHa6uXQZWr7oboPiC2bT/r7q1BB8I2s0BRqC";
        assert!(matches!(parse_hash(b), Ok(Hash::Bcrypt(_))));
        assert!(parse_hash("$apr1$abc$def").is_err(), "malformed");
        assert!(matches!(parse_hash("$apr1$wyd5TBXD$OR9IUa/kPLOwj5FO5T/Rj/"), Ok(Hash::Apr1(..))));
        assert!(parse_hash("$2y$05$short").is_err());
        assert!(parse_hash("$2y$99$c4WoMPo3SXsafkva.HHa6uXQZWr7oboPiC2bT/r7q1BB8I2s0BRqC").is_err());
        assert!(parse_hash("$6$salt$hash").is_err());
        assert!(parse_hash("plaintext").is_err());
        assert!(parse_hash("{SHA}!!!").is_err());
    }

    #[test]
    fn credentials_parsing() {
        assert_eq!(basic_credentials(b"Basic dTpw"), Some(&b"dTpw"[..]));
        assert_eq!(basic_credentials(b"bAsIc   dTpw  "), Some(&b"dTpw"[..]));
        assert_eq!(basic_credentials(b"Bearer dTpw"), None);
        assert_eq!(basic_credentials(b"Basic "), None);
        assert_eq!(basic_credentials(b"Basicx"), None);
        assert_eq!(basic_credentials(&[b'a'; 2000]), None);
        assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"ab", b"abc"));
    }
}
