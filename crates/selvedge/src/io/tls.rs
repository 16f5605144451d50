//! TLS with rustls: configuration (certificate chains and keys from PEM files, SNI choosing
//! among several certificates, ALPN `h2` and `http/1.1`, TLS 1.2 and 1.3, session
//! resumption by tickets and by session ids) and the per-connection `Session` over a
//! `Socket` (`transport.rs` puts the two behind one type).
//!
//! The session is a rustls `ServerConnection` behind a mutex that is never held across an
//! `.await`: reads feed ciphertext in and take plaintext out; writes encrypt and then send
//! the records while holding an async write lock, so records from concurrent writers (the
//! HTTP/2 sender, a stream's writer) never interleave.
//!
//! Files go out as `pread` + encrypted writes (kernel TLS is not used).

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::BytesMut;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConnection};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::io::socket::Socket;

/// A certificate chain and its key, for one or more server names.
#[derive(Debug, Clone)]
pub struct CertKey {
    /// DNS names this certificate is chosen for by SNI (may be empty for the default).
    pub names: Vec<String>,
    key: Arc<CertifiedKey>,
}

/// The largest PEM file [`CertKey::from_pem_files`] reads.
pub const MAX_PEM: u64 = 4 << 20;

/// A PEM file: a regular file of at most [`MAX_PEM`] bytes, opened without blocking (a
/// FIFO named by mistake fails instead of stalling a reload).
fn read_pem(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut out = Vec::new();
    f.take(MAX_PEM + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_PEM {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("over {MAX_PEM} bytes")));
    }
    Ok(out)
}

impl CertKey {
    /// Loads a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    /// The files cannot be read or hold no certificate or key, or the key does not suit
    /// the provider.
    pub fn from_pem_files(names: Vec<String>, cert: &Path, key: &Path) -> io::Result<CertKey> {
        let certs = read_pem(cert).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", cert.display())))?;
        let key_pem = read_pem(key).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", key.display())))?;
        CertKey::from_pem(names, &certs, &key_pem)
    }

    /// As [`CertKey::from_pem_files`], from PEM text in memory.
    ///
    /// # Errors
    /// As [`CertKey::from_pem_files`].
    pub fn from_pem(names: Vec<String>, cert_pem: &[u8], key_pem: &[u8]) -> io::Result<CertKey> {
        let bad = |what: &str, e: &dyn fmt::Display| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("certificate PEM", &e))?;
        if certs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "no certificate in PEM"));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| bad("private key PEM", &e))?;
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider.key_provider.load_private_key(key).map_err(|e| bad("private key", &e))?;
        Ok(CertKey { names, key: Arc::new(CertifiedKey::new(certs, signing)) })
    }

    /// The certificate chain, leaf first.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.key.cert
    }

    /// The OCSP response stapled to handshakes with this certificate, if any.
    pub fn ocsp(&self) -> Option<&[u8]> {
        self.key.ocsp.as_deref()
    }

    /// This certificate with `ocsp` stapled (`None`: nothing stapled).
    pub fn with_ocsp(&self, ocsp: Option<Vec<u8>>) -> CertKey {
        let mut key = CertifiedKey::clone(&self.key);
        key.ocsp = ocsp;
        CertKey { names: self.names.clone(), key: Arc::new(key) }
    }
}

/// The certificates a listener chooses from; [`CertStore::replace`] swaps them (certificate
/// reload on SIGHUP) without touching open connections. Read once per handshake.
///
/// A store may also consult [`ManagedCerts`] ([`CertStore::with_managed`]): certificates a
/// certificate manager (ACME) installs at run time, checked before the store's own.
#[derive(Debug, Clone, Default)]
pub struct CertStore {
    certs: Arc<RwLock<Vec<CertKey>>>,
    managed: Option<ManagedCerts>,
}

impl CertStore {
    /// A store holding `certs` (the first is the default).
    pub fn new(certs: Vec<CertKey>) -> CertStore {
        CertStore { certs: Arc::new(RwLock::new(certs)), managed: None }
    }

    /// Replaces the certificates; new handshakes use them at once. Managed certificates are
    /// not affected.
    pub fn replace(&self, certs: Vec<CertKey>) {
        *self.certs.write().unwrap_or_else(|p| p.into_inner()) = certs;
    }

    /// Calls `f` on each certificate of the store and puts what it returns in its place
    /// (`None`: kept as it is). New handshakes use the new ones at once (an OCSP staple
    /// refreshed, for example).
    pub fn update(&self, mut f: impl FnMut(&CertKey) -> Option<CertKey>) {
        let mut certs = self.certs.write().unwrap_or_else(|p| p.into_inner());
        for c in certs.iter_mut() {
            if let Some(n) = f(c) {
                *c = n;
            }
        }
    }

