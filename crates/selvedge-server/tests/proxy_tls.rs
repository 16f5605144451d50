//! `https://` upstreams, with a test CA generated here: the `selvedge` binary as the proxy in
//! front of `selvedge serve --tls-cert`, a Python TLS echo server (bodies both ways), a
//! Python `websockets` server over TLS (the tunnel) and nginx requiring a client certificate (its access log shows the connection, the session
//! resumption and the client's certificate).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

use common::pki::{leaf, Pki};
use common::{connect, eventually, free_port, have, parse, Srv, TempDir};

fn proxy(d: &TempDir, table: &str) -> Srv {
    let cfg = d.write(
        "proxy.toml",
        format!("[server]\nworkers = 1\n[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ {table} }}\n"),
    );
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn https_upstream_verified_by_a_test_ca() {
    let d = TempDir::new("pxtls");
    let (pki, issuer) = Pki::ca(&d, "good");
    let (other, _) = Pki::ca(&d, "other");
    let server = leaf(&d, &issuer, "server", &["localhost", "127.0.0.1"], false);
    let site = TempDir::new("pxtls-site");
    site.write("index.html", "<h1>over tls</h1>\n");
    let up = Srv::start(&[
        "serve",
        site.path().to_str().unwrap(),
        "--port",
        "0",
        "--workers",
        "1",
        "--tls-cert",
        &server.cert,
        "--tls-key",
        &server.key,
    ]);
    let port = up.addr.port();
    let ca = pki.ca.to_str().unwrap();

    // Verified against the test CA, by name and by IP address.
    for host in ["localhost", "127.0.0.1"] {
        let px = proxy(&d, &format!("upstream = \"https://{host}:{port}\", tls = {{ ca = \"{ca}\" }}"));
        for _ in 0..3 {
            let r = px.get("/index.html");
            assert_eq!((r.status, r.text().as_str()), (200, "<h1>over tls</h1>\n"), "{host}");
        }
        assert_eq!(px.get("/missing").status, 404);
    }

    // A name the certificate does not hold: 502 and the reason in the log.
    let px = proxy(
        &d,
        &format!("upstream = \"https://127.0.0.1:{port}\", tls = {{ ca = \"{ca}\", sni = \"api.internal\" }}"),
    );
    assert_eq!(px.get("/index.html").status, 502);
    eventually(5, "a log line for the wrong name", || px.said("certificate not valid for name \"api.internal\""));

    // A CA that did not sign it: 502 and the reason.
    let oca = other.ca.to_str().unwrap();
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{oca}\" }}"));
    assert_eq!(px.get("/index.html").status, 502);
    eventually(5, "a log line for the unknown CA", || px.said("invalid peer certificate: UnknownIssuer"));

    // The system's roots (the default) do not hold the test CA either.
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\""));
    assert_eq!(px.get("/index.html").status, 502);

    // verify = false accepts it.
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ verify = false }}"));
    assert_eq!(px.get("/index.html").status, 200);

    // A plain-HTTP client of a TLS port, and TLS to a plain port: 502, never a hang.
    let plain = Srv::start(&["serve", site.path().to_str().unwrap(), "--port", "0", "--workers", "1"]);
    let px = proxy(&d, &format!("upstream = \"https://localhost:{}\", tls = {{ ca = \"{ca}\" }}", plain.addr.port()));
    assert_eq!(px.get("/index.html").status, 502);
}

/// A self-signed upstream certificate (what `openssl req -x509` makes, marked as a CA) given
/// as `tls.ca` is trusted for itself, byte for byte, and its name is still checked
/// (webpki refused it as a CA used as an end entity).
#[test]
fn a_self_signed_upstream_certificate_is_pinned() {
    let d = TempDir::new("pxtls-self");
    let make = |name: &str| {
        let (cert, key) = (d.path().join(format!("{name}.crt")), d.path().join(format!("{name}.key")));
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .args(["-keyout", key.to_str().unwrap(), "-out", cert.to_str().unwrap()])
            .output();
        match out {
            Ok(o) if o.status.success() => Some((cert, key)),
            _ => None,
        }
    };
    let (Some((cert, key)), Some((other, _))) = (make("self"), make("other")) else {
        common::missing_tool("openssl", "a_self_signed_upstream_certificate_is_pinned");
        return;
    };
    let site = TempDir::new("pxtls-self-site");
    site.write("index.html", "pinned\n");
    let up = Srv::start(&[
        "serve",
        site.path().to_str().unwrap(),
        "--port",
        "0",
        "--workers",
        "1",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let port = up.addr.port();
    let (ca, oca) = (cert.to_str().unwrap(), other.to_str().unwrap());
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{ca}\" }}"));
    let r = px.get("/index.html");
    assert_eq!((r.status, r.text().as_str()), (200, "pinned\n"), "{:?}", px.stderr.lock().unwrap());
    // The name is still checked, and another self-signed certificate is not this one.
    let px = proxy(
        &d,
        &format!("upstream = \"https://127.0.0.1:{port}\", tls = {{ ca = \"{ca}\", sni = \"api.internal\" }}"),
    );
    assert_eq!(px.get("/index.html").status, 502);
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{oca}\" }}"));
    assert_eq!(px.get("/index.html").status, 502);
}

