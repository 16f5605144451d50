//! An HTTP/3 load generator for `bench/h3.sh` (on quinn and the `h3` client): `N` GETs of
//! one URL path over `CONNS` QUIC connections, each keeping `STREAMS` requests in flight;
//! checks every status is 200 and prints requests, seconds, requests/s and body bytes.
//! The server's certificate is not verified (the benchmark's is self-signed); its
//! signatures are.
//!
//! `cargo run --release -p selvedge --features http3 --example h3_load -- 127.0.0.1:8443 /index.html 100000 4 32`

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Buf;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any certificate, checks the handshake's signatures.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

type Err = Box<dyn std::error::Error + Send + Sync>;

async fn connection(
    ep: quinn::Endpoint,
    addr: SocketAddr,
    path: Arc<str>,
    n: u64,
    streams: u64,
    bytes: Arc<AtomicU64>,
) -> Result<(), Err> {
    let conn = ep.connect(addr, "localhost")?.await?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn)).await?;
    let drive = tokio::spawn(async move { driver.wait_idle().await });
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..streams {
        let (mut send, next, path, bytes) = (send.clone(), next.clone(), path.clone(), bytes.clone());
        let uri = format!("https://localhost:{}{path}", addr.port());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let req = http::Request::get(&uri).body(())?;
                let mut stream = send.send_request(req).await?;
                stream.finish().await?;
                let res = stream.recv_response().await?;
                if res.status() != 200 {
                    return Err(format!("status {}", res.status()).into());
                }
                while let Some(b) = stream.recv_data().await? {
                    bytes.fetch_add(b.remaining() as u64, Ordering::Relaxed);
                }
            }
            Ok::<(), Err>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    drop(send);
    drive.abort();
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, path, n, conns, streams] = &args[..] else {
        return Err("usage: h3_load ADDR PATH REQUESTS CONNS STREAMS".into());
    };
    let addr: SocketAddr = addr.parse()?;
    let (n, conns, streams): (u64, u64, u64) = (n.parse()?, conns.parse()?, streams.parse()?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let qc = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(qc)));
    let bytes = Arc::new(AtomicU64::new(0));
    let path: Arc<str> = path.as_str().into();
    let t0 = Instant::now();
    let per = n / conns;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        tasks.push(tokio::spawn(connection(ep.clone(), addr, path.clone(), per, streams, bytes.clone())));
    }
    for t in tasks {
        t.await??;
    }
    let s = t0.elapsed().as_secs_f64();
    let done = per * conns;
    println!(
        "{{\"requests\": {done}, \"seconds\": {s:.3}, \"rps\": {:.1}, \"bytes\": {}}}",
        done as f64 / s,
        bytes.load(Ordering::Relaxed)
    );
    ep.close(0u32.into(), b"");
    Ok(())
}
