//! HTTP/2 upstreams (`http2 = true`): the `selvedge` binary as the proxy in front of
//! another `selvedge serve`, over h2c (prior knowledge) and over TLS (ALPN `h2`, with a
//! test CA); the upstream's access log shows the protocol it was spoken to in, `ss` counts
//! the upstream connections under 100 concurrent client streams (h2load), and a Python
//! grpcio server behind the proxy answers a grpcio client in front of it; an upstream with
//! a limit of 2 streams gets more connections, not refused requests; an `https://` upstream
//! without `h2` in ALPN is served over HTTP/1.1.

mod common;

use std::process::Command;

use common::pki::{leaf, Pki};
use common::{eventually, have, Srv, TempDir};

fn proxy(d: &TempDir, table: &str, listen_tls: Option<(&str, &str)>) -> Srv {
    let tls = listen_tls.map_or(String::new(), |(c, k)| format!("tls = {{ cert = \"{c}\", key = \"{k}\" }}\n"));
    let cfg = d.write(
        "proxy.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nport = 0\n{tls}[[vhost]]\n[[vhost.route]]\npath = \"/\"\nproxy = {{ {table} }}\n"
        ),
    );
    Srv::start(&["--config", cfg.to_str().unwrap()])
}

/// Established TCP connections to local port `port` (the upstream's side of each).
fn established_to(port: u16) -> usize {
    let out =
        Command::new("ss").args(["-Htn", "state", "established", &format!("( sport = :{port} )")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A child process killed when dropped (also when an assertion fails).
struct Kid(std::process::Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn curl(args: &[&str]) -> (String, String) {
    let out = Command::new("curl").args(["-sS", "--max-time", "10"]).args(args).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn site() -> TempDir {
    let site = TempDir::new("pxh2-site");
    site.write("index.html", "<h1>over h2</h1>\n");
    site.write("big.bin", vec![b'x'; 256 * 1024]);
    site
}

#[test]
fn h2c_upstream_multiplexes_100_streams_over_few_connections() {
    if !have("h2load") || !have("ss") {
        common::missing_tool("h2load and ss", "proxy_h2");
        return;
    }
    let d = TempDir::new("pxh2c");
    let site = site();
    let log = d.path().join("up.log");
    let up = Srv::start(&[
        "serve",
        site.path().to_str().unwrap(),
        "--port",
        "0",
        "--workers",
        "1",
        "--access-log",
        log.to_str().unwrap(),
    ]);
    let port = up.addr.port();
    let px = proxy(&d, &format!("upstream = \"http://127.0.0.1:{port}\", http2 = true"), None);
    let url = format!("http://{}/index.html", px.addr);
    // An HTTP/1.1 client and an HTTP/2 client, both carried over HTTP/2 upstream.
    assert_eq!(curl(&[&url]).0, "<h1>over h2</h1>\n");
    assert_eq!(curl(&["--http2-prior-knowledge", &url]).0, "<h1>over h2</h1>\n");
    let r = px.get("/missing");
    assert_eq!(r.status, 404);
    eventually(5, "the upstream logs HTTP/2 requests", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.lines().filter(|l| l.contains("HTTP/2")).count() >= 3)
    });

    // 100 concurrent client streams (10 connections x 10 streams) of 256 KiB each.
    let big = format!("http://{}/big.bin", px.addr);
    let out = Command::new("h2load").args(["-n", "1000", "-c", "10", "-m", "10", &big]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1000 succeeded, 0 failed"), "{text}");
    assert!(text.contains("status codes: 1000 2xx"), "{text}");
    let conns = established_to(port);
    eprintln!("upstream connections after 100 concurrent streams: {conns}");
    assert!((1..10).contains(&conns), "{conns} upstream connections for 100 concurrent streams");

    // The upstream goes away: 502 (not a hang), and it is used again once back.
    drop(up);
    assert_eq!(px.get("/index.html").status, 502);
}

#[test]
fn h2_upstream_over_tls_with_alpn() {
    let d = TempDir::new("pxh2tls");
    let (pki, issuer) = Pki::ca(&d, "h2");
    let server = leaf(&d, &issuer, "server", &["localhost", "127.0.0.1"], false);
    let site = site();
    let log = d.path().join("up.log");
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
        "--access-log",
        log.to_str().unwrap(),
    ]);
    let ca = pki.ca.to_str().unwrap();
    let port = up.addr.port();
    let px =
        proxy(&d, &format!("upstream = \"https://localhost:{port}\", http2 = true, tls = {{ ca = \"{ca}\" }}"), None);
    for _ in 0..3 {
        let r = px.get("/index.html");
        assert_eq!((r.status, r.text().as_str()), (200, "<h1>over h2</h1>\n"));
    }
    eventually(5, "the upstream logs HTTP/2 requests", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.lines().filter(|l| l.contains("HTTP/2")).count() >= 3)
    });
    // Verification stays on: an unknown CA is a 502.
    let (other, _) = Pki::ca(&d, "other");
    let oca = other.ca.to_str().unwrap();
    let px =
        proxy(&d, &format!("upstream = \"https://localhost:{port}\", http2 = true, tls = {{ ca = \"{oca}\" }}"), None);
    assert_eq!(px.get("/index.html").status, 502);
}

