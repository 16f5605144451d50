//! TLS to an upstream (`https://`): the client configuration a route builds once (roots,
//! client certificate, ALPN; rustls keeps its session cache there, so new connections
//! resume), and `TlsIo`, rustls' client state over a nonblocking TCP socket driven by the
//! same readiness calls as a plain socket (`conn`).
//!
//! Reads go through rustls' plaintext buffer first; a socket read feeds it. Writes put
//! plaintext into rustls (bounded by its buffer limit) and flush records to the socket; a
//! write reports the socket full while records are still pending, so `Conn`
//! never waits for an answer with part of the request stuck in rustls.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use bytes::BytesMut;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Deserialize;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Most plaintext rustls buffers before a write reports the socket full.
const SEND_BUFFER: usize = 64 * 1024;

/// A route's `tls = { ... }` table as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM file of the CA certificates to trust instead of the system's.
    pub ca: Option<String>,
    /// The name sent (SNI) and verified; default the upstream's host.
    pub sni: Option<String>,
    /// Verify the upstream's certificate and name: `true`.
    pub verify: Option<bool>,
    /// PEM certificate chain presented to an upstream that asks for one.
    pub client_cert: Option<String>,
    /// Its private key (PEM).
    pub client_key: Option<String>,
}

/// A checked upstream TLS setting: the rustls configuration and the name.
#[derive(Debug, Clone)]
pub struct TlsTarget {
    /// Shared by every connection of the route (and so its session cache).
    pub config: Arc<ClientConfig>,
    /// The server name sent and verified.
    pub name: ServerName<'static>,
}

impl TlsTarget {
    /// Builds the client configuration for `host` (the upstream URL's host), offering
    /// `alpn`.
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate or key; an invalid name.
    pub fn new(raw: &RawTls, host: &str, alpn: &[&[u8]]) -> Result<TlsTarget, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?;
        let builder = if raw.verify == Some(false) {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(Custom { accept: Accept::Any, provider }))
        } else {
            let mut roots = RootCertStore::empty();
            let mut pinned = Vec::new();
            match &raw.ca {
                Some(ca) => {
                    // Each certificate is trusted for itself (pinned: a self-signed server
                    // certificate, as `openssl req -x509` makes, which webpki would refuse
                    // as a CA used as an end entity), and the CAs among them as issuers.
                    for c in read_certs(ca)? {
                        if is_ca(&c).map_err(|e| format!("tls ca {ca}: {e}"))? {
                            roots.add(c.clone()).map_err(|e| format!("tls ca {ca}: {e}"))?;
                        }
                        pinned.push(c);
                    }
                }
                None => {
                    let found = rustls_native_certs::load_native_certs();
                    roots.add_parsable_certificates(found.certs);
                    if roots.is_empty() {
                        return Err("tls: no system CA certificates found; set tls.ca".into());
                    }
                }
            }
            if pinned.is_empty() {
                builder.with_root_certificates(roots)
            } else {
                let chains = match roots.is_empty() {
                    true => None,
                    false => Some(
                        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                            .build()
                            .map_err(|e| format!("tls ca: {e}"))?,
                    ),
                };
                builder.dangerous().with_custom_certificate_verifier(Arc::new(Custom {
                    accept: Accept::Pinned { pinned, chains },
                    provider,
                }))
            }
        };
        let mut config = match (&raw.client_cert, &raw.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let pem = crate::files::read_small(Path::new(key), selvedge::tls::MAX_PEM)
                    .map_err(|e| format!("tls client_key {key}: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| format!("tls client_key {key}: {e}"))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| format!("tls client certificate: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("tls: client_cert and client_key go together".into()),
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let sni = raw.sni.as_deref().unwrap_or(host);
        let sni = sni.strip_prefix('[').and_then(|s| s.strip_suffix(']')).unwrap_or(sni);
        let name = ServerName::try_from(sni.to_string()).map_err(|_| format!("tls: invalid server name {sni:?}"))?;
        Ok(TlsTarget { config: Arc::new(config), name })
    }
}

fn read_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem =
        crate::files::read_small(Path::new(path), selvedge::tls::MAX_PEM).map_err(|e| format!("tls {path}: {e}"))?;
    let certs: Vec<_> =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| format!("tls {path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("tls {path}: no certificate"));
    }
    Ok(certs)
}

/// Whether a certificate is a CA's (basic constraints `CA:TRUE`).
fn is_ca(c: &CertificateDer<'_>) -> Result<bool, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(c).map_err(|e| format!("not a certificate: {e}"))?;
    let ca = cert.basic_constraints().map_err(|e| format!("{e}"))?.is_some_and(|b| b.value.ca);
    Ok(ca)
}

