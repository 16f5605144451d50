//! The server over HTTP/3 (QUIC): `serve --http3` and `quic = true` in the config, with
//! real clients: aioquic's HTTP/3 client (a page, a 10 MB file byte for byte, 100 streams
//! on one connection), curl over HTTP/1.1 and HTTP/2 seeing `Alt-Svc`, headless Chromium
//! forced onto QUIC loading the bundled site with every resource logged as `HTTP/3.0`, and
//! a SIGHUP reload that keeps a QUIC connection alive while new handshakes get the new
//! certificate.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use common::*;
use serde_json::Value;

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../selvedge/tests/h3_client.py");

/// A self-signed certificate for `name`: the PEM files, and the base64 SHA-256 of its
/// public key (what Chromium's `--ignore-certificate-errors-spki-list` takes: its QUIC
/// stack does not honour `--ignore-certificate-errors`).
fn cert(dir: &Path, name: &str, file: &str) -> (String, String, String) {
    let ck = rcgen::generate_simple_self_signed(vec![name.to_string()]).unwrap();
    let (c, k) = (dir.join(format!("{file}.crt")), dir.join(format!("{file}.key")));
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
    let spki =
        ring::digest::digest(&ring::digest::SHA256, &rcgen::PublicKeyData::subject_public_key_info(&ck.signing_key));
    let spki = base64::engine::general_purpose::STANDARD.encode(spki.as_ref());
    (c.to_str().unwrap().to_string(), k.to_str().unwrap().to_string(), spki)
}

fn h3(port: u16, args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(CLIENT)
        .args(["127.0.0.1", &port.to_string()])
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "h3 client failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn curl_headers(args: &[&str]) -> String {
    let out = Command::new("curl").args(["-sS", "-k", "-o", "/dev/null", "-D", "-"]).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

#[test]
fn serve_http3_a_page_a_10mb_file_100_streams_and_alt_svc() {
    let dir = TempDir::new("h3-serve");
    dir.write("site/index.html", "<html>over h3</html>\n");
    let big: Vec<u8> = (0..10_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    dir.write("site/big.bin", &big);
    let (c, k, _) = cert(dir.path(), "localhost", "a");
    let log = dir.path().join("access.log");
    let site = dir.path().join("site");
    let srv = Srv::start(&[
        "serve",
        site.to_str().unwrap(),
        "--port",
        "0",
        "--tls-cert",
        &c,
        "--tls-key",
        &k,
        "--http3",
        "--log",
        log.to_str().unwrap(),
    ]);
    let port = srv.addr.port();
    assert!(srv.said(&format!("https://127.0.0.1:{port}/ (and HTTP/3 on UDP port {port})")), "{:?}", srv.stderr);
    let r = h3(port, &["get", "/", "/big.bin"]);
    let (page, file) = (&r["responses"][0], &r["responses"][1]);
    assert_eq!(page["status"], 200, "{r}");
    assert_eq!(page["sha256"], sha256_hex(b"<html>over h3</html>\n"));
    assert_eq!(file["status"], 200);
    assert_eq!(file["len"], 10_000_000);
    assert_eq!(file["sha256"], sha256_hex(&big), "the 10 MB file differs");
    let r = h3(port, &["many", "/", "100"]);
    let statuses = r["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 100);
    assert!(statuses.iter().all(|s| s == 200), "{r}");
    // HTTP/1.1 and HTTP/2 responses of the listener point to HTTP/3.
    let url = format!("https://127.0.0.1:{port}/");
    for flag in ["--http1.1", "--http2"] {
        let h = curl_headers(&[flag, &url]);
        assert!(h.contains(&format!("alt-svc: h3=\":{port}\"; ma=86400\r\n")), "{flag}: {h}");
    }
    srv.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\"GET /big.bin HTTP/3.0\" 200 10000000 "), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("\"GET / HTTP/3.0\" 200 ")).count(), 101, "{text}");
}