    /// This store, also choosing among `managed` (before its own certificates). A listener
    /// built from it ([`server_config_with_store`]) also offers the `acme-tls/1` protocol and
    /// answers TLS-ALPN-01 challenges ([`ManagedCerts::set_challenge_responder`]).
    pub fn with_managed(mut self, managed: ManagedCerts) -> CertStore {
        self.managed = Some(managed);
        self
    }
}

/// The ALPN protocol of the TLS-ALPN-01 challenge (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Answers a TLS-ALPN-01 challenge for a server name (see
/// [`ManagedCerts::set_challenge_responder`]).
type ChallengeResponder = Arc<dyn Fn(&str) -> Option<CertKey> + Send + Sync>;

/// Certificates installed, replaced and removed at run time by a certificate manager (the
/// server's ACME client), shared by the [`CertStore`]s of several listeners.
///
/// Each entry has an id, its server names, and its certificate once there is one. A name
/// whose entry has no certificate yet is refused (the handshake fails with an alert)
/// rather than answered with some other certificate.
#[derive(Clone, Default)]
pub struct ManagedCerts(Arc<RwLock<Managed>>);

#[derive(Default)]
struct Managed {
    entries: Vec<ManagedEntry>,
    challenge: Option<ChallengeResponder>,
}

struct ManagedEntry {
    id: String,
    names: Vec<String>,
    key: Option<Arc<CertifiedKey>>,
}

impl fmt::Debug for ManagedCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        let mut d = f.debug_map();
        for e in &m.entries {
            d.entry(&e.id, &(&e.names, e.key.is_some()));
        }
        d.finish()
    }
}

impl ManagedCerts {
    /// An empty set.
    pub fn new() -> ManagedCerts {
        ManagedCerts::default()
    }

    /// Sets entry `id`: its server names (DNS names or `*.suffix`) and its certificate
    /// (`None`: not obtained yet, handshakes for these names fail). New handshakes use it at
    /// once; open connections keep the certificate they have.
    pub fn set(&self, id: &str, names: Vec<String>, cert: Option<CertKey>) {
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        let key = cert.map(|c| c.key);
        match m.entries.iter_mut().find(|e| e.id == id) {
            Some(e) => {
                e.names = names;
                e.key = key;
            }
            None => m.entries.push(ManagedEntry { id: id.to_string(), names, key }),
        }
    }

    /// Calls `f` with the id and certificate of each entry that has one, and puts what it
    /// returns in its place (`None`: kept as it is).
    pub fn update(&self, mut f: impl FnMut(&str, &CertKey) -> Option<CertKey>) {
        let mut m = self.0.write().unwrap_or_else(|p| p.into_inner());
        for e in m.entries.iter_mut() {
            if let Some(key) = &e.key {
                let c = CertKey { names: e.names.clone(), key: key.clone() };
                if let Some(n) = f(&e.id, &c) {
                    e.key = Some(n.key);
                }
            }
        }
    }

    /// Removes entry `id`: its names fall back to the stores' own certificates.
    pub fn remove(&self, id: &str) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).entries.retain(|e| e.id != id);
    }

    /// Whether entry `id` has a certificate.
    pub fn has_cert(&self, id: &str) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).entries.iter().any(|e| e.id == id && e.key.is_some())
    }

    /// Answers TLS-ALPN-01 challenges (RFC 8737): a handshake that offers `acme-tls/1` as its
    /// only protocol gets the certificate `responder` returns for its server name (`None`:
    /// the handshake fails), and the connection is closed after the handshake.
    pub fn set_challenge_responder(&self, responder: impl Fn(&str) -> Option<CertKey> + Send + Sync + 'static) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).challenge = Some(Arc::new(responder));
    }

    /// `Some(answer)` when the managed set decides this handshake: a TLS-ALPN-01 challenge,
    /// or a name it manages (`Some(None)` while that name has no certificate).
    fn resolve(&self, hello: &ClientHello<'_>) -> Option<Option<Arc<CertifiedKey>>> {
        let challenge = hello.alpn().is_some_and(|mut p| p.next() == Some(ACME_TLS_ALPN) && p.next().is_none());
        if challenge {
            let responder = self.0.read().unwrap_or_else(|p| p.into_inner()).challenge.clone();
            let answer = match (responder, hello.server_name()) {
                (Some(r), Some(name)) => r(name).map(|c| c.key),
                _ => None,
            };
            return Some(answer);
        }
        let name = hello.server_name()?;
        let m = self.0.read().unwrap_or_else(|p| p.into_inner());
        m.entries.iter().find(|e| e.names.iter().any(|n| name_matches(n, name))).map(|e| e.key.clone())
    }
}