/// An upstream whose SETTINGS_MAX_CONCURRENT_STREAMS is 2: 40 concurrent client streams
/// are spread over more connections (each opened only when the others are full), none
/// refused, all answered.
#[test]
fn a_full_upstream_connection_opens_another() {
    if !have("h2load") || !have("ss") {
        common::missing_tool("h2load and ss", "proxy_h2");
        return;
    }
    let d = TempDir::new("pxh2-more");
    let site = site();
    let cfg = d.write(
        "up.toml",
        format!(
            "[server]\nworkers = 1\n[[listen]]\nhost = \"127.0.0.1\"\nport = 0\n[http2]\nmax_concurrent_streams = 2\n\
             [[vhost]]\n[[vhost.route]]\npath = \"/\"\nroot = \"{}\"\n",
            site.path().display()
        ),
    );
    let up = Srv::start(&["--config", cfg.to_str().unwrap()]);
    let port = up.addr.port();
    let px = proxy(&d, &format!("upstream = \"http://127.0.0.1:{port}\", http2 = true"), None);
    let big = format!("http://{}/big.bin", px.addr);
    let out = Command::new("h2load").args(["-n", "400", "-c", "4", "-m", "10", &big]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("400 succeeded, 0 failed"), "{text}");
    assert!(text.contains("status codes: 400 2xx"), "{text}");
    let conns = established_to(port);
    eprintln!("upstream connections for 40 concurrent streams, 2 per connection: {conns}");
    assert!(conns >= 2, "{conns} upstream connection(s): a full one did not lead to another");
    assert!(conns <= 20, "{conns} upstream connections for 40 streams at 2 each");
}

/// An `https://` upstream that offers only `http/1.1` in ALPN (a Python TLS server): the
/// proxy serves it over HTTP/1.1, says so once, and keeps to HTTP/1.1 for the next
/// requests instead of asking again each time.
#[test]
fn an_upstream_without_h2_in_alpn_is_served_over_http1() {
    let d = TempDir::new("pxh2-alpn");
    let (pki, issuer) = Pki::ca(&d, "alpn");
    let server = leaf(&d, &issuer, "server", &["localhost", "127.0.0.1"], false);
    let script = d.write(
        "h1.py",
        r#"import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("h1 " + self.request_version + " " + self.path + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
ctx.set_alpn_protocols(["http/1.1"])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#,
    );
    let mut child = Command::new("python3")
        .arg(&script)
        .args([&server.cert, &server.key])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let _py = Kid(child);
    let port: u16 = line.trim().parse().expect("the upstream's port");
    let ca = pki.ca.to_str().unwrap();
    let px =
        proxy(&d, &format!("upstream = \"https://localhost:{port}\", http2 = true, tls = {{ ca = \"{ca}\" }}"), None);
    for i in 0..3 {
        let r = px.get(&format!("/n{i}"));
        assert_eq!((r.status, r.text()), (200, format!("h1 HTTP/1.1 /n{i}\n")), "{:?}", px.stderr.lock().unwrap());
    }
    let said = px.stderr.lock().unwrap().iter().filter(|l| l.contains("no h2 in ALPN, using HTTP/1.1")).count();
    assert_eq!(said, 1, "{:?}", px.stderr.lock().unwrap());
}

/// The Python gRPC server and client (`grpc_peer.py`) against the proxy, over h2c and
/// over TLS at both hops.
#[test]
fn grpc_through_the_proxy() {
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc_peer.py");
    let ok = Command::new("python3").args(["-c", "import grpc"]).status().is_ok_and(|s| s.success());
    if !ok {
        common::missing_tool("python3 grpcio", "proxy_h2 grpc");
        return;
    }
    let d = TempDir::new("pxgrpc");
    let (pki, issuer) = Pki::ca(&d, "grpc");
    let server = leaf(&d, &issuer, "server", &["localhost", "127.0.0.1"], false);
    let ca = pki.ca.to_str().unwrap().to_string();
    for tls in [false, true] {
        let mut up = Command::new("python3");
        up.arg(&py).arg("serve").stdout(std::process::Stdio::piped());
        if tls {
            up.args(["--cert", &server.cert, "--key", &server.key]);
        }
        let mut up = Kid(up.spawn().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(up.0.stdout.take().unwrap()), &mut line).unwrap();
        let port: u16 = line.trim().parse().unwrap();
        let table = if tls {
            format!("upstream = \"https://localhost:{port}\", http2 = true, tls = {{ ca = \"{ca}\" }}")
        } else {
            format!("upstream = \"http://127.0.0.1:{port}\", http2 = true")
        };
        let px = proxy(&d, &table, tls.then_some((server.cert.as_str(), server.key.as_str())));
        let mut client = Command::new("python3");
        client.arg(&py).arg("client").arg(format!("localhost:{}", px.addr.port()));
        if tls {
            client.args(["--ca", &ca]);
        }
        let out = client.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "tls={tls}: {text}");
        for case in ["unary ok", "server_streaming ok", "client_streaming ok", "bidi ok", "error ok", "deadline ok"] {
            assert!(text.contains(case), "tls={tls}: {case} missing in {text}");
        }
        // The upstream gone: UNAVAILABLE from the proxy, as a gRPC status.
        drop(up);
        let out = client.arg("--unavailable").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("unavailable ok"), "tls={tls}: {text}");
    }
}