#[test]
fn config_quic_listener_limits_and_errors() {
    let dir = TempDir::new("h3-config");
    dir.write("site/index.html", "<html>config</html>\n");
    let (c, k, _) = cert(dir.path(), "localhost", "a");
    let port = free_udp_tcp_port();
    let cfg = format!(
        "[http3]\nmax_concurrent_streams = 5\n\
         [[listen]]\nport = {port}\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\nquic = true\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"site\"\n"
    );
    let file = dir.write("selvedge.toml", cfg);
    let _srv = Srv::start(&["--config", file.to_str().unwrap()]);
    let r = h3(port, &["get", "/"]);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    // [http3] max_concurrent_streams: a client that ignores it is cut off (STREAM_LIMIT_ERROR).
    let r = h3(port, &["over_limit", "/", "20"]);
    assert_eq!(r["closed"]["error_code"], 4, "{r}");

    // quic without tls is refused at load time.
    let bad = dir.write("bad.toml", "[[listen]]\nport = 0\nquic = true\n");
    let out =
        Command::new(env!("CARGO_BIN_EXE_selvedge")).args(["check", "-c", bad.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("quic = true needs tls"), "{out:?}");
}

/// An HTTP/3 `:path` that HTTP/1.1 cannot carry (a space) is answered 400 by a proxy route
/// and never reaches the upstream; a plain one does (HTTP/3 heads are checked only for NUL,
/// CR and LF, so the proxy checks what it writes into the upstream's request line).
#[test]
fn http3_target_http11_cannot_carry_is_refused_by_a_proxy_route() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let dir = TempDir::new("h3-proxy");
    let (c, k, _) = cert(dir.path(), "localhost", "a");
    // The upstream: records every request head and answers each with 200 "ok".
    let up = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up_port = up.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in up.incoming() {
            let Ok(mut conn) = conn else { return };
            let record = record.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = conn.read(&mut chunk) {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        record.lock().unwrap().extend(buf.drain(..end + 4));
                        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                    }
                }
            });
        }
    });
    let port = free_udp_tcp_port();
    let cfg = format!(
        "[[listen]]\nport = {port}\ntls = {{ cert = \"{c}\", key = \"{k}\" }}\nquic = true\n\
         [[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ upstream = \"http://127.0.0.1:{up_port}\" }}\n"
    );
    let file = dir.write("selvedge.toml", cfg);
    let _srv = Srv::start(&["--config", file.to_str().unwrap()]);
    // A space in :path is a byte of the path: normalized, it goes upstream encoded.
    let r = h3(port, &["get", "/a b"]);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    let r = h3(port, &["get", "/ok"]);
    assert_eq!(r["responses"][0]["status"], 200, "{r}");
    let seen = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert!(seen.starts_with("GET /a%20b HTTP/1.1\r\n"), "the upstream saw: {seen:?}");
    assert!(seen.contains("\r\n\r\nGET /ok HTTP/1.1\r\n"), "the upstream saw: {seen:?}");
    assert!(!seen.contains("/a b"), "the upstream saw: {seen:?}");
}

/// A port free for both TCP and UDP on 127.0.0.1 (below the ephemeral range:
/// [`free_port`]).
fn free_udp_tcp_port() -> u16 {
    loop {
        let port = free_port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

#[test]
fn sighup_keeps_quic_connections_and_new_handshakes_get_the_new_certificate() {
    let dir = TempDir::new("h3-reload");
    dir.write("site/index.html", "<html>reload</html>\n");
    let (c, k, _) = cert(dir.path(), "localhost", "live");
    let site = dir.path().join("site");
    let srv =
        Srv::start(&["serve", site.to_str().unwrap(), "--port", "0", "--tls-cert", &c, "--tls-key", &k, "--http3"]);
    let port = srv.addr.port();
    let before = h3(port, &["cert"]);
    // A connection that makes a request, waits across the reload, and makes another.
    let child = Command::new("python3")
        .arg(CLIENT)
        .args(["127.0.0.1", &port.to_string(), "twice", "/", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let (nc, nk, _) = cert(dir.path(), "localhost", "next");
    std::fs::copy(&nc, &c).unwrap();
    std::fs::copy(&nk, &k).unwrap();
    srv.signal("HUP");
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(r["statuses"], serde_json::json!([200, 200]), "{r}");
    assert!(r["closed"].is_null(), "the connection did not survive the reload: {r}");
    let after = h3(port, &["cert"]);
    assert_ne!(before["cert"], after["cert"], "new QUIC handshakes still get the old certificate");
}

#[test]
fn bundled_site_in_headless_chromium_over_http3() {
    let Some(chromium) =
        ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
    else {
        panic!("chromium is not installed (.ci/run installs it)");
    };
    let dir = TempDir::new("h3-chromium");
    let (c, k, spki) = cert(dir.path(), "localhost", "a");
    let log = dir.path().join("access.log");
    let site = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/site");
    let srv = Srv::start(&[
        "serve",
        site,
        "--port",
        "0",
        "--tls-cert",
        &c,
        "--tls-key",
        &k,
        "--http3",
        "--log",
        log.to_str().unwrap(),
    ]);
    let origin = format!("127.0.0.1:{}", srv.addr.port());
    let profile = dir.path().join("profile");
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--ignore-certificate-errors",
            &format!("--ignore-certificate-errors-spki-list={spki}"),
            "--enable-quic",
            &format!("--origin-to-force-quic-on={origin}"),
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            &format!("--user-data-dir={}", profile.display()),
            "--virtual-time-budget=3000",
            "--dump-dom",
            &format!("https://{origin}/"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dom.stdout);
    assert!(text.contains("The script ran."), "script did not run: {text}");
    srv.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.is_empty(), "nothing logged");
    for path in ["/ ", "/style.css ", "/app.js ", "/logo.svg "] {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("\"GET {path}")))
            .unwrap_or_else(|| panic!("{path} not in the access log:\n{text}"));
        assert!(line.contains("HTTP/3.0\" 200 "), "{path} not over HTTP/3: {line}");
    }
    assert!(text.lines().all(|l| l.contains("HTTP/3.0\"")), "a request not over HTTP/3:\n{text}");
}