/// Picks the certificate: a managed certificate or challenge first (if the store has
/// [`ManagedCerts`]), then exact SNI name match, else (no SNI, or `strict_sni` off) the
/// first certificate; an unknown name with `strict_sni` gets no certificate, which rustls
/// answers with a fatal alert (`access_denied`).
#[derive(Debug)]
struct Resolver {
    store: CertStore,
    strict_sni: bool,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(managed) = &self.store.managed {
            if let Some(answer) = managed.resolve(&hello) {
                return answer;
            }
        }
        let certs = self.store.certs.read().unwrap_or_else(|p| p.into_inner());
        match hello.server_name() {
            Some(name) => {
                let found = certs.iter().find(|c| c.names.iter().any(|n| name_matches(n, name)));
                match found {
                    Some(c) => Some(c.key.clone()),
                    None if self.strict_sni => None,
                    None => certs.first().map(|c| c.key.clone()),
                }
            }
            None => certs.first().map(|c| c.key.clone()),
        }
    }
}

/// `pattern` is a DNS name or `*.suffix` (one label).
fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.split_once('.').is_some_and(|(first, rest)| !first.is_empty() && rest.eq_ignore_ascii_case(suffix))
        }
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// Asked during a handshake for a server name no certificate of the listener covers
/// (on-demand TLS, [`crate::Server::on_demand`]): the handshake waits for the returned
/// future, then chooses its certificate as usual (one installed meanwhile, for example in
/// [`ManagedCerts`], is used; else the handshake fails with an alert). The wait counts
/// against `tls_handshake_timeout`.
pub type OnDemand =
    Arc<dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// The most of a ClientHello peeked at to find its server name (one full record).
pub const MAX_HELLO_PEEK: usize = 16 * 1024 + 5;