/// The verifier of `verify = false` and of a `tls.ca` with server certificates in it
/// (self-signed ones, as `openssl req -x509` makes): there the upstream's certificate is
/// accepted when it is one of them, byte for byte, valid now and for the name (SNI) as any
/// certificate must be; else it must chain to the file's CA certificates, if it has any.
#[derive(Debug)]
struct Custom {
    accept: Accept,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

/// Which certificates a [`Custom`] verifier accepts (signatures are checked either way).
#[derive(Debug)]
enum Accept {
    /// `verify = false`: any certificate, any name.
    Any,
    /// The pinned certificates, else what chains to the CA certificates, if any.
    Pinned { pinned: Vec<CertificateDer<'static>>, chains: Option<Arc<rustls::client::WebPkiServerVerifier>> },
}

impl ServerCertVerifier for Custom {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        let Accept::Pinned { pinned, chains } = &self.accept else {
            return Ok(ServerCertVerified::assertion());
        };
        if pinned.iter().any(|p| p.as_ref() == end_entity.as_ref()) {
            let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            let (_, cert) = x509_parser::parse_x509_certificate(end_entity)
                .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
            let t = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
            let v = cert.validity();
            if t < v.not_before.timestamp() {
                return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
            }
            if t > v.not_after.timestamp() {
                return Err(Error::InvalidCertificate(CertificateError::Expired));
            }
            return Ok(ServerCertVerified::assertion());
        }
        match chains {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The socket as `std::io` for rustls: nonblocking calls that clear tokio's readiness on
/// `WouldBlock`.
struct Sock<'a>(&'a TcpStream);

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A TLS client connection over a TCP socket.
#[derive(Debug)]
pub(crate) struct TlsIo {
    pub(crate) sock: TcpStream,
    tls: ClientConnection,
    /// rustls may hold plaintext not yet taken (a read stopped at the caller's buffer): a
    /// wait for readability returns at once.
    buffered: bool,
    /// The peer's close_notify or end of stream was seen.
    eof: bool,
}

impl TlsIo {
    /// Runs the handshake on `sock` (waits on its readiness; the caller bounds the time).
    pub(crate) async fn handshake(sock: TcpStream, target: &TlsTarget) -> io::Result<TlsIo> {
        let tls = ClientConnection::new(target.config.clone(), target.name.clone()).map_err(io::Error::other)?;
        let mut io = TlsIo { sock, tls, buffered: true, eof: false };
        io.tls.set_buffer_limit(Some(SEND_BUFFER));
        while io.tls.is_handshaking() {
            if io.tls.wants_write() {
                match io.flush() {
                    Ok(()) => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.sock.writable().await?,
                    Err(e) => return Err(e),
                }
                continue;
            }
            match io.read_records() {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.sock.readable().await?,
                Err(e) => return Err(e),
            }
        }
        // The Finished message (and anything after it) out now.
        while io.tls.wants_write() {
            match io.flush() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => io.sock.writable().await?,
                r => r?,
            }
        }
        Ok(io)
    }

    /// The protocol ALPN chose.
    pub(crate) fn alpn(&self) -> Option<&[u8]> {
        self.tls.alpn_protocol()
    }

    /// Reads records from the socket and processes them. `Ok(0)`: the socket ended.
    fn read_records(&mut self) -> io::Result<usize> {
        let n = self.tls.read_tls(&mut Sock(&self.sock))?;
        let state = self.tls.process_new_packets().map_err(|e| {
            // The alert (if any) goes out before the error is reported.
            let _ = self.tls.write_tls(&mut Sock(&self.sock));
            io::Error::new(io::ErrorKind::InvalidData, e)
        })?;
        if state.peer_has_closed() {
            self.eof = true;
        }
        if state.plaintext_bytes_to_read() > 0 {
            self.buffered = true;
        }
        // Post-handshake answers (key updates) go out with whatever is read.
        if self.tls.wants_write() {
            match self.flush() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
        Ok(n)
    }

    /// Writes pending records. `WouldBlock`: the socket is full with some still pending.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            self.tls.write_tls(&mut Sock(&self.sock))?;
        }
        Ok(())
    }

    /// Plaintext into the spare room of `buf`: what rustls holds, else what a socket read
    /// brings. `Ok(0)`: the upstream closed; `WouldBlock`: nothing yet.
    pub(crate) fn try_read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let len = buf.len();
        let room = buf.capacity() - len;
        buf.resize(len + room, 0);
        let r = self.read_plain(&mut buf[len..]);
        buf.truncate(len + *r.as_ref().unwrap_or(&0));
        r
    }

    /// As [`TlsIo::try_read_buf`], into a slice.
    pub(crate) fn read_plain(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.buffered {
                match self.tls.reader().read(out) {
                    Ok(0) => return Ok(0),
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.buffered = false,
                    // Closed without close_notify: the end of the stream as well.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                    Err(e) => return Err(e),
                }
            }
            if self.eof {
                return Ok(0);
            }
            match self.tls.read_tls(&mut Sock(&self.sock)) {
                Ok(0) => {
                    self.eof = true;
                    self.buffered = true;
                    // Let rustls see the end (it reports a missing close_notify).
                    let _ = self.tls.process_new_packets();
                }
                Ok(_) => {
                    let state = self.tls.process_new_packets().map_err(|e| {
                        let _ = self.tls.write_tls(&mut Sock(&self.sock));
                        io::Error::new(io::ErrorKind::InvalidData, e)
                    })?;
                    self.eof |= state.peer_has_closed();
                    self.buffered = true;
                    if self.tls.wants_write() {
                        match self.flush() {
                            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                            _ => {}
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes what rustls takes of `bufs` (after pending records went out) and flushes.
    /// `WouldBlock`: records are still pending and nothing was taken.
    pub(crate) fn try_write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.flush()?;
        let n = self.tls.writer().write_vectored(bufs)?;
        match self.flush() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    /// Whether a read could return without waiting for the socket.
    pub(crate) fn has_buffered(&self) -> bool {
        self.buffered || self.eof
    }

    /// Whether records are waiting for room in the socket.
    pub(crate) fn wants_write(&self) -> bool {
        self.tls.wants_write()
    }
}

/// For a tunnel (an upgraded connection): the same calls, driven by `poll`.
impl AsyncRead for TlsIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.read_plain(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(this.sock.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.try_write_vectored(&[io::IoSlice::new(buf)]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(this.sock.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match this.flush() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(this.sock.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tls.send_close_notify();
        std::task::ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().sock).poll_shutdown(cx)
    }
}