#[test]
fn https_members_of_a_pool() {
    let d = TempDir::new("pxtls-pool");
    let (pki, issuer) = Pki::ca(&d, "pool");
    let server = leaf(&d, &issuer, "server", &["127.0.0.1"], false);
    let ca = pki.ca.to_str().unwrap();
    // Three upstreams, each answering its own name: two over TLS, one plain.
    let mut ups = Vec::new();
    let mut sites = Vec::new();
    for (i, tls) in [true, true, false].into_iter().enumerate() {
        let site = TempDir::new(&format!("pxtls-pool-{i}"));
        site.write("id.txt", format!("u{i}"));
        let mut args = vec!["serve", site.path().to_str().unwrap(), "--port", "0", "--workers", "1"];
        if tls {
            args.extend(["--tls-cert", &server.cert, "--tls-key", &server.key]);
        }
        let up = Srv::start(&args);
        let scheme = if tls { "https" } else { "http" };
        ups.push((format!("\"{scheme}://127.0.0.1:{}\"", up.addr.port()), up));
        sites.push(site);
    }
    let list = ups.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>().join(", ");
    // Active checks go over TLS too: a member whose check failed would be marked down within
    // 3 × 100 ms and the shares below would be off.
    let px = proxy(
        &d,
        &format!(
            "upstreams = [{list}], tls = {{ ca = \"{ca}\" }}, \
             health = {{ path = \"/id.txt\", interval = \"100ms\", timeout = \"1s\" }}"
        ),
    );
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut seen = [0usize; 3];
    for _ in 0..30 {
        let r = px.get("/id.txt");
        assert_eq!(r.status, 200);
        let i: usize = r.text().trim_start_matches('u').parse().unwrap();
        seen[i] += 1;
    }
    assert_eq!(seen, [10, 10, 10], "round robin over two https members and a plain one");
    assert!(!px.said("failed its health checks") && !px.said("marked down"), "no member marked down");
    // A member that answers TLS with plain HTTP fails its checks.
    let plain = &ups[2].1;
    let px = proxy(
        &d,
        &format!(
            "upstreams = [{}, \"https://127.0.0.1:{}\"], tls = {{ ca = \"{ca}\" }}, \
             health = {{ path = \"/id.txt\", interval = \"100ms\", timeout = \"1s\", unhealthy = 2 }}",
            ups[0].0,
            plain.addr.port()
        ),
    );
    eventually(5, "the plain member failing its checks over TLS", || px.said("failed its health checks"));
    for _ in 0..6 {
        assert_eq!(px.get("/id.txt").text(), "u0");
    }
}

#[test]
fn https_upstream_bodies_both_ways() {
    let d = TempDir::new("pxtls-echo");
    let (pki, issuer) = Pki::ca(&d, "echo");
    let server = leaf(&d, &issuer, "server", &["localhost"], false);
    let script = d.write(
        "echo.py",
        r#"import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#,
    );
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(&server.cert)
        .arg(&server.key)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _up = Kid(child);
    let port: u16 = line.trim().parse().expect("the echo server's port");
    let ca = pki.ca.to_str().unwrap();
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{ca}\" }}"));

    // 5 MB up and back, twice over the same client connection.
    let body: Vec<u8> = (0..5u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut s = connect(px.addr);
    for _ in 0..2 {
        write!(s, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", body.len()).unwrap();
        s.write_all(&body).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let r = parse(&head, false).unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        let n: usize = r.header("content-length").expect("a length").parse().unwrap();
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).unwrap();
        assert!(got == body, "the echoed body differs");
    }
}