/// The server name of the ClientHello queued on `sock` when no certificate of `config`
/// covers it (peeked: the bytes stay queued for the handshake). `None` when a certificate
/// covers it, when there is no name, for a TLS-ALPN-01 validation, and for anything that is
/// not a ClientHello within [`MAX_HELLO_PEEK`] bytes (the handshake then fails as usual).
pub(crate) async fn uncovered_name(sock: &Socket, config: &ServerConfig) -> Option<String> {
    let mut buf = vec![0u8; 2048];
    let mut have = 0;
    loop {
        have = sock.peek_more(&mut buf, have).await.ok()?;
        if have == 0 {
            return None;
        }
        let mut acceptor = rustls::server::Acceptor::default();
        let mut slice = &buf[..have];
        while !slice.is_empty() {
            match acceptor.read_tls(&mut slice) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                if hello.alpn().is_some_and(|mut p| p.next() == Some(ACME_TLS_ALPN) && p.next().is_none()) {
                    return None;
                }
                let name = hello.server_name()?.to_ascii_lowercase();
                return config.cert_resolver.resolve(hello).is_none().then_some(name);
            }
            Ok(None) if have < buf.len() => {}
            Ok(None) if buf.len() < MAX_HELLO_PEEK => buf.resize((buf.len() * 4).min(MAX_HELLO_PEEK), 0),
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Builds a rustls server configuration: TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`
/// (only `http/1.1` when `h2` is false), tickets and a session cache for resumption.
///
/// # Errors
/// No certificates, or the provider refused the protocol versions.
pub fn server_config(certs: Vec<CertKey>, strict_sni: bool, h2: bool) -> io::Result<Arc<ServerConfig>> {
    if certs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS needs at least one certificate"));
    }
    server_config_with_store(CertStore::new(certs), strict_sni, h2)
}

/// As [`server_config`], choosing from a [`CertStore`] that can be replaced later (a store
/// with [`ManagedCerts`] also offers ALPN `acme-tls/1`).
///
/// # Errors
/// The provider refused the protocol versions.
pub fn server_config_with_store(store: CertStore, strict_sni: bool, h2: bool) -> io::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let acme = store.managed.is_some();
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver { store, strict_sni }));
    cfg.alpn_protocols = if h2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
    if acme {
        // Last: chosen only when a client offers nothing else (a TLS-ALPN-01 validation).
        cfg.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    cfg.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    cfg.ticketer = rustls::crypto::ring::Ticketer::new().map_err(io::Error::other)?;
    cfg.send_tls13_tickets = 2;
    Ok(Arc::new(cfg))
}

/// Plaintext written through the session is encrypted and sent in pieces of this size.
const WRITE_PIECE: usize = 64 * 1024;

/// One TLS connection's state.
pub(crate) struct Session {
    conn: Mutex<ServerConnection>,
    /// Ciphertext read buffer, taken out while a read waits on the socket.
    cbuf: Mutex<BytesMut>,
    /// Held from encrypting to finishing the socket write, so records stay in order.
    wlock: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tls::Session")
    }
}

fn tls_err(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Session {
    pub(crate) fn new(cfg: Arc<ServerConfig>) -> io::Result<Session> {
        Ok(Session {
            conn: Mutex::new(ServerConnection::new(cfg).map_err(tls_err)?),
            cbuf: Mutex::new(BytesMut::new()),
            wlock: tokio::sync::Mutex::new(()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, ServerConnection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The TLS version agreed in the handshake.
    pub(crate) fn version(&self) -> crate::message::TlsVersion {
        use crate::message::TlsVersion;
        match self.lock().protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => TlsVersion::Tls13,
            Some(rustls::ProtocolVersion::TLSv1_2) => TlsVersion::Tls12,
            _ => TlsVersion::Other,
        }
    }

    /// The server name the client sent (SNI), if any.
    pub(crate) fn server_name(&self) -> Option<String> {
        self.lock().server_name().map(str::to_owned)
    }

    /// The protocol the client chose by ALPN.
    pub(crate) fn alpn(&self) -> Option<Vec<u8>> {
        self.lock().alpn_protocol().map(<[u8]>::to_vec)
    }

    /// Sends whatever records the session has queued.
    async fn flush(&self, sock: &Socket) -> io::Result<()> {
        let _w = self.wlock.lock().await;
        let out = self.take_records();
        if out.is_empty() {
            return Ok(());
        }
        sock.write_all(&out).await
    }

    fn take_records(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = self.lock();
        while c.wants_write() {
            if c.write_tls(&mut out).is_err() {
                break;
            }
        }
        out
    }

    /// Feeds ciphertext to the session: what is left from the last read first, else a new
    /// read from the socket. rustls takes records only while its plaintext buffer has room,
    /// so ciphertext may stay in `cbuf` until the reader drains plaintext. `Ok(false)` at
    /// end of stream.
    async fn fill(&self, sock: &Socket) -> io::Result<bool> {
        let mut cbuf = std::mem::take(&mut *self.cbuf.lock().unwrap_or_else(|p| p.into_inner()));
        let mut eof = false;
        if cbuf.is_empty() {
            if cbuf.capacity() < 17 * 1024 {
                // From the thread's pool: an idle session gave its buffer back there.
                cbuf = crate::io::pool::take_read(18 * 1024);
            }
            eof = sock.read(&mut cbuf).await? == 0;
        }
        let result = {
            let mut c = self.lock();
            if eof {
                let _ = c.read_tls(&mut &[][..]);
                c.process_new_packets().map(|_| ())
            } else {
                let mut slice = &cbuf[..];
                let mut r = Ok(());
                while !slice.is_empty() {
                    match c.read_tls(&mut slice) {
                        Ok(0) => break,
                        Ok(_) => {
                            if let Err(e) = c.process_new_packets() {
                                r = Err(e);
                                break;
                            }
                        }
                        // The plaintext buffer is full: the reader must drain it first.
                        Err(_) => break,
                    }
                }
                let used = cbuf.len() - slice.len();
                bytes::Buf::advance(&mut cbuf, used);
                r
            }
        };
        *self.cbuf.lock().unwrap_or_else(|p| p.into_inner()) = cbuf;
        // Send what processing queued: handshake messages, tickets, key updates, alerts.
        self.flush(sock).await?;
        result.map_err(tls_err)?;
        Ok(!eof)
    }

    /// Runs the handshake to completion.
    pub(crate) async fn handshake(&self, sock: &Socket) -> io::Result<()> {
        loop {
            self.flush(sock).await?;
            if !self.lock().is_handshaking() {
                return Ok(());
            }
            if !self.fill(sock).await? {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during the TLS handshake"));
            }
        }
    }

    fn read_plain(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        let mut c = self.lock();
        let old = buf.len();
        let room = (buf.capacity() - old).max(1024);
        buf.resize(old + room, 0);
        let r = c.reader().read(&mut buf[old..]);
        let n = *r.as_ref().unwrap_or(&0);
        buf.truncate(old + n);
        match r {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Some(0)),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn try_read(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        self.read_plain(buf)
    }

    pub(crate) async fn read(&self, sock: &Socket, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            if let Some(n) = self.read_plain(buf)? {
                return Ok(n);
            }
            if !self.fill(sock).await? {
                // End of stream without close_notify: report what the reader has, then EOF.
                return Ok(self.read_plain(buf)?.unwrap_or(0));
            }
        }
    }

    /// Gives the (empty) ciphertext buffer back to the thread's pool while the connection
    /// waits for the peer, so an idle session holds only rustls's own state.
    pub(crate) fn release_idle(&self) {
        let mut cbuf = self.cbuf.lock().unwrap_or_else(|p| p.into_inner());
        if cbuf.is_empty() && cbuf.capacity() > 0 {
            crate::io::pool::put_read(std::mem::take(&mut *cbuf));
        }
    }

    pub(crate) fn has_plaintext(&self) -> bool {
        if !self.cbuf.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            return true;
        }
        let mut c = self.lock();
        c.process_new_packets().map(|s| s.plaintext_bytes_to_read() > 0 || s.peer_has_closed()).unwrap_or(true)
    }

    /// Encrypts `bufs` and sends them. The plaintext goes to rustls `WRITE_PIECE` bytes at a
    /// time across the slices' boundaries, so records are full (16 KB) whatever the slices
    /// are: an HTTP/2 frame's 9-byte header shares a record with its payload, a response
    /// head with its body (one record each would double the records, and the client's
    /// work, for a file sent over HTTP/2).
    pub(crate) async fn write_all(&self, sock: &Socket, bufs: &[&[u8]]) -> io::Result<()> {
        let _w = self.wlock.lock().await;
        let mut pending = Vec::new();
        let mut group: Vec<io::IoSlice<'_>> = Vec::new();
        // Where the next plaintext starts: byte `at` of slice `i`.
        let (mut i, mut at) = (0, 0);
        while i < bufs.len() {
            group.clear();
            let mut n = 0;
            while i < bufs.len() && n < WRITE_PIECE {
                let take = (bufs[i].len() - at).min(WRITE_PIECE - n);
                if take > 0 {
                    group.push(io::IoSlice::new(&bufs[i][at..at + take]));
                }
                n += take;
                at += take;
                if at == bufs[i].len() {
                    i += 1;
                    at = 0;
                }
            }
            {
                let mut c = self.lock();
                let mut rest = &mut group[..];
                while !rest.is_empty() {
                    let k = c.writer().write_vectored(rest)?;
                    let sealed = c.wants_write();
                    while c.wants_write() {
                        c.write_tls(&mut pending)?;
                    }
                    if k == 0 && !sealed {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    io::IoSlice::advance_slices(&mut rest, k);
                }
            }
            if pending.len() >= WRITE_PIECE {
                sock.write_all(&pending).await?;
                pending.clear();
            }
        }
        if !pending.is_empty() {
            sock.write_all(&pending).await?;
        }
        Ok(())
    }

    pub(crate) async fn send_file(
        &self,
        sock: &Socket,
        header: &[u8],
        fd: BorrowedFd<'_>,
        mut offset: u64,
        len: u64,
        on_progress: &(dyn Fn() + Sync),
    ) -> io::Result<()> {
        let end = offset + len;
        let mut buf = vec![0u8; WRITE_PIECE.min(len as usize).max(1)];
        let mut first = Some(header);
        while offset < end || first.is_some() {
            let mut parts: Vec<&[u8]> = Vec::with_capacity(2);
            if let Some(h) = first.take() {
                parts.push(h);
            }
            let mut n = 0;
            if offset < end {
                let want = ((end - offset) as usize).min(buf.len());
                n = crate::io::sys::pread(fd, &mut buf[..want], offset)?;
                if n == 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while sending"));
                }
                offset += n as u64;
            }
            parts.push(&buf[..n]);
            self.write_all(sock, &parts).await?;
            on_progress();
        }
        Ok(())
    }

    pub(crate) fn close_notify(&self, sock: &Socket) {
        self.last_words(sock.fd(), &[]);
    }

    /// `data` (if any) and the `close_notify` alert, in one write without waiting (best
    /// effort: the connection is closing).
    pub(crate) fn last_words(&self, fd: std::os::fd::BorrowedFd<'_>, data: &[u8]) {
        let out = {
            let mut c = self.lock();
            if !data.is_empty() && c.writer().write_all(data).is_err() {
                return;
            }
            c.send_close_notify();
            let mut out = Vec::new();
            while c.wants_write() {
                if c.write_tls(&mut out).is_err() {
                    break;
                }
            }
            out
        };
        let _ = crate::io::sys::send(fd, &out, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(name_matches("*.example.com", "a.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", "a.b.example.com"));
        assert!(name_matches("Example.com", "example.COM"));
    }
}
