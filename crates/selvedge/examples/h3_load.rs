//! An HTTP/3 load generator for `bench/h3.sh`, on quinn and the engine's own HTTP/3
//! framing and QPACK (`selvedge_proto::h3`, an unstable module): `N` GETs of one URL path over
//! `CONNS` QUIC connections, each keeping `STREAMS` requests in flight; checks every
//! status is 200 and prints requests, seconds, requests/s and body bytes. Like h2load, it
//! does as little per request as it can (one pre-encoded request head, responses read whole
//! and their frames walked), so that the server, not the client, is what is measured.
//! The server's certificate is not verified (the benchmark's is self-signed); its
//! signatures are.
//!
//! `cargo run --release -p selvedge --features http3 --example h3_load -- 127.0.0.1:8443 /index.html 100000 4 32`

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use selvedge_proto::h3::{frame, qpack};

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

/// Reads a response: its status, from the HEADERS frame, and its body length, counted
/// from the DATA frames' heads as their payloads stream past (not kept).
async fn response(recv: &mut quinn::RecvStream) -> Result<(u16, u64), Err> {
    let (mut status, mut len) = (0u16, 0u64);
    let mut pending = BytesMut::new();
    // DATA payload still to come, counted and dropped as it arrives.
    let mut data_left = 0u64;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        let mut b: &[u8] = &chunk.bytes;
        if data_left > 0 {
            let k = data_left.min(b.len() as u64);
            data_left -= k;
            len += k;
            b = &b[k as usize..];
        }
        pending.extend_from_slice(b);
        while data_left == 0 {
            let Some(h) = frame::head(&pending) else { break };
            if h.kind == frame::DATA {
                pending.advance(h.size);
                let k = h.len.min(pending.len() as u64);
                pending.advance(k as usize);
                len += k;
                data_left = h.len - k;
                continue;
            }
            let end = h.size + usize::try_from(h.len)?;
            if pending.len() < end {
                break;
            }
            if h.kind == frame::HEADERS && status == 0 {
                qpack::Section { block: &pending[h.size..end], max_size: 64 * 1024 }
                    .decode_each(|f| {
                        if &*f.name == b":status" {
                            status = std::str::from_utf8(&f.value).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
                        }
                    })
                    .map_err(|e| format!("QPACK: {e:?}"))?;
            }
            pending.advance(end);
        }
    }
    if !pending.is_empty() || data_left > 0 {
        return Err("truncated frame".into());
    }
    Ok((status, len))
}

async fn connection(
    ep: quinn::Endpoint,
    addr: SocketAddr,
    head: Bytes,
    n: u64,
    streams: u64,
    bytes: Arc<AtomicU64>,
) -> Result<(), Err> {
    let conn = ep.connect(addr, "localhost")?.await?;
    let mut control = conn.open_uni().await?;
    control.write_all(&frame::control_preface(64 * 1024)).await?;
    // The server's control stream: read and dropped.
    let c = conn.clone();
    let drain = tokio::spawn(async move {
        while let Ok(mut s) = c.accept_uni().await {
            tokio::spawn(async move { while let Ok(Some(_)) = s.read_chunk(usize::MAX, true).await {} });
        }
    });
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..streams {
        let (conn, next, head, bytes) = (conn.clone(), next.clone(), head.clone(), bytes.clone());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let (mut send, mut recv) = conn.open_bi().await?;
                send.write_chunk(head.clone()).await?;
                send.finish()?;
                let (status, len) = response(&mut recv).await?;
                if status != 200 {
                    return Err(format!("status {status}").into());
                }
                bytes.fetch_add(len, Ordering::Relaxed);
            }
            Ok::<(), Err>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    drop(control);
    drain.abort();
    conn.close(quinn::VarInt::from_u32(frame::code::NO_ERROR), b"");
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
    // One request head for all: GET https://localhost:PORT/PATH.
    let authority = format!("localhost:{}", addr.port());
    let mut block = BytesMut::new();
    qpack::encode_request(
        [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"https"),
            (b":authority", authority.as_bytes()),
            (b":path", path.as_bytes()),
        ],
        &mut block,
    );
    let mut head = BytesMut::new();
    frame::put_head(&mut head, frame::HEADERS, block.len() as u64);
    head.extend_from_slice(&block);
    let head = head.freeze();
    let bytes = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let per = n / conns;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        tasks.push(tokio::spawn(connection(ep.clone(), addr, head.clone(), per, streams, bytes.clone())));
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
    ep.wait_idle().await;
    Ok(())
}
