//! TLS over real sockets with a self-signed certificate made in the test: curl over HTTP/1.1
//! and HTTP/2 (ALPN), SNI choosing the certificate, session resumption, and bad input (plain
//! HTTP on the TLS port, a stalled handshake, an unknown SNI name).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::app::app;
use common::*;
use rustls::pki_types::pem::PemObject;
use selvedge::tls::{server_config, server_config_with_store, CertKey, CertStore, ManagedCerts};
use selvedge::Server;
use selvedge_proto::h2::codec::{decode_frame, PREFACE};
use selvedge_proto::h2::frame::{self, kind, Frame};
use selvedge_proto::hpack;

struct Tls {
    dir: PathBuf,
    srv: Option<selvedge::ServerHandle>,
    addr: SocketAddr,
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(h) = self.srv.take() {
            h.shutdown();
            h.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn cert(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let (c, k) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
    (c, k)
}

fn start_tls(strict_sni: bool, cfg: selvedge::Settings) -> Tls {
    start_tls_app(strict_sni, cfg, app)
}

fn start_tls_app<A: selvedge::App>(strict_sni: bool, mut cfg: selvedge::Settings, app: A) -> Tls {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("selvedge-tls-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c1, k1) = cert(&dir, "localhost");
    let (c2, k2) = cert(&dir, "other.test");
    let certs = vec![
        CertKey::from_pem_files(vec!["localhost".into()], &c1, &k1).unwrap(),
        CertKey::from_pem_files(vec!["other.test".into()], &c2, &k2).unwrap(),
    ];
    cfg.tls_handshake_timeout = cfg.tls_handshake_timeout.min(Duration::from_secs(10));
    let tc = server_config(certs, strict_sni, true).unwrap();
    let h = Server::new(cfg).bind_tls("127.0.0.1:0".parse::<SocketAddr>().unwrap(), tc).start(app).unwrap();
    let addr = h.tcp_addr().unwrap();
    Tls { dir, srv: Some(h), addr }
}

fn curl(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("curl").arg("-sS").args(args).output().expect("curl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn curl_http1_and_http2_over_tls() {
    let t = start_tls(false, settings());
    let url = |p: &str| format!("https://localhost:{}{p}", t.addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", t.addr.port());
    let (ok, out, err) = curl(&["-k", "--resolve", &resolve, "--http1.1", "-w", " %{http_version}", &url("/hello")]);
    assert!(ok, "{err}");
    assert_eq!(out, "hello 1.1");
    let (ok, out, err) = curl(&["-k", "--resolve", &resolve, "--http2", "-w", " %{http_version}", &url("/hello")]);
    assert!(ok, "{err}");
    assert_eq!(out, "hello 2");
    let (ok, out, err) = curl(&["-k", "--resolve", &resolve, "--http2", "-w", " %{http_version}", &url("/stream?5")]);
    assert!(ok, "{err}");
    assert_eq!(out, "part0;part1;part2;part3;part4; 2");
    let body = "x".repeat(100_000);
    for v in ["--http1.1", "--http2"] {
        let (ok, out, err) = curl(&["-k", "--resolve", &resolve, v, "--data-binary", &body, &url("/echo")]);
        assert!(ok, "{v}: {err}");
        assert_eq!(out.len(), body.len(), "{v}");
    }
}

#[test]
fn a_tls_connection_idle_between_requests_parks_and_is_reused() {
    let t = start_tls(false, settings());
    let url = |p: &str| format!("https://localhost:{}{p}", t.addr.port());
    let resolve = format!("localhost:{}:127.0.0.1", t.addr.port());
    for v in ["--http1.1", "--http2"] {
        let before = selvedge::stats::snapshot().parked_total;
        // Two requests a second on one connection: it idles 500 ms between them, long
        // enough to park (HTTP/2 with its session and HPACK tables).
        let (ok, out, err) = curl(&[
            "-k",
            "--resolve",
            &resolve,
            v,
            "--rate",
            "2/s",
            "-w",
            " %{num_connects}\n",
            &url("/hello"),
            &url("/hello"),
            &url("/hello"),
        ]);
        assert!(ok, "{v}: {err}");
        assert_eq!(out, "hello 1\nhello 0\nhello 0\n", "{v}: one connection for the three");
        assert!(selvedge::stats::snapshot().parked_total >= before + 2, "{v}: not parked");
    }
}

#[test]
fn sni_chooses_the_certificate_and_strict_sni_refuses_unknown_names() {
    let t = start_tls(true, settings());
    let port = t.addr.port();
    // Each name's certificate verifies against its own file only: the server must have
    // presented the one SNI asked for.
    for name in ["localhost", "other.test"] {
        let resolve = format!("{name}:{port}:127.0.0.1");
        let ca = t.dir.join(format!("{name}.crt"));
        let (ok, out, err) =
            curl(&["--cacert", ca.to_str().unwrap(), "--resolve", &resolve, &format!("https://{name}:{port}/hello")]);
        assert!(ok, "{name}: {err}");
        assert_eq!(out, "hello");
        let other = t.dir.join(if name == "localhost" { "other.test.crt" } else { "localhost.crt" });
        let (ok, _, _) = curl(&[
            "--cacert",
            other.to_str().unwrap(),
            "--resolve",
            &resolve,
            &format!("https://{name}:{port}/hello"),
        ]);
        assert!(!ok, "{name} verified against the other certificate");
    }
    let resolve = format!("unknown.test:{port}:127.0.0.1");
    let (ok, _, err) = curl(&["-k", "--resolve", &resolve, &format!("https://unknown.test:{port}/hello")]);
    assert!(!ok, "unknown SNI was served");
    assert!(err.contains("alert") || err.contains("unrecognized") || err.contains("SSL"), "{err}");
}

#[test]
fn tls12_session_resumption() {
    let t = start_tls(false, settings());
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &t.addr.to_string(), "-tls1_2", "-reconnect", "-servername", "localhost"])
        .stdin(std::process::Stdio::null())
        .output();
    let Ok(out) = out else {
        common::missing_tool("openssl", "tls");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.matches("Reused, TLSv1.2").count() >= 4, "{text}");
}

#[test]
fn plain_http_on_tls_port_is_closed() {
    let t = start_tls(false, settings());
    let mut s = TcpStream::connect(t.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(start.elapsed() < Duration::from_secs(3), "not closed");
    assert!(!String::from_utf8_lossy(&buf).contains("HTTP/1.1 200"), "served plain HTTP");
    // An alert record (content type 21) or nothing at all.
    assert!(buf.is_empty() || buf[0] == 21, "{buf:?}");
}

#[test]
fn stalled_handshake_times_out() {
    let mut cfg = settings();
    cfg.tls_handshake_timeout = Duration::from_millis(500);
    let t = start_tls(false, cfg);
    let mut s = TcpStream::connect(t.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&[0x16, 0x03, 0x01]).unwrap(); // the start of a ClientHello, then nothing
    let start = Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let t = start.elapsed();
    assert!(t >= Duration::from_millis(400) && t < Duration::from_millis(2000), "closed after {t:?}");
}

/// `openssl s_client` to `addr` with `-servername name` and extra arguments, stdin closed,
/// waiting at most 10 s: (exit code, stdout+stderr). `None` without openssl.
fn s_client(addr: SocketAddr, name: &str, extra: &[&str]) -> Option<(Option<i32>, String)> {
    let out = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", &addr.to_string(), "-servername", name])
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    if out.status.code() == Some(127) {
        return None;
    }
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.code(), text))
}

#[test]
fn managed_certificates_and_acme_tls_alpn_challenges() {
    let dir = std::env::temp_dir().join(format!("selvedge-tls-managed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c1, k1) = cert(&dir, "localhost");
    let (c2, k2) = cert(&dir, "acme.test");
    let (c3, k3) = cert(&dir, "challenge.test");
    let default = CertKey::from_pem_files(vec!["localhost".into()], &c1, &k1).unwrap();
    let managed = ManagedCerts::new();
    managed.set("acme", vec!["acme.test".into()], None);
    let challenge = CertKey::from_pem_files(vec![], &c3, &k3).unwrap();
    managed.set_challenge_responder(move |name| (name == "acme.test").then(|| challenge.clone()));
    // Not strict: an unknown name gets the default certificate, a managed one never does.
    let store = CertStore::new(vec![default]).with_managed(managed.clone());
    let tc = server_config_with_store(store, false, true).unwrap();
    let h = Server::new(settings()).bind_tls("127.0.0.1:0".parse::<SocketAddr>().unwrap(), tc).start(app).unwrap();
    let port = h.tcp_addr().unwrap().port();
    let get = |name: &str, ca: &PathBuf| {
        let resolve = format!("{name}:{port}:127.0.0.1");
        curl(&["--cacert", ca.to_str().unwrap(), "--resolve", &resolve, &format!("https://{name}:{port}/hello")])
    };
    let (ok, _, err) = get("unknown.test", &c1);
    assert!(!ok && err.contains("unknown.test"), "the default certificate must not match: {err}");
    let (ok, _, err) = get("acme.test", &c1);
    assert!(!ok, "a managed name without a certificate was served");
    assert!(err.contains("alert") || err.contains("denied"), "{err}");

    // A TLS-ALPN-01 validation gets the responder's certificate and is closed after the
    // handshake (openssl waits for the server with -ign_eof: timeout's 124 means it did not
    // close); a name the responder does not know is refused.
    let Some((code, out)) = s_client(h.tcp_addr().unwrap(), "acme.test", &["-alpn", "acme-tls/1", "-ign_eof"]) else {
        common::missing_tool("openssl", "tls acme-tls/1");
        return;
    };
    assert!(out.contains("ALPN protocol: acme-tls/1"), "{out}");
    let challenge_pem = std::fs::read_to_string(&c3).unwrap();
    assert!(out.contains(challenge_pem.trim()), "not the challenge certificate: {out}");
    assert_ne!(code, Some(124), "the acme-tls/1 connection was not closed: {out}");
    let (_, out) = s_client(h.tcp_addr().unwrap(), "other.test", &["-alpn", "acme-tls/1"]).unwrap();
    assert!(out.contains("alert") && !out.contains("ALPN protocol: acme-tls/1"), "{out}");
    // Offering acme-tls/1 next to another protocol is an ordinary handshake.
    let (_, out) = s_client(h.tcp_addr().unwrap(), "localhost", &["-alpn", "h2,acme-tls/1"]).unwrap();
    assert!(out.contains("ALPN protocol: h2"), "{out}");

    // Installed: served at once, without a restart; removed: the default again.
    managed.set("acme", vec!["acme.test".into()], Some(CertKey::from_pem_files(vec![], &c2, &k2).unwrap()));
    assert!(managed.has_cert("acme"));
    let (ok, out, err) = get("acme.test", &c2);
    assert!(ok, "{err}");
    assert_eq!(out, "hello");
    managed.remove("acme");
    let (ok, _, _) = get("acme.test", &c2);
    assert!(!ok, "a removed certificate was still served");
    let (ok, out, _) =
        curl(&["-k", "--resolve", &format!("acme.test:{port}:127.0.0.1"), &format!("https://acme.test:{port}/hello")]);
    assert!(ok && out == "hello", "the default certificate after removal: {out}");
    h.shutdown();
    h.join();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file sent over HTTP/2 and TLS goes out in full records: each DATA frame's 9-byte header
/// shares a record with payload bytes instead of taking a record of its own (which would
/// double the records, and the client's decryptions, for a large file). The client reads
/// the ciphertext itself and counts the records that carry the 1 MiB response.
#[test]
fn http2_file_data_goes_out_in_full_records() {
    const SIZE: usize = 1 << 20;
    let dir = std::env::temp_dir().join(format!("selvedge-tls-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = Arc::new(dir.join("big.bin"));
    std::fs::write(&*file, (0..SIZE).map(|i| (i % 251) as u8).collect::<Vec<u8>>()).unwrap();
    let served = file.clone();
    let t = start_tls_app(false, settings(), move |_req: selvedge::Request| {
        let f = served.clone();
        async move { selvedge::Response::file(selvedge::http::StatusCode::OK, &*f).unwrap() }
    });
    let c = t.dir.join("localhost.crt");

    let mut roots = rustls::RootCertStore::empty();
    for der in rustls::pki_types::CertificateDer::pem_file_iter(&c).unwrap() {
        roots.add(der.unwrap()).unwrap();
    }
    let mut cc = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cc.alpn_protocols = vec![b"h2".to_vec()];
    let mut conn = rustls::ClientConnection::new(Arc::new(cc), "localhost".try_into().unwrap()).unwrap();
    let mut sock = TcpStream::connect(t.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // rustls takes a few KB per read_tls.
    let feed = |conn: &mut rustls::ClientConnection, mut rec: &[u8]| {
        while !rec.is_empty() {
            conn.read_tls(&mut rec).unwrap();
        }
    };
    // Ciphertext goes to rustls one whole record at a time (from the handshake on, so the
    // reads stay on record boundaries).
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut next_record = |raw: &mut Vec<u8>, sock: &mut TcpStream| -> Vec<u8> {
        loop {
            if raw.len() >= 5 {
                let len = 5 + u16::from_be_bytes([raw[3], raw[4]]) as usize;
                if raw.len() >= len {
                    return raw.drain(..len).collect();
                }
            }
            let n = sock.read(&mut buf).expect("the server's records before the timeout");
            assert!(n > 0, "the server closed the connection");
            raw.extend_from_slice(&buf[..n]);
        }
    };
    while conn.is_handshaking() {
        while conn.wants_write() {
            conn.write_tls(&mut sock).unwrap();
        }
        if conn.is_handshaking() {
            let rec = next_record(&mut raw, &mut sock);
            feed(&mut conn, &rec);
            conn.process_new_packets().unwrap();
        }
    }
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));

    // The preface, a 1 GiB stream window and connection window, the request.
    let mut out = PREFACE.to_vec();
    out.extend(h2::raw(kind::SETTINGS, 0, 0, &[0, 4, 0x40, 0, 0, 0]));
    out.extend(h2::raw(kind::WINDOW_UPDATE, 0, 0, &(1u32 << 30).to_be_bytes()));
    let fields = [(":method", "GET"), (":scheme", "https"), (":path", "/big.bin"), (":authority", "localhost")];
    let mut block = BytesMut::new();
    hpack::Encoder::new().encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), &mut block);
    frame::Headers::encode(1, &block, true, 16_384, &mut out);
    conn.writer().write_all(&out).unwrap();
    while conn.wants_write() {
        conn.write_tls(&mut sock).unwrap();
    }

    // Read record by record until stream 1 ends, counting the records from the response's
    // first byte on.
    let mut plain = BytesMut::new();
    let (mut got, mut records, mut ended, mut response_seen) = (0usize, 0usize, false, false);
    while !ended {
        let rec = next_record(&mut raw, &mut sock);
        feed(&mut conn, &rec);
        conn.process_new_packets().unwrap();
        let mut piece = Vec::new();
        let _ = conn.reader().read_to_end(&mut piece);
        if response_seen && !piece.is_empty() {
            records += 1;
        }
        plain.extend_from_slice(&piece);
        // Whole frames: DATA on stream 1 counts, its END_STREAM ends the test.
        while let Some(f) = decode_frame(&mut plain, frame::MAX_MAX_FRAME_SIZE).unwrap() {
            match f {
                Frame::Headers(h) if h.stream == 1 => response_seen = true,
                Frame::Data(d) if d.stream == 1 => {
                    got += d.data.len();
                    ended = d.end_stream;
                }
                _ => {}
            }
        }
    }
    assert_eq!(got, SIZE);
    // 64 full records, and a short one at the end of each write (a 112 KiB batch is seven
    // frames and their headers, a little over seven records); a record per frame header
    // would make it 128.
    let full = SIZE.div_ceil(16_384);
    assert!(records <= full * 5 / 4, "{records} records for {got} bytes of DATA ({full} would be full records)");
    drop(t);
    let _ = std::fs::remove_dir_all(&dir);
}
