//! TLS over real sockets with a self-signed certificate made in the test: curl over HTTP/1.1
//! and HTTP/2 (ALPN), SNI choosing the certificate, session resumption, and bad input (plain
//! HTTP on the TLS port, a stalled handshake, an unknown SNI name).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::app::app;
use common::*;
use selvedge::tls::{server_config, CertKey};
use selvedge::Server;

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

fn start_tls(strict_sni: bool, mut cfg: selvedge::Settings) -> Tls {
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
        assert!(std::env::var_os("CI").is_none(), "openssl is not installed (CI must install it)");
        eprintln!("openssl not installed; skipping");
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