#[test]
fn websocket_to_an_https_upstream() {
    const WS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ws_echo.py");
    let d = TempDir::new("pxtls-ws");
    let (pki, issuer) = Pki::ca(&d, "ws");
    let server = leaf(&d, &issuer, "server", &["localhost"], false);
    let mut child = Command::new("python3")
        .args([WS, "serve-tls", &server.cert, &server.key])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _up = Kid(child);
    let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("the wss upstream did not start: {line:?}"));
    let ca = pki.ca.to_str().unwrap();
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{ca}\" }}"));
    // Text, a 1 MiB message and 100 in a row through the tunnel over TLS.
    let out = Command::new("python3").args([WS, "client", &format!("ws://{}/chat", px.addr)]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn client_certificate_to_an_upstream_that_requires_one() {
    if !have("nginx") {
        common::missing_tool("nginx", "proxy_tls");
        return;
    }
    let d = TempDir::new("pxtls-mtls");
    let (pki, issuer) = Pki::ca(&d, "mtls");
    let server = leaf(&d, &issuer, "server", &["localhost"], false);
    let client = leaf(&d, &issuer, "client", &["selvedge-client"], true);
    let ca = pki.ca.to_str().unwrap();
    let port = free_port();
    let dir = d.path().to_str().unwrap();
    let conf = d.write(
        "nginx.conf",
        format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  log_format t '$connection $ssl_session_reused $ssl_client_verify';\n  access_log {dir}/access.log t;\n\
             client_body_temp_path {dir}/cb; proxy_temp_path {dir}/px; fastcgi_temp_path {dir}/fc; uwsgi_temp_path {dir}/uw; scgi_temp_path {dir}/sc;\n\
             server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {};\n    ssl_certificate_key {};\n\
             ssl_client_certificate {ca};\n    ssl_verify_client on;\n    ssl_session_cache shared:s:1m;\n\
             location / {{ return 200 \"hello $ssl_client_s_dn\\n\"; }}\n  }}\n}}\n",
            server.cert, server.key
        ),
    );
    let nginx = Command::new("nginx")
        .args(["-p", dir, "-e", &format!("{dir}/error.log"), "-c", conf.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    let _nginx = Kid(nginx);
    eventually(10, "nginx listening", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let log = || std::fs::read_to_string(d.path().join("access.log")).unwrap_or_default();

    // Without a certificate nginx refuses the request (its 400 is passed on).
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ ca = \"{ca}\" }}"));
    assert_eq!(px.get("/").status, 400);
    drop(px);

    // With one: accepted, and the kept connection carries every request.
    let tls = format!("ca = \"{ca}\", client_cert = \"{}\", client_key = \"{}\"", client.cert, client.key);
    let before = log().lines().count();
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", tls = {{ {tls} }}"));
    for _ in 0..5 {
        let r = px.get("/");
        assert_eq!((r.status, r.text().as_str()), (200, "hello CN=client\n"));
    }
    eventually(5, "five log lines", || log().lines().count() == before + 5);
    let lines: Vec<String> = log().lines().skip(before).map(str::to_string).collect();
    let conns: std::collections::HashSet<_> = lines.iter().map(|l| l.split(' ').next().unwrap().to_string()).collect();
    assert_eq!(conns.len(), 1, "one upstream connection: {lines:?}");
    assert!(lines.iter().all(|l| l.ends_with(" SUCCESS")), "{lines:?}");
    drop(px);

    // A connection per request (max_idle = 0): the later ones resume the TLS session.
    let before = log().lines().count();
    let px = proxy(&d, &format!("upstream = \"https://localhost:{port}\", max_idle = 0, tls = {{ {tls} }}"));
    for _ in 0..3 {
        assert_eq!(px.get("/").status, 200);
    }
    eventually(5, "three log lines", || log().lines().count() == before + 3);
    let lines: Vec<String> = log().lines().skip(before).map(str::to_string).collect();
    let conns: std::collections::HashSet<_> = lines.iter().map(|l| l.split(' ').next().unwrap().to_string()).collect();
    assert_eq!(conns.len(), 3, "{lines:?}");
    assert!(lines[1..].iter().all(|l| l.contains(" r ")), "sessions resumed: {lines:?}");
}

#[test]
fn tls_settings_are_checked_when_loading() {
    let d = TempDir::new("pxtls-cfg");
    let bad = |table: &str| {
        let cfg = d.write(
            "bad.toml",
            format!("[[listen]]\nport = 0\n[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ {table} }}\n"),
        );
        let out = Command::new(common::BIN).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
        assert!(!out.status.success(), "{table} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = bad("upstream = \"http://127.0.0.1:1\", tls = { verify = false }");
    assert!(e.contains("https://"), "{e}");
    let e = bad("upstream = \"https://127.0.0.1:1\", tls = { ca = \"/nonexistent.pem\" }");
    assert!(e.contains("/nonexistent.pem"), "{e}");
    let e = bad("upstream = \"https://127.0.0.1:1\", tls = { client_cert = \"/x.pem\" }");
    assert!(e.contains("client_key"), "{e}");
    let e = bad("upstream = \"https://127.0.0.1:1\", tls = { verfy = false }");
    assert!(e.contains("verfy"), "{e}");
}
